"""EM machinery shared by every latent-state model.

An EM estimator here is defined by four things (abstract methods of
:class:`BaseEM`, with its snapshot hooks and the stream engine's):

* ``_initialize(X, offsets, random_state)`` sets the initial parameters;
* ``_estep(X, offsets, buffers=None)`` returns ``(statistics, log_likelihood)``
  for a block of whole sequences (``buffers``: the block's work arrays, kept by
  the fit's :class:`FitContext` between E steps, or None), where
  ``statistics`` is a :class:`SufficientStatistics`: statistics of disjoint
  blocks *add up*, and can be *scaled* (stochastic EM blends them as
  ``(1 - rho) * s + rho * (N / B) * s_batch``); a family whose
  ``_estep_shared()`` gives what all blocks read (the HMMs: the chain and
  the emissions function) gets it as ``shared=``, made once per E step;
* ``_mstep(statistics)`` maps summed statistics to parameters;
* ``_n_parameters()`` counts free parameters (for AIC / BIC).

:class:`BaseEM` runs the loop: initialisation (with ``n_init`` restarts), the
E step over sequences in threads (:mod:`skseq._parallel`), the convergence
monitor, warnings and progress output, and, with ``acceleration="squarem"``,
SQUAREM over the coordinates a family declares (:class:`ParameterCoordinates`).
It also runs stochastic EM (the user guide's "Stochastic EM and streams" page,
``doc/user_guide/stochastic_em.rst``): each batch's statistics are blended
into running statistics with the Robbins-Monro step
rho_t = (learning_offset + t) ** -learning_decay, then the
M step maps them to parameters.  The running statistics are kept per row
(divided by the rows they summarise) and scaled to ``total_samples`` rows
(or, without it, to the rows of the batch) for the M step, which is
s_t = (1 - rho_t) s_{t-1} + rho_t (N / B) s_batch of scikit-learn's
``LatentDirichletAllocation``.  The HMMs and the linear-Gaussian SSM build
on it.
"""

import abc
import copy
import sys
import time
from contextlib import contextmanager
from functools import partial

import numpy as np
from joblib import effective_n_jobs
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ._parallel import run_calls, thread_runner
from ._sequences import split_offsets
from ._validation import check_bool_param, check_parameters
from ._warnings import _PACKAGE_DIRECTORY, warn_user  # noqa: F401 (re-exported)

__all__ = [
    "ConvergenceMonitor",
    "SufficientStatistics",
    "ParameterCoordinates",
    "BaseEM",
    "FitContext",
    "warn_user",
]

class SufficientStatistics(dict):
    """A dict of named arrays that adds and scales like a vector.

    Examples
    --------
    >>> import numpy as np
    >>> a = SufficientStatistics(counts=np.array([1.0, 2.0]))
    >>> b = SufficientStatistics(counts=np.array([3.0, 4.0]))
    >>> (a + b)["counts"]
    array([4., 6.])
    >>> (0.5 * a)["counts"]
    array([0.5, 1. ])
    """

    def __add__(self, other):
        if self.keys() != other.keys():
            raise ValueError(f"cannot add statistics with keys {sorted(self)} and {sorted(other)}")
        return SufficientStatistics({key: self[key] + other[key] for key in self})

    def __mul__(self, factor):
        return SufficientStatistics({key: factor * value for key, value in self.items()})

    __rmul__ = __mul__

    def copy(self):
        return SufficientStatistics({key: np.copy(value) for key, value in self.items()})


def _symmetric_function(matrices, function):
    """``function`` of the eigenvalues of symmetric matrices (a stack along the last two axes)."""
    eigenvalues, eigenvectors = np.linalg.eigh(0.5 * (matrices + np.swapaxes(matrices, -1, -2)))
    return (eigenvectors * function(eigenvalues)[..., None, :]) @ np.swapaxes(eigenvectors, -1, -2)


class ParameterCoordinates:
    """Parameters as one flat vector of unit-free, unconstrained coordinates.

    What SQUAREM (:meth:`BaseEM._run_squarem`) extrapolates along: a family
    declares, for each parameter EM learns, its kind and its units, and any
    point of the coordinate space maps back to parameters of the right kind.

    Parameters
    ----------
    kinds : dict
        ``{name: (kind, units)}`` with ``kind`` one of

        * ``"real"``: any real array; the coordinates are ``value / units``
          (``units`` broadcasts to the value's shape);
        * ``"positive"``: positive entries; ``log(value / units)``;
        * ``"covariance"``: symmetric positive-definite matrices along the
          last two axes; the matrix logarithm of the matrix whitened by
          ``units`` (a vector: ``C_ij / (units_i units_j)``), so that every
          point maps back to a positive-definite matrix;
        * ``"probabilities"``: distributions along the last axis; the logs of
          the probabilities (``units`` unused), mapped back by normalising
          their exponentials.  A probability of zero is ``-inf`` and stays zero.

    Examples
    --------
    >>> import numpy as np
    >>> coordinates = ParameterCoordinates({"p": ("probabilities", None)})
    >>> vector = coordinates.to_vector({"p": np.array([0.25, 0.75])})
    >>> coordinates.from_vector(vector + 1.0, {"p": np.array([0.25, 0.75])})["p"]
    array([0.25, 0.75])
    """

    def __init__(self, kinds):
        self.kinds = dict(kinds)

    def to_vector(self, parameters):
        """The coordinates of the parameters named in ``kinds``, concatenated."""
        parts = []
        for name, (kind, units) in self.kinds.items():
            value = np.asarray(parameters[name], dtype=np.float64)
            with np.errstate(divide="ignore"):
                if kind == "real":
                    part = value / units
                elif kind == "positive":
                    part = np.log(value / units)
                elif kind == "covariance":
                    whitened = value / np.multiply.outer(units, units)
                    part = _symmetric_function(whitened, np.log)
                else:  # probabilities
                    part = np.log(value)
            parts.append(np.ravel(part))
        return np.concatenate(parts) if parts else np.zeros(0)

    def from_vector(self, vector, parameters):
        """``parameters`` with the named ones replaced by those of ``vector``
        (a new dict), or None when they are not finite."""
        result = dict(parameters)
        start = 0
        for name, (kind, units) in self.kinds.items():
            shape = np.shape(parameters[name])
            size = int(np.prod(shape))
            part = np.asarray(vector[start : start + size]).reshape(shape)
            start += size
            with np.errstate(over="ignore", invalid="ignore"):
                if kind == "real":
                    value = part * units
                elif kind == "positive":
                    value = np.exp(part) * units
                elif kind == "covariance":
                    value = _symmetric_function(part, np.exp) * np.multiply.outer(units, units)
                else:  # probabilities
                    top = np.max(part, axis=-1, keepdims=True)
                    weights = np.exp(part - top)
                    value = weights / np.sum(weights, axis=-1, keepdims=True)
            if not np.all(np.isfinite(value)):
                return None
            result[name] = value
        return result


