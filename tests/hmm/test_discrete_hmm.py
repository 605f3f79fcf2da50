"""CategoricalHMM on several columns of symbols, and MultinomialHMM.

Exact values come from enumerating every state path of tiny models; one
column of symbols is checked against hmmlearn in tests/hmm/test_gaussian_hmm.py, the
multinomial model here (both skipped without hmmlearn).
"""

import itertools
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp
from scipy.stats import multinomial
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from skseq import CategoricalHMM, MultinomialHMM

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

# Two states, two columns: column 0 takes symbols 0..1, column 1 takes 0..2.
START = np.array([0.6, 0.4])
TRANSITIONS = np.array([[0.7, 0.3], [0.2, 0.8]])
EMISSIONS = np.array(
    [
        [[0.8, 0.2, 0.0], [0.1, 0.3, 0.6]],
        [[0.3, 0.7, 0.0], [0.5, 0.4, 0.1]],
    ]
)
X_TWO_COLUMNS = np.array([[0, 2], [1, 0], [1, 1], [0, 2], [1, 0], [0, 1]])


def fixed(model_class, X, **parameters):
    """A model holding exactly the given initial values (n_iter=0 fit)."""
    model = model_class(n_iter=0, **parameters)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(X)


def two_column_model(**parameters):
    return CategoricalHMM(
        2,
        startprob_init=START,
        transmat_init=TRANSITIONS,
        emissionprob_init=EMISSIONS,
        n_features=[2, 3],
        init_params="",
        **parameters,
    )


def enumerate_paths(start, transitions, emission_of_row):
    """p(X, path) for every path; ``emission_of_row[t, k]`` = p(x_t | z_t = k)."""
    n_rows, n_states = emission_of_row.shape
    for path in itertools.product(range(n_states), repeat=n_rows):
        p = start[path[0]] * emission_of_row[0, path[0]]
        for t in range(1, n_rows):
            p *= transitions[path[t - 1], path[t]] * emission_of_row[t, path[t]]
        yield path, p


# -- CategoricalHMM, several columns ------------------------------------------


def test_two_columns_match_enumeration_of_paths():
    X = X_TWO_COLUMNS
    n_rows = len(X)
    emission_of_row = EMISSIONS[:, 0, X[:, 0]].T * EMISSIONS[:, 1, X[:, 1]].T
    total, best, best_path = 0.0, 0.0, None
    marginals = np.zeros((n_rows, 2))
    start_counts, transition_counts = np.zeros(2), np.zeros((2, 2))
    for path, p in enumerate_paths(START, TRANSITIONS, emission_of_row):
        total += p
        marginals[np.arange(n_rows), path] += p
        start_counts[path[0]] += p
        for t in range(1, n_rows):
            transition_counts[path[t - 1], path[t]] += p
        if p > best:
            best, best_path = p, path
    marginals /= total
    start_counts /= total
    transition_counts /= total

    model = fixed(two_column_model, X)
    assert model.n_symbols_.tolist() == [2, 3]
    np.testing.assert_allclose(model.score(X), np.log(total), rtol=1e-12)
    np.testing.assert_allclose(model.predict_proba(X), marginals, rtol=1e-10)
    log_prob, states = model.decode(X)
    np.testing.assert_allclose(log_prob, np.log(best), rtol=1e-12)
    np.testing.assert_array_equal(states, best_path)
    # Free parameters: 1 start + 2 transitions + 2 x ((2 - 1) + (3 - 1)) emissions.
    np.testing.assert_allclose(model.bic(X), -2 * np.log(total) + 9 * np.log(n_rows))
    np.testing.assert_allclose(model.aic(X), -2 * np.log(total) + 2 * 9)

    # One EM step under a Dirichlet prior of 1.5: pseudo-count 0.5 on every
    # symbol of a column's alphabet, none beyond it.
    stepped = two_column_model(n_iter=1, emissionprob_prior=1.5).fit(X)
    np.testing.assert_allclose(stepped.monitor_.history[0], np.log(total), rtol=1e-12)
    np.testing.assert_allclose(stepped.startprob_, start_counts, rtol=1e-10)
    np.testing.assert_allclose(
        stepped.transmat_, transition_counts / transition_counts.sum(1, keepdims=True), rtol=1e-10
    )
    for column, n_symbols in enumerate([2, 3]):
        counts = marginals.T @ np.eye(n_symbols)[X[:, column]] + 0.5
        expected = counts / counts.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(
            stepped.emissionprob_[:, column, :n_symbols], expected, rtol=1e-10
        )
        assert np.all(stepped.emissionprob_[:, column, n_symbols:] == 0)


