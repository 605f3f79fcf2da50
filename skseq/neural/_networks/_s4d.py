"""The S4D block: the Mamba block with a time-invariant diagonal SSM as its mixer.

Everything around the mixer is :class:`~skseq.neural._networks._gated_ssm.GatedSSMBlock`,
as in the Mamba block: ``in_proj`` to the SSM input ``v`` and the gate ``z``,
``u = silu(conv(v))``, the gate ``y * silu(z)`` and ``out_proj``.  The mixer
is S4D's instead of the selective scan: every channel ``c`` of ``u`` is
convolved with the kernel of a linear time-invariant SSM with ``H = d_state
/ 2`` complex modes (in conjugate pairs, so ``d_state`` real states), plus the
skip term ``D u``::

    y[c] = K[c] * u[c] + D[c] u[c],
    K[c, k] = 2 Re sum_n C[c, n] B̄[c, n] Ā[c, n]**k,
    Ā = exp(Δ_c A[c, n]),  B̄ = (Ā - 1) / A[c, n],  Δ_c = exp(log_dt[c]).

The kernel comes from :func:`skseq.inference.s4d_kernel` (with ``B = 1``:
only the product ``C B`` reaches the kernel, so ``B`` is absorbed into the
learned ``C``) and the convolution from
:func:`skseq.inference.causal_convolution`, by FFT; ``D`` is added to the
kernel's lag 0.  Parameters, per block:

* ``log_dt`` (d_inner,), initialised log-uniform in [1e-3, 1e-1];
* ``A_log`` and ``A_imag`` (d_inner, H): ``A = -exp(A_log) + i A_imag``, so
  the real part stays negative whatever the updates; S4D-Lin starts at
  ``A_n = -1/2 + i π n``, S4D-Real at ``A_n = -(n + 1)``;
* ``C_real`` and ``C_imag`` (d_inner, H), standard complex normal;
* ``D`` (d_inner,), initialised to one.

The maths, forward and backward, is in the user guide (:ref:`s4d`).
"""

import numpy as np
import scipy.fft

from ..._validation import format_bytes
from ...inference.s4d import (
    causal_convolution,
    causal_convolution_backward,
    s4d_kernel,
    s4d_kernel_backward,
)
from ._gated_ssm import DT_MAX, DT_MIN, GatedSSMBlock, _channels_major
from ._layers import SiLU

__all__ = ["S4DBlock", "s4d_layer", "INITS", "MAX_CONVOLUTION_BYTES"]

INITS = ("lin", "real")

# Bytes the FFT convolution of one block may allocate for one forward pass
# (spectra of the input and of the output, and the inverse transform):
# minibatches or sequences that need more raise a ValueError before allocating.
MAX_CONVOLUTION_BYTES = 2 << 30


def initial_A(init, n_modes):
    """The S4D-Lin (``-1/2 + i π n``) or S4D-Real (``-(n + 1)``) modes, n = 0 .. n_modes - 1."""
    index = np.arange(n_modes, dtype=np.float64)
    if init == "lin":
        return -0.5 + 1j * np.pi * index
    if init == "real":
        return -(index + 1.0) + 0j
    raise ValueError(f"init must be one of {INITS}, got {init!r}.")


