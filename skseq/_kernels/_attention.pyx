# cython: language_level=3
"""Causal scaled dot-product attention in tiles, with an online softmax, and its gradients.

Pure numeric code on typed memoryviews; nothing here validates its inputs (the
callers in :mod:`skseq.inference.attention` do).  For every (batch b, head h)
pair, with ``Q``, ``K``, ``V`` its ``(length, d)`` matrices and ``s`` the
scale::

    S[i, j] = s * Q[i] . K[j]                    for j <= i (the causal mask)
    lse[i]  = log sum_{j <= i} exp(S[i, j])
    out[i]  = sum_{j <= i} exp(S[i, j] - lse[i]) V[j]

Tiles
-----
Query rows are taken in blocks of ``block_rows``.  The keys ``0 .. r1 - 1``
that the block of rows ``r0 .. r1 - 1`` sees come in tiles of ``block_cols``
keys, a multiple of ``block_rows``: only the last tile of a block reaches the
diagonal, and every row has at least one key in every tile it sees (key
``c0``, the tile's first, is at most ``r0``).  A tile of scores is held
transposed, one row per key: ``St[j, i] = S[r0 + i, c0 + j]``, so that the
softmax runs along the rows of ``St`` with the query rows in the vector
lanes, and the products take whole rows of ``q``, ``k``, ``v`` as they are
(only the block's queries are packed transposed, ``d x block_rows``, once per
block).  The softmax is updated online (FlashAttention): the running row
maximum ``m`` and sum ``l`` of ``exp(S - m)``, the output rows rescaled by
``exp(m_old - m_new)`` when the maximum grows, and the tile's contribution
added by a second product.  After the last tile ``out /= l`` and ``lse = m +
log(l)``.  One tile of scores exists at a time; the backward pass gets the
probabilities back from ``lse``.

Backward
--------
With ``dO = dL/dout`` and ``delta[i] = dO[i] . out[i]``, for every tile
(FlashAttention-2)::

    P  = exp(S - lse)             dV += P^T dO              dP = dO V^T
    dS = s * P * (dP - delta)     dQ += dS K                dK += dS^T Q

five products per tile.  Masked entries have ``P = 0``, hence ``dS = 0``.
Row blocks run from the last, which sees every key: its products write
``dK`` and ``dV``, the earlier blocks' add to them.

Products
--------
In the AVX2 and AVX-512 builds the tile products are the register-tiled
loops of ``_attention_tiles.h`` (no BLAS: at these sizes OpenBLAS spends much
of its time packing its operands); the portable build runs the same algorithm
with BLAS products in the layout BLAS suits (``_attention_blas.pxi``).  They skip what the causal mask leaves out: whole vectors of
queries, and within a register tile the terms of the rows that do not see
them, by a select.  The passes over a key's row of a tile likewise start at
the whole vector that holds the key's first visible query
(``_row_start``), the entries before it set by a select, not a branch.  The
product ``dP = dO V^T`` turns into ``dS`` in its registers, and the backward's
score product into ``P = exp(S - lse)`` in its own (no pass over the tile);
the forward's exponentials wait for the tile's row maxima, one pass of
vectors (``_exp_tile``).  The exponentials are those of ``_elementary.pxi``,
written for vectors in C, with the same numbers.  Every
number is a sum in a fixed order (along the keys, or along ``d``), one
multiply-add at a time, with the vector lanes across independent results: the
results do not depend on the vector width.  Each pair's matrices are
row-major with a row stride that may exceed ``d`` (a head of a packed
``(batch, length, 3, heads, d)`` projection is a strided view); the last axis
of every array must be contiguous, which the callers ensure (the memoryviews
accept any strides).  In the AVX2 and AVX-512 builds spread-out rows are
copied to contiguous ones (a pair's keys and values, a block's queries and
``dO``; ``dK`` and ``dV`` are summed in contiguous rows and written once per
pair) and the next pair's rows are prefetched: rows ``3 * d_model`` apart
each start a new page and share few cache sets.  Copies change no number.
"""

