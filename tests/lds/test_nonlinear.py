"""The unscented and extended Kalman filters: pykalman's numbers, the Kalman filter on
linear models, the unscented transform's exact moments, Jacobians by differences,
vectorised calls, missing rows and the errors."""

import numpy as np
import pytest
from sklearn.base import clone

from skseq import AdditiveUnscentedKalmanFilter, ExtendedKalmanFilter, UnscentedKalmanFilter
from skseq.inference.kalman import LGSSMParameters, kalman_filter, kalman_smoother
from skseq.inference.nonlinear import (
    NonlinearSSMParameters,
    extended_kalman_filter,
    extended_kalman_filter_step,
    extended_kalman_smoother,
    unscented_filter,
    unscented_filter_step,
    unscented_sigma_points,
    unscented_smoother,
    unscented_transform,
)

pykalman = pytest.importorskip("pykalman")

DT = 0.1
Q = np.array([[0.02, 0.005], [0.005, 0.03]])
R = np.array([[0.1, 0.02], [0.02, 0.2]])
MU0 = np.array([1.0, 0.2])
SIGMA0 = np.array([[0.5, 0.1], [0.1, 0.3]])


def swing(z):
    return np.array([z[0] + DT * z[1], z[1] - DT * np.sin(z[0])])


def look(z):
    return np.array([np.sin(z[0]), z[0] * z[1]])


def swing_noisy(z, w):
    return np.array([z[0] + DT * z[1] + w[0] * np.cos(z[0]), z[1] - DT * np.sin(z[0]) + w[1]])


def look_noisy(z, v):
    return np.array([np.sin(z[0]) + v[0], z[0] * z[1] + v[1] * (1 + z[1] ** 2)])


def observations(n_rows=40, seed=0):
    X = np.random.default_rng(seed).normal(size=(n_rows, 2)) * 0.3 + 0.5
    X[[row for row in (5, 17) if row < n_rows]] = np.nan
    return X


def theirs(cls, f, g):
    return cls(f, g, Q, R, MU0, SIGMA0)


CASES = [
    (UnscentedKalmanFilter, pykalman.UnscentedKalmanFilter, swing_noisy, look_noisy),
    (AdditiveUnscentedKalmanFilter, pykalman.AdditiveUnscentedKalmanFilter, swing, look),
]


@pytest.mark.parametrize("ours, reference, f, g", CASES, ids=["general", "additive"])
@pytest.mark.parametrize("vectorized", ["auto", True, False])
def test_filter_and_smoother_equal_pykalman(ours, reference, f, g, vectorized):
    X = observations()
    model = ours(f, g, Q, R, MU0, SIGMA0, vectorized=vectorized)
    expected = theirs(reference, f, g)
    for method in ("filter", "smooth"):
        means, covariances = getattr(model, method)(X)
        their_means, their_covariances = getattr(expected, method)(np.ma.masked_invalid(X))
        np.testing.assert_allclose(means, their_means, rtol=0, atol=1e-8)
        np.testing.assert_allclose(covariances, their_covariances, rtol=0, atol=1e-8)


@pytest.mark.parametrize("ours, reference, f, g", CASES, ids=["general", "additive"])
def test_filter_update_and_sample_equal_pykalman(ours, reference, f, g):
    model, expected = ours(f, g, Q, R, MU0, SIGMA0), theirs(reference, f, g)
    for observation in (np.array([0.3, 0.4]), None):
        ours_step = model.filter_update(MU0, SIGMA0, observation)
        their_step = expected.filter_update(MU0, SIGMA0, observation)
        for mine, their in zip(ours_step, their_step):
            np.testing.assert_allclose(mine, their, rtol=0, atol=1e-10)
    # this step's own covariances and functions
    step = model.filter_update(MU0, SIGMA0, [0.3, 0.4], transition_covariance=2 * Q)
    their = expected.filter_update(MU0, SIGMA0, [0.3, 0.4], transition_covariance=2 * Q)
    np.testing.assert_allclose(step[1], their[1], rtol=0, atol=1e-10)
    states, X = model.sample(15, random_state=3)
    their_states, their_X = expected.sample(15, random_state=3)
    np.testing.assert_allclose(states, their_states, rtol=0, atol=1e-12)
    np.testing.assert_allclose(X, their_X, rtol=0, atol=1e-12)


