"""Benchmark one training epoch of SelectiveSSMRegressor against the same Mamba network in torch.

The torch network has skseq's architecture and weights (copied from the skseq
model: input projection, pre-norm residual Mamba blocks, final RMSNorm, head)
and runs the selective scan as the sequential reference of Mamba's
``selective_scan_ref``: a Python loop over time with autograd (the recurrence
of ``benchmarks/bench_scan.py``), which is what runs without Mamba's CUDA
kernels.  Both train one epoch of Adam with gradient clipping over the same
minibatches, on one thread, at d_model 64, 2 layers, d_state 16, batch 16,
length 1024, per-step regression targets.  The script first checks that both
networks give the same outputs.

Prints wall and CPU times and the ratio skseq / torch (below 1 means skseq is
faster).  Run ``python benchmarks/bench_mamba_training.py [--train-repeats 3]``.
The same measurement for the S4D network is part of ``bench_s4d.py``; the two
blocks share their structure and differ only in the SSM.
"""

import argparse

from bench_s4d import add_training_arguments, format_line, run_training, torch, torch_gated_input
from bench_scan import torch_reference
from threadpoolctl import threadpool_limits

from skseq import SelectiveSSMRegressor


def torch_mamba_block(network, prefix, x):
    """One Mamba block: selective projections, the sequential scan with gate, out-projection."""
    u, z = torch_gated_input(network, prefix, x)
    A_log = network.p(f"{prefix}.A_log")
    n_state = A_log.shape[1]
    dt_proj = network.p(f"{prefix}.dt_proj.weight")
    dt_rank = dt_proj.shape[0]
    selection = u.transpose(1, 2) @ network.p(f"{prefix}.x_proj.weight")
    delta = selection[..., :dt_rank] @ dt_proj
    scanned = torch_reference(
        {
            "u": u,
            "delta": delta.transpose(1, 2),
            "A": -torch.exp(A_log),
            "B": selection[..., dt_rank : dt_rank + n_state].transpose(1, 2),
            "C": selection[..., dt_rank + n_state :].transpose(1, 2),
            "D": network.p(f"{prefix}.D"),
            "z": z.transpose(1, 2),
            "delta_bias": network.p(f"{prefix}.dt_bias"),
        }
    )
    return scanned.transpose(1, 2) @ network.p(f"{prefix}.out_proj.weight")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-state", type=int, default=16)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--no-torch", action="store_true", help="skip the torch version")
    add_training_arguments(parser)
    args = parser.parse_args()
    use_torch = torch is not None and not args.no_torch
    if use_torch:
        torch.set_num_threads(1)
    print(
        f"one training epoch: SelectiveSSMRegressor d_model {args.d_model}, {args.n_layers} "
        f"layers, d_state {args.d_state}, batch {args.train_batch}, length {args.train_length}, "
        f"{args.epoch_sequences} sequences, {args.dtype}, one thread; best of "
        f"{args.train_repeats}, wall time / CPU time"
    )
    model = SelectiveSSMRegressor(
        d_model=args.d_model,
        n_layers=args.n_layers,
        d_state=args.d_state,
        batch_size=args.train_batch,
        shuffle=False,
        random_state=0,
        dtype=args.dtype,
    )
    with threadpool_limits(limits=1):
        ours, peer = run_training(model, torch_mamba_block, args, use_torch)
    print(format_line("epoch", ours, peer))


if __name__ == "__main__":
    main()
