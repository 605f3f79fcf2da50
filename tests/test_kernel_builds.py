"""How the kernels are built: the AVX2 builds (skseq._kernels.load) against the portable
ones, the bounds-checked debug build, and an unbuilt source tree."""

import importlib
import os
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from skseq import GaussianHMM, _kernels
from skseq.inference import elman_rnn, elman_rnn_backward
from skseq.inference import gaussian as inference_gaussian
from skseq.inference import hmm as inference_hmm
from skseq.inference import rnn as inference_rnn


def portable_and_fast(name):
    if not _kernels.cpu_has_avx2_fma():
        pytest.skip("this CPU has no AVX2/FMA")
    try:
        fast = importlib.import_module(f"skseq._kernels.{name}_avx2")
    except ImportError:
        pytest.skip("the AVX2 build is not available on this platform")
    return importlib.import_module(f"skseq._kernels.{name}"), fast


def test_load_picks_the_fast_build_and_can_be_forced_portable(monkeypatch):
    _, fast = portable_and_fast("_hmm")
    monkeypatch.delenv("SKSEQ_KERNELS", raising=False)  # the suite may run forced portable
    assert _kernels.load("_hmm") is fast
    monkeypatch.setenv("SKSEQ_KERNELS", "baseline")
    assert _kernels.load("_hmm").__name__ == "skseq._kernels._hmm"


