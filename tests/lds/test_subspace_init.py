"""LinearGaussianSSM(init="subspace"): EM started from the subspace-identification estimate."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from skseq.datasets import load_nile
from skseq.inference.kalman import LGSSMParameters, sample_lgssm
from skseq.inference.subspace import subspace_identification
from skseq.lds import LinearGaussianSSM

F_TRACK = np.array([[1.0, 1.0], [0.0, 1.0]])
H_TRACK = np.array([[1.0, 0.0]])
Q_TRACK = 0.01 * np.array([[1 / 3, 1 / 2], [1 / 2, 1.0]])
R_TRACK = np.array([[1.0]])


def constant_velocity_track(n_samples=400, seed=0):
    """Position of a 1-D constant-velocity target observed in unit noise (benchmarks/bench_init)."""
    rng = np.random.default_rng(seed)
    states = np.zeros((n_samples, 2))
    states[0] = [0.0, 1.0]
    for t in range(1, n_samples):
        states[t] = F_TRACK @ states[t - 1] + rng.multivariate_normal(np.zeros(2), Q_TRACK)
    return states @ H_TRACK.T + rng.normal(size=(n_samples, 1))


def fit(X, n_components=2, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return LinearGaussianSSM(n_components, n_iter=300, **kwargs).fit(X)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_subspace_start_reaches_the_fit_from_the_true_matrices_on_a_track(seed):
    """The issue's case: from factor analysis EM stops at a random walk with drift (F has
    an eigenvalue near 0), tens of nats below the fit started from the true F, H, Q, R; from
    the subspace estimate (the default) it gets within 0.5 nats of that fit."""
    X = constant_velocity_track(seed=seed)
    true_start = fit(
        X,
        transition_matrix_init=F_TRACK,
        observation_matrix_init=H_TRACK,
        transition_covariance_init=Q_TRACK,
        observation_covariance_init=R_TRACK,
    )
    default = fit(X)
    factor_analysis = fit(X, init="factor_analysis", random_state=0)
    assert default.get_params()["init"] == "subspace"
    assert default.score(X) > true_start.score(X) - 0.5
    assert factor_analysis.score(X) < true_start.score(X) - 10
    # both of the track's poles are near 1 (position and velocity)
    assert np.all(np.abs(np.linalg.eigvals(default.transition_matrix_) - 1) < 0.05)


def test_the_estimate_is_the_start_of_em():
    """n_iter=0 gives the subspace estimate's F, H, Q, R (Q, R through EM's floor, which
    leaves these well-conditioned ones unchanged) and the defaults of the rest."""
    X = constant_velocity_track()
    model = LinearGaussianSSM(2, n_iter=0).fit(X)
    estimate = subspace_identification(X, 2)
    np.testing.assert_array_equal(model.transition_matrix_, estimate.transition_matrix)
    np.testing.assert_array_equal(model.observation_matrix_, estimate.observation_matrix)
    np.testing.assert_allclose(
        model.transition_covariance_, estimate.transition_covariance, rtol=1e-12
    )
    np.testing.assert_array_equal(model.observation_covariance_, estimate.observation_covariance)
    np.testing.assert_array_equal(model.observation_offset_, X.mean(axis=0))
    np.testing.assert_array_equal(model.transition_offset_, np.zeros(2))


def test_several_sequences_and_missing_rows():
    X = np.vstack([constant_velocity_track(300, seed=1), constant_velocity_track(200, seed=2)])
    X[[5, 50, 350]] = np.nan
    model = LinearGaussianSSM(2, n_iter=0).fit(X, lengths=[300, 200])
    estimate = subspace_identification(X, 2, lengths=[300, 200])
    np.testing.assert_array_equal(model.transition_matrix_, estimate.transition_matrix)



@pytest.mark.parametrize(
    "case",
    ["controls", "given transition matrix", "given observation matrix", "short sequences"],
)
def test_where_the_estimate_does_not_apply_the_factor_analysis_start_is_used(case):
    """Controls, a given initial value that fixes the state basis, or too few complete
    windows: init="subspace" starts exactly where init="factor_analysis" does."""
    X = constant_velocity_track(200)
    kwargs, fit_kwargs = {}, {}
    if case == "controls":
        fit_kwargs["controls"] = np.random.default_rng(0).normal(size=(200, 1))
    elif case == "given transition matrix":
        kwargs["transition_matrix_init"] = F_TRACK
    elif case == "given observation matrix":
        kwargs["observation_matrix_init"] = H_TRACK
    else:
        fit_kwargs["lengths"] = [10] * 20
    model = LinearGaussianSSM(2, n_iter=0, random_state=0, **kwargs).fit(X, **fit_kwargs)
    reference = LinearGaussianSSM(2, n_iter=0, init="factor_analysis", random_state=0, **kwargs)
    reference.fit(X, **fit_kwargs)
    for name, value in reference._get_parameters().items():
        np.testing.assert_array_equal(getattr(model, f"{name}_"), value, err_msg=name)


def test_given_observation_noise_and_offset_keep_the_estimate():
    X = constant_velocity_track()
    model = LinearGaussianSSM(
        2, n_iter=0, observation_covariance_init=[[2.0]], observation_offset_init=[0.0]
    ).fit(X)
    estimate = subspace_identification(X, 2)
    np.testing.assert_array_equal(model.transition_matrix_, estimate.transition_matrix)
    np.testing.assert_array_equal(model.observation_covariance_, [[2.0]])
    np.testing.assert_array_equal(model.observation_offset_, [0.0])


def test_on_the_nile_the_subspace_start_ends_at_least_as_high():
    X = load_nile().data
    subspace, factor_analysis = (
        LinearGaussianSSM(1, n_iter=1000, init=init, random_state=0).fit(X).score(X)
        for init in ("subspace", "factor_analysis")
    )
    assert subspace > factor_analysis - 0.05


def test_more_states_than_the_data_support_still_fit():
    """The estimate's warning is not passed on (EM starts from it all the same)."""
    X = constant_velocity_track(200)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = LinearGaussianSSM(4, n_iter=5).fit(X)
    assert np.isfinite(model.score(X))


