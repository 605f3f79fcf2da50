"""hmmlearn code that runs by changing the import: the same snippet through both libraries.

Each test runs an hmmlearn-style snippet (hand-set parameters as lists,
``n_features`` before ``sample``, ``monitor_`` before ``fit``, positional
``lengths``) on skseq, and on hmmlearn where it is installed, and compares.
"""

import logging
import pickle
import warnings

import numpy as np
import pytest
from hmm_references import brute_force
from scipy.special import logsumexp
from scipy.stats import norm
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.model_selection import GridSearchCV
from sklearn.utils.validation import check_is_fitted

from skseq import (
    GMMHMM,
    CategoricalHMM,
    GaussianHMM,
    LinearGaussianSSM,
    MultinomialHMM,
    PoissonHMM,
)
from skseq.base import ConvergenceMonitor

# Convergence within a handful of iterations is not the point here.
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

START = [0.6, 0.3, 0.1]
TRANSMAT = [[0.7, 0.2, 0.1], [0.3, 0.5, 0.2], [0.3, 0.3, 0.4]]

# hmmlearn's tutorial models, every parameter a nested list.
LIST_PARAMETERS = {
    "gaussian_full": (
        "GaussianHMM",
        {"covariance_type": "full"},
        {
            "means_": [[0.0, 0.0], [3.0, -3.0], [5.0, 10.0]],
            "covars_": [
                [[1.0, 0.0], [0.0, 1.0]],
                [[2.0, 0.5], [0.5, 1.0]],
                [[1.0, 0.0], [0.0, 3.0]],
            ],
        },
    ),
    "gaussian_diag": (
        "GaussianHMM",
        {"covariance_type": "diag"},
        {"means_": [[0.0], [3.0], [6.0]], "covars_": [[1.0], [0.5], [2.0]]},
    ),
    "gaussian_spherical_column": (
        "GaussianHMM",
        {"covariance_type": "spherical"},
        {"means_": [[0.0, 1.0], [3.0, 3.0], [6.0, -1.0]], "covars_": [[1.0], [0.5], [2.0]]},
    ),
    "gaussian_tied": (
        "GaussianHMM",
        {"covariance_type": "tied"},
        {"means_": [[0.0, 1.0], [3.0, 3.0], [6.0, -1.0]], "covars_": [[1.0, 0.3], [0.3, 2.0]]},
    ),
    "poisson": ("PoissonHMM", {}, {"lambdas_": [[1.0, 10.0], [5.0, 5.0], [20.0, 1.0]]}),
    "categorical": (
        "CategoricalHMM",
        {},
        {"emissionprob_": [[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]]},
    ),
    "gmm_diag": (
        "GMMHMM",
        {"n_mix": 2, "covariance_type": "diag"},
        {
            "weights_": [[0.5, 0.5], [0.3, 0.7], [0.9, 0.1]],
            "means_": [[[0.0], [1.0]], [[4.0], [5.0]], [[-3.0], [9.0]]],
            "covars_": [[[1.0], [0.5]], [[1.0], [2.0]], [[0.3], [1.0]]],
        },
    ),
}
OURS = {
    "GaussianHMM": GaussianHMM,
    "PoissonHMM": PoissonHMM,
    "CategoricalHMM": CategoricalHMM,
    "GMMHMM": GMMHMM,
}


def hand_set(cls, kwargs, emission, *, as_arrays=False, **more):
    model = cls(3, init_params="", **kwargs, **more)
    convert = np.array if as_arrays else (lambda value: value)
    model.startprob_ = convert(START)
    model.transmat_ = convert(TRANSMAT)
    for name, value in emission.items():
        setattr(model, name, convert(value))
    return model


# -- parameters as lists --------------------------------------------------------------


