"""Which rows of a concatenated ``X`` form which sequence.

Latent-state models take the rows of all sequences stacked in time order.
The split is given either by ``lengths`` (hmmlearn's form) or by
``sequence_ids`` (one label per row, routed by scikit-learn's metadata
routing like ``sample_weight``).  Internally a split is an ``offsets`` array:
sequence ``s`` is rows ``offsets[s]:offsets[s + 1]``.
"""

import functools
import inspect
import numbers

import numpy as np
import sklearn
from sklearn.utils.validation import validate_data

from ._validation import masked_as_nan

__all__ = [
    "sequence_offsets",
    "check_ids_shape",
    "check_new_sequences",
    "split_offsets",
    "blocks_of_rows",
    "isolate_long_sequences",
    "memory_budget_rows",
    "checkpoint_rows",
    "check_y_is_not_lengths",
    "validate_sequences",
    "lengths_by_keyword",
]


def sequence_offsets(n_samples, lengths=None, sequence_ids=None):
    """Validate a sequence split and return its offsets.

    Parameters
    ----------
    n_samples : int
        Number of rows of ``X``.
    lengths : array-like of int, optional
        Length of each sequence; must sum to ``n_samples``.
    sequence_ids : array-like of shape (n_samples,), optional
        One label per row; the rows of one sequence must be contiguous.

    Returns
    -------
    offsets : ndarray of intp, shape (n_sequences + 1,)

    Examples
    --------
    >>> sequence_offsets(5, lengths=[2, 3])
    array([0, 2, 5])
    >>> sequence_offsets(4, sequence_ids=["a", "a", "b", "b"])
    array([0, 2, 4])
    """
    if lengths is not None and sequence_ids is not None:
        raise ValueError("Pass either lengths or sequence_ids, not both.")
    if sequence_ids is not None:
        return _offsets_from_ids(n_samples, sequence_ids)
    if lengths is None:
        return np.array([0, n_samples], dtype=np.intp)
    lengths = np.asarray(lengths)
    if lengths.ndim != 1:
        raise ValueError(f"lengths must be 1-D, got shape {lengths.shape}.")
    if lengths.size == 0:
        raise ValueError("lengths is empty.")
    if lengths.dtype.kind == "f":
        if not np.all(np.isfinite(lengths)) or np.any(lengths != np.round(lengths)):
            raise ValueError("lengths must be whole numbers.")
    elif lengths.dtype.kind not in "iu":
        raise TypeError(f"lengths must be integers, got dtype {lengths.dtype}.")
    if np.any(lengths <= 0):
        raise ValueError(f"lengths must be positive, got {lengths[lengths <= 0][:5].tolist()}.")
    if np.any(lengths > n_samples):
        raise ValueError(
            f"lengths {lengths[lengths > n_samples][:5].tolist()} exceed the {n_samples} rows of X."
        )
    if lengths.size > n_samples:
        raise ValueError(f"{lengths.size} lengths for {n_samples} rows: more sequences than rows.")
    # Each length is at most n_samples and there are at most n_samples of them,
    # so the int64 sum below cannot overflow.
    lengths = lengths.astype(np.intp)
    total = int(lengths.sum())
    if total != n_samples:
        raise ValueError(f"lengths sum to {total} but X has {n_samples} rows; they must be equal.")
    offsets = np.zeros(lengths.size + 1, dtype=np.intp)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def check_ids_shape(n_samples, shape):
    """Raise a ValueError unless ``shape`` is that of one label per row of X.

    ``shape`` is the shape of the labels (a memmap's or dask array's is read
    without loading them).
    """
    if len(shape) != 1 or shape[0] != n_samples:
        raise ValueError(
            f"sequence_ids must have one entry per row of X ({n_samples}), "
            f"got shape {tuple(shape)}."
        )


