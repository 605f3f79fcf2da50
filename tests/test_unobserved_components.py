"""UnobservedComponents against statsmodels (the reference: same model, same data, same
default initialisation -- approximately diffuse with statsmodels' burn), Durbin &
Koopman's Nile estimates, parameter recovery on simulated data, and the errors."""

import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose

from skseq import UnobservedComponents as TopLevel
from skseq.datasets import load_nile
from skseq.inference.kalman import LGSSMParameters, sample_lgssm
from skseq.lds import UnobservedComponents

sm = pytest.importorskip("statsmodels.api")

NILE = load_nile().data[:, 0]


def fit_both(y, exog=None, **spec):
    """The skseq fit and statsmodels' default fit of the same specification."""
    model = UnobservedComponents(**spec).fit(y, exog)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = sm.tsa.UnobservedComponents(y, exog=exog, **spec).fit(disp=0, maxiter=1000)
    return model, reference


def reference_params(reference):
    return dict(zip(reference.model.param_names, reference.params))


def loglike_at(reference, model):
    """statsmodels' log-likelihood at skseq's estimates (the models are the same)."""
    return reference.model.loglike(
        np.array([model.params_[n] for n in reference.model.param_names])
    )


@pytest.fixture(scope="module")
def co2():
    data = sm.datasets.co2.load_pandas().data["co2"]
    return data.resample("MS").mean().interpolate().to_numpy()[-240:]


@pytest.fixture(scope="module")
def nile():
    return fit_both(NILE, level="local level")


def test_nile_local_level_is_durbin_and_koopmans_and_statsmodels(nile):
    model, reference = nile
    assert TopLevel is UnobservedComponents
    assert list(model.params_) == ["sigma2.irregular", "sigma2.level"]
    assert_allclose(model.params_["sigma2.irregular"], 15099, rtol=0.01)
    assert_allclose(model.params_["sigma2.level"], 1469.1, rtol=0.01)
    assert abs(model.log_likelihood_ - reference.llf) < 1e-3
    assert_allclose(loglike_at(reference, model), model.log_likelihood_, rtol=1e-9)
    for name, error in zip(reference.model.param_names, reference.bse):
        assert_allclose(model.bse_[name], error, rtol=0.03, err_msg=name)
    assert model.nobs_effective_ == reference.nobs_effective
    assert_allclose(
        [model.aic(), model.bic(), model.hqic()],
        [reference.aic, reference.bic, reference.hqic],
        atol=2e-3,
    )
    assert_allclose(model.score(NILE), model.log_likelihood_, rtol=1e-12)
    assert model.converged_


def test_local_linear_trend_with_a_seasonal_of_12_on_co2(co2):
    spec = dict(level="local linear trend", seasonal=12)
    with pytest.warns(UserWarning, match="boundary of the parameter space"):
        model, reference = fit_both(co2, **spec)
    assert list(model.params_) == reference.model.param_names
    assert abs(model.log_likelihood_ - reference.llf) < 1e-3
    # (boundary variances: statsmodels' ~1e-11 against skseq's floor)
    assert_allclose(loglike_at(reference, model), model.log_likelihood_, atol=1e-5)
    expected = reference_params(reference)
    for name in ("sigma2.irregular", "sigma2.level"):  # the interior ones
        assert_allclose(model.params_[name], expected[name], rtol=0.01, err_msg=name)
    boundary = ["sigma2.trend", "sigma2.seasonal"]
    assert model.boundary_params_ == boundary  # on the boundary, as statsmodels'
    for name in boundary:
        assert model.params_[name] < 1e-6 * np.var(co2)
        assert np.isnan(model.bse_[name])
    assert "(boundary)" in model.summary()


