"""Exact or loud: HMM inference on hard inputs against enumeration and log space.

The scaled forward-backward must give what log-space forward-backward gives
whenever that is finite (log-likelihood to 1e-9 relative, posteriors and
counts to 1e-9 absolute), or detect that it cannot and redo the sequence in
log space.  The inputs here are built to break it: log-emissions spread over
thousands of nats within a row, rows that put a state just across the
subnormal range, zeros in the start vector and the transition matrix,
unreachable states and impossible rows.
"""

import itertools

import numpy as np
import pytest
from hmm_references import (
    assert_log_likelihood,
    brute_force,
    hard_models,
    left_right,
    normalised_log_space_reference,
)
from hmm_references import brute_force_posteriors as _brute_force_posteriors
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

from skseq import GaussianHMM
from skseq._sequences import sequence_offsets
from skseq.inference import hmm as inference_hmm
from skseq.inference import hmm_forward, hmm_forward_backward, hmm_viterbi

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")



def brute_force_posteriors(log_start, log_trans, log_frame):
    """Enumeration of all paths (NaN-free weights for impossible sequences)."""
    with np.errstate(invalid="ignore"):
        return _brute_force_posteriors(log_start, log_trans, log_frame)












HARD = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


@HARD
@given(hard_models(max_states=5, min_rows=1, max_rows=8, max_paths=4096))
def test_forward_backward_matches_enumeration_on_hard_inputs(model):
    log_start, log_trans, log_frame = model
    log_likelihood, posteriors, counts, _, _ = brute_force_posteriors(
        log_start, log_trans, log_frame
    )
    result = hmm_forward_backward(log_start, log_trans, log_frame)
    for array in result[1:]:
        assert not np.isnan(array).any()
    assert_log_likelihood(result.log_likelihood, log_likelihood, log_frame)
    if log_likelihood == -np.inf:
        assert not result.posteriors.any() and not result.transition_counts.any()
        return
    np.testing.assert_allclose(result.posteriors, posteriors, rtol=0, atol=1e-9)
    np.testing.assert_allclose(result.start_counts, posteriors[0], rtol=0, atol=1e-9)
    np.testing.assert_allclose(result.transition_counts, counts, rtol=0, atol=1e-9)
    assert_log_likelihood(result.log_predictive.sum(), log_likelihood, log_frame)


@HARD
@given(hard_models(max_states=4, min_rows=1, max_rows=7, max_paths=1024))
def test_forward_matches_enumeration_of_prefixes_on_hard_inputs(model):
    log_start, log_trans, log_frame = model
    result = hmm_forward(log_start, log_trans, log_frame)
    assert not np.isnan(result.filtered).any() and not np.isnan(result.log_predictive).any()
    for t in range(1, log_frame.shape[0] + 1):
        prefix_ll, posteriors, _, _, _ = brute_force_posteriors(log_start, log_trans, log_frame[:t])
        assert_log_likelihood(result.log_predictive[:t].sum(), prefix_ll, log_frame[:t])
        if prefix_ll == -np.inf:
            break
        np.testing.assert_allclose(result.filtered[t - 1], posteriors[-1], rtol=0, atol=1e-9)


@HARD
@given(hard_models(max_states=5, min_rows=20, max_rows=120))
def test_long_sequences_match_a_log_space_reference(model):
    log_start, log_trans, log_frame = model
    log_likelihood, posteriors, counts = normalised_log_space_reference(
        log_start, log_trans, log_frame
    )
    result = hmm_forward_backward(log_start, log_trans, log_frame)
    filtered = hmm_forward(log_start, log_trans, log_frame)
    for array in (*result[1:], *filtered[1:]):
        assert not np.isnan(array).any()
    assert_log_likelihood(result.log_likelihood, log_likelihood, log_frame)
    assert_log_likelihood(filtered.log_likelihood, log_likelihood, log_frame)
    if log_likelihood == -np.inf:
        return
    np.testing.assert_allclose(result.posteriors, posteriors, rtol=0, atol=1e-9)
    np.testing.assert_allclose(result.transition_counts, counts, rtol=0, atol=1e-9)


