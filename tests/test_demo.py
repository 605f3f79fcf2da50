"""The command line: ``python -m skseq demo`` (the README's first command) and its options."""

import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from skseq import PoissonHMM, _demo
from skseq.__main__ import main
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


@pytest.fixture(scope="module")
def demo_output():
    """What ``python -m skseq demo`` (README's first command, all families) prints."""
    result = subprocess.run(
        [sys.executable, "-m", "skseq", "demo"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_demo_runs_every_family_and_finds_the_known_structure(demo_output):
    out = demo_output
    for model in ("GaussianHMM", "GMMHMM", "CategoricalHMM", "PoissonHMM", "LinearGaussianSSM"):
        assert model in out
    for network in ("SelectiveSSM", "S4D", "ElmanRNN", "Transformer"):
        assert f"{network}Regressor: R^2" in out
    assert re.findall(r"^\[(\d+)/12\]", out, re.MULTILINE) == [str(k) for k in range(1, 13)]
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


_NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}


def _years(first, last):
    """A README year range such as 1977–82 or 2008–09: (1977, 1982), (2008, 2009)."""
    first = int(first)
    last = int(str(first)[: 4 - len(last)] + last)
    return first, last


def test_readme_states_what_the_demo_prints(demo_output):
    """README's paragraph on the demo says what the demo prints: its low-growth
    episodes, number of earthquake regimes, the Nile's change point, the networks'
    test years (README once put the change point at 1898; the demo prints 1899)."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    paragraph = " ".join(
        next(part for part in readme.split("\n\n") if part.startswith("The demo (")).split()
    )
    out = demo_output
    # The low-growth episodes, as years.
    claimed = re.search(r"low-growth episodes \(([^)]*)\)", paragraph).group(1)
    claimed = [_years(*span.split("–")) for span in re.split(r",\s*", claimed)]
    printed = out.split("low-growth episodes:")[1].splitlines()[0]
    printed = [
        (int(first[:4]), int((last or first)[:4]))
        for first, last in re.findall(r"(\d{4}Q\d)(?:-(\d{4}Q\d))?", printed)
    ]
    assert claimed == printed
    # The earthquake regimes: the number of states chosen by BIC.
    word = re.search(r"(\w+) earthquake regimes \(the number of states chosen by BIC\)", paragraph)
    best = re.search(r"PoissonHMM, (\d) states by BIC", out).group(1)
    assert _NUMBER_WORDS[word.group(1)] == int(best)
    # The Nile: one change, in the year README names.
    year = re.search(r"Nile's change point, a lower flow from (\d{4}) on", paragraph).group(1)
    change = out.split("regime changes in:")[1].splitlines()[0].strip()
    assert change == f"[{year}]"
    # The networks and the years they forecast.
    count, first, last = re.search(
        r"the (\w+) networks forecast the sunspot numbers of (\d{4})–(\d{4})", paragraph
    ).groups()
    assert f"scored on {first}-{last}" in out
    assert len(re.findall(r"^   \w+Regressor: R\^2", out, re.MULTILINE)) == _NUMBER_WORDS[count]


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


def test_help_lists_the_commands_and_the_families(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "demo" in out and "datasets" in out
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    out = capsys.readouterr().out
    assert "{hmm,lgssm,neural,all}" in out and "--plot FILE" in out and "--epochs N" in out


@pytest.mark.parametrize(
    "argv",
    [[], ["demo", "lds"], ["demo", "--epochs", "0"], ["demo", "--epochs", "x"], ["train"]],
    ids=["no command", "unknown family", "zero epochs", "epochs not int", "unknown command"],
)
def test_bad_arguments_exit_with_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_demo_leaves_numpy_print_options_alone(capsys):
    before = np.get_printoptions()
    assert main(["demo", "lgssm"]) == 0
    assert np.get_printoptions() == before


def test_run_demo_rejects_an_unknown_family():
    with pytest.raises(ValueError, match="family must be one of"):
        _demo.run_demo("svm")


def progress_steps(out):
    return [(int(done), int(total)) for done, total in re.findall(r"^\[(\d+)/(\d+)\]", out, re.M)]


def test_hmm_family_reports_every_hmm_and_the_earthquake_states(capsys):
    assert main(["demo", "hmm"]) == 0
    out = capsys.readouterr().out
    assert progress_steps(out) == [(k, 6) for k in range(1, 7)]
    bic = dict(
        re.findall(r"(\d): ([\d.]+)", out.split("BIC by number of states:")[1].splitlines()[0])
    )
    assert sorted(bic) == ["1", "2", "3", "4"]
    # The reported number of states is the one of least BIC.
    best = min(bic, key=lambda k: float(bic[k]))
    assert f"PoissonHMM, {best} states by BIC" in out
    assert "LinearGaussianSSM" not in out and "Regressor" not in out


def test_lgssm_family_finds_the_local_level_maximum_likelihood(capsys):
    assert main(["demo", "lgssm"]) == 0
    out = capsys.readouterr().out
    assert progress_steps(out) == [(1, 2), (2, 2)]
    level, noise = re.search(
        r"level noise variance (\d+), observation noise variance (\d+)", out
    ).groups()
    # The maximum-likelihood estimates of the literature (Durbin and Koopman):
    # 1469 and 15099; EM stops within half a percent of them.
    assert float(level) == pytest.approx(1469, rel=0.01)
    assert float(noise) == pytest.approx(15099, rel=0.01)
    assert "2 factor(s): log-likelihood" in out


def test_neural_family_on_tiny_settings(capsys):
    assert main(["demo", "neural", "--epochs", "2"]) == 0
    out = capsys.readouterr().out
    assert progress_steps(out) == [(k, 4) for k in range(1, 5)]
    scores = dict(re.findall(r"(\w+Regressor): R\^2 (-?[\d.]+) on the test years, 2 epochs", out))
    assert sorted(scores) == sorted(
        ["SelectiveSSMRegressor", "S4DRegressor", "ElmanRNNRegressor", "TransformerRegressor"]
    )
    assert all(np.isfinite(float(value)) for value in scores.values())


def test_sunspot_windows_never_train_on_the_test_years():
    series = np.arange(30, dtype=np.float32)
    years = np.arange(1900, 1930)
    X_train, y_train, X_test, y_test, test_years = _demo._sunspot_windows(series, years, 1920, 5)
    # Training targets are the next year's values of years before 1920.
    assert y_train.max() == 19 and np.array_equal(y_train, X_train + 1)
    assert np.array_equal(test_years, np.arange(1920, 1930))
    assert np.array_equal(y_test, series[20:]) and np.array_equal(X_test[:, -1], series[19:29])


@pytest.fixture(scope="module")
def demo_figure(tmp_path_factory):
    """``python -m skseq demo --epochs 2 --plot demo.png``, in this process: the PNG's path,
    what it printed to stderr, and the figure (kept open for inspection)."""
    pytest.importorskip("matplotlib")
    import contextlib
    import io

    path = tmp_path_factory.mktemp("demo") / "demo.png"
    figures = []

    def keep(drawings, plt):
        figures.append(figure_of(drawings, plt))
        return figures[-1]

    figure_of, _demo._figure = _demo._figure, keep
    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            assert main(["demo", "--epochs", "2", "--plot", str(path)]) == 0
    finally:
        _demo._figure = figure_of
    yield path, err.getvalue(), figures[0]
    import matplotlib.pyplot as plt

    plt.close(figures[0])


def test_plot_saves_a_figure(demo_figure):
    path, err, figure = demo_figure
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Figure saved to" in err
    titles = [axes.get_title() for axes in figure.axes if axes.get_title()]
    assert [title.split(":")[0] for title in titles] == [
        "PoissonHMM",
        "GaussianHMM",
        "LinearGaussianSSM",
        "Networks",
    ]


def _hidden_by(legend, axes):
    """The artists of ``axes`` drawn (partly) where ``legend`` is."""
    from matplotlib.collections import PolyCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    box = legend.get_window_extent()
    hidden = []
    for artist in axes.get_children():
        if isinstance(artist, Line2D):
            points = artist.get_transform().transform(artist.get_xydata())
            path = artist.get_transform().transform_path(artist.get_path())
            if artist.get_linestyle() in ("None", "", " "):
                covered = any(box.contains(x, y) for x, y in points)
            else:
                covered = path.intersects_bbox(box, filled=False)
        elif isinstance(artist, PolyCollection):
            transform = artist.get_transform()
            covered = any(
                transform.transform_path(path).intersects_bbox(box, filled=True)
                for path in artist.get_paths()
            )
        elif isinstance(artist, Rectangle) and artist is not axes.patch:
            covered = artist.get_window_extent().overlaps(box)
        else:
            continue
        if covered:
            hidden.append(artist.get_label() or type(artist).__name__)
    return hidden


def test_plot_legends_hide_no_data(demo_figure):
    """No legend covers a point, line, band or bar of its panel (the networks' legend
    once hid the 1957 sunspot peak); a twin axis's artists count for its panel."""
    figure = demo_figure[2]
    figure.canvas.draw()
    for axes in figure.axes:
        legend = axes.get_legend()
        if legend is None:
            continue
        panel = [other for other in figure.axes if other.bbox.bounds == axes.bbox.bounds]
        hidden = [label for other in panel for label in _hidden_by(legend, other)]
        assert not hidden, f"the legend of {axes.get_title()!r} hides {hidden}"


def test_plot_business_cycle_probability_has_its_own_axis(demo_figure):
    """The low-growth probability on a labelled 0-1 axis of its own, not the growth
    axis, and its shading below the top of that axis (not cut off)."""
    from matplotlib.collections import PolyCollection

    figure = demo_figure[2]
    growth = next(axes for axes in figure.axes if axes.get_title().startswith("GaussianHMM"))
    twins = [
        axes
        for axes in figure.axes
        if axes is not growth and axes.bbox.bounds == growth.bbox.bounds
    ]
    assert len(twins) == 1
    probability = twins[0]
    assert "p(low-growth state)" in probability.get_ylabel()
    assert "GDP growth" in growth.get_ylabel()
    bottom, top = probability.get_ylim()
    assert bottom == 0.0 and top >= 1.0
    assert [tick for tick in probability.get_yticks() if bottom <= tick <= top][-1] == 1.0
    shading = [c for c in probability.collections if isinstance(c, PolyCollection)]
    assert len(shading) == 1 and not any(
        isinstance(c, PolyCollection) for c in growth.collections
    )
    assert shading[0].get_paths()[0].vertices[:, 1].max() <= 1.0 < top
    labels = [text.get_text() for text in growth.get_legend().get_texts()]
    assert any("p(low-growth state)" in label for label in labels)


def test_plot_every_band_is_in_its_legend(demo_figure):
    """Each shaded band of the Nile's panel (smoothed level, forecast) has a legend entry."""
    figure = demo_figure[2]
    nile = next(
        axes for axes in figure.axes if axes.get_title().startswith("LinearGaussianSSM")
    )
    legend = nile.get_legend()
    bands = [collection for collection in nile.collections if collection.get_paths()]
    assert len(bands) == 2
    labels = [text.get_text() for text in legend.get_texts()]
    assert sum("95 % band" in label for label in labels) == len(bands)
    # Each band's colour is drawn in the legend, under its line.
    handle_colours = {
        tuple(np.round(patch.get_facecolor(), 3))
        for patch in legend.get_patches()
    }
    for band in bands:
        assert tuple(np.round(band.get_facecolor()[0], 3)) in handle_colours


def test_plot_without_matplotlib_says_so_before_any_work(monkeypatch, capsys):
    def no_matplotlib():
        raise ImportError(
            "--plot needs matplotlib, which is not installed (pip install matplotlib)."
        )

    monkeypatch.setattr(_demo, "pyplot", no_matplotlib)
    assert main(["demo", "--plot", "figure.png"]) == 2
    captured = capsys.readouterr()
    assert "--plot needs matplotlib" in captured.err and "[1/" not in captured.out


@pytest.mark.parametrize(
    "name, message",
    [
        ("missing/dir/x.png", "does not exist"),
        (".", "is a directory"),
        ("figure.notaformat", "matplotlib cannot save .notaformat files"),
    ],
    ids=["missing directory", "a directory", "unknown format"],
)
def test_plot_to_an_unusable_path_says_so_before_any_work(tmp_path, capsys, name, message):
    """``--plot /nonexistent/dir/x.png`` once ran every fit, then ended in matplotlib's
    traceback."""
    pytest.importorskip("matplotlib")
    path = tmp_path / name
    assert main(["demo", "lgssm", "--plot", str(path)]) == 2
    captured = capsys.readouterr()
    assert f"--plot {path}: " in captured.err and message in captured.err
    assert "[1/" not in captured.out
    with pytest.raises(ValueError, match=re.escape(message)):
        _demo.run_demo("lgssm", plot=str(path))
    assert "[1/" not in capsys.readouterr().out


def test_plot_to_an_unwritable_directory_says_so(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    import os

    # Root may write anywhere: the check asks os.access, made to refuse here.
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    assert main(["demo", "lgssm", "--plot", str(tmp_path / "x.png")]) == 2
    captured = capsys.readouterr()
    assert "cannot write there" in captured.err and "[1/" not in captured.out


def test_pyplot_error_names_matplotlib(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(ImportError, match="pip install matplotlib"):
        _demo.pyplot()


def test_datasets_command_lists_every_loader_with_its_licence(capsys):
    from skseq import datasets

    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    for name in datasets.__all__:
        assert f"{name}:" in out
    assert out.count("licence:") == len(datasets.__all__)


def test_datasets_command_names_each_source(capsys):
    """The command promises "size, source and licence" and once showed no source."""
    from skseq import datasets

    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    who = {
        "load_us_macro": "Federal Reserve Economic Data (FRED)",
        "load_nile": "Cobb, G. W. (1978)",
        "load_sunspots": "NOAA National Geophysical Data Center",
        "load_earthquakes": "W. Zucchini, I. L. MacDonald and R. Langrock",
        "load_danish_money": "Johansen, S. and Juselius, K. (1990)",
    }
    assert sorted(who) == sorted(datasets.__all__)
    for name, author in who.items():
        entry = out.split(f"{name}:")[1].splitlines()
        assert entry[1].startswith(f"    source: {author}"), entry[1]
        assert entry[2].startswith("    licence: ")
        # One sentence of the DESCR's source, without reST markup.
        descr = " ".join(getattr(datasets, name)().DESCR.split("Source:")[1].split())
        source = entry[1].removeprefix("    source: ")
        assert descr.replace("*", "").replace("``", "").startswith(source.rstrip("."))
        assert "*" not in source and "``" not in source
