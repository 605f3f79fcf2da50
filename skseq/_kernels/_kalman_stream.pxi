# The stream smoother of _kalman.pyx: forward-only smoothing of the EM
# statistics, exact over a sequence that arrives in chunks.  Included by
# _kalman.pyx (``include "_kalman_stream.pxi"``), whose model and workspace
# structs, filter and RTS steps, row statistics and _linalg routines it uses:
# one extension module, so set_blas_min_work's thresholds govern it too.

# --------------------------------------------------------------------------
# Forward-only smoothing of the EM statistics: exact streams in chunks.
#
# The message carried from chunk to chunk holds, for every entry e of the
# "moments" below, the coefficients of the quadratic function
#
#     T_e(z) = constant[e] + linear[e] . z + z^T quadratic[e] z
#            = E[moment e of all rows so far | z_t = z, x_1..x_t]
#
# of the state z of the last row t.  A chunk of rows t0+1..t1 updates it with
# the chunk's backward kernel: given z_{t1} = z and x_1..x_{t1}, the state of
# row s is Gaussian with mean alpha_s + B_s z and a covariance Gamma_s that
# does not depend on z, where (alpha_s, Gamma_s) is the RTS smoother run from
# the pinned end state (alpha, Gamma) = (0, 0) and B_s = J_s B_{s+1}, B_{t1} = I
# (J_s the smoother gain).  Each row then adds a quadratic in z, and the old
# message is composed with the Gaussian of z_{t0} (doc/user_guide/lgssm.rst).
# --------------------------------------------------------------------------

def stream_layout(Py_ssize_t n_state, Py_ssize_t n_obs, Py_ssize_t n_ctrl):
    """The blocks of moments a stream message carries, as ``((name, shape), ...)`` in storage order.

    * ``observation_regressor`` (k+1, k+1), ``observation_cross`` (p, k+1),
      ``observation_target`` (p, p): the observation statistics of the rows
      with an observed entry (sum of E[psi psi^T], E[x psi^T], E[x x^T],
      psi = (z_t, 1));
    * ``lag_outer`` (k, k): sum over transitions of E[z_t z_{t-1}^T];
    * ``initial_outer`` (k, k), ``initial_sum`` (k,): E[z_1 z_1^T], E[z_1];
    * ``previous_control`` (k, m), ``state_control`` (k, m): sums over
      transitions of E[z_{t-1}] u_t^T and E[z_t] u_t^T;
    * ``control_outer`` (m, m), ``control_sum`` (m,), ``n_transitions`` (),
      ``n_sequences`` (): sums that do not depend on the states;
    * ``state_regressor`` (k+1, k+1): sum of E[psi psi^T] over every row,
      observed or not (the observation regressor without the rows that have
      no observed entry).

    The transition statistics follow from these and the last row's state.
    Symmetric blocks are kept in their upper triangle.
    """
    k, p, m = n_state, n_obs, n_ctrl
    return (
        ("observation_regressor", (k + 1, k + 1)),
        ("observation_cross", (p, k + 1)),
        ("observation_target", (p, p)),
        ("lag_outer", (k, k)),
        ("initial_outer", (k, k)),
        ("initial_sum", (k,)),
        ("previous_control", (k, m)),
        ("state_control", (k, m)),
        ("control_outer", (m, m)),
        ("control_sum", (m,)),
        ("n_transitions", ()),
        ("n_sequences", ()),
        ("state_regressor", (k + 1, k + 1)),
    )


cdef struct StreamLayout:
    # Offsets of the blocks of stream_layout in the flat arrays of coefficients.
    Py_ssize_t observation_regressor
    Py_ssize_t observation_cross
    Py_ssize_t observation_target
    Py_ssize_t lag_outer
    Py_ssize_t initial_outer
    Py_ssize_t initial_sum
    Py_ssize_t previous_control
    Py_ssize_t state_control
    Py_ssize_t control_outer
    Py_ssize_t control_sum
    Py_ssize_t n_transitions
    Py_ssize_t n_sequences
    Py_ssize_t state_regressor
    Py_ssize_t size


cdef StreamLayout _stream_offsets(Py_ssize_t k, Py_ssize_t p, Py_ssize_t m):
    cdef StreamLayout layout
    offsets = {}
    position = 0
    for name, shape in stream_layout(k, p, m):
        offsets[name] = position
        size = 1
        for extent in shape:
            size *= extent
        position += size
    layout.observation_regressor = offsets["observation_regressor"]
    layout.observation_cross = offsets["observation_cross"]
    layout.observation_target = offsets["observation_target"]
    layout.lag_outer = offsets["lag_outer"]
    layout.initial_outer = offsets["initial_outer"]
    layout.initial_sum = offsets["initial_sum"]
    layout.previous_control = offsets["previous_control"]
    layout.state_control = offsets["state_control"]
    layout.control_outer = offsets["control_outer"]
    layout.control_sum = offsets["control_sum"]
    layout.n_transitions = offsets["n_transitions"]
    layout.n_sequences = offsets["n_sequences"]
    layout.state_regressor = offsets["state_regressor"]
    layout.size = position
    return layout


