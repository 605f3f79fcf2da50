"""The networks of the neural estimators, one module per model.

Each model has the same name here as in its estimator module
(``skseq/neural/_<model>.py``) and its tests (``tests/neural/test_<model>.py``):

* ``_selective_ssm`` -- the Mamba block (``MambaBlock``, ``mamba_layer``);
* ``_s4d`` -- the S4D block (``S4DBlock``, ``s4d_layer``);
* ``_elman_rnn`` -- the Elman block (``ElmanBlock``, ``elman_layer``);
* ``_transformer`` -- attention, the MLP and the positional encoding
  (``transformer_layer``);
* ``_deep_markov`` -- the deep Markov model's network (``DeepMarkovNetwork``).

What several models share: ``_layers`` (the generic layers: ``Linear``,
``RMSNorm``, the activations, the causal convolution), ``_gated_ssm`` (the
gated block around an SSM mixer, shared by the selective SSM and S4D) and
``_residual`` (the residual stack and :func:`make_network`, which builds
every supervised model's network from its layer).
"""
