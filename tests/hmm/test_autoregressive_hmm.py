"""AutoregressiveHMM and LinearRegressionHMM: the maths against definitions."""

import itertools
import warnings

import numpy as np
import pytest
import sklearn
from scipy import stats
from scipy.special import logsumexp
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, GroupKFold

from skseq import AutoregressiveHMM, GaussianHMM, LinearRegressionHMM


def tiny_model(covariance_type="full", n_lags=1, n_controls=1, n_features=2, seed=0):
    """A hand-set model (no fit) with K = 2."""
    rng = np.random.default_rng(seed)
    model = AutoregressiveHMM(2, n_lags=n_lags, covariance_type=covariance_type)
    model.startprob_ = np.array([0.3, 0.7])
    model.transmat_ = np.array([[0.8, 0.2], [0.35, 0.65]])
    n_regressors = n_lags * n_features + n_controls
    model.coefs_ = rng.normal(scale=0.4, size=(2, n_features, n_regressors))
    model.intercepts_ = rng.normal(size=(2, n_features))
    if covariance_type == "full":
        factors = rng.normal(size=(2, n_features, n_features))
        model.covars_ = factors @ np.swapaxes(factors, 1, 2) + np.eye(n_features)
    else:
        model.covars_ = rng.uniform(0.5, 2.0, size=(2, n_features))
    model.n_features_in_ = n_features
    model.n_controls_ = n_controls
    return model


def brute_force(model, X, controls):
    """log p(x_L.. | x_0..x_{L-1}, u) and the posteriors, summing over every path."""
    n_lags, K = model.n_lags, model.n_components
    covars = (
        model.covars_ if model.covariance_type == "full" else [np.diag(c) for c in model.covars_]
    )
    emitted = range(n_lags, len(X))
    log_density = np.array(
        [
            [
                stats.multivariate_normal.logpdf(
                    X[t],
                    model.coefs_[k]
                    @ np.concatenate([X[t - lag] for lag in range(1, n_lags + 1)] + [controls[t]])
                    + model.intercepts_[k],
                    covars[k],
                )
                for k in range(K)
            ]
            for t in emitted
        ]
    )
    paths = list(itertools.product(range(K), repeat=len(log_density)))
    log_joint = []
    for path in paths:
        value = np.log(model.startprob_[path[0]]) + log_density[0, path[0]]
        for t in range(1, len(path)):
            value += np.log(model.transmat_[path[t - 1], path[t]]) + log_density[t, path[t]]
        log_joint.append(value)
    log_joint = np.array(log_joint)
    total = logsumexp(log_joint)
    posteriors = np.zeros(log_density.shape)
    for path, value in zip(paths, log_joint):
        posteriors[np.arange(len(path)), path] += np.exp(value - total)
    return total, posteriors


@pytest.mark.parametrize("covariance_type", ["full", "diag"])
@pytest.mark.parametrize("n_lags", [1, 2])
def test_score_and_posteriors_equal_enumeration(covariance_type, n_lags):
    model = tiny_model(covariance_type, n_lags=n_lags)
    rng = np.random.default_rng(1)
    X, controls = rng.normal(size=(n_lags + 5, 2)), rng.normal(size=(n_lags + 5, 1))
    total, posteriors = brute_force(model, X, controls)
    assert np.isclose(model.score(X, controls=controls), total, rtol=1e-10)
    assert np.allclose(model.predict_proba(X, controls=controls), posteriors, atol=1e-10)
    # two sequences: the second's first n_lags rows condition too
    both = np.vstack([X, X[::-1]])
    lengths = [len(X)] * 2
    expected = total + brute_force(model, X[::-1], controls[::-1])[0]
    score = model.score(both, lengths=lengths, controls=np.vstack([controls, controls[::-1]]))
    assert np.isclose(score, expected, rtol=1e-10)


