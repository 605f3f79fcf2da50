"""The Mamba block: a gated, selective state-space sequence mixer.

For an input ``x`` of shape ``(batch, length, d_model)`` and
``d_inner = expand * d_model``:

1. ``in_proj`` maps ``x`` to ``2 * d_inner`` channels, split into the SSM
   input ``v`` and the gate ``z``;
2. a causal depthwise convolution (``d_conv`` taps) and SiLU give
   ``u = silu(conv(v))``;
3. ``x_proj`` maps ``u`` at every step to ``(dt_rank, N, N)`` numbers: the
   low-rank step-size input ``r``, and the selective ``B_t`` and ``C_t``;
4. ``dt_proj`` lifts ``r`` back to ``d_inner`` channels; its bias ``b_Δ`` is
   handed to the scan, which forms ``Δ = softplus(dt_proj(r) + b_Δ)``;
5. the selective scan (:func:`skseq.inference.scan.selective_scan`) runs
   ``h_t = exp(Δ_t A) h_{t-1} + Δ_t B_t u_t``, ``y_t = C_t·h_t + D u_t`` and
   gates ``y_t * silu(z_t)``;
6. ``out_proj`` maps the ``d_inner`` channels back to ``d_model``.

``A = -exp(A_log)`` with ``A_log = log(1..N)`` in every channel (S4D-Real),
``D = 1``, and ``b_Δ = softplus⁻¹(Δ₀)`` with ``Δ₀`` log-uniform in
[1e-3, 1e-1].  The scan kernel does the recurrence (and, in its backward
pass, recomputes the states); everything here is matmuls on whole arrays.

Steps 1, 2 and 6 and the gate are :class:`GatedSSMBlock`, shared with the
S4D block (:mod:`skseq.neural._networks._s4d`), which replaces steps 3 to 5 by a
time-invariant SSM.  The maths is in the user guide (:ref:`selective_ssm`).
"""

import numpy as np

from ...inference.scan import selective_scan, selective_scan_backward
from ._gated_ssm import DT_MAX, DT_MIN, GatedSSMBlock, _channels_major
from ._layers import Linear, inverse_softplus

__all__ = ["MambaBlock", "mamba_layer", "resolve_dt_rank"]

