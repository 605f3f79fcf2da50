"""Exact maximum likelihood for linear-Gaussian state-space models, on plain arrays.

Three reusable pieces (doc/user_guide/lgssm.rst, "Exact maximum likelihood"):

- :func:`lgssm_log_likelihood_gradient`: the exact log-likelihood and its
  analytic gradient with respect to every array of :class:`LGSSMParameters`
  from one filter and smoother pass, by the Fisher identity: the gradient of
  log p(x) is the expected gradient of the complete-data log-likelihood
  under the smoothed posterior, a linear function of the smoothed
  sufficient statistics EM sums (never finite differences over parameters);
  :func:`lgssm_score_obs` gives the same per row (the scores of the one-step
  predictive densities, by forward-only smoothing one row at a time);
- :class:`LGSSMParameterization`: a declared map between an unconstrained
  vector and the parameters (free entries, covariances by a Cholesky factor
  with log diagonal or by log variances, everything else held fixed), with
  the chain rule for the gradient and the Jacobian for the delta method;
  each parameter's rule is a block (:class:`FreeEntries`,
  :class:`CholeskyCovariance`, :class:`LogVariances`), and a model with more
  structure declares its own blocks on the same protocol (the structural
  models' :class:`SharedLogVariances`, :class:`CycleRotation`,
  :class:`StationaryAR`, :class:`Submatrices`), with optionally the
  stationary initial covariance of some coordinates;
- :func:`lgssm_maximum_likelihood` (L-BFGS-B on the unconstrained vector
  with the analytic gradient, optionally without the first rows of each
  sequence: statsmodels' ``loglikelihood_burn``) and :func:`lgssm_parameter_covariance`
  (standard errors from the outer product of the per-row scores or from the
  observed information, the Hessian by central differences of the analytic
  gradient).

:func:`lgssm_log_likelihood_gradient`, :func:`lgssm_maximum_likelihood` and
:func:`lgssm_parameter_covariance` take ``diffuse=``
(:func:`~skseq.inference.kalman.kalman_filter`'s): the diffuse
log-likelihood of the exact diffuse initial state and its gradient from the
exact diffuse smoother (the analytic per-row scores of :func:`lgssm_score_obs`
are not available under it: ``cov_type="opg"`` then differences the rows' log
predictive densities, as statsmodels does for all its scores).
"""

from typing import NamedTuple

import numpy as np
import scipy.linalg
import scipy.optimize

from .._kernels import _kalman
from .._parallel import run_calls, thread_runner
from .._sequences import sequence_offsets, split_offsets
from .._validation import check_n_jobs, check_scalar_param
from .._warnings import warn_user
from ._checks import masked_arrays_checked
from .kalman import (
    LGSSMParameters,
    _add_statistics,
    _em_statistics_bounded,
    _filter_offsets,
    _raise_if_failed,
    _rows,
    _statistics_from_moments,
    _stream_blocks,
    check_controls,
    check_diffuse_parameters,
    check_lgssm_parameters,
    check_observations,
    make_model,
    refuse_time_varying,
)

__all__ = [
    "lgssm_log_likelihood_gradient",
    "lgssm_score_obs",
    "lgssm_maximum_likelihood",
    "lgssm_parameter_covariance",
    "LGSSMParameterization",
    "ParameterBlock",
    "FreeEntries",
    "CholeskyCovariance",
    "LogVariances",
    "SharedLogVariances",
    "CycleRotation",
    "StationaryAR",
    "Submatrices",
    "LGSSMGradient",
    "LGSSMScoreObs",
    "LGSSMMaximumLikelihood",
    "LGSSMParameterCovariance",
]

COV_TYPES = ("opg", "oim")


class LGSSMGradient(NamedTuple):
    """What :func:`lgssm_log_likelihood_gradient` returns.

    Attributes
    ----------
    log_likelihood : float
        log p(X), summed over sequences.
    gradient : LGSSMParameters
        The partial derivatives of the log-likelihood with respect to each
        array, of its shape.  For a covariance C it is the symmetric matrix
        G with d log p = trace(G dC) for every symmetric dC (the derivative
        with the entries of C taken as independent).
    sequence_log_likelihood : ndarray of shape (n_sequences,)
    """

    log_likelihood: float
    gradient: LGSSMParameters
    sequence_log_likelihood: np.ndarray


class LGSSMScoreObs(NamedTuple):
    """What :func:`lgssm_score_obs` returns.

    Attributes
    ----------
    log_predictive : ndarray of shape (n_samples,)
        log p(x_t | x_1..x_{t-1}) of every row (0 for a row with no observed
        entry).
    scores : LGSSMParameters
        Each array with a leading axis of n_samples: the gradient of row t's
        log predictive density (the convention of :class:`LGSSMGradient`).
        The rows' scores add up to the gradient of the log-likelihood.
    """

    log_predictive: np.ndarray
    scores: LGSSMParameters


class LGSSMMaximumLikelihood(NamedTuple):
    """What :func:`lgssm_maximum_likelihood` returns.

    Attributes
    ----------
    parameters : LGSSMParameters
        The maximiser.
    unconstrained : ndarray of shape (n_free,)
        Its unconstrained coordinates.
    log_likelihood : float
        The maximised exact log-likelihood.
    n_iter : int
        L-BFGS-B iterations.
    converged : bool
        Whether L-BFGS-B met its convergence criterion.
    message : str
        L-BFGS-B's message.
    history : ndarray of shape (n_iter + 1,)
        The log-likelihood at the start and after each iteration.
    """

    parameters: LGSSMParameters
    unconstrained: np.ndarray
    log_likelihood: float
    n_iter: int
    converged: bool
    message: str
    history: np.ndarray


class LGSSMParameterCovariance(NamedTuple):
    """What :func:`lgssm_parameter_covariance` returns.

    Attributes
    ----------
    labels : list of str
        The names of the estimated coordinates (``"transition_covariance[0,0]"``, ...).
    estimates : ndarray of shape (n_free,)
        The constrained estimates (:meth:`LGSSMParameterization.reported`).
    covariance : ndarray of shape (n_free, n_free)
        Their covariance, by the delta method from ``unconstrained_covariance``;
        NaN rows and columns for the coordinates held at a bound (``at_bound``)
        and those the data do not identify (and the reported coordinates that
        move with them).
    standard_errors : ndarray of shape (n_free,)
        The square roots of its diagonal; NaN where that is NaN or negative.
    unconstrained_covariance : ndarray of shape (n_free, n_free)
        The covariance of the unconstrained coordinates: the (pseudo-)inverse
        of the information matrix (NaN rows and columns as above).
    information : ndarray of shape (n_free, n_free)
        The information matrix of the unconstrained coordinates (outer
        product of the scores, or minus the Hessian); NaN rows and columns for
        the coordinates held at a bound, whose information is not computed.
    """

    labels: list
    estimates: np.ndarray
    covariance: np.ndarray
    standard_errors: np.ndarray
    unconstrained_covariance: np.ndarray
    information: np.ndarray


# -- the Fisher identity ---------------------------------------------------------


_POTRF, _POTRS = scipy.linalg.get_lapack_funcs(("potrf", "potrs"), (np.zeros(1),))


def _spd_inverse(covariance):
    """C^-1 by LAPACK's Cholesky factorisation and solve: the routines (and so the
    numbers) of ``scipy.linalg.cho_solve(cho_factor(C, lower=True), I)`` without
    their wrappers' per-call checks, which cost more than a small model's solve
    on every objective call (C is a validated, finite float64 parameter)."""
    k = covariance.shape[0]
    factor, info = _POTRF(covariance, lower=1, clean=0)
    if info > 0:
        raise np.linalg.LinAlgError(
            f"{info}-th leading minor of the array is not positive definite"
        )
    inverse, info = _POTRS(factor, np.eye(k), lower=1)
    if info != 0:  # pragma: no cover - LAPACK's illegal-argument report
        raise ValueError(f"LAPACK potrs reported an illegal argument ({info}).")
    return inverse


def _symmetric_solve_both(covariance, matrix):
    """``(C^-1 M C^-1, C^-1)`` (M with optional leading axes)."""
    inverse = _spd_inverse(covariance)
    return inverse @ matrix @ inverse, inverse


def _regression_gradient(weights, covariance, cross, regressor, target):
    """Gradient of sum_t E[log N(y_t; W phi_t, C)] in W and C from the summed moments.

    With S = target - W cross^T - cross W^T + W regressor W^T and n the count
    (the last diagonal entry of ``regressor``): d/dW = C^-1 (cross - W regressor),
    d/dC = (C^-1 S C^-1 - n C^-1) / 2.  The moments may carry leading axes
    (one set per row).
    """
    count = regressor[..., -1, -1]
    product = weights @ np.swapaxes(cross, -1, -2)
    spread = target - product - np.swapaxes(product, -1, -2) + weights @ regressor @ weights.T
    inverse_spread, inverse = _symmetric_solve_both(covariance, spread)
    d_weights = inverse @ (cross - weights @ regressor)
    d_covariance = 0.5 * (inverse_spread - count[..., None, None] * inverse)
    return d_weights, 0.5 * (d_covariance + np.swapaxes(d_covariance, -1, -2))


def _limit_precision(star, diffuse_covariance):
    """lim (P_* + kappa P_inf)^-1 as kappa -> infinity: V (V^T P_* V)^-1 V^T, V an
    orthonormal basis of the null space of P_inf (the prior precision of the
    first state under the exact diffuse initial state)."""
    values, vectors = np.linalg.eigh(diffuse_covariance)
    null = vectors[:, values <= 1e-10 * max(values[-1], 1.0)]
    if null.shape[1] == 0:
        return np.zeros_like(star)
    restricted = null.T @ star @ null
    try:
        factor = scipy.linalg.cho_factor(restricted, lower=True)
    except np.linalg.LinAlgError:
        raise ValueError(
            "initial_state_covariance (P_*) must be positive definite on the directions "
            "that are not diffuse for the gradient of the diffuse log-likelihood."
        ) from None
    return null @ scipy.linalg.cho_solve(factor, null.T)


