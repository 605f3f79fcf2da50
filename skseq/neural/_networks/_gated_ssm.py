"""The gated state-space block that the selective SSM and S4D share.

:class:`GatedSSMBlock` is the structure of a Mamba block around its
sequence mixer: ``in_proj`` to the SSM input ``v`` and the gate ``z``,
``u = silu(conv(v))``, the mixer, the gate ``y * silu(z)`` and ``out_proj``.
The selective SSM's :class:`~skseq.neural._networks._selective_ssm.MambaBlock`
and S4D's :class:`~skseq.neural._networks._s4d.S4DBlock` supply the mixer; a
comparison of the two isolates selectivity.
"""

import numpy as np

from ._layers import CausalDepthwiseConv1d, Layer, Linear, SiLU

__all__ = ["GatedSSMBlock", "DT_MIN", "DT_MAX"]

# The range of the initial step sizes Δ (log-uniform), in both mixers.
DT_MIN = 1e-3
DT_MAX = 1e-1


def _channels_major(array):
    """(batch, length, channels) -> contiguous (batch, channels, length), the scan's layout."""
    return np.ascontiguousarray(array.transpose(0, 2, 1))


class GatedSSMBlock(Layer):
    """The structure of a Mamba block around its state-space sequence mixer.

    ``in_proj`` maps the input to ``2 * d_inner`` channels, split into the
    SSM input ``v`` and the gate ``z``; ``u = silu(conv(v))`` (causal
    depthwise convolution); the mixer maps ``u`` to ``y`` and gates it,
    ``y * silu(z)``; ``out_proj`` maps the ``d_inner`` channels back to
    ``d_model``.  Subclasses supply the mixer: ``_mixer_layers()`` (its
    linear layers, initialised after ``conv`` and before ``out_proj``),
    ``_init_mixer_parameters``, ``_decayed_mixer_parameters``, ``_mix`` and
    ``_mix_backward``.  Two blocks with different mixers differ in nothing
    else.

    Parameters
    ----------
    name : str
    d_model : int
        Width of the residual stream.
    d_conv : int
        Taps of the causal depthwise convolution.
    expand : int
        ``d_inner = expand * d_model`` channels inside the block.
    out_init_scale : float, default=1.0
        Multiplies the initial range of ``out_proj``.
    """

    def __init__(self, name, d_model, d_conv, expand, *, out_init_scale=1.0):
        super().__init__(name)
        self.d_model = d_model
        self.d_conv = d_conv
        self.expand = expand
        self.d_inner = expand * d_model
        self.in_proj = Linear(self.key("in_proj"), d_model, 2 * self.d_inner, bias=False)
        self.conv = CausalDepthwiseConv1d(self.key("conv"), self.d_inner, d_conv)
        self.activation = SiLU(self.key("silu"))
        self.out_proj = Linear(
            self.key("out_proj"), self.d_inner, d_model, bias=False, init_scale=out_init_scale
        )

    def _linear_layers(self):
        return [self.in_proj, self.conv, *self._mixer_layers(), self.out_proj]

    def _mixer_layers(self):
        return []

    def _init_mixer_parameters(self, random_state, dtype):
        raise NotImplementedError

    def _decayed_mixer_parameters(self):
        return []

    def _mix(self, parameters, activated, gate):
        """Gated mixer output ``(batch, length, d_inner)`` for ``u`` and ``z``, and a cache."""
        raise NotImplementedError

    def _mix_backward(self, parameters, grad_mixed, cache):
        """Gradients ``(grad_u, grad_z, grads)`` given that of the gated mixer output."""
        raise NotImplementedError

    def init_parameters(self, random_state, dtype):
        parameters = {}
        for layer in self._linear_layers():
            parameters.update(layer.init_parameters(random_state, dtype))
        parameters.update(self._init_mixer_parameters(random_state, dtype))
        return parameters

    def decayed_parameters(self):
        keys = [key for layer in self._linear_layers() for key in layer.decayed_parameters()]
        return keys + self._decayed_mixer_parameters()

    def forward(self, parameters, inputs):
        d_inner = self.d_inner
        projected, in_cache = self.in_proj.forward(parameters, inputs)
        ssm_input, gate = projected[..., :d_inner], projected[..., d_inner:]
        convolved, conv_cache = self.conv.forward(parameters, ssm_input)
        activated, activation_cache = self.activation.forward(parameters, convolved)
        mixed, mixer_cache = self._mix(parameters, activated, gate)
        outputs, out_cache = self.out_proj.forward(parameters, mixed)
        return outputs, (in_cache, conv_cache, activation_cache, mixer_cache, out_cache)

    def backward(self, parameters, grad_outputs, cache):
        in_cache, conv_cache, activation_cache, mixer_cache, out_cache = cache
        grads = {}
        grad_mixed, layer_grads = self.out_proj.backward(parameters, grad_outputs, out_cache)
        grads.update(layer_grads)
        grad_activated, grad_gate, mixer_grads = self._mix_backward(
            parameters, grad_mixed, mixer_cache
        )
        grads.update(mixer_grads)
        grad_convolved, _ = self.activation.backward(parameters, grad_activated, activation_cache)
        grad_ssm_input, layer_grads = self.conv.backward(parameters, grad_convolved, conv_cache)
        grads.update(layer_grads)
        grad_projected = np.concatenate([grad_ssm_input, grad_gate], axis=-1)
        grad_inputs, layer_grads = self.in_proj.backward(parameters, grad_projected, in_cache)
        grads.update(layer_grads)
        return grad_inputs, grads
