"""Hyperparameter rules declared once: the same bad value of a parameter gets the
same exception type and message from every estimator that has that parameter."""

import importlib
import inspect
import pkgutil
import warnings

import numpy as np
import pytest
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import ConvergenceWarning

import skseq
from skseq import (
    GMMHMM,
    AutoregressiveHMM,
    CategoricalHMM,
    DeepMarkovModel,
    ElmanRNNClassifier,
    ElmanRNNRegressor,
    GaussianHMM,
    InputDrivenAutoregressiveHMM,
    InputDrivenCategoricalHMM,
    InputDrivenGaussianHMM,
    InputDrivenGMMHMM,
    InputDrivenPoissonHMM,
    LinearGaussianSSM,
    LinearRegressionHMM,
    MultinomialHMM,
    PoissonHMM,
    S4DClassifier,
    S4DRegressor,
    SelectiveSSMClassifier,
    SelectiveSSMRegressor,
    SemiMarkovCategoricalHMM,
    SemiMarkovGaussianHMM,
    TransformerClassifier,
    TransformerRegressor,
    UnobservedComponents,
    VariationalCategoricalHMM,
    VariationalGaussianHMM,
)
from skseq._validation import PARAMETER_RULES, at_fit, check_parameters, prior_rule
from skseq.hmm import BaseHMM, SemiMarkovHMM
from skseq.neural._trainer import BaseSequenceNetwork
from skseq.neural._validation import NETWORK_PARAMETER_RULES

RNG = np.random.default_rng(0)
REAL_ROWS = RNG.normal(size=(40, 2))
SYMBOLS = RNG.integers(0, 3, size=(40, 1))
COUNTS = RNG.multinomial(4, [0.3, 0.7], size=40)
SEQUENCES = RNG.normal(size=(12, 6))
TARGETS = SEQUENCES[:, 2] - SEQUENCES[:, 4]

NETWORK_SIZES = dict(d_model=4, n_layers=1, max_iter=1, batch_size=8)

# One instance of every estimator class, and data it fits.
ESTIMATORS = [
    (GaussianHMM(2, random_state=0), REAL_ROWS, None),
    (GMMHMM(2, n_mix=2, random_state=0), REAL_ROWS, None),
    (PoissonHMM(2, random_state=0), COUNTS, None),
    (CategoricalHMM(2, random_state=0), SYMBOLS, None),
    (MultinomialHMM(2, n_trials=4, random_state=0), COUNTS, None),
    (VariationalGaussianHMM(2, random_state=0), REAL_ROWS, None),
    (VariationalCategoricalHMM(2, random_state=0), SYMBOLS, None),
    (AutoregressiveHMM(2, random_state=0), REAL_ROWS, None),
    (LinearRegressionHMM(2, random_state=0), REAL_ROWS, None),
    (InputDrivenGaussianHMM(2, random_state=0), REAL_ROWS, None),
    (InputDrivenCategoricalHMM(2, random_state=0), SYMBOLS, None),
    (InputDrivenPoissonHMM(2, random_state=0), COUNTS, None),
    (InputDrivenGMMHMM(2, n_mix=2, random_state=0), REAL_ROWS, None),
    (InputDrivenAutoregressiveHMM(2, random_state=0), REAL_ROWS, None),
    (SemiMarkovGaussianHMM(2, max_duration=5, random_state=0), REAL_ROWS, None),
    (SemiMarkovCategoricalHMM(2, max_duration=5, random_state=0), SYMBOLS, None),
    (LinearGaussianSSM(1, random_state=0), REAL_ROWS, None),
    (UnobservedComponents("local level"), REAL_ROWS[:, 0], None),
    (SelectiveSSMRegressor(**NETWORK_SIZES, d_state=2), SEQUENCES, TARGETS),
    (SelectiveSSMClassifier(**NETWORK_SIZES, d_state=2), SEQUENCES, TARGETS > 0),
    (S4DRegressor(**NETWORK_SIZES, d_state=2), SEQUENCES, TARGETS),
    (S4DClassifier(**NETWORK_SIZES, d_state=2), SEQUENCES, TARGETS > 0),
    (ElmanRNNRegressor(**NETWORK_SIZES), SEQUENCES, TARGETS),
    (ElmanRNNClassifier(**NETWORK_SIZES), SEQUENCES, TARGETS > 0),
    (TransformerRegressor(**NETWORK_SIZES, n_heads=2), SEQUENCES, TARGETS),
    (TransformerClassifier(**NETWORK_SIZES, n_heads=2), SEQUENCES, TARGETS > 0),
    (
        DeepMarkovModel(
            2,
            transition_hidden_size=4,
            emission_hidden_size=4,
            inference_hidden_size=4,
            n_importance_samples=4,
            max_iter=1,
            batch_size=8,
        ),
        REAL_ROWS,
        None,
    ),
]

