"""Gaussian densities and posterior-weighted moments, on plain arrays.

What the Gaussian emissions of the HMMs (``GaussianHMM``, ``GMMHMM``) are made
of, usable on its own: the log-density of every row under every component,
the weighted moments that are the M step's sufficient statistics, and the
conversions between the compact covariance shapes of the four covariance
types and full matrices (see doc/user_guide/hmm.rst, "Baum–Welch: EM on
summed sufficient statistics").

NaN marks a missing entry of ``X``.  A row that is NaN throughout is a missing
observation: its log-density is 0 (density 1, so it leaves the
forward-backward recursions unchanged) and the moments skip it.  A row with
some entries NaN is partially observed: its density is the marginal density
of its observed entries (the missing ones integrated out exactly), and the
moments take the conditional expectations of the missing entries (see
doc/user_guide/hmm.rst, "Missing entries").  Rows without NaN go through the
kernels alone; the partially observed rows, in numpy, grouped by their
pattern of missing entries.

The public functions validate their arguments; the underscore-prefixed cores
take validated, C-contiguous float64 arrays (what the estimators call).
"""

from functools import lru_cache
from typing import NamedTuple

import numpy as np
from scipy import linalg

from .._kernels import load
from .._validation import COVARIANCE_TYPES
from ._checks import masked_arrays_checked, require_real

_gaussian = load("_gaussian")

__all__ = [
    "log_gaussian_density",
    "GaussianLogDensity",
    "weighted_moments",
    "WeightedMoments",
    "compact_covars_shape",
    "compact_covars",
    "fill_covars",
    "check_covars",
]

_LOG_2PI = np.log(2 * np.pi)


class WeightedMoments(NamedTuple):
    """What :func:`weighted_moments` returns.

    Attributes
    ----------
    weight_sums : ndarray of shape (n_components,)
        sum_t w_tk over the observed rows.
    first : ndarray of shape (n_components, n_features)
        sum_t w_tk y_t, with y_t = x_t - centre.
    second : ndarray of shape (n_components, n_features) or (n_components, n_features, n_features)
        sum_t w_tk y_t^2 (elementwise), or sum_t w_tk y_t y_t^T with ``full``.
    missing_weight_sums : ndarray of shape (n_components, n_features) or None
        Without ``full``: sum_t w_tk over the partially observed rows whose
        entry d is missing (those entries drop out of ``first`` and
        ``second``), so that feature d's weight sum is
        ``weight_sums - missing_weight_sums[:, d]``; zeros without partial
        rows.  None with ``full``.
    """

    weight_sums: np.ndarray
    first: np.ndarray
    second: np.ndarray
    missing_weight_sums: np.ndarray | None = None


# -- covariance shapes ---------------------------------------------------------


def compact_covars_shape(covariance_type, n_components, n_features):
    """Shape of the compact covariances of each covariance type.

    "spherical": one variance per component, (n_components,); "diag": one
    diagonal per component, (n_components, n_features); "full": a matrix per
    component, (n_components, n_features, n_features); "tied": one matrix
    shared by all components, (n_features, n_features).

    Examples
    --------
    >>> from skseq.inference.gaussian import compact_covars_shape
    >>> compact_covars_shape("diag", 3, 2)
    (3, 2)
    """
    return {
        "spherical": (n_components,),
        "diag": (n_components, n_features),
        "full": (n_components, n_features, n_features),
        "tied": (n_features, n_features),
    }[covariance_type]


@masked_arrays_checked()
def fill_covars(covars, covariance_type, n_components, n_features):
    """Full (n_components, n_features, n_features) matrices from compact covariances.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.gaussian import fill_covars
    >>> fill_covars(np.array([1.0, 2.0]), "spherical", 2, 2)[1]
    array([[2., 0.],
           [0., 2.]])
    """
    if covariance_type == "full":
        return covars
    if covariance_type == "diag":
        return np.stack([np.diag(c) for c in covars])
    if covariance_type == "tied":
        return np.tile(covars, (n_components, 1, 1))
    return covars[:, None, None] * np.eye(n_features)[None]


