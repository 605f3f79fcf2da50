/* The tile products of the attention kernels (_attention.pyx), in registers.
 *
 * Two products, for float and double, in the layout of _attention.pyx: a tile
 * of scores is held transposed, one row per key and the queries along it.
 *
 * skseq_scores_{f,d}: C[x, j] = alpha * sum_p A[x, p] * Bt[p, j], the
 *   (transposed) scores, or dP, of a tile: A holds the tile's keys (or values),
 *   m x d with row stride lda, and Bt the block's queries (or dO) packed
 *   transposed by skseq_pack_t_* (d x n, zero-padded to whole vectors, row
 *   stride ldt).  Row x needs the columns j >= x - lo (the causal mask); a
 *   register tile of rows computes them from the whole vector of
 *   skseq_row_start(x0 - lo) of its first row x0 on.  Given P and delta, the
 *   product is dP and becomes dS in the registers: C = alpha * P * (dP -
 *   delta[j]) where row x sees column j, 0 where it does not.
 *
 * skseq_rows_{f,d}: C[x, :d] (+)= sum_p A[x, p] * B[p, :d], with A read
 *   through strides (sax, sap), so either a tile in the layout above (dV +=
 *   P^T dO, dK += dS^T Q: x a key, p a query) or its transpose (O += P V,
 *   dQ += dS K: x a query, p a key); row x sums only the p with x - lo <= p <=
 *   x + hi (the causal mask): a register tile runs over the p that any of its
 *   rows sees and takes the others' terms as zeros, through a select.
 *
 * Every number is one sum in a fixed order: p ascending, from zero (or from
 * the value in C when accumulating), one multiply-add at a time.  Vectors run
 * across the independent outputs (the columns j, or the d features), never
 * along a sum, so the results do not depend on the vector width; columns
 * beyond the last whole vector of d take the same sums one at a time.  The
 * products are GCC vector-extension code in registers, 32 or 64-byte vectors
 * in the AVX2 and AVX-512 builds; the portable build keeps plain loops in the
 * same order, which it does not call (it uses BLAS).
 */
#ifndef SKSEQ_ATTENTION_TILES_H
#define SKSEQ_ATTENTION_TILES_H

#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

/* The kernels use these products in the AVX2 and AVX-512 builds (compiled by
 * GCC or Clang); the portable build uses BLAS (_attention_blas.pxi), whose
 * own kernels, picked at run time, beat 16-byte vectors, and keeps only the
 * plain loops below (never called there). */
#if defined(__GNUC__) && (defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__)))
#define SKSEQ_OWN_PRODUCTS 1
#if defined(__AVX512F__)
#define SKSEQ_TILE_VBYTES 64
/* 32 vector registers: 24 accumulators. */
#define SKSEQ_SCORES_MR 6
#define SKSEQ_SCORES_NV 4
#define SKSEQ_ROWS_MR_WIDE 6   /* 3 or 4 vectors of d */
#define SKSEQ_ROWS_MR_NARROW 12 /* 1 or 2 vectors of d */
#define SKSEQ_ROWS_NV 4
#else
#define SKSEQ_TILE_VBYTES 32
/* 16 vector registers: 12 accumulators. */
#define SKSEQ_SCORES_MR 4
#define SKSEQ_SCORES_NV 3
#define SKSEQ_ROWS_MR_WIDE 4
#define SKSEQ_ROWS_MR_NARROW 6
#define SKSEQ_ROWS_NV 2
#endif
#define SKSEQ_INLINE static inline __attribute__((always_inline))
#define SKSEQ_UNROLL _Pragma("GCC unroll 16")
#else
#define SKSEQ_OWN_PRODUCTS 0
#define SKSEQ_TILE_VBYTES 16
#define SKSEQ_INLINE static inline
#define SKSEQ_UNROLL
#endif

/* Numbers per vector, and the largest register tiles of any build (array
 * sizes; each build uses its own). */
#define SKSEQ_LANES_F ((ptrdiff_t)(SKSEQ_TILE_VBYTES / sizeof(float)))
#define SKSEQ_LANES_D ((ptrdiff_t)(SKSEQ_TILE_VBYTES / sizeof(double)))
#define SKSEQ_MAX_MR 12
#define SKSEQ_MAX_NV 4
/* Rows of a tile are processed from a multiple of this many entries (whole
 * vectors in every build). */
#define SKSEQ_ROW_ALIGN 16

/* Where the work on a row of a tile starts, for a row whose first entry left
 * by the causal mask is ``first``: the whole vector that holds it. */
static inline ptrdiff_t skseq_row_start(ptrdiff_t first) {
    return first > 0 ? first / SKSEQ_ROW_ALIGN * SKSEQ_ROW_ALIGN : 0;
}

/* Asks for rows [first, last) of A (row stride lda, rows of d numbers of
 * itemsize bytes) to be brought into the caches: the first and last byte of
 * each row (a row that straddles two cache lines needs both).  The kernels
 * fetch the next (batch, head) pair's rows while they compute on this one's:
 * rows far apart (the heads of a packed projection) each cross into a new
 * page, where the hardware prefetchers stop. */
static inline void skseq_prefetch_rows(const void *A, ptrdiff_t lda, ptrdiff_t first,
                                       ptrdiff_t last, ptrdiff_t d, ptrdiff_t itemsize) {
    const char *row = (const char *)A + first * lda * itemsize;
    for (ptrdiff_t i = first; i < last; i++, row += lda * itemsize) {
        __builtin_prefetch(row, 0, 2);
        __builtin_prefetch(row + d * itemsize - 1, 0, 2);
    }
}

/* Causal limits: a register tile of rows [i0, i1] sees columns j <= i1 + diag. */
#define SKSEQ_FAR ((ptrdiff_t)1 << 40)

static inline ptrdiff_t skseq_min(ptrdiff_t a, ptrdiff_t b) { return a < b ? a : b; }
static inline ptrdiff_t skseq_max(ptrdiff_t a, ptrdiff_t b) { return a > b ? a : b; }

