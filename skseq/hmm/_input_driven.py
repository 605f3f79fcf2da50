"""Input-driven transitions (IO-HMMs) for every emission model.

p(z_t = j | z_{t-1} = i, u_t) = softmax_j(W_i u_t + b_i), the inputs u_t given as
``controls=``.  :class:`InputDrivenTransitions` is a transition component: it
goes before an emission model in the bases (``class InputDrivenGaussianHMM(
InputDrivenTransitions, GaussianHMM)``) and overrides BaseHMM's transition
hooks (``_chain_estep``, ``_chain_posteriors``, ``_chain_forward``,
``_chain_viterbi``, ``_transition_mstep``, ``_transition_n_parameters``,
``_sample_path``); the recursions are those of
:mod:`skseq.inference.hmm_varying` (one transition matrix per row).

The controls travel with the rows as extra columns of EM's data, ``[X,
controls]`` (then the known states), so every path that splits, batches or
threads rows carries them; ``_split_known_states`` gives the emission model
its own columns back.  The autoregressive emissions already carry the controls
as the last columns of their regressors (``_controls_in_emission_rows``).

The M step of the transition weights.  The expected complete-data
log-likelihood of the weights of source state i is

    Q_i(theta_i) = sum_t sum_j xi_t(i, j) log softmax_j(theta_i v_t) - alpha / 2 ||W_i||^2,

v_t = [u_t, 1], theta_i = [W_i, b_i] (K x P), xi_t the pair posteriors of the
step into row t, alpha = ``transition_alpha`` (the intercepts are not
penalised).  Its gradient and Hessian at the E step's weights are sums over
rows (:func:`transition_statistics`), so they add over blocks, threads and
workers as the other statistics do.  The step is Newton's, d = (-H)^+ g,
with an Armijo backtracking line search on a quadratic lower bound of Q_i
(Boehning's bound: diag(p) - p p^T <= (I - 1 1^T / K) / 2, so
Q_i(theta + D) >= Q_i(theta) + <g, D> - D^T B D / 2 with
B = (I - 1 1^T / K) / 2 (x) sum_t n_t(i) v_t v_t^T + alpha I on W).  A step
accepted on the bound raises Q_i by at least as much: a generalised EM step
that never lowers the penalised objective, from the additive statistics
alone.
"""

import inspect
from typing import NamedTuple

import numpy as np
from scipy.special import logsumexp, softmax

from .._validation import real_rule
from ..base import SufficientStatistics, _symmetric_function
from ..inference.hmm_varying import (
    _log_transmats,
    _sample_varying_states,
    _transition_matrices,
    _varying_checkpointed_forward_backward,
    _varying_chunked_forward,
    _varying_forward_backward_offsets,
    _varying_forward_offsets,
    _varying_smoothing_given_end,
    _varying_viterbi_offsets,
)
from ..inference.kalman import check_controls
from ._autoregressive import AutoregressiveHMM
from ._base import check_probability_vector, clamp_to_known_states
from ._controls import ControlsMixin
from ._discrete import CategoricalHMM, PoissonHMM
from ._gaussian import GaussianHMM
from ._gmm import GMMHMM

__all__ = [
    "InputDrivenTransitions",
    "InputDrivenGaussianHMM",
    "InputDrivenCategoricalHMM",
    "InputDrivenPoissonHMM",
    "InputDrivenGMMHMM",
    "InputDrivenAutoregressiveHMM",
]

_TRANSITION_KEYS = ("trans_gradient", "trans_hessian", "trans_scatter", "trans_objective")
_ARMIJO = 1e-4


def _regressors(controls):
    """v_t = [u_t, 1], (n_samples, n_controls + 1)."""
    return np.column_stack([controls, np.ones(controls.shape[0])])