@HARD
@given(hard_models(max_states=5, min_rows=1, max_rows=7, max_paths=4096))
def test_viterbi_is_the_best_path_and_consistent_with_the_posteriors(model):
    log_start, log_trans, log_frame = model
    paths, log_joint = brute_force(log_start, log_trans, log_frame)
    log_prob, states = hmm_viterbi(log_start, log_trans, log_frame)
    best = log_joint.max()
    assert_log_likelihood(log_prob, best, log_frame)
    if best == -np.inf:
        return
    # The returned path attains the best joint probability (ties: any of them).
    index = np.flatnonzero((paths == states).all(axis=1))[0]
    assert_log_likelihood(log_joint[index], best, log_frame)
    # p(z_t = z*_t | x) >= p(z*, x) / p(x) at every row.
    result = hmm_forward_backward(log_start, log_trans, log_frame)
    floor = np.exp(log_prob - result.log_likelihood)
    assert np.all(result.posteriors[np.arange(len(states)), states] >= floor * (1 - 1e-9) - 1e-9)


@pytest.mark.parametrize("kernel", ["log_forward", "log_forward_backward"])
@settings(max_examples=60, deadline=None, derandomize=True)
@given(model=hard_models(max_states=4, min_rows=1, max_rows=6, max_paths=1024))
def test_the_log_space_redo_matches_enumeration(kernel, model):
    """The redo on its own (every sequence), against enumeration."""
    log_start, log_trans, log_frame = model
    n_rows, n_states = log_frame.shape
    lengths = [n_rows // 2, n_rows - n_rows // 2] if n_rows > 1 else [1]
    offsets = sequence_offsets(n_rows, lengths=lengths)
    shifted = np.empty_like(log_frame)
    shift = np.empty(n_rows)
    inference_hmm._hmm.shift_rows(log_frame, shifted, shift)
    rows = np.empty((n_rows, n_states))
    log_predictive = np.empty(n_rows)
    sequence_log_likelihood = np.empty(len(lengths))
    start_counts, counts = np.zeros(n_states), np.zeros((n_states, n_states))
    arguments = [rows, log_predictive, sequence_log_likelihood]
    if kernel == "log_forward_backward":
        arguments += [start_counts, counts]
    getattr(inference_hmm._hmm, kernel)(
        log_start,
        np.ascontiguousarray(log_trans),
        shifted,
        shift,
        offsets,
        np.arange(len(lengths)),
        *arguments,
    )
    expected_counts = np.zeros((n_states, n_states))
    for s, (first, stop) in enumerate(itertools.pairwise(offsets)):
        part = log_frame[first:stop]
        log_likelihood, posteriors, part_counts, _, _ = brute_force_posteriors(
            log_start, log_trans, part
        )
        assert_log_likelihood(sequence_log_likelihood[s], log_likelihood, part)
        assert not np.isnan(rows[first:stop]).any()
        if log_likelihood == -np.inf:
            continue
        assert_log_likelihood(log_predictive[first:stop].sum(), log_likelihood, part)
        expected = posteriors if kernel == "log_forward_backward" else posteriors[-1:]
        computed = rows[first:stop] if kernel == "log_forward_backward" else rows[stop - 1 : stop]
        np.testing.assert_allclose(computed, expected, rtol=0, atol=1e-12)
        expected_counts += part_counts
    if kernel == "log_forward_backward":
        np.testing.assert_allclose(counts, expected_counts, rtol=0, atol=1e-12)


# -- the defects reported, one by one ------------------------------------------


def eye_model():
    with np.errstate(divide="ignore"):
        return np.log([0.5, 0.5]), np.log(np.eye(2))


def test_an_emission_underflowing_on_the_dominant_path_is_not_dropped():
    """State 1's shifted emission in row 0 underflows to zero (800 nats below
    state 0), but state 0 is then 700 nats worse in each of three rows: the
    path through state 1 dominates.  Each row's mass stays above DBL_MIN."""
    log_start, log_trans = eye_model()
    log_frame = np.array([[0.0, -800.0], [-700.0, 0.0], [-700.0, 0.0], [-700.0, 0.0]])
    log_likelihood, posteriors, counts, _, _ = brute_force_posteriors(
        log_start, log_trans, log_frame
    )
    result = hmm_forward_backward(log_start, log_trans, log_frame)
    np.testing.assert_allclose(result.log_likelihood, log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(result.posteriors, posteriors, atol=1e-12)
    np.testing.assert_allclose(result.transition_counts, counts, atol=1e-12)
    np.testing.assert_allclose(hmm_forward(log_start, log_trans, log_frame).log_likelihood,
                               log_likelihood, rtol=1e-12)  # fmt: skip


@pytest.mark.parametrize("offset", [-735.0, -740.0])
def test_a_state_passing_through_the_subnormal_range_keeps_its_precision(offset):
    """State 1 is exp(offset) relative after row 0: subnormal, with only a few
    significant bits; state 0 then falls 1400 nats behind."""
    log_start, log_trans = eye_model()
    log_frame = np.array([[0.0, offset], [-700.0, 0.0], [-700.0, 0.0]])
    log_likelihood, posteriors, _, _, _ = brute_force_posteriors(log_start, log_trans, log_frame)
    result = hmm_forward_backward(log_start, log_trans, log_frame)
    np.testing.assert_allclose(result.log_likelihood, log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(result.posteriors, posteriors, atol=1e-12)
    np.testing.assert_allclose(hmm_forward(log_start, log_trans, log_frame).log_likelihood,
                               log_likelihood, rtol=1e-12)  # fmt: skip




@pytest.mark.parametrize("better", [300.0, 500.0])
def test_a_state_not_reachable_yet_with_far_better_emissions_gives_no_nan(better):
    """The last of 5 left-right states is 300-500 nats better in rows 1-3,
    where it cannot be reached yet: its backward message overflows, and
    0 * inf used to make the posteriors NaN."""
    startprob, transmat = left_right(5)
    with np.errstate(divide="ignore"):
        log_start, log_trans = np.log(startprob), np.log(transmat)
    log_frame = np.zeros((8, 5))
    log_frame[1:4, 4] = better
    log_likelihood, posteriors, counts, _, _ = brute_force_posteriors(
        log_start, log_trans, log_frame
    )
    result = hmm_forward_backward(log_start, log_trans, log_frame)
    assert not np.isnan(result.posteriors).any()
    np.testing.assert_allclose(result.log_likelihood, log_likelihood, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(result.posteriors, posteriors, atol=1e-12)
    np.testing.assert_allclose(result.transition_counts, counts, atol=1e-12)


def test_a_misaligned_left_right_sequence_is_exact():
    """Data from the last of 30 left-right states while the chain must start in
    the first: the best reachable state's emissions fall below the double
    range for dozens of rows (the unchecked scaled recursion got a
    log-likelihood more than twice too low)."""
    rng = np.random.default_rng(1)
    n_states, n_features = 30, 13
    startprob, transmat = left_right(n_states, stay=0.9)
    means = rng.normal(scale=2.0, size=(n_states, n_features))
    X = means[-1] + rng.normal(size=(300, n_features))
    log_frame = -0.5 * ((X[:, None, :] - means[None]) ** 2).sum(axis=2)
    with np.errstate(divide="ignore"):
        log_start, log_trans = np.log(startprob), np.log(transmat)
    log_likelihood, posteriors, counts = normalised_log_space_reference(
        log_start, log_trans, log_frame
    )
    result = hmm_forward_backward(log_start, log_trans, log_frame)
    np.testing.assert_allclose(result.log_likelihood, log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(result.posteriors, posteriors, atol=1e-10)
    np.testing.assert_allclose(result.transition_counts, counts, atol=1e-9)
    np.testing.assert_allclose(hmm_forward(log_start, log_trans, log_frame).log_likelihood,
                               log_likelihood, rtol=1e-12)  # fmt: skip


# -- the fast path stays fast where it is exact ---------------------------------


class CountingKernels:
    """The HMM kernels, counting the sequences sent to the log-space redo."""

    def __init__(self, kernels):
        self._kernels = kernels
        self.redone = 0

    def __getattr__(self, name):
        function = getattr(self._kernels, name)
        if not name.startswith("log_"):
            return function

        def counted(*arguments):
            self.redone += len(arguments[5])
            return function(*arguments)

        return counted


@pytest.fixture
def counting(monkeypatch):
    kernels = CountingKernels(inference_hmm._hmm)
    monkeypatch.setattr(inference_hmm, "_hmm", kernels)
    return kernels


def test_benign_hard_inputs_stay_on_the_fast_path(counting):
    """Left-right models (states unreachable at first, states left behind
    whose probability underflows), and emissions thousands of nats apart with
    a dense transition matrix: exact without the redo."""
    rng = np.random.default_rng(0)
    n_states, n_features = 16, 40
    startprob, transmat = left_right(n_states, stay=0.95)
    model = GaussianHMM(n_states, init_params="", params="")
    model.startprob_, model.transmat_ = startprob, transmat
    model.means_ = rng.normal(scale=5.0, size=(n_states, n_features))
    model.covars_ = np.ones((n_states, n_features))
    X = np.concatenate([model.sample(960, random_state=seed)[0] for seed in range(5)])
    log_frame = model._compute_log_likelihood(X)
    assert np.median(log_frame.max(axis=1) - log_frame.min(axis=1)) > 700
    model.score(X, lengths=[960] * 5)
    model.predict_proba(X, lengths=[960] * 5)
    dense = GaussianHMM(n_states, init_params="", params="")
    dense.startprob_ = np.full(n_states, 1 / n_states)
    dense.transmat_ = np.full((n_states, n_states), 0.05 / (n_states - 1))
    np.fill_diagonal(dense.transmat_, 0.95)
    dense.means_, dense.covars_ = model.means_, model.covars_
    dense.score(X, lengths=[960] * 5)
    dense.predict_proba(X, lengths=[960] * 5)
    assert counting.redone == 0


def test_only_the_flagged_sequence_is_redone(counting):
    log_start, log_trans = eye_model()
    hard = np.array([[0.0, -800.0], [-700.0, 0.0], [-700.0, 0.0]])
    ordinary = np.random.default_rng(3).normal(size=(5, 2))
    both = hmm_forward_backward(log_start, log_trans, np.vstack([ordinary, hard, ordinary]),
                            lengths=[5, 3, 5])  # fmt: skip
    assert counting.redone == 1
    expected = [
        logsumexp(brute_force(log_start, log_trans, part)[1]) for part in (ordinary, hard, ordinary)
    ]
    np.testing.assert_allclose(both.sequence_log_likelihood, expected, rtol=1e-12)


# -- streams: forward-only smoothing in chunks on hard inputs -------------------


def stream_in_chunks(log_start, log_trans, log_frame, features, cut):
    """forward_smoothing over rows [:cut] then [cut:], the message carried."""
    from skseq.inference import hmm_forward_smoothing

    first = hmm_forward_smoothing(log_start, log_trans, log_frame[:cut], features[:cut])
    if cut == log_frame.shape[0]:
        return first.log_likelihood, first.carried
    second = hmm_forward_smoothing(
        log_start, log_trans, log_frame[cut:], features[cut:], carried=first.carried
    )
    return first.log_likelihood + second.log_likelihood, second.carried


@st.composite
def wide_models(draw, max_states, max_rows):
    """Log-emissions spread over hundreds of nats with zeros in the transitions: the
    scaled recursions' shifted emissions underflow on the path with the mass."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_states = draw(st.integers(2, max_states))
    n_rows = draw(st.integers(2, max_rows))
    start = rng.dirichlet(np.ones(n_states))
    trans = rng.dirichlet(np.ones(n_states), size=n_states)
    trans[rng.random((n_states, n_states)) < 0.3] = 0.0
    trans[np.arange(n_states), np.arange(n_states)] += 1e-3
    if draw(st.booleans()):
        start[rng.integers(n_states)] = 0.0
    start /= start.sum()
    trans /= trans.sum(axis=1, keepdims=True)
    spread = draw(st.sampled_from([1.0, 100.0, 800.0, 1500.0]))
    with np.errstate(divide="ignore"):
        return np.log(start), np.log(trans), rng.normal(size=(n_rows, n_states)) * spread


@HARD
@given(
    model=st.one_of(
        hard_models(max_states=4, min_rows=1, max_rows=7, max_paths=2048),
        wide_models(max_states=3, max_rows=6),
    ),
    cut_fraction=st.floats(0.0, 1.0),
)
def test_forward_smoothing_in_chunks_matches_enumeration_on_hard_inputs(model, cut_fraction):
    """Where enumeration gives a finite answer, the stream gives it too (the fast
    path, or its log-space redo), whatever the chunk boundary; zero-probability
    data raise."""
    log_start, log_trans, log_frame = model
    n_rows, n_states = log_frame.shape
    cut = max(1, round(cut_fraction * n_rows))
    log_likelihood, posteriors, counts, _, _ = brute_force_posteriors(
        log_start, log_trans, log_frame
    )
    features = np.random.default_rng(n_rows).normal(size=(n_rows, n_states, 2))
    if log_likelihood == -np.inf:
        with pytest.raises(ValueError, match="probability zero"):
            stream_in_chunks(log_start, log_trans, log_frame, features, cut)
        return
    streamed_ll, carried = stream_in_chunks(log_start, log_trans, log_frame, features, cut)
    assert_log_likelihood(streamed_ll, log_likelihood, log_frame)
    statistics = carried.statistics()
    np.testing.assert_allclose(statistics.start_counts, posteriors[0], rtol=0, atol=1e-9)
    np.testing.assert_allclose(statistics.transition_counts, counts, rtol=0, atol=1e-9)
    expected_sums = np.einsum("tj,tjp->jp", posteriors, features)
    np.testing.assert_allclose(statistics.feature_sums, expected_sums, rtol=0, atol=1e-8)


def test_an_underflowing_chunk_is_redone_in_log_space():
    """The state that carries all the mass has emissions 800 nats below the
    other's: the fast path's shifted emissions underflow to zero and its
    redo in log space gives the exact answer instead of an error."""
    from skseq.inference import hmm_forward_backward, hmm_forward_smoothing

    with np.errstate(divide="ignore"):
        log_start = np.log([1.0, 0.0])
        log_trans = np.log([[1.0, 0.0], [0.5, 0.5]])
    log_frame = np.array([[-800.0, 0.0]] * 5 + [[0.0, -3.0]] * 5)
    features = np.ones((10, 1))
    whole = hmm_forward_backward(log_start, log_trans, log_frame)
    streamed = hmm_forward_smoothing(log_start, log_trans, log_frame[:4], features[:4])
    streamed = hmm_forward_smoothing(
        log_start, log_trans, log_frame[4:], features[4:], carried=streamed.carried
    )
    total = hmm_forward_smoothing(log_start, log_trans, log_frame[:4], features[:4]).log_likelihood
    np.testing.assert_allclose(total + streamed.log_likelihood, whole.log_likelihood, rtol=1e-12)
    statistics = streamed.carried.statistics()
    np.testing.assert_allclose(statistics.feature_sums[:, 0], whole.posteriors.sum(axis=0))
    np.testing.assert_allclose(statistics.transition_counts, whole.transition_counts, atol=1e-12)


def test_the_log_space_redo_equals_the_fast_path_on_ordinary_inputs():
    rng = np.random.default_rng(5)
    n_rows, n_states = 40, 3
    startprob = rng.dirichlet(np.ones(n_states))
    transmat = rng.dirichlet(np.ones(n_states), size=n_states)
    log_frame = rng.normal(size=(n_rows, n_states)) * 3
    features = rng.normal(size=(n_rows, n_states, 2))
    fast = inference_hmm._forward_smoothing_rows(startprob, transmat, log_frame[:15], features[:15])
    slow = inference_hmm._log_forward_smoothing_rows(
        startprob, transmat, log_frame[:15], features[:15]
    )
    fast = inference_hmm._forward_smoothing_rows(
        startprob, transmat, log_frame[15:], features[15:], fast.carried
    )
    slow = inference_hmm._log_forward_smoothing_rows(
        startprob, transmat, log_frame[15:], features[15:], slow.carried
    )
    np.testing.assert_allclose(slow.log_likelihood, fast.log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(slow.log_predictive, fast.log_predictive, rtol=1e-11)
    for slow_part, fast_part in zip(slow.carried, fast.carried):
        np.testing.assert_allclose(slow_part, fast_part, rtol=1e-10, atol=1e-12)


# -- counts with log-emissions of extreme magnitude ---------------------------


def exact_enumeration(log_start, log_trans, log_frame):
    """Posteriors and transition counts by enumerating the paths, exactly.

    Each path's log-probability is summed in rational arithmetic (the inputs
    are doubles, hence exact rationals), and only its difference from the
    best path's is rounded, to a few ulps of a number that matters only when
    it is below ~750: the weights are then correct to ~1e-13 relative however
    large the log-emissions, which no method in floating point log space is
    guaranteed to match for the log-likelihood itself.
    """
    from fractions import Fraction
    from math import exp, fsum

    n_rows, n_states = log_frame.shape
    start = [Fraction(v) if np.isfinite(v) else None for v in log_start]
    trans = [[Fraction(v) if np.isfinite(v) else None for v in row] for row in log_trans]
    frame = [[Fraction(v) if np.isfinite(v) else None for v in row] for row in log_frame]
    paths, logs = [], []
    for path in itertools.product(range(n_states), repeat=n_rows):
        terms = [start[path[0]]]
        terms += [trans[a][b] for a, b in zip(path[:-1], path[1:])]
        terms += [frame[t][state] for t, state in enumerate(path)]
        if any(term is None for term in terms):
            continue
        paths.append(path)
        logs.append(sum(terms))
    if not logs:  # every path has probability zero
        return None, None
    best = max(logs)
    weights = [exp(float(value - best)) for value in logs]
    total = fsum(weights)
    posteriors = np.zeros((n_rows, n_states))
    counts = np.zeros((n_states, n_states))
    for t in range(n_rows):
        for state in range(n_states):
            posteriors[t, state] = fsum(w for p, w in zip(paths, weights) if p[t] == state)
        if t + 1 < n_rows:
            for a, b in itertools.product(range(n_states), repeat=2):
                counts[a, b] += fsum(
                    w for p, w in zip(paths, weights) if p[t] == a and p[t + 1] == b
                )
    return posteriors / total, counts / total


ISSUE_17_MODEL = (
    np.log([1 / 3] * 3),
    np.log([[0.0, 0.5, 0.5], [0.5, 0.0, 0.5], [1.0, 0.0, 0.0]]),
    np.array([[-6e14, -5.5, -2.4e11], [-9e14, -5.6, -3.5e14]]),
)


def test_counts_with_huge_log_emissions_are_exact():
    """The issue's reproducer: transition_counts[1, 2] was 0.994368734791146 (exact 1).

    The log-space redo formed each pair's posterior as exp(log alpha + log A +
    log_frame - log c) with log_frame and log c near -3.5e14: their
    difference carried eps * 3.5e14 = 0.06 nats of rounding.
    """
    with np.errstate(divide="ignore"):
        log_start, log_trans, log_frame = ISSUE_17_MODEL
    result = hmm_forward_backward(log_start, log_trans, log_frame)
    expected = np.zeros((3, 3))
    expected[1, 2] = 1.0
    np.testing.assert_allclose(result.transition_counts, expected, rtol=1e-12, atol=1e-12)
    posteriors, counts = exact_enumeration(log_start, log_trans, log_frame)
    np.testing.assert_allclose(result.transition_counts, counts, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(result.posteriors, posteriors, rtol=1e-12, atol=1e-12)


@st.composite
def extreme_models(draw):
    """Small models whose log-emissions mix ordinary values and magnitudes up to 1e16."""
    n_states = draw(st.integers(1, 3))
    n_rows = draw(st.integers(2, 6))
    magnitude = st.one_of(
        st.floats(-60.0, 0.0),
        st.floats(-1e16, -1e3),
        st.sampled_from([-6e14, -9e14, -2.4e11, -3.5e14, -2.7e16]),
    )
    log_frame = np.array(
        draw(st.lists(magnitude, min_size=n_rows * n_states, max_size=n_rows * n_states))
    ).reshape(n_rows, n_states)
    probability = st.sampled_from([0.0, 0.0, 0.1, 0.5, 1.0, 3.0])
    trans = np.array(
        draw(st.lists(probability, min_size=n_states**2, max_size=n_states**2))
    ).reshape(n_states, n_states)
    for row in trans:
        if not row.any():
            row[draw(st.integers(0, n_states - 1))] = 1.0
    start = np.array(draw(st.lists(probability, min_size=n_states, max_size=n_states)))
    if not start.any():
        start[0] = 1.0
    with np.errstate(divide="ignore"):
        log_start = np.log(start / start.sum())
        log_trans = np.log(trans / trans.sum(axis=1, keepdims=True))
    return log_start, log_trans, log_frame


@settings(max_examples=300, deadline=None, derandomize=True)
@given(extreme_models())
def test_counts_with_extreme_log_emissions_match_exact_enumeration(model):
    """Counts sum to T - 1 and agree with exact enumeration to 1e-9, on either path.

    (A fuzz case with log-likelihood -2.7e16 had counts summing to 108.26
    instead of T - 1 = 105.)
    """
    log_start, log_trans, log_frame = model
    posteriors, counts = exact_enumeration(log_start, log_trans, log_frame)
    if posteriors is None:  # probability zero: nothing to count
        return
    result = hmm_forward_backward(log_start, log_trans, log_frame)
    n_rows = log_frame.shape[0]
    np.testing.assert_allclose(result.transition_counts.sum(), n_rows - 1, rtol=1e-12)
    np.testing.assert_allclose(result.transition_counts, counts, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(result.posteriors, posteriors, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(result.start_counts, posteriors[0], rtol=1e-9, atol=1e-9)


def test_counts_keep_a_log_transition_added_to_a_huge_log_alpha():
    """The fuzz case that gave transition_counts[0] = [0, 0.9908, 0.0092] (exact
    [0, 0.9820, 0.0180]): the two paths 1-0-1-0 and 1-0-2-1 differ only by the
    two huge log-emissions, 4 nats (2 ulps) apart.  log alpha of state 2 at row
    2 is -1e16 while its log prior is log 0.5; their difference, and log beta
    (+1e16) added to it, must keep the 0.69 that the ulp of 1e16 (2) rounds away.
    """
    with np.errstate(divide="ignore"):
        log_start = np.log([0.0, 1.0, 0.0])
        log_trans = np.log([[0.0, 0.5, 0.5], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    log_frame = np.zeros((4, 3))
    log_frame[2, 2] = -9999999999998424.0
    log_frame[3, 0] = -9999999999998420.0
    posteriors, counts = exact_enumeration(log_start, log_trans, log_frame)
    np.testing.assert_allclose(counts[0], [0.0, 1 / (1 + np.exp(-4)), 1 / (1 + np.exp(4))],
                               rtol=1e-12)
    result = hmm_forward_backward(log_start, log_trans, log_frame)
    np.testing.assert_allclose(result.transition_counts, counts, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(result.posteriors, posteriors, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(result.start_counts, posteriors[0], rtol=1e-12, atol=1e-12)


def test_counts_sum_to_rows_minus_one_per_sequence_with_huge_log_emissions():
    with np.errstate(divide="ignore"):
        log_start, log_trans, log_frame = ISSUE_17_MODEL
    rng = np.random.default_rng(17)
    ordinary = rng.uniform(-5.0, 0.0, (5, 3))
    stacked = np.vstack([log_frame, ordinary, log_frame * 40.0])
    result = hmm_forward_backward(log_start, log_trans, stacked, lengths=[2, 5, 2])
    np.testing.assert_allclose(result.transition_counts.sum(), 1 + 4 + 1, rtol=1e-12)
    expected = sum(
        exact_enumeration(log_start, log_trans, part)[1]
        for part in (log_frame, ordinary, log_frame * 40.0)
    )
    np.testing.assert_allclose(result.transition_counts, expected, rtol=1e-9, atol=1e-12)
