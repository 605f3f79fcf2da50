"""Semi-Markov (explicit-duration) HMMs: the kernel, the inference functions and
the estimators against definitions (enumeration over segmentations, the HMM
that geometric durations imply, recovery from simulated data)."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.special import logsumexp
from sklearn.exceptions import ConvergenceWarning

from skseq import CategoricalHMM, GaussianHMM, SemiMarkovCategoricalHMM, SemiMarkovGaussianHMM
from skseq.hmm._semi_markov import duration_pmf
from skseq.inference import (
    hmm_forward,
    hmm_forward_backward,
    hsmm_filter,
    hsmm_forward,
    hsmm_forward_backward,
    hsmm_viterbi,
    sample_hsmm_segments,
)
from skseq.inference.hsmm import complete_duration_counts

# Short fits in the tests of the API need not converge.
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def random_model(n_states=3, max_duration=4, n_rows=6, seed=0):
    """Log-probabilities of a random semi-Markov HMM (zero diagonal) and random log-emissions."""
    rng = np.random.default_rng(seed)
    log_start = np.log(rng.dirichlet(np.ones(n_states)))
    log_trans = np.full((n_states, n_states), -np.inf)
    for j in range(n_states):
        others = [k for k in range(n_states) if k != j]
        log_trans[j, others] = np.log(rng.dirichlet(np.ones(n_states - 1)))
    log_duration = np.log(rng.dirichlet(np.ones(max_duration), size=n_states))
    log_frame = rng.normal(scale=1.5, size=(n_rows, n_states))
    return log_start, log_trans, log_duration, log_frame


def segmentations(n_rows, n_states, max_duration):
    """Every segmentation of n_rows rows: lists of (state, start, duration seen)."""
    if n_rows == 0:
        yield []
        return

    def extend(start, previous):
        if start == n_rows:
            yield []
            return
        for state in range(n_states):
            for duration in range(1, min(max_duration, n_rows - start) + 1):
                for rest in extend(start + duration, state):
                    yield [(state, start, duration), *rest]

    yield from extend(0, None)


def enumerate_model(log_start, log_trans, log_duration, log_frame):
    """log p(x, segmentation) of every segmentation (the last visit censored)."""
    n_rows, n_states = log_frame.shape
    max_duration = log_duration.shape[1]
    with np.errstate(divide="ignore"):
        log_survival = np.log(np.cumsum(np.exp(log_duration)[:, ::-1], axis=1)[:, ::-1])
    found = []
    for visits in segmentations(n_rows, n_states, max_duration):
        value, previous = 0.0, None
        for state, start, duration in visits:
            value += log_start[state] if previous is None else log_trans[previous, state]
            last = start + duration == n_rows
            table = log_survival if last else log_duration
            value += table[state, duration - 1] + log_frame[start : start + duration, state].sum()
            previous = state
        found.append((value, visits))
    return found


def consistent(visits, known_states):
    """Whether every labelled row (known_states >= 0) lies in a visit to its state."""
    states = np.concatenate([[state] * duration for state, _, duration in visits])
    labelled = known_states >= 0
    return bool(np.all(states[labelled] == known_states[labelled]))


def brute_force(log_start, log_trans, log_duration, log_frame, known_states=None):
    """Log-likelihood, posteriors, counts and the best segmentation by enumeration
    (over the segmentations consistent with ``known_states`` when given)."""
    n_rows, n_states = log_frame.shape
    max_duration = log_duration.shape[1]
    found = enumerate_model(log_start, log_trans, log_duration, log_frame)
    if known_states is not None:
        found = [(value, visits) for value, visits in found if consistent(visits, known_states)]
    values = np.array([value for value, _ in found])
    log_likelihood = logsumexp(values)
    weights = np.exp(values - log_likelihood)
    posteriors = np.zeros((n_rows, n_states))
    start = np.zeros(n_states)
    trans = np.zeros((n_states, n_states))
    complete = np.zeros((n_states, max_duration))
    censored = np.zeros((n_states, max_duration))
    for weight, (_, visits) in zip(weights, found):
        start[visits[0][0]] += weight
        for (a, _, _), (b, _, _) in zip(visits[:-1], visits[1:]):
            trans[a, b] += weight
        for state, first, duration in visits:
            posteriors[first : first + duration, state] += weight
            counts = censored if first + duration == n_rows else complete
            counts[state, duration - 1] += weight
    best = int(np.argmax(values))
    best_states = np.concatenate([[s] * d for s, _, d in found[best][1]])
    return {
        "log_likelihood": log_likelihood,
        "posteriors": posteriors,
        "start": start,
        "trans": trans,
        "complete": complete,
        "censored": censored,
        "best": values[best],
        "best_states": best_states,
    }


CASES = [
    dict(n_states=2, max_duration=3, n_rows=5, seed=0),
    dict(n_states=3, max_duration=4, n_rows=6, seed=1),
    dict(n_states=3, max_duration=8, n_rows=5, seed=2),  # max_duration > n_rows
    dict(n_states=2, max_duration=1, n_rows=4, seed=3),  # every visit one row
]


@pytest.mark.parametrize("case", CASES)
def test_forward_backward_equals_enumeration(case):
    model = random_model(**case)
    expected = brute_force(*model)
    result = hsmm_forward_backward(*model)
    assert np.isclose(result.log_likelihood, expected["log_likelihood"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.posteriors, expected["posteriors"], atol=1e-12)
    np.testing.assert_allclose(result.start_counts, expected["start"], atol=1e-12)
    np.testing.assert_allclose(result.transition_counts, expected["trans"], atol=1e-12)
    np.testing.assert_allclose(result.duration_counts, expected["complete"], atol=1e-12)
    np.testing.assert_allclose(result.censored_counts, expected["censored"], atol=1e-12)


@pytest.mark.parametrize("case", CASES)
def test_viterbi_and_forward_equal_enumeration(case):
    model = random_model(**case)
    expected = brute_force(*model)
    log_prob, states = hsmm_viterbi(*model)
    assert np.isclose(log_prob, expected["best"], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(states, expected["best_states"])
    forward = hsmm_forward(*model)
    assert np.isclose(forward.log_likelihood, expected["log_likelihood"], rtol=0, atol=1e-12)
    assert np.isclose(forward.log_predictive.sum(), forward.log_likelihood, rtol=0, atol=1e-12)


def test_filter_equals_enumeration_of_prefixes():
    """p(z_t | x_<=t) and p(z_{t+1} | x_<=t) from the enumeration of the prefixes
    x_0..x_t (the last visit censored) and x_0..x_{t+1} with a flat last row."""
    log_start, log_trans, log_duration, log_frame = random_model(3, 3, 5, seed=4)
    result = hsmm_filter(log_start, log_trans, log_duration, log_frame)
    for t in range(len(log_frame)):
        prefix = brute_force(log_start, log_trans, log_duration, log_frame[: t + 1])
        np.testing.assert_allclose(result.filtered[t], prefix["posteriors"][t], atol=1e-12)
        flat = np.vstack([log_frame[: t + 1], np.zeros((1, 3))])
        ahead = brute_force(log_start, log_trans, log_duration, flat)
        np.testing.assert_allclose(result.predicted[t], ahead["posteriors"][t + 1], atol=1e-12)


def test_several_sequences_are_independent():
    model = random_model(3, 4, 9, seed=5)
    lengths = [4, 5]
    result = hsmm_forward_backward(*model, lengths=lengths)
    first = hsmm_forward_backward(*model[:3], model[3][:4])
    second = hsmm_forward_backward(*model[:3], model[3][4:])
    np.testing.assert_allclose(
        result.sequence_log_likelihood, [first.log_likelihood, second.log_likelihood]
    )
    np.testing.assert_allclose(
        result.posteriors, np.vstack([first.posteriors, second.posteriors]), atol=1e-14
    )
    np.testing.assert_allclose(
        result.duration_counts, first.duration_counts + second.duration_counts, atol=1e-14
    )
    states = hsmm_viterbi(*model, lengths=lengths).states
    np.testing.assert_array_equal(
        states,
        np.concatenate([hsmm_viterbi(*model[:3], model[3][:4]).states,
                        hsmm_viterbi(*model[:3], model[3][4:]).states]),
    )  # fmt: skip


def test_complete_duration_counts_are_the_expected_complete_data_counts():
    """A censored visit seen for d rows lasts d' >= d rows with p(d') / P(D >= d)."""
    log_start, log_trans, log_duration, log_frame = random_model(2, 4, 5, seed=6)
    durationprob = np.exp(log_duration)
    found = enumerate_model(log_start, log_trans, log_duration, log_frame)
    values = np.array([value for value, _ in found])
    weights = np.exp(values - logsumexp(values))
    expected = np.zeros_like(durationprob)
    for weight, (_, visits) in zip(weights, found):
        for state, first, duration in visits:
            if first + duration < len(log_frame):
                expected[state, duration - 1] += weight
            else:
                tail = durationprob[state, duration - 1 :]
                expected[state, duration - 1 :] += weight * tail / tail.sum()
    result = hsmm_forward_backward(log_start, log_trans, log_duration, log_frame)
    completed = complete_duration_counts(
        result.duration_counts, result.censored_counts, durationprob
    )
    np.testing.assert_allclose(completed, expected, atol=1e-12)


def geometric(stay, max_duration):
    """p(d) = (1 - a) a^(d - 1), d = 1 .. max_duration, the tail folded into the last."""
    d = np.arange(1, max_duration + 1)
    pmf = (1 - stay[:, None]) * stay[:, None] ** (d - 1)
    pmf[:, -1] += 1 - pmf.sum(axis=1)
    return pmf


def implied_hmm(stay, transmat):
    """The HMM of geometric durations: a on the diagonal, (1 - a) transmat off it."""
    hmm = (1 - stay[:, None]) * transmat
    np.fill_diagonal(hmm, stay)
    return hmm


def test_geometric_durations_equal_the_hmm_they_imply():
    rng = np.random.default_rng(7)
    stay = np.array([0.7, 0.5, 0.85])
    transmat = np.array([[0.0, 0.4, 0.6], [0.3, 0.0, 0.7], [0.5, 0.5, 0.0]])
    startprob = np.array([0.2, 0.5, 0.3])
    log_frame = rng.normal(scale=2.0, size=(40, 3))
    lengths = [25, 15]
    # Rows beyond 40 of one visit cannot be seen: max_duration = 40 is exact.
    with np.errstate(divide="ignore"):
        semi = (np.log(startprob), np.log(transmat), np.log(geometric(stay, 40)))
    hmm = (np.log(startprob), np.log(implied_hmm(stay, transmat)))
    semi_result = hsmm_forward_backward(*semi, log_frame, lengths=lengths)
    hmm_result = hmm_forward_backward(*hmm, log_frame, lengths=lengths)
    np.testing.assert_allclose(
        semi_result.sequence_log_likelihood, hmm_result.sequence_log_likelihood, rtol=1e-12
    )
    np.testing.assert_allclose(semi_result.posteriors, hmm_result.posteriors, atol=1e-12)
    filtered = hsmm_filter(*semi, log_frame, lengths=lengths)
    np.testing.assert_allclose(
        filtered.filtered, hmm_forward(*hmm, log_frame, lengths=lengths).filtered, atol=1e-12
    )


def test_geometric_estimator_equals_gaussian_hmm():
    """Estimators: SemiMarkovGaussianHMM with geometric categorical durations scores,
    decodes (posteriors) and forecasts as the GaussianHMM it implies."""
    rng = np.random.default_rng(8)
    X = rng.normal(size=(60, 2))
    stay = np.array([0.8, 0.6])
    semi = SemiMarkovGaussianHMM(2, max_duration=60, duration_distribution="categorical")
    semi.startprob_ = [0.4, 0.6]
    semi.transmat_ = [[0.0, 1.0], [1.0, 0.0]]
    semi.duration_probs_ = geometric(stay, 60)
    hmm = GaussianHMM(2)
    hmm.startprob_ = [0.4, 0.6]
    hmm.transmat_ = implied_hmm(stay, np.array([[0.0, 1.0], [1.0, 0.0]]))
    for model in (semi, hmm):
        model.means_ = [[0.0, 0.5], [1.0, -0.5]]
        model.covars_ = [[1.0, 2.0], [0.5, 1.0]]
    lengths = [35, 25]
    assert np.isclose(semi.score(X, lengths=lengths), hmm.score(X, lengths=lengths), rtol=1e-12)
    np.testing.assert_allclose(
        semi.predict_proba(X, lengths=lengths), hmm.predict_proba(X, lengths=lengths), atol=1e-12
    )
    np.testing.assert_allclose(
        semi.predict_next_state_proba(X, lengths=lengths),
        hmm.predict_next_state_proba(X, lengths=lengths),
        atol=1e-12,
    )
    np.testing.assert_allclose(
        semi.get_stationary_distribution(), hmm.get_stationary_distribution(), atol=1e-6
    )


def simulated(model, n_sequences, length, seed):
    X, _ = zip(*(model.sample(length, random_state=seed + i) for i in range(n_sequences)))
    return np.concatenate(X), [length] * n_sequences


def test_recovers_poisson_duration_rates():
    truth = SemiMarkovGaussianHMM(3, max_duration=30)
    truth.startprob_ = [1 / 3, 1 / 3, 1 / 3]
    truth.transmat_ = [[0.0, 0.5, 0.5], [0.5, 0.0, 0.5], [0.5, 0.5, 0.0]]
    truth.duration_rates_ = np.array([3.0, 8.0, 14.0])
    truth.duration_probs_ = _poisson(truth.duration_rates_, 30)
    truth.means_ = [[-4.0], [0.0], [4.0]]
    truth.covars_ = [[1.0], [1.0], [1.0]]
    X, lengths = simulated(truth, 20, 200, seed=0)
    model = SemiMarkovGaussianHMM(3, max_duration=30, n_iter=100, tol=1e-6, random_state=0)
    model.fit(X, lengths=lengths)
    order = np.argsort(model.means_.ravel())
    np.testing.assert_allclose(model.duration_rates_[order], [3.0, 8.0, 14.0], rtol=0.12)
    np.testing.assert_allclose(model.means_.ravel()[order], [-4.0, 0.0, 4.0], atol=0.15)


def _poisson(rates, max_duration):
    pmf = stats.poisson.pmf(np.arange(max_duration)[None, :], np.asarray(rates)[:, None])
    return pmf / pmf.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("distribution", ["poisson", "negative_binomial", "categorical"])
def test_em_is_monotone(distribution):
    rng = np.random.default_rng(9)
    states = np.repeat(rng.integers(0, 2, size=30), rng.integers(2, 9, size=30))
    X = rng.normal(2.0 * states, 1.0)[:, None]
    model = SemiMarkovGaussianHMM(
        2,
        max_duration=6,  # shorter than some visits: truncation and censoring matter
        duration_distribution=distribution,
        n_iter=40,
        tol=1e-12,
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, lengths=[len(X) // 2, len(X) - len(X) // 2])
    history = np.array(model.monitor_.history)
    assert np.all(np.diff(history) >= -1e-8 * np.abs(history[1:])), np.diff(history)
    np.testing.assert_allclose(model.duration_probs_.sum(axis=1), 1.0)
    assert np.all(np.diag(model.transmat_) == 0)


def test_negative_binomial_recovers_overdispersed_durations():
    truth = SemiMarkovCategoricalHMM(2, max_duration=40, duration_distribution="negative_binomial")
    truth.startprob_ = [0.5, 0.5]
    truth.transmat_ = [[0.0, 1.0], [1.0, 0.0]]
    shapes, means = np.array([2.0, 2.0]), np.array([5.0, 12.0])
    steps = np.arange(40)[None, :]
    pmf = stats.nbinom.pmf(steps, shapes[:, None], (shapes / (shapes + means))[:, None])
    truth.duration_probs_ = pmf / pmf.sum(axis=1, keepdims=True)
    truth.emissionprob_ = [[0.9, 0.1], [0.1, 0.9]]
    X, lengths = simulated(truth, 30, 200, seed=1)
    model = SemiMarkovCategoricalHMM(
        2, max_duration=40, duration_distribution="negative_binomial", n_iter=60, random_state=0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X.astype(int), lengths=lengths)
    order = np.argsort(model.emissionprob_[:, 1])
    np.testing.assert_allclose(model.duration_rates_[order], means, rtol=0.15)
    assert np.all(model.duration_shapes_ < 5)  # overdispersed, unlike a Poisson


def test_duration_mstep_categorical_and_poisson_closed_forms():
    model = SemiMarkovGaussianHMM(2, max_duration=200, duration_distribution="poisson")
    model.duration_rates_ = np.array([1.0, 1.0])
    model.duration_probs_ = _poisson(model.duration_rates_, 200)
    counts = np.zeros((2, 200))
    counts[0, [0, 4]] = [1.0, 3.0]  # d - 1 in {0, 4}: mean 3
    counts[1, 9] = 2.0
    model._duration_mstep(counts)
    np.testing.assert_allclose(model.duration_rates_, [3.0, 9.0])
    model.duration_distribution = "categorical"
    model._duration_mstep(counts[:, :200])
    np.testing.assert_allclose(model.duration_probs_[0, [0, 4]], [0.25, 0.75])


def test_estimator_api_fit_predict_sample_partial_fit():
    rng = np.random.default_rng(10)
    X = np.concatenate([rng.normal(m, 0.3, size=(5, 1)) for m in [0, 3, 0, 3, 0, 3, 0, 3]])
    model = SemiMarkovGaussianHMM(2, max_duration=8, n_iter=20, random_state=0).fit(X)
    assert model.predict(X).shape == (40,)
    assert model.decode(X, algorithm="map")[1].shape == (40,)
    np.testing.assert_allclose(model.predict_proba(X).sum(axis=1), 1.0)
    np.testing.assert_allclose(model.filter(X).sum(axis=1), 1.0)
    np.testing.assert_allclose(model.predict_next_state_proba(X).sum(axis=1), 1.0)
    by_sequence = model.score_sequences(X, lengths=[20, 20])
    assert np.isclose(by_sequence.sum(), model.score(X, lengths=[20, 20]))
    weights = np.ones(len(X))
    assert np.isclose(model.score(X, sample_weight=weights), model.score(X))
    assert np.isfinite(model.aic(X)) and model.bic(X) > model.aic(X) - 1e-9
    sample, states = model.sample(30, random_state=0)
    assert sample.shape == (30, 1) and states.shape == (30,)
    # Each visit is at most max_duration rows long.
    runs = np.diff(np.flatnonzero(np.diff(np.r_[-1, states, -1]) != 0))
    assert runs.max() <= 8
    streamed = SemiMarkovGaussianHMM(2, max_duration=8, random_state=0)
    for chunk in np.array_split(X, 4):
        streamed.partial_fit(chunk, new_sequence=True)
    assert streamed.n_batch_iter_ == 4
    np.testing.assert_allclose(streamed.duration_probs_.sum(axis=1), 1.0)
    streamed.partial_fit(X[:10])  # continues the last chunk's sequence
    assert streamed.n_batch_iter_ == 5
    np.testing.assert_allclose(streamed.filtered_state_.sum(), 1.0)


def test_n_jobs_and_n_init_give_the_same_fit():
    rng = np.random.default_rng(11)
    X = rng.normal(size=(120, 1))
    X[40:80] += 3
    lengths = [30, 30, 30, 30]
    one = SemiMarkovGaussianHMM(2, max_duration=10, n_iter=5, random_state=0)
    two = SemiMarkovGaussianHMM(2, max_duration=10, n_iter=5, random_state=0, n_jobs=2)
    one.fit(X, lengths=lengths)
    two.fit(X, lengths=lengths)
    np.testing.assert_allclose(one.duration_rates_, two.duration_rates_, rtol=1e-9)
    best = SemiMarkovGaussianHMM(2, max_duration=10, n_iter=5, n_init=3, random_state=0)
    best.fit(X, lengths=lengths)
    assert best.score(X, lengths=lengths) >= one.score(X, lengths=lengths) - 1e-8


def test_categorical_emissions_with_missing_symbols():
    X = np.array([[0], [0], [0], [1], [np.nan], [0], [0], [0], [1], [1]])
    model = SemiMarkovCategoricalHMM(2, max_duration=4, n_iter=10, random_state=0).fit(X)
    np.testing.assert_allclose(model.predict_proba(X).sum(axis=1), 1.0)
    assert model.predict_next_proba(X).shape == (10, 2)


def test_sample_hsmm_segments_durations_follow_the_pmf():
    durationprob = np.array([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]])
    sample = sample_hsmm_segments([1.0, 0.0], [[0.0, 1.0], [1.0, 0.0]], durationprob, 30000,
                                  random_state=0)  # fmt: skip
    np.testing.assert_array_equal(sample.segment_states[:4], [0, 1, 0, 1])
    durations = sample.segment_durations[:-1][sample.segment_states[:-1] == 0]
    frequencies = np.bincount(durations, minlength=4)[1:] / len(durations)
    np.testing.assert_allclose(frequencies, durationprob[0], atol=0.02)
    assert sample.segment_starts[-1] + sample.segment_durations[-1] >= 30000


def test_errors():
    model = random_model(2, 3, 4)
    with pytest.raises(ValueError, match="log_durationprob must have shape"):
        hsmm_forward_backward(*model[:2], model[2][:1], model[3])
    with pytest.raises(ValueError, match="exp\\(log_durationprob\\) must sum to 1"):
        hsmm_viterbi(*model[:2], model[2] - 1.0, model[3])
    with pytest.raises(ValueError, match="log_frameprob"):
        hsmm_forward(*model[:3], model[3][:, :1])
    with pytest.raises(TypeError, match="log_durationprob must be real"):
        hsmm_filter(*model[:2], model[2] + 0j, model[3])
    with pytest.raises(ValueError, match="durationprob must sum to 1"):
        sample_hsmm_segments([1.0, 0.0], [[0.0, 1.0], [1.0, 0.0]], [[0.5, 0.4], [1, 0]], 3)
    X = np.random.default_rng(0).normal(size=(20, 1))
    with pytest.raises(ValueError, match="max_duration"):
        SemiMarkovGaussianHMM(2, max_duration=0).fit(X)
    with pytest.raises(ValueError, match="duration_distribution"):
        SemiMarkovGaussianHMM(2, duration_distribution="gamma").fit(X)
    with pytest.raises(ValueError, match="zero diagonal"):
        SemiMarkovGaussianHMM(2, transmat_init=[[0.5, 0.5], [0.5, 0.5]]).fit(X)
    with pytest.raises(ValueError, match="a visit lasts at most max_duration=5"):
        SemiMarkovGaussianHMM(2, max_duration=5).fit(X, known_states=np.zeros(20, dtype=int))
    # Runs end with their sequence: four sequences of 5 rows labelled 0 are possible.
    SemiMarkovGaussianHMM(2, max_duration=5, n_iter=1).fit(
        X, lengths=[5, 5, 5, 5], known_states=np.zeros(20, dtype=int)
    )
    forbidden = SemiMarkovGaussianHMM(
        3, transmat_init=[[0, 1, 0], [0.5, 0, 0.5], [0.5, 0.5, 0]], init_params="smc"
    )
    with pytest.raises(ValueError, match="transmat_\\[0, 2\\] = 0"):
        forbidden.fit(X, known_states=np.r_[-1, 0, 2, -np.ones(17)].astype(int))
    fitted = SemiMarkovGaussianHMM(2, max_duration=5, n_iter=2, random_state=0).fit(X)
    with pytest.raises(TypeError, match="new_sequence must be a bool"):
        fitted.filter_stream(X, new_sequence="yes")
    fitted.filter_stream(X[:3])
    fitted.filter_message_ = fitted.filter_message_[:, :2]
    with pytest.raises(ValueError, match="filter_message_ does not fit the model"):
        fitted.filter_stream(X[3:5])
    by_hand = SemiMarkovGaussianHMM(2, max_duration=5)
    for name in ("startprob_", "transmat_", "means_", "covars_"):
        setattr(by_hand, name, getattr(fitted, name))
    with pytest.raises(AttributeError, match="no duration_probs_"):
        by_hand.predict(X)
    fitted.duration_probs_ = np.full((2, 4), 0.25)
    with pytest.raises(ValueError, match="duration_probs_ must have shape"):
        fitted.predict(X)


def test_same_emission_code_as_the_hmms():
    """The emission methods are the HMMs' own, reached through the MRO."""
    for semi, hmm in ((SemiMarkovGaussianHMM, GaussianHMM),
                      (SemiMarkovCategoricalHMM, CategoricalHMM)):  # fmt: skip
        for name in ("_emission_terms", "_emission_mstep", "_initialize_emissions"):
            assert getattr(semi, name) is getattr(hmm, name)


