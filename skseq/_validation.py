"""Validation shared by every layer (inference functions and estimators).

Scalar arguments: each check raises a ``TypeError`` for a value of the wrong
type and a ``ValueError`` for a value out of range, naming the argument.
Python and numpy scalars are accepted alike, but a bool is never taken for a
number, nor a number or a string for a bool.

Hyperparameters: :data:`PARAMETER_RULES` declares, once for every estimator
that has a parameter of that name, the rule it must satisfy (``n_iter``,
``tol``, ``n_jobs``, ``random_state``, the stochastic-EM schedule, the shared
priors, ...).  A rule is a callable ``rule(value, name)`` that raises a
``TypeError`` or a ``ValueError`` naming the parameter; the builders below
make them (:func:`integer_rule`, :func:`real_rule`, :func:`prior_rule`,
:func:`option_rule`, :func:`letters_rule`, :func:`optional`, and
:func:`at_fit` for a rule whose bounds depend on the data).  Each
estimator's ``_check_params`` calls :func:`check_parameters` with the rules
of its own family's parameters (one table, declared next to the family), so
that a parameter of the same name gets the same rule and the same message in
every family.

Masked arrays, numpy's (and pykalman's) way of marking missing values:
scikit-learn's validation turns a :class:`numpy.ma.MaskedArray` into its
data, which would silently treat every masked entry as observed.  Every
skseq entry point for data passes ``X`` through :func:`masked_as_nan` first:
where missing values are supported (NaN marks them), masked entries become
NaN; elsewhere a masked entry is an error.
"""

import functools
import math
import numbers
import os
from functools import partial

import numpy as np

__all__ = [
    "check_scalar_param",
    "check_bool_param",
    "check_n_jobs",
    "check_prior_param",
    "check_option_param",
    "check_random_state_param",
    "check_tol_param",
    "check_verbose_param",
    "check_acceleration_param",
    "integer_rule",
    "real_rule",
    "prior_rule",
    "option_rule",
    "letters_rule",
    "optional",
    "at_fit",
    "COVARIANCE_TYPES",
    "PARAMETER_RULES",
    "check_parameters",
    "foreign_keywords_hinted",
    "masked_as_nan",
    "check_data_scale",
    "check_allocation",
    "physical_memory",
    "format_bytes",
]


def check_scalar_param(
    value, name, kind, *, low=None, high=None, low_open=False, high_open=False, allow_inf=False
):
    """Validate one hyperparameter; raise TypeError or ValueError naming it.

    ``kind`` is ``"int"`` or ``"real"``.  Bounds are closed unless
    ``low_open`` / ``high_open``.  Reals must be finite unless ``allow_inf``
    (NaN is always rejected).
    """
    if kind == "int":
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        expected = "an integer"
    else:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        expected = "a real number"
    if not ok:
        raise TypeError(f"{name} must be {expected}, got {value!r} of type {type(value).__name__}.")
    if kind == "real" and (np.isnan(value) or (not allow_inf and np.isinf(value))):
        raise ValueError(f"{name} must be {'a number' if allow_inf else 'finite'}, got {value!r}.")
    if low is not None and (value < low or (low_open and value == low)):
        bound = ">" if low_open else ">="
        raise ValueError(f"{name} must be {bound} {low}, got {value!r}.")
    if high is not None and (value > high or (high_open and value == high)):
        bound = "<" if high_open else "<="
        raise ValueError(f"{name} must be {bound} {high}, got {value!r}.")
    return value


def check_bool_param(value, name):
    """Accept a Python or numpy bool; raise TypeError naming ``name`` otherwise.

    Returns the value as a Python bool.  A string such as ``"no"`` would be
    truthy, and 0 / 1 are usually a misplaced positional argument: both are
    rejected.
    """
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be a bool, got {value!r} of type {type(value).__name__}.")
    return bool(value)


