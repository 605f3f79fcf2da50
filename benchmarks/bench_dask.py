"""Parallel and distributed EM over data sizes: threads against joblib's dask backend.

Times the EM iterations of a GaussianHMM fit (4 states, diagonal
covariances, 2 features) over many sequences, at several data sizes (the
number of sequences and their length both doubling from one size to the
next, 16 000 to 4 096 000 rows), in each configuration:

- ``threads1``: one thread (``n_jobs=1``), the reference;
- ``threads2``: two threads (``n_jobs=2``, skseq's thread pool);
- ``processes1`` / ``processes2``: a dask ``LocalCluster`` of 1 or 2 worker
  processes (one thread each) on loopback, under
  ``joblib.parallel_config(backend="dask")``, with ``n_jobs=2`` blocks per
  E step (with ``n_jobs=1`` the E step would not leave the process);
- ``inprocess2``: a ``LocalCluster(processes=False)``, dask's scheduler with
  2 worker threads in this process, which measures dask's overhead against
  plain threads.

The initialisation is excluded: each repetition fits ``n_iter`` and ``1``
iterations from the same fixed parameters and takes the difference, of the
wall time and of the CPU time (this process's, all its threads, plus that of
the cluster's worker and nanny processes).  Every configuration's fitted
means are checked against the one-thread fit.  Each measurement records the
load averages before and after it and the CPU time that other processes
used meanwhile (the machine's busy time minus the benchmark's).  The
summary fits ``time = overhead + rows * cost per row`` to each
configuration's medians: the overhead is what a cluster must amortise, and
the size where a configuration's line crosses one thread's is where it
starts to pay.

A measurement on a busy machine says nothing about parallelism, so before
measuring the script waits (up to ``--wait`` seconds) until the 1-minute
load average is at most ``--max-load``, and ``--save`` refuses to write its
file (exit status 1) when the machine was not quiet: the load did not come
down, or other processes used more than ``--max-load`` cores on average
during a measurement.  ``--force`` writes it anyway, marked
``"quiet": false``.  The gallery's cache is made, on a quiet machine (a
few minutes on 2 cores; the file records the run's time), by::

    python benchmarks/bench_dask.py --save doc/gallery/data/parallel.json

``--quick`` measures two tiny sizes once (a smoke test, marked
``"quick": true``).
"""

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
import warnings

import numpy as np

CONFIGURATIONS = {
    "threads1": dict(label="threads, n_jobs=1", n_jobs=1, cluster=None),
    "threads2": dict(label="threads, n_jobs=2", n_jobs=2, cluster=None),
    "processes1": dict(
        label="dask, 1 worker process, n_jobs=2",
        n_jobs=2,
        cluster=dict(n_workers=1, processes=True),
    ),
    "processes2": dict(
        label="dask, 2 worker processes, n_jobs=2",
        n_jobs=2,
        cluster=dict(n_workers=2, processes=True),
    ),
    "inprocess2": dict(
        label="dask, 2 worker threads in this process, n_jobs=2",
        n_jobs=2,
        cluster=dict(n_workers=2, processes=False),
    ),
}
# (sequences, rows per sequence): 16 000 to 4 096 000 rows, x4 each step.
SIZES = ((16, 1000), (32, 2000), (64, 4000), (128, 8000), (256, 16000))
QUICK_SIZES = ((4, 100), (8, 200))
TRANSMAT = np.full((4, 4), 0.05) + np.eye(4) * 0.8
MEANS = np.array([[-2.0, 0.0], [0.0, 2.0], [2.0, 0.0], [0.0, -2.0]])


def make_data(n_sequences, length, seed=0):
    """Rows of a 4-state 2-D Gaussian HMM, ``n_sequences`` of ``length`` rows."""
    rng = np.random.default_rng(seed)
    cumulative = np.cumsum(TRANSMAT, axis=1)
    uniforms = rng.random((n_sequences, length))
    states = np.empty((n_sequences, length), dtype=np.intp)
    states[:, 0] = rng.integers(4, size=n_sequences)
    for t in range(1, length):  # all sequences at once, one step at a time
        following = (uniforms[:, t, None] > cumulative[states[:, t - 1]]).sum(axis=1)
        states[:, t] = np.minimum(following, 3)
    states = states.ravel()
    return MEANS[states] + rng.normal(size=(states.size, 2)), [length] * n_sequences


