"""The S4D convolution kernel, the causal FFT convolution, and their gradients.

An S4D layer is a bank of time-invariant diagonal state-space models, one per
channel ``c``, each with ``H = N / 2`` complex modes (the other half of the
``N`` states are their complex conjugates).  With the step ``Δ_c =
exp(log_dt[c])`` and zero-order hold, channel ``c`` maps its input ``u`` to
``y = K * u``, a causal convolution with the kernel::

    Ā = exp(Δ_c A[c, n]),   B̄ = (Ā - 1) / A[c, n] · B[c, n],
    K[c, k] = 2 Re sum_n C[c, n] B̄[c, n] Ā[c, n]**k,      k = 0 .. length - 1.

:func:`s4d_kernel` computes ``K``; :func:`causal_convolution` computes
``y[b, c, t] = sum_{k <= t} K[c, k] u[b, c, t - k]`` by FFT in
``O(L log L)``.  Their backward functions return the gradients of a loss given
its gradient with respect to their output.

**Gradients of complex parameters** are returned as ``dL/dRe + i dL/dIm``
(for a real loss ``L``): the real part is the derivative with respect to the
real part of the parameter, the imaginary part the derivative with respect to
its imaginary part.  This is the convention of PyTorch's autograd, so
``A.grad`` of a complex torch tensor and ``dA`` here are the same numbers.

How the powers ``Ā**k`` are computed, the accuracy of both functions and the
derivation of the gradients are in the user guide (:ref:`s4d`).
"""

import math
import numbers
from typing import NamedTuple

import joblib
import numpy as np
import scipy.fft

from .._kernels import load
from .._parallel import pair_blocks, run_blocks
from .._validation import check_allocation, check_bool_param, check_n_jobs
from ._checks import (
    all_finite,
    checked_array,
    leading_array,
    masked_arrays_checked,
    require_arrays,
)

_s4d = load("_s4d")

__all__ = [
    "s4d_kernel",
    "s4d_kernel_backward",
    "S4DKernelResult",
    "S4DKernelGradients",
    "causal_convolution",
    "causal_convolution_backward",
    "ConvolutionResult",
    "ConvolutionSpectra",
    "ConvolutionGradients",
]

# Terms of the Taylor series of (e^x - 1) / x and of its derivative summed for
# |x| < 1: the first term left out is below 1 / 21! < 2e-20.
_SERIES_TERMS = 20
_PHI_COEFFICIENTS = [1.0 / math.factorial(j + 1) for j in range(_SERIES_TERMS)]
_PHI_PRIME_COEFFICIENTS = [(j + 1) / math.factorial(j + 2) for j in range(_SERIES_TERMS)]


class S4DKernelResult(NamedTuple):
    """What :func:`s4d_kernel` returns.

    Attributes
    ----------
    K : ndarray of shape (channels, length)
        The convolution kernel, real, of the working dtype.
    """

    K: np.ndarray


class S4DKernelGradients(NamedTuple):
    """What :func:`s4d_kernel_backward` returns.

    Attributes
    ----------
    dlog_dt : ndarray of shape (channels,)
        Gradient with respect to ``log_dt`` (real, of the working dtype).
    dA, dB, dC : ndarray of shape (channels, N / 2)
        Gradients with respect to ``A``, ``B`` and ``C``, complex (complex64
        in single precision, else complex128), as ``dL/dRe + i dL/dIm``.
    """

    dlog_dt: np.ndarray
    dA: np.ndarray
    dB: np.ndarray
    dC: np.ndarray


class ConvolutionSpectra(NamedTuple):
    """The spectra :func:`causal_convolution` computed, for its backward pass.

    Attributes
    ----------
    u_spectrum : ndarray of shape (batch, channels, n_fft // 2 + 1)
        ``rfft(u, n_fft)``, complex.
    kernel_spectrum : ndarray of shape (channels, n_fft // 2 + 1)
        ``rfft(K[:, :min(kernel_length, length)], n_fft)``, complex.
    n_fft : int
        The transform length, at least ``length + min(kernel_length, length) - 1``.
    length : int
        Steps of ``u``.
    kernel_length : int
        Columns of ``K``.
    u_exponent : ndarray of int, shape (batch, channels), or None
        When not None, ``u_spectrum`` is the spectrum of ``u * 2**-u_exponent``
        (each sequence scaled to a largest entry below one, because the
        spectra of ``u`` itself overflow); None: of ``u``.
    kernel_exponent : ndarray of int, shape (channels,), or None
        Likewise for ``kernel_spectrum`` and ``K``.
    """

    u_spectrum: np.ndarray
    kernel_spectrum: np.ndarray
    n_fft: int
    length: int
    kernel_length: int
    u_exponent: np.ndarray | None = None
    kernel_exponent: np.ndarray | None = None


