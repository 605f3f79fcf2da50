"""
=====================================================
Training a sequence classifier on a stream of batches
=====================================================

The neural models follow :class:`~sklearn.neural_network.MLPClassifier`:
each :meth:`~skseq.neural.SelectiveSSMClassifier.partial_fit` call makes one
pass of minibatch Adam updates over the sequences it is given, and the first
call lists all ``classes``.  The task: each sequence of 24 noisy steps hides
one large spike, up or down, at a random position; the label is the spike's
sign.  A model that reads out at the last step must notice the spike
wherever it occurs and remember it — the selective step size of a Mamba
block lets it do both.  The plot shows the held-out accuracy against the
number of sequences seen.
"""

import matplotlib.pyplot as plt
import numpy as np

from skseq.neural import SelectiveSSMClassifier

rng = np.random.default_rng(0)


def make_batch(n_sequences):
    X = rng.normal(scale=0.3, size=(n_sequences, 24))
    where = rng.integers(0, 24, size=n_sequences)
    sign = rng.choice([-1.0, 1.0], size=n_sequences)
    X[np.arange(n_sequences), where] += 2 * sign
    return X, np.where(sign > 0, "up", "down")


classifier = SelectiveSSMClassifier(
    d_model=16, n_layers=1, d_state=8, learning_rate_init=1e-2, random_state=0
)
X_test, y_test = make_batch(500)
seen, accuracy = [], []
for step in range(40):  # 40 chunks of 256 new sequences
    X_chunk, y_chunk = make_batch(256)
    classifier.partial_fit(X_chunk, y_chunk, classes=["down", "up"])
    seen.append((step + 1) * 256)
    accuracy.append(classifier.score(X_test, y_test))
    if step % 10 == 9:
        print(f"{seen[-1]:6d} sequences seen: held-out accuracy {accuracy[-1]:.3f}")

figure, axes = plt.subplots(figsize=(7, 3.8), layout="constrained")
axes.plot(seen, accuracy, marker="o", markersize=3)
axes.axhline(0.5, color="grey", linestyle=":", label="chance")
axes.set_ylim(0.4, 1.02)
axes.set_xlabel("training sequences seen (one partial_fit call per 256)")
axes.set_ylabel("held-out accuracy")
axes.set_title("SelectiveSSMClassifier on a stream: sign of a hidden spike")
axes.legend(loc="lower right", fontsize=8)
plt.show()

# %%
# Accuracy stays near chance while the network searches, then jumps once it
# has learned to detect the spike and hold it in its state.  Between calls
# the model keeps only its parameters and the Adam moments.
