# cython: language_level=3
"""Branch-free elementary functions and restrict pointer types shared by the kernels.

Textually included (``include "_elementary.pxi"``) by the kernel modules that
need them, so every module -- and its AVX2 twin -- compiles its own inlined
copy with its own flags.  The functions avoid libm calls and floating-point
comparisons (which may trap under GCC's default ``-ftrapping-math``), so the
loops that call them vectorise; range tests read sign bits instead.
"""

from libc.math cimport INFINITY
from libc.stdint cimport uint32_t, uint64_t

from cython cimport floating


# Pointers that do not alias any other pointer of the same loop.
cdef extern from *:
    ctypedef float* float_out "float * __restrict__"
    ctypedef double* double_out "double * __restrict__"
    ctypedef const float* float_in "const float * __restrict__"
    ctypedef const double* double_in "const double * __restrict__"

ctypedef fused floating_out:
    float_out
    double_out

ctypedef fused floating_in:
    float_in
    double_in


cdef union _Bits64:
    double real
    uint64_t integer


cdef union _Bits32:
    float real
    uint32_t integer


# ------------------------------------------------------ elementary functions


# Bounds on |x| within which the unchecked exponentials below are exact to
# about 1 ulp: 2**k must stay a normal number.
cdef double EXP_SAFE_BOUND64 = 708.0
cdef float EXP_SAFE_BOUND32 = 86.0


cdef inline double _exp_in_range64(double x) noexcept nogil:
    """exp(x) for |x| <= 708, to about 1 ulp.

    x = k ln2 + r with |r| <= ln2 / 2 (Cody-Waite reduction with a two-part
    ln2), exp(r) by a degree-11 polynomial (Chebyshev fit, error 3e-18)
    evaluated by Estrin's scheme, whose short dependency chains let the
    processor overlap neighbouring elements, times 2**k built in the exponent
    bits.
    """
    cdef _Bits64 scale
    cdef double k, r, r2, r4
    # Adding 1.5 * 2**52 rounds to an integer held in the low mantissa bits.
    k = x * 1.4426950408889634 + 6755399441055744.0
    scale.real = k
    k = k - 6755399441055744.0
    r = (x - k * 6.93147180369123816490e-01) - k * 1.90821492927058770002e-10
    r2 = r * r
    r4 = r2 * r2
    # The low bits of scale.integer hold k; shifted into the exponent field
    # with bias 1022 they make 2**(k - 1).
    scale.integer = (scale.integer + 1022) << 52
    return (
        ((1.0 + r) + r2 * (0.50000000000000183855 + 0.16666666666666680806 * r))
        + r4 * (
            ((0.041666666666488095495 + 0.0083333333333196006109 * r)
             + r2 * (0.0013888888952314774652 + 0.00019841269890047113707 * r))
            + r4 * ((0.000024801485482328492419 + 2.7557240918578969823e-6 * r)
                    + r2 * (2.7632639639041029749e-7 + 2.5110037605963777712e-8 * r)))
    ) * 2.0 * scale.real


cdef inline float _exp_in_range32(float x) noexcept nogil:
    """exp(x) for |x| <= 86 in single precision (degree-6 fit, error 2e-9)."""
    cdef _Bits32 scale
    cdef float k, r, r2, r4
    k = x * <float>1.44269504 + <float>12582912.0
    scale.real = k
    k = k - <float>12582912.0
    r = (x - k * <float>0.693359375) - k * <float>-2.12194440e-4
    r2 = r * r
    r4 = r2 * r2
    scale.integer = (scale.integer + 126) << 23
    return (
        ((<float>1.0 + <float>1.0000000377162138 * r)
         + r2 * (<float>0.50000000471177577 + <float>0.16666415514653275 * r))
        + r4 * ((<float>0.041666352896775157 + <float>0.0083751263981533357 * r)
                + r2 * <float>0.0013941108433972675)
    ) * <float>2.0 * scale.real


