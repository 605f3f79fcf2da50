"""benchmarks/bench_dask.py and the gallery example that plots its cache, at tiny sizes (seconds).

The benchmark is a script, not a module of the package; it is loaded from its
file.  Nothing here asserts a time: the tests check that the script measures
every configuration asked for and writes a cache that
``doc/gallery/plot_parallel.py`` plots, and that ``--save`` refuses to write
one from a busy machine (the load is faked).
"""

import importlib.util
import itertools
import json
import os
import runpy
import shutil
from pathlib import Path

import pytest

pytest.importorskip("distributed")
matplotlib = pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "bench_dask.py"
EXAMPLE = ROOT / "doc" / "gallery" / "plot_parallel.py"
TINY = ["--quick", "--sizes", "2", "40", "4", "40", "--wait", "0"]


@pytest.fixture
def bench():
    spec = importlib.util.spec_from_file_location("_bench_dask", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plot(example, monkeypatch):
    """Run the gallery example (headless); return its figure's axes."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = []
    monkeypatch.setattr(plt, "show", lambda: shown.append(plt.gcf()))
    runpy.run_path(str(example), run_name="__main__")
    assert len(shown) == 1
    axes = shown[0].axes
    plt.close("all")
    return axes


def test_the_benchmark_writes_a_cache_that_the_gallery_example_plots(
    bench, tmp_path, monkeypatch, capsys
):
    cache = tmp_path / "data" / "parallel.json"
    cache.parent.mkdir()
    configurations = ["threads1", "threads2", "processes1", "inprocess2"]
    arguments = TINY + ["--force", "--save", str(cache), "--configurations", *configurations[1:]]
    assert bench.main(arguments) == 0
    report = json.loads(cache.read_text(encoding="utf-8"))
    assert list(report["configurations"]) == configurations
    assert report["quick"] is True and isinstance(report["quiet"], bool)
    assert report["machine"]["logical_cpus"] == os.cpu_count()
    assert len(report["load_average_at_start"]) == 3
    assert len(report["measurements"]) == 2 * len(configurations)
    for measurement in report["measurements"]:
        assert measurement["rows"] in (80, 160)
        assert len(measurement["wall_seconds_per_iteration"]) == 1  # --quick: one repetition
        assert len(measurement["load_average_before"]) == 3
        assert len(measurement["load_average_after"]) == 3
        assert measurement["other_processes_cpu_cores"] >= 0
        workers = measurement["worker_processes_cpu_seconds_per_iteration"]
        if measurement["configuration"] != "processes1":
            assert workers == [0.0]  # threads of this process: in its own CPU time
    for key in configurations:
        entry = report["summary"][key]
        assert entry["rows"] == [80, 160] and len(entry["speedup"]) == 2
    assert report["summary"]["threads1"]["speedup"] == [1.0, 1.0]

    capsys.readouterr()
    shutil.copy(EXAMPLE, tmp_path)
    speedup, cpu = plot(tmp_path / EXAMPLE.name, monkeypatch)
    assert len(speedup.lines) >= len(configurations) and len(cpu.lines) >= len(configurations)
    assert "--quick smoke-test sizes" in capsys.readouterr().out  # says what the file is


def test_save_refuses_to_measure_when_the_load_does_not_come_down(
    bench, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(os, "getloadavg", lambda: (3.5, 3.0, 2.0))

    def never(*arguments):
        raise AssertionError("measured on a busy machine")

    monkeypatch.setattr(bench, "measure", never)
    cache = tmp_path / "parallel.json"
    assert bench.main(TINY + ["--max-load", "0.7", "--save", str(cache)]) == 1
    assert not cache.exists()
    assert "load average 3.50 above --max-load 0.7" in capsys.readouterr().err


def test_save_refuses_a_run_during_which_other_processes_took_the_cores(
    bench, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    # The machine was busy for 1000 s more between any two readings than the
    # benchmark's own CPU time: other processes ran.
    busy = itertools.count(step=1000.0)
    monkeypatch.setattr(bench, "machine_busy_seconds", lambda: next(busy))
    cache = tmp_path / "parallel.json"
    arguments = TINY + ["--configurations", "threads1", "--save", str(cache)]
    assert bench.main(arguments) == 1
    assert not cache.exists()
    assert "other processes used" in capsys.readouterr().err

    assert bench.main(arguments + ["--force"]) == 0  # written, and marked
    report = json.loads(cache.read_text(encoding="utf-8"))
    assert report["quiet"] is False and report["not_quiet_because"]


def test_the_gallery_example_plots_the_committed_cache(monkeypatch):
    speedup, cpu = plot(EXAMPLE, monkeypatch)
    assert speedup.lines
