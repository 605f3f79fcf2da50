# cython: language_level=3
"""Kernels of the S4D layer: Vandermonde products and FFT-domain products.

Pure numeric code on typed memoryviews; nothing here validates its inputs (the
callers in :mod:`skseq.inference.s4d` do).

Vandermonde products
--------------------
For every channel ``c`` with ``H`` complex modes ``x[c, n]`` (``x = Δ A``) and
weights ``w[c, n]``, the convolution kernel of S4D is::

    K[c, k] = 2 Re sum_n w[c, n] exp(k x[c, n]),        k = 0 .. L - 1,

and its backward pass needs the transposed products, for a real ``dK``::

    S0[c, n] = sum_k dK[c, k] exp(k x[c, n]),   S1[c, n] = sum_k k dK[c, k] exp(k x[c, n]).

The powers are never formed by repeated multiplication (its rounding errors
grow with ``k``).  With a block length ``M`` and ``k = m M + j``
(``0 <= j < M``), ``exp(k x) = P[m] Q[j]`` with ``P[m] = exp(m M x)`` and
``Q[j] = exp(j x)``.  Each of ``P`` and ``Q`` is in turn a product of two
exponentials evaluated directly in double precision by ``exp``, ``cos`` and
``sin`` (``Q[8 a + b] = exp(8 a x) exp(b x)``, likewise ``P``), so that a mode
needs about ``16 + (M + L / M) / 8`` complex exponentials instead of ``M + L /
M``, and every power carries the rounding of four exponentials and three
products, whatever ``k``.  Then, per channel,

* forward: ``K[c, m M + j] = sum_n 2 Re(w P[m])[n] Re Q[n, j] - 2 Im(w P[m])[n] Im Q[n, j]``,
  one real matrix product ``(L / M, 2 H) @ (2 H, M)`` (BLAS ``gemm``);
* backward: ``T[n, m] = sum_j Q[n, j] dK[m M + j]`` and
  ``U[n, m] = sum_j j Q[n, j] dK[m M + j]`` in one real product
  ``(2 H, M) @ (M, 2 L / M)``, then ``S0 = sum_m P[m] T[m]`` and
  ``S1 = sum_m P[m] (m M T[m] + U[m])`` in double precision.

The matrix products run in the working precision.  Entries of their operands
below the smallest normal number of that precision are set to zero: a
subnormal operand slows a matrix product down by orders of magnitude, and
the terms dropped are below the smallest normal number times the largest
term of the same kernel entry.

FFT-domain products
-------------------
The forward pass of the FFT convolution multiplies the spectra ``U[b, c]`` of
the input by the spectrum ``Kf[c]`` of the kernel (:func:`spectrum_product`).
The backward pass needs, for the spectrum ``dY[b, c]`` of the output
gradient, ``dKf[c] = sum_b conj(U[b, c]) dY[b, c]`` and ``dU[b, c] =
conj(Kf[c]) dY[b, c]``; :func:`spectrum_backward` forms both in one pass,
the second in place of ``dY``.  Complex arrays are passed as real views with
interleaved real and imaginary parts.  These loops are memory-bound; the
AVX2 build runs them about twice as fast as the portable one.
"""

from libc.float cimport DBL_MIN, FLT_MIN
from libc.math cimport cos, exp, fabs, sin

from cython cimport floating

from ._blas cimport NoTrans, RowMajor, _gemm
from ._common cimport floating_zeros_1d, zeros_2d

cimport numpy as cnp

cnp.import_array()  # numpy's C API, for the scratch allocators of _common


cdef inline floating _smallest_normal(floating x) noexcept nogil:
    if floating is float:
        return FLT_MIN
    else:
        return DBL_MIN


cdef inline floating _flushed(double value, floating tiny) noexcept nogil:
    """``value`` in the working precision, or 0 when it would be subnormal."""
    if fabs(value) < tiny:
        return 0
    return <floating>value


cdef enum:
    # Powers exp(j s x) for j = 8 a + b are exp(8 a s x) exp(b s x).
    SUB_BLOCK = 8


