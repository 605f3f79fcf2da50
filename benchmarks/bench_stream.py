"""Stochastic EM on one long stream: throughput, memory, accuracy against batch EM.

A 3-state 2-D GaussianHMM generates one sequence, fed to ``partial_fit`` in
chunks of 1 000 rows that are drawn on the fly (the stream is never held in
memory while learning).  Prints rows per second, the peak RSS growth while
streaming (goal < 50 MiB), the final per-sample log-likelihood against batch
EM on the same rows (goal: within 0.5 %), and the held-out log-likelihood
against rows seen for several learning decays kappa.

Then the same for LinearGaussianSSM (``--part lgssm``), one thread: streams
of 10^6 rows in chunks of 1 000 for k = 2 and k = 8 states (rows per second
of ``partial_fit``, and of the forward-only smoother alone against the batch
E step at fixed parameters; the final per-sample log-likelihood against batch
EM on the same rows), and the convergence target: 2 * 10^5 rows of a 2-state
model, two passes in chunks of 1 000, within 0.5 % of batch EM.

    python benchmarks/bench_stream.py             # 10^6 rows, both parts
    python benchmarks/bench_stream.py --rows 1e7  # 10^7 rows
    python benchmarks/bench_stream.py --part lgssm
"""

import argparse
import resource
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from skseq import GaussianHMM, LinearGaussianSSM
from skseq.inference.kalman import (
    LGSSMParameters,
    _em_statistics_offsets,
    _forward_smoothing_rows,
    check_lgssm_parameters,
    make_model,
)

CHUNK = 1_000


