"""Tests of the selective SSM: the Mamba block, its network and the two estimators.

Gradients are checked against central finite differences in float64: the
Mamba block, and the whole network with both losses.  The generic layers are
tested in test_layers.py, the optimiser in test_trainer.py.
"""

import pickle
import warnings

import numpy as np
import pytest
from gradient_checks import (  # noqa: F401  (numerical_gradient: for other test modules)
    check_layer_gradients,
    check_network_gradients,
    numerical_gradient,
    perturbed_parameters,
)
from neural_checks import check_bad_hyperparameter, check_bad_input, check_inputs_not_modified
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.pipeline import make_pipeline

from skseq.neural import SelectiveSSMClassifier, SelectiveSSMRegressor
from skseq.neural._losses import softmax_cross_entropy, squared_error
from skseq.neural._networks import _selective_ssm as selective_ssm_network
from skseq.neural._networks._layers import softplus
from skseq.neural._networks._residual import make_network
from skseq.neural._networks._selective_ssm import MambaBlock, mamba_layer

SMALL = dict(d_model=8, n_layers=1, d_state=4, learning_rate_init=1e-2, random_state=0)


# -- a reference of the scan recurrence (a loop over time, for tests only) -------------


def _silu(x):
    return x / (1 + np.exp(-x))


def reference_selective_scan(
    u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, **_
):
    """h_t = exp(Δ_t A) h_{t-1} + Δ_t B_t u_t;  y_t = C_t·h_t + D u_t;  y · silu(z)."""
    if delta_bias is not None:
        delta = delta + delta_bias[:, None]
    if delta_softplus:
        delta = np.logaddexp(0, delta)
    state = np.zeros(u.shape[:2] + (A.shape[1],))
    outputs = []
    for t in range(u.shape[2]):
        B_t = B[:, None, :, t] if B.ndim == 3 else B[None]
        C_t = C[:, None, :, t] if C.ndim == 3 else C[None]
        step = delta[:, :, t, None]
        state = np.exp(step * A) * state + step * B_t * u[:, :, t, None]
        outputs.append((state * C_t).sum(axis=-1))
    out = np.stack(outputs, axis=-1)
    if D is not None:
        out = out + D[:, None] * u
    if z is not None:
        out = out * _silu(z)
    return out, None


def test_mamba_block_gradients():
    rng = np.random.RandomState(1)
    block = MambaBlock("mixer", d_model=4, d_state=3, d_conv=4, expand=2, dt_rank=2)
    parameters = perturbed_parameters(block, rng)
    # Steps around softplus(2) ~ 2 so that the Δ and A gradients are large.
    parameters["mixer.dt_bias"] += 2.0
    check_layer_gradients(block, parameters, rng.normal(size=(2, 7, 4)), rng)


