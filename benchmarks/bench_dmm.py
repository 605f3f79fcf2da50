"""Evidence and speed of DeepMarkovModel.

1. Data of a known 2-D linear-Gaussian SSM: held-out ELBO and
   importance-weighted bound per step of a fitted DeepMarkovModel against the
   exact log-likelihood (``LinearGaussianSSM`` at the true parameters).
2. A noisy pendulum observed through ``(sin theta, cos theta)``: held-out
   bound per step of DeepMarkovModel against ``LinearGaussianSSM`` fitted by EM
   with the same latent dimension and a full-covariance ``GaussianHMM`` with
   about as many parameters as the DMM's generative model.
3. The yearly sunspots (``skseq.datasets.load_sunspots``) on the square-root
   scale ``2 (sqrt(1 + x) - 1)``, fitted on 1700-1928 and scored on 1929-2008
   by the one-step-ahead log predictive density log p(x_t | x_1700..x_{t-1}):
   exact for LinearGaussianSSM and GaussianHMM (``score`` with a
   ``sample_weight`` that selects one year), a particle filter with 2000
   particles for DeepMarkovModel (``log_predictive_density``); and the
   one-step 90 % predictive intervals of DeepMarkovModel (``forecast``) and of
   the best LinearGaussianSSM.  ``--save PATH`` writes them as JSON, which the
   gallery example ``doc/gallery/plot_dmm_sunspots.py`` plots (about a minute
   to compute on one core).
4. Speed: one training epoch of DeepMarkovModel against the same model in
   PyTorch (``torch_dmm.py``: the same parameters, loss and noise; autograd,
   Adam, ``clip_grad_norm_``), one thread each, float32 and float64.

Run ``python benchmarks/bench_dmm.py [--only speed] [--repeats 5]``; the
gallery's cached sunspots study is made by ``python benchmarks/bench_dmm.py
--only sunspots --save doc/gallery/data/dmm_sunspots.json``.
"""

import argparse
import json
import time
import warnings
from functools import partial

import numpy as np
from scipy.stats import norm
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from skseq import DeepMarkovModel, GaussianHMM, LinearGaussianSSM
from skseq.datasets import load_sunspots

try:
    import torch
    from torch_dmm import negative_elbo
except ImportError:  # torch is an optional peer
    torch = None


def best_times(function, repeats):
    """Smallest wall time and smallest CPU time of ``repeats`` calls (after a warm-up)."""
    function()
    wall, cpu = [], []
    for _ in range(repeats):
        wall_start, cpu_start = time.perf_counter(), time.process_time()
        function()
        wall.append(time.perf_counter() - wall_start)
        cpu.append(time.process_time() - cpu_start)
    return min(wall), min(cpu)


# -- 1. a known linear-Gaussian SSM -----------------------------------------------------------


def true_lgssm():
    model = LinearGaussianSSM(
        2,
        n_iter=0,
        transition_matrix_init=[[0.9, 0.2], [-0.2, 0.9]],
        observation_matrix_init=[[1.0, 0.5], [-0.3, 1.0]],
        transition_covariance_init=np.diag([0.3, 0.2]),
        observation_covariance_init=np.diag([0.2, 0.3]),
        transition_offset_init=np.zeros(2),
        observation_offset_init=np.zeros(2),
        initial_state_mean_init=np.zeros(2),
        initial_state_covariance_init=np.diag([1.0, 0.5]),
    )
    return model.fit(np.zeros((3, 2)))


