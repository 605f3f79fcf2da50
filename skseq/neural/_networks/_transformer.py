"""The layers of a causal Transformer: positional encoding, self-attention and the MLP.

A Transformer layer is two pre-norm residual sub-blocks of
:class:`~skseq.neural._networks._residual.ResidualSequenceNetwork`,
``h <- h + attention(rmsnorm(h))`` then ``h <- h + mlp(rmsnorm(h))``:

* :class:`CausalSelfAttention` projects its input to queries, keys and values
  of ``n_heads`` heads of ``d_head = d_model / n_heads`` channels, runs
  :func:`skseq.inference.causal_attention` (each step attends to itself and
  the steps before it) and projects the concatenated heads back;
* :class:`FeedForward` is ``Linear(d_model, d_ff)``, an activation (ReLU or
  GELU, of :mod:`~skseq.neural._networks._layers`) and
  ``Linear(d_ff, d_model)``, at every step on its own.

:class:`SinusoidalPositionalEncoding` adds the fixed sinusoids of Vaswani et
al. to the projected input, so that attention (which is blind to order) can
tell the steps apart; it has no parameters and works for any length.
The network, its gradients and its initialisation are in the user guide
(doc/user_guide/attention.rst, "The Transformer network").
"""

import numpy as np

from ..._buffers import pass_array
from ...inference.attention import causal_attention, causal_attention_backward
from ._layers import ACTIVATIONS, Layer, Linear

__all__ = [
    "SinusoidalPositionalEncoding",
    "CausalSelfAttention",
    "FeedForward",
    "transformer_layer",
]

# The wavelengths of the positional encoding grow geometrically from 2 pi to
# 2 pi * POSITION_BASE over the channels (Vaswani et al., 2017).
POSITION_BASE = 10000.0


