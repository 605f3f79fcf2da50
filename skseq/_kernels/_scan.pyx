# cython: language_level=3
"""Fused selective-scan kernels (the S6 / Mamba recurrence) and their gradients.

Pure numeric code on typed memoryviews; nothing here validates its inputs (the
callers in :mod:`skseq.inference.scan` do).  For every (batch b, channel d)
pair and time step t, with ``r = delta[b, d, t] + delta_bias[d]`` and
``dt = softplus(r)`` (or ``dt = r``)::

    a[n]  = exp(dt * A[d, n])
    h[n]  = a[n] * h[n] + dt * B[n] * u[b, d, t]          (h = 0 before t = 0)
    y     = sum_n C[n] * h[n] + D[d] * u[b, d, t]
    out   = y * silu(z[b, d, t])       (or out = y without a gate)

where ``B[n]`` / ``C[n]`` are ``B[d, n]`` (time-invariant) or ``B[b, n, t]``
(selective).  The state ``h`` of a pair is a vector of ``N`` numbers; it is
never stored for all steps at once.

Layout and vectorisation
------------------------
Every hot loop runs over contiguous memory with no branch and no call, so GCC
vectorises it with baseline SSE2 (2 lanes for float64, 4 for float32):

* per-step loops run over the state index ``n``; the state dimension is
  padded to ``n_pad``, a multiple of ``LANES``, with ``A = B = C = 0`` in the
  padding, so padded states stay exactly zero and add nothing;
* selective ``B`` and ``C`` (stored ``(batch, N, length)``) are transposed one
  time chunk at a time into ``(chunk, n_pad)`` buffers shared by the channels
  of the batch element;
* the per-step scalars (softplus steps, gates and their slopes) are computed
  for a whole chunk at once, in loops over time;
* ``exp(dt A)`` skips its range checks for a (channel, chunk) whose largest
  |dt| * max |A| keeps every exponent in range (always, for Mamba's scales);
* sums over ``n`` use ``LANES`` partial sums added by a fixed tree (GCC may
  not reassociate a scalar reduction without ``-ffast-math``), so the result
  does not depend on the vector width;
* ``exp`` and ``log1p`` are inline polynomials whose range tests read sign
  bits: a libm call or a floating-point comparison (which may trap under the
  default ``-ftrapping-math``) would stop vectorisation;
* the pointers of the hot loops are ``__restrict__``: with more than a few
  streams GCC gives up on run-time alias checks and does not vectorise.

Backward pass
-------------
Gradients follow doc/user_guide/selective_ssm.rst, "The backward pass",
backwards in time with
``g_t = dL/dh_t = C_t dy_t + a_{t+1} g_{t+1}``, carried as ``a_{t+1} g_{t+1}``.
The states ``h_{t-1}`` it needs are recomputed, never recovered by dividing by
``a`` (which underflows): a first sweep stores ``h`` at the start of every
time chunk (checkpoints); the reverse sweep recomputes the states and ``a``
inside one chunk into ``(chunk + 1, n_pad)`` and ``(chunk, n_pad)`` buffers,
then runs the gradient recurrence over that chunk.  Channels are processed
in groups of ``CHANNEL_GROUP``, sharing the transposed ``B``/``C`` chunks
while keeping the checkpoints small.

Memory
------
Scratch buffers are per call (one call per thread) and never scale with the
batch or the number of channels: the forward pass holds
``(3 * FORWARD_GROUP + 2 * chunk) * n_pad`` numbers, the backward pass
``(CHANNEL_GROUP * ceil(length / chunk) + 6 * chunk + 6 * CHANNEL_GROUP)
* n_pad`` (checkpoints, per-chunk buffers, per-group rows).  With the
default chunk of 64 steps this is below one ``length * N`` buffer from
length 1024 up.
"""

from ._common cimport zeros_like_2d

cimport numpy as cnp

cnp.import_array()  # numpy's C API, for the scratch allocators of _common

cdef enum:
    # Width of the partial sums and multiple of the padded state size.
    LANES = 8
    # Channels of one batch element that share one sweep in the backward pass.
    CHANNEL_GROUP = 16
    # Channels of one batch element that share the forward pass's transposed
    # B / C chunks (the forward keeps no checkpoints, so the group can be large).
    FORWARD_GROUP = 64


