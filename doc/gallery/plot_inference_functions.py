"""
===========================================
Inference on your own models and parameters
===========================================

The estimators are one way in; the functions of :mod:`skseq.inference` are
another.  They take plain arrays and parameters you choose, validate them,
and run the same kernels — for an emission model skseq does not ship, for
parameters that come from elsewhere, or for a training loop of your own.
Three uses: an HMM with Student-t emissions, a Kalman smoother that bridges
a gap in the observations, and a finite-difference check of the selective
scan's gradient.
"""

# %%
# An HMM with Student-t emissions
# -------------------------------
# :func:`~skseq.inference.hmm_forward_backward` and :func:`~skseq.inference.hmm_viterbi`
# need only the log-densities :math:`\ell_t(j) = \log b_j(x_t)`, so any
# emission model works.  A heavy-tailed series switches between a quiet and a
# turbulent regime; the emissions are Student-t with known scales, and a few
# EM steps of our own re-estimate the transition matrix from the expected
# transition counts the function returns.

import matplotlib.pyplot as plt
import numpy as np
from scipy import stats

from skseq.inference import hmm_forward_backward, hmm_viterbi
from skseq.inference.kalman import LGSSMParameters, kalman_filter, kalman_smoother
from skseq.inference.scan import selective_scan, selective_scan_backward

states = np.repeat([0, 1, 0, 1, 0], [200, 60, 150, 40, 150])
x = stats.t.rvs(df=3, scale=np.where(states == 0, 1.0, 4.0), random_state=1)

log_frame = stats.t.logpdf(x[:, None], df=3, scale=[1.0, 4.0])  # (600, 2)
log_start = np.log([0.5, 0.5])
transmat = np.array([[0.95, 0.05], [0.05, 0.95]])
for _ in range(20):  # EM on the transitions only
    result = hmm_forward_backward(log_start, np.log(transmat), log_frame)
    counts = result.transition_counts  # sum over t of xi_t(i, j)
    transmat = counts / counts.sum(axis=1, keepdims=True)
print("transition matrix:\n", transmat.round(3))

log_prob, path = hmm_viterbi(log_start, np.log(transmat), log_frame)
print("Viterbi path agrees with the true regimes on", f"{np.mean(path == states):.1%}")
turbulent = hmm_forward_backward(log_start, np.log(transmat), log_frame).posteriors[:, 1]

figure, (top, bottom) = plt.subplots(2, 1, figsize=(8, 4.5), sharex=True, layout="constrained")
top.plot(x, color="black", linewidth=0.7)
top.fill_between(
    np.arange(len(x)),
    0,
    1,
    where=states == 1,
    color="tab:red",
    alpha=0.15,
    transform=top.get_xaxis_transform(),
    linewidth=0,
    label="true turbulent regime",
)
top.set_ylabel("x")
top.legend(loc="upper right", fontsize=8)
top.set_title("Student-t HMM through forward_backward and viterbi")
bottom.plot(turbulent, color="tab:red", label="posterior of the turbulent state")
bottom.step(
    np.arange(len(x)), path, where="mid", color="black", linestyle=":", label="Viterbi path"
)
bottom.set_ylabel("probability / state")
bottom.set_xlabel("t")
bottom.legend(loc="center right", fontsize=8)
plt.show()

# %%
# ``result`` also holds the expected start counts, the log-likelihood and the
# one-step predictive densities (see
# :class:`~skseq.inference.HMMForwardBackwardResult`); ``lengths=`` splits the
# rows into several sequences.
#
# Tracking through missing observations (Kalman)
# ----------------------------------------------
# A target moves in the plane with nearly constant velocity; its position is
# observed with noise, lost completely for ten steps, and one coordinate is
# lost at step 35.  The state is (position, velocity) and the model is known,
# so we call :func:`~skseq.inference.kalman.kalman_filter` and
# :func:`~skseq.inference.kalman.kalman_smoother` directly; ``NaN`` marks a
# missing value.

rng = np.random.default_rng(0)
F = np.array([[1.0, 0, 1, 0], [0, 1, 0, 1], [0, 0, 1, 0], [0, 0, 0, 1]])
H = np.array([[1.0, 0, 0, 0], [0, 1, 0, 0]])
Q, R = 0.01 * np.eye(4), 0.25 * np.eye(2)

