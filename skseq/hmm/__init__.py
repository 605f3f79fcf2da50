"""Hidden Markov models: Gaussian, autoregressive, linear-regression, categorical,
multinomial, Poisson and Gaussian-mixture emissions, input-driven transitions
for every emission model (IO-HMMs), and explicit-duration (semi-Markov) HMMs with
Gaussian or categorical emissions."""

from ._autoregressive import AutoregressiveHMM, LinearRegressionHMM
from ._base import BaseHMM
from ._discrete import CategoricalHMM, MultinomialHMM, PoissonHMM
from ._gaussian import GaussianHMM
from ._gmm import GMMHMM
from ._input_driven import (
    InputDrivenAutoregressiveHMM,
    InputDrivenCategoricalHMM,
    InputDrivenGaussianHMM,
    InputDrivenGMMHMM,
    InputDrivenPoissonHMM,
)
from ._semi_markov import SemiMarkovCategoricalHMM, SemiMarkovGaussianHMM, SemiMarkovHMM
from ._variational import VariationalCategoricalHMM, VariationalGaussianHMM

__all__ = [
    "BaseHMM",
    "GaussianHMM",
    "CategoricalHMM",
    "MultinomialHMM",
    "PoissonHMM",
    "GMMHMM",
    "VariationalGaussianHMM",
    "VariationalCategoricalHMM",
    "AutoregressiveHMM",
    "LinearRegressionHMM",
    "InputDrivenGaussianHMM",
    "InputDrivenCategoricalHMM",
    "InputDrivenPoissonHMM",
    "InputDrivenGMMHMM",
    "InputDrivenAutoregressiveHMM",
    "SemiMarkovHMM",
    "SemiMarkovGaussianHMM",
    "SemiMarkovCategoricalHMM",
]
