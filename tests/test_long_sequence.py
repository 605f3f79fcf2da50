"""One long sequence in bounded memory: chunked scoring and checkpointed EM.

A sequence longer than a block is scored chunk by chunk, its forward message
carried across; the E step of a sequence whose arrays would pass
``sklearn.get_config()["working_memory"]`` is checkpointed (forward messages
kept every C rows, each chunk recomputed in the backward pass).  Both must
give what the whole-sequence recursions give, on ordinary inputs to 1e-12
relative and on hard ones (log-space redo inside a chunk) to the exactness
tests' tolerances, and their peak allocation must not grow with the length.
"""

import tracemalloc

import numpy as np
import pytest
import sklearn
from hmm_references import (
    assert_log_likelihood,
    hard_models,
    left_right,
    normalised_log_space_reference,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skseq import GaussianHMM
from skseq.inference import hmm as inference_hmm

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def whole(startprob, transmat, log_frame):
    return inference_hmm._forward_backward_offsets(
        startprob, transmat, log_frame, np.array([0, log_frame.shape[0]])
    )


def checkpointed(startprob, transmat, log_frame, chunk_rows):
    """The checkpointed forward-backward over ``log_frame``, with its posteriors."""
    n_rows, n_states = log_frame.shape
    posteriors = np.full((n_rows, n_states), np.nan)
    seen = []

    def consume(start, stop, chunk_posteriors, cache):
        assert cache == ("cache", start, stop)
        posteriors[start:stop] = chunk_posteriors
        seen.append((start, stop))

    log_likelihood, start_counts, transition_counts = inference_hmm._checkpointed_forward_backward(
        startprob,
        transmat,
        n_rows,
        chunk_rows,
        lambda start, stop: (log_frame[start:stop], None, ("cache", start, stop)),
        consume,
        {},
    )
    # Every chunk once, last to first.
    bounds = inference_hmm._chunk_bounds(n_rows, chunk_rows)
    assert seen == bounds[::-1]
    return log_likelihood, posteriors, start_counts, transition_counts


def chunked_score(startprob, transmat, log_frame, chunk_rows):
    n_rows = log_frame.shape[0]
    log_predictive = np.full(n_rows, np.nan)

    def on_chunk(start, stop, values):
        log_predictive[start:stop] = values

    log_likelihood = inference_hmm._chunked_forward(
        startprob,
        transmat,
        n_rows,
        chunk_rows,
        lambda start, stop: (log_frame[start:stop], None),
        on_chunk,
        {},
    )
    return log_likelihood, log_predictive


def random_model(rng, n_states, n_rows, spread=3.0):
    startprob = rng.dirichlet(np.ones(n_states))
    transmat = rng.dirichlet(np.ones(n_states), size=n_states)
    log_frame = rng.normal(size=(n_rows, n_states)) * spread
    return startprob, transmat, log_frame


def assert_same(expected, log_likelihood, posteriors, start_counts, transition_counts, n_rows):
    np.testing.assert_allclose(log_likelihood, expected.log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(posteriors, expected.posteriors, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(start_counts, expected.start_counts, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        transition_counts, expected.transition_counts, rtol=1e-12, atol=1e-14 * n_rows
    )


CHUNKS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


@st.composite
def chunk_cases(draw):
    n_states = draw(st.integers(1, 4))
    n_rows = draw(st.integers(1, 60))
    chunk_rows = draw(
        st.sampled_from([1, 7, max(n_rows - 1, 1), n_rows, n_rows + 3])
        | st.integers(1, max(n_rows, 1))
    )
    return draw(st.integers(0, 2**32 - 1)), n_states, n_rows, chunk_rows


@CHUNKS
@given(chunk_cases())
def test_checkpointed_forward_backward_equals_the_whole_sequence(case):
    seed, n_states, n_rows, chunk_rows = case
    startprob, transmat, log_frame = random_model(np.random.default_rng(seed), n_states, n_rows)
    expected = whole(startprob, transmat, log_frame)
    result = checkpointed(startprob, transmat, log_frame, chunk_rows)
    assert_same(expected, *result, n_rows)


@CHUNKS
@given(chunk_cases())
def test_chunked_score_equals_the_whole_sequence(case):
    seed, n_states, n_rows, chunk_rows = case
    startprob, transmat, log_frame = random_model(np.random.default_rng(seed), n_states, n_rows)
    expected = inference_hmm._forward_offsets(startprob, transmat, log_frame, np.array([0, n_rows]))
    log_likelihood, log_predictive = chunked_score(startprob, transmat, log_frame, chunk_rows)
    np.testing.assert_allclose(log_likelihood, expected.log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(log_predictive, expected.log_predictive, rtol=1e-12, atol=1e-13)


HARD = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


@HARD
@given(hard_models(max_states=4, min_rows=2, max_rows=40), st.integers(1, 12))
def test_checkpointed_forward_backward_on_hard_inputs(model, chunk_rows):
    """Emissions thousands of nats apart, states crossing the subnormal range,
    zeros in the model, impossible rows: chunks the scaled recursion cannot
    vouch for are redone in log space, and the result is the log-space one."""
    log_start, log_trans, log_frame = model
    expected_log_likelihood, posteriors, counts = normalised_log_space_reference(
        log_start, log_trans, log_frame
    )
    log_likelihood, actual_posteriors, start_counts, transition_counts = checkpointed(
        np.exp(log_start), np.exp(log_trans), log_frame, chunk_rows
    )
    assert_log_likelihood(log_likelihood, expected_log_likelihood, log_frame)
    score = chunked_score(np.exp(log_start), np.exp(log_trans), log_frame, chunk_rows)[0]
    assert_log_likelihood(score, expected_log_likelihood, log_frame)
    if expected_log_likelihood == -np.inf:
        assert not actual_posteriors.any() and not transition_counts.any()
        return
    np.testing.assert_allclose(actual_posteriors, posteriors, atol=1e-9)
    np.testing.assert_allclose(start_counts, posteriors[0], atol=1e-9)
    np.testing.assert_allclose(transition_counts, counts, atol=1e-9 * log_frame.shape[0])


class CountingChunkKernels:
    """The HMM kernels, counting the chunks sent to the log-space redo."""

    def __init__(self, kernels):
        self._kernels = kernels
        self.redone = []

    def __getattr__(self, name):
        function = getattr(self._kernels, name)
        if not name.endswith("_chunk") or not name.startswith("log_"):
            return function

        def counted(*arguments):
            self.redone.append((name, arguments[2].shape[0]))
            return function(*arguments)

        return counted


def test_a_chunk_the_scaled_recursion_cannot_vouch_for_is_redone_alone(monkeypatch):
    """In the middle of an ordinary sequence, a chunk whose emissions put the
    states that carry the mass 800 nats below a state they cannot reach (their
    shifted emissions underflow): that chunk, and only it, goes to log space,
    in the forward pass and in the backward pass, and the statistics are exact."""
    rng = np.random.default_rng(1)
    startprob = np.array([0.5, 0.5, 0.0])
    transmat = np.array([[0.9, 0.1, 0.0], [0.2, 0.8, 0.0], [0.3, 0.3, 0.4]])
    log_frame = rng.normal(size=(60, 3))
    log_frame[20:30, :2] -= 800.0
    with np.errstate(divide="ignore"):
        expected_log_likelihood, posteriors, counts = normalised_log_space_reference(
            np.log(startprob), np.log(transmat), log_frame
        )
    kernels = CountingChunkKernels(inference_hmm._hmm)
    monkeypatch.setattr(inference_hmm, "_hmm", kernels)
    log_likelihood, actual, start_counts, transition_counts = checkpointed(
        startprob, transmat, log_frame, 10
    )
    assert kernels.redone == [("log_forward_chunk", 10), ("log_forward_backward_chunk", 10)]
    np.testing.assert_allclose(log_likelihood, expected_log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(actual, posteriors, atol=1e-12)
    np.testing.assert_allclose(transition_counts, counts, rtol=1e-10, atol=1e-10)


def test_a_sequence_of_probability_zero_gives_minus_infinity_and_no_counts():
    startprob = np.array([1.0, 0.0])
    transmat = np.eye(2)
    log_frame = np.zeros((30, 2))
    log_frame[17, 0] = -np.inf  # state 0, the only one, cannot emit row 17
    log_likelihood, posteriors, start_counts, transition_counts = checkpointed(
        startprob, transmat, log_frame, 4
    )
    assert log_likelihood == -np.inf
    assert not posteriors.any() and not start_counts.any() and not transition_counts.any()
    assert chunked_score(startprob, transmat, log_frame, 4)[0] == -np.inf
    assert whole(startprob, transmat, log_frame).log_likelihood == -np.inf


# -- the estimators --------------------------------------------------------------


def fitted_model(n_features=1):
    model = GaussianHMM(2, init_params="", params="stmc")
    model.startprob_ = np.array([0.6, 0.4])
    model.transmat_ = np.array([[0.95, 0.05], [0.1, 0.9]])
    model.means_ = np.array([[-1.0] * n_features, [1.5] * n_features])
    model.covars_ = np.ones((2, n_features))
    model._ensure_emission_centre()  # as partial_fit does for hand-set parameters
    return model


def data(model, n_rows, seed=0):
    return model.sample(n_rows, random_state=seed)[0]


def test_the_checkpointed_estep_equals_the_whole_sequence_estep():
    model = fitted_model(2)
    X = data(model, 50_000)
    offsets = np.array([0, X.shape[0]])
    expected, expected_log_likelihood = model._estep(X, offsets)
    with sklearn.config_context(working_memory=1):  # 1 MiB: checkpointed
        assert model._checkpoint_threshold(2) < X.shape[0]
        statistics, log_likelihood = model._estep(X, offsets)
    np.testing.assert_allclose(log_likelihood, expected_log_likelihood, rtol=1e-12)
    assert statistics.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(statistics[name], expected[name], rtol=1e-12, err_msg=name)


def test_short_sequences_keep_the_whole_sequence_estep_bitwise():
    """Sequences under the budget take today's path, whatever the others do."""
    model = fitted_model()
    X = data(model, 30_000)
    lengths = [1000, 25_000, 4000]
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    reference = model._estep(X, offsets)
    with sklearn.config_context(working_memory=1):
        mixed = model._estep(X, offsets)
    # Rounding of the sums aside, equal; the short sequences' statistics alone
    # are bitwise those of the whole-sequence path.
    np.testing.assert_allclose(mixed[1], reference[1], rtol=1e-12)
    short = np.array([0, 1000])
    with sklearn.config_context(working_memory=1):
        alone = model._estep(X[:1000], short)
    expected = model._estep(X[:1000], short)
    assert alone[1] == expected[1]
    for name in expected[0]:
        assert np.array_equal(alone[0][name], expected[0][name])


def test_score_of_a_long_sequence_equals_the_whole_sequence_forward():
    model = fitted_model()
    X = data(model, 100_000)
    lengths = [30, 99_000, 970]
    log_frame = model._compute_log_likelihood(X)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    expected = inference_hmm._forward_offsets(model.startprob_, model.transmat_, log_frame, offsets)
    np.testing.assert_allclose(
        model.score_sequences(X, lengths=lengths), expected.sequence_log_likelihood, rtol=1e-12
    )
    np.testing.assert_allclose(model.score(X, lengths=lengths), expected.log_likelihood, rtol=1e-12)
    weights = np.random.default_rng(0).random(X.shape[0])
    np.testing.assert_allclose(
        model.score(X, lengths=lengths, sample_weight=weights),
        weights @ expected.log_predictive,
        rtol=1e-12,
    )


def peak_allocation(function):
    """Peak bytes that numpy and Python allocate while ``function`` runs."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        function()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


SLACK = 256 * 1024  # bytes: checkpoints, Python objects; the whole-sequence arrays are ~50 MB


def test_a_left_right_sequence_of_a_few_thousand_rows_stays_on_the_fast_path(monkeypatch):
    """Its states left behind fall below 2^-1000, which a chunk boundary can
    only carry in log space: a sequence of this size is scored whole, where
    the error bounds keep it on the fast path."""
    rng = np.random.default_rng(0)
    n_states = 16
    model = GaussianHMM(n_states, init_params="", params="")
    model.startprob_, model.transmat_ = left_right(n_states, stay=0.998)
    model.means_ = rng.normal(scale=5.0, size=(n_states, 3))
    model.covars_ = np.ones((n_states, 3))
    X = model.sample(8000, random_state=0)[0]
    kernels = CountingChunkKernels(inference_hmm._hmm)
    monkeypatch.setattr(inference_hmm, "_hmm", kernels)
    log_likelihood = model.score(X)
    assert kernels.redone == []
    expected = inference_hmm._forward_offsets(
        model.startprob_, model.transmat_, model._compute_log_likelihood(X), np.array([0, 8000])
    )
    assert log_likelihood == expected.log_likelihood


def test_score_memory_does_not_grow_with_the_length_of_the_sequence():
    model = fitted_model()
    short, long = data(model, 200_000, seed=1), data(model, 800_000, seed=2)
    model.score(short[:1000])  # imports and caches outside the measurement
    peaks = [peak_allocation(lambda X=X: model.score(X)) for X in (short, long)]
    peaks += [peak_allocation(lambda X=X: model.score_sequences(X)) for X in (short, long)]
    assert peaks[1] <= peaks[0] + SLACK, peaks
    assert peaks[3] <= peaks[2] + SLACK, peaks
    assert peaks[1] < 16 * 2**20, peaks  # far below the data (6.4 MB) times the states


def test_checkpointed_estep_memory_does_not_grow_with_the_length_of_the_sequence():
    model = fitted_model()
    short, long = data(model, 200_000, seed=1), data(model, 800_000, seed=2)
    offsets = [np.array([0, X.shape[0]]) for X in (short, long)]
    with sklearn.config_context(working_memory=1):
        model._estep(short[:20_000], np.array([0, 20_000]))
        peaks = [
            peak_allocation(lambda X=X, o=o: model._estep(X, o))
            for X, o in zip((short, long), offsets)
        ]
    assert peaks[1] <= peaks[0] + SLACK, peaks
    assert peaks[1] < 8 * 2**20, peaks


# -- the linear-Gaussian SSM -------------------------------------------------------


def fitted_lgssm(n_components=2, n_features=2, n_controls=0, seed=0):
    from skseq import LinearGaussianSSM

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(400, n_features)).cumsum(axis=0) * 0.1
    controls = rng.normal(size=(400, n_controls)) if n_controls else None
    model = LinearGaussianSSM(n_components=n_components, n_iter=3, random_state=0)
    return model.fit(X, controls=controls)


def lgssm_rows(model, n_rows, seed=0, missing=0.0):
    rng = np.random.default_rng(seed)
    controls = rng.normal(size=(n_rows, model.n_controls_))
    X = model.sample(n_rows, random_state=seed, controls=controls if controls.size else None)[0]
    X[rng.random(X.shape) < missing] = np.nan
    return model._stack(X, controls)


@pytest.mark.parametrize("n_controls, missing", [(0, 0.0), (1, 0.1)])
def test_the_lgssm_estep_beyond_the_budget_equals_the_whole_sequence_estep(n_controls, missing):
    model = fitted_lgssm(n_controls=n_controls)
    X = lgssm_rows(model, 30_000, missing=missing)
    lengths = [200, 29_000, 800]
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    expected, expected_log_likelihood = model._estep(X, offsets)
    with sklearn.config_context(working_memory=1):
        statistics, log_likelihood = model._estep(X, offsets)
    np.testing.assert_allclose(log_likelihood, expected_log_likelihood, rtol=1e-12)
    assert statistics.keys() == expected.keys()
    for name in expected:
        scale = np.abs(expected[name]).max()
        np.testing.assert_allclose(
            statistics[name], expected[name], rtol=1e-12, atol=1e-12 * scale, err_msg=name
        )


@CHUNKS
@given(st.integers(1, 40), st.data())
def test_lgssm_statistics_in_chunks_equal_the_whole_sequence_over_chunk_boundaries(n_rows, data):
    from skseq.inference.kalman import _em_statistics_in_chunks, _em_statistics_offsets

    model = fitted_lgssm(n_controls=1)
    chunk_rows = data.draw(
        st.sampled_from([1, 7, max(n_rows - 1, 1), n_rows]) | st.integers(1, n_rows)
    )
    X = lgssm_rows(model, n_rows, seed=n_rows, missing=0.1)
    kernel_model, n_features = model._model(), model.n_features_in_
    expected, log_likelihoods = _em_statistics_offsets(
        kernel_model, X[:, :n_features], X[:, n_features:], np.array([0, n_rows])
    )
    statistics, log_likelihood = _em_statistics_in_chunks(
        kernel_model, X[:, :n_features], X[:, n_features:], chunk_rows
    )
    np.testing.assert_allclose(log_likelihood, log_likelihoods.sum(), rtol=1e-12)
    for name in expected:
        scale = max(np.abs(expected[name]).max(), 1.0)
        np.testing.assert_allclose(
            statistics[name], expected[name], rtol=1e-12, atol=1e-12 * scale, err_msg=name
        )


def test_lgssm_estep_memory_does_not_grow_with_the_length_of_the_sequence():
    model = fitted_lgssm()
    short, long = lgssm_rows(model, 200_000, seed=1), lgssm_rows(model, 800_000, seed=2)
    offsets = [np.array([0, X.shape[0]]) for X in (short, long)]
    with sklearn.config_context(working_memory=1):
        model._estep(short[:30_000], np.array([0, 30_000]))
        peaks = [
            peak_allocation(lambda X=X, o=o: model._estep(X, o))
            for X, o in zip((short, long), offsets)
        ]
    assert peaks[1] <= peaks[0] + SLACK, peaks
    assert peaks[1] < 8 * 2**20, peaks
