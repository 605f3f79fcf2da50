"""``python -m skseq demo``: every estimator family on the bundled real data.

Three families, each a list of steps on the data sets of
:mod:`skseq.datasets`:

``hmm``
    The five HMMs: business-cycle regimes in US GDP and consumption growth
    (Gaussian, Gaussian-mixture and categorical emissions), sunspot activity
    and earthquake counts (Poisson, the number of states chosen by BIC), the
    Nile's change point.
``lgssm``
    The local level model of the Nile fitted by EM (smoothed level, a
    forecast with 95 % bands) and a two-factor model of the five Danish
    money-demand series.
``neural``
    One-year-ahead forecasts of the sunspot numbers by the four networks
    (selective SSM, S4D, Elman RNN, Transformer), trained on 1700-1949 and
    scored on 1950-2008 against the persistence forecast.

Each step prints a progress line, then what the model found.  ``--plot
FILE`` draws the results into FILE (matplotlib).
"""

import sys
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from .datasets import load_danish_money, load_earthquakes, load_nile, load_sunspots, load_us_macro

FAMILIES = ("hmm", "lgssm", "neural")
# The share of a panel's data range added above the data for a legend in one row.
_LEGEND_ROOM = 0.25


def _episodes(labels, mask):
    """Runs of consecutive True entries of ``mask`` as 'first-last' label ranges."""
    runs, start = [], None
    for index, flag in enumerate(np.append(mask, False)):
        if flag and start is None:
            start = index
        elif not flag and start is not None:
            first, last = labels[start], labels[index - 1]
            runs.append(first if first == last else f"{first}-{last}")
            start = None
    return runs


def _fit(model, X, *args, **kwargs):
    """Fit ``model``, silencing convergence warnings; return the seconds taken."""
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, *args, **kwargs)
    return time.perf_counter() - started


def _expected_stay(model, state):
    """1 / (1 - p(stay)): the mean number of steps a visit to ``state`` lasts."""
    stay = model.transmat_[state, state]
    return "absorbing (>1000 steps)" if stay > 1 - 1e-3 else f"{1.0 / (1.0 - stay):.1f} steps"


def _report(title, model, X, seconds, order, describe):
    """Print a fitted HMM's summary, then one line per state, states in ``order``.

    Every report orders its states the same way: by increasing level (growth,
    activity, flow).

    ``describe(state)`` says what else the report shows about a state.  Every
    number of a state is on that state's line, so nothing can be paired with
    the wrong state, whatever the order.
    """
    print(f"\n== {title}")
    print(
        f"   {type(model).__name__}(n_components={model.n_components}): "
        f"log-likelihood {model.score(X):.2f}, {model.n_iter_} EM iterations "
        f"({'converged' if model.converged_ else 'not converged'}), "
        f"BIC {model.bic(X):.1f}, {seconds * 1000:.0f} ms"
    )
    for state in order:
        print(
            f"     state {state}: expected stay {_expected_stay(model, state)}; {describe(state)}"
        )


class _Progress:
    """Numbered progress lines, ``[step/total] family: what``, flushed at once."""

    def __init__(self, total):
        self.total, self.done = total, 0

    def __call__(self, family, what):
        self.done += 1
        print(f"\n[{self.done}/{self.total}] {family}: {what} ...", flush=True)


# -- hidden Markov models --------------------------------------------------------


