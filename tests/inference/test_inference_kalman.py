"""Kalman filter, RTS smoother and EM statistics against the exact joint Gaussian and peers."""

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import block_diag, solve_discrete_are
from scipy.stats import multivariate_normal

from skseq._kernels import _kalman
from skseq.inference.kalman import (
    KalmanFilterResult,
    KalmanForwardSmoothingResult,
    KalmanSmootherResult,
    KalmanStreamState,
    LGSSMParameters,
    _em_statistics_offsets,
    check_lgssm_parameters,
    kalman_filter,
    kalman_filter_step,
    kalman_forecast,
    kalman_forward_smoothing,
    kalman_smoother,
    make_model,
    sample_lgssm,
)


@pytest.fixture(params=["default", "all_blas", "no_blas"])
def blas_mode(request):
    """Run a test with the default BLAS thresholds, with every product, solve and
    factorisation sent to BLAS / LAPACK, and with none (the hand-written loops)."""
    huge = 1 << 40
    thresholds = {"default": None, "all_blas": (0, 0, 0), "no_blas": (huge, huge, huge)}
    previous = None
    if thresholds[request.param] is not None:
        previous = _kalman.set_blas_min_work(*thresholds[request.param])
    yield request.param
    if previous is not None:
        _kalman.set_blas_min_work(*previous)


def random_model(rng, n_state, n_obs, n_controls=0):
    """Random parameters: a stable F, well-conditioned SPD covariances, nonzero offsets."""
    transition = rng.normal(size=(n_state, n_state))
    transition *= 0.9 / np.max(np.abs(np.linalg.eigvals(transition)))
    a = rng.normal(size=(n_state, n_state))
    c = rng.normal(size=(n_obs, n_obs))
    e = rng.normal(size=(n_state, n_state))
    return dict(
        transition_matrix=transition,
        observation_matrix=rng.normal(size=(n_obs, n_state)),
        transition_covariance=a @ a.T / n_state + 0.1 * np.eye(n_state),
        observation_covariance=c @ c.T / n_obs + 0.1 * np.eye(n_obs),
        transition_offset=rng.normal(size=n_state),
        observation_offset=rng.normal(size=n_obs),
        initial_state_mean=rng.normal(size=n_state),
        initial_state_covariance=e @ e.T / n_state + 0.5 * np.eye(n_state),
        control_matrix=rng.normal(size=(n_state, n_controls)),
    )


def joint_gaussian(params, controls):
    """Mean and covariance of (z_1..z_T, x_1..x_T), flattened row by row, built directly.

    z = mean_z + M eps with eps = (z_1 - mu0, w_2, ..., w_T) and M[t, s] = F^(t-s).
    """
    F, H = params["transition_matrix"], params["observation_matrix"]
    Q, R = params["transition_covariance"], params["observation_covariance"]
    b, d = params["transition_offset"], params["observation_offset"]
    G = params["control_matrix"]
    n_rows, k = controls.shape[0], F.shape[0]
    mean_z = np.zeros((n_rows, k))
    mean_z[0] = params["initial_state_mean"]
    for t in range(1, n_rows):
        mean_z[t] = F @ mean_z[t - 1] + G @ controls[t] + b
    propagation = np.zeros((n_rows * k, n_rows * k))
    for t in range(n_rows):
        for s in range(t + 1):
            propagation[t * k : (t + 1) * k, s * k : (s + 1) * k] = np.linalg.matrix_power(F, t - s)
    noise = block_diag(params["initial_state_covariance"], *[Q] * (n_rows - 1))
    cov_z = propagation @ noise @ propagation.T
    observe = block_diag(*[H] * n_rows)
    mean = np.concatenate([mean_z.ravel(), observe @ mean_z.ravel() + np.tile(d, n_rows)])
    cov_zx = cov_z @ observe.T
    cov_x = observe @ cov_z @ observe.T + block_diag(*[R] * n_rows)
    return mean, np.block([[cov_z, cov_zx], [cov_zx.T, cov_x]])


def condition(mean, cov, n_latent, x, observed):
    """Posterior of (z, x) given the observed entries of x, and their log density."""
    index = n_latent + np.flatnonzero(observed)
    if index.size == 0:
        return mean, cov, 0.0
    block = cov[np.ix_(index, index)]
    gain = np.linalg.solve(block, cov[index]).T
    posterior_mean = mean + gain @ (x[observed] - mean[index])
    posterior_cov = cov - gain @ cov[index]
    log_density = multivariate_normal(mean[index], block).logpdf(x[observed])
    return posterior_mean, posterior_cov, log_density


def exact_posteriors(params, X, controls, lengths):
    """Filtered, predicted, smoothed moments and log-likelihoods from the joint Gaussian."""
    k = params["transition_matrix"].shape[0]
    p = X.shape[1]
    out = {name: [] for name in ("filtered", "predicted", "smoothed", "cross", "loglik")}
    start = 0
    for length in lengths:
        rows = slice(start, start + length)
        mean, cov = joint_gaussian(params, controls[rows])
        x = np.nan_to_num(X[rows].ravel())
        observed = ~np.isnan(X[rows].ravel())
        n_latent = length * k
        posterior_mean, posterior_cov, log_density = condition(mean, cov, n_latent, x, observed)
        out["loglik"].append(log_density)
        for t in range(length):
            z = slice(t * k, (t + 1) * k)
            out["smoothed"].append((posterior_mean[z], posterior_cov[z, z]))
            previous = slice((t - 1) * k, t * k)
            out["cross"].append(posterior_cov[z, previous] if t > 0 else np.zeros((k, k)))
            for key, last_row in (("filtered", t + 1), ("predicted", t)):
                mask = observed.copy()
                mask[last_row * p :] = False
                m, c, _ = condition(mean, cov, n_latent, x, mask)
                out[key].append((m[z], c[z, z]))
        start += length
    return out