@pytest.mark.parametrize("cov_type, their_type", [("opg", "opg"), ("oim", "approx")])
def test_standard_errors_next_to_boundary_variances_are_statsmodels_fix_params(
    co2, cov_type, their_type
):
    # The trend and seasonal variances are 0 at the maximum. The information of
    # the interior variances with those held at 0 is statsmodels' with fix_params
    # (skseq's "oim" is the Hessian, statsmodels' "approx"); the observed
    # information of all four was indefinite, and its pseudo-inverse clipped every
    # standard error to 0.
    with pytest.warns(UserWarning, match="boundary"):
        model = UnobservedComponents("lltrend", seasonal=12, cov_type=cov_type).fit(co2)
    reference = sm.tsa.UnobservedComponents(co2, "lltrend", seasonal=12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with reference.fix_params({"sigma2.trend": 0.0, "sigma2.seasonal": 0.0}):
            held = reference.fit(disp=0, cov_type=their_type)
    for name in ("sigma2.irregular", "sigma2.level"):
        index = reference.param_names.index(name)
        assert_allclose(model.params_[name], held.params[index], rtol=0.01, err_msg=name)
        assert_allclose(model.bse_[name], held.bse[index], rtol=0.01, err_msg=name)
    assert model.cov_params_.shape == (4, 4)
    assert np.all(np.isnan(model.cov_params_[2:])) and np.all(np.isnan(model.cov_params_[:, 2:]))
    assert np.all(np.isfinite(model.cov_params_[:2, :2]))


def test_a_line_search_into_failing_recursions_does_not_stop_the_fit(co2):
    # Deterministic trend and seasonal, no irregular: from the starting variance
    # (the data's), L-BFGS-B's second line search tries sigma2.level ~ 1e-11,
    # where the approximately diffuse filter fails; the run then ended at its
    # start and was reported converged at log-likelihood -174 (statsmodels: -67)
    spec = dict(
        level=True,
        stochastic_level=True,
        trend=True,
        stochastic_trend=False,
        seasonal=12,
        stochastic_seasonal=False,
    )
    model, reference = fit_both(co2, **spec)
    assert model.converged_
    assert abs(model.log_likelihood_ - reference.llf) < 1e-3
    assert_allclose(model.params_["sigma2.level"], reference.params[0], rtol=1e-3)


def test_trigonometric_seasonal_names_and_likelihood(co2):
    spec = dict(level="lltrend", freq_seasonal=[{"period": 12, "harmonics": 2}])
    model, reference = fit_both(co2, **spec)
    assert "sigma2.freq_seasonal_12(2)" in model.params_
    assert list(model.params_) == reference.model.param_names
    assert abs(model.log_likelihood_ - reference.llf) < 1e-3
    assert_allclose(loglike_at(reference, model), model.log_likelihood_, atol=1e-5)


def simulated_trend_cycle(n=200, seed=0):
    rng = np.random.default_rng(seed)
    cycle = np.zeros(n)
    for t in range(1, n):
        cycle[t] = 0.9 * np.cos(0.3) * cycle[t - 1] + rng.normal()
    trend = np.cumsum(0.1 + np.cumsum(rng.normal(scale=0.05, size=n)))
    return trend + cycle + rng.normal(size=n)


def test_trend_cycle_model_is_statsmodels_model_and_reaches_its_maximum():
    y = simulated_trend_cycle()
    spec = dict(level="lltrend", cycle=True, stochastic_cycle=True, damped_cycle=True)
    model, reference = fit_both(y, **spec)
    assert list(model.params_) == reference.model.param_names
    # the same log-likelihood function: statsmodels' at skseq's estimates is skseq's
    assert_allclose(loglike_at(reference, model), model.log_likelihood_, rtol=1e-9)
    # a maximum at least as high as statsmodels' (which may stop at a lower local one)
    assert model.log_likelihood_ > reference.llf - 1e-3
    # and statsmodels started at skseq's estimates finds nothing higher
    start = np.array([model.params_[n] for n in reference.model.param_names])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        polished = reference.model.fit(start, disp=0, maxiter=1000)
    assert polished.llf < model.log_likelihood_ + 1e-3
    assert 0 < model.params_["damping.cycle"] < 1
    assert 0 < model.params_["frequency.cycle"] < np.pi


def test_autoregressive_component_of_order_2():
    rng = np.random.default_rng(1)
    ar = np.zeros(300)
    for t in range(2, 300):
        ar[t] = 0.5 * ar[t - 1] + 0.3 * ar[t - 2] + rng.normal()
    y = 0.3 * np.cumsum(rng.normal(size=300)) + ar + 0.5 * rng.normal(size=300)
    model, reference = fit_both(y, level="llevel", autoregressive=2)
    assert list(model.params_)[-2:] == ["ar.L1", "ar.L2"]
    assert abs(model.log_likelihood_ - reference.llf) < 1e-3
    assert_allclose(loglike_at(reference, model), model.log_likelihood_, rtol=1e-9)
    expected = reference_params(reference)
    for name in ("ar.L1", "ar.L2", "sigma2.ar", "sigma2.level"):
        assert_allclose(model.params_[name], expected[name], rtol=0.05, atol=0.01, err_msg=name)


def test_regressors_are_estimated_by_maximum_likelihood():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(200, 2))
    y = np.cumsum(rng.normal(size=200)) + x @ [1.0, -2.0] + rng.normal(size=200)
    model, reference = fit_both(y, x, level="llevel")
    assert list(model.params_) == ["sigma2.irregular", "sigma2.level", "beta.x1", "beta.x2"]
    assert abs(model.log_likelihood_ - reference.llf) < 1e-3
    expected = reference_params(reference)
    for index, name in enumerate(reference.model.param_names):
        assert_allclose(model.params_[name], expected[name], rtol=2e-3, err_msg=name)
        assert_allclose(model.bse_[name], reference.bse[index], rtol=0.03, err_msg=name)
    # forecasts with the future regressors
    future = rng.normal(size=(5, 2))
    forecast = model.forecast(5, future)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected_forecast = reference.get_forecast(5, exog=future)
    assert_allclose(forecast.mean, expected_forecast.predicted_mean, rtol=1e-3)
    with pytest.raises(ValueError, match="regressor"):
        model.forecast(5)
    # a DataFrame's columns name the coefficients, as in statsmodels
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(x, columns=["rain", "temp"])
    named = UnobservedComponents("llevel").fit(y, frame)
    assert list(named.params_)[-2:] == ["beta.rain", "beta.temp"]
    assert_allclose(named.params_["beta.temp"], model.params_["beta.x2"], rtol=1e-10)