@masked_arrays_checked()
def compact_covars(covars, covariance_type):
    """Covariances in the compact shape of ``covariance_type``.

    Accepts the compact shape, or full matrices (as :func:`fill_covars`
    returns) when they are exactly representable: diagonal for "diag",
    multiples of the identity for "spherical", all equal for "tied".
    Spherical variances may also come as (n_components, 1), (n_components,
    1, 1) or (n_components, 1, 1, 1), the shapes hmmlearn 0.3 accepts (its
    issue 385).  Raises ValueError for full matrices that are not.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.gaussian import compact_covars
    >>> compact_covars(np.array([np.eye(2), 3 * np.eye(2)]), "spherical")
    array([1., 3.])
    """
    covars = np.array(covars, dtype=np.float64)
    if (
        covariance_type == "spherical"
        and 2 <= covars.ndim <= 4
        and covars.shape[1:] == (1,) * (covars.ndim - 1)
    ):
        return covars.reshape(covars.shape[0])
    if covars.ndim != 3 or covariance_type == "full":
        return covars
    diagonals = np.diagonal(covars, axis1=1, axis2=2)
    if covariance_type == "tied":
        if not np.all(covars == covars[:1]):
            raise ValueError("tied covariances given as full matrices must all be equal.")
        return covars[0].copy()
    if not np.all(covars == diagonals[:, :, None] * np.eye(covars.shape[1])):
        raise ValueError(f"{covariance_type} covariances given as full matrices must be diagonal.")
    if covariance_type == "diag":
        return diagonals.copy()
    if not np.all(diagonals == diagonals[:, :1]):
        raise ValueError("spherical covariances given as full matrices must be multiples of I.")
    return diagonals[:, 0].copy()


@masked_arrays_checked()
def check_covars(covars, covariance_type, n_components, n_features, name="covars"):
    """Validate compact covariances: shape, finite, positive (definite).

    Returns them as a float64 array; raises ValueError naming ``name``.

    Examples
    --------
    >>> from skseq.inference.gaussian import check_covars
    >>> check_covars([[1.0, 2.0]], "diag", 1, 2)
    array([[1., 2.]])
    """
    _check_covariance_type(covariance_type)
    shape = compact_covars_shape(covariance_type, n_components, n_features)
    covars = np.array(covars, dtype=np.float64)
    if covars.shape != shape:
        raise ValueError(
            f"{name} for covariance_type={covariance_type!r} must have shape {shape}, "
            f"got {covars.shape}."
        )
    if not np.all(np.isfinite(covars)):
        raise ValueError(f"{name} contains NaN or inf.")
    if covariance_type in ("spherical", "diag"):
        if np.any(covars <= 0):
            raise ValueError(f"{name} must be positive ({covariance_type} variances).")
        return covars
    matrices = covars[None] if covariance_type == "tied" else covars
    for index, matrix in enumerate(matrices):
        if not np.allclose(matrix, matrix.T, rtol=1e-8, atol=1e-12):
            raise ValueError(f"{name}[{index}] is not symmetric.")
        try:
            linalg.cholesky(matrix, lower=True)
        except linalg.LinAlgError:
            raise ValueError(f"{name}[{index}] is not positive definite.") from None
    return covars


def _check_covariance_type(covariance_type):
    if covariance_type not in COVARIANCE_TYPES:
        raise ValueError(
            f"covariance_type must be one of {COVARIANCE_TYPES}, got {covariance_type!r}."
        )


# -- validation of the public functions -----------------------------------------


def _check_rows(X, name="X"):
    """X as a C-contiguous 2-D float64 array; NaN allowed (a missing entry), inf not."""
    array = np.asarray(X)
    require_real(name, array)
    if array.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_samples, n_features), got shape {array.shape}.")
    array = np.ascontiguousarray(array, dtype=np.float64)
    if np.isinf(array).any():
        raise ValueError(f"{name} contains infinity (NaN marks a missing entry).")
    return array


