# cython: language_level=3
"""Gaussian emission kernels: log-densities and weighted moments.

Pure numeric code on typed memoryviews, no validation (see
:mod:`skseq.hmm._gaussian`).  A row of ``X`` containing NaN is a missing
observation: its log-density is 0 for every component (p(x | z) = 1) and it
adds nothing to the moments.  These functions release the GIL.
"""

from libc.math cimport isnan

# Below this many components the density loops run component by component
# (short scalar sums); above it, component-innermost vector loops win.
cdef Py_ssize_t _FEW_COMPONENTS = 8


cdef inline bint _row_is_missing(const double[:, ::1] X, Py_ssize_t t) noexcept nogil:
    cdef Py_ssize_t d
    for d in range(X.shape[1]):
        if isnan(X[t, d]):
            return True
    return False


cdef inline void _subtract_row_max(
    double[:, ::1] out, Py_ssize_t t, double[::1] shift
) noexcept nogil:
    cdef Py_ssize_t k
    cdef double m = out[t, 0]
    for k in range(1, out.shape[1]):
        if out[t, k] > m:
            m = out[t, k]
    shift[t] = m
    for k in range(out.shape[1]):
        out[t, k] -= m


def log_density_diag(
    const double[:, ::1] X,
    const double[:, ::1] means_t,
    const double[:, ::1] precisions_t,
    const double[::1] log_normalisers,
    double[:, ::1] out,
    double[::1] total,
    double[::1] shift,
    bint subtract_max,
):
    """out[t, k] = log_normalisers[k] - 1/2 sum_d precisions[k, d] (X[t, d] - means[k, d])^2.

    With ``subtract_max`` each row is shifted by its maximum, stored in
    ``shift[t]`` (the forward-backward frame, see ``_hmm.shift_rows``; fused
    here while the row is in cache).  Missing rows get 0 and shift 0.

    ``means_t`` and ``precisions_t`` are transposed, (n_features, n_components),
    so the inner loop runs over components, contiguously (it vectorises);
    ``total`` is scratch of length n_components.
    ``log_normalisers[k] = -1/2 (D log 2 pi + sum_d log variance[k, d])``.
    """
    cdef Py_ssize_t n_samples = X.shape[0]
    cdef Py_ssize_t n_components = means_t.shape[1]
    cdef Py_ssize_t n_features = X.shape[1]
    cdef Py_ssize_t t, k, d
    cdef double x, difference, sum_k
    cdef const double* mean_row
    cdef const double* precision_row
    cdef double* sums = &total[0]
    with nogil:
        for t in range(n_samples):
            if _row_is_missing(X, t):
                for k in range(n_components):
                    out[t, k] = 0.0
                if subtract_max:
                    shift[t] = 0.0
                continue
            if n_components < _FEW_COMPONENTS:
                # Few components: one short scalar sum per component; the
                # components' sums are independent and overlap in the CPU.
                for k in range(n_components):
                    sum_k = 0.0
                    for d in range(n_features):
                        difference = X[t, d] - means_t[d, k]
                        sum_k = sum_k + precisions_t[d, k] * difference * difference
                    out[t, k] = log_normalisers[k] - 0.5 * sum_k
            else:
                for k in range(n_components):
                    sums[k] = 0.0
                for d in range(n_features):
                    # Row pointers keep the inner loop a plain contiguous loop (vectorised).
                    x = X[t, d]
                    mean_row = &means_t[d, 0]
                    precision_row = &precisions_t[d, 0]
                    for k in range(n_components):
                        difference = x - mean_row[k]
                        sums[k] += precision_row[k] * difference * difference
                for k in range(n_components):
                    out[t, k] = log_normalisers[k] - 0.5 * sums[k]
            if subtract_max:
                _subtract_row_max(out, t, shift)


