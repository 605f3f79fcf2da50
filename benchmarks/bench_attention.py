"""Benchmark causal attention and a Transformer training epoch against PyTorch.

1. ``causal_attention`` forward + ``causal_attention_backward`` (reusing the
   forward's output and log-sum-exp) against
   ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)`` with
   its autograd backward: batch 8, 4 heads, length 512, d_head 32, float32.
   Prints the best wall and CPU times of several repeats, the ratio
   skseq / torch, and the peak extra memory of forward + backward: for skseq
   traced by tracemalloc (numpy's allocations), and for both measured the
   same way as the growth of the peak resident set size of a fresh process
   (``ru_maxrss``) over the inputs.
2. One training epoch of ``TransformerRegressor`` (d_model 64, 2 layers, 4
   heads, MLP width 256, batch 16, length 1024, per-step targets, float32)
   against the same architecture written with PyTorch modules and autograd
   (``nn.Linear``, ``nn.RMSNorm``, ``scaled_dot_product_attention``,
   ``torch.optim.Adam``, gradient clipping at norm 1): the steady-state time
   of one pass over the training sequences.

Both run on ONE thread: ``torch.set_num_threads(1)`` and threadpoolctl for
BLAS.  Run ``python benchmarks/bench_attention.py [--repeats 5] [--dtype
float64] [--epoch-sequences 64]``.
"""

import argparse
import json
import os
import subprocess
import sys
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from skseq import TransformerRegressor
from skseq.inference import attention as attention_module
from skseq.inference import causal_attention, causal_attention_backward
from skseq.neural._networks._transformer import sinusoidal_positions

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


def kernel_inputs(batch, n_heads, length, d_head, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(batch, n_heads, length, d_head)).astype(dtype) for _ in range(4)]


def skseq_step(q, k, v, dout):
    out, lse = causal_attention(q, k, v, return_lse=True)
    return (out, lse, *causal_attention_backward(dout, q, k, v, out, lse))


def torch_step(q, k, v, dout):
    output = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    output.backward(dout)
    return output, q.grad, k.grad, v.grad


def traced_peak_bytes(function):
    """Peak traced allocation of one call (numpy's arrays; BLAS buffers are not traced)."""
    tracemalloc.start()
    try:
        function()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak


def _status_bytes(field):
    """A memory field of /proc/self/status (VmRSS, VmHWM), in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_rss_growth(library, shape, dtype):
    """Peak resident memory of one forward + backward over the memory before it, bytes.

    Runs in a fresh process on one thread (BLAS included): one warm-up step
    (libraries allocate their own buffers on first use), then the peak RSS
    (VmHWM) is reset through /proc/self/clear_refs and one step measured.
    The growth includes the returned outputs and gradients.
    """
    code = f"""
import json, sys
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
import numpy as np
from threadpoolctl import threadpool_limits
import bench_attention as bench
q, k, v, dout = bench.kernel_inputs(*{shape!r}, np.{dtype})
if {library!r} == "torch":
    import torch
    torch.set_num_threads(1)
    q, k, v = (torch.from_numpy(x).requires_grad_(True) for x in (q, k, v))
    dout = torch.from_numpy(dout)
    step = bench.torch_step
else:
    step = bench.skseq_step
with threadpool_limits(limits=1):
    step(q, k, v, dout)
    if {library!r} == "torch":
        q.grad = k.grad = v.grad = None
    before = bench._status_bytes("VmRSS")
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
    result = step(q, k, v, dout)
    print(json.dumps(bench._status_bytes("VmHWM") - before))
