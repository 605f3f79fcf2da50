"""Input checks every neural estimator must pass, shared by the tests of the neural estimators."""

import numpy as np
import pytest
from numpy.testing import assert_array_equal
from sklearn.exceptions import NotFittedError


def check_bad_hyperparameter(regressor_class, classifier_class, params, error, match, X, y):
    """Both estimators of a model refuse ``params`` at fit with ``error`` matching ``match``."""
    with pytest.raises(error, match=match):
        regressor_class(**params).fit(X, y)
    with pytest.raises(error, match=match):
        classifier_class(**params).fit(X, y > 0)


def check_bad_input(regressor):
    """What every neural regressor refuses: predicting unfitted, NaN or infinite X, as
    many targets as sequences, later X with other features.  Fits ``regressor`` on one
    feature per step and returns the ``(X, y)`` it used (X of shape (10, 6))."""
    rng = np.random.RandomState(0)
    X = rng.normal(size=(10, 6))
    y = rng.normal(size=10)
    with pytest.raises(NotFittedError):
        regressor.predict(X)
    with pytest.raises(ValueError, match="2D array"):
        regressor.fit(X[:, 0], y)
    for bad in (np.nan, np.inf):
        X_bad = X.copy()
        X_bad[3, 2] = bad
        with pytest.raises(ValueError, match="NaN|infinity"):
            regressor.fit(X_bad, y)
    with pytest.raises(ValueError, match="X has 10 sequences but y has 9"):
        regressor.fit(X, y[:9])
    regressor.fit(X[:, :, None], y)
    with pytest.raises(ValueError, match="expecting 1 features per step"):
        regressor.predict(rng.normal(size=(4, 6, 2)))
    return X, y


def check_inputs_not_modified(regressor):
    """``fit``, ``partial_fit``, ``predict`` and ``score`` of ``regressor`` leave X, y (with a
    NaN-masked step) and sample_weight as they were; returns the fitted regressor and X."""
    rng = np.random.RandomState(0)
    X = rng.normal(size=(12, 5)).astype(np.float32)
    y = rng.normal(size=(12, 5))
    y[0, 0] = np.nan
    weights = rng.uniform(size=(12, 5))
    copies = [X.copy(), y.copy(), weights.copy()]
    regressor.fit(X, y, sample_weight=weights)
    regressor.partial_fit(X, y, sample_weight=weights)
    regressor.predict(X)
    regressor.score(X, y, sample_weight=weights)
    for original, copy in zip([X, y, weights], copies, strict=True):
        assert_array_equal(original, copy)
    return regressor, X
