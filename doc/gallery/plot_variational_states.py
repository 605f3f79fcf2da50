"""
=======================================================
Choosing the number of states: variational Bayes or BIC
=======================================================

McGrory and Titterington's example (also hmmlearn's): ten sequences of 300
rows from a four-state one-dimensional Gaussian HMM whose states have means
-1.5, 0, 1.5 and 3 and standard deviation 0.5, with a chain that mixes fast
(no state lasts long).  The states overlap, so the number of states is hard
to read off the data.  Two ways to choose it:

* EM (:class:`~skseq.GaussianHMM`) for each number of states, then the
  Bayesian information criterion (:meth:`~skseq.GaussianHMM.bic`);
* variational Bayes (:class:`~skseq.VariationalGaussianHMM`), fitted once
  with more states than needed: a state the data do not need loses all its
  rows and returns to its prior, so the number of states still in use is
  the answer, and the evidence lower bound compares the fits (the user
  guide's :ref:`hmm_variational`).
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.exceptions import ConvergenceWarning

from skseq import GaussianHMM, VariationalGaussianHMM

truth = GaussianHMM(4, covariance_type="full", init_params="")
truth.startprob_ = np.full(4, 0.25)
truth.transmat_ = [
    [0.2, 0.2, 0.3, 0.3],
    [0.3, 0.2, 0.2, 0.3],
    [0.2, 0.3, 0.3, 0.2],
    [0.3, 0.3, 0.2, 0.2],
]
truth.means_ = [[-1.5], [0.0], [1.5], [3.0]]
truth.covars_ = np.full((4, 1, 1), 0.25)
rng = np.random.RandomState(1)
X = np.concatenate([truth.sample(300, random_state=rng)[0] for _ in range(10)])
lengths = [300] * 10

# %%
# One number of states at a time
# ------------------------------
# For each number of states, EM and VB each keep the best of three
# initialisations.  BIC charges EM's likelihood for its free parameters;
# VB's bound needs no charge (the divergence of the posterior from the prior
# is its price), and a VB fit also says how many of its states hold rows:
# ``beta_posterior_ - beta_prior_`` is each state's expected number of rows.

n_states = np.arange(1, 7)
bic, elbo, used = [], [], []
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ConvergenceWarning)
    for k in n_states:
        em = GaussianHMM(k, covariance_type="full", n_iter=300, tol=1e-3, n_init=3)
        em.set_params(random_state=0).fit(X, lengths=lengths)
        bic.append(em.bic(X, lengths=lengths))
        vb = VariationalGaussianHMM(k, n_iter=500, tol=1e-4, n_init=3, random_state=0)
        vb.fit(X, lengths=lengths)
        elbo.append(vb.lower_bound_)
        used.append(int(np.sum(vb.beta_posterior_ - vb.beta_prior_ > 1.0)))
print("BIC chooses", n_states[np.argmin(bic)], "states")
print("states holding more than one row in VB's fits:", dict(zip(n_states.tolist(), used)))
print("VB's bound is highest with", n_states[np.argmax(elbo)], "states")

# %%
# VB with too many states
# -----------------------
# In the fit with the most states, a state the data do not need keeps its
# prior's values: no rows, the prior mean (the data mean), the prior's
# degrees of freedom (1).  EM would give every state rows.

wide = vb
rows = wide.beta_posterior_ - wide.beta_prior_
for state in np.argsort(-rows):
    print(
        f"state {state}: {rows[state]:7.1f} rows, mean {wide.means_[state, 0]:+.2f}, "
        f"dof {wide.dof_posterior_[state]:.1f}"
    )

fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
axes[0].plot(n_states, bic, "o-")
axes[0].set(xlabel="number of states", ylabel="BIC (lower is better)", title="EM + BIC")
axes[1].plot(n_states, elbo, "o-", color="C1")
axes[1].set(xlabel="number of states", ylabel="evidence lower bound", title="VB bound")
axes[2].bar(np.arange(len(rows)), np.sort(rows)[::-1], color="C1")
axes[2].set(xlabel="state (by rows)", ylabel="expected rows", title="VB's states")
fig.tight_layout()
plt.show()
