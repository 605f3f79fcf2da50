"""Masked arrays (numpy's and pykalman's missing values) in every estimator.

Where missing data are supported, a masked entry is a missing value exactly
like NaN; elsewhere a masked array with a masked entry is an error, never
silently read as observed.
"""

import numpy as np
import pytest
from sklearn.base import clone

from skseq import (
    GMMHMM,
    CategoricalHMM,
    GaussianHMM,
    LinearGaussianSSM,
    MultinomialHMM,
    PoissonHMM,
    SelectiveSSMRegressor,
)
from skseq.datasets import load_nile
from skseq.inference.kalman import kalman_filter

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

MISSING_YEARS = [3, 10, 11, 12, 30, 47, 48, 61, 80, 99]


def nile_versions():
    """The Nile flow unmasked, with ten years masked, and with the same years NaN."""
    flow = load_nile().data
    mask = np.zeros(flow.shape, dtype=bool)
    mask[MISSING_YEARS] = True
    as_nan = flow.copy()
    as_nan[mask] = np.nan
    return flow, np.ma.masked_array(flow, mask=mask), as_nan


# -- masked arrays ----------------------------------------------------------------


@pytest.mark.parametrize(
    "model",
    [
        GaussianHMM(2, n_iter=20, random_state=0),
        GMMHMM(2, n_mix=2, n_iter=20, random_state=0),
        LinearGaussianSSM(n_iter=20, random_state=0),
    ],
    ids=["GaussianHMM", "GMMHMM", "LinearGaussianSSM"],
)
def test_masked_nile_years_are_missing_like_nan(model):
    flow, masked, as_nan = nile_versions()
    masked_copy = masked.copy()
    on_masked = clone(model).fit(masked)
    on_nan = clone(model).fit(as_nan)
    assert on_masked.score(masked) == on_nan.score(as_nan)
    assert on_masked.score(masked) != on_masked.score(flow)
    assert on_nan.score(masked) == on_nan.score(as_nan)
    assert on_masked.lower_bound_ == on_nan.lower_bound_
    # The caller's masked array is not changed.
    np.testing.assert_array_equal(masked.data, masked_copy.data)
    np.testing.assert_array_equal(masked.mask, masked_copy.mask)
    # A masked array with nothing masked is the plain data.
    unmasked = np.ma.masked_array(flow, mask=np.zeros_like(flow, dtype=bool))
    assert on_nan.score(unmasked) == on_nan.score(flow)


def test_masked_nile_log_likelihood_equals_pykalman():
    pykalman = pytest.importorskip("pykalman")
    _, masked, _ = nile_versions()
    model = LinearGaussianSSM(n_iter=10, random_state=0).fit(masked)
    theirs = pykalman.KalmanFilter(
        transition_matrices=model.transition_matrix_,
        observation_matrices=model.observation_matrix_,
        transition_covariance=model.transition_covariance_,
        observation_covariance=model.observation_covariance_,
        transition_offsets=model.transition_offset_,
        observation_offsets=model.observation_offset_,
        initial_state_mean=model.initial_state_mean_,
        initial_state_covariance=model.initial_state_covariance_,
    )
    np.testing.assert_allclose(model.score(masked), theirs.loglikelihood(masked), rtol=1e-10)
    means, _ = model.filter(masked)
    np.testing.assert_allclose(means, theirs.filter(masked)[0], rtol=1e-9)
    # filter_update takes a masked observation too (pykalman's online filter does).
    model.reset_filter()
    for row in masked[:12]:
        mean, _ = model.filter_update(row)
    np.testing.assert_allclose(mean, means[11], rtol=1e-12)


def test_masked_entries_follow_each_models_missing_data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    mask = np.zeros_like(X, dtype=bool)
    mask[5, 0] = mask[20, 1] = True
    masked = np.ma.masked_array(X, mask=mask)
    # GaussianHMM: missing data are whole rows, so one masked entry hides its row.
    hmm = GaussianHMM(2, n_iter=3, random_state=0).fit(X)
    whole_rows = X.copy()
    whole_rows[[5, 20]] = np.nan
    assert hmm.score(masked) == hmm.score(whole_rows)
    # The linear-Gaussian SSM uses the observed entries of a row.
    lgssm = LinearGaussianSSM(n_components=2, n_iter=3, random_state=0).fit(X)
    entries = np.where(mask, np.nan, X)
    assert lgssm.score(masked) == lgssm.score(entries)
    assert lgssm.score(masked) != lgssm.score(whole_rows)
    parameters = {
        name: getattr(lgssm, f"{name}_")
        for name in (
            "transition_matrix",
            "observation_matrix",
            "transition_covariance",
            "observation_covariance",
        )
    }
    result = kalman_filter(masked, **parameters)
    assert result.log_likelihood == kalman_filter(entries, **parameters).log_likelihood
    with pytest.raises(ValueError, match="controls.*masked"):
        LinearGaussianSSM(n_iter=2).fit(X, controls=np.ma.masked_array(X, mask=mask))


@pytest.mark.parametrize(
    "make, X",
    [
        (lambda: PoissonHMM(2), np.ma.masked_array([[1], [2], [3]], mask=[[0], [1], [0]])),
        (lambda: CategoricalHMM(2), np.ma.masked_array([[0], [1], [1]], mask=[[0], [1], [0]])),
        (
            lambda: MultinomialHMM(2),
            np.ma.masked_array([[1, 2], [3, 0], [2, 1]], mask=[[0, 0], [1, 0], [0, 0]]),
        ),
        (
            lambda: SelectiveSSMRegressor(max_iter=1),
            np.ma.masked_array(np.ones((4, 5)), mask=np.eye(4, 5, dtype=bool)),
        ),
    ],
    ids=["PoissonHMM", "CategoricalHMM", "MultinomialHMM", "SelectiveSSMRegressor"],
)
def test_masked_entries_where_missing_data_are_not_supported_raise(make, X):
    model = make()
    with pytest.raises(ValueError, match="does not support missing values.*masked entr"):
        if isinstance(model, SelectiveSSMRegressor):
            model.fit(X, np.ones(X.shape[0]))
        else:
            model.fit(X)
