"""skseq._sequences: the sequence split (lengths / sequence_ids) and its blocks."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skseq._buffers import longest_sequence
from skseq._sequences import (
    blocks_of_rows,
    check_y_is_not_lengths,
    lengths_by_keyword,
    sequence_offsets,
    split_offsets,
)


def test_offsets_from_lengths_ids_and_neither():
    np.testing.assert_array_equal(sequence_offsets(6, lengths=[1, 2, 3]), [0, 1, 3, 6])
    np.testing.assert_array_equal(sequence_offsets(6, lengths=np.array([6.0])), [0, 6])
    np.testing.assert_array_equal(sequence_offsets(4), [0, 4])
    ids = np.array([7, 7, 3, 3, 3, 9])
    np.testing.assert_array_equal(sequence_offsets(6, sequence_ids=ids), [0, 2, 5, 6])
    assert sequence_offsets(3, lengths=[1, 2]).dtype == np.intp


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        (dict(lengths=[2, 2], sequence_ids=[0, 0, 1, 1]), ValueError, "either lengths or"),
        (dict(lengths=[[4]]), ValueError, "lengths must be 1-D"),
        (dict(lengths=[]), ValueError, "lengths is empty"),
        (dict(lengths=[1.5, 2.5]), ValueError, "whole numbers"),
        (dict(lengths=[np.nan, 4]), ValueError, "whole numbers"),
        (dict(lengths=["2", "2"]), TypeError, "lengths must be integers"),
        (dict(lengths=[0, 4]), ValueError, "lengths must be positive"),
        (dict(lengths=[5]), ValueError, "exceed the 4 rows"),
        (dict(lengths=[1, 1, 1, 1, 1]), ValueError, "exceed|more sequences than rows"),
        (dict(lengths=[1, 2]), ValueError, "sum to 3 but X has 4 rows"),
        (dict(sequence_ids=[0, 0, 1]), ValueError, "one entry per row"),
        (dict(sequence_ids=[0, 1, 0, 1]), ValueError, "not contiguous"),
        (dict(sequence_ids=[0.0, np.nan, 1.0, 1.0]), ValueError, "missing values"),
        (dict(sequence_ids=["a", None, "b", "b"]), ValueError, "missing values"),
    ],
)
def test_bad_splits_are_named(arguments, error, message):
    with pytest.raises(error, match=message):
        sequence_offsets(4, **arguments)


def test_lengths_whose_sum_overflows_int64_are_refused():
    with pytest.raises(ValueError, match="exceed"):
        sequence_offsets(4, lengths=[1, 2**63 - 1, 2**63 - 1, 4])


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    lengths=st.lists(st.integers(1, 50), min_size=1, max_size=30),
    n_groups=st.integers(1, 8),
    rows_per_block=st.integers(1, 120),
)
def test_splits_cover_every_sequence_once_in_order(lengths, n_groups, rows_per_block):
    offsets = sequence_offsets(sum(lengths), lengths=lengths)
    n_sequences = len(lengths)
    for pairs in (split_offsets(offsets, n_groups), blocks_of_rows(offsets, rows_per_block)):
        assert pairs[0][0] == 0 and pairs[-1][1] == n_sequences
        assert all(first < stop for first, stop in pairs)
        assert all(a[1] == b[0] for a, b in zip(pairs[:-1], pairs[1:]))
    assert len(split_offsets(offsets, n_groups)) <= min(n_groups, n_sequences)
    for first, stop in blocks_of_rows(offsets, rows_per_block):
        rows = offsets[stop] - offsets[first]
        # A block closes once it holds rows_per_block rows: only its last
        # sequence can take it past that.
        assert rows - (offsets[stop] - offsets[stop - 1]) < rows_per_block
    assert longest_sequence(offsets) == max(lengths)


def test_split_offsets_balances_rows():
    offsets = sequence_offsets(100, lengths=[10] * 10)
    groups = split_offsets(offsets, 2)
    assert groups == [(0, 5), (5, 10)]
    assert split_offsets(offsets, 0) == [(0, 10)]  # at least one group
    assert split_offsets(sequence_offsets(7), 4) == [(0, 1)]  # one sequence: one group


def test_a_positional_lengths_is_recognised():
    check_y_is_not_lengths(None, 5)
    check_y_is_not_lengths(np.zeros(5), 5)  # a genuine y
    with pytest.raises(
        TypeError, match=r"hmmlearn-style lengths: pass sequence lengths by keyword"
    ):
        check_y_is_not_lengths([2, 3], 5, "score")
    with pytest.raises(TypeError, match="which these models ignore"):
        check_y_is_not_lengths(3, 5)


def test_lengths_by_keyword_names_the_method():
    class Model:
        @lengths_by_keyword
        def fit(self, X, y=None, *, lengths=None):
            return lengths

    assert Model().fit(np.zeros(3), lengths=[3]) == [3]
    with pytest.raises(TypeError, match=r"Model.fit\(\) got 3 positional arguments"):
        Model().fit(np.zeros(3), None, [3])
