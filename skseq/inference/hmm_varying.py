"""Exact inference in hidden Markov models whose transition matrix changes from row to row.

An input-driven HMM (IO-HMM) has p(z_t = j | z_{t-1} = i, u_t) =
softmax_j(W_i u_t + b_i): one transition matrix per row, computed from the
row's inputs u_t by :func:`input_driven_log_transmats`.  The functions here
take those matrices as ``log_transmats`` of shape (n_samples, n_states,
n_states), ``log_transmats[t]`` being the step into row ``t`` (the matrix of
the first row of each sequence is not used), and run the recursions of
:mod:`skseq.inference.hmm` on log messages normalised at every row
(``_hmm_varying`` kernel): each sum over states in plain arithmetic, redone
as a log-sum-exp where it is small enough for an underflowed term to matter,
so nothing underflows.  With the same matrix at every
row they give what :func:`~skseq.inference.hmm_forward_backward` gives.

Conventions as in :mod:`skseq.inference.hmm`: public functions validate
their arguments and return named tuples; the ``_..._offsets`` cores take
validated arrays and the sequence split as ``offsets``.
"""

from typing import NamedTuple

import numpy as np

from .._buffers import work_array
from .._kernels import load
from .._sequences import sequence_offsets
from ._checks import masked_arrays_checked
from .hmm import _LOG_FRAMEPROB_HINT, HMMViterbiResult, _chunk_bounds, _real_array

_kernel = load("_hmm_varying")

__all__ = [
    "input_driven_log_transmats",
    "hmm_varying_forward_backward",
    "hmm_varying_forward",
    "hmm_varying_viterbi",
    "HMMVaryingForwardBackwardResult",
    "HMMVaryingForwardResult",
    "InputDrivenTransmatsResult",
]


class HMMVaryingForwardBackwardResult(NamedTuple):
    """What :func:`hmm_varying_forward_backward` returns.

    Attributes
    ----------
    log_likelihood : float
        log p(x) summed over sequences.
    posteriors : ndarray of shape (n_samples, n_states)
        p(z_t = i | x) of every row.
    pair_posteriors : ndarray of shape (n_samples, n_states, n_states)
        p(z_{t-1} = i, z_t = j | x) of the step into every row (zero at the
        first row of each sequence): the expected transition counts of each
        row, which the M step of input-driven transitions weighs by the row's inputs.
    start_counts : ndarray of shape (n_states,)
        Posterior of the first state, summed over sequences.
    sequence_log_likelihood : ndarray of shape (n_sequences,)
    log_predictive : ndarray of shape (n_samples,)
        log p(x_t | x_1..x_{t-1}) of each row.
    """

    log_likelihood: float
    posteriors: np.ndarray
    pair_posteriors: np.ndarray
    start_counts: np.ndarray
    sequence_log_likelihood: np.ndarray
    log_predictive: np.ndarray


class InputDrivenTransmatsResult(NamedTuple):
    """What :func:`input_driven_log_transmats` returns.

    Attributes
    ----------
    log_transmats : ndarray of shape (n_samples, n_states, n_states)
        log p(z_t = j | z_{t-1} = i, u_t) of every row.
    """

    log_transmats: np.ndarray


