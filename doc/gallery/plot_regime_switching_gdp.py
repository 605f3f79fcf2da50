"""
=======================================================================
Regime-switching autoregression of US GDP growth (AutoregressiveHMM)
=======================================================================

Hamilton (1989) modelled the growth of US output as an autoregression whose
mean switches between two regimes, expansion and recession, following a
hidden Markov chain; the posterior probability of the recession regime dated
the post-war recessions without being told them.  Here a two-regime AR(4),
:class:`~skseq.AutoregressiveHMM`, is fitted to quarterly real GDP growth; the
figure draws the smoothed recession probability against the growth series and
the recessions dated by the NBER.  The log-likelihood is then checked against
statsmodels' ``MarkovRegression`` at the same parameters, and Hamilton's own
parametrisation, statsmodels' ``MarkovAutoregression``, is shown to be an
AutoregressiveHMM on 32 states with the same log-likelihood.
"""

# %%
# The data
# --------
# :func:`skseq.datasets.load_us_macro` holds US real GDP for the 203 quarters
# 1959Q1–2009Q3.  The annualised growth in percent, :math:`y_t = 400 \Delta
# \log \mathrm{GDP}_t`, starts in 1959Q2.  Hamilton's sample ended in 1984; we
# fit the same span first, the whole one further down.

import copy
import itertools

import matplotlib.pyplot as plt
import numpy as np
from statsmodels.tsa.regime_switching.markov_autoregression import MarkovAutoregression
from statsmodels.tsa.regime_switching.markov_regression import MarkovRegression

from skseq import AutoregressiveHMM
from skseq.datasets import load_us_macro

macro = load_us_macro()
gdp = macro.data[:, macro.feature_names.index("realgdp")]
growth = 400 * np.diff(np.log(gdp))[:, None]  # (202, 1)
time = macro.year[1:] + (macro.quarter[1:] - 1) / 4  # decimal year of each quarter
quarters = [f"{year}Q{quarter}" for year, quarter in zip(macro.year[1:], macro.quarter[1:])]
early = growth[macro.year[1:] <= 1984]
print("quarters of growth:", len(growth), "of which up to 1984Q4:", len(early))

# %%
# The model
# ---------
# In regime :math:`k` growth follows its own AR(4),
#
# .. math::
#
#    y_t = c_k + \sum_{l=1}^{4} \phi_{k,l}\, y_{t-l} + \varepsilon_t, \quad
#    \varepsilon_t \sim \mathcal{N}(0, \sigma^2_k), \qquad k = z_t,
#
# and the regime :math:`z_t` is a Markov chain.  The first four quarters only
# condition (they are the lags of the fifth), so the outputs of
# :meth:`~skseq.AutoregressiveHMM.predict_proba` start in 1960Q2.
# ``covars_prior=0`` makes the M step the maximum-likelihood one (the default
# adds a small inverse-Wishart scale to each variance).

n_lags = 4
model = AutoregressiveHMM(
    n_components=2, n_lags=n_lags, covars_prior=0.0, n_iter=500, tol=1e-6, n_init=2, random_state=0
).fit(early)
phi_sum = model.coefs_[:, 0, :].sum(axis=1)
means = model.intercepts_[:, 0] / (1 - phi_sum)  # the mean growth of each regime's AR(4)
recession = int(np.argmin(means))
persistence = np.diag(model.transmat_)
noise = np.sqrt(model.covars_[:, 0, 0])
print("converged:", model.converged_, " log-likelihood:", round(model.score(early), 4))
for k, name in ((1 - recession, "expansion"), (recession, "recession")):
    print(
        f"{name:9}: mean growth {means[k]:5.2f} %, noise s.d. {noise[k]:.2f},"
        f" P(stay) {persistence[k]:.3f}, expected duration {1 / (1 - persistence[k]):4.1f} quarters"
    )

# %%
# One regime grows at about 5 % a year, the other shrinks at about 1.7 %, with
# noise of the same size in both; expansions last about three years on average,
# recessions about five quarters.  Hamilton's estimates, for the GNP of
# 1952–1984 and with his parametrisation (below), were about 4.7 % and -1.4 %
# a year, with probabilities of staying 0.90 and 0.75.
#
# The recession probability
# -------------------------
# :meth:`~skseq.AutoregressiveHMM.predict_proba` gives the smoothed posterior
# :math:`p(z_t = \text{recession} \mid y_{1:T})`.  With the parameters of
# 1959–1984, it is computed here for the whole span 1960–2009: after 1984 the
# model dates recessions it was not fitted on.  The shading marks the
# recessions dated by the NBER's Business Cycle Dating Committee (peak to
# trough, by quarter).

nber = [
    ("1960Q2", "1961Q1"),
    ("1969Q4", "1970Q4"),
    ("1973Q4", "1975Q1"),
    ("1980Q1", "1980Q3"),
    ("1981Q3", "1982Q4"),
    ("1990Q3", "1991Q1"),
    ("2001Q1", "2001Q4"),
    ("2007Q4", "2009Q2"),
]
smoothed = model.predict_proba(growth)[:, recession]
emitted = slice(n_lags, None)  # the quarters predict_proba has a row for


