"""
=====================================================
Semi-supervised HMM: fitting with some states known
=====================================================

Often the hidden state of a few rows is known: a handful of annotated
frames, the regimes an expert marked, the first minutes of a labelled
session.  ``fit(X, known_states=...)`` takes one entry per row, the known
state or -1 where it is unknown (scikit-learn's marker of an unlabelled
sample); the E step clamps the labelled rows to their states, so state
``k`` of the fitted model *is* label ``k``, with no label switching to undo,
and the rest of the rows are fitted by EM as usual (:ref:`hmm_known_states`).

Here a three-state Gaussian HMM with overlapping states generates 3,000
rows.  Fitted without labels, EM finds the states in whatever order its
initialisation gave them, and its decoded states match the truth only after
the right permutation is found.  With even half a percent of the rows
labelled, the states come out in the labels' order: the decoded states of
the *unlabelled* rows are as accurate, as fitted, as the unlabelled fit's
after its best permutation.  (On states this well identified by the data,
labels remove the permutation more than they add information.)
"""

import itertools
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.exceptions import ConvergenceWarning

from skseq import GaussianHMM

truth = GaussianHMM(3, covariance_type="diag", init_params="")
truth.startprob_ = [0.4, 0.3, 0.3]
truth.transmat_ = [[0.95, 0.03, 0.02], [0.04, 0.93, 0.03], [0.02, 0.04, 0.94]]
truth.means_ = [[0.9, 0.0], [-0.9, 0.3], [0.0, -0.8]]  # not in sorted order
truth.covars_ = [[1.0, 0.8], [0.9, 1.0], [0.8, 0.9]]
X, states = truth.sample(3000, random_state=0)

# %%
# Without labels, the order of the states is the initialisation's
# ----------------------------------------------------------------
# Three random initialisations, three orders of the same three states.

for seed in range(3):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = GaussianHMM(3, covariance_type="diag", n_iter=200, random_state=seed).fit(X)
    print(f"seed {seed}, no labels: first feature of means_ {np.round(model.means_[:, 0], 2)}")
print(f"true means_ (first feature):           {np.round(truth.means_[:, 0], 2)}")

# %%
# With labels, state k is label k
# -------------------------------
# We label a random fraction of the rows with their true state and fit, from
# the initialisation of seed 1 above (a wrong order without labels).
# Each fit reports the accuracy of the decoded states on the rows left
# unlabelled and the largest error of the means, both as fitted (state k
# compared with label k: no permutation is searched for).  For the fit
# without labels, the accuracy after the best of the six permutations of the
# states is shown too.

rng = np.random.default_rng(1)
fractions = [0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2]
accuracy, mean_error = [], []
for fraction in fractions:
    labelled = rng.random(len(X)) < fraction
    known = np.where(labelled, states, -1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = GaussianHMM(3, covariance_type="diag", n_iter=200, random_state=1)
        model.fit(X, known_states=known)
    decoded = model.predict(X)
    if fraction == 0.0:
        best_permuted = max(
            np.mean(np.array(order)[decoded] == states)
            for order in itertools.permutations(range(3))
        )
        print(f"  no labels: accuracy after the best permutation {best_permuted:.3f}")
    accuracy.append(np.mean(decoded[~labelled] == states[~labelled]))
    mean_error.append(np.abs(model.means_ - truth.means_).max())
    print(
        f"{fraction:6.1%} labelled ({labelled.sum():3d} rows): accuracy on the others "
        f"{accuracy[-1]:.3f}, largest error of means_ {mean_error[-1]:.3f}, "
        f"monitor_ (log p(X, labels)) {model.monitor_.history[-1]:.1f}"
    )

# %%
# The labelled fit, its decoded states and the data
# -------------------------------------------------
# ``monitor_`` holds the log-likelihood of the data *jointly with the labels*,
# log p(X, labelled states): what EM maximises here.  ``score`` after the fit
# is the usual log p(X).

labelled = rng.random(len(X)) < 0.05
known = np.where(labelled, states, -1)
model = GaussianHMM(3, covariance_type="diag", n_iter=200, random_state=1)
model.fit(X, known_states=known)
print(f"log p(X, labels) = {model.monitor_.history[-1]:.1f}, log p(X) = {model.score(X):.1f}")

fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
colours = np.array(["tab:blue", "tab:orange", "tab:green"])
left.scatter(X[:, 0], X[:, 1], s=4, c=colours[model.predict(X)], alpha=0.4)
left.scatter(
    X[labelled, 0],
    X[labelled, 1],
    s=28,
    c=colours[states[labelled]],
    edgecolors="black",
    linewidths=0.6,
    label="labelled rows (5 %)",
)
left.scatter(*model.means_.T, marker="X", s=160, c=colours, edgecolors="black")
left.set_xlabel("feature 0")
left.set_ylabel("feature 1")
left.set_title("5 % labelled: decoded states, fitted means_ (crosses)")
left.legend(loc="lower right")

positions = np.arange(len(fractions))
right.plot(positions, accuracy, "o-", label="accuracy on unlabelled rows, as fitted")
right.plot(positions, mean_error, "s--", label="largest error of means_, as fitted")
right.axhline(best_permuted, color="grey", lw=0.8, label="no labels, best permutation")
right.set_xticks(positions, [f"{100 * f:g}" for f in fractions])
right.set_xlabel("rows labelled (%)")
right.set_title("state k against label k")
right.legend()
fig.tight_layout()
plt.show()