def transition_statistics(pair_posteriors, controls, log_transmats, transmats=None):
    """The additive statistics of the transition weights' M step at the current weights.

    Parameters
    ----------
    pair_posteriors : ndarray of shape (n_samples, K, K)
        xi_t(i, j) of the step into every row (zero at sequence starts).
    controls : ndarray of shape (n_samples, n_controls)
    log_transmats : ndarray of shape (n_samples, K, K)
        The rows' log transition matrices at the current weights.
    transmats : ndarray of shape (n_samples, K, K), optional
        Their exponentials, when the caller has them.

    Returns
    -------
    dict
        ``trans`` (K, K) the expected counts; ``trans_gradient`` (K, K, P) the
        gradient of the unpenalised Q_i in theta_i; ``trans_hessian``
        (K, K P, K P) minus its Hessian; ``trans_scatter`` (K, P, P)
        sum_t n_t(i) v_t v_t^T; ``trans_objective`` (K,) the unpenalised Q_i.
    """
    n_samples, n_states, _ = pair_posteriors.shape
    regressors = _regressors(controls)
    n_regressors = regressors.shape[1]
    if transmats is None:
        with np.errstate(under="ignore"):
            transmats = np.exp(log_transmats)
    probabilities = transmats
    out_counts = pair_posteriors.sum(axis=2)  # n_t(i)
    expected = out_counts[:, :, None] * probabilities
    gradient = np.einsum("tij,ta->ija", pair_posteriors - expected, regressors)
    outer = (regressors[:, :, None] * regressors[:, None, :]).reshape(n_samples, -1)
    # -H_i = sum_t n_t(i) (diag(p_ti) - p_ti p_ti^T) (x) v_t v_t^T
    diagonal = (expected.reshape(n_samples, -1).T @ outer).reshape(
        n_states, n_states, n_regressors, n_regressors
    )
    hessian = np.zeros((n_states, n_states, n_regressors, n_states, n_regressors))
    for i in range(n_states):
        for j in range(n_states):
            hessian[i, j, :, j, :] = diagonal[i, j]
        weighted = (
            np.sqrt(out_counts[:, i])[:, None, None]
            * probabilities[:, i, :, None]
            * regressors[:, None, :]
        ).reshape(n_samples, -1)
        hessian[i] -= (weighted.T @ weighted).reshape(
            n_states, n_regressors, n_states, n_regressors
        )
    scatter = (out_counts.T @ outer).reshape(n_states, n_regressors, n_regressors)
    objective = np.where(pair_posteriors > 0, pair_posteriors * log_transmats, 0.0).sum(axis=(0, 2))
    return {
        "trans": pair_posteriors.sum(axis=0),
        "trans_gradient": gradient,
        "trans_hessian": hessian.reshape(n_states, n_states * n_regressors, -1),
        "trans_scatter": scatter,
        "trans_objective": objective,
    }


def transition_objective(coefs, intercepts, pair_posteriors, controls, alpha):
    """The penalised objective sum_i Q_i of the M step, from the rows themselves.

    ``sum_t sum_ij xi_t(i, j) log softmax_j(W_i u_t + b_i) - alpha / 2 ||W||^2``
    (the tests' reference for :func:`transition_statistics`).
    """
    log_transmats = _log_transmats(coefs, intercepts, controls)
    value = np.where(pair_posteriors > 0, pair_posteriors * log_transmats, 0.0).sum()
    return float(value - 0.5 * alpha * np.sum(coefs**2))


def newton_transition_step(coefs, intercepts, statistics, alpha, learn_coefs, learn_intercepts):
    """The GEM step of the transition weights: ``(coefs, intercepts, gains)``.

    Newton's direction on each source state's weights (the entries learned,
    transitions whose intercept is -inf left out), the step halved from 1
    until it raises the quadratic lower bound of Q_i by at least 1e-4 of its
    first-order gain (Armijo), which guarantees Q_i rises by at least that.
    ``gains`` (K,): the lower bound's rise of each source state.
    """
    n_states, _, n_controls = coefs.shape
    n_regressors = n_controls + 1
    theta = np.concatenate([coefs, intercepts[:, :, None]], axis=2)  # (K, K, P)
    steps = np.zeros_like(theta)
    gains = np.zeros(n_states)
    learned_columns = np.zeros(n_regressors, dtype=bool)
    learned_columns[:-1] = learn_coefs
    learned_columns[-1] = learn_intercepts
    penalised = np.zeros(n_regressors)
    penalised[:-1] = alpha
    centring = np.eye(n_states) - 1.0 / n_states
    for i in range(n_states):
        possible = np.isfinite(intercepts[i])
        free = (possible[:, None] & learned_columns[None, :]).ravel()
        if not free.any():
            continue
        finite_theta = np.where(np.isfinite(theta[i]), theta[i], 0.0)
        gradient = (statistics["trans_gradient"][i] - penalised * finite_theta).ravel()[free]
        ridge = np.tile(penalised, n_states)[free]
        curvature = statistics["trans_hessian"][i][np.ix_(free, free)] + np.diag(ridge)
        bound = np.kron(0.5 * centring, statistics["trans_scatter"][i])[np.ix_(free, free)]
        bound += np.diag(ridge)
        direction = np.linalg.lstsq(curvature, gradient, rcond=None)[0]
        slope = float(gradient @ direction)
        if not np.isfinite(slope) or slope <= 0:
            direction = np.linalg.lstsq(bound, gradient, rcond=None)[0]
            slope = float(gradient @ direction)
            if not np.isfinite(slope) or slope <= 0:
                continue
        quadratic = float(direction @ bound @ direction)
        size = 1.0
        for _ in range(60):
            gain = size * slope - 0.5 * size**2 * quadratic
            if gain >= _ARMIJO * size * slope:
                break
            size *= 0.5
        else:
            continue
        step = np.zeros(n_states * n_regressors)
        step[free] = size * direction
        steps[i] = step.reshape(n_states, n_regressors)
        gains[i] = gain
    return steps[:, :, :-1], steps[:, :, -1], gains


class VaryingStream(NamedTuple):
    """The message input-driven streams carry across a chunk boundary.

    Attributes
    ----------
    filtered, log_filtered : ndarray of shape (n_components,)
        p(z_t = j | x_1..x_t) of the last row t seen, and its logarithm (exact
        where the probability underflows).
    statistics : SufficientStatistics
        Each statistic of the E step with a leading axis j: its expectation
        over the rows so far given x_1..x_t and z_t = j.
    """

    filtered: np.ndarray
    log_filtered: np.ndarray
    statistics: SufficientStatistics


