"""Subspace identification of a linear-Gaussian state-space model (canonical variate analysis).

A closed-form, consistent estimate of the model ::

    z_{t+1} = F z_t + w_t,     w_t ~ N(0, Q)
    x_t     = H z_t + d + v_t, v_t ~ N(0, R)

from its observations alone: no likelihood, no iterations, no starting
values.  :class:`skseq.lds.LinearGaussianSSM` starts EM from it
(``init="subspace"``); the mathematics is in the user guide
(``doc/user_guide/lgssm.rst``, "Subspace initialisation").
"""

import warnings
from typing import NamedTuple

import numpy as np

from .._sequences import sequence_offsets
from .._validation import check_scalar_param
from ._checks import masked_arrays_checked
from .kalman import check_observations

__all__ = ["SubspaceEstimate", "subspace_identification"]

# Eigenvalues of a covariance below this fraction of its largest are treated
# as zero (the whitening) or lifted to it (the noise covariances returned).
_RELATIVE_EIGENVALUE_FLOOR = 1e-10


class SubspaceEstimate(NamedTuple):
    """What :func:`subspace_identification` returns.

    The state basis is that of the canonical variates of the past: the
    estimated states have unit sample covariance.
    """

    transition_matrix: np.ndarray
    """F, shape (n_state, n_state)."""
    observation_matrix: np.ndarray
    """H, shape (n_features, n_state)."""
    transition_covariance: np.ndarray
    """Q, shape (n_state, n_state), symmetric positive definite."""
    observation_covariance: np.ndarray
    """R, shape (n_features, n_features), symmetric positive definite."""
    observation_offset: np.ndarray
    """d, shape (n_features,): the mean of the observed rows."""
    canonical_correlations: np.ndarray
    """All canonical correlations between future and past, in decreasing order
    (shape (min(n_lags * n_features, ...),)); the first n_state span the state."""
    n_lags: int
    """The number of block rows i of each Hankel matrix (past and future)."""