@pytest.mark.parametrize("covariance_type", ["full", "diag"])
def test_without_lags_or_controls_it_is_gaussian_hmm(covariance_type):
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(60, 2)), rng.normal(3.0, 0.5, size=(60, 2))])
    means = np.array([[0.5, 0.0], [2.0, 2.5]])
    covars = np.stack([np.eye(2), 2 * np.eye(2)])
    if covariance_type == "diag":
        covars = np.array([[1.0, 1.0], [2.0, 2.0]])
    start, transmat = np.array([0.5, 0.5]), np.array([[0.9, 0.1], [0.2, 0.8]])
    common = dict(n_iter=15, tol=-np.inf, covars_prior=0.0, covariance_type=covariance_type)
    gaussian = GaussianHMM(
        2,
        startprob_init=start,
        transmat_init=transmat,
        means_init=means,
        covars_init=covars,
        init_params="",
        params="stmc",
        **common,
    ).fit(X)
    ar = AutoregressiveHMM(
        2,
        n_lags=0,
        startprob_init=start,
        transmat_init=transmat,
        intercepts_init=means,
        covars_init=covars,
        init_params="",
        **common,
    ).fit(X)
    assert ar.coefs_.shape == (2, 2, 0)
    assert not np.allclose(ar.intercepts_, means, atol=0.1)  # EM moved them
    assert np.allclose(ar.intercepts_, gaussian.means_, rtol=1e-9, atol=1e-11)
    assert np.allclose(ar.covars_, gaussian._covars_, rtol=1e-9, atol=1e-11)
    assert np.allclose(ar.transmat_, gaussian.transmat_, rtol=1e-9, atol=1e-12)
    assert np.allclose(ar.monitor_.history, gaussian.monitor_.history, rtol=1e-10)
    assert np.isclose(ar.score(X), gaussian.score(X), rtol=1e-10)
    assert np.array_equal(ar.predict(X), gaussian.predict(X))


@pytest.mark.parametrize("regression_prior", [0.0, 2.5])
def test_mstep_is_weighted_least_squares(regression_prior):
    model = tiny_model("full", n_lags=2, n_controls=1)
    model.regression_prior, model.covars_prior = regression_prior, 0.0
    rng = np.random.default_rng(3)
    X, controls = rng.normal(size=(80, 2)), rng.normal(size=(80, 1))
    with model._given_controls(controls):
        design, offsets = model._prepare(X, None, None, None, reset=False)
    posteriors = rng.dirichlet([1.0, 1.0], size=design.shape[0])
    statistics = model._emission_statistics(design, posteriors, None)
    model._emission_mstep(statistics)
    x, z = design[:, :2], np.column_stack([design[:, 2:], np.ones(len(design))])
    for k in range(2):
        w = posteriors[:, k]
        penalty = np.diag([regression_prior] * (z.shape[1] - 1) + [0.0])
        B = np.linalg.solve(z.T @ (w[:, None] * z) + penalty, z.T @ (w[:, None] * x))
        assert np.allclose(model.coefs_[k], B[:-1].T, rtol=1e-9, atol=1e-12)
        assert np.allclose(model.intercepts_[k], B[-1], rtol=1e-9, atol=1e-12)
        residuals = x - z @ B
        scatter = residuals.T @ (w[:, None] * residuals) + B[:-1].T @ penalty[:-1, :-1] @ B[:-1]
        assert np.allclose(model.covars_[k], scatter / w.sum(), rtol=1e-9, atol=1e-12)


def simulate_switching_ar2(n_rows, seed):
    rng = np.random.default_rng(seed)
    coefs = np.array([[1.2, -0.5], [0.0, 0.0], [-0.6, -0.3]])
    intercepts = np.array([0.0, 3.0, -2.0])
    scales = np.array([0.3, 0.5, 0.4])
    transmat = np.full((3, 3), 0.01) + np.eye(3) * 0.97
    states = np.zeros(n_rows, dtype=int)
    x = np.zeros(n_rows)
    for t in range(2, n_rows):
        states[t] = rng.choice(3, p=transmat[states[t - 1]])
        k = states[t]
        x[t] = coefs[k] @ [x[t - 1], x[t - 2]] + intercepts[k] + scales[k] * rng.normal()
    return x[:, None], states, coefs, intercepts, scales


