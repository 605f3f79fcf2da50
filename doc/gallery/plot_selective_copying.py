"""
=============================================================
Selective copying: selective SSM, S4D, Elman RNN, Transformer
=============================================================

The selective-copying task of the Mamba paper at CPU scale (:ref:`studies`):
data tokens sit at random positions among noise tokens, and after them the
model must output the data tokens in order, ignoring the noise.  No fixed
convolution kernel picks out tokens at varying positions, so a linear
time-invariant SSM (:class:`~skseq.neural.S4DClassifier`) cannot select by
content; the selective SSM (:class:`~skseq.neural.SelectiveSSMClassifier`)
decides from each input whether to store it.  The Elman RNN
(:class:`~skseq.neural.ElmanRNNClassifier`) and the Transformer
(:class:`~skseq.neural.TransformerClassifier`) complete the comparison; all
four have about 20 000 weights and see the same stream of fresh sequences.

Training the four models takes several minutes, too long for the docs'
build, so this example plots the results that
``benchmarks/selective_copying.py`` saved (``python
benchmarks/selective_copying.py --save
doc/gallery/data/selective_copying.json``, committed with the example) and
the summary of its tuned protocol (the same search for every model, then three
final seeds at lengths 80, 160 and 320:
``doc/gallery/data/selective_copying_tuned.json``); the benchmark's code shows
how each number is computed.
"""

# %%
# The cached study
# ----------------
# Per-token accuracy at the marker steps of 2000 sequences never seen in
# training, after the whole budget, and the time spent in ``partial_fit``.

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

try:
    here = Path(__file__).resolve().parent
except NameError:  # sphinx-gallery runs the script in doc/gallery/; or run from the root
    here = Path.cwd() if (Path.cwd() / "data").is_dir() else Path("doc/gallery").resolve()
study = json.loads((here / "data" / "selective_copying.json").read_text(encoding="utf-8"))
task, models = study["task"], study["models"]

print(
    f"{task['n_noise']} noise + {task['n_data']} data steps, then {task['n_data']} markers "
    f"(length {task['seq_len']}), alphabet {task['n_symbols']}"
)
print(f"{'model':15s} {'weights':>8s} {'sequences':>10s} {'accuracy':>9s} {'CPU s':>7s}")
for result in models.values():
    print(
        f"{result['label']:15s} {result['n_weights']:8d} {result['sequences_seen'][-1]:10d} "
        f"{result['test_accuracy']:9.3f} {result['train_cpu_seconds']:7.0f}"
    )

# %%
# Accuracy against sequences seen
# -------------------------------
# The validation accuracy (256 held-out sequences) after every pass of fresh
# sequences.  Chance is one in the alphabet's size.

figure, axes = plt.subplots(figsize=(7.0, 4.2))
for result in models.values():
    axes.plot(result["sequences_seen"], result["validation_accuracy"], label=result["label"])
axes.axhline(1 / task["n_symbols"], color="grey", linestyle=":", label="chance")
axes.set_xlabel("training sequences seen")
axes.set_ylabel("per-token accuracy at the markers")
axes.set_ylim(0, 1.02)
axes.set_title("Selective copying")
axes.legend(loc="center right", bbox_to_anchor=(1.0, 0.36))
figure.tight_layout()
plt.show()

# %%
# The tuned study: accuracy against length
# ----------------------------------------
# With the same search for every model (chosen on validation sequences at
# length 80 with seed 0) and three final seeds at each length
# (``python benchmarks/selective_copying.py --tune``, then ``--summary
# doc/gallery/data/selective_copying_tuned.json``): test accuracy at the
# markers against the sequence length, the mean with one standard deviation
# as error bars and each seed as a dot.

tuned = json.loads((here / "data" / "selective_copying_tuned.json").read_text(encoding="utf-8"))
assert tuned["complete"], "the tuned study has runs left"
figure, axes = plt.subplots(figsize=(8.4, 4.2))
for offset, (name, result) in zip(np.linspace(-4, 4, len(models)), models.items()):
    final = tuned["models"][name]["final"]
    lengths = sorted(int(length) for length in final)
    values = np.array([final[str(length)]["values"] for length in lengths])
    shifted = np.array(lengths) + offset
    line = axes.errorbar(
        shifted, values.mean(axis=1), yerr=values.std(axis=1), marker="o", capsize=3,
        label=result["label"],
    )
    axes.scatter(np.repeat(shifted, values.shape[1]), values.ravel(), s=10,
                 color=line[0].get_color(), alpha=0.5)
    print(f"{result['label']:15s} chosen {tuned['models'][name]['chosen']}")
    for length, row in zip(lengths, values):
        spread = f"{row.mean():.3f} ± {row.std():.3f}"
        print(f"    length {length:3d}: {spread}  seeds {np.round(row, 3)}")
axes.axhline(1 / task["n_symbols"], color="grey", linestyle=":", label="chance")
axes.set_xticks(lengths)
axes.set_xlabel("sequence length (8 data tokens, 8 markers, the rest noise)")
axes.set_ylabel("test accuracy at the markers")
axes.set_ylim(0, 1.05)
axes.set_title("Selective copying, tuned (3 final seeds per length)")
axes.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
figure.tight_layout()
plt.show()