def true_model():
    model = GaussianHMM(
        3,
        covariance_type="full",
        startprob_init=[0.5, 0.3, 0.2],
        transmat_init=[[0.95, 0.03, 0.02], [0.04, 0.92, 0.04], [0.03, 0.03, 0.94]],
        means_init=[[0.0, 0.0], [3.0, 3.0], [-3.0, 3.0]],
        covars_init=[np.eye(2), [[1.0, 0.4], [0.4, 1.0]], [[1.5, -0.3], [-0.3, 0.8]]],
        n_iter=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(np.zeros((3, 2)))


def chunks(truth, n_rows, seed):
    """The stream, chunk by chunk: each chunk continues the chain of the last."""
    rng = np.random.RandomState(seed)
    state = None
    for _ in range(n_rows // CHUNK):
        X, states = truth.sample(CHUNK, random_state=rng, currstate=state)
        state = int(states[-1])
        yield X


def reset_peak_rss():
    """Reset the kernel's peak-RSS counter (Linux); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def peak_rss_mib():
    """Peak resident memory since the last reset (Linux VmHWM), else since start."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def current_rss_mib():
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def stream(truth, n_rows, learning_decay, held_out=None, checkpoints=()):
    """The stream fed to ``partial_fit``: the model, the held-out curve and the wall
    time spent in ``partial_fit`` alone (drawing the chunks is not timed)."""
    model = GaussianHMM(3, covariance_type="full", random_state=0, learning_decay=learning_decay)
    curve = []
    fitting = 0.0
    for index, X in enumerate(chunks(truth, n_rows, seed=1)):
        started = time.perf_counter()
        model.partial_fit(X)
        fitting += time.perf_counter() - started
        rows = (index + 1) * CHUNK
        if held_out is not None and rows in checkpoints:
            curve.append((rows, model.score(held_out) / len(held_out)))
    return model, curve, fitting


# -- LinearGaussianSSM ----------------------------------------------------------------

# A 2-state model with 3 features (that of tests/lds/test_lgssm.py) and the same
# model with ten times more precise observations.
TWO_STATES = dict(
    transition_matrix=np.array([[0.9, 0.2], [-0.15, 0.7]]),
    observation_matrix=np.array([[1.0, 0.0], [0.6, 0.8], [-0.4, 1.2]]),
    transition_covariance=np.array([[0.3, 0.05], [0.05, 0.2]]),
    observation_covariance=np.array([[0.2, 0.05, 0.0], [0.05, 0.3, 0.0], [0.0, 0.0, 0.25]]),
    transition_offset=np.array([0.1, -0.2]),
    observation_offset=np.array([1.0, -2.0, 0.5]),
    initial_state_mean=np.zeros(2),
    initial_state_covariance=np.eye(2),
)
TWO_STATES_PRECISE = dict(
    TWO_STATES, observation_covariance=0.1 * TWO_STATES["observation_covariance"]
)


def random_lgssm(n_state, n_obs, seed):
    """A stable random model with well-conditioned noise covariances."""
    rng = np.random.default_rng(seed)
    transition = rng.normal(size=(n_state, n_state))
    transition *= 0.9 / np.max(np.abs(np.linalg.eigvals(transition)))
    a = rng.normal(size=(n_state, n_state))
    c = rng.normal(size=(n_obs, n_obs))
    return dict(
        transition_matrix=transition,
        observation_matrix=rng.normal(size=(n_obs, n_state)),
        transition_covariance=a @ a.T / n_state + 0.1 * np.eye(n_state),
        observation_covariance=0.1 * (c @ c.T / n_obs + 0.1 * np.eye(n_obs)),
        transition_offset=np.zeros(n_state),
        observation_offset=rng.normal(size=n_obs),
        initial_state_mean=np.zeros(n_state),
        initial_state_covariance=np.eye(n_state),
    )


def lgssm_with(params):
    """A LinearGaussianSSM whose parameters are exactly ``params``."""
    model = LinearGaussianSSM(
        params["transition_matrix"].shape[0],
        n_iter=0,
        **{f"{name}_init": value for name, value in params.items()},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(np.zeros((4, params["observation_matrix"].shape[0])))


def best_cpu_seconds(function, repeats=3):
    best = np.inf
    for _ in range(repeats):
        started = time.process_time()
        function()
        best = min(best, time.process_time() - started)
    return best


def fixed_parameter_rates(params, X):
    """Rows per CPU second of the forward-only smoother in chunks and of the batch E step."""
    model = make_model(check_lgssm_parameters(LGSSMParameters(**params), X.shape[1]))
    no_controls = np.zeros((len(X), 0))

    def smoother():
        carried = None
        for start in range(0, len(X), CHUNK):
            rows = slice(start, start + CHUNK)
            carried = _forward_smoothing_rows(model, X[rows], no_controls[rows], carried)[2]

    def batch_estep():
        _em_statistics_offsets(model, X, no_controls, np.array([0, len(X)], dtype=np.intp))

    return len(X) / best_cpu_seconds(smoother), len(X) / best_cpu_seconds(batch_estep)


def lgssm_stream(truth, X, passes=1):
    """partial_fit over X in chunks (``passes`` times); returns the model and the seconds."""
    model = LinearGaussianSSM(truth.n_components, random_state=0)
    started = time.perf_counter()
    for _ in range(passes):
        for start in range(0, len(X), CHUNK):
            model.partial_fit(X[start : start + CHUNK], new_sequence=start == 0)
    return model, time.perf_counter() - started


def lgssm_batch(truth, X, n_iter=300):
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        batch = LinearGaussianSSM(truth.n_components, n_iter=n_iter, random_state=0).fit(X)
    return batch, time.perf_counter() - started


def gap_line(online, batch, batch_seconds, X):
    online_ll = online.score(X) / len(X)
    batch_ll = batch.score(X) / len(X)
    gap = 100 * abs(online_ll - batch_ll) / abs(batch_ll)
    converged = "" if batch.converged_ else ", not converged"
    return (
        f"per-sample log-likelihood online {online_ll:.5f}, batch EM {batch_ll:.5f} "
        f"({batch.n_iter_} iterations{converged}, {batch_seconds:.0f} s): gap {gap:.3f} %"
    )


def run_lgssm(n_rows):
    print("\n== LinearGaussianSSM streams in chunks of 1 000 (one thread) ==")
    cases = [
        ("k = 2, p = 3", TWO_STATES_PRECISE),
        ("k = 8, p = 8", random_lgssm(8, 8, seed=0)),
    ]
    for label, params in cases:
        truth = lgssm_with(params)
        X, _ = truth.sample(n_rows, random_state=1)
        smoother_rate, batch_rate = fixed_parameter_rates(params, X[:100_000])
        online, seconds = lgssm_stream(truth, X)
        message = sum(np.asarray(value).nbytes for value in online._stream) / 1024
        print(
            f"{label}: partial_fit {n_rows / seconds:,.0f} rows/s over {n_rows:,} rows "
            f"(carried message {message:.1f} KiB); forward-only smoother "
            f"{smoother_rate:,.0f} rows/s, batch E step {batch_rate:,.0f} rows/s (cpu)"
        )
        # Batch EM over 10^6 rows at k = 8 costs seconds per iteration: capped.
        batch, batch_seconds = lgssm_batch(truth, X, n_iter=100)
        print(f"{'':14s}{gap_line(online, batch, batch_seconds, X)}")

    print(
        "\nconvergence target: 2e5 rows of a 2-state model, two passes in chunks of 1 000, "
        "goal within 0.5 % of batch EM"
    )
    for label, params in [
        ("precise observations", TWO_STATES_PRECISE),
        ("observations ten times noisier", TWO_STATES),
    ]:
        truth = lgssm_with(params)
        X, _ = truth.sample(200_000, random_state=2)
        online, seconds = lgssm_stream(truth, X, passes=2)
        batch, batch_seconds = lgssm_batch(truth, X)
        print(f"{label}: {gap_line(online, batch, batch_seconds, X)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e6)
    parser.add_argument("--part", choices=["hmm", "lgssm", "all"], default="all")
    arguments = parser.parse_args()
    n_rows = int(arguments.rows) // CHUNK * CHUNK
    if arguments.part in ("hmm", "all"):
        run_hmm(n_rows)
    if arguments.part in ("lgssm", "all"):
        with threadpool_limits(limits=1):
            run_lgssm(n_rows)


def run_hmm(n_rows):
    truth = true_model()
    held_out, _ = truth.sample(20_000, random_state=123)

    # Warm up (imports, kernel first calls), then measure the stream alone.
    stream(truth, 5 * CHUNK, 0.6)
    exact = reset_peak_rss()
    rss_before = current_rss_mib() if exact else peak_rss_mib()
    started = time.perf_counter()
    model, _, fitting = stream(truth, n_rows, 0.6)
    seconds = time.perf_counter() - started
    growth = peak_rss_mib() - rss_before
    print(
        f"stream of {n_rows:,} rows in chunks of {CHUNK}: partial_fit {fitting:.1f} s, "
        f"{n_rows / fitting:,.0f} rows/s ({n_rows / seconds:,.0f} rows/s with drawing the "
        f"chunks, {seconds:.1f} s), peak RSS growth {growth:.1f} MiB (goal < 50)"
    )

    X = np.concatenate(list(chunks(truth, n_rows, seed=1)))
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        batch = GaussianHMM(3, covariance_type="full", n_iter=100, tol=1e-3, random_state=0).fit(X)
    batch_seconds = time.perf_counter() - started
    online_ll = model.score(X) / len(X)
    batch_ll = batch.score(X) / len(X)
    print(
        f"per-sample log-likelihood on the stream: online {online_ll:.5f}, batch EM "
        f"{batch_ll:.5f} ({batch.n_iter_} iterations, {batch_seconds:.1f} s), "
        f"difference {100 * abs(online_ll - batch_ll) / abs(batch_ll):.3f} % (goal < 0.5 %)"
    )
    print(f"true model: {truth.score(X) / len(X):.5f}")
    del X

    checkpoints = sorted({int(n_rows * f) // CHUNK * CHUNK for f in (0.01, 0.03, 0.1, 0.3, 1.0)})
    print(
        "\nheld-out per-sample log-likelihood against rows seen "
        f"(true model {truth.score(held_out) / len(held_out):.4f}):"
    )
    print(f"{'kappa':>6} " + " ".join(f"{rows:>10,}" for rows in checkpoints))
    for learning_decay in (0.55, 0.6, 0.8, 1.0):
        _, curve, _ = stream(truth, n_rows, learning_decay, held_out, checkpoints)
        print(f"{learning_decay:>6} " + " ".join(f"{value:>10.4f}" for _, value in curve))


if __name__ == "__main__":
    main()
