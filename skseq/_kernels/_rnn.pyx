# cython: language_level=3
"""The Elman recurrence and its back-propagation through time.

Pure numeric code on typed memoryviews; nothing here validates its inputs (the
callers in :mod:`skseq.inference.rnn` do).  For every sequence ``b`` and step
``t``::

    h[b, t] = tanh((W_x x[b, t] + b) + W_h h[b, t - 1]),      h[b, -1] = h0[b]

Both passes run step by step, each step a few matrix products over the whole
batch, ``(batch, H) x (H, H)`` and the like, done by BLAS directly on the
step's rows of the (batch, length, .) arrays (their stride is ``length * H``),
so nothing is copied.  Only the products with ``W_h`` have to run step by
step.  The others (the input projection ``W_x x``, and ``dx``, ``dW_x``,
``dW_h``) can be one product over all the steps each, done by the caller, or
-- ``stepwise`` -- a product over the batch at each step too, on operands that
are in cache then.  Stepwise is faster where BLAS runs such small products
without packing its operands (OpenBLAS's small-matrix kernels), and slower
where it does not: :mod:`skseq.inference.rnn` chooses.

The backward pass runs the recurrence of the gradients with respect to the
pre-activations, ``a[b, t] = (dL/dh[b, t]) * (1 - h[b, t]**2)`` with
``dL/dh[b, t] = d_hidden[b, t] + W_h^T a[b, t + 1]``, carried from step to
step in a (batch, H) buffer, and sums the bias gradient ``sum_t a_t`` on the
way; stepwise, each step's ``a`` also gives its share of the other gradients
at once (``dx_t = W_x^T a_t``, ``dW_x += a_t x_t^T``, ``dW_h += a_t
h_{t-1}^T``) and is then dropped.
"""

from ._blas cimport NoTrans, RowMajor, Trans, _gemm
from ._common cimport floating_zeros_1d

cimport numpy as cnp

cnp.import_array()  # numpy's C API, for the scratch allocator of _common

# The branch-free exp / select functions and the restrict pointer types.
include "_elementary.pxi"


# ------------------------------------------------------------ tanh


cdef inline floating _abs(floating x) noexcept nogil:
    """|x| by clearing the sign bit."""
    cdef _Bits64 bits64
    cdef _Bits32 bits32
    if floating is float:
        bits32.real = x
        bits32.integer = bits32.integer & <uint32_t>0x7FFFFFFF
        return bits32.real
    else:
        bits64.real = x
        bits64.integer = bits64.integer & <uint64_t>0x7FFFFFFFFFFFFFFF
        return bits64.real


cdef inline floating _with_sign_of(floating magnitude, floating x) noexcept nogil:
    """``magnitude`` (>= 0) with the sign bit of ``x``."""
    cdef _Bits64 m64, x64
    cdef _Bits32 m32, x32
    if floating is float:
        m32.real = magnitude
        x32.real = x
        m32.integer = m32.integer | (x32.integer & <uint32_t>0x80000000)
        return m32.real
    else:
        m64.real = magnitude
        x64.real = x
        m64.integer = m64.integer | (x64.integer & <uint64_t>0x8000000000000000)
        return m64.real


cdef inline double _tanh64(double x) noexcept nogil:
    """tanh(x) for finite x, to a few ulp, without branches.

    For |x| < 0.625 Cephes' rational form ``a + a s P(s) / Q(s)`` (s = a**2),
    otherwise ``(e - 1) / (e + 1)`` with ``e = exp(2 a)``; both are written as
    one quotient whose numerator and denominator are selected before the one
    division.  |x| is clamped to 22, beyond which tanh rounds to 1.
    """
    cdef double a = _abs(x)
    cdef double clamped = _where_negative(22.0 - a, 22.0, a)
    cdef double e = _exp_in_range64(2.0 * clamped)
    cdef double s = a * a
    cdef double p = (-9.64399179425052238628e-1 * s - 9.92877231001918586564e1) * s \
        - 1.61468768441708447952e3
    cdef double q = ((s + 1.12811678491632931402e2) * s + 2.23548839060100448583e3) * s \
        + 4.84406305325125486048e3
    cdef double numerator = _where_negative(a - 0.625, a * (q + s * p), e - 1.0)
    cdef double denominator = _where_negative(a - 0.625, q, e + 1.0)
    return _with_sign_of(numerator / denominator, x)


