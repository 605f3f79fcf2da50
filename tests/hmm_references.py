"""Reference computations for the HMM tests: enumeration of every state path,
log-space forward-backward in numpy, hypothesis strategies for hard models, and
the conditional Gaussian of a row's missing entries."""

import itertools

import numpy as np
from hypothesis import strategies as st
from scipy.special import logsumexp


def brute_force(log_start, log_trans, log_frame):
    """Enumerate all K^T paths: joint log-probability of each."""
    n_samples, n_states = log_frame.shape
    paths = np.array(list(itertools.product(range(n_states), repeat=n_samples)))
    log_joint = log_start[paths[:, 0]] + log_frame[0, paths[:, 0]]
    for t in range(1, n_samples):
        log_joint = log_joint + log_trans[paths[:, t - 1], paths[:, t]] + log_frame[t, paths[:, t]]
    return paths, log_joint


def brute_force_posteriors(log_start, log_trans, log_frame, known_states=None):
    """Log-likelihood, posteriors, expected transitions, paths and their log
    joints by enumeration; with ``known_states`` (-1: unknown), over the paths
    through the known states only (the likelihood is then log p(X, labels))."""
    paths, log_joint = brute_force(log_start, log_trans, log_frame)
    if known_states is not None:
        labelled = known_states >= 0
        through = np.all(paths[:, labelled] == known_states[labelled], axis=1)
        paths, log_joint = paths[through], log_joint[through]
    n_samples, n_states = log_frame.shape
    log_likelihood = logsumexp(log_joint)
    weights = np.exp(log_joint - log_likelihood)
    posteriors = np.zeros((n_samples, n_states))
    counts = np.zeros((n_states, n_states))
    for t in range(n_samples):
        np.add.at(posteriors[t], paths[:, t], weights)
        if t + 1 < n_samples:
            np.add.at(counts, (paths[:, t], paths[:, t + 1]), weights)
    return log_likelihood, posteriors, counts, paths, log_joint


def left_right_underflow_frames():
    """log start, log transmat and log-emissions of a left-right model whose
    state 1 falls to e^-1600 relative to state 0, then is the only possible
    state: the scaled recursion loses it, a log-space redo is exact."""
    log_start = np.log([0.5, 0.5])
    with np.errstate(divide="ignore"):
        log_trans = np.log([[1.0, 0.0], [0.1, 0.9]])
    log_frame = np.zeros((5, 2))
    log_frame[:4, 1] = -400.0
    log_frame[4] = [-np.inf, 0.0]
    return log_start, log_trans, log_frame


def conditional_moments_by_hand(x, mean, covariance):
    """E[x | x_o] and E[x x^T | x_o] of one row x whose NaN entries are missing,
    by the textbook formulas of the conditional Gaussian."""
    o, m = ~np.isnan(x), np.isnan(x)
    expected = x.copy()
    gain = covariance[np.ix_(m, o)] @ np.linalg.inv(covariance[np.ix_(o, o)])
    expected[m] = mean[m] + gain @ (x[o] - mean[o])
    second = np.outer(expected, expected)
    second[np.ix_(m, m)] += covariance[np.ix_(m, m)] - gain @ covariance[np.ix_(o, m)]
    return expected, second


# Offsets (nats below the row's best state) around where exp() leaves the
# normal range (-708.4) and underflows to zero (-745.1).
EDGES = np.array([-700.0, -708.0, -712.0, -725.0, -740.0, -745.0, -750.0, -800.0, -1500.0])


def hard_model(seed, n_states, n_rows, spread, p_edge, p_inf, p_zero, unreachable):
    """log start, log transmat and log-emissions of a model made to be hard."""
    rng = np.random.default_rng(seed)
    start = rng.dirichlet(np.ones(n_states))
    trans = rng.dirichlet(np.ones(n_states), size=n_states)
    trans[rng.random((n_states, n_states)) < p_zero] = 0.0
    start[rng.random(n_states) < p_zero] = 0.0
    if unreachable and n_states > 2:
        # The last state: never at the start and entered from no state but itself.
        trans[:-1, -1] = 0.0
        start[-1] = 0.0
    if rng.random() < 0.3:
        trans[trans > 0] *= rng.choice([1.0, 1e-30, 1e-300], size=np.count_nonzero(trans > 0))
    for row in trans:
        if not row.any():
            row[rng.integers(max(n_states - 1, 1))] = 1.0
    if not start.any():
        start[0] = 1.0
    start /= start.sum()
    trans /= trans.sum(axis=1, keepdims=True)
    log_frame = rng.uniform(-spread, 0.0, (n_rows, n_states))
    edge = rng.random((n_rows, n_states)) < p_edge
    log_frame[edge] = rng.choice(EDGES, size=np.count_nonzero(edge))
    log_frame[rng.random((n_rows, n_states)) < p_inf] = -np.inf
    log_frame += rng.uniform(-2000.0, 2000.0, (n_rows, 1))  # any level, row by row
    with np.errstate(divide="ignore"):
        return np.log(start), np.log(trans), log_frame


