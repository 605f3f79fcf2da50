"""Causal scaled dot-product attention and its gradients, on plain arrays.

For every batch element ``b`` and head ``h``, with ``Q = q[b, h]``,
``K = k[b, h]``, ``V = v[b, h]`` of shape ``(length, d_head)`` and the scale
``s`` (``1 / sqrt(d_head)`` by default)::

    S[i, j]  = s * Q[i] . K[j]                      j <= i (causal mask)
    lse[i]   = log sum_{j <= i} exp(S[i, j])
    out[i]   = sum_{j <= i} exp(S[i, j] - lse[i]) V[j]

which is ``softmax(s Q K^T + M) V`` with ``M[i, j] = -inf`` for ``j > i``, as
``torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)``.

The Cython kernels of :mod:`skseq._kernels._attention` compute it in tiles
with an online softmax (FlashAttention): no ``(length, length)`` matrix is
formed, only one tile of scores per thread, and the backward pass rebuilds the
probabilities from the per-row log-sum-exp ``lse`` that the forward pass can
return.  In the AVX2 and AVX-512 builds the tile products are the kernels' own
register-tiled loops (``_kernels/_attention_tiles.h``), not BLAS: at these
sizes OpenBLAS spends much of its time copying its operands into its own
layout.  The portable build uses BLAS (``sgemm`` / ``dgemm``), held to one
thread during the call: the tiles are small, and a threaded BLAS makes each
product several times slower.  Different (batch, head) pairs are independent
and can be spread over threads (``n_jobs``); the result does not depend on it.
The online softmax, the backward pass and the float32 overflow fallback are
derived in the user guide (doc/user_guide/attention.rst).
"""

from typing import NamedTuple

import numpy as np

from .._kernels import load
from .._parallel import pair_blocks, run_blocks, single_threaded_blas
from .._validation import check_bool_param, check_n_jobs, check_scalar_param
from ._checks import all_finite as _all_finite
from ._checks import masked_arrays_checked, working_dtype

_attention = load("_attention")

__all__ = [
    "causal_attention",
    "causal_attention_backward",
    "AttentionResult",
    "AttentionGradients",
]

# Query rows per block and keys per tile.  64 x 512 tiles of scores (128 KiB
# in float32) stay in the L2 cache, and a row block of 64 keeps the wasted
# half of the diagonal tile small; lengths up to 512 need one tile per block,
# so the online rescaling costs nothing there.
_DEFAULT_BLOCK_ROWS = 64
_DEFAULT_BLOCK_COLS = 512

# BLAS takes the row stride in elements as a 32-bit int: arrays whose row
# stride reaches 2**31 bytes (so possibly 2**31 elements) are copied.
_MAX_ROW_STRIDE = 2**31


class AttentionResult(NamedTuple):
    """What :func:`causal_attention` returns.

    Attributes
    ----------
    out : ndarray of shape (batch, n_heads, length, d_head)
        The attention output.
    lse : ndarray of shape (batch, n_heads, length) or None
        ``log sum_{j <= i} exp(S[i, j])`` of every query row ``i``: what
        :func:`causal_attention_backward` needs to rebuild the probabilities;
        None unless ``return_lse=True``.
    """

    out: np.ndarray
    lse: np.ndarray | None


class AttentionGradients(NamedTuple):
    """What :func:`causal_attention_backward` returns: the gradients of ``q``, ``k``, ``v``.

    Each has the shape of the input, ``(batch, n_heads, length, d_head)``, and
    the working dtype.
    """

    dq: np.ndarray
    dk: np.ndarray
    dv: np.ndarray


def _as_kernel_array(name, value, dtype, shape=None, check_finite=True):
    """An array of ``dtype`` whose last axis is contiguous, finite; raises naming ``name``.

    An array of the right dtype whose last axis is contiguous (a transposed
    view of a packed projection, for example) is used as it is, without a copy;
    anything else is copied.  ``check_finite=False`` skips the finiteness test.
    """
    array = np.asarray(value)
    working_dtype(name, array)  # real and numeric, or raises naming it
    if shape is not None and array.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {array.shape}.")
    itemsize = dtype.itemsize
    reusable = (
        array.dtype == dtype
        and array.flags.aligned
        and (array.size == 0 or array.strides[-1] == itemsize)
        and all(stride >= 0 and stride % itemsize == 0 for stride in array.strides)
        and (array.ndim < 2 or array.shape[-1] * itemsize <= array.strides[-2] < _MAX_ROW_STRIDE)
    )
    if not reusable:
        array = np.ascontiguousarray(array, dtype=dtype)
    if check_finite:
        _require_finite({name: array})
    return array


