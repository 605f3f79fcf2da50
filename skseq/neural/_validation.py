"""Input checks shared by the supervised sequence estimators.

``X`` is ``(n_sequences, seq_len)`` -- a table whose columns are time steps
with one feature each, validated by scikit-learn's ``validate_data`` so that
``n_features_in_`` counts the columns as every scikit-learn tool expects --
or ``(n_sequences, seq_len, n_features)``, where ``n_features_in_`` counts
the features per step and any ``seq_len`` may be predicted.
"""

import numbers
from functools import partial

import numpy as np
from scipy import sparse
from sklearn.utils import check_array
from sklearn.utils.validation import validate_data

from .._validation import (
    check_bool_param,
    check_data_scale,
    check_scalar_param,
    masked_as_nan,
    optional,
)

__all__ = [
    "check_sequences",
    "check_sequence_weights",
    "check_bool_param",
    "check_positive_int",
    "check_network_scale",
    "int_rule",
    "real_rule",
    "NETWORK_PARAMETER_RULES",
]


def check_positive_int(value, name):
    """An integer >= 1."""
    return check_scalar_param(value, name, "int", low=1)


def int_rule(**bounds):
    """The rule of an integer within ``bounds`` (those of :func:`check_scalar_param`)."""
    return partial(check_scalar_param, kind="int", **bounds)


def real_rule(**bounds):
    """The rule of a finite real number within ``bounds``."""
    return partial(check_scalar_param, kind="real", **bounds)


_real = real_rule

#: The rules of the hyperparameters every sequence network shares (the
#: trainer's, and the architecture sizes), for
#: :func:`skseq._validation.check_parameters`; those shared with the EM
#: estimators (``tol``, ``batch_size``, ``n_jobs``, ...) are in
#: :data:`skseq._validation.PARAMETER_RULES`.  Each estimator's table
#: (``_PARAMETER_RULES``, next to the estimator) is this one and the rules of
#: its own architecture hyperparameters; cross-parameter constraints (heads
#: that divide ``d_model``) are checked where they are used.
NETWORK_PARAMETER_RULES = {
    "learning_rate_init": _real(low=0, low_open=True),
    "beta_1": _real(low=0, high=1, high_open=True),
    "beta_2": _real(low=0, high=1, high_open=True),
    "epsilon": _real(low=0, low_open=True),
    "weight_decay": _real(low=0),
    "max_iter": check_positive_int,
    "shuffle": check_bool_param,
    "max_grad_norm": optional(_real(low=0, low_open=True)),
    "early_stopping": check_bool_param,
    "validation_fraction": _real(low=0, high=1, low_open=True, high_open=True),
    "n_iter_no_change": check_positive_int,
    "warm_start": check_bool_param,
    "d_model": check_positive_int,
    "n_layers": check_positive_int,
    "d_conv": check_positive_int,
    "expand": check_positive_int,
}


def _input_ndim(X):
    if sparse.issparse(X) or hasattr(X, "ndim"):
        return X.ndim
    try:
        return np.asarray(X).ndim
    except ValueError as error:
        raise ValueError(
            "X must be a rectangular array of shape (n_sequences, seq_len) or "
            "(n_sequences, seq_len, n_features); pad sequences of different lengths "
            f"to one length and mask the padding with sample_weight ({error})."
        ) from error