def test_columns_are_independent_given_the_state():
    """Two columns equal one column of pair symbols with the product probabilities."""
    rng = np.random.default_rng(0)
    lengths = [70, 1, 129]
    X = np.column_stack([rng.integers(0, 2, 200), rng.integers(0, 3, 200)])
    model = fixed(two_column_model, X)
    pairs = (X[:, 0] * 3 + X[:, 1])[:, None]
    product = (EMISSIONS[:, 0, :2, None] * EMISSIONS[:, 1, None, :]).reshape(2, 6)
    joint = fixed(
        CategoricalHMM,
        pairs,
        n_components=2,
        startprob_init=START,
        transmat_init=TRANSITIONS,
        emissionprob_init=product,
    )
    np.testing.assert_allclose(
        model.score_sequences(X, lengths=lengths),
        joint.score_sequences(pairs, lengths=lengths),
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        model.predict_proba(X, lengths=lengths),
        joint.predict_proba(pairs, lengths=lengths),
        rtol=1e-10,
        atol=1e-14,
    )


def test_several_columns_sample_and_recover_their_parameters():
    truth = fixed(two_column_model, X_TWO_COLUMNS)
    X, states = truth.sample(6000, random_state=0)
    assert X.shape == (6000, 2)
    assert X[:, 0].max() <= 1 and X[:, 1].max() <= 2
    for state in range(2):
        for column in range(2):
            frequencies = np.bincount(X[states == state, column], minlength=3) / np.sum(
                states == state
            )
            np.testing.assert_allclose(frequencies, EMISSIONS[state, column], atol=0.03)
    model = CategoricalHMM(2, n_iter=100, tol=1e-6, random_state=0, n_init=2).fit(X)
    assert model.n_symbols_.tolist() == [2, 3]
    order = np.argsort(model.emissionprob_[:, 0, 0])[::-1]  # state 0 emits more 0s
    np.testing.assert_allclose(model.emissionprob_[order], EMISSIONS, atol=0.06)
    np.testing.assert_allclose(model.transmat_[np.ix_(order, order)], TRANSITIONS, atol=0.06)
    assert model.score(X) >= truth.score(X) - 1.0


def test_several_columns_alphabets_are_learned_per_column():
    X = np.array([[0, 0, 4], [1, 1, 0], [0, 1, 2]])
    model = CategoricalHMM(2, random_state=0, n_iter=3).fit(X)
    assert model.n_symbols_.tolist() == [2, 2, 5]
    assert model.emissionprob_.shape == (2, 3, 5)
    np.testing.assert_allclose(model.emissionprob_.sum(axis=2), 1.0)
    assert np.all(model.emissionprob_[:, :2, 2:] == 0)
    # One int n_features: the same alphabet for every column.
    wide = CategoricalHMM(2, n_features=6, random_state=0, n_iter=3).fit(X)
    assert wide.n_symbols_.tolist() == [6, 6, 6]
    assert wide.score(np.array([[5, 0, 0]])) == -np.inf  # never seen: probability zero
    smoothed = clone(wide).set_params(emissionprob_prior=2.0).fit(X)
    assert np.isfinite(smoothed.score(np.array([[5, 0, 0]])))
    np.testing.assert_allclose(
        CategoricalHMM(2, n_features=[2, 2, 5], random_state=0, n_iter=3).fit(X).emissionprob_,
        model.emissionprob_,
    )


def test_unknown_symbols_name_their_column():
    model = fixed(two_column_model, X_TWO_COLUMNS)
    with pytest.raises(ValueError, match="symbol 2 in column 0, outside the alphabet 0..1"):
        model.predict(np.array([[0, 1], [2, 1]]))
    with pytest.raises(ValueError, match="symbol 3 in column 1, outside the alphabet 0..2"):
        model.score(np.array([[0, 3]]))
    with pytest.raises(ValueError, match="in column 1, outside the alphabet"):
        model.partial_fit(np.array([[0, 0], [1, 5]]))
    with pytest.raises(ValueError, match="symbol 2 in column 0"):
        CategoricalHMM(2, n_features=[2, 3]).fit(np.array([[2, 0], [0, 1]]))
    with pytest.raises(ValueError, match="in column 1"):
        CategoricalHMM(2, n_features=2).fit(np.array([[1, 0], [0, 2]]))