def sinusoidal_positions(length, d_model, dtype):
    """The encoding ``E`` of shape (length, d_model).

    ``E[t, 2i] = sin(t / base**(2i / d_model))`` and ``E[t, 2i + 1] =
    cos(t / base**(2i / d_model))``, with ``base = 10000``.

    Examples
    --------
    >>> sinusoidal_positions(3, 2, np.float64).round(4)
    array([[ 0.    ,  1.    ],
           [ 0.8415,  0.5403],
           [ 0.9093, -0.4161]])
    """
    steps = np.arange(length, dtype=np.float64)[:, None]
    pairs = np.arange(0, d_model, 2, dtype=np.float64)
    angles = steps / POSITION_BASE ** (pairs / d_model)
    encoding = np.empty((length, d_model), dtype=np.float64)
    encoding[:, 0::2] = np.sin(angles)
    encoding[:, 1::2] = np.cos(angles[:, : d_model // 2])
    return encoding.astype(dtype)


class SinusoidalPositionalEncoding(Layer):
    """Adds :func:`sinusoidal_positions` to a ``(batch, length, d_model)`` input.

    No parameters; the gradient passes through unchanged.  The table of the
    longest length seen so far is kept and sliced.

    Parameters
    ----------
    name : str
    d_model : int

    Examples
    --------
    >>> import numpy as np
    >>> encoding = SinusoidalPositionalEncoding("positions", 4)
    >>> encoding.forward({}, np.zeros((2, 3, 4)))[0][1, 1].round(4)
    array([0.8415, 0.5403, 0.01  , 1.    ])
    """

    def __init__(self, name, d_model):
        super().__init__(name)
        self.d_model = d_model
        self._tables = {}

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_tables"] = {}  # recomputed on demand; not worth pickling
        return state

    def _table(self, length, dtype):
        table = self._tables.get(np.dtype(dtype))
        if table is None or table.shape[0] < length:
            # Threads may race here; each computes the same table.
            table = sinusoidal_positions(max(length, 64), self.d_model, dtype)
            self._tables[np.dtype(dtype)] = table
        return table[:length]

    def forward(self, parameters, inputs):
        table = self._table(inputs.shape[1], inputs.dtype)
        return np.add(inputs, table, out=pass_array(inputs.shape, inputs.dtype)), None

    def backward(self, parameters, grad_outputs, cache):
        return grad_outputs, {}


class CausalSelfAttention(Layer):
    """Multi-head causal self-attention, without its residual connection and norm.

    ``qkv`` maps the input to ``3 * d_model`` channels: the queries, keys and
    values of ``n_heads`` heads of ``d_model // n_heads`` channels each.  Each
    head runs :func:`~skseq.inference.causal_attention` with the scale
    ``1 / sqrt(d_head)``; ``out_proj`` maps the concatenated heads back to
    ``d_model``.  The forward pass keeps the per-row log-sum-exp of every head
    for the backward pass, never a ``(length, length)`` matrix.

    Parameters
    ----------
    name : str
    d_model : int
    n_heads : int
        Must divide ``d_model``.
    out_init_scale : float, default=1.0
        Multiplies the initial range of ``out_proj``.

    Examples
    --------
    >>> import numpy as np
    >>> attention = CausalSelfAttention("attention", d_model=8, n_heads=2)
    >>> parameters = attention.init_parameters(np.random.RandomState(0), np.float64)
    >>> sorted(parameters)
    ['attention.out_proj.bias', 'attention.out_proj.weight', 'attention.qkv.bias', \
'attention.qkv.weight']
    >>> y, cache = attention.forward(parameters, np.ones((3, 5, 8)))
    >>> y.shape
    (3, 5, 8)
    """

    def __init__(self, name, d_model, n_heads, *, out_init_scale=1.0):
        super().__init__(name)
        if d_model % n_heads:
            raise ValueError(
                f"n_heads={n_heads} does not divide d_model={d_model}: each head has "
                "d_model // n_heads channels; pick n_heads among the divisors of d_model."
            )
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.qkv = Linear(self.key("qkv"), d_model, 3 * d_model)
        self.out_proj = Linear(self.key("out_proj"), d_model, d_model, init_scale=out_init_scale)

    def init_parameters(self, random_state, dtype):
        parameters = self.qkv.init_parameters(random_state, dtype)
        parameters.update(self.out_proj.init_parameters(random_state, dtype))
        return parameters

    def decayed_parameters(self):
        return self.qkv.decayed_parameters() + self.out_proj.decayed_parameters()

    def forward(self, parameters, inputs):
        batch, length, _ = inputs.shape
        projected, qkv_cache = self.qkv.forward(parameters, inputs)
        # Heads as strided (batch, n_heads, length, d_head) views of the
        # projection: the attention kernel reads them in place.
        packed = projected.reshape(batch, length, 3, self.n_heads, self.d_head)
        # The kernel writes the heads side by side at every step, the layout
        # of out_proj's input.
        merged = pass_array((batch, length, self.n_heads, self.d_head), inputs.dtype)
        # The projections of finite inputs by finite weights: no finiteness pass
        # (non-finite results would still be caught, and the loss checked).
        _, lse = causal_attention(
            *self._heads(packed),
            return_lse=True,
            out=merged.transpose(0, 2, 1, 3),
            check_finite=False,
        )
        merged = merged.reshape(batch, length, self.d_model)
        outputs, out_cache = self.out_proj.forward(parameters, merged)
        return outputs, (qkv_cache, packed, merged, lse, out_cache)

    def _heads(self, packed):
        """Strided (batch, n_heads, length, d_head) views of q, k and v (or their gradients)."""
        return [packed[:, :, index].transpose(0, 2, 1, 3) for index in range(3)]

    def backward(self, parameters, grad_outputs, cache):
        qkv_cache, packed, merged, lse, out_cache = cache
        batch, length = packed.shape[:2]
        grads = {}
        grad_merged, layer_grads = self.out_proj.backward(parameters, grad_outputs, out_cache)
        grads.update(layer_grads)

        def by_head(array):
            return array.reshape(batch, length, self.n_heads, self.d_head).transpose(0, 2, 1, 3)

        grad_packed = np.empty_like(packed)
        dq, dk, dv = self._heads(grad_packed)
        causal_attention_backward(
            by_head(grad_merged),
            *self._heads(packed),
            by_head(merged),
            lse,
            dq=dq,
            dk=dk,
            dv=dv,
            check_finite=False,
        )
        grad_inputs, layer_grads = self.qkv.backward(
            parameters, grad_packed.reshape(batch, length, 3 * self.d_model), qkv_cache
        )
        grads.update(layer_grads)
        return grad_inputs, grads


class FeedForward(Layer):
    """The position-wise MLP of a Transformer layer, without its residual and norm.

    ``y = Linear(d_ff, d_model)(activation(Linear(d_model, d_ff)(x)))``, both
    with a bias.

    Parameters
    ----------
    name : str
    d_model, d_ff : int
    activation : {"relu", "gelu"}
    out_init_scale : float, default=1.0
        Multiplies the initial range of the second projection.

    Examples
    --------
    >>> import numpy as np
    >>> mlp = FeedForward("mlp", d_model=4, d_ff=16, activation="gelu")
    >>> parameters = mlp.init_parameters(np.random.RandomState(0), np.float32)
    >>> sorted(parameters)
    ['mlp.fc1.bias', 'mlp.fc1.weight', 'mlp.fc2.bias', 'mlp.fc2.weight']
    >>> mlp.forward(parameters, np.ones((2, 3, 4), dtype=np.float32))[0].dtype
    dtype('float32')
    """

    def __init__(self, name, d_model, d_ff, activation, *, out_init_scale=1.0):
        super().__init__(name)
        self.fc1 = Linear(self.key("fc1"), d_model, d_ff)
        # fc1's output and fc2's input gradient are private to the block.
        self.activation = ACTIVATIONS[activation](self.key(activation), in_place=True)
        self.fc2 = Linear(self.key("fc2"), d_ff, d_model, init_scale=out_init_scale)

    def init_parameters(self, random_state, dtype):
        parameters = self.fc1.init_parameters(random_state, dtype)
        parameters.update(self.fc2.init_parameters(random_state, dtype))
        return parameters

    def decayed_parameters(self):
        return self.fc1.decayed_parameters() + self.fc2.decayed_parameters()

    def forward(self, parameters, inputs):
        hidden, fc1_cache = self.fc1.forward(parameters, inputs)
        activated, activation_cache = self.activation.forward(parameters, hidden)
        outputs, fc2_cache = self.fc2.forward(parameters, activated)
        return outputs, (fc1_cache, activation_cache, fc2_cache)

    def backward(self, parameters, grad_outputs, cache):
        fc1_cache, activation_cache, fc2_cache = cache
        grad_activated, grads = self.fc2.backward(parameters, grad_outputs, fc2_cache)
        grad_hidden, _ = self.activation.backward(parameters, grad_activated, activation_cache)
        grad_inputs, layer_grads = self.fc1.backward(parameters, grad_hidden, fc1_cache)
        grads.update(layer_grads)
        return grad_inputs, grads


def transformer_layer(prefix, d_model, *, out_init_scale, n_heads, d_ff, activation):
    """One Transformer layer: the sub-blocks ``<prefix>.attention`` and ``<prefix>.mlp``.

    The ``layer`` of :func:`~skseq.neural._networks._residual.make_network`,
    with ``updates_per_layer=2`` (each sub-block is a residual update, and
    the output projections of both start ``1 / sqrt(2 n_layers)`` times
    smaller: GPT-2's initialisation) and the sinusoidal positional encoding.
    ``n_heads`` must divide ``d_model``.

    Examples
    --------
    >>> attention, mlp = transformer_layer("layers.0", 8, out_init_scale=0.5, n_heads=2,
    ...                                    d_ff=32, activation="relu")
    >>> attention.name, attention.d_head, mlp.name
    ('layers.0.attention', 4, 'layers.0.mlp')
    """
    return (
        CausalSelfAttention(f"{prefix}.attention", d_model, n_heads, out_init_scale=out_init_scale),
        FeedForward(f"{prefix}.mlp", d_model, d_ff, activation, out_init_scale=out_init_scale),
    )