def check_new_sequences(labels, seen):
    """Add the labels of new sequences to ``seen``; a label already there is an error.

    ``labels`` holds the label of each run of equal ``sequence_ids`` (in
    order) that starts a sequence, ``seen`` (a set, updated) the labels of
    the sequences before them: a label that comes back after other rows
    means the rows of its sequence are not contiguous.  A stream of batches
    passes the same ``seen`` from batch to batch.
    """
    new = set(labels)
    if len(new) == len(labels) and seen.isdisjoint(new):
        seen |= new
        return
    earlier = set(seen)
    for label in labels:
        if label in earlier:
            break
        earlier.add(label)
    raise ValueError(
        f"sequence_ids are not contiguous: the rows labelled {label!r} resume after other "
        "rows, but the rows of each sequence must be consecutive (sort X by sequence, "
        "keeping time order within each)."
    )


def _offsets_from_ids(n_samples, sequence_ids):
    ids = np.asarray(sequence_ids)
    check_ids_shape(n_samples, ids.shape)
    if n_samples == 0:
        raise ValueError("X is empty.")
    if _has_missing(ids):
        raise ValueError("sequence_ids contains missing values (NaN, None or NaT).")
    starts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    offsets = np.concatenate(([0], starts, [n_samples])).astype(np.intp)
    check_new_sequences(ids[offsets[:-1]].tolist(), set())
    return offsets


def _has_missing(ids):
    if ids.dtype.kind == "f":
        return bool(np.isnan(ids).any())
    if ids.dtype.kind in "mM":
        return bool(np.isnat(ids).any())
    if ids.dtype.kind == "O":
        return any(value is None or value != value for value in ids.tolist())
    return False


def split_offsets(offsets, n_groups):
    """Split sequences into at most ``n_groups`` runs of similar row counts.

    Returns a list of ``(first_sequence, stop_sequence)`` pairs covering all
    sequences in order; used to give each thread a contiguous block of rows.
    """
    n_sequences = len(offsets) - 1
    n_groups = max(1, min(int(n_groups), n_sequences))
    if n_groups == 1:
        return [(0, n_sequences)]
    targets = np.linspace(0, offsets[-1], n_groups + 1)[1:-1]
    cuts = np.searchsorted(offsets, targets)
    cuts = np.unique(np.clip(cuts, 1, n_sequences - 1))
    bounds = np.concatenate(([0], cuts, [n_sequences]))
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def blocks_of_rows(offsets, rows_per_block):
    """Group consecutive whole sequences into blocks of about ``rows_per_block`` rows.

    Returns a list of ``(first_sequence, stop_sequence)`` pairs covering all
    sequences in order.  A block closes as soon as it holds at least
    ``rows_per_block`` rows, so only a single sequence can exceed it.
    """
    n_sequences = len(offsets) - 1
    blocks = []
    first = 0
    while first < n_sequences:
        stop = int(np.searchsorted(offsets, offsets[first] + rows_per_block, side="left"))
        stop = min(max(stop, first + 1), n_sequences)
        blocks.append((first, stop))
        first = stop
    return blocks


def isolate_long_sequences(offsets, first, stop, long_rows):
    """Sequences ``first:stop`` as ``(first, stop)`` runs in which a sequence of
    more than ``long_rows`` rows stands alone (all in one run if None).

    The E steps and scores hand such a sequence to their chunked,
    bounded-memory paths.

    Examples
    --------
    >>> import numpy as np
    >>> isolate_long_sequences(np.array([0, 2, 10, 11, 12]), 0, 4, 5)
    [(0, 1), (1, 2), (2, 4)]
    """
    # No sequence can be long when all of them together are not (the common
    # case, checked before the per-sequence lengths are formed).
    if long_rows is None or offsets[stop] - offsets[first] <= long_rows:
        return [(first, stop)]
    long = first + np.flatnonzero(np.diff(offsets[first : stop + 1]) > long_rows)
    if long.size == 0:
        return [(first, stop)]
    runs, begin = [], first
    for sequence in long.tolist():
        if sequence > begin:
            runs.append((begin, sequence))
        runs.append((sequence, sequence + 1))
        begin = sequence + 1
    if stop > begin:
        runs.append((begin, stop))
    return runs


