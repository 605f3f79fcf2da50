"""``UnobservedComponents``: structural time-series models by exact maximum likelihood.

statsmodels' ``UnobservedComponents`` specification (level and trend by
name or by flags, a dummy seasonal, trigonometric seasonals, a cycle, an
autoregressive component, an irregular and regressors), built as a
linear-Gaussian state-space model with structure and fitted on the
inference layer's exact maximum-likelihood machinery
(:mod:`skseq.inference.kalman_mle`): the structure is a declared
parameterization (:class:`~skseq.inference.kalman_mle.SharedLogVariances`
for the variances, :class:`~skseq.inference.kalman_mle.CycleRotation` and
:class:`~skseq.inference.kalman_mle.StationaryAR` inside the transition
matrix, free regression coefficients in the control matrix, the stationary
initial covariance of the autoregressive part), maximised by
:func:`~skseq.inference.kalman_mle.lgssm_maximum_likelihood` with the
analytic gradient, standard errors by
:func:`~skseq.inference.kalman_mle.lgssm_parameter_covariance`.  There is no
second filter and no second optimiser here (user guide, "Structural models
for statsmodels users").
"""

import math
from typing import NamedTuple

import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.stats
from sklearn.base import BaseEstimator, DensityMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import Bunch, check_random_state
from sklearn.utils.validation import check_is_fitted

from .._sequences import validate_sequences
from .._validation import (
    check_bool_param,
    check_parameters,
    check_scalar_param,
    option_rule,
    optional,
    real_rule,
)
from ..base import warn_user
from ..inference.kalman import (
    LGSSMParameters,
    check_controls,
    kalman_filter,
    kalman_forecast,
    kalman_smoother,
    sample_lgssm,
)
from ..inference.kalman_mle import (
    CycleRotation,
    FreeEntries,
    LGSSMParameterization,
    SharedLogVariances,
    StationaryAR,
    Submatrices,
    lgssm_maximum_likelihood,
    lgssm_parameter_covariance,
)

__all__ = ["UnobservedComponents"]

COV_TYPES = ("opg", "oim")

# statsmodels' level/trend strings: (irregular, level, stochastic_level, trend,
# stochastic_trend), by the full name; the abbreviations point at the full names.
TREND_SPECIFICATIONS = {
    "irregular": (True, False, False, False, False),
    "fixed intercept": (False, True, False, False, False),
    "deterministic constant": (True, True, False, False, False),
    "local level": (True, True, True, False, False),
    "random walk": (False, True, True, False, False),
    "fixed slope": (False, True, False, True, False),
    "deterministic trend": (True, True, False, True, False),
    "local linear deterministic trend": (True, True, True, True, False),
    "random walk with drift": (False, True, True, True, False),
    "local linear trend": (True, True, True, True, True),
    "smooth trend": (True, True, False, True, True),
    "random trend": (False, True, False, True, True),
}
TREND_ABBREVIATIONS = {
    "ntrend": "irregular",
    "dconstant": "deterministic constant",
    "llevel": "local level",
    "rwalk": "random walk",
    "dtrend": "deterministic trend",
    "lldtrend": "local linear deterministic trend",
    "rwdrift": "random walk with drift",
    "lltrend": "local linear trend",
    "strend": "smooth trend",
    "rtrend": "random trend",
}

# A deterministic component has no noise; the Kalman layer takes positive
# definite covariances, so its variance is this fraction of the data's variance
# (its effect on the log-likelihood is far below the optimiser's tolerance).
DETERMINISTIC_VARIANCE = 1e-12


class _Structure(NamedTuple):
    """The state-space form of a specification (see ``UnobservedComponents._structure``)."""

    n_state: int
    observation: np.ndarray  # (n_state,) the design row
    transition: np.ndarray  # (n_state, n_state) the fixed part of F
    variance_names: list  # the names of the state variances, in statsmodels' order
    groups: np.ndarray  # (n_state,) the variance of each state coordinate (-1: none)
    cycle: slice  # the cycle's coordinates (empty without a cycle)
    ar: slice  # the AR coordinates
    regression: int  # the coordinate of x_t' beta + irregular (-1 without regressors)
    diffuse: np.ndarray  # (n_state,) bool
    stationary: np.ndarray  # (n_state,) bool
    components: dict  # name -> weight vector over the state
    param_names: list  # statsmodels' order


def _hp_trend(y, smoothing=1600.0):
    """The Hodrick-Prescott trend (a banded solve of (I + smoothing D'D) t = y)."""
    n = y.size
    if n < 3:
        return y.copy()
    # D'D of second differences is pentadiagonal: upper bands 1, -4, 6, -4, 1.
    diagonal = np.full(n, 6.0)
    diagonal[[0, -1]] = 1.0
    diagonal[[1, -2]] = 5.0
    first = np.full(n - 1, -4.0)
    first[[0, -1]] = -2.0
    bands = np.zeros((3, n))
    bands[2] = 1.0 + smoothing * diagonal
    bands[1, 1:] = smoothing * first
    bands[0, 2:] = smoothing
    return scipy.linalg.solveh_banded(bands, y)


