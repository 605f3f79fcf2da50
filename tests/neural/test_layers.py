"""Tests of the generic layers of skseq/neural/_networks/_layers.py.

Gradients are checked against central finite differences in float64, every
layer alone; the activations against their formulas.
"""

import numpy as np
import pytest
from gradient_checks import check_layer_gradients, numerical_gradient, perturbed_parameters
from numpy.testing import assert_allclose, assert_array_equal
from scipy.special import ndtr

from skseq.neural._networks._layers import (
    GELU,
    CausalDepthwiseConv1d,
    Linear,
    ReLU,
    RMSNorm,
    SiLU,
)


@pytest.mark.parametrize(
    "layer",
    [
        Linear("linear", 3, 5),
        Linear("linear", 3, 5, bias=False),
        Linear("head", 3, 1),
        CausalDepthwiseConv1d("conv", channels=3, kernel_size=4),
        SiLU("silu"),
        RMSNorm("norm", 3),
        GELU(),
        ReLU(),
    ],
    ids=repr,
)
def test_layer_gradients(layer):
    rng = np.random.RandomState(0)
    inputs = rng.normal(size=(2, 6, 3))
    check_layer_gradients(layer, perturbed_parameters(layer, rng), inputs, rng)


def test_activations():
    x = np.linspace(-4, 4, 101)
    relu, _ = ReLU().forward({}, x)
    assert_array_equal(relu, np.maximum(x, 0))
    gelu, _ = GELU().forward({}, x)
    tanh_form = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    assert_allclose(gelu, tanh_form, rtol=1e-14, atol=1e-15)
    assert np.abs(gelu - x * ndtr(x)).max() < 1e-3
    x32 = x.astype(np.float32)
    for layer in (ReLU(), GELU()):
        outputs, cache = layer.forward({}, x32)
        assert outputs.dtype == np.float32
        assert layer.backward({}, np.ones_like(x32), cache)[0].dtype == np.float32


def test_rms_norm_fuses_the_residual_sum_and_its_gradient():
    """forward_residual normalises hidden + update; backward(add_to=) adds into the stream's
    gradient: both against finite differences of sum(outputs * upstream) + sum(total * stream)."""
    rng = np.random.RandomState(0)
    norm = RMSNorm("norm", 5)
    parameters = perturbed_parameters(norm, rng)
    hidden, update = rng.normal(size=(2, 3, 5)), rng.normal(size=(2, 3, 5))
    total, outputs, cache = norm.forward_residual(parameters, hidden, update)
    assert_allclose(total, hidden + update, rtol=1e-15)
    assert_allclose(outputs, norm.forward(parameters, hidden + update)[0], rtol=1e-14)
    upstream, stream = rng.normal(size=(2, 3, 5)), rng.normal(size=(2, 3, 5))
    add_to = stream.copy()
    grad_inputs, grads = norm.backward(parameters, upstream, cache, add_to=add_to)
    assert grad_inputs is add_to

    def objective():
        total, outputs, _ = norm.forward_residual(parameters, hidden, update)
        return float(np.sum(outputs * upstream) + np.sum(total * stream))

    for array in (hidden, update):  # d total / d hidden = d total / d update = 1
        assert_allclose(grad_inputs, numerical_gradient(objective, array), rtol=1e-6, atol=1e-8)
    assert_allclose(
        grads["norm.gain"], numerical_gradient(objective, parameters["norm.gain"]), rtol=1e-6
    )
    # float32 follows float64
    single = {key: value.astype(np.float32) for key, value in parameters.items()}
    total32, outputs32, cache32 = norm.forward_residual(
        single, hidden.astype(np.float32), update.astype(np.float32)
    )
    assert outputs32.dtype == total32.dtype == np.float32
    assert_allclose(outputs32, outputs, rtol=1e-5, atol=1e-6)
    grad32, grads32 = norm.backward(
        single, upstream.astype(np.float32), cache32, add_to=stream.astype(np.float32)
    )
    assert grad32.dtype == grads32["norm.gain"].dtype == np.float32
    assert_allclose(grad32, grad_inputs, rtol=1e-4, atol=1e-5)
    assert_allclose(grads32["norm.gain"], grads["norm.gain"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linear_folds_its_bias_into_the_product(dtype):
    """The bias-filled output that BLAS adds the product to equals x @ W + b, for
    contiguous, strided and empty inputs, and for inputs of another dtype."""
    rng = np.random.RandomState(0)
    layer = Linear("linear", 3, 4)
    parameters = perturbed_parameters(layer, rng)
    parameters = {key: value.astype(dtype) for key, value in parameters.items()}
    wide = rng.normal(size=(2, 5, 6)).astype(dtype)
    for inputs in (wide[..., :3].copy(), wide[..., ::2], wide[:0, :, :3], wide[..., :3] * 1.0):
        outputs, _ = layer.forward(parameters, inputs)
        expected = inputs @ parameters["linear.weight"] + parameters["linear.bias"]
        assert outputs.shape == expected.shape and outputs.dtype == dtype
        assert_allclose(outputs, expected, rtol=1e-6 if dtype == np.float32 else 1e-14)
    outputs, _ = layer.forward(parameters, wide[..., :3].astype(np.float64))
    assert outputs.dtype == np.float64


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_in_place_relu_matches_the_out_of_place_one(dtype):
    """The in-place ReLU (the kernels' one pass each way) gives numpy's results, NaN
    included, and overwrites its input and its output gradient."""
    rng = np.random.RandomState(0)
    inputs = rng.normal(size=(2, 7, 9)).astype(dtype)
    inputs[0, 0, :3] = [np.nan, 0.0, -0.0]
    grad_outputs = rng.normal(size=inputs.shape).astype(dtype)
    grad_outputs[1, 1, 1] = np.nan
    expected, cache = ReLU().forward({}, inputs)
    expected_grad, _ = ReLU().backward({}, grad_outputs, cache)
    in_place = ReLU(in_place=True)
    outputs, cache = in_place.forward({}, inputs.copy())
    assert outputs.dtype == dtype
    assert_array_equal(outputs, expected)
    grad_inputs, _ = in_place.backward({}, grad_outputs.copy(), cache)
    assert_array_equal(grad_inputs, expected_grad)
    # a strided input is not worked on in place, and still right
    outputs, _ = in_place.forward({}, inputs[..., ::2])
    assert_array_equal(outputs, expected[..., ::2])
