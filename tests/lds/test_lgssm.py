"""LinearGaussianSSM: scikit-learn API, EM, recovery, streams, validation."""

import copy
import pickle
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import scipy.optimize
import sklearn
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import solve_discrete_lyapunov
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skseq.datasets import load_nile
from skseq.inference.kalman import LGSSMParameters, _forward_smoothing_rows, kalman_filter
from skseq.lds import LinearGaussianSSM

# -- helpers ------------------------------------------------------------------------

TRUE_PARAMS = dict(
    transition_matrix=np.array([[0.9, 0.2], [-0.15, 0.7]]),
    observation_matrix=np.array([[1.0, 0.0], [0.6, 0.8], [-0.4, 1.2]]),
    transition_covariance=np.array([[0.3, 0.05], [0.05, 0.2]]),
    observation_covariance=np.array([[0.2, 0.05, 0.0], [0.05, 0.3, 0.0], [0.0, 0.0, 0.25]]),
    transition_offset=np.array([0.1, -0.2]),
    observation_offset=np.array([1.0, -2.0, 0.5]),
    initial_state_mean=np.array([0.0, 0.0]),
    initial_state_covariance=np.eye(2),
)


def model_with(params, n_controls=0):
    """An estimator whose fitted parameters are exactly ``params`` (EM runs no iteration)."""
    k = params["transition_matrix"].shape[0]
    p = params["observation_matrix"].shape[0]
    inits = {f"{name}_init": value for name, value in params.items()}
    controls = np.zeros((4, n_controls)) if n_controls else None
    return LinearGaussianSSM(k, n_iter=0, **inits).fit(np.zeros((4, p)), controls=controls)


def sample_sequences(model, lengths, seed, controls=None):
    blocks, start = [], 0
    for i, length in enumerate(lengths):
        block_controls = None if controls is None else controls[start : start + length]
        blocks.append(model.sample(length, random_state=seed + i, controls=block_controls)[0])
        start += length
    return np.vstack(blocks)


def autocovariances(params, max_lag):
    """Stationary autocovariances Cov(x_{t+h}, x_t) of the observations, h = 0..max_lag."""
    F, H = params["transition_matrix"], params["observation_matrix"]
    state = solve_discrete_lyapunov(F, params["transition_covariance"])
    out = [H @ state @ H.T + params["observation_covariance"]]
    power = np.eye(F.shape[0])
    for _ in range(max_lag):
        power = F @ power
        out.append(H @ power @ state @ H.T)
    return np.array(out)


def fitted_params(model):
    return {name: getattr(model, f"{name}_") for name in TRUE_PARAMS}


@pytest.fixture
def routing():
    with sklearn.config_context(enable_metadata_routing=True):
        yield


# -- EM ------------------------------------------------------------------------------