_INITIAL_FIELDS = frozenset({"initial_state_mean", "initial_state_covariance"})
_TRANSITION_FIELDS = frozenset(
    {"transition_matrix", "control_matrix", "transition_offset", "transition_covariance"}
)
_OBSERVATION_FIELDS = frozenset(
    {"observation_matrix", "observation_offset", "observation_covariance"}
)


def _gradient_from_statistics(parameters, statistics, diffuse_covariance=None, fields=None):
    """The Fisher identity: the score from summed smoothed statistics (no checks).

    ``parameters`` are validated; the statistics are those of
    :func:`~skseq.inference.kalman._em_statistics_offsets`, possibly with a
    leading axis (the increments of one row each).  The map is linear in the
    statistics, so the increments' scores add up to the total score.  With
    ``diffuse_covariance`` (P_inf; ``initial_state_covariance`` is P_*) the
    prior precision of the first state is its exact diffuse limit
    (:func:`_limit_precision`): the gradient of the diffuse log-likelihood.
    With ``fields`` (a set of names), only the groups of arrays (initial
    state, transition, observation) that hold one of them are computed, the
    others None: an objective whose free parameters are a few covariances
    skips the rest.
    """
    if fields is None:
        fields = LGSSMParameters._fields
    fields = frozenset(fields)
    if _INITIAL_FIELDS.isdisjoint(fields):
        return _transition_observation_gradient(parameters, statistics, fields, None, None)
    count = np.asarray(statistics["n_sequences"], dtype=np.float64)
    mean = parameters.initial_state_mean
    initial_sum = statistics["initial_sum"]
    cross = initial_sum[..., :, None] * mean
    outer = (
        statistics["initial_outer"]
        - cross
        - np.swapaxes(cross, -1, -2)
        + count[..., None, None] * np.outer(mean, mean)
    )
    if diffuse_covariance is None:
        initial_covariance = parameters.initial_state_covariance
        if not np.all(np.isfinite(initial_covariance)):
            raise ValueError("array must not contain infs or NaNs")
        inverse_outer, inverse = _symmetric_solve_both(initial_covariance, outer)
    else:
        inverse = _limit_precision(parameters.initial_state_covariance, diffuse_covariance)
        inverse_outer = inverse @ outer @ inverse
    d_initial_mean = (initial_sum - count[..., None] * mean) @ inverse
    d_initial_covariance = 0.5 * (inverse_outer - count[..., None, None] * inverse)
    d_initial_covariance = 0.5 * (d_initial_covariance + np.swapaxes(d_initial_covariance, -1, -2))
    return _transition_observation_gradient(
        parameters, statistics, fields, d_initial_mean, d_initial_covariance
    )


def _transition_observation_gradient(parameters, statistics, fields, d_mean, d_covariance):
    """The transition and observation parts of :func:`_gradient_from_statistics` (those
    ``fields`` needs; the others None), with the initial state's given."""
    k = parameters.transition_matrix.shape[0]
    m = parameters.control_matrix.shape[1]
    d_transition = d_transition_covariance = d_observation = d_observation_covariance = None
    if not _TRANSITION_FIELDS.isdisjoint(fields):
        d_transition, d_transition_covariance = _regression_gradient(
            np.hstack(
                [
                    parameters.transition_matrix,
                    parameters.control_matrix,
                    parameters.transition_offset[:, None],
                ]
            ),
            parameters.transition_covariance,
            statistics["transition_cross"],
            statistics["transition_regressor"],
            statistics["transition_target"],
        )
    if not _OBSERVATION_FIELDS.isdisjoint(fields):
        d_observation, d_observation_covariance = _regression_gradient(
            np.hstack([parameters.observation_matrix, parameters.observation_offset[:, None]]),
            parameters.observation_covariance,
            statistics["observation_cross"],
            statistics["observation_regressor"],
            statistics["observation_target"],
        )
    return LGSSMParameters(
        transition_matrix=None if d_transition is None else d_transition[..., :k],
        observation_matrix=None if d_observation is None else d_observation[..., :k],
        transition_covariance=d_transition_covariance,
        observation_covariance=d_observation_covariance,
        transition_offset=None if d_transition is None else d_transition[..., -1],
        observation_offset=None if d_observation is None else d_observation[..., -1],
        control_matrix=None if d_transition is None else d_transition[..., k : k + m],
        initial_state_mean=d_mean,
        initial_state_covariance=d_covariance,
    )


def _over_blocks(function, X, controls, offsets, runner):
    """``function(X_block, controls_block, local_offsets)`` on blocks of whole sequences,
    one per thread of ``runner`` (an entered ThreadRunner, or None: one block in
    this thread), as EM's E step splits them; the results in block order."""
    groups = split_offsets(offsets, 1 if runner is None else runner.n_jobs)
    calls = []
    for first, stop in groups:
        rows = slice(offsets[first], offsets[stop])
        local = offsets[first : stop + 1] - offsets[first]
        calls.append(lambda rows=rows, local=local: function(X[rows], controls[rows], local))
    return run_calls(calls, runner)


def _statistics_over_blocks(model, X, controls, offsets, runner, diffuse_covariance=None):
    """The smoothed statistics summed in block order (within the working memory, by
    :func:`~skseq.inference.kalman._em_statistics_bounded`) and the sequences'
    log-likelihoods."""
    results = _over_blocks(
        lambda X, controls, local: _em_statistics_bounded(
            model, X, controls, local, diffuse_covariance=diffuse_covariance
        ),
        X,
        controls,
        offsets,
        runner,
    )
    statistics = results[0][0]
    for more, _ in results[1:]:
        statistics = _add_statistics(statistics, more)
    return statistics, np.concatenate([sequence for _, sequence in results])


def _gradient_offsets(parameters, X, controls, offsets, diffuse_covariance=None, runner=None):
    """``(log_likelihood, gradient, sequence_log_likelihood)`` on validated inputs (no
    checks); a numerical failure gives NaN log-likelihood and gradient None.  With
    ``diffuse_covariance`` (P_inf) the diffuse log-likelihood and its gradient.  The
    sequences run in blocks on the threads of ``runner`` (None: one thread)."""
    statistics, sequence_log_likelihood = _statistics_over_blocks(
        make_model(parameters), X, controls, offsets, runner, diffuse_covariance
    )
    log_likelihood = float(sequence_log_likelihood.sum())
    if not np.isfinite(log_likelihood):
        return log_likelihood, None, sequence_log_likelihood
    return (
        log_likelihood,
        _gradient_from_statistics(parameters, statistics, diffuse_covariance),
        sequence_log_likelihood,
    )


def _validated(parameters, X, controls, lengths, diffuse=None):
    """``(parameters, X, controls, offsets, diffuse_covariance)``, validated."""
    X = check_observations(X)
    if getattr(parameters, "control_matrix", None) is None and controls is not None:
        raise ValueError("controls were given without a control_matrix.")
    parameters, diffuse_covariance = check_diffuse_parameters(parameters, diffuse, X.shape[1])
    refuse_time_varying(parameters, "Exact maximum likelihood")
    controls = check_controls(controls, X.shape[0], parameters.control_matrix.shape[1])
    offsets = sequence_offsets(X.shape[0], lengths=lengths)
    return parameters, X, controls, offsets, diffuse_covariance


@masked_arrays_checked(missing=("X",))
def lgssm_log_likelihood_gradient(
    parameters, X, *, controls=None, lengths=None, diffuse=None, n_jobs=None
):
    """Exact log-likelihood and its analytic gradient, from one filter and smoother pass.

    By the Fisher identity the score equals the expected score of the
    complete data (states, missing entries and observations) under the
    smoothed posterior, which depends on the data through the sufficient
    statistics EM sums: the gradient is exact, with no differencing over
    the parameters, at the cost of one E step.

    Parameters
    ----------
    parameters : LGSSMParameters
        The model (:func:`~skseq.inference.kalman.kalman_filter`'s).
    X : array-like of shape (n_samples, n_features)
        Observations, sequences concatenated; NaN marks a missing entry.
    controls : array-like of shape (n_samples, n_controls), optional
        Required when the model has a control matrix.
    lengths : array-like of int, optional
        Length of each sequence (default: one sequence).
    diffuse : None, True, array-like of bool of shape (n_state,) or of shape (n_state, n_state)
        The exact diffuse initial state (:func:`~skseq.inference.kalman.kalman_filter`'s
        ``diffuse``): the log-likelihood is then the diffuse one and the
        gradient its gradient, from the exact diffuse smoother; the gradient
        in ``initial_state_mean`` and ``initial_state_covariance`` (P_*) is
        that of the prior's limit, zero along the diffuse directions.
    n_jobs : int, default=None
        Threads over blocks of whole sequences (the kernels release the GIL),
        as in EM's E step; ``None`` means 1.  The result equals the
        one-thread result up to rounding (the blocks' sums are added in order).

    Returns
    -------
    LGSSMGradient

    Raises
    ------
    ValueError
        On invalid parameters or observations.
    numpy.linalg.LinAlgError
        When a covariance loses positive definiteness in floating point.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman import LGSSMParameters
    >>> from skseq.inference.kalman_mle import lgssm_log_likelihood_gradient
    >>> X = np.cumsum(np.random.default_rng(0).normal(size=(50, 1)), axis=0)
    >>> parameters = LGSSMParameters(
    ...     transition_matrix=[[1.0]], observation_matrix=[[1.0]],
    ...     transition_covariance=[[1.0]], observation_covariance=[[0.5]])
    >>> result = lgssm_log_likelihood_gradient(parameters, X)
    >>> result.gradient.transition_covariance.shape
    (1, 1)
    """
    check_n_jobs(n_jobs)
    parameters, X, controls, offsets, diffuse_covariance = _validated(
        parameters, X, controls, lengths, diffuse
    )
    with thread_runner(n_jobs) as runner:
        log_likelihood, gradient, sequence_log_likelihood = _gradient_offsets(
            parameters, X, controls, offsets, diffuse_covariance, runner=runner
        )
    _raise_if_failed(sequence_log_likelihood, diffuse=diffuse_covariance is not None)
    return LGSSMGradient(log_likelihood, gradient, sequence_log_likelihood)