def shade_recessions(axes):
    for peak, trough in nber:
        axes.axvspan(time[quarters.index(peak)], time[quarters.index(trough)] + 0.25, color="0.85")


figure, (top, bottom) = plt.subplots(
    2, 1, figsize=(8, 5.5), sharex=True, height_ratios=[2, 1], layout="constrained"
)
for axes in (top, bottom):
    shade_recessions(axes)
top.plot(time, growth[:, 0], color="black", linewidth=1)
for k, colour in ((recession, "tab:red"), (1 - recession, "tab:green")):
    top.axhline(means[k], color=colour, linestyle="--", linewidth=1)
top.axhline(0, color="grey", linewidth=0.5)
top.set_ylabel("GDP growth (%, annualised)")
top.set_title("US real GDP growth; grey: NBER recessions; dashed: the regimes' means")
bottom.plot(time[emitted], smoothed, color="tab:red", drawstyle="steps-post")
bottom.axvline(1985, color="black", linestyle=":", linewidth=1)
bottom.text(1985.5, 0.8, "parameters of 1959–1984 →", fontsize=8)
bottom.set_ylabel("smoothed\nP(recession)")
bottom.set_ylim(-0.05, 1.05)
bottom.set_xlabel("year")
plt.show()

high = np.diff(np.concatenate([[0], (smoothed > 0.5).astype(int), [0]]))
starts, stops = np.flatnonzero(high == 1) + n_lags, np.flatnonzero(high == -1) + n_lags - 1
print("P(recession) > 0.5:")
print(", ".join(f"{quarters[a]}-{quarters[b]}" for a, b in zip(starts, stops)))

# %%
# Up to 1984 the recession probability rises above one half in each NBER
# recession and nowhere else: it ends in the NBER's trough quarter each time
# and starts at most two quarters before the peak (a year before that of 1980).
# After 1984 it still finds the recessions of 1990–91, 2001 and 2008–09, but
# it stretches 2001 over 2000–02 and flags a slowdown in 2006–07 that was no
# recession: the later years grew at about 3 % a year, well below the 5 % of
# the early expansions, so their slow quarters look like recessions to the
# parameters of 1959–1984.
#
# The whole sample: the Great Moderation
# --------------------------------------
# Fitted to 1959–2009, the same model finds other regimes: their means are
# nearly equal, their noise variances differ five-fold, and the chain switches
# to the calm regime in 1984, when US output became much less volatile (the
# *Great Moderation*), and back at the end of 2007.  Two regimes cannot
# separate both the recessions and the change of volatility: with the
# likelihood of the whole sample to gain, the fit spends them on the larger
# effect.

whole = AutoregressiveHMM(
    n_components=2, n_lags=n_lags, covars_prior=0.0, n_iter=500, tol=1e-6, n_init=2, random_state=0
).fit(growth)
calm = int(np.argmin(whole.covars_[:, 0, 0]))
whole_means = whole.intercepts_[:, 0] / (1 - whole.coefs_[:, 0, :].sum(axis=1))
print("means:", whole_means.round(2), " noise variances:", whole.covars_[:, 0, 0].round(2))
p_calm = whole.predict_proba(growth)[:, calm]
calm_quarters = np.flatnonzero(p_calm > 0.5) + n_lags
print("P(calm regime) > 0.5 from", quarters[calm_quarters[0]], "to", quarters[calm_quarters[-1]])

figure, axes = plt.subplots(figsize=(8, 2.5), layout="constrained")
shade_recessions(axes)
axes.plot(time[emitted], p_calm, color="tab:blue", drawstyle="steps-post")
axes.set_ylabel("smoothed\nP(calm regime)")
axes.set_ylim(-0.05, 1.05)
axes.set_xlabel("year")
axes.set_title("The same model fitted to 1959–2009")
plt.show()

# %%
# The same likelihood as statsmodels
# ----------------------------------
# statsmodels' ``MarkovRegression`` with the four lags as regressors, all of
# them and the variance switching, is this model.  Its conventions differ in
# three places:
#
# * its transition matrix is the transpose of ``transmat_``
#   (``p[1->0]`` is ``transmat_[1, 0]``);
# * it conditions on the first four quarters by being given the rows from the
#   fifth on, with their lags as regressors;
# * it starts the chain from the stationary distribution of the transition
#   matrix, not from a free ``startprob_``; and ``initialize_known(q)`` puts
#   ``q`` two transitions before the first modelled quarter (statsmodels
#   filters pairs of regimes), which is ``startprob_ = q @ transmat_ @ transmat_``.
#
# So we give it our parameters, and give our model the stationary distribution
# as ``startprob_``: the two log-likelihoods agree to the last digits.