# The branch-free exp / log1p / select functions and the restrict pointer types.
include "_elementary.pxi"


# ------------------------------------------------ per-chunk scalar sequences


cdef inline void _steps_chunk(
    floating_in delta_row,
    floating bias,
    bint softplus,
    floating_out dt_out,
    Py_ssize_t count,
) noexcept nogil:
    """dt = softplus(delta + bias), or delta + bias, for ``count`` steps."""
    cdef Py_ssize_t t
    cdef floating r
    if softplus:
        for t in range(count):
            r = delta_row[t] + bias
            dt_out[t] = _softplus_from(r, _exp_minus_abs(r))
    else:
        for t in range(count):
            dt_out[t] = delta_row[t] + bias


cdef inline void _steps_and_slopes_chunk(
    floating_in delta_row,
    floating bias,
    bint softplus,
    floating_out dt_out,
    floating_out slope_out,
    Py_ssize_t count,
) noexcept nogil:
    """The steps of :func:`_steps_chunk` and d dt / d delta.

    With the softplus the slope is sigmoid(r) = 1 / (1 + e) for r >= 0 and
    e / (1 + e) for r < 0, with the same e = exp(-|r|) as the step.
    """
    cdef Py_ssize_t t
    cdef floating r, e
    if softplus:
        for t in range(count):
            r = delta_row[t] + bias
            e = _exp_minus_abs(r)
            dt_out[t] = _softplus_from(r, e)
            slope_out[t] = _sigmoid_from(r, e)
    else:
        for t in range(count):
            dt_out[t] = delta_row[t] + bias
            slope_out[t] = 1


cdef inline void _gates_chunk(floating_in z_row, floating_out gate_out, Py_ssize_t count
                              ) noexcept nogil:
    """silu(z) = z sigmoid(z)."""
    cdef Py_ssize_t t
    for t in range(count):
        gate_out[t] = z_row[t] * _sigmoid_from(z_row[t], _exp_minus_abs(z_row[t]))


cdef inline void _gate_backward_chunk(
    floating_in z_row,
    floating_in dout_row,
    floating_in u_row,
    floating_in y_row,
    floating skip,
    floating_out dz_out,
    floating_out dy_out,
    Py_ssize_t count,
) noexcept nogil:
    """Through out = (y + D u) silu(z): dz and dy = dout silu(z).

    silu'(z) = sigmoid(z) (1 + z (1 - sigmoid(z))); ``y_row`` is C_t . h_t.
    """
    cdef Py_ssize_t t
    cdef floating sig
    for t in range(count):
        sig = _sigmoid_from(z_row[t], _exp_minus_abs(z_row[t]))
        dz_out[t] = dout_row[t] * (y_row[t] + skip * u_row[t]) * (sig * (1 + z_row[t] * (1 - sig)))
        dy_out[t] = dout_row[t] * (z_row[t] * sig)


# ------------------------------------------------------------ per-step loops


