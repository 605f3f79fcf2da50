"""Time-varying linear-Gaussian systems (pykalman's leading time axis).

Proof: pykalman's KalmanFilter as the reference (filter, smoother,
log-likelihood); the exact joint Gaussian of a tiny model, by enumeration of
its covariance, for partly missing rows; constant arrays repeated along time
give bit for bit the constant path; the sampler follows the convention (row t
from the transition of step t - 1 and the observation of step t).
"""

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from skseq.inference.kalman import (
    LGSSMParameters,
    kalman_filter,
    kalman_filter_step,
    kalman_forecast,
    kalman_forward_smoothing,
    kalman_smoother,
    sample_lgssm,
)
from skseq.inference.kalman_mle import lgssm_log_likelihood_gradient
from skseq.lds import LinearGaussianSSM


def _spd(rng, n_steps, dim):
    a = rng.normal(size=(n_steps, dim, dim))
    return a @ np.swapaxes(a, 1, 2) / dim + 0.2 * np.eye(dim)


def time_varying_model(rng, n_timesteps, k, p, *, varying_observation_covariance=True):
    """Every array that may vary has its time axis (pykalman's lengths)."""
    observation_covariance = _spd(rng, n_timesteps, p)
    if not varying_observation_covariance:
        observation_covariance = observation_covariance[0]
    return LGSSMParameters(
        transition_matrix=0.6 * rng.normal(size=(n_timesteps - 1, k, k)),
        observation_matrix=rng.normal(size=(n_timesteps, p, k)),
        transition_covariance=_spd(rng, n_timesteps - 1, k),
        observation_covariance=observation_covariance,
        transition_offset=rng.normal(scale=0.3, size=(n_timesteps - 1, k)),
        observation_offset=rng.normal(size=(n_timesteps, p)),
        initial_state_mean=rng.normal(size=k),
        initial_state_covariance=_spd(rng, 1, k)[0],
    )


def _problem(seed, n_timesteps, k, p):
    """A time-varying model and one sequence of data for it."""
    rng = np.random.default_rng(seed)
    return time_varying_model(rng, n_timesteps, k, p), rng.normal(size=(n_timesteps, p))


def _pykalman(parameters):
    pykalman = pytest.importorskip("pykalman")
    return pykalman.KalmanFilter(
        transition_matrices=parameters.transition_matrix,
        observation_matrices=parameters.observation_matrix,
        transition_covariance=parameters.transition_covariance,
        observation_covariance=parameters.observation_covariance,
        transition_offsets=parameters.transition_offset,
        observation_offsets=parameters.observation_offset,
        initial_state_mean=parameters.initial_state_mean,
        initial_state_covariance=parameters.initial_state_covariance,
    )


@pytest.mark.parametrize("k, p", [(1, 1), (2, 3), (3, 2)])
def test_filter_and_smoother_equal_pykalman(k, p):
    rng = np.random.default_rng(k * 10 + p)
    n = 25
    parameters = time_varying_model(rng, n, k, p)
    X = rng.normal(size=(n, p))
    X[[4, 11]] = np.nan  # pykalman skips a masked row whole
    reference = _pykalman(parameters)
    masked = np.ma.masked_invalid(X)
    filtered_means, filtered_covariances = reference.filter(masked)
    smoothed_means, smoothed_covariances = reference.smooth(masked)

    filtered = kalman_filter(parameters, X)
    smoothed = kalman_smoother(parameters, X)
    np.testing.assert_allclose(filtered.filtered_means, filtered_means, rtol=0, atol=1e-8)
    np.testing.assert_allclose(
        filtered.filtered_covariances, filtered_covariances, rtol=0, atol=1e-8
    )
    np.testing.assert_allclose(smoothed.smoothed_means, smoothed_means, rtol=0, atol=1e-8)
    np.testing.assert_allclose(
        smoothed.smoothed_covariances, smoothed_covariances, rtol=0, atol=1e-8
    )


