"""The input-driven HMMs' ``partial_fit`` on one sequence in chunks: continued or cut.

One sequence of 2 controls, one thread, in one run, at K = 2, 4 and 8: an
:class:`skseq.InputDrivenGaussianHMM`'s ``partial_fit`` over the rows in
chunks of 500,

- ``continued``: each chunk continues the sequence (the forward-only smoother
  with a matrix per row: forward-backward over the chunk once per last state,
  K passes);
- ``cut``: each chunk a sequence of its own (``new_sequence=True``: the batch
  E step, one pass, which restarts the chain at every cut);

and :class:`skseq.GaussianHMM`'s continued ``partial_fit`` at the same K (the
stationary chain's forward-only smoother, O(K^4) per row).  Prints
microseconds per row and the ratios, with the load average (the machine is
shared: compare ratios of one run, not times across runs).

    python benchmarks/bench_input_driven_partial_fit.py            # full run
    python benchmarks/bench_input_driven_partial_fit.py --quick    # smaller, for a smoke test
"""

import argparse
import os

import numpy as np
from bench_semi_markov import best_time  # this directory, on sys.path
from threadpoolctl import threadpool_limits

from skseq import GaussianHMM, InputDrivenGaussianHMM


def stream(model, X, u, size, new_sequence):
    for first in range(0, len(X), size):
        rows = slice(first, first + size)
        if u is None:
            model.partial_fit(X[rows], new_sequence=new_sequence or first == 0)
        else:
            model.partial_fit(X[rows], controls=u[rows], new_sequence=new_sequence or first == 0)


def timed(make, X, u, size, new_sequence, repeats):
    """Best seconds per row of a fresh model's stream over ``X``."""

    def run():
        stream(make(), X, u, size, new_sequence)

    return best_time(run, (), repeats) / len(X)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n_rows, size, repeats = (2000, 500, 1) if args.quick else (20_000, 500, 3)
    print(f"load average {os.getloadavg()}")
    print(f"{n_rows} rows in chunks of {size}, 1 thread; us per row, best of {repeats}")
    print("K  continued      cut  hmm continued   continued/cut  continued/hmm")
    rng = np.random.default_rng(0)
    with threadpool_limits(1):
        for n_states in (2, 4, 8):
            X = rng.normal(size=(n_rows, 2))
            u = rng.normal(size=(n_rows, 2))

            def io_hmm(n_states=n_states):
                return InputDrivenGaussianHMM(n_states, random_state=0)

            def hmm(n_states=n_states):
                return GaussianHMM(n_states, random_state=0)

            continued = timed(io_hmm, X, u, size, False, repeats)
            cut = timed(io_hmm, X, u, size, True, repeats)
            plain = timed(hmm, X, None, size, False, repeats)
            print(
                f"{n_states}  {1e6 * continued:9.2f} {1e6 * cut:8.2f} {1e6 * plain:14.2f} "
                f"{continued / cut:15.2f} {continued / plain:14.2f}"
            )
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
