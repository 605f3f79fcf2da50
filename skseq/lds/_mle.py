"""``LinearGaussianSSM(fit_method="mle")``: exact maximum likelihood and standard errors.

The estimator declares its parameterization (the learned parameters of
``params``: matrices and offsets as free entries in the units of the data and
the state, covariances by Cholesky factors with log diagonals) on the
inference layer's transformation layer and calls its optimiser and its
covariance estimates (:mod:`skseq.inference.kalman_mle`); EM's iterations
may start it (doc/user_guide/lgssm.rst, "Exact maximum likelihood").
"""

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from ..base import ConvergenceMonitor, warn_user
from ..inference.kalman_mle import (
    CholeskyCovariance,
    FreeEntries,
    LGSSMParameterization,
    lgssm_maximum_likelihood,
    lgssm_parameter_covariance,
)
from ._initialization import COVARIANCE_NAMES, PARAMETER_NAMES

FIT_METHODS = ("em", "mle")
COV_TYPES = ("opg", "oim")


class LGSSMMaximumLikelihood:
    """The maximum-likelihood fit of :class:`~skseq.lds.LinearGaussianSSM` (a mixin)."""

    def _mle_parameterization(self, learned, X):
        """The declared map of the learned parameters to unconstrained coordinates.

        Matrices and offsets are free entries divided by their units (those of
        SQUAREM's coordinates: the data's and the state's scales), so that
        L-BFGS-B's coordinates are of order one; covariances are Cholesky
        factors with log diagonals; the other parameters are held fixed.
        """
        template = self._checked_parameters()
        coordinates = self._acceleration_coordinates(X)
        kinds = {} if coordinates is None else coordinates.kinds
        blocks = {}
        for name in learned:
            if name in COVARIANCE_NAMES:
                blocks[name] = CholeskyCovariance()
            else:
                blocks[name] = FreeEntries(scale=kinds[name][1])
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
            if init == 0:
                self._warn_if_degenerate(X)
            with self._fit_context(X) as context:
                for _ in range(self.mle_em_iter):
                    statistics, log_likelihood = self._estep_parallel(X, offsets, context)
                    self._check_log_likelihood(log_likelihood)
                    self._mstep(statistics)
            parameterization = self._mle_parameterization(learned, X)
            fit = lgssm_maximum_likelihood(
                parameterization,
                observations,
                controls=controls,
                lengths=lengths,
                max_iter=self.n_iter,
                tol=self.tol,
                n_jobs=self.n_jobs,
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
            covariance = lgssm_parameter_covariance(
                parameterization,
                fit.unconstrained,
                observations,
                controls=controls,
                lengths=lengths,
                cov_type=self.cov_type,
                n_jobs=self.n_jobs,
            ).covariance
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
        self.cov_params_ = covariance
        standard_errors = np.sqrt(np.clip(np.diag(covariance), 0.0, None))
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