@masked_arrays_checked()
def input_driven_log_transmats(coefs, intercepts, controls):
    """log p(z_t = j | z_{t-1} = i, u_t) = log softmax_j(W_i u_t + b_i) of every row.

    Parameters
    ----------
    coefs : array-like of shape (n_states, n_states, n_controls)
        ``coefs[i, j]`` is the weight vector of the logit of j from i.
    intercepts : array-like of shape (n_states, n_states)
        ``intercepts[i, j]``; -inf forbids the transition i -> j whatever the inputs.
    controls : array-like of shape (n_samples, n_controls)
        The inputs u_t, one row per row.

    Returns
    -------
    InputDrivenTransmatsResult
        ``log_transmats``, (n_samples, n_states, n_states): one matrix per row,
        what :func:`hmm_varying_forward_backward` takes.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference import input_driven_log_transmats
    >>> coefs = np.array([[[0.0], [2.0]], [[0.0], [0.0]]])
    >>> intercepts = np.zeros((2, 2))
    >>> log_a = input_driven_log_transmats(coefs, intercepts, [[0.0], [1.0]]).log_transmats
    >>> np.exp(log_a[:, 0]).round(3)  # from state 0: leaving grows with u
    array([[0.5  , 0.5  ],
           [0.119, 0.881]])
    """
    coefs = _real_array(coefs, "coefs")
    intercepts = _real_array(intercepts, "intercepts")
    controls = _real_array(controls, "controls")
    if intercepts.ndim != 2 or intercepts.shape[0] != intercepts.shape[1] or not intercepts.size:
        raise ValueError(
            f"intercepts must have shape (n_states, n_states), got {intercepts.shape}."
        )
    n_states = intercepts.shape[0]
    if controls.ndim != 2:
        raise ValueError(f"controls must be 2-D (n_samples, n_controls), got {controls.shape}.")
    if coefs.shape != (n_states, n_states, controls.shape[1]):
        raise ValueError(
            f"coefs must have shape ({n_states}, {n_states}, n_controls={controls.shape[1]}), "
            f"got {coefs.shape}."
        )
    for name, value in (("coefs", coefs), ("controls", controls)):
        if not np.all(np.isfinite(value)):
            raise ValueError(f"{name} contains NaN or inf.")
    if np.isnan(intercepts).any() or np.isposinf(intercepts).any():
        raise ValueError("intercepts contains NaN or +inf.")
    if np.isneginf(intercepts).all(axis=1).any():
        raise ValueError("a row of intercepts is all -inf: that state could go nowhere.")
    return InputDrivenTransmatsResult(_log_transmats(coefs, intercepts, controls))


def _transition_matrices(coefs, intercepts, controls, buffers=None):
    """``(log_transmats, transmats)`` of validated arrays: softmax_j(W_i u_t + b_i)
    of every row and its logarithm (C-contiguous, (n_samples, K, K))."""
    n_samples, n_states = controls.shape[0], intercepts.shape[0]
    logits = np.empty((n_samples, n_states, n_states))
    flat = logits.reshape(n_samples, n_states * n_states)
    if controls.shape[1]:
        np.matmul(controls, coefs.reshape(n_states * n_states, -1).T, out=flat)
        flat += intercepts.reshape(-1)
    else:
        flat[...] = intercepts.reshape(-1)
    # The softmax of each row: shifted by its largest logit, exponentiated by
    # numpy over the whole array (vectorised), normalised.
    _kernel.shift_rows_by_max(logits)
    transmats = np.empty_like(logits)
    with np.errstate(under="ignore"):
        np.exp(logits, out=transmats)
    _kernel.normalize_softmax_rows(logits, transmats)
    return logits, transmats


def _log_transmats(coefs, intercepts, controls, buffers=None):
    """:func:`input_driven_log_transmats` on validated arrays (C-contiguous result)."""
    return _transition_matrices(coefs, intercepts, controls, buffers)[0]


