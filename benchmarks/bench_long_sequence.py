"""One long sequence in bounded memory: score and one EM iteration of a GaussianHMM.

A 2-state, 1-feature GaussianHMM's sample of ``--rows`` rows (default 10^8,
800 MB of float64) is written to a ``.npy`` file in a temporary directory,
chunk by chunk (so that generating it needs no more memory than a chunk),
and opened as a read-only ``np.memmap``.  On it:

* ``score`` (chunked forward pass, its memory that of one chunk), and
* one EM iteration, E step + M step (the checkpointed forward-backward:
  the sequence is far beyond the ``working_memory`` budget),

each reporting its CPU time per row and its peak allocation beyond the data,
traced by tracemalloc (numpy reports its allocations to it; the memmapped
data are file pages, not allocations, and so are not counted).  The resident
set size would count the data's file pages as they are read, so it is not
used.  Then the same on ``--compare-rows`` rows (default 10^6) in memory,
with today's whole-sequence E step (``working_memory`` large enough) against
the checkpointed one (``working_memory`` forced to 16 MiB): time per row of each,
their ratio, their peak allocations, and the largest relative difference of
their statistics.

Run ``python benchmarks/bench_long_sequence.py [--rows 10000000]
[--compare-rows 1000000] [--repeats 3] [--directory DIR]``.  The machine
needs ``--rows`` x 8 bytes free on the directory's file system (checked).
"""

import argparse
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
import warnings

import numpy as np
import sklearn
from sklearn.exceptions import ConvergenceWarning

from skseq import GaussianHMM


def model():
    hmm = GaussianHMM(2, init_params="", params="stmc", n_iter=1)
    hmm.startprob_ = np.array([0.5, 0.5])
    hmm.transmat_ = np.array([[0.98, 0.02], [0.03, 0.97]])
    hmm.means_ = np.array([[-1.0], [1.0]])
    hmm.covars_ = np.array([[0.5], [0.8]])
    return hmm


def write_sample(path, n_rows, chunk_rows=1_000_000, seed=0):
    """The model's sample of ``n_rows`` rows, generated and written chunk by chunk."""
    hmm = model()
    data = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(n_rows, 1))
    rng = np.random.RandomState(seed)
    state = None
    for start in range(0, n_rows, chunk_rows):
        stop = min(start + chunk_rows, n_rows)
        X, states = hmm.sample(stop - start, random_state=rng, currstate=state)
        data[start:stop] = X
        state = int(states[-1])
    data.flush()
    del data
    return np.load(path, mmap_mode="r")


def traced_peak(function):
    """(result, peak bytes allocated while ``function`` runs, per tracemalloc)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = function()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def timed(function, repeats):
    """(result, smallest CPU time of ``repeats`` calls).

    CPU time, not wall time: on a shared machine the wall time also counts
    the time the process waits for a core (the work here is single-threaded).
    """
    best, result = np.inf, None
    for _ in range(repeats):
        start = time.process_time()
        result = function()
        best = min(best, time.process_time() - start)
    return result, best


def em_iteration(hmm, X):
    """One EM iteration as fit runs it: the E step on the sequence, then the M step."""
    statistics, log_likelihood = hmm._estep(X, np.array([0, X.shape[0]]))
    fitted = model()
    fitted._centre = hmm._centre
    fitted._mstep(statistics)
    return statistics, log_likelihood


def mib(n_bytes):
    return f"{n_bytes / 2**20:8.2f} MiB"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000_000)
    parser.add_argument("--compare-rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--directory", default=None, help="where the .npy file goes")
    arguments = parser.parse_args()
    warnings.simplefilter("ignore", ConvergenceWarning)

    hmm = model()
    hmm._ensure_emission_centre()
    hmm.n_features_in_ = 1
    print(f"load average: {os.getloadavg()}")
    print(f"sklearn working_memory: {sklearn.get_config()['working_memory']} MiB")

    # -- today's path against the checkpointed one, in memory ---------------
    n_rows = arguments.compare_rows
    X = model().sample(n_rows, random_state=1)[0]
    print(f"\n{n_rows} rows in memory ({mib(X.nbytes)} of data):")
    results = {}
    # 16 MiB: the checkpointed path with its usual chunks (2^16 rows here).
    for name, budget in (("whole sequence", 2**20), ("checkpointed", 16)):
        with sklearn.config_context(working_memory=budget):
            checkpointed = hmm._checkpoint_threshold(1) < n_rows
            (statistics, log_likelihood), seconds = timed(
                lambda: em_iteration(hmm, X), arguments.repeats
            )
            _, peak = traced_peak(lambda: em_iteration(hmm, X))
        results[name] = statistics, log_likelihood, seconds
        print(
            f"  EM iteration, {name:14s} (checkpointed: {checkpointed}): "
            f"{1e9 * seconds / n_rows:7.1f} ns/row CPU, peak allocation {mib(peak)}"
        )
    reference, expected_log_likelihood, reference_seconds = results["whole sequence"]
    statistics, log_likelihood, seconds = results["checkpointed"]
    difference = max(
        float(
            np.max(
                np.abs(statistics[key] - reference[key])
                / np.maximum(np.abs(reference[key]), 1e-300)
            )
        )
        for key in reference
    )
    print(
        f"  checkpointed / whole-sequence time: {seconds / reference_seconds:.2f}; "
        f"largest relative difference of the statistics {difference:.2e}, "
        f"of the log-likelihood {abs(log_likelihood / expected_log_likelihood - 1):.2e}"
    )
    _, seconds = timed(lambda: hmm.score(X), arguments.repeats)
    _, peak = traced_peak(lambda: hmm.score(X))
    print(f"  score: {1e9 * seconds / n_rows:7.1f} ns/row CPU, peak allocation {mib(peak)}")
    X = None  # the data go

    # -- the long memmapped sequence --------------------------------------------
    n_rows = arguments.rows
    directory = tempfile.mkdtemp(dir=arguments.directory, prefix="skseq-long-")
    try:
        free = shutil.disk_usage(directory).free
        if free < 1.1 * 8 * n_rows:
            sys.exit(f"{n_rows} rows need {mib(8 * n_rows)} on disk; {mib(free)} free there.")
        start = time.perf_counter()
        X, generation_peak = traced_peak(
            lambda: write_sample(os.path.join(directory, "long.npy"), n_rows)
        )
        print(
            f"\n{n_rows} memmapped rows ({mib(8 * n_rows)} on disk), written in "
            f"{time.perf_counter() - start:.1f} s with peak allocation {mib(generation_peak)}:"
        )
        print(f"  load average: {os.getloadavg()}")
        print(f"  rows per checkpointed chunk: {hmm._checkpoint_rows(n_rows, 1)}")
        (log_likelihood, peak), seconds = timed(lambda: traced_peak(lambda: hmm.score(X)), 1)
        print(
            f"  score: {1e9 * seconds / n_rows:7.1f} ns/row CPU (traced), peak allocation "
            f"{mib(peak)}, log-likelihood {log_likelihood:.6f}"
        )
        ((_, em_log_likelihood), peak), seconds = timed(
            lambda: traced_peak(lambda: em_iteration(hmm, X)), 1
        )
        print(
            f"  EM iteration: {1e9 * seconds / n_rows:7.1f} ns/row CPU (traced), peak allocation "
            f"{mib(peak)}, log-likelihood {em_log_likelihood:.6f}"
        )
        print(f"  load average: {os.getloadavg()}")
        X = None  # the data go
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
