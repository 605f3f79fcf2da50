"""Exact maximum likelihood of linear-Gaussian SSMs: the Fisher-identity gradient against
finite differences of the exact log-likelihood, the transformation layer's chain rule, and
the Nile local level model against Durbin & Koopman and statsmodels."""

import numpy as np
import pytest
from gradient_checks import numerical_gradient
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose

from skseq.datasets import load_nile
from skseq.inference.kalman import LGSSMParameters, kalman_filter
from skseq.inference.kalman_mle import (
    CholeskyCovariance,
    FreeEntries,
    LGSSMGradient,
    LGSSMParameterization,
    LogVariances,
    lgssm_log_likelihood_gradient,
    lgssm_maximum_likelihood,
    lgssm_parameter_covariance,
    lgssm_score_obs,
)

COVARIANCES = ("transition_covariance", "observation_covariance", "initial_state_covariance")


def spd(rng, n, diagonal=False):
    if diagonal:
        return np.diag(rng.uniform(0.5, 2.0, size=n))
    a = rng.normal(size=(n, n))
    return a @ a.T / n + 0.5 * np.eye(n)


def random_parameters(rng, k, p, m, diagonal=False):
    transition = rng.normal(size=(k, k))
    transition *= 0.9 / np.max(np.abs(np.linalg.eigvals(transition)))
    return LGSSMParameters(
        transition_matrix=transition,
        observation_matrix=rng.normal(size=(p, k)),
        transition_covariance=spd(rng, k, diagonal),
        observation_covariance=spd(rng, p, diagonal),
        transition_offset=rng.normal(size=k),
        observation_offset=rng.normal(size=p),
        control_matrix=rng.normal(size=(k, m)) if m else None,
        initial_state_mean=rng.normal(size=k),
        initial_state_covariance=spd(rng, k),
    )


def with_missing(rng, X):
    X = X.copy()
    X[2] = np.nan  # a row with no observed entry
    X[5, 0] = np.nan  # rows observed in part
    if X.shape[1] > 2:
        X[7, [0, 2]] = np.nan
    return X


def log_likelihood(parameters, X, controls, lengths):
    return kalman_filter(parameters, X, controls=controls, lengths=lengths).log_likelihood


@pytest.mark.parametrize(
    "k, p, m, lengths",
    [(1, 1, 0, None), (2, 3, 1, [9, 7]), (3, 2, 2, [5, 6, 5])],
)
def test_fisher_identity_gradient_equals_finite_differences_of_the_exact_log_likelihood(
    k, p, m, lengths
):
    rng = np.random.default_rng(k * 10 + p)
    parameters = random_parameters(rng, k, p, m)
    X = with_missing(rng, rng.normal(size=(16, p)))
    controls = rng.normal(size=(16, m)) if m else None
    result = lgssm_log_likelihood_gradient(parameters, X, controls=controls, lengths=lengths)
    assert isinstance(result, LGSSMGradient)
    assert np.isclose(result.log_likelihood, log_likelihood(parameters, X, controls, lengths))
    for name in LGSSMParameters._fields:
        if name == "control_matrix" and not m:
            continue
        value = np.array(getattr(parameters, name), dtype=np.float64)

        def objective(name=name, value=value):
            # a covariance moves symmetrically: both (i, j) and (j, i) entries
            moved = 0.5 * (value + value.T) if name in COVARIANCES else value
            return log_likelihood(parameters._replace(**{name: moved}), X, controls, lengths)

        numerical = numerical_gradient(objective, value)
        analytic = getattr(result.gradient, name)
        if name in COVARIANCES:  # d/dC_ij moves C_ij and C_ji: 2 G_ij off the diagonal
            numerical = 0.5 * (numerical + numerical.T)
        assert analytic.shape == value.shape
        assert_allclose(analytic, numerical, rtol=1e-5, atol=1e-6, err_msg=name)