def _averaged(statistics, weights):
    """sum_j weights[j] statistics[name][j] of every statistic (a leading axis j)."""
    return SufficientStatistics(
        {name: np.tensordot(weights, value, axes=1) for name, value in statistics.items()}
    )


def _input_driven_init(emission_class):
    """``__init__`` of an input-driven model: ``emission_class``'s parameters (its
    ``params`` / ``init_params`` defaults with "u" added), then ``transition_alpha``
    and ``transition_coefs_init`` (keyword-only); the signature scikit-learn reads."""
    signature = inspect.signature(emission_class.__init__)
    parameters = [
        parameter.replace(default=parameter.default + "u")
        if parameter.name in ("params", "init_params")
        else parameter
        for parameter in signature.parameters.values()
    ]
    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters += [
        inspect.Parameter("transition_alpha", keyword, default=1.0),
        inspect.Parameter("transition_coefs_init", keyword, default=None),
    ]
    full = signature.replace(parameters=parameters)

    def __init__(self, *args, **kwargs):
        arguments = full.bind(self, *args, **kwargs)
        arguments.apply_defaults()
        values = dict(arguments.arguments)
        del values["self"]
        transition_alpha = values.pop("transition_alpha")
        transition_coefs_init = values.pop("transition_coefs_init")
        emission_class.__init__(self, **values)
        self.transition_alpha = transition_alpha
        self.transition_coefs_init = transition_coefs_init

    __init__.__signature__ = full
    __init__.__doc__ = (
        f"Parameters as documented on the class (those of {emission_class.__name__})."
    )
    return __init__


