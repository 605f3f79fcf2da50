# cython: language_level=3
"""Hidden Markov model kernels with a transition matrix per row (input-driven HMMs).

Pure numeric code on typed memoryviews, in log space, without validation (the
callers in :mod:`skseq.inference.hmm_varying` validate).  As the kernels of
``_hmm.pyx`` they work on the rows of several sequences concatenated, split by
``offsets`` (sequence ``s`` is rows ``offsets[s]:offsets[s + 1]``), and
release the GIL for the whole computation.

``log_trans[t, i, j]`` is log p(z_t = j | z_{t-1} = i) of the step into row
``t``; the entries of the first row of each sequence are not read.  The
forward message is kept normalised, log alpha_t = log p(z_t | x_1..x_t), with
its log normaliser log c_t = log p(x_t | x_<t); the backward message is scaled
by the same c_t, so gamma_t = exp(log alpha_t + log beta_t).

Each sum over states is taken in plain arithmetic on the transition
probabilities ``trans = exp(log_trans)`` (given by the caller, who
exponentiates with numpy's vectorised exp) times the other factor shifted by
its largest log term, so each row costs K exponentials and K logarithms per
pass instead of K^2.  What that can lose: a term whose shifted factor or
whose transition probability underflowed, each below 2^-1022 of the largest
possible term (1).  Whenever such a sum is below 2^-800 (``_EXACT_FLOOR``)
it is computed again as a log-sum-exp of the logarithms, term by term;
above it, what underflowed is below 2^-222 of the sum: the results are
those of the log-space recursion to rounding, however long the sequence or
however far apart the emissions.

Forward filtering and forward-backward first try each sequence in scaled
linear space (``_scaled_forward_rows``, ``_scaled_forward_backward``): the normalised filter alpha_t and the
backward message in plain arithmetic on ``trans`` and the max-shifted
emissions, one exponential per state and row and one logarithm per row.  It
vouches for its numbers with the bounds of the log-space recursion above:
every sum over states at least 2^-800 (what a product lost to underflow,
below 2^-1022 each, is then below 2^-222 of the sum), every scaled forward
value at least 2^-1000 (a normal number, so a state far less likely than the
others now keeps its exact probability), the row's normaliser at least
2^-200 and the backward values at most 2^700 (nothing overflows).  A
sequence where one of them fails -- a structural zero (a forbidden
transition, an impossible emission, a zero start probability), a state whose
probability falls below 2^-1000, emissions far apart -- is redone in log
space from its first row: the numbers are those of the log-space recursion
to rounding either way.
"""

from libc.math cimport INFINITY, exp, log

from ._log_space cimport log_sum_exp

cimport cython

# 2^-800: below it, a sum over states is redone term by term in log space.
cdef double _EXACT_FLOOR = 1.4996968138956309e-241
# The scaled path's bounds (module docstring): 2^-1000, 2^-200 and 2^700.
cdef double _SCALED_FLOOR = 9.332636185032189e-302
cdef double _SCALE_FLOOR = 6.223015277861142e-61
cdef double _BACKWARD_CEILING = 5.260135901548374e+210


cdef double[::1] _scratch(Py_ssize_t n):
    """A work vector of ``n`` doubles (at least one)."""
    return cython.view.array(shape=(max(n, 1),), itemsize=sizeof(double), format="d")


cdef inline double _shifted_exps(
    const double* values, Py_ssize_t n, double* out
) noexcept nogil:
    """out[i] = exp(values[i] - max); returns the max (-inf: out all zero)."""
    cdef Py_ssize_t i
    cdef double largest = -INFINITY
    for i in range(n):
        if values[i] > largest:
            largest = values[i]
    for i in range(n):
        out[i] = 0.0 if largest == -INFINITY else exp(values[i] - largest)
    return largest


