"""The Elman block: a tanh recurrence of width ``d_model`` and an output projection.

For an input ``x`` of shape ``(batch, length, d_model)`` (the normalised
residual stream)::

    h_t = tanh(W_x x_t + W_h h_{t-1} + b),   h_{-1} = 0
    y_t = out_proj(h_t)

The recurrence runs in :func:`skseq.inference.rnn.elman_rnn`; its input
weights ``W_x`` are the block's input projection, so the block has no
separate one (two linear maps in a row are one).  The output projection is
kept: it lets the residual update be any linear read-out of the bounded state
``h_t`` in ``[-1, 1]^d_model`` and starts small (``1 / sqrt(n_layers)``), as
the Mamba block's does, so that a deep stack does not grow the residual
stream at initialisation.

``W_h`` starts as a random orthogonal matrix times ``init_spectral_radius``:
all its eigenvalues then have modulus ``init_spectral_radius`` and all its
singular values equal it, so the recurrence neither shrinks nor stretches
any direction of the state before the ``tanh``.  ``W_x`` is uniform in
``±1 / sqrt(d_model)`` (as ``torch.nn.RNN`` draws it) and ``b`` starts at 0.
Back-propagation through time, the Jacobian norms of ``jacobian_norms`` and
why the spectral radius sets their decay are in the user guide
(doc/user_guide/rnn.rst).
"""

import numpy as np

from ...inference.rnn import elman_rnn, elman_rnn_backward
from ._layers import Layer, Linear

__all__ = ["ElmanBlock", "elman_layer", "random_orthogonal", "jacobian_norms"]


def random_orthogonal(random_state, size):
    """A Haar-distributed random orthogonal matrix of shape (size, size), in float64.

    The Q factor of a Gaussian matrix, with the signs of its columns fixed by
    the diagonal of R so that the distribution is uniform (Mezzadri, 2007).
    """
    q, r = np.linalg.qr(random_state.normal(size=(size, size)))
    return q * np.where(np.diag(r) < 0, -1.0, 1.0)


class ElmanBlock(Layer):
    """One Elman recurrence with an output projection, without residual or norm.

    Parameters
    ----------
    name : str
    d_model : int
        Width of the residual stream and of the hidden state.
    init_spectral_radius : float
        Spectral radius of the initial (orthogonal) ``W_h``.
    out_init_scale : float, default=1.0
        Multiplies the initial range of ``out_proj``.

    Examples
    --------
    >>> import numpy as np
    >>> block = ElmanBlock("mixer", d_model=4, init_spectral_radius=0.9)
    >>> parameters = block.init_parameters(np.random.RandomState(0), np.float64)
    >>> sorted(parameters)
    ['mixer.W_h', 'mixer.W_x', 'mixer.b', 'mixer.out_proj.weight']
    >>> round(float(np.max(np.abs(np.linalg.eigvals(parameters["mixer.W_h"])))), 12)
    0.9
    >>> y, cache = block.forward(parameters, np.ones((2, 5, 4)))
    >>> y.shape
    (2, 5, 4)
    """

    def __init__(self, name, d_model, init_spectral_radius, *, out_init_scale=1.0):
        super().__init__(name)
        self.d_model = d_model
        self.init_spectral_radius = init_spectral_radius
        self.out_proj = Linear(
            self.key("out_proj"), d_model, d_model, bias=False, init_scale=out_init_scale
        )

    def init_parameters(self, random_state, dtype):
        bound = 1.0 / np.sqrt(self.d_model)
        parameters = {
            self.key("W_x"): random_state.uniform(
                -bound, bound, size=(self.d_model, self.d_model)
            ).astype(dtype),
            self.key("W_h"): (
                self.init_spectral_radius * random_orthogonal(random_state, self.d_model)
            ).astype(dtype),
            self.key("b"): np.zeros(self.d_model, dtype=dtype),
        }
        parameters.update(self.out_proj.init_parameters(random_state, dtype))
        return parameters

    def decayed_parameters(self):
        return [self.key("W_x"), self.key("W_h")] + self.out_proj.decayed_parameters()

    def _weights(self, parameters):
        return parameters[self.key("W_x")], parameters[self.key("W_h")], parameters[self.key("b")]

    def forward(self, parameters, inputs):
        hidden, _ = elman_rnn(inputs, *self._weights(parameters))
        outputs, out_cache = self.out_proj.forward(parameters, hidden)
        return outputs, (inputs, hidden, out_cache)

    def backward(self, parameters, grad_outputs, cache):
        inputs, hidden, out_cache = cache
        grad_hidden, grads = self.out_proj.backward(parameters, grad_outputs, out_cache)
        rnn_grads = elman_rnn_backward(
            grad_hidden, inputs, *self._weights(parameters), hidden=hidden
        )
        grads[self.key("W_x")] = rnn_grads.dW_x
        grads[self.key("W_h")] = rnn_grads.dW_h
        grads[self.key("b")] = rnn_grads.db
        return rnn_grads.dx, grads


