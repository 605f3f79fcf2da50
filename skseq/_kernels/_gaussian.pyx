# cython: language_level=3
"""Gaussian emission kernels: log-densities and weighted moments.

Pure numeric code on typed memoryviews, no validation (see
:mod:`skseq.hmm._gaussian`).  A row of ``X`` containing NaN is a missing
observation: its log-density is 0 for every component (p(x | z) = 1) and it
adds nothing to the moments.  These functions release the GIL.
"""

from libc.math cimport INFINITY, isnan
from ._blas cimport NoTrans, RowMajor, _gemm
from ._common cimport zeros_1d

cimport numpy as cnp

cnp.import_array()  # numpy's C API, for the scratch allocators of _common

cdef extern from "_gaussian_rows.h":
    # The quadratic forms of one component over a block of rows laid out
    # feature by feature (columns ``stride`` apart); explicit AVX2 vectors in
    # the _avx2 builds (see the header).
    void _diag_quadratic "skseq_diag_quadratic" (
        const double* columns, Py_ssize_t stride, Py_ssize_t rows, const double* mean,
        const double* precision, Py_ssize_t n_features, double* quadratic) noexcept nogil
    void _whitened_quadratic "skseq_whitened_quadratic" (
        const double* centred, Py_ssize_t stride, Py_ssize_t rows, const double* whitening,
        Py_ssize_t n_features, double* quadratic) noexcept nogil

# Densities are computed for blocks of this many rows at a time, with the
# rows innermost: every loop then runs over a block-long contiguous array
# (vectorised whatever the number of components and features), and the
# block's scratch stays in the L1 cache.
cdef enum:
    _BLOCK = 256
    # Columns of a block are this far apart: not a power of two, so that the
    # columns do not all fall into the same few sets of the L1 cache.
    _STRIDE = _BLOCK + 8


cdef Py_ssize_t _transpose_block(
    const double[:, ::1] X, Py_ssize_t first, Py_ssize_t rows, double* columns,
    unsigned char* missing,
) noexcept nogil:
    """columns[d * _STRIDE + r] = X[first + r, d]; a row with NaN is marked
    missing and enters as zeros.  Returns the number of missing rows."""
    cdef Py_ssize_t n_features = X.shape[1]
    cdef Py_ssize_t r, d, n_missing = 0
    cdef const double* row
    for r in range(rows):
        row = &X[first + r, 0]
        missing[r] = 0
        for d in range(n_features):
            if isnan(row[d]):
                missing[r] = 1
        n_missing += missing[r]
        for d in range(n_features):
            columns[d * _STRIDE + r] = 0.0 if missing[r] else row[d]
    return n_missing


cdef Py_ssize_t _finish_block(
    double[:, ::1] out, Py_ssize_t first, Py_ssize_t rows, const unsigned char* missing,
    Py_ssize_t n_missing, double[::1] shift, bint subtract_max,
) noexcept nogil:
    """Missing rows get log-density 0; with ``subtract_max`` every row is
    shifted by its maximum, stored in ``shift`` (0 for missing rows).

    Returns the first row (index into ``out``) whose log-density is -inf for
    every component, or -1.  A Gaussian density is never zero: -inf means the
    quadratic form overflowed, and such a row is left as it is (shift -inf).
    """
    cdef Py_ssize_t n_components = out.shape[1]
    cdef Py_ssize_t r, k, overflowed = -1
    cdef double m
    cdef double* row
    for r in range(rows):
        row = &out[first + r, 0]
        if n_missing and missing[r]:
            for k in range(n_components):
                row[k] = 0.0
        m = row[0]
        for k in range(1, n_components):
            if row[k] > m:
                m = row[k]
        if m == -INFINITY:
            if overflowed < 0:
                overflowed = first + r
            if subtract_max:
                shift[first + r] = m
            continue
        if subtract_max:
            shift[first + r] = m
            for k in range(n_components):
                row[k] = row[k] - m
    return overflowed


cdef void _store_column(
    double[:, ::1] out, Py_ssize_t first, Py_ssize_t rows, Py_ssize_t k,
    double log_normaliser, const double* quadratic,
) noexcept nogil:
    """out = log_normaliser - half quadratic form (the factors carry the 1/2).

    The form is +inf when it overflowed, or NaN when x - mean did (inf * 0 in
    the whitening): either way the log-density is below -DBL_MAX, so -inf.
    """
    cdef Py_ssize_t r
    cdef double value
    for r in range(rows):
        value = log_normaliser - quadratic[r]
        out[first + r, k] = -INFINITY if isnan(value) else value


