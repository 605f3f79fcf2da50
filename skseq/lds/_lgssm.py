"""The linear-Gaussian state-space model, fitted by EM (see ``doc/user_guide/lgssm.rst``).

Model, with ``k = n_components`` states, ``p`` features and ``m`` optional
control inputs::

    z_1 ~ N(mu0, Sigma0)
    z_t = F z_{t-1} + G u_t + b + w_t,     w_t ~ N(0, Q)
    x_t = H z_t + d + v_t,                 v_t ~ N(0, R)

The E step (Kalman filter + RTS smoother + summed sufficient statistics) runs
in the Cython kernel behind :mod:`skseq.inference.kalman`, the only layer this
module calls; this module holds the validation and the closed-form M step,
``_initialization.py`` the initialisation, ``_streams.py`` ``partial_fit``'s
stream hooks and the online filter.

Controls ride along with the data inside EM: the E step receives the stacked
array ``[X, controls]`` of shape (n_samples, n_features + n_controls), so
:meth:`BaseEM._estep_parallel` can split rows into blocks of whole sequences
without knowing about controls.  :meth:`LinearGaussianSSM._stack` builds it.
"""

import warnings

import numpy as np
import scipy.linalg
from sklearn.base import ClassNamePrefixFeaturesOutMixin, DensityMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import (
    _check_sample_weight,
    _num_samples,
    check_is_fitted,
)

from .._sequences import (
    check_y_is_not_lengths,
    lengths_by_keyword,
    validate_sequences,
)
from .._validation import (
    PARAMETER_RULES,
    check_data_scale,
    check_scalar_param,
    foreign_keywords_hinted,
    integer_rule,
    option_rule,
    optional,
)
from ..base import BaseEM, ParameterCoordinates, SufficientStatistics
from ..inference.kalman import (
    TIME_VARYING_NDIM,
    LGSSMParameters,
    _em_statistics_bounded,
    _filter_last_offsets,
    _filter_offsets,
    _forecast,
    _sample,
    _smoother_offsets,
    check_controls,
    check_forecast_size,
    check_lgssm_parameters,
    check_log_likelihood_overflow,
    check_sample_size,
    check_time_axis,
    make_model,
    refuse_time_varying,
)
from ._initialization import (
    COVARIANCE_NAMES,
    INIT_METHODS,
    INITIAL_STATE_NAMES,
    INITIAL_STATES,
    PARAMETER_NAMES,
    LGSSMInitialization,
    _floor_covariance,
    _state_scale,
)
from ._mle import COV_TYPES, FIT_METHODS, LGSSMMaximumLikelihood, check_fixed_params_argument
from ._streams import LGSSMStreams

__all__ = ["LinearGaussianSSM"]

# What params="all" learns: everything but the initial covariance, whose
# maximum-likelihood estimate collapses towards zero with few sequences.
DEFAULT_LEARNED = frozenset(PARAMETER_NAMES) - {"initial_state_covariance"}


def _starting_value(name):
    return (
        f"write {name}_init=, EM's starting value (EM learns it unless params leaves {name!r} out)."
    )


# pykalman's KalmanFilter parameters, and what to write instead.
_PYKALMAN_HINTS = {
    **{
        pykalman_name: _starting_value(name)
        for pykalman_name, name in (
            ("transition_matrices", "transition_matrix"),
            ("observation_matrices", "observation_matrix"),
            ("transition_covariance", "transition_covariance"),
            ("observation_covariance", "observation_covariance"),
            ("observation_offsets", "observation_offset"),
            ("initial_state_mean", "initial_state_mean"),
            ("initial_state_covariance", "initial_state_covariance"),
        )
    },
    "transition_offsets": (
        "write transition_offset_init= for a constant offset; time-varying offsets are "
        "controls: fit(X, controls=offsets) with control_matrix_init=np.eye(n_components) and "
        "params leaving 'control_matrix' out (pykalman's offset t drives row t + 1), or, "
        "known and not learned, the fitted transition_offset_ set to the 2-D array."
    ),
    "n_dim_state": "write n_components=.",
    "n_dim_obs": "the number of features is taken from X in fit.",
    "em_vars": (
        "write params=, the names of the parameters EM learns ('all', the default, learns "
        "all but initial_state_covariance)."
    ),
}
_KNOWN_MATRICES = (
    "To filter or smooth with known matrices and no EM, call "
    "skseq.inference.kalman.kalman_filter(LGSSMParameters(F, H, Q, R), X) (or kalman_smoother), "
    "or give "
    "every parameter as *_init with n_iter=0 and call fit(X) first. Time-varying matrices "
    "(pykalman's 3-D arrays) go to LGSSMParameters or to the fitted attributes "
    "(transition_matrix_, ...): EM does not learn them."
)
_NOT_FITTED = "This %(name)s instance is not fitted yet: fit(X) learns its parameters by EM. "


def _solve_regression(cross, regressor, weights, learned):
    """Maximise over the learned columns of ``weights`` in a linear-Gaussian regression.

    The regression is ``y = W phi + noise`` with summed moments
    ``cross = sum E[y phi^T]`` and ``regressor = sum E[phi phi^T]``.  The
    columns of W flagged in ``learned`` are set to their maximiser given the
    others: W_L = (cross_L - W_F regressor_FL) regressor_LL^-1 (whatever the
    noise covariance, since every output shares the regressors).  A singular
    ``regressor_LL`` (e.g. a constant control) gets the minimum-norm maximiser.
    """
    learned_index = np.flatnonzero(learned)
    fixed_index = np.flatnonzero(~learned)
    if learned_index.size == 0:
        return weights
    rhs = (
        cross[:, learned_index]
        - weights[:, fixed_index] @ regressor[np.ix_(fixed_index, learned_index)]
    )
    gram = regressor[np.ix_(learned_index, learned_index)]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", scipy.linalg.LinAlgWarning)
            factor = scipy.linalg.cho_factor(gram)
            solution = scipy.linalg.cho_solve(factor, rhs.T).T
    except (np.linalg.LinAlgError, scipy.linalg.LinAlgError, scipy.linalg.LinAlgWarning):
        solution = scipy.linalg.lstsq(gram, rhs.T)[0].T
    weights = weights.copy()
    weights[:, learned_index] = solution
    return weights


def _residual_covariance(target, cross, regressor, weights, count):
    """(1/count) sum E[(y - W phi)(y - W phi)^T] from the summed moments."""
    product = weights @ cross.T
    return (target - product - product.T + weights @ regressor @ weights.T) / count