def missing_pattern(rng, n_rows, n_obs):
    """NaN entries: one partially missing row, one all-NaN row, some scattered entries."""
    mask = rng.random((n_rows, n_obs)) < 0.15
    mask[1, 0] = True
    mask[1, -1] = False
    mask[n_rows - 2] = True
    return mask


CASES = [
    # (n_state, n_obs, n_controls, lengths, with_missing)
    (1, 1, 0, [5], False),
    (2, 3, 0, [6], True),
    (3, 2, 2, [4, 1, 6], True),
    (3, 4, 1, [6, 5], True),
    (4, 2, 0, [3, 6], True),
    (9, 5, 2, [4, 3], True),  # large enough for the default thresholds to use BLAS
]


@pytest.mark.parametrize("n_state,n_obs,n_controls,lengths,with_missing", CASES)
def test_filter_and_smoother_match_exact_joint_gaussian(
    n_state, n_obs, n_controls, lengths, with_missing, blas_mode
):
    rng = np.random.default_rng(n_state * 100 + n_obs * 10 + n_controls)
    params = random_model(rng, n_state, n_obs, n_controls)
    n_samples = sum(lengths)
    X = rng.normal(scale=2.0, size=(n_samples, n_obs))
    if with_missing:
        X[missing_pattern(rng, n_samples, n_obs)] = np.nan
    controls = rng.normal(size=(n_samples, n_controls))
    exact = exact_posteriors(params, X, controls, lengths)
    kwargs = dict(params)
    options = dict(lengths=lengths)
    if n_controls:
        options["controls"] = controls
    else:
        del kwargs["control_matrix"]
    filtered = kalman_filter(LGSSMParameters(**kwargs), X, **options)
    smoothed = kalman_smoother(LGSSMParameters(**kwargs), X, **options)
    assert isinstance(filtered, KalmanFilterResult)
    assert isinstance(smoothed, KalmanSmootherResult)
    tol = dict(rtol=1e-9, atol=1e-9)
    for t in range(n_samples):
        np.testing.assert_allclose(filtered.filtered_means[t], exact["filtered"][t][0], **tol)
        np.testing.assert_allclose(filtered.filtered_covariances[t], exact["filtered"][t][1], **tol)
        np.testing.assert_allclose(filtered.predicted_means[t], exact["predicted"][t][0], **tol)
        np.testing.assert_allclose(
            filtered.predicted_covariances[t], exact["predicted"][t][1], **tol
        )
        np.testing.assert_allclose(smoothed.smoothed_means[t], exact["smoothed"][t][0], **tol)
        np.testing.assert_allclose(smoothed.smoothed_covariances[t], exact["smoothed"][t][1], **tol)
        np.testing.assert_allclose(smoothed.cross_covariances[t], exact["cross"][t], **tol)
    np.testing.assert_allclose(filtered.sequence_log_likelihood, exact["loglik"], rtol=1e-10)
    np.testing.assert_allclose(smoothed.sequence_log_likelihood, exact["loglik"], rtol=1e-10)
    np.testing.assert_allclose(filtered.log_likelihood, sum(exact["loglik"]), rtol=1e-10)
    np.testing.assert_allclose(filtered.log_predictive, smoothed.log_predictive, rtol=1e-12)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    per_sequence = np.add.reduceat(filtered.log_predictive, offsets[:-1])
    np.testing.assert_allclose(per_sequence, exact["loglik"], rtol=1e-10)
    if with_missing:
        all_missing = np.isnan(X).all(axis=1)
        assert all_missing.any()
        assert np.all(filtered.log_predictive[all_missing] == 0.0)


def test_log_likelihood_is_the_multivariate_normal_density():
    rng = np.random.default_rng(7)
    params = random_model(rng, 2, 3)
    del params["control_matrix"]
    X = rng.normal(size=(6, 3))
    mean, cov = joint_gaussian(params | {"control_matrix": np.zeros((2, 0))}, np.zeros((6, 0)))
    n_latent = 12
    expected = multivariate_normal(mean[n_latent:], cov[n_latent:, n_latent:]).logpdf(X.ravel())
    assert kalman_filter(LGSSMParameters(**params), X).log_likelihood == pytest.approx(
        expected, rel=1e-11
    )


def test_first_control_of_each_sequence_is_unused():
    rng = np.random.default_rng(1)
    params = random_model(rng, 2, 2, 1)
    X = rng.normal(size=(7, 2))
    controls = rng.normal(size=(7, 1))
    changed = controls.copy()
    changed[[0, 3]] = 1e6
    changed[4] += 1.0  # a used control: must change the result
    first = kalman_smoother(LGSSMParameters(**params), X, controls=controls, lengths=[3, 4])
    second = kalman_smoother(LGSSMParameters(**params), X, controls=changed, lengths=[3, 4])
    np.testing.assert_array_equal(first.smoothed_means[:3], second.smoothed_means[:3])
    assert not np.allclose(first.smoothed_means[3:], second.smoothed_means[3:])
    controls_unused_only = controls.copy()
    controls_unused_only[[0, 3]] = -5.0
    third = kalman_smoother(
        LGSSMParameters(**params), X, controls=controls_unused_only, lengths=[3, 4]
    )
    np.testing.assert_array_equal(first.smoothed_means, third.smoothed_means)


def test_concatenated_sequences_equal_separate_runs():
    rng = np.random.default_rng(2)
    params = random_model(rng, 3, 2)
    del params["control_matrix"]
    X = rng.normal(size=(30, 2))
    X[4, 1] = np.nan
    together = kalman_smoother(LGSSMParameters(**params), X, lengths=[10, 20])
    first = kalman_smoother(LGSSMParameters(**params), X[:10])
    second = kalman_smoother(LGSSMParameters(**params), X[10:])
    for name in ("smoothed_means", "smoothed_covariances", "cross_covariances", "log_predictive"):
        np.testing.assert_array_equal(
            getattr(together, name), np.concatenate([getattr(first, name), getattr(second, name)])
        )
    assert together.log_likelihood == pytest.approx(
        first.log_likelihood + second.log_likelihood, rel=1e-14
    )


