"""The extension contract of the EM engine and of BaseHMM.

The worked example of doc/user_guide/architecture.rst (exponential emissions
in five methods) is read from the page, so that the page shows the code that
is tested, and fitted against EM written in plain numpy from the same
initialisation.  A family or an emission model that lacks a required hook
cannot be instantiated, and the error names the hook.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.special import logsumexp
from sklearn.base import clone

from skseq.base import BaseEM
from skseq.hmm import BaseHMM

DOC = Path(__file__).resolve().parents[2] / "doc"
PAGE = DOC / "user_guide" / "architecture.rst"
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

HOOKS = (
    "_initialize_emissions",
    "_check_emission_parameters",
    "_emission_terms",
    "_emission_features",
    "_emission_mstep",
)


def page_example():
    """The namespace of the page's first Python block (the ExponentialHMM class)."""
    sys.path.insert(0, str(DOC))
    try:
        from check_snippets import code_blocks
    finally:
        sys.path.remove(str(DOC))
    block = code_blocks(PAGE.read_text(encoding="utf-8"))[0]
    namespace = {"__name__": "architecture_example"}
    exec(compile(block, str(PAGE), "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def ExponentialHMM():
    return page_example()["ExponentialHMM"]


def two_regimes(rng, lengths, rates):
    """Rows of sequences that switch between two exponential regimes."""
    states = np.concatenate([np.repeat(rng.integers(0, 2, size=n // 25), 25) for n in lengths])
    return rng.exponential(1.0 / rates[states]), states


def numpy_em(X, lengths, startprob, transmat, rates, n_iter):
    """Baum-Welch for exponential emissions in log space, one sequence at a time.

    Returns the log-likelihood of each E step (before its M step) and the
    parameters after the last M step: M(startprob) = sum of gamma_0,
    M(transmat) = sum of xi (normalised rows; the Dirichlet priors of 1 add
    nothing), rates = sum_t gamma_t(j) / sum_t gamma_t(j) x_t.
    """
    history = []
    for _ in range(n_iter):
        log_frame = np.log(rates).sum(axis=1) - X @ rates.T
        start_counts = np.zeros_like(startprob)
        transition_counts = np.zeros_like(transmat)
        occupancy = np.zeros(len(startprob))
        weighted_sum = np.zeros_like(rates)
        total = 0.0
        first = 0
        for length in lengths:
            frame = log_frame[first : first + length]
            alpha = np.empty_like(frame)
            beta = np.zeros_like(frame)
            alpha[0] = np.log(startprob) + frame[0]
            for t in range(1, length):
                alpha[t] = logsumexp(alpha[t - 1][:, None] + np.log(transmat), axis=0) + frame[t]
            for t in range(length - 2, -1, -1):
                beta[t] = logsumexp(np.log(transmat) + frame[t + 1] + beta[t + 1], axis=1)
            log_likelihood = logsumexp(alpha[-1])
            gamma = np.exp(alpha + beta - log_likelihood)
            xi = np.exp(
                alpha[:-1, :, None]
                + np.log(transmat)
                + (frame[1:] + beta[1:])[:, None, :]
                - log_likelihood
            )
            start_counts += gamma[0]
            transition_counts += xi.sum(axis=0)
            occupancy += gamma.sum(axis=0)
            weighted_sum += gamma.T @ X[first : first + length]
            total += log_likelihood
            first += length
        history.append(total)
        startprob = start_counts / start_counts.sum()
        transmat = transition_counts / transition_counts.sum(axis=1, keepdims=True)
        rates = occupancy[:, None] / weighted_sum
    return np.array(history), startprob, transmat, rates


def test_the_page_example_fits_as_plain_numpy_em(ExponentialHMM):
    rng = np.random.default_rng(0)
    lengths = [200, 150, 250]
    X, _ = two_regimes(rng, lengths, np.array([[1.0, 1.5], [2.0, 0.8]]))
    startprob = np.array([0.6, 0.4])
    transmat = np.array([[0.9, 0.1], [0.2, 0.8]])
    rates = np.array([[2.0, 2.0], [5.0, 1.0]])
    n_iter = 12

    model = ExponentialHMM(2, params="str", init_params="", n_iter=n_iter, tol=-np.inf)
    model.startprob_, model.transmat_, model.rates_ = startprob, transmat, rates
    model.fit(X, lengths=lengths)

    history, *expected = numpy_em(X, lengths, startprob, transmat, rates, n_iter)
    assert len(model.monitor_.history) == n_iter
    np.testing.assert_allclose(model.monitor_.history, history, rtol=1e-10, atol=0)
    assert np.all(np.diff(history) > 1e-3)  # EM still climbs: not a comparison of constants
    for name, value in zip(("startprob_", "transmat_", "rates_"), expected):
        np.testing.assert_allclose(getattr(model, name), value, rtol=1e-10, atol=1e-14)
    assert model.score(X, lengths=lengths) >= history[-1]
    # the defaults of the contract: every entry of rates_ is free
    assert model._n_parameters() == 1 + 2 + rates.size


def test_the_page_example_streams_exactly_with_the_default_statistics(ExponentialHMM):
    """At fixed parameters, forward-only smoothing over chunks (the features summed
    by the stream) adds up to the batch E step's statistics (the default
    _emission_statistics from the posteriors and the same features)."""
    rng = np.random.default_rng(1)
    X, _ = two_regimes(rng, [300], np.array([[1.0], [6.0]]))
    model = ExponentialHMM(2, params="str", init_params="str", n_iter=3, random_state=0).fit(X)
    batch, batch_log_likelihood = model._estep(X, np.array([0, len(X)]))
    carried, streamed, log_likelihood = None, None, 0.0
    for chunk in np.array_split(X, 4):
        added, chunk_log_likelihood, carried = model._advance_stream(chunk, carried)
        streamed = added if streamed is None else streamed + added
        log_likelihood += chunk_log_likelihood
    assert sorted(batch) == ["feature_sums", "start", "trans"]
    for key in batch:
        np.testing.assert_allclose(streamed[key], batch[key], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(log_likelihood, batch_log_likelihood, rtol=1e-12)


def test_the_page_example_refuses_what_it_cannot_model(ExponentialHMM):
    model = ExponentialHMM(2, params="str", init_params="str", random_state=0)
    model.fit(np.random.default_rng(2).exponential(size=(60, 1)))
    with pytest.raises(ValueError, match="probability zero"):
        model.predict(np.array([[0.5], [-1.0]]))
    with pytest.raises(NotImplementedError, match="defines no _sample_emissions"):
        model.sample(5)
    model.rates_ = [[1.0], [-2.0]]
    with pytest.raises(ValueError, match="rates_ must be positive"):
        model.score(np.ones((3, 1)))
    clone(model)  # a scikit-learn estimator like the others


@pytest.mark.parametrize("missing", HOOKS)
def test_an_emission_model_without_a_hook_cannot_be_instantiated(ExponentialHMM, missing):
    incomplete = type("Incomplete", (BaseHMM,), {
        name: getattr(ExponentialHMM, name) for name in HOOKS if name != missing
    })  # fmt: skip
    with pytest.raises(TypeError, match=rf"abstract class Incomplete .*{missing}"):
        incomplete(2)


def test_a_family_without_an_engine_hook_cannot_be_instantiated():
    hooks = set(BaseEM.__abstractmethods__)
    assert hooks == {
        "_initialize",
        "_estep",
        "_mstep",
        "_n_parameters",
        "_get_parameters",
        "_set_parameters",
        "_is_new_stream",
        "_validate_stream_batch",
        "_advance_stream",
        "_publish_stream",
    }
    assert set(BaseHMM.__abstractmethods__) == set(HOOKS)
    for name in hooks | set(HOOKS):
        assert getattr(BaseHMM if name in HOOKS else BaseEM, name).__doc__, name
    partial_family = type("PartialFamily", (BaseEM,), {"_initialize": lambda *args: None})
    with pytest.raises(TypeError, match=r"abstract class PartialFamily .*_advance_stream"):
        partial_family()
