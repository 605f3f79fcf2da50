"""The selective scan of S6 / Mamba and its gradients, on plain arrays.

For every batch element ``b``, channel ``d`` and step ``t`` (the recurrence of
doc/user_guide/selective_ssm.rst)::

    dt   = softplus(delta[b, d, t] + delta_bias[d])     (or without softplus / bias)
    h_t  = exp(dt * A[d]) * h_{t-1} + dt * B_t * u[b, d, t],   h_{-1} = 0
    y_t  = C_t . h_t + D[d] * u[b, d, t]
    out  = y_t * silu(z[b, d, t])                      (when a gate ``z`` is given)

with ``B_t = B[d]`` and ``C_t = C[d]`` when they are time-invariant (shape
``(channels, N)``), or ``B_t = B[b, :, t]`` and ``C_t = C[b, :, t]`` when they
are selective (shape ``(batch, N, length)``).  This is the recurrence of
Mamba's reference ``selective_scan_ref`` with real ``A``.

The work is done by the fused Cython kernels of :mod:`skseq._kernels._scan`:
no ``(batch, channels, length, N)`` array is ever formed; the backward pass
recomputes the states from checkpoints kept at chunk boundaries.  Both
functions release the GIL and can split the (batch, channel) pairs over
threads with ``n_jobs``.
"""

from typing import NamedTuple

import numpy as np

from .._kernels import load
from .._parallel import pair_blocks, run_blocks
from .._validation import check_bool_param, check_n_jobs, check_scalar_param
from ._checks import (
    all_finite,
    checked_array,
    leading_array,
    masked_arrays_checked,
    require_arrays,
)

_scan = load("_scan")

__all__ = ["selective_scan", "selective_scan_backward", "ScanResult", "ScanGradients"]

# Time steps per checkpoint chunk in the backward pass (and per transposed
# block of selective B / C in both passes).  64 steps x 16 states keeps the
# per-chunk buffers of one thread inside the L1 / L2 caches.
_DEFAULT_CHUNK_SIZE = 64


class ScanResult(NamedTuple):
    """What :func:`selective_scan` returns.

    Attributes
    ----------
    out : ndarray of shape (batch, channels, length)
        The scan output, gated by ``silu(z)`` when ``z`` was given.
    last_state : ndarray of shape (batch, channels, N) or None
        The state after the last step, when ``return_last_state=True``.
    """

    out: np.ndarray
    last_state: np.ndarray | None


class ScanGradients(NamedTuple):
    """What :func:`selective_scan_backward` returns.

    Each gradient has the shape of its input; ``dD``, ``dz`` and
    ``ddelta_bias`` are None when ``D``, ``z`` and ``delta_bias`` were None.
    ``ddelta`` is the gradient with respect to the raw ``delta`` argument
    (before the bias and the softplus).
    """

    du: np.ndarray
    ddelta: np.ndarray
    dA: np.ndarray
    dB: np.ndarray
    dC: np.ndarray
    dD: np.ndarray | None
    dz: np.ndarray | None
    ddelta_bias: np.ndarray | None


def _checked_projection(name, value, dtype, batch, n_channels, n_state, length):
    """B or C: (channels, N) time-invariant or (batch, N, length) selective."""
    array = np.asarray(value)
    if array.ndim == 2:
        return checked_array(name, array, dtype, (n_channels, n_state)), False
    if array.ndim == 3:
        return checked_array(name, array, dtype, (batch, n_state, length)), True
    raise ValueError(
        f"{name} must have shape (channels, N) = {(n_channels, n_state)} (time-invariant) or "
        f"(batch, N, length) = {(batch, n_state, length)} (selective), got {array.shape}."
    )


class _ScanInputs(NamedTuple):
    """The checked inputs of a scan (see :func:`_check_inputs`)."""

    u: np.ndarray
    delta: np.ndarray
    A: np.ndarray
    B: np.ndarray
    C: np.ndarray
    D: np.ndarray | None
    z: np.ndarray | None
    delta_bias: np.ndarray | None
    dout: np.ndarray | None
    selective_B: bool
    selective_C: bool


