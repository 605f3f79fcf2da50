"""One-step predictions of the HMMs: predict_next_proba and predict_next_state_proba.

Exact values come from enumerating every state path of tiny models
(p(x_{t+1} | x_1..x_t) = p(x_1..x_{t+1}) / p(x_1..x_t)); hmmlearn, which has
no one-step predictor, gives the same ratio through its ``score`` of
prefixes (skipped without hmmlearn).
"""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm
from sklearn.exceptions import NotFittedError

from skseq import GMMHMM, CategoricalHMM, GaussianHMM, MultinomialHMM, PoissonHMM


def hand_set(model_class, startprob, transmat, **emissions):
    model = model_class(n_components=len(startprob))
    model.startprob_ = startprob
    model.transmat_ = transmat
    for name, value in emissions.items():
        setattr(model, name, value)
    return model


def random_categorical(rng, n_states, n_symbols, sparse=False):
    transmat = rng.dirichlet(np.ones(n_states), size=n_states)
    if sparse:  # a forbidden transition: the predictions must keep its zero
        transmat[0, -1] = 0.0
        transmat[0] /= transmat[0].sum()
    return hand_set(
        CategoricalHMM,
        rng.dirichlet(np.ones(n_states)),
        transmat,
        emissionprob_=rng.dirichlet(np.ones(n_symbols), size=n_states),
    )


def joint_probability(startprob, transmat, emission_of_row):
    """p(x_1..x_T) by enumerating every path; ``emission_of_row[t, j]`` = p(x_t | z_t = j)."""
    n_rows, n_states = emission_of_row.shape
    total = 0.0
    for path in itertools.product(range(n_states), repeat=n_rows):
        p = startprob[path[0]] * emission_of_row[0, path[0]]
        for t in range(1, n_rows):
            p *= transmat[path[t - 1], path[t]] * emission_of_row[t, path[t]]
        total += p
    return total


def enumerated_next_symbol(model, symbols):
    """p(x_{t+1} = v | x_1..x_t) for every row t and symbol v, by enumeration."""
    table = np.asarray(model.emissionprob_)
    expected = np.empty((len(symbols), table.shape[1]))
    for t in range(len(symbols)):
        prefix = table[:, symbols[: t + 1]].T
        evidence = joint_probability(model.startprob_, model.transmat_, prefix)
        for v in range(table.shape[1]):
            extended = np.vstack([prefix, table[:, v]])
            expected[t, v] = joint_probability(model.startprob_, model.transmat_, extended)
        expected[t] /= evidence
    return expected


@pytest.mark.parametrize("n_states,n_symbols,sparse", [(1, 3, False), (2, 2, False), (3, 4, True)])
def test_predict_next_proba_matches_enumeration(n_states, n_symbols, sparse):
    rng = np.random.default_rng(10 * n_states + n_symbols)
    model = random_categorical(rng, n_states, n_symbols, sparse)
    symbols = rng.integers(0, n_symbols, size=6)
    got = model.predict_next_proba(symbols[:, None])
    np.testing.assert_allclose(got, enumerated_next_symbol(model, symbols), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-12)


def test_each_sequence_is_predicted_from_its_own_rows():
    rng = np.random.default_rng(5)
    model = random_categorical(rng, 3, 3)
    symbols = rng.integers(0, 3, size=9)
    lengths = [4, 1, 4]
    got = model.predict_next_proba(symbols[:, None], lengths=lengths)
    bounds = np.cumsum([0, *lengths])
    for start, stop in zip(bounds[:-1], bounds[1:]):
        np.testing.assert_allclose(
            got[start:stop], enumerated_next_symbol(model, symbols[start:stop]), rtol=1e-10
        )
    # sequence_ids split the rows as lengths do.
    ids = np.repeat([7, 3, 9], lengths)
    np.testing.assert_array_equal(model.predict_next_proba(symbols[:, None], sequence_ids=ids), got)


