"""Linear dynamical systems: the linear-Gaussian state-space model."""

from ._lgssm import LinearGaussianSSM

__all__ = ["LinearGaussianSSM"]
