"""SQUAREM as an option of the EM engine (``acceleration``), for every EM estimator.

Plain EM (``acceleration=None``) is the EM sequence itself; SQUAREM reaches the
same maximum in fewer iterations, never lowers the log-likelihood, reports
every accepted log-likelihood to ``monitor_`` and stops by its rule.
"""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from skseq import (
    GMMHMM,
    AutoregressiveHMM,
    CategoricalHMM,
    GaussianHMM,
    LinearGaussianSSM,
    MultinomialHMM,
    PoissonHMM,
)
from skseq.base import ConvergenceMonitor, ParameterCoordinates
from skseq.datasets import load_nile

RNG = np.random.default_rng(7)
STATES = np.repeat(RNG.integers(0, 3, size=60), 10)
GAUSSIAN_ROWS = np.array([[0.0, 0.0], [1.5, 0.5], [0.5, 1.5]])[STATES] + RNG.normal(
    size=(len(STATES), 2)
)
COUNTS = RNG.poisson(np.array([[1.0, 4.0], [3.0, 1.0], [6.0, 6.0]])[STATES])
SYMBOLS = (STATES[:, None] + RNG.integers(0, 2, size=(len(STATES), 1))) % 4
TRIALS = RNG.multinomial(5, [0.2, 0.3, 0.5], size=len(STATES))
AR_ROWS = np.zeros((len(STATES), 1))
for _t in range(1, len(STATES)):
    AR_ROWS[_t] = [0.9, -0.5, 0.2][STATES[_t]] * AR_ROWS[_t - 1] + RNG.normal()

EM_ESTIMATORS = [
    (GaussianHMM(3, covariance_type="full", random_state=0), GAUSSIAN_ROWS),
    (GaussianHMM(3, covariance_type="diag", random_state=0), GAUSSIAN_ROWS),
    (GaussianHMM(3, covariance_type="spherical", random_state=0), GAUSSIAN_ROWS),
    (GaussianHMM(3, covariance_type="tied", random_state=0), GAUSSIAN_ROWS),
    (GMMHMM(2, n_mix=2, covariance_type="full", random_state=0), GAUSSIAN_ROWS),
    (GMMHMM(2, n_mix=2, covariance_type="tied", random_state=0), GAUSSIAN_ROWS),
    (PoissonHMM(3, random_state=0), COUNTS),
    (AutoregressiveHMM(2, n_lags=2, random_state=0), AR_ROWS),
    (AutoregressiveHMM(2, n_lags=1, covariance_type="diag", random_state=0), GAUSSIAN_ROWS),
    (CategoricalHMM(3, random_state=0), SYMBOLS),
    (MultinomialHMM(3, n_trials=5, random_state=0), TRIALS),
    (
        LinearGaussianSSM(
            1,
            transition_matrix_init=[[1.0]],
            observation_matrix_init=[[1.0]],
            params=["transition_covariance", "observation_covariance"],
        ),
        load_nile().data,
    ),
]


