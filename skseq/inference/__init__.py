"""The functional layer: exact inference on plain arrays.

Usable on its own with any parameters; the estimators call these functions
(and their underscore-prefixed cores), never the kernels directly.  Modules:
:mod:`~skseq.inference.hmm` (re-exported here), :mod:`~skseq.inference.gaussian`,
:mod:`~skseq.inference.kalman`, :mod:`~skseq.inference.scan`,
:mod:`~skseq.inference.s4d`, :mod:`~skseq.inference.rnn` and
:mod:`~skseq.inference.attention` (the last three re-exported here), and
:mod:`~skseq.inference.particles` (Monte Carlo filtering and importance
sampling for models without a closed form; re-exported here).
"""

from .attention import (
    AttentionGradients,
    AttentionResult,
    causal_attention,
    causal_attention_backward,
)
from .hmm import (
    ForwardBackwardResult,
    ForwardResult,
    ForwardSmoothingMessage,
    ForwardSmoothingResult,
    SmoothedStatistics,
    ViterbiResult,
    forward,
    forward_backward,
    forward_smoothing,
    sample_states,
    viterbi,
)
from .kalman import KalmanFilterResult, KalmanSmootherResult, kalman_filter, kalman_smoother
from .particles import (
    ImportanceSamples,
    ParticleFilterResult,
    bootstrap_particle_filter,
    importance_sample,
)
from .rnn import ElmanGradients, ElmanResult, elman_rnn, elman_rnn_backward
from .s4d import (
    ConvolutionGradients,
    ConvolutionResult,
    ConvolutionSpectra,
    S4DKernelGradients,
    causal_convolution,
    causal_convolution_backward,
    s4d_kernel,
    s4d_kernel_backward,
)
from .scan import ScanGradients, ScanResult, selective_scan, selective_scan_backward

__all__ = [
    "forward_backward",
    "forward",
    "viterbi",
    "forward_smoothing",
    "sample_states",
    "ForwardBackwardResult",
    "ForwardResult",
    "ViterbiResult",
    "ForwardSmoothingMessage",
    "ForwardSmoothingResult",
    "SmoothedStatistics",
    "kalman_filter",
    "kalman_smoother",
    "KalmanFilterResult",
    "KalmanSmootherResult",
    "selective_scan",
    "selective_scan_backward",
    "ScanResult",
    "ScanGradients",
    "s4d_kernel",
    "s4d_kernel_backward",
    "S4DKernelGradients",
    "causal_convolution",
    "causal_convolution_backward",
    "ConvolutionResult",
    "ConvolutionSpectra",
    "ConvolutionGradients",
    "elman_rnn",
    "elman_rnn_backward",
    "ElmanResult",
    "ElmanGradients",
    "causal_attention",
    "causal_attention_backward",
    "AttentionResult",
    "AttentionGradients",
    "bootstrap_particle_filter",
    "ParticleFilterResult",
    "importance_sample",
    "ImportanceSamples",
]