def _check_inputs(u, delta, A, B, C, D, z, delta_bias, dout=None):
    """Validate and convert all scan inputs to C-contiguous arrays of u's dtype.

    ``dout`` is checked only by the backward pass, which has made sure it is
    not None.  Returns a :class:`_ScanInputs`.
    """
    require_arrays(u=u, delta=delta, A=A, B=B, C=C)
    u, dtype = leading_array("u", u, ("batch", "channels", "length"))
    batch, n_channels, length = u.shape
    delta = checked_array("delta", delta, dtype, u.shape)
    A = np.asarray(A)
    if A.ndim != 2 or A.shape[0] != n_channels:
        raise ValueError(f"A must have shape (channels, N) = ({n_channels}, N), got {A.shape}.")
    if A.shape[1] == 0:
        raise ValueError("A must have at least one state (N >= 1).")
    A = checked_array("A", A, dtype)
    n_state = A.shape[1]
    B, selective_B = _checked_projection("B", B, dtype, batch, n_channels, n_state, length)
    C, selective_C = _checked_projection("C", C, dtype, batch, n_channels, n_state, length)
    if D is not None:
        D = checked_array("D", D, dtype, (n_channels,))
    if z is not None:
        z = checked_array("z", z, dtype, u.shape)
    if delta_bias is not None:
        delta_bias = checked_array("delta_bias", delta_bias, dtype, (n_channels,))
    if dout is not None:
        dout = checked_array("dout", dout, dtype, u.shape)
    return _ScanInputs(u, delta, A, B, C, D, z, delta_bias, dout, selective_B, selective_C)


def _check_steps(delta, delta_bias, delta_softplus):
    """Refuse a negative step ``delta + delta_bias`` when it is not passed through a softplus.

    ``exp(dt * A)`` with ``dt < 0`` is not a discretisation of the
    continuous system: it runs it backwards in time and overflows to inf or
    NaN for any stable ``A``.  One vectorised minimum over ``delta`` per
    channel (the softplus steps are never negative).
    """
    if delta_softplus or delta.size == 0:
        return
    lowest_bias = 0 if delta_bias is None else delta_bias.min()
    if delta.min() + lowest_bias >= 0:  # the common case: one contiguous reduction
        return
    smallest = np.min(delta, axis=(0, 2))
    if delta_bias is not None:
        smallest = smallest + delta_bias
    if np.any(smallest < 0):
        channel = int(np.argmin(smallest))
        raise ValueError(
            f"The step delta + delta_bias must be >= 0 when delta_softplus=False, got "
            f"{float(smallest[channel])!r} in channel {channel}: a negative step is not a "
            "discretisation (exp(step * A) would run the system backwards). Pass "
            "delta_softplus=True, or non-negative steps."
        )


def _overflow_error(what, A, length, dtype):
    """The ValueError for a scan whose ``what`` overflowed the working dtype."""
    largest = float(np.max(A))
    if largest > 0:
        cause = (
            f"A has positive entries (up to {largest:.3g}), so exp(step * A) makes the state "
            f"grow without bound over the length of {length} steps; use A <= 0 (a stable "
            "system) or shorter sequences"
        )
    else:
        cause = (
            f"the inputs' scale is too large for the {length} steps; rescale u, B, C or "
            "the steps"
        )
    return ValueError(
        f"The selective scan's {what} overflowed {np.dtype(dtype).name}: {cause}."
    )


def _check_options(delta_softplus, n_jobs, chunk_size, return_last_state=False):
    """The scalar arguments of both passes: real bools, None or a nonzero int, a positive int.

    Returns ``(delta_softplus, return_last_state, chunk_size)`` as Python
    values (the chunk size defaulted).
    """
    delta_softplus = check_bool_param(delta_softplus, "delta_softplus")
    return_last_state = check_bool_param(return_last_state, "return_last_state")
    check_n_jobs(n_jobs)
    if chunk_size is None:
        chunk_size = _DEFAULT_CHUNK_SIZE
    check_scalar_param(chunk_size, "_chunk_size", "int", low=1)
    return delta_softplus, return_last_state, int(chunk_size)


