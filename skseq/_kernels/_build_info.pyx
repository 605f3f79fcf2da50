"""How the kernels were compiled: a probe for the test suite."""

import numpy as np


def bounds_checked():
    """Whether this build checks memoryview indices (``SKSEQ_DEBUG_KERNELS=1`` at build time).

    Reads one element past the end of a view into a larger array: outside the
    view (an IndexError when bounds are checked) but inside the array, so the
    read is harmless when they are not.
    """
    cdef double[:] parent = np.zeros(8)
    cdef double[:] view = parent[2:6]
    cdef Py_ssize_t past_the_end = view.shape[0]
    cdef double value
    try:
        value = view[past_the_end]
    except IndexError:
        return True
    return value != value  # False (value is 0.0), and the read is not optimised away
