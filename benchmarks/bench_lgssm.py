"""Linear-Gaussian SSM: skseq against statsmodels and pykalman, in one process.

Run ``python benchmarks/bench_lgssm.py``.  For T = 10 000 rows and
(state x observation) dimensions 4x4 and 16x8, on one thread (threadpoolctl):

* the RTS smoother (means, covariances, log-likelihood): skseq's
  ``kalman_smoother`` against statsmodels' ``KalmanSmoother.smooth`` and
  pykalman's ``KalmanFilter.smooth``;
* one EM iteration from given parameters: ``LinearGaussianSSM(n_iter=1).fit``
  against pykalman's ``KalmanFilter.em(n_iter=1)``.

Each time is the best of several repeats, skseq and the peer run alternately
so that both see the same load; wall-clock and CPU time are both printed (on
a shared machine the CPU time is the steadier).  The peers are optional: a
missing one is skipped with a message.  The script also prints how far the
smoothed means are from each peer's.
"""

import argparse
import time
import warnings
from functools import partial

import numpy as np
from threadpoolctl import threadpool_limits

from skseq.inference.kalman import LGSSMParameters, kalman_smoother
from skseq.lds import LinearGaussianSSM

N_SAMPLES = 10_000
EM_LABEL = "skseq one EM iteration"
SHAPES = [(4, 4), (16, 8)]


def random_model(rng, n_state, n_obs):
    transition = rng.normal(size=(n_state, n_state))
    transition *= 0.95 / np.max(np.abs(np.linalg.eigvals(transition)))
    a = rng.normal(size=(n_state, n_state))
    c = rng.normal(size=(n_obs, n_obs))
    return dict(
        transition_matrix=transition,
        observation_matrix=rng.normal(size=(n_obs, n_state)),
        transition_covariance=a @ a.T / n_state + 0.1 * np.eye(n_state),
        observation_covariance=c @ c.T / n_obs + 0.1 * np.eye(n_obs),
        transition_offset=rng.normal(scale=0.1, size=n_state),
        observation_offset=rng.normal(size=n_obs),
        initial_state_mean=np.zeros(n_state),
        initial_state_covariance=np.eye(n_state),
    )


def simulate(params, n_samples, rng):
    F, H = params["transition_matrix"], params["observation_matrix"]
    k, p = H.shape[1], H.shape[0]
    state_noise = rng.multivariate_normal(np.zeros(k), params["transition_covariance"], n_samples)
    observation_noise = rng.multivariate_normal(
        np.zeros(p), params["observation_covariance"], n_samples
    )
    states = np.zeros((n_samples, k))
    for t in range(1, n_samples):
        states[t] = F @ states[t - 1] + params["transition_offset"] + state_noise[t]
    return states @ H.T + params["observation_offset"] + observation_noise


def compare(ours, theirs, repeats, ours_repeats=None):
    """Best wall-clock and CPU times of two functions, run alternately.

    Alternating keeps both exposed to the same load on a shared machine; the
    CPU time (``time.process_time``) does not count time spent waiting for a
    core.  ``theirs`` may be None.  ``ours`` runs ``ours_repeats`` times in all
    (default ``repeats``): the extra runs come after the alternating ones, so a
    slow peer timed once is compared with skseq's best of several.  Returns
    ``{"ours": (wall, cpu, result), "theirs": (...)}``.
    """
    runs = {"ours": ours, "theirs": theirs}
    times = {name: ([], [], None) for name, function in runs.items() if function is not None}
    for _ in range(repeats):
        for name, (walls, cpus, _) in list(times.items()):
            wall, cpu = time.perf_counter(), time.process_time()
            result = runs[name]()
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
            times[name] = (walls, cpus, result)
    for _ in range(max(0, (ours_repeats or repeats) - repeats)):
        walls, cpus, _ = times["ours"]
        wall, cpu = time.perf_counter(), time.process_time()
        result = ours()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        times["ours"] = (walls, cpus, result)
    return {name: (min(walls), min(cpus), result) for name, (walls, cpus, result) in times.items()}


def report(label, ours, theirs, ratio_name, inverse=False):
    wall, cpu, _ = theirs
    ratio_wall = wall / ours[0] if inverse else ours[0] / wall
    ratio_cpu = cpu / ours[1] if inverse else ours[1] / cpu
    fmt = "{:.0f}x" if inverse else "{:.2f}"
    print(
        f"{label:<30s} {wall * 1e3:9.1f} ms wall {cpu * 1e3:9.1f} ms cpu   {ratio_name} = "
        f"{fmt.format(ratio_wall)} (wall), {fmt.format(ratio_cpu)} (cpu)"
    )


