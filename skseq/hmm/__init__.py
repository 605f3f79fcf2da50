"""Hidden Markov models: Gaussian, categorical, Poisson and Gaussian-mixture emissions."""

from ._base import BaseHMM
from ._discrete import CategoricalHMM, PoissonHMM
from ._gaussian import GaussianHMM
from ._gmm import GMMHMM

__all__ = ["BaseHMM", "GaussianHMM", "CategoricalHMM", "PoissonHMM", "GMMHMM"]
