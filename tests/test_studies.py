"""Smoke tests of the two studies' benchmark scripts, at tiny sizes (seconds).

``benchmarks/selective_copying.py`` and ``benchmarks/inductive_bias.py`` are
scripts, not modules of the package; their core functions are loaded from
the files so that the scripts cannot rot unnoticed.
"""

import importlib.util
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_script(name):
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
