"""The Elman recurrent network and its back-propagation through time, on plain arrays.

For every sequence ``b`` and step ``t`` (the user guide's :doc:`/user_guide/rnn`)::

    h[b, t] = tanh(W_x x[b, t] + W_h h[b, t - 1] + b),      h[b, -1] = h0[b]

with the weights laid out as PyTorch's ``torch.nn.RNN`` lays out
``weight_ih_l0`` (``W_x``) and ``weight_hh_l0`` (``W_h``).  The recurrence
runs in the Cython kernel :mod:`skseq._kernels._rnn`, BLAS products over the
batch at each step and an inline, vectorised ``tanh``.  The products that do
not have to run step by step (the input projection ``W_x x``, and ``dx``,
``dW_x``, ``dW_h``) run there too, on rows in cache, where BLAS does such
small products without packing them; elsewhere each is one matrix product
over all the steps (:func:`_stepwise` chooses).
"""

from functools import cache
from typing import NamedTuple

import numpy as np
from threadpoolctl import threadpool_info

from .._kernels import load
from ._checks import checked_array, leading_array, masked_arrays_checked, require_arrays

_rnn = load("_rnn")

# OpenBLAS's cores that have small-matrix kernels for ?gemm, which run a product
# of at most _SMALL_PRODUCT_WORK multiply-adds on its operands in place instead of
# packing them first (OpenBLAS's sgemm/dgemm small_kernel_permit for these cores).
_SMALL_KERNEL_CORES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})
_SMALL_PRODUCT_WORK = 100**3
# Below these batches the products over all the steps are faster (measured on a
# Zen 4 core with OpenBLAS's SkylakeX kernels, H = 64: the forward pass is even
# stepwise at batch 4 and faster from 8 on, the backward pass even at 8 to 16 and
# faster from 32 on).
_MIN_STEPWISE_BATCH = {"forward": 4, "backward": 16}

__all__ = ["elman_rnn", "elman_rnn_backward", "ElmanResult", "ElmanGradients"]

# The kernel hands row strides of length * n_hidden and length * n_inputs to BLAS as C ints.
_MAX_ROW_ELEMENTS = np.iinfo(np.int32).max


class ElmanResult(NamedTuple):
    """What :func:`elman_rnn` returns.

    Attributes
    ----------
    hidden : ndarray of shape (batch, length, n_hidden)
        The hidden state after every step.
    last_hidden : ndarray of shape (batch, n_hidden)
        The state after the last step (``h0``, or zeros, when ``length`` is 0).
    """

    hidden: np.ndarray
    last_hidden: np.ndarray


class ElmanGradients(NamedTuple):
    """What :func:`elman_rnn_backward` returns: one gradient per input, of its shape.

    ``dh0`` is the gradient with respect to the initial state, also when
    ``h0`` was None (the zero state).
    """

    dx: np.ndarray
    dW_x: np.ndarray
    dW_h: np.ndarray
    db: np.ndarray
    dh0: np.ndarray


@cache
def _blas_has_small_kernels():
    """Whether every OpenBLAS loaded runs a core with small-matrix kernels (threadpoolctl)."""
    cores = [
        str(info.get("architecture", "")).lower()
        for info in threadpool_info()
        if info.get("internal_api") == "openblas"
    ]
    return bool(cores) and all(core in _SMALL_KERNEL_CORES for core in cores)


def _stepwise(batch, n_inputs, n_hidden, *, backward):
    """Whether the kernels compute all their products over the batch step by step.

    Stepwise, each step's products work on rows that are in cache (see
    :mod:`skseq._kernels._rnn`), which pays where BLAS runs them without packing
    them: OpenBLAS's small-matrix kernels, for products up to their size limit.
    Otherwise the input projection, and ``dx``, ``dW_x`` and ``dW_h``, are one
    product over all the steps each.
    """
    if batch * n_hidden * max(n_inputs, n_hidden) > _SMALL_PRODUCT_WORK:
        return False
    if batch < _MIN_STEPWISE_BATCH["backward" if backward else "forward"]:
        return False
    return _blas_has_small_kernels()


