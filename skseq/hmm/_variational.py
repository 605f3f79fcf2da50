"""Variational Bayes HMMs: hmmlearn's VariationalGaussianHMM and VariationalCategoricalHMM.

The parameters get conjugate priors (Dirichlet on the start and on each
transition row, normal-Wishart or Dirichlet on the emissions) and a factored
posterior q(Z) q(theta) fitted by coordinate ascent on the evidence lower
bound (doc/user_guide/hmm.rst, "Variational Bayes").  Each model is the EM
model of the same emissions with four changes, made through BaseHMM's and
BaseEM's hooks:

* the E step runs forward-backward on the subnormalised parameters
  exp E_q[log theta] (``_estep_chain``, ``_estep_emissions``,
  ``_estep_emission_terms``);
* the M step sets each posterior to its prior plus the expected
  sufficient statistics (``_mstep``), and the point parameters that
  ``score``, ``predict`` and ``sample`` use to the posterior means, as
  hmmlearn derives them;
* the monitor records the lower bound (``_monitored``): the E step's log
  normaliser minus KL(q(theta) || p(theta));
* the snapshots and presets are the posteriors and priors.

Natural-gradient stochastic variational inference (Hoffman et al. 2013) is
then the stream engine of stochastic EM unchanged: the posterior's natural
parameters are the prior's plus the statistics, so blending the statistics
with the Robbins-Monro step is the natural-gradient step on the posterior.
"""

import sys

import numpy as np
from scipy.special import digamma, gammaln

from .._validation import (
    at_fit,
    check_prior_param,
    optional,
    prior_rule,
)
from ..base import _PACKAGE_DIRECTORY, warn_user
from ..inference.gaussian import _missing_rows as missing_rows
from ..inference.gaussian import _partial_rows as partial_rows
from ..inference.gaussian import fill_covars
from ..inference.hmm import _forward_offsets
from ._base import fit_kmeans
from ._discrete import CategoricalHMM, emission_table
from ._gaussian import (
    GaussianHMM,
    check_positive_semidefinite,
    distribute_covariance,
    initial_covariance,
    moments_centre,
    observed_rows,
)

__all__ = ["VariationalGaussianHMM", "VariationalCategoricalHMM"]

# hmmlearn's initial covariance: the data's plus this on the diagonal.
_INITIAL_COVARIANCE_FLOOR = 1e-3
# hmmlearn's default scale of the (inverse) Wishart / gamma prior.
_DEFAULT_SCALE_PRIOR = 1e-3


def dirichlet_divergence(posterior, prior):
    """KL(Dir(posterior) || Dir(prior)) summed over the rows (the last axis is a row).

    log B(prior) - log B(posterior) + sum_i (a_i - b_i)(psi(a_i) - psi(sum a))
    with B the multivariate beta function, a the posterior, b the prior.
    Entries whose prior is 0 (beyond an alphabet) are not in the Dirichlet.
    """
    posterior, prior = np.atleast_2d(posterior), np.atleast_2d(prior)
    inside = prior > 0
    total = posterior.sum(axis=-1)
    a, b = np.where(inside, posterior, 1.0), np.where(inside, prior, 1.0)
    entries = np.where(
        inside, gammaln(b) - gammaln(a) + (a - b) * (digamma(a) - digamma(total)[..., None]), 0
    )
    return float(np.sum(gammaln(total) - gammaln(prior.sum(axis=-1)) + entries.sum(axis=-1)))


def subnormalised_log(posterior):
    """E_q[log p] under Dir(posterior) along the last axis: psi(a_i) - psi(sum a)."""
    return digamma(posterior) - digamma(posterior.sum(axis=-1, keepdims=True))


def expected_log_det_precision(dof, scale, n_features):
    """E[log |Lambda|] of Wishart(Lambda | dof, scale^-1) (``scale``: the
    inverse scale matrices, (..., D, D)): sum_d psi((dof - d) / 2) - log |scale / 2|."""
    d = np.arange(n_features)
    return (
        digamma(0.5 * (np.asarray(dof)[..., None] - d)).sum(axis=-1)
        - np.linalg.slogdet(0.5 * scale)[1]
    )


def wishart_log_normaliser(dof, scale, n_features):
    """log Z of Wishart(dof, scale^-1):
    D(D-1)/4 log pi - dof/2 log|scale/2| + sum_d lnG((dof - d)/2)."""
    d = np.arange(n_features)
    return (
        0.25 * n_features * (n_features - 1) * np.log(np.pi)
        - 0.5 * np.asarray(dof) * np.linalg.slogdet(0.5 * scale)[1]
        + gammaln(0.5 * (np.asarray(dof)[..., None] - d)).sum(axis=-1)
    )


def wishart_divergence(dof_q, scale_q, dof_p, scale_p):
    """KL(W(dof_q, scale_q^-1) || W(dof_p, scale_p^-1)) for stacks of (D, D) inverse scales."""
    n_features = scale_q.shape[-1]
    trace = np.einsum("...ij,...ji->...", scale_p, np.linalg.inv(scale_q))
    return (
        0.5 * (dof_q - dof_p) * expected_log_det_precision(dof_q, scale_q, n_features)
        - 0.5 * n_features * dof_q
        + 0.5 * dof_q * trace
        + wishart_log_normaliser(dof_p, scale_p, n_features)
        - wishart_log_normaliser(dof_q, scale_q, n_features)
    )


