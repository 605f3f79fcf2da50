# cython: language_level=3
"""The attention kernels with BLAS for the tile products: the portable build's.

Included by _attention.pyx, whose ``forward`` and ``backward`` run these in
the portable build (compilers without vector extensions, and processors
without AVX2, where OpenBLAS's own kernels, picked at run time, beat 16-byte
vectors), and the register-tiled products of ``_attention_tiles.h`` in the
AVX2 and AVX-512 builds.  The algorithm is the same (``_attention.pyx``), in
the layout BLAS suits: a tile of scores is one row per query, ``S = s Q
K^T`` one ``gemm``, the softmax along its rows, and the products of the
backward pass five ``gemm`` calls per tile.  Row maxima and sums use
``LANES`` partial results combined by a fixed tree, branch-free (the
sign-bit selects of ``_elementary.pxi``), so GCC vectorises them and the
result does not depend on the vector width.
"""

from libc.stdint cimport INT32_MAX, INT64_MAX, int32_t, int64_t

from ._blas cimport NoTrans, RowMajor, Trans, _gemm

cdef enum:
    # Width of the partial maxima and sums of a row of scores.
    LANES = 16


cdef union _SignedBits64:
    double real
    int64_t integer


cdef union _SignedBits32:
    float real
    int32_t integer


cdef inline int64_t _order_key64(double x) noexcept nogil:
    """An integer that orders like ``x`` (not NaN): sign and magnitude to two's complement."""
    cdef _SignedBits64 bits
    bits.real = x
    return bits.integer ^ ((bits.integer >> 63) & INT64_MAX)


cdef inline int32_t _order_key32(float x) noexcept nogil:
    cdef _SignedBits32 bits
    bits.real = x
    return bits.integer ^ ((bits.integer >> 31) & INT32_MAX)


cdef inline floating _row_max(const floating* row, Py_ssize_t count) noexcept nogil:
    """The largest of ``row[0 .. count - 1]`` (count >= 1, no NaN).

    The maximum is taken over integers that order like the numbers (GCC
    vectorises an integer maximum, not a floating one without
    ``-ffinite-math-only``), and turned back into the number.
    """
    cdef Py_ssize_t c
    cdef int64_t largest64, key64
    cdef int32_t largest32, key32
    cdef _SignedBits64 bits64
    cdef _SignedBits32 bits32
    if floating is float:
        largest32 = _order_key32(row[0])
        for c in range(1, count):
            key32 = _order_key32(row[c])
            largest32 = key32 if key32 > largest32 else largest32
        bits32.integer = largest32 ^ ((largest32 >> 31) & INT32_MAX)
        return bits32.real
    else:
        largest64 = _order_key64(row[0])
        for c in range(1, count):
            key64 = _order_key64(row[c])
            largest64 = key64 if key64 > largest64 else largest64
        bits64.integer = largest64 ^ ((largest64 >> 63) & INT64_MAX)
        return bits64.real


