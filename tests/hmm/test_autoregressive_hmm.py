"""AutoregressiveHMM and LinearRegressionHMM: the maths against definitions."""

import itertools
import threading
import warnings

import numpy as np
import pytest
import sklearn
from hmm_references import stream_statistics
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats
from scipy.special import logsumexp
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, GroupKFold

from skseq import AutoregressiveHMM, GaussianHMM, LinearRegressionHMM
from skseq.streams import sequence_batches


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


def row_log_density(x, mean, covariance):
    """log N(x; mean, covariance) of one row, by brute force where entries are
    missing: the density integrated over the missing entry (numerically; one
    missing entry of two).  0 (density 1) for a step that emits nothing: a row
    missing throughout, or a lag with a NaN (``mean`` NaN)."""
    missing = np.isnan(x)
    if np.isnan(mean).any() or missing.all():
        return 0.0
    if not missing.any():
        return stats.multivariate_normal.logpdf(x, mean, covariance)
    (m,) = np.flatnonzero(missing)

    def joint(value):
        row = x.copy()
        row[m] = value
        return stats.multivariate_normal.pdf(row, mean, covariance)

    scale = np.sqrt(covariance[m, m])
    value, _ = integrate.quad(
        joint, mean[m] - 40 * scale, mean[m] + 40 * scale, epsabs=0, epsrel=1e-13, limit=200
    )
    return np.log(value)


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
                row_log_density(
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


# -- BIC's n, streams, forecasts, missing rows, fixed parameters (issue 21) ------


def test_bic_counts_only_the_emitted_rows():
    X, *_ = simulate_switching_ar2(300, seed=4)
    X = X.copy()
    X[100] = np.nan  # steps 100, 101, 102 emit nothing (the row, then as a lag)
    model = AutoregressiveHMM(2, n_lags=2, n_iter=3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, lengths=[150, 150])
    n_emitted = 300 - 2 * 2 - 3
    expected = -2 * model.score(X, lengths=[150, 150]) + model._n_parameters() * np.log(n_emitted)
    assert np.isclose(model.bic(X, lengths=[150, 150]), expected, rtol=1e-12)
    u = np.random.default_rng(0).normal(size=(300, 1))
    lr = LinearRegressionHMM(2, n_iter=2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        lr.fit(X, controls=u)
    expected = -2 * lr.score(X, controls=u) + lr._n_parameters() * np.log(299)
    assert np.isclose(lr.bic(X, controls=u), expected, rtol=1e-12)


@settings(max_examples=25, deadline=None)
@given(
    n_lags=st.integers(0, 3),
    cuts=st.lists(st.integers(1, 29), max_size=5, unique=True),
    first=st.integers(4, 8),
)
def test_a_sequence_cut_into_batches_gives_what_one_batch_gives(n_lags, cuts, first):
    model = tiny_model("full", n_lags=n_lags)
    rng = np.random.default_rng(n_lags)
    X, u = rng.normal(size=(30, 2)), rng.normal(size=(30, 1))
    X[17] = np.nan  # a missing row, and steps whose lags are missing
    X[9, 0] = np.nan  # a partly observed row: its marginal, its steps as a lag emit nothing
    cuts = [0] + sorted({max(c, first) for c in cuts} - {30}) + [30]
    with model._given_controls(u):
        design, offsets = model._prepare(X, None, None, None, reset=False)
    whole, whole_log_likelihood = model._estep(design, offsets)
    chunked, log_likelihood, carried = stream_statistics(model, X, u, cuts)
    assert np.isclose(log_likelihood, whole_log_likelihood, rtol=1e-11)
    assert np.isclose(whole_log_likelihood, model.score(X, controls=u), rtol=1e-12)
    for name in whole:
        assert np.allclose(chunked[name], whole[name], rtol=1e-9, atol=1e-10), name
    assert np.array_equal(carried.lags, X[30 - n_lags :])
    # The public streams: partial_fit (nothing learned) and filter_stream.
    model.params = ""
    filtered = model.filter(X, controls=u)
    parts = []
    for index, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
        model.partial_fit(X[a:b], controls=u[a:b], new_sequence=index == 0)
        parts.append(model.batch_log_likelihood_)
    assert np.isclose(sum(parts), whole_log_likelihood, rtol=1e-11)
    assert np.allclose(model.filtered_state_, filtered[-1], atol=1e-12)
    model.reset_filter()
    online = [
        model.filter_stream(X[a:b], controls=u[a:b], new_sequence=index == 0)
        for index, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))
    ]
    assert np.allclose(np.vstack(online), filtered, atol=1e-12)