cdef struct Coefficients:
    double* constant    # E
    double* linear      # E x k
    double* quadratic   # E x k x k


cdef int _stream_row(const ModelView* model, Workspace* w, const StreamLayout* layout,
                     Coefficients* coefficients, const double* x, const double* mean,
                     const double* cov, const double* gain, double* filled_gain,
                     double* filled_row) noexcept nogil:
    """Add the observation moments of one row whose state given the end state z is
    N(mean + gain z, cov), except the terms :func:`_stream_gain_products` adds
    for the whole chunk.

    The constant terms are the row's statistics at z = 0 (:func:`_accumulate_row`),
    and its state moments (every row's, for the state regressor).  The row x
    filled in at z = 0 (missing entries by their conditional mean
    A_mis mean + c_mis) goes to ``filled_row``; a row with no observed entry
    adds no observation moments and gets a filled row of zeros, so that it
    adds nothing to the products of :func:`_stream_gain_products` either.  A
    missing entry also depends on z through ``filled_gain = A_mis gain``: its
    linear and quadratic terms are added here.  Returns -1 when R_oo is not
    positive definite.
    """
    cdef Py_ssize_t k = model.n_state
    cdef Py_ssize_t p = model.n_obs
    cdef Py_ssize_t k1 = k + 1
    cdef Py_ssize_t kk = k * k
    cdef Py_ssize_t j, r, l, b, b2, e, n_missing
    cdef double* linear = coefficients.linear
    cdef double* quadratic = coefficients.quadratic
    cdef Statistics stats
    stats.observation_regressor = coefficients.constant + layout.observation_regressor
    stats.observation_cross = coefficients.constant + layout.observation_cross
    stats.observation_target = coefficients.constant + layout.observation_target
    _add_state_moments(coefficients.constant + layout.state_regressor, mean, cov, k)
    if _no_observed_entry(x, p):
        _zero(filled_row, p)
        return 0
    n_missing = _accumulate_row(model, w, &stats, x, mean, cov)
    if n_missing < 0:
        return -1
    _copy(x if n_missing == 0 else w.x_filled, filled_row, p)
    if n_missing == 0:
        return 0

    _matmul(w.a_mis, gain, filled_gain, n_missing, k, k)
    for b in range(n_missing):
        r = w.missing[b]
        # E[x_r z_j]: besides filled_r (gain z)_j, the term mean_j (A gain)_r z
        # and the quadratic (A gain)_r z (gain z)_j.
        for j in range(k):
            e = layout.observation_cross + r * k1 + j
            _add_scaled(linear + e * k, mean[j], filled_gain + b * k, k)
            _add_outer(quadratic + e * kk, filled_gain + b * k, gain + j * k, k)
        e = layout.observation_cross + r * k1 + k
        _add_scaled(linear + e * k, 1.0, filled_gain + b * k, k)
        # E[x_r x_l] (upper triangle): the linear term filled_l (A gain)_r z of
        # the missing x_r, twice on the diagonal, and the quadratic term of
        # every pair of missing entries.
        for l in range(p):
            e = layout.observation_target + (r * p + l if r <= l else l * p + r)
            _add_scaled(linear + e * k, (2.0 if l == r else 1.0) * filled_row[l],
                        filled_gain + b * k, k)
        for b2 in range(n_missing):
            if w.missing[b2] >= r:
                e = layout.observation_target + r * p + w.missing[b2]
                _add_outer(quadratic + e * kk, filled_gain + b * k, filled_gain + b2 * k, k)
    return 0


cdef void _stream_transition(const StreamLayout* layout, Coefficients* coefficients,
                             const double* mean, const double* mean_next, const double* cross,
                             const double* u_next, Py_ssize_t k, Py_ssize_t m) noexcept nogil:
    """Add the constant terms of the moments of the transition (z_s, z_{s+1}) with
    control u_{s+1} (the others come from :func:`_stream_gain_products`).

    Given the end state z = 0, z_s has mean ``mean``, z_{s+1} ``mean_next``,
    and ``cross`` = Cov(z_{s+1}, z_s | z).
    """
    cdef Py_ssize_t i, j, c
    cdef double* constant = coefficients.constant
    for i in range(k):
        for j in range(k):
            constant[layout.lag_outer + i * k + j] += cross[i * k + j] + mean_next[i] * mean[j]
        for c in range(m):
            constant[layout.previous_control + i * m + c] += mean[i] * u_next[c]
            constant[layout.state_control + i * m + c] += mean_next[i] * u_next[c]
    for c in range(m):
        for j in range(m):
            constant[layout.control_outer + c * m + j] += u_next[c] * u_next[j]
        constant[layout.control_sum + c] += u_next[c]
    constant[layout.n_transitions] += 1.0



