"""RMS normalisation of the last axis and ReLU, with their gradients, for the network layers.

Private: the layers :class:`~skseq.neural._networks._layers.RMSNorm` and
:class:`~skseq.neural._networks._layers.ReLU` are the callers, and nothing
is checked that a network cannot get wrong.  The arithmetic runs in the
Cython kernel :mod:`skseq._kernels._layers` (see its docstring for the
formulas): RMS normalisation in one pass over the rows forward and one
backward, the residual sum of a pre-norm block fused into them, and ReLU in
place in one pass each way.
"""

import numpy as np

from .._buffers import pass_array
from .._kernels import load

_layers = load("_layers")

__all__ = ["rms_norm", "rms_norm_backward", "relu", "relu_backward"]


def _rows(array, dtype):
    """``array`` as C-contiguous rows of its last axis in ``dtype`` (a view if it is one)."""
    return np.ascontiguousarray(array, dtype=dtype).reshape(-1, array.shape[-1])


def rms_norm(x, gain, eps, *, update=None):
    """``gain * x / sqrt(mean(x**2, axis=-1) + eps)``, with ``x + update`` for ``x`` if given.

    Parameters
    ----------
    x : ndarray of shape (..., d)
    gain : ndarray of shape (d,)
    eps : float
    update : ndarray like ``x``, optional
        Added to ``x`` in the same pass (a residual block's output).

    Returns
    -------
    outputs : ndarray like ``x``
    total : ndarray like ``x``
        ``x + update`` (``x`` itself without ``update``): the input that was
        normalised, which :func:`rms_norm_backward` needs.
    inverse_rms : ndarray of shape ``x.shape[:-1]``
        ``1 / sqrt(mean(total**2) + eps)``, also for the backward pass.

    The arrays returned are :func:`~skseq._buffers.pass_array` s.

    Examples
    --------
    >>> import numpy as np
    >>> outputs, total, inverse_rms = rms_norm(np.array([[3.0, 4.0]]), np.ones(2), 0.0)
    >>> outputs.round(4), inverse_rms.round(4)
    (array([[0.8485, 1.1314]]), array([0.2828]))
    """
    dtype = np.result_type(x, gain)
    rows = _rows(x, dtype)
    outputs = pass_array(rows.shape, dtype)
    inverse_rms = pass_array(rows.shape[:1], dtype)
    added = update is not None
    # Without an update the kernel neither reads the update nor writes ``total``.
    total = pass_array(rows.shape, dtype) if added else rows
    _layers.rms_norm_forward(
        rows,
        _rows(update, dtype) if added else rows,
        _rows(gain, dtype)[0],
        eps,
        added,
        total,
        outputs,
        inverse_rms,
    )
    shape = np.shape(x)
    return outputs.reshape(shape), total.reshape(shape), inverse_rms.reshape(shape[:-1])


def rms_norm_backward(grad_outputs, total, inverse_rms, gain, *, grad_inputs=None):
    """The gradients of :func:`rms_norm` with respect to its (summed) input and its gain.

    Parameters
    ----------
    grad_outputs : ndarray of shape (..., d)
    total, inverse_rms : ndarray
        As :func:`rms_norm` returned them.
    gain : ndarray of shape (d,)
    grad_inputs : C-contiguous ndarray like ``grad_outputs``, optional
        The input gradient is added into it (the residual stream's gradient,
        which is also the gradient of ``update``); otherwise a fresh array.

    Returns
    -------
    grad_inputs : ndarray like ``grad_outputs``
    grad_gain : ndarray of shape (d,)

    Examples
    --------
    >>> import numpy as np
    >>> x, gain = np.array([[3.0, 4.0]]), np.ones(2)
    >>> _, total, inverse_rms = rms_norm(x, gain, 0.0)
    >>> grad_x, grad_gain = rms_norm_backward(np.array([[1.0, 0.0]]), total, inverse_rms, gain)
    >>> grad_x.round(4), grad_gain.round(4)
    (array([[ 0.181 , -0.1358]]), array([0.8485, 0.    ]))
    """
    dtype = np.result_type(grad_outputs, total, gain)
    shape = np.shape(grad_outputs)
    accumulate = grad_inputs is not None
    if not accumulate:
        grad_inputs = np.empty(shape, dtype=dtype)
    elif not (grad_inputs.dtype == dtype and grad_inputs.flags.c_contiguous):
        raise ValueError("grad_inputs must be C-contiguous in the working dtype")
    grad_gain = np.zeros(shape[-1], dtype=np.float64)
    _layers.rms_norm_backward(
        _rows(grad_outputs, dtype),
        _rows(total, dtype),
        np.ascontiguousarray(inverse_rms, dtype=dtype).reshape(-1),
        _rows(gain, dtype)[0],
        accumulate,
        grad_inputs.reshape(-1, shape[-1]),
        grad_gain,
    )
    return grad_inputs, grad_gain.astype(dtype, copy=False)


def relu(x):
    """``max(x, 0)``, in place if ``x`` is a C-contiguous float32 or float64 array.

    Returns the result: ``x`` itself, or a fresh array for any other ``x``.
    A NaN stays NaN.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([-1.0, 2.0, np.nan])
    >>> relu(x) is x, x
    (True, array([ 0.,  2., nan]))
    """
    if _in_place(x):
        _layers.relu_forward(x.reshape(-1))
        return x
    return np.maximum(x, 0)


def relu_backward(grad_outputs, outputs):
    """``grad_outputs * (outputs > 0)``, in place in ``grad_outputs`` when it can be.

    ``outputs`` is what :func:`relu` returned.  In place (and returned) if
    both are C-contiguous arrays of one float dtype; otherwise a fresh array.

    Examples
    --------
    >>> import numpy as np
    >>> grad = np.array([1.0, 1.0, 1.0])
    >>> relu_backward(grad, np.array([0.0, 2.0, 0.0])) is grad, grad
    (True, array([0., 1., 0.]))
    """
    if _in_place(grad_outputs) and _in_place(outputs) and grad_outputs.dtype == outputs.dtype:
        if grad_outputs.shape != outputs.shape:
            raise ValueError("grad_outputs and outputs must have one shape")
        _layers.relu_backward(grad_outputs.reshape(-1), outputs.reshape(-1))
        return grad_outputs
    return grad_outputs * (outputs > 0)


def _in_place(array):
    """Whether the kernels can work on ``array`` in place."""
    return (
        isinstance(array, np.ndarray)
        and array.dtype in (np.float32, np.float64)
        and array.flags.c_contiguous
        and array.flags.writeable
    )
