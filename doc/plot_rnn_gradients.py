"""Draw doc/user_guide/rnn_gradient_norms.png: vanishing and exploding gradients of an Elman RNN.

For several initial spectral radii of ``W_h``, one ElmanRNNRegressor layer of
width 64 is trained for one epoch on white-noise sequences of 200 steps, and
``gradient_norms`` gives ``||dh_T / dh_t||`` for every lag ``T - t``; the plot
shows their geometric mean over 32 sequences, with ``rho**(T - t)`` (rho the
spectral radius of the trained ``W_h``) dotted.  Needs matplotlib; takes a few seconds.  The doc
build does not run it (it only includes the committed PNG).

Run ``python doc/plot_rnn_gradients.py`` from the repository root.
"""

import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402

from skseq.neural import ElmanRNNRegressor  # noqa: E402

OUTPUT = Path(__file__).resolve().parent / "user_guide" / "rnn_gradient_norms.png"
RADII = [0.5, 0.8, 1.0, 1.2, 1.5]
SEQ_LEN = 200


def main():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(64, SEQ_LEN))
    y = np.cumsum(X, axis=1) / np.sqrt(np.arange(1, SEQ_LEN + 1))
    lags = np.arange(SEQ_LEN)
    figure, axes = plt.subplots(figsize=(7.0, 4.2), dpi=110)
    colours = plt.cm.viridis(np.linspace(0.0, 0.9, len(RADII)))
    for radius, colour in zip(RADII, colours, strict=True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model = ElmanRNNRegressor(
                d_model=64, n_layers=1, init_spectral_radius=radius, max_iter=1, random_state=0
            ).fit(X, y)
        norms = model.gradient_norms(X[:32])[:, 0]
        with np.errstate(divide="ignore"):
            typical = np.exp(np.mean(np.log(norms), axis=0))
        rho = model.spectral_radius_[0]
        label = f"ρ(W_h) = {rho:.2f}"
        axes.semilogy(lags, typical, color=colour, label=label)
        axes.semilogy(lags, rho**lags, color=colour, linestyle=":", linewidth=1)
        print(f"{label}: ||dh_T/dh_t|| at T - t = 10, 50, 199: {typical[[10, 50, 199]]}")
    axes.set_ylim(1e-30, 1e6)
    axes.set_xlim(0, SEQ_LEN - 1)
    axes.set_xlabel("lag T − t (steps)")
    axes.set_ylabel("‖∂h_T / ∂h_t‖₂  (geometric mean)")
    axes.set_title("Elman RNN, width 64: gradient through time (dotted: ρ^(T−t))")
    axes.legend(loc="lower left", fontsize=8)
    axes.grid(True, which="major", alpha=0.3)
    figure.tight_layout()
    figure.savefig(OUTPUT)
    print(f"wrote {OUTPUT}")


if __name__ == "__main__":
    main()
