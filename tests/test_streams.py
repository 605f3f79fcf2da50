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


def test_bad_arguments_are_named():
    X = np.zeros((4, 1))
    with pytest.raises(ValueError, match="exactly one of lengths and sequence_ids"):
        next(sequence_batches(X))
    with pytest.raises(ValueError, match="exactly one"):
        next(sequence_batches(X, lengths=[4], sequence_ids=[0] * 4))
    with pytest.raises(ValueError, match="3 labels for 4 rows"):
        next(sequence_batches(X, sequence_ids=[0, 0, 0]))
    with pytest.raises(ValueError, match="sum"):
        next(sequence_batches(X, lengths=[3]))
    with pytest.raises(ValueError, match="batch_rows must be at least 1"):
        next(sequence_batches(X, lengths=[4], batch_rows=0))
    with pytest.raises(TypeError, match="batch_rows must be an int"):
        next(sequence_batches(X, lengths=[4], batch_rows=2.5))
    with pytest.raises(ValueError, match="one sequence label per row"):
        next(continue_sequences([(X, [0, 0])]))


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
