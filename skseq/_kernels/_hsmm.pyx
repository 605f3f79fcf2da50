# cython: language_level=3
"""Explicit-duration (semi-Markov) HMM kernels: forward-backward over segments,
filtering and Viterbi over segmentations, in log space.

Pure numeric code on typed memoryviews; nothing here validates its inputs (the
callers in :mod:`skseq.inference.hsmm` do).  Every function works on the rows
of several sequences concatenated, split by ``offsets``, and releases the GIL
for the whole computation.

The model: a visit to state k lasts d rows, d = 1 .. D (``D = max_duration``),
with log-probability ``log_duration[k, d - 1]``; the next visit's state is
drawn from row k of the transition matrix, whose diagonal is zero.  The last
visit of a sequence is right-censored: it may go on past the last row, so it
weighs ``log_survival[k, d - 1] = log P(duration >= d)``.

Indices are segment boundaries: for a sequence of n rows, ``enter[s, k]`` is
log p(x_0..x_{s-1}, a visit to k starts at row s) and ``leave[e, k]`` is
log p(x_0..x_{e-1}, a visit to k ends after row e - 1).  A visit covering rows
s .. e - 1 adds the log-emissions of its rows: the inner loop over the
duration d keeps their running sum (the segment sum of rows e - d .. e - 1
grows by one row per step of d), which costs the same as the differences of
cumulative sums and carries no cancellation on long sequences.  So each row
costs O(K (K + D)): O(K D) for the durations, O(K^2) for the transitions.
"""

from libc.math cimport INFINITY, exp, log

from ._common cimport longest_sequence, zeros_1d, zeros_2d, zeros_3d, zeros_intp_1d
from ._log_space cimport log_sum_exp

cimport numpy as cnp

cnp.import_array()  # numpy's C API, for the scratch allocators of _common


include "_elementary.pxi"


cdef inline double _sum_of_exps(double* terms, Py_ssize_t n, double top) noexcept nogil:
    """sum_i exp(terms[i] - top) for top >= every term (not -inf), leaving each
    exp in ``terms``.

    The exponentials are :func:`_exp_nonpositive64`'s (branch-free, about 1
    ulp; 0 below exp(-708), whose share of a sum with a term exp(0) = 1 is
    below the precision): their loop vectorises, in the AVX2 twin four
    numbers at a time.  Four partial sums shorten the chain of additions.
    """
    cdef Py_ssize_t i
    cdef double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0
    for i in range(n):
        terms[i] = _exp_nonpositive64(terms[i] - top)
    i = 0
    while i + 4 <= n:
        s0 += terms[i]
        s1 += terms[i + 1]
        s2 += terms[i + 2]
        s3 += terms[i + 3]
        i += 4
    while i < n:
        s0 += terms[i]
        i += 1
    return (s0 + s1) + (s2 + s3)


cdef inline double _log_sum_keeping(double* terms, Py_ssize_t n, double* largest) noexcept nogil:
    """log sum_i exp(terms[i]) (-inf when every term is), leaving exp(terms[i] - max)
    in ``terms`` (all 0 when the result is -inf) and the max in ``largest``: the
    callers reuse them instead of a second exp per term."""
    cdef Py_ssize_t i
    cdef double top = -INFINITY
    for i in range(n):
        if terms[i] > top:
            top = terms[i]
    largest[0] = top
    if top == -INFINITY:
        for i in range(n):
            terms[i] = 0.0
        return -INFINITY
    return top + log(_sum_of_exps(terms, n, top))


cdef inline void _normalise(double* weights, Py_ssize_t n) noexcept nogil:
    """Divide ``weights`` (>= 0, not all 0) by their sum in place."""
    cdef Py_ssize_t i
    cdef double total = 0.0
    for i in range(n):
        total += weights[i]
    for i in range(n):
        weights[i] /= total


cdef inline void _add_scaled(double* row, const double* source, double weight,
                             Py_ssize_t n) noexcept nogil:
    """row += weight * source over ``n`` numbers."""
    cdef Py_ssize_t m
    for m in range(n):
        row[m] += weight * source[m]


cdef inline double _log_sum_scratch(double* terms, Py_ssize_t n) noexcept nogil:
    """log sum_i exp(terms[i]), ``terms`` being scratch (overwritten)."""
    cdef double top
    return _log_sum_keeping(terms, n, &top)


