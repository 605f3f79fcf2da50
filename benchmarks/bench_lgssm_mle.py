"""Exact maximum likelihood of a local level model: skseq against statsmodels, in one process.

Run ``python benchmarks/bench_lgssm_mle.py``.  On the Nile (100 rows) and on a
simulated local level series (``--n-samples``, 5 000 rows by default), on one
thread (threadpoolctl):

* ``LinearGaussianSSM(fit_method="mle")`` with OPG standard errors (the
  estimator's whole fit: initialisation, 5 EM iterations, L-BFGS-B with the
  Fisher-identity gradient, the rows' scores) and without standard errors
  (``cov_type=None``), against statsmodels'
  ``UnobservedComponents(X, "llevel").fit(disp=False)`` (L-BFGS-B with its
  own gradient, OPG standard errors by default).

Times are the best of ``--repeats``, skseq and statsmodels run alternately
(``compare`` of ``bench_lgssm.py``); the script prints the load average, the
estimates and the log-likelihoods (statsmodels' leaves the first row out: the
comparable skseq number is printed beside it).

Then, at the estimate of each series:

* the rows' scores of the OPG standard errors,
  :func:`~skseq.inference.kalman_mle.lgssm_score_obs` (one kernel call,
  ``forward_smoothing_row_moments``), against the way they were computed
  before it (the stream kernel ``forward_smoothing`` called once per row from
  Python, its message's moments averaged in numpy: ``scores_row_by_row``
  below), beside one gradient (one filter and smoother pass); the two give the
  same scores (the largest difference is printed);
* ``n_jobs``: the whole MLE fit with OPG standard errors on
  ``--n-sequences`` simulated sequences of ``--n-samples`` rows, ``n_jobs=1``
  against ``n_jobs=2`` (blocks of whole sequences on two threads, every
  gradient and the scores), on a machine whose load average is printed: with
  other work on the cores the two threads do not both get one.
"""

import argparse
import os
import warnings

import numpy as np
from bench_lgssm import compare
from threadpoolctl import threadpool_limits

from skseq._kernels import _kalman
from skseq.datasets import load_nile
from skseq.inference.kalman import (
    LGSSMParameters,
    _empty_stream_state,
    _statistics_from_moments,
    _stream_moments,
    check_lgssm_parameters,
    kalman_filter,
    make_model,
    sample_lgssm,
)
from skseq.inference.kalman_mle import (
    _gradient_from_statistics,
    lgssm_log_likelihood_gradient,
    lgssm_score_obs,
)
from skseq.lds import LinearGaussianSSM

LOCAL_LEVEL = dict(
    transition_matrix_init=[[1.0]],
    observation_matrix_init=[[1.0]],
    params=["transition_covariance", "observation_covariance"],
    fit_method="mle",
)


def statsmodels_fit(X):
    try:
        from statsmodels.tsa.statespace.structural import UnobservedComponents
    except ImportError:
        return None

    def fit():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return UnobservedComponents(X.ravel(), "llevel").fit(disp=False)

    return fit


def scores_row_by_row(parameters, X):
    """The rows' scores of one sequence as computed before the kernel emitted them: the
    stream kernel called once per row from Python (the reference of the timing)."""
    parameters = check_lgssm_parameters(parameters)
    model = make_model(parameters)
    k, p, m = model.n_state, model.n_obs, model.n_ctrl
    state = _empty_stream_state(k, p, m)
    n_samples = X.shape[0]
    controls = np.zeros((n_samples, 0))
    log_predictive = np.zeros(n_samples)
    values = np.empty((n_samples, state.constant.shape[0]))
    means, seconds = np.empty((n_samples, k)), np.empty((n_samples, k, k))
    for row in range(n_samples):
        _kalman.forward_smoothing(
            model,
            X[row : row + 1],
            controls[row : row + 1],
            row == 0,
            row,
            *state,
            log_predictive[row : row + 1],
        )
        values[row], means[row], seconds[row] = _stream_moments(state)
    totals = _statistics_from_moments(values, means, seconds, p, m)
    increments = {}
    for name, total in totals.items():
        increments[name] = total.copy()
        increments[name][1:] -= total[:-1]
    return _gradient_from_statistics(parameters, increments)


def fitted_parameters(model):
    """The fitted model's validated LGSSMParameters (the estimator's own)."""
    return model._checked_parameters()


def time_scores(X, parameters, repeats):
    """The rows' scores in one kernel call against a kernel call per row, and a gradient."""
    timed = compare(
        lambda: lgssm_score_obs(parameters, X).scores,
        lambda: scores_row_by_row(parameters, X),
        repeats,
    )
    gradient = compare(lambda: lgssm_log_likelihood_gradient(parameters, X), None, repeats)
    after, before = timed["ours"][2], timed["theirs"][2]
    difference = max(
        float(np.max(np.abs(a - b) / (1.0 + np.abs(b)))) for a, b in zip(after, before) if a.size
    )
    for label, (wall, cpu, _) in (
        ("scores, a kernel call per row", timed["theirs"]),
        ("scores, one kernel call", timed["ours"]),
        ("one gradient (for scale)", gradient["ours"]),
    ):
        print(f"{label:<34s} {wall * 1e3:8.2f} ms wall {cpu * 1e3:8.2f} ms cpu")
    print(
        f"one call / per row = {timed['theirs'][0] / timed['ours'][0]:.1f}x faster (wall); "
        f"largest relative difference of the scores {difference:.1e}"
    )


