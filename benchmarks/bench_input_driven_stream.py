"""The input-driven HMMs' online filter: one ``filter`` call against the stream in chunks.

On one sequence with 2 controls, one thread, in one run: an
:class:`skseq.InputDrivenGaussianHMM`'s ``filter`` over the whole sequence;
``filter_stream`` over the same rows in chunks of 100 (each call continuing
from ``filtered_state_``, the results checked against the whole filter); and
``filter_update`` row by row, against :class:`skseq.GaussianHMM`'s
``filter_update`` at the same K (what the per-row transition matrix costs a
stream).  Prints microseconds per row and the ratios, with the load average
(the machine is shared: compare ratios of one run, not times across runs).

    python benchmarks/bench_input_driven_stream.py            # full run
    python benchmarks/bench_input_driven_stream.py --quick    # smaller, for a smoke test
"""

import argparse
import os
import warnings

import numpy as np
from bench_semi_markov import best_time  # this directory, on sys.path
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from skseq import GaussianHMM, InputDrivenGaussianHMM


def fitted_pair(n_states, X, u):
    io_hmm = InputDrivenGaussianHMM(n_states, n_iter=2, random_state=0)
    hmm = GaussianHMM(n_states, n_iter=2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # short fits: any parameters do
        return io_hmm.fit(X, controls=u), hmm.fit(X)


def whole_filter(model, X, u):
    return model.filter(X, controls=u)


def chunked(model, X, u, size):
    model.reset_filter()
    return np.vstack(
        [
            model.filter_stream(X[first : first + size], controls=u[first : first + size])
            for first in range(0, len(X), size)
        ]
    )


def updates(model, X, u=None):
    model.reset_filter()
    for t, row in enumerate(X):
        if u is None:
            model.filter_update(row)
        else:
            model.filter_update(row, controls=u[t])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n_rows, n_updates, repeats = (400, 100, 2) if args.quick else (4000, 1000, 3)
    print(f"load average {os.getloadavg()}")
    print("K   filter  chunks100  updates  hmm updates  (us/row; ratios)")
    rng = np.random.default_rng(0)
    with threadpool_limits(1):
        for n_states in (2, 4, 8):
            X = rng.normal(size=(n_rows, 2))
            u = rng.normal(size=(n_rows, 2))
            io_hmm, hmm = fitted_pair(n_states, X, u)
            io_hmm.transition_coefs_ = rng.normal(size=io_hmm.transition_coefs_.shape)
            whole = io_hmm.filter(X, controls=u)
            assert np.allclose(chunked(io_hmm, X, u, 100), whole, atol=1e-10)
            one = best_time(whole_filter, (io_hmm, X, u), repeats) / n_rows
            hundred = best_time(chunked, (io_hmm, X, u, 100), repeats) / n_rows
            single = best_time(updates, (io_hmm, X[:n_updates], u[:n_updates]), repeats)
            plain = best_time(updates, (hmm, X[:n_updates]), repeats)
            single, plain = single / n_updates, plain / n_updates
            print(
                f"{n_states}  {1e6 * one:7.2f} {1e6 * hundred:9.2f} {1e6 * single:8.1f} "
                f"{1e6 * plain:10.1f}   chunks x{hundred / one:.2f}  updates x{single / one:.0f}"
                f"  vs hmm x{single / plain:.2f}"
            )
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