def _check_params_argument(params):
    """The set of parameter names EM learns, from ``"all"``, one name or a collection."""
    if isinstance(params, str):
        if params == "all":
            return DEFAULT_LEARNED
        names = {params}
    else:
        try:
            names = set(params)
        except TypeError:
            raise TypeError(
                f"params must be 'all' or a collection of parameter names, got {params!r}."
            ) from None
    unknown = sorted(str(name) for name in names if name not in PARAMETER_NAMES)
    if unknown:
        raise ValueError(
            f"params names unknown parameter(s) {unknown}; valid names are "
            f"{list(PARAMETER_NAMES)} (or 'all')."
        )
    return frozenset(names)


class LinearGaussianSSM(
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    DensityMixin,
    LGSSMStreams,
    LGSSMInitialization,
    LGSSMMaximumLikelihood,
    BaseEM,
):
    """Linear-Gaussian state-space model (Kalman filter / smoother) fitted by EM or exact MLE.

    The model, with ``k = n_components`` hidden states, is::

        z_1 ~ N(mu0, Sigma0)
        z_t = F z_{t-1} + G u_t + b + w_t,     w_t ~ N(0, Q)
        x_t = H z_t + d + v_t,                 v_t ~ N(0, R)

    where the controls ``u_t`` are optional known inputs (the control of the
    first row of each sequence is unused).  ``X`` holds the rows of all
    sequences concatenated in time order; ``lengths`` or ``sequence_ids``
    says which rows form a sequence (neither: one sequence).  NaN entries of
    ``X`` (and the masked entries of a masked array, as in pykalman) are
    missing values, handled exactly by the filter, the smoother and EM.
    :meth:`transform` returns the smoothed state means, so the model is a
    dynamic factor analysis step in a :class:`~sklearn.pipeline.Pipeline`.

    Parameters
    ----------
    n_components : int, default=1
        Dimension ``k`` of the hidden state.
    n_iter : int, default=100
        Maximum number of EM iterations (accepted E steps, see
        ``acceleration``); with ``fit_method="mle"``, of L-BFGS-B iterations.
    tol : float, default=1e-4
        EM stops when an iteration gains less than ``tol`` in log-likelihood
        (with or without acceleration); L-BFGS-B (``fit_method="mle"``) when
        an iteration gains less than about ``tol`` or every coordinate of the
        gradient of the log-likelihood in the unconstrained coordinates is
        below ``tol``.  Smaller than the HMMs' 1e-2: the
        likelihood of a state-space model is flat along ridges (a level
        variance can be 13 % off its maximum while an iteration still gains
        1e-2 on the Nile), so a gain of 1e-2 stops short of the maximum.
    params : "all", str or collection of str, default="all"
        The parameters EM (or maximum likelihood) learns; the others keep
        their initial value (``*_init``): how parameters are held fixed.  Names:
        ``transition_matrix``, ``observation_matrix``, ``transition_covariance``,
        ``observation_covariance``, ``transition_offset``, ``observation_offset``,
        ``control_matrix``, ``initial_state_mean``, ``initial_state_covariance``.
        ``"all"`` learns every parameter **except** ``initial_state_covariance``
        (its maximum-likelihood estimate collapses towards zero when there are
        few sequences); name it explicitly to learn it.
    transition_matrix_init : array-like of shape (k, k), default=None
        Initial F.  None: least-squares AR(1) fit of the states projected by
        factor analysis.
    observation_matrix_init : array-like of shape (n_features, k), default=None
        Initial H.  None: probabilistic-PCA loadings, slightly perturbed at
        random (so that ``n_init`` restarts differ), for standardised states.
        A given H sets the units of the state instead (``H = 1``: the data's).
    transition_covariance_init : array-like of shape (k, k), default=None
        Initial Q.  None: the residual covariance of the AR(1) fit of the
        states projected by factor analysis.
    observation_covariance_init : array-like of shape (n_features, n_features), default=None
        Initial R.  None: the diagonal of the variance the states leave
        unexplained (the variance PCA leaves unexplained; half the variance
        when H is given).
    transition_offset_init : array-like of shape (k,), default=None
        Initial b.  None: zeros.
    observation_offset_init : array-like of shape (n_features,), default=None
        Initial d.  None: the feature means (ignoring NaN).
    control_matrix_init : array-like of shape (k, n_controls), default=None
        Initial G.  None: zeros.
    initial_state_mean_init : array-like of shape (k,), default=None
        Initial mu0.  None: the mean of the stationary distribution of the
        state under the initial F, Q, b and G (zeros by default), or zeros
        when that has no stationary distribution.
    initial_state_covariance_init : array-like of shape (k, k), default=None
        Initial Sigma0.  None: the covariance P of the stationary distribution
        of the state under the initial F and Q (``P = F P F^T + Q``), what the
        first state of a sequence observed from the middle of a long run
        follows; when F has an eigenvalue of modulus >= 1 (a random walk, a
        trend) there is none, and the prior is diffuse: 1e6 times the state's
        scale times the identity (statsmodels' approximate diffuse
        initialisation, relative to the data's scale).  See
        :ref:`the user guide <lgssm_initial_state>`.
    initial_state : {"auto", "diffuse"}, default="auto"
        The prior of the first state of each sequence.  "auto": N(mu0,
        Sigma0) with the initial values above (the given ones, or the
        stationary distribution, or the approximate diffuse 1e6 prior).
        "diffuse": the exact diffuse initial state (Koopman's exact diffuse
        filter and smoother): every state coordinate has an infinite prior
        variance, taken to the limit exactly, so the first rows set the
        state (statsmodels' ``initialization="diffuse"``, the default of its
        ``UnobservedComponents(use_exact_diffuse=True)``); ``score`` is then
        the diffuse log-likelihood (statsmodels' definition).  mu0 and Sigma0
        drop out: ``initial_state_mean_`` and ``initial_state_covariance_``
        are zero (P_* = 0) and are not learned, and their ``*_init`` must be
        None.  :meth:`filter`, :meth:`smooth`, :meth:`transform`,
        :meth:`score`, :meth:`forecast`, EM (batch) and ``fit_method="mle"``
        use it; the online filter and
        stochastic EM (:meth:`filter_update`, :meth:`filter_stream`,
        :meth:`partial_fit`, ``learning_method="online"``) and
        :meth:`sample` need a proper prior and refuse it.  See
        :ref:`the user guide <lgssm_exact_diffuse>`.
    init : {"subspace", "factor_analysis"}, default="subspace"
        Where EM starts for the parameters given no initial value.
        "subspace": F, H, Q, R from subspace identification
        (:func:`skseq.inference.subspace.subspace_identification`, canonical
        variate analysis of the data's block Hankel matrices, a consistent
        estimate that does not depend on a guess), the rest as below.  It is
        not used, and "factor_analysis" applies, with controls, when an
        initial value other than R and d is given (those fix the state's
        basis), or when the sequences hold too few complete windows of
        ``2 * n_lags`` rows (the default horizon of
        :func:`~skseq.inference.subspace.subspace_identification`);
        it is deterministic, so the ``n_init`` restarts coincide.
        "factor_analysis": the defaults of F, H, Q, R described above (the
        other parameters' defaults are the same for both).  See
        :ref:`the user guide <lgssm_subspace>`.
    n_init : int, default=1
        Number of initialisations; the best (by log-likelihood) is kept.
    random_state : int, RandomState instance or None, default=None
        Seeds the perturbation of the initial loadings.
    n_jobs : int, default=None
        Threads for the E step, over blocks of whole sequences (the kernel
        releases the GIL), and with ``fit_method="mle"`` for every gradient
        and for the rows' scores.  ``None`` means 1.
    verbose : int, default=0
        Print one line per EM iteration (per :meth:`partial_fit` call: the
        batch's log-likelihood and the rows seen so far) to stderr.

    acceleration : {"squarem", None}, default="squarem"
        "squarem": batch :meth:`fit` accelerates EM with SQUAREM (see Notes):
        ``monitor_.history`` holds the log-likelihood of every accepted
        iterate.  None: plain EM, whose ``monitor_.history`` is the sequence
        of EM log-likelihoods (pykalman's and the MATLAB reference's
        iterations).  Stochastic EM is never accelerated.
    learning_method : {"batch", "online"}, default="batch"
        How :meth:`fit` runs EM: classical EM over all sequences, or
        stochastic EM over minibatches of ``batch_size`` whole sequences.
    learning_decay : float, default=0.6
        kappa in the step size rho_t = (learning_offset + t) ** -kappa of
        stochastic EM (:meth:`partial_fit` and online fit); in (0.5, 1].
    learning_offset : float, default=0.0
        tau >= 0 in that step size.
    total_samples : float, default=None
        N, the number of rows the statistics are scaled to before the M step
        (None: all rows seen so far).
    batch_size : int, default=32
        Sequences per minibatch when ``learning_method="online"``.
    fit_method : {"em", "mle"}, default="em"
        How :meth:`fit` estimates the parameters.  "em": EM (above).  "mle":
        exact maximum likelihood, L-BFGS-B on the exact log-likelihood with
        its analytic gradient from one smoother pass (the Fisher identity),
        over unconstrained coordinates: the learned matrices and offsets as
        free entries, the learned covariances by Cholesky factors with log
        diagonals (:mod:`skseq.inference.kalman_mle`); after ``mle_em_iter``
        EM iterations from the initialisation.  It also sets
        ``log_likelihood_``, ``params_``, ``mle_parameter_names_`` and, unless
        ``cov_type`` is None, ``cov_params_`` and ``bse_``.  Batch only
        (``learning_method="batch"``).
    cov_type : {"opg", "oim"} or None, default="opg"
        The standard errors of ``fit_method="mle"``: "opg", from the outer
        product of the rows' analytic scores (statsmodels' default; under
        ``initial_state="diffuse"``, central differences of the rows' log
        predictive densities, as statsmodels computes its scores); "oim",
        from the observed information, the Hessian of the log-likelihood by
        central differences of its analytic gradient (statsmodels'
        ``cov_type="approx"``); None: none.  By the delta method from the
        unconstrained coordinates.
    mle_em_iter : int, default=5
        EM iterations (plain, unaccelerated) before L-BFGS-B when
        ``fit_method="mle"``; 0 starts L-BFGS-B at the initialisation.
    fixed_params : dict of str to array-like, default=None
        With ``fit_method="mle"``: entries of learned parameters held at given
        values while the others are estimated (statsmodels' ``fix_params``,
        pykalman #115), keyed by the names of ``params``.  Each value is an
        array of the parameter's shape holding the value of every held entry
        and NaN where the entry is estimated, or a boolean mask of the
        entries held at their ``*_init`` value (True: held).  A covariance
        holds all its entries, or its off-diagonal ones at 0: a diagonal
        covariance, estimated by its log variances, any of which may be held
        too.  The held values are set after the initialisation and again
        after the ``mle_em_iter`` EM iterations (whose M step knows no entry
        constraint); ``params_`` and ``mle_parameter_names_`` list the
        estimated entries only, and ``bse_`` is NaN at a held one.  A
        parameter held whole is simply left out of ``params``.
    Attributes
    ----------
    transition_matrix_ : ndarray of shape (k, k)
    observation_matrix_ : ndarray of shape (n_features, k)
    transition_covariance_ : ndarray of shape (k, k)
    observation_covariance_ : ndarray of shape (n_features, n_features)
    transition_offset_ : ndarray of shape (k,)
    observation_offset_ : ndarray of shape (n_features,)
    control_matrix_ : ndarray of shape (k, n_controls)
        Zero columns when fitted without controls.
    initial_state_mean_ : ndarray of shape (k,)
    initial_state_covariance_ : ndarray of shape (k, k)
    n_controls_ : int
        Number of control inputs seen in :meth:`fit`.
    n_iter_ : int
        EM iterations run (E steps, for the best initialisation); L-BFGS-B
        iterations with ``fit_method="mle"``.
    converged_ : bool
        Whether EM stopped because the gain fell below ``tol`` (rather than
        at ``n_iter``).
    monitor_ : ConvergenceMonitor
        ``monitor_.history`` is the log-likelihood of each iteration: every
        E step with ``acceleration=None``, every accepted one with SQUAREM
        (present before ``fit``; a monitor assigned to it is kept by ``fit``
        and decides when EM stops).
    lower_bound_ : float
        The last value of ``monitor_.history``.
    n_batch_iter_ : int
        Stochastic-EM steps taken (by :meth:`partial_fit` or online fit).
    batch_log_likelihood_ : float
        After :meth:`partial_fit`: the log-likelihood of its batch (given the
        stream before it), under the parameters before the step.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when X has feature names.
    filter_state_mean_, filter_state_covariance_ : ndarray
        The filtered state of the stream driven by :meth:`filter_update` or
        :meth:`partial_fit` (present once one of them has been called or
        :meth:`reset_filter` was given a history).
    filtered_state_ : tuple of ndarray
        ``(filter_state_mean_, filter_state_covariance_)``, under the name the
        HMMs give the filtered state of a stream's last row.
    log_likelihood_ : float
        With ``fit_method="mle"``: the maximised exact log-likelihood.
    mle_parameter_names_ : list of str
        With ``fit_method="mle"``: the estimated coordinates,
        ``"transition_covariance[0,0]"`` and so on (the free entries of each
        learned parameter; the lower triangle of a covariance).
    params_ : ndarray of shape (n_estimated,)
        With ``fit_method="mle"``: their estimates.
    cov_params_ : ndarray of shape (n_estimated, n_estimated)
        With ``fit_method="mle"`` and a ``cov_type``: the covariance of
        ``params_`` (the pseudo-inverse of the information where the state
        basis leaves it singular).
    bse_ : dict of str to ndarray
        With ``fit_method="mle"`` and a ``cov_type``: the standard error of
        every entry of each learned parameter, of its shape (NaN for an entry
        held fixed).

    See Also
    --------
    skseq.inference.kalman.kalman_filter, skseq.inference.kalman.kalman_smoother :
        The same inference on plain arrays, with user-given parameters.

    Notes
    -----
    Each EM iteration runs the Kalman filter (Joseph-form update, Cholesky
    solves) and the Rauch-Tung-Striebel smoother over every sequence and sums
    the expected sufficient statistics; the M step solves the two linear
    regressions z_t ~ (z_{t-1}, u_t, 1) and x_t ~ (z_t, 1) in closed form.
    Missing entries of a partly observed row are integrated out exactly; a
    row with no observed entry drops out of the observation regression (as
    in pykalman and Shumway and Stoffer's EM), so R is averaged over the
    observed rows.  The log-likelihood never decreases.  EM for this model
    can crawl along ridges of the likelihood (the two variances of a local
    level model), so by default batch :meth:`fit` accelerates it with
    SQUAREM (``acceleration="squarem"``): every second iteration
    extrapolates along the last two EM steps, kept only when it does not
    lower the log-likelihood (see the user guide).  The state basis is not
    identifiable (any invertible change of basis of z gives the same
    distribution of x): compare fitted models by basis-invariant quantities
    such as the log-likelihood or the autocovariances of x.

    Time-varying matrices (pykalman's 3-D arrays): set the fitted
    ``transition_matrix_``, ``transition_covariance_``, ``transition_offset_``
    (``n_timesteps - 1`` steps) or ``observation_matrix_``,
    ``observation_covariance_``, ``observation_offset_`` (``n_timesteps``
    steps) to arrays with a leading time axis; :meth:`filter`,
    :meth:`smooth`, :meth:`transform`, :meth:`score`,
    :meth:`score_sequences` and :meth:`sample` then use each step's arrays,
    on sequences of ``n_timesteps`` rows.  EM does not learn them: ``fit``
    and ``partial_fit`` refuse a ``*_init`` with a time axis, and
    ``forecast``, the online filter and ``aic``/``bic`` need constant
    matrices (user guide, "Time-varying matrices").

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.lds import LinearGaussianSSM
    >>> rng = np.random.default_rng(0)
    >>> model = LinearGaussianSSM(n_components=1, n_iter=300, random_state=0)
    >>> X = np.cumsum(rng.normal(size=(200, 1)), axis=0) * [1.0, 0.5]
    >>> X = X + rng.normal(scale=0.3, size=X.shape)
    >>> model.fit(X, lengths=[100, 100]).transform(X, lengths=[100, 100]).shape
    (200, 1)
    >>> means, covariances = model.forecast(X, 3, lengths=[100, 100])
    >>> means.shape, covariances.shape
    ((6, 2), (6, 2, 2))
    """

    # Gaussian densities are never zero: a log-likelihood of -inf is an overflow.
    _densities_never_zero = True
    _proper_failure = (
        "a covariance of the Kalman recursions lost positive definiteness in floating "
        "point (the parameters are too ill-conditioned for these data)"
    )

    @property
    def _numerical_failure(self):
        """What a NaN log-likelihood means (BaseEM's message)."""
        if self.initial_state != "diffuse":
            return self._proper_failure
        return (
            f"{self._proper_failure}, or, with initial_state='diffuse', the observations of "
            "a sequence do not determine its state (too few observed rows, or an "
            "observation matrix that leaves a state direction unobserved)"
        )

    __metadata_request__fit = {"sequence_ids": True, "controls": True}
    __metadata_request__score = {"sequence_ids": True, "sample_weight": True, "controls": True}
    __metadata_request__transform = {"sequence_ids": True, "controls": True}
    __metadata_request__partial_fit = {"sequence_ids": True, "controls": True}

    # The one not-fitted message of every method that needs fitted parameters.
    _not_fitted_message = _NOT_FITTED + _KNOWN_MATRICES

    @foreign_keywords_hinted(_PYKALMAN_HINTS, "pykalman", _KNOWN_MATRICES)
    def __init__(
        self,
        n_components=1,
        *,
        n_iter=100,
        tol=1e-4,
        params="all",
        transition_matrix_init=None,
        observation_matrix_init=None,
        transition_covariance_init=None,
        observation_covariance_init=None,
        transition_offset_init=None,
        observation_offset_init=None,
        control_matrix_init=None,
        initial_state_mean_init=None,
        initial_state_covariance_init=None,
        initial_state="auto",
        init="subspace",
        n_init=1,
        random_state=None,
        n_jobs=None,
        verbose=0,
        acceleration="squarem",
        learning_method="batch",
        learning_decay=0.6,
        learning_offset=0.0,
        total_samples=None,
        batch_size=32,
        fit_method="em",
        cov_type="opg",
        mle_em_iter=5,
        fixed_params=None,
    ):
        self.n_components = n_components
        self.n_iter = n_iter
        self.tol = tol
        self.params = params
        self.transition_matrix_init = transition_matrix_init
        self.observation_matrix_init = observation_matrix_init
        self.transition_covariance_init = transition_covariance_init
        self.observation_covariance_init = observation_covariance_init
        self.transition_offset_init = transition_offset_init
        self.observation_offset_init = observation_offset_init
        self.control_matrix_init = control_matrix_init
        self.initial_state_mean_init = initial_state_mean_init
        self.initial_state_covariance_init = initial_state_covariance_init
        self.initial_state = initial_state
        self.init = init
        self.n_init = n_init
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.acceleration = acceleration
        self.learning_method = learning_method
        self.learning_decay = learning_decay
        self.learning_offset = learning_offset
        self.total_samples = total_samples
        self.batch_size = batch_size
        self.fit_method = fit_method
        self.cov_type = cov_type
        self.mle_em_iter = mle_em_iter
        self.fixed_params = fixed_params

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags

    # -- validation -------------------------------------------------------------

    def _check_params(self):
        """Validate the hyperparameters (see :meth:`BaseEM._check_params`);
        returns the names of the parameters EM learns."""
        super()._check_params()
        return self._learned()

    def _learned(self):
        """The names of the parameters EM (or maximum likelihood) learns: ``params``,
        without the initial state's under the exact diffuse initial state."""
        learned = _check_params_argument(self.params)
        if self.initial_state != "diffuse":
            return learned
        named = learned & INITIAL_STATE_NAMES
        if named and self.params != "all":
            raise ValueError(
                f"params names {sorted(named)}, but initial_state='diffuse' makes the first "
                "state's prior flat: mu0 and Sigma0 are not parameters. Drop them from "
                "params, or use initial_state='auto'."
            )
        return learned - INITIAL_STATE_NAMES

    def _diffuse(self):
        """The inference layer's ``diffuse=``: True (every state coordinate) or None."""
        return True if self.initial_state == "diffuse" else None

    def _refuse_diffuse(self, what):
        """``what`` needs a proper prior for the first state."""
        if self.initial_state == "diffuse":
            raise ValueError(
                f"{type(self).__name__}.{what} needs a proper prior for the first state, "
                "and initial_state='diffuse' has none (its variance is infinite). Use "
                "initial_state='auto' for it."
            )

    def _parameter_rules(self):
        return {
            "params": lambda value, name: _check_params_argument(value),
            "init": option_rule(*INIT_METHODS),
            "initial_state": option_rule(*INITIAL_STATES),
            "fit_method": option_rule(*FIT_METHODS),
            "cov_type": optional(option_rule(*COV_TYPES)),
            "mle_em_iter": integer_rule(low=0),
            "fixed_params": check_fixed_params_argument,
        }

    def _validate_sequences(self, X, y, lengths, sequence_ids, controls, *, reset, method):
        """Validate X, the sequence split and the controls for any method."""
        X, offsets = validate_sequences(
            self, X, y, lengths, sequence_ids, reset=reset, method=method
        )
        # The data-scale rule of every Gaussian family, for fit and inference alike.
        check_data_scale(X, "mean")
        n_controls = self.n_controls_ if not reset else _count_controls(controls)
        controls = check_controls(controls, X.shape[0], n_controls)
        return X, offsets, controls

    @staticmethod
    def _stack(X, controls):
        """The array the E step works on: ``[X, controls]``, C-contiguous float64."""
        return np.ascontiguousarray(np.hstack([X, controls]), dtype=np.float64)

    def _model(self):
        """The current parameters packed for the kernels, unchecked.

        Only for EM's own iterates, which :meth:`_initialize` and
        :meth:`_mstep` build with the right shapes; every public method goes
        through :meth:`_checked_model` instead.
        """
        return make_model(LGSSMParameters(*(getattr(self, f"{name}_") for name in PARAMETER_NAMES)))

    def _checked_parameters(self, constant_only=None):
        """The fitted parameters, validated before any kernel sees them.

        They may have been set by hand, or ``n_components`` changed with
        ``set_params`` after fitting: every array must be finite, of the shape
        that ``n_components``, ``n_features_in_`` and ``n_controls_`` imply
        (so that the shapes agree with each other and with the data), and
        each covariance symmetric positive definite.  Returns the validated
        copies, as the :class:`~skseq.inference.kalman.LGSSMParameters` that
        the inference functions take.  The transition and observation arrays
        may have a leading time axis (a time-varying system, user guide
        "Time-varying matrices"), unless ``constant_only`` names the method
        that needs a constant model.
        """
        check_is_fitted(self, msg=self._not_fitted_message)
        PARAMETER_RULES["n_components"](self.n_components, "n_components")
        check_scalar_param(self.n_features_in_, "n_features_in_", "int", low=1)
        check_scalar_param(self.n_controls_, "n_controls_", "int", low=0)
        k, p, m = self.n_components, self.n_features_in_, self.n_controls_
        values = []
        for name in PARAMETER_NAMES:
            value = getattr(self, f"{name}_", None)
            if value is None:
                raise ValueError(f"{type(self).__name__} has no fitted {name}_; refit it.")
            values.append(value)
        try:
            parameters = check_lgssm_parameters(
                LGSSMParameters(*values),
                p,
                n_state=k,
                n_controls=m,
                suffix="_",
                semidefinite_initial=self.initial_state == "diffuse",
            )
        except ValueError as error:
            raise ValueError(
                f"Invalid fitted parameters of {type(self).__name__} (n_components={k}, "
                f"n_features_in_={p}, n_controls_={m}): {error} Refit the model after "
                "changing n_components, or set every fitted array consistently."
            ) from None
        if constant_only is not None:
            refuse_time_varying(parameters, f"{type(self).__name__}.{constant_only}", suffix="_")
        return parameters

    def _checked_model(self, constant_only=None):
        """The validated fitted parameters packed for the kernels."""
        return make_model(self._checked_parameters(constant_only))

    # -- the EM protocol ----------------------------------------------------------

    def _estep(self, X, offsets, buffers=None):
        """Sufficient statistics and log-likelihood of a block of whole sequences.

        ``X`` is the stacked ``[X, controls]`` array (see :meth:`_stack`).  The
        statistics are sums over sequences and rows: they add across disjoint
        blocks and scale linearly, as stochastic EM needs.  The Kalman
        recursions keep no work arrays between E steps (``buffers`` unused).
        """
        n_features = self.n_features_in_
        model = self._model()
        statistics, sequence_log_likelihood = _em_statistics_bounded(
            model,
            X[:, :n_features],
            X[:, n_features:],
            offsets,
            self._estep_bytes_per_row(),
            # the exact diffuse E step works on whole sequences (no chunked path)
            np.eye(model.n_state) if self.initial_state == "diffuse" else None,
        )
        return SufficientStatistics(statistics), float(sequence_log_likelihood.sum())

    def _estep_bytes_per_row(self):
        """Bytes per row of the whole-sequence E step's scratch: the filtered
        means and covariances and the log predictive density."""
        k = self.n_components
        return 8 * (k * k + k + 1)

    def _mstep(self, statistics):
        """Closed-form maximisation of the expected complete-data log-likelihood.

        The expected log-likelihood separates into three independent blocks
        (the initial state, the transition regression and the observation
        regression); each is maximised exactly over its learned parameters,
        so EM never decreases the log-likelihood.  A block with no data (no
        transitions, say) is left unchanged.
        """
        learned = self._learned()
        k, m = self.n_components, self.n_controls_
        feature_scale, state_scale = self._floor_scales()

        n_sequences = float(statistics["n_sequences"])
        if n_sequences > 0:
            initial_mean = statistics["initial_sum"] / n_sequences
            if "initial_state_mean" in learned:
                self.initial_state_mean_ = initial_mean
            if "initial_state_covariance" in learned:
                mean = self.initial_state_mean_
                cross = np.outer(mean, statistics["initial_sum"])
                self.initial_state_covariance_ = _floor_covariance(
                    (statistics["initial_outer"] - cross - cross.T) / n_sequences
                    + np.outer(mean, mean),
                    state_scale,
                )

        regressor = statistics["transition_regressor"]
        n_transitions = regressor[-1, -1]
        if n_transitions > 0:
            weights = np.hstack(
                [self.transition_matrix_, self.control_matrix_, self.transition_offset_[:, None]]
            )
            columns = np.concatenate(
                [
                    np.full(k, "transition_matrix" in learned),
                    np.full(m, "control_matrix" in learned),
                    ["transition_offset" in learned],
                ]
            )
            weights = _solve_regression(statistics["transition_cross"], regressor, weights, columns)
            self.transition_matrix_ = weights[:, :k]
            self.control_matrix_ = weights[:, k : k + m]
            self.transition_offset_ = weights[:, -1]
            if "transition_covariance" in learned:
                self.transition_covariance_ = _floor_covariance(
                    _residual_covariance(
                        statistics["transition_target"],
                        statistics["transition_cross"],
                        regressor,
                        weights,
                        n_transitions,
                    ),
                    state_scale,
                )

        regressor = statistics["observation_regressor"]
        n_rows = regressor[-1, -1]
        if n_rows > 0:
            weights = np.hstack([self.observation_matrix_, self.observation_offset_[:, None]])
            columns = np.concatenate(
                [
                    np.full(k, "observation_matrix" in learned),
                    ["observation_offset" in learned],
                ]
            )
            weights = _solve_regression(
                statistics["observation_cross"], regressor, weights, columns
            )
            self.observation_matrix_ = weights[:, :k]
            self.observation_offset_ = weights[:, -1]
            if "observation_covariance" in learned:
                self.observation_covariance_ = _floor_covariance(
                    _residual_covariance(
                        statistics["observation_target"],
                        statistics["observation_cross"],
                        regressor,
                        weights,
                        n_rows,
                    ),
                    feature_scale,
                )

    def _floor_scales(self):
        """``(feature_scale, state_scale)`` of the covariance floors, fixed once per fit.

        :meth:`_initialize` measures them on the data.  A model that was not
        initialised here (parameters set by hand before ``partial_fit``) takes
        them from its observation covariance, once.
        """
        scales = getattr(self, "_covariance_scales", None)
        if scales is None:
            feature_scale = np.diag(self.observation_covariance_).copy()
            scales = (feature_scale, _state_scale(self.observation_matrix_, feature_scale))
            self._covariance_scales = scales
        return scales

    # -- SQUAREM: the parameters as unit-free coordinates ------------------------

    def _acceleration_coordinates(self, X):
        """The learned parameters as unit-free coordinates for SQUAREM.

        Each matrix is divided by its units (the square roots of the floor
        scales for the data and the state, the root mean square of each
        control column), each covariance whitened by its units and replaced
        by its matrix logarithm: the extrapolation's step length then does
        not change when the data (or the controls) are rescaled, and every
        point maps back to positive-definite covariances.  None when EM
        learns nothing (no direction to extrapolate along).
        """
        learned = sorted(self._learned())
        if not learned:
            return None
        feature_scale, state_scale = self._floor_scales()
        k = self.n_components
        feature = np.sqrt(feature_scale)
        state = np.full(k, np.sqrt(state_scale))
        control = np.sqrt(np.mean(X[:, self.n_features_in_ :] ** 2, axis=0))
        control = np.where(control > 0, control, 1.0)
        units = {
            "transition_matrix": ("real", np.outer(state, 1.0 / state)),
            "observation_matrix": ("real", np.outer(feature, 1.0 / state)),
            "control_matrix": ("real", np.outer(state, 1.0 / control)),
            "transition_offset": ("real", state),
            "observation_offset": ("real", feature),
            "initial_state_mean": ("real", state),
            "transition_covariance": ("covariance", state),
            "observation_covariance": ("covariance", feature),
            "initial_state_covariance": ("covariance", state),
        }
        return ParameterCoordinates({name: units[name] for name in learned})

    def _feasible_parameters(self, parameters):
        """An extrapolated point with its covariances floored as the M step's are."""
        feature_scale, state_scale = self._floor_scales()
        parameters = dict(parameters)
        for name in self._learned() & COVARIANCE_NAMES:
            scale = feature_scale if name == "observation_covariance" else state_scale
            parameters[name] = _floor_covariance(parameters[name], scale)
            if not np.all(np.isfinite(parameters[name])):
                return None
        return parameters

    def _n_parameters(self):
        """Number of learned free parameters (for AIC / BIC).

        Counts every entry of the learned matrices and vectors and the
        distinct entries of the learned covariances, without discounting the
        k^2 degrees of freedom of the (non-identifiable) state basis.  After
        ``fit_method="mle"`` (and no :meth:`partial_fit` step since), the
        estimated coordinates (``mle_parameter_names_``: the same count, less
        the entries ``fixed_params`` holds).
        """
        if "mle_parameter_names_" in self.__dict__ and not getattr(self, "n_batch_iter_", 0):
            return len(self.mle_parameter_names_)
        k, p, m = self.n_components, self.n_features_in_, self.n_controls_
        sizes = {
            "transition_matrix": k * k,
            "observation_matrix": p * k,
            "transition_covariance": k * (k + 1) // 2,
            "observation_covariance": p * (p + 1) // 2,
            "transition_offset": k,
            "observation_offset": p,
            "control_matrix": k * m,
            "initial_state_mean": k,
            "initial_state_covariance": k * (k + 1) // 2,
        }
        return int(sum(sizes[name] for name in self._learned()))

    def _n_data_points(self, X):
        # X is the stacked [X, controls]: only the observations count.
        observations = X[:, : self.n_features_in_]
        return int(observations.size - np.count_nonzero(np.isnan(observations)))

    def _get_parameters(self):
        return {name: np.copy(getattr(self, f"{name}_")) for name in PARAMETER_NAMES}

    def _set_parameters(self, parameters):
        for name in PARAMETER_NAMES:
            setattr(self, f"{name}_", np.copy(parameters[name]))

    # -- fitting ------------------------------------------------------------------

    def fit(self, X, y=None, *, lengths=None, sequence_ids=None, controls=None):
        """Estimate the parameters by EM, or by exact maximum likelihood (``fit_method``).

        A sequence whose filtered states would pass scikit-learn's
        ``working_memory`` budget (``sklearn.config_context(working_memory=MiB)``,
        1024 MiB by default) gets its E step by forward-only smoothing in
        chunks: memory that does not grow with its length, the same
        statistics (user guide, "One long sequence in bounded memory").

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows of all sequences concatenated in time order; NaN marks a
            missing entry (a sequence may not be entirely NaN).
        y : None
            Ignored; present for scikit-learn.  A ``y`` whose length differs
            from n_samples is taken for hmmlearn-style positional lengths and
            rejected with a TypeError.
        lengths : array-like of int, optional
            Length of each sequence (hmmlearn's form).
        sequence_ids : array-like of shape (n_samples,), optional
            One label per row; rows of a sequence must be contiguous.  Routed
            by metadata routing, so ``GroupKFold`` keeps sequences whole.
        controls : array-like of shape (n_samples, n_controls), optional
            Known inputs u_t; the model then has a control matrix G.

        Returns
        -------
        self : LinearGaussianSSM
        """
        self._check_params()
        self._refuse_time_varying_init()
        X, offsets, controls = self._validate_sequences(
            X, y, lengths, sequence_ids, controls, reset=True, method="fit"
        )
        self._reject_empty_sequences(X, offsets)
        self.n_controls_ = controls.shape[1]
        self._n_features_out = self.n_components
        self._reset_stream()
        if self.fixed_params and self.fit_method != "mle":
            raise ValueError(
                "fixed_params holds entries of the parameters during exact maximum "
                "likelihood: it takes fit_method='mle' (EM's M step has no entry "
                f"constraints), got fit_method={self.fit_method!r}."
            )
        if self.learning_method == "online":
            self._refuse_diffuse("fit with learning_method='online'")
        if self.fit_method == "mle":
            if self.learning_method != "batch":
                raise ValueError(
                    "fit_method='mle' maximises the log-likelihood of all the data: it takes "
                    f"learning_method='batch', got learning_method={self.learning_method!r}."
                )
            return self._fit_mle(self._stack(X, controls), offsets)
        for name in ("log_likelihood_", "mle_parameter_names_", "params_", "cov_params_", "bse_"):
            self.__dict__.pop(name, None)
        self._fit_em(self._stack(X, controls), offsets)
        return self

    def _refuse_time_varying_init(self):
        """EM learns constant matrices only: refuse ``*_init`` arrays with a time axis."""
        for name, ndim in TIME_VARYING_NDIM.items():
            value = getattr(self, f"{name}_init")
            if value is not None and not isinstance(value, str) and np.ndim(value) > ndim:
                raise ValueError(
                    f"{name}_init has a leading time axis (shape {np.shape(value)}): fit "
                    "does not learn time-varying matrices (neither EM nor fit_method='mle'). "
                    "Fit a constant model, or set the "
                    f"fitted {name}_ to the time-varying array and use filter, smooth and "
                    "score (user guide, 'Time-varying matrices')."
                )

    @staticmethod
    def _reject_empty_sequences(X, offsets):
        observed_per_sequence = np.add.reduceat(
            (~np.isnan(X)).any(axis=1).astype(np.intp), offsets[:-1]
        )
        empty = np.flatnonzero(observed_per_sequence == 0)
        if empty.size:
            raise ValueError(
                f"Sequence(s) {empty[:5].tolist()} are entirely NaN: nothing to learn from; "
                "drop them."
            )

    def fit_transform(self, X, y=None, *, lengths=None, sequence_ids=None, controls=None):
        """Fit, then return the smoothed state means of X.

        Parameters are those of :meth:`fit`.

        Returns
        -------
        states : ndarray of shape (n_samples, n_components)
        """
        if y is not None:  # named here: fit would name itself
            check_y_is_not_lengths(y, _num_samples(X), "fit_transform")
        return self.fit(
            X, y, lengths=lengths, sequence_ids=sequence_ids, controls=controls
        ).transform(X, lengths=lengths, sequence_ids=sequence_ids, controls=controls)

    # -- inference with the fitted model -----------------------------------------

    def _prepare(self, X, y=None, lengths=None, sequence_ids=None, controls=None, method=None):
        check_is_fitted(self, msg=self._not_fitted_message)
        X, offsets, controls = self._validate_sequences(
            X, y, lengths, sequence_ids, controls, reset=False, method=method
        )
        return X, offsets, controls

    @staticmethod
    def _check_finite(sequence_log_likelihood, name="X", diffuse=False):
        if diffuse and np.isnan(sequence_log_likelihood).any():
            raise np.linalg.LinAlgError(
                "The exact diffuse smoother failed: a sequence is too short (or ends inside "
                "its diffuse period) for its observations to determine the state, or a "
                "covariance lost positive definiteness."
            )
        if np.isnan(sequence_log_likelihood).any():
            raise np.linalg.LinAlgError(
                "The Kalman recursions failed numerically (a covariance lost positive "
                "definiteness); the fitted parameters are too ill-conditioned."
            )
        check_log_likelihood_overflow(sequence_log_likelihood, name)

    def score(
        self, X, y=None, *, lengths=None, sequence_ids=None, controls=None, sample_weight=None
    ):
        """Log-likelihood of X under the model, summed over sequences.

        Parameters
        ----------
        X, y, lengths, sequence_ids, controls
            As in :meth:`fit`.
        sample_weight : array-like of shape (n_samples,), optional
            Weights of the rows' one-step predictive log densities
            log p(x_t | x_1..x_{t-1}), which sum to the log-likelihood; with
            unit weights the score is log p(X).

        Returns
        -------
        log_likelihood : float
        """
        X, offsets, controls = self._prepare(X, y, lengths, sequence_ids, controls, "score")
        sequence_log_likelihood, log_predictive = self._filter_over_blocks(X, controls, offsets)
        self._check_finite(sequence_log_likelihood)
        if sample_weight is None:
            return float(sequence_log_likelihood.sum())
        sample_weight = _check_sample_weight(sample_weight, X)
        return float(np.dot(sample_weight, log_predictive))

    def score_sequences(self, X, y=None, *, lengths=None, sequence_ids=None, controls=None):
        """Log-likelihood of each sequence.

        Parameters are those of :meth:`fit`.

        Returns
        -------
        log_likelihood : ndarray of shape (n_sequences,)
        """
        X, offsets, controls = self._prepare(
            X, y, lengths, sequence_ids, controls, "score_sequences"
        )
        sequence_log_likelihood, _ = self._filter_over_blocks(X, controls, offsets)
        self._check_finite(sequence_log_likelihood)
        return sequence_log_likelihood

    def _filter_over_blocks(self, X, controls, offsets):
        """Each sequence's log-likelihood and each row's one-step predictive log
        density, by the Kalman filter over blocks of sequences in ``n_jobs``
        threads or on the joblib backend's workers."""
        # Each block packs the kernel's model itself: it cannot be pickled (to
        # a dask worker), and packing the checked parameters is cheap.
        parameters = self._checked_parameters()
        check_time_axis(parameters, offsets)
        if self.initial_state == "diffuse":
            diffuse = np.eye(self.n_components)
            results = self._over_sequence_blocks(
                lambda X, controls, offsets: _filter_offsets(
                    make_model(parameters), X, controls, offsets, diffuse
                )[5:7],
                offsets,
                X,
                controls,
            )
        else:
            results = self._over_sequence_blocks(
                lambda X, controls, offsets: _filter_last_offsets(
                    make_model(parameters), X, controls, offsets
                )[2:],
                offsets,
                X,
                controls,
            )
        return tuple(np.concatenate(parts) for parts in zip(*results))

    def aic(self, X, lengths=None, *, sequence_ids=None, controls=None):
        """Akaike information criterion on X (lower is better).

        Parameters are those of :meth:`fit` (``lengths`` also positional, as
        in hmmlearn: ``aic`` has no ``y``).

        Returns
        -------
        aic : float
        """
        self._checked_parameters(constant_only="aic")
        return self._information_criterion(
            "aic", X, lengths=lengths, sequence_ids=sequence_ids, controls=controls
        )

    def bic(self, X, lengths=None, *, sequence_ids=None, controls=None):
        """Bayesian information criterion on X (lower is better).

        Parameters are those of :meth:`fit` (``lengths`` also positional, as
        in hmmlearn: ``bic`` has no ``y``).

        Returns
        -------
        bic : float
        """
        self._checked_parameters(constant_only="bic")
        return self._information_criterion(
            "bic", X, lengths=lengths, sequence_ids=sequence_ids, controls=controls
        )

    @lengths_by_keyword
    def transform(self, X, *, lengths=None, sequence_ids=None, controls=None):
        """Smoothed state means E[z_t | x] of every row.

        Parameters
        ----------
        X, lengths, sequence_ids, controls
            As in :meth:`fit`.

        Returns
        -------
        states : ndarray of shape (n_samples, n_components)
        """
        result = self._states(
            _smoother_offsets, X, lengths, sequence_ids, controls, with_covariances=False
        )
        return result.smoothed_means

    def _states(self, inference, X, lengths, sequence_ids, controls, **options):
        """``inference`` (a filter or smoother core over offsets) on the checked X, whose
        log-likelihood must be finite."""
        X, offsets, controls = self._prepare(X, None, lengths, sequence_ids, controls)
        parameters = self._checked_parameters()
        check_time_axis(parameters, offsets)
        diffuse = () if self.initial_state != "diffuse" else (np.eye(self.n_components),)
        result = inference(make_model(parameters), X, controls, offsets, *diffuse, **options)
        self._check_finite(result.sequence_log_likelihood, diffuse=bool(diffuse))
        return result

    @lengths_by_keyword
    def filter(self, X, *, lengths=None, sequence_ids=None, controls=None):
        """Filtered states: mean and covariance of z_t given x_1..x_t.

        Parameters are those of :meth:`fit`.

        Returns
        -------
        means : ndarray of shape (n_samples, n_components)
        covariances : ndarray of shape (n_samples, n_components, n_components)
        """
        result = self._states(_filter_offsets, X, lengths, sequence_ids, controls)
        return result.filtered_means, result.filtered_covariances

    @lengths_by_keyword
    def smooth(self, X, *, lengths=None, sequence_ids=None, controls=None):
        """Smoothed states: mean and covariance of z_t given the whole sequence.

        Parameters are those of :meth:`fit`.

        Returns
        -------
        means : ndarray of shape (n_samples, n_components)
        covariances : ndarray of shape (n_samples, n_components, n_components)
        """
        result = self._states(_smoother_offsets, X, lengths, sequence_ids, controls)
        return result.smoothed_means, result.smoothed_covariances

    @lengths_by_keyword
    def forecast(
        self, X, n_steps, *, lengths=None, sequence_ids=None, controls=None, future_controls=None
    ):
        """Predictive distribution of the next ``n_steps`` observations after each sequence.

        Parameters
        ----------
        X, lengths, sequence_ids, controls
            The observed sequences, as in :meth:`fit`.
        n_steps : int
            Forecast horizon, >= 1.
        future_controls : array-like of shape (n_sequences * n_steps, n_controls), optional
            The controls of the forecast steps, sequence after sequence;
            required when the model has controls.

        Returns
        -------
        means : ndarray of shape (n_sequences * n_steps, n_features)
            Row ``s * n_steps + h`` is E[x_{T_s + h + 1} | sequence s].
        covariances : ndarray of shape (n_sequences * n_steps, n_features, n_features)
        """
        if np.ndim(n_steps) == 1:
            raise TypeError(
                "forecast(X, n_steps) got an array for n_steps; pass sequence lengths by "
                "keyword: forecast(X, n_steps, lengths=...)."
            )
        check_scalar_param(n_steps, "n_steps", "int", low=1)
        X, offsets, controls = self._prepare(X, None, lengths, sequence_ids, controls)
        model = self._checked_model(constant_only="forecast")
        if self.initial_state == "diffuse":
            last_means, last_covariances, sequence_log_likelihood = self._last_states_diffuse(
                model, X, controls, offsets
            )
        else:
            last_means, last_covariances, sequence_log_likelihood, _ = _filter_last_offsets(
                model, X, controls, offsets
            )
        self._check_finite(sequence_log_likelihood)
        n_rows = (len(offsets) - 1) * n_steps
        check_forecast_size(n_rows, model.n_obs, n_steps)
        future_controls = check_controls(
            future_controls, n_rows, self.n_controls_, name="future_controls"
        )
        return tuple(_forecast(model, last_means, last_covariances, future_controls, n_steps))

    @staticmethod
    def _last_states_diffuse(model, X, controls, offsets):
        """The exact diffuse filter's last filtered state of every sequence; a
        sequence that ends inside its diffuse period has no proper one."""
        result = _filter_offsets(model, X, controls, offsets, np.eye(model.n_state))
        inside = np.flatnonzero(result.n_diffuse == np.diff(offsets))
        if inside.size:
            raise ValueError(
                f"Sequence(s) {inside[:5].tolist()} end inside their diffuse period "
                "(initial_state='diffuse'): their last state is not determined by the "
                "observations, so there is no forecast; give longer sequences."
            )
        last = offsets[1:] - 1
        return (
            result.filtered_means[last],
            result.filtered_covariances[last],
            result.sequence_log_likelihood,
        )

    def sample(self, n_samples=1, random_state=None, *, controls=None):
        """Draw one sequence from the model.

        Parameters
        ----------
        n_samples : int, default=1
            Length of the sequence.
        random_state : int, RandomState instance or None, default=None
        controls : array-like of shape (n_samples, n_controls), optional
            Required when the model has controls (the first row is unused).

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
            The observations.
        Z : ndarray of shape (n_samples, n_components)
            The hidden states.

        Notes
        -----
        The first state is drawn from N(mu0, Sigma0).  With the diffuse prior
        that a model without a stationary distribution gets by default (a
        random walk: see ``initial_state_covariance_init``) it can be anywhere
        in a huge range; set ``initial_state_mean_`` and
        ``initial_state_covariance_`` to simulate from a chosen start.
        """
        self._refuse_diffuse("sample")
        parameters = self._checked_parameters()
        check_scalar_param(n_samples, "n_samples", "int", low=1)
        check_time_axis(parameters, np.array([0, n_samples]), name="the sample")
        check_sample_size(n_samples, parameters)
        controls = check_controls(controls, n_samples, self.n_controls_)
        return tuple(_sample(parameters, n_samples, controls, check_random_state(random_state)))


def _count_controls(controls):
    """Number of control columns of a (possibly 1-D or None) controls argument."""
    if controls is None:
        return 0
    shape = np.shape(controls)
    if len(shape) == 1:
        return 1
    if len(shape) != 2:
        raise ValueError(f"controls must be 2-D (n_samples, n_controls), got shape {shape}.")
    return shape[1]