cdef inline double _forward_rows(
    const double[::1] log_start,
    const double[:, :, ::1] log_trans,
    const double[:, :, ::1] trans,
    const double[:, ::1] log_frame,
    Py_ssize_t first,
    Py_ssize_t stop,
    double[:, ::1] log_alpha,
    double[::1] log_scale,
    double[::1] terms,
    double[::1] shifted,
) noexcept nogil:
    """The normalised forward pass over rows ``first:stop``; returns the
    sequence's log-likelihood (-inf, and ``log_alpha`` undefined, when zero)."""
    cdef Py_ssize_t n_states = log_frame.shape[1]
    cdef Py_ssize_t t, i, j
    cdef double c, total, largest, log_likelihood = 0.0
    for t in range(first, stop):
        if t == first:
            for j in range(n_states):
                log_alpha[t, j] = log_start[j] + log_frame[t, j]
        else:
            largest = _shifted_exps(&log_alpha[t - 1, 0], n_states, &shifted[0])
            for j in range(n_states):
                total = 0.0
                for i in range(n_states):
                    total += shifted[i] * trans[t, i, j]
                if total >= _EXACT_FLOOR:
                    log_alpha[t, j] = log(total) + largest + log_frame[t, j]
                else:
                    for i in range(n_states):
                        terms[i] = log_alpha[t - 1, i] + log_trans[t, i, j]
                    log_alpha[t, j] = log_sum_exp(&terms[0], n_states) + log_frame[t, j]
        c = log_sum_exp(&log_alpha[t, 0], n_states)
        log_scale[t] = c
        if c == -INFINITY or c != c:
            return -INFINITY
        for j in range(n_states):
            log_alpha[t, j] -= c
        log_likelihood += c
    return log_likelihood


@cython.boundscheck(False)
@cython.wraparound(False)
cdef bint _scaled_forward_rows(
    const double[::1] log_start,
    const double[:, :, ::1] trans,
    const double[:, ::1] log_frame,
    Py_ssize_t first,
    Py_ssize_t stop,
    double[:, ::1] alpha,
    double[:, ::1] frame,
    bint keep_frame,
    double[::1] log_predictive,
    double* log_likelihood,
) noexcept nogil:
    """The forward pass over rows ``first:stop`` in scaled linear space:
    ``alpha[t]`` = p(z_t | x_1..x_t), ``log_predictive[t]``, the sequence's
    log-likelihood in ``log_likelihood[0]``; with ``keep_frame``,
    ``frame[t, j]`` = exp(log_frame[t, j] - max_j log_frame[t, j]) / c_t, c_t
    the row's normaliser in those units.  Returns False (outputs undefined)
    where a bound of the module docstring fails."""
    cdef Py_ssize_t n_states = log_frame.shape[1]
    cdef Py_ssize_t t, i, j
    cdef double largest, total, value, scale, sum_log = 0.0
    for t in range(first, stop):
        largest = -INFINITY
        for j in range(n_states):
            if log_frame[t, j] > largest:
                largest = log_frame[t, j]
        if largest == -INFINITY:
            return False
        scale = 0.0
        for j in range(n_states):
            if t == first:
                total = exp(log_start[j])
            else:
                total = 0.0
                for i in range(n_states):
                    total += alpha[t - 1, i] * trans[t, i, j]
            if not total >= _EXACT_FLOOR:
                return False
            value = total * exp(log_frame[t, j] - largest)
            if not value >= _SCALED_FLOOR:
                return False
            alpha[t, j] = value
            if keep_frame:
                frame[t, j] = value / total
            scale += value
        if not scale >= _SCALE_FLOOR:
            return False
        for j in range(n_states):
            alpha[t, j] /= scale
            if keep_frame:
                frame[t, j] /= scale
        log_predictive[t] = log(scale) + largest
        sum_log += log_predictive[t]
    log_likelihood[0] = sum_log
    return True


@cython.boundscheck(False)
@cython.wraparound(False)
cdef bint _scaled_forward_backward(
    const double[::1] log_start,
    const double[:, :, ::1] trans,
    const double[:, ::1] log_frame,
    Py_ssize_t first,
    Py_ssize_t stop,
    double[:, ::1] alpha,
    double[:, ::1] frame,
    double[:, ::1] posteriors,
    double[:, :, ::1] pair_posteriors,
    double[::1] log_predictive,
    double* log_likelihood,
    double[::1] beta,
    double[::1] beta_next,
    double[::1] weighted,
) noexcept nogil:
    """Forward-backward over rows ``first:stop`` in scaled linear space.

    The forward pass of :func:`_scaled_forward_rows`, then the backward
    message beta_t(i) = sum_j trans[t+1, i, j] frame[t+1, j] beta_{t+1}(j) =
    p(x_{t+1..} | z_t = i) / p(x_{t+1..} | x_1..x_t).  Returns False (outputs
    undefined) where a bound of the module docstring fails: the caller redoes
    the sequence in log space.
    """
    cdef Py_ssize_t n_states = log_frame.shape[1]
    cdef Py_ssize_t t, i, j
    cdef double total, value
    cdef double* swap
    cdef double* b = &beta[0]
    cdef double* b_next = &beta_next[0]
    if not _scaled_forward_rows(
        log_start, trans, log_frame, first, stop, alpha, frame, True, log_predictive,
        log_likelihood,
    ):
        return False
    for i in range(n_states):
        b[i] = 1.0
    t = stop - 1
    while True:
        # posteriors of row t, from alpha_t and beta_t
        total = 0.0
        for i in range(n_states):
            value = alpha[t, i] * b[i]
            posteriors[t, i] = value
            total += value
        for i in range(n_states):
            posteriors[t, i] /= total
        if t == first:
            break
        # beta_{t-1} and the pair posteriors of the step into row t
        for j in range(n_states):
            weighted[j] = frame[t, j] * b[j]
        total = 0.0
        for i in range(n_states):
            value = 0.0
            for j in range(n_states):
                value += trans[t, i, j] * weighted[j]
            if not (value >= _EXACT_FLOOR and value <= _BACKWARD_CEILING):
                return False
            b_next[i] = value
            for j in range(n_states):
                pair_posteriors[t, i, j] = alpha[t - 1, i] * trans[t, i, j] * weighted[j]
                total += pair_posteriors[t, i, j]
        for i in range(n_states):
            for j in range(n_states):
                pair_posteriors[t, i, j] /= total
        swap = b
        b = b_next
        b_next = swap
        t -= 1
    for i in range(n_states):
        for j in range(n_states):
            pair_posteriors[first, i, j] = 0.0
    return True


