"""Explicit-duration (semi-Markov) hidden Markov models.

:class:`SemiMarkovHMM` replaces the hidden Markov chain of
:class:`~skseq.hmm.BaseHMM` by a semi-Markov one and keeps the emission
models: a visit to state k lasts d = 1 .. ``max_duration`` rows with
probability ``duration_probs_[k, d - 1]``, then the next visit's state is
drawn from row k of ``transmat_``, whose diagonal is zero.  It plugs into
BaseHMM's EM engine through its hooks: ``_chain_estep`` (forward-backward
over segments, :func:`skseq.inference.hsmm_forward_backward`),
``_viterbi``, ``_forward``, ``_posteriors``, ``_sample_path``, the M step
of the durations, the stream hooks (``_advance_stream``: forward-only
smoothing over (state, age)) and the SQUAREM coordinates.  The public
classes mix it with an emission model (:class:`SemiMarkovGaussianHMM`
with :class:`~skseq.hmm.GaussianHMM`, :class:`SemiMarkovCategoricalHMM`
with :class:`~skseq.hmm.CategoricalHMM`) whose emission code they reach
through the MRO.
"""

import numpy as np
from scipy import optimize, special, stats
from sklearn.utils.validation import check_is_fitted

from .._validation import check_bool_param, integer_rule, option_rule, prior_rule
from ..base import ParameterCoordinates, SufficientStatistics
from ..inference.hmm import HMMForwardResult
from ..inference.hsmm import (
    _check_log_message,
    _forward_backward_offsets,
    _forward_offsets,
    _forward_smoothing_rows,
    _reachable_stream,
    _sample_segments,
    _stream_statistics,
    _viterbi_offsets,
    complete_duration_counts,
)
from ._base import BaseHMM, check_probability_vector, clamp_to_known_states, dirichlet_map
from ._discrete import CategoricalHMM
from ._gaussian import GaussianHMM

__all__ = ["SemiMarkovHMM", "SemiMarkovGaussianHMM", "SemiMarkovCategoricalHMM"]

DURATION_DISTRIBUTIONS = ("poisson", "negative_binomial", "categorical")

# Brent's bounds for the rate (mean of d - 1) and the shape of the durations.
_LOG_MEAN_BOUNDS = (np.log(1e-6), np.log(1e6))
_LOG_SHAPE_BOUNDS = (np.log(1e-3), np.log(1e4))
# Below this truncated tail mass the closed-form mean is the exact M step.
_NEGLIGIBLE_TAIL = 1e-12


def duration_pmf(distribution, max_duration, means, shapes=None):
    """(n_states, max_duration) pmf of the durations d = 1 .. max_duration, d - 1 having
    mean ``means`` (Poisson, or negative binomial of shape ``shapes``), truncated
    to ``max_duration`` and renormalised."""
    steps = np.arange(max_duration)[None, :]
    means = np.asarray(means, dtype=np.float64)[:, None]
    # The log-pmfs written out (scipy.stats' own cost more than the rest of the
    # M step's objective, which the negative binomial's maximisation calls often).
    log_factorial = special.gammaln(steps + 1.0)
    if distribution == "poisson":
        log_pmf = special.xlogy(steps, means) - means - log_factorial
    else:
        shapes = np.asarray(shapes, dtype=np.float64)[:, None]
        # log Gamma(d + r) - log Gamma(r) = sum_{i < d} log(r + i), without cancellation.
        rising = np.cumsum(np.log(shapes + steps), axis=1) - np.log(shapes + steps)
        log_pmf = (
            rising
            - log_factorial
            - shapes * np.log1p(means / shapes)
            + special.xlogy(steps, means / (shapes + means))
        )
    log_pmf = log_pmf - log_pmf.max(axis=1, keepdims=True)
    pmf = np.exp(log_pmf)
    return pmf / pmf.sum(axis=1, keepdims=True)