/* ------------------------------------------------------------- packing */

#define SKSEQ_DEFINE_PACK(T, SUFFIX, LANES)                                                   \
    /* Bt[p, j] = B[j, p] for j < n, p < d; zeros for n <= j < n rounded up to      \
     * whole vectors. */                                                                       \
    static inline void skseq_pack_t_scalar_##SUFFIX(const T *B, ptrdiff_t ldb, ptrdiff_t n,    \
                                                    ptrdiff_t d, T *Bt, ptrdiff_t ldt) {       \
        ptrdiff_t j, p, padded = (n + (LANES)-1) / (LANES) * (LANES);                          \
        for (j = 0; j < n; j++)                                                                \
            for (p = 0; p < d; p++) Bt[p * ldt + j] = B[j * ldb + p];                          \
        for (p = 0; p < d; p++)                                                                \
            for (j = n; j < padded; j++) Bt[p * ldt + j] = 0;                                  \
    }

SKSEQ_DEFINE_PACK(float, f, SKSEQ_LANES_F)
SKSEQ_DEFINE_PACK(double, d, SKSEQ_LANES_D)

/* -------------------------------------------- the same sums, one at a time */

#define SKSEQ_DEFINE_SCALAR(T, SUFFIX)                                                        \
    static inline void skseq_scores_scalar_##SUFFIX(                                           \
        ptrdiff_t m, ptrdiff_t n, ptrdiff_t d, ptrdiff_t lo, T alpha, const T *A, ptrdiff_t lda,  \
        const T *Bt, ptrdiff_t ldt, T *C, ptrdiff_t ldc, const T *P, const T *delta,           \
        T *largest, const T *shift) {                                                          \
        ptrdiff_t x, j, p;                                                                     \
        for (x = 0; x < m; x++) {                                                              \
            for (j = skseq_row_start(x - lo); j < n; j++) {                                    \
                T total = 0;                                                                   \
                for (p = 0; p < d; p++) total += A[x * lda + p] * Bt[p * ldt + j];             \
                if (shift != NULL) {                                                           \
                    C[x * ldc + j] =                                                           \
                        j >= x - lo ? (T)exp((double)(alpha * total - shift[j])) : 0;          \
                } else if (P == NULL) {                                                        \
                    C[x * ldc + j] = alpha * total;                                            \
                    if (largest != NULL && j >= x - lo && alpha * total - largest[j] >= 0)     \
                        largest[j] = alpha * total;                                            \
                } else                                                                         \
                    C[x * ldc + j] =                                                           \
                        j >= x - lo ? alpha * P[x * ldc + j] * (total - delta[j]) : 0;         \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    /* skseq_rows for the columns [c0, c1) of d. */                                            \
    static inline void skseq_rows_scalar_##SUFFIX(ptrdiff_t m, ptrdiff_t k, ptrdiff_t c0,             \
                                           ptrdiff_t c1, ptrdiff_t lo, ptrdiff_t hi,           \
                                           int accumulate, const T *A, ptrdiff_t sax,          \
                                           ptrdiff_t sap, const T *B, ptrdiff_t ldb, T *C,     \
                                           ptrdiff_t ldc) {                                    \
        ptrdiff_t x, p, c, p0, p1;                                                             \
        for (x = 0; x < m; x++) {                                                              \
            p0 = skseq_max(0, x - lo);                                                         \
            p1 = skseq_min(k, x + 1 + hi);                                                     \
            for (c = c0; c < c1; c++) {                                                        \
                T total = accumulate ? C[x * ldc + c] : 0;                                     \
                for (p = p0; p < p1; p++) total += A[x * sax + p * sap] * B[p * ldb + c];      \
                C[x * ldc + c] = total;                                                        \
            }                                                                                  \
        }                                                                                      \
    }

SKSEQ_DEFINE_SCALAR(float, f)
SKSEQ_DEFINE_SCALAR(double, d)

#if SKSEQ_OWN_PRODUCTS

typedef float skseq_vf __attribute__((vector_size(SKSEQ_TILE_VBYTES)));
typedef double skseq_vd __attribute__((vector_size(SKSEQ_TILE_VBYTES)));
typedef int32_t skseq_vfi __attribute__((vector_size(SKSEQ_TILE_VBYTES)));
typedef int64_t skseq_vdi __attribute__((vector_size(SKSEQ_TILE_VBYTES)));
/* Half and quarter vectors: the columns of d beyond its whole vectors. */
typedef float skseq_vf2 __attribute__((vector_size(SKSEQ_TILE_VBYTES / 2)));
typedef float skseq_vf4 __attribute__((vector_size(SKSEQ_TILE_VBYTES / 4)));
typedef double skseq_vd2 __attribute__((vector_size(SKSEQ_TILE_VBYTES / 2)));
typedef double skseq_vd4 __attribute__((vector_size(SKSEQ_TILE_VBYTES / 4)));

/* Unaligned loads and stores of a vector type. */
#define SKSEQ_DEFINE_LOADS(T, SUFFIX, V)                                                      \
    static inline V skseq_load_##SUFFIX(const T *p) {                                          \
        V v;                                                                                   \
        memcpy(&v, p, sizeof v);                                                               \
        return v;                                                                              \
    }                                                                                          \
    static inline void skseq_store_##SUFFIX(T *p, V v) { memcpy(p, &v, sizeof v); }            \

SKSEQ_DEFINE_LOADS(float, f, skseq_vf)
SKSEQ_DEFINE_LOADS(float, f2, skseq_vf2)
SKSEQ_DEFINE_LOADS(float, f4, skseq_vf4)
SKSEQ_DEFINE_LOADS(double, d, skseq_vd)
SKSEQ_DEFINE_LOADS(double, d2, skseq_vd2)
SKSEQ_DEFINE_LOADS(double, d4, skseq_vd4)

typedef uint32_t skseq_vfu __attribute__((vector_size(SKSEQ_TILE_VBYTES)));
typedef uint64_t skseq_vdu __attribute__((vector_size(SKSEQ_TILE_VBYTES)));

/* exp(x) for x <= 0 (not NaN), a vector at a time: the numbers of
 * _elementary.pxi's _exp_nonpositive32/64 (the same reduction and polynomial,
 * written as the same expressions so that GCC contracts them into the same
 * multiply-adds), 0 below -86 (float) or -708 (double).  The scalar functions
 * build 2**(k - 1) in the exponent field and multiply the polynomial by 2 and
 * by it, both exact while the result is normal, which it is above those
 * bounds; AVX-512's scalef multiplies by 2**k in one instruction, with the
 * same result, and needs no clamp of x (the lanes below the bound are zeroed
 * by its mask whatever it computed there; a NaN is kept, as the scalar
 * functions keep it, so that a NaN input shows in the results). */
#if SKSEQ_TILE_VBYTES == 64
#include <immintrin.h>
#endif
SKSEQ_INLINE skseq_vf skseq_exp_nonpositive_vf(skseq_vf x) {
#if SKSEQ_TILE_VBYTES != 64
    skseq_vfi below = (skseq_vfi)(x + (float)86.0) >> 31; /* all ones where x < -86 */
    x = (skseq_vf)(((skseq_vfi)x & ~below) | ((skseq_vfi)((skseq_vf){0} + (float)-86.0) & below));
#endif
    skseq_vf k = x * (float)1.44269504 + (float)12582912.0;
#if SKSEQ_TILE_VBYTES != 64
    skseq_vfu scale = (skseq_vfu)k;
#endif
    k = k - (float)12582912.0;
    skseq_vf r = (x - k * (float)0.693359375) - k * (float)-2.12194440e-4;
    skseq_vf r2 = r * r;
    skseq_vf r4 = r2 * r2;
    skseq_vf poly =
        (((float)1.0 + (float)1.0000000377162138 * r) +
         r2 * ((float)0.50000000471177577 + (float)0.16666415514653275 * r)) +
        r4 * (((float)0.041666352896775157 + (float)0.0083751263981533357 * r) +
              r2 * (float)0.0013941108433972675);
#if SKSEQ_TILE_VBYTES == 64
    __mmask16 keep = _mm512_cmp_ps_mask((__m512)x, _mm512_set1_ps(-86.0f), _CMP_NLT_UQ);
    return (skseq_vf)_mm512_maskz_scalef_ps(keep, (__m512)poly, (__m512)k);
#else
    scale = (scale + 126) << 23;
    skseq_vf result = poly * (float)2.0 * (skseq_vf)scale;
    return (skseq_vf)((skseq_vfi)result & ~below);
#endif
}

SKSEQ_INLINE skseq_vd skseq_exp_nonpositive_vd(skseq_vd x) {
#if SKSEQ_TILE_VBYTES != 64
    skseq_vdi below = (skseq_vdi)(x + 708.0) >> 63; /* all ones where x < -708 */
    x = (skseq_vd)(((skseq_vdi)x & ~below) | ((skseq_vdi)((skseq_vd){0} + -708.0) & below));
#endif
    skseq_vd k = x * 1.4426950408889634 + 6755399441055744.0;
#if SKSEQ_TILE_VBYTES != 64
    skseq_vdu scale = (skseq_vdu)k;
#endif
    k = k - 6755399441055744.0;
    skseq_vd r = (x - k * 6.93147180369123816490e-01) - k * 1.90821492927058770002e-10;
    skseq_vd r2 = r * r;
    skseq_vd r4 = r2 * r2;
    skseq_vd poly =
        ((1.0 + r) + r2 * (0.50000000000000183855 + 0.16666666666666680806 * r)) +
        r4 * (((0.041666666666488095495 + 0.0083333333333196006109 * r) +
               r2 * (0.0013888888952314774652 + 0.00019841269890047113707 * r)) +
              r4 * ((0.000024801485482328492419 + 2.7557240918578969823e-6 * r) +
                    r2 * (2.7632639639041029749e-7 + 2.5110037605963777712e-8 * r)));
#if SKSEQ_TILE_VBYTES == 64
    __mmask8 keep = _mm512_cmp_pd_mask((__m512d)x, _mm512_set1_pd(-708.0), _CMP_NLT_UQ);
    return (skseq_vd)_mm512_maskz_scalef_pd(keep, (__m512d)poly, (__m512d)k);
#else
    scale = (scale + 1022) << 52;
    skseq_vd result = poly * 2.0 * (skseq_vd)scale;
    return (skseq_vd)((skseq_vdi)result & ~below);
#endif
}


/* The register tiles: MR rows by NV vectors, for compile-time MR and NV (the
 * dispatchers below call them with constants, so the loops unroll and the
 * accumulators live in registers).  The per-build register tile sizes are
 * chosen so the accumulators fit the register file (see above). */
#define SKSEQ_DEFINE_TILES(T, SUFFIX, V, VI, IT, LANES)                                           \
    /* 0, 1, ..., LANES - 1 */                                                                 \
    static inline VI skseq_iota_##SUFFIX(void) {                                               \
        VI lane;                                                                               \
        for (int i = 0; i < (LANES); i++) lane[i] = i;                                         \
        return lane;                                                                           \
    }                                                                                          \
    SKSEQ_INLINE void skseq_scores_tile_##SUFFIX(                                              \
        const int mr, const int nv, ptrdiff_t d, T alpha, const T *A, ptrdiff_t lda,           \
        const T *Bt, ptrdiff_t ldt, T *C, ptrdiff_t ldc, const T *P, const T *delta,           \
        T *largest, const T *shift, ptrdiff_t n, ptrdiff_t first, ptrdiff_t column) {          \
        V acc[SKSEQ_MAX_MR][SKSEQ_MAX_NV], b[SKSEQ_MAX_NV];                                    \
        ptrdiff_t p;                                                                           \
        SKSEQ_UNROLL for (int i = 0; i < mr; i++) SKSEQ_UNROLL for (int v = 0; v < nv; v++)    \
            acc[i][v] = (V){0};                                                                \
        for (p = 0; p < d; p++) {                                                              \
            SKSEQ_UNROLL for (int v = 0; v < nv; v++) b[v] =                                   \
                skseq_load_##SUFFIX(Bt + p * ldt + v * (LANES));                               \
            SKSEQ_UNROLL for (int i = 0; i < mr; i++) {                                        \
                T a = A[i * lda + p];                                                          \
                SKSEQ_UNROLL for (int v = 0; v < nv; v++) acc[i][v] += a * b[v];               \
            }                                                                                  \
        }                                                                                      \
        if (shift != NULL) {                                                                   \
            /* P = exp(scores - shift[j]) (shift a log-sum-exp, so the exponents are not         \
             * positive up to rounding), 0 where the mask leaves the score out and in the      \
             * lanes beyond the n columns: the scores rounded as they would be stored. */      \
            VI lane = skseq_iota_##SUFFIX();                                                   \
            int masked = first + mr - 1 > column || column + nv * (LANES) > n;                 \
            SKSEQ_UNROLL for (int v = 0; v < nv; v++) {                                        \
                V lse = skseq_load_##SUFFIX(shift + v * (LANES));                              \
                VI index = lane + (IT)(column + v * (LANES));                                  \
                SKSEQ_UNROLL for (int i = 0; i < mr; i++) {                                    \
                    V score = alpha * acc[i][v];                                               \
                    /* Rounded as stored: not contracted into the subtraction. */              \
                    __asm__("" : "+v"(score));                                                 \
                    V e = skseq_exp_nonpositive_v##SUFFIX(score - lse);                        \
                    if (masked) {                                                              \
                        VI seen = (index >= (IT)(first + i)) & (index < (IT)n);                \
                        e = (V)((VI)e & seen);                                                 \
                    }                                                                          \
                    skseq_store_##SUFFIX(C + i * ldc + v * (LANES), e);                        \
                }                                                                              \
            }                                                                                  \
        } else if (P == NULL && largest == NULL) {                                             \
            SKSEQ_UNROLL for (int i = 0; i < mr; i++) SKSEQ_UNROLL for (int v = 0; v < nv;     \
                                                                        v++)                   \
                skseq_store_##SUFFIX(C + i * ldc + v * (LANES), alpha * acc[i][v]);            \
        } else if (P == NULL) {                                                                \
            /* The scores, and largest[j] = max(largest[j], scores of the rows that see        \
             * column j); max(a, b) is b where a - b is negative, else a (no NaN). */          \
            VI lane = skseq_iota_##SUFFIX();                                                   \
            int masked = first + mr - 1 > column;                                              \
            SKSEQ_UNROLL for (int v = 0; v < nv; v++) {                                        \
                V top = skseq_load_##SUFFIX(largest + v * (LANES));                            \
                VI index = lane + (IT)(column + v * (LANES));                                  \
                SKSEQ_UNROLL for (int i = 0; i < mr; i++) {                                    \
                    V score = alpha * acc[i][v];                                               \
                    skseq_store_##SUFFIX(C + i * ldc + v * (LANES), score);                    \
                    VI below = (VI)(score - top) >> (8 * sizeof(T) - 1);                       \
                    if (masked) below |= ~(index >= (IT)(first + i));                          \
                    top = (V)(((VI)top & below) | ((VI)score & ~below));                       \
                }                                                                              \
                skseq_store_##SUFFIX(largest + v * (LANES), top);                              \
            }                                                                                  \
        } else {                                                                               \
            /* dS = alpha P (dP - delta), and 0 where the mask leaves P out: column j of the   \
             * tile's row i is seen when column + j >= first + i. */                           \
            VI lane = skseq_iota_##SUFFIX();                                                   \
            SKSEQ_UNROLL for (int v = 0; v < nv; v++) {                                        \
                V dl = skseq_load_##SUFFIX(delta + v * (LANES));                               \
                VI index = lane + (IT)(column + v * (LANES));                                      \
                SKSEQ_UNROLL for (int i = 0; i < mr; i++) {                                    \
                    V g = alpha * skseq_load_##SUFFIX(P + i * ldc + v * (LANES)) *             \
                          (acc[i][v] - dl);                                                    \
                    VI seen = index >= (IT)(first + i);                                            \
                    skseq_store_##SUFFIX(C + i * ldc + v * (LANES), (V)((VI)g & seen));        \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
                                                                                               \

/* One term p of a register tile of skseq_rows; MASKED: a term that some rows
 * of the tile leave out (they add zero). */
#define SKSEQ_ROWS_STEP(T, SUFFIX, LANES, MASKED)                                             \
    {                                                                                          \
        SKSEQ_UNROLL for (int v = 0; v < nv; v++) b[v] =                                       \
            skseq_load_##SUFFIX(B + p * ldb + v * (LANES));                                    \
        SKSEQ_UNROLL for (int x = 0; x < mr; x++) {                                            \
            T a = A[x * sax + p * sap];                                                        \
            if (MASKED) a = (p >= first + x && p < last + x) ? a : (T)0;                       \
            SKSEQ_UNROLL for (int v = 0; v < nv; v++) acc[x][v] += a * b[v];                   \
        }                                                                                      \
    }


/* skseq_pack_t_* with vectors: LANES x LANES blocks transposed in registers
 * (log2(LANES) rounds of two-vector shuffles, each swapping the off-diagonal
 * blocks of a size: the recursive transpose), the columns of d beyond whole
 * vectors one at a time. */
#define SKSEQ_DEFINE_TRANSPOSE(T, SUFFIX, V, VI, LANES)                                       \
    SKSEQ_INLINE void skseq_transpose_##SUFFIX(V *rows) {                                      \
        SKSEQ_UNROLL for (int h = (LANES) / 2; h >= 1; h /= 2) {                               \
            VI low, high;                                                                      \
            SKSEQ_UNROLL for (int c = 0; c < (LANES); c++) {                                   \
                low[c] = (c & h) ? (LANES) + c - h : c;                                        \
                high[c] = (c & h) ? (LANES) + c : c + h;                                       \
            }                                                                                  \
            SKSEQ_UNROLL for (int r = 0; r < (LANES); r++) {                                   \
                if (r & h) continue;                                                           \
                V a = rows[r], b = rows[r + h];                                                \
                rows[r] = __builtin_shuffle(a, b, low);                                        \
                rows[r + h] = __builtin_shuffle(a, b, high);                                   \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    static void skseq_pack_t_##SUFFIX(const T *B, ptrdiff_t ldb, ptrdiff_t n, ptrdiff_t d,     \
                                      T *Bt, ptrdiff_t ldt) {                                  \
        ptrdiff_t j0, p0, j, p, whole = d / (LANES) * (LANES);                                 \
        V rows[LANES];                                                                         \
        for (j0 = 0; j0 < n; j0 += (LANES)) {                                                  \
            for (p0 = 0; p0 < whole; p0 += (LANES)) {                                          \
                SKSEQ_UNROLL for (int r = 0; r < (LANES); r++) rows[r] =                       \
                    j0 + r < n ? skseq_load_##SUFFIX(B + (j0 + r) * ldb + p0) : (V){0};        \
                skseq_transpose_##SUFFIX(rows);                                                \
                SKSEQ_UNROLL for (int c = 0; c < (LANES); c++)                                 \
                    skseq_store_##SUFFIX(Bt + (p0 + c) * ldt + j0, rows[c]);                   \
            }                                                                                  \
            for (p = whole; p < d; p++)                                                        \
                for (j = j0; j < j0 + (LANES); j++) Bt[p * ldt + j] = j < n ? B[j * ldb + p] : 0; \
        }                                                                                      \
    }

SKSEQ_DEFINE_TRANSPOSE(float, f, skseq_vf, skseq_vfi, SKSEQ_LANES_F)
SKSEQ_DEFINE_TRANSPOSE(double, d, skseq_vd, skseq_vdi, SKSEQ_LANES_D)

/* The register tile of skseq_rows, for a vector type V of LANES numbers. */
#define SKSEQ_DEFINE_ROWS_TILE(T, SUFFIX, V, LANES)                                           \
    /* Row x of the tile sums the p with first + x <= p < last + x (the causal                  \
     * mask): the p that some rows of the tile leave out (at most mr - 1 at either               \
     * end) are taken with a select, the others plainly. */                                     \
    SKSEQ_INLINE void skseq_rows_tile_##SUFFIX(                                                \
        const int mr, const int nv, ptrdiff_t p0, ptrdiff_t p1, ptrdiff_t first,               \
        ptrdiff_t last, int accumulate, const T *A, ptrdiff_t sax, ptrdiff_t sap, const T *B,  \
        ptrdiff_t ldb, T *C, ptrdiff_t ldc) {                                                  \
        V acc[SKSEQ_MAX_MR][SKSEQ_MAX_NV], b[SKSEQ_MAX_NV];                                    \
        ptrdiff_t p, full_begin, full_end;                                                     \
        full_begin = skseq_max(p0, skseq_min(p1, first + mr - 1));                             \
        full_end = skseq_max(full_begin, skseq_min(p1, last));                                 \
        SKSEQ_UNROLL for (int x = 0; x < mr; x++) SKSEQ_UNROLL for (int v = 0; v < nv; v++)    \
            acc[x][v] = accumulate ? skseq_load_##SUFFIX(C + x * ldc + v * (LANES)) : (V){0};  \
        for (p = p0; p < full_begin; p++) SKSEQ_ROWS_STEP(T, SUFFIX, LANES, 1)                 \
        for (p = full_begin; p < full_end; p++) SKSEQ_ROWS_STEP(T, SUFFIX, LANES, 0)           \
        for (p = full_end; p < p1; p++) SKSEQ_ROWS_STEP(T, SUFFIX, LANES, 1)                   \
        SKSEQ_UNROLL for (int x = 0; x < mr; x++) SKSEQ_UNROLL for (int v = 0; v < nv; v++)    \
            skseq_store_##SUFFIX(C + x * ldc + v * (LANES), acc[x][v]);                        \
    }

SKSEQ_DEFINE_TILES(float, f, skseq_vf, skseq_vfi, int32_t, SKSEQ_LANES_F)
SKSEQ_DEFINE_TILES(double, d, skseq_vd, skseq_vdi, int64_t, SKSEQ_LANES_D)

/* The forward pass's exponentials of a tile of scores S (m keys by n queries,
 * row stride lds; S[j, c] seen when c >= j - diag): S[j, c] = exp(S[j, c] -
 * shift[c]) (shift the row maxima) and total[c] += S[j, c], j ascending, for
 * the seen entries; 0 for the others from the whole vector of the row's first
 * seen entry on, and in the lanes beyond n. */
#define SKSEQ_DEFINE_EXP_TILE(T, SUFFIX, V, VI, IT, LANES)                                    \
    static void skseq_exp_tile_##SUFFIX(T *S, ptrdiff_t lds, ptrdiff_t m, ptrdiff_t n,         \
                                        ptrdiff_t diag, const T *shift, T *total) {            \
        VI lane = skseq_iota_##SUFFIX();                                                       \
        for (ptrdiff_t j = 0; j < m; j++) {                                                    \
            ptrdiff_t first = j > diag ? j - diag : 0, column;                                 \
            T *row = S + j * lds;                                                              \
            for (column = skseq_row_start(first); column < n; column += (LANES)) {             \
                V e = skseq_exp_nonpositive_v##SUFFIX(skseq_load_##SUFFIX(row + column) -      \
                                                      skseq_load_##SUFFIX(shift + column));    \
                if (column < first || column + (LANES) > n) {                                  \
                    VI index = lane + (IT)column;                                              \
                    e = (V)((VI)e & ((index >= (IT)first) & (index < (IT)n)));                 \
                }                                                                              \
                skseq_store_##SUFFIX(row + column, e);                                         \
                skseq_store_##SUFFIX(total + column, skseq_load_##SUFFIX(total + column) + e); \
            }                                                                                  \
        }                                                                                      \
    }

SKSEQ_DEFINE_EXP_TILE(float, f, skseq_vf, skseq_vfi, int32_t, SKSEQ_LANES_F)
SKSEQ_DEFINE_EXP_TILE(double, d, skseq_vd, skseq_vdi, int64_t, SKSEQ_LANES_D)
SKSEQ_DEFINE_ROWS_TILE(float, f, skseq_vf, SKSEQ_LANES_F)
SKSEQ_DEFINE_ROWS_TILE(float, f2, skseq_vf2, SKSEQ_LANES_F / 2)
SKSEQ_DEFINE_ROWS_TILE(float, f4, skseq_vf4, SKSEQ_LANES_F / 4)
SKSEQ_DEFINE_ROWS_TILE(double, d, skseq_vd, SKSEQ_LANES_D)
SKSEQ_DEFINE_ROWS_TILE(double, d2, skseq_vd2, SKSEQ_LANES_D / 2)
SKSEQ_DEFINE_ROWS_TILE(double, d4, skseq_vd4, SKSEQ_LANES_D / 4)

/* Register tiles come in a few heights (and widths): the largest, and the
 * powers of two below it, which cover what is left over (7 rows: 4, 2, 1);
 * fewer tiles to compile. */
#define SKSEQ_TILE_SIZE(SIZE, MOST) ((SIZE) == (MOST) || ((SIZE) < (MOST) && ((SIZE) & ((SIZE)-1)) == 0))

/* The tile size for what is left: the largest, or the largest power of two. */
static inline int skseq_tile_size(ptrdiff_t left, int most) {
    int size = 1;
    if (left >= most) return most;
    while (size * 2 <= left) size *= 2;
    return size;
}

/* Dispatch on (mr, nv) to the tile with those constants: mr a tile size up to
 * MR_MAX, nv one in NV_LOW .. NV_HIGH (at most 4). */
#define SKSEQ_NV_CASE(CALL, MRV, NVV, NV_LOW, NV_HIGH)                                         \
    if ((NVV) >= (NV_LOW) && SKSEQ_TILE_SIZE(NVV, NV_HIGH) && nv == (NVV)) CALL(MRV, NVV);
#define SKSEQ_NV_CASES(CALL, MRV, NV_LOW, NV_HIGH)                                            \
    SKSEQ_NV_CASE(CALL, MRV, 1, NV_LOW, NV_HIGH)                                               \
    SKSEQ_NV_CASE(CALL, MRV, 2, NV_LOW, NV_HIGH)                                               \
    SKSEQ_NV_CASE(CALL, MRV, 3, NV_LOW, NV_HIGH)                                               \
    SKSEQ_NV_CASE(CALL, MRV, 4, NV_LOW, NV_HIGH)
#define SKSEQ_MR_CASE(CALL, MRV, MR_MAX, NV_LOW, NV_HIGH)                                      \
    if (SKSEQ_TILE_SIZE(MRV, MR_MAX) && mr == (MRV)) {                                         \
        SKSEQ_NV_CASES(CALL, ((MRV) <= (MR_MAX) ? (MRV) : 1), NV_LOW, NV_HIGH)                 \
    }
#define SKSEQ_DISPATCH(CALL, MR_MAX, NV_LOW, NV_HIGH)                                          \
    SKSEQ_MR_CASE(CALL, 1, MR_MAX, NV_LOW, NV_HIGH)                                            \
    SKSEQ_MR_CASE(CALL, 2, MR_MAX, NV_LOW, NV_HIGH)                                            \
    SKSEQ_MR_CASE(CALL, 3, MR_MAX, NV_LOW, NV_HIGH)                                            \
    SKSEQ_MR_CASE(CALL, 4, MR_MAX, NV_LOW, NV_HIGH)                                            \
    SKSEQ_MR_CASE(CALL, 5, MR_MAX, NV_LOW, NV_HIGH)                                            \
    SKSEQ_MR_CASE(CALL, 6, MR_MAX, NV_LOW, NV_HIGH)                                            \
    SKSEQ_MR_CASE(CALL, 7, MR_MAX, NV_LOW, NV_HIGH)                                            \
    SKSEQ_MR_CASE(CALL, 8, MR_MAX, NV_LOW, NV_HIGH)                                            \
    SKSEQ_MR_CASE(CALL, 9, MR_MAX, NV_LOW, NV_HIGH)                                            \
    SKSEQ_MR_CASE(CALL, 10, MR_MAX, NV_LOW, NV_HIGH)                                           \
    SKSEQ_MR_CASE(CALL, 11, MR_MAX, NV_LOW, NV_HIGH)                                           \
    SKSEQ_MR_CASE(CALL, 12, MR_MAX, NV_LOW, NV_HIGH)

/* skseq_rows for the columns [column, column + LANES) of d, one vector of LANES
 * numbers (a half or a quarter vector) per register tile. */
#define SKSEQ_DEFINE_ROWS_PART(T, SUFFIX, LANES)                                              \
    static void skseq_rows_part_##SUFFIX(ptrdiff_t m, ptrdiff_t k, ptrdiff_t column,           \
                                         ptrdiff_t lo, ptrdiff_t hi, int accumulate,           \
                                         const T *A, ptrdiff_t sax, ptrdiff_t sap,             \
                                         const T *B, ptrdiff_t ldb, T *C, ptrdiff_t ldc) {     \
        ptrdiff_t x0, p0, p1;                                                                  \
        int mr, nv = 1;                                                                        \
        for (x0 = 0; x0 < m; x0 += mr) {                                                       \
            mr = skseq_tile_size(m - x0, SKSEQ_ROWS_MR_NARROW);                                \
            p0 = skseq_max(0, x0 - lo);                                                        \
            p1 = skseq_min(k, x0 + mr + hi);                                                   \
            const T *a = A + x0 * sax;                                                         \
            const T *b = B + column;                                                           \
            T *c = C + x0 * ldc + column;                                                      \
            SKSEQ_DISPATCH(SKSEQ_ROWS_CALL_##SUFFIX, SKSEQ_ROWS_MR_NARROW, 1, 1)                \
        }                                                                                      \
    }

#define SKSEQ_DEFINE_DRIVERS(T, SUFFIX, LANES)                                                \
    static void skseq_scores_##SUFFIX(ptrdiff_t m, ptrdiff_t n, ptrdiff_t d, ptrdiff_t lo,     \
                                      T alpha, const T *A, ptrdiff_t lda, const T *Bt,         \
                                      ptrdiff_t ldt, T *C, ptrdiff_t ldc, const T *P,          \
                                      const T *delta, T *largest, const T *shift) {            \
        ptrdiff_t x0, v0, v_end = (n + (LANES)-1) / (LANES);                                   \
        int mr, nv;                                                                            \
        for (x0 = 0; x0 < m; x0 += mr) {                                                       \
            mr = skseq_tile_size(m - x0, SKSEQ_SCORES_MR);                                     \
            for (v0 = skseq_row_start(x0 - lo) / (LANES); v0 < v_end; v0 += nv) {              \
                nv = skseq_tile_size(v_end - v0, SKSEQ_SCORES_NV);                             \
                ptrdiff_t first = x0 - lo, column = v0 * (LANES);                              \
                const T *a = A + x0 * lda;                                                     \
                const T *bt = Bt + column;                                                     \
                T *c = C + x0 * ldc + column;                                                  \
                const T *p = P == NULL ? NULL : P + x0 * ldc + column;                         \
                const T *dl = P == NULL ? NULL : delta + column;                               \
                T *top = largest == NULL ? NULL : largest + column;                            \
                const T *sh = shift == NULL ? NULL : shift + column;                           \
                /* A register tile of mr rows by nv vectors of columns. */                     \
                SKSEQ_DISPATCH(SKSEQ_SCORES_CALL_##SUFFIX, SKSEQ_SCORES_MR, 1, SKSEQ_SCORES_NV) \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
                                                                                               \
    static void skseq_rows_##SUFFIX(ptrdiff_t m, ptrdiff_t k, ptrdiff_t d, ptrdiff_t lo,       \
                                    ptrdiff_t hi, int accumulate, const T *A, ptrdiff_t sax,   \
                                    ptrdiff_t sap, const T *B, ptrdiff_t ldb, T *C,            \
                                    ptrdiff_t ldc) {                                           \
        ptrdiff_t x0, c0, p0, p1, n_vectors = d / (LANES), tile_mr;                            \
        int mr, nv;                                                                            \
        for (c0 = 0; c0 < n_vectors; c0 += nv) {                                               \
            nv = skseq_tile_size(n_vectors - c0, SKSEQ_ROWS_NV);                               \
            tile_mr = nv >= 3 ? SKSEQ_ROWS_MR_WIDE : SKSEQ_ROWS_MR_NARROW;                     \
            for (x0 = 0; x0 < m; x0 += mr) {                                                   \
                mr = skseq_tile_size(m - x0, (int)tile_mr);                                    \
                p0 = skseq_max(0, x0 - lo);                                                    \
                p1 = skseq_min(k, x0 + mr + hi);                                               \
                const T *a = A + x0 * sax;                                                     \
                const T *b = B + c0 * (LANES);                                                 \
                T *c = C + x0 * ldc + c0 * (LANES);                                            \
                /* A register tile of mr rows of C by nv vectors of d. */                      \
                /* With sax == 1 (a transposed tile) the terms of a step are at fixed     \
                 * offsets from one pointer: a tile of its own. */                             \
                if (sax == 1 && nv >= 3) {                                                     \
                    SKSEQ_DISPATCH(SKSEQ_ROWS_CALL_T_##SUFFIX, SKSEQ_ROWS_MR_WIDE, 3,          \
                                   SKSEQ_ROWS_NV)                                              \
                } else if (sax == 1) {                                                         \
                    SKSEQ_DISPATCH(SKSEQ_ROWS_CALL_T_##SUFFIX, SKSEQ_ROWS_MR_NARROW, 1, 2)      \
                } else if (nv >= 3) {                                                          \
                    SKSEQ_DISPATCH(SKSEQ_ROWS_CALL_##SUFFIX, SKSEQ_ROWS_MR_WIDE, 3,            \
                                   SKSEQ_ROWS_NV)                                              \
                } else {                                                                       \
                    SKSEQ_DISPATCH(SKSEQ_ROWS_CALL_##SUFFIX, SKSEQ_ROWS_MR_NARROW, 1, 2)        \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        /* The columns beyond whole vectors: a half vector, a quarter, then one at a     \
         * time (the same sums). */                                                            \
        ptrdiff_t column = n_vectors * (LANES);                                                \
        if (d - column >= (LANES) / 2) {                                                       \
            skseq_rows_part_##SUFFIX##2(m, k, column, lo, hi, accumulate, A, sax, sap, B, ldb,  \
                                        C, ldc);                                               \
            column += (LANES) / 2;                                                             \
        }                                                                                      \
        if ((LANES) >= 4 && d - column >= (LANES) / 4) {                                       \
            skseq_rows_part_##SUFFIX##4(m, k, column, lo, hi, accumulate, A, sax, sap, B, ldb,  \
                                        C, ldc);                                               \
            column += (LANES) / 4;                                                             \
        }                                                                                      \
        if (column < d)                                                                        \
            skseq_rows_scalar_##SUFFIX(m, k, column, d, lo, hi, accumulate, A, sax, sap, B,    \
                                       ldb, C, ldc);                                           \
    }

/* The tile calls the drivers dispatch to, one name per type (C has no
 * templates): SKSEQ_DISPATCH takes a macro of (rows, vectors). */
#define SKSEQ_SCORES_TILE(SUFFIX, MRV, NVV)                                                   \
    skseq_scores_tile_##SUFFIX(MRV, NVV, d, alpha, a, lda, bt, ldt, c, ldc, p, dl, top, sh, n, \
                               first, column)
#define SKSEQ_ROWS_TILE(SUFFIX, SAX, MRV, NVV)                                                \
    skseq_rows_tile_##SUFFIX(MRV, NVV, p0, p1, x0 - lo, x0 + 1 + hi, accumulate, a, SAX, sap, b, \
                             ldb, c, ldc)
#define SKSEQ_SCORES_CALL_f(MRV, NVV) SKSEQ_SCORES_TILE(f, MRV, NVV)
#define SKSEQ_SCORES_CALL_d(MRV, NVV) SKSEQ_SCORES_TILE(d, MRV, NVV)
#define SKSEQ_ROWS_CALL_f(MRV, NVV) SKSEQ_ROWS_TILE(f, sax, MRV, NVV)
#define SKSEQ_ROWS_CALL_d(MRV, NVV) SKSEQ_ROWS_TILE(d, sax, MRV, NVV)
/* A transposed operand: its rows are adjacent (stride 1). */
#define SKSEQ_ROWS_CALL_T_f(MRV, NVV) SKSEQ_ROWS_TILE(f, 1, MRV, NVV)
#define SKSEQ_ROWS_CALL_T_d(MRV, NVV) SKSEQ_ROWS_TILE(d, 1, MRV, NVV)
#define SKSEQ_ROWS_CALL_f2(MRV, NVV) SKSEQ_ROWS_TILE(f2, sax, MRV, NVV)
#define SKSEQ_ROWS_CALL_f4(MRV, NVV) SKSEQ_ROWS_TILE(f4, sax, MRV, NVV)
#define SKSEQ_ROWS_CALL_d2(MRV, NVV) SKSEQ_ROWS_TILE(d2, sax, MRV, NVV)
#define SKSEQ_ROWS_CALL_d4(MRV, NVV) SKSEQ_ROWS_TILE(d4, sax, MRV, NVV)
SKSEQ_DEFINE_ROWS_PART(float, f2, SKSEQ_LANES_F / 2)
SKSEQ_DEFINE_ROWS_PART(float, f4, SKSEQ_LANES_F / 4)
SKSEQ_DEFINE_ROWS_PART(double, d2, SKSEQ_LANES_D / 2)
SKSEQ_DEFINE_ROWS_PART(double, d4, SKSEQ_LANES_D / 4)

SKSEQ_DEFINE_DRIVERS(float, f, SKSEQ_LANES_F)
SKSEQ_DEFINE_DRIVERS(double, d, SKSEQ_LANES_D)

#else /* the portable build: the same sums, one at a time (not called) */

static void skseq_pack_t_f(const float *B, ptrdiff_t ldb, ptrdiff_t n, ptrdiff_t d, float *Bt,
                           ptrdiff_t ldt) {
    skseq_pack_t_scalar_f(B, ldb, n, d, Bt, ldt);
}
static void skseq_pack_t_d(const double *B, ptrdiff_t ldb, ptrdiff_t n, ptrdiff_t d, double *Bt,
                           ptrdiff_t ldt) {
    skseq_pack_t_scalar_d(B, ldb, n, d, Bt, ldt);
}

static void skseq_scores_f(ptrdiff_t m, ptrdiff_t n, ptrdiff_t d, ptrdiff_t lo, float alpha,
                           const float *A, ptrdiff_t lda, const float *Bt, ptrdiff_t ldt,
                           float *C, ptrdiff_t ldc, const float *P, const float *delta,
                           float *largest, const float *shift) {
    skseq_scores_scalar_f(m, n, d, lo, alpha, A, lda, Bt, ldt, C, ldc, P, delta, largest, shift);
}
static void skseq_scores_d(ptrdiff_t m, ptrdiff_t n, ptrdiff_t d, ptrdiff_t lo, double alpha,
                           const double *A, ptrdiff_t lda, const double *Bt, ptrdiff_t ldt,
                           double *C, ptrdiff_t ldc, const double *P, const double *delta,
                           double *largest, const double *shift) {
    skseq_scores_scalar_d(m, n, d, lo, alpha, A, lda, Bt, ldt, C, ldc, P, delta, largest, shift);
}
static void skseq_rows_f(ptrdiff_t m, ptrdiff_t k, ptrdiff_t d, ptrdiff_t lo, ptrdiff_t hi,
                         int accumulate, const float *A, ptrdiff_t sax, ptrdiff_t sap,
                         const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc) {
    skseq_rows_scalar_f(m, k, 0, d, lo, hi, accumulate, A, sax, sap, B, ldb, C, ldc);
}
static void skseq_rows_d(ptrdiff_t m, ptrdiff_t k, ptrdiff_t d, ptrdiff_t lo, ptrdiff_t hi,
                         int accumulate, const double *A, ptrdiff_t sax, ptrdiff_t sap,
                         const double *B, ptrdiff_t ldb, double *C, ptrdiff_t ldc) {
    skseq_rows_scalar_d(m, k, 0, d, lo, hi, accumulate, A, sax, sap, B, ldb, C, ldc);
}
#define SKSEQ_DEFINE_EXP_TILE_SCALAR(T, SUFFIX)                                               \
    static void skseq_exp_tile_##SUFFIX(T *S, ptrdiff_t lds, ptrdiff_t m, ptrdiff_t n,         \
                                        ptrdiff_t diag, const T *shift, T *total) {            \
        for (ptrdiff_t j = 0; j < m; j++) {                                                    \
            ptrdiff_t first = j > diag ? j - diag : 0;                                         \
            for (ptrdiff_t c = skseq_row_start(first); c < n; c++) {                           \
                T *entry = S + j * lds + c;                                                    \
                *entry = c >= first ? (T)exp((double)(*entry - shift[c])) : 0;                 \
                total[c] += *entry;                                                            \
            }                                                                                  \
        }                                                                                      \
    }
SKSEQ_DEFINE_EXP_TILE_SCALAR(float, f)
SKSEQ_DEFINE_EXP_TILE_SCALAR(double, d)

#endif

#endif /* SKSEQ_ATTENTION_TILES_H */
