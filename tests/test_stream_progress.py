"""partial_fit reports the progress of a stream, for the HMMs and the linear-Gaussian SSM."""

import io
import warnings
from contextlib import redirect_stderr

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from skseq import GaussianHMM, LinearGaussianSSM

# -- partial_fit progress -------------------------------------------------------------


@pytest.mark.parametrize(
    "make, X",
    [
        (
            lambda: GaussianHMM(2, params="", init_params="stmc", random_state=0),
            np.random.default_rng(0).normal(size=(300, 2)),
        ),
        (
            lambda: LinearGaussianSSM(params=[], random_state=0),
            np.cumsum(np.random.default_rng(0).normal(size=(300, 2)), axis=0),
        ),
    ],
    ids=["GaussianHMM", "LinearGaussianSSM"],
)
def test_partial_fit_reports_each_batch(make, X):
    model = make()
    stderr = io.StringIO()
    batch_log_likelihoods = []
    with redirect_stderr(stderr):
        for start in range(0, 300, 100):
            model.set_params(verbose=start > 0)  # the first call quietly
            model.partial_fit(X[start : start + 100])
            batch_log_likelihoods.append(model.batch_log_likelihood_)
    # Nothing is learned (params empty): the batches of one stream add up to the
    # log-likelihood of the whole sequence.
    np.testing.assert_allclose(sum(batch_log_likelihoods), model.score(X), rtol=1e-10)
    np.testing.assert_allclose(batch_log_likelihoods[0], model.score(X[:100]), rtol=1e-10)
    lines = stderr.getvalue().splitlines()
    assert len(lines) == 2
    for line, rows, value in zip(lines, (200, 300), batch_log_likelihoods[1:]):
        assert f"{rows} rows seen" in line
        assert f"log-likelihood {value:.6f}" in line
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.set_params(verbose=False).fit(X)
    assert not hasattr(model, "batch_log_likelihood_")  # fit describes no batch