def _joint_gaussian(parameters, n):
    """Mean and covariance of (z_1..z_n, x_1..x_n), stacked, by propagating the model."""
    F, H, Q, R, b, d, _, mu0, sigma0 = parameters
    k, p = mu0.shape[0], H.shape[1]
    # z = A (e_0, w_1..w_{n-1}) + c: each state a linear map of the initial state and noises.
    maps = [np.eye(k, k * n)]
    means = [mu0]
    for t in range(1, n):
        step = F[t - 1] @ maps[-1]
        step[:, t * k : (t + 1) * k] += np.eye(k)
        maps.append(step)
        means.append(F[t - 1] @ means[-1] + b[t - 1])
    noise_cov = np.zeros((k * n, k * n))
    noise_cov[:k, :k] = sigma0
    for t in range(1, n):
        noise_cov[t * k : (t + 1) * k, t * k : (t + 1) * k] = Q[t - 1]
    A = np.vstack(maps)
    state_cov = A @ noise_cov @ A.T
    state_mean = np.concatenate(means)
    Hbig = np.zeros((p * n, k * n))
    Rbig = np.zeros((p * n, p * n))
    for t in range(n):
        Hbig[t * p : (t + 1) * p, t * k : (t + 1) * k] = H[t]
        Rbig[t * p : (t + 1) * p, t * p : (t + 1) * p] = R[t]
    mean = np.concatenate([state_mean, Hbig @ state_mean + d.ravel()])
    cov = np.block(
        [[state_cov, state_cov @ Hbig.T], [Hbig @ state_cov, Hbig @ state_cov @ Hbig.T + Rbig]]
    )
    return mean, cov


def _condition(mean, cov, keep, given, values):
    gain = np.linalg.solve(cov[np.ix_(given, given)], cov[np.ix_(given, keep)]).T
    return (
        mean[keep] + gain @ (values - mean[given]),
        cov[np.ix_(keep, keep)] - gain @ cov[np.ix_(given, keep)],
    )


def test_exact_joint_gaussian_with_missing_entries():
    n, k, p = 4, 2, 2
    parameters, X = _problem(5, n, k, p)
    X[1, 0] = np.nan  # one entry of a row
    X[2] = np.nan  # a whole row
    mean, cov = _joint_gaussian(parameters, n)
    observed = np.flatnonzero(~np.isnan(X.ravel())) + k * n
    values = X.ravel()[observed - k * n]
    filtered = kalman_filter(parameters, X)
    smoothed = kalman_smoother(parameters, X)

    expected = multivariate_normal(mean[observed], cov[np.ix_(observed, observed)]).logpdf(values)
    assert abs(filtered.log_likelihood - expected) < 1e-10
    for t in range(n):
        state = np.arange(t * k, (t + 1) * k)
        smoothed_mean, smoothed_cov = _condition(mean, cov, state, observed, values)
        np.testing.assert_allclose(smoothed.smoothed_means[t], smoothed_mean, atol=1e-10)
        np.testing.assert_allclose(smoothed.smoothed_covariances[t], smoothed_cov, atol=1e-10)
        past = observed[observed < k * n + (t + 1) * p]
        filtered_mean, filtered_cov = _condition(mean, cov, state, past, X.ravel()[past - k * n])
        np.testing.assert_allclose(filtered.filtered_means[t], filtered_mean, atol=1e-10)
        np.testing.assert_allclose(filtered.filtered_covariances[t], filtered_cov, atol=1e-10)
    # Cov(z_t, z_{t-1} | x), the smoother's cross covariances.
    for t in range(1, n):
        both = np.arange((t - 1) * k, (t + 1) * k)
        _, pair_cov = _condition(mean, cov, both, observed, values)
        np.testing.assert_allclose(smoothed.cross_covariances[t], pair_cov[k:, :k], atol=1e-10)


def _repeated(parameters, n):
    """The constant parameters with every time-varying-capable array repeated along time."""
    values = parameters._asdict()
    for name in ("transition_matrix", "transition_covariance", "transition_offset"):
        values[name] = np.repeat(np.asarray(values[name])[None], n - 1, axis=0)
    for name in ("observation_matrix", "observation_covariance", "observation_offset"):
        values[name] = np.repeat(np.asarray(values[name])[None], n, axis=0)
    return LGSSMParameters(**values)


def test_repeated_constant_arrays_equal_the_constant_path_exactly():
    rng = np.random.default_rng(7)
    n, k, p = 40, 3, 2
    constant = LGSSMParameters(
        0.6 * rng.normal(size=(k, k)),
        rng.normal(size=(p, k)),
        _spd(rng, 1, k)[0],
        _spd(rng, 1, p)[0],
        rng.normal(size=k),
        rng.normal(size=p),
        None,
        rng.normal(size=k),
        _spd(rng, 1, k)[0],
    )
    repeated = _repeated(constant, n)
    X = rng.normal(size=(2 * n, p))
    X[3, 1] = X[50] = np.nan
    for function in (kalman_filter, kalman_smoother):
        a = function(constant, X, lengths=[n, n])
        b = function(repeated, X, lengths=[n, n])
        for left, right in zip(a, b):
            np.testing.assert_array_equal(left, right)


