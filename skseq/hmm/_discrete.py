"""Emissions on whole numbers: CategoricalHMM (symbols), MultinomialHMM (counts over
trials) and PoissonHMM (counts)."""

import math

import numpy as np
from scipy.special import gammaln
from sklearn.utils.validation import validate_data

from .._sequences import lengths_by_keyword
from .._validation import (
    at_fit,
    check_allocation,
    format_bytes,
    masked_as_nan,
    optional,
    prior_rule,
)
from ._base import BaseHMM, check_probability_vector, dirichlet_map, fit_kmeans
from ._gaussian import observed_rows

__all__ = ["CategoricalHMM", "MultinomialHMM", "PoissonHMM"]


def validate_whole_numbers(estimator, X, reset, what, missing_supported=False):
    """Finite, non-negative whole numbers (integer or float dtype) as float64.

    With ``missing_supported``, NaN (and a masked array's masked entries)
    marks a missing entry; at ``reset`` some entry must be observed.
    """
    name = type(estimator).__name__
    X = masked_as_nan(X, missing_supported=missing_supported, owner=name)
    X = validate_data(
        estimator, X, reset=reset, dtype=np.float64, order="C", ensure_all_finite=False
    )
    nan = np.isnan(X) if missing_supported else None
    if missing_supported:
        if np.isinf(X).any():
            raise ValueError(f"{name} does not accept inf (NaN marks a missing entry).")
        if reset and nan.all():
            raise ValueError(f"Every entry of X is NaN: {name} has no observed {what}.")
    elif not np.all(np.isfinite(X)):
        raise ValueError(
            f"{name} cannot treat NaN as missing and does not accept inf: X must be finite {what}."
        )
    values = X[~nan] if missing_supported and nan.any() else X
    if np.any(values < 0):
        raise ValueError(
            f"Negative values in data passed to {name}: {what} must be non-negative"
            + (" (NaN marks a missing entry)." if missing_supported else ".")
        )
    if np.any(values != np.floor(values)):
        raise ValueError(f"{name} needs whole-number {what}; X has non-integer values.")
    return X


def missing_entries(X):
    """The mask of X's NaN entries, or None when there are none (the fast path)."""
    if X.size == 0 or not np.isnan(X.min()):
        return None
    return np.isnan(X)


def log_factorials(X):
    """sum_f log(x_f!) of each row of whole numbers."""
    return gammaln(X + 1).sum(axis=1)


def perturbed_frequencies(counts, n_components, random_state, support=None):
    """Initial emission probabilities from the symbol counts of the data.

    ``counts`` (n_columns, n_symbols) are smoothed by 1e-3 on ``support``
    (zero outside it), normalised per column and multiplied by uniform(0.5,
    1.5) noise per state, which breaks the symmetry between states; returns
    (n_components, n_columns, n_symbols), normalised along the last axis.
    """
    frequencies = counts + 1e-3
    if support is not None:
        frequencies = np.where(support, frequencies, 0.0)
    frequencies = frequencies / frequencies.sum(axis=-1, keepdims=True)
    table = frequencies * random_state.uniform(0.5, 1.5, (n_components, *frequencies.shape))
    return table / table.sum(axis=-1, keepdims=True)


def emission_table(emissionprob):
    """CategoricalHMM's ``emissionprob`` as an (n_components, n_columns, n_symbols)
    float64 array (one column's (n_components, n_symbols) gets a column axis)."""
    table = np.asarray(emissionprob, dtype=np.float64)
    return table[:, None, :] if table.ndim == 2 else table


def symbol_index(X, n_symbols):
    """Each symbol's index in a column-major flattening of the (n_columns, n_symbols)
    table, f * n_symbols + x_tf, shape (n_samples, n_columns)."""
    return X.astype(np.intp) + n_symbols * np.arange(X.shape[1], dtype=np.intp)


def check_alphabet_sizes(value, name, n_columns):
    """Alphabet sizes, one int for every column or one per column, as (n_columns,) intp."""
    sizes = np.asarray(value)
    if sizes.dtype == bool or not np.issubdtype(sizes.dtype, np.integer) or sizes.ndim > 1:
        raise TypeError(
            f"{name} must be an integer or a 1-D array of integers (one alphabet size "
            f"per column of symbols), got {value!r}."
        )
    if np.any(sizes < 1):
        raise ValueError(f"{name} must be >= 1, got {value!r}.")
    if sizes.ndim == 1 and sizes.shape[0] != n_columns:
        raise ValueError(
            f"{name} gives {sizes.shape[0]} alphabet sizes for {n_columns} column(s) of symbols."
        )
    return np.broadcast_to(sizes, (n_columns,)).astype(np.intp)


# An alphabet inferred from the data (largest symbol + 1) wider than the data
# have rows, with an emission table beyond this many bytes, is taken for symbols
# that are not codes 0..n-1 (raw identifiers, hashes, years) rather than for a
# real alphabet: most of its symbols cannot occur, and the table would fill the
# memory with them.  A declared alphabet (n_features) is not limited this way.
INFERRED_ALPHABET_LIMIT = 2**30