@pytest.mark.parametrize("case", list(LIST_PARAMETERS))
def test_parameters_set_as_lists_work_as_in_hmmlearn(case):
    class_name, kwargs, emission = LIST_PARAMETERS[case]
    ours = hand_set(OURS[class_name], kwargs, emission)
    X, states = ours.sample(200, random_state=0)
    assert X.shape[0] == 200 and states.shape == (200,)
    for name in ["startprob_", "transmat_", *emission]:
        assert getattr(ours, name).dtype == np.float64
    # Lists and arrays give the same model.
    from_arrays = hand_set(OURS[class_name], kwargs, emission, as_arrays=True)
    assert ours.score(X) == from_arrays.score(X)
    hmm = pytest.importorskip("hmmlearn.hmm")
    # hmmlearn's GMMHMM itself fails on lists (its _check reads .shape): give it arrays;
    # its discrete models want integer X.
    their_class = getattr(hmm, class_name)
    arrays_for_them = class_name == "GMMHMM"
    X_theirs = X if class_name in ("GaussianHMM", "GMMHMM") else X.astype(int)
    theirs = hand_set(their_class, kwargs, emission, as_arrays=arrays_for_them)
    np.testing.assert_allclose(ours.score(X), theirs.score(X_theirs), rtol=1e-10)
    np.testing.assert_allclose(ours.decode(X)[0], theirs.decode(X_theirs)[0], rtol=1e-10)
    # init_params="" starts EM from the hand-set lists, in both libraries.
    ours_fit = hand_set(OURS[class_name], kwargs, emission, n_iter=1).fit(X)
    theirs_fit = hand_set(their_class, kwargs, emission, as_arrays=arrays_for_them, n_iter=1).fit(
        X_theirs
    )
    np.testing.assert_allclose(ours_fit.transmat_, theirs_fit.transmat_, rtol=1e-8)
    np.testing.assert_allclose(
        ours_fit.monitor_.history[0], theirs_fit.monitor_.history[0], rtol=1e-10
    )


def test_list_parameters_are_validated_after_conversion():
    _, kwargs, emission = LIST_PARAMETERS["gaussian_full"]
    X = np.zeros((5, 2))
    model = hand_set(GaussianHMM, kwargs, emission)
    model.transmat_ = [[0.5, 0.6, 0.1], [0.3, 0.5, 0.2], [0.3, 0.3, 0.4]]
    with pytest.raises(ValueError, match="transmat_ rows must sum to 1"):
        model.score(X)
    model = hand_set(GaussianHMM, kwargs, emission)
    model.startprob_ = [0.5, 0.5]
    with pytest.raises(ValueError, match="startprob_ must have shape"):
        model.sample(3)
    model = hand_set(GaussianHMM, kwargs, emission)
    model.covars_ = [[[1.0, 2.0], [2.0, 1.0]]] * 3
    with pytest.raises(ValueError, match="not positive definite"):
        model.predict(X)
    model = hand_set(PoissonHMM, {}, LIST_PARAMETERS["poisson"][2])
    model.lambdas_ = [[1.0, -1.0], [1.0, 1.0], [1.0, 1.0]]
    with pytest.raises(ValueError, match="lambdas_"):
        model.sample(3)
    with pytest.raises(ValueError, match="means_ must be a rectangular array"):
        model = GaussianHMM(2)
        model.means_ = [[0.0, 1.0], [2.0]]
    with pytest.raises(ValueError, match="emissionprob_ must be a rectangular array"):
        CategoricalHMM(2).emissionprob_ = [["a", "b"], ["c", "d"]]
    with pytest.raises(TypeError, match="startprob_ must be an array of numbers, got None"):
        GaussianHMM(2).startprob_ = None
    with pytest.raises(TypeError, match="real"):
        GaussianHMM(2).startprob_ = [0.5 + 1j, 0.5]


def test_assigned_arrays_are_copied_both_ways():
    means = np.array([[0.0], [3.0], [6.0]])
    model = hand_set(GaussianHMM, {}, {"means_": means, "covars_": [[1.0], [1.0], [1.0]]})
    means[0, 0] = 100.0  # the caller's array changes; the model's does not
    assert model.means_[0, 0] == 0.0
    X = model.sample(100, random_state=0)[0]
    before = means.copy()
    model.set_params(init_params="", n_iter=3).fit(X)
    np.testing.assert_array_equal(means, before)


