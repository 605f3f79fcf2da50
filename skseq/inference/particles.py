"""Monte Carlo inference for state-space models with any transition and emission.

Two estimators of the likelihood of a sequence ``x_1..x_T`` under a model
with latent states ``z_t`` that no closed form covers (the deep Markov
model's neural transition and emission; nonlinear and non-Gaussian models):

* :func:`bootstrap_particle_filter` -- sequential Monte Carlo with the
  transition as proposal and systematic resampling at every step; estimates
  the one-step predictive densities ``log p(x_t | x_{1:t-1})`` and gives the
  filtered particles after the last step (for forecasts);
* :func:`importance_sample` -- draws from a proposal ``q(z_{1:T} | x)`` (an
  inference network) and their log importance weights ``log p(x, z) - log
  q(z | x)``, whose log-mean-exp is the importance-weighted lower bound on
  ``log p(x)``.

The model enters as callables on numpy arrays, which receive standard normal
noise drawn here (reparameterised draws): the random numbers come from one
:class:`numpy.random.RandomState` per sequence, in a fixed order, so that the
result of a sequence depends neither on the other sequences nor on how the
caller splits them over threads.  The maths is in the user guide
(:doc:`/user_guide/dmm`, "The importance-weighted bound" and
"Filtering and forecasting").
"""

import math
import numbers
from typing import NamedTuple

import numpy as np
from scipy.special import logsumexp

from ._checks import masked_arrays_checked

__all__ = [
    "bootstrap_particle_filter",
    "ParticleFilterResult",
    "importance_sample",
    "ImportanceSamples",
]


class ParticleFilterResult(NamedTuple):
    """What :func:`bootstrap_particle_filter` returns.

    Attributes
    ----------
    log_predictive : ndarray of shape (n_sequences, n_steps), float64
        ``log p(x_t | x_{1:t-1})`` of every step of every sequence (the log of
        the mean of the particles' likelihoods); 0 beyond a sequence's length.
    final_particles : ndarray of shape (n_sequences, n_particles, n_state)
        The equally weighted particles after the last step of each sequence
        (resampled): draws of the filtering distribution ``p(z_T | x_{1:T})``.
    """

    log_predictive: np.ndarray
    final_particles: np.ndarray


class ImportanceSamples(NamedTuple):
    """What :func:`importance_sample` returns for one sequence.

    Attributes
    ----------
    log_weights : ndarray of shape (n_samples,), float64
        ``log p(x, z^(s)) - log q(z^(s) | x)`` of every draw.
    log_likelihood_bound : float
        ``log (1/S) sum_s exp(log_weights[s])``: a lower bound on ``log p(x)``
        in expectation, tending to it as ``S = n_samples`` grows.
    mean : ndarray or None
        The mean of the draws (in float64) with ``want_mean=True``, else None.
    """

    log_weights: np.ndarray
    log_likelihood_bound: float
    mean: np.ndarray | None


def _positive_int(value, name):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {value!r} of type {type(value).__name__}.")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value!r}.")
    return int(value)


def _random_states(random_states, n_sequences):
    random_states = list(random_states)
    if len(random_states) != n_sequences:
        raise ValueError(
            f"random_states must hold one numpy.random.RandomState per sequence "
            f"({n_sequences}), got {len(random_states)}."
        )
    for state in random_states:
        if not isinstance(state, np.random.RandomState):
            raise TypeError(
                "random_states must be numpy.random.RandomState instances, got "
                f"{type(state).__name__}."
            )
    return random_states


def _checked_output(name, array, shape):
    array = np.asarray(array)
    if array.shape != shape:
        raise ValueError(f"{name} returned an array of shape {array.shape}, expected {shape}.")
    return array