def _check_finite(value, name, shape):
    array = np.asarray(value)
    require_real(name, array)
    array = np.ascontiguousarray(array, dtype=np.float64)
    if array.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {array.shape}.")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} contains NaN or infinity.")
    return array


@lru_cache(maxsize=64)
def _upper_triangle(n_features):
    """``np.triu_indices(n_features)``, made once per size and read-only: the
    E step unpacks every block's moments with it (making the indices costs
    more than using them)."""
    rows, columns = np.triu_indices(n_features)
    rows.flags.writeable = False
    columns.flags.writeable = False
    return rows, columns


# -- densities ---------------------------------------------------------------------


def _has_nan(X):
    """Whether ``X`` has a NaN: one pass without a temporary (a NaN propagates
    through ``min``), so that data without NaN, the common case, pay little."""
    return X.size > 0 and bool(np.isnan(X.min()))


def _rows_with_nan(X):
    """``(candidates, n_missing)``: indices of the rows of ``X`` that may hold
    a NaN, and the number of NaN in each.

    Data without NaN, the common case, cost one pass (:func:`_has_nan`).
    Otherwise a NaN propagates into its row's sum, one matrix-vector product
    (a finite row gives NaN only through inf - inf, and the mask then shows
    it has none).  Returns the NaN count of each candidate row too.
    """
    if not _has_nan(X):
        return np.empty(0, dtype=np.intp), np.empty(0)
    candidates = np.flatnonzero(np.isnan(X @ np.ones(X.shape[1])))
    # Counted by a product: boolean reductions along rows are several times slower.
    return candidates, np.isnan(X[candidates]) @ np.ones(X.shape[1])


def _missing_rows(X):
    """Mask of the rows of ``X`` that are NaN throughout (missing observations)."""
    missing = np.zeros(X.shape[0], dtype=bool)
    candidates, n_missing = _rows_with_nan(X)
    missing[candidates] = n_missing == X.shape[1]
    return missing


def _partial_rows(X):
    """Indices of the partially observed rows of ``X``: some entries NaN, not all."""
    candidates, n_missing = _rows_with_nan(X)
    return candidates[(n_missing > 0) & (n_missing < X.shape[1])]


def _missingness_patterns(observed):
    """``(patterns, groups)``: the distinct rows of the boolean ``observed`` mask
    and, for each, the indices of the rows that have it.

    Up to 62 features a pattern is a bit code, sorted as integers (sorting
    boolean rows as records is several times slower).
    """
    n_features = observed.shape[1]
    if n_features <= 62:
        codes = observed @ (np.int64(1) << np.arange(n_features, dtype=np.int64))
    else:
        codes = np.unique(observed, axis=0, return_inverse=True)[1].ravel()
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    bounds = np.r_[starts, len(order)]
    groups = [order[bounds[i] : bounds[i + 1]] for i in range(len(starts))]
    return observed[order[starts]], groups


def _component_matrices(covars, covariance_type, n_components, n_features):
    """Compact covariances as variances (K, D) ("spherical", "diag") or
    matrices (K, D, D) ("full", "tied")."""
    covars = np.asarray(covars, dtype=np.float64)
    if covariance_type == "spherical":
        return covars[:, None] * np.ones(n_features)
    if covariance_type == "tied":
        return np.broadcast_to(covars, (n_components, n_features, n_features))
    return covars


