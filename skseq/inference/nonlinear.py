"""Nonlinear Kalman filters on plain arrays: the unscented and the extended Kalman filter.

The model (doc/user_guide/nonlinear.rst), with ``n`` states and ``p`` observed
features, in pykalman's two forms.  Additive noise::

    z_1 ~ N(mu0, Sigma0)
    z_{t+1} = f_t(z_t) + w_t,     w_t ~ N(0, Q)
    x_t     = g_t(z_t) + v_t,     v_t ~ N(0, R)

and general ("augmented") noise, which enters the functions::

    z_{t+1} = f_t(z_t, w_t),      x_t = g_t(z_t, v_t).

Every public function takes the model first, as one
:class:`NonlinearSSMParameters`, then the data, then keyword-only options.
``transition_functions`` is one callable or a sequence of them (element ``t``
moves row ``t`` to row ``t + 1``); ``observation_functions`` likewise (element
``t`` observes row ``t``).

The unscented filter propagates ``2 N + 1`` sigma points
(:func:`unscented_sigma_points`, with ``N = n`` for additive noise and
``N = 2 n + p`` for the augmented state of the general form) through the
functions (:func:`unscented_transform`); its weights are those of pykalman
(Wan & van der Merwe's scaled transform): ``lambda = alpha**2 (N + kappa) - N``,
mean weights ``lambda / (N + lambda)`` and ``1 / (2 (N + lambda))``, the
covariance weight of the centre ``+ 1 - alpha**2 + beta``; pykalman's values
are ``alpha=1``, ``beta=0`` and ``kappa = 3 - N`` (the defaults here).  With
them the filtered and smoothed moments are pykalman's; on a linear model the
transform is exact and both filters are the Kalman filter.

The extended filter linearises the model at the current mean (and, in the
general form, at zero noise: ``f(z, w) ~ f(m, 0) + F (z - m) + L w``, so the
noise enters through ``L Q L^T``): with the user's Jacobians, or by
complex-step differentiation (exact to rounding, for code that is analytic in
its input) or central differences.

Vectorised calls: the functions are called once per step on all sigma points
(or all perturbed points of a Jacobian) when they accept a 2-D array whose
*columns* are the points, shape ``(n_dim, n_points)``, and return
``(n_out, n_points)``.  Code written for one state as ``x[0]``, ``x[1]``,
``F @ x``, ``np.sin(x)`` and ``np.array([...])`` does so unchanged.
``vectorized="auto"`` tries it on the first call of each function and keeps it
when the result has that shape and its columns equal the function's values at
three points computed one at a time; ``True`` requires it; ``False`` calls the
function on one 1-D state at a time.

NaN entries of ``X`` (or masked entries) are missing: a row with some
observed entries is conditioned on those (its predicted observation's
marginal), a row with none is predicted only.  pykalman skips a row with any
masked entry; on fully missing rows the two agree.
"""

import math
import warnings
from collections.abc import Callable
from numbers import Integral, Real
from typing import NamedTuple

import numpy as np

from ._checks import masked_arrays_checked
from .kalman import check_matrix, check_observations, check_state_covariance

__all__ = [
    "NonlinearSSMParameters",
    "SigmaPoints",
    "UnscentedTransformResult",
    "NonlinearFilterResult",
    "NonlinearSmootherResult",
    "NonlinearFilterStep",
    "unscented_sigma_points",
    "unscented_transform",
    "unscented_filter",
    "unscented_smoother",
    "unscented_filter_step",
    "extended_kalman_filter",
    "extended_kalman_smoother",
    "extended_kalman_filter_step",
]

_LOG_2PI = math.log(2.0 * math.pi)


class NonlinearSSMParameters(NamedTuple):
    """A nonlinear Gaussian state-space model: functions, noise covariances, prior.

    Parameters
    ----------
    transition_functions : callable or sequence of callables
        ``f_t``: ``f(state)`` (additive noise) or ``f(state, noise)`` (general
        noise) returns the next state, shape (n_state,); element ``t`` of a
        sequence moves row ``t`` to row ``t + 1``.
    observation_functions : callable or sequence of callables
        ``g_t``: ``g(state)`` or ``g(state, noise)`` returns the observation,
        shape (n_features,); element ``t`` observes row ``t``.
    transition_covariance : array-like of shape (n_state, n_state)
        Q, symmetric positive semi-definite; sets ``n_state``.
    observation_covariance : array-like of shape (n_features, n_features)
        R, symmetric positive semi-definite; sets ``n_features``.
    initial_state_mean : array-like of shape (n_state,), optional
        mu0; zeros when None.
    initial_state_covariance : array-like of shape (n_state, n_state), optional
        Sigma0; the identity when None.
    transition_jacobians : callable or sequence of callables, optional
        For the extended filter: ``J(state)`` of shape (n_state, n_state), the
        Jacobian of ``f_t``; differences of ``f_t`` when None.
    observation_jacobians : callable or sequence of callables, optional
        ``J(state)`` of shape (n_features, n_state), the Jacobian of ``g_t``.
        In the general noise form both take ``(state, noise)`` and are
        evaluated at zero noise.
    transition_noise_jacobians : callable or sequence of callables, optional
        For the extended filter of the general noise form: ``L(state, noise)``
        of shape (n_state, n_state), the Jacobian of ``f_t`` with respect to
        the noise; differences when None.
    observation_noise_jacobians : callable or sequence of callables, optional
        ``M(state, noise)`` of shape (n_features, n_features), the Jacobian of
        ``g_t`` with respect to its noise.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.nonlinear import NonlinearSSMParameters
    >>> model = NonlinearSSMParameters(
    ...     transition_functions=lambda z: np.sin(z), observation_functions=lambda z: z,
    ...     transition_covariance=[[0.1]], observation_covariance=[[0.2]])
    >>> model.initial_state_mean is None
    True
    """

    transition_functions: Callable
    observation_functions: Callable
    transition_covariance: np.ndarray
    observation_covariance: np.ndarray
    initial_state_mean: np.ndarray = None
    initial_state_covariance: np.ndarray = None
    transition_jacobians: Callable = None
    observation_jacobians: Callable = None
    transition_noise_jacobians: Callable = None
    observation_noise_jacobians: Callable = None


class SigmaPoints(NamedTuple):
    """Sigma points and their weights (pykalman's ``SigmaPoints``).

    Attributes
    ----------
    points : ndarray of shape (2 n + 1, n)
        One point a row: the mean, then the mean plus and minus the scaled
        columns of the covariance's Cholesky factor.
    weights_mean, weights_covariance : ndarray of shape (2 n + 1,)
        The weights of the mean and of the covariance.
    """

    points: np.ndarray
    weights_mean: np.ndarray
    weights_covariance: np.ndarray


