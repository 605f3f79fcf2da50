"""Where EM ends from each initialisation of LinearGaussianSSM: subspace vs factor analysis.

Run ``python benchmarks/bench_init.py``.  Each data set is fitted with
``init="factor_analysis"`` (``random_state=0``), with ``init="subspace"`` and,
where the generating model is known, from its true F, H, Q, R (everything else
at its default); every fit learns all parameters with the default ``tol``
(1e-4) and ``n_iter=1000``, so that it stops where EM converges.  The table
gives the final log-likelihood (``score``) and the EM iterations of each fit:

* ``track``: a 1-D constant-velocity track, position observed in noise,
  F = [[1, 1], [0, 1]], H = [1, 0], Q = 0.01 [[1/3, 1/2], [1/2, 1]], R = 1,
  400 rows (seed 0), two states;
* ``nile``: the Nile's annual flow (``skseq.datasets.load_nile``), one state;
* ``robot``: pykalman's robot positions (``pykalman.datasets.load_robot``,
  row 0 masked, without its transition offsets), five states; skipped when
  pykalman is not installed;
* ``random``: 20 random stable models (1-3 states, 1-3 features, spectral
  radius 0.5-0.95, 400 rows each), fitted with their true number of states;
  one line each, then a summary.

The log-likelihood includes the first rows' density under the initial-state
prior, which is diffuse when F has an eigenvalue of modulus 1 and then
depends on the state's basis: ``cond`` gives the log-likelihood of the rows
after the first ``n_components``, given those, which does not.
"""

import argparse
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from skseq.datasets import load_nile
from skseq.inference.kalman import LGSSMParameters, sample_lgssm
from skseq.lds import LinearGaussianSSM


def constant_velocity_track(n_samples=400, seed=0):
    """A 1-D constant-velocity track observed in noise, and its true F, H, Q, R."""
    rng = np.random.default_rng(seed)
    F = np.array([[1.0, 1.0], [0.0, 1.0]])
    H = np.array([[1.0, 0.0]])
    Q = 0.01 * np.array([[1 / 3, 1 / 2], [1 / 2, 1.0]])
    R = np.array([[1.0]])
    states = np.zeros((n_samples, 2))
    states[0] = [0.0, 1.0]
    for t in range(1, n_samples):
        states[t] = F @ states[t - 1] + rng.multivariate_normal(np.zeros(2), Q)
    X = states @ H.T + rng.normal(size=(n_samples, 1))
    return X, (F, H, Q, R)


def random_stable_model(seed, n_samples=400):
    """A random stable model (F's spectral radius in [0.5, 0.95]) and one sequence of it."""
    rng = np.random.default_rng(1000 + seed)
    k, p = 1 + seed % 3, 1 + (seed // 3) % 3
    F = rng.normal(size=(k, k))
    F *= rng.uniform(0.5, 0.95) / np.max(np.abs(np.linalg.eigvals(F)))
    H = rng.normal(size=(p, k))
    A, B = rng.normal(size=(k, k)), rng.normal(size=(p, p))
    Q = A @ A.T / k + 0.1 * np.eye(k)
    R = 0.5 * (B @ B.T / p + 0.1 * np.eye(p))
    sample = sample_lgssm(LGSSMParameters(F, H, Q, R), n_samples, random_state=seed)
    return sample.observations, (F, H, Q, R)


def robot_data():
    try:
        from pykalman.datasets import load_robot
    except ImportError:
        return None
    data = load_robot()
    return np.ma.filled(np.ma.asarray(data.observations, dtype=float), np.nan)


def fit(X, k, n_iter, **init):
    model = LinearGaussianSSM(k, n_iter=n_iter, random_state=0, **init)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X)
    return model


def conditional(model, X):
    k = model.n_components
    return model.score(X) - model.score(X[:k])


def compare(name, X, k, truth, n_iter):
    fits = {
        "factor_analysis": fit(X, k, n_iter, init="factor_analysis"),
        "subspace": fit(X, k, n_iter, init="subspace"),
    }
    if truth is not None:
        F, H, Q, R = truth
        fits["true"] = fit(
            X,
            k,
            n_iter,
            transition_matrix_init=F,
            observation_matrix_init=H,
            transition_covariance_init=Q,
            observation_covariance_init=R,
        )
    row = {key: (m.score(X), conditional(m, X), m.n_iter_) for key, m in fits.items()}
    cells = [
        f"{key} {value[0]:9.1f} (cond {value[1]:9.1f}, {value[2]:4d} it)"
        for key, value in row.items()
    ]
    print(f"{name:10s} " + "  ".join(cells))
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-iter", type=int, default=1000)
    parser.add_argument("--n-random", type=int, default=20)
    args = parser.parse_args()

    X, truth = constant_velocity_track()
    compare("track", X, 2, truth, args.n_iter)
    compare("nile", load_nile().data, 1, None, args.n_iter)
    robot = robot_data()
    if robot is None:
        print("pykalman is not installed: the robot data are skipped.")
    else:
        compare("robot", robot, 5, None, args.n_iter)
    rows = []
    for seed in range(args.n_random):
        X, truth = random_stable_model(seed)
        rows.append(compare(f"random {seed}", X, truth[0].shape[0], truth, args.n_iter))
    if rows:
        gain = np.array([row["subspace"][0] - row["factor_analysis"][0] for row in rows])
        gap = np.array([row["subspace"][0] - row["true"][0] for row in rows])
        iterations = np.array(
            [[row[key][2] for key in ("factor_analysis", "subspace")] for row in rows]
        )
        print(
            f"random models: subspace - factor analysis: median {np.median(gain):.2f}, "
            f"min {gain.min():.2f}, max {gain.max():.2f} nats, better in "
            f"{np.sum(gain > 0.01)}, worse in {np.sum(gain < -0.01)} of {len(rows)}; "
            f"subspace - true start: min {gap.min():.2f} nats; median iterations "
            f"{np.median(iterations[:, 0]):.0f} (factor analysis), "
            f"{np.median(iterations[:, 1]):.0f} (subspace)"
        )


if __name__ == "__main__":
    main()