cdef inline double _visits_ending(
    const double* enter, const double* frame, const double* weights, Py_ssize_t e,
    Py_ssize_t k, Py_ssize_t n_states, Py_ssize_t n_durations, double* terms,
) noexcept nogil:
    """log sum_d exp(enter[e - d, k] + weights[d - 1] + sum_{t = e - d}^{e - 1} frame[t, k])
    over d = 1 .. n_durations (rows of ``enter`` and ``frame`` are n_states apart)."""
    cdef Py_ssize_t d
    cdef double segment = 0.0
    for d in range(1, n_durations + 1):
        segment += frame[(e - d) * n_states + k]
        terms[d - 1] = enter[(e - d) * n_states + k] + weights[d - 1] + segment
    return _log_sum_scratch(terms, n_durations)


cdef inline double _next_entry(
    const double* leave, const double* log_trans, Py_ssize_t k, Py_ssize_t n_states,
    double* terms,
) noexcept nogil:
    """log sum_j exp(leave[j] + log_trans[j, k])."""
    cdef Py_ssize_t j
    for j in range(n_states):
        terms[j] = leave[j] + log_trans[j * n_states + k]
    return _log_sum_scratch(terms, n_states)


cdef inline double _carried_ending(
    const double* carried, const double* frame, const double* weights, Py_ssize_t e,
    Py_ssize_t k, Py_ssize_t n_states, Py_ssize_t n_durations, double* terms,
) noexcept nogil:
    """log sum_a exp(carried[k, a - 1] + weights[a + e - 1] + sum_{t = 0}^{e - 1} frame[t, k])
    over a = 1 .. n_durations - e: the visits carried in at age a that reach boundary e
    (``carried`` is (n_states, n_durations), C order); -inf when none can."""
    cdef Py_ssize_t a, t
    cdef double segment = 0.0
    if e >= n_durations:
        return -INFINITY
    for t in range(e):
        segment += frame[t * n_states + k]
    for a in range(1, n_durations - e + 1):
        terms[a - 1] = carried[k * n_durations + a - 1] + weights[a + e - 1] + segment
    return _log_sum_scratch(terms, n_durations - e)


cdef inline double _log_add(double a, double b) noexcept nogil:
    """log(exp(a) + exp(b))."""
    if a == -INFINITY:
        return b
    if b == -INFINITY:
        return a
    if a > b:
        return a + log(1.0 + exp(b - a))
    return b + log(1.0 + exp(a - b))


cdef double _forward_one(
    const double[::1] log_start, const double[:, ::1] log_trans,
    const double[:, ::1] log_duration, const double[:, ::1] log_survival,
    const double[:, ::1] log_frame, Py_ssize_t n_rows, double[:, ::1] enter,
    double[:, ::1] leave, double[::1] terms,
) noexcept nogil:
    """Fill ``enter[0 .. n_rows - 1]`` and ``leave[1 .. n_rows - 1]``; return the
    sequence's log-likelihood (last visit censored)."""
    cdef Py_ssize_t n_states = log_trans.shape[0]
    cdef Py_ssize_t n_durations = log_duration.shape[1]
    cdef Py_ssize_t e, k, reach
    cdef const double* frame = &log_frame[0, 0]
    for k in range(n_states):
        enter[0, k] = log_start[k]
    for e in range(1, n_rows):
        reach = e if e < n_durations else n_durations
        for k in range(n_states):
            leave[e, k] = _visits_ending(&enter[0, 0], frame, &log_duration[k, 0], e, k,
                                         n_states, reach, &terms[0])
        for k in range(n_states):
            enter[e, k] = _next_entry(&leave[e, 0], &log_trans[0, 0], k, n_states, &terms[0])
    reach = n_rows if n_rows < n_durations else n_durations
    for k in range(n_states):
        leave[n_rows, k] = _visits_ending(&enter[0, 0], frame, &log_survival[k, 0], n_rows, k,
                                          n_states, reach, &terms[0])
    return log_sum_exp(&leave[n_rows, 0], n_states)