def test_three_states_seen_through_one_equal_pykalman():
    """A damped oscillator with a drifting frequency, seen through tanh of its position."""
    rng = np.random.default_rng(4)
    A = rng.normal(size=(3, 3))
    Q3, S3 = A @ A.T / 30 + 0.01 * np.eye(3), np.diag([0.5, 0.5, 0.1])

    def f(z):
        return np.array([z[0] + DT * z[1], z[1] - DT * z[2] ** 2 * z[0], z[2]])

    def g(z):
        return np.tanh(z[:1])

    X = np.tanh(np.sin(np.arange(30) / 3.0))[:, None] + 0.1 * rng.normal(size=(30, 1))
    X[[3, 4]] = np.nan
    masked = np.ma.masked_invalid(X)
    for ours, reference, functions in (
        (AdditiveUnscentedKalmanFilter, pykalman.AdditiveUnscentedKalmanFilter, (f, g)),
        (
            UnscentedKalmanFilter,
            pykalman.UnscentedKalmanFilter,
            (lambda z, w: f(z) + w, lambda z, v: g(z) + v * (1 + z[0] ** 2)),
        ),
    ):
        arguments = (*functions, Q3, [[0.05]], [0.5, 0.0, 1.0], S3)
        mine, theirs = ours(*arguments).smooth(X), reference(*arguments).smooth(masked)
        for one, other in zip(mine, theirs):
            np.testing.assert_allclose(one, other, rtol=0, atol=1e-8)


def test_pykalman_defaults_and_one_dimensional_observations():
    """No arguments: pykalman's identity functions and unit covariances; 1-D X is a column."""
    X = np.array([0.3, -0.2, np.nan, 1.1, 0.8])
    for ours, reference in (
        (UnscentedKalmanFilter(), pykalman.UnscentedKalmanFilter()),
        (AdditiveUnscentedKalmanFilter(), pykalman.AdditiveUnscentedKalmanFilter()),
    ):
        their = reference.smooth(np.ma.masked_invalid(X))
        for mine, expected in zip(ours.smooth(X), their):
            np.testing.assert_allclose(mine, expected, rtol=0, atol=1e-10)


# -- linear models: the Kalman filter --------------------------------------------------

F = np.array([[0.9, 0.2], [-0.1, 0.8]])
B = np.array([0.1, -0.05])
H = np.array([[1.0, 0.5], [0.0, 1.0], [0.3, -0.2]])
D = np.array([0.2, 0.0, -0.1])
R3 = np.diag([0.2, 0.1, 0.3])
LINEAR = LGSSMParameters(F, H, Q, R3, B, D, None, MU0, SIGMA0)


def linear_model(additive):
    if additive:
        return NonlinearSSMParameters(
            lambda z: F @ z + B[:, None] if z.ndim == 2 else F @ z + B,
            lambda z: H @ z + D[:, None] if z.ndim == 2 else H @ z + D,
            Q,
            R3,
            MU0,
            SIGMA0,
            transition_jacobians=lambda z: F,
            observation_jacobians=lambda z: H,
        )
    return NonlinearSSMParameters(
        lambda z, w: F @ z + B + w, lambda z, v: H @ z + D + v, Q, R3, MU0, SIGMA0
    )


def linear_data():
    X = np.random.default_rng(1).normal(size=(30, 3))
    X[4] = np.nan
    X[9, [0, 2]] = np.nan  # partly observed: conditioned on the observed entry
    return X


@pytest.mark.parametrize(
    "run",
    [
        lambda X, **kw: (unscented_filter, unscented_smoother, dict(additive=False)),
        lambda X, **kw: (unscented_filter, unscented_smoother, dict(additive=True)),
        lambda X, **kw: (
            unscented_filter,
            unscented_smoother,
            dict(additive=True, alpha=1e-3, beta=2.0, kappa=0.0),
        ),
        lambda X, **kw: (extended_kalman_filter, extended_kalman_smoother, {}),
        lambda X, **kw: (
            extended_kalman_filter,
            extended_kalman_smoother,
            dict(jacobian_method="central"),
        ),
    ],
    ids=["ukf", "additive-ukf", "additive-ukf-scaled", "ekf", "ekf-central"],
)
def test_on_a_linear_model_every_filter_is_the_kalman_filter(run):
    X = linear_data()
    filter_, smoother, options = run(X)
    additive = options.get("additive", True)
    model = linear_model(additive)
    if "jacobian_method" in options:
        model = model._replace(transition_jacobians=None, observation_jacobians=None)
    filtered, kalman = filter_(model, X, **options), kalman_filter(LINEAR, X)
    tolerance = 1e-6 if options.get("jacobian_method") == "central" else 1e-9
    np.testing.assert_allclose(filtered.filtered_means, kalman.filtered_means, atol=tolerance)
    np.testing.assert_allclose(
        filtered.filtered_covariances, kalman.filtered_covariances, atol=tolerance
    )
    np.testing.assert_allclose(filtered.predicted_means, kalman.predicted_means, atol=tolerance)
    np.testing.assert_allclose(filtered.log_likelihood, kalman.log_likelihood, atol=tolerance)
    np.testing.assert_allclose(filtered.log_predictive, kalman.log_predictive, atol=tolerance)
    smoothed, rts = smoother(model, X, **options), kalman_smoother(LINEAR, X)
    np.testing.assert_allclose(smoothed.smoothed_means, rts.smoothed_means, atol=tolerance)
    np.testing.assert_allclose(
        smoothed.smoothed_covariances, rts.smoothed_covariances, atol=tolerance
    )


