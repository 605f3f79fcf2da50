"""hmmlearn's conventions for the parameters of skseq's HMMs.

hmmlearn users set fitted parameters by hand (``model.means_ = ...``, with
the letter left out of ``init_params``), read and assign ``n_features``, and
call ``_compute_log_likelihood``.  :class:`HmmlearnCompatMixin` keeps those
conventions apart from the model (:class:`skseq.hmm.BaseHMM`, which inherits
it): every parameter named by a ``params`` letter is stored as a float64
copy; one assigned by code outside skseq is *hand-set*, kept as the start of
every ``n_init`` run (a preset) unless its ``<name>_init`` or its
``init_params`` letter overwrites it, with hmmlearn's warning then, both as a
``UserWarning`` and, where hmmlearn's users' log handlers (and pytest's
``caplog``) catch it, as a warning record of the logger ``"skseq.hmm"``
(``_fit_logger``; the degenerate-solution warning too).
"""

import logging
import sys

import numpy as np

from .._validation import check_scalar_param
from ..base import _PACKAGE_DIRECTORY, warn_user

__all__ = ["HmmlearnCompatMixin", "as_parameter_array"]

# hmmlearn reports through the logging module what skseq also warns about.
logger = logging.getLogger("skseq.hmm")


def as_parameter_array(value, name):
    """A fitted parameter given as any array-like (hmmlearn accepts lists), as float64.

    Always a copy: the model never shares, hence never changes, the caller's
    array.  Shapes and values are checked where the parameters are used
    (:meth:`BaseHMM._check_fitted_parameters`, the initialisation).
    """
    if value is None:
        raise TypeError(f"{name} must be an array of numbers, got None.")
    try:
        array = np.asarray(value)
        if np.iscomplexobj(array):
            raise TypeError(f"{name} must be real, got complex values.")
        return np.array(array, dtype=np.float64)
    except ValueError as error:
        raise ValueError(f"{name} must be a rectangular array of numbers: {error}") from None


class HmmlearnCompatMixin:
    """Hand-set parameters, presets and ``n_features``, as hmmlearn has them.

    For :class:`skseq.hmm.BaseHMM`, which supplies ``_all_letters`` and
    ``_emission_letters`` (the parameters by letter) and ``init_params``.
    """

    _fit_logger = logger

    def __setattr__(self, name, value):
        # Every parameter named by a params letter is stored as a float64 array,
        # whatever array-like is assigned.  One assigned by code outside skseq
        # is "hand-set": fit warns when its initialisation overwrites it.
        if name in self._all_letters.values():
            value = as_parameter_array(value, name)
            if not sys._getframe(1).f_code.co_filename.startswith(_PACKAGE_DIRECTORY):
                self.__dict__.setdefault("_hand_set", set()).add(name)
        super().__setattr__(name, value)

    @property
    def n_features(self):
        """Number of features of ``X`` (hmmlearn's attribute).

        As set by hand (``model.n_features = 4`` before setting the emission
        parameters and calling :meth:`sample`, as in hmmlearn), else as the
        emission parameters say, else as seen at fit (``n_features_in_``).
        A value set by hand must agree with the emission parameters and with
        the ``X`` given to ``fit``, which then derives it from the data.
        """
        n_features = self._n_features_or_none()
        if n_features is None:
            raise AttributeError(
                f"{type(self).__name__} has no n_features yet: fit the model, set its "
                "emission parameters, or assign n_features."
            )
        return n_features

    @n_features.setter
    def n_features(self, value):
        self.__dict__["_n_features"] = check_scalar_param(value, "n_features", "int", low=1)

    def _n_features_or_none(self):
        """n_features as set by hand, else the last axis of the first emission
        parameter (means_, lambdas_, ...), else ``n_features_in_``; None if none is known."""
        declared = self.__dict__.get("_n_features")
        if declared is not None:
            return declared
        for attribute in self._emission_letters.values():
            value = getattr(self, self._storage_name(attribute), None)
            if attribute == "covars_" or value is None:
                continue  # covariances' compact shapes need not end in n_features
            return int(np.shape(value)[-1])
        return getattr(self, "n_features_in_", None)

    def _capture_presets(self):
        """Parameters set by hand (hmmlearn style: set ``means_`` and leave "m"
        out of init_params), captured once so that every one of the n_init runs
        starts from them rather than from the previous run's result.

        A hand-set parameter that the initialisation overwrites (its letter
        is in ``init_params``, or its ``<name>_init`` is given) gets
        hmmlearn's warning.
        """
        hand_set = self.__dict__.get("_hand_set", ())
        self._presets = {}
        for letter, attribute in self._all_letters.items():
            storage = self._storage_name(attribute)
            if not hasattr(self, storage):
                continue
            init_name = attribute[:-1] + "_init"
            if getattr(self, init_name, None) is not None:
                reason = f"{init_name} is given"
            elif letter in self.init_params:
                reason = f"'init_params' contains {letter!r}"
            else:
                self._presets[attribute] = np.copy(getattr(self, storage))
                continue
            if attribute in hand_set:
                message = (  # hmmlearn's words
                    f"Even though the {attribute!r} attribute is set, it will be "
                    f"overwritten during initialization because {reason}"
                )
                self._fit_logger.warning(message)
                warn_user(message)

    def _initialized(self):
        """After an initialisation from data: nothing is hand-set any more, and
        ``n_features`` comes from the fitted parameters."""
        self.__dict__.pop("_hand_set", None)
        self.__dict__.pop("_n_features", None)

    def _initial_value(self, attribute):
        """The user's initial value for ``attribute``: ``<name>_init``, then a preset."""
        init_value = getattr(self, attribute[:-1] + "_init", None)
        if init_value is not None:
            return np.array(init_value, dtype=np.float64)
        return self._presets.get(attribute)

    def _storage_name(self, attribute):
        """Where a parameter is stored (GaussianHMM keeps ``covars_`` as ``_covars_``)."""
        return attribute

    def _compute_log_likelihood(self, X):
        """log p(x_t | z_t = k) for every row and state (hmmlearn's name)."""
        return self._emission_terms(X)[0]