class ConvergenceMonitor:
    """Records the log-likelihood of each EM iteration and decides convergence.

    As in hmmlearn, EM has converged when the log-likelihood gained by the
    last iteration is below ``tol`` *or* the iteration limit ``n_iter`` is
    reached (``converged`` is True in both cases).  The estimators'
    ``converged_`` attribute is stricter: True only when EM stopped on the
    criterion, not on the limit.  ``history`` holds every value reported
    since the last reset.

    To stop EM on another criterion, subclass and redefine ``converged``,
    then assign an instance to the estimator's ``monitor_`` before ``fit``
    (hmmlearn's recipe); ``fit`` keeps an assigned monitor.

    Parameters
    ----------
    tol : float
        Convergence threshold on the gain in log-likelihood.
    n_iter : int
        Maximum number of iterations.
    verbose : bool
        Print one line per iteration to stderr.

    Examples
    --------
    >>> monitor = ConvergenceMonitor(tol=0.1, n_iter=10, verbose=False)
    >>> for value in [-10.0, -5.0, -4.95]:
    ...     monitor.report(value)
    >>> monitor.converged
    True
    >>> monitor.iter
    3

    A criterion of one's own, kept by ``fit``:

    >>> import numpy as np
    >>> from skseq import GaussianHMM
    >>> class LooseTolerance(ConvergenceMonitor):
    ...     @property
    ...     def converged(self):
    ...         return self.iter >= self.n_iter or (
    ...             len(self.history) >= 2 and self.history[-1] - self.history[-2] < 100 * self.tol
    ...         )
    >>> model = GaussianHMM(2, n_iter=50, random_state=0)
    >>> model.monitor_ = LooseTolerance(model.monitor_.tol, model.monitor_.n_iter, False)
    >>> X = np.random.default_rng(0).normal(size=(100, 1))
    >>> type(model.fit(X).monitor_).__name__
    'LooseTolerance'
    """

    def __init__(self, tol, n_iter, verbose):
        self.tol = tol
        self.n_iter = n_iter
        self.verbose = verbose
        self.history = []
        self.iter = 0
        self._started = time.perf_counter()

    def __repr__(self):
        return (
            f"{type(self).__name__}(tol={self.tol}, n_iter={self.n_iter}, iter={self.iter}, "
            f"converged={self.converged}, history=[{len(self.history)} values])"
        )

    def _reset(self):
        self.history = []
        self.iter = 0
        self._started = time.perf_counter()

    def report(self, log_likelihood):
        """Record the log-likelihood of one E step."""
        if self.verbose:
            # The first value has nothing to gain on: no gain (not "gain +nan").
            gain = f"gain {log_likelihood - self.history[-1]:+.6g}, " if self.history else ""
            elapsed = time.perf_counter() - self._started
            print(
                f"EM iteration {self.iter + 1:>4d}: log-likelihood {log_likelihood:.6f}, "
                f"{gain}{elapsed:.2f} s",
                file=sys.stderr,
            )
        self.history.append(float(log_likelihood))
        self.iter += 1

    @property
    def converged(self):
        """Whether EM is done: the last gain fell below ``tol``, or ``n_iter`` is reached."""
        gain_below_tol = len(self.history) >= 2 and self.history[-1] - self.history[-2] < self.tol
        return self.iter >= self.n_iter or gain_below_tol


class FitContext:
    """What the E steps of one fit share: its thread runner and work arrays.

    Made by :meth:`BaseEM._fit_context` for one fit and handed to each
    :meth:`BaseEM._estep_parallel`; it lives as long as the fit and is never
    stored on the estimator (so pickling and cloning an estimator need no
    special case, during a fit or after).

    Parameters
    ----------
    runner : :class:`skseq._parallel.ThreadRunner` or None
        The fit's threads (running, inside its context); None: one thread.
    data : ndarray or None
        The fit's data.  Batch EM revisits the same blocks of whole sequences
        every iteration, so each block of ``data`` keeps its work arrays from
        one E step to the next; other arrays (online EM's minibatches, new
        arrays each time) get none.
    """

    def __init__(self, runner=None, data=None):
        self.runner = runner
        self.data = data
        self._buffers = {}

    def buffers(self, X, start, stop):
        """The work arrays (a dict for :func:`skseq.inference.hmm.work_array`) of
        the rows ``start:stop`` when ``X`` is the fit's data, else None.

        Called before the blocks go to threads: one thread at a time works on
        a block's arrays.
        """
        if self.data is None or X is not self.data:
            return None
        return self._buffers.setdefault((int(start), int(stop)), {})


