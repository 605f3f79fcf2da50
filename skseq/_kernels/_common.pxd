# cython: language_level=3
"""Helpers shared by every kernel module: scratch allocation and sequence offsets.

Declared once here and cimported (``from ._common cimport ...``); being
``inline``, each module -- and its AVX2 twin -- compiles its own copy with its
own flags.  Nothing here computes anything numeric: that stays in the kernel
modules (and their shared ``.h`` / ``.pxi`` files).

Scratch arrays come from numpy's C API (no Python-level ``import`` per call),
zero-filled and 64-byte aligned: a row of a padded state (a multiple of 8
numbers) then never straddles two cache lines more than it must, while numpy
only guarantees 16 bytes.  They must be allocated with the GIL, before the
``with nogil:`` block that uses them, and a module that uses them must call
``cnp.import_array()`` at import (Cython does not for a cimport made here).
"""

cimport numpy as cnp
from cython cimport floating
from libc.stdint cimport uintptr_t

cdef enum:
    CACHE_LINE = 64


cdef inline cnp.ndarray _aligned_zeros(Py_ssize_t size, int typenum, Py_ssize_t itemsize):
    """A 1-D array of ``size`` zeros of ``typenum`` whose data start on a cache line."""
    cdef cnp.npy_intp length = size + CACHE_LINE // itemsize
    cdef cnp.ndarray buffer = cnp.PyArray_ZEROS(1, &length, typenum, 0)
    cdef uintptr_t address = <uintptr_t>cnp.PyArray_DATA(buffer)
    cdef Py_ssize_t offset = <Py_ssize_t>((CACHE_LINE - address % CACHE_LINE) % CACHE_LINE)
    offset //= itemsize
    return buffer[offset:offset + size]


cdef inline double[::1] zeros_1d(Py_ssize_t n):
    """(n,) float64 zeros."""
    return _aligned_zeros(n, cnp.NPY_DOUBLE, sizeof(double))


cdef inline double[:, ::1] zeros_2d(Py_ssize_t n_rows, Py_ssize_t n_columns):
    """(n_rows, n_columns) float64 zeros."""
    return _aligned_zeros(n_rows * n_columns, cnp.NPY_DOUBLE, sizeof(double)).reshape(
        n_rows, n_columns)


cdef inline double[:, :, ::1] zeros_3d(Py_ssize_t n_blocks, Py_ssize_t n_rows,
                                       Py_ssize_t n_columns):
    """(n_blocks, n_rows, n_columns) float64 zeros."""
    return _aligned_zeros(n_blocks * n_rows * n_columns, cnp.NPY_DOUBLE,
                          sizeof(double)).reshape(n_blocks, n_rows, n_columns)


cdef inline floating[:, ::1] zeros_like_2d(const floating[:, ::1] like, Py_ssize_t n_rows,
                                           Py_ssize_t n_columns):
    """(n_rows, n_columns) zeros of the dtype of ``like`` (float32 or float64)."""
    cdef int typenum = cnp.NPY_FLOAT if floating is float else cnp.NPY_DOUBLE
    return _aligned_zeros(n_rows * n_columns, typenum, sizeof(floating)).reshape(
        n_rows, n_columns)


cdef inline floating[::1] floating_zeros_1d(floating kind, Py_ssize_t n):
    """(n,) zeros of the type of ``kind`` (float32 or float64; its value is unused).

    For a fused kernel whose arrays give no C-contiguous 2-D array to take
    the type from: call as ``floating_zeros_1d(<floating>0, n)``.
    """
    cdef int typenum = cnp.NPY_FLOAT if floating is float else cnp.NPY_DOUBLE
    return _aligned_zeros(n, typenum, sizeof(floating))


cdef inline floating[:, ::1] floating_zeros_2d(floating kind, Py_ssize_t n_rows,
                                               Py_ssize_t n_columns):
    """(n_rows, n_columns) zeros of the type of ``kind``."""
    cdef int typenum = cnp.NPY_FLOAT if floating is float else cnp.NPY_DOUBLE
    return _aligned_zeros(n_rows * n_columns, typenum, sizeof(floating)).reshape(
        n_rows, n_columns)


cdef inline floating[:, :, ::1] floating_zeros_3d(floating kind, Py_ssize_t n_blocks,
                                                  Py_ssize_t n_rows, Py_ssize_t n_columns):
    """(n_blocks, n_rows, n_columns) zeros of the type of ``kind``."""
    cdef int typenum = cnp.NPY_FLOAT if floating is float else cnp.NPY_DOUBLE
    return _aligned_zeros(n_blocks * n_rows * n_columns, typenum, sizeof(floating)).reshape(
        n_blocks, n_rows, n_columns)


cdef inline Py_ssize_t longest_sequence(const Py_ssize_t[::1] offsets) noexcept nogil:
    """Rows of the longest sequence that ``offsets`` delimit, at least 1 (sizes scratch)."""
    cdef Py_ssize_t s, longest = 1
    for s in range(offsets.shape[0] - 1):
        if offsets[s + 1] - offsets[s] > longest:
            longest = offsets[s + 1] - offsets[s]
    return longest


cdef inline Py_ssize_t[::1] zeros_intp_1d(Py_ssize_t n):
    """(n,) zeros of Py_ssize_t (numpy's intp)."""
    return _aligned_zeros(n, cnp.NPY_INTP, sizeof(Py_ssize_t))


cdef inline cnp.ndarray zeros_uint64_2d(Py_ssize_t n_rows, Py_ssize_t n_columns):
    """(n_rows, n_columns) uint64 zeros, as an array (for bit masks)."""
    return _aligned_zeros(n_rows * n_columns, cnp.NPY_UINT64, sizeof(cnp.npy_uint64)).reshape(
        n_rows, n_columns)
