"""Semi-supervised HMMs: fit(X, known_states=...) clamps the labelled rows.

Proofs: fully labelled rows give the supervised maximum-likelihood (and MAP)
estimates counted by hand, in one E step; the clamped E step equals the
enumeration of the state paths through the labels; every path of the E step
(scaled and log-space recursions, threads, checkpointed long sequences,
online EM, streams) clamps alike; partly labelled fits recover the true
parameters in the labels' order; impossible labels raise.
"""

import warnings

import numpy as np
import pytest
import sklearn
from hmm_references import brute_force_posteriors, left_right_underflow_frames
from scipy.stats import multivariate_normal
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer

from skseq import GMMHMM, CategoricalHMM, GaussianHMM, MultinomialHMM, PoissonHMM
from skseq.hmm._base import clamp_to_known_states
from skseq.inference import hmm_forward_backward

COVARIANCE_TYPES = ["spherical", "diag", "full", "tied"]

# Short fits of tiny data on purpose: their convergence and degeneracy
# warnings are not what these tests are about.
pytestmark = [
    pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning"),
    pytest.mark.filterwarnings("ignore:Fitting a model with"),
]


@pytest.fixture
def metadata_routing():
    sklearn.set_config(enable_metadata_routing=True)
    yield
    sklearn.set_config(enable_metadata_routing=False)


def true_gaussian_model(covariance_type="full"):
    model = GaussianHMM(3, covariance_type=covariance_type)
    model.startprob_ = [0.2, 0.5, 0.3]
    model.transmat_ = [[0.8, 0.1, 0.1], [0.15, 0.8, 0.05], [0.1, 0.2, 0.7]]
    # Deliberately not in sorted order: the labels, not the data, fix the order.
    model.means_ = [[2.0, 0.0], [-2.0, 1.0], [0.0, -2.0]]
    model.covars_ = {
        "spherical": [0.6, 0.8, 0.5],
        "diag": [[0.6, 0.4], [0.8, 0.5], [0.5, 0.7]],
        "full": [
            [[0.6, 0.2], [0.2, 0.5]],
            [[0.8, -0.1], [-0.1, 0.4]],
            [[0.5, 0.0], [0.0, 0.7]],
        ],
        "tied": [[0.6, 0.2], [0.2, 0.5]],
    }[covariance_type]
    return model


def sample_sequences(model, lengths, seed=0):
    pieces = [model.sample(n, random_state=seed + i) for i, n in enumerate(lengths)]
    return np.vstack([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces])


def hand_counted_transitions(Z, lengths, n_components):
    starts = np.zeros(n_components)
    transitions = np.zeros((n_components, n_components))
    first = 0
    for n in lengths:
        z = Z[first : first + n]
        starts[z[0]] += 1
        np.add.at(transitions, (z[:-1], z[1:]), 1)
        first += n
    return starts, transitions


def dirichlet_mode(counts, prior):
    counts = np.maximum(counts + prior - 1, 0)
    return counts / counts.sum(axis=-1, keepdims=True)


# -- fully labelled: the supervised estimates in closed form, in one E step ------


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_fully_labelled_gaussian_gives_the_supervised_maximum_likelihood(covariance_type):
    lengths = [120, 80, 100]
    X, Z = sample_sequences(true_gaussian_model(covariance_type), lengths)
    model = GaussianHMM(
        3,
        covariance_type=covariance_type,
        covars_prior=0.0,
        n_iter=1,
        random_state=0,
        params="stmc",
        init_params="stmc",
    ).fit(X, lengths=lengths, known_states=Z)
    starts, transitions = hand_counted_transitions(Z, lengths, 3)
    np.testing.assert_allclose(model.startprob_, starts / starts.sum(), rtol=1e-12)
    np.testing.assert_allclose(
        model.transmat_, transitions / transitions.sum(axis=1, keepdims=True), rtol=1e-12
    )
    means = np.array([X[Z == k].mean(axis=0) for k in range(3)])
    np.testing.assert_allclose(model.means_, means, rtol=1e-10)
    residuals = [X[Z == k] - means[k] for k in range(3)]
    expected = {
        "diag": np.array([(r**2).mean(axis=0) for r in residuals]),
        "spherical": np.array([(r**2).mean() for r in residuals]),
        "full": np.array([r.T @ r / len(r) for r in residuals]),
        "tied": sum(r.T @ r for r in residuals) / len(X),
    }[covariance_type]
    np.testing.assert_allclose(model._covars_, expected, rtol=1e-10)
    # One E step suffices: the second (at the supervised estimates) and the
    # third have the same statistics, and EM stops on the third.
    again = GaussianHMM(
        3, covariance_type=covariance_type, covars_prior=0.0, n_iter=20, random_state=0
    ).fit(X, lengths=lengths, known_states=Z)
    assert again.converged_ and again.n_iter_ == 3
    np.testing.assert_allclose(again.monitor_.history[2], again.monitor_.history[1], rtol=1e-12)
    np.testing.assert_allclose(again.means_, means, rtol=1e-10)