class _VariationalHMM:
    """What the variational HMMs share: the Dirichlet posteriors of the chain,
    the E step on subnormalised parameters, the lower bound, the presets.

    Mixed in before an EM emission model (GaussianHMM, CategoricalHMM),
    whose validation, emission kernels, statistics and sampling it keeps; a
    subclass adds ``_variational_emission_attributes`` (``{letter:
    attribute names}``), ``_initialize_variational_emissions``,
    ``_variational_emission_mstep``, ``_emission_divergence`` and
    ``_derive_emissions`` (the point parameters from the posteriors).
    """

    _variational_chain_attributes = {
        "s": ("startprob_prior_", "startprob_posterior_"),
        "t": ("transmat_prior_", "transmat_posterior_"),
    }
    _variational_emission_attributes = {}
    # The emission posteriors that the labelled rows of a semi-supervised fit
    # start (by letter; see _posteriors_from_known_states).
    _posteriors_anchored_by_labels = {}
    # The hyperparameters whose None means hmmlearn's default prior.
    _default_priors = ("startprob_prior", "transmat_prior")
    # Batch VB only in fit (partial_fit is stochastic variational inference).
    learning_method = "batch"
    acceleration = None
    batch_size = 1

    @property
    def _variational_attributes(self):
        return {**self._variational_chain_attributes, **self._variational_emission_attributes}

    def __setattr__(self, name, value):
        # A prior or posterior assigned by code outside skseq is hand-set, as
        # the point parameters are (hmmlearn's warning when init_params
        # overwrites it).
        if any(name in names for names in self._variational_attributes.values()):
            value = np.array(value, dtype=np.float64)
            if not _called_from_package():
                self.__dict__.setdefault("_hand_set", set()).add(name)
        super().__setattr__(name, value)

    # -- hyperparameters ------------------------------------------------------

    def _unchecked_parameters(self):
        # None stands for hmmlearn's default of a prior, set at initialisation.
        defaults = tuple(name for name in self._default_priors if getattr(self, name) is None)
        return super()._unchecked_parameters() + defaults

    def _prior_array(self, name, default, shape):
        """The prior hyperparameter ``name`` (``default`` when None) broadcast to ``shape``."""
        value = getattr(self, name)
        value = default if value is None else value
        try:
            return np.array(np.broadcast_to(np.asarray(value, dtype=np.float64), shape))
        except ValueError:
            raise ValueError(
                f"{name} must be a number or an array broadcastable to {shape}, "
                f"got shape {np.shape(value)}."
            ) from None

    # -- presets and initialisation ---------------------------------------------

    def _capture_presets(self):
        """Priors and posteriors set by hand, kept (with the letter left out of
        ``init_params``) as the start of every run, as hmmlearn keeps them when
        all of a letter's are set; hmmlearn's warning when they are overwritten."""
        hand_set = self.__dict__.get("_hand_set", ())
        self._presets = {}
        for letter, names in self._variational_attributes.items():
            present = [name for name in names if name in self.__dict__]
            if letter not in self.init_params and len(present) == len(names):
                self._presets.update({name: np.copy(self.__dict__[name]) for name in names})
                continue
            for name in present:
                if name in hand_set:
                    reason = (
                        f"'init_params' contains {letter!r}"
                        if letter in self.init_params
                        else f"the other attributes of {letter!r} are not all set"
                    )
                    warn_user(
                        f"Even though the {name!r} attribute is set, it will be "
                        f"overwritten during initialization because {reason}"
                    )

    def _preset_group(self, letter):
        """The hand-set priors and posteriors of ``letter`` as a dict, or None."""
        names = self._variational_attributes[letter]
        if all(name in self._presets for name in names):
            return {name: self._presets[name] for name in names}
        return None

    def _initialize(self, X, offsets, random_state):
        # The labels of a semi-supervised fit anchor the states through the
        # clamped E step; the random start of the posteriors ignores them.
        X, known_states = self._split_known_states(X)
        n_components, n_sequences = self.n_components, len(offsets) - 1
        uniform = 1.0 / n_components
        # hmmlearn's recipe: random posteriors (Dirichlet(1/K) draws scaled to
        # the sequences and the rows), here with the prior added so that every
        # posterior is proper whatever the draw.
        for letter, shape, total in (
            ("s", (n_components,), n_sequences),
            ("t", (n_components, n_components), X.shape[0] / n_components),
        ):
            prior_name, posterior_name = self._variational_chain_attributes[letter]
            preset = self._preset_group(letter)
            if preset is not None:
                prior, posterior = preset[prior_name], preset[posterior_name]
            else:
                prior = self._prior_array(prior_name[:-1], uniform, shape)
                draws = random_state.dirichlet(np.full(n_components, uniform), size=shape[:-1])
                posterior = prior + total * draws.reshape(shape)
            check_dirichlet(prior, prior_name, shape)
            check_dirichlet(posterior, posterior_name, shape)
            setattr(self, prior_name, prior)
            setattr(self, posterior_name, posterior)
        self._initialize_variational_emissions(X, random_state)
        self._derive_parameters()
        if known_states is not None:
            self._check_known_states_possible(known_states, offsets)
            self._posteriors_from_known_states(X, known_states)

    def _posteriors_from_known_states(self, X, known_states):
        """Start each labelled state's emission posteriors at its labelled rows.

        As the EM models do (``BaseHMM._initialize_from_known_states``): the
        VB M step on the labelled rows alone (each row's posterior all on its
        label), blended ``n_k / (n_k + 1)`` with the random start, for the
        posteriors of ``_posteriors_anchored_by_labels`` whose letter is
        initialised (in ``init_params``, not hand-set).  The clamped E step
        alone anchors a state only weakly: from a start where state k sits on
        another label's rows, the few labelled rows do not pull it over.
        """
        anchored = {
            letter: names
            for letter, names in self._posteriors_anchored_by_labels.items()
            if letter in self.init_params and self._preset_group(letter) is None
        }
        if not anchored:
            return
        attributes = self._variational_emission_attributes
        self._start_from_labelled_rows(
            X,
            known_states,
            "".join(anchored),
            self._variational_emission_mstep,
            blended=[name for names in anchored.values() for name in names],
            touched=[name for letter in anchored for name in attributes[letter]],
        )
        self._derive_parameters()

    def _derive_parameters(self):
        """The point parameters of ``score``, ``predict`` and ``sample``: the
        posterior means of the start and transition probabilities, and the
        emission model's (``_derive_emissions``)."""
        self.startprob_ = self.startprob_posterior_ / self.startprob_posterior_.sum()
        self.transmat_ = self.transmat_posterior_ / self.transmat_posterior_.sum(
            axis=1, keepdims=True
        )
        self._derive_emissions()

    def _get_parameters(self):
        parameters = super()._get_parameters()
        for names in self._variational_attributes.values():
            parameters.update({name: np.copy(getattr(self, name)) for name in names})
        return parameters

    # -- the E step on subnormalised parameters --------------------------------------

    def _estep_chain(self):
        return (
            np.exp(subnormalised_log(self.startprob_posterior_)),
            np.exp(subnormalised_log(self.transmat_posterior_)),
        )

    def _estep_emissions(self):
        def emissions(X, buffers=None):
            log_frameprob, cache = self._estep_emission_terms(X)
            return log_frameprob, None, cache

        return emissions

    # -- the M step and the bound ----------------------------------------------------

    def _mstep(self, statistics):
        if "s" in self.params:
            self.startprob_posterior_ = self.startprob_prior_ + statistics["start"]
        if "t" in self.params:
            self.transmat_posterior_ = self.transmat_prior_ + statistics["trans"]
        self._variational_emission_mstep(statistics)
        self._derive_parameters()

    def _divergence(self):
        """KL(q(theta) || p(theta)) of the current posteriors from the priors."""
        return (
            dirichlet_divergence(self.startprob_posterior_, self.startprob_prior_)
            + dirichlet_divergence(self.transmat_posterior_, self.transmat_prior_)
            + self._emission_divergence()
        )

    def _monitored(self, log_likelihood):
        return log_likelihood - self._divergence()

    def partial_fit(
        self, X, y=None, *, lengths=None, sequence_ids=None, new_sequence=False, known_states=None
    ):
        """One step of stochastic variational inference on a batch of rows.

        The natural-gradient step of Hoffman et al. (2013) on the posteriors
        of the parameters: with lambda their natural parameters and
        lambda_hat = prior + (N / B) s_batch (N: ``total_samples``, or all
        rows seen so far; B the batch's rows; s_batch its expected
        statistics under the subnormalised parameters),
        ``lambda <- (1 - rho) lambda + rho lambda_hat``, with
        ``rho = (learning_offset + n_batch_iter_) ** -learning_decay``.  The
        natural parameters are the prior's plus the statistics, so this is
        stochastic EM's blend of the statistics followed by the VB M step.
        The first call initialises the model from its batch; a fitted model
        continues from its posteriors.  Consecutive calls on consecutive
        chunks of one sequence continue it through the exact forward-only
        message of the stream engine (see :meth:`GaussianHMM.partial_fit`).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : None
            Ignored.
        lengths, sequence_ids : see :meth:`fit`.
        new_sequence : bool, default=False
            True when the first sequence of ``X`` starts afresh rather than
            continuing the last sequence of the previous call.
        known_states : array-like of int of shape (n_samples,), optional
            The known hidden state of each row, -1 where unknown: see
            :meth:`fit`.  A batch's labels clamp its rows only.

        Returns
        -------
        self
        """
        return super().partial_fit(
            X,
            y,
            lengths=lengths,
            sequence_ids=sequence_ids,
            new_sequence=new_sequence,
            known_states=known_states,
        )

    def _sequence_bounds(self, X, offsets):
        """log of the forward normaliser of each sequence under the
        subnormalised parameters (blocks of whole sequences)."""
        startprob, transmat = self._estep_chain()
        bounds = np.empty(len(offsets) - 1)
        emissions = self._estep_emissions()
        buffers = {}
        for sequences, rows, local_offsets in self._row_blocks(offsets):
            log_frameprob, shift, _ = emissions(X[rows])
            _forward_offsets(
                startprob,
                transmat,
                log_frameprob,
                local_offsets,
                shift,
                buffers,
                sequence_log_likelihood=bounds[sequences],
            )
        return bounds

    def elbo_sequences(self, X, *, lengths=None, sequence_ids=None):
        """Each sequence's term of the evidence lower bound.

        The expected log-likelihood bound of sequence s, log sum_z exp
        E_q[log p(x_s, z | theta)] with the subnormalised parameters
        exp E_q[log theta] of the posteriors; the terms minus
        KL(q(theta) || p(theta)) are :meth:`elbo`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        lengths, sequence_ids : see :meth:`fit`.

        Returns
        -------
        bounds : ndarray of shape (n_sequences,)
        """
        X, offsets = self._prepare_fitted(X, lengths, sequence_ids)
        bounds = np.concatenate(self._over_sequence_blocks(self._sequence_bounds, offsets, X))
        self._check_log_likelihood(bounds.sum())
        return bounds

    def elbo(self, X, *, lengths=None, sequence_ids=None):
        """Evidence lower bound of ``X`` under the posteriors (a bound on log p(X)).

        The quantity ``monitor_`` records at each iteration of :meth:`fit`:
        the sum of :meth:`elbo_sequences` minus KL(q(theta) || p(theta)),
        with q(Z) the optimal one for the current q(theta).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        lengths, sequence_ids : see :meth:`fit`.

        Returns
        -------
        elbo : float
        """
        return float(
            self.elbo_sequences(X, lengths=lengths, sequence_ids=sequence_ids).sum()
            - self._divergence()
        )


