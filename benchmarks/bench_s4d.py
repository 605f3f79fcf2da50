"""Benchmark S4D against the same computation written in PyTorch with autograd.

Two parts, one thread for both libraries (``torch.set_num_threads(1)``,
threadpoolctl for BLAS), best of several repeats, wall time and CPU time:

1. **Kernel and convolution**: the S4D kernel (:func:`skseq.inference.s4d_kernel`)
   followed by the causal FFT convolution
   (:func:`skseq.inference.causal_convolution`), forward and forward +
   backward, at 128 channels, N = 64 (32 complex modes), length 4096 and
   batch 8.  The torch version is the S4D paper's reference code: the powers
   ``exp(Δ A k)`` as one (channels, N / 2, length) complex tensor, an einsum,
   and ``torch.fft.rfft`` / ``irfft`` zero-padded to twice the length, with
   autograd for the backward pass.
2. **Training**: one epoch of :class:`skseq.S4DRegressor` (d_model 64, 2
   layers, d_state 64, batch 16, length 1024, per-step targets) against the
   same architecture in torch (the same parameters, copied from the skseq
   model; Adam, gradient clipping and the same minibatches).  The script
   first checks that both networks give the same outputs.

Prints the times and the ratio skseq / torch (below 1 means skseq is faster).
Run ``python benchmarks/bench_s4d.py [--repeats 5] [--dtype float32]``; torch
is required for the ratios (without it only skseq's times are printed).
"""

import argparse
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from skseq import S4DRegressor
from skseq.inference import (
    causal_convolution,
    causal_convolution_backward,
    s4d_kernel,
    s4d_kernel_backward,
)

try:
    import torch
except ImportError:  # torch is an optional peer
    torch = None


def best_times(function, repeats):
    """Smallest wall time and smallest CPU time of ``repeats`` calls (after a warm-up).

    On a shared machine the wall time also counts the time the process waits
    for a core; the CPU time of this single-threaded process does not.
    """
    function()
    wall, cpu = [], []
    for _ in range(repeats):
        wall_start, cpu_start = time.perf_counter(), time.process_time()
        function()
        wall.append(time.perf_counter() - wall_start)
        cpu.append(time.process_time() - cpu_start)
    return min(wall), min(cpu)


def format_line(label, ours, peer):
    wall, cpu = ours
    line = f"  {label:28s} skseq {wall * 1e3:8.1f} / {cpu * 1e3:8.1f} ms"
    if peer is not None:
        peer_wall, peer_cpu = peer
        line += (
            f" | torch {peer_wall * 1e3:8.1f} / {peer_cpu * 1e3:8.1f} ms"
            f" | skseq / torch {wall / peer_wall:5.2f} wall, {cpu / peer_cpu:5.2f} CPU"
        )
    return line


# -- part 1: kernel and convolution ----------------------------------------------------


def kernel_inputs(channels, n_state, length, batch, dtype, seed=0):
    """S4D-Lin modes, log-uniform steps, standard complex normal C, B = 1."""
    rng = np.random.default_rng(seed)
    n_modes = n_state // 2
    complex_dtype = np.complex64 if dtype == np.float32 else np.complex128
    C = rng.normal(scale=np.sqrt(0.5), size=(channels, n_modes, 2)) @ np.array([1.0, 1j])
    return {
        "log_dt": rng.uniform(np.log(1e-3), np.log(1e-1), channels).astype(dtype),
        "A": np.tile(-0.5 + 1j * np.pi * np.arange(n_modes), (channels, 1)).astype(complex_dtype),
        "B": np.ones((channels, n_modes), dtype=complex_dtype),
        "C": C.astype(complex_dtype),
        "u": rng.normal(size=(batch, channels, length)).astype(dtype),
        "dy": rng.normal(size=(batch, channels, length)).astype(dtype),
    }


def run_skseq_kernel(inputs, repeats):
    parameters = {key: inputs[key] for key in ("log_dt", "A", "B", "C")}
    u, dy = inputs["u"], inputs["dy"]
    length = u.shape[2]

    def forward():
        return causal_convolution(u, s4d_kernel(**parameters, length=length).K).y

    def forward_backward():
        kernel = s4d_kernel(**parameters, length=length).K
        _, spectra = causal_convolution(u, kernel, return_spectra=True)
        grads = causal_convolution_backward(dy, spectra=spectra)
        return s4d_kernel_backward(grads.dK, **parameters)

    return {
        "forward": best_times(forward, repeats),
        "forward+backward": best_times(forward_backward, repeats),
    }


def torch_s4d_kernel(log_dt, A, B, C, length):
    """The S4D reference kernel: all powers exp(Δ A k) at once."""
    dtA = torch.exp(log_dt)[:, None] * A
    powers = torch.exp(dtA.unsqueeze(-1) * torch.arange(length, device=A.device))
    weights = C * B * (torch.exp(dtA) - 1.0) / A
    return 2 * torch.einsum("hn,hnl->hl", weights, powers).real


