"""Variational Bayes HMMs against hmmlearn's, and stochastic variational inference on a stream.

Part ``vb``: VB EM time per iteration of skseq's VariationalGaussianHMM (every
covariance type) and VariationalCategoricalHMM against hmmlearn's, side by
side in one run, from the same initial posteriors on the same data (10
sequences of 2 000 rows, 4 states, 3 features or 6 symbols); the best of
``--repeats`` runs of ``--iterations`` iterations each, and hmmlearn's time
over skseq's.  The bounds of the two runs are compared too (they must agree,
up to hmmlearn's missing constant).

Part ``svi``: one sequence of ``--rows`` rows (default 10^6) of a 3-state
2-D Gaussian HMM, fed to ``partial_fit`` in chunks of 1 000: rows per second
of SVI (VariationalGaussianHMM) and of stochastic EM (GaussianHMM) side by
side, the resident memory while streaming (it must stay flat), and SVI's
final bound per row against batch VB's on the same rows (goal: within
0.5 %); hmmlearn's time for one VB iteration over the same rows.

Load averages (``os.getloadavg()``) are printed beside the figures.

    python benchmarks/bench_vb.py                 # both parts
    python benchmarks/bench_vb.py --part vb --repeats 5
    python benchmarks/bench_vb.py --part svi --rows 1e5
"""

import argparse
import os
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from skseq import GaussianHMM, VariationalCategoricalHMM, VariationalGaussianHMM

CHUNK = 1_000


def load():
    return "load average " + ", ".join(f"{value:.2f}" for value in os.getloadavg())


