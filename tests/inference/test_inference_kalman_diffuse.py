"""The exact diffuse initial state (Koopman's exact diffuse filter and smoother)
against statsmodels' exact diffuse filter and the limit of a huge prior variance."""

import numpy as np
import pytest
from numpy.testing import assert_allclose

from skseq.datasets import load_nile
from skseq.inference.kalman import LGSSMParameters, kalman_filter

sm = pytest.importorskip("statsmodels.api")
pytestmark = pytest.mark.filterwarnings("ignore:The univariate filtering approach")
from statsmodels.tsa.statespace.initialization import Initialization  # noqa: E402
from statsmodels.tsa.statespace.kalman_smoother import KalmanSmoother  # noqa: E402


def nile():
    return load_nile().data[:, 0].astype(float)


def system(ssm):
    """A statsmodels state-space representation as LGSSMParameters (P_* zero)."""
    selection = ssm["selection"]
    k = ssm["transition"].shape[0]
    return LGSSMParameters(
        transition_matrix=ssm["transition"][:, :, 0]
        if ssm["transition"].ndim == 3
        else ssm["transition"],
        observation_matrix=ssm["design"],
        transition_covariance=selection @ ssm["state_cov"] @ selection.T,
        observation_covariance=ssm["obs_cov"],
        initial_state_covariance=np.zeros((k, k)),
    )


def unobserved_components(y, params, **specification):
    """statsmodels' exact diffuse smoother of an UnobservedComponents model at params."""
    model = sm.tsa.UnobservedComponents(y, use_exact_diffuse=True, **specification)
    return model, model.smooth(params)


def assert_matches_statsmodels(ours, theirs, *, atol=1e-7):
    """Our filter result against statsmodels' filter results (states scaled to the data)."""
    filtered = getattr(theirs, "filter_results", theirs)  # a model's results or a smoother's
    assert_allclose(ours.log_likelihood, theirs.llf, rtol=1e-10)
    assert_allclose(ours.log_predictive, theirs.llf_obs, atol=1e-8)
    assert ours.n_diffuse[0] == filtered.nobs_diffuse
    n = ours.filtered_means.shape[0]
    scale = 1.0 + np.abs(theirs.filtered_state).max()
    assert_allclose(ours.filtered_means, theirs.filtered_state.T, atol=atol * scale)
    assert_allclose(ours.predicted_means, theirs.predicted_state[:, :n].T, atol=atol * scale)
    variance = theirs.filtered_state_cov.transpose(2, 0, 1)
    scale = 1.0 + np.abs(variance).max()
    assert_allclose(ours.filtered_covariances, variance, atol=atol * scale)
    assert_allclose(
        ours.predicted_covariances,
        theirs.predicted_state_cov[..., :n].transpose(2, 0, 1),
        atol=atol * scale,
    )
    assert_allclose(
        ours.predicted_diffuse_covariances,
        filtered.predicted_diffuse_state_cov[..., :n].transpose(2, 0, 1),
        atol=1e-10,
    )


def test_nile_local_level_equals_statsmodels_exact_diffuse_filter():
    y = nile()
    model, theirs = unobserved_components(y, [15099.0, 1469.1], level="llevel")
    ours = kalman_filter(system(model.ssm), y[:, None], diffuse=True)
    assert_matches_statsmodels(ours, theirs)
    # the first row is diffuse: its level is the first observation
    assert ours.n_diffuse.tolist() == [1] and ours.filtered_means[0, 0] == y[0]


def statsmodels_smoother(parameters, y, initialization):
    """statsmodels' smoother of the model (a selection of identity) and its initialization."""
    smoother = KalmanSmoother(
        y.shape[1],
        parameters.transition_matrix.shape[0],
        design=parameters.observation_matrix,
        obs_cov=parameters.observation_covariance,
        transition=parameters.transition_matrix,
        selection=np.eye(parameters.transition_matrix.shape[0]),
        state_cov=parameters.transition_covariance,
    )
    smoother.bind(y)
    smoother.initialization = initialization
    return smoother.smooth()


