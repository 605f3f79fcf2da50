"""
============================================================
Choosing ``n_components`` by cross-validation over sequences
============================================================

How many hidden states?  :class:`~sklearn.model_selection.GridSearchCV`
answers with the held-out log-likelihood of each candidate, but only if the
folds keep sequences whole: a random split of the rows would cut sequences
into pieces and let a model see parts of its test sequences while training.
:class:`~sklearn.model_selection.GroupKFold` with the sequence labels as
groups splits by sequence, and scikit-learn's metadata routing hands the same
labels (``sequence_ids``) to ``fit`` and ``score``.  The plot shows the
held-out score of each number of states next to the BIC of a fit on all the
data.
"""

# %%
# Data: twelve sequences of a three-state model
# ---------------------------------------------
# Each sequence has 80 rows; ``ids`` labels each row with its sequence.

import warnings

import matplotlib.pyplot as plt
import numpy as np
import sklearn
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, GroupKFold

from skseq import GaussianHMM

truth = GaussianHMM(n_components=3)
truth.startprob_ = np.full(3, 1 / 3)
truth.transmat_ = np.array([[0.90, 0.05, 0.05], [0.05, 0.90, 0.05], [0.05, 0.05, 0.90]])
truth.means_ = np.array([[-3.0], [0.0], [3.0]])
truth.covars_ = np.ones((3, 1))
n_sequences, length = 12, 80
X = np.concatenate([truth.sample(length, random_state=seed)[0] for seed in range(n_sequences)])
ids = np.repeat(np.arange(n_sequences), length)

# %%
# The search
# ----------
# Routing is switched on once; then ``groups=ids`` goes to the splitter and
# ``sequence_ids=ids`` is split along with ``X`` and routed to ``fit`` on the
# training part and to ``score`` on the test part (skseq's latent-state models
# request it by default).  The default score is the held-out log-likelihood.
# ``n_init=3`` restarts EM from three k-means initialisations in every fit.

sklearn.set_config(enable_metadata_routing=True)
candidates = [1, 2, 3, 4, 5, 6]
search = GridSearchCV(
    GaussianHMM(n_iter=100, n_init=3, random_state=0),
    {"n_components": candidates},
    cv=GroupKFold(n_splits=4),
)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ConvergenceWarning)
    search.fit(X, groups=ids, sequence_ids=ids)
mean_score = search.cv_results_["mean_test_score"]
std_score = search.cv_results_["std_test_score"]
print("held-out log-likelihood per fold:", mean_score.round(1))
print("best:", search.best_params_)

# %%
# BIC of the same candidates, fitted on all twelve sequences:

bic = []
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ConvergenceWarning)
    for k in candidates:
        model = GaussianHMM(n_components=k, n_iter=100, n_init=3, random_state=0)
        bic.append(model.fit(X, sequence_ids=ids).bic(X, sequence_ids=ids))
print("BIC:", np.round(bic, 1))
sklearn.set_config(enable_metadata_routing=False)

figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8), layout="constrained")
left.errorbar(candidates, mean_score, yerr=std_score, marker="o", capsize=3)
left.axvline(3, color="grey", linestyle=":", label="true number of states")
left.set_xlabel("n_components")
left.set_ylabel("held-out log-likelihood (mean over folds)")
left.set_title("GridSearchCV, GroupKFold over sequences")
left.legend(loc="lower right", fontsize=8)
right.plot(candidates, bic, marker="o", color="tab:red")
right.axvline(3, color="grey", linestyle=":")
right.set_xlabel("n_components")
right.set_ylabel("BIC (lower is better)")
right.set_title("BIC on all sequences")
plt.show()

# %%
# The held-out log-likelihood rises steeply up to the true three states and
# barely moves after: extra states only split the existing ones, and their
# small gain on the test folds is within the spread between folds (the error
# bars are one standard deviation over the four folds).  Read the whole curve
# rather than trusting the maximum alone; BIC, which charges every extra
# state for its parameters, has its minimum at three.  Because
# hyperparameters and starting values (``means_init``, ``transmat_init``, …)
# are constructor parameters, every candidate and every fold starts from the
# same place.  See :ref:`sklearn_tools` for routing in pipelines.
