"""Exact inference in linear-Gaussian state-space models, on plain arrays.

The model (doc/user_guide/lgssm.rst), with ``k`` states, ``p`` observed
features and ``m`` optional control inputs::

    z_1 ~ N(mu0, Sigma0)
    z_t = F z_{t-1} + G u_t + b + w_t,     w_t ~ N(0, Q)
    x_t = H z_t + d + v_t,                 v_t ~ N(0, R)

Every public function takes the model first, as one :class:`LGSSMParameters`
(F, H, Q, R and the optional b, d, G, mu0, Sigma0), then the data, then
keyword-only options; :func:`check_lgssm_parameters` validates it.

Several sequences are passed concatenated, with ``lengths``; ``controls`` has
one row per row of ``X`` and the control of the first row of each sequence is
not used (there is no transition into the first state).  A NaN in ``X`` is a
missing value: a row with some NaN entries is conditioned on its observed
entries only, exactly, and a row with no observed entry skips the update.

The kernels use the Joseph-form covariance update and Cholesky solves (no
matrix is ever inverted); they release the GIL.

``diffuse=`` (of :func:`kalman_filter` and :func:`kalman_smoother`, and of
the maximum-likelihood functions of :mod:`skseq.inference.kalman_mle`) gives
the first state the exact diffuse prior N(mu0, P_* + kappa P_inf),
kappa -> infinity (Koopman's exact diffuse filter and its smoother; the
parameters' ``initial_state_covariance`` is then P_*): statsmodels' exact
diffuse initialisation and diffuse log-likelihood
(doc/user_guide/lgssm.rst, "Exact diffuse initialisation").

:func:`kalman_forward_smoothing` computes the EM statistics of a sequence that
arrives in chunks, exactly, by forward-only smoothing: the message carried
from one chunk to the next (:class:`KalmanStreamState`) has a size fixed by
the dimensions of the model, never by the number of rows seen
(doc/user_guide/lgssm.rst, "Streams: forward-only smoothing").
"""

import functools
import math
from typing import NamedTuple

import numpy as np
from sklearn.utils import check_random_state

from .._kernels import _kalman
from .._sequences import (
    checkpoint_rows,
    isolate_long_sequences,
    memory_budget_rows,
    sequence_offsets,
)
from .._validation import check_allocation, check_data_scale, check_scalar_param, masked_as_nan
from ._checks import masked_arrays_checked

__all__ = [
    "LGSSMParameters",
    "kalman_filter",
    "kalman_smoother",
    "kalman_filter_step",
    "kalman_forecast",
    "sample_lgssm",
    "KalmanFilterResult",
    "KalmanSmootherResult",
    "KalmanFilterStep",
    "KalmanLastStates",
    "KalmanForecast",
    "LGSSMSample",
    "kalman_forward_smoothing",
    "KalmanStreamState",
    "KalmanForwardSmoothingResult",
]


class LGSSMParameters(NamedTuple):
    """The parameters of a linear-Gaussian SSM, as every function here takes them.

    Build it once and pass it to each call; every function validates it
    (:func:`check_lgssm_parameters`).  The four arrays without a default are
    required; ``None`` gives the default of the others.

    Attributes
    ----------
    transition_matrix : array-like of shape (n_state, n_state)
        F.
    observation_matrix : array-like of shape (n_features, n_state)
        H.
    transition_covariance : array-like of shape (n_state, n_state)
        Q, symmetric positive definite.
    observation_covariance : array-like of shape (n_features, n_features)
        R, symmetric positive definite.
    transition_offset : array-like of shape (n_state,), default=zeros
        b.
    observation_offset : array-like of shape (n_features,), default=zeros
        d.
    control_matrix : array-like of shape (n_state, n_controls), default=no controls
        G; the functions then require ``controls``.
    initial_state_mean : array-like of shape (n_state,), default=zeros
        mu0, the prior mean of the first state of every sequence.
    initial_state_covariance : array-like of shape (n_state, n_state), default=identity
        Sigma0, symmetric positive definite.

    Notes
    -----
    Time-varying systems (pykalman's): the transition matrix, covariance and
    offset may have a leading axis of ``n_timesteps - 1`` steps (step t moves
    row t to row t + 1; ``n_timesteps`` steps are accepted too, the last
    unused), the observation matrix, covariance and offset one of
    ``n_timesteps`` steps.  The filter, the smoother and the sampler then
    need sequences of ``n_timesteps`` rows (:func:`check_time_axis`),
    forward-only smoothing the ``start`` of each chunk; the forecast and
    the one-step filter refuse them.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman import LGSSMParameters, kalman_filter
    >>> parameters = LGSSMParameters(
    ...     transition_matrix=[[1.0]], observation_matrix=[[1.0]],
    ...     transition_covariance=[[0.1]], observation_covariance=[[0.5]])
    >>> kalman_filter(parameters, np.array([[1.0], [1.2]])).filtered_means.shape
    (2, 1)

    A transition that changes at each of the two steps of three rows:

    >>> varying = parameters._replace(transition_matrix=[[[0.5]], [[2.0]]])
    >>> kalman_filter(varying, np.array([[1.0], [1.2], [0.8]])).predicted_means.ravel().round(3)
    array([0.   , 0.333, 1.132])
    """

    transition_matrix: np.ndarray
    observation_matrix: np.ndarray
    transition_covariance: np.ndarray
    observation_covariance: np.ndarray
    transition_offset: np.ndarray = None
    observation_offset: np.ndarray = None
    control_matrix: np.ndarray = None
    initial_state_mean: np.ndarray = None
    initial_state_covariance: np.ndarray = None


class KalmanFilterResult(NamedTuple):
    """What :func:`kalman_filter` returns.

    Attributes
    ----------
    filtered_means : ndarray of shape (n_samples, n_state)
        E[z_t | x_1..x_t] for every row.
    filtered_covariances : ndarray of shape (n_samples, n_state, n_state)
        Cov(z_t | x_1..x_t).
    predicted_means : ndarray of shape (n_samples, n_state)
        E[z_t | x_1..x_{t-1}] (the prior mean ``mu0`` on the first row of a sequence).
    predicted_covariances : ndarray of shape (n_samples, n_state, n_state)
        Cov(z_t | x_1..x_{t-1}).
    log_likelihood : float
        log p(x) summed over sequences (observed entries only).
    sequence_log_likelihood : ndarray of shape (n_sequences,)
        log p(x) of each sequence.
    log_predictive : ndarray of shape (n_samples,)
        log p(x_t | x_1..x_{t-1}) of each row's observed entries (0 for a row
        with none); per sequence these sum to its log-likelihood.
    predicted_diffuse_covariances : ndarray of shape (n_samples, n_state, n_state) or None
        With ``diffuse=``: P_inf of each row's predicted state (zero from the
        first non-diffuse row of its sequence on); the covariances above are
        then the P_* parts of the diffuse rows.  None without ``diffuse=``.
    n_diffuse : ndarray of shape (n_sequences,) or None
        With ``diffuse=``: the number of diffuse rows at the start of each
        sequence (statsmodels' ``nobs_diffuse``).  None without.
    """

    filtered_means: np.ndarray
    filtered_covariances: np.ndarray
    predicted_means: np.ndarray
    predicted_covariances: np.ndarray
    log_likelihood: float
    sequence_log_likelihood: np.ndarray
    log_predictive: np.ndarray
    predicted_diffuse_covariances: np.ndarray = None
    n_diffuse: np.ndarray = None


class KalmanSmootherResult(NamedTuple):
    """What :func:`kalman_smoother` returns.

    Attributes
    ----------
    smoothed_means : ndarray of shape (n_samples, n_state)
        E[z_t | x] given the whole sequence.
    smoothed_covariances : ndarray of shape (n_samples, n_state, n_state)
        Cov(z_t | x).
    cross_covariances : ndarray of shape (n_samples, n_state, n_state)
        Lag-one cross-covariances indexed by the *later* row:
        ``cross_covariances[t] = Cov(z_t, z_{t-1} | x)``, i.e. the covariance
        of each row's state with the previous row's state (rows of the state
        at t, columns of the state at t-1).  Zero on the first row of every
        sequence, which has no predecessor.
    log_likelihood : float
        log p(x) summed over sequences.
    sequence_log_likelihood : ndarray of shape (n_sequences,)
    log_predictive : ndarray of shape (n_samples,)
        log p(x_t | x_1..x_{t-1}) of each row.
    n_diffuse : ndarray of shape (n_sequences,) or None
        With ``diffuse=``: the number of diffuse rows at the start of each
        sequence.  None without.
    """

    smoothed_means: np.ndarray
    smoothed_covariances: np.ndarray
    cross_covariances: np.ndarray
    log_likelihood: float
    sequence_log_likelihood: np.ndarray
    log_predictive: np.ndarray
    n_diffuse: np.ndarray = None


class KalmanFilterStep(NamedTuple):
    """What :func:`kalman_filter_step` returns.

    Attributes
    ----------
    filtered_state_mean : ndarray of shape (n_state,)
        E[z_t | x_1..x_t].
    filtered_state_covariance : ndarray of shape (n_state, n_state)
        Cov(z_t | x_1..x_t).
    log_predictive : float
        log p(x_t | x_1..x_{t-1}) of the observed entries (0 when none is);
        NaN from the unchecked core when a covariance lost positive
        definiteness (the public function raises).
    """

    filtered_state_mean: np.ndarray
    filtered_state_covariance: np.ndarray
    log_predictive: float