def test_local_linear_trend_with_a_seasonal_and_missing_rows_in_the_diffuse_period():
    y = nile()
    y[[1, 2, 40]] = np.nan  # two rows of the diffuse period missing
    model = sm.tsa.UnobservedComponents(y, level="lltrend", seasonal=4)
    model.update([15000.0, 1400.0, 10.0, 50.0])
    parameters = system(model.ssm)
    # skseq's transition covariance is positive definite: a small shock on the
    # seasonal's lagged states too (the same model for both libraries)
    parameters = parameters._replace(
        transition_covariance=parameters.transition_covariance + np.diag([0, 0, 0, 5.0, 5.0])
    )
    initialization = Initialization(5, "diffuse")
    theirs = statsmodels_smoother(parameters, y[:, None], initialization)
    ours = kalman_filter(parameters, y[:, None], diffuse=True)
    assert ours.n_diffuse[0] == 7  # five diffuse states, two rows missing among them
    assert_matches_statsmodels(ours, theirs)


def partly_diffuse_bivariate(y):
    """Two series: a common random walk (diffuse) and a stationary AR(1) state each."""
    transition = np.diag([1.0, 0.6, -0.3])
    observation = np.array([[1.0, 1.0, 0.0], [0.7, 0.0, 1.0]])
    transition_covariance = np.diag([0.3, 0.5, 0.8])
    observation_covariance = np.array([[1.0, 0.4], [0.4, 0.7]])
    stationary = np.diag([0.5 / (1 - 0.36), 0.8 / (1 - 0.09)])
    initialization = Initialization(3)
    initialization.set(0, "diffuse")
    initialization.set((1, 3), "known", constant=np.zeros(2), stationary_cov=stationary)
    star = np.zeros((3, 3))
    star[1:, 1:] = stationary
    parameters = LGSSMParameters(
        transition,
        observation,
        transition_covariance,
        observation_covariance,
        initial_state_covariance=star,
    )
    return parameters, statsmodels_smoother(parameters, y, initialization)


def bivariate_data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.normal(size=(n, 2)).cumsum(axis=0) * 0.3 + rng.normal(size=(n, 2))
    y[0, 1] = np.nan  # a row partly missing, in the diffuse period
    y[5] = np.nan
    y[9, 0] = np.nan
    return y


def test_multivariate_partly_diffuse_state_with_correlated_noise_and_partly_missing_rows():
    y = bivariate_data()
    parameters, theirs = partly_diffuse_bivariate(y)
    mask = np.array([True, False, False])
    ours = kalman_filter(parameters, y, diffuse=mask)
    assert ours.n_diffuse[0] == 1
    assert_matches_statsmodels(ours, theirs)
    # the mask is the diagonal P_inf with P_*'s diffuse row and column ignored
    star = parameters.initial_state_covariance.copy()
    star[0, 0], star[0, 1], star[1, 0] = 5.0, 0.3, 0.3
    given = parameters._replace(initial_state_covariance=star)
    as_matrix = kalman_filter(given, y, diffuse=np.diag(mask.astype(float)))
    as_mask = kalman_filter(given, y, diffuse=mask)
    assert_allclose(as_mask.log_likelihood, ours.log_likelihood, rtol=1e-12)
    # P_*'s diffuse entries drop out of the exact limit, up to rounding
    assert_allclose(as_matrix.log_likelihood, ours.log_likelihood, rtol=1e-9)
    assert_allclose(as_matrix.filtered_means, ours.filtered_means, atol=1e-8)


def random_model(rng, k=3, p=2):
    transition = rng.normal(size=(k, k)) * 0.4 + np.eye(k) * 0.6
    a = rng.normal(size=(k, k))
    b = rng.normal(size=(p, p))
    return LGSSMParameters(
        transition,
        rng.normal(size=(p, k)),
        a @ a.T / k + 0.1 * np.eye(k),
        b @ b.T / p + 0.2 * np.eye(p),
        transition_offset=rng.normal(size=k) * 0.1,
        observation_offset=rng.normal(size=p),
        initial_state_mean=rng.normal(size=k),
    )


def test_the_limit_of_a_huge_prior_variance_without_its_kappa_terms():
    rng = np.random.default_rng(3)
    parameters = random_model(rng)
    y = rng.normal(size=(25, 2))
    y[1, 0] = np.nan  # partly missing in the diffuse period
    y[3] = np.nan
    basis = rng.normal(size=(3, 2))
    diffuse = basis @ basis.T  # rank 2
    star = 0.5 * np.eye(3)
    exact = kalman_filter(parameters._replace(initial_state_covariance=star), y, diffuse=diffuse)
    kappa = 1e7
    approximate = kalman_filter(
        parameters._replace(initial_state_covariance=star + kappa * diffuse), y
    )
    # each of the rank(P_inf) = 2 diffuse entries adds -log(kappa) / 2
    assert_allclose(approximate.log_likelihood + np.log(kappa), exact.log_likelihood, rtol=1e-5)
    d = exact.n_diffuse[0]
    assert_allclose(approximate.filtered_means[d:], exact.filtered_means[d:], atol=1e-4)
    assert_allclose(approximate.filtered_covariances[d:], exact.filtered_covariances[d:], atol=1e-4)


