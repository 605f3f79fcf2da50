"""
===========================================================
Regimes in the yearly counts of major earthquakes (Poisson)
===========================================================

The number of major earthquakes (magnitude 7 and above) in the world, year by
year from 1900 to 2006, is the running example of Zucchini and MacDonald's
book on hidden Markov models for time series.  The counts are overdispersed
(their variance is well above their mean) and serially correlated, which one
Poisson distribution cannot explain; a Poisson HMM explains both by a few
seismic regimes, each with its own rate, that persist for years.  We choose
the number of regimes by BIC and draw the decoded regimes over the data.
"""

# %%
# The data
# --------

import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.exceptions import ConvergenceWarning

from skseq import PoissonHMM
from skseq.datasets import load_earthquakes

quakes = load_earthquakes()
counts, years = quakes.data, quakes.year  # counts: (107, 1); year of each row
print(counts.shape, years[0], years[-1])
print(f"mean {counts.mean():.1f}, variance {counts.var(ddof=1):.1f} earthquakes per year")

# %%
# How many regimes?
# -----------------
# For each number of states, EM runs from ten initialisations
# (``n_init=10``) and keeps the best; :meth:`~skseq.PoissonHMM.bic` charges
# the likelihood for the free parameters (:math:`K - 1` start probabilities,
# :math:`K(K - 1)` transition probabilities and :math:`K` rates).

candidates = [1, 2, 3, 4, 5]
models, bic, aic = {}, [], []
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ConvergenceWarning)
    for k in candidates:
        models[k] = PoissonHMM(n_components=k, n_iter=500, tol=1e-6, n_init=10, random_state=0)
        models[k].fit(counts)
        bic.append(models[k].bic(counts))
        aic.append(models[k].aic(counts))
        print(
            f"K = {k}: log-likelihood {models[k].score(counts):8.2f}, "
            f"AIC {aic[-1]:7.2f}, BIC {bic[-1]:7.2f}"
        )
best = candidates[int(np.argmin(bic))]
runner_up = candidates[int(np.argmin(aic))]
print("BIC chooses K =", best, "and AIC K =", runner_up)

# %%
# The chosen model
# ----------------
# Sorting the states by their rate makes the labels readable; the Viterbi
# path (:meth:`~skseq.PoissonHMM.predict`) gives the regime of each year, and
# the posterior (:meth:`~skseq.PoissonHMM.predict_proba`) how sure the model
# is of it.

model = models[best]
order = np.argsort(model.lambdas_[:, 0])
print("rates:", model.lambdas_[order, 0].round(2))
print("transition matrix (states by rate):\n", model.transmat_[np.ix_(order, order)].round(3))
states = np.argsort(order)[model.predict(counts)]  # 0 = the quietest regime
posterior = model.predict_proba(counts)[:, order]

figure, (top, middle, bottom) = plt.subplots(
    3, 1, figsize=(8, 7), height_ratios=[2.2, 1, 1.2], layout="constrained"
)
colours = plt.cm.viridis(np.linspace(0.15, 0.85, best))
top.bar(years, counts[:, 0], width=0.8, color="lightgrey", label="earthquakes of magnitude ≥ 7")
top.step(
    years,
    model.lambdas_[order, 0][states],
    where="mid",
    color="black",
    linewidth=1.5,
    label=f"rate of the decoded regime, K = {best} (BIC)",
)
if runner_up != best:
    other = models[runner_up]
    top.step(
        years,
        other.lambdas_[other.predict(counts), 0],
        where="mid",
        color="tab:orange",
        linestyle="--",
        linewidth=1.2,
        label=f"the same, K = {runner_up} (AIC)",
    )
top.set_xlim(years[0] - 1, years[-1] + 1)
top.set_ylabel("earthquakes per year")
top.set_title("Major earthquakes 1900–2006: Poisson HMM")
top.legend(loc="upper right", fontsize=8)
middle.stackplot(
    years,
    posterior.T,
    colors=colours,
    step="mid",
    labels=[f"λ = {rate:.1f}" for rate in model.lambdas_[order, 0]],
)
middle.set_xlim(years[0] - 1, years[-1] + 1)
middle.set_ylim(0, 1)
middle.set_ylabel("posterior")
middle.set_xlabel("year")
middle.set_title(f"posterior probability of each regime (K = {best})", fontsize=10)
middle.legend(loc="lower left", fontsize=7, ncol=best, framealpha=0.9)
bottom.plot(candidates, bic, "o-", color="tab:red", label="BIC")
bottom.plot(candidates, aic, "s--", color="tab:blue", label="AIC")
bottom.axvline(best, color="grey", linestyle=":")
bottom.set_xticks(candidates)
bottom.set_xlabel("number of states K")
bottom.set_ylabel("criterion (lower is better)")
bottom.legend(loc="upper center", fontsize=8)
plt.show()

# %%
# A single Poisson rate (K = 1) is far behind: the data alternate between
# quieter and more active decades, which regimes that last for years explain
# (the expected stay in a state is :math:`1 / (1 - A_{ii})`, about 14 and 8
# years here).  BIC stops at two regimes, where the gain in likelihood of a
# third no longer pays for its six extra parameters at :math:`\log 107`
# each; AIC, which charges 2 per parameter, prefers three: a middle rate
# between the quietest and the most active stretches.  The posterior shows the years where the
# regime is uncertain — those whose count lies between the two rates.