@pytest.mark.parametrize("covariance_type", ["diag", "full"])
def test_fully_labelled_gaussian_respects_the_priors_as_map(covariance_type):
    lengths = [150, 90]
    X, Z = sample_sequences(true_gaussian_model(covariance_type), lengths, seed=3)
    d, m0, w, psi, nu = 2, np.array([0.5, -0.5]), 4.0, 0.3, 5.0
    model = GaussianHMM(
        3,
        covariance_type=covariance_type,
        startprob_prior=2.5,
        transmat_prior=3.0,
        means_prior=m0,
        means_weight=w,
        covars_prior=psi if covariance_type == "diag" else psi * np.eye(d),
        covars_weight=nu,
        n_iter=1,
        random_state=0,
    ).fit(X, lengths=lengths, known_states=Z)
    starts, transitions = hand_counted_transitions(Z, lengths, 3)
    np.testing.assert_allclose(model.startprob_, dirichlet_mode(starts, 2.5), rtol=1e-12)
    np.testing.assert_allclose(model.transmat_, dirichlet_mode(transitions, 3.0), rtol=1e-12)
    for k in range(3):
        rows = X[Z == k]
        n = len(rows)
        mean = (w * m0 + rows.sum(axis=0)) / (w + n)
        np.testing.assert_allclose(model.means_[k], mean, rtol=1e-10)
        r, offset = rows - mean, mean - m0
        if covariance_type == "diag":
            variance = (psi + w * offset**2 + (r**2).sum(axis=0)) / (nu - 1 + n)
            np.testing.assert_allclose(model._covars_[k], variance, rtol=1e-10)
        else:
            scatter = psi * np.eye(d) + w * np.outer(offset, offset) + r.T @ r
            np.testing.assert_allclose(model._covars_[k], scatter / (nu - d + n), rtol=1e-10)


@pytest.mark.parametrize("prior", [1.0, 1.7])
def test_fully_labelled_categorical_gives_the_supervised_estimates(prior):
    true = CategoricalHMM(2, n_features=4)
    true.startprob_ = [0.6, 0.4]
    true.transmat_ = [[0.7, 0.3], [0.4, 0.6]]
    true.emissionprob_ = [[0.5, 0.3, 0.1, 0.1], [0.05, 0.15, 0.4, 0.4]]
    lengths = [60, 40, 50]
    X, Z = sample_sequences(true, lengths, seed=5)
    model = CategoricalHMM(
        2, emissionprob_prior=prior, transmat_prior=prior, n_iter=1, random_state=0
    ).fit(X, lengths=lengths, known_states=Z)
    starts, transitions = hand_counted_transitions(Z, lengths, 2)
    counts = np.array([np.bincount(X[Z == k, 0].astype(int), minlength=4) for k in range(2)])
    np.testing.assert_allclose(model.startprob_, starts / starts.sum(), rtol=1e-12)
    np.testing.assert_allclose(model.transmat_, dirichlet_mode(transitions, prior), rtol=1e-12)
    np.testing.assert_allclose(model.emissionprob_, dirichlet_mode(counts, prior), rtol=1e-12)