def _marginal_log_density(X, means, covars, covariance_type, pattern_factors=None):
    """log N(x_o; mu_o, Sigma_oo) of partially observed rows ``X`` (n, D), (n, K).

    The density of each row's observed entries o, the missing ones
    integrated out: diagonal covariances drop the missing features; full
    matrices take the sub-matrix of the observed features (one Cholesky
    factor per missingness pattern and component, kept in the dict
    ``pattern_factors`` when given, for the next blocks of rows under the
    same parameters).  Half the quadratic form is summed, as in the kernel,
    so that it overflows only below -DBL_MAX.
    """
    n_components, n_features = means.shape
    observed = ~np.isnan(X)
    matrices = _component_matrices(covars, covariance_type, n_components, n_features)
    n_observed = np.count_nonzero(observed, axis=1)
    if covariance_type in ("spherical", "diag"):
        centred = np.where(observed[None], X[None] - means[:, None, :], 0.0)  # (K, n, D)
        half_quadratic = ((centred * centred) @ (0.5 / matrices)[:, :, None])[..., 0].T
        log_determinants = observed @ np.log(matrices).T
        return -0.5 * (n_observed[:, None] * _LOG_2PI + log_determinants) - half_quadratic
    log_density = np.empty((n_components, X.shape[0]))
    patterns, groups = _missingness_patterns(observed)
    pattern_factors = {} if pattern_factors is None else pattern_factors
    for pattern, rows in zip(patterns, groups):
        key = pattern.tobytes()
        if key not in pattern_factors:
            choleskys = np.linalg.cholesky(matrices[:, pattern][:, :, pattern])
            # Transposed half-whitening factors (L^-1)^T / sqrt(2), and the log normalisers.
            pattern_factors[key] = (
                np.swapaxes(np.linalg.inv(choleskys), 1, 2) * np.sqrt(0.5),
                -0.5 * pattern.sum() * _LOG_2PI
                - np.sum(np.log(np.diagonal(choleskys, axis1=1, axis2=2)), axis=1),
            )
        whitening_t, log_normalisers = pattern_factors[key]
        whitened = (X[rows][:, pattern][None] - means[:, None, pattern]) @ whitening_t
        log_density[:, rows] = log_normalisers[:, None] - np.sum(whitened * whitened, axis=2)
    return log_density.T


def _conditional_gaussians(X, centre, means, covars, covariance_type):
    """The missing entries' conditional Gaussians, pattern by pattern.

    For partially observed rows ``X`` (n, D) and full covariance matrices
    (the exact E step of a Gaussian with missing entries): the missing
    entries m have the conditional mean mu_m + Sigma_mo Sigma_oo^-1
    (x_o - mu_o) and covariance Sigma_mm - Sigma_mo Sigma_oo^-1 Sigma_om
    under each component.  Yields ``(rows, m, expected, covariance)`` per
    missingness pattern: the rows that have it, its missing features,
    E[y | x_o] of those rows (K, n_rows, D) with y = x - centre, and the
    conditional covariances (K, |m|, |m|), which add to E[y y^T | x_o] in the
    missing block.
    """
    n_components, n_features = means.shape
    matrices = _component_matrices(covars, covariance_type, n_components, n_features)
    patterns, groups = _missingness_patterns(~np.isnan(X))
    for pattern, rows in zip(patterns, groups):
        o, m = np.flatnonzero(pattern), np.flatnonzero(~pattern)
        sigma_oo = matrices[:, o][:, :, o]
        sigma_om = matrices[:, o][:, :, m]
        gain = np.swapaxes(np.linalg.solve(sigma_oo, sigma_om), 1, 2)  # Sigma_mo Sigma_oo^-1
        observed_values = X[rows][:, o]
        deviation = observed_values[None] - means[:, None, o]  # (K, n, p)
        expected = np.empty((n_components, len(rows), n_features))
        expected[:, :, o] = observed_values[None]
        expected[:, :, m] = means[:, None, m] + deviation @ np.swapaxes(gain, 1, 2)
        expected -= centre
        yield rows, m, expected, matrices[:, m][:, :, m] - gain @ sigma_om