def _check_varying(log_startprob, log_transmats, log_frameprob, lengths):
    log_startprob = _real_array(log_startprob, "log_startprob")
    log_transmats = _real_array(log_transmats, "log_transmats")
    log_frameprob = _real_array(log_frameprob, "log_frameprob")
    if log_startprob.ndim != 1 or log_startprob.size == 0:
        raise ValueError(
            f"log_startprob must be a non-empty 1-D array, got shape {log_startprob.shape}."
        )
    n_states = log_startprob.shape[0]
    if log_frameprob.ndim != 2 or log_frameprob.shape[1] != n_states:
        raise ValueError(
            f"log_frameprob must have shape (n_samples, {n_states}), got {log_frameprob.shape}."
        )
    n_samples = log_frameprob.shape[0]
    if n_samples == 0:
        raise ValueError("log_frameprob has no rows.")
    if log_transmats.shape != (n_samples, n_states, n_states):
        raise ValueError(
            f"log_transmats must have shape (n_samples={n_samples}, {n_states}, {n_states}): "
            f"one transition matrix per row, got {log_transmats.shape}."
        )
    for name, value in (
        ("log_startprob", log_startprob),
        ("log_transmats", log_transmats),
        ("log_frameprob", log_frameprob),
    ):
        if np.isnan(value).any():
            raise ValueError(f"{name} contains NaN.")
        if np.isposinf(value).any():
            raise ValueError(f"{name} contains +inf.")
    offsets = sequence_offsets(n_samples, lengths=lengths)
    with np.errstate(under="ignore"):
        start_sum = np.exp(log_startprob).sum()
        row_sums = np.exp(log_transmats).sum(axis=2)
    if not np.isclose(start_sum, 1.0, rtol=0, atol=1e-6):
        raise ValueError(f"exp(log_startprob) must sum to 1, sums to {start_sum!r}.")
    used = np.ones(n_samples, dtype=bool)
    used[offsets[:-1]] = False  # the first row's matrix is not used
    bad = used[:, None] & ~np.isclose(row_sums, 1.0, rtol=0, atol=1e-6)
    if bad.any():
        t, i = np.argwhere(bad)[0]
        raise ValueError(
            f"every row of exp(log_transmats[t]) must sum to 1; row {i} of "
            f"log_transmats[{t}] sums to {row_sums[t, i]!r}."
        )
    return log_startprob, log_transmats, log_frameprob, offsets


def _frame(log_frameprob, shift):
    """log p(x_t | z_t = j): ``log_frameprob`` plus its ``shift`` when pre-shifted."""
    log_frameprob = np.ascontiguousarray(log_frameprob, dtype=np.float64)
    if shift is None:
        return log_frameprob
    return np.ascontiguousarray(log_frameprob + shift[:, None])


def _probabilities(log_transmats, transmats, buffers):
    """The transition probabilities the kernels' plain-arithmetic sums use:
    ``transmats`` when given (computed with their logarithms), else exp(log_transmats)."""
    if transmats is not None:
        return transmats
    out = work_array(buffers, "varying_transmats", log_transmats.shape)
    with np.errstate(under="ignore"):
        return np.exp(log_transmats, out=out)


def _varying_forward_backward_offsets(
    log_startprob,
    log_transmats,
    log_frameprob,
    offsets,
    shift=None,
    buffers=None,
    transmats=None,
    scaled=True,
):
    """:func:`hmm_varying_forward_backward` on validated arrays (``shift``: the
    rows of ``log_frameprob`` come shifted by it; ``buffers`` hold work arrays;
    ``transmats``: exp(log_transmats), when the caller has it; ``scaled``:
    try the kernel's scaled path first, False for the log-space recursion
    alone, the tests' and benchmarks' reference)."""
    log_frame = _frame(log_frameprob, shift)
    n_samples, n_states = log_frame.shape
    offsets = np.ascontiguousarray(offsets, dtype=np.intp)
    posteriors = np.empty((n_samples, n_states))
    pairs = np.empty((n_samples, n_states, n_states))
    log_predictive = np.empty(n_samples)
    sequence_log_likelihood = np.empty(len(offsets) - 1)
    _kernel.varying_forward_backward(
        np.ascontiguousarray(log_startprob, dtype=np.float64),
        log_transmats,
        _probabilities(log_transmats, transmats, buffers),
        log_frame,
        offsets,
        work_array(buffers, "varying_alpha", (n_samples, n_states)),
        work_array(buffers, "varying_beta", (n_samples, n_states)),
        posteriors,
        pairs,
        log_predictive,
        sequence_log_likelihood,
        scaled,
    )
    return HMMVaryingForwardBackwardResult(
        float(sequence_log_likelihood.sum()),
        posteriors,
        pairs,
        posteriors[offsets[:-1]].sum(axis=0),
        sequence_log_likelihood,
        log_predictive,
    )


