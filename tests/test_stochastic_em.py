"""Stochastic EM: partial_fit, streams in chunks, online fit."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from skseq import GMMHMM, CategoricalHMM, GaussianHMM, MultinomialHMM, PoissonHMM

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

TRUE_GAUSSIAN = dict(
    startprob_init=[0.5, 0.3, 0.2],
    transmat_init=[[0.95, 0.03, 0.02], [0.04, 0.92, 0.04], [0.03, 0.03, 0.94]],
    means_init=[[0.0, 0.0], [4.0, 4.0], [-4.0, 4.0]],
    covars_init=[[1.0, 1.0], [0.5, 1.5], [1.0, 0.5]],
)


def fixed_model(cls=GaussianHMM, X=None, **parameters):
    """A model whose parameters are exactly the given initial values."""
    model = cls(n_iter=0, **parameters)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X)
    return model


@pytest.fixture(scope="module")
def gaussian_stream():
    truth = fixed_model(GaussianHMM, np.zeros((3, 2)), n_components=3, **TRUE_GAUSSIAN)
    X, states = truth.sample(40_000, random_state=0)
    return truth, X, states


def chunked_statistics(model, X, chunk):
    total, log_likelihood, stream = None, 0.0, None
    for start in range(0, len(X), chunk):
        added, part, stream = model._advance_stream(X[start : start + chunk], stream)
        total = added if total is None else total + added
        log_likelihood += part
    return total, log_likelihood, stream


def make_models():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 2))
    X[150:300] += 3
    X[11] = np.nan
    counts = rng.poisson(3, (400, 2))
    symbols = rng.integers(0, 4, (400, 1))
    # Several columns of different alphabets (padded emission table).
    columns = np.column_stack([rng.integers(0, 2, 400), rng.integers(0, 5, 400)])
    trials = rng.multinomial(6, [0.2, 0.3, 0.5], size=400)
    cases = []
    for covariance_type in ("diag", "full", "spherical", "tied"):
        cases.append((GaussianHMM(3, covariance_type=covariance_type, random_state=0, n_iter=2), X))
    cases.append((GMMHMM(2, n_mix=2, covariance_type="full", random_state=0, n_iter=2), X))
    cases.append((GMMHMM(2, n_mix=2, covariance_type="diag", random_state=0, n_iter=2), X))
    cases.append((PoissonHMM(3, random_state=0, n_iter=2), counts))
    cases.append((CategoricalHMM(3, random_state=0, n_iter=2), symbols))
    cases.append((CategoricalHMM(3, random_state=0, n_iter=2, n_features=[2, 5]), columns))
    cases.append((MultinomialHMM(3, n_trials=6, random_state=0, n_iter=2), trials))
    return cases


@pytest.mark.parametrize("model,X", make_models(), ids=lambda v: v.__class__.__name__)
@pytest.mark.parametrize("chunk", [1, 37, 400])
def test_chunks_give_the_statistics_of_the_whole_sequence(model, X, chunk):
    """At fixed parameters, the forward-only smoother over chunks adds up to
    exactly the forward-backward statistics of the whole sequence."""
    model.fit(X[:120])
    if chunk == 1:  # one row at a time: the edge case, on fewer rows to stay fast
        X = X[:100]
    whole, whole_log_likelihood = model._estep(X, np.array([0, len(X)]))
    total, log_likelihood, _ = chunked_statistics(model, X, chunk)
    np.testing.assert_allclose(log_likelihood, whole_log_likelihood, rtol=1e-12)
    assert total.keys() == whole.keys()
    for name in whole:
        np.testing.assert_allclose(total[name], whole[name], rtol=1e-9, atol=1e-9)


def test_stream_message_size_does_not_grow(gaussian_stream):
    truth, X, _ = gaussian_stream
    _, _, after_few = chunked_statistics(truth, X[:2_000], 1_000)
    _, _, after_many = chunked_statistics(truth, X, 1_000)
    shapes_few = {k: v.shape for k, v in after_few._asdict().items()}
    assert shapes_few == {k: v.shape for k, v in after_many._asdict().items()}


def test_one_chunk_with_step_one_equals_one_batch_em_step():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 2))
    X[100:200] += 3
    lengths = [100, 120, 80]
    start = dict(n_components=3, **TRUE_GAUSSIAN, random_state=0)
    batch = GaussianHMM(n_iter=1, **start).fit(X, lengths=lengths)
    online = GaussianHMM(learning_offset=0.0, **start)  # rho_1 = 1
    online.partial_fit(X, lengths=lengths)
    assert online.n_batch_iter_ == 1
    for name in ("startprob_", "transmat_", "means_", "covars_"):
        np.testing.assert_allclose(getattr(online, name), getattr(batch, name), rtol=1e-10)
    with_total = GaussianHMM(total_samples=300, **start).partial_fit(X, lengths=lengths)
    np.testing.assert_allclose(with_total.means_, batch.means_, rtol=1e-10)


def test_step_sizes_follow_the_robbins_monro_schedule():
    rng = np.random.default_rng(2)
    batches = [rng.normal(size=(50, 1)) + (i % 2) for i in range(3)]
    model = GaussianHMM(
        1,
        learning_decay=0.7,
        learning_offset=2.0,
        params="m",
        init_params="stc",
        means_init=[[0.0]],
    )
    means = []
    for batch in batches:
        model.partial_fit(batch, new_sequence=True)
        means.append(model.means_[0, 0])
    # One state: the M step of the means is the running average of the blended x.
    expected = batches[0].mean()
    for t, batch in enumerate(batches[1:], start=2):
        rho = (2.0 + t) ** -0.7
        expected = (1 - rho) * expected + rho * batch.mean()
    np.testing.assert_allclose(means[-1], expected, rtol=1e-12)
    assert model.n_batch_iter_ == 3


def test_stream_in_chunks_reaches_batch_em(gaussian_stream):
    truth, X, _ = gaussian_stream
    batch = GaussianHMM(3, n_iter=100, tol=1e-4, random_state=0).fit(X)
    online = GaussianHMM(3, random_state=0, learning_decay=0.6)
    for start in range(0, len(X), 1_000):
        online.partial_fit(X[start : start + 1_000])
    per_sample_batch = batch.score(X) / len(X)
    per_sample_online = online.score(X) / len(X)
    assert abs(per_sample_online - per_sample_batch) <= 0.005 * abs(per_sample_batch)
    order = np.argsort(online.means_[:, 0] + 10 * online.means_[:, 1])
    reference = np.argsort(truth.means_[:, 0] + 10 * truth.means_[:, 1])
    np.testing.assert_allclose(online.means_[order], truth.means_[reference], atol=0.1)
    np.testing.assert_allclose(
        online.transmat_[np.ix_(order, order)],
        truth.transmat_[np.ix_(reference, reference)],
        atol=0.03,
    )


def test_categorical_stream_reaches_batch_em():
    truth = fixed_model(
        CategoricalHMM,
        np.array([[0], [1], [2]]),
        n_components=2,
        startprob_init=[0.5, 0.5],
        transmat_init=[[0.9, 0.1], [0.2, 0.8]],
        emissionprob_init=[[0.7, 0.2, 0.1], [0.05, 0.15, 0.8]],
    )
    X, _ = truth.sample(100_000, random_state=3)  # 100 chunks: stochastic EM needs the steps
    batch = CategoricalHMM(2, n_iter=200, tol=1e-6, random_state=0).fit(X)
    online = CategoricalHMM(2, random_state=0)
    for start in range(0, len(X), 1_000):
        online.partial_fit(X[start : start + 1_000])
    np.testing.assert_allclose(online.score(X) / len(X), batch.score(X) / len(X), rtol=0.005)
    order = np.argsort(online.emissionprob_[:, 0])[::-1]
    np.testing.assert_allclose(online.emissionprob_[order], truth.emissionprob_, atol=0.06)


def test_pickled_model_continues_exactly(gaussian_stream):
    _, X, _ = gaussian_stream
    model = GaussianHMM(3, random_state=0)
    for start in range(0, 5_000, 1_000):
        model.partial_fit(X[start : start + 1_000])
    restored = pickle.loads(pickle.dumps(model))
    for start in range(5_000, 8_000, 1_000):
        model.partial_fit(X[start : start + 1_000])
        restored.partial_fit(X[start : start + 1_000])
    for name in ("startprob_", "transmat_", "means_", "covars_", "filtered_state_"):
        np.testing.assert_array_equal(getattr(restored, name), getattr(model, name))
    assert restored.n_batch_iter_ == model.n_batch_iter_ == 8


def test_new_sequence_does_not_carry_the_chain(gaussian_stream):
    truth, X, _ = gaussian_stream
    fixed = dict(n_components=3, **TRUE_GAUSSIAN, params="")
    continued = GaussianHMM(**fixed).partial_fit(X[:500])
    offsets = np.array([0, 500])
    continued_ll = continued._stream_estep(X[500:1000], offsets, continued._stream)[1]
    restarted_ll = continued._stream_estep(X[500:1000], offsets, None)[1]
    np.testing.assert_allclose(continued_ll, truth.score(X[:1000]) - truth.score(X[:500]))
    np.testing.assert_allclose(restarted_ll, truth.score(X[500:1000]))


def test_partial_fit_with_several_sequences_and_n_jobs():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(1_200, 2))
    X[::3] += 3
    lengths = [200] * 6
    one = GaussianHMM(2, random_state=0, n_jobs=1)
    two = clone(one).set_params(n_jobs=2)
    for model in (one, two):
        model.partial_fit(X, lengths=lengths)
        model.partial_fit(X, lengths=lengths, new_sequence=True)
    np.testing.assert_allclose(two.means_, one.means_, rtol=1e-10)
    np.testing.assert_allclose(two.transmat_, one.transmat_, rtol=1e-10)


def test_partial_fit_after_fit_continues_from_the_fit(gaussian_stream):
    _, X, _ = gaussian_stream
    model = GaussianHMM(3, n_iter=50, random_state=0).fit(X[:20_000])
    means = model.means_.copy()
    # Each batch EM iteration counts as a step (as scikit-learn's LDA), so the
    # first partial_fit step does not throw the fit away (rho < 1).
    assert model.n_batch_iter_ == model.n_iter_
    model.partial_fit(X[20_000:21_000], new_sequence=True)
    assert model.n_batch_iter_ == model.n_iter_ + 1
    np.testing.assert_allclose(model.means_, means, atol=0.05)


def test_filter_stream_equals_the_batch_filter(gaussian_stream):
    truth, X, _ = gaussian_stream
    model = pickle.loads(pickle.dumps(truth))
    batch = model.filter(X[:3_000])
    streamed = np.concatenate(
        [model.filter_stream(X[i : min(i + 700, 3_000)]) for i in range(0, 3_000, 700)]
    )
    np.testing.assert_allclose(streamed, batch, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(model.filtered_state_, batch[-1])
    restarted = model.filter_stream(X[:10], new_sequence=True)
    np.testing.assert_allclose(restarted, batch[:10], rtol=1e-10, atol=1e-14)


def test_partial_fit_exposes_the_filtered_state(gaussian_stream):
    truth, X, _ = gaussian_stream
    model = GaussianHMM(3, params="", init_params="", n_iter=0)
    model.startprob_, model.transmat_ = truth.startprob_.copy(), truth.transmat_.copy()
    model.means_, model.covars_ = truth.means_.copy(), truth._covars_.copy()
    for start in range(0, 2_000, 500):
        model.partial_fit(X[start : start + 500])
    np.testing.assert_allclose(model.filtered_state_, truth.filter(X[:2_000])[-1], rtol=1e-9)


@pytest.mark.parametrize(
    "model", [GaussianHMM(3), PoissonHMM(3), MultinomialHMM(3), GMMHMM(2, n_mix=2)]
)
def test_online_fit_over_minibatches_of_sequences(model):
    truth = fixed_model(GaussianHMM, np.zeros((3, 2)), n_components=3, **TRUE_GAUSSIAN)
    samples = [truth.sample(100, random_state=seed)[0] for seed in range(24)]
    X = np.concatenate(samples)
    if isinstance(model, (PoissonHMM, MultinomialHMM)):
        X = np.round(np.abs(X) * 3)
    lengths = [100] * 24
    batch = clone(model).set_params(n_iter=30, random_state=0).fit(X, lengths=lengths)
    online = (
        clone(model)
        .set_params(learning_method="online", batch_size=8, n_iter=10, random_state=0)
        .fit(X, lengths=lengths)
    )
    assert online.n_batch_iter_ == 3 * len(online.monitor_.history)  # 3 batches per pass
    np.testing.assert_allclose(
        online.score(X, lengths=lengths), batch.score(X, lengths=lengths), rtol=0.01
    )


@pytest.mark.parametrize(
    "parameters,error,message",
    [
        ({"learning_decay": 0.5}, ValueError, "learning_decay"),
        ({"learning_decay": 1.2}, ValueError, "learning_decay"),
        ({"learning_offset": -1.0}, ValueError, "learning_offset"),
        ({"total_samples": 0}, ValueError, "total_samples"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"batch_size": 2.5}, TypeError, "batch_size"),
        ({"learning_method": "stochastic"}, ValueError, "learning_method"),
    ],
)
def test_bad_stochastic_parameters(parameters, error, message):
    X = np.random.default_rng(0).normal(size=(50, 2))
    with pytest.raises(error, match=message):
        GaussianHMM(2, **parameters).partial_fit(X)
    with pytest.raises(error, match=message):
        GaussianHMM(2, **parameters).fit(X)


def test_bad_batches():
    rng = np.random.default_rng(0)
    model = GaussianHMM(2, random_state=0).partial_fit(rng.normal(size=(50, 2)))
    with pytest.raises(ValueError, match="features"):
        model.partial_fit(rng.normal(size=(50, 3)))
    with pytest.raises(ValueError, match="0 sample"):
        model.partial_fit(np.empty((0, 2)))
    categorical = CategoricalHMM(2, random_state=0).partial_fit(np.array([[0], [1], [2], [1]]))
    with pytest.raises(ValueError, match="outside the alphabet"):
        categorical.partial_fit(np.array([[0], [5]]))
    columns = CategoricalHMM(2, random_state=0).partial_fit(np.array([[0, 1], [1, 2], [2, 0]]))
    with pytest.raises(ValueError, match="symbol 3 in column 1"):
        columns.partial_fit(np.array([[0, 0], [1, 3]]))
    counts = MultinomialHMM(2, n_trials=3, random_state=0).partial_fit(np.array([[1, 2], [3, 0]]))
    with pytest.raises(ValueError, match="row 1 sums to 2, not 3"):
        counts.partial_fit(np.array([[1, 2], [2, 0]]))


# -- one stream engine for every family ---------------------------------------

STREAM_FAMILIES = [GaussianHMM, GMMHMM, CategoricalHMM, MultinomialHMM, PoissonHMM]


def _stream_estimators():
    from skseq.lds import LinearGaussianSSM

    return [*STREAM_FAMILIES, LinearGaussianSSM]


@pytest.mark.parametrize("cls", _stream_estimators(), ids=lambda cls: cls.__name__)
def test_every_family_streams_on_the_one_engine(cls):
    """partial_fit and the batch's E-step composition are written once, in BaseEM."""
    from skseq.base import BaseEM

    assert cls._stream_estep is BaseEM._stream_estep
    assert cls._partial_fit is BaseEM._partial_fit
    assert cls._reset_stream is BaseEM._reset_stream
    assert "filtered_state_" in dir(cls) or "filtered_state_" in cls._stream_attributes