def test_missing_rows_are_unobserved_steps():
    """A row missing throughout (NaN) has log-emission 0 in every state: the
    semi-Markov posteriors there come from the durations alone."""
    rng = np.random.default_rng(12)
    X = rng.normal(size=(30, 1))
    X[10:14] = np.nan
    model = SemiMarkovGaussianHMM(2, max_duration=6, n_iter=5, random_state=0).fit(X)
    log_frame = model._compute_log_likelihood(X)
    np.testing.assert_array_equal(log_frame[10:14], 0.0)
    with np.errstate(divide="ignore"):
        logs = [np.log(p) for p in (model.startprob_, model.transmat_, model.duration_probs_)]
    expected = hsmm_forward_backward(*logs, log_frame)
    np.testing.assert_allclose(model.predict_proba(X), expected.posteriors, atol=1e-12)
    assert np.isclose(model.score(X), expected.log_likelihood, rtol=1e-12)


def alternating_truth(mean):
    """Two states taking turns, visits of 1 + Poisson(4) and 1 + Poisson(9) rows,
    emitting N(-mean, 1) and N(mean, 1)."""
    truth = SemiMarkovGaussianHMM(2, max_duration=20)
    truth.startprob_ = [0.5, 0.5]
    truth.transmat_ = [[0.0, 1.0], [1.0, 0.0]]
    truth.duration_probs_ = _poisson([4.0, 9.0], 20)
    truth.means_ = [[-mean], [mean]]
    truth.covars_ = [[1.0], [1.0]]
    return truth