def _called_from_package():
    """Whether the assignment being made comes from skseq's own code (two frames up)."""
    return sys._getframe(2).f_code.co_filename.startswith(_PACKAGE_DIRECTORY)


def check_dirichlet(value, name, shape):
    """A Dirichlet concentration (prior or posterior) of ``shape``: positive and finite."""
    value = np.asarray(value, dtype=np.float64)
    if value.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {value.shape}.")
    if not np.all(np.isfinite(value)) or np.any(value <= 0):
        raise ValueError(f"{name} must be positive and finite (Dirichlet concentrations).")
    return value


def check_positive(value, name, shape):
    value = np.asarray(value, dtype=np.float64)
    if value.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {value.shape}.")
    if not np.all(np.isfinite(value)) or np.any(value <= 0):
        raise ValueError(f"{name} must be positive and finite.")
    return value


class VariationalGaussianHMM(_VariationalHMM, GaussianHMM):
    """Hidden Markov model with Gaussian emissions, fitted by variational Bayes.

    hmmlearn's ``VariationalGaussianHMM`` (same parameters, attributes and
    numbers from the same initialisation; pass ``lengths`` by keyword): a
    Dirichlet prior on ``startprob_`` and on each row of ``transmat_``, a
    normal-Wishart prior on each state's mean and precision (for "diag" and
    "spherical", the Wishart of a diagonal or scalar scale, as hmmlearn; for
    "tied", one Wishart shared by the states), and a factored posterior
    q(Z) q(theta) fitted by coordinate ascent on the evidence lower bound
    (ELBO), which ``monitor_`` records and which never decreases.  States
    the data do not need keep their prior: fitted with too many states,
    the unused ones empty out (their ``beta_posterior_`` falls back to
    ``beta_prior_``), which makes VB a way to choose the number of states.

    The point parameters ``startprob_``, ``transmat_``, ``means_`` and
    ``covars_`` are derived from the posteriors as hmmlearn derives them
    (posterior means of the probabilities, ``means_posterior_``, and
    ``scale_posterior_ / dof_posterior_``); :meth:`score`, :meth:`predict`,
    :meth:`predict_proba`, :meth:`decode` and :meth:`sample` use them, as in
    hmmlearn.  :meth:`partial_fit` runs stochastic variational inference.
    A row of NaN is missing and integrated out; a row with only some
    entries NaN is an error here (GaussianHMM integrates such rows out).

    Parameters
    ----------
    n_components : int, default=1
        Number of hidden states.
    covariance_type : {"full", "diag", "spherical", "tied"}, default="full"
        The shape of the covariances, as in :class:`GaussianHMM`.
    startprob_prior : float or array of shape (n_components,), optional
        Dirichlet concentration of the prior on ``startprob_`` (default
        1 / n_components).
    transmat_prior : float or array of shape (n_components, n_components), optional
        Dirichlet concentration of the prior on each row of ``transmat_``
        (default 1 / n_components).
    means_prior : float or array of shape (n_components, n_features), optional
        Mean m0 of the normal prior on the means (default: the data mean).
    beta_prior : float or array of shape (n_components,), optional
        Precision scale beta0 of that prior, the mean's precision being
        beta0 Lambda (default 1).
    dof_prior : float or array, optional
        Degrees of freedom of the Wishart prior on the precisions, more than
        n_features - 1 (default n_features); one number for "tied", else
        per state.
    scale_prior : float or array, optional
        The Wishart prior's inverse scale matrix W0^-1 in the compact shape
        of ``covariance_type`` (default 1e-3, times the identity for "full"
        and "tied").
    algorithm, random_state, verbose, implementation
        As in :class:`GaussianHMM`.
    n_iter : int, default=100
        Maximum number of iterations.
    tol : float, default=1e-6
        VB stops when the ELBO gains less than ``tol``.
    params, init_params : str, default="stmc"
        Letters of the posteriors updated (``params``) and initialised
        (``init_params``): "s" start, "t" transitions, "m" means (and beta),
        "c" covariances (dof and scale).  A letter left out of
        ``init_params`` keeps the priors and posteriors set on the estimator
        when all of that letter's are set (hmmlearn style).
    n_init : int, default=1
        Number of initialisations; the one with the highest final ELBO is kept.
    n_jobs : int, default=None
        Threads for the E step over sequences (and the k-means initialisation).
    learning_decay, learning_offset, total_samples
        The Robbins-Monro schedule of :meth:`partial_fit`, as in
        :class:`GaussianHMM`.

    Attributes
    ----------
    startprob_prior_, startprob_posterior_ : ndarray of shape (n_components,)
    transmat_prior_, transmat_posterior_ : ndarray of shape (n_components, n_components)
    means_prior_, means_posterior_ : ndarray of shape (n_components, n_features)
    beta_prior_, beta_posterior_ : ndarray of shape (n_components,)
    dof_prior_, dof_posterior_ : ndarray of shape (n_components,) or float ("tied")
    scale_prior_, scale_posterior_ : ndarray
        In the compact shape of ``covariance_type``.
    startprob_, transmat_, means_, covars_ : ndarray
        The point parameters derived from the posteriors (``covars_`` in
        full shape, as :class:`GaussianHMM`).
    monitor_ : ConvergenceMonitor
        Its history holds the ELBO of each iteration.
    lower_bound_ : float
        The last ELBO.
    n_iter_, converged_, n_features_in_, n_batch_iter_, filtered_state_
        As in :class:`GaussianHMM`.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq import VariationalGaussianHMM
    >>> rng = np.random.default_rng(0)
    >>> X = np.concatenate([rng.normal(-3, 1, (100, 1)), rng.normal(3, 1, (100, 1))])
    >>> model = VariationalGaussianHMM(n_components=2, random_state=0).fit(X)
    >>> np.sort(model.means_.ravel()).round(0).tolist()
    [-3.0, 3.0]
    >>> bool(np.all(np.diff(model.monitor_.history) >= -1e-8))
    True
    """

    _default_priors = (
        "startprob_prior",
        "transmat_prior",
        "means_prior",
        "beta_prior",
        "dof_prior",
        "scale_prior",
    )
    _variational_emission_attributes = {
        "m": ("means_prior_", "means_posterior_", "beta_prior_", "beta_posterior_"),
        "c": ("dof_prior_", "dof_posterior_", "scale_prior_", "scale_posterior_"),
    }
    # As GaussianHMM: labels start the means; the covariances keep the
    # data-wide start.
    _posteriors_anchored_by_labels = {"m": ("means_posterior_",)}
    min_covar = _INITIAL_COVARIANCE_FLOOR

    def __init__(
        self,
        n_components=1,
        covariance_type="full",
        startprob_prior=None,
        transmat_prior=None,
        means_prior=None,
        beta_prior=None,
        dof_prior=None,
        scale_prior=None,
        algorithm="viterbi",
        random_state=None,
        n_iter=100,
        tol=1e-6,
        verbose=False,
        params="stmc",
        init_params="stmc",
        implementation="log",
        *,
        n_init=1,
        n_jobs=None,
        learning_decay=0.6,
        learning_offset=0.0,
        total_samples=None,
    ):
        self.n_components = n_components
        self.covariance_type = covariance_type
        self.startprob_prior = startprob_prior
        self.transmat_prior = transmat_prior
        self.means_prior = means_prior
        self.beta_prior = beta_prior
        self.dof_prior = dof_prior
        self.scale_prior = scale_prior
        self.algorithm = algorithm
        self.random_state = random_state
        self.n_iter = n_iter
        self.tol = tol
        self.verbose = verbose
        self.params = params
        self.init_params = init_params
        self.implementation = implementation
        self.n_init = n_init
        self.n_jobs = n_jobs
        self.learning_decay = learning_decay
        self.learning_offset = learning_offset
        self.total_samples = total_samples

    # -- hyperparameters ------------------------------------------------------

    def _parameter_rules(self):
        def dof_rule(n_features):
            low = None if n_features is None else n_features - 1.0
            return optional(prior_rule(low=low, low_open=True))

        def scale_rule(n_features):
            if self.covariance_type in ("spherical", "diag"):
                return optional(prior_rule(low=0.0, low_open=True))

            def check(value, name):
                if value is None:
                    return
                check_prior_param(value, name)
                if n_features is not None:
                    matrices = self._prior_array(name, None, self._scale_shape(n_features))
                    check_positive_semidefinite(matrices, name)
                    if np.min(np.linalg.eigvalsh(matrices)) <= 0:
                        raise ValueError(f"{name} must be positive definite.")

            return check

        rules = super()._parameter_rules()
        return {
            **{
                name: rules[name]
                for name in ("algorithm", "implementation", "params", "init_params")
            },
            "beta_prior": optional(prior_rule(low=0.0, low_open=True)),
            "dof_prior": at_fit(dof_rule),
            "scale_prior": at_fit(scale_rule),
        }

    def _scale_shape(self, n_features):
        return {
            "spherical": (self.n_components,),
            "diag": (self.n_components, n_features),
            "full": (self.n_components, n_features, n_features),
            "tied": (n_features, n_features),
        }[self.covariance_type]

    def _dof_shape(self):
        return () if self.covariance_type == "tied" else (self.n_components,)

    # -- initialisation -------------------------------------------------------

    def _initialize_variational_emissions(self, X, random_state):
        n_components, n_features = self.n_components, X.shape[1]
        observed = observed_rows(X)
        means_preset, covars_preset = self._preset_group("m"), self._preset_group("c")
        if means_preset is None or covars_preset is None:
            if observed.shape[0] < n_components:
                raise ValueError(
                    f"n_components={n_components} states need at least as many observed "
                    f"rows, got n_samples={observed.shape[0]}."
                )
            kmeans = fit_kmeans(observed, n_components, random_state, self.n_jobs)
            counts = np.bincount(kmeans.labels_, minlength=n_components).astype(np.float64)
        # hmmlearn's recipe: the k-means centres and counts; the prior's counts
        # are added to the posterior's (beta and dof) so that each Wishart is
        # proper (dof > n_features - 1) however small its cluster.
        if means_preset is None:
            means_prior = self._prior_array(
                "means_prior", observed.mean(axis=0), (n_components, n_features)
            )
            beta_prior = self._prior_array("beta_prior", 1.0, (n_components,))
            means_preset = {
                "means_prior_": means_prior,
                "means_posterior_": kmeans.cluster_centers_,
                "beta_prior_": beta_prior,
                "beta_posterior_": beta_prior + counts,
            }
        for name, value in means_preset.items():
            shape = (n_components,) if name.startswith("beta") else (n_components, n_features)
            if name.startswith("beta"):
                check_positive(value, name, shape)
            elif np.shape(value) != shape or not np.all(np.isfinite(value)):
                raise ValueError(f"{name} must have shape {shape} and finite values.")
            setattr(self, name, value)
        if covars_preset is None:
            dof_prior = self._prior_array("dof_prior", float(n_features), self._dof_shape())
            dof_posterior = dof_prior + (counts.sum() if self.covariance_type == "tied" else counts)
            covariance = initial_covariance(observed, _INITIAL_COVARIANCE_FLOOR)
            covars = distribute_covariance(covariance, self.covariance_type, n_components)
            covars_preset = {
                "dof_prior_": dof_prior,
                "dof_posterior_": dof_posterior,
                "scale_prior_": self._default_scale_prior(n_features),
                "scale_posterior_": covars * self._dof_column(dof_posterior, covars.ndim),
            }
        for name, value in covars_preset.items():
            setattr(self, name, value)
        self._check_wisharts(n_features)
        self._centre = moments_centre(observed, self.means_posterior_)

    def _default_scale_prior(self, n_features):
        shape = self._scale_shape(n_features)
        if self.scale_prior is not None:
            return self._prior_array("scale_prior", None, shape)
        if self.covariance_type in ("full", "tied"):
            return np.array(np.broadcast_to(_DEFAULT_SCALE_PRIOR * np.eye(n_features), shape))
        return np.full(shape, _DEFAULT_SCALE_PRIOR)

    def _dof_column(self, dof, ndim):
        """``dof`` shaped to multiply compact covariances of ``ndim`` dimensions."""
        if self.covariance_type == "tied":
            return dof
        return np.reshape(dof, (-1,) + (1,) * (ndim - 1))

    def _check_wisharts(self, n_features):
        """The Wishart priors and posteriors as they stand: shapes, dof > D - 1,
        positive (definite) scales."""
        shape = self._scale_shape(n_features)
        for kind in ("prior", "posterior"):
            dof_name, scale_name = f"dof_{kind}_", f"scale_{kind}_"
            dof, scale = getattr(self, dof_name), getattr(self, scale_name)
            if np.shape(dof) != self._dof_shape():
                raise ValueError(
                    f"{dof_name} must have shape {self._dof_shape()}, got {np.shape(dof)}."
                )
            if not np.all(np.isfinite(dof)) or np.any(dof <= n_features - 1):
                raise ValueError(
                    f"{dof_name} must be finite and more than n_features - 1 = {n_features - 1}."
                )
            if np.shape(scale) != shape or not np.all(np.isfinite(scale)):
                raise ValueError(f"{scale_name} must have shape {shape} and finite values.")
            if self.covariance_type in ("full", "tied"):
                check_positive_semidefinite(scale, scale_name)
                if np.min(np.linalg.eigvalsh(scale)) <= 0:
                    raise ValueError(f"{scale_name} must be positive definite.")
            elif np.any(scale <= 0):
                raise ValueError(f"{scale_name} must be positive.")

    # -- the posteriors ---------------------------------------------------------

    def _full_scales(self, scale):
        """Inverse scale matrices (n_components or 1, D, D) from compact ones."""
        n_features = self.means_posterior_.shape[1]
        if self.covariance_type == "tied":
            return scale[None]
        return fill_covars(scale, self.covariance_type, self.n_components, n_features)

    @property
    def means_(self):
        """The means of the states: ``means_posterior_`` (as hmmlearn's)."""
        return self.means_posterior_

    @means_.setter
    def means_(self, value):
        self.means_posterior_ = value

    def _derive_emissions(self):
        dof = self._dof_column(self.dof_posterior_, np.ndim(self.scale_posterior_))
        self._covars_ = self.scale_posterior_ / dof

    def _frame_offsets(self):
        """E_q[log N(x | mu_j, Lambda_j)] - log N(x | means_, covars_) per state,
        which does not depend on x: (1/2)(sum_d psi((nu - d)/2) + D log(2/nu)) - D/(2 beta)."""
        n_features = self.means_posterior_.shape[1]
        dof = np.broadcast_to(self.dof_posterior_, (self.n_components,))
        expected_log_det = digamma(0.5 * (dof[:, None] - np.arange(n_features))).sum(axis=1)
        return 0.5 * (expected_log_det + n_features * np.log(2.0 / dof)) - 0.5 * n_features / (
            self.beta_posterior_
        )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # A NaN entry of a row otherwise observed is an error (see
        # _validate_X); rows missing in full are still taken.
        tags.input_tags.allow_nan = False
        return tags

    def _validate_X(self, X, reset):
        X = super()._validate_X(X, reset)
        partial = partial_rows(X)
        if len(partial):
            # The bound of a partial row needs the Wishart expectation of its
            # observed block, and its M step per-feature counts where the
            # posterior has one degrees of freedom per state: not built.
            row = int(partial[0])
            raise ValueError(
                f"{type(self).__name__} takes rows observed in full or missing in full "
                f"(all NaN); row {row} of X has {int(np.isnan(X[row]).sum())} of its "
                f"{X.shape[1]} entries missing (NaN). GaussianHMM integrates partially "
                "observed rows out exactly; for this model mark the row missing or impute "
                "the entries."
            )
        return X

    def _estep_emission_terms(self, X):
        log_frameprob = self._emissions(shifted=False)(X)[0]
        observed = ~missing_rows(X)
        log_frameprob[observed] += self._frame_offsets()
        return log_frameprob, None

    def _variational_emission_mstep(self, statistics):
        # Centred moments about self._centre (the means in those coordinates):
        # the updates are translation-equivariant, and exact to rounding.
        centre = self._centre
        post, first = statistics["post"], statistics["obs"]
        full = self.covariance_type in ("full", "tied")
        second = statistics["obs*obs.T" if full else "obs**2"]
        prior_means = self.means_prior_ - centre
        if "m" in self.params:
            self.beta_posterior_ = self.beta_prior_ + post
            self.means_posterior_ = (
                self.beta_prior_[:, None] * prior_means + first
            ) / self.beta_posterior_[:, None] + centre
        if "c" not in self.params:
            return
        means = self.means_posterior_ - centre
        if full:
            scatter = (
                second
                + np.einsum("c,ci,cj->cij", self.beta_prior_, prior_means, prior_means)
                - np.einsum("c,ci,cj->cij", self.beta_posterior_, means, means)
            )
        else:
            scatter = (
                second
                + self.beta_prior_[:, None] * prior_means**2
                - self.beta_posterior_[:, None] * means**2
            )
        if self.covariance_type == "tied":
            self.dof_posterior_ = self.dof_prior_ + post.sum()
            self.scale_posterior_ = self.scale_prior_ + scatter.sum(axis=0)
        else:
            self.dof_posterior_ = self.dof_prior_ + post
            if self.covariance_type == "spherical":
                # hmmlearn's: the mean over the features of the diagonal scatter.
                scatter = scatter.mean(axis=1)
            self.scale_posterior_ = self.scale_prior_ + scatter

    def _emission_divergence(self):
        n_features = self.means_posterior_.shape[1]
        posterior_scales = self._full_scales(self.scale_posterior_)
        prior_scales = self._full_scales(self.scale_prior_)
        dof = np.broadcast_to(self.dof_posterior_, (self.n_components,))
        # E_q(Lambda) KL(N(m, (beta Lambda)^-1) || N(m0, (beta0 Lambda)^-1)): the
        # expectation of a term linear in Lambda, E Lambda = nu W.
        ratio = self.beta_prior_ / self.beta_posterior_
        difference = self.means_posterior_ - self.means_prior_
        precision = np.linalg.inv(posterior_scales) * dof[:, None, None]
        quadratic = np.einsum("ci,cij,cj->c", difference, precision, difference)
        normal = 0.5 * (n_features * (ratio - 1 - np.log(ratio)) + self.beta_prior_ * quadratic)
        if self.covariance_type == "tied":
            wishart = wishart_divergence(
                self.dof_posterior_, posterior_scales[0], self.dof_prior_, prior_scales[0]
            )
        else:
            wishart = wishart_divergence(
                self.dof_posterior_, posterior_scales, self.dof_prior_, prior_scales
            ).sum()
        return float(normal.sum() + wishart)


