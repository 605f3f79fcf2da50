"""The semi-Markov HMM kernel: time per row against the HMM kernel and a numpy reference.

Forward-backward with expected counts on random log-emissions, K states and
D = max_duration, one thread, in one run: skseq's semi-Markov kernel
(:func:`skseq.inference.hsmm_forward_backward`, O(T K (K + D))), skseq's HMM
kernel at the same K (:func:`skseq.inference.hmm_forward_backward`, O(T K^2)),
and a numpy implementation of the same semi-Markov recursions written here
(vectorised over states and durations, a Python loop over rows).  Prints
microseconds per row and the ratios, with the load average (the machine is
shared: compare ratios of one run, not times across runs).

    python benchmarks/bench_semi_markov.py            # full run
    python benchmarks/bench_semi_markov.py --quick    # smaller, for a smoke test
"""

import argparse
import os
import time

import numpy as np
from scipy.special import logsumexp
from threadpoolctl import threadpool_limits

from skseq.inference import hmm_forward_backward, hsmm_forward_backward


def numpy_forward_backward(log_start, log_trans, log_duration, log_frame):
    """The semi-Markov forward-backward in numpy (one sequence): log-likelihood,
    posteriors and the expected complete / censored duration counts."""
    n_rows, n_states = log_frame.shape
    n_durations = log_duration.shape[1]
    log_survival = np.logaddexp.accumulate(log_duration[:, ::-1], axis=1)[:, ::-1]
    cumulative = np.vstack([np.zeros(n_states), np.cumsum(log_frame, axis=0)])
    enter = np.full((n_rows + 1, n_states), -np.inf)
    leave = np.full((n_rows + 1, n_states), -np.inf)
    enter[0] = log_start
    for e in range(1, n_rows + 1):
        d = np.arange(1, min(n_durations, e) + 1)
        segments = cumulative[e] - cumulative[e - d]  # (d, K)
        weights = (log_survival if e == n_rows else log_duration)[:, d - 1].T
        leave[e] = logsumexp(enter[e - d] + weights + segments, axis=0)
        if e < n_rows:
            enter[e] = logsumexp(leave[e][:, None] + log_trans, axis=0)
    log_likelihood = logsumexp(leave[n_rows])
    start_after = np.full((n_rows + 1, n_states), -np.inf)
    after_end = np.zeros((n_rows + 1, n_states))
    change = np.zeros((n_rows + 1, n_states))
    complete = np.zeros((n_states, n_durations))
    censored = np.zeros((n_states, n_durations))
    for t in range(n_rows - 1, -1, -1):
        d = np.arange(1, min(n_durations, n_rows - t) + 1)
        segments = cumulative[t + d] - cumulative[t]
        ends = t + d < n_rows
        weights = np.where(ends[:, None], log_duration[:, d - 1].T, log_survival[:, d - 1].T)
        terms = weights + segments + np.where(ends[:, None], after_end[t + d], 0.0)
        start_after[t] = logsumexp(terms, axis=0)
        visits = np.exp(enter[t] + terms - log_likelihood)  # (d, K)
        change[t] += visits.sum(axis=0)
        np.subtract.at(change, t + d, visits)
        complete[:, d[ends] - 1] += visits[ends].T
        censored[:, d[~ends] - 1] += visits[~ends].T
        if t > 0:
            after_end[t] = logsumexp(log_trans + start_after[t][None, :], axis=1)
    posteriors = np.cumsum(change[:n_rows], axis=0)
    return log_likelihood, posteriors, complete, censored


def random_model(n_states, max_duration, n_rows, seed=0):
    rng = np.random.default_rng(seed)
    log_start = np.log(np.full(n_states, 1.0 / n_states))
    transmat = rng.dirichlet(np.ones(n_states), size=n_states)
    np.fill_diagonal(transmat, 0.0)
    transmat /= transmat.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        log_trans = np.log(transmat)
    log_duration = np.log(rng.dirichlet(np.ones(max_duration), size=n_states))
    log_frame = rng.normal(scale=2.0, size=(n_rows, n_states))
    return log_start, log_trans, log_duration, log_frame


def hmm_of_same_size(n_states, seed=0):
    rng = np.random.default_rng(seed)
    return np.log(np.full(n_states, 1.0 / n_states)), np.log(
        rng.dirichlet(np.ones(n_states), size=n_states)
    )


def best_time(function, arguments, repeats):
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function(*arguments)
        times.append(time.perf_counter() - started)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (smoke test)")
    args = parser.parse_args()
    n_rows, numpy_rows, repeats = (2_000, 300, 2) if args.quick else (20_000, 2_000, 3)
    sizes = [(4, 20), (4, 100), (10, 20), (10, 100)]
    print(f"load average {os.getloadavg()[0]:.2f} (2 cores shared), one thread")
    print(f"forward-backward with expected counts, T = {n_rows} rows (numpy: {numpy_rows})")
    header = (
        f"{'K':>3} {'D':>4} | {'hsmm us/row':>11} {'hmm us/row':>10} {'numpy us/row':>12} | "
        f"{'hsmm/hmm':>8} {'numpy/hsmm':>10}"
    )
    print(header)
    with threadpool_limits(1):
        for n_states, max_duration in sizes:
            model = random_model(n_states, max_duration, n_rows)
            log_start, log_trans, log_duration, log_frame = model
            hmm = hmm_of_same_size(n_states)
            small = (*model[:3], log_frame[:numpy_rows])
            # The reference agrees with the kernel before it is timed.
            reference = numpy_forward_backward(*small)
            kernel = hsmm_forward_backward(*small)
            assert np.isclose(reference[0], kernel.log_likelihood, rtol=1e-10)
            assert np.allclose(reference[1], kernel.posteriors, atol=1e-8)
            semi = best_time(hsmm_forward_backward, model, repeats) / n_rows
            plain = best_time(hmm_forward_backward, (*hmm, log_frame), repeats) / n_rows
            slow = best_time(numpy_forward_backward, small, 1) / numpy_rows
            print(
                f"{n_states:>3} {max_duration:>4} | {1e6 * semi:>11.2f} {1e6 * plain:>10.3f} "
                f"{1e6 * slow:>12.1f} | {semi / plain:>8.1f} {slow / semi:>10.1f}"
            )
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