class InputDrivenTransitions(ControlsMixin):
    """Transition component: p(z_t = j | z_{t-1} = i, u_t) = softmax_j(W_i u_t + b_i).

    Put it before an emission model in the bases.  Fitted attributes:
    ``transition_coefs_`` (K, K, n_controls) the W_i as rows ``[i, j]``,
    ``transition_intercepts_`` (K, K) the b_i, and ``transmat_``, the
    transition matrix at zero controls (a property: softmax of the
    intercepts; assigning it sets the intercepts to its logarithm).  Letters:
    "t" the intercepts (through ``transmat_``), "u" the coefficients.
    ``transition_alpha`` is the L2 penalty on the coefficients.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.hmm import InputDrivenGaussianHMM  # InputDrivenTransitions, GaussianHMM
    >>> rng = np.random.default_rng(0)
    >>> u = rng.normal(size=(300, 1))
    >>> X = rng.normal(size=(300, 1))
    >>> model = InputDrivenGaussianHMM(2, n_iter=3, random_state=0).fit(X, controls=u)
    >>> model.transition_coefs_.shape, model.transmat_.shape
    ((2, 2, 1), (2, 2))
    """

    # The autoregressive emissions keep the controls as their rows' last columns.
    _controls_in_emission_rows = False

    @property
    def _all_letters(self):
        letters = dict(super()._all_letters)
        letters["u"] = "transition_coefs_"
        return letters

    def _parameter_rules(self):
        return {**super()._parameter_rules(), "transition_alpha": real_rule(low=0.0)}

    # -- transmat_ at zero controls ---------------------------------------------

    @property
    def transmat_(self):
        """The transition matrix at zero controls, softmax of ``transition_intercepts_``."""
        intercepts = self.__dict__.get("transition_intercepts_")
        if intercepts is None:
            raise AttributeError(f"{type(self).__name__} has no transmat_ yet.")
        return softmax(intercepts, axis=1)

    @transmat_.setter
    def transmat_(self, value):
        value = np.asarray(value, dtype=np.float64)
        if value.ndim == 2 and value.shape[0] == value.shape[1]:
            value = check_probability_vector(value, "transmat_", value.shape)
        else:
            raise ValueError(f"transmat_ must be a square matrix, got shape {value.shape}.")
        with np.errstate(divide="ignore"):
            self.transition_intercepts_ = np.log(value)

    # -- the controls with the rows ------------------------------------------------

    @property
    def _n_transition_controls(self):
        return self.__dict__.get("n_controls_", 0)

    def _forget_call_state(self):
        super()._forget_call_state()
        for name in ("_call_controls", "_next_controls"):
            self.__dict__.pop(name, None)

    def _prepare(self, X, y, lengths, sequence_ids, *, reset, method="fit"):
        X, offsets = super()._prepare(X, y, lengths, sequence_ids, reset=reset, method=method)
        if not self._controls_in_emission_rows:
            self._call_controls = self._checked_controls(X.shape[0], reset)
        return X, offsets

    def _with_controls(self, X):
        if self._controls_in_emission_rows:
            return X
        return np.column_stack([X, self._call_controls])

    def _prepare_fitted(self, X, lengths, sequence_ids, y=None, method=None):
        X, offsets = super()._prepare_fitted(X, lengths, sequence_ids, y=y, method=method)
        return self._with_controls(X), offsets

    def _stack_known_states(self, X, known_states):
        return super()._stack_known_states(self._with_controls(X), known_states)

    def _split_known_states(self, X):
        X, known_states = super()._split_known_states(X)
        if not self._controls_in_emission_rows:
            X = np.ascontiguousarray(X[:, : X.shape[1] - self._n_transition_controls])
        return X, known_states

    def _row_controls(self, X):
        width = X.shape[1] - (1 if self.__dict__.get("_known_states_stacked") else 0)
        return np.ascontiguousarray(X[:, width - self._n_transition_controls : width])

    # -- parameters -------------------------------------------------------------

    def _initialize(self, X, offsets, random_state):
        super()._initialize(X, offsets, random_state)
        shape = (self.n_components, self.n_components, self._n_transition_controls)
        coefs = self._initial_value("transition_coefs_")
        self.transition_coefs_ = np.zeros(shape) if coefs is None else coefs
        self._check_transition_parameters()

    def _check_fitted_parameters(self, n_features=None):
        super()._check_fitted_parameters(n_features)
        self._check_transition_parameters()

    def _check_transition_parameters(self):
        n_components = self.n_components
        intercepts = np.asarray(self.transition_intercepts_)
        coefs = np.asarray(self.transition_coefs_)
        if intercepts.shape != (n_components, n_components):
            raise ValueError(
                f"transition_intercepts_ must have shape ({n_components}, {n_components}), got "
                f"{intercepts.shape}."
            )
        shape = (n_components, n_components, self._n_transition_controls)
        if coefs.shape != shape:
            raise ValueError(
                f"transition_coefs_ must have shape {shape} (n_components, n_components, "
                f"n_controls), got {coefs.shape}."
            )
        if not np.all(np.isfinite(coefs)):
            raise ValueError("transition_coefs_ contains NaN or inf.")
        if np.isnan(intercepts).any() or np.isposinf(intercepts).any():
            raise ValueError("transition_intercepts_ contains NaN or +inf.")

    def _transition_matrices(self, controls, buffers=None):
        """``(log_transmats, transmats)`` of the rows with inputs ``controls``."""
        return _transition_matrices(
            self.transition_coefs_, self.transition_intercepts_, controls, buffers
        )

    def _log_startprob(self):
        with np.errstate(divide="ignore"):
            return np.log(self.startprob_)

    # -- the transition hooks of BaseHMM -------------------------------------------

    def _chain_estep(self, chain, log_frameprob, shift, offsets, buffers, controls=None):
        log_transmats, transmats = self._transition_matrices(controls, buffers)
        with np.errstate(divide="ignore"):
            log_start = np.log(chain[0])
        result = _varying_forward_backward_offsets(
            log_start, log_transmats, log_frameprob, offsets, shift, buffers, transmats
        )
        statistics = SufficientStatistics(start=result.start_counts)
        statistics.update(
            transition_statistics(result.pair_posteriors, controls, log_transmats, transmats)
        )
        return statistics, result.posteriors, result.log_likelihood

    # -- one long sequence: the checkpointed E step -----------------------------------

    def _estep_bytes_per_row(self, n_features):
        # BaseHMM's, plus the rows' matrices, their logarithms and pair
        # posteriors, and the transition statistics' per-row products.
        n_states, n_regressors = self.n_components, self._n_transition_controls + 1
        extra = 5 * n_states**2 + n_regressors**2 + 2 * n_states * n_regressors
        return super()._estep_bytes_per_row(n_features) + 8 * extra

    def _checkpointed_estep(
        self, X, emissions, buffers, chunk_rows=None, known_states=None, controls=None
    ):
        """``(statistics, log_likelihood)`` of one long sequence ``X`` by
        checkpointed forward-backward with a matrix per row
        (:func:`~skseq.inference.hmm_varying._varying_checkpointed_forward_backward`):
        memory of a chunk of rows and one K-vector per chunk, the statistics of
        one batch E step."""
        if chunk_rows is None:
            chunk_rows = self._checkpoint_rows(X.shape[0], X.shape[1])
        cache = [None]  # the emission cache of the last chunk computed, which consume uses

        def chunk_terms(start, stop):
            log_frameprob, shift, cache[0] = self._clamped(
                emissions(X[start:stop], buffers),
                None if known_states is None else known_states[start:stop],
            )
            log_frameprob = np.array(log_frameprob, dtype=np.float64)
            if shift is not None:
                log_frameprob += shift[:, None]
            return (*self._transition_matrices(controls[start:stop]), log_frameprob)

        added = []

        def consume(start, stop, posteriors, pairs, log_transmats, transmats):
            statistics = SufficientStatistics(
                transition_statistics(pairs, controls[start:stop], log_transmats, transmats)
            )
            statistics.update(self._emission_statistics(X[start:stop], posteriors, cache[0]))
            added[:] = [statistics + added[0] if added else statistics]

        log_likelihood, start_counts = _varying_checkpointed_forward_backward(
            self._log_startprob(), X.shape[0], chunk_rows, chunk_terms, consume
        )
        statistics = SufficientStatistics(start=start_counts)
        statistics.update(added[0])
        return statistics, log_likelihood

    def _chunked_chain_forward(self, controls, n_rows, chunk_rows, emissions, on_chunk, buffers):
        """The log-likelihood of one long sequence in chunks of ``chunk_rows`` rows
        (:func:`~skseq.inference.hmm_varying._varying_chunked_forward`)."""

        def chunk_terms(start, stop):
            log_frameprob, shift = emissions(start, stop)
            log_frameprob = np.array(log_frameprob, dtype=np.float64)
            if shift is not None:
                log_frameprob += shift[:, None]
            return (*self._transition_matrices(controls[start:stop]), log_frameprob)

        return _varying_chunked_forward(
            self._log_startprob(), n_rows, chunk_rows, chunk_terms, on_chunk
        )

    def _chain_posteriors(
        self, controls, log_frameprob, offsets, shift, buffers, posteriors, sequence_log_likelihood
    ):
        log_transmats, transmats = self._transition_matrices(controls, buffers)
        result = _varying_forward_backward_offsets(
            self._log_startprob(), log_transmats, log_frameprob, offsets, shift, buffers, transmats
        )
        posteriors[...] = result.posteriors
        sequence_log_likelihood[...] = result.sequence_log_likelihood

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
        log_transmats, transmats = self._transition_matrices(controls, buffers)
        result = _varying_forward_offsets(
            self._log_startprob(), log_transmats, log_frameprob, offsets, shift, buffers, transmats
        )
        for out, value in zip((filtered, log_predictive, sequence_log_likelihood), result):
            if out is not None:
                out[...] = value

    def _chain_viterbi(self, controls, log_frameprob, offsets, buffers, states, sequence_log_prob):
        log_prob, path = _varying_viterbi_offsets(
            self._log_startprob(),
            self._transition_matrices(controls, buffers)[0],
            log_frameprob,
            offsets,
        )
        states[...] = path
        sequence_log_prob[...] = log_prob

    def _transition_mstep(self, statistics):
        learn_coefs, learn_intercepts = "u" in self.params, "t" in self.params
        if not (learn_coefs or learn_intercepts):
            return
        step_size = 1.0
        pending = self.__dict__.get("_stochastic_transition")
        if pending is not None:  # partial_fit: one Newton step on the batch, times rho
            statistics, step_size = pending
        coefs, intercepts, _ = newton_transition_step(
            self.transition_coefs_,
            self.transition_intercepts_,
            statistics,
            float(self.transition_alpha),
            learn_coefs,
            learn_intercepts,
        )
        self.transition_coefs_ = self.transition_coefs_ + step_size * coefs
        self.transition_intercepts_ = self.transition_intercepts_ + step_size * intercepts

    def _transition_n_parameters(self):
        free = self.n_components * (self.n_components - 1)
        return {"t": free, "u": free * self._n_transition_controls}

    # -- partial_fit: a stochastic Newton step; sequences continue across batches -----

    def _stochastic_step(self, statistics, n_rows, reference_rows):
        iteration = getattr(self, "n_batch_iter_", 0) + 1
        rho = (self.learning_offset + iteration) ** (-self.learning_decay)
        batch = SufficientStatistics({key: statistics[key] for key in _TRANSITION_KEYS}) * (
            reference_rows / n_rows
        )
        # A batch that continues a sequence revises the earlier rows' share
        # (its statistics are the difference of two smoothed sums), so its
        # curvature and scatter need not be positive semi-definite: the step
        # uses their PSD parts (the same matrices for a batch of whole sequences).
        for key in ("trans_hessian", "trans_scatter"):
            batch[key] = _symmetric_function(batch[key], lambda values: np.maximum(values, 0.0))
        self._stochastic_transition = (batch, rho)
        try:
            super()._stochastic_step(statistics, n_rows, reference_rows)
        finally:
            del self._stochastic_transition

    def _forward_smoothing(self, X, stream):
        """The streams' forward-only smoother with a transition matrix per row.

        The message (:class:`VaryingStream`) holds, for each state j of the
        last row t seen, every statistic of the rows so far given x_1..x_t
        and z_t = j (the transition weights' gradient, Hessian, scatter and
        objective too: each is a sum over rows of a function of the pair
        (z_{s-1}, z_s), at the parameters of the E step).  A chunk of rows
        t+1..T is smoothed by forward-backward given each last state k
        (:func:`~skseq.inference.hmm_varying._varying_smoothing_given_end`):
        its rows' statistics given z_T = k, plus the message's averaged over
        p(z_t | x_1..x_T, z_T = k).  Averaged over p(z_T | x_1..x_T), that is
        E[statistics | x_1..x_T] exactly: at fixed parameters, a sequence cut
        anywhere adds up to one batch's statistics.  It costs K
        forward-backward passes over the chunk.
        """
        controls = self._row_controls(X)
        X, known_states = self._split_known_states(X)
        log_frameprob, cache = self._estep_emission_terms(X)
        log_frameprob, _ = clamp_to_known_states(log_frameprob, None, known_states)
        log_transmats, transmats = self._transition_matrices(controls)
        n_states = self.n_components
        continued = stream is not None
        log_start = stream.log_filtered if continued else self._log_startprob()
        log_joint = np.full(n_states, -np.inf)
        given_end = [None] * n_states
        for k in range(n_states):
            log_joint[k], posteriors, pairs, before = _varying_smoothing_given_end(
                log_start, log_transmats, transmats, log_frameprob, k, continued
            )
            if log_joint[k] == -np.inf:
                continue
            start = np.zeros(n_states) if continued else posteriors[0]
            statistics = SufficientStatistics(start=start)
            statistics.update(transition_statistics(pairs, controls, log_transmats, transmats))
            statistics.update(self._emission_statistics(X, posteriors, cache))
            if continued:
                statistics = statistics + _averaged(stream.statistics, before)
            given_end[k] = statistics
        log_likelihood = float(logsumexp(log_joint))
        if log_likelihood == -np.inf:  # the rows have probability zero: _check_log_likelihood
            return None, log_likelihood, stream
        template = next(value for value in given_end if value is not None)
        stacked = SufficientStatistics(
            {
                name: np.stack([np.zeros_like(value) if s is None else s[name] for s in given_end])
                for name, value in template.items()
            }
        )
        log_filtered = log_joint - log_likelihood
        carried = VaryingStream(np.exp(log_filtered), log_filtered, stacked)
        added = _averaged(stacked, carried.filtered)
        if continued:
            added = added + (-1.0) * _averaged(stream.statistics, stream.filtered)
        return added, log_likelihood, carried

    def _no_statistics(self):
        # A batch whose last sequence has no emitted step yet (autoregressive
        # emissions): zero transition-weight statistics too.
        statistics = super()._no_statistics()
        n_states, n_regressors = self.n_components, self._n_transition_controls + 1
        statistics.update(
            trans_gradient=np.zeros((n_states, n_states, n_regressors)),
            trans_hessian=np.zeros((n_states, n_states * n_regressors, n_states * n_regressors)),
            trans_scatter=np.zeros((n_states, n_regressors, n_regressors)),
            trans_objective=np.zeros(n_states),
        )
        return statistics

    # -- the online filter: the carried message is filtered_state_ ------------------

    _stream_attributes = ("filtered_state_", "stream_log_likelihood_")

    def _publish_stream(self, carried):
        # filtered_state_ as partial_fit's E step left it (before its step);
        # stream_log_likelihood_ belongs to filter_stream.
        self.__dict__.pop("stream_log_likelihood_", None)
        super()._publish_stream(carried)

    def _stream_forward(self, X, offsets, state):
        """The rows of :meth:`filter_stream` through their own transition matrices.

        A continued stream's first row is predicted from ``state`` (the
        filtered distribution after the previous row) through the matrix of
        that row's controls, which is what the forward recursion over the
        whole sequence does at that row: the continuation is exact.
        """
        controls = self._row_controls(X)
        X, _ = self._split_known_states(X)
        log_frameprob = self._compute_log_likelihood(X)
        log_transmats, transmats = self._transition_matrices(controls)
        if state is None:
            log_start = self._log_startprob()
        else:
            shape = (self.n_components,)
            try:
                state = check_probability_vector(state, "filtered_state_", shape)
            except (TypeError, ValueError) as error:
                raise ValueError(
                    f"filtered_state_ does not fit the model ({error}); call reset_filter()."
                ) from None
            with np.errstate(divide="ignore"):
                log_start = np.log(state @ transmats[0])
        filtered, _, sequence_log_likelihood = _varying_forward_offsets(
            log_start, log_transmats, log_frameprob, offsets, transmats=transmats
        )
        self.stream_log_likelihood_ = float(sequence_log_likelihood.sum())
        return filtered, self.stream_log_likelihood_

    def reset_filter(self, X=None, *, controls=None):
        """Restart the online filter, from the history ``X`` (with its ``controls``)
        when given; see :meth:`skseq.GaussianHMM.reset_filter`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), optional
            A history, taken as one sequence: the stream continues from its
            last filtered state.  None: the next row starts a sequence.
        controls : array-like of shape (n_samples, n_controls), optional
            The inputs of the rows of ``X`` (required with ``X`` when the
            model has controls).

        Returns
        -------
        self
        """
        self.__dict__.pop("stream_log_likelihood_", None)
        return super().reset_filter(X, controls=controls)

    # -- forecasting and sampling ---------------------------------------------------

    def predict_next_state_proba(
        self, X, *, lengths=None, sequence_ids=None, controls=None, next_controls=None
    ):
        """One-step predictive state probabilities p(z_{t+1} | x_1..x_t, u_1..u_{t+1}).

        Row ``t`` is the filtered distribution of row ``t`` times the
        transition matrix of the step after it, at the inputs
        ``next_controls[t]`` (u_{t+1}: for the last row of a sequence, the
        input of the step beyond its end).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        lengths, sequence_ids : see :meth:`fit`.
        controls : array-like of shape (n_samples, n_controls)
            The inputs of the rows of ``X``.
        next_controls : array-like of shape (n_samples, n_controls)
            The inputs of the step after each row (required when the model
            has controls).

        Returns
        -------
        predicted : ndarray of shape (n_samples, n_components)
        """
        self._next_controls = next_controls
        try:
            return super().predict_next_state_proba(
                X, lengths=lengths, sequence_ids=sequence_ids, controls=controls
            )
        finally:
            self.__dict__.pop("_next_controls", None)

    def _predicted_states(self, X, offsets):
        result = self._forward(X, offsets)
        self._require_possible(result.sequence_log_likelihood)
        filtered = result.filtered
        next_controls = self.__dict__.get("_next_controls")
        emitted = self.__dict__.get("_emitted_rows")
        n_rows = filtered.shape[0] if emitted is None else emitted[0]
        next_controls = check_controls(next_controls, n_rows, self._n_transition_controls)
        if emitted is not None:
            next_controls = next_controls[emitted[1]]
        transmats = self._transition_matrices(next_controls)[1]
        predicted = np.einsum("ti,tij->tj", filtered, transmats)
        predicted /= predicted.sum(axis=1, keepdims=True)
        return predicted

    def _sample_path(self, startprob, n_samples, random_state):
        # The first state from ``startprob`` (``sample``'s currstate: its row
        # of transmat_, the matrix at zero controls); then the rows' matrices.
        uniforms = random_state.rand(n_samples)
        transmats = self._transition_matrices(self._sample_controls)[1]
        return _sample_varying_states(startprob, transmats, uniforms)