def model(n_iter, n_jobs):
    from skseq import GaussianHMM

    hmm = GaussianHMM(4, n_iter=n_iter, tol=-np.inf, n_jobs=n_jobs, init_params="", params="stmc")
    hmm.startprob_ = np.full(4, 0.25)
    hmm.transmat_ = np.full((4, 4), 0.1) + np.eye(4) * 0.6
    hmm.means_ = np.array([[-1.0, 0.5], [0.5, 1.0], [1.0, -0.5], [-0.5, -1.0]])
    hmm.covars_ = np.ones((4, 2))
    return hmm


class CPUClock:
    """CPU seconds of this process (all its threads) and of the cluster's worker processes.

    ``time.process_time`` here, and in each worker process through
    ``client.run`` (a worker's own threads included) when ``client`` is a
    client of a cluster of processes.
    """

    def __init__(self, client=None):
        self._client = client

    def __call__(self):
        """(this process's CPU seconds, the sum of the worker processes')."""
        workers = 0.0
        if self._client is not None:
            workers = sum(self._client.run(time.process_time).values())
        return time.process_time(), workers


def machine_busy_seconds():
    """CPU seconds the whole machine has been busy (every process, all cores).

    Stolen time counts: it is time this machine's work did not get.  Guest
    time is already inside user time on Linux.
    """
    import psutil

    times = psutil.cpu_times()
    idle = times.idle + getattr(times, "iowait", 0.0)
    guest = getattr(times, "guest", 0.0) + getattr(times, "guest_nice", 0.0)
    return sum(times) - idle - guest


def wait_until_quiet(max_load, timeout, poll=5.0):
    """Wait until the 1-minute load average is at most ``max_load``.

    Returns ``(quiet, load_averages, seconds_waited)``; gives up after
    ``timeout`` seconds.
    """
    started = time.monotonic()
    while True:
        load = os.getloadavg()
        waited = time.monotonic() - started
        if load[0] <= max_load:
            return True, load, waited
        if waited >= timeout:
            return False, load, waited
        print(
            f"load average {load[0]:.2f} > {max_load}: waiting for a quiet machine "
            f"({waited:.0f} of {timeout:.0f} s)",
            flush=True,
        )
        time.sleep(min(poll, max(timeout - waited, 0.0)))


def measure(X, lengths, n_jobs, n_iter, repeats, clock):
    """Per-iteration wall and CPU seconds of ``repeats`` repetitions.

    Each repetition is (fit of ``n_iter`` iterations - fit of 1) / (n_iter - 1),
    for the wall time, the CPU time of this process and that of its children.
    """
    walls, cpus, children_cpus, fitted = [], [], [], None

    def fit(iterations):
        cpu, children = clock()  # outside the wall time: a client.run is a round trip
        wall = time.perf_counter()
        result = model(iterations, n_jobs).fit(X, lengths=lengths)
        wall = time.perf_counter() - wall
        after_cpu, after_children = clock()
        return wall, after_cpu - cpu, after_children - children, result

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tol=-inf: every fit "does not converge"
        for _ in range(repeats):
            long_wall, long_cpu, long_children, fitted = fit(n_iter)
            short_wall, short_cpu, short_children, _ = fit(1)
            walls.append((long_wall - short_wall) / (n_iter - 1))
            cpus.append((long_cpu - short_cpu) / (n_iter - 1))
            children_cpus.append((long_children - short_children) / (n_iter - 1))
    return walls, cpus, children_cpus, fitted


def machine_description():
    import dask

    import skseq

    model_name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model_name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu_model": model_name,
        "logical_cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "dask": dask.__version__,
        "skseq": skseq.__version__,
    }


def line_fit(rows, seconds):
    """Least-squares ``seconds = intercept + slope * rows``, in relative error."""
    rows, seconds = np.asarray(rows, float), np.asarray(seconds, float)
    if rows.size < 2:
        return None
    slope, intercept = np.polyfit(rows, seconds, 1, w=1.0 / np.abs(seconds))
    return float(intercept), float(slope)


