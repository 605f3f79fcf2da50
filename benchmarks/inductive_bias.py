"""Inductive bias against data: next-symbol log-loss against the number of training sequences.

Sequences of ``seq_len`` symbols are sampled from a known CategoricalHMM
(:data:`TRUE_HMM`: 3 sticky states, 4 symbols).  Each model learns from
``n`` of them and predicts, at every step ``t`` of 500 held-out sequences,
the distribution of the next symbol given the symbols so far,
p(x_{t+1} | x_1..x_t); the score is the mean log-loss (nats per symbol) of
those predictions, over steps ``t = 1 .. seq_len - 1``.  The floor is the
log-loss of the true model, the same quantity computed with the parameters
that generated the data; the symbol frequencies of the stationary
distribution, which ignore the past, give the ceiling a model that learnt
nothing about time would reach.

The models:

* ``CategoricalHMM`` with the true number of states (3), fitted by EM (at
  most 200 iterations, 3 initialisations), predicting with
  :meth:`~skseq.hmm.CategoricalHMM.predict_next_proba`;
* four neural classifiers of about 5 300 weights each (the counts are
  printed), trained on next-symbol targets (input: the one-hot symbols
  x_1..x_{T-1}; per-step labels: x_2..x_T), predicting with
  ``predict_log_proba``: the selective SSM (2 layers, d_model 16, N 8), S4D
  (the same network with a time-invariant SSM, N 12), an Elman RNN (2
  layers, d_model 28) and a Transformer (2 layers, d_model 16, 2 heads,
  d_ff 44).  All four share one recipe: Adam at 3e-3, minibatches of 32,
  early stopping on 20 % of the training sequences held out (patience 5
  epochs, the best epoch's weights kept), at most ``max_epochs`` epochs and
  at most ``sequence_budget`` training sequences seen, whichever comes
  first.

Each point is the mean over ``n_seeds`` draws of the training set (and of
the initial weights); the error bars are the standard deviation over them.

Size.  The whole run must stay within about 20 minutes on two shared cores.
The defaults: length 50; n in 10, 30, 100, 300, 1000, 3000 (log-spaced; the
top end, 10 000, is cut: a neural fit there would see no more sequences
than at 3000 within the budget of 30 000 sequences seen per fit, and would
double the run); 3 seeds.  ``--sizes`` and ``--n-seeds`` change them.

The run above (``--save``) is the untuned protocol: one recipe for all.
``--tune`` runs the tuned protocol, through ``study_harness.py`` (shared with
``selective_copying.py``): at every size, each neural model's grid is fitted
with seed 0 (the same training sample for all) and scored on 500 validation
sequences drawn apart from the training and test sets: the learning rate
over :data:`LEARNING_RATES` (1e-3, 3e-3, 1e-2) times gradient clipping (norm
1 or none); times the initial spectral radius (0.8, 1.0, 1.25) for the Elman
RNN; for the Transformer a smaller learning rate (its grid is 3e-4, 1e-3,
3e-3, 1e-2; ``fit`` has no warm-up).  The point of least validation log-loss
is chosen per model and size and fitted again with seeds 1, 2 and 3 (new
training samples and initial weights); those give the test log-loss, mean
and standard deviation.  The HMM is not searched (EM with 3 restarts is its
own tuning): it runs the final seeds.  The budget, the early stopping and
the weights are those above.  228 search fits and 90 final fits; estimated
from the untuned run's fit times (:data:`UNTUNED_FIT_SECONDS`), about
2 550 CPU seconds; measured, 514.  Each fit is one JSON record in
``doc/gallery/data/studies/inductive_bias/``; a rerun skips the finished ones.

Run from the repository root (with skseq importable)::

    python benchmarks/inductive_bias.py
    python benchmarks/inductive_bias.py --save doc/gallery/data/inductive_bias.json
    OMP_NUM_THREADS=1 nice -n 19 python benchmarks/inductive_bias.py --tune
    python benchmarks/inductive_bias.py --status
"""

import argparse
import json
import math
import time

import numpy as np
from study_harness import (  # this directory, on sys.path
    FINAL_SEEDS,
    add_arguments,
    finish,
    grid_study,
    results_table,
)

from skseq.hmm import CategoricalHMM
from skseq.neural import (
    ElmanRNNClassifier,
    S4DClassifier,
    SelectiveSSMClassifier,
    TransformerClassifier,
)