def _hmm_demo(progress):
    from .hmm import GMMHMM, CategoricalHMM, GaussianHMM, PoissonHMM

    macro = load_us_macro()
    quarters = np.array([f"{y}Q{q}" for y, q in zip(macro.year, macro.quarter)])[1:]
    levels = macro.data[:, [0, 1]]  # real GDP and real consumption
    growth = 400 * np.diff(np.log(levels), axis=0)  # annualised % growth per quarter

    progress("hmm", "GaussianHMM on US GDP and consumption growth")
    model = GaussianHMM(2, covariance_type="full", n_iter=200, n_init=5, random_state=0)
    seconds = _fit(model, growth)
    order = np.argsort(model.means_[:, 0])  # low growth first
    slow = int(order[0])
    _report(
        "US business cycle: GDP and consumption growth, 1959-2009 (GaussianHMM)",
        model,
        growth,
        seconds,
        order,
        lambda state: (
            f"{'low-growth' if state == slow else 'expansion'}, mean annualised growth "
            f"(GDP, consumption) {model.means_[state]}"
        ),
    )
    states = model.predict(growth)
    print("   low-growth episodes:", ", ".join(_episodes(quarters, states == slow)))
    low_growth = model.predict_proba(growth)[:, slow]

    progress("hmm", "GMMHMM on the same series")
    model = GMMHMM(2, n_mix=2, n_iter=200, n_init=3, random_state=0)
    seconds = _fit(model, growth)
    _report(
        "The same series with two Gaussians per state (GMMHMM)",
        model,
        growth,
        seconds,
        np.argsort((model.weights_ * model.means_[:, :, 0]).sum(axis=1)),  # by mean GDP growth
        lambda state: (
            f"weights {model.weights_[state]}, component means "
            + "; ".join(str(np.round(mean, 2)) for mean in model.means_[state])
        ),
    )

    progress("hmm", "CategoricalHMM on GDP growth as symbols")
    symbols = np.digitize(growth[:, 0], [0.0, 3.0])[:, None]  # 0: <0 %, 1: 0-3 %, 2: >3 %
    model = CategoricalHMM(2, n_iter=200, n_init=5, random_state=0)
    seconds = _fit(model, symbols)
    _report(
        "GDP growth as symbols: contraction / slow / fast (CategoricalHMM)",
        model,
        symbols,
        seconds,
        np.argsort(model.emissionprob_ @ np.arange(3)),  # slowest first
        lambda state: f"p(contraction, slow, fast) {model.emissionprob_[state]}",
    )

    progress("hmm", "PoissonHMM on yearly sunspot numbers")
    sunspots = load_sunspots()
    counts = np.round(sunspots.data)
    model = PoissonHMM(3, n_iter=200, n_init=3, random_state=0)
    seconds = _fit(model, counts)
    _report(
        "Yearly sunspot numbers, 1700-2008 (PoissonHMM)",
        model,
        counts,
        seconds,
        np.argsort(model.lambdas_[:, 0]),  # quietest first
        lambda state: f"mean sunspots per year {model.lambdas_[state, 0]:.2f}",
    )

    progress("hmm", "PoissonHMM on earthquake counts, 1 to 4 states by BIC")
    quakes = load_earthquakes()
    bic, models, seconds = {}, {}, 0.0
    for n_states in range(1, 5):
        models[n_states] = PoissonHMM(n_states, n_iter=200, n_init=3, random_state=0)
        seconds += _fit(models[n_states], quakes.data)
        bic[n_states] = models[n_states].bic(quakes.data)
    best = min(bic, key=bic.get)
    print("   BIC by number of states:", ", ".join(f"{k}: {v:.1f}" for k, v in bic.items()))
    model = models[best]
    _report(
        f"Major earthquakes per year, 1900-2006 (PoissonHMM, {best} states by BIC)",
        model,
        quakes.data,
        seconds,
        np.argsort(model.lambdas_[:, 0]),
        lambda state: f"mean earthquakes per year {model.lambdas_[state, 0]:.2f}",
    )
    quake_level = model.lambdas_[model.predict(quakes.data), 0]

    progress("hmm", "GaussianHMM change point in the Nile's flow")
    nile = load_nile()
    model = GaussianHMM(2, n_iter=100, random_state=0, transmat_init=[[0.99, 0.01], [0.01, 0.99]])
    seconds = _fit(model, nile.data)
    _report(
        "Nile flow at Aswan, 1871-1970: a change point (GaussianHMM)",
        model,
        nile.data,
        seconds,
        np.argsort(model.means_[:, 0]),  # lower flow first
        lambda state: f"mean flow {model.means_[state, 0]:.2f}",
    )
    change = nile.year[1:][np.diff(model.predict(nile.data)) != 0]
    print("   regime changes in:", change.tolist())

    def draw_earthquakes(axes):
        axes.bar(quakes.year, quakes.data[:, 0], color="0.75", label="earthquakes (M >= 7)")
        axes.step(quakes.year, quake_level, where="mid", color="C3", label=f"{best}-state rate")
        axes.set_title(f"PoissonHMM: major earthquakes per year, {best} states (by BIC)")
        axes.set_xlabel("year")
        axes.set_ylabel("earthquakes per year")
        axes.legend(loc="upper right", fontsize="small")

    def draw_business_cycle(axes):
        time_axis = macro.year[1:] + (macro.quarter[1:] - 1) / 4
        # The probability on its own 0-1 axis (right), drawn behind the growth
        # line (left); both leave their top quarter free for the legend.
        probability = axes.twinx()
        axes.set_zorder(probability.get_zorder() + 1)
        axes.patch.set_visible(False)
        shading = probability.fill_between(
            time_axis,
            0.0,
            low_growth,
            step="mid",
            color="C0",
            alpha=0.3,
            linewidth=0,
            label="p(low-growth state), right axis",
        )
        probability.set_ylim(0.0, 1.0 + _LEGEND_ROOM)
        probability.set_yticks([0.0, 0.25, 0.5, 0.75, 1.0])
        probability.set_ylabel("p(low-growth state)")
        (line,) = axes.plot(
            time_axis, growth[:, 0], color="k", lw=1, label="GDP growth (% a year), left axis"
        )
        bottom, top = growth[:, 0].min() - 1, growth[:, 0].max() + 1
        axes.set_ylim(bottom, top + _LEGEND_ROOM * (top - bottom))
        axes.set_title("GaussianHMM: US business cycle, posterior of the low-growth state")
        axes.set_xlabel("year")
        axes.set_ylabel("GDP growth (% a year)")
        axes.legend(handles=[line, shading], loc="upper center", ncol=2, fontsize="small")

    return [draw_earthquakes, draw_business_cycle]