def test_mamba_block_matches_reference_recurrence(monkeypatch):
    rng = np.random.RandomState(2)
    block = MambaBlock("mixer", d_model=4, d_state=3, d_conv=4, expand=2, dt_rank=1)
    parameters = perturbed_parameters(block, rng)
    inputs = rng.normal(size=(3, 9, 4))
    with_kernel, _ = block.forward(parameters, inputs)
    monkeypatch.setattr(selective_ssm_network, "selective_scan", reference_selective_scan)
    with_reference, _ = block.forward(parameters, inputs)
    assert_allclose(with_kernel, with_reference, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("per_step", [False, True])
@pytest.mark.parametrize("loss", ["squared_error", "cross_entropy"])
def test_network_gradients_end_to_end(per_step, loss):
    network = make_network(
        2,
        3,
        mamba_layer,
        per_step=per_step,
        d_model=4,
        n_layers=2,
        d_state=3,
        d_conv=4,
        expand=2,
        dt_rank="auto",
    )
    check_network_gradients(network, np.random.RandomState(3), loss)


@pytest.mark.parametrize("loss", ["squared_error", "cross_entropy"])
def test_loss_gradients(loss):
    rng = np.random.RandomState(4)
    outputs = rng.normal(size=(4, 3))
    weights = rng.uniform(size=4)
    if loss == "squared_error":
        targets = rng.normal(size=(4, 3))
        element_weights = np.repeat(weights[:, None], 3, axis=1)

        def function():
            return squared_error(outputs, targets, element_weights, 2.0)
    else:
        labels = np.array([0, 2, 1, 2])

        def function():
            return softmax_cross_entropy(outputs, labels, weights, 2.0)

    _, gradient = function()
    assert_allclose(gradient, numerical_gradient(lambda: function()[0], outputs), atol=1e-8)


def test_mamba_initialisation():
    block = MambaBlock("m", d_model=8, d_state=5, d_conv=4, expand=2, dt_rank=1)
    parameters = block.init_parameters(np.random.RandomState(0), np.float64)
    step = softplus(parameters["m.dt_bias"])
    assert step.shape == (16,) and np.all((step >= 1e-3 - 1e-12) & (step <= 1e-1 + 1e-12))
    assert_allclose(-np.exp(parameters["m.A_log"]), -np.tile(np.arange(1.0, 6.0), (16, 1)))
    assert_array_equal(parameters["m.D"], np.ones(16))
    network = make_network(
        1,
        1,
        mamba_layer,
        per_step=False,
        d_model=40,
        n_layers=1,
        d_state=2,
        d_conv=4,
        expand=2,
        dt_rank="auto",
    )
    assert network.blocks[0].dt_rank == 3  # ceil(40 / 16)
    # No weight decay on biases, gains or the SSM's own parameters.
    decayed = set(network.decayed_parameters())
    assert "layers.0.mixer.x_proj.weight" in decayed
    assert not decayed & {
        "layers.0.mixer.A_log",
        "layers.0.mixer.D",
        "layers.0.mixer.dt_bias",
        "final_norm.gain",
        "head.bias",
    }


# -- scikit-learn compatibility ---------------------------------------------------------

# -- fitting ------------------------------------------------------------------------------


def delayed_regression_data(n_sequences=120, seq_len=10, random_state=0):
    rng = np.random.RandomState(random_state)
    X = rng.normal(size=(n_sequences, seq_len))
    return X, X[:, 2] - 0.5 * X[:, 6]


def running_sums(n_sequences, seq_len, random_state):
    """Steps of white noise and, at every step, the sum so far (scaled to unit variance)."""
    X = np.random.RandomState(random_state).normal(size=(n_sequences, seq_len))
    return X, np.cumsum(X, axis=1) / np.sqrt(np.arange(1, seq_len + 1))


def test_regressor_learns_running_sums():
    # The target at step t integrates all earlier steps: beyond the 4-tap
    # convolution, so the SSM state must carry it.
    X, y = running_sums(100, 16, random_state=0)
    model = SelectiveSSMRegressor(**SMALL, max_iter=40).fit(X, y)
    X_test, y_test = running_sums(300, 16, random_state=1)
    assert model.score(X_test, y_test) > 0.9
    assert model.predict(X_test).shape == (300, 16)
    assert model.n_features_in_ == 16 and model.per_step_


def test_classifier_per_step_learns_and_predicts_longer_sequences():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(100, 16, 2))

    # Label of each step: whether feature 0 has summed to more than feature 1 so far.
    def labels(X):
        return np.array(["behind", "ahead"])[(np.cumsum(X[..., 0] - X[..., 1], axis=1) > 0) * 1]

    model = SelectiveSSMClassifier(**SMALL, max_iter=40).fit(X, labels(X))
    assert model.per_step_ and model.n_features_in_ == 2
    assert_array_equal(model.classes_, ["ahead", "behind"])
    X_test = rng.normal(size=(200, 16, 2))
    assert model.score(X_test, labels(X_test)) > 0.9
    X_long = rng.normal(size=(5, 23, 2))
    assert model.predict(X_long).shape == (5, 23)
    proba = model.predict_proba(X_long)
    assert proba.shape == (5, 23, 2)
    assert_allclose(proba.sum(axis=-1), 1.0)
    assert_allclose(np.exp(model.predict_log_proba(X_long)), proba)


