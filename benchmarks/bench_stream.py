"""Stochastic EM on one long stream: throughput, memory, accuracy against batch EM.

A 3-state 2-D GaussianHMM generates one sequence, fed to ``partial_fit`` in
chunks of 1 000 rows that are drawn on the fly (the stream is never held in
memory while learning).  Prints rows per second, the peak RSS growth while
streaming (goal < 50 MiB), the final per-sample log-likelihood against batch
EM on the same rows (goal: within 0.5 %), and the held-out log-likelihood
against rows seen for several learning decays kappa.

    python benchmarks/bench_stream.py             # 10^6 rows
    python benchmarks/bench_stream.py --rows 1e7  # 10^7 rows
"""

import argparse
import resource
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from skseq import GaussianHMM

CHUNK = 1_000


def true_model():
    model = GaussianHMM(
        3,
        covariance_type="full",
        startprob_init=[0.5, 0.3, 0.2],
        transmat_init=[[0.95, 0.03, 0.02], [0.04, 0.92, 0.04], [0.03, 0.03, 0.94]],
        means_init=[[0.0, 0.0], [3.0, 3.0], [-3.0, 3.0]],
        covars_init=[np.eye(2), [[1.0, 0.4], [0.4, 1.0]], [[1.5, -0.3], [-0.3, 0.8]]],
        n_iter=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(np.zeros((3, 2)))


def chunks(truth, n_rows, seed):
    """The stream, chunk by chunk: each chunk continues the chain of the last."""
    rng = np.random.RandomState(seed)
    state = None
    for _ in range(n_rows // CHUNK):
        X, states = truth.sample(CHUNK, random_state=rng, currstate=state)
        state = int(states[-1])
        yield X


def reset_peak_rss():
    """Reset the kernel's peak-RSS counter (Linux); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def peak_rss_mib():
    """Peak resident memory since the last reset (Linux VmHWM), else since start."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def current_rss_mib():
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def stream(truth, n_rows, learning_decay, held_out=None, checkpoints=()):
    model = GaussianHMM(3, covariance_type="full", random_state=0, learning_decay=learning_decay)
    curve = []
    for index, X in enumerate(chunks(truth, n_rows, seed=1)):
        model.partial_fit(X)
        rows = (index + 1) * CHUNK
        if held_out is not None and rows in checkpoints:
            curve.append((rows, model.score(held_out) / len(held_out)))
    return model, curve


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e6)
    arguments = parser.parse_args()
    n_rows = int(arguments.rows) // CHUNK * CHUNK
    truth = true_model()
    held_out, _ = truth.sample(20_000, random_state=123)

    # Warm up (imports, kernel first calls), then measure the stream alone.
    stream(truth, 5 * CHUNK, 0.6)
    exact = reset_peak_rss()
    rss_before = current_rss_mib() if exact else peak_rss_mib()
    started = time.perf_counter()
    model, _ = stream(truth, n_rows, 0.6)
    seconds = time.perf_counter() - started
    growth = peak_rss_mib() - rss_before
    print(
        f"stream of {n_rows:,} rows in chunks of {CHUNK}: {seconds:.1f} s, "
        f"{n_rows / seconds:,.0f} rows/s, peak RSS growth {growth:.1f} MiB (goal < 50)"
    )

    X = np.concatenate(list(chunks(truth, n_rows, seed=1)))
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        batch = GaussianHMM(3, covariance_type="full", n_iter=100, tol=1e-3, random_state=0).fit(X)
    batch_seconds = time.perf_counter() - started
    online_ll = model.score(X) / len(X)
    batch_ll = batch.score(X) / len(X)
    print(
        f"per-sample log-likelihood on the stream: online {online_ll:.5f}, batch EM "
        f"{batch_ll:.5f} ({batch.n_iter_} iterations, {batch_seconds:.1f} s), "
        f"difference {100 * abs(online_ll - batch_ll) / abs(batch_ll):.3f} % (goal < 0.5 %)"
    )
    print(f"true model: {truth.score(X) / len(X):.5f}")
    del X

    checkpoints = sorted({int(n_rows * f) // CHUNK * CHUNK for f in (0.01, 0.03, 0.1, 0.3, 1.0)})
    print(
        "\nheld-out per-sample log-likelihood against rows seen "
        f"(true model {truth.score(held_out) / len(held_out):.4f}):"
    )
    print(f"{'kappa':>6} " + " ".join(f"{rows:>10,}" for rows in checkpoints))
    for learning_decay in (0.55, 0.6, 0.8, 1.0):
        _, curve = stream(truth, n_rows, learning_decay, held_out, checkpoints)
        print(f"{learning_decay:>6} " + " ".join(f"{value:>10.4f}" for _, value in curve))


if __name__ == "__main__":
    main()
