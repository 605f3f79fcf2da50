"""Smoke tests of the two studies' benchmark scripts, at tiny sizes (seconds).

``benchmarks/selective_copying.py`` and ``benchmarks/inductive_bias.py`` are
scripts, not modules of the package; their core functions are loaded from
the files so that the scripts cannot rot unnoticed.
"""

import importlib
import importlib.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_script(name):
    if str(BENCHMARKS) not in sys.path:  # the study scripts import study_harness from there
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"_study_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def selective_copying():
    return load_script("selective_copying")


@pytest.fixture(scope="module")
def inductive_bias():
    return load_script("inductive_bias")


def test_selective_copying_task_puts_the_data_tokens_at_the_markers(selective_copying):
    X, y, mask = selective_copying.make_selective_copying(
        5, n_noise=6, n_data=3, n_symbols=4, random_state=0
    )
    assert X.shape == (5, 12, 6) and y.shape == mask.shape == (5, 12)
    tokens = X.argmax(axis=2)
    for row in range(5):
        region = tokens[row, :9]
        data = region[region > 0]
        assert len(data) == 3 and np.all(data <= 4)
        np.testing.assert_array_equal(y[row, 9:], data)  # in order of appearance
        np.testing.assert_array_equal(tokens[row, 9:], 5)  # the marker
    np.testing.assert_array_equal(mask[:, 9:], 1.0)
    np.testing.assert_array_equal(mask[:, :9], 0.0)


def test_selective_copying_study_runs_every_model_on_the_same_budget(selective_copying):
    tiny = {
        "selective_ssm": dict(d_model=4, n_layers=1, d_state=2),
        "s4d": dict(d_model=4, n_layers=1, d_state=2),
        "elman_rnn": dict(d_model=4, n_layers=1),
        "transformer": dict(d_model=4, n_layers=1, n_heads=1, d_ff=4),
    }
    results = selective_copying.run_study(
        n_noise=4,
        n_data=2,
        n_symbols=3,
        passes=2,
        sequences_per_pass=8,
        batch_size=4,
        n_validation=8,
        n_test=8,
        architectures=tiny,
    )
    assert list(results["models"]) == list(selective_copying.MODELS)
    for entry in results["models"].values():
        assert entry["sequences_seen"] == [8, 16]
        assert len(entry["validation_accuracy"]) == 2
        assert 0.0 <= entry["test_accuracy"] <= 1.0
        assert entry["n_weights"] > 0
    assert "Selective SSM" in selective_copying.format_table(results)
    json.dumps(results)  # what --save writes