def _check_inputs(x, W_x, W_h, b, h0):
    """Validate and convert the inputs to C-contiguous arrays of x's dtype."""
    require_arrays(x=x, W_x=W_x, W_h=W_h, b=b)
    x, dtype = leading_array("x", x, ("batch", "length", "n_inputs"))
    batch, length, n_inputs = x.shape
    W_h = np.asarray(W_h)
    if W_h.ndim != 2 or W_h.shape[0] != W_h.shape[1] or W_h.shape[0] == 0:
        raise ValueError(
            f"W_h must be a non-empty square matrix of shape (n_hidden, n_hidden), got {W_h.shape}."
        )
    W_h = checked_array("W_h", W_h, dtype)
    n_hidden = W_h.shape[0]
    if length * n_hidden > _MAX_ROW_ELEMENTS:
        raise ValueError(
            f"length * n_hidden = {length * n_hidden} exceeds {_MAX_ROW_ELEMENTS}, the largest "
            "row stride BLAS takes; split the sequences into shorter pieces (pass each "
            "piece's last_hidden as the next one's h0)."
        )
    if length * n_inputs > _MAX_ROW_ELEMENTS:
        raise ValueError(
            f"length * n_inputs = {length * n_inputs} exceeds {_MAX_ROW_ELEMENTS}, the largest "
            "row stride BLAS takes; split the sequences into shorter pieces (pass each "
            "piece's last_hidden as the next one's h0)."
        )
    W_x = checked_array("W_x", W_x, dtype, (n_hidden, n_inputs))
    b = checked_array("b", b, dtype, (n_hidden,))
    if h0 is not None:
        h0 = checked_array("h0", h0, dtype, (batch, n_hidden))
    return x, W_x, W_h, b, h0


def _run_forward(x, W_x, W_h, b, h0):
    """Hidden states of validated inputs."""
    batch, length, n_inputs = x.shape
    n_hidden = W_h.shape[0]
    hidden = np.empty((batch, length, n_hidden), dtype=x.dtype)
    if hidden.size == 0:
        return hidden
    stepwise = _stepwise(batch, n_inputs, n_hidden, backward=False)
    if not stepwise:
        np.matmul(x.reshape(batch * length, n_inputs), W_x.T, out=hidden.reshape(-1, n_hidden))
    # The kernel takes the weights transposed (see its docstring).
    _rnn.forward(
        x,
        np.ascontiguousarray(W_x.T),
        np.ascontiguousarray(W_h.T),
        b,
        h0 if h0 is not None else W_h,
        h0 is not None,
        stepwise,
        hidden,
    )
    return hidden


def _last_hidden(hidden, h0, batch, n_hidden, dtype):
    if hidden.shape[1] > 0:
        return hidden[:, -1].copy()
    return h0.copy() if h0 is not None else np.zeros((batch, n_hidden), dtype=dtype)


@masked_arrays_checked()
def elman_rnn(x, W_x, W_h, b, h0=None):
    """Run the Elman (tanh) recurrence over a batch of sequences.

    ``h_t = tanh(W_x x_t + W_h h_{t-1} + b)`` for ``t = 0 .. length - 1``,
    starting from ``h_{-1} = h0``.

    Parameters
    ----------
    x : array-like of shape (batch, length, n_inputs)
        Input sequences.  Its dtype sets the working precision: float32 stays
        float32, anything else real is computed in float64; the other inputs
        are cast to that dtype.
    W_x : array-like of shape (n_hidden, n_inputs)
        Input weights (``torch.nn.RNN``'s ``weight_ih_l0``).
    W_h : array-like of shape (n_hidden, n_hidden)
        Recurrent weights (``weight_hh_l0``).
    b : array-like of shape (n_hidden,)
        Bias (torch's ``bias_ih_l0 + bias_hh_l0``).
    h0 : array-like of shape (batch, n_hidden), default=None
        Initial state; zeros if None.

    Returns
    -------
    ElmanResult
        ``(hidden, last_hidden)``: the states after every step, of shape
        (batch, length, n_hidden), and after the last one, of shape
        (batch, n_hidden), both of the working dtype.

    Raises
    ------
    ValueError
        If a shape does not match or an input contains NaN or infinity.
    TypeError
        If an input is complex or not numeric, or a required array is None.

    See Also
    --------
    elman_rnn_backward : Gradients of a loss through this function.

    Notes
    -----
    ``tanh`` is the kernel's own branch-free rational approximation, within
    2 ulp of the correctly rounded value.  The result of each sequence does
    not depend on the other sequences of the batch, up to the rounding of the
    BLAS products.

    Examples
    --------
    One hidden unit that adds half of its previous state to the input:

    >>> import numpy as np
    >>> from skseq.inference import elman_rnn
    >>> x = np.array([[[1.0], [0.0], [0.0]]])
    >>> hidden, last_hidden = elman_rnn(x, W_x=[[1.0]], W_h=[[0.5]], b=[0.0])
    >>> np.round(hidden[0, :, 0], 6)
    array([0.761594, 0.363399, 0.179726])
    >>> bool(np.isclose(hidden[0, 1, 0], np.tanh(0.5 * np.tanh(1.0))))
    True

    Three steps from a given state, in float32:

    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(2, 3, 4)).astype(np.float32)
    >>> result = elman_rnn(x, rng.normal(size=(5, 4)), 0.5 * np.eye(5), np.zeros(5),
    ...                    h0=np.ones((2, 5)))
    >>> result.hidden.shape, result.last_hidden.dtype
    ((2, 3, 5), dtype('float32'))
    """
    x, W_x, W_h, b, h0 = _check_inputs(x, W_x, W_h, b, h0)
    hidden = _run_forward(x, W_x, W_h, b, h0)
    batch, _, _ = x.shape
    return ElmanResult(hidden, _last_hidden(hidden, h0, batch, W_h.shape[0], x.dtype))


