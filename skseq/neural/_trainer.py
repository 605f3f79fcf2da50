"""The minibatch trainer shared by every neural sequence estimator, and their base class.

The base class of the neural estimators, :class:`BaseSequenceNetwork`, lives
here because it *is* the trainer: its methods are the training loop, and an
estimator is an architecture (``_make_network``) plus targets and a loss
(:mod:`skseq.neural._supervised`) on top of it.  A separate
``_estimator.py`` would hold a class whose every method is the trainer's.

:class:`BaseSequenceNetwork` owns what does not depend on the architecture:
hyperparameter checks of the optimiser, the epoch loop over shuffled
minibatches, Adam with decoupled weight decay, gradient clipping by global
norm, early stopping on a held-out fraction, warm starts, ``partial_fit``,
progress output, and the splitting of each minibatch over ``n_jobs``
threads.  A concrete estimator supplies the network (``_make_network``) and
the regressor / classifier bases in :mod:`skseq.neural._supervised` supply targets,
loss and score.

A network is any object with ``init_parameters(random_state, dtype)``,
``decayed_parameters()``, ``forward(parameters, X) -> (outputs, cache)`` and
``backward(parameters, grad_outputs, cache) -> grads`` (see
:class:`~skseq.neural._networks._residual.ResidualSequenceNetwork`).

Unsupervised models (the deep Markov model) train on the same loop: they
validate their own data and call :meth:`BaseSequenceNetwork._train` with one
"target" and one weight array per sequence, and redefine the hooks
``_new_network``, ``_loss_and_gradients``, ``_validation_score`` and
``_describe_loss``.

Before training and prediction the trainer estimates the working memory the
passes will need and raises a ``ValueError`` beyond :data:`MAX_WORKING_MEMORY`
(see :func:`estimate_activation_bytes`), instead of running out of memory
part-way.

Divergence is reported in the user's terms.  The data's scale is checked
against the working dtype before training and prediction
(:func:`skseq.neural._validation.check_network_scale`); during training the
loss of every minibatch and the weights after every epoch must be finite,
and a layer that refuses non-finite activations in the middle of a pass
(the inference functions check their inputs) is reported as the divergence
it is: the epoch and minibatch, and the hyperparameters that set the step
(``learning_rate_init``, ``weight_decay``, ``max_grad_norm``) or the initial
scale of the weights (``init_*``), instead of the name of an internal array.
"""

import inspect
import math
import re
import sys
import time
from contextlib import contextmanager
from functools import partial

import numpy as np
from joblib import effective_n_jobs
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from .._buffers import reusing_pass_arrays
from .._parallel import ThreadRunner, even_blocks, run_calls, single_threaded_blas
from .._validation import check_parameters
from ..base import warn_user
from ..inference._checks import all_finite
from ._networks._residual import make_network
from ._validation import NETWORK_PARAMETER_RULES, check_sequences

__all__ = [
    "Adam",
    "clip_by_global_norm",
    "global_norm",
    "estimate_activation_bytes",
    "activation_bytes",
    "BaseSequenceNetwork",
    "MAX_WORKING_MEMORY",
]

# Positions (sequences x steps) per forward pass at prediction time: bounds memory.
# BLAS runs on one thread throughout (``single_threaded_blas``): the matrices are
# small, a multi-threaded BLAS slows them down, and parallelism comes from ``n_jobs``.
PREDICTION_CHUNK_POSITIONS = 1 << 16

# The most working memory, in bytes, that fit and predict may plan to use: a
# minibatch (or a chunk of sequences in prediction, over all threads) whose
# estimated need exceeds it raises a ValueError before any work is done.
MAX_WORKING_MEMORY = 8 * 2**30

# Estimated working memory per byte of the activations that a forward pass keeps:
# a training step also holds the gradients of one block's activations and the
# temporaries of its backward pass (peaks measured at 1.3 to 1.65 times the
# activations for the Mamba, S4D, Elman and Transformer stacks), a forward pass
# only its own temporaries (measured 1.1 to 1.25).
TRAINING_MEMORY_FACTOR = 2.0
PREDICTION_MEMORY_FACTOR = 1.5

# (sequences, steps) of the probe forward passes of estimate_activation_bytes.
_MEMORY_PROBES = [(n_sequences, n_steps) for n_sequences in (1, 2) for n_steps in (16, 32, 64)]