def test_forecasts_and_intervals_are_statsmodels_get_forecast(nile):
    model, reference = nile
    forecast = model.forecast(10, alpha=0.1)
    # statsmodels' forecast at skseq's estimates
    at = reference.model.smooth(np.array([model.params_[n] for n in reference.model.param_names]))
    expected = at.get_forecast(10)
    interval = expected.conf_int(alpha=0.1)
    assert_allclose(forecast.mean, expected.predicted_mean, rtol=1e-8)
    assert_allclose(forecast.lower, interval[:, 0], rtol=1e-8)
    assert_allclose(forecast.upper, interval[:, 1], rtol=1e-8)


def test_components_are_statsmodels_smoothed_states(co2):
    model = UnobservedComponents(level="lltrend", seasonal=4).fit(co2[:80])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = sm.tsa.UnobservedComponents(co2[:80], level="lltrend", seasonal=4)
        at = reference.smooth(np.array([model.params_[n] for n in reference.param_names]))
    components = model.components(co2[:80])
    assert set(components) == {"level", "trend", "seasonal"}
    burn = reference.loglikelihood_burn
    for name in components:
        expected = getattr(at, name)
        assert_allclose(components[name].mean, expected["smoothed"], rtol=1e-6, atol=1e-6)
        # the standard deviations after the diffuse rows (within them, they depend on
        # how each smoother handles the large initial variance)
        assert_allclose(
            components[name].std[burn:],
            np.sqrt(expected["smoothed_cov"])[burn:],
            rtol=1e-5,
            atol=1e-6,
        )