def test_several_sequences_each_start_at_step_zero():
    rng = np.random.default_rng(8)
    n, k, p = 12, 2, 2
    parameters = time_varying_model(rng, n, k, p)
    X = rng.normal(size=(2 * n, p))
    both = kalman_smoother(parameters, X, lengths=[n, n])
    for s in range(2):
        alone = kalman_smoother(parameters, X[s * n : (s + 1) * n])
        np.testing.assert_array_equal(
            both.smoothed_means[s * n : (s + 1) * n], alone.smoothed_means
        )
        assert both.sequence_log_likelihood[s] == alone.log_likelihood


def test_transitions_of_n_timesteps_leave_the_last_unused():
    # pykalman indexes transitions by t - 1 and so accepts n_timesteps of them.
    rng = np.random.default_rng(9)
    n, k, p = 10, 2, 1
    parameters = time_varying_model(rng, n, k, p)
    longer = parameters._replace(
        transition_matrix=np.concatenate([parameters.transition_matrix, 9 * np.eye(k)[None]]),
        transition_covariance=np.concatenate([parameters.transition_covariance, [np.eye(k)]]),
        transition_offset=np.concatenate([parameters.transition_offset, [np.ones(k)]]),
    )
    X = rng.normal(size=(n, p))
    np.testing.assert_array_equal(
        kalman_smoother(parameters, X).smoothed_means, kalman_smoother(longer, X).smoothed_means
    )


def test_only_the_transition_varies():
    rng = np.random.default_rng(10)
    n, k, p = 15, 2, 2
    F = 0.5 * rng.normal(size=(n - 1, k, k))
    parameters = LGSSMParameters(F, rng.normal(size=(p, k)), np.eye(k), np.eye(p))
    X = rng.normal(size=(n, p))
    means, covariances = _pykalman(
        parameters._replace(
            transition_offset=np.zeros(k),
            observation_offset=np.zeros(p),
            initial_state_mean=np.zeros(k),
            initial_state_covariance=np.eye(k),
        )
    ).smooth(X)
    result = kalman_smoother(parameters, X)
    np.testing.assert_allclose(result.smoothed_means, means, atol=1e-8)
    np.testing.assert_allclose(result.smoothed_covariances, covariances, atol=1e-8)


def test_sample_follows_the_time_convention():
    rng = np.random.default_rng(11)
    n, k, p = 6, 2, 3
    parameters = time_varying_model(rng, n, k, p)
    X, Z = sample_lgssm(parameters, n, random_state=0)
    draws = np.random.RandomState(0)
    state_noise = draws.standard_normal((n, k))
    observation_noise = draws.standard_normal((n, p))
    F, H, Q, R, b, d, _, mu0, sigma0 = parameters
    z = mu0 + np.linalg.cholesky(sigma0) @ state_noise[0]
    for t in range(n):
        if t > 0:
            z = F[t - 1] @ z + b[t - 1] + np.linalg.cholesky(Q[t - 1]) @ state_noise[t]
        np.testing.assert_allclose(Z[t], z, rtol=1e-12, atol=1e-12)
        x = H[t] @ z + d[t] + np.linalg.cholesky(R[t]) @ observation_noise[t]
        np.testing.assert_allclose(X[t], x, rtol=1e-12, atol=1e-12)


def test_sample_of_one_row_has_no_transition():
    rng = np.random.default_rng(12)
    parameters = time_varying_model(rng, 2, 2, 1)
    one = parameters._replace(  # one observation step; the transition's step is unused
        observation_matrix=parameters.observation_matrix[:1],
        observation_covariance=parameters.observation_covariance[:1],
        observation_offset=parameters.observation_offset[:1],
    )
    X, Z = sample_lgssm(one, 1, random_state=0)
    draws = np.random.RandomState(0)
    z = parameters.initial_state_mean + np.linalg.cholesky(
        parameters.initial_state_covariance
    ) @ draws.standard_normal(2)
    np.testing.assert_allclose(Z[0], z, rtol=1e-12)
    assert X.shape == (1, 1)


# -- errors -----------------------------------------------------------------------