def _row_moments_offsets(model, X, controls, offsets, selected=None):
    """``(values, means, seconds, log_predictive, sequence_log_likelihood)`` of the
    kernel's forward-only smoothing one row at a time (no checks); with
    ``selected`` (moment indices) only those moments are carried and returned."""
    k = model.n_state
    n_samples = X.shape[0]
    n_moments = _stream_blocks(k, model.n_obs, model.n_ctrl)[1]
    n_out = n_moments if selected is None else selected.shape[0]
    values = np.empty((n_samples, n_out))
    means = np.empty((n_samples, k))
    seconds = np.empty((n_samples, k, k))
    log_predictive = np.zeros(n_samples)
    sequence_log_likelihood = np.empty(len(offsets) - 1)
    _kalman.forward_smoothing_row_moments(
        model,
        X,
        controls,
        offsets,
        values,
        means,
        seconds,
        log_predictive,
        sequence_log_likelihood,
        selected,
    )
    return values, means, seconds, log_predictive, sequence_log_likelihood


def _increments(totals, offsets):
    """The rows' increments of running totals (leading axis the rows); a sequence
    starts from nothing."""
    increment = totals.copy()
    increment[1:] -= totals[:-1]
    increment[offsets[:-1]] = totals[offsets[:-1]]
    return increment


def _pulled_score_obs_offsets(parameterization, u, X, controls, offsets, runner=None):
    """Per-row scores in the unconstrained coordinates ``u`` on validated inputs.

    The scores of :func:`_score_obs_offsets` pulled back to ``u``, the same
    numbers at a fraction of the cost: the map from the moments (and the
    filtered state's mean and second moment) to the pulled-back gradient is
    linear, and the moments it weighs by exactly zero (those of fixed
    parameters and structural zeros, most of them in a structural model) are
    not carried row to row by the kernel.  The increments are still taken of
    the statistics, before the map (the running totals in ``u`` would cancel).
    """
    parameters = parameterization.constrained(u)
    model = make_model(parameters)
    k, p, m = model.n_state, model.n_obs, model.n_ctrl
    n_moments = _stream_blocks(k, p, m)[1]

    fields = parameterization.gradient_fields

    def pulled(values, means, seconds):
        statistics = _statistics_from_moments(values, means, seconds, p, m)
        gradient = _gradient_from_statistics(parameters, statistics, fields=fields)
        return parameterization.pull_back(u, gradient)

    weights = pulled(np.eye(n_moments), np.zeros((n_moments, k)), np.zeros((n_moments, k, k)))
    selected = np.flatnonzero(np.any(weights != 0, axis=1)).astype(np.intp)
    _, scores = _score_obs_offsets(parameters, X, controls, offsets, runner, selected, fields)
    return parameterization.pull_back(u, scores)


def _score_obs_offsets(parameters, X, controls, offsets, runner=None, selected=None, fields=None):
    """Per-row scores on validated inputs (no checks).

    Forward-only smoothing one row at a time (one kernel call for all rows)
    gives, after each row, the smoothed statistics of the rows so far as
    moments of the filtered state; the statistics of all rows are then
    formed at once, and their increments map linearly to the rows' scores.
    With ``selected`` (moment indices) the kernel carries only those moments
    and the others count as zero; with ``fields`` only those scores are formed
    (:func:`_gradient_from_statistics`).
    """
    model = make_model(parameters)
    X, controls = _rows(X), _rows(controls)
    blocks = _over_blocks(
        lambda X, controls, local: _row_moments_offsets(model, X, controls, local, selected),
        X,
        controls,
        offsets,
        runner,
    )
    values, means, seconds, log_predictive, sequence_log_likelihood = (
        np.concatenate(parts) for parts in zip(*blocks)
    )
    _raise_if_failed(sequence_log_likelihood)
    if selected is not None:
        moments = np.zeros(
            (len(values), _stream_blocks(model.n_state, model.n_obs, model.n_ctrl)[1])
        )
        moments[:, selected] = values
        values = moments
    totals = _statistics_from_moments(values, means, seconds, model.n_obs, model.n_ctrl)
    increments = {name: _increments(total, offsets) for name, total in totals.items()}
    return log_predictive, _gradient_from_statistics(parameters, increments, fields=fields)


@masked_arrays_checked(missing=("X",))
def lgssm_score_obs(parameters, X, *, controls=None, lengths=None, n_jobs=None):
    """The score of every row's one-step predictive density, analytically.

    Row t's score is the gradient of log p(x_t | x_1..x_{t-1}): the
    difference of the Fisher-identity gradients given x_1..x_t and given
    x_1..x_{t-1}, which forward-only smoothing
    (:func:`~skseq.inference.kalman.kalman_forward_smoothing`) gives as the
    increment of the statistics when row t arrives.  Their outer products
    make the OPG estimate of the information (statsmodels' default).

    Parameters
    ----------
    parameters : LGSSMParameters
    X : array-like of shape (n_samples, n_features)
        NaN marks a missing entry.
    controls : array-like of shape (n_samples, n_controls), optional
    lengths : array-like of int, optional
    n_jobs : int, default=None
        Threads over blocks of whole sequences (the kernels release the GIL),
        as in EM's E step; ``None`` means 1.  The result equals the
        one-thread result up to rounding (the blocks' sums are added in order).

    Returns
    -------
    LGSSMScoreObs

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman import LGSSMParameters
    >>> from skseq.inference.kalman_mle import lgssm_log_likelihood_gradient, lgssm_score_obs
    >>> X = np.cumsum(np.random.default_rng(0).normal(size=(30, 1)), axis=0)
    >>> parameters = LGSSMParameters([[1.0]], [[1.0]], [[1.0]], [[0.5]])
    >>> scores = lgssm_score_obs(parameters, X).scores.observation_covariance
    >>> total = lgssm_log_likelihood_gradient(parameters, X).gradient.observation_covariance
    >>> bool(np.allclose(scores.sum(axis=0), total))
    True
    """
    check_n_jobs(n_jobs)
    parameters, X, controls, offsets, _ = _validated(parameters, X, controls, lengths)
    with thread_runner(n_jobs) as runner:
        return LGSSMScoreObs(*_score_obs_offsets(parameters, X, controls, offsets, runner))


# -- the parameter transformation layer ---------------------------------------


def _mask(mask, shape, name):
    if mask is None:
        return np.ones(shape, dtype=bool)
    mask = np.asarray(mask)
    if mask.dtype != bool or mask.shape != tuple(shape):
        raise ValueError(f"the mask of {name} must be a boolean array of shape {tuple(shape)}.")
    return mask.copy()


class ParameterBlock:
    """The rule mapping one parameter array to unconstrained coordinates.

    A block is bound to a template (the parameter's value, which supplies
    the entries it holds fixed) by :meth:`bind`, and then maps a slice of the
    unconstrained vector to the array (:meth:`value`), the array to the slice
    (:meth:`unconstrained`), and gives the Jacobian of the array's entries
    with respect to the slice (:meth:`jacobian`, for the chain rule) and the
    indices of the entries that are the block's constrained coordinates
    (:attr:`reported_index`, for the delta method).  A structured model
    declares its own blocks by overriding these.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman_mle import FreeEntries
    >>> block = FreeEntries().bind(np.array([[0.5, 0.1]]), "transition_matrix")
    >>> block.n_free, block.value(np.array([1.0, 2.0])).tolist()
    (2, [[1.0, 2.0]])
    """

    def bind(self, template, name):
        """A copy of the block bound to ``template`` (the parameter ``name``'s value)."""
        bound = object.__new__(type(self))
        bound.__dict__.update(self.__dict__)
        bound.template = np.array(template, dtype=np.float64)
        bound.name = name
        bound._bind()
        return bound

    def _bind(self):
        raise NotImplementedError

    n_free = 0
    reported_index = np.zeros(0, dtype=np.intp)

    def value(self, u):
        """The parameter array at the block's coordinates ``u``."""
        raise NotImplementedError

    def unconstrained(self, value):
        """The coordinates of a parameter array (the inverse of :meth:`value`)."""
        raise NotImplementedError

    def jacobian(self, u):
        """d vec(value) / du, of shape (value.size, n_free), row-major vec."""
        raise NotImplementedError

    def labels(self):
        """The name of each reported coordinate."""
        return [
            f"{self.name}[{','.join(str(i) for i in np.unravel_index(j, self.template.shape))}]"
            for j in self.reported_index
        ]

    def reported_values(self, u):
        """The block's constrained coordinates at ``u`` (default: the entries
        :attr:`reported_index` picks from :meth:`value`)."""
        return self.value(u).ravel()[self.reported_index]

    def reported_jacobian(self, u):
        """d reported_values / du, of shape (n_free, n_free)."""
        return self.jacobian(u)[self.reported_index]


