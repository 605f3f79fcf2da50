"""Network layers with explicit forward and backward passes, in numpy.

Every layer follows one small protocol, so that networks are plain
compositions and the trainer needs no autograd framework:

* ``init_parameters(random_state, dtype)`` returns a dict of freshly
  initialised parameter arrays, keyed ``"<layer name>.<parameter>"``;
* ``decayed_parameters()`` lists the keys that weight decay applies to
  (matrices and convolution filters, never biases, gains or SSM constants);
* ``forward(parameters, inputs)`` returns ``(outputs, cache)``, where
  ``cache`` holds what the backward pass needs;
* ``backward(parameters, grad_outputs, cache)`` returns
  ``(grad_inputs, grads)``, where ``grads`` maps parameter keys to
  gradients of the same shape.

Parameters are passed in rather than held by the layer: one set of layer
objects serves several threads at once (each computing the gradient of its
own minibatch shard) and finite-difference tests can perturb any entry.

Activations are laid out ``(batch, length, features)`` and the layers act on
the last axis; nothing loops over time.  The large arrays a forward pass
keeps come from :func:`skseq._buffers.pass_array`, which reuses them from
one training step to the next.
"""

import numpy as np
from scipy.linalg.blas import dgemm, sgemm
from scipy.special import expit

from ..._buffers import pass_array
from ...inference._layers import relu, relu_backward, rms_norm, rms_norm_backward

__all__ = [
    "Layer",
    "Linear",
    "CausalDepthwiseConv1d",
    "SiLU",
    "ReLU",
    "GELU",
    "ACTIVATIONS",
    "RMSNorm",
    "softplus",
    "inverse_softplus",
]


# BLAS's general matrix product by dtype, for Linear's bias folded into it.
_GEMM = {np.dtype(np.float32): sgemm, np.dtype(np.float64): dgemm}


def softplus(x):
    """log(1 + exp(x)), computed without overflow; keeps the dtype of ``x``."""
    return np.logaddexp(x, np.zeros((), dtype=np.result_type(x, np.float32)))


def inverse_softplus(y):
    """The x with softplus(x) = y, for y > 0: x = log(exp(y) - 1)."""
    return np.log(np.expm1(y))


class Layer:
    """A named function of its input and of parameters passed alongside it.

    Parameters
    ----------
    name : str
        Prefix of the layer's parameter keys.
    """

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"{type(self).__name__}({self.name!r})"

    def key(self, parameter):
        """The full key of one of this layer's parameters."""
        return f"{self.name}.{parameter}"

    def init_parameters(self, random_state, dtype):
        """Fresh parameters; ``random_state`` is a ``numpy.random.RandomState``."""
        return {}

    def decayed_parameters(self):
        """Keys of the parameters that decoupled weight decay shrinks."""
        return []

    def forward(self, parameters, inputs):
        raise NotImplementedError

    def backward(self, parameters, grad_outputs, cache):
        raise NotImplementedError


