"""Tests of skseq.inference.particles: the bootstrap particle filter and the importance sampler.

Against exact answers of a scalar linear-Gaussian model (its Kalman filter
in a few lines of numpy), with Monte Carlo tolerances of several standard
errors at the seeds used; the random streams (one per sequence, independent
of the batch and of the blocking); and the checks of the arguments.
"""

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.stats import norm

import skseq.inference
from skseq.inference import (
    ImportanceSamples,
    ParticleFilterResult,
    bootstrap_particle_filter,
    importance_sample,
)

# A random walk z_t = z_{t-1} + N(0, Q), z_1 ~ N(0, 1), observed as x_t = z_t + N(0, R).
Q, R = 0.5, 0.8


def random_walk_model(x):
    """The filter's three callables for the sequences of ``x`` (n_sequences, n_steps)."""
    return (
        lambda noise: noise,
        lambda particles, noise: particles + math.sqrt(Q) * noise,
        lambda t, z: norm.logpdf(x[:, t, None], loc=z[..., 0], scale=math.sqrt(R)),
    )


def exact_log_predictive(x):
    """log p(x_t | x_{1:t-1}) of one sequence by the scalar Kalman filter."""
    mean, variance, out = 0.0, 1.0, []
    for t, value in enumerate(x):
        if t > 0:
            variance += Q
        out.append(norm.logpdf(value, loc=mean, scale=math.sqrt(variance + R)))
        gain = variance / (variance + R)
        mean, variance = mean + gain * (value - mean), (1 - gain) * variance
    return np.array(out), mean, variance


def test_exported():
    for name in ("bootstrap_particle_filter", "importance_sample"):
        assert name in skseq.inference.__all__


def test_filter_matches_the_kalman_filter():
    rng = np.random.RandomState(0)
    x = np.cumsum(rng.normal(size=(2, 12)), axis=1)
    lengths = np.array([12, 7])
    result = bootstrap_particle_filter(
        *random_walk_model(x),
        lengths,
        [np.random.RandomState(seed) for seed in (1, 2)],
        n_particles=20000,
        n_state=1,
    )
    assert isinstance(result, ParticleFilterResult)
    assert result.log_predictive.shape == (2, 12) and result.final_particles.shape == (2, 20000, 1)
    for s, length in enumerate(lengths):
        exact, mean, variance = exact_log_predictive(x[s, :length])
        # 20000 particles: a few hundredths at surprising steps (the largest here, 0.021)
        assert_allclose(result.log_predictive[s, :length], exact, atol=0.05)
        assert_array_equal(result.log_predictive[s, length:], 0.0)
        final = result.final_particles[s, :, 0]
        assert abs(final.mean() - mean) < 0.03 and abs(final.var() - variance) < 0.03


def test_a_sequence_depends_only_on_its_own_stream():
    rng = np.random.RandomState(3)
    x = rng.normal(size=(3, 6))
    lengths = np.array([6, 2, 4])

    def run(rows, n_steps=None):
        return bootstrap_particle_filter(
            *random_walk_model(x[rows]),
            lengths[rows],
            [np.random.RandomState(10 + row) for row in rows],
            n_particles=50,
            n_state=1,
            n_steps=n_steps,
        )

    together = run([0, 1, 2])
    for row in range(3):
        alone = run([row], n_steps=6)
        assert_array_equal(alone.log_predictive[0], together.log_predictive[row])
        assert_array_equal(alone.final_particles[0], together.final_particles[row])
    assert run([1]).log_predictive.shape == (1, 2)  # n_steps defaults to the longest


def test_filter_checks_its_arguments():
    x = np.zeros((2, 3))
    model = random_walk_model(x)
    streams = [np.random.RandomState(0), np.random.RandomState(1)]
    common = dict(n_particles=4, n_state=1)
    with pytest.raises(ValueError, match="one numpy.random.RandomState per sequence"):
        bootstrap_particle_filter(*model, [3, 3], streams[:1], **common)
    with pytest.raises(TypeError, match="RandomState instances"):
        bootstrap_particle_filter(*model, [3, 3], [0, 1], **common)
    with pytest.raises(ValueError, match="at least one step"):
        bootstrap_particle_filter(*model, [3, 0], streams, **common)
    with pytest.raises(ValueError, match="1-D array of integers"):
        bootstrap_particle_filter(*model, [3.0, 2.0], streams, **common)
    with pytest.raises(ValueError, match="n_particles must be >= 1"):
        bootstrap_particle_filter(*model, [3, 3], streams, n_particles=0, n_state=1)
    with pytest.raises(ValueError, match="shorter than the longest"):
        bootstrap_particle_filter(*model, [3, 3], streams, n_steps=2, **common)
    with pytest.raises(ValueError, match=r"log_likelihood returned an array of shape \(2,\)"):
        bootstrap_particle_filter(
            model[0], model[1], lambda t, z: z[:, 0, 0], [3, 3], streams, **common
        )