@cython.boundscheck(False)
@cython.wraparound(False)
def varying_forward(
    const double[::1] log_start,  # IN (K,)
    const double[:, :, ::1] log_trans,  # IN (T, K, K)
    const double[:, :, ::1] trans,  # IN (T, K, K), exp(log_trans)
    const double[:, ::1] log_frame,  # IN (T, K)
    const Py_ssize_t[::1] offsets,  # IN (S + 1,)
    double[:, ::1] log_filtered,  # OUT (T, K)
    double[::1] log_predictive,  # OUT (T,)
    double[::1] sequence_log_likelihood,  # OUT (S,)
    bint scaled=True,  # IN: try the scaled path first (False: log space only)
):
    """Forward filtering: log p(z_t | x_1..x_t), log p(x_t | x_<t) and each
    sequence's log-likelihood.  A sequence of probability zero gets
    log-likelihood -inf and its rows -inf filtered and predictive values."""
    cdef Py_ssize_t n_states = log_frame.shape[1]
    cdef Py_ssize_t s, t, j
    cdef double[::1] terms = _scratch(n_states), shifted = _scratch(n_states)
    cdef double log_likelihood
    with nogil:
        for s in range(offsets.shape[0] - 1):
            if scaled and _scaled_forward_rows(
                log_start, trans, log_frame, offsets[s], offsets[s + 1], log_filtered,
                log_filtered, False, log_predictive, &log_likelihood,
            ):
                sequence_log_likelihood[s] = log_likelihood
                for t in range(offsets[s], offsets[s + 1]):
                    for j in range(n_states):
                        log_filtered[t, j] = log(log_filtered[t, j])
                continue
            sequence_log_likelihood[s] = _forward_rows(
                log_start, log_trans, trans, log_frame, offsets[s], offsets[s + 1],
                log_filtered, log_predictive, terms, shifted,
            )
            if sequence_log_likelihood[s] == -INFINITY:
                for t in range(offsets[s], offsets[s + 1]):
                    log_predictive[t] = -INFINITY
                    for j in range(n_states):
                        log_filtered[t, j] = -INFINITY


