"""Benchmark the Elman RNN against PyTorch, one thread for both.

1. The recurrence alone: :func:`skseq.inference.elman_rnn` and
   :func:`~skseq.inference.elman_rnn_backward` against ``torch.nn.RNN``
   (tanh, one layer, ``batch_first``) with its autograd backward, for
   hidden 64, 64 inputs, batch 32, length 1024, float32.
2. One training epoch of the whole model: :class:`skseq.neural.ElmanRNNRegressor`
   (d_model 64, 2 layers, batch 16, length 1024, per-step targets, gradient
   clipping at norm 1) against the same architecture written in PyTorch
   (input projection, pre-norm residual blocks of RMSNorm -> ``nn.RNN`` ->
   bias-free output projection, final RMSNorm, linear head, half the mean
   squared error, Adam, ``clip_grad_norm_``).

Each time is the best of several repeats (wall time; CPU time is printed
too, since on a shared machine the wall time also counts waiting for a
core).  BLAS is held to one thread (threadpoolctl) and torch to one thread.

Run ``python benchmarks/bench_rnn.py [--repeats 5] [--epoch-sequences 64]``.
"""

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

from skseq.inference import elman_rnn, elman_rnn_backward
from skseq.inference import rnn as rnn_module
from skseq.neural import ElmanRNNRegressor

try:
    import torch
except ImportError:  # torch is an optional peer
    torch = None


def best_times(function, repeats):
    """Smallest wall time and smallest CPU time of ``repeats`` calls (after a warm-up)."""
    function()
    wall, cpu = [], []
    for _ in range(repeats):
        wall_start, cpu_start = time.perf_counter(), time.process_time()
        function()
        wall.append(time.perf_counter() - wall_start)
        cpu.append(time.process_time() - cpu_start)
    return min(wall), min(cpu)


def format_line(label, ours, theirs):
    line = f"  {label:22s} skseq {ours[0] * 1e3:8.2f} ms ({ours[1] * 1e3:8.2f} CPU)"
    if theirs is not None:
        line += (
            f" | torch {theirs[0] * 1e3:8.2f} ms ({theirs[1] * 1e3:8.2f} CPU)"
            f" | skseq / torch {ours[0] / theirs[0]:5.2f}x wall, {ours[1] / theirs[1]:5.2f}x CPU"
        )
    return line


# -- 1. the recurrence ------------------------------------------------------------------


def bench_recurrence(args):
    rng = np.random.default_rng(0)
    batch, length, n_hidden = args.batch, args.length, args.hidden
    dtype = np.float32
    bound = 1 / np.sqrt(n_hidden)
    x = rng.normal(size=(batch, length, n_hidden)).astype(dtype)
    W_x = rng.uniform(-bound, bound, size=(n_hidden, n_hidden)).astype(dtype)
    W_h = rng.uniform(-bound, bound, size=(n_hidden, n_hidden)).astype(dtype)
    b = rng.uniform(-bound, bound, size=n_hidden).astype(dtype)
    d_hidden = rng.normal(size=(batch, length, n_hidden)).astype(dtype)

    def forward():
        return elman_rnn(x, W_x, W_h, b)

    def forward_backward():
        hidden, _ = elman_rnn(x, W_x, W_h, b)
        return elman_rnn_backward(d_hidden, x, W_x, W_h, b, hidden=hidden)

    ours = {
        "forward": best_times(forward, args.repeats),
        "forward+backward": best_times(forward_backward, args.repeats),
    }
    theirs = dict.fromkeys(ours)
    if torch is not None:
        rnn = torch.nn.RNN(n_hidden, n_hidden, batch_first=True)
        with torch.no_grad():
            rnn.weight_ih_l0.copy_(torch.from_numpy(W_x))
            rnn.weight_hh_l0.copy_(torch.from_numpy(W_h))
            rnn.bias_ih_l0.copy_(torch.from_numpy(b))
            rnn.bias_hh_l0.zero_()
        x_t = torch.from_numpy(x)
        d_hidden_t = torch.from_numpy(d_hidden)

        def torch_forward():
            with torch.no_grad():
                return rnn(x_t)

        def torch_forward_backward():
            rnn.zero_grad(set_to_none=True)
            leaf = x_t.clone().requires_grad_(True)
            rnn(leaf)[0].backward(d_hidden_t)

        theirs = {
            "forward": best_times(torch_forward, args.repeats),
            "forward+backward": best_times(torch_forward_backward, args.repeats),
        }
        difference = np.abs(forward().hidden - torch_forward()[0].numpy()).max()
    print(
        f"\nElman recurrence, float32, hidden {n_hidden}, {n_hidden} inputs, batch {batch}, "
        f"length {length} (kernel build {rnn_module._rnn.__name__}):"
    )
    for stage in ours:
        print(format_line(stage, ours[stage], theirs[stage]))
    if torch is not None:
        print(f"  max |skseq - torch| of the hidden states: {difference:.1e}")