class BaseEM(BaseEstimator, metaclass=abc.ABCMeta):
    """Base class for estimators fitted by expectation-maximisation.

    Subclasses implement the abstract hooks (a class that lacks one cannot
    be instantiated, and the error names it): ``_initialize``, ``_estep``,
    ``_mstep``, ``_n_parameters``, ``_get_parameters`` / ``_set_parameters``
    (used to keep the best of ``n_init`` runs, and by SQUAREM), and the
    stream engine's ``_is_new_stream``, ``_validate_stream_batch``,
    ``_advance_stream`` and ``_publish_stream``.  They may extend
    ``_parameter_rules`` and, for ``acceleration="squarem"``, supply
    :meth:`_acceleration_coordinates` (and optionally
    :meth:`_feasible_parameters`).  They expose ``n_iter``, ``tol``,
    ``n_init``, ``verbose``, ``n_jobs``, ``random_state``, ``acceleration``,
    ``learning_method``, ``learning_decay``, ``learning_offset``,
    ``total_samples`` and ``batch_size`` as constructor parameters.
    """

    # -- the family's model ------------------------------------------------------

    @abc.abstractmethod
    def _initialize(self, X, offsets, random_state):
        """Set the initial parameters from the data ``X`` (its sequences split at
        ``offsets``), drawing from ``random_state`` (a ``RandomState``)."""

    @abc.abstractmethod
    def _estep(self, X, offsets, buffers=None):
        """``(statistics, log_likelihood)`` of a block of whole sequences.

        ``statistics`` is a :class:`SufficientStatistics` (statistics of
        disjoint blocks add up; stochastic EM scales them); ``buffers``: the
        block's work arrays kept by the fit's :class:`FitContext`, or None.
        """

    @abc.abstractmethod
    def _mstep(self, statistics):
        """Set the parameters from summed :class:`SufficientStatistics`."""

    @abc.abstractmethod
    def _n_parameters(self):
        """The number of free scalar parameters EM learns (for AIC and BIC)."""

    @abc.abstractmethod
    def _get_parameters(self):
        """A snapshot of the learned parameters (a dict of copies), for
        :meth:`_set_parameters`: the best of ``n_init`` runs, SQUAREM's iterates."""

    @abc.abstractmethod
    def _set_parameters(self, parameters):
        """Restore the parameters of a :meth:`_get_parameters` snapshot."""

    # -- hyperparameters ---------------------------------------------------------

    def _check_params(self):
        """Validate the hyperparameters before ``fit`` or ``partial_fit`` uses them.

        Every parameter named in :data:`skseq._validation.PARAMETER_RULES`
        (``n_iter``, ``tol``, ``n_jobs``, the stochastic-EM schedule, ...) by
        that rule, the family's own by :meth:`_parameter_rules`.  With an
        assigned monitor, ``tol`` is left to it: EM then stops on the
        monitor's own criterion, for which hmmlearn's recipe passes any
        threshold as ``tol`` (a log-likelihood, say), not a minimum gain.
        """
        check_parameters(self, self._parameter_rules(), skip=self._unchecked_parameters())

    def _unchecked_parameters(self):
        """The hyperparameters :meth:`_check_params` leaves alone: ``tol`` under
        an assigned monitor; a family adds those whose value means a default
        set at fit (the variational HMMs' ``None`` priors)."""
        return ("tol",) if self.__dict__.get("_monitor_assigned") else ()

    def _parameter_rules(self):
        """``{name: rule(value, name)}`` for the family's own hyperparameters."""
        return {}

    # -- the E step over sequences, in threads -------------------------------

    @contextmanager
    def _fit_context(self, data=None):
        """A :class:`FitContext` for one fit: the thread runner (and the BLAS
        thread cap) of ``n_jobs``, and work arrays for the blocks of ``data``.

        Starting a pool costs milliseconds: far too much to pay on every E
        step, so a fit makes one and hands it to every :meth:`_estep_parallel`.
        The context lives in the caller's frame, never on the estimator: when
        the fit ends (or fails) the threads stop and the work arrays go.
        """
        with thread_runner(self.n_jobs) as runner:
            yield FitContext(runner, data)

    def _over_sequence_blocks(self, function, offsets, *row_arrays, context=None):
        """``function(*blocks_of_row_arrays, local_offsets)`` on blocks of whole sequences.

        The sequences are cut into at most ``n_jobs`` contiguous blocks of
        similar row counts; each block's rows of every array of
        ``row_arrays`` (one row per row of ``X``; ``None`` stays ``None``) and
        its offsets, starting at 0, go to ``function`` in the threads of
        ``context`` (the fit's :class:`FitContext`; without one, threads
        started for this call), or on the workers of the joblib backend in
        effect (dask's, for example).  With a ``context``, ``function`` also
        gets the block's work arrays as its last argument (None unless the
        first of ``row_arrays`` is the fit's data).  Returns the results in
        block order.
        """
        groups = split_offsets(offsets, effective_n_jobs(self.n_jobs))

        def call(start_row, stop_row, rows, local_offsets):
            if context is None:
                return partial(function, *rows, local_offsets)
            buffers = context.buffers(row_arrays[0], start_row, stop_row)
            return partial(function, *rows, local_offsets, buffers)

        if len(groups) == 1:
            return run_calls([call(0, offsets[-1], row_arrays, offsets)])
        calls = []
        for first, stop in groups:
            start_row, stop_row = offsets[first], offsets[stop]
            rows = [None if a is None else a[start_row:stop_row] for a in row_arrays]
            calls.append(call(start_row, stop_row, rows, offsets[first : stop + 1] - start_row))
        if context is not None and context.runner is not None:
            return run_calls(calls, context.runner)
        with self._fit_context() as for_this_call:
            return run_calls(calls, for_this_call.runner)

    def _estep_parallel(self, X, offsets, context=None):
        """Sum the E-step statistics of all sequences, splitting them over threads.

        Each thread gets a contiguous block of whole sequences; the kernels
        release the GIL.  The sum is taken in block order, so the result
        equals the one-thread result up to rounding.  ``context`` (a
        :class:`FitContext`): the fit's threads and work arrays; without
        one (``partial_fit``), a pool is started for this call when it
        needs more than one thread.
        """
        shared = self._estep_shared()
        function = self._estep if shared is None else partial(self._estep, shared=shared)
        return self._add_up(self._over_sequence_blocks(function, offsets, X, context=context))

    def _estep_shared(self):
        """What every block's :meth:`_estep` of one E step reads and nothing
        writes, made once before the blocks go to threads and passed to each
        as ``shared=`` (None: nothing, and no such argument).

        Made in the blocks, it would be made once per thread, in Python
        under the GIL, while the other threads wait for it.
        """
        return None

    @staticmethod
    def _add_up(results):
        """Sum ``(statistics, log_likelihood)`` pairs in their order."""
        statistics, log_likelihood = results[0]
        for more_statistics, more_log_likelihood in results[1:]:
            statistics = statistics + more_statistics
            log_likelihood += more_log_likelihood
        return statistics, log_likelihood

    # -- the EM loop ------------------------------------------------------------

    # Why a log-likelihood can be -inf or NaN, for the messages of
    # _check_log_likelihood.  With densities that are never zero (Gaussian),
    # -inf is an overflow of a sum, not data of probability zero.
    _densities_never_zero = False
    # What a NaN means in the family's recursions (their floating-point failure).
    _numerical_failure = "the recursions of the E step failed in floating point"

    @property
    def _minus_infinity_cause(self):
        """Why the log-likelihood is -inf (shared by EM's check and the decoders')."""
        if self._densities_never_zero:
            return (
                "every density of the model is positive, so the data lie too far from "
                "the model for double precision (a log-likelihood below -1.8e308); rescale X "
                "(e.g. with sklearn.preprocessing.StandardScaler) or fit the model on data "
                "of that scale"
            )
        return "the data have probability zero under the model"

    def _check_log_likelihood(self, log_likelihood):
        """Raise when the log-likelihood of an E step (of fit, partial_fit or a
        stream) is not finite: one ValueError, whose message says which estimator,
        the value, and why (data of probability zero, an overflow, or the
        family's numerical failure)."""
        if np.isfinite(log_likelihood):
            return
        cause = self._minus_infinity_cause if log_likelihood == -np.inf else self._numerical_failure
        raise ValueError(
            f"{type(self).__name__}: the log-likelihood of the data is {float(log_likelihood)} "
            f"under the current parameters: {cause}."
        )

    # -- the convergence monitor --------------------------------------------------

    @property
    def monitor_(self):
        """The :class:`ConvergenceMonitor` of the last fit (hmmlearn's attribute).

        It exists from construction, as in hmmlearn, yet is no constructor
        parameter nor a fitted attribute in scikit-learn's sense: before the
        first fit it is created on first access from ``tol``, ``n_iter`` and
        ``verbose``.  ``fit`` builds a new one from the hyperparameters as
        they are then, unless one was assigned (``model.monitor_ =
        MyMonitor(...)``): an assigned monitor is reset and used by every
        ``fit``, so a subclass's ``converged`` decides when EM stops.
        """
        monitor = self.__dict__.get("_monitor")
        if monitor is None:
            monitor = self._monitor = ConvergenceMonitor(self.tol, self.n_iter, self.verbose)
        return monitor

    @monitor_.setter
    def monitor_(self, monitor):
        for name in ("history", "iter", "report", "_reset"):
            if not hasattr(monitor, name):
                raise TypeError(
                    f"monitor_ must be a ConvergenceMonitor (or have its {name!r}), "
                    f"got {type(monitor).__name__}."
                )
        self._monitor = monitor
        self._monitor_assigned = True

    def _fresh_monitor(self):
        """The monitor one EM run reports to: a copy of an assigned one, or a new default."""
        if self.__dict__.get("_monitor_assigned"):
            monitor = copy.deepcopy(self._monitor)
            monitor._reset()
            return monitor
        return ConvergenceMonitor(self.tol, self.n_iter, self.verbose)

    def _keep_monitor(self, monitor):
        """Store the monitor of the kept run; an assigned monitor stays the same object."""
        if self.__dict__.get("_monitor_assigned"):
            self._monitor.__dict__.update(vars(monitor))
        else:
            self._monitor = monitor

    def _stops(self, monitor):
        """Whether EM stops before its next M step: the monitor's ``converged``.

        On the last iteration, reaching the limit alone still takes the last
        M step (as hmmlearn, whose loop stops after it): there the monitor's
        criterion is asked with its limit moved one iteration on, which
        leaves the gain below ``tol`` (or a subclass's own test).  Either way
        EM ends; what this decides is whether the last M step runs and
        whether the fit counts as converged.
        """
        if monitor.iter < self.n_iter:
            return bool(monitor.converged)
        probe = copy.copy(monitor)
        probe.n_iter = monitor.iter + 1
        return bool(probe.converged)

    # -- the EM loop ------------------------------------------------------------

    def _monitored(self, log_likelihood):
        """What the convergence monitor records for an E step whose data
        log-likelihood is ``log_likelihood`` (batch and online ``fit``): that
        value; variational models record their evidence lower bound, the
        E step's bound minus the divergence of the parameters' posterior
        from their prior."""
        return log_likelihood

    def _run_em(self, X, offsets, random_state, monitor, context):
        """Iterate E and M steps from the current parameters until ``monitor`` stops them.

        ``context``: the fit's :class:`FitContext`, for every E step.  Returns
        whether EM stopped on its criterion (rather than at ``n_iter``) and the
        statistics of the last E step (``None`` when ``n_iter`` is 0).
        """
        if self.learning_method == "online":
            return self._run_online_em(X, offsets, random_state, monitor, context)
        if getattr(self, "acceleration", None) == "squarem" and self.n_iter > 0:
            coordinates = self._acceleration_coordinates(X)
            if coordinates is not None:
                return self._run_squarem(X, offsets, monitor, context, coordinates)
        statistics = None
        for _ in range(self.n_iter):
            statistics, log_likelihood = self._estep_parallel(X, offsets, context)
            self._check_log_likelihood(log_likelihood)
            monitor.report(self._monitored(log_likelihood))
            if self._stops(monitor):
                return True, statistics
            self._mstep(statistics)
        return False, statistics

    # -- SQUAREM ----------------------------------------------------------------

    def _acceleration_coordinates(self, X):
        """The :class:`ParameterCoordinates` of the parameters EM learns, for
        SQUAREM on the fit's data ``X`` (whose scale may set the units); None
        when nothing is learned (plain EM then runs)."""
        return None

    def _feasible_parameters(self, parameters):
        """An extrapolated point made feasible (e.g. covariance floors), or None
        when it cannot be; by default the point itself."""
        return parameters

    def _estep_or_none(self, X, offsets, context):
        """The E step at an extrapolated point, or None when it is not usable:
        its log-likelihood is not finite, or the family refuses the parameters."""
        try:
            statistics, log_likelihood = self._estep_parallel(X, offsets, context)
        except (ValueError, FloatingPointError, np.linalg.LinAlgError):
            return None
        if not np.isfinite(log_likelihood):
            return None
        return statistics, log_likelihood

    def _run_squarem(self, X, offsets, monitor, context, coordinates):
        """Batch EM accelerated by SQUAREM (Varadhan and Roland, 2008, SqS3).

        Returns, as :meth:`_run_em`, whether EM stopped on its criterion and
        the statistics of the last E step.

        Each cycle makes two EM steps, theta1 = M(theta0) and
        theta2 = M(theta1), and extrapolates along them in the unit-free
        coordinates of ``coordinates``: theta' = theta0 + 2 a r + a**2 v with
        r = theta1 - theta0, v = theta2 - 2 theta1 + theta0 and a = |r| / |v|.
        The step length is capped; a point that does not map back to feasible
        parameters is backtracked (a halved towards 1) up to ten times at no
        cost, and one whose log-likelihood is below theta1's is dropped for
        theta2, which EM guarantees; so the log-likelihood never decreases.
        The cap starts at 1, grows fourfold after each point kept at the cap
        and shrinks fourfold after a rejected one.

        The monitor sees every accepted log-likelihood (theta1's, then
        theta''s or theta2's): each is one iteration, and a rejected
        extrapolation costs one more, unreported E step.  It decides when EM
        stops by the same rule as plain EM (:meth:`_stops`), asked at the end
        of each cycle, when its last gain is the extrapolation's, and at the
        iteration limit: inside a cycle the gain is a plain EM step's, which
        is small along a ridge of the likelihood however far the maximum is
        (the crawl SQUAREM cures).  Coordinates that are not finite in the
        three iterates (a probability of zero) keep theta2's value.
        """
        statistics, log_likelihood = self._estep_parallel(X, offsets, context)
        self._check_log_likelihood(log_likelihood)
        monitor.report(log_likelihood)
        step_cap = 1.0
        while True:
            if self._stops(monitor):
                return True, statistics
            if monitor.iter >= self.n_iter:
                break
            theta0 = self._get_parameters()
            self._mstep(statistics)
            theta1 = self._get_parameters()
            statistics, log_likelihood = self._estep_parallel(X, offsets, context)
            self._check_log_likelihood(log_likelihood)
            monitor.report(log_likelihood)
            if monitor.iter >= self.n_iter:
                if self._stops(monitor):
                    return True, statistics
                break
            theta1_log_likelihood = log_likelihood
            self._mstep(statistics)
            theta2 = self._get_parameters()
            step, points = self._extrapolations(coordinates, theta0, theta1, theta2, step_cap)
            trial, n_rejected = None, 0
            for point in points:
                self._set_parameters(point)
                trial = self._estep_or_none(X, offsets, context)
                if trial is not None and trial[1] >= theta1_log_likelihood:
                    break
                trial = None
                n_rejected += 1
                if n_rejected > self._squarem_backtracks:
                    break
            if step > 1.0 and trial is None:  # rejected, or not even feasible
                step_cap = max(1.0, step_cap / 4.0)
            elif step >= step_cap and not n_rejected:
                step_cap *= 4.0
            if trial is None:
                self._set_parameters(theta2)
                statistics, log_likelihood = self._estep_parallel(X, offsets, context)
                self._check_log_likelihood(log_likelihood)
            else:
                statistics, log_likelihood = trial
            monitor.report(log_likelihood)
        # Out of iterations: end with a plain M step, as EM does.
        self._mstep(statistics)
        return False, statistics

    # Extrapolated points whose log-likelihood is below theta1's that SQUAREM
    # backtracks from (each costs an E step) before it settles for theta2.
    _squarem_backtracks = 1

    def _extrapolations(self, coordinates, theta0, theta1, theta2, step_cap):
        """The SqS3 step length a and the points to try, backtracked.

        a = |r| / |v|, at least 1 and capped at ``step_cap``.  The points
        (an iterator of parameters) are those of a, then of a with a - 1
        halved, and so on (a point that maps to infeasible parameters is
        skipped at no cost); none once a reaches 1: theta2 itself.
        """
        c0, c1, c2 = (coordinates.to_vector(theta) for theta in (theta0, theta1, theta2))
        moving = np.isfinite(c0) & np.isfinite(c1) & np.isfinite(c2)
        with np.errstate(invalid="ignore"):  # -inf - -inf where a probability is zero
            first = np.where(moving, c1 - c0, 0.0)
            second = np.where(moving, c2 - 2.0 * c1 + c0, 0.0)
        first_norm, second_norm = np.linalg.norm(first), np.linalg.norm(second)
        if not (first_norm > 0 and second_norm > 0):
            return 1.0, iter(())
        step = min(max(first_norm / second_norm, 1.0), step_cap)
        points = self._backtracked_points(coordinates, c0, c2, first, second, moving, step, theta2)
        return step, points

    def _backtracked_points(self, coordinates, c0, c2, first, second, moving, step, theta2):
        """The feasible parameters of the steps ``step``, then ``(step + 1) / 2``, ..."""
        for _ in range(10):
            if step - 1.0 < 1e-3:
                return
            extrapolated = c0 + 2.0 * step * first + step**2 * second
            point = np.where(moving, extrapolated, c2)
            parameters = None
            if np.all(np.isfinite(point[moving])):
                parameters = coordinates.from_vector(point, theta2)
            if parameters is not None:
                parameters = self._feasible_parameters(parameters)
            if parameters is not None:
                yield parameters
            step = 0.5 * (step + 1.0)

    def _run_online_em(self, X, offsets, random_state, monitor, context):
        """Stochastic EM over minibatches of ``batch_size`` whole sequences.

        One iteration is one pass over the sequences in a random order; the
        monitor records the sum of the batch log-likelihoods of each pass.
        """
        self._running_statistics = None
        self.n_batch_iter_ = 0
        n_sequences = len(offsets) - 1
        reference_rows = self.total_samples or X.shape[0]
        for _ in range(self.n_iter):
            order = random_state.permutation(n_sequences)
            log_likelihood = 0.0
            for first in range(0, n_sequences, self.batch_size):
                chosen = np.sort(order[first : first + self.batch_size])
                rows = np.concatenate([np.arange(offsets[s], offsets[s + 1]) for s in chosen])
                lengths = offsets[chosen + 1] - offsets[chosen]
                batch_offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.intp)
                statistics, batch_log_likelihood = self._estep_parallel(
                    X[rows], batch_offsets, context
                )
                self._check_log_likelihood(batch_log_likelihood)
                log_likelihood += batch_log_likelihood
                self._stochastic_step(statistics, len(rows), reference_rows)
            monitor.report(self._monitored(log_likelihood))
            if self._stops(monitor):
                return True, None
        return False, None

    def _fit_em(self, X, offsets):
        """Run ``n_init`` initialisations + EM; keep the best by log-likelihood.

        The caller has validated the hyperparameters (``_check_params``).
        """
        random_state = check_random_state(self.random_state)
        best = None
        for init in range(self.n_init):
            if self.verbose and self.n_init > 1:
                print(f"Initialisation {init + 1} of {self.n_init}", file=sys.stderr)
            self._initialize(X, offsets, random_state)
            if init == 0:
                self._warn_if_degenerate(X)
            monitor = self._fresh_monitor()
            with self._fit_context(X) as context:
                converged, statistics = self._run_em(X, offsets, random_state, monitor, context)
            final = monitor.history[-1] if len(monitor.history) else -np.inf
            if best is None or final > best[0]:
                if self.learning_method == "online":
                    running = (self._running_statistics, self.n_batch_iter_)
                elif statistics is not None:
                    running = ((1.0 / X.shape[0]) * statistics, monitor.iter)
                else:
                    running = (None, 0)
                best = (final, self._get_parameters(), monitor, converged, running)
        _, parameters, monitor, converged, (running, n_steps) = best
        self._set_parameters(parameters)
        # partial_fit after fit continues from these parameters and statistics,
        # counting each batch EM iteration as one step (as scikit-learn's LDA).
        self._running_statistics = running
        self.n_batch_iter_ = n_steps
        self._n_rows_seen = X.shape[0]
        self._keep_monitor(monitor)
        self.__dict__.pop("batch_log_likelihood_", None)  # describes partial_fit only
        self.n_iter_ = monitor.iter
        self.converged_ = converged
        self.lower_bound_ = monitor.history[-1] if len(monitor.history) else -np.inf
        # One log-likelihood has no gain to report: n_iter=1 is a deliberate
        # single step (e.g. a user's own loop), not a failure to converge.
        if not converged and len(monitor.history) >= 2:
            gain = monitor.history[-1] - monitor.history[-2]
            warn_user(
                f"{type(self).__name__} did not converge in n_iter={self.n_iter} "
                f"iterations (last gain {gain:.3g}, tol={self.tol}). "
                "Increase n_iter or tol.",
                ConvergenceWarning,
            )
        return self

    def _n_data_points(self, X):
        """The observed values of ``X`` (its entries that are not NaN)."""
        return int(X.size - np.count_nonzero(np.isnan(X)))

    def _warn_if_degenerate(self, X):
        """hmmlearn's warning: fewer observed values than free parameters to fit.

        Not with ``n_iter=0``, which fits nothing (a way to set the initial
        values as the parameters).  Also a warning record of ``_fit_logger``
        when the family names one.
        """
        if self.n_iter == 0:
            return
        n_parameters, n_data = self._n_parameters(), self._n_data_points(X)
        if n_data < n_parameters:
            message = (
                f"Fitting a model with {n_parameters} free scalar parameters with only "
                f"{n_data} data points will result in a degenerate solution."
            )
            if self._fit_logger is not None:
                self._fit_logger.warning(message)
            warn_user(message)

    # hmmlearn reports its fitting warnings through the logging module, where
    # its users' handlers catch them: the families that take its API name a
    # logger (a logging.Logger) that gets them as well.
    _fit_logger = None

    # -- stochastic EM ------------------------------------------------------------

    def _partial_fit_step(self, statistics, log_likelihood, n_rows):
        """The learning step of one ``partial_fit`` batch of ``n_rows``.

        Checks the log-likelihood (:meth:`_check_log_likelihood`), counts the
        rows, blends ``statistics`` in and runs the M step (N:
        ``total_samples`` when given, else every row seen so far by ``fit``
        and ``partial_fit``, so that priors weigh against all data rather
        than against one batch).  Keeps the batch's log-likelihood (under the
        parameters before this step) in ``batch_log_likelihood_`` and, with
        ``verbose``, prints it with the rows seen so far.
        """
        self._check_log_likelihood(log_likelihood)
        self._n_rows_seen = getattr(self, "_n_rows_seen", 0) + n_rows
        self._stochastic_step(statistics, n_rows, self.total_samples or self._n_rows_seen)
        self.batch_log_likelihood_ = float(log_likelihood)
        if self.verbose:
            print(
                f"partial_fit batch {self.n_batch_iter_:>5d}: log-likelihood "
                f"{log_likelihood:.6f} ({log_likelihood / n_rows:.6g} per row over "
                f"{n_rows} rows), {self._n_rows_seen} rows seen",
                file=sys.stderr,
            )

    def _stochastic_step(self, statistics, n_rows, reference_rows):
        """Blend one batch's statistics into the running ones, then the M step.

        ``n_rows`` rows gave ``statistics``; the M step sees the running
        statistics scaled to ``reference_rows`` rows (N of the stochastic-EM step).
        """
        self.n_batch_iter_ = getattr(self, "n_batch_iter_", 0) + 1
        step = (self.learning_offset + self.n_batch_iter_) ** (-self.learning_decay)
        per_row = (1.0 / n_rows) * statistics
        previous = getattr(self, "_running_statistics", None)
        if previous is None:
            self._running_statistics = per_row
        else:
            self._running_statistics = (1.0 - step) * previous + step * per_row
        self._mstep(reference_rows * self._running_statistics)

    # -- streams: one engine for every family's partial_fit ------------------------
    #
    # A stream is the sequence of partial_fit calls.  Its state is the message
    # carried across a chunk boundary (``_stream``: the family's forward-only
    # smoothing message of the last sequence seen), the running statistics,
    # the rows seen and the step counter; the public attributes listed in
    # ``_stream_attributes`` describe the filtered state of the last row.
    # Families supply the hooks: ``_is_new_stream``, ``_validate_stream_batch``,
    # ``_advance_stream`` and ``_publish_stream`` (``_initialize_stream`` has a
    # default).

    _stream_attributes = ()

    @abc.abstractmethod
    def _is_new_stream(self):
        """Whether this ``partial_fit`` call starts the stream (nothing fitted yet)."""

    @abc.abstractmethod
    def _validate_stream_batch(self, X, y, lengths, sequence_ids, *, first_call, continues):
        """``(X, offsets)``: the batch of one ``partial_fit`` call, validated.

        ``first_call``: the call starts the stream (the batch sets the
        model's dimensions); otherwise the fitted parameters are checked too.
        ``continues``: the batch's first sequence continues the stream's last
        one.  A family may take more keyword arguments (the LGSSM's
        ``controls``), passed on from ``partial_fit``.
        """

    def _initialize_stream(self, X, offsets):
        """Initialise the parameters from the first batch of a stream, as
        ``fit`` does (from the estimator's ``random_state``)."""
        self._initialize(X, offsets, check_random_state(self.random_state))

    @abc.abstractmethod
    def _advance_stream(self, X, carried):
        """``(statistics, log_likelihood, carried)`` of rows that continue one sequence.

        ``carried``: the forward-only smoothing message of the sequence's
        earlier rows, or None when ``X[0]`` starts it.  The statistics are
        those the rows add (the revision of the earlier rows included: at
        fixed parameters the chunks add up to the whole sequence's), the
        log-likelihood is theirs given the past, and ``carried`` the new message.
        """

    @abc.abstractmethod
    def _publish_stream(self, carried):
        """Set the public attributes (``_stream_attributes``) that describe the
        filtered state of the stream's last row, from its message ``carried``."""

    def _reset_stream(self):
        """Forget the carried message and the published filtered state (``fit`` does)."""
        self._stream = None
        for name in self._stream_attributes:
            self.__dict__.pop(name, None)

    def _partial_fit(self, X, y, lengths, sequence_ids, new_sequence, **batch_arguments):
        """One stochastic-EM step on a batch: the body of every family's ``partial_fit``.

        The first call (``_is_new_stream``) initialises the model from the
        batch and starts the stream state; later calls check the fitted
        parameters and continue.  The first sequence of the batch continues
        the stream's last sequence unless ``new_sequence``.
        """
        first_call = self._is_new_stream()
        self._check_params()
        check_bool_param(new_sequence, "new_sequence")
        carried = None if first_call or new_sequence else getattr(self, "_stream", None)
        X, offsets = self._validate_stream_batch(
            X,
            y,
            lengths,
            sequence_ids,
            first_call=first_call,
            continues=carried is not None,
            **batch_arguments,
        )
        if first_call:
            self._initialize_stream(X, offsets)
            self._running_statistics = None
            self._n_rows_seen = 0
            self.n_batch_iter_ = 0
        statistics, log_likelihood, carried = self._stream_estep(X, offsets, carried)
        running = getattr(self, "_running_statistics", None)
        if running is not None and any(
            np.shape(running[name]) != np.shape(value) for name, value in statistics.items()
        ):
            raise ValueError(
                "The running statistics of earlier partial_fit calls do not fit the model's "
                "current dimensions; call fit, or start from a new estimator."
            )
        self._partial_fit_step(statistics, log_likelihood, X.shape[0])
        self._stream = carried
        self._publish_stream(carried)
        return self

    def _stream_estep(self, X, offsets, carried):
        """E step of one ``partial_fit`` batch: ``(statistics, log_likelihood, carried)``.

        The first sequence continues the stream whose message is ``carried``
        (unless it is None) and the last one may be continued by the next
        call: both go through the family's forward-only smoother
        (``_advance_stream``), whose statistics include the revision of the
        rows before the chunk, so that at fixed parameters the chunks add up
        to the statistics of the whole sequence.  Sequences in between are
        complete and go through the batch E step (in threads with
        ``n_jobs``).  The returned message is that of the last sequence.
        """
        n_sequences = len(offsets) - 1
        statistics, log_likelihood = None, 0.0
        first_complete = 0
        if carried is not None:
            statistics, log_likelihood, carried = self._advance_stream(X[: offsets[1]], carried)
            first_complete = 1
            if n_sequences == 1:
                return statistics, log_likelihood, carried
        if n_sequences - 1 > first_complete:
            start, stop = offsets[first_complete], offsets[n_sequences - 1]
            middle, middle_log_likelihood = self._estep_parallel(
                X[start:stop], offsets[first_complete:n_sequences] - start
            )
            statistics = middle if statistics is None else statistics + middle
            log_likelihood += middle_log_likelihood
        last, last_log_likelihood, carried = self._advance_stream(X[offsets[-2] :], None)
        statistics = last if statistics is None else statistics + last
        return statistics, log_likelihood + last_log_likelihood, carried

    # -- model selection --------------------------------------------------------

    def aic(self, X, lengths=None, *, sequence_ids=None):
        """Akaike information criterion of the fitted model on ``X`` (lower is better).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        lengths : array-like of int, optional
            As in :meth:`fit`; also positional, as in hmmlearn (``aic`` has
            no ``y``).
        sequence_ids : see :meth:`fit`.

        Returns
        -------
        aic : float
        """
        return self._information_criterion("aic", X, lengths=lengths, sequence_ids=sequence_ids)

    def bic(self, X, lengths=None, *, sequence_ids=None):
        """Bayesian information criterion of the fitted model on ``X`` (lower is better).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        lengths : array-like of int, optional
            As in :meth:`fit`; also positional, as in hmmlearn (``bic`` has
            no ``y``).
        sequence_ids : see :meth:`fit`.

        Returns
        -------
        bic : float
        """
        return self._information_criterion("bic", X, lengths=lengths, sequence_ids=sequence_ids)

    def _information_criterion(self, criterion, X, **score_arguments):
        """AIC or BIC on ``X``, the one formula of every family: -2 log L plus
        the free parameters (:meth:`_n_parameters`) times 2 (``"aic"``) or
        times log n (``"bic"``; n: :meth:`_n_scored_rows`, n_samples by
        default); ``score_arguments`` go to ``score``."""
        check_is_fitted(self)
        log_likelihood = self.score(X, **score_arguments)
        if criterion == "aic":
            return -2 * log_likelihood + 2 * self._n_parameters()
        return -2 * log_likelihood + self._n_parameters() * np.log(
            self._n_scored_rows(X, **score_arguments)
        )

    def _n_scored_rows(self, X, **score_arguments):
        """BIC's n: the rows of ``X`` that ``score`` scores (all of them here; a
        model whose first rows only condition, or that skips rows, overrides it)."""
        return np.shape(X)[0]