@masked_arrays_checked()
def bootstrap_particle_filter(
    initial,
    transition,
    log_likelihood,
    lengths,
    random_states,
    *,
    n_particles,
    n_state,
    dtype=np.float64,
    n_steps=None,
):
    """Bootstrap particle filter over a batch of sequences, one random stream each.

    At step 0 the particles are drawn from the initial distribution, at
    every later step moved by the transition (the proposal); each particle
    is weighted by its likelihood of ``x_t``, the step's predictive density
    is the mean of the weights, and the particles are resampled
    systematically (one uniform per sequence and step).  The estimate of
    ``log p(x_{1:T})``, the sum of the steps' ``log_predictive``, is unbiased
    on the likelihood scale and exact as ``n_particles`` grows.

    Parameters
    ----------
    initial : callable
        ``initial(noise) -> particles``: draws of ``z_1`` from standard normal
        ``noise`` of shape (n_sequences, n_particles, n_state).
    transition : callable
        ``transition(particles, noise) -> particles``: draws of ``z_t`` given
        ``z_{t-1}``, both of shape (n_sequences, n_particles, n_state).
    log_likelihood : callable
        ``log_likelihood(t, particles) -> log_weights``: ``log p(x_t | z_t)``
        of every particle, shape (n_sequences, n_particles) (any value for a
        sequence shorter than ``t + 1``).
    lengths : array-like of int, shape (n_sequences,)
        Steps of each sequence, each >= 1.
    random_states : sequence of numpy.random.RandomState
        One per sequence; sequence ``s`` draws its noise and its resampling
        uniforms from ``random_states[s]`` only, in step order.
    n_particles : int
        Particles per sequence, >= 1.
    n_state : int
        Dimension of the state (and of the noise), >= 1.
    dtype : float32 or float64, default=float64
        Of the noise handed to ``initial`` and ``transition``.
    n_steps : int, optional
        Columns of ``log_predictive``, at least ``max(lengths)`` (by default
        equal to it): for a caller that concatenates batches.

    Returns
    -------
    result : ParticleFilterResult
        ``log_predictive`` (n_sequences, n_steps) and ``final_particles``
        (n_sequences, n_particles, n_state).

    Raises
    ------
    FloatingPointError
        When every particle of a sequence has a likelihood of zero or NaN at
        some step: the weights cannot be normalised.

    Examples
    --------
    A random walk observed in unit Gaussian noise:

    >>> import numpy as np
    >>> x = np.array([[0.5, 1.0, 0.2]])
    >>> result = bootstrap_particle_filter(
    ...     lambda noise: noise,
    ...     lambda particles, noise: particles + noise,
    ...     lambda t, z: -0.5 * (x[:, t, None] - z[..., 0]) ** 2 - 0.5 * np.log(2 * np.pi),
    ...     [3], [np.random.RandomState(0)], n_particles=500, n_state=1)
    >>> result.log_predictive.shape, result.final_particles.shape
    ((1, 3), (1, 500, 1))
    """
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or lengths.size == 0 or lengths.dtype.kind not in "iu":
        raise ValueError(
            f"lengths must be a non-empty 1-D array of integers, got {lengths!r}."
        )
    if np.any(lengths < 1):
        raise ValueError(f"every sequence needs at least one step, got lengths {lengths!r}.")
    n_sequences = lengths.size
    streams = _random_states(random_states, n_sequences)
    n_particles = _positive_int(n_particles, "n_particles")
    m = _positive_int(n_state, "n_state")
    dtype = np.dtype(dtype)
    longest = int(lengths.max())
    if n_steps is None:
        n_steps = longest
    elif _positive_int(n_steps, "n_steps") < longest:
        raise ValueError(f"n_steps={n_steps} is shorter than the longest sequence ({longest}).")
    particle_shape = (n_sequences, n_particles, m)

    def normal_draws(active):
        draws = np.zeros(particle_shape, dtype=dtype)
        for s in np.flatnonzero(active):
            draws[s] = streams[s].standard_normal((n_particles, m))
        return draws

    everyone = np.ones(n_sequences, dtype=bool)
    particles = _checked_output("initial", initial(normal_draws(everyone)), particle_shape)
    final = np.empty_like(particles)
    log_predictive = np.zeros((n_sequences, n_steps))
    rows = np.arange(n_sequences)[:, None]
    for t in range(longest):
        active = lengths > t
        if t > 0:
            moved = transition(particles, normal_draws(active))
            moved = _checked_output("transition", moved, particle_shape)
            particles = np.where(active[:, None, None], moved, particles)
        log_weights = _checked_output(
            "log_likelihood", log_likelihood(t, particles), (n_sequences, n_particles)
        )
        largest = log_weights.max(axis=1, keepdims=True)
        degenerate = active & ~np.isfinite(largest[:, 0])
        if np.any(degenerate) or np.any(np.isnan(log_weights[active])):
            s = int(np.flatnonzero(degenerate | np.isnan(log_weights).any(axis=1) & active)[0])
            raise FloatingPointError(
                f"the particle weights of sequence {s} at step {t} cannot be normalised: every "
                "likelihood is zero, or one is NaN."
            )
        log_predictive[:, t] = np.where(
            active, logsumexp(log_weights, axis=1) - math.log(n_particles), 0.0
        )
        # Systematic resampling of all sequences at once: sequence r's cumulative
        # weights are shifted into (r, r + 1], so one sorted search serves all.
        weights = np.exp(log_weights - largest)
        cumulative = np.cumsum(weights, axis=1)
        cumulative /= cumulative[:, -1:]
        offsets = np.array(
            [streams[s].uniform() if active[s] else 0.0 for s in range(n_sequences)]
        )
        positions = (offsets[:, None] + np.arange(n_particles)) / n_particles
        found = np.searchsorted((cumulative + rows).ravel(), (positions + rows).ravel())
        chosen = np.minimum(
            found.reshape(n_sequences, n_particles) - rows * n_particles, n_particles - 1
        )
        particles = np.where(active[:, None, None], particles[rows, chosen], particles)
        ending = lengths == t + 1
        final[ending] = particles[ending]
    return ParticleFilterResult(log_predictive, final)


