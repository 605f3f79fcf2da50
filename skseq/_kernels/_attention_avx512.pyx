# cython: language_level=3
# The attention kernels of _attention.pyx, compiled a third time with AVX-512
# and 512-bit vectors (setup.py): the row maxima, exponentials and sums of the
# score tiles run 16 floats at a time.  skseq._kernels.load picks this module
# at run time on CPUs that have AVX-512 F, DQ, BW and VL.
include "_attention.pyx"
