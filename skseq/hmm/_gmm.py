"""Gaussian-mixture emissions: GMMHMM."""

import numpy as np
from scipy.special import logsumexp

from .._validation import at_fit, check_prior_param, integer_rule, optional, prior_rule
from ..inference.gaussian import (
    _log_gaussian_density,
    _missing_rows,
    _moment_features,
    _moments_from_features,
    _partial_moment_features,
    _partial_rows,
    _weighted_moments,
    check_covars,
    fill_covars,
)
from ._base import BaseHMM, dirichlet_map, fit_kmeans, gaussian_coordinates
from ._gaussian import (
    check_data_scale,
    check_positive_semidefinite,
    distribute_covariance,
    feature_counts,
    initial_covariance,
    keep_valid_covariances,
    map_covariance,
    map_means,
    moments_centre,
    observed_rows,
    sample_gaussians,
    validate_gaussian_X,
    weighted_scatter,
)

__all__ = ["GMMHMM"]


def gmm_covars_shape(covariance_type, n_components, n_mix, n_features):
    """Shape of GMMHMM covariances (hmmlearn's): "tied" is one matrix per state."""
    return {
        "spherical": (n_components, n_mix),
        "diag": (n_components, n_mix, n_features),
        "full": (n_components, n_mix, n_features, n_features),
        "tied": (n_components, n_features, n_features),
    }[covariance_type]


