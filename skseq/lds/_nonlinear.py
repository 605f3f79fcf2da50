"""Nonlinear Kalman filters with pykalman's names: unscented (two noise forms) and extended."""

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state

from .._validation import (
    check_bool_param,
    check_parameters,
    integer_rule,
    option_rule,
    optional,
    real_rule,
)
from ..inference.nonlinear import (
    NonlinearSSMParameters,
    extended_kalman_filter,
    extended_kalman_filter_step,
    extended_kalman_smoother,
    unscented_filter,
    unscented_filter_step,
    unscented_smoother,
)

__all__ = ["UnscentedKalmanFilter", "AdditiveUnscentedKalmanFilter", "ExtendedKalmanFilter"]


def _check_vectorized_param(value, name):
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, str) and value == "auto":
        return value
    raise ValueError(f'{name} must be "auto", True or False, got {value!r}.')


_SHARED_RULES = {
    "n_dim_state": optional(integer_rule(low=1)),
    "n_dim_obs": optional(integer_rule(low=1)),
    "vectorized": _check_vectorized_param,
}
_UNSCENTED_RULES = {
    **_SHARED_RULES,
    "alpha": real_rule(low=0.0, low_open=True),
    "beta": real_rule(),
    "kappa": optional(real_rule()),
}
_EXTENDED_RULES = {
    **_SHARED_RULES,
    "jacobian_method": option_rule("auto", "complex-step", "central"),
    "additive": check_bool_param,
}


def _dimension(candidates, given, name):
    """pykalman's rule: the size the arrays agree on, else ``given``, else 1."""
    sizes = {}
    for parameter, value, axis in candidates:
        if value is not None:
            shape = np.shape(value)
            if len(shape) < 1:
                raise ValueError(f"{parameter} must be an array, got shape {shape}.")
            sizes[parameter] = shape[axis]
    if given is not None:
        sizes[name] = given
    if len(set(sizes.values())) > 1:
        raise ValueError(f"The dimensions disagree: {sizes} ({name} of each).")
    return next(iter(sizes.values()), None)


def _as_rows(X):
    """One sequence: a 1-D array is one observed feature (pykalman's habit)."""
    if not isinstance(X, np.ndarray):
        X = np.asarray(X)
    return X.reshape(-1, 1) if X.ndim == 1 else X