_SHARED_DOC = """
    Transitions depend on inputs u_t (``controls=``, one row per row of ``X``,
    on every method): p(z_t = j | z_{{t-1}} = i, u_t) = softmax_j(W_i u_t + b_i)
    (:class:`~skseq.hmm._input_driven.InputDrivenTransitions`); the emissions
    are :class:`~skseq.{emission}`'s.  With zero ``transition_coefs_`` it is
    that model with ``transmat_`` = softmax(``transition_intercepts_``).
    The M step of the transition weights is a Newton step with an Armijo line
    search on the expected complete-data log-likelihood (user guide,
    "Input-driven transitions"), which never lowers the penalised objective.

    Parameters
    ----------
    n_components, ... : as in :class:`~skseq.{emission}`, whose parameters
        these are (the same names, order and defaults; ``params`` and
        ``init_params`` have "u" too).  Letters: "s" start, "t" the transition
        intercepts (``transmat_``), "u" the transition coefficients, and the
        emission letters.  ``transmat_prior`` is not used (the transition
        weights have the L2 penalty instead).
    transition_alpha : float, default=1.0
        L2 penalty alpha / 2 ||W||^2 on ``transition_coefs_`` (not on the
        intercepts).
    transition_coefs_init : array-like of shape (n_components, n_components, \
n_controls), optional
        Initial coefficients (default zero: the plain HMM).

    Attributes
    ----------
    transition_coefs_ : ndarray of shape (n_components, n_components, n_controls)
        ``transition_coefs_[i, j]`` weighs u_t in the logit of i -> j.
    transition_intercepts_ : ndarray of shape (n_components, n_components)
    transmat_ : ndarray of shape (n_components, n_components)
        The transition matrix at zero controls (a property).
    n_controls_ : int
        Number of control columns seen at fit (0: none).
    filtered_state_ : ndarray of shape (n_components,)
        After :meth:`filter_stream`, :meth:`filter_update` or
        :meth:`reset_filter` with a history: p(z_t | the stream's rows up to
        its last, t), the message the online filter carries.
    stream_log_likelihood_ : float
        After :meth:`filter_stream`: the log-likelihood of its last call's
        rows given the stream's earlier rows (and all their inputs).
    startprob_, monitor_, n_features_in_, and the emission parameters
        As in :class:`~skseq.{emission}`.

    Notes
    -----
    The online filter (``filter_stream(X, controls=)``, ``filter_update(x,
    controls=)``, ``reset_filter(X, controls=)``) continues a sequence across
    calls exactly: the carried message is ``filtered_state_``, and the first
    row of a call is predicted from it through the transition matrix of that
    row's own inputs; at fixed parameters, chunks cut anywhere give the
    filtered probabilities of :meth:`filter` on the whole sequence and their
    ``stream_log_likelihood_`` add up to :meth:`score`.
    :meth:`partial_fit` continues a sequence across batches as the other
    HMMs do (the first sequence of a batch continues the last one of the
    previous batch unless ``new_sequence``): its forward-only smoother
    carries, for each state of the last row, the statistics of the rows so
    far given that state, so at fixed parameters a sequence cut anywhere
    gives the statistics, log-likelihood and ``filtered_state_`` of one
    batch (a continued chunk costs K forward-backward passes over its rows).
    Each batch moves the transition weights by one Newton step on its
    statistics (scaled to ``total_samples`` or the rows seen, their
    curvature's positive semi-definite part), times the Robbins-Monro step
    ``(learning_offset + n_batch_iter_) ** -learning_decay``.  The E step of
    one sequence too long for ``working_memory`` (it holds (n_samples,
    n_components, n_components) arrays) is checkpointed as the other HMMs'
    (user guide, "One long sequence in bounded memory"): chunks of about
    sqrt(n_samples) rows, forward-backward over each from the log filter
    before it, with the statistics of one batch E step.
"""