@cython.boundscheck(False)
@cython.wraparound(False)
def varying_forward_backward(
    const double[::1] log_start,  # IN (K,)
    const double[:, :, ::1] log_trans,  # IN (T, K, K)
    const double[:, :, ::1] trans,  # IN (T, K, K), exp(log_trans)
    const double[:, ::1] log_frame,  # IN (T, K)
    const Py_ssize_t[::1] offsets,  # IN (S + 1,)
    double[:, ::1] log_alpha,  # INOUT (T, K), work
    double[:, ::1] log_beta,  # INOUT (T, K), work
    double[:, ::1] posteriors,  # OUT (T, K)
    double[:, :, ::1] pair_posteriors,  # OUT (T, K, K)
    double[::1] log_predictive,  # OUT (T,)
    double[::1] sequence_log_likelihood,  # OUT (S,)
    bint scaled=True,  # IN: try the scaled path first (False: log space only)
):
    """Forward-backward: the posteriors p(z_t | x) of every row, the pair
    posteriors ``pair_posteriors[t, i, j]`` = p(z_{t-1} = i, z_t = j | x) of
    the step into every row (zero at the first row of a sequence), each row's
    log p(x_t | x_<t) and each sequence's log-likelihood.  Each row's
    posteriors and pair posteriors are normalised to sum to one (removing
    rounding only).  A sequence of probability zero gets log-likelihood -inf,
    zero posteriors and pair posteriors."""
    cdef Py_ssize_t n_states = log_frame.shape[1]
    cdef Py_ssize_t s, t, i, j, first, stop
    cdef double total, value, largest
    cdef double[::1] terms = _scratch(n_states), shifted = _scratch(n_states)
    cdef double[::1] shifted_next = _scratch(n_states)
    cdef double[::1] beta = _scratch(n_states), beta_next = _scratch(n_states)
    cdef double log_likelihood
    with nogil:
        for s in range(offsets.shape[0] - 1):
            first, stop = offsets[s], offsets[s + 1]
            if scaled and _scaled_forward_backward(
                log_start, trans, log_frame, first, stop, log_alpha, log_beta, posteriors,
                pair_posteriors, log_predictive, &log_likelihood, beta, beta_next, shifted_next,
            ):
                sequence_log_likelihood[s] = log_likelihood
                continue
            sequence_log_likelihood[s] = _forward_rows(
                log_start, log_trans, trans, log_frame, first, stop, log_alpha, log_predictive,
                terms, shifted,
            )
            if sequence_log_likelihood[s] == -INFINITY:
                for t in range(first, stop):
                    log_predictive[t] = -INFINITY
                    for i in range(n_states):
                        posteriors[t, i] = 0.0
                        for j in range(n_states):
                            pair_posteriors[t, i, j] = 0.0
                continue
            for i in range(n_states):
                log_beta[stop - 1, i] = 0.0
            for t in range(stop - 2, first - 1, -1):
                for j in range(n_states):
                    terms[j] = log_frame[t + 1, j] + log_beta[t + 1, j]
                largest = _shifted_exps(&terms[0], n_states, &shifted_next[0])
                for i in range(n_states):
                    total = 0.0
                    for j in range(n_states):
                        total += trans[t + 1, i, j] * shifted_next[j]
                    if total >= _EXACT_FLOOR:
                        log_beta[t, i] = log(total) + largest - log_predictive[t + 1]
                    else:
                        for j in range(n_states):
                            shifted[j] = log_trans[t + 1, i, j] + terms[j]
                        log_beta[t, i] = (
                            log_sum_exp(&shifted[0], n_states) - log_predictive[t + 1]
                        )
            for t in range(first, stop):
                total = 0.0
                for i in range(n_states):
                    value = exp(log_alpha[t, i] + log_beta[t, i])
                    posteriors[t, i] = value
                    total += value
                for i in range(n_states):
                    posteriors[t, i] /= total
                if t == first:
                    for i in range(n_states):
                        for j in range(n_states):
                            pair_posteriors[t, i, j] = 0.0
                    continue
                # xi_t(i, j) is proportional to alpha_{t-1}(i) A_t(i, j) b_t(j) beta_t(j)
                _shifted_exps(&log_alpha[t - 1, 0], n_states, &shifted[0])
                for j in range(n_states):
                    terms[j] = log_frame[t, j] + log_beta[t, j]
                _shifted_exps(&terms[0], n_states, &shifted_next[0])
                total = 0.0
                for i in range(n_states):
                    for j in range(n_states):
                        value = shifted[i] * trans[t, i, j] * shifted_next[j]
                        pair_posteriors[t, i, j] = value
                        total += value
                if not total >= _EXACT_FLOOR:
                    largest = -INFINITY
                    for i in range(n_states):
                        for j in range(n_states):
                            value = log_alpha[t - 1, i] + log_trans[t, i, j] + terms[j]
                            pair_posteriors[t, i, j] = value
                            if value > largest:
                                largest = value
                    total = 0.0
                    for i in range(n_states):
                        for j in range(n_states):
                            value = exp(pair_posteriors[t, i, j] - largest)
                            pair_posteriors[t, i, j] = value
                            total += value
                for i in range(n_states):
                    for j in range(n_states):
                        pair_posteriors[t, i, j] /= total


