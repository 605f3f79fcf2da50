# cython: language_level=3
"""Small dense linear algebra on row-major blocks, for the Kalman kernels.

Matrices are raw row-major pointers (``a[i * n_cols + j]``), symmetric ones
often kept in their upper triangle.  Cholesky factorisations, triangular
solves with the factor, matrix products and the helpers around them; each
runs in hand-written loops for small sizes and goes to BLAS / LAPACK from the
thresholds below.  Everything is ``inline``: the module that cimports this
file (``from ._linalg cimport ...``) compiles its own copy, so no extension
module is added.  Nothing here validates anything.
"""

from libc.math cimport sqrt
from scipy.linalg.cython_blas cimport dtrsm
from scipy.linalg.cython_lapack cimport dpotrf

from ._blas cimport GEMM_PIECE_WORK, NoTrans, RowMajor, Trans, _gemm

# Matrix products (dgemm), triangular solves (dtrsm) and Cholesky
# factorisations (dpotrf) of at least this many multiply-adds go to BLAS /
# LAPACK, whose AVX2 / AVX-512 kernels are picked at run time; smaller ones run
# in the hand-written loops, which the compiler can only vectorise with SSE2
# (no -march) but which have no call overhead.  Measured (OpenBLAS 0.3.30,
# SkylakeX kernels, one thread): dgemm wins from about 8x8x8 (the 16x8 E step
# takes 6.4 us per row with it, 13.7 without; 4x4 is unchanged); dtrsm beats
# the hand solves from k ~ 12 right-hand sides of order k; dpotrf only from
# k ~ 40.
#
# The thresholds in force are thread-local (C11 ``_Thread_local``), starting
# at these defaults in every thread: set_min_work (the Kalman kernel's
# set_blas_min_work, a knob for measuring the crossover) moves them for the
# calling thread only, so a kernel running in any other thread (an E-step
# thread of a fit) never sees a change, and nothing can race.  They are
# ``static``: every module that cimports this file has its own (only
# _kalman does; a second one would need its own knob).
cdef extern from *:
    """
    #if defined(_MSC_VER)
    #define SKSEQ_THREAD_LOCAL __declspec(thread)
    #else
    #define SKSEQ_THREAD_LOCAL _Thread_local
    #endif
    #define SKSEQ_DEFAULT_GEMM_MIN_WORK 512
    #define SKSEQ_DEFAULT_TRSM_MIN_WORK 1024
    #define SKSEQ_DEFAULT_POTRF_MIN_WORK 8192
    static SKSEQ_THREAD_LOCAL Py_ssize_t skseq_gemm_min_work = SKSEQ_DEFAULT_GEMM_MIN_WORK;
    static SKSEQ_THREAD_LOCAL Py_ssize_t skseq_trsm_min_work = SKSEQ_DEFAULT_TRSM_MIN_WORK;
    static SKSEQ_THREAD_LOCAL Py_ssize_t skseq_potrf_min_work = SKSEQ_DEFAULT_POTRF_MIN_WORK;
    static void skseq_set_min_work(Py_ssize_t gemm, Py_ssize_t trsm, Py_ssize_t potrf) {
        skseq_gemm_min_work = gemm;
        skseq_trsm_min_work = trsm;
        skseq_potrf_min_work = potrf;
    }
    """
    const Py_ssize_t DEFAULT_GEMM_MIN_WORK "SKSEQ_DEFAULT_GEMM_MIN_WORK"
    const Py_ssize_t DEFAULT_TRSM_MIN_WORK "SKSEQ_DEFAULT_TRSM_MIN_WORK"
    const Py_ssize_t DEFAULT_POTRF_MIN_WORK "SKSEQ_DEFAULT_POTRF_MIN_WORK"
    Py_ssize_t GEMM_MIN_WORK "skseq_gemm_min_work"
    Py_ssize_t TRSM_MIN_WORK "skseq_trsm_min_work"
    Py_ssize_t POTRF_MIN_WORK "skseq_potrf_min_work"
    void set_min_work "skseq_set_min_work" (Py_ssize_t gemm, Py_ssize_t trsm,
                                            Py_ssize_t potrf) noexcept nogil