# -- 2. one training epoch ------------------------------------------------------------------


def make_torch_model(n_features, d_model, n_layers, n_outputs):
    """The ElmanRNN network in torch, with the same parametrisation (RMSNorm eps 1e-5)."""

    class RMSNorm(torch.nn.Module):
        def __init__(self, dim, eps=1e-5):
            super().__init__()
            self.gain = torch.nn.Parameter(torch.ones(dim))
            self.eps = eps

        def forward(self, inputs):
            return self.gain * inputs * torch.rsqrt(inputs.pow(2).mean(-1, keepdim=True) + self.eps)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = RMSNorm(d_model)
            self.rnn = torch.nn.RNN(d_model, d_model, batch_first=True)
            self.out_proj = torch.nn.Linear(d_model, d_model, bias=False)

        def forward(self, residual):
            return residual + self.out_proj(self.rnn(self.norm(residual))[0])

    class Network(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.input_projection = torch.nn.Linear(n_features, d_model)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(n_layers))
            self.final_norm = RMSNorm(d_model)
            self.head = torch.nn.Linear(d_model, n_outputs)

        def forward(self, inputs):
            residual = self.input_projection(inputs)
            for block in self.blocks:
                residual = block(residual)
            return self.head(self.final_norm(residual))

    return Network()


def bench_epoch(args):
    rng = np.random.default_rng(1)
    n_sequences, length, n_features = args.epoch_sequences, args.length, 1
    X = rng.normal(size=(n_sequences, length, n_features)).astype(np.float32)
    y = (np.cumsum(X[..., 0], axis=1) / np.sqrt(np.arange(1, length + 1))).astype(np.float32)
    settings = dict(d_model=64, n_layers=2, batch_size=16, learning_rate_init=1e-3)
    model = ElmanRNNRegressor(**settings, max_grad_norm=1.0, random_state=0, dtype="float32")
    model.partial_fit(X, y)  # initialises; every timed call is one more epoch

    ours = best_times(lambda: model.partial_fit(X, y), args.epoch_repeats)
    theirs = None
    if torch is not None:
        torch.manual_seed(0)
        network = make_torch_model(n_features, settings["d_model"], settings["n_layers"], 1)
        optimizer = torch.optim.Adam(network.parameters(), lr=settings["learning_rate_init"])
        X_t, y_t = torch.from_numpy(X), torch.from_numpy(y)[..., None]
        generator = torch.Generator().manual_seed(0)

        def torch_epoch():
            order = torch.randperm(n_sequences, generator=generator)
            for start in range(0, n_sequences, settings["batch_size"]):
                rows = order[start : start + settings["batch_size"]]
                optimizer.zero_grad(set_to_none=True)
                loss = 0.5 * (network(X_t[rows]) - y_t[rows]).pow(2).mean()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(network.parameters(), 1.0)
                optimizer.step()

        theirs = best_times(torch_epoch, args.epoch_repeats)
    print(
        f"\nOne training epoch, float32, d_model 64, 2 layers, batch 16, length {length}, "
        f"{n_sequences} sequences (Adam, clipping at norm 1):"
    )
    print(format_line("epoch", ours, theirs))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--epoch-sequences", type=int, default=64)
    parser.add_argument("--epoch-repeats", type=int, default=3)
    parser.add_argument("--no-torch", action="store_true", help="skip the torch peer")
    args = parser.parse_args()
    global torch
    if args.no_torch:
        torch = None
    if torch is not None:
        torch.set_num_threads(1)
        print(f"torch {torch.__version__}, one thread")
    else:
        print("torch not installed: skseq times only")
    with threadpool_limits(limits=1):
        bench_recurrence(args)
        bench_epoch(args)


if __name__ == "__main__":
    main()
