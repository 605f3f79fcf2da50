"""A non-finite log-likelihood during EM: one check in the EM base, one
exception type (ValueError) and one message, naming the estimator, the value
and why, from every family and every way of fitting (fit, stochastic fit,
partial_fit)."""

import re
import warnings

import numpy as np
import pytest

from skseq import GMMHMM, CategoricalHMM, GaussianHMM, LinearGaussianSSM, MultinomialHMM
from skseq.base import BaseEM

PROBABILITY_ZERO = "the data have probability zero under the model"
OVERFLOW = (
    "every density of the model is positive, so the data lie too far from the model "
    "for double precision (a log-likelihood below -1.8e308); rescale X (e.g. with "
    "sklearn.preprocessing.StandardScaler) or fit the model on data of that scale"
)

HMM_START = dict(startprob_init=[0.5, 0.5], transmat_init=[[0.9, 0.1], [0.1, 0.9]])
# Symbol 2 has probability zero in both states.
SYMBOLS = np.array([[0], [1], [2], [0], [1], [0]] * 4)
COUNTS = np.array([[2, 0, 1], [1, 1, 1], [3, 0, 0], [0, 3, 0]] * 6)
# Finite data, means ~1.2e154 away: each row's log-density is finite (about
# -7e307), their sum is not.
FAR = 1.2e154
REAL_ROWS = np.random.default_rng(0).normal(size=(48, 2))


def categorical(**extra):
    emission = [[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]]
    return CategoricalHMM(
        2, n_features=3, init_params="", emissionprob_init=emission, **HMM_START, **extra
    )


def multinomial(**extra):
    emission = [[0.5, 0.5, 0.0], [0.4, 0.6, 0.0]]
    return MultinomialHMM(
        2, n_trials=3, init_params="", emissionprob_init=emission, **HMM_START, **extra
    )


def gaussian(**extra):
    return GaussianHMM(
        2,
        "diag",
        init_params="",
        means_init=[[FAR, 0.0], [FAR, 1.0]],
        covars_init=np.ones((2, 2)),
        **HMM_START,
        **extra,
    )


def gmm(**extra):
    return GMMHMM(
        2,
        n_mix=2,
        covariance_type="diag",
        init_params="",
        weights_init=np.full((2, 2), 0.5),
        means_init=np.full((2, 2, 2), FAR),
        covars_init=np.ones((2, 2, 2)),
        **HMM_START,
        **extra,
    )


def lgssm(**extra):
    return LinearGaussianSSM(
        1,
        transition_matrix_init=[[0.5]],
        observation_matrix_init=[[1.0], [1.0]],
        transition_covariance_init=[[1.0]],
        observation_covariance_init=np.eye(2),
        transition_offset_init=[0.0],
        observation_offset_init=[FAR, 0.0],
        initial_state_mean_init=[0.0],
        initial_state_covariance_init=[[1.0]],
        **extra,
    )


FAMILIES = [
    (categorical, SYMBOLS, PROBABILITY_ZERO),
    (multinomial, COUNTS, PROBABILITY_ZERO),
    (gaussian, REAL_ROWS, OVERFLOW),
    (gmm, REAL_ROWS, OVERFLOW),
    (lgssm, REAL_ROWS, OVERFLOW),
]
IDS = ["CategoricalHMM", "MultinomialHMM", "GaussianHMM", "GMMHMM", "LinearGaussianSSM"]


def expected_message(estimator, value, cause):
    return re.escape(
        f"{type(estimator).__name__}: the log-likelihood of the data is {value} under the "
        f"current parameters: {cause}."
    )


def refusal(call):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # few rows for the parameters
        # The LGSSM's initial scales (unused: every initial value is given) overflow.
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(ValueError) as raised:
            call()
    return str(raised.value)


@pytest.mark.parametrize("make, X, cause", FAMILIES, ids=IDS)
def test_fit_refuses_a_minus_infinite_log_likelihood_with_one_message(make, X, cause):
    model = make(n_iter=3)
    assert re.fullmatch(expected_message(model, "-inf", cause), refusal(lambda: model.fit(X)))


@pytest.mark.parametrize("make, X, cause", FAMILIES, ids=IDS)
def test_stochastic_fit_refuses_it_with_the_same_message(make, X, cause):
    model = make(n_iter=2, learning_method="online", batch_size=2)
    lengths = [len(X) // 4] * 4
    message = refusal(lambda: model.fit(X, lengths=lengths))
    assert re.fullmatch(expected_message(model, "-inf", cause), message)


@pytest.mark.parametrize("make, X, cause", FAMILIES[2:], ids=IDS[2:])
def test_partial_fit_refuses_it_with_the_same_message(make, X, cause):
    """The Gaussian families: the stream's forward-only smoother keeps a -inf
    (every state is equally impossible, no state is lost)."""
    model = make()
    message = refusal(lambda: model.partial_fit(X))
    assert re.fullmatch(expected_message(model, "-inf", cause), message)


@pytest.mark.parametrize("make, X, cause", FAMILIES[:2], ids=IDS[:2])
def test_a_stream_that_loses_every_state_gets_the_same_check(make, X, cause):
    """Discrete data of probability zero leave the forward-only smoother with no
    state; its log-space redo finds -inf: the same check, the same message as fit,
    and no learning step."""
    model = make()
    message = refusal(lambda: model.partial_fit(X))
    assert re.fullmatch(expected_message(model, "-inf", cause), message)
    assert not hasattr(model, "batch_log_likelihood_")  # no learning step was taken


@pytest.mark.parametrize("make, X, cause", FAMILIES, ids=IDS)
def test_the_check_is_the_base_class_one_and_names_each_value(make, X, cause):
    model = make()
    check = type(model)._check_log_likelihood
    assert check is BaseEM._check_log_likelihood  # no family has its own
    check(model, -1e300)  # finite: no error
    for value, why in ((-np.inf, cause), (np.inf, model._numerical_failure)):
        with pytest.raises(ValueError, match=expected_message(model, float(value), why)):
            check(model, value)
    with pytest.raises(ValueError, match=expected_message(model, "nan", model._numerical_failure)):
        check(model, np.nan)
