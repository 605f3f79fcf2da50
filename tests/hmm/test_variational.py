"""Variational Bayes HMMs: hmmlearn's numbers, the bound, model selection, SVI.

The lower bound is checked against hmmlearn from the same posteriors, against
enumeration of the state paths of a tiny model (its definition, written out
here), and against the exact evidence of a tiny categorical HMM (the bound is
below it).  Stochastic variational inference is checked step by step (the
natural-gradient step on the natural parameters) and on a stream.
"""

import itertools
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import digamma, gammaln, logsumexp
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from skseq import GaussianHMM, VariationalCategoricalHMM, VariationalGaussianHMM
from skseq.hmm._variational import dirichlet_divergence, wishart_divergence

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

COVARIANCE_TYPES = ("spherical", "diag", "full", "tied")
GAUSSIAN_GROUPS = ("startprob", "transmat", "means", "beta", "dof", "scale")


def three_clusters(seed=0):
    rng = np.random.default_rng(seed)
    X = np.concatenate(
        [rng.normal(-3, 1, (100, 2)), rng.normal(3, 1, (100, 2)), rng.normal(0, 0.5, (100, 2))]
    )
    return rng.permutation(X), [150, 150]


def initial_posteriors(model, groups):
    """The priors and posteriors of a model after one fit step, as arrays."""
    return {
        f"{group}_{kind}_": np.copy(getattr(model, f"{group}_{kind}_"))
        for group in groups
        for kind in ("prior", "posterior")
    }


def started_from(model, posteriors):
    for name, value in posteriors.items():
        setattr(model, name, float(value) if np.ndim(value) == 0 else np.copy(value))
    return model


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_gaussian_matches_hmmlearn_from_the_same_posteriors(covariance_type):
    vhmm = pytest.importorskip("hmmlearn.vhmm")
    X, lengths = three_clusters()
    start = VariationalGaussianHMM(
        3, covariance_type=covariance_type, random_state=0, n_iter=1, tol=-np.inf
    ).fit(X, lengths=lengths)
    posteriors = initial_posteriors(start, GAUSSIAN_GROUPS)
    ours = started_from(
        VariationalGaussianHMM(
            3, covariance_type=covariance_type, n_iter=8, tol=-np.inf, init_params=""
        ),
        posteriors,
    ).fit(X, lengths=lengths)
    theirs = vhmm.VariationalGaussianHMM(
        3, covariance_type=covariance_type, n_iter=8, tol=-np.inf, init_params=""
    )
    theirs.n_features = 2
    started_from(theirs, posteriors)
    theirs.covars_ = start._covars_
    theirs.fit(X, lengths)
    # hmmlearn's bound leaves out the normal densities' -D/2 log(2 pi) per row.
    constant = X.size / 2 * np.log(2 * np.pi)
    np.testing.assert_allclose(
        np.array(ours.monitor_.history) + constant, theirs.monitor_.history, rtol=1e-11
    )
    for group in GAUSSIAN_GROUPS:
        name = f"{group}_posterior_"
        np.testing.assert_allclose(
            getattr(ours, name), getattr(theirs, name), rtol=1e-10, atol=1e-10, err_msg=name
        )
    for name in ("startprob_", "transmat_", "means_", "covars_"):
        np.testing.assert_allclose(
            getattr(ours, name), getattr(theirs, name), rtol=1e-10, atol=1e-12, err_msg=name
        )
    np.testing.assert_allclose(ours.score(X, lengths=lengths), theirs.score(X, lengths), rtol=1e-12)
    np.testing.assert_array_equal(ours.predict(X, lengths=lengths), theirs.predict(X, lengths))
    np.testing.assert_allclose(
        ours.predict_proba(X, lengths=lengths), theirs.predict_proba(X, lengths), atol=1e-10
    )


