"""The trainer's working-memory estimate and its limit, for every neural estimator.

The estimate of the activations a forward pass keeps is checked against the
arrays the network really keeps at sizes far beyond the probes, and the
scaled estimate against the peak of a real training step (tracemalloc counts
numpy's allocations, deterministically).  A minibatch or a prediction chunk
beyond the limit raises a ValueError that says what to change.
"""

import tracemalloc

import numpy as np
import pytest
from numpy.testing import assert_allclose

from skseq import (
    DeepMarkovModel,
    ElmanRNNClassifier,
    ElmanRNNRegressor,
    S4DClassifier,
    S4DRegressor,
    SelectiveSSMClassifier,
    SelectiveSSMRegressor,
    TransformerClassifier,
    TransformerRegressor,
)
from skseq.neural import _trainer
from skseq.neural._trainer import (
    PREDICTION_MEMORY_FACTOR,
    TRAINING_MEMORY_FACTOR,
    _owned_bytes,
    activation_bytes,
    estimate_activation_bytes,
)

NEURAL_ESTIMATORS = [
    SelectiveSSMRegressor(d_model=8, n_layers=1, d_state=4, max_iter=1, random_state=0),
    SelectiveSSMClassifier(d_model=8, n_layers=1, d_state=4, max_iter=1, random_state=0),
    S4DRegressor(d_model=8, n_layers=1, d_state=4, max_iter=1, random_state=0),
    S4DClassifier(d_model=8, n_layers=1, d_state=4, max_iter=1, random_state=0),
    ElmanRNNRegressor(d_model=8, n_layers=1, max_iter=1, random_state=0),
    ElmanRNNClassifier(d_model=8, n_layers=1, max_iter=1, random_state=0),
    TransformerRegressor(d_model=8, n_layers=1, n_heads=2, max_iter=1, random_state=0),
    TransformerClassifier(d_model=8, n_layers=1, n_heads=2, max_iter=1, random_state=0),
]

# The networks the estimators build (3 features, 2 outputs).
ARCHITECTURES = {
    "mamba": SelectiveSSMRegressor(d_model=16, n_layers=2, d_state=8, d_conv=4, expand=2),
    "transformer": TransformerRegressor(
        d_model=16, n_layers=2, n_heads=4, d_ff=64, activation="gelu"
    ),
    "s4d": S4DRegressor(d_model=16, n_layers=2, d_state=8, d_conv=4, expand=2, init="lin"),
    "elman": ElmanRNNRegressor(d_model=16, n_layers=2, init_spectral_radius=0.9),
}
NETWORKS = {
    name: (lambda per_step, estimator=estimator: estimator._make_network(3, 2, per_step))
    for name, estimator in ARCHITECTURES.items()
}


def kept_bytes(network, parameters, X):
    outputs, cache = network.forward(parameters, X)
    return _owned_bytes((outputs, cache), set(), {id(value) for value in parameters.values()})


