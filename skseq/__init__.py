"""skseq: scikit-learn estimators for sequence models on Cython nogil kernels."""

from .hmm import (
    GMMHMM,
    CategoricalHMM,
    GaussianHMM,
    MultinomialHMM,
    PoissonHMM,
    VariationalCategoricalHMM,
    VariationalGaussianHMM,
)
from .lds import LinearGaussianSSM
from .neural import (
    DeepMarkovModel,
    ElmanRNNClassifier,
    ElmanRNNRegressor,
    S4DClassifier,
    S4DRegressor,
    SelectiveSSMClassifier,
    SelectiveSSMRegressor,
    TransformerClassifier,
    TransformerRegressor,
)

__version__ = "0.1.0"

__all__ = [
    "GaussianHMM",
    "CategoricalHMM",
    "MultinomialHMM",
    "PoissonHMM",
    "GMMHMM",
    "VariationalGaussianHMM",
    "VariationalCategoricalHMM",
    "LinearGaussianSSM",
    "SelectiveSSMRegressor",
    "SelectiveSSMClassifier",
    "S4DRegressor",
    "S4DClassifier",
    "ElmanRNNRegressor",
    "ElmanRNNClassifier",
    "TransformerRegressor",
    "TransformerClassifier",
    "DeepMarkovModel",
]