@masked_arrays_checked()
def selective_scan(
    u,
    delta,
    A,
    B,
    C,
    D=None,
    z=None,
    delta_bias=None,
    *,
    delta_softplus=False,
    return_last_state=False,
    n_jobs=None,
    _chunk_size=None,
):
    """Run the selective state-space recurrence (S6 / Mamba) over sequences.

    Parameters
    ----------
    u : array-like of shape (batch, channels, length)
        Input sequences.  Its dtype sets the working precision: float32 stays
        float32, anything else real is computed in float64; the other inputs
        are cast to that dtype.
    delta : array-like of shape (batch, channels, length)
        Step sizes before the bias and the softplus.  Without the softplus,
        ``delta + delta_bias`` is the step itself and must be >= 0.
    A : array-like of shape (channels, N)
        Real diagonal state matrices (usually negative).
    B : array-like of shape (channels, N) or (batch, N, length)
        Input projections, time-invariant or selective (one per step).
    C : array-like of shape (channels, N) or (batch, N, length)
        Output projections, time-invariant or selective.
    D : array-like of shape (channels,), default=None
        Skip connection ``D * u``; none if None.
    z : array-like of shape (batch, channels, length), default=None
        Gate: the output is multiplied by ``silu(z)`` when given.
    delta_bias : array-like of shape (channels,), default=None
        Added to ``delta`` before the softplus.
    delta_softplus : bool, default=False
        Whether the step is ``softplus(delta + delta_bias)``.
    return_last_state : bool, default=False
        Whether to return the state after the last step.
    n_jobs : int, default=None
        Threads over blocks of (batch, channel) pairs; None means 1 (or the
        value of an enclosing ``joblib.parallel_config``), -1 all cores.
        The result does not depend on it.
    _chunk_size : int, default=None
        Private: time steps per transposed block of selective ``B`` / ``C``.

    Returns
    -------
    ScanResult
        ``(out, last_state)``: ``out`` of shape (batch, channels, length) and
        dtype of the working precision; ``last_state`` of shape
        (batch, channels, N), or None unless ``return_last_state``.

    Raises
    ------
    ValueError
        If a shape does not match, an input contains NaN or infinity,
        ``n_jobs`` is 0 or ``_chunk_size`` is below 1; if a step
        ``delta + delta_bias`` is negative with ``delta_softplus=False``;
        or if the output overflows the working dtype (``A`` with positive
        entries over a long sequence): nothing infinite or NaN is returned.
    TypeError
        If an input is complex or not numeric, a required array is None, a
        flag is not a bool (numpy bools are accepted), or ``n_jobs`` is
        neither None nor an integer.

    See Also
    --------
    selective_scan_backward : Gradients of a loss through this function.

    Notes
    -----
    No array of shape (batch, channels, length, N) is formed: each thread keeps
    one state vector per channel and small per-chunk buffers.  ``exp(dt * A)``
    is evaluated by the kernel's own polynomial (to a few ulp); decays below
    2**-1021 (float64) or 2**-124 (float32) are flushed to zero.

    Examples
    --------
    A single channel with one state, ``A = log(0.5)`` and a unit step, so that
    the state halves at every step before the new input is added:

    >>> import numpy as np
    >>> from skseq.inference.scan import selective_scan
    >>> u = np.array([[[1.0, 0.0, 0.0, 2.0]]])
    >>> delta = np.ones_like(u)
    >>> A = np.log([[0.5]])
    >>> out, last_state = selective_scan(u, delta, A, B=[[1.0]], C=[[1.0]],
    ...                                  return_last_state=True)
    >>> out
    array([[[1.   , 0.5  , 0.25 , 2.125]]])
    >>> last_state
    array([[[2.125]]])

    Selective ``B`` / ``C`` with a gate and a softplus step, in float32:

    >>> rng = np.random.default_rng(0)
    >>> batch, channels, length, n_state = 2, 3, 5, 4
    >>> u = rng.normal(size=(batch, channels, length)).astype(np.float32)
    >>> out, _ = selective_scan(
    ...     u, rng.normal(size=u.shape), -np.exp(rng.normal(size=(channels, n_state))),
    ...     rng.normal(size=(batch, n_state, length)), rng.normal(size=(batch, n_state, length)),
    ...     D=np.ones(channels), z=rng.normal(size=u.shape), delta_softplus=True)
    >>> out.shape, out.dtype
    ((2, 3, 5), dtype('float32'))
    """
    delta_softplus, return_last_state, chunk_size = _check_options(
        delta_softplus, n_jobs, _chunk_size, return_last_state
    )
    u, delta, A, B, C, D, z, delta_bias, _, selective_B, selective_C = _check_inputs(
        u, delta, A, B, C, D, z, delta_bias
    )
    _check_steps(delta, delta_bias, delta_softplus)
    dtype = u.dtype
    batch, n_channels, length = u.shape
    n_state = A.shape[1]
    out = np.zeros(u.shape, dtype=dtype)
    last_state = np.zeros((batch, n_channels, n_state), dtype=dtype) if return_last_state else None
    if u.size == 0:
        return ScanResult(out, last_state)
    D_array = D if D is not None else np.zeros(n_channels, dtype=dtype)
    bias_array = delta_bias if delta_bias is not None else np.zeros(n_channels, dtype=dtype)
    B_kernel = B if selective_B else B[np.newaxis]
    C_kernel = C if selective_C else C[np.newaxis]
    state_target = last_state if return_last_state else np.zeros((1, 1, 1), dtype=dtype)

    def run(pair_start, pair_stop):
        _scan.forward(
            u,
            delta,
            A,
            B_kernel,
            C_kernel,
            D_array,
            z if z is not None else u,
            bias_array,
            out,
            state_target,
            selective_B,
            selective_C,
            z is not None,
            delta_softplus,
            return_last_state,
            pair_start,
            pair_stop,
            chunk_size,
        )

    # The kernels write into shared output arrays: threads, never processes.
    run_blocks(run, pair_blocks(batch, n_channels, n_jobs), sharedmem=True)
    # Finite inputs and non-negative steps leave only overflow to make the
    # outputs non-finite; one summed check, after the kernel.
    if not all_finite(out) or (return_last_state and not all_finite(last_state)):
        raise _overflow_error("output", A, length, dtype)
    return ScanResult(out, last_state)


