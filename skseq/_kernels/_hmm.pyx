# cython: language_level=3
"""Hidden Markov model kernels: scaled forward-backward and log-space Viterbi.

Pure numeric code on typed memoryviews.  Nothing here validates its inputs:
the callers in :mod:`skseq.inference.hmm` do.  Every function works on the
rows of several sequences concatenated, split by ``offsets`` (sequence ``s``
is rows ``offsets[s]:offsets[s + 1]``), and releases the GIL for the whole
computation, so threads can run it on disjoint groups of sequences.

Emissions come in max-shifted: ``frame[t, j] = exp(log b_j(x_t) - shift[t])``
with ``shift[t] = max_j log b_j(x_t)``, so the largest entry of each row is 1.
:func:`shift_rows` computes ``log b - shift`` and the caller exponentiates
(numpy's vectorised exp is several times faster than calling libm per entry).
The scaled recursions divide the forward message of every row by its sum
(the stored filtered distribution) and record the scale ``c_t``, with
``log p(x_t | x_<t) = log c_t + shift[t]``; the message carried to the next
row is rescaled only when its mass falls below 2^-64 (see ``_forward_one``).

The scaled recursions are exact or loud: they bound the effect of whatever
underflowed (a shifted emission or a message entry below the double range)
and flag a sequence, status NaN, when that effect could reach 2^-40 relative;
the callers redo flagged sequences with :func:`log_forward` /
:func:`log_forward_backward`.  The argument is in doc/user_guide/hmm.rst,
"When the scaled recursions are exact".
"""

from libc.float cimport DBL_MIN
from libc.stdint cimport uint64_t
from libc.math cimport INFINITY, NAN, exp, fabs, isnan, log

from ._blas cimport NoTrans, RowMajor, Trans, _gemm
from ._common cimport longest_sequence, zeros_1d, zeros_2d, zeros_3d, zeros_uint64_2d

cimport numpy as cnp

cnp.import_array()  # numpy's C API, for the scratch allocators of _common



def shift_rows(
    const double[:, ::1] log_frame,  # IN
    double[:, ::1] shifted,  # OUT
    double[::1] shift,  # OUT
):
    """shifted[t] = log_frame[t] - max(log_frame[t]); shift[t] = that max.

    ``shifted`` may be ``log_frame`` itself.  A row that is -inf for every
    state gets shift -inf and stays -inf (so exp gives a zero row: the
    forward pass then reports probability zero).
    """
    cdef Py_ssize_t n_rows = log_frame.shape[0]
    cdef Py_ssize_t n_states = log_frame.shape[1]
    cdef Py_ssize_t t, j
    cdef double m
    with nogil:
        for t in range(n_rows):
            m = log_frame[t, 0]
            for j in range(1, n_states):
                if log_frame[t, j] > m:
                    m = log_frame[t, j]
            shift[t] = m
            if m == -INFINITY:
                for j in range(n_states):
                    shifted[t, j] = -INFINITY
            else:
                for j in range(n_states):
                    shifted[t, j] = log_frame[t, j] - m


cdef extern from "_row_products.h":
    # The rows' K x K products, in registers (explicit AVX2 vectors in the
    # _avx2 builds; see the header).  For a row-major n x n matrix:
    # out[j] = factors[j] sum_i vector[i] matrix[i, j], returning sum_j out[j];
    double _vector_matrix "skseq_vector_matrix" (
        const double* vector, const double* matrix, const double* factors, Py_ssize_t n,
        double* out) noexcept nogil
    # next[j] = max_i previous[i] + log_trans[i, j] + log_frame[j] and the
    # lowest such i (``log_trans_t`` is the transposed matrix).
    void _viterbi_step "skseq_viterbi_step" (
        const double* previous, const double* log_trans, const double* log_trans_t,
        const double* log_frame, Py_ssize_t n, double* next, int* best_from) noexcept nogil


# The forward recursion carries an unnormalised message and rescales it only
# when its mass falls below this (2^-64): the division by the row sum then
# stays off the chain of dependent operations from one row to the next.
cdef double _RESCALE_BELOW = 5.421010862427522e-20

# Exact or loud: the argument is in doc/user_guide/hmm.rst, "When the scaled
# recursions are exact".  In short: each operation has an absolute underflow
# error of at most 2^-1075 and numpy's exp one of a few 2^-1074, so an entry
# of the forward message (carried units) is off by at most
# (n_states + 5) 2^-1074 beyond ordinary rounding.  An entry at or above
# 2^53 times that, (n_states + 5) 2^-1021, is as accurate as if nothing had
# underflowed; one below it is "small" and is charged that absolute error.
# The kernels follow where the charges can go (a scalar bound when the
# transition matrix has no zeros, the vector of the errors otherwise) and
# flag a sequence, status NaN, as soon as they could move the likelihood of
# a prefix of the sequence by more than _TOLERANCE, relative.
cdef double _SMALL_UNIT = 4.450147717014403e-308  # 2^-1021
# The error bounds count in units of 2^-1034 (a charge of (n_states + 5)
# 2^-1074 is then (n_states + 5) 2^-40 units, a normal number, and the limit
# below stays finite).
cdef double _UNIT = 5.43230922487e-312  # 2^-1034
cdef double _CHARGE_UNIT = 9.094947017729282e-13  # 2^-40 = 2^-1074 / _UNIT
cdef double _TOLERANCE = 1.4551915228366852e-11  # 2^-36
cdef double _LIMIT = 2.6787715179656683e+300  # 2^998 = _TOLERANCE / _UNIT
# A bound below this leaves the log-likelihood exact to _TOLERANCE relative
# unless |log-likelihood| < 2^-164, far below its own rounding.
cdef double _NEGLIGIBLE = 6.223015277861142e-61  # 2^-200
# The scalar bound is used while max_k A_kl <= 2^64 min_k A_kl in every column.
cdef double _DENSE_BELOW = 5.421010862427522e-20  # 2^-64
# The backward pass's own underflow errors: at most (n_states + 2) 2^-1075
# (1 + 1/c_{t+1}) per row on the posteriors, absolutely; 2^-1075 = DBL_MIN * this.
cdef double _HALF_ULP_OF_ONE = 1.1102230246251565e-16  # 2^-53
# Sum_i alpha_t(i) beta_t(i) is one in exact arithmetic; the backward pass
# flags a row whose sum is further from one than this (a message overflowed,
# or an error slipped through the bounds: a safety net).
cdef double _TOTAL_TOLERANCE = 1e-4


cdef double _amplification(const double[:, ::1] trans) noexcept nogil:
    """rho = max over columns l of max_k A_kl / min_k A_kl, or -1 when above 2^64.

    Columns without a positive entry are left out.  rho bounds every scaled
    backward message, beta_t(j) / sum_k alpha_t(k) beta_t(k) <= rho, for any
    data and any horizon: an error of e (relative) in one forward entry moves
    the likelihood of any prefix by at most rho e.
    """
    cdef Py_ssize_t n_states = trans.shape[0]
    cdef Py_ssize_t k, l
    cdef double high, low, rho = 1.0
    for l in range(n_states):
        high = 0.0
        low = INFINITY
        for k in range(n_states):
            high = max(high, trans[k, l])
            low = min(low, trans[k, l])
        if high == 0.0:
            continue
        if not low >= high * _DENSE_BELOW:
            return -1.0
        rho = max(rho, high / low)
    return rho