from libc.math cimport log

from cython cimport floating
from ._common cimport floating_zeros_1d, floating_zeros_2d, floating_zeros_3d

cimport numpy as cnp

cnp.import_array()  # numpy's C API, for the scratch allocators of _common

include "_elementary.pxi"


cdef extern from "_attention_tiles.h":
    # Bt[p, j] = B[j, p] (j < n, p < d), zeros up to whole vectors.
    void _pack_t_f "skseq_pack_t_f" (
        const float* B, Py_ssize_t ldb, Py_ssize_t n, Py_ssize_t d, float* Bt,
        Py_ssize_t ldt) noexcept nogil
    void _pack_t_d "skseq_pack_t_d" (
        const double* B, Py_ssize_t ldb, Py_ssize_t n, Py_ssize_t d, double* Bt,
        Py_ssize_t ldt) noexcept nogil
    # C[x, j] = alpha sum_p A[x, p] Bt[p, j] for j from _row_start(x - lo) on, and
    # largest[j] = max(largest[j], C[x, j] for x - lo <= j) if given; or, given
    # P and delta, dS = alpha P (that - delta) there, 0 for j < x - lo; or, given
    # shift, the probabilities exp(C[x, j] - shift[j]) there, 0 for j < x - lo.
    void _scores_f "skseq_scores_f" (
        Py_ssize_t m, Py_ssize_t n, Py_ssize_t d, Py_ssize_t lo, float alpha,
        const float* A, Py_ssize_t lda, const float* Bt, Py_ssize_t ldt, float* C,
        Py_ssize_t ldc, const float* P, const float* delta, float* largest,
        const float* shift) noexcept nogil
    void _scores_d "skseq_scores_d" (
        Py_ssize_t m, Py_ssize_t n, Py_ssize_t d, Py_ssize_t lo, double alpha,
        const double* A, Py_ssize_t lda, const double* Bt, Py_ssize_t ldt, double* C,
        Py_ssize_t ldc, const double* P, const double* delta, double* largest,
        const double* shift) noexcept nogil
    # S[j, c] = exp(S[j, c] - shift[c]) and total[c] += S[j, c] for the entries
    # c >= j - diag of the m x n tile S, 0 for the others (from _row_start on).
    void _exp_tile_f "skseq_exp_tile_f" (
        float* S, Py_ssize_t lds, Py_ssize_t m, Py_ssize_t n, Py_ssize_t diag,
        const float* shift, float* total) noexcept nogil
    void _exp_tile_d "skseq_exp_tile_d" (
        double* S, Py_ssize_t lds, Py_ssize_t m, Py_ssize_t n, Py_ssize_t diag,
        const double* shift, double* total) noexcept nogil
    # C[x, :d] (+)= sum_p A[x * sax + p * sap] B[p, :d] over the p a register tile sees.
    void _rows_f "skseq_rows_f" (
        Py_ssize_t m, Py_ssize_t k, Py_ssize_t d, Py_ssize_t lo, Py_ssize_t hi, int accumulate,
        const float* A, Py_ssize_t sax, Py_ssize_t sap, const float* B, Py_ssize_t ldb,
        float* C, Py_ssize_t ldc) noexcept nogil
    void _rows_d "skseq_rows_d" (
        Py_ssize_t m, Py_ssize_t k, Py_ssize_t d, Py_ssize_t lo, Py_ssize_t hi, int accumulate,
        const double* A, Py_ssize_t sax, Py_ssize_t sap, const double* B, Py_ssize_t ldb,
        double* C, Py_ssize_t ldc) noexcept nogil
    # Whether these products run (the AVX2 and AVX-512 builds) or BLAS's
    # (the portable build: _attention_blas.pxi).
    bint OWN_PRODUCTS "SKSEQ_OWN_PRODUCTS"
    # No causal limit on that side.
    Py_ssize_t FAR "SKSEQ_FAR"
    # Prefetches rows [first, last) of A (row stride lda, d numbers of itemsize bytes).
    void _prefetch_rows "skseq_prefetch_rows" (
        const void* A, Py_ssize_t lda, Py_ssize_t first, Py_ssize_t last, Py_ssize_t d,
        Py_ssize_t itemsize) noexcept nogil
    # Where the work on a row of a tile whose first entry the causal mask
    # leaves is ``first`` starts: the whole vector that holds it.
    Py_ssize_t _row_start "skseq_row_start" (Py_ssize_t first) noexcept nogil