def time_threads(n_sequences, n_samples, repeats):
    """The whole MLE fit (OPG standard errors) on n_jobs=1 against n_jobs=2."""
    truth = LGSSMParameters([[1.0]], [[1.0]], [[0.5]], [[2.0]])
    X = np.concatenate(
        [
            sample_lgssm(truth, n_samples, random_state=seed).observations
            for seed in range(n_sequences)
        ]
    )
    lengths = [n_samples] * n_sequences
    print(f"\nn_jobs: {n_sequences} sequences of {n_samples} rows, MLE + OPG bse")
    models = {n: LinearGaussianSSM(1, n_jobs=n, **LOCAL_LEVEL) for n in (1, 2)}
    timed = compare(
        lambda: models[2].fit(X, lengths=lengths),
        lambda: models[1].fit(X, lengths=lengths),
        repeats,
    )
    one, two = timed["theirs"], timed["ours"]
    print(f"{'n_jobs=1':<12s} {one[0] * 1e3:8.1f} ms wall {one[1] * 1e3:8.1f} ms cpu")
    print(f"{'n_jobs=2':<12s} {two[0] * 1e3:8.1f} ms wall {two[1] * 1e3:8.1f} ms cpu")
    print(
        f"n_jobs=1 / n_jobs=2 = {one[0] / two[0]:.2f} (wall); same estimates: "
        f"{np.allclose(one[2].params_, two[2].params_, rtol=1e-7)}"
    )


def run(name, X, repeats):
    print(f"\n{name}: {X.shape[0]} rows")
    with_errors = LinearGaussianSSM(1, **LOCAL_LEVEL)
    without = LinearGaussianSSM(1, cov_type=None, **LOCAL_LEVEL)
    peer = statsmodels_fit(X)
    timed = compare(lambda: with_errors.fit(X), peer, repeats)
    timed_plain = compare(lambda: without.fit(X), None, repeats)
    ours = timed["ours"][2]
    filtered = kalman_filter(fitted_parameters(ours), X)
    print(
        f"skseq       sigma2 (level, irregular) = {ours.params_.round(2)}, bse = "
        f"{np.array([ours.bse_[n][0, 0] for n in ours.bse_]).round(2)}, log-likelihood "
        f"{ours.log_likelihood_:.4f} (without row 1: "
        f"{filtered.log_likelihood - filtered.log_predictive[0]:.4f}), "
        f"{ours.n_iter_} L-BFGS-B iterations"
    )
    if "theirs" in timed:
        theirs = timed["theirs"][2]
        print(
            f"statsmodels sigma2 (level, irregular) = {theirs.params[::-1].round(2)}, bse = "
            f"{theirs.bse[::-1].round(2)}, llf {theirs.llf:.4f}"
        )
        wall, cpu, _ = timed["theirs"]
        print(
            f"{'statsmodels fit (OPG bse)':<28s} {wall * 1e3:8.1f} ms wall {cpu * 1e3:8.1f} ms cpu"
        )
        for label, result in (("skseq MLE + OPG bse", timed), ("skseq MLE, no bse", timed_plain)):
            ours_wall, ours_cpu, _ = result["ours"]
            print(
                f"{label:<28s} {ours_wall * 1e3:8.1f} ms wall {ours_cpu * 1e3:8.1f} ms cpu   "
                f"statsmodels / skseq = {wall / ours_wall:.2f} (wall), {cpu / ours_cpu:.2f} (cpu)"
            )
    else:
        print("statsmodels is not installed: skipped")
        for label, result in (("MLE + OPG", timed), ("MLE, no bse", timed_plain)):
            wall, cpu, _ = result["ours"]
            print(f"skseq {label}: {wall * 1e3:.1f} ms wall, {cpu * 1e3:.1f} ms cpu")
    time_scores(X, fitted_parameters(ours), repeats)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--n-samples", type=int, default=5000)
    parser.add_argument("--n-sequences", type=int, default=8)
    options = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} (1 min); best of {options.repeats}, 1 thread")
    truth = LGSSMParameters([[1.0]], [[1.0]], [[0.5]], [[2.0]])
    simulated = sample_lgssm(truth, options.n_samples, random_state=0).observations
    with threadpool_limits(1):
        run("Nile", load_nile().data.reshape(-1, 1).astype(np.float64), options.repeats)
        run("simulated local level (sigma2 0.5, 2)", simulated, options.repeats)
        # BLAS on one thread for both (n_jobs=2 caps it so anyway)
        time_threads(options.n_sequences, options.n_samples, options.repeats)
    print(f"load average {os.getloadavg()[0]:.2f} (1 min) at the end")


if __name__ == "__main__":
    main()
