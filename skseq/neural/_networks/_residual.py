"""A residual sequence network around any sequence-mixing block.

``input_projection`` (n_features -> d_model), optionally a positional
encoding, then for each block a pre-norm residual update
``h <- h + block(rmsnorm(h))``, a final RMSNorm and a linear ``head`` read
out either at every step or only at the last one.  The blocks are any
:class:`~skseq.neural._networks._layers.Layer` mapping ``(batch, length, d_model)`` to
the same shape (Mamba blocks, attention blocks, ...).  A layer may also be a
tuple of such sub-blocks, each with its own pre-norm residual update (a
Transformer layer: attention, then an MLP).

:func:`make_network` builds every model's network: the model supplies its
layer (``mamba_layer``, ``s4d_layer``, ``elman_layer``,
``transformer_layer``, each in the model's module of this package).
"""

import numpy as np

from ._layers import Linear, RMSNorm

__all__ = ["ResidualSequenceNetwork", "make_network"]


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
    blocks : list of Layer or of tuple of Layer
        The layers, applied in order; each keeps the shape.  A Layer is one
        residual block with its pre-norm ``layers.<i>.norm``; a tuple of
        Layers is applied as consecutive residual sub-blocks with pre-norms
        ``layers.<i>.norm1``, ``layers.<i>.norm2``, ...
    per_step : bool
        If True the head reads every step (outputs ``(batch, length,
        n_outputs)``), else only the last (outputs ``(batch, n_outputs)``).
    positional_encoding : Layer, default=None
        Applied to the projected input before the first block (for example
        adding fixed sinusoids); None for none.

    Examples
    --------
    >>> import numpy as np
    >>> network = ResidualSequenceNetwork(2, 4, 3, blocks=[], per_step=True)
    >>> parameters = network.init_parameters(np.random.RandomState(0), np.float64)
    >>> network.forward(parameters, np.zeros((1, 6, 2)))[0].shape
    (1, 6, 3)
    """

    def __init__(
        self, n_features, d_model, n_outputs, blocks, *, per_step, positional_encoding=None
    ):
        self.n_features = n_features
        self.d_model = d_model
        self.n_outputs = n_outputs
        self.per_step = per_step
        self.input_projection = Linear("input_projection", n_features, d_model)
        self.positional_encoding = positional_encoding
        self.blocks = list(blocks)
        self.norms = []
        # One (norm, block) pair per residual update, in order.
        self._residual_blocks = []
        for index, layer in enumerate(self.blocks):
            if isinstance(layer, tuple):
                norms = tuple(
                    RMSNorm(f"layers.{index}.norm{number}", d_model)
                    for number in range(1, len(layer) + 1)
                )
                self._residual_blocks.extend(zip(norms, layer, strict=True))
            else:
                norms = RMSNorm(f"layers.{index}.norm", d_model)
                self._residual_blocks.append((norms, layer))
            self.norms.append(norms)
        self.final_norm = RMSNorm("final_norm", d_model)
        self.head = Linear("head", d_model, n_outputs)

    def _layers(self):
        yield self.input_projection
        if self.positional_encoding is not None:
            yield self.positional_encoding
        for norm, block in self._residual_blocks:
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
        position_cache = None
        if self.positional_encoding is not None:
            hidden, position_cache = self.positional_encoding.forward(parameters, hidden)
        block_caches = []
        # Each residual sum h + update is made by the next norm, in its pass.
        update = None
        for norm, block in self._residual_blocks:
            if update is None:
                normalised, norm_cache = norm.forward(parameters, hidden)
            else:
                hidden, normalised, norm_cache = norm.forward_residual(parameters, hidden, update)
            update, block_cache = block.forward(parameters, normalised)
            block_caches.append((norm_cache, block_cache))
        if self.per_step and update is not None:
            hidden, normalised, final_cache = self.final_norm.forward_residual(
                parameters, hidden, update
            )
        elif self.per_step:  # no blocks
            normalised, final_cache = self.final_norm.forward(parameters, hidden)
        else:
            # Only the last step is read out: only its residual sum is made (a
            # copy without blocks, so that the cache always holds its own array).
            read = hidden[:, -1].copy() if update is None else hidden[:, -1] + update[:, -1]
            normalised, final_cache = self.final_norm.forward(parameters, read)
        outputs, head_cache = self.head.forward(parameters, normalised)
        # Five entries, the positional encoding's with the input projection's: code
        # that reads the block caches (ElmanRNN's gradient_norms) unpacks five.
        cache = (hidden.shape, (input_cache, position_cache), block_caches, final_cache, head_cache)
        return outputs, cache

    def backward(self, parameters, grad_outputs, cache):
        """Gradients of every parameter given the gradient of the outputs.

        Consumes ``cache``: the blocks' activations are released as the pass
        goes down the stack, so a cache serves one backward pass.
        """
        hidden_shape, (input_cache, position_cache), block_caches, final_cache, head_cache = cache
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
        for norm, block in reversed(self._residual_blocks):
            # Each block's activations are released as soon as its backward pass
            # is done, so the memory serves the gradients of the blocks below
            # (lower peak, fewer fresh pages): a cache serves one backward pass.
            norm_cache, block_cache = block_caches.pop()
            grad_update, layer_grads = block.backward(parameters, grad_hidden, block_cache)
            grads.update(layer_grads)
            # The residual stream's gradient passes on unchanged plus the norm's
            # input gradient, which the norm adds into it in its pass.
            grad_hidden, layer_grads = norm.backward(
                parameters, grad_update, norm_cache, add_to=grad_hidden
            )
            grads.update(layer_grads)
            del norm_cache, block_cache, grad_update
        if self.positional_encoding is not None:
            grad_hidden, layer_grads = self.positional_encoding.backward(
                parameters, grad_hidden, position_cache
            )
            grads.update(layer_grads)
        _, layer_grads = self.input_projection.backward(
            parameters, grad_hidden, input_cache, need_grad_inputs=False
        )
        grads.update(layer_grads)
        return grads


def make_network(
    n_features,
    n_outputs,
    layer,
    *,
    per_step,
    d_model,
    n_layers,
    updates_per_layer=1,
    positional_encoding=None,
    **layer_options,
):
    """A residual stack of ``n_layers`` layers with input projection, final norm and head.

    Layer ``i`` is ``layer(f"layers.{i}", d_model, out_init_scale=s,
    **layer_options)``: a :class:`~skseq.neural._networks._layers.Layer` or a
    tuple of them (consecutive residual sub-blocks).  Its output projections
    start ``s = 1 / sqrt(updates_per_layer * n_layers)`` times smaller, so
    that the residual stream does not grow with the number of residual
    updates at initialisation (GPT-2's initialisation).

    Parameters
    ----------
    n_features : int
        Features per time step of the input.
    n_outputs : int
        Outputs per read-out position (targets, or classes for logits).
    layer : callable
        The model's layer: ``mamba_layer``, ``s4d_layer``, ``elman_layer``
        or ``transformer_layer``.
    per_step : bool
        Read out every step, or only the last one.
    d_model, n_layers : int
    updates_per_layer : int, default=1
        Residual updates of one layer (2 for a Transformer layer).
    positional_encoding : Layer, default=None
        See :class:`ResidualSequenceNetwork`.
    **layer_options
        The model's own sizes, passed to ``layer``.

    Returns
    -------
    network : ResidualSequenceNetwork

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.neural._networks._elman_rnn import elman_layer
    >>> network = make_network(3, 2, elman_layer, per_step=False, d_model=8, n_layers=2,
    ...                        init_spectral_radius=1.0)
    >>> parameters = network.init_parameters(np.random.RandomState(0), np.float32)
    >>> outputs, cache = network.forward(parameters, np.ones((5, 7, 3), dtype=np.float32))
    >>> outputs.shape, outputs.dtype
    ((5, 2), dtype('float32'))
    """
    out_init_scale = 1.0 / np.sqrt(updates_per_layer * n_layers)
    layers = [
        layer(f"layers.{index}", d_model, out_init_scale=out_init_scale, **layer_options)
        for index in range(n_layers)
    ]
    return ResidualSequenceNetwork(
        n_features,
        d_model,
        n_outputs,
        layers,
        per_step=per_step,
        positional_encoding=positional_encoding,
    )