cdef inline floating _exp_row(floating* row, Py_ssize_t count, Py_ssize_t width,
                              floating shift) noexcept nogil:
    """``row[c] = exp(row[c] - shift)`` for ``c < count``, 0 up to ``width``; the sum.

    ``shift`` is at least every ``row[c]`` (a row maximum or log-sum-exp), so
    the exponents are not positive (up to rounding, which the exponential
    tolerates).
    """
    cdef floating partial[LANES]
    cdef Py_ssize_t lane, block, c
    cdef floating value, total
    for lane in range(LANES):
        partial[lane] = 0
    for block in range(count // LANES):
        for lane in range(LANES):
            c = block * LANES + lane
            value = _exp_nonpositive(row[c] - shift)
            row[c] = value
            partial[lane] += value
    total = 0
    for c in range(count - count % LANES, count):
        value = _exp_nonpositive(row[c] - shift)
        row[c] = value
        total += value
    for c in range(count, width):
        row[c] = 0
    return total + (
        (((partial[0] + partial[1]) + (partial[2] + partial[3]))
         + ((partial[4] + partial[5]) + (partial[6] + partial[7])))
        + (((partial[8] + partial[9]) + (partial[10] + partial[11]))
           + ((partial[12] + partial[13]) + (partial[14] + partial[15])))
    )


cdef inline void _score_gradients(
    floating_out grad_scores,
    floating_in probabilities,
    floating delta,
    floating scale,
    Py_ssize_t count,
) noexcept nogil:
    """dS = scale * P * (dP - delta) in place of dP, over one row of a tile."""
    cdef Py_ssize_t c
    for c in range(count):
        grad_scores[c] = scale * probabilities[c] * (grad_scores[c] - delta)




cdef void _forward_blas(
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
    scratch memory is ``block_rows * (block_cols + 2)`` numbers.
    """
    cdef Py_ssize_t n_heads = q.shape[1]
    cdef Py_ssize_t length = q.shape[2]
    cdef int d = <int>q.shape[3]
    cdef _RowStrides ld = _row_strides(q, k, v, out)
    cdef floating[:, ::1] scores = floating_zeros_2d(<floating>0, block_rows, block_cols)
    cdef floating[:, ::1] row_stats = floating_zeros_2d(<floating>0, 2, block_rows)
    cdef floating* row_max = &row_stats[0, 0]
    cdef floating* row_sum = &row_stats[1, 0]
    cdef floating alpha = <floating>scale
    cdef Py_ssize_t pair, b, h, block, tile, r0, r1, rows, c0, cols, i, row, n_valid
    cdef floating tile_max, largest, total, correction
    cdef const floating* Q
    cdef const floating* K
    cdef const floating* V
    cdef floating* O
    cdef floating* S
    with nogil:
        for pair in range(pair_start, pair_stop):
            b = pair // n_heads
            h = pair % n_heads
            Q = &q[b, h, 0, 0]
            K = &k[b, h, 0, 0]
            V = &v[b, h, 0, 0]
            O = &out[b, h, 0, 0]
            for block in range((length + block_rows - 1) // block_rows):
                r0 = block * block_rows
                rows = block_rows if r0 + block_rows <= length else length - r0
                r1 = r0 + rows
                for tile in range((r1 + block_cols - 1) // block_cols):
                    c0 = tile * block_cols
                    cols = block_cols if c0 + block_cols <= r1 else r1 - c0
                    S = &scores[0, 0]
                    _gemm(RowMajor, NoTrans, Trans, <int>rows, <int>cols, d, alpha,
                          Q + r0 * ld.q, ld.q, K + c0 * ld.k, ld.k, 0, S, <int>cols)
                    for i in range(rows):
                        row = r0 + i
                        n_valid = cols if row - c0 + 1 >= cols else row - c0 + 1
                        tile_max = _row_max(S + i * cols, n_valid)
                        if c0 == 0:
                            row_max[i] = tile_max
                            row_sum[i] = _exp_row(S + i * cols, n_valid, cols, tile_max)
                        else:
                            largest = _larger(tile_max, row_max[i])
                            total = _exp_row(S + i * cols, n_valid, cols, largest)
                            correction = _exp_nonpositive(row_max[i] - largest)
                            row_sum[i] = row_sum[i] * correction + total
                            if correction != 1:
                                _scale_row(O + row * ld.out, d, correction)
                            row_max[i] = largest
                    _gemm(RowMajor, NoTrans, NoTrans, <int>rows, d, <int>cols, 1, S, <int>cols,
                          V + c0 * ld.v, ld.v, 0 if c0 == 0 else 1, O + r0 * ld.out, ld.out)
                for i in range(rows):
                    row = r0 + i
                    _scale_row(O + row * ld.out, d, 1 / row_sum[i])
                    lse[b, h, row] = row_max[i] + <floating>log(row_sum[i])


cdef void _backward_blas(
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
    and ``dv`` for those pairs; the scratch memory is ``block_rows * (2 *
    block_cols + 1)`` numbers.
    """
    cdef Py_ssize_t n_heads = q.shape[1]
    cdef Py_ssize_t length = q.shape[2]
    cdef int d = <int>q.shape[3]
    cdef _RowStrides ld = _row_strides(q, k, v, out)
    cdef _RowStrides grad_ld = _row_strides(dq, dk, dv, dout)  # of the gradients
    cdef floating[:, :, ::1] tiles = floating_zeros_3d(<floating>0, 2, block_rows, block_cols)
    cdef floating[::1] deltas = floating_zeros_1d(<floating>0, block_rows)
    cdef floating alpha = <floating>scale
    cdef Py_ssize_t pair, b, h, block, n_blocks, tile, r0, r1, rows, c0, cols, i, row, n_valid
    cdef bint first
    cdef const floating* Q
    cdef const floating* K
    cdef const floating* V
    cdef const floating* O
    cdef const floating* dO
    cdef floating* dQ
    cdef floating* dK
    cdef floating* dV
    cdef floating* P = &tiles[0, 0, 0]
    cdef floating* dS = &tiles[1, 0, 0]
    with nogil:
        for pair in range(pair_start, pair_stop):
            b = pair // n_heads
            h = pair % n_heads
            Q = &q[b, h, 0, 0]
            K = &k[b, h, 0, 0]
            V = &v[b, h, 0, 0]
            O = &out[b, h, 0, 0]
            dO = &dout[b, h, 0, 0]
            dQ = &dq[b, h, 0, 0]
            dK = &dk[b, h, 0, 0]
            dV = &dv[b, h, 0, 0]
            # Row blocks from the last: the last one sees every key, so its
            # products initialise dK and dV (beta = 0) and the others add.
            n_blocks = (length + block_rows - 1) // block_rows
            for block in range(n_blocks - 1, -1, -1):
                r0 = block * block_rows
                first = block == n_blocks - 1
                rows = block_rows if r0 + block_rows <= length else length - r0
                r1 = r0 + rows
                for i in range(rows):
                    deltas[i] = _dot(dO + (r0 + i) * grad_ld.out, O + (r0 + i) * ld.out, d)
                for tile in range((r1 + block_cols - 1) // block_cols):
                    c0 = tile * block_cols
                    cols = block_cols if c0 + block_cols <= r1 else r1 - c0
                    _gemm(RowMajor, NoTrans, Trans, <int>rows, <int>cols, d, alpha,
                          Q + r0 * ld.q, ld.q, K + c0 * ld.k, ld.k, 0, P, <int>cols)
                    for i in range(rows):
                        row = r0 + i
                        n_valid = cols if row - c0 + 1 >= cols else row - c0 + 1
                        _exp_row(P + i * cols, n_valid, cols, lse[b, h, row])
                    _gemm(RowMajor, Trans, NoTrans, <int>cols, d, <int>rows, 1, P, <int>cols,
                          dO + r0 * grad_ld.out, grad_ld.out, 0 if first else 1,
                          dV + c0 * grad_ld.v, grad_ld.v)
                    _gemm(RowMajor, NoTrans, Trans, <int>rows, <int>cols, d, 1,
                          dO + r0 * grad_ld.out, grad_ld.out, V + c0 * ld.v, ld.v, 0, dS, <int>cols)
                    for i in range(rows):
                        _score_gradients(dS + i * cols, P + i * cols, deltas[i], alpha, cols)
                    _gemm(RowMajor, NoTrans, NoTrans, <int>rows, d, <int>cols, 1, dS, <int>cols,
                          K + c0 * ld.k, ld.k, 0 if c0 == 0 else 1, dQ + r0 * grad_ld.q, grad_ld.q)
                    _gemm(RowMajor, Trans, NoTrans, <int>cols, d, <int>rows, 1, dS, <int>cols,
                          Q + r0 * ld.q, ld.q, 0 if first else 1, dK + c0 * grad_ld.k, grad_ld.k)
