"""Errors that name the user's cause, not an internal array (issue 17, section 2).

A diverging training, data too large for the working dtype and a ``y``
without targets each get a ValueError that says what the user did and what
to change -- never "q contains NaN or infinity" from a layer's inference
function.  (Sizes that no memory holds: tests/test_allocation_checks.py.)
"""

import re

import numpy as np
import pytest

import skseq.neural
from skseq import DeepMarkovModel
from skseq._validation import check_data_scale
from skseq.neural._supervised import SequenceNetworkClassifier, SequenceNetworkRegressor

NEURAL_ESTIMATORS = sorted(
    (
        getattr(skseq.neural, name)
        for name in skseq.neural.__all__
        if issubclass(
            getattr(skseq.neural, name), SequenceNetworkRegressor | SequenceNetworkClassifier
        )
    ),
    key=lambda cls: cls.__name__,
)
REGRESSORS = [cls for cls in NEURAL_ESTIMATORS if issubclass(cls, SequenceNetworkRegressor)]

# Names of the arrays the layers' inference functions check ("q contains NaN or
# infinity."): none of them may reach the user.
_INTERNAL = re.compile(
    r"\b(q|k|v|x|u|z|A|B|C|D|K|W_h|W_x|b|h0|log_dt|delta|delta_bias|dout|dy|dK)\b "
    r"contains|contains NaN or infinity"
)


def test_the_neural_estimators_are_found():
    assert len(NEURAL_ESTIMATORS) == 8
    assert len(REGRESSORS) == 4


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(8, 6, 2))
    y_reg = X.sum(axis=(1, 2))
    y_cls = (y_reg > 0).astype(int)
    y_cls[:2] = [0, 1]
    return X, y_reg, y_cls


def _small(cls, **params):
    params = {"d_model": 4, "n_layers": 1, "max_iter": 2, "batch_size": 4, **params}
    return cls(random_state=0, **params)


def _y(cls, y_reg, y_cls):
    return y_reg if issubclass(cls, SequenceNetworkRegressor) else y_cls


def _assert_users_terms(error, *expected):
    message = str(error.value)
    assert not _INTERNAL.search(message), message
    for part in expected:
        assert part in message, (part, message)


# (case, constructor parameters, factor on X, the words the message must contain)
_FIT_CASES = [
    ("learning_rate_init=1e300", {"learning_rate_init": 1e300}, 1.0, ["diverged", "1e+300"]),
    ("weight_decay=1e300", {"weight_decay": 1e300}, 1.0, ["diverged", "weight_decay"]),
    # one update in all: only the check of the weights after the epoch can see it
    (
        "learning_rate_init=1e300, one step",
        {"learning_rate_init": 1e300, "max_iter": 1, "batch_size": 8},
        1.0,
        ["diverged at epoch 1: the weights became non-finite", "1e+300"],
    ),
    ("X*1e300 in float32", {}, 1e300, ["X is too large for single precision"]),
    ("X*1e30 in float32", {}, 1e30, ["X is too large for single precision"]),
    ("X*1e300 in float64", {"dtype": "float64"}, 1e300, ["X is too large for double precision"]),
]