def convolution_bytes(batch, channels, length, dtype):
    """Bytes the FFT buffers of one S4D block need for ``batch`` sequences of ``length`` steps."""
    n_fft = scipy.fft.next_fast_len(2 * length - 1, real=True)
    # Two spectra of n_fft // 2 + 1 complex numbers and one real inverse of n_fft numbers.
    per_channel = (2 * (n_fft // 2 + 1) * 2 + n_fft) * np.dtype(dtype).itemsize
    return batch * channels * per_channel


class S4DBlock(GatedSSMBlock):
    """One S4D mixer in the Mamba block's structure, without its residual and norm.

    Parameters
    ----------
    name : str
    d_model : int
        Width of the residual stream.
    d_state : int
        State size N of every channel's SSM, even: ``N / 2`` complex modes.
    d_conv : int
        Taps of the causal depthwise convolution.
    expand : int
        ``d_inner = expand * d_model`` channels inside the block.
    init : {"lin", "real"}, default="lin"
        S4D-Lin or S4D-Real initialisation of ``A``.
    out_init_scale : float, default=1.0
        Multiplies the initial range of ``out_proj``.

    Examples
    --------
    >>> import numpy as np
    >>> block = S4DBlock("mixer", d_model=4, d_state=6, d_conv=4, expand=2)
    >>> parameters = block.init_parameters(np.random.RandomState(0), np.float64)
    >>> parameters["mixer.A_imag"][0]           # S4D-Lin: pi n
    array([0.        , 3.14159265, 6.28318531])
    >>> y, cache = block.forward(parameters, np.ones((2, 5, 4)))
    >>> y.shape
    (2, 5, 4)
    """

    def __init__(self, name, d_model, d_state, d_conv, expand, *, init="lin", out_init_scale=1.0):
        super().__init__(name, d_model, d_conv, expand, out_init_scale=out_init_scale)
        if d_state % 2:
            raise ValueError(
                f"d_state must be even (d_state / 2 complex modes in conjugate pairs), "
                f"got {d_state}."
            )
        self.d_state = d_state
        self.n_modes = d_state // 2
        # init is the estimator's rule (an unknown one is refused by initial_A when used)
        self.init = init
        self.gate = SiLU(self.key("gate"))

    def _init_mixer_parameters(self, random_state, dtype):
        shape = (self.d_inner, self.n_modes)
        log_dt = random_state.uniform(np.log(DT_MIN), np.log(DT_MAX), size=self.d_inner)
        A = np.tile(initial_A(self.init, self.n_modes), (self.d_inner, 1))
        # Standard complex normal C: E|C|^2 = 1.
        C_real = random_state.normal(scale=np.sqrt(0.5), size=shape)
        C_imag = random_state.normal(scale=np.sqrt(0.5), size=shape)
        parameters = {
            self.key("log_dt"): log_dt,
            self.key("A_log"): np.log(-A.real),
            self.key("A_imag"): A.imag,
            self.key("C_real"): C_real,
            self.key("C_imag"): C_imag,
            self.key("D"): np.ones(self.d_inner),
        }
        return {key: value.astype(dtype) for key, value in parameters.items()}

    def _decayed_mixer_parameters(self):
        # C is the SSM's output map, decayed like Mamba's projections to B and C;
        # A, the step and D are not.
        return [self.key("C_real"), self.key("C_imag")]

    def _ssm_parameters(self, parameters):
        dtype = parameters[self.key("log_dt")].dtype
        complex_dtype = np.complex64 if dtype == np.float32 else np.complex128
        A = (-np.exp(parameters[self.key("A_log")]) + 1j * parameters[self.key("A_imag")]).astype(
            complex_dtype
        )
        C = (parameters[self.key("C_real")] + 1j * parameters[self.key("C_imag")]).astype(
            complex_dtype
        )
        return dict(log_dt=parameters[self.key("log_dt")], A=A, B=np.ones_like(A), C=C)

    def _mix(self, parameters, activated, gate):
        batch, length, channels = activated.shape
        needed = convolution_bytes(batch, channels, length, activated.dtype)
        if needed > MAX_CONVOLUTION_BYTES:
            raise ValueError(
                f"The FFT convolution of {batch} sequence(s) of {length} steps over {channels} "
                f"channels needs {format_bytes(needed)}, more than the limit of "
                f"{format_bytes(MAX_CONVOLUTION_BYTES)} per S4D block "
                "(skseq.neural._networks._s4d.MAX_CONVOLUTION_BYTES); use shorter sequences or a "
                "smaller batch_size."
            )
        ssm = self._ssm_parameters(parameters)
        kernel = s4d_kernel(**ssm, length=length).K
        kernel[:, 0] += parameters[self.key("D")]
        convolved, spectra = causal_convolution(
            _channels_major(activated), kernel, return_spectra=True
        )
        ungated = convolved.transpose(0, 2, 1)
        gate_values, gate_cache = self.gate.forward(parameters, gate)
        mixed = ungated * gate_values
        return mixed, (ssm, spectra, ungated, gate_values, gate_cache)

    def _mix_backward(self, parameters, grad_mixed, cache):
        ssm, spectra, ungated, gate_values, gate_cache = cache
        grad_gate, _ = self.gate.backward(parameters, grad_mixed * ungated, gate_cache)
        grad_convolved = _channels_major(grad_mixed * gate_values)
        convolution_grads = causal_convolution_backward(grad_convolved, spectra=spectra)
        kernel_grads = s4d_kernel_backward(convolution_grads.dK, **ssm)
        dtype = parameters[self.key("log_dt")].dtype
        grads = {
            self.key("log_dt"): kernel_grads.dlog_dt,
            # Re A = -exp(A_log): d Re A / d A_log = Re A.
            self.key("A_log"): (kernel_grads.dA.real * ssm["A"].real).astype(dtype),
            self.key("A_imag"): kernel_grads.dA.imag.astype(dtype),
            self.key("C_real"): kernel_grads.dC.real.astype(dtype),
            self.key("C_imag"): kernel_grads.dC.imag.astype(dtype),
            self.key("D"): np.ascontiguousarray(convolution_grads.dK[:, 0]),
        }
        grad_activated = convolution_grads.du.transpose(0, 2, 1)
        return grad_activated, grad_gate, grads


def s4d_layer(prefix, d_model, *, out_init_scale, d_state, d_conv, expand, init):
    """One layer of S4D's network: the S4D block ``<prefix>.mixer``.

    The ``layer`` of :func:`~skseq.neural._networks._residual.make_network`.

    Examples
    --------
    >>> block = s4d_layer("layers.1", 8, out_init_scale=1.0, d_state=6, d_conv=4,
    ...                   expand=2, init="real")
    >>> block.name, block.n_modes
    ('layers.1.mixer', 3)
    """
    return S4DBlock(
        f"{prefix}.mixer",
        d_model,
        d_state,
        d_conv,
        expand,
        init=init,
        out_init_scale=out_init_scale,
    )
