"""Parallel and distributed EM: threads against joblib's dask backend.

Times the EM iterations of a GaussianHMM fit over many sequences (the
initialisation excluded: each configuration fits ``n_iter`` and ``1``
iterations from the same fixed parameters and takes the difference), on

- one thread (``n_jobs=1``), the reference;
- two threads (``n_jobs=2``, skseq's thread pool);
- a dask ``LocalCluster`` of worker processes on loopback, 1 and 2 workers
  of one thread each, under ``joblib.parallel_config(backend="dask")``,
  with ``n_jobs=2`` blocks per E step (with ``n_jobs=1`` the E step would
  not leave the process);
- a ``LocalCluster(processes=False)``: dask's scheduler with 2 worker threads
  in this process, which measures dask's overhead against plain threads.

Every configuration is timed ``--repeats`` times (median reported) and its
fitted means are checked against the one-thread fit.  ``--save FILE``
writes the results as JSON (doc/gallery/data/parallel.json is made with
``python benchmarks/bench_dask.py --save doc/gallery/data/parallel.json``).
"""

import argparse
import json
import os
import platform
import statistics
import time
import warnings

import numpy as np


def make_data(n_sequences, length, seed=0):
    rng = np.random.default_rng(seed)
    means = np.array([[-2.0, 0.0], [0.0, 2.0], [2.0, 0.0], [0.0, -2.0]])
    transmat = np.full((4, 4), 0.05) + np.eye(4) * 0.8
    states = np.empty(n_sequences * length, dtype=int)
    for s in range(n_sequences):
        state = rng.integers(4)
        for t in range(length):
            states[s * length + t] = state
            state = rng.choice(4, p=transmat[state])
    return means[states] + rng.normal(size=(states.size, 2)), [length] * n_sequences


def model(n_iter, n_jobs):
    from skseq import GaussianHMM

    hmm = GaussianHMM(4, n_iter=n_iter, tol=-np.inf, n_jobs=n_jobs, init_params="", params="stmc")
    hmm.startprob_ = np.full(4, 0.25)
    hmm.transmat_ = np.full((4, 4), 0.1) + np.eye(4) * 0.6
    hmm.means_ = np.array([[-1.0, 0.5], [0.5, 1.0], [1.0, -0.5], [-0.5, -1.0]])
    hmm.covars_ = np.ones((4, 2))
    return hmm


def seconds_per_iteration(X, lengths, n_jobs, n_iter, repeats):
    """Median over ``repeats`` of (time of n_iter iterations - time of 1) / (n_iter - 1)."""
    times, fitted = [], None
    for _ in range(repeats):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            started = time.perf_counter()
            fitted = model(n_iter, n_jobs).fit(X, lengths=lengths)
            long = time.perf_counter() - started
            started = time.perf_counter()
            model(1, n_jobs).fit(X, lengths=lengths)
            short = time.perf_counter() - started
        times.append((long - short) / (n_iter - 1))
    return statistics.median(times), fitted


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=64)
    parser.add_argument("--length", type=int, default=4000)
    parser.add_argument("--n-iter", type=int, default=11)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--save", metavar="FILE")
    arguments = parser.parse_args()

    from dask.distributed import Client, LocalCluster
    from joblib import parallel_config

    X, lengths = make_data(arguments.sequences, arguments.length)
    args = (X, lengths)
    results = []

    def record(name, seconds, fitted, reference):
        if reference is not None:
            assert np.allclose(fitted.means_, reference.means_, rtol=1e-10, atol=1e-12), name
        results.append({"configuration": name, "seconds_per_iteration": seconds})
        print(f"{name:45s} {seconds * 1000:9.2f} ms per EM iteration", flush=True)

    base, reference = seconds_per_iteration(*args, 1, arguments.n_iter, arguments.repeats)
    record("threads, n_jobs=1", base, reference, None)
    seconds, fitted = seconds_per_iteration(*args, 2, arguments.n_iter, arguments.repeats)
    record("threads, n_jobs=2", seconds, fitted, reference)
    for n_workers, processes in ((1, True), (2, True), (2, False)):
        kind = "processes" if processes else "threads in this process"
        cluster_options = dict(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=processes,
            dashboard_address=None,
        )
        if processes:
            cluster_options["host"] = "127.0.0.1"
        with (
            LocalCluster(**cluster_options) as cluster,
            Client(cluster),
            parallel_config(backend="dask"),
        ):
            seconds_per_iteration(*args, 2, 2, 1)  # the workers import skseq
            seconds, fitted = seconds_per_iteration(*args, 2, arguments.n_iter, arguments.repeats)
        record(f"dask, {n_workers} worker(s) ({kind}), n_jobs=2", seconds, fitted, reference)

    for result in results:
        result["speedup_over_one_thread"] = base / result["seconds_per_iteration"]
    report = {
        "what": (
            f"GaussianHMM(4 states, diagonal covariances) EM iterations on "
            f"{arguments.sequences} sequences of {arguments.length} rows x 2 features; "
            f"median of {arguments.repeats} runs of {arguments.n_iter - 1} iterations"
        ),
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} logical CPUs, "
            f"Python {platform.python_version()}"
        ),
        "load_average_at_end": os.getloadavg()[0],
        "results": results,
    }
    print(json.dumps(report, indent=1))
    if arguments.save:
        with open(arguments.save, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=1)
            handle.write("\n")


if __name__ == "__main__":
    main()