def test_score_is_the_kalman_log_likelihood_on_a_linear_model():
    X = linear_data()
    model = AdditiveUnscentedKalmanFilter(
        lambda z: F @ z + B, lambda z: H @ z + D, Q, R3, MU0, SIGMA0
    )
    expected = kalman_filter(LINEAR, X).log_likelihood
    assert model.score(X) == pytest.approx(expected, abs=1e-9)
    ekf = ExtendedKalmanFilter(lambda z: F @ z + B, lambda z: H @ z + D, Q, R3, MU0, SIGMA0)
    assert ekf.score(X) == pytest.approx(expected, abs=1e-9)
    general = UnscentedKalmanFilter(
        lambda z, w: F @ z + B + w, lambda z, v: H @ z + D + v, Q, R3, MU0, SIGMA0
    )
    assert general.score(X) == pytest.approx(expected, abs=1e-9)


def test_maximising_score_recovers_the_observation_variance():
    """score is a smooth function of the parameters: its maximum over R is near the truth."""
    from scipy.optimize import minimize_scalar

    dt = 0.05

    def pendulum(z):
        omega = z[1] - dt * 9.81 * np.sin(z[0])
        return np.array([z[0] + dt * omega, omega])

    truth = AdditiveUnscentedKalmanFilter(
        pendulum,
        lambda z: np.sin(z[:1]),
        np.diag([1e-6, 1e-4]),
        [[0.01]],
        [1.2, 0.0],
        0.01 * np.eye(2),
    )
    _, X = truth.sample(400, random_state=0)
    model = clone(truth)
    found = minimize_scalar(
        lambda log_r: -model.set_params(observation_covariance=[[np.exp(log_r)]]).score(X),
        bounds=(np.log(1e-4), 0.0),
        method="bounded",
    )
    assert np.exp(found.x) == pytest.approx(0.01, rel=0.25)


# -- the unscented transform ---------------------------------------------------------


@pytest.mark.parametrize("mean, variance", [(0.0, 1.0), (1.5, 0.3), (-2.0, 4.0)])
def test_the_transform_of_a_square_has_the_exact_moments(mean, variance):
    """With kappa = 3 - n the points match the Gaussian's fourth moment: z**2 is exact."""
    sigma = unscented_sigma_points(np.array([mean]), np.array([[variance]]))
    result = unscented_transform(sigma, lambda z: z**2)
    assert result.mean[0] == pytest.approx(mean**2 + variance, rel=1e-12)
    assert result.covariance[0, 0] == pytest.approx(
        4 * mean**2 * variance + 2 * variance**2, rel=1e-12
    )
    assert result.cross_covariance[0, 0] == pytest.approx(2 * mean * variance, abs=1e-12)


def test_sigma_points_reproduce_the_moments_for_any_scaling():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(3, 3))
    covariance, mean = A @ A.T + 0.1 * np.eye(3), rng.normal(size=3)
    for alpha, beta, kappa in [(1.0, 0.0, None), (1e-1, 2.0, 0.0), (0.5, 1.0, 1.0)]:
        sigma = unscented_sigma_points(mean, covariance, alpha=alpha, beta=beta, kappa=kappa)
        assert sigma.points.shape == (7, 3)
        np.testing.assert_allclose(sigma.weights_mean @ sigma.points, mean, atol=1e-10)
        deviations = sigma.points - mean
        # the centre's deviation is zero: its covariance weight does not count
        np.testing.assert_allclose(
            deviations.T @ (sigma.weights_covariance[:, None] * deviations), covariance, atol=1e-9
        )
        assert sigma.weights_covariance[0] - sigma.weights_mean[0] == pytest.approx(
            1 - alpha**2 + beta
        )


