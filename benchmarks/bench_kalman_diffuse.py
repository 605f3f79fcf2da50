"""The exact diffuse Kalman filter: skseq against its ordinary filter and statsmodels'.

Run ``python benchmarks/bench_kalman_diffuse.py``.  On one thread
(threadpoolctl), for

* the Nile's local level (100 rows, k = 1) at Durbin & Koopman's estimates;
* a local linear trend with a dummy seasonal of period 12 (k = 13, the
  seasonal's lagged states with a small shock too, as skseq's Q is positive
  definite) on a simulated series of ``--n-samples`` rows (5 000 by default);
* a two-series model (k = 3, one diffuse coordinate, correlated noises),

it times ``kalman_filter(parameters, X, diffuse=True)`` (the exact diffuse
filter, every row's predicted and filtered states kept), the ordinary
``kalman_filter(parameters, X)`` with the same P_* as prior, and statsmodels'
``KalmanFilter.filter()`` with the exact diffuse initialisation on the same
matrices (its filter results, every row's states kept too).  Times are the
best of ``--repeats``, run alternately (``compare`` of ``bench_lgssm.py``);
the script prints the load average and checks the two diffuse
log-likelihoods agree.
"""

import argparse
import os

import numpy as np
from bench_lgssm import compare
from threadpoolctl import threadpool_limits

from skseq.datasets import load_nile
from skseq.inference.kalman import LGSSMParameters, kalman_filter


def statsmodels_filter(parameters, X, diffuse):
    """statsmodels' exact diffuse filter of the same model, or None without statsmodels."""
    try:
        from statsmodels.tsa.statespace.initialization import Initialization
        from statsmodels.tsa.statespace.kalman_filter import KalmanFilter
    except ImportError:
        return None
    k = parameters.transition_matrix.shape[0]
    model = KalmanFilter(
        X.shape[1],
        k,
        design=parameters.observation_matrix,
        obs_cov=parameters.observation_covariance,
        transition=parameters.transition_matrix,
        selection=np.eye(k),
        state_cov=parameters.transition_covariance,
    )
    model.bind(X)
    initialization = Initialization(k)
    for i in range(k):
        if diffuse[i]:
            initialization.set(i, "diffuse")
        else:
            initialization.set(
                i,
                "known",
                constant=[0.0],
                stationary_cov=parameters.initial_state_covariance[i : i + 1, i : i + 1],
            )
    model.initialization = initialization
    return model.filter


def local_linear_trend_seasonal(n_samples, rng, period=12):
    k = 2 + period - 1
    transition = np.zeros((k, k))
    transition[0, :2] = 1.0
    transition[1, 1] = 1.0
    transition[2, 2:] = -1.0
    transition[3:, 2:-1] = np.eye(period - 2)
    observation = np.zeros((1, k))
    observation[0, [0, 2]] = 1.0
    shocks = np.array([1.0, 0.01, 0.5] + [1e-4] * (period - 2))
    parameters = LGSSMParameters(
        transition,
        observation,
        np.diag(shocks),
        [[2.0]],
        initial_state_covariance=np.zeros((k, k)),
    )
    state = np.zeros(k)
    X = np.empty((n_samples, 1))
    for t in range(n_samples):
        state = transition @ state + rng.normal(size=k) * np.sqrt(shocks)
        X[t] = observation @ state + rng.normal() * np.sqrt(2.0)
    return parameters, X


def bivariate(n_samples, rng):
    stationary = np.diag([0.5 / (1 - 0.36), 0.8 / (1 - 0.09)])
    star = np.zeros((3, 3))
    star[1:, 1:] = stationary
    parameters = LGSSMParameters(
        np.diag([1.0, 0.6, -0.3]),
        np.array([[1.0, 1.0, 0.0], [0.7, 0.0, 1.0]]),
        np.diag([0.3, 0.5, 0.8]),
        np.array([[1.0, 0.4], [0.4, 0.7]]),
        initial_state_covariance=star,
    )
    X = rng.normal(size=(n_samples, 2)).cumsum(axis=0) * 0.3 + rng.normal(size=(n_samples, 2))
    return parameters, X


def run(name, parameters, X, diffuse, repeats):
    parameters = LGSSMParameters(*(None if v is None else np.asarray(v, float) for v in parameters))
    k = parameters.transition_matrix.shape[0]
    print(f"\n{name}: {X.shape[0]} rows, k = {k}, p = {X.shape[1]}")
    ordinary = parameters._replace(
        initial_state_covariance=parameters.initial_state_covariance + 1e6 * np.diag(diffuse)
    )
    peer = statsmodels_filter(parameters, X, diffuse)
    timed = compare(lambda: kalman_filter(parameters, X, diffuse=diffuse), peer, repeats)
    plain = compare(lambda: kalman_filter(ordinary, X), None, repeats)
    ours = timed["ours"]
    print(
        f"  exact diffuse filter   {ours[0] * 1e3:8.3f} ms wall {ours[1] * 1e3:8.3f} ms cpu, "
        f"{ours[2].n_diffuse[0]} diffuse rows, log-likelihood {ours[2].log_likelihood:.6f}"
    )
    print(
        f"  ordinary filter        {plain['ours'][0] * 1e3:8.3f} ms wall "
        f"{plain['ours'][1] * 1e3:8.3f} ms cpu   diffuse / ordinary = "
        f"{ours[0] / plain['ours'][0]:.2f} (wall), {ours[1] / plain['ours'][1]:.2f} (cpu)"
    )
    if peer is not None:
        wall, cpu, result = timed["theirs"]
        print(
            f"  statsmodels diffuse    {wall * 1e3:8.3f} ms wall {cpu * 1e3:8.3f} ms cpu, "
            f"log-likelihood {result.llf:.6f} (difference "
            f"{abs(result.llf - ours[2].log_likelihood):.1e})   statsmodels / skseq = "
            f"{wall / ours[0]:.1f} (wall), {cpu / ours[1]:.1f} (cpu)"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n-samples", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=15)
    arguments = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    rng = np.random.default_rng(0)
    with threadpool_limits(1):
        nile = load_nile().data.astype(float)
        level = LGSSMParameters(
            [[1.0]], [[1.0]], [[1469.1]], [[15099.0]], initial_state_covariance=[[0.0]]
        )
        run("Nile local level", level, nile, np.array([True]), arguments.repeats)
        parameters, X = local_linear_trend_seasonal(arguments.n_samples, rng)
        run(
            "local linear trend + seasonal(12)",
            parameters,
            X,
            np.ones(parameters.transition_matrix.shape[0], dtype=bool),
            arguments.repeats,
        )
        parameters, X = bivariate(arguments.n_samples, rng)
        run(
            "two series, one diffuse coordinate",
            parameters,
            X,
            np.array([True, False, False]),
            arguments.repeats,
        )
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
