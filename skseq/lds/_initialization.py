"""The initialisation of the linear-Gaussian SSM's parameters before EM.

Data-driven defaults (factor analysis of the data, an AR(1) fit of the
projected states, the stationary or a diffuse initial state) for every
parameter the user does not give, and the covariance floor that EM's M step
shares with them (doc/user_guide/lgssm.rst).
"""

import warnings

import numpy as np
import scipy.linalg
from sklearn.utils import check_random_state

from ..inference.kalman import LGSSMParameters, check_covariance, check_matrix
from ..inference.subspace import subspace_identification

# The parameters' names, in the order of the inference layer's tuple.
PARAMETER_NAMES = LGSSMParameters._fields
COVARIANCE_NAMES = frozenset(
    {"transition_covariance", "observation_covariance", "initial_state_covariance"}
)
# The initialisations of EM (the ``init`` parameter).
INIT_METHODS = ("subspace", "factor_analysis")
# LinearGaussianSSM(initial_state=...): today's prior N(mu0, Sigma0), or the exact diffuse one.
INITIAL_STATES = ("auto", "diffuse")
INITIAL_STATE_NAMES = frozenset({"initial_state_mean", "initial_state_covariance"})
# The initial values that fix the basis of the state: given any of them, the
# subspace estimate (in its own basis) is not used.
_STATE_BASIS_NAMES = frozenset(PARAMETER_NAMES) - {"observation_covariance", "observation_offset"}

# Eigenvalue floor of the covariances EM returns, in the metric of the data's
# scale (see _floor_covariance): keeps them positive definite (condition
# number <= 1e9 once whitened) when the data determine a direction exactly,
# e.g. one row per feature, or a covariance that goes to zero.
_RELATIVE_COVARIANCE_FLOOR = 1e-9
_ABSOLUTE_COVARIANCE_FLOOR = 1e-12
# The variance of a diffuse initial state, in units of the state's scale: the
# prior of the first state is then flat over any range the data can reach.
_DIFFUSE_VARIANCE = 1e6


def _floor_covariance(covariance, scale):
    """Symmetrise and lift the eigenvalues below the floor; unchanged when well conditioned.

    ``scale`` is the typical variance of each coordinate (a number, or one per
    coordinate): the floor applies to the whitened matrix
    ``C_ij / sqrt(scale_i scale_j)``, whose eigenvalues below
    ``max(1e-9 * largest, 1e-12)`` are lifted to that value.  Since the scale
    is measured on the data, scaling the data by ``c`` scales the result by
    ``c**2``: no absolute floor that would dominate data of a small scale.
    """
    covariance = 0.5 * (covariance + covariance.T)
    root = np.sqrt(np.broadcast_to(np.asarray(scale, dtype=np.float64), covariance.shape[:1]))
    units = np.outer(root, root)
    whitened = covariance / units
    eigenvalues = np.linalg.eigvalsh(whitened)
    floor = max(_RELATIVE_COVARIANCE_FLOOR * eigenvalues[-1], _ABSOLUTE_COVARIANCE_FLOOR)
    if eigenvalues[0] < floor:
        whitened = whitened + (floor - eigenvalues[0]) * np.eye(covariance.shape[0])
        covariance = whitened * units
    return covariance


def _feature_scale(observations):
    """The variance of each feature (ignoring NaN), the data's scale for the floors.

    A feature without spread (constant, or one observed row) takes the largest
    variance of the others; with no spread at all, the mean square of the data
    (1 for data that are all zero).
    """
    observed = ~np.isnan(observations)
    counts = np.maximum(observed.sum(axis=0), 1)
    means = np.where(observed, observations, 0.0).sum(axis=0) / counts
    variance = np.where(observed, (observations - means) ** 2, 0.0).sum(axis=0) / counts
    if np.any(variance > 0):
        return np.where(variance > 0, variance, variance.max())
    mean_square = float(np.mean(np.where(observed, observations, 0.0) ** 2))
    return np.full(observations.shape[1], mean_square if mean_square > 0 else 1.0)


def _state_scale(observation_matrix, feature_scale):
    """The typical variance of a state coordinate in the units ``H`` gives it.

    ``k / (2 trace(H^T D^-1 H))`` with ``D = diag(feature_scale)``: states of
    this variance explain, through ``H``, about half the variance of the data
    (the other half is left to the noise).  Half the data's variance for a
    state observed through ``H = 1``; 1 when ``H`` is zero (the state is not
    seen).
    """
    k = observation_matrix.shape[1]
    precision = np.sum(observation_matrix**2 / feature_scale[:, None])
    return float(k / (2 * precision)) if np.isfinite(precision) and precision > 0 else 1.0


