"""Gaussian emissions: GaussianHMM and the data and M-step helpers it shares with GMMHMM.

The densities, moments and covariance shapes are in :mod:`skseq.inference.gaussian`.
"""

import numpy as np
from scipy import linalg
from sklearn.utils.validation import validate_data

from .._buffers import work_array
from .._validation import (
    COVARIANCE_TYPES,
    at_fit,
    check_prior_param,
    masked_as_nan,
    optional,
    prior_rule,
)
from .._validation import check_data_scale as _check_data_scale
from ..inference.gaussian import (
    _gaussian_density,
    _moment_features,
    _moments_from_features,
    _partial_moment_features,
    _partial_rows,
    _weighted_moments,
    check_covars,
    compact_covars,
    fill_covars,
    log_gaussian_density,
)
from ..inference.gaussian import _missing_rows as missing_rows
from ._base import BaseHMM, fit_kmeans, gaussian_coordinates

# log_gaussian_density and fill_covars are skseq.inference.gaussian's, still
# importable from here.
__all__ = ["GaussianHMM", "log_gaussian_density", "fill_covars", "COVARIANCE_TYPES"]


def validate_gaussian_X(estimator, X, reset):
    """Float rows; NaN allowed (a missing entry), inf not.

    A masked array's masked entries are NaN too.  When initialising
    (``reset``) at least one entry must be observed; after that an
    all-missing X is valid (e.g. a gap in a stream).
    """
    X = masked_as_nan(X, missing_supported=True, owner=type(estimator).__name__)
    X = validate_data(
        estimator, X, reset=reset, dtype=np.float64, ensure_all_finite="allow-nan", order="C"
    )
    if reset and missing_rows(X).all():
        raise ValueError("Every entry of X is NaN: there is no observed row.")
    return X


def moments_centre(observed, means):
    """The point about which the emission moments are taken: the data mean.

    Computed as a matrix-vector product (numpy's column means of a tall,
    narrow array are several times slower); any point near the data would do.
    Without observed rows, the mean of ``means`` (any shape ending in D).
    """
    n_observed = observed.shape[0]
    if n_observed == 0:
        return np.asarray(means, dtype=np.float64).reshape(-1, observed.shape[1]).mean(axis=0)
    return np.ones(n_observed) @ observed / n_observed


def check_data_scale(observed):
    """Reject data whose squared deviations from the moments' centre overflow.

    The emission statistics are sums of (x - centre)^2 over the rows, with the
    centre near the data mean (:func:`moments_centre`), and the initial
    covariance is the data covariance (the rule: :func:`skseq._validation.check_data_scale`).
    """
    if observed.shape[0]:
        _check_data_scale(observed, moments_centre(observed, None))


def observed_rows(X, n_rows=2):
    """Rows to initialise Gaussian emissions from (k-means, the data covariance).

    The rows of ``X`` without NaN (``X`` itself when it has none), when there
    are at least ``n_rows``; otherwise every row with an observed entry, its
    missing entries filled with their feature's mean over the observed
    values (0 for a feature never observed): an initial value only, which
    EM then corrects.
    """
    nan = np.isnan(X)
    complete = ~nan.any(axis=1)
    if complete.all():
        return X
    if np.count_nonzero(complete) >= n_rows:
        return X[complete]
    rows = X[~nan.all(axis=1)]
    observed = ~np.isnan(rows)
    counts = observed.sum(axis=0)
    sums = np.where(observed, rows, 0.0).sum(axis=0)
    feature_means = np.divide(sums, counts, out=np.zeros(X.shape[1]), where=counts > 0)
    return np.where(observed, rows, feature_means)


def check_positive_semidefinite(matrices, name):
    """Reject prior scale matrices (..., D, D) that are not symmetric positive semidefinite.

    The M step adds them to scatter matrices: one with a negative eigenvalue
    can make a covariance indefinite.
    """
    matrices = np.asarray(matrices, dtype=np.float64)
    scale = max(float(np.max(np.abs(matrices), initial=0.0)), 1e-300)
    if np.max(np.abs(matrices - np.swapaxes(matrices, -1, -2)), initial=0.0) > 1e-8 * scale:
        raise ValueError(f"{name} must be symmetric matrices.")
    if np.min(np.linalg.eigvalsh(matrices), initial=0.0) < -1e-10 * scale:
        raise ValueError(f"{name} must be positive semidefinite (a scalar prior must be >= 0).")


