# cython: language_level=3
"""Log-space sums shared by the kernels that keep their messages as logarithms
(``_hmm_varying``, ``_hsmm``).

Declared once here and cimported (``from ._log_space cimport log_sum_exp``);
being ``inline``, each module -- and its AVX2 twin -- compiles its own copy
with its own flags.
"""

from libc.math cimport INFINITY, exp, log


cdef inline double log_sum_exp(const double* values, Py_ssize_t n) noexcept nogil:
    """log sum_i exp(values[i]); -inf when every value is -inf."""
    cdef Py_ssize_t i
    cdef double largest = -INFINITY, total = 0.0
    for i in range(n):
        if values[i] > largest:
            largest = values[i]
    if largest == -INFINITY:
        return -INFINITY
    for i in range(n):
        total += exp(values[i] - largest)
    return largest + log(total)