def test_classifier_per_sequence_with_string_labels():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(300, 12))
    y = np.where(X.sum(axis=1) > 0, "up", "down")
    model = SelectiveSSMClassifier(**SMALL, max_iter=30).fit(X, y)
    assert not model.per_step_
    assert_array_equal(model.classes_, ["down", "up"])
    assert set(model.predict(X)) <= {"down", "up"}
    assert model.score(X, y) > 0.9
    assert model.predict_proba(X[:4]).shape == (4, 2)


@pytest.mark.parametrize(
    "y_shape, per_step, prediction_shape",
    [
        ((30,), False, (30,)),
        ((30, 2), False, (30, 2)),
        ((30, 7), True, (30, 7)),
        ((30, 7, 2), True, (30, 7, 2)),
    ],
)
def test_regressor_target_modes(y_shape, per_step, prediction_shape):
    rng = np.random.RandomState(0)
    X = rng.normal(size=(30, 7, 3))
    y = rng.normal(size=y_shape)
    model = SelectiveSSMRegressor(**SMALL, max_iter=2).fit(X, y)
    assert model.per_step_ is per_step
    assert model.predict(X).shape == prediction_shape


def test_fit_is_bitwise_reproducible():
    X, y = delayed_regression_data()
    first = SelectiveSSMRegressor(**SMALL, max_iter=4, batch_size=16).fit(X, y)
    second = SelectiveSSMRegressor(**SMALL, max_iter=4, batch_size=16).fit(X, y)
    assert first.loss_curve_ == second.loss_curve_
    assert_array_equal(first.predict(X), second.predict(X))
    other = SelectiveSSMRegressor(**dict(SMALL, random_state=1), max_iter=4).fit(X, y)
    assert other.loss_curve_ != first.loss_curve_


def test_n_jobs_gives_the_serial_result():
    X, y = delayed_regression_data()
    kwargs = dict(SMALL, max_iter=3, batch_size=40, dtype="float64")
    serial = SelectiveSSMRegressor(**kwargs, n_jobs=1).fit(X, y)
    threaded = SelectiveSSMRegressor(**kwargs, n_jobs=2).fit(X, y)
    assert_allclose(threaded.loss_curve_, serial.loss_curve_, rtol=1e-9)
    assert_allclose(threaded.predict(X), serial.predict(X), rtol=1e-7, atol=1e-9)


def test_float32_and_float64():
    X, y = delayed_regression_data(40)
    for dtype in ["float32", "float64"]:
        model = SelectiveSSMRegressor(**SMALL, max_iter=2, dtype=dtype).fit(X, y)
        assert all(value.dtype == dtype for value in model.parameters_.values())
        assert model.predict(X).dtype == np.float64


@pytest.mark.parametrize("dtype, rtol", [("float32", 1e-4), ("float64", 1e-10)])
@pytest.mark.parametrize("estimator", [SelectiveSSMRegressor, SelectiveSSMClassifier])
def test_predictions_do_not_depend_on_the_batch(estimator, dtype, rtol):
    """A sequence's prediction is the same alone, in another order and in a subset.

    Within the working precision: the products are blocked by BLAS according to
    the batch size, so float32 results move by a few ulps with the batch.
    """
    X, y = delayed_regression_data(60)
    if estimator is SelectiveSSMClassifier:
        y = (y > np.median(y)).astype(int)
    model = estimator(**SMALL, max_iter=2, dtype=dtype).fit(X, y)
    method = model.predict_proba if estimator is SelectiveSSMClassifier else model.predict
    everything = method(X)
    order = np.random.RandomState(1).permutation(len(X))
    assert_allclose(method(X[order]), everything[order], rtol=rtol, atol=rtol * 1e-2)
    assert_allclose(method(X[7:20]), everything[7:20], rtol=rtol, atol=rtol * 1e-2)
    assert_allclose(method(X[3:4]), everything[3:4], rtol=rtol, atol=rtol * 1e-2)