def _varying_smoothing_given_end(
    log_start, log_transmats, transmats, log_frameprob, end_state, continued
):
    """Forward-backward over one chunk of a sequence given the state of its last row.

    The exact step of the streams' forward-only smoother with a transition
    matrix per row (:class:`~skseq.hmm._input_driven.InputDrivenTransitions`):
    the smoothed expectations of all rows so far given z_T = ``end_state``.
    ``continued``: ``log_start`` is the log filtered distribution of the row
    before the chunk (of the same sequence; it then enters as a row of its own
    that emits nothing), else the log start probabilities.  The last row's
    emissions become the indicator of ``end_state`` (its density is a
    constant given z_T), so the kernel's posteriors are those given z_T.

    Returns ``(log_joint, posteriors, pair_posteriors, before)``: log p(x of
    the chunk, z_T = end_state | earlier rows); p(z_s | ., z_T) of the chunk's
    rows (n_samples, K) and the pair posteriors of the steps into them
    (n_samples, K, K; into the first row, from the row before when
    ``continued``, else zero); ``before`` (K,) p(z of the row before | ., z_T)
    (None unless ``continued``); not to be used when the chunk cannot end
    in ``end_state`` (``log_joint`` -inf).
    """
    frame = np.array(log_frameprob, dtype=np.float64)
    frame[-1] = -np.inf
    frame[-1, end_state] = 0.0
    result, before = _continued_forward_backward(
        log_start, log_transmats, transmats, frame, continued
    )
    log_joint = result.log_likelihood + log_frameprob[-1, end_state]
    return log_joint, result.posteriors, result.pair_posteriors, before


def _continued_rows(log_transmats, transmats, log_frameprob):
    """The rows of a chunk that continues a sequence, after a row that stands
    for the one before the chunk: it emits nothing (log density 0), so a
    recursion started from that row's log filtered distribution runs on."""
    frame = np.empty((log_frameprob.shape[0] + 1, log_frameprob.shape[1]))
    frame[0] = 0.0
    frame[1:] = log_frameprob
    return (
        np.concatenate([log_transmats[:1], log_transmats]),
        np.concatenate([transmats[:1], transmats]),
        frame,
    )


def _continued_forward_backward(log_start, log_transmats, transmats, log_frameprob, continued):
    """``(result, before)``: forward-backward over the rows of one chunk of a
    sequence (``result`` their posteriors and pair posteriors, the pair into
    the first row from the row before when ``continued``) and ``before``, the
    posterior of the row before the chunk (None unless ``continued``), whose
    log filtered distribution ``log_start`` then is (else the log start
    probabilities)."""
    if continued:
        log_transmats, transmats, log_frameprob = _continued_rows(
            log_transmats, transmats, log_frameprob
        )
    result = _varying_forward_backward_offsets(
        np.ascontiguousarray(log_start, dtype=np.float64),
        log_transmats,
        np.ascontiguousarray(log_frameprob),
        np.array([0, log_frameprob.shape[0]], dtype=np.intp),
        transmats=transmats,
    )
    if not continued:
        return result, None
    rows = result._replace(
        posteriors=result.posteriors[1:], pair_posteriors=result.pair_posteriors[1:]
    )
    return rows, result.posteriors[0]


def _varying_chunked_forward(log_startprob, n_rows, chunk_rows, chunk_terms, on_chunk=None):
    """The log-likelihood of one long sequence in O(chunk_rows K^2) memory: the
    forward kernel over chunks of ``chunk_rows`` rows, each continuing from the
    exact log filter of the row before (``chunk_terms`` as in
    :func:`_varying_checkpointed_forward_backward`; ``on_chunk(start, stop,
    log_predictive)``, when given, sees each chunk's log predictive densities).
    """
    checkpoints = []
    log_likelihood = _varying_chunk_filters(
        log_startprob, n_rows, chunk_rows, chunk_terms, checkpoints, on_chunk
    )
    return log_likelihood


