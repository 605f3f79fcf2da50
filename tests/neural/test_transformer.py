"""Tests of the Transformer layers, the network and the two estimators.

Gradients are checked against central finite differences in float64 (every
layer alone and the whole network with both losses) and against PyTorch
autograd through the same architecture written with torch operations, when
torch is installed.
"""

import pickle

import numpy as np
import pytest
from gradient_checks import check_layer_gradients, check_network_gradients, perturbed_parameters
from neural_checks import check_bad_hyperparameter, check_bad_input, check_inputs_not_modified
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.exceptions import NotFittedError

from skseq import TransformerClassifier, TransformerRegressor
from skseq.neural._losses import squared_error
from skseq.neural._networks._transformer import (
    CausalSelfAttention,
    FeedForward,
    SinusoidalPositionalEncoding,
    sinusoidal_positions,
)

SMALL = dict(d_model=8, n_layers=1, n_heads=2, learning_rate_init=1e-2, random_state=0)


def transformer_network(n_features, n_outputs, per_step, **architecture):
    """The network a TransformerRegressor of this architecture builds."""
    estimator = TransformerRegressor(**architecture)
    return estimator._make_network(n_features, n_outputs, per_step)


def small_network(per_step=True, activation="gelu", n_features=2, n_outputs=3):
    return transformer_network(
        n_features,
        n_outputs,
        per_step,
        d_model=4,
        n_layers=2,
        n_heads=2,
        d_ff=6,
        activation=activation,
    )


# -- layers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "layer",
    [
        CausalSelfAttention("attention", d_model=6, n_heads=2),
        CausalSelfAttention("attention", d_model=3, n_heads=1, out_init_scale=0.5),
        FeedForward("mlp", d_model=3, d_ff=5, activation="relu"),
        FeedForward("mlp", d_model=3, d_ff=5, activation="gelu"),
        SinusoidalPositionalEncoding("positions", 3),
    ],
    ids=repr,
)
def test_layer_gradients(layer):
    rng = np.random.RandomState(0)
    d_model = getattr(layer, "d_model", 3)
    inputs = rng.normal(size=(2, 7, d_model))
    check_layer_gradients(layer, perturbed_parameters(layer, rng), inputs, rng)


def test_attention_block_matches_the_whole_softmax():
    """Queries, keys and values of each head from the packed projection, full masked softmax."""
    rng = np.random.RandomState(1)
    batch, length, d_model, n_heads = 3, 9, 6, 3
    block = CausalSelfAttention("attention", d_model, n_heads)
    parameters = perturbed_parameters(block, rng)
    inputs = rng.normal(size=(batch, length, d_model))
    outputs, _ = block.forward(parameters, inputs)

    projected = inputs @ parameters["attention.qkv.weight"] + parameters["attention.qkv.bias"]
    q, k, v = np.split(projected, 3, axis=-1)
    heads = []
    d_head = d_model // n_heads
    mask = np.tril(np.ones((length, length), dtype=bool))
    for head in range(n_heads):
        columns = slice(head * d_head, (head + 1) * d_head)
        scores = q[..., columns] @ np.swapaxes(k[..., columns], 1, 2) / np.sqrt(d_head)
        scores = np.where(mask, scores, -np.inf)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        heads.append(weights @ v[..., columns])
    expected = (
        np.concatenate(heads, axis=-1) @ parameters["attention.out_proj.weight"]
        + parameters["attention.out_proj.bias"]
    )
    assert_allclose(outputs, expected, rtol=1e-12, atol=1e-13)