def fitted(estimator, X, **params):
    model = estimator.set_params(**params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(X)


def test_every_em_estimator_has_acceleration_and_the_defaults_are_as_chosen():
    for estimator, _ in EM_ESTIMATORS:
        expected = "squarem" if isinstance(estimator, LinearGaussianSSM) else None
        assert estimator.get_params()["acceleration"] == expected


@pytest.mark.parametrize(
    "estimator, X", EM_ESTIMATORS, ids=[type(e).__name__ for e, _ in EM_ESTIMATORS]
)
def test_squarem_never_lowers_the_log_likelihood_and_reaches_plain_ems_maximum(estimator, X):
    plain = fitted(estimator, X, acceleration=None, n_iter=3000, tol=1e-7)
    fast = fitted(estimator, X, acceleration="squarem", n_iter=3000, tol=1e-7)
    history = np.array(fast.monitor_.history)
    assert np.all(np.diff(history) >= -1e-9 * np.abs(history[:-1]))
    assert fast.converged_
    # The same maximum: neither fit ends far above the other (EM's maxima are local,
    # and both start from the same initial values).
    assert fast.lower_bound_ == pytest.approx(plain.lower_bound_, abs=1e-3)
    assert fast.n_iter_ <= plain.n_iter_


def test_squarem_keeps_zero_probabilities_zero():
    """A left-right topology stays left-right: a zero probability is -inf in the
    coordinates and is never extrapolated."""
    transmat = np.array([[0.8, 0.2, 0.0], [0.0, 0.8, 0.2], [0.0, 0.0, 1.0]])
    model = GaussianHMM(
        3,
        init_params="mc",
        startprob_init=[1.0, 0.0, 0.0],
        transmat_init=transmat,
        random_state=0,
        acceleration="squarem",
        n_iter=200,
    )
    rows = np.concatenate([RNG.normal(loc, size=(40, 2)) for loc in (0.0, 3.0, 6.0)])
    model.fit(rows)
    np.testing.assert_array_equal(model.transmat_ == 0, transmat == 0)
    np.testing.assert_array_equal(model.startprob_[1:], 0.0)


def test_the_lgssm_plain_em_history_is_the_em_sequence():
    """acceleration=None: each value of monitor_.history is the log-likelihood after one
    more plain M step (the accelerated fit's is not)."""
    X = load_nile().data
    kwargs = dict(
        transition_matrix_init=[[1.0]],
        observation_matrix_init=[[1.0]],
        params=["transition_covariance", "observation_covariance"],
        n_iter=6,
        tol=-np.inf,
    )
    model = fitted(LinearGaussianSSM(1, acceleration=None, **kwargs), X)
    stepper = fitted(LinearGaussianSSM(1, acceleration=None, **dict(kwargs, n_iter=0)), X)
    offsets = np.array([0, len(X)])
    stacked = stepper._stack(X, np.zeros((len(X), 0)))
    expected = []
    for _ in range(6):
        statistics, log_likelihood = stepper._estep(stacked, offsets)
        expected.append(log_likelihood)
        stepper._mstep(statistics)
    np.testing.assert_allclose(model.monitor_.history, expected, rtol=1e-12)
    accelerated = fitted(LinearGaussianSSM(1, acceleration="squarem", **kwargs), X)
    assert accelerated.monitor_.history[-1] > model.monitor_.history[-1]


class StopAfterThree(ConvergenceMonitor):
    @property
    def converged(self):
        return self.iter >= 3 or self.iter >= self.n_iter


@pytest.mark.parametrize("acceleration", [None, "squarem"])
@pytest.mark.parametrize(
    "estimator, X",
    [EM_ESTIMATORS[0], EM_ESTIMATORS[-1]],
    ids=["GaussianHMM", "LinearGaussianSSM"],
)
def test_an_assigned_monitor_decides_with_and_without_squarem(estimator, X, acceleration):
    """The custom-monitor recipe: before, the LGSSM's SQUAREM loop never asked the
    monitor and ran on to its own criterion."""
    model = estimator.set_params(acceleration=acceleration, n_iter=100, tol=-np.inf)
    model.monitor_ = StopAfterThree(model.tol, model.n_iter, False)
    model.fit(X)
    assert isinstance(model.monitor_, StopAfterThree)
    # SQUAREM asks at the end of each cycle (iterations 1, 3, 5, ...).
    assert model.n_iter_ == 3
    assert len(model.monitor_.history) == 3
    assert model.converged_


def test_squarem_stops_by_the_same_tol_rule():
    X = load_nile().data
    model = fitted(
        LinearGaussianSSM(
            1,
            transition_matrix_init=[[1.0]],
            observation_matrix_init=[[1.0]],
            params=["transition_covariance", "observation_covariance"],
            tol=1e-4,
            n_iter=500,
        ),
        X,
    )
    history = model.monitor_.history
    assert model.converged_ and model.n_iter_ < 500
    assert history[-1] - history[-2] < 1e-4
    assert np.all(np.diff(history[:-1]) >= 0)


def test_parameter_coordinates_round_trip_every_kind():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(2, 3, 3))
    parameters = {
        "real": rng.normal(size=(2, 3)),
        "positive": rng.random((2, 3)) + 0.1,
        "covariance": a @ np.swapaxes(a, 1, 2) + np.eye(3),
        "probabilities": np.array([[0.2, 0.8, 0.0], [0.5, 0.25, 0.25]]),
    }
    units = np.array([1.0, 10.0, 0.1])
    coordinates = ParameterCoordinates(
        {
            "real": ("real", units),
            "positive": ("positive", units),
            "covariance": ("covariance", units),
            "probabilities": ("probabilities", None),
        }
    )
    vector = coordinates.to_vector(parameters)
    assert vector.shape == (6 + 6 + 18 + 6,)
    back = coordinates.from_vector(vector, parameters)
    for name, value in parameters.items():
        np.testing.assert_allclose(back[name], value, rtol=1e-9, atol=1e-12, err_msg=name)
    assert coordinates.from_vector(np.full_like(vector, np.nan), parameters) is None


@pytest.mark.parametrize("value", ["SQUAREM", "aitken", False, 1])
def test_bad_acceleration_is_refused(value):
    with pytest.raises(ValueError, match="acceleration must be 'squarem' or None"):
        LinearGaussianSSM(acceleration=value).fit(GAUSSIAN_ROWS)