cdef inline floating _step(
    floating_out state,
    floating_in a_row,
    floating_in b_row,
    floating_in c_row,
    floating dt,
    floating dt_u,
    Py_ssize_t n_pad,
    bint in_range,
) noexcept nogil:
    """One step of the recurrence in place; returns C_t . h_t.

    ``in_range``: every |dt A[n]| is within the unchecked exponential's range.
    The sum over n is accumulated in LANES partial sums (lane l takes the n
    with n % LANES == l) added by a fixed tree, so it does not depend on the
    vector width.
    """
    cdef floating partial[LANES]
    cdef Py_ssize_t block, lane, n
    cdef floating h
    for lane in range(LANES):
        partial[lane] = 0
    if in_range:
        for block in range(n_pad // LANES):
            for lane in range(LANES):
                n = block * LANES + lane
                h = _exp_in_range(dt * a_row[n]) * state[n] + dt_u * b_row[n]
                state[n] = h
                partial[lane] += h * c_row[n]
    else:
        for block in range(n_pad // LANES):
            for lane in range(LANES):
                n = block * LANES + lane
                h = _exp(dt * a_row[n]) * state[n] + dt_u * b_row[n]
                state[n] = h
                partial[lane] += h * c_row[n]
    return (((partial[0] + partial[1]) + (partial[2] + partial[3]))
            + ((partial[4] + partial[5]) + (partial[6] + partial[7])))


cdef inline void _step_state_only(
    floating_out state,
    floating_in a_row,
    floating_in b_row,
    floating dt,
    floating dt_u,
    Py_ssize_t n_pad,
    bint in_range,
) noexcept nogil:
    """One step of the recurrence in place, without the output."""
    cdef Py_ssize_t n
    if in_range:
        for n in range(n_pad):
            state[n] = _exp_in_range(dt * a_row[n]) * state[n] + dt_u * b_row[n]
    else:
        for n in range(n_pad):
            state[n] = _exp(dt * a_row[n]) * state[n] + dt_u * b_row[n]


cdef inline floating _step_stored(
    floating_in previous,
    floating_out current,
    floating_out decay,
    floating_in a_row,
    floating_in b_row,
    floating_in c_row,
    floating dt,
    floating dt_u,
    Py_ssize_t n_pad,
    bint in_range,
    bint with_output,
) noexcept nogil:
    """One step from ``previous`` into ``current``, keeping exp(dt A) in ``decay``.

    Returns C_t . h_t (summed as in :func:`_step`) when ``with_output``, else 0.
    """
    cdef floating partial[LANES]
    cdef Py_ssize_t block, lane, n
    cdef floating h
    if in_range:
        for n in range(n_pad):
            decay[n] = _exp_in_range(dt * a_row[n])
    else:
        for n in range(n_pad):
            decay[n] = _exp(dt * a_row[n])
    if not with_output:
        for n in range(n_pad):
            current[n] = decay[n] * previous[n] + dt_u * b_row[n]
        return 0
    for lane in range(LANES):
        partial[lane] = 0
    for block in range(n_pad // LANES):
        for lane in range(LANES):
            n = block * LANES + lane
            h = decay[n] * previous[n] + dt_u * b_row[n]
            current[n] = h
            partial[lane] += h * c_row[n]
    return (((partial[0] + partial[1]) + (partial[2] + partial[3]))
            + ((partial[4] + partial[5]) + (partial[6] + partial[7])))


cdef inline bint _in_exp_range(
    const floating* dt_chunk, Py_ssize_t count, floating a_max_abs
) noexcept nogil:
    """Whether |dt A| stays within the unchecked exponential's range over a chunk."""
    cdef Py_ssize_t t
    cdef floating dt_max_abs = 0
    for t in range(count):
        if dt_chunk[t] > dt_max_abs:
            dt_max_abs = dt_chunk[t]
        elif -dt_chunk[t] > dt_max_abs:
            dt_max_abs = -dt_chunk[t]
    return dt_max_abs * a_max_abs <= _exp_safe_bound(a_max_abs)


cdef inline void _step_backward(
    floating_out carried,
    floating_out grad_a_row,
    floating_out grad_b_row,
    floating_out grad_c_row,
    floating_in previous,
    floating_in current,
    floating_in decay,
    floating_in a_row,
    floating_in b_row,
    floating_in c_row,
    floating dy,
    floating dt,
    floating dt_u,
    Py_ssize_t n_pad,
    floating* sum_g_h_a_a,
    floating* sum_g_b,
) noexcept nogil:
    """One reverse step of the gradient recurrence (doc/user_guide/selective_ssm.rst).

    ``carried`` holds a_{t+1} g_{t+1} on entry and a_t g_t on exit.  Adds
    g h_{t-1} a dt to ``grad_a_row``, g dt u to ``grad_b_row`` and dy h_t to
    ``grad_c_row``; writes sum_n g h_{t-1} a A to ``sum_g_h_a_a`` and
    sum_n g B to ``sum_g_b`` (summed as in :func:`_step`).
    """
    cdef floating partial_a[LANES]
    cdef floating partial_b[LANES]
    cdef Py_ssize_t block, lane, n
    cdef floating g, g_h_a
    for lane in range(LANES):
        partial_a[lane] = 0
        partial_b[lane] = 0
    for block in range(n_pad // LANES):
        for lane in range(LANES):
            n = block * LANES + lane
            g = c_row[n] * dy + carried[n]
            g_h_a = g * previous[n] * decay[n]
            grad_a_row[n] += g_h_a * dt
            partial_a[lane] += g_h_a * a_row[n]
            partial_b[lane] += g * b_row[n]
            grad_b_row[n] += g * dt_u
            grad_c_row[n] += dy * current[n]
            carried[n] = decay[n] * g
    sum_g_h_a_a[0] = (((partial_a[0] + partial_a[1]) + (partial_a[2] + partial_a[3]))
                      + ((partial_a[4] + partial_a[5]) + (partial_a[6] + partial_a[7])))
    sum_g_b[0] = (((partial_b[0] + partial_b[1]) + (partial_b[2] + partial_b[3]))
                  + ((partial_b[4] + partial_b[5]) + (partial_b[6] + partial_b[7])))


# ------------------------------------------------------- layout and buffers


cdef void _transpose_chunk(
    const floating[:, :, ::1] source,
    Py_ssize_t b,
    Py_ssize_t t_start,
    Py_ssize_t t_stop,
    floating[:, ::1] target,
) noexcept nogil:
    """target[t - t_start, n] = source[b, n, t] for t in [t_start, t_stop)."""
    cdef Py_ssize_t n, t
    for n in range(source.shape[1]):
        for t in range(t_start, t_stop):
            target[t - t_start, n] = source[b, n, t]


cdef void _add_transposed_chunk(
    const floating[:, ::1] source,
    Py_ssize_t b,
    Py_ssize_t t_start,
    Py_ssize_t t_stop,
    floating[:, :, ::1] target,
) noexcept nogil:
    """target[b, n, t] += source[t - t_start, n] for t in [t_start, t_stop)."""
    cdef Py_ssize_t n, t
    for n in range(target.shape[1]):
        for t in range(t_start, t_stop):
            target[b, n, t] += source[t - t_start, n]


cdef void _clear_rows(floating[:, ::1] rows, Py_ssize_t n_rows) noexcept nogil:
    cdef Py_ssize_t i, n
    for i in range(n_rows):
        for n in range(rows.shape[1]):
            rows[i, n] = 0


cdef void _copy_rows(
    const floating[:, ::1] source,
    Py_ssize_t row_start,
    Py_ssize_t row_stop,
    floating[:, ::1] target,
) noexcept nogil:
    """target[i, :N] = source[row_start + i] for the rows of a channel group.

    The padding columns of ``target`` are never written, so they stay zero.
    """
    cdef Py_ssize_t i, n
    for i in range(row_stop - row_start):
        for n in range(source.shape[1]):
            target[i, n] = source[row_start + i, n]


cdef void _add_rows(
    const floating[:, ::1] source,
    Py_ssize_t row_start,
    Py_ssize_t row_stop,
    floating[:, ::1] target,
) noexcept nogil:
    """target[row_start + i] += source[i, :N] for the rows of a channel group."""
    cdef Py_ssize_t i, n
    for i in range(row_stop - row_start):
        for n in range(target.shape[1]):
            target[row_start + i, n] += source[i, n]


cdef floating _row_max_abs(const floating* row, Py_ssize_t n_pad) noexcept nogil:
    """max_n |row[n]|."""
    cdef Py_ssize_t n
    cdef floating largest = 0
    for n in range(n_pad):
        if row[n] > largest:
            largest = row[n]
        elif -row[n] > largest:
            largest = -row[n]
    return largest


cdef inline void _channel_range(Py_ssize_t b, Py_ssize_t n_channels, Py_ssize_t pair_start,
                                Py_ssize_t pair_stop, Py_ssize_t* d_start,
                                Py_ssize_t* d_stop) noexcept nogil:
    """The channels [d_start, d_stop) of batch element ``b`` among the pairs
    [pair_start, pair_stop)."""
    d_start[0] = pair_start - b * n_channels if pair_start > b * n_channels else 0
    d_stop[0] = pair_stop - b * n_channels if pair_stop < (b + 1) * n_channels else n_channels


cdef Py_ssize_t _load_group(
    const floating[:, ::1] A,
    Py_ssize_t group_start,
    Py_ssize_t d_stop,
    Py_ssize_t group_size,
    floating[:, ::1] a_rows,
    floating[::1] a_max_abs,
) noexcept nogil:
    """Copy the rows of A of the channel group from ``group_start`` (at most
    ``group_size`` channels, none from ``d_stop`` on) into ``a_rows``, their
    largest |a| into ``a_max_abs``; returns the group's stop."""
    cdef Py_ssize_t slot
    cdef Py_ssize_t group_stop = group_start + group_size
    if group_stop > d_stop:
        group_stop = d_stop
    _copy_rows(A, group_start, group_stop, a_rows)
    for slot in range(group_stop - group_start):
        a_max_abs[slot] = _row_max_abs(&a_rows[slot, 0], a_rows.shape[1])
    return group_stop


cdef inline Py_ssize_t _chunk_stop(Py_ssize_t t_start, Py_ssize_t chunk,
                                   Py_ssize_t length) noexcept nogil:
    """The end of the chunk of time steps from ``t_start``."""
    return t_start + chunk if t_start + chunk < length else length


def padded_state_size(Py_ssize_t n_state):
    """Size of the padded state vector the kernels work on."""
    return ((n_state + LANES - 1) // LANES) * LANES


# ------------------------------------------------------------------ kernels


def forward(
    const floating[:, :, ::1] u,  # IN
    const floating[:, :, ::1] delta,  # IN
    const floating[:, ::1] A,  # IN
    const floating[:, :, ::1] B,  # IN
    const floating[:, :, ::1] C,  # IN
    const floating[::1] D,  # IN
    const floating[:, :, ::1] z,  # IN
    const floating[::1] delta_bias,  # IN
    floating[:, :, ::1] out,  # OUT
    floating[:, :, ::1] last_state,  # OUT
    bint selective_B,
    bint selective_C,
    bint gated,
    bint softplus,
    bint store_last_state,
    Py_ssize_t pair_start,
    Py_ssize_t pair_stop,
    Py_ssize_t chunk_size,
):
    """Selective scan over the (batch, channel) pairs [pair_start, pair_stop).

    Pair p is (p // n_channels, p % n_channels).  ``B``/``C`` are
    ``(batch, N, length)`` when selective, else ``(1, n_channels, N)``.
    ``D`` and ``delta_bias`` are zeros when absent; ``z`` is read only when
    ``gated``; ``last_state`` (batch, n_channels, N) is written only when
    ``store_last_state``.  Writes ``out`` for the pairs of the range.

    Channels are taken in groups of FORWARD_GROUP; the scratch memory is
    ``(3 * FORWARD_GROUP + 2 * chunk) * n_pad + 2 * chunk`` numbers whatever
    the number of channels and the length.
    """
    cdef Py_ssize_t n_channels = u.shape[1]
    cdef Py_ssize_t length = u.shape[2]
    cdef Py_ssize_t n_state = A.shape[1]
    cdef Py_ssize_t n_pad = padded_state_size(n_state)
    cdef Py_ssize_t chunk = chunk_size if chunk_size < length else length
    cdef Py_ssize_t n_chunks = (length + chunk - 1) // chunk
    cdef floating[:, ::1] a_rows = zeros_like_2d(A, FORWARD_GROUP, n_pad)
    # Selective B / C: one transposed chunk, advanced by n_pad per step;
    # time-invariant: one padded row per channel of the group, fixed over time.
    cdef floating[:, ::1] b_rows = zeros_like_2d(A, chunk if selective_B else FORWARD_GROUP, n_pad)
    cdef floating[:, ::1] c_rows = zeros_like_2d(A, chunk if selective_C else FORWARD_GROUP, n_pad)
    cdef Py_ssize_t b_step = n_pad if selective_B else 0
    cdef Py_ssize_t c_step = n_pad if selective_C else 0
    cdef floating[:, ::1] states = zeros_like_2d(A, FORWARD_GROUP, n_pad)
    cdef floating[:, ::1] vectors = zeros_like_2d(A, 3, chunk if chunk > FORWARD_GROUP else FORWARD_GROUP)
    cdef floating[::1] dt_chunk = vectors[0]
    cdef floating[::1] gate_chunk = vectors[1]
    cdef floating[::1] a_max_abs = vectors[2]
    cdef Py_ssize_t b, d, d_start, d_stop, group, group_start, group_stop, slot
    cdef Py_ssize_t t, t_start, t_stop, count, n, k
    cdef bint in_range
    cdef floating dt, u_t, y
    cdef const floating* b_row
    cdef const floating* c_row
    with nogil:
        b = pair_start // n_channels
        while b * n_channels < pair_stop:
            _channel_range(b, n_channels, pair_start, pair_stop, &d_start, &d_stop)
            for group in range((d_stop - d_start + FORWARD_GROUP - 1) // FORWARD_GROUP):
                group_start = d_start + group * FORWARD_GROUP
                group_stop = _load_group(A, group_start, d_stop, FORWARD_GROUP, a_rows, a_max_abs)
                if not selective_B:
                    _copy_rows(B[0], group_start, group_stop, b_rows)
                if not selective_C:
                    _copy_rows(C[0], group_start, group_stop, c_rows)
                _clear_rows(states, group_stop - group_start)
                for k in range(n_chunks):
                    t_start = k * chunk
                    t_stop = _chunk_stop(t_start, chunk, length)
                    count = t_stop - t_start
                    if selective_B:
                        _transpose_chunk(B, b, t_start, t_stop, b_rows)
                    if selective_C:
                        _transpose_chunk(C, b, t_start, t_stop, c_rows)
                    for d in range(group_start, group_stop):
                        slot = d - group_start
                        _steps_chunk(&delta[b, d, t_start], delta_bias[d], softplus,
                                     &dt_chunk[0], count)
                        in_range = _in_exp_range(&dt_chunk[0], count, a_max_abs[slot])
                        if gated:
                            _gates_chunk(&z[b, d, t_start], &gate_chunk[0], count)
                        b_row = &b_rows[0, 0] if selective_B else &b_rows[slot, 0]
                        c_row = &c_rows[0, 0] if selective_C else &c_rows[slot, 0]
                        for t in range(count):
                            dt = dt_chunk[t]
                            u_t = u[b, d, t_start + t]
                            y = _step(&states[slot, 0], &a_rows[slot, 0], b_row, c_row,
                                      dt, dt * u_t, n_pad, in_range)
                            y = y + D[d] * u_t
                            if gated:
                                y = y * gate_chunk[t]
                            out[b, d, t_start + t] = y
                            b_row += b_step
                            c_row += c_step
                if store_last_state:
                    for d in range(group_start, group_stop):
                        for n in range(n_state):
                            last_state[b, d, n] = states[d - group_start, n]
            b += 1


def backward(
    const floating[:, :, ::1] dout,  # IN
    const floating[:, :, ::1] u,  # IN
    const floating[:, :, ::1] delta,  # IN
    const floating[:, ::1] A,  # IN
    const floating[:, :, ::1] B,  # IN
    const floating[:, :, ::1] C,  # IN
    const floating[::1] D,  # IN
    const floating[:, :, ::1] z,  # IN
    const floating[::1] delta_bias,  # IN
    floating[:, :, ::1] du,  # OUT
    floating[:, :, ::1] ddelta,  # OUT
    floating[:, ::1] dA,  # INOUT
    floating[:, :, ::1] dB,  # INOUT
    floating[:, :, ::1] dC,  # INOUT
    floating[::1] dD,  # INOUT
    floating[:, :, ::1] dz,  # OUT
    floating[::1] ddelta_bias,  # INOUT
    bint selective_B,
    bint selective_C,
    bint gated,
    bint softplus,
    Py_ssize_t pair_start,
    Py_ssize_t pair_stop,
    Py_ssize_t chunk_size,
    Py_ssize_t batch_offset,
):
    """Gradients of sum(dout * out) over the pairs [pair_start, pair_stop).

    Writes ``du``, ``ddelta`` (and ``dz`` when ``gated``) for the pairs of
    the range; adds into ``dA``, ``dD``, ``ddelta_bias`` and ``dB``/``dC``.
    Selective ``dB``/``dC`` rows are indexed ``b - batch_offset``, so a caller
    can hand each thread its own accumulator for the batch elements it shares
    with another thread; time-invariant ones are ``(1, n_channels, N)``.

    The scratch memory is ``CHANNEL_GROUP * n_chunks * n_pad`` numbers of
    checkpoints, ``(6 * chunk + 1) * n_pad`` of per-chunk buffers (fewer with
    time-invariant B / C), ``6 * CHANNEL_GROUP * n_pad`` of per-group rows
    and ``4 * chunk``, whatever the number of channels.
    """
    cdef Py_ssize_t n_channels = u.shape[1]
    cdef Py_ssize_t length = u.shape[2]
    cdef Py_ssize_t n_state = A.shape[1]
    cdef Py_ssize_t n_pad = padded_state_size(n_state)
    cdef Py_ssize_t chunk = chunk_size if chunk_size < length else length
    cdef Py_ssize_t n_chunks = (length + chunk - 1) // chunk
    cdef floating[:, ::1] a_rows = zeros_like_2d(A, CHANNEL_GROUP, n_pad)
    cdef floating[:, ::1] grad_a_rows = zeros_like_2d(A, CHANNEL_GROUP, n_pad)
    # B / C and their gradients: one transposed chunk when selective, one
    # padded row per channel of the group when time-invariant (see forward).
    cdef floating[:, ::1] b_rows = zeros_like_2d(A, chunk if selective_B else CHANNEL_GROUP, n_pad)
    cdef floating[:, ::1] c_rows = zeros_like_2d(A, chunk if selective_C else CHANNEL_GROUP, n_pad)
    cdef floating[:, ::1] grad_b_rows = zeros_like_2d(A, chunk if selective_B else CHANNEL_GROUP, n_pad)
    cdef floating[:, ::1] grad_c_rows = zeros_like_2d(A, chunk if selective_C else CHANNEL_GROUP, n_pad)
    cdef Py_ssize_t b_step = n_pad if selective_B else 0
    cdef Py_ssize_t c_step = n_pad if selective_C else 0
    cdef floating[:, ::1] states = zeros_like_2d(A, chunk + 1, n_pad)
    cdef floating[:, ::1] decays = zeros_like_2d(A, chunk, n_pad)
    cdef floating[:, ::1] checkpoints = zeros_like_2d(A, CHANNEL_GROUP * n_chunks, n_pad)
    cdef floating[:, ::1] carried = zeros_like_2d(A, CHANNEL_GROUP, n_pad)
    cdef floating[:, ::1] vectors = zeros_like_2d(A, 5, chunk if chunk > CHANNEL_GROUP else CHANNEL_GROUP)
    cdef floating[::1] dt_chunk = vectors[0]
    cdef floating[::1] slope_chunk = vectors[1]
    cdef floating[::1] y_chunk = vectors[2]
    cdef floating[::1] dy_chunk = vectors[3]
    cdef floating[::1] a_max_abs = vectors[4]
    cdef Py_ssize_t b, d, d_start, d_stop, group, group_start, group_stop, slot
    cdef Py_ssize_t t, t_start, t_stop, count, k, n, row
    cdef bint in_range
    cdef floating dt, u_t, dy, sum_a, sum_b, grad_r, grad_d, grad_bias
    cdef const floating* b_row
    cdef const floating* c_row
    cdef const floating* dy_row
    cdef floating* grad_b_row
    cdef floating* grad_c_row
    with nogil:
        b = pair_start // n_channels
        while b * n_channels < pair_stop:
            _channel_range(b, n_channels, pair_start, pair_stop, &d_start, &d_stop)
            for group in range((d_stop - d_start + CHANNEL_GROUP - 1) // CHANNEL_GROUP):
                group_start = d_start + group * CHANNEL_GROUP
                group_stop = _load_group(A, group_start, d_stop, CHANNEL_GROUP, a_rows, a_max_abs)
                _clear_rows(grad_a_rows, group_stop - group_start)
                if not selective_B:
                    _copy_rows(B[0], group_start, group_stop, b_rows)
                    _clear_rows(grad_b_rows, group_stop - group_start)
                if not selective_C:
                    _copy_rows(C[0], group_start, group_stop, c_rows)
                    _clear_rows(grad_c_rows, group_stop - group_start)
                # Sweep 1: the state at the start of every chunk.
                _clear_rows(carried, group_stop - group_start)
                for k in range(n_chunks):
                    t_start = k * chunk
                    t_stop = _chunk_stop(t_start, chunk, length)
                    count = t_stop - t_start
                    if selective_B and k < n_chunks - 1:
                        _transpose_chunk(B, b, t_start, t_stop, b_rows)
                    for d in range(group_start, group_stop):
                        slot = d - group_start
                        row = slot * n_chunks + k
                        for n in range(n_pad):
                            checkpoints[row, n] = carried[slot, n]
                        if k == n_chunks - 1:
                            continue
                        _steps_chunk(&delta[b, d, t_start], delta_bias[d], softplus,
                                     &dt_chunk[0], count)
                        in_range = _in_exp_range(&dt_chunk[0], count, a_max_abs[slot])
                        b_row = &b_rows[0, 0] if selective_B else &b_rows[slot, 0]
                        for t in range(count):
                            dt = dt_chunk[t]
                            _step_state_only(&carried[slot, 0], &a_rows[slot, 0], b_row,
                                             dt, dt * u[b, d, t_start + t], n_pad, in_range)
                            b_row += b_step
                # Sweep 2: chunks in reverse; carried = a_{t+1} g_{t+1}.
                _clear_rows(carried, group_stop - group_start)
                for k in range(n_chunks - 1, -1, -1):
                    t_start = k * chunk
                    t_stop = _chunk_stop(t_start, chunk, length)
                    count = t_stop - t_start
                    if selective_B:
                        _transpose_chunk(B, b, t_start, t_stop, b_rows)
                        _clear_rows(grad_b_rows, count)
                    if selective_C:
                        _transpose_chunk(C, b, t_start, t_stop, c_rows)
                        _clear_rows(grad_c_rows, count)
                    for d in range(group_start, group_stop):
                        slot = d - group_start
                        _steps_and_slopes_chunk(&delta[b, d, t_start], delta_bias[d], softplus,
                                                &dt_chunk[0], &slope_chunk[0], count)
                        in_range = _in_exp_range(&dt_chunk[0], count, a_max_abs[slot])
                        # Recompute h_{t_start - 1} .. h_{t_stop - 1} into states[0..count].
                        row = slot * n_chunks + k
                        for n in range(n_pad):
                            states[0, n] = checkpoints[row, n]
                        b_row = &b_rows[0, 0] if selective_B else &b_rows[slot, 0]
                        c_row = &c_rows[0, 0] if selective_C else &c_rows[slot, 0]
                        for t in range(count):
                            dt = dt_chunk[t]
                            y_chunk[t] = _step_stored(
                                &states[t, 0], &states[t + 1, 0], &decays[t, 0],
                                &a_rows[slot, 0], b_row, c_row, dt, dt * u[b, d, t_start + t],
                                n_pad, in_range, gated)
                            b_row += b_step
                            c_row += c_step
                        if gated:
                            _gate_backward_chunk(
                                &z[b, d, t_start], &dout[b, d, t_start], &u[b, d, t_start],
                                &y_chunk[0], D[d], &dz[b, d, t_start], &dy_chunk[0], count)
                            dy_row = &dy_chunk[0]
                        else:
                            dy_row = &dout[b, d, t_start]
                        grad_d = 0
                        grad_bias = 0
                        for t in range(count - 1, -1, -1):
                            u_t = u[b, d, t_start + t]
                            dt = dt_chunk[t]
                            dy = dy_row[t]
                            if selective_B:
                                b_row = &b_rows[t, 0]
                                grad_b_row = &grad_b_rows[t, 0]
                            else:
                                b_row = &b_rows[slot, 0]
                                grad_b_row = &grad_b_rows[slot, 0]
                            if selective_C:
                                c_row = &c_rows[t, 0]
                                grad_c_row = &grad_c_rows[t, 0]
                            else:
                                c_row = &c_rows[slot, 0]
                                grad_c_row = &grad_c_rows[slot, 0]
                            _step_backward(
                                &carried[slot, 0], &grad_a_rows[slot, 0], grad_b_row,
                                grad_c_row, &states[t, 0], &states[t + 1, 0], &decays[t, 0],
                                &a_rows[slot, 0], b_row, c_row, dy, dt, dt * u_t, n_pad,
                                &sum_a, &sum_b)
                            du[b, d, t_start + t] = D[d] * dy + dt * sum_b
                            grad_r = (sum_a + u_t * sum_b) * slope_chunk[t]
                            ddelta[b, d, t_start + t] = grad_r
                            grad_bias = grad_bias + grad_r
                            grad_d = grad_d + dy * u_t
                        dD[d] += grad_d
                        ddelta_bias[d] += grad_bias
                    if selective_B:
                        _add_transposed_chunk(grad_b_rows, b - batch_offset, t_start, t_stop, dB)
                    if selective_C:
                        _add_transposed_chunk(grad_c_rows, b - batch_offset, t_start, t_stop, dC)
                _add_rows(grad_a_rows, group_start, group_stop, dA)
                if not selective_B:
                    _add_rows(grad_b_rows, group_start, group_stop, dB[0])
                if not selective_C:
                    _add_rows(grad_c_rows, group_start, group_stop, dC[0])
            b += 1
