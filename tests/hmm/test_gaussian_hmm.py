"""GaussianHMM and the HMM estimators in general: agreement with hmmlearn, brute force, recovery,
scikit-learn use (GMMHMM has its own file, test_gmm_hmm.py)."""

import copy
import io
import itertools
import pickle
import warnings
from contextlib import redirect_stderr

import numpy as np
import pytest
import sklearn
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp
from scipy.stats import multivariate_normal
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skseq import GMMHMM, CategoricalHMM, GaussianHMM, PoissonHMM
from skseq._parallel import ThreadRunner
from skseq.base import BaseEM, FitContext
from skseq.inference import hmm_forward_backward

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

COVARIANCE_TYPES = ["diag", "spherical", "full", "tied"]


@pytest.fixture
def metadata_routing():
    sklearn.set_config(enable_metadata_routing=True)
    yield
    sklearn.set_config(enable_metadata_routing=False)


def random_parameters(rng, n_components, n_features, covariance_type):
    covars = {
        "diag": rng.uniform(0.5, 2.0, (n_components, n_features)),
        "spherical": rng.uniform(0.5, 2.0, n_components),
        "full": np.stack(
            [
                np.eye(n_features) + 0.3 * np.outer(v, v)
                for v in rng.normal(size=(n_components, n_features))
            ]
        ),
        "tied": np.eye(n_features) + 0.2,
    }[covariance_type]
    return {
        "startprob_": rng.dirichlet(np.ones(n_components)),
        "transmat_": rng.dirichlet(np.ones(n_components), size=n_components),
        "means_": rng.normal(scale=2.0, size=(n_components, n_features)),
        "covars_": covars,
    }


def set_parameters(model, parameters):
    for name, value in parameters.items():
        setattr(model, name, np.copy(value))
    return model


def true_gaussian_model():
    return GaussianHMM(
        n_components=3,
        covariance_type="full",
        startprob_init=[0.6, 0.3, 0.1],
        transmat_init=[[0.90, 0.05, 0.05], [0.10, 0.85, 0.05], [0.05, 0.10, 0.85]],
        means_init=[[0.0, 0.0], [5.0, 5.0], [-5.0, 5.0]],
        covars_init=[np.eye(2), [[1.0, 0.5], [0.5, 1.0]], 0.5 * np.eye(2)],
        n_iter=0,
        random_state=0,
    )


def sample_true_model(n_sequences=10, length=300, seed=0):
    model = true_gaussian_model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(np.zeros((3, 2)))
    rng = np.random.RandomState(seed)
    samples = [model.sample(length, random_state=rng) for _ in range(n_sequences)]
    X = np.concatenate([x for x, _ in samples])
    states = np.concatenate([z for _, z in samples])
    return model, X, states, [length] * n_sequences


def match_states(estimated_means, true_means):
    """The permutation of estimated states that best matches the true ones."""
    best = min(
        itertools.permutations(range(len(true_means))),
        key=lambda p: np.sum((estimated_means[list(p)] - true_means) ** 2),
    )
    return list(best)


# -- agreement with hmmlearn -------------------------------------------------


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
@pytest.mark.parametrize("with_priors", [False, True])
def test_gaussian_one_em_step_equals_hmmlearn(covariance_type, with_priors):
    hmm = pytest.importorskip("hmmlearn.hmm")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    X[100:200] += 3
    lengths = [100, 120, 80]
    parameters = random_parameters(rng, 3, 3, covariance_type)
    priors = {}
    if with_priors:
        priors = dict(
            startprob_prior=2.0,
            transmat_prior=1.5,
            means_prior=0.5,
            means_weight=2.0,
            covars_prior=0.5,
            covars_weight=4.0,
        )
    models = []
    for cls in (hmm.GaussianHMM, GaussianHMM):
        model = cls(3, covariance_type=covariance_type, n_iter=1, init_params="", **priors)
        set_parameters(model, parameters).fit(X, lengths=lengths)
        models.append(model)
    theirs, ours = models
    np.testing.assert_allclose(ours.monitor_.history[0], theirs.monitor_.history[0], rtol=1e-10)
    for name in ("startprob_", "transmat_", "means_"):
        np.testing.assert_allclose(
            getattr(ours, name), getattr(theirs, name), rtol=1e-8, atol=1e-12
        )
    their_covars = theirs._covars_[:, 0] if covariance_type == "spherical" else theirs.covars_
    our_covars = ours._covars_ if covariance_type == "spherical" else ours.covars_
    np.testing.assert_allclose(our_covars, their_covars, rtol=1e-8)
    np.testing.assert_allclose(
        ours.score(X, lengths=lengths), theirs.score(X, lengths=lengths), rtol=1e-10
    )
    their_log_prob, _ = theirs.decode(X, lengths=lengths)
    our_log_prob, _ = ours.decode(X, lengths=lengths)
    np.testing.assert_allclose(our_log_prob, their_log_prob, rtol=1e-10)
    _, their_posteriors = theirs.score_samples(X, lengths=lengths)
    _, our_posteriors = ours.score_samples(X, lengths=lengths)
    np.testing.assert_allclose(our_posteriors, their_posteriors, atol=1e-9)
    if covariance_type != "spherical":  # hmmlearn's covars_ breaks for fitted spherical
        np.testing.assert_allclose(ours.bic(X, lengths=lengths), theirs.bic(X, lengths=lengths))
        np.testing.assert_allclose(ours.aic(X, lengths=lengths), theirs.aic(X, lengths=lengths))