class KalmanLastStates(NamedTuple):
    """The filter's last state of each sequence (what streams and forecasts start from).

    Attributes
    ----------
    last_means : ndarray of shape (n_sequences, n_state)
    last_covariances : ndarray of shape (n_sequences, n_state, n_state)
    sequence_log_likelihood : ndarray of shape (n_sequences,)
    log_predictive : ndarray of shape (n_samples,)
    """

    last_means: np.ndarray
    last_covariances: np.ndarray
    sequence_log_likelihood: np.ndarray
    log_predictive: np.ndarray


class KalmanForecast(NamedTuple):
    """What :func:`kalman_forecast` returns.

    Attributes
    ----------
    means : ndarray of shape (n_sequences * n_steps, n_features)
        Row ``s * n_steps + h`` is E[x_{T_s + h + 1} | sequence s].
    covariances : ndarray of shape (n_sequences * n_steps, n_features, n_features)
        Cov(x_{T_s + h + 1} | sequence s).
    """

    means: np.ndarray
    covariances: np.ndarray


class LGSSMSample(NamedTuple):
    """What :func:`sample_lgssm` returns.

    Attributes
    ----------
    observations : ndarray of shape (n_samples, n_features)
    states : ndarray of shape (n_samples, n_state)
    """

    observations: np.ndarray
    states: np.ndarray


class KalmanStreamState(NamedTuple):
    """The message a stream carries from one chunk to the next.

    Its size is fixed by the state, feature and control dimensions (k, p, m),
    whatever the number of rows seen.  Pass it back, unchanged, as
    ``carried`` with the next chunk of the same sequence.

    Attributes
    ----------
    filtered_mean : ndarray of shape (k,)
        E[z_t | x_1..x_t] of the last row seen.
    filtered_covariance : ndarray of shape (k, k)
        Cov(z_t | x_1..x_t).
    constant : ndarray of shape (n_moments,)
    linear : ndarray of shape (n_moments, k)
    quadratic : ndarray of shape (n_moments, k, k)
        The coefficients of T(z) = constant + linear z + z^T quadratic z, the
        expectation of each moment of all rows seen given the last state
        z_t = z and the rows (the moments are listed by
        :func:`skseq._kernels._kalman.stream_layout`).
    """

    filtered_mean: np.ndarray
    filtered_covariance: np.ndarray
    constant: np.ndarray
    linear: np.ndarray
    quadratic: np.ndarray


class KalmanForwardSmoothingResult(NamedTuple):
    """What :func:`kalman_forward_smoothing` returns.

    Attributes
    ----------
    statistics : dict of ndarray
        What the chunk adds to the smoothed EM statistics of the sequence (the
        keys listed in :func:`kalman_forward_smoothing`): its own rows' terms plus the
        revision of the earlier rows' terms in the light of the new rows.  At
        fixed parameters the chunks' statistics add up to those of the whole
        sequence.
    log_likelihood : float
        log p(chunk | earlier rows).
    carried : KalmanStreamState
        The message to pass with the next chunk.
    """

    statistics: dict
    log_likelihood: float
    carried: KalmanStreamState


# -- validation ---------------------------------------------------------------


def _as_float_array(value, name):
    if value is None:
        raise ValueError(f"{name} is required.")
    # Only observations may have missing (masked) entries: check_observations
    # turns those into NaN before this point.
    value = masked_as_nan(value, missing_supported=False, owner="the Kalman filter", name=name)
    array = np.asarray(value)
    if np.iscomplexobj(array):
        raise TypeError(f"{name} must be real; complex inputs are not supported.")
    try:
        array = np.asarray(array, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be numeric: {error}") from None
    return array


def check_matrix(value, name, shape):
    """A finite float64 array of exactly ``shape`` (a C-contiguous copy).

    Raises ValueError naming ``name`` on a wrong shape or a non-finite entry.
    """
    array = _as_float_array(value, name)
    if array.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {array.shape}.")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or infinity.")
    return np.array(array, dtype=np.float64, order="C", copy=True)


def _check_symmetric(value, name, dim):
    """A finite ``dim`` x ``dim`` matrix symmetric to 1e-8 relative, symmetrised (a copy)."""
    array = check_matrix(value, name, (dim, dim))
    scale = np.max(np.abs(array)) if array.size else 0.0
    if np.max(np.abs(array - array.T), initial=0.0) > 1e-8 * max(scale, 1e-300):
        raise ValueError(f"{name} must be symmetric.")
    return np.ascontiguousarray(0.5 * (array + array.T))


def check_covariance(value, name, dim):
    """A symmetric positive-definite ``dim`` x ``dim`` matrix (a symmetrised copy).

    Raises ValueError naming ``name`` when the shape is wrong, an entry is not
    finite, the matrix is not symmetric (to 1e-8 relative) or its Cholesky
    factorisation fails.
    """
    symmetric = _check_symmetric(value, name, dim)
    try:
        np.linalg.cholesky(symmetric)
    except np.linalg.LinAlgError:
        raise ValueError(f"{name} must be positive definite.") from None
    return symmetric


def check_state_covariance(value, name, dim):
    """A symmetric positive semi-definite ``dim`` x ``dim`` matrix (a symmetrised copy).

    For filtered state covariances, which may be singular to rounding (a
    direction the data pin down exactly): symmetric to 1e-8 relative and no
    eigenvalue below ``-1e-8`` times the largest.  Raises ValueError naming
    ``name``.
    """
    symmetric = _check_symmetric(value, name, dim)
    eigenvalues = np.linalg.eigvalsh(symmetric)
    if eigenvalues[0] < -1e-8 * max(eigenvalues[-1], 0.0):
        raise ValueError(f"{name} must be positive semi-definite.")
    return symmetric


def check_observations(X, name="X"):
    """X as a 2-D float64 array with at least one row and column; NaN allowed, inf not.

    A masked array's masked entries are missing values (NaN), as in pykalman.
    Data whose squared deviations from their mean overflow are refused by the
    rule of every Gaussian family (:func:`skseq._validation.check_data_scale`).
    """
    X = masked_as_nan(X, missing_supported=True, owner="the Kalman filter", name=name)
    X = _as_float_array(X, name)
    if X.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D (n_samples, n_features), got shape {X.shape}; "
            "reshape a single feature with X.reshape(-1, 1)."
        )
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {X.shape}).")
    if np.isinf(X).any():
        raise ValueError(
            f"{name} contains infinity (NaN marks a missing value; inf is not allowed)."
        )
    check_data_scale(X, "mean", name=name)
    return X


def check_controls(controls, n_samples, n_controls, name="controls"):
    """Controls as a finite (n_samples, n_controls) float64 array.

    ``None`` is accepted only when ``n_controls == 0`` and becomes an
    (n_samples, 0) array.  A 1-D array is taken as one control column.
    """
    if controls is None:
        if n_controls > 0:
            raise ValueError(
                f"The model has {n_controls} control input(s): pass {name} of shape "
                f"(n_samples, {n_controls})."
            )
        return np.zeros((n_samples, 0))
    controls = _as_float_array(controls, name)
    if controls.ndim == 1:
        controls = controls.reshape(-1, 1)
    if controls.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_samples, n_controls), got shape {controls.shape}.")
    if controls.shape[0] != n_samples:
        raise ValueError(
            f"{name} has {controls.shape[0]} rows but X has {n_samples}; "
            "give one control row per row of X."
        )
    if controls.shape[1] != n_controls:
        raise ValueError(
            f"{name} has {controls.shape[1]} columns but the control matrix has {n_controls}."
        )
    if not np.all(np.isfinite(controls)):
        raise ValueError(f"{name} contains NaN or infinity.")
    return controls