class Linear(Layer):
    """Affine map on the last axis: ``y = x @ weight + bias``.

    ``weight`` has shape ``(in_features, out_features)`` and is initialised
    uniform in ``±init_scale / sqrt(in_features)``; ``bias`` starts at zero.

    Parameters
    ----------
    name : str
    in_features, out_features : int
    bias : bool, default=True
    init_scale : float, default=1.0
        Multiplies the initial weight range (residual output projections use
        ``1 / sqrt(n_layers)`` so the residual stream does not grow with depth).

    Examples
    --------
    >>> import numpy as np
    >>> layer = Linear("proj", 3, 2)
    >>> parameters = layer.init_parameters(np.random.RandomState(0), np.float64)
    >>> y, cache = layer.forward(parameters, np.ones((4, 5, 3)))
    >>> y.shape
    (4, 5, 2)
    """

    def __init__(self, name, in_features, out_features, *, bias=True, init_scale=1.0):
        super().__init__(name)
        self.in_features = in_features
        self.out_features = out_features
        self.bias = bias
        self.init_scale = init_scale

    def init_parameters(self, random_state, dtype):
        bound = self.init_scale / np.sqrt(self.in_features)
        parameters = {
            self.key("weight"): random_state.uniform(
                -bound, bound, size=(self.in_features, self.out_features)
            ).astype(dtype)
        }
        if self.bias:
            parameters[self.key("bias")] = np.zeros(self.out_features, dtype=dtype)
        return parameters

    def decayed_parameters(self):
        return [self.key("weight")]

    def forward(self, parameters, inputs):
        # One matrix product over all (batch, step) rows rather than one per batch element.
        flat_inputs = inputs.reshape(-1, self.in_features)
        weight = parameters[self.key("weight")]
        outputs = pass_array(
            (flat_inputs.shape[0], self.out_features), np.result_type(flat_inputs, weight)
        )
        gemm = _GEMM.get(outputs.dtype) if self.bias and outputs.size else None
        if gemm is not None and weight.dtype == flat_inputs.dtype == outputs.dtype:
            # outputs = 1 * inputs @ weight + 1 * outputs on outputs filled with the
            # bias: BLAS then skips the pass that zeroes its output (beta = 0) and
            # no pass adds the bias.  In BLAS's column-major terms the product is
            # outputs^T = weight^T inputs^T, all three without a copy.
            outputs[...] = parameters[self.key("bias")]
            outputs = gemm(1.0, weight.T, flat_inputs.T, 1.0, outputs.T, overwrite_c=True).T
        else:
            np.matmul(flat_inputs, weight, out=outputs)
            if self.bias:
                outputs += parameters[self.key("bias")]
        return outputs.reshape(inputs.shape[:-1] + (self.out_features,)), flat_inputs

    def backward(self, parameters, grad_outputs, cache, *, need_grad_inputs=True):
        flat_inputs = cache
        flat_grad_outputs = grad_outputs.reshape(-1, self.out_features)
        grads = {self.key("weight"): flat_inputs.T @ flat_grad_outputs}
        if self.bias:
            grads[self.key("bias")] = flat_grad_outputs.sum(axis=0)
        grad_inputs = None
        if need_grad_inputs:
            weight = parameters[self.key("weight")]
            if self.out_features == 1:
                # An outer product (a one-output head): BLAS takes 3 times as long.
                grad_inputs = flat_grad_outputs * weight[:, 0]
            else:
                grad_inputs = flat_grad_outputs @ weight.T
            grad_inputs = grad_inputs.reshape(grad_outputs.shape[:-1] + (self.in_features,))
        return grad_inputs, grads