#: The generating model: 3 sticky states, 4 symbols.
TRUE_HMM = dict(
    startprob=[0.5, 0.3, 0.2],
    transmat=[[0.85, 0.10, 0.05], [0.10, 0.80, 0.10], [0.05, 0.15, 0.80]],
    emissionprob=[[0.70, 0.10, 0.10, 0.10], [0.10, 0.60, 0.20, 0.10], [0.10, 0.10, 0.20, 0.60]],
)

#: Architecture of each neural model, at about 5 300 weights each.
NEURAL_MODELS = {
    "selective_ssm": (SelectiveSSMClassifier, dict(d_model=16, n_layers=2, d_state=8)),
    "s4d": (S4DClassifier, dict(d_model=16, n_layers=2, d_state=12)),
    "elman_rnn": (ElmanRNNClassifier, dict(d_model=28, n_layers=2)),
    "transformer": (TransformerClassifier, dict(d_model=16, n_layers=2, n_heads=2, d_ff=44)),
}

LABELS = {
    "hmm": "CategoricalHMM (EM)",
    "selective_ssm": "Selective SSM",
    "s4d": "S4D (LTI)",
    "elman_rnn": "Elman RNN",
    "transformer": "Transformer",
}

MODELS = ("hmm", *NEURAL_MODELS)


def true_hmm():
    """The generating CategoricalHMM, its parameters set by hand."""
    model = CategoricalHMM(n_components=len(TRUE_HMM["startprob"]))
    model.startprob_ = TRUE_HMM["startprob"]
    model.transmat_ = TRUE_HMM["transmat"]
    model.emissionprob_ = TRUE_HMM["emissionprob"]
    return model


def sample_sequences(n_sequences, seq_len, random_state):
    """``n_sequences`` independent sequences of the true model, as (n_sequences, seq_len) ints."""
    model = true_hmm()
    rng = np.random.RandomState(random_state)
    return np.stack([model.sample(seq_len, random_state=rng)[0][:, 0] for _ in range(n_sequences)])


def next_symbol_log_loss(log_proba, symbols):
    """Mean of -log p(x_{t+1} | x_1..x_t) over every sequence and step ``t < T``.

    ``log_proba[n, t, v]`` is the predicted log-probability that symbol
    ``t + 1`` of sequence ``n`` is ``v``; ``symbols`` is (n_sequences, T).
    """
    targets = symbols[:, 1:]
    picked = np.take_along_axis(log_proba[:, : targets.shape[1]], targets[..., None], axis=2)
    return float(-picked.mean())


def hmm_log_proba(model, symbols):
    """log p(x_{t+1} | x_1..x_t) of a CategoricalHMM, as (n_sequences, T, n_symbols)."""
    n_sequences, seq_len = symbols.shape
    proba = model.predict_next_proba(symbols.reshape(-1, 1), lengths=np.full(n_sequences, seq_len))
    with np.errstate(divide="ignore"):
        return np.log(proba).reshape(n_sequences, seq_len, -1)


def one_hot_inputs(symbols, n_symbols):
    """The network input: one-hot symbols x_1..x_{T-1}, float32."""
    return np.eye(n_symbols, dtype=np.float32)[symbols[:, :-1]]