def test_long_sequence_reaches_the_riccati_steady_state():
    """Without missing data the predicted covariance converges to the DARE solution."""
    rng = np.random.default_rng(4)
    params = random_model(rng, 4, 3)
    del params["control_matrix"]
    X = rng.normal(size=(400, 3))
    result = kalman_filter(LGSSMParameters(**params), X)
    steady = solve_discrete_are(
        params["transition_matrix"].T,
        params["observation_matrix"].T,
        params["transition_covariance"],
        params["observation_covariance"],
    )
    np.testing.assert_allclose(result.predicted_covariances[-1], steady, rtol=1e-9, atol=1e-12)


def test_joseph_update_keeps_covariances_positive_semidefinite():
    """Near-noiseless observations of a diffuse state: the covariances stay symmetric PSD."""
    rng = np.random.default_rng(5)
    k, p = 4, 4
    params = dict(
        transition_matrix=0.99 * np.eye(k),
        observation_matrix=rng.normal(size=(p, k)),
        transition_covariance=1e-6 * np.eye(k),
        observation_covariance=1e-12 * np.eye(p),
        initial_state_covariance=1e8 * np.eye(k),
    )
    X = rng.normal(size=(200, p))
    filtered = kalman_filter(LGSSMParameters(**params), X)
    smoothed = kalman_smoother(LGSSMParameters(**params), X)
    for covariances in (filtered.filtered_covariances, smoothed.smoothed_covariances):
        np.testing.assert_array_equal(covariances, covariances.transpose(0, 2, 1))
        scale = np.abs(covariances).max(axis=(1, 2))
        assert np.all(np.linalg.eigvalsh(covariances).min(axis=1) >= -1e-9 * scale)
    assert np.isfinite(filtered.log_likelihood)


def moments_reference(params, X, controls, lengths):
    """The EM statistics computed from the exact joint posterior of (z, x)."""
    k = params["transition_matrix"].shape[0]
    p, m = X.shape[1], controls.shape[1]
    D = k + m + 1
    ref = dict(
        initial_sum=np.zeros(k),
        initial_outer=np.zeros((k, k)),
        transition_regressor=np.zeros((D, D)),
        transition_cross=np.zeros((k, D)),
        transition_target=np.zeros((k, k)),
        observation_regressor=np.zeros((k + 1, k + 1)),
        observation_cross=np.zeros((p, k + 1)),
        observation_target=np.zeros((p, p)),
        n_sequences=np.zeros(()),
    )
    start = 0
    for length in lengths:
        rows = slice(start, start + length)
        mean, cov = joint_gaussian(params, controls[rows])
        observed = ~np.isnan(X[rows].ravel())
        post_mean, post_cov, _ = condition(
            mean, cov, length * k, np.nan_to_num(X[rows].ravel()), observed
        )
        second = post_cov + np.outer(post_mean, post_mean)

        def z(t):
            return slice(t * k, (t + 1) * k)

        def x(t, n_latent=length * k):
            return slice(n_latent + t * p, n_latent + (t + 1) * p)

        ref["initial_sum"] += post_mean[z(0)]
        ref["initial_outer"] += second[z(0), z(0)]
        ref["n_sequences"] += 1
        for t in range(length):
            psi = np.zeros((k + 1, k + 1))
            psi[:k, :k] = second[z(t), z(t)]
            psi[:k, k] = psi[k, :k] = post_mean[z(t)]
            psi[k, k] = 1
            # A row with no observed entry drops out of the observation regression.
            if not np.all(np.isnan(X[start + t])):
                ref["observation_regressor"] += psi
                ref["observation_cross"] += np.hstack(
                    [second[x(t), z(t)], post_mean[x(t)][:, None]]
                )
                ref["observation_target"] += second[x(t), x(t)]
            if t > 0:
                phi = np.concatenate([post_mean[z(t - 1)], controls[start + t], [1.0]])
                phi_cov = np.zeros((D, D))
                phi_cov[:k, :k] = post_cov[z(t - 1), z(t - 1)]
                ref["transition_regressor"] += phi_cov + np.outer(phi, phi)
                cross = np.zeros((k, D))
                cross[:, :k] = post_cov[z(t), z(t - 1)]
                ref["transition_cross"] += cross + np.outer(post_mean[z(t)], phi)
                ref["transition_target"] += second[z(t), z(t)]
        start += length
    return ref


@pytest.mark.parametrize("n_state,n_obs,n_controls", [(1, 2, 0), (2, 3, 1), (3, 3, 2), (9, 4, 1)])
def test_em_statistics_match_exact_posterior_moments(n_state, n_obs, n_controls, blas_mode):
    """Including the exact expectations of the missing entries of x."""
    rng = np.random.default_rng(n_state + 10 * n_obs + 100 * n_controls)
    params = random_model(rng, n_state, n_obs, n_controls)
    lengths = [4, 1, 5]
    n_samples = sum(lengths)
    X = rng.normal(scale=2.0, size=(n_samples, n_obs))
    X[missing_pattern(rng, n_samples, n_obs)] = np.nan
    controls = rng.normal(size=(n_samples, n_controls))
    model = make_model(check_lgssm_parameters(LGSSMParameters(**params)))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.intp)
    statistics, sequence_log_likelihood = _em_statistics_offsets(model, X, controls, offsets)
    reference = moments_reference(params, X, controls, lengths)
    assert statistics.keys() == reference.keys()
    for key, value in reference.items():
        np.testing.assert_allclose(statistics[key], value, rtol=1e-10, atol=1e-10, err_msg=key)
    exact = exact_posteriors(params, X, controls, lengths)["loglik"]
    np.testing.assert_allclose(sequence_log_likelihood, exact, rtol=1e-10)