class _NonlinearKalmanFilter(BaseEstimator):
    """What the three filters share: the model from the constructor, pykalman's methods."""

    _additive = True
    _rules = _SHARED_RULES

    def _model(self, n_obs=None):
        """The validated :class:`NonlinearSSMParameters` (pykalman's defaults filled in)."""
        check_parameters(self, self._rules)
        n_state = _dimension(
            [
                ("transition_covariance", self.transition_covariance, -2),
                ("initial_state_covariance", self.initial_state_covariance, -2),
                ("initial_state_mean", self.initial_state_mean, -1),
            ],
            self.n_dim_state,
            "n_dim_state",
        )
        n_state = 1 if n_state is None else n_state
        n_dim_obs = _dimension(
            [("observation_covariance", self.observation_covariance, -2)],
            self.n_dim_obs,
            "n_dim_obs",
        )
        if n_dim_obs is None:
            n_dim_obs = 1 if n_obs is None else n_obs
        if self._additive:
            identity = _identity
        else:
            identity = _add_noise
        return NonlinearSSMParameters(
            transition_functions=(
                identity if self.transition_functions is None else self.transition_functions
            ),
            observation_functions=(
                identity if self.observation_functions is None else self.observation_functions
            ),
            transition_covariance=(
                np.eye(n_state)
                if self.transition_covariance is None
                else self.transition_covariance
            ),
            observation_covariance=(
                np.eye(n_dim_obs)
                if self.observation_covariance is None
                else self.observation_covariance
            ),
            initial_state_mean=self.initial_state_mean,
            initial_state_covariance=self.initial_state_covariance,
            **self._jacobians(),
        )

    def _jacobians(self):
        return {}

    def _data_model(self, X):
        X = _as_rows(X)
        return X, self._model(X.shape[1] if X.ndim == 2 else None)

    def filter(self, X):
        """Run the filter: E[z_t | x_1..x_t] and Cov(z_t | x_1..x_t).

        Parameters
        ----------
        X : array-like of shape (n_timesteps, n_dim_obs)
            One sequence (a 1-D array is one feature).  NaN entries and masked
            entries are missing; a partly observed row is conditioned on its
            observed entries.

        Returns
        -------
        filtered_state_means : ndarray of shape (n_timesteps, n_dim_state)
        filtered_state_covariances : ndarray of shape (n_timesteps, n_dim_state, n_dim_state)
        """
        X, model = self._data_model(X)
        result = self._filter(model, X)
        return result.filtered_means, result.filtered_covariances

    def smooth(self, X):
        """Run the filter and the Rauch-Tung-Striebel smoother: E[z_t | x_1..x_T].

        Parameters
        ----------
        X : array-like of shape (n_timesteps, n_dim_obs)
            As in :meth:`filter`.

        Returns
        -------
        smoothed_state_means : ndarray of shape (n_timesteps, n_dim_state)
        smoothed_state_covariances : ndarray of shape (n_timesteps, n_dim_state, n_dim_state)
        """
        X, model = self._data_model(X)
        result = self._smoother(model, X)
        return result.smoothed_means, result.smoothed_covariances

    def score(self, X, y=None):
        """The filter's log-likelihood of X: the sum of the one-step predictive log-densities.

        Exact on a linear model (the Kalman filter's); otherwise the filter's
        Gaussian approximation, a function of the parameters a user can
        maximise (over covariances or the functions' constants).

        Parameters
        ----------
        X : array-like of shape (n_timesteps, n_dim_obs)
            As in :meth:`filter`.
        y : None
            Ignored (scikit-learn's signature).

        Returns
        -------
        float
        """
        X, model = self._data_model(X)
        return self._filter(model, X).log_likelihood

    def filter_update(
        self,
        filtered_state_mean,
        filtered_state_covariance,
        observation=None,
        transition_function=None,
        transition_covariance=None,
        observation_function=None,
        observation_covariance=None,
    ):
        """One step of the filter from time t to t + 1 (pykalman's ``filter_update``).

        Parameters
        ----------
        filtered_state_mean : array-like of shape (n_dim_state,)
            E[z_t | x_1..x_t].
        filtered_state_covariance : array-like of shape (n_dim_state, n_dim_state)
        observation : array-like of shape (n_dim_obs,), optional
            x_{t+1}; None, NaN or masked entries are missing (None: predict only).
        transition_function, observation_function : callable, optional
            This step's functions; by default the estimator's (which must then
            be one callable, or a sequence of one).
        transition_covariance, observation_covariance : array-like, optional
            This step's Q and R; by default the estimator's.

        Returns
        -------
        next_filtered_state_mean : ndarray of shape (n_dim_state,)
        next_filtered_state_covariance : ndarray of shape (n_dim_state, n_dim_state)
        """
        model = self._model(None if observation is None else np.size(observation))
        replace = {
            "transition_functions": _one_function(
                transition_function, model.transition_functions, "transition_function"
            ),
            "observation_functions": _one_function(
                observation_function, model.observation_functions, "observation_function"
            ),
        }
        for name in (
            "transition_jacobians",
            "observation_jacobians",
            "transition_noise_jacobians",
            "observation_noise_jacobians",
        ):
            if getattr(model, name, None) is not None:
                replace[name] = _one_function(None, getattr(model, name), name[:-1])
        if transition_covariance is not None:
            replace["transition_covariance"] = transition_covariance
        if observation_covariance is not None:
            replace["observation_covariance"] = observation_covariance
        model = model._replace(**replace)
        if observation is None:
            observation = np.full(np.shape(model.observation_covariance)[0], np.nan)
        step = self._step(
            model,
            observation,
            filtered_state_mean=filtered_state_mean,
            filtered_state_covariance=filtered_state_covariance,
            time_index=1,
        )
        return step.filtered_state_mean, step.filtered_state_covariance

    def sample(self, n_timesteps, initial_state=None, random_state=None):
        """Draw states and observations from the model (pykalman's ``sample``).

        The random numbers are drawn in pykalman's order (the initial state,
        then per step the transition noise and the observation noise, each by
        ``multivariate_normal``), so the same seed gives pykalman's sample.

        Parameters
        ----------
        n_timesteps : int
            The number of rows.
        initial_state : array-like of shape (n_dim_state,), optional
            z_1; drawn from N(mu0, Sigma0) when None.
        random_state : int, RandomState or None, optional
            The generator; the estimator's ``random_state`` when None.

        Returns
        -------
        states : ndarray of shape (n_timesteps, n_dim_state)
        observations : ndarray of shape (n_timesteps, n_dim_obs)
        """
        integer_rule(low=1)(n_timesteps, "n_timesteps")
        model = self._model()
        n_state = np.shape(model.transition_covariance)[0]
        n_obs = np.shape(model.observation_covariance)[0]
        rng = check_random_state(self.random_state if random_state is None else random_state)
        mu0 = np.zeros(n_state) if model.initial_state_mean is None else model.initial_state_mean
        Sigma0 = (
            np.eye(n_state)
            if model.initial_state_covariance is None
            else model.initial_state_covariance
        )
        Q = np.asarray(model.transition_covariance, dtype=float)
        R = np.asarray(model.observation_covariance, dtype=float)
        if initial_state is None:
            initial_state = rng.multivariate_normal(
                np.asarray(mu0, float), np.asarray(Sigma0, float)
            )
        states, observations = np.zeros((n_timesteps, n_state)), np.zeros((n_timesteps, n_obs))
        for t in range(n_timesteps):
            if t == 0:
                states[0] = initial_state
            else:
                f = _at(model.transition_functions, t - 1)
                noise = rng.multivariate_normal(np.zeros(n_state), Q)
                states[t] = f(states[t - 1]) + noise if self._additive else f(states[t - 1], noise)
            g = _at(model.observation_functions, t)
            noise = rng.multivariate_normal(np.zeros(n_obs), R)
            observations[t] = g(states[t]) + noise if self._additive else g(states[t], noise)
        return states, observations