# -- linear-Gaussian state-space models ------------------------------------------------


def _lgssm_demo(progress):
    from .lds import LinearGaussianSSM

    progress("lgssm", "local level model of the Nile by EM")
    nile = load_nile()
    X = nile.data
    model = LinearGaussianSSM(
        n_components=1,
        transition_matrix_init=[[1.0]],
        observation_matrix_init=[[1.0]],
        params=["transition_covariance", "observation_covariance"],
    )
    seconds = _fit(model, X)
    state, variance = model.smooth(X)
    level = state[:, 0] + model.observation_offset_[0]
    band = 1.96 * np.sqrt(variance[:, 0, 0])
    n_ahead = 10
    means, covariances = model.forecast(X, n_ahead)
    forecast_band = 1.96 * np.sqrt(covariances[:, 0, 0])
    print("\n== Nile flow at Aswan, 1871-1970: the local level model (LinearGaussianSSM)")
    print(
        f"   level noise variance {model.transition_covariance_.item():.0f}, observation "
        f"noise variance {model.observation_covariance_.item():.0f} (maximum likelihood: "
        f"about 1469 and 15099), log-likelihood {model.score(X):.2f}, "
        f"{model.n_iter_} EM iterations, {seconds * 1000:.0f} ms"
    )
    for year in (1871, 1897, 1900, 1970):
        row = year - nile.year[0]
        print(f"     smoothed level in {year}: {level[row]:.0f} +- {band[row]:.0f}")
    print(
        f"   forecast for {nile.year[-1] + 1}-{nile.year[-1] + n_ahead}: "
        f"{means[0, 0]:.0f}, 95 % band {means[0, 0] - forecast_band[0]:.0f}-"
        f"{means[0, 0] + forecast_band[0]:.0f} next year, widening to +-"
        f"{forecast_band[-1]:.0f} in ten years"
    )

    progress("lgssm", "two-factor model of the five Danish money-demand series")
    money = load_danish_money()
    standardised = (money.data - money.data.mean(axis=0)) / money.data.std(axis=0)
    print("\n== Danish money demand, 1974Q1-1987Q3, 5 series (LinearGaussianSSM)")
    for n_factors in (1, 2):
        factor_model = LinearGaussianSSM(n_factors, n_iter=200, random_state=0)
        seconds = _fit(factor_model, standardised)
        print(
            f"   {n_factors} factor(s): log-likelihood {factor_model.score(standardised):.2f}, "
            f"BIC {factor_model.bic(standardised):.1f}, {factor_model.n_iter_} EM "
            f"iterations, {seconds * 1000:.0f} ms"
        )
    explained = 1 - factor_model.observation_covariance_.diagonal()
    print(
        "   share of each standardised series' variance not left to observation noise "
        "(2 factors): "
        + ", ".join(f"{name} {share:.2f}" for name, share in zip(money.feature_names, explained))
    )

    def draw(axes):
        years = nile.year
        future = np.arange(years[-1] + 1, years[-1] + 1 + n_ahead)
        (points,) = axes.plot(years, X[:, 0], ".", color="0.4", label="flow")
        (smoothed,) = axes.plot(years, level, color="C0")
        smoothed_band = axes.fill_between(
            years, level - band, level + band, color="C0", alpha=0.25, linewidth=0
        )
        (forecast,) = axes.plot(future, means[:, 0], color="C1")
        forecast_shading = axes.fill_between(
            future,
            means[:, 0] - forecast_band,
            means[:, 0] + forecast_band,
            color="C1",
            alpha=0.25,
            linewidth=0,
        )
        axes.set_title("LinearGaussianSSM: the Nile's local level by EM")
        axes.set_xlabel("year")
        axes.set_ylabel("flow (10^8 m^3)")
        # Each band in the legend under its line; the lower left is free of data.
        axes.legend(
            [points, (smoothed_band, smoothed), (forecast_shading, forecast)],
            ["flow", "smoothed level, 95 % band", "forecast, 95 % band"],
            loc="lower left",
            fontsize="small",
        )

    return [draw]