def fit_model(
    name,
    train,
    *,
    seed,
    n_symbols,
    sequence_budget=30_000,
    max_epochs=200,
    learning_rate=3e-3,
    batch_size=32,
    architectures=None,
    extra=None,
):
    """Fit model ``name`` on the training sequences.

    ``extra`` holds further keywords of the estimator (``max_grad_norm``,
    ``init_spectral_radius``; for the HMM ``n_init``, ``n_iter``, ``tol``).

    Returns
    -------
    predict_log_proba : callable
        ``predict_log_proba(symbols)`` gives log p(x_{t+1} | x_1..x_t) for
        every sequence and step, (n_sequences, T - 1 or T, n_symbols).
    n_weights : int
    fitted : estimator
        The fitted model (its ``n_iter_`` counts the epochs or EM iterations).
    """
    if name == "hmm":
        model = CategoricalHMM(
            n_components=len(TRUE_HMM["startprob"]),
            **{**dict(n_iter=200, tol=1e-4, n_init=3), **(extra or {})},
            random_state=seed,
            n_features=n_symbols,
        )
        model.fit(train.reshape(-1, 1), lengths=np.full(len(train), train.shape[1]))
        n_states = model.n_components  # free parameters: start, transition and emission rows
        n_weights = (n_states - 1) + n_states * (n_states - 1) + n_states * (n_symbols - 1)
        return (lambda symbols: hmm_log_proba(model, symbols)), n_weights, model
    estimator, defaults = NEURAL_MODELS[name]
    hyperparameters = (architectures or {}).get(name, defaults)
    n_train = len(train) - max(1, round(0.2 * len(train)))  # what early stopping trains on
    model = estimator(
        **hyperparameters,
        learning_rate_init=learning_rate,
        batch_size=batch_size,
        max_iter=max(1, min(max_epochs, math.ceil(sequence_budget / n_train))),
        early_stopping=True,
        validation_fraction=0.2,
        n_iter_no_change=5,
        random_state=seed,
        **(extra or {}),
    )
    targets = train[:, 1:]
    missing = np.setdiff1d(np.arange(n_symbols), targets)
    if missing.size:
        raise ValueError(f"symbols {missing.tolist()} never occur as a target in the training set")
    model.fit(one_hot_inputs(train, n_symbols), targets)
    n_weights = int(sum(value.size for value in model.parameters_.values()))
    predict = lambda symbols: model.predict_log_proba(one_hot_inputs(symbols, n_symbols))  # noqa: E731
    return predict, n_weights, model


def run_study(
    models=MODELS,
    *,
    sizes=(10, 30, 100, 300, 1000, 3000),
    n_seeds=3,
    seq_len=50,
    n_test=500,
    sequence_budget=30_000,
    max_epochs=200,
    learning_rate=3e-3,
    architectures=None,
    log=None,
):
    """Log-loss of every model at every training-set size and seed; the floor and the ceiling.

    Returns
    -------
    results : dict
        ``settings``; ``true_log_loss`` (the floor) and ``stationary_log_loss``
        (the past-blind ceiling) on the test sequences; ``models``: for each
        name, ``label``, ``n_weights``, and ``log_loss`` and ``fit_seconds``
        as lists over ``sizes`` of lists over seeds.
    """
    n_symbols = len(TRUE_HMM["emissionprob"][0])
    test = sample_sequences(n_test, seq_len, random_state=123_456)
    truth = true_hmm()
    true_log_loss = next_symbol_log_loss(hmm_log_proba(truth, test), test)
    stationary = truth.get_stationary_distribution() @ truth.emissionprob_
    stationary_log_loss = float(-np.log(stationary)[test[:, 1:]].mean())
    results = dict(
        settings=dict(
            sizes=list(sizes),
            n_seeds=n_seeds,
            seq_len=seq_len,
            n_test=n_test,
            sequence_budget=sequence_budget,
            max_epochs=max_epochs,
            learning_rate=learning_rate,
            true_hmm=TRUE_HMM,
        ),
        true_log_loss=true_log_loss,
        stationary_log_loss=stationary_log_loss,
        models={
            name: dict(label=LABELS[name], n_weights=None, log_loss=[], fit_seconds=[])
            for name in models
        },
    )
    if log is not None:
        log(f"floor (true model) {true_log_loss:.4f}, stationary ceiling {stationary_log_loss:.4f}")
    for size in sizes:
        for entry in results["models"].values():
            entry["log_loss"].append([])
            entry["fit_seconds"].append([])
        for seed in range(n_seeds):
            train = sample_sequences(size, seq_len, random_state=seed * 1_000_003 + size)
            for name in models:
                entry = results["models"][name]
                started = time.perf_counter()
                predict_log_proba, entry["n_weights"], _ = fit_model(
                    name,
                    train,
                    seed=seed,
                    n_symbols=n_symbols,
                    sequence_budget=sequence_budget,
                    max_epochs=max_epochs,
                    learning_rate=learning_rate,
                    architectures=architectures,
                )
                entry["fit_seconds"][-1].append(time.perf_counter() - started)
                entry["log_loss"][-1].append(next_symbol_log_loss(predict_log_proba(test), test))
                if log is not None:
                    loss, seconds = entry["log_loss"][-1][-1], entry["fit_seconds"][-1][-1]
                    log(
                        f"n {size:5d} seed {seed}  {entry['label']:20s} log-loss "
                        f"{loss:.4f}  fit {seconds:5.1f} s"
                    )
    return results