@masked_arrays_checked()
def elman_rnn_backward(d_hidden, x, W_x, W_h, b, h0=None, d_last_hidden=None, *, hidden=None):
    """Gradients of a loss through :func:`elman_rnn` (back-propagation through time).

    Given ``d_hidden = dL/dhidden`` (and optionally ``d_last_hidden =
    dL/dlast_hidden``), returns the gradient of ``L`` with respect to every
    input of ``elman_rnn(x, W_x, W_h, b, h0)``.  With ``a_t = (dL/dh_t) *
    (1 - h_t**2)``, the gradient with respect to the pre-activation at step
    ``t``, the recurrence runs backwards in time,
    ``dL/dh_{t-1} = d_hidden_{t-1} + W_h^T a_t``, and then
    ``dW_h = sum_t a_t h_{t-1}^T``, ``dW_x = sum_t a_t x_t^T``,
    ``db = sum_t a_t``, ``dx_t = W_x^T a_t``, ``dh0 = W_h^T a_0``.

    Parameters
    ----------
    d_hidden : array-like of shape (batch, length, n_hidden) or None
        Gradient of the loss with respect to ``hidden``; None means zeros
        (then pass ``d_last_hidden``).
    x, W_x, W_h, b, h0
        The arguments of the forward call; see :func:`elman_rnn`.
    d_last_hidden : array-like of shape (batch, n_hidden), default=None
        Gradient of the loss with respect to ``last_hidden``; none if None.
    hidden : array-like of shape (batch, length, n_hidden), default=None
        The ``hidden`` that :func:`elman_rnn` returned for these inputs, to
        save recomputing it.  It is trusted: other values give the gradients
        at another point.  None recomputes the forward pass.

    Returns
    -------
    ElmanGradients
        ``(dx, dW_x, dW_h, db, dh0)``, each of the shape of its input
        (``dh0`` of shape (batch, n_hidden) also when ``h0`` is None) and of
        the working dtype (that of ``x``).

    Raises
    ------
    ValueError
        If a shape does not match or an input contains NaN or infinity.
    TypeError
        If an input is complex or not numeric, or a required array is None.

    See Also
    --------
    elman_rnn : The forward recurrence.

    Notes
    -----
    Besides the outputs, the pass holds one array of the size of ``hidden``
    (the pre-activation gradients), plus ``hidden`` itself when it is
    recomputed.

    Examples
    --------
    For one unit with ``W_h = 0`` each step is ``h_t = tanh(w x_t)``, so the
    gradient of ``sum(hidden)`` with respect to ``w`` is
    ``sum_t (1 - h_t**2) x_t``:

    >>> import numpy as np
    >>> from skseq.inference import elman_rnn_backward
    >>> x = np.array([[[1.0], [2.0]]])
    >>> grads = elman_rnn_backward(np.ones((1, 2, 1)), x, [[0.5]], [[0.0]], [0.0])
    >>> bool(np.isclose(grads.dW_x[0, 0], (1 - np.tanh(0.5) ** 2) + 2 * (1 - np.tanh(1.0) ** 2)))
    True
    >>> dx, dW_x, dW_h, db, dh0 = grads
    >>> dh0
    array([[0.]])
    """
    x, W_x, W_h, b, h0 = _check_inputs(x, W_x, W_h, b, h0)
    dtype = x.dtype
    batch, length, n_inputs = x.shape
    n_hidden = W_h.shape[0]
    state_shape = (batch, length, n_hidden)
    if d_hidden is None and d_last_hidden is None:
        raise ValueError("Pass d_hidden, d_last_hidden or both: there is no gradient to propagate.")
    if d_hidden is None:
        d_hidden = np.zeros(state_shape, dtype=dtype)
    else:
        d_hidden = checked_array("d_hidden", d_hidden, dtype, state_shape)
    if d_last_hidden is not None:
        d_last_hidden = checked_array("d_last_hidden", d_last_hidden, dtype, (batch, n_hidden))
    if hidden is None:
        hidden = _run_forward(x, W_x, W_h, b, h0)
    else:
        hidden = checked_array("hidden", hidden, dtype, state_shape)

    dW_h = np.zeros((n_hidden, n_hidden), dtype=dtype)
    if length == 0 or batch == 0:
        dh0 = np.zeros((batch, n_hidden), dtype=dtype)
        if d_last_hidden is not None:
            dh0 += d_last_hidden  # last_hidden is h0 itself
        return ElmanGradients(
            np.zeros(x.shape, dtype=dtype),
            np.zeros(W_x.shape, dtype=dtype),
            dW_h,
            np.zeros(n_hidden, dtype=dtype),
            dh0,
        )
    # The kernel carries dL/dh from step to step in dh0, starting from d_last_hidden.
    if d_last_hidden is not None:
        dh0 = np.array(d_last_hidden, dtype=dtype, order="C", copy=True)
    else:
        dh0 = np.zeros((batch, n_hidden), dtype=dtype)
    dx = np.empty(x.shape, dtype=dtype)
    dW_x = np.zeros(W_x.shape, dtype=dtype)
    db = np.zeros(n_hidden, dtype=np.float64)
    stepwise = _stepwise(batch, n_inputs, n_hidden, backward=True)
    # The pre-activation gradients: of the current step only when stepwise, else of all.
    grad = np.empty((batch, 1 if stepwise else length, n_hidden), dtype=dtype)
    _rnn.backward(
        d_hidden,
        hidden,
        x,
        W_x,
        W_h,
        h0 if h0 is not None else W_h,
        h0 is not None,
        stepwise,
        grad,
        dx,
        dW_x,
        dW_h,
        db,
        dh0,
    )
    if not stepwise:
        _products_over_all_steps(grad, hidden, x, W_x, h0, dx, dW_x, dW_h)
    return ElmanGradients(dx, dW_x, dW_h, db.astype(dtype), dh0)


def _products_over_all_steps(grad, hidden, x, W_x, h0, dx, dW_x, dW_h):
    """dx, dW_x and dW_h from the pre-activation gradients of every step, in place.

    ``dW_h = sum_b sum_t a[b, t] h[b, t - 1]^T`` is one product of the
    gradients and the states one row apart in the flattened (batch * length,
    H) arrays, with the first step of every sequence zeroed in ``grad`` (a
    scratch array) for it: there the row before is the last state of the
    previous sequence, and the term is ``a[b, 0] h0[b]^T``, added after.
    """
    batch, length, n_hidden = grad.shape
    rows, n_inputs = batch * length, x.shape[2]
    flat_grad = grad.reshape(rows, n_hidden)
    np.matmul(flat_grad, W_x, out=dx.reshape(rows, n_inputs))
    np.matmul(flat_grad.T, x.reshape(rows, n_inputs), out=dW_x)
    first = grad[:, 0].copy()
    grad[:, 0] = 0
    np.matmul(flat_grad[1:].T, hidden.reshape(rows, n_hidden)[:-1], out=dW_h)
    if h0 is not None:
        dW_h += first.T @ h0