def blocks_of(kind, k, p, m):
    """Several parameterisations of the same model."""
    if kind == "cholesky":
        return {
            "transition_matrix": FreeEntries(),
            "observation_matrix": FreeEntries(scale=2.0),
            "transition_covariance": CholeskyCovariance(),
            "observation_covariance": CholeskyCovariance(),
            "initial_state_mean": FreeEntries(),
            "initial_state_covariance": CholeskyCovariance(),
            **({"control_matrix": FreeEntries()} if m else {}),
        }
    mask = np.zeros((k, k), dtype=bool)
    mask[0, 0] = True
    return {  # log variances, masked entries, offsets
        "transition_matrix": FreeEntries(mask=mask),
        "transition_covariance": LogVariances(mask=np.arange(k) == 0),
        "observation_covariance": LogVariances(),
        "transition_offset": FreeEntries(scale=0.5),
        "observation_offset": FreeEntries(),
    }


@pytest.mark.parametrize("kind", ["cholesky", "diagonal"])
def test_pulled_back_gradient_equals_finite_differences_in_unconstrained_coordinates(kind):
    rng = np.random.default_rng(3)
    k, p, m = 2, 2, 1
    parameters = random_parameters(rng, k, p, m, diagonal=kind == "diagonal")
    X = with_missing(rng, rng.normal(size=(14, p)))
    controls = rng.normal(size=(14, m))
    parameterization = LGSSMParameterization(parameters, blocks_of(kind, k, p, m))
    u = parameterization.unconstrained() + 0.1 * rng.normal(size=parameterization.n_free)

    def objective():
        return log_likelihood(parameterization.constrained(u), X, controls, [8, 6])

    gradient = lgssm_log_likelihood_gradient(
        parameterization.constrained(u), X, controls=controls, lengths=[8, 6]
    ).gradient
    assert_allclose(
        parameterization.pull_back(u, gradient),
        numerical_gradient(objective, u),
        rtol=1e-5,
        atol=1e-6,
    )
    assert len(parameterization.labels) == parameterization.n_free


@pytest.mark.parametrize("kind", ["cholesky", "diagonal"])
def test_parameterization_round_trips_and_its_jacobians_are_derivatives(kind):
    rng = np.random.default_rng(4)
    parameters = random_parameters(rng, 2, 2, 1, diagonal=kind == "diagonal")
    parameterization = LGSSMParameterization(parameters, blocks_of(kind, 2, 2, 1))
    u = parameterization.unconstrained()
    for name, value in zip(LGSSMParameters._fields, parameterization.constrained(u)):
        assert_allclose(value, getattr(parameterization.parameters, name), err_msg=name)
    u = u + 0.2 * rng.normal(size=u.size)
    assert_allclose(parameterization.unconstrained(parameterization.constrained(u)), u)
    for i in range(u.size):

        def entry(i=i):
            return parameterization.flatten(parameterization.constrained(u))[i]

        def reported(i=i):
            return parameterization.reported(u)[i]

        assert_allclose(parameterization.jacobian(u)[i], numerical_gradient(entry, u), atol=1e-7)
        assert_allclose(
            parameterization.reported_jacobian(u)[i], numerical_gradient(reported, u), atol=1e-7
        )
    # a held entry keeps the template's value whatever u is
    constrained = parameterization.constrained(u + 1.0)
    if kind == "diagonal":
        assert constrained.transition_matrix[1, 1] == parameters.transition_matrix[1, 1]
        assert constrained.transition_covariance[1, 1] == parameters.transition_covariance[1, 1]
    assert_allclose(constrained.transition_covariance, constrained.transition_covariance.T)
    assert np.all(np.linalg.eigvalsh(constrained.transition_covariance) > 0)


