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
by the same c_t, so gamma_t = exp(log alpha_t + log beta_t).  Each sum over
states is a log-sum-exp shifted by its largest term, so no probability
underflows however long the sequence or however far apart the emissions.
"""

from libc.math cimport INFINITY, exp, log

cimport cython


cdef inline double _log_sum_exp(const double* values, Py_ssize_t n) noexcept nogil:
    """log sum_i exp(values[i]), -inf when every value is -inf."""
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


cdef inline double _forward_rows(
    const double[::1] log_start,
    const double[:, :, ::1] log_trans,
    const double[:, ::1] log_frame,
    Py_ssize_t first,
    Py_ssize_t stop,
    double[:, ::1] log_alpha,
    double[::1] log_scale,
    double[::1] terms,
) noexcept nogil:
    """The normalised forward pass over rows ``first:stop``; returns the
    sequence's log-likelihood (-inf, and ``log_alpha`` undefined, when zero)."""
    cdef Py_ssize_t n_states = log_frame.shape[1]
    cdef Py_ssize_t t, i, j
    cdef double c, log_likelihood = 0.0
    for t in range(first, stop):
        for j in range(n_states):
            if t == first:
                log_alpha[t, j] = log_start[j] + log_frame[t, j]
            else:
                for i in range(n_states):
                    terms[i] = log_alpha[t - 1, i] + log_trans[t, i, j]
                log_alpha[t, j] = _log_sum_exp(&terms[0], n_states) + log_frame[t, j]
        c = _log_sum_exp(&log_alpha[t, 0], n_states)
        log_scale[t] = c
        if c == -INFINITY or c != c:
            return -INFINITY
        for j in range(n_states):
            log_alpha[t, j] -= c
        log_likelihood += c
    return log_likelihood


@cython.boundscheck(False)
@cython.wraparound(False)
def varying_forward(
    const double[::1] log_start,  # IN (K,)
    const double[:, :, ::1] log_trans,  # IN (T, K, K)
    const double[:, ::1] log_frame,  # IN (T, K)
    const Py_ssize_t[::1] offsets,  # IN (S + 1,)
    double[:, ::1] log_filtered,  # OUT (T, K)
    double[::1] log_predictive,  # OUT (T,)
    double[::1] sequence_log_likelihood,  # OUT (S,)
):
    """Forward filtering: log p(z_t | x_1..x_t), log p(x_t | x_<t) and each
    sequence's log-likelihood.  A sequence of probability zero gets
    log-likelihood -inf and its rows -inf filtered and predictive values."""
    cdef Py_ssize_t n_states = log_frame.shape[1]
    cdef Py_ssize_t s, t, j
    cdef double[::1] terms = cython.view.array(
        shape=(max(n_states, 1),), itemsize=sizeof(double), format="d"
    )
    with nogil:
        for s in range(offsets.shape[0] - 1):
            sequence_log_likelihood[s] = _forward_rows(
                log_start, log_trans, log_frame, offsets[s], offsets[s + 1],
                log_filtered, log_predictive, terms,
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
    const double[:, ::1] log_frame,  # IN (T, K)
    const Py_ssize_t[::1] offsets,  # IN (S + 1,)
    double[:, ::1] log_alpha,  # INOUT (T, K), work
    double[:, ::1] log_beta,  # INOUT (T, K), work
    double[:, ::1] posteriors,  # OUT (T, K)
    double[:, :, ::1] pair_posteriors,  # OUT (T, K, K)
    double[::1] log_predictive,  # OUT (T,)
    double[::1] sequence_log_likelihood,  # OUT (S,)
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
    cdef double total, value
    cdef double[::1] terms = cython.view.array(
        shape=(max(n_states, 1),), itemsize=sizeof(double), format="d"
    )
    with nogil:
        for s in range(offsets.shape[0] - 1):
            first, stop = offsets[s], offsets[s + 1]
            sequence_log_likelihood[s] = _forward_rows(
                log_start, log_trans, log_frame, first, stop, log_alpha, log_predictive, terms
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
                for i in range(n_states):
                    for j in range(n_states):
                        terms[j] = log_trans[t + 1, i, j] + log_frame[t + 1, j] + log_beta[t + 1, j]
                    log_beta[t, i] = _log_sum_exp(&terms[0], n_states) - log_predictive[t + 1]
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
                total = 0.0
                for i in range(n_states):
                    for j in range(n_states):
                        value = exp(
                            log_alpha[t - 1, i] + log_trans[t, i, j] + log_frame[t, j]
                            + log_beta[t, j] - log_predictive[t]
                        )
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
