"""EM with and without SQUAREM: iterations and time to the maximum likelihood.

Run ``python benchmarks/bench_acceleration.py``.  Each model is fitted from
the same initial values with ``acceleration=None`` (plain EM) and
``acceleration="squarem"``, with a tight ``tol`` and a generous ``n_iter``, so
that both run to the maximum:

* the Nile's local level model (``skseq.datasets.load_nile``; F = H = 1
  given, Q and R learned);
* pykalman's robot data (``pykalman.datasets.load_robot``, its first row
  masked; pykalman's initial Q and R, the two covariances learned, its
  time-varying transition offsets as controls with G = I fixed); skipped
  when pykalman is not installed;
* a GaussianHMM with 3 states and full covariances on 4 000 rows drawn from
  a 3-state HMM whose emissions overlap (kmeans initialisation, all
  parameters learned).

The ``tol`` is 1e-8 except on the robot data, whose likelihood still creeps
up by about 1e-4 per plain EM iteration after thousands of them (neither fit
stops within 20 000 iterations at 1e-8).  The table gives, for each fit, the
EM iterations (accepted E steps; SQUAREM's rejected extrapolations cost a
few more E steps, not counted), the wall-clock time
(best of ``--repeats``, on one thread), the final log-likelihood and its gap
to the best log-likelihood either fit reached.  The machine's load changes
the times, not the iterations: read the times beside ``uptime``.
"""

import argparse
import os
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from skseq import GaussianHMM
from skseq.datasets import load_nile
from skseq.lds import LinearGaussianSSM


def nile_case():
    X = load_nile().data

    def make(acceleration):
        return LinearGaussianSSM(
            1,
            transition_matrix_init=[[1.0]],
            observation_matrix_init=[[1.0]],
            params=["transition_covariance", "observation_covariance"],
            n_iter=20_000,
            acceleration=acceleration,
        )

    return "Nile local level (LGSSM)", 1e-8, make, (X,), {}


def robot_case():
    try:
        from pykalman.datasets import load_robot
    except ImportError:
        print("pykalman is not installed: the robot data are skipped.")
        return None
    data = load_robot()
    X = np.ma.filled(data.observations.astype(float), np.nan)
    offsets = np.asarray(data.transition_offsets, dtype=float)
    k = data.transition_matrix.shape[0]
    # pykalman's offset t drives the transition into row t + 1: our control of that row.
    controls = np.vstack([np.zeros((1, k)), offsets[: len(X) - 1]])

    def make(acceleration):
        return LinearGaussianSSM(
            k,
            transition_matrix_init=data.transition_matrix,
            observation_matrix_init=data.observation_matrix,
            transition_covariance_init=data.initial_transition_covariance,
            observation_covariance_init=data.initial_observation_covariance,
            transition_offset_init=np.zeros(k),
            observation_offset_init=data.observation_offset,
            control_matrix_init=np.eye(k),
            initial_state_mean_init=data.initial_state_mean,
            initial_state_covariance_init=data.initial_state_covariance,
            params=["transition_covariance", "observation_covariance"],
            n_iter=20_000,
            acceleration=acceleration,
        )

    return "robot, Q and R (LGSSM)", 1e-4, make, (X,), {"controls": controls}


def hmm_case():
    rng = np.random.default_rng(0)
    means = np.array([[0.0, 0.0], [1.5, 0.5], [0.5, 1.5]])
    transmat = np.array([[0.90, 0.05, 0.05], [0.05, 0.90, 0.05], [0.05, 0.05, 0.90]])
    states = np.zeros(4000, dtype=int)
    for t in range(1, len(states)):
        states[t] = rng.choice(3, p=transmat[states[t - 1]])
    X = means[states] + rng.normal(size=(len(states), 2))

    def make(acceleration):
        return GaussianHMM(
            3,
            covariance_type="full",
            n_iter=20_000,
            random_state=0,
            acceleration=acceleration,
        )

    return "3-state GaussianHMM, full", 1e-8, make, (X,), {}


def timed_fit(make, acceleration, tol, args, kwargs, repeats):
    best, model = np.inf, None
    for _ in range(repeats):
        candidate = make(acceleration).set_params(tol=tol)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            start = time.perf_counter()
            candidate.fit(*args, **kwargs)
            elapsed = time.perf_counter() - start
        if elapsed < best:
            best, model = elapsed, candidate
    return model, best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    cases = [case for case in (nile_case(), robot_case(), hmm_case()) if case is not None]
    print(f"load average {os.getloadavg()[0]:.2f} (1 min); best of {options.repeats}, 1 thread")
    header = (
        f"{'model':<28} {'tol':>6} {'acceleration':<12} {'iterations':>10} {'time (s)':>9} "
        f"{'log-likelihood':>16} {'gap to best':>11} {'converged':>9}"
    )
    print(header)
    print("-" * len(header))
    with threadpool_limits(1):
        for label, tol, make, args, kwargs in cases:
            results = {
                acceleration: timed_fit(make, acceleration, tol, args, kwargs, options.repeats)
                for acceleration in (None, "squarem")
            }
            best = max(model.lower_bound_ for model, _ in results.values())
            for acceleration, (model, elapsed) in results.items():
                print(
                    f"{label:<28} {tol:>6.0e} {str(acceleration):<12} {model.n_iter_:>10d} "
                    f"{elapsed:>9.3f} "
                    f"{model.lower_bound_:>16.6f} {best - model.lower_bound_:>11.2e} "
                    f"{str(model.converged_):>9}"
                )


if __name__ == "__main__":
    main()
