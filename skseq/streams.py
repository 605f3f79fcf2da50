"""Batches for ``partial_fit`` from data larger than memory, sequence boundaries kept.

``partial_fit`` of the HMMs and :class:`~skseq.lds.LinearGaussianSSM` takes
one batch of rows at a time; a sequence may run across batches, and
``new_sequence`` says whether a batch's first row starts a sequence or
continues the last sequence of the previous batch.  These generators cut a
source into batches and get that flag right:

:func:`sequence_batches`
    Any array sliceable by rows — a NumPy array, a ``.npy`` file opened with
    ``np.load(path, mmap_mode="r")``, a ``dask.array`` (one batch per chunk
    of rows by default), an HDF5 or zarr dataset — with ``lengths`` or
    ``sequence_ids``.  Only one batch is in memory at a time.
:func:`continue_sequences`
    Any iterable of ``(X_chunk, sequence_ids_chunk)`` pairs: the partitions
    of a dask dataframe, the record batches of a Parquet file, chunks of a
    CSV file.

Both yield ``(X_batch, keywords)``; feed them as
``model.partial_fit(X_batch, **keywords)``.

Examples
--------
>>> import numpy as np
>>> from skseq.streams import sequence_batches
>>> X = np.arange(10.0)[:, None]
>>> for X_batch, keywords in sequence_batches(X, lengths=[4, 6], batch_rows=3):
...     print(X_batch.ravel().tolist(), keywords["lengths"].tolist(), keywords["new_sequence"])
[0.0, 1.0, 2.0] [3] True
[3.0, 4.0, 5.0] [1, 2] False
[6.0, 7.0, 8.0] [3] False
[9.0] [1] False
"""

import numbers

import numpy as np

from ._sequences import sequence_offsets

__all__ = ["sequence_batches", "continue_sequences"]

DEFAULT_BATCH_ROWS = 65536


def _materialise(rows):
    """A chunk as a NumPy array (a dask array's chunk is computed)."""
    compute = getattr(rows, "compute", None)
    return np.asarray(compute() if callable(compute) else rows)


def _batch_bounds(n_samples, batch_rows, X):
    """Row bounds of the batches: ``batch_rows`` rows each, or the dask chunks of X."""
    if batch_rows is None:
        chunks = getattr(X, "chunks", None)
        if isinstance(chunks, tuple) and chunks and isinstance(chunks[0], tuple):
            return np.concatenate(([0], np.cumsum(chunks[0]))).astype(np.intp)
        batch_rows = DEFAULT_BATCH_ROWS
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, numbers.Integral):
        raise TypeError(f"batch_rows must be an int, got {batch_rows!r}.")
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be at least 1, got {batch_rows}.")
    return np.append(np.arange(0, n_samples, int(batch_rows)), n_samples).astype(np.intp)


def sequence_batches(X, *, lengths=None, sequence_ids=None, batch_rows=None):
    """Cut the rows of ``X`` into batches for ``partial_fit``.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Anything sliceable by rows with a ``shape``: a NumPy array or memmap,
        a dask array, an HDF5 or zarr dataset.  Each batch is read (or
        computed) when it is yielded.
    lengths : array-like of int, optional
        The lengths of the sequences, summing to ``n_samples``.
    sequence_ids : array-like of shape (n_samples,), optional
        One label per row, equal within a sequence (contiguous); may be a
        memmap or dask array too.  Exactly one of ``lengths`` and
        ``sequence_ids``.
    batch_rows : int, optional
        Rows per batch; a sequence longer than that runs across batches.  By
        default, the row chunks of a dask array, else 65536 rows.

    Yields
    ------
    X_batch : ndarray of shape (n_batch_rows, n_features)
    keywords : dict
        ``lengths`` (the lengths of the pieces of sequences in the batch) or
        ``sequence_ids`` (the batch's labels), and ``new_sequence`` (False
        when the batch's first row continues the previous batch's last
        sequence).  Pass as ``model.partial_fit(X_batch, **keywords)``.
    """
    n_samples = int(X.shape[0])
    if (lengths is None) == (sequence_ids is None):
        raise ValueError("sequence_batches needs exactly one of lengths and sequence_ids.")
    bounds = _batch_bounds(n_samples, batch_rows, X)
    if sequence_ids is not None:
        if len(sequence_ids) != n_samples:
            raise ValueError(
                f"sequence_ids has {len(sequence_ids)} labels for {n_samples} rows of X."
            )
        chunks = (
            (X[start:stop], sequence_ids[start:stop])
            for start, stop in zip(bounds[:-1], bounds[1:])
        )
        yield from continue_sequences(chunks)
        return
    offsets = sequence_offsets(n_samples, lengths=lengths)
    for start, stop in zip(bounds[:-1], bounds[1:]):
        # The sequence boundaries inside the batch, and the batch's ends.
        inside = offsets[(offsets > start) & (offsets < stop)]
        cuts = np.concatenate(([start], inside, [stop]))
        yield (
            _materialise(X[start:stop]),
            {"lengths": np.diff(cuts), "new_sequence": bool(np.isin(start, offsets))},
        )


def continue_sequences(chunks):
    """Batches for ``partial_fit`` from consecutive ``(X_chunk, sequence_ids_chunk)`` pairs.

    A chunk whose first label equals the previous chunk's last label
    continues that sequence (``new_sequence=False``); any other starts a new
    one.  The rows of a sequence must be contiguous in the stream, as for
    ``sequence_ids`` everywhere.

    Parameters
    ----------
    chunks : iterable of (X_chunk, sequence_ids_chunk)
        Consecutive pieces of the rows in time order, each an array-like (or
        a dask array / pandas object) of shape ``(n_chunk_rows,
        n_features)`` with its labels of shape ``(n_chunk_rows,)``.  Empty
        chunks are skipped.

    Yields
    ------
    X_batch : ndarray of shape (n_chunk_rows, n_features)
    keywords : dict
        ``sequence_ids`` and ``new_sequence``; pass as
        ``model.partial_fit(X_batch, **keywords)``.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.streams import continue_sequences
    >>> chunks = [(np.zeros((3, 1)), ["a", "a", "b"]), (np.zeros((2, 1)), ["b", "c"])]
    >>> [keywords["new_sequence"] for _, keywords in continue_sequences(chunks)]
    [True, False]
    """
    last_label = None
    for X_chunk, ids_chunk in chunks:
        X_chunk, ids_chunk = _materialise(X_chunk), _materialise(ids_chunk)
        if ids_chunk.ndim != 1 or len(ids_chunk) != len(X_chunk):
            raise ValueError(
                f"each chunk needs one sequence label per row: got {len(X_chunk)} rows and "
                f"labels of shape {ids_chunk.shape}."
            )
        if len(ids_chunk) == 0:
            continue
        new_sequence = last_label is None or ids_chunk[0] != last_label
        last_label = ids_chunk[-1]
        yield X_chunk, {"sequence_ids": ids_chunk, "new_sequence": bool(new_sequence)}