def _stream_data(cls, seed=0):
    rng = np.random.default_rng(seed)
    if cls is CategoricalHMM:
        return rng.integers(0, 3, size=(60, 1))
    if cls is MultinomialHMM:
        return rng.multinomial(4, [0.2, 0.3, 0.5], size=60)
    if cls is PoissonHMM:
        return rng.poisson(3.0, size=(60, 2))
    return rng.normal(size=(60, 2))


@pytest.mark.parametrize("cls", _stream_estimators(), ids=lambda cls: cls.__name__)
def test_stream_state_is_published_and_fit_resets_it(cls):
    model = cls(n_components=2, random_state=0)
    X = _stream_data(cls)
    assert not hasattr(model, "filtered_state_")
    model.partial_fit(X[:30])
    first = model.filtered_state_
    model.partial_fit(X[30:])
    assert model.n_batch_iter_ == 2
    assert model._stream is not None
    assert not np.array_equal(np.ravel(first[0]), np.ravel(model.filtered_state_[0]))
    model.fit(X)
    assert model._stream is None
    assert not hasattr(model, "filtered_state_")
    with pytest.raises(TypeError, match="new_sequence must be a bool"):
        model.partial_fit(X, new_sequence="no")


def _assert_same_filtered_states(online, batch, exact):
    """Filtered states of several rows: probability rows (HMMs) or (means,
    covariances) (LGSSM, whose online filter is the batch filter's own step:
    bit for bit)."""
    if isinstance(batch, tuple):
        for got, expected in zip(online, batch):
            np.testing.assert_array_equal(got, expected)
    elif exact:
        np.testing.assert_array_equal(online, batch)
    else:
        np.testing.assert_allclose(online, batch, rtol=1e-12, atol=1e-15)