def check_lgssm_parameters(
    parameters,
    n_features=None,
    *,
    n_state=None,
    n_controls=None,
    suffix="",
    semidefinite_initial=False,
):
    """Validate the parameters of a linear-Gaussian SSM against each other.

    Every array must be finite and of the shape its dimensions imply; the
    three covariances symmetric positive definite.  The number of features
    is ``n_features`` when given (the data's), else read from
    ``observation_matrix``; the state dimension is ``n_state`` when given,
    else read from ``transition_matrix``; the number of controls is
    ``n_controls`` when given, else read from ``control_matrix``.  Defaults
    (a field that is None): zero offsets, zero initial mean, identity
    initial covariance, no controls.  Error messages name each parameter
    with ``suffix`` appended (``"_"`` for an estimator's fitted attributes).

    Parameters
    ----------
    parameters : LGSSMParameters
    n_features, n_state, n_controls : int, optional
    suffix : str, default=""
    semidefinite_initial : bool, default=False
        Accept a singular (positive semi-definite) ``initial_state_covariance``:
        the P_* of an exact diffuse initial state (:func:`check_diffuse_parameters`).

    Returns
    -------
    LGSSMParameters
        The validated arrays: float64, C-contiguous copies, covariances
        symmetrised, defaults filled in.

    Raises
    ------
    TypeError
        When ``parameters`` is not an :class:`LGSSMParameters`, or an array
        is complex.
    ValueError
        On a missing array, a wrong shape, a non-finite entry or a covariance
        that is not symmetric positive definite.
    """
    if not isinstance(parameters, LGSSMParameters):
        raise TypeError(
            "parameters must be an LGSSMParameters (build it with "
            "LGSSMParameters(transition_matrix=..., observation_matrix=..., "
            "transition_covariance=..., observation_covariance=...)), "
            f"got {type(parameters).__name__}."
        )
    (
        transition_matrix,
        observation_matrix,
        transition_covariance,
        observation_covariance,
        transition_offset,
        observation_offset,
        control_matrix,
        initial_state_mean,
        initial_state_covariance,
    ) = parameters

    def named(name):
        return name + suffix

    transition_matrix = _as_float_array(transition_matrix, named("transition_matrix"))
    if n_features is None:
        observation_matrix = _as_float_array(observation_matrix, named("observation_matrix"))
        if observation_matrix.ndim not in (2, 3):
            raise ValueError(
                f"{named('observation_matrix')} must be 2-D (n_features, n_state), or 3-D "
                "(n_timesteps, n_features, n_state) when it varies, "
                f"got {observation_matrix.shape}."
            )
        n_features = observation_matrix.shape[-2]
    if n_state is None:
        if transition_matrix.ndim not in (2, 3) or (
            transition_matrix.shape[-2] != transition_matrix.shape[-1]
        ):
            raise ValueError(
                f"{named('transition_matrix')} must be square (n_state, n_state), or "
                f"(n_timesteps - 1, n_state, n_state) when it varies, "
                f"got {transition_matrix.shape}."
            )
        n_state = transition_matrix.shape[-1]
    if n_state == 0:
        raise ValueError(
            f"{named('transition_matrix')} is empty: the state needs at least one dimension."
        )
    given = {
        "transition_matrix": transition_matrix,
        "observation_matrix": observation_matrix,
        "transition_covariance": transition_covariance,
        "observation_covariance": observation_covariance,
        "transition_offset": transition_offset,
        "observation_offset": observation_offset,
    }
    shapes = {
        "transition_matrix": (n_state, n_state),
        "observation_matrix": (n_features, n_state),
        "transition_covariance": n_state,
        "observation_covariance": n_features,
        "transition_offset": (n_state,),
        "observation_offset": (n_features,),
    }
    checked = {}
    for name, value in given.items():
        if value is None and name.endswith("_offset"):
            checked[name] = np.zeros(shapes[name][0])
            continue
        checker = check_covariance if name.endswith("_covariance") else check_matrix
        checked[name] = _check_time_varying(value, named(name), shapes[name], checker)
    _time_axis_lengths(checked, suffix)
    checked["initial_state_mean"] = (
        np.zeros(n_state)
        if initial_state_mean is None
        else check_matrix(initial_state_mean, named("initial_state_mean"), (n_state,))
    )
    checked["initial_state_covariance"] = (
        np.eye(n_state)
        if initial_state_covariance is None
        else (check_state_covariance if semidefinite_initial else check_covariance)(
            initial_state_covariance, named("initial_state_covariance"), n_state
        )
    )
    if control_matrix is None:
        control_matrix = np.zeros((n_state, 0 if n_controls is None else n_controls))
    control_matrix = _as_float_array(control_matrix, named("control_matrix"))
    if n_controls is None:
        if control_matrix.ndim != 2 or control_matrix.shape[0] != n_state:
            raise ValueError(
                f"{named('control_matrix')} must have shape ({n_state}, n_controls), "
                f"got {control_matrix.shape}."
            )
        n_controls = control_matrix.shape[1]
    checked["control_matrix"] = check_matrix(
        control_matrix, named("control_matrix"), (n_state, n_controls)
    )
    return LGSSMParameters(**checked)


# The arrays that may vary in time (pykalman's time-varying system), each with
# the number of dimensions of its constant form.
TIME_VARYING_NDIM = {
    "transition_matrix": 2,
    "transition_covariance": 2,
    "transition_offset": 1,
    "observation_matrix": 2,
    "observation_covariance": 2,
    "observation_offset": 1,
}


def _check_time_varying(value, name, shape, checker):
    """One parameter, constant or with a leading time axis (each step checked by ``checker``)."""
    constant_ndim = 2 if isinstance(shape, int) else len(shape)  # an int: a covariance's dim
    array = _as_float_array(value, name)
    if array.ndim != constant_ndim + 1:
        return checker(array, name, shape)
    if array.shape[0] == 0:
        raise ValueError(f"{name} has an empty time axis (shape {array.shape}).")
    # All steps at once; on a failure, step by step for the message naming the step.
    steps = _checked_steps(array, shape, covariance=checker is check_covariance)
    if steps is None:
        for t, step in enumerate(array):
            checker(step, f"{name}[{t}]", shape)
    return steps


def _checked_steps(array, shape, *, covariance):
    """The steps of ``array`` checked together as ``check_matrix`` / ``check_covariance``
    check one (a C-contiguous copy, covariances symmetrised), or None when one fails."""
    expected = (shape, shape) if covariance else tuple(shape)
    if array.shape[1:] != expected or not np.all(np.isfinite(array)):
        return None
    if not covariance:
        return np.array(array, dtype=np.float64, order="C", copy=True)
    transposed = np.swapaxes(array, 1, 2)
    scale = np.max(np.abs(array), axis=(1, 2), initial=0.0)
    asymmetry = np.max(np.abs(array - transposed), axis=(1, 2), initial=0.0)
    if np.any(asymmetry > 1e-8 * np.maximum(scale, 1e-300)):
        return None
    symmetric = np.ascontiguousarray(0.5 * (array + transposed))
    try:
        np.linalg.cholesky(symmetric)
    except np.linalg.LinAlgError:
        return None
    return symmetric


def _time_axis_lengths(parameters, suffix=""):
    """``(transition_steps, observation_steps)``: the lengths of the time axes of the
    transition and observation arrays (None where none varies).

    Raises ValueError when arrays of one group disagree on their length, or
    when both groups vary and the transitions are neither ``n_timesteps - 1``
    nor ``n_timesteps`` long (pykalman's conventions).
    """
    if isinstance(parameters, LGSSMParameters):
        parameters = parameters._asdict()
    lengths = {}
    for group in ("transition", "observation"):
        varying = {
            name + suffix: np.shape(parameters[name])[0]
            for name, ndim in TIME_VARYING_NDIM.items()
            if name.startswith(group) and np.ndim(parameters[name]) > ndim
        }
        if len(set(varying.values())) > 1:
            raise ValueError(
                f"The time axes of the {group} arrays differ in length: {varying}; "
                "give every time-varying array one entry per time step."
            )
        lengths[group] = next(iter(varying.values()), None)
    transition, observation = lengths["transition"], lengths["observation"]
    both = transition is not None and observation is not None
    if both and transition not in (observation - 1, observation):
        raise ValueError(
            f"The transition arrays have {transition} time steps but the observation arrays "
            f"{observation}: with n_timesteps observation steps, give n_timesteps - 1 "
            "transitions (the transition of step t moves row t to row t + 1)."
        )
    return transition, observation


def is_time_varying(parameters):
    """Whether validated :class:`LGSSMParameters` have an array with a time axis.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman import LGSSMParameters, is_time_varying
    >>> is_time_varying(LGSSMParameters([[1.0]], np.ones((5, 1, 1)), [[0.1]], [[0.5]]))
    True
    """
    return any(
        np.ndim(getattr(parameters, name)) > ndim for name, ndim in TIME_VARYING_NDIM.items()
    )


def check_time_axis(parameters, offsets, name="X"):
    """Refuse sequences whose length does not match the time axes of the parameters.

    With validated :class:`LGSSMParameters` and the row ``offsets`` of the
    sequences: a sequence of ``n`` rows needs observation arrays of ``n``
    steps and transition arrays of ``n - 1`` (or ``n``, the last unused, as
    pykalman accepts); the time axis indexes the rows of every sequence
    from its first.  Nothing is checked for a constant model.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman import (
    ...     LGSSMParameters, check_lgssm_parameters, check_time_axis)
    >>> parameters = check_lgssm_parameters(
    ...     LGSSMParameters([[1.0]], np.ones((5, 1, 1)), [[0.1]], [[0.5]]))
    >>> check_time_axis(parameters, np.array([0, 5, 10]))  # two sequences of 5 rows
    >>> check_time_axis(parameters, np.array([0, 4]))
    Traceback (most recent call last):
    ...
    ValueError: The model is time-varying: every sequence of X must have 5 rows ... has 4.
    """
    transition, observation = _time_axis_lengths(parameters)
    if transition is None and observation is None:
        return
    lengths = np.diff(np.asarray(offsets))
    wrong = np.zeros(len(lengths), dtype=bool)
    if observation is not None:
        wrong |= lengths != observation
    if transition is not None:
        wrong |= (lengths != transition + 1) & (lengths != transition)
    if wrong.any():
        first = int(np.flatnonzero(wrong)[0])
        expected = (
            f"{observation} rows (the observation arrays' time steps)"
            if observation is not None
            else f"{transition + 1} rows (the transition arrays' {transition} steps + 1; "
            f"or {transition}, the last transition unused)"
        )
        raise ValueError(
            f"The model is time-varying: every sequence of {name} must have {expected}, "
            f"but sequence {first} has {int(lengths[first])}."
        )


