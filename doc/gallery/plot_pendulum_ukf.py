"""
=================================================
A pendulum tracked by the unscented Kalman filter
=================================================

A pendulum swings with a large amplitude, where :math:`\\sin\\theta` is far
from :math:`\\theta`, and a sensor sees only the horizontal position of its
bob, :math:`\\sin\\theta`, with noise; for twenty steps it sees nothing.  The
additive unscented Kalman filter and its Rauch–Tung–Striebel smoother track
the angle and the angular velocity, which is never observed, with 95 % bands;
the extended Kalman filter, which linearises the same model at the mean, is
drawn beside it.
"""

# %%
# The model
# ---------
# The state is the angle and the angular velocity, :math:`z = (\theta,
# \omega)`, moved by one semi-implicit Euler step of the pendulum's equation
# (which keeps its energy from drifting) plus a little noise, and observed
# through the bob's horizontal position:
#
# .. math::
#
#    \omega_{t+1} = \omega_t - \Delta t\, g \sin\theta_t, \quad
#    \theta_{t+1} = \theta_t + \Delta t\, \omega_{t+1}, \qquad
#    x_t = \sin\theta_t + v_t.
#
# ``swing`` and ``bob`` are written for one state, ``z[0]`` and ``z[1]``;
# they work unchanged on an array of states, one a column, so the filter
# calls them once per step on all its sigma points (``vectorized="auto"``).

import matplotlib.pyplot as plt
import numpy as np

from skseq.lds import AdditiveUnscentedKalmanFilter, ExtendedKalmanFilter

dt, g = 0.05, 9.81


def swing(z):
    omega = z[1] - dt * g * np.sin(z[0])
    return np.array([z[0] + dt * omega, omega])


def bob(z):
    return np.sin(z[:1])


model = dict(
    transition_functions=swing,
    observation_functions=bob,
    transition_covariance=np.diag([1e-6, 1e-4]),
    observation_covariance=[[0.02]],
    initial_state_mean=[1.4, 0.0],
    initial_state_covariance=np.diag([0.05, 0.05]),
)
ukf = AdditiveUnscentedKalmanFilter(**model)
states, X = ukf.sample(200, random_state=1)
X[90:110] = np.nan  # the sensor is blind for twenty steps
time = dt * np.arange(len(X))

# %%
# Filtering and smoothing
# -----------------------
# ``smooth`` runs the filter forward and the smoother backward; ``score`` is
# the filter's log-likelihood, which a user could maximise over the
# covariances.

means, covariances = ukf.smooth(X)
ekf = ExtendedKalmanFilter(**model)
ekf_means, _ = ekf.smooth(X)
for name, estimate in (("UKF", means), ("EKF", ekf_means)):
    rmse = np.sqrt(np.mean((estimate - states) ** 2, axis=0))
    print(f"{name} smoother RMSE: angle {rmse[0]:.3f} rad, velocity {rmse[1]:.3f} rad/s")
print(f"log-likelihood: UKF {ukf.score(X):.1f}, EKF {ekf.score(X):.1f}")

# %%
# The track
# ---------
# The bands are the smoothed means plus and minus 1.96 standard deviations;
# they widen through the gap and close again when the sensor returns.

fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
labels = ("angle θ (rad)", "angular velocity ω (rad/s)")
for row, ax in enumerate(axes[:2]):
    sd = np.sqrt(covariances[:, row, row])
    ax.fill_between(
        time, means[:, row] - 1.96 * sd, means[:, row] + 1.96 * sd, alpha=0.3, label="UKF 95 %"
    )
    ax.plot(time, states[:, row], "k", lw=1, label="true")
    ax.plot(time, means[:, row], "C0", lw=1.5, label="UKF smoother")
    ax.plot(time, ekf_means[:, row], "C3--", lw=1, label="EKF smoother")
    ax.axvspan(time[90], time[109], color="0.9")
    ax.set_ylabel(labels[row])
axes[0].legend(loc="upper right", ncol=2, fontsize=8)
axes[2].plot(time, X[:, 0], ".", ms=3, color="0.3", label="observed sin θ")
axes[2].plot(time, np.sin(states[:, 0]), "k", lw=1, label="true sin θ")
axes[2].axvspan(time[90], time[109], color="0.9", label="no data")
axes[2].set_ylabel("bob position")
axes[2].set_xlabel("time (s)")
axes[2].legend(loc="upper right", ncol=3, fontsize=8)
fig.tight_layout()
plt.show()