def _varying_chunk_filters(log_startprob, n_rows, chunk_rows, chunk_terms, checkpoints, on_chunk):
    """The forward pass over the chunks of one sequence: appends to
    ``checkpoints`` the log filter of the row before each chunk (None before
    the first) and returns the log-likelihood (-inf, stopping there, for rows
    of probability zero)."""
    log_filtered, log_likelihood = None, 0.0
    for start, stop in _chunk_bounds(n_rows, chunk_rows):
        log_transmats, transmats, log_frameprob = chunk_terms(start, stop)
        if log_filtered is None:
            log_start = log_startprob
        else:
            log_transmats, transmats, log_frameprob = _continued_rows(
                log_transmats, transmats, log_frameprob
            )
            log_start = log_filtered
        checkpoints.append(log_filtered)
        rows = np.array([0, log_frameprob.shape[0]], dtype=np.intp)
        log_filtered_rows, log_predictive, sequence_log_likelihood = _varying_log_filter(
            log_start, log_transmats, np.ascontiguousarray(log_frameprob), rows, transmats
        )
        log_likelihood += sequence_log_likelihood[0]
        if on_chunk is not None:
            on_chunk(start, stop, log_predictive[log_filtered is not None :])
        if log_likelihood == -np.inf:
            break
        log_filtered = log_filtered_rows[-1].copy()
    return log_likelihood


def _varying_checkpointed_forward_backward(log_startprob, n_rows, chunk_rows, chunk_terms, consume):
    """Forward-backward over one long sequence in O((n_rows / chunk_rows + chunk_rows) K^2) memory.

    The same scheme as the stationary chain's checkpointed E step
    (doc/user_guide/hmm.rst, "One long sequence in bounded memory"), on the
    kernels of a matrix per row: the forward pass keeps the exact log
    filtered distribution before each chunk of ``chunk_rows`` rows; the
    backward pass goes over the chunks last to first and runs forward-backward
    over each from its checkpoint (a row that emits nothing stands for the
    row before), its last row's emissions times the backward message of the
    rows after it, log beta(i) = log p(z = i | all rows) - log p(z = i | rows
    so far) of the next chunk's row before (up to a constant).
    ``chunk_terms(start, stop)`` gives ``(log_transmats, transmats,
    log_frameprob)`` of rows ``start:stop``; ``consume(start, stop,
    posteriors, pair_posteriors, log_transmats, transmats)`` gets each
    chunk's (the pair into its first row from the row before; zero at the
    sequence's first row), last chunk first, right after ``chunk_terms`` of
    the same chunk.

    Returns ``(log_likelihood, start_counts)``; for a sequence of probability
    zero, -inf, and zero posteriors and pair posteriors.
    """
    n_states = log_startprob.shape[0]
    bounds = _chunk_bounds(n_rows, chunk_rows)
    checkpoints = []
    log_likelihood = _varying_chunk_filters(
        log_startprob, n_rows, chunk_rows, chunk_terms, checkpoints, None
    )
    if log_likelihood == -np.inf:
        for start, stop in bounds[::-1]:
            log_transmats, transmats, _ = chunk_terms(start, stop)
            posteriors = np.zeros((stop - start, n_states))
            pairs = np.zeros((stop - start, n_states, n_states))
            consume(start, stop, posteriors, pairs, log_transmats, transmats)
        return -np.inf, np.zeros(n_states)
    log_beta = None
    start_counts = None
    for index in range(len(bounds) - 1, -1, -1):
        start, stop = bounds[index]
        log_transmats, transmats, log_frameprob = chunk_terms(start, stop)
        checkpoint = checkpoints[index]
        frame = np.array(log_frameprob, dtype=np.float64)
        if log_beta is not None:
            frame[-1] += log_beta
        continued = checkpoint is not None
        result, before = _continued_forward_backward(
            log_startprob if checkpoint is None else checkpoint,
            log_transmats,
            transmats,
            frame,
            continued,
        )
        consume(start, stop, result.posteriors, result.pair_posteriors, log_transmats, transmats)
        if continued:
            possible = checkpoint > -np.inf
            log_beta = np.full(n_states, -np.inf)
            with np.errstate(divide="ignore"):
                log_beta[possible] = np.log(before[possible]) - checkpoint[possible]
        else:
            start_counts = result.posteriors[0].copy()
    return float(log_likelihood), start_counts