def test_em_statistics_add_over_blocks_of_sequences():
    rng = np.random.default_rng(9)
    params = random_model(rng, 2, 3, 1)
    model = make_model(check_lgssm_parameters(LGSSMParameters(**params)))
    X = rng.normal(size=(20, 3))
    X[3, 1] = np.nan
    controls = rng.normal(size=(20, 1))
    offsets = np.array([0, 5, 12, 20], dtype=np.intp)
    whole, _ = _em_statistics_offsets(model, X, controls, offsets)
    first, _ = _em_statistics_offsets(model, X[:12], controls[:12], offsets[:3])
    second, _ = _em_statistics_offsets(model, X[12:], controls[12:], offsets[2:] - 12)
    for key in whole:
        np.testing.assert_allclose(whole[key], first[key] + second[key], rtol=1e-13, atol=1e-13)


def pykalman_filter(params):
    pykalman = pytest.importorskip("pykalman")
    return pykalman.KalmanFilter(
        transition_matrices=params["transition_matrix"],
        observation_matrices=params["observation_matrix"],
        transition_covariance=params["transition_covariance"],
        observation_covariance=params["observation_covariance"],
        transition_offsets=params["transition_offset"],
        observation_offsets=params["observation_offset"],
        initial_state_mean=params["initial_state_mean"],
        initial_state_covariance=params["initial_state_covariance"],
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_agrees_with_pykalman(seed):
    rng = np.random.default_rng(seed)
    params = random_model(rng, 3, 2)
    del params["control_matrix"]
    kf = pykalman_filter(params)
    X = rng.normal(size=(40, 2))
    X[[5, 17]] = np.nan  # pykalman masks whole rows only
    masked = np.ma.masked_invalid(X)
    filtered = kalman_filter(LGSSMParameters(**params), X)
    smoothed = kalman_smoother(LGSSMParameters(**params), X)
    means, covariances = kf.filter(masked)
    np.testing.assert_allclose(filtered.filtered_means, means, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(filtered.filtered_covariances, covariances, rtol=1e-9, atol=1e-10)
    means, covariances = kf.smooth(masked)
    np.testing.assert_allclose(smoothed.smoothed_means, means, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(smoothed.smoothed_covariances, covariances, rtol=1e-9, atol=1e-10)
    assert filtered.log_likelihood == pytest.approx(kf.loglikelihood(masked), rel=1e-10)


@pytest.mark.parametrize("seed", [0, 1])
def test_agrees_with_statsmodels(seed):
    """statsmodels handles partially missing rows too; its autocov[t] is Cov(z_{t+1}, z_t)."""
    kalman_smoother_module = pytest.importorskip("statsmodels.tsa.statespace.kalman_smoother")
    rng = np.random.default_rng(seed + 10)
    n_state, n_obs = 3, 3
    params = random_model(rng, n_state, n_obs)
    del params["control_matrix"]
    X = rng.normal(size=(50, n_obs))
    X[3, 0] = np.nan
    X[9, 1:] = np.nan
    X[20] = np.nan
    ks = kalman_smoother_module.KalmanSmoother(k_endog=n_obs, k_states=n_state, k_posdef=n_state)
    ks.bind(X.copy())
    ks["design"] = params["observation_matrix"]
    ks["obs_cov"] = params["observation_covariance"]
    ks["transition"] = params["transition_matrix"]
    ks["selection"] = np.eye(n_state)
    ks["state_cov"] = params["transition_covariance"]
    ks["obs_intercept"] = params["observation_offset"][:, None]
    ks["state_intercept"] = params["transition_offset"][:, None]
    ks.initialize_known(params["initial_state_mean"], params["initial_state_covariance"])
    reference = ks.smooth()
    smoothed = kalman_smoother(LGSSMParameters(**params), X)
    filtered = kalman_filter(LGSSMParameters(**params), X)
    tol = dict(rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(smoothed.smoothed_means, reference.smoothed_state.T, **tol)
    np.testing.assert_allclose(
        smoothed.smoothed_covariances, reference.smoothed_state_cov.transpose(2, 0, 1), **tol
    )
    np.testing.assert_allclose(
        smoothed.cross_covariances[1:],
        reference.smoothed_state_autocov.transpose(2, 0, 1)[:-1],
        **tol,
    )
    np.testing.assert_allclose(filtered.filtered_means, reference.filtered_state.T, **tol)
    np.testing.assert_allclose(
        filtered.filtered_covariances, reference.filtered_state_cov.transpose(2, 0, 1), **tol
    )
    assert smoothed.log_likelihood == pytest.approx(reference.llf, rel=1e-9)


# -- validation -----------------------------------------------------------------


def valid_arguments():
    return dict(
        transition_matrix=[[0.9, 0.1], [0.0, 0.8]],
        observation_matrix=[[1.0, 0.0], [0.5, 1.0], [0.0, 2.0]],
        transition_covariance=np.eye(2) * 0.1,
        observation_covariance=np.eye(3) * 0.2,
    )


@pytest.mark.parametrize(
    "change,message",
    [
        (dict(transition_matrix=np.eye(3)[:2]), "transition_matrix must be square"),
        (dict(observation_matrix=np.ones((2, 2))), r"observation_matrix must have shape \(3, 2\)"),
        (dict(transition_covariance=[[1.0, 0.5], [0.0, 1.0]]), "transition_covariance must be sym"),
        (dict(transition_covariance=[[1.0, 2.0], [2.0, 1.0]]), "transition_covariance must be pos"),
        (dict(observation_covariance=np.zeros((3, 3))), "observation_covariance must be positive"),
        (dict(observation_covariance=np.eye(2)), r"observation_covariance .* shape \(3, 3\)"),
        (dict(initial_state_covariance=-np.eye(2)), "initial_state_covariance must be positive"),
        (dict(initial_state_mean=[0.0, np.nan]), "initial_state_mean contains NaN"),
        (dict(transition_offset=np.zeros(3)), r"transition_offset must have shape \(2,\)"),
        (dict(observation_offset=np.zeros(2)), r"observation_offset must have shape \(3,\)"),
        (dict(control_matrix=np.ones((3, 1)), controls=np.ones((10, 1))), "control_matrix must"),
        (dict(control_matrix=np.ones((2, 1))), "pass controls"),
        (dict(controls=np.ones((10, 1))), "controls were given without a control_matrix"),
        (dict(control_matrix=np.ones((2, 1)), controls=np.ones((9, 1))), "controls has 9 rows"),
        (dict(control_matrix=np.ones((2, 2)), controls=np.ones((10, 1))), "controls has 1 col"),
        (dict(lengths=[4, 5]), "lengths sum to 9"),
    ],
)
def test_invalid_arguments_raise_a_clear_error(change, message):
    X = np.random.default_rng(0).normal(size=(10, 3))
    arguments = valid_arguments() | change
    options = {name: arguments.pop(name) for name in ("controls", "lengths") if name in arguments}
    for function in (kalman_filter, kalman_smoother):
        with pytest.raises(ValueError, match=message):
            function(LGSSMParameters(**arguments), X, **options)


@pytest.mark.parametrize(
    "call",
    [
        lambda parameters: kalman_filter(parameters, np.zeros((4, 3))),
        lambda parameters: kalman_smoother(parameters, np.zeros((4, 3))),
        lambda parameters: kalman_filter_step(parameters, np.zeros(3)),
        lambda parameters: kalman_forecast(parameters, np.zeros((4, 3)), 2),
        lambda parameters: sample_lgssm(parameters, 4),
        lambda parameters: kalman_forward_smoothing(parameters, np.zeros((4, 3))),
    ],
)
def test_every_function_takes_one_parameters_tuple_and_checks_it(call):
    """The model is one LGSSMParameters, validated by check_lgssm_parameters in
    every function: a dict of the arrays is refused, and a complex array is a
    TypeError, as in the other inference modules."""
    call(LGSSMParameters(**valid_arguments()))
    with pytest.raises(TypeError, match="parameters must be an LGSSMParameters"):
        call(valid_arguments())
    complex_offset = valid_arguments() | {"transition_offset": np.zeros(2, dtype=complex)}
    with pytest.raises(TypeError, match="transition_offset must be real; complex inputs"):
        call(LGSSMParameters(**complex_offset))


def test_check_lgssm_parameters_fills_the_defaults_and_copies():
    given = LGSSMParameters(**{key: np.array(value) for key, value in valid_arguments().items()})
    checked = check_lgssm_parameters(given)
    assert isinstance(checked, LGSSMParameters)
    np.testing.assert_array_equal(checked.transition_offset, np.zeros(2))
    np.testing.assert_array_equal(checked.observation_offset, np.zeros(3))
    np.testing.assert_array_equal(checked.initial_state_covariance, np.eye(2))
    assert checked.control_matrix.shape == (2, 0)
    for name, value in given._asdict().items():
        if value is not None:
            assert not np.shares_memory(getattr(checked, name), value)
    with pytest.raises(ValueError, match=r"observation_matrix must have shape \(4, 2\)"):
        check_lgssm_parameters(given, 4)


def test_invalid_observations_raise_and_inputs_are_not_modified():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10, 3))
    X[2, 1] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        kalman_filter(LGSSMParameters(**valid_arguments()), X)
    with pytest.raises(ValueError, match="2-D"):
        kalman_filter(LGSSMParameters(**valid_arguments()), np.zeros(10))
    with pytest.raises(ValueError, match="empty"):
        kalman_filter(LGSSMParameters(**valid_arguments()), np.zeros((0, 3)))
    with pytest.raises(TypeError, match="X must be real; complex inputs are not supported"):
        kalman_filter(LGSSMParameters(**valid_arguments()), np.zeros((4, 3), dtype=complex))
    X = rng.normal(size=(10, 3))
    X[4, 0] = np.nan
    arguments = {key: np.array(value) for key, value in valid_arguments().items()}
    arguments["observation_covariance"][0, 1] = arguments["observation_covariance"][1, 0] = 1e-12
    copies = {key: value.copy() for key, value in arguments.items()}
    X_copy = X.copy()
    kalman_smoother(LGSSMParameters(**arguments), X)
    np.testing.assert_array_equal(X, X_copy)
    for key, value in arguments.items():
        np.testing.assert_array_equal(value, copies[key])


# -- the online filter step, forecasts and sampling ----------------------------


@pytest.mark.parametrize("n_state, n_obs, n_controls", [(1, 1, 0), (2, 3, 0), (3, 2, 2)])
def test_filter_step_by_step_equals_the_batch_filter_bit_for_bit(n_state, n_obs, n_controls):
    rng = np.random.default_rng(n_state + 10 * n_obs)
    params = random_model(rng, n_state, n_obs, n_controls)
    X = rng.normal(size=(9, n_obs))
    X[missing_pattern(rng, 9, n_obs)] = np.nan
    controls = rng.normal(size=(9, n_controls))
    batch = kalman_filter(LGSSMParameters(**params), X, controls=controls)
    mean = covariance = None
    for t, x in enumerate(X):
        step = kalman_filter_step(
            LGSSMParameters(**params),
            x,
            filtered_state_mean=mean,
            filtered_state_covariance=covariance,
            control=controls[t] if t > 0 and n_controls else None,
        )
        mean, covariance = step.filtered_state_mean, step.filtered_state_covariance
        np.testing.assert_array_equal(mean, batch.filtered_means[t])
        np.testing.assert_array_equal(covariance, batch.filtered_covariances[t])
        assert step.log_predictive == batch.log_predictive[t]


@pytest.mark.parametrize("n_state, n_obs, n_controls", [(1, 1, 0), (2, 3, 1), (3, 2, 0)])
def test_forecast_matches_the_exact_joint_gaussian(n_state, n_obs, n_controls):
    rng = np.random.default_rng(7 * n_state + n_obs)
    params = random_model(rng, n_state, n_obs, n_controls)
    n_rows, n_steps = 5, 3
    X = rng.normal(size=(n_rows, n_obs))
    X[2, 0] = np.nan
    controls = rng.normal(size=(n_rows + n_steps, n_controls))
    forecast = kalman_forecast(
        LGSSMParameters(**params),
        X,
        n_steps,
        controls=controls[:n_rows],
        future_controls=controls[n_rows:] if n_controls else None,
    )
    mean, cov = joint_gaussian(params, controls)
    n_latent = (n_rows + n_steps) * n_state
    x = np.zeros((n_rows + n_steps) * n_obs)
    observed = np.zeros_like(x, dtype=bool)
    x[: n_rows * n_obs] = np.nan_to_num(X.ravel())
    observed[: n_rows * n_obs] = ~np.isnan(X.ravel())
    posterior_mean, posterior_cov, _ = condition(mean, cov, n_latent, x, observed)
    for h in range(n_steps):
        rows = slice(n_latent + (n_rows + h) * n_obs, n_latent + (n_rows + h + 1) * n_obs)
        np.testing.assert_allclose(forecast.means[h], posterior_mean[rows], rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(
            forecast.covariances[h], posterior_cov[rows, rows], rtol=1e-9, atol=1e-10
        )


def test_forecast_of_several_sequences_equals_separate_forecasts():
    rng = np.random.default_rng(3)
    params = random_model(rng, 2, 2)
    del params["control_matrix"]
    X = rng.normal(size=(11, 2))
    together = kalman_forecast(LGSSMParameters(**params), X, 4, lengths=[5, 6])
    for s, rows in enumerate((slice(0, 5), slice(5, 11))):
        alone = kalman_forecast(LGSSMParameters(**params), X[rows], 4)
        np.testing.assert_allclose(together.means[4 * s : 4 * s + 4], alone.means, rtol=1e-12)
        np.testing.assert_allclose(
            together.covariances[4 * s : 4 * s + 4], alone.covariances, rtol=1e-12
        )


def test_sample_follows_the_model_and_its_random_state():
    rng = np.random.default_rng(5)
    params = random_model(rng, 2, 3, 1)
    controls = rng.normal(size=(6, 1))
    X, Z = sample_lgssm(LGSSMParameters(**params), 6, controls=controls, random_state=0)
    again = sample_lgssm(LGSSMParameters(**params), 6, controls=controls, random_state=0)
    np.testing.assert_array_equal(X, again.observations)
    np.testing.assert_array_equal(Z, again.states)
    # The draws are the model's equations applied to standard normal noise.
    noise = np.random.RandomState(0)
    state_noise, observation_noise = noise.standard_normal((6, 2)), noise.standard_normal((6, 3))
    chol = np.linalg.cholesky
    expected = np.empty((6, 2))
    expected[0] = (
        params["initial_state_mean"] + chol(params["initial_state_covariance"]) @ state_noise[0]
    )
    for t in range(1, 6):
        expected[t] = (
            params["transition_matrix"] @ expected[t - 1]
            + params["control_matrix"] @ controls[t]
            + params["transition_offset"]
            + chol(params["transition_covariance"]) @ state_noise[t]
        )
    np.testing.assert_allclose(Z, expected, rtol=1e-12, atol=1e-12)
    expected_x = (
        expected @ params["observation_matrix"].T
        + params["observation_offset"]
        + observation_noise @ chol(params["observation_covariance"]).T
    )
    np.testing.assert_allclose(X, expected_x, rtol=1e-12, atol=1e-12)


def test_step_forecast_and_sample_name_bad_input():
    arguments = valid_arguments()
    with pytest.raises(ValueError, match="go together"):
        kalman_filter_step(
            LGSSMParameters(**arguments), np.zeros(3), filtered_state_mean=np.zeros(2)
        )
    with pytest.raises(ValueError, match=r"filtered_state_mean must have shape \(2,\)"):
        kalman_filter_step(
            LGSSMParameters(**arguments),
            np.zeros(3),
            filtered_state_mean=np.zeros(3),
            filtered_state_covariance=np.eye(2),
        )
    with pytest.raises(
        ValueError, match="filtered_state_covariance must be positive semi-definite"
    ):
        kalman_filter_step(
            LGSSMParameters(**arguments),
            np.zeros(3),
            filtered_state_mean=np.zeros(2),
            filtered_state_covariance=-np.eye(2),
        )
    with pytest.raises(ValueError, match="x contains infinity"):
        kalman_filter_step(LGSSMParameters(**arguments), np.array([0.0, np.inf, 0.0]))
    with pytest.raises(ValueError, match="control was given without a control_matrix"):
        kalman_filter_step(
            LGSSMParameters(**arguments),
            np.zeros(3),
            filtered_state_mean=np.zeros(2),
            filtered_state_covariance=np.eye(2),
            control=[1.0],
        )
    with pytest.raises(ValueError, match="n_steps must be >= 1"):
        kalman_forecast(LGSSMParameters(**arguments), np.zeros((4, 3)), 0)
    with pytest.raises(ValueError, match="future_controls has 2 rows"):
        kalman_forecast(
            LGSSMParameters(**(arguments | {"control_matrix": np.ones((2, 1))})),
            np.zeros((4, 3)),
            3,
            controls=np.zeros((4, 1)),
            future_controls=np.zeros((2, 1)),
        )
    with pytest.raises(TypeError, match="n_samples must be an integer"):
        sample_lgssm(LGSSMParameters(**arguments), 2.5)
    with pytest.raises(ValueError, match="transition_covariance must be positive definite"):
        sample_lgssm(LGSSMParameters(**(arguments | {"transition_covariance": -np.eye(2)})), 3)


def test_blas_thresholds_are_per_thread_and_cannot_race():
    """A threshold set in one thread is never seen by a kernel in another."""
    import threading

    defaults = _kalman.default_blas_min_work()
    assert _kalman.blas_min_work() == defaults
    seen = []
    previous = _kalman.set_blas_min_work(0, 0, 0)
    try:
        assert previous == defaults and _kalman.blas_min_work() == (0, 0, 0)
        worker = threading.Thread(target=lambda: seen.append(_kalman.blas_min_work()))
        worker.start()
        worker.join()
    finally:
        _kalman.set_blas_min_work(*previous)
    assert seen == [defaults]
    assert _kalman.blas_min_work() == defaults


# -- streams: forward-only smoothing of the EM statistics ------------------------------


def stream_case(n_state, n_obs, n_controls, n_rows, seed):
    """Random parameters, observations with missing entries (a partly missing row,
    an all-NaN row) and controls; the keyword arguments of the public functions."""
    rng = np.random.default_rng(seed)
    params = random_model(rng, n_state, n_obs, n_controls)
    X = rng.normal(scale=2.0, size=(n_rows, n_obs))
    X[missing_pattern(rng, n_rows, n_obs)] = np.nan
    X[n_rows // 3] = np.nan  # an all-NaN row inside the sequence as well
    controls = rng.normal(size=(n_rows, n_controls))
    kwargs = dict(params)
    if n_controls == 0:
        del kwargs["control_matrix"]
    return params, X, controls, kwargs


def stream_in_chunks(X, controls, kwargs, bounds):
    """Run kalman_forward_smoothing over X cut at ``bounds``; sum what the chunks add."""
    carried, total, log_likelihood = None, None, 0.0
    for start, stop in zip(bounds[:-1], bounds[1:]):
        chunk_controls = controls[start:stop] if controls.shape[1] else None
        result = kalman_forward_smoothing(
            LGSSMParameters(**kwargs),
            X[start:stop],
            controls=chunk_controls,
            carried=carried,
        )
        assert isinstance(result, KalmanForwardSmoothingResult)
        statistics, chunk_log_likelihood, carried = result
        log_likelihood += chunk_log_likelihood
        total = statistics if total is None else {k: total[k] + statistics[k] for k in total}
    return total, log_likelihood, carried


def assert_statistics_equal(actual, expected, rtol):
    assert actual.keys() == expected.keys()
    for key, value in expected.items():
        scale = max(np.max(np.abs(value)), 1.0)
        np.testing.assert_allclose(actual[key], value, rtol=rtol, atol=rtol * scale, err_msg=key)


@pytest.mark.parametrize("n_state", [1, 2, 3])
@pytest.mark.parametrize("n_obs", [1, 2])
@pytest.mark.parametrize("chunk", [1, 37, 400])
def test_stream_in_chunks_gives_the_statistics_of_the_whole_sequence(n_state, n_obs, chunk):
    """At fixed parameters, what the chunks add is exactly the E step of the whole
    sequence: the initial state, every transition (those across the chunk
    boundaries too, with their controls), every row (partly missing and all-NaN
    ones too), each revised in the light of the later chunks."""
    n_controls = (n_state + n_obs) % 3
    n_rows = 120 if chunk == 1 else 900  # one row at a time: the edge case, on fewer rows
    params, X, controls, kwargs = stream_case(n_state, n_obs, n_controls, n_rows, seed=chunk)
    model = make_model(check_lgssm_parameters(LGSSMParameters(**params)))
    whole, sequence_log_likelihood = _em_statistics_offsets(
        model, X, controls, np.array([0, n_rows], dtype=np.intp)
    )
    bounds = list(range(0, n_rows, chunk)) + [n_rows]
    total, log_likelihood, _ = stream_in_chunks(X, controls, kwargs, bounds)
    assert_statistics_equal(total, whole, rtol=1e-9)
    np.testing.assert_allclose(log_likelihood, sequence_log_likelihood[0], rtol=1e-10)


@pytest.mark.parametrize("n_state,n_obs,n_controls", [(2, 3, 1), (9, 4, 2)])
def test_stream_statistics_match_exact_posterior_moments(n_state, n_obs, n_controls, blas_mode):
    """Against the moments of the exact joint Gaussian, with every product in BLAS,
    in the hand-written loops, and with the default thresholds."""
    params, X, controls, kwargs = stream_case(n_state, n_obs, n_controls, 9, seed=5)
    total, log_likelihood, _ = stream_in_chunks(X, controls, kwargs, [0, 1, 4, 5, 9])
    assert_statistics_equal(total, moments_reference(params, X, controls, [9]), rtol=1e-9)
    exact = exact_posteriors(params, X, controls, [9])["loglik"]
    np.testing.assert_allclose(log_likelihood, exact[0], rtol=1e-10)


@settings(max_examples=25, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=1, max_value=59), max_size=8, unique=True),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_any_split_of_a_stream_gives_the_same_statistics(cuts, seed):
    params, X, controls, kwargs = stream_case(2, 2, 1, 60, seed=seed)
    whole, _ = _em_statistics_offsets(
        make_model(check_lgssm_parameters(LGSSMParameters(**params))),
        X,
        controls,
        np.array([0, 60], dtype=np.intp),
    )
    total, _, _ = stream_in_chunks(X, controls, kwargs, [0, *sorted(cuts), 60])
    assert_statistics_equal(total, whole, rtol=1e-9)


def test_stream_state_has_a_fixed_size_and_survives_pickling():
    _, X, controls, kwargs = stream_case(3, 2, 1, 2_000, seed=8)
    _, _, after_few = stream_in_chunks(X, controls, kwargs, [0, 10])
    _, _, after_many = stream_in_chunks(X, controls, kwargs, list(range(0, 2_001, 400)))
    assert isinstance(after_many, KalmanStreamState)
    assert [np.shape(a) for a in after_few] == [np.shape(a) for a in after_many]
    assert after_many.filtered_mean.shape == (3,)
    restored = pickle.loads(pickle.dumps(after_many))
    more = np.random.default_rng(1).normal(size=(50, 2))
    continued = kalman_forward_smoothing(
        LGSSMParameters(**kwargs), more, controls=controls[:50], carried=after_many
    )
    from_pickle = kalman_forward_smoothing(
        LGSSMParameters(**kwargs), more, controls=controls[:50], carried=restored
    )
    for key, value in continued.statistics.items():
        np.testing.assert_array_equal(from_pickle.statistics[key], value)


def test_stream_continuation_differs_from_a_fresh_start():
    """The carried message makes the next rows a continuation: the first one is no
    sequence start, and the transition into it is counted."""
    _, X, controls, kwargs = stream_case(2, 2, 1, 30, seed=11)
    first = kalman_forward_smoothing(LGSSMParameters(**kwargs), X[:20], controls=controls[:20])
    assert float(first.statistics["n_sequences"]) == 1.0
    continued = kalman_forward_smoothing(
        LGSSMParameters(**kwargs),
        X[20:],
        controls=controls[20:],
        carried=first.carried,
    )
    fresh = kalman_forward_smoothing(LGSSMParameters(**kwargs), X[20:], controls=controls[20:])
    assert float(continued.statistics["n_sequences"]) == 0.0
    assert continued.statistics["transition_regressor"][-1, -1] == 10.0
    assert fresh.statistics["transition_regressor"][-1, -1] == 9.0
    assert continued.log_likelihood != pytest.approx(fresh.log_likelihood)


def test_stream_arguments_are_validated_and_not_modified():
    _, X, controls, kwargs = stream_case(2, 2, 1, 30, seed=12)
    X_copy, controls_copy = X.copy(), controls.copy()
    carried = kalman_forward_smoothing(
        LGSSMParameters(**kwargs), X[:10], controls=controls[:10]
    ).carried
    copies = [np.copy(value) for value in carried]
    kalman_forward_smoothing(
        LGSSMParameters(**kwargs), X[10:], controls=controls[10:], carried=carried
    )
    for value, copy in zip(carried, copies):
        np.testing.assert_array_equal(value, copy)
    np.testing.assert_array_equal(X, X_copy)
    np.testing.assert_array_equal(controls, controls_copy)
    with pytest.raises(TypeError, match="KalmanStreamState"):
        kalman_forward_smoothing(
            LGSSMParameters(**kwargs), X, controls=controls, carried=tuple(carried)
        )
    three_states = stream_case(3, 2, 1, 10, seed=0)[3]
    with pytest.raises(ValueError, match="carried.filtered_mean has shape"):
        kalman_forward_smoothing(
            LGSSMParameters(**three_states), X, controls=controls, carried=carried
        )
    broken = carried._replace(constant=np.full_like(carried.constant, np.nan))
    with pytest.raises(ValueError, match="carried.constant contains NaN"):
        kalman_forward_smoothing(LGSSMParameters(**kwargs), X, controls=controls, carried=broken)
    with pytest.raises(ValueError, match="infinity"):
        kalman_forward_smoothing(
            LGSSMParameters(**kwargs), np.full((3, 2), np.inf), controls=controls[:3]
        )


# -- the data's scale: the HMMs' rule, never a silent -inf ----------------------


@pytest.mark.parametrize(
    "function", [kalman_filter, kalman_smoother, kalman_forward_smoothing, "forecast"]
)
def test_data_whose_squares_overflow_raise_the_hmms_message(function):
    """kalman_filter(X * 1e200).log_likelihood was -inf without an error."""
    X = np.random.default_rng(0).normal(size=(50, 3)) * 1e200
    X[3, 1] = np.nan  # missing entries are skipped by the rule
    original = X.copy()
    with pytest.raises(ValueError, match="X is too large for double precision"):
        if function == "forecast":
            kalman_forecast(LGSSMParameters(**valid_arguments()), X, 2)
        else:
            function(LGSSMParameters(**valid_arguments()), X)
    np.testing.assert_array_equal(X, original)


def test_data_far_from_the_model_raise_instead_of_minus_inf():
    """Data of an ordinary spread far from a model of small covariance: the squared
    innovations overflow although the data's own scale is fine."""
    rng = np.random.default_rng(1)
    X = 1e155 + rng.normal(size=(20, 3)) * 1e140
    for function in (kalman_filter, kalman_smoother):
        with pytest.raises(ValueError, match=r"sequence\(s\) \[0, 1\].*too far from the model"):
            function(LGSSMParameters(**valid_arguments()), X, lengths=[10, 10])
    with pytest.raises(ValueError, match="x lies too far from the model's predictions"):
        kalman_filter_step(LGSSMParameters(**valid_arguments()), np.full(3, 1e300))
    # The log-density is computed so as to overflow only when it is below -1.8e308:
    # data of 1e150 are far from the model, but their log-likelihood is finite.
    result = kalman_filter(LGSSMParameters(**valid_arguments()), X * 1e-5)
    assert -np.inf < result.log_likelihood < -1e298
