"""``LinearGaussianSSM(fit_method="mle")``: exact maximum likelihood and standard errors.

The estimator declares its parameterization (the learned parameters of
``params``: matrices and offsets as free entries in the units of the data and
the state, covariances by Cholesky factors with log diagonals) on the
inference layer's transformation layer and calls its optimiser and its
covariance estimates (:mod:`skseq.inference.kalman_mle`); EM's iterations
may start it (doc/user_guide/lgssm.rst, "Exact maximum likelihood").
"""

from collections.abc import Mapping

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from ..base import ConvergenceMonitor, warn_user
from ..inference.kalman_mle import (
    CholeskyCovariance,
    FreeEntries,
    LGSSMParameterization,
    LogVariances,
    lgssm_maximum_likelihood,
    lgssm_parameter_covariance,
)
from ._initialization import COVARIANCE_NAMES, PARAMETER_NAMES

FIT_METHODS = ("em", "mle")
COV_TYPES = ("opg", "oim")


def check_fixed_params_argument(fixed_params, name="fixed_params"):
    """The rule of ``fixed_params``: None or a mapping from parameter names to arrays
    (their shapes are checked at fit, against the model's)."""
    if fixed_params is None:
        return None
    if not isinstance(fixed_params, Mapping):
        raise TypeError(
            f"{name} must be None or a dict from parameter names to arrays (NaN where the "
            f"entry is estimated, or a boolean mask of the entries held at *_init), got "
            f"{type(fixed_params).__name__}."
        )
    unknown = sorted(str(key) for key in fixed_params if key not in PARAMETER_NAMES)
    if unknown:
        raise ValueError(
            f"{name} names unknown parameter(s) {unknown}; valid names are {list(PARAMETER_NAMES)}."
        )
    return fixed_params


def _fixed_values(spec, name, shape, initial):
    """The array of ``fixed_params[name]``: the held entries' values, NaN where free."""
    array = np.asarray(spec)
    label = f"fixed_params[{name!r}]"
    if array.dtype == bool:
        if initial is None:
            raise ValueError(
                f"{label} is a boolean mask: it holds its True entries at {name}_init, "
                f"which is not given. Give {name}_init, or the values to hold (an array "
                "with NaN where the entry is estimated)."
            )
        if array.shape != shape:
            raise ValueError(f"{label} must have the shape of {name}, {shape}; got {array.shape}.")
        return np.where(array, np.asarray(initial, dtype=np.float64), np.nan)
    try:
        values = np.array(array, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"{label} must be an array of numbers (NaN where the entry is estimated) or a "
            f"boolean mask, got {array.dtype} values."
        ) from None
    if values.shape != shape:
        raise ValueError(f"{label} must have the shape of {name}, {shape}; got {values.shape}.")
    if np.isinf(values).any():
        raise ValueError(f"{label} holds an infinite value; held values must be finite.")
    if name in COVARIANCE_NAMES:
        held = ~np.isnan(values)
        off_diagonal = ~np.eye(shape[0], dtype=bool)
        whole = held.all()
        diagonal = held[off_diagonal].all() and np.all(values[off_diagonal] == 0.0)
        if held.any() and not (whole or diagonal):
            raise ValueError(
                f"{label}: a covariance can hold all its entries, or its off-diagonal "
                "entries at 0 (a diagonal covariance, estimated by its log variances, any "
                "of which may be held too); other patterns would break positive "
                "definiteness of the Cholesky coordinates."
            )
        if whole and not np.array_equal(values, values.T):
            raise ValueError(f"{label} must be symmetric.")
    return values