def resolve_dt_rank(dt_rank, d_model):
    """``"auto"`` means ``ceil(d_model / 16)``."""
    if isinstance(dt_rank, str) and dt_rank == "auto":
        return -(-d_model // 16)
    return int(dt_rank)


class MambaBlock(GatedSSMBlock):
    """One Mamba mixer, without its residual connection and norm.

    Parameters
    ----------
    name : str
    d_model : int
        Width of the residual stream.
    d_state : int
        State size N of every channel's SSM.
    d_conv : int
        Taps of the causal depthwise convolution.
    expand : int
        ``d_inner = expand * d_model`` channels inside the block.
    dt_rank : int
        Rank of the step-size projection.
    out_init_scale : float, default=1.0
        Multiplies the initial range of ``out_proj``.

    Examples
    --------
    >>> import numpy as np
    >>> block = MambaBlock("mixer", d_model=4, d_state=3, d_conv=4, expand=2, dt_rank=1)
    >>> parameters = block.init_parameters(np.random.RandomState(0), np.float64)
    >>> sorted(parameters)[:3]
    ['mixer.A_log', 'mixer.D', 'mixer.conv.bias']
    >>> y, cache = block.forward(parameters, np.ones((2, 5, 4)))
    >>> y.shape
    (2, 5, 4)
    """

    def __init__(self, name, d_model, d_state, d_conv, expand, dt_rank, *, out_init_scale=1.0):
        super().__init__(name, d_model, d_conv, expand, out_init_scale=out_init_scale)
        self.d_state = d_state
        self.dt_rank = dt_rank
        self.x_proj = Linear(self.key("x_proj"), self.d_inner, dt_rank + 2 * d_state, bias=False)
        self.dt_proj = Linear(self.key("dt_proj"), dt_rank, self.d_inner, bias=False)

    def _mixer_layers(self):
        return [self.x_proj, self.dt_proj]

    def _init_mixer_parameters(self, random_state, dtype):
        parameters = {}
        log_dt = random_state.uniform(np.log(DT_MIN), np.log(DT_MAX), size=self.d_inner)
        parameters[self.key("dt_bias")] = inverse_softplus(np.exp(log_dt)).astype(dtype)
        state_index = np.arange(1, self.d_state + 1, dtype=np.float64)
        parameters[self.key("A_log")] = np.tile(np.log(state_index), (self.d_inner, 1)).astype(
            dtype
        )
        parameters[self.key("D")] = np.ones(self.d_inner, dtype=dtype)
        return parameters

    def _mix(self, parameters, activated, gate):
        dt_rank, d_state = self.dt_rank, self.d_state
        selection, x_proj_cache = self.x_proj.forward(parameters, activated)
        step_input = selection[..., :dt_rank]
        delta, dt_proj_cache = self.dt_proj.forward(parameters, step_input)

        A = -np.exp(parameters[self.key("A_log")])
        scan_inputs = dict(
            u=_channels_major(activated),
            delta=_channels_major(delta),
            A=A,
            B=_channels_major(selection[..., dt_rank : dt_rank + d_state]),
            C=_channels_major(selection[..., dt_rank + d_state :]),
            D=parameters[self.key("D")],
            z=_channels_major(gate),
            delta_bias=parameters[self.key("dt_bias")],
        )
        scanned, _ = selective_scan(**scan_inputs, delta_softplus=True)
        mixed = np.ascontiguousarray(scanned.transpose(0, 2, 1))
        return mixed, (x_proj_cache, dt_proj_cache, scan_inputs)

    def _mix_backward(self, parameters, grad_mixed, cache):
        x_proj_cache, dt_proj_cache, scan_inputs = cache
        grads = {}
        scan_grads = selective_scan_backward(
            _channels_major(grad_mixed), **scan_inputs, delta_softplus=True
        )
        grads[self.key("A_log")] = scan_grads.dA * scan_inputs["A"]
        grads[self.key("D")] = scan_grads.dD
        grads[self.key("dt_bias")] = scan_grads.ddelta_bias

        grad_step_input, layer_grads = self.dt_proj.backward(
            parameters, scan_grads.ddelta.transpose(0, 2, 1), dt_proj_cache
        )
        grads.update(layer_grads)
        grad_selection = np.concatenate(
            [
                grad_step_input,
                scan_grads.dB.transpose(0, 2, 1),
                scan_grads.dC.transpose(0, 2, 1),
            ],
            axis=-1,
        )
        grad_activated, layer_grads = self.x_proj.backward(parameters, grad_selection, x_proj_cache)
        grads.update(layer_grads)
        grad_activated += scan_grads.du.transpose(0, 2, 1)
        return grad_activated, scan_grads.dz.transpose(0, 2, 1), grads


def mamba_layer(prefix, d_model, *, out_init_scale, d_state, d_conv, expand, dt_rank):
    """One layer of the selective SSM's network: the Mamba block ``<prefix>.mixer``.

    The ``layer`` of :func:`~skseq.neural._networks._residual.make_network`;
    ``dt_rank`` may be "auto" (:func:`resolve_dt_rank`).

    Examples
    --------
    >>> block = mamba_layer("layers.0", 40, out_init_scale=0.5, d_state=4, d_conv=4,
    ...                     expand=2, dt_rank="auto")
    >>> block.name, block.dt_rank                  # ceil(40 / 16)
    ('layers.0.mixer', 3)
    """
    return MambaBlock(
        f"{prefix}.mixer",
        d_model,
        d_state,
        d_conv,
        expand,
        resolve_dt_rank(dt_rank, d_model),
        out_init_scale=out_init_scale,
    )
