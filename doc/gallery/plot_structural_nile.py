"""
===============================================================
The Nile as a structural model: components and forecast bands
===============================================================

statsmodels users fit the Nile's annual flow as an ``UnobservedComponents``
local level model; :class:`~skseq.lds.UnobservedComponents` takes the same
specification and returns the same maximum-likelihood estimates (Durbin and
Koopman's 15 099 and 1 469), standard errors and log-likelihood, fitted on
skseq's Kalman kernel with the analytic gradient.  The smoothed level comes
with its standard deviation, and the forecast with 95 % bands.  A second
model adds a regressor: a step at 1899, when the first Aswan dam was begun,
whose coefficient is estimated by maximum likelihood with the variances.
"""

# %%
# The local level model
# ---------------------
# :math:`y_t = \mu_t + \varepsilon_t`, :math:`\mu_t = \mu_{t-1} + \eta_t`:
# statsmodels' ``level="local level"``.  ``summary()`` prints the estimates
# with their standard errors (the outer product of the analytic per-year
# scores, statsmodels' default), z statistics and intervals.

import matplotlib.pyplot as plt
import numpy as np

from skseq.datasets import load_nile
from skseq.lds import UnobservedComponents

nile = load_nile()
y, years = nile.data[:, 0], nile.year

model = UnobservedComponents(level="local level").fit(y)
print(model.summary())

# %%
# Components and forecast
# -----------------------
# ``components(y)`` gives the smoothed level and its standard deviation (the
# first year's is wide: the level starts from a diffuse prior);
# ``forecast`` gives the mean of the next fifteen years and the bands, which
# widen as the level keeps drifting.

level = model.components(y).level
forecast = model.forecast(15, alpha=0.05)
future = years[-1] + 1 + np.arange(15)

fig, ax = plt.subplots(figsize=(8, 4))
ax.plot(years, y, ".", color="0.4", label="flow")
ax.plot(years, level.mean, color="C0", label="smoothed level")
ax.fill_between(
    years,
    level.mean - 1.96 * level.std,
    level.mean + 1.96 * level.std,
    color="C0",
    alpha=0.2,
    label="95 % band of the level",
)
ax.plot(future, forecast.mean, color="C1", label="forecast")
ax.fill_between(future, forecast.lower, forecast.upper, color="C1", alpha=0.2)

# %%
# A regressor: the step at 1899
# -----------------------------
# ``controls`` are statsmodels' ``exog``: the coefficient ``beta.x1`` is a
# parameter of the likelihood.  With the drop explained by the step, the
# level variance falls: the level hardly needs to move any more.

step = (years >= 1899).astype(float)[:, None]
with_step = UnobservedComponents(level="local level").fit(y, controls=step)
for name in with_step.params_:
    print(f"{name:18s} {with_step.params_[name]:10.1f}  (std err {with_step.bse_[name]:.1f})")
print(f"log-likelihood {model.log_likelihood_:.2f} -> {with_step.log_likelihood_:.2f}")
print(f"AIC            {model.aic():.2f} -> {with_step.aic():.2f}")

shifted = with_step.components(y, controls=step).level.mean
ax.plot(
    years, shifted + with_step.params_["beta.x1"] * step[:, 0], color="C2", label="level + step"
)
ax.set_xlabel("year")
ax.set_ylabel(r"flow ($10^8$ m$^3$)")
ax.set_title("Nile: local level model, smoothed level and forecast")
ax.legend(loc="upper right", fontsize="small")
fig.tight_layout()
plt.show()
