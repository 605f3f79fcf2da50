# The exact diffuse filter of _kalman.pyx (Koopman's exact diffuse
# initialisation).  Included by _kalman.pyx (``include "_kalman_diffuse.pxi"``),
# whose model and workspace structs, prediction, ordinary filter and _linalg
# routines it uses.
#
# The first state is z_1 ~ N(mu0, P_* + kappa P_inf) with kappa -> infinity
# (doc/user_guide/lgssm.rst, "Exact diffuse initialisation").  While the
# predicted P_inf of a row is not zero, the row is a diffuse row: its observed
# entries are made uncorrelated by the LDL^T factorisation of their noise
# covariance (R_oo = L D L^T, L unit lower triangular: y = L^-1 (x_o - d_o),
# Z = L^-1 H_o, noise variances D, a transformation of Jacobian 1) and enter
# one at a time with the exact limits of the Kalman recursions:
#
#     v = y_i - Z_i a,  M_* = P_* Z_i^T,  M_inf = P_inf Z_i^T,
#     F_* = Z_i M_* + D_i,  F_inf = Z_i M_inf;
#     F_inf > 0:  a += M_inf v / F_inf,
#                 P_* += M_inf M_inf^T F_* / F_inf^2 - (M_* M_inf^T + M_inf M_*^T) / F_inf,
#                 P_inf -= M_inf M_inf^T / F_inf,  log-likelihood -= log(2 pi F_inf) / 2;
#     F_inf = 0:  the ordinary scalar update with (M_*, F_*), P_inf unchanged.
#
# The prediction carries P_inf <- F P_inf F^T beside the ordinary one.  The
# first row whose predicted P_inf is zero (squared Frobenius norm at most
# DIFFUSE_TOLERANCE, statsmodels' rule and tolerance) and every later row are
# filtered by the ordinary multivariate filter.

cdef double DIFFUSE_TOLERANCE = 1e-10


def diffuse_tolerance():
    """The tolerance of the exact diffuse filter (statsmodels' ``tolerance_diffuse``)."""
    return DIFFUSE_TOLERANCE


cdef struct DiffuseWork:
    double* z            # p x k: the transformed observed rows L^-1 H_o
    double* y            # p: the transformed observations L^-1 (x_o - d_o)
    double* variance     # p: D, the transformed noise variances
    double* m_star       # k: P_* Z_i^T
    double* m_inf        # k: P_inf Z_i^T
    double* fp_inf       # k x k: F P_inf
    double* cov_inf      # k x k: the running P_inf of a diffuse row
    # the smoother's step from a diffuse row (r = rank of its filtered P_inf)
    double* factor_t     # k x k: B^T (r x k), P_inf = B B^T
    double* pivot_work   # k x k: the residual of the pivoted factorisation
    double* solved_c     # k x k: P^-1 C (k x r), C = F B
    double* gram         # k x k: G = C^T P^-1 C (r x r), then its Cholesky factor
    double* excess       # k x k: E = B^T - C^T P^-1 F P_* (r x k), then U_G^-T E
    double* gain_part    # k x k: G^-1 E (r x k)


cdef class _DiffuseScratch:
    """Owns the memory of one DiffuseWork."""

    cdef object doubles
    cdef DiffuseWork d

    def __cinit__(self, Py_ssize_t k, Py_ssize_t p):
        cdef double[::1] doubles = zeros_1d(max(p * k + 2 * p + 2 * k + 8 * k * k, 1))
        cdef double* buffer = &doubles[0]
        self.doubles = doubles
        self.d.z = buffer
        buffer += p * k
        self.d.y = buffer
        buffer += p
        self.d.variance = buffer
        buffer += p
        self.d.m_star = buffer
        buffer += k
        self.d.m_inf = buffer
        buffer += k
        self.d.fp_inf = buffer
        buffer += k * k
        self.d.cov_inf = buffer
        buffer += k * k
        self.d.factor_t = buffer
        buffer += k * k
        self.d.pivot_work = buffer
        buffer += k * k
        self.d.solved_c = buffer
        buffer += k * k
        self.d.gram = buffer
        buffer += k * k
        self.d.excess = buffer
        buffer += k * k
        self.d.gain_part = buffer


cdef inline double _frobenius_squared(const double* a, Py_ssize_t size) noexcept nogil:
    cdef Py_ssize_t i
    cdef double total = 0.0
    for i in range(size):
        total += a[i] * a[i]
    return total