def _partial_moment_features(X, centre, means, covars, covariance_type):
    """:func:`_moment_features` of partially observed rows under each component, (n, K, F).

    Diagonal covariances: the observed entries' (1, y, y^2, missing
    indicators), the same for every component (missing entries drop out of
    their feature's sums).  Full matrices: (1, E[y | x_o], upper triangle of
    E[y y^T | x_o]) under each component (:func:`_conditional_gaussians`).
    """
    n_components, n_features = means.shape
    if covariance_type in ("spherical", "diag"):
        features = _moment_features(X, centre, False)
        return np.broadcast_to(features[:, None], (X.shape[0], n_components, features.shape[1]))
    upper = _upper_triangle(n_features)
    features = np.empty((X.shape[0], n_components, 1 + n_features + len(upper[0])))
    features[:, :, 0] = 1.0
    for rows, m, expected, covariance in _conditional_gaussians(
        X, centre, means, covars, covariance_type
    ):
        outer = expected[..., :, None] * expected[..., None, :]
        outer[:, :, m[:, None], m[None, :]] += covariance[:, None]
        features[rows, :, 1 : 1 + n_features] = np.swapaxes(expected, 0, 1)
        features[rows, :, 1 + n_features :] = np.swapaxes(outer[..., upper[0], upper[1]], 0, 1)
    return features


def _partial_moment_sums(X, centre, weights, means, covars, covariance_type):
    """The weighted sums of :func:`_partial_moment_features` over the rows of
    ``X`` with full covariances, (K, F), without forming per-row matrices:
    sum_t w_tk E[y y^T] = E_k^T diag(w_k) E_k plus the conditional
    covariance times the pattern's weight, pattern by pattern."""
    n_components, n_features = means.shape
    first = np.zeros((n_components, n_features))
    second = np.zeros((n_components, n_features, n_features))
    for rows, m, expected, covariance in _conditional_gaussians(
        X, centre, means, covars, covariance_type
    ):
        pattern_weights = weights[rows].T  # (K, n)
        weighted = expected * pattern_weights[:, :, None]
        first += weighted.sum(axis=1)
        second += np.swapaxes(weighted, 1, 2) @ expected
        second[:, m[:, None], m[None, :]] += pattern_weights.sum(axis=1)[:, None, None] * covariance
    upper = _upper_triangle(n_features)
    return np.concatenate(
        [weights.sum(axis=0)[:, None], first, second[:, upper[0], upper[1]]], axis=1
    )


def _log_gaussian_density(X, means, covars, covariance_type, shift=None, out=None):
    """:func:`log_gaussian_density` on validated inputs (no checks).

    With ``shift`` (an array of n_samples) each row is returned minus its
    maximum, which goes to ``shift`` (the frame of forward-backward, fused
    into the same pass).  ``out``, when given, is filled (C-contiguous
    float64 of shape (n_samples, n_components)).
    """
    return _gaussian_density(means, covars, covariance_type)(X, shift, out)


