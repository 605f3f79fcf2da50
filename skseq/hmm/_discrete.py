"""Emissions on whole numbers: CategoricalHMM (symbols) and PoissonHMM (counts)."""

import numpy as np
from scipy.special import gammaln
from sklearn.utils.validation import validate_data

from .._validation import masked_as_nan
from ..base import check_scalar_param
from ._base import BaseHMM, check_probability_vector, fit_kmeans, normalize_rows

__all__ = ["CategoricalHMM", "PoissonHMM"]


def validate_whole_numbers(estimator, X, reset, what):
    """Finite, non-negative whole numbers (integer or float dtype) as float64."""
    name = type(estimator).__name__
    X = masked_as_nan(X, missing_supported=False, owner=name)
    X = validate_data(
        estimator, X, reset=reset, dtype=np.float64, order="C", ensure_all_finite=False
    )
    if not np.all(np.isfinite(X)):
        raise ValueError(
            f"{name} cannot treat NaN as missing and does not accept inf: X must be finite {what}."
        )
    if np.any(X < 0):
        raise ValueError(f"Negative values in data passed to {name}: {what} must be non-negative.")
    if np.any(X != np.floor(X)):
        raise ValueError(f"{name} needs whole-number {what}; X has non-integer values.")
    return X


class CategoricalHMM(BaseHMM):
    """Hidden Markov model with categorical (discrete symbol) emissions.

    A drop-in replacement for ``hmmlearn.hmm.CategoricalHMM``: ``X`` is one
    column of symbols 0, 1, ..., n_features - 1.

    Parameters
    ----------
    n_components : int, default=1
        Number of hidden states.
    startprob_prior, transmat_prior : float or array, default=1.0
        Dirichlet concentrations of the priors on ``startprob_`` and the rows
        of ``transmat_`` (1 = no prior).
    emissionprob_prior : float or array of shape (n_components, n_features), default=1.0
        Dirichlet concentration of the prior on the rows of ``emissionprob_``.
    n_features : int, optional
        Number of symbols; inferred as ``max(X) + 1`` at fit when omitted.
    algorithm, random_state, n_iter, tol, verbose, implementation
        As in :class:`GaussianHMM`.
    params, init_params : str, default="ste"
        "s" startprob, "t" transmat, "e" emissionprob.
    startprob_init, transmat_init, emissionprob_init : array-like, optional
        Initial values (clone-safe), taking precedence over ``init_params``.
    n_init : int, default=1
        Number of initialisations; the best is kept.
    n_jobs : int, default=None
        Threads for the E step over sequences.
    learning_method, learning_decay, learning_offset, total_samples, batch_size
        Stochastic EM, as in :class:`GaussianHMM`.

    Attributes
    ----------
    startprob_, transmat_ : ndarray
    emissionprob_ : ndarray of shape (n_components, ``n_symbols_``)
        p(symbol | state).
    n_symbols_ : int
        Size of the alphabet learned at fit.
    monitor_, n_iter_, converged_, n_features_in_, n_batch_iter_, filtered_state_
        As in :class:`GaussianHMM`.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq import CategoricalHMM
    >>> X = np.array([[0], [0], [1], [2], [2], [2], [0], [1]])
    >>> model = CategoricalHMM(n_components=2, random_state=0, n_iter=20).fit(X)
    >>> model.emissionprob_.shape
    (2, 3)
    >>> model.predict(X).shape
    (8,)
    """

    _emission_letters = {"e": "emissionprob_"}
    # A constructor parameter here (the alphabet size), not BaseHMM's property.
    n_features = None

    def __init__(
        self,
        n_components=1,
        startprob_prior=1.0,
        transmat_prior=1.0,
        *,
        emissionprob_prior=1.0,
        n_features=None,
        algorithm="viterbi",
        random_state=None,
        n_iter=10,
        tol=1e-2,
        verbose=False,
        params="ste",
        init_params="ste",
        implementation="log",
        startprob_init=None,
        transmat_init=None,
        emissionprob_init=None,
        n_init=1,
        n_jobs=None,
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
            learning_method=learning_method,
            learning_decay=learning_decay,
            learning_offset=learning_offset,
            total_samples=total_samples,
            batch_size=batch_size,
        )
        self.emissionprob_prior = emissionprob_prior
        self.n_features = n_features
        self.emissionprob_init = emissionprob_init

    def _check_emission_params(self):
        if self.n_features is not None:
            check_scalar_param(self.n_features, "n_features", "int", low=1)

    def _prior_bounds(self, n_features):
        return {**super()._prior_bounds(n_features), "emissionprob_prior": (0.0, True)}

    def _validate_X(self, X, reset):
        X = validate_whole_numbers(self, X, reset, "symbols")
        if X.shape[1] != 1:
            raise ValueError(
                f"CategoricalHMM takes one column of symbols, X of shape (n_samples, 1); "
                f"got {X.shape[1]} columns."
            )
        alphabet = self.n_features if reset else getattr(self, "n_symbols_", None)
        if reset and alphabet is None:
            return X
        if alphabet is None and hasattr(self, "emissionprob_"):
            alphabet = self.emissionprob_.shape[1]
        if alphabet is not None and X.max() >= alphabet:
            raise ValueError(
                f"X contains symbol {int(X.max())}, outside the alphabet 0..{alphabet - 1} "
                f"(n_features={alphabet})."
            )
        return X

    def _initialize_emissions(self, X, random_state):
        n_components = self.n_components
        emissionprob = self._initial_value("emissionprob_")
        if emissionprob is not None:
            n_symbols = np.shape(emissionprob)[-1] if np.ndim(emissionprob) == 2 else -1
        else:
            n_symbols = self.n_features or int(X.max()) + 1
        if self.n_features is not None and n_symbols != self.n_features:
            raise ValueError(
                f"emissionprob has {n_symbols} symbols but n_features={self.n_features}."
            )
        if X.max() >= max(n_symbols, 1):
            raise ValueError(
                f"X contains symbol {int(X.max())}, outside the alphabet 0..{n_symbols - 1}."
            )
        if emissionprob is None:
            # Symbol frequencies, perturbed per state to break the symmetry.
            frequencies = np.bincount(X[:, 0].astype(np.intp), minlength=n_symbols) + 1e-3
            frequencies = frequencies / frequencies.sum()
            emissionprob = frequencies * random_state.uniform(0.5, 1.5, (n_components, n_symbols))
            emissionprob /= emissionprob.sum(axis=1, keepdims=True)
        self.emissionprob_ = check_probability_vector(
            emissionprob, "emissionprob", (n_components, n_symbols)
        )
        self.n_symbols_ = n_symbols

    def _check_emission_parameters(self, n_features):
        if n_features is not None and n_features != 1:
            raise ValueError(f"CategoricalHMM takes one column of symbols, got {n_features}.")
        emissionprob = np.asarray(self.emissionprob_)
        if emissionprob.ndim != 2:
            raise ValueError(
                f"emissionprob_ must have shape (n_components, n_symbols), "
                f"got {emissionprob.shape}."
            )
        check_probability_vector(
            emissionprob, "emissionprob_", (self.n_components, emissionprob.shape[1])
        )

    def _emission_terms(self, X):
        with np.errstate(divide="ignore"):
            log_emission = np.log(np.asarray(self.emissionprob_, dtype=np.float64))
        return log_emission[:, X[:, 0].astype(np.intp)].T, None

    def _emission_statistics(self, X, posteriors, cache):
        symbols = X[:, 0].astype(np.intp)
        n_symbols = self.emissionprob_.shape[1]
        counts = np.stack(
            [np.bincount(symbols, weights=column, minlength=n_symbols) for column in posteriors.T]
        )
        return {"obs": counts}

    def _emission_features(self, X, cache):
        n_symbols = self.emissionprob_.shape[1]
        one_hot = np.zeros((X.shape[0], n_symbols))
        one_hot[np.arange(X.shape[0]), X[:, 0].astype(np.intp)] = 1.0
        return np.broadcast_to(one_hot[:, None, :], (X.shape[0], self.n_components, n_symbols))

    def _statistics_from_features(self, sums):
        return {"obs": sums}

    def _emission_mstep(self, statistics):
        if "e" in self.params:
            prior = self._prior("emissionprob_prior", self.emissionprob_.shape)
            counts = np.maximum(prior - 1 + statistics["obs"], 0)
            self.emissionprob_ = normalize_rows(counts, self.emissionprob_)

    def _emission_n_parameters(self):
        n_components, n_symbols = self.emissionprob_.shape
        return {"e": n_components * (n_symbols - 1)}

    def _sample_emissions(self, states, random_state):
        cumulative = np.cumsum(self.emissionprob_, axis=1)[states]
        uniforms = random_state.rand(len(states), 1)
        symbols = np.minimum((uniforms >= cumulative).sum(axis=1), self.emissionprob_.shape[1] - 1)
        return symbols[:, None]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        tags.input_tags.categorical = True
        return tags

    def _get_parameters(self):
        parameters = super()._get_parameters()
        parameters["n_symbols_"] = self.n_symbols_
        return parameters


