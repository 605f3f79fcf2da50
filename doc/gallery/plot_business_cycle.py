"""
=================================================
Business-cycle regimes in US growth (GaussianHMM)
=================================================

Economic growth alternates between expansions and slowdowns.  A two-state
Gaussian HMM on quarterly growth rates finds the two regimes without being
told the dates: each state has its own mean growth and covariance, and the
transition matrix says how persistent each regime is.  The figure shades the
quarters by the posterior probability of the low-growth regime, smoothed
(given all quarters) and filtered (given the quarters up to then, as someone
watching in real time would see it).
"""

# %%
# The data
# --------
# :func:`skseq.datasets.load_us_macro` holds 203 quarters (1959Q1–2009Q3) of
# US macroeconomic series.  We model the annualised quarterly growth of real
# GDP and real consumption, in percent.

import matplotlib.pyplot as plt
import numpy as np

from skseq import GaussianHMM
from skseq.datasets import load_us_macro

macro = load_us_macro()
columns = [macro.feature_names.index(name) for name in ("realgdp", "realcons")]
growth = 400 * np.diff(np.log(macro.data[:, columns]), axis=0)
time = macro.year[1:] + (macro.quarter[1:] - 1) / 4  # decimal year of each quarter
quarters = [f"{year}Q{quarter}" for year, quarter in zip(macro.year[1:], macro.quarter[1:])]
print(growth.shape)

# %%
# The model
# ---------
# Full covariances let the two growth rates be correlated differently in each
# regime.  EM finds a local optimum of the likelihood, so ``n_init=5`` runs it
# from five k-means initialisations and keeps the best.

model = GaussianHMM(n_components=2, covariance_type="full", n_iter=200, n_init=5, random_state=0)
model.fit(growth)
slow = int(np.argmin(model.means_[:, 0]))  # which label the low-growth state got
print("converged:", model.converged_)
print("mean growth of each state (GDP, consumption):\n", model.means_.round(2))
print("transition matrix:\n", model.transmat_.round(3))
print("expected durations (quarters):", (1 / (1 - np.diag(model.transmat_))).round(1))

# %%
# One state is an expansion, with GDP growing near 3.9 % a year; the other a
# low-growth regime near 1.1 %.  The expected duration of a regime is
# :math:`1 / (1 - A_{ii})` quarters: expansions last six years on average,
# slowdowns about two.
#
# Decoding the regimes
# --------------------
# The Viterbi path (:meth:`~skseq.GaussianHMM.predict`) assigns each quarter
# to a regime; runs of the low-growth state line up with the recessions of the
# period.  :meth:`~skseq.GaussianHMM.predict_proba` gives the smoothed
# posterior :math:`p(z_t = \text{slow} \mid x_{1:T})`,
# :meth:`~skseq.GaussianHMM.filter` the filtered one,
# :math:`p(z_t = \text{slow} \mid x_{1:t})`.

low_growth = model.predict(growth) == slow
edges = np.diff(np.concatenate([[0], low_growth.astype(int), [0]]))
starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
print("low-growth spells:", [f"{quarters[a]}-{quarters[b]}" for a, b in zip(starts, stops)])

smoothed = model.predict_proba(growth)[:, slow]
filtered = model.filter(growth)[:, slow]

figure, (top, bottom) = plt.subplots(
    2, 1, figsize=(8, 5.5), sharex=True, height_ratios=[2, 1], layout="constrained"
)
for axes in (top, bottom):
    # shade each quarter by the smoothed probability of the low-growth regime
    axes.fill_between(
        time,
        0,
        1,
        where=smoothed > 0.5,
        step="post",
        color="tab:red",
        alpha=0.15,
        transform=axes.get_xaxis_transform(),
        linewidth=0,
    )
top.plot(time, growth[:, 0], color="black", linewidth=1, label="real GDP")
top.plot(time, growth[:, 1], color="tab:blue", linewidth=1, alpha=0.7, label="real consumption")
for state, colour, name in ((slow, "tab:red", "low-growth"), (1 - slow, "tab:green", "expansion")):
    top.axhline(
        model.means_[state, 0],
        color=colour,
        linestyle="--",
        linewidth=1,
        label=f"mean GDP growth, {name} regime",
    )
top.axhline(0, color="grey", linewidth=0.5)
top.set_ylabel("annualised growth (%)")
top.set_title("US growth; shaded: smoothed P(low-growth regime) > 0.5")
top.legend(loc="lower left", fontsize=8)
bottom.step(time, smoothed, where="post", color="tab:red", label="smoothed")
bottom.step(time, filtered, where="post", color="tab:orange", linestyle=":", label="filtered")
bottom.set_ylim(-0.05, 1.05)
bottom.set_ylabel("P(low growth)")
bottom.set_xlabel("year")
bottom.legend(loc="upper center", bbox_to_anchor=(0.66, 1.0), fontsize=8)
plt.show()

# %%
# The filtered probability reacts only once weak quarters have been observed;
# the smoothed one, which also sees the following quarters, dates each switch
# earlier and more sharply — compare them around 2008:

for quarter in ("2007Q4", "2008Q1", "2008Q2", "2008Q3", "2008Q4"):
    t = quarters.index(quarter)
    print(quarter, f"filtered {filtered[t]:.2f}  smoothed {smoothed[t]:.2f}")

# %%
# How many regimes?
# -----------------
# The Bayesian information criterion (:meth:`~skseq.GaussianHMM.bic`) trades
# the likelihood against the number of free parameters; lower is better.

for k in (1, 2, 3):
    candidate = GaussianHMM(
        n_components=k, covariance_type="full", n_iter=200, n_init=5, random_state=0
    ).fit(growth)
    print(k, "states: BIC", round(candidate.bic(growth), 1))

# %%
# Two regimes are preferred.  To choose by held-out likelihood instead, see
# :ref:`sphx_glr_auto_examples_plot_grid_search.py`.