cdef Py_ssize_t _diffuse_transform(const ModelView* model, Workspace* w, DiffuseWork* d,
                                   const double* x) noexcept nogil:
    """The observed entries of x made uncorrelated (the LDL^T transform above).

    Fills ``d.z`` (q x k), ``d.y`` and ``d.variance`` (q) and ``w.observed``;
    returns q, the number of observed entries, or -1 when R_oo is not
    positive definite.
    """
    cdef Py_ssize_t k = model.n_state
    cdef Py_ssize_t p = model.n_obs
    cdef Py_ssize_t q = 0
    cdef Py_ssize_t a, c, j, row
    cdef double scale
    for j in range(p):
        if not isnan(x[j]):
            w.observed[q] = j
            q += 1
    if q == 0:
        return 0
    for a in range(q):
        row = w.observed[a]
        d.y[a] = x[row] - model.observation_offset[row]
        for j in range(k):
            d.z[a * k + j] = model.observation[row * k + j]
        for c in range(q):
            w.r_obs[a * q + c] = model.observation_cov[row * p + w.observed[c]]
    # R_oo = U^T U; L = U^T diag(U)^-1 and D = diag(U)^2, so L^-1 = diag(U) U^-T.
    if _cholesky(w.r_obs, q) != 0:
        return -1
    _solve_upper_transpose(w.r_obs, d.y, q, 1)
    _solve_upper_transpose(w.r_obs, d.z, q, k)
    for a in range(q):
        scale = w.r_obs[a * q + a]
        d.variance[a] = scale * scale
        d.y[a] *= scale
        for j in range(k):
            d.z[a * k + j] *= scale
    return q


cdef double _update_diffuse(const ModelView* model, Workspace* w, DiffuseWork* d,
                            const double* x, double* mean, double* cov,
                            double* cov_inf) noexcept nogil:
    """Condition a diffuse row's state (mean, P_*, P_inf), in place, on its observed entries.

    Returns the row's contribution to the diffuse log-likelihood (0 when
    nothing is observed, NaN when R_oo is not positive definite).
    """
    cdef Py_ssize_t k = model.n_state
    cdef Py_ssize_t q = _diffuse_transform(model, w, d, x)
    cdef Py_ssize_t a, i, j
    cdef const double* z
    cdef double v, f_star, f_inf, ratio, log_likelihood = 0.0
    if q < 0:
        return NAN
    for a in range(q):
        z = d.z + a * k
        v = d.y[a]
        for j in range(k):
            v -= z[j] * mean[j]
        _matmul(cov, z, d.m_star, k, k, 1)
        _matmul(cov_inf, z, d.m_inf, k, k, 1)
        f_star = d.variance[a]
        f_inf = 0.0
        for j in range(k):
            f_star += z[j] * d.m_star[j]
            f_inf += z[j] * d.m_inf[j]
        if f_inf > DIFFUSE_TOLERANCE:
            ratio = f_star / (f_inf * f_inf)
            for i in range(k):
                mean[i] += d.m_inf[i] * v / f_inf
                for j in range(k):
                    cov[i * k + j] += (d.m_inf[i] * d.m_inf[j] * ratio
                                       - (d.m_star[i] * d.m_inf[j]
                                          + d.m_inf[i] * d.m_star[j]) / f_inf)
                    cov_inf[i * k + j] -= d.m_inf[i] * d.m_inf[j] / f_inf
            log_likelihood -= 0.5 * (LOG_2PI + log(f_inf))
        elif f_star > DIFFUSE_TOLERANCE:
            for i in range(k):
                mean[i] += d.m_star[i] * v / f_star
                for j in range(k):
                    cov[i * k + j] -= d.m_star[i] * d.m_star[j] / f_star
            log_likelihood -= 0.5 * (LOG_2PI + log(f_star) + v * v / f_star)
    return log_likelihood


cdef void _predict_diffuse(const ModelView* model, Workspace* w, DiffuseWork* d,
                           const double* mean, const double* cov, const double* cov_inf,
                           const double* control, double* mean_next, double* cov_next,
                           double* cov_inf_next) noexcept nogil:
    """The ordinary prediction of (mean, P_*) and P_inf <- F P_inf F^T."""
    cdef Py_ssize_t k = model.n_state
    _predict(model, w, mean, cov, control, mean_next, cov_next)
    _matmul(model.transition, cov_inf, d.fp_inf, k, k, k)
    _symmetric_product(d.fp_inf, model.transition, model.transition_t, cov_inf_next, k, k,
                       False)
    _mirror_upper(cov_inf_next, k)


