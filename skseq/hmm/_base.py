"""The base class of every hidden Markov model in skseq.

:class:`BaseHMM` owns what does not depend on the emission model: the start
and transition probabilities, validation of ``X`` and of the sequence split,
the E step (forward-backward kernel + the emission model's statistics), the M
step for start and transition probabilities, decoding, scoring and sampling.
An emission model subclass adds ``_emission_letters`` (``{letter:
attribute}`` of its parameters: hmmlearn's ``params`` / ``init_params``
codes, e.g. ``{"m": "means_", "c": "covars_"}``) and five abstract methods
(a subclass without one cannot be instantiated; the error names it):

* ``_initialize_emissions(X, random_state)`` (``_initial_value(attribute)``
  gives the user's ``<name>_init`` or hand-set value);
* ``_check_emission_parameters(n_features)``: the parameters as they stand,
  before any kernel sees them;
* ``_emission_terms(X)`` -> ``(log_frameprob, cache)``: the log-likelihood of
  every row under every state, (n_samples, n_components), and whatever
  the features and statistics can reuse;
* ``_emission_features(X, cache)`` (n_samples, n_components, n_features_out):
  per-row vectors phi_j(x_t) whose posterior-weighted sums
  sum_t gamma_t(j) phi_j(x_t) are the emission statistics (the forward-only
  smoother of streams sums them);
* ``_emission_mstep(statistics)``.

The E step reads the model through three more hooks, whose defaults are the
parameters themselves: ``_estep_chain()`` (start and transition
probabilities), ``_estep_emissions()`` and ``_estep_emission_terms(X)`` (the
emissions of batch and stream E steps); the variational models give them
the subnormalised exp E_q[log theta].

Hooks with defaults, which the models here override: ``_validate_X(X,
reset)`` (finite float64) and ``_check_training_rows(X)`` for what only the
rows of ``fit`` and ``partial_fit`` must satisfy;
``_emission_statistics(X, posteriors, cache)`` (the sums of the features)
and ``_statistics_from_features(sums)`` (``{"feature_sums": sums}``);
``_emission_n_parameters()`` (every entry free); ``_sample_emissions(states,
random_state)`` (none: ``sample`` says so); ``_emission_coordinates(X)``
(SQUAREM's); ``_emissions(shifted)``: a function ``(X, buffers) ->
(log_frameprob, shift, cache)`` with the parameters prepared once for many
blocks of rows; with ``shifted`` each row comes already shifted by its
maximum ``shift`` (saves a pass), and ``buffers`` (see
:func:`skseq._buffers.work_array`) may hold the arrays.
The hidden chain has hooks too, whose defaults are the Markov chain's:
``_chain_estep`` (forward-backward on a block), ``_viterbi`` and
``_sample_path``; :class:`~skseq.hmm.SemiMarkovHMM` overrides them (and
``_posteriors``, ``_forward``, ``_mstep``) for explicit state durations.
``_densities_never_zero = True`` when no emission density is ever zero
(Gaussian): a log-likelihood of -inf is then an overflow, reported as such,
by ``score`` too.  hmmlearn's conventions (hand-set parameters, presets,
``n_features``) are in :mod:`skseq.hmm._hmmlearn_compat`.

A transition component that keeps the chain's states but changes its
transition matrix from row to row uses finer hooks, whose defaults are the
stationary chain of ``startprob_`` and ``transmat_``: ``_row_controls(X)``
(the inputs of the rows, None; ``_chain_estep`` gets them as ``controls``),
``_chain_posteriors``, ``_chain_forward``, ``_chain_viterbi`` (the
recursions of a block of sequences), ``_stream_forward`` (the online
filter's rows given the carried ``filtered_state_``),
``_forward_smoothing(X, stream)`` (the streams' forward-only smoother,
``partial_fit`` continuing a sequence across batches),
``_transition_mstep(statistics)`` and
``_transition_n_parameters()``, and for one long sequence in bounded memory
``_checkpointed_estep`` (the E step) and ``_chunked_chain_forward`` (scores).
:class:`skseq.hmm._input_driven.InputDrivenTransitions` overrides them with
transitions that depend on inputs.
"""

import abc
import numbers

import numpy as np
from joblib import effective_n_jobs
from scipy import linalg
from sklearn.cluster import KMeans
from sklearn.utils import check_random_state
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from .._parallel import limited_threads
from .._sequences import (
    blocks_of_rows,
    check_y_is_not_lengths,
    checkpoint_rows,
    isolate_long_sequences,
    lengths_by_keyword,
    memory_budget_rows,
    sequence_offsets,
)
from .._validation import (
    PARAMETER_RULES,
    check_parameters,
    letters_rule,
    masked_as_nan,
    option_rule,
)
from ..base import (
    BaseEM,
    ParameterCoordinates,
    SufficientStatistics,
)
from ..inference.hmm import (
    HMMForwardResult,
    _checkpointed_forward_backward,
    _chunked_forward,
    _forward_backward_offsets,
    _forward_offsets,
    _forward_smoothing_rows,
    _sample_states,
    _viterbi_offsets,
    check_path_length,
)
from ._hmmlearn_compat import HmmlearnCompatMixin

__all__ = ["BaseHMM"]

_PROBABILITY_ATOL = 1e-8

# Inference on new data (score, filter, predict, predict_proba) runs over
# blocks of whole sequences of about this many rows x states, so that the
# work arrays stay in the caches and are reused from block to block instead
# of being allocated, and page-faulted, at the size of all of X.
_BLOCK_CELLS = 2**15
# The E step does the same with larger blocks: its statistics cost a little
# Python per block.
_ESTEP_BLOCK_CELLS = 2**17
# A sequence of more than _LONG_SEQUENCE_CELLS rows x states is scored in
# chunks of a block's rows, its forward message carried from chunk to chunk,
# so scoring needs the same memory whatever its length (shorter ones keep the
# whole-sequence recursion, whose error bounds follow a state whose
# probability falls below 2^-1000 without the log-space redo that a chunk
# boundary needs then: left-right models).  The E step of a sequence whose whole-sequence
# arrays would pass scikit-learn's ``working_memory`` is checkpointed
# (doc/user_guide/hmm.rst, "One long sequence in bounded memory"): chunks of
# sqrt(T) rows, and at least this many cells while the budget allows.
_CHECKPOINT_MIN_CELLS = 2**17
_LONG_SEQUENCE_CELLS = 2**18


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


def dirichlet_map(counts, prior, previous, support=None):
    """MAP probabilities from expected counts under a Dirichlet prior, along the last axis.

    ``max(prior - 1 + counts, 0)``, normalised; entries outside ``support``
    (a boolean mask broadcastable to ``counts``) stay exactly zero whatever
    the prior, and a row with nothing left keeps ``previous``.
    """
    counts = np.maximum(prior - 1 + counts, 0)
    if support is not None:
        counts = np.where(support, counts, 0)
    return normalize_rows(counts, previous)


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


