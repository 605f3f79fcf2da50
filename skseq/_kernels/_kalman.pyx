# cython: language_level=3
"""Linear-Gaussian state-space kernels: Kalman filter, RTS smoother, EM statistics.

Pure numeric code.  Nothing here validates its inputs: the callers in
:mod:`skseq.inference.kalman` does.  The model (see doc/user_guide/lgssm.rst,
"The model"; the filter, the smoother, the EM statistics and the forward-only
smoothing of the streams are derived there)
is

    z_1 ~ N(mu0, Sigma0)
    z_t = F z_{t-1} + G u_t + b + w_t,    w_t ~ N(0, Q)
    x_t = H z_t + d + v_t,                v_t ~ N(0, R)

with ``k`` states, ``p`` observed features and ``m`` control inputs (the
control of the first row of each sequence is unused).  Every function works on
the rows of several sequences concatenated, split by ``offsets`` (sequence
``s`` is rows ``offsets[s]:offsets[s + 1]``), and releases the GIL for the
whole computation, so threads can run it on disjoint groups of sequences.
The dense linear algebra the steps are made of is in ``_linalg.pxd``; the
stream smoother (forward-only smoothing of the EM statistics over chunks) is
in ``_kalman_stream.pxi``, included in this module.

Numerics
--------
* The filter update uses the Joseph form
  ``P = (I - K H) P (I - K H)^T + K R K^T``, which stays symmetric positive
  semi-definite under rounding.
* Every inverse is a Cholesky solve (of the innovation covariance ``S`` in the
  filter, of the predicted covariance in the smoother); no matrix is inverted.
* A NaN entry of ``x_t`` is missing: the update uses the observed entries
  only (the observed rows of ``H`` and ``d``, the observed block of ``R``),
  which is the exact conditional; a row with no observed entry is a pure
  prediction and contributes 0 to the log-likelihood.
* A Cholesky factorisation that fails (a covariance that is not positive
  definite in floating point) makes the sequence's log-likelihood NaN; the
  callers turn that into an error.

Inside the per-sequence cores the matrices are addressed through raw
row-major pointers (``a[i * n + j]``).  The per-step cost is
O(k^3 + k^2 p + k p^2 + p^3):

* Small products run in hand-written loops (no call overhead); large ones go
  to BLAS ``dgemm`` (``_blas._gemm``), always as the row-major product
  ``A @ B`` (BLAS "NN"), which OpenBLAS runs 2-3x faster than "TN" for small
  matrices; that is why the transposes F^T, H^T, H_o^T, K^T, J^T are kept.
  Triangular solves and Cholesky factorisations switch to ``dtrsm`` /
  ``dpotrf`` only for larger sizes (the thresholds of ``_linalg``, where
  these dense routines live).
* The smoother recomputes the prediction of row t+1 from the filtered state
  of row t (with the filter's own code) instead of storing every predicted
  covariance and reading it back: one extra product per row costs less than
  the memory traffic, and F P_f(t) comes out of it for the smoother gain.
"""

from libc.math cimport NAN, isnan, log, sqrt

from ._blas cimport GEMM_PIECE_WORK
# The shared helpers under the names this module has always used for them.
from ._common cimport longest_sequence as _longest
from ._common cimport zeros_1d, zeros_intp_1d
from ._common cimport zeros_2d as _zeros2
from ._common cimport zeros_3d as _zeros3
from ._linalg cimport (
    DEFAULT_GEMM_MIN_WORK,
    DEFAULT_POTRF_MIN_WORK,
    DEFAULT_TRSM_MIN_WORK,
    GEMM_MIN_WORK,
    POTRF_MIN_WORK,
    TRSM_MIN_WORK,
    _add_outer,
    _add_scaled,
    _add_transposed_product,
    _cholesky,
    _copy,
    _matmul,
    _mirror_upper,
    _solve_upper,
    _solve_upper_transpose,
    _symmetric_product,
    _transpose,
    _zero,
    set_min_work,
)

cimport numpy as cnp

cnp.import_array()  # numpy's C API, for the scratch allocators of _common

cdef double LOG_2PI = 1.8378770664093453

# The thresholds from which products, solves and factorisations go to BLAS /
# LAPACK are those of _linalg (thread-local; measured there).


def default_blas_min_work():
    """The default thresholds ``(gemm, trsm, potrf)``, in multiply-adds."""
    return (DEFAULT_GEMM_MIN_WORK, DEFAULT_TRSM_MIN_WORK, DEFAULT_POTRF_MIN_WORK)


def blas_min_work():
    """The thresholds ``(gemm, trsm, potrf)`` in force in the calling thread."""
    return (GEMM_MIN_WORK, TRSM_MIN_WORK, POTRF_MIN_WORK)


def set_blas_min_work(Py_ssize_t gemm, Py_ssize_t trsm, Py_ssize_t potrf):
    """Set, for the calling thread only, the sizes (multiply-adds) from which
    products, solves and factorisations use BLAS.

    Returns the previous three values.  For measuring the crossover between
    the hand loops and BLAS: 0 sends everything to BLAS, a huge value nothing.
    Kernels running in other threads keep their own thresholds.
    """
    old = (GEMM_MIN_WORK, TRSM_MIN_WORK, POTRF_MIN_WORK)
    set_min_work(gemm, trsm, potrf)
    return old


# --------------------------------------------------------------------------
# The model and the scratch space, as plain C structs.
# --------------------------------------------------------------------------

cdef struct ModelView:
    Py_ssize_t n_state
    Py_ssize_t n_obs
    Py_ssize_t n_ctrl
    const double* transition          # F, k x k
    const double* transition_t        # F^T, k x k
    const double* observation         # H, p x k
    const double* observation_t       # H^T, k x p
    const double* transition_cov      # Q, k x k
    const double* observation_cov     # R, p x p
    const double* transition_offset   # b, k
    const double* observation_offset  # d, p
    const double* initial_mean        # mu0, k
    const double* initial_cov         # Sigma0, k x k
    const double* control             # G, k x m (NULL when m == 0)
    # Time-varying systems (pykalman's leading time axis): the number of
    # doubles from one step's array to the next, 0 for a constant one.  Row t
    # of a sequence is predicted with the transition arrays of step t - 1 and
    # updated with the observation arrays of step t (:func:`_at_step`).
    bint varying                      # whether any step below is nonzero
    Py_ssize_t transition_step        # F and F^T
    Py_ssize_t transition_cov_step    # Q
    Py_ssize_t transition_offset_step # b
    Py_ssize_t observation_step       # H and H^T
    Py_ssize_t observation_cov_step   # R
    Py_ssize_t observation_offset_step  # d