def test_spherical_covars_as_a_column_as_hmmlearn():
    model = GaussianHMM(2, covariance_type="spherical", init_params="")
    model.startprob_ = [0.5, 0.5]
    model.transmat_ = [[0.9, 0.1], [0.1, 0.9]]
    model.means_ = [[0.0, 0.0], [3.0, 3.0]]
    model.covars_ = np.array([[1.0], [2.0]])  # (n_components, 1)
    np.testing.assert_array_equal(model._covars_, [1.0, 2.0])
    np.testing.assert_array_equal(model.covars_, [np.eye(2), 2 * np.eye(2)])
    X = model.sample(50, random_state=0)[0]
    hmm = pytest.importorskip("hmmlearn.hmm")
    theirs = hmm.GaussianHMM(2, covariance_type="spherical", init_params="")
    theirs.startprob_, theirs.transmat_ = model.startprob_, model.transmat_
    theirs.means_, theirs.covars_ = model.means_, np.array([[1.0], [2.0]])
    np.testing.assert_allclose(model.score(X), theirs.score(X), rtol=1e-12)


@pytest.mark.parametrize("n_features", [1, 2])
@pytest.mark.parametrize("shape", [(2,), (2, 1), (2, 1, 1), (2, 1, 1, 1)])
def test_spherical_covars_in_every_shape_hmmlearn_accepts(shape, n_features):
    """hmmlearn's issue 385: spherical covars_ assigned as (n_components, 1, 1, 1)
    (or (n_components, 1, 1)) are accepted and sampled from; skseq takes them
    too, as the variances they hold, and (unlike hmmlearn) also scores with them."""
    variances = np.array([1.0, 2.0])

    def set_up(model, covars):
        model.startprob_ = [0.5, 0.5]
        model.transmat_ = [[0.9, 0.1], [0.1, 0.9]]
        model.means_ = np.zeros((2, n_features)) + [[0.0], [3.0]]
        model.covars_ = covars
        return model

    model = set_up(GaussianHMM(2, covariance_type="spherical"), variances.reshape(shape))
    np.testing.assert_array_equal(model._covars_, variances)
    X, states = model.sample(4000, random_state=0)
    for k in range(2):  # the draws have the variances
        np.testing.assert_allclose(X[states == k].var(axis=0), variances[k], rtol=0.1)
    reference = set_up(GaussianHMM(2, covariance_type="spherical"), variances)
    assert model.score(X[:50]) == reference.score(X[:50])
    hmm = pytest.importorskip("hmmlearn.hmm")
    theirs = set_up(hmm.GaussianHMM(2, covariance_type="spherical"), variances.reshape(shape))
    theirs.sample(10, random_state=0)  # hmmlearn samples with this shape, as skseq
    np.testing.assert_allclose(model.covars_, theirs.covars_, rtol=0)
    plain = set_up(hmm.GaussianHMM(2, covariance_type="spherical"), variances)
    np.testing.assert_allclose(model.score(X[:50]), plain.score(X[:50]), rtol=1e-12)


def test_spherical_covars_of_one_variance_per_feature_are_refused():
    """(n_components, n_features) with n_features > 1 holds no spherical variances
    (hmmlearn turns it into n_components * n_features matrices): a ValueError."""
    model = GaussianHMM(2, covariance_type="spherical", init_params="")
    model.startprob_ = [0.5, 0.5]
    model.transmat_ = [[0.9, 0.1], [0.1, 0.9]]
    model.means_ = np.zeros((2, 2))
    model.covars_ = np.ones((2, 2))
    with pytest.raises(ValueError, match=r"covars_ for covariance_type='spherical' must have"):
        model.sample(5)