cdef double _filter_sequence_diffuse(
        const ModelView* base, Workspace* w, DiffuseWork* d, const double* cov_inf_initial,
        const double* x, Py_ssize_t x_stride, const double* u, Py_ssize_t u_stride,
        Py_ssize_t n_rows, double* mean_predicted, double* cov_predicted,
        double* cov_inf_predicted, double* mean_filtered, double* cov_filtered,
        double* log_predictive, Py_ssize_t* n_diffuse,
        double* cov_inf_filtered=NULL) noexcept nogil:
    """The exact diffuse filter over the rows of one sequence (every row kept).

    ``cov_inf_predicted`` receives P_inf of each row (zero from the first
    non-diffuse row on), ``n_diffuse`` the number of diffuse rows, and
    ``cov_inf_filtered`` (unless NULL) the filtered P_inf of each diffuse
    row.  Returns the diffuse log-likelihood (NaN on a numerical failure).
    """
    cdef Py_ssize_t k = base.n_state
    cdef Py_ssize_t kk = k * k
    cdef Py_ssize_t t = 0, rest
    cdef double log_likelihood = 0.0, value
    cdef ModelView step
    cdef const ModelView* model
    cdef const double* control
    _zero(cov_inf_predicted, n_rows * kk)
    _copy(base.initial_mean, mean_predicted, k)
    _copy(base.initial_cov, cov_predicted, kk)
    _copy(cov_inf_initial, cov_inf_predicted, kk)
    while t < n_rows:
        # Row t: predicted with the transition of step t - 1, updated with the
        # observation of step t.
        model = _at_step(base, &step, t - 1 if t > 0 else 0, t)
        if t > 0:
            _predict_diffuse(model, w, d, mean_filtered + (t - 1) * k,
                             cov_filtered + (t - 1) * kk, d.cov_inf,
                             u + t * u_stride if u != NULL else NULL,
                             mean_predicted + t * k, cov_predicted + t * kk,
                             cov_inf_predicted + t * kk)
        if _frobenius_squared(cov_inf_predicted + t * kk, kk) <= DIFFUSE_TOLERANCE:
            _zero(cov_inf_predicted + t * kk, kk)
            break
        _copy(mean_predicted + t * k, mean_filtered + t * k, k)
        _copy(cov_predicted + t * kk, cov_filtered + t * kk, kk)
        _copy(cov_inf_predicted + t * kk, d.cov_inf, kk)
        value = _update_diffuse(model, w, d, x + t * x_stride, mean_filtered + t * k,
                                cov_filtered + t * kk, d.cov_inf)
        if cov_inf_filtered != NULL:
            _copy(d.cov_inf, cov_inf_filtered + t * kk, kk)
        log_predictive[t] = value
        log_likelihood += value
        if isnan(value):
            n_diffuse[0] = t + 1
            return NAN
        t += 1
    n_diffuse[0] = t
    if t == n_rows:
        return log_likelihood
    # The ordinary filter from the first non-diffuse row on.
    rest = n_rows - t
    value = _filter_sequence(
        base, w, x + t * x_stride, x_stride, u + t * u_stride if u != NULL else NULL,
        u_stride, rest, mean_predicted + t * k, cov_predicted + t * kk, -1,
        mean_filtered + t * k, cov_filtered + t * kk, -1, log_predictive + t,
        mean_filtered + (t - 1) * k if t > 0 else NULL,
        cov_filtered + (t - 1) * kk if t > 0 else NULL, t)
    return log_likelihood + value