class FreeEntries(ParameterBlock):
    """Entries of an array that are free reals (the others held at the template's values).

    Parameters
    ----------
    mask : array-like of bool, optional
        True where the entry is free (default: every entry).
    scale : float or array-like, default=1.0
        The entry is ``scale * u``: the unit of the coordinate, so that the
        optimiser's coordinates are of comparable size.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman_mle import FreeEntries
    >>> block = FreeEntries(mask=[[True, False]]).bind([[0.5, 0.1]], "transition_matrix")
    >>> block.value(np.array([0.9])).tolist()
    [[0.9, 0.1]]
    """

    def __init__(self, mask=None, scale=1.0):
        self.mask = mask
        self.scale = scale

    def _bind(self):
        self._free = _mask(self.mask, self.template.shape, self.name)
        self.reported_index = np.flatnonzero(self._free)
        self.n_free = self.reported_index.size
        scale = np.broadcast_to(np.asarray(self.scale, dtype=np.float64), self.template.shape)
        if not np.all(np.isfinite(scale) & (scale > 0)):
            raise ValueError(f"the scale of {self.name} must be positive and finite.")
        self._scale = scale.ravel()[self.reported_index]

    def value(self, u):
        value = self.template.copy()
        value.ravel()[self.reported_index] = self._scale * u
        return value

    def unconstrained(self, value):
        return np.asarray(value, dtype=np.float64).ravel()[self.reported_index] / self._scale

    def jacobian(self, u):
        jacobian = np.zeros((self.template.size, self.n_free))
        jacobian[self.reported_index, np.arange(self.n_free)] = self._scale
        return jacobian


class CholeskyCovariance(ParameterBlock):
    """A full covariance C = L L^T, L lower triangular with a log diagonal.

    The coordinates are, row by row, the entries of L's lower triangle, the
    diagonal ones by their logarithm: any vector maps to a positive definite
    matrix.  The reported coordinates are the lower triangle of C.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman_mle import CholeskyCovariance
    >>> block = CholeskyCovariance().bind(np.eye(2), "transition_covariance")
    >>> block.n_free, block.value(np.array([0.0, 0.5, 0.0])).round(2).tolist()
    (3, [[1.0, 0.5], [0.5, 1.25]])
    """

    def _bind(self):
        k = self.template.shape[0]
        self._rows, self._cols = np.tril_indices(k)
        self.n_free = self._rows.size
        self.reported_index = self._rows * k + self._cols
        self._diagonal = self._rows == self._cols

    def _factor(self, u):
        k = self.template.shape[0]
        factor = np.zeros((k, k))
        factor[self._rows, self._cols] = np.where(self._diagonal, np.exp(u), u)
        return factor

    def value(self, u):
        factor = self._factor(u)
        return factor @ factor.T

    def unconstrained(self, value):
        factor = np.linalg.cholesky(np.asarray(value, dtype=np.float64))
        entries = factor[self._rows, self._cols]
        return np.where(self._diagonal, np.log(np.where(self._diagonal, entries, 1.0)), entries)

    def jacobian(self, u):
        k = self.template.shape[0]
        factor = self._factor(u)
        jacobian = np.empty((k * k, self.n_free))
        for j, (row, col) in enumerate(zip(self._rows, self._cols)):
            d_factor = np.zeros((k, k))
            d_factor[row, col] = factor[row, col] if self._diagonal[j] else 1.0
            product = d_factor @ factor.T
            jacobian[:, j] = (product + product.T).ravel()
        return jacobian


class LogVariances(ParameterBlock):
    """A diagonal covariance by the logarithms of its variances.

    Parameters
    ----------
    mask : array-like of bool of shape (k,), optional
        True where the variance is free (default: all); the others keep the
        template's (which may be 0 for a deterministic component, when the
        model allows a singular covariance).

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman_mle import LogVariances
    >>> block = LogVariances().bind(np.diag([2.0, 3.0]), "observation_covariance")
    >>> np.exp(block.unconstrained(np.diag([2.0, 3.0]))).round(12).tolist()
    [2.0, 3.0]
    """

    def __init__(self, mask=None):
        self.mask = mask

    def _bind(self):
        k = self.template.shape[0]
        if np.any(self.template != np.diag(np.diag(self.template))):
            raise ValueError(f"{self.name} must be diagonal to be parameterised by log variances.")
        self._free = _mask(self.mask, (k,), self.name)
        self._index = np.flatnonzero(self._free)
        self.n_free = self._index.size
        self.reported_index = self._index * (k + 1)

    def value(self, u):
        value = self.template.copy()
        value[self._index, self._index] = np.exp(u)
        return value

    def unconstrained(self, value):
        return np.log(np.diag(np.asarray(value, dtype=np.float64))[self._index])

    def jacobian(self, u):
        jacobian = np.zeros((self.template.size, self.n_free))
        jacobian[self.reported_index, np.arange(self.n_free)] = np.exp(u)
        return jacobian


class SharedLogVariances(ParameterBlock):
    """A diagonal covariance whose variances are shared by groups of coordinates.

    Parameters
    ----------
    groups : array-like of int of shape (k,)
        The group of each diagonal entry: the entries of group g are all
        ``exp(u[g])``; -1 holds the entry at the template's value (which may
        be a tiny floor for a deterministic component); every group of
        0 .. n_groups - 1 has at least one entry.
    names : list of str, optional
        The label of each group (default: the entry of its first coordinate).

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman_mle import SharedLogVariances
    >>> block = SharedLogVariances([0, 1, 1]).bind(np.eye(3), "transition_covariance")
    >>> block.n_free, np.diag(block.value(np.log([2.0, 3.0]))).round(12).tolist()
    (2, [2.0, 3.0, 3.0])
    """

    def __init__(self, groups, names=None):
        self.groups = groups
        self.names = names

    def _bind(self):
        k = self.template.shape[0]
        if np.any(self.template != np.diag(np.diag(self.template))):
            raise ValueError(f"{self.name} must be diagonal to be parameterised by log variances.")
        groups = np.asarray(self.groups)
        if groups.shape != (k,) or groups.dtype.kind not in "iu":
            raise ValueError(f"the groups of {self.name} must be {k} integers.")
        self._groups = groups.astype(np.intp)
        self.n_free = int(self._groups.max(initial=-1)) + 1
        firsts = [np.flatnonzero(self._groups == g) for g in range(self.n_free)]
        if any(first.size == 0 for first in firsts) or np.any(self._groups < -1):
            raise ValueError(f"the groups of {self.name} must be -1 or 0 .. n_groups - 1.")
        self.reported_index = np.array([first[0] * (k + 1) for first in firsts], dtype=np.intp)
        if self.names is not None and len(self.names) != self.n_free:
            raise ValueError(f"{self.name}: {self.n_free} group names expected.")
        # the free diagonal entries and their groups, for value and jacobian
        self._free_entries = np.flatnonzero(self._groups >= 0)
        self._free_groups = self._groups[self._free_entries]

    def value(self, u):
        value = self.template.copy()
        value[self._free_entries, self._free_entries] = np.exp(u)[self._free_groups]
        return value

    def unconstrained(self, value):
        return np.log(np.asarray(value, dtype=np.float64).ravel()[self.reported_index])

    def jacobian(self, u):
        k = self.template.shape[0]
        jacobian = np.zeros((self.template.size, self.n_free))
        jacobian[self._free_entries * (k + 1), self._free_groups] = np.exp(u)[self._free_groups]
        return jacobian

    def labels(self):
        return super().labels() if self.names is None else list(self.names)


def _logistic(u):
    return 0.5 * (1.0 + np.tanh(0.5 * u))


class CycleRotation(ParameterBlock):
    """A damped rotation ``rho [[cos f, sin f], [-sin f, cos f]]`` of a 2 x 2 block.

    The frequency ``f`` is kept in ``frequency_bounds`` and the damping
    ``rho`` in (0, 1) by logistic maps of the coordinates; the reported
    coordinates are (frequency, damping), or the frequency alone when the
    rotation is undamped (``rho = 1``): the stochastic cycle of a structural
    time-series model, stationary when damped.

    Parameters
    ----------
    frequency_bounds : (float, float), default=(0, pi)
        The open interval of the frequency, in radians per step.
    damped : bool, default=True
    names : (str, str), default=("frequency", "damping")

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman_mle import CycleRotation
    >>> block = CycleRotation().bind(np.eye(2), "transition_matrix")
    >>> u = block.unconstrained(0.9 * np.array([[0.0, 1.0], [-1.0, 0.0]]))
    >>> block.reported_values(u).round(6).tolist()
    [1.570796, 0.9]
    """

    def __init__(self, frequency_bounds=(0.0, np.pi), damped=True, names=None):
        self.frequency_bounds = frequency_bounds
        self.damped = damped
        self.names = names

    def _bind(self):
        if self.template.shape != (2, 2):
            raise ValueError(f"a CycleRotation of {self.name} must be bound to a 2 x 2 block.")
        low, high = (float(bound) for bound in self.frequency_bounds)
        if not (np.isfinite(low) and np.isfinite(high) and 0.0 <= low < high <= np.pi):
            raise ValueError(
                f"frequency_bounds must satisfy 0 <= low < high <= pi, got {self.frequency_bounds}."
            )
        self._low, self._high = low, high
        self.n_free = 2 if self.damped else 1

    def reported_values(self, u):
        frequency = self._low + (self._high - self._low) * _logistic(u[0])
        return np.array([frequency, _logistic(u[1])]) if self.damped else np.array([frequency])

    def reported_jacobian(self, u):
        slope = _logistic(u) * (1.0 - _logistic(u))
        scales = [self._high - self._low, 1.0][: self.n_free]
        return np.diag(slope * scales)

    def value(self, u):
        frequency, damping = (*self.reported_values(u), 1.0)[:2]
        cos, sin = np.cos(frequency), np.sin(frequency)
        return damping * np.array([[cos, sin], [-sin, cos]])

    def unconstrained(self, value):
        value = np.asarray(value, dtype=np.float64)
        fraction = (np.arctan2(value[0, 1], value[0, 0]) - self._low) / (self._high - self._low)
        fraction = np.clip(fraction, 1e-12, 1.0 - 1e-12)
        u = [np.log(fraction / (1.0 - fraction))]
        if self.damped:
            damping = np.clip(np.hypot(value[0, 0], value[0, 1]), 1e-12, 1.0 - 1e-12)
            u.append(np.log(damping / (1.0 - damping)))
        return np.array(u)

    def jacobian(self, u):
        frequency, damping = (*self.reported_values(u), 1.0)[:2]
        cos, sin = np.cos(frequency), np.sin(frequency)
        d_frequency = damping * np.array([-sin, cos, -cos, -sin])
        columns = [d_frequency]
        if self.damped:
            columns.append(np.array([cos, sin, -sin, cos]))
        return np.column_stack(columns) @ self.reported_jacobian(u)

    def labels(self):
        names = self.names or (f"{self.name}.frequency", f"{self.name}.damping")
        return list(names)[: self.n_free]


