"""DeepMarkovModel: the deep Markov model trained by amortised variational inference.

The estimator takes data like the other latent-state models (rows of all
sequences concatenated, ``lengths=`` or ``sequence_ids=``), pads the
sequences into one array with masks, and trains the network of
:mod:`skseq.neural._networks._deep_markov` on the shared minibatch trainer
(:class:`~skseq.neural._trainer.BaseSequenceNetwork`): the "targets" of a
sequence are its mask of observed entries and its "weights" the mask of its
steps, and the loss is the negative ELBO per step.
"""

import sys
from functools import partial

import numpy as np
from scipy.special import expit
from sklearn.base import ClassNamePrefixFeaturesOutMixin, DensityMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils._metadata_requests import UNUSED
from sklearn.utils.validation import _num_samples, check_is_fitted

from .._parallel import even_blocks, run_blocks, single_threaded_blas
from .._sequences import (
    check_y_is_not_lengths,
    lengths_by_keyword,
    validate_sequences,
)
from .._validation import (
    check_allocation,
    check_data_scale,
    check_scalar_param,
    option_or,
    option_rule,
)
from ..inference.particles import bootstrap_particle_filter, importance_sample
from ._docstrings import training_parameters
from ._networks._deep_markov import DeepMarkovNetwork
from ._trainer import PREDICTION_CHUNK_POSITIONS, BaseSequenceNetwork
from ._validation import NETWORK_PARAMETER_RULES, check_positive_int, int_rule

__all__ = ["DeepMarkovModel"]

_EMISSIONS = ("gaussian", "bernoulli")

# early_stopping="auto" holds out validation_fraction of the sequences when fit
# gets at least this many (fewer leave too little to train on or to judge by).
AUTO_EARLY_STOPPING_MIN_SEQUENCES = 20

# learning_rate="adaptive": each plateau of the stopping rule multiplies the
# learning rate by this factor, at most this many times; the next plateau stops.
LEARNING_RATE_DECAY_FACTOR = 0.1
LEARNING_RATE_DECAYS = 2

# n_iter_no_change="auto": the stopping rule waits at least 10 epochs and at
# least this many minibatch updates (few sequences make short epochs, whose
# scores are too noisy to judge a plateau by after 10 of them).
AUTO_PATIENCE_MIN_EPOCHS = 10
AUTO_PATIENCE_MIN_UPDATES = 100


# The trainer's rules; early_stopping and n_iter_no_change also take "auto" (any
# other value gets the networks' shared rule, whose errors stay those of every
# other network); the rest are the model's own.
_DMM_PARAMETER_RULES = {
    **NETWORK_PARAMETER_RULES,
    "early_stopping": option_or(("auto",), NETWORK_PARAMETER_RULES["early_stopping"]),
    "n_iter_no_change": option_or(("auto",), NETWORK_PARAMETER_RULES["n_iter_no_change"]),
    "learning_rate": option_rule("adaptive", "constant"),
    "emission": option_rule(*_EMISSIONS),
    "transition_hidden_size": check_positive_int,
    "emission_hidden_size": check_positive_int,
    "inference_hidden_size": check_positive_int,
    "kl_anneal_epochs": int_rule(low=0),
    "n_importance_samples": check_positive_int,
}


def _padded(X, offsets, dtype):
    """Pad the sequences of concatenated rows into (n_sequences, max_length, p) arrays.

    Returns ``inputs`` (NaN and padding as 0), ``observed`` (1 where an entry
    is observed) and ``step_mask`` (1 on a sequence's steps).
    """
    lengths = np.diff(offsets)
    n_sequences, n_steps, n_features = lengths.size, int(lengths.max()), X.shape[1]
    step_mask = (np.arange(n_steps)[None, :] < lengths[:, None]).astype(dtype)
    sequence = np.repeat(np.arange(n_sequences), lengths)
    step = np.arange(X.shape[0]) - np.repeat(offsets[:-1], lengths)
    inputs = np.zeros((n_sequences, n_steps, n_features), dtype=dtype)
    observed = np.zeros((n_sequences, n_steps, n_features), dtype=dtype)
    finite = ~np.isnan(X)
    inputs[sequence, step] = np.where(finite, X, 0.0)
    observed[sequence, step] = finite
    return inputs, observed, step_mask


def _chunks(n_items, size):
    return [slice(start, min(start + size, n_items)) for start in range(0, n_items, size)]


