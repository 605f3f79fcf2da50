"""Draw doc/user_guide/dmm_sunspots.png and print the table of doc/user_guide/dmm.rst.

The yearly sunspot numbers (``skseq.datasets.load_sunspots``, 1700-2008) on
the square-root scale ``2 (sqrt(1 + x) - 1)``: every model is fitted on
1700-1928 and scored on 1929-2008 by its one-step-ahead log predictive
density log p(x_t | x_1700..x_{t-1}) (the history includes the training
years): exact for LinearGaussianSSM and GaussianHMM (``score`` with a
``sample_weight`` that selects the held-out years), a particle filter with
2000 particles for DeepMarkovModel (``log_predictive_density``).  The plot
shows the held-out years with the one-step-ahead 90 % predictive intervals
of DeepMarkovModel (``forecast``) and of the best LinearGaussianSSM, and the
cumulative held-out log predictive density of each model.

Needs matplotlib; takes about a minute (it trains the models).  The doc
build does not run it (it only includes the committed PNG and table).

Run ``python doc/plot_dmm_sunspots.py`` from the repository root.
"""

import time
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy.stats import norm  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402

from skseq import DeepMarkovModel, GaussianHMM, LinearGaussianSSM  # noqa: E402
from skseq.datasets import load_sunspots  # noqa: E402

OUTPUT = Path(__file__).resolve().parent / "user_guide" / "dmm_sunspots.png"
FIRST_HELD_OUT_YEAR = 1929


def main():
    data = load_sunspots()
    series = 2 * (np.sqrt(1 + data.data[:, :1]) - 1)
    years = data.year
    split = int(np.searchsorted(years, FIRST_HELD_OUT_YEAR))
    train = series[:split]
    held_out = (np.arange(len(series)) >= split).astype(float)
    n_held_out = int(held_out.sum())

    models = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
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
        per_year, seconds = {}, {}
        for name, model in models.items():
            started = time.perf_counter()
            model.fit(train)
            if isinstance(model, DeepMarkovModel):
                per_year[name] = model.log_predictive_density(series)
            else:
                per_year[name] = np.array(
                    [
                        model.score(series, sample_weight=np.eye(len(series))[t])
                        for t in range(len(series))
                    ]
                )
            seconds[name] = time.perf_counter() - started

    print(f"Held-out years {FIRST_HELD_OUT_YEAR}-{years[-1]} ({n_held_out}), square-root scale")
    print("| model | held-out log predictive density per year | parameters | fit + score (s) |")
    print("|---|---|---|---|")
    for name, model in models.items():
        density = per_year[name][split:].mean()
        if isinstance(model, DeepMarkovModel):
            n_parameters = sum(
                value.size
                for key, value in model.parameters_.items()
                if not key.startswith(("rnn.", "combiner."))
            )
        else:
            n_parameters = model._n_parameters()
        print(f"| {name} | {density:.3f} | {n_parameters} | {seconds[name]:.1f} |")

    dmm = models["DeepMarkovModel (m = 2)"]
    best_lds = max(
        (name for name in models if name.startswith("Linear")),
        key=lambda name: per_year[name][split:].sum(),
    )
    lds = models[best_lds]
    dmm_bands, lds_bands = [], []
    for t in range(split, len(series)):
        _, quantiles = dmm.forecast(series[:t], 1, quantiles=(0.05, 0.5, 0.95))
        dmm_bands.append(quantiles[:, 0, 0])
        mean, covariance = lds.forecast(series[:t], 1)
        spread = np.sqrt(covariance[0, 0, 0])
        lds_bands.append(mean[0, 0] + norm.ppf([0.05, 0.5, 0.95]) * spread)
    dmm_bands, lds_bands = np.array(dmm_bands), np.array(lds_bands)

    figure, (top, bottom) = plt.subplots(
        2, 1, figsize=(7.5, 6.0), dpi=110, sharex=True, gridspec_kw={"height_ratios": [3, 2]}
    )
    held_years = years[split:]
    top.plot(years[split - 30 :], series[split - 30 :, 0], color="black", lw=1.2, label="observed")
    top.fill_between(
        held_years,
        dmm_bands[:, 0],
        dmm_bands[:, 2],
        color="C0",
        alpha=0.3,
        label="DeepMarkovModel, 90 % one-step interval",
    )
    top.plot(
        held_years, lds_bands[:, 0], color="C1", lw=0.8, ls="--", label=f"{best_lds}, 90 % interval"
    )
    top.plot(held_years, lds_bands[:, 2], color="C1", lw=0.8, ls="--")
    top.axvline(FIRST_HELD_OUT_YEAR - 0.5, color="grey", lw=0.8)
    top.set_ylabel("2 (sqrt(1 + sunspots) - 1)")
    top.legend(loc="upper left", fontsize=8)
    shown = ["DeepMarkovModel (m = 2)", best_lds, "GaussianHMM (8 states)"]
    for colour, name in zip(("C0", "C1", "C2"), shown, strict=True):
        bottom.plot(held_years, np.cumsum(per_year[name][split:]), color=colour, label=name)
    bottom.set_ylabel("cumulative held-out\nlog predictive density")
    bottom.set_xlabel("year")
    bottom.legend(loc="lower left", fontsize=8)
    figure.tight_layout()
    figure.savefig(OUTPUT)
    print(f"wrote {OUTPUT}")


if __name__ == "__main__":
    main()