def check_alphabet_allocation(sizes, n_components, n_rows, *, inferred):
    """Refuse alphabets whose emission table (n_components, n_columns, max size) cannot be meant.

    ``inferred``: the sizes come from the largest symbols of X (not from
    ``n_features``); then an alphabet wider than ``n_rows`` whose table passes
    :data:`INFERRED_ALPHABET_LIMIT` is refused.  Any table beyond the
    machine's memory is refused (:func:`skseq._validation.check_allocation`).
    """
    column = int(np.argmax(sizes))
    width = int(sizes[column])  # a Python int: exact for any float64 symbol
    shape = (n_components, len(sizes), width)
    n_bytes = math.prod(shape) * 8
    where = f" in column {column}" if len(sizes) > 1 else ""
    if inferred and width > n_rows and n_bytes > INFERRED_ALPHABET_LIMIT:
        raise ValueError(
            f"The largest symbol of X, {width - 1}{where}, implies an alphabet of {width} "
            f"symbols (n_symbols = largest symbol + 1: CategoricalHMM takes the symbols "
            f"0..n_symbols - 1), far more than the {n_rows} rows of X, and an emission table "
            f"of {format_bytes(n_bytes)}. Map the symbols to 0..n - 1 first, with "
            "sklearn.preprocessing.LabelEncoder (one column) or OrdinalEncoder (several); "
            "if the alphabet really is that large, declare it with n_features."
        )
    check_allocation(
        shape,
        np.float64,
        argument=(
            f"the largest symbol of X, {width - 1}{where},"
            if inferred
            else f"n_features={width}" + (f" (column {column})" if len(sizes) > 1 else "")
        ),
        what=f"the emission table of shape {shape}",
    )


def check_declared_alphabets(value, name="n_features"):
    """CategoricalHMM's ``n_features`` as given: one alphabet size, or one per column."""
    sizes = np.asarray(value)
    return check_alphabet_sizes(value, name, sizes.size if sizes.ndim else 1)


def check_trials(value, name="n_trials"):
    """MultinomialHMM's ``n_trials``: None, an int >= 0, or a 1-D array of them."""
    if value is None:
        return None
    trials = np.asarray(value)
    if trials.dtype == bool or not np.issubdtype(trials.dtype, np.integer) or trials.ndim > 1:
        raise TypeError(
            f"{name} must be None, an integer or a 1-D array of integers (one per row), "
            f"got {value!r}."
        )
    if np.any(trials < 0):
        raise ValueError(f"{name} must be non-negative, got {value!r}.")
    return trials