class StationaryAR(ParameterBlock):
    """Stationary autoregressive coefficients by their partial autocorrelations.

    Bound to a (1, p) block (the first row of an AR companion matrix): the
    coordinates map to partial autocorrelations ``r = u / sqrt(1 + u**2)``
    in (-1, 1) (Monahan's transform), and the Durbin-Levinson recursion maps
    those to coefficients whose AR polynomial has all roots outside the
    unit circle; every vector gives a stationary process and every
    stationary one is reached.  The reported coordinates are the
    coefficients; the Jacobian goes through the recursion analytically.

    Parameters
    ----------
    names : list of str, optional
        The label of each coefficient.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman_mle import StationaryAR
    >>> block = StationaryAR().bind(np.zeros((1, 2)), "transition_matrix")
    >>> u = block.unconstrained(np.array([[0.5, 0.3]]))
    >>> block.value(u).round(12).tolist()
    [[0.5, 0.3]]
    """

    def __init__(self, names=None):
        self.names = names

    def _bind(self):
        if self.template.ndim != 2 or self.template.shape[0] != 1:
            raise ValueError(f"a StationaryAR block of {self.name} must be bound to one row.")
        self.n_free = self.template.shape[1]
        self.reported_index = np.arange(self.n_free)

    def _coefficients(self, u):
        """The coefficients and their Jacobian, by the Durbin-Levinson recursion."""
        p = self.n_free
        partial = u / np.sqrt(1.0 + u**2)
        d_partial = (1.0 + u**2) ** -1.5
        phi = np.zeros(0)
        d_phi = np.zeros((0, p))
        for k in range(p):
            d_r = np.zeros(p)
            d_r[k] = d_partial[k]
            phi, d_phi = (
                np.append(phi - partial[k] * phi[::-1], partial[k]),
                np.vstack(
                    [
                        d_phi - partial[k] * d_phi[::-1] - np.outer(phi[::-1], d_r),
                        d_r,
                    ]
                ),
            )
        return phi, d_phi

    def value(self, u):
        return self._coefficients(np.asarray(u, dtype=np.float64))[0][None, :]

    def unconstrained(self, value):
        phi = np.asarray(value, dtype=np.float64).ravel().copy()
        partial = np.empty(self.n_free)
        for k in range(self.n_free - 1, -1, -1):
            partial[k] = phi[k]
            if not abs(partial[k]) < 1.0:
                raise ValueError(f"the AR coefficients of {self.name} are not stationary.")
            phi = (phi[:k] + partial[k] * phi[:k][::-1]) / (1.0 - partial[k] ** 2)
        return partial / np.sqrt(1.0 - partial**2)

    def jacobian(self, u):
        return self._coefficients(np.asarray(u, dtype=np.float64))[1]

    def labels(self):
        return super().labels() if self.names is None else list(self.names)


class Submatrices(ParameterBlock):
    """Blocks placed on sub-matrices of one parameter (the rest held fixed).

    Parameters
    ----------
    parts : list of (rows, columns, ParameterBlock)
        Each block is bound to ``template[np.ix_(rows, columns)]`` and writes
        its value there; the parts must not overlap.  The coordinates, the
        reported values and the labels are the parts' in order.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman_mle import CycleRotation, StationaryAR, Submatrices
    >>> template = np.zeros((4, 4))
    >>> template[3, 2] = 1.0
    >>> block = Submatrices([([0, 1], [0, 1], CycleRotation()),
    ...                      ([2], [2, 3], StationaryAR())]).bind(template, "transition_matrix")
    >>> block.n_free, block.value(np.zeros(4)).round(3).tolist()[2]
    (4, [0.0, 0.0, 0.0, 0.0])
    """

    def __init__(self, parts):
        self.parts = parts

    def _bind(self):
        self._parts, self._indices, self._slices = [], [], []
        shape = self.template.shape
        used = np.zeros(shape, dtype=bool)
        start = 0
        for rows, columns, block in self.parts:
            if not isinstance(block, ParameterBlock):
                raise TypeError(f"a part of {self.name} is not a ParameterBlock.")
            index = np.ix_(np.asarray(rows, dtype=np.intp), np.asarray(columns, dtype=np.intp))
            if used[index].any():
                raise ValueError(f"the parts of {self.name} overlap.")
            used[index] = True
            self._parts.append(block.bind(self.template[index], self.name))
            self._indices.append(index)
            self._slices.append(slice(start, start + self._parts[-1].n_free))
            start += self._parts[-1].n_free
        self.n_free = start
        self._flats = [
            np.ravel_multi_index(np.broadcast_arrays(*index), shape).ravel()
            for index in self._indices
        ]

    def value(self, u):
        value = self.template.copy()
        for block, index, part in zip(self._parts, self._indices, self._slices):
            value[index] = block.value(u[part])
        return value

    def unconstrained(self, value):
        value = np.asarray(value, dtype=np.float64)
        parts = [
            block.unconstrained(value[index]) for block, index in zip(self._parts, self._indices)
        ]
        return np.concatenate(parts) if parts else np.zeros(0)

    def jacobian(self, u):
        jacobian = np.zeros((self.template.size, self.n_free))
        for block, flat, part in zip(self._parts, self._flats, self._slices):
            jacobian[flat, part] = block.jacobian(u[part])
        return jacobian

    def reported_values(self, u):
        parts = [block.reported_values(u[part]) for block, part in zip(self._parts, self._slices)]
        return np.concatenate(parts) if parts else np.zeros(0)

    def reported_jacobian(self, u):
        return scipy.linalg.block_diag(
            np.zeros((0, 0)),
            *(block.reported_jacobian(u[part]) for block, part in zip(self._parts, self._slices)),
        )

    def labels(self):
        return [label for block in self._parts for label in block.labels()]