def log_density_full(
    const double[:, ::1] X,
    const double[:, :, ::1] whitening_t,
    const double[:, ::1] means_t,
    const double[::1] log_normalisers,
    double[:, ::1] out,
    double[::1] component,
    double[::1] total,
    double[::1] shift,
    bint subtract_max,
):
    """out[t, k] = log_normalisers[k] - 1/2 |W_k (X[t] - mu_k)|^2.

    ``subtract_max`` and ``shift`` as in :func:`log_density_diag`.

    ``W_k`` is the lower-triangular inverse of the Cholesky factor of
    covariance k, so |W (x - mu)|^2 is the Mahalanobis distance; the
    difference x - mu is formed before multiplying (no cancellation for data
    far from the origin).  Layouts put components last for vectorisation:
    ``whitening_t[i, j, k] = W_k[i, j]`` and ``means_t[j, k] = mu_k[j]``;
    ``component`` and ``total`` are scratch of length n_components.
    """
    cdef Py_ssize_t n_samples = X.shape[0]
    cdef Py_ssize_t n_components = whitening_t.shape[2]
    cdef Py_ssize_t n_features = X.shape[1]
    cdef Py_ssize_t t, k, i, j
    cdef double x, part, sum_k
    cdef const double* mean_row
    cdef const double* whitening_row
    cdef double* sums = &total[0]
    cdef double* parts = &component[0]
    with nogil:
        for t in range(n_samples):
            if _row_is_missing(X, t):
                for k in range(n_components):
                    out[t, k] = 0.0
                if subtract_max:
                    shift[t] = 0.0
                continue
            if n_components < _FEW_COMPONENTS:
                for k in range(n_components):
                    sum_k = 0.0
                    for i in range(n_features):
                        part = 0.0
                        for j in range(i + 1):
                            part = part + whitening_t[i, j, k] * (X[t, j] - means_t[j, k])
                        sum_k = sum_k + part * part
                    out[t, k] = log_normalisers[k] - 0.5 * sum_k
            else:
                for k in range(n_components):
                    sums[k] = 0.0
                for i in range(n_features):
                    for k in range(n_components):
                        parts[k] = 0.0
                    for j in range(i + 1):
                        x = X[t, j]
                        mean_row = &means_t[j, 0]
                        whitening_row = &whitening_t[i, j, 0]
                        for k in range(n_components):
                            parts[k] += whitening_row[k] * (x - mean_row[k])
                    for k in range(n_components):
                        sums[k] += parts[k] * parts[k]
                for k in range(n_components):
                    out[t, k] = log_normalisers[k] - 0.5 * sums[k]
            if subtract_max:
                _subtract_row_max(out, t, shift)


def weighted_moments(
    const double[:, ::1] X,
    const double[::1] centre,
    const double[:, ::1] weights,
    double[::1] weight_sums,
    double[:, ::1] first_t,
    double[:, ::1] second_t,
    bint full,
):
    """Accumulate weighted zeroth, first and second moments per component.

    Moments are of y_t = x_t - centre (a fixed reference near the data, so
    that variances computed from them do not cancel).  For every observed row
    t and component k with w = weights[t, k]: ``weight_sums[k] += w``,
    ``first_t[:, k] += w y_t`` and ``second_t[:, k] += w y_t^2``
    (element-wise; ``full`` False) or the upper triangle of ``w y_t y_t^T``
    packed row by row (``full`` True; then ``second_t`` has D (D + 1) / 2
    rows).  The accumulators are transposed,
    components last, so the inner loops vectorise.  Rows with NaN are skipped.
    """
    cdef Py_ssize_t n_samples = X.shape[0]
    cdef Py_ssize_t n_components = weights.shape[1]
    cdef Py_ssize_t n_features = X.shape[1]
    cdef Py_ssize_t n_pairs = second_t.shape[0]
    cdef Py_ssize_t t, k, i, j, p
    cdef double value
    cdef const double* weight_row
    cdef double* accumulator
    cdef double[::1] products = _zeros(n_pairs)
    cdef double[::1] y = _zeros(n_features)
    with nogil:
        for t in range(n_samples):
            if _row_is_missing(X, t):
                continue
            for i in range(n_features):
                y[i] = X[t, i] - centre[i]
            if full:
                p = 0
                for i in range(n_features):
                    for j in range(i, n_features):
                        products[p] = y[i] * y[j]
                        p += 1
            else:
                for i in range(n_features):
                    products[i] = y[i] * y[i]
            weight_row = &weights[t, 0]
            for k in range(n_components):
                weight_sums[k] += weight_row[k]
            for i in range(n_features):
                value = y[i]
                accumulator = &first_t[i, 0]
                for k in range(n_components):
                    accumulator[k] += weight_row[k] * value
            for p in range(n_pairs):
                value = products[p]
                accumulator = &second_t[p, 0]
                for k in range(n_components):
                    accumulator[k] += weight_row[k] * value


cdef double[::1] _zeros(Py_ssize_t n):
    from numpy import zeros
    return zeros(max(n, 1))