@masked_arrays_checked()
def selective_scan_backward(
    dout,
    u,
    delta,
    A,
    B,
    C,
    D=None,
    z=None,
    delta_bias=None,
    *,
    delta_softplus=False,
    n_jobs=None,
    _chunk_size=None,
):
    """Gradients of a loss through :func:`selective_scan`.

    Given ``dout = dL/dout``, returns the gradient of ``L`` with respect to
    every input of ``selective_scan(u, delta, A, B, C, D, z, delta_bias,
    delta_softplus=delta_softplus)``.  The states are recomputed from the
    inputs: one pass stores them at the start of every chunk of
    ``_chunk_size`` steps, the reverse pass recomputes each chunk before
    running the gradient recurrence over it (derived in the user guide's "The backward pass",
    doc/user_guide/selective_ssm.rst).

    Parameters
    ----------
    dout : array-like of shape (batch, channels, length)
        Gradient of the loss with respect to the scan output.
    u, delta, A, B, C, D, z, delta_bias, delta_softplus
        The arguments of the forward call; see :func:`selective_scan`.
    n_jobs : int, default=None
        Threads over blocks of (batch, channel) pairs; None means 1.  The
        result equals the serial one up to the order of the sums over the
        blocks.
    _chunk_size : int, default=None
        Private: time steps between state checkpoints (default 64).

    Returns
    -------
    ScanGradients
        ``(du, ddelta, dA, dB, dC, dD, dz, ddelta_bias)``, each of the shape
        of its input and of the working dtype (that of ``u``, see
        :func:`selective_scan`); ``dD``, ``dz`` and ``ddelta_bias`` are None
        when ``D``, ``z`` and ``delta_bias`` are None.

    Raises
    ------
    ValueError
        If a shape does not match, an input contains NaN or infinity,
        ``n_jobs`` is 0 or ``_chunk_size`` is below 1; if a step is negative
        with ``delta_softplus=False``; or if a gradient overflows the working
        dtype (as in :func:`selective_scan`).
    TypeError
        If an input is complex or not numeric, a required array is None, a
        flag is not a bool (numpy bools are accepted), or ``n_jobs`` is
        neither None nor an integer.

    See Also
    --------
    selective_scan : The forward recurrence.

    Notes
    -----
    Nothing of shape (batch, channels, length, N) is formed.  Besides the
    outputs, one thread holds the checkpoints of 16 channels
    (``16 * ceil(length / chunk) * N`` numbers), about ``6 * chunk * N``
    numbers of per-chunk buffers and a few ``(channels, N)`` arrays: with the
    default chunk of 64 steps and N = 16 that is below one ``length * N``
    buffer from length 1024 up (0.4 of one at length 4096).  With
    ``n_jobs > 1``, a thread sharing a batch element with another thread also
    keeps its own selective ``dB`` / ``dC`` rows for that element.

    Examples
    --------
    The gradient of ``sum(out)`` with respect to ``A`` for the one-state
    example of :func:`selective_scan`, where ``out = [1, a, a**2, a**3 + 2]``
    with ``a = exp(A)``, is ``(a + 2 a**2 + 3 a**3) = 1.375`` at ``a = 0.5``:

    >>> import numpy as np
    >>> from skseq.inference.scan import selective_scan_backward
    >>> u = np.array([[[1.0, 0.0, 0.0, 2.0]]])
    >>> grads = selective_scan_backward(np.ones_like(u), u, np.ones_like(u), np.log([[0.5]]),
    ...                                 B=[[1.0]], C=[[1.0]])
    >>> round(float(grads.dA[0, 0]), 12)
    1.375
    >>> grads.du
    array([[[1.875, 1.75 , 1.5  , 1.   ]]])
    >>> grads.dD is None
    True
    """
    delta_softplus, _, chunk_size = _check_options(delta_softplus, n_jobs, _chunk_size)
    require_arrays(dout=dout)
    checked = _check_inputs(u, delta, A, B, C, D, z, delta_bias, dout=dout)
    _check_steps(checked.delta, checked.delta_bias, delta_softplus)
    return _backward(checked, delta_softplus, chunk_size, n_jobs)