def test_init_is_validated_by_name():
    X = constant_velocity_track(100)
    with pytest.raises(ValueError, match="init must be .subspace. or .factor_analysis., got"):
        LinearGaussianSSM(init="pca").fit(X)


def test_an_explosive_estimate_is_scaled_to_a_unit_root():
    """A weakly identified random model (3 states seen through 1 feature, 400 rows) whose
    shift-invariance estimate of F had a pole of modulus 1.06: under it the Kalman filter
    from a diffuse start lost positive definiteness (a ValueError on the first E step)."""
    rng = np.random.default_rng(1011)
    F = rng.normal(size=(3, 3))
    F *= rng.uniform(0.5, 0.95) / np.max(np.abs(np.linalg.eigvals(F)))
    H = rng.normal(size=(1, 3))
    A, B = rng.normal(size=(3, 3)), rng.normal(size=(1, 1))
    Q, R = A @ A.T / 3 + 0.1 * np.eye(3), 0.5 * (B @ B.T + 0.1 * np.eye(1))
    X = sample_lgssm(LGSSMParameters(F, H, Q, R), 400, random_state=11).observations
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        estimate = subspace_identification(X, 3)
    assert np.max(np.abs(np.linalg.eigvals(estimate.transition_matrix))) <= 1 + 1e-12
    model = fit(X, 3, acceleration=None)
    assert np.isfinite(model.score(X))


def test_a_spectral_radius_within_rounding_of_one_gives_a_diffuse_prior_without_a_warning():
    """On pykalman's robot positions the subspace estimate of F, divided by its spectral
    radius, has a radius of 1 - 1e-15: the stationary covariance's solve warned of an
    ill-conditioned matrix before the prior fell back to the diffuse one."""
    datasets = pytest.importorskip("pykalman.datasets")
    X = np.ma.filled(np.ma.asarray(datasets.load_robot().observations, dtype=float), np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = LinearGaussianSSM(5, n_iter=0).fit(X)
    radius = np.max(np.abs(np.linalg.eigvals(model.transition_matrix_)))
    # eigvals of F / radius(F) is 1 only to rounding (1 + 4e-16 seen with one BLAS)
    assert abs(radius - 1) < 1e-12
    state_scale = model._covariance_scales[1]
    np.testing.assert_array_equal(model.initial_state_covariance_, 1e6 * state_scale * np.eye(5))