class UnscentedTransformResult(NamedTuple):
    """The unscented transform of a set of sigma points.

    Attributes
    ----------
    points : ndarray of shape (n_points, n_out)
        The function's value at every sigma point.
    mean : ndarray of shape (n_out,)
    covariance : ndarray of shape (n_out, n_out)
        Including ``noise_covariance`` when given.
    cross_covariance : ndarray of shape (n, n_out)
        The weighted covariance of the input points and their images.
    """

    points: np.ndarray
    mean: np.ndarray
    covariance: np.ndarray
    cross_covariance: np.ndarray


class NonlinearFilterResult(NamedTuple):
    """What an unscented or extended Kalman filter returns.

    Attributes
    ----------
    filtered_means : ndarray of shape (n_samples, n_state)
        E[z_t | x_1..x_t].
    filtered_covariances : ndarray of shape (n_samples, n_state, n_state)
    predicted_means : ndarray of shape (n_samples, n_state)
        E[z_t | x_1..x_{t-1}] (the prior mean on the first row).
    predicted_covariances : ndarray of shape (n_samples, n_state, n_state)
    log_likelihood : float
        The sum of ``log_predictive``: the filter's Gaussian approximation of
        log p(x_1..x_T), exact on a linear model.
    log_predictive : ndarray of shape (n_samples,)
        log N(x_t; predicted observation mean, covariance) over the observed
        entries of each row (0 for a row without any).
    """

    filtered_means: np.ndarray
    filtered_covariances: np.ndarray
    predicted_means: np.ndarray
    predicted_covariances: np.ndarray
    log_likelihood: float
    log_predictive: np.ndarray


class NonlinearSmootherResult(NamedTuple):
    """What an unscented or extended Rauch-Tung-Striebel smoother returns.

    Attributes
    ----------
    smoothed_means : ndarray of shape (n_samples, n_state)
        E[z_t | x_1..x_T].
    smoothed_covariances : ndarray of shape (n_samples, n_state, n_state)
    smoother_gains : ndarray of shape (n_samples, n_state, n_state)
        The gains ``G_t = Cov(z_t, z_{t+1}) Cov(z_{t+1})^{-1}`` of the
        backward pass (zero on the last row).
    log_likelihood : float
        The filter's, as in :class:`NonlinearFilterResult`.
    log_predictive : ndarray of shape (n_samples,)
    """

    smoothed_means: np.ndarray
    smoothed_covariances: np.ndarray
    smoother_gains: np.ndarray
    log_likelihood: float
    log_predictive: np.ndarray


class NonlinearFilterStep(NamedTuple):
    """One step of a nonlinear Kalman filter.

    Attributes
    ----------
    filtered_state_mean : ndarray of shape (n_state,)
    filtered_state_covariance : ndarray of shape (n_state, n_state)
    predicted_state_mean : ndarray of shape (n_state,)
    predicted_state_covariance : ndarray of shape (n_state, n_state)
    log_predictive : float
    """

    filtered_state_mean: np.ndarray
    filtered_state_covariance: np.ndarray
    predicted_state_mean: np.ndarray
    predicted_state_covariance: np.ndarray
    log_predictive: float


# -- validation ---------------------------------------------------------------


def _check_functions(value, name, *, required=True):
    """A callable or a non-empty sequence of callables (a list; None when not ``required``)."""
    if value is None and not required:
        return None
    if callable(value):
        return value
    if isinstance(value, (list, tuple, np.ndarray)) and len(value) > 0:
        functions = list(np.ravel(np.asarray(value, dtype=object)))
        for index, function in enumerate(functions):
            if not callable(function):
                raise TypeError(f"{name}[{index}] must be callable, got {type(function).__name__}.")
        return functions
    raise TypeError(
        f"{name} must be a callable or a non-empty sequence of callables, "
        f"got {type(value).__name__}."
    )


def _function_at(functions, t, name, n_needed):
    """The function of step ``t``: the one callable, or element ``t`` of the list."""
    if callable(functions):
        return functions
    if len(functions) < n_needed:
        raise ValueError(
            f"{name} has {len(functions)} functions but the data need {n_needed} "
            "(one per transition / one per row); pass one callable to use it at every step."
        )
    return functions[t]


class _Model(NamedTuple):
    transition: object
    observation: object
    Q: np.ndarray
    R: np.ndarray
    mu0: np.ndarray
    Sigma0: np.ndarray
    transition_jacobians: object
    observation_jacobians: object
    n_state: int
    n_obs: int
    transition_noise_jacobians: object = None
    observation_noise_jacobians: object = None


def _check_parameters(parameters):
    if not isinstance(parameters, NonlinearSSMParameters):
        raise TypeError(
            f"parameters must be a NonlinearSSMParameters, got {type(parameters).__name__}."
        )
    transition = _check_functions(parameters.transition_functions, "transition_functions")
    observation = _check_functions(parameters.observation_functions, "observation_functions")
    Q = np.asarray(parameters.transition_covariance)
    R = np.asarray(parameters.observation_covariance)
    for name, value in (("transition_covariance", Q), ("observation_covariance", R)):
        if value.ndim != 2 or value.shape[0] != value.shape[1] or value.shape[0] == 0:
            raise ValueError(f"{name} must be a square 2-D matrix, got shape {value.shape}.")
    n_state, n_obs = Q.shape[0], R.shape[0]
    Q = check_state_covariance(Q, "transition_covariance", n_state)
    R = check_state_covariance(R, "observation_covariance", n_obs)
    mu0 = (
        np.zeros(n_state)
        if parameters.initial_state_mean is None
        else check_matrix(parameters.initial_state_mean, "initial_state_mean", (n_state,))
    )
    Sigma0 = (
        np.eye(n_state)
        if parameters.initial_state_covariance is None
        else check_state_covariance(
            parameters.initial_state_covariance, "initial_state_covariance", n_state
        )
    )
    return _Model(
        transition,
        observation,
        Q,
        R,
        mu0,
        Sigma0,
        _check_functions(parameters.transition_jacobians, "transition_jacobians", required=False),
        _check_functions(parameters.observation_jacobians, "observation_jacobians", required=False),
        n_state,
        n_obs,
        _check_functions(
            parameters.transition_noise_jacobians, "transition_noise_jacobians", required=False
        ),
        _check_functions(
            parameters.observation_noise_jacobians, "observation_noise_jacobians", required=False
        ),
    )


def _check_X(X, model):
    X = check_observations(X)
    if X.shape[1] != model.n_obs:
        raise ValueError(
            f"X has {X.shape[1]} features but observation_covariance is "
            f"{model.n_obs} x {model.n_obs}."
        )
    return X


def _check_sigma_options(alpha, beta, kappa):
    for name, value in (("alpha", alpha), ("beta", beta)):
        if not isinstance(value, Real) or isinstance(value, bool) or not np.isfinite(value):
            raise TypeError(f"{name} must be a finite real number, got {value!r}.")
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha!r}.")
    if kappa is not None and (
        not isinstance(kappa, Real) or isinstance(kappa, bool) or not np.isfinite(kappa)
    ):
        raise TypeError(f"kappa must be None or a finite real number, got {kappa!r}.")


