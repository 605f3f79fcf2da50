"""Linear dynamical systems: the linear-Gaussian state-space model, and nonlinear Kalman
filters (unscented and extended)."""

from ._lgssm import LinearGaussianSSM
from ._nonlinear import AdditiveUnscentedKalmanFilter, ExtendedKalmanFilter, UnscentedKalmanFilter

__all__ = [
    "LinearGaussianSSM",
    "UnscentedKalmanFilter",
    "AdditiveUnscentedKalmanFilter",
    "ExtendedKalmanFilter",
]
