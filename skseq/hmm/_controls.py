"""``controls=``: inputs u_t, one row per row of ``X``, on every public method of an HMM.

:class:`ControlsMixin` goes before the HMM base in the bases of a model whose
emissions or transitions depend on inputs (``class Model(ControlsMixin,
BaseHMM)``).  It gives every public method a ``controls=`` keyword, requests
``controls`` for metadata routing as ``sequence_ids`` is (so a ``Pipeline`` or
``GridSearchCV`` carries them), and holds the caller's controls for the
duration of the call: the model's ``_prepare`` reads them, validated, with
:meth:`ControlsMixin._checked_controls`, and ``_sample_emissions`` (or a
transition model's sampler) reads ``_sample_controls`` during :meth:`sample`.
Models put the controls where every path that splits, chunks or batches the
rows carries them: as extra columns of EM's data (AutoregressiveHMM stacks
them into each row's regressors).
"""

import contextlib

import numpy as np

from ..inference.kalman import check_controls

__all__ = ["ControlsMixin"]

_ROUTED = {"controls": True}


class ControlsMixin:
    """``controls=`` (inputs u_t, one row per row of ``X``) on an HMM's public methods.

    ``n_controls_`` (set by ``fit`` / the first ``partial_fit``) is the number
    of control columns, 0 for a model fitted without controls: it then
    refuses controls, and a model fitted with them requires them on every
    later call.  Controls must be finite (NaN in controls is a ValueError:
    a missing input has no model here), 2-D (a 1-D array is one column) with
    one row per row of ``X``.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.hmm import LinearRegressionHMM  # ControlsMixin, BaseHMM
    >>> rng = np.random.default_rng(0)
    >>> u = rng.normal(size=(200, 1))
    >>> x = 2.0 * u + 0.1 * rng.normal(size=(200, 1))
    >>> model = LinearRegressionHMM(1, n_iter=5).fit(x, controls=u)
    >>> model.n_controls_, model.predict(x, controls=u).shape
    (1, (200,))
    """

    __metadata_request__fit = _ROUTED
    __metadata_request__partial_fit = _ROUTED
    __metadata_request__score = _ROUTED
    __metadata_request__predict = _ROUTED
    __metadata_request__predict_proba = _ROUTED

    # -- the caller's controls, held for the call -------------------------------

    @contextlib.contextmanager
    def _given_controls(self, controls):
        """Hold the caller's ``controls`` for :meth:`_checked_controls` (the
        outermost public call's: a public method calling another keeps them)."""
        if "_controls" in self.__dict__:
            yield
            return
        self._controls = controls
        try:
            yield
        finally:
            del self._controls
            self._forget_call_state()

    def _forget_call_state(self):
        """Drop what ``_prepare`` kept for the call (models extend it)."""

    def _checked_controls(self, n_samples, reset):
        """The held controls as a finite (n_samples, n_controls_) array.

        ``reset`` (fit's or the first partial_fit's call) sets ``n_controls_``
        from them; (n_samples, 0) when the model has no controls.
        """
        controls = self.__dict__.get("_controls")
        if reset:
            if controls is None:
                self.n_controls_ = 0
            else:
                shape = np.shape(controls)
                if len(shape) not in (1, 2):
                    raise ValueError(
                        f"controls must be 2-D (n_samples, n_controls), got shape {shape}."
                    )
                self.n_controls_ = 1 if len(shape) == 1 else shape[1]
        elif not hasattr(self, "n_controls_"):
            self.n_controls_ = 0  # parameters set by hand
        if controls is not None and self.n_controls_ == 0:
            raise ValueError(
                f"{type(self).__name__} was fitted without controls; do not pass controls."
            )
        return check_controls(controls, n_samples, self.n_controls_)

    # -- public methods with controls ---------------------------------------------

    def fit(self, X, y=None, *, lengths=None, sequence_ids=None, known_states=None, controls=None):
        """Estimate the parameters by EM; see :meth:`skseq.GaussianHMM.fit`.

        ``controls`` : array-like of shape (n_samples, n_controls), optional, the
        inputs u_t, one row per row of ``X`` (routed as ``sequence_ids``).
        """
        with self._given_controls(controls):
            return super().fit(
                X, y, lengths=lengths, sequence_ids=sequence_ids, known_states=known_states
            )

    def partial_fit(
        self,
        X,
        y=None,
        *,
        lengths=None,
        sequence_ids=None,
        new_sequence=False,
        known_states=None,
        controls=None,
    ):
        """One step of stochastic EM on a batch; see :meth:`skseq.GaussianHMM.partial_fit`.

        ``controls`` : the inputs of the batch's rows, one row per row of ``X``.
        A batch that continues the stream continues its sequence: the
        forward message, and for a model whose rows regress on earlier rows
        (AutoregressiveHMM) those rows too, carry over from the last call.
        """
        with self._given_controls(controls):
            return super().partial_fit(
                X,
                y,
                lengths=lengths,
                sequence_ids=sequence_ids,
                new_sequence=new_sequence,
                known_states=known_states,
            )

    def score(
        self, X, y=None, *, lengths=None, sequence_ids=None, sample_weight=None, controls=None
    ):
        """Log-likelihood of ``X`` given its ``controls``; see :meth:`skseq.GaussianHMM.score`."""
        with self._given_controls(controls):
            return super().score(
                X, y, lengths=lengths, sequence_ids=sequence_ids, sample_weight=sample_weight
            )

    def score_sequences(self, X, *, lengths=None, sequence_ids=None, controls=None):
        """Log-likelihood of each sequence given its ``controls``."""
        with self._given_controls(controls):
            return super().score_sequences(X, lengths=lengths, sequence_ids=sequence_ids)

    def score_samples(self, X, lengths=None, *, sequence_ids=None, controls=None):
        """Log-likelihood and the posterior state probabilities, given ``controls``."""
        with self._given_controls(controls):
            return super().score_samples(X, lengths, sequence_ids=sequence_ids)

    def predict_proba(self, X, lengths=None, *, sequence_ids=None, controls=None):
        """Posterior state probabilities given ``controls``."""
        with self._given_controls(controls):
            return super().predict_proba(X, lengths, sequence_ids=sequence_ids)

    def decode(self, X, lengths=None, algorithm=None, *, sequence_ids=None, controls=None):
        """Most likely states given ``controls``; see :meth:`skseq.GaussianHMM.decode`."""
        with self._given_controls(controls):
            return super().decode(X, lengths, algorithm, sequence_ids=sequence_ids)

    def predict(self, X, lengths=None, *, sequence_ids=None, controls=None):
        """Most likely state of each row given ``controls``."""
        with self._given_controls(controls):
            return super().predict(X, lengths, sequence_ids=sequence_ids)

    def filter(self, X, *, lengths=None, sequence_ids=None, controls=None):
        """Filtered state probabilities given ``controls``."""
        with self._given_controls(controls):
            return super().filter(X, lengths=lengths, sequence_ids=sequence_ids)

    def predict_next_state_proba(self, X, *, lengths=None, sequence_ids=None, controls=None):
        """p(z_{t+1} | x_1..x_t, controls) of each row."""
        with self._given_controls(controls):
            return super().predict_next_state_proba(X, lengths=lengths, sequence_ids=sequence_ids)

    def aic(self, X, lengths=None, *, sequence_ids=None, controls=None):
        """Akaike information criterion on ``X`` (and its ``controls``); lower is better."""
        with self._given_controls(controls):
            return super().aic(X, lengths, sequence_ids=sequence_ids)

    def bic(self, X, lengths=None, *, sequence_ids=None, controls=None):
        """Bayesian information criterion on ``X`` (and its ``controls``); lower is better."""
        with self._given_controls(controls):
            return super().bic(X, lengths, sequence_ids=sequence_ids)

    def filter_stream(self, X, *, new_sequence=False, controls=None):
        """Filtered state probabilities of new rows of a stream, given their
        ``controls``; see :meth:`skseq.GaussianHMM.filter_stream`."""
        with self._given_controls(controls):
            return super().filter_stream(X, new_sequence=new_sequence)

    def filter_update(self, x, *, controls=None):
        """Advance the online filter by one row ``x`` with its ``controls`` row
        (n_controls,); see :meth:`skseq.GaussianHMM.filter_update`."""
        row_controls = None if controls is None else np.reshape(controls, (1, -1))
        return self.filter_stream(np.reshape(x, (1, -1)), controls=row_controls)[0]

    def reset_filter(self, X=None, *, controls=None):
        """Restart the online filter, from the history ``X`` (with its
        ``controls``) when given; see :meth:`skseq.GaussianHMM.reset_filter`."""
        with self._given_controls(controls):
            return super().reset_filter(X)

    def sample(self, n_samples=1, random_state=None, currstate=None, *, controls=None):
        """Draw a sequence; see :meth:`skseq.GaussianHMM.sample`.

        ``controls`` (n_samples, n_controls): the inputs of the drawn rows
        (required when the model has controls), in ``_sample_controls``
        while the draws are made.
        """
        if not hasattr(self, "n_controls_"):
            self.n_controls_ = 0
        if controls is not None and self.n_controls_ == 0:
            raise ValueError(f"{type(self).__name__} has no controls; do not pass controls.")
        self._sample_controls = check_controls(controls, n_samples, self.n_controls_)
        try:
            return super().sample(n_samples, random_state, currstate)
        finally:
            del self._sample_controls
