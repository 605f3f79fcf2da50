"""The base class of every hidden Markov model in skseq.

:class:`BaseHMM` owns what does not depend on the emission model: the start
and transition probabilities, validation of ``X`` and of the sequence split,
the E step (forward-backward kernel + the emission model's statistics), the M
step for start and transition probabilities, decoding, scoring and sampling.
An emission model subclass adds:

* ``_emission_letters``: ``{letter: attribute}`` of its parameters (hmmlearn's
  ``params`` / ``init_params`` codes, e.g. ``{"m": "means_", "c": "covars_"}``);
* ``_validate_X(X, reset)``;
* ``_emission_terms(X)`` -> ``(log_frameprob, cache)``: the log-likelihood of
  every row under every state, (n_samples, n_components), and whatever the
  statistics can reuse;
* ``_initialize_emissions(X, random_state)`` (``_initial_value(attribute)``
  gives the user's ``<name>_init`` or hand-set value);
* ``_emission_statistics(X, posteriors, cache)``, ``_emission_mstep(statistics)``;
* ``_emission_n_parameters()``, ``_sample_emissions(states, random_state)``.
"""

import numbers

import numpy as np
from scipy import linalg
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from .._kernels import _hmm
from .._sequences import check_y_is_not_lengths, sequence_offsets
from ..base import BaseEM, SufficientStatistics, check_scalar_param
from ..inference.hmm import forward_backward_offsets, forward_offsets, viterbi_offsets

__all__ = ["BaseHMM"]

_PROBABILITY_ATOL = 1e-8


def normalize_rows(counts, previous):
    """Normalise rows of non-negative counts; a row summing to 0 keeps ``previous``."""
    counts = np.atleast_2d(counts)
    previous = np.atleast_2d(previous)
    sums = counts.sum(axis=-1, keepdims=True)
    empty = sums[..., 0] <= 0
    with np.errstate(invalid="ignore", divide="ignore"):
        result = counts / sums
    result[empty] = previous[empty]
    return result


def check_probability_vector(value, name, shape):
    """Validate a user-given probability vector or row-stochastic matrix."""
    try:
        value = np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be an array of probabilities: {error}") from None
    if value.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {value.shape}.")
    if not np.all(np.isfinite(value)):
        raise ValueError(f"{name} contains NaN or inf.")
    if np.any(value < 0):
        raise ValueError(f"{name} contains negative probabilities.")
    sums = value.sum(axis=-1)
    if not np.allclose(sums, 1.0, rtol=0, atol=_PROBABILITY_ATOL):
        what = "must sum to 1" if value.ndim == 1 else "rows must sum to 1"
        raise ValueError(f"{name} {what}; sums are {np.round(sums, 10)}.")
    return value