def _identity(state):
    return state


def _add_noise(state, noise):
    return state + noise


def _at(functions, t):
    return functions if callable(functions) else functions[t]


def _one_function(given, functions, name):
    if given is not None:
        return given
    if callable(functions):
        return functions
    if len(functions) == 1:
        return functions[0]
    raise ValueError(
        f"The estimator has {len(functions)} {name}s (one per step): pass {name}= for this step."
    )


_PARAMETERS_DOC = """
    Parameters
    ----------
    transition_functions : callable or sequence of callables, optional
        {transition}  Element ``t`` of a sequence moves row ``t`` to row
        ``t + 1``.  Default: {default_transition}.
    observation_functions : callable or sequence of callables, optional
        {observation}  Element ``t`` observes row ``t``.  Default:
        {default_observation}.
    transition_covariance : array-like of shape (n_dim_state, n_dim_state), optional
        Q; the identity when None.
    observation_covariance : array-like of shape (n_dim_obs, n_dim_obs), optional
        R; the identity when None.
    initial_state_mean : array-like of shape (n_dim_state,), optional
        mu0; zeros when None.
    initial_state_covariance : array-like of shape (n_dim_state, n_dim_state), optional
        Sigma0; the identity when None.
    n_dim_state, n_dim_obs : int, optional
        The dimensions when no array gives them (pykalman's).
    random_state : int, RandomState or None, default=None
        The generator of :meth:`sample`.
"""

_VECTORIZED_DOC = """    vectorized : {{"auto", True, False}}, default="auto"
        Whether the functions are called once per step on all {points}, an
        array of shape (n_dim, n_points) with one point a column, returning
        (n_out, n_points).  Code written for one state with ``x[0]``, ``F @ x``,
        ``np.sin(x)`` and ``np.array([...])`` does that unchanged.  "auto" tries
        it on each function's first call and keeps it when the result has
        that shape and agrees with three points computed one at a time; True
        requires it; False always calls the function on one 1-D state.
"""

