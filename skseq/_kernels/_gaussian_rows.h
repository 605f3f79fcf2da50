/* Quadratic forms of the Gaussian densities over a block of rows (_gaussian.pyx).
 *
 * The block is laid out feature by feature: column d holds feature d of
 * every row, ``stride`` apart.  For one component:
 *
 * skseq_diag_quadratic: quadratic[r] = sum_d precision[d] (x_rd - mean[d])^2;
 * skseq_whitened_quadratic: quadratic[r] = |W (x_r - mean)|^2 with W lower
 * triangular (row-major D x D), given centred[d * stride + r] = x_rd - mean[d].
 * (_gaussian.pyx passes half the precisions and W / sqrt(2): half the form.)
 *
 * With AVX2 and FMA (the _avx2 builds) eight rows at a time stay in vector
 * registers for the whole sum; otherwise portable loops over the rows that
 * compilers vectorise.
 */
#ifndef SKSEQ_GAUSSIAN_ROWS_H
#define SKSEQ_GAUSSIAN_ROWS_H

#include <stddef.h>

static inline void skseq_diag_quadratic_rows(const double *columns, ptrdiff_t stride,
                                             ptrdiff_t first, ptrdiff_t rows,
                                             const double *mean, const double *precision,
                                             ptrdiff_t n_features, double *quadratic) {
    ptrdiff_t r, d;
    for (r = first; r < rows; r++) quadratic[r] = 0.0;
    for (d = 0; d < n_features; d++) {
        const double *column = columns + d * stride;
        double m = mean[d], p = precision[d];
        for (r = first; r < rows; r++) {
            double difference = column[r] - m;
            quadratic[r] += p * difference * difference;
        }
    }
}

static inline void skseq_whitened_quadratic_rows(const double *centred, ptrdiff_t stride,
                                                 ptrdiff_t first, ptrdiff_t rows,
                                                 const double *whitening, ptrdiff_t n_features,
                                                 double *quadratic) {
    ptrdiff_t r, i, j;
    for (r = first; r < rows; r++) quadratic[r] = 0.0;
    for (i = 0; i < n_features; i++) {
        const double *w = whitening + i * n_features;
        for (r = first; r < rows; r++) {
            double whitened = 0.0;
            for (j = 0; j <= i; j++) whitened += w[j] * centred[j * stride + r];
            quadratic[r] += whitened * whitened;
        }
    }
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

static inline void skseq_diag_quadratic(const double *columns, ptrdiff_t stride,
                                        ptrdiff_t rows, const double *mean,
                                        const double *precision, ptrdiff_t n_features,
                                        double *quadratic) {
    ptrdiff_t r, d;
    for (r = 0; r + 8 <= rows; r += 8) {
        __m256d q0 = _mm256_setzero_pd(), q1 = _mm256_setzero_pd();
        for (d = 0; d < n_features; d++) {
            const double *column = columns + d * stride + r;
            __m256d m = _mm256_broadcast_sd(mean + d), p = _mm256_broadcast_sd(precision + d);
            __m256d x0 = _mm256_sub_pd(_mm256_loadu_pd(column), m);
            __m256d x1 = _mm256_sub_pd(_mm256_loadu_pd(column + 4), m);
            q0 = _mm256_fmadd_pd(_mm256_mul_pd(p, x0), x0, q0);
            q1 = _mm256_fmadd_pd(_mm256_mul_pd(p, x1), x1, q1);
        }
        _mm256_storeu_pd(quadratic + r, q0);
        _mm256_storeu_pd(quadratic + r + 4, q1);
    }
    skseq_diag_quadratic_rows(columns, stride, r, rows, mean, precision, n_features, quadratic);
}

static inline void skseq_whitened_quadratic(const double *centred, ptrdiff_t stride,
                                            ptrdiff_t rows, const double *whitening,
                                            ptrdiff_t n_features, double *quadratic) {
    ptrdiff_t r, i, j;
    for (r = 0; r + 8 <= rows; r += 8) {
        __m256d q0 = _mm256_setzero_pd(), q1 = _mm256_setzero_pd();
        for (i = 0; i < n_features; i++) {
            const double *w = whitening + i * n_features;
            __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
            for (j = 0; j <= i; j++) {
                __m256d weight = _mm256_broadcast_sd(w + j);
                const double *column = centred + j * stride + r;
                a0 = _mm256_fmadd_pd(weight, _mm256_loadu_pd(column), a0);
                a1 = _mm256_fmadd_pd(weight, _mm256_loadu_pd(column + 4), a1);
            }
            q0 = _mm256_fmadd_pd(a0, a0, q0);
            q1 = _mm256_fmadd_pd(a1, a1, q1);
        }
        _mm256_storeu_pd(quadratic + r, q0);
        _mm256_storeu_pd(quadratic + r + 4, q1);
    }
    skseq_whitened_quadratic_rows(centred, stride, r, rows, whitening, n_features, quadratic);
}

#else /* portable */

static inline void skseq_diag_quadratic(const double *columns, ptrdiff_t stride,
                                        ptrdiff_t rows, const double *mean,
                                        const double *precision, ptrdiff_t n_features,
                                        double *quadratic) {
    skseq_diag_quadratic_rows(columns, stride, 0, rows, mean, precision, n_features, quadratic);
}

/* Feature pairs innermost over the rows: (i + 1) vectorised passes per i. */
static inline void skseq_whitened_quadratic(const double *centred, ptrdiff_t stride,
                                            ptrdiff_t rows, const double *whitening,
                                            ptrdiff_t n_features, double *quadratic) {
    ptrdiff_t r, i, j;
    double whitened[256];
    if (rows > 256) {
        skseq_whitened_quadratic_rows(centred, stride, 0, rows, whitening, n_features, quadratic);
        return;
    }
    for (r = 0; r < rows; r++) quadratic[r] = 0.0;
    for (i = 0; i < n_features; i++) {
        const double *w = whitening + i * n_features;
        for (r = 0; r < rows; r++) whitened[r] = 0.0;
        for (j = 0; j <= i; j++) {
            const double *column = centred + j * stride;
            double weight = w[j];
            for (r = 0; r < rows; r++) whitened[r] += weight * column[r];
        }
        for (r = 0; r < rows; r++) quadratic[r] += whitened[r] * whitened[r];
    }
}

#endif
#endif /* SKSEQ_GAUSSIAN_ROWS_H */
