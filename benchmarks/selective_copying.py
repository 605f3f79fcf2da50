"""Selective copying (Mamba paper, §4.1 and Table 1) at CPU scale, four sequence models.

Each sequence has a memorisation region of ``n_noise + n_data`` steps: ``n_data``
data tokens drawn from an alphabet of ``n_symbols`` sit at random positions
among ``n_noise`` noise tokens.  ``n_data`` marker steps follow; at the k-th
marker the model must output the k-th data token.  Because the data positions
vary, no fixed convolution kernel (no time-invariant SSM) picks them out: the
model must decide from each input whether to store it, which is what the
input-dependent step of the selective scan provides.

Tokens enter one-hot (noise 0, data 1..n_symbols, marker n_symbols + 1); the
targets are per-step labels, masked by ``sample_weight`` everywhere but at the
markers.  Four models are trained on the same stream of sequences, at about
20 000 weights each (the counts are printed): the selective SSM
(2 layers, d_model 32, N 16), S4D (the same network with a linear
time-invariant SSM, N 26 to match), an Elman RNN (2 layers, d_model 56) and a
Transformer (2 layers, d_model 32, 4 heads, d_ff 88).  The recipe, the same
for all: each ``partial_fit`` pass sees ``sequences_per_pass`` fresh sequences
(never one seen before) in minibatches of 32; Adam with beta_2 = 0.95 and
gradient clipping at norm 1; the learning rate warms up over the first 5 % of
the passes to its peak and then follows a cosine decay (set through
``set_params`` between passes).  Every model gets the same budget, the same
number of passes: there is no early stop.  After every pass the per-token
accuracy at the marker steps of 256 held-out sequences is recorded (the
learning curve); the accuracy reported at the end is measured on 2000
sequences never seen in training.

Size.  The study must run in about 15 minutes for all four models on two
shared cores, so the task is smaller than the paper's (4096 noise steps, 16
data tokens, alphabet 16): 64 noise steps with 8 data tokens among them,
alphabet 8 (sequences of 80 steps), and 60 passes of 1024 sequences (61 440
sequences seen by every model, 1920 Adam steps).  At that size the
selective SSM reached 99 % within the budget, at about 1.3 ms of CPU per
training sequence; the four models' training took 214 s of CPU in all, which
is about what it takes on a free core.  The saved run took 19 minutes of
wall-clock time, the two cores being shared with another study and other
jobs (the training got a quarter of a core on average).  ``--n-noise``,
``--passes`` and the widths in :data:`MODELS` scale it up.

The run above (``--save``) is the untuned protocol: the recipe was tuned for
the selective SSM only.  ``--tune`` runs the tuned protocol instead, through
``study_harness.py`` (shared with ``inductive_bias.py``), with an equal
budget for every model:

* the search, at length 80 with seed 0: the peak learning rate over
  :data:`LEARNING_RATES` (3e-3, 1e-2, 3e-2) times gradient clipping (norm 1
  or none) for every model; times the initial spectral radius of ``W_h``
  (0.8, 1.0, 1.25) for the Elman RNN; times the warm-up (5 % or 25 % of the
  passes) for the Transformer.  42 runs, each with the budget above (61 440
  sequences, 1920 Adam steps, the same weights); the point with the best
  accuracy on the 256 validation sequences after the last pass is chosen
  per model;
* the final runs: each model's chosen point at every length of
  :data:`LENGTHS` (80, 160, 320: 64, 144 and 304 noise steps, 8 data tokens)
  with seeds 1, 2 and 3 (never the search's seed), scored on 2000 test
  sequences; mean and standard deviation over the seeds.

The search runs at the short length only and its choice is reused at the
longer ones: the honest cheap protocol (a search per length would cost three
times as much, mostly at the longest).  Each run is one JSON record in
``doc/gallery/data/studies/selective_copying/`` (keyed by a hash of its
configuration); a rerun skips the finished ones, so an interrupted study
resumes where it stopped, and several processes may run it side by side.

Cost.  CPU milliseconds per training sequence, measured (one ``partial_fit``
pass of 128 sequences, one thread, load average 0.2; :data:`CPU_MS_PER_SEQUENCE`):

=============  ======  =======  =======
Model          L = 80  L = 160  L = 320
=============  ======  =======  =======
Selective SSM  1.18    3.01     5.34
S4D            0.97    2.01     3.35
Elman RNN      0.37    0.71     1.41
Transformer    0.63    1.28     3.01
=============  ======  =======  =======

With 61 440 sequences per run and 10 % for the validation and test passes,
the estimated CPU: the search 1 830 s (selective SSM 480, S4D 390, Elman RNN
450, Transformer 510); the final runs 640 s at length 80, 1 420 s at 160 and
2 660 s at 320; in all about 6 550 CPU seconds (1.8 hours of one core).
Length 640 would add about 5 300 s more.  ``--status`` prints what is
finished, the CPU it took and the estimate of what is left.

Run from the repository root (with skseq importable: ``pip install -e .`` or
``PYTHONPATH=.``; one thread per process and a low priority on shared cores)::

    python benchmarks/selective_copying.py
    python benchmarks/selective_copying.py --save doc/gallery/data/selective_copying.json
    python benchmarks/selective_copying.py --models selective_ssm s4d --help
    OMP_NUM_THREADS=1 nice -n 19 python benchmarks/selective_copying.py --tune
    python benchmarks/selective_copying.py --status
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

from skseq.neural import (
    ElmanRNNClassifier,
    S4DClassifier,
    SelectiveSSMClassifier,
    TransformerClassifier,
)

#: Architecture of each model of the study, at about 20 000 weights each.
MODELS = {
    "selective_ssm": (SelectiveSSMClassifier, dict(d_model=32, n_layers=2, d_state=16)),
    "s4d": (S4DClassifier, dict(d_model=32, n_layers=2, d_state=26)),
    "elman_rnn": (ElmanRNNClassifier, dict(d_model=56, n_layers=2)),
    "transformer": (TransformerClassifier, dict(d_model=32, n_layers=2, n_heads=4, d_ff=88)),
}

LABELS = {
    "selective_ssm": "Selective SSM",
    "s4d": "S4D (LTI)",
    "elman_rnn": "Elman RNN",
    "transformer": "Transformer",
}


def make_selective_copying(n_sequences, *, n_noise, n_data, n_symbols, random_state):
    """One-hot inputs, per-step labels and the marker mask of the task.

    Returns
    -------
    X : ndarray of shape (n_sequences, n_noise + 2 * n_data, n_symbols + 2), float32
    y : ndarray of int, shape (n_sequences, n_noise + 2 * n_data)
        The data tokens at the marker steps, 0 elsewhere.
    mask : ndarray of shape (n_sequences, n_noise + 2 * n_data)
        1 at the marker steps, 0 elsewhere (the ``sample_weight``).
    """
    rng = np.random.default_rng(random_state)
    region = n_noise + n_data
    seq_len = region + n_data
    marker = n_symbols + 1
    tokens = np.zeros((n_sequences, seq_len), dtype=np.intp)
    data = rng.integers(1, n_symbols + 1, size=(n_sequences, n_data))
    # n_data distinct sorted positions per sequence: the first n_data of a random permutation.
    positions = np.sort(np.argsort(rng.random((n_sequences, region)), axis=1)[:, :n_data], axis=1)
    rows = np.arange(n_sequences)[:, None]
    tokens[rows, positions] = data
    tokens[:, region:] = marker
    X = np.eye(n_symbols + 2, dtype=np.float32)[tokens]
    y = np.zeros((n_sequences, seq_len), dtype=np.intp)
    y[:, region:] = data
    mask = np.zeros((n_sequences, seq_len))
    mask[:, region:] = 1.0
    return X, y, mask


def marker_accuracy(model, X, y, mask):
    """Per-token accuracy at the marker steps."""
    return model.score(X, y, sample_weight=mask)


def learning_rate_at(step_fraction, peak, warmup_fraction):
    """Linear warm-up to ``peak``, then cosine decay to ``peak / 20``."""
    if step_fraction < warmup_fraction:
        return peak * (0.1 + 0.9 * step_fraction / warmup_fraction)
    progress = (step_fraction - warmup_fraction) / (1 - warmup_fraction)
    return peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))


def n_weights(model):
    """Number of trained weights of a fitted network."""
    return int(sum(value.size for value in model.parameters_.values()))


def train_on_stream(
    model,
    task,
    *,
    passes,
    sequences_per_pass,
    learning_rate,
    warmup_fraction,
    validation,
    seed,
    validate_every=1,
    log=None,
):
    """Train ``model`` by ``partial_fit`` on ``passes`` batches of fresh sequences.

    Every model given the same ``task``, ``passes``, ``sequences_per_pass``
    and ``seed`` sees the same sequences in the same order.  The validation
    accuracy is measured after every ``validate_every``-th pass and after
    the last one.

    Returns
    -------
    curve : dict
        ``sequences_seen`` and ``validation_accuracy`` after every pass,
        ``train_wall_seconds`` and ``train_cpu_seconds`` (the time spent in
        ``partial_fit`` only, without the validation passes).
    """
    classes = np.arange(task["n_symbols"] + 1)
    sequences_seen, accuracies = [], []
    wall = cpu = 0.0
    for index in range(passes):
        model.set_params(
            learning_rate_init=learning_rate_at(index / passes, learning_rate, warmup_fraction)
        )
        X, y, mask = make_selective_copying(
            sequences_per_pass, **task, random_state=seed * 1_000_003 + index
        )
        wall_started, cpu_started = time.perf_counter(), time.process_time()
        model.partial_fit(X, y, classes=classes, sample_weight=mask)
        wall += time.perf_counter() - wall_started
        cpu += time.process_time() - cpu_started
        if (index + 1) % validate_every and index + 1 < passes:
            continue
        sequences_seen.append(int(model.t_))
        accuracies.append(float(marker_accuracy(model, *validation)))
        if log is not None:
            log(
                f"  pass {index + 1:3d}: loss {model.loss_curve_[-1]:.4f}  "
                f"validation accuracy {accuracies[-1]:.4f}  train wall {wall:6.1f} s"
            )
    return dict(
        sequences_seen=sequences_seen,
        validation_accuracy=accuracies,
        train_wall_seconds=wall,
        train_cpu_seconds=cpu,
    )


def run_study(
    models=tuple(MODELS),
    *,
    n_noise=64,
    n_data=8,
    n_symbols=8,
    passes=60,
    sequences_per_pass=1024,
    batch_size=32,
    learning_rate=1e-2,
    beta_2=0.95,
    warmup_fraction=0.05,
    n_validation=256,
    n_test=2000,
    architectures=None,
    seed=0,
    n_jobs=None,
    log=None,
):
    """Train every model of ``models`` on the same stream of sequences; their results.

    ``architectures`` maps a model name to its hyperparameters (default
    :data:`MODELS`' ones).

    Returns
    -------
    results : dict
        ``task`` and ``training`` (the settings), and ``models``: for each
        name, ``n_weights``, ``test_accuracy`` and the curve of
        :func:`train_on_stream`.
    """
    task = dict(n_noise=n_noise, n_data=n_data, n_symbols=n_symbols)
    validation = make_selective_copying(n_validation, **task, random_state=10_000 + seed)
    test = make_selective_copying(n_test, **task, random_state=20_000 + seed)
    architectures = {} if architectures is None else architectures
    results = dict(
        task=dict(task, seq_len=n_noise + 2 * n_data),
        training=dict(
            passes=passes,
            sequences_per_pass=sequences_per_pass,
            batch_size=batch_size,
            learning_rate=learning_rate,
            beta_2=beta_2,
            warmup_fraction=warmup_fraction,
            n_validation=n_validation,
            n_test=n_test,
            seed=seed,
        ),
        models={},
    )
    for name in models:
        estimator, defaults = MODELS[name]
        hyperparameters = architectures.get(name, defaults)
        model = estimator(
            **hyperparameters,
            batch_size=batch_size,
            beta_2=beta_2,
            random_state=seed,
            n_jobs=n_jobs,
        )
        if log is not None:
            log(f"{LABELS[name]} {hyperparameters}")
        curve = train_on_stream(
            model,
            task,
            passes=passes,
            sequences_per_pass=sequences_per_pass,
            learning_rate=learning_rate,
            warmup_fraction=warmup_fraction,
            validation=validation,
            seed=seed,
            log=log,
        )
        results["models"][name] = dict(
            label=LABELS[name],
            hyperparameters=hyperparameters,
            n_weights=n_weights(model),
            test_accuracy=float(marker_accuracy(model, *test)),
            **curve,
        )
    return results


def format_table(results):
    """The results as a fixed-width text table (also valid RST)."""
    rows = [
        (
            entry["label"],
            f"{entry['n_weights']:,}",
            f"{entry['sequences_seen'][-1]:,}",
            f"{entry['test_accuracy']:.3f}",
            f"{entry['train_wall_seconds']:.0f}",
            f"{entry['train_cpu_seconds']:.0f}",
        )
        for entry in results["models"].values()
    ]
    header = ("Model", "Weights", "Sequences seen", "Accuracy", "Train wall s", "Train CPU s")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    rule = "  ".join("=" * width for width in widths)
    lines = [rule, "  ".join(h.ljust(w) for h, w in zip(header, widths)), rule]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    return "\n".join([*lines, rule])


# -- the tuned protocol (one record per run, through study_harness) --------------------------

#: The search space: peak learning rate x clipping for all, and each model's own knob.
LEARNING_RATES = (3e-3, 1e-2, 3e-2)
EXTRA_SEARCH = {
    "elman_rnn": {"init_spectral_radius": [0.8, 1.0, 1.25]},
    "transformer": {"warmup_fraction": [0.05, 0.25]},
}

#: Lengths of the final runs; the search runs at the first (``n_data`` 8: ``n_noise = L - 16``).
LENGTHS = (80, 160, 320)

#: The training settings of every tuned run: today's budget (61 440 sequences, 1920 Adam steps).
TRAINING = dict(
    passes=60,
    sequences_per_pass=1024,
    batch_size=32,
    beta_2=0.95,
    warmup_fraction=0.05,
    n_validation=256,
    n_test=2000,
    validate_every=4,
)

#: Measured CPU milliseconds per training sequence (one ``partial_fit`` pass on 128 sequences,
#: ``OMP_NUM_THREADS=1``, load average 0.2-0.3), by model and length; :func:`estimated_cpu`.
CPU_MS_PER_SEQUENCE = {
    "selective_ssm": {80: 1.18, 160: 3.01, 320: 5.34},
    "s4d": {80: 0.97, 160: 2.01, 320: 3.35},
    "elman_rnn": {80: 0.37, 160: 0.71, 320: 1.41},
    "transformer": {80: 0.63, 160: 1.28, 320: 3.01},
}

DEFAULT_RESULTS = "doc/gallery/data/studies/selective_copying"


def tuned_config(name, hyperparameters, seq_len, seed, training=None, architecture=None):
    """The configuration of one tuned run (what its record's key hashes)."""
    n_data, n_symbols = 8, 8
    return dict(
        study="selective_copying",
        model=name,
        architecture=dict(MODELS[name][1] if architecture is None else architecture),
        task=dict(n_noise=seq_len - 2 * n_data, n_data=n_data, n_symbols=n_symbols),
        axis=dict(name="seq_len", value=seq_len),
        training=dict(TRAINING if training is None else training),
        hyperparameters=dict(hyperparameters),
        seed=seed,
    )


def run_tuned(config):
    """Train and score one configuration of :func:`tuned_config`; its metrics."""
    estimator = MODELS[config["model"]][0]
    task, training, seed = config["task"], config["training"], config["seed"]
    hyperparameters = dict(config["hyperparameters"])
    learning_rate = hyperparameters.pop("learning_rate")
    warmup_fraction = hyperparameters.pop("warmup_fraction", training["warmup_fraction"])
    model = estimator(
        **config["architecture"],
        **hyperparameters,
        batch_size=training["batch_size"],
        beta_2=training["beta_2"],
        random_state=seed,
    )
    validation = make_selective_copying(
        training["n_validation"], **task, random_state=10_000 + seed
    )
    curve = train_on_stream(
        model,
        task,
        passes=training["passes"],
        sequences_per_pass=training["sequences_per_pass"],
        learning_rate=learning_rate,
        warmup_fraction=warmup_fraction,
        validation=validation,
        seed=seed,
        validate_every=training["validate_every"],
    )
    test = make_selective_copying(training["n_test"], **task, random_state=20_000 + seed)
    batches = math.ceil(training["sequences_per_pass"] / training["batch_size"])
    return dict(
        validation=curve["validation_accuracy"][-1],
        test=float(marker_accuracy(model, *test)),
        n_weights=n_weights(model),
        steps=training["passes"] * batches,
        **curve,
    )


def tuned_study(results_dir=DEFAULT_RESULTS, models=tuple(MODELS), lengths=LENGTHS, **overrides):
    """The :func:`study_harness.grid_study` of the tuned protocol.

    The search runs at ``lengths[0]`` with :data:`study_harness.SEARCH_SEED`;
    each model's chosen point then runs at every length with
    :data:`study_harness.FINAL_SEEDS`.  ``overrides`` (``training``,
    ``architectures``, ``learning_rates``, ``extra``, ``seeds``) shrink it
    for tests.
    """
    training = overrides.get("training")
    architectures = overrides.get("architectures", {})
    return grid_study(
        results_dir,
        run_tuned,
        lambda name, point, length, seed: tuned_config(
            name, point, length, seed, training, architectures.get(name)
        ),
        models,
        search_axis=lengths[:1],
        final_axis=lengths,
        learning_rates=overrides.get("learning_rates", LEARNING_RATES),
        extra=overrides.get("extra", EXTRA_SEARCH),
        seeds=overrides.get("seeds", FINAL_SEEDS),
    )


def estimated_cpu(config):
    """CPU seconds of a tuned run from :data:`CPU_MS_PER_SEQUENCE` (training only, +10 %)."""
    training = config["training"]
    sequences = training["passes"] * training["sequences_per_pass"]
    per_sequence = CPU_MS_PER_SEQUENCE[config["model"]][config["axis"]["value"]] / 1000
    return 1.1 * sequences * per_sequence


def tuned_table(study):
    """Test accuracy (mean ± std over the final seeds) of each model at each length, so far."""
    return results_table(study, LABELS, "L")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--n-noise", type=int, default=64)
    parser.add_argument("--n-data", type=int, default=8)
    parser.add_argument("--n-symbols", type=int, default=8)
    parser.add_argument("--passes", type=int, default=60, help="partial_fit passes")
    parser.add_argument("--sequences-per-pass", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-2, help="peak learning rate")
    parser.add_argument("--beta-2", type=float, default=0.95)
    parser.add_argument("--warmup-fraction", type=float, default=0.05)
    parser.add_argument("--n-validation", type=int, default=256)
    parser.add_argument("--n-test", type=int, default=2000)
    parser.add_argument("--n-jobs", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", metavar="PATH", help="write the results as JSON to PATH")
    parser.add_argument(
        "--tune",
        action="store_true",
        help="the tuned protocol: search, then final runs at every length, cached per run",
    )
    parser.add_argument("--lengths", nargs="+", type=int, default=list(LENGTHS))
    add_arguments(parser, DEFAULT_RESULTS)
    args = parser.parse_args()

    if args.tune or args.status:
        study = tuned_study(args.results_dir, args.models, tuple(args.lengths))
        finish(study, args, estimated_cpu)
        print(tuned_table(study))
        return

    started = time.perf_counter()
    results = run_study(
        args.models,
        n_noise=args.n_noise,
        n_data=args.n_data,
        n_symbols=args.n_symbols,
        passes=args.passes,
        sequences_per_pass=args.sequences_per_pass,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        beta_2=args.beta_2,
        warmup_fraction=args.warmup_fraction,
        n_validation=args.n_validation,
        n_test=args.n_test,
        seed=args.seed,
        n_jobs=args.n_jobs,
        log=lambda line: print(line, flush=True),
    )
    task = results["task"]
    print(
        f"\nSelective copying: {task['n_noise']} noise + {task['n_data']} data steps, then "
        f"{task['n_data']} markers (length {task['seq_len']}), alphabet {task['n_symbols']}; "
        f"per-token accuracy at the markers of {args.n_test} fresh sequences "
        f"(total run {time.perf_counter() - started:.0f} s)\n"
    )
    print(format_table(results))
    if args.save:
        with open(args.save, "w") as file:
            json.dump(results, file, indent=1)
            file.write("\n")
        print(f"\nsaved to {args.save}")


if __name__ == "__main__":
    main()