def test_a_singular_covariance_gets_points_from_its_eigenvectors():
    covariance = np.array([[1.0, 1.0], [1.0, 1.0]])
    sigma = unscented_sigma_points(np.zeros(2), covariance)
    deviations = sigma.points
    np.testing.assert_allclose(
        deviations.T @ (sigma.weights_covariance[:, None] * deviations), covariance, atol=1e-12
    )


# -- the extended filter: Jacobians ------------------------------------------------------


def swing_jacobian(z):
    return np.array([[1.0, DT], [-DT * np.cos(z[0]), 1.0]])


def look_jacobian(z):
    return np.array([[np.cos(z[0]), 0.0], [z[1], z[0]]])


PENDULUM = dict(
    transition_functions=swing,
    observation_functions=look,
    transition_covariance=Q,
    observation_covariance=R,
    initial_state_mean=MU0,
    initial_state_covariance=SIGMA0,
    transition_jacobians=swing_jacobian,
    observation_jacobians=look_jacobian,
)


def test_ekf_jacobians_by_differences_equal_the_analytic_ones():
    X = observations()
    analytic = NonlinearSSMParameters(**PENDULUM)
    expected = extended_kalman_smoother(analytic, X)
    differences = analytic._replace(transition_jacobians=None, observation_jacobians=None)
    for method, tolerance in [("complex-step", 1e-12), ("auto", 1e-12), ("central", 1e-7)]:
        for vectorized in ("auto", False):
            result = extended_kalman_smoother(
                differences, X, jacobian_method=method, vectorized=vectorized
            )
            np.testing.assert_allclose(
                result.smoothed_means, expected.smoothed_means, rtol=0, atol=tolerance
            )
            np.testing.assert_allclose(
                result.smoothed_covariances, expected.smoothed_covariances, rtol=0, atol=tolerance
            )
            assert result.log_likelihood == pytest.approx(expected.log_likelihood, abs=tolerance)


def test_auto_takes_central_differences_of_code_that_is_not_complex_safe():
    calls = []

    def real_only(z):  # math-style code: float() refuses a complex state
        calls.append(np.ndim(z))
        return np.array([np.sin(float(z[0])), float(z[0]) * float(z[1])])

    X = observations()
    model = NonlinearSSMParameters(
        swing, real_only, Q, R, MU0, SIGMA0, transition_jacobians=swing_jacobian
    )
    auto = extended_kalman_filter(model, X)
    central = extended_kalman_filter(model, X, jacobian_method="central")
    np.testing.assert_allclose(auto.filtered_means, central.filtered_means, rtol=0, atol=0)
    analytic = model._replace(observation_functions=look, observation_jacobians=look_jacobian)
    np.testing.assert_allclose(
        auto.filtered_means, extended_kalman_filter(analytic, X).filtered_means, atol=1e-7
    )
    with pytest.raises(TypeError, match="complex"), pytest.warns(np.exceptions.ComplexWarning):
        extended_kalman_filter(model, X, jacobian_method="complex-step")


def run_steps(step_function, model, X, **options):
    """The one-step function row after row, each step starting from the last."""
    steps, mean, covariance = [], None, None
    for t, x in enumerate(X):
        steps.append(
            step_function(
                model,
                x,
                filtered_state_mean=mean,
                filtered_state_covariance=covariance,
                time_index=t,
                **options,
            )
        )
        mean, covariance = steps[-1].filtered_state_mean, steps[-1].filtered_state_covariance
    return steps


def test_ekf_estimator_equals_the_inference_function_and_its_steps():
    X = observations()
    ekf = ExtendedKalmanFilter(**PENDULUM)
    means, covariances = ekf.filter(X)
    model = NonlinearSSMParameters(**PENDULUM)
    for t, step in enumerate(run_steps(extended_kalman_filter_step, model, X)):
        np.testing.assert_allclose(step.filtered_state_mean, means[t], rtol=0, atol=1e-14)
    update = ekf.filter_update(means[-2], covariances[-2], X[-1])
    np.testing.assert_allclose(update[0], means[-1], rtol=0, atol=1e-14)


# -- vectorised calls ----------------------------------------------------------------


def counted(function):
    calls = []

    def wrapper(*args):
        calls.append(np.ndim(args[0]))
        return function(*args)

    return wrapper, calls