def statsmodels_smoother(params, X):
    try:
        from statsmodels.tsa.statespace.kalman_smoother import KalmanSmoother
    except ImportError:
        return None
    k, p = params["transition_matrix"].shape[0], X.shape[1]
    smoother = KalmanSmoother(k_endog=p, k_states=k, k_posdef=k)
    smoother.bind(X.copy())
    smoother["design"] = params["observation_matrix"]
    smoother["obs_cov"] = params["observation_covariance"]
    smoother["transition"] = params["transition_matrix"]
    smoother["selection"] = np.eye(k)
    smoother["state_cov"] = params["transition_covariance"]
    smoother["obs_intercept"] = params["observation_offset"][:, None]
    smoother["state_intercept"] = params["transition_offset"][:, None]
    smoother.initialize_known(params["initial_state_mean"], params["initial_state_covariance"])
    return smoother


def pykalman_filter(params):
    try:
        import pykalman
    except ImportError:
        return None
    return pykalman.KalmanFilter(
        transition_matrices=params["transition_matrix"],
        observation_matrices=params["observation_matrix"],
        transition_covariance=params["transition_covariance"],
        observation_covariance=params["observation_covariance"],
        transition_offsets=params["transition_offset"],
        observation_offsets=params["observation_offset"],
        initial_state_mean=params["initial_state_mean"],
        initial_state_covariance=params["initial_state_covariance"],
        em_vars="all",
    )


def one_em_iteration(params, X):
    model = LinearGaussianSSM(
        params["transition_matrix"].shape[0],
        n_iter=1,
        params=[
            "transition_matrix",
            "observation_matrix",
            "transition_covariance",
            "observation_covariance",
            "transition_offset",
            "observation_offset",
            "initial_state_mean",
            "initial_state_covariance",
        ],
        **{f"{name}_init": value for name, value in params.items()},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(X)


def run(repeats, pykalman_repeats):
    rng = np.random.default_rng(0)
    for n_state, n_obs in SHAPES:
        params = random_model(rng, n_state, n_obs)
        X = simulate(params, N_SAMPLES, rng)
        print(f"\n== T = {N_SAMPLES}, state {n_state} x observation {n_obs} (one thread) ==")
        ours_smoother = partial(kalman_smoother, LGSSMParameters(**params), X)
        smoother = statsmodels_smoother(params, X)
        times = compare(ours_smoother, smoother.smooth if smoother else None, repeats)
        wall, cpu, result = times["ours"]
        print(f"{'skseq kalman_smoother':<30s} {wall * 1e3:9.1f} ms wall {cpu * 1e3:9.1f} ms cpu")
        if smoother is None:
            print("statsmodels not installed: skipped")
        else:
            report(
                "statsmodels KalmanSmoother", times["ours"], times["theirs"], "skseq / statsmodels"
            )
            error = np.abs(times["theirs"][2].smoothed_state.T - result.smoothed_means).max()
            print(f"{'':<30s} max |smoothed means difference| {error:.1e}")

        kalman = pykalman_filter(params)
        if kalman is None:
            print("pykalman not installed: skipped")
        else:
            times = compare(ours_smoother, partial(kalman.smooth, X), pykalman_repeats, repeats)
            report(
                "pykalman smooth", times["ours"], times["theirs"], "pykalman / skseq", inverse=True
            )
            error = np.abs(times["theirs"][2][0] - result.smoothed_means).max()
            print(f"{'':<30s} max |smoothed means difference| {error:.1e}")

        ours_em = partial(one_em_iteration, params, X)
        if kalman is None:
            times = compare(ours_em, None, repeats)
            wall, cpu, _ = times["ours"]
            print(f"{EM_LABEL:<30s} {wall * 1e3:9.1f} ms wall {cpu * 1e3:9.1f} ms cpu")
        else:
            times = compare(ours_em, partial(kalman.em, X, n_iter=1), pykalman_repeats, repeats)
            wall, cpu, _ = times["ours"]
            print(f"{EM_LABEL:<30s} {wall * 1e3:9.1f} ms wall {cpu * 1e3:9.1f} ms cpu")
            report(
                "pykalman em(n_iter=1)",
                times["ours"],
                times["theirs"],
                "pykalman / skseq",
                inverse=True,
            )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="repeats of each skseq timing")
    parser.add_argument(
        "--pykalman-repeats", type=int, default=1, help="repeats of each pykalman timing (slow)"
    )
    arguments = parser.parse_args()
    with threadpool_limits(limits=1):
        run(arguments.repeats, arguments.pykalman_repeats)


if __name__ == "__main__":
    main()