def test_stochastic_em_learns_the_durations():
    truth = alternating_truth(3.0)
    X, lengths = simulated(truth, 40, 100, seed=2)
    model = SemiMarkovGaussianHMM(
        2, max_duration=20, learning_method="online", batch_size=8, n_iter=30, random_state=0
    ).fit(X, lengths=lengths)
    order = np.argsort(model.means_.ravel())
    np.testing.assert_allclose(model.duration_rates_[order], [4.0, 9.0], rtol=0.15)


def test_duration_prior_adds_pseudo_counts():
    counts = np.zeros((2, 5))
    counts[0, [1, 3]] = [3.0, 1.0]
    counts[1, 0] = 2.0
    model = SemiMarkovGaussianHMM(
        2, max_duration=5, duration_distribution="categorical", duration_prior=2.0, params="d"
    )
    model.duration_probs_ = np.full((2, 5), 0.2)
    model._duration_map(counts)
    np.testing.assert_allclose(model.duration_probs_, (counts + 1) / (counts + 1).sum(1)[:, None])
    poisson = SemiMarkovGaussianHMM(2, max_duration=200, duration_prior=1.5, params="d")
    poisson.duration_rates_ = np.ones(2)
    poisson.duration_probs_ = _poisson(poisson.duration_rates_, 200)
    poisson._duration_map(np.pad(counts, ((0, 0), (0, 195))))
    pseudo = np.pad(counts, ((0, 0), (0, 195))) + 0.5  # the MAP: mean of d - 1 with them
    np.testing.assert_allclose(poisson.duration_rates_, pseudo @ np.arange(200) / pseudo.sum(1))
    with pytest.raises(ValueError, match="duration_prior must be > 0"):
        SemiMarkovGaussianHMM(2, duration_prior=0.0).fit(np.zeros((10, 1)))


