"""Subspace identification (canonical variate analysis) of a linear-Gaussian state-space model."""

import warnings

import numpy as np
import pytest
import scipy.linalg

from skseq.inference.kalman import LGSSMParameters, sample_lgssm
from skseq.inference.subspace import _default_n_lags, subspace_identification

# A stable system with a complex pair of poles, 0.8 exp(+-0.5 i), and a real one, 0.4.
ROTATION = 0.8 * np.array([[np.cos(0.5), -np.sin(0.5)], [np.sin(0.5), np.cos(0.5)]])
SYSTEM = dict(
    transition_matrix=scipy.linalg.block_diag(ROTATION, [[0.4]]),
    observation_matrix=np.array([[1.0, 0.0, 0.5], [0.3, 1.0, -1.0]]),
    transition_covariance=np.diag([1.0, 0.5, 0.8]),
    observation_covariance=np.array([[0.3, 0.1], [0.1, 0.4]]),
    observation_offset=np.array([2.0, -1.0]),
)


def simulate(n_samples, seed=0):
    return sample_lgssm(LGSSMParameters(**SYSTEM), n_samples, random_state=seed).observations


def observability(transition_matrix, observation_matrix, depth=4):
    blocks = [observation_matrix]
    for _ in range(depth - 1):
        blocks.append(blocks[-1] @ transition_matrix)
    return np.vstack(blocks)


def test_recovers_the_poles_and_the_observable_subspace_on_long_data():
    """Similarity-invariant quantities: the eigenvalues of F, and the column space of the
    observability matrix [H; HF; HF^2; HF^3] (principal angles to the true one)."""
    X = simulate(20_000)
    estimate = subspace_identification(X, 3)
    poles = np.sort_complex(np.linalg.eigvals(estimate.transition_matrix))
    true_poles = np.sort_complex(np.linalg.eigvals(SYSTEM["transition_matrix"]))
    np.testing.assert_allclose(poles, true_poles, atol=0.03)
    angles = scipy.linalg.subspace_angles(
        observability(estimate.transition_matrix, estimate.observation_matrix),
        observability(SYSTEM["transition_matrix"], SYSTEM["observation_matrix"]),
    )
    assert np.max(angles) < 0.05
    np.testing.assert_allclose(estimate.observation_offset, X.mean(axis=0))
    # three canonical correlations of the states (the third, of the pole 0.4, weak), then
    # noise (below 0.057, the largest that independent data of this size give)
    assert estimate.canonical_correlations[2] > 0.1 and estimate.canonical_correlations[3] < 0.057


def test_shapes_and_positive_definite_covariances():
    X = simulate(600)
    estimate = subspace_identification(X, 2, n_lags=5)
    assert estimate.transition_matrix.shape == (2, 2)
    assert estimate.observation_matrix.shape == (2, 2)
    assert estimate.transition_covariance.shape == (2, 2)
    assert estimate.observation_covariance.shape == (2, 2)
    assert estimate.observation_offset.shape == (2,)
    assert estimate.n_lags == 5
    assert estimate.canonical_correlations.shape == (10,)
    for covariance in (estimate.transition_covariance, estimate.observation_covariance):
        np.testing.assert_array_equal(covariance, covariance.T)
        assert np.linalg.eigvalsh(covariance)[0] > 0


def test_windows_stay_within_sequences_and_skip_missing_values():
    """Two sequences given by lengths give the estimate of the same rows joined by
    2 * n_lags missing rows (the windows across the join all hold a NaN), bit for bit."""
    X = simulate(900, seed=3)
    n_lags = _default_n_lags(2, 2, 900)
    by_lengths = subspace_identification(X, 2, lengths=[500, 400])
    gap = np.full((2 * n_lags, 2), np.nan)
    joined = np.vstack([X[:500], gap, X[500:]])
    by_gap = subspace_identification(joined, 2, n_lags=n_lags)
    for a, b in zip(by_lengths, by_gap):
        np.testing.assert_array_equal(a, b)


def test_scattered_missing_rows_still_recover_the_poles():
    X = simulate(20_000, seed=1)
    rng = np.random.default_rng(0)
    X[rng.choice(len(X), size=100, replace=False)] = np.nan
    X[rng.choice(len(X), size=100, replace=False), 1] = np.nan
    estimate = subspace_identification(X, 3)
    poles = np.sort_complex(np.linalg.eigvals(estimate.transition_matrix))
    true_poles = np.sort_complex(np.linalg.eigvals(SYSTEM["transition_matrix"]))
    np.testing.assert_allclose(poles, true_poles, atol=0.05)


def test_masked_entries_are_missing_values():
    X = simulate(400, seed=2)
    masked = np.ma.masked_array(X, mask=np.zeros_like(X, dtype=bool))
    masked[[10, 200]] = np.ma.masked
    with_nan = X.copy()
    with_nan[[10, 200]] = np.nan
    for a, b in zip(subspace_identification(masked, 2), subspace_identification(with_nan, 2)):
        np.testing.assert_array_equal(a, b)


def test_more_states_than_the_windows_determine_is_an_error():
    X = simulate(400)
    with pytest.raises(ValueError, match="determine at most 2 states, fewer than n_state=5"):
        subspace_identification(X, 5, n_lags=2)
    with pytest.raises(ValueError, match="complete windows"):
        subspace_identification(X[:30], 2, n_lags=8)
    with pytest.raises(ValueError, match="complete windows"):
        subspace_identification(X, 2, lengths=[10] * 40, n_lags=8)
    with pytest.raises(ValueError, match="cannot determine 1 states"):
        subspace_identification(np.ones((100, 2)), 1)


def test_more_states_than_the_data_support_warns():
    """Data of one state (an AR(1) seen through H) support one state, not two: the second
    canonical correlation is at the level of independent data."""
    rng = np.random.default_rng(0)
    state = np.zeros(500)
    for t in range(1, 500):
        state[t] = 0.7 * state[t - 1] + rng.normal()
    X = np.outer(state, [1.0, -2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        subspace_identification(X, 1)
    with pytest.warns(UserWarning, match="support fewer than n_state=2 states"):
        subspace_identification(X, 2)


def test_inputs_are_checked():
    X = simulate(400)
    with pytest.raises(ValueError, match="n_state"):
        subspace_identification(X, 0)
    with pytest.raises(TypeError, match="n_lags"):
        subspace_identification(X, 1, n_lags=2.5)
    with pytest.raises(ValueError, match="infinity"):
        subspace_identification(np.vstack([X, [[np.inf, 0.0]]]), 1)
    with pytest.raises(ValueError, match="2-D"):
        subspace_identification(X[:, 0], 1)
    before = X.copy()
    subspace_identification(X, 2)
    np.testing.assert_array_equal(X, before)


@pytest.mark.parametrize(
    ("n_state", "n_features", "n_rows", "expected"),
    [
        (2, 1, 400, 8),
        (1, 1, 100, 8),
        (3, 2, 900, 8),
        (20, 1, 4000, 42),
        (1, 1, 12, 3),
        (4, 3, 40, 3),
    ],
)
def test_default_n_lags(n_state, n_features, n_rows, expected):
    assert _default_n_lags(n_state, n_features, n_rows) == expected