def test_row_scores_are_the_gradients_of_the_rows_log_predictive_densities():
    rng = np.random.default_rng(5)
    parameters = random_parameters(rng, 2, 2, 1)
    X = with_missing(rng, rng.normal(size=(10, 2)))
    controls = rng.normal(size=(10, 1))
    lengths = [6, 4]
    result = lgssm_score_obs(parameters, X, controls=controls, lengths=lengths)
    filtered = kalman_filter(parameters, X, controls=controls, lengths=lengths)
    assert_allclose(result.log_predictive, filtered.log_predictive, atol=1e-10)
    total = lgssm_log_likelihood_gradient(parameters, X, controls=controls, lengths=lengths)
    for name in LGSSMParameters._fields:
        assert_allclose(
            getattr(result.scores, name).sum(axis=0),
            getattr(total.gradient, name),
            atol=1e-9,
            err_msg=name,
        )
    value = np.array(parameters.observation_offset)
    for row in (0, 3, 6, 8):

        def density(row=row):
            moved = parameters._replace(observation_offset=value)
            return kalman_filter(moved, X, controls=controls, lengths=lengths).log_predictive[row]

        assert_allclose(
            result.scores.observation_offset[row], numerical_gradient(density, value), atol=1e-6
        )
    # a row with no observed entry has log density 0 whatever the parameters: score 0
    for name, value in zip(LGSSMParameters._fields, result.scores):
        assert_allclose(value[2], 0.0, atol=1e-10, err_msg=name)


@pytest.mark.parametrize("k, p, m", [(1, 1, 0), (2, 3, 1), (3, 2, 2)])
def test_row_scores_are_differences_of_the_gradients_of_the_prefixes(k, p, m):
    """The kernel's one pass per sequence gives row t's score as the gradient of
    log p(x_1..x_t) minus that of log p(x_1..x_{t-1}), each by a whole smoother
    pass on the prefix of the sequence."""
    rng = np.random.default_rng(20 + k)
    parameters = random_parameters(rng, k, p, m)
    X = with_missing(rng, rng.normal(size=(11, p)))
    controls = rng.normal(size=(11, m)) if m else None
    lengths = [7, 1, 3]
    result = lgssm_score_obs(parameters, X, controls=controls, lengths=lengths)
    starts = np.concatenate(([0], np.cumsum(lengths)))
    for first, stop in zip(starts[:-1], starts[1:]):
        previous = None
        for row in range(first, stop):
            prefix = lgssm_log_likelihood_gradient(
                parameters,
                X[first : row + 1],
                controls=None if controls is None else controls[first : row + 1],
            ).gradient
            for name in LGSSMParameters._fields:
                expected = getattr(prefix, name) - (
                    0.0 if previous is None else getattr(previous, name)
                )
                assert_allclose(
                    getattr(result.scores, name)[row],
                    expected,
                    rtol=1e-9,
                    atol=1e-10,
                    err_msg=f"{name}, row {row}",
                )
            previous = prefix


def nile():
    return load_nile().data.reshape(-1, 1).astype(np.float64)


def local_level(diffuse_variance=1e6):
    """A local level model; the prior N(0, 1e6) is statsmodels' approximate diffuse one."""
    template = LGSSMParameters(
        [[1.0]],
        [[1.0]],
        [[1000.0]],
        [[10000.0]],
        initial_state_mean=[0.0],
        initial_state_covariance=[[diffuse_variance]],
    )
    blocks = {"transition_covariance": LogVariances(), "observation_covariance": LogVariances()}
    return LGSSMParameterization(template, blocks)


def test_nile_local_level_mle_is_durbin_and_koopmans():
    """Durbin & Koopman's estimates are those of the exact diffuse prior: a prior of
    variance 1e10 (1e6 times the data's variance) is as diffuse to four digits."""
    X = nile()
    parameterization = local_level(1e10)
    fit = lgssm_maximum_likelihood(parameterization, X)
    assert fit.converged, fit.message
    eta, epsilon = parameterization.reported(fit.unconstrained)
    assert_allclose([epsilon, eta], [15099.0, 1469.1], rtol=1e-3)
    assert np.all(np.diff(fit.history) >= -1e-9)
    assert np.isclose(fit.history[-1], fit.log_likelihood)
    assert np.isclose(fit.log_likelihood, kalman_filter(fit.parameters, X).log_likelihood)
    # the maximum: the gradient vanishes there
    gradient = lgssm_log_likelihood_gradient(fit.parameters, X).gradient
    assert np.max(np.abs(parameterization.pull_back(fit.unconstrained, gradient))) < 1e-4


