"""
=====================================================================
Interest rates and the risk of a slowdown (InputDrivenGaussianHMM)
=====================================================================

A plain HMM switches regimes at rates that never change.  An input-driven HMM
(IO-HMM) lets an observed input move them: here the change of the US
three-month Treasury-bill rate over the past year, known before the quarter
it is used for.  A two-state :class:`~skseq.InputDrivenGaussianHMM` on the
quarterly growth of real GDP finds an expansion and a low-growth regime, and
its transition weights say how monetary tightening changes the chance of
leaving the expansion.  The figure draws that chance against the input.
"""

# %%
# The data
# --------
# :func:`skseq.datasets.load_us_macro`: 203 quarters, 1959Q1–2009Q3.  Row t
# of ``X`` is the annualised GDP growth of a quarter; its control is the
# change of the T-bill rate over the four quarters up to the quarter before
# (standardised), so the input is known when the quarter starts.

import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.exceptions import ConvergenceWarning

from skseq import GaussianHMM, InputDrivenGaussianHMM
from skseq.datasets import load_us_macro

macro = load_us_macro()
gdp = macro.data[:, macro.feature_names.index("realgdp")]
rate = macro.data[:, macro.feature_names.index("tbilrate")]
growth = 400 * np.diff(np.log(gdp))[:, None]  # quarter t + 1's growth in row t
yearly_change = np.zeros_like(rate)
yearly_change[4:] = rate[4:] - rate[:-4]
controls = yearly_change[:-1, None]  # known at quarter t, used for quarter t + 1
X, controls = growth[4:], controls[4:]
scale = controls.std()
controls = (controls - controls.mean()) / scale
print(X.shape, controls.shape)

# %%
# The models
# ----------
# The IO-HMM has two more free parameters than the plain HMM: one weight per
# source state (the logits of the two destinations share one degree of
# freedom).  ``transition_alpha`` is a small ridge on the weights.

with warnings.catch_warnings():
    warnings.simplefilter("ignore", ConvergenceWarning)
    io_hmm = InputDrivenGaussianHMM(2, n_iter=300, n_init=5, random_state=0)
    io_hmm.fit(X, controls=controls)
    plain = GaussianHMM(2, n_iter=300, n_init=5, random_state=0).fit(X)
slow = int(np.argmin(io_hmm.means_[:, 0]))
fast = 1 - slow
print("mean growth of the regimes:", io_hmm.means_[[fast, slow], 0].round(2))
print("log-likelihood  IO-HMM", round(io_hmm.score(X, controls=controls), 1))
print("                plain ", round(plain.score(X), 1))
print("BIC             IO-HMM", round(io_hmm.bic(X, controls=controls), 1))
print("                plain ", round(plain.bic(X), 1))

# %%
# The input buys about eight nats of likelihood for two parameters, and a
# lower BIC.  The weight of the "leave the expansion" logit is positive: a
# rising T-bill rate makes a slowdown more likely the next quarter.

weights = io_hmm.transition_coefs_[..., 0]
intercepts = io_hmm.transition_intercepts_
print(
    "weight of 'expansion -> low growth' per s.d.:",
    round(weights[fast, slow] - weights[fast, fast], 2),
)
grid = np.linspace(-3, 3, 121)[:, None]  # standardised change


def probability(source, target):
    logits = intercepts[source] + grid * weights[source]
    return np.exp(logits[:, target] - np.logaddexp(logits[:, 0], logits[:, 1]))


figure, axes = plt.subplots(figsize=(7, 4), layout="constrained")
change = grid[:, 0] * scale + yearly_change[3:-1].mean()
axes.plot(change, probability(fast, slow), color="tab:red", label="expansion -> low growth")
axes.plot(change, probability(slow, fast), color="tab:green", label="low growth -> expansion")
axes.axhline(plain.transmat_[fast, slow], color="tab:red", linestyle=":", label="plain HMM")
axes.axhline(plain.transmat_[slow, fast], color="tab:green", linestyle=":")
axes.set_xlabel("change of the 3-month T-bill rate over the past year (points)")
axes.set_ylabel("probability of switching next quarter")
axes.set_title("US GDP regimes: switching probabilities driven by interest rates")
axes.legend(fontsize=8)
plt.show()

# %%
# The plain HMM's constant switching probabilities (dotted) are averages of
# the IO-HMM's curves over the inputs seen.  Decoding uses the inputs too:

states = io_hmm.predict(X, controls=controls)
print("quarters in the low-growth regime:", int(np.sum(states == slow)), "of", len(states))