# -- neural sequence models ---------------------------------------------------------


def _sunspot_windows(series, years, first_test_year, window):
    """Windows of ``window`` years and, at each of their steps, the next year's value.

    Training windows predict only years before ``first_test_year``; there is
    one test window per later year, the ``window`` years before it, whose
    last step is that year's one-year-ahead forecast.
    """
    inputs = np.lib.stride_tricks.sliding_window_view(series[:-1], window)
    targets = np.lib.stride_tricks.sliding_window_view(series[1:], window)
    target_year = years[window:]  # the year the last step of each window predicts
    train, test = target_year < first_test_year, target_year >= first_test_year
    return inputs[train], targets[train], inputs[test], targets[test][:, -1], target_year[test]


def _neural_demo(progress, epochs=60):
    from .neural import ElmanRNNRegressor, S4DRegressor, SelectiveSSMRegressor, TransformerRegressor

    sunspots = load_sunspots()
    root = np.sqrt(sunspots.data[:, 0])  # the square root steadies the variance
    train_rows = sunspots.year < 1950
    centre, scale = root[train_rows].mean(), root[train_rows].std()
    series = ((root - centre) / scale).astype(np.float32)
    window = 22  # two solar cycles
    X_train, y_train, X_test, y_test, test_years = _sunspot_windows(
        series, sunspots.year, 1950, window
    )

    def r2(predicted):
        return 1 - ((predicted - y_test) ** 2).sum() / ((y_test - y_test.mean()) ** 2).sum()

    common = dict(learning_rate_init=1e-2, batch_size=32, max_iter=epochs, random_state=0)
    networks = [
        SelectiveSSMRegressor(d_model=16, n_layers=1, d_state=8, **common),
        S4DRegressor(d_model=16, n_layers=1, d_state=8, **common),
        ElmanRNNRegressor(d_model=16, n_layers=1, **common),
        TransformerRegressor(d_model=16, n_layers=1, n_heads=2, **common),
    ]
    results = {}
    print(
        f"\n== One-year-ahead sunspot forecasts: trained on {len(X_train)} windows of "
        f"{window} years (predicting 1722-1949), scored on 1950-2008"
    )
    print(f"   persistence (next year = this year): R^2 {r2(X_test[:, -1]):.3f}")
    for network in networks:
        name = type(network).__name__
        progress("neural", f"{name} on the sunspot windows")
        seconds = _fit(network, X_train, y_train)
        predicted = network.predict(X_test)[:, -1]
        results[name] = predicted
        print(
            f"   {name}: R^2 {r2(predicted):.3f} on the test years, {network.n_iter_} epochs, "
            f"{seconds:.1f} s"
        )

    def draw(axes):
        back = lambda z: (z * scale + centre) ** 2  # noqa: E731
        axes.plot(test_years, back(y_test), color="k", lw=2, label="sunspots")
        highest = back(y_test).max()
        for index, (name, predicted) in enumerate(results.items()):
            axes.plot(test_years, back(predicted), color=f"C{index}", lw=1, label=name)
            highest = max(highest, back(predicted).max())
        # Room above the highest curve for the legend, which would hide the 1957 peak.
        axes.set_ylim(0.0, highest * (1.0 + _LEGEND_ROOM))
        axes.set_title(
            "Networks: one-year-ahead sunspot forecasts from the previous 22 years, "
            "1950-2008 (not trained on)"
        )
        axes.set_xlabel("year")
        axes.set_ylabel("sunspot number")
        axes.legend(loc="upper center", fontsize="small", ncol=5)

    return [draw]


