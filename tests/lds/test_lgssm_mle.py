"""LinearGaussianSSM(fit_method="mle"): exact maximum likelihood against EM, Durbin &
Koopman and statsmodels; parameters held fixed; standard errors."""

import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.exceptions import ConvergenceWarning

from skseq.datasets import load_nile
from skseq.inference.kalman import LGSSMParameters, sample_lgssm
from skseq.lds import LinearGaussianSSM

LOCAL_LEVEL = dict(
    transition_matrix_init=[[1.0]],
    observation_matrix_init=[[1.0]],
    params={"transition_covariance", "observation_covariance"},
)


def nile():
    return load_nile().data.reshape(-1, 1).astype(np.float64)


def test_nile_local_level_mle_beats_em_and_is_durbin_and_koopmans():
    X = nile()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        em = LinearGaussianSSM(1, acceleration=None, n_iter=500, **LOCAL_LEVEL).fit(X)
    mle = LinearGaussianSSM(1, fit_method="mle", **LOCAL_LEVEL).fit(X)
    assert mle.converged_
    assert mle.log_likelihood_ >= em.score(X) - 1e-9
    assert np.isclose(mle.score(X), mle.log_likelihood_)
    assert mle.monitor_.history[-1] == mle.lower_bound_ == mle.log_likelihood_
    # the default prior of a random walk is diffuse: Durbin & Koopman's exact diffuse MLE
    assert_allclose(mle.observation_covariance_[0, 0], 15099.0, rtol=1e-3)
    assert_allclose(mle.transition_covariance_[0, 0], 1469.1, rtol=1e-3)
    assert mle.mle_parameter_names_ == ["transition_covariance[0,0]", "observation_covariance[0,0]"]
    assert_allclose(mle.params_, [1469.1, 15099.0], rtol=1e-3)
    assert mle.cov_params_.shape == (2, 2)
    assert_allclose(mle.bse_["transition_covariance"], np.sqrt(mle.cov_params_[:1, :1]))


def test_nile_standard_errors_are_statsmodels():
    sm = pytest.importorskip("statsmodels.api")
    X = nile()
    theirs = sm.tsa.UnobservedComponents(X.ravel(), "llevel")
    for ours_type, their_type in (("opg", "opg"), ("oim", "approx")):
        mle = LinearGaussianSSM(1, fit_method="mle", cov_type=ours_type, **LOCAL_LEVEL).fit(X)
        reference = theirs.fit(disp=False, cov_type=their_type)
        ours = [mle.bse_["observation_covariance"][0, 0], mle.bse_["transition_covariance"][0, 0]]
        # statsmodels' prior N(0, 1e6) moves its estimates by ~0.5 %: a few percent
        assert_allclose(ours, reference.bse, rtol=0.03, err_msg=ours_type)


def test_parameters_left_out_of_params_are_held_at_their_initial_values():
    rng = np.random.default_rng(0)
    truth = LGSSMParameters([[0.7]], [[1.0], [0.5]], [[0.4]], np.diag([1.0, 0.5]))
    X = sample_lgssm(truth, 300, random_state=1).observations
    X[rng.random(X.shape) < 0.1] = np.nan
    model = LinearGaussianSSM(
        1,
        fit_method="mle",
        params={"transition_matrix", "observation_covariance", "observation_offset"},
        transition_covariance_init=[[0.4]],
        observation_matrix_init=[[1.0], [0.5]],
    ).fit(X)
    assert model.transition_covariance_[0, 0] == 0.4
    assert_allclose(model.observation_matrix_, [[1.0], [0.5]])
    assert model.mle_parameter_names_ == [
        "transition_matrix[0,0]",
        "observation_covariance[0,0]",
        "observation_covariance[1,0]",
        "observation_covariance[1,1]",
        "observation_offset[0]",
        "observation_offset[1]",
    ]
    bse = model.bse_["observation_covariance"]
    assert_allclose(bse, bse.T)
    assert set(model.bse_) == {"transition_matrix", "observation_covariance", "observation_offset"}
    assert abs(model.transition_matrix_[0, 0] - 0.7) < 4 * model.bse_["transition_matrix"][0, 0]


def test_mle_reaches_at_least_em_with_controls_missing_values_and_sequences():
    rng = np.random.default_rng(2)
    truth = LGSSMParameters(
        [[0.8, 0.1], [0.0, 0.5]],
        rng.normal(size=(3, 2)),
        np.diag([0.3, 0.2]),
        np.diag([0.5, 0.4, 0.3]),
        control_matrix=[[1.0], [0.5]],
    )
    controls = rng.normal(size=(400, 1))
    X = sample_lgssm(truth, 400, controls=controls, random_state=3).observations
    X[rng.random(X.shape) < 0.1] = np.nan
    lengths = [250, 150]
    common = dict(n_components=2, random_state=0, n_iter=300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        em = LinearGaussianSSM(**common, tol=1e-6).fit(X, lengths=lengths, controls=controls)
    mle = LinearGaussianSSM(**common, fit_method="mle", cov_type=None).fit(
        X, lengths=lengths, controls=controls
    )
    assert mle.converged_
    em_log_likelihood = em.score(X, lengths=lengths, controls=controls)
    assert mle.log_likelihood_ >= em_log_likelihood - 1e-3
    assert np.isclose(mle.score(X, lengths=lengths, controls=controls), mle.log_likelihood_)
    assert not hasattr(mle, "bse_") and not hasattr(mle, "cov_params_")


def test_refitting_by_em_drops_the_mle_attributes_and_online_mle_is_refused():
    X = nile()
    model = LinearGaussianSSM(1, fit_method="mle", **LOCAL_LEVEL).fit(X)
    assert hasattr(model, "bse_")
    model.set_params(fit_method="em").fit(X)
    for name in ("bse_", "cov_params_", "params_", "log_likelihood_", "mle_parameter_names_"):
        assert not hasattr(model, name), name
    with pytest.raises(ValueError, match="fit_method='mle' .* learning_method='batch'"):
        LinearGaussianSSM(1, fit_method="mle", learning_method="online").fit(X)
    with pytest.raises(ValueError, match="fit_method"):
        LinearGaussianSSM(1, fit_method="newton").fit(X)
    with pytest.raises(ValueError, match="cov_type"):
        LinearGaussianSSM(1, fit_method="mle", cov_type="hessian").fit(X)
    with pytest.raises(ValueError, match="mle_em_iter"):
        LinearGaussianSSM(1, fit_method="mle", mle_em_iter=-1).fit(X)


def test_mle_without_em_start_and_n_init_keeps_the_best():
    X = nile()
    once = LinearGaussianSSM(1, fit_method="mle", mle_em_iter=0, **LOCAL_LEVEL).fit(X)
    best = LinearGaussianSSM(
        1, fit_method="mle", mle_em_iter=0, n_init=2, random_state=0, **LOCAL_LEVEL
    ).fit(X)
    assert_allclose(once.params_, best.params_, rtol=1e-3)
    assert best.log_likelihood_ >= once.log_likelihood_ - 1e-6


def test_n_iter_zero_keeps_the_starting_point_without_a_warning():
    X = nile()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model = LinearGaussianSSM(1, fit_method="mle", n_iter=0, mle_em_iter=0, **LOCAL_LEVEL)
        model.fit(X)
    assert model.n_iter_ == 0 and not model.converged_
    start = LinearGaussianSSM(1, n_iter=0, **LOCAL_LEVEL).fit(X)
    assert_allclose(model.transition_covariance_, start.transition_covariance_)
    assert np.isclose(model.log_likelihood_, start.score(X))


def test_n_jobs_two_fits_what_one_thread_fits():
    """The gradients and the rows' scores over blocks of sequences on two threads."""
    X = np.concatenate([nile(), nile()[::-1], nile()[:40]])
    lengths = [100, 100, 40]
    fits = [
        LinearGaussianSSM(1, fit_method="mle", n_jobs=n_jobs, **LOCAL_LEVEL).fit(X, lengths=lengths)
        for n_jobs in (1, 2)
    ]
    assert fits[0].converged_ and fits[1].converged_
    assert_allclose(fits[1].params_, fits[0].params_, rtol=1e-7)
    assert_allclose(fits[1].log_likelihood_, fits[0].log_likelihood_, rtol=1e-12)
    assert_allclose(fits[1].cov_params_, fits[0].cov_params_, rtol=1e-6)


def _reduced_model_mle(X, start, build):
    """A reference: L-BFGS-B on the exact log-likelihood (kalman_filter) over the free
    entries of a hand-written reduced model, with scipy's finite-difference gradient
    (no Fisher identity, no parameter blocks)."""
    import scipy.optimize

    from skseq.inference.kalman import kalman_filter

    def objective(theta):
        try:
            return -kalman_filter(build(theta), X).log_likelihood / X.size
        except (ValueError, np.linalg.LinAlgError):
            return np.inf

    result = scipy.optimize.minimize(
        objective, start, method="L-BFGS-B", options={"maxiter": 2000, "ftol": 1e-15, "gtol": 1e-9}
    )
    return result.x, -result.fun * X.size


def test_fixed_params_hold_entries_and_the_free_ones_are_the_reduced_models_mle():
    """Entries of F and H held (F[1,0] = 0; H's first row (1, 0) and H[1,1] = 1 fix the
    state's basis), Q diagonal (its off-diagonal entries held at 0) with Q[1,1] held,
    R full: the free entries are the maximiser over them of the exact log-likelihood."""
    truth = LGSSMParameters(
        [[0.8, 0.3], [0.0, 0.5]],
        [[1.0, 0.0], [0.4, 1.0]],
        np.diag([0.5, 0.3]),
        [[0.4, 0.1], [0.1, 0.3]],
        initial_state_mean=[0.0, 0.0],
        initial_state_covariance=np.eye(2),
    )
    X = sample_lgssm(truth, 400, random_state=4).observations
    nan = np.nan
    fixed = {
        "transition_matrix": [[nan, nan], [0.0, nan]],
        "observation_matrix": [[1.0, 0.0], [nan, 1.0]],
        "transition_covariance": [[nan, 0.0], [0.0, 0.3]],
    }
    model = LinearGaussianSSM(
        2,
        fit_method="mle",
        params=[
            "transition_matrix",
            "observation_matrix",
            "transition_covariance",
            "observation_covariance",
        ],
        # both start at the truth (the likelihood has a second maximum, R[0,0] -> 0)
        **{f"{name}_init": value for name, value in truth._asdict().items() if value is not None},
        transition_offset_init=[0.0, 0.0],
        observation_offset_init=[0.0, 0.0],
        fixed_params=fixed,
        mle_em_iter=0,
        n_iter=500,
        tol=1e-9,
    ).fit(X)
    assert model.converged_
    # held entries exactly
    assert model.transition_matrix_[1, 0] == 0.0
    assert model.observation_matrix_[0].tolist() == [1.0, 0.0]
    assert model.observation_matrix_[1, 1] == 1.0
    assert model.transition_covariance_[0, 1] == model.transition_covariance_[1, 0] == 0.0
    assert model.transition_covariance_[1, 1] == 0.3
    assert model.mle_parameter_names_ == [
        "transition_matrix[0,0]",
        "transition_matrix[0,1]",
        "transition_matrix[1,1]",
        "observation_matrix[1,0]",
        "transition_covariance[0,0]",
        "observation_covariance[0,0]",
        "observation_covariance[1,0]",
        "observation_covariance[1,1]",
    ]
    assert np.isnan(model.bse_["transition_matrix"][1, 0])
    assert np.isfinite(model.bse_["transition_matrix"][0, 1])
    assert np.isnan(model.bse_["transition_covariance"][[0, 1, 1], [1, 0, 1]]).all()

    def build(theta):
        f00, f01, f11, h10, log_q00, l00, l10, l11 = theta
        factor = np.array([[np.exp(l00), 0.0], [l10, np.exp(l11)]])
        return truth._replace(
            transition_matrix=[[f00, f01], [0.0, f11]],
            observation_matrix=[[1.0, 0.0], [h10, 1.0]],
            transition_covariance=np.diag([np.exp(log_q00), 0.3]),
            observation_covariance=factor @ factor.T,
        )

    factor = np.linalg.cholesky(truth.observation_covariance)
    start = [0.8, 0.3, 0.5, 0.4, np.log(0.5), np.log(factor[0, 0]), factor[1, 0]]
    start.append(np.log(factor[1, 1]))
    theta, reference_log_likelihood = _reduced_model_mle(X, start, build)
    reference = build(theta)
    expected = [
        *np.asarray(reference.transition_matrix).ravel()[[0, 1, 3]],
        reference.observation_matrix[1][0],
        reference.transition_covariance[0, 0],
        *np.asarray(reference.observation_covariance)[[0, 1, 1], [0, 0, 1]],
    ]
    assert model.log_likelihood_ >= reference_log_likelihood - 1e-6
    assert_allclose(model.params_, expected, rtol=1e-4, atol=1e-5)


def test_fixed_params_mask_holds_the_initial_values_and_the_errors():
    X = nile()
    common = dict(fit_method="mle", **LOCAL_LEVEL)
    common["tol"] = 1e-9
    held = LinearGaussianSSM(
        1,
        observation_covariance_init=[[15000.0]],
        fixed_params={"observation_covariance": np.array([[True]])},
        **common,
    ).fit(X)
    left_out = LinearGaussianSSM(
        1,
        fit_method="mle",
        transition_matrix_init=[[1.0]],
        observation_matrix_init=[[1.0]],
        observation_covariance_init=[[15000.0]],
        params=["transition_covariance"],
        tol=1e-9,
    ).fit(X)
    assert held.observation_covariance_[0, 0] == 15000.0
    assert held.mle_parameter_names_ == ["transition_covariance[0,0]"]
    assert_allclose(held.params_, left_out.params_, rtol=1e-5)
    # AIC counts the estimated entries only, as for the model that leaves R out
    assert held.aic(X) == pytest.approx(-2 * held.score(X) + 2 * 1)
    assert left_out.aic(X) == pytest.approx(-2 * left_out.score(X) + 2 * 1)
    cases = [
        (dict(fixed_params=[1.0]), TypeError, "fixed_params must be None or a dict"),
        (dict(fixed_params={"F": [[1.0]]}), ValueError, "unknown parameter"),
        (dict(fixed_params={"control_matrix": [[1.0]]}), ValueError, "params does not learn"),
        (
            dict(fixed_params={"transition_covariance": [[1.0, 2.0]]}),
            ValueError,
            r"shape of transition_covariance, \(1, 1\)",
        ),
        (
            dict(fixed_params={"transition_covariance": np.array([[True]])}),
            ValueError,
            "transition_covariance_init, which is not given",
        ),
        (dict(fixed_params={"transition_covariance": [["a"]]}), TypeError, "array of numbers"),
        (dict(fixed_params={"transition_covariance": [[np.inf]]}), ValueError, "infinite"),
    ]
    for extra, error, message in cases:
        with pytest.raises(error, match=message):
            LinearGaussianSSM(1, **{**common, **extra}).fit(X)
    with pytest.raises(ValueError, match="it takes fit_method='mle'"):
        LinearGaussianSSM(1, fixed_params={"transition_covariance": [[1.0]]}, **LOCAL_LEVEL).fit(X)


def test_fixed_params_refuse_a_covariance_pattern_without_cholesky_coordinates():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    nan = np.nan
    for pattern in ([[1.0, nan], [nan, nan]], [[nan, 0.5], [0.5, nan]]):
        model = LinearGaussianSSM(
            1, fit_method="mle", fixed_params={"observation_covariance": pattern}
        )
        with pytest.raises(ValueError, match="a covariance can hold all its entries"):
            model.fit(X)
    model = LinearGaussianSSM(
        1, fit_method="mle", fixed_params={"observation_covariance": [[1.0, 0.5], [0.4, 1.0]]}
    )
    with pytest.raises(ValueError, match="symmetric"):
        model.fit(X)


def test_fixed_params_of_a_local_linear_trend_are_statsmodels_fit_constrained():
    """statsmodels' local linear trend with sigma2.trend held (``fit_constrained``), and
    its approximate diffuse prior N(0, 1e6 I): the same model with the trend's variance
    and Q's off-diagonal entries held through fixed_params."""
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(0)
    trend = np.cumsum(0.1 * rng.normal(size=300))
    y = np.cumsum(trend + 0.5 * rng.normal(size=300)) + rng.normal(size=300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = sm.tsa.UnobservedComponents(y, "lltrend").fit_constrained(
            {"sigma2.trend": 0.01}, disp=False
        )
    nan = np.nan
    ours = LinearGaussianSSM(
        2,
        fit_method="mle",
        transition_matrix_init=[[1.0, 1.0], [0.0, 1.0]],
        observation_matrix_init=[[1.0, 0.0]],
        initial_state_mean_init=[0.0, 0.0],
        initial_state_covariance_init=1e6 * np.eye(2),
        params=["transition_covariance", "observation_covariance"],
        fixed_params={"transition_covariance": [[nan, 0.0], [0.0, 0.01]]},
        tol=1e-8,
    ).fit(y[:, None])
    assert ours.mle_parameter_names_ == [
        "transition_covariance[0,0]",
        "observation_covariance[0,0]",
    ]
    # (sigma2.level, sigma2.irregular); statsmodels leaves the first two rows out of
    # its likelihood (the burn-in of the diffuse prior): 1e-3
    assert_allclose(ours.params_, theirs.params[[1, 0]], rtol=1e-3)
    assert ours.transition_covariance_[1, 1] == 0.01
    errors = [ours.bse_["transition_covariance"][0, 0], ours.bse_["observation_covariance"][0, 0]]
    assert_allclose(errors, theirs.bse[[1, 0]], rtol=1e-2)
