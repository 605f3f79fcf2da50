"""``python -m skseq demo``: fit the HMMs on the bundled real data and report."""

import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from .datasets import load_nile, load_sunspots, load_us_macro
from .hmm import GMMHMM, CategoricalHMM, GaussianHMM, PoissonHMM


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


def _fit(model, X, **kwargs):
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, **kwargs)
    return time.perf_counter() - started


def _expected_stay(model, state):
    """1 / (1 - p(stay)): the mean number of steps a visit to ``state`` lasts."""
    stay = model.transmat_[state, state]
    return "absorbing (>1000 steps)" if stay > 1 - 1e-3 else f"{1.0 / (1.0 - stay):.1f} steps"


def _report(title, model, X, seconds, order, describe):
    """Print a fitted model's summary, then one line per state, states in ``order``.

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


def run_demo():
    """Fit each HMM to a bundled real data set and print what it found."""
    np.set_printoptions(precision=2, suppress=True)
    total = time.perf_counter()
    macro = load_us_macro()
    quarters = np.array([f"{y}Q{q}" for y, q in zip(macro.year, macro.quarter)])[1:]
    levels = macro.data[:, [0, 1]]  # real GDP and real consumption
    growth = 400 * np.diff(np.log(levels), axis=0)  # annualised % growth per quarter

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

    print(f"\nAll fits done in {time.perf_counter() - total:.1f} s.")
