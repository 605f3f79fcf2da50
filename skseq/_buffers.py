"""Reusable work arrays for the inference functions and the estimators' E steps.

EM calls the E step on the same blocks of rows every iteration, and inference
runs block after block: a fresh array of a block's size costs a page fault
per 4 KiB on first touch, as much as the arithmetic.  A ``buffers`` dict,
owned by the caller (one per block, per thread), keeps arrays from call to
call; ``None`` means no reuse.

A training step of a neural network repeats the same passes with the same
shapes: :func:`reusing_pass_arrays` lends a ``buffers`` dict to the layers
for one step, and :func:`pass_array` hands out its arrays in the order they
are asked for, so each request of a step gets the array of the same request
in the step before.
"""

import threading
from contextlib import contextmanager

import numpy as np

__all__ = ["work_array", "longest_sequence", "pass_array", "reusing_pass_arrays"]

# The buffers lent to the layers running in this thread (see reusing_pass_arrays).
_lent = threading.local()


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


@contextmanager
def reusing_pass_arrays(buffers):
    """Let :func:`pass_array` draw from ``buffers`` in this thread within the block.

    ``buffers`` is a dict owned by the caller (one per thread), kept from one
    block to the next; ``None`` lends nothing.  The arrays handed out are
    valid until the block exits: the next block overwrites them, so nothing
    made inside (a network's activations) may be kept beyond it.

    Examples
    --------
    >>> buffers = {}
    >>> with reusing_pass_arrays(buffers):
    ...     first = pass_array((2, 3), np.float32)
    >>> with reusing_pass_arrays(buffers):
    ...     np.shares_memory(pass_array((2, 3), np.float32), first)
    True
    """
    previous = getattr(_lent, "state", None)
    _lent.state = None if buffers is None else [buffers, 0]
    try:
        yield
    finally:
        _lent.state = previous


def pass_array(shape, dtype):
    """An uninitialised array for an activation of a pass, reused from the previous pass.

    Within :func:`reusing_pass_arrays`, the ``k``-th call of the block gets
    the ``k``-th array of the previous block (by :func:`work_array`): the
    same memory step after step, with no fresh pages to fault in.  Every
    call gets its own array, so a layer called twice in a pass is safe.
    Outside such a block, a fresh array.
    """
    state = getattr(_lent, "state", None)
    if state is None:
        return np.empty(shape, dtype=dtype)
    state[1] += 1
    return work_array(state[0], state[1] - 1, shape, dtype)
