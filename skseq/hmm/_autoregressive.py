"""Emissions that regress on the past and on inputs: AutoregressiveHMM and LinearRegressionHMM.

State k emits x_t ~ N(sum_l A_{k,l} x_{t-l} + V_k u_t + b_k, Sigma_k).  EM's data are
the emitted rows with their regressors as extra columns, ``[x_t, x_{t-1}, ..., x_{t-L},
u_t]`` (and the known states after them, :meth:`BaseHMM._stack_known_states`): every
path that splits, chunks or batches rows carries the regressors with them.  The first
``n_lags`` rows of each sequence only condition (they are not emitted).
"""

import numpy as np
from scipy import linalg

from .._validation import integer_rule, real_rule
from ._base import BaseHMM, fit_kmeans
from ._controls import ControlsMixin
from ._gaussian import distribute_covariance, initial_covariance, keep_valid_covariances

__all__ = ["AutoregressiveHMM", "LinearRegressionHMM"]


class AutoregressiveHMM(ControlsMixin, BaseHMM):
    """Hidden Markov model whose states emit vector autoregressions (a switching VAR).

    x_t | z_t = k ~ N(sum_l A_{k,l} x_{t-l} + V_k u_t + b_k, Sigma_k), l = 1 .. ``n_lags``,
    with inputs ``u_t`` passed as ``controls=``.  The first ``n_lags`` rows of each
    sequence only condition the rows after them: they are not emitted, and the
    outputs of :meth:`predict`, :meth:`predict_proba`, :meth:`filter` and
    :meth:`predict_next_state_proba` have one row per emitted row (each sequence
    ``n_lags`` rows shorter).  The M step is the closed-form weighted least squares
    of each state's rows on their regressors (with an optional ridge), then the
    weighted residual covariance.  With ``n_lags=0`` and no controls it is
    :class:`GaussianHMM` (``intercepts_`` are its means).

    Parameters
    ----------
    n_components : int, default=1
        Number of states.
    n_lags : int, default=1
        Order of each state's autoregression.
    covariance_type : {"full", "diag"}, default="full"
        Shape of the noise covariances ``covars_``: (K, D, D) or (K, D).
    min_covar : float, default=1e-3
        Added to the diagonal of the initial covariances.
    regression_prior : float, default=0.0
        Ridge weight on ``coefs_`` (a zero-mean normal prior of precision
        ``regression_prior`` / Sigma_k; the intercepts are not penalised).
    covars_prior : float, default=1e-2
        Added to the diagonal of each state's residual scatter (an
        inverse-Wishart scale), which keeps a state with few rows positive definite.
    startprob_prior, transmat_prior, algorithm, random_state, n_iter, tol, verbose, \
params, init_params, implementation, startprob_init, transmat_init, n_init, n_jobs, \
acceleration, learning_method, learning_decay, learning_offset, total_samples, batch_size
        As in :class:`GaussianHMM`.  Letters: "s" start, "t" transitions,
        "w" ``coefs_``, "b" ``intercepts_``, "c" ``covars_``.
    coefs_init, intercepts_init, covars_init : array-like, optional
        Initial values (default: zero coefficients, k-means intercepts, the
        data covariance).

    Attributes
    ----------
    coefs_ : ndarray of shape (n_components, n_features, n_lags * n_features + n_controls)
        ``[A_{k,1}, ..., A_{k,L}, V_k]`` side by side.
    intercepts_ : ndarray of shape (n_components, n_features)
    covars_ : ndarray of shape (n_components, n_features, n_features) or (n_components, n_features)
    n_controls_ : int
        Number of control columns seen at fit (0: none).
    startprob_, transmat_, monitor_, n_features_in_
        As in :class:`GaussianHMM`.

    Notes
    -----
    ``controls`` (one row per row of ``X``) are taken by every public method
    (:class:`~skseq.hmm._controls.ControlsMixin`) and routed by metadata routing
    as ``sequence_ids`` are (requested by default).  ``known_states`` has one
    label per row of ``X``; those of the conditioning rows are not used.
    :meth:`partial_fit` treats the first ``n_lags`` rows of every batch as
    conditioning rows (the lags do not carry over from the previous batch).

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.hmm import AutoregressiveHMM
    >>> rng = np.random.default_rng(0)
    >>> x = np.zeros((400, 1))
    >>> for t in range(1, 400):  # phi = 0.9 for 200 rows, then -0.5
    ...     x[t] = (0.9 if t < 200 else -0.5) * x[t - 1] + rng.normal()
    >>> model = AutoregressiveHMM(2, n_lags=1, n_iter=50, random_state=0).fit(x)
    >>> bool(np.allclose(np.sort(model.coefs_.ravel()), [-0.5, 0.9], atol=0.2))
    True
    >>> model.predict(x).shape  # the first row only conditions
    (399,)
    """

    _emission_letters = {"w": "coefs_", "b": "intercepts_", "c": "covars_"}

    def __init__(
        self,
        n_components=1,
        n_lags=1,
        covariance_type="full",
        min_covar=1e-3,
        regression_prior=0.0,
        covars_prior=1e-2,
        startprob_prior=1.0,
        transmat_prior=1.0,
        algorithm="viterbi",
        random_state=None,
        n_iter=10,
        tol=1e-2,
        verbose=False,
        params="stwbc",
        init_params="stwbc",
        implementation="log",
        *,
        coefs_init=None,
        intercepts_init=None,
        covars_init=None,
        startprob_init=None,
        transmat_init=None,
        n_init=1,
        n_jobs=None,
        acceleration=None,
        learning_method="batch",
        learning_decay=0.6,
        learning_offset=0.0,
        total_samples=None,
        batch_size=32,
    ):
        super().__init__(
            n_components=n_components,
            startprob_prior=startprob_prior,
            transmat_prior=transmat_prior,
            algorithm=algorithm,
            random_state=random_state,
            n_iter=n_iter,
            tol=tol,
            verbose=verbose,
            params=params,
            init_params=init_params,
            implementation=implementation,
            startprob_init=startprob_init,
            transmat_init=transmat_init,
            n_init=n_init,
            n_jobs=n_jobs,
            acceleration=acceleration,
            learning_method=learning_method,
            learning_decay=learning_decay,
            learning_offset=learning_offset,
            total_samples=total_samples,
            batch_size=batch_size,
        )
        self.n_lags = n_lags
        self.covariance_type = covariance_type
        self.min_covar = min_covar
        self.regression_prior = regression_prior
        self.covars_prior = covars_prior
        self.coefs_init = coefs_init
        self.intercepts_init = intercepts_init
        self.covars_init = covars_init

    def _parameter_rules(self):
        # covariance_type and min_covar: PARAMETER_RULES (shared with GaussianHMM);
        # the covariance types that regressions take are checked at fit.
        return {
            **super()._parameter_rules(),
            "n_lags": integer_rule(low=0),
            "regression_prior": real_rule(low=0.0),
            "covars_prior": real_rule(low=0.0),
        }

    # -- controls and lags: the regressors travel with the rows ---------------

    def _forget_call_state(self):
        self.__dict__.pop("_emitted_rows", None)

    @property
    def _lags(self):
        return self.n_lags

    def _prepare(self, X, y, lengths, sequence_ids, *, reset, method="fit"):
        if self.covariance_type not in ("full", "diag"):
            raise ValueError(
                f"{type(self).__name__} takes covariance_type 'full' or 'diag', got "
                f"{self.covariance_type!r}."
            )
        X, offsets = super()._prepare(X, y, lengths, sequence_ids, reset=reset, method=method)
        controls = self._checked_controls(X.shape[0], reset)
        n_lags = self._lags
        lengths = np.diff(offsets)
        if np.any(lengths <= n_lags):
            short = int(np.flatnonzero(lengths <= n_lags)[0])
            raise ValueError(
                f"Sequence {short} has n_samples={lengths[short]} rows; with n_lags={n_lags} a "
                f"sequence needs at least {n_lags + 1} (its first {n_lags} only condition)."
            )
        emitted = np.concatenate(
            [np.arange(start + n_lags, stop) for start, stop in zip(offsets[:-1], offsets[1:])]
        )
        self._emitted_rows = (X.shape[0], emitted)
        design = np.column_stack(
            [X[emitted]] + [X[emitted - lag] for lag in range(1, n_lags + 1)] + [controls[emitted]]
        )
        return design, offsets - n_lags * np.arange(len(offsets))

    def _check_known_states(self, known_states, X):
        if known_states is not None:
            n_rows, emitted = self._emitted_rows
            known_states = np.asarray(known_states)
            if known_states.shape[:1] != (n_rows,):
                raise ValueError(
                    f"known_states has shape {known_states.shape}; give one label per row of "
                    f"X ({n_rows})."
                )
            known_states = known_states[emitted]
        return super()._check_known_states(known_states, X)

    def _prepare_fitted(self, X, lengths, sequence_ids, y=None, method=None):
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self)
        X, offsets = self._prepare(X, y, lengths, sequence_ids, reset=False, method=method)
        self._check_fitted_parameters(self.n_features_in_)
        return X, offsets

    def _check_fitted_parameters(self, n_features=None):
        # Callers pass the width of EM's data (rows with their regressors);
        # validate_data has checked X's own width against n_features_in_.
        super()._check_fitted_parameters(self.__dict__.get("n_features_in_"))

    def _n_data_points(self, X):
        X, _ = self._split_known_states(X)
        return int(X[:, : self._n_outputs].size)

    @property
    def _n_outputs(self):
        if hasattr(self, "intercepts_"):
            return self.intercepts_.shape[1]
        return self.n_features_in_

    def _split_design(self, X):
        """``(x, z)``: the emitted rows and their regressors ``[lags, controls, 1]``."""
        n_outputs = self._n_outputs
        regressors = np.column_stack([X[:, n_outputs:], np.ones(X.shape[0])])
        return X[:, :n_outputs], regressors

    # -- the emission hooks ---------------------------------------------------

    def _full_covars(self):
        if self.covariance_type == "diag":
            return np.stack([np.diag(v) for v in self.covars_])
        return self.covars_

    def _initialize_emissions(self, X, random_state):
        x, regressors = self._split_design(X)
        n_components, n_outputs = self.n_components, x.shape[1]
        n_regressors = regressors.shape[1] - 1
        coefs = self._initial_value("coefs_")
        self.coefs_ = np.zeros((n_components, n_outputs, n_regressors)) if coefs is None else coefs
        intercepts = self._initial_value("intercepts_")
        if intercepts is None:
            if x.shape[0] < n_components:
                raise ValueError(
                    f"n_components={n_components} states need at least as many emitted "
                    f"rows, got {x.shape[0]}."
                )
            intercepts = fit_kmeans(x, n_components, random_state, self.n_jobs).cluster_centers_
        self.intercepts_ = np.array(intercepts, dtype=np.float64)
        covars = self._initial_value("covars_")
        if covars is None:
            covars = distribute_covariance(
                initial_covariance(x, self.min_covar), self.covariance_type, n_components
            )
        self.covars_ = np.array(covars, dtype=np.float64)
        self._check_emission_parameters(n_outputs)

    def _check_emission_parameters(self, n_features):
        n_components = self.n_components
        intercepts = np.asarray(self.intercepts_, dtype=np.float64)
        if intercepts.ndim != 2 or intercepts.shape[0] != n_components:
            raise ValueError(
                f"intercepts_ must have shape (n_components={n_components}, n_features), "
                f"got {intercepts.shape}."
            )
        n_outputs = intercepts.shape[1]
        if n_features is not None and n_outputs != n_features:
            raise ValueError(f"X has {n_features} features, but intercepts_ have {n_outputs}.")
        n_regressors = self._lags * n_outputs + self.__dict__.get("n_controls_", 0)
        shapes = {
            "coefs_": (n_components, n_outputs, n_regressors),
            "covars_": (n_components, n_outputs)
            + ((n_outputs,) if self.covariance_type == "full" else ()),
        }
        for name, shape in shapes.items():
            value = np.asarray(getattr(self, name), dtype=np.float64)
            if value.shape != shape:
                raise ValueError(f"{name} must have shape {shape}, got {value.shape}.")
        for name in ("coefs_", "intercepts_", "covars_"):
            if not np.all(np.isfinite(getattr(self, name))):
                raise ValueError(f"{name} contains NaN or inf.")
        if self.covariance_type == "diag":
            if np.any(self.covars_ <= 0):
                raise ValueError("covars_ must be positive (diag).")
        else:
            for k, matrix in enumerate(self.covars_):
                if not np.allclose(matrix, matrix.T) or np.linalg.eigvalsh(matrix)[0] <= 0:
                    raise ValueError(f"covars_[{k}] must be symmetric positive definite.")

    def _weights(self):
        """(K, D, P + 1): ``[coefs_, intercepts_]``, the coefficients of ``[lags, controls, 1]``."""
        return np.concatenate([self.coefs_, self.intercepts_[:, :, None]], axis=2)

    def _emission_terms(self, X):
        x, regressors = self._split_design(X)
        n_outputs = x.shape[1]
        log_frameprob = np.empty((x.shape[0], self.n_components))
        for k, (weights, covariance) in enumerate(zip(self._weights(), self._full_covars())):
            residuals = x - regressors @ weights.T
            factor = linalg.cholesky(covariance, lower=True)
            whitened = linalg.solve_triangular(factor, residuals.T, lower=True)
            log_frameprob[:, k] = -0.5 * (
                n_outputs * np.log(2 * np.pi)
                + 2 * np.log(np.diag(factor)).sum()
                + (whitened**2).sum(axis=0)
            )
        return log_frameprob, None

    def _emission_features(self, X, cache):
        # phi(x_t) = (z z^T, z x^T, x x^T), the same for every state: the
        # weighted least squares of each state needs these sums only.
        x, regressors = self._split_design(X)
        features = np.concatenate(
            [
                np.einsum("ti,tj->tij", regressors, regressors).reshape(len(x), -1),
                np.einsum("ti,tj->tij", regressors, x).reshape(len(x), -1),
                np.einsum("ti,tj->tij", x, x).reshape(len(x), -1),
            ],
            axis=1,
        )
        return np.broadcast_to(features[:, None, :], (len(x), self.n_components, features.shape[1]))

    def _statistics_from_features(self, sums):
        n_outputs = self._n_outputs
        n_regressors = self._lags * n_outputs + self.__dict__.get("n_controls_", 0) + 1
        n_components = sums.shape[0]
        split = n_regressors**2
        cross = split + n_regressors * n_outputs
        return {
            "zz": sums[:, :split].reshape(n_components, n_regressors, n_regressors),
            "zx": sums[:, split:cross].reshape(n_components, n_regressors, n_outputs),
            "xx": sums[:, cross:].reshape(n_components, n_outputs, n_outputs),
        }

    def _emission_mstep(self, statistics):
        zz, zx, xx = statistics["zz"], statistics["zx"], statistics["xx"]
        post = zz[:, -1, -1]
        responsible = post > 1e-12 * max(post.sum(), 1.0)
        weights = self._weights()
        n_regressors = zz.shape[1]
        # Which coefficients EM learns: the others stay as they are, their
        # part of the prediction moved to the left-hand side.
        learned = np.zeros(n_regressors, dtype=bool)
        learned[:-1] = "w" in self.params
        learned[-1] = "b" in self.params
        ridge = np.full(n_regressors, float(self.regression_prior))
        ridge[-1] = 0.0
        new_weights = weights.copy()
        if learned.any():
            fixed = ~learned
            for k in np.flatnonzero(responsible):
                gram = zz[k][np.ix_(learned, learned)] + np.diag(ridge[learned])
                right = zx[k][learned] - zz[k][np.ix_(learned, fixed)] @ weights[k][:, fixed].T
                try:
                    solution = linalg.solve(gram, right, assume_a="pos")
                except (linalg.LinAlgError, ValueError):
                    solution = linalg.lstsq(gram, right)[0]
                if np.all(np.isfinite(solution)):
                    new_weights[k][:, learned] = solution.T
        self.coefs_, self.intercepts_ = new_weights[:, :, :-1], new_weights[:, :, -1].copy()
        if "c" not in self.params:
            return
        covars = np.empty_like(xx)
        n_outputs = xx.shape[1]
        for k in range(len(xx)):
            B = new_weights[k].T  # (P + 1, D)
            scatter = xx[k] - zx[k].T @ B - B.T @ zx[k] + B.T @ zz[k] @ B
            scatter += B[:-1].T @ np.diag(ridge[:-1]) @ B[:-1]  # the ridge's prior term
            with np.errstate(invalid="ignore", divide="ignore"):
                covars[k] = (self.covars_prior * np.eye(n_outputs) + scatter) / post[k]
            covars[k] = (covars[k] + covars[k].T) / 2
        if self.covariance_type == "diag":
            covars = np.stack([np.diag(c) for c in covars])
        self.covars_ = keep_valid_covariances(
            covars, self.covars_, self.covariance_type, responsible
        )

    def _emission_n_parameters(self):
        n_components, n_outputs = self.intercepts_.shape
        return {
            "w": int(self.coefs_.size),
            "b": n_components * n_outputs,
            "c": n_components
            * (n_outputs * (n_outputs + 1) // 2 if self.covariance_type == "full" else n_outputs),
        }

    def _sample_emissions(self, states, random_state):
        n_lags, n_outputs = self._lags, self._n_outputs
        controls, history = self._sample_controls, self._sample_history
        weights, factors = self._weights(), np.linalg.cholesky(self._full_covars())
        X = np.empty((len(states), n_outputs))
        past = list(history[::-1])  # most recent first
        for t, k in enumerate(states):
            regressors = np.concatenate(past[:n_lags] + [controls[t], [1.0]])
            X[t] = weights[k] @ regressors + factors[k] @ random_state.standard_normal(n_outputs)
            past.insert(0, X[t])
        return X

    # -- public methods (controls=: ControlsMixin) ------------------------------

    def sample(
        self, n_samples=1, random_state=None, currstate=None, *, controls=None, initial_lags=None
    ):
        """Draw a sequence; see :meth:`GaussianHMM.sample`.

        ``initial_lags`` (n_lags, n_features): the ``n_lags`` rows before the
        first drawn row, oldest first (required when ``n_lags > 0``; not
        returned).  ``controls`` (n_samples, n_controls): the inputs of the
        drawn rows (required when the model has controls).
        """
        self._check_fitted_parameters()
        n_outputs = self._n_outputs
        if self._lags > 0:
            if initial_lags is None:
                raise ValueError(
                    f"sample needs initial_lags of shape (n_lags={self._lags}, {n_outputs}): "
                    "the rows the first draw regresses on."
                )
            history = np.asarray(initial_lags, dtype=np.float64)
            if history.shape != (self._lags, n_outputs) or not np.all(np.isfinite(history)):
                raise ValueError(
                    f"initial_lags must be finite, of shape ({self._lags}, {n_outputs}), got "
                    f"shape {history.shape}."
                )
        else:
            history = np.zeros((0, n_outputs))
        self._sample_history = history
        try:
            return super().sample(n_samples, random_state, currstate, controls=controls)
        finally:
            del self._sample_history


class LinearRegressionHMM(AutoregressiveHMM):
    """Hidden Markov model whose states emit linear regressions on inputs.

    x_t | z_t = k ~ N(W_k u_t + b_k, Sigma_k), the inputs u_t passed as
    ``controls=``: :class:`AutoregressiveHMM` with ``n_lags=0`` (every row is
    emitted).  ``coefs_`` are the W_k, (n_components, n_features, n_controls).
    Parameters and methods as :class:`AutoregressiveHMM`'s, without ``n_lags``.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.hmm import LinearRegressionHMM
    >>> rng = np.random.default_rng(0)
    >>> u = rng.normal(size=(600, 1))
    >>> slope = np.where(np.arange(600) % 200 < 100, 2.0, -2.0)[:, None]
    >>> x = slope * u + 0.1 * rng.normal(size=(600, 1))
    >>> model = LinearRegressionHMM(2, n_iter=50, random_state=0).fit(x, controls=u)
    >>> bool(np.allclose(np.sort(model.coefs_.ravel()), [-2.0, 2.0], atol=0.1))
    True
    """

    n_lags = 0

    def __init__(
        self,
        n_components=1,
        covariance_type="full",
        min_covar=1e-3,
        regression_prior=0.0,
        covars_prior=1e-2,
        startprob_prior=1.0,
        transmat_prior=1.0,
        algorithm="viterbi",
        random_state=None,
        n_iter=10,
        tol=1e-2,
        verbose=False,
        params="stwbc",
        init_params="stwbc",
        implementation="log",
        *,
        coefs_init=None,
        intercepts_init=None,
        covars_init=None,
        startprob_init=None,
        transmat_init=None,
        n_init=1,
        n_jobs=None,
        acceleration=None,
        learning_method="batch",
        learning_decay=0.6,
        learning_offset=0.0,
        total_samples=None,
        batch_size=32,
    ):
        kwargs = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        super().__init__(n_lags=0, **kwargs)
        del self.__dict__["n_lags"]  # the class's 0, not a hyperparameter