def test_the_first_row_predicts_the_second_symbol():
    # A deterministic alternation 0, 1, 0, ...: seeing symbol 0 makes 1 certain next.
    model = hand_set(
        CategoricalHMM,
        [0.5, 0.5],
        [[0.0, 1.0], [1.0, 0.0]],
        emissionprob_=[[1.0, 0.0], [0.0, 1.0]],
    )
    np.testing.assert_array_equal(model.predict_next_proba([[1], [0]]), [[1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_array_equal(model.predict_next_state_proba([[1]]), [[1.0, 0.0]])


def test_two_columns_give_each_columns_marginal():
    startprob = np.array([0.6, 0.4])
    transmat = np.array([[0.7, 0.3], [0.2, 0.8]])
    emissions = np.array([[[0.8, 0.2, 0.0], [0.1, 0.3, 0.6]], [[0.3, 0.7, 0.0], [0.5, 0.4, 0.1]]])
    model = CategoricalHMM(2, n_features=[2, 3])
    model.startprob_, model.transmat_, model.emissionprob_ = startprob, transmat, emissions
    model.n_symbols_ = np.array([2, 3])
    X = np.array([[0, 2], [1, 0], [1, 1], [0, 2]])
    got = model.predict_next_proba(X)
    assert got.shape == (4, 2, 3)
    for t in range(len(X)):
        prefix = emissions[:, 0, X[: t + 1, 0]].T * emissions[:, 1, X[: t + 1, 1]].T
        evidence = joint_probability(startprob, transmat, prefix)
        for f in range(2):
            for v in range(3):
                # The next row's other column sums out: only column f's factor remains.
                extended = np.vstack([prefix, emissions[:, f, v]])
                expected = joint_probability(startprob, transmat, extended) / evidence
                np.testing.assert_allclose(got[t, f, v], expected, rtol=1e-10, atol=1e-15)
    np.testing.assert_array_equal(got[:, 0, 2], 0.0)  # beyond column 0's alphabet


def test_predict_next_state_proba_is_the_filter_times_the_transitions_for_gaussians():
    rng = np.random.default_rng(2)
    startprob = np.array([0.5, 0.3, 0.2])
    transmat = rng.dirichlet(np.ones(3), size=3)
    means, sds = np.array([[-1.0], [0.5], [2.0]]), np.array([0.7, 1.0, 0.5])
    model = hand_set(GaussianHMM, startprob, transmat, means_=means, covars_=sds[:, None] ** 2)
    X = rng.normal(size=(5, 1))
    got = model.predict_next_state_proba(X)
    density = norm.pdf(X, loc=means[:, 0], scale=sds)  # (rows, states)
    for t in range(len(X)):
        evidence = joint_probability(startprob, transmat, density[: t + 1])
        for j in range(3):
            # p(z_{t+1} = j, x_1..x_t): paths of length t + 2 with a unit emission at t + 1,
            # only state j allowed there.
            indicator = np.zeros((1, 3))
            indicator[0, j] = 1.0
            extended = np.vstack([density[: t + 1], indicator])
            expected = joint_probability(startprob, transmat, extended) / evidence
            np.testing.assert_allclose(got[t, j], expected, rtol=1e-9)
    # The predictive density it implies is the ratio of the likelihoods of prefixes.
    for t in range(len(X) - 1):
        predictive = got[t] @ density[t + 1]
        ratio = np.exp(model.score(X[: t + 2]) - model.score(X[: t + 1]))
        np.testing.assert_allclose(predictive, ratio, rtol=1e-9)


def enumerated_next_state(model, X):
    """p(z_{t+1} = j | x_1..x_t) for every row t and state j, by enumeration."""
    density = np.exp(model._compute_log_likelihood(X))
    n_states = model.n_components
    expected = np.empty((len(X), n_states))
    for t in range(len(X)):
        evidence = joint_probability(model.startprob_, model.transmat_, density[: t + 1])
        for j in range(n_states):
            # A unit emission at step t + 1 allowed only in state j.
            indicator = np.zeros((1, n_states))
            indicator[0, j] = 1.0
            extended = np.vstack([density[: t + 1], indicator])
            expected[t, j] = joint_probability(model.startprob_, model.transmat_, extended)
        expected[t] /= evidence
    return expected


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize(
    "model,data",
    [
        (PoissonHMM(2, n_iter=3, random_state=0), "counts"),
        (MultinomialHMM(2, n_trials=6, n_iter=3, random_state=0), "trials"),
        (GMMHMM(2, n_mix=2, n_iter=3, random_state=0), "real"),
        (GaussianHMM(3, covariance_type="full", n_iter=3, random_state=0), "real"),
    ],
    ids=["poisson", "multinomial", "gmm", "gaussian-full"],
)
def test_predict_next_state_proba_matches_enumeration_for_every_emission_model(model, data):
    rng = np.random.default_rng(4)
    if data == "counts":
        X = rng.poisson(3.0, size=(60, 2))
    elif data == "trials":
        X = rng.multinomial(6, [0.2, 0.3, 0.5], size=60)
    else:
        X = rng.normal(size=(60, 2)) + np.repeat([[0.0, 0.0], [3.0, -2.0]], 30, axis=0)
    model.fit(X)
    got = model.predict_next_state_proba(X[:5])
    np.testing.assert_allclose(got, enumerated_next_state(model, X[:5]), rtol=1e-9, atol=1e-14)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_states=st.integers(1, 4),
    n_symbols=st.integers(2, 5),
    length=st.integers(2, 30),
)
def test_the_predictions_of_observed_symbols_add_up_to_the_log_likelihood(
    seed, n_states, n_symbols, length
):
    rng = np.random.default_rng(seed)
    model = random_categorical(rng, n_states, n_symbols)
    symbols = rng.integers(0, n_symbols, size=length)
    proba = model.predict_next_proba(symbols[:, None])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)
    first = np.log(model.startprob_ @ model.emissionprob_[:, symbols[0]])
    chained = first + np.log(proba[np.arange(length - 1), symbols[1:]]).sum()
    np.testing.assert_allclose(chained, model.score(symbols[:, None]), rtol=1e-10, atol=1e-10)


def test_agrees_with_the_ratio_of_hmmlearn_scores():
    hmm = pytest.importorskip("hmmlearn.hmm")
    rng = np.random.default_rng(8)
    model = random_categorical(rng, 3, 4)
    reference = hmm.CategoricalHMM(n_components=3, n_features=4)
    reference.startprob_ = model.startprob_
    reference.transmat_ = model.transmat_
    reference.emissionprob_ = model.emissionprob_
    symbols = rng.integers(0, 4, size=(8, 1))
    got = model.predict_next_proba(symbols)
    for t in range(len(symbols)):
        evidence = reference.score(symbols[: t + 1])
        for v in range(4):
            extended = np.vstack([symbols[: t + 1], [[v]]])
            expected = np.exp(reference.score(extended) - evidence)
            np.testing.assert_allclose(got[t, v], expected, rtol=1e-9)


def test_poisson_hmm_has_predictive_states_but_no_symbol_probabilities():
    model = hand_set(PoissonHMM, [0.5, 0.5], [[0.9, 0.1], [0.1, 0.9]], lambdas_=[[1.0], [6.0]])
    predicted = model.predict_next_state_proba([[0], [7], [8]])
    np.testing.assert_allclose(predicted.sum(axis=1), 1.0)
    assert predicted[2, 1] > 0.8
    assert not hasattr(model, "predict_next_proba")


# -- bad input ----------------------------------------------------------------


def test_unfitted_models_raise_not_fitted():
    with pytest.raises(NotFittedError):
        CategoricalHMM(2).predict_next_proba([[0], [1]])
    with pytest.raises(NotFittedError):
        GaussianHMM(2).predict_next_state_proba([[0.0], [1.0]])


@pytest.fixture
def alternating():
    return hand_set(
        CategoricalHMM,
        [1.0, 0.0],
        [[0.0, 1.0], [1.0, 0.0]],
        emissionprob_=[[0.9, 0.1, 0.0], [0.0, 0.1, 0.9]],
    )


@pytest.mark.parametrize(
    "X,kwargs,error,message",
    [
        ([[0], [3]], {}, ValueError, "symbol|alphabet|n_features|range"),
        ([[0], [-1]], {}, ValueError, "negative|symbol|non-negative"),
        ([[0.5], [1]], {}, ValueError, "integer"),
        ([[0], [np.inf]], {}, ValueError, "inf"),
        ([[0, 1], [1, 0]], {}, ValueError, "feature|column"),
        ([[0], [1], [0]], {"lengths": [2, 2]}, ValueError, "lengths"),
        ([[2], [2]], {}, ValueError, "probability zero"),
    ],
)
def test_bad_input_is_a_clear_error(alternating, X, kwargs, error, message):
    with pytest.raises(error, match=message):
        alternating.predict_next_proba(X, **kwargs)
    with pytest.raises(error, match=message):
        alternating.predict_next_state_proba(X, **kwargs)


def test_a_missing_symbol_is_predicted_through(alternating):
    """NaN is a missing symbol: the prediction after it moves the state
    distribution by the transitions alone."""
    predicted = alternating.predict_next_state_proba([[0], [np.nan]])
    np.testing.assert_allclose(predicted[1], predicted[0] @ alternating.transmat_)
    np.testing.assert_allclose(alternating.predict_next_proba([[0], [np.nan]]).sum(axis=1), 1.0)


def test_lengths_are_keyword_only(alternating):
    with pytest.raises(TypeError, match="lengths="):
        alternating.predict_next_proba([[0], [2]], [2])


def test_input_and_parameters_are_not_changed(alternating):
    X = np.array([[0], [2], [1]])
    before = X.copy(), alternating.transmat_.copy(), alternating.emissionprob_.copy()
    alternating.predict_next_proba(X)
    alternating.predict_next_state_proba(X)
    for array, original in zip((X, alternating.transmat_, alternating.emissionprob_), before):
        np.testing.assert_array_equal(array, original)