def test_each_sequence_starts_diffuse_and_the_inputs_are_not_changed():
    rng = np.random.default_rng(4)
    parameters = random_model(rng)
    y = rng.normal(size=(30, 2))
    diffuse = np.array([True, False, True])
    copies = y.copy(), diffuse.copy()
    both = kalman_filter(parameters, y, lengths=[12, 18], diffuse=diffuse)
    first = kalman_filter(parameters, y[:12], diffuse=diffuse)
    second = kalman_filter(parameters, y[12:], diffuse=diffuse)
    assert_allclose(both.sequence_log_likelihood, [first.log_likelihood, second.log_likelihood])
    assert_allclose(both.filtered_means, np.vstack([first.filtered_means, second.filtered_means]))
    assert both.n_diffuse.tolist() == [first.n_diffuse[0], second.n_diffuse[0]]
    assert_allclose(y, copies[0])
    assert_allclose(diffuse, copies[1])


def test_no_diffuse_part_is_the_ordinary_filter():
    rng = np.random.default_rng(5)
    parameters = random_model(rng)
    y = rng.normal(size=(20, 2))
    ordinary = kalman_filter(parameters, y)
    none_diffuse = kalman_filter(parameters, y, diffuse=np.zeros((3, 3)))
    assert kalman_filter(parameters, y, diffuse=False).n_diffuse is None
    assert_allclose(
        kalman_filter(parameters, y, diffuse=np.True_).log_likelihood,
        kalman_filter(parameters, y, diffuse=[True, True, True]).log_likelihood,
    )
    assert none_diffuse.n_diffuse.tolist() == [0]
    assert_allclose(none_diffuse.log_likelihood, ordinary.log_likelihood, rtol=1e-12)
    assert_allclose(none_diffuse.filtered_covariances, ordinary.filtered_covariances)


@pytest.mark.parametrize(
    ("diffuse", "message"),
    [
        (np.array([True, False]), r"diffuse as a boolean mask must have shape \(3,\)"),
        (-np.eye(3), "diffuse must be positive semi-definite"),
        (np.ones((2, 2)), r"diffuse must have shape \(3, 3\)"),
        (
            np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]),
            "diffuse must be symmetric",
        ),
    ],
)
def test_invalid_diffuse_is_refused(diffuse, message):
    parameters = random_model(np.random.default_rng(6))
    with pytest.raises(ValueError, match=message):
        kalman_filter(parameters, np.zeros((5, 2)), diffuse=diffuse)


def test_p_star_may_be_singular_but_not_indefinite():
    parameters = random_model(np.random.default_rng(7))
    y = np.random.default_rng(8).normal(size=(10, 2))
    zero = parameters._replace(initial_state_covariance=np.zeros((3, 3)))
    assert np.isfinite(kalman_filter(zero, y, diffuse=True).log_likelihood)
    indefinite = parameters._replace(initial_state_covariance=-np.eye(3))
    with pytest.raises(ValueError, match="initial_state_covariance must be positive semi-definite"):
        kalman_filter(indefinite, y, diffuse=np.eye(3))


# -- the exact diffuse smoother ---------------------------------------------------