def elman_layer(prefix, d_model, *, out_init_scale, init_spectral_radius):
    """One layer of the Elman RNN's network: the Elman block ``<prefix>.mixer``.

    The ``layer`` of :func:`~skseq.neural._networks._residual.make_network`
    (whose docstring builds an Elman network).
    """
    return ElmanBlock(
        f"{prefix}.mixer", d_model, init_spectral_radius, out_init_scale=out_init_scale
    )


def jacobian_norms(hidden, W_h):
    """Spectral norms of ``dh_{T-1} / dh_{T-1-k}`` for every lag ``k`` of a tanh recurrence.

    With ``h_s = tanh(p_s + W_h h_{s-1})`` the one-step Jacobian is
    ``dh_s / dh_{s-1} = diag(1 - h_s**2) W_h``, and the Jacobian over ``k``
    steps is the product of ``k`` of them, built here from the last step
    backwards, ``J_{k+1} = J_k diag(1 - h_{T-1-k}**2) W_h`` with ``J_0 = I``.
    Each product is rescaled by its largest entry and the scale kept as a
    logarithm, so that neither a vanishing nor an exploding product under- or
    overflows before its norm is taken.

    Parameters
    ----------
    hidden : ndarray of shape (n_sequences, length, n_hidden)
        The hidden states of the recurrence.
    W_h : ndarray of shape (n_hidden, n_hidden)

    Returns
    -------
    norms : ndarray of shape (n_sequences, length), float64
        ``norms[n, k] = ||dh_{T-1} / dh_{T-1-k}||_2`` for sequence ``n``
        (``norms[:, 0] = 1``).

    Examples
    --------
    A linear-looking recurrence (``h`` near 0, so ``tanh`` has slope 1) with
    ``W_h = 0.5 I`` halves the gradient at every step:

    >>> import numpy as np
    >>> np.round(jacobian_norms(np.zeros((1, 4, 2)), 0.5 * np.eye(2)), 6)
    array([[1.   , 0.5  , 0.25 , 0.125]])
    """
    hidden = np.asarray(hidden, dtype=np.float64)
    W_h = np.asarray(W_h, dtype=np.float64)
    n_sequences, length, n_hidden = hidden.shape
    slopes = 1.0 - hidden * hidden
    jacobian = np.broadcast_to(np.eye(n_hidden), (n_sequences, n_hidden, n_hidden)).copy()
    log_scale = np.zeros(n_sequences)
    log_norms = np.empty((n_sequences, length))
    log_norms[:, 0] = 0.0
    for lag in range(1, length):
        jacobian = (jacobian * slopes[:, length - lag, None, :]) @ W_h
        largest = np.abs(jacobian).max(axis=(1, 2))
        # An exactly zero product stays zero: its norm is 0 from here on.
        largest = np.where(largest > 0, largest, 1.0)
        jacobian /= largest[:, None, None]
        log_scale += np.log(largest)
        with np.errstate(divide="ignore"):
            log_norms[:, lag] = log_scale + np.log(np.linalg.norm(jacobian, ord=2, axis=(1, 2)))
    # Norms beyond float64's range round to 0 or inf, as a product computed exactly would.
    with np.errstate(over="ignore", under="ignore"):
        return np.exp(log_norms)