def _varying_forward_offsets(
    log_startprob,
    log_transmats,
    log_frameprob,
    offsets,
    shift=None,
    buffers=None,
    transmats=None,
    scaled=True,
):
    """``(filtered, log_predictive, sequence_log_likelihood)`` on validated arrays
    (``scaled`` as in :func:`_varying_forward_backward_offsets`)."""
    log_filtered, log_predictive, sequence_log_likelihood = _varying_log_filter(
        log_startprob,
        log_transmats,
        _frame(log_frameprob, shift),
        offsets,
        _probabilities(log_transmats, transmats, buffers),
        scaled,
    )
    with np.errstate(under="ignore"):
        return np.exp(log_filtered), log_predictive, sequence_log_likelihood


def _varying_log_filter(log_startprob, log_transmats, log_frame, offsets, transmats, scaled=True):
    """``(log_filtered, log_predictive, sequence_log_likelihood)``: the forward
    kernel on validated, C-contiguous arrays (``transmats`` = exp(log_transmats))."""
    n_samples, n_states = log_frame.shape
    log_filtered = np.empty((n_samples, n_states))
    log_predictive = np.empty(n_samples)
    sequence_log_likelihood = np.empty(len(offsets) - 1)
    _kernel.varying_forward(
        np.ascontiguousarray(log_startprob, dtype=np.float64),
        log_transmats,
        transmats,
        log_frame,
        np.ascontiguousarray(offsets, dtype=np.intp),
        log_filtered,
        log_predictive,
        sequence_log_likelihood,
        scaled,
    )
    return log_filtered, log_predictive, sequence_log_likelihood


def _varying_viterbi_offsets(log_startprob, log_transmats, log_frameprob, offsets, buffers=None):
    """``(sequence_log_prob, states)`` on validated arrays."""
    log_frame = _frame(log_frameprob, None)
    n_samples, n_states = log_frame.shape
    states = np.empty(n_samples, dtype=np.intp)
    sequence_log_prob = np.empty(len(offsets) - 1)
    _kernel.varying_viterbi(
        np.ascontiguousarray(log_startprob, dtype=np.float64),
        log_transmats,
        log_frame,
        np.ascontiguousarray(offsets, dtype=np.intp),
        work_array(buffers, "varying_delta", (n_samples, n_states)),
        work_array(buffers, "varying_back", (n_samples, n_states), dtype=np.intp),
        states,
        sequence_log_prob,
    )
    return sequence_log_prob, states


def _sample_varying_states(startprob, transmats, uniforms):
    """A state path from uniform variates by inverse-CDF sampling with the
    transition matrix ``transmats[t]`` into row ``t`` (no checks)."""
    states = np.empty(len(uniforms), dtype=np.intp)
    _kernel.varying_sample_states(
        np.cumsum(startprob, dtype=np.float64),
        np.ascontiguousarray(np.cumsum(transmats, axis=2, dtype=np.float64)),
        np.ascontiguousarray(uniforms, dtype=np.float64),
        states,
    )
    return states


@masked_arrays_checked(hints=_LOG_FRAMEPROB_HINT)
def hmm_varying_forward_backward(log_startprob, log_transmats, log_frameprob, *, lengths=None):
    """Posteriors, pair posteriors and log-likelihood of an HMM with a transition matrix per row.

    Parameters
    ----------
    log_startprob : array-like of shape (n_states,)
        log p(z_1 = i).
    log_transmats : array-like of shape (n_samples, n_states, n_states)
        ``log_transmats[t, i, j]`` = log p(z_t = j | z_{t-1} = i) of the step
        into row ``t`` (e.g. :func:`input_driven_log_transmats`); the matrix
        of each sequence's first row is not used.
    log_frameprob : array-like of shape (n_samples, n_states)
        log p(x_t | z_t = j) of every row.
    lengths : array-like of int, optional
        Lengths of the concatenated sequences; one sequence if omitted.

    Returns
    -------
    HMMVaryingForwardBackwardResult
        ``log_likelihood``, ``posteriors``, ``pair_posteriors``,
        ``start_counts``, ``sequence_log_likelihood``, ``log_predictive``.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference import hmm_forward_backward, hmm_varying_forward_backward
    >>> log_start = np.log([0.5, 0.5])
    >>> log_a = np.log([[0.9, 0.1], [0.2, 0.8]])
    >>> log_frame = np.log([[0.9, 0.1], [0.8, 0.2], [0.1, 0.9]])
    >>> varying = hmm_varying_forward_backward(log_start, np.stack([log_a] * 3), log_frame)
    >>> fixed = hmm_forward_backward(log_start, log_a, log_frame)
    >>> bool(np.allclose(varying.posteriors, fixed.posteriors))
    True
    >>> bool(np.allclose(varying.pair_posteriors.sum(axis=0), fixed.transition_counts))
    True
    """
    log_startprob, log_transmats, log_frameprob, offsets = _check_varying(
        log_startprob, log_transmats, log_frameprob, lengths
    )
    return _varying_forward_backward_offsets(
        log_startprob, np.ascontiguousarray(log_transmats), log_frameprob, offsets
    )