cdef inline Py_ssize_t _step_size(object array, int constant_ndim):
    """Doubles per time step of ``array``: 0 without a leading time axis."""
    return array[0].size if array.ndim > constant_ndim else 0


cdef class LinearGaussianModel:
    """The parameters of a linear-Gaussian state-space model, held for the kernels.

    All arrays must be float64, C-contiguous, with consistent shapes and
    symmetric covariances; nothing is checked here.  ``control_matrix`` has
    shape (n_state, n_controls), possibly with zero columns.  The transition
    matrix, covariance and offset, and the observation matrix, covariance and
    offset, may each have a leading time axis (pykalman's time-varying
    system: one more dimension than the constant array); the callers check
    that it is long enough for every sequence.
    """

    cdef readonly object arrays
    cdef ModelView view

    def __cinit__(self, transition_matrix, observation_matrix, transition_covariance,
                  observation_covariance, transition_offset, observation_offset,
                  initial_state_mean, initial_state_covariance, control_matrix):
        # The products run as row-major A @ B (BLAS "NN", much faster than
        # "NT" for small matrices), so keep the transposes of F and H too.
        transition_transposed = transition_matrix.swapaxes(-1, -2).copy()  # C order
        observation_transposed = observation_matrix.swapaxes(-1, -2).copy()
        # Every array seen flat: a time-varying one is addressed by its step.
        cdef const double[::1] transition = transition_matrix.reshape(-1)
        cdef const double[::1] observation = observation_matrix.reshape(-1)
        cdef const double[::1] transition_cov = transition_covariance.reshape(-1)
        cdef const double[::1] observation_cov = observation_covariance.reshape(-1)
        cdef const double[::1] transition_off = transition_offset.reshape(-1)
        cdef const double[::1] observation_off = observation_offset.reshape(-1)
        cdef const double[::1] initial_mean = initial_state_mean
        cdef const double[:, ::1] initial_cov = initial_state_covariance
        cdef const double[:, ::1] control = control_matrix
        cdef const double[::1] transition_t = transition_transposed.reshape(-1)
        cdef const double[::1] observation_t = observation_transposed.reshape(-1)
        self.arrays = (transition_matrix, observation_matrix, transition_covariance,
                       observation_covariance, transition_offset, observation_offset,
                       initial_state_mean, initial_state_covariance, control_matrix,
                       transition_transposed, observation_transposed)
        self.view.n_state = transition_matrix.shape[transition_matrix.ndim - 1]
        self.view.n_obs = observation_matrix.shape[observation_matrix.ndim - 2]
        self.view.n_ctrl = control.shape[1]
        self.view.transition = &transition[0]
        self.view.transition_t = &transition_t[0]
        self.view.observation = &observation[0]
        self.view.observation_t = &observation_t[0]
        self.view.transition_cov = &transition_cov[0]
        self.view.observation_cov = &observation_cov[0]
        self.view.transition_offset = &transition_off[0]
        self.view.observation_offset = &observation_off[0]
        self.view.initial_mean = &initial_mean[0]
        self.view.initial_cov = &initial_cov[0, 0]
        self.view.control = &control[0, 0] if self.view.n_ctrl > 0 else NULL
        self.view.transition_step = _step_size(transition_matrix, 2)
        self.view.transition_cov_step = _step_size(transition_covariance, 2)
        self.view.transition_offset_step = _step_size(transition_offset, 1)
        self.view.observation_step = _step_size(observation_matrix, 2)
        self.view.observation_cov_step = _step_size(observation_covariance, 2)
        self.view.observation_offset_step = _step_size(observation_offset, 1)
        self.view.varying = (
            self.view.transition_step != 0 or self.view.transition_cov_step != 0
            or self.view.transition_offset_step != 0 or self.view.observation_step != 0
            or self.view.observation_cov_step != 0 or self.view.observation_offset_step != 0)

    @property
    def varying(self):
        """Whether an array has a time axis (a time-varying system)."""
        return bool(self.view.varying)

    @property
    def n_state(self):
        return self.view.n_state

    @property
    def n_obs(self):
        return self.view.n_obs

    @property
    def n_ctrl(self):
        return self.view.n_ctrl


cdef struct Workspace:
    # filter update
    Py_ssize_t* observed     # p: indices of the observed entries of the row
    Py_ssize_t* missing      # p: indices of the missing entries
    double* h_obs            # p x k: observed rows of H
    double* h_obs_t          # k x p: their transpose
    double* r_obs            # p x p: observed block of R
    double* residual         # p: x_o - H_o mean - d_o, then S^-1 residual
    double* hp               # p x k: H_o P
    double* innovation       # p x p: S = H_o P H_o^T + R_o, then its Cholesky factor
    double* gain_t           # p x k: S^-1 H_o P = K^T
    double* gain             # k x p: K
    double* joseph           # k x k: I - K H_o
    double* joseph_t         # k x k: its transpose
    double* joseph_p         # k x k: (I - K H_o) P
    double* gain_r           # k x p: K R_o
    # prediction and smoother
    double* fp               # k x k: F P
    double* chol             # k x k: Cholesky factor of the predicted covariance
    double* smoother_gain_t  # k x k: J^T
    double* smoother_gain    # k x k: J
    double* jd               # k x k: J (P_s - P_pred)
    double* cross            # k x k: Cov(z_{t+1}, z_t | x)
    double* difference       # k
    double* next_mean        # k: the prediction of row t+1, recomputed by the smoother
    double* next_cov         # k x k
    # EM: the conditional distribution of the missing entries of a row
    double* r_solve          # p x p: R_oo^-1 R_om
    double* a_mis            # p x k: H_m - (R_oo^-1 R_om)^T H_o
    double* c_mis            # p: d_m + (R_oo^-1 R_om)^T (x_o - d_o)
    double* r_mis            # p x p: R_mm - R_mo R_oo^-1 R_om
    double* ap_mis           # p x k: A_mis P
    double* x_filled         # p: E[x_t | data]


cdef Py_ssize_t _workspace_size(Py_ssize_t k, Py_ssize_t p) noexcept nogil:
    return 8 * p * k + 5 * p * p + 4 * p + 10 * k * k + 2 * k * p + 2 * k