def test_underflow_hmmlearns_scaling_raises_on_is_exact_in_skseq():
    """State 0 never leaves; state 1 falls to e^-7200 relative to it over four
    rows, after which state 0's densities are e^-1800: hmmlearn's scaling
    implementation raises on the underflow, skseq's answer (the scaled
    recursion, redone in log space where it cannot vouch for a sequence)
    equals the enumeration of every state path in log space."""
    X = np.array([[0.0], [0.0], [0.0], [0.0], [60.0], [60.0]])

    def set_up(model):
        model.startprob_ = [0.5, 0.5]
        model.transmat_ = [[1.0, 0.0], [0.1, 0.9]]
        model.means_ = [[0.0], [60.0]]
        model.covars_ = [[1.0], [1.0]]
        return model

    log_frame = norm.logpdf(X, loc=[0.0, 60.0], scale=1.0)
    with np.errstate(divide="ignore"):
        log_trans = np.log([[1.0, 0.0], [0.1, 0.9]])
    paths, log_joint = brute_force(np.log([0.5, 0.5]), log_trans, log_frame)
    expected = logsumexp(log_joint)
    for implementation in ("scaling", "log"):
        ours = set_up(GaussianHMM(2, covariance_type="diag", implementation=implementation))
        np.testing.assert_allclose(ours.score(X), expected, rtol=1e-12)
        posteriors = ours.predict_proba(X)
        weights = np.exp(log_joint - expected)
        np.testing.assert_allclose(posteriors[:, 1], weights @ (paths == 1), atol=1e-12)
    hmm = pytest.importorskip("hmmlearn.hmm")
    theirs = set_up(hmm.GaussianHMM(2, covariance_type="diag", implementation="scaling"))
    with pytest.raises(ValueError, match="underflow"):
        theirs.score(X)
    theirs.implementation = "log"
    np.testing.assert_allclose(theirs.score(X), expected, rtol=1e-10)


# -- n_features ---------------------------------------------------------------------


def test_n_features_set_before_sample_as_in_hmmlearn():
    model = GaussianHMM(2, covariance_type="spherical", init_params="")
    assert not hasattr(model, "n_features")
    model.n_features = 3
    assert model.n_features == 3
    model.startprob_ = [0.5, 0.5]
    model.transmat_ = [[0.9, 0.1], [0.1, 0.9]]
    model.covars_ = [1.0, 2.0]
    # Spherical covariances as full matrices need n_features before means_ exist.
    assert model.covars_.shape == (2, 3, 3)
    model.means_ = np.zeros((2, 3))
    X, _ = model.sample(20, random_state=0)
    assert X.shape == (20, 3)
    model.means_ = np.zeros((2, 4))
    with pytest.raises(ValueError, match="X has 3 features, but the model's means_ have 4"):
        model.sample(5)
    with pytest.raises(ValueError, match="Unexpected number of dimensions"):
        _fit_with_n_features(4, np.zeros((10, 2)))
    with pytest.raises(ValueError, match="n_features must be >= 1"):
        GaussianHMM(2).n_features = 0
    # fit derives it from the data: a refit on other data is free to change it.
    fitted = _fit_with_n_features(2, np.random.default_rng(0).normal(size=(30, 2)))
    assert fitted.n_features == 2
    fitted.fit(np.random.default_rng(0).normal(size=(30, 3)))
    assert fitted.n_features == 3


def _fit_with_n_features(n_features, X):
    model = GaussianHMM(2, n_iter=2, random_state=0)
    model.n_features = n_features
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(X)


def test_n_features_of_poisson_gmm_and_categorical():
    poisson = hand_set(PoissonHMM, {}, LIST_PARAMETERS["poisson"][2])
    assert poisson.n_features == 2
    gmm = hand_set(GMMHMM, *LIST_PARAMETERS["gmm_diag"][1:])
    assert gmm.n_features == 1
    model = PoissonHMM(2)
    model.n_features = 2
    with pytest.raises(ValueError, match="Unexpected number of dimensions"):
        model.fit(np.ones((10, 3)))
    multinomial = MultinomialHMM(2, n_trials=5, init_params="")
    multinomial.n_features = 3  # hmmlearn's tutorial sets it before the parameters
    multinomial.startprob_ = [0.5, 0.5]
    multinomial.transmat_ = [[0.9, 0.1], [0.1, 0.9]]
    multinomial.emissionprob_ = [[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]]
    counts, _ = multinomial.sample(10, random_state=0)
    assert counts.shape == (10, 3) and np.all(counts.sum(axis=1) == 5)
    multinomial.emissionprob_ = [[0.5, 0.5], [0.5, 0.5]]
    with pytest.raises(ValueError, match="X has 3 features"):
        multinomial.sample(3)
    # CategoricalHMM's n_features stays its constructor parameter (the alphabet size).
    categorical = CategoricalHMM(2, random_state=0, n_iter=2)
    categorical.fit(np.array([[0], [1], [2], [1]] * 5))
    assert categorical.n_features is None and categorical.get_params()["n_features"] is None
    assert clone(categorical).n_features is None