def _owned_bytes(value, seen, excluded):
    """Bytes of the distinct arrays (whole buffers) reachable from ``value``.

    Views count as their base array, once; the arrays in ``excluded`` (by
    ``id``: the parameters) and anything that is not an array, a tuple, a
    list or a dict count nothing.
    """
    if isinstance(value, np.ndarray):
        base = value
        while isinstance(base.base, np.ndarray):
            base = base.base
        if id(base) in seen or id(base) in excluded:
            return 0
        seen.add(id(base))
        return base.nbytes if base.base is None else value.nbytes
    if isinstance(value, tuple | list):
        return sum(_owned_bytes(item, seen, excluded) for item in value)
    if isinstance(value, dict):
        return sum(_owned_bytes(item, seen, excluded) for item in value.values())
    return 0


def estimate_activation_bytes(network, parameters, n_features, *, forward=None):
    """A model of the bytes a forward pass keeps, as a function of the batch.

    The arrays that ``network.forward`` returns in its outputs and cache (what
    the backward pass reads) are measured on six small batches of 1 or 2
    sequences of 16, 32 or 64 steps (powers of two, so that FFT lengths are
    exactly twice the length, as they nearly are at any length), and fitted
    exactly by
    ``bytes(n, T) = a + b T + c T**2 + n (d + e T + f T**2)`` for ``n``
    sequences of ``T`` steps: terms that grow with the length (a quadratic
    one for an attention that kept its score matrices) and with the batch,
    apart from the per-call constants.  Works for any network of the
    protocol, with no per-layer bookkeeping.

    Parameters
    ----------
    network : network object
    parameters : dict of ndarray
        The network's parameters; their dtype is the working precision.
    n_features : int
    forward : callable, optional
        ``forward(parameters, X)`` returning what a training forward pass on
        ``X`` of shape (n_sequences, n_steps, n_features) keeps; by default
        ``network.forward`` (networks whose pass takes more than ``X``, as
        the deep Markov model's, pass their own).

    Returns
    -------
    coefficients : ndarray of shape (6,)
        ``(a, b, c, d, e, f)``; :func:`activation_bytes` evaluates the model.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.neural._networks._residual import ResidualSequenceNetwork
    >>> network = ResidualSequenceNetwork(2, 4, 1, blocks=[], per_step=True)
    >>> parameters = network.init_parameters(np.random.RandomState(0), np.float64)
    >>> coefficients = estimate_activation_bytes(network, parameters, 2)
    >>> outputs, cache = network.forward(parameters, np.zeros((10, 100, 2)))
    >>> kept = _owned_bytes((outputs, cache), set(), {id(p) for p in parameters.values()})
    >>> round(activation_bytes(coefficients, 10, 100)) == kept
    True
    """
    if forward is None:
        forward = network.forward
    dtype = next(iter(parameters.values())).dtype
    excluded = {id(value) for value in parameters.values()}
    rng = np.random.RandomState(0)
    design, measured = [], []
    for n_sequences, n_steps in _MEMORY_PROBES:
        X = rng.normal(size=(n_sequences, n_steps, n_features)).astype(dtype)
        measured.append(_owned_bytes(forward(parameters, X), set(), excluded))
        steps = np.array([1.0, n_steps, n_steps**2])
        design.append(np.concatenate([steps, n_sequences * steps]))
    return np.linalg.solve(np.array(design), np.array(measured, dtype=np.float64))


def activation_bytes(coefficients, n_sequences, n_steps):
    """The bytes of :func:`estimate_activation_bytes`'s model for a batch."""
    steps = np.array([1.0, n_steps, float(n_steps) ** 2])
    return max(0.0, float(coefficients[:3] @ steps + n_sequences * (coefficients[3:] @ steps)))


def _gib(n_bytes):
    return f"{n_bytes / 2**30:.3g} GiB"


def _memory_limit():
    return f"the limit of {_gib(MAX_WORKING_MEMORY)} (skseq.neural._trainer.MAX_WORKING_MEMORY)"


# What the inference functions say when an input is not finite or a result
# overflows.  On checked data, such an error in a pass means that the weights
# or the activations became non-finite, and the trainer reports it in the
# user's terms; any other error of a pass propagates as it is.
_NON_FINITE_MESSAGE = re.compile(r"NaN|infinit|overflow|not finite|non-finite")


def _is_non_finite_error(error):
    return bool(_NON_FINITE_MESSAGE.search(str(error)))