cdef inline double _exp64(double x) noexcept nogil:
    """exp(x) for any x but NaN, without branches or comparisons.

    x < -708 gives 0 (the true value is below 2**-1021) and x > 709.78 gives
    inf.  The range tests read the sign bit of x - bound: a floating-point
    comparison would keep GCC from vectorising under -ftrapping-math.
    """
    cdef _Bits64 clamped, below, above, bound, result
    cdef uint64_t below_mask, above_mask
    below.real = x + 708.0
    above.real = 709.78 - x
    below_mask = 0 - (below.integer >> 63)
    above_mask = 0 - (above.integer >> 63)
    clamped.real = x
    bound.real = -708.0
    clamped.integer = (clamped.integer & ~below_mask) | (bound.integer & below_mask)
    bound.real = 709.78
    clamped.integer = (clamped.integer & ~above_mask) | (bound.integer & above_mask)
    result.real = _exp_in_range64(clamped.real)
    bound.real = INFINITY
    result.integer = (result.integer & ~(below_mask | above_mask)) | (bound.integer & above_mask)
    return result.real


cdef inline float _exp32(float x) noexcept nogil:
    """exp(x) in single precision for any x but NaN; x < -86 gives 0, x > 88.72 inf."""
    cdef _Bits32 clamped, below, above, bound, result
    cdef uint32_t below_mask, above_mask
    below.real = x + <float>86.0
    above.real = <float>88.72 - x
    below_mask = 0 - (below.integer >> 31)
    above_mask = 0 - (above.integer >> 31)
    clamped.real = x
    bound.real = <float>-86.0
    clamped.integer = (clamped.integer & ~below_mask) | (bound.integer & below_mask)
    bound.real = <float>88.72
    clamped.integer = (clamped.integer & ~above_mask) | (bound.integer & above_mask)
    result.real = _exp_in_range32(clamped.real)
    bound.real = <float>INFINITY
    result.integer = (result.integer & ~(below_mask | above_mask)) | (bound.integer & above_mask)
    return result.real


cdef inline double _exp_nonpositive64(double x) noexcept nogil:
    """exp(x) for x <= 0 (not NaN): only the underflow test of :func:`_exp64`."""
    cdef _Bits64 clamped, below, bound, result
    cdef uint64_t below_mask
    below.real = x + 708.0
    below_mask = 0 - (below.integer >> 63)
    clamped.real = x
    bound.real = -708.0
    clamped.integer = (clamped.integer & ~below_mask) | (bound.integer & below_mask)
    result.real = _exp_in_range64(clamped.real)
    result.integer = result.integer & ~below_mask
    return result.real


cdef inline float _exp_nonpositive32(float x) noexcept nogil:
    """exp(x) for x <= 0 (not NaN) in single precision; x < -86 gives 0."""
    cdef _Bits32 clamped, below, bound, result
    cdef uint32_t below_mask
    below.real = x + <float>86.0
    below_mask = 0 - (below.integer >> 31)
    clamped.real = x
    bound.real = <float>-86.0
    clamped.integer = (clamped.integer & ~below_mask) | (bound.integer & below_mask)
    result.real = _exp_in_range32(clamped.real)
    result.integer = result.integer & ~below_mask
    return result.real


cdef inline double _log1p_unit64(double e) noexcept nogil:
    """log(1 + e) for 0 <= e <= 1, to about 1 ulp, without branches.

    log(1 + e) = 2 atanh(s) with s = e / (2 + e); for e > sqrt(2) - 1 it is
    ln 2 + 2 atanh(s) with s = (e - 1) / (e + 3) instead, so |s| < 0.1716 and
    the odd series of atanh needs terms up to s**23 (error below 1e-18).
    """
    cdef _Bits64 upper, numerator, denominator, high, offset
    cdef uint64_t upper_mask
    cdef double s, w, p
    upper.real = 0.41421356237309503 - e
    upper_mask = 0 - (upper.integer >> 63)
    numerator.real = e
    high.real = e - 1.0
    numerator.integer = (numerator.integer & ~upper_mask) | (high.integer & upper_mask)
    denominator.real = e + 2.0
    high.real = e + 3.0
    denominator.integer = (denominator.integer & ~upper_mask) | (high.integer & upper_mask)
    s = numerator.real / denominator.real
    offset.real = 0.6931471805599453
    offset.integer = offset.integer & upper_mask
    w = s * s
    p = 1.0 / 23.0
    p = p * w + 1.0 / 21.0
    p = p * w + 1.0 / 19.0
    p = p * w + 1.0 / 17.0
    p = p * w + 1.0 / 15.0
    p = p * w + 1.0 / 13.0
    p = p * w + 1.0 / 11.0
    p = p * w + 1.0 / 9.0
    p = p * w + 1.0 / 7.0
    p = p * w + 1.0 / 5.0
    p = p * w + 1.0 / 3.0
    return offset.real + 2.0 * (s + s * (w * p))


