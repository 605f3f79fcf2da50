"""Exact inference in explicit-duration (semi-Markov) hidden Markov models.

A semi-Markov HMM generates a sequence as visits: the first visit's state is
drawn from ``startprob``, each visit to state k lasts d rows with probability
``durationprob[k, d - 1]`` (d = 1 .. ``max_duration``), and the next visit's
state is drawn from row k of ``transmat`` (whose diagonal is zero in the
estimators: a visit ends by leaving its state).  The last visit of a
sequence is right-censored: it may continue past the last row, so it weighs
the survival function P(duration >= d), not the probability of exactly d.

The recursions run over segment boundaries in log space (kernel
``skseq/_kernels/_hsmm.pyx``), O(n_rows K (K + max_duration)) time.  As in
:mod:`skseq.inference.hmm`, the caller computes ``log_frameprob[t, k] =
log p(x_t | z_t = k)``, and several sequences are passed concatenated with
``lengths``.

With geometric durations, ``durationprob[k, d - 1] = (1 - a_k) a_k^(d - 1)``
(truncated where the tail is negligible), the model is the HMM whose
transition matrix has ``a_k`` on its diagonal and ``(1 - a_k) transmat[k, j]``
off it.
"""

from typing import NamedTuple

import numpy as np
from sklearn.utils import check_random_state

from .._kernels import load
from .._sequences import sequence_offsets
from ._checks import masked_arrays_checked
from .hmm import _LOG_FRAMEPROB_HINT, _check_log_probabilities, _real_array, check_path_length

_hsmm = load("_hsmm")

__all__ = [
    "hsmm_forward_backward",
    "hsmm_forward",
    "hsmm_filter",
    "hsmm_viterbi",
    "sample_hsmm_segments",
    "HSMMForwardBackwardResult",
    "HSMMForwardResult",
    "HSMMFilterResult",
    "HSMMViterbiResult",
    "HSMMSegmentSample",
]


class HSMMForwardBackwardResult(NamedTuple):
    """What :func:`hsmm_forward_backward` returns.

    Attributes
    ----------
    log_likelihood : float
        log p(x) summed over sequences.
    posteriors : ndarray of shape (n_samples, n_states)
        p(z_t = k | x) for every row.
    start_counts : ndarray of shape (n_states,)
        Posterior of the first visit's state, summed over sequences.
    transition_counts : ndarray of shape (n_states, n_states)
        Expected number of visits to k that follow a visit to j.
    duration_counts : ndarray of shape (n_states, max_duration)
        Expected number of complete visits to k of d rows (column d - 1).
    censored_counts : ndarray of shape (n_states, max_duration)
        Expected number of censored last visits to k seen for d rows (so of
        at least d rows).
    sequence_log_likelihood : ndarray of shape (n_sequences,)
        log p(x) of each sequence.
    """

    log_likelihood: float
    posteriors: np.ndarray
    start_counts: np.ndarray
    transition_counts: np.ndarray
    duration_counts: np.ndarray
    censored_counts: np.ndarray
    sequence_log_likelihood: np.ndarray


class HSMMForwardResult(NamedTuple):
    """What :func:`hsmm_forward` returns.

    Attributes
    ----------
    log_likelihood : float
        log p(x) summed over sequences.
    filtered : ndarray of shape (n_samples, n_states)
        p(z_t = k | x_1..x_t).
    sequence_log_likelihood : ndarray of shape (n_sequences,)
    log_predictive : ndarray of shape (n_samples,)
        log p(x_t | x_1..x_{t-1}); per sequence these sum to its log-likelihood.
    log_message : ndarray of shape (n_states, max_duration)
        The filter's message after the last row of the last sequence (see
        :func:`hsmm_filter`).
    """

    log_likelihood: float
    filtered: np.ndarray
    sequence_log_likelihood: np.ndarray
    log_predictive: np.ndarray
    log_message: np.ndarray