@pytest.mark.parametrize(
    "parameters,X,error,message",
    [
        ({"n_features": [2, 3, 4]}, X_TWO_COLUMNS, ValueError, "3 alphabet sizes for 2 column"),
        ({"n_features": [2.0, 3.0]}, X_TWO_COLUMNS, TypeError, "n_features must be an integer"),
        ({"n_features": 0}, X_TWO_COLUMNS, ValueError, "n_features must be >= 1"),
        ({"n_features": True}, X_TWO_COLUMNS, TypeError, "n_features"),
        (
            {"emissionprob_init": EMISSIONS[:, 0]},
            X_TWO_COLUMNS,
            ValueError,
            r"shape \(n_components, 2, n_symbols\)",
        ),
        ({"emissionprob_init": EMISSIONS}, X_TWO_COLUMNS[:, :1], ValueError, "one column"),
        (
            {"emissionprob_init": np.full((2, 2, 3), 1 / 3), "n_features": [2, 3]},
            X_TWO_COLUMNS,
            ValueError,
            "beyond the alphabet 0..1 of column 0",
        ),
        (
            {"emissionprob_init": EMISSIONS, "n_features": [2, 2]},
            X_TWO_COLUMNS,
            ValueError,
            "3 symbols per column but n_features",
        ),
    ],
)
def test_bad_alphabets_and_tables(parameters, X, error, message):
    copy = X.copy()
    with pytest.raises(error, match=message):
        CategoricalHMM(2, n_iter=1, **parameters).fit(X)
    np.testing.assert_array_equal(X, copy)


def test_hand_set_tables_of_several_columns():
    """hmmlearn style: parameters assigned, then used without fit."""
    model = CategoricalHMM(2, n_features=[2, 3])
    model.startprob_, model.transmat_ = START.copy(), TRANSITIONS.copy()
    model.emissionprob_ = EMISSIONS.copy()
    reference = fixed(two_column_model, X_TWO_COLUMNS)
    np.testing.assert_allclose(model.score(X_TWO_COLUMNS), reference.score(X_TWO_COLUMNS))
    assert model._n_parameters() == reference._n_parameters() == 9
    X, _ = model.sample(50, random_state=0)
    assert X.shape == (50, 2) and X[:, 0].max() <= 1
    with pytest.raises(ValueError, match="symbol 2 in column 0"):
        model.score(np.array([[2, 0]]))
    model.emissionprob_[0, 0] = [0.5, 0.3, 0.2]  # probability beyond column 0's alphabet
    with pytest.raises(ValueError, match="beyond the alphabet 0..1 of column 0"):
        model.score(X_TWO_COLUMNS)
    with pytest.raises(ValueError, match="for one column of symbols"):
        model.score(X_TWO_COLUMNS[:, :1].copy())
    with pytest.raises(ValueError, match="X has 1 features"):
        reference.score(X_TWO_COLUMNS[:, :1].copy())
    # Without n_features (or a fit) a table's alphabet is its width: the zeros
    # are symbols of probability zero, and free parameters of the model.
    model.set_params(n_features=None).emissionprob_ = EMISSIONS.copy()
    assert model._n_parameters() == 1 + 2 + 2 * (2 + 2)
    assert model.score(np.array([[2, 0]])) == -np.inf


def test_hand_set_table_narrower_than_the_fitted_alphabet_raises():
    """Regression: a fitted model given a narrower emissionprob_ by hand indexed
    past its end (IndexError) instead of saying what disagrees."""
    model = CategoricalHMM(2, random_state=0, n_iter=2).fit(np.array([[0], [1], [2], [1]]))
    model.emissionprob_ = np.array([[0.5, 0.5], [0.9, 0.1]])
    with pytest.raises(ValueError, match="set n_symbols_ too"):
        model.predict(np.array([[0], [2]]))
    model.n_symbols_ = 2
    with pytest.raises(ValueError, match="outside the alphabet 0..1"):
        model.predict(np.array([[0], [2]]))
    assert model.predict(np.array([[0], [1]])).shape == (2,)


