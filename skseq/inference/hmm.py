"""Exact inference in hidden Markov models, on plain arrays.

These functions take log-probabilities and work for any emission model: the
caller computes ``log_frameprob[t, j] = log p(x_t | z_t = j)``.  Several
sequences are passed concatenated, with ``lengths``.

The forward-backward recursions are scaled (see "Scaling with max-shifted
emissions" in doc/user_guide/hmm.rst): each row of ``log_frameprob`` is
shifted by its maximum and exponentiated, and the forward message is rescaled
whenever its mass falls below 2^-64, so nothing underflows because the
sequence is long.  What can still underflow is a state's probability relative
to the others (zeros in the transition matrix, emissions more than ~708 nats
apart): the kernels bound the effect of every such loss on the results and
flag the sequences where it could exceed 2^-40 relative ("When the scaled
recursions are exact" in the same guide); only those are redone in log space.
Viterbi runs in log space.

Conventions, in every inference module: an argument holding probabilities is
named for them (``startprob``, ``transmat``), one holding their logarithms
says so (``log_startprob``, ``log_transmat``, ``log_frameprob``); the public
functions validate their arguments and return named tuples; the
underscore-prefixed ``_..._offsets`` cores take validated arrays and the
sequence split as ``offsets`` (what the estimators call).
"""

from typing import NamedTuple

import numpy as np
from scipy.special import logsumexp
from sklearn.utils import check_random_state

from .._buffers import longest_sequence, work_array
from .._kernels import load
from .._sequences import sequence_offsets
from .._validation import check_allocation, check_scalar_param
from ._checks import masked_arrays_checked

_hmm = load("_hmm")

__all__ = [
    "hmm_forward_backward",
    "hmm_forward",
    "hmm_viterbi",
    "hmm_forward_smoothing",
    "sample_hmm_states",
    "HMMForwardBackwardResult",
    "HMMForwardResult",
    "HMMViterbiResult",
    "HMMStreamState",
    "HMMForwardSmoothingResult",
    "HMMSmoothedStatistics",
    "HMMStateSample",
]


class HMMForwardBackwardResult(NamedTuple):
    """What :func:`hmm_forward_backward` returns.

    Attributes
    ----------
    log_likelihood : float
        log p(x) summed over sequences.
    posteriors : ndarray of shape (n_samples, n_states)
        p(z_t = i | x) for every row.
    start_counts : ndarray of shape (n_states,)
        Posterior of the first state, summed over sequences.
    transition_counts : ndarray of shape (n_states, n_states)
        sum_t p(z_t = i, z_{t+1} = j | x), summed over sequences.
    sequence_log_likelihood : ndarray of shape (n_sequences,)
        log p(x) of each sequence.
    log_predictive : ndarray of shape (n_samples,)
        log p(x_t | x_1..x_{t-1}) of each row; per sequence these sum to
        its log-likelihood.
    """

    log_likelihood: float
    posteriors: np.ndarray
    start_counts: np.ndarray
    transition_counts: np.ndarray
    sequence_log_likelihood: np.ndarray
    log_predictive: np.ndarray


class HMMViterbiResult(NamedTuple):
    """What :func:`hmm_viterbi` returns.

    Attributes
    ----------
    log_prob : float
        log p(x, z*) of the best path, summed over sequences.
    states : ndarray of intp, shape (n_samples,)
        The best path z* of every sequence, concatenated.
    """

    log_prob: float
    states: np.ndarray


class HMMSmoothedStatistics(NamedTuple):
    """Smoothed expectations of additive statistics over the rows seen so far.

    Attributes
    ----------
    start_counts : ndarray of shape (n_states,)
        p(z_1 = i | x_1..x_t).
    transition_counts : ndarray of shape (n_states, n_states)
        sum_{s < t} p(z_s = i, z_{s+1} = j | x_1..x_t).
    feature_sums : ndarray of shape (n_states, n_features)
        sum_{s <= t} p(z_s = i | x_1..x_t) features[s, i, :].
    """

    start_counts: np.ndarray
    transition_counts: np.ndarray
    feature_sums: np.ndarray


class HMMStreamState(NamedTuple):
    """What forward-only smoothing carries from one chunk of a sequence to the next.

    Its size does not depend on how many rows have passed.  For every state
    ``j`` of the last row t seen it holds expectations given x_1..x_t and
    z_t = j (see doc/user_guide/stochastic_em.rst, "Streams in chunks").

    Attributes
    ----------
    filtered : ndarray of shape (n_states,)
        p(z_t = j | x_1..x_t).
    start : ndarray of shape (n_states, n_states)
        ``start[j, a]`` = p(z_1 = a | x_1..x_t, z_t = j).
    transitions : ndarray of shape (n_states, n_states, n_states)
        ``transitions[j, a, b]`` = E[#(z_s = a, z_{s+1} = b), s < t | x_1..x_t, z_t = j].
    features : ndarray of shape (n_states, n_states, n_features)
        ``features[j, a]`` = E[sum_{s <= t} [z_s = a] features[s, a] | x_1..x_t, z_t = j].
    log_filtered : ndarray of shape (n_states,) or None
        log p(z_t = j | x_1..x_t), exact where ``filtered`` underflows (a state
        far less likely than the others now may dominate later rows); None in
        messages built by hand, where it is taken to be ``log(filtered)``.
    """

    filtered: np.ndarray
    start: np.ndarray
    transitions: np.ndarray
    features: np.ndarray
    log_filtered: np.ndarray = None

    def statistics(self):
        """The smoothed statistics of all rows seen: the message averaged over z_t.

        Returns
        -------
        HMMSmoothedStatistics
        """
        alpha = self.filtered
        return HMMSmoothedStatistics(
            alpha @ self.start,
            np.einsum("j,jab->ab", alpha, self.transitions),
            np.einsum("j,jap->ap", alpha, self.features),
        )


class HMMForwardSmoothingResult(NamedTuple):
    """What :func:`hmm_forward_smoothing` returns.

    Attributes
    ----------
    log_likelihood : float
        log p(rows of the chunk | earlier rows); -inf for rows of probability
        zero (the public function raises).
    carried : HMMStreamState
        The message after the chunk's last row: pass it as ``carried`` with
        the next chunk of the same sequence.
    log_predictive : ndarray of shape (n_samples,)
        log p(x_t | x_1..x_{t-1}) of each row of the chunk.
    """

    log_likelihood: float
    carried: HMMStreamState
    log_predictive: np.ndarray