cdef void _bind_workspace(Workspace* w, double* buffer, Py_ssize_t* indices,
                          Py_ssize_t k, Py_ssize_t p) noexcept nogil:
    w.observed = indices
    w.missing = indices + p
    w.h_obs = buffer
    buffer += p * k
    w.h_obs_t = buffer
    buffer += p * k
    w.r_obs = buffer
    buffer += p * p
    w.residual = buffer
    buffer += p
    w.hp = buffer
    buffer += p * k
    w.innovation = buffer
    buffer += p * p
    w.gain_t = buffer
    buffer += p * k
    w.gain = buffer
    buffer += k * p
    w.joseph = buffer
    buffer += k * k
    w.joseph_t = buffer
    buffer += k * k
    w.joseph_p = buffer
    buffer += k * k
    w.gain_r = buffer
    buffer += k * p
    w.fp = buffer
    buffer += k * k
    w.chol = buffer
    buffer += k * k
    w.smoother_gain_t = buffer
    buffer += k * k
    w.smoother_gain = buffer
    buffer += k * k
    w.jd = buffer
    buffer += k * k
    w.cross = buffer
    buffer += k * k
    w.difference = buffer
    buffer += k
    w.next_mean = buffer
    buffer += k
    w.next_cov = buffer
    buffer += k * k
    w.r_solve = buffer
    buffer += p * p
    w.a_mis = buffer
    buffer += p * k
    w.c_mis = buffer
    buffer += p
    w.r_mis = buffer
    buffer += p * p
    w.ap_mis = buffer
    buffer += p * k
    w.x_filled = buffer
    buffer += p


cdef class _Scratch:
    """Owns the memory of one Workspace (allocated with the GIL, used without)."""

    cdef object doubles
    cdef object indices
    cdef Workspace w

    def __cinit__(self, Py_ssize_t n_state, Py_ssize_t n_obs):
        cdef double[::1] doubles = zeros_1d(max(_workspace_size(n_state, n_obs), 1))
        cdef Py_ssize_t[::1] indices = zeros_intp_1d(max(2 * n_obs, 1))
        self.doubles = doubles
        self.indices = indices
        _bind_workspace(&self.w, &doubles[0], &indices[0], n_state, n_obs)


# --------------------------------------------------------------------------
# One filter step: prediction and (Joseph-form) update.
# --------------------------------------------------------------------------

cdef inline const ModelView* _at_step(const ModelView* model, ModelView* step,
                                      Py_ssize_t transition_time,
                                      Py_ssize_t observation_time) noexcept nogil:
    """The model of one time step: ``model`` itself when nothing varies (the
    constant path, no copy); else ``step`` filled with the arrays of
    transition step ``transition_time`` and observation step ``observation_time``."""
    if not model.varying:
        return model
    step[0] = model[0]
    step.transition = model.transition + transition_time * model.transition_step
    step.transition_t = model.transition_t + transition_time * model.transition_step
    step.transition_cov = model.transition_cov + transition_time * model.transition_cov_step
    step.transition_offset = (
        model.transition_offset + transition_time * model.transition_offset_step)
    step.observation = model.observation + observation_time * model.observation_step
    step.observation_t = model.observation_t + observation_time * model.observation_step
    step.observation_cov = model.observation_cov + observation_time * model.observation_cov_step
    step.observation_offset = (
        model.observation_offset + observation_time * model.observation_offset_step)
    return step


cdef void _predict(const ModelView* model, Workspace* w, const double* mean_previous,
                   const double* cov_previous, const double* control,
                   double* mean_predicted, double* cov_predicted) noexcept nogil:
    """mean = F mean + G u + b;  cov = F cov F^T + Q."""
    cdef Py_ssize_t k = model.n_state
    cdef Py_ssize_t n_ctrl = model.n_ctrl
    cdef Py_ssize_t i, j
    cdef double total
    for i in range(k):
        total = model.transition_offset[i]
        for j in range(k):
            total += model.transition[i * k + j] * mean_previous[j]
        for j in range(n_ctrl):
            total += model.control[i * n_ctrl + j] * control[j]
        mean_predicted[i] = total
    _matmul(model.transition, cov_previous, w.fp, k, k, k)
    _copy(model.transition_cov, cov_predicted, k * k)
    _symmetric_product(w.fp, model.transition, model.transition_t, cov_predicted, k, k, True)
    _mirror_upper(cov_predicted, k)


cdef double _update(const ModelView* model, Workspace* w, const double* x,
                    const double* mean_predicted, const double* cov_predicted,
                    double* mean_filtered, double* cov_filtered) noexcept nogil:
    """Condition the predicted state on the observed entries of x.

    Returns log p(x_obs | past), 0 when nothing is observed, NaN when the
    innovation covariance is not positive definite.
    """
    cdef Py_ssize_t k = model.n_state
    cdef Py_ssize_t p = model.n_obs
    cdef Py_ssize_t q = 0
    cdef Py_ssize_t i, j, a, c, row
    cdef double total, coefficient, log_det = 0.0, quadratic = 0.0
    for j in range(p):
        if not isnan(x[j]):
            w.observed[q] = j
            q += 1
    if q == 0:
        _copy(mean_predicted, mean_filtered, k)
        _copy(cov_predicted, cov_filtered, k * k)
        return 0.0

    # Observed rows of H and d, observed block of R, residual.
    for a in range(q):
        row = w.observed[a]
        total = x[row] - model.observation_offset[row]
        for j in range(k):
            w.h_obs[a * k + j] = model.observation[row * k + j]
            w.h_obs_t[j * q + a] = model.observation[row * k + j]
            total -= model.observation[row * k + j] * mean_predicted[j]
        w.residual[a] = total
        for c in range(q):
            w.r_obs[a * q + c] = model.observation_cov[row * p + w.observed[c]]

    # hp = H_o P;  S = hp H_o^T + R_o (upper triangle, all the factorisation reads);  S = U^T U.
    _matmul(w.h_obs, cov_predicted, w.hp, q, k, k)
    _copy(w.r_obs, w.innovation, q * q)
    _symmetric_product(w.hp, w.h_obs, w.h_obs_t, w.innovation, q, k, True)
    if _cholesky(w.innovation, q) != 0:
        return NAN
    for a in range(q):
        log_det += log(w.innovation[a * q + a])

    # residual <- U^-T residual (its squared norm is the Mahalanobis term),
    # then <- U^-1 of that = S^-1 residual.
    _solve_upper_transpose(w.innovation, w.residual, q, 1)
    for a in range(q):
        quadratic += w.residual[a] * w.residual[a]
    _solve_upper(w.innovation, w.residual, q, 1)

    # K^T = S^-1 H_o P (P symmetric), K = its transpose.
    _copy(w.hp, w.gain_t, q * k)
    _solve_upper_transpose(w.innovation, w.gain_t, q, k)
    _solve_upper(w.innovation, w.gain_t, q, k)
    _transpose(w.gain_t, w.gain, q, k)

    # mean = mean_pred + K residual = mean_pred + (H_o P)^T S^-1 residual.
    for j in range(k):
        mean_filtered[j] = mean_predicted[j]
    for a in range(q):
        coefficient = w.residual[a]
        for j in range(k):
            mean_filtered[j] += w.hp[a * k + j] * coefficient

    # Joseph form: cov = (I - K H_o) P (I - K H_o)^T + K R_o K^T.
    if k * k * k < GEMM_MIN_WORK:
        # Small: build I - K H_o directly and take the upper triangle of the
        # two congruences as dot products of rows (no transposes needed).
        for i in range(k):
            for j in range(k):
                w.joseph[i * k + j] = 0.0
            w.joseph[i * k + i] = 1.0
            for a in range(q):
                coefficient = w.gain[i * q + a]
                for j in range(k):
                    w.joseph[i * k + j] -= coefficient * w.h_obs[a * k + j]
        _matmul(w.joseph, cov_predicted, w.joseph_p, k, k, k)
        _matmul(w.gain, w.r_obs, w.gain_r, k, q, q)
        for i in range(k):
            for j in range(i, k):
                total = 0.0
                for c in range(k):
                    total += w.joseph_p[i * k + c] * w.joseph[j * k + c]
                for c in range(q):
                    total += w.gain_r[i * q + c] * w.gain[j * q + c]
                cov_filtered[i * k + j] = total
    else:
        # Large: every product as a row-major A @ B ("NN") BLAS call.
        _matmul(w.gain, w.h_obs, w.joseph, k, q, k)
        for i in range(k * k):
            w.joseph[i] = -w.joseph[i]
        for i in range(k):
            w.joseph[i * k + i] += 1.0
        _transpose(w.joseph, w.joseph_t, k, k)
        _matmul(w.joseph, cov_predicted, w.joseph_p, k, k, k)
        _matmul(w.gain, w.r_obs, w.gain_r, k, q, q)
        _symmetric_product(w.joseph_p, w.joseph, w.joseph_t, cov_filtered, k, k, False)
        _symmetric_product(w.gain_r, w.gain, w.gain_t, cov_filtered, k, q, True)
    _mirror_upper(cov_filtered, k)
    return -0.5 * (q * LOG_2PI + 2.0 * log_det + quadratic)