def _gaussian_density(means, covars, covariance_type):
    """:func:`_log_gaussian_density` with the parameters prepared once.

    Returns ``density(X, shift=None, out=None)``; calling it on many blocks of
    rows repeats none of the per-parameter work (inverses, logarithms).
    """
    n_components, n_features = means.shape
    means = np.ascontiguousarray(means, dtype=np.float64)
    covars = np.asarray(covars, dtype=np.float64)
    diagonal = covariance_type in ("spherical", "diag")
    # The kernel sums half the quadratic form, term by term: the 1/2 goes
    # into the factors, so the sum overflows only when the log-density is
    # below -DBL_MAX, not already at half of that.
    if diagonal:
        variances = (
            covars[:, None] * np.ones(n_features) if covariance_type == "spherical" else covars
        )
        factors = np.ascontiguousarray(0.5 / variances)[:, None, :]  # half precisions
        log_normalisers = -0.5 * (n_features * _LOG_2PI + np.sum(np.log(variances), axis=1))
    else:
        matrices = np.broadcast_to(covars, (n_components, n_features, n_features))
        choleskys = np.linalg.cholesky(matrices)
        # W_k = L_k^{-1}, lower triangular.  One batched call: scipy's triangular
        # solve goes through threaded BLAS, which costs milliseconds per tiny
        # matrix when the cores are busy.
        whitening = np.tril(np.linalg.inv(choleskys))
        factors = np.ascontiguousarray(whitening * np.sqrt(0.5))
        log_normalisers = -0.5 * n_features * _LOG_2PI - np.sum(
            np.log(np.diagonal(choleskys, axis1=1, axis2=2)), axis=1
        )
    log_normalisers = np.ascontiguousarray(log_normalisers)
    no_shift = np.empty(0)
    pattern_factors = {}  # per missingness pattern, shared by the blocks of rows

    def density(X, shift=None, out=None, partial=None):
        """``partial``: the indices of the partially observed rows of ``X``
        (:func:`_partial_rows`), when the caller has them."""
        log_density = np.empty((X.shape[0], n_components)) if out is None else out
        overflowed = _gaussian.log_density(
            X,
            means,
            factors,
            diagonal,
            log_normalisers,
            log_density,
            no_shift if shift is None else shift,
            shift is not None,
        )
        if overflowed < 0:
            # The kernel sets partially observed rows, like missing ones, to 0.
            partial = _partial_rows(X) if partial is None else partial
            if partial.size:
                overflowed = _fill_partial_rows(X, partial, log_density, shift)
        if overflowed >= 0:
            raise ValueError(
                "X has a row too far from every Gaussian component for double precision "
                f"(its largest entry in magnitude is {np.nanmax(np.abs(X[overflowed])):.3g}): "
                "its log-density is below -1.8e308 under every state. Rescale X (e.g. "
                "with sklearn.preprocessing.StandardScaler) or refit the model on data "
                "of that scale."
            )
        return log_density

    def _fill_partial_rows(X, partial, log_density, shift):
        """Marginal log-densities of the partially observed rows (shifted by
        their maxima when ``shift`` is given); the first row that overflows
        under every component, or -1."""
        with np.errstate(over="ignore", invalid="ignore"):
            marginal = _marginal_log_density(
                X[partial], means, covars, covariance_type, pattern_factors
            )
        marginal = np.where(np.isnan(marginal), -np.inf, marginal)
        maxima = marginal.max(axis=1)
        impossible = np.flatnonzero(maxima == -np.inf)
        if impossible.size:
            return int(partial[impossible[0]])
        if shift is None:
            log_density[partial] = marginal
        else:
            log_density[partial] = marginal - maxima[:, None]
            shift[partial] = maxima
        return -1

    return density


class GaussianLogDensity(NamedTuple):
    """What :func:`log_gaussian_density` returns.

    Attributes
    ----------
    log_density : ndarray of shape (n_samples, n_components)
        log N(x_t; means[k], covariance k); for a partially observed row the
        marginal density of its observed entries; 0 for a missing row.
    """

    log_density: np.ndarray


@masked_arrays_checked(missing=("X",))
def log_gaussian_density(X, means, covars, covariance_type="full"):
    """log N(x_t; means[k], covariance k) for every row t and component k.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        NaN (or a masked entry of a masked array) marks a missing entry: a
        row with some entries missing gets the marginal log-density of its
        observed entries (the missing ones integrated out), a row missing
        throughout gets 0 under every component.  Infinity is an error.
    means : array-like of shape (n_components, n_features)
    covars : array-like
        Compact covariances of ``covariance_type`` (see
        :func:`compact_covars_shape`), positive definite.
    covariance_type : {"spherical", "diag", "full", "tied"}, default="full"

    Returns
    -------
    GaussianLogDensity
        ``(log_density,)``, of shape (n_samples, n_components).

    Raises
    ------
    ValueError
        On a wrong shape, a non-finite parameter, a covariance that is not
        positive definite, or a row so far from every component that its
        log-density is below -DBL_MAX.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.gaussian import log_gaussian_density
    >>> X = np.array([[0.0, 0.0], [np.nan, 1.0], [np.nan, np.nan]])
    >>> log_gaussian_density(X, np.zeros((1, 2)), np.ones((1, 2)), "diag").log_density.round(4)
    array([[-1.8379],
           [-1.4189],
           [ 0.    ]])
    """
    _check_covariance_type(covariance_type)
    X = _check_rows(X)
    means = np.asarray(means)
    if means.ndim != 2 or means.shape[1] != X.shape[1]:
        raise ValueError(f"means must have shape (n_components, {X.shape[1]}), got {means.shape}.")
    means = _check_finite(means, "means", means.shape)
    covars = check_covars(covars, covariance_type, means.shape[0], X.shape[1])
    return GaussianLogDensity(_log_gaussian_density(X, means, covars, covariance_type))