def sample_gaussians(means, full_covars, components, random_state):
    """One draw from N(means[c], full_covars[c]) for each entry c of ``components``."""
    n_features = means.shape[1]
    choleskys = np.stack([linalg.cholesky(c, lower=True) for c in full_covars])
    noise = random_state.standard_normal((len(components), n_features))
    return means[components] + np.einsum("tij,tj->ti", choleskys[components], noise)


def initial_covariance(X, min_covar):
    """Data covariance plus ``min_covar`` on the diagonal (one row: ``min_covar`` only)."""
    n_features = X.shape[1]
    if X.shape[0] < 2:
        return min_covar * np.eye(n_features)
    return np.atleast_2d(np.cov(X.T)) + min_covar * np.eye(n_features)


def distribute_covariance(covariance, covariance_type, n_components):
    """Compact covariances of every component, all equal to one full matrix."""
    if covariance_type == "spherical":
        return np.full(n_components, covariance.diagonal().mean())
    if covariance_type == "diag":
        return np.tile(covariance.diagonal(), (n_components, 1))
    if covariance_type == "full":
        return np.tile(covariance, (n_components, 1, 1))
    return covariance.copy()


def positive_definite_or_previous(new, previous, covariance_type):
    """Keep each new covariance that is valid; fall back to the previous one otherwise.

    A state with almost no responsibility can produce a zero or singular
    covariance; keeping its previous value means parameters never turn NaN.
    """
    if covariance_type in ("spherical", "diag"):
        bad = ~np.isfinite(new) | (new <= 0)
        return np.where(bad, previous, new)
    matrices = new[None] if covariance_type == "tied" else new
    previous_matrices = previous[None] if covariance_type == "tied" else previous
    result = matrices.copy()
    if np.all(np.isfinite(matrices)):
        try:
            np.linalg.cholesky(matrices)  # all at once: the common case, every one valid
            return new.copy()
        except np.linalg.LinAlgError:
            pass
    for index, matrix in enumerate(matrices):
        try:
            if not np.all(np.isfinite(matrix)):
                raise linalg.LinAlgError
            linalg.cholesky(matrix, lower=True)
        except linalg.LinAlgError:
            result[index] = previous_matrices[index]
    return result[0] if covariance_type == "tied" else result


# -- the M step of Gaussian emissions (GaussianHMM's states, GMMHMM's mixture
# components): written once for any leading shape of components ------------


def map_means(post, first, means_prior, means_weight, previous, responsible, centre):
    """The M step's means: (w m0 + sum_t r_t x_t) / (w + sum_t r_t) per component.

    The MAP estimate under a normal prior of mean ``m0`` and precision weight
    ``w`` (w = 0: the weighted mean).  ``post`` (...,) and ``first`` (..., D)
    are the moments sum_t r_t and sum_t r_t x_t about ``centre``, and
    ``means_prior`` is in the same coordinates; the means returned, and
    ``previous``, are in the data's.  ``post`` and ``responsible`` may also
    be per feature (..., D): the weight of each feature's observed entries
    (missing entries drop out).  Components without responsibility, or with
    a non-finite result, keep ``previous``.
    """
    counts = post if post.ndim == first.ndim else post[..., None]
    with np.errstate(invalid="ignore", divide="ignore"):
        means = (means_weight[..., None] * means_prior + first) / (means_weight[..., None] + counts)
    if responsible.ndim != first.ndim:
        responsible = responsible[..., None]
    usable = responsible & np.isfinite(means)
    return np.where(usable, means + centre, previous)


def weighted_scatter(post, first, second, means, means_prior, means_weight, full):
    """Scatter about the updated means plus the normal prior's term, per component.

    S = w (m - m0)(m - m0)^T + sum_t r_t (x_t - m)(x_t - m)^T
      = w (m - m0)(m - m0)^T + second - first m^T - m first^T + post m m^T

    from the weighted moments ``post`` = sum_t r_t (...,), ``first`` =
    sum_t r_t x_t (..., D) and ``second`` = sum_t r_t x_t x_t^T (..., D, D),
    or its diagonal (..., D) when not ``full``, all about one centre in whose
    coordinates ``means`` and ``means_prior`` are given (centred moments keep
    the differences exact).  ``full``: matrices (..., D, D); otherwise their
    diagonals (..., D), and ``post`` may be per feature (..., D), as in
    :func:`map_means`.
    """
    offset = means - means_prior
    if not full:
        counts = post if post.ndim == means.ndim else post[..., None]
        return means_weight[..., None] * offset**2 + second - 2 * means * first + means**2 * counts
    cross = first[..., :, None] * means[..., None, :]
    return (
        means_weight[..., None, None] * offset[..., :, None] * offset[..., None, :]
        + second
        - cross
        - np.swapaxes(cross, -1, -2)
        + means[..., :, None] * means[..., None, :] * post[..., None, None]
    )


