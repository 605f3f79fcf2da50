"""Tests of the Elman block, its network and the two ElmanRNN estimators.

Gradients are checked against central finite differences in float64 (the
block alone and the whole network with both losses); the Jacobian norms of
``gradient_norms`` against finite differences of the recurrence itself.
"""

import pickle

import numpy as np
import pytest
from gradient_checks import (
    check_layer_gradients,
    check_network_gradients,
    perturbed_parameters,
)
from neural_checks import check_bad_hyperparameter, check_bad_input, check_inputs_not_modified
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.exceptions import NotFittedError

import skseq
from skseq.inference import elman_rnn
from skseq.neural import ElmanRNNClassifier, ElmanRNNRegressor
from skseq.neural import _elman_rnn as elman_rnn_estimators
from skseq.neural import _trainer as trainer_module
from skseq.neural._networks._elman_rnn import (
    ElmanBlock,
    elman_layer,
    jacobian_norms,
    random_orthogonal,
)
from skseq.neural._networks._residual import make_network

SMALL = dict(d_model=8, n_layers=1, learning_rate_init=1e-2, random_state=0)


def test_exported():
    assert skseq.ElmanRNNRegressor is ElmanRNNRegressor
    assert skseq.ElmanRNNClassifier is ElmanRNNClassifier


# -- the block and the network ----------------------------------------------------------


def test_block_gradients():
    rng = np.random.RandomState(0)
    block = ElmanBlock("mixer", d_model=4, init_spectral_radius=1.2)
    check_layer_gradients(block, perturbed_parameters(block, rng), rng.normal(size=(2, 7, 4)), rng)


@pytest.mark.parametrize("per_step", [False, True])
@pytest.mark.parametrize("loss", ["squared_error", "cross_entropy"])
def test_network_gradients_end_to_end(per_step, loss):
    rng = np.random.RandomState(1)
    n_outputs = 3
    network = make_network(
        2,
        n_outputs,
        elman_layer,
        per_step=per_step,
        d_model=4,
        n_layers=2,
        init_spectral_radius=1.0,
    )
    check_network_gradients(network, rng, loss)