def dense_posterior(parameters, y, diffuse_mask):
    """The exact posterior of all states with a flat prior on the masked coordinates.

    Information form over the stacked states (n k unknowns): the prior
    precision of z_1 is zero on the diffuse coordinates and P_*^-1 on the
    others, each transition and each row's observed entries add their
    quadratic; the posterior is Gaussian with covariance Lambda^-1.
    """
    n, k = y.shape[0], parameters.transition_matrix.shape[0]
    F = np.asarray(parameters.transition_matrix, dtype=float)
    H = np.asarray(parameters.observation_matrix, dtype=float)
    Q = np.asarray(parameters.transition_covariance, dtype=float)
    R = np.asarray(parameters.observation_covariance, dtype=float)
    b = np.zeros(k) if parameters.transition_offset is None else parameters.transition_offset
    d = (
        np.zeros(H.shape[0])
        if parameters.observation_offset is None
        else parameters.observation_offset
    )
    mu0 = np.zeros(k) if parameters.initial_state_mean is None else parameters.initial_state_mean
    precision = np.zeros((n * k, n * k))
    shift = np.zeros(n * k)
    keep = ~diffuse_mask
    star = np.asarray(parameters.initial_state_covariance, dtype=float)
    prior = np.zeros((k, k))
    prior[np.ix_(keep, keep)] = np.linalg.inv(star[np.ix_(keep, keep)])
    precision[:k, :k] += prior
    shift[:k] += prior @ mu0
    Qi = np.linalg.inv(Q)
    for t in range(1, n):
        # (z_t - F z_{t-1} - b)^T Q^-1 (...), in the unknowns (z_{t-1}, z_t)
        A = np.hstack([-F, np.eye(k)])
        rows = slice((t - 1) * k, (t + 1) * k)
        precision[rows, rows] += A.T @ Qi @ A
        shift[rows] += A.T @ Qi @ b
    for t in range(n):
        observed = ~np.isnan(y[t])
        if not observed.any():
            continue
        Ho = H[observed]
        Ri = np.linalg.inv(R[np.ix_(observed, observed)])
        rows = slice(t * k, (t + 1) * k)
        precision[rows, rows] += Ho.T @ Ri @ Ho
        shift[rows] += Ho.T @ Ri @ (y[t, observed] - d[observed])
    covariance = np.linalg.inv(precision)
    mean = covariance @ shift
    blocks = covariance.reshape(n, k, n, k)
    covariances = np.array([blocks[t, :, t] for t in range(n)])
    cross = np.zeros((n, k, k))
    for t in range(1, n):
        cross[t] = blocks[t, :, t - 1]  # Cov(z_t, z_{t-1})
    return mean.reshape(n, k), covariances, cross


@pytest.mark.parametrize("mask", [[True, True, True], [True, False, True], [False, True, False]])
def test_smoother_equals_the_dense_flat_prior_posterior(mask):
    from skseq.inference.kalman import kalman_smoother

    rng = np.random.default_rng(11)
    parameters = random_model(rng)
    parameters = parameters._replace(initial_state_covariance=np.diag([0.5, 0.8, 1.3]))
    y = rng.normal(size=(12, 2))
    y[0, 1] = np.nan  # partly missing, in the diffuse period
    y[1] = np.nan  # wholly missing, in the diffuse period
    y[7, 0] = np.nan
    mask = np.array(mask)
    ours = kalman_smoother(parameters, y, diffuse=mask)
    # three diffuse coordinates need three observed entries: rows 0, 2 (and 3)
    assert ours.n_diffuse[0] == {3: 3, 2: 3, 1: 1}[int(mask.sum())]
    mean, covariances, cross = dense_posterior(parameters, y, mask)
    assert_allclose(ours.smoothed_means, mean, atol=1e-9)
    assert_allclose(ours.smoothed_covariances, covariances, atol=1e-9)
    assert_allclose(ours.cross_covariances, cross, atol=1e-9)


def test_smoother_equals_statsmodels_on_the_nile_and_a_seasonal_trend():
    from skseq.inference.kalman import kalman_smoother

    y = nile()
    model, theirs = unobserved_components(y, [15099.0, 1469.1], level="llevel")
    ours = kalman_smoother(system(model.ssm), y[:, None], diffuse=True)
    assert_allclose(ours.smoothed_means, theirs.smoothed_state.T, atol=1e-7)
    assert_allclose(
        ours.smoothed_covariances, theirs.smoothed_state_cov.transpose(2, 0, 1), rtol=1e-8
    )
    y[[1, 2, 40]] = np.nan
    model = sm.tsa.UnobservedComponents(y, level="lltrend", seasonal=4)
    model.update([15000.0, 1400.0, 10.0, 50.0])
    parameters = system(model.ssm)
    parameters = parameters._replace(
        transition_covariance=parameters.transition_covariance + np.diag([0, 0, 0, 5.0, 5.0])
    )
    theirs = statsmodels_smoother(parameters, y[:, None], Initialization(5, "diffuse"))
    ours = kalman_smoother(parameters, y[:, None], diffuse=True)
    scale = np.abs(theirs.smoothed_state).max()
    assert_allclose(ours.smoothed_means, theirs.smoothed_state.T, atol=1e-9 * scale)
    variance = theirs.smoothed_state_cov.transpose(2, 0, 1)
    assert_allclose(ours.smoothed_covariances, variance, atol=1e-9 * np.abs(variance).max())


