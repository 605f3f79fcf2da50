"""Elman recurrent network estimators: ElmanRNNRegressor and ElmanRNNClassifier."""

import numpy as np

from .._parallel import single_threaded_blas
from ._docstrings import CLASSIFIER_NOTES, REGRESSOR_NOTES, fitted_attributes, training_parameters
from ._networks._elman_rnn import elman_layer, jacobian_norms
from ._supervised import SequenceNetworkClassifier, SequenceNetworkRegressor
from ._trainer import PREDICTION_CHUNK_POSITIONS
from ._validation import NETWORK_PARAMETER_RULES, real_rule

__all__ = ["ElmanRNNRegressor", "ElmanRNNClassifier"]


_COMMON_PARAMETERS = """\
    d_model : int, default=32
        Width of the residual stream and of every layer's hidden state; the
        input is projected from ``n_features`` to ``d_model`` channels.
    n_layers : int, default=2
        Number of residual Elman blocks.
    init_spectral_radius : float, default=1.0
        Spectral radius of each layer's recurrent matrix ``W_h`` at
        initialisation: ``W_h`` starts as a random orthogonal matrix times
        this number, so all its eigenvalues have this modulus.  Below 1
        gradients through time vanish faster, above 1 the linearised
        recurrence stretches the state (see :meth:`gradient_norms`).
"""

_COMMON_PARAMETERS += training_parameters(
    """\
    weight_decay : float, default=0.0
        Decoupled (AdamW) weight decay: each update also multiplies the
        projection matrices and the recurrences' ``W_x`` and ``W_h`` by
        ``1 - learning_rate_init * weight_decay``, outside the adaptive
        moments (so it also shrinks the spectral radius of ``W_h``).
        Biases and norm gains are not decayed.
"""
)

_COMMON_ATTRIBUTES = (
    fitted_attributes("Elman blocks")
    + """
    spectral_radius_ : ndarray of shape (n_layers,)
        Largest modulus of the eigenvalues of each layer's ``W_h``, for the
        current weights."""
)

_MODEL_NOTES = """\
    Each Elman block runs the recurrence ``h_t = tanh(W_x x_t + W_h h_{t-1} +
    b)`` (``h_{-1} = 0``) over the normalised residual stream ``x``, with a
    hidden state of ``d_model`` numbers, and adds a linear projection of
    ``h_t`` to the residual stream.  The recurrence runs in the Cython kernel
    :func:`skseq.inference.rnn.elman_rnn`; its gradient is computed by
    back-propagation through time (:func:`skseq.inference.rnn.elman_rnn_backward`)
    and clipped by global norm (``max_grad_norm``), and the weights are
    trained with Adam on minibatches of sequences."""