class HSMMFilterResult(NamedTuple):
    """What :func:`hsmm_filter` returns.

    Attributes
    ----------
    filtered : ndarray of shape (n_samples, n_states)
        p(z_t = k | x_1..x_t).
    predicted : ndarray of shape (n_samples, n_states)
        p(z_{t+1} = k | x_1..x_t): the current visit goes on, or a new one
        starts.
    log_likelihood : float
        log p(x) summed over sequences (the first one's given the rows of
        ``log_message`` when it is passed).
    log_message : ndarray of shape (n_states, max_duration)
        log p(z_t = k, the current visit has lasted a rows | x_1..x_t) in
        column a - 1, at the last row t of the last sequence: the filter's
        joint distribution over (state, age of the current visit), which sums
        to one.  Passing it as ``log_message`` continues that sequence exactly.
    """

    filtered: np.ndarray
    predicted: np.ndarray
    log_likelihood: float
    log_message: np.ndarray


class HSMMViterbiResult(NamedTuple):
    """What :func:`hsmm_viterbi` returns.

    Attributes
    ----------
    log_prob : float
        log p(x, best segmentation), summed over sequences.
    states : ndarray of intp, shape (n_samples,)
        The state of every row in the best segmentation.
    """

    log_prob: float
    states: np.ndarray


class HSMMSegmentSample(NamedTuple):
    """What :func:`sample_hsmm_segments` returns.

    Attributes
    ----------
    states : ndarray of intp, shape (n_samples,)
        The state of every row.
    segment_starts : ndarray of intp, shape (n_segments,)
        The first row of each visit.
    segment_states : ndarray of intp, shape (n_segments,)
    segment_durations : ndarray of intp, shape (n_segments,)
        Each visit's drawn duration; the last one may pass the end of the
        path (a censored visit).
    """

    states: np.ndarray
    segment_starts: np.ndarray
    segment_states: np.ndarray
    segment_durations: np.ndarray


def log_survival(log_durationprob):
    """``(log P(d >= 1..D), log P(d >= 2..D+1))`` of each row of duration log-probabilities."""
    with np.errstate(divide="ignore", invalid="ignore"):
        survival = np.logaddexp.accumulate(log_durationprob[:, ::-1], axis=1)[:, ::-1]
    survival = np.minimum(survival, 0.0)  # P <= 1 up to rounding
    following = np.full_like(survival, -np.inf)
    following[:, :-1] = survival[:, 1:]
    return np.ascontiguousarray(survival), following


def _check_log_durationprob(log_durationprob, n_states):
    log_durationprob = _real_array(log_durationprob, "log_durationprob")
    if log_durationprob.ndim != 2 or log_durationprob.shape[0] != n_states:
        raise ValueError(
            f"log_durationprob must have shape ({n_states}, max_duration), "
            f"got {log_durationprob.shape}."
        )
    if log_durationprob.shape[1] == 0:
        raise ValueError("log_durationprob must have at least one duration (max_duration >= 1).")
    if np.isnan(log_durationprob).any() or np.isposinf(log_durationprob).any():
        raise ValueError("log_durationprob contains NaN or +inf.")
    with np.errstate(under="ignore"):
        sums = np.exp(log_durationprob).sum(axis=1)
    if not np.allclose(sums, 1.0, rtol=0, atol=1e-6):
        raise ValueError(f"every row of exp(log_durationprob) must sum to 1; row sums are {sums}.")
    return np.ascontiguousarray(log_durationprob)


def _check_model(log_startprob, log_transmat, log_durationprob, log_frameprob, lengths):
    log_startprob, log_transmat, log_frameprob = _check_log_probabilities(
        log_startprob, log_transmat, log_frameprob
    )
    log_durationprob = _check_log_durationprob(log_durationprob, log_startprob.shape[0])
    offsets = sequence_offsets(log_frameprob.shape[0], lengths=lengths)
    contiguous = (np.ascontiguousarray(a) for a in (log_startprob, log_transmat, log_frameprob))
    log_startprob, log_transmat, log_frameprob = contiguous
    return log_startprob, log_transmat, log_durationprob, log_frameprob, offsets


def _forward_backward_offsets(
    log_startprob, log_transmat, log_durationprob, log_frameprob, offsets
):
    """:func:`hsmm_forward_backward` on validated C-contiguous float64 arrays."""
    n_states, n_durations = log_durationprob.shape
    posteriors = np.empty(log_frameprob.shape)
    sequence_log_likelihood = np.empty(len(offsets) - 1)
    start_counts = np.zeros(n_states)
    transition_counts = np.zeros((n_states, n_states))
    duration_counts = np.zeros((n_states, n_durations))
    censored_counts = np.zeros((n_states, n_durations))
    _hsmm.forward_backward(
        log_startprob,
        log_transmat,
        log_durationprob,
        log_survival(log_durationprob)[0],
        log_frameprob,
        np.asarray(offsets, dtype=np.intp),
        posteriors,
        sequence_log_likelihood,
        start_counts,
        transition_counts,
        duration_counts,
        censored_counts,
    )
    return HSMMForwardBackwardResult(
        float(sequence_log_likelihood.sum()),
        posteriors,
        start_counts,
        transition_counts,
        duration_counts,
        censored_counts,
        sequence_log_likelihood,
    )


