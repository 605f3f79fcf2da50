"""skseq: scikit-learn estimators for sequence models on Cython nogil kernels."""

__version__ = "0.1.0"
