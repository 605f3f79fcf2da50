"""
=====================================================
The Nile: Kalman smoothing and a forecast, 95 % bands
=====================================================

The annual flow of the Nile at Aswan, 1871–1970, is a classic series for
state-space methods: the flow drops around 1898, when the first Aswan dam was
begun.  The *local level model* — a level that drifts as a random walk,
observed with noise — is fitted by EM; the Rauch–Tung–Striebel smoother then
gives the level of every year with a 95 % band, and the model forecasts the
next fifteen years with bands that widen as the level keeps drifting.  A
two-state HMM, which sees an abrupt switch between two levels instead, is
drawn for comparison.
"""

# %%
# The local level model
# ---------------------
# The level :math:`\mu_t` moves a little every year and is observed with noise:
#
# .. math::
#
#    \mu_t = \mu_{t-1} + w_t, \quad w_t \sim \mathcal{N}(0, \sigma^2_\eta), \qquad
#    x_t = \mu_t + v_t, \quad v_t \sim \mathcal{N}(0, \sigma^2_\varepsilon).
#
# In :class:`~skseq.lds.LinearGaussianSSM` terms this is a one-dimensional
# state with :math:`F = H = 1`.  We fix those and let EM learn the two
# variances.  A random walk has no stationary distribution, so the first
# level gets a diffuse prior (:ref:`lgssm_initial_state`).

import matplotlib.pyplot as plt
import numpy as np
from scipy import stats

from skseq import GaussianHMM
from skseq.datasets import load_nile
from skseq.lds import LinearGaussianSSM

nile = load_nile()
X, years = nile.data, nile.year  # X: (100, 1), in 10^8 m^3 per year

local_level = LinearGaussianSSM(
    n_components=1,
    transition_matrix_init=[[1.0]],
    observation_matrix_init=[[1.0]],
    params=["transition_covariance", "observation_covariance"],
).fit(X)
print("level variance  sigma_eta^2:", round(local_level.transition_covariance_.item()))
print("noise variance  sigma_eps^2:", round(local_level.observation_covariance_.item()))
print("EM iterations:", local_level.n_iter_)

# %%
# These are the maximum-likelihood estimates of the local level model with a
# diffuse initial level (about 1,469 and 15,099 in the time-series literature
# and in statsmodels' ``UnobservedComponents``), to within 0.5 %: this
# likelihood is very flat along the ratio of the two variances, and EM
# (accelerated by SQUAREM) stops when an iteration gains less than ``tol``,
# here 1e-4 (the default 1e-2 stops 13 % above the maximum level variance).
#
# Smoothing and forecasting
# -------------------------
# :meth:`~skseq.lds.LinearGaussianSSM.smooth` gives the mean and variance of
# :math:`\mu_t` given all hundred years.  The state is measured from the
# observation offset (the mean flow), which the level adds back.
# :meth:`~skseq.lds.LinearGaussianSSM.forecast` gives the predictive mean and
# covariance of the *observations* of the next years: the band holds the
# level's growing uncertainty plus the yearly noise.

state, variance = local_level.smooth(X)
level = state[:, 0] + local_level.observation_offset_[0]
level_sd = np.sqrt(variance[:, 0, 0])

horizon = 15
forecast_mean, forecast_covariance = local_level.forecast(X, horizon)
forecast_sd = np.sqrt(forecast_covariance[:, 0, 0])
future = years[-1] + 1 + np.arange(horizon)
z = stats.norm.ppf(0.975)  # 1.96: two-sided 95 %
print("forecast 1971-1973:", forecast_mean[:3, 0].round(1), "+-", (z * forecast_sd[:3]).round(1))

# %%
# The two-state HMM of the change point, for comparison: a transition matrix
# with 0.99 on its diagonal as the starting value says that switches are rare.

hmm = GaussianHMM(
    n_components=2, n_iter=100, random_state=0, transmat_init=[[0.99, 0.01], [0.01, 0.99]]
).fit(X)
hmm_level = hmm.means_[hmm.predict(X), 0]
print("HMM switches in", years[1:][np.diff(hmm.predict(X)) != 0])

figure, axes = plt.subplots(figsize=(8, 4.5), layout="constrained")
axes.plot(years, X[:, 0], "o", markersize=3, color="black", label="annual flow")
axes.plot(years, level, color="tab:blue", label="smoothed level (local level model)")
axes.fill_between(
    years,
    level - z * level_sd,
    level + z * level_sd,
    color="tab:blue",
    alpha=0.25,
    label="95 % band of the level",
)
axes.plot(future, forecast_mean[:, 0], color="tab:purple", label="forecast")
axes.fill_between(
    future,
    forecast_mean[:, 0] - z * forecast_sd,
    forecast_mean[:, 0] + z * forecast_sd,
    color="tab:purple",
    alpha=0.2,
    label="95 % band of the forecast flow",
)
axes.step(
    years,
    hmm_level,
    where="mid",
    color="tab:red",
    linestyle="--",
    linewidth=1,
    label="two-state HMM: mean of the decoded state",
)
axes.set_xlabel("year")
axes.set_ylabel("flow ($10^8$ m$^3$ per year)")
axes.set_title("Nile at Aswan: local level model by EM")
axes.legend(loc="upper right", fontsize=8)
plt.show()

# %%
# The level falls by about 200 over roughly a decade around 1898 instead of in
# one step: a random walk with small steps cannot jump, so it spreads the
# break over several years, while the HMM switches once, in 1899.  Their
# log-likelihoods can be compared, since both are densities of the same data
# (the diffuse first level costs the local level model about 13 nats in the
# first year alone); the abrupt switch fits better, also by BIC:

print("log-likelihood: HMM", round(hmm.score(X), 1), " local level", round(local_level.score(X), 1))
print("BIC:            HMM", round(hmm.bic(X), 1), " local level", round(local_level.bic(X), 1))

# %%
# Following the level online
# --------------------------
# A fitted model can also run its Kalman filter one observation at a time,
# in constant memory: :meth:`~skseq.lds.LinearGaussianSSM.reset_filter`
# starts the stream from the end of a history, and each new year is one call
# to :meth:`~skseq.lds.LinearGaussianSSM.filter_update`.  The streamed filter
# gives, bit for bit, what the batch filter gives on the whole series.

history, new_years = X[:80], X[80:]  # 1871-1950, then 1951-1970
online = LinearGaussianSSM(
    n_components=1,
    transition_matrix_init=[[1.0]],
    observation_matrix_init=[[1.0]],
    observation_offset_init=[0.0],  # the state is the level itself
    params=["transition_covariance", "observation_covariance"],
).fit(history)
online.reset_filter(history)
for x in new_years:
    filtered_level, _ = online.filter_update(x)
batch_means, _ = online.filter(X)
print(
    "filtered level in 1970:",
    filtered_level.round(1),
    "same as batch:",
    np.array_equal(filtered_level, batch_means[-1]),
)
