"""Tests of the generic layers of skseq/neural/_networks/_layers.py.

Gradients are checked against central finite differences in float64, every
layer alone; the activations against their formulas.
"""

import numpy as np
import pytest
from gradient_checks import check_layer_gradients, perturbed_parameters
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