def test_nile_local_level_against_statsmodels():
    sm = pytest.importorskip("statsmodels.api")
    X = nile()
    parameterization = local_level()
    fit = lgssm_maximum_likelihood(parameterization, X)
    ours = kalman_filter(fit.parameters, X)
    model = sm.tsa.UnobservedComponents(X.ravel(), "llevel")
    theirs = model.fit(disp=False)
    # statsmodels' llf leaves out the first row (its approximate diffuse burn-in)
    assert ours.log_likelihood - ours.log_predictive[0] >= theirs.llf - 1e-3
    # at statsmodels' parameters the two likelihoods are the same function
    at_theirs = parameterization.constrained(np.log(theirs.params[::-1]))
    filtered = kalman_filter(at_theirs, X)
    assert_allclose(filtered.log_likelihood - filtered.log_predictive[0], theirs.llf, atol=1e-8)
    # standard errors at the same point: OPG against OPG, the Hessian against statsmodels'
    # numerical Hessian ("approx"; its "oim" is Harvey's expected-information formula)
    u = np.log(theirs.params[::-1])
    for ours_type, their_type in (("opg", "opg"), ("oim", "approx")):
        covariance = lgssm_parameter_covariance(parameterization, u, X, cov_type=ours_type)
        reference = model.smooth(theirs.params, cov_type=their_type).bse[::-1]
        assert_allclose(covariance.standard_errors, reference, rtol=0.01, err_msg=ours_type)
        assert_allclose(covariance.covariance, covariance.covariance.T)
    assert covariance.labels == ["transition_covariance[0,0]", "observation_covariance[0,0]"]


@pytest.mark.parametrize("masked", [False, True])
def test_opg_information_is_the_outer_product_of_the_pulled_back_row_scores(masked):
    """The OPG path carries only the moments the free coordinates weigh: its
    information equals the one from every row's full score (lgssm_score_obs)
    pulled back to the free coordinates, with sequences, controls, missing
    entries and burned rows."""
    rng = np.random.default_rng(31)
    parameters = random_parameters(rng, 3, 2, 1, diagonal=True)
    X = with_missing(rng, rng.normal(size=(14, 2)))
    controls = rng.normal(size=(14, 1))
    lengths = [9, 5]
    mask = np.zeros((3, 3), dtype=bool)
    mask[0, 0] = mask[2, 1] = True
    blocks = {
        "transition_matrix": FreeEntries(mask=mask if masked else None),
        "transition_covariance": LogVariances(),
        "observation_covariance": LogVariances(),
    }
    parameterization = LGSSMParameterization(parameters, blocks)
    u = parameterization.unconstrained() + rng.normal(scale=0.1, size=parameterization.n_free)
    kwargs = dict(controls=controls, lengths=lengths)
    result = lgssm_parameter_covariance(parameterization, u, X, burn=2, **kwargs)
    scores = lgssm_score_obs(parameterization.constrained(u), X, **kwargs).scores
    per_row = parameterization.pull_back(u, scores)
    per_row[[0, 1, 9, 10]] = 0.0  # the burned rows
    assert_allclose(result.information, per_row.T @ per_row, rtol=1e-9, atol=1e-12)


def test_opg_and_oim_agree_on_a_long_correctly_specified_series():
    from skseq.inference.kalman import sample_lgssm

    truth = LGSSMParameters([[0.8]], [[1.0]], [[0.5]], [[1.0]])
    X = sample_lgssm(truth, 3000, random_state=1).observations
    blocks = {
        "transition_matrix": FreeEntries(),
        "transition_covariance": CholeskyCovariance(),
        "observation_covariance": LogVariances(),
    }
    parameterization = LGSSMParameterization(truth, blocks)
    fit = lgssm_maximum_likelihood(parameterization, X)
    errors = {
        cov_type: lgssm_parameter_covariance(
            parameterization, fit.unconstrained, X, cov_type=cov_type
        ).standard_errors
        for cov_type in ("opg", "oim")
    }
    assert_allclose(errors["opg"], errors["oim"], rtol=0.15)
    estimates = parameterization.reported(fit.unconstrained)
    assert np.all(np.abs(estimates - [0.8, 0.5, 1.0]) < 4 * errors["oim"])