@pytest.mark.parametrize("covariance_type", ["diag", "full"])
def test_hmm_fit_is_the_same_with_either_build(monkeypatch, covariance_type):
    hmm_portable, hmm_fast = portable_and_fast("_hmm")
    gaussian_portable, gaussian_fast = portable_and_fast("_gaussian")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 3))
    X[200:400] += 3
    X[17] = np.nan
    results = []
    for hmm_kernels, gaussian_kernels in (
        (hmm_fast, gaussian_fast),
        (hmm_portable, gaussian_portable),
    ):
        # The estimators reach the kernels only through the inference layer.
        monkeypatch.setattr(inference_hmm, "_hmm", hmm_kernels)
        monkeypatch.setattr(inference_gaussian, "_gaussian", gaussian_kernels)
        model = GaussianHMM(4, covariance_type=covariance_type, n_iter=5, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(X, lengths=[300, 300])
        results.append((model, model.score(X), model.predict_proba(X)))
    (fast_model, fast_score, fast_posteriors), (model, score, posteriors) = results
    np.testing.assert_allclose(fast_score, score, rtol=1e-10)
    np.testing.assert_allclose(fast_posteriors, posteriors, atol=1e-9)
    np.testing.assert_allclose(fast_model.means_, model.means_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(fast_model.covars_, model.covars_, rtol=1e-9, atol=1e-12)


def test_hard_hmm_inputs_give_the_same_results_with_either_build(monkeypatch):
    """Emissions thousands of nats apart, states across the subnormal range,
    zeros and unreachable states: both builds agree (whichever of them redoes
    a sequence in log space, the numbers are exact to the same tolerance)."""
    from hmm_references import hard_model

    hmm_portable, hmm_fast = portable_and_fast("_hmm")
    for seed in range(40):
        model = hard_model(seed, 1 + seed % 5, 60, 2000.0, 0.3, 0.05, 0.4, seed % 2 == 0)
        results = []
        for kernels in (hmm_fast, hmm_portable):
            monkeypatch.setattr(inference_hmm, "_hmm", kernels)
            results.append(
                (inference_hmm.hmm_forward_backward(*model), inference_hmm.hmm_forward(*model))
            )
        (fast, fast_forward), (portable, portable_forward) = results
        np.testing.assert_allclose(fast.log_likelihood, portable.log_likelihood, rtol=1e-10)
        np.testing.assert_allclose(fast.posteriors, portable.posteriors, rtol=0, atol=1e-9)
        np.testing.assert_allclose(
            fast.transition_counts, portable.transition_counts, rtol=0, atol=1e-9
        )
        np.testing.assert_allclose(fast_forward.filtered, portable_forward.filtered, atol=1e-9)


@pytest.mark.skipif(
    os.environ.get("SKSEQ_DEBUG_KERNELS") != "1", reason="SKSEQ_DEBUG_KERNELS=1 is not set"
)
def test_debug_kernels_check_bounds():
    """With SKSEQ_DEBUG_KERNELS=1 the suite must run on bounds-checked kernels.

    Cython does not regenerate its C files when only the compiler directives
    change, so a debug install on top of a regular build could silently keep
    the unchecked kernels (setup.py forces a rebuild when the flavour changes).
    """
    from skseq._kernels import _build_info

    assert _build_info.bounds_checked()


def test_regular_kernels_do_not_check_bounds():
    from skseq._kernels import _build_info

    if os.environ.get("SKSEQ_DEBUG_KERNELS") == "1":
        pytest.skip("the debug build checks bounds")
    assert not _build_info.bounds_checked()


def test_unbuilt_source_tree_says_what_to_do(tmp_path):
    """Importing skseq from a source tree without compiled kernels explains itself."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    source = Path(_kernels.__file__).resolve().parents[1]
    tree = tmp_path / "checkout"
    shutil.copytree(
        source, tree / "skseq", ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__")
    )
    result = subprocess.run(
        [sys.executable, "-c", "import skseq"],
        cwd=tree,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert result.returncode != 0
    assert "ModuleNotFoundError" not in result.stderr
    assert "compiled kernels are missing" in result.stderr
    assert "pip install -e ." in result.stderr


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_elman_rnn_is_the_same_with_either_build(monkeypatch, dtype):
    portable, fast = portable_and_fast("_rnn")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 40, 3)).astype(dtype)
    weights = [
        rng.normal(size=(8, 3)),
        1.2 * rng.normal(size=(8, 8)) / np.sqrt(8),
        rng.normal(size=8),
    ]
    d_hidden = rng.normal(size=(4, 40, 8)).astype(dtype)
    results = []
    for kernels in (fast, portable):
        monkeypatch.setattr(inference_rnn, "_rnn", kernels)
        hidden, _ = elman_rnn(x, *weights)
        results.append((hidden, elman_rnn_backward(d_hidden, x, *weights)))
    (fast_hidden, fast_grads), (hidden, grads) = results
    tolerance = dict(rtol=1e-11, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(fast_hidden, hidden, **tolerance)
    for fast_gradient, gradient in zip(fast_grads, grads, strict=True):
        scale = np.abs(gradient).max()
        np.testing.assert_allclose(
            fast_gradient, gradient, rtol=tolerance["rtol"], atol=tolerance["atol"] * scale
        )


def test_semi_markov_kernels_are_the_same_with_either_build(monkeypatch):
    """The semi-Markov kernels (forward-backward, filter, Viterbi, forward-only
    smoothing) of the AVX2 build equal the portable build's, on long sequences with
    emissions of large magnitude."""
    from skseq.inference import hsmm as inference_hsmm

    portable, fast = portable_and_fast("_hsmm")
    rng = np.random.default_rng(3)
    n_states, max_duration = 4, 30
    transmat = rng.dirichlet(np.ones(n_states), size=n_states)
    np.fill_diagonal(transmat, 0.0)
    transmat /= transmat.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        chain = (
            np.log(rng.dirichlet(np.ones(n_states))),
            np.log(transmat),
            np.log(rng.dirichlet(np.ones(max_duration), size=n_states)),
        )
    log_frame = rng.normal(scale=30.0, size=(500, n_states))
    features = rng.normal(size=(300, n_states, 2))
    results = []
    for kernels in (fast, portable):
        monkeypatch.setattr(inference_hsmm, "_hsmm", kernels)
        both = inference_hsmm.hsmm_forward_backward(*chain, log_frame, lengths=[200, 300])
        filtered = inference_hsmm.hsmm_filter(*chain, log_frame, lengths=[200, 300])
        viterbi = inference_hsmm.hsmm_viterbi(*chain, log_frame, lengths=[200, 300])
        log_likelihood, carried, _ = inference_hsmm._forward_smoothing_rows(
            *chain, log_frame[:300], features
        )
        results.append(
            [*both, filtered.filtered, filtered.predicted, filtered.log_message, *viterbi]
            + [log_likelihood, carried.log_message, carried.statistics]
        )
    for fast_value, value in zip(*results, strict=True):
        finite = np.isfinite(value)
        np.testing.assert_array_equal(np.isfinite(fast_value), finite)
        np.testing.assert_allclose(
            np.asarray(fast_value)[finite], np.asarray(value)[finite], rtol=1e-10, atol=1e-10
        )
