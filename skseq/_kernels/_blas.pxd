# cython: language_level=3
"""The one BLAS wrapper of the kernels: matrix products in one calling convention.

Modelled on scikit-learn's ``sklearn/utils/_cython_blas``: typed enums for the
storage order and the transposes, and ``_gemm`` in the precision of
``floating``.  Every kernel module calls BLAS through here (``from ._blas
cimport ...``); being ``inline``, each module -- and its AVX2 / AVX-512 twins --
compiles its own copy, so no extension module is added.

The kernels' arrays are row-major (C-contiguous), so they call with
``RowMajor`` and think in row-major terms: ``C (m x n) = alpha op(A) op(B) +
beta C`` with ``lda``, ``ldb``, ``ldc`` the row strides.  BLAS is
column-major: the row-major ``C = op(A) op(B)`` is the column-major ``C^T =
op(B)^T op(A)^T`` of the same memory, so a ``RowMajor`` call is the one
``?gemm`` call with the operands (and their sizes and strides) swapped.
"""

from cython cimport floating
from scipy.linalg.cython_blas cimport dgemm, sgemm


ctypedef enum BLAS_Order:
    RowMajor  # C-contiguous: the kernels' layout
    ColMajor  # Fortran-contiguous: BLAS's own


ctypedef enum BLAS_Trans:
    NoTrans = 78  # 'N'
    Trans = 84  # 'T'


cdef enum:
    # OpenBLAS runs a dgemm of at most 65536 * 4 multiply-adds on one thread
    # and larger ones on all cores; the kernels are meant to run one per
    # thread (an E step's threads share the cores), and on a loaded machine
    # OpenBLAS's own threads make a large product many times slower, so a
    # kernel whose products can be large cuts them into pieces of at most
    # this many multiply-adds.
    GEMM_PIECE_WORK = 262144


cdef inline void _gemm(
    BLAS_Order order,
    BLAS_Trans ta,
    BLAS_Trans tb,
    int m,
    int n,
    int k,
    floating alpha,
    const floating* A,
    int lda,
    const floating* B,
    int ldb,
    floating beta,
    floating* C,
    int ldc,
) noexcept nogil:
    """``C (m x n) = alpha op(A) op(B) + beta C`` in the precision of ``floating``.

    ``op(A)`` is m x k and ``op(B)`` k x n; ``ld*`` are the strides between
    rows (``RowMajor``) or columns (``ColMajor``).
    """
    cdef char trans_a = ta
    cdef char trans_b = tb
    if order == RowMajor:
        if floating is float:
            sgemm(&trans_b, &trans_a, &n, &m, &k, &alpha, <float*>B, &ldb, <float*>A, &lda,
                  &beta, C, &ldc)
        else:
            dgemm(&trans_b, &trans_a, &n, &m, &k, &alpha, <double*>B, &ldb, <double*>A, &lda,
                  &beta, C, &ldc)
    else:
        if floating is float:
            sgemm(&trans_a, &trans_b, &m, &n, &k, &alpha, <float*>A, &lda, <float*>B, &ldb,
                  &beta, C, &ldc)
        else:
            dgemm(&trans_a, &trans_b, &m, &n, &k, &alpha, <double*>A, &lda, <double*>B, &ldb,
                  &beta, C, &ldc)