def test_categorical_and_poisson_one_em_step_equal_hmmlearn():
    hmm = pytest.importorskip("hmmlearn.hmm")
    rng = np.random.default_rng(1)
    base = {
        "startprob_": rng.dirichlet(np.ones(3)),
        "transmat_": rng.dirichlet(np.ones(3), size=3),
    }
    cases = [
        (
            hmm.CategoricalHMM,
            CategoricalHMM,
            {"emissionprob_": rng.dirichlet(np.ones(5), size=3)},
            rng.integers(0, 5, (300, 1)),
            {"emissionprob_prior": 1.5},
        ),
        (
            hmm.PoissonHMM,
            PoissonHMM,
            {"lambdas_": rng.uniform(1, 5, (3, 2))},
            rng.poisson(3, (300, 2)),
            {},
        ),
    ]
    lengths = [100, 150, 50]
    for their_class, our_class, emission, X, priors in cases:
        models = []
        for cls in (their_class, our_class):
            model = cls(3, n_iter=1, init_params="", transmat_prior=2.0, **priors)
            set_parameters(model, {**base, **emission}).fit(X, lengths=lengths)
            models.append(model)
        theirs, ours = models
        np.testing.assert_allclose(ours.monitor_.history[0], theirs.monitor_.history[0], rtol=1e-10)
        for name in [*base, *emission]:
            np.testing.assert_allclose(getattr(ours, name), getattr(theirs, name), rtol=1e-8)
        np.testing.assert_allclose(ours.bic(X, lengths=lengths), theirs.bic(X, lengths=lengths))
        # Viterbi paths can differ only between tied paths: compare their probability.
        np.testing.assert_allclose(
            ours.decode(X, lengths=lengths)[0], theirs.decode(X, lengths=lengths)[0], rtol=1e-10
        )


# -- exact values ------------------------------------------------------------


def test_gaussian_score_and_posteriors_match_enumeration_of_paths():
    rng = np.random.default_rng(3)
    parameters = random_parameters(rng, 2, 2, "full")
    model = set_parameters(
        GaussianHMM(2, covariance_type="full", init_params="", n_iter=0), parameters
    )
    X = rng.normal(size=(6, 2))
    model.fit(X)  # n_iter=0: validates and keeps the given parameters
    densities = np.stack(
        [
            multivariate_normal(m, c).pdf(X)
            for m, c in zip(parameters["means_"], parameters["covars_"])
        ],
        axis=1,
    )
    total = 0.0
    marginals = np.zeros((6, 2))
    for path in itertools.product(range(2), repeat=6):
        p = parameters["startprob_"][path[0]] * densities[0, path[0]]
        for t in range(1, 6):
            p *= parameters["transmat_"][path[t - 1], path[t]] * densities[t, path[t]]
        total += p
        marginals[np.arange(6), path] += p
    np.testing.assert_allclose(model.score(X), np.log(total), rtol=1e-12)
    np.testing.assert_allclose(model.predict_proba(X), marginals / total, rtol=1e-10)


def test_missing_rows_are_marginalised():
    """A row that is NaN throughout contributes p(x_t | z_t) = 1: equal to the model
    on the other rows with the transition matrix squared across the gap (partially
    observed rows: tests/hmm/test_partial_rows.py)."""
    rng = np.random.default_rng(4)
    parameters = random_parameters(rng, 2, 2, "diag")
    model = set_parameters(GaussianHMM(2, init_params="", n_iter=0), parameters)
    X = rng.normal(size=(5, 2))
    model.fit(X)
    X_missing = X.copy()
    X_missing[2] = np.nan
    gap = set_parameters(GaussianHMM(2, init_params="", n_iter=0), parameters)
    gap.fit(X)
    # Rows 0, 1 | missing 2 | rows 3, 4: brute force over the state of each observed row.
    densities = np.exp(model._compute_log_likelihood(X))
    A, pi = parameters["transmat_"], parameters["startprob_"]
    total = 0.0
    for z0, z1, z3, z4 in itertools.product(range(2), repeat=4):
        total += (
            pi[z0]
            * densities[0, z0]
            * A[z0, z1]
            * densities[1, z1]
            * (A @ A)[z1, z3]
            * densities[3, z3]
            * A[z3, z4]
            * densities[4, z4]
        )
    np.testing.assert_allclose(model.score(X_missing), np.log(total), rtol=1e-12)
    posteriors = model.predict_proba(X_missing)
    assert np.all(np.isfinite(posteriors))
    assert model.predict(X_missing).shape == (5,)


def test_fit_with_missing_rows_ignores_them_in_the_emission_statistics():
    _, X, _, lengths = sample_true_model(n_sequences=4, length=200)
    X_missing = X.copy()
    X_missing[::10] = np.nan
    X_missing[5, 1] = np.nan
    model = GaussianHMM(3, covariance_type="full", n_iter=30, random_state=0).fit(
        X_missing, lengths=lengths
    )
    assert np.all(np.isfinite(model.means_))
    assert np.all(np.isfinite(model.covars_))
    assert np.isfinite(model.score(X_missing, lengths=lengths))
    assert np.all(np.diff(model.monitor_.history) > -1e-6)


# -- recovery ----------------------------------------------------------------


def test_gaussian_recovers_known_parameters():
    true_model, X, states, lengths = sample_true_model(n_sequences=10, length=300)
    model = GaussianHMM(3, covariance_type="full", n_iter=100, tol=1e-4, random_state=0)
    model.fit(X, lengths=lengths)
    order = match_states(model.means_, true_model.means_)
    np.testing.assert_allclose(model.means_[order], true_model.means_, atol=0.15)
    np.testing.assert_allclose(model.covars_[order], true_model.covars_, atol=0.15)
    np.testing.assert_allclose(
        model.transmat_[np.ix_(order, order)], true_model.transmat_, atol=0.04
    )
    accuracy = np.mean(
        np.asarray(order)[true_model.predict(X, lengths=lengths)]
        == np.asarray(order)[model.predict(X, lengths=lengths)]
    )
    assert accuracy > 0.99
    per_sample = model.score(X, lengths=lengths) / len(X)
    assert per_sample >= true_model.score(X, lengths=lengths) / len(X) - 1e-3