def forward_backward(
    const double[::1] log_start,  # IN
    const double[:, ::1] log_trans,  # IN
    const double[:, ::1] log_duration,  # IN
    const double[:, ::1] log_survival,  # IN
    const double[:, ::1] log_frame,  # IN
    const Py_ssize_t[::1] offsets,  # IN
    double[:, ::1] posteriors,  # OUT
    double[::1] sequence_log_likelihood,  # OUT
    double[::1] start_counts,  # INOUT
    double[:, ::1] transition_counts,  # INOUT
    double[:, ::1] duration_counts,  # INOUT
    double[:, ::1] censored_counts,  # INOUT
):
    """Posteriors and expected counts of a semi-Markov HMM, sequence by sequence.

    Adds, for every sequence of positive probability: the posterior of the
    first visit's state to ``start_counts``; the expected number of visits to
    k following a visit to j to ``transition_counts[j, k]``; the expected
    number of complete visits to k of d rows to ``duration_counts[k, d - 1]``
    and of censored last visits to k of d rows so far (at least d rows long)
    to ``censored_counts[k, d - 1]``.  ``posteriors[t, k]`` is p(z_t = k | x),
    from the visits that start and end by row t (their difference, summed
    over rows).  A sequence of probability zero gets log-likelihood -inf,
    zero posteriors and adds nothing.
    """
    cdef Py_ssize_t n_sequences = offsets.shape[0] - 1
    cdef Py_ssize_t n_states = log_trans.shape[0]
    cdef Py_ssize_t n_durations = log_duration.shape[1]
    cdef Py_ssize_t longest = longest_sequence(offsets)
    cdef double[:, ::1] enter = zeros_2d(longest + 1, n_states)
    cdef double[:, ::1] leave = zeros_2d(longest + 1, n_states)
    cdef double[:, ::1] start_after = zeros_2d(longest + 1, n_states)  # beta of a visit start
    cdef double[:, ::1] after_end = zeros_2d(longest + 1, n_states)  # beta after a visit end
    cdef double[:, ::1] change = zeros_2d(longest + 1, n_states)
    cdef double[::1] terms = zeros_1d(n_durations + n_states + 1)
    cdef Py_ssize_t s, first, stop, n_rows, t, k, j, d, reach
    cdef double log_likelihood, segment, top, total, weight, p, row_sum
    cdef const double* frame
    with nogil:
        for s in range(n_sequences):
            first = offsets[s]
            stop = offsets[s + 1]
            n_rows = stop - first
            log_likelihood = _forward_one(log_start, log_trans, log_duration, log_survival,
                                          log_frame[first:stop], n_rows, enter, leave, terms)
            sequence_log_likelihood[s] = log_likelihood
            for t in range(first, stop):
                for k in range(n_states):
                    posteriors[t, k] = 0.0
            if log_likelihood == -INFINITY:
                continue
            frame = &log_frame[first, 0]
            for t in range(n_rows + 1):
                for k in range(n_states):
                    change[t, k] = 0.0
            for t in range(n_rows - 1, -1, -1):
                reach = n_rows - t if n_rows - t < n_durations else n_durations
                for k in range(n_states):
                    # Visits to k that start at row t, of d rows: the terms of beta.
                    segment = 0.0
                    for d in range(1, reach + 1):
                        segment += frame[(t + d - 1) * n_states + k]
                        if t + d < n_rows:
                            terms[d - 1] = (log_duration[k, d - 1] + segment
                                            + after_end[t + d, k])
                        else:
                            terms[d - 1] = log_survival[k, d - 1] + segment
                    # terms become exp(term - top), top the largest term
                    start_after[t, k] = _log_sum_keeping(&terms[0], reach, &top)
                    if top == -INFINITY or enter[t, k] == -INFINITY:
                        continue
                    weight = exp(enter[t, k] + top - log_likelihood)
                    for d in range(1, reach + 1):
                        p = weight * terms[d - 1]
                        change[t, k] += p
                        change[t + d, k] -= p
                        if t + d < n_rows:
                            duration_counts[k, d - 1] += p
                        else:
                            censored_counts[k, d - 1] += p
                if t == 0:
                    for k in range(n_states):
                        start_counts[k] += exp(log_start[k] + start_after[0, k] - log_likelihood)
                    continue
                for j in range(n_states):
                    for k in range(n_states):
                        terms[k] = log_trans[j, k] + start_after[t, k]
                    after_end[t, j] = _log_sum_keeping(&terms[0], n_states, &top)
                    if leave[t, j] == -INFINITY or top == -INFINITY:
                        continue
                    weight = exp(leave[t, j] + top - log_likelihood)
                    for k in range(n_states):
                        transition_counts[j, k] += weight * terms[k]
            # p(z_t = k | x): visits started by row t minus those ended by it.
            total = 0.0
            for k in range(n_states):
                total = 0.0
                for t in range(n_rows):
                    total += change[t, k]
                    posteriors[first + t, k] = total if total > 0.0 else 0.0
            for t in range(first, stop):
                row_sum = 0.0
                for k in range(n_states):
                    row_sum += posteriors[t, k]
                if row_sum > 0.0:
                    for k in range(n_states):
                        posteriors[t, k] /= row_sum


