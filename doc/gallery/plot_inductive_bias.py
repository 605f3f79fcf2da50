"""
=====================================================
Inductive bias against data: next-symbol prediction
=====================================================

Sequences of 50 symbols are sampled from a known
:class:`~skseq.CategoricalHMM` (3 sticky states, 4 symbols).  Each model
learns from ``n`` of them and predicts every next symbol of held-out
sequences, p(x_{t+1} | x_1..x_t); the score is the mean log-loss in nats per
symbol (:ref:`studies`).  The HMM fitted by EM, the model class of the data,
predicts with :meth:`~skseq.CategoricalHMM.predict_next_proba`; the neural
classifiers, of about 5 300 weights each and trained on next-symbol targets,
with ``predict_log_proba``.  The floor is the log-loss of the true model; the
stationary symbol frequencies, which ignore the past, give the level of a
model that learnt nothing about time.

Fitting five models at six sizes and three seeds takes several minutes, too
long for the docs' build, so this example plots the results that
``benchmarks/inductive_bias.py`` saved (``python benchmarks/inductive_bias.py
--save doc/gallery/data/inductive_bias.json``, committed with the example);
the benchmark's code shows how each number is computed.
"""

# %%
# The cached study
# ----------------
# Mean log-loss over the seeds (draws of the training set and of the initial
# weights) at each training-set size.

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

try:
    here = Path(__file__).resolve().parent
except NameError:  # run interactively
    here = Path("doc/gallery").resolve()
study = json.loads((here / "data" / "inductive_bias.json").read_text(encoding="utf-8"))
sizes = np.array(study["settings"]["sizes"])
floor, stationary = study["true_log_loss"], study["stationary_log_loss"]

print(f"true model {floor:.4f} nats, stationary frequencies {stationary:.4f} nats")
print(f"{'model':20s} {'weights':>7s} " + " ".join(f"{f'n={n}':>8s}" for n in sizes))
for result in study["models"].values():
    means = np.mean(result["log_loss"], axis=1)
    print(
        f"{result['label']:20s} {result['n_weights']:7d} "
        + " ".join(f"{value:8.4f}" for value in means)
    )

# %%
# Log-loss against the number of training sequences
# --------------------------------------------------
# Left: the log-loss, with the floor (true model) and the past-blind level.
# Right: the excess over the floor, on a logarithmic scale.  Error bars are
# one standard deviation over the seeds.

figure, (left, right) = plt.subplots(1, 2, figsize=(10.0, 4.2))
for result in study["models"].values():
    losses = np.array(result["log_loss"])
    mean, spread = losses.mean(axis=1), losses.std(axis=1)
    left.errorbar(sizes, mean, yerr=spread, marker="o", capsize=3, label=result["label"])
    excess = np.maximum(losses - floor, 1e-5)  # fitted models may tie the floor
    right.errorbar(sizes, excess.mean(axis=1), yerr=excess.std(axis=1), marker="o", capsize=3)
left.axhline(floor, color="black", linestyle="--", label="true model")
left.axhline(stationary, color="grey", linestyle=":", label="stationary frequencies")
left.set_xscale("log")
left.set_xlabel("training sequences")
left.set_ylabel("next-symbol log-loss (nats)")
left.legend(fontsize="small")
right.set_xscale("log")
right.set_yscale("log")
right.set_xlabel("training sequences")
right.set_ylabel("excess over the true model (nats)")
figure.suptitle("Inductive bias against data")
figure.tight_layout()
plt.show()
