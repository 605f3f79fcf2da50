"""LinearGaussianSSM for pykalman users: hints for pykalman's names and for filtering without EM."""

import inspect
import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from skseq.inference.kalman import LGSSMParameters, kalman_filter, kalman_smoother
from skseq.lds import LinearGaussianSSM

PYKALMAN_TO_SKSEQ = {
    "transition_matrices": "transition_matrix_init",
    "observation_matrices": "observation_matrix_init",
    "transition_covariance": "transition_covariance_init",
    "observation_covariance": "observation_covariance_init",
    "transition_offsets": "transition_offset_init",
    "observation_offsets": "observation_offset_init",
    "initial_state_mean": "initial_state_mean_init",
    "initial_state_covariance": "initial_state_covariance_init",
    "n_dim_state": "n_components",
    "em_vars": "params",
}

F, H = np.array([[1.0, 1.0], [0.0, 1.0]]), np.array([[1.0, 0.0]])
Q, R = 0.01 * np.eye(2), np.array([[0.5]])
MODEL = dict(
    transition_matrix=F,
    observation_matrix=H,
    transition_covariance=Q,
    observation_covariance=R,
    transition_offset=np.zeros(2),
    observation_offset=np.zeros(1),
    initial_state_mean=np.array([0.0, 1.0]),
    initial_state_covariance=10.0 * np.eye(2),
)


def track(n_samples=60, seed=0):
    rng = np.random.default_rng(seed)
    return (np.arange(n_samples) + rng.normal(scale=0.7, size=n_samples))[:, None]


@pytest.mark.parametrize("pykalman_name", sorted(PYKALMAN_TO_SKSEQ))
def test_a_pykalman_constructor_name_raises_a_type_error_naming_the_skseq_one(pykalman_name):
    with pytest.raises(TypeError) as info:
        LinearGaussianSSM(**{pykalman_name: np.eye(2)})
    message = str(info.value)
    assert f"'{pykalman_name}'" in message and "pykalman" in message
    assert f"{PYKALMAN_TO_SKSEQ[pykalman_name]}=" in message
    # and how to filter with known matrices without EM
    assert "kalman_filter" in message and "n_iter=0" in message


def test_the_hint_names_every_pykalman_name_given_and_what_starting_values_mean():
    with pytest.raises(TypeError, match="pykalman's names") as info:
        LinearGaussianSSM(transition_matrices=F, em_vars=["transition_covariance"])
    message = str(info.value)
    assert "transition_matrix_init=" in message and "params=" in message
    assert "EM learns it unless params leaves 'transition_matrix' out" in message
    with pytest.raises(TypeError, match="controls"):
        LinearGaussianSSM(transition_offsets=np.zeros((5, 2)))
    with pytest.raises(TypeError, match="from X in fit"):
        LinearGaussianSSM(n_dim_obs=1)


def test_other_unknown_names_keep_pythons_error():
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_name'"):
        LinearGaussianSSM(no_such_name=1)


def test_the_constructor_signature_stays_explicit_for_scikit_learn():
    """get_params, clone and pickling see __init__'s own parameters, not the hint's wrapper."""
    signature = inspect.signature(LinearGaussianSSM.__init__)
    kinds = {parameter.kind for parameter in signature.parameters.values()}
    assert not kinds & {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}
    assert "transition_matrix_init" in signature.parameters
    model = LinearGaussianSSM(2, n_iter=7, transition_matrix_init=F, acceleration=None)
    assert model.get_params()["n_iter"] == 7
    copy = clone(model)
    assert copy.get_params()["acceleration"] is None
    assert np.array_equal(copy.transition_matrix_init, F)
    assert pickle.loads(pickle.dumps(model)).get_params()["n_iter"] == 7


@pytest.mark.parametrize(
    "call",
    [
        lambda model, X: model.filter(X),
        lambda model, X: model.smooth(X),
        lambda model, X: model.transform(X),
        lambda model, X: model.score(X),
        lambda model, X: model.forecast(X, 2),
        lambda model, X: model.reset_filter(X),
        lambda model, X: model.filter_update(X[0]),
        lambda model, X: model.sample(3),
    ],
)
def test_inference_on_an_unfitted_model_says_how_to_filter_without_em(call):
    with pytest.raises(NotFittedError) as info:
        call(LinearGaussianSSM(2), track())
    message = str(info.value)
    assert "not fitted" in message and "LinearGaussianSSM" in message
    assert "skseq.inference.kalman.kalman_filter(LGSSMParameters(F, H, Q, R), X)" in message
    assert "n_iter=0" in message


def test_the_advice_works_both_ways_and_gives_the_known_models_filter():
    """kalman_filter on the known matrices, and every parameter as *_init with n_iter=0:
    fit runs no EM iteration, keeps the given values, and filters as kalman_filter does."""
    X = track()
    X[20:23] = np.nan
    reference = kalman_filter(LGSSMParameters(**MODEL), X)
    smoothed = kalman_smoother(LGSSMParameters(**MODEL), X)
    initial_values = {f"{name}_init": value for name, value in MODEL.items()}
    model = LinearGaussianSSM(2, n_iter=0, **initial_values)
    model.fit(X)
    assert model.n_iter_ == 0
    for name, value in MODEL.items():
        np.testing.assert_array_equal(getattr(model, f"{name}_"), value)
    means, covariances = model.filter(X)
    np.testing.assert_allclose(means, reference.filtered_means, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(covariances, reference.filtered_covariances, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(model.smooth(X)[0], smoothed.smoothed_means, rtol=1e-12, atol=1e-12)
    assert model.score(X) == pytest.approx(reference.log_likelihood, rel=1e-12)
