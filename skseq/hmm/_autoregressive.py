"""Emissions that regress on the past and on inputs: AutoregressiveHMM and LinearRegressionHMM.

State k emits x_t ~ N(sum_l A_{k,l} x_{t-l} + V_k u_t + b_k, Sigma_k).  EM's data are
the emitted rows with their regressors as extra columns, ``[x_t, x_{t-1}, ..., x_{t-L},
u_t]`` (and the known states after them, :meth:`BaseHMM._stack_known_states`): every
path that splits, chunks or batches rows carries the regressors with them.  The first
``n_lags`` rows of each sequence only condition (they are not emitted).
"""

from typing import NamedTuple

import numpy as np
from scipy import linalg

from .._validation import integer_rule, real_rule
from ..base import SufficientStatistics
from ..inference.gaussian import _conditional_gaussians, _marginal_log_density
from ..inference.kalman import check_controls
from ._base import BaseHMM, feature_units, fit_kmeans
from ._controls import ControlsMixin
from ._gaussian import (
    distribute_covariance,
    initial_covariance,
    keep_valid_covariances,
    observed_rows,
    validate_gaussian_X,
)

__all__ = ["AutoregressiveHMM", "LinearRegressionHMM"]


class LaggedStream(NamedTuple):
    """The message a stream carries across a chunk boundary: BaseHMM's
    forward-only smoothing ``message`` and the last ``n_lags`` rows, oldest first."""

    message: object
    lags: np.ndarray


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
    filtered_lags_ : ndarray of shape (n_lags, n_features)
        The last ``n_lags`` rows of the stream (oldest first), after
        :meth:`partial_fit` or :meth:`filter_stream`.
    startprob_, transmat_, monitor_, n_features_in_
        As in :class:`GaussianHMM`.

    Notes
    -----
    ``controls`` (one row per row of ``X``) are taken by every public method
    (:class:`~skseq.hmm._controls.ControlsMixin`) and routed by metadata routing
    as ``sequence_ids`` are (requested by default).  ``known_states`` has one
    label per row of ``X``; those of the conditioning rows are not used.
    ``startprob_`` is the distribution of the state of the first emitted row
    (row ``n_lags + 1`` of each sequence).  A row that is NaN throughout is
    missing: a step emits only when its row and its ``n_lags`` lags are
    observed (a missing row and the ``n_lags`` steps after it emit nothing;
    with ``n_lags=0`` a missing row emits nothing, exactly).  A row with some
    entries NaN emits, when its step's lags are observed, the marginal
    density of its observed entries (the missing ones integrated out, as in
    :class:`GaussianHMM`), and a step with a lag that has any entry missing
    emits nothing; the M step adds a partly observed row's expected
    statistics (the conditional Gaussian of its missing entries under each
    state): exact EM (user guide, "Partly observed rows").  NaN in
    ``controls`` is a ValueError.  :meth:`bic` counts the emitting rows.
    Streams carry the last ``n_lags`` rows with the forward message: a
    :meth:`partial_fit` or :meth:`filter_stream` call that continues the
    stream emits all its rows, regressed on the rows before them
    (``filtered_lags_``), so a sequence cut into batches gives, at fixed
    parameters, what one batch gives.  A sequence needs ``n_lags + 1`` rows,
    except the last of a :meth:`partial_fit` batch, whose rows wait as lags
    for the next batch.  :meth:`predict_next` forecasts the row after each
    sequence (user guide, "Autoregressive and regression emissions").

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
        for name in ("_emitted_rows", "_continued_lags", "_tail_lags"):
            self.__dict__.pop(name, None)

    @property
    def _lags(self):
        return self.n_lags

    def _validate_X(self, X, reset):
        # NaN marks a missing entry (a row NaN throughout: a missing row).
        return validate_gaussian_X(self, X, reset)

    def _prepare(self, X, y, lengths, sequence_ids, *, reset, method="fit"):
        """EM's data: one row ``[x_t, x_{t-1}, ..., x_{t-L}, u_t]`` per emitted step.

        The first ``n_lags`` rows of each sequence only condition; those of
        a sequence that continues a stream (``_continued_lags``: the
        ``n_lags`` rows before ``X[0]``, oldest first) came before ``X``, so
        all its rows are steps.  A step whose row is missing or whose lags
        hold a NaN is kept, NaN, and emits nothing (:meth:`_emitting`).
        """
        if self.covariance_type not in ("full", "diag"):
            raise ValueError(
                f"{type(self).__name__} takes covariance_type 'full' or 'diag', got "
                f"{self.covariance_type!r}."
            )
        X, offsets = super()._prepare(X, y, lengths, sequence_ids, reset=reset, method=method)
        controls = self._checked_controls(X.shape[0], reset)
        n_lags = self._lags
        carried = self.__dict__.get("_continued_lags") if n_lags else None
        lengths = np.diff(offsets)
        # The rows a sequence has before its first row here: the stream's, for
        # a sequence that continues it (fewer than n_lags when it started
        # with fewer rows), none for one that starts here.
        before = np.zeros(len(lengths), dtype=np.intp)
        if carried is not None:
            before[0] = len(carried)
        short = lengths + before <= n_lags
        if method == "partial_fit":
            short[-1] = False  # the next batch may bring the rest of its lags
        if np.any(short):
            index = int(np.flatnonzero(short)[0])
            raise ValueError(
                f"Sequence {index} has n_samples={lengths[index]} rows; with n_lags={n_lags} a "
                f"sequence needs at least {n_lags + 1} (its first {n_lags} only condition)."
            )
        shift = before[0]  # rows of ``padded`` before X[0]
        padded = X if carried is None else np.vstack([carried, X])
        starts = offsets[:-1] + shift + np.maximum(n_lags - before, 0)
        stops = offsets[1:] + shift
        steps = np.maximum(stops - starts, 0)
        emitted = np.concatenate(
            [np.arange(start, stop) for start, stop in zip(starts, stops)] + [np.zeros(0, int)]
        )
        self._emitted_rows = (X.shape[0], emitted - shift)
        design = np.column_stack(
            [padded[emitted]]
            + [padded[emitted - lag] for lag in range(1, n_lags + 1)]
            + [controls[emitted - shift]]
        )
        # The stream's lags after X: the last n_lags rows of its last sequence
        # (all of them while it has fewer).
        last_start = offsets[-2] + shift - before[-1]
        self._tail_lags = padded[max(last_start, len(padded) - n_lags) :].copy()
        return design, np.concatenate([[0], np.cumsum(steps)])

    def _next_lags(self, design):
        """The regressors x_{t}, x_{t-1}, .., x_{t-L+1} of the step after each
        design row (most recent first, as the design's lags): its first L blocks."""
        return design[:, : self._lags * self._n_outputs]

    def _emitting(self, X):
        """Which rows of EM's data emit: lags (and controls) observed throughout
        and at least one entry of the row observed."""
        n_outputs = self._n_outputs
        nan = np.isnan(X)
        return ~nan[:, n_outputs:].any(axis=1) & ~nan[:, :n_outputs].all(axis=1)

    def _partly_observed(self, X, emitting):
        """Indices of the emitting rows of EM's data with some entries of x_t NaN."""
        return np.flatnonzero(emitting & np.isnan(X[:, : self._n_outputs]).any(axis=1))

    def _conditional_rows(self, X, rows):
        """The exact E step of the partly observed ``rows`` of EM's data under each state.

        Given z_t = k the residual r = x_t - W_k z_t is N(0, Sigma_k), so the
        missing entries m have the conditional mean (W_k z_t)_m + Sigma_mo
        Sigma_oo^-1 r_o and covariance Sigma_mm - Sigma_mo Sigma_oo^-1 Sigma_om.
        Yields ``(k, rows, m, expected, covariance)`` per state and
        missingness pattern: E[x_t | x_o, z_t = k] of those rows (n, D) and
        the conditional covariance (|m|, |m|), which adds to E[x x^T] in the
        missing block.
        """
        if not len(rows):
            return
        x, regressors = self._split_design(X[rows])
        for k, (weights, covariance) in enumerate(zip(self._weights(), self._full_covars())):
            predicted = regressors @ weights.T
            for local, m, expected, conditional in _conditional_gaussians(
                x - predicted, 0.0, np.zeros((1, x.shape[1])), covariance[None], "full"
            ):
                yield k, rows[local], m, predicted[local] + expected[0], conditional[0]

    # -- streams: the last n_lags rows are part of the carried message ---------

    _stream_attributes = ("filtered_state_", "filtered_lags_")

    def _validate_stream_batch(
        self, X, y, lengths, sequence_ids, *, first_call, continues, known_states=None
    ):
        if continues:  # the batch's first sequence regresses on the stream's last rows
            self._continued_lags = self._stream.lags
        return super()._validate_stream_batch(
            X,
            y,
            lengths,
            sequence_ids,
            first_call=first_call,
            # a sequence with no step yet starts its chain in this batch
            continues=continues and self._stream.message is not None,
            known_states=known_states,
        )

    def _check_known_states_possible(self, known_states, offsets, continues=False):
        # Sequences with no step here (the last of a batch, still in its
        # conditioning rows) have no label to check.
        has_steps = np.diff(offsets) > 0
        continues = continues and bool(has_steps[0])
        offsets = np.concatenate([[0], offsets[1:][has_steps]])
        super()._check_known_states_possible(known_states, offsets, continues)

    def _advance_stream(self, X, stream):
        # BaseHMM's forward-only smoothing message, with the rows the next
        # chunk's first steps regress on.
        message = None if stream is None else stream.message
        if X.shape[0] == 0:  # a sequence still in its conditioning rows: no step yet
            return self._no_statistics(), 0.0, LaggedStream(message, self._tail_lags)
        added, log_likelihood, carried = super()._advance_stream(X, message)
        return added, log_likelihood, LaggedStream(carried, self._tail_lags)

    def _no_statistics(self):
        """The statistics of no step (zeros)."""
        n_outputs = self._n_outputs
        n_regressors = self._lags * n_outputs + self.n_controls_ + 1
        width = n_regressors**2 + n_regressors * n_outputs + n_outputs**2
        statistics = SufficientStatistics(
            start=np.zeros(self.n_components),
            trans=np.zeros((self.n_components, self.n_components)),
        )
        statistics.update(self._statistics_from_features(np.zeros((self.n_components, width))))
        return statistics

    def _partial_fit_step(self, statistics, log_likelihood, n_rows):
        if n_rows == 0:  # a batch of conditioning rows only: nothing to learn from
            self.batch_log_likelihood_ = 0.0
            return
        super()._partial_fit_step(statistics, log_likelihood, n_rows)

    def _publish_stream(self, carried):
        if carried.message is None:  # no step of the sequence seen yet
            self.__dict__.pop("filtered_state_", None)
        else:
            super()._publish_stream(carried.message)
        self.filtered_lags_ = carried.lags.copy()

    def filter_stream(self, X, *, new_sequence=False, controls=None):
        """Filtered state probabilities of new rows of a stream, without learning.

        See :meth:`skseq.GaussianHMM.filter_stream`.  The stream continues from
        ``filtered_state_`` and ``filtered_lags_`` (the last ``n_lags`` rows
        seen, oldest first): every row of ``X`` is then a step, its lags
        reaching back into the earlier rows, so rows cut into calls give what
        one call gives.  A new sequence (``new_sequence``, or after :meth:`fit`
        or ``reset_filter()``) has its first ``n_lags`` rows as conditioning
        rows, and the output has one row per step (``n_lags`` fewer rows).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        new_sequence : bool, default=False
        controls : array-like of shape (n_samples, n_controls), optional

        Returns
        -------
        filtered : ndarray of shape (n_steps, n_components)
        """
        with self._given_controls(controls):
            if not new_sequence and getattr(self, "filtered_state_", None) is not None:
                self._continued_lags = self.filtered_lags_
            filtered = super().filter_stream(X, new_sequence=new_sequence)
            self.filtered_lags_ = self._tail_lags
            return filtered

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
        return int(np.count_nonzero(~np.isnan(X[self._emitting(X), : self._n_outputs])))

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
        x, regressors = self._split_design(X[self._emitting(X)])
        n_components, n_outputs = self.n_components, x.shape[1]
        x = observed_rows(x, max(n_components, 2))  # partly observed rows: an initial value
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
        emitting = self._emitting(X)
        partial = self._partly_observed(X, emitting)
        if partial.size:
            full_rows = X
        if not emitting.all() or partial.size:
            X = np.where(emitting[:, None], np.nan_to_num(X, nan=0.0), 0.0)
        x, regressors = self._split_design(X)
        n_samples, n_outputs = x.shape
        # The whitened residuals of every state in one product:
        # L_k^{-1} (x_t - W_k z_t) is row [x_t, z_t] times [L_k^{-T}; -W_k^T L_k^{-T}].
        rows = np.column_stack([x, regressors])
        blocks = []
        log_norms = np.empty(self.n_components)
        for k, (weights, covariance) in enumerate(zip(self._weights(), self._full_covars())):
            factor = linalg.cholesky(covariance, lower=True)
            inverse_t = linalg.solve_triangular(factor, np.eye(n_outputs), lower=True).T
            blocks.append(np.vstack([inverse_t, -weights.T @ inverse_t]))
            log_norms[k] = n_outputs * np.log(2 * np.pi) + 2 * np.log(np.diag(factor)).sum()
        whitened = (rows @ np.hstack(blocks)).reshape(n_samples, self.n_components, n_outputs)
        log_frameprob = -0.5 * (log_norms + np.einsum("tkd,tkd->tk", whitened, whitened))
        if not emitting.all():
            log_frameprob[~emitting] = 0.0  # a step that emits nothing
        if partial.size:  # the marginal density of the observed entries
            x, regressors = self._split_design(full_rows[partial])
            for k, (weights, covariance) in enumerate(zip(self._weights(), self._full_covars())):
                log_frameprob[partial, k] = _marginal_log_density(
                    x - regressors @ weights.T, np.zeros((1, n_outputs)), covariance[None], "full"
                )[:, 0]
        return log_frameprob, None

    def _emission_statistics(self, X, posteriors, cache):
        # Per state, the posterior-weighted Gram matrix of the rows [z_t, x_t]
        # (z_t = [lags, controls, 1]): G_k = R^T diag(gamma(k)) R, one BLAS
        # product per state, no per-row arrays.  (R^T (gamma R) runs as a
        # general product; the symmetric A^T A of the sqrt-weighted rows,
        # which numpy hands to syrk, is about 4 times slower on tall, narrow
        # R: benchmarks/bench_autoregressive.py.)
        # A partly observed row adds its expected statistics under each state
        # (:meth:`_conditional_rows`: exact EM).
        emitting = self._emitting(X)
        partial = self._partly_observed(X, emitting)
        complete = emitting
        if partial.size:
            complete = emitting.copy()
            complete[partial] = False
        full_rows, full_posteriors = X, posteriors
        if not complete.all():
            X, posteriors = X[complete], posteriors[complete]
        x, regressors = self._split_design(X)
        rows = np.column_stack([regressors, x])
        n_regressors = regressors.shape[1]
        grams = np.empty((self.n_components, rows.shape[1], rows.shape[1]))
        for k in range(self.n_components):
            grams[k] = rows.T @ (rows * posteriors[:, k : k + 1])
        for k, pattern_rows, m, expected, conditional in self._conditional_rows(full_rows, partial):
            weights = full_posteriors[pattern_rows, k]
            imputed = np.column_stack([self._split_design(full_rows[pattern_rows])[1], expected])
            grams[k] += imputed.T @ (imputed * weights[:, None])
            block = n_regressors + m
            grams[k][block[:, None], block[None, :]] += weights.sum() * conditional
        grams = (grams + np.swapaxes(grams, 1, 2)) / 2
        return {
            "zz": grams[:, :n_regressors, :n_regressors],
            "zx": grams[:, :n_regressors, n_regressors:],
            "xx": grams[:, n_regressors:, n_regressors:],
        }

    def _emission_features(self, X, cache):
        # phi(x_t) = (z z^T, z x^T, x x^T), the same for every state (zero for a
        # step that emits nothing; a partly observed row's expectation under
        # each state): the streams' forward-only smoother sums them.
        emitting = self._emitting(X)
        partial = self._partly_observed(X, emitting)
        x, regressors = self._split_design(np.where(emitting[:, None], np.nan_to_num(X), 0.0))
        features = self._feature_rows(regressors, x)
        features[~emitting] = 0.0
        shape = (len(x), self.n_components, features.shape[1])
        if not partial.size:
            return np.broadcast_to(features[:, None, :], shape)
        features = np.repeat(features[:, None, :], self.n_components, axis=1)
        for k, rows, m, expected, conditional in self._conditional_rows(X, partial):
            features[rows, k] = self._feature_rows(regressors[rows], expected)
            n_outputs = expected.shape[1]
            second = np.zeros((n_outputs, n_outputs))
            second[m[:, None], m[None, :]] = conditional
            features[rows, k, -(n_outputs**2) :] += second.ravel()
        return features

    @staticmethod
    def _feature_rows(regressors, x):
        """(z z^T, z x^T, x x^T) of every row, flattened side by side."""
        n_rows = len(x)
        return np.concatenate(
            [
                np.einsum("ti,tj->tij", regressors, regressors).reshape(n_rows, -1),
                np.einsum("ti,tj->tij", regressors, x).reshape(n_rows, -1),
                np.einsum("ti,tj->tij", x, x).reshape(n_rows, -1),
            ],
            axis=1,
        )

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

    def _emission_coordinates(self, X):
        # SQUAREM's coordinates, unit-free: a coefficient from regressor j to
        # output d in units of sd(x_d) / sd(r_j), intercepts in those of x,
        # covariances whitened by sd(x) (full: the matrix logarithm).
        x, regressors = self._split_design(X[self._emitting(X)])
        x_units = feature_units(x)
        regressor_units = feature_units(regressors[:, :-1]) if regressors.shape[1] > 1 else []
        return {
            "coefs_": ("real", np.divide.outer(x_units, np.asarray(regressor_units))),
            "intercepts_": ("real", x_units),
            "covars_": ("covariance", x_units)
            if self.covariance_type == "full"
            else ("positive", x_units**2),
        }

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

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # a missing entry (a row NaN throughout: a missing row)
        return tags

    # -- public methods (controls=: ControlsMixin) ------------------------------

    def predict_next(
        self,
        X,
        *,
        lengths=None,
        sequence_ids=None,
        controls=None,
        future_controls=None,
        return_cov=False,
    ):
        """One-step forecast: the predictive mean (and covariance) of the row after each sequence.

        Given a sequence x_1..x_T, the next row is a mixture over its state,
        p(x_{T+1} | x_{1:T}) = sum_k p_k N(mu_k, Sigma_k), with
        p_k = p(z_{T+1} = k | x_{1:T}) (the last row of
        :meth:`predict_next_state_proba`) and mu_k = sum_l A_{k,l} x_{T+1-l}
        + V_k u_{T+1} + b_k.  Its mean is sum_k p_k mu_k and its covariance,
        by the law of total covariance, sum_k p_k (Sigma_k + (mu_k - mean)
        (mu_k - mean)^T).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        lengths, sequence_ids : see :meth:`fit`.
        controls : array-like of shape (n_samples, n_controls), optional
            The inputs of the rows of ``X``.
        future_controls : array-like of shape (n_sequences, n_controls), optional
            The input u_{T+1} of the next row of each sequence (required when
            the model has controls).
        return_cov : bool, default=False
            Also return the predictive covariances.

        Returns
        -------
        mean : ndarray of shape (n_sequences, n_features)
        cov : ndarray of shape (n_sequences, n_features, n_features)
            Only with ``return_cov``.

        Raises
        ------
        ValueError
            If one of the last ``n_lags`` rows of a sequence is missing (the
            next row's regressors are then unknown).

        Examples
        --------
        >>> import numpy as np
        >>> from skseq.hmm import AutoregressiveHMM
        >>> x = np.sin(np.arange(200) / 5.0)[:, None]
        >>> model = AutoregressiveHMM(1, n_lags=2, n_iter=5).fit(x)
        >>> mean, cov = model.predict_next(x, return_cov=True)
        >>> bool(np.allclose(mean, np.sin(200 / 5.0), atol=0.05)), cov.shape
        (True, (1, 1, 1))
        """
        with self._given_controls(controls):
            design, offsets = self._prepare_fitted(X, lengths, sequence_ids)
            last = offsets[1:] - 1
            probabilities = self._predicted_states(design, offsets)[last]
        next_lags = self._next_lags(design[last])
        unknown = np.isnan(next_lags).any(axis=1)
        if np.any(unknown):
            raise ValueError(
                f"Sequence {int(np.flatnonzero(unknown)[0])} has a missing row among its last "
                f"n_lags={self._lags} rows: the next row's regressors are unknown."
            )
        n_sequences = len(last)
        if future_controls is not None and self.n_controls_ == 0:
            raise ValueError(
                f"{type(self).__name__} was fitted without controls; do not pass future_controls."
            )
        future = check_controls(
            future_controls, n_sequences, self.n_controls_, name="future_controls"
        )
        regressors = np.column_stack([next_lags, future, np.ones(n_sequences)])
        means = np.einsum("kdp,sp->skd", self._weights(), regressors)
        mean = np.einsum("sk,skd->sd", probabilities, means)
        if not return_cov:
            return mean
        centred = means - mean[:, None, :]
        cov = np.einsum("sk,kde->sde", probabilities, self._full_covars()) + np.einsum(
            "sk,skd,ske->sde", probabilities, centred, centred
        )
        return mean, (cov + np.swapaxes(cov, 1, 2)) / 2

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