# --------------------------------------------------------------------------
# The exact diffuse smoother: the RTS step from a diffuse row.
#
# Row t's filtered state is N(m, P_* + kappa B B^T); the prediction of row
# t + 1 is N(F m + ..., P + kappa C C^T) with P = F P_* F^T + Q and C = F B.
# As kappa -> infinity the smoother gain J = P_f F^T P_pred^-1 and the
# conditional covariance D = Cov(z_t | z_{t+1}, x_1..x_t) = P_f - J P_pred J^T
# have the exact limits (doc/user_guide/lgssm.rst, "The exact diffuse
# smoother"), with G = C^T P^-1 C and E = B^T - C^T P^-1 F P_*:
#
#     J^T = P^-1 F P_* + P^-1 C G^-1 E,      D = P_* - (F P_*)^T P^-1 F P_* + E^T G^-1 E,
#
# and the step is the RTS step with them: m += J (m_s(t+1) - m_pred(t+1)),
# P_s = D + J P_s(t+1) J^T, Cov(z_{t+1}, z_t | x) = P_s(t+1) J^T.  G is
# singular exactly when a diffuse direction of z_t reaches neither x_1..x_t
# nor z_{t+1}: the data then do not determine the state (step fails).
# --------------------------------------------------------------------------

cdef Py_ssize_t _pivoted_factor(const double* a, double* work, double* factor_t,
                                Py_ssize_t k) noexcept nogil:
    """B^T (r x k, rows in ``factor_t``) with a = B B^T for a symmetric PSD a.

    Pivoted outer-product Cholesky: stops when the largest remaining
    diagonal entry is at most DIFFUSE_TOLERANCE times max(1, the largest
    diagonal entry of a).  Returns the rank r.
    """
    cdef Py_ssize_t i, j, pivot, r = 0
    cdef double largest, first = 0.0, scale
    _copy(a, work, k * k)
    for i in range(k):
        if work[i * k + i] > first:
            first = work[i * k + i]
    first = max(first, 1.0)
    while r < k:
        pivot = 0
        largest = -1.0
        for i in range(k):
            if work[i * k + i] > largest:
                largest = work[i * k + i]
                pivot = i
        if largest <= DIFFUSE_TOLERANCE * first:
            break
        scale = 1.0 / sqrt(largest)
        for j in range(k):
            factor_t[r * k + j] = work[pivot * k + j] * scale
        for i in range(k):
            for j in range(k):
                work[i * k + j] -= factor_t[r * k + i] * factor_t[r * k + j]
        r += 1
    return r


cdef int _smooth_step_diffuse(const ModelView* model, Workspace* w, DiffuseWork* d,
                              double* mean, double* cov, const double* cov_inf,
                              const double* control_next, const double* mean_next,
                              const double* cov_next) noexcept nogil:
    """The smoother step of :func:`_smooth_step` from a diffuse row t (exact limits above).

    ``mean``, ``cov`` (P_*) and ``cov_inf`` are row t's filtered state; the
    smoothed mean and covariance replace ``mean`` and ``cov``, and
    Cov(z_{t+1}, z_t | x) goes to ``w.cross``.  Returns -1 when P or G is
    not positive definite.
    """
    cdef Py_ssize_t k = model.n_state
    cdef Py_ssize_t kk = k * k
    cdef Py_ssize_t r, i, j, l
    cdef double total
    _predict(model, w, mean, cov, control_next, w.next_mean, w.next_cov)  # w.fp = F P_*
    r = _pivoted_factor(cov_inf, d.pivot_work, d.factor_t, k)
    _copy(w.next_cov, w.chol, kk)
    if _cholesky(w.chol, k) != 0:
        return -1
    # J^T <- P^-1 F P_* (the ordinary gain)
    _copy(w.fp, w.smoother_gain_t, kk)
    _solve_upper_transpose(w.chol, w.smoother_gain_t, k, k)
    _solve_upper(w.chol, w.smoother_gain_t, k, k)
    # D <- P_* - (F P_*)^T P^-1 F P_*  (in w.joseph)
    _copy(cov, w.joseph, kk)
    for i in range(k):
        for j in range(k):
            total = 0.0
            for l in range(k):
                total += w.fp[l * k + i] * w.smoother_gain_t[l * k + j]
            w.joseph[i * k + j] -= total
    if r > 0:
        # C = F B (k x r) into solved_c, then P^-1 C
        for i in range(k):
            for j in range(r):
                total = 0.0
                for l in range(k):
                    total += model.transition[i * k + l] * d.factor_t[j * k + l]
                d.solved_c[i * r + j] = total
        # G = C^T P^-1 C, from the half-solve U^-T C (its squared columns)
        _solve_upper_transpose(w.chol, d.solved_c, k, r)
        for i in range(r):
            for j in range(r):
                total = 0.0
                for l in range(k):
                    total += d.solved_c[l * r + i] * d.solved_c[l * r + j]
                d.gram[i * r + j] = total
        _solve_upper(w.chol, d.solved_c, k, r)
        # E = B^T - (P^-1 C)^T F P_*  (r x k)
        for i in range(r):
            for j in range(k):
                total = d.factor_t[i * k + j]
                for l in range(k):
                    total -= d.solved_c[l * r + i] * w.fp[l * k + j]
                d.excess[i * k + j] = total
        if _cholesky(d.gram, r) != 0:
            return -1
        _solve_upper_transpose(d.gram, d.excess, r, k)  # U_G^-T E
        # D += E^T G^-1 E = (U_G^-T E)^T (U_G^-T E)
        for i in range(k):
            for j in range(k):
                total = 0.0
                for l in range(r):
                    total += d.excess[l * k + i] * d.excess[l * k + j]
                w.joseph[i * k + j] += total
        _copy(d.excess, d.gain_part, r * k)
        _solve_upper(d.gram, d.gain_part, r, k)  # G^-1 E
        # J^T += P^-1 C G^-1 E
        _matmul(d.solved_c, d.gain_part, w.smoother_gain_t, k, r, k, True)
    _transpose(w.smoother_gain_t, w.smoother_gain, k, k)
    # mean += J (mean_s(t+1) - mean_pred(t+1))
    for l in range(k):
        w.difference[l] = mean_next[l] - w.next_mean[l]
    for i in range(k):
        total = 0.0
        for l in range(k):
            total += w.smoother_gain[i * k + l] * w.difference[l]
        mean[i] += total
    # P_s = D + J P_s(t+1) J^T;  Cov(z_{t+1}, z_t | x) = P_s(t+1) J^T
    _matmul(w.smoother_gain, cov_next, w.jd, k, k, k)
    _copy(w.joseph, cov, kk)
    _symmetric_product(w.jd, w.smoother_gain, w.smoother_gain_t, cov, k, k, True)
    _mirror_upper(cov, k)
    _matmul(cov_next, w.smoother_gain_t, w.cross, k, k, k)
    return 0