# -- monitor_ -------------------------------------------------------------------------


def test_monitor_exists_before_fit_without_making_the_model_fitted():
    model = GaussianHMM(2, tol=5.0, n_iter=7, verbose=False)
    monitor = model.monitor_
    assert (monitor.tol, monitor.n_iter, monitor.verbose, monitor.iter) == (5.0, 7, False, 0)
    assert "monitor_" not in vars(model)
    with pytest.raises(NotFittedError):
        check_is_fitted(model)
    # A default monitor follows the hyperparameters as they are at fit.
    model.set_params(tol=1e-12, n_iter=3, random_state=0)
    X = np.random.default_rng(0).normal(size=(100, 1))
    with pytest.warns(ConvergenceWarning):
        model.fit(X)
    assert (model.monitor_.tol, model.monitor_.n_iter, model.monitor_.iter) == (1e-12, 3, 3)
    assert "monitor_" not in clone(model).__dict__ and clone(model).monitor_.iter == 0


class ThresholdMonitor(ConvergenceMonitor):
    """hmmlearn's documented example of a custom criterion."""

    @property
    def converged(self):
        return self.iter == self.n_iter or self.history[-1] >= self.tol


@pytest.mark.parametrize("n_init", [1, 3])
def test_assigned_monitor_is_kept_by_fit_as_in_hmmlearn(n_init):
    emission = {"means_": [[0.0], [1.0]], "covars_": [[1.0], [1.0]]}
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(0, 1, (100, 1)), rng.normal(5, 1, (100, 1))])

    def run(cls, monitor_class=None, tol=1e-9, **kwargs):
        model = cls(2, n_iter=100, tol=tol, init_params="", **kwargs)
        model.startprob_, model.transmat_ = [0.5, 0.5], [[0.9, 0.1], [0.1, 0.9]]
        for name, value in emission.items():
            setattr(model, name, np.array(value))
        if monitor_class is not None:
            model.monitor_ = monitor_class(model.monitor_.tol, model.monitor_.n_iter, False)
        assigned = model.monitor_
        return model.fit(X), assigned

    history = run(GaussianHMM)[0].monitor_.history
    threshold = 0.5 * (history[1] + history[2])  # reached at the third iteration
    ours, assigned = run(GaussianHMM, ThresholdMonitor, tol=threshold, n_init=n_init)
    assert ours.monitor_ is assigned and type(assigned) is ThresholdMonitor
    assert assigned.iter == ours.n_iter_ == 3 and ours.converged_
    assert assigned.history == history[:3]
    ours.fit(X)  # kept across fits too (from the fitted values, past the threshold at once)
    assert ours.monitor_ is assigned and assigned.iter == len(assigned.history) == 1
    if n_init == 1:
        hmm_base = pytest.importorskip("hmmlearn.base")
        hmm = pytest.importorskip("hmmlearn.hmm")

        class TheirThreshold(hmm_base.ConvergenceMonitor):
            converged = ThresholdMonitor.converged

        theirs, _ = run(hmm.GaussianHMM, TheirThreshold, tol=threshold)
        assert theirs.monitor_.iter == 3
        np.testing.assert_allclose(list(theirs.monitor_.history)[-2:], history[1:3], rtol=1e-10)
    with pytest.raises(TypeError, match="monitor_ must be a ConvergenceMonitor"):
        GaussianHMM(2).monitor_ = "tolerance"