def test_selective_copying_models_have_about_equal_weights(selective_copying):
    # The study's claim rests on comparable capacity: the default sizes stay within 5 %.
    X, y, mask = selective_copying.make_selective_copying(
        2, n_noise=4, n_data=8, n_symbols=8, random_state=0
    )
    counts = []
    for estimator, hyperparameters in selective_copying.MODELS.values():
        model = estimator(**hyperparameters, max_iter=1, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(X, y, sample_weight=mask)
        counts.append(selective_copying.n_weights(model))
    assert max(counts) / min(counts) < 1.05, counts


def test_next_symbol_log_loss_of_the_true_model_is_its_log_likelihood(inductive_bias):
    symbols = inductive_bias.sample_sequences(4, 12, random_state=0)
    truth = inductive_bias.true_hmm()
    log_proba = inductive_bias.hmm_log_proba(truth, symbols)
    loss = inductive_bias.next_symbol_log_loss(log_proba, symbols)
    # Per predicted symbol: log p(x) minus the first symbol's log p(x_1), averaged.
    log_likelihood = truth.score_sequences(symbols.reshape(-1, 1), lengths=[12] * 4)
    first = np.log(truth.startprob_ @ truth.emissionprob_[:, symbols[:, 0]])
    np.testing.assert_allclose(loss, -(log_likelihood - first).sum() / (4 * 11), rtol=1e-12)


def test_inductive_bias_study_runs_every_model(inductive_bias):
    tiny = {
        "selective_ssm": dict(d_model=4, n_layers=1, d_state=2),
        "s4d": dict(d_model=4, n_layers=1, d_state=2),
        "elman_rnn": dict(d_model=4, n_layers=1),
        "transformer": dict(d_model=4, n_layers=1, n_heads=1, d_ff=4),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        results = inductive_bias.run_study(
            sizes=(10, 20),
            n_seeds=2,
            seq_len=12,
            n_test=10,
            sequence_budget=40,
            max_epochs=2,
            architectures=tiny,
        )
    assert results["true_log_loss"] < results["stationary_log_loss"]
    assert list(results["models"]) == list(inductive_bias.MODELS)
    for entry in results["models"].values():
        losses = np.array(entry["log_loss"])
        assert losses.shape == (2, 2) and np.all(np.isfinite(losses)) and np.all(losses > 0)
    assert "True model" in inductive_bias.format_table(results)
    json.dumps(results)


# -- the tuning harness (benchmarks/study_harness.py) -------------------------------------------


@pytest.fixture(scope="module")
def harness(selective_copying):
    return importlib.import_module("study_harness")  # the module the scripts import


TINY = {
    "selective_ssm": dict(d_model=4, n_layers=1, d_state=2),
    "s4d": dict(d_model=4, n_layers=1, d_state=2),
    "elman_rnn": dict(d_model=4, n_layers=1),
    "transformer": dict(d_model=4, n_layers=1, n_heads=1, d_ff=4),
}


def counting(run):
    """``run`` that also counts its calls (in ``.calls``)."""

    def counted(config):
        counted.calls += 1
        return run(config)

    counted.calls = 0
    return counted


def test_search_space_is_learning_rate_times_clipping_and_the_models_own_knob(harness):
    plain = harness.search_space("s4d", [1e-3, 1e-2, 1e-1])
    assert len(plain) == 6
    assert {(p["learning_rate"], p["max_grad_norm"]) for p in plain} == {
        (rate, clip) for rate in (1e-3, 1e-2, 1e-1) for clip in (1.0, None)
    }
    extra = {"elman_rnn": {"init_spectral_radius": [0.8, 1.0, 1.25]}}
    elman = harness.search_space("elman_rnn", [1e-3, 1e-2, 1e-1], extra)
    assert len(elman) == 18 and {p["init_spectral_radius"] for p in elman} == {0.8, 1.0, 1.25}
    # a learning_rate entry replaces the study's rates (the Transformer's smaller rates)
    smaller = harness.search_space("t", [1e-2, 1e-1, 1.0], {"t": {"learning_rate": [1e-4, 1e-3]}})
    assert sorted({p["learning_rate"] for p in smaller}) == [1e-4, 1e-3] and len(smaller) == 4


def test_both_studies_declare_the_same_protocol(selective_copying, inductive_bias, harness):
    for study in (selective_copying, inductive_bias):
        assert len(study.LEARNING_RATES) == 3
        assert set(study.EXTRA_SEARCH) == {"elman_rnn", "transformer"}
        assert study.EXTRA_SEARCH["elman_rnn"] == {"init_spectral_radius": [0.8, 1.0, 1.25]}
        assert study.grid_study is harness.grid_study  # one harness, not two copies
    # the Transformer's extra knob: a longer warm-up on the stream, smaller rates under fit
    assert "warmup_fraction" in selective_copying.EXTRA_SEARCH["transformer"]
    assert min(inductive_bias.EXTRA_SEARCH["transformer"]["learning_rate"]) < min(
        inductive_bias.LEARNING_RATES
    )
    assert harness.SEARCH_SEED not in harness.FINAL_SEEDS and len(harness.FINAL_SEEDS) >= 3


def test_config_key_ignores_key_order_and_sees_every_value(harness):
    config = dict(model="m", hyperparameters=dict(learning_rate=0.01, max_grad_norm=None), seed=1)
    same = dict(seed=1, hyperparameters=dict(max_grad_norm=None, learning_rate=0.01), model="m")
    assert harness.config_key(config) == harness.config_key(same)
    assert harness.config_key(config) != harness.config_key(dict(config, seed=2))
    other = dict(config, hyperparameters=dict(learning_rate=0.01, max_grad_norm=1.0))
    assert harness.config_key(config) != harness.config_key(other)


def test_run_cached_runs_once_and_then_reads_the_record(harness, tmp_path):
    config = dict(model="m", hyperparameters=dict(learning_rate=0.1), seed=0)
    run = counting(lambda config: dict(validation=0.5, test=0.25))
    first = harness.run_cached(tmp_path, config, run)
    again = harness.run_cached(tmp_path, config, run)
    assert run.calls == 1 and first == again
    assert first["config"] == config and first["metrics"] == dict(validation=0.5, test=0.25)
    assert first["cpu_seconds"] >= 0 and len(first["load_average"]) == 3
    path = harness.record_path(tmp_path, config)
    assert path.name == f"m-{harness.config_key(config)}.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no lock left behind
    record = json.loads(path.read_text())
    record["config"]["seed"] = 5  # an edited record no longer matches its key
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="another configuration"):
        harness.load_record(tmp_path, config)


def test_a_run_held_by_a_live_worker_is_skipped_and_a_dead_workers_is_taken_over(harness, tmp_path):
    config = dict(model="m", hyperparameters={}, seed=0)
    run = counting(lambda config: dict(validation=1.0))
    lock = harness.record_path(tmp_path, config).with_suffix(".lock")
    lock.write_text(f"host {os.getpid()}\n")  # this process: alive
    assert harness.run_cached(tmp_path, config, run) is None and run.calls == 0
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)  # fmt: skip
    lock.write_text(f"host {finished.stdout.strip()}\n")  # a process that has exited
    assert harness.run_cached(tmp_path, config, run)["metrics"] == dict(validation=1.0)
    assert run.calls == 1 and not lock.exists()