def _documented(cls, emission, example):
    cls.__doc__ = cls.__doc__ + _SHARED_DOC.format(emission=emission) + example
    return cls


class InputDrivenGaussianHMM(InputDrivenTransitions, GaussianHMM):
    """Gaussian HMM whose transitions depend on inputs (an IO-HMM)."""

    __init__ = _input_driven_init(GaussianHMM)


_documented(
    InputDrivenGaussianHMM,
    "GaussianHMM",
    """
    Examples
    --------
    >>> import numpy as np
    >>> from skseq.hmm import InputDrivenGaussianHMM
    >>> rng = np.random.default_rng(0)
    >>> u = rng.normal(size=(2000, 1))
    >>> states = np.zeros(2000, dtype=int)
    >>> for t in range(1, 2000):  # u > 0 sends the chain to state 1, u < 0 to 0
    ...     states[t] = rng.random() < 1 / (1 + np.exp(-4 * u[t, 0]))
    >>> X = np.where(states == 1, 3.0, -3.0)[:, None] + rng.normal(size=(2000, 1))
    >>> model = InputDrivenGaussianHMM(2, n_iter=30, random_state=0).fit(X, controls=u)
    >>> high = int(np.argmax(model.means_[:, 0]))
    >>> bool(model.transition_coefs_[0, high, 0] - model.transition_coefs_[0, 1 - high, 0] > 2)
    True
""",
)