def test_sinusoidal_positions():
    steps = np.arange(50)
    for d_model in (6, 5):
        table = sinusoidal_positions(50, d_model, np.float64)
        assert table.shape == (50, d_model)
        for channel in range(d_model):
            angle = steps * 10000.0 ** (-2 * (channel // 2) / d_model)
            expected = np.sin(angle) if channel % 2 == 0 else np.cos(angle)
            assert_allclose(table[:, channel], expected, atol=1e-13)
    assert sinusoidal_positions(5, 5, np.float32).dtype == np.float32
    table = sinusoidal_positions(50, 6, np.float64)
    # Every step gets its own code, and the layer adds it whatever the length.
    assert len(np.unique(table.round(6), axis=0)) == 50
    encoding = SinusoidalPositionalEncoding("positions", 6)
    for length in (3, 200, 7):
        added, _ = encoding.forward({}, np.zeros((2, length, 6)))
        assert_allclose(added[1], sinusoidal_positions(length, 6, np.float64), atol=1e-15)
    restored = pickle.loads(pickle.dumps(encoding))
    assert_array_equal(restored.forward({}, np.zeros((1, 4, 6)))[0], added[:1, :4])


def test_n_heads_must_divide_d_model_in_the_block():
    with pytest.raises(ValueError, match="n_heads=3 does not divide d_model=8"):
        CausalSelfAttention("attention", 8, 3)


# -- the network --------------------------------------------------------------------------


@pytest.mark.parametrize("per_step", [False, True])
@pytest.mark.parametrize("loss", ["squared_error", "cross_entropy"])
def test_network_gradients_end_to_end(per_step, loss):
    check_network_gradients(small_network(per_step), np.random.RandomState(3), loss, seq_len=5)


def test_network_gradients_with_relu():
    network = small_network(activation="relu")
    check_network_gradients(network, np.random.RandomState(4), "squared_error", seq_len=5)


def test_network_layout_and_initialisation():
    network = transformer_network(
        1, 1, True, d_model=8, n_layers=3, n_heads=2, d_ff=32, activation="relu"
    )
    parameters = network.init_parameters(np.random.RandomState(0), np.float64)
    assert "layers.2.norm1.gain" in parameters and "layers.2.norm2.gain" in parameters
    assert parameters["layers.0.mlp.fc1.weight"].shape == (8, 32)
    assert parameters["layers.1.attention.qkv.weight"].shape == (8, 24)
    # Residual output projections start 1 / sqrt(2 n_layers) smaller (GPT-2).
    bound = np.abs(parameters["layers.0.attention.out_proj.weight"]).max()
    assert bound <= 1 / np.sqrt(8) / np.sqrt(6)
    assert bound > 0.8 / np.sqrt(8) / np.sqrt(6)
    decayed = set(network.decayed_parameters())
    assert "layers.0.mlp.fc2.weight" in decayed and "layers.0.attention.qkv.weight" in decayed
    assert not decayed & {"layers.0.norm1.gain", "layers.0.mlp.fc1.bias", "head.bias"}


def torch_network_outputs(torch, parameters, X, *, n_heads, per_step, activation, n_layers):
    """The same network with torch operations (for autograd), from skseq's parameters."""
    functional = torch.nn.functional

    def linear(x, name):
        return x @ parameters[f"{name}.weight"] + parameters[f"{name}.bias"]

    def rms_norm(x, name):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * parameters[f"{name}.gain"]

    batch, length, _ = X.shape
    hidden = linear(X, "input_projection")
    d_model = hidden.shape[-1]
    hidden = hidden + torch.from_numpy(sinusoidal_positions(length, d_model, np.float64))
    for index in range(n_layers):
        prefix = f"layers.{index}"
        qkv = linear(rms_norm(hidden, f"{prefix}.norm1"), f"{prefix}.attention.qkv")
        q, k, v = qkv.reshape(batch, length, 3, n_heads, -1).permute(2, 0, 3, 1, 4)
        attended = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        merged = attended.transpose(1, 2).reshape(batch, length, d_model)
        hidden = hidden + linear(merged, f"{prefix}.attention.out_proj")
        mlp = linear(rms_norm(hidden, f"{prefix}.norm2"), f"{prefix}.mlp.fc1")
        mlp = (
            functional.relu(mlp)
            if activation == "relu"
            else functional.gelu(mlp, approximate="tanh")
        )
        hidden = hidden + linear(mlp, f"{prefix}.mlp.fc2")
    read = hidden if per_step else hidden[:, -1]
    return linear(rms_norm(read, "final_norm"), "head")


@pytest.mark.parametrize("per_step, activation", [(True, "gelu"), (False, "relu")])
def test_network_agrees_with_torch_autograd(per_step, activation):
    torch = pytest.importorskip("torch")
    rng = np.random.RandomState(5)
    network = transformer_network(
        3, 2, per_step, d_model=8, n_layers=2, n_heads=2, d_ff=12, activation=activation
    )
    parameters = {
        key: value + 0.2 * rng.normal(size=value.shape)
        for key, value in network.init_parameters(rng, np.float64).items()
    }
    X = rng.normal(size=(4, 70, 3))
    outputs, cache = network.forward(parameters, X)
    targets = rng.normal(size=outputs.shape)
    weights = np.ones_like(outputs)
    _, grad_outputs = squared_error(outputs, targets, weights, 7.0)
    grads = network.backward(parameters, grad_outputs, cache)

    leaves = {key: torch.tensor(value, requires_grad=True) for key, value in parameters.items()}
    expected = torch_network_outputs(
        torch,
        leaves,
        torch.from_numpy(X),
        n_heads=2,
        per_step=per_step,
        activation=activation,
        n_layers=2,
    )
    assert_allclose(outputs, expected.detach().numpy(), rtol=1e-10, atol=1e-12)
    (0.5 * ((expected - torch.from_numpy(targets)) ** 2).sum() / 7.0).backward()
    for key, leaf in leaves.items():
        assert_allclose(grads[key], leaf.grad.numpy(), rtol=1e-8, atol=1e-11, err_msg=key)


def test_float32_network_agrees_with_float64():
    rng = np.random.RandomState(6)
    network = small_network(n_features=2)
    parameters = network.init_parameters(rng, np.float64)
    X = rng.normal(size=(3, 40, 2))
    outputs, cache = network.forward(parameters, X)
    grads = network.backward(parameters, np.ones_like(outputs), cache)
    parameters32 = {key: value.astype(np.float32) for key, value in parameters.items()}
    outputs32, cache32 = network.forward(parameters32, X.astype(np.float32))
    grads32 = network.backward(parameters32, np.ones_like(outputs32), cache32)
    assert outputs32.dtype == np.float32
    assert_allclose(outputs32, outputs, rtol=1e-4, atol=1e-5)
    for key, value in grads.items():
        assert grads32[key].dtype == np.float32
        assert_allclose(
            grads32[key], value, rtol=1e-3, atol=1e-4 * np.abs(value).max(), err_msg=key
        )


# -- fitting ------------------------------------------------------------------------------


def delayed_copy(n_sequences, seq_len, delay, random_state):
    """Per-step targets: the input ``delay`` steps earlier (0 before)."""
    X = np.random.RandomState(random_state).normal(size=(n_sequences, seq_len))
    y = np.zeros_like(X)
    y[:, delay:] = X[:, :-delay]
    return X, y


def test_regressor_learns_a_delayed_copy():
    # Content at a fixed offset: attention must find it by position.
    X, y = delayed_copy(200, 16, 3, random_state=0)
    model = TransformerRegressor(**dict(SMALL, d_model=16), max_iter=30).fit(X, y)
    X_test, y_test = delayed_copy(200, 16, 3, random_state=1)
    assert model.score(X_test, y_test) > 0.9
    assert model.predict(X_test).shape == (200, 16)
    assert model.n_features_in_ == 16 and model.per_step_


def test_classifier_learns_the_order_of_extremes():
    rng = np.random.RandomState(0)

    def data(n):
        X = rng.normal(size=(n, 10))
        return X, np.where(X.argmax(axis=1) < X.argmin(axis=1), "max first", "min first")

    X, y = data(500)
    model = TransformerClassifier(
        d_model=16, n_layers=2, n_heads=2, learning_rate_init=3e-3, max_iter=30, random_state=0
    ).fit(X, y)
    assert not model.per_step_
    assert_array_equal(model.classes_, ["max first", "min first"])
    X_test, y_test = data(300)
    assert model.score(X_test, y_test) > 0.85
    proba = model.predict_proba(X_test[:4])
    assert proba.shape == (4, 2)
    assert_allclose(proba.sum(axis=1), 1.0)


def test_per_step_predictions_are_causal_and_do_not_depend_on_the_batch():
    rng = np.random.RandomState(1)
    X = rng.normal(size=(40, 12, 2))
    y = np.cumsum(X[..., 0], axis=1)
    model = TransformerRegressor(**SMALL, max_iter=3, dtype="float64").fit(X, y)
    X_new = rng.normal(size=(6, 20, 2))  # longer than in fit
    predictions = model.predict(X_new)
    assert predictions.shape == (6, 20)
    changed = X_new.copy()
    changed[:, 9:] = rng.normal(size=changed[:, 9:].shape)
    assert_allclose(model.predict(changed)[:, :9], predictions[:, :9], rtol=1e-12, atol=1e-12)
    assert not np.allclose(model.predict(changed)[:, 9:], predictions[:, 9:])
    alone = np.concatenate([model.predict(X_new[i : i + 1]) for i in range(6)])
    assert_allclose(alone, predictions, rtol=1e-12, atol=1e-12)
    reordered = model.predict(X_new[::-1])[::-1]
    assert_allclose(reordered, predictions, rtol=1e-12, atol=1e-12)


def test_fit_is_bitwise_reproducible():
    X, y = delayed_copy(60, 10, 2, random_state=0)
    first = TransformerRegressor(**SMALL, max_iter=3, batch_size=16).fit(X, y)
    second = TransformerRegressor(**SMALL, max_iter=3, batch_size=16).fit(X, y)
    assert first.loss_curve_ == second.loss_curve_
    assert_array_equal(first.predict(X), second.predict(X))
    other = TransformerRegressor(**dict(SMALL, random_state=1), max_iter=3).fit(X, y)
    assert other.loss_curve_ != first.loss_curve_


def test_n_jobs_gives_the_serial_result():
    X, y = delayed_copy(60, 10, 2, random_state=0)
    kwargs = dict(SMALL, max_iter=3, batch_size=30, dtype="float64")
    serial = TransformerRegressor(**kwargs, n_jobs=1).fit(X, y)
    threaded = TransformerRegressor(**kwargs, n_jobs=2).fit(X, y)
    assert_allclose(threaded.loss_curve_, serial.loss_curve_, rtol=1e-9)
    assert_allclose(threaded.predict(X), serial.predict(X), rtol=1e-7, atol=1e-9)
    # For a fixed n_jobs the shards and the order of their sums are fixed: bitwise.
    again = TransformerRegressor(**kwargs, n_jobs=2).fit(X, y)
    assert again.loss_curve_ == threaded.loss_curve_
    assert_array_equal(again.predict(X), threaded.predict(X))


def test_float32_and_float64():
    X, y = delayed_copy(30, 8, 2, random_state=0)
    for dtype in ["float32", "float64"]:
        model = TransformerClassifier(**SMALL, max_iter=2, dtype=dtype).fit(X, y > 0)
        assert all(value.dtype == dtype for value in model.parameters_.values())
        assert model.predict_proba(X).dtype == np.float64


def test_partial_fit_is_one_pass_and_continues_like_fit():
    X, y = delayed_copy(40, 8, 2, random_state=0)
    kwargs = dict(SMALL, shuffle=False, batch_size=16)
    fitted = TransformerRegressor(**kwargs, max_iter=2).fit(X, y)
    streamed = TransformerRegressor(**kwargs)
    streamed.partial_fit(X, y)
    streamed.partial_fit(X, y)
    assert streamed.loss_curve_ == fitted.loss_curve_
    for key, value in fitted.parameters_.items():
        assert_array_equal(streamed.parameters_[key], value)


def test_pickle_round_trip_and_continue():
    X, y = delayed_copy(30, 8, 2, random_state=0)
    model = TransformerRegressor(**SMALL, max_iter=2).fit(X, y)
    restored = pickle.loads(pickle.dumps(model))
    assert_array_equal(restored.predict(X), model.predict(X))
    restored.partial_fit(X, y)
    model.partial_fit(X, y)
    assert_array_equal(restored.predict(X), model.predict(X))


def test_inputs_are_not_modified():
    check_inputs_not_modified(TransformerRegressor(**SMALL, max_iter=2))


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, error, match",
    [
        ({"d_model": 0}, ValueError, "d_model"),
        ({"d_model": 2.5}, TypeError, "d_model"),
        ({"n_layers": 0}, ValueError, "n_layers"),
        ({"n_heads": 0}, ValueError, "n_heads"),
        ({"n_heads": 3}, ValueError, "n_heads=3 does not divide d_model=32"),
        ({"d_model": 10, "n_heads": 4}, ValueError, "n_heads=4 does not divide d_model=10"),
        ({"d_ff": 0}, ValueError, "d_ff"),
        ({"d_ff": 2.5}, TypeError, "d_ff"),
        ({"activation": "tanh"}, ValueError, "activation must be 'relu' or 'gelu', got 'tanh'"),
        ({"activation": None}, ValueError, "activation must be 'relu' or 'gelu', got None"),
        ({"learning_rate_init": -1.0}, ValueError, "learning_rate_init"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"max_iter": 0}, ValueError, "max_iter"),
        ({"n_jobs": 0}, ValueError, "n_jobs"),
        ({"dtype": "float16"}, ValueError, "dtype"),
    ],
)
def test_bad_hyperparameters(params, error, match):
    X, y = delayed_copy(10, 6, 2, random_state=0)
    check_bad_hyperparameter(
        TransformerRegressor, TransformerClassifier, params, error, match, X, y
    )


def test_bad_input():
    regressor = TransformerRegressor(**SMALL, max_iter=1)
    X, y = check_bad_input(regressor)
    rng = np.random.RandomState(1)
    X_bad = rng.normal(size=(4, 9, 1))
    X_bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        regressor.predict(X_bad)

    classifier = TransformerClassifier(**SMALL, max_iter=1)
    with pytest.raises(NotFittedError):
        classifier.predict_proba(X)
    labels = np.where(y > 0, "up", "down")
    classifier.fit(X, labels)
    with pytest.raises(ValueError, match="labels not in classes_"):
        classifier.score(X, np.where(y > 0, "up", "sideways"))
    with pytest.raises(ValueError, match="labels not in classes_"):
        classifier.partial_fit(X, np.where(y > 0, "up", "sideways"))