def test_categorical_matches_hmmlearn_from_the_same_posteriors():
    vhmm = pytest.importorskip("hmmlearn.vhmm")
    X = np.random.default_rng(0).integers(0, 4, (300, 1))
    lengths = [120, 180]
    groups = ("startprob", "transmat", "emissionprob")
    start = VariationalCategoricalHMM(3, random_state=0, n_iter=1, tol=-np.inf).fit(
        X, lengths=lengths
    )
    posteriors = initial_posteriors(start, groups)
    ours = started_from(
        VariationalCategoricalHMM(3, n_iter=8, tol=-np.inf, init_params=""), posteriors
    ).fit(X, lengths=lengths)
    theirs = vhmm.VariationalCategoricalHMM(3, n_iter=8, tol=-np.inf, init_params="")
    theirs.n_features = 4
    started_from(theirs, posteriors).fit(X, lengths)
    np.testing.assert_allclose(ours.monitor_.history, theirs.monitor_.history, rtol=1e-11)
    for name in ("startprob_posterior_", "transmat_posterior_", "emissionprob_posterior_"):
        np.testing.assert_allclose(getattr(ours, name), getattr(theirs, name), rtol=1e-10)
    np.testing.assert_allclose(ours.emissionprob_, theirs.emissionprob_, rtol=1e-10)
    np.testing.assert_allclose(ours.score(X, lengths=lengths), theirs.score(X, lengths), rtol=1e-12)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_the_bound_never_decreases_on_random_data(covariance_type, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((200, 3)) * rng.uniform(0.1, 10, 3) + rng.normal(0, 5, 3)
    model = VariationalGaussianHMM(
        4, covariance_type=covariance_type, random_state=seed, n_iter=40, tol=-np.inf
    ).fit(X, lengths=[50, 150])
    history = np.array(model.monitor_.history)
    assert np.all(np.diff(history) >= -1e-9 * np.abs(history[1:]))


@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    scale=st.sampled_from([1e-4, 1e-2, 1.0, 1e2, 1e4]),
    offset=st.sampled_from([0.0, 1e3, -1e5]),
    n_components=st.integers(1, 4),
    covariance_type=st.sampled_from(COVARIANCE_TYPES),
    seed=st.integers(0, 2**16),
)
def test_the_bound_never_decreases_whatever_the_scale(
    scale, offset, n_components, covariance_type, seed
):
    """Data far from unit scale and far from the origin: a finite bound that never falls."""
    rng = np.random.default_rng(seed)
    X = offset + scale * (rng.standard_normal((60, 2)) + 4 * rng.integers(0, 2, (60, 1)))
    model = VariationalGaussianHMM(
        n_components, covariance_type=covariance_type, random_state=seed, n_iter=15, tol=-np.inf
    ).fit(X)
    history = np.array(model.monitor_.history)
    assert np.all(np.isfinite(history))
    assert np.all(np.diff(history) >= -1e-9 * np.abs(history[1:]))


@pytest.mark.parametrize("seed", range(3))
def test_the_categorical_bound_never_decreases_on_random_data(seed):
    X = np.random.default_rng(seed).integers(0, 5, (200, 2))
    model = VariationalCategoricalHMM(3, random_state=seed, n_iter=40, tol=-np.inf).fit(X)
    history = np.array(model.monitor_.history)
    assert np.all(np.diff(history) >= -1e-9 * np.abs(history[1:]))


def expected_log_gaussian(x, mean, beta, dof, scale):
    """E_q[log N(x | mu, Lambda^-1)] under the normal-Wishart q, written out:
    -D/2 log 2 pi + 1/2 E log|Lambda| - 1/2 (D / beta + dof (x - m)^T scale^-1 (x - m))."""
    n_features = len(x)
    log_det = (
        digamma(0.5 * (dof - np.arange(n_features))).sum()
        + n_features * np.log(2)
        - np.linalg.slogdet(scale)[1]
    )
    difference = x - mean
    return (
        -0.5 * n_features * np.log(2 * np.pi)
        + 0.5 * log_det
        - 0.5 * (n_features / beta + dof * difference @ np.linalg.solve(scale, difference))
    )