def _default_initial_state(
    transition_matrix, transition_covariance, transition_offset, drift, state_scale
):
    """mu0 and Sigma0 when not given: stationary under the initial F, Q, or diffuse.

    With the spectral radius of F below 1 the state has a stationary
    distribution, N((I - F)^-1 (b + drift), the solution P of P = F P F^T + Q),
    which is what the first state of a sequence observed from the middle of a
    long run follows.  Otherwise (a random walk, a trend), or when that
    variance exceeds the diffuse one, the prior is diffuse: N(0,
    1e6 * state_scale * I), whose mean does not matter.  ``drift`` is G times
    the mean control.
    """
    k = transition_matrix.shape[0]
    diffuse = (np.zeros(k), _DIFFUSE_VARIANCE * state_scale * np.eye(k))
    if np.max(np.abs(np.linalg.eigvals(transition_matrix))) >= 1.0:
        return diffuse
    # A spectral radius within rounding of 1 makes the solve ill-conditioned; its result
    # is then huge or not finite, and the prior diffuse (below): no warning to pass on.
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", scipy.linalg.LinAlgWarning)
        covariance = scipy.linalg.solve_discrete_lyapunov(transition_matrix, transition_covariance)
        mean = np.linalg.solve(np.eye(k) - transition_matrix, transition_offset + drift)
    if not (np.all(np.isfinite(covariance)) and np.all(np.isfinite(mean))):
        return diffuse
    covariance = _floor_covariance(covariance, state_scale)
    if np.linalg.eigvalsh(covariance)[-1] > _DIFFUSE_VARIANCE * state_scale:
        return diffuse
    return mean, covariance


