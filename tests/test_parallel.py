"""skseq._parallel: the thread runner and the caps on BLAS / OpenMP threads."""

import threading

import numpy as np
import pytest
from joblib import parallel_config
from threadpoolctl import threadpool_info

from skseq._parallel import ThreadRunner, limited_threads, single_threaded_blas


def test_thread_runner_returns_results_in_order_and_raises_errors():
    def fail():
        raise RuntimeError("boom")

    for backend in ("threading", "loky"):  # a plain pool, then through joblib
        with parallel_config(backend=backend), ThreadRunner(2) as run:
            assert (run._executor is not None) == (backend == "threading")
            assert run([lambda i=i: i * i for i in range(5)]) == [0, 1, 4, 9, 16]
            with pytest.raises(RuntimeError, match="boom"):
                run([lambda: 1, fail])


def test_thread_runner_with_one_job_runs_in_the_calling_thread():
    caller = threading.get_ident()
    with ThreadRunner(1) as run:
        assert run._executor is None and run._parallel is None
        assert run([threading.get_ident, threading.get_ident]) == [caller, caller]
    with ThreadRunner(None) as run:  # None means one, as in scikit-learn
        assert run.n_jobs == 1


def test_thread_runner_uses_other_threads_and_shuts_its_pool_down():
    caller = threading.get_ident()
    with parallel_config(backend="threading"), ThreadRunner(2) as run:
        barrier = threading.Barrier(2, timeout=30)

        def meet():  # both calls must be running at once to pass the barrier
            barrier.wait()
            return threading.get_ident()

        first, second = run([meet, meet])
        executor = run._executor
    assert first == caller and second != caller
    with pytest.raises(RuntimeError):  # the pool no longer takes work
        executor.submit(int)


def test_thread_runner_single_call_and_empty_list():
    with parallel_config(backend="threading"), ThreadRunner(2) as run:
        assert run([]) == []
        assert run([lambda: "only"]) == ["only"]


def test_thread_runner_sharedmem_keeps_the_calls_in_this_process():
    out = np.zeros(4)

    def write(i):
        out[i] = i + 1

    with parallel_config(backend="loky"), ThreadRunner(2, sharedmem=True) as run:
        run([lambda i=i: write(i) for i in range(4)])
    np.testing.assert_array_equal(out, [1, 2, 3, 4])


def _blas_threads():
    return [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]


def test_blas_caps_hold_inside_and_are_lifted_after():
    before = _blas_threads()
    if not before:
        pytest.skip("no BLAS library found by threadpoolctl")
    with single_threaded_blas():
        assert _blas_threads() == [1] * len(before)
    assert _blas_threads() == before
    with limited_threads(2):
        assert all(n <= 2 for n in _blas_threads())
    assert _blas_threads() == before
