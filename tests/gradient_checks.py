"""Finite-difference checks of the explicit backward passes, shared by the test modules.

Every check runs in float64 with central differences: a layer alone (its
input and every parameter), and a whole network through either training loss,
with per-step or per-sequence read-out and a masked position.
"""

import numpy as np
from numpy.testing import assert_allclose

from skseq.neural._losses import softmax_cross_entropy, squared_error


def numerical_gradient(function, array, eps=1e-6):
    """Central differences of the scalar ``function()`` with respect to ``array`` (in place)."""
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


def perturbed_parameters(layer, rng, scale=0.3):
    """Float64 parameters moved off their symmetric initial values."""
    parameters = layer.init_parameters(rng, np.float64)
    return {key: value + scale * rng.normal(size=value.shape) for key, value in parameters.items()}


def check_layer_gradients(layer, parameters, inputs, rng, rtol=1e-6, atol=1e-8):
    """The backward pass of ``layer`` against finite differences of ``sum(outputs * upstream)``."""
    outputs, cache = layer.forward(parameters, inputs)
    upstream = rng.normal(size=outputs.shape)
    grad_inputs, grads = layer.backward(parameters, upstream, cache)

    def objective():
        return float(np.sum(layer.forward(parameters, inputs)[0] * upstream))

    assert_allclose(grad_inputs, numerical_gradient(objective, inputs), rtol=rtol, atol=atol)
    assert sorted(grads) == sorted(parameters)
    for key, value in parameters.items():
        assert grads[key].shape == value.shape
        assert_allclose(
            grads[key], numerical_gradient(objective, value), rtol=rtol, atol=atol, err_msg=key
        )


def check_network_gradients(network, rng, loss, n_sequences=3, seq_len=6, rtol=1e-5):
    """Every parameter gradient of ``network`` through a loss, against finite differences.

    ``loss`` is "squared_error" or "cross_entropy"; the network's
    ``n_features``, ``n_outputs`` and ``per_step`` give the shapes.  One
    read-out position is masked (weight 0).
    """
    n_outputs = network.n_outputs
    parameters = {
        key: value + 0.2 * rng.normal(size=value.shape)
        for key, value in network.init_parameters(rng, np.float64).items()
    }
    X = rng.normal(size=(n_sequences, seq_len, network.n_features))
    position_shape = (n_sequences, seq_len) if network.per_step else (n_sequences,)
    weights = rng.uniform(0.2, 1.0, size=position_shape)
    weights.flat[0] = 0.0  # a masked position
    if loss == "squared_error":
        targets = rng.normal(size=position_shape + (n_outputs,))
        element_weights = np.repeat(weights[..., None], n_outputs, axis=-1)

        def loss_function(outputs):
            return squared_error(outputs, targets, element_weights, 2.5)
    else:
        labels = rng.randint(n_outputs, size=position_shape)

        def loss_function(outputs):
            return softmax_cross_entropy(outputs, labels, weights, 2.5)

    outputs, cache = network.forward(parameters, X)
    assert outputs.shape == position_shape + (n_outputs,)
    _, grad_outputs = loss_function(outputs)
    grads = network.backward(parameters, grad_outputs, cache)
    assert sorted(grads) == sorted(parameters)

    def objective():
        return loss_function(network.forward(parameters, X)[0])[0]

    for key, value in parameters.items():
        assert grads[key].shape == value.shape and grads[key].dtype == value.dtype, key
        assert_allclose(
            grads[key], numerical_gradient(objective, value), rtol=rtol, atol=1e-8, err_msg=key
        )