def test_auto_calls_a_vectorisable_function_once_per_step():
    X = observations(20)
    f, f_calls = counted(swing)
    g, g_calls = counted(look)
    one_at_a_time = unscented_filter(
        NonlinearSSMParameters(swing, look, Q, R, MU0, SIGMA0), X, additive=True, vectorized=False
    )
    result = unscented_filter(NonlinearSSMParameters(f, g, Q, R, MU0, SIGMA0), X, additive=True)
    np.testing.assert_allclose(result.filtered_means, one_at_a_time.filtered_means, atol=1e-13)
    # one 2-D call per step, and three 1-D calls that check the first one
    assert f_calls.count(2) == 19 and f_calls.count(1) == 3
    assert g_calls.count(2) == 20 and g_calls.count(1) == 3


def test_auto_calls_a_one_state_function_point_by_point_and_true_says_why_it_fails():
    def scalar_code(z):
        return np.array([z[0] + DT * z[1], z[1] - DT * np.sin(float(z[0]))])

    def rows_code(z):  # fine on one state; on a 2-D array its result has the wrong shape
        return np.array([np.sum(z), z[1]])

    X = observations(10)
    for f in (scalar_code, rows_code):
        f_counted, calls = counted(f)
        if f is rows_code:
            reference = NonlinearSSMParameters(f, look, Q, R, MU0, SIGMA0)
            expected = unscented_filter(reference, X, additive=True, vectorized=False)
        else:
            expected = unscented_filter(
                NonlinearSSMParameters(swing, look, Q, R, MU0, SIGMA0), X, additive=True
            )
        model = NonlinearSSMParameters(f_counted, look, Q, R, MU0, SIGMA0)
        result = unscented_filter(model, X, additive=True)
        np.testing.assert_allclose(result.filtered_means, expected.filtered_means, atol=1e-13)
        assert calls.count(2) == 1  # tried once
    for f in (scalar_code, rows_code):
        with pytest.raises(ValueError, match=r"vectorized=True.*must return \(2, 5\)"):
            unscented_filter(
                NonlinearSSMParameters(f, look, Q, R, MU0, SIGMA0),
                X,
                additive=True,
                vectorized=True,
            )


def test_a_function_that_reads_columns_wrongly_is_caught_by_the_check_of_auto():
    """Reversing the components reverses the points of a 2-D array: the shape is right, the
    values are not, and the three points computed one at a time show it."""
    flip = lambda z: z[::-1]  # noqa: E731
    X = observations(8)
    model = NonlinearSSMParameters(flip, look, Q, R, MU0, SIGMA0)
    auto = unscented_filter(model, X, additive=True)
    one = unscented_filter(model, X, additive=True, vectorized=False)
    np.testing.assert_allclose(auto.filtered_means, one.filtered_means, rtol=0, atol=1e-14)


# -- missing rows, time-varying functions, steps ---------------------------------------------


def test_nan_rows_equal_masked_rows_and_add_nothing_to_the_likelihood():
    X = observations()
    masked = np.ma.masked_invalid(X)
    model = NonlinearSSMParameters(swing_noisy, look_noisy, Q, R, MU0, SIGMA0)
    with_nan, with_mask = unscented_filter(model, X), unscented_filter(model, masked)
    np.testing.assert_array_equal(with_nan.filtered_means, with_mask.filtered_means)
    assert with_nan.log_predictive[5] == 0.0 and with_nan.log_predictive[17] == 0.0
    np.testing.assert_array_equal(with_nan.filtered_means[5], with_nan.predicted_means[5])
    ukf = UnscentedKalmanFilter(swing_noisy, look_noisy, Q, R, MU0, SIGMA0)
    np.testing.assert_array_equal(ukf.smooth(masked)[0], ukf.smooth(X)[0])


def test_a_partly_observed_row_is_conditioned_on_its_observed_entries():
    """The additive UKF's row of a linear model with one entry observed: the Kalman filter's."""
    X = linear_data()
    filtered = unscented_filter(linear_model(True), X, additive=True)
    expected = kalman_filter(LINEAR, X)
    np.testing.assert_allclose(filtered.filtered_means[9], expected.filtered_means[9], atol=1e-10)
    assert filtered.filtered_covariances[9, 0, 0] < filtered.predicted_covariances[9, 0, 0]