# -- moments -------------------------------------------------------------------------


def _weighted_moments(X, centre, weights, full, conditional=None, partial=None):
    """:func:`weighted_moments` on validated inputs (no checks), as a plain tuple.

    Returns ``(weight_sums (K,), first (K, D), second, missing_weight_sums)``
    (the last None with ``full``).  The kernel sums the rows without NaN;
    partially observed rows are added here, from
    :func:`_partial_moment_features`, which with ``full`` needs
    ``conditional`` = (means, covars, covariance_type) of the K components.
    ``partial``: the indices of the partially observed rows, when known.
    """
    n_components, n_features = weights.shape[1], X.shape[1]
    n_pairs = n_features * (n_features + 1) // 2 if full else n_features
    moments_t = np.zeros((1 + n_features + n_pairs, n_components))
    _gaussian.weighted_moments(
        X,
        np.ascontiguousarray(centre, dtype=np.float64),
        np.ascontiguousarray(weights, dtype=np.float64),
        moments_t,
        full,
    )
    sums = moments_t.T
    if not full:
        sums = np.concatenate([sums, np.zeros((n_components, n_features))], axis=1)
    partial = _partial_rows(X) if partial is None else partial
    if partial.size:
        if full:
            sums = sums + _partial_moment_sums(X[partial], centre, weights[partial], *conditional)
        else:
            sums = sums + weights[partial].T @ _moment_features(X[partial], centre, False)
    return _moments_from_features(np.ascontiguousarray(sums), n_features, full)