cdef double _filter_sequence(const ModelView* model, Workspace* w, const double* x,
                             Py_ssize_t x_stride, const double* u, Py_ssize_t u_stride,
                             Py_ssize_t n_rows, double* mean_predicted, double* cov_predicted,
                             Py_ssize_t predicted_mask, double* mean_filtered,
                             double* cov_filtered, Py_ssize_t filtered_mask,
                             double* log_predictive, const double* previous_mean=NULL,
                             const double* previous_cov=NULL,
                             Py_ssize_t time_start=0) noexcept nogil:
    """Kalman filter over the rows of one sequence.

    Row t's predicted state goes to slot ``t & predicted_mask`` of the
    predicted buffers and its filtered state to slot ``t & filtered_mask`` of
    the filtered ones: a mask of -1 keeps every row, 1 the last two (the
    filter needs the previous filtered state), 0 only the current one.
    With ``previous_mean`` / ``previous_cov`` the rows continue a sequence
    whose last filtered state they are: row 0 is predicted from it with the
    control ``u[0]`` instead of starting from the prior.  ``time_start`` is
    the time step of row 0 (a time-varying model's chunk of a sequence).
    Returns the log-likelihood of the rows (NaN on a numerical failure).
    """
    cdef Py_ssize_t k = model.n_state
    cdef Py_ssize_t kk = k * k
    cdef Py_ssize_t t, slot, filtered_slot, previous
    cdef double log_likelihood = 0.0, value
    cdef ModelView step
    cdef const ModelView* base = model
    for t in range(n_rows):
        slot = t & predicted_mask
        filtered_slot = t & filtered_mask
        # Row t (time step t + time_start): predicted with the transition of
        # the step before, updated with the observation of its own.
        model = _at_step(base, &step, t + time_start - 1 if t + time_start > 0 else 0,
                         t + time_start)
        if t == 0 and previous_mean != NULL:
            _predict(model, w, previous_mean, previous_cov, u, mean_predicted + slot * k,
                     cov_predicted + slot * kk)
        elif t == 0:
            _copy(model.initial_mean, mean_predicted + slot * k, k)
            _copy(model.initial_cov, cov_predicted + slot * kk, kk)
        else:
            previous = (t - 1) & filtered_mask
            _predict(model, w, mean_filtered + previous * k, cov_filtered + previous * kk,
                     u + t * u_stride if u != NULL else NULL,
                     mean_predicted + slot * k, cov_predicted + slot * kk)
        value = _update(model, w, x + t * x_stride, mean_predicted + slot * k,
                        cov_predicted + slot * kk, mean_filtered + filtered_slot * k,
                        cov_filtered + filtered_slot * kk)
        log_predictive[t] = value
        log_likelihood += value
        if isnan(value):
            return NAN
    return log_likelihood


# --------------------------------------------------------------------------
# One RTS smoother step.
# --------------------------------------------------------------------------

cdef int _smooth_step(const ModelView* model, Workspace* w, double* mean, double* cov,
                      const double* control_next, const double* mean_next, const double* cov_next,
                      bint with_covariance) noexcept nogil:
    """Turn the filtered state of row t into its smoothed state, in place.

    Inputs: the filtered (mean, cov) of row t, the control of row t+1 (NULL
    without controls) and the smoothed state of row t+1.  The prediction of
    row t+1 is recomputed here with the filter's own code (instead of being
    stored for every row and read back: cheaper than the memory traffic), and
    it yields F P_f(t) on the way.  With ``with_covariance`` the smoothed
    covariance replaces ``cov`` and Cov(z_{t+1}, z_t | x) = P_s(t+1) J^T goes
    to ``w.cross``.  Returns -1 when the predicted covariance is not positive
    definite.
    """
    cdef Py_ssize_t k = model.n_state
    cdef Py_ssize_t i, l
    cdef double total
    cdef const double* mean_predicted_next = w.next_mean
    cdef const double* cov_predicted_next = w.next_cov
    _predict(model, w, mean, cov, control_next, w.next_mean, w.next_cov)
    # J^T = P_pred(t+1)^-1 F P_f(t), by a Cholesky solve.
    _copy(w.fp, w.smoother_gain_t, k * k)
    _copy(cov_predicted_next, w.chol, k * k)
    if _cholesky(w.chol, k) != 0:
        return -1
    _solve_upper_transpose(w.chol, w.smoother_gain_t, k, k)
    _solve_upper(w.chol, w.smoother_gain_t, k, k)
    _transpose(w.smoother_gain_t, w.smoother_gain, k, k)

    # mean += J (mean_s(t+1) - mean_pred(t+1))
    for l in range(k):
        w.difference[l] = mean_next[l] - mean_predicted_next[l]
    for i in range(k):
        total = 0.0
        for l in range(k):
            total += w.smoother_gain[i * k + l] * w.difference[l]
        mean[i] += total
    if not with_covariance:
        return 0

    # cov += J (P_s(t+1) - P_pred(t+1)) J^T
    for i in range(k * k):
        w.cross[i] = cov_next[i] - cov_predicted_next[i]
    _matmul(w.smoother_gain, w.cross, w.jd, k, k, k)
    _symmetric_product(w.jd, w.smoother_gain, w.smoother_gain_t, cov, k, k, True)
    _mirror_upper(cov, k)
    # Cov(z_{t+1}, z_t | x) = P_s(t+1) J^T
    _matmul(cov_next, w.smoother_gain_t, w.cross, k, k, k)
    return 0


