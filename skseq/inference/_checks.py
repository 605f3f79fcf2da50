"""Input checks shared by the inference functions on plain arrays."""

import numpy as np

__all__ = ["working_dtype", "checked_array", "all_finite"]


def working_dtype(name, array):
    """float32 for a float32 ``array``; float64 for any other real one.

    The dtype of one leading argument sets the precision of a computation;
    the other arguments are cast to it.
    """
    if array.dtype.kind == "c":
        raise TypeError(f"{name} must be real; complex inputs are not supported.")
    if array.dtype.kind not in "fiub":
        raise TypeError(f"{name} must be a numeric array, got dtype {array.dtype}.")
    return np.dtype(np.float32) if array.dtype == np.float32 else np.dtype(np.float64)


def checked_array(name, value, dtype, shape=None):
    """C-contiguous finite array of ``dtype``; raises naming ``name``."""
    array = np.asarray(value)
    if array.dtype.kind == "c":
        raise TypeError(f"{name} must be real; complex inputs are not supported.")
    if array.dtype.kind not in "fiub":
        raise TypeError(f"{name} must be a numeric array, got dtype {array.dtype}.")
    if shape is not None and array.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {array.shape}.")
    array = np.ascontiguousarray(array, dtype=dtype)
    if not all_finite(array):
        raise ValueError(f"{name} contains NaN or infinity.")
    return array


def all_finite(array):
    """Whether no entry is NaN or infinite, without a temporary of the array's size.

    A NaN or an infinity makes the sum non-finite; only when the sum is not
    finite (which an overflow of large finite values can also cause) are the
    entries checked one by one.  A floating array is summed in its own dtype:
    a float64 sum of float32 data would convert it through a buffer, which
    costs more than the sum.
    """
    dtype = np.float64 if array.dtype.kind in "iub" else None
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(np.sum(array, dtype=dtype)):
            return True
    return bool(np.isfinite(array).all())
