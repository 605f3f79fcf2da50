"""The README's main job: ``python -m skseq demo`` on the bundled data."""

import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

from skseq import PoissonHMM, _demo
from skseq.datasets import load_nile, load_sunspots, load_us_macro


def test_bundled_data_sets_load():
    macro = load_us_macro()
    assert macro.data.shape == (203, 12) and np.all(np.isfinite(macro.data))
    assert (macro.year[0], macro.quarter[0], macro.year[-1], macro.quarter[-1]) == (
        1959,
        1,
        2009,
        3,
    )
    nile = load_nile()
    assert nile.data.shape == (100, 1) and nile.year[0] == 1871
    sunspots = load_sunspots()
    assert sunspots.data.shape == (309, 1) and np.all(sunspots.data >= 0)


def test_demo_runs_and_finds_the_known_structure():
    result = subprocess.run(
        [sys.executable, "-m", "skseq", "demo"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for model in ("GaussianHMM", "GMMHMM", "CategoricalHMM", "PoissonHMM"):
        assert model in out
    # The 2008-09 recession and the Nile's 1898-99 change point are found.
    assert "2008Q" in out.split("low-growth episodes:")[1].splitlines()[0]
    change_line = out.split("regime changes in:")[1].splitlines()[0]
    assert "1898" in change_line or "1899" in change_line
    assert "All fits done" in out
    # Sunspots: states by increasing rate, each line the stay and rate of its state.
    model = PoissonHMM(3, n_iter=200, n_init=3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(np.round(load_sunspots().data))
    section = out.split("(PoissonHMM)")[1].split("==")[0]
    pattern = re.compile(
        r"state (\d): expected stay ([\d.]+) steps; mean sunspots per year ([\d.]+)"
    )
    parsed = [(int(s), float(stay), float(rate)) for s, stay, rate in pattern.findall(section)]
    assert [state for state, _, _ in parsed] == np.argsort(model.lambdas_[:, 0]).tolist()
    for state, stay, rate in parsed:
        assert stay == pytest.approx(1 / (1 - model.transmat_[state, state]), abs=0.05)
        assert rate == pytest.approx(model.lambdas_[state, 0], abs=0.005)


def test_each_state_line_pairs_its_own_numbers_in_one_order(capsys):
    """The demo once printed PoissonHMM's expected stays in state order next to
    the rates sorted, pairing a stay with another state's rate."""
    model = PoissonHMM(3, init_params="", n_iter=1)
    model.startprob_ = [1 / 3] * 3
    model.transmat_ = [[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [0.05, 0.05, 0.9]]
    model.lambdas_ = [[50.0], [5.0], [20.0]]  # not in state order
    X = model.sample(300, random_state=0)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X)
    order = np.argsort(model.lambdas_[:, 0])
    _demo._report(
        "title", model, X, 0.0, order, lambda state: f"rate {model.lambdas_[state, 0]:.2f}"
    )
    lines = [line for line in capsys.readouterr().out.splitlines() if "expected stay" in line]
    pattern = re.compile(r"state (\d): expected stay ([\d.]+) steps; rate ([\d.]+)")
    parsed = [pattern.search(line).groups() for line in lines]
    assert [int(state) for state, _, _ in parsed] == order.tolist()
    for state, stay, rate in parsed:
        state = int(state)
        assert float(stay) == pytest.approx(1 / (1 - model.transmat_[state, state]), abs=0.05)
        assert float(rate) == pytest.approx(model.lambdas_[state, 0], abs=0.005)
    rates = [float(rate) for _, _, rate in parsed]
    assert rates == sorted(rates)
