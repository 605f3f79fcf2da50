"""Neural sequence models trained by minibatch Adam: selective state spaces (Mamba).

Supervised sequence estimators take ``X`` of shape ``(n_sequences, seq_len)``
or ``(n_sequences, seq_len, n_features)`` and one target per sequence or per
step.  Their layers (:mod:`skseq.neural._layers`, :mod:`skseq.neural._mamba`)
have explicit numpy forward and backward passes; the recurrence runs in the
Cython selective-scan kernel.
"""

from ._selective_ssm import SelectiveSSMClassifier, SelectiveSSMRegressor

__all__ = ["SelectiveSSMRegressor", "SelectiveSSMClassifier"]