def memory_budget_rows(bytes_per_row):
    """Rows whose whole-sequence arrays fit scikit-learn's ``working_memory`` budget.

    ``bytes_per_row``: what the whole-sequence E step keeps per row.  A longer
    sequence goes to the family's chunked E step (``sklearn.get_config()``,
    ``working_memory`` in MiB, 1024 by default).
    """
    budget = sklearn.get_config()["working_memory"] * 2**20
    return max(1, int(budget // bytes_per_row))


def checkpoint_rows(n_rows, bytes_per_row, preferred_rows):
    """Rows per chunk of a chunked E step over one sequence of ``n_rows`` rows.

    sqrt(n_rows), which makes the checkpoints and one chunk equally large, or
    more while a chunk stays within ``preferred_rows`` and half the budget of
    :func:`memory_budget_rows` (fewer chunks cost less Python).
    """
    floor = min(preferred_rows, memory_budget_rows(bytes_per_row) // 2)
    return max(int(np.ceil(np.sqrt(n_rows))), floor, 1)


def _lengths_by_keyword(method, positional=("X",)):
    call = f"{method}({', '.join(positional)}, lengths=...)"
    return f"pass sequence lengths by keyword: {call}, or use sequence_ids=."


def check_y_is_not_lengths(y, n_samples, method="fit"):
    """Reject an hmmlearn-style positional ``lengths`` passed as ``y``.

    scikit-learn puts ``y`` second in ``fit(X, y)`` and ``score(X, y)``;
    hmmlearn puts ``lengths`` there.  A ``y`` whose length differs from
    ``n_samples`` is almost surely such a ``lengths``.  ``method`` names the
    method in the message.
    """
    if y is None:
        return
    if isinstance(y, numbers.Number):
        raise TypeError(
            f"The second positional argument of {method} is y, which these models ignore; "
            + _lengths_by_keyword(method)
        )
    try:
        n_y = len(y)
    except TypeError:
        return
    if n_y != n_samples:
        raise TypeError(
            f"{method} got a second positional argument of length {n_y} for X with "
            f"{n_samples} rows. It looks like hmmlearn-style lengths: "
            + _lengths_by_keyword(method)
        )


def validate_sequences(estimator, X, y, lengths, sequence_ids, *, reset, method):
    """``(X, offsets)``: real-valued rows of sequences, NaN for missing entries.

    Masked entries become NaN (pykalman's convention); ``X`` is validated by
    scikit-learn's ``validate_data`` as float64 with NaN allowed and at least
    one row (``reset``: ``fit``'s call, which sets ``n_features_in_``); a
    ``y`` that looks like hmmlearn's positional ``lengths`` is refused
    (:func:`check_y_is_not_lengths`, naming ``method``); the sequence split
    is checked (:func:`sequence_offsets`).  The linear-Gaussian SSM and the
    deep Markov model validate their data with it.
    """
    X = masked_as_nan(X, missing_supported=True, owner=type(estimator).__name__)
    X = validate_data(
        estimator,
        X,
        reset=reset,
        dtype=np.float64,
        ensure_all_finite="allow-nan",
        ensure_min_samples=1,
    )
    check_y_is_not_lengths(y, X.shape[0], method)
    return X, sequence_offsets(X.shape[0], lengths=lengths, sequence_ids=sequence_ids)


def lengths_by_keyword(method):
    """Decorate a method whose sequence arguments are keyword-only.

    Called with more positional arguments than it takes -- almost surely an
    hmmlearn-style positional ``lengths`` -- it raises a TypeError that names
    the method and says ``lengths=``, instead of Python's bare "takes 2
    positional arguments".  The signature seen by ``inspect`` (and by
    scikit-learn's metadata routing) is the method's own.
    """
    positional = [
        parameter.name
        for parameter in inspect.signature(method).parameters.values()
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)
    ][1:]  # without self

    @functools.wraps(method)
    def checked(self, *args, **kwargs):
        if len(args) > len(positional):
            raise TypeError(
                f"{type(self).__name__}.{method.__name__}() got {len(args)} positional "
                f"arguments but takes only {', '.join(positional)} positionally; "
                + _lengths_by_keyword(method.__name__, positional)
            )
        return method(self, *args, **kwargs)

    return checked
