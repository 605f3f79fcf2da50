"""skseq's HMMs against hmmlearn: time per EM iteration, score and predict.

Same data (T = 100 000 rows as 10 sequences of 10 000, D = 5), same initial
parameters, one thread, in one run.  Prints times and the ratio skseq / hmmlearn
(below 1: skseq is faster), then the n_jobs=2 speed-up of skseq's EM.

    python benchmarks/bench_hmm.py            # full run
    python benchmarks/bench_hmm.py --quick    # smaller, for a smoke test
"""

import argparse
import os
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
    # Two threads are more exposed to the rest of the machine than one (and, on a
    # virtual machine, to the hypervisor's use of the second CPU: its "steal" time,
    # printed below): fits of 2 and 12 iterations, n_jobs=1 and 2 interleaved,
    # best of at least seven each.  Their difference is the steady cost of an
    # iteration; what is left is the fit's fixed cost (validation, the data's
    # checks, the pool's start), which runs in one thread.
    print()
    for n_components, covariance_type in ((16, "full"), (4, "diag")):
        parameters = initial_parameters(X, n_components, covariance_type)
        steal_before = steal_seconds()
        best = {}
        with threadpool_limits(limits=1):
            for _ in range(max(repeats, 7)):
                for n_iter in (2, 12):
                    for n_jobs in (1, 2):
                        seconds = (
                            time_call(
                                GaussianHMM,
                                "fit",
                                parameters,
                                covariance_type,
                                X,
                                lengths,
                                1,
                                n_iter=n_iter,
                                n_jobs=n_jobs,
                            )
                            * n_iter
                        )
                        key = (n_iter, n_jobs)
                        best[key] = min(best.get(key, np.inf), seconds)
        stolen = steal_seconds() - steal_before
        iteration = {n: (best[12, n] - best[2, n]) / 10 for n in (1, 2)}
        fixed = {n: best[2, n] - 2 * iteration[n] for n in (1, 2)}
        ten = {n: fixed[n] + 10 * iteration[n] for n in (1, 2)}
        print(
            f"skseq EM, K = {n_components} {covariance_type}, BLAS one thread: an iteration "
            f"{iteration[1] * 1e3:.1f} ms (n_jobs=1) / {iteration[2] * 1e3:.1f} ms (n_jobs=2), "
            f"speed-up {iteration[1] / iteration[2]:.2f}x; fixed cost of a fit "
            f"{fixed[1] * 1e3:.1f} / {fixed[2] * 1e3:.1f} ms; a 10-iteration fit "
            f"{ten[1] / ten[2]:.2f}x (steal time of the hypervisor meanwhile: {stolen:.2f} s)"
        )


def steal_seconds():
    """CPU time the hypervisor took from this virtual machine so far (Linux), else NaN."""
    try:
        with open("/proc/stat") as handle:
            fields = handle.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


if __name__ == "__main__":
    main()