def forward(
    const double[::1] log_start,  # IN
    const double[:, ::1] log_trans,  # IN
    const double[:, ::1] log_duration,  # IN
    const double[:, ::1] log_survival,  # IN
    const double[:, ::1] log_survival_next,  # IN
    const double[:, ::1] log_frame,  # IN
    const Py_ssize_t[::1] offsets,  # IN
    bint carry,  # IN
    const double[::1] carried_start,  # IN
    const double[:, ::1] carried,  # IN
    double[:, ::1] filtered,  # OUT
    double[:, ::1] predicted,  # OUT
    double[::1] log_predictive,  # OUT
    double[::1] sequence_log_likelihood,  # OUT
    double[:, ::1] final,  # OUT
):
    """Filtering: p(z_t | x_0..x_t), p(z_{t+1} | x_0..x_t) and log p(x_t | x_<t).

    After row t (e = t + 1 rows seen) the state is k if a visit to k that
    started at row e - d, d = 1 .. D, lasts at least d rows
    (``log_survival``); the next row's state is k if that visit lasts at
    least d + 1 rows (``log_survival_next[k, d - 1] = log P(duration >= d + 1)``)
    or a new visit to k starts at row e.  Rows after a prefix of probability
    zero get zero distributions and log_predictive -inf.

    With ``carry``, the first sequence continues earlier rows: ``carried[k, a - 1]``
    is log p(earlier rows, a visit to k started a rows before the first row,
    with the emissions of its rows so far; its duration not yet weighed),
    normalised so that the earlier rows have probability one, and
    ``carried_start[k]`` the log-probability that a visit to k starts at the
    first row (the visits that end with the earlier rows, moved by the
    transitions); it replaces ``log_start`` for that sequence.  ``final``
    gets the same message after the last row of the last sequence:
    ``final[k, a - 1]`` for the visit to k started a rows before its end
    (-inf for an age the sequence and the carried message cannot reach).
    """
    cdef Py_ssize_t n_sequences = offsets.shape[0] - 1
    cdef Py_ssize_t n_states = log_trans.shape[0]
    cdef Py_ssize_t n_durations = log_duration.shape[1]
    cdef Py_ssize_t longest = longest_sequence(offsets)
    cdef double[:, ::1] enter = zeros_2d(longest + 1, n_states)
    cdef double[::1] leave = zeros_1d(n_states)
    cdef double[::1] censored = zeros_1d(n_states)
    cdef double[::1] staying = zeros_1d(n_states)
    cdef double[::1] terms = zeros_1d(n_durations + n_states + 1)
    cdef Py_ssize_t s, first, stop, n_rows, e, k, reach, a
    cdef double before, now, entering, segment
    cdef bint continues
    cdef const double* frame
    with nogil:
        for s in range(n_sequences):
            first = offsets[s]
            stop = offsets[s + 1]
            n_rows = stop - first
            frame = &log_frame[first, 0]
            continues = carry and s == 0
            for k in range(n_states):
                enter[0, k] = carried_start[k] if continues else log_start[k]
            before = 0.0
            for e in range(1, n_rows + 1):
                reach = e if e < n_durations else n_durations
                for k in range(n_states):
                    leave[k] = _visits_ending(&enter[0, 0], frame, &log_duration[k, 0], e, k,
                                              n_states, reach, &terms[0])
                    censored[k] = _visits_ending(&enter[0, 0], frame, &log_survival[k, 0], e,
                                                 k, n_states, reach, &terms[0])
                    staying[k] = _visits_ending(&enter[0, 0], frame, &log_survival_next[k, 0],
                                                e, k, n_states, reach, &terms[0])
                    if continues and e < n_durations:
                        leave[k] = _log_add(leave[k], _carried_ending(
                            &carried[0, 0], frame, &log_duration[k, 0], e, k, n_states,
                            n_durations, &terms[0]))
                        censored[k] = _log_add(censored[k], _carried_ending(
                            &carried[0, 0], frame, &log_survival[k, 0], e, k, n_states,
                            n_durations, &terms[0]))
                        staying[k] = _log_add(staying[k], _carried_ending(
                            &carried[0, 0], frame, &log_survival_next[k, 0], e, k, n_states,
                            n_durations, &terms[0]))
                for k in range(n_states):
                    enter[e, k] = _next_entry(&leave[0], &log_trans[0, 0], k, n_states,
                                              &terms[0])
                now = log_sum_exp(&censored[0], n_states)
                log_predictive[first + e - 1] = now - before
                if now == -INFINITY:
                    for k in range(n_states):
                        filtered[first + e - 1, k] = 0.0
                        predicted[first + e - 1, k] = 0.0
                else:
                    for k in range(n_states):
                        filtered[first + e - 1, k] = exp(censored[k] - now)
                        entering = enter[e, k]
                        terms[0] = staying[k]
                        terms[1] = entering
                        predicted[first + e - 1, k] = exp(log_sum_exp(&terms[0], 2) - now)
                before = now
            sequence_log_likelihood[s] = before if n_rows > 0 else 0.0
            if s != n_sequences - 1:
                continue
            for k in range(n_states):
                segment = 0.0
                for a in range(1, n_durations + 1):
                    if a <= n_rows:
                        segment += frame[(n_rows - a) * n_states + k]
                        final[k, a - 1] = enter[n_rows - a, k] + segment
                    elif continues:
                        final[k, a - 1] = carried[k, a - n_rows - 1] + segment
                    else:
                        final[k, a - 1] = -INFINITY