def format_table(results):
    """Mean ± standard deviation of the log-loss over seeds, one column per size."""
    sizes = results["settings"]["sizes"]
    header = ("Model", "Weights", *(f"n = {size}" for size in sizes))
    rows = [
        (
            entry["label"],
            f"{entry['n_weights']:,}",
            *(f"{np.mean(losses):.3f} ± {np.std(losses):.3f}" for losses in entry["log_loss"]),
        )
        for entry in results["models"].values()
    ]
    rows.append(("True model (floor)", "17", *(f"{results['true_log_loss']:.3f}",) * len(sizes)))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    rule = "  ".join("=" * width for width in widths)
    lines = [rule, "  ".join(h.ljust(w) for h, w in zip(header, widths)), rule]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    return "\n".join([*lines, rule])


# -- the tuned protocol (one record per run, through study_harness) --------------------------

#: The search space: learning rate x clipping for all, and each model's own knob; the
#: Transformer's is a smaller learning rate (its grid starts at 3e-4; ``fit`` has no warm-up).
LEARNING_RATES = (1e-3, 3e-3, 1e-2)
EXTRA_SEARCH = {
    "elman_rnn": {"init_spectral_radius": [0.8, 1.0, 1.25]},
    "transformer": {"learning_rate": [3e-4, 1e-3, 3e-3, 1e-2]},
}

#: The HMM is not searched: EM with ``n_init`` restarts is its own tuning.
HMM_HYPERPARAMETERS = dict(n_init=3, n_iter=200, tol=1e-4)

SIZES = (10, 30, 100, 300, 1000, 3000)

#: The settings of every tuned run (today's: the same budget and early stopping).
TRAINING = dict(
    seq_len=50,
    n_test=500,
    n_validation=500,
    sequence_budget=30_000,
    max_epochs=200,
    batch_size=32,
)

DEFAULT_RESULTS = "doc/gallery/data/studies/inductive_bias"

#: Mean seconds of a fit in the untuned run (``doc/gallery/data/inductive_bias.json``, wall
#: time on shared cores), by model and size: the estimate of a run not yet measured.
UNTUNED_FIT_SECONDS = {
    "hmm": {10: 0.3, 30: 0.3, 100: 0.5, 300: 2.4, 1000: 7.4, 3000: 21.3},
    "selective_ssm": {10: 0.1, 30: 0.5, 100: 1.4, 300: 5.4, 1000: 19.6, 3000: 38.5},
    "s4d": {10: 0.4, 30: 0.5, 100: 1.9, 300: 3.6, 1000: 16.2, 3000: 36.4},
    "elman_rnn": {10: 0.1, 30: 0.2, 100: 0.4, 300: 1.0, 1000: 4.8, 3000: 12.4},
    "transformer": {10: 0.1, 30: 0.2, 100: 1.2, 300: 3.7, 1000: 15.5, 3000: 35.5},
}


def estimated_cpu(config):
    """Seconds of a tuned run not yet measured, from :data:`UNTUNED_FIT_SECONDS` (+1 s scoring)."""
    return UNTUNED_FIT_SECONDS[config["model"]].get(config["axis"]["value"], math.nan) + 1.0


def tuned_config(name, hyperparameters, n_train, seed, training=None, architecture=None):
    """The configuration of one tuned run (what its record's key hashes)."""
    if architecture is None:
        architecture = {} if name == "hmm" else NEURAL_MODELS[name][1]
    return dict(
        study="inductive_bias",
        model=name,
        architecture=dict(architecture),
        axis=dict(name="n_train", value=n_train),
        training=dict(TRAINING if training is None else training),
        hyperparameters=dict(hyperparameters),
        seed=seed,
    )