def check_n_jobs(n_jobs, name="n_jobs"):
    """None or a nonzero integer (joblib's convention: -1 means all cores).

    Returns ``n_jobs`` unchanged.
    """
    if n_jobs is None:
        return None
    check_scalar_param(n_jobs, name, "int")
    if n_jobs == 0:
        raise ValueError(f"{name} == 0 has no meaning; use None, a positive int or -1.")
    return n_jobs


def check_prior_param(value, name, *, low=None, low_open=False):
    """Validate a prior hyperparameter, a number or an array of numbers.

    Every entry must be finite and, with ``low``, at least ``low`` (more than
    ``low`` with ``low_open``): the range in which the M step is the maximiser
    of a proper posterior.  Shapes are checked where the prior is broadcast.
    Raises TypeError or ValueError naming the parameter.
    """
    if isinstance(value, bool) or np.iscomplexobj(value):
        raise TypeError(f"{name} must be a real number or an array of them, got {value!r}.")
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"{name} must be a real number or an array of them, got {value!r}."
        ) from None
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite, got {value!r}.")
    if low is not None:
        too_low = array <= low if low_open else array < low
        if np.any(too_low):
            bound = ">" if low_open else ">="
            shown = value if array.ndim == 0 else f"an entry {array[too_low].flat[0]!r}"
            raise ValueError(f"{name} must be {bound} {low}, got {shown}.")
    return array


def check_option_param(value, name, options):
    """One of the strings ``options``; a ValueError naming ``name`` otherwise."""
    if not (isinstance(value, str) and value in options):
        if len(options) == 2:
            allowed = f"{options[0]!r} or {options[1]!r}"
        else:
            allowed = f"one of {tuple(options)}"
        raise ValueError(f"{name} must be {allowed}, got {value!r}.")
    return value


def check_random_state_param(value, name="random_state"):
    """None, a seed in [0, 2**32 - 1] or a ``numpy.random.RandomState``
    (what :func:`sklearn.utils.check_random_state` takes, bools excepted).

    A ``numpy.random.Generator`` is refused with a TypeError: scikit-learn's
    tools (k-means, splits) cannot draw from one.
    """
    if value is None or isinstance(value, np.random.RandomState):
        return value
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(
            f"{name} must be None, an integer seed or a numpy.random.RandomState, "
            f"got {value!r} of type {type(value).__name__}."
        )
    if not 0 <= value <= 2**32 - 1:
        raise ValueError(f"{name} must be a seed in [0, 2**32 - 1], got {value!r}.")
    return value


def check_verbose_param(value, name="verbose"):
    """A bool or an integer >= 0 (a verbosity level)."""
    if isinstance(value, bool | np.bool_):
        return value
    if not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be a bool or an integer >= 0, got {value!r} of type "
            f"{type(value).__name__}."
        )
    if value < 0:
        raise ValueError(f"{name} must be a bool or an integer >= 0, got {value!r}.")
    return value


def check_tol_param(value, name="tol"):
    """A stopping tolerance: a real number >= 0, or -inf.

    Iterations stop when the gain (of the log-likelihood, of the lower
    bound, or the decrease of the loss) falls below ``tol``; a negative
    tolerance would count a loss of up to ``-tol`` as progress.  ``-inf`` is
    the one negative value with a meaning: never stop before the iteration
    limit (hmmlearn's idiom).  ``inf`` counts no gain as progress.
    """
    check_scalar_param(value, name, "real", allow_inf=True)
    if value < 0 and value != -np.inf:
        raise ValueError(
            f"{name} must be >= 0 (or -inf, to run every iteration), got {value!r}."
        )
    return value


def check_acceleration_param(value, name="acceleration"):
    """``"squarem"`` (SQUAREM-accelerated batch EM) or None (plain EM)."""
    if value is None or (isinstance(value, str) and value == "squarem"):
        return value
    raise ValueError(f"{name} must be 'squarem' or None (plain EM), got {value!r}.")