"""
    # A fixed mmap threshold: glibc then maps every large array afresh and
    # unmaps it when freed, instead of reusing heap pages resident from the
    # warm-up, so the resident size follows the live memory.
    environment = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=environment
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def run_kernel(args):
    dtype = np.dtype(args.dtype)
    shape = (args.batch, args.heads, args.length, args.d_head)
    q, k, v, dout = kernel_inputs(*shape, dtype)
    one_array = q.nbytes
    scores_matrix = args.batch * args.heads * args.length**2 * dtype.itemsize
    print(
        f"causal attention forward + backward, {args.dtype}, batch {args.batch}, heads "
        f"{args.heads}, length {args.length}, d_head {args.d_head}, one thread; best of "
        f"{args.repeats}: wall / CPU time.  Kernel build: {attention_module._attention.__name__}."
    )
    ours = {
        "forward": best_times(lambda: causal_attention(q, k, v, return_lse=True), args.repeats),
        "forward+backward": best_times(lambda: skseq_step(q, k, v, dout), args.repeats),
    }
    peer = None
    if torch is not None:
        tensors = [torch.from_numpy(x) for x in (q, k, v)]
        grad = torch.from_numpy(dout)

        def torch_forward():
            with torch.no_grad():
                torch.nn.functional.scaled_dot_product_attention(*tensors, is_causal=True)

        def torch_forward_backward():
            leaves = [x.detach().requires_grad_(True) for x in tensors]
            torch_step(*leaves, grad)

        peer = {
            "forward": best_times(torch_forward, args.repeats),
            "forward+backward": best_times(torch_forward_backward, args.repeats),
        }
    for stage, (wall, cpu) in ours.items():
        line = f"  {stage:16s} skseq {wall * 1e3:7.2f} / {cpu * 1e3:7.2f} ms"
        if peer is not None:
            peer_wall, peer_cpu = peer[stage]
            line += (
                f" | torch {peer_wall * 1e3:7.2f} / {peer_cpu * 1e3:7.2f} ms | skseq / torch "
                f"{wall / peer_wall:4.2f}x wall, {cpu / peer_cpu:4.2f}x CPU"
            )
        print(line)
    traced = traced_peak_bytes(lambda: skseq_step(q, k, v, dout))
    print(
        f"  memory (one input array = {one_array / 2**20:.1f} MiB, all (length x length) "
        f"score matrices = {scores_matrix / 2**20:.1f} MiB; the outputs and gradients "
        f"returned are 4 arrays and the lse)"
    )
    print(f"    skseq peak traced allocation (tracemalloc): {traced / 2**20:7.1f} MiB")
    if not args.no_rss:
        for library in ("skseq", "torch") if torch is not None else ("skseq",):
            growth = peak_rss_growth(library, shape, args.dtype)
            print(
                f"    {library:5s} peak RSS growth of one step:         {growth / 2**20:7.1f} MiB"
            )


# -- one training epoch of the whole model ------------------------------------------------


def make_torch_transformer(n_features, n_outputs, d_model, n_layers, n_heads, d_ff, max_length):
    """The architecture of TransformerRegressor, written the way a PyTorch user would."""
    nn = torch.nn
    functional = torch.nn.functional

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = nn.RMSNorm(d_model, eps=1e-5)
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.out_proj = nn.Linear(d_model, d_model)
            self.norm2 = nn.RMSNorm(d_model, eps=1e-5)
            self.fc1 = nn.Linear(d_model, d_ff)
            self.fc2 = nn.Linear(d_ff, d_model)

        def forward(self, hidden):
            batch, length, _ = hidden.shape
            qkv = self.qkv(self.norm1(hidden)).view(batch, length, 3, n_heads, -1)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)
            attended = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            hidden = hidden + self.out_proj(attended.transpose(1, 2).reshape(batch, length, -1))
            return hidden + self.fc2(functional.relu(self.fc1(self.norm2(hidden))))

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_projection = nn.Linear(n_features, d_model)
            positions = sinusoidal_positions(max_length, d_model, np.float32)
            self.register_buffer("positions", torch.from_numpy(positions))
            self.layers = nn.ModuleList([Layer() for _ in range(n_layers)])
            self.final_norm = nn.RMSNorm(d_model, eps=1e-5)
            self.head = nn.Linear(d_model, n_outputs)

        def forward(self, X):
            hidden = self.input_projection(X) + self.positions[: X.shape[1]]
            for layer in self.layers:
                hidden = layer(hidden)
            return self.head(self.final_norm(hidden))

    return Transformer()


def run_epoch(args):
    rng = np.random.default_rng(0)
    n, length = args.epoch_sequences, args.epoch_length
    X = rng.normal(size=(n, length, 1)).astype(np.float32)
    y = np.cumsum(X[..., 0], axis=1) / np.sqrt(np.arange(1, length + 1))
    architecture = dict(d_model=64, n_layers=2, n_heads=4, d_ff=256)
    print(
        f"\none training epoch: {n} sequences of {length} steps in minibatches of "
        f"{args.epoch_batch}, d_model 64, 2 layers, 4 heads, MLP width 256, per-step "
        f"regression, float32, one thread; best of {args.epoch_repeats}: wall / CPU time."
    )
    model = TransformerRegressor(
        **architecture,
        batch_size=args.epoch_batch,
        shuffle=False,
        random_state=0,
        dtype="float32",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ours = best_times(lambda: model.partial_fit(X, y), args.epoch_repeats)
    line = f"  skseq {ours[0]:6.2f} / {ours[1]:6.2f} s"
    if torch is not None:
        torch.manual_seed(0)
        network = make_torch_transformer(1, 1, **architecture, max_length=length)
        optimizer = torch.optim.Adam(network.parameters(), lr=1e-3)
        X_torch = torch.from_numpy(X)
        y_torch = torch.from_numpy(y.astype(np.float32))[..., None]

        def epoch():
            for start in range(0, n, args.epoch_batch):
                batch = slice(start, start + args.epoch_batch)
                optimizer.zero_grad()
                loss = 0.5 * torch.mean((network(X_torch[batch]) - y_torch[batch]) ** 2)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(network.parameters(), 1.0)
                optimizer.step()

        theirs = best_times(epoch, args.epoch_repeats)
        line += (
            f" | torch {theirs[0]:6.2f} / {theirs[1]:6.2f} s | skseq / torch "
            f"{ours[0] / theirs[0]:4.2f}x wall, {ours[1] / theirs[1]:4.2f}x CPU"
        )
    print(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--d-head", type=int, default=32)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--epoch-sequences", type=int, default=64)
    parser.add_argument("--epoch-length", type=int, default=1024)
    parser.add_argument("--epoch-batch", type=int, default=16)
    parser.add_argument("--epoch-repeats", type=int, default=3)
    parser.add_argument("--no-epoch", action="store_true", help="skip the training epoch")
    parser.add_argument("--no-rss", action="store_true", help="skip the RSS measurements")
    args = parser.parse_args()
    if torch is not None:
        torch.set_num_threads(1)
    else:
        print("torch is not installed: skseq only.")
    with threadpool_limits(limits=1):
        run_kernel(args)
        if not args.no_epoch:
            run_epoch(args)


if __name__ == "__main__":
    main()