def _check_vectorized(vectorized):
    if vectorized not in ("auto", True, False) or isinstance(vectorized, np.ndarray):
        raise ValueError(f'vectorized must be "auto", True or False, got {vectorized!r}.')
    return vectorized


def _check_jacobian_method(method):
    if method not in ("auto", "complex-step", "central"):
        raise ValueError(
            f'jacobian_method must be "auto", "complex-step" or "central", got {method!r}.'
        )
    return method


def _check_previous(model, mean, covariance):
    if (mean is None) != (covariance is None):
        raise ValueError(
            "filtered_state_mean and filtered_state_covariance go together: give both "
            "(the previous step's state) or neither (the first row of a sequence)."
        )
    if mean is None:
        return None
    return (
        check_matrix(mean, "filtered_state_mean", (model.n_state,)),
        check_state_covariance(covariance, "filtered_state_covariance", model.n_state),
    )


def _check_time_index(time_index):
    if not isinstance(time_index, Integral) or isinstance(time_index, bool) or time_index < 0:
        raise ValueError(f"time_index must be an integer >= 0, got {time_index!r}.")
    return int(time_index)


def _check_step_observation(x, model):
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D (n_features,), got shape {x.shape}.")
    return _check_X(x.reshape(1, -1), model)[0]


# -- calling the user's functions -----------------------------------------------