def test_no_free_parameter_and_the_errors():
    X = nile()
    parameterization = LGSSMParameterization(local_level().parameters, {})
    fit = lgssm_maximum_likelihood(parameterization, X)
    assert fit.n_iter == 0 and fit.unconstrained.shape == (0,)
    with pytest.raises(TypeError, match="parameterization must be an LGSSMParameterization"):
        lgssm_maximum_likelihood(local_level().parameters, X)
    with pytest.raises(ValueError, match="cov_type must be one of"):
        lgssm_parameter_covariance(local_level(), np.zeros(2), X, cov_type="hessian")
    with pytest.raises(ValueError, match=r"unconstrained vector must have shape \(2,\)"):
        local_level().constrained(np.zeros(3))
    with pytest.raises(ValueError, match="blocks names unknown parameter"):
        LGSSMParameterization(local_level().parameters, {"level": FreeEntries()})
    with pytest.raises(TypeError, match=r"blocks\['transition_matrix'\] must be a ParameterBlock"):
        LGSSMParameterization(local_level().parameters, {"transition_matrix": "free"})
    with pytest.raises(ValueError, match="the mask of transition_matrix must be a boolean"):
        LGSSMParameterization(
            local_level().parameters, {"transition_matrix": FreeEntries(mask=[True, False])}
        )
    full = local_level().parameters._replace(transition_covariance=[[1.0]])
    with pytest.raises(ValueError, match="max_iter must be >= 0"):
        lgssm_maximum_likelihood(local_level(), X, max_iter=-1)
    two = LGSSMParameters(np.eye(2), np.ones((1, 2)), [[1.0, 0.5], [0.5, 1.0]], [[1.0]])
    with pytest.raises(ValueError, match="must be diagonal to be parameterised by log variances"):
        LGSSMParameterization(two, {"transition_covariance": LogVariances()})
    assert full.transition_covariance == [[1.0]]


def test_n_jobs_and_the_memory_bound_give_the_one_thread_numbers():
    """Blocks of whole sequences on two threads, and a sequence beyond the working
    memory smoothed in chunks (forward-only), give the one-thread results."""
    import sklearn

    rng = np.random.default_rng(8)
    parameters = random_parameters(rng, 2, 2, 1)
    X = with_missing(rng, rng.normal(size=(90, 2)))
    controls = rng.normal(size=(90, 1))
    lengths = [30, 25, 35]
    kwargs = dict(controls=controls, lengths=lengths)
    one = lgssm_log_likelihood_gradient(parameters, X, **kwargs)
    with sklearn.config_context(working_memory=8 * 50 * 7 / 2**20):  # 50 rows' scratch
        bounded = lgssm_log_likelihood_gradient(parameters, X, controls=controls)
    two = lgssm_log_likelihood_gradient(parameters, X, n_jobs=2, **kwargs)
    unbounded = lgssm_log_likelihood_gradient(parameters, X, controls=controls)
    assert_allclose(two.sequence_log_likelihood, one.sequence_log_likelihood, rtol=1e-12)
    assert_allclose(bounded.log_likelihood, unbounded.log_likelihood, rtol=1e-12)
    for name in LGSSMParameters._fields:
        for result, reference in ((two, one), (bounded, unbounded)):
            assert_allclose(
                getattr(result.gradient, name),
                getattr(reference.gradient, name),
                rtol=1e-10,
                atol=1e-12,
                err_msg=name,
            )
    scores = lgssm_score_obs(parameters, X, n_jobs=2, **kwargs)
    reference = lgssm_score_obs(parameters, X, **kwargs)
    assert_allclose(scores.log_predictive, reference.log_predictive, rtol=1e-12)
    for name in LGSSMParameters._fields:
        assert_allclose(getattr(scores.scores, name), getattr(reference.scores, name), rtol=1e-12)
    parameterization = LGSSMParameterization(
        parameters,
        {"transition_covariance": CholeskyCovariance(), "observation_offset": FreeEntries()},
    )
    fits = [
        lgssm_maximum_likelihood(parameterization, X, n_jobs=n_jobs, **kwargs) for n_jobs in (1, 2)
    ]
    assert_allclose(fits[1].unconstrained, fits[0].unconstrained, rtol=1e-7, atol=1e-9)
    assert_allclose(fits[1].log_likelihood, fits[0].log_likelihood, rtol=1e-12)
    for cov_type in ("opg", "oim"):
        errors = [
            lgssm_parameter_covariance(
                parameterization,
                fits[0].unconstrained,
                X,
                cov_type=cov_type,
                n_jobs=n_jobs,
                **kwargs,
            ).standard_errors
            for n_jobs in (1, 2)
        ]
        # the Hessian's central differences magnify rounding: 1e-6
        assert_allclose(errors[1], errors[0], rtol=1e-6, err_msg=cov_type)
    with pytest.raises(ValueError, match="n_jobs"):
        lgssm_log_likelihood_gradient(parameters, X, n_jobs=0, **kwargs)