def test_recovers_a_known_model():
    """Basis-invariant comparison: held-out likelihood, stationary mean and autocovariances."""
    truth = model_with(TRUE_PARAMS)
    lengths = [400] * 5
    X = sample_sequences(truth, lengths, seed=0)
    X_test = sample_sequences(truth, [400] * 3, seed=100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = LinearGaussianSSM(2, n_iter=150, tol=1e-3, random_state=0).fit(X, lengths=lengths)
    n_test = X_test.shape[0]
    gap = truth.score(X_test, lengths=[400] * 3) - model.score(X_test, lengths=[400] * 3)
    # nats per row; the initialisation, or a one-state model, is 0.3 below the truth
    assert gap / n_test < 0.02
    fitted = fitted_params(model)
    true_autocovariances = autocovariances(TRUE_PARAMS, 3)
    error = np.linalg.norm(autocovariances(fitted, 3) - true_autocovariances, axis=(1, 2))
    # relative to |Cov(x)|; the initialisation or a one-state model is off by >= 0.24
    assert np.all(error / np.linalg.norm(true_autocovariances[0]) < 0.12)
    F, b = fitted["transition_matrix"], fitted["transition_offset"]
    fitted_mean = fitted["observation_matrix"] @ np.linalg.solve(np.eye(2) - F, b)
    true_F, true_b = TRUE_PARAMS["transition_matrix"], TRUE_PARAMS["transition_offset"]
    true_mean = TRUE_PARAMS["observation_matrix"] @ np.linalg.solve(np.eye(2) - true_F, true_b)
    np.testing.assert_allclose(
        fitted_mean + fitted["observation_offset"],
        true_mean + TRUE_PARAMS["observation_offset"],
        atol=0.15,
    )


def test_recovers_control_and_transition_matrices_with_the_basis_pinned():
    """With H fixed at the truth the state basis is identified, so F and G are too."""
    rng = np.random.default_rng(3)
    params = dict(TRUE_PARAMS, control_matrix=np.array([[1.0, -0.5], [0.0, 0.8]]))
    truth = model_with(params, n_controls=2)
    lengths = [500] * 4
    controls = rng.normal(size=(sum(lengths), 2))
    X = sample_sequences(truth, lengths, seed=1, controls=controls)
    learned = [
        "transition_matrix",
        "control_matrix",
        "transition_offset",
        "transition_covariance",
        "observation_covariance",
        "observation_offset",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = LinearGaussianSSM(
            2,
            n_iter=100,
            tol=1e-4,
            params=learned,
            observation_matrix_init=params["observation_matrix"],
        ).fit(X, lengths=lengths, controls=controls)
    np.testing.assert_array_equal(model.observation_matrix_, params["observation_matrix"])
    np.testing.assert_allclose(model.control_matrix_, params["control_matrix"], atol=0.08)
    np.testing.assert_allclose(model.transition_matrix_, params["transition_matrix"], atol=0.08)
    np.testing.assert_allclose(
        model.transition_covariance_, params["transition_covariance"], atol=0.08
    )


@pytest.mark.parametrize(
    "params",
    [
        "all",
        ["observation_matrix", "transition_offset", "observation_covariance"],
        ["transition_matrix", "control_matrix", "initial_state_mean", "initial_state_covariance"],
    ],
)
def test_em_never_decreases_the_log_likelihood(params):
    rng = np.random.default_rng(1)
    controls = rng.normal(size=(300, 1))
    truth = model_with(dict(TRUE_PARAMS, control_matrix=np.array([[0.5], [-1.0]])), n_controls=1)
    lengths = [100, 50, 150]
    X = sample_sequences(truth, lengths, seed=4, controls=controls)
    X[rng.random(X.shape) < 0.2] = np.nan
    X[10] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = LinearGaussianSSM(2, n_iter=40, tol=0.0, params=params, random_state=0).fit(
            X, lengths=lengths, controls=controls
        )
    history = np.array(model.monitor_.history)
    assert len(history) == 40
    assert np.all(np.diff(history) >= -1e-9 * np.abs(history[:-1]))
    assert history[-1] > history[0] + 1.0


def expected_complete_log_likelihood(model, statistics):
    """E[log p(x, z)] up to a constant, from the summed statistics (what the M step maximises)."""

    def gaussian_term(target, cross, regressor, weights, covariance, count):
        residual = target - weights @ cross.T - cross @ weights.T + weights @ regressor @ weights.T
        _, log_det = np.linalg.slogdet(covariance)
        return -0.5 * (count * log_det + np.trace(np.linalg.solve(covariance, residual)))

    k = model.n_components
    transition = np.hstack(
        [model.transition_matrix_, model.control_matrix_, model.transition_offset_[:, None]]
    )
    observation = np.hstack([model.observation_matrix_, model.observation_offset_[:, None]])
    initial = np.hstack([np.zeros((k, k)), model.initial_state_mean_[:, None]])
    initial_regressor = np.zeros((k + 1, k + 1))
    initial_regressor[k, k] = statistics["n_sequences"]
    initial_cross = np.hstack([np.zeros((k, k)), statistics["initial_sum"][:, None]])
    return (
        gaussian_term(
            statistics["initial_outer"],
            initial_cross,
            initial_regressor,
            initial,
            model.initial_state_covariance_,
            statistics["n_sequences"],
        )
        + gaussian_term(
            statistics["transition_target"],
            statistics["transition_cross"],
            statistics["transition_regressor"],
            transition,
            model.transition_covariance_,
            statistics["transition_regressor"][-1, -1],
        )
        + gaussian_term(
            statistics["observation_target"],
            statistics["observation_cross"],
            statistics["observation_regressor"],
            observation,
            model.observation_covariance_,
            statistics["observation_regressor"][-1, -1],
        )
    )


def test_m_step_maximises_the_expected_complete_log_likelihood():
    rng = np.random.default_rng(2)
    controls = rng.normal(size=(200, 1))
    truth = model_with(dict(TRUE_PARAMS, control_matrix=np.array([[0.5], [-1.0]])), n_controls=1)
    X = sample_sequences(truth, [120, 80], seed=7, controls=controls)
    X[rng.random(X.shape) < 0.1] = np.nan
    model = LinearGaussianSSM(
        2, n_iter=0, params=list(TRUE_PARAMS) + ["control_matrix"], random_state=0
    ).fit(X, lengths=[120, 80], controls=controls)
    stacked = model._stack(X, controls)
    offsets = np.array([0, 120, 200])
    statistics, _ = model._estep(stacked, offsets)
    model._mstep(statistics)
    best = expected_complete_log_likelihood(model, statistics)
    optimum = model._get_parameters()
    for _ in range(20):
        perturbed = {}
        for name, value in optimum.items():
            step = 1e-3 * rng.normal(size=value.shape)
            if name.endswith("covariance"):
                step = step @ step.T  # keeps it positive definite
            perturbed[name] = value + step
        model._set_parameters(perturbed)
        assert expected_complete_log_likelihood(model, statistics) < best
    model._set_parameters(optimum)


def test_n_jobs_gives_the_same_fit():
    truth = model_with(TRUE_PARAMS)
    lengths = [60, 90, 40, 110, 70, 30]
    X = sample_sequences(truth, lengths, seed=5)
    X[5, 1] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        serial = LinearGaussianSSM(2, n_iter=15, random_state=0, n_jobs=1).fit(X, lengths=lengths)
        threaded = LinearGaussianSSM(2, n_iter=15, random_state=0, n_jobs=2).fit(X, lengths=lengths)
    np.testing.assert_allclose(serial.monitor_.history, threaded.monitor_.history, rtol=1e-10)
    for name, value in serial._get_parameters().items():
        np.testing.assert_allclose(value, getattr(threaded, f"{name}_"), rtol=1e-10, atol=1e-10)


def test_n_init_keeps_the_best_initialisation():
    X = sample_sequences(model_with(TRUE_PARAMS), [150, 150], seed=6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        single = LinearGaussianSSM(2, n_iter=5, random_state=3).fit(X, lengths=[150, 150])
        several = LinearGaussianSSM(2, n_iter=5, n_init=4, random_state=3).fit(
            X, lengths=[150, 150]
        )
        again = clone(several).fit(X, lengths=[150, 150])
    assert several.lower_bound_ >= single.lower_bound_
    np.testing.assert_array_equal(again.observation_matrix_, several.observation_matrix_)


def test_parameters_not_in_params_keep_their_initial_value():
    X = sample_sequences(model_with(TRUE_PARAMS), [200], seed=8)
    inits = {f"{name}_init": value for name, value in TRUE_PARAMS.items()}
    model = LinearGaussianSSM(
        2, n_iter=5, tol=0.0, params=["observation_matrix", "observation_offset"], **inits
    )
    with pytest.warns(ConvergenceWarning):
        model.fit(X)
    for name, value in TRUE_PARAMS.items():
        if name in ("observation_matrix", "observation_offset"):
            assert not np.allclose(getattr(model, f"{name}_"), value)
        else:
            np.testing.assert_array_equal(getattr(model, f"{name}_"), value)
    assert model._n_parameters() == 3 * 2 + 3


def test_initial_state_covariance_is_learned_only_when_named():
    X = sample_sequences(model_with(TRUE_PARAMS), [100, 100], seed=9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        initial = LinearGaussianSSM(2, n_iter=0, random_state=0).fit(X, lengths=[100, 100])
        default = LinearGaussianSSM(2, n_iter=5, random_state=0).fit(X, lengths=[100, 100])
        named = LinearGaussianSSM(2, n_iter=5, params=list(TRUE_PARAMS), random_state=0).fit(
            X, lengths=[100, 100]
        )
    np.testing.assert_array_equal(
        default.initial_state_covariance_, initial.initial_state_covariance_
    )
    assert not np.allclose(named.initial_state_covariance_, initial.initial_state_covariance_)


def test_verbose_prints_progress_and_convergence_warning(capsys):
    X = sample_sequences(model_with(TRUE_PARAMS), [100], seed=10)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        model = LinearGaussianSSM(2, n_iter=3, tol=0.0, verbose=1).fit(X)
    assert model.n_iter_ == 3 and not model.converged_
    assert capsys.readouterr().err.count("EM iteration") == 3
    converged = LinearGaussianSSM(2, n_iter=500, tol=1.0).fit(X)
    assert converged.converged_


# -- inference methods -------------------------------------------------------------------


def test_score_filter_smooth_and_transform_agree_with_the_inference_functions():
    rng = np.random.default_rng(11)
    params = dict(TRUE_PARAMS, control_matrix=np.array([[0.3], [0.1]]))
    model = model_with(params, n_controls=1)
    controls = rng.normal(size=(50, 1))
    X = sample_sequences(model, [20, 30], seed=2, controls=controls)
    X[3, 2] = np.nan
    reference = kalman_filter(LGSSMParameters(**params), X, controls=controls, lengths=[20, 30])
    ids = np.repeat(["a", "b"], [20, 30])
    assert model.score(X, sequence_ids=ids, controls=controls) == pytest.approx(
        reference.log_likelihood, rel=1e-12
    )
    np.testing.assert_allclose(
        model.score_sequences(X, lengths=[20, 30], controls=controls),
        reference.sequence_log_likelihood,
        rtol=1e-12,
    )
    weights = rng.random(50)
    assert model.score(X, lengths=[20, 30], controls=controls, sample_weight=weights) == (
        pytest.approx(weights @ reference.log_predictive, rel=1e-12)
    )
    means, covariances = model.filter(X, lengths=[20, 30], controls=controls)
    np.testing.assert_array_equal(means, reference.filtered_means)
    np.testing.assert_array_equal(covariances, reference.filtered_covariances)
    smoothed_means, smoothed_covariances = model.smooth(X, lengths=[20, 30], controls=controls)
    np.testing.assert_allclose(
        model.transform(X, lengths=[20, 30], controls=controls), smoothed_means, rtol=1e-13
    )
    assert smoothed_covariances.shape == (50, 2, 2)
    np.testing.assert_allclose(smoothed_means[[19, 49]], means[[19, 49]], rtol=1e-13)
    assert np.isfinite(model.aic(X, lengths=[20, 30], controls=controls))
    assert model.bic(X, lengths=[20, 30], controls=controls) > model.aic(
        X, lengths=[20, 30], controls=controls
    )


def test_forecast_equals_filtering_appended_missing_rows():
    """A forecast is the one-step prediction through rows that are entirely missing."""
    rng = np.random.default_rng(12)
    params = dict(TRUE_PARAMS, control_matrix=np.array([[0.3], [0.1]]))
    model = model_with(params, n_controls=1)
    lengths = [15, 10]
    n_steps = 3
    controls = rng.normal(size=(25, 1))
    X = sample_sequences(model, lengths, seed=3, controls=controls)
    future = rng.normal(size=(2 * n_steps, 1))
    means, covariances = model.forecast(
        X, n_steps, lengths=lengths, controls=controls, future_controls=future
    )
    assert means.shape == (6, 3) and covariances.shape == (6, 3, 3)
    extended = np.vstack([X[:15], np.full((3, 3), np.nan), X[15:], np.full((3, 3), np.nan)])
    extended_controls = np.vstack([controls[:15], future[:3], controls[15:], future[3:]])
    reference = kalman_filter(
        LGSSMParameters(**params), extended, controls=extended_controls, lengths=[18, 13]
    )
    H, d, R = (
        params["observation_matrix"],
        params["observation_offset"],
        params["observation_covariance"],
    )
    rows = [15, 16, 17, 28, 29, 30]
    np.testing.assert_allclose(means, reference.predicted_means[rows] @ H.T + d, rtol=1e-12)
    np.testing.assert_allclose(
        covariances, H @ reference.predicted_covariances[rows] @ H.T + R, rtol=1e-12
    )


def controlled_stream():
    """A model with one control, and 30 rows of it with a missing entry and a missing row."""
    rng = np.random.default_rng(13)
    params = dict(TRUE_PARAMS, control_matrix=np.array([[0.3], [0.1]]))
    model = model_with(params, n_controls=1)
    controls = rng.normal(size=(30, 1))
    X = sample_sequences(model, [30], seed=4, controls=controls)
    X[4, 0] = np.nan
    X[7] = np.nan
    return params, model, X, controls


def test_filter_update_equals_the_batch_filter_row_by_row():
    _, model, X, controls = controlled_stream()
    batch_means, batch_covariances = model.filter(X, controls=controls)
    model.reset_filter()
    for t in range(30):
        mean, covariance = model.filter_update(X[t], control=controls[t] if t else None)
        np.testing.assert_array_equal(mean, batch_means[t])
        np.testing.assert_array_equal(covariance, batch_covariances[t])
    model.reset_filter(X[:12], controls=controls[:12])
    for t in range(12, 30):
        mean, covariance = model.filter_update(X[t], control=controls[t])
        np.testing.assert_array_equal(mean, batch_means[t])
    with pytest.raises(ValueError, match="control input"):
        model.filter_update(X[0])
    with pytest.raises(ValueError, match="expecting 3 features"):
        model.filter_update(X[0, :2], control=controls[0])


def test_filter_stream_with_controls_equals_the_batch_filter_in_any_chunks():
    """The online-filter API of every family (filter_stream) on a model with
    controls and missing rows: chunks of any size, after partial_fit too, give
    the batch filter's means and covariances bit for bit."""
    params, model, X, controls = controlled_stream()
    X[8] = np.nan
    batch_means, batch_covariances = model.filter(X, controls=controls)
    model.reset_filter()
    parts = [
        model.filter_stream(X[start:stop], controls=controls[start:stop])
        for start, stop in ((0, 1), (1, 7), (7, 9), (9, 30))
    ]
    np.testing.assert_array_equal(np.concatenate([part[0] for part in parts]), batch_means)
    np.testing.assert_array_equal(np.concatenate([part[1] for part in parts]), batch_covariances)
    np.testing.assert_array_equal(model.filtered_state_[0], batch_means[-1])
    # After partial_fit (no learning: params=""), the stream goes on from its last row.
    learner = model_with(params, n_controls=1)
    learner.set_params(params=[])
    learner.partial_fit(X[:20], controls=controls[:20])
    means, covariances = learner.filter_stream(X[20:], controls=controls[20:])
    np.testing.assert_array_equal(means, batch_means[20:])
    np.testing.assert_array_equal(covariances, batch_covariances[20:])
    with pytest.raises(ValueError, match="control input"):
        model.filter_stream(X[:3])
    with pytest.raises(TypeError, match="new_sequence must be a bool"):
        model.filter_stream(X[:3], controls=controls[:3], new_sequence="yes")


def test_sample_is_reproducible_and_shaped():
    model = model_with(TRUE_PARAMS)
    X, Z = model.sample(50, random_state=0)
    assert X.shape == (50, 3) and Z.shape == (50, 2)
    X_again, Z_again = model.sample(50, random_state=0)
    np.testing.assert_array_equal(X, X_again)
    np.testing.assert_array_equal(Z, Z_again)
    long_X, long_Z = model.sample(20000, random_state=1)
    noise = long_X - long_Z @ TRUE_PARAMS["observation_matrix"].T
    np.testing.assert_allclose(noise.mean(axis=0), TRUE_PARAMS["observation_offset"], atol=0.02)
    np.testing.assert_allclose(np.cov(noise.T), TRUE_PARAMS["observation_covariance"], atol=0.02)
    innovations = long_Z[1:] - long_Z[:-1] @ TRUE_PARAMS["transition_matrix"].T
    np.testing.assert_allclose(
        innovations.mean(axis=0), TRUE_PARAMS["transition_offset"], atol=0.02
    )
    np.testing.assert_allclose(
        np.cov(innovations.T), TRUE_PARAMS["transition_covariance"], atol=0.02
    )


# -- scikit-learn integration ------------------------------------------------------------


def test_pickle_round_trip():
    X = sample_sequences(model_with(TRUE_PARAMS), [80, 80], seed=14)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = LinearGaussianSSM(2, n_iter=5, random_state=0).fit(X, lengths=[80, 80])
    restored = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(
        restored.transform(X, lengths=[80, 80]), model.transform(X, lengths=[80, 80])
    )
    assert restored.score(X) == model.score(X)
    assert restored.monitor_.history == model.monitor_.history


def test_pipeline_fit_transform(routing):
    X = sample_sequences(model_with(TRUE_PARAMS), [60, 60], seed=15)
    ids = np.repeat([1, 2], 60)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        pipeline = make_pipeline(StandardScaler(), LinearGaussianSSM(2, n_iter=5, random_state=0))
        states = pipeline.fit(X, sequence_ids=ids).transform(X, sequence_ids=ids)
        direct = LinearGaussianSSM(2, n_iter=5, random_state=0).fit(
            StandardScaler().fit_transform(X), lengths=[60, 60]
        )
    np.testing.assert_allclose(
        states, direct.transform(StandardScaler().fit_transform(X), lengths=[60, 60]), rtol=1e-10
    )
    one_sequence = pipeline.transform(X, sequence_ids=np.zeros(120))
    assert not np.allclose(one_sequence, states)  # the split reached transform


def test_intermediate_pipeline_step_receives_sequence_ids(routing):
    """As a middle step the model is fitted through fit_transform, with routed sequence_ids."""
    X = sample_sequences(model_with(TRUE_PARAMS), [50, 70], seed=17)
    ids = np.repeat(["first", "second"], [50, 70])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        pipeline = make_pipeline(LinearGaussianSSM(2, n_iter=4, random_state=0), StandardScaler())
        pipeline.fit(X, sequence_ids=ids)
        direct = LinearGaussianSSM(2, n_iter=4, random_state=0).fit(X, lengths=[50, 70])
    np.testing.assert_allclose(
        pipeline[0].observation_matrix_, direct.observation_matrix_, rtol=1e-12
    )
    expected = StandardScaler().fit_transform(direct.transform(X, lengths=[50, 70]))
    np.testing.assert_allclose(pipeline.transform(X, sequence_ids=ids), expected, rtol=1e-10)


def test_grid_search_with_group_kfold_keeps_sequences_whole(routing):
    truth = model_with(TRUE_PARAMS)
    lengths = [50, 70, 60, 40]
    X = sample_sequences(truth, lengths, seed=16)
    ids = np.repeat(np.arange(4), lengths)
    estimator = LinearGaussianSSM(n_iter=3, tol=0.0, random_state=0)
    search = GridSearchCV(estimator, {"n_components": [1, 2]}, cv=GroupKFold(n_splits=2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        search.fit(X, sequence_ids=ids, groups=ids)
        for split, (train, test) in enumerate(GroupKFold(n_splits=2).split(X, groups=ids)):
            for index, n_components in enumerate([1, 2]):
                fold = clone(estimator).set_params(n_components=n_components)
                fold.fit(X[train], sequence_ids=ids[train])
                expected = fold.score(X[test], sequence_ids=ids[test])
                assert search.cv_results_[f"split{split}_test_score"][index] == pytest.approx(
                    expected, rel=1e-10
                )
    assert search.best_params_["n_components"] in (1, 2)


# -- validation ------------------------------------------------------------------------


NOT_PD = [[1.0, 2.0], [2.0, 1.0]]


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        (dict(n_components=0), ValueError, "n_components must be >= 1"),
        (dict(n_components=1.5), TypeError, "n_components must be an integer"),
        (dict(n_iter=-1), ValueError, "n_iter must be >= 0"),
        (dict(tol=np.nan), ValueError, "tol must be a number"),
        (dict(n_init=0), ValueError, "n_init must be >= 1"),
        (dict(params=["transition_matrix", "bogus"]), ValueError, r"unknown .*\['bogus'\]"),
        (dict(params="nothing"), ValueError, "unknown parameter"),
        (dict(params=3), TypeError, "params must be"),
        (dict(transition_matrix_init=np.eye(3)), ValueError, r"transition_matrix_init .* \(2, 2\)"),
        (
            dict(observation_matrix_init=np.ones((2, 2))),
            ValueError,
            r"observation_matrix_init must have shape \(3, 2\)",
        ),
        (dict(transition_covariance_init=NOT_PD), ValueError, "transition_covariance_init .* pos"),
        (
            dict(observation_covariance_init=np.ones((3, 3)) + np.diag([0, 0, 1e-3])),
            ValueError,
            "observation_covariance_init must be positive definite",
        ),
        (
            dict(initial_state_covariance_init=[[1.0, 0.2], [0.0, 1.0]]),
            ValueError,
            "initial_state_covariance_init must be symmetric",
        ),
        (dict(initial_state_mean_init=[np.inf, 0.0]), ValueError, "initial_state_mean_init .* inf"),
        (dict(control_matrix_init=np.ones((2, 1))), ValueError, "fit received no controls"),
    ],
)
def test_bad_hyperparameters_raise(kwargs, error, message):
    X = np.random.default_rng(0).normal(size=(20, 3))
    X_copy = X.copy()
    with pytest.raises(error, match=message):
        LinearGaussianSSM(**({"n_components": 2} | kwargs)).fit(X)
    np.testing.assert_array_equal(X, X_copy)


def test_bad_data_raise_clear_errors():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 3))
    bad = X.copy()
    bad[3, 1] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        LinearGaussianSSM().fit(bad)
    all_nan = X.copy()
    all_nan[10:] = np.nan
    with pytest.raises(ValueError, match=r"Sequence\(s\) \[1\] are entirely NaN"):
        LinearGaussianSSM().fit(all_nan, lengths=[10, 10])
    with pytest.raises(ValueError, match="controls has 19 rows"):
        LinearGaussianSSM().fit(X, controls=np.ones((19, 1)))
    with pytest.raises(TypeError, match="lengths="):
        LinearGaussianSSM().fit(X, [10, 10])
    with pytest.raises(ValueError, match="either lengths or sequence_ids"):
        LinearGaussianSSM().fit(X, lengths=[20], sequence_ids=np.zeros(20))
    with pytest.raises(NotFittedError):
        LinearGaussianSSM().transform(X)
    with pytest.raises(NotFittedError):
        LinearGaussianSSM().forecast(X, 2)
    with pytest.raises(NotFittedError):
        LinearGaussianSSM().filter_update(X[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = LinearGaussianSSM(n_iter=2).fit(X)
        controlled = LinearGaussianSSM(n_iter=2).fit(X, controls=rng.normal(size=(20, 2)))
    with pytest.raises(ValueError, match="X has 2 features"):
        model.transform(X[:, :2])
    with pytest.raises(ValueError, match="n_steps must be >= 1"):
        model.forecast(X, 0)
    with pytest.raises(ValueError, match="pass controls"):
        controlled.transform(X)
    with pytest.raises(ValueError, match="future_controls"):
        controlled.forecast(X, 2, controls=rng.normal(size=(20, 2)))
    with pytest.raises(ValueError, match="controls has 3 columns"):
        controlled.score(X, controls=np.ones((20, 3)))
    X_copy = X.copy()
    partly = X.copy()
    partly[2, 0] = np.nan
    partly_copy = partly.copy()
    with pytest.warns(ConvergenceWarning):
        model.fit(partly)
    model.transform(partly)
    np.testing.assert_array_equal(partly, partly_copy)
    np.testing.assert_array_equal(X, X_copy)


# -- the data's scale, the initial state and the local level model ---------------------


def local_level(**kwargs):
    """The local level model as a pykalman user first writes it."""
    return LinearGaussianSSM(
        n_components=1,
        transition_matrix_init=[[1.0]],
        observation_matrix_init=[[1.0]],
        params=["transition_covariance", "observation_covariance"],
        **kwargs,
    )


@pytest.mark.parametrize("factor", [1e-8, 1e8])
def test_fit_is_equivariant_under_scaling_the_data(factor):
    """X * c gives the model of X with the data's units scaled: H, d times c, R times c**2,
    the (standardised) states unchanged, log-likelihoods shifted by -n log(c) for the n
    observed entries.  An absolute covariance floor breaks this for small c."""
    rng = np.random.default_rng(20)
    X = np.cumsum(rng.normal(size=(300, 3)), axis=0) @ rng.normal(size=(3, 3))
    X = X + rng.normal(size=X.shape)
    X[5, 1] = np.nan
    n_observed = np.sum(~np.isnan(X))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fits = [
            LinearGaussianSSM(2, n_iter=30, tol=0.0, random_state=0).fit(data, lengths=[100, 200])
            for data in (X, X * factor)
        ]
    base, scaled = fits
    np.testing.assert_allclose(
        scaled.monitor_.history,
        np.array(base.monitor_.history) - n_observed * np.log(factor),
        rtol=1e-9,
    )
    powers = dict.fromkeys(TRUE_PARAMS, 0) | dict(
        observation_matrix=1, observation_offset=1, observation_covariance=2
    )
    for name, power in powers.items():
        expected = getattr(base, f"{name}_") * factor**power
        actual = getattr(scaled, f"{name}_")
        np.testing.assert_allclose(actual, expected, rtol=1e-7, atol=1e-9 * np.abs(expected).max())
    # A state observed through a fixed H = 1 takes the data's units instead.
    nile = load_nile().data
    base, scaled = local_level().fit(nile), local_level().fit(nile * factor)
    for name, power in [
        ("transition_covariance", 2),
        ("observation_covariance", 2),
        ("initial_state_covariance", 2),
        ("observation_offset", 1),
    ]:
        np.testing.assert_allclose(
            getattr(scaled, f"{name}_"), getattr(base, f"{name}_") * factor**power, rtol=1e-7
        )
    assert scaled.score(nile * factor) == pytest.approx(
        base.score(nile) - nile.size * np.log(factor), rel=1e-10
    )


@settings(max_examples=12, deadline=None, derandomize=True)
@given(
    exponent=st.floats(min_value=-12.0, max_value=12.0),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_fit_is_equivariant_under_any_scale(exponent, seed):
    """Property: for any scale c, fitting X * c is fitting X in other units."""
    factor = 10.0**exponent
    rng = np.random.default_rng(seed)
    X = np.cumsum(rng.normal(size=(60, 2)), axis=0) + rng.normal(size=(60, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        base, scaled = (
            LinearGaussianSSM(1, n_iter=6, tol=0.0, random_state=0).fit(data)
            for data in (X, X * factor)
        )
    np.testing.assert_allclose(
        scaled.observation_covariance_, base.observation_covariance_ * factor**2, rtol=1e-6
    )
    np.testing.assert_allclose(
        scaled.observation_offset_, base.observation_offset_ * factor, rtol=1e-6
    )
    np.testing.assert_allclose(scaled.transition_matrix_, base.transition_matrix_, rtol=1e-6)
    assert scaled.lower_bound_ == pytest.approx(
        base.lower_bound_ - X.size * np.log(factor), rel=1e-9, abs=1e-6
    )


def test_covariance_floor_is_relative_to_each_features_scale():
    """Features in very different units: the small one's noise variance (1e-24 of the large
    one's) is not lifted towards the large one's, as a floor relative to the largest
    eigenvalue of R lifted it (to about 1e3)."""
    rng = np.random.default_rng(21)
    level = np.cumsum(rng.normal(size=400))
    X = np.column_stack([level * 1e6, level]) + rng.normal(size=(400, 2)) * [1e6, 1e-3]
    model = LinearGaussianSSM(
        1,
        n_iter=20,
        tol=0.0,
        params=["observation_covariance"],
        transition_matrix_init=[[1.0]],
        observation_matrix_init=[[1e6], [1.0]],
        transition_covariance_init=[[1.0]],
        observation_covariance_init=np.diag([1e12, 1e-6]),
        observation_offset_init=[0.0, 0.0],
        initial_state_mean_init=[0.0],
        initial_state_covariance_init=[[1.0]],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X)
    np.testing.assert_allclose(np.diag(model.observation_covariance_), [1e12, 1e-6], rtol=0.05)


def test_default_initial_state_is_stationary_under_the_initial_dynamics():
    X = sample_sequences(model_with(TRUE_PARAMS), [150, 150], seed=18)
    F, Q, b = (
        TRUE_PARAMS[name]
        for name in ("transition_matrix", "transition_covariance", "transition_offset")
    )
    given = LinearGaussianSSM(
        2,
        n_iter=0,
        transition_matrix_init=F,
        transition_covariance_init=Q,
        transition_offset_init=b,
    ).fit(X, lengths=[150, 150])
    np.testing.assert_allclose(given.initial_state_mean_, np.linalg.solve(np.eye(2) - F, b))
    np.testing.assert_allclose(given.initial_state_covariance_, solve_discrete_lyapunov(F, Q))
    # the same rule for the factor-analysis initialisation of F and Q
    default = LinearGaussianSSM(2, n_iter=0, random_state=0).fit(X, lengths=[150, 150])
    np.testing.assert_array_equal(default.initial_state_mean_, np.zeros(2))
    np.testing.assert_allclose(
        default.initial_state_covariance_,
        solve_discrete_lyapunov(default.transition_matrix_, default.transition_covariance_),
    )


def test_default_initial_state_is_diffuse_for_a_random_walk():
    """No stationary distribution (F = 1): the prior is diffuse.  Given the first
    observation, the rows' log densities are then those of statsmodels' exact diffuse
    initialisation."""
    sm = pytest.importorskip("statsmodels.api")
    X = load_nile().data
    model = local_level(n_iter=0).fit(X)
    assert model.initial_state_covariance_.item() > 1e5 * X.var()
    R, Q = model.observation_covariance_.item(), model.transition_covariance_.item()
    reference = sm.tsa.UnobservedComponents(X[:, 0], "local level", use_exact_diffuse=True)
    exact = reference.smooth([R, Q]).llf_obs
    after_the_first = np.r_[0.0, np.ones(len(X) - 1)]
    assert model.score(X, sample_weight=after_the_first) == pytest.approx(exact[1:].sum(), abs=1e-4)


def test_local_level_as_first_written_fits_the_nile_to_the_maximum_likelihood():
    """F = H = 1 given, Q and R learned, nothing else said: the maximum-likelihood fit, as
    a direct maximisation of the same likelihood finds it (no warning; before, the fixed
    prior z_1 ~ N(0, 1) around the data's mean gave Q = 1, R = 27 968).  SQUAREM stops by
    the monitor's per-iteration rule, so the HMMs' tol=1e-2 would stop it at Q = 1662, 13 %
    above the maximum (plain EM: Q = 2278); the default tol=1e-4 reaches it."""
    X = load_nile().data
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = local_level().fit(X)
    assert model.converged_

    def negative_log_likelihood(log_variances):
        Q, R = np.exp(log_variances)
        return -kalman_filter(
            LGSSMParameters(
                [[1.0]],
                [[1.0]],
                [[Q]],
                [[R]],
                observation_offset=model.observation_offset_,
                initial_state_mean=model.initial_state_mean_,
                initial_state_covariance=model.initial_state_covariance_,
            ),
            X,
        ).log_likelihood

    optimum = scipy.optimize.minimize(
        negative_log_likelihood,
        np.log([1000.0, 10000.0]),
        method="Nelder-Mead",
        options=dict(xatol=1e-8, fatol=1e-10, maxiter=2000),
    )
    Q, R = np.exp(optimum.x)
    assert model.transition_covariance_.item() == pytest.approx(Q, rel=0.02)
    assert model.observation_covariance_.item() == pytest.approx(R, rel=0.01)
    assert -optimum.fun - model.score(X) < 1e-3


def test_local_level_agrees_with_statsmodels_on_the_nile():
    """statsmodels' maximum-likelihood fit of the local level model, exact diffuse."""
    sm = pytest.importorskip("statsmodels.api")
    X = load_nile().data
    model = local_level().fit(X)
    reference = sm.tsa.UnobservedComponents(X[:, 0], "local level", use_exact_diffuse=True)
    R, Q = reference.fit(disp=False).params
    assert model.transition_covariance_.item() == pytest.approx(Q, rel=0.03)
    assert model.observation_covariance_.item() == pytest.approx(R, rel=0.03)


# -- pykalman's robot data: EM iteration by iteration -------------------------------------


def robot_problem():
    """pykalman's robot data (row 0 masked) and its EM test's setup as a LinearGaussianSSM:
    pykalman's initial Q and R, the two covariances learned, the time-varying transition
    offsets as controls with G = I fixed (pykalman's offset t drives row t + 1)."""
    datasets = pytest.importorskip("pykalman.datasets")
    data = datasets.load_robot()
    X = np.ma.filled(np.ma.asarray(data.observations, dtype=float), np.nan)
    k = data.transition_matrix.shape[0]
    offsets = np.asarray(data.transition_offsets, dtype=float)
    controls = np.vstack([np.zeros((1, k)), offsets[: len(X) - 1]])
    model = LinearGaussianSSM(
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
        acceleration=None,
        tol=-np.inf,
    )
    return data, X, controls, model


def pykalman_robot_filter(data):
    pykalman = pytest.importorskip("pykalman")
    return pykalman.KalmanFilter(
        data.transition_matrix,
        data.observation_matrix,
        data.initial_transition_covariance,
        data.initial_observation_covariance,
        data.transition_offsets,
        data.observation_offset,
        data.initial_state_mean,
        data.initial_state_covariance,
        em_vars=["transition_covariance", "observation_covariance"],
    )


def test_wholly_missing_rows_drop_out_of_the_observation_m_step_as_in_pykalman():
    """Row 0 of the robot data is masked: after one EM step on Q and R, R is pykalman's
    (the average over the observed rows); it differed by 2.4e-3 when the missing row
    entered the statistics as H P H^T + R_old."""
    data, X, controls, model = robot_problem()
    assert np.isnan(X[0]).all() and not np.isnan(X[1:]).any()
    model.set_params(n_iter=1).fit(X, controls=controls)
    kf = pykalman_robot_filter(data).em(data.observations, n_iter=1)
    np.testing.assert_allclose(
        model.observation_covariance_, kf.observation_covariance, rtol=1e-9, atol=0
    )
    np.testing.assert_allclose(
        model.transition_covariance_, kf.transition_covariance, rtol=1e-9, atol=1e-15
    )


def test_plain_em_follows_pykalman_and_the_matlab_reference_iteration_by_iteration():
    """With acceleration=None, monitor_.history is the EM sequence: pykalman's EM (whose
    test checks it against the MATLAB reference's log-likelihoods, shipped with the data)."""
    data, X, controls, model = robot_problem()
    n_iter = 8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.set_params(n_iter=n_iter).fit(X, controls=controls)
    kf = pykalman_robot_filter(data)
    reference = []
    for _ in range(n_iter):
        reference.append(kf.loglikelihood(data.observations))
        kf.em(data.observations, n_iter=1)
    assert len(model.monitor_.history) == n_iter
    np.testing.assert_allclose(model.monitor_.history, reference, rtol=1e-5)
    matlab = np.asarray(data.loglikelihoods)[:n_iter]
    np.testing.assert_allclose(model.monitor_.history[: len(matlab)], matlab, rtol=1e-5)
    # After the last iteration's M step: pykalman's parameters after n_iter steps.
    np.testing.assert_allclose(model.observation_covariance_, kf.observation_covariance, rtol=1e-6)


def test_stream_statistics_leave_wholly_missing_rows_out_too():
    """partial_fit's forward-only smoothing in chunks (the masked row 0 in the first chunk,
    another all-missing row inside a later one) gives the batch E step's statistics."""
    _, X, controls, model = robot_problem()
    X = X.copy()
    X[250] = np.nan
    model.set_params(n_iter=0).fit(X, controls=controls)
    stacked = model._stack(X, controls)
    batch, _ = model._estep(stacked, np.array([0, len(X)]))
    carried, total = None, None
    for start in range(0, len(X), 100):
        rows = slice(start, start + 100)
        statistics, _, carried = _forward_smoothing_rows(
            model._model(), X[rows], controls[rows], carried
        )
        if total is not None:
            statistics = {key: total[key] + statistics[key] for key in total}
        total = statistics
    assert batch["observation_regressor"][-1, -1] == len(X) - 2
    for key in batch:
        np.testing.assert_allclose(total[key], batch[key], rtol=1e-9, atol=1e-9, err_msg=key)


def test_accelerated_em_starts_with_plain_em_steps():
    """Up to two iterations the fit is plain EM; every later iterate is at least as good."""
    X = sample_sequences(model_with(TRUE_PARAMS), [120, 80], seed=22)
    plain = LinearGaussianSSM(2, n_iter=0, random_state=0).fit(X, lengths=[120, 80])
    stacked, offsets = plain._stack(X, np.zeros((200, 0))), np.array([0, 120, 200])
    for _ in range(2):
        statistics, _ = plain._estep(stacked, offsets)
        plain._mstep(statistics)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fitted = LinearGaussianSSM(2, n_iter=2, tol=0.0, random_state=0).fit(X, lengths=[120, 80])
    for name in TRUE_PARAMS:
        np.testing.assert_allclose(
            getattr(fitted, f"{name}_"), getattr(plain, f"{name}_"), rtol=1e-12, atol=1e-14
        )


# -- validation of the fitted parameters -------------------------------------------------

CONTROLLED_PARAMS = dict(TRUE_PARAMS, control_matrix=np.array([[0.3], [0.1]]))
COVARIANCES = ("transition_covariance", "observation_covariance", "initial_state_covariance")


def _wrong_shape(value):
    return np.zeros((value.shape[0] + 1,) + value.shape[1:])


def _with_nan(value):
    value = np.array(value, dtype=float)
    value.flat[0] = np.nan
    return value


def _asymmetric(value):
    value = np.array(value, dtype=float)
    value[0, 1] += 0.5
    return value


def _indefinite(value):
    return np.diag(np.r_[-1.0, np.ones(value.shape[0] - 1)])


CORRUPTIONS = [
    *[(name, _wrong_shape, f"{name}_ must have shape") for name in CONTROLLED_PARAMS],
    *[(name, _with_nan, f"{name}_ contains NaN") for name in CONTROLLED_PARAMS],
    *[(name, _asymmetric, f"{name}_ must be symmetric") for name in COVARIANCES],
    *[(name, _indefinite, f"{name}_ must be positive definite") for name in COVARIANCES],
    ("n_components", 1, r"transition_matrix_ must have shape \(1, 1\)"),
    ("n_components", 3, r"transition_matrix_ must have shape \(3, 3\)"),
]

METHOD_CALLS = {
    "score": lambda model, X, u: model.score(X, controls=u),
    "score_sequences": lambda model, X, u: model.score_sequences(X, controls=u),
    "transform": lambda model, X, u: model.transform(X, controls=u),
    "filter": lambda model, X, u: model.filter(X, controls=u),
    "smooth": lambda model, X, u: model.smooth(X, controls=u),
    "forecast": lambda model, X, u: model.forecast(X, 3, controls=u, future_controls=u[:3]),
    "sample": lambda model, X, u: model.sample(len(X), controls=u),
    "filter_update": lambda model, X, u: [
        model.filter_update(X[0]),
        model.filter_update(X[1], u[1]),
    ],
    "reset_filter": lambda model, X, u: model.reset_filter(X, controls=u),
    "partial_fit": lambda model, X, u: model.partial_fit(X, controls=u),
    "aic": lambda model, X, u: model.aic(X, controls=u),
    "bic": lambda model, X, u: model.bic(X, controls=u),
}


@pytest.fixture(scope="module")
def controlled_model_and_data():
    model = model_with(CONTROLLED_PARAMS, n_controls=1)
    controls = np.random.default_rng(30).normal(size=(12, 1))
    X = sample_sequences(model, [12], seed=30, controls=controls)
    return model, X, controls


@pytest.mark.parametrize("method", list(METHOD_CALLS))
@pytest.mark.parametrize(
    "name, corrupt, message",
    CORRUPTIONS,
    ids=[f"{name}-{getattr(corrupt, '__name__', corrupt)}" for name, corrupt, _ in CORRUPTIONS],
)
def test_every_method_validates_the_fitted_parameters(
    controlled_model_and_data, method, name, corrupt, message
):
    """Hand-set or stale fitted arrays are a ValueError naming them, before any kernel runs
    (a wrong shape used to make the kernels read and write past their buffers)."""
    fitted, X, controls = controlled_model_and_data
    model = copy.deepcopy(fitted)
    if name == "n_components":
        model.set_params(n_components=corrupt)
    else:
        setattr(model, f"{name}_", corrupt(getattr(model, f"{name}_")))
    X_copy, controls_copy = X.copy(), controls.copy()
    with pytest.raises(ValueError, match=message):
        METHOD_CALLS[method](model, X, controls)
    np.testing.assert_array_equal(X, X_copy)
    np.testing.assert_array_equal(controls, controls_copy)


def test_valid_fitted_parameters_pass_every_method(controlled_model_and_data):
    """The same calls succeed on the intact model (the checks reject nothing valid)."""
    fitted, X, controls = controlled_model_and_data
    for call in METHOD_CALLS.values():
        call(copy.deepcopy(fitted), X, controls)


def test_hand_set_parameters_of_another_size_work_once_consistent(controlled_model_and_data):
    """Fitted arrays set by hand for a new n_components are used when they all agree."""
    fitted, X, controls = controlled_model_and_data
    model = copy.deepcopy(fitted).set_params(n_components=1)
    one_state = dict(
        transition_matrix=[[0.8]],
        observation_matrix=[[1.0], [0.5], [-0.5]],
        transition_covariance=[[0.3]],
        observation_covariance=np.eye(3) * 0.4,
        transition_offset=[0.1],
        observation_offset=[1.0, -2.0, 0.5],
        control_matrix=[[0.2]],
        initial_state_mean=[0.0],
        initial_state_covariance=[[1.0]],
    )
    for name, value in one_state.items():
        setattr(model, f"{name}_", value)
    reference = kalman_filter(LGSSMParameters(**one_state), X, controls=controls)
    assert model.score(X, controls=controls) == pytest.approx(reference.log_likelihood, rel=1e-12)
    # The stream of earlier partial_fit calls has the old state dimension.
    streaming = copy.deepcopy(fitted)
    streaming.partial_fit(X, controls=controls)
    model._stream = streaming._stream
    with pytest.raises(ValueError, match="new_sequence=True"):
        model.partial_fit(X, controls=controls)


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("filter_state_mean_", np.zeros(3), r"filter_state_mean_ must have shape \(2,\)"),
        ("filter_state_mean_", np.array([np.nan, 0.0]), "filter_state_mean_ contains NaN"),
        ("filter_state_covariance_", np.eye(3), r"filter_state_covariance_ must have shape"),
        ("filter_state_covariance_", np.full((2, 2), np.inf), "filter_state_covariance_ contains"),
        ("filter_state_covariance_", np.array([[1.0, 0.5], [0.0, 1.0]]), "must be symmetric"),
        ("filter_state_covariance_", np.diag([1.0, -1.0]), "must be positive semi-definite"),
    ],
)
def test_filter_update_validates_the_stream_state(name, value, message):
    model = model_with(TRUE_PARAMS)
    X = sample_sequences(model, [5], seed=31)
    model.filter_update(X[0])
    setattr(model, name, value)
    with pytest.raises(ValueError, match=message):
        model.filter_update(X[1])
    model.reset_filter()
    model.filter_update(X[0])  # a reset stream starts again from the prior


def test_the_out_of_bounds_paths_of_the_issue_raise_in_a_subprocess():
    """The calls that used to corrupt the heap, run in a child process: a regression
    fails this test instead of killing the test run."""
    code = textwrap.dedent(
        """
        import warnings
        import numpy as np
        from skseq.lds import LinearGaussianSSM

        warnings.simplefilter("ignore")
        X = np.random.default_rng(0).normal(size=(40, 3)).cumsum(axis=0)

        def outcome(corrupt, call):
            model = LinearGaussianSSM(2, n_iter=2).fit(X)
            corrupt(model)
            try:
                call(model)
            except ValueError:
                return "ValueError"
            return "no error"

        print([
            outcome(lambda m: m.set_params(n_components=1),
                    lambda m: [m.filter_update(x) for x in X[:3]]),
            outcome(lambda m: setattr(m, "observation_matrix_", np.ones((8, 2))),
                    lambda m: m.forecast(X, 5)),
            outcome(lambda m: setattr(m, "observation_covariance_", np.eye(2)),
                    lambda m: m.score(X)),
            outcome(lambda m: setattr(m, "transition_covariance_", np.eye(1)),
                    lambda m: m.smooth(X)),
        ])
        """
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == str(["ValueError"] * 4)


# -- stochastic EM -------------------------------------------------------------------


def test_partial_fit_one_chunk_with_step_one_equals_one_em_step():
    truth = model_with(TRUE_PARAMS)
    X = sample_sequences(truth, [300, 200], seed=0)
    inits = {f"{name}_init": value for name, value in TRUE_PARAMS.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        batch = LinearGaussianSSM(2, n_iter=1, **inits).fit(X, lengths=[300, 200])
    online = LinearGaussianSSM(2, learning_offset=0.0, **inits)
    online.partial_fit(X, lengths=[300, 200])
    assert online.n_batch_iter_ == 1
    for name in TRUE_PARAMS:
        np.testing.assert_allclose(
            getattr(online, f"{name}_"), getattr(batch, f"{name}_"), rtol=1e-9, atol=1e-12
        )


def test_chunks_carry_the_filtered_state_exactly():
    """With the parameters held fixed, the stream's state after each chunk is the
    filtered state of the whole sequence, and the first row of a continued chunk
    is not a sequence start."""
    truth = model_with(TRUE_PARAMS)
    X = sample_sequences(truth, [1_000], seed=1)
    inits = {f"{name}_init": value for name, value in TRUE_PARAMS.items()}
    model = LinearGaussianSSM(2, params=[], **inits)
    means, covariances = truth.filter(X)
    for stop in range(250, 1_001, 250):
        model.partial_fit(X[stop - 250 : stop])
        np.testing.assert_allclose(model.filter_state_mean_, means[stop - 1], rtol=1e-12)
        np.testing.assert_allclose(
            model.filter_state_covariance_, covariances[stop - 1], rtol=1e-12
        )
    rows, offsets = model._stack(X[:250], np.zeros((250, 0))), np.array([0, 250])
    continued, _, _ = model._stream_estep(rows, offsets, model._stream)
    assert float(continued["n_sequences"]) == 0.0
    fresh, _, _ = model._stream_estep(rows, offsets, None)
    assert float(fresh["n_sequences"]) == 1.0


STREAM_PARAMS = dict(TRUE_PARAMS, control_matrix=np.array([[0.5], [-0.3]]))


def test_stream_across_calls_gives_the_statistics_of_the_whole_sequences():
    """At fixed parameters, partial_fit's E steps over sequences cut anywhere (a
    sequence continued across calls, complete sequences inside a call, a call
    inside one sequence) add up to the E step of the whole sequences, with
    controls, missing entries and all-NaN rows (at a chunk's and a sequence's
    first and last rows too)."""
    model = model_with(STREAM_PARAMS, n_controls=1)
    rng = np.random.default_rng(21)
    lengths = [300, 200, 250, 150]
    controls = rng.normal(size=(900, 1))
    X = sample_sequences(model, lengths, seed=21, controls=controls)
    X[rng.random(X.shape) < 0.1] = np.nan
    X[[5, 299, 300, 760]] = np.nan
    stacked = model._stack(X, controls)
    whole, whole_log_likelihood = model._estep(stacked, np.cumsum([0, *lengths]))
    # Rows 0:120 of the first sequence; its rest and the start of the second;
    # the rest of the second, the whole third and the start of the fourth; its rest.
    calls = [(0, [120]), (120, [180, 50]), (350, [150, 250, 10]), (760, [140])]
    carried, total, log_likelihood = None, None, 0.0
    for start, call_lengths in calls:
        rows = stacked[start : start + sum(call_lengths)]
        statistics, part, carried = model._stream_estep(
            rows, np.cumsum([0, *call_lengths]), carried
        )
        total = statistics if total is None else total + statistics
        log_likelihood += part
    for key, value in whole.items():
        scale = max(np.max(np.abs(value)), 1.0)
        np.testing.assert_allclose(total[key], value, rtol=1e-9, atol=1e-9 * scale, err_msg=key)
    np.testing.assert_allclose(log_likelihood, whole_log_likelihood, rtol=1e-10)


def test_partial_fit_with_several_sequences_and_n_jobs():
    """The complete sequences between a call's first and last go through the batch
    E step, in threads with n_jobs: the same steps as one thread, up to rounding."""
    truth = model_with(TRUE_PARAMS)
    lengths = [150, 200, 200, 200, 120]
    X = sample_sequences(truth, lengths, seed=23)
    one = LinearGaussianSSM(2, random_state=0, n_jobs=1)
    two = clone(one).set_params(n_jobs=2)
    for model in (one, two):
        model.partial_fit(X[:100])
        model.partial_fit(X[100:], lengths=[50, *lengths[1:]])
        model.partial_fit(X[:300], lengths=[150, 150], new_sequence=True)
    for name in TRUE_PARAMS:
        np.testing.assert_allclose(
            getattr(two, f"{name}_"), getattr(one, f"{name}_"), rtol=1e-10, atol=1e-12
        )
    np.testing.assert_allclose(two.filter_state_mean_, one.filter_state_mean_, rtol=1e-10)


def test_a_continued_chunk_may_be_entirely_missing_and_filter_update_continues():
    truth = model_with(TRUE_PARAMS)
    X = sample_sequences(truth, [300], seed=22)
    X[100:110] = np.nan
    inits = {f"{name}_init": value for name, value in TRUE_PARAMS.items()}
    model = LinearGaussianSSM(2, params=[], **inits)
    for start, stop in [(0, 100), (100, 110), (110, 200)]:
        model.partial_fit(X[start:stop])
    means, covariances = truth.filter(X)
    np.testing.assert_allclose(model.filter_state_mean_, means[199], rtol=1e-12)
    mean, covariance = model.filter_update(X[200])
    np.testing.assert_allclose(mean, means[200], rtol=1e-12)
    np.testing.assert_allclose(covariance, covariances[200], rtol=1e-12)
    with pytest.raises(ValueError, match="entirely NaN"):
        model.partial_fit(X[100:110], new_sequence=True)


def test_stream_in_chunks_reaches_batch_em():
    """Two passes over a stream in chunks reach batch EM's per-sample log-likelihood
    (scaled down from the benchmark's 2e5 rows in chunks of 1 000).  The model's
    precise observations make batch EM converge in tens of iterations; stochastic
    EM, whose steps shrink as (t + tau)^-kappa, can only follow a model whose EM
    converges at all in about that many steps (benchmarks/bench_stream.py)."""
    precise = dict(TRUE_PARAMS, observation_covariance=0.1 * TRUE_PARAMS["observation_covariance"])
    truth = model_with(precise)
    X = sample_sequences(truth, [20_000], seed=2)
    batch = LinearGaussianSSM(2, random_state=0).fit(X)
    online = LinearGaussianSSM(2, random_state=0)
    first = None
    for _ in range(2):
        for start in range(0, len(X), 50):
            online.partial_fit(X[start : start + 50], new_sequence=start == 0)
            if first is None:
                first = online.score(X) / len(X)
    per_sample_batch = batch.score(X) / len(X)
    per_sample_online = online.score(X) / len(X)
    assert per_sample_batch - first > 0.02 * abs(per_sample_batch)  # a real distance to cover
    assert abs(per_sample_online - per_sample_batch) <= 0.005 * abs(per_sample_batch)


def test_partial_fit_pickled_mid_stream_continues_exactly():
    truth = model_with(TRUE_PARAMS)
    X = sample_sequences(truth, [3_000], seed=3)
    model = LinearGaussianSSM(2, random_state=0)
    model.partial_fit(X[:500])
    shapes = [np.shape(value) for value in model._stream]
    for start in range(500, 1_500, 500):
        model.partial_fit(X[start : start + 500])
    assert [np.shape(value) for value in model._stream] == shapes
    restored = pickle.loads(pickle.dumps(model))
    for start in range(1_500, 3_000, 500):
        model.partial_fit(X[start : start + 500])
        restored.partial_fit(X[start : start + 500])
    for name in TRUE_PARAMS:
        np.testing.assert_array_equal(getattr(restored, f"{name}_"), getattr(model, f"{name}_"))
    for value, restored_value in zip(model._stream, restored._stream):
        np.testing.assert_array_equal(restored_value, value)
    np.testing.assert_array_equal(restored.filter_state_mean_, model.filter_state_mean_)


def test_online_fit_over_minibatches_of_sequences():
    truth = model_with(TRUE_PARAMS)
    lengths = [100] * 30
    X = sample_sequences(truth, lengths, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        batch = LinearGaussianSSM(2, n_iter=100, random_state=0).fit(X, lengths=lengths)
        online = LinearGaussianSSM(
            2, learning_method="online", batch_size=10, n_iter=20, random_state=0
        ).fit(X, lengths=lengths)
    assert online.n_batch_iter_ == 3 * len(online.monitor_.history)
    assert online.monitor_.history[-1] > online.monitor_.history[0]
    np.testing.assert_allclose(
        online.score(X, lengths=lengths), batch.score(X, lengths=lengths), rtol=0.06
    )


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"learning_decay": 0.5}, "learning_decay"),
        ({"learning_offset": -1.0}, "learning_offset"),
        ({"total_samples": -3}, "total_samples"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_bad_stochastic_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LinearGaussianSSM(**kwargs).partial_fit(np.zeros((10, 2)) + np.arange(10)[:, None])


def test_partial_fit_rejects_a_different_number_of_features():
    model = LinearGaussianSSM(random_state=0).partial_fit(
        np.random.default_rng(0).normal(size=(50, 2))
    )
    with pytest.raises(ValueError, match="features"):
        model.partial_fit(np.zeros((10, 3)))


@pytest.mark.parametrize("method", ["fit", "partial_fit"])
def test_data_whose_squares_overflow_get_a_message_about_the_data(method):
    """X with an entry of 1e300 (missing entries elsewhere): a ValueError about the
    data's scale, not numpy's "Array must not contain infs or NaNs" from the
    initialisation's eigenvalues."""
    X = np.random.default_rng(0).normal(size=(100, 2))
    X[5, 0] = 1e300
    X[7, 1] = np.nan
    original = X.copy()
    with pytest.raises(ValueError, match="X is too large for double precision"):
        getattr(LinearGaussianSSM(2), method)(X)
    np.testing.assert_array_equal(X, original)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize(
    "method", ["score", "score_sequences", "transform", "filter", "smooth", "forecast", "bic"]
)
def test_inference_on_data_whose_squares_overflow_raises_the_fit_message(method):
    """fit(X).score(X * 1e300) was -inf without an error: the rule of fit (and of
    the HMMs) applies to every method that takes data."""
    X = np.random.default_rng(0).normal(size=(60, 2))
    model = LinearGaussianSSM(2, n_iter=3, tol=-np.inf).fit(X)
    arguments = (2,) if method == "forecast" else ()
    with pytest.raises(ValueError, match="X is too large for double precision"):
        getattr(model, method)(X * 1e300, *arguments)
    assert np.isfinite(model.score(X * 1e3))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_online_filter_far_from_the_model_raises_instead_of_minus_inf():
    X = np.random.default_rng(0).normal(size=(60, 2))
    model = LinearGaussianSSM(2, n_iter=3, tol=-np.inf).fit(X)
    with pytest.raises(ValueError, match="x lies too far from the model's predictions"):
        model.filter_update(np.full(2, 1e300))
    with pytest.raises(ValueError, match="too far from the model's predictions"):
        model.score(np.full((4, 2), 1e160) + X[:4])
