"""How good are DeepMarkovModel's default hyperparameters?

Data: sequences of 60 steps from a known linear-Gaussian SSM with a 2-D state
and 3 observed features (:func:`lgssm_data`, fixed seeds).  For each data
size and seed, a ``DeepMarkovModel(2, random_state=seed)`` is fitted with its
defaults on the training sequences, and scored on held-out sequences of the
same system: the importance-weighted bound (``score``, S =
``n_importance_samples``) and the ELBO (``score`` with S = 1) per held-out
step, against the exact log-likelihood per step
(:func:`skseq.inference.kalman_filter` at the true parameters).  The gap is
``(exact - bound) / |exact|`` in percent.  The training CPU time is that of
``fit`` alone.

``--settings`` adds other hyperparameters for comparison: ``previous`` (the
defaults before the adaptive schedule: a constant learning rate of 1e-3,
batch 32, at most 200 epochs, stopping after 10 epochs without a better
training loss) and ``tuned`` (the settings of ``bench_dmm.py``: learning rate
1e-2, hidden sizes 16, batch 20, float64, 200 epochs).

Run ``OMP_NUM_THREADS=1 python benchmarks/dmm_defaults.py [--sizes 50 300]
[--seeds 0 1 2] [--settings defaults previous tuned] [--set JSON]`` (one
thread: the CPU times are those of one core).
"""

import argparse
import json
import time
import warnings

import numpy as np
from bench_stream import random_lgssm
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from skseq import DeepMarkovModel
from skseq.inference import kalman_filter
from skseq.inference.kalman import LGSSMParameters, sample_lgssm

LENGTH = 60
N_HELD_OUT = 100

# The system: bench_stream.py's stable random model with a 2-D state and 3
# features (seed 0), whose observation noise is correlated across features.
TRUE_PARAMETERS = random_lgssm(2, 3, seed=0)

SETTINGS = {
    "defaults": {},
    "previous": dict(
        learning_rate="constant",
        learning_rate_init=1e-3,
        batch_size=32,
        max_iter=200,
        early_stopping=False,
        n_iter_no_change=10,
        kl_anneal_epochs=10,
    ),
    "tuned": dict(
        learning_rate="constant",
        transition_hidden_size=16,
        emission_hidden_size=16,
        inference_hidden_size=16,
        learning_rate_init=1e-2,
        batch_size=20,
        max_iter=200,
        kl_anneal_epochs=5,
        early_stopping=False,
        n_iter_no_change=1000,
        dtype="float64",
    ),
}


def lgssm_data(n_sequences, length, seed):
    """``n_sequences`` sequences of ``length`` steps of the true system, concatenated."""
    rng = np.random.RandomState(seed)
    X = [
        sample_lgssm(LGSSMParameters(**TRUE_PARAMETERS), length, random_state=rng).observations
        for _ in range(n_sequences)
    ]
    return np.concatenate(X), [length] * n_sequences


def exact_log_likelihood(X, lengths):
    return kalman_filter(LGSSMParameters(**TRUE_PARAMETERS), X, lengths=lengths).log_likelihood


def evaluate(n_train, seed, settings):
    """Fit on ``n_train`` sequences of data seed ``seed``; the held-out numbers."""
    train, train_lengths = lgssm_data(n_train, LENGTH, seed)
    test, test_lengths = lgssm_data(N_HELD_OUT, LENGTH, 1000 + seed)
    exact = exact_log_likelihood(test, test_lengths) / len(test)
    model = DeepMarkovModel(2, random_state=seed, **settings)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        started = time.process_time()
        model.fit(train, lengths=train_lengths)
        cpu = time.process_time() - started
    warned = any(issubclass(w.category, ConvergenceWarning) for w in caught)
    bound = model.score(test, lengths=test_lengths) / len(test)
    samples = model.n_importance_samples
    elbo = model.set_params(n_importance_samples=1).score(test, lengths=test_lengths)
    model.set_params(n_importance_samples=samples)
    elbo /= len(test)
    return {
        "exact": exact,
        "bound": bound,
        "elbo": elbo,
        "bound_gap": 100 * (exact - bound) / abs(exact),
        "elbo_gap": 100 * (exact - elbo) / abs(exact),
        "epochs": model.n_iter_,
        "cpu": cpu,
        "warned": warned,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 300])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--settings", nargs="+", choices=sorted(SETTINGS), default=["defaults"]
    )
    parser.add_argument(
        "--set",
        default="{}",
        help="JSON of hyperparameters set on top of every setting, e.g. '{\"verbose\": 1}'",
    )
    args = parser.parse_args()
    overrides = json.loads(args.set)
    print(
        f"2-D linear-Gaussian SSM, 3 features, sequences of {LENGTH} steps; "
        f"{N_HELD_OUT} held-out sequences; gaps below the exact log-likelihood per step"
    )
    header = (
        f"{'settings':9s} {'train':>5s} {'seed':>4s} {'exact':>8s} {'bound':>8s} {'gap %':>6s} "
        f"{'ELBO':>8s} {'gap %':>6s} {'epochs':>6s} {'CPU s':>7s}  warning"
    )
    print(header)
    with threadpool_limits(limits=1):
        for name in args.settings:
            for n_train in args.sizes:
                rows = []
                for seed in args.seeds:
                    row = evaluate(n_train, seed, {**SETTINGS[name], **overrides})
                    rows.append(row)
                    print(
                        f"{name:9s} {n_train:5d} {seed:4d} {row['exact']:8.4f} "
                        f"{row['bound']:8.4f} {row['bound_gap']:6.2f} {row['elbo']:8.4f} "
                        f"{row['elbo_gap']:6.2f} {row['epochs']:6d} {row['cpu']:7.1f}  "
                        f"{'ConvergenceWarning' if row['warned'] else ''}",
                        flush=True,
                    )
                mean = {key: np.mean([row[key] for row in rows]) for key in rows[0]}
                print(
                    f"{name:9s} {n_train:5d} {'mean':>4s} {mean['exact']:8.4f} "
                    f"{mean['bound']:8.4f} {mean['bound_gap']:6.2f} {mean['elbo']:8.4f} "
                    f"{mean['elbo_gap']:6.2f} {mean['epochs']:6.0f} {mean['cpu']:7.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
