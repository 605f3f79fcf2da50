"""Structured state-space (S4D) estimators: S4DRegressor and S4DClassifier."""


from .._validation import constrained, option_rule
from ._docstrings import CLASSIFIER_NOTES, REGRESSOR_NOTES, fitted_attributes, training_parameters
from ._networks._s4d import INITS, MAX_CONVOLUTION_BYTES, s4d_layer
from ._supervised import SequenceNetworkClassifier, SequenceNetworkRegressor
from ._validation import NETWORK_PARAMETER_RULES, int_rule

__all__ = ["S4DRegressor", "S4DClassifier"]


_ARCHITECTURE_PARAMETERS = """\
    d_model : int, default=32
        Width of the residual stream; the input is projected from
        ``n_features`` to ``d_model`` channels.
    n_layers : int, default=2
        Number of residual S4D blocks.
    d_state : int, default=64
        State size N of each channel's SSM; must be even (``N / 2`` complex
        modes in conjugate pairs).
    d_conv : int, default=4
        Taps of the causal depthwise convolution before the SSM.
    expand : int, default=2
        Channels inside a block: ``d_inner = expand * d_model``.
    init : {"lin", "real"}, default="lin"
        Initialisation of the state matrix: S4D-Lin, ``A_n = -1/2 + i π n``,
        or S4D-Real, ``A_n = -(n + 1)``, for ``n = 0 .. N / 2 - 1`` in every
        channel.
"""

_WEIGHT_DECAY = """\
    weight_decay : float, default=0.0
        Decoupled (AdamW) weight decay: each update also multiplies the
        projection matrices, convolution filters and the SSM's output map
        ``C`` by ``1 - learning_rate_init * weight_decay``, outside the
        adaptive moments. Biases, norm gains and the SSM's ``A``, step
        ``log_dt`` and ``D`` are not decayed.
"""

_COMMON_PARAMETERS = _ARCHITECTURE_PARAMETERS + training_parameters(_WEIGHT_DECAY)

_COMMON_ATTRIBUTES = fitted_attributes("S4D blocks")

_MODEL_NOTES = f"""\
    The network has the structure of :class:`SelectiveSSMRegressor`'s and
    differs from it only in the SSM, which here is linear and
    time-invariant: a comparison of the two isolates selectivity.  Each
    block maps the normalised residual stream through an input projection to
    ``x`` and a gate ``z`` (``expand * d_model`` channels each), a causal
    depthwise convolution and SiLU on ``x``, then convolves every channel of
    ``x`` with the kernel of a diagonal SSM with ``d_state / 2`` complex modes,
    discretised by zero-order hold with a learned step ``Δ = exp(log_dt)``:
    ``K_k = 2 Re Σ_n C_n (exp(Δ A_n) - 1) / A_n · exp(Δ A_n)^k``, plus the skip
    term ``D x``; the result is gated by ``silu(z)`` and projected back to
    ``d_model`` channels.  ``A_n = -exp(A_log_n) + i A_imag_n`` keeps a
    negative real part; ``log_dt`` starts log-uniform in [1e-3, 1e-1], ``C``
    standard complex normal, ``D`` at one.  The kernel comes from
    :func:`skseq.inference.s4d_kernel` and the convolution, by FFT, from
    :func:`skseq.inference.causal_convolution`; gradients are computed by
    explicit backward passes and the weights trained with Adam on minibatches
    of sequences.  A forward pass whose FFT buffers would need more than
    {MAX_CONVOLUTION_BYTES / 2**30:.0f} GiB in one block raises a ``ValueError``: at the
    default sizes, training on sequences of more than about 40 000 steps, or
    predicting one of more than about 1.4 million."""


class _S4DArchitecture:
    """Hyperparameter rules and network factory shared by the two estimators."""

    _PARAMETER_RULES = {
        **NETWORK_PARAMETER_RULES,
        "d_state": constrained(
            int_rule(low=2),
            lambda d_state: d_state % 2 == 0,
            "even (d_state / 2 complex modes in conjugate pairs)",
        ),
        "init": option_rule(*INITS),
    }

    _network_layer = staticmethod(s4d_layer)

    def _network_options(self):
        return dict(d_state=self.d_state, d_conv=self.d_conv, expand=self.expand, init=self.init)


class S4DRegressor(_S4DArchitecture, SequenceNetworkRegressor):
    def __init__(
        self,
        *,
        d_model=32,
        n_layers=2,
        d_state=64,
        d_conv=4,
        expand=2,
        init="lin",
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
        self.d_state = d_state
        self.d_conv = d_conv
        self.expand = expand
        self.init = init
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


S4DRegressor.__doc__ = f"""Structured state-space (S4D) network for sequence regression.

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
    S4DClassifier : The same network with a softmax read-out.
    SelectiveSSMRegressor : The same structure with Mamba's selective SSM.

    Notes
    -----
{REGRESSOR_NOTES}

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.neural import S4DRegressor

    Per-step targets: at every step, an exponentially weighted average of the
    steps so far, a linear time-invariant filter as S4D is.

    >>> rng = np.random.RandomState(0)
    >>> X = rng.normal(size=(300, 32))          # 300 sequences of 32 steps
    >>> y = np.zeros_like(X)
    >>> for t in range(32):
    ...     y[:, t] = 0.8 * y[:, t - 1] + X[:, t] if t else X[:, 0]
    >>> model = S4DRegressor(d_model=8, n_layers=1, d_state=8,
    ...                      learning_rate_init=1e-2, max_iter=30,
    ...                      random_state=0).fit(X[:200], y[:200])
    >>> model.predict(X[200:202]).shape
    (2, 32)
    >>> model.score(X[200:], y[200:]) > 0.9     # R² on sequences not seen in fit
    True
    """


class S4DClassifier(_S4DArchitecture, SequenceNetworkClassifier):
    def __init__(
        self,
        *,
        d_model=32,
        n_layers=2,
        d_state=64,
        d_conv=4,
        expand=2,
        init="lin",
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
        self.d_state = d_state
        self.d_conv = d_conv
        self.expand = expand
        self.init = init
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


S4DClassifier.__doc__ = f"""Structured state-space (S4D) network for classification.

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
    S4DRegressor : The same network with a squared-error read-out.
    SelectiveSSMClassifier : The same structure with Mamba's selective SSM.

    Notes
    -----
{CLASSIFIER_NOTES}

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.neural import S4DClassifier

    One label per sequence: whether its steps sum to more than zero.

    >>> rng = np.random.RandomState(0)
    >>> X = rng.normal(size=(500, 12))
    >>> y = np.where(X.sum(axis=1) > 0, "up", "down")
    >>> model = S4DClassifier(d_model=8, n_layers=1, d_state=8,
    ...                       learning_rate_init=1e-2, max_iter=30,
    ...                       random_state=0).fit(X[:400], y[:400])
    >>> model.classes_
    array(['down', 'up'], dtype='<U4')
    >>> model.predict_proba(X[400:403]).shape
    (3, 2)
    >>> model.score(X[400:], y[400:]) > 0.8     # accuracy on unseen sequences
    True
    """
