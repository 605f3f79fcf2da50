"""The input-driven (per-row transition matrix) HMM kernel against the stationary HMM kernel.

Forward-backward on the same log-emissions, T = 100 000 rows as 10 sequences,
at K = 2, 4, 8, side by side in one run: ns per row of

- ``stationary``: the core of skseq.inference.hmm_forward_backward (scaled
  recursions, one matrix), as the estimators call it (validated arrays);
- ``varying``: the core of skseq.inference.hmm_varying_forward_backward (a
  matrix per row, pair posteriors of every row returned): its scaled
  linear-space path, which these well-scaled rows take;
- ``log space``: the same kernel held to its log-space recursion
  (``scaled=False``, what every sequence ran before the scaled path; the
  fallback of sequences the scaled path cannot vouch for), and the speed-up
  ``log space / varying``;
- ``varying+softmax``: the same plus the matrices from 2 controls (one
  matmul and the kernel's row softmax), what the IO-HMM's E step pays before
  its M-step statistics;

and the ratio varying / stationary.  One thread.  Prints the load average.

    python benchmarks/bench_input_driven.py            # full run
    python benchmarks/bench_input_driven.py --quick    # smaller, for a smoke test
"""

import argparse
import os
import time

import numpy as np
from threadpoolctl import threadpool_limits

from skseq._sequences import sequence_offsets
from skseq.inference import input_driven_log_transmats
from skseq.inference.hmm import _forward_backward_offsets
from skseq.inference.hmm_varying import _transition_matrices, _varying_forward_backward_offsets


def best_time(function, repeats):
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times)


def measure(rng, n_states, n_rows, lengths, repeats):
    """Seconds of the three forward-backward passes at ``n_states`` states."""
    log_frame = rng.normal(scale=3.0, size=(n_rows, n_states))
    log_start = np.full(n_states, -np.log(n_states))
    transmat = rng.dirichlet(np.ones(n_states) * 5, size=n_states)
    log_a = np.log(transmat)
    controls = rng.normal(size=(n_rows, 2))
    coefs = rng.normal(scale=0.5, size=(n_states, n_states, 2))
    log_transmats = input_driven_log_transmats(coefs, log_a, controls).log_transmats
    transmats = np.exp(log_transmats)
    offsets = sequence_offsets(n_rows, lengths=lengths)
    startprob = np.exp(log_start)
    stationary = best_time(
        lambda: _forward_backward_offsets(startprob, transmat, log_frame, offsets), repeats
    )
    varying = best_time(
        lambda: _varying_forward_backward_offsets(
            log_start, log_transmats, log_frame, offsets, transmats=transmats
        ),
        repeats,
    )

    def from_controls():
        log_matrices, matrices = _transition_matrices(coefs, log_a, controls)
        return _varying_forward_backward_offsets(
            log_start, log_matrices, log_frame, offsets, transmats=matrices
        )

    with_softmax = best_time(from_controls, repeats)
    log_space = best_time(
        lambda: _varying_forward_backward_offsets(
            log_start, log_transmats, log_frame, offsets, transmats=transmats, scaled=False
        ),
        repeats,
    )
    return stationary, varying, with_softmax, log_space


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 000 rows, one repeat")
    arguments = parser.parse_args()
    n_rows = 10_000 if arguments.quick else 100_000
    repeats = 1 if arguments.quick else 3
    lengths = [n_rows // 10] * 10
    print(f"load average before: {os.getloadavg()}")
    print(f"T = {n_rows} rows (10 sequences), 1 thread; ns per row, best of {repeats}")
    print(
        f"{'K':>3} {'stationary':>12} {'varying':>12} {'varying+softmax':>16} {'ratio':>7} "
        f"{'log space':>10} {'speed-up':>9}"
    )
    rng = np.random.default_rng(0)
    with threadpool_limits(1):
        for n_states in (2, 4, 8):
            stationary, varying, with_softmax, log_space = measure(
                rng, n_states, n_rows, lengths, repeats
            )
            per_row = 1e9 / n_rows
            print(
                f"{n_states:>3} {stationary * per_row:>12.0f} {varying * per_row:>12.0f} "
                f"{with_softmax * per_row:>16.0f} {varying / stationary:>7.2f} "
                f"{log_space * per_row:>10.0f} {log_space / varying:>9.2f}"
            )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