_STEPS = {"hmm": 6, "lgssm": 2, "neural": 4}
_DEMOS = {"hmm": _hmm_demo, "lgssm": _lgssm_demo, "neural": _neural_demo}


def pyplot():
    """matplotlib's pyplot on the Agg backend, or an ImportError that says how to get it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError(
            "--plot needs matplotlib, which is not installed (pip install matplotlib)."
        ) from error
    return plt


def check_plot_file(path):
    """Raise ValueError unless a figure can be saved to ``path`` (``--plot FILE``).

    Checked before any fitting, so that a mistyped path fails at once instead
    of in matplotlib after every fit: the folder must exist and be writable,
    ``path`` must not be a folder, and its extension (if any) must be a format
    matplotlib writes.
    """
    import os
    from pathlib import Path

    from matplotlib.backend_bases import FigureCanvasBase

    target = Path(path)
    folder = target.parent
    if target.is_dir():
        raise ValueError(
            f"--plot {path}: is a directory; give a file name, e.g. {target / 'demo.png'}."
        )
    if not folder.is_dir():
        raise ValueError(f"--plot {path}: the directory {folder} does not exist.")
    if not os.access(folder, os.W_OK | os.X_OK) or (
        target.exists() and not os.access(target, os.W_OK)
    ):
        raise ValueError(f"--plot {path}: cannot write there (permission denied).")
    supported = FigureCanvasBase.get_supported_filetypes()
    extension = target.suffix[1:].lower()
    if extension and extension not in supported:
        raise ValueError(
            f"--plot {path}: matplotlib cannot save .{extension} files; use one of "
            + ", ".join(f".{name}" for name in sorted(supported))
            + "."
        )


def _figure(drawings, plt):
    """One panel per drawing, stacked."""
    figure, axes = plt.subplots(len(drawings), 1, figsize=(10, 3.4 * len(drawings)))
    for draw, panel in zip(drawings, np.atleast_1d(axes)):
        draw(panel)
    figure.tight_layout()
    return figure


def run_demo(family="all", plot=None, epochs=60):
    """Run the demo of one estimator family (``"hmm"``, ``"lgssm"``, ``"neural"``) or ``"all"``.

    Prints progress lines and a report per model; with ``plot`` (a file
    name), saves a figure there (two panels for the HMMs, one for each other
    family).  ``epochs``: training epochs of each network.  Returns the
    seconds the fits took.
    """
    families = FAMILIES if family == "all" else (family,)
    if any(name not in _DEMOS for name in families):
        raise ValueError(f"family must be one of {FAMILIES + ('all',)}, got {family!r}.")
    plt = pyplot() if plot is not None else None  # fail before any work
    if plot is not None:
        check_plot_file(plot)
    total = time.perf_counter()
    progress = _Progress(sum(_STEPS[name] for name in families))
    options = {"neural": {"epochs": epochs}}
    with np.printoptions(precision=2, suppress=True):  # the reports' arrays; not global
        drawings = [
            draw for name in families for draw in _DEMOS[name](progress, **options.get(name, {}))
        ]
    seconds = time.perf_counter() - total
    print(f"\nAll fits done in {seconds:.1f} s.")
    if plt is not None:
        figure = _figure(drawings, plt)
        figure.savefig(plot)
        plt.close(figure)
        print(f"Figure saved to {plot}.", file=sys.stderr)
    return seconds