def test_time_varying_functions_are_used_at_their_steps():
    X = observations(6)
    gains = [0.5, 1.0, 1.5, 2.0, 2.5]
    transitions = [lambda z, a=a: a * np.tanh(z) for a in gains]
    observations_ = [lambda z, k=k: z + 0.1 * k for k in range(6)]
    model = NonlinearSSMParameters(transitions, observations_, Q, R, MU0, SIGMA0)
    result = unscented_filter(model, X, additive=True)
    mean = covariance = None
    for t, x in enumerate(X):
        step_model = model._replace(
            transition_functions=transitions[max(t - 1, 0)],
            observation_functions=observations_[t],
        )
        mean, covariance = unscented_filter_step(
            step_model,
            x,
            filtered_state_mean=mean,
            filtered_state_covariance=covariance,
            additive=True,
            time_index=t,
        )[:2]
        np.testing.assert_allclose(mean, result.filtered_means[t], rtol=0, atol=1e-14)
    with pytest.raises(
        ValueError, match="transition_functions has 5 functions but the data need 6"
    ):
        unscented_filter(model._replace(observation_functions=look), observations(7), additive=True)
    ukf = AdditiveUnscentedKalmanFilter(transitions, observations_, Q, R, MU0, SIGMA0)
    with pytest.raises(ValueError, match="pass transition_function= for this step"):
        ukf.filter_update(MU0, SIGMA0, X[0])


def test_filter_steps_equal_the_filter():
    X = observations(12)
    model = NonlinearSSMParameters(swing_noisy, look_noisy, Q, R, MU0, SIGMA0)
    result = unscented_filter(model, X)
    for t, step in enumerate(run_steps(unscented_filter_step, model, X)):
        np.testing.assert_allclose(
            step.filtered_state_mean, result.filtered_means[t], rtol=0, atol=1e-14
        )
        assert step.log_predictive == pytest.approx(result.log_predictive[t], abs=1e-12)


# -- the estimators and the errors -------------------------------------------------------


def test_estimators_clone_and_keep_their_parameters():
    for model in (
        UnscentedKalmanFilter(swing_noisy, look_noisy, Q, R, alpha=0.5, kappa=1.0),
        AdditiveUnscentedKalmanFilter(swing, look, Q, R, beta=2.0, vectorized=False),
        ExtendedKalmanFilter(swing, look, Q, R, jacobian_method="central"),
    ):
        copy = clone(model)
        assert copy.get_params()["transition_functions"] is model.transition_functions
        np.testing.assert_array_equal(
            copy.smooth(observations())[0], model.smooth(observations())[0]
        )


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: AdditiveUnscentedKalmanFilter(swing, look, Q, R, alpha=0.0), ValueError, "alpha"),
        (lambda: AdditiveUnscentedKalmanFilter(swing, look, Q, R, kappa=-2.0), ValueError, "kappa"),
        (
            lambda: AdditiveUnscentedKalmanFilter(swing, look, Q, R, alpha="x"),
            TypeError,
            "alpha must be a real number",
        ),
        (
            lambda: UnscentedKalmanFilter(swing_noisy, look_noisy, Q, R, vectorized=2),
            ValueError,
            'vectorized must be "auto", True or False, got 2',
        ),
        (
            lambda: AdditiveUnscentedKalmanFilter(swing, look, Q, R, vectorized="yes"),
            ValueError,
            "vectorized",
        ),
        (
            lambda: ExtendedKalmanFilter(swing, look, Q, R, jacobian_method="forward"),
            ValueError,
            "jacobian_method",
        ),
        (
            lambda: AdditiveUnscentedKalmanFilter(swing, look, Q, R, n_dim_state=3),
            ValueError,
            "dimensions disagree",
        ),
        (
            lambda: AdditiveUnscentedKalmanFilter("swing", look, Q, R),
            TypeError,
            "transition_functions must be a callable",
        ),
        (
            lambda: AdditiveUnscentedKalmanFilter(lambda z: z[:1], look, Q, R),
            ValueError,
            r"transition_functions returned shape \(1,\)",
        ),
        (
            lambda: AdditiveUnscentedKalmanFilter(swing, lambda z: z * np.nan, Q, R),
            ValueError,
            "observation_functions returned NaN",
        ),
        (
            lambda: AdditiveUnscentedKalmanFilter(swing, look, -Q, R),
            ValueError,
            "transition_covariance must be positive semi-definite",
        ),
        (
            lambda: AdditiveUnscentedKalmanFilter(swing, look, Q, np.eye(3)),
            ValueError,
            "X has 2 features but observation_covariance is 3 x 3",
        ),
        (
            lambda: ExtendedKalmanFilter(swing, look, Q, R, transition_jacobians=lambda z: z),
            ValueError,
            r"the Jacobian must have shape \(2, 2\)",
        ),
    ],
)
def test_errors_name_the_problem(make, error, match):
    X = observations(5)
    with pytest.raises(error, match=match):
        make().filter(X)