# Which rows :func:`_add_transposed_product_rows` sums over.
cdef enum:
    ALL_ROWS = 0
    OBSERVED_ROWS = 1     # the rows with an observed entry
    UNOBSERVED_ROWS = 2   # the rows without one


cdef Py_ssize_t _unobserved_rows(const double* x, Py_ssize_t x_stride, Py_ssize_t n_rows,
                                 Py_ssize_t p) noexcept nogil:
    """The number of rows of x without an observed entry."""
    cdef Py_ssize_t t, count = 0
    for t in range(n_rows):
        if _no_observed_entry(x + t * x_stride, p):
            count += 1
    return count


cdef inline bint _selected(const double* x, Py_ssize_t p, int rows) noexcept nogil:
    if rows == ALL_ROWS:
        return True
    return _no_observed_entry(x, p) == (rows == UNOBSERVED_ROWS)


cdef void _add_transposed_product_rows(const double* a, Py_ssize_t a_stride, const double* b,
                                       Py_ssize_t b_stride, double* out, const double* x,
                                       Py_ssize_t x_stride, Py_ssize_t n_rows, Py_ssize_t n_a,
                                       Py_ssize_t n_b, Py_ssize_t p, int rows) noexcept nogil:
    """:func:`_add_transposed_product` over the rows that ``rows`` selects by the
    rows of x: all, or the runs of rows with (without) an observed entry."""
    cdef Py_ssize_t first = 0, stop
    cdef bint take
    if rows == ALL_ROWS:
        _add_transposed_product(a, a_stride, b, b_stride, out, n_rows, n_a, n_b)
        return
    while first < n_rows:
        take = _selected(x + first * x_stride, p, rows)
        stop = first + 1
        while stop < n_rows and _selected(x + stop * x_stride, p, rows) == take:
            stop += 1
        if take:
            _add_transposed_product(a + first * a_stride, a_stride, b + first * b_stride,
                                    b_stride, out, stop - first, n_a, n_b)
        first = stop


cdef inline void _gain_products(const double* a, Py_ssize_t a_stride, Py_ssize_t n_a,
                                const double* gains, Py_ssize_t n_rows, Py_ssize_t kk,
                                double* product) noexcept nogil:
    """product (n_a x k^2) = sum over n_rows rows s of a_s vec(gain_s)^T, for the
    rows a_s of a (n_a entries, a_stride apart) and consecutive k x k gains."""
    _zero(product, n_a * kk)
    _add_transposed_product(a, a_stride, gains, kk, product, n_rows, n_a, kk)


cdef inline void _add_linear_blocks(double* linear, Py_ssize_t block, Py_ssize_t n_i,
                                    Py_ssize_t n_j, Py_ssize_t row_stride,
                                    const double* product, Py_ssize_t k,
                                    bint transposed) noexcept nogil:
    """Add to the linear coefficients of the entries (i, j), i < n_i, j < n_j, of the
    block of moments at entry ``block`` (rows ``row_stride`` entries apart) the
    rows [i, j] of ``product`` seen as (n, k, k) -- [j, i] when ``transposed``."""
    cdef Py_ssize_t kk = k * k
    cdef Py_ssize_t i, j
    for i in range(n_i):
        for j in range(n_j):
            _add_scaled(linear + (block + i * row_stride + j) * k, 1.0,
                        product + (j * kk + i * k if transposed else i * kk + j * k), k)


cdef inline void _add_quadratic_blocks(double* quadratic, Py_ssize_t block,
                                       Py_ssize_t row_stride, const double* product,
                                       Py_ssize_t k, bint upper) noexcept nogil:
    """Add to the quadratic coefficients of the entries (i, j) of the k x k block of
    moments at entry ``block`` (rows ``row_stride`` entries apart; the upper
    triangle only when ``upper``) the k x k blocks of ``product`` (k^2 x k^2):
    quadratic[(i, j)][a, b] += product[i k + a, j k + b]."""
    cdef Py_ssize_t kk = k * k
    cdef Py_ssize_t i, j, a, b, e
    for i in range(k):
        for j in range(i if upper else 0, k):
            e = block + i * row_stride + j
            for a in range(k):
                for b in range(k):
                    quadratic[e * kk + a * k + b] += product[(i * k + a) * kk + j * k + b]