def test_select_takes_the_best_validation_and_the_first_on_ties(harness):
    records = [
        dict(config=dict(hyperparameters=dict(p=index)), metrics=dict(validation=value))
        for index, value in enumerate([0.3, 0.7, 0.7, 0.1])
    ]
    assert harness.select(records) == dict(p=1)
    assert harness.select(records, maximize=False) == dict(p=3)
    summary = harness.summarize([dict(metrics=dict(test=v), cpu_seconds=2.0) for v in (1.0, 3.0)])
    assert summary == dict(mean=2.0, std=1.0, n=2, cpu_seconds=4.0)


def test_a_study_stopped_midway_resumes_without_rerunning(harness, tmp_path):
    search = {
        "m": [dict(model="m", hyperparameters=dict(lr=lr), seed=0) for lr in (1, 2, 3)],
        "n": [dict(model="n", hyperparameters=dict(lr=lr), seed=0) for lr in (1, 2)],
    }

    def final(model, chosen):
        return [dict(model=model, hyperparameters=chosen, seed=seed) for seed in (1, 2)]

    def score(config):  # best at lr 2 on validation; the test metric shows the seed
        lr = config["hyperparameters"]["lr"]
        return dict(validation=-abs(lr - 2.0), test=float(config["seed"]))

    run = counting(score)
    first = harness.Study(tmp_path, search, final, run)
    assert first.run_all(max_runs=4) == 4  # stopped: m's search done, n's half done
    assert first.chosen("m") == dict(lr=2) and first.chosen("n") is None
    status = first.status(cost=lambda config: 10.0)
    assert status["finished"] == 4 and status["pending"] == 5
    assert not harness.study_summary(first)["complete"]
    order = [(c["model"], c["seed"]) for c in first.plan()[5:]]  # m's finals once n's are due
    assert order == [("m", 1), ("m", 2)]
    later = harness.Study(tmp_path, search, final, run)  # a new session
    assert later.run_all() == 5 and run.calls == 9  # 5 search + 4 final runs in all
    order = [(c["model"], c["seed"]) for c in later.plan()[5:]]
    assert order == [("m", 1), ("n", 1), ("m", 2), ("n", 2)]  # the models alternate
    assert later.status()["pending"] == 0 and later.run_all() == 0 and run.calls == 9
    for model in search:
        records = later.records(later.final_configs(model))
        assert [r["config"]["hyperparameters"] for r in records] == [dict(lr=2)] * 2
        assert harness.summarize(records)["mean"] == 1.5
    summary = harness.study_summary(later)
    assert summary["complete"] and summary["models"]["m"]["chosen"] == dict(lr=2)
    assert [point["validation"] for point in summary["models"]["m"]["search"]] == [-1.0, 0.0, -1.0]
    assert summary["models"]["n"]["final"] == {
        None: dict(mean=1.5, std=0.5, n=2, cpu_seconds=pytest.approx(
            sum(r["cpu_seconds"] for r in later.records(later.final_configs("n")))
        ), values=[1.0, 2.0], seeds=[1, 2])
    }  # fmt: skip
    json.dumps(summary)