class ConvolutionResult(NamedTuple):
    """What :func:`causal_convolution` returns.

    Attributes
    ----------
    y : ndarray of shape (batch, channels, length)
        The convolution, of the working dtype.
    spectra : ConvolutionSpectra or None
        The spectra it computed, for :func:`causal_convolution_backward`;
        None unless ``return_spectra=True``.
    """

    y: np.ndarray
    spectra: ConvolutionSpectra | None


class ConvolutionGradients(NamedTuple):
    """What :func:`causal_convolution_backward` returns.

    Attributes
    ----------
    du : ndarray of shape (batch, channels, length)
    dK : ndarray of shape (channels, kernel_length)
        Zero in the columns at and beyond ``length``, which do not reach the
        output.
    """

    du: np.ndarray
    dK: np.ndarray


# -- the S4D kernel -----------------------------------------------------------------


def _checked_complex(name, value, shape):
    """C-contiguous finite complex128 array of ``shape``; raises naming ``name``."""
    array = np.asarray(value)
    if array.dtype.kind not in "fiubc":
        raise TypeError(
            f"{name} must be a numeric (real or complex) array, got dtype {array.dtype}."
        )
    if array.shape != shape:
        raise ValueError(f"{name} must have shape (channels, N / 2) = {shape}, got {array.shape}.")
    array = np.ascontiguousarray(array, dtype=np.complex128)
    if not (all_finite(array.real) and all_finite(array.imag)):
        raise ValueError(f"{name} contains NaN or infinity.")
    return array


def _check_kernel_parameters(log_dt, A, B, C):
    """Validate the S4D parameters; returns the working dtype and float64 / complex128 copies."""
    require_arrays(log_dt=log_dt, A=A, B=B, C=C)
    log_dt, dtype = leading_array("log_dt", log_dt, ("channels",), np.float64)
    n_channels = log_dt.shape[0]
    A = np.asarray(A)
    if A.ndim != 2 or A.shape[0] != n_channels:
        raise ValueError(
            f"A must have shape (channels, N / 2) = ({n_channels}, N / 2), got {A.shape}."
        )
    if A.shape[1] == 0:
        raise ValueError("A must have at least one mode (N / 2 >= 1).")
    shape = A.shape
    A = _checked_complex("A", A, shape)
    B = _checked_complex("B", B, shape)
    C = _checked_complex("C", C, shape)
    return dtype, log_dt, A, B, C


def _check_length(length):
    if not isinstance(length, numbers.Integral) or isinstance(length, bool):
        raise TypeError(
            f"length must be an integer, got {length!r} of type {type(length).__name__}."
        )
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}.")
    return int(length)


def _expm1(x):
    """e^x - 1 for complex x without cancellation near 0 (real part by expm1 and sin^2)."""
    real, imag = x.real, x.imag
    return (np.expm1(real) * np.cos(imag) - 2.0 * np.sin(0.5 * imag) ** 2) + 1j * (
        np.exp(real) * np.sin(imag)
    )


def _phi_and_derivative(x):
    """φ(x) = (e^x - 1) / x and φ'(x) = (x e^x - e^x + 1) / x², elementwise for complex x.

    φ(0) = 1 and φ'(0) = 1/2.  For |x| < 1 both are Taylor series (the closed
    forms cancel there); elsewhere the closed forms lose at most a few bits.
    """
    small = np.abs(x) < 1.0
    series_x = np.where(small, x, 0.0)
    phi = np.zeros_like(x)
    phi_prime = np.zeros_like(x)
    for phi_coefficient, prime_coefficient in zip(
        reversed(_PHI_COEFFICIENTS), reversed(_PHI_PRIME_COEFFICIENTS), strict=True
    ):
        phi = phi * series_x + phi_coefficient
        phi_prime = phi_prime * series_x + prime_coefficient
    if not np.all(small):
        large_x = np.where(small, 1.0, x)
        with np.errstate(over="ignore", invalid="ignore"):
            expm1 = _expm1(large_x)
            closed_phi = expm1 / large_x
            closed_phi_prime = (expm1 + 1.0 - closed_phi) / large_x
        phi = np.where(small, phi, closed_phi)
        phi_prime = np.where(small, phi_prime, closed_phi_prime)
    return phi, phi_prime


class _Discretised(NamedTuple):
    dt: np.ndarray  # (channels,) float64
    x: np.ndarray  # Δ A, complex128 (channels, H)
    phi: np.ndarray  # (e^x - 1) / x
    phi_prime: np.ndarray
    weights: np.ndarray  # C B̄ = C B Δ φ(x)


def _discretise(log_dt, A, B, C):
    """Zero-order-hold discretisation in double precision; raises if it overflows."""
    with np.errstate(over="ignore", invalid="ignore"):
        dt = np.exp(log_dt)
        x = dt[:, None] * A
        phi, phi_prime = _phi_and_derivative(x)
        weights = C * B * (dt[:, None] * phi)
    for name, value in (("exp(log_dt)", dt), ("exp(log_dt) * A", x), ("C * B̄", weights)):
        if not (all_finite(value.real) and all_finite(value.imag)):
            raise ValueError(
                f"{name} overflows: log_dt, A, B or C are too large for the discretisation "
                "(Ā = exp(exp(log_dt) A) must be finite)."
            )
    return _Discretised(dt, x, phi, phi_prime, weights)