def refuse_time_varying(parameters, what, suffix=""):
    """Raise a ValueError naming ``what`` when the parameters vary in time."""
    if is_time_varying(parameters):
        names = [
            name + suffix
            for name, ndim in TIME_VARYING_NDIM.items()
            if np.ndim(getattr(parameters, name)) > ndim
        ]
        raise ValueError(
            f"{what} needs a constant model, but {', '.join(names)} "
            f"{'has' if len(names) == 1 else 'have'} a leading time axis: a time-varying "
            "system is supported by the filter, the smoother, the log-likelihood and "
            "sampling only."
        )


def make_model(parameters):
    """Pack already validated :class:`LGSSMParameters` for the kernels (no checks;
    covariances symmetrised)."""

    def matrix(value):
        return np.ascontiguousarray(value, dtype=np.float64)

    def covariance(value):
        value = np.asarray(value, dtype=np.float64)
        return np.ascontiguousarray(0.5 * (value + np.swapaxes(value, -1, -2)))

    return _kalman.LinearGaussianModel(
        matrix(parameters.transition_matrix),
        matrix(parameters.observation_matrix),
        covariance(parameters.transition_covariance),
        covariance(parameters.observation_covariance),
        matrix(parameters.transition_offset),
        matrix(parameters.observation_offset),
        matrix(parameters.initial_state_mean),
        covariance(parameters.initial_state_covariance),
        matrix(parameters.control_matrix),
    )


def check_diffuse_parameters(parameters, diffuse, n_features=None):
    """Validate the parameters and an exact diffuse initial state together.

    ``diffuse`` is None (no diffuse part: the parameters as
    :func:`check_lgssm_parameters` validates them), True (every state
    coordinate diffuse), a boolean mask of shape (n_state,) of the diffuse
    coordinates (P_inf the diagonal matrix of the mask), or a symmetric
    positive semi-definite P_inf of shape (n_state, n_state).  The
    parameters' ``initial_state_covariance`` is then P_*, which may be
    singular (positive semi-definite); with True or a mask its diffuse rows
    and columns are set to zero (statsmodels' convention; the exact limit
    does not depend on them).

    Returns
    -------
    parameters : LGSSMParameters
        Validated, ``initial_state_covariance`` holding P_* when diffuse.
    diffuse_covariance : ndarray of shape (n_state, n_state) or None
        P_inf, None without ``diffuse``.
    """
    everything = isinstance(diffuse, bool | np.bool_)  # True: every coordinate, False: none
    if diffuse is None or (everything and not diffuse):
        return check_lgssm_parameters(parameters, n_features), None
    checked = check_lgssm_parameters(parameters, n_features, semidefinite_initial=True)
    k = checked.transition_matrix.shape[-1]
    if everything:
        diffuse = np.ones(k, dtype=bool)
    array = np.asarray(diffuse)
    if array.dtype == np.bool_:
        if array.shape != (k,):
            raise ValueError(
                f"diffuse as a boolean mask must have shape ({k},) (one entry per state "
                f"coordinate), got {array.shape}."
            )
        diffuse_covariance = np.diag(array.astype(np.float64))
    else:
        diffuse_covariance = check_state_covariance(array, "diffuse", k)
    star = checked.initial_state_covariance
    if array.dtype == np.bool_:
        star = star.copy()
        star[array, :] = 0.0
        star[:, array] = 0.0
    return checked._replace(initial_state_covariance=star), diffuse_covariance


def _check_inputs(parameters, X, controls, lengths, constant_only=None, chunk=False, diffuse=None):
    X = check_observations(X)
    if getattr(parameters, "control_matrix", None) is None and controls is not None:
        raise ValueError("controls were given without a control_matrix.")
    parameters, diffuse_covariance = check_diffuse_parameters(parameters, diffuse, X.shape[1])
    if constant_only:
        refuse_time_varying(parameters, constant_only)
    model = make_model(parameters)
    controls = check_controls(controls, X.shape[0], model.n_ctrl)
    offsets = sequence_offsets(X.shape[0], lengths=lengths)
    if not chunk:  # a chunk is checked against the time axis by its start
        check_time_axis(parameters, offsets)
    if diffuse is not None:
        return X, model, controls, offsets, diffuse_covariance
    return X, model, controls, offsets


def _check_chunk_start(parameters, n_rows, carried, start, varying):
    """The time step of a chunk's first row (:func:`kalman_forward_smoothing`), checked."""
    if start is not None:
        check_scalar_param(start, "start", "int", low=0)
    if carried is None:
        if start not in (None, 0):
            raise ValueError(
                f"start={start} without carried: a chunk without the message of the rows "
                "before it starts the sequence (start=0)."
            )
        start = 0
    elif not varying:
        return 0
    elif start is None or start == 0:
        raise ValueError(
            "The model is time-varying: with carried, give start=, the number of rows of "
            "the sequence before this chunk (its rows use the arrays of their time steps)."
        )
    transition, observation = _time_axis_lengths(parameters)  # validated by the caller
    stop = start + n_rows
    if (observation is not None and stop > observation) or (
        transition is not None and stop - 1 > transition
    ):
        steps = observation if observation is not None else transition + 1
        raise ValueError(
            f"The chunk's rows {start}..{stop - 1} pass the end of the time axes "
            f"({steps} time steps)."
        )
    return start


def _raise_if_failed(sequence_log_likelihood, name="X", diffuse=False):
    failed = np.flatnonzero(np.isnan(sequence_log_likelihood))
    if failed.size and diffuse:
        raise np.linalg.LinAlgError(
            f"The exact diffuse smoother failed in sequence(s) {failed[:5].tolist()}: a "
            "covariance lost positive definiteness in floating point, or a diffuse direction "
            "of the state is reached by no observation (the sequence is too short, or ends "
            "inside its diffuse period), so that the data do not determine the state."
        )
    if failed.size:
        raise np.linalg.LinAlgError(
            f"A covariance lost positive definiteness in floating point in sequence(s) "
            f"{failed[:5].tolist()}: the parameters are too ill-conditioned."
        )
    check_log_likelihood_overflow(sequence_log_likelihood, name)


def check_log_likelihood_overflow(sequence_log_likelihood, name="X"):
    """Raise a ValueError when a Gaussian log-likelihood overflowed to -inf.

    A Gaussian density is never zero: -inf means that the squared
    innovations (the data's distance from the model's predictions, in units
    of their covariance) passed the largest double, which the data-scale
    rule cannot see when the model's scale differs from the data's.
    """
    overflowed = np.flatnonzero(np.isneginf(sequence_log_likelihood))
    if overflowed.size:
        several = len(sequence_log_likelihood) > 1
        which = f" of sequence(s) {overflowed[:5].tolist()}" if several else ""
        raise ValueError(
            f"The log-likelihood{which} is below -1.8e308 (it overflowed to -inf): {name} "
            "lies too far from the model's predictions, in units of their covariance, for "
            f"double precision. Rescale {name} (and the model)."
        )


# -- unchecked entry points (used by the estimator) ---------------------------


def _rows(X):
    """X as a C-contiguous float64 array (the kernels' layout); no copy when it already is."""
    return np.ascontiguousarray(X, dtype=np.float64)


def _filter_offsets(model, X, controls, offsets, diffuse_covariance=None):
    """Kalman filter on validated inputs (no checks); offsets split the rows.

    With ``diffuse_covariance`` (P_inf; the model's initial covariance is
    then P_*) the exact diffuse filter.
    """
    X, controls = _rows(X), _rows(controls)
    n_samples, k = X.shape[0], model.n_state
    predicted_means = np.empty((n_samples, k))
    predicted_covariances = np.empty((n_samples, k, k))
    filtered_means = np.empty((n_samples, k))
    filtered_covariances = np.empty((n_samples, k, k))
    log_predictive = np.zeros(n_samples)
    sequence_log_likelihood = np.empty(len(offsets) - 1)
    outputs = [
        predicted_means,
        predicted_covariances,
        filtered_means,
        filtered_covariances,
        log_predictive,
        sequence_log_likelihood,
    ]
    diffuse_outputs = []
    if diffuse_covariance is None:
        _kalman.kalman_filter(model, X, controls, offsets, *outputs)
    else:
        # the kernel's order: P_inf after the predicted covariances, n_diffuse last
        diffuse_outputs = [
            np.empty((n_samples, k, k)),
            np.zeros(len(offsets) - 1, dtype=np.intp),
        ]
        outputs.insert(2, diffuse_outputs[0])
        _kalman.kalman_filter_diffuse(
            model, _rows(diffuse_covariance), X, controls, offsets, *outputs, diffuse_outputs[1]
        )
    return KalmanFilterResult(
        filtered_means,
        filtered_covariances,
        predicted_means,
        predicted_covariances,
        float(sequence_log_likelihood.sum()),
        sequence_log_likelihood,
        log_predictive,
        *diffuse_outputs,
    )


def _filter_last_offsets(model, X, controls, offsets):
    """Filter keeping only the last filtered state of each sequence (no checks).

    Returns a :class:`KalmanLastStates`; memory besides the outputs is
    O(n_state^2).
    """
    X, controls = _rows(X), _rows(controls)
    n_sequences, k = len(offsets) - 1, model.n_state
    last_means = np.empty((n_sequences, k))
    last_covariances = np.empty((n_sequences, k, k))
    log_predictive = np.zeros(X.shape[0])
    sequence_log_likelihood = np.empty(n_sequences)
    _kalman.kalman_filter_last(
        model,
        X,
        controls,
        offsets,
        last_means,
        last_covariances,
        log_predictive,
        sequence_log_likelihood,
    )
    return KalmanLastStates(last_means, last_covariances, sequence_log_likelihood, log_predictive)


