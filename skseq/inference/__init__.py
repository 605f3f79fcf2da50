"""The functional layer: exact inference on plain arrays.

Usable on its own with any parameters; the estimators call these functions.
"""

from .hmm import ForwardBackwardResult, ForwardResult, forward, forward_backward, viterbi
from .kalman import KalmanFilterResult, KalmanSmootherResult, kalman_filter, kalman_smoother
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
]