@masked_arrays_checked(missing=("X",))
def weighted_moments(
    X, weights, *, centre=None, full=False, means=None, covars=None, covariance_type="full"
):
    """Weighted moments of y_t = x_t - centre over the observed rows.

    The sufficient statistics of a Gaussian M step: with posterior weights
    w_tk = p(z_t = k | x), the means are ``first / weight_sums`` (plus
    ``centre``) and the covariances follow from ``second``.  A ``centre``
    near the data keeps the covariances computed from these moments free of
    cancellation.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        NaN (or a masked entry of a masked array) marks a missing entry.
        Rows missing throughout are skipped.  In a partially observed row,
        without ``full`` the missing entries drop out of their features'
        sums (``missing_weight_sums`` counts them); with ``full`` they enter
        through their conditional Gaussian expectations under each
        component, which need ``means`` and ``covars``.
    weights : array-like of shape (n_samples, n_components)
    centre : array-like of shape (n_features,), default=None
        The point the moments are taken about; None: the origin.
    full : bool, default=False
        Second moments as matrices y_t y_t^T rather than squares y_t^2.
    means : array-like of shape (n_components, n_features), optional
    covars : array-like, optional
        With ``full``, the components' parameters under which the missing
        entries of partially observed rows are expected: E[x_m | x_o] and
        E[x x^T | x_o], the E step of the exact EM for Gaussians with
        missing entries.  Required when such rows are present.
    covariance_type : {"spherical", "diag", "full", "tied"}, default="full"
        The compact shape of ``covars``.

    Returns
    -------
    WeightedMoments
        ``weight_sums``, ``first``, ``second``, ``missing_weight_sums``.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference.gaussian import weighted_moments
    >>> X = np.array([[1.0], [3.0], [np.nan]])
    >>> moments = weighted_moments(X, np.ones((3, 1)), centre=[2.0])
    >>> moments.weight_sums, moments.first, moments.second
    (array([2.]), array([[0.]]), array([[2.]]))

    A partially observed row: its missing entry drops out of that feature's sums.

    >>> X = np.array([[1.0, 2.0], [3.0, np.nan]])
    >>> moments = weighted_moments(X, np.ones((2, 1)))
    >>> moments.first, moments.missing_weight_sums
    (array([[4., 2.]]), array([[0., 1.]]))
    """
    X = _check_rows(X)
    n_samples, n_features = X.shape
    weights = np.asarray(weights)
    if weights.ndim != 2 or weights.shape[0] != n_samples:
        raise ValueError(
            f"weights must have shape ({n_samples}, n_components), got {weights.shape}."
        )
    weights = _check_finite(weights, "weights", weights.shape)
    centre = np.zeros(n_features) if centre is None else centre
    centre = _check_finite(centre, "centre", (n_features,))
    if not isinstance(full, bool | np.bool_):
        raise TypeError(f"full must be a bool, got {full!r}.")
    conditional = None
    if full and _partial_rows(X).size:
        if means is None or covars is None:
            raise ValueError(
                "X has partially observed rows: with full=True their missing entries "
                "enter through their conditional expectations, which need means and covars."
            )
        _check_covariance_type(covariance_type)
        means = _check_finite(means, "means", (weights.shape[1], n_features))
        covars = check_covars(covars, covariance_type, weights.shape[1], n_features)
        conditional = (means, covars, covariance_type)
    return WeightedMoments(*_weighted_moments(X, centre, weights, bool(full), conditional))


def _unpack_symmetric(packed, n_features):
    """Symmetric (..., D, D) matrices from their upper triangles packed row by row."""
    rows, columns = _upper_triangle(n_features)
    matrices = np.empty(packed.shape[:-1] + (n_features, n_features))
    matrices[..., rows, columns] = packed
    matrices[..., columns, rows] = packed
    return matrices


def _moment_features(X, centre, full):
    """Per-row vectors whose weighted sums are the moments of :func:`weighted_moments`.

    (1, y, y^2, m) without ``full``, with y = x - centre, its missing
    entries 0, and m the indicators of the missing entries of a partially
    observed row; (1, y, upper triangle of y y^T) with ``full``, where
    partially observed rows are zeros too (their features depend on the
    components: :func:`_partial_moment_features`).  Zeros for missing rows.
    These are the features that forward-only smoothing sums
    (:func:`skseq.inference.hmm_forward_smoothing`).
    """
    if not _has_nan(X):
        observed = np.ones(X.shape[0], dtype=bool)
        entries = None
        X = X - centre
    else:
        entries = ~np.isnan(X)
        observed = entries.all(axis=1) if full else entries.any(axis=1)
        X = np.where(entries & observed[:, None], X - centre, 0.0)
    if full:
        rows, columns = _upper_triangle(X.shape[1])
        second = X[:, rows] * X[:, columns]
        blocks = [observed[:, None].astype(np.float64), X, second]
    else:
        missing = np.zeros(X.shape) if entries is None else (~entries & observed[:, None])
        blocks = [observed[:, None].astype(np.float64), X, X * X, missing.astype(np.float64)]
    return np.concatenate(blocks, axis=1)


def _moments_from_features(sums, n_features, full):
    """(weight sums, first moments, second moments, missing weight sums or None)
    from summed :func:`_moment_features`."""
    if full:
        second = _unpack_symmetric(sums[..., 1 + n_features :], n_features)
        return sums[..., 0], sums[..., 1 : 1 + n_features], second, None
    return (
        sums[..., 0],
        sums[..., 1 : 1 + n_features],
        sums[..., 1 + n_features : 1 + 2 * n_features],
        sums[..., 1 + 2 * n_features :],
    )