def viterbi(
    const double[::1] log_start,  # IN
    const double[:, ::1] log_trans,  # IN
    const double[:, ::1] log_duration,  # IN
    const double[:, ::1] log_survival,  # IN
    const double[:, ::1] log_frame,  # IN
    const Py_ssize_t[::1] offsets,  # IN
    Py_ssize_t[::1] states,  # OUT
    double[::1] sequence_log_prob,  # OUT
):
    """The most likely segmentation of each sequence (max-sum in log space).

    Maximises log p(x, visits) over the visits' states and durations (the
    last one censored); writes the state of every row and the maximum.
    Ties go to the lowest state index and the shortest duration.  A sequence
    of probability zero gets -inf and states 0.
    """
    cdef Py_ssize_t n_sequences = offsets.shape[0] - 1
    cdef Py_ssize_t n_states = log_trans.shape[0]
    cdef Py_ssize_t n_durations = log_duration.shape[1]
    cdef Py_ssize_t longest = longest_sequence(offsets)
    cdef double[:, ::1] enter = zeros_2d(longest + 1, n_states)
    cdef double[:, ::1] leave = zeros_2d(longest + 1, n_states)
    cdef Py_ssize_t[::1] best_duration = zeros_intp_1d((longest + 1) * n_states)
    cdef Py_ssize_t[::1] best_previous = zeros_intp_1d((longest + 1) * n_states)
    cdef Py_ssize_t s, first, stop, n_rows, e, k, j, d, reach, best_d, best_j, t
    cdef double segment, value, best
    cdef const double* frame
    cdef const double* weights
    with nogil:
        for s in range(n_sequences):
            first = offsets[s]
            stop = offsets[s + 1]
            n_rows = stop - first
            frame = &log_frame[first, 0]
            for k in range(n_states):
                enter[0, k] = log_start[k]
            for e in range(1, n_rows + 1):
                reach = e if e < n_durations else n_durations
                for k in range(n_states):
                    weights = &log_survival[k, 0] if e == n_rows else &log_duration[k, 0]
                    segment = 0.0
                    best = -INFINITY
                    best_d = 1
                    for d in range(1, reach + 1):
                        segment += frame[(e - d) * n_states + k]
                        value = enter[e - d, k] + weights[d - 1] + segment
                        if value > best:
                            best = value
                            best_d = d
                    leave[e, k] = best
                    best_duration[e * n_states + k] = best_d
                if e == n_rows:
                    break
                for k in range(n_states):
                    best = -INFINITY
                    best_j = 0
                    for j in range(n_states):
                        value = leave[e, j] + log_trans[j, k]
                        if value > best:
                            best = value
                            best_j = j
                    enter[e, k] = best
                    best_previous[e * n_states + k] = best_j
            best = -INFINITY
            k = 0
            for j in range(n_states):
                if leave[n_rows, j] > best:
                    best = leave[n_rows, j]
                    k = j
            sequence_log_prob[s] = best
            if best == -INFINITY:
                for t in range(first, stop):
                    states[t] = 0
                continue
            e = n_rows
            while e > 0:
                d = best_duration[e * n_states + k]
                for t in range(e - d, e):
                    states[first + t] = k
                e -= d
                if e > 0:
                    k = best_previous[e * n_states + k]


