"""Neural sequence models trained by minibatch Adam: selective (Mamba) and S4D state spaces.

Supervised sequence estimators take ``X`` of shape ``(n_sequences, seq_len)``
or ``(n_sequences, seq_len, n_features)`` and one target per sequence or per
step.  Their layers (:mod:`skseq.neural._layers`, :mod:`skseq.neural._mamba`,
:mod:`skseq.neural._s4d`) have explicit numpy forward and backward passes;
the recurrence runs in the Cython selective-scan kernel, S4D's kernel in the
Cython Vandermonde kernel and its convolution by FFT.
"""

from ._selective_ssm import SelectiveSSMClassifier, SelectiveSSMRegressor
from ._structured_ssm import S4DClassifier, S4DRegressor

__all__ = ["SelectiveSSMRegressor", "SelectiveSSMClassifier", "S4DRegressor", "S4DClassifier"]