def _backward(checked, delta_softplus, chunk_size, n_jobs):
    """The :class:`ScanGradients` of checked inputs (what :func:`_check_inputs` returns).

    The backward kernel runs over blocks of pairs and the shared gradients are added up.

    Gradients summed over pairs (``dA``, ``dD``, ``ddelta_bias``, time-invariant
    ``dB``/``dC``) get a private accumulator per block when there are several
    blocks.  Selective ``dB``/``dC`` rows of a batch element are written in
    place by the one block that covers all its channels, and accumulated
    privately only by blocks that share the batch element with another block.
    """
    u, delta, A, B, C, D, z, delta_bias, dout, selective_B, selective_C = checked
    dtype = u.dtype
    batch, n_channels, _ = u.shape
    du = np.zeros(u.shape, dtype=dtype)
    ddelta = np.zeros(u.shape, dtype=dtype)
    dz = np.zeros(u.shape, dtype=dtype) if z is not None else None
    dA = np.zeros(A.shape, dtype=dtype)
    dB = np.zeros((1,) + B.shape if not selective_B else B.shape, dtype=dtype)
    dC = np.zeros((1,) + C.shape if not selective_C else C.shape, dtype=dtype)
    dD = np.zeros(n_channels, dtype=dtype)
    ddelta_bias = np.zeros(n_channels, dtype=dtype)

    def result():
        return ScanGradients(
            du,
            ddelta,
            dA,
            dB if selective_B else dB[0],
            dC if selective_C else dC[0],
            dD if D is not None else None,
            dz,
            ddelta_bias if delta_bias is not None else None,
        )

    if u.size == 0:
        return result()
    D_array = D if D is not None else np.zeros(n_channels, dtype=dtype)
    bias_array = delta_bias if delta_bias is not None else np.zeros(n_channels, dtype=dtype)
    z_array = z if z is not None else u
    dz_target = dz if dz is not None else np.zeros((1, 1, 1), dtype=dtype)
    B_kernel = B if selective_B else B[np.newaxis]
    C_kernel = C if selective_C else C[np.newaxis]
    blocks = pair_blocks(batch, n_channels, n_jobs)
    serial = len(blocks) == 1

    def run(pair_start, pair_stop):
        first_batch = pair_start // n_channels
        stop_batch = (pair_stop - 1) // n_channels + 1
        shared = pair_start % n_channels != 0 or pair_stop % n_channels != 0
        sums = {
            "dA": dA if serial else np.zeros_like(dA),
            "dD": dD if serial else np.zeros_like(dD),
            "ddelta_bias": ddelta_bias if serial else np.zeros_like(ddelta_bias),
        }
        for name, full, selective in (("dB", dB, selective_B), ("dC", dC, selective_C)):
            if not selective:
                sums[name] = full if serial else np.zeros_like(full)
            elif shared and not serial:
                sums[name] = np.zeros_like(full[first_batch:stop_batch])
            else:
                sums[name] = full[first_batch:stop_batch]
        _scan.backward(
            dout,
            u,
            delta,
            A,
            B_kernel,
            C_kernel,
            D_array,
            z_array,
            bias_array,
            du,
            ddelta,
            sums["dA"],
            sums["dB"],
            sums["dC"],
            sums["dD"],
            dz_target,
            sums["ddelta_bias"],
            selective_B,
            selective_C,
            z is not None,
            delta_softplus,
            pair_start,
            pair_stop,
            chunk_size,
            first_batch,
        )
        return first_batch, stop_batch, shared, sums

    results = run_blocks(run, blocks, sharedmem=True)
    if not serial:  # the blocks' private sums
        for first_batch, stop_batch, shared, sums in results:
            dA += sums["dA"]
            dD += sums["dD"]
            ddelta_bias += sums["ddelta_bias"]
            for name, full, selective in (("dB", dB, selective_B), ("dC", dC, selective_C)):
                if not selective:
                    full += sums[name]
                elif shared:
                    full[first_batch:stop_batch] += sums[name]
    gradients = (du, ddelta, dA, dB, dC, dD, ddelta_bias) + ((dz,) if dz is not None else ())
    if not all(all_finite(gradient) for gradient in gradients):
        raise _overflow_error("gradients", A, u.shape[2], dtype)
    return result()