def test_n_jobs_with_the_exact_diffuse_initial_state_gives_the_one_thread_numbers():
    X = nile()
    parameters = LGSSMParameters([[1.0]], [[1.0]], [[1469.1]], [[15099.0]])
    one, two = (
        lgssm_log_likelihood_gradient(
            parameters, X, lengths=[40, 35, 25], diffuse=True, n_jobs=n_jobs
        )
        for n_jobs in (1, 2)
    )
    assert_allclose(two.sequence_log_likelihood, one.sequence_log_likelihood, rtol=1e-12)
    for name in ("transition_covariance", "observation_covariance"):
        assert_allclose(getattr(two.gradient, name), getattr(one.gradient, name), rtol=1e-10)


def test_held_coordinates_stay_put_and_the_others_reach_the_conditional_maximum():
    X = nile()
    parameterization = local_level()
    start = np.log([500.0, 12000.0])  # [Q, R]
    held = lgssm_maximum_likelihood(parameterization, X, start=start, hold=[True, False])
    assert held.unconstrained[0] == start[0]
    # the maximum over R alone: the parameterization without Q's coordinate
    only_r = LGSSMParameterization(
        parameterization.constrained(start),
        {"observation_covariance": LogVariances()},
    )
    reference = lgssm_maximum_likelihood(only_r, X)
    assert_allclose(held.unconstrained[1], reference.unconstrained[0], atol=1e-5)
    assert_allclose(held.log_likelihood, reference.log_likelihood, rtol=1e-10)
    by_label = lgssm_maximum_likelihood(
        parameterization, X, start=start, hold=["transition_covariance[0,0]"]
    )
    assert_allclose(by_label.unconstrained, held.unconstrained, rtol=1e-12)
    everything = lgssm_maximum_likelihood(parameterization, X, start=start, hold=[True, True])
    assert everything.n_iter == 0 and np.array_equal(everything.unconstrained, start)
    with pytest.raises(ValueError, match="hold names unknown coordinate"):
        lgssm_maximum_likelihood(parameterization, X, hold=["level"])
    with pytest.raises(ValueError, match=r"hold must be a boolean mask of shape \(2,\)"):
        lgssm_maximum_likelihood(parameterization, X, hold=[1, 0])