def test_nan_targets_mask_steps_like_zero_weights():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(40, 8))
    y = np.cumsum(X, axis=1)
    masked = rng.uniform(size=y.shape) < 0.3
    y_nan = np.where(masked, np.nan, y)
    y_garbage = np.where(masked, 1e3, y)
    kwargs = dict(SMALL, max_iter=3)
    by_nan = SelectiveSSMRegressor(**kwargs).fit(X, y_nan)
    by_weight = SelectiveSSMRegressor(**kwargs).fit(X, y_garbage, sample_weight=~masked * 1.0)
    assert by_nan.loss_curve_ == by_weight.loss_curve_
    assert_array_equal(by_nan.predict(X), by_weight.predict(X))
    # The masked steps do not count in the score either.
    assert by_nan.score(X, y_nan) == by_weight.score(X, y_garbage, sample_weight=~masked * 1.0)


def test_masked_steps_do_not_affect_the_classifier():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(40, 8))
    y = (X > 0).astype(int)
    weights = (rng.uniform(size=y.shape) < 0.5).astype(float)
    y_other = np.where(weights == 0, 1 - y, y)
    first = SelectiveSSMClassifier(**SMALL, max_iter=3).fit(X, y, sample_weight=weights)
    second = SelectiveSSMClassifier(**SMALL, max_iter=3).fit(X, y_other, sample_weight=weights)
    assert first.loss_curve_ == second.loss_curve_
    assert_array_equal(first.predict_proba(X), second.predict_proba(X))


def test_partial_fit_is_one_pass_and_continues_like_fit():
    X, y = delayed_regression_data(60)
    kwargs = dict(SMALL, shuffle=False, batch_size=16)
    fitted = SelectiveSSMRegressor(**kwargs, max_iter=3).fit(X, y)
    streamed = SelectiveSSMRegressor(**kwargs)
    for n_passes in (1, 2, 3):
        streamed.partial_fit(X, y)
        assert streamed.n_iter_ == n_passes and len(streamed.loss_curve_) == n_passes
    assert streamed.t_ == 180
    assert streamed.loss_curve_ == fitted.loss_curve_
    for key, value in fitted.parameters_.items():
        assert_array_equal(streamed.parameters_[key], value)


def test_warm_start_continues():
    X, y = delayed_regression_data(60)
    model = SelectiveSSMRegressor(**SMALL, max_iter=2, warm_start=True).fit(X, y)
    model.fit(X, y)
    assert model.n_iter_ == 4 and len(model.loss_curve_) == 4
    cold = SelectiveSSMRegressor(**SMALL, max_iter=2).fit(X, y)
    cold.fit(X, y)
    assert cold.n_iter_ == 2


def test_classifier_partial_fit_classes():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(20, 5))
    y = np.where(X[:, 0] > 0, "b", "a")
    model = SelectiveSSMClassifier(**SMALL)
    with pytest.raises(ValueError, match="classes must be passed on the first call"):
        model.partial_fit(X, y)
    model.partial_fit(X, y, classes=["a", "b", "c"])
    assert_array_equal(model.classes_, ["a", "b", "c"])
    assert model.predict_proba(X).shape == (20, 3)
    model.partial_fit(X, y)
    model.partial_fit(X, y, classes=["c", "b", "a"])
    with pytest.raises(ValueError, match="differs from the classes of the first call"):
        model.partial_fit(X, y, classes=["a", "b"])
    with pytest.raises(ValueError, match="labels not in classes_"):
        model.partial_fit(X, np.where(X[:, 0] > 0, "b", "z"))