cdef inline void _mirror_upper(double* a, Py_ssize_t n) noexcept nogil:
    """Copy the upper triangle of the n x n matrix a into its lower triangle."""
    cdef Py_ssize_t i, j
    for i in range(n):
        for j in range(i + 1, n):
            a[j * n + i] = a[i * n + j]


cdef inline void _copy(const double* source, double* target, Py_ssize_t size) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(size):
        target[i] = source[i]


cdef inline int _cholesky(double* a, Py_ssize_t n) noexcept nogil:
    """In-place Cholesky factorisation A = U^T U of the symmetric n x n matrix a.

    Reads the upper triangle of a and overwrites it with U (upper
    triangular); the strict lower triangle is left untouched.  Right-looking,
    so the innermost loop is a contiguous row update that vectorises.
    Returns 0, or -1 when a is not positive definite in floating point.
    """
    cdef Py_ssize_t i, j, c
    cdef double diagonal, inverse, coefficient
    cdef int order = <int>n, info = 0
    if n * n * n >= 6 * POTRF_MIN_WORK:
        # Row-major upper = column-major lower: LAPACK's "L" factor is our U.
        dpotrf(b"L", &order, a, &order, &info)
        return 0 if info == 0 else -1
    for j in range(n):
        diagonal = a[j * n + j]
        if not diagonal > 0.0:
            return -1
        diagonal = sqrt(diagonal)
        a[j * n + j] = diagonal
        inverse = 1.0 / diagonal
        for c in range(j + 1, n):
            a[j * n + c] *= inverse
        for i in range(j + 1, n):
            coefficient = a[j * n + i]
            for c in range(i, n):
                a[i * n + c] -= coefficient * a[j * n + c]
    return 0


cdef inline void _solve_upper_transpose(const double* factor, double* rhs, Py_ssize_t n,
                                        Py_ssize_t n_rhs) noexcept nogil:
    """rhs <- U^-T rhs for the Cholesky factor U (n x n) and rhs (n x n_rhs), in place."""
    cdef Py_ssize_t i, l, c
    cdef double coefficient, inverse
    cdef int rows = <int>n_rhs, order = <int>n
    cdef double one = 1.0
    if n * n * n_rhs >= 2 * TRSM_MIN_WORK:
        # Column-major: the factor is M = U^T (lower) and rhs^T <- rhs^T M^-T.
        dtrsm(b"R", b"L", b"T", b"N", &rows, &order, &one, <double*>factor, &order, rhs, &rows)
        return
    for i in range(n):
        for l in range(i):
            coefficient = factor[l * n + i]
            for c in range(n_rhs):
                rhs[i * n_rhs + c] -= coefficient * rhs[l * n_rhs + c]
        inverse = 1.0 / factor[i * n + i]
        for c in range(n_rhs):
            rhs[i * n_rhs + c] *= inverse


cdef inline void _solve_upper(const double* factor, double* rhs, Py_ssize_t n,
                              Py_ssize_t n_rhs) noexcept nogil:
    """rhs <- U^-1 rhs for the Cholesky factor U (n x n) and rhs (n x n_rhs), in place."""
    cdef Py_ssize_t i, l, c
    cdef double coefficient, inverse
    cdef int rows = <int>n_rhs, order = <int>n
    cdef double one = 1.0
    if n * n * n_rhs >= 2 * TRSM_MIN_WORK:
        # Column-major: the factor is M = U^T (lower) and rhs^T <- rhs^T M^-1.
        dtrsm(b"R", b"L", b"N", b"N", &rows, &order, &one, <double*>factor, &order, rhs, &rows)
        return
    for i in range(n - 1, -1, -1):
        for l in range(i + 1, n):
            coefficient = factor[i * n + l]
            for c in range(n_rhs):
                rhs[i * n_rhs + c] -= coefficient * rhs[l * n_rhs + c]
        inverse = 1.0 / factor[i * n + i]
        for c in range(n_rhs):
            rhs[i * n_rhs + c] *= inverse


