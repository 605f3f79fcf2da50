"""Selective state-space (Mamba) estimators: SelectiveSSMRegressor and SelectiveSSMClassifier."""

from .._validation import option_or
from ._docstrings import CLASSIFIER_NOTES, REGRESSOR_NOTES, fitted_attributes, training_parameters
from ._networks._selective_ssm import mamba_layer
from ._supervised import SequenceNetworkClassifier, SequenceNetworkRegressor
from ._validation import NETWORK_PARAMETER_RULES, check_positive_int

__all__ = ["SelectiveSSMRegressor", "SelectiveSSMClassifier"]


_ARCHITECTURE_PARAMETERS = """\
    d_model : int, default=32
        Width of the residual stream; the input is projected from
        ``n_features`` to ``d_model`` channels.
    n_layers : int, default=2
        Number of residual Mamba blocks.
    d_state : int, default=16
        State size N of each channel's selective SSM.
    d_conv : int, default=4
        Taps of the causal depthwise convolution before the SSM.
    expand : int, default=2
        Channels inside a block: ``d_inner = expand * d_model``.
    dt_rank : int or "auto", default="auto"
        Rank of the step-size projection; "auto" is ``ceil(d_model / 16)``.
"""

_WEIGHT_DECAY = """\
    weight_decay : float, default=0.0
        Decoupled (AdamW) weight decay: each update also multiplies the
        projection matrices and convolution filters by
        ``1 - learning_rate_init * weight_decay``, outside the adaptive
        moments. Biases, norm gains and the SSM's ``A_log``, ``D`` and step
        bias are not decayed.
"""

_COMMON_PARAMETERS = _ARCHITECTURE_PARAMETERS + training_parameters(_WEIGHT_DECAY)

_COMMON_ATTRIBUTES = fitted_attributes("Mamba blocks")

_MODEL_NOTES = """\
    Each Mamba block maps the normalised residual stream through an input
    projection to ``x`` and a gate ``z`` (``expand * d_model`` channels each),
    a causal depthwise convolution and SiLU on ``x``, a per-step projection of
    ``x`` to the step-size input, ``B_t`` and ``C_t``, and the selective scan
    ``h_t = exp(Δ_t A) h_{t-1} + Δ_t B_t x_t``, ``y_t = C_t·h_t + D x_t``,
    gated by ``silu(z_t)``, back to ``d_model`` channels.  The recurrence runs
    in the Cython kernel :func:`skseq.inference.scan.selective_scan`;
    gradients are computed by explicit backward passes and the weights
    trained with Adam on minibatches of sequences."""


class _SelectiveSSMArchitecture:
    """Hyperparameter rules and network factory shared by the two estimators."""

    _PARAMETER_RULES = {
        **NETWORK_PARAMETER_RULES,
        "d_state": check_positive_int,
        "dt_rank": option_or(("auto",), check_positive_int, expected="'auto' or a positive int"),
    }

    _network_layer = staticmethod(mamba_layer)

    def _network_options(self):
        return dict(
            d_state=self.d_state, d_conv=self.d_conv, expand=self.expand, dt_rank=self.dt_rank
        )


class SelectiveSSMRegressor(_SelectiveSSMArchitecture, SequenceNetworkRegressor):
    def __init__(
        self,
        *,
        d_model=32,
        n_layers=2,
        d_state=16,
        d_conv=4,
        expand=2,
        dt_rank="auto",
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
        self.dt_rank = dt_rank
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


SelectiveSSMRegressor.__doc__ = f"""Selective state-space (Mamba) network for sequence regression.

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
    SelectiveSSMClassifier : The same network with a softmax read-out.

    Notes
    -----
{REGRESSOR_NOTES}

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.neural import SelectiveSSMRegressor

    Per-step targets: at every step, the scaled sum of the steps so far.

    >>> rng = np.random.RandomState(0)
    >>> X = rng.normal(size=(300, 16))          # 300 sequences of 16 steps
    >>> y = np.cumsum(X, axis=1) / np.sqrt(np.arange(1, 17))
    >>> model = SelectiveSSMRegressor(d_model=8, n_layers=1, d_state=4,
    ...                               learning_rate_init=1e-2, max_iter=30,
    ...                               random_state=0).fit(X[:200], y[:200])
    >>> model.predict(X[200:202]).shape
    (2, 16)
    >>> model.score(X[200:], y[200:]) > 0.9     # R² on sequences not seen in fit
    True
    """


class SelectiveSSMClassifier(_SelectiveSSMArchitecture, SequenceNetworkClassifier):
    def __init__(
        self,
        *,
        d_model=32,
        n_layers=2,
        d_state=16,
        d_conv=4,
        expand=2,
        dt_rank="auto",
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
        self.dt_rank = dt_rank
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


SelectiveSSMClassifier.__doc__ = f"""Selective state-space (Mamba) network for classification.

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
    SelectiveSSMRegressor : The same network with a squared-error read-out.

    Notes
    -----
{CLASSIFIER_NOTES}

    Examples
    --------
    >>> import numpy as np
    >>> from skseq.neural import SelectiveSSMClassifier

    One label per sequence: whether its steps sum to more than zero.

    >>> rng = np.random.RandomState(0)
    >>> X = rng.normal(size=(500, 12))
    >>> y = np.where(X.sum(axis=1) > 0, "up", "down")
    >>> model = SelectiveSSMClassifier(d_model=8, n_layers=1, d_state=4,
    ...                                learning_rate_init=1e-2, max_iter=30,
    ...                                random_state=0).fit(X[:400], y[:400])
    >>> model.classes_
    array(['down', 'up'], dtype='<U4')
    >>> model.predict_proba(X[400:403]).shape
    (3, 2)
    >>> model.score(X[400:], y[400:]) > 0.8     # accuracy on unseen sequences
    True
    """
