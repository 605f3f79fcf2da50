"""AutoregressiveHMM's EM iteration against GaussianHMM's of the same size.

Same data (T rows as 10 sequences, D features), K in {2, 4, 8}, one thread,
fixed initial parameters, in one run.  The time of one EM iteration is
(fit with n_iter = 1 + N minus fit with n_iter = 1) / N.  Prints both times,
the ratio AR / Gaussian (the AR-HMM does a weighted least squares per state
on D * n_lags + 1 regressors), the time of the AR E step's statistics by
per-state weighted Gram matrices R^T (gamma_k R) (BLAS gemm, what the model
does) against the same Gram as A^T A of the sqrt(gamma_k)-scaled rows (numpy
hands it to syrk) and against the per-row feature sums of the generic path
(``BaseHMM._emission_statistics``), and the load average.

    python benchmarks/bench_autoregressive.py            # full run
    python benchmarks/bench_autoregressive.py --quick    # smaller, for a smoke test
"""

import argparse
import os
import warnings

import numpy as np
from bench_hmm import best_time
from threadpoolctl import threadpool_limits

from skseq import AutoregressiveHMM, GaussianHMM
from skseq.hmm import BaseHMM


def make_data(n_rows, n_features, seed=0):
    rng = np.random.default_rng(seed)
    X = np.zeros((n_rows, n_features))
    regime = np.repeat(rng.integers(0, 3, size=n_rows // 100 + 1), 100)[:n_rows]
    phi = np.array([0.8, -0.5, 0.2])
    for t in range(1, n_rows):
        X[t] = phi[regime[t]] * X[t - 1] + rng.normal(size=n_features)
    return X


def per_iteration(make, X, lengths, n_iter, repeats):
    def fit(n):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            make(n).fit(X, lengths=lengths)

    return (best_time(lambda: fit(1 + n_iter), repeats) - best_time(lambda: fit(1), repeats)) / (
        n_iter
    )


def sqrt_weighted_grams(model, design, posteriors):
    """The statistics' Gram matrices as A_k^T A_k, A_k = sqrt(gamma_k) [z, x]."""
    x, regressors = model._split_design(design)
    rows = np.column_stack([regressors, x])
    roots = np.sqrt(posteriors)
    grams = []
    for k in range(posteriors.shape[1]):
        scaled = rows * roots[:, k : k + 1]
        grams.append(scaled.T @ scaled)
    return grams


def initial(K, D, rng):
    transmat = np.full((K, K), 0.1 / (K - 1))
    np.fill_diagonal(transmat, 0.9)
    return {
        "startprob_init": np.full(K, 1.0 / K),
        "transmat_init": transmat,
        "covars_init": np.tile(np.eye(D), (K, 1, 1)),
        "means": rng.normal(size=(K, D)),
    }


def one_size(K, X, lengths, n_lags, n_iter, repeats):
    """Times of one K: EM iteration of both models, then the AR statistics three ways."""
    n_features = X.shape[1]
    rng = np.random.default_rng(K)
    start = initial(K, n_features, rng)
    common = dict(
        startprob_init=start["startprob_init"],
        transmat_init=start["transmat_init"],
        covars_init=start["covars_init"],
        init_params="",
        tol=-np.inf,
    )

    def gaussian(n):
        return GaussianHMM(K, covariance_type="full", means_init=start["means"], n_iter=n, **common)

    def autoregressive(n):
        return AutoregressiveHMM(
            K,
            n_lags=n_lags,
            intercepts_init=start["means"],
            coefs_init=np.zeros((K, n_features, n_lags * n_features)),
            n_iter=n,
            **common,
        )

    t_gaussian = per_iteration(gaussian, X, lengths, n_iter, repeats)
    t_ar = per_iteration(autoregressive, X, lengths, n_iter, repeats)
    model = autoregressive(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X, lengths=lengths)
    with model._given_controls(None):
        design, _ = model._prepare(X, None, lengths, None, reset=False)
    posteriors = rng.dirichlet(np.ones(K), size=design.shape[0])
    t_gram = best_time(lambda: model._emission_statistics(design, posteriors, None), 3)
    t_sqrt = best_time(lambda: sqrt_weighted_grams(model, design, posteriors), 3)
    t_features = best_time(lambda: BaseHMM._emission_statistics(model, design, posteriors, None), 3)
    return t_gaussian, t_ar, t_gram, t_sqrt, t_features


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n_rows, n_features, n_lags = (5_000, 3, 1) if args.quick else (50_000, 3, 1)
    n_iter, repeats = (3, 1) if args.quick else (5, 3)
    X = make_data(n_rows, n_features)
    lengths = [n_rows // 10] * 10
    print(f"T={n_rows} (10 sequences), D={n_features}, n_lags={n_lags}, full covariances")
    print(f"{'K':>3} {'Gaussian s/iter':>16} {'AR s/iter':>10} {'AR/Gauss':>9}", end="")
    print(f" {'stats: Gram s':>14} {'sqrt-w s':>9} {'features s':>11} {'feat/Gram':>9}")
    with threadpool_limits(1):
        for K in (2, 4, 8):
            t_gaussian, t_ar, t_gram, t_sqrt, t_features = one_size(
                K, X, lengths, n_lags, n_iter, repeats
            )
            print(
                f"{K:>3} {t_gaussian:>16.4f} {t_ar:>10.4f} {t_ar / t_gaussian:>9.2f}"
                f" {t_gram:>14.4f} {t_sqrt:>9.4f} {t_features:>11.4f}"
                f" {t_features / t_gram:>9.1f}"
            )
    print("load average (1, 5, 15 min):", ", ".join(f"{v:.2f}" for v in os.getloadavg()))


if __name__ == "__main__":
    main()