def test_assigned_criterion_met_on_the_last_iteration_counts_as_converged():
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(0, 1, (100, 1)), rng.normal(5, 1, (100, 1))])
    history = GaussianHMM(2, n_iter=3, tol=-np.inf, random_state=0).fit(X).monitor_.history
    model = GaussianHMM(2, n_iter=3, random_state=0)
    model.monitor_ = ThresholdMonitor(0.5 * (history[1] + history[2]), 3, False)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model.fit(X)
    assert model.converged_ and model.n_iter_ == 3
    assert _messages(record, ConvergenceWarning) == []
    # Met on the last iteration, EM stops before that iteration's M step, as it
    # does when the gain falls below tol there: the parameters are those scored.
    assert model.score(X) == pytest.approx(model.monitor_.history[-1], rel=1e-12)


def test_monitor_converged_at_the_iteration_limit_as_hmmlearn():
    X = np.concatenate([np.random.default_rng(1).normal(m, 1, (100, 1)) for m in (0, 4)])
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        ours = GaussianHMM(2, n_iter=3, tol=1e-12, random_state=0).fit(X)
    assert ours.monitor_.converged and not ours.converged_ and ours.n_iter_ == 3
    converged = GaussianHMM(2, n_iter=500, tol=1e-2, random_state=0).fit(X)
    assert converged.monitor_.converged and converged.converged_
    hmm = pytest.importorskip("hmmlearn.hmm")
    theirs = hmm.GaussianHMM(2, n_iter=3, tol=1e-12, random_state=0).fit(X)
    assert theirs.monitor_.converged == ours.monitor_.converged


# -- positional lengths -------------------------------------------------------------


def fitted_gaussian():
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(0, 1, (40, 1)), rng.normal(4, 1, (40, 1))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return GaussianHMM(2, n_iter=5, random_state=0).fit(X, lengths=[30, 50]), X


def test_aic_and_bic_take_lengths_positionally_as_hmmlearn():
    model, X = fitted_gaussian()
    lengths = [30, 50]
    assert model.aic(X, lengths) == model.aic(X, lengths=lengths)
    assert model.bic(X, lengths) == model.bic(X, lengths=lengths)
    assert model.aic(X, lengths) != model.aic(X)  # the split matters
    hmm = pytest.importorskip("hmmlearn.hmm")
    theirs = hmm.GaussianHMM(2, init_params="")
    theirs.n_features = 1
    for name in ("startprob_", "transmat_", "means_", "covars_"):
        setattr(theirs, name, getattr(model, "_covars_" if name == "covars_" else name))
    np.testing.assert_allclose(model.aic(X, lengths), theirs.aic(X, lengths), rtol=1e-12)
    np.testing.assert_allclose(model.bic(X, lengths), theirs.bic(X, lengths), rtol=1e-12)
    lgssm = LinearGaussianSSM(n_iter=2, random_state=0).fit(X, lengths=lengths)
    assert lgssm.aic(X, lengths) == lgssm.aic(X, lengths=lengths)
    assert lgssm.bic(X, lengths) == lgssm.bic(X, lengths=lengths)


@pytest.mark.parametrize(
    "method, call",
    [
        ("fit", lambda m, X, L: m.fit(X, L)),
        ("partial_fit", lambda m, X, L: m.partial_fit(X, L)),
        ("score", lambda m, X, L: m.score(X, L)),
        ("score_sequences", lambda m, X, L: m.score_sequences(X, L)),
        ("filter", lambda m, X, L: m.filter(X, L)),
    ],
)
def test_positional_lengths_name_the_method(method, call):
    model, X = fitted_gaussian()
    with pytest.raises(TypeError, match=rf"{method}\b.*{method}\(X, lengths=\.\.\.\)"):
        call(model, X, [30, 50])