def bench_lgssm(args):
    lgssm = true_lgssm()
    rng = np.random.RandomState(0)
    length = 50
    sequences = [lgssm.sample(length, random_state=rng)[0] for _ in range(300)]
    train, test = np.concatenate(sequences[:200]), np.concatenate(sequences[200:])
    train_lengths, test_lengths = [length] * 200, [length] * 100
    started = time.perf_counter()
    model = DeepMarkovModel(
        2,
        transition_hidden_size=16,
        emission_hidden_size=16,
        inference_hidden_size=16,
        learning_rate_init=1e-2,
        batch_size=20,
        max_iter=200,
        kl_anneal_epochs=5,
        n_iter_no_change=1000,
        early_stopping=False,
        dtype="float64",
        random_state=0,
    ).fit(train, lengths=train_lengths)
    fit_time = time.perf_counter() - started
    exact = lgssm.score(test, lengths=test_lengths) / len(test)
    print(
        f"\n1. Known 2-D LGSSM, {len(train_lengths)} training and {len(test_lengths)} held-out "
        f"sequences of {length} steps (fit: {model.n_iter_} epochs, {fit_time:.0f} s)"
    )
    print(f"  exact log-likelihood per step      {exact:9.4f}")
    for samples in (1, 10, 100, 1000):
        bound = model.set_params(n_importance_samples=samples).score(test, lengths=test_lengths)
        bound /= len(test)
        name = "ELBO (S = 1)" if samples == 1 else f"IW bound, S = {samples}"
        print(
            f"  {name:34s} {bound:9.4f}  ({100 * (exact - bound) / abs(exact):5.2f} % below exact)"
        )


# -- 2. a noisy pendulum through a non-linear map ---------------------------------------------


def pendulum(n_sequences, length, rng, dt=0.1):
    """theta'' = -g sin(theta) with noise on the velocity; observed as (sin, cos) + noise."""
    theta = rng.uniform(-np.pi, np.pi, n_sequences)
    omega = rng.normal(0.0, 1.0, n_sequences)
    observations = np.empty((n_sequences, length, 2))
    for t in range(length):
        observations[:, t] = np.stack([np.sin(theta), np.cos(theta)], axis=1)
        omega = omega - dt * 9.81 * np.sin(theta) + 0.05 * rng.normal(size=n_sequences)
        theta = theta + dt * omega
    observations += 0.05 * rng.normal(size=observations.shape)
    return observations.reshape(-1, 2)


def generative_parameters(model):
    """Parameters of the DMM's density p(x, z) (not of its inference network)."""
    return sum(
        value.size
        for key, value in model.parameters_.items()
        if not key.startswith(("rnn.", "combiner."))
    )


def bench_pendulum(args):
    rng = np.random.RandomState(0)
    length, n_train, n_test = 50, 100, 50
    train, test = pendulum(n_train, length, rng), pendulum(n_test, length, rng)
    train_lengths, test_lengths = [length] * n_train, [length] * n_test
    results = {}
    started = time.perf_counter()
    dmm = DeepMarkovModel(
        2,
        transition_hidden_size=16,
        emission_hidden_size=16,
        inference_hidden_size=16,
        learning_rate_init=1e-2,
        batch_size=20,
        max_iter=300,
        kl_anneal_epochs=5,
        n_iter_no_change=1000,
        early_stopping=False,
        n_importance_samples=1000,
        dtype="float64",
        random_state=0,
    ).fit(train, lengths=train_lengths)
    results["DeepMarkovModel (IW bound, S = 1000)"] = (
        dmm.score(test, lengths=test_lengths),
        generative_parameters(dmm),
        time.perf_counter() - started,
    )
    started = time.perf_counter()
    lds = LinearGaussianSSM(2, n_iter=300, random_state=0).fit(train, lengths=train_lengths)
    results["LinearGaussianSSM (k = 2, EM)"] = (
        lds.score(test, lengths=test_lengths),
        lds._n_parameters(),
        time.perf_counter() - started,
    )
    started = time.perf_counter()
    hmm = GaussianHMM(14, covariance_type="full", n_iter=300, random_state=0)
    hmm.fit(train, lengths=train_lengths)
    results["GaussianHMM (14 states, full)"] = (
        hmm.score(test, lengths=test_lengths),
        hmm._n_parameters(),
        time.perf_counter() - started,
    )
    print(
        f"\n2. Noisy pendulum through (sin, cos), {n_train} training and {n_test} held-out "
        f"sequences of {length} steps: held-out log-likelihood (bound) per step"
    )
    for name, (score, n_parameters, seconds) in results.items():
        print(
            f"  {name:38s} {score / len(test):8.4f}   {n_parameters:4d} parameters, "
            f"{seconds:5.1f} s"
        )