def _block_length(length):
    """Block M of the powers exp(k x) = exp(m M x) exp(j x): a multiple of 8 near sqrt(length).

    The exponentials cost about ``length / M + M`` per mode, least near
    ``M = sqrt(length)``; the matrix products cost the same for every M.
    """
    return min(length, 8 * max(1, math.ceil(math.sqrt(length) / 8)))


def _channel_blocks(n_channels, n_jobs):
    return pair_blocks(1, n_channels, n_jobs)


def _overflow_error(what):
    return ValueError(
        f"The S4D {what} overflows: with Re(A) > 0 the powers Ā**k grow without bound; "
        "use A with non-positive real part or a shorter length."
    )


@masked_arrays_checked()
def s4d_kernel(log_dt, A, B, C, length, *, n_jobs=None):
    """The convolution kernel of an S4D layer (zero-order hold).

    For every channel ``c`` and lag ``k = 0 .. length - 1``::

        Δ = exp(log_dt[c]),   Ā = exp(Δ A[c, n]),   B̄ = (Ā - 1) / A[c, n] · B[c, n],
        K[c, k] = 2 Re sum_n C[c, n] B̄[c, n] Ā**k

    (with ``B̄ = Δ B`` in the limit ``A = 0``).  The ``N / 2`` modes of each
    channel stand for ``N`` states in conjugate pairs, hence the ``2 Re``.

    Parameters
    ----------
    log_dt : array-like of shape (channels,)
        Logarithm of the step size of each channel.  Its dtype sets the
        working precision: float32 gives a float32 kernel, any other real
        dtype float64.
    A : array-like of shape (channels, N / 2)
        Diagonal state matrix, complex (a real array is taken as complex);
        usually ``Re A < 0``.
    B, C : array-like of shape (channels, N / 2)
        Input and output vectors, complex (or real).
    length : int
        Number of lags ``L`` of the kernel (the sequence length it is for).
    n_jobs : int, default=None
        Threads over blocks of channels; None means 1.  The result does not
        depend on it.

    Returns
    -------
    S4DKernelResult
        ``(K,)``: the kernel of shape (channels, length), real, of the
        working dtype.

    Raises
    ------
    ValueError
        If a shape does not match, an input is not finite, ``length < 1``,
        ``n_jobs`` is 0, the kernel would not fit in the machine's memory
        (:func:`skseq._validation.check_allocation`), or the kernel overflows
        (``Re A > 0`` with a long ``length``).
    TypeError
        If ``log_dt`` is complex, an input is None or not numeric, or
        ``length`` or ``n_jobs`` is not an integer.

    See Also
    --------
    s4d_kernel_backward : Gradients of a loss through this function.
    causal_convolution : Applies the kernel to sequences.

    Notes
    -----
    The powers are not computed by repeated multiplication, whose rounding
    errors grow with ``k``: with a block ``M`` near ``sqrt(length)``,
    ``Ā**(m M + j) = exp(m M Δ A) exp(j Δ A)``, both factors evaluated
    directly in double precision, so every power is exact to a few units in
    the last place whatever ``k``.  The sum over modes is then a real matrix
    product (BLAS) per channel.  The discretisation (``B̄`` by a
    cancellation-free ``(e^x - 1) / x``) runs in double precision also for a
    float32 kernel.  Terms below the smallest normal number (relative to the
    largest of the same lag) are dropped.

    Examples
    --------
    One channel with one real mode ``A = -1``, ``B = C = 1``, ``Δ = 1``: the
    kernel is ``2 (1 - e^-1) e^-k``.

    >>> import numpy as np
    >>> from skseq.inference import s4d_kernel
    >>> K = s4d_kernel(log_dt=[0.0], A=[[-1.0]], B=[[1.0]], C=[[1.0]], length=4).K
    >>> np.allclose(K, 2 * (1 - np.exp(-1)) * np.exp(-np.arange(4)))
    True

    S4D-Lin modes ``A_n = -1/2 + i π n`` for 3 channels and ``N = 8``, in float32:

    >>> A = np.tile(-0.5 + 1j * np.pi * np.arange(4), (3, 1))
    >>> log_dt = np.log([1e-3, 1e-2, 1e-1]).astype(np.float32)
    >>> K = s4d_kernel(log_dt, A, B=np.ones((3, 4)), C=np.ones((3, 4)), length=1000).K
    >>> K.shape, K.dtype
    ((3, 1000), dtype('float32'))
    """
    check_n_jobs(n_jobs)
    dtype, log_dt, A, B, C = _check_kernel_parameters(log_dt, A, B, C)
    length = _check_length(length)
    n_channels = log_dt.shape[0]
    check_allocation(
        (n_channels, length),
        dtype,
        argument=f"length={length}",
        what=f"the kernel K of shape (channels, length) = ({n_channels}, {length})",
    )
    discretised = _discretise(log_dt, A, B, C)
    K = np.empty((n_channels, length), dtype=dtype)
    if n_channels == 0:
        return S4DKernelResult(K)
    block = _block_length(length)
    x_re, x_im = np.ascontiguousarray(discretised.x.real), np.ascontiguousarray(discretised.x.imag)
    w_re = np.ascontiguousarray(discretised.weights.real)
    w_im = np.ascontiguousarray(discretised.weights.imag)

    def run(start, stop):
        with np.errstate(over="ignore", invalid="ignore"):
            _s4d.vandermonde_forward(x_re, x_im, w_re, w_im, K, block, start, stop)

    run_blocks(run, _channel_blocks(n_channels, n_jobs), sharedmem=True)
    if not all_finite(K):
        raise _overflow_error("kernel")
    return S4DKernelResult(K)