def kalman_filter_diffuse(
    LinearGaussianModel model,
    const double[:, ::1] diffuse_cov,  # IN: P_inf
    const double[:, ::1] X,  # IN
    const double[:, ::1] controls,  # IN
    const Py_ssize_t[::1] offsets,  # IN
    double[:, ::1] predicted_mean,  # OUT
    double[:, :, ::1] predicted_cov,  # OUT: P_*
    double[:, :, ::1] predicted_diffuse_cov,  # OUT: P_inf
    double[:, ::1] filtered_mean,  # OUT
    double[:, :, ::1] filtered_cov,  # OUT
    double[::1] log_predictive,  # OUT
    double[::1] sequence_log_likelihood,  # OUT
    Py_ssize_t[::1] n_diffuse,  # OUT: the diffuse rows of each sequence
):
    """The exact diffuse Kalman filter, keeping every row's states.

    The model's initial covariance is P_*, ``diffuse_cov`` is P_inf.  The
    filtered covariance of a diffuse row is its P_* part (its P_inf part is
    the next row's predicted one, mapped back through F).  A sequence whose
    filter fails numerically gets log-likelihood NaN.
    """
    cdef ModelView* view = &model.view
    cdef Py_ssize_t k = view.n_state
    cdef _Scratch scratch = _Scratch(k, view.n_obs)
    cdef _DiffuseScratch diffuse = _DiffuseScratch(k, view.n_obs)
    cdef Py_ssize_t n_sequences = offsets.shape[0] - 1
    cdef Py_ssize_t s, first, stop
    cdef Py_ssize_t u_stride = controls.strides[0] // sizeof(double)
    with nogil:
        for s in range(n_sequences):
            first = offsets[s]
            stop = offsets[s + 1]
            n_diffuse[s] = 0
            if stop == first:
                sequence_log_likelihood[s] = 0.0
                continue
            sequence_log_likelihood[s] = _filter_sequence_diffuse(
                view, &scratch.w, &diffuse.d, &diffuse_cov[0, 0], &X[first, 0],
                X.strides[0] // sizeof(double), _row_pointer(controls, first), u_stride,
                stop - first, &predicted_mean[first, 0], &predicted_cov[first, 0, 0],
                &predicted_diffuse_cov[first, 0, 0], &filtered_mean[first, 0],
                &filtered_cov[first, 0, 0], &log_predictive[first], &n_diffuse[s])