def test_recovers_a_switching_ar2_with_three_regimes():
    X, states, coefs, intercepts, scales = simulate_switching_ar2(3000, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = AutoregressiveHMM(3, n_lags=2, n_iter=200, n_init=3, random_state=0).fit(X)
    order = np.argsort(model.intercepts_.ravel())  # -2, 0, 3 against the truth's order
    truth = np.argsort(intercepts)
    assert np.allclose(model.coefs_[order, 0], coefs[truth], atol=0.1)
    assert np.allclose(model.intercepts_[order, 0], intercepts[truth], atol=0.25)
    assert np.allclose(np.sqrt(model.covars_[order, 0, 0]), scales[truth], atol=0.05)
    relabel = np.empty(3, dtype=int)
    relabel[order] = truth
    assert np.mean(relabel[model.predict(X)] == states[2:]) > 0.95


def test_linear_regression_hmm_is_the_zero_lag_model():
    rng = np.random.default_rng(0)
    u = rng.normal(size=(300, 2))
    X = u @ [[1.0], [-1.0]] + rng.normal(scale=0.3, size=(300, 1))
    kwargs = dict(n_iter=5, random_state=0)
    lr = LinearRegressionHMM(2, **kwargs).fit(X, controls=u)
    ar = AutoregressiveHMM(2, n_lags=0, **kwargs).fit(X, controls=u)
    assert "n_lags" not in lr.get_params()
    assert np.allclose(lr.coefs_, ar.coefs_) and lr.coefs_.shape == (2, 1, 2)
    assert np.isclose(lr.score(X, controls=u), ar.score(X, controls=u))


def test_n_jobs_two_equals_one_thread():
    X, *_ = simulate_switching_ar2(1200, seed=1)
    controls = np.random.default_rng(2).normal(size=(1200, 1))
    lengths = [300] * 4
    fits = [
        AutoregressiveHMM(3, n_lags=2, n_iter=5, random_state=0, n_jobs=n_jobs).fit(
            X, lengths=lengths, controls=controls
        )
        for n_jobs in (1, 2)
    ]
    for name in ("coefs_", "intercepts_", "covars_", "transmat_"):
        assert np.allclose(getattr(fits[0], name), getattr(fits[1], name), rtol=1e-9, atol=1e-12)
    assert np.isclose(
        fits[0].score(X, lengths=lengths, controls=controls),
        fits[1].score(X, lengths=lengths, controls=controls),
        rtol=1e-12,
    )


def test_sample_follows_the_recursion_and_needs_its_lags():
    model = tiny_model("full", n_lags=2, n_controls=1)
    controls = np.random.default_rng(0).normal(size=(6, 1))
    with pytest.raises(ValueError, match="initial_lags"):
        model.sample(6, controls=controls)
    with pytest.raises(ValueError, match="control"):
        model.sample(6, initial_lags=np.zeros((2, 2)))
    lags = np.array([[1.0, 0.0], [0.0, 1.0]])
    X, states = model.sample(6, random_state=0, controls=controls, initial_lags=lags)
    assert X.shape == (6, 2) and states.shape == (6,)
    # With (almost) no noise each draw is its state's regression on the two
    # rows before it (oldest lag first in initial_lags) and its control.
    model.covars_ = np.stack([1e-20 * np.eye(2)] * 2)
    X, states = model.sample(6, random_state=0, controls=controls, initial_lags=lags)
    full = np.vstack([lags, X])
    for t, k in enumerate(states):
        regressors = np.concatenate([full[t + 1], full[t], controls[t]])
        expected = model.coefs_[k] @ regressors + model.intercepts_[k]
        assert np.allclose(X[t], expected, atol=1e-8)


def test_bad_controls_get_clear_errors():
    X = np.random.default_rng(0).normal(size=(50, 1))
    u = np.random.default_rng(1).normal(size=(50, 1))
    model = AutoregressiveHMM(2, n_iter=2, random_state=0)
    with pytest.raises(ValueError, match="rows but X has"):
        model.fit(X, controls=u[:-1])
    bad = u.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        model.fit(X, controls=bad)
    model.fit(X, controls=u)
    assert np.isclose(
        model.aic(X, controls=u), -2 * model.score(X, controls=u) + 2 * model._n_parameters()
    )
    with pytest.raises(ValueError, match="control input"):
        model.predict(X)
    with pytest.raises(ValueError, match="control input"):
        model.bic(X)
    with pytest.raises(ValueError, match="columns"):
        model.score(X, controls=np.ones((50, 2)))
    plain = AutoregressiveHMM(2, n_iter=2, random_state=0).fit(X)
    with pytest.raises(ValueError, match="without controls"):
        plain.predict(X, controls=u)
    with pytest.raises(ValueError, match="at least 3"):
        AutoregressiveHMM(2, n_lags=2).fit(X, lengths=[48, 2])
    with pytest.raises(ValueError, match="'full' or 'diag'"):
        AutoregressiveHMM(2, covariance_type="tied").fit(X)


def test_controls_are_routed_like_sequence_ids():
    rng = np.random.default_rng(0)
    u = rng.normal(size=(400, 1))
    X = np.where(np.arange(400)[:, None] % 100 < 50, 2.0, -2.0) * u + 0.1 * rng.normal(
        size=(400, 1)
    )
    groups = np.repeat(np.arange(4), 100)
    with sklearn.config_context(enable_metadata_routing=True):
        search = GridSearchCV(
            LinearRegressionHMM(n_iter=20, random_state=0),
            {"n_components": [1, 2]},
            cv=GroupKFold(2),
        ).fit(X, groups=groups, sequence_ids=groups, controls=u)
    assert search.best_params_ == {"n_components": 2}


def stationary_distribution(transmat):
    """pi with pi @ transmat = pi, summing to one."""
    n = len(transmat)
    system = np.vstack([transmat.T - np.eye(n), np.ones(n)])
    return np.linalg.lstsq(system, np.r_[np.zeros(n), 1.0], rcond=None)[0]


def univariate_series(n_rows=120, seed=3):
    """A scalar series that switches between two AR(2) regimes (any series would do)."""
    return simulate_switching_ar2(n_rows, seed)[0][:, :1]


def markov_regression_values(model):
    """statsmodels' MarkovRegression parameters, by name, of a scalar AutoregressiveHMM.

    Its transition matrix is ``transmat_`` transposed: ``p[i->j]`` is ``transmat_[i, j]``.
    """
    values = {}
    for i, j in itertools.product(range(model.n_components), repeat=2):
        values[f"p[{i}->{j}]"] = model.transmat_[i, j]
    for k in range(model.n_components):
        values[f"const[{k}]"] = model.intercepts_[k, 0]
        values[f"sigma2[{k}]"] = model.covars_[k, 0, 0]
        for lag in range(model.n_lags):
            values[f"x{lag + 1}[{k}]"] = model.coefs_[k, 0, lag]
    return values


@pytest.mark.parametrize("n_lags", [1, 4])
def test_log_likelihood_equals_statsmodels_markov_regression(n_lags):
    """The switching AR(L) is MarkovRegression on the lags (everything switching).

    statsmodels is given the rows after the first L (which only condition here)
    with their lags as exog.  Its default start is the stationary distribution of
    the chain; ``initialize_known(q)`` puts q two transitions before the first
    row (MarkovRegression filters on pairs of regimes): startprob = q P P.
    """
    markov_regression = pytest.importorskip("statsmodels.tsa.regime_switching.markov_regression")
    x = univariate_series()
    model = AutoregressiveHMM(2, n_lags=n_lags, covars_prior=0.0, n_iter=30, random_state=0)
    model.fit(x)
    lags = np.column_stack([x[n_lags - lag : len(x) - lag, 0] for lag in range(1, n_lags + 1)])
    theirs = markov_regression.MarkovRegression(
        x[n_lags:, 0], k_regimes=2, exog=lags, switching_variance=True
    )
    values = markov_regression_values(model)
    params = np.array([values[name] for name in theirs.param_names])

    model.startprob_ = stationary_distribution(model.transmat_)
    np.testing.assert_allclose(model.score(x), theirs.loglike(params), rtol=1e-12)
    smoothed = theirs.smooth(params).smoothed_marginal_probabilities
    np.testing.assert_allclose(model.predict_proba(x), smoothed, atol=1e-10)

    q = np.array([0.3, 0.7])
    theirs.initialize_known(q)
    model.startprob_ = q @ model.transmat_ @ model.transmat_
    np.testing.assert_allclose(model.score(x), theirs.loglike(params), rtol=1e-12)
    filtered = theirs.filter(params).filtered_marginal_probabilities
    np.testing.assert_allclose(model.filter(x), filtered, atol=1e-10)


@pytest.mark.parametrize(("order", "switching_variance"), [(1, False), (3, False), (1, True)])
def test_hamilton_markov_autoregression_is_an_ar_hmm_on_tuples_of_regimes(
    order, switching_variance
):
    """Hamilton's y_t - mu_{z_t} = sum_l phi_l (y_{t-l} - mu_{z_{t-l}}) + e_t, sigma_{z_t}.

    statsmodels' MarkovAutoregression equals an AutoregressiveHMM on the tuples
    (z_t, ..., z_{t-L}): K^(L+1) states, intercept mu_{z_t} - sum_l phi_l
    mu_{z_{t-l}}, shared coefficients, a tuple moving to the K tuples that shift
    it, started from the stationary distribution (statsmodels' default).
    Switching variances only at order 1: with order 2, statsmodels 0.15 gives
    each tuple the variance of z_{t-1}, not of z_t (it broadcasts them onto the
    third axis from the end of its (z_t, ..., z_{t-L}, time) array).
    """
    markov_autoregression = pytest.importorskip(
        "statsmodels.tsa.regime_switching.markov_autoregression"
    )
    x = univariate_series()
    K = 2
    transition = np.array([[0.9, 0.1], [0.3, 0.7]])
    mu, phi = np.array([1.5, -0.5]), np.array([0.5, -0.2, 0.1])[:order]
    sigma2 = np.array([1.2, 0.6]) if switching_variance else np.array([0.9, 0.9])
    theirs = markov_autoregression.MarkovAutoregression(
        x[:, 0], k_regimes=K, order=order, switching_ar=False, switching_variance=switching_variance
    )
    values = {f"p[{i}->{j}]": transition[i, j] for i in range(K) for j in range(K)}
    values |= {f"const[{k}]": mu[k] for k in range(K)}
    values |= {f"ar.L{lag + 1}": phi[lag] for lag in range(order)}
    values |= {f"sigma2[{k}]": sigma2[k] for k in range(K)} | {"sigma2": sigma2[0]}
    params = np.array([values[name] for name in theirs.param_names])

    tuples = list(itertools.product(range(K), repeat=order + 1))
    position = {regimes: i for i, regimes in enumerate(tuples)}
    transmat = np.zeros((len(tuples), len(tuples)))
    for regimes in tuples:
        for following in range(K):
            shifted = (following, *regimes[:-1])
            transmat[position[regimes], position[shifted]] = transition[regimes[0], following]
    model = AutoregressiveHMM(len(tuples), n_lags=order)
    model.transmat_ = transmat
    model.startprob_ = stationary_distribution(transmat)
    model.coefs_ = np.tile(phi, (len(tuples), 1, 1))
    model.intercepts_ = np.array([[mu[r[0]] - phi @ mu[list(r[1:])]] for r in tuples])
    model.covars_ = sigma2[[r[0] for r in tuples]][:, None, None]
    model.n_features_in_, model.n_controls_ = 1, 0

    np.testing.assert_allclose(model.score(x), theirs.loglike(params), rtol=1e-12)
    current = np.array([[r[0] == k for k in range(K)] for r in tuples], dtype=float)
    smoothed = theirs.smooth(params).smoothed_marginal_probabilities
    np.testing.assert_allclose(model.predict_proba(x) @ current, smoothed, atol=1e-10)
