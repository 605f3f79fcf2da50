"""skseq: scikit-learn estimators for sequence models on Cython nogil kernels."""

from . import neural
from .hmm import (
    GMMHMM,
    AutoregressiveHMM,
    CategoricalHMM,
    GaussianHMM,
    LinearRegressionHMM,
    MultinomialHMM,
    PoissonHMM,
    SemiMarkovCategoricalHMM,
    SemiMarkovGaussianHMM,
    VariationalCategoricalHMM,
    VariationalGaussianHMM,
)
from .lds import LinearGaussianSSM
from .neural import *  # noqa: F403

__version__ = "0.1.0"

# The neural estimators: neural's __all__, the one list of them.
__all__ = [
    "GaussianHMM",
    "CategoricalHMM",
    "MultinomialHMM",
    "PoissonHMM",
    "GMMHMM",
    "VariationalGaussianHMM",
    "VariationalCategoricalHMM",
    "AutoregressiveHMM",
    "LinearRegressionHMM",
    "SemiMarkovGaussianHMM",
    "SemiMarkovCategoricalHMM",
    "LinearGaussianSSM",
    *neural.__all__,
]