def test_inference_functions_refuse_other_parameter_types_and_leave_inputs_alone():
    X = observations(5)
    before = X.copy()
    with pytest.raises(TypeError, match="NonlinearSSMParameters"):
        unscented_filter(LINEAR, X)
    with pytest.raises(ValueError, match="go together"):
        unscented_filter_step(
            NonlinearSSMParameters(swing, look, Q, R), X[0], filtered_state_mean=MU0
        )

    def doubles_in_place(z):
        z *= 2
        return z

    model = NonlinearSSMParameters(doubles_in_place, look, Q, R)
    unscented_filter(model, X, additive=True)
    np.testing.assert_array_equal(X, before)


# -- the extended filter with noise inside the functions -------------------------------


def test_general_noise_ekf_of_a_linear_model_is_the_kalman_filter():
    """f(z, w) = F z + b + A w and g(z, v) = H z + d + C v: the Kalman filter with
    the noise covariances A Q A^T and C R C^T, whatever the Jacobians' source."""
    A = np.array([[1.0, 0.5], [0.0, 2.0]])
    C = np.array([[1.0, 0.0, 0.3], [0.2, 1.0, 0.0], [0.0, -0.4, 0.5]])
    X = linear_data()
    model = NonlinearSSMParameters(
        lambda z, w: F @ z + (B[:, None] if z.ndim == 2 else B) + A @ w,
        lambda z, v: H @ z + (D[:, None] if z.ndim == 2 else D) + C @ v,
        Q,
        R3,
        MU0,
        SIGMA0,
    )
    given = model._replace(
        transition_jacobians=lambda z, w: F,
        observation_jacobians=lambda z, v: H,
        transition_noise_jacobians=lambda z, w: A,
        observation_noise_jacobians=lambda z, v: C,
    )
    linear = LINEAR._replace(transition_covariance=A @ Q @ A.T, observation_covariance=C @ R3 @ C.T)
    kalman, rts = kalman_filter(linear, X), kalman_smoother(linear, X)
    for parameters, method, tolerance in [
        (given, "auto", 1e-10),
        (model, "auto", 1e-10),  # complex step
        (model, "central", 1e-6),
        (model._replace(transition_noise_jacobians=lambda z, w: A), "central", 1e-6),
    ]:
        for vectorized in ("auto", False):
            options = dict(additive=False, jacobian_method=method, vectorized=vectorized)
            filtered = extended_kalman_filter(parameters, X, **options)
            np.testing.assert_allclose(
                filtered.filtered_means, kalman.filtered_means, atol=tolerance
            )
            np.testing.assert_allclose(
                filtered.filtered_covariances, kalman.filtered_covariances, atol=tolerance
            )
            np.testing.assert_allclose(
                filtered.log_predictive, kalman.log_predictive, atol=tolerance
            )
            smoothed = extended_kalman_smoother(parameters, X, **options)
            np.testing.assert_allclose(smoothed.smoothed_means, rts.smoothed_means, atol=tolerance)
            np.testing.assert_allclose(
                smoothed.smoothed_covariances, rts.smoothed_covariances, atol=tolerance
            )


def test_general_noise_ekf_of_additive_noise_is_the_additive_ekf():
    X = observations()
    additive = NonlinearSSMParameters(**PENDULUM)
    expected = extended_kalman_smoother(additive, X)
    general = additive._replace(
        transition_functions=lambda z, w: swing(z) + w,
        observation_functions=lambda z, v: look(z) + v,
        transition_jacobians=lambda z, w: swing_jacobian(z),
        observation_jacobians=lambda z, v: look_jacobian(z),
    )
    by_differences = general._replace(transition_jacobians=None, observation_jacobians=None)
    for parameters, tolerance in ((general, 1e-12), (by_differences, 1e-12)):
        result = extended_kalman_smoother(parameters, X, additive=False)
        np.testing.assert_allclose(result.smoothed_means, expected.smoothed_means, atol=tolerance)
        np.testing.assert_allclose(
            result.smoothed_covariances, expected.smoothed_covariances, atol=tolerance
        )
        assert result.log_likelihood == pytest.approx(expected.log_likelihood, abs=1e-10)


