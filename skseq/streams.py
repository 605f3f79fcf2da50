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

import numpy as np

from ._sequences import check_ids_shape, check_new_sequences, sequence_offsets
from ._validation import check_scalar_param

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
    check_scalar_param(batch_rows, "batch_rows", "int", low=1)
    return np.append(np.arange(0, n_samples, int(batch_rows)), n_samples).astype(np.intp)


def _rows_source(X, name="X"):
    """``X`` as something with a shape that slices by rows; in-memory array-likes become arrays."""
    if X is None or isinstance(X, str | bytes):
        raise TypeError(
            f"{name} must be an array-like of shape (n_samples, n_features) (an array, a "
            f"memmap, a dask array, an HDF5 or zarr dataset, a list of rows), got {X!r}."
        )
    if not hasattr(X, "shape"):
        X = np.asarray(X)
    if len(X.shape) == 0:
        raise ValueError(f"{name} must have one row per time step, got a scalar {X!r}.")
    return X


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
        One label per row, equal within a sequence, whose rows are
        contiguous; may be a memmap or dask array too.  At most one of
        ``lengths`` and ``sequence_ids``; with neither, the rows are one
        sequence.  Both are checked as ``fit`` checks them (the labels batch
        by batch, as they are read: a label that comes back after other rows
        raises the error ``fit`` raises, when its batch is reached).
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
    X = _rows_source(X)
    n_samples = int(X.shape[0])
    if lengths is not None and sequence_ids is not None:
        sequence_offsets(n_samples, lengths=lengths, sequence_ids=sequence_ids)  # refuses both
    bounds = _batch_bounds(n_samples, batch_rows, X)
    if sequence_ids is not None:
        if not hasattr(sequence_ids, "shape"):
            sequence_ids = np.asarray(sequence_ids)
        check_ids_shape(n_samples, sequence_ids.shape)
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
    ``sequence_ids`` everywhere: each chunk's labels are checked as ``fit``
    checks ``sequence_ids``, and a label that comes back after other rows,
    in the same chunk or a later one, raises ``fit``'s error.  The labels of
    the sequences seen so far are kept for that (one per sequence).

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
    seen = set()  # the labels of the sequences so far
    last_label = None
    for chunk in chunks:
        try:
            X_chunk, ids_chunk = chunk
        except (TypeError, ValueError):
            raise TypeError(
                "continue_sequences takes (X_chunk, sequence_ids_chunk) pairs, got "
                f"{type(chunk).__name__} {chunk!r:.80}."
            ) from None
        X_chunk = _rows_source(_materialise(X_chunk), "X_chunk")
        ids_chunk = _materialise(ids_chunk)
        if len(X_chunk) == 0:
            check_ids_shape(0, ids_chunk.shape)
            continue
        # fit's checks of sequence_ids on the chunk, then across chunks.
        offsets = sequence_offsets(len(X_chunk), sequence_ids=ids_chunk)
        labels = ids_chunk[offsets[:-1]].tolist()
        new_sequence = last_label is None or labels[0] != last_label
        check_new_sequences(labels if new_sequence else labels[1:], seen)
        last_label = labels[-1]
        yield X_chunk, {"sequence_ids": ids_chunk, "new_sequence": bool(new_sequence)}
