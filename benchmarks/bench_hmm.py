"""skseq's HMMs against hmmlearn: time per EM iteration, score and predict.

Same data (T = 100 000 rows as 10 sequences of 10 000, D = 5), same initial
parameters, one thread, in one run.  Prints times and the ratio skseq / hmmlearn
(below 1: skseq is faster), then the n_jobs=2 speed-up of skseq's EM.

    python benchmarks/bench_hmm.py            # full run
    python benchmarks/bench_hmm.py --quick    # smaller, for a smoke test
"""

import argparse
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

from skseq import GaussianHMM

try:
    from hmmlearn.hmm import GaussianHMM as HmmlearnGaussianHMM
except ImportError:  # optional peer
    HmmlearnGaussianHMM = None


def make_data(n_sequences, length, n_features, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(6, n_features))
    labels = np.repeat(rng.integers(0, 6, size=n_sequences * length // 50), 50)
    X = centres[labels] + rng.normal(size=(labels.size, n_features))
    return X, [length] * n_sequences


def initial_parameters(X, n_components, covariance_type, seed=1):
    rng = np.random.default_rng(seed)
    n_features = X.shape[1]
    transmat = np.full((n_components, n_components), 0.1 / max(n_components - 1, 1))
    np.fill_diagonal(transmat, 0.9 if n_components > 1 else 1.0)
    means = X[rng.choice(len(X), n_components, replace=False)]
    covars = {
        "diag": np.ones((n_components, n_features)),
        "full": np.tile(np.eye(n_features), (n_components, 1, 1)),
    }[covariance_type]
    return {
        "startprob_": np.full(n_components, 1.0 / n_components),
        "transmat_": transmat,
        "means_": means,
        "covars_": covars,
    }


def best_time(function, repeats):
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times)


def build(cls, parameters, covariance_type, n_iter, **extra):
    model = cls(
        len(parameters["startprob_"]),
        covariance_type=covariance_type,
        n_iter=n_iter,
        tol=-np.inf,
        init_params="",
        **extra,
    )
    for name, value in parameters.items():
        setattr(model, name, np.copy(value))
    return model


def time_call(cls, what, parameters, covariance_type, X, lengths, repeats, n_iter=10, **extra):
    """Seconds for one EM iteration (``what="fit"``), or one score / predict call."""
    if what == "fit":

        def run():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = build(cls, parameters, covariance_type, n_iter, **extra)
                model.fit(X, lengths=lengths)

        return best_time(run, repeats) / n_iter
    model = build(cls, parameters, covariance_type, 1, **extra)
    return best_time(lambda: getattr(model, what)(X, lengths=lengths), repeats)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="T = 20 000, one repeat")
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    n_sequences, length = (10, 2_000) if arguments.quick else (10, 10_000)
    repeats = 1 if arguments.quick else arguments.repeats
    X, lengths = make_data(n_sequences, length, 5)
    print(
        f"T = {len(X)} rows as {n_sequences} sequences, D = {X.shape[1]}, one thread, "
        f"best of {repeats}"
    )
    if HmmlearnGaussianHMM is None:
        print("hmmlearn is not installed: skseq times only (pip install .[bench])")
    header = f"{'K':>3} {'cov':>5} {'what':>8} {'skseq s':>9} {'hmmlearn s':>11} {'ratio':>7}"
    print(header)
    print("-" * len(header))
    with threadpool_limits(limits=1):
        for n_components in (4, 16):
            for covariance_type in ("diag", "full"):
                parameters = initial_parameters(X, n_components, covariance_type)
                case = (parameters, covariance_type, X, lengths, repeats)
                for what in ("fit", "score", "predict"):
                    ours = time_call(GaussianHMM, what, *case)
                    theirs = float("nan")
                    if HmmlearnGaussianHMM is not None:
                        theirs = time_call(
                            HmmlearnGaussianHMM, what, *case, implementation="scaling"
                        )
                    label = "EM iter" if what == "fit" else what
                    print(
                        f"{n_components:>3} {covariance_type:>5} {label:>8} {ours:>9.4f} "
                        f"{theirs:>11.4f} {ours / theirs:>7.3f}"
                    )
    # Two threads are more exposed to noise from the rest of the machine than
    # one: best of at least five fits.  The 10-iteration fits include the
    # start of the pool's thread (on a virtual machine its idle CPU takes a
    # few iterations to run at full speed); 40 iterations show the steady state.
    print()
    for n_components, covariance_type in ((16, "full"), (4, "diag")):
        parameters = initial_parameters(X, n_components, covariance_type)
        case = (parameters, covariance_type, X, lengths, max(repeats, 5))
        for n_iter in (10, 40):
            with threadpool_limits(limits=1):
                one = time_call(GaussianHMM, "fit", *case, n_iter=n_iter, n_jobs=1)
                two = time_call(GaussianHMM, "fit", *case, n_iter=n_iter, n_jobs=2)
            print(
                f"skseq EM iteration, K = {n_components} {covariance_type}, "
                f"{n_iter}-iteration fit, BLAS one thread: n_jobs=1 {one:.4f} s, "
                f"n_jobs=2 {two:.4f} s, speed-up {one / two:.2f}x"
            )


if __name__ == "__main__":
    main()