class UnobservedComponents(DensityMixin, BaseEstimator):
    """Structural time-series model (statsmodels' UnobservedComponents) by exact MLE.

    The observation is the sum of the chosen components::

        y_t = mu_t + gamma_t + c_t + a_t + x_t' beta + eps_t,   eps_t ~ N(0, sigma2.irregular)
        mu_t = mu_{t-1} + nu_{t-1} + eta_t                      (level, sigma2.level)
        nu_t = nu_{t-1} + zeta_t                                (trend, sigma2.trend)

    with a dummy seasonal ``gamma_t = -sum_{j=1}^{s-1} gamma_{t-j} + omega_t``,
    trigonometric seasonals (``freq_seasonal``), a cycle ``c_t`` (a rotation by
    ``frequency.cycle`` damped by ``damping.cycle``), an AR(p) component
    ``a_t`` and regressors ``x_t`` (``controls``), exactly statsmodels'
    definitions, parameter names and order.  The parameters are estimated
    by maximising the exact log-likelihood with L-BFGS-B and its analytic
    gradient (the inference layer's :mod:`~skseq.inference.kalman_mle`);
    the variances are kept positive, the damping in (0, 1), the frequency
    within its bounds and the AR coefficients stationary by transforms.

    The initial state is statsmodels' default: approximately diffuse
    (variance ``approximate_diffuse_variance``) for every component but the
    autoregressive one, which starts from its stationary distribution, and
    the first rows (as many as diffuse state coordinates) left out of the
    log-likelihood (statsmodels' ``loglikelihood_burn``), so that
    ``log_likelihood_`` is statsmodels' ``llf``.

    Parameters
    ----------
    level : bool or str, default=False
        Whether there is a level, or the level/trend specification by
        statsmodels' name: "irregular" ("ntrend"), "fixed intercept",
        "deterministic constant" ("dconstant"), "local level" ("llevel"),
        "random walk" ("rwalk"), "fixed slope", "deterministic trend"
        ("dtrend"), "local linear deterministic trend" ("lldtrend"),
        "random walk with drift" ("rwdrift"), "local linear trend"
        ("lltrend"), "smooth trend" ("strend"), "random trend" ("rtrend").
        A string overrides ``irregular``, ``trend``, ``stochastic_level`` and
        ``stochastic_trend``.
    trend : bool, default=False
        Whether there is a slope (a trend without a level gets a
        deterministic level, with a warning, as in statsmodels).
    seasonal : int, optional
        The period s >= 2 of a dummy seasonal (s - 1 states).
    freq_seasonal : list of dict, optional
        Trigonometric seasonals, ``{"period": p, "harmonics": h}`` each (h
        defaults to floor(p / 2)); 2h states each.
    cycle : bool, default=False
    autoregressive : int, optional
        The order p of an AR component.
    irregular : bool, default=False
    stochastic_level, stochastic_trend, stochastic_seasonal, stochastic_cycle : bool
        Whether the component has its own disturbance variance
        (``stochastic_seasonal`` defaults to True, the others to False).
    stochastic_freq_seasonal : list of bool, optional
        One per ``freq_seasonal`` entry (default: all True).
    damped_cycle : bool, default=False
        Estimate ``damping.cycle`` in (0, 1); otherwise the cycle is undamped.
    cycle_period_bounds : (float, float), optional
        Bounds of the cycle's period in rows (statsmodels' default without a
        date index: (2, inf), a frequency in (0, pi)).
    fixed_params : dict, optional
        Parameters held at given values, by name (``{"sigma2.irregular":
        0.0}``; the AR coefficients all or none, the cycle's frequency and
        damping together).
    cov_type : {"opg", "oim"} or None, default="opg"
        Standard errors from the outer product of the per-row scores
        (statsmodels' default) or the observed information; None: none.
    n_iter : int, default=500
        L-BFGS-B iterations at most.
    tol : float, default=1e-6
        L-BFGS-B's tolerance in log-likelihood
        (:func:`~skseq.inference.kalman_mle.lgssm_maximum_likelihood`).
    approximate_diffuse_variance : float, default=1e6
        The initial variance of the nonstationary state coordinates
        (statsmodels' ``initial_variance``).
    use_exact_diffuse : bool, default=False
        Koopman's exact diffuse initial state for the nonstationary
        coordinates instead (statsmodels' ``use_exact_diffuse=True``): the
        diffuse log-likelihood, no burn (the OPG standard errors then
        difference the rows' log predictive densities, as statsmodels does).

    Attributes
    ----------
    params_ : dict
        The estimates by statsmodels' names, in statsmodels' order
        ("sigma2.irregular", "sigma2.level", ..., "beta.x1").
    bse_ : dict
        Their standard errors (when ``cov_type`` is not None); NaN for a
        parameter on the boundary (``boundary_params_``).
    cov_params_ : ndarray of shape (n_free, n_free)
        The covariance of the estimated (not fixed) parameters, in
        ``param_names_`` order restricted to them.
    boundary_params_ : list of str
        The estimated variances that are 0 at the maximum (held at a floor of
        1e-12 times the data's variance: the component is deterministic).
        The normal approximation does not hold on the boundary of the
        parameter space, nor is the score 0 there: their standard errors are
        NaN, with a warning, and the others' are those of the model with
        them held at 0 (statsmodels' standard errors with ``fix_params``;
        statsmodels' own fit reports a number for them, from the curvature
        at a point that is not a stationary point).
    param_names_ : list of str
    log_likelihood_ : float
        The maximised log-likelihood (statsmodels' ``llf``).
    n_iter_ : int
    converged_ : bool
    nobs_effective_ : int
        Rows that count in the log-likelihood (after the burn).
    n_features_in_ : int
        1.
    n_controls_ : int
        The number of regressors.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.datasets import load_nile
    >>> from skseq.lds import UnobservedComponents
    >>> y = load_nile().data[:, 0]
    >>> model = UnobservedComponents("local level").fit(y)
    >>> list(model.params_)
    ['sigma2.irregular', 'sigma2.level']
    >>> # Durbin & Koopman's maximum-likelihood estimates
    >>> bool(np.allclose(list(model.params_.values()), [15099, 1469.1], rtol=0.01))
    True
    >>> forecast = model.forecast(3)
    >>> forecast.mean.shape, bool(np.all(forecast.lower < forecast.upper))
    ((3,), True)
    """

    __metadata_request__fit = {"sequence_ids": True, "controls": True}
    __metadata_request__score = {"sequence_ids": True, "controls": True}

    def __init__(
        self,
        level=False,
        trend=False,
        seasonal=None,
        freq_seasonal=None,
        cycle=False,
        autoregressive=None,
        irregular=False,
        stochastic_level=False,
        stochastic_trend=False,
        stochastic_seasonal=True,
        stochastic_freq_seasonal=None,
        stochastic_cycle=False,
        damped_cycle=False,
        cycle_period_bounds=None,
        *,
        fixed_params=None,
        cov_type="opg",
        n_iter=500,
        tol=1e-6,
        approximate_diffuse_variance=1e6,
        use_exact_diffuse=False,
    ):
        self.level = level
        self.trend = trend
        self.seasonal = seasonal
        self.freq_seasonal = freq_seasonal
        self.cycle = cycle
        self.autoregressive = autoregressive
        self.irregular = irregular
        self.stochastic_level = stochastic_level
        self.stochastic_trend = stochastic_trend
        self.stochastic_seasonal = stochastic_seasonal
        self.stochastic_freq_seasonal = stochastic_freq_seasonal
        self.stochastic_cycle = stochastic_cycle
        self.damped_cycle = damped_cycle
        self.cycle_period_bounds = cycle_period_bounds
        self.fixed_params = fixed_params
        self.cov_type = cov_type
        self.n_iter = n_iter
        self.tol = tol
        self.approximate_diffuse_variance = approximate_diffuse_variance
        self.use_exact_diffuse = use_exact_diffuse

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.input_tags.one_d_array = True  # one series: y of shape (n_samples,)
        return tags

    # -- the specification -------------------------------------------------------

    def _parameter_rules(self):
        return {
            "cov_type": optional(option_rule(*COV_TYPES)),
            "approximate_diffuse_variance": real_rule(low=0.0, low_open=True),
        }

    def _specification(self):
        """The resolved flags (statsmodels' rules: a string level overrides the flags,
        a trend without a level gets a deterministic level, a model without a
        stochastic element gets an irregular), validated."""
        check_parameters(self, self._parameter_rules())
        for name in (
            "trend",
            "cycle",
            "irregular",
            "stochastic_level",
            "stochastic_trend",
            "stochastic_seasonal",
            "stochastic_cycle",
            "damped_cycle",
            "use_exact_diffuse",
        ):
            check_bool_param(getattr(self, name), name)
        spec = {
            "irregular": bool(self.irregular),
            "level": False,
            "stochastic_level": bool(self.stochastic_level),
            "trend": bool(self.trend),
            "stochastic_trend": bool(self.stochastic_trend),
        }
        if isinstance(self.level, str):
            name = TREND_ABBREVIATIONS.get(self.level, self.level)
            if name not in TREND_SPECIFICATIONS:
                raise ValueError(
                    f"level={self.level!r} is not a level/trend specification; valid "
                    f"names are {sorted(TREND_SPECIFICATIONS) + sorted(TREND_ABBREVIATIONS)}."
                )
            keys = ("irregular", "level", "stochastic_level", "trend", "stochastic_trend")
            spec.update(zip(keys, TREND_SPECIFICATIONS[name]))
        else:
            check_bool_param(self.level, "level")
            spec["level"] = bool(self.level)
        spec["stochastic_level"] &= spec["level"]
        spec["stochastic_trend"] &= spec["trend"]
        if spec["trend"] and not spec["level"]:
            warn_user(
                "UnobservedComponents: a trend without a level; a deterministic level "
                "is added (as in statsmodels)."
            )
            spec["level"], spec["stochastic_level"] = True, False
        seasonal = 0 if self.seasonal is None else self.seasonal
        check_scalar_param(seasonal, "seasonal", "int", low=0)
        if seasonal == 1:
            raise ValueError("seasonal must be a period of at least 2 (or None), got 1.")
        spec["seasonal"] = int(seasonal)
        spec["stochastic_seasonal"] = bool(self.stochastic_seasonal) and seasonal > 0
        spec["freq_seasonal"] = self._freq_seasonal()
        spec["cycle"] = bool(self.cycle)
        spec["stochastic_cycle"] = bool(self.stochastic_cycle) and spec["cycle"]
        spec["damped_cycle"] = bool(self.damped_cycle) and spec["cycle"]
        order = 0 if self.autoregressive is None else self.autoregressive
        check_scalar_param(order, "autoregressive", "int", low=0)
        spec["autoregressive"] = int(order)
        stochastic = (
            spec["irregular"]
            or spec["stochastic_level"]
            or spec["stochastic_trend"]
            or spec["stochastic_seasonal"]
            or any(stochastic for _, _, stochastic in spec["freq_seasonal"])
            or spec["stochastic_cycle"]
            or spec["autoregressive"] > 0
        )
        if not stochastic:
            warn_user(
                "UnobservedComponents: the model has no stochastic element; an irregular "
                "component is added (as in statsmodels)."
            )
            spec["irregular"] = True
        spec["frequency_bounds"] = self._frequency_bounds()
        return spec

    def _freq_seasonal(self):
        """``[(period, harmonics, stochastic), ...]`` from ``freq_seasonal``."""
        if not self.freq_seasonal:
            if self.stochastic_freq_seasonal:
                raise ValueError("stochastic_freq_seasonal was given without freq_seasonal.")
            return []
        if isinstance(self.freq_seasonal, dict) or not all(
            isinstance(entry, dict) for entry in self.freq_seasonal
        ):
            raise TypeError(
                'freq_seasonal must be a list of dicts {"period": p, "harmonics": h}, got '
                f"{self.freq_seasonal!r}."
            )
        stochastic = self.stochastic_freq_seasonal
        if stochastic is None:
            stochastic = [True] * len(self.freq_seasonal)
        if len(stochastic) != len(self.freq_seasonal):
            raise ValueError(
                "stochastic_freq_seasonal must have one entry per freq_seasonal entry: "
                f"{len(stochastic)} against {len(self.freq_seasonal)}."
            )
        entries = []
        for entry, is_stochastic in zip(self.freq_seasonal, stochastic):
            unknown = set(entry) - {"period", "harmonics"}
            if "period" not in entry or unknown:
                raise ValueError(
                    f'each freq_seasonal entry is {{"period": p, "harmonics": h}}, got {entry!r}.'
                )
            period = entry["period"]
            check_scalar_param(period, "freq_seasonal period", "real", low=2.0)
            harmonics = entry.get("harmonics", int(np.floor(period / 2)))
            check_scalar_param(harmonics, "freq_seasonal harmonics", "int", low=1)
            check_bool_param(is_stochastic, "stochastic_freq_seasonal")
            entries.append((period, int(harmonics), bool(is_stochastic)))
        return entries

    def _frequency_bounds(self):
        """The cycle's frequency interval from ``cycle_period_bounds`` (default (2, inf):
        statsmodels' without a date index)."""
        bounds = (2.0, np.inf) if self.cycle_period_bounds is None else self.cycle_period_bounds
        try:
            low, high = (float(bound) for bound in bounds)
        except (TypeError, ValueError):
            raise TypeError(
                f"cycle_period_bounds must be two numbers, got {self.cycle_period_bounds!r}."
            ) from None
        if not (2.0 <= low < high):
            raise ValueError(
                "cycle_period_bounds must satisfy 2 <= low < high (periods in rows), got "
                f"{self.cycle_period_bounds!r}."
            )
        return (2 * np.pi / high, 2 * np.pi / low)

    def _structure(self, spec, n_controls, control_names=None):
        """The state-space form: state coordinates in statsmodels' order (level, trend,
        seasonal, trigonometric seasonals, cycle, AR), then, with regressors, one
        coordinate x_t' beta + eps_t (the regression and the irregular, driven by the
        controls), or a dummy coordinate when there is no state at all."""
        level_trend = []
        if spec["level"]:
            level_trend.append(("level", "sigma2.level" if spec["stochastic_level"] else None))
        if spec["trend"]:
            level_trend.append(("trend", "sigma2.trend" if spec["stochastic_trend"] else None))
        groups_by_state, matrices = [], []
        component_states = {}
        if level_trend:
            size = len(level_trend)
            matrices.append(np.triu(np.ones((size, size))) if size == 2 else np.ones((1, 1)))
            for offset, (name, variance) in enumerate(level_trend):
                component_states[name] = [offset]
                groups_by_state.append(variance)
        start = len(groups_by_state)
        if spec["seasonal"]:
            size = spec["seasonal"] - 1
            block = np.zeros((size, size))
            block[0] = -1.0
            block[np.arange(1, size), np.arange(size - 1)] = 1.0
            matrices.append(block)
            groups_by_state += ["sigma2.seasonal" if spec["stochastic_seasonal"] else None]
            groups_by_state += [None] * (size - 1)
            component_states["seasonal"] = [start]
        for period, harmonics, stochastic in spec["freq_seasonal"]:
            start = len(groups_by_state)
            name = f"freq_seasonal_{period!r}({harmonics!r})"
            for j in range(1, harmonics + 1):
                angle = 2 * np.pi * j / period
                cos, sin = np.cos(angle), np.sin(angle)
                matrices.append(np.array([[cos, sin], [-sin, cos]]))
            groups_by_state += [f"sigma2.{name}" if stochastic else None] * (2 * harmonics)
            component_states[name] = list(range(start, start + 2 * harmonics, 2))
        cycle_start = len(groups_by_state)
        if spec["cycle"]:
            matrices.append(np.eye(2))  # the rotation is a parameter block
            groups_by_state += ["sigma2.cycle" if spec["stochastic_cycle"] else None] * 2
            component_states["cycle"] = [cycle_start]
        cycle = slice(cycle_start, len(groups_by_state))
        ar_start = len(groups_by_state)
        p = spec["autoregressive"]
        if p:
            block = np.zeros((p, p))
            block[np.arange(1, p), np.arange(p - 1)] = 1.0
            matrices.append(block)
            groups_by_state += ["sigma2.ar"] + [None] * (p - 1)
            component_states["autoregressive"] = [ar_start]
        ar = slice(ar_start, len(groups_by_state))
        n_structural = len(groups_by_state)
        regression = -1
        if n_controls:
            regression = n_structural
            matrices.append(np.zeros((1, 1)))
            groups_by_state.append("sigma2.irregular" if spec["irregular"] else None)
        elif n_structural == 0:
            matrices.append(np.zeros((1, 1)))  # statsmodels' unused state
            groups_by_state.append(None)
        n_state = len(groups_by_state)
        transition = scipy.linalg.block_diag(*matrices)
        observation = np.zeros(n_state)
        for name, states in component_states.items():
            if name != "trend":  # the slope is not observed
                observation[states] = 1.0
        if regression >= 0:
            observation[regression] = 1.0
        components = {}
        for name, states in component_states.items():
            weights = np.zeros(n_state)
            weights[states] = 1.0
            components[name] = weights
        variance_names = []
        for name in groups_by_state:
            if name is not None and name not in variance_names and name != "sigma2.irregular":
                variance_names.append(name)
        diffuse = np.zeros(n_state, dtype=bool)
        diffuse[: min(ar_start, n_structural)] = True
        stationary = np.zeros(n_state, dtype=bool)
        stationary[ar] = True
        param_names = (["sigma2.irregular"] if spec["irregular"] else []) + variance_names
        if spec["cycle"]:
            param_names.append("frequency.cycle")
            if spec["damped_cycle"]:
                param_names.append("damping.cycle")
        param_names += [f"ar.L{i}" for i in range(1, p + 1)]
        if control_names is None:
            control_names = [f"x{i}" for i in range(1, n_controls + 1)]
        param_names += [f"beta.{name}" for name in control_names]
        return _Structure(
            n_state,
            observation,
            transition,
            variance_names,
            np.array(groups_by_state, dtype=object),
            cycle,
            ar,
            regression,
            diffuse,
            stationary,
            components,
            param_names,
        )

    def _initial_state(self, structure, scale):
        """THE initial state (the one place that says it): ``(diffuse, stationary,
        mean, covariance)`` -- the mask of the diffuse coordinates, the mask of
        those started from their stationary distribution (the AR part, whose
        covariance the parameterization keeps at the stationary solution), and
        the prior of the first state: approximately diffuse, variance
        ``approximate_diffuse_variance`` on the diffuse coordinates, or, with
        ``use_exact_diffuse``, P_* = 0 there (the exact diffuse filter's
        P_inf is the mask, :meth:`_diffuse`)."""
        diffuse_variance = 0.0 if self.use_exact_diffuse else self.approximate_diffuse_variance
        covariance = np.diag(np.where(structure.diffuse, float(diffuse_variance), scale))
        return structure.diffuse, structure.stationary, np.zeros(structure.n_state), covariance

    def _diffuse(self, structure):
        """The ``diffuse=`` of the Kalman layer: the mask of the exact diffuse
        coordinates, or None (the approximate diffuse prior, no argument)."""
        if self.use_exact_diffuse and structure.diffuse.any():
            return structure.diffuse
        return None

    def _burn(self, structure):
        """Rows left out of the log-likelihood: one per diffuse coordinate (statsmodels'
        ``loglikelihood_burn`` of its approximate diffuse initialisation), none under
        the exact diffuse filter (its diffuse log-likelihood)."""
        if self.use_exact_diffuse:
            return 0
        return int(np.count_nonzero(structure.diffuse))

    # -- the parameterization ---------------------------------------------------

    def _check_fixed(self, structure):
        fixed = {} if self.fixed_params is None else self.fixed_params
        if not isinstance(fixed, dict):
            raise TypeError(f"fixed_params must be a dict of name: value, got {fixed!r}.")
        unknown = sorted(set(fixed) - set(structure.param_names))
        if unknown:
            raise ValueError(
                f"fixed_params names unknown parameter(s) {unknown}; this model's "
                f"parameters are {structure.param_names}."
            )
        values = {}
        for name, value in fixed.items():
            check_scalar_param(value, f"fixed_params[{name!r}]", "real")
            if name.startswith("sigma2.") and value < 0:
                raise ValueError(f"fixed_params[{name!r}] is a variance: >= 0, got {value}.")
            values[name] = float(value)
        ar_names = [name for name in structure.param_names if name.startswith("ar.L")]
        if 0 < len(set(ar_names) & set(values)) < len(ar_names):
            raise ValueError("fix all the autoregressive coefficients or none.")
        cycle_names = [
            name for name in ("frequency.cycle", "damping.cycle") if name in structure.param_names
        ]
        if 0 < len(set(cycle_names) & set(values)) < len(cycle_names):
            raise ValueError("fix the cycle's frequency and damping together, or neither.")
        if "damping.cycle" in values and not 0 < values["damping.cycle"] < 1:
            raise ValueError("fixed_params['damping.cycle'] must be in (0, 1).")
        if ar_names and ar_names[0] in values:
            StationaryAR().bind(np.zeros((1, len(ar_names))), "ar").unconstrained(
                np.array([[values[name] for name in ar_names]])
            )
        return values

    def _parameterization(self, structure, spec, start, fixed, floor):
        """The declared map from the unconstrained vector to the LGSSM's parameters,
        with the template at ``start`` (a dict of statsmodels' names)."""
        values = {**start, **fixed}
        k = structure.n_state
        variance_of = {
            name: max(values[name], floor) for name in values if name.startswith("sigma2.")
        }
        state_variances = np.array(
            [floor if name is None else variance_of[name] for name in structure.groups]
        )
        free_variances = [name for name in structure.variance_names if name not in fixed]
        irregular_in_state = structure.regression >= 0 and spec["irregular"]
        if irregular_in_state and "sigma2.irregular" not in fixed:
            free_variances = ["sigma2.irregular"] + free_variances
        groups = np.array(
            [
                free_variances.index(name) if name in free_variances else -1
                for name in structure.groups
            ]
        )
        group_names = free_variances
        transition = structure.transition.copy()
        blocks = {}
        parts = []
        if spec["cycle"]:
            cycle = structure.cycle
            frequency = values["frequency.cycle"]
            damping = values.get("damping.cycle", 1.0)
            cos, sin = np.cos(frequency), np.sin(frequency)
            transition[cycle, cycle] = damping * np.array([[cos, sin], [-sin, cos]])
            if "frequency.cycle" not in fixed:
                indices = np.arange(cycle.start, cycle.stop)
                parts.append(
                    (
                        indices,
                        indices,
                        CycleRotation(
                            spec["frequency_bounds"],
                            damped=spec["damped_cycle"],
                            names=("frequency.cycle", "damping.cycle"),
                        ),
                    )
                )
        p = spec["autoregressive"]
        if p:
            ar_names = [f"ar.L{i}" for i in range(1, p + 1)]
            transition[structure.ar.start, structure.ar] = [values[name] for name in ar_names]
            if ar_names[0] not in fixed:
                indices = np.arange(structure.ar.start, structure.ar.stop)
                parts.append(([structure.ar.start], indices, StationaryAR(names=ar_names)))
        if parts:
            blocks["transition_matrix"] = Submatrices(parts)
        if group_names:
            blocks["transition_covariance"] = SharedLogVariances(groups, names=group_names)
        if spec["irregular"] and not irregular_in_state:
            observation_variance = max(values["sigma2.irregular"], floor)
            if "sigma2.irregular" not in fixed:
                blocks["observation_covariance"] = SharedLogVariances(
                    [0], names=["sigma2.irregular"]
                )
        else:
            observation_variance = floor
        beta_names = [name for name in structure.param_names if name.startswith("beta.")]
        n_controls = len(beta_names)
        control = np.zeros((k, n_controls))
        if n_controls:
            control[structure.regression] = [values[name] for name in beta_names]
            mask = np.zeros((k, n_controls), dtype=bool)
            mask[structure.regression] = [name not in fixed for name in beta_names]
            if mask.any():
                blocks["control_matrix"] = _NamedFreeEntries(
                    mask=mask,
                    scale=self._beta_scale,
                    names=[name for name in beta_names if name not in fixed],
                )
        diffuse, stationary, mean, covariance = self._initial_state(structure, floor)
        template = LGSSMParameters(
            transition_matrix=transition,
            observation_matrix=structure.observation[None, :],
            transition_covariance=np.diag(state_variances),
            observation_covariance=[[observation_variance]],
            control_matrix=control,
            initial_state_mean=mean,
            initial_state_covariance=covariance,
        )
        return LGSSMParameterization(
            template, blocks, stationary=stationary if stationary.any() else None
        )

    # -- fitting -----------------------------------------------------------------

    def _validate(self, y, controls, lengths, sequence_ids, *, reset, method):
        if not (scipy.sparse.issparse(y) or np.ma.isMaskedArray(y)):
            y = np.asarray(y)
        if np.ndim(y) == 1:
            y = y.reshape(-1, 1)
        X, offsets = validate_sequences(
            self, y, None, lengths, sequence_ids, reset=reset, method=method
        )
        if X.shape[1] != 1:
            raise ValueError(
                "UnobservedComponents models one series: y must have shape (n_samples,) or "
                f"(n_samples, 1), got {X.shape}; pass regressors as controls."
            )
        controls = _as_columns(controls)
        if reset:
            n_controls = 0 if controls is None else np.shape(controls)[1]
        else:
            n_controls = self.n_controls_
        controls = check_controls(controls, X.shape[0], n_controls)
        if np.isnan(controls).any():
            raise ValueError("controls must not contain NaN.")
        return X, offsets, controls

    @staticmethod
    def _augment(X, controls, offsets, n_controls):
        """With regressors, one missing row before each sequence: the regression
        coordinate x_t' beta + eps_t is then driven by every row's controls (the
        kernel's first row has no transition); otherwise the data as they are."""
        if not n_controls:
            return X, controls, offsets
        starts = offsets[:-1]
        X = np.insert(X, starts, np.nan, axis=0)
        controls = np.insert(controls, starts, 0.0, axis=0)
        offsets = offsets + np.arange(offsets.size)
        return X, controls, offsets

    def _start(self, spec, structure, X, controls):
        """Starting values in the spirit of statsmodels' (a Hodrick-Prescott trend,
        least squares for the regressors and the AR coefficients, the residual
        variance for the other variances)."""
        observed = ~np.isnan(X[:, 0])
        y = X[observed, 0]
        exog = controls[observed]
        start = {}
        if spec["level"]:
            smooth = _hp_trend(y)
            resid = y - smooth
            if spec["stochastic_trend"]:
                smoother = _hp_trend(smooth)
                start["sigma2.trend"] = np.std(smoother) ** 2
                if spec["stochastic_level"]:
                    start["sigma2.level"] = np.std(smooth - smoother) ** 2
            elif spec["stochastic_level"]:
                start["sigma2.level"] = np.std(smooth) ** 2
        else:
            resid = y.copy()
        if exog.shape[1]:
            beta = np.linalg.pinv(exog) @ resid
            resid = resid - exog @ beta
            beta_names = [name for name in structure.param_names if name.startswith("beta.")]
            start.update(zip(beta_names, beta.tolist()))
        p = spec["autoregressive"]
        if p:
            lags = np.column_stack([resid[p - i : resid.size - i] for i in range(1, p + 1)])
            coefficients = np.linalg.pinv(lags) @ resid[p:]
            roots = np.abs(np.roots(np.r_[1.0, -coefficients]))
            if roots.size and roots.max() >= 0.98:
                coefficients = coefficients * (0.9 / roots.max()) ** np.arange(1, p + 1)
            start.update({f"ar.L{i}": float(c) for i, c in enumerate(coefficients, 1)})
            resid = resid[p:] - lags @ coefficients
            start["sigma2.ar"] = np.var(resid)
        var_resid = float(np.var(resid)) if resid.size > 1 else 1.0
        for name in structure.variance_names:
            start.setdefault(name, var_resid)
        if spec["irregular"]:
            start["sigma2.irregular"] = var_resid
        if spec["cycle"]:
            low, high = spec["frequency_bounds"]
            start["frequency.cycle"] = 0.5 * (low + high)
            if spec["damped_cycle"]:
                lag = np.linalg.pinv(resid[:-1, None]) @ resid[1:] if resid.size > 1 else [0.5]
                start["damping.cycle"] = float(np.clip(lag[0], 0.05, 0.95))
        scale = max(float(np.var(y)) if y.size > 1 else 1.0, 1e-300)
        for name, value in start.items():
            if name.startswith("sigma2."):
                start[name] = max(float(value), 1e-4 * scale)
        return start

    def fit(self, y, controls=None, *, lengths=None, sequence_ids=None):
        """Estimate the parameters by exact maximum likelihood.

        Parameters
        ----------
        y : array-like of shape (n_samples,) or (n_samples, 1)
            The series (several sequences concatenated); NaN marks a missing
            row.
        controls : array-like of shape (n_samples, n_controls), optional
            Regressors x_t, with coefficients ``beta.x1``, ... (statsmodels'
            ``exog`` with ``mle_regression=True``; a DataFrame's columns name
            them, ``beta.<column>``, as in statsmodels).
        lengths : array-like of int, optional
            Length of each sequence.
        sequence_ids : array-like of shape (n_samples,), optional
            One label per row; the rows of a sequence contiguous.

        Returns
        -------
        self : UnobservedComponents
        """
        spec = self._specification()
        check_scalar_param(self.n_iter, "n_iter", "int", low=0)
        controls_given = controls
        X, offsets, controls = self._validate(
            y, controls, lengths, sequence_ids, reset=True, method="fit"
        )
        if np.all(np.isnan(X)):
            raise ValueError("y is entirely missing (NaN): nothing to fit.")
        self.n_controls_ = controls.shape[1]
        names = getattr(controls_given, "columns", None)
        structure = self._structure(
            spec, self.n_controls_, None if names is None else [str(name) for name in names]
        )
        fixed = self._check_fixed(structure)
        observed = X[~np.isnan(X[:, 0]), 0]
        scale = float(np.var(observed)) if observed.size > 1 else 1.0
        scale = scale if scale > 0 else 1.0
        floor = DETERMINISTIC_VARIANCE * scale
        spread = controls.std(axis=0) if controls.size else np.ones(0)
        self._beta_scale = np.sqrt(scale) / np.where(spread > 0, spread, 1.0)
        start = self._start(spec, structure, X, controls)
        parameterization = self._parameterization(structure, spec, start, fixed, floor)
        augmented = self._augment(X, controls, offsets, self.n_controls_)
        if np.sum(np.maximum(np.diff(offsets) - self._burn(structure), 0)) == 0:
            raise ValueError(
                f"the model's diffuse initial state takes the first {self._burn(structure)} "
                "rows of each sequence out of the log-likelihood, and no sequence is longer: "
                "nothing is left to fit (a longer series, or a smaller model)."
            )
        # the row _augment inserts (missing) comes before the burned rows; nothing to
        # burn under the exact diffuse filter
        burn = self._burn(structure)
        burn += 1 if self.n_controls_ and burn else 0
        fit = lgssm_maximum_likelihood(
            parameterization,
            augmented[0],
            controls=augmented[1],
            lengths=np.diff(augmented[2]),
            max_iter=self.n_iter,
            tol=self.tol,
            burn=burn,
            diffuse=self._diffuse(structure),
        )
        fit = self._polish_boundary(
            parameterization, fit, augmented, burn, floor, scale, self._diffuse(structure)
        )
        self._spec, self._structure_, self._floor = spec, structure, floor
        self._parameterization_, self._burn_rows = parameterization, burn
        self.parameters_ = fit.parameters
        self.log_likelihood_ = fit.log_likelihood
        self.n_iter_ = fit.n_iter
        self.converged_ = fit.converged
        self.param_names_ = list(structure.param_names)
        estimates = dict(zip(parameterization.labels, parameterization.reported(fit.unconstrained)))
        for name in parameterization.labels:
            if name.startswith("sigma2."):
                estimates[name] = float(estimates[name])
        self.params_ = {
            name: float(fixed[name]) if name in fixed else float(estimates[name])
            for name in self.param_names_
        }
        self.fixed_params_ = dict(fixed)
        self._free_names = [name for name in self.param_names_ if name not in fixed]
        lengths_obs = np.diff(offsets)
        self.nobs_ = int(X.shape[0])
        self.nobs_effective_ = int(np.sum(np.maximum(lengths_obs - self._burn(structure), 0)))
        if not fit.converged and self.n_iter > 0:
            warn_user(
                f"UnobservedComponents: L-BFGS-B did not converge in n_iter={self.n_iter} "
                f"iterations ({fit.message}).",
                ConvergenceWarning,
            )
        self._set_standard_errors(parameterization, fit, augmented, burn)
        self._training = (X, controls, offsets)  # simulate's first state, smoothed on demand
        return self

    def _polish_boundary(self, parameterization, fit, augmented, burn, floor, scale, diffuse):
        """Variances that head for 0 do so slowly in log coordinates (the gradient in
        log sigma2 vanishes with sigma2): those below 1e-6 of the data's variance are
        put at the deterministic floor and held there while the others are
        maximised (the Fisher-identity gradient of a variance that small is
        rounding: the expected squared disturbance, a difference of second
        moments of the state, over the variance squared); the better of the two
        maxima is kept (statsmodels reports such variances as ~1e-11)."""
        reported = parameterization.reported(fit.unconstrained)
        tiny = [
            index
            for index, label in enumerate(parameterization.labels)
            if label.startswith("sigma2.") and reported[index] < 1e-6 * scale
        ]
        if not tiny or self.n_iter == 0:
            return fit
        # all of them at once, else one at a time (an interior small variance may be
        # among them)
        trials = [tiny] + ([[index] for index in tiny] if len(tiny) > 1 else [])
        best = fit
        for trial in trials:
            start = best.unconstrained.copy()
            start[trial] = np.log(floor)
            polished = lgssm_maximum_likelihood(
                parameterization,
                augmented[0],
                controls=augmented[1],
                lengths=np.diff(augmented[2]),
                start=start,
                max_iter=self.n_iter,
                tol=self.tol,
                burn=burn,
                diffuse=diffuse,
                hold=[parameterization.labels[index] for index in trial],
            )
            if polished.log_likelihood > best.log_likelihood + 1e-9 * abs(best.log_likelihood):
                # a line search that stops at the floor's rounding is no failure of
                # the fit that converged before
                best = polished._replace(
                    n_iter=best.n_iter + polished.n_iter,
                    converged=best.converged or polished.converged,
                )
                if trial is tiny:
                    break
        return best

    def _set_standard_errors(self, parameterization, fit, augmented, burn):
        for name in ("cov_params_", "bse_"):
            self.__dict__.pop(name, None)
        self.boundary_params_ = self._at_boundary(parameterization, fit)
        if self.cov_type is None:
            return
        n_free = parameterization.n_free
        order = [parameterization.labels.index(name) for name in self._free_names]
        if n_free:
            if self.boundary_params_:
                warn_user(
                    f"UnobservedComponents: {self.boundary_params_} are on the boundary of "
                    "the parameter space (a variance of 0, the component deterministic): "
                    "they have no standard error (NaN), and the others' are those of the "
                    "model with them held there (statsmodels' fix_params).",
                    UserWarning,
                )
            result = lgssm_parameter_covariance(
                parameterization,
                fit.unconstrained,
                augmented[0],
                controls=augmented[1],
                lengths=np.diff(augmented[2]),
                cov_type=self.cov_type,
                burn=burn,
                diffuse=self._diffuse(self._structure_),
                at_bound=self.boundary_params_,
            )
            covariance = result.covariance[np.ix_(order, order)]
            errors = result.standard_errors[order]
        else:
            covariance, errors = np.zeros((0, 0)), np.zeros(0)
        self.cov_params_ = covariance
        bse = dict(zip(self._free_names, errors.tolist()))
        self.bse_ = {name: bse.get(name, float("nan")) for name in self.param_names_}

    def _at_boundary(self, parameterization, fit):
        """The estimated variances at the deterministic floor, where
        :meth:`_polish_boundary` put the variances that head for 0."""
        reported = parameterization.reported(fit.unconstrained)
        return [
            label
            for label, value in zip(parameterization.labels, reported)
            if label.startswith("sigma2.") and value <= self._floor * (1 + 1e-6)
        ]

    # -- inference with the fitted model ------------------------------------------

    def _prepared(self, y, controls, lengths, sequence_ids, method):
        check_is_fitted(self, "params_")
        X, offsets, controls = self._validate(
            y, controls, lengths, sequence_ids, reset=False, method=method
        )
        return X, offsets, controls

    def _burned(self, log_predictive, offsets):
        burn = self._burn(self._structure_)
        keep = np.ones(log_predictive.size, dtype=bool)
        for start, stop in zip(offsets[:-1], offsets[1:]):
            keep[start : min(start + burn, stop)] = False
        return float(log_predictive[keep].sum())

    def _strip(self, array, offsets):
        """Drop the rows that ``_augment`` added."""
        if not self.n_controls_:
            return array
        return np.delete(array, offsets[:-1] + np.arange(offsets.size - 1), axis=0)

    def _filtered(self, X, controls, offsets):
        augmented = self._augment(X, controls, offsets, self.n_controls_)
        return kalman_filter(
            self.parameters_,
            augmented[0],
            controls=augmented[1],
            lengths=np.diff(augmented[2]),
            diffuse=self._diffuse(self._structure_),
        ), augmented[2]

    def score(self, y, controls=None, *, lengths=None, sequence_ids=None):
        """The log-likelihood of y under the fitted model (the definition of
        ``log_likelihood_``: the first rows of each sequence left out).

        Parameters
        ----------
        y, controls, lengths, sequence_ids
            As in :meth:`fit`.

        Returns
        -------
        log_likelihood : float
        """
        X, offsets, controls = self._prepared(y, controls, lengths, sequence_ids, "score")
        result, augmented_offsets = self._filtered(X, controls, offsets)
        return self._burned(self._strip(result.log_predictive, augmented_offsets), offsets)

    def _n_free(self):
        return len(self._free_names)

    def _criterion(self, penalty, y, controls, lengths, sequence_ids):
        check_is_fitted(self, "params_")
        if y is None:
            log_likelihood, n = self.log_likelihood_, self.nobs_effective_
        else:
            log_likelihood = self.score(y, controls, lengths=lengths, sequence_ids=sequence_ids)
            X, offsets, _ = self._prepared(y, controls, lengths, sequence_ids, "score")
            burn = self._burn(self._structure_)
            n = int(np.sum(np.maximum(np.diff(offsets) - burn, 0)))
        return -2.0 * log_likelihood + penalty(self._n_free(), n)

    def aic(self, y=None, controls=None, *, lengths=None, sequence_ids=None):
        """Akaike's criterion -2 log L + 2 k (k: the estimated parameters), of the
        fitted data (statsmodels' ``aic``) or of ``y``."""
        return self._criterion(lambda k, n: 2.0 * k, y, controls, lengths, sequence_ids)

    def bic(self, y=None, controls=None, *, lengths=None, sequence_ids=None):
        """The Bayesian criterion -2 log L + k log n (n: the rows after the burn)."""
        return self._criterion(
            lambda k, n: k * math.log(n) if n > 0 else float("nan"),
            y,
            controls,
            lengths,
            sequence_ids,
        )

    def hqic(self, y=None, controls=None, *, lengths=None, sequence_ids=None):
        """Hannan and Quinn's criterion -2 log L + 2 k log log n."""
        return self._criterion(
            lambda k, n: 2.0 * k * math.log(math.log(n)) if n > 1 else float("nan"),
            y,
            controls,
            lengths,
            sequence_ids,
        )

    def summary(self, alpha=0.05):
        """A text table of the estimates: standard error, z, P>|z| and the interval.

        Parameters
        ----------
        alpha : float, default=0.05
            1 - the confidence level of the interval.

        Returns
        -------
        str
        """
        check_is_fitted(self, "params_")
        check_scalar_param(alpha, "alpha", "real", low=0.0, high=1.0, low_open=True, high_open=True)
        quantile = scipy.stats.norm.ppf(1 - alpha / 2)
        spec_name = self._spec_name()
        lines = [
            "Unobserved Components Results",
            f"Model: {spec_name}",
            f"Observations: {self.nobs_}   Log likelihood: {self.log_likelihood_:.3f}",
            f"AIC: {self.aic():.3f}   BIC: {self.bic():.3f}   HQIC: {self.hqic():.3f}",
            f"Covariance type: {self.cov_type}",
            "",
            f"{'':>28} {'coef':>12} {'std err':>12} {'z':>9} {'P>|z|':>7} "
            f"{f'[{alpha / 2:g}':>12} {f'{1 - alpha / 2:g}]':>12}",
        ]
        bse = getattr(self, "bse_", {})
        boundary = getattr(self, "boundary_params_", [])
        for name in self.param_names_:
            value = self.params_[name]
            error = bse.get(name, float("nan"))
            fixed = name in self.fixed_params_
            if fixed or not np.isfinite(error) or error == 0:
                note = "(fixed)" if fixed else "(boundary)" if name in boundary else "nan"
                cells = f"{note:>12} {'':>9} {'':>7} {'':>12} {'':>12}"
            else:
                z = value / error
                p_value = 2 * scipy.stats.norm.sf(abs(z))
                cells = (
                    f"{error:>12.4g} {z:>9.3f} {p_value:>7.3f} "
                    f"{value - quantile * error:>12.4g} {value + quantile * error:>12.4g}"
                )
            lines.append(f"{name:>28} {value:>12.4g} {cells}")
        if boundary and self.cov_type is not None:
            lines += [
                "",
                f"(boundary): {', '.join(boundary)} at 0 (the floor {self._floor:.3g}); the "
                "other standard errors hold them there.",
            ]
        return "\n".join(lines)

    def _spec_name(self):
        spec = self._spec
        mask = (
            spec["irregular"],
            spec["level"],
            spec["stochastic_level"],
            spec["trend"],
            spec["stochastic_trend"],
        )
        names = [name for name, flags in TREND_SPECIFICATIONS.items() if flags == mask]
        parts = [names[0]] if names else []
        if spec["seasonal"]:
            parts.append(f"seasonal({spec['seasonal']})")
        for period, harmonics, _ in spec["freq_seasonal"]:
            parts.append(f"freq_seasonal({period}({harmonics}))")
        if spec["cycle"]:
            parts.append("damped stochastic cycle" if spec["damped_cycle"] else "cycle")
        if spec["autoregressive"]:
            parts.append(f"AR({spec['autoregressive']})")
        if self.n_controls_:
            parts.append(f"{self.n_controls_} regressor(s)")
        return " + ".join(parts) or "irregular"

    def _smoothed(self, X, controls, offsets):
        augmented = self._augment(X, controls, offsets, self.n_controls_)
        result = kalman_smoother(
            self.parameters_,
            augmented[0],
            controls=augmented[1],
            lengths=np.diff(augmented[2]),
            diffuse=self._diffuse(self._structure_),
        )
        means = self._strip(result.smoothed_means, augmented[2])
        covariances = self._strip(result.smoothed_covariances, augmented[2])
        return means, covariances

    def _smoothed_first_states(self, X, controls, offsets):
        means, covariances = self._smoothed(X, controls, offsets)
        return means[offsets[0]], covariances[offsets[0]]

    def components(self, y, controls=None, *, lengths=None, sequence_ids=None):
        """The smoothed components E[component_t | y] and their standard deviations.

        Parameters
        ----------
        y, controls, lengths, sequence_ids
            As in :meth:`fit`.

        Returns
        -------
        Bunch
            One entry per component of the model ("level", "trend",
            "seasonal", "freq_seasonal_12(2)", "cycle", "autoregressive"),
            each a Bunch with ``mean`` and ``std`` of shape (n_samples,):
            statsmodels' ``smoothed`` component and the square root of its
            ``smoothed_cov``.
        """
        X, offsets, controls = self._prepared(y, controls, lengths, sequence_ids, "components")
        means, covariances = self._smoothed(X, controls, offsets)
        result = Bunch()
        for name, weights in self._structure_.components.items():
            mean = means @ weights
            variance = np.einsum("i,tij,j->t", weights, covariances, weights)
            result[name] = Bunch(mean=mean, std=np.sqrt(np.clip(variance, 0.0, None)))
        return result

    def forecast(self, n_steps, controls=None, alpha=0.05):
        """Forecasts of the next ``n_steps`` rows after the fitted data, with intervals.

        Parameters
        ----------
        n_steps : int
            Horizon, >= 1.
        controls : array-like of shape (n_steps, n_controls), optional
            The regressors of the forecast rows (required with regressors).
        alpha : float, default=0.05
            The intervals' coverage is 1 - alpha (statsmodels'
            ``get_forecast(...).conf_int(alpha)``).

        Returns
        -------
        Bunch
            ``mean``, ``std``, ``lower`` and ``upper``, each of shape (n_steps,)
            (of the last sequence of the fitted data).
        """
        check_is_fitted(self, "params_")
        check_scalar_param(n_steps, "n_steps", "int", low=1)
        check_scalar_param(alpha, "alpha", "real", low=0.0, high=1.0, low_open=True, high_open=True)
        if self.n_controls_ and controls is None:
            raise ValueError(
                f"the model has {self.n_controls_} regressor(s): forecast needs their "
                "values, controls of shape (n_steps, n_controls)."
            )
        controls = check_controls(_as_columns(controls), n_steps, self.n_controls_)
        X, controls_fit, offsets = self._training
        last = slice(offsets[-2], offsets[-1])
        augmented = self._augment(
            X[last], controls_fit[last], np.array([0, offsets[-1] - offsets[-2]]), self.n_controls_
        )
        parameters, rows, row_controls = self.parameters_, augmented[0], augmented[1]
        diffuse = self._diffuse(self._structure_)
        if diffuse is not None:
            # the forecast filter starts from the exact diffuse filter's last state: a
            # missing row carrying it (its control unused), then the forecast steps
            filtered = kalman_filter(parameters, rows, controls=row_controls, diffuse=diffuse)
            covariance = filtered.filtered_covariances[-1]
            parameters = parameters._replace(
                initial_state_mean=filtered.filtered_means[-1],
                initial_state_covariance=0.5 * (covariance + covariance.T),
            )
            rows, row_controls = np.full((1, 1), np.nan), np.zeros((1, self.n_controls_))
        result = kalman_forecast(
            parameters, rows, n_steps, controls=row_controls, future_controls=controls
        )
        mean = result.means[:, 0]
        std = np.sqrt(result.covariances[:, 0, 0])
        quantile = scipy.stats.norm.ppf(1 - alpha / 2)
        return Bunch(mean=mean, std=std, lower=mean - quantile * std, upper=mean + quantile * std)

    def simulate(self, n_samples, controls=None, *, initial_state=None, random_state=None):
        """Draw a series from the fitted model.

        Parameters
        ----------
        n_samples : int
        controls : array-like of shape (n_samples, n_controls), optional
            Required with regressors.
        initial_state : array-like of shape (n_state,), optional
            The first state (default: the smoothed first state of the fitted
            data; the stationary AR part is drawn from its distribution).
        random_state : int, RandomState instance or None, default=None

        Returns
        -------
        y : ndarray of shape (n_samples,)
        """
        check_is_fitted(self, "params_")
        check_scalar_param(n_samples, "n_samples", "int", low=1)
        structure = self._structure_
        k = structure.n_state
        mean = (
            self._smoothed_first_states(*self._training)[0]
            if initial_state is None
            else np.asarray(initial_state, dtype=np.float64)
        )
        if mean.shape != (k,):
            raise ValueError(f"initial_state must have shape ({k},), got {mean.shape}.")
        covariance = np.eye(k) * self._floor
        stationary = structure.stationary
        if initial_state is None and stationary.any():
            index = np.ix_(stationary, stationary)
            covariance[index] = self.parameters_.initial_state_covariance[index]
            mean = mean.copy()
            mean[stationary] = 0.0
        if self.n_controls_ and controls is None:
            raise ValueError("the model has regressors: simulate needs controls.")
        controls = check_controls(_as_columns(controls), n_samples, self.n_controls_)
        if self.n_controls_:  # the first row's regression term, which no transition gives
            r = structure.regression
            mean = mean.copy()
            mean[r] = self.parameters_.control_matrix[r] @ controls[0]
            covariance[r, r] = self.parameters_.transition_covariance[r, r]
        parameters = self.parameters_._replace(
            initial_state_mean=mean, initial_state_covariance=covariance
        )
        draw = sample_lgssm(
            parameters, n_samples, controls=controls, random_state=check_random_state(random_state)
        )
        return draw.observations[:, 0]

    def sample(self, n_samples=1, random_state=None, *, controls=None):
        """:meth:`simulate` as a column, the shape of the other estimators' ``sample``.

        Returns
        -------
        y : ndarray of shape (n_samples, 1)
        """
        return self.simulate(n_samples, controls, random_state=random_state)[:, None]


def _as_columns(controls):
    """One regressor given as a 1-D array is one column."""
    if controls is not None and np.ndim(controls) == 1:
        return np.asarray(controls, dtype=np.float64).reshape(-1, 1)
    return controls


class _NamedFreeEntries(FreeEntries):
    """Free entries with statsmodels' names as labels."""

    def __init__(self, mask=None, scale=1.0, names=None):
        super().__init__(mask=mask, scale=scale)
        self.names = names

    def labels(self):
        return list(self.names)