def summarise(measurements, keys):
    """Speed-ups, CPU ratios, the fitted overheads and where each configuration pays."""
    by_key = {key: [m for m in measurements if m["configuration"] == key] for key in keys}
    base = {m["rows"]: m for m in by_key.get("threads1", [])}
    base_fit = line_fit(list(base), [m["median_wall"] for m in base.values()])
    summary = {}
    for key, entries in by_key.items():
        entries = [m for m in entries if m["rows"] in base]
        if not entries:
            continue
        rows = [m["rows"] for m in entries]
        speedups = [base[r]["median_wall"] / m["median_wall"] for r, m in zip(rows, entries)]
        fit = line_fit(rows, [m["median_wall"] for m in entries])
        pays_from = None
        for index in range(len(rows)):
            if all(s > 1.0 for s in speedups[index:]):
                pays_from = rows[index]
                break
        crossing = None
        if fit is not None and base_fit is not None and key != "threads1":
            extra, saved = fit[0] - base_fit[0], base_fit[1] - fit[1]
            if saved > 0:
                crossing = max(extra / saved, 0.0)
        summary[key] = {
            "rows": rows,
            "speedup": speedups,
            "speedup_range": [
                [base[r]["median_wall"] / max(m["wall_seconds_per_iteration"]),
                 base[r]["median_wall"] / min(m["wall_seconds_per_iteration"])]
                for r, m in zip(rows, entries)
            ],
            "cpu_ratio": [m["median_cpu"] / base[r]["median_cpu"] for r, m in zip(rows, entries)],
            "overhead_ms_per_iteration": None if fit is None else 1000 * fit[0],
            "ns_per_row": None if fit is None else 1e9 * fit[1],
            "extra_overhead_ms_over_one_thread": (
                None if fit is None or base_fit is None else 1000 * (fit[0] - base_fit[0])
            ),
            "pays_from_rows": pays_from,
            "break_even_rows_fitted": crossing,
        }
    return summary


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-iter", type=int, default=11, help="iterations per long fit")
    parser.add_argument("--repeats", type=int, default=5, help="repetitions per measurement")
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        metavar="SEQUENCESxLENGTH",
        help="pairs: sequences length [sequences length ...] (default: 16x1000 .. 256x16000)",
    )
    parser.add_argument(
        "--configurations",
        nargs="+",
        choices=list(CONFIGURATIONS),
        default=list(CONFIGURATIONS),
        help="which to measure (threads1, the reference, is always measured)",
    )
    parser.add_argument(
        "--max-load",
        type=float,
        default=0.7,
        help="1-minute load average to wait for, and the most CPU cores other processes "
        "may use during a measurement for the result to count as quiet (default 0.7)",
    )
    parser.add_argument(
        "--wait", type=float, default=600.0, help="seconds to wait for the load (default 600)"
    )
    parser.add_argument("--quick", action="store_true", help="two tiny sizes, one repetition")
    parser.add_argument("--save", metavar="FILE", help="write the results as JSON")
    parser.add_argument(
        "--force", action="store_true", help="--save even when the machine was not quiet"
    )
    arguments = parser.parse_args(argv)
    if arguments.sizes is not None:
        if len(arguments.sizes) % 2:
            parser.error("--sizes takes pairs: sequences length")
        arguments.sizes = tuple(zip(arguments.sizes[::2], arguments.sizes[1::2]))
    else:
        arguments.sizes = QUICK_SIZES if arguments.quick else SIZES
    if arguments.quick:
        arguments.repeats = 1
        arguments.n_iter = min(arguments.n_iter, 3)
    if arguments.n_iter < 2:
        parser.error("--n-iter must be at least 2 (the time of 1 iteration is subtracted)")
    if "threads1" not in arguments.configurations:
        arguments.configurations.insert(0, "threads1")
    return arguments


