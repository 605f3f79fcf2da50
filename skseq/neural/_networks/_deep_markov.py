"""The deep Markov model's network: generative model, inference network, bounds and gradients.

Shapes: ``B`` sequences padded to ``T`` steps, ``p`` features, latent
dimension ``m``.  The maths is the user guide's :doc:`/user_guide/dmm`:

* generative model: ``z_1 ~ N(mu_0, diag sigma_0^2)``; a gated transition
  ``z_t | z_{t-1} ~ N(mu(z_{t-1}), diag sigma(z_{t-1})^2)`` with
  ``mu = (1 - g) * (W z + b) + g * h``, ``g = sigmoid(MLP_g(z))``,
  ``h = MLP_h(z)``, ``sigma = softplus(W_s relu(h) + b_s)``; an emission
  ``N(MLP_x(z_t), diag s^2)`` or ``Bernoulli(sigmoid(MLP_x(z_t)))``;
* inference network: a backward Elman RNN ``r_t = tanh(W_x x_t + W_h r_{t+1}
  + b)`` (run by :func:`skseq.inference.rnn.elman_rnn` on each sequence
  reversed in time), the combiner ``c_t = (tanh(W_c z_{t-1} + b_c) + r_t) / 2``
  and ``q(z_t | z_{t-1}, x_{t:T}) = N(W_mu c_t + b_mu, diag softplus(W_sigma
  c_t + b_sigma)^2)``; reparameterised draws ``z_t = mu_q + sigma_q * eps_t``
  forward in time.

Padding: sequence ``b`` occupies steps ``0 .. length_b - 1``.  Its reversed
copy for the backward RNN is taken within its own length (``x[b, length_b - 1
- s]``), so the RNN reads the padding only after the real steps and nothing
of a sequence depends on the padding or on the other sequences of the batch.
Unobserved entries (``observed == 0``: padding and missing values) leave the
emission term; padded steps leave the KL term.

Every gradient is written out by hand (the user guide derives them);
``tests/neural/test_deep_markov.py`` checks them by finite differences with fixed noise and
against PyTorch's autograd.
"""

import math
from typing import NamedTuple

import numpy as np
from scipy.special import expit

from ...inference.rnn import elman_rnn, elman_rnn_backward
from ._layers import Linear, inverse_softplus, softplus

__all__ = ["DeepMarkovNetwork", "TransitionCache", "MIN_SCALE", "reversal_index"]

# Floor added to every standard deviation (latent ones, and emission ones in
# units of the standardised data): keeps log(sigma) and 1 / sigma^2 finite
# whatever the pre-activation, so a bound is never -inf or NaN.
MIN_SCALE = 1e-3
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def reversal_index(lengths, n_steps):
    """Indices that reverse each sequence within its own length, padding left in place.

    ``index[b, s] = lengths[b] - 1 - s`` for ``s < lengths[b]``, else ``s``;
    it is its own inverse.
    """
    steps = np.arange(n_steps)[None, :]
    lengths = np.asarray(lengths)[:, None]
    return np.where(steps < lengths, lengths - 1 - steps, steps)


def _gather_steps(array, index):
    """``array[b, index[b, s]]`` for every ``b, s`` (array of shape (B, T, ...))."""
    return np.take_along_axis(array, index[:, :, None], axis=1)


def _relu(x):
    return np.maximum(x, 0)


def _scale_of(pre_activation):
    return softplus(pre_activation) + MIN_SCALE


def _relu_mlp_backward(hidden_layer, output_layer, parameters, d_out, cache, grads):
    """Back through ``output_layer(relu(hidden_layer(z)))``: returns d_z, adds to ``grads``.

    ``cache`` is the hidden pre-activation and the two layers' caches.
    """
    pre_activation, hidden_cache, output_cache = cache
    d_hidden, g = output_layer.backward(parameters, d_out, output_cache)
    grads.update(g)
    d_z, g = hidden_layer.backward(parameters, d_hidden * (pre_activation > 0), hidden_cache)
    grads.update(g)
    return d_z


