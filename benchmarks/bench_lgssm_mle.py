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
"""

import argparse
import os
import warnings

import numpy as np
from bench_lgssm import compare
from threadpoolctl import threadpool_limits

from skseq.datasets import load_nile
from skseq.inference.kalman import LGSSMParameters, kalman_filter, sample_lgssm
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


def run(name, X, repeats):
    print(f"\n{name}: {X.shape[0]} rows")
    with_errors = LinearGaussianSSM(1, **LOCAL_LEVEL)
    without = LinearGaussianSSM(1, cov_type=None, **LOCAL_LEVEL)
    peer = statsmodels_fit(X)
    timed = compare(lambda: with_errors.fit(X), peer, repeats)
    timed_plain = compare(lambda: without.fit(X), None, repeats)
    ours = timed["ours"][2]
    filtered = kalman_filter(
        LGSSMParameters(
            ours.transition_matrix_,
            ours.observation_matrix_,
            ours.transition_covariance_,
            ours.observation_covariance_,
            ours.transition_offset_,
            ours.observation_offset_,
            initial_state_mean=ours.initial_state_mean_,
            initial_state_covariance=ours.initial_state_covariance_,
        ),
        X,
    )
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--n-samples", type=int, default=5000)
    options = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} (1 min); best of {options.repeats}, 1 thread")
    truth = LGSSMParameters([[1.0]], [[1.0]], [[0.5]], [[2.0]])
    simulated = sample_lgssm(truth, options.n_samples, random_state=0).observations
    with threadpool_limits(1):
        run("Nile", load_nile().data.reshape(-1, 1).astype(np.float64), options.repeats)
        run("simulated local level (sigma2 0.5, 2)", simulated, options.repeats)
    print(f"load average {os.getloadavg()[0]:.2f} (1 min) at the end")


if __name__ == "__main__":
    main()
