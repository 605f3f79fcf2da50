"""Input-driven transitions (IO-HMMs): the kernel, the M step and the estimators against
enumeration, finite differences, the plain HMMs and simulated data."""

import itertools
import warnings

import numpy as np
import pytest
import sklearn
from hmm_references import stream_statistics
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import log_softmax, logsumexp
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from skseq import (
    GMMHMM,
    AutoregressiveHMM,
    CategoricalHMM,
    GaussianHMM,
    InputDrivenAutoregressiveHMM,
    InputDrivenCategoricalHMM,
    InputDrivenGaussianHMM,
    InputDrivenGMMHMM,
    InputDrivenPoissonHMM,
    PoissonHMM,
)
from skseq.hmm._input_driven import (
    newton_transition_step,
    transition_objective,
    transition_statistics,
)
from skseq.inference import (
    hmm_forward_backward,
    hmm_varying_forward,
    hmm_varying_forward_backward,
    hmm_varying_viterbi,
    input_driven_log_transmats,
)
from skseq.inference.hmm_varying import (
    _varying_forward_backward_offsets,
    _varying_forward_offsets,
)


def quiet_fit(model, X, **kwargs):
    """``model.fit(X, **kwargs)``, a ConvergenceWarning of few iterations silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(X, **kwargs)


def enumerate_paths(log_start, log_transmats, log_frame):
    """log p(x), posteriors, pair posteriors and the best path of one sequence, by
    summing over every state path."""
    n_rows, n_states = log_frame.shape
    paths = np.array(list(itertools.product(range(n_states), repeat=n_rows)))
    log_joint = log_start[paths[:, 0]] + log_frame[0, paths[:, 0]]
    for t in range(1, n_rows):
        log_joint = (
            log_joint + log_transmats[t, paths[:, t - 1], paths[:, t]] + log_frame[t, paths[:, t]]
        )
    log_likelihood = logsumexp(log_joint)
    weights = np.exp(log_joint - log_likelihood)
    posteriors = np.zeros((n_rows, n_states))
    pairs = np.zeros((n_rows, n_states, n_states))
    for t in range(n_rows):
        np.add.at(posteriors[t], paths[:, t], weights)
        if t:
            np.add.at(pairs[t], (paths[:, t - 1], paths[:, t]), weights)
    best = int(np.argmax(log_joint))
    return log_likelihood, posteriors, pairs, paths[best], log_joint[best]


def random_chain(seed, lengths=(3, 4), n_states=3):
    rng = np.random.default_rng(seed)
    n_rows = sum(lengths)
    log_start = np.log(rng.dirichlet(np.ones(n_states)))
    log_transmats = np.log(rng.dirichlet(np.ones(n_states), size=(n_rows, n_states)))
    log_frame = rng.normal(scale=2.0, size=(n_rows, n_states))
    return log_start, log_transmats, log_frame


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kernel_equals_enumeration(seed):
    lengths = [3, 1, 4]
    log_start, log_transmats, log_frame = random_chain(seed, lengths)
    result = hmm_varying_forward_backward(log_start, log_transmats, log_frame, lengths=lengths)
    forward = hmm_varying_forward(log_start, log_transmats, log_frame, lengths=lengths)
    viterbi = hmm_varying_viterbi(log_start, log_transmats, log_frame, lengths=lengths)
    first = 0
    best_total = 0.0
    for s, length in enumerate(lengths):
        rows = slice(first, first + length)
        expected = enumerate_paths(log_start, log_transmats[rows], log_frame[rows])
        log_likelihood, posteriors, pairs, path, best = expected
        np.testing.assert_allclose(result.sequence_log_likelihood[s], log_likelihood, rtol=1e-12)
        np.testing.assert_allclose(result.posteriors[rows], posteriors, atol=1e-12)
        np.testing.assert_allclose(result.pair_posteriors[rows], pairs, atol=1e-12)
        np.testing.assert_array_equal(viterbi.states[rows], path)
        # filtered at the last row of a sequence = its smoothed posterior
        np.testing.assert_allclose(forward.filtered[rows][-1], posteriors[-1], atol=1e-12)
        best_total += best
        first += length
    np.testing.assert_allclose(viterbi.log_prob, best_total, rtol=1e-12)
    np.testing.assert_allclose(forward.log_predictive, result.log_predictive, rtol=1e-12)
    np.testing.assert_allclose(forward.log_likelihood, result.log_likelihood, rtol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_kernel_exact_where_plain_sums_underflow(seed):
    """Transitions of probability e^-900 and emissions hundreds of nats apart: the
    kernel's sums in plain arithmetic underflow and are redone in log space."""
    rng = np.random.default_rng(seed)
    log_start, log_transmats, log_frame = random_chain(seed, (6,), 3)
    tiny = rng.random(log_transmats.shape) < 0.5
    log_transmats = np.where(tiny, -900.0 - 50 * rng.random(log_transmats.shape), 0.0)
    log_transmats = log_softmax(log_transmats, axis=2)
    log_frame = 400.0 * log_frame
    result = hmm_varying_forward_backward(log_start, log_transmats, log_frame)
    log_likelihood, posteriors, pairs, path, best = enumerate_paths(
        log_start, log_transmats, log_frame
    )
    np.testing.assert_allclose(result.log_likelihood, log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(result.posteriors, posteriors, atol=1e-12)
    np.testing.assert_allclose(result.pair_posteriors, pairs, atol=1e-12)
    forward = hmm_varying_forward(log_start, log_transmats, log_frame)
    np.testing.assert_allclose(forward.filtered[-1], posteriors[-1], atol=1e-12)
    viterbi = hmm_varying_viterbi(log_start, log_transmats, log_frame)
    np.testing.assert_array_equal(viterbi.states, path)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    n_states=st.integers(1, 5),
    emission_scale=st.sampled_from([0.1, 3.0, 30.0, 300.0]),
    logit_scale=st.sampled_from([0.5, 5.0, 400.0]),
    forbidden=st.booleans(),
)
def test_scaled_path_gives_the_log_space_numbers(
    seed, n_states, emission_scale, logit_scale, forbidden
):
    """The kernel's scaled linear-space path against its log-space recursion alone
    (``scaled=False``), on sequences it takes and on those it hands back (emissions
    or transition logits hundreds of nats apart, forbidden transitions)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 40, size=3)
    n_rows = int(lengths.sum())
    log_start = log_softmax(rng.normal(size=n_states))
    logits = logit_scale * rng.normal(size=(n_rows, n_states, n_states))
    if forbidden and n_states > 1:
        logits[:, 0, 1] = -np.inf
    log_transmats = np.ascontiguousarray(log_softmax(logits, axis=2))
    log_frame = emission_scale * rng.normal(size=(n_rows, n_states))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    with np.errstate(under="ignore"):
        transmats = np.exp(log_transmats)
    results = [
        _varying_forward_backward_offsets(
            log_start, log_transmats, log_frame, offsets, transmats=transmats, scaled=scaled
        )
        for scaled in (True, False)
    ]
    scaled, exact = results
    np.testing.assert_allclose(
        scaled.sequence_log_likelihood, exact.sequence_log_likelihood, rtol=1e-12
    )
    np.testing.assert_allclose(scaled.log_predictive, exact.log_predictive, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(scaled.posteriors, exact.posteriors, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(
        scaled.pair_posteriors, exact.pair_posteriors, rtol=1e-10, atol=1e-13
    )
    forwards = [
        _varying_forward_offsets(
            log_start, log_transmats, log_frame, offsets, transmats=transmats, scaled=scaled
        )
        for scaled in (True, False)
    ]
    for fast, reference in zip(*forwards):
        np.testing.assert_allclose(fast, reference, rtol=1e-10, atol=1e-13)


def test_constant_matrices_equal_the_stationary_kernel():
    rng = np.random.default_rng(3)
    log_start, log_transmats, log_frame = random_chain(3, (50, 70), 4)
    log_a = np.log(rng.dirichlet(np.ones(4), size=4))
    stacked = np.broadcast_to(log_a, log_transmats.shape)
    varying = hmm_varying_forward_backward(log_start, stacked, log_frame, lengths=[50, 70])
    fixed = hmm_forward_backward(log_start, log_a, log_frame, lengths=[50, 70])
    np.testing.assert_allclose(varying.log_likelihood, fixed.log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(varying.posteriors, fixed.posteriors, atol=1e-10)
    np.testing.assert_allclose(
        varying.pair_posteriors.sum(axis=0), fixed.transition_counts, rtol=1e-9
    )
    np.testing.assert_allclose(varying.start_counts, fixed.start_counts, atol=1e-12)


def test_kernel_long_sequence_does_not_underflow():
    rng = np.random.default_rng(4)
    log_start, log_transmats, _ = random_chain(4, (20000,), 3)
    log_frame = rng.normal(scale=300.0, size=(20000, 3))  # emissions hundreds of nats apart
    result = hmm_varying_forward_backward(log_start, log_transmats, log_frame)
    assert np.isfinite(result.log_likelihood)
    np.testing.assert_allclose(result.posteriors.sum(axis=1), 1.0)
    np.testing.assert_allclose(result.pair_posteriors[1:].sum(axis=(1, 2)), 1.0)


def test_log_transmats_are_the_softmax_of_the_logits():
    rng = np.random.default_rng(7)
    coefs = rng.normal(scale=30.0, size=(3, 3, 2))  # logits far apart
    intercepts = rng.normal(size=(3, 3))
    intercepts[0, 2] = -np.inf  # a forbidden transition
    controls = rng.normal(size=(50, 2))
    logits = intercepts + np.einsum("tc,ijc->tij", controls, coefs)
    log_transmats = input_driven_log_transmats(coefs, intercepts, controls).log_transmats
    np.testing.assert_allclose(log_transmats, log_softmax(logits, axis=2), rtol=1e-12, atol=1e-12)
    assert np.all(log_transmats[:, 0, 2] == -np.inf)


def test_inference_validation():
    log_start, log_transmats, log_frame = random_chain(0, (4,), 2)
    with pytest.raises(ValueError, match="one transition matrix per row"):
        hmm_varying_forward_backward(log_start, log_transmats[:3], log_frame)
    bad = log_transmats.copy()
    bad[2, 1, 0] = np.nan
    with pytest.raises(ValueError, match="log_transmats contains NaN"):
        hmm_varying_forward(log_start, bad, log_frame)
    bad = log_transmats.copy()
    bad[2, 1] += 1.0
    with pytest.raises(ValueError, match=r"row 1 of log_transmats\[2\]"):
        hmm_varying_viterbi(log_start, bad, log_frame)
    with pytest.raises(ValueError, match="controls contains NaN"):
        input_driven_log_transmats(np.zeros((2, 2, 1)), np.zeros((2, 2)), [[np.nan]])
    with pytest.raises(ValueError, match="coefs must have shape"):
        input_driven_log_transmats(np.zeros((2, 2, 2)), np.zeros((2, 2)), [[1.0]])


# -- the M step --------------------------------------------------------------------


def random_step_problem(seed, n_states=3, n_controls=2, n_rows=40):
    rng = np.random.default_rng(seed)
    pairs = rng.dirichlet(np.ones(n_states**2), size=n_rows).reshape(n_rows, n_states, n_states)
    pairs[0] = 0.0  # a sequence start
    controls = rng.normal(size=(n_rows, n_controls))
    coefs = rng.normal(scale=0.5, size=(n_states, n_states, n_controls))
    intercepts = rng.normal(size=(n_states, n_states))
    return pairs, controls, coefs, intercepts


def flat(coefs, intercepts):
    return np.concatenate([coefs, intercepts[:, :, None]], axis=2)


def unflat(theta):
    return theta[:, :, :-1], theta[:, :, -1]


@pytest.mark.parametrize("seed", [0, 1])
def test_mstep_gradient_and_hessian_equal_finite_differences(seed):
    pairs, controls, coefs, intercepts = random_step_problem(seed)
    statistics = transition_statistics(
        pairs, controls, input_driven_log_transmats(coefs, intercepts, controls).log_transmats
    )
    theta = flat(coefs, intercepts)
    n_states, _, n_regressors = theta.shape

    def objective(values):
        return transition_objective(*unflat(values), pairs, controls, 0.0)

    def gradient(values):
        c, b = unflat(values)
        return transition_statistics(
            pairs, controls, input_driven_log_transmats(c, b, controls).log_transmats
        )["trans_gradient"]

    h = 1e-6
    numeric_gradient = np.zeros_like(theta)
    numeric_hessian = np.zeros((n_states, n_states * n_regressors, n_states * n_regressors))
    for index in np.ndindex(theta.shape):
        step = np.zeros_like(theta)
        step[index] = h
        numeric_gradient[index] = (objective(theta + step) - objective(theta - step)) / (2 * h)
        # minus the derivative of the (analytic) gradient of source i
        i, j, a = index
        column = (gradient(theta + step) - gradient(theta - step))[i].ravel() / (2 * h)
        numeric_hessian[i, :, j * n_regressors + a] = -column
    np.testing.assert_allclose(statistics["trans_gradient"], numeric_gradient, atol=1e-6)
    np.testing.assert_allclose(statistics["trans_hessian"], numeric_hessian, atol=1e-6)
    np.testing.assert_allclose(statistics["trans_objective"].sum(), objective(theta), rtol=1e-12)
    np.testing.assert_allclose(statistics["trans"], pairs.sum(axis=0))


@pytest.mark.parametrize("alpha", [0.0, 0.5, 10.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_newton_step_never_lowers_the_penalised_objective(seed, alpha):
    pairs, controls, coefs, intercepts = random_step_problem(seed)
    coefs = 3.0 * coefs  # far from the optimum
    for _ in range(40):
        statistics = transition_statistics(
            pairs, controls, input_driven_log_transmats(coefs, intercepts, controls).log_transmats
        )
        before = transition_objective(coefs, intercepts, pairs, controls, alpha)
        dc, db, gains = newton_transition_step(coefs, intercepts, statistics, alpha, True, True)
        coefs, intercepts = coefs + dc, intercepts + db
        after = transition_objective(coefs, intercepts, pairs, controls, alpha)
        assert after >= before + gains.sum() - 1e-9 * abs(before)
        assert np.all(gains >= 0)
    # the steps converge: the gradient of the penalised objective vanishes
    statistics = transition_statistics(
        pairs, controls, input_driven_log_transmats(coefs, intercepts, controls).log_transmats
    )
    penalised = statistics["trans_gradient"][:, :, :-1] - alpha * coefs
    assert np.abs(penalised).max() < 1e-6


# -- the estimators ------------------------------------------------------------------


def tiny_gaussian(seed=0, n_controls=2):
    rng = np.random.default_rng(seed)
    model = InputDrivenGaussianHMM(2, covariance_type="diag")
    model.startprob_ = np.array([0.3, 0.7])
    model.transmat_ = np.array([[0.8, 0.2], [0.35, 0.65]])
    model.transition_coefs_ = rng.normal(size=(2, 2, n_controls))
    model.means_ = np.array([[0.0, 1.0], [2.0, -1.0]])
    model.covars_ = np.array([[1.0, 0.5], [0.7, 2.0]])
    model.n_controls_ = n_controls
    return model


def test_estimator_equals_enumeration():
    rng = np.random.default_rng(5)
    model = tiny_gaussian()
    X, u = rng.normal(size=(5, 2)), rng.normal(size=(5, 2))
    log_transmats = log_softmax(
        model.transition_intercepts_ + np.einsum("tc,ijc->tij", u, model.transition_coefs_),
        axis=2,
    )
    log_frame = model._compute_log_likelihood(X)
    log_likelihood, posteriors, _, path, best = enumerate_paths(
        np.log(model.startprob_), log_transmats, log_frame
    )
    np.testing.assert_allclose(model.score(X, controls=u), log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(model.predict_proba(X, controls=u), posteriors, atol=1e-12)
    log_prob, states = model.decode(X, controls=u)
    np.testing.assert_array_equal(states, path)
    np.testing.assert_allclose(log_prob, best, rtol=1e-12)
    filtered = model.filter(X, controls=u)
    np.testing.assert_allclose(filtered[-1], posteriors[-1], atol=1e-12)
    # one step ahead at the next inputs
    next_u = rng.normal(size=(5, 2))
    predicted = model.predict_next_state_proba(X, controls=u, next_controls=next_u)
    next_log = log_softmax(
        model.transition_intercepts_ + np.einsum("tc,ijc->tij", next_u, model.transition_coefs_),
        axis=2,
    )
    np.testing.assert_allclose(
        predicted, np.einsum("ti,tij->tj", filtered, np.exp(next_log)), atol=1e-12
    )


def plain_and_input_driven(plain_class, driven_class, X, **kwargs):
    plain = plain_class(2, n_iter=3, random_state=0, **kwargs)
    quiet_fit(plain, X)
    driven = driven_class(2, **kwargs)
    for name in plain._all_letters.values():
        setattr(driven, name, getattr(plain, name))
    driven.n_features_in_ = plain.n_features_in_
    driven.n_controls_ = 2
    driven.transition_coefs_ = np.zeros((2, 2, 2))
    return plain, driven


RNG = np.random.default_rng(0)
CASES = [
    (GaussianHMM, InputDrivenGaussianHMM, RNG.normal(size=(60, 2)), {}),
    (CategoricalHMM, InputDrivenCategoricalHMM, RNG.integers(0, 3, size=(60, 1)), {}),
    (PoissonHMM, InputDrivenPoissonHMM, RNG.poisson(3.0, size=(60, 2)), {}),
    (GMMHMM, InputDrivenGMMHMM, RNG.normal(size=(60, 2)), {"n_mix": 2}),
]


@pytest.mark.parametrize(("plain_class", "driven_class", "X", "kwargs"), CASES)
def test_zero_weights_equal_the_plain_hmm(plain_class, driven_class, X, kwargs):
    plain, driven = plain_and_input_driven(plain_class, driven_class, X, **kwargs)
    u = np.random.default_rng(1).normal(size=(60, 2))
    lengths = [25, 35]
    np.testing.assert_allclose(
        driven.score(X, lengths=lengths, controls=u), plain.score(X, lengths=lengths), rtol=1e-12
    )
    np.testing.assert_allclose(
        driven.predict_proba(X, lengths=lengths, controls=u),
        plain.predict_proba(X, lengths=lengths),
        atol=1e-10,
    )
    np.testing.assert_array_equal(
        driven.predict(X, lengths=lengths, controls=u), plain.predict(X, lengths=lengths)
    )
    np.testing.assert_allclose(
        driven.predict_next_state_proba(X, controls=u, next_controls=u),
        plain.predict_next_state_proba(X),
        atol=1e-10,
    )
    # EM of the emissions and the start alone: the same fit
    letters = plain.params.replace("t", "")
    plain_fit = plain_class(2, n_iter=4, params=letters, random_state=0, **kwargs)
    driven_fit = driven_class(2, n_iter=4, params=letters, random_state=0, **kwargs)
    quiet_fit(plain_fit, X, lengths=lengths)
    quiet_fit(driven_fit, X, lengths=lengths, controls=u)
    for name in plain_fit._all_letters.values():
        np.testing.assert_allclose(getattr(driven_fit, name), getattr(plain_fit, name), atol=1e-9)
    np.testing.assert_allclose(driven_fit.monitor_.history, plain_fit.monitor_.history, rtol=1e-10)


def test_zero_weights_equal_the_autoregressive_hmm():
    rng = np.random.default_rng(2)
    x, u = rng.normal(size=(80, 2)), rng.normal(size=(80, 1))
    plain = AutoregressiveHMM(2, n_lags=1, n_iter=3, random_state=0)
    quiet_fit(plain, x, controls=u)
    driven = InputDrivenAutoregressiveHMM(2, n_lags=1)
    for name in plain._all_letters.values():
        setattr(driven, name, getattr(plain, name))
    driven.n_features_in_, driven.n_controls_ = 2, 1
    driven.transition_coefs_ = np.zeros((2, 2, 1))
    np.testing.assert_allclose(driven.score(x, controls=u), plain.score(x, controls=u))
    np.testing.assert_allclose(
        driven.predict_proba(x, controls=u), plain.predict_proba(x, controls=u), atol=1e-10
    )


def simulate_io_hmm(seed, n_rows=3000, strength=4.0):
    """Two Gaussian regimes (means -3, 3): the input u_t pushes the chain to regime 1
    (logit of regime 1 = strength * u_t, whatever the previous regime)."""
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(n_rows, 1))
    states = np.zeros(n_rows, dtype=int)
    for t in range(1, n_rows):
        states[t] = rng.random() < 1.0 / (1.0 + np.exp(-strength * u[t, 0]))
    X = np.where(states == 1, 3.0, -3.0)[:, None] + rng.normal(size=(n_rows, 1))
    return X, u, states


def test_em_is_monotone():
    X, u, _ = simulate_io_hmm(0, n_rows=1500)
    model = InputDrivenGaussianHMM(2, n_iter=25, tol=-np.inf, transition_alpha=0.0, random_state=0)
    quiet_fit(model, X, lengths=[700, 800], controls=u)
    history = np.array(model.monitor_.history)
    assert len(history) == 25
    assert np.all(np.diff(history) >= -1e-9 * np.abs(history[1:]))


def test_recovers_input_driven_switching():
    X, u, states = simulate_io_hmm(1)
    model = InputDrivenGaussianHMM(2, n_iter=100, transition_alpha=0.1, random_state=0)
    quiet_fit(model, X, controls=u)
    high = int(np.argmax(model.means_[:, 0]))
    order = [1 - high, high]
    np.testing.assert_allclose(model.means_[order, 0], [-3.0, 3.0], atol=0.1)
    # the logit of "high" against "low" is 4 u from either state, the intercepts 0
    coefs = model.transition_coefs_[..., 0]
    slopes = coefs[:, high] - coefs[:, 1 - high]
    np.testing.assert_allclose(slopes, 4.0, atol=0.6)
    intercepts = model.transition_intercepts_
    np.testing.assert_allclose(intercepts[:, high] - intercepts[:, 1 - high], 0.0, atol=0.3)
    accuracy = np.mean((model.predict(X, controls=u) == high) == (states == 1))
    assert accuracy > 0.97
    # a plain HMM cannot see the inputs: lower likelihood
    plain = GaussianHMM(2, n_iter=100, random_state=0).fit(X)
    assert model.score(X, controls=u) > plain.score(X) + 100


@pytest.mark.parametrize("new_sequence", [True, False])
def test_partial_fit_learns_the_weights(new_sequence):
    """Batches of whole sequences, or one sequence streamed in batches (each
    continuing the last): the stream recovers the input-driven switching."""
    X, u, states = simulate_io_hmm(2, n_rows=4000)
    model = InputDrivenGaussianHMM(2, random_state=0, learning_decay=0.6)
    for index, start in enumerate(range(0, 4000, 250)):
        rows = slice(start, start + 250)
        model.partial_fit(X[rows], controls=u[rows], new_sequence=new_sequence or index == 0)
    high = int(np.argmax(model.means_[:, 0]))
    np.testing.assert_allclose(model.means_[[1 - high, high], 0], [-3.0, 3.0], atol=0.2)
    slopes = model.transition_coefs_[:, high, 0] - model.transition_coefs_[:, 1 - high, 0]
    np.testing.assert_allclose(slopes, 4.0, atol=1.5)
    assert model.n_batch_iter_ == 16
    accuracy = np.mean((model.predict(X, controls=u) == high) == (states == 1))
    assert accuracy > 0.97


def test_sample_follows_the_inputs():
    model = tiny_gaussian(n_controls=1)
    model.transition_coefs_ = np.array([[[-8.0], [8.0]], [[-8.0], [8.0]]])
    model.transition_intercepts_ = np.zeros((2, 2))
    u = np.where(np.arange(400) % 100 < 50, 1.0, -1.0)[:, None]
    X, states = model.sample(400, random_state=0, controls=u)
    assert X.shape == (400, 2)
    assert np.mean(states[1:] == (u[1:, 0] > 0)) > 0.99
    with pytest.raises(ValueError, match="controls"):
        model.sample(10, random_state=0)


def test_information_criteria_count_the_transition_weights():
    X, u, _ = simulate_io_hmm(3, n_rows=300)
    model = InputDrivenGaussianHMM(2, n_iter=3, random_state=0)
    quiet_fit(model, X, controls=u)
    # s: 1, t: 2, u: 2 * 1, means 2, covars 2
    assert model._n_parameters() == 9
    np.testing.assert_allclose(
        model.bic(X, controls=u), -2 * model.score(X, controls=u) + 9 * np.log(300)
    )


def test_errors():
    X, u, _ = simulate_io_hmm(4, n_rows=100)
    model = InputDrivenGaussianHMM(2, n_iter=2, random_state=0)
    quiet_fit(model, X, controls=u)
    with pytest.raises(ValueError, match="controls"):
        model.predict(X)
    with pytest.raises(ValueError, match="controls"):
        model.score(X, controls=u[:50])
    with pytest.raises(ValueError, match="controls"):
        model.score(X, controls=np.column_stack([u, u]))
    bad = u.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="NaN|finite"):
        model.predict_proba(X, controls=bad)
    with pytest.raises(ValueError, match="NaN|finite"):
        InputDrivenGaussianHMM(2).fit(X, controls=bad)
    with pytest.raises(ValueError, match="controls"):
        model.predict_next_state_proba(X, controls=u)  # no next_controls
    with pytest.raises(ValueError, match="transition_alpha"):
        InputDrivenGaussianHMM(2, transition_alpha=-1.0).fit(X, controls=u)
    model.transition_coefs_ = np.zeros((2, 2, 3))
    with pytest.raises(ValueError, match="transition_coefs_ must have shape"):
        model.score(X, controls=u)
    plain = InputDrivenGaussianHMM(2, n_iter=2, random_state=0)
    quiet_fit(plain, X)
    with pytest.raises(ValueError, match="without controls"):
        plain.score(X, controls=u)


def test_n_jobs_and_threads_give_the_same_fit():
    X, u, _ = simulate_io_hmm(5, n_rows=900)
    lengths = [300, 300, 300]
    fits = []
    for n_jobs in (None, 2):
        model = InputDrivenGaussianHMM(2, n_iter=5, n_jobs=n_jobs, random_state=0)
        fits.append(quiet_fit(model, X, lengths=lengths, controls=u))
    np.testing.assert_allclose(fits[0].transition_coefs_, fits[1].transition_coefs_, rtol=1e-9)
    np.testing.assert_allclose(fits[0].means_, fits[1].means_, rtol=1e-9)


def test_known_states_with_controls():
    X, u, states = simulate_io_hmm(6, n_rows=400)
    known = np.full(400, -1)
    known[::10] = states[::10]
    model = InputDrivenGaussianHMM(2, n_iter=5, random_state=0)
    quiet_fit(model, X, controls=u, known_states=known)
    assert model.means_[1, 0] > model.means_[0, 0]  # the labels name the states


# -- the online filter ---------------------------------------------------------------


def streaming_model(cls=InputDrivenGaussianHMM, n_rows=60, **kwargs):
    """A fitted model whose transitions depend strongly on the inputs, with its data."""
    X, u, _ = simulate_io_hmm(7, n_rows=n_rows)
    model = quiet_fit(cls(2, n_iter=2, random_state=0, **kwargs), X, controls=u)
    model.transition_coefs_ = np.array([[[0.0], [3.0]], [[-2.0], [1.0]]])
    return model, X, u


def filter_in_chunks(model, X, u, cuts):
    """``filter_stream`` over ``X`` cut at ``cuts`` (a new sequence at ``X[0]``):
    the filtered rows of all chunks and the sum of their log-likelihoods."""
    bounds = [0, *sorted(c for c in cuts if 0 < c < X.shape[0]), X.shape[0]]
    filtered, log_likelihood = [], 0.0
    for start, stop in zip(bounds[:-1], bounds[1:]):
        new_sequence = start == 0
        filtered.append(
            model.filter_stream(X[start:stop], new_sequence=new_sequence, controls=u[start:stop])
        )
        log_likelihood += model.stream_log_likelihood_
    return np.concatenate(filtered), log_likelihood


@settings(max_examples=10, deadline=None)
@given(cuts=st.lists(st.integers(1, 59), max_size=6, unique=True))
def test_filter_stream_in_chunks_is_filter_of_the_whole_sequence(cuts):
    model, X, u = streaming_model()
    filtered, log_likelihood = filter_in_chunks(model, X, u, cuts)
    whole = model.filter(X, controls=u)
    np.testing.assert_allclose(filtered, whole, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(model.filtered_state_, whole[-1], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(log_likelihood, model.score(X, controls=u), rtol=1e-10)


def test_the_next_rows_transition_uses_its_own_controls():
    """The continued row's prediction is filtered_state_ times that row's matrix."""
    model, X, u = streaming_model()
    model.reset_filter(X[:10], controls=u[:10])
    state = model.filtered_state_.copy()
    filtered = model.filter_update(X[10], controls=u[10])
    transmat = np.exp(
        input_driven_log_transmats(
            model.transition_coefs_, model.transition_intercepts_, u[10:11]
        ).log_transmats[0]
    )
    joint = (state @ transmat) * np.exp(model._compute_log_likelihood(X[10:11])[0])
    np.testing.assert_allclose(filtered, joint / joint.sum(), rtol=1e-10)
    np.testing.assert_allclose(model.stream_log_likelihood_, np.log(joint.sum()), rtol=1e-10)
    # through transmat_ (the matrix at zero controls) it would differ: the inputs matter
    stationary = (state @ model.transmat_) * np.exp(model._compute_log_likelihood(X[10:11])[0])
    assert not np.allclose(filtered, stationary / stationary.sum(), rtol=1e-3)


def test_filter_update_row_by_row_is_filter():
    model, X, u = streaming_model()
    model.reset_filter()
    rows = [model.filter_update(X[t], controls=u[t]) for t in range(X.shape[0])]
    np.testing.assert_allclose(np.array(rows), model.filter(X, controls=u), rtol=1e-9, atol=1e-12)


def test_reset_filter_with_a_history_and_new_sequence():
    model, X, u = streaming_model()
    whole = model.filter(X, controls=u)
    model.reset_filter(X[:25], controls=u[:25])
    np.testing.assert_allclose(model.filtered_state_, whole[24], rtol=1e-9)
    np.testing.assert_allclose(model.filter_stream(X[25:], controls=u[25:]), whole[25:], rtol=1e-9)
    restarted = model.filter_stream(X[25:], new_sequence=True, controls=u[25:])
    np.testing.assert_allclose(restarted, model.filter(X[25:], controls=u[25:]), rtol=1e-9)
    model.reset_filter()
    assert not hasattr(model, "filtered_state_") and not hasattr(model, "stream_log_likelihood_")


@pytest.mark.parametrize(
    "cls", [InputDrivenCategoricalHMM, InputDrivenPoissonHMM, InputDrivenGMMHMM]
)
def test_filter_stream_of_every_emission_model(cls):
    rng = np.random.default_rng(3)
    X = rng.poisson(2.0, size=(40, 1)) if cls is not InputDrivenGMMHMM else rng.normal(size=(40, 1))
    if cls is InputDrivenCategoricalHMM:
        X = np.minimum(X, 2)
    u = rng.normal(size=(40, 1))
    kwargs = {"n_mix": 2} if cls is InputDrivenGMMHMM else {}
    model = quiet_fit(cls(2, n_iter=2, random_state=0, **kwargs), X, controls=u)
    model.transition_coefs_ = np.array([[[0.0], [2.0]], [[-1.0], [0.5]]])
    filtered, log_likelihood = filter_in_chunks(model, X, u, [17])
    np.testing.assert_allclose(filtered, model.filter(X, controls=u), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(log_likelihood, model.score(X, controls=u), rtol=1e-10)


def test_autoregressive_filter_stream_carries_lags_and_state():
    rng = np.random.default_rng(4)
    u = rng.normal(size=(50, 1))
    x = np.cumsum(rng.normal(size=(50, 1)), axis=0)
    model = quiet_fit(
        InputDrivenAutoregressiveHMM(2, n_lags=2, n_iter=2, random_state=0), x, controls=u
    )
    model.transition_coefs_ = np.array([[[0.0], [2.0]], [[-1.0], [0.5]]])
    filtered, log_likelihood = filter_in_chunks(model, x, u, [20, 33])
    assert filtered.shape == (48, 2)  # the first n_lags rows only condition
    np.testing.assert_allclose(filtered, model.filter(x, controls=u), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(log_likelihood, model.score(x, controls=u), rtol=1e-10)


def test_filter_stream_of_a_model_fitted_without_controls():
    X, _, _ = simulate_io_hmm(8, n_rows=40)
    model = quiet_fit(InputDrivenGaussianHMM(2, n_iter=2, random_state=0), X)
    model.reset_filter(X[:13])
    np.testing.assert_allclose(model.filter_stream(X[13:]), model.filter(X)[13:], rtol=1e-9)
    with pytest.raises(ValueError, match="without controls"):
        model.filter_update(X[0], controls=[1.0])


def test_filter_stream_errors():
    model, X, u = streaming_model()
    model.reset_filter()
    calls = [
        lambda: model.filter_stream(X),  # controls missing
        lambda: model.filter_stream(X, controls=u[:10]),  # too few rows
        lambda: model.filter_stream(X, controls=np.column_stack([u, u])),  # too many columns
        lambda: model.filter_update(X[0]),
        lambda: model.filter_update(X[0], controls=[1.0, 2.0]),
        lambda: model.reset_filter(X[:5]),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="controls"):
            call()
    assert not hasattr(model, "filtered_state_")  # nothing advanced by the failed calls
    model.filter_stream(X[:5], controls=u[:5])
    model.filtered_state_ = np.ones(3) / 3
    with pytest.raises(ValueError, match="filtered_state_ does not fit the model"):
        model.filter_stream(X[5:], controls=u[5:])
    controls = u.copy()
    model.reset_filter(X[:5], controls=controls[:5])
    np.testing.assert_array_equal(controls, u)  # the inputs are not changed


def test_partial_fit_publishes_its_stream_state():
    """partial_fit leaves filtered_state_ of its last row (before its step) and
    drops the online filter's stream_log_likelihood_, as the other HMMs do."""
    model, X, u = streaming_model()
    model.filter_stream(X[:10], new_sequence=True, controls=u[:10])
    model.params = ""
    model.partial_fit(X[10:], controls=u[10:], new_sequence=True)
    np.testing.assert_allclose(
        model.filtered_state_, model.filter(X[10:], controls=u[10:])[-1], rtol=1e-10
    )
    assert not hasattr(model, "stream_log_likelihood_")
    # the online filter continues from it
    np.testing.assert_allclose(
        model.filter_update(X[0], controls=u[0]),
        model.filter(np.vstack([X[10:], X[:1]]), controls=np.vstack([u[10:], u[:1]]))[-1],
        rtol=1e-9,
    )


