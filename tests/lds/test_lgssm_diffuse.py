"""LinearGaussianSSM(initial_state="diffuse"): the exact diffuse initial state in the
estimator, against statsmodels' exact diffuse local level and the inference layer."""

import numpy as np
import pytest
from numpy.testing import assert_allclose

from skseq.datasets import load_nile
from skseq.inference.kalman import LGSSMParameters, kalman_filter, kalman_smoother
from skseq.lds import LinearGaussianSSM

# a few EM iterations are enough for what these tests check
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

LEVEL = dict(
    transition_matrix_init=[[1.0]],
    observation_matrix_init=[[1.0]],
    params=["transition_covariance", "observation_covariance"],
)


def nile():
    return load_nile().data.astype(float)


def fitted_parameters(model):
    return LGSSMParameters(
        model.transition_matrix_,
        model.observation_matrix_,
        model.transition_covariance_,
        model.observation_covariance_,
        model.transition_offset_,
        model.observation_offset_,
        None,
        model.initial_state_mean_,
        model.initial_state_covariance_,
    )


def test_nile_mle_reaches_durbin_and_koopman_and_statsmodels():
    sm = pytest.importorskip("statsmodels.api")
    y = nile()
    model = LinearGaussianSSM(
        1, initial_state="diffuse", fit_method="mle", cov_type="oim", tol=1e-8, **LEVEL
    ).fit(y)
    assert model.converged_
    assert_allclose(model.transition_covariance_[0, 0], 1469.1, rtol=1e-2)
    assert_allclose(model.observation_covariance_[0, 0], 15099.0, rtol=1e-2)
    assert np.all(model.initial_state_covariance_ == 0.0)  # P_* = 0, not learned
    statsmodels_model = sm.tsa.UnobservedComponents(y[:, 0], "llevel", use_exact_diffuse=True)
    theirs = statsmodels_model.fit(disp=False)
    assert model.log_likelihood_ >= theirs.llf - 1e-6
    assert_allclose(model.log_likelihood_, theirs.llf, atol=1e-3)
    # at the same point: statsmodels' diffuse log-likelihood and its standard errors
    # from the numerical Hessian (its "approx"; ours from differences of the gradient)
    point = [model.observation_covariance_[0, 0], model.transition_covariance_[0, 0]]
    at_point = statsmodels_model.smooth(point, cov_type="approx")
    assert_allclose(model.score(y), at_point.llf, rtol=1e-12)
    assert_allclose(
        [model.bse_["observation_covariance"][0, 0], model.bse_["transition_covariance"][0, 0]],
        at_point.bse,
        rtol=2e-2,
    )
    # the default OPG (the rows' scores differenced under the exact diffuse filter)
    opg = LinearGaussianSSM(1, initial_state="diffuse", fit_method="mle", tol=1e-8, **LEVEL)
    opg.fit(y)
    at_point = statsmodels_model.smooth(point, cov_type="opg")
    assert_allclose(
        [opg.bse_["observation_covariance"][0, 0], opg.bse_["transition_covariance"][0, 0]],
        at_point.bse,
        rtol=2e-2,
    )


def test_em_with_an_exact_diffuse_start_reaches_the_same_maximum():
    y = nile()
    model = LinearGaussianSSM(1, initial_state="diffuse", n_iter=500, tol=1e-9, **LEVEL)
    model.fit(y)
    history = np.asarray(model.monitor_.history)
    assert np.all(np.diff(history) >= -1e-8)  # EM never decreases the diffuse likelihood
    assert_allclose(model.transition_covariance_[0, 0], 1469.1, rtol=1e-2)
    assert_allclose(model.observation_covariance_[0, 0], 15099.0, rtol=1e-2)
    plain = LinearGaussianSSM(1, initial_state="diffuse", acceleration=None, n_iter=5, **LEVEL).fit(
        y
    )
    assert np.all(np.diff(plain.monitor_.history) > 0)


def test_filter_smooth_transform_score_are_the_inference_layers_exact_diffuse_ones():
    rng = np.random.default_rng(0)
    X = np.cumsum(rng.normal(size=(80, 2)), axis=0) + rng.normal(size=(80, 2))
    X[1, 0] = np.nan
    lengths = [50, 30]
    model = LinearGaussianSSM(2, initial_state="diffuse", n_iter=10, random_state=0)
    model.fit(X, lengths=lengths)
    parameters = fitted_parameters(model)
    filtered = kalman_filter(parameters, X, lengths=lengths, diffuse=True)
    smoothed = kalman_smoother(parameters, X, lengths=lengths, diffuse=True)
    means, covariances = model.filter(X, lengths=lengths)
    assert_allclose(means, filtered.filtered_means)
    assert_allclose(covariances, filtered.filtered_covariances)
    means, covariances = model.smooth(X, lengths=lengths)
    assert_allclose(means, smoothed.smoothed_means)
    assert_allclose(covariances, smoothed.smoothed_covariances)
    assert_allclose(model.transform(X, lengths=lengths), smoothed.smoothed_means)
    assert_allclose(model.score(X, lengths=lengths), filtered.log_likelihood)
    assert_allclose(model.score_sequences(X, lengths=lengths), filtered.sequence_log_likelihood)
    forecast_means, _ = model.forecast(X, 2, lengths=lengths)
    last = np.array([49, 79])
    assert_allclose(
        forecast_means[[0, 2]],
        (filtered.filtered_means[last] @ model.transition_matrix_.T + model.transition_offset_)
        @ model.observation_matrix_.T
        + model.observation_offset_,
    )
    assert np.isfinite(model.aic(X, lengths=lengths))


def test_what_needs_a_proper_prior_refuses_the_diffuse_one():
    y = nile()
    model = LinearGaussianSSM(1, initial_state="diffuse", n_iter=3, **LEVEL).fit(y)
    for call in (
        lambda: model.sample(5),
        lambda: model.filter_update(y[0]),
        lambda: model.partial_fit(y),
        lambda: model.filter_stream(y),
        lambda: model.reset_filter(),
    ):
        with pytest.raises(ValueError, match="initial_state='diffuse' has none"):
            call()
    with pytest.raises(ValueError, match="end inside their diffuse period"):
        LinearGaussianSSM(2, initial_state="diffuse", n_iter=2, random_state=0).fit(
            np.random.default_rng(1).normal(size=(30, 1))
        ).forecast(np.array([[0.3]]), 1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(learning_method="online"), "initial_state='diffuse' has none"),
        (dict(initial_state_mean_init=[0.0]), "initial_state_mean_init was given"),
        (dict(params=["initial_state_mean"]), "mu0 and Sigma0 are not parameters"),
        (dict(initial_state="exact"), "initial_state"),
    ],
)
def test_invalid_diffuse_options_are_refused(options, message):
    options = {"initial_state": "diffuse", **options}
    with pytest.raises(ValueError, match=message):
        LinearGaussianSSM(1, n_iter=2, **options).fit(nile())
