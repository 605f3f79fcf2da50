"""Regressor and classifier bases of the neural sequence estimators.

They turn ``y`` and ``sample_weight`` into the arrays the trainer works on,
pick the per-sequence or per-step read-out from ``y``'s shape, and define the
loss, the prediction methods and ``score``.  The architecture comes from a
subclass's ``_make_network``.

**Per-sequence or per-step.**  With ``X`` of shape ``(n_sequences, seq_len[,
n_features])``:

* regressor: ``y`` of shape ``(n_sequences,)`` is one target per sequence;
  ``(n_sequences, seq_len)`` is one target per step; ``(n_sequences, k)``
  with ``k != seq_len`` is ``k`` targets per sequence; ``(n_sequences,
  seq_len, k)`` is ``k`` targets per step.  (So ``k`` targets per sequence
  with ``k == seq_len`` cannot be expressed; pass per-step targets as 3-D to
  be explicit.)
* classifier: ``y`` of shape ``(n_sequences,)`` is one label per sequence,
  ``(n_sequences, seq_len)`` one label per step.

Per-sequence outputs are read at the last step of each sequence.
"""

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils import check_array, column_or_1d
from sklearn.utils.multiclass import check_classification_targets

from ._losses import (
    softmax,
    softmax_cross_entropy,
    squared_error,
    weighted_accuracy,
    weighted_r2_score,
)
from ._trainer import BaseSequenceNetwork
from ._validation import check_network_scale, check_sequence_weights

__all__ = ["SequenceNetworkRegressor", "SequenceNetworkClassifier"]


def _require_y(estimator, y):
    if y is None:
        raise ValueError(
            f"{type(estimator).__name__} requires y to be passed, but the target y is None."
        )


def _check_n_sequences(X, y):
    if y.shape[0] != X.shape[0]:
        raise ValueError(
            f"X has {X.shape[0]} sequences but y has {y.shape[0]}; they must match "
            "(y has one row per sequence)."
        )


def _score(estimator, X, y, sample_weight):
    """``estimator._score_outputs`` of its network's outputs on ``X`` against ``y``:
    the one body of the regressor's and the classifier's ``score``."""
    X = estimator._prepare_X(X)
    targets, weights = estimator._prepare_targets(X, y, sample_weight, first_call=False)
    return estimator._score_outputs(estimator._network_outputs(X), targets, weights)


class SequenceNetworkRegressor(RegressorMixin, BaseSequenceNetwork):
    """Squared-error regression on sequences; see the module docstring for ``y``."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.input_tags.three_d_array = True
        return tags

    def _check_targets(self, X, y):
        """Validate y and find its mode.

        Returns y as (n, n_targets) or (n, seq_len, n_targets), whether it is
        per step, and the number of dimensions y came with.
        """
        _require_y(self, y)
        y = check_array(
            y,
            ensure_2d=False,
            allow_nd=True,
            dtype=np.float64,
            ensure_all_finite=False,
            # Empty shapes get the messages below, which name y's layout.
            ensure_min_samples=0,
            ensure_min_features=0,
            input_name="y",
        )
        _check_n_sequences(X, y)
        seq_len = X.shape[1]
        y_ndim = y.ndim
        if y.ndim == 1:
            per_step, y = False, y[:, None]
        elif y.ndim == 2 and y.shape[1] == seq_len:
            per_step, y = True, y[:, :, None]
        elif y.ndim == 2:
            per_step = False
        elif y.ndim == 3 and y.shape[1] == seq_len:
            per_step = True
        elif y.ndim == 3:
            raise ValueError(
                f"y of shape {y.shape} looks like per-step targets but X has {seq_len} steps; "
                f"expected shape ({X.shape[0]}, {seq_len}, n_targets)."
            )
        else:
            raise ValueError(
                f"y must have 1 to 3 dimensions ((n_sequences,), (n_sequences, n_targets), "
                f"(n_sequences, seq_len) or (n_sequences, seq_len, n_targets)); got shape "
                f"{y.shape}."
            )
        if y.shape[-1] == 0:
            raise ValueError(
                f"y has 0 targets (shape {y.shape}); a regressor needs at least one target "
                "per sequence or per step: y of shape (n_sequences,), (n_sequences, n_targets), "
                "(n_sequences, seq_len) or (n_sequences, seq_len, n_targets)."
            )
        if np.any(np.isinf(y)):
            raise ValueError("Input y contains infinity.")
        if not per_step and np.any(np.isnan(y)):
            raise ValueError(
                "Input y contains NaN. NaN masks a step only for per-step targets; to leave "
                "out a whole sequence give it sample_weight 0."
            )
        check_network_scale(
            y.reshape(-1, y.shape[-1]), X.dtype, name="y", needed_by="the squared error needs"
        )
        return y, per_step, y_ndim

    def _prepare_targets(self, X, y, sample_weight, *, first_call, classes=None):
        targets, per_step, y_ndim = self._check_targets(X, y)
        if first_call:
            self.per_step_ = per_step
            self.n_outputs_ = targets.shape[-1]
            self._y_ndim = y_ndim
        elif per_step != self.per_step_ or targets.shape[-1] != self.n_outputs_:

            def describe(per_step, n_targets):
                return f"{'per-step' if per_step else 'per-sequence'}, {n_targets} target(s)"

            raise ValueError(
                f"y has {describe(per_step, targets.shape[-1])} but the model was fitted with "
                f"{describe(self.per_step_, self.n_outputs_)}."
            )
        weights = check_sequence_weights(sample_weight, X.shape[0], X.shape[1], per_step=per_step)
        observed = ~np.isnan(targets)
        element_weights = np.where(observed, weights[..., None], 0.0)
        if not np.any(element_weights > 0):
            raise ValueError("Every target is masked (NaN) or has zero sample_weight: none counts.")
        return np.where(observed, targets, 0.0).astype(X.dtype), element_weights

    def _loss(self, outputs, targets, weights, normaliser):
        return squared_error(outputs, targets, weights, normaliser)

    def _score_outputs(self, outputs, targets, weights):
        n_targets = outputs.shape[-1]
        return weighted_r2_score(
            targets.reshape(-1, n_targets),
            outputs.reshape(-1, n_targets),
            weights.reshape(-1, n_targets),
        )

    def fit(self, X, y, sample_weight=None):
        """Train the network from scratch (or from the current weights if ``warm_start``).

        Parameters
        ----------
        X : array-like of shape (n_sequences, seq_len) or (n_sequences, seq_len, n_features)
        y : array-like of shape (n_sequences,), (n_sequences, n_targets), \
