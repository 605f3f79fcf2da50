"""skseq._buffers: work arrays kept from call to call."""

import numpy as np

from skseq._buffers import longest_sequence, work_array


def test_work_arrays_are_reused_and_grown():
    buffers = {}
    first = work_array(buffers, "a", (4, 3))
    first[:] = 1.0
    smaller = work_array(buffers, "a", (2, 3))
    assert np.shares_memory(smaller, first) and smaller.shape == (2, 3)
    larger = work_array(buffers, "a", (8, 3))
    assert not np.shares_memory(larger, first) and buffers["a"].shape == (8, 3)
    other_shape = work_array(buffers, "a", (2, 5))
    assert other_shape.shape == (2, 5) and buffers["a"].shape == (2, 5)
    assert work_array(buffers, "a", (2, 5), np.intc).dtype == np.intc
    assert work_array(None, "a", (3,)).shape == (3,)


def test_longest_sequence():
    assert longest_sequence(np.array([0, 3, 4, 9])) == 5
