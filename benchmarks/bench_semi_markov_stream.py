"""The semi-Markov online filter: one pass against chunks carrying the (state, age) message.

At K states and D = max_duration, on random log-emissions, one thread, in one
run: :func:`skseq.inference.hsmm_filter` over the whole sequence; the same
rows in chunks of 100 and of 1 row, each call continuing from the previous
call's ``log_message`` (the results agree to rounding, checked here); and the
estimators' ``filter_update`` (one row per call, with validation and the
emission terms) of :class:`skseq.SemiMarkovGaussianHMM` against
:class:`skseq.GaussianHMM`'s at the same K.  Prints microseconds per row and
the ratios, with the load average (the machine is shared: compare ratios of
one run, not times across runs).

Then the E step of ``partial_fit`` on a stream: the rows of one long sequence
in chunks of 100, each continuing the previous through the forward-only
smoother over (state, age) (statistics equal to one batch's, checked here),
against the batch E step (forward-backward) on the whole sequence, for
:class:`skseq.SemiMarkovGaussianHMM` and, at the same K, for
:class:`skseq.GaussianHMM`, whose stream carries a message per state.

    python benchmarks/bench_semi_markov_stream.py            # full run
    python benchmarks/bench_semi_markov_stream.py --quick    # smaller, for a smoke test
"""

import argparse
import os
import warnings

import numpy as np
from bench_semi_markov import best_time, random_model  # this directory, on sys.path
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from skseq import GaussianHMM, SemiMarkovGaussianHMM
from skseq.inference import hsmm_filter


def chunked(chain, log_frame, size):
    message, filtered = None, []
    for first in range(0, len(log_frame), size):
        result = hsmm_filter(*chain, log_frame[first : first + size], log_message=message)
        message = result.log_message
        filtered.append(result.filtered)
    return np.vstack(filtered)


def fitted_pair(n_states, max_duration, rng):
    X = rng.normal(size=(200, 1))
    semi = SemiMarkovGaussianHMM(n_states, max_duration=max_duration, n_iter=2, random_state=0)
    hmm = GaussianHMM(n_states, n_iter=2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # short fits: any parameters do
        return semi.fit(X), hmm.fit(X)


def updates(model, X):
    model.reset_filter()
    for row in X:
        model.filter_update(row)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n_rows, n_updates, repeats = (400, 100, 2) if args.quick else (4000, 500, 3)
    print(f"load average {os.getloadavg()}")
    rng = np.random.default_rng(0)
    header = "K  D    one pass  chunks100  chunks1  (us/row; ratios to one pass)"
    print(header)
    rows = []
    with threadpool_limits(1):
        for n_states, max_duration in ((3, 20), (5, 50)):
            *chain, log_frame = random_model(n_states, max_duration, n_rows, seed=n_states)
            whole = hsmm_filter(*chain, log_frame).filtered
            for size in (100, 1):
                assert np.allclose(chunked(chain, log_frame, size), whole, atol=1e-10)
            times = [best_time(hsmm_filter, (*chain, log_frame), repeats)]
            for size in (100, 1):
                times.append(best_time(chunked, (chain, log_frame, size), repeats))
            one, hundred, single = (1e6 * t / n_rows for t in times)
            print(
                f"{n_states}  {max_duration:<3d} {one:9.2f} {hundred:9.2f} {single:9.2f}   "
                f"x{hundred / one:.2f}  x{single / one:.1f}"
            )
            semi, hmm = fitted_pair(n_states, max_duration, rng)
            X = rng.normal(size=(n_updates, 1))
            semi_time = best_time(updates, (semi, X), repeats)
            hmm_time = best_time(updates, (hmm, X), repeats)
            rows.append((n_states, max_duration, semi_time, hmm_time))
    print("K  D    filter_update us/row: SemiMarkovGaussianHMM  GaussianHMM  ratio")
    for n_states, max_duration, semi_time, hmm_time in rows:
        semi_us, hmm_us = 1e6 * semi_time / n_updates, 1e6 * hmm_time / n_updates
        ratio = semi_us / hmm_us
        print(f"{n_states}  {max_duration:<3d} {semi_us:28.1f} {hmm_us:12.1f}  x{ratio:.2f}")
    print("K  D    partial_fit E step us/row: chunks of 100 / batch E step, semi-Markov and HMM")
    with threadpool_limits(1):
        for n_states, max_duration in ((3, 20), (5, 50)):
            semi, hmm = fitted_pair(n_states, max_duration, rng)
            X = rng.normal(size=(n_rows, 1))
            cells = []
            for model in (semi, hmm):
                whole, _ = model._estep(X, np.array([0, n_rows]))
                streamed, _ = stream_estep(model, X, 100)
                for name in whole:
                    assert np.allclose(streamed[name], whole[name], rtol=1e-8, atol=1e-8), name
                batch_time = best_time(model._estep, (X, np.array([0, n_rows])), repeats)
                stream_time = best_time(stream_estep, (model, X, 100), repeats)
                cells.append((1e6 * stream_time / n_rows, 1e6 * batch_time / n_rows))
            (semi_stream, semi_batch), (hmm_stream, hmm_batch) = cells
            print(
                f"{n_states}  {max_duration:<3d} semi {semi_stream:8.2f} / {semi_batch:6.2f} "
                f"x{semi_stream / semi_batch:.1f}   hmm {hmm_stream:6.2f} / {hmm_batch:5.2f} "
                f"x{hmm_stream / hmm_batch:.1f}"
            )
    print(f"load average {os.getloadavg()}")


def stream_estep(model, X, size):
    """The statistics and log-likelihood of the stream engine's E step over chunks
    of ``size`` rows of one sequence (at fixed parameters)."""
    total, log_likelihood, carried = None, 0.0, None
    for first in range(0, len(X), size):
        chunk = X[first : first + size]
        added, part, carried = model._stream_estep(chunk, np.array([0, len(chunk)]), carried)
        total = added if total is None else total + added
        log_likelihood += part
    return total, log_likelihood


if __name__ == "__main__":
    main()