cdef enum:
    # The rows of a tile (St[j, :]) and of the packed queries are padded to a
    # multiple of this many numbers: whole vectors in every build.
    ROW_PADDING = 16


cdef inline Py_ssize_t _padded(Py_ssize_t n) noexcept nogil:
    return (n + ROW_PADDING - 1) // ROW_PADDING * ROW_PADDING


cdef inline void _pack_t(const floating* B, Py_ssize_t ldb, Py_ssize_t n, Py_ssize_t d,
                         floating* Bt, Py_ssize_t ldt) noexcept nogil:
    if floating is float:
        _pack_t_f(B, ldb, n, d, Bt, ldt)
    else:
        _pack_t_d(B, ldb, n, d, Bt, ldt)


cdef inline void _scores(Py_ssize_t m, Py_ssize_t n, Py_ssize_t d, Py_ssize_t lo,
                         floating alpha, const floating* A, Py_ssize_t lda, const floating* Bt,
                         Py_ssize_t ldt, floating* C, Py_ssize_t ldc, const floating* P,
                         const floating* delta, floating* largest,
                         const floating* shift) noexcept nogil:
    if floating is float:
        _scores_f(m, n, d, lo, alpha, A, lda, Bt, ldt, C, ldc, P, delta, largest, shift)
    else:
        _scores_d(m, n, d, lo, alpha, A, lda, Bt, ldt, C, ldc, P, delta, largest, shift)


cdef inline void _exp_tile(floating* S, Py_ssize_t lds, Py_ssize_t m, Py_ssize_t n,
                           Py_ssize_t diag, const floating* shift,
                           floating* total) noexcept nogil:
    if floating is float:
        _exp_tile_f(S, lds, m, n, diag, shift, total)
    else:
        _exp_tile_d(S, lds, m, n, diag, shift, total)


cdef inline void _rows(Py_ssize_t m, Py_ssize_t k, Py_ssize_t d, Py_ssize_t lo, Py_ssize_t hi,
                       bint accumulate, const floating* A, Py_ssize_t sax, Py_ssize_t sap,
                       const floating* B, Py_ssize_t ldb, floating* C,
                       Py_ssize_t ldc) noexcept nogil:
    if floating is float:
        _rows_f(m, k, d, lo, hi, accumulate, A, sax, sap, B, ldb, C, ldc)
    else:
        _rows_d(m, k, d, lo, hi, accumulate, A, sax, sap, B, ldb, C, ldc)


cdef inline floating _larger(floating a, floating b) noexcept nogil:
    """max(a, b) for numbers that are not NaN, without a comparison."""
    return _where_negative(a - b, b, a)


cdef inline floating _dot(const floating* a, const floating* b, Py_ssize_t count) noexcept nogil:
    cdef Py_ssize_t c
    cdef floating total = 0
    for c in range(count):
        total += a[c] * b[c]
    return total


cdef inline void _scale_row(floating* row, Py_ssize_t count, floating factor) noexcept nogil:
    cdef Py_ssize_t c
    for c in range(count):
        row[c] *= factor


cdef inline const floating* _contiguous(const floating* A, Py_ssize_t lda, Py_ssize_t length,
                                        Py_ssize_t d, floating* copy) noexcept nogil:
    """``A`` (``length`` rows of ``d``, row stride ``lda``) with contiguous rows: itself if
    they are (``lda == d``), else copied into ``copy``.

    The products read a pair's keys and values once per tile: rows spread out
    (the heads of a packed projection are ``3 * d_model`` apart) fall into few
    cache sets and pages, which costs more than the copy.
    """
    if lda == d:
        return A
    _copy_rows(A, lda, length, d, copy, d)
    return copy


