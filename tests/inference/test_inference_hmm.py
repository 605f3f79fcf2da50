"""Forward-backward, Viterbi and forward-only smoothing against brute-force enumeration of
all paths; sampling of state paths."""


import numpy as np
import pytest
from hmm_references import brute_force, brute_force_posteriors, left_right_underflow_frames
from scipy.special import logsumexp

from skseq.inference import (
    hmm_forward,
    hmm_forward_backward,
    hmm_forward_smoothing,
    hmm_viterbi,
    sample_hmm_states,
)


def random_model(rng, n_states, n_samples, sparsity=False):
    startprob = rng.dirichlet(np.ones(n_states))
    transmat = rng.dirichlet(np.ones(n_states), size=n_states)
    if sparsity:
        transmat[0, -1] = 0.0
        transmat[0] /= transmat[0].sum()
    log_frameprob = rng.normal(scale=3.0, size=(n_samples, n_states))
    with np.errstate(divide="ignore"):
        return np.log(startprob), np.log(transmat), log_frameprob






@pytest.mark.parametrize("n_states,n_samples", [(1, 4), (2, 1), (2, 7), (3, 6), (4, 5)])
@pytest.mark.parametrize("sparsity", [False, True])
def test_forward_backward_matches_enumeration(n_states, n_samples, sparsity):
    rng = np.random.default_rng(n_states * 100 + n_samples)
    log_start, log_trans, log_frame = random_model(
        rng, n_states, n_samples, sparsity and n_states > 1
    )
    log_likelihood, posteriors, counts, _, _ = brute_force_posteriors(
        log_start, log_trans, log_frame
    )
    result = hmm_forward_backward(log_start, log_trans, log_frame)
    np.testing.assert_allclose(result.log_likelihood, log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(result.posteriors, posteriors, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(result.transition_counts, counts, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(result.start_counts, posteriors[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(result.log_predictive.sum(), log_likelihood, rtol=1e-12)


def test_filtered_matches_enumeration_of_prefixes():
    rng = np.random.default_rng(1)
    log_start, log_trans, log_frame = random_model(rng, 3, 5)
    result = hmm_forward(log_start, log_trans, log_frame)
    for t in range(1, 6):
        _, posteriors, _, _, _ = brute_force_posteriors(log_start, log_trans, log_frame[:t])
        np.testing.assert_allclose(result.filtered[t - 1], posteriors[t - 1], rtol=1e-12)
        prefix_ll = brute_force_posteriors(log_start, log_trans, log_frame[:t])[0]
        np.testing.assert_allclose(result.log_predictive[:t].sum(), prefix_ll, rtol=1e-12)


@pytest.mark.parametrize("n_states,n_samples", [(2, 1), (2, 8), (3, 6), (4, 5)])
def test_viterbi_matches_enumeration(n_states, n_samples):
    rng = np.random.default_rng(7 + n_states + n_samples)
    log_start, log_trans, log_frame = random_model(rng, n_states, n_samples, sparsity=True)
    paths, log_joint = brute_force(log_start, log_trans, log_frame)
    best = np.argmax(log_joint)
    log_prob, states = hmm_viterbi(log_start, log_trans, log_frame)
    np.testing.assert_allclose(log_prob, log_joint[best], rtol=1e-12)
    np.testing.assert_array_equal(states, paths[best])


def test_several_sequences_equal_separate_calls():
    rng = np.random.default_rng(3)
    log_start, log_trans, log_frame = random_model(rng, 3, 12)
    lengths = [5, 1, 6]
    whole = hmm_forward_backward(log_start, log_trans, log_frame, lengths=lengths)
    log_prob, states = hmm_viterbi(log_start, log_trans, log_frame, lengths=lengths)
    start = 0
    total_vit = 0.0
    for i, length in enumerate(lengths):
        part = hmm_forward_backward(log_start, log_trans, log_frame[start : start + length])
        np.testing.assert_allclose(
            whole.sequence_log_likelihood[i], part.log_likelihood, rtol=1e-12
        )
        np.testing.assert_allclose(
            whole.posteriors[start : start + length], part.posteriors, atol=1e-13
        )
        lp, st = hmm_viterbi(log_start, log_trans, log_frame[start : start + length])
        np.testing.assert_array_equal(states[start : start + length], st)
        total_vit += lp
        start += length
    np.testing.assert_allclose(log_prob, total_vit, rtol=1e-12)


def test_no_underflow_at_ten_million_rows():
    """Emission log-probabilities around -1000 and T = 10^7: all finite, exact counts."""
    rng = np.random.default_rng(0)
    n_samples = 10_000_000
    log_start, log_trans, _ = random_model(rng, 2, 1)
    log_frame = rng.normal(size=(n_samples, 2))
    log_frame -= 1000.0
    result = hmm_forward_backward(log_start, log_trans, log_frame)
    assert np.isfinite(result.log_likelihood)
    assert result.log_likelihood < -999.0 * n_samples
    assert np.all(np.isfinite(result.posteriors))
    np.testing.assert_allclose(result.posteriors.sum(axis=1), 1.0, atol=1e-10)
    np.testing.assert_allclose(result.transition_counts.sum(), n_samples - 1, rtol=1e-9)
    del result
    log_prob, states = hmm_viterbi(log_start, log_trans, log_frame)
    assert np.isfinite(log_prob) and states.shape == (n_samples,)


def test_impossible_sequence_gives_minus_inf_without_nan():
    log_start = np.array([0.0, -np.inf])
    log_trans = np.array([[0.0, -np.inf], [-np.inf, 0.0]])
    log_frame = np.array([[0.0, 0.0], [-np.inf, 0.0]])
    result = hmm_forward_backward(log_start, log_trans, log_frame)
    assert result.log_likelihood == -np.inf
    assert not np.isnan(result.posteriors).any()
    assert not np.isnan(result.transition_counts).any()


def test_inputs_are_not_modified():
    rng = np.random.default_rng(5)
    arrays = random_model(rng, 3, 6)
    copies = [a.copy() for a in arrays]
    hmm_forward_backward(*arrays)
    hmm_viterbi(*arrays)
    for a, b in zip(arrays, copies):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda s, t, f: (s[:-1], t, f), "log_transmat must have shape"),
        (lambda s, t, f: (s, t[:, :-1], f), "log_transmat must have shape"),
        (lambda s, t, f: (s, t, f[:, :-1]), "log_frameprob must have shape"),
        (lambda s, t, f: (s + 1.0, t, f), "must sum to 1"),
        (lambda s, t, f: (s, t + 0.1, f), "must sum to 1"),
        (lambda s, t, f: (s, t, np.where(f > 0, np.nan, f)), "contains NaN"),
        (lambda s, t, f: (s, t, np.where(f > 0, np.inf, f)), r"contains \+inf"),
        (lambda s, t, f: (s, t, f[:0]), "no rows"),
    ],
)
def test_bad_input(change, message):
    rng = np.random.default_rng(2)
    arrays = change(*random_model(rng, 3, 6))
    with pytest.raises(ValueError, match=message):
        hmm_forward_backward(*arrays)


@pytest.mark.parametrize("function", [hmm_forward, hmm_forward_backward, hmm_viterbi])
@pytest.mark.parametrize("argument", [0, 1, 2])
def test_complex_input_is_a_type_error(function, argument):
    arrays = list(random_model(np.random.default_rng(0), 2, 4))
    name = ["log_startprob", "log_transmat", "log_frameprob"][argument]
    arrays[argument] = arrays[argument] + 0j
    with pytest.raises(TypeError, match=f"{name} must be real"):
        function(*arrays)


def test_bad_lengths():
    rng = np.random.default_rng(2)
    arrays = random_model(rng, 3, 6)
    with pytest.raises(ValueError, match="sum to 5"):
        hmm_forward_backward(*arrays, lengths=[2, 3])
    with pytest.raises(ValueError, match="positive"):
        hmm_forward_backward(*arrays, lengths=[6, 0])


def test_left_right_underflow_is_redone_in_log_space():
    """State 1's relative mass falls to e^-1600 (below any double) and is then the
    only possible state: the scaled recursion loses it, the log-space redo is exact."""
    log_start, log_trans, log_frame = left_right_underflow_frames()
    log_likelihood, posteriors, counts, paths, log_joint = brute_force_posteriors(
        log_start, log_trans, log_frame
    )
    assert np.isfinite(log_likelihood)
    result = hmm_forward_backward(log_start, log_trans, log_frame)
    np.testing.assert_allclose(result.log_likelihood, log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(result.posteriors, posteriors, atol=1e-12)
    np.testing.assert_allclose(result.transition_counts, counts, atol=1e-12)
    np.testing.assert_allclose(result.log_predictive.sum(), log_likelihood, rtol=1e-12)
    filtered = hmm_forward(log_start, log_trans, log_frame)
    np.testing.assert_allclose(filtered.log_likelihood, log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(filtered.filtered[-1], [0.0, 1.0])
    # Alongside an ordinary sequence: only the underflowing one is redone.
    rng = np.random.default_rng(8)
    ordinary = rng.normal(size=(6, 2))
    both = hmm_forward_backward(
        log_start, log_trans, np.vstack([ordinary, log_frame]), lengths=[6, 5]
    )
    alone = hmm_forward_backward(log_start, log_trans, ordinary)
    np.testing.assert_allclose(both.sequence_log_likelihood, [alone.log_likelihood, log_likelihood])
    np.testing.assert_allclose(both.transition_counts, alone.transition_counts + counts, atol=1e-12)


def test_subnormal_start_probability():
    log_start = np.array([0.0, -720.0])  # exp(-720) is a subnormal double
    log_start[0] = np.log1p(-np.exp(-720.0))
    log_trans = np.log([[0.5, 0.5], [0.5, 0.5]])
    with np.errstate(divide="ignore"):
        log_frame = np.log([[0.0, 1.0], [1.0, 1.0]])
    log_likelihood = brute_force_posteriors(log_start, log_trans, log_frame)[0]
    np.testing.assert_allclose(
        hmm_forward_backward(log_start, log_trans, log_frame).log_likelihood, log_likelihood
    )


def log_space_reference(log_start, log_trans, log_frame):
    """Forward-backward in log space with numpy (no scaling): a second method."""
    n_samples, n_states = log_frame.shape
    log_alpha = np.empty((n_samples, n_states))
    log_beta = np.zeros((n_samples, n_states))
    log_alpha[0] = log_start + log_frame[0]
    for t in range(1, n_samples):
        log_alpha[t] = logsumexp(log_alpha[t - 1][:, None] + log_trans, axis=0) + log_frame[t]
    for t in range(n_samples - 2, -1, -1):
        log_beta[t] = logsumexp(log_trans + log_frame[t + 1] + log_beta[t + 1], axis=1)
    log_likelihood = logsumexp(log_alpha[-1])
    posteriors = np.exp(log_alpha + log_beta - log_likelihood)
    counts = np.zeros((n_states, n_states))
    for t in range(n_samples - 1):
        counts += np.exp(
            log_alpha[t][:, None] + log_trans + log_frame[t + 1] + log_beta[t + 1] - log_likelihood
        )
    return log_likelihood, posteriors, counts


# The kernels' K x K products take columns 16, 8 and 4 at a time (AVX2
# build) or 4 at a time (portable), then one by one; 300 rows take the carried
# forward message through many rescalings (its mass falls below 2^-64 every
# few dozen rows).
@pytest.mark.parametrize("n_states", [1, 3, 4, 5, 13, 28, 33])
def test_forward_backward_matches_a_log_space_reference(n_states):
    rng = np.random.default_rng(n_states)
    log_start, log_trans, log_frame = random_model(rng, n_states, 300, sparsity=n_states > 1)
    log_scale = hmm_forward(log_start, log_trans, log_frame).log_predictive - log_frame.max(axis=1)
    if n_states > 1:
        assert log_scale.sum() < 5 * np.log(2.0**-64)  # at least five rescalings
    log_likelihood, posteriors, counts = log_space_reference(log_start, log_trans, log_frame)
    result = hmm_forward_backward(log_start, log_trans, log_frame)
    np.testing.assert_allclose(result.log_likelihood, log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(result.posteriors, posteriors, atol=1e-12)
    np.testing.assert_allclose(result.transition_counts, counts, atol=1e-10)
    filtered = hmm_forward(log_start, log_trans, log_frame)
    np.testing.assert_allclose(filtered.log_likelihood, log_likelihood, rtol=1e-12)


def viterbi_reference(log_start, log_trans, log_frame):
    """Max-sum in numpy; argmax takes the lowest state on ties."""
    n_samples, n_states = log_frame.shape
    delta = log_start + log_frame[0]
    backpointer = np.zeros((n_samples, n_states), dtype=int)
    for t in range(1, n_samples):
        candidates = delta[:, None] + log_trans
        backpointer[t] = np.argmax(candidates, axis=0)
        delta = candidates[backpointer[t], np.arange(n_states)] + log_frame[t]
    states = np.empty(n_samples, dtype=int)
    states[-1] = np.argmax(delta)
    for t in range(n_samples - 1, 0, -1):
        states[t - 1] = backpointer[t, states[t]]
    return delta.max(), states


# From 8 states the AVX2 build's Viterbi compares four columns at a time.
@pytest.mark.parametrize("n_states", [3, 8, 13, 16])
def test_viterbi_matches_a_reference_with_zeros_and_ties(n_states):
    rng = np.random.default_rng(n_states)
    log_start, log_trans, log_frame = random_model(rng, n_states, 200, sparsity=True)
    log_frame[50:60] = 0.0  # rows that favour no state
    log_frame[100] = -np.inf
    log_frame[100, 1] = 0.0  # one possible state
    expected_log_prob, expected_states = viterbi_reference(log_start, log_trans, log_frame)
    log_prob, states = hmm_viterbi(log_start, log_trans, log_frame)
    np.testing.assert_allclose(log_prob, expected_log_prob, rtol=1e-12)
    np.testing.assert_array_equal(states, expected_states)
    # All ties: uniform transitions and identical rows give state 0 throughout.
    uniform = np.full((n_states, n_states), -np.log(n_states))
    _, states = hmm_viterbi(uniform[0], uniform, np.zeros((20, n_states)))
    np.testing.assert_array_equal(states, 0)


# -- forward-only smoothing and sampling ----------------------------------------


@pytest.mark.parametrize("n_states,n_samples", [(1, 3), (2, 6), (3, 5)])
@pytest.mark.parametrize("chunk", [1, 2, 6])
def test_forward_smoothing_in_chunks_matches_enumeration(n_states, n_samples, chunk):
    """The message after the last chunk holds exactly the smoothed statistics
    of the whole sequence: start, transition counts and feature sums."""
    rng = np.random.default_rng(10 * n_states + n_samples)
    log_start, log_trans, log_frame = random_model(rng, n_states, n_samples)
    features = rng.normal(size=(n_samples, n_states, 2))
    log_likelihood, posteriors, counts, _, _ = brute_force_posteriors(
        log_start, log_trans, log_frame
    )
    carried, total = None, 0.0
    for start in range(0, n_samples, chunk):
        rows = slice(start, start + chunk)
        result = hmm_forward_smoothing(
            log_start, log_trans, log_frame[rows], features[rows], carried=carried
        )
        total += result.log_likelihood
        np.testing.assert_allclose(result.log_predictive.sum(), result.log_likelihood)
        carried = result.carried
    statistics = carried.statistics()
    np.testing.assert_allclose(total, log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(statistics.start_counts, posteriors[0], atol=1e-12)
    np.testing.assert_allclose(statistics.transition_counts, counts, atol=1e-12)
    expected = np.einsum("ti,tip->ip", posteriors, features)
    np.testing.assert_allclose(statistics.feature_sums, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(carried.filtered, posteriors[-1], atol=1e-12)


def test_forward_smoothing_leaves_its_message_and_inputs_unchanged():
    rng = np.random.default_rng(0)
    log_start, log_trans, log_frame = random_model(rng, 3, 8)
    features = rng.normal(size=(8, 2))  # the same features for every state
    first = hmm_forward_smoothing(log_start, log_trans, log_frame[:4], features[:4])
    kept = [part.copy() for part in first.carried]
    copies = [array.copy() for array in (log_start, log_trans, log_frame, features)]
    again = [
        hmm_forward_smoothing(
            log_start, log_trans, log_frame[4:], features[4:], carried=first.carried
        )
        for _ in range(2)
    ]
    for part, before in zip(first.carried, kept):
        np.testing.assert_array_equal(part, before)
    for array, before in zip((log_start, log_trans, log_frame, features), copies):
        np.testing.assert_array_equal(array, before)
    for part, other in zip(again[0].carried, again[1].carried):
        np.testing.assert_array_equal(part, other)


@pytest.mark.parametrize(
    "change, error, message",
    [
        (dict(features=np.ones((3, 2, 1, 1))), ValueError, "features must have shape"),
        (dict(features=np.full((4, 1), np.nan)), ValueError, "features contains NaN"),
        (dict(carried=(np.ones(2),)), TypeError, "HMMStreamState"),
        (dict(carried="message"), TypeError, "HMMStreamState"),
        (dict(carried=False), TypeError, "HMMStreamState"),
    ],
)
def test_forward_smoothing_bad_input(change, error, message):
    arguments = dict(
        log_startprob=np.log([0.5, 0.5]),
        log_transmat=np.log([[0.9, 0.1], [0.2, 0.8]]),
        log_frameprob=np.zeros((4, 2)),
        features=np.ones((4, 1)),
    )
    arguments.update(change)
    with pytest.raises(error, match=message):
        hmm_forward_smoothing(**arguments)


def test_forward_smoothing_checks_the_carried_message():
    log_start, log_trans = np.log([0.5, 0.5]), np.log([[0.9, 0.1], [0.2, 0.8]])
    first = hmm_forward_smoothing(log_start, log_trans, np.zeros((3, 2)), np.ones((3, 1)))
    wrong_size = first.carried._replace(features=np.zeros((2, 2, 3)))
    with pytest.raises(ValueError, match=r"carried.features must have shape \(2, 2, 1\)"):
        hmm_forward_smoothing(
            log_start, log_trans, np.zeros((1, 2)), np.ones((1, 1)), carried=wrong_size
        )
    not_probabilities = first.carried._replace(filtered=np.array([0.7, 0.7]))
    with pytest.raises(ValueError, match="carried.filtered must be a probability vector"):
        hmm_forward_smoothing(
            log_start, log_trans, np.zeros((1, 2)), np.ones((1, 1)), carried=not_probabilities
        )


def test_forward_smoothing_of_impossible_data_is_an_error():
    log_start = np.array([0.0, -np.inf])
    log_trans = np.array([[0.0, -np.inf], [-np.inf, 0.0]])
    log_frame = np.array([[0.0, 0.0], [-np.inf, 0.0]])  # state 0 cannot emit row 1
    with pytest.raises(ValueError, match="probability zero"):
        hmm_forward_smoothing(log_start, log_trans, log_frame, np.ones((2, 1)))


def test_sample_states_follows_the_chain():
    transmat = np.array([[0.9, 0.1, 0.0], [0.0, 0.5, 0.5], [0.3, 0.0, 0.7]])
    states = sample_hmm_states([0.0, 0.0, 1.0], transmat, 20_000, random_state=0).states
    assert states.dtype == np.intp and states[0] == 2
    counts = np.zeros((3, 3))
    np.add.at(counts, (states[:-1], states[1:]), 1)
    empirical = counts / counts.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(empirical, transmat, atol=0.02)
    assert counts[transmat == 0].sum() == 0  # impossible transitions never drawn
    np.testing.assert_array_equal(
        states, sample_hmm_states([0.0, 0.0, 1.0], transmat, 20_000, random_state=0).states
    )


@pytest.mark.parametrize(
    "startprob, transmat, n_samples, error, message",
    [
        ([0.5, 0.5], [[1.0, 0.0]], 3, ValueError, r"transmat must have shape \(2, 2\)"),
        ([0.7, 0.7], np.eye(2), 3, ValueError, "startprob must sum to 1"),
        ([1.5, -0.5], np.eye(2), 3, ValueError, "startprob must hold probabilities"),
        ([0.5, 0.5], [[0.5, 0.6], [0.5, 0.5]], 3, ValueError, "transmat must sum to 1"),
        ([0.5, 0.5], np.eye(2), 0, ValueError, "n_samples must be >= 1"),
        ([0.5, 0.5], np.eye(2), 2.0, TypeError, "n_samples must be an integer"),
    ],
)
def test_sample_states_bad_input(startprob, transmat, n_samples, error, message):
    with pytest.raises(error, match=message):
        sample_hmm_states(startprob, transmat, n_samples)


def test_viterbi_result_is_named_and_unpacks():
    result = hmm_viterbi(np.log([0.5, 0.5]), np.log([[0.9, 0.1], [0.2, 0.8]]), np.zeros((3, 2)))
    log_prob, states = result
    assert result.log_prob == log_prob and result.states is states