class InputDrivenCategoricalHMM(InputDrivenTransitions, CategoricalHMM):
    """Categorical HMM whose transitions depend on inputs (an IO-HMM)."""

    __init__ = _input_driven_init(CategoricalHMM)


_documented(
    InputDrivenCategoricalHMM,
    "CategoricalHMM",
    """
    Examples
    --------
    >>> import numpy as np
    >>> from skseq.hmm import InputDrivenCategoricalHMM
    >>> rng = np.random.default_rng(0)
    >>> X = rng.integers(0, 3, size=(200, 1))
    >>> u = rng.normal(size=(200, 2))
    >>> model = InputDrivenCategoricalHMM(2, n_iter=5, random_state=0).fit(X, controls=u)
    >>> model.predict_proba(X, controls=u).shape
    (200, 2)
""",
)


class InputDrivenPoissonHMM(InputDrivenTransitions, PoissonHMM):
    """Poisson HMM whose transitions depend on inputs (an IO-HMM)."""

    __init__ = _input_driven_init(PoissonHMM)


_documented(
    InputDrivenPoissonHMM,
    "PoissonHMM",
    """
    Examples
    --------
    >>> import numpy as np
    >>> from skseq.hmm import InputDrivenPoissonHMM
    >>> rng = np.random.default_rng(0)
    >>> X = rng.poisson(3.0, size=(200, 1))
    >>> u = rng.normal(size=(200, 1))
    >>> model = InputDrivenPoissonHMM(2, n_iter=5, random_state=0).fit(X, controls=u)
    >>> model.predict(X, controls=u).shape
    (200,)
""",
)