@pytest.mark.filterwarnings("ignore:Fitting a model with:UserWarning")
def test_elbo_is_the_bound_by_enumeration_of_paths():
    """Sum over every path of exp E_q[log p(x, z | theta)], minus the KL divergences."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(5, 2))
    model = VariationalGaussianHMM(2, covariance_type="full", random_state=0, n_iter=3).fit(X)
    log_start = digamma(model.startprob_posterior_) - digamma(model.startprob_posterior_.sum())
    log_trans = digamma(model.transmat_posterior_) - digamma(
        model.transmat_posterior_.sum(axis=1, keepdims=True)
    )
    frame = np.array(
        [
            [
                expected_log_gaussian(
                    x,
                    model.means_posterior_[j],
                    model.beta_posterior_[j],
                    model.dof_posterior_[j],
                    model.scale_posterior_[j],
                )
                for j in range(2)
            ]
            for x in X
        ]
    )
    paths = [
        log_start[z[0]]
        + sum(log_trans[a, b] for a, b in zip(z[:-1], z[1:]))
        + sum(frame[t, z[t]] for t in range(5))
        for z in itertools.product(range(2), repeat=5)
    ]
    divergence = (
        dirichlet_divergence(model.startprob_posterior_, model.startprob_prior_)
        + dirichlet_divergence(model.transmat_posterior_, model.transmat_prior_)
        + sum(
            wishart_divergence(
                model.dof_posterior_[j],
                model.scale_posterior_[j],
                model.dof_prior_[j],
                model.scale_prior_[j],
            )
            for j in range(2)
        )
    )
    # E over Lambda of KL between the normals of the means (linear in Lambda).
    for j in range(2):
        ratio = model.beta_prior_[j] / model.beta_posterior_[j]
        difference = model.means_posterior_[j] - model.means_prior_[j]
        precision = model.dof_posterior_[j] * np.linalg.inv(model.scale_posterior_[j])
        divergence += 0.5 * (
            2 * (ratio - 1 - np.log(ratio))
            + model.beta_prior_[j] * difference @ precision @ difference
        )
    np.testing.assert_allclose(model.elbo_sequences(X), [logsumexp(paths)], rtol=1e-12)
    np.testing.assert_allclose(model.elbo(X), logsumexp(paths) - divergence, rtol=1e-12)


def test_divergences_against_sampling():
    """Monte Carlo KL of Dirichlet and Wishart densities (scipy's) agrees with the closed forms."""
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    q, p = np.array([3.0, 1.5, 7.0]), np.array([1.0, 2.0, 0.5])
    draws = rng.dirichlet(q, 200_000)
    sampled = np.mean(stats.dirichlet(q).logpdf(draws.T) - stats.dirichlet(p).logpdf(draws.T))
    np.testing.assert_allclose(dirichlet_divergence(q, p), sampled, rtol=1e-2)
    scale_q, scale_p = np.array([[2.0, 0.3], [0.3, 1.0]]), np.array([[1.0, -0.2], [-0.2, 0.5]])
    wishart_q, wishart_p = (
        stats.wishart(df=6.0, scale=np.linalg.inv(scale_q)),
        stats.wishart(df=3.5, scale=np.linalg.inv(scale_p)),
    )
    draws = wishart_q.rvs(100_000, random_state=1)
    sampled = np.mean(wishart_q.logpdf(draws.T) - wishart_p.logpdf(draws.T))
    np.testing.assert_allclose(wishart_divergence(6.0, scale_q, 3.5, scale_p), sampled, rtol=2e-2)


def test_the_bound_is_below_the_exact_evidence():
    """A tiny categorical HMM's evidence: every path, its Dirichlet-multinomial integral."""
    X = np.array([[0], [1], [1], [0], [1], [1]])
    model = VariationalCategoricalHMM(
        2, startprob_prior=0.7, transmat_prior=1.3, emissionprob_prior=0.9, random_state=0
    ).fit(X)

    def log_beta(alpha):
        return gammaln(alpha).sum(axis=-1) - gammaln(alpha.sum(axis=-1))

    evidence = []
    for z in itertools.product(range(2), repeat=len(X)):
        start = np.bincount([z[0]], minlength=2)
        trans = np.zeros((2, 2))
        for a, b in zip(z[:-1], z[1:]):
            trans[a, b] += 1
        emissions = np.zeros((2, 2))
        for state, symbol in zip(z, X[:, 0]):
            emissions[state, symbol] += 1
        evidence.append(
            log_beta(0.7 + start)
            - log_beta(np.full(2, 0.7))
            + np.sum(log_beta(1.3 + trans) - log_beta(np.full((2, 2), 1.3)))
            + np.sum(log_beta(0.9 + emissions) - log_beta(np.full((2, 2), 0.9)))
        )
    log_evidence = logsumexp(evidence)
    bound = model.elbo(X)
    assert bound <= log_evidence
    assert bound > log_evidence - 2.0  # a tight bound on six rows, not an arbitrary number


def mcgrory_titterington(rng, n_sequences=10, length=100):
    """McGrory & Titterington's four-state 1-D HMM (hmmlearn's example):
    means -1.5, 0, 1.5, 3, standard deviation 0.5."""
    transmat = np.array(
        [[0.2, 0.2, 0.3, 0.3], [0.3, 0.2, 0.2, 0.3], [0.2, 0.3, 0.3, 0.2], [0.3, 0.3, 0.2, 0.2]]
    )
    model = GaussianHMM(4, covariance_type="full", init_params="")
    model.startprob_ = np.full(4, 0.25)
    model.transmat_ = transmat
    model.means_ = [[-1.5], [0.0], [1.5], [3.0]]
    model.covars_ = np.full((4, 1, 1), 0.25)
    samples = [model.sample(length, random_state=rng)[0] for _ in range(n_sequences)]
    return np.concatenate(samples), [length] * n_sequences


def test_an_unused_state_collapses_to_its_prior_where_em_keeps_five():
    X, lengths = mcgrory_titterington(np.random.RandomState(1))
    vb = VariationalGaussianHMM(5, random_state=0, n_iter=1000, tol=1e-9, n_init=5).fit(
        X, lengths=lengths
    )
    em = GaussianHMM(5, covariance_type="full", random_state=1, n_iter=1000, tol=1e-6).fit(
        X, lengths=lengths
    )
    em_occupancy = em.predict_proba(X, lengths=lengths).sum(axis=0)
    # beta_posterior_ - beta_prior_ is the state's expected count of rows under q(Z).
    unused = np.flatnonzero(vb.beta_posterior_ - vb.beta_prior_ < 1e-3)
    assert 1 <= unused.size < 5
    # Its posteriors are its priors: it learned nothing.
    for name in ("means", "dof", "scale"):
        np.testing.assert_allclose(
            getattr(vb, f"{name}_posterior_")[unused],
            getattr(vb, f"{name}_prior_")[unused],
            rtol=1e-3,
            atol=1e-4,
        )
    assert np.all(em_occupancy > 50)  # EM spreads the rows over all five


def test_natural_gradient_step_of_partial_fit():
    """lambda <- (1 - rho) lambda + rho (prior + N / B s_batch) on every natural parameter."""
    X, lengths = three_clusters(1)
    X = X[:200]
    model = VariationalGaussianHMM(
        3, covariance_type="full", random_state=0, n_iter=3, tol=-np.inf, learning_offset=2.0
    ).fit(X)
    target = started_from(
        VariationalGaussianHMM(3, covariance_type="full", n_iter=1, tol=-np.inf, init_params=""),
        initial_posteriors(model, GAUSSIAN_GROUPS),
    ).fit(X)
    before = initial_posteriors(model, GAUSSIAN_GROUPS)
    model.set_params(total_samples=200).partial_fit(X)
    step = (2.0 + 4) ** -0.6

    def natural(posteriors_of):
        beta, means = posteriors_of("beta"), posteriors_of("means")
        return {
            "startprob": posteriors_of("startprob"),
            "transmat": posteriors_of("transmat"),
            "beta": beta,
            "beta means": beta[:, None] * means,
            "dof": posteriors_of("dof"),
            "scale + beta m m'": posteriors_of("scale")
            + np.einsum("c,ci,cj->cij", beta, means, means),
        }

    old = natural(lambda group: before[f"{group}_posterior_"])
    new = natural(lambda group: getattr(model, f"{group}_posterior_"))
    full_step = natural(lambda group: getattr(target, f"{group}_posterior_"))
    for name in old:
        np.testing.assert_allclose(
            new[name], (1 - step) * old[name] + step * full_step[name], rtol=1e-9, err_msg=name
        )


def test_svi_on_a_stream_reaches_the_batch_bound():
    """Chunks of one long sequence through partial_fit: the bound per row within 0.5 %."""
    true = GaussianHMM(3, covariance_type="diag", init_params="")
    true.startprob_ = np.full(3, 1 / 3)
    true.transmat_ = [[0.95, 0.03, 0.02], [0.02, 0.95, 0.03], [0.03, 0.02, 0.95]]
    true.means_ = [[-2.0, 0.0], [0.0, 2.0], [2.0, 0.0]]
    true.covars_ = [[1.0, 1.0], [1.0, 1.0], [0.5, 0.5]]
    X = true.sample(50_000, random_state=0)[0]
    batch = VariationalGaussianHMM(3, covariance_type="diag", random_state=0, tol=1e-3).fit(X)
    stream = VariationalGaussianHMM(
        3, covariance_type="diag", random_state=0, learning_offset=10.0, total_samples=len(X)
    )
    for start in range(0, len(X), 1000):
        stream.partial_fit(X[start : start + 1000])
    batch_bound, stream_bound = batch.elbo(X) / len(X), stream.elbo(X) / len(X)
    assert abs(stream_bound - batch_bound) < 5e-3 * abs(batch_bound)
    assert stream.n_batch_iter_ == 50


def test_elbo_is_the_next_iterations_monitored_value():
    X, lengths = three_clusters(2)
    model = VariationalGaussianHMM(3, covariance_type="diag", random_state=0, n_iter=4, tol=-np.inf)
    four = clone(model).fit(X, lengths=lengths)
    five = clone(model).set_params(n_iter=5).fit(X, lengths=lengths)
    np.testing.assert_allclose(four.elbo(X, lengths=lengths), five.monitor_.history[-1], rtol=1e-12)
    np.testing.assert_allclose(four.lower_bound_, four.monitor_.history[-1])


def test_threads_and_sampling():
    X, lengths = three_clusters(3)
    model = VariationalGaussianHMM(3, covariance_type="tied", random_state=0, n_iter=5)
    one = clone(model).fit(X, lengths=lengths)
    two = clone(model).set_params(n_jobs=2).fit(X, lengths=lengths)
    np.testing.assert_allclose(two.monitor_.history, one.monitor_.history, rtol=1e-10)
    np.testing.assert_allclose(two.scale_posterior_, one.scale_posterior_, rtol=1e-10)
    np.testing.assert_allclose(
        two.elbo_sequences(X, lengths=lengths), one.elbo_sequences(X, lengths=lengths), rtol=1e-12
    )
    samples, states = one.sample(500, random_state=0)
    assert samples.shape == (500, 2) and set(states) <= {0, 1, 2}
    # The sample's rows follow the derived point parameters.
    for state in np.unique(states):
        np.testing.assert_allclose(
            samples[states == state].mean(axis=0), one.means_[state], atol=0.5
        )


def test_dask_backend_runs_the_same_fit():
    distributed = pytest.importorskip("distributed")
    from joblib import parallel_config

    X, lengths = three_clusters(4)
    model = VariationalGaussianHMM(3, n_iter=3, random_state=0, n_jobs=2)
    reference = clone(model).fit(X, lengths=lengths)
    with (
        distributed.LocalCluster(
            n_workers=2, processes=False, protocol="tcp", host="127.0.0.1", dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
        parallel_config(backend="dask"),
    ):
        with distributed.get_task_stream(client) as task_stream:
            on_dask = clone(model).fit(X, lengths=lengths)
    assert len(task_stream.data) > 0
    np.testing.assert_allclose(on_dask.monitor_.history, reference.monitor_.history, rtol=1e-10)


def test_hand_set_posteriors_are_kept_or_overwritten_with_hmmlearns_warning():
    X, lengths = three_clusters(5)
    fitted = VariationalGaussianHMM(3, random_state=0, n_iter=2).fit(X, lengths=lengths)
    model = VariationalGaussianHMM(3, random_state=1, n_iter=1, init_params="stc")
    started_from(model, initial_posteriors(fitted, ("means", "beta")))
    with pytest.warns(UserWarning, match="will be overwritten"):
        model.set_params(init_params="stmc").fit(X, lengths=lengths)
    model = VariationalGaussianHMM(3, random_state=1, n_iter=0, init_params="stc")
    started_from(model, initial_posteriors(fitted, ("means", "beta")))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        model.fit(X, lengths=lengths)
    np.testing.assert_array_equal(model.means_posterior_, fitted.means_posterior_)


@pytest.mark.parametrize(
    "parameters, message",
    [
        ({"dof_prior": 0.5}, "dof_prior must be > 1.0"),
        ({"beta_prior": -1.0}, "beta_prior must be > 0"),
        ({"scale_prior": -np.eye(2)}, "scale_prior must be"),
        ({"startprob_prior": 0.0}, "startprob_prior must be > 0"),
        ({"means_prior": np.nan}, "means_prior must be finite"),
    ],
)
def test_bad_priors_are_refused_by_name(parameters, message):
    X, _ = three_clusters(6)
    with pytest.raises(ValueError, match=message):
        VariationalGaussianHMM(2, **parameters).fit(X)


def test_categorical_several_columns_and_alphabets():
    rng = np.random.default_rng(7)
    X = np.column_stack([rng.integers(0, 4, 300), rng.integers(0, 2, 300)])
    model = VariationalCategoricalHMM(2, random_state=0, n_iter=30).fit(X)
    assert model.emissionprob_posterior_.shape == (2, 2, 4)
    np.testing.assert_array_equal(model.emissionprob_posterior_[:, 1, 2:], 0)
    np.testing.assert_allclose(model.emissionprob_.sum(axis=-1), 1)
    history = np.array(model.monitor_.history)
    assert np.all(np.diff(history) >= -1e-9 * np.abs(history[1:]))
    assert np.isfinite(model.elbo(X))


def test_convergence_warning_and_the_bound_as_lower_bound_():
    X, lengths = three_clusters(8)
    with pytest.warns(ConvergenceWarning):
        model = VariationalGaussianHMM(3, random_state=0, n_iter=2).fit(X, lengths=lengths)
    assert model.lower_bound_ == model.monitor_.history[-1]


def test_missing_rows_are_integrated_out_of_the_bound_and_statistics():
    """A NaN row adds no emission term and no statistics; the bound still never decreases."""
    X, lengths = three_clusters(9)
    X = X.copy()
    X[[5, 77, 151]] = np.nan
    model = VariationalGaussianHMM(3, covariance_type="diag", random_state=0, n_iter=20)
    model.fit(X, lengths=lengths)
    history = np.array(model.monitor_.history)
    assert np.all(np.isfinite(history))
    assert np.all(np.diff(history) >= -1e-9 * np.abs(history[1:]))
    # The states' expected rows count the observed rows only.
    np.testing.assert_allclose(
        (model.beta_posterior_ - model.beta_prior_).sum(), len(X) - 3, rtol=1e-10
    )


# -- known states (semi-supervised VB) ---------------------------------------


def two_levels(seed=0):
    rng = np.random.default_rng(seed)
    X = np.concatenate([rng.normal(0, 1, (300, 1)), rng.normal(5, 1, (300, 1))])
    known = np.full(600, -1)
    known[:5], known[300:305] = 1, 0  # the labels name the states against the data's order
    return X, known


@pytest.mark.parametrize("seed", range(5))
def test_known_states_anchor_the_variational_states_to_their_labels(seed):
    X, known = two_levels()
    model = VariationalGaussianHMM(2, random_state=seed).fit(X, known_states=known)
    np.testing.assert_allclose(model.means_.ravel(), [5.0, 0.0], atol=0.2)
    assert np.mean(model.predict(X) == np.repeat([1, 0], 300)) > 0.95


def test_known_states_anchor_svi_on_a_stream():
    X, known = two_levels()
    model = VariationalGaussianHMM(2, random_state=1)
    for start in range(0, 600, 100):
        model.partial_fit(X[start : start + 100], known_states=known[start : start + 100])
    assert model.means_[1, 0] < 1.0 < 4.0 < model.means_[0, 0]


def test_fully_known_states_give_the_counted_posteriors_in_one_step():
    rng = np.random.default_rng(3)
    X = rng.integers(0, 3, (200, 1))
    states = rng.integers(0, 2, 200)
    lengths = [120, 80]
    model = VariationalCategoricalHMM(2, random_state=0, n_iter=1, tol=-np.inf).fit(
        X, lengths=lengths, known_states=states
    )
    starts = np.bincount(states[[0, 120]], minlength=2)
    same = np.ones(199, dtype=bool)
    same[119] = False
    transitions = np.zeros((2, 2))
    np.add.at(transitions, (states[:-1][same], states[1:][same]), 1.0)
    emissions = np.zeros((2, 3))
    np.add.at(emissions, (states, X[:, 0]), 1.0)
    np.testing.assert_allclose(model.startprob_posterior_, model.startprob_prior_ + starts)
    np.testing.assert_allclose(model.transmat_posterior_, model.transmat_prior_ + transitions)
    np.testing.assert_allclose(
        model.emissionprob_posterior_, model.emissionprob_prior_ + emissions, rtol=1e-12
    )


# -- missing entries -------------------------------------------------------------


def test_a_missing_symbol_leaves_its_columns_factor_out_of_the_variational_e_step():
    rng = np.random.default_rng(4)
    X = rng.integers(0, 3, (60, 2)).astype(float)
    model = VariationalCategoricalHMM(2, random_state=0, n_iter=3).fit(X)
    with_gap = X.copy()
    with_gap[7, 1] = np.nan
    complete_terms = model._estep_emission_terms(X)[0]
    gap_terms = model._estep_emission_terms(with_gap)[0]
    posterior = model.emissionprob_posterior_[:, 1, int(X[7, 1])]
    column_factor = digamma(posterior) - digamma(model.emissionprob_posterior_[:, 1].sum(axis=1))
    np.testing.assert_allclose(gap_terms[7], complete_terms[7] - column_factor, rtol=1e-12)
    np.testing.assert_array_equal(np.delete(gap_terms, 7, 0), np.delete(complete_terms, 7, 0))
    refit = VariationalCategoricalHMM(2, random_state=0, n_iter=20, tol=-np.inf).fit(with_gap)
    assert np.all(np.diff(refit.monitor_.history) >= -1e-9 * np.abs(refit.monitor_.history[1:]))


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_partially_observed_rows_are_refused_by_the_variational_gaussian(covariance_type):
    X, lengths = three_clusters()
    X[10, 1] = np.nan
    model = VariationalGaussianHMM(3, covariance_type=covariance_type, random_state=0)
    with pytest.raises(ValueError, match="row 10 of X has 1 of its 2 entries missing"):
        model.fit(X, lengths=lengths)
    X[10] = np.nan  # a row missing in full is integrated out
    model.fit(X, lengths=lengths)
    with pytest.raises(ValueError, match="entries missing"):
        model.partial_fit(np.array([[0.0, np.nan], [1.0, 2.0]]))
    with pytest.raises(ValueError, match="entries missing"):
        model.predict(np.array([[0.0, np.nan], [1.0, 2.0]]))