# -- streams: the (state, age) message carried across chunks -------------------


def prefix_message(log_start, log_trans, log_duration, log_frame):
    """p(state, age of its visit | x_0..x_{n-1}) by enumeration of the segmentations."""
    n_states, max_duration = log_duration.shape
    found = enumerate_model(log_start, log_trans, log_duration, log_frame)
    values = np.array([value for value, _ in found])
    weights = np.exp(values - logsumexp(values))
    message = np.zeros((n_states, max_duration))
    for weight, (_, visits) in zip(weights, found):
        state, _, seen = visits[-1]
        message[state, seen - 1] += weight
    return message


@pytest.mark.parametrize("case", CASES)
def test_filter_message_equals_enumeration(case):
    """After every prefix, ``log_message`` is the joint law of (state, visit age), and
    continuing from it gives the next row's filtered and predicted distributions."""
    log_start, log_trans, log_duration, log_frame = random_model(**case)
    whole = hsmm_filter(log_start, log_trans, log_duration, log_frame)
    for t in range(1, len(log_frame)):
        head = hsmm_filter(log_start, log_trans, log_duration, log_frame[:t])
        expected = prefix_message(log_start, log_trans, log_duration, log_frame[:t])
        np.testing.assert_allclose(np.exp(head.log_message), expected, atol=1e-12)
        tail = hsmm_filter(
            log_start, log_trans, log_duration, log_frame[t:], log_message=head.log_message
        )
        np.testing.assert_allclose(tail.filtered, whole.filtered[t:], atol=1e-12)
        np.testing.assert_allclose(tail.predicted, whole.predicted[t:], atol=1e-12)
        assert np.isclose(head.log_likelihood + tail.log_likelihood, whole.log_likelihood)