def forward_smoothing(
    const double[::1] log_start,  # IN
    const double[:, ::1] log_trans,  # IN
    const double[:, ::1] log_duration,  # IN
    const double[:, ::1] log_survival,  # IN
    const double[:, ::1] log_frame,  # IN
    const double[:, :, ::1] features,  # IN
    bint fresh,  # IN
    double[:, ::1] log_message,  # INOUT
    double[:, :, ::1] statistics,  # INOUT
    double[::1] log_predictive,  # OUT
):
    """Forward-only smoothing over the (state, age) chain of one sequence's rows.

    The semi-Markov chain is the Markov chain of (z_t, a_t), a_t the age of
    the current visit (1 .. D): a visit to i of age a goes on with
    probability P(d_i >= a + 1) / P(d_i >= a) or ends with P(d_i = a) /
    P(d_i >= a), and the next visit's state is drawn from row i of the
    transition matrix.  ``log_message[j, b - 1]`` is log p(z_t = j, a_t = b |
    x_0..x_t) and ``statistics[j, b - 1]`` E[S_t | x_0..x_t, z_t = j, a_t = b]
    for the additive statistics S_t of the rows up to t, laid out as
    ``[start (K), transitions (K x K), complete durations (K x D), features
    (K x F)]``: the first visit's state, the visits that follow a visit to
    i, the visits of d rows that ended, and sum_s [z_s = k] features[s, k].

    Each row: a visit of age b > 1 is the one of age b - 1 going on (its
    statistics are carried over); one of age 1 starts after a visit to i of
    age a ended, averaged over p(z_(t-1) = i, a_(t-1) = a | z_t = j, a_t = 1,
    x_0..x_(t-1)) with that visit's duration a and the transition i -> j
    counted; then the row's features are added in its state and its
    emission weighs the message.  The ages live in a ring (slot of age b:
    ``(head + b - 1) % D``), so a visit going on moves no statistics: a row
    costs one pass over them (the visits that end) instead of three.  With
    ``fresh`` the first row starts the sequence (from ``log_start``; the
    message is not read), else it continues the message (updated in place).
    Entries of probability zero get zero statistics.  Returns the rows'
    log-likelihood given the earlier ones (-inf when it is zero: the message
    is then unusable) and writes each row's log p(x_t | x_<t).
    """
    cdef Py_ssize_t n_rows = log_frame.shape[0]
    cdef Py_ssize_t n_states = log_trans.shape[0]
    cdef Py_ssize_t n_durations = log_duration.shape[1]
    cdef Py_ssize_t n_features = features.shape[2]
    cdef Py_ssize_t width = statistics.shape[2]
    cdef Py_ssize_t trans_at = n_states
    cdef Py_ssize_t duration_at = trans_at + n_states * n_states
    cdef Py_ssize_t features_at = duration_at + n_states * n_durations
    cdef double[:, ::1] ring_message = zeros_2d(n_states, n_durations)
    cdef double[:, :, ::1] ring = zeros_3d(n_states, n_durations, width)
    cdef double[:, ::1] pooled = zeros_2d(n_states, width)
    cdef double[::1] ending = zeros_1d(n_states)
    cdef double[::1] terms = zeros_1d(n_states * n_durations + n_states + 1)
    cdef Py_ssize_t t, i, j, a, b, m, f, slot, head = 0
    cdef double top, entering, total, log_likelihood = 0.0
    cdef double* row
    with nogil:
        if not fresh:
            for j in range(n_states):
                for b in range(n_durations):
                    ring_message[j, b] = log_message[j, b]
                    for m in range(width):
                        ring[j, b, m] = statistics[j, b, m]
        for t in range(n_rows):
            if fresh and t == 0:
                for j in range(n_states):
                    for b in range(n_durations):
                        ring_message[j, b] = -INFINITY
                    ring_message[j, 0] = log_start[j]
                    for m in range(width):
                        ring[j, 0, m] = 0.0
                    if log_start[j] > -INFINITY:
                        ring[j, 0, j] = 1.0
            else:
                # The visits that end after row t - 1: per state, their statistics
                # averaged over their ages, each age's duration counted.
                for i in range(n_states):
                    for m in range(width):
                        pooled[i, m] = 0.0
                    for a in range(n_durations):
                        slot = head + a if head + a < n_durations else head + a - n_durations
                        if ring_message[i, slot] > -INFINITY:
                            terms[a] = (ring_message[i, slot] + log_duration[i, a]
                                        - log_survival[i, a])
                        else:
                            terms[a] = -INFINITY
                    ending[i] = _log_sum_keeping(&terms[0], n_durations, &top)
                    if ending[i] == -INFINITY:
                        continue
                    _normalise(&terms[0], n_durations)
                    for a in range(n_durations):
                        if terms[a] == 0.0:
                            continue
                        slot = head + a if head + a < n_durations else head + a - n_durations
                        _add_scaled(&pooled[i, 0], &ring[i, slot, 0], terms[a], width)
                        pooled[i, duration_at + i * n_durations + a] += terms[a]
                # Age b > 1: the visit of age b - 1 goes on, in its slot.  The slot
                # of the oldest age becomes that of age 1.
                head = head - 1 if head > 0 else n_durations - 1
                for j in range(n_states):
                    for b in range(1, n_durations):
                        slot = head + b if head + b < n_durations else head + b - n_durations
                        if (ring_message[j, slot] > -INFINITY
                                and log_survival[j, b] > -INFINITY):
                            ring_message[j, slot] += log_survival[j, b] - log_survival[j, b - 1]
                        else:
                            ring_message[j, slot] = -INFINITY
                # Age 1: a visit to j starts after one to i.
                for j in range(n_states):
                    for i in range(n_states):
                        terms[i] = ending[i] + log_trans[i, j]
                    entering = _log_sum_keeping(&terms[0], n_states, &top)
                    ring_message[j, head] = entering
                    row = &ring[j, head, 0]
                    for m in range(width):
                        row[m] = 0.0
                    if entering == -INFINITY:
                        continue
                    _normalise(&terms[0], n_states)
                    for i in range(n_states):
                        if terms[i] == 0.0:
                            continue
                        _add_scaled(row, &pooled[i, 0], terms[i], width)
                        row[trans_at + i * n_states + j] += terms[i]
            # The row: its emission and its features, in its state.
            for j in range(n_states):
                for b in range(n_durations):
                    if ring_message[j, b] > -INFINITY:
                        ring_message[j, b] += log_frame[t, j]
                    if ring_message[j, b] > -INFINITY:
                        row = &ring[j, b, features_at + j * n_features]
                        for f in range(n_features):
                            row[f] += features[t, j, f]
                    terms[j * n_durations + b] = ring_message[j, b]
            total = _log_sum_scratch(&terms[0], n_states * n_durations)
            log_predictive[t] = total
            if total == -INFINITY:
                log_likelihood = -INFINITY
                break
            log_likelihood += total
            for j in range(n_states):
                for b in range(n_durations):
                    ring_message[j, b] -= total
        # Back to ages in order; entries of probability zero with zero statistics.
        for j in range(n_states):
            for b in range(n_durations):
                slot = head + b if head + b < n_durations else head + b - n_durations
                log_message[j, b] = ring_message[j, slot]
                if ring_message[j, slot] > -INFINITY:
                    for m in range(width):
                        statistics[j, b, m] = ring[j, slot, m]
                else:
                    for m in range(width):
                        statistics[j, b, m] = 0.0
    return log_likelihood