def _smoother_offsets(
    model, X, controls, offsets, diffuse_covariance=None, *, with_covariances=True
):
    """RTS smoother on validated inputs (no checks); offsets split the rows.

    With ``with_covariances=False`` only the smoothed means are computed
    (``smoothed_covariances`` and ``cross_covariances`` are then None).  With
    ``diffuse_covariance`` (P_inf) the exact diffuse smoother, which always
    computes the covariances.
    """
    X, controls = _rows(X), _rows(controls)
    n_samples, k = X.shape[0], model.n_state
    with_covariances = with_covariances or diffuse_covariance is not None
    smoothed_means = np.empty((n_samples, k))
    smoothed_covariances = np.empty((n_samples, k, k)) if with_covariances else None
    cross_covariances = np.empty((n_samples, k, k)) if with_covariances else None
    log_predictive = np.zeros(n_samples)
    sequence_log_likelihood = np.empty(len(offsets) - 1)
    outputs = [
        smoothed_means,
        smoothed_covariances,
        cross_covariances,
        log_predictive,
        sequence_log_likelihood,
    ]
    n_diffuse = []
    if diffuse_covariance is None:
        _kalman.kalman_smoother(model, X, controls, offsets, *outputs)
    else:
        n_diffuse = [np.zeros(len(offsets) - 1, dtype=np.intp)]
        _kalman.kalman_smoother_diffuse(
            model, _rows(diffuse_covariance), X, controls, offsets, *outputs, *n_diffuse
        )
    return KalmanSmootherResult(
        smoothed_means,
        smoothed_covariances,
        cross_covariances,
        float(sequence_log_likelihood.sum()),
        sequence_log_likelihood,
        log_predictive,
        *n_diffuse,
    )


def _em_statistics_offsets(model, X, controls, offsets, diffuse_covariance=None):
    """E step on validated inputs (no checks): summed sufficient statistics.

    With ``diffuse_covariance`` (P_inf; the model's initial covariance is
    then P_*) the moments are the exact diffuse smoother's and the
    log-likelihood is the diffuse one.

    Returns ``(statistics, sequence_log_likelihood)`` where ``statistics`` is a
    dict of arrays that add up over disjoint blocks of sequences:

    ``initial_sum`` (k,), ``initial_outer`` (k, k)
        sum over sequences of E[z_1] and E[z_1 z_1^T];
    ``transition_regressor`` (D, D), D = k + m + 1
        sum over t >= 2 of E[phi_t phi_t^T] with phi_t = (z_{t-1}, u_t, 1);
    ``transition_cross`` (k, D)
        sum over t >= 2 of E[z_t phi_t^T];
    ``transition_target`` (k, k)
        sum over t >= 2 of E[z_t z_t^T];
    ``observation_regressor`` (k + 1, k + 1)
        sum over the rows with an observed entry of E[psi_t psi_t^T] with
        psi_t = (z_t, 1);
    ``observation_cross`` (p, k + 1), ``observation_target`` (p, p)
        sum over the same rows of E[x_t psi_t^T] and E[x_t x_t^T], where the
        missing entries of a partly observed x_t are integrated out under the
        current model.  A row with no observed entry drops out of the
        observation regression (as in pykalman, statsmodels and Shumway and
        Stoffer's EM): its imputed moments would only pull R towards its
        current value;
    ``n_sequences`` ()
        the number of sequences.

    The counts of transitions and of rows with an observed entry are the last
    diagonal entries of the two regressor matrices.
    """
    X, controls = _rows(X), _rows(controls)
    k, p, m = model.n_state, model.n_obs, model.n_ctrl
    D = k + m + 1
    statistics = {
        "initial_sum": np.zeros(k),
        "initial_outer": np.zeros((k, k)),
        "transition_regressor": np.zeros((D, D)),
        "transition_cross": np.zeros((k, D)),
        "transition_target": np.zeros((k, k)),
        "observation_regressor": np.zeros((k + 1, k + 1)),
        "observation_cross": np.zeros((p, k + 1)),
        "observation_target": np.zeros((p, p)),
    }
    n_sequences = np.zeros(1)
    sequence_log_likelihood = np.empty(len(offsets) - 1)
    if diffuse_covariance is None:
        _kalman.em_statistics(
            model, X, controls, offsets, *statistics.values(), n_sequences, sequence_log_likelihood
        )
    else:
        _kalman.em_statistics_diffuse(
            model,
            _rows(diffuse_covariance),
            X,
            controls,
            offsets,
            *statistics.values(),
            n_sequences,
            sequence_log_likelihood,
        )
    statistics["n_sequences"] = n_sequences.reshape(())
    return statistics, sequence_log_likelihood


def _filter_step(model, x, control=None, previous=None):
    """One online filter step on validated inputs (no checks).

    ``previous`` is the filtered ``(mean, covariance)`` of the previous row,
    first propagated with ``control``; None: ``x`` is the first row of a
    sequence, conditioned on the prior (mu0, Sigma0).  The batch filter's own
    code, so the results are bit for bit those of :func:`kalman_filter`.
    """
    k = model.n_state
    has_previous = previous is not None
    if has_previous:
        previous_mean, previous_covariance = (_rows(part) for part in previous)
    else:  # unused by the kernel: the prior is the prediction
        previous_mean, previous_covariance = np.zeros(k), np.eye(k)
    if control is None or not has_previous:
        control = np.zeros(0)
    mean = np.empty(k)
    covariance = np.empty((k, k))
    log_predictive = _kalman.filter_step(
        model,
        previous_mean,
        previous_covariance,
        has_previous,
        _rows(x),
        _rows(control),
        mean,
        covariance,
    )
    return KalmanFilterStep(mean, covariance, float(log_predictive))


def _forecast(model, last_means, last_covariances, future_controls, n_steps):
    """Predictive distributions of the next ``n_steps`` observations (no checks).

    ``last_means`` / ``last_covariances`` are the filtered states after each
    sequence (:func:`_filter_last_offsets`); ``future_controls`` has
    n_sequences * n_steps rows, sequence after sequence.
    """
    n_rows, p = len(last_means) * n_steps, model.n_obs
    means = np.empty((n_rows, p))
    covariances = np.empty((n_rows, p, p))
    _kalman.forecast(
        model,
        _rows(last_means),
        _rows(last_covariances),
        _rows(future_controls),
        n_steps,
        means,
        covariances,
    )
    return KalmanForecast(means, covariances)


def check_forecast_size(n_rows, n_obs, n_steps):
    """Refuse an ``n_steps`` whose forecast (``n_rows`` means and covariances) cannot fit."""
    check_allocation(
        (n_rows, n_obs + 1, n_obs),
        np.float64,
        argument=f"n_steps={n_steps}",
        what=f"the forecast's means and covariances of {n_rows} rows",
    )


def check_sample_size(n_samples, parameters):
    """Refuse an ``n_samples`` whose draw (:func:`_sample`) cannot fit in memory.

    The state and observation noises, the innovations, the states and the
    observations are held at once.
    """
    k, p = parameters.transition_matrix.shape[-1], parameters.observation_matrix.shape[-2]
    check_allocation(
        (n_samples, 3 * k + 2 * p),
        np.float64,
        argument=f"n_samples={n_samples}",
        what=f"a sequence of {n_samples} states and observations",
    )


def _sample(parameters, n_samples, controls, random_state):
    """One sequence drawn from validated parameters (as from
    :func:`check_lgssm_parameters`), with ``random_state`` a RandomState.

    A time-varying model (:func:`check_time_axis` passed for ``n_samples``
    rows) draws row t with the transition arrays of step t - 1 and the
    observation arrays of step t, from the same noise draws."""
    transition_matrix = parameters.transition_matrix
    k, p = transition_matrix.shape[-1], parameters.observation_matrix.shape[-2]
    state_noise = random_state.standard_normal((n_samples, k))
    observation_noise = random_state.standard_normal((n_samples, p))
    if is_time_varying(parameters):
        return _sample_time_varying(parameters, state_noise, observation_noise, controls)
    innovations = state_noise @ np.linalg.cholesky(parameters.transition_covariance).T
    innovations[1:] += parameters.transition_offset + controls[1:] @ parameters.control_matrix.T
    innovations[0] = parameters.initial_state_mean + (
        np.linalg.cholesky(parameters.initial_state_covariance) @ state_noise[0]
    )
    states = np.empty((n_samples, k))
    _kalman.simulate_states(_rows(transition_matrix[None]), _rows(innovations), states)
    observations = (
        states @ parameters.observation_matrix.T
        + parameters.observation_offset
        + observation_noise @ np.linalg.cholesky(parameters.observation_covariance).T
    )
    return LGSSMSample(observations, states)


