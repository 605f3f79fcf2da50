"""Streams of the linear-Gaussian SSM: stochastic EM on chunks and online filtering.

The hooks of the stream engine (:meth:`skseq.base.BaseEM._partial_fit`):
chunks of one long sequence continue it through the forward-only smoothing
message of :func:`skseq.inference.kalman.kalman_forward_smoothing`; and the
online filter that continues the filtered state of the stream's last row
(doc/user_guide/lgssm.rst, doc/user_guide/stochastic_em.rst).
"""

import numpy as np
from sklearn.utils.validation import check_is_fitted

from .._validation import check_bool_param, masked_as_nan
from ..base import SufficientStatistics
from ..inference.kalman import (
    _filter_last_offsets,
    _filter_offsets,
    _filter_step,
    _forward_smoothing_rows,
    check_controls,
    check_log_likelihood_overflow,
    check_matrix,
    check_state_covariance,
)


class LGSSMStreams:
    """``partial_fit`` and the online filter of :class:`~skseq.lds.LinearGaussianSSM` (a mixin)."""

    def partial_fit(
        self, X, y=None, *, lengths=None, sequence_ids=None, controls=None, new_sequence=False
    ):
        """One step of stochastic EM on a batch of rows.

        The E step runs on the batch only; its statistics are blended into the
        running statistics, s = (1 - rho) s + rho (N / B) s_batch with
        ``rho = (learning_offset + n_batch_iter_) ** -learning_decay``, and
        the M step maps them to parameters.  The first call initialises the
        model from its batch (as :meth:`fit` does); a model fitted with
        :meth:`fit` continues from its parameters.

        Consecutive calls on consecutive chunks of one long sequence continue
        it: the first sequence of ``X`` continues the last sequence of the
        previous call, through a forward-only smoothing message whose size
        does not depend on how many rows have passed.  Each chunk contributes
        the change it makes to the smoothed statistics of the whole sequence
        so far (its own rows, the transition across the chunk boundary, and
        the revision of the earlier rows in the light of the new ones), so at
        fixed parameters the chunks add up to exactly the statistics of the
        whole sequence (see :doc:`/user_guide/stochastic_em`).  Sequences in
        between the first and the last of ``X`` are complete and go through
        the ordinary E step (in threads with ``n_jobs``).  Afterwards
        ``filter_state_mean_`` and ``filter_state_covariance_`` hold the
        filtered state of the last row, from which :meth:`filter_update`
        continues the stream.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : None
            Ignored.
        lengths, sequence_ids, controls
            As in :meth:`fit`.  When the first sequence of ``X`` continues the
            stream, the control of its first row drives the transition into
            it.
        new_sequence : bool, default=False
            True when the first sequence of ``X`` starts afresh rather than
            continuing the last sequence of the previous call.

        Returns
        -------
        self : LinearGaussianSSM
        """
        self._refuse_diffuse("partial_fit")
        return self._partial_fit(X, y, lengths, sequence_ids, new_sequence, controls=controls)

    # The hooks of the stream engine (BaseEM._partial_fit).

    _stream_attributes = ("filter_state_mean_", "filter_state_covariance_")

    def _is_new_stream(self):
        return not hasattr(self, "transition_matrix_")

    def _validate_stream_batch(
        self, X, y, lengths, sequence_ids, *, first_call, continues, controls
    ):
        """Validate a batch; return the stacked ``[X, controls]`` rows and offsets."""
        X, offsets, controls = self._validate_sequences(
            X, y, lengths, sequence_ids, controls, reset=first_call, method="partial_fit"
        )
        # A chunk that continues the stream may be entirely NaN: the sequence is not.
        checked = 1 if continues else 0
        if checked < len(offsets) - 1:
            start = offsets[checked]
            self._reject_empty_sequences(X[start:], offsets[checked:] - start)
        if first_call:
            self._refuse_time_varying_init()
            self.n_controls_ = controls.shape[1]
            self._n_features_out = self.n_components
        else:
            # Continue from validated float64 copies of the fitted arrays.
            self._set_parameters(self._checked_parameters("partial_fit")._asdict())
        return self._stack(X, controls), offsets

    def _publish_stream(self, carried):
        self.filter_state_mean_ = carried.filtered_mean.copy()
        self.filter_state_covariance_ = carried.filtered_covariance.copy()

    @property
    def filtered_state_(self):
        """The filtered state of the stream's last row, ``(mean, covariance)``.

        The same name as the HMMs' ``filtered_state_`` (their filtered
        distribution of the last row); here the filtered Gaussian
        N(``filter_state_mean_``, ``filter_state_covariance_``).
        """
        if "filter_state_mean_" not in self.__dict__:
            raise AttributeError(
                "filtered_state_ exists once partial_fit, filter_update or "
                "reset_filter(history) has been called."
            )
        return self.filter_state_mean_, self.filter_state_covariance_

    def _advance_stream(self, X, carried):
        """Forward-only smoothing over the rows of one sequence (part).

        ``X`` is the stacked ``[X, controls]`` array of rows that continue the
        sequence whose message is ``carried`` (None: they start a sequence).
        Returns the statistics these rows add (at fixed parameters, exactly
        what the whole-sequence E step adds for them, revisions of earlier
        rows included), their log-likelihood given the past, and the new message.
        """
        if carried is not None:
            k = self.n_components
            if np.shape(carried[0]) != (k,) or np.shape(carried[1]) != (k, k):
                raise ValueError(
                    f"The stream's filtered state has {np.shape(carried[0])[0]} dimensions but "
                    f"the model has n_components={k}; pass new_sequence=True."
                )
        n_features = self.n_features_in_
        statistics, log_likelihood, stream = _forward_smoothing_rows(
            self._model(), X[:, :n_features], X[:, n_features:], carried
        )
        return SufficientStatistics(statistics), log_likelihood, stream

    def _checked_filter_state(self):
        """The stream's filtered state, validated against ``n_components``."""
        k = self.n_components
        try:
            mean = check_matrix(self.filter_state_mean_, "filter_state_mean_", (k,))
            covariance = check_state_covariance(
                self.filter_state_covariance_, "filter_state_covariance_", k
            )
        except ValueError as error:
            raise ValueError(
                f"{error} The stream's state does not fit the model (n_components={k}); "
                "call reset_filter()."
            ) from None
        return mean, covariance

    # -- online filtering -----------------------------------------------------------
    #
    # The online-filter API of every family: filter_stream (rows), filter_update
    # (one row, pykalman's name), reset_filter and filtered_state_.

    def filter_stream(self, X, *, new_sequence=False, controls=None):
        """Filtered states of the next rows of a stream, without learning.

        Continues from ``filtered_state_``, the filtered state after the last
        row seen by :meth:`partial_fit`, :meth:`filter_update`,
        :meth:`reset_filter` or the previous call, and updates it: the rows
        are the continuation of that sequence, as for the HMMs'
        ``filter_stream``.  With no such state (after :meth:`fit` or
        ``reset_filter()``), or with ``new_sequence=True``, ``X[0]`` starts a
        sequence (conditioned on the prior N(mu0, Sigma0)).  Row by row and
        to the last bit, the result is :meth:`filter` on the whole stream.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The next rows of one sequence; NaN marks a missing entry.
        new_sequence : bool, default=False
            Start a new sequence at ``X[0]``.
        controls : array-like of shape (n_samples, n_controls), optional
            Required when the model has controls.  The control of ``X[0]``
            drives the transition into it when the rows continue the stream
            (and is unused when they start a sequence).

        Returns
        -------
        means : ndarray of shape (n_samples, n_components)
            E[z_t | all rows of the stream up to t].
        covariances : ndarray of shape (n_samples, n_components, n_components)
            Cov(z_t | all rows of the stream up to t).

        Examples
        --------
        >>> import numpy as np
        >>> from skseq.lds import LinearGaussianSSM
        >>> X = np.cumsum(np.random.default_rng(0).normal(size=(60, 2)), axis=0)
        >>> model = LinearGaussianSSM(n_components=2, n_iter=20).fit(X)
        >>> first, _ = model.filter_stream(X[:25])
        >>> then, _ = model.filter_stream(X[25:])
        >>> bool(np.array_equal(np.vstack([first, then]), model.filter(X)[0]))
        True
        """
        self._refuse_diffuse("filter_stream")
        check_bool_param(new_sequence, "new_sequence")
        X, offsets, controls = self._prepare(X, None, None, None, controls)
        model = self._checked_model("filter_stream")
        continues = not new_sequence and hasattr(self, "filter_state_mean_")
        if not continues:
            # The rows start a sequence: the batch filter over them is the stream.
            result = _filter_offsets(model, X, controls, offsets)
            self._check_finite(result.sequence_log_likelihood)
            means, covariances = result.filtered_means, result.filtered_covariances
        else:
            # Each row continues the previous one: the batch filter's own step.
            previous = self._checked_filter_state()
            k = self.n_components
            means, covariances = np.empty((X.shape[0], k)), np.empty((X.shape[0], k, k))
            for t in range(X.shape[0]):
                control = controls[t] if self.n_controls_ else None
                previous = _checked_filter_step(model, X[t], control, previous, f"X[{t}]")
                means[t], covariances[t] = previous
        self.filter_state_mean_ = means[-1].copy()
        self.filter_state_covariance_ = covariances[-1].copy()
        return means, covariances

    def reset_filter(self, X=None, *, controls=None):
        """Restart the stream of :meth:`filter_update` and :meth:`filter_stream`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), optional
            A history, taken as one sequence: the stream continues from its
            last filtered state.  None: the next :meth:`filter_update` starts
            from the prior N(mu0, Sigma0).
        controls : array-like of shape (n_samples, n_controls), optional
            The controls of the history.

        Returns
        -------
        self : LinearGaussianSSM
        """
        self._refuse_diffuse("reset_filter")
        check_is_fitted(self, msg=self._not_fitted_message)
        for name in ("filter_state_mean_", "filter_state_covariance_"):
            if hasattr(self, name):
                delattr(self, name)
        if X is not None:
            X, offsets, controls = self._prepare(X, None, None, None, controls)
            last_means, last_covariances, sequence_log_likelihood, _ = _filter_last_offsets(
                self._checked_model("reset_filter"), X, controls, offsets
            )
            self._check_finite(sequence_log_likelihood)
            self.filter_state_mean_ = last_means[0]
            self.filter_state_covariance_ = last_covariances[0]
        return self

    def filter_update(self, x, control=None):
        """Advance an online Kalman filter by one observation (pykalman's name).

        :meth:`filter_stream` on one row (the HMMs have the same method).
        The stream's filtered state is kept on the estimator
        (``filter_state_mean_``, ``filter_state_covariance_``).  The first call
        after :meth:`fit` or ``reset_filter()`` conditions the prior
        N(mu0, Sigma0) on ``x`` (as the first row of a sequence); later calls
        first propagate the state with the transition (and ``control``).  After
        ``reset_filter(history)`` the stream continues the history, and after
        :meth:`partial_fit` the last row it saw.  The result equals, row by
        row and to the last bit, :meth:`filter` on the whole stream.

        Parameters
        ----------
        x : array-like of shape (n_features,)
            The new observation; NaN entries are missing (all NaN: predict
            only).
        control : array-like of shape (n_controls,), optional
            u_t for this step; required when the model has controls, except
            on the first step of a stream, where it is unused.

        Returns
        -------
        mean : ndarray of shape (n_components,)
            E[z_t | x_1..x_t].
        covariance : ndarray of shape (n_components, n_components)
            Cov(z_t | x_1..x_t).

        Examples
        --------
        >>> import numpy as np
        >>> from skseq.lds import LinearGaussianSSM
        >>> rng = np.random.default_rng(0)
        >>> X = np.cumsum(rng.normal(size=(50, 2)), axis=0)
        >>> model = LinearGaussianSSM(n_components=2, n_iter=100, tol=0.1).fit(X)
        >>> for x in X[:10]:
        ...     mean, covariance = model.filter_update(x)
        >>> batch_means, _ = model.filter(X[:10])
        >>> bool(np.array_equal(mean, batch_means[-1]))
        True
        """
        self._refuse_diffuse("filter_update")
        model = self._checked_model("filter_update")
        x = masked_as_nan(x, missing_supported=True, owner="filter_update", name="x")
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        if x.shape[0] != self.n_features_in_:
            raise ValueError(
                f"x has {x.shape[0]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features."
            )
        if np.isinf(x).any():
            raise ValueError("x contains infinity (NaN marks a missing value).")
        has_previous = hasattr(self, "filter_state_mean_")
        if has_previous and self.n_controls_ > 0:
            control = check_controls(
                None if control is None else np.reshape(control, (1, -1)),
                1,
                self.n_controls_,
                name="control",
            )[0]
        else:
            control = None
        previous = self._checked_filter_state() if has_previous else None
        mean, covariance = _checked_filter_step(model, x, control, previous, "x")
        self.filter_state_mean_ = mean
        self.filter_state_covariance_ = covariance
        return mean.copy(), covariance.copy()


def _checked_filter_step(model, x, control, previous, name):
    """One step of the online filter: ``(mean, covariance)``, or a clear error.

    A covariance that lost positive definiteness is a LinAlgError, a
    log-density that overflowed to -inf a ValueError naming ``name``.
    """
    mean, covariance, log_predictive = _filter_step(model, x, control, previous)
    if np.isnan(log_predictive):
        raise np.linalg.LinAlgError(
            "The filter update failed numerically (innovation covariance not positive definite)."
        )
    check_log_likelihood_overflow(np.array([log_predictive]), name)
    return mean, covariance