cdef inline float _tanh32(float x) noexcept nogil:
    """tanh(x) for finite x in single precision (Cephes' tanhf), without branches.

    An odd polynomial for |x| < 0.625, ``(e - 1) / (e + 1)`` with
    ``e = exp(2 a)`` otherwise; |x| is clamped to 10, beyond which tanh rounds
    to 1.
    """
    cdef float a = _abs(x)
    cdef float clamped = _where_negative(<float>10.0 - a, <float>10.0, a)
    cdef float e = _exp_in_range32(<float>2.0 * clamped)
    cdef float s = a * a
    cdef float small = ((((<float>-5.70498872745e-3 * s + <float>2.06390887954e-2) * s
                          - <float>5.37397155531e-2) * s + <float>1.33314422036e-1) * s
                        - <float>3.33332819422e-1) * s * a + a
    cdef float large = (e - <float>1.0) / (e + <float>1.0)
    return _with_sign_of(_where_negative(a - <float>0.625, small, large), x)


cdef inline floating _tanh(floating x) noexcept nogil:
    if floating is float:
        return _tanh32(x)
    else:
        return _tanh64(x)


cdef inline void _tanh_row(floating_out row, Py_ssize_t count) noexcept nogil:
    """row = tanh(row), in place."""
    cdef Py_ssize_t j
    for j in range(count):
        row[j] = _tanh(row[j])


cdef inline void _pre_activation_grad(
    floating_out grad,
    floating_in d_hidden,
    floating_in carried,
    floating_in hidden,
    floating_out total,
    Py_ssize_t count,
) noexcept nogil:
    """grad = (d_hidden + carried) * (1 - hidden**2), and total += grad.

    ``1 - hidden**2`` is the derivative of tanh at the pre-activation.  The 1
    is cast to the working type: an untyped literal is a C double, which would
    run the float32 loop in double precision (a conversion each way per
    number, and half the vector width).
    """
    cdef Py_ssize_t j
    if floating_out is float_out:
        for j in range(count):
            grad[j] = (d_hidden[j] + carried[j]) * (<float>1 - hidden[j] * hidden[j])
            total[j] = total[j] + grad[j]
    else:
        for j in range(count):
            grad[j] = (d_hidden[j] + carried[j]) * (<double>1 - hidden[j] * hidden[j])
            total[j] = total[j] + grad[j]


cdef inline void _add_row(floating_out row, floating_in values, Py_ssize_t count) noexcept nogil:
    """row += values."""
    cdef Py_ssize_t j
    for j in range(count):
        row[j] = row[j] + values[j]


# ------------------------------------------------------------ kernels


def tanh(
    floating[::1] values,  # INOUT
):
    """Apply the kernel's tanh in place (exposed for the tests of its accuracy)."""
    if values.shape[0] == 0:
        return
    with nogil:
        _tanh_row(&values[0], values.shape[0])