def kalman_smoother_diffuse(
    LinearGaussianModel model,
    const double[:, ::1] diffuse_cov,  # IN: P_inf
    const double[:, ::1] X,  # IN
    const double[:, ::1] controls,  # IN
    const Py_ssize_t[::1] offsets,  # IN
    double[:, ::1] smoothed_mean,  # OUT
    double[:, :, ::1] smoothed_cov,  # OUT
    double[:, :, ::1] cross_cov,  # OUT
    double[::1] log_predictive,  # OUT
    double[::1] sequence_log_likelihood,  # OUT
    Py_ssize_t[::1] n_diffuse,  # OUT
):
    """The exact diffuse smoother: :func:`kalman_smoother`'s outputs under the exact
    diffuse initial state (the model's initial covariance is P_*, ``diffuse_cov`` P_inf).

    A sequence whose last row is still diffuse after its update (its state
    not determined by the data), or whose smoother fails numerically, gets
    log-likelihood NaN.
    """
    cdef ModelView* view = &model.view
    cdef Py_ssize_t k = view.n_state
    cdef Py_ssize_t kk = k * k
    cdef _Scratch scratch = _Scratch(k, view.n_obs)
    cdef _DiffuseScratch diffuse = _DiffuseScratch(k, view.n_obs)
    cdef Py_ssize_t n_sequences = offsets.shape[0] - 1
    cdef Py_ssize_t longest = _longest(offsets)
    cdef Py_ssize_t s, t, first, stop, n_rows, status
    cdef Py_ssize_t u_stride = controls.strides[0] // sizeof(double)
    cdef double[:, ::1] predicted_mean = _zeros2(max(longest, 1), k)
    cdef double[:, :, ::1] predicted_cov = _zeros3(max(longest, 1), k, k)
    cdef double[:, :, ::1] predicted_inf = _zeros3(max(longest, 1), k, k)
    cdef double[:, :, ::1] filtered_inf = _zeros3(max(longest, 1), k, k)
    cdef double* cov_base
    cdef const double* u
    cdef const double* control
    cdef ModelView step
    cdef const ModelView* at
    with nogil:
        for s in range(n_sequences):
            first = offsets[s]
            stop = offsets[s + 1]
            n_rows = stop - first
            n_diffuse[s] = 0
            if n_rows == 0:
                sequence_log_likelihood[s] = 0.0
                continue
            cov_base = &smoothed_cov[first, 0, 0]
            u = _row_pointer(controls, first)
            sequence_log_likelihood[s] = _filter_sequence_diffuse(
                view, &scratch.w, &diffuse.d, &diffuse_cov[0, 0], &X[first, 0],
                X.strides[0] // sizeof(double), u, u_stride, n_rows, &predicted_mean[0, 0],
                &predicted_cov[0, 0, 0], &predicted_inf[0, 0, 0], &smoothed_mean[first, 0],
                cov_base, &log_predictive[first], &n_diffuse[s], &filtered_inf[0, 0, 0])
            if isnan(sequence_log_likelihood[s]):
                continue
            for t in range(kk):
                (&cross_cov[first, 0, 0])[t] = 0.0
            if (n_diffuse[s] == n_rows
                    and _frobenius_squared(&filtered_inf[n_rows - 1, 0, 0], kk)
                    > DIFFUSE_TOLERANCE):
                sequence_log_likelihood[s] = NAN  # the last state is not determined
                continue
            for t in range(n_rows - 2, -1, -1):
                # Row t + 1 is predicted from row t with the transition of step t.
                at = _at_step(view, &step, t, t)
                control = u + (t + 1) * u_stride if u != NULL else NULL
                if (t < n_diffuse[s]
                        and _frobenius_squared(&filtered_inf[t, 0, 0], kk) > DIFFUSE_TOLERANCE):
                    status = _smooth_step_diffuse(
                        at, &scratch.w, &diffuse.d, &smoothed_mean[first + t, 0],
                        cov_base + t * kk, &filtered_inf[t, 0, 0], control,
                        &smoothed_mean[first + t + 1, 0], cov_base + (t + 1) * kk)
                else:
                    status = _smooth_step(
                        at, &scratch.w, &smoothed_mean[first + t, 0], cov_base + t * kk,
                        control, &smoothed_mean[first + t + 1, 0], cov_base + (t + 1) * kk,
                        True)
                if status != 0:
                    sequence_log_likelihood[s] = NAN
                    break
                _copy(scratch.w.cross, &cross_cov[first + t + 1, 0, 0], kk)