cdef inline void _matmul(const double* a, const double* b, double* out, Py_ssize_t n_rows,
                         Py_ssize_t n_inner, Py_ssize_t n_cols, bint accumulate=False) noexcept nogil:
    """out = a @ b (or out += a @ b) for a (n_rows x n_inner), b (n_inner x n_cols), row-major."""
    cdef Py_ssize_t i, l, j
    cdef double coefficient
    if n_rows * n_inner * n_cols >= GEMM_MIN_WORK:
        _gemm(RowMajor, NoTrans, NoTrans, <int>n_rows, <int>n_cols, <int>n_inner, 1.0, a,
              <int>n_inner, b, <int>n_cols, 1.0 if accumulate else 0.0, out, <int>n_cols)
        return
    for i in range(n_rows):
        if not accumulate:
            for j in range(n_cols):
                out[i * n_cols + j] = 0.0
        for l in range(n_inner):
            coefficient = a[i * n_inner + l]
            for j in range(n_cols):
                out[i * n_cols + j] += coefficient * b[l * n_cols + j]


cdef inline void _symmetric_product(const double* a, const double* b, const double* b_t,
                                    double* out, Py_ssize_t n, Py_ssize_t n_inner,
                                    bint accumulate) noexcept nogil:
    """out = a @ b^T (or out += a @ b^T) for a product known to be symmetric.

    ``a`` and ``b`` are n x n_inner and ``b_t`` is b transposed.  Only the
    upper triangle of ``out`` is meaningful afterwards (the caller mirrors it
    when it needs the full matrix).  Large products go whole to BLAS as the
    "NN" product a @ b_t; small ones take the upper triangle as dot products
    of rows of a and b.
    """
    cdef Py_ssize_t i, l, j
    cdef double total
    if n * n * n_inner >= GEMM_MIN_WORK:
        _matmul(a, b_t, out, n, n_inner, n, accumulate)
        return
    for i in range(n):
        for j in range(i, n):
            total = out[i * n + j] if accumulate else 0.0
            for l in range(n_inner):
                total += a[i * n_inner + l] * b[j * n_inner + l]
            out[i * n + j] = total


cdef inline void _transpose(const double* a, double* out, Py_ssize_t n_rows,
                            Py_ssize_t n_cols) noexcept nogil:
    """out (n_cols x n_rows) = a^T for a (n_rows x n_cols)."""
    cdef Py_ssize_t i, j
    for i in range(n_rows):
        for j in range(n_cols):
            out[j * n_rows + i] = a[i * n_cols + j]


cdef inline void _zero(double* target, Py_ssize_t size) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(size):
        target[i] = 0.0


cdef inline void _add_scaled(double* target, double scale, const double* row,
                             Py_ssize_t k) noexcept nogil:
    """target += scale * row (k entries)."""
    cdef Py_ssize_t a
    for a in range(k):
        target[a] += scale * row[a]


cdef inline void _add_outer(double* target, const double* left, const double* right,
                            Py_ssize_t k) noexcept nogil:
    """target (k x k) += left right^T."""
    cdef Py_ssize_t a, b
    cdef double value
    for a in range(k):
        value = left[a]
        for b in range(k):
            target[a * k + b] += value * right[b]


cdef inline void _add_transposed_product(const double* a, Py_ssize_t a_stride,
                                         const double* b, Py_ssize_t b_stride, double* out,
                                         Py_ssize_t n_rows, Py_ssize_t n_a,
                                         Py_ssize_t n_b) noexcept nogil:
    """out (n_a x n_b) += a^T b, summing over n_rows rows of a (n_a used columns,
    rows a_stride apart) and b (n_b columns, rows b_stride apart)."""
    cdef Py_ssize_t t, i, j
    cdef double value
    if n_rows == 0 or n_a == 0 or n_b == 0:
        return
    cdef Py_ssize_t piece = max(1, GEMM_PIECE_WORK // (n_a * n_b)), first
    if n_rows * n_a * n_b >= GEMM_MIN_WORK:
        # In pieces of rows (see GEMM_PIECE_WORK).
        first = 0
        while first < n_rows:
            _gemm(RowMajor, Trans, NoTrans, <int>n_a, <int>n_b, <int>min(piece, n_rows - first),
                  1.0, a + first * a_stride, <int>a_stride, b + first * b_stride, <int>b_stride,
                  1.0, out, <int>n_b)
            first += piece
        return
    for t in range(n_rows):
        for i in range(n_a):
            value = a[t * a_stride + i]
            for j in range(n_b):
                out[i * n_b + j] += value * b[t * b_stride + j]