@st.composite
def hard_models(draw, max_states, min_rows, max_rows, max_paths=None):
    n_states = draw(st.integers(1, max_states))
    longest = max_rows
    while max_paths is not None and n_states**longest > max_paths:
        longest -= 1
    return hard_model(
        draw(st.integers(0, 2**32 - 1)),
        n_states,
        draw(st.integers(min(min_rows, longest), longest)),
        draw(st.sampled_from([1.0, 50.0, 700.0, 2000.0])),
        draw(st.sampled_from([0.0, 0.2, 0.5])),
        draw(st.sampled_from([0.0, 0.1])),
        draw(st.sampled_from([0.0, 0.3, 0.6])),
        draw(st.booleans()),
    )


def normalised_log_space_reference(log_start, log_trans, log_frame):
    """Forward-backward in log space with numpy, each row's message normalised
    (logsumexp 0): its rounding does not grow with the log-likelihood, unlike
    inference/test_inference_hmm.log_space_reference, so it serves long sequences."""
    n_rows, n_states = log_frame.shape
    log_alpha = np.empty((n_rows, n_states))
    log_scale = np.empty(n_rows)
    previous = log_start
    for t in range(n_rows):
        if t:
            previous = logsumexp(log_alpha[t - 1][:, None] + log_trans, axis=0)
        row = previous + log_frame[t]
        log_scale[t] = logsumexp(row)
        if log_scale[t] == -np.inf:
            return -np.inf, None, None
        log_alpha[t] = row - log_scale[t]
    log_beta = np.zeros((n_rows, n_states))
    for t in range(n_rows - 2, -1, -1):
        following = log_frame[t + 1] + log_beta[t + 1] - log_scale[t + 1]
        log_beta[t] = logsumexp(log_trans + following, axis=1)
    posteriors = np.exp(log_alpha + log_beta)
    counts = np.zeros((n_states, n_states))
    for t in range(n_rows - 1):
        following = log_frame[t + 1] + log_beta[t + 1] - log_scale[t + 1]
        counts += np.exp(log_alpha[t][:, None] + log_trans + following)
    return log_scale.sum(), posteriors, counts


def rounding_scale(log_frame):
    """The magnitude of the log-emissions summed over rows: any method rounds
    the log-likelihood to about 1e-16 of it (absolute)."""
    finite = np.where(np.isfinite(log_frame), np.abs(log_frame), 0.0)
    return float(finite.max(axis=1).sum()) + log_frame.shape[0]


def assert_log_likelihood(actual, expected, log_frame):
    if expected == -np.inf:
        assert actual == -np.inf
        return
    np.testing.assert_allclose(actual, expected, rtol=1e-9, atol=1e-13 * rounding_scale(log_frame))


def left_right(n_states, stay=0.5):
    transmat = np.zeros((n_states, n_states))
    for i in range(n_states):
        transmat[i, i] = stay
        transmat[i, min(i + 1, n_states - 1)] += 1 - stay
    startprob = np.zeros(n_states)
    startprob[0] = 1.0
    return startprob, transmat


def stream_statistics(model, X, controls, cuts):
    """The stream engine's E step over the batches X[a:b] of one sequence
    (at fixed parameters): summed statistics, log-likelihood, the last message."""
    total, log_likelihood, carried = None, 0.0, None
    for a, b in zip(cuts[:-1], cuts[1:]):
        model._stream = carried
        with model._given_controls(controls[a:b]):
            design, offsets = model._validate_stream_batch(
                X[a:b], None, None, None, first_call=False, continues=carried is not None
            )
            added, part, carried = model._stream_estep(design, offsets, carried)
        total = added if total is None else total + added
        log_likelihood += part
    return total, log_likelihood, carried