@pytest.mark.parametrize(
    "method, call",
    [
        ("fit", lambda m, X, L: m.fit(X, L)),
        ("partial_fit", lambda m, X, L: m.partial_fit(X, L)),
        ("fit_transform", lambda m, X, L: m.fit_transform(X, L)),
        ("score", lambda m, X, L: m.score(X, L)),
        ("score_sequences", lambda m, X, L: m.score_sequences(X, L)),
        ("transform", lambda m, X, L: m.transform(X, L)),
        ("filter", lambda m, X, L: m.filter(X, L)),
        ("smooth", lambda m, X, L: m.smooth(X, L)),
        ("forecast", lambda m, X, L: m.forecast(X, 3, L)),
        ("forecast", lambda m, X, L: m.forecast(X, L)),
    ],
)
def test_positional_lengths_name_the_method_in_the_lgssm(method, call):
    _, X = fitted_gaussian()
    model = LinearGaussianSSM(n_iter=2, random_state=0).fit(X, lengths=[30, 50])
    with pytest.raises(TypeError, match=rf"{method}\b.*lengths=\.\.\."):
        call(model, X, [30, 50])


def test_decoding_methods_keep_lengths_positional():
    model, X = fitted_gaussian()
    lengths = [30, 50]
    np.testing.assert_array_equal(model.predict(X, lengths), model.predict(X, lengths=lengths))
    np.testing.assert_array_equal(
        model.predict_proba(X, lengths), model.predict_proba(X, lengths=lengths)
    )
    assert model.score_samples(X, lengths)[0] == model.score(X, lengths=lengths)
    assert model.decode(X, lengths)[0] == model.decode(X, lengths=lengths)[0]


# -- hmmlearn's warnings --------------------------------------------------------------


def _messages(record, category=UserWarning):
    return [str(w.message) for w in record if w.category is category]


def test_overwritten_hand_set_parameter_warns_with_hmmlearns_words(caplog):
    X = np.random.default_rng(0).normal(size=(60, 1))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model = GaussianHMM(2, n_iter=1, random_state=0)
        model.means_ = [[0.0], [1.0]]
        model.fit(X)
    ours = _messages(record)
    assert ours == [
        "Even though the 'means_' attribute is set, it will be overwritten during "
        "initialization because 'init_params' contains 'm'"
    ]
    assert record[0].filename == __file__
    hmm = pytest.importorskip("hmmlearn.hmm")
    theirs = hmm.GaussianHMM(2, n_iter=1, random_state=0)
    theirs.means_ = np.array([[0.0], [1.0]])
    with caplog.at_level(logging.WARNING, logger="hmmlearn"):
        theirs.fit(X)
    assert ours[0] in caplog.messages


def test_overwritten_hand_set_parameter_is_logged_as_in_hmmlearn(caplog):
    """hmmlearn reports it through logging (its users' handlers and caplog catch
    it); skseq logs it on the logger "skseq.hmm" and warns as well."""
    X = np.random.default_rng(0).normal(size=(60, 1))
    model = GaussianHMM(2, n_iter=1, random_state=0)
    model.means_ = [[0.0], [1.0]]
    with caplog.at_level(logging.WARNING, logger="skseq.hmm"):
        with pytest.warns(UserWarning, match="will be overwritten") as record:
            model.fit(X)
    logged = [r for r in caplog.records if r.name == "skseq.hmm"]
    assert [r.levelno for r in logged] == [logging.WARNING]
    assert logged[0].getMessage() == str(record[0].message)
    assert "'init_params' contains 'm'" in logged[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="skseq.hmm"):
        model.fit(X)  # nothing hand-set any more: nothing logged
    assert not [r for r in caplog.records if r.name == "skseq.hmm"]
    # hmmlearn logs the degenerate-solution warning too; so does skseq.
    with caplog.at_level(logging.WARNING, logger="skseq.hmm"):
        with pytest.warns(UserWarning, match="degenerate solution"):
            GaussianHMM(5, covariance_type="full", n_iter=2, random_state=0).fit(X[:8])
    assert [r.getMessage() for r in caplog.records if r.name == "skseq.hmm"] == [
        "Fitting a model with 34 free scalar parameters with only 8 data points will "
        "result in a degenerate solution."
    ]


