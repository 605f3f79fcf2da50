# cython: language_level=3
"""Kernels of the network layers: RMS normalisation with the residual sum fused, and ReLU.

Pure numeric code on typed memoryviews; nothing here validates its inputs (the
callers in :mod:`skseq.inference._layers` do).

RMS normalisation: for every row ``x`` of ``d`` numbers, with the learned ``gain``::

    r = 1 / sqrt(mean(x ** 2) + eps)           y = gain * (x * r)

and, given ``g = dL/dy``, with ``n = x * r`` and ``u = g * gain``::

    dL/dx = r * (u - n * mean(u * n))          dL/dgain = sum over rows of g * n

A row (a few hundred bytes) is read once per pass and all its sums are made
while it is in L1 cache; numpy needs a pass over the whole array, and often
a fresh array, for each of these operations.  The forward pass can add a
residual update to its input in the same pass (``x = hidden + update``, the
sum written out for the next residual block) and the backward pass can add
its input gradient into an existing one (the gradient of the residual
stream), so a pre-norm residual network makes no other pass over the
stream.  Nothing is kept but ``r``: the backward pass forms ``n`` again.

ReLU, forward and backward, in place and in one pass each: numpy's
``maximum`` and its product with a boolean mask take two to three times as
long on the activations of a Transformer's MLP.
"""

from libc.math cimport sqrt

from cython cimport floating


cdef inline double _dot(const floating* a, const floating* b, Py_ssize_t d) noexcept nogil:
    """``sum_j a[j] b[j]`` in float64, in four running sums (one would wait on every add)."""
    cdef double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0
    cdef Py_ssize_t j = 0
    while j + 4 <= d:
        s0 += <double>a[j] * b[j]
        s1 += <double>a[j + 1] * b[j + 1]
        s2 += <double>a[j + 2] * b[j + 2]
        s3 += <double>a[j + 3] * b[j + 3]
        j += 4
    while j < d:
        s0 += <double>a[j] * b[j]
        j += 1
    return (s0 + s1) + (s2 + s3)


cdef inline double _dot_scaled(
    const floating* a, const floating* w, const floating* b, Py_ssize_t d
) noexcept nogil:
    """``sum_j a[j] w[j] b[j]`` in float64, in four running sums."""
    cdef double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0
    cdef Py_ssize_t j = 0
    while j + 4 <= d:
        s0 += <double>(a[j] * w[j]) * b[j]
        s1 += <double>(a[j + 1] * w[j + 1]) * b[j + 1]
        s2 += <double>(a[j + 2] * w[j + 2]) * b[j + 2]
        s3 += <double>(a[j + 3] * w[j + 3]) * b[j + 3]
        j += 4
    while j < d:
        s0 += <double>(a[j] * w[j]) * b[j]
        j += 1
    return (s0 + s1) + (s2 + s3)


def rms_norm_forward(
    const floating[:, ::1] x,  # IN: the rows, or the residual stream with add_update
    const floating[:, ::1] update,  # IN: added to x when add_update (else not read)
    const floating[::1] gain,  # IN: (d,)
    double eps,
    bint add_update,
    floating[:, ::1] total,  # OUT: x + update when add_update (else not written)
    floating[:, ::1] out,  # OUT: the normalised rows times the gain
    floating[::1] inverse_rms,  # OUT: r of every row
):
    """``out = gain * x * r`` row by row, ``x`` first replaced by ``x + update`` if asked."""
    cdef Py_ssize_t n_rows = x.shape[0], d = x.shape[1], i, j
    cdef const floating* row
    cdef floating* summed
    cdef floating* normalised
    cdef floating r
    with nogil:
        for i in range(n_rows):
            row = &x[i, 0]
            if add_update:
                summed = &total[i, 0]
                for j in range(d):
                    summed[j] = row[j] + update[i, j]
                row = summed
            r = <floating>(1.0 / sqrt(_dot(row, row, d) / d + eps))
            inverse_rms[i] = r
            normalised = &out[i, 0]
            for j in range(d):
                normalised[j] = gain[j] * (row[j] * r)


def rms_norm_backward(
    const floating[:, ::1] grad_out,  # IN: dL/dy
    const floating[:, ::1] x,  # IN: the forward pass's (summed) input
    const floating[::1] inverse_rms,  # IN: r of every row
    const floating[::1] gain,  # IN: (d,)
    bint accumulate,
    floating[:, ::1] grad_in,  # INOUT: dL/dx, added to its contents when accumulate
    double[::1] grad_gain,  # INOUT: dL/dgain is added to it (in float64)
):
    """dL/dx row by row (written or added into ``grad_in``) and dL/dgain summed over rows."""
    cdef Py_ssize_t n_rows = x.shape[0], d = x.shape[1], i, j
    cdef const floating* g
    cdef const floating* row
    cdef floating* dx
    cdef floating r, projection
    with nogil:
        for i in range(n_rows):
            g = &grad_out[i, 0]
            row = &x[i, 0]
            r = inverse_rms[i]
            # mean(u * n) = r * mean(g * gain * x)
            projection = <floating>(r * _dot_scaled(g, &gain[0], row, d) / d)
            for j in range(d):
                grad_gain[j] += <double>(g[j] * (row[j] * r))
            dx = &grad_in[i, 0]
            if accumulate:
                for j in range(d):
                    dx[j] += r * (g[j] * gain[j] - row[j] * r * projection)
            else:
                for j in range(d):
                    dx[j] = r * (g[j] * gain[j] - row[j] * r * projection)


def relu_forward(
    floating[::1] x,  # INOUT: replaced by max(x, 0); NaN stays NaN
):
    """``x = max(x, 0)`` in place, one pass."""
    cdef Py_ssize_t i
    with nogil:
        for i in range(x.shape[0]):
            x[i] = 0 if x[i] < 0 else x[i]


def relu_backward(
    floating[::1] grad,  # INOUT: multiplied by (outputs > 0)
    const floating[::1] outputs,  # IN: max(x, 0) of the forward pass
):
    """``grad *= (outputs > 0)`` in place, one pass (a NaN gradient stays NaN, as in numpy)."""
    cdef Py_ssize_t i, n = grad.shape[0]
    cdef floating* g = &grad[0] if n else NULL
    cdef const floating* y = &outputs[0] if n else NULL
    cdef floating one = 1, zero = 0
    with nogil:
        for i in range(n):
            # a product with a selected 1 or 0 of the same type: branch-free and vectorised
            g[i] = g[i] * (one if y[i] > zero else zero)