class LGSSMParameterization:
    """A declared map between an unconstrained vector and :class:`LGSSMParameters`.

    Parameters
    ----------
    parameters : LGSSMParameters
        The template: its values are the starting point and hold every entry
        the blocks leave fixed.  Validated (defaults filled in).
    blocks : dict of str to ParameterBlock
        The rule of each estimated parameter, by the field names of
        :class:`LGSSMParameters`; a parameter not named is held at its value.
    stationary : array-like of bool of shape (n_state,), optional
        State coordinates whose initial covariance is the stationary
        covariance of their own dynamics: ``Sigma0[s, s]`` solves
        ``P = F[s, s] P F[s, s]^T + Q[s, s]`` at every point, so it follows the
        estimated F and Q (the chain rule goes through the Lyapunov equation).
        The coordinates must not be driven by the others (``F[s, ~s] = 0``),
        and ``initial_state_covariance`` is then not a block.

    Attributes
    ----------
    parameters : LGSSMParameters
        The validated template.
    n_free : int
        The length of the unconstrained vector.
    labels : list of str
        The name of each coordinate (``"observation_covariance[0,0]"``, ...).

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman import LGSSMParameters
    >>> from skseq.inference.kalman_mle import LGSSMParameterization, LogVariances
    >>> template = LGSSMParameters([[1.0]], [[1.0]], [[1.0]], [[2.0]])
    >>> parameterization = LGSSMParameterization(
    ...     template, {"transition_covariance": LogVariances(),
    ...                "observation_covariance": LogVariances()})
    >>> u = parameterization.unconstrained()
    >>> parameterization.labels
    ['transition_covariance[0,0]', 'observation_covariance[0,0]']
    >>> parameterization.reported(u).tolist()
    [1.0, 2.0]
    """

    def __init__(self, parameters, blocks, stationary=None):
        # a singular initial covariance is the P_* of an exact diffuse start
        self.parameters = check_lgssm_parameters(parameters, semidefinite_initial=True)
        refuse_time_varying(self.parameters, "Exact maximum likelihood")
        self._stationary = None
        if stationary is not None:
            k = self.parameters.transition_matrix.shape[0]
            stationary = _mask(stationary, (k,), "stationary")
            if "initial_state_covariance" in blocks:
                raise ValueError(
                    "initial_state_covariance cannot be a block when it is the stationary "
                    "covariance of the coordinates in `stationary`."
                )
            if np.any(self.parameters.transition_matrix[np.ix_(stationary, ~stationary)]):
                raise ValueError(
                    "the stationary coordinates must not be driven by the others "
                    "(transition_matrix[stationary, ~stationary] must be 0)."
                )
            self._stationary = np.flatnonzero(stationary) if stationary.any() else None
        unknown = sorted(set(blocks) - set(LGSSMParameters._fields))
        if unknown:
            raise ValueError(
                f"blocks names unknown parameter(s) {unknown}; valid names are "
                f"{list(LGSSMParameters._fields)}."
            )
        self.blocks = {}
        self._slices = {}
        self._rows = {}
        start, row = 0, 0
        for name in LGSSMParameters._fields:
            template = getattr(self.parameters, name)
            if name in blocks:
                block = blocks[name]
                if not isinstance(block, ParameterBlock):
                    raise TypeError(
                        f"blocks[{name!r}] must be a ParameterBlock (FreeEntries, "
                        "CholeskyCovariance, LogVariances, SharedLogVariances, CycleRotation, "
                        f"StationaryAR, Submatrices), got {type(block).__name__}."
                    )
                block = block.bind(template, name)
                self.blocks[name] = block
                self._slices[name] = slice(start, start + block.n_free)
                start += block.n_free
            self._rows[name] = slice(row, row + template.size)
            row += template.size
        self.n_free = start
        self._size = row
        self.labels = [label for block in self.blocks.values() for label in block.labels()]

    def _check(self, u):
        u = np.asarray(u, dtype=np.float64)
        if u.shape != (self.n_free,):
            raise ValueError(
                f"the unconstrained vector must have shape ({self.n_free},), got {u.shape}."
            )
        return u

    def unconstrained(self, parameters=None):
        """The unconstrained vector of ``parameters`` (default: the template)."""
        if parameters is None:
            parameters = self.parameters
        parts = [
            block.unconstrained(getattr(parameters, name)) for name, block in self.blocks.items()
        ]
        return np.concatenate(parts) if parts else np.zeros(0)

    def constrained(self, u):
        """The :class:`LGSSMParameters` at the unconstrained vector ``u``."""
        u = self._check(u)
        values = self.parameters._asdict()
        for name, block in self.blocks.items():
            values[name] = block.value(u[self._slices[name]])
        if self._stationary is not None:
            index = np.ix_(self._stationary, self._stationary)
            covariance = values["initial_state_covariance"].copy()
            covariance[index] = _stationary_covariance(
                values["transition_matrix"][index], values["transition_covariance"][index]
            )
            values["initial_state_covariance"] = covariance
        return LGSSMParameters(**values)

    def jacobian(self, u):
        """d vec(parameters) / du, of shape (total size, n_free): the arrays of
        :class:`LGSSMParameters` raveled and concatenated in field order."""
        u = self._check(u)
        jacobian = np.zeros((self._size, self.n_free))
        for name, block in self.blocks.items():
            jacobian[self._rows[name], self._slices[name]] = block.jacobian(u[self._slices[name]])
        if self._stationary is not None:
            self._stationary_jacobian(u, jacobian)
        return jacobian

    def _stationary_jacobian(self, u, jacobian):
        """The rows of Sigma0[s, s]: differentiating P = F P F^T + Q gives
        dP = F dP F^T + (dF P F^T + F P dF^T + dQ), one Lyapunov solve per
        coordinate that moves F[s, s] or Q[s, s]."""
        parameters = self.constrained(u)
        k = parameters.transition_matrix.shape[0]
        s = self._stationary
        index = np.ix_(s, s)
        flat = np.ravel_multi_index(np.broadcast_arrays(*index), (k, k)).ravel()
        transition = parameters.transition_matrix[index]
        covariance = parameters.initial_state_covariance[index]
        d_transition = jacobian[self._rows["transition_matrix"]][flat]
        d_noise = jacobian[self._rows["transition_covariance"]][flat]
        rows = self._rows["initial_state_covariance"].start + flat
        for j in np.flatnonzero(np.any(d_transition, axis=0) | np.any(d_noise, axis=0)):
            d_f = d_transition[:, j].reshape(transition.shape)
            product = d_f @ covariance @ transition.T
            source = product + product.T + d_noise[:, j].reshape(transition.shape)
            jacobian[rows, j] = _stationary_covariance(transition, source).ravel()

    def flatten(self, gradient):
        """The arrays of a gradient (an :class:`LGSSMParameters`, optionally with a
        common leading axis) raveled and concatenated in field order."""
        lead = np.shape(gradient.transition_matrix)[:-2]
        return np.concatenate([np.reshape(value, (*lead, -1)) for value in gradient], axis=-1)

    @property
    def gradient_fields(self):
        """The parameter arrays whose gradient :meth:`pull_back` reads (those of the
        blocks; every array when the initial covariance is the stationary one)."""
        if self._stationary is not None:
            return frozenset(LGSSMParameters._fields)
        return frozenset(self.blocks)

    def pull_back(self, u, gradient):
        """The chain rule: the gradient with respect to ``u`` from that with respect
        to the parameters (leading axes kept, e.g. one per row); only the arrays of
        :attr:`gradient_fields` are read."""
        if self._stationary is not None:
            return self.flatten(gradient) @ self.jacobian(u)
        u = self._check(u)
        parts = []
        for name, block in self.blocks.items():
            values = np.asarray(getattr(gradient, name))
            lead = values.shape[: values.ndim - block.template.ndim]  # one per row, say
            parts.append(values.reshape((*lead, -1)) @ block.jacobian(u[self._slices[name]]))
        if not parts:
            lead = np.shape(gradient.transition_matrix)[:-2]
            return np.zeros((*lead, 0))
        return np.concatenate(parts, axis=-1)

    def reported(self, u):
        """The constrained coordinates: the free entries of each parameter (the
        lower triangle of a Cholesky-parameterised covariance)."""
        u = self._check(u)
        parts = [
            block.reported_values(u[self._slices[name]]) for name, block in self.blocks.items()
        ]
        return np.concatenate(parts) if parts else np.zeros(0)

    def reported_jacobian(self, u):
        """d reported / du, of shape (n_free, n_free), for the delta method."""
        u = self._check(u)
        jacobian = np.zeros((self.n_free, self.n_free))
        for name, block in self.blocks.items():
            where = self._slices[name]
            jacobian[where, where] = block.reported_jacobian(u[where])
        return jacobian


def _stationary_covariance(transition, source):
    """The solution P of P = F P F^T + S (symmetrised)."""
    solution = scipy.linalg.solve_discrete_lyapunov(transition, source)
    return 0.5 * (solution + solution.T)


def _check_parameterization(parameterization):
    if not isinstance(parameterization, LGSSMParameterization):
        raise TypeError(
            "parameterization must be an LGSSMParameterization, got "
            f"{type(parameterization).__name__}."
        )


def _prepared(parameterization, X, controls, lengths, diffuse=None):
    _check_parameterization(parameterization)
    _, X, controls, offsets, _ = _validated(
        parameterization.parameters, X, controls, lengths, diffuse
    )
    return X, controls, offsets


def _at(parameterization, u, diffuse):
    """The parameters at ``u`` and P_inf (None without ``diffuse``), validated."""
    parameters = parameterization.constrained(u)
    if diffuse is None:
        return parameters, None
    return check_diffuse_parameters(parameters, diffuse)


def _burn_rows(offsets, burn):
    """The indices of the first ``burn`` rows of each sequence, and their offsets."""
    starts = offsets[:-1]
    counts = np.minimum(np.diff(offsets), burn)
    rows = np.concatenate([np.arange(start, start + count) for start, count in zip(starts, counts)])
    return rows.astype(np.intp), np.concatenate([[0], np.cumsum(counts)]).astype(np.intp)


def _burned_head(X, controls, offsets, burn):
    """``(X, controls, offsets)`` of the first ``burn`` rows of each sequence (None
    without ``burn``): formed once per maximisation, not per objective call."""
    if not burn:
        return None
    rows, burn_offsets = _burn_rows(offsets, burn)
    return X[rows], controls[rows], burn_offsets


def _burned_gradient(
    parameterization, u, X, controls, offsets, burn, diffuse=None, runner=None, head_rows=None
):
    """``(log_likelihood, gradient in u)`` of the rows after the first ``burn`` of each
    sequence (statsmodels' ``loglikelihood_burn``): log p(x_{b+1..n} | x_{1..b}) is
    log p(x_{1..n}) - log p(x_{1..b}), each by the Fisher identity (the diffuse
    log-likelihood with ``diffuse``); gradient None on a numerical failure.
    ``head_rows`` is :func:`_burned_head`'s (formed here when None).  The map from
    the smoothed statistics to the gradient is linear, so it is applied once, to
    the difference of the two passes' statistics."""
    parameters, diffuse_covariance = _at(parameterization, u, diffuse)
    model = make_model(parameters)
    statistics, sequence = _statistics_over_blocks(
        model, X, controls, offsets, runner, diffuse_covariance
    )
    log_likelihood = float(sequence.sum())
    if not np.isfinite(log_likelihood):
        return log_likelihood, None
    if burn:
        if head_rows is None:
            head_rows = _burned_head(X, controls, offsets, burn)
        head, head_sequence = _statistics_over_blocks(model, *head_rows, runner, diffuse_covariance)
        head_log_likelihood = float(head_sequence.sum())
        if not np.isfinite(head_log_likelihood):
            return np.nan, None
        log_likelihood -= head_log_likelihood
        statistics = {name: value - head[name] for name, value in statistics.items()}
    gradient = _gradient_from_statistics(
        parameters, statistics, diffuse_covariance, parameterization.gradient_fields
    )
    return log_likelihood, parameterization.pull_back(u, gradient)


def _objective(parameterization, X, controls, offsets, burn=0, diffuse=None, runner=None):
    """f(u) = -log p(X) / n_observed and its gradient, for the optimiser."""
    n_observed = max(int(np.count_nonzero(~np.isnan(X))), 1)
    head_rows = _burned_head(X, controls, offsets, burn)

    def objective(u):
        try:
            log_likelihood, gradient = _burned_gradient(
                parameterization, u, X, controls, offsets, burn, diffuse, runner, head_rows
            )
        except (np.linalg.LinAlgError, ValueError, FloatingPointError):
            return np.inf, np.zeros_like(u)
        if gradient is None or not np.isfinite(log_likelihood):
            return np.inf, np.zeros_like(u)
        return -log_likelihood / n_observed, -gradient / n_observed

    return objective, n_observed