cdef inline void _exp_complex(double re, double im, double* out_re, double* out_im
                              ) noexcept nogil:
    cdef double magnitude = exp(re)
    out_re[0] = magnitude * cos(im)
    out_im[0] = magnitude * sin(im)


cdef void _mode_powers(double x_re, double x_im, Py_ssize_t count, Py_ssize_t stride,
                       double* out_re, double* out_im) noexcept nogil:
    """``exp(j stride x)`` for ``j = 0 .. count - 1``, as ``exp(8 a stride x) exp(b stride x)``.

    Both factors are evaluated directly (never by repeated multiplication),
    so the error of every power is a few units in the last place whatever j.
    """
    cdef double near_re[SUB_BLOCK]
    cdef double near_im[SUB_BLOCK]
    cdef double far_re, far_im
    cdef Py_ssize_t a, b, j, n_near = SUB_BLOCK if count > SUB_BLOCK else count
    for b in range(n_near):
        _exp_complex(b * stride * x_re, b * stride * x_im, &near_re[b], &near_im[b])
    for a in range((count + SUB_BLOCK - 1) // SUB_BLOCK):
        _exp_complex(a * SUB_BLOCK * stride * x_re, a * SUB_BLOCK * stride * x_im,
                     &far_re, &far_im)
        for b in range(n_near):
            j = a * SUB_BLOCK + b
            if j >= count:
                break
            out_re[j] = far_re * near_re[b] - far_im * near_im[b]
            out_im[j] = far_re * near_im[b] + far_im * near_re[b]


cdef void _fill_block_powers(
    const double[:, ::1] x_re,
    const double[:, ::1] x_im,
    Py_ssize_t c,
    Py_ssize_t block,
    double* work_re,
    double* work_im,
    floating* powers,
) noexcept nogil:
    """Rows ``[Re Q; Im Q]`` of shape (2 H, block): ``Q[n, j] = exp(j x[c, n])``."""
    cdef Py_ssize_t n_modes = x_re.shape[1]
    cdef Py_ssize_t n, j
    cdef floating tiny = _smallest_normal(powers[0])
    for n in range(n_modes):
        _mode_powers(x_re[c, n], x_im[c, n], block, 1, work_re, work_im)
        for j in range(block):
            powers[n * block + j] = _flushed(work_re[j], tiny)
            powers[(n_modes + n) * block + j] = _flushed(work_im[j], tiny)


def vandermonde_forward(
    const double[:, ::1] x_re,  # IN
    const double[:, ::1] x_im,  # IN
    const double[:, ::1] w_re,  # IN
    const double[:, ::1] w_im,  # IN
    floating[:, ::1] K,  # OUT
    Py_ssize_t block,
    Py_ssize_t channel_start,
    Py_ssize_t channel_stop,
):
    """``K[c, k] = 2 Re sum_n w[c, n] exp(k x[c, n])`` for the channels of the range.

    ``K`` has shape (channels, L); ``block`` is the block length ``M``
    (1 <= M <= L).  Scratch: ``2 H (M + ceil(L / M)) + ceil(L / M) M``
    numbers of the working precision and ``2 max(M, ceil(L / M))`` doubles.
    """
    cdef Py_ssize_t n_modes = x_re.shape[1]
    cdef Py_ssize_t length = K.shape[1]
    cdef Py_ssize_t n_blocks = (length + block - 1) // block
    cdef bint exact_fit = n_blocks * block == length
    cdef floating[::1] scratch = floating_zeros_1d(
        <floating>0, 2 * n_modes * (block + n_blocks) + (0 if exact_fit else n_blocks * block))
    cdef double[:, ::1] work = zeros_2d(2, block if block > n_blocks else n_blocks)
    cdef floating* powers = &scratch[0]
    cdef floating* anchors = powers + 2 * n_modes * block
    cdef floating* product = anchors + 2 * n_modes * n_blocks
    cdef floating tiny = _smallest_normal(scratch[0])
    cdef double* work_re = &work[0, 0]
    cdef double* work_im = &work[1, 0]
    cdef Py_ssize_t c, n, m, k
    cdef double g_re, g_im
    with nogil:
        for c in range(channel_start, channel_stop):
            _fill_block_powers(x_re, x_im, c, block, work_re, work_im, powers)
            # anchors[m, :] = [2 Re(w P[m]), -2 Im(w P[m])] over the modes.
            for n in range(n_modes):
                _mode_powers(x_re[c, n], x_im[c, n], n_blocks, block, work_re, work_im)
                for m in range(n_blocks):
                    g_re = w_re[c, n] * work_re[m] - w_im[c, n] * work_im[m]
                    g_im = w_re[c, n] * work_im[m] + w_im[c, n] * work_re[m]
                    anchors[m * 2 * n_modes + n] = _flushed(2 * g_re, tiny)
                    anchors[m * 2 * n_modes + n_modes + n] = _flushed(-2 * g_im, tiny)
            # K[c] as (n_blocks, M) = anchors (n_blocks, 2 H) @ powers (2 H, M).
            if exact_fit:
                _gemm(RowMajor, NoTrans, NoTrans, <int>n_blocks, <int>block, <int>(2 * n_modes),
                      <floating>1, anchors, <int>(2 * n_modes), powers, <int>block,
                      <floating>0, &K[c, 0], <int>block)
            else:
                _gemm(RowMajor, NoTrans, NoTrans, <int>n_blocks, <int>block, <int>(2 * n_modes),
                      <floating>1, anchors, <int>(2 * n_modes), powers, <int>block,
                      <floating>0, product, <int>block)
                for k in range(length):
                    K[c, k] = product[k]


def vandermonde_backward(
    const double[:, ::1] x_re,  # IN
    const double[:, ::1] x_im,  # IN
    const floating[:, ::1] dK,  # IN
    double[:, ::1] s0_re,  # OUT
    double[:, ::1] s0_im,  # OUT
    double[:, ::1] s1_re,  # OUT
    double[:, ::1] s1_im,  # OUT
    Py_ssize_t block,
    Py_ssize_t channel_start,
    Py_ssize_t channel_stop,
):
    """``S0 = sum_k dK[c, k] exp(k x)`` and ``S1 = sum_k k dK[c, k] exp(k x)`` per (c, n).

    ``dK`` has shape (channels, L); the four outputs (channels, H) are written
    for the channels of the range.
    """
    cdef Py_ssize_t n_modes = x_re.shape[1]
    cdef Py_ssize_t length = dK.shape[1]
    cdef Py_ssize_t n_blocks = (length + block - 1) // block
    cdef floating[::1] scratch = floating_zeros_1d(
        <floating>0, 2 * n_modes * block + 2 * block * n_blocks + 4 * n_modes * n_blocks)
    cdef double[:, ::1] work = zeros_2d(2, block if block > n_blocks else n_blocks)
    cdef floating* powers = &scratch[0]
    # gradient[j, m] = dK[m M + j], gradient[j, n_blocks + m] = j dK[m M + j].
    cdef floating* gradient = powers + 2 * n_modes * block
    cdef floating* sums = gradient + 2 * block * n_blocks
    cdef double* work_re = &work[0, 0]
    cdef double* work_im = &work[1, 0]
    cdef Py_ssize_t c, n, m, j, k, stride = 2 * n_blocks
    cdef double p_re, p_im, t_re, t_im, v_re, v_im, offset
    cdef double a0_re, a0_im, a1_re, a1_im
    cdef floating value
    with nogil:
        for c in range(channel_start, channel_stop):
            _fill_block_powers(x_re, x_im, c, block, work_re, work_im, powers)
            for j in range(block):
                for m in range(n_blocks):
                    k = m * block + j
                    value = dK[c, k] if k < length else 0
                    gradient[j * stride + m] = value
                    gradient[j * stride + n_blocks + m] = j * value
            # sums (2 H, 2 n_blocks) = powers (2 H, M) @ gradient (M, 2 n_blocks), row-major.
            _gemm(RowMajor, NoTrans, NoTrans, <int>(2 * n_modes), <int>stride, <int>block,
                  <floating>1, powers, <int>block, gradient, <int>stride, <floating>0, sums,
                  <int>stride)
            for n in range(n_modes):
                _mode_powers(x_re[c, n], x_im[c, n], n_blocks, block, work_re, work_im)
                a0_re = a0_im = a1_re = a1_im = 0
                for m in range(n_blocks):
                    p_re = work_re[m]
                    p_im = work_im[m]
                    t_re = sums[n * stride + m]
                    t_im = sums[(n_modes + n) * stride + m]
                    offset = <double>(m * block)
                    v_re = offset * t_re + sums[n * stride + n_blocks + m]
                    v_im = offset * t_im + sums[(n_modes + n) * stride + n_blocks + m]
                    a0_re += p_re * t_re - p_im * t_im
                    a0_im += p_re * t_im + p_im * t_re
                    a1_re += p_re * v_re - p_im * v_im
                    a1_im += p_re * v_im + p_im * v_re
                s0_re[c, n] = a0_re
                s0_im[c, n] = a0_im
                s1_re[c, n] = a1_re
                s1_im[c, n] = a1_im


def spectrum_product(
    const floating[:, :, ::1] u_spectrum,  # IN
    const floating[:, ::1] kernel_spectrum,  # IN
    floating[:, :, ::1] out,  # OUT
    Py_ssize_t channel_start,
    Py_ssize_t channel_stop,
):
    """``out[b, c] = U[b, c] Kf[c]`` (complex, as interleaved real views); ``out`` may be ``U``."""
    cdef Py_ssize_t batch = u_spectrum.shape[0]
    cdef Py_ssize_t width = u_spectrum.shape[2]
    cdef Py_ssize_t b, c, f
    cdef floating u_re, u_im, k_re, k_im
    cdef const floating* u_row
    cdef const floating* k_row
    cdef floating* out_row
    with nogil:
        for c in range(channel_start, channel_stop):
            k_row = &kernel_spectrum[c, 0]
            for b in range(batch):
                u_row = &u_spectrum[b, c, 0]
                out_row = &out[b, c, 0]
                for f in range(0, width, 2):
                    u_re = u_row[f]
                    u_im = u_row[f + 1]
                    k_re = k_row[f]
                    k_im = k_row[f + 1]
                    out_row[f] = u_re * k_re - u_im * k_im
                    out_row[f + 1] = u_re * k_im + u_im * k_re


def spectrum_backward(
    const floating[:, :, ::1] u_spectrum,  # IN
    const floating[:, ::1] kernel_spectrum,  # IN
    floating[:, :, ::1] grad_spectrum,  # OUT
    floating[:, ::1] kernel_grad_spectrum,  # OUT
    Py_ssize_t channel_start,
    Py_ssize_t channel_stop,
):
    """``dKf[c] = sum_b conj(U[b, c]) dY[b, c]``, then ``dY[b, c] *= conj(Kf[c])`` in place.

    Spectra are real views (..., 2 F) of complex arrays (..., F).  The sum
    over ``b`` runs in order, so the result does not depend on the channel
    range.
    """
    cdef Py_ssize_t batch = u_spectrum.shape[0]
    cdef Py_ssize_t width = u_spectrum.shape[2]
    cdef Py_ssize_t b, c, f
    cdef floating u_re, u_im, y_re, y_im, k_re, k_im
    cdef floating* accumulator
    cdef const floating* u_row
    cdef const floating* k_row
    cdef floating* y_row
    with nogil:
        for c in range(channel_start, channel_stop):
            accumulator = &kernel_grad_spectrum[c, 0]
            k_row = &kernel_spectrum[c, 0]
            for f in range(width):
                accumulator[f] = 0
            for b in range(batch):
                u_row = &u_spectrum[b, c, 0]
                y_row = &grad_spectrum[b, c, 0]
                for f in range(0, width, 2):
                    u_re = u_row[f]
                    u_im = u_row[f + 1]
                    y_re = y_row[f]
                    y_im = y_row[f + 1]
                    k_re = k_row[f]
                    k_im = k_row[f + 1]
                    accumulator[f] += u_re * y_re + u_im * y_im
                    accumulator[f + 1] += u_re * y_im - u_im * y_re
                    y_row[f] = k_re * y_re + k_im * y_im
                    y_row[f + 1] = k_re * y_im - k_im * y_re
