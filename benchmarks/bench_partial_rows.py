"""The cost of partially observed rows in GaussianHMM's EM and score.

Complete rows go through the Cython kernels; partially observed rows (some
entries NaN) through numpy, grouped by missingness pattern.  This measures
rows per second of an EM iteration and of ``score`` with no NaN, with 10 % of
the rows missing throughout (kernel path) and with 10 % of the rows missing
one entry (the partial-row path), on T = 100 000 rows as 10 sequences, D = 5,
K = 4, one thread; the best of ``--repeats`` runs.

    python benchmarks/bench_partial_rows.py            # full run
    python benchmarks/bench_partial_rows.py --quick    # smaller, for a smoke test
    python benchmarks/bench_partial_rows.py --complete-only  # to compare two checkouts
"""

import argparse
import warnings
from functools import partial

import numpy as np
from bench_hmm import best_time
from threadpoolctl import threadpool_limits

from skseq import GaussianHMM


def make_data(n_rows, n_features, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(4, n_features))
    labels = np.repeat(rng.integers(0, 4, size=n_rows // 50), 50)
    return centres[labels] + rng.normal(size=(labels.size, n_features))


def with_missing(X, fraction, whole_rows, seed=1):
    rng = np.random.default_rng(seed)
    X = X.copy()
    rows = rng.choice(len(X), int(fraction * len(X)), replace=False)
    if whole_rows:
        X[rows] = np.nan
    else:
        X[rows, rng.integers(0, X.shape[1], rows.size)] = np.nan
    return X


def model_for(X, covariance_type, n_iter):
    model = GaussianHMM(4, covariance_type=covariance_type, n_iter=n_iter, tol=0, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X[~np.isnan(X).any(axis=1)][:20000], lengths=None)
    model.set_params(init_params="")
    return model


def fit_from(reference, data, lengths, n_iter):
    """``n_iter`` EM iterations on ``data`` from the parameters of ``reference``."""
    model = GaussianHMM(
        4, covariance_type=reference.covariance_type, n_iter=n_iter, tol=0, init_params=""
    )
    model.startprob_ = reference.startprob_
    model.transmat_ = reference.transmat_
    model.means_ = reference.means_
    model.covars_ = reference._covars_
    return model.fit(data, lengths=lengths)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--complete-only", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n_rows = 20_000 if args.quick else 100_000
    n_iter = 3
    lengths = [n_rows // 10] * 10
    X = make_data(n_rows, 5)
    cases = {"no NaN": X}
    if not args.complete_only:
        cases["10% rows missing"] = with_missing(X, 0.1, whole_rows=True)
        cases["10% rows partial"] = with_missing(X, 0.1, whole_rows=False)
    print(f"T={n_rows}, D=5, K=4, one thread; rows/s (best of {args.repeats})")
    print(f"{'covariance':<10} {'data':<18} {'EM rows/s':>12} {'score rows/s':>13}")
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for covariance_type in ("diag", "full"):
            reference = model_for(X, covariance_type, n_iter)
            for name, data in cases.items():
                em = best_time(partial(fit_from, reference, data, lengths, n_iter), args.repeats)
                score = best_time(partial(reference.score, data, lengths=lengths), args.repeats)
                em_rate, score_rate = n_rows * n_iter / em, n_rows / score
                print(f"{covariance_type:<10} {name:<18} {em_rate:>12,.0f} {score_rate:>13,.0f}")


if __name__ == "__main__":
    main()