def test_errors_name_the_time_axis():
    n, k, p = 8, 2, 2
    parameters, X = _problem(13, n, k, p)
    with pytest.raises(ValueError, match="every sequence of X must have 8 rows"):
        kalman_filter(parameters, X[:5])
    with pytest.raises(ValueError, match="sequence 1 has 4"):
        kalman_filter(parameters, np.vstack([X, X[:4]]), lengths=[8, 4])
    with pytest.raises(ValueError, match="time axes of the observation arrays differ"):
        kalman_filter(parameters._replace(observation_offset=np.zeros((n - 1, p))), X)
    with pytest.raises(ValueError, match="transition arrays have 3 time steps"):
        kalman_filter(
            parameters._replace(
                transition_matrix=parameters.transition_matrix[:3],
                transition_covariance=parameters.transition_covariance[:3],
                transition_offset=parameters.transition_offset[:3],
            ),
            X,
        )
    bad = parameters.transition_covariance.copy()
    bad[5] = -np.eye(k)
    with pytest.raises(ValueError, match=r"transition_covariance\[5\] must be positive definite"):
        kalman_filter(parameters._replace(transition_covariance=bad), X)
    with pytest.raises(ValueError, match=r"observation_matrix\[0\] must have shape \(2, 2\)"):
        kalman_filter(parameters._replace(observation_matrix=np.zeros((n, p, k + 1))), X)
    with pytest.raises(ValueError, match="empty time axis"):
        kalman_filter(parameters._replace(observation_offset=np.zeros((0, p))), X)
    with pytest.raises(ValueError, match="must have 8 rows"):
        sample_lgssm(parameters, 5)


def test_constant_only_functions_refuse_a_time_varying_model():
    n, k, p = 8, 2, 2
    parameters, X = _problem(14, n, k, p)
    before = parameters.transition_matrix.copy()
    with pytest.raises(ValueError, match="kalman_forecast needs a constant model"):
        kalman_forecast(parameters, X, 2)
    with pytest.raises(ValueError, match="kalman_filter_step needs a constant model"):
        kalman_filter_step(parameters, X[0])
    with pytest.raises(ValueError, match="Exact maximum likelihood needs a constant model"):
        lgssm_log_likelihood_gradient(parameters, X)
    np.testing.assert_array_equal(parameters.transition_matrix, before)


# -- LinearGaussianSSM ------------------------------------------------------------


def _fitted_with(parameters, n_features):
    model = LinearGaussianSSM(parameters.initial_state_mean.shape[0])
    for name, value in parameters._asdict().items():
        setattr(model, f"{name}_", value)
    model.control_matrix_ = np.zeros((model.n_components, 0))
    model.n_features_in_ = n_features
    model.n_controls_ = 0
    return model


def test_log_likelihood_and_estimator_equal_pykalman():
    # pykalman's loglikelihood reads observation_covariance as one matrix, so
    # it is constant here; everything else varies.
    rng = np.random.default_rng(15)
    n, k, p = 20, 2, 2
    parameters = time_varying_model(rng, n, k, p, varying_observation_covariance=False)
    X = rng.normal(size=(n, p))
    X[6] = np.nan
    model = _fitted_with(parameters, p)
    reference = _pykalman(parameters)
    masked = np.ma.masked_invalid(X)
    for ours, theirs in zip(model.filter(X), reference.filter(masked)):
        np.testing.assert_allclose(ours, theirs, atol=1e-8)
    for ours, theirs in zip(model.smooth(X), reference.smooth(masked)):
        np.testing.assert_allclose(ours, theirs, atol=1e-8)
    np.testing.assert_allclose(model.transform(X), reference.smooth(masked)[0], atol=1e-8)
    expected = reference.loglikelihood(masked)
    assert abs(model.score(X) - expected) < 1e-8
    assert abs(kalman_filter(parameters, X).log_likelihood - expected) < 1e-8
    assert abs(kalman_smoother(parameters, X).log_likelihood - expected) < 1e-8
    assert model.score_sequences(np.vstack([X, X]), lengths=[n, n]).shape == (2,)
    assert model.sample(n, random_state=0)[0].shape == (n, p)


def test_estimator_refuses_time_varying_where_it_cannot():
    n, k, p = 12, 2, 2
    parameters, X = _problem(16, n, k, p)
    model = _fitted_with(parameters, p)
    with pytest.raises(ValueError, match="must have 12 rows"):
        model.score(X[:6])
    with pytest.raises(ValueError, match="forecast needs a constant model"):
        model.forecast(X, 2)
    with pytest.raises(ValueError, match="aic needs a constant model"):
        model.aic(X)
    with pytest.raises(ValueError, match="partial_fit needs a constant model"):
        model.partial_fit(X)
    with pytest.raises(ValueError, match="filter_update needs a constant model"):
        model.filter_update(X[0])
    with pytest.raises(ValueError, match="fit does not learn time-varying matrices"):
        LinearGaussianSSM(k, transition_matrix_init=parameters.transition_matrix).fit(X)
    with pytest.raises(ValueError, match="fit does not learn time-varying matrices"):
        LinearGaussianSSM(
            k, fit_method="mle", transition_matrix_init=parameters.transition_matrix
        ).fit(X)
    with pytest.raises(ValueError, match="fit does not learn time-varying matrices"):
        LinearGaussianSSM(
            k, observation_covariance_init=parameters.observation_covariance
        ).partial_fit(X)