def _default_n_lags(n_state, n_features, n_rows):
    """The default horizon i: the past and the future each hold i rows.

    ``max(2 m, 8)`` with ``m = ceil(n_state / n_features) + 1``, at most what
    the data afford (about ``n_rows / (4 n_features)``, so that the
    covariance of a window of i rows is estimated from at least twice as many
    windows as it has entries along a side), and never below ``m``: the
    shift invariance of the observability matrix needs ``(i - 1) n_features
    >= n_state``.
    """
    minimum = -(-n_state // n_features) + 1
    wanted = max(2 * minimum, 8)
    affordable = max(int(n_rows // (4 * n_features)), 1)
    return max(min(wanted, affordable), minimum)


def _roots(covariance):
    """``(W, W^+)``: ``W C W^T = I`` on the range of C, and ``W^+ W^+^T = C``.

    Directions of C whose variance is below 1e-10 of the largest (a constant
    feature, features that are exact copies) are dropped: ``W`` then has
    fewer rows than C (and ``W^+`` fewer columns).
    """
    eigenvalues, eigenvectors = np.linalg.eigh(0.5 * (covariance + covariance.T))
    keep = eigenvalues > _RELATIVE_EIGENVALUE_FLOOR * max(eigenvalues[-1], 0.0)
    root = np.sqrt(eigenvalues[keep])
    return (eigenvectors[:, keep] / root).T, eigenvectors[:, keep] * root


def _noise_correlation(n_windows, n_past, n_future):
    """The largest canonical correlation of independent samples of these sizes.

    The upper edge of Wachter's limiting law of the squared sample canonical
    correlations between independent Gaussian vectors of dimensions a and b
    from N samples is ``(sqrt(c1 (1 - c2)) + sqrt(c2 (1 - c1)))^2`` with
    ``c1 = a / N``, ``c2 = b / N``.  Overlapping windows are dependent, so
    the noise level of the data is, if anything, higher.
    """
    c1, c2 = n_past / n_windows, n_future / n_windows
    if c1 + c2 >= 1:
        return 1.0
    return float(np.sqrt(c1 * (1 - c2)) + np.sqrt(c2 * (1 - c1)))


def _positive_definite(covariance):
    """Symmetrised, its eigenvalues lifted to at least 1e-10 of the largest.

    A residual covariance is positive semi-definite up to rounding, and
    singular when the data determine a direction exactly (fewer noise
    sources than dimensions): lifting the small eigenvalues keeps it a valid
    covariance without changing it where it is well conditioned.
    """
    covariance = 0.5 * (covariance + covariance.T)
    eigenvalues, eigenvectors = np.linalg.eigh(covariance)
    largest = eigenvalues[-1]
    floor = _RELATIVE_EIGENVALUE_FLOOR * largest if largest > 0 else 1.0
    if eigenvalues[0] >= floor:
        return covariance
    lifted = np.maximum(eigenvalues, floor)
    covariance = (eigenvectors * lifted) @ eigenvectors.T
    return 0.5 * (covariance + covariance.T)


def _windows(X, offsets, n_lags):
    """The columns of the block Hankel matrices, as rows: one per complete window.

    A window at time t of a sequence holds the rows t - i .. t + i - 1 (i =
    ``n_lags``): the past ``p_t = (x_{t-1}, ..., x_{t-i})`` and the future
    ``f_t = (x_t, ..., x_{t+i-1})``.  Windows with a missing entry are left
    out.  Returns the pasts, the futures, the time of each window (its row in
    ``X``) and whether the window of the next row of the same sequence is
    also complete (the pairs (t, t+1) of the transition regression).
    """
    n_features = X.shape[1]
    pasts, futures, times = [], [], []
    for start, stop in zip(offsets[:-1], offsets[1:]):
        n_windows = stop - start - 2 * n_lags + 1
        if n_windows <= 0:
            continue
        rows = X[start:stop]
        # window j (time start + i + j): rows j .. j + 2i - 1 of the sequence
        index = np.arange(n_windows)[:, None] + np.arange(2 * n_lags)[None, :]
        block = rows[index]  # (n_windows, 2i, n_features)
        complete = ~np.isnan(block).any(axis=(1, 2))
        block = block[complete]
        past = block[:, n_lags - 1 :: -1].reshape(-1, n_lags * n_features)
        future = block[:, n_lags:].reshape(-1, n_lags * n_features)
        pasts.append(past)
        futures.append(future)
        times.append(start + n_lags + np.flatnonzero(complete))
    if not pasts:
        empty = np.zeros((0, n_lags * n_features))
        return empty, empty, np.zeros(0, dtype=np.intp), np.zeros(0, dtype=bool)
    times = np.concatenate(times)
    # consecutive windows: the next window is the next row of the same sequence
    sequence = np.searchsorted(offsets, times, side="right")
    has_next = np.zeros(times.size, dtype=bool)
    has_next[:-1] = (np.diff(times) == 1) & (np.diff(sequence) == 0)
    return np.concatenate(pasts), np.concatenate(futures), times, has_next


@masked_arrays_checked(missing=("X",))
def subspace_identification(X, n_state, *, lengths=None, n_lags=None):
    """Estimate F, H, Q, R, d of a linear-Gaussian state-space model by subspace identification.

    Canonical variate analysis (CVA, the stochastic subspace method of
    Larimore; N4SID with CCA weights): the canonical correlation analysis
    of the past and the future windows of the data (the columns of their
    block Hankel matrices) gives, at rank ``n_state``, the extended
    observability matrix ``[H; HF; ...; HF^{i-1}]`` and the states (the part
    of the past that predicts the future); H is its first block, F follows
    from its shift invariance, and Q and R are the covariances of the
    residuals of the states' transitions and of the observations.  F and H
    are consistent estimates (up to a change of the state basis) and no
    likelihood is maximised, so the estimate is a starting point for EM that
    does not depend on an initial guess.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Observations of all sequences, concatenated in time order.  NaN (or a
        masked entry) marks a missing value: a window that holds one is left
        out of the estimate (the rest of the sequence is used).
    n_state : int
        The order k of the state.
    lengths : array-like of int, optional
        Lengths of the concatenated sequences; one sequence if omitted.  A
        sequence shorter than ``2 * n_lags`` rows contributes no window.
    n_lags : int, optional
        i, the number of rows in the past and in the future windows; at least
        ``ceil(n_state / n_features) + 1``.  Default: ``max(2 m, 8)`` with
        ``m = ceil(n_state / n_features) + 1``, at most about
        ``n_samples / (4 n_features)``.

    Returns
    -------
    SubspaceEstimate
        ``transition_matrix``, ``observation_matrix``,
        ``transition_covariance``, ``observation_covariance``,
        ``observation_offset``, ``canonical_correlations``, ``n_lags``.

    Raises
    ------
    ValueError
        When the windows cannot determine ``n_state`` states: ``(n_lags - 1)
        * n_features < n_state``, fewer complete windows than ``2 * n_lags *
        n_features + 2`` (short or gappy sequences), or a past whose
        covariance has rank below ``n_state`` (e.g. constant data).

    Warns
    -----
    UserWarning
        When the ``n_state``-th canonical correlation is no larger than the
        largest that independent data of this size give (the upper edge of
        Wachter's law): the data do not support ``n_state`` states, and the
        surplus state directions are noise.

    Notes
    -----
    With the centred data, the past ``p_t = (x_{t-1}, ..., x_{t-i})`` and
    the future ``f_t = (x_t, ..., x_{t+i-1})`` have sample covariances
    ``S_pp``, ``S_ff``, ``S_fp``.  The SVD ``S_ff^{-1/2} S_fp S_pp^{-1/2} =
    U diag(s) V^T`` gives the canonical correlations ``s``; with ``s_k``
    the first k of them, the observability matrix is ``O = S_ff^{1/2} U_k
    s_k^{1/2}`` and the states ``z_t = s_k^{1/2} V_k^T S_pp^{-1/2} p_t``.  H
    is the first block row of O, ``F = O_up^+ O_down`` (O without its last,
    resp. first, block row), divided by its spectral radius when that
    exceeds 1 (least squares on finite data can make a unit root explosive),
    ``R`` the covariance of ``x_t - H z_t`` and
    ``Q`` that of ``z_{t+1} - F z_t`` over consecutive complete windows
    (the noise of the innovation form, the steady-state Kalman predictor),
    lifted to positive definiteness.  The user guide has the derivation.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.subspace import subspace_identification
    >>> rng = np.random.default_rng(0)
    >>> z = np.zeros(2000)
    >>> for t in range(1, 2000):
    ...     z[t] = 0.9 * z[t - 1] + rng.normal()
    >>> X = (z + rng.normal(scale=0.5, size=2000))[:, None]
    >>> estimate = subspace_identification(X, 1)
    >>> round(float(estimate.transition_matrix[0, 0]), 1)
    0.9
    """
    X = check_observations(X)
    n_samples, n_features = X.shape
    n_state = check_scalar_param(n_state, "n_state", "int", low=1)
    offsets = sequence_offsets(n_samples, lengths=lengths)
    if n_lags is None:
        n_lags = _default_n_lags(n_state, n_features, n_samples)
    n_lags = check_scalar_param(n_lags, "n_lags", "int", low=1)
    if (n_lags - 1) * n_features < n_state:
        raise ValueError(
            f"n_lags={n_lags} windows of {n_features} feature(s) determine at most "
            f"{(n_lags - 1) * n_features} states, fewer than n_state={n_state}; raise n_lags."
        )

    observed = ~np.isnan(X)
    counts = observed.sum(axis=0)
    mean = np.where(observed, X, 0.0).sum(axis=0) / np.maximum(counts, 1)
    centred = X - mean

    past, future, times, has_next = _windows(centred, offsets, n_lags)
    n_windows, width = past.shape[0], n_lags * n_features
    if n_windows < 2 * width + 2:
        raise ValueError(
            f"Subspace identification with n_lags={n_lags} needs at least {2 * width + 2} "
            f"complete windows of {2 * n_lags} consecutive rows, and the data have "
            f"{n_windows} (short sequences or missing values); give longer sequences or "
            "a smaller n_lags."
        )

    whiten_past, _ = _roots(past.T @ past / n_windows)
    whiten_future, future_root = _roots(future.T @ future / n_windows)
    if whiten_past.shape[0] < n_state:
        raise ValueError(
            f"The past windows span {whiten_past.shape[0]} direction(s), fewer than "
            f"n_state={n_state}: the data cannot determine {n_state} states."
        )
    cross = whiten_future @ (future.T @ past / n_windows) @ whiten_past.T
    left, correlations, right = np.linalg.svd(cross, full_matrices=False)
    noise = _noise_correlation(n_windows, whiten_past.shape[0], whiten_future.shape[0])
    if correlations.size < n_state or correlations[n_state - 1] <= noise:
        warnings.warn(
            f"The data support fewer than n_state={n_state} states: canonical correlations "
            f"{np.array2string(correlations[: n_state + 1], precision=3)}, of which those "
            f"below {noise:.3f} are what independent data of this size give; the surplus "
            "state directions are noise.",
            UserWarning,
            stacklevel=2,
        )
    weights = np.sqrt(correlations[:n_state])
    # The extended observability matrix [H; HF; ...; HF^{i-1}] and the states, in one
    # basis: S_fp = observability @ (weights V_k^T S_pp^{-1/2}) S_pp^{1/2} at rank k.
    observability = future_root @ (left[:, :n_state] * weights)
    states = past @ (weights[:, None] * (right[:n_state] @ whiten_past)).T  # (n_windows, k)

    # Shift invariance: blocks 2..i of the observability matrix are blocks 1..i-1 times F.
    observation_matrix = observability[:n_features]
    transition_matrix = np.linalg.lstsq(
        observability[:-n_features], observability[n_features:], rcond=None
    )[0]
    # On finite data the least squares can give an explosive F (a unit root estimated
    # at 1.06, say), under which a filter started from a diffuse prior overflows.
    radius = np.max(np.abs(np.linalg.eigvals(transition_matrix)))
    if radius > 1.0:
        transition_matrix = transition_matrix / radius
    residual = centred[times] - states @ observation_matrix.T
    observation_covariance = _positive_definite(residual.T @ residual / n_windows)

    current, following = states[has_next], states[np.flatnonzero(has_next) + 1]
    if current.shape[0] <= n_state:
        raise ValueError(
            f"Only {current.shape[0]} pairs of consecutive complete windows: too few to "
            f"estimate a transition of {n_state} states."
        )
    residual = following - current @ transition_matrix.T
    transition_covariance = _positive_definite(residual.T @ residual / current.shape[0])
    return SubspaceEstimate(
        transition_matrix,
        observation_matrix,
        transition_covariance,
        observation_covariance,
        mean,
        correlations,
        n_lags,
    )