def main(argv=None):
    arguments = parse_arguments(argv)
    started = time.monotonic()
    quiet, load_at_start, waited = wait_until_quiet(arguments.max_load, arguments.wait)
    reasons = []
    if not quiet:
        reasons.append(
            f"1-minute load average {load_at_start[0]:.2f} above --max-load "
            f"{arguments.max_load} after waiting {waited:.0f} s"
        )
        print(f"not quiet: {reasons[-1]}", file=sys.stderr, flush=True)
        if arguments.save and not arguments.force:
            print(
                f"not measuring: --save {arguments.save} would be refused (--force to measure "
                "and save anyway, marked as not quiet)",
                file=sys.stderr,
            )
            return 1
    else:
        print(f"load average {load_at_start[0]:.2f} <= {arguments.max_load}: measuring", flush=True)

    data = {size: make_data(*size) for size in arguments.sizes}
    references, measurements = {}, []

    def run(key, clock):
        spec = CONFIGURATIONS[key]
        for size in arguments.sizes:
            X, lengths = data[size]
            load_before, busy, own = os.getloadavg(), machine_busy_seconds(), sum(clock())
            wall = time.perf_counter()
            walls, cpus, children, fitted = measure(
                X, lengths, spec["n_jobs"], arguments.n_iter, arguments.repeats, clock
            )
            wall = time.perf_counter() - wall
            others = max(machine_busy_seconds() - busy - (sum(clock()) - own), 0.0) / wall
            if key == "threads1":
                references[size] = fitted
            else:
                assert np.allclose(
                    fitted.means_, references[size].means_, rtol=1e-10, atol=1e-12
                ), (key, size)
            entry = {
                "configuration": key,
                "sequences": size[0],
                "length": size[1],
                "rows": size[0] * size[1],
                "wall_seconds_per_iteration": walls,
                "cpu_seconds_per_iteration": [c + w for c, w in zip(cpus, children)],
                "worker_processes_cpu_seconds_per_iteration": children,
                "median_wall": statistics.median(walls),
                "median_cpu": statistics.median(c + w for c, w in zip(cpus, children)),
                "load_average_before": list(load_before),
                "load_average_after": list(os.getloadavg()),
                "other_processes_cpu_cores": others,
            }
            measurements.append(entry)
            if others > arguments.max_load:
                reasons.append(
                    f"{key} at {entry['rows']} rows: other processes used {others:.2f} cores"
                )
            print(
                f"{spec['label']:50s} {entry['rows']:>9d} rows  "
                f"wall {1000 * entry['median_wall']:9.2f} ms  cpu {1000 * entry['median_cpu']:9.2f}"
                f" ms per iteration  (others {others:.2f} cores, load {load_before[0]:.2f}"
                f" -> {entry['load_average_after'][0]:.2f})",
                flush=True,
            )

    for key in arguments.configurations:
        spec = CONFIGURATIONS[key]
        with contextlib.ExitStack() as stack:
            clock = CPUClock()
            if spec["cluster"] is not None:
                from dask.distributed import Client, LocalCluster
                from joblib import parallel_config

                options = dict(spec["cluster"], threads_per_worker=1, dashboard_address=None)
                if options["processes"]:
                    options["host"] = "127.0.0.1"
                stack.enter_context(warnings.catch_warnings())
                warnings.simplefilter("ignore")
                cluster = stack.enter_context(LocalCluster(**options))
                client = stack.enter_context(Client(cluster))
                stack.enter_context(parallel_config(backend="dask"))
                clock = CPUClock(client if options["processes"] else None)
            # One fit first: the workers import skseq, the kernels' pages are loaded.
            measure(*data[arguments.sizes[0]], spec["n_jobs"], 2, 1, clock)
            run(key, clock)

    summary = summarise(measurements, arguments.configurations)
    quiet = not reasons
    report = {
        "what": (
            "GaussianHMM(4 states, diagonal covariances, 2 features) EM iterations, "
            f"median of {arguments.repeats} runs of {arguments.n_iter - 1} iterations "
            "(fit of n_iter minus fit of 1), at each size"
        ),
        "command": "python benchmarks/bench_dask.py " + " ".join(argv or sys.argv[1:]),
        "machine": machine_description(),
        "n_iter": arguments.n_iter,
        "repeats": arguments.repeats,
        "quick": arguments.quick,
        "max_load": arguments.max_load,
        "quiet": quiet,
        "not_quiet_because": reasons,
        "load_average_at_start": list(load_at_start),
        "seconds_waited_for_load": waited,
        "load_average_at_end": list(os.getloadavg()),
        "runtime_seconds": time.monotonic() - started,
        "configurations": {key: CONFIGURATIONS[key]["label"] for key in arguments.configurations},
        "measurements": measurements,
        "summary": summary,
    }
    for key, entry in summary.items():
        if key == "threads1":
            continue
        speedups = ", ".join(f"{s:.2f}" for s in entry["speedup"])
        extra = entry["extra_overhead_ms_over_one_thread"]
        print(
            f"{CONFIGURATIONS[key]['label']:50s} speed-up {speedups}; "
            + ("" if extra is None else f"overhead {extra:.1f} ms/iteration over one thread; ")
            + f"pays from {entry['pays_from_rows']} rows"
        )
    print(f"runtime {report['runtime_seconds']:.0f} s; quiet: {quiet}")
    if arguments.save:
        if not quiet and not arguments.force:
            print(
                f"not writing {arguments.save}: the machine was not quiet ("
                + "; ".join(reasons)
                + "); rerun on a quiet machine, or --force to write it marked as not quiet",
                file=sys.stderr,
            )
            return 1
        with open(arguments.save, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=1)
            handle.write("\n")
        print(f"wrote {arguments.save}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