# -- partial_fit continuing a sequence across batches -------------------------------


def stream_model(kind, seed):
    """A fitted three-state model of ``kind`` with strong random transition weights, and
    its data: 30 rows with a missing row (and, Gaussian, a partly observed one)."""
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(30, 2))
    if kind == "categorical":
        X = rng.integers(0, 3, size=(30, 1)).astype(np.float64)
        model = InputDrivenCategoricalHMM(3, n_iter=2, random_state=0)
    else:
        X = rng.normal(size=(30, 2))
        X[9, 0] = np.nan
        cls = InputDrivenAutoregressiveHMM if kind == "autoregressive" else InputDrivenGaussianHMM
        kwargs = {"n_lags": 2} if kind == "autoregressive" else {}
        model = cls(3, n_iter=2, random_state=0, **kwargs)
    X[17] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # few rows for three states
        quiet_fit(model, X, controls=u)
    model.transition_coefs_ = 2.0 * rng.normal(size=model.transition_coefs_.shape)
    return model, X, u


@settings(max_examples=20, deadline=None)
@given(
    kind=st.sampled_from(["gaussian", "categorical", "autoregressive"]),
    cuts=st.lists(st.integers(1, 29), max_size=6, unique=True),
    seed=st.integers(0, 3),
)
def test_a_sequence_cut_into_batches_gives_what_one_batch_gives(kind, cuts, seed):
    model, X, u = stream_model(kind, seed)
    # (an autoregressive batch may hold only conditioning rows: they wait as lags)
    cuts = [0] + sorted(set(cuts) - {30}) + [30]
    with model._given_controls(u):
        design, offsets = model._prepare(X, None, None, None, reset=False)
        design = model._stack_known_states(design, None)
    whole, whole_log_likelihood = model._estep(design, offsets)
    chunked, log_likelihood, carried = stream_statistics(model, X, u, cuts)
    np.testing.assert_allclose(log_likelihood, whole_log_likelihood, rtol=1e-11)
    np.testing.assert_allclose(whole_log_likelihood, model.score(X, controls=u), rtol=1e-12)
    assert chunked.keys() == whole.keys()
    for name in whole:
        np.testing.assert_allclose(chunked[name], whole[name], rtol=1e-9, atol=1e-10)
    filtered = model.filter(X, controls=u)
    message = carried.message if kind == "autoregressive" else carried
    np.testing.assert_allclose(message.filtered, filtered[-1], rtol=1e-9, atol=1e-12)
    # The public stream: partial_fit, nothing learned.
    model.params = ""
    parts = []
    for index, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
        model.partial_fit(X[a:b], controls=u[a:b], new_sequence=index == 0)
        parts.append(model.batch_log_likelihood_)
    np.testing.assert_allclose(sum(parts), whole_log_likelihood, rtol=1e-11)
    np.testing.assert_allclose(model.filtered_state_, filtered[-1], rtol=1e-9, atol=1e-12)


def test_stream_statistics_equal_enumeration_given_the_last_state():
    """The message of a chunk holds, for each last state k, the expected
    statistics given z_T = k: against enumeration over the state paths."""
    model = tiny_gaussian(seed=5)
    rng = np.random.default_rng(5)
    X, u = rng.normal(size=(5, 2)), rng.normal(size=(5, 2))
    _, _, carried = stream_statistics(model, X, u, [0, 2, 5])
    log_transmats = input_driven_log_transmats(
        model.transition_coefs_, model.transition_intercepts_, u
    ).log_transmats
    log_frame = model._compute_log_likelihood(X)
    paths = np.array(list(itertools.product(range(2), repeat=5)))
    log_joint = np.log(model.startprob_)[paths[:, 0]] + log_frame[0, paths[:, 0]]
    for t in range(1, 5):
        log_joint += log_transmats[t, paths[:, t - 1], paths[:, t]] + log_frame[t, paths[:, t]]
    for k in range(2):
        weights = np.exp(log_joint - logsumexp(log_joint)) * (paths[:, -1] == k)
        weights /= weights.sum()
        counts = np.zeros((2, 2))
        post = np.zeros(2)
        for path, weight in zip(paths, weights):
            np.add.at(counts, (path[:-1], path[1:]), weight)
            np.add.at(post, path, weight)
        np.testing.assert_allclose(carried.statistics["trans"][k], counts, rtol=1e-10)
        np.testing.assert_allclose(carried.statistics["post"][k], post, rtol=1e-10)


# -- one long sequence: the checkpointed E step ---------------------------------------


@settings(max_examples=15, deadline=None)
@given(
    kind=st.sampled_from(["gaussian", "categorical", "autoregressive"]),
    chunk_rows=st.integers(1, 31),
    seed=st.integers(0, 3),
)
def test_checkpointed_estep_gives_the_whole_sequence_statistics(kind, chunk_rows, seed):
    """Chunks of any size (a missing row, a partly observed one), labelled rows too."""
    model, X, u = stream_model(kind, seed)
    with model._given_controls(u):
        design, offsets = model._prepare(X, None, None, None, reset=False)
        design = model._stack_known_states(design, None)
    whole, whole_log_likelihood = model._estep(design, offsets)
    controls = model._row_controls(design)
    rows = model._split_known_states(design)[0]
    statistics, log_likelihood = model._checkpointed_estep(
        rows, model._estep_emissions(), {}, chunk_rows=chunk_rows, controls=controls
    )
    np.testing.assert_allclose(log_likelihood, whole_log_likelihood, rtol=1e-12)
    assert statistics.keys() == whole.keys()
    for name in whole:
        np.testing.assert_allclose(statistics[name], whole[name], rtol=1e-9, atol=1e-10)
    known = np.full(rows.shape[0], -1)
    known[[2, 11]] = [0, 2]
    clamped = model._checkpointed_estep(
        rows, model._estep_emissions(), {}, chunk_rows, known, controls
    )
    with model._given_controls(u):
        design, offsets = model._prepare(X, None, None, None, reset=False)
        labelled = model._stack_known_states(design, known)  # one label per step
    reference = model._estep(labelled, offsets)
    model.__dict__.pop("_known_states_stacked", None)
    np.testing.assert_allclose(clamped[1], reference[1], rtol=1e-12)
    for name in whole:
        np.testing.assert_allclose(clamped[0][name], reference[0][name], rtol=1e-9, atol=1e-10)


