"""Tests of the Elman recurrence on plain arrays: elman_rnn and elman_rnn_backward.

The forward pass is checked against a loop over time in numpy, the backward
pass against central finite differences in float64 and, when PyTorch is
installed, both against ``torch.nn.RNN`` with autograd.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from skseq.inference import ElmanGradients, ElmanResult, elman_rnn, elman_rnn_backward
from skseq.inference import rnn as rnn_module

TOLERANCES = {np.float64: dict(rtol=1e-12, atol=1e-13), np.float32: dict(rtol=2e-5, atol=2e-6)}


@pytest.fixture(params=["stepwise", "whole"])
def products(request, monkeypatch):
    """Both ways of the kernels: every product over the batch at each step, or the
    ones that need not be stepwise over all the steps at once (rnn._stepwise)."""
    stepwise = request.param == "stepwise"
    monkeypatch.setattr(rnn_module, "_stepwise", lambda *args, **kwargs: stepwise)
    return request.param


def make_inputs(rng, batch=3, length=7, n_inputs=2, n_hidden=4, scale=0.7, h0=True):
    inputs = {
        "x": rng.normal(size=(batch, length, n_inputs)),
        "W_x": rng.normal(size=(n_hidden, n_inputs)),
        "W_h": scale * rng.normal(size=(n_hidden, n_hidden)) / np.sqrt(n_hidden),
        "b": rng.normal(size=n_hidden),
    }
    if h0:
        inputs["h0"] = np.tanh(rng.normal(size=(batch, n_hidden)))
    return inputs


def reference_elman(x, W_x, W_h, b, h0=None):
    """h_t = tanh(W_x x_t + W_h h_{t-1} + b), a loop over time in float64."""
    x = np.asarray(x, dtype=np.float64)
    state = np.zeros((x.shape[0], W_h.shape[0])) if h0 is None else np.asarray(h0, np.float64)
    states = []
    for t in range(x.shape[1]):
        state = np.tanh(x[:, t] @ np.asarray(W_x).T + state @ np.asarray(W_h).T + b)
        states.append(state)
    hidden = np.stack(states, axis=1) if states else np.zeros(x.shape[:2] + (W_h.shape[0],))
    return hidden, state


def numerical_gradient(function, array, eps=1e-6):
    gradient = np.zeros_like(array)
    for index in np.ndindex(array.shape):
        original = array[index]
        array[index] = original + eps
        plus = function()
        array[index] = original - eps
        minus = function()
        array[index] = original
        gradient[index] = (plus - minus) / (2 * eps)
    return gradient


# -- forward ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("with_h0", [True, False])
@pytest.mark.parametrize("shape", [(3, 7, 2, 4), (1, 1, 5, 3), (4, 9, 6, 17)])
def test_forward_matches_the_reference_loop(dtype, with_h0, shape, products):
    batch, length, n_inputs, n_hidden = shape
    rng = np.random.default_rng(0)
    inputs = make_inputs(rng, batch, length, n_inputs, n_hidden, h0=with_h0)
    inputs = {key: value.astype(dtype) for key, value in inputs.items()}
    result = elman_rnn(**inputs)
    assert isinstance(result, ElmanResult)
    hidden, last_hidden = result
    assert hidden.dtype == dtype and last_hidden.dtype == dtype
    expected_hidden, expected_last = reference_elman(**inputs)
    assert_allclose(hidden, expected_hidden, **TOLERANCES[dtype])
    assert_allclose(last_hidden, expected_last, **TOLERANCES[dtype])
    assert_array_equal(last_hidden, hidden[:, -1])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kernel_tanh_is_within_two_ulp(dtype):
    rng = np.random.default_rng(1)
    magnitudes = 10.0 ** rng.uniform(-30, 2.5, size=20000)
    values = np.concatenate(
        [
            magnitudes * rng.choice([-1.0, 1.0], size=magnitudes.size),
            np.linspace(-12, 12, 20001),
            [0.0, -0.0, 0.625, -0.625, 1e30, -1e30],
        ]
    ).astype(dtype)
    values = np.concatenate([values, [np.finfo(dtype).max, -np.finfo(dtype).max]]).astype(dtype)
    computed = values.copy()
    rnn_module._rnn.tanh(computed)
    exact = np.tanh(values.astype(np.float64))
    # Relative error in units of the precision's epsilon, measured against the
    # float64 value (itself within an ulp of float64 for float32 inputs).
    ulps = np.abs(computed - exact) / np.maximum(np.abs(exact), np.finfo(dtype).tiny)
    assert np.max(ulps) / np.finfo(dtype).eps <= 2.0
    assert_array_equal(np.signbit(computed), np.signbit(values))
    assert np.all(np.abs(computed) <= 1)


def test_saturated_units_stay_finite_and_bounded():
    rng = np.random.default_rng(2)
    inputs = make_inputs(rng, scale=1.0)
    inputs["W_h"] = inputs["W_h"] * 1e30
    inputs["x"] = inputs["x"] * 1e100
    hidden, _ = elman_rnn(**inputs)
    assert np.all(np.isfinite(hidden)) and np.all(np.abs(hidden) <= 1)
    grads = elman_rnn_backward(np.ones_like(hidden), **inputs)
    assert all(np.all(np.isfinite(gradient)) for gradient in grads)


def test_integer_inputs_work_in_float64_and_float32_x_sets_float32():
    hidden, _ = elman_rnn(np.ones((1, 2, 1), dtype=int), [[1]], [[0]], [0])
    assert hidden.dtype == np.float64
    assert_allclose(hidden[0, :, 0], np.tanh([1.0, 1.0]))
    hidden, last = elman_rnn(np.ones((1, 2, 1), dtype=np.float32), [[1.0]], [[0.5]], [0.0])
    assert hidden.dtype == np.float32 and last.dtype == np.float32


def test_empty_sequences_and_batches():
    W_x, W_h, b = np.ones((3, 2)), np.eye(3), np.zeros(3)
    h0 = np.full((2, 3), 0.5)
    hidden, last = elman_rnn(np.zeros((2, 0, 2)), W_x, W_h, b, h0)
    assert hidden.shape == (2, 0, 3)
    assert_array_equal(last, h0)
    grads = elman_rnn_backward(
        np.zeros((2, 0, 3)), np.zeros((2, 0, 2)), W_x, W_h, b, h0, d_last_hidden=np.ones((2, 3))
    )
    assert_array_equal(grads.dh0, np.ones((2, 3)))  # last_hidden is h0 itself
    assert_array_equal(grads.dW_h, 0)
    hidden, last = elman_rnn(np.zeros((0, 4, 2)), W_x, W_h, b)
    assert hidden.shape == (0, 4, 3) and last.shape == (0, 3)


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 4),
    length=st.integers(2, 12),
    n_hidden=st.integers(1, 9),
    split=st.integers(1, 11),
    seed=st.integers(0, 2**16),
)
def test_a_split_sequence_continues_from_its_last_state(batch, length, n_hidden, split, seed):
    """Running the first steps and then the rest from their last state is the full run."""
    split = min(split, length - 1)
    rng = np.random.default_rng(seed)
    inputs = make_inputs(rng, batch, length, 3, n_hidden, scale=1.5)
    full, full_last = elman_rnn(**inputs)
    first, first_last = elman_rnn(**dict(inputs, x=inputs["x"][:, :split]))
    rest, rest_last = elman_rnn(**dict(inputs, x=inputs["x"][:, split:], h0=first_last))
    assert_allclose(np.concatenate([first, rest], axis=1), full, rtol=1e-12, atol=1e-14)
    assert_allclose(rest_last, full_last, rtol=1e-12, atol=1e-14)


@settings(max_examples=20, deadline=None)
@given(batch=st.integers(2, 6), row=st.integers(0, 5), seed=st.integers(0, 2**16))
def test_each_sequence_is_independent_of_the_batch(batch, row, seed):
    row = row % batch
    rng = np.random.default_rng(seed)
    inputs = make_inputs(rng, batch, 10, 3, 8, scale=1.2)
    hidden, _ = elman_rnn(**inputs)
    alone, _ = elman_rnn(
        **dict(inputs, x=inputs["x"][row : row + 1], h0=inputs["h0"][row : row + 1])
    )
    assert_allclose(alone[0], hidden[row], rtol=1e-12, atol=1e-14)


# -- backward --------------------------------------------------------------------------


@pytest.mark.parametrize("with_h0", [True, False])
@pytest.mark.parametrize("gradients", ["hidden", "last", "both"])
def test_backward_matches_finite_differences(with_h0, gradients, products):
    rng = np.random.default_rng(3)
    inputs = make_inputs(rng, batch=2, length=6, n_inputs=3, n_hidden=4, scale=1.3, h0=with_h0)
    shape = (2, 6, 4)
    d_hidden = rng.normal(size=shape) if gradients != "last" else None
    d_last = rng.normal(size=(2, 4)) if gradients != "hidden" else None

    def loss():
        hidden, last = elman_rnn(**inputs)
        total = 0.0
        if d_hidden is not None:
            total += float(np.sum(hidden * d_hidden))
        if d_last is not None:
            total += float(np.sum(last * d_last))
        return total

    grads = elman_rnn_backward(d_hidden, **inputs, d_last_hidden=d_last)
    assert isinstance(grads, ElmanGradients)
    names = {"x": "dx", "W_x": "dW_x", "W_h": "dW_h", "b": "db"}
    if with_h0:
        names["h0"] = "dh0"
    for name, gradient_name in names.items():
        gradient = getattr(grads, gradient_name)
        assert gradient.shape == inputs[name].shape
        assert_allclose(
            gradient, numerical_gradient(loss, inputs[name]), rtol=1e-6, atol=1e-8, err_msg=name
        )
    if not with_h0:
        # The gradient with respect to the zero initial state.
        inputs["h0"] = np.zeros((2, 4))
        assert_allclose(grads.dh0, numerical_gradient(loss, inputs["h0"]), rtol=1e-6, atol=1e-8)


def test_backward_with_given_hidden_equals_recomputing():
    rng = np.random.default_rng(4)
    inputs = make_inputs(rng, batch=3, length=9, n_inputs=2, n_hidden=5)
    hidden, _ = elman_rnn(**inputs)
    d_hidden = rng.normal(size=hidden.shape)
    recomputed = elman_rnn_backward(d_hidden, **inputs)
    reused = elman_rnn_backward(d_hidden, **inputs, hidden=hidden)
    for first, second in zip(recomputed, reused, strict=True):
        assert_array_equal(first, second)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("with_h0", [True, False])
def test_stepwise_and_whole_products_agree(monkeypatch, dtype, with_h0):
    rng = np.random.default_rng(13)
    inputs = make_inputs(rng, batch=5, length=11, n_inputs=3, n_hidden=6, h0=with_h0)
    inputs = {key: value.astype(dtype) for key, value in inputs.items()}
    d_hidden = rng.normal(size=(5, 11, 6)).astype(dtype)
    d_last = rng.normal(size=(5, 6)).astype(dtype)
    results = []
    for stepwise in (True, False):
        monkeypatch.setattr(
            rnn_module, "_stepwise", lambda *args, stepwise=stepwise, **kw: stepwise
        )
        hidden, _ = elman_rnn(**inputs)
        results.append((hidden, *elman_rnn_backward(d_hidden, **inputs, d_last_hidden=d_last)))
    names = ("hidden",) + ElmanGradients._fields
    for name, first, second in zip(names, *results, strict=True):
        assert_allclose(first, second, **TOLERANCES[dtype], err_msg=name)


def test_stepwise_only_for_small_products_on_small_kernels(monkeypatch):
    monkeypatch.setattr(rnn_module, "_blas_has_small_kernels", lambda: True)
    assert rnn_module._stepwise(32, 64, 64, backward=False)
    assert rnn_module._stepwise(32, 64, 64, backward=True)
    assert rnn_module._stepwise(8, 64, 64, backward=False)
    assert not rnn_module._stepwise(8, 64, 64, backward=True)
    assert not rnn_module._stepwise(1, 64, 64, backward=False)
    assert not rnn_module._stepwise(32, 64, 256, backward=False)
    assert not rnn_module._stepwise(32, 1024, 64, backward=True)
    monkeypatch.setattr(rnn_module, "_blas_has_small_kernels", lambda: False)
    assert not rnn_module._stepwise(32, 64, 64, backward=False)
    assert not rnn_module._stepwise(32, 64, 64, backward=True)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_no_inputs_is_a_zero_input(dtype, products):
    """With n_inputs = 0 the recurrence is driven by the bias alone: as with one zero input."""
    rng = np.random.default_rng(12)
    inputs = {k: v.astype(dtype) for k, v in make_inputs(rng, n_inputs=1).items()}
    d_hidden = rng.normal(size=(3, 7, 4)).astype(dtype)
    zero_input = dict(inputs, x=np.zeros_like(inputs["x"]))
    no_input = dict(inputs, x=np.zeros((3, 7, 0), dtype), W_x=np.zeros((4, 0), dtype))
    assert_array_equal(elman_rnn(**no_input).hidden, elman_rnn(**zero_input).hidden)
    expected = elman_rnn_backward(d_hidden, **zero_input)
    grads = elman_rnn_backward(d_hidden, **no_input)
    assert grads.dx.shape == (3, 7, 0) and grads.dW_x.shape == (4, 0)
    for name in ("dW_h", "db", "dh0"):
        assert_array_equal(getattr(grads, name), getattr(expected, name), err_msg=name)


def test_float32_backward_is_close_to_float64(products):
    rng = np.random.default_rng(5)
    inputs = make_inputs(rng, batch=3, length=20, n_inputs=4, n_hidden=8)
    d_hidden = rng.normal(size=(3, 20, 8))
    exact = elman_rnn_backward(d_hidden, **inputs)
    single = elman_rnn_backward(
        d_hidden.astype(np.float32), **{k: v.astype(np.float32) for k, v in inputs.items()}
    )
    for name, low, high in zip(ElmanGradients._fields, single, exact, strict=True):
        assert low.dtype == np.float32
        assert_allclose(low, high, rtol=1e-4, atol=1e-4 * np.abs(high).max(), err_msg=name)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_agrees_with_torch(dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    batch, length, n_inputs, n_hidden = 4, 30, 3, 16
    rnn = torch.nn.RNN(n_inputs, n_hidden, batch_first=True, dtype=getattr(torch, dtype.__name__))
    x = rng.normal(size=(batch, length, n_inputs)).astype(dtype)
    h0 = np.tanh(rng.normal(size=(batch, n_hidden))).astype(dtype)
    d_hidden = rng.normal(size=(batch, length, n_hidden)).astype(dtype)
    d_last = rng.normal(size=(batch, n_hidden)).astype(dtype)
    x_t = torch.from_numpy(x).requires_grad_(True)
    h0_t = torch.from_numpy(h0[None]).requires_grad_(True)
    out, last = rnn(x_t, h0_t)
    (
        torch.sum(out * torch.from_numpy(d_hidden)) + torch.sum(last[0] * torch.from_numpy(d_last))
    ).backward()

    weights = dict(
        W_x=rnn.weight_ih_l0.detach().numpy(),
        W_h=rnn.weight_hh_l0.detach().numpy(),
        b=(rnn.bias_ih_l0 + rnn.bias_hh_l0).detach().numpy(),
    )
    hidden, last_hidden = elman_rnn(x, **weights, h0=h0)
    tolerance = dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-4, atol=1e-5)
    assert_allclose(hidden, out.detach().numpy(), **tolerance)
    assert_allclose(last_hidden, last[0].detach().numpy(), **tolerance)
    grads = elman_rnn_backward(d_hidden, x, **weights, h0=h0, d_last_hidden=d_last)
    assert_allclose(grads.dx, x_t.grad.numpy(), **tolerance)
    assert_allclose(grads.dh0, h0_t.grad.numpy()[0], **tolerance)
    assert_allclose(grads.dW_x, rnn.weight_ih_l0.grad.numpy(), **tolerance)
    assert_allclose(grads.dW_h, rnn.weight_hh_l0.grad.numpy(), **tolerance)
    assert_allclose(grads.db, rnn.bias_ih_l0.grad.numpy(), **tolerance)


# -- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, value, error, match",
    [
        ("x", np.zeros((3, 7)), ValueError, "x must have shape"),
        ("W_x", np.zeros((4, 3)), ValueError, "W_x must have shape"),
        ("W_h", np.zeros((4, 5)), ValueError, "W_h must be a non-empty square"),
        ("W_h", np.zeros((0, 0)), ValueError, "W_h must be a non-empty square"),
        ("b", np.zeros(5), ValueError, "b must have shape"),
        ("h0", np.zeros((2, 4)), ValueError, "h0 must have shape"),
        ("W_h", np.eye(4) * (1 + 1j), TypeError, "W_h must be real"),
        ("x", np.zeros((3, 7, 2), dtype=complex), TypeError, "x must be real"),
        ("b", np.array(["a"] * 4), TypeError, "b must be a numeric array"),
        ("x", None, TypeError, "x is required"),
        ("W_h", None, TypeError, "W_h is required"),
    ],
)
def test_bad_shapes_and_types_raise(name, value, error, match):
    inputs = make_inputs(np.random.default_rng(7))
    inputs[name] = value
    with pytest.raises(error, match=match):
        elman_rnn(**inputs)
    with pytest.raises(error, match=match):
        elman_rnn_backward(np.ones((3, 7, 4)), **inputs)


@pytest.mark.parametrize("name", ["x", "W_x", "W_h", "b", "h0"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_raises_naming_it(name, bad):
    inputs = make_inputs(np.random.default_rng(8))
    inputs[name] = inputs[name].copy()
    inputs[name].flat[1] = bad
    with pytest.raises(ValueError, match=f"^{name} contains NaN or infinity"):
        elman_rnn(**inputs)
    with pytest.raises(ValueError, match=f"^{name} contains NaN or infinity"):
        elman_rnn_backward(np.ones((3, 7, 4)), **inputs)


def test_bad_gradients_raise():
    inputs = make_inputs(np.random.default_rng(9))
    with pytest.raises(ValueError, match="d_hidden must have shape"):
        elman_rnn_backward(np.ones((3, 6, 4)), **inputs)
    with pytest.raises(ValueError, match="d_hidden contains NaN"):
        elman_rnn_backward(np.full((3, 7, 4), np.nan), **inputs)
    with pytest.raises(ValueError, match="d_last_hidden must have shape"):
        elman_rnn_backward(None, **inputs, d_last_hidden=np.ones((3, 5)))
    with pytest.raises(ValueError, match="no gradient to propagate"):
        elman_rnn_backward(None, **inputs)
    with pytest.raises(ValueError, match="hidden must have shape"):
        elman_rnn_backward(np.ones((3, 7, 4)), **inputs, hidden=np.ones((3, 7, 5)))


def test_a_row_stride_beyond_blas_ints_is_refused(monkeypatch):
    monkeypatch.setattr(rnn_module, "_MAX_ROW_ELEMENTS", 27)
    with pytest.raises(ValueError, match="length \\* n_hidden = 28 exceeds 27"):
        elman_rnn(**make_inputs(np.random.default_rng(10)))
    inputs = make_inputs(np.random.default_rng(10), n_inputs=9)
    monkeypatch.setattr(rnn_module, "_MAX_ROW_ELEMENTS", 62)
    with pytest.raises(ValueError, match="length \\* n_inputs = 63 exceeds 62"):
        elman_rnn_backward(np.zeros((3, 7, 4)), **inputs)


def test_inputs_are_not_modified():
    rng = np.random.default_rng(11)
    inputs = make_inputs(rng)
    d_hidden = rng.normal(size=(3, 7, 4))
    d_last = rng.normal(size=(3, 4))
    hidden, _ = elman_rnn(**inputs)
    copies = {key: value.copy() for key, value in inputs.items()}
    kept = [d_hidden.copy(), d_last.copy(), hidden.copy()]
    elman_rnn(**inputs)
    elman_rnn_backward(d_hidden, **inputs, d_last_hidden=d_last, hidden=hidden)
    for key, value in inputs.items():
        assert_array_equal(value, copies[key])
    for original, copy in zip([d_hidden, d_last, hidden], kept, strict=True):
        assert_array_equal(original, copy)