@masked_arrays_checked(missing=("X",))
def lgssm_maximum_likelihood(
    parameterization,
    X,
    *,
    controls=None,
    lengths=None,
    start=None,
    max_iter=500,
    tol=1e-6,
    burn=0,
    diffuse=None,
    hold=None,
    n_jobs=None,
):
    """Maximise the exact log-likelihood over a parameterization, by L-BFGS-B.

    The objective is the log-likelihood per observed value, with the
    analytic gradient of :func:`lgssm_log_likelihood_gradient` pulled back
    to the unconstrained coordinates.

    Parameters
    ----------
    parameterization : LGSSMParameterization
    X : array-like of shape (n_samples, n_features)
        NaN marks a missing entry.
    controls : array-like of shape (n_samples, n_controls), optional
    lengths : array-like of int, optional
    start : array-like of shape (n_free,), optional
        The starting point (default: the template's coordinates).
    max_iter : int, default=500
        L-BFGS-B iterations at most.
    tol : float, default=1e-6
        L-BFGS-B stops when an iteration gains less than about ``tol`` in
        log-likelihood (its ``ftol``, relative to the starting
        log-likelihood) or when every coordinate of the gradient of the
        log-likelihood is below ``tol`` in absolute value (its ``gtol``); a
        negative ``tol`` runs ``max_iter`` iterations.
    burn : int, default=0
        The first ``burn`` rows of each sequence do not count: the maximised
        log-likelihood is log p(rows after them | them) (statsmodels'
        ``loglikelihood_burn``, the rows an approximately diffuse initial
        state leaves uninformative).
    diffuse : None, True, array-like of bool of shape (n_state,) or of shape (n_state, n_state)
        The exact diffuse initial state
        (:func:`~skseq.inference.kalman.kalman_filter`'s ``diffuse``): the
        diffuse log-likelihood is maximised, with its gradient from the exact
        diffuse smoother; the parameterization's ``initial_state_covariance``
        is P_* (it may be singular).
    hold : array-like of bool of shape (n_free,) or list of str, optional
        Coordinates (a mask, or their labels) held at their starting values
        (L-BFGS-B's bounds pin them): a variance put on the boundary, say,
        while the others are maximised.
    n_jobs : int, default=None
        Threads for every gradient, over blocks of whole sequences (the kernels release the GIL),
        as in EM's E step; ``None`` means 1.  The result equals the
        one-thread result up to rounding (the blocks' sums are added in order).

    Returns
    -------
    LGSSMMaximumLikelihood

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman import LGSSMParameters, sample_lgssm
    >>> from skseq.inference.kalman_mle import (
    ...     LGSSMParameterization, LogVariances, lgssm_maximum_likelihood)
    >>> truth = LGSSMParameters([[1.0]], [[1.0]], [[0.5]], [[2.0]])
    >>> X = sample_lgssm(truth, 2000, random_state=0).observations
    >>> parameterization = LGSSMParameterization(
    ...     truth._replace(transition_covariance=[[1.0]], observation_covariance=[[1.0]]),
    ...     {"transition_covariance": LogVariances(), "observation_covariance": LogVariances()})
    >>> fit = lgssm_maximum_likelihood(parameterization, X)
    >>> estimates = parameterization.reported(fit.unconstrained)  # Q and R
    >>> fit.converged, bool(np.allclose(estimates, [0.5, 2.0], rtol=0.15))
    (True, True)
    """
    check_scalar_param(max_iter, "max_iter", "int", low=0)
    check_scalar_param(tol, "tol", "real", allow_inf=True)
    check_scalar_param(burn, "burn", "int", low=0)
    check_n_jobs(n_jobs)
    X, controls, offsets = _prepared(parameterization, X, controls, lengths, diffuse)
    u = parameterization.unconstrained() if start is None else parameterization._check(start)
    held = _coordinate_mask(hold, parameterization, "hold")
    with thread_runner(n_jobs) as runner:
        return _maximise(
            parameterization, X, controls, offsets, u, max_iter, tol, burn, diffuse, runner, held
        )


# L-BFGS-B runs restarted after a failed trial point ended one (see _maximise)
_MAX_RESTARTS = 5


def _maximise(
    parameterization, X, controls, offsets, u, max_iter, tol, burn, diffuse, runner, held
):
    """L-BFGS-B from ``u`` on validated inputs (:func:`lgssm_maximum_likelihood`).

    A trial point where the recursions fail (a variance driven towards 0 under
    an approximately diffuse start, say) has no finite log-likelihood; its
    line search can then fall back to where it started, which L-BFGS-B reports
    as convergence ("relative reduction of f") with the gradient far from 0.
    Such a run is restarted from its last point with a fresh curvature memory
    (whose first step is short), while the gradient is not small and the
    restarts make progress.  ``held`` (a mask) pins coordinates at ``u``.
    """
    objective, n_observed = _objective(
        parameterization, X, controls, offsets, burn, diffuse, runner
    )
    first, first_gradient = objective(u)
    if not np.isfinite(first):
        raise ValueError("the log-likelihood at the starting point is not finite.")
    history = [-first * n_observed]
    failed_trials = [0]
    start = u.copy()

    def counted(point):
        if np.array_equal(point, start):  # L-BFGS-B's first call: evaluated above
            return first, first_gradient.copy()
        value, gradient = objective(point)
        if not np.isfinite(value):
            failed_trials[0] += 1
        return value, gradient

    def record(intermediate_result):
        history.append(-float(intermediate_result.fun) * n_observed)

    gtol = max(tol, 0.0) / n_observed
    bounds = None
    if held.any():
        bounds = [(value, value) if pinned else (None, None) for value, pinned in zip(u, held)]
    if max_iter > 0 and not held.all():  # (all of none when n_free is 0)
        n_iter = 0
        for _ in range(_MAX_RESTARTS + 1):
            failed_before = failed_trials[0]
            result = scipy.optimize.minimize(
                counted,
                u,
                jac=True,
                method="L-BFGS-B",
                bounds=bounds,
                callback=record,
                options={
                    "maxiter": max_iter - n_iter,
                    "ftol": max(tol, 0.0) / max(abs(history[0]), n_observed),
                    "gtol": gtol,
                },
            )
            n_iter += int(result.nit)
            stalled = (
                result.success
                and failed_trials[0] > failed_before
                and np.max(np.abs(result.jac[~held]), initial=0.0) > gtol
            )
            moved = not np.array_equal(result.x, u) or result.nit > 0
            u = result.x
            if not stalled or n_iter >= max_iter or not moved:
                break
        value, converged, message = result.fun, bool(result.success), str(result.message)
        if stalled:  # the restarts did not get away from the failing points: loud
            converged = False
            message = (
                "stopped next to parameters where the Kalman recursions fail, with the "
                "gradient not small"
            )
    elif not held.all():
        value, n_iter, converged, message = first, 0, False, "max_iter=0: no iteration"
    else:
        value, n_iter, converged, message = first, 0, True, "no free parameter"
    return LGSSMMaximumLikelihood(
        _at(parameterization, u, diffuse)[0],
        u,
        -float(value) * n_observed,
        n_iter,
        converged,
        message,
        np.asarray(history),
    )


