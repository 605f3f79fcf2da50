"""Checks of scalar arguments shared by every layer (inference functions and estimators).

Each raises a ``TypeError`` for a value of the wrong type and a ``ValueError``
for a value out of range, naming the argument.  Python and numpy scalars are
accepted alike, but a bool is never taken for a number, nor a number or a
string for a bool.
"""

import numbers

import numpy as np

__all__ = ["check_scalar_param", "check_bool_param", "check_n_jobs"]


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