def test_time_varying_offsets_equal_controls_and_masked_rows_equal_nan():
    # b_{t-1} as the control u_t through G = I: the same model.
    n, k, p = 15, 2, 2
    parameters, X = _problem(17, n, k, p)
    X[4, 0] = np.nan
    controls = np.vstack([np.zeros((1, k)), parameters.transition_offset])
    as_controls = parameters._replace(transition_offset=None, control_matrix=np.eye(k))
    a = kalman_smoother(parameters, X)
    b = kalman_smoother(as_controls, X, controls=controls)
    np.testing.assert_allclose(a.smoothed_means, b.smoothed_means, rtol=1e-12, atol=1e-12)
    assert np.isclose(a.log_likelihood, b.log_likelihood, rtol=1e-12)
    masked = kalman_smoother(parameters, np.ma.masked_invalid(X))
    np.testing.assert_array_equal(masked.smoothed_means, a.smoothed_means)


def _statistics_from_the_smoother(parameters, X):
    """The EM statistics of one fully observed sequence, from the RTS smoother's moments."""
    smoothed = kalman_smoother(parameters, X)
    means, covariances = smoothed.smoothed_means, smoothed.smoothed_covariances
    n, k = means.shape
    second = covariances + np.einsum("ti,tj->tij", means, means)
    psi = np.hstack([means, np.ones((n, 1))])
    regressor = np.einsum("ti,tj->tij", psi, psi)
    regressor[:, :k, :k] = second
    lag = smoothed.cross_covariances[1:] + np.einsum("ti,tj->tij", means[1:], means[:-1])
    return {
        "initial_sum": means[0],
        "initial_outer": second[0],
        "transition_regressor": regressor[:-1].sum(axis=0),
        "transition_cross": np.concatenate([lag, means[1:, :, None]], axis=2).sum(axis=0),
        "transition_target": second[1:].sum(axis=0),
        "observation_regressor": regressor.sum(axis=0),
        "observation_cross": np.einsum("ti,tj->ij", X, psi),
        "observation_target": X.T @ X,
        "n_sequences": np.array([1.0]),
    }


def test_forward_smoothing_in_chunks_equals_the_smoother():
    n, k, p = 20, 2, 3
    parameters, X = _problem(18, n, k, p)
    expected = _statistics_from_the_smoother(parameters, X)
    total, carried, log_likelihood = None, None, 0.0
    for start, stop in [(0, 7), (7, 8), (8, 20)]:
        statistics, chunk_log_likelihood, carried = kalman_forward_smoothing(
            parameters, X[start:stop], carried=carried, start=start
        )
        log_likelihood += chunk_log_likelihood
        total = (
            statistics
            if total is None
            else {name: total[name] + statistics[name] for name in total}
        )
    for name, value in expected.items():
        np.testing.assert_allclose(total[name], value, rtol=1e-9, atol=1e-9, err_msg=name)
    assert np.isclose(log_likelihood, kalman_filter(parameters, X).log_likelihood, rtol=1e-12)


def test_forward_smoothing_errors_on_the_start_of_a_time_varying_chunk():
    n, k, p = 10, 2, 2
    parameters, X = _problem(19, n, k, p)
    _, _, carried = kalman_forward_smoothing(parameters, X[:4])
    with pytest.raises(ValueError, match="give start="):
        kalman_forward_smoothing(parameters, X[4:], carried=carried)
    with pytest.raises(ValueError, match="without carried"):
        kalman_forward_smoothing(parameters, X[4:], start=4)
    with pytest.raises(ValueError, match=r"rows 4\.\.13 pass the end of the time axes"):
        kalman_forward_smoothing(parameters, np.vstack([X, X])[4:14], carried=carried, start=4)
    # A constant model ignores start.
    constant = LGSSMParameters([[0.5]], [[1.0]], [[1.0]], [[1.0]])
    _, _, message = kalman_forward_smoothing(constant, X[:4, :1])
    a = kalman_forward_smoothing(constant, X[4:, :1], carried=message)
    b = kalman_forward_smoothing(constant, X[4:, :1], carried=message, start=4)
    np.testing.assert_array_equal(
        a.statistics["transition_cross"], b.statistics["transition_cross"]
    )