def test_fully_labelled_poisson_and_multinomial_give_the_supervised_estimates():
    rng = np.random.default_rng(4)
    Z = rng.integers(0, 2, 200)
    X = rng.poisson(np.where(Z[:, None] == 0, [2.0, 5.0], [7.0, 1.0]))
    model = PoissonHMM(2, lambdas_prior=0.0, lambdas_weight=0.0, n_iter=1, random_state=0)
    model.fit(X, known_states=Z)
    np.testing.assert_allclose(model.lambdas_, [X[Z == k].mean(axis=0) for k in range(2)])
    counts = rng.multinomial(6, [0.2, 0.3, 0.5], size=200).astype(float)
    model = MultinomialHMM(2, n_trials=6, n_iter=1, random_state=0).fit(counts, known_states=Z)
    totals = np.array([counts[Z == k].sum(axis=0) for k in range(2)])
    np.testing.assert_allclose(model.emissionprob_, totals / totals.sum(axis=1, keepdims=True))


# -- the clamped E step equals the enumeration of paths through the labels -------


def enumerate_through_labels(log_start, log_trans, log_frame, labels):
    """log p(X, labels), per-row posteriors and expected transitions by
    enumerating every path and keeping those through the labels."""
    return brute_force_posteriors(log_start, log_trans, log_frame, labels)[:3]


def test_clamped_forward_backward_equals_enumeration_through_the_labels():
    rng = np.random.default_rng(1)
    n_states, n_rows = 3, 6
    log_start = np.log(rng.dirichlet(np.ones(n_states)))
    log_trans = np.log(rng.dirichlet(np.ones(n_states), size=n_states))
    log_frame = rng.normal(scale=3.0, size=(n_rows, n_states))
    labels = np.array([-1, 2, -1, -1, 0, -1])
    expected = enumerate_through_labels(log_start, log_trans, log_frame, labels)
    for shifted in (False, True):
        shift = log_frame.max(axis=1) if shifted else None
        frame = log_frame - shift[:, None] if shifted else log_frame
        clamped, new_shift = clamp_to_known_states(frame, shift, labels)
        if shifted:  # re-shifted: every row's maximum is 0 again
            np.testing.assert_array_equal(clamped.max(axis=1), 0.0)
            clamped = clamped + new_shift[:, None]
        result = hmm_forward_backward(log_start, log_trans, clamped)
        np.testing.assert_allclose(result.log_likelihood, expected[0], rtol=1e-12)
        np.testing.assert_allclose(result.posteriors, expected[1], atol=1e-12)
        np.testing.assert_allclose(result.transition_counts, expected[2], atol=1e-12)
    assert np.array_equal(labels, [-1, 2, -1, -1, 0, -1])


def tiny_gaussian(**kwargs):
    model = GaussianHMM(3, covariance_type="diag", init_params="", **kwargs)
    model.startprob_ = [0.5, 0.3, 0.2]
    model.transmat_ = [[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.3, 0.3, 0.4]]
    model.means_ = [[0.0], [1.0], [2.5]]
    model.covars_ = [[0.7], [1.2], [0.5]]
    return model


@pytest.mark.parametrize("implementation", ["log", "scaling"])
def test_the_estimators_clamped_e_step_equals_enumeration(implementation):
    """One EM iteration from known parameters: the score monitor_ records is
    log p(X, labels), and the M step's start, transition and mean estimates
    are those of the enumerated posteriors through the labels."""
    rng = np.random.default_rng(2)
    lengths = [5, 4]
    X = rng.normal(1.0, 1.5, size=(9, 1))
    labels = np.array([-1, 1, -1, -1, 2, 0, -1, -1, 1])
    model = tiny_gaussian(n_iter=1, implementation=implementation, params="stm")
    log_start, log_trans = np.log(model.startprob_), np.log(model.transmat_)
    log_frame = np.column_stack(
        [
            multivariate_normal(m, c).logpdf(X[:, 0])
            for m, c in zip([0.0, 1.0, 2.5], [0.7, 1.2, 0.5])
        ]
    )
    total, starts, transitions, posteriors = 0.0, np.zeros(3), np.zeros((3, 3)), []
    for rows in (slice(0, 5), slice(5, 9)):
        ll, post, trans = enumerate_through_labels(
            log_start, log_trans, log_frame[rows], labels[rows]
        )
        total += ll
        starts += post[0]
        transitions += trans
        posteriors.append(post)
    posteriors = np.vstack(posteriors)
    model.fit(X, lengths=lengths, known_states=labels)
    np.testing.assert_allclose(model.monitor_.history[0], total, rtol=1e-12)
    np.testing.assert_allclose(model.startprob_, starts / 2, atol=1e-12)
    np.testing.assert_allclose(
        model.transmat_, transitions / transitions.sum(axis=1, keepdims=True), atol=1e-12
    )
    means = posteriors.T @ X / posteriors.sum(axis=0)[:, None]
    np.testing.assert_allclose(model.means_, means, atol=1e-12)
    # Unlabelled, the same data give another score: the labels did something.
    unlabelled = tiny_gaussian(n_iter=1, implementation=implementation).fit(X, lengths=lengths)
    assert unlabelled.monitor_.history[0] > total + 1.0