# --------------------------------------------------------------------------
# EM sufficient statistics of one row and of one transition.
# --------------------------------------------------------------------------

cdef struct Statistics:
    double* initial_sum            # k: sum over sequences of E[z_1]
    double* initial_outer          # k x k: sum of E[z_1 z_1^T]
    double* transition_regressor   # D x D, D = k + m + 1: sum_{t>=2} E[phi phi^T], phi = (z_{t-1}, u_t, 1)
    double* transition_cross       # k x D: sum_{t>=2} E[z_t phi^T]
    double* transition_target      # k x k: sum_{t>=2} E[z_t z_t^T]
    # The observation sums run over the rows with an observed entry: a row with
    # none drops out of the observation regression (as in pykalman, statsmodels
    # and Shumway and Stoffer's EM), so its count is the count of such rows.
    double* observation_regressor  # (k+1) x (k+1): sum_t E[psi psi^T], psi = (z_t, 1)
    double* observation_cross      # p x (k+1): sum_t E[x_t psi^T]
    double* observation_target     # p x p: sum_t E[x_t x_t^T]
    double* n_sequences            # 1


cdef inline bint _no_observed_entry(const double* x, Py_ssize_t p) noexcept nogil:
    """Whether every entry of the row x (p entries) is missing (NaN)."""
    cdef Py_ssize_t j
    for j in range(p):
        if not isnan(x[j]):
            return False
    return True


cdef inline void _add_state_moments(double* regressor, const double* mean, const double* cov,
                                    Py_ssize_t k) noexcept nogil:
    """regressor ((k+1) x (k+1)) += E[psi psi^T], psi = (z, 1), z ~ N(mean, cov)."""
    cdef Py_ssize_t k1 = k + 1
    cdef Py_ssize_t i, j
    cdef double value
    for i in range(k):
        value = mean[i]
        for j in range(k):
            regressor[i * k1 + j] += cov[i * k + j] + value * mean[j]
        regressor[i * k1 + k] += value
        regressor[k * k1 + i] += value
    regressor[k * k1 + k] += 1.0


cdef int _accumulate_row(const ModelView* model, Workspace* w, Statistics* stats,
                         const double* x, const double* mean, const double* cov) noexcept nogil:
    """Add the observation statistics of one row, given its smoothed state.

    Missing entries of x are integrated out exactly: given the state, the
    missing block is Gaussian with mean A_mis z + c_mis and covariance r_mis
    (the conditional of v_m given v_o), so E[x x^T], E[x z^T] gain the
    corresponding second moments.  A row with no observed entry adds
    nothing (its imputed moments H P H^T + R would only pull R towards its
    current value).  Returns the number of missing entries (the workspace
    then holds their indices in ``w.missing``, A_mis in ``w.a_mis`` and the
    filled row E[x | z = mean, x_o] in ``w.x_filled``, unless all p are
    missing), or -1 when R_oo is not positive definite.
    """
    cdef Py_ssize_t k = model.n_state
    cdef Py_ssize_t p = model.n_obs
    cdef Py_ssize_t k1 = k + 1
    cdef Py_ssize_t q = 0, n_missing = 0
    cdef Py_ssize_t i, j, a, b, row, column
    cdef double value, total
    cdef double* regressor = stats.observation_regressor
    cdef double* cross = stats.observation_cross
    cdef double* target = stats.observation_target

    for j in range(p):
        if isnan(x[j]):
            w.missing[n_missing] = j
            n_missing += 1
        else:
            w.observed[q] = j
            q += 1
    if q == 0:
        return n_missing
    _add_state_moments(regressor, mean, cov, k)
    if n_missing == 0:
        for i in range(p):
            value = x[i]
            for j in range(k):
                cross[i * k1 + j] += value * mean[j]
            cross[i * k1 + k] += value
            for j in range(p):
                target[i * p + j] += value * x[j]
        return 0

    # W = R_oo^-1 R_om (q x n_missing): r_obs holds the factor of R_oo.
    for a in range(q):
        for b in range(q):
            w.r_obs[a * q + b] = model.observation_cov[w.observed[a] * p + w.observed[b]]
        for b in range(n_missing):
            w.r_solve[a * n_missing + b] = model.observation_cov[w.observed[a] * p + w.missing[b]]
    if q > 0:
        if _cholesky(w.r_obs, q) != 0:
            return -1
        _solve_upper_transpose(w.r_obs, w.r_solve, q, n_missing)
        _solve_upper(w.r_obs, w.r_solve, q, n_missing)
    # a_mis = H_m - W^T H_o; c_mis = d_m + W^T (x_o - d_o); r_mis = R_mm - R_mo W
    for b in range(n_missing):
        row = w.missing[b]
        for j in range(k):
            w.a_mis[b * k + j] = model.observation[row * k + j]
        w.c_mis[b] = model.observation_offset[row]
        for a in range(q):
            value = w.r_solve[a * n_missing + b]
            column = w.observed[a]
            for j in range(k):
                w.a_mis[b * k + j] -= value * model.observation[column * k + j]
            w.c_mis[b] += value * (x[column] - model.observation_offset[column])
        for a in range(n_missing):
            total = model.observation_cov[row * p + w.missing[a]]
            for j in range(q):
                total -= model.observation_cov[row * p + w.observed[j]] * w.r_solve[j * n_missing + a]
            w.r_mis[b * n_missing + a] = total
    # Filled row x_hat = E[x | data] and A_mis P.
    for j in range(p):
        w.x_filled[j] = x[j]
    for b in range(n_missing):
        total = w.c_mis[b]
        for j in range(k):
            total += w.a_mis[b * k + j] * mean[j]
        w.x_filled[w.missing[b]] = total
    _matmul(w.a_mis, cov, w.ap_mis, n_missing, k, k)

    for i in range(p):
        value = w.x_filled[i]
        for j in range(k):
            cross[i * k1 + j] += value * mean[j]
        cross[i * k1 + k] += value
        for j in range(p):
            target[i * p + j] += value * w.x_filled[j]
    for b in range(n_missing):
        row = w.missing[b]
        for j in range(k):
            cross[row * k1 + j] += w.ap_mis[b * k + j]
        for a in range(n_missing):
            total = w.r_mis[b * n_missing + a]
            for j in range(k):
                total += w.ap_mis[b * k + j] * w.a_mis[a * k + j]
            target[row * p + w.missing[a]] += total
    return n_missing