def check_letters(value, name, letters):
    """``params`` / ``init_params`` of an HMM: a string of the model's parameter letters."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string of parameter letters, got {value!r}.")
    unknown = set(value) - set(letters)
    if unknown:
        raise ValueError(
            f"{name} has unknown letters {sorted(unknown)}; allowed are "
            f"{sorted(letters)} ({letters})."
        )
    return value


# -- the builders of rules ------------------------------------------------------


def integer_rule(**bounds):
    """The rule of an integer hyperparameter (bounds as :func:`check_scalar_param`'s)."""
    return partial(check_scalar_param, kind="int", **bounds)


def real_rule(**bounds):
    """The rule of a real hyperparameter (bounds as :func:`check_scalar_param`'s)."""
    return partial(check_scalar_param, kind="real", **bounds)


def prior_rule(**bounds):
    """The rule of a prior hyperparameter, a number or an array (:func:`check_prior_param`)."""
    return partial(check_prior_param, **bounds)


def option_rule(*options):
    """The rule of a hyperparameter that is one of the strings ``options``."""
    return partial(check_option_param, options=options)


def letters_rule(letters):
    """The rule of an HMM's ``params`` / ``init_params``: letters of ``letters``
    (``{letter: attribute}``)."""
    return partial(check_letters, letters=letters)


def optional(rule):
    """The rule that accepts None and otherwise applies ``rule``."""

    def check(value, name):
        return None if value is None else rule(value, name)

    check.rule = rule  # for introspection (tests, reprs)
    return check


def at_fit(factory):
    """A rule whose bounds depend on the data, checked by ``fit`` once ``X`` is valid.

    ``factory(n_features)`` builds the rule for data of ``n_features``
    features (None: not known, for a check of the value's type alone).
    :func:`check_parameters` leaves these rules to the call that passes
    ``n_features``, and that call checks only them: the priors of the HMMs,
    whose proper range (or shape) follows from the data.
    """

    def check(value, name, n_features=None):
        return factory(n_features)(value, name)

    check.at_fit = True
    return check


# Dirichlet concentrations are positive; the M step's max(prior - 1 + counts, 0)
# is the MAP estimate for any of them (sparse below 1).
_DIRICHLET_CONCENTRATION = prior_rule(low=0.0, low_open=True)

#: The covariance types, as in hmmlearn and scikit-learn's GaussianMixture (the
#: ``covariance_type`` of the Gaussian emission models and of skseq.inference.gaussian).
COVARIANCE_TYPES = ("spherical", "diag", "full", "tied")

#: The rule of every hyperparameter name that more than one estimator (or
#: family) has: the same rule, hence the same error, wherever the name occurs.
#: A family's own parameters are declared next to the family and may not
#: redeclare these (:func:`check_parameters` refuses).
PARAMETER_RULES = {
    # every iterative estimator (EM and the neural trainer)
    # tol: >= 0, or -inf to run every iteration (hmmlearn's idiom).
    "tol": check_tol_param,
    "verbose": check_verbose_param,
    "random_state": check_random_state_param,
    "n_jobs": check_n_jobs,
    "batch_size": integer_rule(low=1),
    # EM (the HMMs and the linear-Gaussian SSM)
    "n_components": integer_rule(low=1),
    "n_iter": integer_rule(low=0),
    "n_init": integer_rule(low=1),
    "learning_method": option_rule("batch", "online"),
    "learning_decay": real_rule(low=0.5, high=1.0, low_open=True),
    "learning_offset": real_rule(low=0.0),
    "total_samples": optional(real_rule(low=0, low_open=True)),
    "acceleration": check_acceleration_param,
    # priors that several HMMs share (the covariance priors differ by model)
    "startprob_prior": _DIRICHLET_CONCENTRATION,
    "transmat_prior": _DIRICHLET_CONCENTRATION,
    "emissionprob_prior": _DIRICHLET_CONCENTRATION,
    "weights_prior": _DIRICHLET_CONCENTRATION,
    "means_prior": prior_rule(),
    "means_weight": prior_rule(low=0.0),
    # the Gaussian emission models (GaussianHMM, GMMHMM)
    "covariance_type": option_rule(*COVARIANCE_TYPES),
    "min_covar": real_rule(low=0, low_open=True),
}


@functools.cache
def _parameter_names(estimator_class):
    """The constructor's parameter names (scikit-learn's ``_get_param_names``, which
    inspects the signature on every call: a stream's ``partial_fit`` checks its
    parameters on every batch)."""
    return tuple(estimator_class._get_param_names())


def check_parameters(estimator, family_rules=None, *, skip=(), n_features=None):
    """Validate the constructor parameters of ``estimator`` by their rules.

    A parameter named in :data:`PARAMETER_RULES` is checked by that rule, one
    named in ``family_rules`` (``{name: rule(value, name)}``, the estimator
    family's own) by that; any other parameter is validated where it is used
    (initial values against the data, cross-parameter constraints), and so
    are the names in ``skip``.  The rules made by :func:`at_fit` wait for
    ``n_features``: without it they are skipped, with it they alone are
    checked (``fit`` calls this twice: before and after validating ``X``).

    Raises
    ------
    TypeError or ValueError
        From the first parameter, in name order, that breaks its rule.
    RuntimeError
        When ``family_rules`` redeclares a name of :data:`PARAMETER_RULES`
        (a programming error: the shared rule would differ by estimator).
    """
    family_rules = {} if family_rules is None else family_rules
    redeclared = sorted(family_rules.keys() & PARAMETER_RULES.keys())
    if redeclared:
        raise RuntimeError(
            f"{type(estimator).__name__} redeclares the shared rules of {redeclared}."
        )
    for name in _parameter_names(type(estimator)):
        value = getattr(estimator, name)  # what get_params(deep=False) reads
        rule = PARAMETER_RULES.get(name) or family_rules.get(name)
        if rule is None or name in skip:
            continue
        if not getattr(rule, "at_fit", False):
            if n_features is None:
                rule(value, name)
        elif n_features is not None:
            rule(value, name, n_features)


def foreign_keywords_hinted(hints, library, footer=""):
    """Decorate an estimator's ``__init__``: another library's parameter names get a hint.

    A keyword argument named in ``hints`` (``{foreign name: what to write
    instead}``) raises a TypeError that names the estimator, says the name is
    ``library``'s and gives the hint (then ``footer``), instead of Python's
    bare "unexpected keyword argument".  Any other call goes to ``__init__``
    unchanged; the signature seen by ``inspect`` (and by scikit-learn's
    ``get_params`` and ``clone``) is ``__init__``'s own, so the parameters
    stay explicit.
    """

    def decorate(init):
        @functools.wraps(init)
        def checked(self, *args, **kwargs):
            foreign = [name for name in kwargs if name in hints]
            if foreign:
                owner = type(self).__name__
                advice = " ".join(f"{name}: {hints[name]}" for name in foreign)
                raise TypeError(
                    f"{owner} has no parameter {', '.join(map(repr, foreign))} "
                    f"({library}'s name{'s' if len(foreign) > 1 else ''}). {advice}"
                    + (f" {footer}" if footer else "")
                )
            return init(self, *args, **kwargs)

        return checked

    return decorate


_PRECISIONS = {np.dtype(np.float64): "double precision", np.dtype(np.float32): "single precision"}


def check_data_scale(
    observed,
    centre=None,
    *,
    scale=None,
    dtype=np.float64,
    name="X",
    needed_by="the Gaussian densities need",
):
    """Reject data whose squared deviations from ``centre`` overflow in their sums.

    Models sum squares of the data over the rows: Gaussian models sum
    (x - centre)^2 (EM statistics, initial covariances, with the centre near
    the data mean); neural networks sum squares of their inputs and
    activations (normalisations, squared errors, attention scores).  Data
    beyond about sqrt(max(dtype) / n) of ``centre`` would make those sums inf
    in ``dtype`` and the results NaN, so they are refused up front, in the
    user's terms.  NaN entries of ``observed`` are missing and skipped.

    Parameters
    ----------
    observed : ndarray of shape (n_rows, n_features)
    centre : ndarray of shape (n_features,), "mean" or None, default=None
        The point the model takes deviations from; None means zero (the
        model uses the data as they are); "mean": the mean of each
        feature over its observed entries (the Gaussian families, for
        data whose parameters are not known yet).
    scale : ndarray of shape (n_features,), optional
        Deviations are measured in these units: the model standardises the
        data by ``centre`` and ``scale`` (those of the data it was fitted on)
        before working on them in ``dtype``.
    dtype : float32 or float64, default=float64
        The precision the model computes in.
    name : str, default="X"
        The argument, for the message.
    needed_by : str, default="the Gaussian densities need"
        What sums the squares, for the message.

    Returns
    -------
    spread : float
        The largest deviation found (in units of ``scale``).

    Raises
    ------
    ValueError
        Naming ``name``, the deviation, the limit and the precision.
    """
    n_observed = observed.shape[0]
    if n_observed == 0:
        return 0.0
    if isinstance(centre, str) and centre == "mean":
        observed_entries = ~np.isnan(observed)
        counts = observed_entries.sum(axis=0)
        sums = np.sum(observed, axis=0, where=observed_entries)
        with np.errstate(over="ignore", invalid="ignore"):
            # A sum that overflows is itself data beyond the limit: the
            # deviations from an infinite centre are infinite and refused.
            centre = np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        if centre is None and scale is None:
            # Without temporaries of the data's size (fmax and fmin skip NaN).
            extremes = np.abs(
                [np.fmax.reduce(observed, axis=None), np.fmin.reduce(observed, axis=None)]
            )
            spread = np.max(extremes, where=~np.isnan(extremes), initial=0.0)
        else:
            deviation = np.abs(observed if centre is None else observed - centre)
            if scale is not None:
                deviation = deviation / scale
            spread = np.max(deviation, where=~np.isnan(deviation), initial=0.0)
    dtype = np.dtype(dtype)
    limit = np.sqrt(np.finfo(dtype).max / n_observed) / 2
    if not spread <= limit:
        if centre is None:
            where = f"its entries reach {spread:.3g} in magnitude"
        elif scale is None:
            where = f"its entries lie up to {spread:.3g} from the data mean"
        else:
            where = (
                f"its entries lie up to {spread:.3g} standard deviations from the mean of the "
                "data the model was fitted on"
            )
        remedy = (
            f"Rescale {name}, e.g. with sklearn.preprocessing.StandardScaler"
            if scale is None
            else f"Pass {name} on the scale of the data the model was fitted on"
        )
        if dtype == np.float32:
            remedy += ", or use dtype='float64'"
        raise ValueError(
            f"{name} is too large for {_PRECISIONS.get(dtype, dtype.name)}: {where}, and the "
            f"sums of their squares that {needed_by} overflow (the limit for {n_observed} rows "
            f"is {limit:.3g}). {remedy}."
        )
    return float(spread)


def physical_memory():
    """Bytes of physical memory of this machine (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


# Where the physical memory is unknown: the user address space of today's 64-bit
# processors (2**47 bytes), which no allocation can exceed.
_ADDRESS_SPACE = 2**47


def format_bytes(n_bytes):
    """``n_bytes`` in the binary unit that gives a number below 1024 (KiB .. EiB)."""
    value, unit = float(n_bytes), "bytes"
    for larger in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{value:.3g} {unit}"


def check_allocation(shape, dtype, *, argument, what, limit=None):
    """Raise a ValueError naming ``argument`` before allocating an array that cannot fit.

    The bytes of an array of ``shape`` and ``dtype`` are counted exactly (in
    Python integers, which do not overflow) and compared with ``limit``, by
    default the machine's physical memory: an argument that drives an
    allocation beyond it (a sequence length, a number of samples, an
    alphabet size) is a mistake that would otherwise surface as numpy's
    ``MemoryError`` -- or as hours of swapping.

    Parameters
    ----------
    shape : tuple of int
    dtype : numpy dtype
    argument : str
        The argument that sets the size, with its value (``"length=10**15"``),
        for the message.
    what : str
        What is being allocated (``"the kernel K of shape (3, length)"``).
    limit : int, optional
        Bytes allowed; by default :func:`physical_memory`.

    Returns
    -------
    n_bytes : int

    Examples
    --------
    >>> check_allocation((3, 1000), np.float64, argument="length=1000", what="the kernel")
    24000
    >>> check_allocation((3, 10**15), np.float64, argument="length=10**15", what="the kernel")
    Traceback (most recent call last):
    ...
    ValueError: length=10**15 is too large: the kernel would need 21.3 PiB...
    """
    n_bytes = math.prod(int(size) for size in shape) * np.dtype(dtype).itemsize
    if limit is None:
        limit = physical_memory() or _ADDRESS_SPACE
    if n_bytes > limit:
        raise ValueError(
            f"{argument} is too large: {what} would need {format_bytes(n_bytes)}, more than "
            f"the {format_bytes(limit)} of memory of this machine."
        )
    return n_bytes


def masked_as_nan(X, *, missing_supported, owner, name="X", hint=None):
    """``X`` with its masked entries replaced by NaN, or a ValueError.

    Parameters
    ----------
    X : array-like
        Returned unchanged unless it is a masked array.
    missing_supported : bool
        Whether ``owner`` treats NaN as a missing value.  If not, a masked
        array with a masked entry raises a ValueError.
    owner : str
        Who receives ``X`` (an estimator or function name), for the message.
    name : str, default="X"
        The argument's name, for the message.
    hint : str, optional
        A sentence appended to the message: what a masked entry would have
        to be filled with in this argument.

    Returns
    -------
    X : array-like
        A float64 ndarray with NaN at the masked entries (a new array: the
        caller's is never changed), the data of a masked array without
        masked entries, or ``X`` itself.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.ma.masked_array([[1.0, 2.0], [3.0, 4.0]], mask=[[False, True], [False, False]])
    >>> masked_as_nan(X, missing_supported=True, owner="GaussianHMM")
    array([[ 1., nan],
           [ 3.,  4.]])
    """
    if not isinstance(X, np.ma.MaskedArray):
        return X
    mask = np.ma.getmaskarray(X)
    if not mask.any():
        return np.ma.getdata(X)
    if not missing_supported:
        n_masked = int(mask.sum())
        raise ValueError(
            f"{owner} does not support missing values, but {name} is a masked array with "
            f"{n_masked} masked {'entry' if n_masked == 1 else 'entries'}; fill in or drop "
            f"the masked entries before passing {name} (they would otherwise be read as "
            "observed values)." + ("" if hint is None else f" {hint}")
        )
    try:
        data = np.array(np.ma.getdata(X), dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be numeric: {error}") from None
    data[mask] = np.nan
    return data


def option_or(options, rule, *, expected=None):
    """The rule that accepts one of the strings ``options`` and applies ``rule`` to any
    other value.

    With ``expected`` (for example ``"'auto' or a positive int"``), a string that
    is not an option is a ValueError ``"<name> must be <expected>, got ..."``
    instead of going to ``rule``.
    """

    def check(value, name):
        if isinstance(value, str):
            if value in options:
                return value
            if expected is not None:
                raise ValueError(f"{name} must be {expected}, got {value!r}.")
        return rule(value, name)

    check.rule = rule  # for introspection (tests, reprs)
    return check


def constrained(rule, condition, requirement):
    """The rule ``rule``, then a ValueError ``"<name> must be <requirement>, got ..."``
    unless ``condition(value)`` (an evenness, a divisibility, ...)."""

    def check(value, name):
        value = rule(value, name)
        if not condition(value):
            raise ValueError(f"{name} must be {requirement}, got {value!r}.")
        return value

    check.rule = rule
    return check
