"""
=========================================================
Sunspot cycles: explicit durations against geometric ones
=========================================================

The yearly sunspot number, 1700–2008, alternates between active and quiet
phases of about five to six years each: the 11-year solar cycle.  A two-state
HMM gives each phase a geometric duration, whose most likely value is always
one year; a semi-Markov HMM
(:class:`~skseq.SemiMarkovGaussianHMM`) learns a duration distribution per
state, here a shifted Poisson.  We fit both to the square root of the
sunspot number (which steadies the variance), compare their log-likelihoods
and BIC, the lengths of the phases they decode, and the duration laws they
learned.
"""

# %%
# Two models of the same phases
# -----------------------------
# Both have two Gaussian states.  The semi-Markov model adds one duration
# rate per state and gives up the self-transitions: a phase ends by switching
# to the other one, after d years with probability ``duration_probs_[k, d -
# 1]`` (at most ``max_duration`` = 15 years).

import matplotlib.pyplot as plt
import numpy as np

from skseq import GaussianHMM, SemiMarkovGaussianHMM
from skseq.datasets import load_sunspots

sunspots = load_sunspots()
X, years = np.sqrt(sunspots.data), sunspots.year

semi = SemiMarkovGaussianHMM(2, max_duration=15, n_iter=200, n_init=5, random_state=0).fit(X)
hmm = GaussianHMM(2, n_iter=200, n_init=5, random_state=0).fit(X)
for name, model in (("semi-Markov HMM", semi), ("HMM", hmm)):
    print(f"{name:16s} log-likelihood {model.score(X):8.1f}   BIC {model.bic(X):7.1f}")


def phase_lengths(states):
    """Lengths of the runs of one state, the first and last (censored) left out."""
    changes = np.flatnonzero(np.diff(states)) + 1
    return np.diff(changes)


active = int(np.argmax(semi.means_.ravel()))
print("mean durations (years), active and quiet:",
      (semi.duration_probs_ @ np.arange(1, 16))[[active, 1 - active]].round(1))  # fmt: skip
print("decoded phases, semi-Markov: longest", phase_lengths(semi.predict(X)).max(), "years")
print("decoded phases, HMM:         longest", phase_lengths(hmm.predict(X)).max(), "years")

# %%
# Decoded phases and duration laws
# --------------------------------
# Above, the series with the phases each model decodes (Viterbi).  The HMM
# reads the Dalton minimum (about 1795–1830), when the cycles were weak, as
# one quiet phase of 33 years, which its geometric durations make cheap; the
# semi-Markov model, for which a quiet phase of more than ten years is
# unlikely, keeps decoding the cycles through it.
# Below, the learned durations of the active phase: the semi-Markov model's
# Poisson peaks at five to six years, the HMM's geometric law at one.

fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(9, 8), height_ratios=[2, 1, 2])
top.plot(years, sunspots.data.ravel(), color="0.3", lw=1)
top.set_ylabel("sunspot number")
top.set_title("Yearly sunspot number, 1700–2008")
for row, model in enumerate((semi, hmm)):
    high = np.argmax(model.means_.ravel())
    middle.fill_between(
        years, row, row + 0.8, where=model.predict(X) == high, step="mid", color=f"C{row}"
    )
middle.set_yticks([0.4, 1.4], ["semi-Markov", "HMM"])
middle.set_title("Decoded active phases")
durations = np.arange(1, 16)
hmm_active = int(np.argmax(hmm.means_.ravel()))
stay = hmm.transmat_[hmm_active, hmm_active]
geometric = (1 - stay) * stay ** (durations - 1)
bottom.bar(durations - 0.2, semi.duration_probs_[active], width=0.4, label="semi-Markov (Poisson)")
bottom.bar(durations + 0.2, geometric, width=0.4, label="HMM (geometric)")
bottom.set_xlabel("duration of an active phase (years)")
bottom.set_ylabel("probability")
bottom.legend()
fig.tight_layout()
plt.show()