def log_density(
    const double[:, ::1] X,  # IN
    const double[:, ::1] means,  # IN
    const double[:, :, ::1] factors,  # IN
    bint diagonal,
    const double[::1] log_normalisers,  # IN
    double[:, ::1] out,  # OUT
    double[::1] shift,  # OUT
    bint subtract_max,
):
    """out[t, k] = log_normalisers[k] - 1/2 (quadratic form of X[t] - means[k]).

    ``diagonal``: ``factors[k, 0]`` holds half the precisions of component k
    and sum_d factor[d] (x_d - mu_d)^2 is half the form.  Otherwise
    ``factors[k]`` is W_k / sqrt(2), with W_k the lower-triangular inverse of
    the Cholesky factor of covariance k, and |W_k (x - mu_k)|^2 / 2 is half
    the Mahalanobis distance.  Either way the difference x - mu is formed
    before multiplying (no cancellation for data far from the origin), and
    the 1/2 is applied before the sum, which therefore overflows only when
    the log-density is below -DBL_MAX (it is then -inf).

    With ``subtract_max`` each row is shifted by its maximum, stored in
    ``shift[t]`` (the forward-backward frame, see ``_hmm.shift_rows``; fused
    here while the row is in cache).  Missing rows get 0 and shift 0.

    Returns the first row whose log-density is -inf under every component
    (for the caller to report: finite data, but too far from every mean for
    double precision), or -1.
    """
    cdef Py_ssize_t n_samples = X.shape[0]
    cdef Py_ssize_t n_components = means.shape[0]
    cdef Py_ssize_t n_features = X.shape[1]
    cdef Py_ssize_t first, rows, k, d, r, n_missing, overflowed, first_overflowed = -1
    cdef double mean
    cdef const double* column
    cdef double* centred_column
    cdef double[::1] columns_buffer = zeros_1d(max(n_features, 1) * _STRIDE)
    cdef double[::1] centred_buffer = zeros_1d(max(n_features, 1) * _STRIDE)
    cdef double[::1] quadratic_buffer = zeros_1d(_BLOCK)
    cdef unsigned char missing[_BLOCK]
    cdef double* columns = &columns_buffer[0]
    cdef double* centred = &centred_buffer[0]
    cdef double* quadratic = &quadratic_buffer[0]
    with nogil:
        first = 0
        while first < n_samples:
            rows = min(<Py_ssize_t>_BLOCK, n_samples - first)
            n_missing = _transpose_block(X, first, rows, columns, missing)
            for k in range(n_components):
                if diagonal:
                    _diag_quadratic(columns, _STRIDE, rows, &means[k, 0], &factors[k, 0, 0],
                                    n_features, quadratic)
                else:
                    for d in range(n_features):
                        mean = means[k, d]
                        column = columns + d * _STRIDE
                        centred_column = centred + d * _STRIDE
                        for r in range(rows):
                            centred_column[r] = column[r] - mean
                    _whitened_quadratic(centred, _STRIDE, rows, &factors[k, 0, 0], n_features,
                                        quadratic)
                _store_column(out, first, rows, k, log_normalisers[k], quadratic)
            overflowed = _finish_block(out, first, rows, missing, n_missing, shift,
                                       subtract_max)
            if first_overflowed < 0:
                first_overflowed = overflowed
            first += rows
    return first_overflowed


def weighted_moments(
    const double[:, ::1] X,  # IN
    const double[::1] centre,  # IN
    const double[:, ::1] weights,  # IN
    double[:, ::1] moments_t,  # INOUT
    bint full,
):
    """Accumulate weighted zeroth, first and second moments per component.

    Moments are of y_t = x_t - centre (a fixed reference near the data, so
    that variances computed from them do not cancel).  Each observed row t
    has the features f_t = (1, y_t, y_t^2) (element-wise; ``full`` False) or
    (1, y_t, upper triangle of y_t y_t^T packed row by row; ``full`` True);
    ``moments_t[p, k] += sum_t weights[t, k] f_t[p]``, so ``moments_t`` has
    1 + D + D or 1 + D + D (D + 1) / 2 rows.  Rows with NaN add nothing.

    The features of a block of rows are laid out feature by feature, and the
    block's sums are one matrix product (BLAS dgemm).
    """
    cdef Py_ssize_t n_samples = X.shape[0]
    cdef Py_ssize_t n_components = weights.shape[1]
    cdef Py_ssize_t n_features = X.shape[1]
    cdef Py_ssize_t n_moments = moments_t.shape[0]
    cdef Py_ssize_t first, rows, r, i, j, p
    cdef unsigned char missing[_BLOCK]
    cdef double centre_i
    cdef double* y
    cdef const double* left
    cdef const double* right
    cdef double* product
    cdef double[::1] features_buffer = zeros_1d(n_moments * _STRIDE)
    cdef double* features = &features_buffer[0]
    cdef int m = <int>n_components, n = <int>n_moments, k
    cdef int leading = <int>_STRIDE
    cdef double one = 1.0
    with nogil:
        first = 0
        while first < n_samples:
            rows = min(<Py_ssize_t>_BLOCK, n_samples - first)
            # Features 1..D are the block's columns minus the centre, and
            # feature 0 is 1 (a missing row: all features 0) ...
            _transpose_block(X, first, rows, features + _STRIDE, missing)
            for r in range(rows):
                features[r] = 1.0 - missing[r]
            for i in range(n_features):
                y = features + (1 + i) * _STRIDE
                centre_i = centre[i]
                for r in range(rows):
                    y[r] = y[r] - centre_i * features[r]
            # ... and the products column by column (contiguous, vectorised).
            p = 1 + n_features
            for i in range(n_features):
                left = features + (1 + i) * _STRIDE
                for j in range(i, n_features if full else i + 1):
                    right = features + (1 + j) * _STRIDE
                    product = features + p * _STRIDE
                    for r in range(rows):
                        product[r] = left[r] * right[r]
                    p += 1
            # moments_t (P x K) += F (P x rows, rows _STRIDE apart) @ W (rows x K).
            k = <int>rows
            _gemm(RowMajor, NoTrans, NoTrans, n, m, k, one, features, leading,
                  &weights[first, 0], m, one, &moments_t[0, 0], m)
            first += rows