class _Caller:
    """Calls the user's functions on sets of points, all at once when they allow it.

    ``points`` are rows, shape (n_points, n); a vectorised call passes their
    transpose (one point a column).  The decision of ``vectorized="auto"`` is
    taken on the first call of each function and kept for the rest of the
    filter or smoother call.
    """

    def __init__(self, vectorized):
        self.vectorized = vectorized
        self.decided = {}
        self.complex_step = {}
        self._wrappers = {}
        self._alive = []  # the functions whose ids are keys: alive as long as the decisions

    def _one(self, function, name, x, w, n_out):
        value = function(x.copy()) if w is None else function(x.copy(), w.copy())
        array = np.asarray(value)
        if array.dtype.kind not in "fiubc":
            raise TypeError(f"{name} must return a numeric array, got dtype {array.dtype}.")
        if array.shape == () and n_out == 1:
            array = array.reshape(1)
        if array.shape != (n_out,):
            raise ValueError(
                f"{name} returned shape {array.shape} for one state of shape {x.shape}; "
                f"it must return shape ({n_out},)."
            )
        return array

    def _all(self, function, name, points, noise, n_out, *, strict):
        n_points = points.shape[0]
        columns = np.array(points.T)
        try:
            if noise is None:
                array = np.asarray(function(columns))
            else:
                array = np.asarray(function(columns, np.array(noise.T)))
        except Exception as error:
            if not strict:
                raise
            raise ValueError(
                f"{name} failed on all {n_points} points at once (vectorized=True), an array of "
                f"shape {columns.shape} with one point a column: {error}  It must return "
                f"({n_out}, {n_points}); pass vectorized=False to call it on one state at a time."
            ) from error
        if array.dtype.kind in "fiubc":
            if array.shape == (n_out, n_points):
                return array.T
            if n_out == 1 and array.shape == (n_points,):
                return array.reshape(-1, 1)
        if strict:
            raise ValueError(
                f"{name} was called on all {n_points} points at once (vectorized=True), an "
                f"array of shape {columns.shape} with one point a column, and returned "
                f"{array.dtype} of shape {array.shape}; it must return ({n_out}, {n_points}). "
                "Pass vectorized=False to call it on one state at a time."
            )
        return None

    def _try_all(self, function, name, points, noise, n_out):
        """The vectorised values if the function gives them right, else None."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                values = self._all(function, name, points, noise, n_out, strict=False)
        except Exception:  # any failure on a 2-D array means: not vectorised
            return None
        if values is None:
            return None
        n_points = points.shape[0]
        for index in sorted({0, n_points // 2, n_points - 1}):
            one = self._one(
                function, name, points[index], None if noise is None else noise[index], n_out
            )
            if not np.all(np.isfinite(one)):
                return None  # computed one at a time, and refused there
            scale = 1.0 + np.max(np.abs(one), initial=0.0)
            if not np.allclose(values[index], one, rtol=1e-10, atol=1e-12 * scale):
                return None
        return values

    def __call__(self, function, name, points, n_out, noise=None):
        """The function's values at every row of ``points``: shape (n_points, n_out)."""
        values = None
        if self.vectorized is True:
            values = self._all(function, name, points, noise, n_out, strict=True)
        elif self.vectorized == "auto":
            key = id(function)
            decided = self.decided.get(key)
            if decided is None:
                self._alive.append(function)
                values = self._try_all(function, name, points, noise, n_out)
                self.decided[key] = values is not None
            elif decided:
                values = self._all(function, name, points, noise, n_out, strict=True)
        if values is None:
            values = np.array(
                [
                    self._one(function, name, points[i], None if noise is None else noise[i], n_out)
                    for i in range(points.shape[0])
                ]
            )
        if values.dtype.kind != "c" and points.dtype.kind != "c":
            values = values.astype(np.float64, copy=False)
            if not np.all(np.isfinite(values)):
                raise ValueError(f"{name} returned NaN or infinity.")
        return values

    @staticmethod
    def checked_jacobian(value, name, n_out, n):
        """A user's Jacobian as a finite float array of shape (n_out, n)."""
        array = np.asarray(value, dtype=np.float64)
        if n_out == 1 and array.shape == (n,):
            array = array.reshape(1, n)
        if array.shape != (n_out, n):
            raise ValueError(
                f"{name} returned shape {array.shape}; the Jacobian must have shape ({n_out}, {n})."
            )
        if not np.all(np.isfinite(array)):
            raise ValueError(f"{name} returned NaN or infinity.")
        return array

    def augmented(self, function, n):
        """``a -> function(a[:n], a[n:])``: a function of (state, noise) as one of the
        stacked vector (rows of a 2-D array of points), the same object for the
        same function, so that the decisions of "auto" are taken once."""
        key = ("augmented", id(function), n)
        wrapper = self._wrappers.get(key)
        if wrapper is None:
            self._alive.append(function)

            def wrapper(stacked):
                return function(stacked[:n], stacked[n:])

            self._wrappers[key] = wrapper
        return wrapper

    def jacobian(self, function, jacobian, name, x, n_out, method):
        """The Jacobian of ``function`` at ``x``: shape (n_out, n)."""
        n = x.shape[0]
        if jacobian is not None:
            return self.checked_jacobian(jacobian(x.copy()), name, n_out, n)
        use_complex = method == "complex-step"
        if method == "auto":
            key = id(function)
            if key not in self.complex_step:
                self._alive.append(function)
                self.complex_step[key] = self._complex_step_works(function, name, x, n_out)
            use_complex = self.complex_step[key]
        if use_complex:
            step = 1e-20
            points = x + 1j * step * np.eye(n)
            values = self(function, name, points, n_out)
            if values.dtype.kind != "c":
                raise TypeError(
                    f"{name} returned a real array for a complex state, so complex-step "
                    'differences cannot see its derivative; use jacobian_method="central" '
                    "or give the Jacobian."
                )
            jac = values.imag.T / step
        else:
            steps = np.cbrt(np.finfo(np.float64).eps) * np.maximum(1.0, np.abs(x))
            steps = (x + steps) - x  # exactly representable
            points = np.concatenate([x + np.diag(steps), x - np.diag(steps)])
            values = self(function, name, points, n_out)
            jac = (values[:n] - values[n:]).T / (2.0 * steps)
        if not np.all(np.isfinite(jac)):
            raise ValueError(f"the differences of {name} are NaN or infinite.")
        return np.ascontiguousarray(jac, dtype=np.float64)

    def _complex_step_works(self, function, name, x, n_out):
        """Whether the function maps a complex state to a complex result of the right shape."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", np.exceptions.ComplexWarning)
                value = self._one(function, name, x + 1j * 1e-20, None, n_out)
        except Exception:  # not complex-safe: central differences instead
            return False
        return value.dtype.kind == "c"


# -- sigma points and the unscented transform ------------------------------------


def _square_root(covariance):
    """The lower Cholesky factor; for a singular (semi-definite) matrix, ``V sqrt(D)``."""
    try:
        return np.linalg.cholesky(covariance)
    except np.linalg.LinAlgError:
        values, vectors = np.linalg.eigh(0.5 * (covariance + covariance.T))
        return vectors * np.sqrt(np.clip(values, 0.0, None))


def _weights(n, alpha, beta, kappa):
    kappa = 3.0 - n if kappa is None else float(kappa)
    if n + kappa <= 0:
        raise ValueError(
            f"kappa must be > -{n} (minus the dimension of the sigma points), got {kappa!r}."
        )
    lam = alpha * alpha * (n + kappa) - n
    spread = n + lam
    weights_mean = np.full(2 * n + 1, 0.5 / spread)
    weights_mean[0] = lam / spread
    weights_covariance = weights_mean.copy()
    weights_covariance[0] += 1.0 - alpha * alpha + beta
    return weights_mean, weights_covariance, math.sqrt(spread)


def _sigma_points(mean, covariance, alpha, beta, kappa, root=None):
    """The points of N(mean, covariance); ``root`` a lower square root of it, if known."""
    n = mean.shape[0]
    weights_mean, weights_covariance, spread = _weights(n, alpha, beta, kappa)
    root = spread * (_square_root(covariance) if root is None else root).T  # row j: column j
    points = np.empty((2 * n + 1, n))
    points[0] = mean
    points[1 : n + 1] = mean + root
    points[n + 1 :] = mean - root
    return SigmaPoints(points, weights_mean, weights_covariance)


def _moments(values, weights_mean, weights_covariance):
    mean = weights_mean @ values
    deviations = values - mean
    return mean, deviations.T @ (weights_covariance[:, None] * deviations), deviations


def _augmented_points(blocks, alpha, beta, kappa):
    """Sigma points of independent Gaussian blocks ``[(mean, cov), ...]``, split by block.

    The square root of the block-diagonal covariance is the block-diagonal of
    the blocks' roots (the Cholesky factor of the whole, to rounding).
    """
    sizes = [block[0].shape[0] for block in blocks]
    bounds = np.cumsum([0, *sizes])
    mean = np.concatenate([block[0] for block in blocks])
    root = np.zeros((bounds[-1], bounds[-1]))
    for (_, covariance), start, end in zip(blocks, bounds[:-1], bounds[1:]):
        root[start:end, start:end] = _square_root(covariance)
    sigma = _sigma_points(mean, None, alpha, beta, kappa, root=root)
    parts = [sigma.points[:, start:end] for start, end in zip(bounds[:-1], bounds[1:])]
    return parts, sigma.weights_mean, sigma.weights_covariance


def _solve_right(matrix, covariance, what, vector=None):
    """``matrix @ inv(covariance)`` (and ``inv(covariance) @ vector``, and the Cholesky
    factor) for a symmetric positive-definite covariance; one LAPACK solve."""
    try:
        factor = np.linalg.cholesky(covariance)
    except np.linalg.LinAlgError:
        raise ValueError(f"the {what} is not positive definite.") from None
    right = matrix.T if vector is None else np.column_stack([matrix.T, vector])
    solved = np.linalg.solve(covariance, right)
    if vector is None:
        return solved.T, None, factor
    return solved[:, :-1].T, solved[:, -1], factor


def _correct(predicted_mean, predicted_covariance, x, obs_mean, obs_covariance, cross, t):
    """Condition the prediction on the observed entries of ``x``: (mean, cov, log density)."""
    observed = ~np.isnan(x)
    if not observed.any():
        return predicted_mean, predicted_covariance, 0.0
    if not observed.all():
        x, obs_mean = x[observed], obs_mean[observed]
        obs_covariance = obs_covariance[np.ix_(observed, observed)]
        cross = cross[:, observed]
    residual = x - obs_mean
    gain, solved, factor = _solve_right(
        cross, obs_covariance, f"predicted observation covariance of row {t}", residual
    )
    mean = predicted_mean + gain @ residual
    covariance = predicted_covariance - gain @ cross.T
    covariance = 0.5 * (covariance + covariance.T)
    log_det = 2.0 * np.sum(np.log(np.diag(factor)))
    log_density = -0.5 * (residual.size * _LOG_2PI + log_det + residual @ solved)
    return mean, covariance, float(log_density)


# -- the unscented filter and smoother --------------------------------------------


def _unscented_step(model, previous, x, t, *, additive, options, caller, n_rows):
    """One predict (unless ``previous`` is None: the prior) and correct step."""
    alpha, beta, kappa = options
    n, p = model.n_state, model.n_obs
    g = _function_at(model.observation, t, "observation_functions", n_rows)
    if additive:
        if previous is None:
            predicted_mean, predicted_covariance = model.mu0, model.Sigma0
        else:
            f = _function_at(model.transition, t - 1, "transition_functions", n_rows - 1)
            sigma = _sigma_points(previous[0], previous[1], alpha, beta, kappa)
            values = caller(f, "transition_functions", sigma.points, n)
            predicted_mean, predicted_covariance, _ = _moments(
                values, sigma.weights_mean, sigma.weights_covariance
            )
            predicted_covariance = predicted_covariance + model.Q
        sigma = _sigma_points(predicted_mean, predicted_covariance, alpha, beta, kappa)
        state_points, weights_mean, weights_covariance = sigma
        observations = caller(g, "observation_functions", state_points, p)
        obs_mean, obs_covariance, obs_deviations = _moments(
            observations, weights_mean, weights_covariance
        )
        obs_covariance = obs_covariance + model.R
    else:
        mean, covariance = (model.mu0, model.Sigma0) if previous is None else previous
        (state_points, transition_noise, observation_noise), weights_mean, weights_covariance = (
            _augmented_points(
                [(mean, covariance), (np.zeros(n), model.Q), (np.zeros(p), model.R)],
                alpha,
                beta,
                kappa,
            )
        )
        if previous is None:
            predicted_mean, predicted_covariance = mean, covariance
        else:
            f = _function_at(model.transition, t - 1, "transition_functions", n_rows - 1)
            state_points = caller(f, "transition_functions", state_points, n, transition_noise)
            predicted_mean, predicted_covariance, _ = _moments(
                state_points, weights_mean, weights_covariance
            )
        observations = caller(g, "observation_functions", state_points, p, observation_noise)
        obs_mean, obs_covariance, obs_deviations = _moments(
            observations, weights_mean, weights_covariance
        )
    cross = (state_points - predicted_mean).T @ (weights_covariance[:, None] * obs_deviations)
    filtered_mean, filtered_covariance, log_density = _correct(
        predicted_mean, predicted_covariance, x, obs_mean, obs_covariance, cross, t
    )
    return NonlinearFilterStep(
        filtered_mean, filtered_covariance, predicted_mean, predicted_covariance, log_density
    )


def _sequence(parameters, X, step, predict, kwargs):
    """The filter of one sequence by ``step``; then, with ``predict``, the smoother."""
    model = _check_parameters(parameters)
    X = _check_X(X, model)
    filtered = _run_filter(step, model, X, **kwargs)
    if predict is None:
        return filtered
    return _run_smoother(predict, model, filtered, X.shape[0], **kwargs)


def _one_step(step, parameters, x, previous, time_index, kwargs):
    """One call of ``step`` on validated inputs (the public one-step functions)."""
    model = _check_parameters(parameters)
    x = _check_step_observation(x, model)
    previous = _check_previous(model, *previous)
    t = _check_time_index(time_index)
    if previous is not None and t == 0:
        t = 1  # a transition happens: the functions of the first transition
    return step(model, previous, x, t, n_rows=t + 1, **kwargs)


def _run_filter(step, model, X, **kwargs):
    n_rows, n = X.shape[0], model.n_state
    means, covariances = np.empty((n_rows, n)), np.empty((n_rows, n, n))
    predicted_means, predicted_covariances = np.empty((n_rows, n)), np.empty((n_rows, n, n))
    log_predictive = np.empty(n_rows)
    previous = None
    for t in range(n_rows):
        result = step(model, previous, X[t], t, n_rows=n_rows, **kwargs)
        means[t], covariances[t] = result.filtered_state_mean, result.filtered_state_covariance
        predicted_means[t] = result.predicted_state_mean
        predicted_covariances[t] = result.predicted_state_covariance
        log_predictive[t] = result.log_predictive
        previous = (means[t], covariances[t])
    return NonlinearFilterResult(
        means,
        covariances,
        predicted_means,
        predicted_covariances,
        float(np.sum(log_predictive)),
        log_predictive,
    )


def _run_smoother(predict, model, filtered, n_rows, **kwargs):
    """The Rauch-Tung-Striebel backward pass; ``predict`` gives (mean, cov, cross) at t."""
    means = filtered.filtered_means.copy()
    covariances = filtered.filtered_covariances.copy()
    gains = np.zeros_like(covariances)
    for t in range(n_rows - 2, -1, -1):
        f = _function_at(model.transition, t, "transition_functions", n_rows - 1)
        mean, covariance = filtered.filtered_means[t], filtered.filtered_covariances[t]
        predicted_mean, predicted_covariance, cross = predict(
            model, f, mean, covariance, t, **kwargs
        )
        gain, _, _ = _solve_right(
            cross, predicted_covariance, f"predicted state covariance of row {t + 1}"
        )
        means[t] = mean + gain @ (means[t + 1] - predicted_mean)
        smoothed = covariance + gain @ (covariances[t + 1] - predicted_covariance) @ gain.T
        covariances[t] = 0.5 * (smoothed + smoothed.T)
        gains[t] = gain
    return NonlinearSmootherResult(
        means, covariances, gains, filtered.log_likelihood, filtered.log_predictive
    )


def _unscented_predict(model, f, mean, covariance, t, *, additive, options, caller):
    """Predicted moments of row t + 1 from the filtered row t, and Cov(z_t, z_{t+1})."""
    alpha, beta, kappa = options
    n = model.n_state
    if additive:
        state_points, weights_mean, weights_covariance = _sigma_points(
            mean, covariance, alpha, beta, kappa
        )
        values = caller(f, "transition_functions", state_points, n)
        noise = model.Q
    else:
        (state_points, transition_noise), weights_mean, weights_covariance = _augmented_points(
            [(mean, covariance), (np.zeros(n), model.Q)], alpha, beta, kappa
        )
        values = caller(f, "transition_functions", state_points, n, transition_noise)
        noise = 0.0
    predicted_mean, predicted_covariance, deviations = _moments(
        values, weights_mean, weights_covariance
    )
    cross = (state_points - mean).T @ (weights_covariance[:, None] * deviations)
    return predicted_mean, predicted_covariance + noise, cross


def _unscented_options(additive, alpha, beta, kappa, vectorized):
    if not isinstance(additive, (bool, np.bool_)):
        raise TypeError(f"additive must be True or False, got {additive!r}.")
    _check_sigma_options(alpha, beta, kappa)
    return dict(
        additive=bool(additive),
        options=(float(alpha), float(beta), kappa),
        caller=_Caller(_check_vectorized(vectorized)),
    )


@masked_arrays_checked(missing=("X",))
def unscented_filter(
    parameters, X, *, additive=False, alpha=1.0, beta=0.0, kappa=None, vectorized="auto"
):
    """Unscented Kalman filter: E[z_t | x_1..x_t] and its covariance, pykalman's numbers.

    Parameters
    ----------
    parameters : NonlinearSSMParameters
        The model: the functions, Q, R and the optional mu0, Sigma0.
    X : array-like of shape (n_samples, n_features)
        One sequence of observations.  NaN (or a masked entry) is missing.
    additive : bool, default=False
        True: the noise is added to ``f(z)`` and ``g(z)`` (pykalman's
        ``AdditiveUnscentedKalmanFilter``, ``2 n + 1`` sigma points); False:
        the functions take it, ``f(z, w)`` and ``g(z, v)``, and the sigma
        points are those of the augmented state (pykalman's
        ``UnscentedKalmanFilter``).
    alpha, beta : float, default=1.0, 0.0
        The spread of the sigma points and the covariance weight of the centre.
    kappa : float, optional
        The secondary scaling; None is ``3 - N`` (``N`` the dimension of the
        sigma points), pykalman's choice.
    vectorized : {"auto", True, False}, default="auto"
        Whether the functions are called once per step on all sigma points,
        an array of shape (n_dim, n_points) with one point a column (see the
        module's documentation).

    Returns
    -------
    NonlinearFilterResult
        ``filtered_means``, ``filtered_covariances``, ``predicted_means``,
        ``predicted_covariances``, ``log_likelihood``, ``log_predictive``.

    Raises
    ------
    TypeError
        When ``parameters`` is not a :class:`NonlinearSSMParameters`, a
        function is not callable or an input is complex.
    ValueError
        On a wrong shape, a covariance that is not symmetric positive
        semi-definite, a function that returns the wrong shape or NaN, or
        infinity in X.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.nonlinear import NonlinearSSMParameters, unscented_filter
    >>> model = NonlinearSSMParameters(
    ...     transition_functions=lambda z: np.sin(z) + z, observation_functions=lambda z: z ** 3,
    ...     transition_covariance=[[0.1]], observation_covariance=[[0.5]])
    >>> X = np.array([[0.2], [np.nan], [1.5], [2.0]])
    >>> result = unscented_filter(model, X, additive=True)
    >>> result.filtered_means.shape, result.filtered_covariances.shape
    ((4, 1), (4, 1, 1))
    >>> float(result.log_predictive[1])  # the missing row
    0.0
    """
    kwargs = _unscented_options(additive, alpha, beta, kappa, vectorized)
    return _sequence(parameters, X, _unscented_step, None, kwargs)


@masked_arrays_checked(missing=("X",))
def unscented_smoother(
    parameters, X, *, additive=False, alpha=1.0, beta=0.0, kappa=None, vectorized="auto"
):
    """Unscented Rauch-Tung-Striebel smoother: E[z_t | x_1..x_T], pykalman's numbers.

    The filter of :func:`unscented_filter`, then a backward pass that
    propagates sigma points of each filtered state (with those of the
    transition noise in the general form) through ``f_t``.  Parameters are
    those of :func:`unscented_filter`.

    Returns
    -------
    NonlinearSmootherResult
        ``smoothed_means``, ``smoothed_covariances``, ``smoother_gains``,
        ``log_likelihood``, ``log_predictive``.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.nonlinear import NonlinearSSMParameters, unscented_smoother
    >>> model = NonlinearSSMParameters(
    ...     transition_functions=lambda z, w: 0.9 * z + np.cos(z) * w,
    ...     observation_functions=lambda z, v: np.array([z[0] + v[0], z[0] ** 2 + v[1]]),
    ...     transition_covariance=[[0.2]], observation_covariance=np.eye(2) * 0.1)
    >>> X = np.array([[0.1, 0.0], [0.4, 0.2], [np.nan, np.nan], [1.1, 1.3]])
    >>> result = unscented_smoother(model, X)
    >>> result.smoothed_means.shape, result.smoother_gains.shape
    ((4, 1), (4, 1, 1))
    """
    kwargs = _unscented_options(additive, alpha, beta, kappa, vectorized)
    return _sequence(parameters, X, _unscented_step, _unscented_predict, kwargs)


@masked_arrays_checked(missing=("x",))
def unscented_filter_step(
    parameters,
    x,
    *,
    filtered_state_mean=None,
    filtered_state_covariance=None,
    time_index=0,
    additive=False,
    alpha=1.0,
    beta=0.0,
    kappa=None,
    vectorized="auto",
):
    """Advance the unscented Kalman filter by one observation (pykalman's ``filter_update``).

    Parameters
    ----------
    parameters : NonlinearSSMParameters
        The model, as in :func:`unscented_filter`.
    x : array-like of shape (n_features,)
        The new observation; NaN entries are missing (all NaN: predict only).
    filtered_state_mean : array-like of shape (n_state,), optional
        The previous step's filtered mean.  None (with
        ``filtered_state_covariance`` None too): ``x`` is the first row,
        conditioned on the prior N(mu0, Sigma0) without a transition.
    filtered_state_covariance : array-like of shape (n_state, n_state), optional
        The previous step's filtered covariance.
    time_index : int, default=0
        The row ``t`` of ``x``, which picks the functions of sequences:
        ``transition_functions[t - 1]`` and ``observation_functions[t]``.
    additive, alpha, beta, kappa, vectorized
        As in :func:`unscented_filter`.

    Returns
    -------
    NonlinearFilterStep
        Step by step, the rows of :func:`unscented_filter`.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.nonlinear import (
    ...     NonlinearSSMParameters, unscented_filter, unscented_filter_step)
    >>> model = NonlinearSSMParameters(
    ...     transition_functions=lambda z: np.sin(z) + z, observation_functions=lambda z: z,
    ...     transition_covariance=[[0.1]], observation_covariance=[[0.5]])
    >>> X = np.array([[0.2], [0.5], [1.5]])
    >>> mean = covariance = None
    >>> for t, x in enumerate(X):
    ...     mean, covariance = unscented_filter_step(
    ...         model, x, filtered_state_mean=mean, filtered_state_covariance=covariance,
    ...         time_index=t, additive=True)[:2]
    >>> bool(np.allclose(mean, unscented_filter(model, X, additive=True).filtered_means[-1]))
    True
    """
    kwargs = _unscented_options(additive, alpha, beta, kappa, vectorized)
    previous = (filtered_state_mean, filtered_state_covariance)
    return _one_step(_unscented_step, parameters, x, previous, time_index, kwargs)


# -- the extended filter and smoother ---------------------------------------------


def _linearised(model, part, t, n_needed, mean, *, method, caller, additive):
    """``(value, J, noise_covariance)`` of the transition or observation of step ``t``
    linearised at ``mean`` (and zero noise): its value there, its Jacobian in the
    state, and the covariance its noise adds (Q or R; ``L Q L^T`` in the general
    form, L the Jacobian in the noise)."""
    n = model.n_state
    functions, covariance = (
        (model.transition, model.Q) if part == "transition" else (model.observation, model.R)
    )
    n_out = n_noise = n if part == "transition" else model.n_obs  # w has Q's size, v R's
    function = _function_at(functions, t, f"{part}_functions", n_needed)
    jacobians = getattr(model, f"{part}_jacobians")
    name = f"{part}_jacobians"
    jac = None if jacobians is None else _function_at(jacobians, t, name, n_needed)
    if additive:
        value = caller(function, f"{part}_functions", mean[None, :], n_out)[0]
        return value, caller.jacobian(function, jac, name, mean, n_out, method), covariance
    noise_jacobians = getattr(model, f"{part}_noise_jacobians")
    noise_name = f"{part}_noise_jacobians"
    noise_jac = (
        None if noise_jacobians is None else _function_at(noise_jacobians, t, noise_name, n_needed)
    )
    stacked = np.concatenate([mean, np.zeros(n_noise)])
    wrapper = caller.augmented(function, n)
    value = caller(wrapper, f"{part}_functions", stacked[None, :], n_out)[0]
    if jac is None or noise_jac is None:  # differences in the state and the noise at once
        both = caller.jacobian(wrapper, None, name, stacked, n_out, method)
    state_jacobian = (
        both[:, :n]
        if jac is None
        else caller.checked_jacobian(jac(mean.copy(), np.zeros(n_noise)), name, n_out, n)
    )
    noise_jacobian = (
        both[:, n:]
        if noise_jac is None
        else caller.checked_jacobian(
            noise_jac(mean.copy(), np.zeros(n_noise)), noise_name, n_out, n_noise
        )
    )
    return value, state_jacobian, noise_jacobian @ covariance @ noise_jacobian.T


def _extended_step(model, previous, x, t, *, method, caller, n_rows, additive):
    options = dict(method=method, caller=caller, additive=additive)
    if previous is None:
        predicted_mean, predicted_covariance = model.mu0, model.Sigma0
    else:
        mean, covariance = previous
        predicted_mean, F, noise = _linearised(
            model, "transition", t - 1, n_rows - 1, mean, **options
        )
        predicted_covariance = F @ covariance @ F.T + noise
        predicted_covariance = 0.5 * (predicted_covariance + predicted_covariance.T)
    obs_mean, H, noise = _linearised(model, "observation", t, n_rows, predicted_mean, **options)
    cross = predicted_covariance @ H.T
    obs_covariance = H @ cross + noise
    filtered_mean, filtered_covariance, log_density = _correct(
        predicted_mean, predicted_covariance, x, obs_mean, obs_covariance, cross, t
    )
    return NonlinearFilterStep(
        filtered_mean, filtered_covariance, predicted_mean, predicted_covariance, log_density
    )


def _extended_predict(model, f, mean, covariance, t, *, method, caller, additive):
    predicted_mean, F, noise = _linearised(
        model, "transition", t, t + 1, mean, method=method, caller=caller, additive=additive
    )
    cross = covariance @ F.T
    return predicted_mean, F @ cross + noise, cross


def _extended_options(jacobian_method, vectorized, additive):
    if not isinstance(additive, (bool, np.bool_)):
        raise TypeError(f"additive must be True or False, got {additive!r}.")
    return dict(
        method=_check_jacobian_method(jacobian_method),
        caller=_Caller(_check_vectorized(vectorized)),
        additive=bool(additive),
    )


@masked_arrays_checked(missing=("X",))
def extended_kalman_filter(
    parameters, X, *, additive=True, jacobian_method="auto", vectorized="auto"
):
    """Extended Kalman filter: the model linearised at each prediction.

    ``z_{t+1} = f_t(z_t) + w_t``, ``x_t = g_t(z_t) + v_t``: the prediction is
    ``f(m)`` with covariance ``F P F^T + Q`` (``F`` the Jacobian of ``f`` at the
    filtered mean ``m``), the correction that of the Kalman filter with ``H``
    the Jacobian of ``g`` at the predicted mean.  In the general noise form
    (``additive=False``), ``z_{t+1} = f_t(z_t, w_t)`` and
    ``x_t = g_t(z_t, v_t)`` are linearised at the mean and zero noise: the
    prediction is ``f(m, 0)`` with covariance ``F P F^T + L Q L^T`` (``L`` the
    Jacobian of ``f`` in the noise), and likewise ``H P H^T + M R M^T``.

    Parameters
    ----------
    parameters : NonlinearSSMParameters
        The model; ``transition_jacobians`` and ``observation_jacobians`` (and
        in the general form ``transition_noise_jacobians`` and
        ``observation_noise_jacobians``), when given, are the Jacobians (else
        differences are taken).
    X : array-like of shape (n_samples, n_features)
        One sequence of observations.  NaN (or a masked entry) is missing.
    additive : bool, default=True
        True: the noise is added to ``f(z)`` and ``g(z)``; False: the
        functions take it, ``f(z, w)`` and ``g(z, v)`` (the general form of
        :func:`unscented_filter`), as do the Jacobians, ``J(z, w)``.
    jacobian_method : {"auto", "complex-step", "central"}, default="auto"
        How a Jacobian that is not given is computed: complex-step
        differentiation, ``Im f(z + i h e_j) / h`` with ``h = 1e-20`` (exact to
        rounding, but only for code that is analytic in ``z``: no ``abs``,
        comparisons or ``np.real``), or central differences with steps
        ``eps**(1/3) max(1, |z_j|)``.  "auto" uses the complex step when the
        function returns a complex array for a complex state without a
        warning, central differences otherwise.  In the general form the
        state and the noise are perturbed together (one set of points for
        both Jacobians).
    vectorized : {"auto", True, False}, default="auto"
        Whether the function is called once on all perturbed states of a
        Jacobian (one a column), as in :func:`unscented_filter`.

    Returns
    -------
    NonlinearFilterResult

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.nonlinear import NonlinearSSMParameters, extended_kalman_filter
    >>> model = NonlinearSSMParameters(
    ...     transition_functions=lambda z: np.array([z[0] + 0.1 * z[1], z[1] - 0.1 * np.sin(z[0])]),
    ...     observation_functions=lambda z: np.sin(z[:1]),
    ...     transition_covariance=np.eye(2) * 0.01, observation_covariance=[[0.1]],
    ...     initial_state_mean=[1.0, 0.0])
    >>> X = np.array([[0.8], [0.9], [np.nan], [0.7]])
    >>> result = extended_kalman_filter(model, X)
    >>> result.filtered_means.shape
    (4, 2)
    """
    model = _check_parameters(parameters)
    X = _check_X(X, model)
    kwargs = _extended_options(jacobian_method, vectorized, additive)
    return _run_filter(_extended_step, model, X, **kwargs)


@masked_arrays_checked(missing=("X",))
def extended_kalman_smoother(
    parameters, X, *, additive=True, jacobian_method="auto", vectorized="auto"
):
    """Extended Rauch-Tung-Striebel smoother: the filter, then the linearised backward pass.

    Gains ``G_t = P_t F_t^T (F_t P_t F_t^T + Q)^{-1}`` with ``F_t`` the Jacobian
    of ``f_t`` at the filtered mean (``L_t Q L_t^T`` for ``Q`` in the general
    noise form).  Parameters are those of :func:`extended_kalman_filter`.

    Returns
    -------
    NonlinearSmootherResult

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.nonlinear import NonlinearSSMParameters, extended_kalman_smoother
    >>> model = NonlinearSSMParameters(
    ...     transition_functions=lambda z: 0.5 * z + 2 * np.tanh(z),
    ...     observation_functions=lambda z: z, transition_covariance=[[0.3]],
    ...     observation_covariance=[[0.2]],
    ...     transition_jacobians=lambda z: 0.5 + 2 / np.cosh(z) ** 2)
    >>> X = np.array([[0.5], [1.2], [2.0], [2.1]])
    >>> result = extended_kalman_smoother(model, X)
    >>> result.smoothed_covariances.shape
    (4, 1, 1)
    """
    kwargs = _extended_options(jacobian_method, vectorized, additive)
    return _sequence(parameters, X, _extended_step, _extended_predict, kwargs)


@masked_arrays_checked(missing=("x",))
def extended_kalman_filter_step(
    parameters,
    x,
    *,
    filtered_state_mean=None,
    filtered_state_covariance=None,
    time_index=0,
    additive=True,
    jacobian_method="auto",
    vectorized="auto",
):
    """Advance the extended Kalman filter by one observation.

    Parameters are those of :func:`unscented_filter_step` (without the
    sigma-point options) and of :func:`extended_kalman_filter`.

    Returns
    -------
    NonlinearFilterStep

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.nonlinear import (
    ...     NonlinearSSMParameters, extended_kalman_filter_step)
    >>> model = NonlinearSSMParameters(
    ...     transition_functions=lambda z: np.sin(z) + z, observation_functions=lambda z: z,
    ...     transition_covariance=[[0.1]], observation_covariance=[[0.5]])
    >>> first = extended_kalman_filter_step(model, np.array([0.3]))
    >>> second = extended_kalman_filter_step(
    ...     model, np.array([0.6]), filtered_state_mean=first.filtered_state_mean,
    ...     filtered_state_covariance=first.filtered_state_covariance)
    >>> m = first.filtered_state_mean
    >>> bool(np.allclose(second.predicted_state_mean, np.sin(m) + m))  # f at the filtered mean
    True
    """
    kwargs = _extended_options(jacobian_method, vectorized, additive)
    previous = (filtered_state_mean, filtered_state_covariance)
    return _one_step(_extended_step, parameters, x, previous, time_index, kwargs)


# -- the building blocks, public ----------------------------------------------------


@masked_arrays_checked()
def unscented_sigma_points(mean, covariance, *, alpha=1.0, beta=0.0, kappa=None):
    """The ``2 n + 1`` sigma points of N(mean, covariance) and their weights.

    Parameters
    ----------
    mean : array-like of shape (n,)
    covariance : array-like of shape (n, n)
        Symmetric positive semi-definite: its lower Cholesky factor (for a
        singular matrix, ``V sqrt(D)`` of its eigen-decomposition) gives the
        points ``mean +- sqrt(n + lambda)`` times each column.
    alpha, beta, kappa : float
        As in :func:`unscented_filter` (``kappa=None`` is ``3 - n``).

    Returns
    -------
    SigmaPoints
        ``points`` of shape (2 n + 1, n), ``weights_mean``,
        ``weights_covariance``; pykalman's ``moments2points``.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.nonlinear import unscented_sigma_points
    >>> sigma = unscented_sigma_points(np.zeros(2), np.diag([1.0, 4.0]))
    >>> sigma.points.round(3).tolist()
    [[0.0, 0.0], [1.732, 0.0], [0.0, 3.464], [-1.732, 0.0], [0.0, -3.464]]
    >>> round(float(sigma.weights_mean.sum()), 12)
    1.0
    """
    mean = np.asarray(mean)
    if mean.ndim != 1 or mean.size == 0:
        raise ValueError(f"mean must have shape (n,), got {mean.shape}.")
    mean = check_matrix(mean, "mean", mean.shape)
    covariance = check_state_covariance(covariance, "covariance", mean.shape[0])
    _check_sigma_options(alpha, beta, kappa)
    return _sigma_points(mean, covariance, float(alpha), float(beta), kappa)


@masked_arrays_checked()
def unscented_transform(
    sigma_points, function=None, *, noise_points=None, noise_covariance=None, vectorized="auto"
):
    """The mean and covariance of ``function(z)`` for z given by its sigma points.

    Parameters
    ----------
    sigma_points : SigmaPoints
        From :func:`unscented_sigma_points`.
    function : callable, optional
        ``function(z)``, or ``function(z, noise)`` with ``noise_points``;
        the identity when None.
    noise_points : array-like of shape (n_points, m), optional
        The noise part of augmented sigma points, passed row by row (or all at
        once, as columns) as the second argument.
    noise_covariance : array-like of shape (n_out, n_out), optional
        Added to the covariance (additive noise).
    vectorized : {"auto", True, False}, default="auto"
        As in :func:`unscented_filter`.

    Returns
    -------
    UnscentedTransformResult
        ``points``, ``mean``, ``covariance``, ``cross_covariance``.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.nonlinear import unscented_sigma_points, unscented_transform
    >>> sigma = unscented_sigma_points(np.array([1.0]), np.array([[0.5]]))
    >>> result = unscented_transform(sigma, lambda z: 2 * z + 1)  # exact for a linear map
    >>> [round(float(v), 12) for v in (result.mean[0], result.covariance[0, 0])]
    [3.0, 2.0]
    >>> round(float(result.cross_covariance[0, 0]), 12)  # Cov(z, 2 z + 1) = 2 Var(z)
    1.0
    """
    if not isinstance(sigma_points, SigmaPoints):
        raise TypeError(f"sigma_points must be a SigmaPoints, got {type(sigma_points).__name__}.")
    points = np.asarray(sigma_points.points)
    if points.ndim != 2 or points.shape[0] == 0:
        raise ValueError(f"sigma_points.points must be 2-D, got shape {points.shape}.")
    points = check_matrix(points, "sigma_points.points", points.shape)
    n_points = points.shape[0]
    weights_mean = check_matrix(sigma_points.weights_mean, "sigma_points.weights_mean", (n_points,))
    weights_covariance = check_matrix(
        sigma_points.weights_covariance, "sigma_points.weights_covariance", (n_points,)
    )
    if noise_points is not None:
        noise = np.asarray(noise_points)
        if noise.ndim != 2 or noise.shape[0] != n_points:
            raise ValueError(
                f"noise_points must have shape ({n_points}, m), one row per sigma point, "
                f"got {noise.shape}."
            )
        noise_points = check_matrix(noise, "noise_points", noise.shape)
    if function is None:
        if noise_points is not None:
            raise ValueError("noise_points needs a function of (state, noise).")
        values = points.copy()
    else:
        if not callable(function):
            raise TypeError(f"function must be callable, got {type(function).__name__}.")
        caller = _Caller(_check_vectorized(vectorized))
        n_out = _output_size(function, points[0], None if noise_points is None else noise_points[0])
        values = caller(function, "function", points, n_out, noise_points)
    mean, covariance, deviations = _moments(values, weights_mean, weights_covariance)
    if noise_covariance is not None:
        covariance = covariance + check_state_covariance(
            noise_covariance, "noise_covariance", mean.shape[0]
        )
    input_mean = weights_mean @ points
    cross = (points - input_mean).T @ (weights_covariance[:, None] * deviations)
    return UnscentedTransformResult(values, mean, covariance, cross)


def _output_size(function, x, w):
    value = np.asarray(function(x.copy()) if w is None else function(x.copy(), w.copy()))
    if value.ndim > 1:
        raise ValueError(
            f"function must return a 1-D array for one state, got shape {value.shape}."
        )
    return value.size if value.ndim == 1 else 1
