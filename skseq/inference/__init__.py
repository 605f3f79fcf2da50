"""The functional layer: exact inference on plain arrays.

Usable on its own with any parameters; the estimators call these functions.
"""

from .attention import (
    AttentionGradients,
    AttentionResult,
    causal_attention,
    causal_attention_backward,
)
from .hmm import ForwardBackwardResult, ForwardResult, forward, forward_backward, viterbi
from .kalman import KalmanFilterResult, KalmanSmootherResult, kalman_filter, kalman_smoother
from .rnn import ElmanGradients, ElmanResult, elman_rnn, elman_rnn_backward
from .s4d import (
    ConvolutionGradients,
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
    "ForwardBackwardResult",
    "ForwardResult",
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