def forward(
    const floating[:, :, ::1] x,  # IN
    const floating[:, ::1] W_x_T,  # IN
    const floating[:, ::1] W_h_T,  # IN
    const floating[::1] b,  # IN
    const floating[:, ::1] h0,  # IN
    bint has_h0,
    bint stepwise,
    floating[:, :, ::1] hidden,  # INOUT
):
    """Run the recurrence: ``hidden`` (batch, length, H) gets ``h``.

    ``x`` is (batch, length, n_inputs); ``W_x_T`` (n_inputs, H) and
    ``W_h_T`` (H, H) are the transposes of ``W_x`` and ``W_h``,
    C-contiguous, so that each step's products are plain ``NoTrans`` ones
    (which OpenBLAS runs in its small-matrix kernels, where it has them,
    without packing the weights again at every step).  At each step the rows
    of the step get ``W_x x_t`` -- one product over the batch when
    ``stepwise``; otherwise ``hidden`` holds the projection of every step on
    entry, the caller's one product, and ``x`` and ``W_x_T`` are not read --
    then ``b``, then ``W_h h_{t-1}`` (``h0`` at the first step when
    ``has_h0``), and ``tanh``.  Each pre-activation is ``(W_x x + b) + W_h
    h``, rounded the same way in both cases.  batch, length, H >= 1 (n_inputs
    may be 0).
    """
    cdef Py_ssize_t batch = hidden.shape[0]
    cdef Py_ssize_t length = hidden.shape[1]
    cdef int n_hidden = <int>hidden.shape[2]
    cdef int n_inputs = <int>x.shape[2]
    cdef int row_stride = <int>(length * n_hidden)
    cdef int input_stride = <int>(length * n_inputs)
    cdef Py_ssize_t t, row, j
    with nogil:
        for t in range(length):
            # (batch, H) = x_t (batch, n_inputs) @ W_x^T, then + b.
            if stepwise and n_inputs > 0:
                _gemm(RowMajor, NoTrans, NoTrans, <int>batch, n_hidden, n_inputs, <floating>1,
                      &x[0, t, 0], input_stride, &W_x_T[0, 0], n_hidden, <floating>0,
                      &hidden[0, t, 0], row_stride)
            elif stepwise:
                for row in range(batch):
                    for j in range(n_hidden):
                        hidden[row, t, j] = 0
            for row in range(batch):
                _add_row(&hidden[row, t, 0], &b[0], n_hidden)
            # (batch, H) += previous (batch, H) @ W_h^T.
            if t > 0:
                _gemm(RowMajor, NoTrans, NoTrans, <int>batch, n_hidden, n_hidden, <floating>1,
                      &hidden[0, t - 1, 0], row_stride, &W_h_T[0, 0], n_hidden, <floating>1,
                      &hidden[0, t, 0], row_stride)
            elif has_h0:
                _gemm(RowMajor, NoTrans, NoTrans, <int>batch, n_hidden, n_hidden, <floating>1,
                      &h0[0, 0], n_hidden, &W_h_T[0, 0], n_hidden, <floating>1,
                      &hidden[0, 0, 0], row_stride)
            for row in range(batch):
                _tanh_row(&hidden[row, t, 0], n_hidden)