cdef void _accumulate_transition(const ModelView* model, Statistics* stats,
                                 const double* mean, const double* cov,
                                 const double* mean_next, const double* cov_next,
                                 const double* cross_next, const double* u_next) noexcept nogil:
    """Add the statistics of the pair (z_t, z_{t+1}) with the control u_{t+1}.

    ``cross_next`` is Cov(z_{t+1}, z_t | x).
    """
    cdef Py_ssize_t k = model.n_state
    cdef Py_ssize_t m = model.n_ctrl
    cdef Py_ssize_t D = k + m + 1
    cdef Py_ssize_t i, j
    cdef double value
    cdef double* regressor = stats.transition_regressor
    cdef double* cross = stats.transition_cross
    cdef double* target = stats.transition_target
    for i in range(k):
        value = mean[i]
        for j in range(k):
            regressor[i * D + j] += cov[i * k + j] + value * mean[j]
        for j in range(m):
            regressor[i * D + k + j] += value * u_next[j]
            regressor[(k + j) * D + i] += value * u_next[j]
        regressor[i * D + D - 1] += value
        regressor[(D - 1) * D + i] += value
    for i in range(m):
        value = u_next[i]
        for j in range(m):
            regressor[(k + i) * D + k + j] += value * u_next[j]
        regressor[(k + i) * D + D - 1] += value
        regressor[(D - 1) * D + k + i] += value
    regressor[(D - 1) * D + D - 1] += 1.0
    for i in range(k):
        value = mean_next[i]
        for j in range(k):
            cross[i * D + j] += cross_next[i * k + j] + value * mean[j]
            target[i * k + j] += cov_next[i * k + j] + value * mean_next[j]
        for j in range(m):
            cross[i * D + k + j] += value * u_next[j]
        cross[i * D + D - 1] += value


# --------------------------------------------------------------------------
# Python-facing entry points.
# --------------------------------------------------------------------------

cdef const double* _row_pointer(const double[:, ::1] array, Py_ssize_t row) noexcept nogil:
    """Pointer to array[row, 0], or NULL when the array has no columns."""
    if array.shape[1] == 0:
        return NULL
    return &array[row, 0]


def kalman_filter(
    LinearGaussianModel model,
    const double[:, ::1] X,  # IN
    const double[:, ::1] controls,  # IN
    const Py_ssize_t[::1] offsets,  # IN
    double[:, ::1] predicted_mean,  # OUT
    double[:, :, ::1] predicted_cov,  # OUT
    double[:, ::1] filtered_mean,  # OUT
    double[:, :, ::1] filtered_cov,  # OUT
    double[::1] log_predictive,  # OUT
    double[::1] sequence_log_likelihood,  # OUT
):
    """Kalman filter, keeping the predicted and filtered state of every row.

    ``controls`` has one row per row of X (shape (n_samples, n_controls),
    possibly zero columns).  A sequence whose filter fails numerically gets
    log-likelihood NaN.
    """
    cdef ModelView* view = &model.view
    cdef _Scratch scratch = _Scratch(view.n_state, view.n_obs)
    cdef Py_ssize_t n_sequences = offsets.shape[0] - 1
    cdef Py_ssize_t s, first, stop
    cdef Py_ssize_t u_stride = controls.strides[0] // sizeof(double)
    with nogil:
        for s in range(n_sequences):
            first = offsets[s]
            stop = offsets[s + 1]
            if stop == first:
                sequence_log_likelihood[s] = 0.0
                continue
            sequence_log_likelihood[s] = _filter_sequence(
                view, &scratch.w, &X[first, 0], X.strides[0] // sizeof(double),
                _row_pointer(controls, first), u_stride, stop - first,
                &predicted_mean[first, 0], &predicted_cov[first, 0, 0], -1,
                &filtered_mean[first, 0], &filtered_cov[first, 0, 0], -1,
                &log_predictive[first])


def kalman_filter_last(
    LinearGaussianModel model,
    const double[:, ::1] X,  # IN
    const double[:, ::1] controls,  # IN
    const Py_ssize_t[::1] offsets,  # IN
    double[:, ::1] last_mean,  # OUT
    double[:, :, ::1] last_cov,  # OUT
    double[::1] log_predictive,  # OUT
    double[::1] sequence_log_likelihood,  # OUT
):
    """Kalman filter keeping only the filtered state after the last row of each sequence.

    Memory is O(k^2) besides the outputs: used for scoring, forecasting and
    starting a stream.
    """
    cdef ModelView* view = &model.view
    cdef Py_ssize_t k = view.n_state
    cdef _Scratch scratch = _Scratch(k, view.n_obs)
    cdef Py_ssize_t n_sequences = offsets.shape[0] - 1
    cdef Py_ssize_t s, first, stop, last_slot
    cdef Py_ssize_t u_stride = controls.strides[0] // sizeof(double)
    cdef double[:, ::1] means = _zeros2(3, k)
    cdef double[:, :, ::1] covs = _zeros3(3, k, k)
    with nogil:
        for s in range(n_sequences):
            first = offsets[s]
            stop = offsets[s + 1]
            if stop == first:
                sequence_log_likelihood[s] = 0.0
                _copy(view.initial_mean, &last_mean[s, 0], k)
                _copy(view.initial_cov, &last_cov[s, 0, 0], k * k)
                continue
            sequence_log_likelihood[s] = _filter_sequence(
                view, &scratch.w, &X[first, 0], X.strides[0] // sizeof(double),
                _row_pointer(controls, first), u_stride, stop - first,
                &means[0, 0], &covs[0, 0, 0], 0, &means[1, 0], &covs[1, 0, 0], 1,
                &log_predictive[first])
            last_slot = 1 + ((stop - first - 1) & 1)
            _copy(&means[last_slot, 0], &last_mean[s, 0], k)
            _copy(&covs[last_slot, 0, 0], &last_cov[s, 0, 0], k * k)