class TransitionCache(NamedTuple):
    """What the transition's backward pass needs from its forward pass.

    The gate ``g = sigmoid(MLP_g(z))`` (``gate_pre``: its hidden layer before the
    ReLU), the proposal ``h = MLP_h(z)`` (``proposal_pre`` likewise), the linear
    map ``W z + b`` and the scale's pre-activation, with the caches of their
    linear layers.
    """

    gate_pre: np.ndarray
    gate_hidden_cache: object
    gate_output_cache: object
    gate: np.ndarray
    proposal_pre: np.ndarray
    proposal_hidden_cache: object
    proposal_output_cache: object
    proposal: np.ndarray
    linear_cache: object
    linear: np.ndarray
    scale_cache: object
    scale_pre: np.ndarray


class DeepMarkovNetwork:
    """Parameters and passes of the deep Markov model (no state: parameters are passed in).

    Parameters
    ----------
    n_features : int
        ``p``, features per step.
    n_components : int
        ``m``, latent dimension.
    emission : {"gaussian", "bernoulli"}
    transition_hidden_size, emission_hidden_size, inference_hidden_size : int
        Widths of the transition MLPs (gate and proposal), of the emission
        MLP, and of the inference RNN and combiner.
    """

    def __init__(
        self,
        n_features,
        n_components,
        *,
        emission,
        transition_hidden_size,
        emission_hidden_size,
        inference_hidden_size,
    ):
        self.n_features = n_features
        self.n_components = n_components
        self.emission = emission
        self.inference_hidden_size = inference_hidden_size
        m, p = n_components, n_features
        self.gate_hidden = Linear("gate.hidden", m, transition_hidden_size)
        self.gate_output = Linear("gate.output", transition_hidden_size, m)
        self.proposal_hidden = Linear("proposal.hidden", m, transition_hidden_size)
        self.proposal_output = Linear("proposal.output", transition_hidden_size, m)
        self.transition_linear = Linear("transition.linear", m, m)
        self.transition_scale = Linear("transition.scale", m, m)
        self.emission_hidden = Linear("emission.hidden", m, emission_hidden_size)
        self.emission_output = Linear("emission.output", emission_hidden_size, p)
        self.combiner_hidden = Linear("combiner.hidden", m, inference_hidden_size)
        self.combiner_output = Linear("combiner.output", inference_hidden_size, 2 * m)
        self.layers = [
            self.gate_hidden,
            self.gate_output,
            self.proposal_hidden,
            self.proposal_output,
            self.transition_linear,
            self.transition_scale,
            self.emission_hidden,
            self.emission_output,
            self.combiner_hidden,
            self.combiner_output,
        ]

    # -- parameters ----------------------------------------------------------------

    def init_parameters(self, random_state, dtype):
        """Fresh parameters: the transition starts near a random walk (``W = I``, gate closed)."""
        m, p, n_hidden = self.n_components, self.n_features, self.inference_hidden_size
        parameters = {}
        for layer in self.layers:
            parameters.update(layer.init_parameters(random_state, dtype))
        parameters["transition.linear.weight"] = np.eye(m, dtype=dtype)
        # The gate starts mostly closed (sigmoid(-2) = 0.12): mostly the linear proposal.
        parameters["gate.output.bias"][:] = -2.0
        parameters["transition.scale.bias"][:] = inverse_softplus(0.5)
        bound = 1.0 / math.sqrt(n_hidden)
        parameters["rnn.W_x"] = random_state.uniform(-bound, bound, (n_hidden, p)).astype(dtype)
        parameters["rnn.W_h"] = random_state.uniform(-bound, bound, (n_hidden, n_hidden)).astype(
            dtype
        )
        parameters["rnn.b"] = np.zeros(n_hidden, dtype=dtype)
        parameters["combiner.z0"] = np.zeros(m, dtype=dtype)
        parameters["initial.mean"] = np.zeros(m, dtype=dtype)
        parameters["initial.scale"] = np.full(m, inverse_softplus(1.0 - MIN_SCALE), dtype=dtype)
        if self.emission == "gaussian":
            parameters["emission.scale"] = np.full(
                p, inverse_softplus(0.5 - MIN_SCALE), dtype=dtype
            )
        return parameters

    def decayed_parameters(self):
        """Weight matrices (not biases, scales or initial values)."""
        keys = [key for layer in self.layers for key in layer.decayed_parameters()]
        return keys + ["rnn.W_x", "rnn.W_h"]

    # -- the generative model's pieces, vectorised over leading axes -----------------

    def transition(self, parameters, z):
        """Mean and standard deviation of p(z_t | z_{t-1} = z); returns (mean, scale, cache)."""
        gate_pre, gate_hidden_cache = self.gate_hidden.forward(parameters, z)
        gate_hidden = _relu(gate_pre)
        gate_out, gate_output_cache = self.gate_output.forward(parameters, gate_hidden)
        gate = expit(gate_out)
        proposal_pre, proposal_hidden_cache = self.proposal_hidden.forward(parameters, z)
        proposal_hidden = _relu(proposal_pre)
        proposal, proposal_output_cache = self.proposal_output.forward(parameters, proposal_hidden)
        linear, linear_cache = self.transition_linear.forward(parameters, z)
        mean = linear + gate * (proposal - linear)
        scale_pre, scale_cache = self.transition_scale.forward(parameters, _relu(proposal))
        scale = _scale_of(scale_pre)
        cache = TransitionCache(
            gate_pre=gate_pre,
            gate_hidden_cache=gate_hidden_cache,
            gate_output_cache=gate_output_cache,
            gate=gate,
            proposal_pre=proposal_pre,
            proposal_hidden_cache=proposal_hidden_cache,
            proposal_output_cache=proposal_output_cache,
            proposal=proposal,
            linear_cache=linear_cache,
            linear=linear,
            scale_cache=scale_cache,
            scale_pre=scale_pre,
        )
        return mean, scale, cache

    def transition_backward(self, parameters, d_mean, d_scale, cache):
        """Gradients of the transition given its :class:`TransitionCache`; returns (d_z, grads)."""
        gate, proposal = cache.gate, cache.proposal
        grads = {}
        d_relu_proposal, g = self.transition_scale.backward(
            parameters, d_scale * expit(cache.scale_pre), cache.scale_cache
        )
        grads.update(g)
        d_proposal = d_mean * gate + d_relu_proposal * (proposal > 0)
        d_gate_out = d_mean * (proposal - cache.linear) * gate * (1 - gate)
        d_linear = d_mean * (1 - gate)
        gate_caches = (cache.gate_pre, cache.gate_hidden_cache, cache.gate_output_cache)
        d_z = _relu_mlp_backward(
            self.gate_hidden, self.gate_output, parameters, d_gate_out, gate_caches, grads
        )
        proposal_caches = (
            cache.proposal_pre,
            cache.proposal_hidden_cache,
            cache.proposal_output_cache,
        )
        proposal_layers = (self.proposal_hidden, self.proposal_output)
        d_z_proposal = _relu_mlp_backward(
            *proposal_layers, parameters, d_proposal, proposal_caches, grads
        )
        d_z_linear, g = self.transition_linear.backward(parameters, d_linear, cache.linear_cache)
        grads.update(g)
        return d_z + d_z_proposal + d_z_linear, grads

    def emission_outputs(self, parameters, z):
        """The emission MLP: means (Gaussian) or logits (Bernoulli) of x_t; returns (out, cache)."""
        hidden_pre, hidden_cache = self.emission_hidden.forward(parameters, z)
        out, output_cache = self.emission_output.forward(parameters, _relu(hidden_pre))
        return out, (hidden_pre, hidden_cache, output_cache)

    def emission_backward(self, parameters, d_out, cache):
        hidden_pre, hidden_cache, output_cache = cache
        d_hidden, grads = self.emission_output.backward(parameters, d_out, output_cache)
        d_z, g = self.emission_hidden.backward(
            parameters, d_hidden * (hidden_pre > 0), hidden_cache
        )
        grads.update(g)
        return d_z, grads

    def emission_log_density(self, parameters, x, observed, out):
        """log p(x | z) entry by entry (zero where not observed) and what its gradient needs."""
        if self.emission == "gaussian":
            scale = _scale_of(parameters["emission.scale"])
            standardised = (x - out) / scale
            log_density = -0.5 * standardised * standardised - np.log(scale) - _HALF_LOG_2PI
            return log_density * observed, (standardised, scale)
        log_density = x * out - softplus(out)
        return log_density * observed, None

    def emission_log_density_backward(self, parameters, x, observed, out, aux, d_log_density):
        """d/d out and the scale's gradient of sum(d_log_density * log p(x | z))."""
        weights = d_log_density * observed
        if self.emission == "gaussian":
            standardised, scale = aux
            d_out = weights * standardised / scale
            d_scale = (
                np.sum(
                    (weights * (standardised * standardised - 1)).reshape(-1, x.shape[-1]), axis=0
                )
                / scale
            )
            raw = parameters["emission.scale"]
            return d_out, {"emission.scale": d_scale * expit(raw)}
        return weights * (x - expit(out)), {}

    # -- the inference network --------------------------------------------------------

    def _rnn_weights(self, parameters):
        return parameters["rnn.W_x"], parameters["rnn.W_h"], parameters["rnn.b"]

    def backward_states(self, parameters, inputs, index):
        """r_t of every step (the backward RNN over each sequence reversed in its length)."""
        reversed_inputs = _gather_steps(inputs, index)
        hidden, _ = elman_rnn(reversed_inputs, *self._rnn_weights(parameters))
        return _gather_steps(hidden, index), (reversed_inputs, hidden)

    def posterior_samples(self, parameters, states, noise):
        """Draw z_1..z_T from q, forward in time; returns (z, cache).

        ``states`` are the backward RNN's r_t, ``noise`` the standard normal
        eps_t of shape (B, T, m).
        """
        batch, n_steps, m = noise.shape
        W_c = parameters["combiner.hidden.weight"]
        b_c = parameters["combiner.hidden.bias"]
        W_o = parameters["combiner.output.weight"]
        b_o = parameters["combiner.output.bias"]
        dtype = noise.dtype
        z = np.empty((batch, n_steps, m), dtype=dtype)
        combined_tanh = np.empty((batch, n_steps, W_c.shape[1]), dtype=dtype)
        combined = np.empty_like(combined_tanh)
        outputs = np.empty((batch, n_steps, 2 * m), dtype=dtype)
        z_previous = np.broadcast_to(parameters["combiner.z0"], (batch, m))
        for t in range(n_steps):
            np.tanh(z_previous @ W_c + b_c, out=combined_tanh[:, t])
            np.add(combined_tanh[:, t], states[:, t], out=combined[:, t])
            combined[:, t] *= 0.5
            np.matmul(combined[:, t], W_o, out=outputs[:, t])
            outputs[:, t] += b_o
            z[:, t] = outputs[:, t, :m] + _scale_of(outputs[:, t, m:]) * noise[:, t]
            z_previous = z[:, t]
        q_mean = outputs[..., :m]
        q_scale = _scale_of(outputs[..., m:])
        return z, (combined_tanh, combined, outputs, q_mean, q_scale)

    def posterior_backward(self, parameters, z, noise, d_z, d_q_mean, d_q_scale, cache):
        """Back through the draws of q: returns (d_states, grads).

        ``d_z``, ``d_q_mean`` and ``d_q_scale`` are the gradients reaching
        z_t, mu_q and sigma_q other than through the recursion itself.
        """
        combined_tanh, combined, outputs, _, _ = cache
        batch, n_steps, m = z.shape
        W_c = parameters["combiner.hidden.weight"]
        W_o = parameters["combiner.output.weight"]
        d_outputs = np.empty_like(outputs)
        d_pre = np.empty_like(combined_tanh)
        d_states = np.empty_like(combined_tanh)
        slope = expit(outputs[..., m:])
        carried = np.zeros((batch, m), dtype=z.dtype)
        for t in range(n_steps - 1, -1, -1):
            d_z_t = d_z[:, t] + carried
            np.add(d_q_mean[:, t], d_z_t, out=d_outputs[:, t, :m])
            np.multiply(d_z_t, noise[:, t], out=d_outputs[:, t, m:])
            d_outputs[:, t, m:] += d_q_scale[:, t]
            d_outputs[:, t, m:] *= slope[:, t]
            d_combined = d_outputs[:, t] @ W_o.T
            d_combined *= 0.5
            d_states[:, t] = d_combined
            np.multiply(d_combined, 1 - combined_tanh[:, t] ** 2, out=d_pre[:, t])
            carried = d_pre[:, t] @ W_c.T
        flat_pre = d_pre.reshape(-1, d_pre.shape[-1])
        previous = np.concatenate(
            [np.broadcast_to(parameters["combiner.z0"], (batch, 1, m)), z[:, :-1]], axis=1
        )
        flat_outputs = d_outputs.reshape(-1, 2 * m)
        grads = {
            "combiner.hidden.weight": previous.reshape(-1, m).T @ flat_pre,
            "combiner.hidden.bias": flat_pre.sum(axis=0),
            "combiner.output.weight": combined.reshape(-1, combined.shape[-1]).T @ flat_outputs,
            "combiner.output.bias": flat_outputs.sum(axis=0),
            "combiner.z0": carried.sum(axis=0),
        }
        return d_states, grads

    # -- everything together -------------------------------------------------------

    def forward(self, parameters, inputs, observed, step_mask, noise):
        """One pass of the model on a batch with fixed noise; returns a cache of everything.

        Parameters
        ----------
        inputs : ndarray of shape (B, T, p)
            The data (standardised for Gaussian emissions), 0 where not observed.
        observed : ndarray of shape (B, T, p)
            1 where an entry is observed, 0 for missing entries and padding.
        step_mask : ndarray of shape (B, T)
            1 on the steps of each sequence, 0 on its padding (a prefix of ones).
        noise : ndarray of shape (B, T, m)
            Standard normal draws eps_t of the reparameterisation.
        """
        lengths = np.count_nonzero(step_mask, axis=1)
        index = reversal_index(lengths, inputs.shape[1])
        states, rnn_cache = self.backward_states(parameters, inputs, index)
        z, q_cache = self.posterior_samples(parameters, states, noise)
        _, _, _, q_mean, q_scale = q_cache
        prior_mean, prior_scale, transition_cache = self.transition(parameters, z[:, :-1])
        initial_mean = parameters["initial.mean"]
        initial_scale = _scale_of(parameters["initial.scale"])
        p_mean = np.concatenate(
            [np.broadcast_to(initial_mean, (z.shape[0], 1, z.shape[2])), prior_mean], axis=1
        )
        p_scale = np.concatenate(
            [np.broadcast_to(initial_scale, (z.shape[0], 1, z.shape[2])), prior_scale], axis=1
        )
        out, emission_cache = self.emission_outputs(parameters, z)
        log_density, emission_aux = self.emission_log_density(parameters, inputs, observed, out)
        return {
            "inputs": inputs,
            "observed": observed,
            "step_mask": step_mask,
            "noise": noise,
            "index": index,
            "rnn": rnn_cache,
            "z": z,
            "q": q_cache,
            "q_mean": q_mean,
            "q_scale": q_scale,
            "p_mean": p_mean,
            "p_scale": p_scale,
            "transition": transition_cache,
            "out": out,
            "emission": emission_cache,
            "emission_aux": emission_aux,
            "log_density": log_density,
        }

    @staticmethod
    def kl_terms(cache):
        """KL(q(z_t | .) || p(z_t | z_{t-1})) of every step, shape (B, T) (0 on padding)."""
        q_mean, q_scale = cache["q_mean"], cache["q_scale"]
        p_mean, p_scale = cache["p_mean"], cache["p_scale"]
        ratio = q_scale / p_scale
        difference = (q_mean - p_mean) / p_scale
        kl = 0.5 * (ratio * ratio + difference * difference - 1) - np.log(ratio)
        return kl.sum(axis=-1) * cache["step_mask"]

    @staticmethod
    def reconstruction_terms(cache):
        """E_q log p(x_t | z_t) of every step at the drawn z, shape (B, T)."""
        return cache["log_density"].sum(axis=-1)

    @staticmethod
    def log_weights(cache):
        """log p(x, z) - log q(z | x) of each sequence at the drawn z, shape (B,), float64."""
        z, q_scale = cache["z"], cache["q_scale"]
        p_mean, p_scale = cache["p_mean"], cache["p_scale"]
        standardised = (z - p_mean) / p_scale
        noise = cache["noise"]
        # log N(z; p) - log N(z; q), with (z - mu_q) / sigma_q = eps exactly.
        log_ratio = 0.5 * (noise * noise - standardised * standardised) + np.log(q_scale / p_scale)
        per_step = log_ratio.sum(axis=-1) * cache["step_mask"] + cache["log_density"].sum(axis=-1)
        return per_step.sum(axis=1, dtype=np.float64)

    def backward(self, parameters, cache, d_reconstruction, d_kl):
        """Gradients of ``d_reconstruction * sum(reconstruction) + d_kl * sum(KL)``.

        ``d_reconstruction`` and ``d_kl`` are numbers (the loss's weights of
        the two sums).
        """
        z, noise, step_mask = cache["z"], cache["noise"], cache["step_mask"]
        inputs, observed, out = cache["inputs"], cache["observed"], cache["out"]
        batch, n_steps, m = z.shape
        grads = {}
        # Emission.
        d_out, g = self.emission_log_density_backward(
            parameters, inputs, observed, out, cache["emission_aux"], d_reconstruction
        )
        grads.update(g)
        d_z, g = self.emission_backward(parameters, d_out, cache["emission"])
        grads.update(g)
        # KL, elementwise in the four moments.
        q_mean, q_scale = cache["q_mean"], cache["q_scale"]
        p_mean, p_scale = cache["p_mean"], cache["p_scale"]
        weight = d_kl * step_mask[..., None]
        inverse_variance = 1 / (p_scale * p_scale)
        d_q_mean = weight * (q_mean - p_mean) * inverse_variance
        d_q_scale = weight * (q_scale * inverse_variance - 1 / q_scale)
        d_p_mean = -d_q_mean
        d_p_scale = weight * (
            1 / p_scale - (q_scale * q_scale + (q_mean - p_mean) ** 2) * inverse_variance / p_scale
        )
        # The prior: the initial state, then the transition from z_{t-1}.
        grads["initial.mean"] = d_p_mean[:, 0].sum(axis=0)
        grads["initial.scale"] = d_p_scale[:, 0].sum(axis=0) * expit(parameters["initial.scale"])
        d_previous, g = self.transition_backward(
            parameters, d_p_mean[:, 1:], d_p_scale[:, 1:], cache["transition"]
        )
        grads.update(g)
        d_z[:, :-1] += d_previous
        # The draws of q, then the backward RNN.
        d_states, g = self.posterior_backward(
            parameters, z, noise, d_z, d_q_mean, d_q_scale, cache["q"]
        )
        grads.update(g)
        reversed_inputs, hidden = cache["rnn"]
        rnn_grads = elman_rnn_backward(
            _gather_steps(d_states, cache["index"]),
            reversed_inputs,
            *self._rnn_weights(parameters),
            hidden=hidden,
        )
        grads["rnn.W_x"] = rnn_grads.dW_x
        grads["rnn.W_h"] = rnn_grads.dW_h
        grads["rnn.b"] = rnn_grads.db
        return grads

    # -- drawing from the generative model ----------------------------------------
    #
    # The draws take their standard noise as an argument, so that a caller can
    # give every sequence its own random stream.

    def transition_draws(self, parameters, z_previous, noise):
        """z_t = mu(z_{t-1}) + sigma(z_{t-1}) * noise for standard normal ``noise``."""
        mean, scale, _ = self.transition(parameters, z_previous)
        return mean + scale * noise

    def initial_draws(self, parameters, noise):
        """z_1 = mu_0 + sigma_0 * noise for standard normal ``noise`` of shape (..., m)."""
        return parameters["initial.mean"] + _scale_of(parameters["initial.scale"]) * noise

    def observation_noise(self, random_state, shape):
        """The noise :meth:`observation_draws` turns into x: normal, or uniform for Bernoulli."""
        if self.emission == "gaussian":
            return random_state.standard_normal(shape)
        return random_state.uniform(size=shape)

    def observation_draws(self, parameters, z, noise):
        """x drawn from p(x | z) with :meth:`observation_noise` (standardised units if Gaussian)."""
        out, _ = self.emission_outputs(parameters, z)
        if self.emission == "gaussian":
            return out + _scale_of(parameters["emission.scale"]) * noise
        return (noise < expit(out)).astype(out.dtype)
