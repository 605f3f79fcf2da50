"""Reusable work arrays for the inference functions and the estimators' E steps.

EM calls the E step on the same blocks of rows every iteration, and inference
runs block after block: a fresh array of a block's size costs a page fault
per 4 KiB on first touch, as much as the arithmetic.  A ``buffers`` dict,
owned by the caller (one per block, per thread), keeps arrays from call to
call; ``None`` means no reuse.
"""

import numpy as np

__all__ = ["work_array", "longest_sequence"]


def work_array(buffers, name, shape, dtype=np.float64):
    """An uninitialised array for scratch or results that the caller consumes at once.

    ``buffers`` (a dict, or None) keeps arrays from call to call under
    ``name``.  A kept array with at least ``shape[0]`` rows (and the same
    trailing shape) is reused through a view of its first rows; otherwise a
    new one replaces it.

    Examples
    --------
    >>> buffers = {}
    >>> first = work_array(buffers, "alpha", (4, 2))
    >>> work_array(buffers, "alpha", (3, 2)).base is first.base
    True
    """
    if buffers is None:
        return np.empty(shape, dtype=dtype)
    array = buffers.get(name)
    if (
        array is None
        or array.dtype != dtype
        or array.shape[1:] != shape[1:]
        or array.shape[0] < shape[0]
    ):
        array = buffers[name] = np.empty(shape, dtype=dtype)
    return array[: shape[0]]


def longest_sequence(offsets):
    """Rows of the longest sequence that ``offsets`` delimit (sizes per-sequence scratch)."""
    return int(np.diff(offsets).max())