def test_one_column_as_a_three_dimensional_table():
    """(n_components, 1, n_symbols) is the same model as hmmlearn's 2-D table."""
    X = np.array([[0], [1], [2], [1], [0], [2], [2]])
    flat = fixed(CategoricalHMM, X, n_components=2, emissionprob_init=EMISSIONS[:, 1])
    deep = fixed(CategoricalHMM, X, n_components=2, emissionprob_init=EMISSIONS[:, 1:])
    assert flat.emissionprob_.shape == deep.emissionprob_.shape == (2, 3)
    assert flat.n_symbols_ == deep.n_symbols_ == 3
    np.testing.assert_allclose(deep.score(X), flat.score(X), rtol=1e-12)


def test_several_columns_partial_fit_step_equals_one_em_step():
    rng = np.random.default_rng(1)
    X = np.column_stack([rng.integers(0, 2, 300), rng.integers(0, 3, 300)])
    lengths = [100, 120, 80]
    batch = two_column_model(n_iter=1).fit(X, lengths=lengths)
    online = two_column_model(learning_offset=0.0).partial_fit(X, lengths=lengths)  # rho = 1
    for name in ("startprob_", "transmat_", "emissionprob_"):
        np.testing.assert_allclose(getattr(online, name), getattr(batch, name), rtol=1e-10)
    assert online.n_symbols_.tolist() == [2, 3]