def test_a_coordinate_at_bound_is_held_and_gets_nan_rows():
    X = nile()
    parameterization = local_level()
    fit = lgssm_maximum_likelihood(parameterization, X)
    for cov_type in ("opg", "oim"):
        result = lgssm_parameter_covariance(
            parameterization, fit.unconstrained, X, cov_type=cov_type, at_bound=[True, False]
        )
        assert np.all(np.isnan(result.covariance[0])) and np.all(np.isnan(result.covariance[:, 0]))
        assert np.isnan(result.standard_errors[0]) and np.isnan(result.information[0, 0])
        # the other's variance is the inverse of its own information (Q held)
        information = result.information[1, 1]
        r = np.exp(fit.unconstrained[1])
        assert_allclose(result.standard_errors[1], r / np.sqrt(information), rtol=1e-12)
        labelled = lgssm_parameter_covariance(
            parameterization,
            fit.unconstrained,
            X,
            cov_type=cov_type,
            at_bound=["transition_covariance[0,0]"],
        )
        assert_allclose(labelled.standard_errors, result.standard_errors, equal_nan=True)
    with pytest.raises(ValueError, match="at_bound names unknown"):
        lgssm_parameter_covariance(parameterization, fit.unconstrained, X, at_bound=["Q"])


def test_an_indefinite_information_gives_nan_standard_errors_with_a_warning():
    from skseq.inference.kalman_mle import _pseudo_inverse, _standard_errors

    information = np.array([[4.0, 0.0, 0.0], [0.0, -2.0, 0.0], [0.0, 0.0, 1e-14]])
    with pytest.warns(UserWarning) as caught:
        covariance, unidentified = _pseudo_inverse(information, "oim", ["a", "b", "c"])
    messages = [str(warning.message) for warning in caught]
    assert "singular to its accuracy" in messages[0] and "['c'] are not identified" in messages[0]
    assert "not positive definite" in messages[1] and "['b']" in messages[1]
    assert unidentified.tolist() == [False, False, True]
    # a negative variance gives NaN, never 0
    assert_allclose(_standard_errors(covariance)[:2], [0.5, np.nan])


def test_coordinates_not_identified_get_nan_standard_errors_and_the_others_numbers():
    # Q and R of a local level model where only Q + R is identified: white noise
    # (the transition matrix 0), one long series
    X = np.random.default_rng(3).normal(size=(400, 1))
    template = LGSSMParameters([[0.0]], [[1.0]], [[0.4]], [[0.6]])
    blocks = {
        "transition_covariance": LogVariances(),
        "observation_covariance": LogVariances(),
        "observation_offset": FreeEntries(),
    }
    # the first state's variance the stationary one, Q: no row tells Q from R
    parameterization = LGSSMParameterization(template, blocks, stationary=[True])
    u = parameterization.unconstrained()
    with pytest.warns(UserWarning, match="not identified"):
        result = lgssm_parameter_covariance(parameterization, u, X)
    assert np.all(np.isnan(result.standard_errors[:2]))
    # the offset (the mean) is identified: its standard error is sqrt((Q + R) / n)
    assert_allclose(result.standard_errors[2], np.sqrt(1.0 / 400), rtol=0.1)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 6),
    n_null=st.integers(0, 3),
    log_scale=st.floats(-8, 8),
    seed=st.integers(0, 2**31 - 1),
)
def test_pseudo_inverse_inverts_the_identified_block_and_flags_the_rest(
    n, n_null, log_scale, seed
):
    """An information matrix with well-conditioned identified coordinates (at any
    scale) and exact null directions among the others: the identified block is
    inverted as the whole matrix would be without them, and exactly the
    coordinates the null directions touch are flagged (no warning without any)."""
    import warnings

    from skseq.inference.kalman_mle import _pseudo_inverse

    rng = np.random.default_rng(seed)
    n_null = min(n_null, n)
    identified = n - n_null
    a = rng.normal(size=(identified, identified))
    block = (a @ a.T + identified * np.eye(identified)) * 10.0**log_scale
    information = np.zeros((n, n))
    information[:identified, :identified] = block
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        covariance, unidentified = _pseudo_inverse(information, "opg", [str(i) for i in range(n)])
    assert unidentified.tolist() == [False] * identified + [True] * n_null
    assert (len(caught) > 0) == (n_null > 0)
    assert_allclose(
        covariance[:identified, :identified], np.linalg.inv(block), rtol=1e-8, atol=0
    )
    assert np.all(covariance[identified:] == 0) and np.all(covariance[:, identified:] == 0)