def _check_log_message(log_message, log_durationprob):
    """The validated filter message ``log_message`` (a copy, C-contiguous float64)."""
    if log_message is None:
        return None
    n_states, n_durations = log_durationprob.shape
    log_message = _real_array(log_message, "log_message")
    if log_message.shape != (n_states, n_durations):
        raise ValueError(
            f"log_message must have shape (n_states, max_duration) = ({n_states}, "
            f"{n_durations}), got {log_message.shape}."
        )
    if np.isnan(log_message).any() or np.isposinf(log_message).any():
        raise ValueError("log_message contains NaN or +inf.")
    with np.errstate(under="ignore"):
        total = float(np.exp(log_message).sum())
    if not np.isclose(total, 1.0, rtol=0, atol=1e-6):
        raise ValueError(
            f"exp(log_message) must sum to 1 (a distribution over state and age); it sums "
            f"to {total}."
        )
    survival = log_survival(log_durationprob)[0]
    if np.any((log_message > -np.inf) & (survival == -np.inf)):
        raise ValueError(
            "log_message puts probability on a (state, age) that no visit reaches: "
            "P(duration >= age) is zero there."
        )
    return np.array(log_message, dtype=np.float64, order="C")


def _carried(log_message, log_transmat, log_durationprob, survival):
    """``(carried, carried_start)`` of the kernel from a validated filter message.

    ``carried[k, a - 1] = log_message[k, a - 1] - log P(duration_k >= a)``
    (the visit's rows without the weight of its duration) and
    ``carried_start[k]`` the log-probability that a visit to k starts at the
    next row: sum_j sum_a p(j, a) P(d_j = a) / P(d_j >= a) transmat[j, k]
    (``survival``: ``log_survival(log_durationprob)[0]``).
    """
    reachable = log_message > -np.inf
    carried = np.full(log_message.shape, -np.inf)
    carried[reachable] = log_message[reachable] - survival[reachable]
    with np.errstate(divide="ignore", invalid="ignore", under="ignore"):
        ending = np.logaddexp.reduce(carried + log_durationprob, axis=1)
        carried_start = np.logaddexp.reduce(ending[:, None] + log_transmat, axis=0)
    return np.ascontiguousarray(carried), np.ascontiguousarray(carried_start)


def _forward_offsets(
    log_startprob, log_transmat, log_durationprob, log_frameprob, offsets, log_message=None
):
    """``(filtered, predicted, log_predictive, sequence_log_likelihood, log_message)`` on
    validated arrays (``log_message`` too, or None: the first sequence starts afresh)."""
    survival, following = log_survival(log_durationprob)
    filtered = np.empty(log_frameprob.shape)
    predicted = np.empty(log_frameprob.shape)
    log_predictive = np.empty(log_frameprob.shape[0])
    sequence_log_likelihood = np.empty(len(offsets) - 1)
    final = np.empty(log_durationprob.shape)
    if log_message is None:
        carried, carried_start = np.empty(log_durationprob.shape), np.empty_like(log_startprob)
    else:
        carried, carried_start = _carried(log_message, log_transmat, log_durationprob, survival)
    _hsmm.forward(
        log_startprob,
        log_transmat,
        log_durationprob,
        survival,
        following,
        log_frameprob,
        np.asarray(offsets, dtype=np.intp),
        log_message is not None,
        carried_start,
        carried,
        filtered,
        predicted,
        log_predictive,
        sequence_log_likelihood,
        final,
    )
    with np.errstate(invalid="ignore"):
        joint = final + survival  # -inf + -inf: unreachable ages
    with np.errstate(divide="ignore", under="ignore"):
        total = np.logaddexp.reduce(joint, axis=None)
    if np.isfinite(sequence_log_likelihood[-1]) and np.isfinite(total):
        log_message_out = joint - total
    else:  # the last sequence is impossible: no distribution to carry
        log_message_out = np.full(joint.shape, -np.inf)
    return filtered, predicted, log_predictive, sequence_log_likelihood, log_message_out