@pytest.mark.parametrize("name", sorted(NETWORKS))
@pytest.mark.parametrize("per_step", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_estimate_is_the_kept_activations(name, per_step, dtype):
    """Fitted on batches of at most 2 x 64 steps, exact for 5 x 300.

    (S4D's FFT length is the next fast length above twice the sequence length:
    2 T exactly at the probes' powers of two, and at T = 300.)
    """
    network = NETWORKS[name](per_step)
    parameters = network.init_parameters(np.random.RandomState(0), dtype)
    coefficients = estimate_activation_bytes(network, parameters, 3)
    X = np.random.RandomState(1).normal(size=(5, 300, 3)).astype(dtype)
    assert activation_bytes(coefficients, 5, 300) == pytest.approx(
        kept_bytes(network, parameters, X), rel=1e-9
    )


def test_a_quadratic_term_is_found():
    """A block that kept its (length, length) score matrix would be estimated as such."""

    class KeepsScores:
        n_features = 1

        def init_parameters(self, random_state, dtype):
            return {"w": np.ones(1, dtype=dtype)}

        def forward(self, parameters, X):
            scores = X @ np.swapaxes(X, 1, 2)  # (batch, length, length)
            return X[:, -1], (scores, X)

    network = KeepsScores()
    parameters = network.init_parameters(None, np.float64)
    coefficients = estimate_activation_bytes(network, parameters, 1)
    X = np.zeros((3, 500, 1))
    assert activation_bytes(coefficients, 3, 500) == pytest.approx(
        kept_bytes(network, parameters, X), rel=1e-9
    )


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_the_factors_bound_the_peak_of_a_real_pass(name):
    network = NETWORKS[name](True)
    parameters = network.init_parameters(np.random.RandomState(0), np.float64)
    coefficients = estimate_activation_bytes(network, parameters, 3)
    X = np.random.RandomState(1).normal(size=(8, 400, 3))
    kept = activation_bytes(coefficients, 8, 400)
    tracemalloc.start()
    try:
        outputs, cache = network.forward(parameters, X)
        _, forward_peak = tracemalloc.get_traced_memory()
        network.backward(parameters, np.ones_like(outputs), cache)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kept < forward_peak <= PREDICTION_MEMORY_FACTOR * kept
    assert forward_peak < peak <= TRAINING_MEMORY_FACTOR * kept


@pytest.mark.parametrize("estimator", NEURAL_ESTIMATORS, ids=lambda e: type(e).__name__)
def test_fit_beyond_the_limit_raises_naming_batch_size(estimator, monkeypatch):
    rng = np.random.RandomState(0)
    X = rng.normal(size=(40, 300))
    y = (X[:, -1] > 0).astype(int)
    # 40 sequences of 300 steps keep about 4 MiB of activations in these small networks.
    monkeypatch.setattr(_trainer, "MAX_WORKING_MEMORY", 2**20)
    with pytest.raises(ValueError, match=r"a minibatch of 32 sequences of 300 steps needs about"):
        estimator.fit(X, y)
    with pytest.raises(ValueError, match="lower batch_size"):
        estimator.fit(X, y)
    # Small enough minibatches pass.
    estimator.set_params(batch_size=2).fit(X, y)
    estimator.set_params(batch_size=32)


@pytest.mark.parametrize("estimator", NEURAL_ESTIMATORS, ids=lambda e: type(e).__name__)
def test_predict_beyond_the_limit_takes_fewer_sequences_at_a_time(estimator, monkeypatch):
    rng = np.random.RandomState(0)
    X = rng.normal(size=(20, 12, 1))
    y = (X[:, -1, 0] > 0).astype(int)
    estimator.fit(X, y)
    X_new = rng.normal(size=(6, 3000, 1))
    expected = estimator.predict(X_new)
    state = dict(vars(estimator))
    one_sequence = estimator._working_memory(X_new, 1, training=False)
    monkeypatch.setattr(_trainer, "MAX_WORKING_MEMORY", 2.5 * one_sequence)
    assert estimator._prediction_chunk(X_new, 6, 1) == 1  # 6 -> 3 -> 1
    assert_allclose(estimator.predict(X_new), expected, rtol=1e-5, atol=1e-6)
    monkeypatch.setattr(_trainer, "MAX_WORKING_MEMORY", 0.5 * one_sequence)
    with pytest.raises(ValueError, match="predicting sequences of 3000 steps needs about"):
        estimator.predict(X_new)
    with pytest.raises(ValueError, match="predict shorter sequences, or with fewer n_jobs"):
        estimator.predict(X_new)
    assert vars(estimator).keys() == state.keys()


def test_the_default_limit_stops_an_absurd_request_before_any_work():
    model = TransformerRegressor(d_model=64, n_layers=2, n_heads=4, max_iter=1, batch_size=64)
    X = np.zeros((64, 50000, 1), dtype=np.float32)
    with pytest.raises(ValueError, match=r"GiB of working memory .* than the limit of 8 GiB"):
        model.fit(X, np.zeros(64))


# -- the deep Markov model: its own data layout, the same estimate and limit ----------------


def _fitted_deep_markov_model(emission="gaussian", dtype="float64", **params):
    rng = np.random.RandomState(0)
    X = rng.normal(size=(120, 3))
    if emission == "bernoulli":
        X = (X > 0).astype(float)
    params = dict(
        transition_hidden_size=16,
        emission_hidden_size=8,
        inference_hidden_size=12,
        max_iter=1,
        random_state=0,
        **params,
    )
    model = DeepMarkovModel(2, emission=emission, dtype=dtype, **params)
    return model.fit(X, lengths=[40, 40, 40])


@pytest.mark.parametrize("emission", ["gaussian", "bernoulli"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_deep_markov_estimate_bounds_the_kept_activations(emission, dtype):
    """Exact for one sequence; a few percent above for more.

    (A batch of one sequence keeps some reshaped views that are copies for
    two or more, so the probes' slope in the number of sequences is a little
    steeper than the truth: the estimate errs on the safe side.)
    """
    model = _fitted_deep_markov_model(emission, dtype)
    parameters = model.parameters_
    coefficients = estimate_activation_bytes(
        model.network_, parameters, 3, forward=model._kept_activations
    )
    excluded = {id(value) for value in parameters.values()}
    for n_sequences, n_steps in [(1, 500), (5, 300)]:
        X = np.random.RandomState(1).normal(size=(n_sequences, n_steps, 3)).astype(dtype)
        kept = _owned_bytes(model._kept_activations(parameters, X), set(), excluded)
        ratio = activation_bytes(coefficients, n_sequences, n_steps) / kept
        assert 1 - 1e-9 <= ratio <= 1.05


def test_the_factors_bound_the_peak_of_a_deep_markov_training_step():
    model = _fitted_deep_markov_model()
    parameters = model.parameters_
    coefficients = estimate_activation_bytes(
        model.network_, parameters, 3, forward=model._kept_activations
    )
    X = np.random.RandomState(1).normal(size=(8, 400, 3))
    kept = activation_bytes(coefficients, 8, 400)
    tracemalloc.start()
    try:
        cache = model._kept_activations(parameters, X)
        _, forward_peak = tracemalloc.get_traced_memory()
        model.network_.backward(parameters, cache, -1.0, 1.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert forward_peak <= PREDICTION_MEMORY_FACTOR * kept
    assert forward_peak < peak <= TRAINING_MEMORY_FACTOR * kept


def test_deep_markov_fit_beyond_the_limit_raises_naming_batch_size(monkeypatch):
    X = np.random.RandomState(0).normal(size=(40 * 300, 2))
    lengths = [300] * 40
    model = DeepMarkovModel(2, max_iter=1, random_state=0)
    # A minibatch of 32 sequences of 300 steps needs about 24 MiB, of 2 about 1.5 MiB.
    monkeypatch.setattr(_trainer, "MAX_WORKING_MEMORY", 2**23)
    with pytest.raises(ValueError, match=r"a minibatch of 32 sequences of 300 steps needs about"):
        model.fit(X, lengths=lengths)
    with pytest.raises(ValueError, match="lower batch_size"):
        model.fit(X, lengths=lengths)
    model.set_params(batch_size=2).fit(X, lengths=lengths)


def test_deep_markov_scores_beyond_the_limit_take_fewer_draws_at_a_time(monkeypatch):
    model = _fitted_deep_markov_model(n_importance_samples=64)
    X_new = np.random.RandomState(1).normal(size=(2 * 500, 3))
    lengths = [500, 500]
    expected_scores = model.score_sequences(X_new, lengths=lengths)
    expected_states = model.transform(X_new, lengths=lengths)
    state = dict(vars(model))
    one_draw = model._working_memory(np.zeros((1, 500, 3)), 1, training=False)
    # 64 draws fit at once without a limit; 5 draws' worth allow 4 (64 -> 32 -> ... -> 4).
    monkeypatch.setattr(_trainer, "MAX_WORKING_MEMORY", 5 * one_draw)
    assert model._prediction_chunk(np.zeros((1, 500, 3)), 64, 1, n_sequences=64) == 4
    assert_allclose(model.score_sequences(X_new, lengths=lengths), expected_scores, rtol=1e-12)
    assert_allclose(
        model.transform(X_new, lengths=lengths), expected_states, rtol=1e-12, atol=1e-14
    )
    monkeypatch.setattr(_trainer, "MAX_WORKING_MEMORY", 0.5 * one_draw)
    with pytest.raises(ValueError, match="predicting sequences of 500 steps needs about"):
        model.score(X_new, lengths=lengths)
    assert vars(model).keys() == state.keys()