def test_early_stopping():
    X, y = delayed_regression_data(100)
    model = SelectiveSSMRegressor(
        **SMALL,
        max_iter=50,
        early_stopping=True,
        validation_fraction=0.2,
        n_iter_no_change=2,
        tol=0.5,
    ).fit(X, y)
    assert model.n_iter_ < 50
    assert len(model.validation_scores_) == model.n_iter_
    assert model.best_validation_score_ == max(model.validation_scores_)
    assert model.best_loss_ is None
    model.partial_fit(X, y)  # continues without early stopping
    assert model.best_loss_ == model.loss_curve_[-1]
    plain = SelectiveSSMRegressor(**SMALL, max_iter=2).fit(X, y)
    assert plain.validation_scores_ is None and plain.best_validation_score_ is None


def test_convergence_warning_and_verbose(capsys):
    X, y = delayed_regression_data(30)
    with pytest.warns(ConvergenceWarning, match="max_iter=2"):
        SelectiveSSMRegressor(**SMALL, max_iter=2, verbose=1).fit(X, y)
    assert "Epoch 2: loss" in capsys.readouterr().err
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        SelectiveSSMRegressor(**SMALL, max_iter=50, n_iter_no_change=1, tol=1e9).fit(X, y)


def test_convergence_warning_points_at_the_users_call():
    """The trainer warns through the shared warn_user, as EM does: a fixed
    stacklevel pointed into scikit-learn when the fit came through a pipeline."""
    X, y = delayed_regression_data(20)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        SelectiveSSMRegressor(**SMALL, max_iter=1).fit(X, y)
        make_pipeline(SelectiveSSMRegressor(**SMALL, max_iter=1)).fit(X, y)
        SelectiveSSMClassifier(**SMALL, max_iter=1).fit(X, y > 0)
    convergence = [w for w in record if w.category is ConvergenceWarning]
    assert [w.filename for w in convergence] == [__file__] * 3


def test_weight_decay_shrinks_weights():
    X, y = delayed_regression_data(60)
    plain = SelectiveSSMRegressor(**SMALL, max_iter=5).fit(X, y)
    decayed = SelectiveSSMRegressor(**SMALL, max_iter=5, weight_decay=5.0).fit(X, y)
    key = "layers.0.mixer.in_proj.weight"
    assert np.linalg.norm(decayed.parameters_[key]) < 0.8 * np.linalg.norm(plain.parameters_[key])
    assert_array_equal(decayed.parameters_["layers.0.mixer.D"] != 1, True)


def test_pickle_round_trip_and_continue():
    X, y = delayed_regression_data(40)
    model = SelectiveSSMRegressor(**SMALL, max_iter=2).fit(X, y)
    restored = pickle.loads(pickle.dumps(model))
    assert_array_equal(restored.predict(X), model.predict(X))
    restored.partial_fit(X, y)
    model.partial_fit(X, y)
    assert_array_equal(restored.predict(X), model.predict(X))


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, error, match",
    [
        ({"d_model": 0}, ValueError, "d_model"),
        ({"d_model": 2.5}, TypeError, "d_model"),
        ({"n_layers": 0}, ValueError, "n_layers"),
        ({"d_state": -1}, ValueError, "d_state"),
        ({"d_conv": 0}, ValueError, "d_conv"),
        ({"expand": 0}, ValueError, "expand"),
        ({"dt_rank": 0}, ValueError, "dt_rank"),
        ({"dt_rank": "big"}, ValueError, "dt_rank"),
        ({"learning_rate_init": 0.0}, ValueError, "learning_rate_init"),
        ({"beta_1": 1.0}, ValueError, "beta_1"),
        ({"beta_2": -0.1}, ValueError, "beta_2"),
        ({"epsilon": 0.0}, ValueError, "epsilon"),
        ({"weight_decay": -1.0}, ValueError, "weight_decay"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"max_iter": 0}, ValueError, "max_iter"),
        ({"max_grad_norm": 0.0}, ValueError, "max_grad_norm"),
        ({"validation_fraction": 1.0}, ValueError, "validation_fraction"),
        ({"n_iter_no_change": 0}, ValueError, "n_iter_no_change"),
        ({"tol": np.nan}, ValueError, "tol"),
        ({"shuffle": "yes"}, TypeError, "shuffle"),
        ({"n_jobs": 0}, ValueError, "n_jobs"),
        ({"dtype": "int32"}, ValueError, "dtype"),
    ],
)
def test_bad_hyperparameters(params, error, match):
    X, y = delayed_regression_data(10)
    check_bad_hyperparameter(
        SelectiveSSMRegressor, SelectiveSSMClassifier, params, error, match, X, y
    )