class GMMHMM(BaseHMM):
    """Hidden Markov model whose emissions are Gaussian mixtures.

    A drop-in replacement for ``hmmlearn.hmm.GMMHMM``.  Each state emits from
    a mixture of ``n_mix`` Gaussians.  NaN marks a missing entry, as in
    :class:`GaussianHMM`: a row missing throughout is an unobserved time
    step, a partially observed row counts with the marginal density of its
    observed entries under each mixture component, and EM integrates its
    missing entries out exactly, per mixture component.

    Parameters
    ----------
    n_components : int, default=1
        Number of hidden states.
    n_mix : int, default=1
        Number of mixture components per state.
    min_covar : float, default=1e-3
        Added to the diagonal of the data covariance used to initialise ``covars_``.
    startprob_prior, transmat_prior : float or array, default=1.0
        Dirichlet priors, as in :class:`GaussianHMM`.
    weights_prior : float or array of shape (n_components, n_mix), default=1.0
        Dirichlet prior (> 0) on the mixture weights of each state.
    means_prior, means_weight : float or array, default=0.0
        Normal prior on the component means.
    covars_prior, covars_weight : float or array, optional
        Prior on the covariances; ``None`` takes hmmlearn's defaults for the
        covariance type, the flattest priors, which are also the lower bounds
        of ``covars_weight`` (full, tied) and ``covars_prior`` (diag).
    algorithm, random_state, n_iter, tol, verbose, implementation
        As in :class:`GaussianHMM`.
    covariance_type : {"diag", "spherical", "full", "tied"}, default="diag"
        "tied": one full covariance per state, shared by its components.
    params, init_params : str, default="stmcw"
        "s", "t", "m" means, "c" covars, "w" weights.
    startprob_init, transmat_init, weights_init, means_init, covars_init : array-like, optional
        Initial values (clone-safe).
    n_init : int, default=1
    n_jobs : int, default=None
    acceleration : {"squarem", None}, default=None
        None: plain EM (hmmlearn's iterations); "squarem": batch EM
        accelerated by SQUAREM, as in :class:`GaussianHMM`.
    learning_method, learning_decay, learning_offset, total_samples, batch_size
        Stochastic EM, as in :class:`GaussianHMM`.

    Attributes
    ----------
    weights_ : ndarray of shape (n_components, n_mix)
    means_ : ndarray of shape (n_components, n_mix, n_features)
    covars_ : ndarray
        (n_components, n_mix) spherical, (n_components, n_mix, n_features)
        diag, (n_components, n_mix, n_features, n_features) full,
        (n_components, n_features, n_features) tied.
    startprob_, transmat_, monitor_, n_iter_, converged_, n_features_in_
    n_features, n_batch_iter_, filtered_state_, batch_log_likelihood_
        As in :class:`GaussianHMM`.

    Notes
    -----
    The M step maximises the expected complete log-likelihood jointly: the
    covariance scatter is taken around the *updated* means.  hmmlearn takes
    it around the means of the E step, which is not the maximiser; weights
    and means agree with hmmlearn exactly.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq import GMMHMM
    >>> rng = np.random.default_rng(0)
    >>> X = np.concatenate([rng.normal(0, 1, (80, 2)), rng.normal(6, 1, (80, 2))])
    >>> model = GMMHMM(n_components=2, n_mix=2, random_state=0).fit(X)
    >>> model.means_.shape
    (2, 2, 2)
    """

    _emission_letters = {"m": "means_", "c": "covars_", "w": "weights_"}
    _densities_never_zero = True

    # Labelled rows set the initial means; the covariances start data-wide, as
    # without labels (a few rows' scatter would be a degenerate start).
    _letters_from_known_states = "m"

    def __init__(
        self,
        n_components=1,
        n_mix=1,
        min_covar=1e-3,
        startprob_prior=1.0,
        transmat_prior=1.0,
        weights_prior=1.0,
        means_prior=0.0,
        means_weight=0.0,
        covars_prior=None,
        covars_weight=None,
        algorithm="viterbi",
        covariance_type="diag",
        random_state=None,
        n_iter=10,
        tol=1e-2,
        verbose=False,
        params="stmcw",
        init_params="stmcw",
        implementation="log",
        *,
        startprob_init=None,
        transmat_init=None,
        weights_init=None,
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
        self.n_mix = n_mix
        self.min_covar = min_covar
        self.weights_prior = weights_prior
        self.means_prior = means_prior
        self.means_weight = means_weight
        self.covars_prior = covars_prior
        self.covars_weight = covars_weight
        self.covariance_type = covariance_type
        self.weights_init = weights_init
        self.means_init = means_init
        self.covars_init = covars_init

    def _parameter_rules(self):
        # covariance_type and min_covar: PARAMETER_RULES (GaussianHMM has them too).
        return {
            **super()._parameter_rules(),
            "n_mix": integer_rule(low=1),
            "covars_prior": at_fit(self._covars_prior_rule),
            "covars_weight": at_fit(self._covars_weight_rule),
        }

    def _validate_X(self, X, reset):
        return validate_gaussian_X(self, X, reset)

    # -- priors with hmmlearn's defaults ------------------------------------

    # hmmlearn's covariance priors default (None) to the flattest prior of
    # each covariance type; values below those make the M step's
    # denominator smaller than a component's responsibility (negative for
    # a rarely used one).  The spherical default breaks that rule itself
    # (it counts n_mix where the denominator counts n_features), so there
    # only finiteness is required.

    def _covars_prior_rule(self, n_features):
        """covars_prior: >= -1.5 for diagonal covariances; positive semidefinite
        scale matrices for full and tied ones; None: hmmlearn's default."""
        low = -1.5 if self.covariance_type == "diag" else None

        def check(value, name):
            if value is None:
                return None
            check_prior_param(value, name, low=low)
            if self.covariance_type in ("full", "tied") and n_features is not None:
                matrices = np.asarray(value, dtype=np.float64)
                if matrices.ndim < 2:
                    matrices = np.broadcast_to(matrices, (n_features, n_features))
                check_positive_semidefinite(matrices, name)
            return value

        return check

    def _covars_weight_rule(self, n_features):
        """covars_weight: at least the flattest prior's value of the covariance type."""
        if n_features is None:  # type alone
            return optional(prior_rule())
        low = {
            "full": -(n_features + 2.0),
            "tied": -(self.n_mix + n_features + 1.0),
            "diag": 0.0,
            "spherical": 0.0,
        }.get(self.covariance_type)
        return optional(prior_rule(low=low))

    def _covariance_priors(self):
        n_components, n_mix, n_features = self.means_.shape
        defaults = {
            "full": (0.0, -(1.0 + n_features + 1.0)),
            "tied": (0.0, -(n_mix + n_features + 1.0)),
            "diag": (-1.5, 0.0),
            "spherical": (-(n_mix + 2.0) / 2.0, 0.0),
        }[self.covariance_type]
        prior = defaults[0] if self.covars_prior is None else self.covars_prior
        weight = defaults[1] if self.covars_weight is None else self.covars_weight
        shapes = {
            "full": ((n_components, n_mix, n_features, n_features), (n_components, n_mix)),
            "tied": ((n_components, n_features, n_features), (n_components,)),
            "diag": ((n_components, n_mix, n_features), (n_components, n_mix, n_features)),
            "spherical": ((n_components, n_mix), (n_components, n_mix)),
        }[self.covariance_type]
        return (
            np.broadcast_to(np.asarray(prior, dtype=np.float64), shapes[0]),
            np.broadcast_to(np.asarray(weight, dtype=np.float64), shapes[1]),
        )

    # -- initialisation -------------------------------------------------------

    def _initialize_emissions(self, X, random_state):
        n_components, n_mix, n_features = self.n_components, self.n_mix, X.shape[1]
        observed = observed_rows(X, max(n_components * n_mix, 2))
        check_data_scale(observed)
        if observed.shape[0] < n_components * n_mix and self._initial_value("means_") is None:
            raise ValueError(
                f"n_components * n_mix = {n_components * n_mix} components need at least as "
                f"many observed rows, got n_samples={observed.shape[0]}."
            )
        covariance = initial_covariance(observed, self.min_covar)
        weights = self._initial_value("weights_")
        if weights is None:
            weights = np.full((n_components, n_mix), 1.0 / n_mix)
        weights = np.array(weights, dtype=np.float64)
        if weights.shape != (n_components, n_mix):
            raise ValueError(
                f"weights must have shape ({n_components}, {n_mix}), got {weights.shape}."
            )
        if np.any(weights < 0) or not np.allclose(weights.sum(axis=1), 1.0, atol=1e-8):
            raise ValueError("weights must be non-negative with rows summing to 1.")
        self.weights_ = weights
        means = self._initial_value("means_")
        if means is None:
            means = self._kmeans_means(observed, covariance, random_state)
        means = np.array(means, dtype=np.float64)
        if means.shape != (n_components, n_mix, n_features):
            raise ValueError(
                f"means must have shape ({n_components}, {n_mix}, {n_features}), got {means.shape}."
            )
        if not np.all(np.isfinite(means)):
            raise ValueError("means contains NaN or inf.")
        self.means_ = means
        covars = self._initial_value("covars_")
        if covars is None:
            if self.covariance_type == "tied":
                covars = np.tile(covariance, (n_components, 1, 1))
            else:
                flat = distribute_covariance(covariance, self.covariance_type, n_components * n_mix)
                covars = flat.reshape(
                    gmm_covars_shape(self.covariance_type, n_components, n_mix, n_features)
                )
        covars = np.array(covars, dtype=np.float64)
        shape = gmm_covars_shape(self.covariance_type, n_components, n_mix, n_features)
        if covars.shape != shape:
            raise ValueError(
                f"covars for covariance_type={self.covariance_type!r} must have shape {shape}, "
                f"got {covars.shape}."
            )
        flat_type, flat = self._flat_covars(covars)
        check_covars(flat, flat_type, flat.shape[0], n_features)
        self.covars_ = covars
        # Emission statistics are moments about this fixed point (no cancellation).
        self._centre = moments_centre(observed, means)

    def _check_emission_parameters(self, n_features):
        n_components, n_mix = self.n_components, self.n_mix
        weights = np.array(self.weights_, dtype=np.float64)
        means = np.array(self.means_, dtype=np.float64)
        if weights.shape != (n_components, n_mix):
            raise ValueError(
                f"weights_ must have shape ({n_components}, {n_mix}), got {weights.shape}."
            )
        if np.any(weights < 0) or not np.allclose(weights.sum(axis=1), 1.0, atol=1e-8):
            raise ValueError("weights_ must be non-negative with rows summing to 1.")
        if means.ndim != 3 or means.shape[:2] != (n_components, n_mix):
            raise ValueError(
                f"means_ must have shape ({n_components}, {n_mix}, n_features), got {means.shape}."
            )
        if n_features is not None and means.shape[2] != n_features:
            raise ValueError(
                f"X has {n_features} features, but the model's means_ have {means.shape[2]}."
            )
        if not np.all(np.isfinite(means)):
            raise ValueError("means_ contains NaN or inf.")
        covars = np.array(self.covars_, dtype=np.float64)
        shape = gmm_covars_shape(self.covariance_type, n_components, n_mix, means.shape[2])
        if covars.shape != shape:
            raise ValueError(f"covars_ must have shape {shape}, got {covars.shape}.")
        flat_type, flat = self._flat_covars(covars)
        check_covars(flat, flat_type, flat.shape[0], means.shape[2], "covars_")

    def _ensure_emission_centre(self):
        if not hasattr(self, "_centre"):
            self._centre = np.asarray(self.means_, dtype=np.float64).mean(axis=(0, 1))

    def _kmeans_means(self, observed, covariance, random_state):
        """k-means states, then k-means mixture components within each state."""
        n_components, n_mix = self.n_components, self.n_mix
        labels = fit_kmeans(observed, n_components, random_state, self.n_jobs).labels_
        means = []
        for state in range(n_components):
            members = observed[labels == state]
            if members.shape[0] >= n_mix:
                kmeans = fit_kmeans(members, n_mix, random_state, self.n_jobs)
                means.append(kmeans.cluster_centers_)
            else:
                centre = members.mean(axis=0) if members.shape[0] else observed.mean(axis=0)
                means.append(random_state.multivariate_normal(centre, covariance, size=n_mix))
        return np.stack(means)

    # -- emission model -------------------------------------------------------

    def _flat_covars(self, covars=None):
        """Covariances of the n_components * n_mix components, in a flat layout."""
        covars = self.covars_ if covars is None else covars
        n_mix = self.n_mix
        if self.covariance_type == "tied":
            return "full", np.repeat(covars, n_mix, axis=0)
        n_flat = covars.shape[0] * covars.shape[1]
        return self.covariance_type, covars.reshape((n_flat,) + covars.shape[2:])

    def _emission_terms(self, X):
        n_components, n_mix, n_features = self.means_.shape
        flat_type, flat_covars = self._flat_covars()
        # Missing rows get log-density 0 for every component (and partially
        # observed ones the marginal density of their observed entries).
        log_component = _log_gaussian_density(
            X, self.means_.reshape(-1, n_features), flat_covars, flat_type
        ).reshape(-1, n_components, n_mix)
        with np.errstate(divide="ignore"):
            log_component += np.log(self.weights_)
        log_frameprob = logsumexp(log_component, axis=2)
        missing = _missing_rows(X)
        log_frameprob[missing] = 0.0
        return log_frameprob, (log_component, log_frameprob, missing)

    def _component_responsibilities(self, X, cache):
        """p(mixture component | state, x_t): (n_samples, n_components, n_mix), 0 when missing."""
        log_component, log_frameprob, missing = cache
        with np.errstate(invalid="ignore", under="ignore"):
            within_state = np.exp(log_component - log_frameprob[:, :, None])
        within_state = np.nan_to_num(within_state, nan=0.0)
        within_state[missing] = 0.0
        return within_state

    def _conditional_parameters(self):
        """(means, covars, covariance_type) of the flat mixture components, under
        which partially observed rows' missing entries are expected."""
        flat_type, flat_covars = self._flat_covars()
        return self.means_.reshape(-1, self.means_.shape[2]), flat_covars, flat_type

    def _emission_statistics(self, X, posteriors, cache):
        within_state = self._component_responsibilities(X, cache)
        responsibilities = (posteriors[:, :, None] * within_state).reshape(X.shape[0], -1)
        full = self.covariance_type in ("full", "tied")
        moments = _weighted_moments(
            X, self._centre, responsibilities, full, self._conditional_parameters()
        )
        return self._gmm_statistics(*moments)

    def _gmm_statistics(self, post_mix, first, second, missing_post):
        n_components, n_mix, n_features = self.means_.shape
        post_mix = post_mix.reshape(n_components, n_mix)
        full = self.covariance_type in ("full", "tied")
        statistics = {
            "post_sum": post_mix.sum(axis=1),
            "post_mix_sum": post_mix,
            "obs": first.reshape(n_components, n_mix, n_features),
            ("obs*obs.T" if full else "obs**2"): second.reshape(
                (n_components, n_mix) + second.shape[1:]
            ),
        }
        if missing_post is not None:
            statistics["missing_post"] = missing_post.reshape(n_components, n_mix, n_features)
        return statistics

    def _emission_features(self, X, cache):
        n_components, n_mix, _ = self.means_.shape
        full = self.covariance_type in ("full", "tied")
        moments = _moment_features(X, self._centre, full)
        within_state = self._component_responsibilities(X, cache)
        features = within_state[:, :, :, None] * moments[:, None, None, :]
        partial = _partial_rows(X) if full else ()
        if len(partial):  # the conditional moments depend on the mixture component
            conditional = _partial_moment_features(
                X[partial], self._centre, *self._conditional_parameters()
            ).reshape(len(partial), n_components, n_mix, -1)
            features[partial] = within_state[partial][..., None] * conditional
        return features.reshape(X.shape[0], n_components, -1)

    def _statistics_from_features(self, sums):
        n_components, n_mix, n_features = self.means_.shape
        full = self.covariance_type in ("full", "tied")
        per_component = sums.reshape(n_components * n_mix, -1)
        return self._gmm_statistics(*_moments_from_features(per_component, n_features, full))

    def _emission_mstep(self, statistics):
        # The statistics are moments about self._centre: work in coordinates
        # centred there (means and prior means shifted alike) and shift back.
        # Each mixture component is a Gaussian with its own moments: the M
        # step of GaussianHMM's states, per (state, mixture component).
        n_components, n_mix, n_features = self.means_.shape
        centre = self._centre
        post_mix = statistics["post_mix_sum"]
        if "w" in self.params:
            prior = np.broadcast_to(
                np.asarray(self.weights_prior, dtype=np.float64), (n_components, n_mix)
            )
            self.weights_ = dirichlet_map(post_mix, prior, self.weights_)
        means_prior = (
            np.broadcast_to(
                np.asarray(self.means_prior, dtype=np.float64), (n_components, n_mix, n_features)
            )
            - centre
        )
        means_weight = np.broadcast_to(
            np.asarray(self.means_weight, dtype=np.float64), (n_components, n_mix)
        )
        threshold = 1e-12 * max(post_mix.sum(), 1.0)
        responsible = post_mix > threshold
        # Diagonal covariances: each feature's own weight (its missing
        # entries drop out); exactly post_mix where nothing is missing.
        counts = post_mix
        if "missing_post" in statistics:
            counts = feature_counts(post_mix, statistics["missing_post"])
        if "m" in self.params:
            self.means_ = map_means(
                counts,
                statistics["obs"],
                means_prior,
                means_weight,
                self.means_,
                counts > threshold,
                centre,
            )
        if "c" in self.params:
            self._covariance_mstep(statistics, means_prior, means_weight, responsible, counts)

    def _covariance_mstep(self, statistics, means_prior, means_weight, responsible, counts):
        """Covariances from moments about ``_centre``; ``means_prior`` is centred too.

        The scatter about the updated means (hmmlearn's exact M step) and
        hmmlearn's GMMHMM priors: an inverse gamma of shape ``covars_prior``
        and scale ``covars_weight`` for variances, an inverse Wishart of scale
        ``covars_prior`` and degrees of freedom ``covars_weight`` for matrices.
        """
        n_components, n_mix, n_features = self.means_.shape
        post_mix = statistics["post_mix_sum"]
        covars_prior, covars_weight = self._covariance_priors()
        full = self.covariance_type in ("full", "tied")
        scatter = weighted_scatter(
            counts,
            statistics["obs"],
            statistics["obs*obs.T" if full else "obs**2"],
            self.means_ - self._centre,
            means_prior,
            means_weight,
            full,
        )
        if self.covariance_type == "diag":
            prior_scale, prior_count = 2 * covars_weight, 1 + 2 * (covars_prior + 1)
        elif self.covariance_type == "spherical":
            prior_scale, prior_count = 2 * covars_weight, n_features + 2 * (covars_prior + 1)
        else:
            prior_scale = np.swapaxes(covars_prior, -1, -2)
            pooled = 1 if self.covariance_type == "full" else n_mix
            prior_count = (pooled + covars_weight + n_features + 1)[..., None, None]
        diagonal = self.covariance_type in ("spherical", "diag")
        covars = map_covariance(
            self.covariance_type,
            scatter,
            post_mix,
            prior_scale,
            prior_count,
            feature_counts=counts if diagonal else None,
        )
        if self.covariance_type == "diag":  # a feature without observed weight keeps its own
            responsible = counts > 1e-12 * max(post_mix.sum(), 1.0)
        self.covars_ = keep_valid_covariances(
            covars, self.covars_, self.covariance_type, responsible
        )

    def _emission_coordinates(self, X):
        return {
            **gaussian_coordinates(self.covariance_type, X),
            "weights_": ("probabilities", None),
        }

    def _emission_n_parameters(self):
        n_components, n_mix, n_features = self.means_.shape
        return {
            "m": n_components * n_mix * n_features,
            "c": {
                "spherical": n_components * n_mix,
                "diag": n_components * n_mix * n_features,
                "full": n_components * n_mix * n_features * (n_features + 1) // 2,
                "tied": n_components * n_features * (n_features + 1) // 2,
            }[self.covariance_type],
            "w": n_components * (n_mix - 1),
        }

    def _sample_emissions(self, states, random_state):
        n_components, n_mix, n_features = self.means_.shape
        cumulative = np.cumsum(self.weights_, axis=1)[states]
        components = np.minimum(
            (random_state.rand(len(states), 1) >= cumulative).sum(axis=1), n_mix - 1
        )
        flat_type, flat_covars = self._flat_covars()
        full = fill_covars(flat_covars, flat_type, n_components * n_mix, n_features)
        return sample_gaussians(
            self.means_.reshape(-1, n_features), full, states * n_mix + components, random_state
        )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags
