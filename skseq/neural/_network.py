"""A residual sequence network around any sequence-mixing block.

``input_projection`` (n_features -> d_model), then for each block a pre-norm
residual update ``h <- h + block(rmsnorm(h))``, a final RMSNorm and a linear
``head`` read out either at every step or only at the last one.  The blocks
are any :class:`~skseq.neural._layers.Layer` mapping ``(batch, length,
d_model)`` to the same shape: Mamba blocks here; S4D, recurrent or attention
blocks later.
"""

import numpy as np

from ._layers import Linear, RMSNorm

__all__ = ["ResidualSequenceNetwork"]


class ResidualSequenceNetwork:
    """Input projection, pre-norm residual blocks, final norm, linear read-out.

    Parameters
    ----------
    n_features : int
        Features per time step.
    d_model : int
        Width of the residual stream.
    n_outputs : int
        Outputs per read-out position.
    blocks : list of Layer
        The sequence mixers, applied in order; each keeps the shape.
    per_step : bool
        If True the head reads every step (outputs ``(batch, length,
        n_outputs)``), else only the last (outputs ``(batch, n_outputs)``).

    Examples
    --------
    >>> import numpy as np
    >>> network = ResidualSequenceNetwork(2, 4, 3, blocks=[], per_step=True)
    >>> parameters = network.init_parameters(np.random.RandomState(0), np.float64)
    >>> network.forward(parameters, np.zeros((1, 6, 2)))[0].shape
    (1, 6, 3)
    """

    def __init__(self, n_features, d_model, n_outputs, blocks, *, per_step):
        self.n_features = n_features
        self.d_model = d_model
        self.n_outputs = n_outputs
        self.per_step = per_step
        self.input_projection = Linear("input_projection", n_features, d_model)
        self.blocks = list(blocks)
        self.norms = [RMSNorm(f"layers.{index}.norm", d_model) for index in range(len(self.blocks))]
        self.final_norm = RMSNorm("final_norm", d_model)
        self.head = Linear("head", d_model, n_outputs)

    def _layers(self):
        yield self.input_projection
        for norm, block in zip(self.norms, self.blocks, strict=True):
            yield norm
            yield block
        yield self.final_norm
        yield self.head

    def init_parameters(self, random_state, dtype):
        """All parameters, drawn from ``random_state`` in a fixed order."""
        parameters = {}
        for layer in self._layers():
            parameters.update(layer.init_parameters(random_state, dtype))
        return parameters

    def decayed_parameters(self):
        """Keys that decoupled weight decay applies to."""
        return [key for layer in self._layers() for key in layer.decayed_parameters()]

    def forward(self, parameters, X):
        """Outputs for ``X`` of shape ``(batch, length, n_features)``, and the cache."""
        hidden, input_cache = self.input_projection.forward(parameters, X)
        block_caches = []
        for norm, block in zip(self.norms, self.blocks, strict=True):
            normalised, norm_cache = norm.forward(parameters, hidden)
            update, block_cache = block.forward(parameters, normalised)
            hidden = hidden + update
            block_caches.append((norm_cache, block_cache))
        read = hidden if self.per_step else hidden[:, -1]
        normalised, final_cache = self.final_norm.forward(parameters, read)
        outputs, head_cache = self.head.forward(parameters, normalised)
        return outputs, (hidden.shape, input_cache, block_caches, final_cache, head_cache)

    def backward(self, parameters, grad_outputs, cache):
        """Gradients of every parameter given the gradient of the outputs."""
        hidden_shape, input_cache, block_caches, final_cache, head_cache = cache
        grads = {}
        grad_normalised, layer_grads = self.head.backward(parameters, grad_outputs, head_cache)
        grads.update(layer_grads)
        grad_read, layer_grads = self.final_norm.backward(parameters, grad_normalised, final_cache)
        grads.update(layer_grads)
        if self.per_step:
            grad_hidden = grad_read
        else:
            grad_hidden = np.zeros(hidden_shape, dtype=grad_read.dtype)
            grad_hidden[:, -1] = grad_read
        for norm, block, (norm_cache, block_cache) in zip(
            reversed(self.norms), reversed(self.blocks), reversed(block_caches), strict=True
        ):
            grad_update, layer_grads = block.backward(parameters, grad_hidden, block_cache)
            grads.update(layer_grads)
            grad_normalised, layer_grads = norm.backward(parameters, grad_update, norm_cache)
            grads.update(layer_grads)
            grad_hidden = grad_hidden + grad_normalised
        _, layer_grads = self.input_projection.backward(
            parameters, grad_hidden, input_cache, need_grad_inputs=False
        )
        grads.update(layer_grads)
        return grads