@masked_arrays_checked()
def importance_sample(
    propose, random_state, *, n_samples, noise_shape, block_size, dtype=np.float64, want_mean=False
):
    """Draws of a reparameterised proposal and their log importance weights, for one sequence.

    The ``n_samples`` draws go through ``propose`` in blocks of at most
    ``block_size`` (which bounds memory; the draws do not depend on it):
    each block's standard normal noise, of shape ``(size,) + noise_shape``,
    comes from ``random_state``.

    Parameters
    ----------
    propose : callable
        ``propose(noise) -> (log_weights, draws)``: the draws ``z = g(noise)``
        of the proposal and their ``log p(x, z) - log q(z | x)``, of shape
        ``(size,)``; ``draws`` (shape ``(size, ...)``) is read only with
        ``want_mean``.
    random_state : numpy.random.RandomState
    n_samples : int
        Draws, >= 1.
    noise_shape : tuple of int
        The shape of one draw's noise.
    block_size : int
        Draws per call of ``propose``, >= 1.
    dtype : float32 or float64, default=float64
        Of the noise.
    want_mean : bool, default=False
        Also return the mean of the draws.

    Returns
    -------
    result : ImportanceSamples
        ``log_weights``, ``log_likelihood_bound`` (their log-mean-exp) and
        ``mean``.

    Raises
    ------
    FloatingPointError
        When the bound is not finite (``propose`` gave non-finite weights).

    Examples
    --------
    ``x = 1`` under ``z ~ N(0, 1)``, ``x | z ~ N(z, 1)``, with the exact
    posterior ``N(1/2, 1/2)`` as proposal: every weight is ``log p(x)``.

    >>> import numpy as np
    >>> from scipy.stats import norm
    >>> def propose(noise):
    ...     z = 0.5 + np.sqrt(0.5) * noise[:, 0]
    ...     log_joint = norm.logpdf(z) + norm.logpdf(1.0, loc=z)
    ...     return log_joint - norm.logpdf(z, 0.5, np.sqrt(0.5)), z
    >>> result = importance_sample(propose, np.random.RandomState(0), n_samples=4,
    ...                            noise_shape=(1,), block_size=3)
    >>> bool(np.isclose(result.log_likelihood_bound, norm.logpdf(1.0, scale=np.sqrt(2))))
    True
    """
    if not isinstance(random_state, np.random.RandomState):
        raise TypeError(
            f"random_state must be a numpy.random.RandomState, got {type(random_state).__name__}."
        )
    n_samples = _positive_int(n_samples, "n_samples")
    block_size = _positive_int(block_size, "block_size")
    noise_shape = tuple(int(size) for size in noise_shape)
    dtype = np.dtype(dtype)
    log_weights = np.empty(n_samples)
    total = None
    for start in range(0, n_samples, block_size):
        size = min(block_size, n_samples - start)
        noise = random_state.standard_normal((size,) + noise_shape).astype(dtype)
        block_weights, draws = propose(noise)
        log_weights[start : start + size] = _checked_output("propose", block_weights, (size,))
        if want_mean:
            block_sum = np.asarray(draws).sum(axis=0, dtype=np.float64)
            total = block_sum if total is None else total + block_sum
    bound = float(logsumexp(log_weights) - math.log(n_samples))
    if not math.isfinite(bound):
        raise FloatingPointError(
            "The importance-weighted bound is not finite: the proposal's log weights are "
            "not finite."
        )
    return ImportanceSamples(log_weights, bound, None if total is None else total / n_samples)