cdef object _column_masks(const double[:, ::1] trans):
    """Bit i of word i // 64 of row l is set when A_il > 0: (n_states, n_words) uint64."""
    cdef Py_ssize_t n_states = trans.shape[0]
    cdef Py_ssize_t i, l
    masks = zeros_uint64_2d(n_states, (n_states + 63) // 64)
    cdef uint64_t[:, ::1] view = masks
    for l in range(n_states):
        for i in range(n_states):
            if trans[i, l] > 0.0:
                view[l, i // 64] |= (<uint64_t>1) << (i % 64)
    return masks


cdef bint _reachable(
    const uint64_t[:, ::1] column_masks, Py_ssize_t j, const uint64_t* positive,
) noexcept nogil:
    """Whether some i has message[i] > 0 and A_ij > 0 (``positive`` holds the
    bits of message > 0); otherwise entry j of the next message is an exact zero."""
    cdef Py_ssize_t w
    for w in range(column_masks.shape[1]):
        if positive[w] & column_masks[j, w]:
            return True
    return False


cdef void _positive_bits(const double* message, Py_ssize_t n_states, uint64_t* positive,
                         Py_ssize_t n_words) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n_words):
        positive[i] = 0
    for i in range(n_states):
        if message[i] > 0.0:
            positive[i // 64] |= (<uint64_t>1) << (i % 64)


cdef double _forward_one(
    const double[::1] start,
    const double[:, ::1] trans,
    const double[:, ::1] frame,
    double[:, ::1] alpha,
    double[::1] scale,
    double[:, ::1] work,
    double rho,
    const uint64_t[:, ::1] column_masks,
    uint64_t* positive,
) noexcept nogil:
    """Scaled forward pass over the rows of one sequence.

    Writes the normalised forward messages into ``alpha`` and the scale
    factors ``c_t = p(x_t | x_<t) / exp(shift_t)`` into ``scale`` (the caller
    takes their logs, vectorised).  ``work`` is scratch of shape (4, n_states);
    ``rho`` comes from :func:`_amplification`, ``column_masks`` from
    :func:`_column_masks`, ``positive`` is scratch of ``column_masks.shape[1]``
    words.

    Returns a bound on the relative error of the sequence's likelihood from
    underflow (0 when nothing underflowed), or NaN when the sequence may have
    probability zero (a row's mass below the smallest normal double) or the
    bound passed ``_TOLERANCE`` at some row: the caller then redoes it in log
    space.

    The message carried from row to row is a_t = (a_{t-1} A) * frame_t with
    mass m_t = sum(a_t), so c_t = m_t / m_{t-1}; it is reset to the normalised
    alpha_t when m_t < 2^-64.  Since A's rows sum to one and frame <= 1, the
    mass never grows.

    The bounds cost one comparison per entry and a branch per row while
    nothing is small.  The vector of the errors (transition matrices with
    zeros) is carried only from the first small entry on, by a second product
    that does not feed the chain of the message.
    """
    cdef Py_ssize_t n_rows = frame.shape[0]
    cdef Py_ssize_t n_states = trans.shape[0]
    cdef Py_ssize_t n_words = column_masks.shape[1]
    cdef Py_ssize_t t, j, n_small
    cdef double mass, inv_mass, previous_inv_mass, value, smallest
    cdef double small = (n_states + 5) * _SMALL_UNIT
    cdef double charge = (n_states + 5) * _CHARGE_UNIT
    cdef bint dense = rho >= 1.0
    cdef double dense_limit = _LIMIT / rho if dense else 0.0
    # Dense: the sum over rows of the charges / m_t.  Vector: a bound on the
    # error of each entry of the carried message; error_mass is its sum.
    # Both in units of _UNIT.
    cdef double bound = 0.0, error_mass = 0.0
    cdef bint tracking = False, rescale
    cdef const double* transition = &trans[0, 0]
    cdef const double* frame_row
    cdef double* alpha_row
    cdef double* message = &work[0, 0]
    cdef double* following = &work[1, 0]
    cdef double* error = &work[2, 0]
    cdef double* error_next = &work[3, 0]
    cdef double* swap

    mass = 0.0
    n_small = 0
    frame_row = &frame[0, 0]
    for j in range(n_states):
        value = start[j] * frame_row[j]
        message[j] = value
        mass = mass + value
        n_small += value < small
    if not mass >= DBL_MIN:
        return NAN
    inv_mass = 1.0 / mass
    if n_small:
        if dense:
            bound = n_small * charge * inv_mass
            if bound > dense_limit:
                return NAN
        else:
            # An entry with start probability 0 is an exact zero.
            for j in range(n_states):
                error[j] = 0.0
                if message[j] < small and start[j] > 0.0:
                    error[j] = charge * inv_mass
                    error_mass += error[j]
            if error_mass > _LIMIT:
                return NAN
            tracking = error_mass > 0.0
    alpha_row = &alpha[0, 0]
    for j in range(n_states):
        message[j] = message[j] * inv_mass
        alpha_row[j] = message[j]
    scale[0] = mass
    previous_inv_mass = 1.0

    for t in range(1, n_rows):
        frame_row = &frame[t, 0]
        mass = _vector_matrix(message, transition, frame_row, n_states, following)
        if not mass >= DBL_MIN:
            return NAN
        inv_mass = 1.0 / mass
        alpha_row = &alpha[t, 0]
        smallest = following[0]
        for j in range(n_states):
            alpha_row[j] = following[j] * inv_mass
            smallest = min(smallest, following[j])
        scale[t] = mass * previous_inv_mass
        if smallest < small or tracking:
            rescale = mass < _RESCALE_BELOW
            n_small = 0
            for j in range(n_states):
                n_small += following[j] < small
            if dense:
                bound += n_small * charge * inv_mass
                if bound > dense_limit:
                    return NAN
            else:
                # The errors so far go through the same linear map as the
                # message; each small entry that is not an exact zero adds
                # a charge of its own.
                if tracking:
                    error_mass = _vector_matrix(error, transition, frame_row, n_states,
                                                error_next)
                else:
                    error_mass = 0.0
                    for j in range(n_states):
                        error_next[j] = 0.0
                if n_small:
                    _positive_bits(message, n_states, positive, n_words)
                    for j in range(n_states):
                        if following[j] < small and (
                                following[j] > 0.0
                                or _reachable(column_masks, j, positive)):
                            error_next[j] += charge
                            error_mass += charge
                if rescale:
                    for j in range(n_states):
                        error_next[j] *= inv_mass
                    error_mass *= inv_mass
                    if error_mass > _LIMIT:
                        return NAN
                elif error_mass > _LIMIT * mass:
                    return NAN
                tracking = error_mass > 0.0
                swap = error
                error = error_next
                error_next = swap
        if mass < _RESCALE_BELOW:
            for j in range(n_states):
                following[j] = alpha_row[j]
            previous_inv_mass = 1.0
        else:
            previous_inv_mass = inv_mass
        swap = message
        message = following
        following = swap
    if dense:
        return bound * rho * _UNIT
    # The carried message's mass is 1 / previous_inv_mass (1 after a rescale).
    return error_mass * _UNIT * previous_inv_mass


cdef double _backward_one(
    const double[:, ::1] trans_t,
    double[:, ::1] frame,
    const double[:, ::1] alpha,
    const double[::1] scale,
    double[:, ::1] posteriors,
    double[:, ::1] xi_unscaled,
    double[::1] beta,
    const double[::1] ones,
    const double* beta_last,
    double* w_first,
) noexcept nogil:
    """Scaled backward pass over one sequence, fused with the posterior sums.

    ``trans_t`` is the transposed transition matrix.  Posteriors
    gamma_t = alpha_t * beta_t go to ``posteriors``.  The transition counts are
    xi_t(i, j) = alpha_t(i) A_ij w_{t+1}(j) with w_{t+1} = frame_{t+1}
    beta_{t+1} / c_{t+1}.  Each w_{t+1} overwrites row t+1 of ``frame`` (no
    longer needed) and is the next vector of the recursion
    beta_t = A w_{t+1}; sum_t alpha_t w_{t+1}^T is added to ``xi_unscaled``
    by one matrix product at the end; the caller multiplies by A_ij.
    ``beta`` is scratch of length n_states; ``ones`` a vector of ones as long.

    For a chunk of rows of a longer sequence (checkpointed forward-backward),
    ``beta_last`` is the scaled backward message of the chunk's last row
    (NULL: the sequence ends there, beta = 1), and ``w_first``, when not NULL,
    receives w of the chunk's first row, which the previous chunk needs.

    Returns 0, or NaN (nothing added to ``xi_unscaled``) when a row's
    sum_i alpha_t(i) beta_t(i), one in exact arithmetic, is not within
    ``_TOTAL_TOLERANCE`` of one (a backward message overflowed), or when the
    bound on this pass's own underflow errors passes ``_TOLERANCE``.
    """
    cdef Py_ssize_t n_rows = frame.shape[0]
    cdef Py_ssize_t n_states = trans_t.shape[0]
    cdef Py_ssize_t t, i
    cdef double total, inv_total, inv_c
    cdef double inverse_scales = 0.0
    cdef const double* transition_t = &trans_t[0, 0]
    cdef const double* alpha_row
    cdef double* posterior_row
    cdef double* w = &beta[0]
    cdef double* b = &beta[0]
    cdef int m, k
    cdef double one = 1.0

    if beta_last == NULL:
        for i in range(n_states):
            b[i] = 1.0
            posteriors[n_rows - 1, i] = alpha[n_rows - 1, i]
    else:
        posterior_row = &posteriors[n_rows - 1, 0]
        alpha_row = &alpha[n_rows - 1, 0]
        total = 0.0
        for i in range(n_states):
            b[i] = beta_last[i]
            posterior_row[i] = alpha_row[i] * b[i]
            total = total + posterior_row[i]
        if not fabs(total - 1.0) <= _TOTAL_TOLERANCE:
            return NAN
        inv_total = 1.0 / total
        for i in range(n_states):
            posterior_row[i] = posterior_row[i] * inv_total

    for t in range(n_rows - 2, -1, -1):
        inv_c = 1.0 / scale[t + 1]
        inverse_scales += inv_c
        w = &frame[t + 1, 0]
        alpha_row = &alpha[t + 1, 0]
        # Where alpha_{t+1} is zero, no path with forward weight passes
        # (or, if it underflowed, the forward bound covers those paths):
        # leaving w at zero there is exact and keeps the backward message of a
        # state not reachable yet, whose emissions may be far better, from
        # overflowing.
        for i in range(n_states):
            w[i] = w[i] * b[i] * inv_c if alpha_row[i] > 0.0 else 0.0
        b = &beta[0]
        _vector_matrix(w, transition_t, &ones[0], n_states, b)
        alpha_row = &alpha[t, 0]
        posterior_row = &posteriors[t, 0]
        total = 0.0
        for i in range(n_states):
            posterior_row[i] = alpha_row[i] * b[i]
            total = total + posterior_row[i]
        if not fabs(total - 1.0) <= _TOTAL_TOLERANCE:
            return NAN
        # gamma_t sums to one in exact arithmetic; renormalise the rounding.
        inv_total = 1.0 / total
        for i in range(n_states):
            posterior_row[i] = posterior_row[i] * inv_total
    if w_first != NULL:
        # As every w above: zero where the forward message is zero.
        inv_c = 1.0 / scale[0]
        inverse_scales += inv_c
        for i in range(n_states):
            w_first[i] = frame[0, i] * b[i] * inv_c if alpha[0, i] > 0.0 else 0.0
    if ((n_rows + inverse_scales) * DBL_MIN * (n_states + 2) * _HALF_ULP_OF_ONE
            > _TOLERANCE):
        return NAN

    if n_rows < 2:
        return 0.0
    # xi (K, K) += Alpha^T (K, n_rows-1) @ W (n_rows-1, K), i.e.
    # xi[i, j] += sum_t alpha[t, i] w[t+1, j].
    m = <int>n_states
    k = <int>(n_rows - 1)
    _gemm(RowMajor, Trans, NoTrans, m, m, k, one, &alpha[0, 0], m, &frame[1, 0], m, one,
          &xi_unscaled[0, 0], m)
    return 0.0


cdef double _vouch(double bound, const double[::1] scale, const double[::1] shift) noexcept nogil:
    """0 when the fast path's numbers stand, NaN (redo in log space) otherwise.

    ``bound`` is :func:`_forward_one`'s bound on the relative error of the
    likelihood, hence an absolute bound on the log-likelihood; it must also
    stay below _TOLERANCE times |log-likelihood|, which is summed here only
    when the bound is not negligible (rarely: it is 0 when nothing underflowed).
    """
    cdef Py_ssize_t t
    cdef double log_likelihood = 0.0
    if isnan(bound):
        return NAN
    if bound <= _NEGLIGIBLE:
        return 0.0
    for t in range(scale.shape[0]):
        log_likelihood += log(scale[t]) + shift[t]
    if bound <= _TOLERANCE * min(1.0, fabs(log_likelihood)):
        return 0.0
    return NAN


def forward(
    const double[::1] start,  # IN
    const double[:, ::1] trans,  # IN
    const double[:, ::1] frame,  # IN
    const double[::1] shift,  # IN
    const Py_ssize_t[::1] offsets,  # IN
    double[:, ::1] filtered,  # OUT
    double[::1] scale,  # OUT
    double[::1] sequence_status,  # OUT
):
    """Filtered state distributions (normalised forward messages).

    ``shift`` is the max-shift of the rows of ``frame`` (see
    :func:`shift_rows`).  Fills ``filtered`` (n_samples, n_states) and the
    scale factors ``c_t`` (n_samples,): log c_t + shift_t is
    log p(x_t | x_<t).  ``sequence_status`` gets 0 per sequence, or NaN when
    its scaled recursion cannot vouch for its numbers (see ``_forward_one``
    and ``_vouch``; its rows are then zero, for :func:`log_forward` to redo).
    """
    cdef Py_ssize_t n_sequences = offsets.shape[0] - 1
    cdef Py_ssize_t n_states = trans.shape[0]
    cdef Py_ssize_t s, first, stop
    cdef double[:, ::1] work = zeros_2d(4, n_states)
    cdef uint64_t[:, ::1] column_masks = _column_masks(trans)
    cdef uint64_t[::1] positive = column_masks[0].copy()
    cdef double rho
    with nogil:
        rho = _amplification(trans)
        for s in range(n_sequences):
            first = offsets[s]
            stop = offsets[s + 1]
            sequence_status[s] = _vouch(
                _forward_one(start, trans, frame[first:stop], filtered[first:stop],
                             scale[first:stop], work, rho, column_masks, &positive[0]),
                scale[first:stop], shift[first:stop])
            if isnan(sequence_status[s]):
                _discard_rows(scale[first:stop], filtered[first:stop])


def forward_backward(
    const double[::1] start,  # IN
    const double[:, ::1] trans,  # IN
    double[:, ::1] frame,  # IN, overwritten (scratch)
    const double[::1] shift,  # IN
    const Py_ssize_t[::1] offsets,  # IN
    double[:, ::1] posteriors,  # OUT
    double[::1] scale,  # OUT
    double[::1] sequence_status,  # OUT
    double[::1] start_counts,  # INOUT
    double[:, ::1] transition_counts,  # INOUT
    double[:, ::1] alpha,  # scratch
):
    """Posteriors, scale factors and summed expected counts.

    ``frame`` (max-shifted by ``shift``) is overwritten (used as scratch by
    the backward pass), and
    ``alpha`` is scratch with at least as many rows as the longest sequence
    (the caller keeps it between calls: fresh arrays cost page faults).  Fills
    the scale factors ``c_t`` (log c_t + shift_t is log p(x_t | x_<t)), adds
    the posterior of each sequence's first row to ``start_counts`` and
    sum_t xi_t to ``transition_counts``.  ``sequence_status`` gets 0 per
    sequence, or NaN when its forward or backward pass cannot vouch for its
    numbers (see ``_forward_one``, ``_vouch`` and ``_backward_one``): zero posteriors,
    nothing added to the counts, for :func:`log_forward_backward` to redo.
    """
    cdef Py_ssize_t n_sequences = offsets.shape[0] - 1
    cdef Py_ssize_t n_states = trans.shape[0]
    cdef Py_ssize_t s, i, j, first, stop
    cdef double[:, ::1] trans_t = trans.T.copy()
    cdef double[:, ::1] xi_unscaled = zeros_2d(n_states, n_states)
    cdef double[:, ::1] work = zeros_2d(4, n_states)
    cdef double[::1] beta = zeros_1d(n_states)
    cdef double[::1] ones = zeros_1d(n_states)
    cdef uint64_t[:, ::1] column_masks = _column_masks(trans)
    cdef uint64_t[::1] positive = column_masks[0].copy()
    cdef double rho
    ones[:] = 1.0
    with nogil:
        rho = _amplification(trans)
        for s in range(n_sequences):
            first = offsets[s]
            stop = offsets[s + 1]
            sequence_status[s] = _vouch(
                _forward_one(start, trans, frame[first:stop], alpha[:stop - first],
                             scale[first:stop], work, rho, column_masks, &positive[0]),
                scale[first:stop], shift[first:stop])
            if not isnan(sequence_status[s]) and isnan(_backward_one(
                    trans_t, frame[first:stop], alpha[:stop - first], scale[first:stop],
                    posteriors[first:stop], xi_unscaled, beta, ones, NULL, NULL)):
                sequence_status[s] = NAN
            if isnan(sequence_status[s]):
                _discard_rows(scale[first:stop], posteriors[first:stop])
                continue
            for i in range(n_states):
                start_counts[i] += posteriors[first, i]
        for i in range(n_states):
            for j in range(n_states):
                transition_counts[i, j] += trans[i, j] * xi_unscaled[i, j]


def backward_chunk(
    const double[:, ::1] trans,  # IN
    double[:, ::1] frame,  # IN, overwritten (scratch)
    const double[:, ::1] alpha,  # IN
    const double[::1] scale,  # IN
    const double[::1] beta_last,  # IN
    bint has_next,
    double[:, ::1] posteriors,  # OUT
    double[:, ::1] xi_unscaled,  # INOUT
    double[::1] w_first,  # OUT
):
    """The scaled backward pass over one chunk of the rows of a long sequence.

    ``alpha`` and ``scale`` are what :func:`forward` gave for the chunk (run
    from the chunk's predicted start); ``frame`` is the chunk's max-shifted
    emissions.  ``beta_last`` is the scaled backward message of the chunk's
    last row when ``has_next`` (a later chunk follows), else ignored (beta = 1).
    Fills ``posteriors``, adds sum_t alpha_t w_{t+1}^T over the chunk's rows to
    ``xi_unscaled`` (the caller multiplies by the transition matrix) and
    puts w of the chunk's first row in ``w_first``.  Returns 0, or NaN (nothing
    added) when the pass cannot vouch for its numbers (see ``_backward_one``).
    """
    cdef Py_ssize_t n_states = trans.shape[0]
    cdef double[:, ::1] trans_t = trans.T.copy()
    cdef double[::1] beta = zeros_1d(n_states)
    cdef double[::1] ones = zeros_1d(n_states)
    cdef double status
    ones[:] = 1.0
    with nogil:
        status = _backward_one(trans_t, frame, alpha, scale, posteriors, xi_unscaled, beta,
                               ones, &beta_last[0] if has_next else NULL, &w_first[0])
    return status


def viterbi(
    const double[::1] log_start,  # IN
    const double[:, ::1] log_trans,  # IN
    const double[:, ::1] log_frame,  # IN
    const Py_ssize_t[::1] offsets,  # IN
    Py_ssize_t[::1] states,  # OUT
    double[::1] sequence_log_prob,  # OUT
    int[:, ::1] backpointer,  # scratch
):
    """Most likely state path of each sequence, by max-sum in log space.

    Writes the path into ``states`` and its joint log-probability into
    ``sequence_log_prob``.  Ties go to the lowest state index.
    ``backpointer`` is scratch with at least as many rows as the longest
    sequence.
    """
    cdef Py_ssize_t n_sequences = offsets.shape[0] - 1
    cdef Py_ssize_t n_states = log_trans.shape[0]
    cdef Py_ssize_t s, t, j, first, stop, best_state
    cdef double best
    cdef double[:, ::1] delta = zeros_2d(2, n_states)
    cdef double[:, ::1] log_trans_t = log_trans.T.copy()
    cdef Py_ssize_t now, before
    with nogil:
        for s in range(n_sequences):
            first = offsets[s]
            stop = offsets[s + 1]
            if stop <= first:
                sequence_log_prob[s] = 0.0
                continue
            for j in range(n_states):
                delta[0, j] = log_start[j] + log_frame[first, j]
            now = 0
            for t in range(first + 1, stop):
                before = now
                now = 1 - now
                _viterbi_step(&delta[before, 0], &log_trans[0, 0], &log_trans_t[0, 0],
                              &log_frame[t, 0], n_states, &delta[now, 0],
                              &backpointer[t - first, 0])
            best = delta[now, 0]
            best_state = 0
            for j in range(1, n_states):
                if delta[now, j] > best:
                    best = delta[now, j]
                    best_state = j
            sequence_log_prob[s] = best
            states[stop - 1] = best_state
            for t in range(stop - 1, first, -1):
                best_state = backpointer[t - first, best_state]
                states[t - 1] = best_state


def sample_states(
    const double[::1] start_cdf,  # IN
    const double[:, ::1] trans_cdf,  # IN
    const double[::1] uniforms,  # IN
    Py_ssize_t[::1] states,  # OUT
):
    """Draw a state path by inverse-CDF sampling from uniform variates.

    ``start_cdf`` and the rows of ``trans_cdf`` are cumulative sums of
    probability vectors.  ``states[0]`` is drawn from ``start_cdf`` and
    ``states[t]`` from row ``states[t - 1]`` of ``trans_cdf``.
    """
    cdef Py_ssize_t n_samples = states.shape[0]
    cdef Py_ssize_t n_states = start_cdf.shape[0]
    cdef Py_ssize_t t, j, state
    with nogil:
        for t in range(n_samples):
            state = n_states - 1
            for j in range(n_states):
                if t == 0:
                    if uniforms[t] < start_cdf[j]:
                        state = j
                        break
                elif uniforms[t] < trans_cdf[states[t - 1], j]:
                    state = j
                    break
            states[t] = state


def forward_smoothing(
    const double[::1] startprob,  # IN
    const double[:, ::1] trans,  # IN
    const double[:, ::1] frame,  # IN
    const double[::1] shift,  # IN
    const double[:, :, ::1] features,  # IN
    bint fresh,
    double[::1] alpha,  # INOUT
    double[:, ::1] start_stat,  # INOUT
    double[:, :, ::1] trans_stat,  # INOUT
    double[:, :, ::1] emission_stat,  # INOUT
    double[::1] log_predictive,  # OUT
):
    """Forward-only smoothing of sufficient statistics over the rows of one chunk.

    Exact smoothed expectations of additive statistics with a forward pass
    only, so a sequence can arrive in chunks: the message carried from one
    chunk to the next has a size independent of how many rows have passed.
    For every state j the message holds, given x_1..x_t and z_t = j,

    * ``start_stat[j, a]`` = p(z_1 = a | ...),
    * ``trans_stat[j, a, b]`` = E[#(z_s = a, z_{s+1} = b), s < t | ...],
    * ``emission_stat[j, a, :]`` = E[sum_{s <= t} [z_s = a] features[s, a] | ...],

    and ``alpha`` holds p(z_t | x_1..x_t).  Each row updates them through the
    backward kernel p(z_{t-1} = i | z_t = j, x_1..x_{t-1}) =
    alpha_{t-1}(i) A_ij / sum_i' alpha_{t-1}(i') A_i'j.  The smoothed statistics
    of all rows so far are then sum_j alpha(j) stat[j, ...].

    ``fresh`` starts a new sequence at the first row (from ``startprob``);
    otherwise the rows continue the sequence whose message is passed in.
    ``frame`` and ``shift`` are the max-shifted emission probabilities.
    Fills ``log_predictive`` and returns the log-likelihood of the rows given
    the past, or NaN when the scaled recursion underflows (probability zero,
    or a state's mass below 1e-308 relative to the others); the message is
    then unusable.
    """
    cdef Py_ssize_t n_states = trans.shape[0]
    cdef Py_ssize_t n_features = features.shape[2]
    cdef double log_likelihood
    cdef double[:, ::1] backward = zeros_2d(n_states, n_states)
    cdef double[::1] predicted = zeros_1d(n_states)
    cdef double[:, ::1] start_new = zeros_2d(n_states, n_states)
    cdef double[:, :, ::1] trans_new = zeros_3d(n_states, n_states, n_states)
    cdef double[:, :, ::1] emission_new = zeros_3d(n_states, n_states, n_features)
    with nogil:
        log_likelihood = _forward_smoothing(
            startprob, trans, frame, shift, features, fresh, alpha, start_stat, trans_stat,
            emission_stat, log_predictive, backward, predicted, start_new, trans_new,
            emission_new)
    return log_likelihood


cdef double _forward_smoothing(
    const double[::1] startprob,
    const double[:, ::1] trans,
    const double[:, ::1] frame,
    const double[::1] shift,
    const double[:, :, ::1] features,
    bint fresh,
    double[::1] alpha,
    double[:, ::1] start_stat,
    double[:, :, ::1] trans_stat,
    double[:, :, ::1] emission_stat,
    double[::1] log_predictive,
    double[:, ::1] backward,
    double[::1] predicted,
    double[:, ::1] start_new,
    double[:, :, ::1] trans_new,
    double[:, :, ::1] emission_new,
) noexcept nogil:
    """The recursion of :func:`forward_smoothing`, on preallocated scratch."""
    cdef Py_ssize_t n_rows = frame.shape[0]
    cdef Py_ssize_t n_states = trans.shape[0]
    cdef Py_ssize_t n_features = features.shape[2]
    cdef Py_ssize_t t, i, j, a, b, p, first
    cdef double c, r_ji, total = 0.0
    if n_rows == 0:
        return 0.0
    first = 0
    if fresh:
        c = 0.0
        for j in range(n_states):
            alpha[j] = startprob[j] * frame[0, j]
            c += alpha[j]
        if not c >= DBL_MIN:
            return NAN
        for j in range(n_states):
            alpha[j] /= c
            for a in range(n_states):
                start_stat[j, a] = 1.0 if a == j else 0.0
                for b in range(n_states):
                    trans_stat[j, a, b] = 0.0
                for p in range(n_features):
                    emission_stat[j, a, p] = features[0, j, p] if a == j else 0.0
        log_predictive[0] = log(c) + shift[0]
        total += log_predictive[0]
        first = 1
    for t in range(first, n_rows):
        # predicted(j) = sum_i alpha(i) A_ij and the backward kernel r(i | j)
        for j in range(n_states):
            predicted[j] = 0.0
        for i in range(n_states):
            for j in range(n_states):
                predicted[j] += alpha[i] * trans[i, j]
        for j in range(n_states):
            for i in range(n_states):
                backward[j, i] = (alpha[i] * trans[i, j] / predicted[j]
                                  if predicted[j] > 0.0 else 0.0)
        c = 0.0
        for j in range(n_states):
            alpha[j] = predicted[j] * frame[t, j]
            c += alpha[j]
        if not c >= DBL_MIN:
            return NAN
        for j in range(n_states):
            alpha[j] /= c
        log_predictive[t] = log(c) + shift[t]
        total += log_predictive[t]
        for j in range(n_states):
            for a in range(n_states):
                start_new[j, a] = 0.0
                for b in range(n_states):
                    trans_new[j, a, b] = 0.0
                for p in range(n_features):
                    emission_new[j, a, p] = 0.0
            for i in range(n_states):
                r_ji = backward[j, i]
                if r_ji == 0.0:
                    continue
                for a in range(n_states):
                    start_new[j, a] += r_ji * start_stat[i, a]
                    for b in range(n_states):
                        trans_new[j, a, b] += r_ji * trans_stat[i, a, b]
                    for p in range(n_features):
                        emission_new[j, a, p] += r_ji * emission_stat[i, a, p]
            for a in range(n_states):
                trans_new[j, a, j] += backward[j, a]
            for p in range(n_features):
                emission_new[j, j, p] += features[t, j, p]
        for j in range(n_states):
            for a in range(n_states):
                start_stat[j, a] = start_new[j, a]
                for b in range(n_states):
                    trans_stat[j, a, b] = trans_new[j, a, b]
                for p in range(n_features):
                    emission_stat[j, a, p] = emission_new[j, a, p]
    return total


cdef inline double _two_sum_error(double a, double b, double total) noexcept nogil:
    """The rounding error of ``total = fl(a + b)`` (Knuth's TwoSum): a + b = total + error
    exactly, for finite a, b and total."""
    cdef double b_part = total - a
    return (a - (total - b_part)) + (b - b_part)


cdef inline double _add_pair(double a, double a_low, double b, double b_low,
                             double* low) noexcept nogil:
    """(a + a_low) + (b + b_low) as the unevaluated sum of the returned double and
    ``low[0]``: the rounding error of a + b is kept, so a small term added to a huge
    one (log 0.5 to a log-emission of -1e16, whose ulp is 2) is not lost.  -inf
    (low 0) when either is -inf."""
    cdef double total = a + b
    if total == -INFINITY:
        low[0] = 0.0
        return total
    low[0] = _two_sum_error(a, b, total) + (a_low + b_low)
    return total


cdef double _log_sum_exp_pair(const double* high, const double* low, Py_ssize_t n,
                              double* result_low) noexcept nogil:
    """log sum_i exp(high[i] + low[i]) without overflow, as the returned double
    plus ``result_low[0]``.  The terms that are not negligible are within
    ~750 of the largest, so their differences from it are exact or of O(1) numbers,
    however huge the terms; -inf (low 0) when every term is -inf."""
    cdef Py_ssize_t i, best = 0
    cdef double total = 0.0, rest, result
    for i in range(1, n):
        if high[i] > high[best]:
            best = i
    if high[best] == -INFINITY:
        result_low[0] = 0.0
        return -INFINITY
    for i in range(n):
        total += exp((high[i] - high[best]) + (low[i] - low[best]))
    rest = low[best] + log(total)
    result = high[best] + rest
    result_low[0] = _two_sum_error(high[best], rest, result)
    return result


cdef Py_ssize_t _log_forward_one(
    const double[::1] log_start,
    const double[:, ::1] log_trans_t,
    const double[:, ::1] log_frame,
    double[:, ::1] log_alpha,
    double[:, ::1] log_alpha_low,
    double[:, ::1] log_prior,
    double[:, ::1] log_prior_low,
    double[::1] log_scale,
    double[::1] terms,
    double[::1] terms_low,
    double[::1] low,
) noexcept nogil:
    """The scaled forward pass in log space, over the rows of one sequence.

    ``log_frame`` holds the log-emissions (unshifted, or shifted by the
    caller) and ``log_trans_t`` the transposed log transition matrix.  Writes
    log alpha_t, the log of the normalised forward message (logsumexp 0 on
    every row), the log predicted probabilities
    log_prior_t(j) = log p(z_t = j | x_<t) and log c_t.  Returns the number
    of leading rows of positive probability: all of them, or the index of
    the first row where every path has probability zero.

    The log-emissions of a row may be huge (1e14 nats) while only their
    differences matter: log_prior_t(j) + log_frame[t, j] is kept as an
    unevaluated sum of two doubles (TwoSum, the error in ``low``), and its
    difference from the row's largest is taken before rounding.  Two states
    whose log-emissions are huge but close then keep the digits of their
    difference; log alpha_t and log_prior_t stay of the order of one row's
    spread of what matters, however long the sequence and however large the
    emissions.  log alpha_t and log_prior_t are themselves kept as unevaluated
    sums (``log_alpha_low``, ``log_prior_low``): where a path's only
    alternative passes through a state of log alpha -1e16, a log transition
    added to it would otherwise be rounded away (ulp 2) and reappear in the
    backward pass, where the huge parts cancel.
    """
    cdef Py_ssize_t n_rows = log_frame.shape[0]
    cdef Py_ssize_t n_states = log_trans_t.shape[0]
    cdef Py_ssize_t t, i, j, best
    cdef double prior, prior_low, value, high, rest, best_high, best_low, total, shift
    for t in range(n_rows):
        best = 0
        for j in range(n_states):
            if t == 0:
                prior = log_start[j]
                prior_low = 0.0
            else:
                for i in range(n_states):
                    terms[i] = _add_pair(log_alpha[t - 1, i], log_alpha_low[t - 1, i],
                                         log_trans_t[j, i], 0.0, &terms_low[i])
                prior = _log_sum_exp_pair(&terms[0], &terms_low[0], n_states, &prior_low)
            log_prior[t, j] = prior
            log_prior_low[t, j] = prior_low
            log_alpha[t, j] = _add_pair(prior, prior_low, log_frame[t, j], 0.0, &low[j])
            if log_alpha[t, j] > log_alpha[t, best]:
                best = j
        best_high = log_alpha[t, best]
        if best_high == -INFINITY:
            return t
        best_low = low[best]
        total = 0.0
        for j in range(n_states):
            if log_alpha[t, j] > -INFINITY:
                # Sterbenz: the difference of the highs is exact where it matters;
                # the rounding errors (of O(1) numbers elsewhere) go to low[j].
                value = log_alpha[t, j]
                high = value - best_high
                rest = low[j] - best_low
                log_alpha[t, j] = high + rest
                low[j] = (_two_sum_error(high, rest, log_alpha[t, j])
                          + _two_sum_error(value, -best_high, high))
            total += exp(log_alpha[t, j])
        shift = log(total)
        log_scale[t] = best_high + (best_low + shift)
        for j in range(n_states):
            if log_alpha[t, j] > -INFINITY:
                high = log_alpha[t, j] - shift
                log_alpha_low[t, j] = low[j] + _two_sum_error(log_alpha[t, j], -shift, high)
                log_alpha[t, j] = high
            else:
                log_alpha_low[t, j] = 0.0
    return n_rows


cdef double _log_predictive_one(
    const double[::1] log_scale,
    const double[::1] shift,
    Py_ssize_t possible,
    double[::1] log_predictive,
) noexcept nogil:
    """log p(x_t | x_<t) = log c_t + shift_t of the rows of one sequence, -inf
    from the first impossible row on; returns their sum, the log-likelihood."""
    cdef Py_ssize_t t
    cdef double total = 0.0
    for t in range(log_predictive.shape[0]):
        log_predictive[t] = log_scale[t] + shift[t] if t < possible else -INFINITY
        total += log_predictive[t]
    return total


cdef void _filtered_rows(
    const double[:, ::1] log_alpha,
    Py_ssize_t possible,
    double[:, ::1] filtered,
) noexcept nogil:
    """The filtered probabilities exp(log_alpha) of the rows of ``filtered`` (one
    sequence or one chunk of one), zero from the first impossible row on."""
    cdef Py_ssize_t t, j
    for t in range(filtered.shape[0]):
        for j in range(filtered.shape[1]):
            filtered[t, j] = exp(log_alpha[t, j]) if t < possible else 0.0


cdef void _zero_rows(double[:, ::1] rows) noexcept nogil:
    """Zero posteriors for the rows of a sequence (or chunk) of probability zero."""
    cdef Py_ssize_t t, i
    for t in range(rows.shape[0]):
        for i in range(rows.shape[1]):
            rows[t, i] = 0.0


cdef void _discard_rows(double[::1] scale, double[:, ::1] rows) noexcept nogil:
    """Mark the rows of a sequence whose scaled pass cannot vouch for its numbers:
    scale NaN (the caller redoes them in log space) and zero ``rows``."""
    cdef Py_ssize_t t
    for t in range(scale.shape[0]):
        scale[t] = NAN
    _zero_rows(rows)


# The log-space passes' work arrays, by one rule for the four entry points
# that run them.  They go to the entry points' typed locals, so the nogil
# loops and their calls are the same code as with arrays allocated in place.
cdef tuple _log_forward_arrays(Py_ssize_t n_rows, Py_ssize_t n_states):
    """log alpha and log prior with their low parts, (n_rows, n_states) each;
    log scale, (n_rows,); the terms, their low parts and low, (n_states,) each."""
    return (zeros_2d(n_rows, n_states), zeros_2d(n_rows, n_states),
            zeros_2d(n_rows, n_states), zeros_2d(n_rows, n_states), zeros_1d(n_rows),
            zeros_1d(n_states), zeros_1d(n_states), zeros_1d(n_states))


cdef tuple _log_backward_arrays(Py_ssize_t n_rows, Py_ssize_t n_states):
    """log beta with its low parts, (n_rows, n_states) each; the following
    message with its low parts, (n_states,) each; the pair posteriors of a
    row with their low parts, (n_states, n_states) each."""
    return (zeros_2d(n_rows, n_states), zeros_2d(n_rows, n_states), zeros_1d(n_states),
            zeros_1d(n_states), zeros_2d(n_states, n_states), zeros_2d(n_states, n_states))


def log_forward(
    const double[::1] log_start,  # IN
    const double[:, ::1] log_trans,  # IN
    const double[:, ::1] log_frame,  # IN
    const double[::1] shift,  # IN
    const Py_ssize_t[::1] offsets,  # IN
    const Py_ssize_t[::1] sequences,  # IN
    double[:, ::1] filtered,  # INOUT
    double[::1] log_predictive,  # INOUT
    double[::1] sequence_log_likelihood,  # INOUT
):
    """:func:`forward` in log space, for the listed ``sequences`` only.

    ``log_frame`` is max-shifted by ``shift`` (see :func:`shift_rows`).
    Exact where the scaled recursion cannot vouch for its numbers, at the cost
    of an exp per transition term.  A sequence of probability zero gets
    log-likelihood -inf, zero filtered rows and -inf log predictive densities
    from its first impossible row on.
    """
    cdef Py_ssize_t n_states = log_trans.shape[0]
    cdef Py_ssize_t index, s, first, stop, possible
    cdef double[:, ::1] log_alpha, log_alpha_low, log_prior, log_prior_low
    cdef double[::1] log_scale, terms, terms_low, low
    log_alpha, log_alpha_low, log_prior, log_prior_low, log_scale, terms, terms_low, low = (
        _log_forward_arrays(longest_sequence(offsets), n_states))
    cdef double[:, ::1] log_trans_t = log_trans.T.copy()
    with nogil:
        for index in range(sequences.shape[0]):
            s = sequences[index]
            first = offsets[s]
            stop = offsets[s + 1]
            possible = _log_forward_one(
                log_start, log_trans_t, log_frame[first:stop], log_alpha, log_alpha_low,
                log_prior, log_prior_low, log_scale, terms, terms_low, low)
            sequence_log_likelihood[s] = _log_predictive_one(
                log_scale, shift[first:stop], possible, log_predictive[first:stop])
            _filtered_rows(log_alpha, possible, filtered[first:stop])


cdef inline void _following(
    const double[::1] log_alpha,
    const double[::1] log_alpha_low,
    const double[::1] log_prior,
    const double[::1] log_prior_low,
    const double[::1] log_beta,
    const double[::1] log_beta_low,
    double[::1] following,
    double[::1] following_low,
) noexcept nogil:
    """log(frame_{t+1}(j) beta_{t+1}(j) / c_{t+1}) from row t+1's messages.

    frame_{t+1}(j) / c_{t+1} = alpha_{t+1}(j) / p(z_{t+1} = j | x_<=t): the
    ratio of two normalised quantities, free of the row's (possibly huge)
    log-emissions and log c_{t+1}, whose difference would carry
    eps |log c_{t+1}| of rounding.  A state that cannot be reached has no
    weight.  Every term is an unevaluated sum (the ``_low`` parts), and so is
    the result: log alpha and log beta can be huge and of opposite signs, and
    a rounding of either would survive their cancellation.
    """
    cdef Py_ssize_t j
    cdef double high, low
    for j in range(following.shape[0]):
        if log_prior[j] == -INFINITY or log_alpha[j] == -INFINITY:
            following[j] = -INFINITY
            following_low[j] = 0.0
        else:
            high = _add_pair(log_alpha[j], log_alpha_low[j], -log_prior[j], -log_prior_low[j],
                             &low)
            following[j] = _add_pair(high, low, log_beta[j], log_beta_low[j], &following_low[j])


cdef void _add_pair_posteriors(
    const double[::1] log_alpha,
    const double[::1] log_alpha_low,
    const double[:, ::1] log_trans,
    const double[::1] following,
    const double[::1] following_low,
    double[:, ::1] pairs,
    double[:, ::1] pairs_low,
    double[:, ::1] transition_counts,
) noexcept nogil:
    """Add xi_t(i, j), proportional to alpha_t(i) A_ij exp(following[j]), to the
    counts, normalised to sum to one (as it does in exact arithmetic): the
    counts of a sequence sum to its number of transitions.  The logs are
    unevaluated sums (the ``_low`` parts, see :func:`_following`)."""
    cdef Py_ssize_t n_states = log_trans.shape[0]
    cdef Py_ssize_t i, j
    cdef double largest = -INFINITY, largest_low = 0.0, total = 0.0, inv_total, high, low
    for i in range(n_states):
        for j in range(n_states):
            high = _add_pair(log_alpha[i], log_alpha_low[i], log_trans[i, j], 0.0, &low)
            pairs[i, j] = _add_pair(high, low, following[j], following_low[j], &pairs_low[i, j])
            if pairs[i, j] > largest:
                largest = pairs[i, j]
                largest_low = pairs_low[i, j]
    if largest == -INFINITY:  # not for a sequence of positive probability
        return
    for i in range(n_states):
        for j in range(n_states):
            pairs[i, j] = exp((pairs[i, j] - largest) + (pairs_low[i, j] - largest_low))
            total += pairs[i, j]
    inv_total = 1.0 / total
    for i in range(n_states):
        for j in range(n_states):
            transition_counts[i, j] += pairs[i, j] * inv_total


cdef void _log_backward_one(
    const double[:, ::1] log_trans,
    const double[:, ::1] log_alpha,
    const double[:, ::1] log_alpha_low,
    const double[:, ::1] log_prior,
    const double[:, ::1] log_prior_low,
    double[:, ::1] log_beta,
    double[:, ::1] log_beta_low,
    double[::1] following,
    double[::1] following_low,
    double[::1] terms,
    double[::1] terms_low,
    double[:, ::1] pairs,
    double[:, ::1] pairs_low,
    double[:, ::1] posteriors,
    double[:, ::1] transition_counts,
) noexcept nogil:
    """The log-space backward pass over the rows of ``posteriors`` (one
    sequence or one chunk of one), from ``log_beta`` of the last row, which
    the caller sets (0: the sequence ends there, as ``log_beta_low``); the
    posteriors and the transition counts between its rows (added to
    ``transition_counts``).  ``log_alpha`` and ``log_prior`` (with their low
    parts) are :func:`_log_forward_one`'s; log beta is kept as an unevaluated
    sum too, since log alpha_t + log beta_t cancels where either is huge."""
    cdef Py_ssize_t n_rows = posteriors.shape[0]
    cdef Py_ssize_t n_states = log_trans.shape[0]
    cdef Py_ssize_t t, i, j
    cdef double total, inv_total, high, low
    for t in range(n_rows - 2, -1, -1):
        _following(log_alpha[t + 1], log_alpha_low[t + 1], log_prior[t + 1], log_prior_low[t + 1],
                   log_beta[t + 1], log_beta_low[t + 1], following, following_low)
        for i in range(n_states):
            for j in range(n_states):
                terms[j] = _add_pair(log_trans[i, j], 0.0, following[j], following_low[j],
                                     &terms_low[j])
            log_beta[t, i] = _log_sum_exp_pair(&terms[0], &terms_low[0], n_states,
                                               &log_beta_low[t, i])
    for t in range(n_rows):
        total = 0.0
        for i in range(n_states):
            high = _add_pair(log_alpha[t, i], log_alpha_low[t, i], log_beta[t, i],
                             log_beta_low[t, i], &low)
            posteriors[t, i] = exp(high + low)
            total += posteriors[t, i]
        # sums to one in exact arithmetic; renormalise the rounding
        inv_total = 1.0 / total
        for i in range(n_states):
            posteriors[t, i] *= inv_total
        if t + 1 < n_rows:
            _following(log_alpha[t + 1], log_alpha_low[t + 1], log_prior[t + 1],
                       log_prior_low[t + 1], log_beta[t + 1], log_beta_low[t + 1], following,
                       following_low)
            _add_pair_posteriors(log_alpha[t], log_alpha_low[t], log_trans, following,
                                 following_low, pairs, pairs_low, transition_counts)


def log_forward_backward(
    const double[::1] log_start,  # IN
    const double[:, ::1] log_trans,  # IN
    const double[:, ::1] log_frame,  # IN
    const double[::1] shift,  # IN
    const Py_ssize_t[::1] offsets,  # IN
    const Py_ssize_t[::1] sequences,  # IN
    double[:, ::1] posteriors,  # INOUT
    double[::1] log_predictive,  # INOUT
    double[::1] sequence_log_likelihood,  # INOUT
    double[::1] start_counts,  # INOUT
    double[:, ::1] transition_counts,  # INOUT
):
    """:func:`forward_backward` in log space, for the listed ``sequences`` only.

    ``log_frame`` is shifted by ``shift`` (which may be zero).  The backward
    message is scaled by the forward pass's c_t, as in the scaled recursion:
    beta_t(i) = sum_j A_ij frame_{t+1}(j) beta_{t+1}(j) / c_{t+1}, so
    gamma_t = exp(log alpha_t + log beta_t).  frame_{t+1}(j) / c_{t+1} is
    taken as alpha_{t+1}(j) / p(z_{t+1} = j | x_<=t) (:func:`_following`):
    the row's log-emissions and log c_{t+1} can be huge (emissions 1e14 nats
    apart), and their difference would carry eps |log c_{t+1}| nats of
    rounding.  Each row's pair posteriors xi_t(i, j) are normalised to sum to
    one, as the posteriors are, so the counts of a sequence sum to
    n_rows - 1.  Adds the start and transition counts; a sequence of
    probability zero gets log-likelihood -inf, zero posteriors and adds
    nothing.
    """
    cdef Py_ssize_t n_states = log_trans.shape[0]
    cdef Py_ssize_t longest = longest_sequence(offsets)
    cdef Py_ssize_t index, s, i, first, stop, n_rows, possible
    cdef double[:, ::1] log_alpha, log_alpha_low, log_prior, log_prior_low
    cdef double[::1] log_scale, terms, terms_low, low
    cdef double[:, ::1] log_beta, log_beta_low, pairs, pairs_low
    cdef double[::1] following, following_low
    log_alpha, log_alpha_low, log_prior, log_prior_low, log_scale, terms, terms_low, low = (
        _log_forward_arrays(longest, n_states))
    log_beta, log_beta_low, following, following_low, pairs, pairs_low = (
        _log_backward_arrays(longest, n_states))
    cdef double[:, ::1] log_trans_t = log_trans.T.copy()
    with nogil:
        for index in range(sequences.shape[0]):
            s = sequences[index]
            first = offsets[s]
            stop = offsets[s + 1]
            n_rows = stop - first
            possible = _log_forward_one(
                log_start, log_trans_t, log_frame[first:stop], log_alpha, log_alpha_low,
                log_prior, log_prior_low, log_scale, terms, terms_low, low)
            sequence_log_likelihood[s] = _log_predictive_one(
                log_scale, shift[first:stop], possible, log_predictive[first:stop])
            if possible < n_rows:
                _zero_rows(posteriors[first:stop])
                continue
            for i in range(n_states):
                log_beta[n_rows - 1, i] = 0.0
                log_beta_low[n_rows - 1, i] = 0.0
            _log_backward_one(log_trans, log_alpha, log_alpha_low, log_prior, log_prior_low,
                              log_beta, log_beta_low, following, following_low, terms, terms_low,
                              pairs, pairs_low, posteriors[first:stop], transition_counts)
            for i in range(n_states):
                start_counts[i] += posteriors[first, i]


def log_forward_chunk(
    const double[::1] log_start,  # IN
    const double[:, ::1] log_trans,  # IN
    const double[:, ::1] log_frame,  # IN
    const double[::1] shift,  # IN
    double[:, ::1] filtered,  # OUT
    double[::1] log_predictive,  # OUT
    double[::1] log_last,  # OUT
):
    """:func:`log_forward` over one chunk of the rows of a long sequence.

    ``log_start`` is the log of the chunk's predicted start (the sequence's
    log start probabilities for its first chunk).  Fills ``filtered``,
    ``log_predictive`` and ``log_last``, log p(z | rows so far) of the
    chunk's last row (exact where its probabilities underflow; -inf for a
    chunk of probability zero), and returns the chunk's log-likelihood.
    """
    cdef Py_ssize_t n_rows = log_frame.shape[0]
    cdef Py_ssize_t n_states = log_trans.shape[0]
    cdef Py_ssize_t j, possible
    cdef double log_likelihood
    cdef double[:, ::1] log_alpha, log_alpha_low, log_prior, log_prior_low
    cdef double[::1] log_scale, terms, terms_low, low
    log_alpha, log_alpha_low, log_prior, log_prior_low, log_scale, terms, terms_low, low = (
        _log_forward_arrays(n_rows, n_states))
    cdef double[:, ::1] log_trans_t = log_trans.T.copy()
    with nogil:
        possible = _log_forward_one(log_start, log_trans_t, log_frame, log_alpha, log_alpha_low,
                                    log_prior, log_prior_low, log_scale, terms, terms_low, low)
        log_likelihood = _log_predictive_one(log_scale, shift, possible, log_predictive)
        _filtered_rows(log_alpha, possible, filtered)
        for j in range(n_states):
            log_last[j] = log_alpha[n_rows - 1, j] if possible == n_rows else -INFINITY
    return log_likelihood


def log_forward_backward_chunk(
    const double[::1] log_start,  # IN
    const double[:, ::1] log_trans,  # IN
    const double[:, ::1] log_frame,  # IN
    const double[::1] shift,  # IN
    const double[::1] log_w_next,  # IN
    bint has_next,
    double[:, ::1] posteriors,  # OUT
    double[::1] log_predictive,  # OUT
    double[:, ::1] transition_counts,  # INOUT
    double[::1] log_w_first,  # OUT
):
    """:func:`log_forward_backward` over one chunk of the rows of a long sequence.

    ``log_start`` as in :func:`log_forward_chunk`.  When ``has_next``,
    ``log_w_next`` is log w of the next chunk's first row,
    log(frame(j) beta(j) / c) there: the chunk's last backward message is
    log beta(i) = logsumexp_j(log A_ij + log_w_next(j)), and the transitions
    from its last row into the next chunk are added to ``transition_counts``
    with those between its own rows.  Puts log w of the chunk's first row in
    ``log_w_first`` (-inf where the forward message is zero) and returns the
    chunk's log-likelihood (-inf, zero posteriors and nothing added for a
    chunk of probability zero).
    """
    cdef Py_ssize_t n_rows = log_frame.shape[0]
    cdef Py_ssize_t n_states = log_trans.shape[0]
    cdef Py_ssize_t i, j, possible
    cdef double log_likelihood
    cdef double[:, ::1] log_alpha, log_alpha_low, log_prior, log_prior_low
    cdef double[::1] log_scale, terms, terms_low, low
    cdef double[:, ::1] log_beta, log_beta_low, pairs, pairs_low
    cdef double[::1] following, following_low
    log_alpha, log_alpha_low, log_prior, log_prior_low, log_scale, terms, terms_low, low = (
        _log_forward_arrays(n_rows, n_states))
    log_beta, log_beta_low, following, following_low, pairs, pairs_low = (
        _log_backward_arrays(n_rows, n_states))
    # the carried log_w_next and log_w_first are plain doubles: no low parts
    cdef double[::1] zero_low = zeros_1d(n_states)
    cdef double[:, ::1] log_trans_t = log_trans.T.copy()
    with nogil:
        possible = _log_forward_one(log_start, log_trans_t, log_frame, log_alpha, log_alpha_low,
                                    log_prior, log_prior_low, log_scale, terms, terms_low, low)
        log_likelihood = _log_predictive_one(log_scale, shift, possible, log_predictive)
        if possible < n_rows:
            _zero_rows(posteriors)
            for j in range(n_states):
                log_w_first[j] = -INFINITY
        else:
            for i in range(n_states):
                if not has_next:
                    log_beta[n_rows - 1, i] = 0.0
                    log_beta_low[n_rows - 1, i] = 0.0
                    continue
                for j in range(n_states):
                    terms[j] = _add_pair(log_trans[i, j], 0.0, log_w_next[j], 0.0, &terms_low[j])
                log_beta[n_rows - 1, i] = _log_sum_exp_pair(&terms[0], &terms_low[0], n_states,
                                                            &log_beta_low[n_rows - 1, i])
            if has_next:  # the transitions into the next chunk
                _add_pair_posteriors(log_alpha[n_rows - 1], log_alpha_low[n_rows - 1], log_trans,
                                     log_w_next, zero_low, pairs, pairs_low, transition_counts)
            _log_backward_one(log_trans, log_alpha, log_alpha_low, log_prior, log_prior_low,
                              log_beta, log_beta_low, following, following_low, terms, terms_low,
                              pairs, pairs_low, posteriors, transition_counts)
            _following(log_alpha[0], log_alpha_low[0], log_prior[0], log_prior_low[0], log_beta[0],
                       log_beta_low[0], log_w_first, following_low)
    return log_likelihood