def _sample_time_varying(parameters, state_noise, observation_noise, controls):
    """:func:`_sample` of a time-varying model, from its standard normal draws."""
    n_samples, k = state_noise.shape
    transitions, observations = np.arange(n_samples - 1), np.arange(n_samples)

    def at(name, steps):
        value = getattr(parameters, name)
        return value[steps] if np.ndim(value) > TIME_VARYING_NDIM[name] else value

    def apply(matrices, vectors):  # row t: matrices[t] @ vectors[t] (or one matrix for all)
        return np.einsum("...ij,...j->...i", matrices, vectors)

    innovations = np.empty((n_samples, k))
    innovations[1:] = (
        apply(np.linalg.cholesky(at("transition_covariance", transitions)), state_noise[1:])
        + at("transition_offset", transitions)
        + controls[1:] @ parameters.control_matrix.T
    )
    innovations[0] = parameters.initial_state_mean + (
        np.linalg.cholesky(parameters.initial_state_covariance) @ state_noise[0]
    )
    transition_matrix = at("transition_matrix", transitions)
    if n_samples == 1:  # no transition
        transition_matrix = np.zeros((1, k, k))
    elif transition_matrix.ndim == 2:
        transition_matrix = transition_matrix[None]
    states = np.empty((n_samples, k))
    _kalman.simulate_states(_rows(transition_matrix), _rows(innovations), states)
    observed = (
        apply(at("observation_matrix", observations), states)
        + at("observation_offset", observations)
        + apply(np.linalg.cholesky(at("observation_covariance", observations)), observation_noise)
    )
    return LGSSMSample(observed, states)


# Blocks of the stream moments that are symmetric and kept in their upper triangle.
_SYMMETRIC_MOMENTS = (
    "observation_regressor",
    "observation_target",
    "initial_outer",
    "state_regressor",
)


def _upper_mirrored(matrix):
    """The upper triangle mirrored onto the lower one (along the last two axes)."""
    return np.where(_upper_mask(matrix.shape[-1]), matrix, np.swapaxes(matrix, -1, -2))


@functools.lru_cache(maxsize=64)
def _upper_mask(n):
    """True on and above the diagonal of an n x n matrix (read-only, shared)."""
    mask = np.triu(np.ones((n, n), dtype=bool))
    mask.flags.writeable = False
    return mask


@functools.lru_cache(maxsize=32)
def _stream_blocks(n_state, n_obs, n_ctrl):
    """The moments of a stream message: ``((name, start, stop, shape), ...)`` and their number."""
    blocks, start = [], 0
    for name, shape in _kalman.stream_layout(n_state, n_obs, n_ctrl):
        blocks.append((name, start, start + math.prod(shape), shape))
        start += math.prod(shape)
    return tuple(blocks), start


def _empty_stream_state(n_state, n_obs, n_ctrl):
    """A message for a sequence that starts with the next chunk (all zeros)."""
    n_moments = _stream_blocks(n_state, n_obs, n_ctrl)[1]
    return KalmanStreamState(
        np.zeros(n_state),
        np.zeros((n_state, n_state)),
        np.zeros(n_moments),
        np.zeros((n_moments, n_state)),
        np.zeros((n_moments, n_state, n_state)),
    )


def _stream_statistics(carried, n_obs, n_ctrl):
    """The smoothed EM statistics of all rows a stream message has seen (no checks).

    Each moment's expectation is its function T(z) of the last state averaged
    over the filtered N(filtered_mean, filtered_covariance); the transition
    statistics follow from the moments: the previous states of the
    transitions are all rows but the last, their next states all rows but the
    first (doc/user_guide/lgssm.rst).  Returns a dict with the keys of
    :func:`_em_statistics_offsets`.
    """
    return _statistics_from_moments(*_stream_moments(carried), n_obs, n_ctrl)


def _stream_moments(carried):
    """``(values, mean, second)``: the message's moments averaged over its filtered state,
    and that state's mean and second moment (no checks)."""
    mean, covariance = carried.filtered_mean, carried.filtered_covariance
    k = mean.shape[0]
    second = covariance + np.outer(mean, mean)
    n_moments = carried.constant.shape[0]
    values = (
        carried.constant
        + carried.linear @ mean
        + carried.quadratic.reshape(n_moments, k * k) @ second.ravel()
    )
    return values, mean, second


def _statistics_from_moments(values, mean, second, n_obs, n_ctrl):
    """The EM statistics from :func:`_stream_moments`' arrays, which may carry a common
    leading axis (one message per row, say): the statistics then carry it too."""
    k, p, m = mean.shape[-1], n_obs, n_ctrl
    lead = values.shape[:-1]
    moments = {
        name: values[..., start:stop].reshape((*lead, *shape))
        for name, start, stop, shape in _stream_blocks(k, p, m)[0]
    }
    for name in _SYMMETRIC_MOMENTS:
        moments[name] = _upper_mirrored(moments[name])
    # The state moments of every row (the observation regressor leaves out the
    # rows without an observed entry).
    state_regressor = moments["state_regressor"]
    state_outer, state_sum = state_regressor[..., :k, :k], state_regressor[..., :k, k]
    D = k + m + 1
    previous_control = moments["previous_control"]
    transition_regressor = np.empty((*lead, D, D))
    transition_regressor[..., :k, :k] = state_outer - second
    transition_regressor[..., :k, k : k + m] = previous_control
    transition_regressor[..., k : k + m, :k] = np.swapaxes(previous_control, -1, -2)
    transition_regressor[..., :k, -1] = transition_regressor[..., -1, :k] = state_sum - mean
    transition_regressor[..., k : k + m, k : k + m] = _upper_mirrored(moments["control_outer"])
    transition_regressor[..., k : k + m, -1] = transition_regressor[..., -1, k : k + m] = moments[
        "control_sum"
    ]
    transition_regressor[..., -1, -1] = moments["n_transitions"]
    transition_cross = np.concatenate(
        [
            moments["lag_outer"],
            moments["state_control"],
            (state_sum - moments["initial_sum"])[..., None],
        ],
        axis=-1,
    )
    return {
        "initial_sum": moments["initial_sum"].copy(),
        "initial_outer": moments["initial_outer"],
        "transition_regressor": transition_regressor,
        "transition_cross": transition_cross,
        "transition_target": state_outer - moments["initial_outer"],
        "observation_regressor": moments["observation_regressor"],
        "observation_cross": moments["observation_cross"].copy(),
        "observation_target": moments["observation_target"],
        "n_sequences": moments["n_sequences"].copy(),
    }


def _forward_smoothing_rows(model, X, controls, carried, start=0):
    """Forward-only smoothing over the rows of one chunk, on validated inputs (no checks).

    ``carried`` is the message of the earlier rows of the sequence, or None
    when ``X[0]`` starts it; it is not modified.  Returns
    ``(statistics, log_likelihood, carried)`` as :class:`KalmanForwardSmoothingResult`,
    where ``statistics`` is what the rows add to the smoothed statistics of
    the sequence; ``start`` is the time step of ``X[0]`` (for a time-varying
    model); a numerical failure gives log-likelihood NaN (the caller
    raises) and the other two fields are then None.
    """
    X, controls = _rows(X), _rows(controls)
    k, p, m = model.n_state, model.n_obs, model.n_ctrl
    fresh = carried is None
    before = None if fresh else _stream_statistics(carried, p, m)
    state = (
        _empty_stream_state(k, p, m)
        if fresh
        else KalmanStreamState(*(np.array(value, dtype=np.float64, order="C") for value in carried))
    )
    log_predictive = np.zeros(X.shape[0])
    log_likelihood = _kalman.forward_smoothing(
        model, X, controls, fresh, start, *state, log_predictive
    )
    if np.isnan(log_likelihood):
        return KalmanForwardSmoothingResult(None, float("nan"), None)
    after = _stream_statistics(state, p, m)
    added = after if fresh else {name: after[name] - before[name] for name in after}
    return KalmanForwardSmoothingResult(added, float(log_likelihood), state)


def _em_statistics_in_chunks(model, X, controls, chunk_rows):
    """The E step of one sequence in chunks of ``chunk_rows`` rows (no checks).

    Forward-only smoothing (:func:`_forward_smoothing_rows`) over the chunks,
    its message carried across: one pass over the rows, and memory that of
    one chunk plus the message, O(chunk_rows k^2 + E k^2), whatever the
    sequence's length.  At fixed parameters the statistics are those of
    :func:`_em_statistics_offsets` (doc/user_guide/lgssm.rst, "One long
    sequence in bounded memory").  Returns ``(statistics, log_likelihood)``;
    a numerical failure gives log-likelihood NaN and zero statistics, as
    :func:`_em_statistics_offsets` gives for such a sequence.
    """
    carried, log_likelihood = None, 0.0
    for start in range(0, X.shape[0], chunk_rows):
        stop = min(start + chunk_rows, X.shape[0])
        _, chunk_log_likelihood, carried = _forward_smoothing_rows(
            model, X[start:stop], controls[start:stop], carried
        )
        if np.isnan(chunk_log_likelihood):
            nothing = _em_statistics_offsets(model, X[:1], controls[:1], np.array([0, 1]))[0]
            return {name: np.zeros_like(value) for name, value in nothing.items()}, float("nan")
        log_likelihood += chunk_log_likelihood
    return _stream_statistics(carried, model.n_obs, model.n_ctrl), log_likelihood


# Rows per chunk of the E step of a sequence beyond the working-memory budget
# (forward-only smoothing in chunks), at least: fewer chunks cost less Python.
_CHUNK_ROWS = 2**14