class HMMStateSample(NamedTuple):
    """What :func:`sample_hmm_states` returns.

    Attributes
    ----------
    states : ndarray of intp, shape (n_samples,)
        The drawn path.
    """

    states: np.ndarray


class HMMForwardResult(NamedTuple):
    """What :func:`hmm_forward` returns.

    Attributes
    ----------
    log_likelihood : float
        log p(x) summed over sequences.
    filtered : ndarray of shape (n_samples, n_states)
        p(z_t = i | x_1..x_t): the filtered state distribution of every row.
    sequence_log_likelihood : ndarray of shape (n_sequences,)
    log_predictive : ndarray of shape (n_samples,)
    """

    log_likelihood: float
    filtered: np.ndarray
    sequence_log_likelihood: np.ndarray
    log_predictive: np.ndarray


# A masked entry of log_frameprob has no meaning the functions could guess.
_LOG_FRAMEPROB_HINT = {
    "log_frameprob": (
        "log_frameprob[t, i] is log p(x_t | z_t = i), computed by the caller: a step "
        "without an observation has log_frameprob 0 in every state."
    )
}


def _real_array(value, name):
    """``value`` as a float64 array; complex or non-numeric input is a TypeError.

    ``np.asarray(..., dtype=np.float64)`` would drop an imaginary part with
    only a warning.
    """
    array = np.asarray(value)
    if np.iscomplexobj(array):
        raise TypeError(f"{name} must be real, got complex values (dtype {array.dtype}).")
    try:
        return np.asarray(array, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be an array of real numbers: {error}") from None


def _check_log_probabilities(log_startprob, log_transmat, log_frameprob):
    log_startprob = _real_array(log_startprob, "log_startprob")
    log_transmat = _real_array(log_transmat, "log_transmat")
    log_frameprob = _real_array(log_frameprob, "log_frameprob")
    if log_startprob.ndim != 1 or log_startprob.size == 0:
        raise ValueError(
            f"log_startprob must be a non-empty 1-D array, got shape {log_startprob.shape}."
        )
    n_states = log_startprob.shape[0]
    if log_transmat.shape != (n_states, n_states):
        raise ValueError(
            f"log_transmat must have shape ({n_states}, {n_states}), got {log_transmat.shape}."
        )
    if log_frameprob.ndim != 2 or log_frameprob.shape[1] != n_states:
        raise ValueError(
            f"log_frameprob must have shape (n_samples, {n_states}), got {log_frameprob.shape}."
        )
    if log_frameprob.shape[0] == 0:
        raise ValueError("log_frameprob has no rows.")
    for name, value in (
        ("log_startprob", log_startprob),
        ("log_transmat", log_transmat),
        ("log_frameprob", log_frameprob),
    ):
        if np.isnan(value).any():
            raise ValueError(f"{name} contains NaN.")
        if np.isposinf(value).any():
            raise ValueError(f"{name} contains +inf.")
    with np.errstate(under="ignore"):
        start_sum = np.exp(log_startprob).sum()
        row_sums = np.exp(log_transmat).sum(axis=1)
    if not np.isclose(start_sum, 1.0, rtol=0, atol=1e-6):
        raise ValueError(f"exp(log_startprob) must sum to 1, sums to {start_sum!r}.")
    if not np.allclose(row_sums, 1.0, rtol=0, atol=1e-6):
        raise ValueError(f"every row of exp(log_transmat) must sum to 1; row sums are {row_sums}.")
    return log_startprob, log_transmat, log_frameprob


def _check_sequences(log_startprob, log_transmat, log_frameprob, lengths):
    """:func:`_check_log_probabilities`, and the ``offsets`` of the sequences of ``lengths``."""
    log_startprob, log_transmat, log_frameprob = _check_log_probabilities(
        log_startprob, log_transmat, log_frameprob
    )
    offsets = sequence_offsets(log_frameprob.shape[0], lengths=lengths)
    return log_startprob, log_transmat, log_frameprob, offsets


def _contiguous(array):
    return np.ascontiguousarray(array, dtype=np.float64)


def _shifted_frame(log_frameprob, buffers=None):
    """Max-shift each row of log-emissions and exponentiate.

    Returns ``(frame, shift)`` with ``frame[t] = exp(log_frameprob[t] - shift[t])``
    and ``shift[t] = max_j log_frameprob[t, j]``; ``log_frameprob`` is left as it
    is.  ``buffers`` as in :func:`skseq._buffers.work_array`.
    """
    log_frameprob = _contiguous(log_frameprob)
    frame = work_array(buffers, "frame", log_frameprob.shape)
    shift = work_array(buffers, "frame_shift", log_frameprob.shape[:1])
    _hmm.shift_rows(log_frameprob, frame, shift)
    np.exp(frame, out=frame)
    return frame, shift


def _logs(startprob, transmat):
    with np.errstate(divide="ignore"):
        return np.log(startprob), np.ascontiguousarray(np.log(transmat))


def _log_predictive(scale, shift, offsets, sequence_log_likelihood):
    """log p(x_t | x_<t) = log c_t + shift_t in place of ``scale``, and per-sequence sums.

    Sequences marked NaN (flagged by the kernel) are left to the log-space redo.
    """
    with np.errstate(invalid="ignore"):
        np.log(scale, out=scale)
    scale += shift
    finite = ~np.isnan(sequence_log_likelihood)
    # A sum below -DBL_MAX is -inf (the estimators report it).
    with np.errstate(over="ignore"):
        sequence_log_likelihood[finite] = np.add.reduceat(scale, offsets[:-1])[finite]
    return np.flatnonzero(~finite)


def _frame(log_frameprob, shift, buffers=None):
    """The exponentiated frame, its shift, and a function giving the
    log-emissions with their shift for a log-space redo.

    The redo takes ``log_frameprob`` as given, with a zero shift, unless the
    caller gave it shifted: subtracting a row's maximum from huge
    log-emissions would round away the digits of their differences, which
    the log-space recursion keeps.
    """
    log_frameprob = _contiguous(log_frameprob)
    if shift is None:
        frame, shift = _shifted_frame(log_frameprob, buffers)
        return frame, shift, lambda: (log_frameprob, np.zeros_like(shift))
    frame = np.exp(log_frameprob, out=work_array(buffers, "frame", log_frameprob.shape))
    return frame, shift, lambda: (log_frameprob, _contiguous(shift))


def _redo_flagged(log_kernel, startprob, transmat, redo_frame, offsets, shift, arrays):
    """Log predictive densities from the scale factors (``arrays[1]``), and the
    sequences the scaled recursion flagged redone by ``log_kernel``.

    ``arrays`` are the kernel's outputs, log predictive densities second and
    per-sequence log-likelihoods third (NaN for a flagged sequence);
    ``redo_frame()`` gives the log-emissions and their shift for the redo
    (:func:`_frame`).
    """
    flagged = _log_predictive(arrays[1], shift, offsets, arrays[2])
    if flagged.size:
        log_start, log_trans = _logs(startprob, transmat)
        log_kernel(log_start, log_trans, *redo_frame(), offsets, flagged, *arrays)


def _forward_backward_offsets(
    startprob,
    transmat,
    log_frameprob,
    offsets,
    shift=None,
    buffers=None,
    *,
    posteriors=None,
    sequence_log_likelihood=None,
):
    """Forward-backward on validated inputs (no checks); offsets split the rows.

    ``shift``, when given, says that each row of ``log_frameprob`` is already
    shifted by its maximum (``shift[t]``).  With ``buffers`` (see
    :func:`skseq._buffers.work_array`) the scratch, and the posteriors and log predictive
    densities unless ``posteriors`` is given, are kept in reused arrays: the
    caller must consume them before the next call.  ``posteriors`` and
    ``sequence_log_likelihood``, when given, are filled in place.
    Sequences the scaled recursion flags are redone in log space.
    """
    frame, shift, redo_frame = _frame(log_frameprob, shift, buffers)
    n_samples, n_states = frame.shape
    startprob, transmat = _contiguous(startprob), _contiguous(transmat)
    if posteriors is None:
        posteriors = work_array(buffers, "posteriors", (n_samples, n_states))
    log_predictive = work_array(buffers, "log_predictive", (n_samples,))
    if sequence_log_likelihood is None:
        sequence_log_likelihood = np.empty(len(offsets) - 1)
    start_counts = np.zeros(n_states)
    transition_counts = np.zeros((n_states, n_states))
    arrays = (posteriors, log_predictive, sequence_log_likelihood, start_counts, transition_counts)
    alpha = work_array(buffers, "alpha", (longest_sequence(offsets), n_states))
    _hmm.forward_backward(startprob, transmat, frame, _contiguous(shift), offsets, *arrays, alpha)
    _redo_flagged(
        _hmm.log_forward_backward, startprob, transmat, redo_frame, offsets, shift, arrays
    )
    return HMMForwardBackwardResult(
        float(sequence_log_likelihood.sum()),
        posteriors,
        start_counts,
        transition_counts,
        sequence_log_likelihood,
        log_predictive,
    )


def _forward_offsets(
    startprob,
    transmat,
    log_frameprob,
    offsets,
    shift=None,
    buffers=None,
    *,
    filtered=None,
    log_predictive=None,
    sequence_log_likelihood=None,
):
    """Forward pass on validated inputs (no checks); offsets split the rows.

    ``shift`` and ``buffers`` as in :func:`_forward_backward_offsets`; the
    outputs ``filtered``, ``log_predictive`` and ``sequence_log_likelihood``,
    when given, are filled in place (otherwise ``filtered`` and
    ``log_predictive`` are work arrays).  Sequences the scaled recursion flags
    are redone in log space.
    """
    frame, shift, redo_frame = _frame(log_frameprob, shift, buffers)
    n_samples, n_states = frame.shape
    startprob, transmat = _contiguous(startprob), _contiguous(transmat)
    if filtered is None:
        filtered = work_array(buffers, "filtered", (n_samples, n_states))
    if log_predictive is None:
        log_predictive = work_array(buffers, "log_predictive", (n_samples,))
    if sequence_log_likelihood is None:
        sequence_log_likelihood = np.empty(len(offsets) - 1)
    arrays = (filtered, log_predictive, sequence_log_likelihood)
    _hmm.forward(startprob, transmat, frame, _contiguous(shift), offsets, *arrays)
    _redo_flagged(_hmm.log_forward, startprob, transmat, redo_frame, offsets, shift, arrays)
    return HMMForwardResult(
        float(sequence_log_likelihood.sum()), filtered, sequence_log_likelihood, log_predictive
    )


def _viterbi_offsets(
    log_startprob,
    log_transmat,
    log_frameprob,
    offsets,
    buffers=None,
    *,
    states=None,
    sequence_log_prob=None,
):
    """Viterbi on validated inputs (no checks); returns (log_probs, states).

    ``buffers`` as in :func:`skseq._buffers.work_array`; ``states`` and
    ``sequence_log_prob``, when given, are filled in place.
    """
    if states is None:
        states = np.empty(log_frameprob.shape[0], dtype=np.intp)
    if sequence_log_prob is None:
        sequence_log_prob = np.empty(len(offsets) - 1)
    _hmm.viterbi(
        _contiguous(log_startprob),
        _contiguous(log_transmat),
        _contiguous(log_frameprob),
        offsets,
        states,
        sequence_log_prob,
        work_array(
            buffers, "backpointer", (longest_sequence(offsets), len(log_startprob)), np.intc
        ),
    )
    return sequence_log_prob, states


@masked_arrays_checked(hints=_LOG_FRAMEPROB_HINT)
def hmm_forward_backward(log_startprob, log_transmat, log_frameprob, *, lengths=None):
    """Posterior state probabilities and expected counts of an HMM.

    Parameters
    ----------
    log_startprob : array-like of shape (n_states,)
        log p(z_1 = i).
    log_transmat : array-like of shape (n_states, n_states)
        log p(z_{t+1} = j | z_t = i).
    log_frameprob : array-like of shape (n_samples, n_states)
        log p(x_t | z_t = j) for every row; a row without an observation is
        0 in every state.  A masked array with masked entries is refused (as
        by every inference function where NaN does not mean missing).
    lengths : array-like of int, optional
        Lengths of the concatenated sequences; one sequence if omitted.

    Returns
    -------
    HMMForwardBackwardResult
        ``log_likelihood``, ``posteriors``, ``start_counts``,
        ``transition_counts``, ``sequence_log_likelihood``, ``log_predictive``.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference import hmm_forward_backward
    >>> log_start = np.log([0.5, 0.5])
    >>> log_trans = np.log([[0.9, 0.1], [0.2, 0.8]])
    >>> log_frame = np.log([[0.9, 0.1], [0.8, 0.2], [0.1, 0.9]])
    >>> result = hmm_forward_backward(log_start, log_trans, log_frame)
    >>> result.posteriors.shape
    (3, 2)
    >>> bool(np.allclose(result.posteriors.sum(axis=1), 1.0))
    True
    """
    log_startprob, log_transmat, log_frameprob, offsets = _check_sequences(
        log_startprob, log_transmat, log_frameprob, lengths
    )
    return _forward_backward_offsets(
        np.exp(log_startprob), np.exp(log_transmat), log_frameprob, offsets
    )


@masked_arrays_checked(hints=_LOG_FRAMEPROB_HINT)
def hmm_forward(log_startprob, log_transmat, log_frameprob, *, lengths=None):
    """Filtered state distributions p(z_t | x_1..x_t) and the log-likelihood.

    Parameters are those of :func:`hmm_forward_backward`.

    Returns
    -------
    HMMForwardResult
        ``log_likelihood``, ``filtered``, ``sequence_log_likelihood``,
        ``log_predictive``.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference import hmm_forward
    >>> result = hmm_forward(np.log([0.5, 0.5]), np.log([[0.9, 0.1], [0.2, 0.8]]),
    ...                      np.log([[0.9, 0.1], [0.1, 0.9]]))
    >>> result.filtered.round(3)
    array([[0.9  , 0.1  ],
           [0.352, 0.648]])

    By hand: p(z_1) is proportional to (0.5 * 0.9, 0.5 * 0.1), that is (0.9, 0.1);
    predicted one step, (0.83, 0.17); times the second frame's (0.1, 0.9) and
    normalised, (0.083, 0.153) / 0.236.
    """
    log_startprob, log_transmat, log_frameprob, offsets = _check_sequences(
        log_startprob, log_transmat, log_frameprob, lengths
    )
    return _forward_offsets(np.exp(log_startprob), np.exp(log_transmat), log_frameprob, offsets)


@masked_arrays_checked(hints=_LOG_FRAMEPROB_HINT)
def hmm_viterbi(log_startprob, log_transmat, log_frameprob, *, lengths=None):
    """Most likely state sequence (max-sum in log space).

    Parameters are those of :func:`hmm_forward_backward`.

    Returns
    -------
    HMMViterbiResult
        ``log_prob``, log p(x, z*) of the best path summed over sequences,
        and ``states``, the best path z* of every sequence, concatenated;
        unpacks as ``log_prob, states``.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference import hmm_viterbi
    >>> log_prob, states = hmm_viterbi(np.log([0.5, 0.5]), np.log([[0.9, 0.1], [0.2, 0.8]]),
    ...                                np.log([[0.9, 0.1], [0.8, 0.2], [0.1, 0.9]]))
    >>> states
    array([0, 0, 1])
    """
    log_startprob, log_transmat, log_frameprob, offsets = _check_sequences(
        log_startprob, log_transmat, log_frameprob, lengths
    )
    sequence_log_prob, states = _viterbi_offsets(
        log_startprob, log_transmat, log_frameprob, offsets
    )
    return HMMViterbiResult(float(sequence_log_prob.sum()), states)


# -- forward-only smoothing (streams in chunks) -------------------------------


def _empty_message(n_states, n_features):
    return HMMStreamState(
        np.zeros(n_states),
        np.zeros((n_states, n_states)),
        np.zeros((n_states, n_states, n_states)),
        np.zeros((n_states, n_states, n_features)),
    )


def _forward_smoothing_rows(startprob, transmat, log_frameprob, features, carried=None):
    """Forward-only smoothing over the rows of one chunk, on validated inputs (no checks).

    ``features`` has shape (n_samples, n_states, n_features); ``carried`` is
    the one carried from the earlier rows of the same sequence, or None for
    rows that start a sequence (from ``startprob``); it is not modified.
    Returns a :class:`HMMForwardSmoothingResult`; where the scaled recursion
    underflows, the chunk is redone in log space, so its ``log_likelihood`` is
    -inf only for rows of probability zero (the message is then unusable).
    """
    frame, shift = _shifted_frame(log_frameprob)
    features = _contiguous(features)
    n_states, n_features = frame.shape[1], features.shape[2]
    fresh = carried is None
    if not fresh and np.any(_underflows(_log_filtered(carried))):
        # The probabilities of the message lost a state that the log-space
        # filter still has: only the log-space recursion can carry it on.
        return _log_forward_smoothing_rows(startprob, transmat, log_frameprob, features, carried)
    if fresh:
        message = _empty_message(n_states, n_features)
    else:  # the kernel updates the message in place: work on copies
        message = _empty_message(n_states, n_features)
        for part, given in zip(message, carried[:4]):
            part[...] = given
    log_predictive = np.empty(frame.shape[0])
    log_likelihood = _hmm.forward_smoothing(
        _contiguous(startprob),
        _contiguous(transmat),
        frame,
        shift,
        features,
        fresh,
        *message[:4],
        log_predictive,
    )
    if np.isnan(log_likelihood) or _lost_precision(
        message.filtered,
        startprob,
        transmat,
        log_frameprob,
        None if carried is None else _log_filtered(carried),
    ):
        # NaN: the scaled recursion underflowed (a state's shifted emission or
        # scaled probability fell below the smallest double on the path that
        # carries the mass).  A state's filtered probability near the bottom of
        # the doubles: the fast path cannot tell how small it truly is (nor
        # whether it is zero), and a later chunk may need it exactly.  Either
        # way, redo the chunk with the filter in log space.
        return _log_forward_smoothing_rows(startprob, transmat, log_frameprob, features, carried)
    with np.errstate(divide="ignore"):  # impossible states: log 0 = -inf
        message = message._replace(log_filtered=np.log(message.filtered))
    return HMMForwardSmoothingResult(float(log_likelihood), message, log_predictive)


# Filtered probabilities below this (2**-1000) are carried in log space.
_SMALLEST_CARRIED = 2.0**-1000


def _log_filtered(carried):
    if len(carried) > 4 and carried[4] is not None:
        return np.asarray(carried[4], dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.log(np.asarray(carried[0], dtype=np.float64))


def _lost_precision(filtered, startprob, transmat, log_frameprob, log_filtered_before):
    """Whether a state of positive probability ends below what the fast path carries.

    ``filtered`` is the fast path's filtered distribution after the last row
    of ``log_frameprob``; ``log_filtered_before`` the exact log filtered
    distribution of the row before the first (None: the rows start the
    sequence, from ``startprob``).  A filtered probability that is exactly
    zero is no loss when the state is impossible (its support, followed
    through the chunk, is empty): left-right models and zero emission
    probabilities keep the fast path.
    """
    # A state whose last row has probability zero is impossible: no loss.
    small = (filtered < _SMALLEST_CARRIED) & (log_frameprob[-1] > -np.inf)
    if not small.any():
        return False
    possible = log_frameprob > -np.inf
    allowed = transmat > 0
    fresh = log_filtered_before is None
    support = (startprob > 0) if fresh else (log_filtered_before > -np.inf)
    for t in range(log_frameprob.shape[0]):
        if t or not fresh:
            support = (support.astype(np.float64) @ allowed) > 0
        support &= possible[t]
    return bool(np.any(small & support))


def _underflows(log_filtered):
    """States whose probability is positive but below what the fast path carries."""
    return np.isfinite(log_filtered) & (log_filtered < np.log(_SMALLEST_CARRIED))


def _log_forward_smoothing_rows(startprob, transmat, log_frameprob, features, carried=None):
    """The forward-only smoother with the filter in log space (the fallback of the fast path).

    The same recursion as the kernel (doc/user_guide/stochastic_em.rst,
    "Streams in chunks"): the filter is carried as log-probabilities, so no
    shifted emission or filtered probability underflows within the chunk,
    and each row's statistics are averaged over the backward conditional
    p(z_{t-1} = i | z_t = j, x_1..x_{t-1}), computed by log-sum-exp.  The
    auxiliary statistics are expectations, bounded by the rows' features, so
    they need no rescaling.  A state of zero predicted probability keeps zero
    statistics (they are never weighted).  ``log_likelihood`` is -inf when
    the rows have probability zero given the earlier ones.
    """
    n_samples, n_states = log_frameprob.shape
    n_features = features.shape[2]
    with np.errstate(divide="ignore"):
        log_transmat = np.log(transmat)
        log_startprob = np.log(startprob)
    identity = np.eye(n_states)
    if carried is None:
        log_filtered = None
        start, transitions, sums = _empty_message(n_states, n_features)[1:4]
    else:
        log_filtered = _log_filtered(carried)
        start, transitions, sums = (np.array(part, dtype=np.float64) for part in carried[1:4])
    log_predictive = np.empty(n_samples)
    for t in range(n_samples):
        if log_filtered is None:
            log_alpha = log_startprob + log_frameprob[t]
            start = identity.copy()
            transitions = np.zeros((n_states, n_states, n_states))
            sums = identity[:, :, None] * features[t][None, :, :]
        else:
            joint = log_filtered[:, None] + log_transmat  # (i, j): z_{t-1} = i, z_t = j
            log_prior = logsumexp(joint, axis=0)
            reachable = np.isfinite(log_prior)
            backward = np.zeros((n_states, n_states))  # (j, i): p(z_{t-1} = i | z_t = j, .)
            backward[reachable] = np.exp(joint[:, reachable] - log_prior[reachable]).T
            start = backward @ start
            transitions = np.einsum("ji,iab->jab", backward, transitions)
            transitions += np.einsum("ja,jb->jab", backward, identity)
            sums = np.einsum("ji,iap->jap", backward, sums)
            sums += identity[:, :, None] * features[t][None, :, :]
            log_alpha = log_prior + log_frameprob[t]
        row_log_likelihood = logsumexp(log_alpha)
        if not np.isfinite(row_log_likelihood):  # the rows have probability zero
            return HMMForwardSmoothingResult(
                -np.inf, _empty_message(n_states, n_features), log_predictive
            )
        log_predictive[t] = row_log_likelihood
        log_filtered = log_alpha - row_log_likelihood
    unreachable = log_filtered == -np.inf  # never weighted: keep their statistics zero
    start[unreachable] = 0.0
    transitions[unreachable] = 0.0
    sums[unreachable] = 0.0
    result = HMMStreamState(np.exp(log_filtered), start, transitions, sums, log_filtered)
    return HMMForwardSmoothingResult(float(log_predictive.sum()), result, log_predictive)


def _check_carried(carried, n_states, n_features):
    try:
        parts = tuple(carried)
    except TypeError:
        parts = ()
    if len(parts) not in (4, 5):
        raise TypeError(
            "carried must be the HMMStreamState of an earlier hmm_forward_smoothing call."
        )
    log_filtered = parts[4] if len(parts) == 5 else None
    if log_filtered is not None:
        log_filtered = _real_array(log_filtered, "carried.log_filtered")
        if log_filtered.shape != (n_states,):
            raise ValueError(
                f"carried.log_filtered must have shape ({n_states},), got {log_filtered.shape}."
            )
        if np.isnan(log_filtered).any() or (log_filtered > 1e-6).any():
            raise ValueError("carried.log_filtered must hold log-probabilities (<= 0, no NaN).")
    shapes = _empty_message(n_states, n_features)
    checked = []
    for name, part, like in zip(HMMStreamState._fields, parts[:4], shapes):
        part = _real_array(part, f"carried.{name}")
        if part.shape != like.shape:
            raise ValueError(f"carried.{name} must have shape {like.shape}, got {part.shape}.")
        if not np.isfinite(part).all():
            raise ValueError(f"carried.{name} contains NaN or infinity.")
        checked.append(part)
    filtered = checked[0]
    if np.any(filtered < 0) or not np.isclose(filtered.sum(), 1.0, rtol=0, atol=1e-6):
        raise ValueError("carried.filtered must be a probability vector (>= 0, summing to 1).")
    return HMMStreamState(*checked, log_filtered)


@masked_arrays_checked(hints=_LOG_FRAMEPROB_HINT)
def hmm_forward_smoothing(log_startprob, log_transmat, log_frameprob, features, *, carried=None):
    """Smoothed sums of per-row features over one chunk of a sequence, forward only.

    Forward-only smoothing (Cappé 2011) gives the smoothed expectations
    E[sum_s [z_s = i] features[s, i] | x_1..x_t], the start and the
    transition counts of all rows seen so far without a backward pass, so a
    sequence can arrive in chunks: pass the ``carried`` message of one call
    to the next.  At fixed parameters the statistics of the last message equal
    those of :func:`hmm_forward_backward` on the whole sequence (see
    doc/user_guide/stochastic_em.rst, "Streams in chunks").

    Parameters
    ----------
    log_startprob, log_transmat, log_frameprob
        As in :func:`hmm_forward_backward`, for the rows of this chunk.
    features : array-like of shape (n_samples, n_states, n_features) or (n_samples, n_features)
        The per-row vectors whose posterior-weighted sums are wanted (for
        Gaussian emissions, (1, x_t, x_t^2)); a 2-D array is the same vector
        for every state.
    carried : HMMStreamState, optional
        What the previous chunk of the same sequence returned; None: the
        chunk starts the sequence.  Not modified.

    Returns
    -------
    HMMForwardSmoothingResult
        ``log_likelihood`` of the chunk given the earlier rows, ``carried``
        (whose :meth:`~HMMStreamState.statistics` are the smoothed
        statistics of every row so far) and ``log_predictive``.

    Raises
    ------
    ValueError
        On invalid inputs, or for rows of probability zero given the earlier
        ones.  Where the scaled recursion would underflow (a state's
        probability far below the others' on the path that carries the mass),
        the chunk is redone with the filter in log space.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference import hmm_forward_backward, hmm_forward_smoothing
    >>> log_start = np.log([0.5, 0.5])
    >>> log_trans = np.log([[0.9, 0.1], [0.2, 0.8]])
    >>> log_frame = np.log([[0.9, 0.1], [0.8, 0.2], [0.1, 0.9], [0.3, 0.7]])
    >>> features = np.ones((4, 1))  # sums of posteriors: state occupancies
    >>> first = hmm_forward_smoothing(log_start, log_trans, log_frame[:2], features[:2])
    >>> second = hmm_forward_smoothing(log_start, log_trans, log_frame[2:], features[2:],
    ...                                carried=first.carried)
    >>> whole = hmm_forward_backward(log_start, log_trans, log_frame)
    >>> statistics = second.carried.statistics()
    >>> bool(np.allclose(statistics.transition_counts, whole.transition_counts))
    True
    >>> bool(np.allclose(statistics.feature_sums[:, 0], whole.posteriors.sum(axis=0)))
    True
    """
    log_startprob, log_transmat, log_frameprob = _check_log_probabilities(
        log_startprob, log_transmat, log_frameprob
    )
    n_samples, n_states = log_frameprob.shape
    features = _real_array(features, "features")
    if features.ndim == 2 and features.shape[0] == n_samples:
        features = np.broadcast_to(features[:, None, :], (n_samples, n_states, features.shape[1]))
    if features.ndim != 3 or features.shape[:2] != (n_samples, n_states):
        raise ValueError(
            f"features must have shape ({n_samples}, {n_states}, n_features) or "
            f"({n_samples}, n_features), got {features.shape}."
        )
    if not np.isfinite(features).all():
        raise ValueError("features contains NaN or infinity.")
    if carried is not None:
        carried = _check_carried(carried, n_states, features.shape[2])
    result = _forward_smoothing_rows(
        np.exp(log_startprob), np.exp(log_transmat), log_frameprob, features, carried
    )
    if not np.isfinite(result.log_likelihood):
        raise ValueError(
            "The rows have probability zero given the earlier ones under these parameters "
            "(log-likelihood -inf)."
        )
    return result


# -- one long sequence in chunks of rows (bounded memory) ---------------------
#
# doc/user_guide/hmm.rst, "One long sequence in bounded memory".  A chunk
# starts from the exact log filtered distribution of the row before it
# (``log_filtered``; None for the first chunk, which starts from
# ``startprob``), runs the scaled recursion of the whole-sequence kernels from
# the predicted start p(z | earlier rows), and is redone in log space when
# that recursion cannot vouch for its numbers, when the predicted start has a
# probability below what the fast path carries, or when a state's filtered
# probability ends there (then only the log-space recursion knows it exactly).


class _ChunkForward(NamedTuple):
    """The forward pass over one chunk (see :func:`_chunk_forward`)."""

    log_likelihood: float
    log_filtered: np.ndarray
    log_predictive: np.ndarray
    scaled: bool
    frame: np.ndarray
    filtered: np.ndarray
    scale: np.ndarray


def _one_sequence(n_rows):
    return np.array([0, n_rows], dtype=np.intp)


def _predicted_log_start(log_filtered, log_transmat):
    """log p(z_t | rows before t) from log p(z_{t-1} | rows up to t-1): -inf
    for a state no possible state leads to.  (scipy's logsumexp costs
    milliseconds per call: too much once per chunk.)"""
    terms = log_filtered[:, None] + log_transmat
    top = terms.max(axis=0)
    result = np.full(top.shape, -np.inf)
    finite = top > -np.inf
    with np.errstate(under="ignore"):
        sums = np.exp(terms[:, finite] - top[finite]).sum(axis=0)
    result[finite] = top[finite] + np.log(sums)
    return result


def _shifted_logs(log_frameprob, shift):
    """The max-shifted log-emissions and their shift (given: already shifted)."""
    log_frameprob = _contiguous(log_frameprob)
    if shift is not None:
        return log_frameprob, _contiguous(shift)
    shifted = np.empty_like(log_frameprob)
    shift = np.empty(log_frameprob.shape[0])
    _hmm.shift_rows(log_frameprob, shifted, shift)
    return shifted, shift


def _chunk_start(startprob, log_transmat, log_filtered):
    """``(start, log_start, scaled)`` of a chunk: its predicted start, the log of
    it (None for the first chunk: computed if needed), and whether the fast
    path may take it (no predicted probability below what it carries)."""
    if log_filtered is None:
        return startprob, None, True
    log_start = _predicted_log_start(log_filtered, log_transmat)
    return np.exp(log_start), log_start, not np.any(_underflows(log_start))


def _chunk_forward(startprob, transmat, log_transmat, log_frameprob, shift, log_filtered, buffers):
    """The forward pass over one chunk of a long sequence, on validated inputs.

    ``log_frameprob`` (shifted by ``shift`` unless it is None) holds the
    chunk's rows; ``log_filtered`` is the exact log filtered distribution of
    the row before the chunk (None: the chunk starts the sequence).  Returns
    a :class:`_ChunkForward`: the chunk's log-likelihood given the earlier
    rows (-inf for probability zero), the exact log filtered distribution of
    its last row, its log predictive densities (a work array), whether the
    scaled recursion stood, and then its frame, filtered distributions and
    scale factors for a scaled backward pass.
    """
    n_rows, n_states = log_frameprob.shape
    start, log_start, scaled = _chunk_start(startprob, log_transmat, log_filtered)
    log_predictive = work_array(buffers, "log_predictive", (n_rows,))
    filtered = work_array(buffers, "filtered", (n_rows, n_states))
    if scaled:
        frame, frame_shift, _ = _frame(log_frameprob, shift, buffers)
        frame_shift = _contiguous(frame_shift)
        scale = work_array(buffers, "scale", (n_rows,))
        status = np.empty(1)
        _hmm.forward(
            _contiguous(start),
            transmat,
            frame,
            frame_shift,
            _one_sequence(n_rows),
            filtered,
            scale,
            status,
        )
        if not np.isnan(status[0]) and not _lost_precision(
            filtered[-1], startprob, transmat, log_frameprob, log_filtered
        ):
            np.log(scale, out=log_predictive)
            log_predictive += frame_shift
            with np.errstate(over="ignore"):  # below -DBL_MAX: -inf
                log_likelihood = float(log_predictive.sum())
            with np.errstate(divide="ignore"):  # impossible states
                last = np.log(filtered[-1])
            return _ChunkForward(log_likelihood, last, log_predictive, True, frame, filtered, scale)
    if log_start is None:
        log_start = _logs(startprob, transmat)[0]
    shifted, shift = _shifted_logs(log_frameprob, shift)
    last = np.empty(n_states)
    log_likelihood = _hmm.log_forward_chunk(
        _contiguous(log_start), log_transmat, shifted, shift, filtered, log_predictive, last
    )
    return _ChunkForward(float(log_likelihood), last, log_predictive, False, None, filtered, None)


def _chunk_bounds(n_rows, chunk_rows):
    return [(start, min(start + chunk_rows, n_rows)) for start in range(0, n_rows, chunk_rows)]


def _chunked_forward(
    startprob, transmat, n_rows, chunk_rows, emissions, on_chunk=None, buffers=None
):
    """The log-likelihood of one long sequence in O(chunk_rows x n_states) memory.

    ``emissions(start, stop)`` gives ``(log_frameprob, shift)`` of rows
    ``start:stop`` (``shift`` None: not shifted); ``on_chunk(start, stop,
    log_predictive)``, when given, sees each chunk's log predictive densities
    (a work array, consumed at once).  Each chunk's log-likelihood given the
    earlier rows is exact to 2^-36 relative, as a whole sequence's is.
    """
    startprob, transmat = _contiguous(startprob), _contiguous(transmat)
    log_transmat = _logs(startprob, transmat)[1]
    log_filtered, log_likelihood = None, 0.0
    for start, stop in _chunk_bounds(n_rows, chunk_rows):
        log_frameprob, shift = emissions(start, stop)
        chunk = _chunk_forward(
            startprob, transmat, log_transmat, log_frameprob, shift, log_filtered, buffers
        )
        log_likelihood += chunk.log_likelihood
        if on_chunk is not None:
            on_chunk(start, stop, chunk.log_predictive)
        log_filtered = chunk.log_filtered
    return log_likelihood


def _chunk_backward_scaled(
    startprob,
    transmat,
    log_transmat,
    log_frameprob,
    shift,
    before,
    log_w_next,
    posteriors,
    xi_unscaled,
    transition_counts,
    buffers,
):
    """The scaled forward (again, from the checkpoint ``before``) and backward
    pass over one chunk; returns log w of its first row, or None when the
    scaled recursion cannot vouch for its numbers (nothing is then added)."""
    chunk = _chunk_forward(startprob, transmat, log_transmat, log_frameprob, shift, before, buffers)
    if not chunk.scaled:
        return None
    n_states = transmat.shape[0]
    has_next = log_w_next is not None
    beta_last = np.ones(n_states)
    if has_next:
        with np.errstate(over="ignore"):
            beta_last = np.exp(_predicted_log_start(log_w_next, log_transmat.T))
        if not np.isfinite(beta_last).all():
            return None
    w_first = np.empty(n_states)
    status = _hmm.backward_chunk(
        transmat,
        chunk.frame,
        chunk.filtered,
        chunk.scale,
        beta_last,
        has_next,
        posteriors,
        xi_unscaled,
        w_first,
    )
    if np.isnan(status):
        return None
    with np.errstate(divide="ignore"):  # zero: the state is impossible there
        if has_next:
            cross = np.log(chunk.filtered[-1])[:, None] + log_transmat + log_w_next[None, :]
            transition_counts += np.exp(cross)
        return np.log(w_first)


def _checkpointed_forward_backward(
    startprob, transmat, n_rows, chunk_rows, emissions, consume, buffers=None
):
    """Forward-backward over one long sequence in O((n_rows / chunk_rows + chunk_rows) n_states).

    The forward pass keeps only the log filtered distribution before each
    chunk of ``chunk_rows`` rows (its checkpoint); the backward pass goes
    over the chunks last to first, recomputes each one's emissions and
    forward messages from its checkpoint, then runs the backward recursion
    over it from the backward message of the next chunk (see
    doc/user_guide/hmm.rst, "One long sequence in bounded memory").
    ``emissions(start, stop)`` gives ``(log_frameprob, shift, cache)`` of rows
    ``start:stop``; ``consume(start, stop, posteriors, cache)`` gets each
    chunk's posteriors (a work array, consumed at once), last chunk first.
    A chunk the scaled recursions cannot vouch for is redone in log space.

    Returns ``(log_likelihood, start_counts, transition_counts)``; for a
    sequence of probability zero, -inf and zero posteriors and counts, as
    :func:`_forward_backward_offsets` gives.
    """
    startprob, transmat = _contiguous(startprob), _contiguous(transmat)
    log_transmat = _logs(startprob, transmat)[1]
    n_states = transmat.shape[0]
    bounds = _chunk_bounds(n_rows, chunk_rows)
    checkpoints, log_filtered, log_likelihood = [], None, 0.0
    for start, stop in bounds:
        log_frameprob, shift, _ = emissions(start, stop)
        chunk = _chunk_forward(
            startprob, transmat, log_transmat, log_frameprob, shift, log_filtered, buffers
        )
        checkpoints.append((log_filtered, chunk.scaled))
        log_likelihood += chunk.log_likelihood
        log_filtered = chunk.log_filtered
    possible = log_likelihood > -np.inf
    start_counts = np.zeros(n_states)
    transition_counts = np.zeros((n_states, n_states))
    xi_unscaled = np.zeros((n_states, n_states))
    log_w = None
    for index in range(len(bounds) - 1, -1, -1):
        start, stop = bounds[index]
        log_frameprob, shift, cache = emissions(start, stop)
        posteriors = work_array(buffers, "posteriors", (stop - start, n_states))
        before, scaled = checkpoints[index]
        if not possible:
            posteriors[...] = 0.0
            consume(start, stop, posteriors, cache)
            continue
        log_w_first = None
        if scaled:
            log_w_first = _chunk_backward_scaled(
                startprob,
                transmat,
                log_transmat,
                log_frameprob,
                shift,
                before,
                log_w,
                posteriors,
                xi_unscaled,
                transition_counts,
                buffers,
            )
        if log_w_first is None:
            log_start = _chunk_start(startprob, log_transmat, before)[1]
            if log_start is None:
                log_start = _logs(startprob, transmat)[0]
            shifted, shift = _shifted_logs(log_frameprob, shift)
            log_w_first = np.empty(n_states)
            _hmm.log_forward_backward_chunk(
                _contiguous(log_start),
                log_transmat,
                shifted,
                shift,
                np.zeros(n_states) if log_w is None else log_w,
                log_w is not None,
                posteriors,
                work_array(buffers, "log_predictive", (stop - start,)),
                transition_counts,
                log_w_first,
            )
        if index == 0:
            start_counts += posteriors[0]
        consume(start, stop, posteriors, cache)
        log_w = log_w_first
    transition_counts += transmat * xi_unscaled
    return log_likelihood, start_counts, transition_counts


# -- sampling -----------------------------------------------------------------


def _sample_states(startprob, transmat, uniforms):
    """A state path from uniform variates by inverse-CDF sampling (no checks)."""
    states = np.empty(len(uniforms), dtype=np.intp)
    _hmm.sample_states(
        np.cumsum(startprob, dtype=np.float64),
        np.cumsum(transmat, axis=1, dtype=np.float64),
        _contiguous(uniforms),
        states,
    )
    return states


def _check_probabilities(startprob, transmat):
    startprob = _real_array(startprob, "startprob")
    transmat = _real_array(transmat, "transmat")
    if startprob.ndim != 1 or startprob.size == 0:
        raise ValueError(f"startprob must be a non-empty 1-D array, got shape {startprob.shape}.")
    n_states = startprob.shape[0]
    if transmat.shape != (n_states, n_states):
        raise ValueError(
            f"transmat must have shape ({n_states}, {n_states}), got {transmat.shape}."
        )
    for name, value, sums in (
        ("startprob", startprob, startprob.sum(keepdims=True)),
        ("transmat", transmat, transmat.sum(axis=1)),
    ):
        if not np.isfinite(value).all() or np.any(value < 0):
            raise ValueError(f"{name} must hold probabilities (finite, >= 0).")
        if not np.allclose(sums, 1.0, rtol=0, atol=1e-6):
            raise ValueError(f"{name} must sum to 1 (each row of transmat); sums are {sums}.")
    return startprob, transmat


def check_path_length(n_samples):
    """``n_samples`` >= 1 whose path (its uniforms and states) fits in memory."""
    check_scalar_param(n_samples, "n_samples", "int", low=1)
    check_allocation(
        (int(n_samples), 2), np.float64, argument=f"n_samples={n_samples}", what="the state path"
    )


@masked_arrays_checked()
def sample_hmm_states(startprob, transmat, n_samples, *, random_state=None):
    """Draw a path of the hidden Markov chain.

    Parameters
    ----------
    startprob : array-like of shape (n_states,)
        p(z_1 = i) (probabilities, not their logarithms).
    transmat : array-like of shape (n_states, n_states)
        p(z_{t+1} = j | z_t = i).
    n_samples : int
        Length of the path, >= 1.
    random_state : int, RandomState instance or None, default=None
        One uniform variate per step is drawn from it (``random_state.rand``).

    Returns
    -------
    HMMStateSample
        ``(states,)``: the path, of intp and shape (n_samples,).

    Examples
    --------
    >>> from skseq.inference import sample_hmm_states
    >>> sample_hmm_states([1.0, 0.0], [[0.0, 1.0], [1.0, 0.0]], 5, random_state=0).states
    array([0, 1, 0, 1, 0])
    """
    startprob, transmat = _check_probabilities(startprob, transmat)
    check_path_length(n_samples)
    uniforms = check_random_state(random_state).rand(int(n_samples))
    return HMMStateSample(_sample_states(startprob, transmat, uniforms))

