"""Neural sequence models trained by minibatch Adam: state spaces, Elman RNNs, Transformers
and the deep Markov model.

Supervised sequence estimators take ``X`` of shape ``(n_sequences, seq_len)``
or ``(n_sequences, seq_len, n_features)`` and one target per sequence or per
step.  Their networks (:mod:`skseq.neural._networks`, one module per model,
named as the model's estimator module) have explicit numpy forward and backward
passes; the recurrence runs in the Cython selective-scan kernel, S4D's kernel
in the Cython Vandermonde kernel and its convolution by FFT, the Elman
recurrence in its Cython kernel, attention in the Cython tiled-attention
kernel.  :class:`DeepMarkovModel` is
unsupervised: it takes the rows of concatenated sequences like the HMMs and
runs its inference network's backward RNN on the Elman kernel.
"""

from ._deep_markov import DeepMarkovModel
from ._elman_rnn import ElmanRNNClassifier, ElmanRNNRegressor
from ._s4d import S4DClassifier, S4DRegressor
from ._selective_ssm import SelectiveSSMClassifier, SelectiveSSMRegressor
from ._transformer import TransformerClassifier, TransformerRegressor

__all__ = [
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