def global_norm(grads):
    """Euclidean norm of all gradient arrays taken together (float64)."""
    return float(np.sqrt(sum(float(np.vdot(g, g)) for g in grads.values())))


def clip_by_global_norm(grads, max_norm):
    """Scale all gradients in place by one factor so their global norm is at most ``max_norm``.

    Returns the norm before clipping.

    Examples
    --------
    >>> import numpy as np
    >>> grads = {"a": np.array([3.0]), "b": np.array([4.0])}
    >>> clip_by_global_norm(grads, 1.0)
    5.0
    >>> grads["a"], grads["b"]
    (array([0.6]), array([0.8]))
    """
    norm = global_norm(grads)
    if norm > max_norm:
        scale = max_norm / norm
        for gradient in grads.values():
            gradient *= scale
    return norm


class Adam:
    """Adam moments for a dict of parameter arrays, with decoupled weight decay.

    One step with gradient ``g`` (t counts steps from 1)::

        m = beta_1 m + (1 - beta_1) g          v = beta_2 v + (1 - beta_2) g**2
        theta -= lr * (m / (1 - beta_1**t)) / (sqrt(v / (1 - beta_2**t)) + epsilon)
        theta -= lr * weight_decay * theta     (decayed parameters only; AdamW)

    The decay term does not pass through the moments, so it shrinks every
    decayed weight by the same factor whatever its gradient history.
    Hyperparameters are arguments of :meth:`step`, so changing them between
    ``partial_fit`` calls takes effect.

    Parameters
    ----------
    parameters : dict of ndarray

    Examples
    --------
    >>> import numpy as np
    >>> theta = {"w": np.array([1.0])}
    >>> adam = Adam(theta)
    >>> adam.step(theta, {"w": np.array([10.0])}, learning_rate=0.1, beta_1=0.9,
    ...           beta_2=0.999, epsilon=1e-8, weight_decay=0.0, decayed=())
    >>> np.round(theta["w"], 6)     # the first step moves by the learning rate
    array([0.9])
    """

    def __init__(self, parameters):
        self.first_moments = {key: np.zeros_like(value) for key, value in parameters.items()}
        self.second_moments = {key: np.zeros_like(value) for key, value in parameters.items()}
        self.n_steps = 0

    def astype(self, dtype):
        """Cast the moments (when a warm start changes the working precision)."""
        for moments in (self.first_moments, self.second_moments):
            for key in moments:
                moments[key] = moments[key].astype(dtype, copy=False)

    def step(
        self, parameters, grads, *, learning_rate, beta_1, beta_2, epsilon, weight_decay, decayed
    ):
        """Update ``parameters`` in place from ``grads``."""
        self.n_steps += 1
        first_correction = 1.0 - beta_1**self.n_steps
        second_correction = 1.0 - beta_2**self.n_steps
        for key, gradient in grads.items():
            first = self.first_moments[key]
            second = self.second_moments[key]
            first *= beta_1
            first += (1.0 - beta_1) * gradient
            second *= beta_2
            second += (1.0 - beta_2) * (gradient * gradient)
            update = (first / first_correction) / (np.sqrt(second / second_correction) + epsilon)
            parameters[key] -= learning_rate * update
        if weight_decay > 0:
            shrink = 1.0 - learning_rate * weight_decay
            for key in decayed:
                parameters[key] *= shrink


def _sum_dicts(dicts):
    total = dict(dicts[0])
    for more in dicts[1:]:
        for key, value in more.items():
            total[key] = total[key] + value
    return total