class InputDrivenGMMHMM(InputDrivenTransitions, GMMHMM):
    """Gaussian-mixture HMM whose transitions depend on inputs (an IO-HMM)."""

    __init__ = _input_driven_init(GMMHMM)


_documented(
    InputDrivenGMMHMM,
    "GMMHMM",
    """
    Examples
    --------
    >>> import numpy as np
    >>> from skseq.hmm import InputDrivenGMMHMM
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2))
    >>> u = rng.normal(size=(300, 1))
    >>> model = InputDrivenGMMHMM(2, n_mix=2, n_iter=5, random_state=0).fit(X, controls=u)
    >>> round(model.score(X, controls=u) / 300, 1) < 0
    True
""",
)


class InputDrivenAutoregressiveHMM(InputDrivenTransitions, AutoregressiveHMM):
    """Switching vector autoregression whose transitions depend on inputs (an IO-HMM).

    The inputs enter both the emissions (``coefs_``'s last columns, as in
    :class:`~skseq.hmm.AutoregressiveHMM`) and the transitions; the
    transitions into the ``n_lags`` conditioning rows are not modelled.
    """

    _controls_in_emission_rows = True
    __init__ = _input_driven_init(AutoregressiveHMM)


_documented(
    InputDrivenAutoregressiveHMM,
    "hmm.AutoregressiveHMM",
    """
    Examples
    --------
    >>> import numpy as np
    >>> from skseq.hmm import InputDrivenAutoregressiveHMM
    >>> rng = np.random.default_rng(0)
    >>> u = rng.normal(size=(300, 1))
    >>> x = np.cumsum(rng.normal(size=(300, 1)), axis=0)
    >>> model = InputDrivenAutoregressiveHMM(2, n_lags=1, n_iter=5, random_state=0)
    >>> model.fit(x, controls=u).transition_coefs_.shape
    (2, 2, 1)
""",
)