# -- 3. the yearly sunspots: one-step-ahead held-out log predictive density --------------

FIRST_HELD_OUT_YEAR = 1929


def sunspot_models():
    models = {}
    for k in (1, 2):
        models[f"LinearGaussianSSM (k = {k})"] = LinearGaussianSSM(
            k, n_iter=500, n_init=5, random_state=0
        )
    for n_states in (3, 5, 8):
        models[f"GaussianHMM ({n_states} states)"] = GaussianHMM(
            n_states, n_iter=500, n_init=5, random_state=0
        )
    models["DeepMarkovModel (m = 2)"] = DeepMarkovModel(
        2,
        transition_hidden_size=16,
        emission_hidden_size=16,
        inference_hidden_size=16,
        learning_rate_init=1e-2,
        max_iter=1500,
        kl_anneal_epochs=50,
        n_iter_no_change=10**6,
        n_importance_samples=2000,
        dtype="float64",
        random_state=0,
    )
    return models


def bench_sunspots(args):
    data = load_sunspots()
    series = 2 * (np.sqrt(1 + data.data[:, :1]) - 1)
    years = data.year
    split = int(np.searchsorted(years, FIRST_HELD_OUT_YEAR))
    models = sunspot_models()
    results = {}
    for name, model in models.items():
        started = time.perf_counter()
        model.fit(series[:split])
        if isinstance(model, DeepMarkovModel):
            per_year = model.log_predictive_density(series)
            n_parameters = generative_parameters(model)
        else:
            # The predictive density of year t alone: the log-likelihood of the
            # whole series with weight 1 on year t (its history conditions it).
            selectors = np.eye(len(series))
            per_year = np.array([model.score(series, sample_weight=w) for w in selectors])
            n_parameters = model._n_parameters()
        results[name] = {
            "log_predictive_density": per_year.tolist(),
            "held_out_per_year": float(per_year[split:].mean()),
            "n_parameters": int(n_parameters),
            "seconds": time.perf_counter() - started,
        }

    best_lds = max(
        (name for name in models if name.startswith("Linear")),
        key=lambda name: results[name]["held_out_per_year"],
    )
    dmm, lds = models["DeepMarkovModel (m = 2)"], models[best_lds]
    levels = (0.05, 0.5, 0.95)
    dmm_bands, lds_bands = [], []
    for t in range(split, len(series)):
        _, quantiles = dmm.forecast(series[:t], 1, quantiles=levels)
        dmm_bands.append(quantiles[:, 0, 0].tolist())
        mean, covariance = lds.forecast(series[:t], 1)
        spread = np.sqrt(covariance[0, 0, 0])
        lds_bands.append((mean[0, 0] + norm.ppf(levels) * spread).tolist())

    print(
        f"\n3. Yearly sunspots, square-root scale: fitted on {years[0]}-{years[split - 1]}, "
        f"one-step-ahead log predictive density of the {len(series) - split} held-out years "
        f"{years[split]}-{years[-1]}"
    )
    print(f"  {'model':30s} {'per year':>9s} {'parameters':>11s} {'fit + score':>12s}")
    for name, result in sorted(results.items(), key=lambda item: -item[1]["held_out_per_year"]):
        print(
            f"  {name:30s} {result['held_out_per_year']:9.3f} {result['n_parameters']:11d} "
            f"{result['seconds']:10.1f} s"
        )
    if args.save:
        study = {
            "description": "bench_dmm.py --only sunspots: one-step-ahead log predictive "
            "densities (every year, in the square-root scale) of models fitted on the years "
            "before first_held_out_year, and one-step 90 % predictive intervals (quantiles "
            "0.05, 0.5, 0.95) of the held-out years.",
            "first_held_out_year": FIRST_HELD_OUT_YEAR,
            "years": years.tolist(),
            "series": series[:, 0].tolist(),
            "models": results,
            "intervals": {"DeepMarkovModel (m = 2)": dmm_bands, best_lds: lds_bands},
        }
        with open(args.save, "w", encoding="utf-8") as file:
            json.dump(study, file, indent=1)
            file.write("\n")
        print(f"  wrote {args.save}")