def backward(
    const floating[:, :, ::1] d_hidden,  # IN
    const floating[:, :, ::1] hidden,  # IN
    const floating[:, :, ::1] x,  # IN
    const floating[:, ::1] W_x,  # IN
    const floating[:, ::1] W_h,  # IN
    const floating[:, ::1] h0,  # IN
    bint has_h0,
    bint stepwise,
    floating[:, :, ::1] grad,  # OUT
    floating[:, :, ::1] dx,  # OUT
    floating[:, ::1] dW_x,  # INOUT
    floating[:, ::1] dW_h,  # INOUT
    double[::1] db,  # INOUT
    floating[:, ::1] dh0,  # INOUT
):
    """Back-propagate through time.

    ``d_hidden`` (batch, length, H) is dL/dh from outside the recurrence;
    ``x`` (batch, length, n_inputs) and ``hidden`` are the forward pass's.
    ``dh0`` (batch, H) holds dL/d(last hidden) on entry (zeros for none) and
    the gradient with respect to ``h0`` on exit: in between it carries
    ``W_h^T a[b, t]`` from each step to the one before (one BLAS product
    over the batch per step), so ``d_hidden`` is read, never copied.  The
    pre-activation gradients ``a`` of a step go to ``grad``: its slot
    ``[:, t]`` when it has shape (batch, length, H), and then the caller
    computes ``dx``, ``dW_x`` and ``dW_h`` from all of them (products over
    all the steps; ``dx``, ``dW_x`` and ``dW_h`` are not touched here); or,
    when ``stepwise``, its one slot ``[:, 0]`` of shape (batch, 1, H), and
    the step's share of every gradient is computed at once by three more
    products over the batch, on operands in cache: ``a W_x`` into the step's
    rows of ``dx`` (overwritten), and ``a^T x_t``, ``a^T h_{t-1}`` (``h0``
    at the first step, when ``has_h0``) added to ``dW_x`` (H, n_inputs) and
    ``dW_h`` (H, H).  The bias gradient, the sum of ``a`` over sequences and
    steps, is added to ``db`` (H,) in both cases: over the batch in the
    working precision, then over the steps in double (in float32 far more
    accurate than one float32 sum of all the rows).  The caller passes
    ``dW_x``, ``dW_h`` and ``db`` zeroed.  batch, length, H >= 1 (n_inputs
    may be 0).
    """
    cdef Py_ssize_t batch = hidden.shape[0]
    cdef Py_ssize_t length = hidden.shape[1]
    cdef int n_hidden = <int>hidden.shape[2]
    cdef int n_inputs = <int>x.shape[2]
    cdef int row_stride = <int>(length * n_hidden)
    cdef int input_stride = <int>(length * n_inputs)
    # The step's a: a (batch, H) matrix at grad[0, slot, 0] with rows a_stride apart.
    cdef int a_stride = n_hidden if stepwise else row_stride
    cdef Py_ssize_t t, slot, row, j
    cdef floating[::1] step_sum = floating_zeros_1d(<floating>0, n_hidden)
    with nogil:
        for t in range(length - 1, -1, -1):
            slot = 0 if stepwise else t
            for j in range(n_hidden):
                step_sum[j] = 0
            for row in range(batch):
                _pre_activation_grad(&grad[row, slot, 0], &d_hidden[row, t, 0], &dh0[row, 0],
                                     &hidden[row, t, 0], &step_sum[0], n_hidden)
            for j in range(n_hidden):
                db[j] += step_sum[j]
            # dL/dh of the previous step, from the recurrence: (batch, H) = a (batch, H) @ W_h.
            _gemm(RowMajor, NoTrans, NoTrans, <int>batch, n_hidden, n_hidden, <floating>1,
                  &grad[0, slot, 0], a_stride, &W_h[0, 0], n_hidden, <floating>0, &dh0[0, 0],
                  n_hidden)
            if not stepwise:
                continue
            if n_inputs > 0:
                # dx_t (batch, n_inputs) = a @ W_x.
                _gemm(RowMajor, NoTrans, NoTrans, <int>batch, n_inputs, n_hidden, <floating>1,
                      &grad[0, 0, 0], a_stride, &W_x[0, 0], n_inputs, <floating>0,
                      &dx[0, t, 0], input_stride)
                # dW_x (H, n_inputs) += a^T x_t.
                _gemm(RowMajor, Trans, NoTrans, n_hidden, n_inputs, <int>batch, <floating>1,
                      &grad[0, 0, 0], a_stride, &x[0, t, 0], input_stride, <floating>1,
                      &dW_x[0, 0], n_inputs)
            # dW_h (H, H) += a^T h_{t-1}.
            if t > 0:
                _gemm(RowMajor, Trans, NoTrans, n_hidden, n_hidden, <int>batch, <floating>1,
                      &grad[0, 0, 0], a_stride, &hidden[0, t - 1, 0], row_stride, <floating>1,
                      &dW_h[0, 0], n_hidden)
            elif has_h0:
                _gemm(RowMajor, Trans, NoTrans, n_hidden, n_hidden, <int>batch, <floating>1,
                      &grad[0, 0, 0], a_stride, &h0[0, 0], n_hidden, <floating>1, &dW_h[0, 0],
                      n_hidden)