def kalman_smoother(
    LinearGaussianModel model,
    const double[:, ::1] X,  # IN
    const double[:, ::1] controls,  # IN
    const Py_ssize_t[::1] offsets,  # IN
    double[:, ::1] smoothed_mean,  # OUT
    double[:, :, ::1] smoothed_cov,  # OUT
    double[:, :, ::1] cross_cov,  # OUT
    double[::1] log_predictive,  # OUT
    double[::1] sequence_log_likelihood,  # OUT
):
    """Rauch-Tung-Striebel smoother.

    Fills the smoothed means, and, unless ``smoothed_cov`` is None, the
    smoothed covariances and ``cross_cov[t] = Cov(z_t, z_{t-1} | x)`` (zero on
    the first row of each sequence).  With ``smoothed_cov=None`` only the means
    are computed (the covariances then live in a scratch buffer sized by the
    longest sequence), and ``cross_cov`` is ignored.
    """
    cdef ModelView* view = &model.view
    cdef Py_ssize_t k = view.n_state
    cdef Py_ssize_t kk = k * k
    cdef _Scratch scratch = _Scratch(k, view.n_obs)
    cdef Py_ssize_t n_sequences = offsets.shape[0] - 1
    cdef Py_ssize_t longest = _longest(offsets)
    cdef Py_ssize_t s, t, first, stop, n_rows
    cdef Py_ssize_t u_stride = controls.strides[0] // sizeof(double)
    cdef bint with_covariance = smoothed_cov is not None
    cdef double[:, ::1] predicted_mean = _zeros2(1, k)
    cdef double[:, :, ::1] predicted_cov = _zeros3(1, k, k)
    cdef double[:, :, ::1] cov_scratch = None
    cdef double* cov_base
    cdef const double* u
    cdef ModelView step
    if not with_covariance:
        cov_scratch = _zeros3(longest, k, k)
    with nogil:
        for s in range(n_sequences):
            first = offsets[s]
            stop = offsets[s + 1]
            n_rows = stop - first
            if n_rows == 0:
                sequence_log_likelihood[s] = 0.0
                continue
            cov_base = &smoothed_cov[first, 0, 0] if with_covariance else &cov_scratch[0, 0, 0]
            u = _row_pointer(controls, first)
            sequence_log_likelihood[s] = _filter_sequence(
                view, &scratch.w, &X[first, 0], X.strides[0] // sizeof(double), u, u_stride,
                n_rows, &predicted_mean[0, 0], &predicted_cov[0, 0, 0], 0,
                &smoothed_mean[first, 0], cov_base, -1, &log_predictive[first])
            if isnan(sequence_log_likelihood[s]):
                continue
            if with_covariance:
                for t in range(kk):
                    (&cross_cov[first, 0, 0])[t] = 0.0
            for t in range(n_rows - 2, -1, -1):
                # Row t + 1 is predicted from row t with the transition of step t.
                if _smooth_step(_at_step(view, &step, t, t), &scratch.w, &smoothed_mean[first + t, 0], cov_base + t * kk,
                                u + (t + 1) * u_stride if u != NULL else NULL,
                                &smoothed_mean[first + t + 1, 0], cov_base + (t + 1) * kk,
                                with_covariance) != 0:
                    sequence_log_likelihood[s] = NAN
                    break
                if with_covariance:
                    _copy(scratch.w.cross, &cross_cov[first + t + 1, 0, 0], kk)


include "_kalman_diffuse.pxi"