def _em_statistics_bounded(
    model, X, controls, offsets, bytes_per_row=None, diffuse_covariance=None
):
    """:func:`_em_statistics_offsets` within scikit-learn's working memory (no checks).

    A sequence whose whole-sequence scratch (``bytes_per_row``, by default
    the filtered means and covariances and the log predictive density) would
    pass the budget of :func:`~skseq._sequences.memory_budget_rows` goes
    through :func:`_em_statistics_in_chunks` (bounded memory); the others
    through the whole-sequence kernel.  Returns ``(statistics,
    sequence_log_likelihood)`` as :func:`_em_statistics_offsets` does.  The exact
    diffuse E step (``diffuse_covariance``, P_inf) works on whole sequences only.
    """
    if diffuse_covariance is not None:
        return _em_statistics_offsets(model, X, controls, offsets, diffuse_covariance)
    k = model.n_state
    if bytes_per_row is None:
        bytes_per_row = 8 * (k * k + k + 1)
    long_rows = memory_budget_rows(bytes_per_row)
    if not (np.diff(offsets) > long_rows).any():
        return _em_statistics_offsets(model, X, controls, offsets)
    total, sequence_log_likelihood = None, np.empty(len(offsets) - 1)
    for first, stop in isolate_long_sequences(offsets, 0, len(offsets) - 1, long_rows):
        rows = slice(offsets[first], offsets[stop])
        if rows.stop - rows.start > long_rows and stop - first == 1:
            chunk_rows = checkpoint_rows(rows.stop - rows.start, bytes_per_row, _CHUNK_ROWS)
            statistics, sequence_log_likelihood[first] = _em_statistics_in_chunks(
                model, X[rows], controls[rows], chunk_rows
            )
        else:
            statistics, sequence_log_likelihood[first:stop] = _em_statistics_offsets(
                model, X[rows], controls[rows], offsets[first : stop + 1] - offsets[first]
            )
        total = statistics if total is None else _add_statistics(total, statistics)
    return total, sequence_log_likelihood


def _add_statistics(statistics, more):
    """The sums of two dicts of statistics, key by key."""
    return {name: value + more[name] for name, value in statistics.items()}


def _check_carried(carried, n_state, n_obs, n_ctrl):
    if not isinstance(carried, KalmanStreamState):
        raise TypeError(
            "carried must be the KalmanStreamState returned by kalman_forward_smoothing "
            f"for the previous chunk (or None to start a sequence), got {type(carried).__name__}."
        )
    expected = _empty_stream_state(n_state, n_obs, n_ctrl)
    for name, value, reference in zip(carried._fields, carried, expected):
        value = _as_float_array(value, f"carried.{name}")
        if value.shape != reference.shape:
            raise ValueError(
                f"carried.{name} has shape {value.shape}, but a model with {n_state} states, "
                f"{n_obs} features and {n_ctrl} controls carries shape {reference.shape}: "
                "the message comes from a different model."
            )
        if not np.all(np.isfinite(value)):
            raise ValueError(f"carried.{name} contains NaN or infinity.")


# -- public functions ---------------------------------------------------------


@masked_arrays_checked(missing=("X",))
def kalman_filter(parameters, X, *, controls=None, lengths=None, diffuse=None):
    """Kalman filter: the state given the past, E[z_t | x_1..x_t], and the log-likelihood.

    Parameters
    ----------
    parameters : LGSSMParameters
        The model: F, H, Q, R and the optional b, d, G, mu0, Sigma0; the
        transition and observation arrays may vary in time (a leading time
        axis, :class:`LGSSMParameters`), every sequence then having
        ``n_timesteps`` rows.
    X : array-like of shape (n_samples, n_features)
        Observations of all sequences, concatenated in time order.  NaN (or a
        masked entry of a :class:`numpy.ma.MaskedArray`) marks a missing
        entry; infinity is an error.
    controls : array-like of shape (n_samples, n_controls), optional
        u_t, one row per row of X; the first row of each sequence is unused.
    lengths : array-like of int, optional
        Lengths of the concatenated sequences; one sequence if omitted.
    diffuse : None, True, array-like of bool of shape (n_state,) or of shape (n_state, n_state)
        The exact diffuse initial state (Koopman's exact diffuse filter):
        z_1 ~ N(mu0, P_* + kappa P_inf) with kappa -> infinity, the
        parameters' ``initial_state_covariance`` being P_* (positive
        semi-definite).  True makes every state coordinate diffuse, a
        boolean mask the coordinates it marks (P_inf their indicator on the
        diagonal; P_*'s rows and columns of them are set to zero), a matrix
        is P_inf itself (symmetric positive semi-definite).  The
        log-likelihood is then the diffuse log-likelihood, statsmodels'
        definition (doc/user_guide/lgssm.rst, "Exact diffuse
        initialisation").  None (default): the proper prior N(mu0, Sigma0).

    Returns
    -------
    KalmanFilterResult
        ``filtered_means``, ``filtered_covariances``, ``predicted_means``,
        ``predicted_covariances``, ``log_likelihood``,
        ``sequence_log_likelihood``, ``log_predictive``, and with
        ``diffuse=`` ``predicted_diffuse_covariances`` and ``n_diffuse``.

    Raises
    ------
    TypeError
        When ``parameters`` is not an :class:`LGSSMParameters`, or an input
        is complex.
    ValueError
        On a wrong shape, a covariance that is not symmetric positive
        definite, infinity in X, or controls that do not match X.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman import LGSSMParameters, kalman_filter
    >>> X = np.array([[1.0], [1.2], [np.nan], [0.9]])
    >>> result = kalman_filter(LGSSMParameters([[1.0]], [[1.0]], [[0.1]], [[0.5]]), X)
    >>> result.filtered_means.shape, result.filtered_covariances.shape
    ((4, 1), (4, 1, 1))
    >>> bool(np.isclose(result.log_predictive.sum(), result.log_likelihood))
    True

    The local level with an exact diffuse first state: the first row is
    diffuse, its filtered level is the first observation.

    >>> exact = kalman_filter(
    ...     LGSSMParameters([[1.0]], [[1.0]], [[0.1]], [[0.5]]), X, diffuse=True)
    >>> exact.n_diffuse, exact.filtered_means[0, 0]
    (array([1]), np.float64(1.0))
    """
    X, model, controls, offsets, *diffuse_covariance = _check_inputs(
        parameters, X, controls, lengths, diffuse=diffuse
    )
    result = _filter_offsets(model, X, controls, offsets, *diffuse_covariance)
    _raise_if_failed(result.sequence_log_likelihood)
    return result


@masked_arrays_checked(missing=("X",))
def kalman_smoother(parameters, X, *, controls=None, lengths=None, diffuse=None):
    """Rauch-Tung-Striebel smoother: the state given the whole sequence, E[z_t | x].

    Parameters are those of :func:`kalman_filter`; with ``diffuse=`` the
    exact diffuse smoother (the exact limits of the smoother gain and of the
    conditional covariances on the diffuse rows: doc/user_guide/lgssm.rst,
    "Exact diffuse initialisation"), whose smoothed means, covariances and
    cross-covariances are those of the exact diffuse posterior.

    Returns
    -------
    KalmanSmootherResult
        ``smoothed_means``, ``smoothed_covariances``, ``cross_covariances``
        (``cross_covariances[t] = Cov(z_t, z_{t-1} | x)``, zero on the first
        row of each sequence), ``log_likelihood``, ``sequence_log_likelihood``,
        ``log_predictive``, and with ``diffuse=`` ``n_diffuse``.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman import LGSSMParameters, kalman_smoother
    >>> X = np.array([[0.1, 0.0], [0.4, 0.5], [np.nan, np.nan], [1.1, 0.8]])
    >>> parameters = LGSSMParameters(
    ...     transition_matrix=[[0.9]], observation_matrix=[[1.0], [0.8]],
    ...     transition_covariance=[[0.2]], observation_covariance=np.eye(2) * 0.1)
    >>> result = kalman_smoother(parameters, X, lengths=[2, 2])
    >>> result.smoothed_means.shape, result.cross_covariances.shape
    ((4, 1), (4, 1, 1))
    >>> result.cross_covariances[[0, 2], 0, 0]  # first rows of the two sequences
    array([0., 0.])

    A random walk observed with noise, its first state exactly diffuse: the
    first row of the second sequence is missing, so its first two rows are
    diffuse.

    >>> walk = LGSSMParameters([[1.0]], [[1.0]], [[0.2]], [[0.1]])
    >>> exact = kalman_smoother(walk, X[:, :1], lengths=[2, 2], diffuse=True)
    >>> exact.n_diffuse
    array([1, 2])
    """
    X, model, controls, offsets, *diffuse_covariance = _check_inputs(
        parameters, X, controls, lengths, diffuse=diffuse
    )
    result = _smoother_offsets(model, X, controls, offsets, *diffuse_covariance)
    _raise_if_failed(result.sequence_log_likelihood, diffuse=diffuse is not None)
    return result