# -- every path of the E step clamps alike ----------------------------------------


def labelled_data(n_rows=4000, fraction=0.1, seed=0):
    X, Z = sample_sequences(true_gaussian_model("diag"), [n_rows], seed=seed)
    rng = np.random.default_rng(seed)
    return X, Z, np.where(rng.random(n_rows) < fraction, Z, -1)


def test_threads_and_checkpointed_sequences_clamp_as_the_plain_e_step():
    X, _, labels = labelled_data(20_000)
    reference = tiny_gaussian_like(X, n_iter=3).fit(X, known_states=labels)
    threaded = tiny_gaussian_like(X, n_iter=3, n_jobs=2).fit(
        X, lengths=[7000, 13_000], known_states=labels
    )
    split = tiny_gaussian_like(X, n_iter=3).fit(X, lengths=[7000, 13_000], known_states=labels)
    np.testing.assert_allclose(threaded.means_, split.means_, rtol=1e-10)
    with sklearn.config_context(working_memory=1):  # 1 MiB: a checkpointed E step
        model = tiny_gaussian_like(X, n_iter=3)
        assert model._checkpoint_threshold(X.shape[1]) < X.shape[0]
        checkpointed = model.fit(X, known_states=labels)
    np.testing.assert_allclose(checkpointed.means_, reference.means_, rtol=1e-10)
    np.testing.assert_allclose(checkpointed.transmat_, reference.transmat_, rtol=1e-10)
    np.testing.assert_allclose(
        checkpointed.monitor_.history, reference.monitor_.history, rtol=1e-12
    )


def tiny_gaussian_like(X, **kwargs):
    """A diag 3-state model set by hand near the truth (no initialisation noise)."""
    model = GaussianHMM(3, covariance_type="diag", init_params="", **kwargs)
    model.startprob_ = np.full(3, 1 / 3)
    model.transmat_ = np.full((3, 3), 1 / 3)
    model.means_ = [[1.0, 0.5], [-1.0, 0.5], [0.0, -1.0]]
    model.covars_ = np.ones((3, 2))
    return model


def test_streams_carry_the_clamping_across_chunks():
    """At fixed parameters, partial_fit over chunks of one sequence reports log
    p(chunk, labels | earlier rows): they add up to fit's clamped score."""
    X, _, labels = labelled_data(900)
    whole = tiny_gaussian_like(X, n_iter=1, params="").fit(X, known_states=labels)
    stream = tiny_gaussian_like(X, params="")
    total = 0.0
    for first in range(0, 900, 300):
        stream.partial_fit(X[first : first + 300], known_states=labels[first : first + 300])
        total += stream.batch_log_likelihood_
    np.testing.assert_allclose(total, whole.monitor_.history[0], rtol=1e-12)


def test_partial_fit_of_a_fully_labelled_batch_gives_the_supervised_estimates():
    X, Z = sample_sequences(true_gaussian_model("diag"), [500], seed=2)
    model = GaussianHMM(3, covariance_type="diag", covars_prior=0.0, random_state=0)
    model.partial_fit(X, known_states=Z)
    np.testing.assert_allclose(model.means_, [X[Z == k].mean(axis=0) for k in range(3)])