def torch_causal_convolution(u, kernel):
    n_fft = 2 * u.shape[-1]
    spectrum = torch.fft.rfft(u, n=n_fft) * torch.fft.rfft(kernel, n=n_fft)
    return torch.fft.irfft(spectrum, n=n_fft)[..., : u.shape[-1]]


def run_torch_kernel(inputs, repeats):
    tensors = {key: torch.from_numpy(value) for key, value in inputs.items()}
    length = inputs["u"].shape[2]
    names = ("log_dt", "A", "B", "C")

    def forward():
        with torch.no_grad():
            kernel = torch_s4d_kernel(*(tensors[name] for name in names), length)
            torch_causal_convolution(tensors["u"], kernel)

    def forward_backward():
        leaves = [tensors[name].clone().requires_grad_(True) for name in names + ("u",)]
        kernel = torch_s4d_kernel(*leaves[:4], length)
        torch_causal_convolution(leaves[4], kernel).backward(tensors["dy"])

    return {
        "forward": best_times(forward, repeats),
        "forward+backward": best_times(forward_backward, repeats),
    }


def check_kernel_agreement(inputs):
    """Largest difference of the outputs and of dC, relative to their largest entry."""
    names = ("log_dt", "A", "B", "C")
    length = inputs["u"].shape[2]
    parameters = {key: inputs[key] for key in names}
    kernel = s4d_kernel(**parameters, length=length).K
    y, spectra = causal_convolution(inputs["u"], kernel, return_spectra=True)
    dC = s4d_kernel_backward(
        causal_convolution_backward(inputs["dy"], spectra=spectra).dK, **parameters
    ).dC
    leaves = [torch.from_numpy(inputs[name]).clone().requires_grad_(True) for name in names]
    torch_y = torch_causal_convolution(
        torch.from_numpy(inputs["u"]), torch_s4d_kernel(*leaves, length)
    )
    torch_y.backward(torch.from_numpy(inputs["dy"]))
    torch_y = torch_y.detach().numpy()
    torch_dC = leaves[3].grad.numpy()
    return (
        np.abs(y - torch_y).max() / np.abs(torch_y).max(),
        np.abs(dC - torch_dC).max() / np.abs(torch_dC).max(),
    )


# -- part 2: one training epoch ------------------------------------------------------


def torch_rms_norm(x, gain, eps=1e-5):
    return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + eps) * gain


class TorchResidualNetwork(torch.nn.Module if torch is not None else object):
    """A skseq ResidualSequenceNetwork in torch, with its parameters copied from skseq.

    ``block(network, prefix, x)`` is the torch version of one block (reading
    its weights with ``network.p(key)``); the input projection, pre-norm
    residual updates, final RMSNorm and head are those of skseq's network.
    """

    def __init__(self, network, parameters, block):
        super().__init__()
        self.network = network
        self.block = block
        self.params = torch.nn.ParameterDict(
            {
                key.replace(".", "__"): torch.nn.Parameter(torch.from_numpy(value.copy()))
                for key, value in parameters.items()
            }
        )

    def p(self, key):
        return self.params[key.replace(".", "__")]

    def forward(self, X):
        hidden = X @ self.p("input_projection.weight") + self.p("input_projection.bias")
        for index in range(len(self.network.blocks)):
            normalised = torch_rms_norm(hidden, self.p(f"layers.{index}.norm.gain"))
            hidden = hidden + self.block(self, f"layers.{index}.mixer", normalised)
        read = hidden if self.network.per_step else hidden[:, -1]
        return torch_rms_norm(read, self.p("final_norm.gain")) @ self.p("head.weight") + self.p(
            "head.bias"
        )


def torch_gated_input(network, prefix, x):
    """The Mamba block's structure before the mixer: (u, z) with u of shape (batch, d_inner, L)."""
    length = x.shape[1]
    d_inner = network.p(f"{prefix}.D").shape[0]
    projected = x @ network.p(f"{prefix}.in_proj.weight")
    v, z = projected[..., :d_inner], projected[..., d_inner:]
    weight = network.p(f"{prefix}.conv.weight")
    convolved = torch.nn.functional.conv1d(
        v.transpose(1, 2),
        weight.unsqueeze(1),
        network.p(f"{prefix}.conv.bias"),
        padding=weight.shape[1] - 1,
        groups=d_inner,
    )[..., :length]
    return torch.nn.functional.silu(convolved), z


def torch_s4d_block(network, prefix, x):
    """One S4D block: the kernel from all powers at once, the FFT convolution, D, gate."""
    u, z = torch_gated_input(network, prefix, x)
    A = torch.complex(-torch.exp(network.p(f"{prefix}.A_log")), network.p(f"{prefix}.A_imag"))
    C = torch.complex(network.p(f"{prefix}.C_real"), network.p(f"{prefix}.C_imag"))
    kernel = torch_s4d_kernel(network.p(f"{prefix}.log_dt"), A, torch.ones_like(A), C, x.shape[1])
    y = torch_causal_convolution(u, kernel) + u * network.p(f"{prefix}.D")[:, None]
    gated = y.transpose(1, 2) * torch.nn.functional.silu(z)
    return gated @ network.p(f"{prefix}.out_proj.weight")


def torch_epoch(module, X, y, batch_size, learning_rate, max_grad_norm):
    """One pass of Adam over the minibatches in order, half-MSE loss, clipping as skseq."""
    optimizer = torch.optim.Adam(module.parameters(), lr=learning_rate, eps=1e-8)
    for start in range(0, X.shape[0], batch_size):
        optimizer.zero_grad()
        outputs = module(X[start : start + batch_size])[..., 0]
        target = y[start : start + batch_size]
        loss = 0.5 * torch.mean((outputs - target) ** 2)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), max_grad_norm)
        optimizer.step()


def filtered_targets(X):
    """Per-step targets: an exponentially weighted sum of the first feature so far."""
    y = np.zeros(X.shape[:2], dtype=X.dtype)
    for t in range(X.shape[1]):
        y[:, t] = (0.9 * y[:, t - 1] if t else 0.0) + X[:, t, 0]
    return y


def run_training(model, block, args, use_torch):
    """Times of one epoch of ``model.partial_fit`` and of the same network in torch.

    The torch network starts from the skseq model's weights after one
    warm-up pass; both then run one pass of Adam over the same minibatches.
    """
    dtype = np.dtype(model.dtype).type
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.epoch_sequences, args.train_length, 1)).astype(dtype)
    y = filtered_targets(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.partial_fit(X[: args.train_batch], y[: args.train_batch])
    initial = {key: value.copy() for key, value in model.parameters_.items()}
    ours = best_times(lambda: model.partial_fit(X, y), args.train_repeats)
    peer = None
    if use_torch:
        module = TorchResidualNetwork(model.network_, initial, block)
        reference = model.network_.forward(initial, X[:2])[0]
        with torch.no_grad():
            theirs = module(torch.from_numpy(X[:2])).numpy()
        difference = np.abs(reference - theirs).max() / np.abs(reference).max()
        print(f"  same network: largest output difference {difference:.1e} (relative)")
        X_t, y_t = torch.from_numpy(X), torch.from_numpy(y)
        peer = best_times(
            lambda: torch_epoch(module, X_t, y_t, args.train_batch, 1e-3, 1.0), args.train_repeats
        )
    return ours, peer


def add_training_arguments(parser):
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--n-layers", type=int, default=2)
    parser.add_argument("--train-batch", type=int, default=16)
    parser.add_argument("--train-length", type=int, default=1024)
    parser.add_argument("--epoch-sequences", type=int, default=64)
    parser.add_argument("--train-repeats", type=int, default=3)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=128)
    parser.add_argument("--n-state", type=int, default=64)
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--torch-repeats", type=int, default=3)
    parser.add_argument("--train-d-state", type=int, default=64)
    add_training_arguments(parser)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--no-torch", action="store_true", help="skip the torch versions")
    parser.add_argument("--no-training", action="store_true", help="skip the training epoch")
    args = parser.parse_args()
    dtype = np.dtype(args.dtype).type
    use_torch = torch is not None and not args.no_torch
    if use_torch:
        torch.set_num_threads(1)
    print(f"S4D, {args.dtype}, one thread; best of the repeats, wall time / CPU time.")
    with threadpool_limits(limits=1):
        inputs = kernel_inputs(args.channels, args.n_state, args.length, args.batch, dtype)
        print(
            f"\nkernel + causal FFT convolution: channels {args.channels}, N {args.n_state}, "
            f"length {args.length}, batch {args.batch}"
        )
        if use_torch:
            output_error, gradient_error = check_kernel_agreement(inputs)
            print(
                f"  agreement with torch: output {output_error:.1e}, dC {gradient_error:.1e} "
                "(largest difference / largest entry)"
            )
        ours = run_skseq_kernel(inputs, args.repeats)
        peer = run_torch_kernel(inputs, args.torch_repeats) if use_torch else None
        for stage in ("forward", "forward+backward"):
            print(format_line(stage, ours[stage], peer[stage] if peer else None))
        if not args.no_training:
            print(
                f"\none training epoch: S4DRegressor d_model {args.d_model}, {args.n_layers} "
                f"layers, d_state {args.train_d_state}, batch {args.train_batch}, length "
                f"{args.train_length}, {args.epoch_sequences} sequences"
            )
            model = S4DRegressor(
                d_model=args.d_model,
                n_layers=args.n_layers,
                d_state=args.train_d_state,
                batch_size=args.train_batch,
                shuffle=False,
                random_state=0,
                dtype=args.dtype,
            )
            ours, peer = run_training(model, torch_s4d_block, args, use_torch)
            print(format_line("epoch", ours, peer))


if __name__ == "__main__":
    main()