def test_general_noise_ekf_jacobians_by_differences_equal_the_analytic_ones():
    """Noise that depends on the state (swing_noisy, look_noisy): the user's Jacobians in
    the state and the noise against complex-step and central differences; the estimator
    and its one-step update against the inference functions."""

    def swing_noise_jacobian(z, w):
        return np.array([[np.cos(z[0]), 0.0], [0.0, 1.0]])

    def look_noise_jacobian(z, v):
        return np.array([[1.0, 0.0], [0.0, 1 + z[1] ** 2]])

    def swing_state_jacobian(z, w):
        return np.array([[1.0 - w[0] * np.sin(z[0]), DT], [-DT * np.cos(z[0]), 1.0]])

    def look_state_jacobian(z, v):
        return np.array([[np.cos(z[0]), 0.0], [z[1], z[0] + 2 * v[1] * z[1]]])

    X = observations()
    jacobians = dict(
        transition_jacobians=swing_state_jacobian,
        observation_jacobians=look_state_jacobian,
        transition_noise_jacobians=swing_noise_jacobian,
        observation_noise_jacobians=look_noise_jacobian,
    )
    analytic = NonlinearSSMParameters(swing_noisy, look_noisy, Q, R, MU0, SIGMA0, **jacobians)
    expected = extended_kalman_smoother(analytic, X, additive=False)
    differences = NonlinearSSMParameters(swing_noisy, look_noisy, Q, R, MU0, SIGMA0)
    for method, tolerance in [("complex-step", 1e-12), ("central", 1e-7)]:
        result = extended_kalman_smoother(differences, X, additive=False, jacobian_method=method)
        np.testing.assert_allclose(result.smoothed_means, expected.smoothed_means, atol=tolerance)
        np.testing.assert_allclose(
            result.smoothed_covariances, expected.smoothed_covariances, atol=tolerance
        )
    # the noise changes the moments: the additive filter of f(z, 0) differs
    additive = extended_kalman_smoother(
        NonlinearSSMParameters(
            lambda z: swing_noisy(z, np.zeros(2)),
            lambda z: look_noisy(z, np.zeros(2)),
            Q,
            R,
            MU0,
            SIGMA0,
        ),
        X,
    )
    assert not np.allclose(additive.smoothed_covariances, expected.smoothed_covariances)
    ekf = ExtendedKalmanFilter(
        swing_noisy, look_noisy, Q, R, MU0, SIGMA0, additive=False, **jacobians
    )
    means, covariances = ekf.smooth(X)
    np.testing.assert_allclose(means, expected.smoothed_means, atol=1e-12)
    assert ekf.score(X) == pytest.approx(expected.log_likelihood, abs=1e-10)
    filtered = extended_kalman_filter(analytic, X, additive=False)
    mean, covariance = ekf.filter_update(
        filtered.filtered_means[2], filtered.filtered_covariances[2], X[3]
    )
    np.testing.assert_allclose(mean, filtered.filtered_means[3], atol=1e-12)
    np.testing.assert_allclose(covariance, filtered.filtered_covariances[3], atol=1e-12)
    states, sampled = ekf.sample(5, random_state=0)
    reference = UnscentedKalmanFilter(swing_noisy, look_noisy, Q, R, MU0, SIGMA0)
    np.testing.assert_allclose(sampled, reference.sample(5, random_state=0)[1])
    default = ExtendedKalmanFilter(
        transition_covariance=Q, observation_covariance=R, additive=False
    )
    np.testing.assert_allclose(
        default.smooth(X)[0],
        ExtendedKalmanFilter(transition_covariance=Q, observation_covariance=R).smooth(X)[0],
        atol=1e-12,
    )


def test_general_noise_ekf_errors_name_the_problem():
    X = observations(5)
    with pytest.raises(ValueError, match=r"transition_noise_jacobians returned shape \(2,\)"):
        ExtendedKalmanFilter(
            swing_noisy,
            look_noisy,
            Q,
            R,
            additive=False,
            transition_noise_jacobians=lambda z, w: w,
        ).filter(X)
    with pytest.raises(TypeError, match="additive must be"):
        extended_kalman_filter(NonlinearSSMParameters(**PENDULUM), X, additive="no")
    with pytest.raises((TypeError, ValueError), match="additive"):
        ExtendedKalmanFilter(swing, look, Q, R, additive="no").filter(X)