(n_sequences, seq_len) or (n_sequences, seq_len, n_targets)
            Per-sequence or per-step targets (see the class docstring). NaN
            masks a per-step target.
        sample_weight : array-like of shape (n_sequences,) or (n_sequences, seq_len), optional
            Per-sequence weights, or per-step weights for per-step targets
            (0 masks a step).

        Returns
        -------
        self
        """
        return self._fit(X, y, sample_weight, incremental=False)

    def partial_fit(self, X, y, sample_weight=None):
        """One pass of minibatch updates over ``(X, y)``.

        The first call initialises the network; later calls continue from it
        (same features and the same kind of targets).  Early stopping does
        not apply.

        Parameters
        ----------
        X, y, sample_weight : see :meth:`fit`.

        Returns
        -------
        self
        """
        return self._fit(X, y, sample_weight, incremental=True)

    def predict(self, X):
        """Predict per-sequence or per-step targets.

        Parameters
        ----------
        X : array-like of shape (n_sequences, seq_len) or (n_sequences, seq_len, n_features)

        Returns
        -------
        y_pred : ndarray
            The shape of ``y`` in fit: ``(n_sequences,)``, ``(n_sequences,
            n_targets)``, ``(n_sequences, seq_len)`` or ``(n_sequences,
            seq_len, n_targets)``.
        """
        outputs = self._network_outputs(self._prepare_X(X)).astype(np.float64)
        if self.per_step_ and self._y_ndim == 2:
            return outputs[..., 0]
        if not self.per_step_ and self._y_ndim == 1:
            return outputs[:, 0]
        return outputs

    def score(self, X, y, sample_weight=None):
        """Coefficient of determination R² of the predictions.

        Computed over every (unmasked) target position, per target column,
        then averaged over columns; NaN per-step targets and zero weights are
        left out.

        Parameters
        ----------
        X, y, sample_weight : see :meth:`fit`.

        Returns
        -------
        score : float
        """
        return _score(self, X, y, sample_weight)


class SequenceNetworkClassifier(ClassifierMixin, BaseSequenceNetwork):
    """Cross-entropy classification of sequences or of every step."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True
        return tags

    def _check_labels(self, X, y):
        _require_y(self, y)
        y = check_array(
            y,
            ensure_2d=False,
            allow_nd=True,
            dtype=None,
            ensure_all_finite=False,
            input_name="y",
        )
        _check_n_sequences(X, y)
        seq_len = X.shape[1]
        if y.ndim == 2 and y.shape[1] == seq_len:
            per_step = True
        elif y.ndim == 2 and y.shape[1] == 1:
            y, per_step = column_or_1d(y, warn=True), False
        elif y.ndim == 1:
            per_step = False
        else:
            raise ValueError(
                f"y must have shape (n_sequences,) (one label per sequence) or "
                f"(n_sequences, seq_len) = ({X.shape[0]}, {seq_len}) (one label per step); "
                f"got shape {y.shape}."
            )
        if y.dtype.kind in "fc" and not np.all(np.isfinite(y)):
            raise ValueError("Input y contains NaN or infinity; labels must be finite.")
        check_classification_targets(y.ravel())
        return y, per_step

    def _encode(self, y):
        try:
            indices = np.searchsorted(self.classes_, y)
        except TypeError as error:
            raise ValueError(
                f"y has labels of another type than classes_ {self.classes_.tolist()}."
            ) from error
        indices = np.clip(indices, 0, len(self.classes_) - 1)
        unknown = self.classes_[indices] != y
        if np.any(unknown):
            raise ValueError(
                f"y contains labels not in classes_ {self.classes_.tolist()}: "
                f"{np.unique(y[unknown]).tolist()[:10]}."
            )
        return indices

    def _prepare_targets(self, X, y, sample_weight, *, first_call, classes=None):
        y, per_step = self._check_labels(X, y)
        if first_call:
            if classes is not None:
                classes = np.asarray(classes)
                if classes.ndim != 1 or classes.size == 0:
                    raise ValueError(
                        f"classes must be a non-empty 1-D array, got shape {classes.shape}."
                    )
                self.classes_ = np.unique(classes)
            else:
                self.classes_ = np.unique(y)
            self.per_step_ = per_step
            self.n_outputs_ = len(self.classes_)
        else:
            if classes is not None and not np.array_equal(np.unique(classes), self.classes_):
                raise ValueError(
                    f"classes={np.unique(classes).tolist()} differs from the classes of the "
                    f"first call to partial_fit, {self.classes_.tolist()}."
                )
            if per_step != self.per_step_:
                raise ValueError(
                    f"y of shape {y.shape} is {'per-step' if per_step else 'per-sequence'} but "
                    f"the model was fitted {'per step' if self.per_step_ else 'per sequence'}."
                )
        labels = self._encode(y)
        weights = check_sequence_weights(sample_weight, X.shape[0], X.shape[1], per_step=per_step)
        if not np.any(weights > 0):
            raise ValueError("Every sample_weight is zero: no sequence or step counts.")
        return labels, weights

    def _stratify_labels(self, targets):
        if self.per_step_:
            return None
        counts = np.bincount(targets, minlength=self.n_outputs_)
        present = counts[counts > 0]
        n_validation = int(np.ceil(self.validation_fraction * len(targets)))
        if (
            present.min() < 2
            or n_validation < len(present)
            or len(targets) - n_validation < len(present)
        ):
            return None
        return targets

    def _loss(self, outputs, targets, weights, normaliser):
        return softmax_cross_entropy(outputs, targets, weights, normaliser)

    def _score_outputs(self, outputs, targets, weights):
        return weighted_accuracy(targets, np.argmax(outputs, axis=-1), weights)

    def fit(self, X, y, sample_weight=None):
        """Train the network from scratch (or from the current weights if ``warm_start``).

        Parameters
        ----------
        X : array-like of shape (n_sequences, seq_len) or (n_sequences, seq_len, n_features)
        y : array-like of shape (n_sequences,) or (n_sequences, seq_len)
            One label per sequence, or one per step. Every entry must be a
            label, also at masked steps.
        sample_weight : array-like of shape (n_sequences,) or (n_sequences, seq_len), optional
            Per-sequence weights, or per-step weights for per-step labels
            (0 masks a step).

        Returns
        -------
        self
        """
        return self._fit(X, y, sample_weight, incremental=False)

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """One pass of minibatch updates over ``(X, y)``.

        Parameters
        ----------
        X, y, sample_weight : see :meth:`fit`.
        classes : array-like of shape (n_classes,)
            All labels that will ever occur; required on the first call,
            optional later (and then it must be the same set).

        Returns
        -------
        self
        """
        if not hasattr(self, "classes_") and classes is None:
            raise ValueError("classes must be passed on the first call to partial_fit.")
        return self._fit(X, y, sample_weight, incremental=True, classes=classes)

    def predict_proba(self, X):
        """Class probabilities.

        Parameters
        ----------
        X : array-like of shape (n_sequences, seq_len) or (n_sequences, seq_len, n_features)

        Returns
        -------
        proba : ndarray of shape (n_sequences, n_classes) or (n_sequences, seq_len, n_classes)
            Columns in the order of ``classes_``.
        """
        outputs = self._network_outputs(self._prepare_X(X)).astype(np.float64)
        return softmax(outputs)

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`."""
        outputs = self._network_outputs(self._prepare_X(X)).astype(np.float64)
        shifted = outputs - outputs.max(axis=-1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))

    def predict(self, X):
        """Most probable label of each sequence, or of each step.

        Parameters
        ----------
        X : array-like of shape (n_sequences, seq_len) or (n_sequences, seq_len, n_features)

        Returns
        -------
        y_pred : ndarray of shape (n_sequences,) or (n_sequences, seq_len)
        """
        outputs = self._network_outputs(self._prepare_X(X))
        return self.classes_[np.argmax(outputs, axis=-1)]

    def score(self, X, y, sample_weight=None):
        """Weighted accuracy over sequences, or over (unmasked) steps.

        Parameters
        ----------
        X, y, sample_weight : see :meth:`fit`.

        Returns
        -------
        score : float
        """
        return _score(self, X, y, sample_weight)