def test_poisson_and_categorical_recover_known_parameters():
    truth = PoissonHMM(
        2,
        startprob_init=[0.5, 0.5],
        transmat_init=[[0.95, 0.05], [0.1, 0.9]],
        lambdas_init=[[2.0, 10.0], [15.0, 1.0]],
        n_iter=0,
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        truth.fit(np.zeros((2, 2)))
    X, _ = truth.sample(5000, random_state=1)
    model = PoissonHMM(2, n_iter=50, random_state=0).fit(X)
    order = match_states(model.lambdas_, truth.lambdas_)
    np.testing.assert_allclose(model.lambdas_[order], truth.lambdas_, rtol=0.05)
    np.testing.assert_allclose(model.transmat_[np.ix_(order, order)], truth.transmat_, atol=0.03)

    categorical = CategoricalHMM(
        2,
        startprob_init=[0.5, 0.5],
        transmat_init=[[0.9, 0.1], [0.2, 0.8]],
        emissionprob_init=[[0.7, 0.2, 0.1], [0.05, 0.15, 0.8]],
        n_iter=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        categorical.fit(np.array([[0], [1], [2]]))
    X, _ = categorical.sample(20000, random_state=2)
    model = CategoricalHMM(2, n_iter=200, tol=1e-6, random_state=0, n_init=3).fit(X)
    order = match_states(model.emissionprob_, categorical.emissionprob_)
    np.testing.assert_allclose(model.emissionprob_[order], categorical.emissionprob_, atol=0.05)
    np.testing.assert_allclose(
        model.transmat_[np.ix_(order, order)], categorical.transmat_, atol=0.05
    )


# -- EM behaviour ------------------------------------------------------------


@pytest.mark.parametrize(
    "model",
    [
        GaussianHMM(3, covariance_type="diag", n_iter=20, tol=-np.inf, random_state=0),
        GaussianHMM(3, covariance_type="tied", n_iter=20, tol=-np.inf, random_state=0),
        GMMHMM(2, n_mix=2, covariance_type="full", n_iter=20, tol=-np.inf, random_state=0),
    ],
    ids=["diag", "tied", "gmm-full"],
)
def test_em_never_decreases_the_log_likelihood(model):
    _, X, _, lengths = sample_true_model(n_sequences=3, length=200)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, lengths=lengths)
    history = np.array(model.monitor_.history)
    assert len(history) == 20
    assert np.all(np.diff(history) >= -1e-7 * np.abs(history[1:]))


def test_convergence_warning_verbose_and_monitor():
    _, X, _, lengths = sample_true_model(n_sequences=2, length=100)
    model = GaussianHMM(3, n_iter=2, tol=1e-12, verbose=True, random_state=0)
    stderr = io.StringIO()
    with redirect_stderr(stderr), pytest.warns(ConvergenceWarning, match="did not converge"):
        model.fit(X, lengths=lengths)
    assert stderr.getvalue().count("EM iteration") == 2
    # converged_ says whether the tolerance was met; monitor_.converged is
    # hmmlearn's, True at the iteration limit too.
    assert model.n_iter_ == 2 and not model.converged_ and model.monitor_.converged
    converged = GaussianHMM(3, n_iter=500, tol=1e-2, random_state=0).fit(X, lengths=lengths)
    assert converged.converged_ and converged.monitor_.converged
    assert converged.monitor_.history[-1] - converged.monitor_.history[-2] < 1e-2


def test_n_jobs_gives_the_same_result():
    _, X, _, lengths = sample_true_model(n_sequences=6, length=200)
    one = GaussianHMM(3, covariance_type="full", n_iter=5, random_state=0, n_jobs=1)
    two = clone(one).set_params(n_jobs=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        one.fit(X, lengths=lengths)
        two.fit(X, lengths=lengths)
    np.testing.assert_allclose(two.monitor_.history, one.monitor_.history, rtol=1e-10)
    for name in ("startprob_", "transmat_", "means_", "covars_"):
        np.testing.assert_allclose(getattr(two, name), getattr(one, name), rtol=1e-10, atol=1e-12)


def test_dask_backend_runs_the_same_fit():
    distributed = pytest.importorskip("distributed")
    from joblib import parallel_config

    _, X, _, lengths = sample_true_model(n_sequences=4, length=100)
    model = GaussianHMM(3, n_iter=3, random_state=0, n_jobs=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = clone(model).fit(X, lengths=lengths)
        with (
            distributed.LocalCluster(
                n_workers=2,
                processes=False,
                protocol="tcp",
                host="127.0.0.1",
                dashboard_address=None,
            ) as cluster,
            distributed.Client(cluster) as client,
            parallel_config(backend="dask"),
        ):
            with distributed.get_task_stream(client) as task_stream:
                on_dask = clone(model).fit(X, lengths=lengths)
    assert len(task_stream.data) > 0  # the E step really ran on the cluster
    np.testing.assert_allclose(on_dask.means_, reference.means_, rtol=1e-10)


def test_n_init_keeps_the_best_run():
    _, X, _, lengths = sample_true_model(n_sequences=2, length=150)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        single = GaussianHMM(3, n_iter=5, random_state=0).fit(X, lengths=lengths)
        best = GaussianHMM(3, n_iter=5, random_state=0, n_init=4).fit(X, lengths=lengths)
    assert best.monitor_.history[-1] >= single.monitor_.history[-1] - 1e-9


def test_state_without_responsibility_never_turns_nan():
    X = np.random.default_rng(6).normal(size=(200, 2))
    model = GaussianHMM(
        2,
        covariance_type="full",
        n_iter=5,
        covars_prior=0.0,
        covars_weight=0.0,
        means_init=[[0.0, 0.0], [1e3, 1e3]],
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X)
    for name in ("startprob_", "transmat_", "means_", "covars_"):
        assert np.all(np.isfinite(getattr(model, name))), name
    gmm = GMMHMM(
        2,
        n_mix=2,
        n_iter=3,
        random_state=0,
        means_init=[[[0.0, 0.0], [0.1, 0.1]], [[1e3, 1e3], [-1e3, 1e3]]],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gmm.fit(X)
    assert np.all(np.isfinite(gmm.means_)) and np.all(np.isfinite(gmm.covars_))
    assert np.all(np.isfinite(gmm.weights_))


def test_default_initialisation_converges_to_the_truth():
    true_model, X, _, lengths = sample_true_model(n_sequences=5, length=300, seed=7)
    model = GaussianHMM(3, covariance_type="full", n_iter=100, random_state=1).fit(
        X, lengths=lengths
    )
    assert model.score(X, lengths=lengths) >= true_model.score(X, lengths=lengths) - 5.0


# -- the scikit-learn API ----------------------------------------------------


def test_initial_values_as_constructor_parameters_and_hmmlearn_style():
    _, X, _, lengths = sample_true_model(n_sequences=2, length=100)
    means = np.array([[0.0, 0.0], [5.0, 5.0], [-5.0, 5.0]])
    by_init = GaussianHMM(3, means_init=means, n_iter=1, params="st")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        by_init.fit(X, lengths=lengths)
        np.testing.assert_array_equal(by_init.means_, means)
        cloned = clone(by_init).fit(X, lengths=lengths)
        np.testing.assert_array_equal(cloned.means_, means)
        hmmlearn_style = GaussianHMM(3, init_params="stc", n_iter=1, params="st")
        hmmlearn_style.means_ = means.copy()
        hmmlearn_style.fit(X, lengths=lengths)
    np.testing.assert_array_equal(hmmlearn_style.means_, means)
    np.testing.assert_allclose(hmmlearn_style.monitor_.history, by_init.monitor_.history)


def test_lengths_and_sequence_ids_are_the_same_split():
    _, X, _, lengths = sample_true_model(n_sequences=3, length=100)
    ids = np.repeat(["a", "b", "c"], 100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        by_lengths = GaussianHMM(3, n_iter=3, random_state=0).fit(X, lengths=lengths)
        by_ids = GaussianHMM(3, n_iter=3, random_state=0).fit(X, sequence_ids=ids)
    np.testing.assert_allclose(by_ids.means_, by_lengths.means_)
    np.testing.assert_allclose(
        by_ids.score_sequences(X, sequence_ids=ids), by_lengths.score_sequences(X, lengths=lengths)
    )
    per_sequence = [by_lengths.score(X[i * 100 : (i + 1) * 100]) for i in range(3)]
    np.testing.assert_allclose(by_lengths.score_sequences(X, lengths=lengths), per_sequence)


def test_score_sample_weight_weights_the_one_step_predictive_terms():
    _, X, _, lengths = sample_true_model(n_sequences=2, length=50)
    model = GaussianHMM(3, n_iter=5, random_state=0).fit(X, lengths=lengths)
    total = model.score(X, lengths=lengths)
    np.testing.assert_allclose(model.score(X, lengths=lengths, sample_weight=np.ones(100)), total)
    weights = np.zeros(100)
    weights[:50] = 1.0
    np.testing.assert_allclose(
        model.score(X, lengths=lengths, sample_weight=weights), model.score(X[:50])
    )


def test_pipeline_fits_scores_and_predicts(metadata_routing):
    _, X, _, lengths = sample_true_model(n_sequences=3, length=100)
    ids = np.repeat(np.arange(3), 100)
    pipeline = make_pipeline(StandardScaler(), GaussianHMM(3, n_iter=20, random_state=0))
    pipeline.fit(X, sequence_ids=ids)
    assert pipeline.predict(X, sequence_ids=ids).shape == (300,)
    score = pipeline.score(X, sequence_ids=ids, sample_weight=np.ones(300))
    np.testing.assert_allclose(score, pipeline.score(X, sequence_ids=ids))
    assert pipeline.predict_proba(X, sequence_ids=ids).shape == (300, 3)


class RecordingGaussianHMM(GaussianHMM):
    """Records the sequence lengths it is fitted and scored on."""

    seen_lengths = []

    def _fit_em(self, X, offsets):
        RecordingGaussianHMM.seen_lengths.append(np.diff(offsets).tolist())
        return super()._fit_em(X, offsets)


def test_grid_search_with_group_kfold_keeps_sequences_whole(metadata_routing):
    _, X, _, lengths = sample_true_model(n_sequences=6, length=80)
    ids = np.repeat(np.arange(6), 80)
    RecordingGaussianHMM.seen_lengths = []
    search = GridSearchCV(
        RecordingGaussianHMM(n_iter=10, random_state=0),
        {"n_components": [1, 3]},
        cv=GroupKFold(n_splits=3),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        search.fit(X, groups=ids, sequence_ids=ids)
    assert search.best_params_ == {"n_components": 3}
    assert RecordingGaussianHMM.seen_lengths
    for seen in RecordingGaussianHMM.seen_lengths:
        assert all(length == 80 for length in seen)


def test_pickle_round_trip_and_sample():
    true_model, X, _, lengths = sample_true_model(n_sequences=2, length=100)
    restored = pickle.loads(pickle.dumps(true_model))
    np.testing.assert_array_equal(restored.predict(X), true_model.predict(X))
    X1, Z1 = true_model.sample(50, random_state=3)
    X2, Z2 = true_model.sample(50, random_state=3)
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(Z1, Z2)
    _, Z = true_model.sample(20000, random_state=4)
    frequencies = np.bincount(Z, minlength=3) / len(Z)
    stationary = true_model.get_stationary_distribution()
    np.testing.assert_allclose(stationary @ true_model.transmat_, stationary, atol=1e-12)
    np.testing.assert_allclose(frequencies, stationary, atol=0.03)
    _, continued = true_model.sample(5, random_state=0, currstate=2)
    assert continued.shape == (5,)


def test_float32_input_and_inputs_not_modified():
    _, X, _, lengths = sample_true_model(n_sequences=2, length=100)
    X32 = X.astype(np.float32)
    copy = X32.copy()
    model = GaussianHMM(3, n_iter=5, random_state=0).fit(X32, lengths=lengths)
    model.predict(X32, lengths=lengths)
    np.testing.assert_array_equal(X32, copy)
    X_missing = X.copy()
    X_missing[3] = np.nan
    copy = X_missing.copy()
    model.score(X_missing, lengths=lengths)
    np.testing.assert_array_equal(X_missing, copy)


def test_decode_map_and_algorithm():
    true_model, X, _, _ = sample_true_model(n_sequences=1, length=100)
    posteriors = true_model.predict_proba(X)
    log_prob, states = true_model.decode(X, algorithm="map")
    np.testing.assert_array_equal(states, posteriors.argmax(axis=1))
    map_model = clone(true_model).set_params(algorithm="map")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        map_model.fit(X)
    np.testing.assert_array_equal(map_model.predict(X), states)


# -- bad input ---------------------------------------------------------------


@pytest.fixture(scope="module")
def fitted_gaussian():
    _, X, _, _ = sample_true_model(n_sequences=1, length=60)
    return GaussianHMM(3, n_iter=3, random_state=0).fit(X), X


@pytest.mark.parametrize(
    "call,error,message",
    [
        (lambda m, X: m.fit(X, lengths=[10, 10]), ValueError, "sum to 20"),
        (lambda m, X: m.fit(X, lengths=[60, 0]), ValueError, "positive"),
        (lambda m, X: m.fit(X, lengths=[-5, 65]), ValueError, "positive"),
        (lambda m, X: m.fit(X, [30, 30]), TypeError, "lengths="),
        (lambda m, X: m.fit(X, lengths=[60], sequence_ids=np.zeros(60)), ValueError, "not both"),
        (
            lambda m, X: m.fit(X, sequence_ids=np.r_[np.zeros(20), np.ones(20), np.zeros(20)]),
            ValueError,
            "contiguous",
        ),
        (lambda m, X: m.fit(np.where(np.arange(60)[:, None] == 3, np.inf, X)), ValueError, "inf"),
        (lambda m, X: m.fit(X[:0]), ValueError, "0 sample"),
        (lambda m, X: m.fit(np.full_like(X, np.nan)), ValueError, "no observed row"),
        (lambda m, X: m.set_params(n_components=0).fit(X), ValueError, "n_components"),
        (lambda m, X: m.set_params(n_components=1.5).fit(X), TypeError, "n_components"),
        (
            lambda m, X: m.set_params(covariance_type="diagonal").fit(X),
            ValueError,
            "covariance_type",
        ),
        (lambda m, X: m.set_params(init_params="stx").fit(X), ValueError, "unknown letters"),
        (lambda m, X: m.set_params(startprob_init=[0.5, 0.6, 0.1]).fit(X), ValueError, "sum to 1"),
        (lambda m, X: m.set_params(startprob_init=[0.5, 0.5]).fit(X), ValueError, "shape"),
        (
            lambda m, X: m.set_params(transmat_init=np.full((3, 3), 0.5)).fit(X),
            ValueError,
            "sum to 1",
        ),
        (
            lambda m, X: m.set_params(
                covariance_type="full", covars_init=np.tile([[1.0, 2.0], [2.0, 1.0]], (3, 1, 1))
            ).fit(X),
            ValueError,
            "positive definite",
        ),
        (lambda m, X: m.set_params(covars_init=-np.ones((3, 2))).fit(X), ValueError, "positive"),
        (lambda m, X: m.set_params(means_init=np.zeros((2, 2))).fit(X), ValueError, "means"),
        (lambda m, X: m.set_params(algorithm="best").fit(X), ValueError, "algorithm"),
    ],
)
def test_bad_input_at_fit(call, error, message):
    _, X, _, _ = sample_true_model(n_sequences=1, length=60)
    copy = X.copy()
    with pytest.raises(error, match=message):
        call(GaussianHMM(3, n_iter=2, random_state=0), X)
    np.testing.assert_array_equal(X, copy)


def test_bad_input_after_fit(fitted_gaussian):
    model, X = fitted_gaussian
    with pytest.raises(ValueError, match="features"):
        model.predict(np.zeros((5, 3)))
    with pytest.raises(ValueError, match="sample_weight"):
        model.score(X, sample_weight=np.ones(3))
    with pytest.raises(NotFittedError):
        GaussianHMM(2).predict(X)
    with pytest.raises(NotFittedError):
        GaussianHMM(2).score(X)
    with pytest.raises(ValueError, match="currstate"):
        model.sample(3, currstate=7)


@pytest.mark.parametrize(
    "X,message",
    [
        (np.array([[0.5], [1.0]]), "non-integer"),
        (np.array([[-1], [1]]), "Negative"),
        (np.array([[np.nan], [np.nan]]), "Every entry of X is NaN"),  # NaN alone: missing
        (np.array([[0, 1], [1, np.inf]]), "inf"),
    ],
)
def test_categorical_rejects_bad_symbols(X, message):
    with pytest.raises(ValueError, match=message):
        CategoricalHMM(2).fit(X)


def test_categorical_unknown_symbol_and_alphabet():
    X = np.array([[0], [1], [2], [1], [0], [2]])
    model = CategoricalHMM(2, random_state=0, n_iter=3).fit(X)
    assert model.n_symbols_ == 3
    with pytest.raises(ValueError, match="outside the alphabet"):
        model.predict(np.array([[3]]))
    with pytest.raises(ValueError, match="outside the alphabet"):
        CategoricalHMM(2, n_features=2).fit(X)
    larger = CategoricalHMM(2, n_features=5, random_state=0, n_iter=3).fit(X)
    assert larger.emissionprob_.shape == (2, 5)
    # Symbols never seen get probability zero by maximum likelihood; a prior smooths.
    assert larger.score(np.array([[4]])) == -np.inf
    smoothed = CategoricalHMM(2, n_features=5, emissionprob_prior=2.0, random_state=0, n_iter=3)
    assert np.isfinite(smoothed.fit(X).score(np.array([[4]])))


@pytest.mark.parametrize(
    "X,message",
    [
        (np.array([[0.5], [2.0]]), "non-integer"),
        (np.array([[-1.0], [2.0]]), "Negative"),
        (np.array([[np.inf], [2.0]]), "inf"),  # NaN is a missing count
    ],
)
def test_poisson_rejects_bad_counts(X, message):
    with pytest.raises(ValueError, match=message):
        PoissonHMM(2).fit(X)


# -- defects found in review: each reproduces the original failure ------------


def hand_set_model():
    model = GaussianHMM(3, covariance_type="full")
    model.startprob_ = np.array([0.6, 0.3, 0.1])
    model.transmat_ = np.array([[0.7, 0.2, 0.1], [0.3, 0.5, 0.2], [0.3, 0.3, 0.4]])
    model.means_ = np.array([[0.0, 0.0], [3.0, -3.0], [5.0, 10.0]])
    model.covars_ = np.tile(np.eye(2), (3, 1, 1))
    return model


def test_hand_set_or_changed_parameters_are_checked_before_the_kernels():
    model = hand_set_model()
    X, _ = model.sample(20, random_state=0)
    assert model.predict_proba(X).shape == (20, 3)  # hmmlearn style works
    model.startprob_ = np.array([1.0])
    with pytest.raises(ValueError, match="startprob_"):
        model.predict_proba(X)
    model = hand_set_model()
    model.transmat_ = np.full((30, 30), 1 / 30)
    with pytest.raises(ValueError, match="transmat_"):
        model.predict_proba(X)
    model = hand_set_model()
    model.transmat_ = np.full((3, 3), 0.5)
    with pytest.raises(ValueError, match="sum to 1"):
        model.score(X)
    with pytest.raises(ValueError, match="features"):
        hand_set_model().score(np.zeros((4, 3)))
    fitted = GaussianHMM(4, random_state=0, n_iter=2).fit(X)
    fitted.set_params(n_components=1)
    with pytest.raises(ValueError, match="startprob_"):
        fitted.partial_fit(X, new_sequence=True)


def test_covars_copied_between_models_in_the_getter_shape():
    X = np.random.default_rng(0).normal(size=(60, 2))
    for covariance_type in ("diag", "spherical", "tied", "full"):
        fitted = GaussianHMM(2, covariance_type=covariance_type, random_state=0).fit(X)
        copy = GaussianHMM(2, covariance_type=covariance_type, init_params="", n_iter=0)
        copy.startprob_, copy.transmat_ = fitted.startprob_, fitted.transmat_
        copy.means_, copy.covars_ = fitted.means_, fitted.covars_  # full matrices
        np.testing.assert_allclose(copy.score(X), fitted.score(X))
    with pytest.raises(ValueError, match="diagonal"):
        GaussianHMM(2, covariance_type="diag").covars_ = np.ones((2, 2, 2))


@pytest.mark.parametrize("model_class", [GaussianHMM, GMMHMM])
def test_fit_is_invariant_to_a_constant_shift_of_the_data(model_class):
    """Moments are taken about a point near the data: no cancellation far from 0."""
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(0, 0.05, (500, 1)), 1 + rng.normal(0, 0.05, (500, 1))])
    common = dict(covars_prior=0.0, covars_weight=0.0, random_state=0, n_iter=20)
    if model_class is GMMHMM:
        common = dict(random_state=0, n_iter=20)
    near = model_class(2, **common).fit(X)
    far = model_class(2, **common).fit(X + 5.3e6)
    np.testing.assert_allclose(far.covars_, near.covars_, rtol=1e-4)
    np.testing.assert_allclose(far.means_ - 5.3e6, near.means_, atol=1e-6)


def test_partial_fit_with_small_chunks_and_default_total_samples():
    """Priors weigh against all rows seen, not against one small chunk."""
    truth = GaussianHMM(
        2,
        startprob_init=[0.5, 0.5],
        transmat_init=[[0.99, 0.01], [0.01, 0.99]],
        means_init=[[0.0], [1.0]],
        covars_init=[[9e-4], [9e-4]],
        n_iter=0,
    ).fit(np.zeros((2, 1)))
    X, _ = truth.sample(6000, random_state=0)
    model = GaussianHMM(2, random_state=0, means_init=[[0.1], [0.9]])
    for start in range(0, len(X), 10):
        model.partial_fit(X[start : start + 10])
    np.testing.assert_allclose(np.sort(model.means_.ravel()), [0.0, 1.0], atol=0.01)
    np.testing.assert_allclose(model._covars_.ravel(), 9e-4, rtol=0.2)


def test_zero_probability_data_raise_instead_of_returning_junk():
    model = CategoricalHMM(
        2,
        startprob_init=[0.5, 0.5],
        transmat_init=[[0.9, 0.1], [0.1, 0.9]],
        emissionprob_init=[[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]],
        n_iter=0,
    ).fit(np.array([[0], [1], [2]]))
    X = np.array([[0], [1], [2], [0], [1], [0]])
    assert model.score(X) == -np.inf
    for method in ("filter", "predict_proba", "predict"):
        with pytest.raises(ValueError, match="probability zero"):
            getattr(model, method)(X)
    with pytest.raises(ValueError, match="probability zero"):
        model.decode(X, algorithm="map")


def test_all_missing_rows_are_valid_after_fit():
    X = np.random.default_rng(0).normal(size=(50, 1))
    model = GaussianHMM(2, random_state=0).fit(X)
    gap = np.array([[np.nan], [np.nan]])
    assert model.score(gap) == pytest.approx(0.0)
    assert model.filter_stream(gap).shape == (2, 2)
    model.partial_fit(gap)
    assert np.all(np.isfinite(model.means_))


@pytest.mark.parametrize("lengths", [[1, 2**63 - 1, 2**63 - 1, 4], [1e19, 3], [1, 1, 1, 1]])
def test_lengths_that_overflow_or_outnumber_the_rows(lengths):
    with pytest.raises(ValueError, match="exceed|more sequences|sum to"):
        GaussianHMM(2).fit(np.zeros((3, 1)), lengths=lengths)


@pytest.mark.parametrize(
    "ids",
    [
        np.array([7, 7, 7, np.nan, np.nan, np.nan], dtype=object),
        ["u1", "u1", "u1", None, None, None],
        np.array(["2020-01-01"] * 3 + ["NaT"] * 3, dtype="datetime64[D]"),
    ],
)
def test_sequence_ids_with_missing_values(ids):
    with pytest.raises(ValueError, match="missing values"):
        GaussianHMM(2).fit(np.zeros((6, 1)), sequence_ids=ids)


def test_left_right_model_with_extreme_emissions_has_finite_likelihood():
    model = GaussianHMM(2, init_params="", n_iter=0)
    model.startprob_ = np.array([1.0, 0.0])
    model.transmat_ = np.array([[0.9, 0.1], [0.0, 1.0]])
    model.means_ = np.array([[0.0], [40.0]])
    model.covars_ = np.ones((2, 1))
    X = np.array([[40.0]] * 3)
    # Path 0 -> 1 -> 1: log N(40; 0, 1) + log 0.1 + 2 log N(40; 40, 1).
    exact = -0.5 * 1600 + np.log(0.1) + 3 * (-0.5 * np.log(2 * np.pi))
    np.testing.assert_allclose(model.score(X), exact, rtol=1e-12)
    np.testing.assert_allclose(model.decode(X)[0], exact, rtol=1e-12)
    np.testing.assert_allclose(model.predict_proba(X), [[1, 0], [0, 1], [0, 1]], atol=1e-12)


def test_work_arrays_live_only_during_a_batch_fit():
    """The fit's FitContext keeps each block's work arrays between E steps (the
    same dict every iteration); nothing of it stays on the estimator."""
    _, X, _, lengths = sample_true_model(n_sequences=4, length=100)
    seen = []

    class Spy(GaussianHMM):
        def _estep(self, X, offsets, buffers=None, **shared):
            seen.append(buffers)
            # No special case for pickling: the threads and arrays are not here.
            assert not any(
                isinstance(value, FitContext | ThreadRunner) for value in vars(self).values()
            )
            copy.deepcopy(self)  # (pickle cannot name a local class)
            return super()._estep(X, offsets, buffers, **shared)

    model = Spy(3, n_iter=3, random_state=0, n_jobs=2).fit(X, lengths=lengths)
    assert len(seen) == 3 * 2 and all(buffers for buffers in seen)  # 2 blocks, arrays kept
    assert [id(buffers) for buffers in seen[:2]] * 3 == [id(buffers) for buffers in seen]
    assert "__getstate__" not in vars(BaseEM)
    reference = GaussianHMM(3, n_iter=3, random_state=0).fit(X, lengths=lengths)
    np.testing.assert_allclose(model.means_, reference.means_, rtol=1e-10)
    # Reused arrays never leak into results: the posteriors are fresh each call.
    first = model.predict_proba(X, lengths=lengths)
    model.predict_proba(X[::-1].copy(), lengths=lengths[::-1])
    np.testing.assert_allclose(first, reference.predict_proba(X, lengths=lengths), atol=1e-10)
    seen.clear()
    Spy(3, n_iter=2, random_state=0, learning_method="online", batch_size=2).fit(X, lengths=lengths)
    assert seen and all(buffers is None for buffers in seen)


@pytest.mark.parametrize(
    "model",
    [
        GaussianHMM(3, covariance_type="diag", n_iter=2, random_state=0),
        GaussianHMM(3, covariance_type="full", n_iter=2, random_state=0),
        GMMHMM(2, n_mix=2, n_iter=2, random_state=0),
    ],
    ids=["gaussian-diag", "gaussian-full", "gmm"],
)
def test_inference_block_by_block_equals_one_block(model, monkeypatch):
    """score, filter, predict and predict_proba over blocks of whole sequences
    give what one block over all rows gives (blocks hold reused work arrays)."""
    import skseq.hmm._base as hmm_base

    _, X, _, lengths = sample_true_model(n_sequences=5, length=120)
    lengths = [120, 1, 239, 60, 180]  # uneven, with a one-row sequence
    X[[5, 130, 450]] = np.nan  # missing rows, in several blocks
    model.fit(X, lengths=lengths)

    def everything():
        return (
            model.score(X, lengths=lengths),
            model.score_sequences(X, lengths=lengths),
            model.filter(X, lengths=lengths),
            model.predict(X, lengths=lengths),
            model.decode(X, lengths=lengths, algorithm="map"),
            model.score_samples(X, lengths=lengths),
        )

    monkeypatch.setattr(hmm_base, "_BLOCK_CELLS", 10**9)
    one_block = everything()
    monkeypatch.setattr(hmm_base, "_BLOCK_CELLS", 3 * 100)  # about 100 rows a block
    assert len(list(model._row_blocks(np.cumsum([0] + lengths)))) >= 2
    for got, expected in zip(everything(), one_block):
        for got_part, expected_part in zip(
            got if isinstance(got, tuple) else (got,),
            expected if isinstance(expected, tuple) else (expected,),
        ):
            np.testing.assert_allclose(got_part, expected_part, rtol=1e-12, atol=1e-12)


# -- exact or loud on hard inputs ----------------------------------------------


def enumerate_paths(model, X):
    """log p(X), posteriors and the best path by enumerating all K^T paths."""
    log_frame = model._compute_log_likelihood(X)
    n_samples, n_states = log_frame.shape
    with np.errstate(divide="ignore"):
        log_start, log_trans = np.log(model.startprob_), np.log(model.transmat_)
    paths = np.array(list(itertools.product(range(n_states), repeat=n_samples)))
    log_joint = log_start[paths[:, 0]] + log_frame[0, paths[:, 0]]
    for t in range(1, n_samples):
        log_joint = log_joint + log_trans[paths[:, t - 1], paths[:, t]] + log_frame[t, paths[:, t]]
    log_likelihood = logsumexp(log_joint)
    weights = np.exp(log_joint - log_likelihood)
    posteriors = np.zeros((n_samples, n_states))
    for t in range(n_samples):
        np.add.at(posteriors[t], paths[:, t], weights)
    return log_likelihood, posteriors, log_joint.max()


def assert_matches_enumeration(model, X):
    log_likelihood, posteriors, best = enumerate_paths(model, X)
    np.testing.assert_allclose(model.score(X), log_likelihood, rtol=1e-9)
    got = model.predict_proba(X)
    np.testing.assert_allclose(got, posteriors, rtol=0, atol=1e-9)
    log_prob, states = model.decode(X)
    np.testing.assert_allclose(log_prob, best, rtol=1e-9)
    # p(z_t = z*_t | X) >= p(X, z*) / p(X) for the Viterbi path z*.
    floor = np.exp(log_prob - log_likelihood)
    assert np.all(got[np.arange(len(states)), states] >= floor * (1 - 1e-9) - 1e-9)


def test_gaussian_hmm_keeps_a_state_whose_emission_underflows_on_the_dominant_path():
    """Row 0 is 800 nats less likely under state 1, but the next three rows
    are 700 nats less likely under state 0 each, and the states cannot switch:
    the path through state 1 carries all the probability."""
    model = GaussianHMM(2, init_params="", params="")
    model.startprob_ = np.array([0.5, 0.5])
    model.transmat_ = np.eye(2)
    model.means_ = np.array([[0.0], [40.0]])
    model.covars_ = np.ones((2, 1))
    X = np.array([[0.0], [37.4], [37.4], [37.4]])
    assert_matches_enumeration(model, X)
    assert model.predict(X).tolist() == [1, 1, 1, 1]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_components=st.integers(1, 4),
    n_samples=st.integers(1, 5),
    scale=st.sampled_from([30.0, 300.0, 1000.0]),
    covariance_type=st.sampled_from(COVARIANCE_TYPES),
    p_zero=st.sampled_from([0.0, 0.5, 0.7]),
)
def test_gaussian_hmm_matches_enumeration_on_extreme_parameters(
    seed, n_components, n_samples, scale, covariance_type, p_zero
):
    """Means hundreds of standard deviations apart, data near random states
    or far from all of them, zeros in the start vector and transmat."""
    rng = np.random.default_rng(seed)
    parameters = random_parameters(rng, n_components, 2, covariance_type)
    parameters["means_"] = parameters["means_"] * scale
    for name in ("startprob_", "transmat_"):
        value = parameters[name]
        value[rng.random(value.shape) < p_zero] = 0.0
        value[..., 0] += value.sum(axis=-1) == 0
        parameters[name] = value / value.sum(axis=-1, keepdims=True)
    model = set_parameters(GaussianHMM(n_components, covariance_type, init_params=""), parameters)
    X = parameters["means_"][rng.integers(n_components, size=n_samples)]
    X = X + rng.normal(size=X.shape) * rng.choice([1.0, scale], size=(n_samples, 1))
    assert_matches_enumeration(model, X)


def test_left_right_gaussian_hmm_with_outlying_rows_has_no_nan():
    """Rows 1-3 lie at the mean of the last of 5 left-right states, which the
    chain cannot reach before row 4: its backward message used to overflow,
    the posteriors turned NaN and fit reported a probability zero."""
    transmat = np.diag(np.full(5, 0.6)) + np.diag(np.full(4, 0.4), 1)
    transmat[-1, -1] = 1.0
    model = GaussianHMM(5, init_params="", n_iter=3)
    model.startprob_ = np.eye(5)[0]
    model.transmat_ = transmat
    model.means_ = np.arange(5.0)[:, None] * 10
    model.covars_ = np.ones((5, 1))
    X = np.repeat(np.arange(5.0) * 10, 6)[:, None]
    X[1:4] = 40.0
    posteriors = model.predict_proba(X)
    assert not np.isnan(posteriors).any()
    np.testing.assert_allclose(posteriors.sum(axis=1), 1.0)

    with np.errstate(divide="ignore"):
        expected = hmm_forward_backward(
            np.log(model.startprob_), np.log(model.transmat_), model._compute_log_likelihood(X)
        )
    np.testing.assert_allclose(model.score(X), expected.log_likelihood, rtol=1e-12)
    model.init_params = ""
    model.fit(X)  # no "probability zero"
    assert np.all(np.isfinite(model.means_)) and np.all(np.isfinite(model.covars_))


def extreme_models():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 5))
    X[100:] += 4
    models = [GaussianHMM(2, covariance_type=c, n_iter=2, random_state=0) for c in COVARIANCE_TYPES]
    models += [
        GMMHMM(2, n_mix=2, covariance_type=c, n_iter=2, random_state=0) for c in ("diag", "full")
    ]
    return X, [model.fit(X) for model in models]


@pytest.mark.parametrize(
    "change",
    [
        lambda X: X.__setitem__(10, 1e154),
        lambda X: X.__imul__(1e300),
        lambda X: X.__setitem__(slice(0, 100), 1e153),
    ],
    ids=["a row of 1e154", "X times 1e300", "100 rows of 1e153"],
)
def test_data_beyond_double_precision_get_the_same_clear_error_everywhere(change):
    """A row of 1e154 (its squared distance to every mean overflows), data
    times 1e300, and 100 rows of 1e153 (each row's log-density is finite, the
    sum is not): score, predict_proba and predict raise the same error."""
    X, models = extreme_models()
    Y = X.copy()
    change(Y)
    for model in models:
        for method in ("score", "predict_proba", "predict", "score_sequences", "decode"):
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)
                with pytest.raises(ValueError, match="too far"):
                    getattr(model, method)(Y)


