"""skseq._buffers: work arrays kept from call to call."""

import threading

import numpy as np

from skseq._buffers import longest_sequence, pass_array, reusing_pass_arrays, work_array


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


def test_pass_arrays_are_reused_in_call_order_from_block_to_block():
    buffers = {}
    with reusing_pass_arrays(buffers):
        first = pass_array((4, 3), np.float32)
        second = pass_array((4, 3), np.float32)
    assert not np.shares_memory(first, second)  # every call its own array
    with reusing_pass_arrays(buffers):
        assert np.shares_memory(pass_array((4, 3), np.float32), first)
        assert np.shares_memory(pass_array((2, 3), np.float32), second)  # fewer rows: a view
        third = pass_array((5,), np.float64)
    assert len(buffers) == 3 and third.dtype == np.float64
    # outside a block, and in another thread, nothing is lent
    assert not np.shares_memory(pass_array((4, 3), np.float32), first)
    with reusing_pass_arrays(buffers):
        seen = []
        thread = threading.Thread(target=lambda: seen.append(pass_array((4, 3), np.float32)))
        thread.start()
        thread.join()
        assert not np.shares_memory(seen[0], first)
        with reusing_pass_arrays(None):
            assert not np.shares_memory(pass_array((4, 3), np.float32), first)
        # the outer block resumes its count
        assert np.shares_memory(pass_array((4, 3), np.float32), first)