class PoissonHMM(BaseHMM):
    """Hidden Markov model with independent Poisson emissions per feature.

    A drop-in replacement for ``hmmlearn.hmm.PoissonHMM``: ``X`` holds
    non-negative whole-number counts.

    Parameters
    ----------
    n_components : int, default=1
        Number of hidden states.
    startprob_prior, transmat_prior : float or array, default=1.0
        Dirichlet priors, as in :class:`GaussianHMM`.
    lambdas_prior, lambdas_weight : float or array, default=0.0
        Shape and rate (both >= 0) of a gamma prior on each rate: the M step gives
        (lambdas_prior + sum_t gamma_t x_t) / (lambdas_weight + sum_t gamma_t),
        per state.  (hmmlearn divides by the total count over all states
        instead, which is not the posterior mean; both agree without a prior.)
    algorithm, random_state, n_iter, tol, verbose, implementation
        As in :class:`GaussianHMM`.
    params, init_params : str, default="stl"
        "s" startprob, "t" transmat, "l" lambdas.
    startprob_init, transmat_init, lambdas_init : array-like, optional
        Initial values (clone-safe).
    n_init : int, default=1
    n_jobs : int, default=None
        Threads for the E step and the k-means initialisation, as in
        :class:`GaussianHMM`.
    learning_method, learning_decay, learning_offset, total_samples, batch_size
        Stochastic EM, as in :class:`GaussianHMM`.

    Attributes
    ----------
    startprob_, transmat_ : ndarray
    lambdas_ : ndarray of shape (n_components, n_features)
        Poisson rates of each state and feature.
    monitor_, n_iter_, converged_, n_features_in_, n_features, n_batch_iter_
    filtered_state_, batch_log_likelihood_
        As in :class:`GaussianHMM`.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq import PoissonHMM
    >>> rng = np.random.default_rng(0)
    >>> X = np.concatenate([rng.poisson(2, (60, 1)), rng.poisson(20, (60, 1))])
    >>> model = PoissonHMM(n_components=2, random_state=0).fit(X)
    >>> np.sort(model.lambdas_.ravel()).round(0)
    array([ 2., 21.])
    """

    _emission_letters = {"l": "lambdas_"}

    def __init__(
        self,
        n_components=1,
        startprob_prior=1.0,
        transmat_prior=1.0,
        lambdas_prior=0.0,
        lambdas_weight=0.0,
        algorithm="viterbi",
        random_state=None,
        n_iter=10,
        tol=1e-2,
        verbose=False,
        params="stl",
        init_params="stl",
        implementation="log",
        *,
        startprob_init=None,
        transmat_init=None,
        lambdas_init=None,
        n_init=1,
        n_jobs=None,
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
            learning_method=learning_method,
            learning_decay=learning_decay,
            learning_offset=learning_offset,
            total_samples=total_samples,
            batch_size=batch_size,
        )
        self.lambdas_prior = lambdas_prior
        self.lambdas_weight = lambdas_weight
        self.lambdas_init = lambdas_init

    def _validate_X(self, X, reset):
        return validate_whole_numbers(self, X, reset, "counts")

    def _prior_bounds(self, n_features):
        # A gamma prior's shape and rate: non-negative keeps the rates
        # (prior + sum gamma x) / (weight + sum gamma) non-negative.
        bounds = super()._prior_bounds(n_features)
        bounds.update(lambdas_prior=(0.0, False), lambdas_weight=(0.0, False))
        return bounds

    def _initialize_emissions(self, X, random_state):
        n_components, n_features = self.n_components, X.shape[1]
        lambdas = self._initial_value("lambdas_")
        if lambdas is None:
            if np.unique(X, axis=0).shape[0] >= n_components:
                lambdas = fit_kmeans(X, n_components, random_state, self.n_jobs).cluster_centers_
            else:
                lambdas = X.mean(axis=0) * random_state.uniform(
                    0.5, 1.5, (n_components, n_features)
                )
            lambdas = np.maximum(lambdas, 1e-3 * max(X.mean(), 1e-3))
        lambdas = np.array(lambdas, dtype=np.float64)
        if lambdas.shape != (n_components, n_features):
            raise ValueError(
                f"lambdas must have shape ({n_components}, {n_features}), got {lambdas.shape}."
            )
        if not np.all(np.isfinite(lambdas)) or np.any(lambdas <= 0):
            raise ValueError("lambdas must be positive and finite.")
        self.lambdas_ = lambdas

    def _check_emission_parameters(self, n_features):
        lambdas = np.array(self.lambdas_, dtype=np.float64)
        if lambdas.ndim != 2 or lambdas.shape[0] != self.n_components:
            raise ValueError(
                f"lambdas_ must have shape (n_components={self.n_components}, n_features), "
                f"got {lambdas.shape}."
            )
        if n_features is not None and lambdas.shape[1] != n_features:
            raise ValueError(
                f"X has {n_features} features, but the model's lambdas_ have {lambdas.shape[1]}."
            )
        if not np.all(np.isfinite(lambdas)) or np.any(lambdas < 0):
            raise ValueError("lambdas_ must be non-negative and finite.")

    def _emission_terms(self, X):
        lambdas = np.asarray(self.lambdas_, dtype=np.float64)
        log_rates = np.log(np.maximum(lambdas, 1e-300))
        log_factorials = gammaln(X + 1).sum(axis=1)
        log_pmf = X @ log_rates.T - lambdas.sum(axis=1) - log_factorials[:, None]
        return log_pmf, None

    def _emission_statistics(self, X, posteriors, cache):
        return {"post": posteriors.sum(axis=0), "obs": posteriors.T @ X}

    def _emission_features(self, X, cache):
        features = np.concatenate([np.ones((X.shape[0], 1)), X], axis=1)
        return np.broadcast_to(
            features[:, None, :], (X.shape[0], self.n_components, features.shape[1])
        )

    def _statistics_from_features(self, sums):
        return {"post": sums[:, 0], "obs": sums[:, 1:]}

    def _emission_mstep(self, statistics):
        if "l" not in self.params:
            return
        shape = self.lambdas_.shape
        prior = self._prior("lambdas_prior", shape)
        weight = self._prior("lambdas_weight", shape)
        post = statistics["post"][:, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            lambdas = (prior + statistics["obs"]) / (weight + post)
        usable = np.isfinite(lambdas) & (post > 0)
        self.lambdas_ = np.where(usable, lambdas, self.lambdas_)

    def _emission_n_parameters(self):
        return {"l": self.lambdas_.size}

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        tags.input_tags.categorical = True
        return tags

    def _sample_emissions(self, states, random_state):
        return random_state.poisson(self.lambdas_[states]).astype(np.float64)
