"""
=====================================================================
Vanishing and exploding gradients of the Elman RNN (spectral radius)
=====================================================================

Back-propagation through time multiplies one Jacobian
:math:`\\operatorname{diag}(1 - h_t^2)\\, W_h` per step, so the gradient that
reaches step :math:`t` from step :math:`T` decays or grows roughly like
:math:`\\rho(W_h)^{T - t}`, :math:`\\rho` the spectral radius of the
recurrent matrix (:ref:`rnn`).  For five initial spectral radii, one
:class:`~skseq.neural.ElmanRNNRegressor` layer of width 64 is trained for one
epoch on white-noise sequences of 200 steps, and
:meth:`~skseq.neural.ElmanRNNRegressor.gradient_norms` gives
:math:`\\|\\partial h_T / \\partial h_t\\|_2` for every lag :math:`T - t`.  The
plot shows their geometric mean over 32 sequences, with
:math:`\\rho^{T - t}` dotted.
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.legend_handler import HandlerTuple
from sklearn.exceptions import ConvergenceWarning

from skseq.neural import ElmanRNNRegressor

radii = [0.5, 0.8, 1.0, 1.2, 1.5]
seq_len = 200
rng = np.random.RandomState(0)
X = rng.normal(size=(64, seq_len))
y = np.cumsum(X, axis=1) / np.sqrt(np.arange(1, seq_len + 1))  # running mean, rescaled
lags = np.arange(seq_len)

figure, axes = plt.subplots(figsize=(9.5, 4.8), layout="constrained")
# Five distinct colours, each used by one radius's measured curve and its dotted
# reference; the legend shows both line styles side by side in that colour.
colours = [f"C{index}" for index in range(len(radii))]
handles, labels = [], []
for radius, colour in zip(radii, colours):
    with warnings.catch_warnings():
        # one epoch is all this needs: the gradients at the initial scale
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = ElmanRNNRegressor(
            d_model=64, n_layers=1, init_spectral_radius=radius, max_iter=1, random_state=0
        ).fit(X, y)
    norms = model.gradient_norms(X[:32])[:, 0]  # (sequences, lags) of layer 0
    typical = np.exp(np.mean(np.log(norms), axis=0))
    rho = model.spectral_radius_[0]
    label = f"ρ(W_h) = {rho:.2f}"
    (measured,) = axes.semilogy(lags, typical, color=colour, linewidth=2)
    (reference,) = axes.semilogy(lags, rho**lags, color=colour, linestyle=":", linewidth=1.5)
    handles.append((measured, reference))
    labels.append(label)
    print(f"{label}: ||dh_T/dh_t|| at T - t = 10, 50, 199: {typical[[10, 50, 199]]}")
axes.set_ylim(1e-30, 1e6)
axes.set_xlim(0, seq_len - 1)
axes.set_xlabel("lag T − t (steps)")
axes.set_ylabel("‖∂h_T / ∂h_t‖₂  (geometric mean over 32 sequences)")
axes.set_title("Elman RNN, width 64: gradient through time (dotted: ρ^(T−t))")
figure.legend(
    handles,
    labels,
    handler_map={tuple: HandlerTuple(ndivide=None, pad=0.6)},
    handlelength=5,
    loc="outside right upper",
    title="solid: measured\ndotted: ρ^(T−t)",
    fontsize=9,
)
axes.grid(True, which="major", alpha=0.3)
plt.show()

# %%
# What the figure shows:
#
# * the decay is geometric (straight lines on the log scale) and its rate is
#   set by the spectral radius: from about :math:`10^{-4}` after 10 steps at
#   :math:`\rho = 0.5` to about :math:`0.2` at :math:`\rho = 1`;
# * every curve lies *below* :math:`\rho^{T - t}`: the ``tanh`` slopes are
#   below one, so even :math:`\rho \approx 1` vanishes over 200 steps;
# * above one the dotted lines explode but the gradients do not: the units
#   saturate instead, and the gradient stays of order one for tens of steps —
#   the "edge of chaos" where plain RNNs remember longest.  Training clips the
#   gradient of each minibatch to ``max_grad_norm`` against the occasional
#   explosion.
