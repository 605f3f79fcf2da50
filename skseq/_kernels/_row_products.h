/* The K x K products of the HMM kernels' row recursions (_hmm.pyx).
 *
 * skseq_vector_matrix: out[j] = factors[j] * sum_i vector[i] * matrix[i * n + j];
 * returns sum_j out[j] (forward and backward recursions).
 * skseq_viterbi_step: next[j] = max_i previous[i] + log_trans[i, j] + log_frame[j]
 * and the lowest i attaining the maximum (Viterbi).
 *
 * The recursions are chains of these products, one per row, so their
 * latency is the cost of a row.  With AVX2 and FMA (the _avx2 builds) they
 * are explicit 4-wide vectors; otherwise portable C that compilers vectorise
 * where they can.
 */
#ifndef SKSEQ_ROW_PRODUCTS_H
#define SKSEQ_ROW_PRODUCTS_H

#include <stddef.h>

/* skseq_vector_matrix for the columns from ``first`` on, one at a time
 * (the columns left over by the chunks below); returns their sum. */
static inline double skseq_vector_matrix_columns(const double *vector, const double *matrix,
                                                 const double *factors, ptrdiff_t n,
                                                 ptrdiff_t first, double *out) {
    ptrdiff_t i, j;
    double total = 0.0;
    for (j = first; j < n; j++) {
        double a = 0.0, b = 0.0;
        for (i = 0; i + 2 <= n; i += 2) {
            a += vector[i] * matrix[i * n + j];
            b += vector[i + 1] * matrix[(i + 1) * n + j];
        }
        if (i < n) a += vector[i] * matrix[i * n + j];
        out[j] = (a + b) * factors[j];
        total += out[j];
    }
    return total;
}

/* skseq_viterbi_step for the columns from ``first`` on, one at a time, over
 * the transposed matrix (contiguous in i).  Below 8 states this beats the
 * vector version: its branches are well predicted (the best predecessor of
 * a state rarely changes from row to row). */
static inline void skseq_viterbi_columns(const double *previous, const double *log_trans_t,
                                         const double *log_frame, ptrdiff_t n, ptrdiff_t first,
                                         double *next, int *best_from) {
    ptrdiff_t i, j;
    for (j = first; j < n; j++) {
        const double *column = log_trans_t + j * n;
        double best = previous[0] + column[0];
        int best_state = 0;
        for (i = 1; i < n; i++) {
            double value = previous[i] + column[i];
            if (value > best) {
                best = value;
                best_state = (int)i;
            }
        }
        next[j] = best + log_frame[j];
        best_from[j] = best_state;
    }
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

static inline double skseq_sum4(__m256d x) {
    __m128d pair = _mm_add_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));
    return _mm_cvtsd_f64(_mm_add_sd(pair, _mm_unpackhi_pd(pair, pair)));
}

#define SKSEQ_CHUNK(WIDTH)                                                              \
    {                                                                                    \
        __m256d even[WIDTH / 4], odd[WIDTH / 4];                                         \
        ptrdiff_t c, i;                                                                  \
        for (c = 0; c < WIDTH / 4; c++) {                                                \
            even[c] = _mm256_setzero_pd();                                               \
            odd[c] = _mm256_setzero_pd();                                                \
        }                                                                                \
        for (i = 0; i + 2 <= n; i += 2) {                                                \
            const double *row = matrix + i * n + j;                                      \
            __m256d v = _mm256_broadcast_sd(vector + i);                                 \
            __m256d w = _mm256_broadcast_sd(vector + i + 1);                             \
            for (c = 0; c < WIDTH / 4; c++) {                                            \
                even[c] = _mm256_fmadd_pd(v, _mm256_loadu_pd(row + 4 * c), even[c]);     \
                odd[c] = _mm256_fmadd_pd(w, _mm256_loadu_pd(row + n + 4 * c), odd[c]);   \
            }                                                                            \
        }                                                                                \
        if (i < n) {                                                                     \
            const double *row = matrix + i * n + j;                                      \
            __m256d v = _mm256_broadcast_sd(vector + i);                                 \
            for (c = 0; c < WIDTH / 4; c++)                                              \
                even[c] = _mm256_fmadd_pd(v, _mm256_loadu_pd(row + 4 * c), even[c]);     \
        }                                                                                \
        for (c = 0; c < WIDTH / 4; c++) {                                                \
            __m256d value = _mm256_mul_pd(_mm256_add_pd(even[c], odd[c]),                \
                                          _mm256_loadu_pd(factors + j + 4 * c));         \
            _mm256_storeu_pd(out + j + 4 * c, value);                                    \
            sums = _mm256_add_pd(sums, value);                                           \
        }                                                                                \
        j += WIDTH;                                                                      \
    }