@masked_arrays_checked()
def s4d_kernel_backward(dK, log_dt, A, B, C, *, n_jobs=None):
    """Gradients of a loss through :func:`s4d_kernel`.

    Given ``dK = dL/dK`` for ``K = s4d_kernel(log_dt, A, B, C, length).K``
    (``length`` is the number of columns of ``dK``), returns the gradients
    with respect to ``log_dt``, ``A``, ``B`` and ``C``.

    Parameters
    ----------
    dK : array-like of shape (channels, length)
        Gradient of the loss with respect to the kernel; cast to the working
        dtype (set by ``log_dt``, see :func:`s4d_kernel`).
    log_dt, A, B, C
        The arguments of the forward call; see :func:`s4d_kernel`.
    n_jobs : int, default=None
        Threads over blocks of channels; None means 1.  The result does not
        depend on it.

    Returns
    -------
    S4DKernelGradients
        ``(dlog_dt, dA, dB, dC)``: ``dlog_dt`` real of shape (channels,);
        ``dA``, ``dB``, ``dC`` complex of shape (channels, N / 2), each the
        derivative with respect to the real part plus ``1j`` times the
        derivative with respect to the imaginary part (PyTorch's convention).

    Raises
    ------
    ValueError
        If a shape does not match, an input is not finite, ``n_jobs`` is 0,
        or a gradient overflows.
    TypeError
        If ``log_dt`` is complex, an input is None or not numeric, or
        ``n_jobs`` is not an integer.

    See Also
    --------
    s4d_kernel : The forward function.

    Notes
    -----
    With ``x = Δ A``, ``W = C B Δ φ(x)`` (``φ(x) = (e^x - 1) / x``),
    ``S0 = sum_k dK_k e^{k x}`` and ``S1 = sum_k k dK_k e^{k x}`` (computed
    like the forward kernel, as matrix products of exactly evaluated
    powers)::

        dC = 2 conj(B̄ S0)            dB = 2 conj(C Δ φ(x) S0)
        dA = 2 conj(C B Δ² φ'(x) S0 + W Δ S1)
        dlog_dt = Δ · 2 Re sum_n (C B e^x S0 + W A S1)

    Examples
    --------
    For one real mode, ``K[k] = 2 (1 - e^A) / (-A) e^{k A}`` with ``Δ = B = C
    = 1``; the gradient of ``sum(K)`` with respect to ``C`` is ``sum(K)``
    itself (``K`` is linear in ``C``), with no imaginary part for real ``A``
    and ``B``:

    >>> import numpy as np
    >>> from skseq.inference import s4d_kernel, s4d_kernel_backward
    >>> parameters = dict(log_dt=[0.0], A=[[-1.0]], B=[[1.0]], C=[[1.0]])
    >>> K = s4d_kernel(**parameters, length=5).K
    >>> grads = s4d_kernel_backward(np.ones_like(K), **parameters)
    >>> bool(np.isclose(grads.dC[0, 0], K.sum()))
    True
    """
    check_n_jobs(n_jobs)
    dtype, log_dt, A, B, C = _check_kernel_parameters(log_dt, A, B, C)
    n_channels, n_modes = A.shape
    dK = np.asarray(dK)
    if dK.ndim != 2 or dK.shape[0] != n_channels or dK.shape[1] < 1:
        raise ValueError(
            f"dK must have shape (channels, length) = ({n_channels}, length >= 1), got {dK.shape}."
        )
    dK = checked_array("dK", dK, dtype)
    length = dK.shape[1]
    discretised = _discretise(log_dt, A, B, C)
    dt, x = discretised.dt, discretised.x
    complex_dtype = np.complex64 if dtype == np.float32 else np.complex128
    sums = np.zeros((4, n_channels, n_modes))
    if n_channels > 0:
        block = _block_length(length)
        x_re, x_im = np.ascontiguousarray(x.real), np.ascontiguousarray(x.imag)

        def run(start, stop):
            with np.errstate(over="ignore", invalid="ignore"):
                _s4d.vandermonde_backward(
                    x_re, x_im, dK, sums[0], sums[1], sums[2], sums[3], block, start, stop
                )

        run_blocks(run, _channel_blocks(n_channels, n_jobs), sharedmem=True)
    s0 = sums[0] + 1j * sums[1]
    s1 = sums[2] + 1j * sums[3]
    dt_column = dt[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        b_bar = dt_column * discretised.phi * B
        dC = 2.0 * np.conj(b_bar * s0)
        dB = 2.0 * np.conj(C * (dt_column * discretised.phi) * s0)
        dA = 2.0 * np.conj(
            C * B * (dt_column**2 * discretised.phi_prime) * s0
            + discretised.weights * dt_column * s1
        )
        d_dt = 2.0 * np.sum((C * B * np.exp(x) * s0 + discretised.weights * A * s1).real, axis=1)
        dlog_dt = dt * d_dt
    for value in (dlog_dt, dA, dB, dC):
        if not (all_finite(np.real(value)) and all_finite(np.imag(value))):
            raise _overflow_error("kernel gradient")
    return S4DKernelGradients(
        dlog_dt.astype(dtype),
        dA.astype(complex_dtype),
        dB.astype(complex_dtype),
        dC.astype(complex_dtype),
    )


# -- the causal convolution -----------------------------------------------------------


def _check_convolution_inputs(u, K, dtype=None):
    """u and K as C-contiguous finite arrays of u's working dtype (or of ``dtype``)."""
    require_arrays(u=u, K=K)
    u, _ = leading_array("u", u, ("batch", "channels", "length"), dtype)
    K = np.asarray(K)
    if K.ndim != 2 or K.shape[0] != u.shape[1] or K.shape[1] < 1:
        raise ValueError(
            f"K must have shape (channels, kernel_length) = ({u.shape[1]}, kernel_length >= 1), "
            f"got {K.shape}."
        )
    K = checked_array("K", K, dtype)
    return u, K


def _fft_length(length, used_lags):
    """Transform length without wrap-around: at least length + used_lags - 1, fast for rfft."""
    return scipy.fft.next_fast_len(length + used_lags - 1, real=True)


def _workers(n_jobs):
    return max(1, int(joblib.effective_n_jobs(n_jobs)))


def _exponents(x, axis=-1):
    """Per-row binary exponents e with max |x| < 2**e (0 for rows of zeros), as ints.

    Scaling by powers of two is exact: ``ldexp(x, -e)`` has its largest
    entry in [0.5, 1) and the same digits as ``x``.
    """
    largest = np.maximum(np.max(x, axis=axis), -np.min(x, axis=axis))
    return np.frexp(largest)[1].astype(np.int64)


def _scaled(x, exponents):
    """``x * 2**-exponents`` along the last axis (exact)."""
    return np.ldexp(x, -exponents[..., np.newaxis]).astype(x.dtype, copy=False)


def _unscaled(x, exponents, what, dtype):
    """``x * 2**exponents`` along the last axis, or a ValueError when it overflows."""
    with np.errstate(over="ignore"):
        result = np.ldexp(x, exponents[..., np.newaxis]).astype(dtype, copy=False)
    if not all_finite(result):
        raise ValueError(
            f"The causal convolution's {what} overflow {np.dtype(dtype).name}: the exact "
            "values are beyond its largest number, as the inputs' scales multiply; "
            "rescale u and K (or dy)."
        )
    return result


def _spectrum_products(u_spectrum, kernel_spectrum, y_spectrum, n_jobs):
    real = u_spectrum.real.dtype

    def run(start, stop):
        _s4d.spectrum_product(
            u_spectrum.view(real), kernel_spectrum.view(real), y_spectrum.view(real), start, stop
        )

    run_blocks(run, _channel_blocks(u_spectrum.shape[1], n_jobs), sharedmem=True)


@masked_arrays_checked()
def causal_convolution(u, K, *, return_spectra=False, n_jobs=None):
    """Causal convolution of every channel of ``u`` with its kernel, by FFT.

    ``y[b, c, t] = sum_{k=0}^{t} K[c, k] u[b, c, t - k]``: the output at step
    ``t`` depends on the input up to ``t`` only.

    Parameters
    ----------
    u : array-like of shape (batch, channels, length)
        Input sequences.  Its dtype sets the working precision: float32 stays
        float32, any other real dtype is computed in float64; ``K`` is cast to
        it.
    K : array-like of shape (channels, kernel_length)
        One kernel per channel; lags beyond ``kernel_length`` are zero and
        lags from ``length`` on do not reach the output.
    return_spectra : bool, default=False
        Also return the spectra of ``u`` and ``K``, which
        :func:`causal_convolution_backward` can reuse instead of
        recomputing them.
    n_jobs : int, default=None
        Threads of the FFTs (``scipy.fft``'s ``workers``); None means 1.  The
        result does not depend on it.

    Returns
    -------
    ConvolutionResult
        ``(y, spectra)``: ``y`` of shape (batch, channels, length) and of the
        working dtype; ``spectra`` a :class:`ConvolutionSpectra`, or None
        unless ``return_spectra``.

    Raises
    ------
    ValueError
        If a shape does not match, an input contains NaN or infinity,
        ``n_jobs`` is 0, or an exact output is beyond the largest number of
        the working dtype (nothing infinite or NaN is returned).
    TypeError
        If an input is None, complex or not numeric, ``return_spectra`` is not
        a bool, or ``n_jobs`` is not an integer.

    See Also
    --------
    causal_convolution_backward : Gradients of a loss through this function.
    s4d_kernel : The kernel of an S4D layer.

    Notes
    -----
    Both sequences are zero-padded to a fast transform length ``n >= length +
    kernel_length - 1`` (``scipy.fft.next_fast_len``), so that the circular
    convolution of the real FFTs equals the linear one on the first
    ``length`` steps: ``O(n log n)`` per sequence instead of ``O(length *
    kernel_length)``.  The FFT convolution is accurate in norm: every output
    is within a small multiple of ``eps log2(n) ||u|| ||K||`` of the exact
    one (``eps`` the unit roundoff of the working precision), as for any FFT
    convolution; outputs far smaller than that bound are not accurate
    relative to themselves.

    The transforms of large inputs can overflow where the convolution itself
    does not (a sum of ``length`` entries near the largest number): then each
    sequence of ``u`` and each kernel is scaled by a power of two to a largest
    entry below one, which is exact, convolved, and scaled back.

    Examples
    --------
    A kernel ``[1, 0.5]`` adds half of the previous step to each step:

    >>> import numpy as np
    >>> from skseq.inference import causal_convolution
    >>> u = np.array([[[1.0, 2.0, 3.0, 4.0]]])
    >>> np.round(causal_convolution(u, K=[[1.0, 0.5]]).y, 12)
    array([[[1. , 2.5, 4. , 5.5]]])
    """
    return_spectra = check_bool_param(return_spectra, "return_spectra")
    check_n_jobs(n_jobs)
    u, K = _check_convolution_inputs(u, K)
    batch, n_channels, length = u.shape
    used = min(K.shape[1], length) if length > 0 else 0
    n_fft = _fft_length(length, used) if used > 0 else 1
    workers = _workers(n_jobs)
    if u.size == 0:
        y = np.zeros(u.shape, dtype=u.dtype)
        if not return_spectra:
            return ConvolutionResult(y, None)
        n_freq = n_fft // 2 + 1
        complex_dtype = np.result_type(u.dtype, np.complex64)
        spectra = ConvolutionSpectra(
            np.zeros((batch, n_channels, n_freq), complex_dtype),
            np.zeros((n_channels, n_freq), complex_dtype),
            n_fft,
            length,
            K.shape[1],
        )
        return ConvolutionResult(y, spectra)
    kernel = K[:, :used]
    u_exponent = kernel_exponent = None
    for scaled in (False, True):
        if scaled:
            # The plain transforms overflowed (only large inputs can make a
            # finite convolution non-finite): redo on exactly scaled inputs.
            u_exponent, kernel_exponent = _exponents(u), _exponents(kernel)
            u, kernel = _scaled(u, u_exponent), _scaled(kernel, kernel_exponent)
        with np.errstate(over="ignore", invalid="ignore"):
            u_spectrum = scipy.fft.rfft(u, n=n_fft, axis=-1, workers=workers)
            kernel_spectrum = scipy.fft.rfft(kernel, n=n_fft, axis=-1, workers=workers)
            y_spectrum = np.empty_like(u_spectrum) if return_spectra else u_spectrum
            _spectrum_products(u_spectrum, kernel_spectrum, y_spectrum, n_jobs)
            full = scipy.fft.irfft(y_spectrum, n=n_fft, axis=-1, workers=workers, overwrite_x=True)
        y = np.ascontiguousarray(full[..., :length])
        if scaled or all_finite(y):
            break
    if scaled:
        y = _unscaled(y, u_exponent + kernel_exponent[np.newaxis], "outputs", y.dtype)
    if not return_spectra:
        return ConvolutionResult(y, None)
    return ConvolutionResult(
        y,
        ConvolutionSpectra(
            u_spectrum, kernel_spectrum, n_fft, length, K.shape[1], u_exponent, kernel_exponent
        ),
    )


def _check_spectra(spectra, dtype, shape):
    if not isinstance(spectra, ConvolutionSpectra):
        raise TypeError(
            "spectra must be the ConvolutionSpectra returned by "
            f"causal_convolution(..., return_spectra=True), got {type(spectra).__name__}."
        )
    batch, n_channels, length = shape
    n_freq = spectra.n_fft // 2 + 1
    complex_dtype = np.result_type(dtype, np.complex64)
    expected = ((batch, n_channels, n_freq), (n_channels, n_freq))
    actual = (spectra.u_spectrum.shape, spectra.kernel_spectrum.shape)
    if spectra.length != length or actual != expected:
        raise ValueError(
            f"spectra are for u of {spectra.u_spectrum.shape[:2]} sequences of "
            f"{spectra.length} steps, not for dy of shape {shape}."
        )
    if spectra.u_spectrum.dtype != complex_dtype or spectra.kernel_spectrum.dtype != complex_dtype:
        raise ValueError(
            f"spectra are of dtype {spectra.u_spectrum.dtype}, but dy needs {complex_dtype}."
        )
    scales = (spectra.u_exponent, spectra.kernel_exponent)
    if (scales[0] is None) != (scales[1] is None) or (
        scales[0] is not None
        and (np.shape(scales[0]) != (batch, n_channels) or np.shape(scales[1]) != (n_channels,))
    ):
        raise ValueError(
            "spectra.u_exponent and spectra.kernel_exponent must both be None or of shapes "
            f"{(batch, n_channels)} and {(n_channels,)}."
        )


@masked_arrays_checked()
def causal_convolution_backward(dy, u=None, K=None, *, spectra=None, n_jobs=None):
    """Gradients of a loss through :func:`causal_convolution`.

    Given ``dy = dL/dy`` for ``y = causal_convolution(u, K).y``::

        du[b, c, s] = sum_{t >= s} K[c, t - s] dy[b, c, t]
        dK[c, k]    = sum_b sum_{t >= k} u[b, c, t - k] dy[b, c, t]

    both computed by FFT, as correlations.

    Parameters
    ----------
    dy : array-like of shape (batch, channels, length)
        Gradient of the loss with respect to the output; its dtype sets the
        working precision (as ``u``'s does in :func:`causal_convolution`).
    u, K : array-like
        The inputs of the forward call.  Give either both, or ``spectra``.
    spectra : ConvolutionSpectra, default=None
        The spectra returned by ``causal_convolution(u, K,
        return_spectra=True)``: they stand for ``u`` and ``K`` and save two
        of the five transforms of a forward and backward pass.
    n_jobs : int, default=None
        Threads of the FFTs and of the spectrum products; None means 1.  The
        result does not depend on it.

    Returns
    -------
    ConvolutionGradients
        ``(du, dK)`` of the shapes of ``u`` and ``K`` and of the working dtype.

    Raises
    ------
    ValueError
        If shapes do not match, an input contains NaN or infinity, ``n_jobs``
        is 0, not exactly one of (``u`` and ``K``) and ``spectra`` is
        given, or an exact gradient is beyond the largest number of the
        working dtype.  Transforms that overflow on their own are redone on
        exactly scaled inputs, as in :func:`causal_convolution`.
    TypeError
        If ``dy`` is None, an input is complex or not numeric, ``spectra`` is
        not a :class:`ConvolutionSpectra`, or ``n_jobs`` is not an integer.

    See Also
    --------
    causal_convolution : The forward function.

    Examples
    --------
    With ``y = sum(causal_convolution(u, K).y)``, ``dK[k]`` is the sum of the
    first ``length - k`` steps of ``u``:

    >>> import numpy as np
    >>> from skseq.inference import causal_convolution_backward
    >>> u = np.array([[[1.0, 2.0, 3.0]]])
    >>> grads = causal_convolution_backward(np.ones_like(u), u, K=[[1.0, 0.5, 0.25]])
    >>> np.round(grads.dK, 12)
    array([[6., 3., 1.]])
    >>> np.round(grads.du, 12)
    array([[[1.75, 1.5 , 1.  ]]])
    """
    check_n_jobs(n_jobs)
    require_arrays(dy=dy)
    have_inputs = u is not None or K is not None
    if have_inputs == (spectra is not None) or (have_inputs and (u is None or K is None)):
        raise ValueError("Give either both u and K, or spectra (not both, not neither).")
    dy, dtype = leading_array("dy", dy, ("batch", "channels", "length"))
    batch, n_channels, length = dy.shape
    workers = _workers(n_jobs)
    if spectra is None:
        u, K = _check_convolution_inputs(u, K, dtype)
        if u.shape != dy.shape:
            raise ValueError(f"dy must have the shape of u, {u.shape}, got {dy.shape}.")
        kernel_length = K.shape[1]
    else:
        _check_spectra(spectra, dtype, dy.shape)
        kernel_length = spectra.kernel_length
    du = np.zeros(dy.shape, dtype=dtype)
    dK = np.zeros((n_channels, kernel_length), dtype=dtype)
    if dy.size == 0:
        return ConvolutionGradients(du, dK)
    used = min(kernel_length, length)
    if spectra is None:
        n_fft = _fft_length(length, used)
        u_spectrum = scipy.fft.rfft(u, n=n_fft, axis=-1, workers=workers)
        kernel_spectrum = scipy.fft.rfft(K[:, :used], n=n_fft, axis=-1, workers=workers)
    else:
        n_fft = spectra.n_fft
        u_spectrum, kernel_spectrum = spectra.u_spectrum, spectra.kernel_spectrum
    u_spectrum = np.ascontiguousarray(u_spectrum)
    kernel_spectrum = np.ascontiguousarray(kernel_spectrum)
    if spectra is None or spectra.u_exponent is None:
        with np.errstate(over="ignore", invalid="ignore"):
            grad_spectrum = scipy.fft.rfft(dy, n=n_fft, axis=-1, workers=workers)
            kernel_grad_spectrum = np.empty(kernel_spectrum.shape, dtype=kernel_spectrum.dtype)
            real = np.dtype(dtype)

            def run(start, stop):
                _s4d.spectrum_backward(
                    u_spectrum.view(real),
                    kernel_spectrum.view(real),
                    grad_spectrum.view(real),
                    kernel_grad_spectrum.view(real),
                    start,
                    stop,
                )

            run_blocks(run, _channel_blocks(n_channels, n_jobs), sharedmem=True)
            du[...] = scipy.fft.irfft(
                grad_spectrum, n=n_fft, axis=-1, workers=workers, overwrite_x=True
            )[..., :length]
            dK[:, :used] = scipy.fft.irfft(
                kernel_grad_spectrum, n=n_fft, axis=-1, workers=workers, overwrite_x=True
            )[:, :used]
        if all_finite(du) and all_finite(dK):
            return ConvolutionGradients(du, dK)
        # A transform or product overflowed: redo on exactly scaled operands.
        if spectra is None:
            u_exponent, kernel_exponent = _exponents(u), _exponents(K[:, :used])
            u_spectrum = scipy.fft.rfft(
                _scaled(u, u_exponent), n=n_fft, axis=-1, workers=workers
            )
            kernel_spectrum = scipy.fft.rfft(
                _scaled(K[:, :used], kernel_exponent), n=n_fft, axis=-1, workers=workers
            )
        else:  # the spectra of unscaled inputs are finite: scale them as they are
            u_exponent = np.zeros((batch, n_channels), dtype=np.int64)
            kernel_exponent = np.zeros(n_channels, dtype=np.int64)
    else:
        u_exponent = np.asarray(spectra.u_exponent, dtype=np.int64)
        kernel_exponent = np.asarray(spectra.kernel_exponent, dtype=np.int64)
    du[...], dK[:, :used] = _scaled_convolution_backward(
        dy, u_spectrum, u_exponent, kernel_spectrum, kernel_exponent, n_fft, used, workers
    )
    return ConvolutionGradients(du, dK)


def _scaled_spectrum(spectrum, exponents):
    """A spectrum rescaled by powers of two to entries below one, and its new exponents."""
    real = spectrum.view(spectrum.real.dtype)
    shift = _exponents(real)
    return _scaled(real, shift).view(spectrum.dtype), exponents + shift


def _scaled_convolution_backward(
    dy, u_spectrum, u_exponent, kernel_spectrum, kernel_exponent, n_fft, used, workers
):
    """``(du, dK[:, :used])`` with every operand scaled by powers of two (no overflow inside).

    ``u_spectrum`` stands for the spectrum of ``u`` times ``2**-u_exponent``
    (per sequence), ``kernel_spectrum`` likewise.  The sum over the batch of
    dK's spectrum weighs each sequence by its own scale relative to the
    largest one of the channel.
    """
    length = dy.shape[2]
    dtype = dy.dtype
    u_spectrum, u_exponent = _scaled_spectrum(u_spectrum, u_exponent)
    kernel_spectrum, kernel_exponent = _scaled_spectrum(kernel_spectrum, kernel_exponent)
    dy_exponent = _exponents(dy)
    grad_spectrum = scipy.fft.rfft(_scaled(dy, dy_exponent), n=n_fft, axis=-1, workers=workers)
    du = scipy.fft.irfft(
        grad_spectrum * np.conj(kernel_spectrum)[np.newaxis], n=n_fft, axis=-1, workers=workers
    )[..., :length]
    du = _unscaled(du, dy_exponent + kernel_exponent[np.newaxis], "gradients du", dtype)
    exponents = u_exponent + dy_exponent
    largest = np.max(exponents, axis=0)
    with np.errstate(under="ignore"):
        weights = np.ldexp(np.ones((), dtype), exponents - largest[np.newaxis]).astype(dtype)
    kernel_grad_spectrum = np.einsum("bc,bcf->cf", weights, np.conj(u_spectrum) * grad_spectrum)
    dK = scipy.fft.irfft(kernel_grad_spectrum, n=n_fft, axis=-1, workers=workers)[:, :used]
    dK = _unscaled(dK, largest, "gradients dK", dtype)
    return du, dK