def test_smoother_equals_statsmodels_on_the_partly_diffuse_bivariate_model():
    from skseq.inference.kalman import kalman_smoother

    y = bivariate_data()
    parameters, theirs = partly_diffuse_bivariate(y)
    ours = kalman_smoother(parameters, y, diffuse=np.array([True, False, False]))
    assert_allclose(ours.smoothed_means, theirs.smoothed_state.T, atol=1e-9)
    assert_allclose(
        ours.smoothed_covariances, theirs.smoothed_state_cov.transpose(2, 0, 1), atol=1e-9
    )
    assert_allclose(ours.log_likelihood, theirs.llf, rtol=1e-12)


def test_smoother_with_a_general_p_inf_is_the_limit_of_a_huge_prior_variance():
    from skseq.inference.kalman import kalman_smoother

    rng = np.random.default_rng(12)
    parameters = random_model(rng)
    y = rng.normal(size=(15, 2))
    y[0, 0] = np.nan
    basis = rng.normal(size=(3, 2))
    star = 0.4 * np.eye(3)
    exact = kalman_smoother(
        parameters._replace(initial_state_covariance=star), y, diffuse=basis @ basis.T
    )
    huge = kalman_smoother(
        parameters._replace(initial_state_covariance=star + 1e7 * basis @ basis.T), y
    )
    for ours, limit in zip(exact[:3], huge[:3]):
        assert_allclose(ours, limit, atol=1e-4 * (1 + np.abs(limit).max()))


def test_smoother_refuses_a_sequence_that_ends_in_its_diffuse_period():
    from skseq.inference.kalman import kalman_smoother

    parameters = random_model(np.random.default_rng(13))
    y = np.random.default_rng(14).normal(size=(3, 2))
    y[1:, :] = np.nan  # two observed entries for three diffuse coordinates
    with pytest.raises(np.linalg.LinAlgError, match="the data do not determine the state"):
        kalman_smoother(parameters, y, diffuse=True)
    # the filter's diffuse log-likelihood is still defined
    assert np.isfinite(kalman_filter(parameters, y, diffuse=True).log_likelihood)


# -- the gradient and maximum likelihood ---------------------------------------------

COVARIANCES = ("transition_covariance", "observation_covariance", "initial_state_covariance")


def diffuse_forms(rng, k):
    basis = rng.normal(size=(k, 2))
    return {
        "all": True,
        "mask": np.array([True, False, True]),
        "matrix": basis @ basis.T,
    }


@pytest.mark.parametrize("form", ["all", "mask", "matrix"])
def test_gradient_equals_finite_differences_of_the_diffuse_log_likelihood(form):
    from gradient_checks import numerical_gradient

    from skseq.inference.kalman_mle import lgssm_log_likelihood_gradient

    rng = np.random.default_rng(21)
    parameters = random_model(rng)._replace(
        control_matrix=rng.normal(size=(3, 1)),
        initial_state_covariance=np.array([[1.0, 0.2, 0.1], [0.2, 0.8, 0.0], [0.1, 0.0, 0.6]]),
    )
    diffuse = diffuse_forms(rng, 3)[form]
    X = rng.normal(size=(14, 2))
    X[0, 1] = np.nan  # partly missing in the diffuse period
    X[1] = np.nan
    X[6, 0] = np.nan
    controls = rng.normal(size=(14, 1))
    lengths = [8, 6]

    def log_likelihood(moved):
        return kalman_filter(
            moved, X, controls=controls, lengths=lengths, diffuse=diffuse
        ).log_likelihood

    result = lgssm_log_likelihood_gradient(
        parameters, X, controls=controls, lengths=lengths, diffuse=diffuse
    )
    assert_allclose(result.log_likelihood, log_likelihood(parameters), rtol=1e-12)
    for name in LGSSMParameters._fields:
        value = np.array(getattr(parameters, name), dtype=np.float64)

        def objective(name=name, value=value):
            moved = 0.5 * (value + value.T) if name in COVARIANCES else value
            return log_likelihood(parameters._replace(**{name: moved}))

        numerical = numerical_gradient(objective, value)
        if name in COVARIANCES:
            numerical = 0.5 * (numerical + numerical.T)
        assert_allclose(
            getattr(result.gradient, name), numerical, rtol=1e-5, atol=1e-6, err_msg=name
        )