cdef inline float _log1p_unit32(float e) noexcept nogil:
    """log(1 + e) for 0 <= e <= 1 in single precision (see :func:`_log1p_unit64`)."""
    cdef _Bits32 upper, numerator, denominator, high, offset
    cdef uint32_t upper_mask
    cdef float s, w, p
    upper.real = <float>0.41421356 - e
    upper_mask = 0 - (upper.integer >> 31)
    numerator.real = e
    high.real = e - <float>1.0
    numerator.integer = (numerator.integer & ~upper_mask) | (high.integer & upper_mask)
    denominator.real = e + <float>2.0
    high.real = e + <float>3.0
    denominator.integer = (denominator.integer & ~upper_mask) | (high.integer & upper_mask)
    s = numerator.real / denominator.real
    offset.real = <float>0.69314718
    offset.integer = offset.integer & upper_mask
    w = s * s
    p = <float>(1.0 / 11.0)
    p = p * w + <float>(1.0 / 9.0)
    p = p * w + <float>(1.0 / 7.0)
    p = p * w + <float>(1.0 / 5.0)
    p = p * w + <float>(1.0 / 3.0)
    return offset.real + <float>2.0 * (s + s * (w * p))


cdef inline floating _exp(floating x) noexcept nogil:
    if floating is float:
        return _exp32(x)
    else:
        return _exp64(x)


cdef inline floating _exp_in_range(floating x) noexcept nogil:
    """exp(x) for |x| <= EXP_SAFE_BOUND (unchecked)."""
    if floating is float:
        return _exp_in_range32(x)
    else:
        return _exp_in_range64(x)


cdef inline floating _exp_safe_bound(floating x) noexcept nogil:
    """EXP_SAFE_BOUND of the precision of ``x``."""
    if floating is float:
        return EXP_SAFE_BOUND32
    else:
        return EXP_SAFE_BOUND64


cdef inline floating _where_negative(floating r, floating if_negative, floating otherwise
                                    ) noexcept nogil:
    """``if_negative`` when the sign bit of r is set, else ``otherwise``; no branch."""
    cdef _Bits64 r64, yes64, no64
    cdef _Bits32 r32, yes32, no32
    cdef uint64_t mask64
    cdef uint32_t mask32
    if floating is float:
        r32.real = r
        yes32.real = if_negative
        no32.real = otherwise
        mask32 = 0 - (r32.integer >> 31)
        no32.integer = (no32.integer & ~mask32) | (yes32.integer & mask32)
        return no32.real
    else:
        r64.real = r
        yes64.real = if_negative
        no64.real = otherwise
        mask64 = 0 - (r64.integer >> 63)
        no64.integer = (no64.integer & ~mask64) | (yes64.integer & mask64)
        return no64.real


cdef inline floating _log1p_unit(floating e) noexcept nogil:
    if floating is float:
        return _log1p_unit32(e)
    else:
        return _log1p_unit64(e)


cdef inline floating _softplus_from(floating r, floating e) noexcept nogil:
    """log(1 + exp(r)) = max(r, 0) + log1p(exp(-|r|)), given e = exp(-|r|)."""
    return _where_negative(r, <floating>0, r) + _log1p_unit(e)


cdef inline floating _exp_nonpositive(floating x) noexcept nogil:
    """exp(x) for x <= 0 (not NaN); 0 below the precision's underflow bound."""
    if floating is float:
        return _exp_nonpositive32(x)
    else:
        return _exp_nonpositive64(x)


cdef inline floating _exp_minus_abs(floating r) noexcept nogil:
    """exp(-|r|), in (0, 1]."""
    if floating is float:
        return _exp_nonpositive32(_where_negative(r, r, -r))
    else:
        return _exp_nonpositive64(_where_negative(r, r, -r))


cdef inline floating _sigmoid_from(floating r, floating e) noexcept nogil:
    """1 / (1 + exp(-r)) given e = exp(-|r|): 1 / (1 + e) for r >= 0, e / (1 + e) else."""
    return _where_negative(r, e, <floating>1) / (1 + e)