# -- 4. one training epoch against PyTorch -----------------------------------------------------


def make_torch_epoch(model, X, n_sequences, length, batch_size, dtype):
    """One epoch of the same model, loss, Adam and clipping in PyTorch, from ``model``'s weights."""
    torch_dtype = getattr(torch, dtype)
    parameters = {
        key: torch.tensor(value, dtype=torch_dtype, requires_grad=True)
        for key, value in model.parameters_.items()
    }
    optimizer = torch.optim.Adam(parameters.values(), lr=1e-3)
    standardised = (X - X.mean(axis=0)) / X.std(axis=0)
    inputs = torch.tensor(standardised, dtype=torch_dtype).reshape(n_sequences, length, -1)
    observed = torch.ones_like(inputs)
    step_mask = torch.ones(n_sequences, length, dtype=torch_dtype)
    generator = torch.Generator().manual_seed(0)

    def torch_epoch():
        order = torch.randperm(n_sequences, generator=generator)
        for start in range(0, n_sequences, batch_size):
            rows = order[start : start + batch_size]
            noise = torch.randn(len(rows), length, 2, generator=generator, dtype=torch_dtype)
            optimizer.zero_grad(set_to_none=True)
            loss, _ = negative_elbo(
                parameters,
                inputs[rows],
                observed[rows],
                step_mask[rows],
                noise,
                kl_weight=1.0,
                emission="gaussian",
            )
            (loss / (len(rows) * length)).backward()
            torch.nn.utils.clip_grad_norm_(parameters.values(), 1.0)
            optimizer.step()

    return torch_epoch


def bench_speed(args):
    rng = np.random.RandomState(1)
    n_sequences, length, hidden = args.sequences, args.length, args.hidden
    X = pendulum(n_sequences, length, rng)
    lengths = [length] * n_sequences
    batch_size = 16
    for dtype in ("float32", "float64"):
        model = DeepMarkovModel(
            2,
            transition_hidden_size=hidden,
            emission_hidden_size=hidden,
            inference_hidden_size=hidden,
            batch_size=batch_size,
            learning_rate_init=1e-3,
            max_grad_norm=1.0,
            kl_anneal_epochs=0,
            dtype=dtype,
            random_state=0,
        )
        model.partial_fit(X, lengths=lengths)  # initialises; each timed call is one epoch
        ours = best_times(partial(model.partial_fit, X, lengths=lengths), args.repeats)
        theirs = None
        if torch is not None:
            torch_epoch = make_torch_epoch(model, X, n_sequences, length, batch_size, dtype)
            theirs = best_times(torch_epoch, args.repeats)
        line = f"  {dtype}: skseq {ours[0] * 1e3:8.1f} ms ({ours[1] * 1e3:8.1f} CPU)"
        if theirs is not None:
            line += (
                f" | torch {theirs[0] * 1e3:8.1f} ms ({theirs[1] * 1e3:8.1f} CPU)"
                f" | skseq / torch {ours[0] / theirs[0]:5.2f}x wall, "
                f"{ours[1] / theirs[1]:5.2f}x CPU"
            )
        if dtype == "float32":
            print(
                f"\n4. One training epoch: {n_sequences} sequences of {length} steps, batch "
                f"{batch_size}, latent 2, hidden {hidden}, Adam, clipping at norm 1, one thread"
            )
        print(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["lgssm", "pendulum", "sunspots", "speed"], default=None)
    parser.add_argument(
        "--save", default=None, help="with the sunspots study: write its results to this JSON file"
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sequences", type=int, default=64)
    parser.add_argument("--length", type=int, default=100)
    parser.add_argument("--hidden", type=int, default=32)
    args = parser.parse_args()
    if torch is not None:
        torch.set_num_threads(1)
    with threadpool_limits(limits=1), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if args.only in (None, "lgssm"):
            bench_lgssm(args)
        if args.only in (None, "pendulum"):
            bench_pendulum(args)
        if args.only in (None, "sunspots"):
            bench_sunspots(args)
        if args.only in (None, "speed"):
            bench_speed(args)


if __name__ == "__main__":
    main()