cdef void _stream_regressor_terms(Py_ssize_t block, Coefficients* coefficients,
                                  const double* means, const double* row_gains,
                                  const double* x, Py_ssize_t x_stride, Py_ssize_t n_rows,
                                  Py_ssize_t k, Py_ssize_t p, int rows,
                                  double* product) noexcept nogil:
    """Add the terms linear and quadratic in the end state of sum E[psi psi^T],
    psi = (z_s, 1), over the chunk's rows that ``rows`` selects, to the
    (k+1) x (k+1) block of moments starting at entry ``block``.

    Row s's state is N(mean_s + gain_s z, ...) given the end state z (``means``
    from slot 1, ``row_gains`` the gains of the chunk's rows).
    """
    cdef Py_ssize_t kk = k * k
    cdef Py_ssize_t k1 = k + 1
    cdef Py_ssize_t i, j, a, e, t
    cdef double* linear = coefficients.linear
    cdef double* quadratic = coefficients.quadratic
    # E[z_i z_j] has sum_s (gain_s z)_i (gain_s z)_j = z^T [sum_s gain_s[i]^T gain_s[j]] z,
    # i.e. the blocks of sum_s vec(gain_s) vec(gain_s)^T.
    _zero(product, kk * kk)
    _add_transposed_product_rows(row_gains, kk, row_gains, kk, product, x, x_stride, n_rows,
                                 kk, kk, p, rows)
    _add_quadratic_blocks(quadratic, block, k1, product, k, True)
    _zero(product, kk * k)
    _add_transposed_product_rows(means + k, k, row_gains, kk, product, x, x_stride, n_rows,
                                 k, kk, p, rows)
    for i in range(k):
        for j in range(i, k):
            e = block + i * k1 + j
            for a in range(k):
                linear[e * k + a] += product[i * kk + j * k + a] + product[j * kk + i * k + a]
    for t in range(n_rows):
        if _selected(x + t * x_stride, p, rows):
            for i in range(k):
                _add_scaled(linear + (block + i * k1 + k) * k, 1.0, row_gains + t * kk + i * k, k)


cdef void _stream_gain_products(const StreamLayout* layout, Coefficients* coefficients,
                                const double* means, const double* gains, const double* filled,
                                const double* u, Py_ssize_t u_stride, const double* x,
                                Py_ssize_t x_stride, Py_ssize_t n_rows,
                                Py_ssize_t first_slot, Py_ssize_t k, Py_ssize_t p,
                                Py_ssize_t m, double* product) noexcept nogil:
    """Add the terms of the chunk's moments that are linear or quadratic in the end state.

    Slot j of ``means`` / ``gains`` holds mean_j and gain_j (k x k) of a state
    N(mean_j + gain_j z, ...) given the end state z; slots 1..n_rows are the
    rows of the chunk, slot 0 the previous row, and the transitions run from
    slot ``first_slot`` on.  Every such term is a sum over rows of products
    of a row's vector (its mean, filled row or control) or gain with a gain,
    so the whole chunk is done by a few matrix products (BLAS from moderate
    sizes) instead of O(k^4) scalar updates per row.  ``filled`` holds the
    filled-in rows (zeros for a row without an observed entry), ``x`` the
    chunk's rows, ``product`` room for k^4 and for (max(k, p, m) x k^2) values.
    """
    cdef Py_ssize_t kk = k * k
    cdef Py_ssize_t k1 = k + 1
    cdef Py_ssize_t n_transitions = n_rows - first_slot
    cdef int rows
    cdef const double* row_gains = gains + kk
    cdef const double* previous_gains = gains + first_slot * kk
    cdef const double* next_gains = previous_gains + kk
    cdef double* linear = coefficients.linear
    cdef double* quadratic = coefficients.quadratic

    # Rows: the observation regressor sums over the rows with an observed
    # entry, the state regressor over all rows.  Both start at zero in the
    # chunk's own terms, so without unobserved rows the state regressor's
    # terms are a copy of the observation regressor's.
    rows = ALL_ROWS if _unobserved_rows(x, x_stride, n_rows, p) == 0 else OBSERVED_ROWS
    _stream_regressor_terms(layout.observation_regressor, coefficients, means, row_gains,
                            x, x_stride, n_rows, k, p, rows, product)
    _copy(linear + layout.observation_regressor * k, linear + layout.state_regressor * k,
          k1 * k1 * k)
    _copy(quadratic + layout.observation_regressor * kk,
          quadratic + layout.state_regressor * kk, k1 * k1 * kk)
    if rows == OBSERVED_ROWS:
        _stream_regressor_terms(layout.state_regressor, coefficients, means, row_gains,
                                x, x_stride, n_rows, k, p, UNOBSERVED_ROWS, product)
    _gain_products(filled, p, p, row_gains, n_rows, kk, product)
    _add_linear_blocks(linear, layout.observation_cross, p, k, k1, product, k, False)

    # Transitions s -> s + 1: E[z_{s+1,i} z_{s,j}] and the controls' cross moments.
    _gain_products(next_gains, kk, kk, previous_gains, n_transitions, kk, product)
    _add_quadratic_blocks(quadratic, layout.lag_outer, k, product, k, False)
    _gain_products(means + (first_slot + 1) * k, k, k, previous_gains, n_transitions, kk,
                   product)
    _add_linear_blocks(linear, layout.lag_outer, k, k, k, product, k, False)
    _gain_products(means + first_slot * k, k, k, next_gains, n_transitions, kk, product)
    _add_linear_blocks(linear, layout.lag_outer, k, k, k, product, k, True)
    if m == 0:
        return
    # The control of the transition into slot j + 1 is that of chunk row j.
    _gain_products(u + first_slot * u_stride, u_stride, m, previous_gains, n_transitions, kk,
                   product)
    _add_linear_blocks(linear, layout.previous_control, k, m, m, product, k, True)
    _gain_products(u + first_slot * u_stride, u_stride, m, next_gains, n_transitions, kk,
                   product)
    _add_linear_blocks(linear, layout.state_control, k, m, m, product, k, True)