def test_data_near_the_limit_are_scored_without_nan():
    """Rows of 1e152 and 1.2e154: every log-density is finite (down to about
    -1.4e308); the 1/2 of the quadratic form is applied before its sum, which
    would overflow at 2.9e308."""
    X, models = extreme_models()
    Y = X.copy()
    Y[10] = 1e152
    for model in models:
        score = model.score(Y)
        assert np.isfinite(score) and score < -1e303
        assert not np.isnan(model.predict_proba(Y)).any()
        assert model.predict(Y).shape == (200,)
    for covariance_type in ("diag", "full"):
        model = GaussianHMM(2, covariance_type, init_params="")
        model.startprob_ = np.array([0.5, 0.5])
        model.transmat_ = np.full((2, 2), 0.5)
        model.means_ = np.array([[0.0, 0.0], [1.0, 1.0]])
        model.covars_ = np.ones((2, 2)) if covariance_type == "diag" else np.stack([np.eye(2)] * 2)
        row = np.full((1, 2), 1.2e154)
        expected = -np.log(2 * np.pi) - (0.5 * (row - model.means_) ** 2).sum(axis=1)
        assert np.all(np.isfinite(expected))
        np.testing.assert_allclose(model._compute_log_likelihood(row)[0], expected, rtol=1e-12)
        assert np.isfinite(model.score(np.vstack([row, [[0.0, 0.0]]])))
        assert model.predict(row).shape == (1,)  # a tie in double precision


@pytest.mark.parametrize("cls", [GaussianHMM, GMMHMM])
def test_fitting_overflowing_data_names_the_data(cls):
    X = np.random.default_rng(0).normal(size=(200, 3)) * 1e300
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(ValueError, match="X is too large for double precision"):
            cls(2, random_state=0).fit(X)