@pytest.mark.parametrize("cls", NEURAL_ESTIMATORS, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize(
    "case, params, factor, expected", _FIT_CASES, ids=[c[0] for c in _FIT_CASES]
)
def test_fit_names_the_users_cause(cls, case, params, factor, expected):
    X, y_reg, y_cls = _data()
    with pytest.raises(ValueError) as error:
        _small(cls, **params).fit(X * factor, _y(cls, y_reg, y_cls))
    _assert_users_terms(error, *expected)


@pytest.mark.parametrize("cls", NEURAL_ESTIMATORS, ids=lambda cls: cls.__name__)
def test_a_large_learning_rate_fits_finite_weights_or_says_it_diverged(cls):
    # learning_rate_init=1e6 need not diverge in every network; if it does, the
    # message says so, and if not, the fitted weights and predictions are finite.
    X, y_reg, y_cls = _data()
    model = _small(cls, learning_rate_init=1e6, max_iter=3)
    try:
        model.fit(X, _y(cls, y_reg, y_cls))
    except ValueError as error:
        message = str(error)
        assert not _INTERNAL.search(message), message
        assert "diverged" in message and "learning_rate_init (now 1000000.0)" in message
    else:
        assert all(np.isfinite(value).all() for value in model.parameters_.values())
        assert np.isfinite(model.predict(X)).all()


@pytest.mark.parametrize(
    "cls",
    [cls for cls in NEURAL_ESTIMATORS if "init_spectral_radius" in cls().get_params()],
    ids=lambda cls: cls.__name__,
)
def test_a_huge_initial_scale_is_named(cls):
    X, y_reg, y_cls = _data()
    with pytest.raises(ValueError) as error:
        _small(cls, init_spectral_radius=1e300).fit(X, _y(cls, y_reg, y_cls))
    _assert_users_terms(error, "initial weights", "init_spectral_radius=1e+300")
    # In float64 the same weights are finite and the tanh saturates: a finite fit.
    model = _small(cls, init_spectral_radius=1e300, dtype="float64").fit(X, _y(cls, y_reg, y_cls))
    assert np.isfinite(model.predict(X)).all()


@pytest.mark.parametrize("cls", NEURAL_ESTIMATORS, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize(
    "dtype, factor, expected",
    [
        ("float32", 1e300, "single precision"),
        ("float32", 1e30, "single precision"),
        ("float64", 1e300, "double precision"),
    ],
)
def test_predict_says_the_data_are_too_large(cls, dtype, factor, expected):
    X, y_reg, y_cls = _data()
    model = _small(cls, dtype=dtype).fit(X, _y(cls, y_reg, y_cls))
    with pytest.raises(ValueError) as error:
        model.predict(X * factor)
    _assert_users_terms(error, f"X is too large for {expected}")


@pytest.mark.parametrize("cls", REGRESSORS, ids=lambda cls: cls.__name__)
def test_regressors_name_y_without_targets(cls):
    X, _, _ = _data()
    with pytest.raises(ValueError, match=r"^y has 0 targets \(shape \(8, 0\)\)"):
        _small(cls).fit(X, np.zeros((8, 0)))
    with pytest.raises(ValueError, match=r"^y has 0 targets \(shape \(8, 6, 0\)\)"):
        _small(cls).fit(X, np.zeros((8, 6, 0)))


@pytest.mark.parametrize("cls", REGRESSORS, ids=lambda cls: cls.__name__)
def test_regressors_name_y_too_large_for_the_dtype(cls):
    X, y_reg, _ = _data()
    with pytest.raises(ValueError, match="^y is too large for single precision"):
        _small(cls).fit(X, y_reg * 1e300)


def test_a_diverging_step_keeps_the_layers_message_as_its_cause():
    from skseq import TransformerRegressor

    X, y_reg, _ = _data()
    with pytest.raises(ValueError) as error:
        _small(TransformerRegressor, learning_rate_init=1e300).fit(X, y_reg)
    _assert_users_terms(error, "diverged at epoch 1, minibatch 2", "learning_rate_init")
    # what a layer refused stays visible for debugging, as the cause
    assert error.value.__cause__ is None or isinstance(error.value.__cause__, ValueError)


# -- the deep Markov model --------------------------------------------------------------


def _dmm_data():
    rng = np.random.default_rng(1)
    return rng.normal(size=(60, 2)), [10] * 6


def _small_dmm(**params):
    return DeepMarkovModel(
        transition_hidden_size=4,
        emission_hidden_size=4,
        inference_hidden_size=4,
        n_importance_samples=4,
        max_iter=2,
        batch_size=3,
        random_state=0,
        **params,
    )


def test_dmm_fit_on_huge_data_names_the_scale():
    X, lengths = _dmm_data()
    with pytest.raises(ValueError) as error:
        _small_dmm().fit(X * 1e300, lengths=lengths)
    _assert_users_terms(error, "X is too large for double precision", "standardisation")


@pytest.mark.parametrize("method", ["score", "score_sequences", "transform", "partial_fit"])
def test_dmm_on_data_off_its_training_scale_names_the_scale(method):
    X, lengths = _dmm_data()
    model = _small_dmm().fit(X, lengths=lengths)
    with pytest.raises(ValueError) as error:
        getattr(model, method)(X * 1e300, lengths=lengths)
    _assert_users_terms(
        error, "X is too large for single precision", "standard deviations", "fitted on"
    )


@pytest.mark.parametrize(
    "params, expected",
    [
        ({"learning_rate_init": 1e300}, "learning_rate_init"),
        ({"weight_decay": 1e300}, "weight_decay"),
    ],
)
def test_dmm_divergence_names_the_hyperparameter(params, expected):
    X, lengths = _dmm_data()
    with pytest.raises(ValueError) as error:
        _small_dmm(**params).fit(X, lengths=lengths)
    _assert_users_terms(error, "diverged", expected)


def test_dmm_samples_and_forecasts_only_what_memory_holds():
    X, lengths = _dmm_data()
    model = _small_dmm().fit(X, lengths=lengths)
    with pytest.raises(ValueError, match="^n_samples=1000000000000000 is too large"):
        model.sample(10**15)
    with pytest.raises(ValueError, match="^n_steps=1000000000000000 is too large"):
        model.forecast(X[:10], 10**15)


# -- the shared data-scale rule -----------------------------------------------------------


def test_data_scale_rule_in_either_precision():
    X = np.full((4, 1), 1e20)
    assert check_data_scale(X, None, dtype=np.float64) == 1e20
    with pytest.raises(
        ValueError,
        match="^X is too large for single precision: its entries reach 1e\\+20 in magnitude",
    ):
        check_data_scale(X, None, dtype=np.float32)
    # the HMMs' and the LGSSM's form (deviations from the mean, double precision) is unchanged
    with pytest.raises(
        ValueError,
        match="^X is too large for double precision: its entries lie "
        "up to 1e\\+200 from the data mean, and the sums of their squares that the "
        "Gaussian densities need overflow",
    ):
        check_data_scale(np.array([[0.0], [1e200]]), np.array([0.0]))


def test_predict_reports_activations_that_overflow_as_the_datas_scale(monkeypatch):
    # The networks normalise their inputs, so data within the scale rule have not
    # been seen to overflow them; should a layer refuse its activations anyway,
    # predict says that X is too large for the fitted network, not which array.
    from skseq import ElmanRNNRegressor

    X, y_reg, _ = _data()
    model = _small(ElmanRNNRegressor).fit(X, y_reg)

    def refuse(parameters, X):
        raise ValueError("x contains NaN or infinity.")

    monkeypatch.setattr(model.network_, "forward", refuse)
    with pytest.raises(ValueError) as error:
        model.predict(X * 1e10)
    _assert_users_terms(
        error, "X is too large for the fitted network in float32", "e+10 in magnitude"
    )
    assert str(error.value.__cause__) == "x contains NaN or infinity."