class BaseHMM(BaseEM):
    """Hidden Markov model fitted by Baum-Welch EM; see subclasses."""

    _emission_letters = {}

    __metadata_request__fit = {"sequence_ids": True}
    __metadata_request__score = {"sequence_ids": True, "sample_weight": True}
    __metadata_request__predict = {"sequence_ids": True}
    __metadata_request__predict_proba = {"sequence_ids": True}

    def __init__(
        self,
        n_components=1,
        startprob_prior=1.0,
        transmat_prior=1.0,
        algorithm="viterbi",
        random_state=None,
        n_iter=10,
        tol=1e-2,
        verbose=False,
        params="st",
        init_params="st",
        implementation="log",
        *,
        startprob_init=None,
        transmat_init=None,
        n_init=1,
        n_jobs=None,
    ):
        self.n_components = n_components
        self.startprob_prior = startprob_prior
        self.transmat_prior = transmat_prior
        self.algorithm = algorithm
        self.random_state = random_state
        self.n_iter = n_iter
        self.tol = tol
        self.verbose = verbose
        self.params = params
        self.init_params = init_params
        self.implementation = implementation
        self.startprob_init = startprob_init
        self.transmat_init = transmat_init
        self.n_init = n_init
        self.n_jobs = n_jobs

    # -- hyperparameters ----------------------------------------------------

    @property
    def _all_letters(self):
        return {"s": "startprob_", "t": "transmat_", **self._emission_letters}

    def _check_params(self):
        check_scalar_param(self.n_components, "n_components", "int", low=1)
        check_scalar_param(self.n_iter, "n_iter", "int", low=0)
        check_scalar_param(self.tol, "tol", "real", allow_inf=True)
        check_scalar_param(self.n_init, "n_init", "int", low=1)
        if self.algorithm not in ("viterbi", "map"):
            raise ValueError(f"algorithm must be 'viterbi' or 'map', got {self.algorithm!r}.")
        if self.implementation not in ("log", "scaling"):
            raise ValueError(
                f"implementation must be 'log' or 'scaling', got {self.implementation!r}."
            )
        if self.n_jobs is not None:
            check_scalar_param(self.n_jobs, "n_jobs", "int")
        for name in ("params", "init_params"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise TypeError(f"{name} must be a string of parameter letters, got {value!r}.")
            unknown = set(value) - set(self._all_letters)
            if unknown:
                raise ValueError(
                    f"{name} has unknown letters {sorted(unknown)}; allowed are "
                    f"{sorted(self._all_letters)} ({self._all_letters})."
                )
        self._check_emission_params()

    def _check_emission_params(self):
        """Validate emission-specific hyperparameters (subclasses extend)."""

    def _prior(self, name, shape):
        """A Dirichlet/prior hyperparameter broadcast to ``shape``, validated."""
        value = getattr(self, name)
        try:
            array = np.broadcast_to(np.asarray(value, dtype=np.float64), shape)
        except (ValueError, TypeError):
            raise ValueError(
                f"{name} must be a number or an array broadcastable to {shape}, "
                f"got shape {np.shape(value)}."
            ) from None
        if not np.all(np.isfinite(array)):
            raise ValueError(f"{name} contains NaN or inf.")
        return array

    # -- data ---------------------------------------------------------------

    def _prepare(self, X, y, lengths, sequence_ids, *, reset):
        X = self._validate_X(X, reset=reset)
        check_y_is_not_lengths(y, X.shape[0])
        offsets = sequence_offsets(X.shape[0], lengths=lengths, sequence_ids=sequence_ids)
        return X, offsets

    def _prepare_fitted(self, X, lengths, sequence_ids):
        check_is_fitted(self)
        return self._prepare(X, None, lengths, sequence_ids, reset=False)

    # -- initialisation -----------------------------------------------------

    def _fit_em(self, X, offsets):
        # Parameters set by hand (hmmlearn style: set ``means_`` and leave "m"
        # out of init_params) are captured once, so every one of the n_init
        # runs starts from them rather than from the previous run's result.
        self._presets = {
            attribute: np.copy(getattr(self, self._storage_name(attribute)))
            for letter, attribute in self._all_letters.items()
            if letter not in self.init_params and hasattr(self, self._storage_name(attribute))
        }
        try:
            return super()._fit_em(X, offsets)
        finally:
            del self._presets

    def _initial_value(self, attribute):
        """The user's initial value for ``attribute``: ``<name>_init``, then a preset."""
        init_value = getattr(self, attribute[:-1] + "_init", None)
        if init_value is not None:
            return np.array(init_value, dtype=np.float64)
        return self._presets.get(attribute)

    def _initialize(self, X, offsets, random_state):
        n_components = self.n_components
        startprob = self._initial_value("startprob_")
        if startprob is None:
            startprob = np.full(n_components, 1.0 / n_components)
        self.startprob_ = check_probability_vector(startprob, "startprob", (n_components,))
        transmat = self._initial_value("transmat_")
        if transmat is None:
            transmat = self._default_transmat(n_components)
        self.transmat_ = check_probability_vector(
            transmat, "transmat", (n_components, n_components)
        )
        self._initialize_emissions(X, random_state)

    @staticmethod
    def _default_transmat(n_components):
        """Sticky transitions: stay with probability 0.9 (1 when K = 1)."""
        if n_components == 1:
            return np.ones((1, 1))
        stay = 0.9
        transmat = np.full((n_components, n_components), (1 - stay) / (n_components - 1))
        np.fill_diagonal(transmat, stay)
        return transmat

    def _get_parameters(self):
        return {
            self._storage_name(attribute): np.copy(getattr(self, self._storage_name(attribute)))
            for attribute in self._all_letters.values()
        }

    def _set_parameters(self, parameters):
        for attribute, value in parameters.items():
            setattr(self, attribute, value)

    def _storage_name(self, attribute):
        """Where a parameter is stored (GaussianHMM keeps ``covars_`` as ``_covars_``)."""
        return attribute

    # -- EM -----------------------------------------------------------------

    def _estep(self, X, offsets):
        log_frameprob, cache = self._emission_terms(X)
        result = forward_backward_offsets(
            self.startprob_, self.transmat_, log_frameprob, offsets, overwrite=cache is None
        )
        statistics = SufficientStatistics(start=result.start_counts, trans=result.transition_counts)
        statistics.update(self._emission_statistics(X, result.posteriors, cache))
        return statistics, result.log_likelihood

    def _compute_log_likelihood(self, X):
        """log p(x_t | z_t = k) for every row and state (hmmlearn's name)."""
        return self._emission_terms(X)[0]

    def _mstep(self, statistics):
        n_components = self.n_components
        # MAP under Dirichlet priors: max(prior - 1 + counts, 0), normalised.
        # Zero probabilities stay zero (a left-right topology is kept).
        if "s" in self.params:
            prior = self._prior("startprob_prior", (n_components,))
            counts = np.maximum(prior - 1 + statistics["start"], 0)
            counts = np.where(self.startprob_ == 0, 0, counts)
            self.startprob_ = normalize_rows(counts, self.startprob_)[0]
        if "t" in self.params:
            prior = self._prior("transmat_prior", (n_components, n_components))
            counts = np.maximum(prior - 1 + statistics["trans"], 0)
            counts = np.where(self.transmat_ == 0, 0, counts)
            self.transmat_ = normalize_rows(counts, self.transmat_)
        self._emission_mstep(statistics)

    def _n_parameters(self):
        n_components = self.n_components
        counts = {"s": n_components - 1, "t": n_components * (n_components - 1)}
        counts.update(self._emission_n_parameters())
        return sum(counts[letter] for letter in self.params)

    # -- public API ---------------------------------------------------------

    def fit(self, X, y=None, *, lengths=None, sequence_ids=None):
        """Estimate the model parameters with the EM (Baum-Welch) algorithm.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The rows of all sequences, concatenated in time order.
        y : None
            Ignored; present for scikit-learn compatibility.  A ``y`` whose
            length is not ``n_samples`` raises a ``TypeError`` (it is almost
            surely hmmlearn's positional ``lengths``: write ``lengths=``).
        lengths : array-like of int, optional
            Lengths of the sequences (hmmlearn's form); must sum to ``n_samples``.
        sequence_ids : array-like of shape (n_samples,), optional
            A sequence label per row, contiguous within each sequence.  Routed
            by metadata routing, so ``GroupKFold`` keeps sequences whole.

        Returns
        -------
        self
        """
        self._check_params()
        X, offsets = self._prepare(X, y, lengths, sequence_ids, reset=True)
        return self._fit_em(X, offsets)

    def score(self, X, y=None, *, lengths=None, sequence_ids=None, sample_weight=None):
        """Log-likelihood of ``X`` under the model.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : None
            Ignored.
        lengths, sequence_ids : see :meth:`fit`.
        sample_weight : array-like of shape (n_samples,), optional
            Weights of the rows: the score is then
            sum_t w_t log p(x_t | x_1..x_{t-1}), which with unit weights is
            the log-likelihood.

        Returns
        -------
        log_likelihood : float
        """
        X, offsets = self._prepare_fitted(X, lengths, sequence_ids)
        check_y_is_not_lengths(y, X.shape[0])
        result = self._forward(X, offsets)
        if sample_weight is None:
            return result.log_likelihood
        sample_weight = np.asarray(sample_weight, dtype=np.float64)
        if sample_weight.shape != (X.shape[0],):
            raise ValueError(
                f"sample_weight must have shape ({X.shape[0]},), got {sample_weight.shape}."
            )
        if not np.all(np.isfinite(sample_weight)):
            raise ValueError("sample_weight contains NaN or inf.")
        return float(np.dot(sample_weight, result.log_predictive))

    def score_sequences(self, X, *, lengths=None, sequence_ids=None):
        """Log-likelihood of each sequence.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        lengths, sequence_ids : see :meth:`fit`.

        Returns
        -------
        log_likelihoods : ndarray of shape (n_sequences,)
        """
        X, offsets = self._prepare_fitted(X, lengths, sequence_ids)
        return self._forward(X, offsets).sequence_log_likelihood

    def score_samples(self, X, lengths=None, *, sequence_ids=None):
        """Log-likelihood of ``X`` and posterior state probabilities (as hmmlearn).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        lengths, sequence_ids : see :meth:`fit`.

        Returns
        -------
        log_likelihood : float
        posteriors : ndarray of shape (n_samples, n_components)
        """
        X, offsets = self._prepare_fitted(X, lengths, sequence_ids)
        result = forward_backward_offsets(
            self.startprob_,
            self.transmat_,
            self._compute_log_likelihood(X),
            offsets,
            overwrite=True,
        )
        return result.log_likelihood, result.posteriors

    def predict_proba(self, X, lengths=None, *, sequence_ids=None):
        """Posterior probability of each state at each row.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        lengths, sequence_ids : see :meth:`fit`.

        Returns
        -------
        posteriors : ndarray of shape (n_samples, n_components)
        """
        return self.score_samples(X, lengths, sequence_ids=sequence_ids)[1]

    def decode(self, X, lengths=None, algorithm=None, *, sequence_ids=None):
        """Most likely state of each row.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        lengths, sequence_ids : see :meth:`fit`.
        algorithm : {"viterbi", "map"}, optional
            "viterbi" (default: the estimator's ``algorithm``) finds the most
            likely path; "map" takes the most likely state of each row.

        Returns
        -------
        log_prob : float
            For "viterbi", log p(X, best path); for "map", the sum over rows
            of the largest posterior probability (as hmmlearn).
        states : ndarray of shape (n_samples,)
        """
        algorithm = self.algorithm if algorithm is None else algorithm
        if algorithm not in ("viterbi", "map"):
            raise ValueError(f"algorithm must be 'viterbi' or 'map', got {algorithm!r}.")
        X, offsets = self._prepare_fitted(X, lengths, sequence_ids)
        log_frameprob = self._compute_log_likelihood(X)
        if algorithm == "viterbi":
            with np.errstate(divide="ignore"):
                log_start, log_trans = np.log(self.startprob_), np.log(self.transmat_)
            log_probs, states = viterbi_offsets(log_start, log_trans, log_frameprob, offsets)
            return float(log_probs.sum()), states
        posteriors = forward_backward_offsets(
            self.startprob_, self.transmat_, log_frameprob, offsets, overwrite=True
        ).posteriors
        return float(posteriors.max(axis=1).sum()), posteriors.argmax(axis=1)

    def predict(self, X, lengths=None, *, sequence_ids=None):
        """Most likely state of each row, by the estimator's ``algorithm``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        lengths, sequence_ids : see :meth:`fit`.

        Returns
        -------
        states : ndarray of shape (n_samples,)
        """
        return self.decode(X, lengths, sequence_ids=sequence_ids)[1]

    def filter(self, X, *, lengths=None, sequence_ids=None):
        """Filtered state probabilities p(z_t | x_1..x_t) of each row.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        lengths, sequence_ids : see :meth:`fit`.

        Returns
        -------
        filtered : ndarray of shape (n_samples, n_components)
        """
        X, offsets = self._prepare_fitted(X, lengths, sequence_ids)
        return self._forward(X, offsets).filtered

    def _forward(self, X, offsets):
        return forward_offsets(
            self.startprob_,
            self.transmat_,
            self._compute_log_likelihood(X),
            offsets,
            overwrite=True,
        )

    def sample(self, n_samples=1, random_state=None, currstate=None):
        """Draw a sequence from the model.

        Parameters
        ----------
        n_samples : int
            Length of the sequence.
        random_state : int, RandomState or None
            Defaults to the estimator's ``random_state``.
        currstate : int, optional
            Draw the first state from row ``currstate`` of the transition
            matrix (to continue a previous sample) instead of from ``startprob_``.

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
        states : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        check_scalar_param(n_samples, "n_samples", "int", low=1)
        random_state = check_random_state(
            self.random_state if random_state is None else random_state
        )
        start = self.startprob_
        if currstate is not None:
            if (
                not isinstance(currstate, numbers.Integral)
                or not 0 <= currstate < self.n_components
            ):
                raise ValueError(
                    f"currstate must be a state index in [0, {self.n_components}), "
                    f"got {currstate!r}."
                )
            start = self.transmat_[currstate]
        states = np.empty(n_samples, dtype=np.intp)
        _hmm.sample_states(
            np.cumsum(start),
            np.cumsum(self.transmat_, axis=1),
            random_state.rand(n_samples),
            states,
        )
        return self._sample_emissions(states, random_state), states

    def get_stationary_distribution(self):
        """Stationary distribution of the hidden Markov chain.

        Returns
        -------
        stationary : ndarray of shape (n_components,)
            The left eigenvector of ``transmat_`` with eigenvalue 1, normalised.
        """
        check_is_fitted(self, "transmat_")
        eigenvalues, eigenvectors = linalg.eig(self.transmat_.T)
        vector = np.real_if_close(eigenvectors[:, np.argmax(eigenvalues.real)])
        return np.real(vector / vector.sum())

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags
