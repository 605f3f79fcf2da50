"""Time-varying linear-Gaussian systems: the kernel's per-step strides.

Run ``python benchmarks/bench_lgssm_time_varying.py``, on one thread
(threadpoolctl), CPU time (steadier than wall-clock on a shared machine),
the best of several repeats, the contenders alternating so that they see the
same load:

1. The constant path: ``kalman_filter`` / ``kalman_smoother``'s kernels
   (``_filter_offsets`` / ``_smoother_offsets``, no validation) for
   T = 20 000 rows.  Run it with ``--constant-only`` under an older build
   (one without time-varying support) to compare the kernel before and after.
2. The same model with its arrays repeated along time (the strided path, the
   same numbers bit for bit) against the constant path: the cost of reading
   one step's arrays per row.
3. A time-varying model (every array with its time axis) against pykalman's
   ``KalmanFilter.filter`` / ``smooth`` with the same arrays, T = 2 000, and
   the largest difference of the smoothed means.

The load average is printed with every table.
"""

import argparse
import os
import time
from functools import partial

import numpy as np
from threadpoolctl import threadpool_limits

import skseq
from skseq.inference import kalman

SHAPES = [(2, 1), (4, 4), (16, 8)]
# pykalman's plural names of the matrices and offsets.
PYKALMAN_NAMES = {
    name: name.replace("matrix", "matrices") if "matrix" in name else name + "s"
    for name in ("transition_matrix", "observation_matrix", "transition_offset")
}
PYKALMAN_NAMES["observation_offset"] = "observation_offsets"


def best_cpu_time(functions, repeats):
    """The best CPU time of each function, running them alternately."""
    best = [np.inf] * len(functions)
    for _ in range(repeats):
        for i, function in enumerate(functions):
            start = time.process_time()
            function()
            best[i] = min(best[i], time.process_time() - start)
    return best


def spd(rng, shape, dim):
    a = rng.normal(size=(*shape, dim, dim))
    return a @ np.swapaxes(a, -1, -2) / dim + 0.1 * np.eye(dim)


def constant_model(rng, k, p):
    F = rng.normal(size=(k, k))
    F *= 0.95 / np.max(np.abs(np.linalg.eigvals(F)))
    return kalman.LGSSMParameters(
        F, rng.normal(size=(p, k)), spd(rng, (), k), spd(rng, (), p), np.zeros(k), np.zeros(p)
    )


def repeated(parameters, n):
    values = parameters._asdict()
    for name in kalman.TIME_VARYING_NDIM:
        steps = n - 1 if name.startswith("transition") else n
        values[name] = np.repeat(np.asarray(values[name])[None], steps, axis=0)
    return kalman.LGSSMParameters(**values)


def time_varying_model(rng, n, k, p):
    F = 0.5 * rng.normal(size=(n - 1, k, k)) / np.sqrt(k)
    return kalman.LGSSMParameters(
        F,
        rng.normal(size=(n, p, k)),
        spd(rng, (n - 1,), k),
        spd(rng, (n,), p),
        rng.normal(scale=0.1, size=(n - 1, k)),
        rng.normal(size=(n, p)),
    )


def kernels(parameters, X):
    X, model, controls, offsets = kalman._check_inputs(parameters, X, None, None)
    return (
        lambda: kalman._filter_offsets(model, X, controls, offsets),
        lambda: kalman._smoother_offsets(model, X, controls, offsets),
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--constant-only", action="store_true")
    parser.add_argument("--repeats", type=int, default=7)
    arguments = parser.parse_args()
    rng = np.random.default_rng(0)
    supported = hasattr(kalman, "TIME_VARYING_NDIM")
    print(f"skseq from {os.path.dirname(skseq.__file__)}; time-varying support: {supported}")
    with threadpool_limits(1):
        print(f"\n1. constant path, T = 20000 (CPU ms); load {os.getloadavg()}")
        print(f"{'k x p':>7} {'filter':>9} {'smoother':>9}")
        for k, p in SHAPES:
            parameters, X = constant_model(rng, k, p), rng.normal(size=(20_000, p))
            times = best_cpu_time(kernels(parameters, X), arguments.repeats)
            print(f"{k:>3} x {p:<3} {times[0] * 1e3:9.2f} {times[1] * 1e3:9.2f}")
        if arguments.constant_only or not supported:
            return

        print(f"\n2. repeated arrays (strided) / constant, T = 20000; load {os.getloadavg()}")
        print(f"{'k x p':>7} {'filter':>9} {'smoother':>9}")
        for k, p in SHAPES:
            parameters, X = constant_model(rng, k, p), rng.normal(size=(20_000, p))
            constant = kernels(parameters, X)
            strided = kernels(repeated(parameters, X.shape[0]), X)
            times = best_cpu_time([constant[0], strided[0], constant[1], strided[1]], 5)
            print(f"{k:>3} x {p:<3} {times[1] / times[0]:9.2f} {times[3] / times[2]:9.2f}")

        try:
            from pykalman import KalmanFilter
        except ImportError:
            print("\n3. pykalman is not installed: skipped")
            return
        n = 2000
        print(f"\n3. time-varying, T = {n}: CPU ms and pykalman / skseq; load {os.getloadavg()}")
        print(
            f"{'k x p':>7} {'skseq filter':>13} {'pykalman':>9} {'ratio':>6}"
            f" {'skseq smooth':>13} {'pykalman':>9} {'ratio':>6} {'max |diff|':>10}"
        )
        for k, p in SHAPES:
            parameters, X = time_varying_model(rng, n, k, p), rng.normal(size=(n, p))
            arrays = {
                PYKALMAN_NAMES.get(name, name): value
                for name, value in zip(parameters._fields, parameters)
                if name in kalman.TIME_VARYING_NDIM
            }
            reference = KalmanFilter(
                initial_state_mean=np.zeros(k), initial_state_covariance=np.eye(k), **arrays
            )
            times = best_cpu_time(
                [
                    partial(kalman.kalman_filter, parameters, X),
                    partial(reference.filter, X),
                    partial(kalman.kalman_smoother, parameters, X),
                    partial(reference.smooth, X),
                ],
                3,
            )
            difference = np.max(
                np.abs(
                    kalman.kalman_smoother(parameters, X).smoothed_means - reference.smooth(X)[0]
                )
            )
            print(
                f"{k:>3} x {p:<3} {times[0] * 1e3:13.2f} {times[1] * 1e3:9.1f}"
                f" {times[1] / times[0]:6.0f} {times[2] * 1e3:13.2f} {times[3] * 1e3:9.1f}"
                f" {times[3] / times[2]:6.0f} {difference:10.1e}"
            )


if __name__ == "__main__":
    main()