class _HSMMStream(NamedTuple):
    """What forward-only smoothing carries from one chunk of a sequence to the next.

    ``log_message[j, b - 1]``: log p(z_t = j, the visit b rows old | x_1..x_t)
    (the filter's message, :func:`hsmm_filter`); ``statistics[j, b - 1]``:
    E[S_t | x_1..x_t, that state and age], S_t the additive statistics of the
    rows up to t (kernel ``forward_smoothing``: start, transitions, complete
    durations, features).  Its size does not depend on how many rows passed.
    """

    log_message: np.ndarray
    statistics: np.ndarray


def _stream_width(n_states, n_durations, n_features):
    """The length of the statistics of one (state, age) of :class:`_HSMMStream`."""
    return n_states + n_states * n_states + n_states * n_durations + n_states * n_features


def _reachable_stream(carried, log_durationprob):
    """``carried`` with the (state, age) entries that ``log_durationprob`` makes
    unreachable (P(duration >= age) = 0, after an M step) dropped and the rest
    renormalised; None when nothing is left."""
    survival = log_survival(log_durationprob)[0]
    message = np.where(survival > -np.inf, carried.log_message, -np.inf)
    with np.errstate(divide="ignore", under="ignore"):
        total = np.logaddexp.reduce(message, axis=None)
    if not np.isfinite(total):
        return None
    return _HSMMStream(np.ascontiguousarray(message - total), carried.statistics)


def _forward_smoothing_rows(
    log_startprob, log_transmat, log_durationprob, log_frameprob, features, carried=None
):
    """``(log_likelihood, carried, log_predictive)`` of forward-only smoothing over
    the rows of one chunk of a sequence, on validated arrays.

    ``features`` (n_samples, n_states, n_features): the rows' emission
    features in each state.  ``carried``: the :class:`_HSMMStream` of the
    sequence's earlier rows (not modified), or None when the rows start it.
    ``log_likelihood`` is that of the rows given the earlier ones, -inf when
    they (or the carried message, under these durations) are impossible.
    """
    n_states, n_durations = log_durationprob.shape
    n_rows, n_features = features.shape[0], features.shape[2]
    width = _stream_width(n_states, n_durations, n_features)
    log_predictive = np.full(n_rows, -np.inf)
    if carried is None:
        message = np.full((n_states, n_durations), -np.inf)
        statistics = np.zeros((n_states, n_durations, width))
    else:
        if carried.log_message.shape != (n_states, n_durations) or carried.statistics.shape != (
            n_states,
            n_durations,
            width,
        ):
            raise ValueError(
                "The message carried from the previous partial_fit call does not fit the "
                "model's dimensions; pass new_sequence=True."
            )
        carried = _reachable_stream(carried, log_durationprob)
        if carried is None:
            return -np.inf, None, log_predictive
        message = np.array(carried.log_message, dtype=np.float64, order="C")
        statistics = np.array(carried.statistics, dtype=np.float64, order="C")
    log_likelihood = _hsmm.forward_smoothing(
        log_startprob,
        log_transmat,
        log_durationprob,
        log_survival(log_durationprob)[0],
        np.ascontiguousarray(log_frameprob, dtype=np.float64),
        np.ascontiguousarray(features, dtype=np.float64),
        carried is None,
        message,
        statistics,
        log_predictive,
    )
    if not np.isfinite(log_likelihood):
        return -np.inf, None, log_predictive
    return float(log_likelihood), _HSMMStream(message, statistics), log_predictive


def _stream_statistics(carried, durationprob):
    """``(start, transitions, durations, feature_sums)``: the smoothed statistics
    of every row a :class:`_HSMMStream` has seen, its last visit censored
    (completed by ``durationprob``, as :func:`complete_duration_counts`)."""
    n_states, n_durations = carried.log_message.shape
    n_features = (carried.statistics.shape[2] - _stream_width(n_states, n_durations, 0)) // n_states
    with np.errstate(under="ignore"):
        weights = np.exp(carried.log_message)
    totals = np.einsum("jb,jbm->m", weights, carried.statistics)
    cuts = np.cumsum([n_states, n_states * n_states, n_states * n_durations])
    start, transitions, complete, feature_sums = np.split(totals, cuts)
    durations = complete_duration_counts(
        complete.reshape(n_states, n_durations), weights, durationprob
    )
    return (
        start,
        transitions.reshape(n_states, n_states),
        durations,
        feature_sums.reshape(n_states, n_features),
    )