class LGSSMMaximumLikelihood:
    """The maximum-likelihood fit of :class:`~skseq.lds.LinearGaussianSSM` (a mixin)."""

    def _fixed_entries(self, learned):
        """``{name: values}`` of ``fixed_params`` against the initialised parameters'
        shapes (NaN where free); the held entries of parameters ``learned``."""
        check_fixed_params_argument(self.fixed_params)
        fixed = {}
        for name, spec in (self.fixed_params or {}).items():
            if name not in learned:
                raise ValueError(
                    f"fixed_params names {name!r}, which params does not learn: a parameter "
                    f"left out of params is held whole at {name}_init. Add it to params to "
                    "hold some of its entries and estimate the others."
                )
            shape = getattr(self, f"{name}_").shape
            fixed[name] = _fixed_values(spec, name, shape, getattr(self, f"{name}_init"))
        return fixed

    def _hold_fixed(self, fixed):
        """Set the held entries of the fitted parameters to their values."""
        for name, values in fixed.items():
            held = ~np.isnan(values)
            current = np.array(getattr(self, f"{name}_"), dtype=np.float64)
            current[held] = values[held]
            setattr(self, f"{name}_", current)

    def _mle_parameterization(self, learned, X, fixed=None):
        """The declared map of the learned parameters to unconstrained coordinates.

        Matrices and offsets are free entries divided by their units (those of
        SQUAREM's coordinates: the data's and the state's scales), so that
        L-BFGS-B's coordinates are of order one; covariances are Cholesky
        factors with log diagonals, or log variances when ``fixed`` holds
        their off-diagonal entries at 0; the entries ``fixed`` holds
        (``{name: values, NaN where free}``) and the other parameters are
        held at their values.
        """
        fixed = {} if fixed is None else fixed
        template = self._checked_parameters()
        coordinates = self._acceleration_coordinates(X)
        kinds = {} if coordinates is None else coordinates.kinds
        blocks = {}
        for name in learned:
            free = np.isnan(fixed[name]) if name in fixed else None
            if free is not None and not free.any():
                continue  # every entry held
            if name in COVARIANCE_NAMES:
                if free is None:
                    blocks[name] = CholeskyCovariance()
                else:
                    blocks[name] = LogVariances(mask=np.diag(free).copy())
            else:
                blocks[name] = FreeEntries(mask=free, scale=kinds[name][1])
        return LGSSMParameterization(template, blocks)

    def _fit_mle(self, X, offsets):
        """``n_init`` initialisations, each followed by ``mle_em_iter`` EM iterations
        and L-BFGS-B on the exact log-likelihood; the best is kept.  ``X`` is the
        stacked ``[X, controls]``."""
        learned = sorted(self._check_params())
        random_state = check_random_state(self.random_state)
        n_features = self.n_features_in_
        observations, controls = X[:, :n_features], X[:, n_features:]
        lengths = np.diff(offsets)
        best = None
        for init in range(self.n_init):
            self._initialize(X, offsets, random_state)
            fixed = self._fixed_entries(learned)
            self._hold_fixed(fixed)
            if init == 0:
                self._warn_if_degenerate(X)
            with self._fit_context(X) as context:
                for _ in range(self.mle_em_iter):
                    statistics, log_likelihood = self._estep_parallel(X, offsets, context)
                    self._check_log_likelihood(log_likelihood)
                    self._mstep(statistics)
            # EM's M step knows no entry constraints: the held entries are set again
            self._hold_fixed(fixed)
            parameterization = self._mle_parameterization(learned, X, fixed)
            fit = lgssm_maximum_likelihood(
                parameterization,
                observations,
                controls=controls,
                lengths=lengths,
                max_iter=self.n_iter,
                tol=self.tol,
                n_jobs=self.n_jobs,
                diffuse=self._diffuse(),
            )
            if best is None or fit.log_likelihood > best[1].log_likelihood:
                best = (parameterization, fit)
        parameterization, fit = best
        for name in PARAMETER_NAMES:
            setattr(self, f"{name}_", np.array(getattr(fit.parameters, name), dtype=np.float64))
        monitor = ConvergenceMonitor(self.tol, self.n_iter, self.verbose)
        for value in fit.history:
            monitor.history.append(float(value))
        monitor.iter = fit.n_iter
        self._keep_monitor(monitor)
        self._running_statistics = None
        self.n_batch_iter_ = 0
        self._n_rows_seen = X.shape[0]
        self.__dict__.pop("batch_log_likelihood_", None)
        self.n_iter_ = fit.n_iter
        self.converged_ = fit.converged
        self.lower_bound_ = fit.log_likelihood
        self.log_likelihood_ = fit.log_likelihood
        self.mle_parameter_names_ = list(parameterization.labels)
        self.params_ = parameterization.reported(fit.unconstrained)
        if not fit.converged and self.n_iter > 0:  # n_iter=0 sets the starting values
            warn_user(
                f"{type(self).__name__}: L-BFGS-B did not converge in n_iter={self.n_iter} "
                f"iterations ({fit.message}). Increase n_iter or tol.",
                ConvergenceWarning,
            )
        self._set_standard_errors(parameterization, fit, observations, controls, lengths)
        return self

    def _set_standard_errors(self, parameterization, fit, observations, controls, lengths):
        """``cov_params_`` and ``bse_`` by ``cov_type`` (none when it is None)."""
        for name in ("cov_params_", "bse_"):
            self.__dict__.pop(name, None)
        if self.cov_type is None or parameterization.n_free == 0:
            return
        try:
            result = lgssm_parameter_covariance(
                parameterization,
                fit.unconstrained,
                observations,
                controls=controls,
                lengths=lengths,
                cov_type=self.cov_type,
                n_jobs=self.n_jobs,
                diffuse=self._diffuse(),
            )
            covariance, standard_errors = result.covariance, result.standard_errors
        except np.linalg.LinAlgError:
            # the maximiser is on the edge of the parameter space (a covariance that
            # collapses, as with fewer rows than features): no information to invert
            warn_user(
                f"{type(self).__name__}: the standard errors (cov_type={self.cov_type!r}) "
                "could not be computed: the Kalman recursions fail next to the estimate, "
                "whose covariances are nearly singular; cov_params_ and bse_ are NaN.",
                ConvergenceWarning,
            )
            covariance = np.full((parameterization.n_free, parameterization.n_free), np.nan)
            standard_errors = np.diag(covariance)
        self.cov_params_ = covariance
        bse = {}
        position = 0
        for name, block in parameterization.blocks.items():
            errors = np.full(block.template.size, np.nan)
            errors[block.reported_index] = standard_errors[position : position + block.n_free]
            position += block.n_free
            errors = errors.reshape(block.template.shape)
            if name in COVARIANCE_NAMES:  # the lower triangle, mirrored
                errors = np.where(np.isnan(errors), errors.T, errors)
            bse[name] = errors
        self.bse_ = bse