def test_filter_is_loud_when_the_weights_cannot_be_normalised():
    x = np.zeros((2, 3))
    initial, transition, _ = random_walk_model(x)

    def impossible_at_step_1(t, z):
        log_weights = np.zeros(z.shape[:2])
        if t == 1:
            log_weights[1] = -np.inf
        return log_weights

    with pytest.raises(FloatingPointError, match="sequence 1 at step 1"):
        bootstrap_particle_filter(
            initial,
            transition,
            impossible_at_step_1,
            [3, 3],
            [np.random.RandomState(0), np.random.RandomState(1)],
            n_particles=4,
            n_state=1,
        )


def posterior_proposal(x):
    """For z ~ N(0, 1), x | z ~ N(z, 1): draws of the exact posterior N(x/2, 1/2) and weights."""

    def propose(noise):
        z = x / 2 + math.sqrt(0.5) * noise[:, 0]
        log_joint = norm.logpdf(z) + norm.logpdf(x, loc=z)
        return log_joint - norm.logpdf(z, x / 2, math.sqrt(0.5)), z

    return propose


def test_importance_sample_with_the_exact_posterior_gives_the_likelihood():
    result = importance_sample(
        posterior_proposal(1.3),
        np.random.RandomState(0),
        n_samples=5,
        noise_shape=(1,),
        block_size=2,
        want_mean=True,
    )
    assert isinstance(result, ImportanceSamples)
    exact = norm.logpdf(1.3, scale=math.sqrt(2))
    assert_allclose(result.log_weights, exact, rtol=1e-12)
    assert_allclose(result.log_likelihood_bound, exact, rtol=1e-12)
    # the mean of the five draws of N(0.65, 1/2)
    draws = 0.65 + math.sqrt(0.5) * np.random.RandomState(0).standard_normal(5)
    assert_allclose(result.mean, draws.mean(), rtol=1e-12)


def test_importance_sample_does_not_depend_on_the_blocks():
    def propose(noise):
        return noise.sum(axis=(1, 2)), noise

    results = [
        importance_sample(
            propose,
            np.random.RandomState(4),
            n_samples=7,
            noise_shape=(3, 2),
            block_size=block,
            want_mean=True,
        )
        for block in (1, 3, 7, 100)
    ]
    for result in results[1:]:
        assert_array_equal(result.log_weights, results[0].log_weights)
        assert result.log_likelihood_bound == results[0].log_likelihood_bound
        assert_allclose(result.mean, results[0].mean, rtol=1e-14)
    assert results[0].mean.shape == (3, 2)
    bound = importance_sample(
        propose, np.random.RandomState(4), n_samples=7, noise_shape=(3, 2), block_size=3
    )
    assert bound.mean is None
    assert_allclose(
        bound.log_likelihood_bound,
        np.log(np.mean(np.exp(results[0].log_weights))),
        rtol=1e-12,
    )


def test_importance_sample_checks_its_arguments():
    propose = posterior_proposal(0.0)
    with pytest.raises(TypeError, match="numpy.random.RandomState"):
        importance_sample(propose, 0, n_samples=2, noise_shape=(1,), block_size=1)
    with pytest.raises(ValueError, match="n_samples must be >= 1"):
        importance_sample(
            propose, np.random.RandomState(0), n_samples=0, noise_shape=(1,), block_size=1
        )
    with pytest.raises(ValueError, match="propose returned an array of shape"):
        importance_sample(
            lambda noise: (noise, noise),
            np.random.RandomState(0),
            n_samples=2,
            noise_shape=(1,),
            block_size=2,
        )
    with pytest.raises(FloatingPointError, match="not finite"):
        importance_sample(
            lambda noise: (np.full(noise.shape[0], np.nan), noise),
            np.random.RandomState(0),
            n_samples=2,
            noise_shape=(1,),
            block_size=2,
        )