def em_statistics_diffuse(
    LinearGaussianModel model,
    const double[:, ::1] diffuse_cov,  # IN: P_inf
    const double[:, ::1] X,  # IN
    const double[:, ::1] controls,  # IN
    const Py_ssize_t[::1] offsets,  # IN
    double[::1] initial_sum,  # INOUT
    double[:, ::1] initial_outer,  # INOUT
    double[:, ::1] transition_regressor,  # INOUT
    double[:, ::1] transition_cross,  # INOUT
    double[:, ::1] transition_target,  # INOUT
    double[:, ::1] observation_regressor,  # INOUT
    double[:, ::1] observation_cross,  # INOUT
    double[:, ::1] observation_target,  # INOUT
    double[::1] n_sequences_seen,  # INOUT
    double[::1] sequence_log_likelihood,  # OUT
):
    """:func:`em_statistics` under the exact diffuse initial state: the smoothed
    moments are the exact diffuse smoother's, the log-likelihood the diffuse one."""
    cdef ModelView* view = &model.view
    cdef Py_ssize_t k = view.n_state
    cdef _Scratch scratch = _Scratch(k, view.n_obs)
    cdef _DiffuseScratch diffuse = _DiffuseScratch(k, view.n_obs)
    cdef Workspace* w = &scratch.w
    cdef Py_ssize_t n_sequences = offsets.shape[0] - 1
    cdef Py_ssize_t longest = max(_longest(offsets), 1)
    cdef Py_ssize_t s, first, stop, n_rows, n_diffuse = 0
    cdef Py_ssize_t x_stride = X.strides[0] // sizeof(double)
    cdef Py_ssize_t u_stride = controls.strides[0] // sizeof(double)
    cdef const double* x
    cdef const double* u
    cdef double[:, ::1] predicted_mean = _zeros2(longest, k)
    cdef double[:, :, ::1] predicted_cov = _zeros3(longest, k, k)
    cdef double[:, :, ::1] predicted_inf = _zeros3(longest, k, k)
    cdef double[:, :, ::1] filtered_inf = _zeros3(longest, k, k)
    cdef double[:, ::1] mean = _zeros2(longest, k)
    cdef double[:, :, ::1] cov = _zeros3(longest, k, k)
    cdef double[::1] log_predictive = zeros_1d(longest)
    cdef Statistics stats
    stats.initial_sum = &initial_sum[0]
    stats.initial_outer = &initial_outer[0, 0]
    stats.transition_regressor = &transition_regressor[0, 0]
    stats.transition_cross = &transition_cross[0, 0]
    stats.transition_target = &transition_target[0, 0]
    stats.observation_regressor = &observation_regressor[0, 0]
    stats.observation_cross = &observation_cross[0, 0]
    stats.observation_target = &observation_target[0, 0]
    stats.n_sequences = &n_sequences_seen[0]
    with nogil:
        for s in range(n_sequences):
            first = offsets[s]
            stop = offsets[s + 1]
            n_rows = stop - first
            if n_rows == 0:
                sequence_log_likelihood[s] = 0.0
                continue
            x = &X[first, 0]
            u = _row_pointer(controls, first)
            sequence_log_likelihood[s] = _filter_sequence_diffuse(
                view, w, &diffuse.d, &diffuse_cov[0, 0], x, x_stride, u, u_stride, n_rows,
                &predicted_mean[0, 0], &predicted_cov[0, 0, 0], &predicted_inf[0, 0, 0],
                &mean[0, 0], &cov[0, 0, 0], &log_predictive[0], &n_diffuse,
                &filtered_inf[0, 0, 0])
            if isnan(sequence_log_likelihood[s]):
                continue
            if _smooth_and_accumulate(view, w, &stats, x, x_stride, u, u_stride, n_rows,
                                      &mean[0, 0], &cov[0, 0, 0], &diffuse.d,
                                      &filtered_inf[0, 0, 0], n_diffuse) != 0:
                sequence_log_likelihood[s] = NAN