def resident_mib():
    """The current resident set size of this process, MiB (Linux)."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def posteriors_of(model, groups):
    return {
        f"{group}_{kind}_": np.copy(getattr(model, f"{group}_{kind}_"))
        for group in groups
        for kind in ("prior", "posterior")
    }


def set_posteriors(model, posteriors):
    for name, value in posteriors.items():
        setattr(model, name, float(value) if np.ndim(value) == 0 else np.copy(value))
    return model


def best_time(fit, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fit()
        times.append(time.perf_counter() - start)
    return min(times)


def compare(label, ours, theirs, data, lengths, posteriors, constant, args):
    """Time ``ours()`` and ``theirs()`` (unfitted models) from ``posteriors`` on ``data``."""
    fitted = {}

    def fit(name, make, *arguments, **keywords):
        fitted[name] = set_posteriors(make(), posteriors).fit(data, *arguments, **keywords)

    our_time = best_time(lambda: fit("ours", ours, lengths=lengths), args.repeats)
    their_time = best_time(lambda: fit("theirs", theirs, lengths), args.repeats)
    difference = np.max(
        np.abs(
            np.array(fitted["ours"].monitor_.history)
            + constant
            - np.array(fitted["theirs"].monitor_.history)
        )
    )
    our_time, their_time = our_time / args.iterations, their_time / args.iterations
    print(
        f"{label:<20} {1e3 * our_time:>14.2f} {1e3 * their_time:>17.2f} "
        f"{their_time / our_time:>6.1f}x {difference:>11.2e}"
    )


def vb_part(args):
    from hmmlearn import vhmm

    rng = np.random.default_rng(0)
    lengths = [2_000] * 10
    n_rows = sum(lengths)
    centres = rng.normal(0, 3, (4, 3))
    X = centres[rng.integers(0, 4, n_rows)] + rng.normal(size=(n_rows, 3))
    symbols = rng.integers(0, 6, (n_rows, 1))
    common = dict(n_iter=args.iterations, tol=-np.inf, init_params="")
    print(
        f"VB EM, {n_rows} rows in 10 sequences, 4 states, {args.iterations} iterations, "
        f"best of {args.repeats}; {load()}"
    )
    print(
        f"{'model':<20} {'skseq ms/iter':>14} {'hmmlearn ms/iter':>17} {'ratio':>7} "
        f"{'bound diff':>11}"
    )
    groups = ("startprob", "transmat", "means", "beta", "dof", "scale")
    for covariance_type in ("spherical", "diag", "full", "tied"):
        start = VariationalGaussianHMM(
            4, covariance_type=covariance_type, random_state=0, n_iter=1, tol=-np.inf
        ).fit(X, lengths=lengths)

        def theirs(covariance_type=covariance_type, covars=start._covars_):
            model = vhmm.VariationalGaussianHMM(4, covariance_type=covariance_type, **common)
            model.n_features = 3
            model.covars_ = covars
            return model

        compare(
            f"gaussian {covariance_type}",
            lambda covariance_type=covariance_type: VariationalGaussianHMM(
                4, covariance_type=covariance_type, **common
            ),
            theirs,
            X,
            lengths,
            posteriors_of(start, groups),
            X.size / 2 * np.log(2 * np.pi),  # hmmlearn's bound leaves it out
            args,
        )
    start = VariationalCategoricalHMM(4, random_state=0, n_iter=1, tol=-np.inf).fit(
        symbols, lengths=lengths
    )

    def theirs():
        model = vhmm.VariationalCategoricalHMM(4, **common)
        model.n_features = 6
        return model

    compare(
        "categorical",
        lambda: VariationalCategoricalHMM(4, **common),
        theirs,
        symbols,
        lengths,
        posteriors_of(start, ("startprob", "transmat", "emissionprob")),
        0.0,
        args,
    )
    print(load())


def true_model():
    model = GaussianHMM(3, covariance_type="diag", init_params="")
    model.startprob_ = np.full(3, 1 / 3)
    model.transmat_ = [[0.95, 0.03, 0.02], [0.02, 0.95, 0.03], [0.03, 0.02, 0.95]]
    model.means_ = [[-2.0, 0.0], [0.0, 2.0], [2.0, 0.0]]
    model.covars_ = [[1.0, 1.0], [1.0, 1.0], [0.5, 0.5]]
    return model


def svi_part(args):
    n_rows = int(args.rows)
    X = true_model().sample(n_rows, random_state=0)[0]
    print(f"Streams of {n_rows} rows of one sequence in chunks of {CHUNK}; {load()}")
    results = {}
    for label, model in (
        (
            "SVI (VariationalGaussianHMM)",
            VariationalGaussianHMM(
                3,
                covariance_type="diag",
                random_state=0,
                learning_offset=10.0,
                total_samples=n_rows,
            ),
        ),
        (
            "stochastic EM (GaussianHMM)",
            GaussianHMM(
                3,
                covariance_type="diag",
                random_state=0,
                learning_offset=10.0,
                total_samples=n_rows,
            ),
        ),
    ):
        resident = []
        start = time.perf_counter()
        for first in range(0, n_rows, CHUNK):
            model.partial_fit(X[first : first + CHUNK])
            if first % (n_rows // 10) == 0:
                resident.append(resident_mib())
        elapsed = time.perf_counter() - start
        results[label] = model
        print(
            f"{label:<30} {n_rows / elapsed:>10.0f} rows/s; resident MiB at each tenth: "
            + " ".join(f"{value:.0f}" for value in resident)
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        start = time.perf_counter()
        batch = VariationalGaussianHMM(3, covariance_type="diag", random_state=0, tol=1e-3).fit(X)
        batch_time = time.perf_counter() - start
    stream = results["SVI (VariationalGaussianHMM)"]
    batch_bound, stream_bound = batch.elbo(X) / n_rows, stream.elbo(X) / n_rows
    print(
        f"bound per row: batch VB {batch_bound:.5f} ({batch.n_iter_} iterations, "
        f"{batch_time / batch.n_iter_:.3f} s each), SVI {stream_bound:.5f}: "
        f"{100 * abs(stream_bound - batch_bound) / abs(batch_bound):.3f} % apart (goal < 0.5 %)"
    )
    if args.hmmlearn_pass:
        from hmmlearn import vhmm

        theirs = vhmm.VariationalGaussianHMM(
            3, covariance_type="diag", n_iter=1, tol=-np.inf, init_params=""
        )
        theirs.n_features = 2
        set_posteriors(
            theirs,
            posteriors_of(batch, ("startprob", "transmat", "means", "beta", "dof", "scale")),
        )
        theirs.covars_ = batch._covars_
        start = time.perf_counter()
        theirs.fit(X)
        their_time = time.perf_counter() - start
        print(
            f"hmmlearn: one VB iteration over the {n_rows} rows {their_time:.3f} s; skseq's "
            f"batch VB {batch_time / batch.n_iter_:.3f} s "
            f"({their_time / (batch_time / batch.n_iter_):.1f}x)"
        )
    print(load())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("vb", "svi", "both"), default="both")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rows", type=float, default=1e6)
    parser.add_argument("--no-hmmlearn-pass", dest="hmmlearn_pass", action="store_false")
    args = parser.parse_args()
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if args.part in ("vb", "both"):
            vb_part(args)
        if args.part in ("svi", "both"):
            svi_part(args)


if __name__ == "__main__":
    main()