class DeepMarkovModel(
    ClassNamePrefixFeaturesOutMixin, TransformerMixin, DensityMixin, BaseSequenceNetwork
):
    __metadata_request__fit = {"sequence_ids": True, "sample_weight": UNUSED}
    __metadata_request__partial_fit = {"sequence_ids": True, "sample_weight": UNUSED}
    __metadata_request__score = {"sequence_ids": True, "sample_weight": UNUSED}
    __metadata_request__transform = {"sequence_ids": True}

    def __init__(
        self,
        n_components=2,
        *,
        emission="gaussian",
        transition_hidden_size=32,
        emission_hidden_size=32,
        inference_hidden_size=32,
        kl_anneal_epochs=10,
        n_importance_samples=128,
        learning_rate="adaptive",
        learning_rate_init=1e-2,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-8,
        weight_decay=0.0,
        batch_size=32,
        max_iter=1000,
        shuffle=True,
        random_state=None,
        max_grad_norm=1.0,
        early_stopping="auto",
        validation_fraction=0.1,
        n_iter_no_change="auto",
        tol=1e-4,
        verbose=0,
        warm_start=False,
        n_jobs=None,
        dtype="float32",
    ):
        self.n_components = n_components
        self.emission = emission
        self.transition_hidden_size = transition_hidden_size
        self.emission_hidden_size = emission_hidden_size
        self.inference_hidden_size = inference_hidden_size
        self.kl_anneal_epochs = kl_anneal_epochs
        self.n_importance_samples = n_importance_samples
        self.learning_rate = learning_rate
        self.learning_rate_init = learning_rate_init
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.shuffle = shuffle
        self.random_state = random_state
        self.max_grad_norm = max_grad_norm
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.verbose = verbose
        self.warm_start = warm_start
        self.n_jobs = n_jobs
        self.dtype = dtype

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags

    # -- hyperparameters -------------------------------------------------------------

    # n_components: PARAMETER_RULES (checked with these, as the EM estimators do)
    _PARAMETER_RULES = _DMM_PARAMETER_RULES

    def _new_network(self, n_features):
        return DeepMarkovNetwork(
            n_features,
            self.n_components,
            emission=self.emission,
            transition_hidden_size=self.transition_hidden_size,
            emission_hidden_size=self.emission_hidden_size,
            inference_hidden_size=self.inference_hidden_size,
        )

    def _initialize(self, n_features, dtype):
        super()._initialize(n_features, dtype)
        # Seeds the draws of score, transform, forecast and validation: the same
        # fitted model gives the same numbers for the same data.
        self._evaluation_seed = int(self._random_state.randint(np.iinfo(np.int32).max))
        self._learning_rate_decays = 0

    # -- data --------------------------------------------------------------------------

    def _validate_sequences(self, X, y, lengths, sequence_ids, *, reset, method):
        """X (float64, NaN for missing entries) and its sequence offsets."""
        X, offsets = validate_sequences(
            self, X, y, lengths, sequence_ids, reset=reset, method=method
        )
        if self.emission == "bernoulli":
            values = X[~np.isnan(X)]
            if np.any((values != 0) & (values != 1)):
                raise ValueError(
                    "emission='bernoulli' needs binary data: every observed entry of X must be "
                    f"0 or 1 (found e.g. {values[(values != 0) & (values != 1)][0]!r})."
                )
        return X, offsets

    def _set_standardisation(self, X):
        """Per-feature location and scale of Gaussian data (NaN ignored); none for binary data."""
        n_features = X.shape[1]
        if self.emission == "bernoulli":
            self._location = np.zeros(n_features)
            self._scale = np.ones(n_features)
            return
        observed = ~np.isnan(X)
        counts = observed.sum(axis=0)
        safe = np.maximum(counts, 1)
        with np.errstate(over="ignore", invalid="ignore"):
            location = np.where(observed, X, 0.0).sum(axis=0) / safe
        check_data_scale(X, location, needed_by="the standardisation of X needs")
        variance = np.where(observed, (X - location) ** 2, 0.0).sum(axis=0) / safe
        scale = np.sqrt(variance)
        self._location = location
        self._scale = np.where(scale > 0, scale, 1.0)

    def _standardised_arrays(self, X, offsets, dtype=None):
        """The padded arrays of :func:`_padded` for X standardised as in the first fit.

        X must lie within the shared data-scale rule once standardised, in the
        working ``dtype`` (by default the fitted weights'): data far off the
        scale of the training data would be inf in float32.
        """
        if dtype is None:
            dtype = next(iter(self.parameters_.values())).dtype
        check_data_scale(
            X, self._location, scale=self._scale, dtype=dtype, needed_by="the network's layers need"
        )
        return _padded((X - self._location) / self._scale, offsets, dtype)

    def _log_jacobian(self, observed):
        """Sum over observed entries of -log(scale): data units from standardised ones."""
        counts = observed.sum(axis=tuple(range(observed.ndim - 1)), dtype=np.float64)
        return -float(counts @ np.log(self._scale))

    def _prepare(self, X, y, lengths, sequence_ids, method):
        check_is_fitted(self)
        X, offsets = self._validate_sequences(
            X, y, lengths, sequence_ids, reset=False, method=method
        )
        inputs, observed, step_mask = self._standardised_arrays(X, offsets)
        return inputs, observed, step_mask, offsets

    # -- training ----------------------------------------------------------------------

    def _fit_sequences(self, X, y, lengths, sequence_ids, *, incremental, method):
        self._check_params()
        first_call = not hasattr(self, "parameters_") or (not incremental and not self.warm_start)
        X, offsets = self._validate_sequences(
            X, y, lengths, sequence_ids, reset=first_call, method=method
        )
        if first_call:
            unobserved = np.flatnonzero(np.all(np.isnan(X), axis=0))
            if unobserved.size:
                raise ValueError(
                    f"feature {unobserved[0]} of X has no observed entry (all NaN): fit needs "
                    "every feature observed at least once, to standardise it and learn its "
                    "emission."
                )
            self._set_standardisation(X)
            self._n_features_out = self.n_components
        inputs, observed, step_mask = self._standardised_arrays(X, offsets, self._working_dtype())
        if not incremental:  # every fit starts the schedule at learning_rate_init
            self._learning_rate_decays = 0
        return self._train(
            inputs, observed, step_mask, first_call=first_call, incremental=incremental
        )

    @lengths_by_keyword
    def fit(self, X, y=None, *, lengths=None, sequence_ids=None):
        """Train the model by maximising the ELBO with minibatch Adam.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows of all sequences concatenated in time order.  NaN marks a
            missing entry, left out of the bound (a masked array's masked
            entries likewise); every feature must be observed at least once.
        y : None
            Ignored.  A ``y`` whose length differs from n_samples is taken
            for hmmlearn-style positional lengths and rejected.
        lengths : array-like of int, optional
            Length of each sequence; none means one sequence.
        sequence_ids : array-like of shape (n_samples,), optional
            One label per row (rows of a sequence contiguous); routed by
            metadata routing, so ``GroupKFold`` keeps sequences whole.

        Returns
        -------
        self : DeepMarkovModel
        """
        return self._fit_sequences(X, y, lengths, sequence_ids, incremental=False, method="fit")

    @lengths_by_keyword
    def partial_fit(self, X, y=None, *, lengths=None, sequence_ids=None):
        """One pass of minibatch updates over the sequences of ``X``.

        The first call initialises the model (and its standardisation of the
        data); later calls continue from it, with the KL weight of the epoch
        count reached and the step size of the last :meth:`fit`'s schedule.
        Early stopping and the schedule's plateaus do not apply.

        Parameters
        ----------
        X, y, lengths, sequence_ids : see :meth:`fit`.

        Returns
        -------
        self : DeepMarkovModel
        """
        return self._fit_sequences(
            X, y, lengths, sequence_ids, incremental=True, method="partial_fit"
        )

    def _learning_rate(self):
        """learning_rate_init, times LEARNING_RATE_DECAY_FACTOR per plateau passed."""
        decays = getattr(self, "_learning_rate_decays", 0)
        return self.learning_rate_init * LEARNING_RATE_DECAY_FACTOR**decays

    def _uses_early_stopping(self, n_sequences):
        if isinstance(self.early_stopping, str):  # "auto"
            return n_sequences >= AUTO_EARLY_STOPPING_MIN_SEQUENCES
        return self.early_stopping

    def _patience(self, n_minibatches):
        if isinstance(self.n_iter_no_change, str):  # "auto"
            return max(AUTO_PATIENCE_MIN_EPOCHS, -(-AUTO_PATIENCE_MIN_UPDATES // n_minibatches))
        return self.n_iter_no_change

    def _continue_after_plateau(self, best_parameters):
        """learning_rate="adaptive": lower the rate and go on from the best weights."""
        if self.learning_rate == "constant" or self._learning_rate_decays >= LEARNING_RATE_DECAYS:
            return False
        self._learning_rate_decays += 1
        if self.verbose:
            print(
                f"No improvement by more than tol={self.tol} for {self._no_improvement_count} "
                f"epochs; learning rate lowered to {self._learning_rate():.3g}.",
                file=sys.stderr,
            )
        self._no_improvement_count = 0
        if best_parameters is not None:
            self.parameters_ = {key: value.copy() for key, value in best_parameters.items()}
        return True

    def _kl_weight(self):
        """The KL term's weight in the epoch under way: linear from 1/(E+1) to 1 over E epochs."""
        return min(1.0, (self.n_iter_ + 1) / (self.kl_anneal_epochs + 1))

    def _loss_and_gradients(self, X, targets, weights, normaliser, parallel):
        """Negative ELBO per step of one minibatch and the gradient of its annealed form.

        The loss reported is the ELBO's (KL weight 1); the gradient is that
        of the annealed bound (KL weight of the epoch).
        """
        n_steps = int(np.count_nonzero(weights, axis=1).max())
        inputs, observed, step_mask = X[:, :n_steps], targets[:, :n_steps], weights[:, :n_steps]
        noise = self._random_state.standard_normal((X.shape[0], n_steps, self.n_components)).astype(
            X.dtype
        )
        kl_weight = self._kl_weight()

        def shard(part):
            cache = self.network_.forward(
                self.parameters_, inputs[part], observed[part], step_mask[part], noise[part]
            )
            reconstruction = float(np.sum(self.network_.reconstruction_terms(cache)))
            kl = float(np.sum(self.network_.kl_terms(cache)))
            grads = self.network_.backward(
                self.parameters_, cache, -1.0 / normaliser, kl_weight / normaliser
            )
            return -(reconstruction - kl) / normaliser, grads

        loss, grads = self._sharded(shard, X.shape[0], parallel)
        return loss - self._log_jacobian(observed) / normaliser, grads

    def _kept_activations(self, parameters, X):
        """What the forward pass of a training minibatch keeps: the whole cache."""
        n_sequences, n_steps, _ = X.shape
        return self.network_.forward(
            parameters,
            X,
            np.ones_like(X),
            np.ones((n_sequences, n_steps), dtype=X.dtype),
            np.zeros((n_sequences, n_steps, self.n_components), dtype=X.dtype),
        )

    def _validation_score(self, X, targets, weights):
        """ELBO per step of the held-out sequences, with the same draws every epoch."""
        rng = np.random.RandomState(self._evaluation_seed)
        noise = rng.standard_normal(X.shape[:2] + (self.n_components,)).astype(X.dtype)
        total = 0.0
        chunk = self._prediction_chunk(X, max(1, PREDICTION_CHUNK_POSITIONS // X.shape[1]), 1)
        with single_threaded_blas():
            for part in _chunks(X.shape[0], chunk):
                cache = self.network_.forward(
                    self.parameters_, X[part], targets[part], weights[part], noise[part]
                )
                total += float(np.sum(self.network_.reconstruction_terms(cache)))
                total -= float(np.sum(self.network_.kl_terms(cache)))
        total += self._log_jacobian(targets)
        return total / float(np.sum(weights, dtype=np.float64))

    def _describe_loss(self, loss):
        return f"ELBO per step {-loss:.6f} (KL weight {self._kl_weight():.3g})"

    @property
    def elbo_curve_(self):
        """ELBO per step of every epoch (the negated ``loss_curve_``)."""
        if "loss_curve_" not in self.__dict__:
            raise AttributeError(
                f"This {type(self).__name__} instance is not fitted yet: elbo_curve_ exists "
                "after fit or partial_fit."
            )
        return [-loss for loss in self.loss_curve_]

    # -- Monte Carlo over the inference network -----------------------------------

    def _over_sequences(self, function, n_sequences):
        """``function(first, stop)`` over contiguous runs of sequences in ``n_jobs`` threads."""
        blocks = even_blocks(n_sequences, self._n_threads(n_sequences))
        with single_threaded_blas():
            return [item for result in run_blocks(function, blocks) for item in result]

    def _posterior_draws(self, inputs, observed, step_mask, offsets, *, want_states):
        """Importance-weighted bounds (n_sequences,) and, optionally, posterior means of z.

        :func:`skseq.inference.particles.importance_sample` with the
        inference network as proposal, on every sequence.

        Each sequence has its own random stream (seeded from the fitted
        model), so its numbers depend neither on the other sequences nor on
        ``n_jobs``.  The S draws of a sequence go through the network in
        blocks that bound memory.
        """
        n_sequences = inputs.shape[0]
        n_samples = self.n_importance_samples
        streams = self._sequence_streams(n_sequences)
        lengths = np.diff(offsets)
        m = self.n_components
        # Draws per forward pass, by length: fewer if a block on every thread at
        # once would pass the memory limit.  (The draws of a stream do not
        # depend on how they are blocked.)
        n_threads = self._n_threads(n_sequences)
        blocks = {
            length: self._prediction_chunk(
                inputs[:, :length],
                max(1, min(n_samples, PREDICTION_CHUNK_POSITIONS // length)),
                n_threads,
                n_sequences=n_samples * n_threads,
            )
            for length in np.unique(lengths).tolist()
        }

        def one_sequence(s):
            length = int(lengths[s])
            shape = (length,) + inputs.shape[2:]
            log_jacobian = self._log_jacobian(observed[s])

            def propose(noise):
                size = noise.shape[0]
                cache = self.network_.forward(
                    self.parameters_,
                    np.broadcast_to(inputs[s, :length], (size,) + shape),
                    np.broadcast_to(observed[s, :length], (size,) + shape),
                    np.broadcast_to(step_mask[s, :length], (size, length)),
                    noise,
                )
                return self.network_.log_weights(cache) + log_jacobian, cache["z"]

            return importance_sample(
                propose,
                streams[s],
                n_samples=n_samples,
                noise_shape=(length, m),
                block_size=blocks[length],
                dtype=inputs.dtype,
                want_mean=want_states,
            )

        results = self._over_sequences(
            lambda first, stop: [one_sequence(s) for s in range(first, stop)], n_sequences
        )
        bounds = np.array([result.log_likelihood_bound for result in results])
        if not want_states:
            return bounds, None
        return bounds, np.concatenate([result.mean for result in results])

    def _importance_bounds(self, X, y, lengths, sequence_ids, method):
        inputs, observed, step_mask, offsets = self._prepare(X, y, lengths, sequence_ids, method)
        bounds, _ = self._posterior_draws(inputs, observed, step_mask, offsets, want_states=False)
        return bounds

    def score(self, X, y=None, *, lengths=None, sequence_ids=None):
        """Importance-weighted lower bound on log p(X), summed over sequences.

        With S = ``n_importance_samples`` draws z^(s) of the inference
        network per sequence, ``log (1/S) sum_s p(x, z^(s)) / q(z^(s) | x)``:
        a lower bound on log p(x) in expectation, at least the ELBO, and
        tending to log p(x) as S grows (the user guide's IWAE bound).  In the
        units of ``X`` (the standardisation's Jacobian included).

        Parameters
        ----------
        X, y, lengths, sequence_ids : see :meth:`fit`.

        Returns
        -------
        log_likelihood_bound : float
        """
        return float(np.sum(self._importance_bounds(X, y, lengths, sequence_ids, "score")))

    def score_sequences(self, X, y=None, *, lengths=None, sequence_ids=None):
        """The importance-weighted bound of each sequence.

        Parameters
        ----------
        X, y, lengths, sequence_ids : see :meth:`fit`.

        Returns
        -------
        log_likelihood_bounds : ndarray of shape (n_sequences,)
        """
        return self._importance_bounds(X, y, lengths, sequence_ids, "score_sequences")

    @lengths_by_keyword
    def transform(self, X, *, lengths=None, sequence_ids=None):
        """Posterior means of the latent states, one row per row of X.

        The mean of z_t under the inference network's q(z | x), estimated
        from ``n_importance_samples`` draws.

        Parameters
        ----------
        X, lengths, sequence_ids : see :meth:`fit`.

        Returns
        -------
        states : ndarray of shape (n_samples, n_components)
        """
        inputs, observed, step_mask, offsets = self._prepare(X, None, lengths, sequence_ids, None)
        _, states = self._posterior_draws(inputs, observed, step_mask, offsets, want_states=True)
        return states

    def fit_transform(self, X, y=None, *, lengths=None, sequence_ids=None):
        """Fit, then return the posterior means of the latent states of X.

        Parameters are those of :meth:`fit`.

        Returns
        -------
        states : ndarray of shape (n_samples, n_components)
        """
        if y is not None:
            check_y_is_not_lengths(y, _num_samples(X), "fit_transform")
        return self.fit(X, y, lengths=lengths, sequence_ids=sequence_ids).transform(
            X, lengths=lengths, sequence_ids=sequence_ids
        )

    # -- filtering, prediction and simulation -----------------------------------------

    def _emission_log_density(self, x, observed, z):
        """log p(x | z) summed over features, for particles z of shape (..., m)."""
        out, _ = self.network_.emission_outputs(self.parameters_, z)
        log_density, _ = self.network_.emission_log_density(self.parameters_, x, observed, out)
        return log_density.sum(axis=-1, dtype=np.float64)

    def _sequence_streams(self, n_sequences, offset=0):
        """One random stream per sequence, seeded from the fitted model."""
        seeds = np.random.RandomState(self._evaluation_seed + offset).randint(
            np.iinfo(np.int32).max, size=n_sequences
        )
        return [np.random.RandomState(seed) for seed in seeds]

    def _particle_filter(self, inputs, observed, step_mask, streams):
        """:func:`skseq.inference.particles.bootstrap_particle_filter` with the fitted
        network's transition and emission, over a batch of sequences, one random
        stream each.

        Returns the log predictive density log p(x_t | x_{1:t-1}) of every
        step (n_sequences, T) and the particles after the last step of each
        sequence (n_sequences, S, m), equally weighted.
        """
        result = bootstrap_particle_filter(
            partial(self.network_.initial_draws, self.parameters_),
            partial(self.network_.transition_draws, self.parameters_),
            lambda t, particles: self._emission_log_density(
                inputs[:, t, None, :], observed[:, t, None, :], particles
            ),
            np.count_nonzero(step_mask, axis=1),
            streams,
            n_particles=self.n_importance_samples,
            n_state=self.n_components,
            dtype=inputs.dtype,
            n_steps=inputs.shape[1],
        )
        return result.log_predictive, result.final_particles

    def _filter_chunks(self, inputs, observed, step_mask):
        """The particle filter over chunks of sequences; returns it with the streams used."""
        streams = self._sequence_streams(inputs.shape[0], offset=1)
        chunk = max(1, PREDICTION_CHUNK_POSITIONS // self.n_importance_samples)
        results = []
        with single_threaded_blas():
            for part in _chunks(inputs.shape[0], chunk):
                results.append(
                    self._particle_filter(
                        inputs[part], observed[part], step_mask[part], streams[part]
                    )
                )
        log_predictive = np.concatenate([log_predictive for log_predictive, _ in results])
        return log_predictive, np.concatenate([final for _, final in results]), streams

    @lengths_by_keyword
    def log_predictive_density(self, X, *, lengths=None, sequence_ids=None):
        """One-step-ahead log predictive density log p(x_t | x_1..x_{t-1}) of every row.

        Estimated by a bootstrap particle filter with
        ``n_importance_samples`` particles (the transition as proposal,
        systematic resampling at every step); exact as the number of
        particles grows.  The rows of a sequence sum to an estimate of its
        log-likelihood.  A row whose entries are all missing has density 1
        (log 0); missing entries are integrated out.

        Parameters
        ----------
        X, lengths, sequence_ids : see :meth:`fit`.

        Returns
        -------
        log_densities : ndarray of shape (n_samples,)
        """
        inputs, observed, step_mask, offsets = self._prepare(X, None, lengths, sequence_ids, None)
        log_predictive, _, _ = self._filter_chunks(inputs, observed, step_mask)
        steps = step_mask.astype(bool)
        return log_predictive[steps] - observed[steps].astype(np.float64) @ np.log(self._scale)

    @lengths_by_keyword
    def forecast(self, X, n_steps, *, lengths=None, sequence_ids=None, quantiles=(0.05, 0.5, 0.95)):
        """Predictive distribution of the next ``n_steps`` observations after each sequence.

        The particle filter of :meth:`log_predictive_density` gives the
        state after the last row of each sequence; each particle is carried
        forward through the transition and the emission.

        Parameters
        ----------
        X, lengths, sequence_ids
            The observed histories, as in :meth:`fit`.
        n_steps : int
            Forecast horizon, >= 1.
        quantiles : sequence of float, default=(0.05, 0.5, 0.95)
            Levels in [0, 1] of the predictive quantiles to return.

        Returns
        -------
        means : ndarray of shape (n_sequences * n_steps, n_features)
            Row ``s * n_steps + h`` is the predictive mean of x_{T_s + h + 1}
            (for Bernoulli emissions, the probability of a one).
        quantile_values : ndarray of shape (n_quantiles, n_sequences * n_steps, n_features)
            The predictive quantiles of each forecast row, from the
            ``n_importance_samples`` simulated observations.
        """
        if np.ndim(n_steps) == 1:
            raise TypeError(
                "forecast(X, n_steps) got an array for n_steps; pass sequence lengths by "
                "keyword: forecast(X, n_steps, lengths=...)."
            )
        check_scalar_param(n_steps, "n_steps", "int", low=1)
        levels = np.asarray(quantiles, dtype=np.float64)
        if levels.ndim != 1 or levels.size == 0 or np.any(~np.isfinite(levels)):
            raise ValueError(
                f"quantiles must be a non-empty 1-D sequence of levels, got {quantiles!r}."
            )
        if np.any((levels < 0) | (levels > 1)):
            raise ValueError(f"quantiles must lie in [0, 1], got {quantiles!r}.")
        inputs, observed, step_mask, _ = self._prepare(X, None, lengths, sequence_ids, None)
        # the particles' paths and simulated observations of every forecast step
        check_allocation(
            (
                inputs.shape[0] * self.n_importance_samples,
                n_steps,
                self.n_components + inputs.shape[2],
            ),
            np.float64,
            argument=f"n_steps={n_steps}",
            what=f"the forecast's {self.n_importance_samples} particle paths per sequence",
        )
        _, final, streams = self._filter_chunks(inputs, observed, step_mask)
        n_sequences, n_particles, m = final.shape
        p = self.n_features_in_
        paths = np.empty((n_sequences, n_particles, n_steps, m), dtype=final.dtype)
        draws = np.empty((n_sequences, n_particles, n_steps, p))
        with single_threaded_blas():
            for s, stream in enumerate(streams):  # each sequence continues its own stream
                previous = final[s]
                for h in range(n_steps):
                    noise = stream.standard_normal((n_particles, m)).astype(final.dtype)
                    previous = self.network_.transition_draws(self.parameters_, previous, noise)
                    paths[s, :, h] = previous
                draws[s] = self.network_.observation_draws(
                    self.parameters_,
                    paths[s],
                    self.network_.observation_noise(stream, (n_particles, n_steps, p)),
                )
            out, _ = self.network_.emission_outputs(self.parameters_, paths)
        if self.emission == "gaussian":
            means = out.mean(axis=1, dtype=np.float64) * self._scale + self._location
            draws = draws * self._scale + self._location
        else:
            means = expit(out.astype(np.float64)).mean(axis=1)
        quantile_values = np.quantile(draws, levels, axis=1)
        p = self.n_features_in_
        return means.reshape(-1, p), quantile_values.reshape(levels.size, -1, p)

    def sample(self, n_samples=1, random_state=None):
        """Draw one sequence from the generative model.

        Parameters
        ----------
        n_samples : int, default=1
            Length of the sequence.
        random_state : int, RandomState instance or None, default=None

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
            The observations (0 / 1 for Bernoulli emissions).
        Z : ndarray of shape (n_samples, n_components)
            The latent states.
        """
        check_is_fitted(self)
        check_scalar_param(n_samples, "n_samples", "int", low=1)
        check_allocation(
            (n_samples, self.n_components + 2 * self.n_features_in_),
            np.float64,
            argument=f"n_samples={n_samples}",
            what=f"a sequence of {n_samples} states and observations",
        )
        rng = check_random_state(random_state)
        m, dtype = self.n_components, self.parameters_["initial.mean"].dtype
        states = np.empty((n_samples, m), dtype=dtype)
        with single_threaded_blas():
            previous = self.network_.initial_draws(self.parameters_, rng.standard_normal(m))
            states[0] = previous
            for t in range(1, n_samples):
                previous = self.network_.transition_draws(
                    self.parameters_, previous, rng.standard_normal(m)
                )
                states[t] = previous
            draws = self.network_.observation_draws(
                self.parameters_,
                states,
                self.network_.observation_noise(rng, (n_samples, self.n_features_in_)),
            )
        X = draws.astype(np.float64) * self._scale + self._location
        return X, states.astype(np.float64)


_PARAMETERS = """\
    n_components : int, default=2
        Dimension ``m`` of the latent state z_t (as ``n_components`` of
        :class:`~skseq.lds.LinearGaussianSSM`).
    emission : {"gaussian", "bernoulli"}, default="gaussian"
        ``p(x_t | z_t)``: a diagonal Gaussian whose mean is the emission MLP
        and whose standard deviations are learned, or independent Bernoulli
        variables whose logits are the emission MLP (binary data).
    transition_hidden_size : int, default=32
        Width of the hidden layer of the transition's gate and proposal MLPs.
    emission_hidden_size : int, default=32
        Width of the hidden layer of the emission MLP.
    inference_hidden_size : int, default=32
        Hidden state of the inference network's backward RNN and combiner.
    kl_anneal_epochs : int, default=10
        KL annealing: in epoch ``e`` (counted from 0) the KL term of the
        ELBO's gradient is weighted ``min(1, (e + 1) / (kl_anneal_epochs +
        1))``; 0 disables annealing.  The reported ELBO always has weight 1.
    n_importance_samples : int, default=128
        Draws S of the inference network per sequence in :meth:`score`,
        :meth:`score_sequences` (the importance-weighted bound) and
        :meth:`transform`, and particles of the filter behind
        :meth:`log_predictive_density` and :meth:`forecast`.
    learning_rate : {"adaptive", "constant"}, default="adaptive"
        The schedule of Adam's step size.  "adaptive": the step size starts
        at ``learning_rate_init``; each time the stopping rule is met (no
        improvement by ``tol`` for ``n_iter_no_change`` epochs), training
        goes on from the best weights so far (with early stopping) at a
        tenth of the step size, twice; the third time it stops.  "constant":
        ``learning_rate_init`` throughout, and the first time stops.
"""

_PARAMETERS += training_parameters(
    """\
    weight_decay : float, default=0.0
        Decoupled (AdamW) weight decay of the weight matrices (MLPs, RNN and
        combiner); biases, scales and initial values are not decayed.
""",
    learning_rate_init="""\
    learning_rate_init : float, default=1e-2
        Adam's initial step size (see ``learning_rate``).""",
    max_iter="""\
    max_iter : int, default=1000
        Maximum number of epochs (passes over the data) of :meth:`fit`; the
        stopping rule usually ends training long before.  Reaching it raises
        a ConvergenceWarning: the bound was still improving.""",
    early_stopping="""\
    early_stopping : bool or "auto", default="auto"
        Hold out ``validation_fraction`` of the sequences and stop on the ELBO
        of the held-out sequences (the same draws every epoch): the stopping
        rule counts epochs without a gain of ``tol`` in it, and the weights of
        the best epoch are kept.  "auto": when :meth:`fit` gets at least 20
        sequences; with fewer, the stopping rule follows the training loss.
        Ignored by :meth:`partial_fit`.""",
    n_iter_no_change="""\
    n_iter_no_change : int or "auto", default="auto"
        Epochs without improvement by ``tol`` (of the training loss, or of the
        validation ELBO with early stopping) that meet the stopping rule.
        "auto": 10 epochs, or more when an epoch has fewer than 10
        minibatches: enough epochs for 100 minibatch updates (with few
        sequences an epoch is one or two updates, too few to tell a plateau
        from noise).""",
)

DeepMarkovModel.__doc__ = f"""Deep Markov model: neural transition and emission, amortised inference

    The deep state-space model of Krishnan, Shalit & Sontag (AAAI 2017)::

        z_1 ~ N(mu_0, diag sigma_0^2)
        z_t | z_(t-1) ~ N(mu(z_(t-1)), diag sigma(z_(t-1))^2)     (gated transition)
        x_t | z_t ~ N(MLP(z_t), diag s^2)  or  Bernoulli(sigmoid(MLP(z_t)))

    trained by maximising the ELBO with the structured inference network
    q(z_t | z_(t-1), x_(t:T)) of the paper (a backward RNN combined with
    z_(t-1)), reparameterised draws, the KL terms in closed form and KL
    annealing, on minibatches of whole sequences with Adam.  The maths, and
    the gradients written out by hand, are on the user guide's page
    :doc:`/user_guide/dmm`.

    ``X`` holds the rows of all sequences concatenated in time order, as for
    :class:`~skseq.lds.LinearGaussianSSM` and the HMMs; ``lengths`` or
    ``sequence_ids`` splits it (neither: one sequence).  Sequences of
    different lengths share minibatches, padded and masked: no result
    depends on the padding or on which sequences share a batch.  NaN entries
    (or masked entries of a masked array) are missing observations, left out
    of the emission term of the bound.  Gaussian data are standardised
    feature by feature with the statistics of the first fit; every bound and
    density is reported in the units of ``X``.

    Parameters
    ----------
{_PARAMETERS}

    Attributes
    ----------
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when X has feature names.
    network_ : DeepMarkovNetwork
        The layers of the generative model and the inference network.
    parameters_ : dict of ndarray
        Their weights, keyed by layer and parameter name.
    loss_curve_ : list of float
        Negative ELBO per step of every epoch (the mean over its minibatches).
    elbo_curve_ : list of float
        ELBO per step of every epoch, ``-loss_curve_``.
    best_loss_ : float or None
        Lowest ``loss_curve_`` value (None with early stopping).
    validation_scores_ : list of float or None
        With early stopping, the ELBO per step of the held-out sequences at
        every epoch (the same draws every epoch).
    best_validation_score_ : float or None
        Best of ``validation_scores_``.
    n_iter_ : int
        Epochs run (fit and partial_fit together).
    t_ : int
        Training sequences processed.

    See Also
    --------
    skseq.lds.LinearGaussianSSM : The linear-Gaussian model, with exact inference.
    skseq.GaussianHMM : A discrete latent state.

    Notes
    -----
    ``score`` is a stochastic lower bound: for the same fitted model and data
    it is reproducible (the draws are seeded from the fit), and it tightens
    as ``n_importance_samples`` grows.  The bound is only as good as the
    inference network: compare models by held-out scores.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq import DeepMarkovModel
    >>> rng = np.random.default_rng(0)
    >>> angle = np.cumsum(rng.normal(0.3, 0.05, size=(40, 25)), axis=1)   # 40 sequences
    >>> X = np.stack([np.sin(angle), np.cos(angle)], axis=-1).reshape(-1, 2)
    >>> X += 0.05 * rng.normal(size=X.shape)
    >>> lengths = [25] * 40
    >>> model = DeepMarkovModel(n_components=2, learning_rate_init=1e-2, max_iter=30,
    ...                         batch_size=10, random_state=0).fit(X, lengths=lengths)
    >>> model.transform(X, lengths=lengths).shape
    (1000, 2)
    >>> means, quantiles = model.forecast(X[:25], n_steps=3)
    >>> means.shape, quantiles.shape
    ((3, 2), (3, 3, 2))
    >>> bool(model.score(X, lengths=lengths) > model.elbo_curve_[0] * len(X))
    True
    """
