"""Docstring pieces shared by the neural sequence estimators.

The trainer's hyperparameters, the fitted attributes and the Notes on the
shapes of ``y`` are the same for every architecture; each estimator module
adds its own architecture parameters and says which weights ``weight_decay``
shrinks.
"""

__all__ = ["training_parameters", "fitted_attributes", "REGRESSOR_NOTES", "CLASSIFIER_NOTES"]

_TRAINING_BEFORE_WEIGHT_DECAY = """\
    learning_rate_init : float, default=1e-3
        Adam's step size.
    beta_1, beta_2 : float, default=0.9, 0.999
        Adam's decay rates of the first and second moment estimates, in [0, 1).
    epsilon : float, default=1e-8
        Adam's denominator offset.
"""

_TRAINING_AFTER_WEIGHT_DECAY = """\
    batch_size : int, default=32
        Sequences per minibatch (capped at the number of sequences).
        :meth:`fit` first estimates the working memory of a minibatch's
        forward and backward pass, and raises a ValueError beyond 8 GiB
        (``skseq.neural._trainer.MAX_WORKING_MEMORY``; see the user guide).
    max_iter : int, default=200
        Maximum number of epochs (passes over the data) of :meth:`fit`.
    shuffle : bool, default=True
        Shuffle the sequences before every epoch.
    random_state : int, RandomState instance or None, default=None
        Seeds the initial weights, the shuffling and the validation split; an
        int gives bitwise-identical fits (for a fixed ``n_jobs``).
    max_grad_norm : float or None, default=1.0
        Clip the gradient of each minibatch to this global Euclidean norm;
        None disables clipping.
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the sequences (stratified for
        per-sequence labels) and stop when the validation score has not
        improved by ``tol`` for ``n_iter_no_change`` epochs; the weights of
        the best epoch are kept.  Ignored by :meth:`partial_fit`.
    validation_fraction : float, default=0.1
        Share of the sequences held out for early stopping, in (0, 1).
    n_iter_no_change : int, default=10
        Epochs without improvement by ``tol`` (of the training loss, or of the
        validation score with early stopping) after which :meth:`fit` stops.
    tol : float, default=1e-4
        Improvement threshold of the stopping rule, >= 0 (``-np.inf``: run
        all ``max_iter`` epochs).
    verbose : int, default=0
        1 prints the loss (and validation score) of every epoch and its time
        to stderr; 2 also prints every minibatch.
    warm_start : bool, default=False
        Let :meth:`fit` continue from the previous weights and optimiser state.
    n_jobs : int or None, default=None
        Threads (joblib) over shards of each minibatch, whose gradients are
        summed, and over chunks of sequences in prediction. The result equals
        ``n_jobs=1`` up to floating-point rounding. None means 1. BLAS is held
        to one thread inside fit and predict: the matrices are small, and a
        multi-threaded BLAS only slows them down.
    dtype : {"float32", "float64"}, default="float32"
        Working precision of the network: float32 trains about twice as fast,
        float64 serves gradient checks."""

_FITTED_ATTRIBUTES = """\
    n_features_in_ : int
        Columns of 2-D ``X`` (each a time step, as scikit-learn counts
        features; :meth:`predict` then needs as many), or features per step of
        3-D ``X`` (any sequence length can then be predicted).
    feature_names_in_ : ndarray of str
        Column names of a 2-D ``X`` given as a DataFrame with string column
        names.
    per_step_ : bool
        Whether the model reads out every step (per-step targets) or only the
        last one.
    n_outputs_ : int
        Outputs of the read-out head at each read-out position.
    network_ : ResidualSequenceNetwork
        The layers (input projection, {blocks}, final RMSNorm, head).
    parameters_ : dict of ndarray
        The network's weights, keyed by layer and parameter name.
    loss_curve_ : list of float
        Mean training loss of each epoch.
    best_loss_ : float or None
        Lowest training loss reached (None with early stopping).
    validation_scores_ : list of float or None
        Validation score of each epoch with early stopping, else None.
    best_validation_score_ : float or None
        Best validation score with early stopping, else None.
    n_iter_ : int
        Epochs run (fit and partial_fit together).
    t_ : int
        Training sequences processed."""


def _entries(text):
    """The numpydoc entries of ``text`` by their first name, in order."""
    entries, name = {}, None
    for line in text.splitlines(keepends=True):
        if line.startswith("    ") and not line.startswith("     "):
            name = line.split(":")[0].split(",")[0].strip()
            entries[name] = ""
        entries[name] += line
    return entries


def training_parameters(weight_decay, **replaced):
    """The numpydoc entries of the trainer's hyperparameters.

    ``weight_decay`` is the model's entry for ``weight_decay`` (name line and
    description, indented like the others), which says what is decayed.
    ``replaced`` maps a parameter's name to the model's own entry for it
    (a model whose default differs); an entry ending the text needs no
    final newline.
    """
    text = _TRAINING_BEFORE_WEIGHT_DECAY + weight_decay + _TRAINING_AFTER_WEIGHT_DECAY + "\n"
    entries = _entries(text)
    unknown = sorted(replaced.keys() - entries.keys())
    if unknown:
        raise ValueError(f"no training parameters named {unknown}")
    for name, entry in replaced.items():
        entries[name] = entry if entry.endswith("\n") else entry + "\n"
    return "".join(entries.values()).rstrip("\n")


def fitted_attributes(blocks):
    """The numpydoc entries of the fitted attributes; ``blocks`` names the residual blocks."""
    return _FITTED_ATTRIBUTES.format(blocks=blocks)


#: The Notes of every neural regressor: the kinds of target ``y``'s shape selects.
REGRESSOR_NOTES = """\
    The kind of target follows from ``y``'s shape, with ``X`` of shape
    ``(n_sequences, seq_len[, n_features])``: ``(n_sequences,)`` is one target
    per sequence, ``(n_sequences, seq_len)`` one per step,
    ``(n_sequences, k)`` with ``k != seq_len`` is ``k`` targets per sequence,
    ``(n_sequences, seq_len, k)`` is ``k`` per step.  NaN in per-step targets,
    or zero entries of a ``(n_sequences, seq_len)`` ``sample_weight``, mask
    steps out of the loss."""

#: The Notes of every neural classifier: the shapes of ``y`` and what a label may be.
CLASSIFIER_NOTES = """\
    ``y`` of shape ``(n_sequences,)`` is one label per sequence,
    ``(n_sequences, seq_len)`` one label per step; a ``sample_weight`` of
    shape ``(n_sequences, seq_len)`` masks steps (weight 0) out of the loss.
    Labels may be any sortable type (strings included).  Every entry of ``y``,
    masked or not, must be a label: ``classes_`` is built from all of them."""
