"""The README's main job: ``python -m skseq demo`` on the bundled data."""

import subprocess
import sys

import numpy as np

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