class LGSSMInitialization:
    """The initialisation of :class:`~skseq.lds.LinearGaussianSSM` (a mixin).

    ``_initialize`` is the :class:`~skseq.base.BaseEM` hook: the user's
    ``*_init`` values, data-driven defaults for the rest.
    """

    def _with_subspace_estimate(self, given, observations, offsets):
        """The initial values ``given``, completed by the subspace estimate of F, H, Q, R.

        :func:`~skseq.inference.subspace.subspace_identification` (canonical
        variate analysis) estimates F, H, Q, R in its own state basis, so it
        is used only when no initial value that fixes the basis is given (only
        R and d may be), and only without controls; nor when the data cannot
        determine it (fewer complete windows than it needs).  In these cases
        ``given`` is returned as it is: the factor-analysis defaults apply.
        The estimate's warning that the data support fewer states is not
        passed on: EM starts from it all the same.
        """
        if self.n_controls_ > 0 or any(given[name] is not None for name in _STATE_BASIS_NAMES):
            return given
        try:
            with warnings.catch_warnings():
                # "fewer states than n_components": EM starts from the estimate all the same
                warnings.simplefilter("ignore", UserWarning)
                estimate = subspace_identification(
                    observations, self.n_components, lengths=np.diff(offsets)
                )
        except ValueError:
            return given
        given = dict(given)
        for name in (
            "transition_matrix",
            "observation_matrix",
            "transition_covariance",
            "observation_covariance",
        ):
            if given[name] is None:
                given[name] = getattr(estimate, name)
        return given

    def _given_initial_values(self, n_features, n_controls):
        """The user's initial values, validated (None where not given)."""
        k = self.n_components
        shapes = {
            "transition_matrix": (k, k),
            "observation_matrix": (n_features, k),
            "transition_offset": (k,),
            "observation_offset": (n_features,),
            "control_matrix": (k, n_controls),
            "initial_state_mean": (k,),
        }
        if n_controls == 0 and self.control_matrix_init is not None:
            if np.size(self.control_matrix_init) > 0:
                raise ValueError(
                    "control_matrix_init is given but fit received no controls; pass controls=."
                )
        given = {}
        for name in PARAMETER_NAMES:
            value = getattr(self, f"{name}_init")
            if value is None:
                given[name] = None
            elif name in COVARIANCE_NAMES:
                dim = n_features if name == "observation_covariance" else k
                given[name] = check_covariance(value, f"{name}_init", dim)
            else:
                given[name] = check_matrix(value, f"{name}_init", shapes[name])
        return given

    def _initialize(self, X, offsets, random_state):
        """Set every parameter: the user's initial values, data-driven defaults for the rest.

        ``X`` is the stacked ``[X, controls]`` array.  The defaults follow
        factor analysis: d = the feature means; H, R = probabilistic PCA of
        the (mean-imputed) data, H perturbed by 10% noise; the states are
        projected by the factor-analysis posterior mean E[z | x] under the
        prior N(0, I); F, Q = least-squares AR(1) fit of the projected states
        within sequences, F's spectral radius capped at 0.99; b = 0, G = 0;
        mu0, Sigma0 = the stationary distribution of the state under those
        F, Q, b, G, or a diffuse prior when F has no stationary distribution
        (:func:`_default_initial_state`).

        It also fixes the scales of the covariance floors for the whole fit:
        the variance of each feature, and the state scale implied through
        the initial H (:func:`_state_scale`).
        """
        n_features = self.n_features_in_
        observations = X[:, :n_features]
        k = self.n_components
        given = self._given_initial_values(n_features, self.n_controls_)
        if self.init == "subspace":
            given = self._with_subspace_estimate(given, observations, offsets)
        rng = check_random_state(random_state)

        observed = ~np.isnan(observations)
        counts = observed.sum(axis=0)
        sums = np.where(observed, observations, 0.0).sum(axis=0)
        # (the data's scale is checked with the sequences, check_data_scale)
        feature_means = np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)
        observation_offset = (
            given["observation_offset"]
            if given["observation_offset"] is not None
            else feature_means
        )
        centred = np.where(observed, observations - observation_offset, 0.0)
        n_samples = observations.shape[0]
        data_covariance = centred.T @ centred / n_samples
        feature_scale = _feature_scale(observations)
        scale = np.trace(data_covariance) / n_features
        if not scale > 0:
            scale = float(np.mean(feature_scale))

        eigenvalues, eigenvectors = np.linalg.eigh(data_covariance)
        eigenvalues, eigenvectors = eigenvalues[::-1], eigenvectors[:, ::-1]
        n_kept = min(k, n_features)
        noise = eigenvalues[n_kept:].mean() if n_features > n_kept else 0.1 * scale
        noise = max(noise, 1e-3 * scale)
        if given["observation_matrix"] is not None:
            observation_matrix = given["observation_matrix"]
            # The state is in the units this H gives it.
            state_scale = _state_scale(observation_matrix, feature_scale)
        else:
            # Loadings for standardised states.
            state_scale = 1.0
            observation_matrix = np.zeros((n_features, k))
            observation_matrix[:, :n_kept] = eigenvectors[:, :n_kept] * np.sqrt(
                np.maximum(eigenvalues[:n_kept] - noise, 1e-3 * scale)
            )
            observation_matrix += 0.1 * np.sqrt(scale) * rng.standard_normal((n_features, k))
        if given["observation_covariance"] is not None:
            observation_covariance = given["observation_covariance"]
        else:
            explained = state_scale * np.sum(observation_matrix**2, axis=1)
            unexplained = np.diag(data_covariance) - explained
            observation_covariance = np.diag(np.maximum(unexplained, 1e-2 * feature_scale))
        self._covariance_scales = (feature_scale, state_scale)

        # Factor-analysis posterior of the states under z ~ N(0, state_scale I).
        precision_loadings = np.linalg.solve(observation_covariance, observation_matrix)
        posterior_precision = np.eye(k) / state_scale + observation_matrix.T @ precision_loadings
        posterior_covariance = np.linalg.inv(posterior_precision)
        posterior_covariance = 0.5 * (posterior_covariance + posterior_covariance.T)
        states = centred @ precision_loadings @ posterior_covariance

        has_previous = np.ones(n_samples, dtype=bool)
        has_previous[offsets[:-1]] = False
        previous = states[np.flatnonzero(has_previous) - 1]
        current = states[has_previous]
        n_pairs = current.shape[0]
        if given["transition_matrix"] is not None:
            transition_matrix = given["transition_matrix"]
        elif n_pairs > 0:
            gram = previous.T @ previous + n_pairs * posterior_covariance
            transition_matrix = np.linalg.solve(gram, previous.T @ current).T
            radius = np.max(np.abs(np.linalg.eigvals(transition_matrix)))
            if radius > 0.99:
                transition_matrix *= 0.99 / radius
        else:
            transition_matrix = np.zeros((k, k))
        if given["transition_covariance"] is not None:
            transition_covariance = given["transition_covariance"]
        elif n_pairs > 0:
            residual = current - previous @ transition_matrix.T
            transition_covariance = _floor_covariance(
                residual.T @ residual / n_pairs + posterior_covariance, state_scale
            )
        else:
            transition_covariance = np.eye(k) * state_scale

        def given_or(name, default):
            return given[name] if given[name] is not None else default

        transition_offset = given_or("transition_offset", np.zeros(k))
        control_matrix = given_or("control_matrix", np.zeros((k, self.n_controls_)))
        initial_state_mean, initial_state_covariance = _default_initial_state(
            transition_matrix,
            transition_covariance,
            transition_offset,
            control_matrix @ X[:, n_features:].mean(axis=0),
            state_scale,
        )
        self.transition_matrix_ = transition_matrix
        self.observation_matrix_ = observation_matrix
        self.transition_covariance_ = transition_covariance
        self.observation_covariance_ = observation_covariance
        self.transition_offset_ = transition_offset
        self.observation_offset_ = observation_offset
        self.control_matrix_ = control_matrix
        if self.initial_state == "diffuse":
            # the exact diffuse initial state: P_inf = I, the prior's mean and P_* drop out
            for name in INITIAL_STATE_NAMES:
                if given[name] is not None:
                    raise ValueError(
                        f"{name}_init was given, but initial_state='diffuse' makes the first "
                        "state's prior flat (mu0 and Sigma0 drop out): leave it None, or use "
                        "initial_state='auto'."
                    )
            initial_state_mean, initial_state_covariance = np.zeros(k), np.zeros((k, k))
        self.initial_state_mean_ = given_or("initial_state_mean", initial_state_mean)
        self.initial_state_covariance_ = given_or(
            "initial_state_covariance", initial_state_covariance
        )