truth = np.zeros((50, 4))
truth[0] = [0.0, 0.0, 1.0, 0.5]
for t in range(1, 50):
    truth[t] = F @ truth[t - 1] + rng.multivariate_normal(np.zeros(4), Q)
observed = truth[:, :2] + rng.normal(scale=0.5, size=(50, 2))
observed[20:30] = np.nan  # ten steps with no observation
observed[35, 1] = np.nan  # one coordinate missing

parameters = dict(
    transition_matrix=F,
    observation_matrix=H,
    transition_covariance=Q,
    observation_covariance=R,
    initial_state_covariance=10 * np.eye(4),
)
filtered = kalman_filter(LGSSMParameters(**parameters), observed)
smoothed = kalman_smoother(LGSSMParameters(**parameters), observed)

gap = slice(20, 30)
for name, means in (("filtered", filtered.filtered_means), ("smoothed", smoothed.smoothed_means)):
    error = np.sqrt(np.mean((means[gap, :2] - truth[gap, :2]) ** 2))
    print(f"{name}: root-mean-square position error in the gap {error:.3f}")

figure, axes = plt.subplots(figsize=(8, 4.5), layout="constrained")
axes.plot(truth[:, 0], truth[:, 1], color="black", linewidth=1, label="true path")
axes.plot(observed[:, 0], observed[:, 1], "o", markersize=3, color="grey", label="observed")
axes.plot(
    filtered.filtered_means[:, 0],
    filtered.filtered_means[:, 1],
    color="tab:orange",
    label="filtered",
)
axes.plot(
    smoothed.smoothed_means[:, 0], smoothed.smoothed_means[:, 1], color="tab:blue", label="smoothed"
)
axes.plot(*truth[gap, :2].T, "x", color="tab:red", label="true positions in the gap")
axes.set_xlabel("position, first coordinate")
axes.set_ylabel("position, second coordinate")
axes.set_title("Constant-velocity tracking with a ten-step gap")
axes.legend(loc="upper left", fontsize=8)
plt.show()

# %%
# Inside the gap the filter can only extrapolate the last velocity it saw,
# and its error grows; the smoother also uses the observations after the gap
# and interpolates.  Step 35 is updated with its one observed coordinate.
#
# The selective scan and its gradients
# ------------------------------------
# :func:`~skseq.inference.scan.selective_scan` runs the recurrence of
# :ref:`selective_ssm` on arrays shaped (batch, channels, length);
# :func:`~skseq.inference.scan.selective_scan_backward` returns the gradient
# with respect to every input, given the gradient of the loss with respect to
# the output.  For :math:`L = \frac12 \sum o^2` that gradient is the output
# itself; a central finite difference checks one entry of :math:`\partial L /
# \partial A`.

rng = np.random.default_rng(0)
batch, channels, length, S = 2, 3, 50, 4
u = rng.normal(size=(batch, channels, length))
delta = rng.normal(size=u.shape)  # before softplus
A = -np.exp(rng.normal(size=(channels, S)))
B = rng.normal(size=(batch, S, length))  # selective: one B_t per step
C = rng.normal(size=(batch, S, length))
D, z, bias = rng.normal(size=channels), rng.normal(size=u.shape), rng.normal(size=channels)


def loss(A):
    out, _ = selective_scan(u, delta, A, B, C, D, z, bias, delta_softplus=True)
    return 0.5 * np.sum(out**2)


out, _ = selective_scan(u, delta, A, B, C, D, z, bias, delta_softplus=True)
grads = selective_scan_backward(out, u, delta, A, B, C, D, z, bias, delta_softplus=True)
step = np.zeros_like(A)
step[1, 2] = 1e-6
numeric = (loss(A + step) - loss(A - step)) / 2e-6
print(f"dL/dA[1, 2]: backward {grads.dA[1, 2]:.8f}, finite difference {numeric:.8f}")

# %%
# The backward pass recomputes the states it needs from checkpoints instead
# of storing them; ``n_jobs`` splits the (batch, channel) pairs over threads
# in both functions.
