"""Tests of the trainer's pieces: Adam, gradient clipping, the hyperparameter tables.

The training loop itself is exercised through every estimator's tests
(test_selective_ssm.py, test_s4d.py, ...) and its memory estimates in
test_working_memory.py.
"""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from skseq import TransformerRegressor
from skseq._validation import PARAMETER_RULES
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


def test_training_steps_reusing_their_activations_give_the_fresh_gradients():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(6, 9, 2))
    y = rng.normal(size=(6, 9))
    model = TransformerRegressor(d_model=8, n_heads=2, d_ff=16, batch_size=3, max_iter=1)
    model.partial_fit(X, y)
    weights = np.ones((6, 9, 1))

    def step(part):
        targets = y[part][..., None]
        return model._loss_and_gradients(X[part], targets, weights[part], 27.0, None)

    fresh = [step(part) for part in (slice(0, 3), slice(3, 6))]
    with model._reused_activations(1):
        step(slice(3, 6))
        reused = [step(part) for part in (slice(0, 3), slice(3, 6))]
        assert model._pass_buffers[0]  # the layers did draw from it
    assert not hasattr(model, "_pass_buffers")
    for (loss, grads), (reused_loss, reused_grads) in zip(fresh, reused):
        assert reused_loss == loss
        for key, value in grads.items():
            assert_array_equal(reused_grads[key], value, err_msg=key)


# -- one rules table per estimator -----------------------------------------------------


def _network_estimators():
    import skseq.neural

    return [getattr(skseq.neural, name)() for name in skseq.neural.__all__]


@pytest.mark.parametrize("estimator", _network_estimators(), ids=lambda e: type(e).__name__)
def test_every_hyperparameter_has_a_rule_in_the_estimators_table(estimator):
    """The table (with the shared PARAMETER_RULES) covers every constructor parameter
    but ``dtype``, which the trainer resolves to a numpy dtype; each rule refuses a
    value of no kind, naming its parameter."""
    rules = estimator._parameter_rules()
    uncovered = set(estimator.get_params()) - set(rules) - set(PARAMETER_RULES) - {"dtype"}
    assert not uncovered
    for name in estimator.get_params():
        if name in rules:
            with pytest.raises((TypeError, ValueError), match=name):
                rules[name](object(), name)


@pytest.mark.parametrize(
    "params, error, message",
    [
        # the architecture's rules, in the messages of the shared builders
        (dict(d_state=3), ValueError, "d_state must be even (d_state / 2 complex modes in "),
        (dict(init="complex"), ValueError, "init must be 'lin' or 'real', got 'complex'."),
    ],
)
def test_s4d_rules_check_once_before_the_data(params, error, message):
    from skseq.neural import S4DRegressor

    # X is bad too: the hyperparameters are checked first
    with pytest.raises(error) as raised:
        S4DRegressor(**params).fit(np.full((4, 5), np.nan), np.zeros(4))
    assert message in str(raised.value)
