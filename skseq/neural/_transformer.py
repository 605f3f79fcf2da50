"""Causal Transformer estimators: TransformerRegressor and TransformerClassifier."""


from .._validation import option_rule, optional
from ._docstrings import CLASSIFIER_NOTES, REGRESSOR_NOTES, fitted_attributes, training_parameters
from ._networks._layers import ACTIVATIONS
from ._networks._transformer import SinusoidalPositionalEncoding, transformer_layer
from ._supervised import SequenceNetworkClassifier, SequenceNetworkRegressor
from ._validation import NETWORK_PARAMETER_RULES, check_positive_int

__all__ = ["TransformerRegressor", "TransformerClassifier"]


_COMMON_PARAMETERS = (
    """\
    d_model : int, default=32
        Width of the residual stream; the input is projected from
        ``n_features`` to ``d_model`` channels.
    n_layers : int, default=2
        Number of Transformer layers (each an attention and an MLP
        sub-block).
    n_heads : int, default=4
        Attention heads per layer; must divide ``d_model`` (each head has
        ``d_model // n_heads`` channels).
    d_ff : int or None, default=None
        Width of the hidden layer of each MLP; None means ``4 * d_model``.
    activation : {"relu", "gelu"}, default="relu"
        Activation of the MLPs; "gelu" is the tanh form of GPT-2
        (``torch.nn.GELU(approximate="tanh")``)."""
    + "\n"
    + training_parameters(
        """\
    weight_decay : float, default=0.0
        Decoupled (AdamW) weight decay: each update also multiplies the weight
        matrices by ``1 - learning_rate_init * weight_decay``, outside the
        adaptive moments. Biases and norm gains are not decayed.
"""
    )
)

_COMMON_ATTRIBUTES = fitted_attributes(
    "sinusoidal positional encoding, Transformer layers (attention and MLP sub-blocks)"
)

_MODEL_NOTES = """\
    The input is projected to ``d_model`` channels and the sinusoidal
    positional encoding of Vaswani et al. is added.  Each of the
    ``n_layers`` layers then updates the residual stream ``h`` twice, with
    pre-norm residual sub-blocks: ``h += attention(rmsnorm(h))``, multi-head
    causal self-attention (every step attends to itself and the steps before
    it, so the output at step ``t`` depends on steps ``1..t`` only), then
    ``h += mlp(rmsnorm(h))``, a two-layer MLP applied at every step.  A final
    RMSNorm and a linear head read out.  Attention runs in the Cython kernel
    :func:`skseq.inference.causal_attention` (FlashAttention-style tiles:
    memory linear in the sequence length); gradients are computed by explicit
    backward passes and the weights trained with Adam on minibatches of
    sequences."""


class _TransformerArchitecture:
    """Hyperparameter rules and network factory shared by the two estimators.

    That ``n_heads`` divides ``d_model`` is checked where the heads are made
    (:class:`~skseq.neural._networks._transformer.CausalSelfAttention`).
    """

    _PARAMETER_RULES = {
        **NETWORK_PARAMETER_RULES,
        "n_heads": check_positive_int,
        "d_ff": optional(check_positive_int),
        "activation": option_rule(*ACTIVATIONS),
    }

    _network_layer = staticmethod(transformer_layer)

    def _network_options(self):
        return dict(
            # two residual updates a layer (attention, MLP), and the positions
            updates_per_layer=2,
            positional_encoding=SinusoidalPositionalEncoding("positions", self.d_model),
            n_heads=self.n_heads,
            d_ff=4 * self.d_model if self.d_ff is None else self.d_ff,
            activation=self.activation,
        )


class TransformerRegressor(_TransformerArchitecture, SequenceNetworkRegressor):
    def __init__(
        self,
        *,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=None,
        activation="relu",
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
        self.n_heads = n_heads
        self.d_ff = d_ff
        self.activation = activation
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


TransformerRegressor.__doc__ = f"""Causal Transformer network for sequence regression.

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
    TransformerClassifier : The same network with a softmax read-out.
    SelectiveSSMRegressor : A selective state-space network with the same interface.

    Notes
    -----
{REGRESSOR_NOTES}  Attention costs time quadratic in the sequence
    length (memory stays linear).

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.neural import TransformerRegressor

    Per-step targets: at every step, the value seen three steps earlier.

    >>> rng = np.random.RandomState(0)
    >>> X = rng.normal(size=(300, 16))          # 300 sequences of 16 steps
    >>> y = np.zeros_like(X)
    >>> y[:, 3:] = X[:, :-3]
    >>> model = TransformerRegressor(d_model=16, n_layers=1, n_heads=2,
    ...                              learning_rate_init=1e-2, max_iter=30,
    ...                              random_state=0).fit(X[:200], y[:200])
    >>> model.predict(X[200:202]).shape
    (2, 16)
    >>> model.score(X[200:], y[200:]) > 0.9     # R² on sequences not seen in fit
    True
    """


class TransformerClassifier(_TransformerArchitecture, SequenceNetworkClassifier):
    def __init__(
        self,
        *,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=None,
        activation="relu",
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
        self.n_heads = n_heads
        self.d_ff = d_ff
        self.activation = activation
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


TransformerClassifier.__doc__ = f"""Causal Transformer network for classification.

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
    TransformerRegressor : The same network with a squared-error read-out.
    SelectiveSSMClassifier : A selective state-space network with the same interface.

    Notes
    -----
{CLASSIFIER_NOTES}

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.neural import TransformerClassifier

    One label per sequence: whether its largest step comes before its
    smallest one, a question about order that attention answers by looking
    at every step.

    >>> rng = np.random.RandomState(0)
    >>> X = rng.normal(size=(600, 10))
    >>> y = np.where(X.argmax(axis=1) < X.argmin(axis=1), "max first", "min first")
    >>> model = TransformerClassifier(d_model=16, n_layers=2, n_heads=2,
    ...                               learning_rate_init=3e-3, max_iter=40,
    ...                               random_state=0).fit(X[:500], y[:500])
    >>> model.classes_
    array(['max first', 'min first'], dtype='<U9')
    >>> model.predict_proba(X[500:503]).shape
    (3, 2)
    >>> model.score(X[500:], y[500:]) > 0.8     # accuracy on unseen sequences
    True
    """