def stationary(transmat):
    """The distribution pi with pi @ transmat = pi."""
    n = len(transmat)
    system = np.vstack([transmat.T - np.eye(n), np.ones(n)])
    return np.linalg.lstsq(system, np.r_[np.zeros(n), 1.0], rcond=None)[0]


y = early[n_lags:, 0]
lags = np.column_stack([early[n_lags - lag : -lag, 0] for lag in range(1, n_lags + 1)])
theirs = MarkovRegression(y, k_regimes=2, exog=lags, switching_variance=True)
values = {"p[0->0]": model.transmat_[0, 0], "p[1->0]": model.transmat_[1, 0]}
for k in range(2):
    values[f"const[{k}]"] = model.intercepts_[k, 0]
    values[f"sigma2[{k}]"] = model.covars_[k, 0, 0]
    for lag in range(n_lags):
        values[f"x{lag + 1}[{k}]"] = model.coefs_[k, 0, lag]
params = np.array([values[name] for name in theirs.param_names])

ours = copy.deepcopy(model)
ours.startprob_ = stationary(model.transmat_)
print(f"statsmodels MarkovRegression: {theirs.loglike(params):.12f}")
print(f"skseq AutoregressiveHMM:      {ours.score(early):.12f}")
their_smoothed = theirs.smooth(params).smoothed_marginal_probabilities
print(
    "largest difference of the smoothed probabilities:",
    np.abs(their_smoothed - ours.predict_proba(early)).max(),
)

q = np.array([0.5, 0.5])
theirs.initialize_known(q)
ours.startprob_ = q @ model.transmat_ @ model.transmat_
print(f"known start, statsmodels: {theirs.loglike(params):.12f}  skseq: {ours.score(early):.12f}")

# %%
# Hamilton's parametrisation
# --------------------------
# Hamilton's model, statsmodels' ``MarkovAutoregression``, lets the *mean*
# switch and the autoregression act on the deviations from it,
#
# .. math::
#
#    y_t - \mu_{z_t} = \sum_{l=1}^{4} \phi_l\, (y_{t-l} - \mu_{z_{t-l}})
#    + \varepsilon_t, \quad \varepsilon_t \sim \mathcal{N}(0, \sigma^2),
#
# so the density of :math:`y_t` depends on the last five regimes.  The tuple
# :math:`(z_t, \dots, z_{t-4})` is a Markov chain on :math:`2^5 = 32` states,
# each emitting an AR(4) with intercept :math:`\mu_{z_t} - \sum_l \phi_l
# \mu_{z_{t-l}}`: an AutoregressiveHMM with 32 states, the coefficients and
# the variance shared and a sparse transition matrix (a tuple moves only to
# the two tuples that shift it by one).  At the same parameters (here the
# regime means of our fit, its average coefficients and variance) and with the
# stationary start, the two log-likelihoods agree again.

mu, phi = means, model.coefs_[:, 0, :].mean(axis=0)
sigma2 = model.covars_[:, 0, 0].mean()
hamilton = MarkovAutoregression(early[:, 0], k_regimes=2, order=n_lags, switching_ar=False)
values = {"p[0->0]": model.transmat_[0, 0], "p[1->0]": model.transmat_[1, 0], "sigma2": sigma2}
values |= {f"const[{k}]": mu[k] for k in range(2)}
values |= {f"ar.L{lag + 1}": phi[lag] for lag in range(n_lags)}
params = np.array([values[name] for name in hamilton.param_names])

tuples = list(itertools.product(range(2), repeat=n_lags + 1))  # (z_t, z_{t-1}, ..., z_{t-4})
position = {regimes: i for i, regimes in enumerate(tuples)}
transmat = np.zeros((len(tuples), len(tuples)))
for regimes in tuples:
    for following in range(2):
        transmat[position[regimes], position[(following, *regimes[:-1])]] = model.transmat_[
            regimes[0], following
        ]
expanded = AutoregressiveHMM(len(tuples), n_lags=n_lags)
expanded.transmat_ = transmat
expanded.startprob_ = stationary(transmat)
expanded.coefs_ = np.tile(phi, (len(tuples), 1, 1))
expanded.intercepts_ = np.array([[mu[r[0]] - phi @ mu[list(r[1:])]] for r in tuples])
expanded.covars_ = np.full((len(tuples), 1, 1), sigma2)
expanded.n_features_in_, expanded.n_controls_ = 1, 0
print(f"statsmodels MarkovAutoregression: {hamilton.loglike(params):.12f}")
print(f"skseq AutoregressiveHMM, 32 states: {expanded.score(early):.12f}")

# %%
# The recession probability of Hamilton's model is the posterior summed over
# the 16 tuples whose current regime is the recession; it agrees with
# statsmodels' smoothed probability too.

in_recession = np.array([r[0] == recession for r in tuples])
hamilton_smoothed = expanded.predict_proba(early)[:, in_recession].sum(axis=1)
their_smoothed = hamilton.smooth(params).smoothed_marginal_probabilities[:, recession]
print("largest difference:", np.abs(hamilton_smoothed - their_smoothed).max())