def check_sequences(estimator, X, *, reset, dtype):
    """Validate ``X`` and return it as an array of shape (n_sequences, seq_len, n_features).

    Parameters
    ----------
    estimator : estimator instance
        Receives ``n_features_in_`` (and ``feature_names_in_``) when ``reset``.
    X : array-like of shape (n_sequences, seq_len) or (n_sequences, seq_len, n_features)
    reset : bool
        True in the first fit; False checks ``X`` against what fit saw.
    dtype : numpy dtype
        Floating type of the returned array (a copy when a cast is needed;
        ``X`` itself is never modified).

    Returns
    -------
    X : ndarray of shape (n_sequences, seq_len, n_features)
    """
    X = masked_as_nan(X, missing_supported=False, owner=type(estimator).__name__)
    ndim = _input_ndim(X)
    fitted_ndim = getattr(estimator, "_n_input_dims", None)
    if not reset and fitted_ndim is not None and ndim in (2, 3) and ndim != fitted_ndim:
        raise ValueError(
            f"X has {ndim} dimensions but {type(estimator).__name__} was fitted on "
            f"{fitted_ndim}-dimensional X; pass X of the same layout "
            "((n_sequences, seq_len) or (n_sequences, seq_len, n_features))."
        )
    if ndim == 3:
        X = check_array(
            X,
            dtype=[np.float64, np.float32],
            allow_nd=True,
            ensure_all_finite=True,
            input_name="X",
        )
        n_sequences, seq_len, n_features = X.shape
        if seq_len == 0 or n_features == 0:
            raise ValueError(
                f"X of shape {X.shape} is empty: it needs at least one step and one feature."
            )
        if reset:
            estimator.n_features_in_ = n_features
            if hasattr(estimator, "feature_names_in_"):
                del estimator.feature_names_in_
        elif n_features != estimator.n_features_in_:
            raise ValueError(
                f"X has {n_features} features per step, but {type(estimator).__name__} "
                f"is expecting {estimator.n_features_in_} features per step as input."
            )
    else:
        X = validate_data(
            estimator,
            X,
            reset=reset,
            dtype=[np.float64, np.float32],
            ensure_all_finite=True,
        )
        X = X[:, :, None]
    if reset:
        estimator._n_input_dims = ndim
    check_network_scale(X.reshape(-1, X.shape[2]), dtype)
    return X.astype(dtype, copy=False)


def check_network_scale(values, dtype, name="X", needed_by="the network's layers need"):
    """Refuse data too large for a network computing in ``dtype``, in the user's terms.

    The networks take their inputs (and regressors their targets) as they
    are, in the working precision, and sum their squares: in normalisations,
    squared errors and attention scores.  The rule is the one every family
    shares, :func:`skseq._validation.check_data_scale`, about zero (a cast
    to float32 of a float64 entry beyond 3.4e38 would be inf).

    Parameters
    ----------
    values : ndarray of shape (n_rows, n_columns)
        NaN entries (masked targets) are skipped.
    dtype : float32 or float64
    name : str, default="X"
    needed_by : str, default="the network's layers need"
        What sums the squares, for the message.
    """
    check_data_scale(values, None, dtype=dtype, name=name, needed_by=needed_by)


def check_sequence_weights(sample_weight, n_sequences, seq_len, *, per_step):
    """Validate ``sample_weight`` and return it as float64 of shape (n_sequences, seq_len) or (n,).

    Per-sequence targets take weights of shape ``(n_sequences,)``; per-step
    targets take ``(n_sequences, seq_len)`` (one weight per step, 0 masks the
    step) or ``(n_sequences,)`` (one weight per sequence, spread over its
    steps).  ``None`` means all ones.  Weights must be finite and
    non-negative.
    """
    if sample_weight is None:
        shape = (n_sequences, seq_len) if per_step else (n_sequences,)
        return np.ones(shape, dtype=np.float64)
    if isinstance(sample_weight, numbers.Number):
        sample_weight = np.full(n_sequences, sample_weight, dtype=np.float64)
    sample_weight = check_array(
        sample_weight,
        ensure_2d=False,
        dtype=np.float64,
        ensure_all_finite=True,
        input_name="sample_weight",
        copy=True,
    )
    if sample_weight.ndim == 1:
        if sample_weight.shape[0] != n_sequences:
            raise ValueError(
                f"sample_weight has {sample_weight.shape[0]} entries but X has "
                f"{n_sequences} sequences; expected shape ({n_sequences},)"
                + (f" or ({n_sequences}, {seq_len})." if per_step else ".")
            )
        if per_step:
            sample_weight = np.repeat(sample_weight[:, None], seq_len, axis=1)
    elif sample_weight.ndim == 2 and per_step:
        if sample_weight.shape != (n_sequences, seq_len):
            raise ValueError(
                f"sample_weight has shape {sample_weight.shape} but per-step targets need "
                f"({n_sequences}, {seq_len}) (one weight per step) or ({n_sequences},)."
            )
    else:
        expected = (
            f"({n_sequences},) or ({n_sequences}, {seq_len})" if per_step else f"({n_sequences},)"
        )
        kind = "per-step" if per_step else "per-sequence"
        raise ValueError(
            f"sample_weight has shape {sample_weight.shape}; with {kind} targets it must "
            f"have shape {expected}."
        )
    if np.any(sample_weight < 0):
        raise ValueError("sample_weight must be non-negative.")
    return sample_weight