def check_known_states(known_states, n_samples, n_components):
    """``known_states`` as an intp array with one entry per row (-1: unknown).

    None when there is none or no row is labelled (EM is then the
    unsupervised one).  A ValueError names what is wrong: the length, a
    value that is not a whole number, a state outside ``-1 .. n_components - 1``.
    """
    if known_states is None:
        return None
    array = np.asarray(known_states)
    if array.ndim != 1 or array.shape[0] != n_samples:
        raise ValueError(
            f"known_states must have one entry per row of X (n_samples={n_samples}), "
            f"got shape {array.shape}."
        )
    if array.dtype.kind not in "iuf" or (
        array.dtype.kind == "f" and not np.all(np.isfinite(array) & (array == np.round(array)))
    ):
        raise ValueError(
            "known_states must hold whole numbers (a state index, or -1 where the state "
            f"is unknown), got {array.dtype} values such as {array[:3].tolist()}."
        )
    outside = (array < -1) | (array >= n_components)
    if np.any(outside):
        row = int(np.flatnonzero(outside)[0])
        raise ValueError(
            f"known_states[{row}] = {array[row]} is not a state of this model: the known "
            f"states are 0 .. {n_components - 1} (n_components={n_components}), -1 marks "
            "an unknown state."
        )
    if not np.any(array >= 0):
        return None
    return array.astype(np.intp)


def clamp_to_known_states(log_frameprob, shift, known_states):
    """The log-emissions of rows with a known state, every other state's set to -inf.

    ``known_states`` has one entry per row of ``log_frameprob`` (-1:
    unknown).  A labelled row keeps only its own state's density, so the
    forward-backward recursions (scaled or in log space, whole, in chunks
    or as a stream) weigh only the state paths through the labels.  When
    ``shift`` is given (each row shifted by its maximum) a labelled row is
    shifted by its own state's value instead.  Returns new arrays
    ``(log_frameprob, shift)``: the inputs may be cached by the emission
    model (GMMHMM's responsibilities) and stay unchanged; with
    ``known_states`` None or no row labelled, the inputs themselves.
    """
    if known_states is None:
        return log_frameprob, shift
    labelled = np.flatnonzero(known_states >= 0)
    if labelled.size == 0:  # a block or chunk without labels: nothing to copy
        return log_frameprob, shift
    states = known_states[labelled]
    kept = log_frameprob[labelled, states]
    clamped = np.array(log_frameprob)
    clamped[labelled] = -np.inf
    if shift is None:
        clamped[labelled, states] = kept
        return clamped, None
    shift = np.array(shift)
    # A known state of density zero leaves the row impossible (all -inf).
    possible = kept > -np.inf
    clamped[labelled[possible], states[possible]] = 0.0
    shift[labelled[possible]] += kept[possible]
    return clamped, shift


def fit_kmeans(X, n_clusters, random_state, n_jobs):
    """scikit-learn's KMeans (10 restarts) fitted to ``X`` on at most ``n_jobs`` threads.

    KMeans starts one OpenMP thread per core.  On the small data sets HMMs
    are often fitted to, synchronising them costs far more than the work,
    above all when another process keeps a core busy (a 309-row PoissonHMM
    fit took 0.4 s instead of 6 ms).  So the initialisation uses the
    estimator's ``n_jobs`` (None: one thread), as its E step does.
    """
    with limited_threads(effective_n_jobs(n_jobs)):
        return KMeans(n_clusters=n_clusters, n_init=10, random_state=random_state).fit(X)


def feature_units(X):
    """The standard deviation of each feature over the rows without NaN (1 where
    it is zero or unknown): the units of Gaussian emission parameters for SQUAREM."""
    rows = X[~np.isnan(X).any(axis=1)] if X.ndim == 2 else X
    if rows.shape[0] < 2:
        return np.ones(X.shape[1])
    deviation = np.std(rows, axis=0)
    return np.where(np.isfinite(deviation) & (deviation > 0), deviation, 1.0)


def gaussian_coordinates(covariance_type, X):
    """SQUAREM coordinates of Gaussian means and covariances (in their compact
    shapes) for ``covariance_type``: means in units of the features' standard
    deviations, variances by the logs of their ratio to the features'
    variances, full and tied covariances by the matrix logarithm once whitened."""
    units = feature_units(X)
    covariance = {
        "spherical": ("positive", float(np.mean(units**2))),
        "diag": ("positive", units**2),
        "full": ("covariance", units),
        "tied": ("covariance", units),
    }[covariance_type]
    return {"means_": ("real", units), "covars_": covariance}