class _ElmanRNNArchitecture:
    """Hyperparameter rules, network factory and recurrence diagnostics of the two estimators."""

    _PARAMETER_RULES = {
        **NETWORK_PARAMETER_RULES,
        "init_spectral_radius": real_rule(low=0, low_open=True),
    }

    _network_layer = staticmethod(elman_layer)

    def _network_options(self):
        return dict(init_spectral_radius=self.init_spectral_radius)

    def _recurrent_weights(self):
        return [self.parameters_[f"{block.name}.W_h"] for block in self.network_.blocks]

    @property
    def spectral_radius_(self):
        """Largest eigenvalue modulus of each layer's ``W_h``, shape (n_layers,)."""
        if not hasattr(self, "parameters_"):
            raise AttributeError(
                f"This {type(self).__name__} instance is not fitted yet: spectral_radius_ "
                "exists after fit or partial_fit."
            )
        return np.array(
            [
                np.max(np.abs(np.linalg.eigvals(W_h.astype(np.float64))))
                for W_h in self._recurrent_weights()
            ]
        )

    def gradient_norms(self, X):
        """Norms of the Jacobians ``dh_T / dh_t`` of every layer's recurrence.

        For each sequence of ``X`` and each Elman layer, the spectral norm of
        the Jacobian of the layer's last hidden state with respect to its
        hidden state ``T - t`` steps earlier, ``prod diag(1 - h_{k+1}**2)
        W_h`` over those steps: how much of a gradient arriving at the last
        step reaches step ``t`` through the layer's recurrence.  It decays
        geometrically (vanishing gradients) when the spectral radius of
        ``W_h`` times the slopes of ``tanh`` is below one, and can grow
        (exploding gradients) above.  The hidden states are those of the
        fitted network on ``X``; the products are computed in float64, one
        ``d_model x d_model`` product and norm per sequence, layer and lag.

        Parameters
        ----------
        X : array-like of shape (n_sequences, seq_len) or (n_sequences, seq_len, n_features)

        Returns
        -------
        norms : ndarray of shape (n_sequences, n_layers, seq_len)
            ``norms[n, layer, k] = ||dh_T / dh_{T-k}||_2`` for lags
            ``k = T - t = 0, ..., seq_len - 1`` (so ``norms[..., 0] = 1``).
        """
        X = self._prepare_X(X)
        n_sequences, seq_len, _ = X.shape
        recurrent_weights = self._recurrent_weights()
        chunk = max(1, PREDICTION_CHUNK_POSITIONS // seq_len)
        norms = np.empty((n_sequences, len(recurrent_weights), seq_len))
        with single_threaded_blas():
            for start in range(0, n_sequences, chunk):
                rows = slice(start, start + chunk)
                _, cache = self.network_.forward(self.parameters_, X[rows])
                _, _, block_caches, _, _ = cache
                for layer, ((_, block_cache), W_h) in enumerate(
                    zip(block_caches, recurrent_weights, strict=True)
                ):
                    _, hidden, _ = block_cache
                    norms[rows, layer] = jacobian_norms(hidden, W_h)
        return norms


class ElmanRNNRegressor(_ElmanRNNArchitecture, SequenceNetworkRegressor):
    def __init__(
        self,
        *,
        d_model=32,
        n_layers=2,
        init_spectral_radius=1.0,
        learning_rate_init=1e-3,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-8,
        weight_decay=0.0,
        batch_size=32,
        max_iter=200,
        shuffle=True,
        random_state=None,
        max_grad_norm=1.0,
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=10,
        tol=1e-4,
        verbose=0,
        warm_start=False,
        n_jobs=None,
        dtype="float32",
    ):
        self.d_model = d_model
        self.n_layers = n_layers
        self.init_spectral_radius = init_spectral_radius
        self.learning_rate_init = learning_rate_init
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.shuffle = shuffle
        self.random_state = random_state
        self.max_grad_norm = max_grad_norm
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.verbose = verbose
        self.warm_start = warm_start
        self.n_jobs = n_jobs
        self.dtype = dtype


ElmanRNNRegressor.__doc__ = f"""Elman recurrent network for sequence regression.

    Minimises half the mean squared error of one target vector per sequence
    (read out at its last step) or one per step.

{_MODEL_NOTES}

    Parameters
    ----------
{_COMMON_PARAMETERS}

    Attributes
    ----------
{_COMMON_ATTRIBUTES}

    See Also
    --------
    ElmanRNNClassifier : The same network with a softmax read-out.
    SelectiveSSMRegressor : A selective state-space network with the same interface.

    Notes
    -----
{REGRESSOR_NOTES}

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.neural import ElmanRNNRegressor

    Per-step targets: at every step, the scaled sum of the steps so far.

    >>> rng = np.random.RandomState(0)
    >>> X = rng.normal(size=(300, 16))          # 300 sequences of 16 steps
    >>> y = np.cumsum(X, axis=1) / np.sqrt(np.arange(1, 17))
    >>> model = ElmanRNNRegressor(d_model=8, n_layers=1, learning_rate_init=1e-2,
    ...                           max_iter=30, random_state=0).fit(X[:200], y[:200])
    >>> model.predict(X[200:202]).shape
    (2, 16)
    >>> model.score(X[200:], y[200:]) > 0.8     # R² on sequences not seen in fit
    True
    >>> model.spectral_radius_.shape            # one W_h per layer
    (1,)
    >>> model.gradient_norms(X[:5]).shape       # (sequences, layers, lags T - t)
    (5, 1, 16)
    """


class ElmanRNNClassifier(_ElmanRNNArchitecture, SequenceNetworkClassifier):
    def __init__(
        self,
        *,
        d_model=32,
        n_layers=2,
        init_spectral_radius=1.0,
        learning_rate_init=1e-3,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-8,
        weight_decay=0.0,
        batch_size=32,
        max_iter=200,
        shuffle=True,
        random_state=None,
        max_grad_norm=1.0,
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=10,
        tol=1e-4,
        verbose=0,
        warm_start=False,
        n_jobs=None,
        dtype="float32",
    ):
        self.d_model = d_model
        self.n_layers = n_layers
        self.init_spectral_radius = init_spectral_radius
        self.learning_rate_init = learning_rate_init
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.shuffle = shuffle
        self.random_state = random_state
        self.max_grad_norm = max_grad_norm
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.verbose = verbose
        self.warm_start = warm_start
        self.n_jobs = n_jobs
        self.dtype = dtype


ElmanRNNClassifier.__doc__ = f"""Elman recurrent network for classification.

    Minimises the cross-entropy of a softmax over ``classes_``, for one label
    per sequence (read out at its last step) or one per step.

{_MODEL_NOTES}

    Parameters
    ----------
{_COMMON_PARAMETERS}

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The labels, sorted.
{_COMMON_ATTRIBUTES}

    See Also
    --------
    ElmanRNNRegressor : The same network with a squared-error read-out.
    SelectiveSSMClassifier : A selective state-space network with the same interface.

    Notes
    -----
{CLASSIFIER_NOTES}

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.neural import ElmanRNNClassifier

    One label per sequence: whether its steps sum to more than zero.

    >>> rng = np.random.RandomState(0)
    >>> X = rng.normal(size=(500, 12))
    >>> y = np.where(X.sum(axis=1) > 0, "up", "down")
    >>> model = ElmanRNNClassifier(d_model=8, n_layers=1, learning_rate_init=1e-2,
    ...                            max_iter=30, random_state=0).fit(X[:400], y[:400])
    >>> model.classes_
    array(['down', 'up'], dtype='<U4')
    >>> model.predict_proba(X[400:403]).shape
    (3, 2)
    >>> model.score(X[400:], y[400:]) > 0.8     # accuracy on unseen sequences
    True
    """
