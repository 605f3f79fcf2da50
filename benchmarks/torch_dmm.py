"""The deep Markov model of :class:`skseq.DeepMarkovModel`, written in PyTorch.

The same network, parameter for parameter (the keys of
``DeepMarkovModel.parameters_``; a ``Linear`` weight is ``(in, out)``), and
the same negative ELBO with the same noise, differentiated by autograd.  The
backward RNN is ``torch.rnn_tanh`` (what ``torch.nn.RNN`` runs) over each
sequence reversed within its length; the draws of q run forward in a Python
loop, as they must.  ``tests/neural/test_deep_markov.py`` checks skseq's hand-written
gradients against it, and ``bench_dmm.py`` times a training epoch of both.
"""

import math

import torch
import torch.nn.functional as F

MIN_SCALE = 1e-3
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _linear(parameters, name, x):
    return x @ parameters[f"{name}.weight"] + parameters[f"{name}.bias"]


def _scale(pre_activation):
    return F.softplus(pre_activation) + MIN_SCALE


def negative_elbo(parameters, inputs, observed, step_mask, noise, *, kl_weight, emission):
    """The annealed negative ELBO (summed over the batch) and the ELBO itself.

    ``parameters`` maps skseq's keys to tensors; the other arguments are the
    tensors :meth:`skseq.neural._networks._deep_markov.DeepMarkovNetwork.forward` takes.
    """
    batch, n_steps, m = noise.shape
    lengths = step_mask.sum(dim=1).long()
    steps = torch.arange(n_steps)[None, :]
    index = torch.where(steps < lengths[:, None], lengths[:, None] - 1 - steps, steps)
    gather = index[:, :, None]
    reversed_inputs = torch.gather(inputs, 1, gather.expand(-1, -1, inputs.shape[2]))
    n_hidden = parameters["rnn.W_h"].shape[0]
    hidden, _ = torch.rnn_tanh(
        reversed_inputs,
        torch.zeros(1, batch, n_hidden, dtype=inputs.dtype),
        [
            parameters["rnn.W_x"],
            parameters["rnn.W_h"],
            parameters["rnn.b"],
            torch.zeros_like(parameters["rnn.b"]),
        ],
        True,
        1,
        0.0,
        True,
        False,
        True,
    )
    states = torch.gather(hidden, 1, gather.expand(-1, -1, n_hidden))

    z_previous = parameters["combiner.z0"].expand(batch, m)
    draws, q_means, q_scales = [], [], []
    for t in range(n_steps):
        combined = 0.5 * (
            torch.tanh(_linear(parameters, "combiner.hidden", z_previous)) + states[:, t]
        )
        output = _linear(parameters, "combiner.output", combined)
        q_mean, q_scale = output[:, :m], _scale(output[:, m:])
        z_previous = q_mean + q_scale * noise[:, t]
        draws.append(z_previous)
        q_means.append(q_mean)
        q_scales.append(q_scale)
    z = torch.stack(draws, dim=1)
    q_mean, q_scale = torch.stack(q_means, dim=1), torch.stack(q_scales, dim=1)

    previous = z[:, :-1]
    gate = torch.sigmoid(
        _linear(parameters, "gate.output", F.relu(_linear(parameters, "gate.hidden", previous)))
    )
    proposal = _linear(
        parameters, "proposal.output", F.relu(_linear(parameters, "proposal.hidden", previous))
    )
    linear = _linear(parameters, "transition.linear", previous)
    prior_mean = (1 - gate) * linear + gate * proposal
    prior_scale = _scale(_linear(parameters, "transition.scale", F.relu(proposal)))
    p_mean = torch.cat([parameters["initial.mean"].expand(batch, 1, m), prior_mean], dim=1)
    p_scale = torch.cat(
        [_scale(parameters["initial.scale"]).expand(batch, 1, m), prior_scale], dim=1
    )

    out = _linear(parameters, "emission.output", F.relu(_linear(parameters, "emission.hidden", z)))
    if emission == "gaussian":
        scale = _scale(parameters["emission.scale"])
        log_density = -0.5 * ((inputs - out) / scale) ** 2 - torch.log(scale) - HALF_LOG_2PI
    else:
        log_density = inputs * out - F.softplus(out)
    reconstruction = (log_density * observed).sum()
    ratio = q_scale / p_scale
    kl_steps = (0.5 * (ratio**2 + ((q_mean - p_mean) / p_scale) ** 2 - 1) - torch.log(ratio)).sum(
        dim=-1
    )
    kl = (kl_steps * step_mask).sum()
    return -(reconstruction - kl_weight * kl), reconstruction - kl