class BaseHMM(HmmlearnCompatMixin, BaseEM):
    """Hidden Markov model fitted by Baum-Welch EM; see subclasses."""

    _emission_letters = {}

    __metadata_request__fit = {"sequence_ids": True, "known_states": True}
    __metadata_request__score = {"sequence_ids": True, "sample_weight": True}
    __metadata_request__predict = {"sequence_ids": True}
    __metadata_request__predict_proba = {"sequence_ids": True}
    __metadata_request__partial_fit = {"sequence_ids": True, "known_states": True}

    # The emission letters that labelled rows initialise (None: all of them);
    # see _initialize_from_known_states.
    _letters_from_known_states = None

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
        acceleration=None,
        learning_method="batch",
        learning_decay=0.6,
        learning_offset=0.0,
        total_samples=None,
        batch_size=32,
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
        self.acceleration = acceleration
        self.learning_method = learning_method
        self.learning_decay = learning_decay
        self.learning_offset = learning_offset
        self.total_samples = total_samples
        self.batch_size = batch_size

    # -- hyperparameters ----------------------------------------------------

    @property
    def _all_letters(self):
        return {"s": "startprob_", "t": "transmat_", **self._emission_letters}

    def _parameter_rules(self):
        """The rules of the HMM's own hyperparameters (see
        :meth:`skseq.base.BaseEM._parameter_rules`); an emission model adds
        its own, its priors as :func:`~skseq._validation.at_fit` rules when
        their range depends on the number of features (checked by
        :meth:`_check_priors`).  The priors that several models share
        (``startprob_prior``, ``means_weight``, ...) have their rules in
        :data:`skseq._validation.PARAMETER_RULES`."""
        return {
            "algorithm": option_rule("viterbi", "map"),
            "implementation": option_rule("log", "scaling"),
            "params": letters_rule(self._all_letters),
            "init_params": letters_rule(self._all_letters),
        }

    def _check_priors(self, n_features):
        """Validate the prior hyperparameters whose rules need the data
        (:func:`~skseq._validation.at_fit`) at fit, before any data are used."""
        check_parameters(
            self, self._parameter_rules(), n_features=n_features, skip=self._unchecked_parameters()
        )

    def _ensure_emission_centre(self):
        """Fix the reference point of the emission statistics if the model has none.

        Models fitted here get it at initialisation; models whose parameters
        were set by hand get it before their first ``partial_fit`` step.
        """

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

    # -- the emission model's hooks ------------------------------------------
    #
    # Five are abstract (a subclass without one cannot be instantiated, and
    # the error names it); the others have defaults that a closed-form
    # emission model whose statistics are posterior-weighted sums of
    # features needs no more than.

    @abc.abstractmethod
    def _initialize_emissions(self, X, random_state):
        """Set the initial emission parameters from the data ``X``.

        ``self._initial_value(attribute)`` is the user's ``<name>_init`` or
        hand-set value (None if neither): use it when given, as the letters
        of ``init_params`` say.
        """

    @abc.abstractmethod
    def _check_emission_parameters(self, n_features):
        """Check the emission parameters as they stand, before any kernel sees them.

        They may have been set by hand or ``n_components`` changed since the
        fit: raise a ValueError naming the parameter when a shape disagrees
        with ``n_components`` or with ``n_features`` (None: not known) or a
        value is out of its domain.
        """

    @abc.abstractmethod
    def _emission_terms(self, X):
        """``(log_frameprob, cache)``: log p(x_t | z_t = j) of every row of ``X``
        and state, (n_samples, n_components), and whatever
        :meth:`_emission_features` and :meth:`_emission_statistics` can reuse."""

    @abc.abstractmethod
    def _emission_features(self, X, cache):
        """phi_j(x_t), (n_samples, n_components, n_features_out): the per-row
        vectors whose posterior-weighted sums sum_t gamma_t(j) phi_j(x_t) are the
        emission statistics (forward-only smoothing sums them in streams;
        :meth:`_emission_statistics` by default)."""

    @abc.abstractmethod
    def _emission_mstep(self, statistics):
        """Set the emission parameters whose letters are in ``params`` from the
        summed statistics (the ``SufficientStatistics`` of the E step, with the
        entries of :meth:`_statistics_from_features`)."""

    def _validate_X(self, X, reset):
        """``X`` as a 2-D float64 array of finite values (``reset``: fit's call,
        which sets ``n_features_in_``); models with other data override it."""
        X = masked_as_nan(X, missing_supported=False, owner=type(self).__name__)
        return validate_data(self, X, reset=reset, dtype=np.float64, ensure_min_samples=1)

    def _emission_statistics(self, X, posteriors, cache):
        """The emission statistics of rows ``X`` given their state ``posteriors``:
        by default the posterior-weighted sums of :meth:`_emission_features`,
        through :meth:`_statistics_from_features`."""
        features = self._emission_features(X, cache)
        return self._statistics_from_features(np.einsum("tj,tjf->jf", posteriors, features))

    def _statistics_from_features(self, sums):
        """The emission statistics from the sums sum_t gamma_t(j) phi_j(x_t),
        (n_components, n_features_out): by default ``{"feature_sums": sums}``."""
        return {"feature_sums": sums}

    def _emission_n_parameters(self):
        """``{letter: free scalar parameters}`` of the emission parameters: by
        default every entry of each is free (not so for probabilities or
        covariances, whose models override it)."""
        return {
            letter: int(np.size(getattr(self, self._storage_name(attribute))))
            for letter, attribute in self._emission_letters.items()
        }

    def _sample_emissions(self, states, random_state):
        """Draws of ``X`` given the state path ``states``, for :meth:`sample`;
        a model that cannot sample leaves it, and ``sample`` says so."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot sample: it defines no _sample_emissions."
        )

    # -- data ---------------------------------------------------------------

    def _prepare(self, X, y, lengths, sequence_ids, *, reset, method="fit"):
        X = self._validate_X(X, reset=reset)
        check_y_is_not_lengths(y, X.shape[0], method)
        declared = self.__dict__.get("_n_features")
        if reset and declared is not None and X.shape[1] != declared:
            raise ValueError(
                f"Unexpected number of dimensions: X has {X.shape[1]} features but "
                f"n_features={declared} was set."
            )
        offsets = sequence_offsets(X.shape[0], lengths=lengths, sequence_ids=sequence_ids)
        return X, offsets

    def _check_training_rows(self, X):
        """Validate rows the model learns from (fit, partial_fit) beyond ``_validate_X``.

        Called before any parameter changes; subclasses extend (MultinomialHMM
        checks the rows' totals against ``n_trials``).
        """

    def _prepare_fitted(self, X, lengths, sequence_ids, y=None, method=None):
        check_is_fitted(self)
        X, offsets = self._prepare(X, y, lengths, sequence_ids, reset=False, method=method)
        self._check_fitted_parameters(X.shape[1])
        return X, offsets

    def _check_fitted_parameters(self, n_features=None):
        """Validate the parameters as they stand before any kernel sees them.

        They may have been set by hand (hmmlearn style), or ``n_components``
        changed with ``set_params`` after fitting: shapes must agree with
        each other, with ``n_components`` and with ``X`` (without ``X``,
        with an ``n_features`` set by hand); probabilities must sum to one;
        covariances must be positive definite.
        """
        check_is_fitted(self)
        PARAMETER_RULES["n_components"](self.n_components, "n_components")
        n_components = self.n_components
        check_probability_vector(self.startprob_, "startprob_", (n_components,))
        check_probability_vector(self.transmat_, "transmat_", (n_components, n_components))
        if n_features is None:
            n_features = self.__dict__.get("_n_features")
        self._check_emission_parameters(n_features)

    # -- initialisation -----------------------------------------------------

    def _fit_em(self, X, offsets):
        # X may carry known states as a last column (_stack_known_states).
        self._capture_presets()
        try:
            result = super()._fit_em(X, offsets)
        finally:
            del self._presets
        self._initialized()
        self._reset_stream()
        return result

    def _n_data_points(self, X):
        # The observed entries of the data, without the known states' column.
        X, _ = self._split_known_states(X)
        return super()._n_data_points(X)

    def _initialize(self, X, offsets, random_state):
        X, known_states = self._split_known_states(X)
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
        if known_states is not None:
            self._check_known_states_possible(known_states, offsets)
            self._initialize_from_known_states(X, known_states)

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

    # -- EM -----------------------------------------------------------------

    def _estep_shared(self):
        # The chain's parameters and the emissions function (for the Gaussian
        # families, the covariances' factorisations) of this E step.
        return self._estep_chain(), self._estep_emissions()

    def _estep(self, X, offsets, buffers=None, shared=None):
        # ``buffers``: during a batch fit, this block's work arrays, kept from one
        # EM iteration to the next by the fit's FitContext.  Within a call, the
        # sequences go in blocks that share the arrays.  ``shared``: what
        # _estep_shared gives (made here when None).
        controls = self._row_controls(X)
        X, known_states = self._split_known_states(X)
        blocks = []

        chain, emissions = self._estep_shared() if shared is None else shared

        def block(log_frameprob, shift, cache, local_offsets, buffers, sequences, rows):
            statistics, posteriors, log_likelihood = self._chain_estep(
                chain,
                log_frameprob,
                shift,
                local_offsets,
                buffers,
                controls=None if controls is None else controls[rows],
            )
            statistics.update(self._emission_statistics(X[rows], posteriors, cache))
            blocks.append((statistics, log_likelihood))

        def long_sequence(X, emissions, buffers, sequences, rows):
            known = None if known_states is None else known_states[rows]
            row_controls = None if controls is None else controls[rows]
            blocks.append(
                self._checkpointed_estep(
                    X, emissions, buffers, known_states=known, controls=row_controls
                )
            )

        self._blockwise(
            X,
            offsets,
            block,
            cells=_ESTEP_BLOCK_CELLS,
            buffers=buffers,
            long_rows=self._checkpoint_threshold(X.shape[1]),
            run_long=long_sequence,
            known_states=known_states,
            emissions=emissions,
        )
        return self._add_up(blocks)

    def _chain_estep(self, chain, log_frameprob, shift, offsets, buffers, controls=None):
        """The hidden chain's part of the E step on a block of whole sequences.

        ``chain`` is what :meth:`_estep_chain` gives; ``log_frameprob`` and
        ``shift`` are the block's emissions (see :meth:`_emissions`);
        ``controls`` the block's rows' inputs (:meth:`_row_controls`, None
        here: input-driven transitions read them).  Returns
        ``(statistics, posteriors, log_likelihood)``: the chain's
        :class:`~skseq.base.SufficientStatistics` (here the start and
        transition counts of forward-backward), p(z_t = j | x) of every row
        (from which the E step adds the emission statistics) and the block's
        log-likelihood.  A model with another hidden chain (the semi-Markov
        HMMs) overrides it and :meth:`_mstep`.
        """
        startprob, transmat = chain
        result = _forward_backward_offsets(
            startprob, transmat, log_frameprob, offsets, shift, buffers
        )
        statistics = SufficientStatistics(start=result.start_counts, trans=result.transition_counts)
        return statistics, result.posteriors, result.log_likelihood

    # -- known states (semi-supervised fits) ----------------------------------
    #
    # fit(X, known_states=...) hands EM the rows with their labels as one more
    # column, [X, known_states] (as the linear-Gaussian SSM stacks its
    # controls), so that every path that splits, chunks or batches the rows
    # (threads, blocks, checkpointed sequences, online EM's minibatches,
    # streams) carries the labels with them.  The E step splits them off and
    # clamps the emissions of the labelled rows (clamp_to_known_states): the
    # one place the labels enter the recursions.

    def _stack_known_states(self, X, known_states):
        """The data EM works on: ``X``, or ``[X, known_states]`` (then flagged)."""
        if known_states is None:
            return X
        self._known_states_stacked = True
        return np.column_stack([X, known_states.astype(np.float64)])

    def _split_known_states(self, X):
        """``(X, known_states)`` of rows of EM's data (known_states None: no labels)."""
        if not self.__dict__.get("_known_states_stacked"):
            return X, None
        return np.ascontiguousarray(X[:, :-1]), X[:, -1].astype(np.intp)

    def _check_known_states(self, known_states, X):
        """Validated ``known_states`` of the rows ``X`` (None: no row labelled)."""
        known_states = check_known_states(known_states, X.shape[0], self.n_components)
        if known_states is not None and X.dtype.kind == "f":
            missing = np.isnan(X).all(axis=1) & (known_states >= 0)
            if np.any(missing):
                row = int(np.flatnonzero(missing)[0])
                raise ValueError(
                    f"known_states[{row}] = {known_states[row]} labels a missing row (X[{row}] "
                    "is all NaN): a missing row has no observation to anchor a state to; "
                    "give it -1."
                )
        return known_states

    def _check_known_states_possible(self, known_states, offsets, continues=False):
        """A ValueError when ``startprob_`` or ``transmat_`` forbid the labels: a
        labelled first row of a sequence (not one that ``continues`` a stream)
        whose start probability is zero, or consecutive labelled rows of one
        sequence whose transition probability is zero."""
        starts = offsets[1 if continues else 0 : -1]
        first = known_states[starts]
        forbidden = (first >= 0) & (self.startprob_[np.maximum(first, 0)] == 0)
        if np.any(forbidden):
            row = int(starts[np.flatnonzero(forbidden)[0]])
            raise ValueError(
                f"known_states[{row}] = {known_states[row]} starts a sequence, but "
                f"startprob_[{known_states[row]}] = 0: the model forbids starting in that state."
            )
        before, after = known_states[:-1], known_states[1:]
        same_sequence = np.ones(len(before), dtype=bool)
        same_sequence[offsets[1:-1] - 1] = False
        pairs = same_sequence & (before >= 0) & (after >= 0)
        forbidden = pairs & self._forbidden_label_steps(np.maximum(before, 0), np.maximum(after, 0))
        if np.any(forbidden):
            row = int(np.flatnonzero(forbidden)[0])
            a, b = known_states[row], known_states[row + 1]
            raise ValueError(
                f"known_states[{row}] = {a} is followed by known_states[{row + 1}] = {b} in "
                f"the same sequence, but transmat_[{a}, {b}] = 0: the model forbids that "
                "transition."
            )

    def _forbidden_label_steps(self, before, after):
        """Whether the chain forbids a row in state ``before`` followed by one in
        state ``after`` (arrays of states): ``transmat_[before, after]`` = 0."""
        return self.transmat_[before, after] == 0

    def _initialize_from_known_states(self, X, known_states):
        """Move the initial emission parameters of each labelled state to its rows.

        One M step of the emission letters initialised from data (those in
        ``init_params`` without a user's value; only
        ``_letters_from_known_states`` of them when set), with each labelled
        row's posterior all on its state and unlabelled rows weighing nothing:
        state k starts where the rows labelled k are, so it is label k's
        state (no label switching).  With n_k rows labelled k, the start is
        the convex combination n_k / (n_k + 1) of that estimate and
        1 / (n_k + 1) of the data-driven one (a pseudo-row): a probability or
        rate that a few labelled rows would put at zero, where EM could never
        move it, stays positive, and a parameter's domain is kept (each is
        convex).  The parameters' first axis is the state's.  States without
        labels keep the data-driven initialisation.
        """
        letters = "".join(
            letter
            for letter, attribute in self._emission_letters.items()
            if letter in self.init_params
            and self._initial_value(attribute) is None
            and (
                self._letters_from_known_states is None or letter in self._letters_from_known_states
            )
        )
        if not letters:
            return
        storage = [self._storage_name(self._emission_letters[letter]) for letter in letters]
        self._start_from_labelled_rows(
            X, known_states, letters, self._emission_mstep, blended=storage, touched=storage
        )

    def _start_from_labelled_rows(self, X, known_states, letters, mstep, blended, touched):
        """Run ``mstep`` (an M step that learns ``letters``) on the labelled rows
        alone, each row's posterior all on its label, then blend the
        attributes ``blended`` ``n_k / (n_k + 1)`` of the way from their values
        before it to its result (n_k: the rows labelled k; the first axis is
        the state's); the other attributes ``touched`` get their values back.
        """
        labelled = known_states >= 0
        rows = X[labelled]
        posteriors = np.zeros((rows.shape[0], self.n_components))
        posteriors[np.arange(rows.shape[0]), known_states[labelled]] = 1.0
        statistics = self._emission_statistics(rows, posteriors, self._emission_terms(rows)[1])
        before = {name: np.copy(getattr(self, name)) for name in touched}
        learned = self.params
        self.params = letters  # the M step learns the params letters
        try:
            mstep(statistics)
        finally:
            self.params = learned
        n_labelled = np.bincount(known_states[labelled], minlength=self.n_components)
        weight = n_labelled / (n_labelled + 1.0)
        for name, start in before.items():
            if name in blended:
                share = weight.reshape((-1,) + (1,) * (start.ndim - 1))
                start = start + share * (getattr(self, name) - start)
            setattr(self, name, start)

    def _estep_bytes_per_row(self, n_features):
        """Bytes per row of the whole-sequence E step's arrays (an estimate):
        the log-emissions, the frame, the forward messages and the posteriors
        (n_components each), the shift, the log predictive densities, and the
        emission statistics' products of the rows."""
        return 8 * (5 * self.n_components + 2 + n_features)

    def _checkpoint_threshold(self, n_features):
        """Rows beyond which one sequence's E step is checkpointed: where its
        whole-sequence arrays would pass ``sklearn.get_config()["working_memory"]``."""
        return memory_budget_rows(self._estep_bytes_per_row(n_features))

    def _checkpoint_rows(self, n_rows, n_features):
        """Rows per chunk of a checkpointed E step (:func:`skseq._sequences.checkpoint_rows`)."""
        return checkpoint_rows(
            n_rows,
            self._estep_bytes_per_row(n_features),
            _CHECKPOINT_MIN_CELLS // self.n_components,
        )

    def _checkpointed_estep(
        self, X, emissions, buffers, chunk_rows=None, known_states=None, controls=None
    ):
        """``(statistics, log_likelihood)`` of one sequence ``X`` by checkpointed
        forward-backward, chunk by chunk (``chunk_rows``: see
        :meth:`_checkpoint_rows`), its rows' emissions clamped to
        ``known_states`` (see :func:`clamp_to_known_states`); ``controls``:
        the rows' inputs (:meth:`_row_controls`; None here)."""
        if chunk_rows is None:
            chunk_rows = self._checkpoint_rows(X.shape[0], X.shape[1])
        emission_statistics = []  # the running sum, kept in a list for the closure

        def consume(start, stop, posteriors, cache):
            more = SufficientStatistics(self._emission_statistics(X[start:stop], posteriors, cache))
            emission_statistics[:] = [
                more + emission_statistics[0] if emission_statistics else more
            ]

        log_likelihood, start_counts, transition_counts = _checkpointed_forward_backward(
            *self._estep_chain(),
            X.shape[0],
            chunk_rows,
            lambda start, stop: self._clamped(
                emissions(X[start:stop], buffers),
                None if known_states is None else known_states[start:stop],
            ),
            consume,
            buffers,
        )
        statistics = SufficientStatistics(start=start_counts, trans=transition_counts)
        statistics.update(emission_statistics[0])
        return statistics, log_likelihood

    # -- the transition component's hooks ----------------------------------------
    #
    # A transition component (a mixin before the emission model in the bases,
    # skseq.hmm._input_driven.InputDrivenTransitions) overrides these; the
    # defaults are the stationary chain of startprob_ and transmat_.  ``controls``
    # are the inputs of the rows (``_row_controls``; None here).

    def _row_controls(self, X):
        """The inputs of the rows of EM's (or prepared) data ``X``: None here."""
        return None

    def _chunked_chain_forward(self, controls, n_rows, chunk_rows, emissions, on_chunk, buffers):
        """The log-likelihood of one long sequence of ``n_rows`` rows, scored in
        chunks of ``chunk_rows`` (:func:`~skseq.inference.hmm._chunked_forward`:
        ``emissions(start, stop)`` gives ``(log_frameprob, shift)`` of rows
        ``start:stop``, ``on_chunk`` sees each chunk's log predictive
        densities); ``controls``: the rows' inputs (None here)."""
        return _chunked_forward(
            self.startprob_, self.transmat_, n_rows, chunk_rows, emissions, on_chunk, buffers
        )

    def _chain_posteriors(
        self, controls, log_frameprob, offsets, shift, buffers, posteriors, sequence_log_likelihood
    ):
        """Fill ``posteriors`` and ``sequence_log_likelihood`` of a block (fitted parameters)."""
        _forward_backward_offsets(
            self.startprob_,
            self.transmat_,
            log_frameprob,
            offsets,
            shift,
            buffers,
            posteriors=posteriors,
            sequence_log_likelihood=sequence_log_likelihood,
        )

    def _chain_forward(
        self,
        controls,
        log_frameprob,
        offsets,
        shift,
        buffers,
        filtered,
        log_predictive,
        sequence_log_likelihood,
    ):
        """Fill ``filtered`` and ``log_predictive`` (each may be None) and
        ``sequence_log_likelihood`` of a block by the forward pass."""
        _forward_offsets(
            self.startprob_,
            self.transmat_,
            log_frameprob,
            offsets,
            shift,
            buffers,
            filtered=filtered,
            log_predictive=log_predictive,
            sequence_log_likelihood=sequence_log_likelihood,
        )

    def _chain_viterbi(self, controls, log_frameprob, offsets, buffers, states, sequence_log_prob):
        """Fill ``states`` and ``sequence_log_prob`` of a block (unshifted emissions)."""
        with np.errstate(divide="ignore"):
            log_start, log_trans = np.log(self.startprob_), np.log(self.transmat_)
        _viterbi_offsets(
            log_start,
            log_trans,
            log_frameprob,
            offsets,
            buffers,
            states=states,
            sequence_log_prob=sequence_log_prob,
        )

    def _transition_n_parameters(self):
        """``{letter: free parameters}`` of the transition component."""
        return {"t": self.n_components * (self.n_components - 1)}

    def _emissions(self, shifted=True):
        """A function ``(X, buffers=None) -> (log_frameprob, shift, cache)``.

        ``shift`` None: the rows are not pre-shifted (always so here; an
        emission model may fuse the shift when ``shifted``).  ``buffers``
        (see :func:`skseq._buffers.work_array`) may hold the arrays
        between calls.
        """

        def emissions(X, buffers=None):
            log_frameprob, cache = self._emission_terms(X)
            return log_frameprob, None, cache

        return emissions

    @staticmethod
    def _clamped(emissions, known_states):
        """``(log_frameprob, shift, cache)`` of an emissions function, clamped to
        the rows' ``known_states`` (None: as they are)."""
        log_frameprob, shift, cache = emissions
        return (*clamp_to_known_states(log_frameprob, shift, known_states), cache)

    def _estep_chain(self):
        """``(startprob, transmat)`` of the E step's recursions: the parameters.
        Variational models use exp E_q[log pi] and exp E_q[log A] (rows that
        sum to less than one)."""
        return self.startprob_, self.transmat_

    def _estep_emissions(self):
        """The E step's emissions function (as :meth:`_emissions`): the
        parameters'; variational models give exp E_q[log p(x_t | z_t = j)]."""
        return self._emissions()

    def _estep_emission_terms(self, X):
        """``(log_frameprob, cache)`` of the E step of streams, as
        :meth:`_estep_emissions` (:meth:`_emission_terms` by default)."""
        return self._emission_terms(X)

    def _blockwise(
        self,
        X,
        offsets,
        run,
        *,
        shifted=True,
        cells=None,
        buffers=None,
        long_rows=None,
        run_long=None,
        known_states=None,
        emissions=None,
    ):
        """Call ``run(log_frameprob, shift, cache, local_offsets, buffers, sequences, rows)``
        on the emissions of each block of whole sequences (``_emissions(shifted)``;
        blocks of about ``cells`` rows x states, see :meth:`_row_blocks`), with
        the work arrays of ``buffers`` (a new dict if None) shared from block to
        block.  With ``run_long``, a sequence of more than ``long_rows`` rows is a
        block of its own, and goes to ``run_long(X[rows], emissions, buffers,
        sequences, rows)`` instead, which computes its emissions chunk by chunk.
        The emissions of a block are clamped to its rows of ``known_states``
        (``run_long`` clamps its chunks).  ``emissions``: an emissions function
        to use instead (the E step's)."""
        emissions = self._emissions(shifted) if emissions is None else emissions
        buffers = {} if buffers is None else buffers
        if run_long is None:
            long_rows = None
        for sequences, rows, local_offsets in self._row_blocks(offsets, cells, long_rows):
            if long_rows is not None and len(local_offsets) == 2 and local_offsets[-1] > long_rows:
                run_long(X[rows], emissions, buffers, sequences, rows)
                continue
            log_frameprob, shift, cache = self._clamped(
                emissions(X[rows], buffers),
                None if known_states is None else known_states[rows],
            )
            run(log_frameprob, shift, cache, local_offsets, buffers, sequences, rows)

    def _row_blocks(self, offsets, cells=None, long_rows=None):
        """``(sequences, rows, local_offsets)`` for blocks of whole sequences.

        A block holds about ``cells`` (default ``_BLOCK_CELLS``) rows x states;
        a sequence of more than ``long_rows`` rows (when given) is a block of
        its own.
        """
        cells = _BLOCK_CELLS if cells is None else cells
        rows_per_block = max(1, cells // self.n_components)
        for block_first, block_stop in blocks_of_rows(offsets, rows_per_block):
            for first, stop in isolate_long_sequences(offsets, block_first, block_stop, long_rows):
                start_row = offsets[first]
                yield (
                    slice(first, stop),
                    slice(start_row, offsets[stop]),
                    offsets[first : stop + 1] - start_row,
                )

    def _require_possible(self, sequence_log_likelihood):
        """State probabilities and paths are undefined for data of probability zero."""
        impossible = np.flatnonzero(np.asarray(sequence_log_likelihood) == -np.inf)
        if impossible.size:
            raise ValueError(
                f"Sequence(s) {impossible[:5].tolist()} have log-likelihood -inf, so their "
                f"state probabilities are undefined: {self._minus_infinity_cause}."
            )

    def _mstep(self, statistics):
        n_components = self.n_components
        # MAP under Dirichlet priors.  Zero probabilities stay zero (a
        # left-right topology is kept).
        if "s" in self.params:
            prior = self._prior("startprob_prior", (n_components,))
            self.startprob_ = dirichlet_map(
                statistics["start"], prior, self.startprob_, support=self.startprob_ != 0
            )[0]
        self._transition_mstep(statistics)
        self._emission_mstep(statistics)

    def _transition_mstep(self, statistics):
        """The M step of the transition component: ``transmat_`` (letter "t"), the
        MAP under the Dirichlet prior ``transmat_prior``."""
        if "t" in self.params:
            n_components = self.n_components
            prior = self._prior("transmat_prior", (n_components, n_components))
            self.transmat_ = dirichlet_map(
                statistics["trans"], prior, self.transmat_, support=self.transmat_ != 0
            )

    # -- SQUAREM ----------------------------------------------------------------

    def _acceleration_coordinates(self, X):
        """The parameters of the ``params`` letters as unconstrained coordinates
        (:class:`skseq.base.ParameterCoordinates`): probabilities by their
        logs, the emission parameters as the emission model declares
        (:meth:`_emission_coordinates`); None when nothing is learned."""
        emission_kinds = self._emission_coordinates(self._split_known_states(X)[0])
        kinds = {}
        for letter, attribute in self._all_letters.items():
            if letter not in self.params:
                continue
            if attribute in ("startprob_", "transmat_"):
                kinds[attribute] = ("probabilities", None)
            elif attribute in emission_kinds:
                kinds[self._storage_name(attribute)] = emission_kinds[attribute]
        return ParameterCoordinates(kinds) if kinds else None

    def _emission_coordinates(self, X):
        """``{attribute: (kind, units)}`` of the emission parameters (see
        :class:`skseq.base.ParameterCoordinates`), units from the data ``X``.

        A parameter left out (by default, all) is not extrapolated: SQUAREM
        moves the others and keeps EM's value of it.
        """
        return {}

    @staticmethod
    def _emitting(X):
        """Which rows of EM's data (the emission model's columns) emit: all but
        the missing rows, NaN throughout (they emit nothing)."""
        if X.dtype.kind != "f":
            return np.ones(X.shape[0], dtype=bool)
        return ~np.isnan(X).all(axis=1)

    def _n_scored_rows(self, X, lengths=None, sequence_ids=None, **score_arguments):
        # BIC's n: the rows that emit (:meth:`_emitting`), not the missing ones.
        rows, _ = self._prepare_fitted(X, lengths, sequence_ids)
        rows, _ = self._split_known_states(rows)
        return int(np.count_nonzero(self._emitting(rows)))

    def _n_parameters(self):
        counts = {"s": self.n_components - 1}
        counts.update(self._transition_n_parameters())
        counts.update(self._emission_n_parameters())
        return sum(counts[letter] for letter in self.params)

    # -- streams: forward-only smoothing ------------------------------------

    def _stream_statistics(self, stream):
        """Smoothed statistics of all rows a stream message has seen."""
        start_counts, transition_counts, feature_sums = stream.statistics()
        statistics = SufficientStatistics(start=start_counts, trans=transition_counts)
        statistics.update(self._statistics_from_features(feature_sums))
        return statistics

    def _advance_stream(self, X, stream):
        """Run the forward-only smoother over the rows of one sequence (part).

        ``stream`` is the message (a
        :class:`~skseq.inference.hmm.HMMStreamState`) carried from
        earlier rows of the same sequence, or ``None`` for a sequence that
        starts at ``X[0]``.  Returns the statistics these rows add (exactly
        what forward-backward over the whole sequence would add, at fixed
        parameters), their log-likelihood given the past, and the new message.
        """
        return self._forward_smoothing(X, stream)

    def _forward_smoothing(self, X, stream):
        """The forward-only smoother of :meth:`_advance_stream` on rows of EM's
        data: the stationary chain's (:func:`~skseq.inference.hmm_forward_smoothing`);
        a transition component with a matrix per row overrides it."""
        X, known_states = self._split_known_states(X)
        log_frameprob, cache = self._estep_emission_terms(X)
        log_frameprob, _ = clamp_to_known_states(log_frameprob, None, known_states)
        result = _forward_smoothing_rows(
            *self._estep_chain(),
            log_frameprob,
            self._emission_features(X, cache),
            stream,
        )
        after = self._stream_statistics(result.carried)
        added = after if stream is None else after + (-1.0) * self._stream_statistics(stream)
        return added, result.log_likelihood, result.carried

    def partial_fit(
        self, X, y=None, *, lengths=None, sequence_ids=None, new_sequence=False, known_states=None
    ):
        """One step of stochastic EM on a batch of rows.

        The E step runs on the batch only; its statistics are blended into
        the running statistics, ``s = (1 - rho) s + rho (N / B) s_batch`` (N:
        ``total_samples``, or all rows seen so far) with
        ``rho = (learning_offset + n_batch_iter_) ** -learning_decay``, and the
        M step maps them to parameters.  The first call initialises the model
        from its batch (as :meth:`fit` does); a model fitted with :meth:`fit`
        continues from its parameters.

        Consecutive calls on consecutive chunks of one long sequence continue
        that sequence: the first sequence of ``X`` continues the last
        sequence of the previous call, through a forward-only smoothing
        message whose size does not depend on how many rows have passed, so
        chunk boundaries do not restart the chain.

        To watch a stream learn, ``batch_log_likelihood_`` holds the
        log-likelihood of the last batch (given the rows before it, under the
        parameters before its step); with ``verbose``, each call prints it
        with the rows seen so far to stderr.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : None
            Ignored.
        lengths, sequence_ids : see :meth:`fit`.
        new_sequence : bool, default=False
            True when the first sequence of ``X`` starts afresh rather than
            continuing the last sequence of the previous call.
        known_states : array-like of int of shape (n_samples,), optional
            The known hidden state of each row, -1 where unknown: see
            :meth:`fit`.  A batch's labels clamp its rows only.

        Returns
        -------
        self
        """
        try:
            return self._partial_fit(
                X, y, lengths, sequence_ids, new_sequence, known_states=known_states
            )
        finally:
            self.__dict__.pop("_known_states_stacked", None)

    # The hooks of the stream engine (BaseEM._partial_fit).

    _stream_attributes = ("filtered_state_",)

    def _is_new_stream(self):
        return not hasattr(self, "startprob_") or not hasattr(self, "n_features_in_")

    def _validate_stream_batch(
        self, X, y, lengths, sequence_ids, *, first_call, continues, known_states=None
    ):
        X, offsets = self._prepare(
            X, y, lengths, sequence_ids, reset=first_call, method="partial_fit"
        )
        known_states = self._check_known_states(known_states, X)
        self._check_training_rows(X)
        self._check_priors(X.shape[1])
        if not first_call:
            self._check_fitted_parameters(X.shape[1])
            self._ensure_emission_centre()
            if known_states is not None:
                self._check_known_states_possible(known_states, offsets, continues)
        return self._stack_known_states(X, known_states), offsets

    def _initialize_stream(self, X, offsets):
        self._capture_presets()
        try:
            super()._initialize_stream(X, offsets)
        finally:
            del self._presets
        self._initialized()

    def _publish_stream(self, carried):
        self.filtered_state_ = carried.filtered.copy()

    def filter_stream(self, X, *, new_sequence=False):
        """Filtered state probabilities of new rows of a stream, without learning.

        Continues from ``filtered_state_``, the filtered distribution after
        the last row seen by :meth:`partial_fit`, :meth:`filter_update`,
        :meth:`reset_filter` or the previous call, and updates it: online
        decoding (e.g. regime detection in real time).  With no such state
        (after :meth:`fit` or ``reset_filter()``) ``X[0]`` starts a sequence.
        The online-filter API of every family (the linear-Gaussian SSM's
        :meth:`~skseq.lds.LinearGaussianSSM.filter_stream` too).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The next rows of one sequence.
        new_sequence : bool, default=False
            Start a new sequence at ``X[0]`` (from ``startprob_``).

        Returns
        -------
        filtered : ndarray of shape (n_samples, n_components)
            p(z_t | all rows of the stream up to t).
        """
        X, offsets = self._prepare_fitted(X, None, None)
        state = None if new_sequence else getattr(self, "filtered_state_", None)
        filtered, log_likelihood = self._stream_forward(X, offsets, state)
        self._check_log_likelihood(log_likelihood)
        self.filtered_state_ = filtered[-1].copy()
        return filtered

    def _stream_forward(self, X, offsets, state):
        """``(filtered, log_likelihood)`` of the rows of :meth:`filter_stream`.

        ``state``: the filtered distribution after the stream's previous row,
        or None when ``X[0]`` starts a sequence.  Transition components with
        other chains override it (input-driven transitions).
        """
        start = self.startprob_ if state is None else state @ self.transmat_
        result = _forward_offsets(start, self.transmat_, self._compute_log_likelihood(X), offsets)
        return result.filtered, result.log_likelihood

    def filter_update(self, x):
        """Advance the online filter by one row: :meth:`filter_stream` on ``x`` alone.

        The name of the linear-Gaussian SSM's (and pykalman's) one-step filter.

        Parameters
        ----------
        x : array-like of shape (n_features,)
            The next row of the stream.

        Returns
        -------
        filtered : ndarray of shape (n_components,)
            p(z_t | all rows of the stream up to t), also kept in
            ``filtered_state_``.
        """
        return self.filter_stream(np.reshape(x, (1, -1)))[0]

    def reset_filter(self, X=None):
        """Restart the stream of :meth:`filter_stream` and :meth:`filter_update`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), optional
            A history, taken as one sequence: the stream continues from its
            last filtered state.  None: the next row starts a sequence (from
            ``startprob_``).

        Returns
        -------
        self
        """
        check_is_fitted(self)
        self.__dict__.pop("filtered_state_", None)
        if X is not None:
            self.filter_stream(X, new_sequence=True)
        return self

    # -- public API ---------------------------------------------------------

    def fit(self, X, y=None, *, lengths=None, sequence_ids=None, known_states=None):
        """Estimate the model parameters with the EM (Baum-Welch) algorithm.

        A sequence whose forward-backward arrays would pass scikit-learn's
        ``working_memory`` budget (``sklearn.config_context(working_memory=MiB)``,
        1024 MiB by default) gets a checkpointed E step: O(sqrt(T) n_components)
        memory, the same statistics, about 1.3 times the time (user guide,
        "One long sequence in bounded memory").  ``X`` may be a ``np.memmap``.

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
        known_states : array-like of int of shape (n_samples,), optional
            Semi-supervised fitting: the hidden state of each row where it is
            known, -1 where it is not (scikit-learn's marker of an unlabelled
            sample).  The E step clamps the labelled rows to their states
            (state k is label k), and the initialisation starts each labelled
            state's emission parameters at its rows; fully labelled rows give
            the supervised (MAP) estimates in one iteration.  ``monitor_``
            then records log p(X, labelled states), the log-likelihood of the
            data jointly with the labels.  Routed by metadata routing like
            ``sequence_ids`` (requested by default).  A ValueError names a
            label that cannot be: a state outside 0..n_components - 1, not a
            whole number, on a missing (all-NaN) row, or a start or transition
            between consecutive labelled rows that ``startprob_`` or
            ``transmat_`` forbid.  EM then works on a copy of ``X`` with the
            labels as one more column.

        Returns
        -------
        self
        """
        self._check_params()
        X, offsets = self._prepare(X, y, lengths, sequence_ids, reset=True)
        known_states = self._check_known_states(known_states, X)
        self._check_training_rows(X)
        self._check_priors(X.shape[1])
        try:
            return self._fit_em(self._stack_known_states(X, known_states), offsets)
        finally:
            self.__dict__.pop("_known_states_stacked", None)

    def score(self, X, y=None, *, lengths=None, sequence_ids=None, sample_weight=None):
        """Log-likelihood of ``X`` under the model.

        A long sequence is scored in chunks, its forward message carried
        across: the working memory does not grow with its length.

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
        X, offsets = self._prepare_fitted(X, lengths, sequence_ids, y=y, method="score")
        result = self._forward_over_blocks(
            X, offsets, keep_log_predictive=sample_weight is not None
        )
        if self._densities_never_zero:
            self._require_possible(result.sequence_log_likelihood)
        if sample_weight is None:
            return result.log_likelihood
        sample_weight = _check_sample_weight(sample_weight, X)
        return float(np.dot(sample_weight, result.log_predictive))

    @lengths_by_keyword
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
        result = self._forward_over_blocks(X, offsets, keep_log_predictive=False)
        sequence_log_likelihood = result.sequence_log_likelihood
        if self._densities_never_zero:
            self._require_possible(sequence_log_likelihood)
        return sequence_log_likelihood

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
        sequence_log_likelihood, posteriors = self._posteriors(X, offsets)
        return float(sequence_log_likelihood.sum()), posteriors

    def _posteriors(self, X, offsets):
        """Per-sequence log-likelihoods and posteriors, block by block."""
        controls = self._row_controls(X)
        X, _ = self._split_known_states(X)
        posteriors = np.empty((X.shape[0], self.n_components))
        sequence_log_likelihood = np.empty(len(offsets) - 1)

        def block(log_frameprob, shift, cache, local_offsets, buffers, sequences, rows):
            self._chain_posteriors(
                None if controls is None else controls[rows],
                log_frameprob,
                local_offsets,
                shift,
                buffers,
                posteriors[rows],
                sequence_log_likelihood[sequences],
            )

        self._blockwise(X, offsets, block)
        self._require_possible(sequence_log_likelihood)
        return sequence_log_likelihood, posteriors

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
        if algorithm == "map":
            posteriors = self._posteriors(X, offsets)[1]
            return float(posteriors.max(axis=1).sum()), posteriors.argmax(axis=1)
        log_probs, states = self._viterbi(X, offsets)
        return float(log_probs.sum()), states

    def _viterbi(self, X, offsets):
        """``(sequence_log_prob, states)``: the most likely path of every sequence of
        validated ``X`` (a model with another hidden chain overrides it; the
        transition component's recursion is :meth:`_chain_viterbi`)."""
        controls = self._row_controls(X)
        X, _ = self._split_known_states(X)
        states = np.empty(X.shape[0], dtype=np.intp)
        log_probs = np.empty(len(offsets) - 1)

        def block(log_frameprob, shift, cache, local_offsets, buffers, sequences, rows):
            self._chain_viterbi(
                None if controls is None else controls[rows],
                log_frameprob,
                local_offsets,
                buffers,
                states[rows],
                log_probs[sequences],
            )

        self._blockwise(X, offsets, block, shifted=False)
        self._require_possible(log_probs)
        return log_probs, states

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

    @lengths_by_keyword
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
        result = self._forward(X, offsets)
        self._require_possible(result.sequence_log_likelihood)
        return result.filtered

    @lengths_by_keyword
    def predict_next_state_proba(self, X, *, lengths=None, sequence_ids=None):
        """One-step predictive state probabilities p(z_{t+1} | x_1..x_t) of each row.

        Row ``t`` of a sequence holds the distribution of the state of the
        step after it, given the rows of its sequence up to and including
        ``t``: the filtered probabilities of :meth:`filter` times
        ``transmat_``.  The first row of a sequence thus holds the prediction
        made after seeing that row, and its last row the prediction for the
        step beyond the sequence's end; the prior of the first step, before
        any row is seen, is ``startprob_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        lengths, sequence_ids : see :meth:`fit`.

        Returns
        -------
        predicted : ndarray of shape (n_samples, n_components)
            Each row sums to one.

        Raises
        ------
        ValueError
            If a sequence has probability zero under the model (its filtered
            probabilities are undefined), as :meth:`filter` does.
        """
        X, offsets = self._prepare_fitted(X, lengths, sequence_ids)
        return self._predicted_states(X, offsets)

    def _predicted_states(self, X, offsets):
        """p(z_{t+1} | x_1..x_t) of every row of validated ``X``."""
        result = self._forward(X, offsets)
        self._require_possible(result.sequence_log_likelihood)
        predicted = result.filtered @ self.transmat_
        # Both factors are stochastic; renormalising only removes rounding.
        predicted /= predicted.sum(axis=1, keepdims=True)
        return predicted

    def _forward(self, X, offsets, keep_filtered=True, keep_log_predictive=True):
        """Forward pass block by block; ``filtered`` is None unless ``keep_filtered``,
        ``log_predictive`` None unless ``keep_log_predictive``.

        Without ``filtered``, a sequence of more than ``_LONG_SEQUENCE_CELLS``
        rows x states goes in chunks of a block's rows
        (:func:`~skseq.inference.hmm._chunked_forward`): the working memory
        does not grow with the length of a sequence.
        """
        controls = self._row_controls(X)
        X, _ = self._split_known_states(X)
        filtered = np.empty((X.shape[0], self.n_components)) if keep_filtered else None
        log_predictive = np.empty(X.shape[0]) if keep_log_predictive else None
        sequence_log_likelihood = np.empty(len(offsets) - 1)

        def block(log_frameprob, shift, cache, local_offsets, buffers, sequences, rows):
            self._chain_forward(
                None if controls is None else controls[rows],
                log_frameprob,
                local_offsets,
                shift,
                buffers,
                None if filtered is None else filtered[rows],
                None if log_predictive is None else log_predictive[rows],
                sequence_log_likelihood[sequences],
            )

        def long_sequence(X, emissions, buffers, sequences, rows):
            def on_chunk(start, stop, chunk_log_predictive):
                log_predictive[rows.start + start : rows.start + stop] = chunk_log_predictive

            sequence_log_likelihood[sequences] = self._chunked_chain_forward(
                None if controls is None else controls[rows],
                X.shape[0],
                chunk_rows,
                lambda start, stop: emissions(X[start:stop], buffers)[:2],
                None if log_predictive is None else on_chunk,
                buffers,
            )

        chunk_rows = max(1, _BLOCK_CELLS // self.n_components)
        self._blockwise(
            X,
            offsets,
            block,
            long_rows=max(1, _LONG_SEQUENCE_CELLS // self.n_components),
            run_long=None if keep_filtered else long_sequence,
        )
        return HMMForwardResult(
            float(sequence_log_likelihood.sum()), filtered, sequence_log_likelihood, log_predictive
        )

    def _forward_over_blocks(self, X, offsets, keep_log_predictive=True):
        """:meth:`_forward` without ``filtered``, over blocks of sequences in
        ``n_jobs`` threads or on the joblib backend's workers (scores)."""
        results = self._over_sequence_blocks(
            lambda X, offsets: self._forward(
                X, offsets, keep_filtered=False, keep_log_predictive=keep_log_predictive
            ),
            offsets,
            X,
        )
        sequence_log_likelihood = np.concatenate([r.sequence_log_likelihood for r in results])
        return HMMForwardResult(
            float(sequence_log_likelihood.sum()),
            None,
            sequence_log_likelihood,
            np.concatenate([r.log_predictive for r in results]) if keep_log_predictive else None,
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
        self._check_fitted_parameters()
        check_path_length(n_samples)
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
        states = self._sample_path(start, n_samples, random_state)
        return self._sample_emissions(states, random_state), states

    def _sample_path(self, startprob, n_samples, random_state):
        """A path of ``n_samples`` hidden states whose first is drawn from
        ``startprob``, for :meth:`sample` (a model with another hidden chain
        overrides it)."""
        return _sample_states(startprob, self.transmat_, random_state.rand(n_samples))

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
