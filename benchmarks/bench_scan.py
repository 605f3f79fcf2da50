"""Benchmark the fused selective scan against PyTorch's reference recurrence.

Mamba's configuration: selective B and C, skip D, gate z, delta bias and
softplus; batch 8, 64 channels, 16 states, float32, one thread.  Prints the
time per (batch, channel, step, state) element of the forward pass and of the
forward plus backward pass, the peak extra memory of the backward pass against
one ``length * N`` buffer, and, when torch is installed, the same for the
reference recurrence (a Python loop over time in torch, written like
``selective_scan_ref``) with its autograd backward, and the ratios.

Run ``python benchmarks/bench_scan.py [--lengths 1024 4096] [--repeats 5]``.
"""

import argparse
import time
import tracemalloc

import numpy as np
from threadpoolctl import threadpool_limits

from skseq.inference import scan as scan_module
from skseq.inference.scan import selective_scan, selective_scan_backward

try:
    import torch
except ImportError:  # torch is an optional peer
    torch = None


def make_inputs(batch, channels, length, n_state, dtype, seed=0):
    """Random inputs with Mamba's initialisation scales."""
    rng = np.random.default_rng(seed)
    dt_init = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), channels))
    inputs = {
        "u": rng.normal(size=(batch, channels, length)),
        "delta": rng.normal(scale=0.5, size=(batch, channels, length)),
        "A": -np.tile(np.arange(1, n_state + 1, dtype=float), (channels, 1)),
        "B": rng.normal(size=(batch, n_state, length)),
        "C": rng.normal(size=(batch, n_state, length)),
        "D": np.ones(channels),
        "z": rng.normal(size=(batch, channels, length)),
        "delta_bias": dt_init + np.log(-np.expm1(-dt_init)),  # softplus inverse
    }
    # The plain configuration takes the steps themselves (no softplus), which
    # must be >= 0: those of the mamba configuration.
    inputs["steps"] = np.logaddexp(0.0, inputs["delta"] + inputs["delta_bias"][:, None])
    return {name: value.astype(dtype) for name, value in inputs.items()}


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


def peak_extra_bytes(function):
    """Peak traced allocation of one call, minus the arrays it returns."""
    tracemalloc.start()
    try:
        result = function()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    returned = sum(getattr(value, "nbytes", 0) for value in result if value is not None)
    return peak - returned


def torch_reference(inputs):
    """Forward of the recurrence in torch, precomputing per-step terms as the reference does."""
    u, delta, A, B, C, D, z, delta_bias = (
        inputs[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")
    )
    dt = torch.nn.functional.softplus(delta + delta_bias[:, None])
    decay = torch.exp(dt.unsqueeze(-1) * A[None, :, None, :])  # (batch, channels, length, N)
    drive = (dt * u).unsqueeze(-1) * B.permute(0, 2, 1).unsqueeze(1)
    state = u.new_zeros(u.shape[0], u.shape[1], A.shape[1])
    outputs = []
    # unbind, not decay[:, :, t]: indexing one step of a tensor that needs a
    # gradient makes autograd add a full-size zero tensor per step, which is
    # quadratic in the length (43 s instead of 0.3 s at length 1024).
    steps = zip(decay.unbind(2), drive.unbind(2), C.unbind(2), strict=True)
    for decay_t, drive_t, C_t in steps:
        state = decay_t * state + drive_t
        outputs.append(torch.einsum("bdn,bn->bd", state, C_t))
    y = torch.stack(outputs, dim=2) + D[:, None] * u
    return y * torch.nn.functional.silu(z)


CONFIGURATIONS = {
    "mamba": ("u", "delta", "A", "B", "C", "D", "z", "delta_bias"),
    "plain": ("u", "steps", "A", "B", "C"),
}


def run_skseq(inputs, dout, repeats, softplus):
    """Times of skseq's forward and forward + backward, and their extra memory."""

    def forward():
        return selective_scan(**inputs, delta_softplus=softplus)

    def backward():
        return selective_scan_backward(dout, **inputs, delta_softplus=softplus)

    def forward_backward():
        forward()
        return backward()

    return {
        "forward": best_times(forward, repeats),
        "forward+backward": best_times(forward_backward, repeats),
        "forward extra bytes": peak_extra_bytes(forward),
        "backward extra bytes": peak_extra_bytes(backward),
    }


def run_torch(inputs, dout, repeats):
    """Times of the torch reference forward and forward + autograd backward."""
    tensors = {k: torch.from_numpy(v) for k, v in inputs.items()}
    grad_output = torch.from_numpy(dout)

    def forward():
        with torch.no_grad():
            torch_reference(tensors)

    def forward_backward():
        leaves = {k: v.clone().requires_grad_(True) for k, v in tensors.items()}
        torch_reference(leaves).backward(grad_output)

    return {
        "forward": best_times(forward, repeats),
        "forward+backward": best_times(forward_backward, repeats),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--n-state", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--torch-repeats", type=int, default=2)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--no-torch", action="store_true", help="skip the torch reference")
    args = parser.parse_args()
    dtype = np.dtype(args.dtype)
    use_torch = torch is not None and not args.no_torch
    if use_torch:
        torch.set_num_threads(1)
    print(
        f"selective scan, {args.dtype}, batch {args.batch}, channels {args.channels}, "
        f"N {args.n_state}, one thread.  ns per (batch, channel, step, state) element, "
        f"best of {args.repeats}: wall time / CPU time."
    )
    print(
        "mamba: selective B and C, D, z, delta_bias, softplus; plain: selective B and C "
        "only, the same steps given directly (no softplus)."
    )
    print(
        f"kernel build: {scan_module._scan.__name__} "
        "(SKSEQ_KERNELS=baseline forces the portable one)"
    )
    with threadpool_limits(limits=1):
        for length in args.lengths:
            all_inputs = make_inputs(args.batch, args.channels, length, args.n_state, dtype)
            dout = np.random.default_rng(1).normal(size=all_inputs["u"].shape).astype(dtype)
            elements = args.batch * args.channels * length * args.n_state
            buffer_bytes = length * args.n_state * dtype.itemsize
            print(
                f"\nlength {length}: {elements / 1e6:.1f} M elements; one length*N buffer "
                f"= {buffer_bytes / 1024:.0f} KiB"
            )
            for name, keys in CONFIGURATIONS.items():
                inputs = {"delta" if key == "steps" else key: all_inputs[key] for key in keys}
                softplus = name == "mamba"
                ours = run_skseq(inputs, dout, args.repeats, softplus)
                peer = None
                if use_torch and softplus:
                    peer = run_torch(inputs, dout, args.torch_repeats)
                for stage in ("forward", "forward+backward"):
                    wall, cpu = ours[stage]
                    line = (
                        f"  {name:5s} {stage:16s} skseq {wall / elements * 1e9:6.2f} / "
                        f"{cpu / elements * 1e9:5.2f} ns"
                    )
                    if peer is not None:
                        peer_wall, peer_cpu = peer[stage]
                        line += (
                            f" | torch ref {peer_wall / elements * 1e9:7.1f} / "
                            f"{peer_cpu / elements * 1e9:7.1f} ns | torch / skseq "
                            f"{peer_wall / wall:5.1f}x wall, {peer_cpu / cpu:5.1f}x CPU"
                        )
                    print(line)
                for stage in ("forward extra bytes", "backward extra bytes"):
                    print(
                        f"  {name:5s} {stage:21s} {ours[stage] / 1024:7.1f} KiB = "
                        f"{ours[stage] / buffer_bytes:.2f} x one length*N buffer"
                    )


if __name__ == "__main__":
    main()