_SIGMA_DOC = """    alpha, beta : float, default=1.0, 0.0
        The spread of the sigma points and the extra covariance weight of the
        centre (Wan & van der Merwe's scaled unscented transform); the
        defaults are pykalman's fixed values, with which the results are
        pykalman's.  ``alpha=1e-3, beta=2, kappa=0`` is the common choice of
        the literature.
    kappa : float, optional
        The secondary scaling; None is ``3 - N``, ``N`` the dimension of the
        sigma points ({dimension}).
"""


class _UnscentedKalmanFilter(_NonlinearKalmanFilter):
    """The unscented filters' constructor and calls; the subclasses set the noise form."""

    _rules = _UNSCENTED_RULES

    def __init__(
        self,
        transition_functions=None,
        observation_functions=None,
        transition_covariance=None,
        observation_covariance=None,
        initial_state_mean=None,
        initial_state_covariance=None,
        n_dim_state=None,
        n_dim_obs=None,
        random_state=None,
        alpha=1.0,
        beta=0.0,
        kappa=None,
        vectorized="auto",
    ):
        self.transition_functions = transition_functions
        self.observation_functions = observation_functions
        self.transition_covariance = transition_covariance
        self.observation_covariance = observation_covariance
        self.initial_state_mean = initial_state_mean
        self.initial_state_covariance = initial_state_covariance
        self.n_dim_state = n_dim_state
        self.n_dim_obs = n_dim_obs
        self.random_state = random_state
        self.alpha = alpha
        self.beta = beta
        self.kappa = kappa
        self.vectorized = vectorized

    def _options(self):
        return dict(
            additive=self._additive,
            alpha=self.alpha,
            beta=self.beta,
            kappa=self.kappa,
            vectorized=self.vectorized,
        )

    def _filter(self, model, X):
        return unscented_filter(model, X, **self._options())

    def _smoother(self, model, X):
        return unscented_smoother(model, X, **self._options())

    def _step(self, model, x, **kwargs):
        return unscented_filter_step(model, x, **kwargs, **self._options())


class UnscentedKalmanFilter(_UnscentedKalmanFilter):
    __doc__ = (
        """Unscented Kalman filter with general noise (pykalman's ``UnscentedKalmanFilter``).

    The model::

        z_1 ~ N(mu0, Sigma0),  z_{t+1} = f_t(z_t, w_t),  x_t = g_t(z_t, v_t),
        w_t ~ N(0, Q),  v_t ~ N(0, R).

    The noise enters the functions, so the sigma points are those of the
    augmented vector (state, transition noise, observation noise):
    ``2 (2 n + p) + 1`` points per step.  With pykalman's values of ``alpha``,
    ``beta`` and ``kappa`` (the defaults) the filtered and smoothed moments are
    pykalman's; on a linear model they are the Kalman filter's.
"""
        + _PARAMETERS_DOC.format(
            transition="``f(state, noise)``, the next state (shape (n_dim_state,)).",
            default_transition="``state + noise``",
            observation="``g(state, noise)``, the observation (shape (n_dim_obs,)).",
            default_observation="``state + noise``",
        )
        + _SIGMA_DOC.format(dimension="here ``2 n_dim_state + n_dim_obs``")
        + _VECTORIZED_DOC.format(points="sigma points (and their noise parts as a second array)")
        + """
    See Also
    --------
    AdditiveUnscentedKalmanFilter : cheaper, when the noise is additive.
    ExtendedKalmanFilter : the linearised filter.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.lds import UnscentedKalmanFilter
    >>> ukf = UnscentedKalmanFilter(
    ...     lambda z, w: np.sin(z) + w, lambda z, v: z + v,
    ...     transition_covariance=[[0.1]], observation_covariance=[[0.2]])
    >>> states, observations = ukf.sample(20, random_state=0)
    >>> means, covariances = ukf.smooth(observations)
    >>> means.shape, covariances.shape
    ((20, 1), (20, 1, 1))
    >>> bool(np.isfinite(ukf.score(observations)))
    True
    """
    )

    _additive = False


