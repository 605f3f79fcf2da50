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


cdef class _DiffuseScratch:
    """Owns the memory of one DiffuseWork."""

    cdef object doubles
    cdef DiffuseWork d

    def __cinit__(self, Py_ssize_t k, Py_ssize_t p):
        cdef double[::1] doubles = zeros_1d(max(p * k + 2 * p + 2 * k + 2 * k * k, 1))
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
        double* log_predictive, Py_ssize_t* n_diffuse) noexcept nogil:
    """The exact diffuse filter over the rows of one sequence (every row kept).

    ``cov_inf_predicted`` receives P_inf of each row (zero from the first
    non-diffuse row on), ``n_diffuse`` the number of diffuse rows.  Returns
    the diffuse log-likelihood (NaN on a numerical failure).
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