# Values that break each declared rule: of the wrong type, out of range, NaN.
BAD_VALUES = {
    "tol": [np.nan, "0.1", None, -1.0, -1e-300],
    "verbose": [-1, "yes", 0.5],
    "random_state": ["a", -1, 2**32, 1.5, True, np.random.default_rng(0)],
    "n_jobs": [0, 1.5, True, "2"],
    "batch_size": [0, 2.5, None],
    "n_components": [0, 1.5, None],
    "n_iter": [-1, 2.0, None],
    "n_init": [0, 1.5],
    "learning_method": ["stochastic", 1, None],
    "learning_decay": [0.5, 1.2, np.nan],
    "learning_offset": [-1.0, np.inf],
    "total_samples": [0, -3.0, "many"],
    "acceleration": ["SQUAREM", "aitken", False, 1],
    "startprob_prior": [0.0, np.nan, "high", [1.0, -1.0]],
    "transmat_prior": [0.0, [[1.0, -1.0], [1.0, 1.0]], np.inf],
    "emissionprob_prior": [0.0, np.nan],
    "weights_prior": [-2.0, np.nan],
    "means_prior": [np.nan, [np.inf, 0.0], "zero"],
    "means_weight": [-1.0, np.nan],
    "covariance_type": ["diagonal", 1, None],
    "min_covar": [0.0, -1e-3, np.nan, "small"],
    "learning_rate_init": [0.0, np.nan, "fast"],
    "beta_1": [1.0, -0.1],
    "beta_2": [1.0, -0.1],
    "epsilon": [0.0, np.inf],
    "weight_decay": [-1.0, np.nan],
    "max_iter": [0, 1.5],
    "shuffle": ["yes", 1],
    "max_grad_norm": [0.0, np.nan],
    "early_stopping": ["no", 0],
    "validation_fraction": [0.0, 1.0],
    "n_iter_no_change": [0, 2.5],
    "warm_start": [1, "true"],
    "d_model": [0, 2.5],
    "n_layers": [0, None],
    "d_conv": [0, 1.5],
    "expand": [0, "2"],
}

# A constructor parameter that two families both have but that means something
# different in each: not in the shared table, with the reason.
DIFFERENT_MEANINGS = {
    "params": "the HMMs' parameter letters ('stmc') against the LGSSM's parameter names",
    "init": "the S4D networks' initialisation of A against the LGSSM's start of EM",
}