class CategoricalHMM(BaseHMM):
    """Hidden Markov model with categorical (discrete symbol) emissions.

    ``X`` holds whole-number symbols 0, 1, 2, ...  With one column it is a
    drop-in replacement for ``hmmlearn.hmm.CategoricalHMM`` (same parameters,
    ``emissionprob_`` of shape (n_components, n_symbols)).  With several
    columns, each column is a categorical variable of its own, independent of
    the others given the state (as in dynamax and pomegranate):
    p(x_t | z_t = j) = prod_f emissionprob_[j, f, x_tf].  The columns may have
    alphabets of different sizes (``n_symbols_``).

    NaN (or a masked entry of a masked array) marks a missing symbol: its
    column's factor is left out of p(x_t | z_t) (the column is integrated
    out) and out of that column's counts; a row missing throughout is an
    unobserved time step.  Negative codes stay an error (a missing symbol is
    NaN, as in scikit-learn's encoders), and so does inf.

    Parameters
    ----------
    n_components : int, default=1
        Number of hidden states.
    startprob_prior, transmat_prior : float or array, default=1.0
        Dirichlet concentrations of the priors on ``startprob_`` and the rows
        of ``transmat_`` (1 = no prior).
    emissionprob_prior : float or array broadcastable to ``emissionprob_``, default=1.0
        Dirichlet concentration of the prior on each state's (and column's)
        symbol probabilities; symbols beyond a column's alphabet keep
        probability zero whatever the prior.
    n_features : int or array-like of int of shape (n_columns,), optional
        Alphabet size (hmmlearn's name for the number of symbols): every
        column takes symbols 0 .. n_features - 1, or, given one size per
        column, column f takes 0 .. n_features[f] - 1.  When omitted, the
        width of ``emissionprob_init`` if given, else ``max(X[:, f]) + 1``
        per column of the data at fit.
    algorithm, random_state, n_iter, tol, verbose, implementation
        As in :class:`GaussianHMM`.
    params, init_params : str, default="ste"
        "s" startprob, "t" transmat, "e" emissionprob.
    startprob_init, transmat_init, emissionprob_init : array-like, optional
        Initial values (clone-safe), taking precedence over ``init_params``;
        ``emissionprob_init`` in the shape of ``emissionprob_``.
    n_init : int, default=1
        Number of initialisations; the best is kept.
    n_jobs : int, default=None
        Threads for the E step over sequences.
    acceleration : {"squarem", None}, default=None
        None: plain EM (hmmlearn's iterations); "squarem": batch EM
        accelerated by SQUAREM, as in :class:`GaussianHMM`.
    learning_method, learning_decay, learning_offset, total_samples, batch_size
        Stochastic EM, as in :class:`GaussianHMM`.

    Attributes
    ----------
    startprob_, transmat_ : ndarray
    emissionprob_ : ndarray of shape (n_components, [n_columns,] n_symbols)
        p(symbol | state): for one column of symbols, hmmlearn's
        (n_components, n_symbols); for several, ``emissionprob_[j, f, v]`` is
        p(x_f = v | state j), with n_symbols the largest alphabet and zeros
        beyond the alphabet of each column (``v >= n_symbols_[f]``).  The
        probabilities sum to 1 along the last axis.  It may be set by hand
        in either shape (hmmlearn style); its alphabet is then ``n_symbols_``
        when set, else ``n_features``, else its width.
    n_symbols_ : int or ndarray of int of shape (n_columns,)
        Alphabet size learned at fit: an int for one column, one size per
        column for several.
    monitor_, n_iter_, converged_, n_features_in_, n_batch_iter_, filtered_state_
        As in :class:`GaussianHMM` (``n_features_in_`` counts the columns of
        symbols).

    Examples
    --------
    >>> import numpy as np
    >>> from skseq import CategoricalHMM
    >>> X = np.array([[0], [0], [1], [2], [2], [2], [0], [1]])
    >>> model = CategoricalHMM(n_components=2, random_state=0, n_iter=20).fit(X)
    >>> model.emissionprob_.shape
    (2, 3)
    >>> model.predict(X).shape
    (8,)

    Two columns, the second with an alphabet of two symbols:

    >>> X2 = np.column_stack([X[:, 0], [0, 0, 1, 1, 1, 1, 0, 0]])
    >>> model = CategoricalHMM(n_components=2, random_state=0, n_iter=20).fit(X2)
    >>> model.emissionprob_.shape, model.n_symbols_.tolist()
    ((2, 2, 3), [3, 2])
    >>> model.emissionprob_[:, 1, 2].tolist()  # beyond the second column's alphabet
    [0.0, 0.0]
    """

    _emission_letters = {"e": "emissionprob_"}
    # A constructor parameter here (the alphabet size), not BaseHMM's property.
    n_features = None

    def __init__(
        self,
        n_components=1,
        startprob_prior=1.0,
        transmat_prior=1.0,
        *,
        emissionprob_prior=1.0,
        n_features=None,
        algorithm="viterbi",
        random_state=None,
        n_iter=10,
        tol=1e-2,
        verbose=False,
        params="ste",
        init_params="ste",
        implementation="log",
        startprob_init=None,
        transmat_init=None,
        emissionprob_init=None,
        n_init=1,
        n_jobs=None,
        acceleration=None,
        learning_method="batch",
        learning_decay=0.6,
        learning_offset=0.0,
        total_samples=None,
        batch_size=32,
    ):
        super().__init__(
            n_components,
            startprob_prior=startprob_prior,
            transmat_prior=transmat_prior,
            algorithm=algorithm,
            random_state=random_state,
            n_iter=n_iter,
            tol=tol,
            verbose=verbose,
            params=params,
            init_params=init_params,
            implementation=implementation,
            startprob_init=startprob_init,
            transmat_init=transmat_init,
            n_init=n_init,
            n_jobs=n_jobs,
            acceleration=acceleration,
            learning_method=learning_method,
            learning_decay=learning_decay,
            learning_offset=learning_offset,
            total_samples=total_samples,
            batch_size=batch_size,
        )
        self.emissionprob_prior = emissionprob_prior
        self.n_features = n_features
        self.emissionprob_init = emissionprob_init

    # -- the emission table and its alphabets --------------------------------

    def _parameter_rules(self):
        return {**super()._parameter_rules(), "n_features": optional(check_declared_alphabets)}

    def _checked_table(self, value, name, n_columns=None):
        """``value`` validated as the emission probabilities of ``n_columns``
        columns (None: as many as its shape says), as (K, n_columns, n_symbols)."""
        try:
            value = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError) as error:
            raise TypeError(f"{name} must be an array of probabilities: {error}") from None
        if n_columns is None and value.ndim in (2, 3):
            n_columns = 1 if value.ndim == 2 else value.shape[1]
        if not (value.ndim == 2 and n_columns == 1) and not (
            value.ndim == 3 and value.shape[1] == n_columns
        ):
            if n_columns is None:
                expected = "(n_components, n_symbols) or (n_components, n_columns, n_symbols)"
            elif n_columns == 1:
                expected = "(n_components, n_symbols) for one column of symbols"
            else:
                expected = f"(n_components, {n_columns}, n_symbols) for {n_columns} columns"
            raise ValueError(
                f"{name} must have shape {expected} (one row of symbol probabilities per "
                f"state and column), got {value.shape}."
            )
        check_probability_vector(value, name, (self.n_components, *value.shape[1:]))
        return emission_table(value)

    def _alphabets_of(self, table, name, sources):
        """The alphabet size of each column of ``table`` (K, F, V): the first of
        ``sources`` (``(name, value)`` pairs) that is not None, else V.

        The table must be V wide for its largest alphabet and give probability
        zero beyond each column's alphabet.
        """
        n_columns, width = table.shape[1:]
        given = [(source, value) for source, value in sources if value is not None]
        if not given:
            return np.full(n_columns, width, dtype=np.intp)
        source, value = given[0]
        sizes = check_alphabet_sizes(value, source, n_columns)
        if sizes.max() != width:
            hint = " (set n_symbols_ too when assigning emissionprob_)" * (source == "n_symbols_")
            raise ValueError(
                f"{name} has {width} symbols per column but {source}={value!r} gives "
                f"alphabets of at most {sizes.max()} symbols; they must agree{hint}."
            )
        beyond = (table != 0) & (np.arange(width) >= sizes[:, None])
        columns = np.flatnonzero(beyond.any(axis=0).any(axis=1))
        if columns.size:
            column = columns[0]
            raise ValueError(
                f"{name} gives probability to symbols beyond the alphabet "
                f"0..{sizes[column] - 1} of column {column} ({source}={value!r}); "
                "those entries must be 0."
            )
        return sizes

    def _alphabets(self, table=None):
        """Alphabet size of each column of ``emissionprob_`` (``table``: its
        validated (K, F, V) form): the fitted ``n_symbols_``, else ``n_features``."""
        table = emission_table(self.emissionprob_) if table is None else table
        return self._alphabets_of(
            table,
            "emissionprob_",
            [("n_symbols_", getattr(self, "n_symbols_", None)), ("n_features", self.n_features)],
        )

    def _table_shape(self):
        shape = np.shape(self.emissionprob_)
        return (shape[0], 1, shape[1]) if len(shape) == 2 else shape

    @staticmethod
    def _check_symbols(X, sizes):
        largest = np.max(np.where(np.isnan(X), 0, X), axis=0)
        outside = np.flatnonzero(largest >= sizes)
        if outside.size:
            column = outside[0]
            raise ValueError(
                f"X contains symbol {int(largest[column])} in column {column}, outside the "
                f"alphabet 0..{sizes[column] - 1} of that column."
            )

    # -- BaseHMM hooks -------------------------------------------------------

    def _validate_X(self, X, reset):
        X = validate_whole_numbers(self, X, reset, "symbols", missing_supported=True)
        if not reset:
            self._check_emission_parameters(X.shape[1])
            self._check_symbols(X, self._alphabets())
        return X

    def _initialize_emissions(self, X, random_state):
        n_columns = X.shape[1]
        initial = self._initial_value("emissionprob_")
        if initial is not None:
            table = self._checked_table(initial, "emissionprob", n_columns)
            sources = [("n_features", self.n_features)]
            if self.emissionprob_init is None:  # hand-set: its fitted alphabets, if any
                sources.append(("n_symbols_", getattr(self, "n_symbols_", None)))
            sizes = self._alphabets_of(table, "emissionprob", sources)
        elif self.n_features is not None:
            sizes = check_alphabet_sizes(self.n_features, "n_features", n_columns)
            check_alphabet_allocation(sizes, self.n_components, X.shape[0], inferred=False)
        else:
            never = np.flatnonzero(np.isnan(X).all(axis=0))
            if never.size:
                raise ValueError(
                    f"Column {never[0]} of X has no observed symbol (all NaN): give its "
                    "alphabet size with n_features, or emissionprob_init."
                )
            # Checked in float64 first: a symbol beyond the intp range would wrap.
            sizes = np.nanmax(X, axis=0) + 1
            check_alphabet_allocation(sizes, self.n_components, X.shape[0], inferred=True)
            sizes = sizes.astype(np.intp)
        self._check_symbols(X, sizes)
        if initial is None:
            width = sizes.max()
            support = np.arange(width) < sizes[:, None]
            observed = ~np.isnan(X)
            counts = np.bincount(
                symbol_index(np.where(observed, X, 0), width)[observed],
                minlength=n_columns * width,
            ).reshape(n_columns, width)
            table = perturbed_frequencies(counts, self.n_components, random_state, support)
        self.emissionprob_ = table[:, 0] if n_columns == 1 else table
        self.n_symbols_ = int(sizes[0]) if n_columns == 1 else sizes

    def _check_emission_parameters(self, n_features):
        self._alphabets(self._checked_table(self.emissionprob_, "emissionprob_", n_features))

    def _symbol_indices(self, X, width):
        """``(index, observed)``: :func:`symbol_index` of ``X`` (a missing symbol
        indexes symbol 0) and the mask of its observed entries (None if all are).
        A pass over ``X`` finds that there are none (the common case), so the
        emission terms' cache stays the index alone."""
        missing = missing_entries(X)
        if missing is None:
            return symbol_index(X, width), None
        return symbol_index(np.where(missing, 0, X), width), ~missing

    def _emission_terms(self, X):
        table = emission_table(self.emissionprob_)
        n_components, n_columns, width = table.shape
        with np.errstate(divide="ignore"):
            # (n_columns * n_symbols, n_components): one row gathered per symbol.
            log_table = np.ascontiguousarray(np.log(table).reshape(n_components, -1).T)
        index, observed = self._symbol_indices(X, width)
        if observed is not None:  # a missing symbol's column leaves its factor out
            return np.where(observed[:, :, None], log_table[index], 0.0).sum(axis=1), index
        if n_columns == 1:
            return log_table[index[:, 0]], index
        return log_table[index].sum(axis=1), index

    def _emission_statistics(self, X, posteriors, cache):
        n_components, n_columns, width = self._table_shape()
        index, observed = self._symbol_indices(X, width)
        flat = index.ravel()
        counts = np.empty((n_components, n_columns * width))
        for state, weights in enumerate(posteriors.T):
            if n_columns > 1:
                weights = np.repeat(weights, n_columns)  # row-major: each row's columns
            if observed is not None:  # missing symbols count nowhere
                weights = weights * observed.ravel()
            counts[state] = np.bincount(flat, weights=weights, minlength=n_columns * width)
        return {"obs": counts.reshape(n_components, n_columns, width)}

    def _emission_features(self, X, cache):
        n_components, n_columns, width = self._table_shape()
        index, observed = self._symbol_indices(X, width)
        one_hot = np.zeros((X.shape[0], n_columns * width))
        one_hot[np.arange(X.shape[0])[:, None], index] = 1.0 if observed is None else observed
        return np.broadcast_to(one_hot[:, None, :], (X.shape[0], n_components, one_hot.shape[1]))

    def _statistics_from_features(self, sums):
        return {"obs": sums.reshape(self._table_shape())}

    def _emission_mstep(self, statistics):
        if "e" not in self.params:
            return
        shape = np.shape(self.emissionprob_)
        table = emission_table(self.emissionprob_)
        support = np.arange(table.shape[2]) < self._alphabets()[:, None]
        prior = emission_table(self._prior("emissionprob_prior", shape))
        self.emissionprob_ = dirichlet_map(statistics["obs"], prior, table, support).reshape(shape)

    @lengths_by_keyword
    def predict_next_proba(self, X, *, lengths=None, sequence_ids=None):
        """Filtered one-step predictive symbol probabilities p(x_{t+1} | x_1..x_t).

        Row ``t`` of a sequence holds the distribution of the symbol at the
        step after it, given the rows of its sequence up to and including
        ``t``::

            p(x_{t+1} = v | x_1..x_t) = sum_j p(z_{t+1} = j | x_1..x_t) emissionprob_[j, v]

        with the predictive state probabilities of
        :meth:`predict_next_state_proba`.  This is the convention of a causal
        sequence model trained on next-symbol targets: row ``t`` is the
        prediction of row ``t + 1``, the last row of a sequence predicts the
        step beyond its end, and the first symbol of a sequence, predicted
        before any row is seen, is in no row (its distribution is
        ``startprob_ @ emissionprob_``).  So the log-probability of a
        sequence is ``log p(x_1)`` plus the sum over its rows ``t < T`` of
        ``log predict_next_proba(X)[t, x_{t+1}]``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_columns)
        lengths, sequence_ids : see :meth:`fit`.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_symbols) or (n_samples, n_columns, n_symbols)
            In the layout of ``emissionprob_`` without its state axis: for
            one column of symbols, each row sums to one over the symbols;
            for several, ``proba[t, f, v]`` is the predictive probability of
            symbol ``v`` in column ``f`` (each column's marginal; entries
            beyond a column's alphabet are zero).

        Raises
        ------
        ValueError
            If a sequence has probability zero under the model.

        Examples
        --------
        >>> import numpy as np
        >>> from skseq.hmm import CategoricalHMM
        >>> model = CategoricalHMM(n_components=2)
        >>> model.startprob_ = [1.0, 0.0]
        >>> model.transmat_ = [[0.0, 1.0], [1.0, 0.0]]
        >>> model.emissionprob_ = [[1.0, 0.0], [0.0, 1.0]]
        >>> model.predict_next_proba([[0], [1], [0]]).tolist()
        [[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]
        """
        X, offsets = self._prepare_fitted(X, lengths, sequence_ids)
        predicted = self._predicted_states(X, offsets)
        table = emission_table(self.emissionprob_)
        proba = np.einsum("tj,jfv->tfv", predicted, table)
        return proba[:, 0] if np.ndim(self.emissionprob_) == 2 else proba

    def _emission_coordinates(self, X):
        return {"emissionprob_": ("probabilities", None)}

    def _emission_n_parameters(self):
        return {"e": self.n_components * int((self._alphabets() - 1).sum())}

    def _sample_emissions(self, states, random_state):
        table = emission_table(self.emissionprob_)
        cumulative = np.cumsum(table, axis=2)[states]
        uniforms = random_state.rand(len(states), table.shape[1])
        symbols = (uniforms[:, :, None] >= cumulative).sum(axis=2)
        return np.minimum(symbols, self._alphabets() - 1)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        tags.input_tags.categorical = True
        tags.input_tags.allow_nan = True
        return tags

    def _get_parameters(self):
        parameters = super()._get_parameters()
        n_symbols = self.n_symbols_
        parameters["n_symbols_"] = np.copy(n_symbols) if np.ndim(n_symbols) else n_symbols
        return parameters