def _expected_log_pmf(counts, pmf):
    """sum_d counts[d] log pmf[d] (the durations' part of EM's Q), 0 log 0 = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(pmf)
        return float(np.sum(np.where(counts > 0, counts * logs, 0.0)))


def _maximise(objective, bounds):
    """argmax of a scalar function on an interval (Brent's bounded method)."""
    result = optimize.minimize_scalar(
        lambda x: -objective(x), bounds=bounds, method="bounded", options={"xatol": 1e-10}
    )
    return float(result.x)


class SemiMarkovHMM(BaseHMM):
    """Base class of the explicit-duration HMMs; see :class:`SemiMarkovGaussianHMM`.

    A subclass mixes in an emission model (a :class:`~skseq.hmm.BaseHMM`
    subclass) after this class and sets ``max_duration`` and
    ``duration_distribution`` in its constructor.
    """

    @property
    def _all_letters(self):
        return {
            "s": "startprob_",
            "t": "transmat_",
            "d": "duration_probs_",
            **self._emission_letters,
        }

    def _parameter_rules(self):
        return {
            **super()._parameter_rules(),
            "max_duration": integer_rule(low=1),
            "duration_distribution": option_rule(*DURATION_DISTRIBUTIONS),
            "duration_prior": prior_rule(low=0.0, low_open=True),
        }

    # -- the parameters of the semi-Markov chain ------------------------------

    @staticmethod
    def _default_transmat(n_components):
        """Every other state equally likely next (no self transitions); [[1]] when K = 1."""
        if n_components == 1:
            return np.ones((1, 1))
        transmat = np.full((n_components, n_components), 1.0 / (n_components - 1))
        np.fill_diagonal(transmat, 0.0)
        return transmat

    def _duration_attributes(self):
        """The attributes that hold the duration distribution's parameters."""
        return {
            "poisson": ("duration_rates_",),
            "negative_binomial": ("duration_rates_", "duration_shapes_"),
            "categorical": (),
        }[self.duration_distribution]

    def _initialize(self, X, offsets, random_state):
        super()._initialize(X, offsets, random_state)
        self._check_transmat_diagonal()
        n_components, max_duration = self.n_components, self.max_duration
        preset = self._initial_value("duration_probs_")
        if preset is not None:
            self.duration_probs_ = check_probability_vector(
                preset, "duration_probs_", (n_components, max_duration)
            )
            self._durations_from_pmf()
            return
        mean = min((max_duration - 1) / 2.0, 9.0)
        if self.duration_distribution == "categorical":
            self.duration_probs_ = np.full((n_components, max_duration), 1.0 / max_duration)
            return
        self.duration_rates_ = np.full(n_components, max(mean, 1e-3))
        if self.duration_distribution == "negative_binomial":
            self.duration_shapes_ = np.full(n_components, 2.0)
        self._update_pmf()

    def _durations_from_pmf(self):
        """Parameters of the duration distribution by the moments of ``duration_probs_``."""
        if self.duration_distribution == "categorical":
            return
        steps = np.arange(self.max_duration)
        mean = self.duration_probs_ @ steps
        self.duration_rates_ = np.maximum(mean, 1e-6)
        if self.duration_distribution == "negative_binomial":
            variance = self.duration_probs_ @ steps**2 - mean**2
            excess = np.maximum(variance - mean, 1e-6)
            self.duration_shapes_ = np.clip(mean**2 / excess, 1e-3, 1e4)

    def _update_pmf(self):
        """``duration_probs_`` from the duration parameters (parametric families)."""
        if self.duration_distribution != "categorical":
            self.duration_probs_ = duration_pmf(
                self.duration_distribution,
                self.max_duration,
                self.duration_rates_,
                getattr(self, "duration_shapes_", None),
            )

    def _check_transmat_diagonal(self):
        if self.n_components > 1 and np.any(np.diag(self.transmat_) != 0):
            raise ValueError(
                "transmat_ of a semi-Markov HMM must have a zero diagonal (a visit ends by "
                "leaving its state; its length is the duration's), got diagonal "
                f"{np.diag(self.transmat_)}."
            )

    def _check_fitted_parameters(self, n_features=None):
        super()._check_fitted_parameters(n_features)
        integer_rule(low=1)(self.max_duration, "max_duration")
        if getattr(self, "duration_probs_", None) is None:
            raise AttributeError(
                f"{type(self).__name__} has no duration_probs_: fit the model, or set "
                f"duration_probs_ of shape (n_components, max_duration) by hand."
            )
        self._check_transmat_diagonal()
        check_probability_vector(
            self.duration_probs_, "duration_probs_", (self.n_components, self.max_duration)
        )

    def _get_parameters(self):
        parameters = super()._get_parameters()
        for name in self._duration_attributes():
            parameters[name] = np.copy(getattr(self, name))
        return parameters

    def _n_parameters(self):
        n_components = self.n_components
        durations = {
            "poisson": n_components,
            "negative_binomial": 2 * n_components,
            "categorical": n_components * (self.max_duration - 1),
        }[self.duration_distribution]
        counts = {
            "s": n_components - 1,
            "t": n_components * max(n_components - 2, 0),
            "d": durations,
        }
        counts.update(self._emission_n_parameters())
        return sum(counts[letter] for letter in self.params)

    def _log_chain(self):
        """log startprob_, log transmat_ and log duration_probs_, C-contiguous."""
        with np.errstate(divide="ignore"):
            return tuple(
                np.ascontiguousarray(np.log(p))
                for p in (self.startprob_, self.transmat_, self.duration_probs_)
            )

    # -- the E step and the M step --------------------------------------------

    def _estep_chain(self):
        return self._log_chain()

    def _checkpoint_threshold(self, n_features):
        return None  # the whole-sequence E step for every sequence

    def _chain_estep(self, chain, log_frameprob, shift, offsets, buffers, controls=None):
        result = _forward_backward_offsets(*chain, _unshifted(log_frameprob, shift), offsets)
        durations = complete_duration_counts(
            result.duration_counts, result.censored_counts, self.duration_probs_
        )
        statistics = SufficientStatistics(
            start=result.start_counts, trans=result.transition_counts, durations=durations
        )
        return statistics, result.posteriors, result.log_likelihood

    def _mstep(self, statistics):
        super()._mstep(statistics)
        if "d" in self.params:
            self._duration_map(statistics["durations"])

    def _duration_map(self, counts):
        """The durations' M step on the expected ``counts`` and the pseudo-counts of
        ``duration_prior`` (MAP)."""
        prior = self._prior("duration_prior", (self.n_components, self.max_duration))
        self._duration_mstep(np.maximum(prior - 1.0 + counts, 0.0))

    def _duration_mstep(self, counts):
        """Maximise sum_d counts[k, d] log p_k(d) per state (``counts``: the expected
        counts plus the prior's pseudo-counts); a state without visits keeps its
        durations, and a step that would not raise the sum is not taken."""
        distribution = self.duration_distribution
        if distribution == "categorical":
            self.duration_probs_ = dirichlet_map(counts, 1.0, self.duration_probs_)
            return
        steps = np.arange(self.max_duration)
        rates = self.duration_rates_.copy()
        shapes = getattr(self, "duration_shapes_", None)
        shapes = None if shapes is None else shapes.copy()
        for k in range(self.n_components):
            row = counts[k]
            total = row.sum()
            if not total > 0:
                continue
            shape = None if shapes is None else shapes[k : k + 1]
            old = _expected_log_pmf(row, self.duration_probs_[k])
            new_rate, new_shape = self._duration_step(row, float(row @ steps / total), shape)
            pmf = duration_pmf(distribution, self.max_duration, [new_rate], new_shape)[0]
            value = _expected_log_pmf(row, pmf)
            if shape is not None:
                new_rate, new_shape, value = self._joint_duration_step(
                    row, (new_rate, new_shape[0], value), (rates[k], shape[0], old)
                )
                new_shape = np.array([new_shape])
            if value >= old:
                rates[k] = new_rate
                if shapes is not None:
                    shapes[k] = new_shape[0]
        self.duration_rates_ = rates
        if shapes is not None:
            self.duration_shapes_ = shapes
        self._update_pmf()

    def _joint_duration_step(self, row, candidate, current):
        """``(rate, shape, value)``: the negative binomial's expected log-pmf of
        ``row`` maximised over (log rate, log shape) together (L-BFGS-B within
        the bounds), from the better of ``candidate`` and ``current``, each
        ``(rate, shape, value)``.  The moment step alone is not the maximum
        when the truncation at ``max_duration`` matters, and may even lower
        the objective: a fixed point of EM must be a stationary point of it."""
        rate, shape, value = max(candidate, current, key=lambda point: point[2])

        def loss(point):
            log_rate, log_shape = np.clip(point, *zip(_LOG_MEAN_BOUNDS, _LOG_SHAPE_BOUNDS))
            pmf = duration_pmf(
                "negative_binomial", self.max_duration, [np.exp(log_rate)], [np.exp(log_shape)]
            )[0]
            return -_expected_log_pmf(row, pmf)

        start = np.clip(np.log([rate, shape]), *zip(_LOG_MEAN_BOUNDS, _LOG_SHAPE_BOUNDS))
        result = optimize.minimize(
            loss, start, method="L-BFGS-B", bounds=[_LOG_MEAN_BOUNDS, _LOG_SHAPE_BOUNDS]
        )
        if np.isfinite(result.fun) and -result.fun > value:
            return float(np.exp(result.x[0])), float(np.exp(result.x[1])), float(-result.fun)
        return rate, shape, value

    def _duration_step(self, row, mean, shape):
        """``(rate, shape)`` maximising the expected log-pmf of the counts ``row``
        (``mean``: their mean of d - 1).

        The negative binomial's shape by Brent's method at that mean.  The
        mean: where the truncated distribution's mean of d - 1 equals the
        counts' (the stationary point of the truncated likelihood, for the
        Poisson and for the negative binomial at a fixed shape), which is
        the closed form ``mean`` when truncation at ``max_duration`` is
        negligible, else a root found by Brent's method.
        """
        distribution, max_duration = self.duration_distribution, self.max_duration
        mean = min(max(mean, 1e-6), max_duration - 1.0)
        steps = np.arange(max_duration)

        def pmf(rate, shape):
            return duration_pmf(distribution, max_duration, [rate], shape)[0]

        if shape is not None:
            log_shape = _maximise(
                lambda s: _expected_log_pmf(row, pmf(mean, [np.exp(s)])), _LOG_SHAPE_BOUNDS
            )
            shape = np.array([np.exp(log_shape)])
        if distribution == "poisson":
            tail = stats.poisson.sf(max_duration - 1, mean)
        else:
            tail = stats.nbinom.sf(max_duration - 1, shape[0], shape[0] / (shape[0] + mean))
        if tail <= _NEGLIGIBLE_TAIL or max_duration == 1:
            return float(mean), shape

        def excess(log_rate):  # truncated mean minus the counts' mean, increasing
            return pmf(np.exp(log_rate), shape) @ steps - mean

        low, high = _LOG_MEAN_BOUNDS
        if excess(high) <= 0:
            return float(np.exp(high)), shape
        root = optimize.brentq(excess, max(low, np.log(mean) - 30.0), high, xtol=1e-14)
        return float(np.exp(root)), shape

    # -- inference on new data ------------------------------------------------

    def _forbidden_label_steps(self, before, after):
        # Two rows in one state may be one visit going on.
        return (before != after) & super()._forbidden_label_steps(before, after)

    def _posteriors(self, X, offsets):
        X, _ = self._split_known_states(X)
        posteriors = np.empty((X.shape[0], self.n_components))
        sequence_log_likelihood = np.empty(len(offsets) - 1)
        chain = self._log_chain()

        def block(log_frameprob, shift, cache, local_offsets, buffers, sequences, rows):
            result = _forward_backward_offsets(
                *chain, _unshifted(log_frameprob, shift), local_offsets
            )
            posteriors[rows] = result.posteriors
            sequence_log_likelihood[sequences] = result.sequence_log_likelihood

        self._blockwise(X, offsets, block, shifted=False)
        self._require_possible(sequence_log_likelihood)
        return sequence_log_likelihood, posteriors

    def _viterbi(self, X, offsets):
        X, _ = self._split_known_states(X)
        states = np.empty(X.shape[0], dtype=np.intp)
        log_probs = np.empty(len(offsets) - 1)
        chain = self._log_chain()

        def block(log_frameprob, shift, cache, local_offsets, buffers, sequences, rows):
            log_probs[sequences], states[rows] = _viterbi_offsets(
                *chain, _unshifted(log_frameprob, shift), local_offsets
            )

        self._blockwise(X, offsets, block, shifted=False)
        self._require_possible(log_probs)
        return log_probs, states

    def _filtered_and_predicted(self, X, offsets):
        """``(filtered, predicted, log_predictive, sequence_log_likelihood)`` of
        validated ``X``: p(z_t | x_<=t), p(z_{t+1} | x_<=t), log p(x_t | x_<t)."""
        X, _ = self._split_known_states(X)
        n_rows, n_components = X.shape[0], self.n_components
        filtered = np.empty((n_rows, n_components))
        predicted = np.empty((n_rows, n_components))
        log_predictive = np.empty(n_rows)
        sequence_log_likelihood = np.empty(len(offsets) - 1)
        chain = self._log_chain()

        def block(log_frameprob, shift, cache, local_offsets, buffers, sequences, rows):
            results = _forward_offsets(*chain, _unshifted(log_frameprob, shift), local_offsets)
            filtered[rows], predicted[rows], log_predictive[rows] = results[:3]
            sequence_log_likelihood[sequences] = results[3]

        self._blockwise(X, offsets, block, shifted=False)
        return filtered, predicted, log_predictive, sequence_log_likelihood

    def _forward(self, X, offsets, keep_filtered=True, keep_log_predictive=True):
        filtered, _, log_predictive, sequence_log_likelihood = self._filtered_and_predicted(
            X, offsets
        )
        return HMMForwardResult(
            float(sequence_log_likelihood.sum()),
            filtered if keep_filtered else None,
            sequence_log_likelihood,
            log_predictive if keep_log_predictive else None,
        )

    def _predicted_states(self, X, offsets):
        """p(z_{t+1} | x_1..x_t): the current visit goes on or a new one starts."""
        _, predicted, _, sequence_log_likelihood = self._filtered_and_predicted(X, offsets)
        self._require_possible(sequence_log_likelihood)
        return predicted

    def _sample_path(self, startprob, n_samples, random_state):
        return _sample_segments(
            startprob, self.transmat_, self.duration_probs_, n_samples, random_state
        ).states

    def get_stationary_distribution(self):
        """Long-run fraction of rows spent in each state.

        The stationary distribution of the chain of visits (``transmat_``)
        weighted by the states' mean durations, normalised.

        Returns
        -------
        stationary : ndarray of shape (n_components,)
        """
        check_is_fitted(self, "transmat_")
        visits = super().get_stationary_distribution()
        occupancy = visits * (self.duration_probs_ @ np.arange(1, self.max_duration + 1))
        return occupancy / occupancy.sum()

    # -- known states (semi-supervised fits) ----------------------------------
    #
    # BaseHMM's machinery as it is: a labelled row keeps only its state's
    # log-emission (clamp_to_known_states), so the recursions over segments
    # weigh exactly the segmentations in which every labelled row lies in a
    # visit to its state.  Only the check of what the chain forbids differs.

    def _check_known_states_possible(self, known_states, offsets, continues=False):
        """A ValueError when the chain forbids the labels: a labelled first row
        of a sequence whose start probability is zero, consecutive rows of one
        sequence labelled j then k != j with ``transmat_[j, k]`` = 0, or a run of
        more than ``max_duration`` consecutive rows labelled k (with a zero
        diagonal a run is one visit).  Labels that zero duration probabilities
        forbid give a log-likelihood of -inf, which the E step reports."""
        super()._check_known_states_possible(known_states, offsets, continues)
        diagonal = np.diag(self.transmat_)
        if self.n_components == 1 or np.all(diagonal > 0):
            return
        boundaries = np.ones(len(known_states) + 1, dtype=bool)  # where a run starts
        boundaries[1:-1] = known_states[1:] != known_states[:-1]
        boundaries[offsets[:-1]] = True
        edges = np.flatnonzero(boundaries)
        starts, lengths = edges[:-1], np.diff(edges)
        states = known_states[starts]
        too_long = (states >= 0) & (diagonal[np.maximum(states, 0)] == 0)
        too_long &= lengths > self.max_duration
        if np.any(too_long):
            run = int(np.flatnonzero(too_long)[0])
            first, length, state = int(starts[run]), int(lengths[run]), int(states[run])
            raise ValueError(
                f"known_states[{first}:{first + length}] labels {length} consecutive rows "
                f"{state}, but a visit lasts at most max_duration={self.max_duration} rows: "
                "the model forbids that run."
            )

    # -- SQUAREM ---------------------------------------------------------------

    def _acceleration_coordinates(self, X):
        """BaseHMM's coordinates and, with "d" learned, the durations': the
        free pmf by its logs, the rate (and the shape) by their logs."""
        coordinates = super()._acceleration_coordinates(X)
        if "d" not in self.params:
            return coordinates
        kinds = {} if coordinates is None else dict(coordinates.kinds)
        if self.duration_distribution == "categorical":
            kinds["duration_probs_"] = ("probabilities", None)
        else:
            for name in self._duration_attributes():
                kinds[name] = ("positive", 1.0)
        return ParameterCoordinates(kinds)

    def _feasible_parameters(self, parameters):
        """The pmf of an extrapolated rate (and shape), within the bounds of the
        M step; the emission model's feasibility first."""
        parameters = super()._feasible_parameters(parameters)
        if parameters is None or self.duration_distribution == "categorical":
            return parameters
        parameters = dict(parameters)
        low, high = np.exp(_LOG_MEAN_BOUNDS)
        parameters["duration_rates_"] = np.clip(parameters["duration_rates_"], low, high)
        shapes = None
        if self.duration_distribution == "negative_binomial":
            low, high = np.exp(_LOG_SHAPE_BOUNDS)
            shapes = np.clip(parameters["duration_shapes_"], low, high)
            parameters["duration_shapes_"] = shapes
        parameters["duration_probs_"] = duration_pmf(
            self.duration_distribution, self.max_duration, parameters["duration_rates_"], shapes
        )
        return parameters

    # -- streams: partial_fit continuing a sequence ---------------------------

    def _stream_statistics(self, stream):
        """Smoothed statistics of all rows a stream message has seen (its last
        visit censored, completed by the current durations)."""
        start, transitions, durations, feature_sums = _stream_statistics(
            stream, self.duration_probs_
        )
        statistics = SufficientStatistics(start=start, trans=transitions, durations=durations)
        statistics.update(self._statistics_from_features(feature_sums))
        return statistics

    def _advance_stream(self, X, stream):
        """Forward-only smoothing over the (state, age) chain of one sequence (part).

        ``stream``: the message carried from the sequence's earlier rows
        (:class:`~skseq.inference.hsmm._HSMMStream`), or None when ``X[0]``
        starts it.  Returns the statistics these rows add, the revision of
        the earlier rows' included (at fixed parameters, exactly what
        forward-backward over the whole sequence gives: the censored visit
        the previous chunk ended in goes on or ends), their log-likelihood
        given the past, and the new message.
        """
        X, known_states = self._split_known_states(X)
        log_frameprob, cache = self._estep_emission_terms(X)
        log_frameprob, _ = clamp_to_known_states(log_frameprob, None, known_states)
        log_likelihood, carried, _ = _forward_smoothing_rows(
            *self._log_chain(), log_frameprob, self._emission_features(X, cache), stream
        )
        self._check_log_likelihood(log_likelihood)
        after = self._stream_statistics(carried)
        added = after if stream is None else after + (-1.0) * self._stream_statistics(stream)
        return added, log_likelihood, carried

    _stream_attributes = ("filtered_state_", "filter_message_", "stream_log_likelihood_")

    def _publish_stream(self, carried):
        """The online filter continues where ``partial_fit`` ended: its message on
        the (state, age) entries the updated durations can reach."""
        for name in self._stream_attributes:
            self.__dict__.pop(name, None)
        reachable = _reachable_stream(carried, self._log_chain()[2])
        if reachable is not None:
            self.filter_message_ = reachable.log_message.copy()
            self.filtered_state_ = np.exp(reachable.log_message).sum(axis=1)

    def filter_stream(self, X, *, new_sequence=False):
        """Filtered state probabilities of new rows of a stream, without learning.

        Continues from ``filter_message_``, the joint distribution of the
        state and the age of its visit after the last row seen by
        :meth:`filter_update`, :meth:`reset_filter` or the previous call, and
        updates it (and ``filtered_state_``, its marginal over the state).
        The continuation is exact: at fixed parameters, a sequence fed in
        chunks cut anywhere gets the filtered probabilities of :meth:`filter`
        on the whole sequence, and the chunks' log-likelihoods (each given
        the rows before it, ``stream_log_likelihood_``) add up to its
        log-likelihood.  With no such state (after :meth:`fit`,
        :meth:`partial_fit` or ``reset_filter()``) ``X[0]`` starts a
        sequence.

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
        check_bool_param(new_sequence, "new_sequence")
        X, offsets = self._prepare_fitted(X, None, None)
        if offsets.shape[0] != 2:
            raise ValueError("filter_stream takes the next rows of one sequence.")
        chain = self._log_chain()
        message = None if new_sequence else getattr(self, "filter_message_", None)
        if message is not None:
            try:
                message = _check_log_message(message, chain[2])
            except ValueError as error:
                raise ValueError(
                    f"filter_message_ does not fit the model ({error}); call reset_filter()."
                ) from None
        log_frameprob = np.ascontiguousarray(self._compute_log_likelihood(X), dtype=np.float64)
        filtered, _, _, sequence_log_likelihood, message = _forward_offsets(
            *chain, log_frameprob, offsets, message
        )
        self._check_log_likelihood(sequence_log_likelihood.sum())
        self.filter_message_ = message
        self.filtered_state_ = np.exp(message).sum(axis=1)
        self.stream_log_likelihood_ = float(sequence_log_likelihood.sum())
        return filtered

    # filter_update is BaseHMM's: filter_stream on one row.

    def reset_filter(self, X=None):
        """Restart the stream of :meth:`filter_stream` and :meth:`filter_update`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), optional
            A history, taken as one sequence: the stream continues from the
            (state, age) distribution after its last row.  None: the next row
            starts a sequence (from ``startprob_``).

        Returns
        -------
        self
        """
        for name in self._stream_attributes:
            self.__dict__.pop(name, None)
        return super().reset_filter(X)


_DURATION_PARAMETERS = """    max_duration : int, default=20
        The longest visit to a state, in rows (D): durations are 1 .. D.
        The E step costs O(n_samples K (K + D)).
    duration_distribution : {"poisson", "negative_binomial", "categorical"}, default="poisson"
        The law of each state's durations d: "poisson", d - 1 ~ Poisson with
        mean ``duration_rates_[k]``; "negative_binomial", d - 1 negative
        binomial of mean ``duration_rates_[k]`` and shape
        ``duration_shapes_[k]`` (variance m + m^2 / shape); both truncated to
        1 .. D and renormalised; "categorical", a free pmf over 1 .. D.
    duration_prior : float or array broadcastable to (n_components, max_duration), default=1.0
        Dirichlet concentration (> 0) of a prior on each state's duration pmf
        (1 = none): the M step adds the pseudo-counts ``duration_prior - 1``
        to the expected duration counts (clipped at zero), the MAP estimate
        of the free pmf and, for the parametric laws, of their parameters
        under that prior."""

_DURATION_ATTRIBUTES = """    transmat_ : ndarray of shape (n_components, n_components)
        p(next visit's state | this visit's state), zero diagonal.
    duration_probs_ : ndarray of shape (n_components, max_duration)
        p(a visit to k lasts d rows) in column d - 1, for every distribution.
    duration_rates_ : ndarray of shape (n_components,)
        Mean of d - 1 ("poisson", "negative_binomial" only).
    duration_shapes_ : ndarray of shape (n_components,)
        Shape of the negative binomial ("negative_binomial" only).
    filter_message_ : ndarray of shape (n_components, max_duration)
        After :meth:`filter_stream` or :meth:`partial_fit`: log p(z_t = k, the
        visit has lasted a rows | the stream's rows up to its last, t) in
        column a - 1.
    filtered_state_ : ndarray of shape (n_components,)
        After :meth:`filter_stream` or :meth:`partial_fit`: p(z_t | the
        stream's rows up to t).
    stream_log_likelihood_ : float
        After :meth:`filter_stream`: the log-likelihood of its last call's
        rows given the stream's earlier rows."""

_DURATION_NOTES = """    The model: the first visit's state is drawn from ``startprob_``; a
    visit to state k lasts d rows with probability ``duration_probs_[k, d -
    1]`` and emits each of its rows independently given k; the next visit's
    state is drawn from row k of ``transmat_`` (zero diagonal).  The last
    visit of a sequence is censored: it may go on past the last row (its
    weight is P(duration >= d)), and EM completes it with the expected
    duration given that it lasted at least d rows.  EM learns the
    durations in closed form ("poisson": the mean, "categorical": the
    frequencies) or by a 1-D maximisation (the negative binomial's shape;
    also the mean when the truncation at ``max_duration`` matters), a step
    being kept only when it raises the expected log-likelihood.

    The online filter (``filter_stream``, ``filter_update``,
    ``reset_filter``) carries ``filter_message_``, the joint distribution of
    the current state and the age of its visit (n_components x
    max_duration), from which the next rows continue exactly.
    ``partial_fit`` continues a sequence across calls (unless
    ``new_sequence=True``) by forward-only smoothing over (state, age): at
    fixed parameters a sequence cut anywhere into batches gets the
    statistics and log-likelihood of one batch, the visit a batch ends in
    being revised by the next; the online filter then continues from it.
    ``known_states`` constrains the segmentations (each labelled row lies in
    a visit to its state), and ``acceleration="squarem"`` extrapolates the
    durations' parameters with the others (see :doc:`/user_guide/hmm`,
    "Explicit durations")."""


def _unshifted(log_frameprob, shift):
    """log p(x_t | z_t = k) of emissions that may come shifted by each row's ``shift``."""
    if shift is None:
        return np.ascontiguousarray(log_frameprob, dtype=np.float64)
    return log_frameprob + shift[:, None]


class SemiMarkovGaussianHMM(SemiMarkovHMM, GaussianHMM):
    """Explicit-duration (semi-Markov) HMM with Gaussian emissions.

    {notes}

    The Gaussian emissions are :class:`~skseq.hmm.GaussianHMM`'s (its
    covariance types, priors and missing entries).

    Parameters
    ----------
    n_components : int, default=1
        Number of hidden states.
    {durations}
    covariance_type, min_covar, means_prior, means_weight, covars_prior, covars_weight
        As in :class:`~skseq.hmm.GaussianHMM`.
    startprob_prior, transmat_prior, algorithm, random_state, n_iter, tol, verbose
        As in :class:`~skseq.hmm.GaussianHMM` (``transmat_prior`` applies to
        the off-diagonal entries).
    params, init_params : str, default="stdmc"
        "s" startprob, "t" transmat, "d" durations, "m" means, "c" covars.
    startprob_init, transmat_init, means_init, covars_init : array-like, optional
        Initial values, as in :class:`~skseq.hmm.GaussianHMM` (``transmat_init``
        with a zero diagonal).  Initial durations: set ``duration_probs_`` by
        hand and leave "d" out of ``init_params``.
    n_init, n_jobs, acceleration
        As in :class:`~skseq.hmm.GaussianHMM`.
    learning_method, learning_decay, learning_offset, total_samples, batch_size
        Stochastic EM, as in :class:`~skseq.hmm.GaussianHMM`.

    Attributes
    ----------
    startprob_ : ndarray of shape (n_components,)
    {attributes}
    means_, covars_ : ndarray
        As in :class:`~skseq.hmm.GaussianHMM`.
    monitor_, n_iter_, converged_, n_features_in_
        As in :class:`~skseq.hmm.GaussianHMM`.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq import SemiMarkovGaussianHMM
    >>> rng = np.random.default_rng(0)
    >>> states = np.repeat(np.arange(40) % 2, 6)  # visits of 6 rows
    >>> X = rng.normal(3.0 * states, 0.5)[:, None]
    >>> model = SemiMarkovGaussianHMM(2, max_duration=12, n_iter=30, random_state=0).fit(X)
    >>> np.round(np.sort(model.means_.ravel()))
    array([0., 3.])
    >>> np.round(model.duration_rates_ + 1)  # mean durations
    array([6., 6.])
    """

    def __init__(
        self,
        n_components=1,
        max_duration=20,
        duration_distribution="poisson",
        duration_prior=1.0,
        covariance_type="diag",
        min_covar=1e-3,
        startprob_prior=1.0,
        transmat_prior=1.0,
        means_prior=0,
        means_weight=0,
        covars_prior=1e-2,
        covars_weight=1,
        algorithm="viterbi",
        random_state=None,
        n_iter=10,
        tol=1e-2,
        verbose=False,
        params="stdmc",
        init_params="stdmc",
        *,
        startprob_init=None,
        transmat_init=None,
        means_init=None,
        covars_init=None,
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
            n_components,
            covariance_type=covariance_type,
            min_covar=min_covar,
            startprob_prior=startprob_prior,
            transmat_prior=transmat_prior,
            means_prior=means_prior,
            means_weight=means_weight,
            covars_prior=covars_prior,
            covars_weight=covars_weight,
            algorithm=algorithm,
            random_state=random_state,
            n_iter=n_iter,
            tol=tol,
            verbose=verbose,
            params=params,
            init_params=init_params,
            startprob_init=startprob_init,
            transmat_init=transmat_init,
            means_init=means_init,
            covars_init=covars_init,
            n_init=n_init,
            n_jobs=n_jobs,
            acceleration=acceleration,
            learning_method=learning_method,
            learning_decay=learning_decay,
            learning_offset=learning_offset,
            total_samples=total_samples,
            batch_size=batch_size,
        )
        self.max_duration = max_duration
        self.duration_distribution = duration_distribution
        self.duration_prior = duration_prior


class SemiMarkovCategoricalHMM(SemiMarkovHMM, CategoricalHMM):
    """Explicit-duration (semi-Markov) HMM with categorical emissions.

    {notes}

    The categorical emissions are :class:`~skseq.hmm.CategoricalHMM`'s
    (whole-number symbols, one or several columns, NaN for a missing symbol).

    Parameters
    ----------
    n_components : int, default=1
        Number of hidden states.
    {durations}
    startprob_prior, transmat_prior, emissionprob_prior, n_features
        As in :class:`~skseq.hmm.CategoricalHMM`.
    algorithm, random_state, n_iter, tol, verbose
        As in :class:`~skseq.hmm.CategoricalHMM`.
    params, init_params : str, default="stde"
        "s" startprob, "t" transmat, "d" durations, "e" emissionprob.
    startprob_init, transmat_init, emissionprob_init : array-like, optional
        Initial values (``transmat_init`` with a zero diagonal).
    n_init, n_jobs, acceleration
        As in :class:`~skseq.hmm.CategoricalHMM`.
    learning_method, learning_decay, learning_offset, total_samples, batch_size
        Stochastic EM, as in :class:`~skseq.hmm.GaussianHMM`.

    Attributes
    ----------
    startprob_ : ndarray of shape (n_components,)
    {attributes}
    emissionprob_, n_symbols_ : ndarray
        As in :class:`~skseq.hmm.CategoricalHMM`.
    monitor_, n_iter_, converged_, n_features_in_
        As in :class:`~skseq.hmm.CategoricalHMM`.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq import SemiMarkovCategoricalHMM
    >>> model = SemiMarkovCategoricalHMM(2, max_duration=3, duration_distribution="categorical")
    >>> model.startprob_ = [1.0, 0.0]
    >>> model.transmat_ = [[0.0, 1.0], [1.0, 0.0]]
    >>> model.duration_probs_ = [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]  # 3 rows of 0, 1 of 1
    >>> model.emissionprob_ = [[0.9, 0.1], [0.1, 0.9]]
    >>> model.predict([[0], [0], [1], [1], [0]]).tolist()
    [0, 0, 0, 1, 0]
    """

    def __init__(
        self,
        n_components=1,
        max_duration=20,
        duration_distribution="poisson",
        duration_prior=1.0,
        startprob_prior=1.0,
        transmat_prior=1.0,
        *,
        emissionprob_prior=1.0,
        n_features=None,
        algorithm="viterbi",
        random_state=None,
        n_iter=10,
        tol=1e-2,
        verbose=False,
        params="stde",
        init_params="stde",
        startprob_init=None,
        transmat_init=None,
        emissionprob_init=None,
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
            n_components,
            startprob_prior=startprob_prior,
            transmat_prior=transmat_prior,
            emissionprob_prior=emissionprob_prior,
            n_features=n_features,
            algorithm=algorithm,
            random_state=random_state,
            n_iter=n_iter,
            tol=tol,
            verbose=verbose,
            params=params,
            init_params=init_params,
            startprob_init=startprob_init,
            transmat_init=transmat_init,
            emissionprob_init=emissionprob_init,
            n_init=n_init,
            n_jobs=n_jobs,
            acceleration=acceleration,
            learning_method=learning_method,
            learning_decay=learning_decay,
            learning_offset=learning_offset,
            total_samples=total_samples,
            batch_size=batch_size,
        )
        self.max_duration = max_duration
        self.duration_distribution = duration_distribution
        self.duration_prior = duration_prior


for _class in (SemiMarkovGaussianHMM, SemiMarkovCategoricalHMM):
    for _placeholder, _text in (
        ("{notes}", _DURATION_NOTES),
        ("{durations}", _DURATION_PARAMETERS),
        ("{attributes}", _DURATION_ATTRIBUTES),
    ):
        _class.__doc__ = _class.__doc__.replace("    " + _placeholder, _text)
del _class, _placeholder, _text