cdef inline void _copy_rows(const floating* A, Py_ssize_t lda, Py_ssize_t length, Py_ssize_t d,
                            floating* B, Py_ssize_t ldb) noexcept nogil:
    """``B[i, :d] = A[i, :d]`` for the ``length`` rows (row strides ``lda``, ``ldb``)."""
    cdef Py_ssize_t i, c
    for i in range(length):
        for c in range(d):
            B[i * ldb + c] = A[i * lda + c]


cdef inline void _prefetch_spread(const floating* A, Py_ssize_t lda, Py_ssize_t first,
                                  Py_ssize_t last, Py_ssize_t d) noexcept nogil:
    """Prefetch rows [first, last) of ``A`` if they are not contiguous (``lda != d``).

    Called for the next (batch, head) pair a block of rows at a time: rows
    far apart each start a new page, where the hardware prefetchers stop.
    """
    if lda != d:
        _prefetch_rows(A, lda, first, last, d, sizeof(floating))


cdef inline Py_ssize_t _row_stride(Py_ssize_t stride_bytes, Py_ssize_t itemsize) noexcept nogil:
    return stride_bytes // itemsize


cdef struct _RowStrides:
    # Elements between consecutive rows of one (batch, head) matrix of
    # (length, d_head) of q, k, v and out.
    Py_ssize_t q, k, v, out


cdef inline _RowStrides _row_strides(
    const floating[:, :, :, :] q,
    const floating[:, :, :, :] k,
    const floating[:, :, :, :] v,
    const floating[:, :, :, :] out,
) noexcept nogil:
    cdef _RowStrides strides
    strides.q = _row_stride(q.strides[2], sizeof(floating))
    strides.k = _row_stride(k.strides[2], sizeof(floating))
    strides.v = _row_stride(v.strides[2], sizeof(floating))
    strides.out = _row_stride(out.strides[2], sizeof(floating))
    return strides


include "_attention_blas.pxi"


# ------------------------------------------------------------------ kernels


def forward(
    const floating[:, :, :, :] q,  # IN
    const floating[:, :, :, :] k,  # IN
    const floating[:, :, :, :] v,  # IN
    floating[:, :, :, :] out,  # OUT
    floating[:, :, ::1] lse,  # OUT
    double scale,
    Py_ssize_t pair_start,
    Py_ssize_t pair_stop,
    Py_ssize_t block_rows,
    Py_ssize_t block_cols,
):
    """Causal attention of the (batch, head) pairs [pair_start, pair_stop).

    Pair p is (p // n_heads, p % n_heads).  Writes ``out`` and ``lse`` for
    those pairs.  ``block_cols`` must be a multiple of ``block_rows``; the
    scratch memory is ``(block_cols + d + 5) * block_rows`` numbers (block_rows
    rounded up to a multiple of 16), and ``2 * length * d`` more when the rows
    of ``k`` or ``v`` are not contiguous.  The portable build runs
    ``_forward_blas`` (BLAS for the products; ``block_rows * (block_cols + 2)``
    numbers of scratch).
    """
    if not OWN_PRODUCTS:
        _forward_blas(q, k, v, out, lse, scale, pair_start, pair_stop, block_rows, block_cols)
        return
    cdef Py_ssize_t n_heads = q.shape[1]
    cdef Py_ssize_t length = q.shape[2]
    cdef Py_ssize_t d = q.shape[3]
    cdef _RowStrides ld = _row_strides(q, k, v, out)
    cdef Py_ssize_t ldr = _padded(block_rows)
    cdef floating[:, ::1] scores = floating_zeros_2d(<floating>0, block_cols, ldr)
    cdef floating[:, ::1] queries = floating_zeros_2d(<floating>0, d, ldr)
    cdef floating[:, ::1] row_stats = floating_zeros_2d(<floating>0, 5, ldr)
    cdef bint spread = ld.k != d or ld.v != d
    cdef floating[:, ::1] copies = floating_zeros_2d(<floating>0, 2 * length if spread else 2, d)
    cdef floating* St = &scores[0, 0]
    cdef floating* Qt = &queries[0, 0]
    cdef floating* row_max = &row_stats[0, 0]
    cdef floating* row_sum = &row_stats[1, 0]
    cdef floating* tile_max = &row_stats[2, 0]
    cdef floating* tile_sum = &row_stats[3, 0]
    cdef floating* correction = &row_stats[4, 0]
    cdef floating alpha = <floating>scale
    cdef Py_ssize_t pair, b, h, block, tile, r0, r1, rows, c0, cols, i, diag
    cdef floating largest
    cdef const floating* Q
    cdef const floating* K
    cdef const floating* V
    cdef floating* O
    cdef const floating* next_q = NULL
    cdef const floating* next_k = NULL
    cdef const floating* next_v = NULL
    with nogil:
        for pair in range(pair_start, pair_stop):
            b = pair // n_heads
            h = pair % n_heads
            if pair + 1 < pair_stop:
                next_q = &q[(pair + 1) // n_heads, (pair + 1) % n_heads, 0, 0]
                next_k = &k[(pair + 1) // n_heads, (pair + 1) % n_heads, 0, 0]
                next_v = &v[(pair + 1) // n_heads, (pair + 1) % n_heads, 0, 0]
            Q = &q[b, h, 0, 0]
            # Keys and values with contiguous rows (row stride d from here on).
            K = _contiguous(&k[b, h, 0, 0], ld.k, length, d, &copies[0, 0])
            V = _contiguous(&v[b, h, 0, 0], ld.v, length, d, &copies[length if spread else 1, 0])
            O = &out[b, h, 0, 0]
            for block in range((length + block_rows - 1) // block_rows):
                r0 = block * block_rows
                rows = block_rows if r0 + block_rows <= length else length - r0
                r1 = r0 + rows
                _pack_t(Q + r0 * ld.q, ld.q, rows, d, Qt, ldr)
                if pair + 1 < pair_stop:
                    _prefetch_spread(next_q, ld.q, r0, r1, d)
                    _prefetch_spread(next_k, ld.k, r0, r1, d)
                    _prefetch_spread(next_v, ld.v, r0, r1, d)
                for tile in range((r1 + block_cols - 1) // block_cols):
                    c0 = tile * block_cols
                    cols = block_cols if c0 + block_cols <= r1 else r1 - c0
                    diag = r0 - c0
                    # The scores and the tile's row maxima, in the product's registers.
                    for i in range(ldr):
                        tile_max[i] = -INFINITY
                    _scores(cols, rows, d, diag, alpha, K + c0 * d, d, Qt, ldr, St, ldr,
                            NULL, NULL, tile_max, NULL)
                    if c0 == 0:
                        for i in range(rows):
                            row_max[i] = tile_max[i]
                    else:
                        for i in range(rows):
                            largest = _larger(tile_max[i], row_max[i])
                            correction[i] = _exp_nonpositive(row_max[i] - largest)
                            row_max[i] = largest
                    for i in range(rows):
                        tile_sum[i] = 0
                    _exp_tile(St, ldr, cols, rows, diag, row_max, tile_sum)
                    if c0 == 0:
                        for i in range(rows):
                            row_sum[i] = tile_sum[i]
                    else:
                        for i in range(rows):
                            row_sum[i] = row_sum[i] * correction[i] + tile_sum[i]
                            if correction[i] != 1:
                                _scale_row(O + (r0 + i) * ld.out, d, correction[i])
                    _rows(rows, cols, d, FAR, diag, c0 != 0, St, 1, ldr, V + c0 * d, d,
                          O + r0 * ld.out, ld.out)
                for i in range(rows):
                    _scale_row(O + (r0 + i) * ld.out, d, 1 / row_sum[i])
                    lse[b, h, r0 + i] = row_max[i] + <floating>log(row_sum[i])


def backward(
    const floating[:, :, :, :] dout,  # IN
    const floating[:, :, :, :] q,  # IN
    const floating[:, :, :, :] k,  # IN
    const floating[:, :, :, :] v,  # IN
    const floating[:, :, :, :] out,  # IN
    const floating[:, :, :] lse,  # IN
    floating[:, :, :, :] dq,  # OUT
    floating[:, :, :, :] dk,  # OUT
    floating[:, :, :, :] dv,  # OUT
    double scale,
    Py_ssize_t pair_start,
    Py_ssize_t pair_stop,
    Py_ssize_t block_rows,
    Py_ssize_t block_cols,
):
    """Gradients of causal attention for the (batch, head) pairs [pair_start, pair_stop).

    ``out`` and ``lse`` are those of :func:`forward`.  Writes ``dq``, ``dk``
    and ``dv`` for those pairs; the scratch memory is ``2 * (block_cols + d +
    1) * block_rows`` numbers (block_rows rounded up to a multiple of 16) plus
    ``2 * block_rows * d``, and ``2 * length * d`` more each when the rows of
    ``k`` or ``v``, or of ``dk`` or ``dv``, are not contiguous.  The
    portable build runs ``_backward_blas`` (BLAS for the products; ``block_rows *
    (2 * block_cols + 1)`` numbers of scratch).
    """
    if not OWN_PRODUCTS:
        _backward_blas(dout, q, k, v, out, lse, dq, dk, dv, scale, pair_start, pair_stop,
                       block_rows, block_cols)
        return
    cdef Py_ssize_t n_heads = q.shape[1]
    cdef Py_ssize_t length = q.shape[2]
    cdef Py_ssize_t d = q.shape[3]
    cdef _RowStrides ld = _row_strides(q, k, v, out)
    cdef _RowStrides grad_ld = _row_strides(dq, dk, dv, dout)  # of the gradients
    cdef Py_ssize_t ldr = _padded(block_rows)
    cdef floating[:, :, ::1] tiles = floating_zeros_3d(<floating>0, 2, block_cols, ldr)
    cdef floating[:, :, ::1] packed = floating_zeros_3d(<floating>0, 2, d, ldr)
    cdef floating[:, ::1] row_stats = floating_zeros_2d(<floating>0, 2, ldr)
    cdef bint spread = ld.k != d or ld.v != d
    cdef floating[:, ::1] copies = floating_zeros_2d(<floating>0, 2 * length if spread else 2, d)
    # dK and dV are added to by every row block: kept in contiguous rows if theirs are not.
    cdef bint spread_grads = grad_ld.k != d or grad_ld.v != d
    cdef floating[:, ::1] grad_copies = floating_zeros_2d(
        <floating>0, 2 * length if spread_grads else 2, d)
    # The block's rows of q and dO, which two products of every tile read.
    cdef floating[:, :, ::1] block_copies = floating_zeros_3d(<floating>0, 2, block_rows, d)
    cdef Py_ssize_t ldk = d if spread_grads else grad_ld.k
    cdef Py_ssize_t ldv = d if spread_grads else grad_ld.v
    cdef floating alpha = <floating>scale
    cdef Py_ssize_t pair, b, h, block, n_blocks, tile, r0, r1, rows, c0, cols, i, diag
    cdef bint first_block
    cdef const floating* Q
    cdef const floating* K
    cdef const floating* V
    cdef const floating* O
    cdef const floating* dO
    cdef const floating* Qb
    cdef const floating* dOb
    cdef floating* dQ
    cdef floating* dK
    cdef floating* dV
    cdef const floating* next_inputs[5]
    cdef Py_ssize_t next_strides[5]
    cdef Py_ssize_t n
    cdef floating* P = &tiles[0, 0, 0]
    cdef floating* dS = &tiles[1, 0, 0]
    cdef floating* Qt = &packed[0, 0, 0]
    cdef floating* dOt = &packed[1, 0, 0]
    cdef floating* deltas = &row_stats[0, 0]
    cdef floating* block_lse = &row_stats[1, 0]
    with nogil:
        for pair in range(pair_start, pair_stop):
            b = pair // n_heads
            h = pair % n_heads
            if pair + 1 < pair_stop:
                next_inputs[0] = &q[(pair + 1) // n_heads, (pair + 1) % n_heads, 0, 0]
                next_inputs[1] = &k[(pair + 1) // n_heads, (pair + 1) % n_heads, 0, 0]
                next_inputs[2] = &v[(pair + 1) // n_heads, (pair + 1) % n_heads, 0, 0]
                next_inputs[3] = &out[(pair + 1) // n_heads, (pair + 1) % n_heads, 0, 0]
                next_inputs[4] = &dout[(pair + 1) // n_heads, (pair + 1) % n_heads, 0, 0]
                next_strides[0] = ld.q
                next_strides[1] = ld.k
                next_strides[2] = ld.v
                next_strides[3] = ld.out
                next_strides[4] = grad_ld.out
            Q = &q[b, h, 0, 0]
            # Keys and values with contiguous rows (row stride d from here on).
            K = _contiguous(&k[b, h, 0, 0], ld.k, length, d, &copies[0, 0])
            V = _contiguous(&v[b, h, 0, 0], ld.v, length, d, &copies[length if spread else 1, 0])
            O = &out[b, h, 0, 0]
            dO = &dout[b, h, 0, 0]
            dQ = &dq[b, h, 0, 0]
            dK = &grad_copies[0, 0] if spread_grads else &dk[b, h, 0, 0]
            dV = &grad_copies[length, 0] if spread_grads else &dv[b, h, 0, 0]
            # Row blocks from the last: the last one sees every key, so its
            # products initialise dK and dV and the others add.
            n_blocks = (length + block_rows - 1) // block_rows
            for block in range(n_blocks - 1, -1, -1):
                r0 = block * block_rows
                first_block = block == n_blocks - 1
                rows = block_rows if r0 + block_rows <= length else length - r0
                r1 = r0 + rows
                # The block's rows of q and dO with contiguous rows (row stride d).
                Qb = _contiguous(Q + r0 * ld.q, ld.q, rows, d, &block_copies[0, 0, 0])
                dOb = _contiguous(dO + r0 * grad_ld.out, grad_ld.out, rows, d,
                                  &block_copies[1, 0, 0])
                for i in range(rows):
                    deltas[i] = _dot(dOb + i * d, O + (r0 + i) * ld.out, d)
                    block_lse[i] = lse[b, h, r0 + i]
                _pack_t(Qb, d, rows, d, Qt, ldr)
                _pack_t(dOb, d, rows, d, dOt, ldr)
                if pair + 1 < pair_stop:
                    for n in range(5):
                        _prefetch_spread(next_inputs[n], next_strides[n], r0, r1, d)
                for tile in range((r1 + block_cols - 1) // block_cols):
                    c0 = tile * block_cols
                    cols = block_cols if c0 + block_cols <= r1 else r1 - c0
                    diag = r0 - c0
                    # P = exp(S - lse), in the product's registers.
                    _scores(cols, rows, d, diag, alpha, K + c0 * d, d, Qt, ldr, P, ldr,
                            NULL, NULL, NULL, block_lse)
                    _rows(cols, rows, d, diag, FAR, not first_block, P, ldr, 1,
                          dOb, d, dV + c0 * ldv, ldv)
                    # dS = s P (dP - delta), with dP = dO V^T, in the product's registers.
                    _scores(cols, rows, d, diag, alpha, V + c0 * d, d, dOt, ldr, dS, ldr,
                            P, deltas, NULL, NULL)
                    _rows(rows, cols, d, FAR, diag, c0 != 0, dS, 1, ldr, K + c0 * d, d,
                          dQ + r0 * grad_ld.q, grad_ld.q)
                    _rows(cols, rows, d, diag, FAR, not first_block, dS, ldr, 1, Qb, d,
                          dK + c0 * ldk, ldk)
            if spread_grads:
                _copy_rows(dK, d, length, d, &dk[b, h, 0, 0], grad_ld.k)
                _copy_rows(dV, d, length, d, &dv[b, h, 0, 0], grad_ld.v)