def test_missing_rows_and_fixed_parameters_as_in_statsmodels():
    y = NILE.copy()
    y[[20, 21, 60]] = np.nan
    model, reference = fit_both(y, level="llevel")
    assert abs(model.log_likelihood_ - reference.llf) < 1e-3
    fixed = UnobservedComponents("llevel", fixed_params={"sigma2.level": 1000.0}).fit(y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = sm.tsa.UnobservedComponents(y, "llevel")
        with mod.fix_params({"sigma2.level": 1000.0}):
            expected = mod.fit(disp=0)
    assert fixed.params_["sigma2.level"] == 1000.0
    assert np.isnan(fixed.bse_["sigma2.level"])
    assert abs(fixed.log_likelihood_ - expected.llf) < 1e-3
    assert_allclose(fixed.params_["sigma2.irregular"], expected.params[0], rtol=1e-2)
    assert "(fixed)" in fixed.summary()


def test_summary_lists_every_parameter_with_its_test(nile):
    model, _ = nile
    text = model.summary()
    for name in model.params_:
        assert name in text
    assert "P>|z|" in text and "local level" in text


def test_several_sequences_add_up():
    rng = np.random.default_rng(3)
    y = np.concatenate([np.cumsum(rng.normal(size=60)), np.cumsum(rng.normal(size=40))])
    y = y + rng.normal(size=100)
    model = UnobservedComponents("llevel").fit(y, lengths=[60, 40])
    assert_allclose(
        model.score(y, lengths=[60, 40]),
        model.score(y[:60]) + model.score(y[60:]),
        rtol=1e-12,
    )
    assert_allclose(model.log_likelihood_, model.score(y, lengths=[60, 40]), rtol=1e-10)
    ids = np.repeat([7, 3], [60, 40])
    again = UnobservedComponents("llevel").fit(y.reshape(-1, 1), sequence_ids=ids)
    assert_allclose(again.log_likelihood_, model.log_likelihood_, rtol=1e-10)
    # with a regressor: each sequence's first row has its regression term too
    x = rng.normal(size=100)
    shifted = y + 3.0 * x
    both = UnobservedComponents("llevel").fit(shifted, x, lengths=[60, 40])
    assert_allclose(
        both.score(shifted, x, lengths=[60, 40]),
        both.score(shifted[:60], x[:60]) + both.score(shifted[60:], x[60:]),
        rtol=1e-12,
    )
    assert abs(both.params_["beta.x1"] - 3.0) < 4 * both.bse_["beta.x1"]


def test_parameters_are_recovered_from_a_simulated_local_linear_trend():
    truth = LGSSMParameters(
        transition_matrix=[[1.0, 1.0], [0.0, 1.0]],
        observation_matrix=[[1.0, 0.0]],
        transition_covariance=np.diag([0.5, 0.01]),
        observation_covariance=[[2.0]],
    )
    y = sample_lgssm(truth, 3000, random_state=0).observations[:, 0]
    model = UnobservedComponents("lltrend").fit(y)
    assert_allclose(
        [model.params_[n] for n in ("sigma2.irregular", "sigma2.level", "sigma2.trend")],
        [2.0, 0.5, 0.01],
        rtol=0.3,
    )
    # simulate draws from the fitted model: a long draw refits near it
    draw = model.simulate(3000, random_state=1)
    refit = UnobservedComponents("lltrend").fit(draw)
    assert_allclose(refit.params_["sigma2.irregular"], model.params_["sigma2.irregular"], rtol=0.3)


def test_every_level_string_is_statsmodels_specification():
    y = NILE[:60]
    for name in [
        "irregular",
        "ntrend",
        "fixed intercept",
        "dconstant",
        "llevel",
        "rwalk",
        "dtrend",
        "lldtrend",
        "rwdrift",
        "lltrend",
        "strend",
        "rtrend",
    ]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = UnobservedComponents(name, n_iter=0, cov_type=None).fit(y)
            reference = sm.tsa.UnobservedComponents(y, name)
        assert list(model.params_) == reference.param_names, name
        assert model.nobs_effective_ == y.size - reference.loglikelihood_burn, name
        # the same log-likelihood function at the same point
        point = np.array([model.params_[n] for n in reference.param_names])
        assert_allclose(reference.loglike(point), model.log_likelihood_, rtol=1e-6, err_msg=name)


@pytest.mark.parametrize(
    "spec, error, match",
    [
        (dict(level="local wobble"), ValueError, "level/trend specification"),
        (dict(level=True, seasonal=1), ValueError, "seasonal"),
        (dict(level=True, freq_seasonal={"period": 12}), TypeError, "freq_seasonal"),
        (
            dict(level=True, freq_seasonal=[{"period": 12}], stochastic_freq_seasonal=[1, 2]),
            ValueError,
            "stochastic_freq_seasonal",
        ),
        (dict(level=True, cycle=True, cycle_period_bounds=(1, 5)), ValueError, "cycle_period"),
        (dict(level="llevel", fixed_params={"sigma2.trend": 1.0}), ValueError, "unknown"),
        (dict(level="llevel", fixed_params={"sigma2.level": -1.0}), ValueError, "variance"),
        (
            dict(level="llevel", autoregressive=2, fixed_params={"ar.L1": 0.5}),
            ValueError,
            "autoregressive",
        ),
        (dict(level="llevel", cov_type="hessian"), ValueError, "cov_type"),
        (dict(level="llevel", autoregressive=-1), ValueError, "autoregressive"),
    ],
)
def test_bad_specifications_are_refused_by_name(spec, error, match):
    with pytest.raises(error, match=match):
        UnobservedComponents(**spec).fit(NILE[:30])


def test_bad_data_and_statsmodels_warnings():
    with pytest.raises(ValueError, match="one series"):
        UnobservedComponents("llevel").fit(np.ones((10, 2)))
    with pytest.raises(ValueError, match="nothing is left to fit"):
        UnobservedComponents("lltrend", seasonal=12).fit(NILE[:8])
    with pytest.warns(UserWarning, match="deterministic level"):
        UnobservedComponents(trend=True, irregular=True, n_iter=0).fit(NILE[:30])
    with pytest.warns(UserWarning, match="no stochastic element"):
        UnobservedComponents("fixed intercept", n_iter=0).fit(NILE[:30])


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_cycle_and_autoregressive_components_and_draws():
    rng = np.random.default_rng(4)
    y = simulated_trend_cycle(150, seed=4)
    ar = np.zeros(150)
    for t in range(1, 150):
        ar[t] = 0.6 * ar[t - 1] + rng.normal(scale=0.5)
    y = y + ar
    spec = dict(level="lltrend", cycle=True, stochastic_cycle=True, damped_cycle=True)
    model = UnobservedComponents(**spec, autoregressive=1, n_iter=30).fit(y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = sm.tsa.UnobservedComponents(y, **spec, autoregressive=1)
        point = np.array([model.params_[n] for n in reference.param_names])
        at = reference.smooth(point)
    assert_allclose(reference.loglike(point), model.log_likelihood_, rtol=1e-8)
    components = model.components(y)
    burn = reference.loglikelihood_burn
    for name in ("level", "trend", "cycle", "autoregressive"):
        expected = getattr(at, name)
        assert_allclose(components[name].mean, expected["smoothed"], rtol=1e-6, atol=1e-6)
        assert_allclose(
            components[name].std[burn:], np.sqrt(expected["smoothed_cov"])[burn:], rtol=1e-5
        )
    draw = model.sample(50, random_state=0)
    assert draw.shape == (50, 1) and np.all(np.isfinite(draw))
    # fixing the cycle and the AR coefficient holds them
    fixed = {"frequency.cycle": 0.3, "damping.cycle": 0.9, "ar.L1": 0.6}
    held = UnobservedComponents(**spec, autoregressive=1, fixed_params=fixed, n_iter=30).fit(y)
    for name, value in fixed.items():
        assert held.params_[name] == value
        assert np.isnan(held.bse_[name])


def test_exact_diffuse_initial_state_is_statsmodels_use_exact_diffuse(co2):
    """use_exact_diffuse=True: Koopman's exact diffuse filter of the Kalman layer, the
    diffuse log-likelihood without a burn, as statsmodels' use_exact_diffuse=True."""
    model = UnobservedComponents("llevel", use_exact_diffuse=True, cov_type="oim").fit(NILE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = sm.tsa.UnobservedComponents(NILE, "llevel", use_exact_diffuse=True)
        result = reference.fit(disp=0)
    assert abs(model.log_likelihood_ - result.llf) < 1e-3
    # Durbin & Koopman's estimates are those of the exact diffuse likelihood
    assert_allclose(model.params_["sigma2.irregular"], 15099, rtol=1e-3)
    assert_allclose(model.params_["sigma2.level"], 1469.1, rtol=1e-3)
    assert model.nobs_effective_ == NILE.size
    point = np.array([model.params_[n] for n in reference.param_names])
    assert_allclose(reference.loglike(point), model.log_likelihood_, rtol=1e-10)
    expected = reference.smooth(point).get_forecast(4)
    forecast = model.forecast(4)
    assert_allclose(forecast.mean, expected.predicted_mean, rtol=1e-9)
    assert_allclose(forecast.std, np.sqrt(expected.var_pred_mean), rtol=1e-9)
    components = model.components(NILE).level
    assert_allclose(components.mean, reference.smooth(point).level["smoothed"], rtol=1e-8)
    # a seasonal model on CO2
    seasonal = UnobservedComponents(
        "lltrend", seasonal=12, use_exact_diffuse=True, cov_type=None
    ).fit(co2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected_llf = (
            sm.tsa.UnobservedComponents(co2, "lltrend", seasonal=12, use_exact_diffuse=True)
            .fit(disp=0, maxiter=1000)
            .llf
        )
    assert abs(seasonal.log_likelihood_ - expected_llf) < 1e-3


@pytest.mark.parametrize("cov_type, their_type", [("opg", "opg"), ("oim", "approx")])
def test_exact_diffuse_with_regressors_and_both_standard_errors_is_statsmodels(
    cov_type, their_type
):
    # The OPG under the exact diffuse filter differences the rows' log predictive
    # densities (statsmodels differences all its scores); the inserted row that
    # carries the first regression term is missing, so nothing is burned.
    x = np.random.default_rng(0).normal(size=(NILE.size, 1))
    y = NILE + 50 * x[:, 0]
    model = UnobservedComponents("llevel", use_exact_diffuse=True, cov_type=cov_type).fit(y, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = sm.tsa.UnobservedComponents(y, "llevel", exog=x, use_exact_diffuse=True)
        result = reference.fit(disp=0, cov_type=their_type)
    assert abs(model.log_likelihood_ - result.llf) < 1e-3
    assert model.nobs_effective_ == NILE.size
    for name, value, error in zip(reference.param_names, result.params, result.bse):
        assert_allclose(model.params_[name], value, rtol=5e-3, err_msg=name)
        assert_allclose(model.bse_[name], error, rtol=5e-3, err_msg=name)
    assert_allclose(model.score(y, x), model.log_likelihood_, rtol=1e-12)
    expected = result.get_forecast(3, exog=np.ones((3, 1)))
    forecast = model.forecast(3, controls=np.ones((3, 1)))
    assert_allclose(forecast.mean, expected.predicted_mean, rtol=1e-3)
    assert_allclose(forecast.std, np.sqrt(expected.var_pred_mean), rtol=1e-2)