def test_block_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.RandomState(2)
    block = ElmanBlock("mixer", d_model=6, init_spectral_radius=0.9)
    parameters = perturbed_parameters(block, rng)
    inputs = rng.normal(size=(3, 11, 6))
    upstream = rng.normal(size=(3, 11, 6))
    outputs, cache = block.forward(parameters, inputs)
    grad_inputs, grads = block.backward(parameters, upstream, cache)

    rnn = torch.nn.RNN(6, 6, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(torch.from_numpy(parameters["mixer.W_x"]))
        rnn.weight_hh_l0.copy_(torch.from_numpy(parameters["mixer.W_h"]))
        rnn.bias_ih_l0.copy_(torch.from_numpy(parameters["mixer.b"]))
        rnn.bias_hh_l0.zero_()
    out_weight = torch.from_numpy(parameters["mixer.out_proj.weight"]).requires_grad_(True)
    inputs_t = torch.from_numpy(inputs).requires_grad_(True)
    outputs_t = rnn(inputs_t)[0] @ out_weight
    (outputs_t * torch.from_numpy(upstream)).sum().backward()
    assert_allclose(outputs, outputs_t.detach().numpy(), rtol=1e-10, atol=1e-12)
    assert_allclose(grad_inputs, inputs_t.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert_allclose(grads["mixer.W_h"], rnn.weight_hh_l0.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert_allclose(grads["mixer.out_proj.weight"], out_weight.grad.numpy(), rtol=1e-10)


@pytest.mark.parametrize("radius", [0.5, 1.0, 1.7])
def test_initialisation_is_orthogonal_times_the_radius(radius):
    block = ElmanBlock("m", d_model=16, init_spectral_radius=radius)
    parameters = block.init_parameters(np.random.RandomState(0), np.float64)
    W_h = parameters["m.W_h"]
    assert_allclose(W_h @ W_h.T, radius**2 * np.eye(16), atol=1e-12)
    assert_allclose(np.abs(np.linalg.eigvals(W_h)), radius, rtol=1e-10)
    assert np.all(np.abs(parameters["m.W_x"]) <= 1 / 4) and not np.any(parameters["m.b"])
    assert set(block.decayed_parameters()) == {"m.W_x", "m.W_h", "m.out_proj.weight"}


def test_random_orthogonal_has_no_preferred_sign():
    # The sign correction makes the Q factor Haar: its diagonal is not biased to be positive.
    rng = np.random.RandomState(3)
    diagonals = np.array([np.diag(random_orthogonal(rng, 3)) for _ in range(400)])
    assert abs(np.mean(diagonals > 0) - 0.5) < 0.1


# -- gradient norms ----------------------------------------------------------------------


def test_jacobian_norms_match_finite_differences_of_the_recurrence():
    """||dh_T / dh_t|| from the product formula against the recurrence restarted at h_t."""
    rng = np.random.default_rng(4)
    n_hidden, length = 4, 8
    x = rng.normal(size=(2, length, 3))
    W_x = rng.normal(size=(n_hidden, 3))
    W_h = 1.5 * random_orthogonal(np.random.RandomState(5), n_hidden)
    b = 0.1 * rng.normal(size=n_hidden)
    hidden, _ = elman_rnn(x, W_x, W_h, b)
    norms = jacobian_norms(hidden, W_h)
    assert norms.shape == (2, length)
    for sequence in range(2):
        for lag in range(1, length):
            start = length - 1 - lag  # h_start is the state the Jacobian differentiates by
            state = hidden[sequence : sequence + 1, start].copy()

            def last_state(state=state, sequence=sequence, start=start):
                piece = x[sequence : sequence + 1, start + 1 :]
                return elman_rnn(piece, W_x, W_h, b, h0=state)[1][0]

            jacobian = np.empty((n_hidden, n_hidden))
            for column in range(n_hidden):
                step = np.zeros((1, n_hidden))
                step[0, column] = 1e-6
                jacobian[:, column] = (last_state(state + step) - last_state(state - step)) / 2e-6
            assert_allclose(norms[sequence, lag], np.linalg.norm(jacobian, 2), rtol=1e-6)
    assert_array_equal(norms[:, 0], 1.0)


def test_jacobian_norms_neither_underflow_nor_overflow():
    # W_h = 1e-3 I at h = 0: the norm over k steps is 1e-3**k, far below float64's range.
    norms = jacobian_norms(np.zeros((1, 200, 2)), 1e-3 * np.eye(2))
    assert_allclose(np.log10(norms[0, :100]), -3.0 * np.arange(100), atol=1e-9)
    assert np.all(norms[0, 110:] == 0)  # below the smallest subnormal: rounded to 0
    norms = jacobian_norms(np.zeros((1, 200, 2)), 1e3 * np.eye(2))
    assert_allclose(np.log10(norms[0, :100]), 3.0 * np.arange(100), rtol=1e-12)
    assert np.all(np.isinf(norms[0, 103:]))
    # A saturated unit (slope exactly 0) cuts the gradient: zero, not NaN.
    norms = jacobian_norms(np.ones((1, 5, 2)), np.eye(2))
    assert_array_equal(norms[0], [1.0, 0.0, 0.0, 0.0, 0.0])


def test_gradient_norms_of_a_fitted_model(monkeypatch):
    X = np.random.RandomState(6).normal(size=(20, 30))
    y = X[:, -1]
    model = ElmanRNNRegressor(**dict(SMALL, n_layers=2), max_iter=2).fit(X, y)
    norms = model.gradient_norms(X[:4])
    assert norms.shape == (4, 2, 30)
    # Sequences are processed in chunks (bounded memory): one at a time gives the same.
    # The network runs in float32: other chunk shapes give other BLAS blockings, so the
    # comparison is at float32 precision.
    monkeypatch.setattr(elman_rnn_estimators, "PREDICTION_CHUNK_POSITIONS", 1)
    assert_allclose(model.gradient_norms(X[:4]), norms, rtol=1e-5)
    assert_array_equal(norms[..., 0], 1.0)
    # ||prod D_k W_h|| <= prod ||D_k|| ||W_h|| <= ||W_h||**k since the tanh slopes are <= 1.
    for layer, W_h in enumerate(model._recurrent_weights()):
        bound = np.linalg.norm(W_h.astype(np.float64), 2) ** np.arange(30)
        assert np.all(norms[:, layer] <= bound * (1 + 1e-9))


def test_small_spectral_radius_makes_gradients_vanish_faster():
    X = np.random.RandomState(7).normal(size=(10, 40))
    y = X[:, -1]
    lags = {}
    for radius in (0.5, 1.0):
        model = ElmanRNNRegressor(**SMALL, init_spectral_radius=radius, max_iter=1).fit(X, y)
        norms = model.gradient_norms(X)
        lags[radius] = np.exp(np.mean(np.log(norms[:, 0, 20])))
    assert lags[0.5] < 1e-4 < lags[1.0]


def test_spectral_radius_attribute():
    X = np.random.RandomState(8).normal(size=(20, 6))
    model = ElmanRNNRegressor(d_model=8, n_layers=3, init_spectral_radius=0.8, random_state=0)
    assert not hasattr(model, "spectral_radius_")
    with pytest.raises(NotFittedError):
        model.gradient_norms(X)
    model.set_params(max_iter=1, learning_rate_init=1e-12).fit(X, X[:, 0])
    assert model.spectral_radius_.shape == (3,)
    assert_allclose(model.spectral_radius_, 0.8, rtol=1e-5)
    model.set_params(learning_rate_init=0.05).partial_fit(X, X[:, 0])
    for layer in range(3):
        W_h = model.parameters_[f"layers.{layer}.mixer.W_h"].astype(np.float64)
        assert model.spectral_radius_[layer] == np.max(np.abs(np.linalg.eigvals(W_h)))
    assert np.all(model.spectral_radius_ != 0.8)  # follows the weights after more training


# -- fitting ------------------------------------------------------------------------------


def running_sums(n_sequences, seq_len, random_state):
    X = np.random.RandomState(random_state).normal(size=(n_sequences, seq_len))
    return X, np.cumsum(X, axis=1) / np.sqrt(np.arange(1, seq_len + 1))


def test_regressor_learns_running_sums():
    X, y = running_sums(100, 16, random_state=0)
    model = ElmanRNNRegressor(**SMALL, max_iter=60).fit(X, y)
    X_test, y_test = running_sums(300, 16, random_state=1)
    # Sums of up to 16 steps through tanh units: harder than for a linear recurrence.
    assert model.score(X_test, y_test) > 0.85
    assert model.predict(X_test).shape == (300, 16)


def test_classifier_learns_a_remembered_sign():
    """The label of a sequence is the sign of its first step: it must be carried to the end."""
    rng = np.random.RandomState(1)
    X = rng.normal(size=(300, 12, 1))
    y = np.where(X[:, 0, 0] > 0, "pos", "neg")
    # 16 units: with 8, seed 0 stops on a plateau (0.89 with the AVX2 kernels, 0.97 with the
    # portable ones): a test on that edge measures rounding, not learning.
    model = ElmanRNNClassifier(**dict(SMALL, d_model=16), max_iter=30).fit(X[:200], y[:200])
    assert_array_equal(model.classes_, ["neg", "pos"])
    assert model.score(X[200:], y[200:]) > 0.9
    proba = model.predict_proba(X[200:205])
    assert proba.shape == (5, 2)
    assert_allclose(proba.sum(axis=1), 1.0)


def delayed_regression_data(n_sequences=60, seq_len=10, random_state=0):
    rng = np.random.RandomState(random_state)
    X = rng.normal(size=(n_sequences, seq_len))
    return X, X[:, 2] - 0.5 * X[:, 6]


def test_fit_is_bitwise_reproducible():
    X, y = delayed_regression_data()
    first = ElmanRNNRegressor(**SMALL, max_iter=3, batch_size=16).fit(X, y)
    second = ElmanRNNRegressor(**SMALL, max_iter=3, batch_size=16).fit(X, y)
    assert first.loss_curve_ == second.loss_curve_
    assert_array_equal(first.predict(X), second.predict(X))
    other = ElmanRNNRegressor(**dict(SMALL, random_state=1), max_iter=3).fit(X, y)
    assert other.loss_curve_ != first.loss_curve_


def test_n_jobs_gives_the_serial_result():
    X, y = delayed_regression_data(80)
    kwargs = dict(SMALL, max_iter=3, batch_size=40, dtype="float64")
    serial = ElmanRNNRegressor(**kwargs, n_jobs=1).fit(X, y)
    threaded = ElmanRNNRegressor(**kwargs, n_jobs=2).fit(X, y)
    assert_allclose(threaded.loss_curve_, serial.loss_curve_, rtol=1e-9)
    assert_allclose(threaded.predict(X), serial.predict(X), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("dtype, rtol", [("float32", 1e-4), ("float64", 1e-10)])
def test_predictions_do_not_depend_on_the_other_sequences_of_a_batch(dtype, rtol):
    # Within the working precision: BLAS blocks its products by the batch size.
    X, y = delayed_regression_data(40)
    model = ElmanRNNRegressor(**SMALL, max_iter=2, dtype=dtype).fit(X, y)
    together = model.predict(X)
    alone = np.array([model.predict(X[i : i + 1])[0] for i in range(5)])
    assert_allclose(alone, together[:5], rtol=rtol, atol=rtol * 1e-2)
    order = np.random.RandomState(0).permutation(40)
    assert_allclose(model.predict(X[order]), together[order], rtol=rtol, atol=rtol * 1e-2)
    assert_allclose(model.predict(X[7:20]), together[7:20], rtol=rtol, atol=rtol * 1e-2)


def test_float32_matches_float64_to_single_precision():
    X, y = delayed_regression_data(30)
    single = ElmanRNNRegressor(**SMALL, max_iter=1, dtype="float32").fit(X, y)
    assert all(value.dtype == np.float32 for value in single.parameters_.values())
    X3 = X[:, :, None]
    parameters = {k: v.astype(np.float64) for k, v in single.parameters_.items()}
    exact = single.network_.forward(parameters, X3)[0]
    approximate = single.network_.forward(single.parameters_, X3.astype(np.float32))[0]
    assert approximate.dtype == np.float32
    assert_allclose(approximate, exact, rtol=1e-4, atol=1e-5)
    assert single.predict(X).dtype == np.float64


def test_gradient_clipping_is_the_trainers(monkeypatch):
    X, y = delayed_regression_data(32)
    norms = []
    original_step = trainer_module.Adam.step

    def recording_step(self, parameters, grads, **kwargs):
        norms.append(trainer_module.global_norm(grads))
        return original_step(self, parameters, grads, **kwargs)

    monkeypatch.setattr(trainer_module.Adam, "step", recording_step)
    ElmanRNNRegressor(**SMALL, max_iter=2, batch_size=8, max_grad_norm=1e-3).fit(X, 100 * y)
    assert len(norms) == 8 and max(norms) <= 1e-3 * (1 + 1e-6)
    norms.clear()
    ElmanRNNRegressor(**SMALL, max_iter=2, batch_size=8, max_grad_norm=None).fit(X, 100 * y)
    assert max(norms) > 1e-3


def test_partial_fit_continues_like_fit_and_pickles():
    X, y = delayed_regression_data(48)
    kwargs = dict(SMALL, shuffle=False, batch_size=16)
    fitted = ElmanRNNRegressor(**kwargs, max_iter=2).fit(X, y)
    streamed = ElmanRNNRegressor(**kwargs)
    streamed.partial_fit(X, y).partial_fit(X, y)
    assert streamed.loss_curve_ == fitted.loss_curve_
    restored = pickle.loads(pickle.dumps(streamed))
    assert_array_equal(restored.predict(X), streamed.predict(X))
    assert_array_equal(restored.spectral_radius_, streamed.spectral_radius_)


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, error, match",
    [
        ({"d_model": 0}, ValueError, "d_model"),
        ({"d_model": 2.5}, TypeError, "d_model"),
        ({"n_layers": 0}, ValueError, "n_layers"),
        ({"init_spectral_radius": 0.0}, ValueError, "init_spectral_radius"),
        ({"init_spectral_radius": -1.0}, ValueError, "init_spectral_radius"),
        ({"init_spectral_radius": "big"}, TypeError, "init_spectral_radius"),
        ({"learning_rate_init": 0.0}, ValueError, "learning_rate_init"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"max_iter": 0}, ValueError, "max_iter"),
        ({"max_grad_norm": -1.0}, ValueError, "max_grad_norm"),
        ({"n_jobs": 0}, ValueError, "n_jobs"),
        ({"dtype": "int32"}, ValueError, "dtype"),
    ],
)
def test_bad_hyperparameters(params, error, match):
    X, y = delayed_regression_data(10)
    check_bad_hyperparameter(ElmanRNNRegressor, ElmanRNNClassifier, params, error, match, X, y)


def test_bad_input():
    regressor = ElmanRNNRegressor(**SMALL, max_iter=1)
    X, y = check_bad_input(regressor)
    rng = np.random.RandomState(1)
    with pytest.raises(ValueError, match="expecting 1 features per step"):
        regressor.gradient_norms(rng.normal(size=(4, 6, 3)))
    X_nan = X[:, :, None].copy()
    X_nan[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        regressor.gradient_norms(X_nan)
    classifier = ElmanRNNClassifier(**SMALL, max_iter=1).fit(X, y > 0)
    with pytest.raises(ValueError, match="labels not in classes_"):
        classifier.score(X, np.where(y > 0, "yes", "no"))
    with pytest.raises(ValueError, match="Unknown label type"):
        ElmanRNNClassifier(**SMALL, max_iter=1).fit(X, y)


def test_inputs_are_not_modified():
    model, X = check_inputs_not_modified(ElmanRNNRegressor(**SMALL, max_iter=2))
    copy = X.copy()
    model.gradient_norms(X)
    assert_array_equal(X, copy)