@cython.boundscheck(False)
@cython.wraparound(False)
def varying_viterbi(
    const double[::1] log_start,  # IN (K,)
    const double[:, :, ::1] log_trans,  # IN (T, K, K)
    const double[:, ::1] log_frame,  # IN (T, K)
    const Py_ssize_t[::1] offsets,  # IN (S + 1,)
    double[:, ::1] log_delta,  # INOUT (T, K), work
    Py_ssize_t[:, ::1] back,  # INOUT (T, K), work
    Py_ssize_t[::1] states,  # OUT (T,)
    double[::1] sequence_log_prob,  # OUT (S,)
):
    """The most likely state path of each sequence and its log p(x, path)
    (-inf, and states 0, for a sequence of probability zero).  Ties go to
    the lowest state index."""
    cdef Py_ssize_t n_states = log_frame.shape[1]
    cdef Py_ssize_t s, t, i, j, first, stop, best_i
    cdef double best, value
    with nogil:
        for s in range(offsets.shape[0] - 1):
            first, stop = offsets[s], offsets[s + 1]
            for j in range(n_states):
                log_delta[first, j] = log_start[j] + log_frame[first, j]
            for t in range(first + 1, stop):
                for j in range(n_states):
                    best, best_i = -INFINITY, 0
                    for i in range(n_states):
                        value = log_delta[t - 1, i] + log_trans[t, i, j]
                        if value > best:
                            best, best_i = value, i
                    log_delta[t, j] = best + log_frame[t, j]
                    back[t, j] = best_i
            best, best_i = -INFINITY, 0
            for j in range(n_states):
                if log_delta[stop - 1, j] > best:
                    best, best_i = log_delta[stop - 1, j], j
            sequence_log_prob[s] = best
            if best == -INFINITY:
                for t in range(first, stop):
                    states[t] = 0
                continue
            states[stop - 1] = best_i
            for t in range(stop - 1, first, -1):
                states[t - 1] = back[t, states[t]]


@cython.boundscheck(False)
@cython.wraparound(False)
def shift_rows_by_max(
    double[:, :, ::1] logits,  # INOUT (T, K, K)
):
    """Each row ``logits[t, i]`` minus its largest entry (a row all -inf stays
    so): the first step of the rows' softmax, whose exponentials numpy then
    takes over the whole array (vectorised, several times faster than one
    libm call per entry)."""
    cdef Py_ssize_t n_rows = logits.shape[0], n_states = logits.shape[1]
    cdef Py_ssize_t t, i, j
    cdef double largest
    with nogil:
        for t in range(n_rows):
            for i in range(n_states):
                largest = -INFINITY
                for j in range(n_states):
                    if logits[t, i, j] > largest:
                        largest = logits[t, i, j]
                if largest == -INFINITY:
                    continue
                for j in range(n_states):
                    logits[t, i, j] -= largest


@cython.boundscheck(False)
@cython.wraparound(False)
def normalize_softmax_rows(
    double[:, :, ::1] logits,  # INOUT (T, K, K): shifted logits in, log probabilities out
    double[:, :, ::1] probabilities,  # INOUT (T, K, K): their exponentials in, softmax out
):
    """The last step of the rows' softmax: each row of ``probabilities``
    (exp of the shifted ``logits``) divided by its sum, whose logarithm is
    taken from the row of ``logits`` (a -inf logit gives -inf and 0; a row all
    -inf gives -inf and 0 throughout)."""
    cdef Py_ssize_t n_rows = logits.shape[0], n_states = logits.shape[1]
    cdef Py_ssize_t t, i, j
    cdef double total, log_total, inverse
    with nogil:
        for t in range(n_rows):
            for i in range(n_states):
                total = 0.0
                for j in range(n_states):
                    total += probabilities[t, i, j]
                if total == 0.0:
                    continue
                log_total = log(total)
                inverse = 1.0 / total
                for j in range(n_states):
                    logits[t, i, j] -= log_total
                    probabilities[t, i, j] *= inverse


def varying_sample_states(
    const double[::1] start_cdf,  # IN
    const double[:, :, ::1] trans_cdf,  # IN
    const double[::1] uniforms,  # IN
    Py_ssize_t[::1] states,  # OUT
):
    """Draw a state path by inverse-CDF sampling, with a transition matrix per row.

    ``start_cdf`` and the rows of ``trans_cdf[t]`` are cumulative sums of
    (possibly unnormalised) probability vectors; ``states[0]`` is drawn from
    ``start_cdf`` and ``states[t]`` from row ``states[t - 1]`` of
    ``trans_cdf[t]``: the first j with ``uniforms[t] * total < cdf[j]``.
    """
    cdef Py_ssize_t n_samples = states.shape[0]
    cdef Py_ssize_t n_states = start_cdf.shape[0]
    cdef Py_ssize_t t, j, state
    cdef const double* cdf
    with nogil:
        for t in range(n_samples):
            cdf = &start_cdf[0] if t == 0 else &trans_cdf[t, states[t - 1], 0]
            state = n_states - 1
            for j in range(n_states):
                if uniforms[t] * cdf[n_states - 1] < cdf[j]:
                    state = j
                    break
            states[t] = state
