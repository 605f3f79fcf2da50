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
from .lds import (
    AdditiveUnscentedKalmanFilter,
    ExtendedKalmanFilter,
    LinearGaussianSSM,
    UnscentedKalmanFilter,
)
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
    "UnscentedKalmanFilter",
    "AdditiveUnscentedKalmanFilter",
    "ExtendedKalmanFilter",
    *neural.__all__,
]