def test_nile_maximum_likelihood_equals_statsmodels_exact_diffuse_fit():
    from skseq.inference.kalman_mle import (
        LGSSMParameterization,
        LogVariances,
        lgssm_maximum_likelihood,
        lgssm_parameter_covariance,
    )

    y = nile()
    theirs = sm.tsa.UnobservedComponents(y, "llevel", use_exact_diffuse=True).fit(disp=False)
    template = LGSSMParameters(
        [[1.0]], [[1.0]], [[1000.0]], [[10000.0]], initial_state_covariance=[[0.0]]
    )
    parameterization = LGSSMParameterization(
        template,
        {"observation_covariance": LogVariances(), "transition_covariance": LogVariances()},
    )
    fit = lgssm_maximum_likelihood(parameterization, y[:, None], diffuse=True)
    assert fit.converged
    assert fit.log_likelihood >= theirs.llf - 1e-3
    assert_allclose(fit.log_likelihood, theirs.llf, atol=1e-3)
    # Durbin & Koopman's estimates (their exact diffuse likelihood): 15 099 and 1 469.1
    estimates = parameterization.reported(fit.unconstrained)
    assert_allclose(estimates, [1469.1, 15099.0], rtol=1e-2)
    # statsmodels' optimiser stops earlier on this flat likelihood (within 1 %)
    assert_allclose(estimates, theirs.params[::-1], rtol=2e-2)
    covariance = lgssm_parameter_covariance(
        parameterization, fit.unconstrained, y[:, None], cov_type="oim", diffuse=True
    )
    assert np.all(covariance.standard_errors > 0)
    # the OPG from differenced rows' densities: statsmodels' OPG at its own estimates
    at_theirs = np.log(theirs.params[::-1])
    opg = lgssm_parameter_covariance(parameterization, at_theirs, y[:, None], diffuse=True)
    assert_allclose(opg.standard_errors, theirs.bse[::-1], rtol=2e-3)


def test_differenced_row_scores_are_the_limit_of_a_huge_prior_variance_s_analytic_ones():
    """Under the exact diffuse start the OPG differences the rows' log predictive
    densities; with a prior variance of 1e10 the analytic per-row scores give the
    same information (the diffuse rows' kappa terms do not depend on the parameters)."""
    from skseq.inference.kalman_mle import (
        LGSSMParameterization,
        LogVariances,
        lgssm_parameter_covariance,
    )

    y = nile()[:, None]
    blocks = {"observation_covariance": LogVariances(), "transition_covariance": LogVariances()}
    level = LGSSMParameters([[1.0]], [[1.0]], [[1469.1]], [[15099.0]])
    exact = LGSSMParameterization(level._replace(initial_state_covariance=[[0.0]]), blocks)
    huge = LGSSMParameterization(level._replace(initial_state_covariance=[[1e10]]), blocks)
    u = exact.unconstrained()
    differenced = lgssm_parameter_covariance(exact, u, y, diffuse=True)
    analytic = lgssm_parameter_covariance(huge, u, y)
    assert_allclose(differenced.information, analytic.information, rtol=1e-5)


def test_a_time_varying_system_is_the_limit_of_a_huge_prior_variance():
    from skseq.inference.kalman import kalman_smoother

    rng = np.random.default_rng(31)
    parameters = random_model(rng)
    n = 12
    transitions = parameters.transition_matrix + 0.1 * rng.normal(size=(n - 1, 3, 3))
    observations = parameters.observation_matrix + 0.2 * rng.normal(size=(n, 2, 3))
    varying = parameters._replace(
        transition_matrix=transitions,
        observation_matrix=observations,
        initial_state_covariance=0.3 * np.eye(3),
    )
    y = rng.normal(size=(n, 2))
    y[1, 1] = np.nan
    exact_filter = kalman_filter(varying, y, diffuse=True)
    huge = varying._replace(initial_state_covariance=0.3 * np.eye(3) + 1e7 * np.eye(3))
    # three diffuse coordinates: -log(kappa) / 2 each
    assert_allclose(
        kalman_filter(huge, y).log_likelihood + 1.5 * np.log(1e7),
        exact_filter.log_likelihood,
        rtol=1e-5,
    )
    exact = kalman_smoother(varying, y, diffuse=True)
    limit = kalman_smoother(huge, y)
    for ours, theirs in zip(exact[:3], limit[:3]):
        assert_allclose(ours, theirs, atol=1e-4 * (1 + np.abs(theirs).max()))
