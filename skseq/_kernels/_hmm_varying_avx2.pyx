# cython: language_level=3
# The kernels of _hmm_varying.pyx, compiled a second time with AVX2 and FMA enabled
# (setup.py); skseq._kernels.load picks this module on CPUs that have both.
include "_hmm_varying.pyx"
