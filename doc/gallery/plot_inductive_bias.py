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

The tuned protocol gives every neural model the same small search at every
size (learning rate over three values times gradient clipping on or off; the
Elman RNN also its initial spectral radius, the Transformer also a smaller
learning rate), chosen on validation sequences with seed 0, then fitted with
seeds 1, 2 and 3 for the test log-loss; the HMM keeps EM with 3 restarts.
Those 318 fits took about 500 CPU seconds, too long for the docs' build, so
this example plots what ``benchmarks/inductive_bias.py --tune`` saved (one
record per fit in ``doc/gallery/data/studies/inductive_bias/``, summarised
by ``--summary doc/gallery/data/inductive_bias_tuned.json``), next to the
untuned run (one recipe for all, ``--save doc/gallery/data/inductive_bias.json``).
"""

# %%
# The cached study
# ----------------
# Mean test log-loss over the three final seeds at each training-set size,
# the hyperparameters the search chose, and the CPU seconds of each model
# (search and final runs).

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

try:
    here = Path(__file__).resolve().parent
except NameError:  # sphinx-gallery runs the script in doc/gallery/; or run from the root
    here = Path.cwd() if (Path.cwd() / "data").is_dir() else Path("doc/gallery").resolve()
untuned = json.loads((here / "data" / "inductive_bias.json").read_text(encoding="utf-8"))
tuned = json.loads((here / "data" / "inductive_bias_tuned.json").read_text(encoding="utf-8"))
sizes = np.array(untuned["settings"]["sizes"])
floor, stationary = untuned["true_log_loss"], untuned["stationary_log_loss"]
assert tuned["complete"], "the tuned study has runs left"


def final_losses(model):
    """The test log-loss of the final seeds, as (sizes, seeds)."""
    return np.array([tuned["models"][model]["final"][str(n)]["values"] for n in sizes])


print(f"true model {floor:.4f} nats, stationary frequencies {stationary:.4f} nats")
print(f"{'model':20s} {'CPU s':>6s} " + " ".join(f"{f'n={n}':>8s}" for n in sizes))
for name, result in untuned["models"].items():
    means = final_losses(name).mean(axis=1)
    cpu = tuned["models"][name]["cpu_seconds"]
    print(f"{result['label']:20s} {cpu:6.0f} " + " ".join(f"{value:8.4f}" for value in means))
    for n in sizes[[0, -1]]:
        print(f"    chosen at n={n}: {tuned['models'][name]['chosen'][str(n)]}")

# %%
# Log-loss against the number of training sequences
# --------------------------------------------------
# Left: the tuned log-loss (error bars: one standard deviation over the final
# seeds), the untuned run's means as faint dashed lines, the floor (true
# model) and the past-blind level.  Right: the tuned excess over the floor,
# on a logarithmic scale.

figure, (left, right) = plt.subplots(1, 2, figsize=(10.0, 4.2))
for name, result in untuned["models"].items():
    losses = final_losses(name)
    mean, spread = losses.mean(axis=1), losses.std(axis=1)
    line = left.errorbar(sizes, mean, yerr=spread, marker="o", capsize=3, label=result["label"])
    color = line.lines[0].get_color()
    before = np.mean(result["log_loss"], axis=1)
    left.plot(sizes, before, color=color, linestyle="--", alpha=0.4, linewidth=1)
    excess = np.maximum(losses - floor, 1e-5)  # fitted models may tie the floor
    right.errorbar(
        sizes, excess.mean(axis=1), yerr=excess.std(axis=1), marker="o", capsize=3, color=color
    )
left.plot([], [], color="grey", linestyle="--", alpha=0.4, label="untuned (means)")
left.axhline(floor, color="black", linestyle="--", label="true model")
left.axhline(stationary, color="grey", linestyle=":", label="stationary frequencies")
left.set_xscale("log")
left.set_ylim(floor - 0.01, 1.50)
left.set_xlabel("training sequences")
left.set_ylabel("next-symbol log-loss (nats)")
left.legend(fontsize="small")
right.set_xscale("log")
right.set_yscale("log")
right.set_xlabel("training sequences")
right.set_ylabel("excess over the true model (nats)")
figure.suptitle("Inductive bias against data (tuned: search per size, 3 final seeds)")
figure.tight_layout()
plt.show()