class MultinomialHMM(BaseHMM):
    """Hidden Markov model with multinomial emissions: rows of counts over trials.

    hmmlearn's ``MultinomialHMM`` as it is since hmmlearn 0.2.8: row x_t of
    ``X`` counts how many of n_t trials fell into each of the ``n_features``
    categories (columns), n_t = sum_f x_tf, and state j draws it from the
    multinomial distribution with probabilities ``emissionprob_[j]``,

        p(x_t | z_t = j) = n_t! / (prod_f x_tf!) * prod_f emissionprob_[j, f] ** x_tf,

    the coefficient included (as hmmlearn and ``scipy.stats.multinomial``).
    hmmlearn's class of this name meant something else before 0.2.8 (one
    column of symbols, one trial per row): that model is
    :class:`CategoricalHMM`.  It is also this one with ``n_trials=1`` and
    one-hot rows, which gives the same likelihoods and EM steps.

    Parameters
    ----------
    n_components : int, default=1
        Number of hidden states.
    n_trials : int, array-like of int of shape (n_samples,) or None, default=None
        Number of trials of each row.  None: each row's total is its number
        of trials, and rows may differ.  An int (or one per row of the
        training data, hmmlearn's array form): the rows that :meth:`fit` and
        :meth:`partial_fit` learn from must sum to it, else a ``ValueError``
        names the first row that does not; :meth:`sample` draws rows of
        ``n_trials`` trials and needs a single number.  Scoring and decoding
        take each row's own total, as hmmlearn does.
    startprob_prior, transmat_prior : float or array, default=1.0
        Dirichlet priors, as in :class:`GaussianHMM`.
    algorithm, random_state, n_iter, tol, verbose, implementation
        As in :class:`GaussianHMM`.
    params, init_params : str, default="ste"
        "s" startprob, "t" transmat, "e" emissionprob.
    emissionprob_prior : float or array of shape (n_components, n_features), default=1.0
        Dirichlet concentration of the prior on the rows of ``emissionprob_``
        (1 = no prior, hmmlearn's M step).
    startprob_init, transmat_init, emissionprob_init : array-like, optional
        Initial values (clone-safe), taking precedence over ``init_params``.
    n_init : int, default=1
        Number of initialisations; the best is kept.
    n_jobs : int, default=None
        Threads for the E step over sequences.
    acceleration : {"squarem", None}, default=None
        None: plain EM (hmmlearn's iterations); "squarem": batch EM
        accelerated by SQUAREM, as in :class:`GaussianHMM`.
    learning_method, learning_decay, learning_offset, total_samples, batch_size
        Stochastic EM, as in :class:`GaussianHMM`.

    Attributes
    ----------
    startprob_, transmat_ : ndarray
    emissionprob_ : ndarray of shape (n_components, n_features)
        Each state's probabilities of the categories; rows sum to 1.
    n_features : int
        Number of categories (hmmlearn's name, from ``emissionprob_``); may be
        set by hand before the parameters, as in :class:`GaussianHMM`.
    monitor_, n_iter_, converged_, n_features_in_, n_batch_iter_, filtered_state_
    batch_log_likelihood_
        As in :class:`GaussianHMM`.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq import MultinomialHMM
    >>> rng = np.random.default_rng(0)
    >>> X = np.concatenate([rng.multinomial(10, [0.8, 0.1, 0.1], 50),
    ...                     rng.multinomial(10, [0.1, 0.1, 0.8], 50)])
    >>> model = MultinomialHMM(n_components=2, n_trials=10, random_state=0).fit(X)
    >>> model.emissionprob_[np.argsort(model.emissionprob_[:, 0])].round(1)
    array([[0.1, 0.1, 0.8],
           [0.8, 0.1, 0.1]])
    >>> model.sample(3, random_state=0)[0].sum(axis=1)
    array([10, 10, 10])
    """

    _emission_letters = {"e": "emissionprob_"}

    def __init__(
        self,
        n_components=1,
        n_trials=None,
        startprob_prior=1.0,
        transmat_prior=1.0,
        algorithm="viterbi",
        random_state=None,
        n_iter=10,
        tol=1e-2,
        verbose=False,
        params="ste",
        init_params="ste",
        implementation="log",
        *,
        emissionprob_prior=1.0,
        startprob_init=None,
        transmat_init=None,
        emissionprob_init=None,
        n_init=1,
        n_jobs=None,
        acceleration=None,
        learning_method="batch",
        learning_decay=0.6,
        learning_offset=0.0,
        total_samples=None,
        batch_size=32,
    ):
        super().__init__(
            n_components,
            startprob_prior=startprob_prior,
            transmat_prior=transmat_prior,
            algorithm=algorithm,
            random_state=random_state,
            n_iter=n_iter,
            tol=tol,
            verbose=verbose,
            params=params,
            init_params=init_params,
            implementation=implementation,
            startprob_init=startprob_init,
            transmat_init=transmat_init,
            n_init=n_init,
            n_jobs=n_jobs,
            acceleration=acceleration,
            learning_method=learning_method,
            learning_decay=learning_decay,
            learning_offset=learning_offset,
            total_samples=total_samples,
            batch_size=batch_size,
        )
        self.n_trials = n_trials
        self.emissionprob_prior = emissionprob_prior
        self.emissionprob_init = emissionprob_init

    def _parameter_rules(self):
        return {**super()._parameter_rules(), "n_trials": check_trials}

    def _validate_X(self, X, reset):
        return validate_whole_numbers(self, X, reset, "counts")

    def _check_training_rows(self, X):
        trials = check_trials(self.n_trials)
        if trials is None:
            return
        if trials.ndim == 1 and trials.shape[0] != X.shape[0]:
            raise ValueError(
                f"n_trials has {trials.shape[0]} entries but X has {X.shape[0]} rows: give "
                "one number of trials per row, or one int for every row."
            )
        totals = X.sum(axis=1)
        wrong = np.flatnonzero(totals != trials)
        if wrong.size:
            row = wrong[0]
            expected = trials if trials.ndim == 0 else trials[row]
            raise ValueError(
                f"The rows of X must sum to n_trials (counts over n_trials trials): row {row} "
                f"sums to {totals[row]:g}, not {int(expected)} ({wrong.size} of {X.shape[0]} "
                "rows differ)."
            )

    def _initialize_emissions(self, X, random_state):
        n_components, n_features = self.n_components, X.shape[1]
        emissionprob = self._initial_value("emissionprob_")
        if emissionprob is None:
            totals = X.sum(axis=0)[None, :]
            emissionprob = perturbed_frequencies(totals, n_components, random_state)[:, 0]
        self.emissionprob_ = check_probability_vector(
            emissionprob, "emissionprob", (n_components, n_features)
        )

    def _check_emission_parameters(self, n_features):
        emissionprob = np.asarray(self.emissionprob_)
        if emissionprob.ndim != 2:
            raise ValueError(
                f"emissionprob_ must have shape (n_components, n_features), "
                f"got {emissionprob.shape}."
            )
        if n_features is not None and emissionprob.shape[1] != n_features:
            raise ValueError(
                f"X has {n_features} features (categories), but emissionprob_ has "
                f"{emissionprob.shape[1]}."
            )
        check_probability_vector(
            emissionprob, "emissionprob_", (self.n_components, emissionprob.shape[1])
        )

    def _emission_terms(self, X):
        emissionprob = np.asarray(self.emissionprob_, dtype=np.float64)
        impossible = emissionprob == 0
        with np.errstate(divide="ignore"):
            log_probabilities = np.where(impossible, 0.0, np.log(emissionprob))
        coefficients = gammaln(X.sum(axis=1) + 1) - log_factorials(X)
        log_pmf = X @ log_probabilities.T + coefficients[:, None]
        if impossible.any():
            # A count in a category of probability zero (0 ** 0 = 1 otherwise).
            log_pmf[(X > 0).astype(np.float64) @ impossible.T > 0] = -np.inf
        return log_pmf, None

    def _emission_statistics(self, X, posteriors, cache):
        return {"obs": posteriors.T @ X}

    def _emission_features(self, X, cache):
        return np.broadcast_to(X[:, None, :], (X.shape[0], self.n_components, X.shape[1]))

    def _statistics_from_features(self, sums):
        return {"obs": sums}

    def _emission_mstep(self, statistics):
        if "e" in self.params:
            prior = self._prior("emissionprob_prior", np.shape(self.emissionprob_))
            self.emissionprob_ = dirichlet_map(statistics["obs"], prior, self.emissionprob_)

    def _emission_coordinates(self, X):
        return {"emissionprob_": ("probabilities", None)}

    def _emission_n_parameters(self):
        n_components, n_features = np.shape(self.emissionprob_)
        return {"e": n_components * (n_features - 1)}

    def _sample_emissions(self, states, random_state):
        trials = check_trials(self.n_trials)
        values = np.unique(trials) if trials is not None else np.array([])
        if values.size != 1:
            raise ValueError(
                "MultinomialHMM.sample draws rows of n_trials trials: set n_trials to one "
                f"number of trials (e.g. set_params(n_trials=10)); it is {self.n_trials!r}."
            )
        emissionprob = np.asarray(self.emissionprob_, dtype=np.float64)
        X = np.zeros((len(states), emissionprob.shape[1]), dtype=np.int64)
        for state in np.unique(states):
            rows = np.flatnonzero(states == state)
            probabilities = emissionprob[state] / emissionprob[state].sum()
            X[rows] = random_state.multinomial(int(values[0]), probabilities, size=rows.size)
        return X

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        tags.input_tags.categorical = True
        return tags