def _require_finite(arrays):
    """Raise a ValueError naming the first of ``{name: array}`` with a NaN or an infinity."""
    for name, array in arrays.items():
        if not _all_finite(array):
            raise ValueError(f"{name} contains NaN or infinity.")


def _check_qkv(q, k, v, check_finite):
    q = np.asarray(q)
    dtype = working_dtype("q", q)
    if q.ndim != 4:
        raise ValueError(f"q must have shape (batch, n_heads, length, d_head), got {q.shape}.")
    q = _as_kernel_array("q", q, dtype, check_finite=check_finite)
    if q.shape[3] == 0:
        raise ValueError("d_head (the last axis of q, k and v) must be at least 1.")
    k = _as_kernel_array("k", k, dtype, q.shape, check_finite)
    v = _as_kernel_array("v", v, dtype, q.shape, check_finite)
    return q, k, v


def _check_options(scale, d_head, n_jobs, block_rows, block_cols, **flags):
    """The scalar arguments: the scale (None or positive), n_jobs, the tile sizes, bools.

    Returns the scale (``1 / sqrt(d_head)`` by default), the tile sizes with
    ``block_cols`` rounded up to a multiple of ``block_rows``, and the flags
    as Python bools, in the order given.
    """
    if scale is None:
        scale = 1.0 / np.sqrt(d_head)
    else:
        scale = float(check_scalar_param(scale, "scale", "real", low=0, low_open=True))
    check_n_jobs(n_jobs)
    rows = _DEFAULT_BLOCK_ROWS if block_rows is None else block_rows
    cols = _DEFAULT_BLOCK_COLS if block_cols is None else block_cols
    rows = int(check_scalar_param(rows, "_block_rows", "int", low=1))
    cols = int(check_scalar_param(cols, "_block_cols", "int", low=1))
    blocks = (rows, -(-max(cols, rows) // rows) * rows)
    return (scale, blocks, *(check_bool_param(value, name) for name, value in flags.items()))


def _check_destinations(destinations, dtype, shape, inputs):
    """Arrays given to write results into: ``{name: array or None}``; raises naming the problem.

    Each must be a writeable ndarray of ``shape`` and exactly ``dtype`` whose
    last axis is contiguous, sharing no memory with ``inputs`` or with
    another destination.
    """
    given = {name: array for name, array in destinations.items() if array is not None}
    for name, array in given.items():
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{name} must be a numpy array, got {type(array).__name__}.")
        if array.shape != shape or array.dtype != dtype:
            raise ValueError(
                f"{name} must be an array of shape {shape} and dtype {dtype} (the working "
                f"precision), got shape {array.shape} and dtype {array.dtype}."
            )
        itemsize = dtype.itemsize
        if not array.flags.writeable:
            raise ValueError(f"{name} is read-only.")
        if array.size and not (
            array.strides[-1] == itemsize
            and all(stride >= 0 and stride % itemsize == 0 for stride in array.strides)
            and shape[-1] * itemsize <= array.strides[-2] < _MAX_ROW_STRIDE
        ):
            raise ValueError(
                f"{name} must have a contiguous last axis (for example a transposed view of "
                "a C-contiguous array); copy into it afterwards otherwise."
            )
        others = list(inputs) + [other for key, other in given.items() if key != name]
        if any(np.shares_memory(array, other) for other in others):
            raise ValueError(f"{name} shares memory with an input or another output.")
    return [destinations[name] for name in destinations]


def _forward(q, k, v, scale, n_jobs, blocks, out=None):
    """Run the forward kernel on checked arrays; returns (out, lse) of q's dtype."""
    batch, n_heads, length, d_head = q.shape
    if out is None:
        out = np.empty(q.shape, dtype=q.dtype)
    lse = np.empty((batch, n_heads, length), dtype=q.dtype)
    if out.size == 0:
        return out, lse

    def run(pair_start, pair_stop):
        _attention.forward(q, k, v, out, lse, scale, pair_start, pair_stop, *blocks)

    with single_threaded_blas():
        run_blocks(run, pair_blocks(batch, n_heads, n_jobs), sharedmem=True)
    return out, lse


def _backward(dout, q, k, v, out, lse, scale, n_jobs, blocks, destinations=(None,) * 3):
    """Run the backward kernel on checked arrays; returns (dq, dk, dv) of q's dtype."""
    batch, n_heads = q.shape[:2]
    grads = [
        np.empty(q.shape, dtype=q.dtype) if destination is None else destination
        for destination in destinations
    ]
    if q.size == 0:
        return grads

    def run(pair_start, pair_stop):
        _attention.backward(dout, q, k, v, out, lse, *grads, scale, pair_start, pair_stop, *blocks)

    with single_threaded_blas():
        run_blocks(run, pair_blocks(batch, n_heads, n_jobs), sharedmem=True)
    return grads


def _in_float64(*arrays):
    return [np.asarray(array, dtype=np.float64) for array in arrays]


def _to_float32(name, array):
    """Cast a float64 result of the fallback to float32; raise if it does not fit."""
    with np.errstate(over="ignore"):
        single = array.astype(np.float32)
    if not _all_finite(single):
        raise ValueError(
            f"{name} exceeds the float32 range for these inputs; pass float64 q, k and v."
        )
    return single


@masked_arrays_checked()
def causal_attention(
    q,
    k,
    v,
    *,
    scale=None,
    return_lse=False,
    out=None,
    check_finite=True,
    n_jobs=None,
    _block_rows=None,
    _block_cols=None,
):
    """Causal scaled dot-product attention, in tiles with an online softmax.

    ``out[b, h, i] = sum_{j <= i} softmax_j(scale * q[b, h, i] . k[b, h, j]) v[b, h, j]``:
    each query attends to its own and all earlier positions.

    Parameters
    ----------
    q, k, v : array-like of shape (batch, n_heads, length, d_head)
        Queries, keys and values.  The dtype of ``q`` sets the working
        precision: float32 stays float32, anything else real is computed in
        float64; ``k`` and ``v`` are cast to it.  Arrays of that dtype whose
        last axis is contiguous are read in place (no copy), so transposed
        views of a packed projection cost nothing.
    scale : float, default=None
        Factor of the scores; None means ``1 / sqrt(d_head)``.
    return_lse : bool, default=False
        Also return the per-row log-sum-exp of the scores, which lets
        :func:`causal_attention_backward` skip recomputing the forward pass.
    out : ndarray of shape (batch, n_heads, length, d_head), default=None
        Where to write the output (and return it): an array of the working
        dtype with a contiguous last axis, sharing no memory with the inputs.
        A transposed view of a ``(batch, length, n_heads, d_head)`` array
        gives the heads side by side at every step, with no copy.
    check_finite : bool, default=True
        Whether to check first that the inputs hold no NaN or infinity (a
        pass over them).  False skips it, for inputs known to be finite: the
        inputs are then checked only if a result comes out non-finite (to
        name the culprit); a NaN or infinity that leaves every result finite
        (a key of -inf, which gets weight 0) goes unnoticed.  Either way the
        kernels read no memory out of bounds.
    n_jobs : int, default=None
        Threads over blocks of (batch, head) pairs; None means 1 (or the value
        of an enclosing ``joblib.parallel_config``), -1 all cores.  The result
        does not depend on it.
    _block_rows, _block_cols : int, default=None
        Private: query rows per block and keys per tile (default 64 and 512).

    Returns
    -------
    AttentionResult
        ``(out, lse)``: ``out`` of shape (batch, n_heads, length, d_head)
        (the ``out`` argument, if given); ``lse`` of shape
        (batch, n_heads, length), or None unless ``return_lse`` is True.

    Raises
    ------
    ValueError
        If the shapes do not match, an input contains NaN or infinity, or the
        scores overflow float64 (float32 inputs whose scores overflow float32
        are recomputed in float64).
    TypeError
        If an input is complex or not numeric, or ``scale`` is not a number.

    See Also
    --------
    causal_attention_backward : Gradients of a loss through this function.

    Notes
    -----
    Besides the outputs, a thread holds one ``(64, 512)`` tile of scores and
    two numbers per row of a block: memory is linear in the length, never
    quadratic.  Rows are normalised after the last tile, so the output is as
    accurate as a softmax over the whole row computed with its maximum
    subtracted.

    Examples
    --------
    The first query sees only the first key, so its output is the first value;
    the second query weighs both values by the softmax of its two scores:

    >>> import numpy as np
    >>> from skseq.inference import causal_attention
    >>> q = np.array([[[[1.0], [2.0]]]])      # batch 1, 1 head, length 2, d_head 1
    >>> k = np.array([[[[0.0], [1.0]]]])
    >>> v = np.array([[[[10.0], [20.0]]]])
    >>> out, lse = causal_attention(q, k, v, return_lse=True)
    >>> out[0, 0, :, 0].round(6)
    array([10.      , 18.807971])
    >>> bool(np.isclose(lse[0, 0, 1], np.log(np.exp(0.0) + np.exp(2.0))))
    True

    In float32, with several heads:

    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.normal(size=(3, 2, 4, 16, 8)).astype(np.float32)
    >>> out = causal_attention(q, k, v).out
    >>> out.shape, out.dtype
    ((2, 4, 16, 8), dtype('float32'))
    """
    check_finite = check_bool_param(check_finite, "check_finite")
    q, k, v = _check_qkv(q, k, v, check_finite)
    scale, blocks, return_lse = _check_options(
        scale, q.shape[3], n_jobs, _block_rows, _block_cols, return_lse=return_lse
    )
    (destination,) = _check_destinations({"out": out}, q.dtype, q.shape, (q, k, v))
    out, lse = _forward(q, k, v, scale, n_jobs, blocks, destination)
    if not (_all_finite(lse) and _all_finite(out)):
        if not check_finite:
            _require_finite({"q": q, "k": k, "v": v})
        if q.dtype != np.float32:
            raise ValueError(
                "The attention scores overflow float64 (|scale * q . k| is too large); "
                "scale q and k down."
            )
        # Scores beyond the float32 range: the output itself (an average of
        # rows of v) is representable, so compute in float64.
        out, lse = _forward(*_in_float64(q, k, v), scale, n_jobs, blocks)
        if not (_all_finite(lse) and _all_finite(out)):
            raise ValueError(
                "The attention scores overflow float64 (|scale * q . k| is too large); "
                "scale q and k down."
            )
        out = _to_float32("The attention output", out)
        lse = _to_float32("The log-sum-exp of the scores", lse) if return_lse else None
        if destination is not None:
            destination[...] = out
            out = destination
    return AttentionResult(out, lse if return_lse else None)


@masked_arrays_checked()
def causal_attention_backward(
    dout,
    q,
    k,
    v,
    out=None,
    lse=None,
    *,
    scale=None,
    dq=None,
    dk=None,
    dv=None,
    check_finite=True,
    n_jobs=None,
    _block_rows=None,
    _block_cols=None,
):
    """Gradients of a loss through :func:`causal_attention`.

    Given ``dout = dL/dout``, returns ``dL/dq``, ``dL/dk`` and ``dL/dv``.  The
    probabilities are rebuilt tile by tile from ``lse``: pass ``out`` and
    ``lse`` from ``causal_attention(q, k, v, return_lse=True)`` to reuse the
    forward pass, or neither to have it recomputed.

    Parameters
    ----------
    dout : array-like of shape (batch, n_heads, length, d_head)
        Gradient of the loss with respect to the attention output.
    q, k, v : array-like of shape (batch, n_heads, length, d_head)
        The inputs of the forward call; see :func:`causal_attention`.
    out : array-like of shape (batch, n_heads, length, d_head), default=None
        The output of the forward call.
    lse : array-like of shape (batch, n_heads, length), default=None
        The log-sum-exp of the forward call (``return_lse=True``).
    scale : float, default=None
        The scale of the forward call; None means ``1 / sqrt(d_head)``.
    dq, dk, dv : ndarray of shape (batch, n_heads, length, d_head), default=None
        Where to write the gradients (each returned in place of a new
        array): arrays of the working dtype with a contiguous last axis,
        sharing no memory with the inputs or with each other; for example
        transposed views of one ``(batch, length, 3, n_heads, d_head)``
        gradient of a packed projection.
    check_finite : bool, default=True
        Whether to check first that the inputs hold no NaN or infinity (a
        pass over them).  False skips it, for inputs known to be finite: the
        inputs are then checked only if a result comes out non-finite (to
        name the culprit); a NaN or infinity that leaves every result finite
        (an infinite ``lse``, which gives probabilities 0) goes unnoticed.
        Either way the kernels read no memory out of bounds.
    n_jobs : int, default=None
        Threads over blocks of (batch, head) pairs; None means 1.  The result
        does not depend on it.
    _block_rows, _block_cols : int, default=None
        Private: query rows per block and keys per tile.

    Returns
    -------
    AttentionGradients
        ``(dq, dk, dv)``, each of shape (batch, n_heads, length, d_head) and
        of the working dtype (that of ``q``, see :func:`causal_attention`).

    Raises
    ------
    ValueError
        If the shapes do not match, an input contains NaN or infinity, only
        one of ``out`` and ``lse`` is given, or the gradients overflow float64.
    TypeError
        If an input is complex or not numeric.

    See Also
    --------
    causal_attention : The forward pass.

    Notes
    -----
    With ``P = softmax(S)`` the probabilities, ``dP = dout V^T`` and
    ``delta[i] = dout[i] . out[i]``, the gradient of the scores is
    ``dS = P * (dP - delta)``, and ``dq = scale dS K``, ``dk = scale dS^T Q``,
    ``dv = P^T dout``.  A thread holds two tiles of ``(64, 512)`` numbers;
    ``out`` and ``lse`` are not checked against ``q``, ``k``, ``v``: they
    must come from the forward call with the same inputs and ``scale``.

    Examples
    --------
    With a single query and key the softmax is 1 whatever the score, so the
    gradient reaches only ``v``:

    >>> import numpy as np
    >>> from skseq.inference import causal_attention, causal_attention_backward
    >>> q, k, v = np.ones((3, 1, 1, 1, 2))
    >>> grads = causal_attention_backward(np.ones((1, 1, 1, 2)), q, k, v)
    >>> grads.dq.ravel(), grads.dk.ravel(), grads.dv.ravel()
    (array([0., 0.]), array([0., 0.]), array([1., 1.]))

    Reusing the forward pass:

    >>> rng = np.random.default_rng(0)
    >>> q, k, v, dout = rng.normal(size=(4, 2, 3, 10, 4))
    >>> out, lse = causal_attention(q, k, v, return_lse=True)
    >>> grads = causal_attention_backward(dout, q, k, v, out, lse)
    >>> again = causal_attention_backward(dout, q, k, v)
    >>> bool(np.allclose(grads.dq, again.dq))
    True
    """
    check_finite = check_bool_param(check_finite, "check_finite")
    q, k, v = _check_qkv(q, k, v, check_finite)
    dtype = q.dtype
    dout = _as_kernel_array("dout", dout, dtype, q.shape, check_finite)
    scale, blocks = _check_options(scale, q.shape[3], n_jobs, _block_rows, _block_cols)
    if (out is None) != (lse is None):
        raise ValueError(
            "Pass both out and lse (from causal_attention(..., return_lse=True)) or neither."
        )
    if out is None:
        out, lse = _forward(q, k, v, scale, n_jobs, blocks)
        finite_forward = _all_finite(lse) and _all_finite(out)
    else:
        out = _as_kernel_array("out", out, dtype, q.shape, check_finite)
        lse = _as_kernel_array("lse", lse, dtype, q.shape[:3], check_finite)
        finite_forward = True  # checked above, or with the gradients
    destinations = _check_destinations(
        {"dq": dq, "dk": dk, "dv": dv}, dtype, q.shape, (q, k, v, dout, out, lse)
    )
    if finite_forward:
        grads = _backward(dout, q, k, v, out, lse, scale, n_jobs, blocks, destinations)
        if all(_all_finite(grad) for grad in grads):
            return AttentionGradients(*grads)
    if not check_finite:
        _require_finite({"q": q, "k": k, "v": v, "dout": dout, "out": out, "lse": lse})
    if dtype == np.float32:
        # Scores, or products of the backward pass, beyond the float32 range:
        # redo everything in float64.
        q64, k64, v64, dout64 = _in_float64(q, k, v, dout)
        out64, lse64 = _forward(q64, k64, v64, scale, n_jobs, blocks)
        if _all_finite(lse64) and _all_finite(out64):
            grads = _backward(dout64, q64, k64, v64, out64, lse64, scale, n_jobs, blocks)
            if all(_all_finite(grad) for grad in grads):
                results = []
                for name, grad, destination in zip(
                    ("dq", "dk", "dv"), grads, destinations, strict=True
                ):
                    grad = _to_float32(f"The gradient {name}", grad)
                    if destination is not None:
                        destination[...] = grad
                        grad = destination
                    results.append(grad)
                return AttentionGradients(*results)
    raise ValueError(
        "The attention scores or their gradients overflow float64 for these inputs "
        "(|scale * q . k| or |dout . v| is too large); scale the inputs down."
    )