def test_overwritten_warning_only_for_hand_set_values():
    X = np.random.default_rng(0).normal(size=(60, 1))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model = GaussianHMM(2, n_iter=1, random_state=0).fit(X)
        model.fit(X)  # the previous fit's values: no hand-set value is lost
        model.set_params(init_params="").fit(X)  # hand-set values are used, not overwritten
        model.means_ = [[0.0], [1.0]]
        model.set_params(init_params="stmc", means_init=[[0.5], [1.5]]).fit(X)
    assert _messages(record) == [
        "Even though the 'means_' attribute is set, it will be overwritten during "
        "initialization because means_init is given"
    ]


def test_degenerate_solution_warning_as_hmmlearn(caplog):
    X = np.random.default_rng(0).normal(size=(8, 3))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        GaussianHMM(5, covariance_type="full", n_iter=2, random_state=0).fit(X)
        GaussianHMM(2, n_iter=2, random_state=0).fit(np.tile(X, (10, 1)))  # enough rows
        GaussianHMM(5, n_iter=0, random_state=0).fit(X)  # n_iter=0 fits nothing
    ours = _messages(record)
    assert ours == [
        "Fitting a model with 69 free scalar parameters with only 24 data points will "
        "result in a degenerate solution."
    ]
    assert [w.filename for w in record if w.category is UserWarning] == [__file__]
    hmm = pytest.importorskip("hmmlearn.hmm")
    with caplog.at_level(logging.WARNING, logger="hmmlearn"):
        hmm.GaussianHMM(5, covariance_type="full", n_iter=2, random_state=0).fit(X)
    assert ours[0] in caplog.messages
    # Missing rows are no data points.
    X_missing = np.tile(X, (2, 1))
    X_missing[:9] = np.nan
    with pytest.warns(UserWarning, match="only 21 data points"):
        GaussianHMM(5, covariance_type="full", n_iter=2, random_state=0).fit(X_missing)


def test_no_convergence_warning_without_a_gain_and_warnings_point_at_the_caller():
    X = np.random.default_rng(0).normal(size=(100, 2))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        GaussianHMM(2, n_iter=1, random_state=0).fit(X)
        GaussianHMM(2, n_iter=1, learning_method="online", random_state=0).fit(X)
        LinearGaussianSSM(n_iter=1).fit(X)
    assert _messages(record, ConvergenceWarning) == []
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        GaussianHMM(2, n_iter=2, tol=1e-12, random_state=0).fit(X)
        GMMHMM(2, n_mix=2, n_iter=2, tol=1e-12, random_state=0).fit(X)
        GaussianHMM(
            2, n_iter=2, tol=1e-12, learning_method="online", batch_size=1, random_state=0
        ).fit(X, lengths=[50, 50])
        LinearGaussianSSM(n_iter=2, tol=1e-12).fit(X)
        LinearGaussianSSM(n_iter=2, tol=1e-12).fit_transform(X)
        # a search fits on the user's behalf, through joblib
        GridSearchCV(GaussianHMM(n_iter=2, tol=1e-12, random_state=0), {"n_components": [2]}).fit(X)
    convergence = [w for w in record if w.category is ConvergenceWarning]
    assert len(convergence) == 5 + 6  # the search: five folds and the refit
    assert all("did not converge in n_iter=2" in str(w.message) for w in convergence)
    assert [w.filename for w in convergence] == [__file__] * 11


def test_pickled_model_keeps_its_assigned_monitor():
    model = GaussianHMM(2, n_iter=3, random_state=0)
    model.monitor_ = ThresholdMonitor(1e9, 3, False)
    X = np.random.default_rng(0).normal(size=(50, 1))
    restored = pickle.loads(pickle.dumps(model.fit(X)))
    assert type(restored.monitor_) is ThresholdMonitor
    assert restored.monitor_.history == model.monitor_.history
    restored.fit(X)
    assert type(restored.monitor_) is ThresholdMonitor  # still the assigned criterion