class BaseSequenceNetwork(BaseEstimator):
    """Training loop of the neural sequence estimators.

    Subclasses define their layer ``_network_layer`` and its options
    ``_network_options()`` (or ``_make_network(n_features, n_outputs,
    per_step)``), ``_PARAMETER_RULES`` (their hyperparameters' rules), and
    (through the regressor/classifier
    bases) ``_prepare_targets``, ``_loss`` and ``_score_outputs``.  They
    expose the hyperparameters read here: ``learning_rate_init``, ``beta_1``,
    ``beta_2``, ``epsilon``, ``weight_decay``, ``batch_size``, ``max_iter``,
    ``shuffle``, ``random_state``, ``max_grad_norm``, ``early_stopping``,
    ``validation_fraction``, ``n_iter_no_change``, ``tol``, ``verbose``,
    ``warm_start``, ``n_jobs`` and ``dtype``.

    ``sample_weight`` is requested by default in ``fit``, ``partial_fit`` and
    ``score`` (metadata routing): for per-step targets it is the mask that
    says which steps count, so meta-estimators pass it on without a
    ``set_*_request`` call.
    """

    __metadata_request__fit = {"sample_weight": True}
    __metadata_request__partial_fit = {"sample_weight": True}
    __metadata_request__score = {"sample_weight": True}

    # -- hyperparameters ---------------------------------------------------------

    #: The rule of every hyperparameter of the estimator, for
    #: :func:`skseq._validation.check_parameters` (with
    #: :data:`skseq._validation.PARAMETER_RULES`): each architecture extends the
    #: networks' shared table with its own.
    _PARAMETER_RULES = NETWORK_PARAMETER_RULES

    def _parameter_rules(self):
        return self._PARAMETER_RULES

    def _check_params(self):
        check_parameters(self, self._parameter_rules())
        self._working_dtype()

    def _working_dtype(self):
        try:
            dtype = np.dtype(self.dtype)
        except TypeError as error:
            raise TypeError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}.") from error
        if dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}.")
        return dtype

    def _working_memory(self, X, n_sequences, *, training):
        """Estimated bytes that ``n_sequences`` sequences of ``X``'s length need at once.

        ``X`` is prepared (3-D).  The activations a forward pass keeps
        (:func:`estimate_activation_bytes`, measured once per network and
        dtype in fit) are scaled by TRAINING_MEMORY_FACTOR for a training
        step or PREDICTION_MEMORY_FACTOR for prediction.
        """
        dtype = next(iter(self.parameters_.values())).dtype
        model = getattr(self, "_activation_model", None)
        if model is None or model[0] != dtype.str:
            model = (
                dtype.str,
                estimate_activation_bytes(
                    self.network_, self.parameters_, X.shape[2], forward=self._kept_activations
                ),
            )
            if training:  # predict leaves the estimator unchanged
                self._activation_model = model
        factor = TRAINING_MEMORY_FACTOR if training else PREDICTION_MEMORY_FACTOR
        return factor * activation_bytes(model[1], n_sequences, X.shape[1])

    def _kept_activations(self, parameters, X):
        """What a training forward pass on prepared ``X`` keeps for its backward pass."""
        return self.network_.forward(parameters, X)

    def _check_training_memory(self, X, batch_size):
        needed = self._working_memory(X, batch_size, training=True)
        if needed > MAX_WORKING_MEMORY:
            raise ValueError(
                f"{type(self).__name__}: a minibatch of {batch_size} sequences of {X.shape[1]} "
                f"steps needs about {_gib(needed)} of working memory for its forward and "
                f"backward pass, more than {_memory_limit()}; lower batch_size or cut the "
                "sequences into shorter ones."
            )

    def _prediction_chunk(self, X, chunk, n_threads, n_sequences=None):
        """``chunk`` sequences per forward pass, fewer if ``n_threads`` of them need too much.

        ``X`` gives the length and features; ``n_sequences`` (default
        ``X.shape[0]``) is how many sequences there are to pass in all.
        """
        if n_sequences is None:
            n_sequences = X.shape[0]

        def needed(chunk):
            return self._working_memory(X, min(n_sequences, chunk * n_threads), training=False)

        while chunk > 1 and needed(chunk) > MAX_WORKING_MEMORY:
            chunk //= 2
        if needed(chunk) > MAX_WORKING_MEMORY:
            raise ValueError(
                f"{type(self).__name__}: predicting sequences of {X.shape[1]} steps needs about "
                f"{_gib(needed(chunk))} of working memory with {min(n_sequences, n_threads)} "
                f"sequence(s) at a time (one per thread), more than {_memory_limit()}; predict "
                "shorter sequences, or with fewer n_jobs."
            )
        return chunk

    # -- the forward pass over many sequences --------------------------------------

    def _n_threads(self, n_items):
        return max(1, min(effective_n_jobs(self.n_jobs), n_items))

    def _network_outputs(self, X):
        """Outputs of the fitted network for prepared ``X``, in chunks over threads."""
        n_sequences, seq_len, _ = X.shape
        chunk = max(1, PREDICTION_CHUNK_POSITIONS // seq_len)
        n_threads = self._n_threads(n_sequences)
        chunk = self._prediction_chunk(X, min(chunk, -(-n_sequences // n_threads)), n_threads)
        slices = [slice(start, start + chunk) for start in range(0, n_sequences, chunk)]

        def forward(part):
            return self.network_.forward(self.parameters_, X[part])[0]

        with single_threaded_blas(), ThreadRunner(n_threads) as run:
            try:
                outputs = run([partial(forward, part) for part in slices])
            except ValueError as error:
                # X passed the scale check and the fitted weights are finite: a
                # layer refusing non-finite activations means X is too large for them.
                if not _is_non_finite_error(error):
                    raise
                raise self._activation_overflow(X) from error
        return np.concatenate(outputs, axis=0)

    def _activation_overflow(self, X):
        """The ValueError for data whose activations in the fitted network are not finite."""
        dtype = next(iter(self.parameters_.values())).dtype.name
        with np.errstate(over="ignore", invalid="ignore"):
            magnitude = float(np.max(np.abs(X), initial=0.0))
        return ValueError(
            f"{type(self).__name__}: X is too large for the fitted network in {dtype}: its "
            f"entries reach {magnitude:.3g} in magnitude and the network's activations on it "
            "overflow. Pass X on the scale of the data the model was fitted on (rescale it "
            "as for fit), or fit with dtype='float64'."
        )

    def _prepare_X(self, X):
        check_is_fitted(self)
        return check_sequences(
            self, X, reset=False, dtype=next(iter(self.parameters_.values())).dtype
        )

    # -- one minibatch ---------------------------------------------------------------

    def _sharded(self, shard, n_sequences, parallel):
        """Sum ``shard(part) -> (loss, grads)`` over shards of the minibatch's sequences.

        One shard per thread, in sequence order, so the sum equals the
        one-thread result up to rounding.
        """
        n_shards = self._n_threads(n_sequences)
        # Shard i draws its activations from the buffers of thread i (see
        # _reused_activations); none outside training.
        lent = getattr(self, "_pass_buffers", None)

        def reusing(index, part):
            with reusing_pass_arrays(lent[index] if lent and index < len(lent) else None):
                return shard(part)

        if n_shards == 1:
            return reusing(0, slice(None))
        blocks = even_blocks(n_sequences, n_shards)
        results = run_calls(
            [
                partial(reusing, index, slice(start, stop))
                for index, (start, stop) in enumerate(blocks)
            ],
            parallel,
        )
        return sum(loss for loss, _ in results), _sum_dicts([grads for _, grads in results])

    def _loss_and_gradients(self, X, targets, weights, normaliser, parallel):
        """Loss and gradient of one minibatch; shards of sequences go to threads."""

        def shard(part):
            outputs, cache = self.network_.forward(self.parameters_, X[part])
            loss, grad_outputs = self._loss(outputs, targets[part], weights[part], normaliser)
            return loss, self.network_.backward(self.parameters_, grad_outputs, cache)

        return self._sharded(shard, X.shape[0], parallel)

    def _train_step(self, X, targets, weights, parallel):
        normaliser = float(np.sum(weights, dtype=np.float64))
        if normaliser <= 0:
            return 0.0, 0.0
        loss, grads = self._loss_and_gradients(X, targets, weights, normaliser, parallel)
        if self.max_grad_norm is not None:
            clip_by_global_norm(grads, self.max_grad_norm)
        self._optimizer.step(
            self.parameters_,
            grads,
            learning_rate=self._learning_rate(),
            beta_1=self.beta_1,
            beta_2=self.beta_2,
            epsilon=self.epsilon,
            weight_decay=self.weight_decay,
            decayed=self._decayed_parameters,
        )
        return loss, normaliser

    # -- the loop ----------------------------------------------------------------------

    def _make_network(self, n_features, n_outputs, per_step):
        """The architecture's network: :func:`~skseq.neural._networks._residual.make_network`
        with the model's ``_network_layer`` and ``_network_options()``."""
        return make_network(
            n_features,
            n_outputs,
            self._network_layer,
            per_step=per_step,
            d_model=self.d_model,
            n_layers=self.n_layers,
            **self._network_options(),
        )

    def _new_network(self, n_features):
        """The untrained network for ``n_features`` inputs per step."""
        return self._make_network(n_features, self.n_outputs_, self.per_step_)

    def _validation_score(self, X, targets, weights):
        """The score early stopping maximises, on the held-out sequences."""
        return self._score_outputs(self._network_outputs(X), targets, weights)

    def _describe_loss(self, loss):
        """The epoch's loss as ``verbose`` prints it."""
        return f"loss {loss:.6f}"

    # -- divergence, in the user's terms -------------------------------------------------

    def _parameters_finite(self):
        return all(all_finite(value) for value in self.parameters_.values())

    def _divergence_error(self, X, where, what, *, updated):
        """The ValueError that says what went non-finite and which hyperparameters to change.

        ``X``: the training sequences (for their scale); ``where``: "at epoch
        3, minibatch 2" and the like; ``what``: "the loss", "the weights" or
        "the network's activations"; ``updated``: whether the weights have
        had an update in this fit (if not, the initial weights are to blame).
        """
        name = type(self).__name__
        params = self.get_params(deep=False)
        dtype = next(iter(self.parameters_.values())).dtype.name
        with np.errstate(over="ignore", invalid="ignore"):
            magnitude = float(np.max(np.abs(X), initial=0.0))
        initial = {key: value for key, value in params.items() if key.startswith("init_")}
        given = ", ".join(f"{key}={value!r}" for key, value in initial.items())
        lower = " or ".join(initial)
        if what == "the initial weights":
            return ValueError(
                f"{name}: the initial weights are not finite in {dtype}: "
                + (f"{given} is too large; lower {lower}." if initial else "use dtype='float64'.")
            )
        if not updated:
            suspects = (
                f"the data or the initial weights ({given}) are" if initial else "the data are"
            )
            return ValueError(
                f"{name}: {what} became non-finite in {dtype} in the first training step "
                f"({where}, before any update): {suspects} too large for the network (the "
                f"entries of X reach {magnitude:.3g} in magnitude). "
                + (f"Lower {lower}, rescale" if initial else "Rescale")
                + " X (e.g. with sklearn.preprocessing.StandardScaler) or use dtype='float64'."
            )
        learning_rate, weight_decay = self.learning_rate_init, self.weight_decay
        message = f"{name}: the training diverged {where}: {what} became non-finite in {dtype}. "
        if learning_rate * weight_decay > 1:
            factor = learning_rate * weight_decay
            message += (
                f"With learning_rate_init={learning_rate!r} and weight_decay={weight_decay!r}, "
                f"each step multiplies the decayed weights by 1 - {factor:.3g} "
                "(decoupled weight decay), so they change sign and grow: lower weight_decay "
                f"below 1 / learning_rate_init = {1 / learning_rate:.4g}."
            )
        else:
            advice = [f"Lower learning_rate_init (now {learning_rate!r})"]
            if weight_decay > 0:
                advice.append(f"weight_decay (now {weight_decay!r})")
            # the initial scales the user changed from their defaults
            defaults = inspect.signature(type(self)).parameters
            advice += [
                f"{key} (now {value!r})"
                for key, value in initial.items()
                if key in defaults and value != defaults[key].default
            ]
            message += ", or ".join(advice)
            if self.max_grad_norm is None:
                message += ", or clip the gradients with max_grad_norm"
            message += "."
            if learning_rate > 1:
                message += (
                    " Adam moves every weight by about learning_rate_init per step; values "
                    "near 1e-3 are usual."
                )
        if magnitude > 1e3:
            message += (
                f" The entries of X reach {magnitude:.3g} in magnitude: standardising X "
                "(sklearn.preprocessing.StandardScaler) usually helps."
            )
        return ValueError(message)

    def _learning_rate(self):
        """Adam's step size for the next update (constant here; a model may schedule it)."""
        return self.learning_rate_init

    def _uses_early_stopping(self, n_sequences):
        """Whether :meth:`fit` on ``n_sequences`` sequences holds some out to stop on."""
        return self.early_stopping

    def _patience(self, n_minibatches):
        """Epochs without improvement that meet the stopping rule (``n_minibatches`` per epoch)."""
        return self.n_iter_no_change

    def _continue_after_plateau(self, best_parameters):
        """Called when the stopping rule is met: True to train on instead of stopping.

        ``best_parameters`` are the weights of the best validation score
        (None without early stopping).  Here training stops; a model with a
        learning-rate schedule may lower the rate and go on.
        """
        return False

    def _initialize(self, n_features, dtype):
        self._random_state = check_random_state(self.random_state)
        self.network_ = self._new_network(n_features)
        self.parameters_ = self.network_.init_parameters(self._random_state, dtype)
        self._activation_model = None  # measured for this network by _working_memory
        self._decayed_parameters = tuple(self.network_.decayed_parameters())
        self._optimizer = Adam(self.parameters_)
        self.n_iter_ = 0
        self.t_ = 0
        self.loss_curve_ = []
        self.best_loss_ = np.inf
        self.validation_scores_ = None
        self.best_validation_score_ = None
        self._no_improvement_count = 0

    def _fit(self, X, y, sample_weight, *, incremental, classes=None):
        self._check_params()
        dtype = self._working_dtype()
        first_call = not hasattr(self, "parameters_") or (not incremental and not self.warm_start)
        X = check_sequences(self, X, reset=first_call, dtype=dtype)
        targets, weights = self._prepare_targets(
            X, y, sample_weight, first_call=first_call, classes=classes
        )
        return self._train(X, targets, weights, first_call=first_call, incremental=incremental)

    def _train(self, X, targets, weights, *, first_call, incremental):
        """The epoch loop on validated arrays (the hyperparameters are checked).

        ``X`` is (n_sequences, seq_len, n_features) of the working dtype;
        ``targets`` and ``weights`` have one entry (or row) per sequence and
        are what ``_loss_and_gradients`` receives for a minibatch.
        """
        dtype = self._working_dtype()
        weights = weights.astype(dtype, copy=False)
        if first_call:
            self._initialize(X.shape[2], dtype)
            if not self._parameters_finite():
                raise self._divergence_error(
                    X, "at initialisation", "the initial weights", updated=False
                )
        elif next(iter(self.parameters_.values())).dtype != dtype:
            self.parameters_ = {key: value.astype(dtype) for key, value in self.parameters_.items()}
            self._optimizer.astype(dtype)
        # Updates in this fit so far are _optimizer.n_steps - self._steps_before.
        self._steps_before = self._optimizer.n_steps if first_call else -1

        early_stopping = not incremental and self._uses_early_stopping(X.shape[0])
        best_parameters = None
        if early_stopping:
            X, X_val, targets, targets_val, weights, weights_val = self._validation_split(
                X, targets, weights
            )
            self.validation_scores_ = list(self.validation_scores_ or [])
            self.best_validation_score_ = -np.inf
        else:
            self.best_validation_score_ = None
        if not incremental:
            self._no_improvement_count = 0
            self.best_loss_ = np.inf

        batch_size = min(self.batch_size, X.shape[0])
        self._check_training_memory(X, batch_size)
        n_threads = self._n_threads(batch_size)
        patience = self._patience(-(-X.shape[0] // batch_size))
        started = time.perf_counter()
        converged = False
        with (
            single_threaded_blas(),
            ThreadRunner(n_threads) as parallel,
            self._reused_activations(n_threads),
        ):
            for _ in range(1 if incremental else self.max_iter):
                loss = self._run_epoch(X, targets, weights, batch_size, parallel)
                if not self._parameters_finite():  # after the epoch's last update
                    raise self._divergence_error(
                        X, f"at epoch {self.n_iter_}", "the weights", updated=True
                    )
                message = f"Epoch {self.n_iter_}: {self._describe_loss(loss)}"
                if early_stopping:
                    try:
                        score = self._validation_score(X_val, targets_val, weights_val)
                    except ValueError as error:  # see _run_epoch
                        if not _is_non_finite_error(error):
                            raise
                        raise self._divergence_error(
                            X,
                            f"at epoch {self.n_iter_} (on the validation sequences)",
                            "the network's activations",
                            updated=True,
                        ) from error
                    message += f", validation score {score:.6f}"
                    if self._record_validation_score(score):
                        best_parameters = {k: v.copy() for k, v in self.parameters_.items()}
                else:
                    self._record_training_loss(loss)
                if self.verbose:
                    print(f"{message}, {time.perf_counter() - started:.2f} s", file=sys.stderr)
                if not incremental and self._no_improvement_count >= patience:
                    if self._continue_after_plateau(best_parameters):
                        continue
                    converged = True
                    if self.verbose:
                        criterion = "validation score" if early_stopping else "training loss"
                        print(
                            f"The {criterion} did not improve by more than tol={self.tol} "
                            f"for {patience} consecutive epochs; stopping.",
                            file=sys.stderr,
                        )
                    break
        if early_stopping:
            self.best_loss_ = None
            if best_parameters is not None:
                self.parameters_ = best_parameters
        if not incremental and not converged:
            warn_user(
                f"{type(self).__name__}: reached max_iter={self.max_iter} epochs without "
                "convergence; increase max_iter.",
                ConvergenceWarning,
            )
        return self

    @contextmanager
    def _reused_activations(self, n_threads):
        """Within the block, the training steps keep their activations' arrays.

        One buffers dict per thread (:meth:`_sharded` lends it to the layers
        through :func:`~skseq._buffers.reusing_pass_arrays`): every step makes
        the arrays of the same shapes, and fresh ones would cost a page fault
        per 4 KiB on first touch, about a tenth of a Transformer's epoch.
        They are released when the block exits.
        """
        self._pass_buffers = [{} for _ in range(n_threads)]
        try:
            yield
        finally:
            del self._pass_buffers

    def _run_epoch(self, X, targets, weights, batch_size, parallel):
        """One pass of minibatch updates; returns the weighted mean loss of the pass."""
        n_sequences = X.shape[0]
        if self.shuffle:
            order = self._random_state.permutation(n_sequences)
        else:
            order = np.arange(n_sequences)
        total_loss = 0.0
        total_weight = 0.0
        for start in range(0, n_sequences, batch_size):
            batch = order[start : start + batch_size]
            try:
                loss, weight = self._train_step(X[batch], targets[batch], weights[batch], parallel)
            except ValueError as error:
                # The data, the hyperparameters and the memory were checked before
                # training: a layer's inference function refusing a non-finite
                # input here means the weights or the activations became non-finite.
                if not (_is_non_finite_error(error) or not self._parameters_finite()):
                    raise
                raise self._minibatch_divergence(
                    X, start // batch_size + 1, "the network's activations"
                ) from error
            if not math.isfinite(loss):
                raise self._minibatch_divergence(X, start // batch_size + 1, f"the loss ({loss})")
            total_loss += loss * weight
            total_weight += weight
            if self.verbose >= 2:
                print(f"  minibatch {start // batch_size + 1}: loss {loss:.6f}", file=sys.stderr)
        self.n_iter_ += 1
        self.t_ += n_sequences
        loss = total_loss / total_weight if total_weight > 0 else 0.0
        if not math.isfinite(loss):  # finite minibatch losses whose weighted sum overflows
            raise self._divergence_error(
                X, f"at epoch {self.n_iter_}", f"the loss ({loss})", updated=True
            )
        self.loss_curve_.append(loss)
        return loss

    def _minibatch_divergence(self, X, number, what):
        """:meth:`_divergence_error` for minibatch ``number`` of the epoch under way."""
        if not self._parameters_finite():
            what = "the weights"
        updated = self._steps_before < 0 or self._optimizer.n_steps > self._steps_before
        return self._divergence_error(
            X, f"at epoch {self.n_iter_ + 1}, minibatch {number}", what, updated=updated
        )

    def _record_training_loss(self, loss):
        """Count epochs without a loss decrease of ``tol``."""
        if self.best_loss_ is None:  # the previous fit used early stopping
            self.best_loss_ = np.inf
        if loss > self.best_loss_ - self.tol:
            self._no_improvement_count += 1
        else:
            self._no_improvement_count = 0
        self.best_loss_ = min(self.best_loss_, loss)

    def _record_validation_score(self, score):
        """Count epochs without a score gain of ``tol``; True if ``score`` is the best yet."""
        self.validation_scores_.append(score)
        if score < self.best_validation_score_ + self.tol:
            self._no_improvement_count += 1
        else:
            self._no_improvement_count = 0
        if score > self.best_validation_score_:
            self.best_validation_score_ = score
            return True
        return False

    def _validation_split(self, X, targets, weights):
        n_sequences = X.shape[0]
        n_validation = int(np.ceil(self.validation_fraction * n_sequences))
        if n_validation < 1 or n_sequences - n_validation < 1:
            raise ValueError(
                f"early_stopping needs at least one training and one validation sequence; "
                f"with {n_sequences} sequences and validation_fraction="
                f"{self.validation_fraction} there are not enough."
            )
        stratify = self._stratify_labels(targets)
        indices = np.arange(n_sequences)
        train, validation = train_test_split(
            indices,
            test_size=n_validation,
            random_state=self._random_state,
            stratify=stratify,
        )
        return (
            X[train],
            X[validation],
            targets[train],
            targets[validation],
            weights[train],
            weights[validation],
        )

    def _stratify_labels(self, targets):
        return None