class AdditiveUnscentedKalmanFilter(_UnscentedKalmanFilter):
    __doc__ = (
        """Unscented Kalman filter with additive noise (pykalman's class of that name).

    The model::

        z_1 ~ N(mu0, Sigma0),  z_{t+1} = f_t(z_t) + w_t,  x_t = g_t(z_t) + v_t,
        w_t ~ N(0, Q),  v_t ~ N(0, R).

    The noise covariances are added to the transformed moments, so each
    transform needs only the ``2 n + 1`` sigma points of the state.  With
    pykalman's values of ``alpha``, ``beta`` and ``kappa`` (the defaults) the
    filtered and smoothed moments are pykalman's; on a linear model they are
    the Kalman filter's.
"""
        + _PARAMETERS_DOC.format(
            transition="``f(state)``, the next state's mean (shape (n_dim_state,)).",
            default_transition="the identity",
            observation="``g(state)``, the observation's mean (shape (n_dim_obs,)).",
            default_observation="the identity",
        )
        + _SIGMA_DOC.format(dimension="here ``n_dim_state``")
        + _VECTORIZED_DOC.format(points="sigma points")
        + """
    See Also
    --------
    UnscentedKalmanFilter : noise that enters the functions.
    ExtendedKalmanFilter : the linearised filter of the same model.

    Examples
    --------
    A pendulum observed through the sine of its angle:

    >>> import numpy as np
    >>> from skseq.lds import AdditiveUnscentedKalmanFilter
    >>> dt = 0.05
    >>> def swing(z):  # angle, angular velocity; also takes one state a column
    ...     return np.array([z[0] + dt * z[1], z[1] - dt * 9.81 * np.sin(z[0])])
    >>> ukf = AdditiveUnscentedKalmanFilter(
    ...     swing, lambda z: np.sin(z[:1]), transition_covariance=np.diag([1e-5, 1e-3]),
    ...     observation_covariance=[[0.01]], initial_state_mean=[1.0, 0.0],
    ...     initial_state_covariance=np.eye(2) * 0.01)
    >>> states, observations = ukf.sample(100, random_state=0)
    >>> means, _ = ukf.smooth(observations)
    >>> float(np.sqrt(np.mean((means[:, 0] - states[:, 0]) ** 2))) < 0.1  # angle's RMS error
    True
    """
    )

    _additive = True