def em_statistics(
    LinearGaussianModel model,
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
    """E step: filter, smooth and add the EM sufficient statistics of every sequence.

    The statistics arrays are *added to* (pass zeros to start).  Nothing of
    size n_samples is allocated: the filter and smoother work in scratch
    buffers sized by the longest sequence.  A sequence whose filter or
    smoother fails numerically gets log-likelihood NaN and adds nothing.
    """
    cdef ModelView* view = &model.view
    cdef Py_ssize_t k = view.n_state
    cdef _Scratch scratch = _Scratch(k, view.n_obs)
    cdef Workspace* w = &scratch.w
    cdef Py_ssize_t n_sequences = offsets.shape[0] - 1
    cdef Py_ssize_t longest = _longest(offsets)
    cdef Py_ssize_t s, first, stop, n_rows
    cdef Py_ssize_t x_stride = X.strides[0] // sizeof(double)
    cdef Py_ssize_t u_stride = controls.strides[0] // sizeof(double)
    cdef const double* x
    cdef const double* u
    cdef double[:, ::1] predicted_mean = _zeros2(1, k)
    cdef double[:, :, ::1] predicted_cov = _zeros3(1, k, k)
    cdef double[:, ::1] mean = _zeros2(longest, k)
    cdef double[:, :, ::1] cov = _zeros3(longest, k, k)
    cdef double[::1] log_predictive = zeros_1d(longest)
    cdef Statistics stats
    cdef int status
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
            sequence_log_likelihood[s] = _filter_sequence(
                view, w, x, x_stride, u, u_stride, n_rows, &predicted_mean[0, 0],
                &predicted_cov[0, 0, 0], 0, &mean[0, 0], &cov[0, 0, 0], -1, &log_predictive[0])
            if isnan(sequence_log_likelihood[s]):
                continue
            status = _smooth_and_accumulate(view, w, &stats, x, x_stride, u, u_stride, n_rows,
                                            &mean[0, 0], &cov[0, 0, 0])
            if status != 0:
                sequence_log_likelihood[s] = NAN


cdef int _smooth_and_accumulate(const ModelView* model, Workspace* w, Statistics* stats,
                                const double* x, Py_ssize_t x_stride, const double* u,
                                Py_ssize_t u_stride, Py_ssize_t n_rows,
                                double* mean, double* cov, DiffuseWork* d=NULL,
                                const double* cov_inf=NULL,
                                Py_ssize_t n_diffuse=0) noexcept nogil:
    """Smooth one filtered sequence in place and add its statistics.

    With ``d``, the sequence was filtered by the exact diffuse filter:
    ``cov_inf`` holds the filtered P_inf of its first ``n_diffuse`` rows and
    the rows whose P_inf is not zero take the exact diffuse smoother step.
    Returns -1 on a numerical failure (a covariance that is not positive
    definite, or a state the data do not determine); the statistics are
    then partly added, and the caller marks the sequence's log-likelihood
    NaN so that the whole E step is discarded.
    """
    cdef Py_ssize_t k = model.n_state
    cdef Py_ssize_t kk = k * k
    cdef Py_ssize_t t, i, j
    cdef Py_ssize_t last = n_rows - 1
    if _accumulate_row(model, w, stats, x + last * x_stride, mean + last * k, cov + last * kk) < 0:
        return -1
    if d != NULL and n_diffuse == n_rows and _frobenius_squared(
            cov_inf + last * kk, kk) > DIFFUSE_TOLERANCE:
        return -1  # the last state is not determined by the data
    for t in range(n_rows - 2, -1, -1):
        if d != NULL and t < n_diffuse and _frobenius_squared(
                cov_inf + t * kk, kk) > DIFFUSE_TOLERANCE:
            if _smooth_step_diffuse(model, w, d, mean + t * k, cov + t * kk, cov_inf + t * kk,
                                    u + (t + 1) * u_stride if u != NULL else NULL,
                                    mean + (t + 1) * k, cov + (t + 1) * kk) != 0:
                return -1
        elif _smooth_step(model, w, mean + t * k, cov + t * kk,
                          u + (t + 1) * u_stride if u != NULL else NULL,
                          mean + (t + 1) * k, cov + (t + 1) * kk, True) != 0:
            return -1
        if _accumulate_row(model, w, stats, x + t * x_stride, mean + t * k, cov + t * kk) < 0:
            return -1
        _accumulate_transition(model, stats, mean + t * k, cov + t * kk, mean + (t + 1) * k,
                               cov + (t + 1) * kk, w.cross,
                               u + (t + 1) * u_stride if u != NULL else NULL)
    for i in range(k):
        stats.initial_sum[i] += mean[i]
        for j in range(k):
            stats.initial_outer[i * k + j] += cov[i * k + j] + mean[i] * mean[j]
    stats.n_sequences[0] += 1.0
    return 0


include "_kalman_stream.pxi"


def filter_step(
    LinearGaussianModel model,
    const double[::1] previous_mean,  # IN
    const double[:, ::1] previous_cov,  # IN
    bint has_previous,
    const double[::1] x,  # IN
    const double[::1] control,  # IN
    double[::1] filtered_mean,  # OUT
    double[:, ::1] filtered_cov,  # OUT
):
    """One online filter step; returns log p(x_obs | past).

    With ``has_previous`` the state (previous_mean, previous_cov) is the
    filtered state of the previous row and is first propagated with
    ``control``; otherwise the prior (mu0, Sigma0) is the predicted state and
    the previous state and the control are ignored.  The same code as the
    batch filter, so the results are bit-for-bit those of :func:`kalman_filter`.
    """
    cdef ModelView* view = &model.view
    cdef Py_ssize_t k = view.n_state
    cdef _Scratch scratch = _Scratch(k, view.n_obs)
    cdef double[:, ::1] predicted_mean = _zeros2(1, k)
    cdef double[:, :, ::1] predicted_cov = _zeros3(1, k, k)
    cdef double log_predictive
    with nogil:
        if has_previous:
            _predict(view, &scratch.w, &previous_mean[0], &previous_cov[0, 0],
                     &control[0] if control.shape[0] > 0 else NULL,
                     &predicted_mean[0, 0], &predicted_cov[0, 0, 0])
        else:
            _copy(view.initial_mean, &predicted_mean[0, 0], k)
            _copy(view.initial_cov, &predicted_cov[0, 0, 0], k * k)
        log_predictive = _update(view, &scratch.w, &x[0], &predicted_mean[0, 0],
                                 &predicted_cov[0, 0, 0], &filtered_mean[0],
                                 &filtered_cov[0, 0])
    return log_predictive


def forecast(
    LinearGaussianModel model,
    const double[:, ::1] last_mean,  # IN
    const double[:, :, ::1] last_cov,  # IN
    const double[:, ::1] future_controls,  # IN
    Py_ssize_t n_steps,
    double[:, ::1] observation_mean,  # OUT
    double[:, :, ::1] observation_cov,  # OUT
):
    """Predictive distribution of the next n_steps observations after each sequence.

    ``last_mean[s]``, ``last_cov[s]`` is the filtered state after sequence s;
    ``future_controls`` has n_sequences * n_steps rows (the controls of the
    forecast steps, sequence by sequence).  Row ``s * n_steps + h`` of the
    outputs is x_{T+h+1} of sequence s: mean H z + d, covariance H P H^T + R.
    """
    cdef ModelView* view = &model.view
    cdef Py_ssize_t k = view.n_state
    cdef Py_ssize_t p = view.n_obs
    cdef _Scratch scratch = _Scratch(k, p)
    cdef Py_ssize_t n_sequences = last_mean.shape[0]
    cdef Py_ssize_t s, h, i, j, row, now
    cdef double total
    cdef double[:, ::1] means = _zeros2(2, k)
    cdef double[:, :, ::1] covs = _zeros3(2, k, k)
    cdef double[:, ::1] hp = _zeros2(max(p, 1), k)
    with nogil:
        for s in range(n_sequences):
            _copy(&last_mean[s, 0], &means[0, 0], k)
            _copy(&last_cov[s, 0, 0], &covs[0, 0, 0], k * k)
            now = 0
            for h in range(n_steps):
                row = s * n_steps + h
                _predict(view, &scratch.w, &means[now, 0], &covs[now, 0, 0],
                         _row_pointer(future_controls, row), &means[1 - now, 0],
                         &covs[1 - now, 0, 0])
                now = 1 - now
                for i in range(p):
                    total = view.observation_offset[i]
                    for j in range(k):
                        total += view.observation[i * k + j] * means[now, j]
                    observation_mean[row, i] = total
                _matmul(view.observation, &covs[now, 0, 0], &hp[0, 0], p, k, k)
                _copy(view.observation_cov, &observation_cov[row, 0, 0], p * p)
                _symmetric_product(&hp[0, 0], view.observation, view.observation_t,
                                   &observation_cov[row, 0, 0], p, k, True)
                _mirror_upper(&observation_cov[row, 0, 0], p)


def simulate_states(
    const double[:, :, ::1] transition_matrices,  # IN
    const double[:, ::1] innovations,  # IN
    double[:, ::1] states,  # OUT
):
    """states[0] = innovations[0];  states[t] = F_{t-1} states[t-1] + innovations[t].

    ``transition_matrices`` holds one matrix (a constant F) or one per
    transition, ``F_{t-1}`` moving row t - 1 to row t (pykalman's convention).
    """
    cdef Py_ssize_t n_rows = innovations.shape[0]
    cdef Py_ssize_t k = innovations.shape[1]
    cdef Py_ssize_t varying = 1 if transition_matrices.shape[0] > 1 else 0
    cdef Py_ssize_t t, i, j, step
    cdef double total
    with nogil:
        for t in range(n_rows):
            step = (t - 1) * varying
            for i in range(k):
                total = innovations[t, i]
                if t > 0:
                    for j in range(k):
                        total += transition_matrices[step, i, j] * states[t - 1, j]
                states[t, i] = total
