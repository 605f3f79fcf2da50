# cython: language_level=3
# The kernels of _hsmm.pyx, compiled a second time with AVX2 and FMA enabled
# (setup.py).  skseq._kernels.load picks this module at run time on CPUs that
# have both, and the portable one elsewhere.
include "_hsmm.pyx"