def test_tuned_selective_copying_searches_short_and_runs_the_choice_at_every_length(
    selective_copying, tmp_path
):
    training = dict(
        selective_copying.TRAINING,
        passes=2,
        sequences_per_pass=8,
        batch_size=4,
        n_validation=8,
        n_test=8,
        validate_every=2,
    )
    study = selective_copying.tuned_study(
        tmp_path,
        lengths=(20, 24),
        training=training,
        architectures=TINY,
        learning_rates=(1e-2,),
        seeds=(1,),
    )
    # the declared extras stay: 2 clip values, x3 radii for Elman, x2 warm-ups for the Transformer
    assert {name: len(configs) for name, configs in study.search.items()} == {
        "selective_ssm": 2,
        "s4d": 2,
        "elman_rnn": 6,
        "transformer": 4,
    }
    assert study.run_all() == 14 + 4 * 2
    for name, configs in study.search.items():
        records = study.records(configs)
        assert {r["config"]["axis"]["value"] for r in records} == {20}
        best = max(r["metrics"]["validation"] for r in records)
        chosen = study.chosen(name)
        assert any(
            r["metrics"]["validation"] == best and r["config"]["hyperparameters"] == chosen
            for r in records
        )
        finals = study.records(study.final_configs(name))
        assert [r["config"]["axis"]["value"] for r in finals] == [20, 24]
        for record in finals:
            assert record["config"]["hyperparameters"] == chosen
            assert record["config"]["task"]["n_noise"] == record["config"]["axis"]["value"] - 16
            assert record["config"]["seed"] == 1
            metrics = record["metrics"]
            assert metrics["sequences_seen"] == [16] and metrics["steps"] == 4
            assert 0.0 <= metrics["test"] <= 1.0 and metrics["n_weights"] > 0
    assert "L = 24" in selective_copying.tuned_table(study)


def test_tuned_inductive_bias_selects_per_size_and_keeps_em_for_the_hmm(inductive_bias, tmp_path):
    training = dict(
        inductive_bias.TRAINING,
        seq_len=12,
        n_test=10,
        n_validation=10,
        sequence_budget=40,
        max_epochs=2,
    )
    study = inductive_bias.tuned_study(
        tmp_path,
        sizes=(10, 20),
        training=training,
        architectures=TINY,
        learning_rates=(1e-2,),
        extra={},
        seeds=(1, 2),
    )
    assert "hmm" not in study.search and study.models == list(inductive_bias.MODELS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        assert study.run_all() == 4 * 2 * 2 + 5 * 2 * 2
    for name in study.models:
        chosen = study.chosen(name)
        assert set(chosen) == {10, 20}
        if name == "hmm":
            assert chosen[10] == dict(n_init=3, n_iter=200, tol=1e-4)
        else:  # least validation log-loss at each size
            for size in (10, 20):
                records = [
                    r
                    for r in study.records(study.search[name])
                    if r["config"]["axis"]["value"] == size
                ]
                best = min(records, key=lambda r: r["metrics"]["validation"])
                assert best["config"]["hyperparameters"] == chosen[size]
        for record in study.records(study.final_configs(name)):
            assert record["config"]["seed"] in (1, 2)
            assert np.isfinite(record["metrics"]["test"]) and record["metrics"]["test"] > 0
            assert record["metrics"]["epochs"] >= 1
    assert "CategoricalHMM" in inductive_bias.tuned_table(study)


@pytest.mark.parametrize("name", ["selective_copying", "inductive_bias"])
def test_committed_records_match_their_keys_and_the_current_plan(name, request, harness):
    script = request.getfixturevalue(name)
    study = script.tuned_study(Path(__file__).resolve().parent.parent / script.DEFAULT_RESULTS)
    planned = {json.dumps(config, sort_keys=True) for config in study.plan()}
    for path in sorted(study.results_dir.glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        assert path.name == harness.record_path(study.results_dir, record["config"]).name
        assert json.dumps(record["config"], sort_keys=True) in planned, path.name
        assert record["cpu_seconds"] > 0 and "test" in record["metrics"]


def test_the_harness_examples_run(harness):
    import doctest

    failures, tried = doctest.testmod(harness, optionflags=doctest.ELLIPSIS)
    assert tried >= 5 and failures == 0
