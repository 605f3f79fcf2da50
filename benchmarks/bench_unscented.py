"""Unscented Kalman filters: skseq against pykalman, in one process.

Run ``python benchmarks/bench_unscented.py``.  A pendulum observed through
``sin`` of its angle (2 states, 1 observation) and a chain of 3 coupled
pendulums observed through the sines of their angles (6 states, 3
observations), T rows each with a gap of 10, on one thread
(threadpoolctl):

* ``smooth`` (the filter and the RTS smoother) of pykalman's
  ``AdditiveUnscentedKalmanFilter`` and ``UnscentedKalmanFilter`` against
  skseq's classes of the same names, with the user's function called once per
  step on all sigma points (``vectorized="auto"``, which the functions here
  allow) and one point at a time (``vectorized=False``, pykalman's way);
* skseq's ``ExtendedKalmanFilter.smooth`` (complex-step Jacobians) for scale.

Each time is the best of several repeats, skseq and pykalman run alternately
so that both see the same load; wall-clock and CPU time are printed, with
the ratio pykalman / skseq of the CPU times, the load average before and
after, and the largest difference of the smoothed means (the two must agree
to 1e-8).
"""

import argparse
import os
import time

import numpy as np
from threadpoolctl import threadpool_limits

from skseq.lds import AdditiveUnscentedKalmanFilter, ExtendedKalmanFilter, UnscentedKalmanFilter

DT, G = 0.05, 9.81


def pendulums(n_pendulums):
    """Additive and general-noise functions of ``n_pendulums`` weakly coupled pendulums."""

    def swing(z):
        theta, omega = z[:n_pendulums], z[n_pendulums:]
        coupling = np.zeros_like(theta)
        if n_pendulums > 1:
            coupling[:-1] += theta[1:] - theta[:-1]
            coupling[1:] += theta[:-1] - theta[1:]
        omega = omega - DT * (G * np.sin(theta) - 0.5 * coupling)
        return np.concatenate([theta + DT * omega, omega])

    def bob(z):
        return np.sin(z[:n_pendulums])

    def swing_noisy(z, w):
        return swing(z) + w

    def bob_noisy(z, v):
        return bob(z) + v

    n_state, n_obs = 2 * n_pendulums, n_pendulums
    common = dict(
        transition_covariance=np.diag([1e-6] * n_pendulums + [1e-4] * n_pendulums),
        observation_covariance=0.02 * np.eye(n_obs),
        initial_state_mean=np.r_[np.full(n_pendulums, 1.0), np.zeros(n_pendulums)],
        initial_state_covariance=0.05 * np.eye(n_state),
    )
    return (swing, bob), (swing_noisy, bob_noisy), common


def best(function, repeats):
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        result = function()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus), result


def compare(label, ours, theirs, repeats, theirs_repeats):
    """Alternate the two so that they see the same load; best of the repeats."""
    our_times, their_times = [], []
    for _ in range(theirs_repeats):
        their_times.append(best(theirs, 1))
        our_times.append(best(ours, max(1, repeats // theirs_repeats)))
    our_wall = min(t[0] for t in our_times)
    our_cpu = min(t[1] for t in our_times)
    their_wall = min(t[0] for t in their_times)
    their_cpu = min(t[1] for t in their_times)
    difference = np.max(np.abs(our_times[-1][2][0] - their_times[-1][2][0]))
    print(
        f"  {label:<34} skseq {our_wall * 1e3:8.1f} ms wall {our_cpu * 1e3:8.1f} ms CPU | "
        f"pykalman {their_wall * 1e3:8.1f} ms wall {their_cpu * 1e3:8.1f} ms CPU | "
        f"ratio {their_cpu / our_cpu:5.1f}x | max |diff| {difference:.1e}"
    )
    return their_cpu / our_cpu, difference


def run(n_rows, repeats, theirs_repeats):
    import pykalman

    for n_pendulums in (1, 3):
        (f, g), (f_noisy, g_noisy), common = pendulums(n_pendulums)
        sampler = AdditiveUnscentedKalmanFilter(f, g, **common)
        _, X = sampler.sample(n_rows, random_state=0)
        X[n_rows // 3 : n_rows // 3 + 10] = np.nan
        masked = np.ma.masked_invalid(X)
        n_state, n_obs = 2 * n_pendulums, X.shape[1]
        print(f"{n_pendulums} pendulum(s): {n_state} states, {n_obs} observed, T = {n_rows}")
        for name, ours_cls, theirs_cls, functions in (
            (
                "Additive UKF smooth",
                AdditiveUnscentedKalmanFilter,
                pykalman.AdditiveUnscentedKalmanFilter,
                (f, g),
            ),
            (
                "UKF (general noise) smooth",
                UnscentedKalmanFilter,
                pykalman.UnscentedKalmanFilter,
                (f_noisy, g_noisy),
            ),
        ):
            theirs = theirs_cls(*functions, **common)
            for vectorized in ("auto", False):
                ours = ours_cls(*functions, **common, vectorized=vectorized)
                ratio, difference = compare(
                    f"{name}, vectorized={vectorized!r}",
                    lambda ours=ours, X=X: ours.smooth(X),
                    lambda theirs=theirs, masked=masked: theirs.smooth(masked),
                    repeats,
                    theirs_repeats,
                )
                assert difference < 1e-8, difference
        ekf = ExtendedKalmanFilter(f, g, **common)
        wall, cpu, _ = best(lambda ekf=ekf, X=X: ekf.smooth(X), repeats)
        print(
            f"  {'EKF smooth (complex step)':<34} skseq {wall * 1e3:8.1f} ms wall "
            f"{cpu * 1e3:8.1f} ms CPU"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000, help="time steps T")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of each skseq timing")
    parser.add_argument("--pykalman-repeats", type=int, default=3, help="repeats of pykalman's")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    with threadpool_limits(1):
        run(args.rows, args.repeats, args.pykalman_repeats)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
