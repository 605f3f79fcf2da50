"""skseq: scikit-learn estimators for sequence models on Cython nogil kernels."""

from . import neural
from .hmm import (
    GMMHMM,
    AutoregressiveHMM,
    CategoricalHMM,
    GaussianHMM,
    InputDrivenAutoregressiveHMM,
    InputDrivenCategoricalHMM,
    InputDrivenGaussianHMM,
    InputDrivenGMMHMM,
    InputDrivenPoissonHMM,
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
    UnobservedComponents,
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
    "InputDrivenGaussianHMM",
    "InputDrivenCategoricalHMM",
    "InputDrivenPoissonHMM",
    "InputDrivenGMMHMM",
    "InputDrivenAutoregressiveHMM",
    "SemiMarkovGaussianHMM",
    "SemiMarkovCategoricalHMM",
    "LinearGaussianSSM",
    "UnscentedKalmanFilter",
    "AdditiveUnscentedKalmanFilter",
    "ExtendedKalmanFilter",
    "UnobservedComponents",
    *neural.__all__,
]