def test_bad_input():
    regressor = SelectiveSSMRegressor(**SMALL, max_iter=1)
    X, y = check_bad_input(regressor)
    rng = np.random.RandomState(1)
    with pytest.raises(ValueError, match="dim 4"):
        regressor.fit(X[:, :, None, None], y)
    with pytest.raises(ValueError, match="ragged|rectangular"):
        regressor.fit([[1.0, 2.0], [3.0]], [1.0, 2.0])
    X_bad = X[:, :, None].copy()
    X_bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN|infinity"):
        regressor.fit(X_bad, y)
    with pytest.raises(ValueError, match="X has 6 steps"):
        regressor.fit(X, rng.normal(size=(10, 5, 2)))
    with pytest.raises(ValueError, match="NaN masks a step only for per-step targets"):
        regressor.fit(X, np.where(y > 0, np.nan, y))
    with pytest.raises(ValueError, match="infinity"):
        regressor.fit(X, np.where(y > 0, np.inf, y))
    with pytest.raises(ValueError, match="sample_weight has 9 entries"):
        regressor.fit(X, y, sample_weight=np.ones(9))
    with pytest.raises(ValueError, match="per-sequence targets"):
        regressor.fit(X, y, sample_weight=np.ones((10, 6)))
    with pytest.raises(ValueError, match=r"\(10, 6\)"):
        regressor.fit(X, rng.normal(size=(10, 6)), sample_weight=np.ones((10, 5)))
    with pytest.raises(ValueError, match="non-negative"):
        regressor.fit(X, y, sample_weight=-np.ones(10))
    with pytest.raises(ValueError, match="Every target is masked"):
        regressor.fit(X, np.full((10, 6), np.nan))

    regressor.fit(X, y)
    with pytest.raises(ValueError, match="y has per-step, 1 target.* fitted with per-sequence"):
        regressor.partial_fit(X, rng.normal(size=(10, 6)))

    classifier = SelectiveSSMClassifier(**SMALL, max_iter=1)
    with pytest.raises(ValueError, match=r"\(n_sequences, seq_len\) = \(10, 6\)"):
        classifier.fit(X, rng.randint(2, size=(10, 4)))
    with pytest.raises(ValueError, match="Unknown label type"):
        classifier.fit(X, y)


def test_predict_checks():
    rng = np.random.RandomState(0)
    X3 = rng.normal(size=(10, 6, 2))
    y = rng.normal(size=10)
    model = SelectiveSSMRegressor(**SMALL, max_iter=1)
    with pytest.raises(NotFittedError):
        model.predict(X3)
    model.fit(X3, y)
    with pytest.raises(ValueError, match="expecting 2 features per step"):
        model.predict(rng.normal(size=(4, 6, 3)))
    with pytest.raises(ValueError, match="fitted on 3-dimensional X"):
        model.predict(rng.normal(size=(4, 6)))
    assert model.predict(rng.normal(size=(4, 9, 2))).shape == (4,)
    model_2d = SelectiveSSMRegressor(**SMALL, max_iter=1).fit(X3[:, :, 0], y)
    with pytest.raises(ValueError, match="expecting 6 features"):
        model_2d.predict(rng.normal(size=(4, 7)))
    with pytest.raises(NotFittedError):
        SelectiveSSMClassifier().predict_proba(X3)


def test_inputs_are_not_modified():
    check_inputs_not_modified(SelectiveSSMRegressor(**SMALL, max_iter=2))