class HMMVaryingForwardResult(NamedTuple):
    """What :func:`hmm_varying_forward` returns (the fields of
    :class:`~skseq.inference.HMMForwardResult`)."""

    log_likelihood: float
    filtered: np.ndarray
    sequence_log_likelihood: np.ndarray
    log_predictive: np.ndarray


@masked_arrays_checked(hints=_LOG_FRAMEPROB_HINT)
def hmm_varying_forward(log_startprob, log_transmats, log_frameprob, *, lengths=None):
    """Filtered state distributions p(z_t | x_1..x_t) with a transition matrix per row.

    Parameters are those of :func:`hmm_varying_forward_backward`.

    Returns
    -------
    HMMVaryingForwardResult
        ``log_likelihood``, ``filtered``, ``sequence_log_likelihood``,
        ``log_predictive``.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference import hmm_varying_forward
    >>> log_a = np.log([[[0.5, 0.5], [0.5, 0.5]], [[0.9, 0.1], [0.2, 0.8]]])
    >>> result = hmm_varying_forward(np.log([0.5, 0.5]), log_a,
    ...                              np.log([[0.9, 0.1], [0.1, 0.9]]))
    >>> result.filtered.round(3)
    array([[0.9  , 0.1  ],
           [0.352, 0.648]])
    """
    log_startprob, log_transmats, log_frameprob, offsets = _check_varying(
        log_startprob, log_transmats, log_frameprob, lengths
    )
    filtered, log_predictive, sequence_log_likelihood = _varying_forward_offsets(
        log_startprob, np.ascontiguousarray(log_transmats), log_frameprob, offsets
    )
    return HMMVaryingForwardResult(
        float(sequence_log_likelihood.sum()), filtered, sequence_log_likelihood, log_predictive
    )


@masked_arrays_checked(hints=_LOG_FRAMEPROB_HINT)
def hmm_varying_viterbi(log_startprob, log_transmats, log_frameprob, *, lengths=None):
    """Most likely state sequence of an HMM with a transition matrix per row.

    Parameters are those of :func:`hmm_varying_forward_backward`.

    Returns
    -------
    HMMViterbiResult
        ``log_prob`` (log p(x, z*) summed over sequences) and ``states``.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.inference import hmm_varying_viterbi
    >>> log_a = np.log([[[0.9, 0.1], [0.2, 0.8]]] * 3)
    >>> log_prob, states = hmm_varying_viterbi(np.log([0.5, 0.5]), log_a,
    ...                                        np.log([[0.9, 0.1], [0.8, 0.2], [0.1, 0.9]]))
    >>> states
    array([0, 0, 1])
    """
    log_startprob, log_transmats, log_frameprob, offsets = _check_varying(
        log_startprob, log_transmats, log_frameprob, lengths
    )
    sequence_log_prob, states = _varying_viterbi_offsets(
        log_startprob, np.ascontiguousarray(log_transmats), log_frameprob, offsets
    )
    return HMMViterbiResult(float(sequence_log_prob.sum()), states)
