"""Validation shared by every layer (inference functions and estimators).

Scalar arguments: each check raises a ``TypeError`` for a value of the wrong
type and a ``ValueError`` for a value out of range, naming the argument.
Python and numpy scalars are accepted alike, but a bool is never taken for a
number, nor a number or a string for a bool.

Masked arrays, numpy's (and pykalman's) way of marking missing values:
scikit-learn's validation turns a :class:`numpy.ma.MaskedArray` into its
data, which would silently treat every masked entry as observed.  Every
skseq entry point for data passes ``X`` through :func:`masked_as_nan` first:
where missing values are supported (NaN marks them), masked entries become
NaN; elsewhere a masked entry is an error.
"""

import numbers

import numpy as np

__all__ = [
    "check_scalar_param",
    "check_bool_param",
    "check_n_jobs",
    "check_prior_param",
    "masked_as_nan",
]


def check_scalar_param(
    value, name, kind, *, low=None, high=None, low_open=False, high_open=False, allow_inf=False
):
    """Validate one hyperparameter; raise TypeError or ValueError naming it.

    ``kind`` is ``"int"`` or ``"real"``.  Bounds are closed unless
    ``low_open`` / ``high_open``.  Reals must be finite unless ``allow_inf``
    (NaN is always rejected).
    """
    if kind == "int":
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        expected = "an integer"
    else:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        expected = "a real number"
    if not ok:
        raise TypeError(f"{name} must be {expected}, got {value!r} of type {type(value).__name__}.")
    if kind == "real" and (np.isnan(value) or (not allow_inf and np.isinf(value))):
        raise ValueError(f"{name} must be {'a number' if allow_inf else 'finite'}, got {value!r}.")
    if low is not None and (value < low or (low_open and value == low)):
        bound = ">" if low_open else ">="
        raise ValueError(f"{name} must be {bound} {low}, got {value!r}.")
    if high is not None and (value > high or (high_open and value == high)):
        bound = "<" if high_open else "<="
        raise ValueError(f"{name} must be {bound} {high}, got {value!r}.")
    return value


def check_bool_param(value, name):
    """Accept a Python or numpy bool; raise TypeError naming ``name`` otherwise.

    Returns the value as a Python bool.  A string such as ``"no"`` would be
    truthy, and 0 / 1 are usually a misplaced positional argument: both are
    rejected.
    """
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be a bool, got {value!r} of type {type(value).__name__}.")
    return bool(value)


def check_n_jobs(n_jobs, name="n_jobs"):
    """None or a nonzero integer (joblib's convention: -1 means all cores).

    Returns ``n_jobs`` unchanged.
    """
    if n_jobs is None:
        return None
    check_scalar_param(n_jobs, name, "int")
    if n_jobs == 0:
        raise ValueError(f"{name} == 0 has no meaning; use None, a positive int or -1.")
    return n_jobs


def check_prior_param(value, name, *, low=None, low_open=False):
    """Validate a prior hyperparameter, a number or an array of numbers.

    Every entry must be finite and, with ``low``, at least ``low`` (more than
    ``low`` with ``low_open``): the range in which the M step is the maximiser
    of a proper posterior.  Shapes are checked where the prior is broadcast.
    Raises TypeError or ValueError naming the parameter.
    """
    if isinstance(value, bool) or np.iscomplexobj(value):
        raise TypeError(f"{name} must be a real number or an array of them, got {value!r}.")
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"{name} must be a real number or an array of them, got {value!r}."
        ) from None
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite, got {value!r}.")
    if low is not None:
        too_low = array <= low if low_open else array < low
        if np.any(too_low):
            bound = ">" if low_open else ">="
            shown = value if array.ndim == 0 else f"an entry {array[too_low].flat[0]!r}"
            raise ValueError(f"{name} must be {bound} {low}, got {shown}.")
    return array


def masked_as_nan(X, *, missing_supported, owner, name="X"):
    """``X`` with its masked entries replaced by NaN, or a ValueError.

    Parameters
    ----------
    X : array-like
        Returned unchanged unless it is a masked array.
    missing_supported : bool
        Whether ``owner`` treats NaN as a missing value.  If not, a masked
        array with a masked entry raises a ValueError.
    owner : str
        Who receives ``X`` (an estimator or function name), for the message.
    name : str, default="X"
        The argument's name, for the message.

    Returns
    -------
    X : array-like
        A float64 ndarray with NaN at the masked entries (a new array: the
        caller's is never changed), the data of a masked array without
        masked entries, or ``X`` itself.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.ma.masked_array([[1.0, 2.0], [3.0, 4.0]], mask=[[False, True], [False, False]])
    >>> masked_as_nan(X, missing_supported=True, owner="GaussianHMM")
    array([[ 1., nan],
           [ 3.,  4.]])
    """
    if not isinstance(X, np.ma.MaskedArray):
        return X
    mask = np.ma.getmaskarray(X)
    if not mask.any():
        return np.ma.getdata(X)
    if not missing_supported:
        raise ValueError(
            f"{owner} does not support missing values, but {name} is a masked array with "
            f"{int(mask.sum())} masked entries; remove them or fill them in before passing "
            f"{name} (the masked entries would otherwise be read as observed)."
        )
    try:
        data = np.array(np.ma.getdata(X), dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be numeric: {error}") from None
    data[mask] = np.nan
    return data