def map_covariance(
    covariance_type, scatter, post, prior_scale, prior_count, *, min_count=None, feature_counts=None
):
    """The M step's covariances: (Psi + S) / (nu + N), per covariance type.

    The MAP estimate under an inverse-gamma (diagonal) or inverse-Wishart
    (full) prior of scale ``prior_scale`` Psi and count ``prior_count`` nu
    (Psi = nu = 0: the maximum-likelihood estimate), from the scatter S of
    :func:`weighted_scatter` (diagonals for "diag" and "spherical") and the
    responsibility N = ``post`` of each component.  "spherical": one variance
    from the scatter summed over features, N counted once per feature.
    "tied": the scatter and N summed over the last component axis (one
    matrix for all of them).  ``prior_scale`` and ``prior_count`` broadcast
    against the result (and the reduced N).  ``min_count``: a floor for
    the denominator (hmmlearn's GaussianHMM uses 1e-5 for diagonals).
    ``feature_counts`` (..., D): the weight of each feature's observed
    entries, for "diag" and "spherical" when some are missing (a spherical
    variance then counts each feature's own weight).
    """
    if covariance_type == "spherical":
        count = scatter.shape[-1] * post
        if feature_counts is not None:
            partial = np.any(feature_counts != post[..., None], axis=-1)
            count = np.where(partial, feature_counts.sum(axis=-1), count)
        scatter = scatter.sum(axis=-1)
    elif covariance_type == "diag":
        count = post[..., None] if feature_counts is None else feature_counts
    elif covariance_type == "full":
        count = post[..., None, None]
    else:  # tied
        count = post.sum(axis=-1)[..., None, None]
        scatter = scatter.sum(axis=-3)
    denominator = prior_count + count
    if min_count is not None:
        denominator = np.maximum(denominator, min_count)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (prior_scale + scatter) / denominator


def keep_valid_covariances(new, previous, covariance_type, responsible):
    """``new`` covariances where they are usable, ``previous`` elsewhere.

    A component without responsibility (``responsible`` False; not for
    "tied", which pools them) keeps its previous covariance, as does one
    whose update is not positive definite (see
    :func:`positive_definite_or_previous`).  Any leading shape of components.
    """
    if covariance_type != "tied":
        keep = ~responsible.reshape(responsible.shape + (1,) * (new.ndim - responsible.ndim))
        new = np.where(keep, previous, new)
    if covariance_type in ("spherical", "diag"):
        return positive_definite_or_previous(new, previous, covariance_type)
    n_features = new.shape[-1]
    checked = positive_definite_or_previous(
        new.reshape(-1, n_features, n_features),
        np.reshape(previous, (-1, n_features, n_features)),
        "full",
    )
    return checked.reshape(new.shape)


def feature_counts(post, missing_post):
    """Each feature's weight sum, post - (the weight of its missing entries),
    never below 0 (rounding); exactly ``post`` where nothing is missing."""
    return np.maximum(post[..., None] - missing_post, 0.0)


def gaussian_statistics(post, first, second, missing_post):
    """The emission statistics of Gaussian components from their moments
    (:func:`skseq.inference.gaussian._moments_from_features`'s four):
    ``missing_post`` (diagonal covariances only) is the weight of each
    feature's missing entries."""
    if missing_post is None:
        return {"post": post, "obs": first, "obs*obs.T": second}
    return {"post": post, "obs": first, "obs**2": second, "missing_post": missing_post}


