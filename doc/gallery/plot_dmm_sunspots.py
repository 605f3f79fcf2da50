"""
===============================================================
Forecasting the sunspot cycle with a deep Markov model
===============================================================

The yearly sunspot numbers follow a cycle of about eleven years that rises
fast and decays slowly: a classic non-linear series.  A linear-Gaussian
state-space model can only give it a symmetric damped oscillation with
intervals of one width, a Gaussian HMM a few discrete levels; the deep
Markov model (:class:`~skseq.DeepMarkovModel`, :ref:`dmm`) has a neural
transition and emission and can follow the asymmetry.  Every model is fitted
on 1700-1928 and judged on 1929-2008 by its one-step-ahead log predictive
density :math:`\\log p(x_t \\mid x_{1700}, \\dots, x_{t-1})`.

Training the deep Markov model and running its particle filter for every
held-out year take about a minute, too long for the docs' build, so this
example plots the results that ``benchmarks/bench_dmm.py`` saved
(``python benchmarks/bench_dmm.py --only sunspots --save
doc/gallery/data/dmm_sunspots.json``, committed with the example); the
benchmark's code shows how each number is computed.
"""

# %%
# The cached study
# ----------------
# The series is on the square-root scale :math:`2(\\sqrt{1 + x} - 1)`, which
# makes the noise of the counts roughly homoscedastic.  For each model the
# file holds the one-step-ahead log predictive density of every year (exact
# for :class:`~skseq.LinearGaussianSSM` and :class:`~skseq.GaussianHMM`, a
# particle filter with 2000 particles for the deep Markov model) and, for the
# held-out years, one-step 90 % predictive intervals.

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

try:
    here = Path(__file__).resolve().parent
except NameError:  # run interactively
    here = Path("doc/gallery").resolve()
study = json.loads((here / "data" / "dmm_sunspots.json").read_text(encoding="utf-8"))
years = np.array(study["years"])
series = np.array(study["series"])
split = int(np.searchsorted(years, study["first_held_out_year"]))
held_years = years[split:]
models = study["models"]

print(f"held-out years {held_years[0]}-{held_years[-1]} ({len(held_years)})")
print(f"{'model':30s} {'per year':>9s} {'parameters':>11s}")
for name, result in sorted(models.items(), key=lambda item: -item[1]["held_out_per_year"]):
    print(f"{name:30s} {result['held_out_per_year']:9.3f} {result['n_parameters']:11d}")

# %%
# One-step-ahead intervals and the cumulative score
# -------------------------------------------------
# Top: the held-out years with each model's 90 % interval for the next year
# given all the years before it.  Bottom: the held-out log predictive density
# summed year by year; a steeper curve is a worse model in those years.

dmm_name = "DeepMarkovModel (m = 2)"
lds_name = next(name for name in study["intervals"] if name != dmm_name)
hmm_name = max(
    (name for name in models if name.startswith("GaussianHMM")),
    key=lambda name: models[name]["held_out_per_year"],
)
dmm_bands = np.array(study["intervals"][dmm_name])
lds_bands = np.array(study["intervals"][lds_name])

figure, (top, bottom) = plt.subplots(
    2, 1, figsize=(7.5, 6.0), sharex=True, height_ratios=[3, 2], layout="constrained"
)
top.plot(years[split - 30 :], series[split - 30 :], color="black", lw=1.2, label="observed")
top.fill_between(
    held_years,
    dmm_bands[:, 0],
    dmm_bands[:, 2],
    color="C0",
    alpha=0.3,
    label=f"{dmm_name}, 90 % one-step interval",
)
top.plot(held_years, lds_bands[:, 0], color="C1", lw=0.8, ls="--", label=f"{lds_name}, 90 %")
top.plot(held_years, lds_bands[:, 2], color="C1", lw=0.8, ls="--")
top.axvline(held_years[0] - 0.5, color="grey", lw=0.8)
top.set_ylabel("2 (sqrt(1 + sunspots) - 1)")
top.legend(loc="upper left", fontsize=8)
for colour, name in zip(("C0", "C1", "C2"), (dmm_name, lds_name, hmm_name)):
    density = np.array(models[name]["log_predictive_density"])[split:]
    bottom.plot(held_years, np.cumsum(density), color=colour, label=name)
bottom.set_ylabel("cumulative held-out\nlog predictive density")
bottom.set_xlabel("year")
bottom.legend(loc="lower left", fontsize=8)
plt.show()

# %%
# The linear model's intervals have one width throughout (its filter reaches
# a steady state), wide enough for the steepest rises and so too wide
# elsewhere; the deep Markov model's intervals are narrower through most of
# the cycle and still cover the observed years, and its cumulative score
# pulls ahead over the eighty years rather than in one episode.
