"""AIC and BIC of every HMM count the rows that emit (issue 21).

BIC's n is ``BaseEM._n_scored_rows``: the rows that emit.  A row NaN
throughout is missing and emits nothing (its log-likelihood term is zero), so
it is not counted; a row with only some entries NaN emits the marginal of its
observed entries and is.  The autoregressive models also leave out their
conditioning rows (tests/hmm/test_autoregressive_hmm.py).
"""

import numpy as np
import pytest

from skseq.hmm import (
    GMMHMM,
    CategoricalHMM,
    GaussianHMM,
    InputDrivenGaussianHMM,
    PoissonHMM,
    SemiMarkovGaussianHMM,
)

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def data(kind, rng):
    if kind == "gaussian":
        X = rng.normal(size=(120, 2))
        X[70, 0] = np.nan  # a partly observed row emits
    elif kind == "categorical":
        X = rng.integers(0, 3, size=(120, 1)).astype(np.float64)
    else:
        X = rng.poisson(3.0, size=(120, 1)).astype(np.float64)
    X[[5, 50, 51]] = np.nan  # missing rows emit nothing
    return X


@pytest.mark.parametrize(
    "model, kind, with_controls",
    [
        (GaussianHMM(2, n_iter=2, random_state=0), "gaussian", False),
        (GMMHMM(2, n_mix=2, n_iter=2, random_state=0), "gaussian", False),
        (CategoricalHMM(2, n_iter=2, random_state=0), "categorical", False),
        (PoissonHMM(2, n_iter=2, random_state=0), "poisson", False),
        (InputDrivenGaussianHMM(2, n_iter=2, random_state=0), "gaussian", True),
        (SemiMarkovGaussianHMM(2, max_duration=5, n_iter=2, random_state=0), "gaussian", False),
    ],
    ids=lambda value: type(value).__name__ if hasattr(value, "fit") else str(value),
)
def test_bic_counts_the_rows_that_emit(model, kind, with_controls):
    rng = np.random.default_rng(0)
    X = data(kind, rng)
    arguments = {"controls": rng.normal(size=(120, 1))} if with_controls else {}
    model.fit(X, **arguments)
    log_likelihood = model.score(X, **arguments)
    n_parameters = model._n_parameters()
    assert np.isclose(
        model.bic(X, **arguments), -2 * log_likelihood + n_parameters * np.log(117), rtol=1e-12
    )
    assert np.isclose(model.aic(X, **arguments), -2 * log_likelihood + 2 * n_parameters)
    # The same rows observed: all of them count.
    complete = np.where(np.isnan(X).all(axis=1)[:, None], 1.0, X)
    expected = -2 * model.score(complete, **arguments) + n_parameters * np.log(120)
    assert np.isclose(model.bic(complete, **arguments), expected, rtol=1e-12)