class VariationalCategoricalHMM(_VariationalHMM, CategoricalHMM):
    """Hidden Markov model with categorical emissions, fitted by variational Bayes.

    hmmlearn's ``VariationalCategoricalHMM`` (same parameters, attributes and
    numbers from the same initialisation; pass ``lengths`` by keyword): a
    column of symbols 0 .. n_features - 1 (or several, independent given the
    state, as in :class:`CategoricalHMM`), Dirichlet priors on
    ``startprob_``, on each row of ``transmat_`` and on each state's symbol
    probabilities, and a factored posterior fitted by coordinate ascent on
    the evidence lower bound, which ``monitor_`` records.  The point
    parameters are the posterior means; :meth:`score`, :meth:`predict` and
    :meth:`sample` use them, as in hmmlearn.  :meth:`partial_fit` runs
    stochastic variational inference.

    Parameters
    ----------
    n_components : int, default=1
        Number of hidden states.
    startprob_prior, transmat_prior : float or array, optional
        Dirichlet concentrations of the priors on ``startprob_`` and on each
        row of ``transmat_`` (default 1 / n_components).
    emissionprob_prior : float or array of shape (n_components, n_features), optional
        Dirichlet concentration of the prior on each state's symbol
        probabilities (default 1 / n_features).
    n_features : int, optional
        Alphabet size; by default ``max(X) + 1`` of the data at fit.
    algorithm, random_state, verbose, implementation
        As in :class:`CategoricalHMM`.
    n_iter : int, default=100
        Maximum number of iterations.
    tol : float, default=1e-6
        VB stops when the ELBO gains less than ``tol``.
    params, init_params : str, default="ste"
        "s" start, "t" transitions, "e" emissions (their priors and
        posteriors; see :class:`VariationalGaussianHMM`).
    n_init, n_jobs, learning_decay, learning_offset, total_samples
        As in :class:`VariationalGaussianHMM`.

    Attributes
    ----------
    startprob_prior_, startprob_posterior_ : ndarray of shape (n_components,)
    transmat_prior_, transmat_posterior_ : ndarray of shape (n_components, n_components)
    emissionprob_prior_, emissionprob_posterior_ : ndarray
        In the shape of ``emissionprob_``: (n_components, n_features) for one
        column; zero beyond each column's alphabet.
    startprob_, transmat_, emissionprob_ : ndarray
        The posterior means.
    monitor_, lower_bound_, n_iter_, converged_, n_symbols_
        As in :class:`VariationalGaussianHMM` and :class:`CategoricalHMM`.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq import VariationalCategoricalHMM
    >>> X = np.array([[0], [0], [1], [0], [2], [2], [1], [2]] * 10)
    >>> model = VariationalCategoricalHMM(n_components=2, random_state=0).fit(X)
    >>> model.emissionprob_posterior_.shape
    (2, 3)
    >>> model.predict(X).shape
    (80,)
    """

    _default_priors = ("startprob_prior", "transmat_prior", "emissionprob_prior")
    _variational_emission_attributes = {
        "e": ("emissionprob_prior_", "emissionprob_posterior_"),
    }
    _posteriors_anchored_by_labels = {"e": ("emissionprob_posterior_",)}
    emissionprob_init = None

    def __init__(
        self,
        n_components=1,
        startprob_prior=None,
        transmat_prior=None,
        emissionprob_prior=None,
        n_features=None,
        algorithm="viterbi",
        random_state=None,
        n_iter=100,
        tol=1e-6,
        verbose=False,
        params="ste",
        init_params="ste",
        implementation="log",
        *,
        n_init=1,
        n_jobs=None,
        learning_decay=0.6,
        learning_offset=0.0,
        total_samples=None,
    ):
        self.n_components = n_components
        self.startprob_prior = startprob_prior
        self.transmat_prior = transmat_prior
        self.emissionprob_prior = emissionprob_prior
        self.n_features = n_features
        self.algorithm = algorithm
        self.random_state = random_state
        self.n_iter = n_iter
        self.tol = tol
        self.verbose = verbose
        self.params = params
        self.init_params = init_params
        self.implementation = implementation
        self.n_init = n_init
        self.n_jobs = n_jobs
        self.learning_decay = learning_decay
        self.learning_offset = learning_offset
        self.total_samples = total_samples

    def _support(self):
        """(n_columns, n_symbols): the symbols of each column's alphabet."""
        sizes = np.atleast_1d(self.n_symbols_)
        return np.arange(sizes.max()) < sizes[:, None]

    def _initialize_variational_emissions(self, X, random_state):
        preset = self._preset_group("e")
        if preset is not None:
            prior, posterior = preset["emissionprob_prior_"], preset["emissionprob_posterior_"]
            # The alphabets as CategoricalHMM reads them from a table of that shape.
            self._presets["emissionprob_"] = posterior / posterior.sum(axis=-1, keepdims=True)
        # The alphabets as CategoricalHMM finds them (n_features or the data).
        CategoricalHMM._initialize_emissions(self, X, random_state)
        shape = np.shape(self.emissionprob_)
        support = self._support().reshape(shape[1:])
        if preset is None:
            # hmmlearn's recipe (Dirichlet draws of the prior's concentration,
            # scaled to the rows per state), the prior added.
            default = (1.0 / np.atleast_1d(self.n_symbols_))[:, None].reshape(
                (-1,) * (len(shape) - 2) + (1,)
            )
            prior = np.where(support, self._prior_array("emissionprob_prior", default, shape), 0)
            draws = np.zeros(emission_table(prior).shape)
            for index in np.ndindex(draws.shape[:2]):
                row = emission_table(prior)[index]
                draws[index][row > 0] = random_state.dirichlet(row[row > 0])
            posterior = prior + draws.reshape(shape) * X.shape[0] / self.n_components
        for name, value in (("emissionprob_prior_", prior), ("emissionprob_posterior_", posterior)):
            value = np.asarray(value, dtype=np.float64)
            if value.shape != shape:
                raise ValueError(f"{name} must have shape {shape}, got {value.shape}.")
            inside = np.broadcast_to(support, shape)
            if not np.all(np.isfinite(value)) or np.any(value[inside] <= 0):
                raise ValueError(f"{name} must be positive and finite (Dirichlet concentrations).")
            if np.any(value[~inside] != 0):
                raise ValueError(f"{name} must be 0 beyond each column's alphabet.")
            setattr(self, name, value)

    def _derive_emissions(self):
        posterior = self.emissionprob_posterior_
        self.emissionprob_ = posterior / posterior.sum(axis=-1, keepdims=True)

    def _estep_emission_terms(self, X):
        table = emission_table(self.emissionprob_posterior_)
        n_components, n_columns, width = table.shape
        with np.errstate(divide="ignore"):  # beyond an alphabet: never indexed
            log_table = np.where(table > 0, subnormalised_log(table), -np.inf)
        log_table = np.ascontiguousarray(log_table.reshape(n_components, -1).T)
        index, observed = self._symbol_indices(X, width)
        if observed is not None:  # a missing symbol's column leaves its factor out
            return np.where(observed[:, :, None], log_table[index], 0.0).sum(axis=1), index
        if n_columns == 1:
            return log_table[index[:, 0]], index
        return log_table[index].sum(axis=1), index

    def _variational_emission_mstep(self, statistics):
        if "e" in self.params:
            shape = np.shape(self.emissionprob_prior_)
            self.emissionprob_posterior_ = self.emissionprob_prior_ + statistics["obs"].reshape(
                shape
            )

    def _emission_divergence(self):
        return dirichlet_divergence(self.emissionprob_posterior_, self.emissionprob_prior_)