def test_a_sequence_beyond_the_working_memory_is_checkpointed():
    """fit under a small working_memory takes the checkpointed E step and fits what
    the whole-sequence E step fits."""
    X, u, _ = simulate_io_hmm(5, n_rows=30_000)
    model = InputDrivenGaussianHMM(2, n_iter=3, tol=-np.inf, random_state=0)
    quiet_fit(model, X, controls=u)
    with sklearn.config_context(working_memory=1):  # 1 MiB
        assert model._checkpoint_threshold(1) < X.shape[0]
        checkpointed = quiet_fit(clone(model), X, controls=u)
    np.testing.assert_allclose(checkpointed.monitor_.history, model.monitor_.history, rtol=1e-12)
    np.testing.assert_allclose(
        checkpointed.transition_coefs_, model.transition_coefs_, rtol=1e-8, atol=1e-10
    )
    np.testing.assert_allclose(checkpointed.means_, model.means_, rtol=1e-10)


@settings(max_examples=15, deadline=None)
@given(kind=st.sampled_from(["gaussian", "categorical"]), chunk_rows=st.integers(1, 31))
def test_chunked_scoring_gives_the_whole_sequence_forward(kind, chunk_rows):
    model, X, u = stream_model(kind, seed=1)
    with model._given_controls(u):
        design, offsets = model._prepare(X, None, None, None, reset=False)
        design = model._stack_known_states(design, None)
    rows = model._split_known_states(design)[0]
    whole = model._forward(design, offsets)
    emissions = model._emissions()
    log_predictive = np.empty(rows.shape[0])

    def on_chunk(start, stop, values):
        log_predictive[start:stop] = values

    log_likelihood = model._chunked_chain_forward(
        model._row_controls(design),
        rows.shape[0],
        chunk_rows,
        lambda start, stop: emissions(rows[start:stop])[:2],
        on_chunk,
        {},
    )
    np.testing.assert_allclose(log_likelihood, whole.log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(log_predictive, whole.log_predictive, rtol=1e-10, atol=1e-12)


def test_score_of_a_long_sequence_is_chunked_and_exact():
    """A sequence of more than 2^18 / K rows is scored in chunks (memory of a chunk)."""
    X, u, _ = simulate_io_hmm(6, n_rows=140_000)
    model = quiet_fit(
        InputDrivenGaussianHMM(2, n_iter=2, random_state=0), X[:2000], controls=u[:2000]
    )
    model.transition_coefs_ = np.array([[[0.0], [3.0]], [[-2.0], [1.0]]])
    calls = []
    chunked = model._chunked_chain_forward

    def counting(*args, **kwargs):
        calls.append(args[1])
        return chunked(*args, **kwargs)

    model._chunked_chain_forward = counting
    score = model.score(X, controls=u)
    del model._chunked_chain_forward
    assert calls == [140_000]
    whole = model.score_samples(X, controls=u)[0]  # forward-backward over the whole sequence
    np.testing.assert_allclose(score, whole, rtol=1e-12)
