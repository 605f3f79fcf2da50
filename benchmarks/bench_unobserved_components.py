"""Structural time-series models: skseq's UnobservedComponents against statsmodels', in one run.

Run ``python benchmarks/bench_unobserved_components.py``.  The same specification
on the same data, each library's whole default ``fit`` (starting values,
L-BFGS-B, OPG standard errors: statsmodels' default), on one thread
(threadpoolctl):

* the Nile, local level (100 rows);
* a monthly series, local linear trend + seasonal of 12 (statsmodels' bundled
  Mauna Loa CO2 series, its last 240 months; simulated when statsmodels is
  absent);
* a simulated trend-cycle model (local linear trend + damped stochastic
  cycle, 200 rows).

Times are the best of ``--repeats``, skseq and statsmodels run alternately
(``compare`` of ``bench_lgssm.py``); the ratio is statsmodels' time over
skseq's.  skseq's fit with ``cov_type="oim"`` and without standard errors is
timed too: the OPG scores come from forward-only smoothing one row at a time,
whose cost grows fast with the state dimension (13 states for the seasonal
model), carrying only the moments the free parameters' scores weigh.  The
script prints the load average and both maximised log-likelihoods.
"""

import argparse
import os
import warnings

import numpy as np
import scipy.linalg
from bench_lgssm import compare
from threadpoolctl import threadpool_limits

from skseq.datasets import load_nile
from skseq.inference.kalman import LGSSMParameters, sample_lgssm
from skseq.lds import UnobservedComponents

try:
    from statsmodels.tsa.statespace.structural import UnobservedComponents as Theirs
except ImportError:
    Theirs = None


def monthly_series():
    try:
        from statsmodels.datasets import co2
    except ImportError:
        rng = np.random.default_rng(0)
        months = np.arange(240)
        level = np.cumsum(0.1 + rng.normal(scale=0.2, size=240))
        return level + 3 * np.sin(2 * np.pi * months / 12) + rng.normal(scale=0.3, size=240)
    data = co2.load_pandas().data["co2"]
    return data.resample("MS").mean().interpolate().to_numpy()[-240:]


def trend_cycle(n=200, seed=0):
    """A local linear trend plus a damped stochastic cycle (frequency 0.3, damping
    0.9) plus noise, drawn by the Kalman layer's sampler."""
    cycle = 0.9 * np.array([[np.cos(0.3), np.sin(0.3)], [-np.sin(0.3), np.cos(0.3)]])
    model = LGSSMParameters(
        transition_matrix=scipy.linalg.block_diag([[1.0, 1.0], [0.0, 1.0]], cycle),
        observation_matrix=[[1.0, 0.0, 1.0, 0.0]],
        transition_covariance=np.diag([1e-8, 0.0025, 1.0, 1.0]),
        observation_covariance=[[1.0]],
        initial_state_mean=[0.0, 0.1, 0.0, 0.0],
        initial_state_covariance=np.diag([1e-8, 1e-8, 1.0, 1.0]),
    )
    return sample_lgssm(model, n, random_state=seed).observations[:, 0]


CASES = [
    ("Nile, local level", lambda: load_nile().data[:, 0].astype(float), dict(level="llevel")),
    (
        "monthly CO2, local linear trend + seasonal 12",
        monthly_series,
        dict(level="lltrend", seasonal=12),
    ),
    (
        "simulated trend-cycle",
        trend_cycle,
        dict(level="lltrend", cycle=True, stochastic_cycle=True, damped_cycle=True),
    ),
]


def statsmodels_fit(y, spec):
    """statsmodels' default fit of the same specification (None without statsmodels)."""
    if Theirs is None:
        return None

    def fit():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return Theirs(y, **spec).fit(disp=False)

    return fit


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} (1 min); best of {options.repeats}, 1 thread")
    # the fits' warnings (CO2's boundary variances, the trend-cycle's unidentified
    # cycle) would print on every repeat: the tests check them, this times the fits
    warnings.simplefilter("ignore")
    with threadpool_limits(1):
        for name, data, spec in CASES:
            y = data()
            model = UnobservedComponents(**spec)
            timed = compare(
                lambda model=model, y=y: model.fit(y), statsmodels_fit(y, spec), options.repeats
            )
            wall, cpu, ours = timed["ours"]
            print(f"\n{name}: {y.size} rows, {len(ours.params_)} parameters")
            print(
                f"  skseq       {wall * 1e3:8.1f} ms wall {cpu * 1e3:8.1f} ms cpu   "
                f"llf {ours.log_likelihood_:.4f}  ({ours.n_iter_} L-BFGS-B iterations)"
            )
            if "theirs" in timed:
                their_wall, their_cpu, theirs = timed["theirs"]
                print(
                    f"  statsmodels {their_wall * 1e3:8.1f} ms wall {their_cpu * 1e3:8.1f} ms cpu"
                    f"   llf {theirs.llf:.4f}"
                )
                print(
                    f"  statsmodels / skseq = {their_wall / wall:.2f} (wall), "
                    f"{their_cpu / cpu:.2f} (cpu)"
                )
            else:
                print("  statsmodels is not installed: skipped")
            for cov_type in ("oim", None):  # the other standard errors, and none
                other = UnobservedComponents(**spec, cov_type=cov_type)
                other_wall, other_cpu, _ = compare(
                    lambda other=other, y=y: other.fit(y), None, options.repeats
                )["ours"]
                print(
                    f"  skseq cov_type={cov_type!s:<5s} {other_wall * 1e3:8.1f} ms wall "
                    f"{other_cpu * 1e3:8.1f} ms cpu"
                )
    print(f"\nload average {os.getloadavg()[0]:.2f} (1 min) at the end")


if __name__ == "__main__":
    main()