def test_filter_message_with_impossible_durations():
    """Durations of probability zero (and a max_duration longer than the chunks)."""
    log_start, log_trans, _, log_frame = random_model(2, 5, 9, seed=7)
    with np.errstate(divide="ignore"):
        log_duration = np.log([[0.0, 0.5, 0.0, 0.5, 0.0], [0.3, 0.0, 0.7, 0.0, 0.0]])
    whole = hsmm_forward(log_start, log_trans, log_duration, log_frame)
    message, filtered, log_likelihood = None, [], 0.0
    for chunk in np.split(log_frame, [1, 2, 4, 7]):
        part = hsmm_forward(log_start, log_trans, log_duration, chunk, log_message=message)
        message = part.log_message
        filtered.append(part.filtered)
        log_likelihood += part.log_likelihood
    np.testing.assert_allclose(np.vstack(filtered), whole.filtered, atol=1e-12)
    assert np.isclose(log_likelihood, whole.log_likelihood, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(message == -np.inf, whole.log_message == -np.inf)
    expected = prefix_message(log_start, log_trans, log_duration, log_frame)
    np.testing.assert_allclose(np.exp(message), expected, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    cuts=st.lists(st.integers(1, 39), max_size=8, unique=True),
    max_duration=st.integers(1, 9),
    seed=st.integers(0, 2**16),
)
def test_filter_stream_in_chunks_equals_one_pass(cuts, max_duration, seed):
    """At fixed parameters, a sequence cut anywhere into filter_stream calls gets the
    filtered probabilities and the total log-likelihood of one pass."""
    rng = np.random.default_rng(seed)
    model = SemiMarkovGaussianHMM(3, max_duration=max_duration)
    model.startprob_ = rng.dirichlet(np.ones(3))
    transmat = rng.dirichlet(np.ones(2), size=3)
    model.transmat_ = np.array(
        [[0, transmat[0, 0], transmat[0, 1]],
         [transmat[1, 0], 0, transmat[1, 1]],
         [transmat[2, 0], transmat[2, 1], 0]]
    )  # fmt: skip
    model.duration_probs_ = rng.dirichlet(np.ones(max_duration), size=3)
    model.means_ = np.array([[-2.0], [0.0], [2.0]])
    model.covars_ = np.ones((3, 1))
    model.n_features_in_ = 1
    X = rng.normal(scale=2.0, size=(40, 1))
    chunks = np.split(X, sorted(cuts))
    model.reset_filter()
    filtered, log_likelihood = [], 0.0
    for chunk in chunks:
        filtered.append(model.filter_stream(chunk))
        log_likelihood += model.stream_log_likelihood_
    np.testing.assert_allclose(np.vstack(filtered), model.filter(X), atol=1e-10)
    assert np.isclose(log_likelihood, model.score(X), rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(model.filtered_state_, model.filter(X)[-1], atol=1e-10)


def test_filter_update_reset_filter_and_fit_forget_the_stream():
    X = np.random.default_rng(3).normal(size=(30, 1))
    X[10:20] += 3
    model = SemiMarkovGaussianHMM(2, max_duration=6, n_iter=3, random_state=0).fit(X)
    model.reset_filter(X[:12])
    np.testing.assert_allclose(model.filter_update(X[12]), model.filter(X[:13])[-1])
    np.testing.assert_allclose(model.filter_stream(X[:4], new_sequence=True), model.filter(X[:4]))
    assert model.reset_filter() is model and not hasattr(model, "filter_message_")
    np.testing.assert_allclose(model.filter_update(X[0]), model.filter(X[:1])[0])
    model.fit(X)
    assert not hasattr(model, "filter_message_") and not hasattr(model, "filtered_state_")
    model.filter_stream(X[:5])
    model.partial_fit(X, new_sequence=True)
    # The online filter continues where partial_fit ended.
    assert not hasattr(model, "stream_log_likelihood_")
    np.testing.assert_allclose(np.exp(model.filter_message_).sum(axis=1), model.filtered_state_)


def test_log_message_errors():
    log_start, log_trans, log_duration, log_frame = random_model(2, 3, 4)
    message = hsmm_filter(log_start, log_trans, log_duration, log_frame).log_message
    with pytest.raises(ValueError, match="log_message must have shape"):
        hsmm_filter(log_start, log_trans, log_duration, log_frame, log_message=message[:, :2])
    with pytest.raises(ValueError, match="must sum to 1"):
        hsmm_forward(log_start, log_trans, log_duration, log_frame, log_message=message - 1)
    with pytest.raises(ValueError, match="NaN"):
        hsmm_filter(
            log_start, log_trans, log_duration, log_frame, log_message=np.full((2, 3), np.nan)
        )
    with pytest.raises(TypeError, match="log_message must be real"):
        hsmm_filter(log_start, log_trans, log_duration, log_frame, log_message=message + 0j)
    with np.errstate(divide="ignore"):
        short = np.log([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
        unreachable = np.log([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match="no visit reaches"):
        hsmm_filter(log_start, log_trans, short, log_frame, log_message=unreachable)
    before = message.copy()
    hsmm_filter(log_start, log_trans, log_duration, log_frame, log_message=message)
    np.testing.assert_array_equal(message, before)


# -- known states (semi-supervised fits) ----------------------------------------


def fixed_gaussian_model(n_states, max_duration, seed, **kwargs):
    """A SemiMarkovGaussianHMM with random parameters (zero diagonal), learning nothing."""
    rng = np.random.default_rng(seed)
    model = SemiMarkovGaussianHMM(n_states, max_duration=max_duration, **kwargs)
    log_start, log_trans, log_duration, _ = random_model(n_states, max_duration, 1, seed)
    model.startprob_ = np.exp(log_start)
    model.transmat_ = np.exp(log_trans)
    model.duration_probs_ = np.exp(log_duration)
    model.means_ = rng.normal(scale=2.0, size=(n_states, 1))
    model.covars_ = rng.uniform(0.5, 2.0, size=(n_states, 1))
    model.n_features_in_ = 1
    model._centre = np.zeros(1)  # the emission statistics' reference point
    return model


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_known_states_estep_equals_enumeration_over_consistent_segmentations(seed):
    """The E step with labelled rows: log p(x, labels) and the expected counts and
    posteriors over the segmentations in which every labelled row is in a visit to
    its state."""
    rng = np.random.default_rng(seed)
    model = fixed_gaussian_model(3, 3, seed)
    X = rng.normal(scale=2.0, size=(6, 1))
    known_states = np.full(6, -1)
    known_states[rng.choice(6, size=2, replace=False)] = rng.integers(0, 3, size=2)
    with np.errstate(divide="ignore"):
        logs = [np.log(p) for p in (model.startprob_, model.transmat_, model.duration_probs_)]
    expected = brute_force(*logs, model._compute_log_likelihood(X), known_states)
    stacked = model._stack_known_states(X, known_states)
    try:
        statistics, log_likelihood = model._estep(stacked, np.array([0, 6]))
    finally:
        del model._known_states_stacked
    assert np.isclose(log_likelihood, expected["log_likelihood"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(statistics["start"], expected["start"], atol=1e-12)
    np.testing.assert_allclose(statistics["trans"], expected["trans"], atol=1e-12)
    durations = complete_duration_counts(
        expected["complete"], expected["censored"], model.duration_probs_
    )
    np.testing.assert_allclose(statistics["durations"], durations, atol=1e-12)
    posterior_mass = expected["posteriors"].sum(axis=0)
    np.testing.assert_allclose(statistics["post"], posterior_mass, atol=1e-12)
    np.testing.assert_allclose(statistics["obs"], expected["posteriors"].T @ X, atol=1e-12)


def test_fit_with_known_states_follows_the_labels():
    """Labels on a few rows of each visit pin each state to its own regime (no label
    switching), and fit and partial_fit take them; labels do not change predict."""
    rng = np.random.default_rng(5)
    states = np.repeat(np.arange(30) % 3, 5)
    X = np.array([[0.0], [1.0], [2.0]])[states] + rng.normal(scale=0.4, size=(150, 1))
    known_states = np.where(np.arange(150) % 5 == 2, states, -1)
    model = SemiMarkovGaussianHMM(3, max_duration=8, n_iter=30, random_state=1)
    model.fit(X, known_states=known_states)
    np.testing.assert_allclose(model.means_.ravel(), [0.0, 1.0, 2.0], atol=0.15)
    assert np.mean(model.predict(X) == states) > 0.9
    streamed = SemiMarkovGaussianHMM(3, max_duration=8, random_state=1)
    streamed.partial_fit(X[:75], known_states=known_states[:75])
    streamed.partial_fit(X[75:], known_states=known_states[75:], new_sequence=True)
    assert streamed.n_batch_iter_ == 2 and not hasattr(streamed, "_known_states_stacked")


# -- SQUAREM --------------------------------------------------------------------


@pytest.mark.parametrize("distribution", ["poisson", "negative_binomial", "categorical"])
def test_squarem_never_lowers_the_log_likelihood_and_reaches_plain_ems_maximum(distribution):
    rng = np.random.default_rng(0)
    states = np.repeat(rng.integers(0, 3, size=60), rng.integers(2, 9, size=60))
    X = np.array([[0.0], [1.5], [3.0]])[states] + rng.normal(size=(len(states), 1))
    kwargs = dict(max_duration=12, duration_distribution=distribution, n_iter=3000, tol=1e-7)
    plain = SemiMarkovGaussianHMM(3, random_state=0, **kwargs).fit(X)
    fast = SemiMarkovGaussianHMM(3, random_state=0, acceleration="squarem", **kwargs).fit(X)
    history = np.array(fast.monitor_.history)
    assert np.all(np.diff(history) >= -1e-9 * np.abs(history[:-1]))
    assert fast.converged_ and plain.converged_
    assert fast.lower_bound_ == pytest.approx(plain.lower_bound_, abs=1e-3)
    assert fast.n_iter_ < plain.n_iter_
    order = np.argsort(fast.means_.ravel())
    np.testing.assert_allclose(
        fast.duration_probs_[order], plain.duration_probs_[np.argsort(plain.means_.ravel())],
        atol=2e-3,
    )  # fmt: skip
    np.testing.assert_array_equal(np.diag(fast.transmat_), 0.0)


def test_squarem_coordinates_cover_the_durations():
    model = SemiMarkovCategoricalHMM(2, max_duration=4, duration_distribution="categorical")
    X = np.array([[0], [1], [1], [0], [0], [1]])
    model.set_params(n_iter=0).fit(X)
    kinds = model._acceleration_coordinates(X).kinds
    assert kinds["duration_probs_"] == ("probabilities", None)
    nb = SemiMarkovGaussianHMM(2, max_duration=4, duration_distribution="negative_binomial")
    nb.set_params(n_iter=0).fit(X.astype(float))
    kinds = nb._acceleration_coordinates(X).kinds
    assert kinds["duration_rates_"] == kinds["duration_shapes_"] == ("positive", 1.0)
    point = nb._feasible_parameters(
        dict(nb._get_parameters(), duration_rates_=np.array([2.0, 1e9]))
    )
    np.testing.assert_allclose(point["duration_rates_"], [2.0, 1e6])
    np.testing.assert_allclose(
        point["duration_probs_"],
        duration_pmf("negative_binomial", 4, [2.0, 1e6], point["duration_shapes_"]),
    )
    assert (
        nb.set_params(params="stmc")
        ._acceleration_coordinates(X)
        .kinds.keys()
        .isdisjoint({"duration_rates_", "duration_shapes_"})
    )


# -- partial_fit continuing a sequence across batches ----------------------------


def stream_estep(model, X, cuts, known_states=None, lengths_of=None):
    """The stream engine's E step over the batches X[a:b] (the first sequence of
    each continuing the last of the previous): summed statistics, log-likelihood,
    the last message.  ``lengths_of(a, b)``: the batch's sequence lengths."""
    total, log_likelihood, carried = None, 0.0, None
    for a, b in zip(cuts[:-1], cuts[1:]):
        lengths = None if lengths_of is None else lengths_of(a, b)
        labels = None if known_states is None else known_states[a:b]
        try:
            rows, offsets = model._validate_stream_batch(
                X[a:b], None, lengths, None, first_call=False, continues=carried is not None,
                known_states=labels,
            )  # fmt: skip
            added, part, carried = model._stream_estep(rows, offsets, carried)
        finally:
            model.__dict__.pop("_known_states_stacked", None)
        total = added if total is None else total + added
        log_likelihood += part
    return total, log_likelihood, carried


@settings(max_examples=30, deadline=None)
@given(
    cuts=st.lists(st.integers(1, 29), max_size=6, unique=True),
    max_duration=st.integers(1, 7),
    seed=st.integers(0, 2**16),
    missing=st.booleans(),
    labelled=st.booleans(),
)
def test_a_sequence_cut_into_batches_gives_what_one_batch_gives(
    cuts, max_duration, seed, missing, labelled
):
    """At fixed parameters the batches' statistics add up to the whole sequence's
    (the censored visit a batch ends in is revised by the next), their
    log-likelihoods to its log-likelihood, and the message's state is filter's."""
    rng = np.random.default_rng(seed)
    model = fixed_gaussian_model(3, max_duration, seed)
    X = rng.normal(scale=2.0, size=(30, 1))
    if missing:
        X[rng.choice(30, size=5, replace=False)] = np.nan
    known_states = None
    if labelled:
        model.startprob_ = np.full(3, 1 / 3)
        model.transmat_ = np.full((3, 3), 0.5) - 0.5 * np.eye(3)
        model.duration_probs_ = np.full((3, max_duration), 1.0 / max_duration)
        known_states = np.full(30, -1)
        rows = rng.choice(np.flatnonzero(~np.isnan(X[:, 0])), size=3, replace=False)
        known_states[rows] = rng.integers(0, 3, size=3)
    cuts = [0, *sorted(cuts), 30]
    stacked = X if known_states is None else model._stack_known_states(X, known_states)
    try:
        whole, whole_log_likelihood = model._estep(stacked, np.array([0, 30]))
    finally:
        model.__dict__.pop("_known_states_stacked", None)
    if not np.isfinite(whole_log_likelihood):
        return  # labels the durations forbid
    chunked, log_likelihood, carried = stream_estep(model, X, cuts, known_states)
    assert np.isclose(log_likelihood, whole_log_likelihood, rtol=1e-11, atol=1e-11)
    for name in whole:
        np.testing.assert_allclose(chunked[name], whole[name], rtol=1e-9, atol=1e-10)
    if known_states is None:
        filtered = model.filter(X)[-1]
        np.testing.assert_allclose(np.exp(carried.log_message).sum(axis=1), filtered, atol=1e-12)
        # The public stream (nothing learned): batch log-likelihoods and filtered state.
        model.params = ""
        parts = []
        for index, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
            model.partial_fit(X[a:b], new_sequence=index == 0)
            parts.append(model.batch_log_likelihood_)
        assert np.isclose(sum(parts), whole_log_likelihood, rtol=1e-11, atol=1e-11)
        np.testing.assert_allclose(model.filtered_state_, filtered, atol=1e-12)
        np.testing.assert_allclose(model.filter_message_, carried.log_message, atol=1e-12)


def test_batches_of_several_sequences_continue_the_first_and_the_last():
    """Batches holding several sequences: the first continues the previous batch's
    last, the ones in between are whole, the last is carried on."""
    rng = np.random.default_rng(4)
    model = fixed_gaussian_model(2, 5, 4)
    lengths = [7, 12, 3, 9, 6]
    X = rng.normal(scale=2.0, size=(sum(lengths), 1))
    bounds = np.cumsum([0, *lengths])
    whole, whole_log_likelihood = model._estep(X, bounds)

    def lengths_of(a, b):
        edges = np.unique(np.clip(bounds, a, b))
        return np.diff(edges)

    cuts = [0, 10, 25, 37]
    chunked, log_likelihood, _ = stream_estep(model, X, cuts, lengths_of=lengths_of)
    assert np.isclose(log_likelihood, whole_log_likelihood, rtol=1e-12)
    for name in whole:
        np.testing.assert_allclose(chunked[name], whole[name], rtol=1e-9, atol=1e-10)


def test_a_message_on_ages_the_new_durations_forbid_is_renormalised():
    """After an M step a free duration pmf may forbid ages the carried message
    holds: they are dropped (the rest renormalised) for the next batch and for
    the online filter; nothing left is an error that names the cause."""
    model = fixed_gaussian_model(2, 3, 0, duration_distribution="categorical")
    model.duration_probs_ = np.array([[0.2, 0.3, 0.5], [0.5, 0.25, 0.25]])
    X = np.zeros((4, 1))
    model.params = ""
    model.partial_fit(X, new_sequence=True)
    before = np.exp(model.filter_message_)
    assert before[0, 1:].sum() > 0
    model.duration_probs_ = np.array([[1.0, 0.0, 0.0], [0.5, 0.25, 0.25]])
    model._publish_stream(model._stream)
    expected = before * [[1, 0, 0], [1, 1, 1]]
    np.testing.assert_allclose(np.exp(model.filter_message_), expected / expected.sum())
    np.testing.assert_allclose(model.filtered_state_, (expected / expected.sum()).sum(axis=1))
    model.partial_fit(X[:1])
    assert np.isfinite(model.batch_log_likelihood_)
    with np.errstate(divide="ignore"):
        forbidden = np.log([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    model._stream = model._stream._replace(log_message=forbidden)
    with pytest.raises(ValueError, match="-inf"):
        model.partial_fit(X[:1])
    model._stream = model._stream._replace(log_message=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="new_sequence=True"):
        model.partial_fit(X[:1])


def test_stochastic_em_on_one_long_stream_recovers_the_durations():
    """partial_fit on consecutive chunks of one long sequence (each continuing the
    previous; chunks of 20 rows, as long as the longest visits) learns the
    duration rates; restarting the sequence at every chunk censors the visits
    that cross a cut and biases the long state's rate down."""
    X, _ = alternating_truth(2.0).sample(8000, random_state=4)
    rates = {}
    for restart in (False, True):
        model = SemiMarkovGaussianHMM(2, max_duration=20, random_state=0, learning_offset=10.0)
        for index, chunk in enumerate(np.array_split(X, 400)):
            model.partial_fit(chunk, new_sequence=restart or index == 0)
        order = np.argsort(model.means_.ravel())
        np.testing.assert_allclose(model.means_.ravel()[order], [-2.0, 2.0], atol=0.1)
        rates[restart] = model.duration_rates_[order]
    np.testing.assert_allclose(rates[False], [4.0, 9.0], rtol=0.1)
    assert rates[True][1] < 8.1


def numpy_age_filter(log_start, log_trans, log_duration, log_frame):
    """log p(x) and p(z_t | x_<=t) by the filter over (state, age) in numpy (libm's
    exp and log, scipy's logsumexp): the reference of the kernels' own exponential."""
    with np.errstate(divide="ignore", invalid="ignore"):
        survival = np.logaddexp.accumulate(log_duration[:, ::-1], axis=1)[:, ::-1]
        hazard = np.where(np.isfinite(survival), log_duration - survival, -np.inf)
        going_on = np.full_like(survival, -np.inf)
        going_on[:, 1:] = survival[:, 1:] - survival[:, :-1]
    message = np.full(log_duration.shape, -np.inf)
    message[:, 0] = log_start
    log_likelihood, filtered = 0.0, []
    for t, row in enumerate(log_frame):
        if t:
            ending = logsumexp(message + hazard, axis=1)
            moved = np.full_like(message, -np.inf)
            moved[:, 0] = logsumexp(ending[:, None] + log_trans, axis=0)
            moved[:, 1:] = message[:, :-1] + going_on[:, 1:]
            message = moved
        message = message + row[:, None]
        total = logsumexp(message)
        log_likelihood += total
        message = message - total
        filtered.append(np.exp(logsumexp(message, axis=1)))
    return log_likelihood, np.array(filtered)


def test_kernels_equal_a_libm_log_space_reference_on_long_hard_inputs():
    """The kernels' branch-free exponential (vectorised in the AVX2 build) against
    libm through numpy: 2000 rows, emissions of large magnitude, to 1e-10."""
    log_start, log_trans, log_duration, _ = random_model(3, 25, 1, seed=8)
    log_frame = np.random.default_rng(8).normal(scale=25.0, size=(2000, 3))
    log_likelihood, filtered = numpy_age_filter(log_start, log_trans, log_duration, log_frame)
    forward = hsmm_forward(log_start, log_trans, log_duration, log_frame)
    both = hsmm_forward_backward(log_start, log_trans, log_duration, log_frame)
    assert np.isclose(forward.log_likelihood, log_likelihood, rtol=1e-12, atol=1e-10)
    assert np.isclose(both.log_likelihood, log_likelihood, rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(forward.filtered, filtered, atol=1e-10)
    np.testing.assert_allclose(both.posteriors[-1], filtered[-1], atol=1e-10)


def test_categorical_emissions_stream_in_batches_as_one_batch():
    """The stream's statistics through CategoricalHMM's emission features (missing
    symbols too) add up to one batch's as well."""
    rng = np.random.default_rng(6)
    model = SemiMarkovCategoricalHMM(3, max_duration=4, n_features=3)
    log_start, log_trans, log_duration, _ = random_model(3, 4, 1, seed=6)
    model.startprob_, model.transmat_ = np.exp(log_start), np.exp(log_trans)
    model.duration_probs_ = np.exp(log_duration)
    model.emissionprob_ = rng.dirichlet(np.ones(3), size=3)
    X = rng.integers(0, 3, size=(25, 1)).astype(float)
    X[[3, 11, 17]] = np.nan
    model.n_features_in_ = 1
    whole, whole_log_likelihood = model._estep(X, np.array([0, 25]))
    chunked, log_likelihood, _ = stream_estep(model, X, [0, 2, 3, 12, 18, 25])
    assert np.isclose(log_likelihood, whole_log_likelihood, rtol=1e-12)
    for name in whole:
        np.testing.assert_allclose(chunked[name], whole[name], rtol=1e-9, atol=1e-10)