@masked_arrays_checked(missing=("X",))
def lgssm_parameter_covariance(
    parameterization,
    unconstrained,
    X,
    *,
    controls=None,
    lengths=None,
    cov_type="opg",
    burn=0,
    diffuse=None,
    at_bound=None,
    n_jobs=None,
):
    """Standard errors of maximum-likelihood estimates, with the delta method.

    Parameters
    ----------
    parameterization : LGSSMParameterization
    unconstrained : array-like of shape (n_free,)
        The estimate's coordinates (:attr:`LGSSMMaximumLikelihood.unconstrained`).
    X : array-like of shape (n_samples, n_features)
    controls : array-like of shape (n_samples, n_controls), optional
    lengths : array-like of int, optional
    cov_type : {"opg", "oim"}, default="opg"
        "opg": the information is the sum of the outer products of the rows'
        scores (:func:`lgssm_score_obs`), statsmodels' default.  "oim": the
        observed information, minus the Hessian of the log-likelihood by
        central differences of its analytic gradient (symmetrised).
    burn : int, default=0
        The first ``burn`` rows of each sequence do not count (as in
        :func:`lgssm_maximum_likelihood`): their scores are left out.
    diffuse : None, True, array-like of bool of shape (n_state,) or of shape (n_state, n_state)
        The exact diffuse initial state (:func:`lgssm_maximum_likelihood`'s);
        with ``cov_type="opg"`` the rows' scores are then central differences
        of their log predictive densities under the exact diffuse filter (the
        analytic per-row scores are not available under it; statsmodels
        differences its scores likewise), two filter passes per coordinate.
    at_bound : array-like of bool of shape (n_free,) or list of str, optional
        The coordinates (a mask, or their labels) whose estimate lies on the
        boundary of the parameter space, such as a variance at zero: the
        normal approximation does not hold there, and the score is not zero.
        They are held at their values: their rows and columns of the
        covariances are NaN, and the others' covariance is the inverse of
        their own block of the information (statsmodels' standard errors
        with those parameters fixed, ``fix_params``).
    n_jobs : int, default=None
        Threads over blocks of whole sequences (the kernels release the GIL),
        as in EM's E step; ``None`` means 1.  The result equals the
        one-thread result up to rounding (the blocks' sums are added in order).

    Returns
    -------
    LGSSMParameterCovariance
        The unconstrained covariance is the pseudo-inverse of the
        information, from its eigendecomposition: directions whose
        eigenvalue is within the information's accuracy of zero (a model
        whose state basis is free has such directions; the observed
        information is accurate to about eps^(2/3) of its largest
        eigenvalue, the outer product to about n_free eps) are left out,
        and the coordinates that load on them are not identified: NaN rows
        and columns, with a warning (statsmodels warns of a singular
        covariance and reports its pseudo-inverse's numbers); a
        negative eigenvalue beyond that (the observed information of a
        point that is not a strict maximum) gives the coordinates that load
        on it a negative variance, and so a NaN standard error, with a
        warning.  The constrained covariance is J cov J^T with
        J = d reported / du.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman import LGSSMParameters, sample_lgssm
    >>> from skseq.inference.kalman_mle import (
    ...     LGSSMParameterization, LogVariances, lgssm_parameter_covariance)
    >>> truth = LGSSMParameters([[1.0]], [[1.0]], [[0.5]], [[2.0]])
    >>> X = sample_lgssm(truth, 500, random_state=0).observations
    >>> parameterization = LGSSMParameterization(
    ...     truth, {"observation_covariance": LogVariances()})
    >>> result = lgssm_parameter_covariance(
    ...     parameterization, parameterization.unconstrained(), X, cov_type="oim")
    >>> result.labels, bool(result.standard_errors[0] > 0)
    (['observation_covariance[0,0]'], True)
    """
    if cov_type not in COV_TYPES:
        raise ValueError(f"cov_type must be one of {list(COV_TYPES)}, got {cov_type!r}.")
    check_scalar_param(burn, "burn", "int", low=0)
    check_n_jobs(n_jobs)
    X, controls, offsets = _prepared(parameterization, X, controls, lengths, diffuse)
    u = parameterization._check(unconstrained)
    free = ~_coordinate_mask(at_bound, parameterization, "at_bound")
    n = parameterization.n_free
    with thread_runner(n_jobs) as runner:
        free_information = _information(
            parameterization, u, X, controls, offsets, cov_type, burn, diffuse, runner, free
        )
    information = np.full((n, n), np.nan)
    information[np.ix_(free, free)] = free_information
    free_covariance, unidentified = _pseudo_inverse(
        free_information,
        cov_type,
        [label for label, kept in zip(parameterization.labels, free) if kept],
    )
    jacobian = parameterization.reported_jacobian(u)[:, free]
    covariance = jacobian @ free_covariance @ jacobian.T
    # the reported coordinates that move with a held or unidentified one: NaN
    missing = ~free
    missing[free] = unidentified
    missing |= np.any(jacobian[:, unidentified] != 0, axis=1)
    covariance[missing, :] = np.nan
    covariance[:, missing] = np.nan
    unconstrained_covariance = np.full((n, n), np.nan)
    unconstrained_covariance[np.ix_(free, free)] = free_covariance
    bad = np.flatnonzero(free)[unidentified]
    unconstrained_covariance[bad, :] = np.nan
    unconstrained_covariance[:, bad] = np.nan
    return LGSSMParameterCovariance(
        parameterization.labels,
        parameterization.reported(u),
        covariance,
        _standard_errors(covariance),
        unconstrained_covariance,
        information,
    )


def _standard_errors(covariance):
    """The square roots of a covariance's diagonal; NaN where it is negative or NaN
    (never a 0 for a negative variance)."""
    variances = np.diag(covariance)
    errors = np.full(variances.shape, np.nan)
    valid = variances >= 0  # False for NaN
    errors[valid] = np.sqrt(variances[valid])
    return errors


def _coordinate_mask(coordinates, parameterization, name):
    """The boolean mask over the free coordinates of ``coordinates`` (a mask, or
    labels; None: none), the argument ``name``."""
    n = parameterization.n_free
    if coordinates is None:
        return np.zeros(n, dtype=bool)
    if isinstance(coordinates, str):
        coordinates = [coordinates]
    values = list(coordinates)
    if not values:
        return np.zeros(n, dtype=bool)
    if all(isinstance(value, str) for value in values):
        unknown = sorted(set(values) - set(parameterization.labels))
        if unknown:
            raise ValueError(
                f"{name} names unknown coordinate(s) {unknown}; the coordinates are "
                f"{parameterization.labels}."
            )
        return np.isin(np.asarray(parameterization.labels, dtype=object), values)
    mask = np.asarray(coordinates)
    if mask.dtype != bool or mask.shape != (n,):
        raise ValueError(
            f"{name} must be a boolean mask of shape ({n},) or a list of coordinate "
            f"labels, got an array of dtype {mask.dtype} and shape {mask.shape}."
        )
    return mask.copy()


def _pseudo_inverse(information, cov_type, labels):
    """``(covariance, unidentified)``: the inverse of a symmetric information matrix by
    its eigendecomposition, the directions within its accuracy of zero left out, and
    the mask of the coordinates that load on them (not identified: their variance is
    unbounded, their rows and columns NaN), with a warning; and a warning when it is
    indefinite beyond its accuracy (see :func:`lgssm_parameter_covariance`)."""
    n = information.shape[0]
    if n == 0:
        return np.zeros((0, 0)), np.zeros(0, dtype=bool)
    values, vectors = np.linalg.eigh(0.5 * (information + information.T))
    largest = np.max(np.abs(values))
    eps = np.finfo(np.float64).eps
    accuracy = eps ** (2 / 3) if cov_type == "oim" else n * eps
    kept = np.abs(values) > accuracy * largest
    # a coordinate with more than rounding's share of a null direction is not identified
    unidentified = np.any(np.abs(vectors[:, ~kept]) > _LOADING, axis=1)
    if not np.all(kept):
        names = [label for label, flag in zip(labels, unidentified) if flag]
        warn_user(
            f"The information matrix (cov_type={cov_type!r}) is singular to its accuracy: "
            f"{int(np.sum(~kept))} of its {n} eigenvalues are within {accuracy:.1e} of the "
            f"largest ({largest:.3g}), so {names} are not identified by the data at this "
            "estimate: their standard errors are NaN.",
            UserWarning,
        )
    negative = kept & (values < 0)
    if np.any(negative):
        names = [
            label
            for label, loads in zip(labels, np.any(np.abs(vectors[:, negative]) > 0.1, axis=1))
            if loads
        ]
        warn_user(
            f"The observed information is not positive definite (eigenvalue(s) "
            f"{np.array2string(values[negative], precision=3)} against the largest "
            f"{largest:.3g}): the estimate is not a strict local maximum in some "
            f"direction, and the standard errors of {names} are NaN where their "
            "variance comes out negative.",
            UserWarning,
        )
    covariance = (vectors[:, kept] / values[kept]) @ vectors[:, kept].T
    covariance[unidentified, :] = 0.0
    covariance[:, unidentified] = 0.0
    return covariance, unidentified


# The share of a null direction of the information (an eigenvector's entry) above
# which a coordinate counts as not identified: far above the rounding of eigh's
# vectors, far below any real loading.
_LOADING = 1e-6


def _differenced_row_scores(parameterization, u, X, controls, offsets, diffuse, free, runner):
    """The rows' scores in the coordinates ``free`` by central differences of the rows'
    log predictive densities under the exact diffuse filter (validated inputs).

    The step is the observed information's (:func:`_central_differences`): the
    error is of order 1e-10 of a score, far below what the outer product's
    sampling error allows for.
    """

    def log_predictive(point):
        parameters, diffuse_covariance = _at(parameterization, point, diffuse)
        model = make_model(parameters)
        parts = _over_blocks(
            lambda X, controls, local: _filter_offsets(
                model, X, controls, local, diffuse_covariance
            ),
            X,
            controls,
            offsets,
            runner,
        )
        _raise_if_failed(
            np.concatenate([part.sequence_log_likelihood for part in parts]), diffuse=True
        )
        return np.concatenate([part.log_predictive for part in parts])

    return _central_differences(log_predictive, u, free)


def _central_differences(function, u, free):
    """The columns d function / du_j for the coordinates ``free`` (a mask), by central
    differences with the step eps^(1/3) max(|u_j|, 1): of shape
    (function's length, number of free coordinates)."""
    steps = np.finfo(np.float64).eps ** (1 / 3) * np.maximum(np.abs(u), 1.0)
    columns = []
    for j in np.flatnonzero(free):
        shift = np.zeros(u.size)
        shift[j] = steps[j]
        columns.append((function(u + shift) - function(u - shift)) / (2 * steps[j]))
    return np.stack(columns, axis=-1)


def _information(
    parameterization, u, X, controls, offsets, cov_type, burn, diffuse, runner, free=None
):
    """The information matrix of the unconstrained coordinates ``free`` (a mask; all by
    default) at ``u`` (validated inputs), the others held at their values."""
    free = np.ones(parameterization.n_free, dtype=bool) if free is None else free
    if cov_type == "opg":
        if diffuse is None:
            per_row = _pulled_score_obs_offsets(parameterization, u, X, controls, offsets, runner)
            per_row = per_row[:, free]
        else:
            per_row = _differenced_row_scores(
                parameterization, u, X, controls, offsets, diffuse, free, runner
            )
        if burn:
            per_row[_burn_rows(offsets, burn)[0]] = 0.0
        return per_row.T @ per_row

    head_rows = _burned_head(X, controls, offsets, burn)

    def gradient(point):
        log_likelihood, gradient = _burned_gradient(
            parameterization, point, X, controls, offsets, burn, diffuse, runner, head_rows
        )
        if gradient is None:
            _raise_if_failed(np.array([np.nan]), diffuse=diffuse is not None)
        return gradient[free]

    hessian = _central_differences(gradient, u, free)
    return -0.5 * (hessian + hessian.T)
