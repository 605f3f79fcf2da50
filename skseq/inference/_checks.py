"""Input checks shared by the inference functions on plain arrays."""

import functools
import inspect

import numpy as np

from .._validation import masked_as_nan

__all__ = [
    "require_arrays",
    "require_real",
    "working_dtype",
    "checked_array",
    "leading_array",
    "all_finite",
    "masked_arrays_checked",
]

# What masked_arrays_checked has to look at: a masked array, or a tuple that
# may hold one (a message or spectra returned by an earlier call).
_MAY_HOLD_MASKED = (np.ma.MaskedArray, tuple)


def masked_arrays_checked(*, missing=(), hints=None):
    """Decorate a public inference function: no masked array is read as data.

    numpy reads a :class:`numpy.ma.MaskedArray` through ``np.asarray`` as its
    data, so without this every masked entry would silently count as a
    value.  The decorated function sees, for each argument (and each element
    of a tuple argument, such as a message returned by an earlier call):

    - a masked array with a masked entry: in an argument named in
      ``missing``, where NaN marks a missing value, a float64 copy with NaN
      at the masked entries (as :func:`skseq._validation.masked_as_nan` gives
      the estimators); in any other, a ValueError naming the function and the
      argument, with ``hints[name]`` appended when given;
    - a masked array without masked entries: its data;
    - anything else: the argument itself.

    The arguments are only looked at with ``isinstance``; a call without
    masked arrays or tuples costs one pass over them and copies nothing.

    Parameters
    ----------
    missing : tuple of str, default=()
        The arguments in which the function treats NaN as missing.
    hints : dict of str to str, optional
        Per argument, a sentence saying what a masked entry should be filled
        with.
    """
    hints = {} if hints is None else dict(hints)

    def decorate(function):
        parameters = inspect.signature(function).parameters.values()
        positional = tuple(
            parameter.name
            for parameter in parameters
            if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)
        )
        owner = function.__name__
        unknown = (set(missing) | set(hints)) - {parameter.name for parameter in parameters}
        if unknown:
            raise RuntimeError(f"{owner} has no argument {sorted(unknown)}.")

        def unmasked(name, value):
            if isinstance(value, np.ma.MaskedArray):
                return masked_as_nan(
                    value,
                    missing_supported=name in missing,
                    owner=owner,
                    name=name,
                    hint=hints.get(name),
                )
            if isinstance(value, tuple):
                for part in value:
                    if isinstance(part, np.ma.MaskedArray):
                        break
                else:
                    return value
                fields = getattr(value, "_fields", None)
                parts = [
                    unmasked(f"{name}.{fields[i]}" if fields else f"{name}[{i}]", part)
                    for i, part in enumerate(value)
                ]
                return type(value)(*parts) if fields else tuple(parts)
            return value

        @functools.wraps(function)
        def checked(*args, **kwargs):
            for value in args:
                if isinstance(value, _MAY_HOLD_MASKED):
                    break
            else:
                for value in kwargs.values():
                    if isinstance(value, _MAY_HOLD_MASKED):
                        break
                else:
                    return function(*args, **kwargs)
            # Surplus positional arguments go on as they are, for Python's own error.
            args = [unmasked(name, value) for name, value in zip(positional, args)] + list(
                args[len(positional) :]
            )
            kwargs = {name: unmasked(name, value) for name, value in kwargs.items()}
            return function(*args, **kwargs)

        return checked

    return decorate


def require_arrays(**arrays):
    """Raise a TypeError naming the first required array argument that is None."""
    for name, value in arrays.items():
        if value is None:
            raise TypeError(f"{name} is required: pass an array, got None.")


def require_real(name, array):
    """Raise a TypeError naming ``name`` unless ``array`` has a real numeric dtype.

    Complex input is a TypeError everywhere in the inference layer: casting
    it to a real dtype would drop the imaginary part with only a warning.
    """
    if array.dtype.kind == "c":
        raise TypeError(f"{name} must be real; complex inputs are not supported.")
    if array.dtype.kind not in "fiub":
        raise TypeError(f"{name} must be a numeric array, got dtype {array.dtype}.")


def working_dtype(name, array):
    """float32 for a float32 ``array``; float64 for any other real one.

    The dtype of one leading argument sets the precision of a computation;
    the other arguments are cast to it.
    """
    require_real(name, array)
    return np.dtype(np.float32) if array.dtype == np.float32 else np.dtype(np.float64)


def checked_array(name, value, dtype, shape=None):
    """C-contiguous finite array of ``dtype``; raises naming ``name``."""
    array = np.asarray(value)
    require_real(name, array)
    if shape is not None and array.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {array.shape}.")
    array = np.ascontiguousarray(array, dtype=dtype)
    if not all_finite(array):
        raise ValueError(f"{name} contains NaN or infinity.")
    return array


def leading_array(name, value, axes, dtype=None):
    """The argument that sets the working precision, checked: ``(array, working dtype)``.

    ``value`` must not be None, be real and have one dimension per name of
    ``axes`` (the shape the error message states); it is returned as a
    C-contiguous finite array of ``dtype``, by default its own working dtype
    (:func:`working_dtype`).  The other arguments of the call are then
    checked against its shape with :func:`checked_array`.
    """
    require_arrays(**{name: value})
    array = np.asarray(value)
    working = working_dtype(name, array)
    if array.ndim != len(axes):
        shape = "(" + ", ".join(axes) + ("," if len(axes) == 1 else "") + ")"
        raise ValueError(f"{name} must have shape {shape}, got {array.shape}.")
    return checked_array(name, array, working if dtype is None else dtype), working


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