def run_tuned(config):
    """Fit and score one configuration of :func:`tuned_config`; its metrics.

    ``validation`` is the next-symbol log-loss on sequences drawn apart from
    the training and the test sets (the selection's metric), ``test`` the
    log-loss on the study's test sequences.
    """
    training, seed, size = config["training"], config["seed"], config["axis"]["value"]
    n_symbols = len(TRUE_HMM["emissionprob"][0])
    hyperparameters = dict(config["hyperparameters"])
    learning_rate = hyperparameters.pop("learning_rate", None)
    train = sample_sequences(size, training["seq_len"], random_state=seed * 1_000_003 + size)
    predict_log_proba, weights, model = fit_model(
        config["model"],
        train,
        seed=seed,
        n_symbols=n_symbols,
        sequence_budget=training["sequence_budget"],
        max_epochs=training["max_epochs"],
        learning_rate=learning_rate,
        batch_size=training["batch_size"],
        architectures={config["model"]: config["architecture"]},
        extra=hyperparameters,
    )
    validation = sample_sequences(training["n_validation"], training["seq_len"], 654_321)
    test = sample_sequences(training["n_test"], training["seq_len"], random_state=123_456)
    return dict(
        validation=next_symbol_log_loss(predict_log_proba(validation), validation),
        test=next_symbol_log_loss(predict_log_proba(test), test),
        n_weights=weights,
        epochs=int(model.n_iter_),
    )


def tuned_study(results_dir=DEFAULT_RESULTS, models=MODELS, sizes=SIZES, **overrides):
    """The :func:`study_harness.grid_study` of the tuned protocol.

    Each neural model's grid runs at every size with
    :data:`study_harness.SEARCH_SEED`; the point of least validation
    log-loss is chosen per size, and runs at that size with
    :data:`study_harness.FINAL_SEEDS`.  The HMM runs the final seeds only.
    ``overrides`` (``training``, ``architectures``, ``learning_rates``,
    ``extra``, ``seeds``) shrink it for tests.
    """
    training = overrides.get("training")
    architectures = overrides.get("architectures", {})
    return grid_study(
        results_dir,
        run_tuned,
        lambda name, point, size, seed: tuned_config(
            name, point, size, seed, training, architectures.get(name)
        ),
        models,
        search_axis=sizes,
        final_axis=sizes,
        learning_rates=overrides.get("learning_rates", LEARNING_RATES),
        extra=overrides.get("extra", EXTRA_SEARCH),
        seeds=overrides.get("seeds", FINAL_SEEDS),
        per_axis=True,
        fixed={"hmm": HMM_HYPERPARAMETERS} if "hmm" in models else None,
        maximize=False,
    )


def tuned_table(study):
    """Test log-loss (mean ± std over the final seeds) of each model at each size, so far."""
    return results_table(study, LABELS, "n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--sizes", nargs="+", type=int, default=[10, 30, 100, 300, 1000, 3000])
    parser.add_argument("--n-seeds", type=int, default=3)
    parser.add_argument("--seq-len", type=int, default=50)
    parser.add_argument("--n-test", type=int, default=500)
    parser.add_argument("--sequence-budget", type=int, default=30_000)
    parser.add_argument("--max-epochs", type=int, default=200)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--save", metavar="PATH", help="write the results as JSON to PATH")
    parser.add_argument(
        "--tune",
        action="store_true",
        help="the tuned protocol: search per size, then final seeds, cached per run",
    )
    add_arguments(parser, DEFAULT_RESULTS)
    args = parser.parse_args()

    if args.tune or args.status:
        study = tuned_study(args.results_dir, args.models, tuple(args.sizes))
        finish(study, args, estimated_cpu)
        print(tuned_table(study))
        return

    started = time.perf_counter()
    results = run_study(
        args.models,
        sizes=args.sizes,
        n_seeds=args.n_seeds,
        seq_len=args.seq_len,
        n_test=args.n_test,
        sequence_budget=args.sequence_budget,
        max_epochs=args.max_epochs,
        learning_rate=args.learning_rate,
        log=lambda line: print(line, flush=True),
    )
    print(
        f"\nNext-symbol log-loss (nats) on {args.n_test} held-out sequences of length "
        f"{args.seq_len}, mean ± std over {args.n_seeds} seeds; stationary (past-blind) "
        f"{results['stationary_log_loss']:.3f} (total run {time.perf_counter() - started:.0f} s)\n"
    )
    print(format_table(results))
    if args.save:
        with open(args.save, "w") as file:
            json.dump(results, file, indent=1)
            file.write("\n")
        print(f"\nsaved to {args.save}")


if __name__ == "__main__":
    main()