def test_online_em_and_squarem_keep_the_labels():
    X, Z = sample_sequences(true_gaussian_model("diag"), [50] * 20, seed=7)
    lengths = [50] * 20
    means = [X[Z == k].mean(axis=0) for k in range(3)]
    for options in ({"learning_method": "online", "batch_size": 20}, {"acceleration": "squarem"}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model = GaussianHMM(
                3, covariance_type="diag", covars_prior=0.0, n_iter=3, random_state=0, **options
            ).fit(X, lengths=lengths, known_states=Z)
        # Fully labelled, and online EM's one batch holds every sequence: the
        # labelled means, whatever the E step's order of sequences.
        np.testing.assert_allclose(model.means_, means, rtol=1e-10, err_msg=str(options))
    # Minibatches of 5 sequences blend exact batch statistics with the
    # Robbins-Monro weights: near the labelled means, not equal to them.
    model = GaussianHMM(
        3, covariance_type="diag", n_iter=3, random_state=0, learning_method="online", batch_size=5
    ).fit(X, lengths=lengths, known_states=Z)
    np.testing.assert_allclose(model.means_, means, atol=0.05)


# -- partly labelled: states anchored to their labels ------------------------------


def test_ten_percent_of_labels_anchor_the_states_and_recover_the_parameters():
    true = true_gaussian_model("diag")
    X, Z, labels = labelled_data(3000, fraction=0.1, seed=11)
    model = GaussianHMM(3, covariance_type="diag", n_iter=100, tol=1e-4, random_state=0)
    model.fit(X, known_states=labels)
    np.testing.assert_allclose(model.means_, true.means_, atol=0.15)
    np.testing.assert_allclose(model.transmat_, true.transmat_, atol=0.05)
    np.testing.assert_allclose(
        np.diagonal(model.covars_, axis1=1, axis2=2), true._covars_, atol=0.15
    )
    # The labelled rows are decoded as labelled, and most others as the truth.
    states = model.predict(X)
    assert np.mean(states == Z) > 0.9
    # Each random initialisation lands on the labels' order, whatever KMeans found.
    for seed in range(1, 4):
        other = GaussianHMM(3, covariance_type="diag", n_iter=100, tol=1e-4, random_state=seed)
        other.fit(X, known_states=labels)
        np.testing.assert_allclose(other.means_, true.means_, atol=0.15)


def test_partly_labelled_categorical_and_gmm_keep_the_labels_order():
    true = CategoricalHMM(2, n_features=3)
    true.startprob_ = [0.5, 0.5]
    true.transmat_ = [[0.9, 0.1], [0.1, 0.9]]
    true.emissionprob_ = [[0.1, 0.2, 0.7], [0.7, 0.2, 0.1]]
    X, Z = true.sample(3000, random_state=0)
    labels = np.where(np.random.default_rng(0).random(3000) < 0.1, Z, -1)
    model = CategoricalHMM(2, n_iter=200, tol=1e-4, random_state=0).fit(X, known_states=labels)
    np.testing.assert_allclose(model.emissionprob_, true.emissionprob_, atol=0.05)
    X, Z = sample_sequences(true_gaussian_model("diag"), [2000], seed=1)
    labels = np.where(np.random.default_rng(1).random(2000) < 0.1, Z, -1)
    gmm = GMMHMM(3, n_mix=1, covariance_type="diag", n_iter=100, random_state=0)
    gmm.fit(X, known_states=labels)
    np.testing.assert_allclose(gmm.means_[:, 0], true_gaussian_model().means_, atol=0.2)


# -- labels that cannot be ---------------------------------------------------------


@pytest.mark.parametrize(
    "labels, message",
    [
        (np.zeros(9, dtype=int), "one entry per row"),
        (np.full(10, 3), r"known_states\[0\] = 3 is not a state"),
        (np.full(10, -2), r"known_states\[0\] = -2 is not a state"),
        (np.full(10, 0.5), "whole numbers"),
        (np.array([0, 1, np.nan] + [-1] * 7), "whole numbers"),
        (np.array(["a"] * 10), "whole numbers"),
        (np.zeros((10, 1), dtype=int), "one entry per row"),
    ],
)
def test_labels_that_cannot_be_raise(labels, message):
    X = np.random.default_rng(0).normal(size=(10, 1))
    with pytest.raises(ValueError, match=message):
        GaussianHMM(3, n_iter=2).fit(X, known_states=labels)
    with pytest.raises(ValueError, match=message):
        GaussianHMM(3, n_iter=2).partial_fit(X, known_states=labels)


def test_labels_the_model_forbids_raise():
    X = np.random.default_rng(0).normal(size=(10, 1))
    left_right = dict(
        startprob_init=[1.0, 0.0, 0.0],
        transmat_init=[[0.5, 0.5, 0.0], [0.0, 0.5, 0.5], [0.0, 0.0, 1.0]],
        n_iter=2,
        random_state=0,
    )
    labels = np.full(10, -1)
    labels[[3, 4]] = [2, 1]
    with pytest.raises(ValueError, match=r"transmat_\[2, 1\] = 0: the model forbids"):
        GaussianHMM(3, **left_right).fit(X, known_states=labels)
    # Across a sequence boundary the same pair is no transition.
    GaussianHMM(3, **left_right).fit(
        X, lengths=[4, 6], known_states=np.where(np.arange(10) == 4, 0, labels)
    )
    labels = np.full(10, -1)
    labels[5] = 1
    with pytest.raises(ValueError, match=r"startprob_\[1\] = 0: the model forbids starting"):
        GaussianHMM(3, **left_right).fit(X, lengths=[5, 5], known_states=labels)
    X[2] = np.nan
    labels = np.full(10, -1)
    labels[2] = 0
    with pytest.raises(ValueError, match=r"labels a missing row \(X\[2\] is all NaN\)"):
        GaussianHMM(3, n_iter=2).fit(X, known_states=labels)


def test_forbidden_labels_in_a_later_partial_fit_raise():
    X = np.random.default_rng(0).normal(size=(10, 1))
    model = GaussianHMM(
        2, startprob_init=[1.0, 0.0], transmat_init=[[0.5, 0.5], [0.0, 1.0]], random_state=0
    )
    model.partial_fit(X)
    with pytest.raises(ValueError, match=r"transmat_\[1, 0\] = 0"):
        model.partial_fit(X, known_states=[-1, 1, 0] + [-1] * 7)


def test_no_labels_is_plain_em_and_y_stays_ignored():
    X, _, _ = labelled_data(300)
    plain = GaussianHMM(3, n_iter=5, random_state=0).fit(X)
    unlabelled = GaussianHMM(3, n_iter=5, random_state=0).fit(X, known_states=np.full(300, -1))
    with_y = GaussianHMM(3, n_iter=5, random_state=0).fit(X, np.arange(300) % 3)
    for model in (unlabelled, with_y):
        np.testing.assert_array_equal(model.means_, plain.means_)
    assert "_known_states_stacked" not in vars(unlabelled)


# -- metadata routing: Pipeline and GridSearchCV carry the labels -------------------


def test_pipeline_and_grid_search_route_known_states(metadata_routing):
    X, Z = sample_sequences(true_gaussian_model("diag"), [100] * 6, seed=4)
    ids = np.repeat(np.arange(6), 100)
    pipeline = Pipeline(
        [
            ("identity", FunctionTransformer()),
            ("hmm", GaussianHMM(3, covariance_type="diag", covars_prior=0.0, n_iter=1)),
        ]
    )
    pipeline.fit(X, sequence_ids=ids, known_states=Z)
    means = [X[Z == k].mean(axis=0) for k in range(3)]
    np.testing.assert_allclose(pipeline[-1].means_, means, rtol=1e-10)

    seen = []

    class Recording(GaussianHMM):
        def fit(self, X, y=None, *, lengths=None, sequence_ids=None, known_states=None):
            seen.append(np.asarray(known_states))
            return super().fit(
                X, y, lengths=lengths, sequence_ids=sequence_ids, known_states=known_states
            )

    search = GridSearchCV(
        Recording(covariance_type="diag", n_iter=5, random_state=0),
        {"n_components": [3]},
        cv=GroupKFold(n_splits=3),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        search.fit(X, groups=ids, sequence_ids=ids, known_states=Z)
    assert len(seen) == 4  # three folds and the refit
    assert sorted(len(s) for s in seen) == [400, 400, 400, 600]
    np.testing.assert_allclose(search.best_estimator_.means_, means, atol=1e-6)


def test_one_labelled_row_per_state_anchors_the_initialisation():
    """KMeans puts its clusters in any order; one labelled row per state moves
    each state's start to its label (and leaves no zero probability behind)."""
    true = true_gaussian_model("diag")
    X, Z = sample_sequences(true, [1500], seed=6)
    labels = np.full(1500, -1)
    for k in range(3):
        labels[np.flatnonzero(Z == k)[0]] = k
    for seed in range(4):
        model = GaussianHMM(3, covariance_type="diag", n_iter=50, random_state=seed)
        model.fit(X, known_states=labels)
        np.testing.assert_allclose(model.means_, true.means_, atol=0.2)
    symbols = CategoricalHMM(2, n_features=3)
    symbols.startprob_ = [0.5, 0.5]
    symbols.transmat_ = [[0.9, 0.1], [0.1, 0.9]]
    symbols.emissionprob_ = [[0.1, 0.2, 0.7], [0.7, 0.2, 0.1]]
    S, Z = symbols.sample(2000, random_state=1)
    labels = np.full(2000, -1)
    for k in range(2):
        labels[np.flatnonzero(Z == k)[0]] = k
    model = CategoricalHMM(2, n_iter=0, random_state=0).fit(S, known_states=labels)
    assert np.all(model.emissionprob_ > 0)
    model = CategoricalHMM(2, n_iter=300, tol=1e-6, random_state=0).fit(S, known_states=labels)
    np.testing.assert_allclose(model.emissionprob_, symbols.emissionprob_, atol=0.05)


def test_a_clamped_sequence_the_scaled_recursion_loses_is_redone_exactly():
    """Left-right: state 1's relative mass falls to e^-1600 before it is the only
    possible state (and labelled): the log-space redo sees the clamped rows too."""
    log_start, log_trans, log_frame = left_right_underflow_frames()
    log_frame = np.vstack([log_frame, [0.0, 0.0]])
    labels = np.array([-1, -1, -1, -1, -1, 1])
    expected = enumerate_through_labels(log_start, log_trans, log_frame, labels)
    assert np.isfinite(expected[0])
    clamped, _ = clamp_to_known_states(log_frame, None, labels)
    result = hmm_forward_backward(log_start, log_trans, clamped)
    np.testing.assert_allclose(result.log_likelihood, expected[0], rtol=1e-12)
    np.testing.assert_allclose(result.posteriors, expected[1], atol=1e-12)
    np.testing.assert_allclose(result.transition_counts, expected[2], atol=1e-12)


def test_any_subclass_of_basehmm_takes_known_states():
    """The user guide's ExponentialHMM (five hooks, nothing about labels): fully
    labelled, its rates are the supervised n_k / sum x; with 10 % of labels, its
    states follow the labels, though its initialisation orders them by rate."""
    from test_extension_contract import page_example, two_regimes

    ExponentialHMM = page_example()["ExponentialHMM"]
    # State 0 the slow one: its initialisation (state j at the (j + 1/2) / K
    # quantile of X) puts the fast one first.
    rates = np.array([[0.5], [4.0]])
    X, Z = two_regimes(np.random.default_rng(0), [500, 400], rates)
    model = ExponentialHMM(2, params="str", init_params="str", n_iter=1, random_state=0)
    model.fit(X, lengths=[500, 400], known_states=Z)
    expected = [[np.sum(Z == k) / X[Z == k, 0].sum()] for k in range(2)]
    np.testing.assert_allclose(model.rates_, expected, rtol=1e-12)
    labels = np.where(np.random.default_rng(1).random(len(Z)) < 0.1, Z, -1)
    model = ExponentialHMM(2, params="str", init_params="str", n_iter=100, random_state=0)
    model.fit(X, lengths=[500, 400], known_states=labels)
    np.testing.assert_allclose(model.rates_, rates, rtol=0.15)
    unlabelled = ExponentialHMM(2, params="str", init_params="str", n_iter=100).fit(X)
    assert unlabelled.rates_[0, 0] > unlabelled.rates_[1, 0]  # the other order