class PoissonHMM(BaseHMM):
    """Hidden Markov model with independent Poisson emissions per feature.

    A drop-in replacement for ``hmmlearn.hmm.PoissonHMM``: ``X`` holds
    non-negative whole-number counts.  NaN (or a masked entry of a masked
    array) marks a missing count: its feature's factor is left out of
    p(x_t | z_t) and of that feature's sums in the M step (each feature
    has its own weight); inf is an error.

    Parameters
    ----------
    n_components : int, default=1
        Number of hidden states.
    startprob_prior, transmat_prior : float or array, default=1.0
        Dirichlet priors, as in :class:`GaussianHMM`.
    lambdas_prior, lambdas_weight : float or array, default=0.0
        Shape and rate (both >= 0) of a gamma prior on each rate: the M step gives
        (lambdas_prior + sum_t gamma_t x_t) / (lambdas_weight + sum_t gamma_t),
        per state.  (hmmlearn divides by the total count over all states
        instead, which is not the posterior mean; both agree without a prior.)
    algorithm, random_state, n_iter, tol, verbose, implementation
        As in :class:`GaussianHMM`.
    params, init_params : str, default="stl"
        "s" startprob, "t" transmat, "l" lambdas.
    startprob_init, transmat_init, lambdas_init : array-like, optional
        Initial values (clone-safe).
    n_init : int, default=1
    n_jobs : int, default=None
        Threads for the E step and the k-means initialisation, as in
        :class:`GaussianHMM`.
    acceleration : {"squarem", None}, default=None
        None: plain EM (hmmlearn's iterations); "squarem": batch EM
        accelerated by SQUAREM, as in :class:`GaussianHMM`.
    learning_method, learning_decay, learning_offset, total_samples, batch_size
        Stochastic EM, as in :class:`GaussianHMM`.

    Attributes
    ----------
    startprob_, transmat_ : ndarray
    lambdas_ : ndarray of shape (n_components, n_features)
        Poisson rates of each state and feature.
    monitor_, n_iter_, converged_, n_features_in_, n_features, n_batch_iter_
    filtered_state_, batch_log_likelihood_
        As in :class:`GaussianHMM`.

    Examples
    --------
    >>> import numpy as np
    >>> from skseq import PoissonHMM
    >>> rng = np.random.default_rng(0)
    >>> X = np.concatenate([rng.poisson(2, (60, 1)), rng.poisson(20, (60, 1))])
    >>> model = PoissonHMM(n_components=2, random_state=0).fit(X)
    >>> np.sort(model.lambdas_.ravel()).round(0)
    array([ 2., 21.])
    """

    _emission_letters = {"l": "lambdas_"}

    def __init__(
        self,
        n_components=1,
        startprob_prior=1.0,
        transmat_prior=1.0,
        lambdas_prior=0.0,
        lambdas_weight=0.0,
        algorithm="viterbi",
        random_state=None,
        n_iter=10,
        tol=1e-2,
        verbose=False,
        params="stl",
        init_params="stl",
        implementation="log",
        *,
        startprob_init=None,
        transmat_init=None,
        lambdas_init=None,
        n_init=1,
        n_jobs=None,
        acceleration=None,
        learning_method="batch",
        learning_decay=0.6,
        learning_offset=0.0,
        total_samples=None,
        batch_size=32,
    ):
        super().__init__(
            n_components,
            startprob_prior=startprob_prior,
            transmat_prior=transmat_prior,
            algorithm=algorithm,
            random_state=random_state,
            n_iter=n_iter,
            tol=tol,
            verbose=verbose,
            params=params,
            init_params=init_params,
            implementation=implementation,
            startprob_init=startprob_init,
            transmat_init=transmat_init,
            n_init=n_init,
            n_jobs=n_jobs,
            acceleration=acceleration,
            learning_method=learning_method,
            learning_decay=learning_decay,
            learning_offset=learning_offset,
            total_samples=total_samples,
            batch_size=batch_size,
        )
        self.lambdas_prior = lambdas_prior
        self.lambdas_weight = lambdas_weight
        self.lambdas_init = lambdas_init

    def _validate_X(self, X, reset):
        return validate_whole_numbers(self, X, reset, "counts", missing_supported=True)

    def _parameter_rules(self):
        # A gamma prior's shape and rate: non-negative keeps the rates
        # (prior + sum gamma x) / (weight + sum gamma) non-negative.  Checked
        # at fit, as every HMM's own priors.
        gamma_prior = at_fit(lambda n_features: optional(prior_rule(low=0.0)))
        return {
            **super()._parameter_rules(),
            "lambdas_prior": gamma_prior,
            "lambdas_weight": gamma_prior,
        }

    def _initialize_emissions(self, X, random_state):
        n_components, n_features = self.n_components, X.shape[1]
        lambdas = self._initial_value("lambdas_")
        X = observed_rows(X, n_components)  # missing counts filled in: initial values only
        if lambdas is None:
            if np.unique(X, axis=0).shape[0] >= n_components:
                lambdas = fit_kmeans(X, n_components, random_state, self.n_jobs).cluster_centers_
            else:
                lambdas = X.mean(axis=0) * random_state.uniform(
                    0.5, 1.5, (n_components, n_features)
                )
            lambdas = np.maximum(lambdas, 1e-3 * max(X.mean(), 1e-3))
        lambdas = np.array(lambdas, dtype=np.float64)
        if lambdas.shape != (n_components, n_features):
            raise ValueError(
                f"lambdas must have shape ({n_components}, {n_features}), got {lambdas.shape}."
            )
        if not np.all(np.isfinite(lambdas)) or np.any(lambdas <= 0):
            raise ValueError("lambdas must be positive and finite.")
        self.lambdas_ = lambdas

    def _check_emission_parameters(self, n_features):
        lambdas = np.array(self.lambdas_, dtype=np.float64)
        if lambdas.ndim != 2 or lambdas.shape[0] != self.n_components:
            raise ValueError(
                f"lambdas_ must have shape (n_components={self.n_components}, n_features), "
                f"got {lambdas.shape}."
            )
        if n_features is not None and lambdas.shape[1] != n_features:
            raise ValueError(
                f"X has {n_features} features, but the model's lambdas_ have {lambdas.shape[1]}."
            )
        if not np.all(np.isfinite(lambdas)) or np.any(lambdas < 0):
            raise ValueError("lambdas_ must be non-negative and finite.")

    def _emission_terms(self, X):
        lambdas = np.asarray(self.lambdas_, dtype=np.float64)
        log_rates = np.log(np.maximum(lambdas, 1e-300))
        missing = missing_entries(X)
        if missing is None:
            log_pmf = X @ log_rates.T - lambdas.sum(axis=1) - log_factorials(X)[:, None]
            return log_pmf, None
        # A missing count leaves its feature's factor out.
        counts = np.where(missing, 0.0, X)
        log_pmf = counts @ log_rates.T - (~missing) @ lambdas.T - log_factorials(counts)[:, None]
        return log_pmf, None

    def _emission_statistics(self, X, posteriors, cache):
        missing = missing_entries(X)
        if missing is None:
            missing_post = np.zeros((self.n_components, X.shape[1]))
            return {
                "post": posteriors.sum(axis=0),
                "obs": posteriors.T @ X,
                "missing_post": missing_post,
            }
        counts = np.where(missing, 0.0, X)
        return {
            "post": posteriors.sum(axis=0),
            "obs": posteriors.T @ counts,
            "missing_post": posteriors.T @ missing,
        }

    def _emission_features(self, X, cache):
        missing = missing_entries(X)
        if missing is None:
            missing, counts = np.zeros(X.shape), X
        else:
            counts = np.where(missing, 0.0, X)
        features = np.concatenate([np.ones((X.shape[0], 1)), counts, missing], axis=1)
        return np.broadcast_to(
            features[:, None, :], (X.shape[0], self.n_components, features.shape[1])
        )

    def _statistics_from_features(self, sums):
        n_features = (sums.shape[1] - 1) // 2
        return {
            "post": sums[:, 0],
            "obs": sums[:, 1 : 1 + n_features],
            "missing_post": sums[:, 1 + n_features :],
        }

    def _emission_mstep(self, statistics):
        if "l" not in self.params:
            return
        shape = self.lambdas_.shape
        prior = self._prior("lambdas_prior", shape)
        weight = self._prior("lambdas_weight", shape)
        # Each feature's own weight: exactly post where no count is missing.
        missing_post = statistics["missing_post"]
        post = np.maximum(statistics["post"][:, None] - missing_post, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            lambdas = (prior + statistics["obs"]) / (weight + post)
        # Where counts are missing, a weight at rounding level is no weight.
        rounding = np.where(missing_post != 0, 1e-12 * statistics["post"][:, None], 0.0)
        usable = np.isfinite(lambdas) & (post > rounding)
        self.lambdas_ = np.where(usable, lambdas, self.lambdas_)

    def _emission_coordinates(self, X):
        # Rates by their logs, in units of each feature's mean (observed) count.
        if missing_entries(X) is None:
            means = np.mean(X, axis=0) if X.shape[0] else np.ones(X.shape[1])
        else:
            means = np.nan_to_num(np.nanmean(np.where(np.isnan(X).all(axis=0), 1.0, X), axis=0))
        return {"lambdas_": ("positive", np.where(means > 0, means, 1.0))}

    def _emission_n_parameters(self):
        return {"l": self.lambdas_.size}

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        tags.input_tags.categorical = True
        tags.input_tags.allow_nan = True
        return tags

    def _sample_emissions(self, states, random_state):
        return random_state.poisson(self.lambdas_[states]).astype(np.float64)