class CausalDepthwiseConv1d(Layer):
    """Causal convolution along time, one filter per channel.

    ``y[b, t, c] = bias[c] + sum_k weight[c, k] * x[b, t - (K - 1) + k, c]``
    with ``x`` zero before the first step, so the output at ``t`` sees only
    steps ``t - K + 1 .. t``.  The loop runs over the ``K`` filter taps, each
    a whole-array operation.

    Parameters
    ----------
    name : str
    channels : int
    kernel_size : int

    Examples
    --------
    >>> import numpy as np
    >>> conv = CausalDepthwiseConv1d("conv", channels=2, kernel_size=3)
    >>> parameters = {"conv.weight": np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]),
    ...               "conv.bias": np.zeros(2)}
    >>> x = np.arange(8.0).reshape(1, 4, 2)
    >>> conv.forward(parameters, x)[0][0]     # channel 1 is delayed by two steps
    array([[0., 0.],
           [2., 0.],
           [4., 1.],
           [6., 3.]])
    """

    def __init__(self, name, channels, kernel_size):
        super().__init__(name)
        self.channels = channels
        self.kernel_size = kernel_size

    def init_parameters(self, random_state, dtype):
        bound = 1.0 / np.sqrt(self.kernel_size)
        return {
            self.key("weight"): random_state.uniform(
                -bound, bound, size=(self.channels, self.kernel_size)
            ).astype(dtype),
            self.key("bias"): np.zeros(self.channels, dtype=dtype),
        }

    def decayed_parameters(self):
        return [self.key("weight")]

    def _pad(self, inputs):
        batch, length, channels = inputs.shape
        padded = np.zeros((batch, length + self.kernel_size - 1, channels), dtype=inputs.dtype)
        padded[:, self.kernel_size - 1 :] = inputs
        return padded

    def forward(self, parameters, inputs):
        weight = parameters[self.key("weight")]
        length = inputs.shape[1]
        padded = self._pad(inputs)
        outputs = np.empty_like(inputs)
        outputs[...] = parameters[self.key("bias")]
        for tap in range(self.kernel_size):
            outputs += weight[:, tap] * padded[:, tap : tap + length]
        return outputs, padded

    def backward(self, parameters, grad_outputs, cache):
        padded = cache
        weight = parameters[self.key("weight")]
        length = grad_outputs.shape[1]
        grad_weight = np.empty_like(weight)
        grad_padded = np.zeros_like(padded)
        flat_grad_outputs = grad_outputs.reshape(-1, self.channels)
        for tap in range(self.kernel_size):
            window = padded[:, tap : tap + length].reshape(-1, self.channels)
            grad_weight[:, tap] = np.einsum("ic,ic->c", flat_grad_outputs, window)
            grad_padded[:, tap : tap + length] += weight[:, tap] * grad_outputs
        grads = {
            self.key("weight"): grad_weight,
            self.key("bias"): flat_grad_outputs.sum(axis=0),
        }
        return grad_padded[:, self.kernel_size - 1 :], grads


class SiLU(Layer):
    """``y = x * sigmoid(x)``, elementwise; no parameters.

    Examples
    --------
    >>> import numpy as np
    >>> SiLU("act").forward({}, np.array([0.0, 1.0]))[0]
    array([0.        , 0.73105858])
    """

    def __init__(self, name="silu"):
        super().__init__(name)

    def forward(self, parameters, inputs):
        sigmoid = expit(inputs)
        return inputs * sigmoid, (inputs, sigmoid)

    def backward(self, parameters, grad_outputs, cache):
        inputs, sigmoid = cache
        return grad_outputs * sigmoid * (1 + inputs * (1 - sigmoid)), {}


class RMSNorm(Layer):
    """Root-mean-square normalisation of the last axis with a learned gain.

    ``y = gain * x / sqrt(mean(x ** 2) + eps)``; the gain starts at one.
    Both passes are one pass over the rows each (:mod:`skseq.inference._layers`);
    :meth:`forward_residual` and the ``add_to`` of :meth:`backward` fuse the
    residual sum of a pre-norm block and its gradient into them.

    Parameters
    ----------
    name : str
    dim : int
    eps : float, default=1e-5

    Examples
    --------
    >>> import numpy as np
    >>> norm = RMSNorm("norm", 2)
    >>> parameters = norm.init_parameters(np.random.RandomState(0), np.float64)
    >>> np.round(norm.forward(parameters, np.array([[3.0, 4.0]]))[0], 4)
    array([[0.8485, 1.1314]])
    """

    def __init__(self, name, dim, eps=1e-5):
        super().__init__(name)
        self.dim = dim
        self.eps = eps

    def init_parameters(self, random_state, dtype):
        return {self.key("gain"): np.ones(self.dim, dtype=dtype)}

    def forward(self, parameters, inputs):
        outputs, total, inverse_rms = rms_norm(inputs, parameters[self.key("gain")], self.eps)
        return outputs, (total, inverse_rms)

    def forward_residual(self, parameters, hidden, update):
        """The norm of ``hidden + update``, summed in the same pass.

        Returns ``(hidden + update, outputs, cache)``: the pre-norm residual
        update of a residual stream and the next block's input at once.
        """
        outputs, total, inverse_rms = rms_norm(
            hidden, parameters[self.key("gain")], self.eps, update=update
        )
        return total, outputs, (total, inverse_rms)

    def backward(self, parameters, grad_outputs, cache, *, add_to=None):
        """As :meth:`Layer.backward`; with ``add_to`` (a C-contiguous array like
        the input), the input gradient is added into it in place and it is
        returned: the gradient of a residual stream, in the same pass."""
        total, inverse_rms = cache
        grad_inputs, grad_gain = rms_norm_backward(
            grad_outputs, total, inverse_rms, parameters[self.key("gain")], grad_inputs=add_to
        )
        return grad_inputs, {self.key("gain"): grad_gain}


class ReLU(Layer):
    """``y = max(x, 0)``, elementwise; no parameters.

    Parameters
    ----------
    name : str, default="relu"
    in_place : bool, default=False
        Overwrite the input with the output, and the output gradient with
        the input gradient (for a caller that owns both arrays): no fresh
        array of the activations' size, whose pages the system would zero.

    Examples
    --------
    >>> import numpy as np
    >>> ReLU().forward({}, np.array([-1.0, 2.0]))[0]
    array([0., 2.])
    """

    def __init__(self, name="relu", *, in_place=False):
        super().__init__(name)
        self.in_place = in_place

    def forward(self, parameters, inputs):
        # The cache is the output itself, which the next layer keeps anyway:
        # no mask array.  (np.maximum: np.where is several times slower.)
        # In place: one pass of the kernel (skseq.inference._layers.relu).
        outputs = relu(inputs) if self.in_place else np.maximum(inputs, 0)
        return outputs, outputs

    def backward(self, parameters, grad_outputs, cache):
        if self.in_place:
            return relu_backward(grad_outputs, cache), {}
        return grad_outputs * (cache > 0), {}


class GELU(Layer):
    """The Gaussian error linear unit in its tanh form, elementwise; no parameters.

    ``y = x / 2 * (1 + tanh(u))`` with ``u = sqrt(2 / pi) (x + 0.044715 x**3)``,
    which is within 1e-3 of ``x * Phi(x)`` (GPT-2's activation;
    ``torch.nn.GELU(approximate="tanh")``).

    Parameters
    ----------
    name : str, default="gelu"
    in_place : bool, default=False
        Overwrite the output gradient with the input gradient (the forward
        pass keeps its input, so it makes a fresh output).

    Examples
    --------
    >>> import numpy as np
    >>> GELU().forward({}, np.array([-1.0, 0.0, 1.0]))[0].round(4)
    array([-0.1588,  0.    ,  0.8412])
    """

    SQRT_2_OVER_PI = np.sqrt(2.0 / np.pi)
    CUBIC = 0.044715

    def __init__(self, name="gelu", *, in_place=False):
        super().__init__(name)
        self.in_place = in_place

    def forward(self, parameters, inputs):
        dtype = inputs.dtype
        squared = inputs * inputs
        tanh = np.tanh(
            inputs * (dtype.type(self.SQRT_2_OVER_PI) * (1 + dtype.type(self.CUBIC) * squared))
        )
        return dtype.type(0.5) * inputs * (1 + tanh), (inputs, tanh)

    def backward(self, parameters, grad_outputs, cache):
        inputs, tanh = cache
        dtype = inputs.dtype
        squared = inputs * inputs
        # d/dx [x/2 (1 + tanh u)] = (1 + tanh u) / 2 + x/2 (1 - tanh(u)**2) du/dx.
        slope_u = dtype.type(self.SQRT_2_OVER_PI) * (1 + dtype.type(3 * self.CUBIC) * squared)
        slope = dtype.type(0.5) * ((1 + tanh) + inputs * (1 - tanh * tanh) * slope_u)
        if self.in_place:  # the forward pass needs its input: only the gradient is reused
            grad_outputs *= slope
            return grad_outputs, {}
        return grad_outputs * slope, {}


ACTIVATIONS = {"relu": ReLU, "gelu": GELU}