class GaussianHMM(BaseHMM):
    """Hidden Markov model with Gaussian emissions.

    A drop-in replacement for ``hmmlearn.hmm.GaussianHMM`` (same parameters,
    attributes and numbers; pass ``lengths`` by keyword), on Cython kernels,
    with scikit-learn conventions: ``fit(X, y=None, *, lengths=None,
    sequence_ids=None)``, initial values as constructor parameters, ``n_init``
    restarts, ``n_jobs`` threads in the E step, and NaN (or a masked entry
    of a masked array) treated as a missing entry.  A row missing
    throughout is an unobserved time step; a partially observed row counts
    with the marginal density of its observed entries, and EM integrates its
    missing entries out exactly (diagonal covariances: they drop out of
    their features' sums; full and tied: their conditional Gaussian
    expectations, the EM for missing data).  Infinity is an error.  See
    :doc:`/user_guide/hmm`, "Missing entries".

    Parameters
    ----------
    n_components : int, default=1
        Number of hidden states.
    covariance_type : {"diag", "spherical", "full", "tied"}, default="diag"
        "spherical": one variance per state; "diag": a diagonal covariance
        per state; "full": a full covariance per state; "tied": one full
        covariance shared by all states.
    min_covar : float, default=1e-3
        Added to the diagonal of the data covariance used to initialise
        ``covars_``.
    startprob_prior : float or array of shape (n_components,), default=1.0
        Dirichlet concentration (> 0) of the prior on ``startprob_`` (1 = none).
    transmat_prior : float or array of shape (n_components, n_components), default=1.0
        Dirichlet concentration (> 0) of the prior on each row of ``transmat_``.
    means_prior, means_weight : float or array, default=0
        Mean and precision weight (>= 0) of the normal prior on ``means_``.
    covars_prior, covars_weight : float or array, default=1e-2 and 1
        Parameters of the (inverse) Wishart / gamma prior on ``covars_``, as
        in hmmlearn: ``covars_prior`` >= 0 (spherical, diag) or positive
        semidefinite matrices (full, tied).
    algorithm : {"viterbi", "map"}, default="viterbi"
        Decoder used by :meth:`predict`.
    random_state : int, RandomState or None, default=None
        Seeds the k-means initialisation and :meth:`sample`.
    n_iter : int, default=10
        Maximum number of EM iterations.
    tol : float, default=1e-2
        EM stops when the log-likelihood gains less than ``tol``.
    verbose : bool, default=False
        Print the log-likelihood of each iteration (of each
        :meth:`partial_fit` batch, with the rows seen so far) to stderr.
    params, init_params : str, default="stmc"
        Letters of the parameters updated by EM (``params``) and initialised
        from the data before EM (``init_params``): "s" startprob, "t"
        transmat, "m" means, "c" covars.  A parameter left out of
        ``init_params`` keeps the value set on the estimator (hmmlearn style).
    implementation : {"log", "scaling"}, default="log"
        Accepted for hmmlearn compatibility; skseq always runs the scaled
        forward-backward (same results, faster).
    startprob_init, transmat_init, means_init, covars_init : array-like, optional
        Initial values (clone-safe); ``covars_init`` in the compact shape of
        ``covariance_type``: (n_components,), (n_components, n_features),
        (n_components, n_features, n_features) or (n_features, n_features).
        They take precedence over ``init_params``.
    n_init : int, default=1
        Number of initialisations; the one with the best final
        log-likelihood is kept.
    n_jobs : int, default=None
        Threads for the E step over sequences and for the k-means
        initialisation (None: one; -1: all cores).
    acceleration : {"squarem", None}, default=None
        None: plain EM, hmmlearn's iterations one by one.  "squarem": batch
        :meth:`fit` extrapolates along pairs of EM steps (SQUAREM, in
        unconstrained coordinates of the learned parameters), keeping a point
        only when it does not lower the log-likelihood; ``monitor_`` and
        ``tol`` work the same way (see :doc:`/user_guide/hmm`, "Accelerated
        EM").  Stochastic EM is never accelerated.
    learning_method : {"batch", "online"}, default="batch"
        How :meth:`fit` runs EM: classical EM over all sequences, or
        stochastic EM over minibatches of ``batch_size`` whole sequences.
    learning_decay : float, default=0.6
        kappa in the stochastic-EM step ``rho_t = (learning_offset + t) ** -kappa``
        (:meth:`partial_fit` and online fit); in (0.5, 1].
    learning_offset : float, default=0.0
        tau >= 0 in that step.
    total_samples : float, default=None
        N: the running statistics are scaled to N rows for the M step
        (None: to all rows seen so far).  Matters when priors are used.
    batch_size : int, default=32
        Sequences per minibatch when ``learning_method="online"``.

    Attributes
    ----------
    startprob_ : ndarray of shape (n_components,)
    transmat_ : ndarray of shape (n_components, n_components)
    means_ : ndarray of shape (n_components, n_features)
    covars_ : ndarray of shape (n_components, n_features, n_features)
        Full covariance matrices, whatever ``covariance_type`` (as hmmlearn);
        assigning takes the compact shape.
    monitor_ : ConvergenceMonitor
        ``history`` holds the log-likelihood of every EM iteration;
        ``converged`` is hmmlearn's (True at the iteration limit too).
        Present before ``fit``; a monitor assigned to it is kept by ``fit``.
    n_iter_ : int
    converged_ : bool
        Whether EM stopped on its criterion (the gain fell below ``tol``)
        rather than at ``n_iter``.
    n_features_in_ : int
    n_features : int
        hmmlearn's name for the number of features; may be set by hand
        before the parameters (e.g. to :meth:`sample` from them).
    n_batch_iter_ : int
        Stochastic-EM steps taken (by :meth:`partial_fit` or online fit).
    filtered_state_ : ndarray of shape (n_components,)
        After :meth:`partial_fit` or :meth:`filter_stream`: p(z_t | stream so
        far) for the last row seen.
    batch_log_likelihood_ : float
        After :meth:`partial_fit`: the log-likelihood of its batch, under the
        parameters before the step.

    Hand-set parameters (``model.means_ = [[0.0], [3.0]]``) may be any
    array-like; they are stored as float64 arrays and checked where used.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq import GaussianHMM
    >>> rng = np.random.default_rng(0)
    >>> X = np.concatenate([rng.normal(-3, 1, (50, 1)), rng.normal(3, 1, (50, 1))])
    >>> model = GaussianHMM(n_components=2, random_state=0).fit(X, lengths=[100])
    >>> np.sort(model.means_.ravel()).round(0)
    array([-3.,  3.])
    >>> model.predict(X[:3]).shape
    (3,)
    """

    _emission_letters = {"m": "means_", "c": "covars_"}
    _densities_never_zero = True

    # Labelled rows set the initial means; the covariances start data-wide, as
    # without labels (a few rows' scatter would be a degenerate start).
    _letters_from_known_states = "m"

    def __init__(
        self,
        n_components=1,
        covariance_type="diag",
        min_covar=1e-3,
        startprob_prior=1.0,
        transmat_prior=1.0,
        means_prior=0,
        means_weight=0,
        covars_prior=1e-2,
        covars_weight=1,
        algorithm="viterbi",
        random_state=None,
        n_iter=10,
        tol=1e-2,
        verbose=False,
        params="stmc",
        init_params="stmc",
        implementation="log",
        *,
        startprob_init=None,
        transmat_init=None,
        means_init=None,
        covars_init=None,
        n_init=1,
        n_jobs=None,
        acceleration=None,
        learning_method="batch",
        learning_decay=0.6,
        learning_offset=0.0,
        total_samples=None,
        batch_size=32,
    ):
        super().__init__(
            n_components,
            startprob_prior=startprob_prior,
            transmat_prior=transmat_prior,
            algorithm=algorithm,
            random_state=random_state,
            n_iter=n_iter,
            tol=tol,
            verbose=verbose,
            params=params,
            init_params=init_params,
            implementation=implementation,
            startprob_init=startprob_init,
            transmat_init=transmat_init,
            n_init=n_init,
            n_jobs=n_jobs,
            acceleration=acceleration,
            learning_method=learning_method,
            learning_decay=learning_decay,
            learning_offset=learning_offset,
            total_samples=total_samples,
            batch_size=batch_size,
        )
        self.covariance_type = covariance_type
        self.min_covar = min_covar
        self.means_prior = means_prior
        self.means_weight = means_weight
        self.covars_prior = covars_prior
        self.covars_weight = covars_weight
        self.means_init = means_init
        self.covars_init = covars_init

    # -- covariances in hmmlearn's shapes -------------------------------------

    @property
    def covars_(self):
        """Covariances as full matrices of shape (n_components, n_features, n_features).

        Reading always gives full matrices (as hmmlearn); assigning takes the
        compact shape of ``covariance_type``.
        """
        if not hasattr(self, "_covars_"):
            raise AttributeError("covars_ is not set; fit the model or assign covars_.")
        n_features = self._n_features_or_none()
        if n_features is None:
            if self.covariance_type == "spherical":
                raise AttributeError(
                    "Spherical covars_ as full matrices need the number of features: "
                    "set means_ or n_features first."
                )
            n_features = self._covars_.shape[-1]
        return fill_covars(self._covars_, self.covariance_type, self.n_components, n_features)

    @covars_.setter
    def covars_(self, covars):
        self._covars_ = compact_covars(covars, self.covariance_type)

    def _storage_name(self, attribute):
        return "_covars_" if attribute == "covars_" else attribute

    # -- hyperparameters and data -------------------------------------------

    def _parameter_rules(self):
        # covariance_type and min_covar: PARAMETER_RULES (GMMHMM has them too).
        # The (inverse) gamma / Wishart scale must be non-negative for the
        # covariances to stay positive (full and tied: positive semidefinite
        # matrices); covars_weight enters as max(w - 1, 0) (max(w - n_features,
        # 0) for full matrices), so any finite value works.
        diagonal = self.covariance_type in ("spherical", "diag")

        def covars_prior_rule(n_features):
            if diagonal:
                return optional(prior_rule(low=0.0))
            shape = None if n_features is None else (self.n_components, n_features, n_features)

            def check(value, name):
                if value is not None:
                    check_prior_param(value, name)
                if shape is not None:
                    check_positive_semidefinite(self._prior(name, shape), name)

            return check

        return {
            **super()._parameter_rules(),
            "covars_prior": at_fit(covars_prior_rule),
            "covars_weight": at_fit(lambda n_features: optional(prior_rule())),
        }

    def _validate_X(self, X, reset):
        return validate_gaussian_X(self, X, reset)

    # -- emission model -----------------------------------------------------

    def _emission_terms(self, X):
        # Missing rows get log-density 0, partially observed ones the
        # marginal density of their observed entries; the cache is the
        # indices of the latter, for the statistics.
        return self._emissions(shifted=False)(X)[::2]

    def _emissions(self, shifted=True):
        density = _gaussian_density(self.means_, self._covars_, self.covariance_type)
        n_components = self.n_components

        def emissions(X, buffers=None):
            out = work_array(buffers, "log_frameprob", (X.shape[0], n_components))
            partial = _partial_rows(X)
            if not shifted:
                return density(X, None, out, partial), None, partial
            shift = work_array(buffers, "shift", (X.shape[0],))
            return density(X, shift, out, partial), shift, partial

        return emissions

    def _initialize_emissions(self, X, random_state):
        n_components, n_features = self.n_components, X.shape[1]
        observed = observed_rows(X, max(n_components, 2))
        check_data_scale(observed)
        means = self._initial_value("means_")
        if means is None:
            if observed.shape[0] < n_components:
                raise ValueError(
                    f"n_components={n_components} states need at least as many observed "
                    f"rows, got n_samples={observed.shape[0]}."
                )
            means = fit_kmeans(observed, n_components, random_state, self.n_jobs).cluster_centers_
        means = np.array(means, dtype=np.float64)
        if means.shape != (n_components, n_features):
            raise ValueError(
                f"means must have shape ({n_components}, {n_features}), got {means.shape}."
            )
        if not np.all(np.isfinite(means)):
            raise ValueError("means contains NaN or inf.")
        self.means_ = means
        covars = self._initial_value("covars_")
        if covars is None:
            covariance = initial_covariance(observed, self.min_covar)
            covars = distribute_covariance(covariance, self.covariance_type, n_components)
        self._covars_ = check_covars(covars, self.covariance_type, n_components, n_features)
        # The emission statistics are moments about this fixed point (see
        # weighted_moments); fixed, so that partial_fit's statistics add up.
        self._centre = moments_centre(observed, means)

    def _check_emission_parameters(self, n_features):
        means = np.array(self.means_, dtype=np.float64)
        if means.ndim != 2 or means.shape[0] != self.n_components:
            raise ValueError(
                f"means_ must have shape (n_components={self.n_components}, n_features), "
                f"got {means.shape}."
            )
        if n_features is not None and means.shape[1] != n_features:
            raise ValueError(
                f"X has {n_features} features, but the model's means_ have {means.shape[1]}."
            )
        if not np.all(np.isfinite(means)):
            raise ValueError("means_ contains NaN or inf.")
        check_covars(
            self._covars_, self.covariance_type, self.n_components, means.shape[1], "covars_"
        )

    def _ensure_emission_centre(self):
        if not hasattr(self, "_centre"):
            self._centre = np.asarray(self.means_, dtype=np.float64).mean(axis=0)

    def _emission_statistics(self, X, posteriors, cache):
        full = self.covariance_type in ("full", "tied")
        conditional = (self.means_, self._covars_, self.covariance_type)
        return gaussian_statistics(
            *_weighted_moments(X, self._centre, posteriors, full, conditional, cache)
        )

    def _emission_features(self, X, cache):
        full = self.covariance_type in ("full", "tied")
        features = _moment_features(X, self._centre, full)
        features = np.broadcast_to(
            features[:, None, :], (X.shape[0], self.n_components, features.shape[1])
        )
        partial = (_partial_rows(X) if cache is None else cache) if full else ()
        if len(partial):  # the conditional moments depend on the state
            features = features.copy()
            features[partial] = _partial_moment_features(
                X[partial], self._centre, self.means_, self._covars_, self.covariance_type
            )
        return features

    def _statistics_from_features(self, sums):
        full = self.covariance_type in ("full", "tied")
        return gaussian_statistics(*_moments_from_features(sums, self.means_.shape[1], full))

    def _emission_mstep(self, statistics):
        # The statistics are moments about self._centre: work in coordinates
        # centred there (means and prior means shifted alike) and shift back.
        n_components, n_features = self.means_.shape
        centre = self._centre
        post = statistics["post"]
        threshold = 1e-12 * max(post.sum(), 1.0)
        responsible = post > threshold
        full = self.covariance_type in ("full", "tied")
        # Diagonal covariances: each feature's own weight (its missing
        # entries drop out); exactly post where nothing is missing.
        counts = post if full else feature_counts(post, statistics["missing_post"])
        means_prior = self._prior("means_prior", (n_components, n_features)) - centre
        means_weight = self._prior("means_weight", (n_components,))
        if "m" in self.params:
            self.means_ = map_means(
                counts,
                statistics["obs"],
                means_prior,
                means_weight,
                self.means_,
                responsible if full else counts > threshold,
                centre,
            )
        if "c" not in self.params:
            return
        second = statistics["obs*obs.T" if full else "obs**2"]
        means = self.means_ - centre
        scatter = weighted_scatter(
            counts, statistics["obs"], second, means, means_prior, means_weight, full
        )
        # hmmlearn's priors: scale covars_prior, count max(covars_weight - 1, 0)
        # (max(covars_weight - n_features, 0) for matrices).
        covars_weight = np.asarray(self.covars_weight, dtype=np.float64)
        if full:
            covars_prior = self._prior("covars_prior", (n_components, n_features, n_features))
            if self.covariance_type == "tied":
                covars_prior = covars_prior[0]
            weight = np.maximum(covars_weight - n_features, 0)
            covars = map_covariance(self.covariance_type, scatter, post, covars_prior, weight)
        else:
            # The prior is per feature, so a spherical variance is (as in
            # hmmlearn) the mean of the per-feature MAP variances.
            covars_prior = self._prior("covars_prior", (n_components, n_features))
            weight = np.maximum(covars_weight - 1, 0)
            covars = map_covariance(
                "diag", scatter, post, covars_prior, weight, min_count=1e-5, feature_counts=counts
            )
            if self.covariance_type == "spherical":
                # With missing entries, one variance for the pooled features:
                # their scatters over their own (floored) denominators.
                pooled = (covars_prior + scatter).sum(axis=1) / np.maximum(
                    weight + counts, 1e-5
                ).sum(axis=1)
                partial = np.any(statistics["missing_post"] != 0, axis=1)
                covars = np.where(partial, pooled, covars.mean(axis=1))
            else:
                # A feature without observed weight keeps its variance.
                responsible = counts > threshold
        self._covars_ = keep_valid_covariances(
            covars, self._covars_, self.covariance_type, responsible
        )

    def _emission_coordinates(self, X):
        return gaussian_coordinates(self.covariance_type, X)

    def _emission_n_parameters(self):
        n_components, n_features = self.means_.shape
        return {
            "m": n_components * n_features,
            "c": {
                "spherical": n_components,
                "diag": n_components * n_features,
                "full": n_components * n_features * (n_features + 1) // 2,
                "tied": n_features * (n_features + 1) // 2,
            }[self.covariance_type],
        }

    def _sample_emissions(self, states, random_state):
        return sample_gaussians(self.means_, self.covars_, states, random_state)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags
