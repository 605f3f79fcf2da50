"""Linear dynamical systems: the linear-Gaussian state-space model, and nonlinear Kalman
filters (unscented and extended)."""

from ._lgssm import LinearGaussianSSM
from ._nonlinear import AdditiveUnscentedKalmanFilter, ExtendedKalmanFilter, UnscentedKalmanFilter
from ._unobserved_components import UnobservedComponents

__all__ = [
    "LinearGaussianSSM",
    "UnscentedKalmanFilter",
    "AdditiveUnscentedKalmanFilter",
    "ExtendedKalmanFilter",
    "UnobservedComponents",
]