@masked_arrays_checked(missing=("x",))
def kalman_filter_step(
    parameters, x, *, filtered_state_mean=None, filtered_state_covariance=None, control=None
):
    """Advance the Kalman filter by one observation (pykalman's ``filter_update``).

    Parameters
    ----------
    parameters : LGSSMParameters
        The model, as in :func:`kalman_filter`.
    x : array-like of shape (n_features,)
        The new observation; NaN entries are missing (all NaN: predict only).
    filtered_state_mean : array-like of shape (n_state,), optional
        E[z_{t-1} | x_1..x_{t-1}], the previous step's result.  None (with
        ``filtered_state_covariance`` None too): ``x`` is the first row of a
        sequence, conditioned on the prior N(mu0, Sigma0).
    filtered_state_covariance : array-like of shape (n_state, n_state), optional
        Cov(z_{t-1} | x_1..x_{t-1}), symmetric positive semi-definite.
    control : array-like of shape (n_controls,), optional
        u_t, required with a ``control_matrix`` after the first row.

    Returns
    -------
    KalmanFilterStep
        ``filtered_state_mean``, ``filtered_state_covariance``,
        ``log_predictive``.  Step by step, bit for bit the rows of
        :func:`kalman_filter` on the whole sequence.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman import LGSSMParameters, kalman_filter, kalman_filter_step
    >>> X = np.array([[1.0], [1.2], [np.nan], [0.9]])
    >>> parameters = LGSSMParameters(
    ...     transition_matrix=[[1.0]], observation_matrix=[[1.0]],
    ...     transition_covariance=[[0.1]], observation_covariance=[[0.5]])
    >>> mean = covariance = None
    >>> for x in X:
    ...     mean, covariance, _ = kalman_filter_step(
    ...         parameters, x, filtered_state_mean=mean, filtered_state_covariance=covariance)
    >>> bool(np.array_equal(mean, kalman_filter(parameters, X).filtered_means[-1]))
    True
    """
    parameters = check_lgssm_parameters(parameters, np.size(x))
    refuse_time_varying(parameters, "kalman_filter_step")
    model = make_model(parameters)
    x = check_observations(np.reshape(_as_float_array(x, "x"), (1, -1)), name="x")[0]
    if (filtered_state_mean is None) != (filtered_state_covariance is None):
        raise ValueError(
            "filtered_state_mean and filtered_state_covariance go together: give both "
            "(the previous step's state) or neither (the first row of a sequence)."
        )
    previous = None
    if filtered_state_mean is not None:
        previous = (
            check_matrix(filtered_state_mean, "filtered_state_mean", (model.n_state,)),
            check_state_covariance(
                filtered_state_covariance, "filtered_state_covariance", model.n_state
            ),
        )
    if previous is not None and model.n_ctrl > 0:
        control = check_controls(
            None if control is None else np.reshape(control, (1, -1)),
            1,
            model.n_ctrl,
            name="control",
        )[0]
    elif control is not None and model.n_ctrl == 0:
        raise ValueError("control was given without a control_matrix.")
    else:
        control = None
    step = _filter_step(model, x, control, previous)
    _raise_if_failed(np.array([step.log_predictive]), "x")
    return step


@masked_arrays_checked(missing=("X",))
def kalman_forecast(parameters, X, n_steps, *, controls=None, future_controls=None, lengths=None):
    """Predictive distribution of the next ``n_steps`` observations after each sequence.

    Parameters
    ----------
    parameters : LGSSMParameters
        The model, as in :func:`kalman_filter`.
    X : array-like of shape (n_samples, n_features)
        Observations of all sequences, concatenated (NaN: missing).
    n_steps : int
        Forecast horizon, >= 1.
    controls, lengths
        As in :func:`kalman_filter`.
    future_controls : array-like of shape (n_sequences * n_steps, n_controls), optional
        The controls of the forecast steps, sequence after sequence; required
        with a ``control_matrix``.

    Returns
    -------
    KalmanForecast
        ``means`` and ``covariances``; row ``s * n_steps + h`` is
        x_{T_s + h + 1} of sequence s.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman import LGSSMParameters, kalman_forecast
    >>> X = np.array([[1.0], [1.2], [0.9]])
    >>> forecast = kalman_forecast(LGSSMParameters([[0.5]], [[1.0]], [[0.1]], [[0.5]]), X, 2)
    >>> forecast.means.shape, forecast.covariances.shape
    ((2, 1), (2, 1, 1))
    >>> bool(forecast.covariances[1, 0, 0] > forecast.covariances[0, 0, 0])
    True
    """
    check_scalar_param(n_steps, "n_steps", "int", low=1)
    X, model, controls, offsets = _check_inputs(
        parameters, X, controls, lengths, constant_only="kalman_forecast"
    )
    last = _filter_last_offsets(model, X, controls, offsets)
    _raise_if_failed(last.sequence_log_likelihood)
    n_rows = (len(offsets) - 1) * n_steps
    check_forecast_size(n_rows, model.n_obs, n_steps)
    future_controls = check_controls(future_controls, n_rows, model.n_ctrl, name="future_controls")
    return _forecast(model, last.last_means, last.last_covariances, future_controls, n_steps)


@masked_arrays_checked()
def sample_lgssm(parameters, n_samples, *, controls=None, random_state=None):
    """Draw one sequence of states and observations from a linear-Gaussian SSM.

    Parameters
    ----------
    parameters : LGSSMParameters
        The model, as in :func:`kalman_filter`.
    n_samples : int
        Length of the sequence, >= 1.
    controls : array-like of shape (n_samples, n_controls), optional
        Required with a ``control_matrix`` (the first row is unused).
    random_state : int, RandomState instance or None, default=None

    Returns
    -------
    LGSSMSample
        ``observations`` (n_samples, n_features) and ``states``
        (n_samples, n_state).

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman import LGSSMParameters, sample_lgssm
    >>> parameters = LGSSMParameters([[0.9]], [[1.0], [2.0]], [[0.1]], 0.5 * np.eye(2))
    >>> X, Z = sample_lgssm(parameters, 5, random_state=0)
    >>> X.shape, Z.shape
    ((5, 2), (5, 1))
    """
    check_scalar_param(n_samples, "n_samples", "int", low=1)
    parameters = check_lgssm_parameters(parameters)
    n_controls = parameters.control_matrix.shape[1]
    check_time_axis(parameters, np.array([0, n_samples]), name="the sample")
    check_sample_size(n_samples, parameters)
    controls = check_controls(controls, n_samples, n_controls)
    return _sample(parameters, n_samples, controls, check_random_state(random_state))


@masked_arrays_checked(missing=("X",))
def kalman_forward_smoothing(parameters, X, *, controls=None, carried=None, start=None):
    """EM statistics of a sequence that arrives in chunks, exactly, by forward-only smoothing.

    Each call takes the next rows of one sequence and the message
    ``carried`` returned by the call on the rows before them.  It returns
    what these rows add to the smoothed sufficient statistics of the
    sequence (their own terms, and the revision of the earlier rows' terms in
    the light of the new rows), so that, at fixed parameters, the statistics
    of the chunks add up to those of :func:`kalman_smoother` on the whole
    sequence, whatever the chunk sizes.  The message has a fixed size (it
    does not grow with the rows seen); the work adds O(k^4 + k^2 p) per row
    to the filter and smoother's (doc/user_guide/lgssm.rst, "Streams:
    forward-only smoothing").

    Parameters
    ----------
    parameters : LGSSMParameters
        The model, as in :func:`kalman_filter` (with a ``control_matrix``,
        ``controls`` are required).
    X : array-like of shape (n_samples, n_features)
        The next rows of the sequence; NaN marks a missing entry.
    controls : array-like of shape (n_samples, n_controls), optional
        u_t of the rows.  The control of the first row is used when the rows
        continue a sequence (it drives the transition into that row) and
        unused when they start one.
    carried : KalmanStreamState, optional
        The message of the earlier rows; None when ``X[0]`` starts the sequence.
        It is not modified.
    start : int, optional
        The row of the sequence that ``X[0]`` is (the number of rows before
        it): required with ``carried`` when the model is time-varying, whose
        rows use the arrays of their time step (:class:`LGSSMParameters`);
        0 or None when ``X[0]`` starts the sequence; ignored by a constant
        model.

    Returns
    -------
    KalmanForwardSmoothingResult
        ``statistics`` (a dict with the keys of the EM statistics:
        ``initial_sum``, ``initial_outer``, ``transition_regressor``,
        ``transition_cross``, ``transition_target``, ``observation_regressor``,
        ``observation_cross``, ``observation_target``, ``n_sequences``),
        ``log_likelihood`` (log p(rows | earlier rows)) and ``carried``.

    Raises
    ------
    ValueError
        On invalid parameters or observations (as :func:`kalman_filter`), or a
        ``carried`` message of another model's dimensions.
    TypeError
        When ``carried`` is not a :class:`KalmanStreamState`.
    numpy.linalg.LinAlgError
        When a covariance loses positive definiteness in floating point.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.kalman import LGSSMParameters, kalman_forward_smoothing
    >>> X = np.random.default_rng(0).normal(size=(100, 2))
    >>> parameters = LGSSMParameters(
    ...     transition_matrix=[[0.9]], observation_matrix=[[1.0], [0.5]],
    ...     transition_covariance=[[0.3]], observation_covariance=np.eye(2))
    >>> whole = kalman_forward_smoothing(parameters, X)
    >>> carried, total = None, None
    >>> for chunk in np.array_split(X, 7):
    ...     statistics, log_likelihood, carried = kalman_forward_smoothing(
    ...         parameters, chunk, carried=carried)
    ...     total = statistics if total is None else {
    ...         name: total[name] + statistics[name] for name in total}
    >>> bool(np.allclose(total["transition_cross"], whole.statistics["transition_cross"]))
    True
    """
    X, model, controls, _ = _check_inputs(parameters, X, controls, None, chunk=True)
    if carried is not None:
        _check_carried(carried, model.n_state, model.n_obs, model.n_ctrl)
    start = _check_chunk_start(parameters, X.shape[0], carried, start, model.varying)
    result = _forward_smoothing_rows(model, X, controls, carried, start)
    _raise_if_failed(np.array([result.log_likelihood]))
    return result
