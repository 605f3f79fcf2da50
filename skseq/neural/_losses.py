"""Training losses (value and gradient) and validation scores with masks.

Every function takes *element weights* of the shape of what it compares:
zero where a target is masked (a NaN regression target, a zero
``sample_weight``), positive elsewhere.  Losses are weighted sums divided by
a ``normaliser`` given by the caller -- the total weight of the whole
minibatch -- so that the losses and gradients of disjoint shards of a
minibatch add up to those of the minibatch.
"""

import numpy as np

__all__ = [
    "squared_error",
    "softmax",
    "softmax_cross_entropy",
    "weighted_r2_score",
    "weighted_accuracy",
]


def squared_error(outputs, targets, weights, normaliser):
    """Half the weighted squared error, ``0.5 * sum(w * (outputs - targets)**2) / normaliser``.

    Parameters
    ----------
    outputs, targets, weights : ndarray of the same shape
        ``targets`` must be finite where ``weights`` is zero too (put 0 there).
    normaliser : float

    Returns
    -------
    loss : float
    grad_outputs : ndarray like ``outputs``

    Examples
    --------
    >>> import numpy as np
    >>> loss, grad = squared_error(np.array([1.0, 3.0]), np.array([0.0, 0.0]),
    ...                            np.array([1.0, 0.0]), normaliser=1.0)
    >>> loss, grad
    (0.5, array([1., 0.]))
    """
    weighted_residual = weights * (outputs - targets)
    loss = 0.5 * float(np.vdot(weighted_residual, outputs - targets)) / normaliser
    return loss, (weighted_residual / normaliser).astype(outputs.dtype, copy=False)


def softmax(logits):
    """Softmax over the last axis, computed after subtracting the maximum."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exponentials = np.exp(shifted)
    return exponentials / exponentials.sum(axis=-1, keepdims=True)


def softmax_cross_entropy(logits, labels, weights, normaliser):
    """Weighted cross-entropy of integer ``labels`` under ``softmax(logits)``.

    Parameters
    ----------
    logits : ndarray of shape (..., n_classes)
    labels : ndarray of int, shape (...)
    weights : ndarray of shape (...)
    normaliser : float

    Returns
    -------
    loss : float
        ``-sum(w * log p[label]) / normaliser``.
    grad_logits : ndarray like ``logits``
        ``w * (p - onehot(label)) / normaliser``.

    Examples
    --------
    >>> import numpy as np
    >>> loss, grad = softmax_cross_entropy(np.zeros((1, 2)), np.array([0]), np.ones(1), 1.0)
    >>> round(loss, 6), grad
    (0.693147, array([[-0.5,  0.5]]))
    """
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_normaliser = np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    log_probabilities = shifted - log_normaliser
    picked = np.take_along_axis(log_probabilities, labels[..., None], axis=-1)[..., 0]
    loss = -float(np.vdot(weights, picked)) / normaliser
    grad_logits = np.exp(log_probabilities)
    np.put_along_axis(
        grad_logits,
        labels[..., None],
        np.take_along_axis(grad_logits, labels[..., None], axis=-1) - 1,
        axis=-1,
    )
    grad_logits *= (weights / normaliser)[..., None].astype(logits.dtype, copy=False)
    return loss, grad_logits


def weighted_r2_score(targets, predictions, weights):
    """Coefficient of determination per target column, averaged over the columns.

    ``R² = 1 - sum(w (y - ŷ)²) / sum(w (y - ȳ)²)`` with the weighted mean
    ``ȳ``; a column with no spread scores 1 if predicted exactly, else 0 (as
    ``sklearn.metrics.r2_score``).  Columns whose weights are all zero are
    left out.

    Parameters
    ----------
    targets, predictions, weights : ndarray of shape (n_positions, n_targets)
        ``targets`` may hold anything (NaN included) where ``weights`` is 0.

    Returns
    -------
    score : float

    Examples
    --------
    >>> import numpy as np
    >>> y = np.array([[1.0], [2.0], [np.nan]])
    >>> weighted_r2_score(y, np.array([[1.0], [2.0], [5.0]]), np.array([[1.0], [1.0], [0.0]]))
    1.0
    """
    scores = []
    for column in range(targets.shape[1]):
        weight = weights[:, column]
        used = weight > 0
        if not np.any(used):
            continue
        weight = weight[used]
        target = targets[used, column]
        prediction = predictions[used, column]
        mean = np.average(target, weights=weight)
        numerator = float(np.sum(weight * (target - prediction) ** 2))
        denominator = float(np.sum(weight * (target - mean) ** 2))
        if denominator > 0:
            scores.append(1.0 - numerator / denominator)
        else:
            scores.append(1.0 if numerator == 0 else 0.0)
    if not scores:
        raise ValueError("Every target is masked; there is nothing to score.")
    return float(np.mean(scores))


def weighted_accuracy(labels, predicted_labels, weights):
    """Weighted fraction of positions where ``predicted_labels == labels``.

    Examples
    --------
    >>> import numpy as np
    >>> weighted_accuracy(np.array([1, 2, 3]), np.array([1, 2, 0]), np.array([1.0, 1.0, 0.0]))
    1.0
    """
    total = float(np.sum(weights))
    if total <= 0:
        raise ValueError("Every target is masked; there is nothing to score.")
    return float(np.sum(weights * (labels == predicted_labels))) / total