class ExtendedKalmanFilter(_NonlinearKalmanFilter):
    __doc__ = (
        """Extended Kalman filter and smoother, with additive or general noise.

    The model of :class:`AdditiveUnscentedKalmanFilter`,
    ``z_{t+1} = f_t(z_t) + w_t`` and ``x_t = g_t(z_t) + v_t``, linearised at
    each step: the prediction ``f(m)`` with covariance ``F P F^T + Q`` (``F``
    the Jacobian of ``f`` at the filtered mean), the correction the Kalman
    filter's with ``H`` the Jacobian of ``g`` at the predicted mean.  With
    ``additive=False``, the model of :class:`UnscentedKalmanFilter`,
    ``z_{t+1} = f_t(z_t, w_t)`` and ``x_t = g_t(z_t, v_t)``, linearised at the
    mean and zero noise: ``f(m, 0)`` with ``F P F^T + L Q L^T`` (``L`` the
    Jacobian of ``f`` in the noise), likewise ``M R M^T`` for the
    observation.  On a linear model it is the Kalman filter.
"""
        + _PARAMETERS_DOC.format(
            transition="``f(state)``, the next state's mean (shape (n_dim_state,)).",
            default_transition="the identity",
            observation="``g(state)``, the observation's mean (shape (n_dim_obs,)).",
            default_observation="the identity",
        )
        + """    transition_jacobians : callable or sequence of callables, optional
        ``J(state)`` of shape (n_dim_state, n_dim_state), the Jacobian of
        ``f_t``; by differences (``jacobian_method``) when None.  With
        ``additive=False`` it takes ``(state, noise)``, evaluated at zero noise.
    observation_jacobians : callable or sequence of callables, optional
        ``J(state)`` of shape (n_dim_obs, n_dim_state), the Jacobian of ``g_t``
        (``J(state, noise)`` with ``additive=False``).
    jacobian_method : {"auto", "complex-step", "central"}, default="auto"
        How a Jacobian that is not given is computed: complex-step
        differentiation (exact to rounding, for code analytic in the state:
        no ``abs``, comparisons or ``np.real``), or central differences.
        "auto": the complex step when the function returns a complex array
        for a complex state without a warning, else central differences.
        With ``additive=False`` the state and the noise are perturbed
        together.
"""
        + _VECTORIZED_DOC.format(points="perturbed states of a Jacobian's differences")
        + """    additive : bool, default=True
        True: ``f(state)`` and ``g(state)`` with the noise added; False: the
        noise enters the functions, ``f(state, noise)`` and ``g(state, noise)``
        (default ``state + noise``), as in :class:`UnscentedKalmanFilter`.
    transition_noise_jacobians : callable or sequence of callables, optional
        With ``additive=False``: ``L(state, noise)`` of shape
        (n_dim_state, n_dim_state), the Jacobian of ``f_t`` in the noise, at
        zero noise; by differences when None.
    observation_noise_jacobians : callable or sequence of callables, optional
        With ``additive=False``: ``M(state, noise)`` of shape
        (n_dim_obs, n_dim_obs), the Jacobian of ``g_t`` in its noise.

    See Also
    --------
    AdditiveUnscentedKalmanFilter : no derivatives, second-order accurate moments.
    UnscentedKalmanFilter : the general noise form without derivatives.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.lds import ExtendedKalmanFilter
    >>> ekf = ExtendedKalmanFilter(
    ...     lambda z: 0.9 * z + np.sin(z), lambda z: z ** 2 / 5,
    ...     transition_covariance=[[0.1]], observation_covariance=[[0.5]],
    ...     initial_state_mean=[1.0])
    >>> states, observations = ekf.sample(50, random_state=0)
    >>> means, covariances = ekf.filter(observations)
    >>> means.shape
    (50, 1)

    Noise that scales with the state (general form, Jacobians by differences):

    >>> ekf = ExtendedKalmanFilter(
    ...     lambda z, w: 0.9 * z + 0.3 * z * w, lambda z, v: z + v,
    ...     transition_covariance=[[0.1]], observation_covariance=[[0.5]],
    ...     initial_state_mean=[1.0], additive=False)
    >>> states, observations = ekf.sample(50, random_state=0)
    >>> bool(np.isfinite(ekf.score(observations)))
    True
    """
    )

    _rules = _EXTENDED_RULES

    def __init__(
        self,
        transition_functions=None,
        observation_functions=None,
        transition_covariance=None,
        observation_covariance=None,
        initial_state_mean=None,
        initial_state_covariance=None,
        n_dim_state=None,
        n_dim_obs=None,
        random_state=None,
        transition_jacobians=None,
        observation_jacobians=None,
        jacobian_method="auto",
        vectorized="auto",
        additive=True,
        transition_noise_jacobians=None,
        observation_noise_jacobians=None,
    ):
        self.transition_functions = transition_functions
        self.observation_functions = observation_functions
        self.transition_covariance = transition_covariance
        self.observation_covariance = observation_covariance
        self.initial_state_mean = initial_state_mean
        self.initial_state_covariance = initial_state_covariance
        self.n_dim_state = n_dim_state
        self.n_dim_obs = n_dim_obs
        self.random_state = random_state
        self.transition_jacobians = transition_jacobians
        self.observation_jacobians = observation_jacobians
        self.jacobian_method = jacobian_method
        self.vectorized = vectorized
        self.additive = additive
        self.transition_noise_jacobians = transition_noise_jacobians
        self.observation_noise_jacobians = observation_noise_jacobians

    @property
    def _additive(self):
        return self.additive

    def _jacobians(self):
        return dict(
            transition_jacobians=self.transition_jacobians,
            observation_jacobians=self.observation_jacobians,
            transition_noise_jacobians=self.transition_noise_jacobians,
            observation_noise_jacobians=self.observation_noise_jacobians,
        )

    def _options(self):
        return dict(
            jacobian_method=self.jacobian_method,
            vectorized=self.vectorized,
            additive=self.additive,
        )

    def _filter(self, model, X):
        return extended_kalman_filter(model, X, **self._options())

    def _smoother(self, model, X):
        return extended_kalman_smoother(model, X, **self._options())

    def _step(self, model, x, **kwargs):
        return extended_kalman_filter_step(model, x, **kwargs, **self._options())
