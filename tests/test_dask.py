"""The joblib dask backend runs the estimators' work on a dask cluster.

A ``LocalCluster`` of two worker processes (one thread each) on loopback:
the E-step blocks of ``fit`` and ``partial_fit``, the blocks of ``score``,
and the gradient shards of the networks' training are pickled to the
workers, and the results equal those of the same ``n_jobs`` in threads.
"""

import warnings

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
from joblib import parallel_config  # noqa: E402

from skseq import (  # noqa: E402
    AutoregressiveHMM,
    CategoricalHMM,
    GaussianHMM,
    PoissonHMM,
    SemiMarkovGaussianHMM,
)
from skseq.lds import LinearGaussianSSM  # noqa: E402
from skseq.neural import ElmanRNNClassifier, SelectiveSSMRegressor  # noqa: E402

LENGTHS = [120, 80, 150, 100, 90, 60]


N_WORKERS = 2


@pytest.fixture(scope="module")
def client():
    with (
        warnings.catch_warnings(),
        distributed.LocalCluster(
            n_workers=N_WORKERS,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        warnings.simplefilter("ignore")
        yield client


def on_workers(client, work):
    """Run ``work()`` under the dask backend; return its result and the
    addresses of the workers that ran tasks meanwhile."""
    with parallel_config(backend="dask"), distributed.get_task_stream(client) as stream:
        result = work()
    workers = {task["worker"] for task in stream.data}
    assert workers, "no task ran on the cluster"
    # On a loaded machine the scheduler can drop a worker whose heartbeat is late
    # until it registers again (seen once with the debug kernels): wait for both.
    client.wait_for_workers(N_WORKERS, timeout=120)
    assert workers <= set(client.scheduler_info()["workers"])
    return result


def sequences(kind, seed=0):
    rng = np.random.default_rng(seed)
    n = sum(LENGTHS)
    if kind == "counts":
        return rng.poisson(np.repeat(rng.uniform(2, 12, size=len(LENGTHS)), LENGTHS))[:, None]
    if kind == "symbols":
        return rng.integers(0, 4, size=(n, 1))
    return np.cumsum(rng.normal(size=(n, 2)), axis=0) * 0.1 + rng.normal(size=(n, 2))


def hmm_and_data():
    common = dict(n_iter=6, tol=-np.inf, random_state=0, n_jobs=2)
    return [
        (GaussianHMM(3, covariance_type="full", **common), sequences("real")),
        (PoissonHMM(2, **common), sequences("counts")),
        (CategoricalHMM(2, **common), sequences("symbols")),
    ]


def assert_same_parameters(local, remote, rtol=1e-12):
    for name in ("startprob_", "transmat_", "means_", "covars_", "lambdas_", "emissionprob_"):
        if hasattr(local, name):
            np.testing.assert_allclose(getattr(remote, name), getattr(local, name), rtol=rtol)


@pytest.mark.parametrize("index", range(3), ids=["gaussian", "poisson", "categorical"])
def test_hmm_fit_score_and_partial_fit_on_the_cluster_equal_threads(client, index):
    local, X = hmm_and_data()[index]
    remote, _ = hmm_and_data()[index]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local.fit(X, lengths=LENGTHS)
        on_workers(client, lambda: remote.fit(X, lengths=LENGTHS))
    assert_same_parameters(local, remote)
    assert on_workers(client, lambda: remote.score(X, lengths=LENGTHS)) == pytest.approx(
        local.score(X, lengths=LENGTHS), rel=1e-12
    )
    np.testing.assert_allclose(
        on_workers(client, lambda: remote.score_sequences(X, lengths=LENGTHS)),
        local.score_sequences(X, lengths=LENGTHS),
        rtol=1e-12,
    )
    # partial_fit: the complete sequences between a batch's first and last
    # go through the parallel E step.
    local.partial_fit(X, lengths=LENGTHS)
    on_workers(client, lambda: remote.partial_fit(X, lengths=LENGTHS))
    assert_same_parameters(local, remote)


def test_semi_markov_hmm_on_the_cluster_equals_threads(client):
    """The semi-Markov E step (its chain hook) goes to the workers like the HMMs'."""
    X = sequences("real")

    def model():
        return SemiMarkovGaussianHMM(2, max_duration=8, n_iter=4, tol=-np.inf, random_state=0,
                                     n_jobs=2)  # fmt: skip

    local, remote = model(), model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local.fit(X, lengths=LENGTHS)
        on_workers(client, lambda: remote.fit(X, lengths=LENGTHS))
    assert_same_parameters(local, remote)
    np.testing.assert_allclose(remote.duration_rates_, local.duration_rates_, rtol=1e-10)
    assert on_workers(client, lambda: remote.score(X, lengths=LENGTHS)) == pytest.approx(
        local.score(X, lengths=LENGTHS), rel=1e-12
    )
    local.partial_fit(X, lengths=LENGTHS)
    on_workers(client, lambda: remote.partial_fit(X, lengths=LENGTHS))
    np.testing.assert_allclose(remote.duration_probs_, local.duration_probs_, rtol=1e-10)


def test_hmm_fit_with_known_states_on_the_cluster_equals_threads(client):
    """The E-step blocks pickled to the workers carry the labels (a column of
    EM's data) and clamp them as the threads do."""
    X = sequences("real")
    known = np.where(np.random.default_rng(3).random(len(X)) < 0.2, np.arange(len(X)) % 3, -1)
    local, remote = (GaussianHMM(3, n_iter=6, tol=-np.inf, random_state=0, n_jobs=2) for _ in "ab")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local.fit(X, lengths=LENGTHS, known_states=known)
        on_workers(client, lambda: remote.fit(X, lengths=LENGTHS, known_states=known))
    assert_same_parameters(local, remote)
    np.testing.assert_allclose(remote.monitor_.history, local.monitor_.history, rtol=1e-12)


def test_autoregressive_hmm_with_controls_on_the_cluster_equals_threads(client):
    """EM's data rows carry their lags and controls to the workers."""
    X = sequences("real")
    u = np.random.default_rng(4).normal(size=(len(X), 1))
    local, remote = (
        AutoregressiveHMM(3, n_lags=2, n_iter=4, tol=-np.inf, random_state=0, n_jobs=2)
        for _ in "ab"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local.fit(X, lengths=LENGTHS, controls=u)
        on_workers(client, lambda: remote.fit(X, lengths=LENGTHS, controls=u))
    for name in ("transmat_", "coefs_", "intercepts_", "covars_"):
        np.testing.assert_allclose(getattr(remote, name), getattr(local, name), rtol=1e-12)
    assert on_workers(
        client, lambda: remote.score(X, lengths=LENGTHS, controls=u)
    ) == pytest.approx(local.score(X, lengths=LENGTHS, controls=u), rel=1e-12)
    local.partial_fit(X, lengths=LENGTHS, controls=u)
    on_workers(client, lambda: remote.partial_fit(X, lengths=LENGTHS, controls=u))
    np.testing.assert_allclose(remote.coefs_, local.coefs_, rtol=1e-12)


def test_lgssm_fit_score_and_partial_fit_on_the_cluster_equal_threads(client):
    X = sequences("real")

    def model():
        return LinearGaussianSSM(2, n_iter=5, tol=0.0, random_state=0, n_jobs=2)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local = model().fit(X, lengths=LENGTHS)
        remote = on_workers(client, lambda: model().fit(X, lengths=LENGTHS))
    for name in ("transition_matrix_", "observation_matrix_", "observation_covariance_"):
        np.testing.assert_allclose(getattr(remote, name), getattr(local, name), rtol=1e-12)
    assert on_workers(client, lambda: remote.score(X, lengths=LENGTHS)) == pytest.approx(
        local.score(X, lengths=LENGTHS), rel=1e-12
    )
    np.testing.assert_allclose(
        on_workers(client, lambda: remote.score_sequences(X, lengths=LENGTHS)),
        local.score_sequences(X, lengths=LENGTHS),
        rtol=1e-12,
    )
    local.partial_fit(X, lengths=LENGTHS)
    on_workers(client, lambda: remote.partial_fit(X, lengths=LENGTHS))
    np.testing.assert_allclose(remote.transition_matrix_, local.transition_matrix_, rtol=1e-12)


@pytest.mark.parametrize("estimator", [SelectiveSSMRegressor, ElmanRNNClassifier])
def test_network_training_on_the_cluster_equals_threads(client, estimator):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 12, 2)).astype(np.float32)
    if estimator is ElmanRNNClassifier:
        y = (X[:, :, 0].sum(axis=1) > 0).astype(int)
        params = dict(d_model=8, n_layers=1)
    else:
        y = np.cumsum(X[:, :, 0], axis=1)
        params = dict(d_model=8, n_layers=1, d_state=4)

    def model():
        return estimator(**params, batch_size=32, max_iter=2, random_state=0, n_jobs=2)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local = model().fit(X, y)
        remote = on_workers(client, lambda: model().fit(X, y))
    assert local.parameters_.keys() == remote.parameters_.keys()
    for name, value in local.parameters_.items():
        np.testing.assert_allclose(remote.parameters_[name], value, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(remote.loss_curve_, local.loss_curve_, rtol=1e-5)


def test_deep_markov_model_training_on_the_cluster_equals_threads(client):
    from skseq import DeepMarkovModel

    rng = np.random.default_rng(0)
    angle = np.cumsum(rng.normal(0.3, 0.05, size=(16, 12)), axis=1)
    X = np.stack([np.sin(angle), np.cos(angle)], axis=-1).reshape(-1, 2)
    lengths = [12] * 16

    def model():
        return DeepMarkovModel(
            2,
            transition_hidden_size=8,
            emission_hidden_size=8,
            inference_hidden_size=8,
            batch_size=8,
            max_iter=2,
            random_state=0,
            n_jobs=2,
        )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local = model().fit(X, lengths=lengths)
        remote = on_workers(client, lambda: model().fit(X, lengths=lengths))
    for name, value in local.parameters_.items():
        np.testing.assert_allclose(remote.parameters_[name], value, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(remote.elbo_curve_, local.elbo_curve_, rtol=1e-5)


def test_input_driven_hmm_on_the_cluster_equals_threads(client):
    """The controls travel to the workers as columns of EM's data, and the
    transition weights' statistics add up as in threads."""
    from skseq import InputDrivenGaussianHMM

    X = sequences("real")
    controls = np.random.default_rng(4).normal(size=(len(X), 2))
    local, remote = (
        InputDrivenGaussianHMM(2, n_iter=5, tol=-np.inf, random_state=0, n_jobs=2) for _ in "ab"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local.fit(X, lengths=LENGTHS, controls=controls)
        on_workers(client, lambda: remote.fit(X, lengths=LENGTHS, controls=controls))
    assert_same_parameters(local, remote)
    np.testing.assert_allclose(remote.transition_coefs_, local.transition_coefs_, rtol=1e-12)
    assert on_workers(
        client, lambda: remote.score(X, lengths=LENGTHS, controls=controls)
    ) == pytest.approx(local.score(X, lengths=LENGTHS, controls=controls), rel=1e-12)
