"""The functional layer: exact inference on plain arrays.

Usable on its own with any parameters; the estimators call these functions
(and their underscore-prefixed cores), never the kernels directly.  Modules:
:mod:`~skseq.inference.hmm` (re-exported here), :mod:`~skseq.inference.gaussian`,
:mod:`~skseq.inference.kalman`, :mod:`~skseq.inference.scan`,
:mod:`~skseq.inference.s4d`, :mod:`~skseq.inference.rnn` and
:mod:`~skseq.inference.attention` (the last three re-exported here).
"""

from .attention import (
    AttentionGradients,
    AttentionResult,
    causal_attention,
    causal_attention_backward,
)
from .hmm import (
    HMMForwardBackwardResult,
    HMMForwardResult,
    HMMForwardSmoothingResult,
    HMMSmoothedStatistics,
    HMMStreamState,
    HMMViterbiResult,
    hmm_forward,
    hmm_forward_backward,
    hmm_forward_smoothing,
    hmm_viterbi,
    sample_hmm_states,
)
from .kalman import KalmanFilterResult, KalmanSmootherResult, kalman_filter, kalman_smoother
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
    "hmm_forward_backward",
    "hmm_forward",
    "hmm_viterbi",
    "hmm_forward_smoothing",
    "sample_hmm_states",
    "HMMForwardBackwardResult",
    "HMMForwardResult",
    "HMMViterbiResult",
    "HMMStreamState",
    "HMMForwardSmoothingResult",
    "HMMSmoothedStatistics",
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
]