@settings(max_examples=25, deadline=None)
@given(
    n_columns=st.integers(1, 3),
    n_rows=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_categorical_score_is_the_log_of_the_summed_path_probabilities(n_columns, n_rows, seed):
    """Any tiny model, any columns: score = log sum over paths, posteriors normalised."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 4, n_columns)
    width = sizes.max()
    table = np.zeros((2, n_columns, width))
    for column, size in enumerate(sizes):
        table[:, column, :size] = rng.dirichlet(np.ones(size), size=2)
    X = np.column_stack([rng.integers(0, size, n_rows) for size in sizes])
    model = fixed(
        CategoricalHMM,
        X,
        n_components=2,
        startprob_init=START,
        transmat_init=TRANSITIONS,
        emissionprob_init=table if n_columns > 1 else table[:, 0],
        n_features=sizes.tolist(),
    )
    log_emission = np.log(table[:, np.arange(n_columns), X]).sum(axis=2).T  # (n_rows, 2)
    log_paths = [
        np.log(START[path[0]])
        + sum(np.log(TRANSITIONS[a, b]) for a, b in zip(path, path[1:]))
        + log_emission[np.arange(n_rows), path].sum()
        for path in itertools.product(range(2), repeat=n_rows)
    ]
    np.testing.assert_allclose(model.score(X), logsumexp(log_paths), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(model.predict_proba(X).sum(axis=1), 1.0, rtol=1e-12)


# -- MultinomialHMM ------------------------------------------------------------

MULTINOMIAL_EMISSIONS = np.array([[0.7, 0.2, 0.1, 0.0], [0.1, 0.2, 0.3, 0.4]])


def multinomial_model(**parameters):
    return MultinomialHMM(
        2,
        startprob_init=START,
        transmat_init=TRANSITIONS,
        emissionprob_init=MULTINOMIAL_EMISSIONS,
        init_params="",
        **parameters,
    )


def test_multinomial_log_pmf_matches_scipy():
    rng = np.random.default_rng(2)
    totals = rng.integers(0, 12, 40)
    X = np.stack([rng.multinomial(n, [0.4, 0.3, 0.2, 0.1]) for n in totals])
    model = fixed(multinomial_model, X)
    expected = np.stack([multinomial.logpmf(X, totals, p) for p in MULTINOMIAL_EMISSIONS], 1)
    got = model._compute_log_likelihood(X.astype(np.float64))
    # A count in the category of probability zero is impossible for state 0.
    assert np.array_equal(got[:, 0] == -np.inf, X[:, 3] > 0)
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_multinomial_matches_enumeration_of_paths():
    X = np.array([[3, 1, 0, 0], [0, 1, 1, 2], [1, 0, 2, 1], [2, 2, 0, 0], [0, 0, 1, 3]])
    model = fixed(multinomial_model, X, n_trials=4)
    emission_of_row = np.stack([multinomial.pmf(X, 4, p) for p in MULTINOMIAL_EMISSIONS], 1)
    total = 0.0
    marginals = np.zeros((5, 2))
    for path, p in enumerate_paths(START, TRANSITIONS, emission_of_row):
        total += p
        marginals[np.arange(5), path] += p
    marginals /= total
    np.testing.assert_allclose(model.score(X), np.log(total), rtol=1e-12)
    np.testing.assert_allclose(model.predict_proba(X), marginals, rtol=1e-10)
    stepped = multinomial_model(n_iter=1, n_trials=4).fit(X)
    counts = marginals.T @ X
    np.testing.assert_allclose(
        stepped.emissionprob_, counts / counts.sum(axis=1, keepdims=True), rtol=1e-10
    )
    # Free parameters: 1 start + 2 transitions + 2 x (4 - 1) emissions.
    np.testing.assert_allclose(model.bic(X), -2 * np.log(total) + 9 * np.log(5))


def test_multinomial_one_em_step_equals_hmmlearn():
    hmm = pytest.importorskip("hmmlearn.hmm")
    rng = np.random.default_rng(3)
    parameters = {
        "startprob_": rng.dirichlet(np.ones(3)),
        "transmat_": rng.dirichlet(np.ones(3), size=3),
        "emissionprob_": rng.dirichlet(np.ones(4), size=3),
    }
    X = np.concatenate(
        [
            rng.multinomial(10, p, size=n)
            for p, n in zip(parameters["emissionprob_"], [90, 110, 100])
        ]
    )
    lengths = [100, 150, 50]
    models = []
    for cls in (hmm.MultinomialHMM, MultinomialHMM):
        model = cls(3, n_trials=10, n_iter=1, init_params="", transmat_prior=2.0)
        for name, value in parameters.items():
            setattr(model, name, value.copy())
        models.append(model.fit(X, lengths=lengths))
    theirs, ours = models
    np.testing.assert_allclose(ours.monitor_.history[0], theirs.monitor_.history[0], rtol=1e-10)
    for name in parameters:
        np.testing.assert_allclose(getattr(ours, name), getattr(theirs, name), rtol=1e-8)
    np.testing.assert_allclose(
        ours.score(X, lengths=lengths), theirs.score(X, lengths=lengths), rtol=1e-8
    )
    np.testing.assert_allclose(ours.bic(X, lengths=lengths), theirs.bic(X, lengths=lengths))
    np.testing.assert_allclose(
        ours.decode(X, lengths=lengths)[0], theirs.decode(X, lengths=lengths)[0], rtol=1e-10
    )
    _, their_posteriors = theirs.score_samples(X, lengths=lengths)
    np.testing.assert_allclose(ours.predict_proba(X, lengths=lengths), their_posteriors, atol=1e-9)
    assert ours.n_features == theirs.n_features == 4


def test_multinomial_with_one_trial_is_the_categorical_model():
    """hmmlearn's pre-0.2.8 MultinomialHMM: one-hot rows of one trial = symbols."""
    rng = np.random.default_rng(4)
    symbols = rng.integers(0, 4, (150, 1))
    one_hot = np.eye(4, dtype=int)[symbols[:, 0]]
    common = dict(
        startprob_init=START,
        transmat_init=TRANSITIONS,
        emissionprob_init=(MULTINOMIAL_EMISSIONS + 0.05) / 1.2,
        emissionprob_prior=1.3,
        n_iter=3,
        tol=-np.inf,
    )
    categorical = CategoricalHMM(2, **common).fit(symbols, lengths=[50, 100])
    counts = MultinomialHMM(2, n_trials=1, **common).fit(one_hot, lengths=[50, 100])
    np.testing.assert_allclose(counts.monitor_.history, categorical.monitor_.history, rtol=1e-12)
    np.testing.assert_allclose(counts.emissionprob_, categorical.emissionprob_, rtol=1e-10)
    np.testing.assert_allclose(counts.transmat_, categorical.transmat_, rtol=1e-10)


def test_multinomial_sample_and_recover():
    truth = fixed(multinomial_model, np.array([[5, 0, 0, 0]]), n_trials=5)
    X, states = truth.sample(4000, random_state=0)
    assert X.shape == (4000, 4) and np.issubdtype(X.dtype, np.integer)
    np.testing.assert_array_equal(X.sum(axis=1), 5)
    assert np.all(X[states == 0, 3] == 0)  # probability zero in state 0
    for state in range(2):
        np.testing.assert_allclose(
            X[states == state].mean(axis=0), 5 * MULTINOMIAL_EMISSIONS[state], atol=0.1
        )
    model = MultinomialHMM(2, n_trials=5, n_iter=100, tol=1e-6, random_state=0).fit(X)
    order = np.argsort(model.emissionprob_[:, 0])[::-1]
    np.testing.assert_allclose(model.emissionprob_[order], MULTINOMIAL_EMISSIONS, atol=0.03)
    np.testing.assert_allclose(model.transmat_[np.ix_(order, order)], TRANSITIONS, atol=0.05)
    # The per-row array form with one value samples too; several values cannot.
    model.set_params(n_trials=np.full(4000, 5))
    assert model.sample(3, random_state=1)[0].sum(axis=1).tolist() == [5, 5, 5]
    for n_trials in (None, [4, 5]):
        with pytest.raises(ValueError, match="set n_trials to one number"):
            model.set_params(n_trials=n_trials).sample(3)


def test_multinomial_rows_of_other_totals():
    rng = np.random.default_rng(5)
    totals = rng.integers(1, 9, 60)
    totals[0] = 7
    X = np.stack([rng.multinomial(n, [0.5, 0.3, 0.2]) for n in totals])
    # Without n_trials every row is its own number of trials; with it, the rows
    # learned from must sum to it, but any rows are scored (hmmlearn's rule).
    model = MultinomialHMM(2, random_state=0).fit(X)
    fixed_trials = MultinomialHMM(2, n_trials=4, random_state=0)
    with pytest.raises(ValueError, match="row 0 sums to 7, not 4"):
        fixed_trials.fit(X)
    assert not hasattr(fixed_trials, "startprob_")  # rejected before any parameter was set
    four = rng.multinomial(4, [0.5, 0.3, 0.2], size=30)
    fixed_trials.fit(four)
    free_trials = clone(fixed_trials).set_params(n_trials=None, n_iter=0)
    for name in ("startprob_", "transmat_", "emissionprob_"):
        setattr(free_trials, name, getattr(fixed_trials, name))
    assert np.isfinite(fixed_trials.score(X))
    np.testing.assert_allclose(fixed_trials.score(X), free_trials.score(X), rtol=1e-12)
    with pytest.raises(ValueError, match="row 1 sums to 5, not 4"):
        fixed_trials.partial_fit(np.array([[1, 1, 2], [5, 0, 0]]))
    per_row = MultinomialHMM(2, n_trials=X.sum(axis=1), random_state=0).fit(X)
    np.testing.assert_allclose(per_row.emissionprob_, model.emissionprob_)
    with pytest.raises(ValueError, match="n_trials has 60 entries but X has 59 rows"):
        clone(per_row).fit(X[1:])
    wrong = X.sum(axis=1)
    wrong[7] += 1
    with pytest.raises(ValueError, match="row 7 sums to"):
        clone(per_row).set_params(n_trials=wrong).fit(X)


@pytest.mark.parametrize(
    "parameters,X,error,message",
    [
        ({"n_trials": 2.5}, [[1, 1]], TypeError, "n_trials must be None, an integer"),
        ({"n_trials": True}, [[1, 0]], TypeError, "n_trials"),
        ({"n_trials": -1}, [[1, 0]], ValueError, "non-negative"),
        ({"n_trials": [[1]]}, [[1, 0]], TypeError, "1-D"),
        ({}, [[1.5, 0.5]], ValueError, "non-integer"),
        ({}, [[-1, 2]], ValueError, "Negative"),
        ({}, [[np.nan, 2]], ValueError, "NaN"),
        ({"emissionprob_init": [[0.5, 0.5, 0.0]] * 2}, [[1, 1]], ValueError, "shape"),
        ({"emissionprob_init": [[0.5, 0.6], [0.5, 0.5]]}, [[1, 1]], ValueError, "sum to 1"),
    ],
)
def test_multinomial_bad_input(parameters, X, error, message):
    X = np.array(X, dtype=np.float64)
    copy = X.copy()
    with pytest.raises(error, match=message):
        MultinomialHMM(2, **parameters).fit(X)
    np.testing.assert_array_equal(X, copy)


def test_multinomial_partial_fit_step_equals_one_em_step():
    rng = np.random.default_rng(6)
    X = rng.multinomial(6, [0.3, 0.3, 0.2, 0.2], size=300)
    lengths = [100, 120, 80]
    batch = multinomial_model(n_iter=1).fit(X, lengths=lengths)
    online = multinomial_model(learning_offset=0.0).partial_fit(X, lengths=lengths)
    for name in ("startprob_", "transmat_", "emissionprob_"):
        np.testing.assert_allclose(getattr(online, name), getattr(batch, name), rtol=1e-10)
    with pytest.raises(ValueError, match="features"):
        online.score(X[:, :3])