static inline double skseq_vector_matrix(const double *vector, const double *matrix,
                                         const double *factors, ptrdiff_t n, double *out) {
    ptrdiff_t j = 0;
    double total;
    __m256d sums = _mm256_setzero_pd();
    while (j + 16 <= n) SKSEQ_CHUNK(16)
    if (j + 8 <= n) SKSEQ_CHUNK(8)
    if (j + 4 <= n) SKSEQ_CHUNK(4)
    total = skseq_sum4(sums);
    return total + skseq_vector_matrix_columns(vector, matrix, factors, n, j, out);
}

/* From 8 states, columns four at a time: a compare and a select per i keep
 * the running maximum and its index in registers; the strict comparison over
 * increasing i keeps the lowest index on ties. */
static inline void skseq_viterbi_step(const double *previous, const double *log_trans,
                                      const double *log_trans_t, const double *log_frame,
                                      ptrdiff_t n, double *next, int *best_from) {
    ptrdiff_t i, j = 0;
    if (n >= 8) {
        for (; j + 4 <= n; j += 4) {
            __m256d running = _mm256_add_pd(_mm256_broadcast_sd(previous),
                                            _mm256_loadu_pd(log_trans + j));
            __m256d from = _mm256_setzero_pd();
            for (i = 1; i < n; i++) {
                __m256d value = _mm256_add_pd(_mm256_broadcast_sd(previous + i),
                                              _mm256_loadu_pd(log_trans + i * n + j));
                __m256d greater = _mm256_cmp_pd(value, running, _CMP_GT_OQ);
                running = _mm256_blendv_pd(running, value, greater);
                from = _mm256_blendv_pd(from, _mm256_set1_pd((double)i), greater);
            }
            _mm256_storeu_pd(next + j, _mm256_add_pd(running, _mm256_loadu_pd(log_frame + j)));
            _mm_storeu_si128((__m128i *)(best_from + j), _mm256_cvtpd_epi32(from));
        }
    }
    skseq_viterbi_columns(previous, log_trans_t, log_frame, n, j, next, best_from);
}

#undef SKSEQ_CHUNK

#else /* portable */


static inline double skseq_vector_matrix(const double *vector, const double *matrix,
                                         const double *factors, ptrdiff_t n, double *out) {
    ptrdiff_t i, j = 0;
    double total = 0.0;
    for (; j + 4 <= n; j += 4) {
        double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
        double b0 = 0.0, b1 = 0.0, b2 = 0.0, b3 = 0.0;
        for (i = 0; i + 2 <= n; i += 2) {
            const double *row = matrix + i * n + j;
            double v = vector[i], w = vector[i + 1];
            a0 += v * row[0];
            a1 += v * row[1];
            a2 += v * row[2];
            a3 += v * row[3];
            b0 += w * row[n];
            b1 += w * row[n + 1];
            b2 += w * row[n + 2];
            b3 += w * row[n + 3];
        }
        if (i < n) {
            const double *row = matrix + i * n + j;
            double v = vector[i];
            a0 += v * row[0];
            a1 += v * row[1];
            a2 += v * row[2];
            a3 += v * row[3];
        }
        a0 = (a0 + b0) * factors[j];
        a1 = (a1 + b1) * factors[j + 1];
        a2 = (a2 + b2) * factors[j + 2];
        a3 = (a3 + b3) * factors[j + 3];
        out[j] = a0;
        out[j + 1] = a1;
        out[j + 2] = a2;
        out[j + 3] = a3;
        total += (a0 + a1) + (a2 + a3);
    }
    return total + skseq_vector_matrix_columns(vector, matrix, factors, n, j, out);
}

static inline void skseq_viterbi_step(const double *previous, const double *log_trans,
                                      const double *log_trans_t, const double *log_frame,
                                      ptrdiff_t n, double *next, int *best_from) {
    (void)log_trans;
    skseq_viterbi_columns(previous, log_trans_t, log_frame, n, 0, next, best_from);
}

#endif
#endif /* SKSEQ_ROW_PRODUCTS_H */
