"""Tests of the trainer's pieces: Adam with decoupled weight decay and gradient clipping.

The training loop itself is exercised through every estimator's tests
(test_selective_ssm.py, test_s4d.py, ...) and its memory estimates in
test_working_memory.py.
"""

import numpy as np
from numpy.testing import assert_allclose, assert_array_equal

from skseq.neural._trainer import Adam, clip_by_global_norm


def test_adam_decoupled_weight_decay():
    parameters = {"w": np.array([2.0, -4.0]), "b": np.array([1.0])}
    adam = Adam(parameters)
    zero = {"w": np.zeros(2), "b": np.zeros(1)}
    adam.step(
        parameters,
        zero,
        learning_rate=0.1,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-8,
        weight_decay=0.5,
        decayed=("w",),
    )
    # The gradient is zero: only the decay acts, by the factor 1 - lr * weight_decay.
    assert_allclose(parameters["w"], [2.0 * 0.95, -4.0 * 0.95])
    assert_array_equal(parameters["b"], [1.0])


def test_clip_by_global_norm():
    grads = {"a": np.array([3.0, 0.0]), "b": np.array([[4.0]])}
    assert clip_by_global_norm(grads, 10.0) == 5.0
    assert_array_equal(grads["a"], [3.0, 0.0])
    clip_by_global_norm(grads, 2.5)
    assert_allclose(grads["a"], [1.5, 0.0])
    assert_allclose(grads["b"], [[2.0]])