def test_filter_update_continues_row_by_row_from_a_history():
    model = tiny_model("diag", n_lags=2)
    rng = np.random.default_rng(5)
    X, u = rng.normal(size=(12, 2)), rng.normal(size=(12, 1))
    filtered = model.filter(X, controls=u)
    model.reset_filter(X[:4], controls=u[:4])
    rows = [model.filter_update(X[t], controls=u[t]) for t in range(4, 12)]
    assert np.allclose(rows, filtered[2:], atol=1e-12)
    assert np.array_equal(model.filtered_lags_, X[-2:])


def next_row_density(model, X, u, future):
    """p(x_{T+1} | x_{1:T}) as a function of x, from the model's scores."""
    base = model.score(X, controls=u)

    def density(value):
        row = np.atleast_1d(value)[None, :]
        longer = model.score(np.vstack([X, row]), controls=np.vstack([u, future]))
        return np.exp(longer - base)

    return density


def test_predict_next_is_the_mean_and_covariance_of_the_next_rows_density():
    model = tiny_model("full", n_lags=2, n_controls=1, n_features=1)
    rng = np.random.default_rng(6)
    X, u, future = rng.normal(size=(9, 1)), rng.normal(size=(9, 1)), np.array([[0.7]])
    mean, cov = model.predict_next(X, controls=u, future_controls=future, return_cov=True)
    density = next_row_density(model, X, u, future)
    limits = (-60.0, 60.0)
    mass = integrate.quad(density, *limits, limit=200)[0]
    first = integrate.quad(lambda x: x * density(x), *limits, limit=200)[0]
    second = integrate.quad(lambda x: (x - first) ** 2 * density(x), *limits, limit=200)[0]
    assert np.isclose(mass, 1.0, atol=1e-7)
    assert np.isclose(mean[0, 0], first, atol=1e-7)
    assert np.isclose(cov[0, 0, 0], second, atol=1e-6)
    # predict_next_state_proba takes controls; its last row is the enumeration's
    _, posteriors = brute_force(model, X, u)
    predicted = model.predict_next_state_proba(X, controls=u)
    assert np.allclose(predicted[-1], posteriors[-1] @ model.transmat_, atol=1e-12)


def test_predict_next_per_sequence_is_the_mixture_of_the_state_gaussians():
    model = tiny_model("full", n_lags=1, n_controls=1, n_features=2)
    rng = np.random.default_rng(7)
    X, u = rng.normal(size=(14, 2)), rng.normal(size=(14, 1))
    future = rng.normal(size=(2, 1))
    lengths = [6, 8]
    mean, cov = model.predict_next(
        X, lengths=lengths, controls=u, future_controls=future, return_cov=True
    )
    assert mean.shape == (2, 2) and cov.shape == (2, 2, 2)
    for s, (start, stop) in enumerate([(0, 6), (6, 14)]):
        weights = model.predict_next_state_proba(X[start:stop], controls=u[start:stop])[-1]
        means = [
            model.coefs_[k] @ np.concatenate([X[stop - 1], future[s]]) + model.intercepts_[k]
            for k in range(2)
        ]
        density = next_row_density(model, X[start:stop], u[start:stop], future[s : s + 1])
        for point in rng.normal(size=(3, 2)):  # the components and weights are the model's
            mixture = sum(
                weights[k] * stats.multivariate_normal.pdf(point, means[k], model.covars_[k])
                for k in range(2)
            )
            assert np.isclose(density(point), mixture, rtol=1e-10)
        expected = sum(w * m for w, m in zip(weights, means))
        assert np.allclose(mean[s], expected, atol=1e-12)
        spread = sum(
            w * (c + np.outer(m - expected, m - expected))
            for w, m, c in zip(weights, means, model.covars_)
        )
        assert np.allclose(cov[s], spread, atol=1e-12)
    with pytest.raises(ValueError, match="future_controls"):
        model.predict_next(X, lengths=lengths, controls=u)
    missing = X.copy()
    missing[-1] = np.nan
    with pytest.raises(ValueError, match="missing row"):
        model.predict_next(missing, controls=u, future_controls=future[:1])


@pytest.mark.parametrize("n_lags", [0, 2])
def test_missing_rows_emit_nothing(n_lags):
    model = tiny_model("full", n_lags=n_lags)
    rng = np.random.default_rng(8)
    X, u = rng.normal(size=(n_lags + 6, 2)), rng.normal(size=(n_lags + 6, 1))
    X[n_lags + 2] = np.nan  # with lags, the steps after it emit nothing either
    total, posteriors = brute_force(model, X, u)
    assert np.isclose(model.score(X, controls=u), total, rtol=1e-10)
    assert np.allclose(model.predict_proba(X, controls=u), posteriors, atol=1e-10)
    # A partly observed row emits the marginal of its observed entries; the
    # steps that have it as a lag emit nothing.
    partial = rng.normal(size=X.shape)
    partial[n_lags + 3, 1] = np.nan
    total, posteriors = brute_force(model, partial, u)
    assert np.isclose(model.score(partial, controls=u), total, rtol=1e-10)
    assert np.allclose(model.predict_proba(partial, controls=u), posteriors, atol=1e-10)
    if n_lags:
        with model._given_controls(u):
            design, _ = model._prepare(partial, None, None, None, reset=False)
        emitting = model._emitting(design)
        assert emitting[3] and not emitting[4:6].any() and emitting[:3].all()
    bad = u.copy()
    bad[0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        model.score(X, controls=bad)
    # EM learns from the emitting steps only
    long, _ = simulate_switching_ar2(400, seed=9)[:2]
    long = long.copy()
    long[50:53] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fitted = AutoregressiveHMM(2, n_lags=n_lags, n_iter=5, random_state=0).fit(long)
    assert np.all(np.diff(fitted.monitor_.history) > -1e-8)
    assert np.all(np.isfinite(fitted.coefs_))


# -- partly observed rows ----------------------------------------------------------


def partly_observed(n_rows, seed, fraction=0.15):
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(size=(n_rows // 2, 2)), rng.normal(3.0, 0.5, size=(n_rows // 2, 2))])
    X[rng.random(X.shape) < fraction] = np.nan  # some rows end up missing throughout
    return X


@pytest.mark.parametrize("covariance_type", ["full", "diag"])
def test_partly_observed_rows_without_lags_are_gaussian_hmms(covariance_type):
    """n_lags=0, no controls: the marginal density of GaussianHMM, and with full
    covariances the same exact EM (the conditional moments of the missing entries)."""
    X = partly_observed(120, seed=2)
    means = np.array([[0.5, 0.0], [2.0, 2.5]])
    covars = np.array([[[1.0, 0.3], [0.3, 1.0]], [[2.0, -0.4], [-0.4, 1.5]]])
    if covariance_type == "diag":
        covars = np.array([[1.0, 1.0], [2.0, 2.0]])
    start, transmat = np.array([0.5, 0.5]), np.array([[0.9, 0.1], [0.2, 0.8]])
    common = dict(
        startprob_init=start,
        transmat_init=transmat,
        covars_init=covars,
        init_params="",
        n_iter=10,
        tol=-np.inf,
        covars_prior=0.0,
        covariance_type=covariance_type,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gaussian = GaussianHMM(2, means_init=means, params="stmc", **common).fit(X)
        ar = AutoregressiveHMM(2, n_lags=0, intercepts_init=means, **common).fit(X)
    history = np.array(ar.monitor_.history)
    assert np.all(np.diff(history) >= -1e-10 * np.abs(history[1:]))  # exact EM: monotone
    assert np.isclose(history[0], gaussian.monitor_.history[0], rtol=1e-12)
    if covariance_type == "full":
        assert np.allclose(history, gaussian.monitor_.history, rtol=1e-10)
        assert np.allclose(ar.intercepts_, gaussian.means_, rtol=1e-9, atol=1e-10)
        assert np.allclose(ar.covars_, gaussian._covars_, rtol=1e-9, atol=1e-10)
        assert np.isclose(ar.score(X), gaussian.score(X), rtol=1e-10)


def conditional_expectation(function, x, mean, covariance):
    """E[function(x) | the observed entries of x] under N(mean, covariance), x's one
    missing entry integrated out numerically (the brute force of the E step)."""
    (m,) = np.flatnonzero(np.isnan(x))
    scale = np.sqrt(covariance[m, m])
    bounds = mean[m] - 40 * scale, mean[m] + 40 * scale

    def row(value):
        filled = x.copy()
        filled[m] = value
        return filled

    def integrate_of(weight):
        return integrate.quad(weight, *bounds, epsabs=0, epsrel=1e-12, limit=200)[0]

    density = stats.multivariate_normal(mean, covariance).pdf
    norm = integrate_of(lambda v: density(row(v)))
    return integrate_of(lambda v: density(row(v)) * function(row(v))) / norm


@pytest.mark.parametrize("covariance_type", ["full", "diag"])
def test_mstep_with_partly_observed_rows_is_exact_em(covariance_type):
    """The statistics of a partly observed row are its expected complete-data
    statistics under each state (against numerical integration), and the M
    step maximises the expected complete-data log-likelihood Q (computed by
    numerical integration): every nearby parameter has a lower Q."""
    model = tiny_model(covariance_type, n_lags=1, n_controls=1)
    model.covars_prior = 0.0
    rng = np.random.default_rng(4)
    X, u = rng.normal(size=(14, 2)), rng.normal(size=(14, 1))
    for row, entry in [(3, 0), (6, 1), (7, 0), (11, 1)]:
        X[row, entry] = np.nan  # rows 4, 7, 8 and 12 regress on a partly observed lag: no step
    with model._given_controls(u):
        design, _ = model._prepare(X, None, None, None, reset=False)
    emitting = model._emitting(design)
    posteriors = rng.dirichlet([1.0, 1.0], size=design.shape[0])
    features = model._emission_features(design, None)
    x, z = design[:, :2], np.column_stack([design[:, 2:], np.ones(len(design))])
    old_weights, old_covars = model._weights(), model._full_covars()
    partial_rows = [t for t in range(len(design)) if emitting[t] and np.isnan(x[t]).any()]
    assert partial_rows == [2, 5, 10]  # rows 3, 6, 11 of X (row 7's lag is partly missing)
    for t in partial_rows:
        for k in range(2):
            mean = old_weights[k] @ z[t]
            expected = [
                conditional_expectation(lambda row, i=i: row[i], x[t], mean, old_covars[k])
                for i in range(2)
            ]
            second = [
                conditional_expectation(
                    lambda row, i=i, j=j: row[i] * row[j], x[t], mean, old_covars[k]
                )
                for i in range(2)
                for j in range(2)
            ]
            expected_features = np.concatenate(
                [np.outer(z[t], z[t]).ravel(), np.outer(z[t], expected).ravel(), second]
            )
            assert np.allclose(features[t, k], expected_features, rtol=1e-8, atol=1e-10)

    def q_value(weights, full_covars):
        total = 0.0
        for t in np.flatnonzero(emitting):
            for k in range(2):

                def log_density(row, k=k, t=t):
                    return stats.multivariate_normal.logpdf(row, weights[k] @ z[t], full_covars[k])

                if np.isnan(x[t]).any():
                    value = conditional_expectation(
                        log_density, x[t], old_weights[k] @ z[t], old_covars[k]
                    )
                else:
                    value = log_density(x[t])
                total += posteriors[t, k] * value
        return total

    statistics = model._emission_statistics(design, posteriors, None)
    model._emission_mstep(statistics)
    weights, covars = model._weights(), model._full_covars()
    best = q_value(weights, covars)
    for _ in range(4):
        moved_weights = weights + 0.05 * rng.normal(size=weights.shape)
        assert q_value(moved_weights, covars) < best
        factor = np.eye(2) + 0.05 * rng.normal(size=(2, 2, 2))
        moved = factor @ covars @ np.swapaxes(factor, 1, 2)
        if covariance_type == "diag":
            moved = moved * np.eye(2)
        assert q_value(weights, moved) < best


def test_em_with_partly_observed_rows_is_monotone():
    X, *_ = simulate_switching_ar2(300, seed=5)
    rng = np.random.default_rng(5)
    X = np.column_stack([X, X + rng.normal(size=X.shape)])
    X[rng.random(X.shape) < 0.1] = np.nan
    u = rng.normal(size=(300, 1))
    for model, arguments in [
        (AutoregressiveHMM(2, n_lags=2, n_iter=20, tol=-np.inf, random_state=0), {}),
        (LinearRegressionHMM(2, n_iter=20, tol=-np.inf, random_state=0), {"controls": u}),
    ]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(X, **arguments)
        history = np.array(model.monitor_.history)
        assert np.all(np.diff(history) >= -1e-9 * np.abs(history[1:]))
        assert np.all(np.isfinite(model.coefs_)) and np.all(np.isfinite(model.covars_))


@pytest.mark.parametrize("fixed", ["w", "b", "wb"])
def test_parameters_outside_params_stay_and_the_rest_is_weighted_least_squares(fixed):
    model = tiny_model("full", n_lags=1, n_controls=1)
    model.covars_prior = 0.0
    model.params = "".join(letter for letter in "stwbc" if letter not in fixed)
    rng = np.random.default_rng(10)
    X, u = rng.normal(size=(60, 2)), rng.normal(size=(60, 1))
    with model._given_controls(u):
        design, _ = model._prepare(X, None, None, None, reset=False)
    posteriors = rng.dirichlet([1.0, 1.0], size=design.shape[0])
    coefs, intercepts = model.coefs_.copy(), model.intercepts_.copy()
    model._emission_mstep(model._emission_statistics(design, posteriors, None))
    x, z = design[:, :2], design[:, 2:]
    for k in range(2):
        w = posteriors[:, k][:, None]
        if fixed == "w":  # intercepts: the weighted mean of x - W z
            target = x - z @ coefs[k].T
            new_b = (w * target).sum(axis=0) / w.sum()
            new_w = coefs[k]
        elif fixed == "b":  # coefficients: weighted LS of x - b on z, no intercept
            target = x - intercepts[k]
            new_w = np.linalg.solve(z.T @ (w * z), z.T @ (w * target)).T
            new_b = intercepts[k]
        else:
            new_w, new_b = coefs[k], intercepts[k]
        assert np.allclose(model.coefs_[k], new_w, rtol=1e-9, atol=1e-12)
        assert np.allclose(model.intercepts_[k], new_b, rtol=1e-9, atol=1e-12)
        residuals = x - z @ new_w.T - new_b
        scatter = residuals.T @ (w * residuals) / w.sum()
        assert np.allclose(model.covars_[k], scatter, rtol=1e-9, atol=1e-12)
    # and in a fit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fitted = AutoregressiveHMM(
            2,
            n_lags=1,
            params=model.params,
            init_params="stc",
            coefs_init=coefs,
            intercepts_init=intercepts,
            n_iter=4,
            random_state=0,
        ).fit(X, controls=u)
    if "w" in fixed:
        assert np.array_equal(fitted.coefs_, coefs)
    if "b" in fixed:
        assert np.array_equal(fitted.intercepts_, intercepts)


def test_n_init_keeps_the_best_initialisation():
    X, *_ = simulate_switching_ar2(600, seed=11)
    kwargs = dict(n_lags=2, n_iter=4, tol=-np.inf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        # n_init=3 draws its starts from one random state, as three fits do in turn
        shared = np.random.RandomState(0)
        singles = [AutoregressiveHMM(3, random_state=shared, **kwargs).fit(X) for _ in range(3)]
        three = AutoregressiveHMM(3, n_init=3, random_state=np.random.RandomState(0), **kwargs)
        three.fit(X)
    best = max(singles, key=lambda model: model.lower_bound_)
    assert len({round(model.lower_bound_, 6) for model in singles}) > 1  # starts differ
    assert np.isclose(three.lower_bound_, best.lower_bound_, rtol=1e-12)
    assert np.allclose(three.coefs_, best.coefs_, rtol=1e-10, atol=1e-12)


def test_threads_give_the_same_scores_states_and_stream_steps():
    X, *_ = simulate_switching_ar2(1200, seed=12)
    u = np.random.default_rng(13).normal(size=(1200, 1))
    lengths = [300] * 4
    models = []
    for n_jobs in (None, 1, 2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model = AutoregressiveHMM(3, n_lags=2, n_iter=3, random_state=0, n_jobs=n_jobs)
            model.fit(X, lengths=lengths, controls=u)
        models.append(model)
    reference = models[0]
    for model in models[1:]:
        assert np.isclose(
            model.score(X, lengths=lengths, controls=u),
            reference.score(X, lengths=lengths, controls=u),
            rtol=1e-12,
        )
        assert np.array_equal(
            model.predict(X, lengths=lengths, controls=u),
            reference.predict(X, lengths=lengths, controls=u),
        )
    for model in models:
        model.partial_fit(X, lengths=lengths, controls=u)
    for model in models[1:]:
        assert np.allclose(model.coefs_, reference.coefs_, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n_jobs", [None, 2])
def test_blas_threads_are_not_oversubscribed(n_jobs, monkeypatch):
    """With n_jobs threads over blocks, each block's BLAS runs on one thread;
    with n_jobs=None the E step runs in the calling thread (one block of BLAS
    at a time), and the process's BLAS setting is the same after the fit."""
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def blas_threads():
        return [
            info["num_threads"]
            for info in threadpoolctl.threadpool_info()
            if info["user_api"] == "blas"
        ]

    seen = []
    statistics = AutoregressiveHMM._emission_statistics

    def recording(self, X, posteriors, cache):
        seen.append((threading.get_ident(), tuple(blas_threads())))
        return statistics(self, X, posteriors, cache)

    monkeypatch.setattr(AutoregressiveHMM, "_emission_statistics", recording)
    X, *_ = simulate_switching_ar2(1200, seed=14)
    before = blas_threads()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        AutoregressiveHMM(2, n_lags=2, n_iter=2, random_state=0, n_jobs=n_jobs).fit(
            X, lengths=[300] * 4
        )
    assert blas_threads() == before
    threads = {ident for ident, _ in seen}
    if n_jobs is None:
        assert threads == {threading.get_ident()}
    else:
        assert all(all(n == 1 for n in counts) for _, counts in seen)


@pytest.mark.parametrize("covariance_type", ["full", "diag"])
def test_squarem_extrapolates_the_regression_parameters(covariance_type):
    model = tiny_model(covariance_type, n_lags=2, n_controls=1)
    rng = np.random.default_rng(15)
    X, u = rng.normal(size=(40, 2)), rng.normal(size=(40, 1))
    with model._given_controls(u):
        design, _ = model._prepare(X, None, None, None, reset=False)
    coordinates = model._acceleration_coordinates(design)
    assert {"coefs_", "intercepts_", "covars_"} <= set(coordinates.kinds)
    parameters = model._get_parameters()
    vector = coordinates.to_vector(parameters)
    assert vector.size == sum(np.size(parameters[name]) for name in coordinates.kinds)
    back = coordinates.from_vector(vector, parameters)
    for name in ("coefs_", "intercepts_", "covars_"):
        assert np.allclose(back[name], parameters[name], rtol=1e-10, atol=1e-12)
    moved = coordinates.from_vector(vector + 0.1, parameters)
    assert not np.allclose(moved["coefs_"], parameters["coefs_"])
    X_ar, *_ = simulate_switching_ar2(600, seed=16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        kwargs = dict(n_lags=2, covariance_type=covariance_type, random_state=0, tol=1e-6)
        plain = AutoregressiveHMM(3, n_iter=500, **kwargs).fit(X_ar)
        fast = AutoregressiveHMM(3, n_iter=500, acceleration="squarem", **kwargs).fit(X_ar)
    assert fast.lower_bound_ >= plain.lower_bound_ - 1e-2
    assert fast.n_iter_ <= plain.n_iter_


@settings(max_examples=20, deadline=None)
@given(n_lags=st.integers(1, 3), batch_rows=st.integers(1, 7))
def test_sequence_batches_cut_anywhere_give_one_batchs_numbers(n_lags, batch_rows):
    """skseq.streams.sequence_batches may end a batch one row into a sequence:
    its rows wait, as lags, for the next batch."""
    model = tiny_model("full", n_lags=n_lags, n_controls=0)
    rng = np.random.default_rng(batch_rows)
    lengths = [9, 5, 11]
    X = rng.normal(size=(sum(lengths), 2))
    with model._given_controls(None):
        design, offsets = model._prepare(X, None, lengths, None, reset=False)
    whole, whole_log_likelihood = model._estep(design, offsets)
    total, log_likelihood, carried = None, 0.0, None
    for X_batch, keywords in sequence_batches(X, lengths=lengths, batch_rows=batch_rows):
        carried = None if keywords["new_sequence"] else carried
        model._stream = carried
        with model._given_controls(None):
            batch, batch_offsets = model._validate_stream_batch(
                X_batch,
                None,
                keywords["lengths"],
                None,
                first_call=False,
                continues=carried is not None,
            )
            added, part, carried = model._stream_estep(batch, batch_offsets, carried)
        total = added if total is None else total + added
        log_likelihood += part
    assert np.isclose(log_likelihood, whole_log_likelihood, rtol=1e-11)
    for name in whole:
        assert np.allclose(total[name], whole[name], rtol=1e-9, atol=1e-10), name
    # and through partial_fit, learning nothing
    model.params = ""
    parts = []
    for X_batch, keywords in sequence_batches(X, lengths=lengths, batch_rows=batch_rows):
        model.partial_fit(X_batch, **keywords)
        parts.append(model.batch_log_likelihood_)
    assert np.isclose(sum(parts), whole_log_likelihood, rtol=1e-11)
    last = model.filter(X[-lengths[-1] :])[-1]
    assert np.allclose(model.filtered_state_, last, atol=1e-12)
    # with labels on some rows: log p(X, labels) adds up the same way
    known = np.where(rng.random(len(X)) < 0.3, rng.integers(0, 2, len(X)), -1)
    model.partial_fit(X, lengths=lengths, known_states=known, new_sequence=True)
    joint = model.batch_log_likelihood_
    parts, start = [], 0
    for X_batch, keywords in sequence_batches(X, lengths=lengths, batch_rows=batch_rows):
        model.partial_fit(X_batch, known_states=known[start : start + len(X_batch)], **keywords)
        parts.append(model.batch_log_likelihood_)
        start += len(X_batch)
    assert np.isclose(sum(parts), joint, rtol=1e-11)


# -- statsmodels' Markov switching models at equal parameters (issue 21) -------


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
