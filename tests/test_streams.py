"""skseq.streams: batches for partial_fit from arrays, memmaps, dask and Parquet."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skseq import GaussianHMM
from skseq.lds import LinearGaussianSSM
from skseq.streams import continue_sequences, sequence_batches


def reassemble(batches):
    """The rows and the sequence lengths the batches and their flags describe."""
    rows, lengths = [], []
    for X_batch, keywords in batches:
        rows.append(X_batch)
        if "lengths" in keywords:
            pieces = list(keywords["lengths"])
        else:
            labels = keywords["sequence_ids"]
            changes = np.flatnonzero(labels[1:] != labels[:-1]) + 1
            pieces = list(np.diff(np.concatenate(([0], changes, [len(labels)]))))
        assert sum(pieces) == len(X_batch)
        if keywords["new_sequence"] or not lengths:
            lengths.extend(pieces)
        else:
            lengths[-1] += pieces[0]
            lengths.extend(pieces[1:])
    return np.concatenate(rows), lengths


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=8),
    batch_rows=st.integers(1, 20),
    by_ids=st.booleans(),
)
def test_batches_keep_every_sequence_boundary(lengths, batch_rows, by_ids):
    X = np.arange(sum(lengths), dtype=float)[:, None]
    if by_ids:
        ids = np.repeat(np.arange(len(lengths)) * 7 % 5 + 10 * np.arange(len(lengths)), lengths)
        batches = list(sequence_batches(X, sequence_ids=ids, batch_rows=batch_rows))
    else:
        batches = list(sequence_batches(X, lengths=lengths, batch_rows=batch_rows))
    rows, found = reassemble(batches)
    np.testing.assert_array_equal(rows, X)
    assert found == lengths
    assert all(len(X_batch) <= batch_rows for X_batch, _ in batches)
    assert batches[0][1]["new_sequence"]


def test_the_flag_is_exact_at_a_boundary_on_a_batch_edge():
    batches = list(sequence_batches(np.zeros((6, 1)), lengths=[3, 3], batch_rows=3))
    assert [k["new_sequence"] for _, k in batches] == [True, True]
    assert [k["lengths"].tolist() for _, k in batches] == [[3], [3]]


def fit_error(X, **keywords):
    """What GaussianHMM.fit raises on ``X`` with these sequence keywords."""
    with pytest.raises((TypeError, ValueError)) as error:
        GaussianHMM(2, n_iter=1).fit(X, **keywords)
    return error.type, str(error.value)


def stream_error(batches):
    with pytest.raises((TypeError, ValueError)) as error:
        list(batches)
    return error.type, str(error.value)


def test_bad_arguments_are_named():
    X = np.zeros((4, 1))
    with pytest.raises(ValueError, match="lengths sum to 3 but X has 4 rows"):
        next(sequence_batches(X, lengths=[3]))
    with pytest.raises(ValueError, match="batch_rows must be >= 1"):
        next(sequence_batches(X, lengths=[4], batch_rows=0))
    with pytest.raises(TypeError, match="batch_rows must be an integer"):
        next(sequence_batches(X, lengths=[4], batch_rows=2.5))
    with pytest.raises(TypeError, match="continue_sequences takes .X_chunk, sequence_ids_chunk"):
        next(continue_sequences([np.zeros(3)]))


@pytest.mark.parametrize(
    "keywords",
    [
        dict(lengths=[4], sequence_ids=[0] * 4),
        dict(sequence_ids=[0, 0, 0]),
        dict(sequence_ids=[[0, 0, 1, 1]]),
        dict(sequence_ids=[0.0, np.nan, 1.0, 1.0]),
        dict(sequence_ids=["a", "b", "b", "a"]),
        dict(lengths=[2, 1]),
        dict(lengths=[2.5, 1.5]),
        dict(lengths=[[4]]),
    ],
    ids=["both", "short-ids", "2-D-ids", "NaN-id", "a-b-a", "short-lengths", "half", "2-D"],
)
def test_sequence_batches_refuse_what_fit_refuses_with_fits_error(keywords):
    """Issue 17: the streams had checks of their own, and none for non-contiguous ids."""
    X = np.random.default_rng(0).normal(size=(4, 1))
    expected = fit_error(X, **keywords)
    assert stream_error(sequence_batches(X, **keywords)) == expected
    assert stream_error(sequence_batches(X, **keywords, batch_rows=1)) == expected
    if "lengths" not in keywords and np.ndim(keywords["sequence_ids"]) == 1:
        ids = np.asarray(keywords["sequence_ids"])
        if len(ids) == len(X):
            chunks = [(X[:1], ids[:1]), (X[1:3], ids[1:3]), (X[3:], ids[3:])]
            assert stream_error(continue_sequences(chunks)) == expected


def test_a_sequence_that_comes_back_in_a_later_batch_is_refused():
    """Issue 17: (a, b, a) per batch gave new_sequence flags [True, False, False]."""
    X = np.zeros((9, 1))
    ids = np.array(list("abaabaaba"))
    expected = fit_error(X, sequence_ids=ids)
    assert "not contiguous" in expected[1]
    assert stream_error(sequence_batches(X, sequence_ids=ids, batch_rows=3)) == expected
    # Each batch contiguous, the stream not: "a" resumes in the third batch.
    ids = np.array(list("aabbaa"))
    expected = fit_error(X[:6], sequence_ids=ids)
    batches = sequence_batches(X[:6], sequence_ids=ids, batch_rows=2)
    assert next(batches)[1]["new_sequence"] and next(batches)[1]["new_sequence"]
    with pytest.raises(ValueError) as error:
        next(batches)
    assert (error.type, str(error.value)) == expected
    # A sequence continued across batches is not a repeat.
    ids = np.array(list("aaabbbccc"))
    flags = [k["new_sequence"] for _, k in sequence_batches(X, sequence_ids=ids, batch_rows=2)]
    assert flags == [True, False, False, True, False]  # aa ab bb cc c


def test_sequence_batches_take_array_likes_as_fit_does():
    """Issue 17: a list X gave AttributeError: 'list' object has no attribute 'shape'."""
    X = [[0.0], [1.0], [2.0], [3.0]]
    array = np.asarray(X)
    for keywords in (dict(lengths=[1, 3]), dict(sequence_ids=["s", "t", "t", "t"])):
        batches = list(sequence_batches(X, **keywords, batch_rows=3))
        expected = list(sequence_batches(array, **keywords, batch_rows=3))
        assert len(batches) == len(expected) == 2
        for (X_batch, found), (X_expected, wanted) in zip(batches, expected):
            np.testing.assert_array_equal(X_batch, X_expected)
            assert found.keys() == wanted.keys() and found["new_sequence"] == wanted["new_sequence"]
    # Neither lengths nor sequence_ids: one sequence, as in fit.
    flags = [k["new_sequence"] for _, k in sequence_batches(X, batch_rows=3)]
    assert flags == [True, False]
    with pytest.raises(TypeError, match="X must be an array-like of shape"):
        next(sequence_batches(None, lengths=[1]))
    with pytest.raises(ValueError, match="X must have one row per time step"):
        next(sequence_batches(2.0))


def stream_data():
    rng = np.random.default_rng(0)
    lengths = [230, 170, 410, 90, 300]
    states = np.repeat(rng.integers(0, 2, size=len(lengths)), lengths)
    X = rng.normal(size=(sum(lengths), 2)) + 3.0 * states[:, None]
    return X, lengths


def fit_stream(model, batches):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for X_batch, keywords in batches:
            model.partial_fit(X_batch, **keywords)
    return model


def hmm():
    return GaussianHMM(2, random_state=0, total_samples=1200)


def test_memmap_batches_fit_as_the_array(tmp_path):
    X, lengths = stream_data()
    np.save(tmp_path / "X.npy", X)
    on_disk = np.load(tmp_path / "X.npy", mmap_mode="r")
    reference = fit_stream(hmm(), sequence_batches(X, lengths=lengths, batch_rows=256))
    streamed = fit_stream(hmm(), sequence_batches(on_disk, lengths=lengths, batch_rows=256))
    np.testing.assert_array_equal(streamed.means_, reference.means_)
    np.testing.assert_array_equal(streamed.transmat_, reference.transmat_)


def test_dask_array_batches_follow_its_chunks_and_fit_as_the_array():
    da = pytest.importorskip("dask.array")
    X, lengths = stream_data()
    ids = np.repeat(np.arange(len(lengths)), lengths)
    lazy, lazy_ids = da.from_array(X, chunks=(256, 2)), da.from_array(ids, chunks=256)
    batches = list(sequence_batches(lazy, sequence_ids=lazy_ids))
    assert [len(X_batch) for X_batch, _ in batches] == list(lazy.chunks[0])
    assert all(isinstance(X_batch, np.ndarray) for X_batch, _ in batches)
    reference = fit_stream(hmm(), sequence_batches(X, lengths=lengths, batch_rows=256))
    np.testing.assert_array_equal(fit_stream(hmm(), batches).means_, reference.means_)
    model = LinearGaussianSSM(1, random_state=0, total_samples=1200)
    reference = fit_stream(model, sequence_batches(X, lengths=lengths, batch_rows=256))
    streamed = fit_stream(
        LinearGaussianSSM(1, random_state=0, total_samples=1200),
        sequence_batches(lazy, lengths=lengths),
    )
    np.testing.assert_array_equal(streamed.transition_matrix_, reference.transition_matrix_)


def test_parquet_record_batches_fit_as_the_array(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    X, lengths = stream_data()
    ids = np.repeat(np.arange(len(lengths)), lengths)
    table = pa.table({"sequence": ids, "x0": X[:, 0], "x1": X[:, 1]})
    pq.write_table(table, tmp_path / "rows.parquet", row_group_size=300)
    parquet = pq.ParquetFile(tmp_path / "rows.parquet")
    chunks = (
        (np.column_stack([batch["x0"], batch["x1"]]), batch["sequence"].to_numpy())
        for batch in parquet.iter_batches(batch_size=256)
    )
    reference = fit_stream(hmm(), sequence_batches(X, lengths=lengths, batch_rows=256))
    streamed = fit_stream(hmm(), continue_sequences(chunks))
    np.testing.assert_array_equal(streamed.means_, reference.means_)


def test_dask_dataframe_partitions_fit_as_the_array():
    pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    import pandas as pd

    X, lengths = stream_data()
    ids = np.repeat(np.arange(len(lengths)), lengths)
    frame = dd.from_pandas(
        pd.DataFrame({"sequence": ids, "x0": X[:, 0], "x1": X[:, 1]}), chunksize=256, sort=False
    )
    partitions = [frame.get_partition(i).compute() for i in range(frame.npartitions)]
    assert len(partitions) > 1
    chunks = ((part[["x0", "x1"]], part["sequence"]) for part in partitions)
    # The same cuts of the in-memory array.
    bounds = np.cumsum([0] + [len(part) for part in partitions])
    reference = continue_sequences((X[a:b], ids[a:b]) for a, b in zip(bounds[:-1], bounds[1:]))
    np.testing.assert_array_equal(
        fit_stream(hmm(), continue_sequences(chunks)).means_, fit_stream(hmm(), reference).means_
    )