def _viterbi_offsets(log_startprob, log_transmat, log_durationprob, log_frameprob, offsets):
    """``(sequence_log_prob, states)`` on validated arrays."""
    states = np.empty(log_frameprob.shape[0], dtype=np.intp)
    sequence_log_prob = np.empty(len(offsets) - 1)
    _hsmm.viterbi(
        log_startprob,
        log_transmat,
        log_durationprob,
        log_survival(log_durationprob)[0],
        log_frameprob,
        np.asarray(offsets, dtype=np.intp),
        states,
        sequence_log_prob,
    )
    return sequence_log_prob, states


def complete_duration_counts(duration_counts, censored_counts, durationprob):
    """Expected counts of every duration, the censored visits' completed by ``durationprob``.

    A censored visit seen for d rows lasts d' >= d rows with probability
    ``durationprob[k, d' - 1] / P(duration >= d)``: EM's expected
    complete-data counts.  Censored mass on durations of survival zero is
    dropped (it cannot occur under ``durationprob``).
    """
    survival = np.cumsum(durationprob[:, ::-1], axis=1)[:, ::-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(survival > 0, censored_counts / survival, 0.0)
    return duration_counts + durationprob * np.cumsum(ratio, axis=1)


_DOC_MODEL = """    log_startprob : array-like of shape (n_states,)
        log p(first visit's state = k).
    log_transmat : array-like of shape (n_states, n_states)
        log p(next visit's state = k | this visit's state = j).
    log_durationprob : array-like of shape (n_states, max_duration)
        log p(a visit to k lasts d rows) in column d - 1.
    log_frameprob : array-like of shape (n_samples, n_states)
        log p(x_t | z_t = k) of every row.
    lengths : array-like of int, optional
        Lengths of the concatenated sequences; one sequence if omitted."""

_DOC_MESSAGE = """    log_message : array-like of shape (n_states, max_duration), optional
        Continue earlier rows: the ``log_message`` of the result of this
        function (or of :func:`hsmm_forward`) on them, log p(state k, current
        visit a rows old | earlier rows) in column a - 1.  The first sequence
        then continues them exactly: its first row's state is that visit's
        (going on with probability P(d >= a + 1) / P(d >= a)) or the next
        visit's (``log_startprob`` is not used for it), and its log-likelihood
        is given the earlier rows.  Cutting a sequence anywhere and passing
        the message gives the filtered distributions and the total
        log-likelihood of one pass.  None: every sequence starts afresh."""


@masked_arrays_checked(hints=_LOG_FRAMEPROB_HINT)
def hsmm_forward_backward(
    log_startprob, log_transmat, log_durationprob, log_frameprob, *, lengths=None
):
    """Posterior state probabilities and expected counts of a semi-Markov HMM.

    Parameters
    ----------
    {model}

    Returns
    -------
    HSMMForwardBackwardResult
        ``log_likelihood``, ``posteriors``, ``start_counts``,
        ``transition_counts``, ``duration_counts``, ``censored_counts``,
        ``sequence_log_likelihood``.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference import hsmm_forward_backward
    >>> log_start = np.log([0.5, 0.5])
    >>> log_trans = np.array([[-np.inf, 0.0], [0.0, -np.inf]])  # log [[0, 1], [1, 0]]
    >>> log_duration = np.log([[0.2, 0.8], [0.5, 0.5]])
    >>> log_frame = np.log([[0.9, 0.1], [0.8, 0.2], [0.1, 0.9]])
    >>> result = hsmm_forward_backward(log_start, log_trans, log_duration, log_frame)
    >>> bool(np.allclose(result.posteriors.sum(axis=1), 1.0))
    True
    >>> round(float(result.start_counts.sum()), 6)
    1.0
    """
    arrays = _check_model(log_startprob, log_transmat, log_durationprob, log_frameprob, lengths)
    return _forward_backward_offsets(*arrays)


@masked_arrays_checked(hints=_LOG_FRAMEPROB_HINT)
def hsmm_forward(
    log_startprob,
    log_transmat,
    log_durationprob,
    log_frameprob,
    *,
    lengths=None,
    log_message=None,
):
    """Log-likelihood, filtered distributions and log predictive densities.

    Parameters
    ----------
    {model}
    {message}

    Returns
    -------
    HSMMForwardResult
        ``log_likelihood``, ``filtered``, ``sequence_log_likelihood``,
        ``log_predictive``, ``log_message`` (after the last row).

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference import hsmm_forward
    >>> alternate = np.array([[-np.inf, 0.0], [0.0, -np.inf]])  # log [[0, 1], [1, 0]]
    >>> result = hsmm_forward(alternate[1], alternate, alternate, np.zeros((3, 2)))
    >>> result.filtered  # a visit to 0 lasts 2 rows, then one to 1
    array([[1., 0.],
           [1., 0.],
           [0., 1.]])
    """
    arrays = _check_model(log_startprob, log_transmat, log_durationprob, log_frameprob, lengths)
    log_message = _check_log_message(log_message, arrays[2])
    filtered, _, log_predictive, sequence_log_likelihood, message = _forward_offsets(
        *arrays, log_message
    )
    return HSMMForwardResult(
        float(sequence_log_likelihood.sum()),
        filtered,
        sequence_log_likelihood,
        log_predictive,
        message,
    )


@masked_arrays_checked(hints=_LOG_FRAMEPROB_HINT)
def hsmm_filter(
    log_startprob,
    log_transmat,
    log_durationprob,
    log_frameprob,
    *,
    lengths=None,
    log_message=None,
):
    """Filtered and one-step predicted state distributions of a semi-Markov HMM.

    Parameters
    ----------
    {model}
    {message}

    Returns
    -------
    HSMMFilterResult
        ``filtered`` p(z_t | x_1..x_t), ``predicted`` p(z_(t+1) | x_1..x_t),
        ``log_likelihood`` and ``log_message`` (the joint distribution of the
        state and the age of its visit after the last row, to continue from).

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference import hsmm_filter
    >>> alternate = np.array([[-np.inf, 0.0], [0.0, -np.inf]])  # log [[0, 1], [1, 0]]
    >>> result = hsmm_filter(alternate[1], alternate, alternate, np.zeros((2, 2)))
    >>> result.predicted  # after two rows of state 0, a visit to 1 starts
    array([[1., 0.],
           [0., 1.]])
    >>> np.exp(result.log_message)  # state 0, its visit 2 rows old
    array([[0., 1.],
           [0., 0.]])
    >>> first = hsmm_filter(alternate[1], alternate, alternate, np.zeros((1, 2)))
    >>> rest = hsmm_filter(alternate[1], alternate, alternate, np.zeros((1, 2)),
    ...                    log_message=first.log_message)
    >>> rest.predicted  # the row cut off continues the same visit
    array([[0., 1.]])
    """
    arrays = _check_model(log_startprob, log_transmat, log_durationprob, log_frameprob, lengths)
    log_message = _check_log_message(log_message, arrays[2])
    filtered, predicted, _, sequence_log_likelihood, message = _forward_offsets(
        *arrays, log_message
    )
    return HSMMFilterResult(filtered, predicted, float(sequence_log_likelihood.sum()), message)


@masked_arrays_checked(hints=_LOG_FRAMEPROB_HINT)
def hsmm_viterbi(log_startprob, log_transmat, log_durationprob, log_frameprob, *, lengths=None):
    """The most likely segmentation of each sequence (max-sum in log space).

    Parameters
    ----------
    {model}

    Returns
    -------
    HSMMViterbiResult
        ``log_prob`` and ``states``; unpacks as ``log_prob, states``.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference import hsmm_viterbi
    >>> log_prob, states = hsmm_viterbi(
    ...     np.log([0.5, 0.5]), np.array([[-np.inf, 0.0], [0.0, -np.inf]]),
    ...     np.log([[0.1, 0.9], [0.9, 0.1]]), np.log([[0.9, 0.1], [0.8, 0.2], [0.1, 0.9]]))
    >>> states
    array([0, 0, 1])
    """
    arrays = _check_model(log_startprob, log_transmat, log_durationprob, log_frameprob, lengths)
    sequence_log_prob, states = _viterbi_offsets(*arrays)
    return HSMMViterbiResult(float(sequence_log_prob.sum()), states)


for _function in (hsmm_forward_backward, hsmm_forward, hsmm_filter, hsmm_viterbi):
    _function.__doc__ = _function.__doc__.replace("    {model}", _DOC_MODEL).replace(
        "    {message}", _DOC_MESSAGE
    )
del _function


def _check_segment_model(startprob, transmat, durationprob):
    startprob = _real_array(startprob, "startprob")
    transmat = _real_array(transmat, "transmat")
    durationprob = _real_array(durationprob, "durationprob")
    if startprob.ndim != 1 or startprob.size == 0:
        raise ValueError(f"startprob must be a non-empty 1-D array, got shape {startprob.shape}.")
    n_states = startprob.shape[0]
    if transmat.shape != (n_states, n_states):
        raise ValueError(
            f"transmat must have shape ({n_states}, {n_states}), got {transmat.shape}."
        )
    if durationprob.ndim != 2 or durationprob.shape[0] != n_states or durationprob.shape[1] < 1:
        raise ValueError(
            f"durationprob must have shape ({n_states}, max_duration), got {durationprob.shape}."
        )
    for name, value in (
        ("startprob", startprob),
        ("transmat", transmat),
        ("durationprob", durationprob),
    ):
        sums = np.atleast_1d(value.sum(axis=-1))
        if not np.isfinite(value).all() or np.any(value < 0):
            raise ValueError(f"{name} must hold probabilities (finite, >= 0).")
        if not np.allclose(sums, 1.0, rtol=0, atol=1e-6):
            raise ValueError(f"{name} must sum to 1 (each row); sums are {sums}.")
    return startprob, transmat, durationprob


def _draw(cdf, uniform):
    return min(int(np.searchsorted(cdf, uniform, side="right")), len(cdf) - 1)


def _sample_segments(startprob, transmat, durationprob, n_samples, random_state):
    """``HSMMSegmentSample`` of ``n_samples`` rows, on validated probabilities."""
    start_cdf = np.cumsum(startprob)
    trans_cdf = np.cumsum(transmat, axis=1)
    duration_cdf = np.cumsum(durationprob, axis=1)
    states = np.empty(n_samples, dtype=np.intp)
    starts, visited, durations = [], [], []
    row, state = 0, _draw(start_cdf, random_state.rand())
    while row < n_samples:
        duration = 1 + _draw(duration_cdf[state], random_state.rand())
        starts.append(row)
        visited.append(state)
        durations.append(duration)
        states[row : row + duration] = state
        row += duration
        state = _draw(trans_cdf[state], random_state.rand())
    return HSMMSegmentSample(
        states,
        np.array(starts, dtype=np.intp),
        np.array(visited, dtype=np.intp),
        np.array(durations, dtype=np.intp),
    )


@masked_arrays_checked()
def sample_hsmm_segments(startprob, transmat, durationprob, n_samples, *, random_state=None):
    """Draw the visits of a semi-Markov chain, and the state of every row.

    Parameters
    ----------
    startprob : array-like of shape (n_states,)
        p(first visit's state = k) (probabilities, not their logarithms).
    transmat : array-like of shape (n_states, n_states)
        p(next visit's state = k | this visit's state = j).
    durationprob : array-like of shape (n_states, max_duration)
        p(a visit to k lasts d rows) in column d - 1.
    n_samples : int
        Rows of the path, >= 1.
    random_state : int, RandomState instance or None, default=None
        Two uniform variates per visit are drawn from it (its duration and
        the next state), one more for the first state.

    Returns
    -------
    HSMMSegmentSample
        ``states``, ``segment_starts``, ``segment_states``,
        ``segment_durations``.

    Examples
    --------
    >>> from skseq.inference import sample_hsmm_segments
    >>> sample = sample_hsmm_segments([1.0, 0.0], [[0.0, 1.0], [1.0, 0.0]],
    ...                               [[0.0, 1.0], [1.0, 0.0]], 5, random_state=0)
    >>> sample.states
    array([0, 0, 1, 0, 0])
    >>> sample.segment_durations
    array([2, 1, 2])
    """
    startprob, transmat, durationprob = _check_segment_model(startprob, transmat, durationprob)
    check_path_length(n_samples)
    random_state = check_random_state(random_state)
    return _sample_segments(startprob, transmat, durationprob, int(n_samples), random_state)