def fit_error(estimator, X, y, method="fit"):
    """The (type, message) with which ``method`` refuses, or None when it fits."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        try:
            if y is None:
                getattr(estimator, method)(X)
            else:
                getattr(estimator, method)(X, y)
        except (TypeError, ValueError) as error:
            return type(error), str(error)
    return None


def having(name):
    return [case for case in ESTIMATORS if name in case[0].get_params()]


def test_every_bad_value_list_names_a_declared_rule_and_every_shared_rule_is_tested():
    network_names = set(NETWORK_PARAMETER_RULES)
    assert set(BAD_VALUES) == set(PARAMETER_RULES) | network_names
    for name in BAD_VALUES:
        assert having(name), f"no estimator has {name}"


@pytest.mark.parametrize(
    "name, value",
    [(name, value) for name, values in BAD_VALUES.items() for value in values],
    ids=lambda item: repr(item) if not isinstance(item, str) else item,
)
def test_a_bad_value_gets_the_same_error_from_every_estimator(name, value):
    errors = {}
    for estimator, X, y in having(name):
        model = clone(estimator).set_params(**{name: value})
        error = fit_error(model, X, y)
        assert error is not None, f"{type(estimator).__name__} accepts {name}={value!r}"
        assert name in error[1], error
        errors[type(estimator).__name__] = error
        if hasattr(model, "partial_fit") and not isinstance(model, BaseSequenceNetwork):
            assert fit_error(model, X, y, "partial_fit") == error
    assert len(set(errors.values())) == 1, errors


@pytest.mark.parametrize(
    "name, value",
    [
        ("tol", -np.inf),  # hmmlearn's idiom for "run every iteration"
        ("tol", 0.0),
        ("tol", np.inf),
        ("verbose", 0),
        ("verbose", False),
        ("random_state", np.random.RandomState(0)),
        ("random_state", np.int64(3)),
        ("random_state", None),
        ("n_jobs", -1),
        ("n_jobs", 2),
        ("total_samples", None),
        ("max_grad_norm", None),
    ],
)
def test_values_in_the_rules_are_accepted_by_every_estimator(name, value):
    for estimator, X, y in having(name):
        model = clone(estimator).set_params(**{name: value})
        if hasattr(model, "n_iter"):
            model.set_params(n_iter=2)
        assert fit_error(model, X, y) is None, (type(estimator).__name__, name, value)


def test_names_shared_across_families_have_one_declared_rule():
    """A parameter name of two families (HMMs, LGSSM, networks) is in the shared
    table, unless the name means something different in each."""
    families = {}
    for estimator, _, _ in ESTIMATORS:
        family = (
            "network"
            if isinstance(estimator, BaseSequenceNetwork)
            else type(estimator).__module__.split(".")[1]
        )
        families.setdefault(family, set()).update(estimator.get_params())
    names = list(families.values())
    shared = set()
    for index, first in enumerate(names):
        for second in names[index + 1 :]:
            shared |= first & second
    assert shared - set(DIFFERENT_MEANINGS) <= set(PARAMETER_RULES)
    assert not set(DIFFERENT_MEANINGS) & set(PARAMETER_RULES)
    assert not set(NETWORK_PARAMETER_RULES) & set(PARAMETER_RULES)


def test_a_family_cannot_redeclare_a_shared_rule():
    def anything(value, name):
        return value

    with pytest.raises(RuntimeError, match=r"redeclares the shared rules of \['tol'\]"):
        check_parameters(GaussianHMM(), {"tol": anything})


@pytest.mark.parametrize(
    "estimator", [case[0] for case in ESTIMATORS[:6]], ids=lambda item: type(item).__name__
)
def test_every_family_rule_refuses_a_value_of_no_kind_naming_its_parameter(estimator):
    family_rules = estimator._parameter_rules()
    assert family_rules
    for name, rule in family_rules.items():
        assert name in estimator.get_params()
        with pytest.raises((TypeError, ValueError), match=name):
            rule(object(), name)


def test_the_inconsistencies_of_issue_10_are_gone():
    """n_jobs=0 failed inside joblib for the HMMs; tol=-inf was refused by the LGSSM and
    the networks alone; verbose=-1 and verbose="yes" were accepted by the HMMs."""
    error = fit_error(GaussianHMM(2, n_jobs=0), REAL_ROWS, None)
    assert error == (ValueError, "n_jobs == 0 has no meaning; use None, a positive int or -1.")
    assert fit_error(LinearGaussianSSM(1, tol=-np.inf, n_iter=2), REAL_ROWS, None) is None
    assert fit_error(ElmanRNNRegressor(**NETWORK_SIZES, tol=-np.inf), SEQUENCES, TARGETS) is None
    assert fit_error(GaussianHMM(2, verbose=-1), REAL_ROWS, None)[0] is ValueError
    assert fit_error(GaussianHMM(2, verbose="yes"), REAL_ROWS, None)[0] is TypeError
    assert fit_error(GMMHMM(2, means_prior=np.nan, means_weight=1), REAL_ROWS, None) == (
        ValueError,
        "means_prior must be finite, got nan.",
    )


def _public_estimator_classes():
    """Every estimator class that skseq and its public subpackages export."""
    modules = [skseq] + [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(skseq.__path__, prefix="skseq.")
        if not any(part.startswith("_") for part in info.name.split("."))
    ]
    return {
        getattr(module, name)
        for module in modules
        for name in getattr(module, "__all__", ())
        if inspect.isclass(getattr(module, name))
        and issubclass(getattr(module, name), BaseEstimator)
    } - {BaseHMM, SemiMarkovHMM}  # base classes, never fitted themselves


@pytest.mark.parametrize("tol", [-1.0, -1e-3])
def test_a_negative_tol_is_refused_by_every_estimator_that_has_tol(tol):
    """Issue 17: tol=-1.0 was accepted by the neural estimators, the deep Markov
    model, the linear-Gaussian SSM (and the HMMs): any number but NaN was."""
    with_tol = {
        cls for cls in _public_estimator_classes() if "tol" in inspect.signature(cls).parameters
    }
    assert len(with_tol) == 27
    tabled = {type(estimator): (estimator, X, y) for estimator, X, y in ESTIMATORS}
    assert with_tol <= set(tabled), f"add to ESTIMATORS: {with_tol - set(tabled)}"
    expected = (ValueError, f"tol must be >= 0 (or -inf, to run every iteration), got {tol!r}.")
    for cls in with_tol:
        estimator, X, y = tabled[cls]
        model = clone(estimator).set_params(tol=tol)
        assert fit_error(model, X, y) == expected, cls.__name__


def test_rules_that_need_the_data_wait_for_fit_and_are_checked_there_alone():
    """The HMMs' own priors are in their one rules table, as ``at_fit`` rules:
    check_parameters skips them until fit passes the number of features, and
    then checks only them (GMMHMM's flattest covariance prior depends on it)."""
    seen = []

    def factory(n_features):
        seen.append(n_features)
        return prior_rule(low=-(n_features + 2.0))

    rules = {"covars_weight": at_fit(factory)}
    model = GMMHMM(2, n_mix=2, covariance_type="full", covars_weight=-4.5, tol=np.nan)
    with pytest.raises(ValueError, match="tol must be"):
        check_parameters(model, rules)
    assert seen == []
    with pytest.raises(ValueError, match=r"covars_weight must be >= -4.0, got -4.5"):
        check_parameters(model, rules, n_features=2)  # tol is not checked again
    assert seen == [2]
    for estimator, names in [
        (GaussianHMM(), {"covars_prior", "covars_weight"}),
        (GMMHMM(), {"covars_prior", "covars_weight"}),
        (PoissonHMM(), {"lambdas_prior", "lambdas_weight"}),
    ]:
        rules = estimator._parameter_rules()
        assert {name for name, rule in rules.items() if getattr(rule, "at_fit", False)} == names
    flat = GMMHMM(2, n_mix=2, covariance_type="full", covars_weight=-4.5)
    error = fit_error(flat, REAL_ROWS, None)
    assert error == (ValueError, "covars_weight must be >= -4.0, got -4.5.")