def _stack_rows(rows):
    if isinstance(rows[0], tuple):
        return tuple(np.stack(part) for part in zip(*rows))
    return np.stack(rows)


def _concatenate_chunks(chunks):
    if isinstance(chunks[0], tuple):
        return tuple(np.concatenate(part) for part in zip(*chunks))
    return np.concatenate(chunks)


@pytest.mark.parametrize("cls", _stream_estimators(), ids=lambda cls: cls.__name__)
def test_one_online_filter_api_in_every_family(cls):
    """filter_stream (the next rows), filter_update (one row), reset_filter (restart,
    optionally from a history) and filtered_state_ mean the same in every family:
    online filtering row by row or in chunks equals the batch filter's filtered
    states of the whole stream."""
    from skseq.lds import LinearGaussianSSM

    X = _stream_data(cls)
    model = cls(n_components=2, random_state=0, n_iter=3).fit(X)
    batch = model.filter(X)
    exact = cls is LinearGaussianSSM
    assert not hasattr(model, "filtered_state_")  # fit starts no stream
    _assert_same_filtered_states(_stack_rows([model.filter_update(x) for x in X]), batch, exact)
    last = batch[0][-1] if exact else batch[-1]
    np.testing.assert_allclose(
        np.ravel(model.filtered_state_[0] if exact else model.filtered_state_),
        np.ravel(last),
        rtol=1e-12,
    )
    model.reset_filter()
    assert not hasattr(model, "filtered_state_")
    chunks = [
        model.filter_stream(X[:25]),
        model.filter_stream(X[25:26]),
        model.filter_stream(X[26:]),
    ]
    _assert_same_filtered_states(_concatenate_chunks(chunks), batch, exact)
    # A history: the stream continues from its last row.
    model.reset_filter(X[:30])
    continued = _stack_rows([model.filter_update(x) for x in X[30:]])
    expected = tuple(part[30:] for part in batch) if exact else batch[30:]
    _assert_same_filtered_states(continued, expected, exact)
    # new_sequence restarts whatever the state.
    restarted = model.filter_stream(X[:10], new_sequence=True)
    expected = tuple(part[:10] for part in batch) if exact else batch[:10]
    _assert_same_filtered_states(restarted, expected, exact)


def test_lgssm_filtered_state_is_its_filter_state():
    from skseq.lds import LinearGaussianSSM

    X = _stream_data(LinearGaussianSSM)
    model = LinearGaussianSSM(2, random_state=0).partial_fit(X)
    mean, covariance = model.filtered_state_
    np.testing.assert_array_equal(mean, model.filter_state_mean_)
    np.testing.assert_array_equal(covariance, model.filter_state_covariance_)