cdef void _stream_initial(const StreamLayout* layout, Coefficients* coefficients,
                          const double* mean, const double* cov, const double* gain,
                          Py_ssize_t k) noexcept nogil:
    """Add the moments of the first state of the sequence, N(mean + gain z, cov) given z."""
    cdef Py_ssize_t kk = k * k
    cdef Py_ssize_t i, j, e
    for i in range(k):
        e = layout.initial_sum + i
        coefficients.constant[e] += mean[i]
        _add_scaled(coefficients.linear + e * k, 1.0, gain + i * k, k)
        for j in range(i, k):
            e = layout.initial_outer + i * k + j
            coefficients.constant[e] += cov[i * k + j] + mean[i] * mean[j]
            _add_scaled(coefficients.linear + e * k, mean[i], gain + j * k, k)
            _add_scaled(coefficients.linear + e * k, mean[j], gain + i * k, k)
            _add_outer(coefficients.quadratic + e * kk, gain + i * k, gain + j * k, k)
    coefficients.constant[layout.n_sequences] += 1.0


cdef void _stream_compose(Coefficients* coefficients, Py_ssize_t n_entries, const double* mean,
                          const double* cov, const double* gain, double* vectors,
                          double* stacked, Py_ssize_t k) noexcept nogil:
    """Replace every T_e(y) by E[T_e(y) | z] for y ~ N(mean + gain z, cov).

    T(y) = c + b.y + y^T C y becomes c + b.mean + mean^T C mean + tr(C cov)
    + (gain^T (b + (C + C^T) mean)).z + z^T (gain^T C gain) z.  The products
    with ``gain`` run for all entries at once, as products of the stacked
    coefficients (``vectors``: room for n_entries x k, ``stacked`` for
    n_entries x k x k).
    """
    cdef Py_ssize_t kk = k * k
    cdef Py_ssize_t e, a, c, first, count, piece
    cdef double total, row_product, column_product
    cdef double* linear
    cdef double* quadratic
    for e in range(n_entries):
        linear = coefficients.linear + e * k
        quadratic = coefficients.quadratic + e * kk
        total = coefficients.constant[e]
        for a in range(k):
            row_product = 0.0
            column_product = 0.0
            for c in range(k):
                row_product += quadratic[a * k + c] * mean[c]
                column_product += quadratic[c * k + a] * mean[c]
                total += quadratic[a * k + c] * cov[a * k + c]
            total += (linear[a] + row_product) * mean[a]
            vectors[e * k + a] = linear[a] + row_product + column_product
        coefficients.constant[e] = total
    # The new linear coefficients are the rows v_e^T gain = (gain^T v_e)^T;
    # with Y_e = C_e gain, the new quadratic ones gain^T Y_e = (Y_e^T gain)^T.
    # All entries at once, in pieces (see GEMM_PIECE_WORK).
    piece = max(1, GEMM_PIECE_WORK // (kk * k))
    first = 0
    while first < n_entries:
        count = min(piece, n_entries - first)
        _matmul(vectors + first * k, gain, coefficients.linear + first * k, count, k, k)
        _matmul(coefficients.quadratic + first * kk, gain, stacked + first * kk, count * k, k, k)
        for e in range(first, first + count):
            _transpose(stacked + e * kk, coefficients.quadratic + e * kk, k, k)
        _matmul(coefficients.quadratic + first * kk, gain, stacked + first * kk, count * k, k, k)
        for e in range(first, first + count):
            _transpose(stacked + e * kk, coefficients.quadratic + e * kk, k, k)
        first += piece


cdef double _forward_smoothing(const ModelView* model, Workspace* w, const StreamLayout* layout,
                               const double* x, Py_ssize_t x_stride, const double* u,
                               Py_ssize_t u_stride, Py_ssize_t n_rows, bint fresh,
                               double* filtered_mean, double* filtered_cov,
                               Coefficients* carried, Coefficients* added, double* means,
                               double* covs, double* gains, double* filled, double* predicted_mean,
                               double* predicted_cov, double* filled_gain, double* product,
                               double* log_predictive, Py_ssize_t time_start,
                               Py_ssize_t n_carried=-1,
                               const Py_ssize_t* selected=NULL) noexcept nogil:
    """The recursion of :func:`forward_smoothing` on preallocated scratch.

    ``means``, ``covs`` and ``gains`` (k x k each) have n_rows + 1 slots: slot 0
    is the previous row (when continuing), slot s + 1 row s; ``filled`` has a
    row of p per row.  ``added`` starts at zero and collects the chunk's own
    terms.  ``product`` has room for k^4 values, (max(k, p, m) x k^2) and
    (n_entries x (k^2 + k)).  ``time_start`` is the time step of row 0 (of
    a time-varying model; row s uses the arrays of step time_start + s).
    With ``selected`` (n_carried indices of moments) ``carried`` holds only
    those moments, in that order (each moment's recursion is its own, so they
    equal the full message's entries).
    """
    cdef Py_ssize_t k = model.n_state
    cdef Py_ssize_t kk = k * k
    cdef Py_ssize_t p = model.n_obs
    cdef Py_ssize_t n_entries = layout.size
    cdef Py_ssize_t s, slot, first, i
    cdef double log_likelihood
    cdef const double* u_next
    cdef ModelView step
    if not fresh:
        _copy(filtered_mean, means, k)
        _copy(filtered_cov, covs, kk)
    log_likelihood = _filter_sequence(
        model, w, x, x_stride, u, u_stride, n_rows, predicted_mean, predicted_cov, 0,
        means + k, covs + kk, -1, log_predictive,
        NULL if fresh else means, NULL if fresh else covs, time_start)
    if isnan(log_likelihood):
        return NAN
    _copy(means + n_rows * k, filtered_mean, k)
    _copy(covs + n_rows * kk, filtered_cov, kk)

    # The last row is the end state itself: mean 0 + I z, covariance 0.
    _zero(means + n_rows * k, k)
    _zero(covs + n_rows * kk, kk)
    _zero(gains + n_rows * kk, kk)
    for i in range(k):
        gains[n_rows * kk + i * k + i] = 1.0
    if _stream_row(_at_step(model, &step, 0, time_start + n_rows - 1), w, layout, added,
                   x + (n_rows - 1) * x_stride, means + n_rows * k,
                   covs + n_rows * kk, gains + n_rows * kk, filled_gain,
                   filled + (n_rows - 1) * p) < 0:
        return NAN
    # Backwards: the RTS step from the pinned end state gives slot s's mean and
    # covariance given z = 0, and its gain is J_s times the next slot's.
    first = 0 if fresh else -1
    for s in range(n_rows - 2, first - 1, -1):
        slot = s + 1
        u_next = u + (s + 1) * u_stride if u != NULL else NULL
        if _smooth_step(_at_step(model, &step, time_start + s, time_start + s), w,
                        means + slot * k, covs + slot * kk, u_next,
                        means + (slot + 1) * k, covs + (slot + 1) * kk, True) != 0:
            return NAN
        _matmul(w.smoother_gain, gains + (slot + 1) * kk, gains + slot * kk, k, k, k)
        _stream_transition(layout, added, means + slot * k, means + (slot + 1) * k, w.cross,
                           u_next, k, model.n_ctrl)
        if s >= 0 and _stream_row(_at_step(model, &step, 0, time_start + s), w, layout, added,
                                  x + s * x_stride, means + slot * k,
                                  covs + slot * kk, gains + slot * kk, filled_gain,
                                  filled + s * p) < 0:
            return NAN
    _stream_gain_products(layout, added, means, gains, filled, u, u_stride, x, x_stride,
                          n_rows, 1 if fresh else 0, k, p, model.n_ctrl, product)
    if fresh:
        _stream_initial(layout, added, means + k, covs + kk, gains + kk, k)
    else:
        _stream_compose(carried, n_entries if selected == NULL else n_carried, means, covs,
                        gains, product, product + n_entries * k, k)
    if selected != NULL:
        for s in range(n_carried):
            i = selected[s]
            carried.constant[s] += added.constant[i]
            _add_scaled(carried.linear + s * k, 1.0, added.linear + i * k, k)
            _add_scaled(carried.quadratic + s * kk, 1.0, added.quadratic + i * kk, kk)
        return log_likelihood
    for i in range(n_entries):
        carried.constant[i] += added.constant[i]
    for i in range(n_entries * k):
        carried.linear[i] += added.linear[i]
    for i in range(n_entries * kk):
        carried.quadratic[i] += added.quadratic[i]
    return log_likelihood


def forward_smoothing(
    LinearGaussianModel model,
    const double[:, ::1] X,  # IN
    const double[:, ::1] controls,  # IN
    bint fresh,
    Py_ssize_t time_start,
    double[::1] filtered_mean,  # INOUT
    double[:, ::1] filtered_cov,  # INOUT
    double[::1] constant,  # INOUT
    double[:, ::1] linear,  # INOUT
    double[:, :, ::1] quadratic,  # INOUT
    double[::1] log_predictive,  # OUT
):
    """Forward-only smoothing of the EM moments over the rows of one chunk of a sequence.

    The message (``filtered_mean``, ``filtered_cov``: the filtered state of
    the last row seen; ``constant``, ``linear``, ``quadratic``: the
    coefficients of the moments' conditional expectations given that state,
    in the layout of :func:`stream_layout`) is updated in place, and
    ``log_predictive`` receives log p(x_t | past) of every row.  With
    ``fresh`` the rows start a sequence (the message's input values are
    ignored; pass zeros); otherwise they continue it, and the control of
    row 0 drives the transition into it.  X must have at least one row.
    Memory besides the message is O(n_rows (k^2 + p) + k^4 + E k^2).
    Returns the log-likelihood of the rows given the past, or NaN on a
    numerical failure (the message is then unusable).  ``time_start`` is the
    time step of row 0 within the sequence (used by a time-varying model only).
    """
    cdef ModelView* view = &model.view
    cdef Py_ssize_t k = view.n_state
    cdef Py_ssize_t p = view.n_obs
    cdef Py_ssize_t n_rows = X.shape[0]
    cdef StreamLayout layout = _stream_offsets(k, p, view.n_ctrl)
    cdef _Scratch scratch = _Scratch(k, p)
    cdef double[:, ::1] means = _zeros2(n_rows + 1, k)
    cdef double[:, :, ::1] covs = _zeros3(n_rows + 1, k, k)
    cdef double[:, :, ::1] gains = _zeros3(n_rows + 1, k, k)
    cdef double[:, ::1] filled = _zeros2(n_rows, max(p, 1))
    cdef double[:, ::1] predicted_mean = _zeros2(1, k)
    cdef double[:, :, ::1] predicted_cov = _zeros3(1, k, k)
    cdef double[:, ::1] filled_gain = _zeros2(max(p, 1), k)
    cdef double[::1] product = zeros_1d(
        max(k * k * max(k * k, k, p, view.n_ctrl), layout.size * (k * k + k)))
    cdef double[::1] added_constant = zeros_1d(layout.size)
    cdef double[:, ::1] added_linear = _zeros2(layout.size, k)
    cdef double[:, :, ::1] added_quadratic = _zeros3(layout.size, k, k)
    cdef Coefficients carried, added
    cdef double log_likelihood
    carried.constant = &constant[0]
    carried.linear = &linear[0, 0]
    carried.quadratic = &quadratic[0, 0, 0]
    added.constant = &added_constant[0]
    added.linear = &added_linear[0, 0]
    added.quadratic = &added_quadratic[0, 0, 0]
    with nogil:
        log_likelihood = _forward_smoothing(
            view, &scratch.w, &layout, &X[0, 0], X.strides[0] // sizeof(double),
            _row_pointer(controls, 0), controls.strides[0] // sizeof(double), n_rows, fresh,
            &filtered_mean[0], &filtered_cov[0, 0], &carried, &added, &means[0, 0],
            &covs[0, 0, 0], &gains[0, 0, 0], &filled[0, 0], &predicted_mean[0, 0],
            &predicted_cov[0, 0, 0], &filled_gain[0, 0], &product[0], &log_predictive[0],
            time_start)
    return log_likelihood


# --------------------------------------------------------------------------
# The moments after every row: the per-row scores of exact maximum likelihood.
# --------------------------------------------------------------------------

cdef void _message_moments(const Coefficients* carried, Py_ssize_t n_entries, const double* mean,
                           const double* cov, double* values, double* second,
                           Py_ssize_t k) noexcept nogil:
    """values[e] = T_e averaged over the filtered N(mean, cov): constant[e] +
    linear[e] . mean + <quadratic[e], second> with second = cov + mean mean^T
    (also written out)."""
    cdef Py_ssize_t kk = k * k
    cdef Py_ssize_t e, a, c
    cdef double total
    for a in range(k):
        for c in range(k):
            second[a * k + c] = cov[a * k + c] + mean[a] * mean[c]
    for e in range(n_entries):
        total = carried.constant[e]
        for a in range(k):
            total += carried.linear[e * k + a] * mean[a]
        for a in range(kk):
            total += carried.quadratic[e * kk + a] * second[a]
        values[e] = total


def forward_smoothing_row_moments(
    LinearGaussianModel model,
    const double[:, ::1] X,  # IN
    const double[:, ::1] controls,  # IN
    const Py_ssize_t[::1] offsets,  # IN
    double[:, ::1] values,  # OUT
    double[:, ::1] filtered_means,  # OUT
    double[:, :, ::1] seconds,  # OUT
    double[::1] log_predictive,  # OUT
    double[::1] sequence_log_likelihood,  # OUT
    const Py_ssize_t[::1] selected=None,  # IN, optional
):
    """The smoothed moments of the rows so far, after every row of every sequence.

    Forward-only smoothing (:func:`forward_smoothing`) one row at a time, in
    one call: after row t the message's moments (the layout of
    :func:`stream_layout`) averaged over the filtered state of row t go to
    ``values[t]``, that state's mean to ``filtered_means[t]`` and its second
    moment E[z z^T] to ``seconds[t]``, so that the smoothed statistics of
    rows 1..t of the sequence follow, and their increments are the rows'
    scores (exact maximum likelihood's OPG).  The same recursion, step for
    step, as calling :func:`forward_smoothing` row by row; scratch is
    O(E k^2 + k^4) besides the outputs.  A sequence whose recursion fails
    gets log-likelihood NaN (its later rows are left unset).

    With ``selected`` (indices of moments, increasing) only those moments are
    carried and written to ``values`` (n_samples x len(selected)): the same
    numbers, at a cost that grows with the number selected (the scores of a
    few free coordinates need few moments).
    """
    cdef ModelView* view = &model.view
    cdef Py_ssize_t k = view.n_state
    cdef Py_ssize_t kk = k * k
    cdef Py_ssize_t p = view.n_obs
    cdef Py_ssize_t n_sequences = offsets.shape[0] - 1
    cdef StreamLayout layout = _stream_offsets(k, p, view.n_ctrl)
    cdef Py_ssize_t n_entries = layout.size
    cdef _Scratch scratch = _Scratch(k, p)
    cdef double[:, ::1] means = _zeros2(2, k)
    cdef double[:, :, ::1] covs = _zeros3(2, k, k)
    cdef double[:, :, ::1] gains = _zeros3(2, k, k)
    cdef double[:, ::1] filled = _zeros2(1, max(p, 1))
    cdef double[:, ::1] predicted_mean = _zeros2(1, k)
    cdef double[:, :, ::1] predicted_cov = _zeros3(1, k, k)
    cdef double[:, ::1] filled_gain = _zeros2(max(p, 1), k)
    cdef double[::1] product = zeros_1d(
        max(kk * max(kk, k, p, view.n_ctrl), n_entries * (kk + k)))
    cdef double[::1] filtered_mean = zeros_1d(k)
    cdef double[:, ::1] filtered_cov = _zeros2(k, k)
    cdef double[::1] constant = zeros_1d(n_entries)
    cdef double[:, ::1] linear = _zeros2(n_entries, k)
    cdef double[:, :, ::1] quadratic = _zeros3(n_entries, k, k)
    cdef double[::1] added_constant = zeros_1d(n_entries)
    cdef double[:, ::1] added_linear = _zeros2(n_entries, k)
    cdef double[:, :, ::1] added_quadratic = _zeros3(n_entries, k, k)
    cdef Py_ssize_t x_stride = X.strides[0] // sizeof(double)
    cdef Py_ssize_t u_stride = controls.strides[0] // sizeof(double)
    cdef Py_ssize_t s, t, first, stop
    cdef const double* u
    cdef double value, total
    cdef Coefficients carried, added
    cdef Py_ssize_t n_carried = n_entries
    cdef const Py_ssize_t* chosen = NULL
    if selected is not None:
        n_carried = selected.shape[0]
        for s in range(n_carried):
            if selected[s] < 0 or selected[s] >= n_entries:
                raise ValueError(f"selected must hold moment indices below {n_entries}.")
        if n_carried > 0:
            chosen = &selected[0]
    if values.shape[1] != n_carried:
        raise ValueError(f"values must have {n_carried} columns, got {values.shape[1]}.")
    carried.constant = &constant[0]
    carried.linear = &linear[0, 0]
    carried.quadratic = &quadratic[0, 0, 0]
    added.constant = &added_constant[0]
    added.linear = &added_linear[0, 0]
    added.quadratic = &added_quadratic[0, 0, 0]
    with nogil:
        for s in range(n_sequences):
            first = offsets[s]
            stop = offsets[s + 1]
            total = 0.0
            for t in range(first, stop):
                _zero(added.constant, n_entries)
                _zero(added.linear, n_entries * k)
                _zero(added.quadratic, n_entries * kk)
                if t == first:  # a fresh message
                    _zero(carried.constant, n_entries)
                    _zero(carried.linear, n_entries * k)
                    _zero(carried.quadratic, n_entries * kk)
                u = _row_pointer(controls, t)
                value = _forward_smoothing(
                    view, &scratch.w, &layout, &X[t, 0], x_stride, u, u_stride, 1, t == first,
                    &filtered_mean[0], &filtered_cov[0, 0], &carried, &added, &means[0, 0],
                    &covs[0, 0, 0], &gains[0, 0, 0], &filled[0, 0], &predicted_mean[0, 0],
                    &predicted_cov[0, 0, 0], &filled_gain[0, 0], &product[0],
                    &log_predictive[t], t - first, n_carried, chosen)
                total += value
                if isnan(value):
                    break
                _copy(&filtered_mean[0], &filtered_means[t, 0], k)
                _message_moments(&carried, n_carried, &filtered_mean[0], &filtered_cov[0, 0],
                                 &values[t, 0], &seconds[t, 0, 0], k)
            sequence_log_likelihood[s] = total
