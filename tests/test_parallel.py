"""skseq._parallel: the thread runner and the caps on BLAS / OpenMP threads."""

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import pytest
from joblib import Parallel, delayed, parallel_config
from threadpoolctl import threadpool_info, threadpool_limits

from skseq import DeepMarkovModel, ElmanRNNRegressor, LinearGaussianSSM
from skseq._parallel import (
    ThreadRunner,
    even_blocks,
    limited_threads,
    pair_blocks,
    run_blocks,
    run_calls,
    single_threaded_blas,
)
from skseq.hmm import GMMHMM, CategoricalHMM, GaussianHMM, PoissonHMM


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


def test_even_blocks_cover_the_items_in_near_equal_runs():
    for n_items in range(0, 30):
        for n_blocks in range(1, 8):
            blocks = even_blocks(n_items, n_blocks)
            assert len(blocks) == min(n_items, n_blocks)
            assert [i for start, stop in blocks for i in range(start, stop)] == list(range(n_items))
            sizes = [stop - start for start, stop in blocks]
            assert not sizes or max(sizes) - min(sizes) <= 1


def test_pair_blocks_cut_between_outer_elements_when_there_are_enough():
    assert pair_blocks(4, 3, 2) == [(0, 6), (6, 12)]  # two batch elements each
    assert pair_blocks(1, 5, 2) == [(0, 2), (2, 5)]  # one element: cut inside it
    assert pair_blocks(3, 2, 1) == [(0, 6)]
    assert pair_blocks(3, 2, 3) == [(0, 2), (2, 4), (4, 6)]
    assert pair_blocks(3, 2, 10) == [(i, i + 1) for i in range(6)]  # more jobs than elements


def test_run_calls_and_run_blocks():
    caller = threading.get_ident()
    assert run_calls([]) == []
    assert run_calls([threading.get_ident]) == [caller]  # one call: this thread
    assert run_blocks(lambda start, stop: (start, stop), [(0, 2), (2, 5)]) == [(0, 2), (2, 5)]
    with ThreadRunner(2) as runner:
        assert run_calls([lambda: 1, lambda: 2], runner) == [1, 2]
    with parallel_config(backend="loky"):  # sharedmem keeps them in this process
        assert run_calls([os.getpid] * 2, sharedmem=True) == [os.getpid()] * 2


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


# -- concurrent limits ------------------------------------------------------------
#
# A BLAS library has one thread limit for the whole process: the limits of fits
# running at once in several threads overlap, and the last to leave must restore
# what the first one found.  The interleavings are forced (each thread waits for
# its turn), so that a wrong restore fails every time, whatever the scheduler does.

WAIT = 60  # seconds: a turn that never comes is a failure, not a hang


def _run_in_threads(function, arguments, in_pool):
    """``function(argument)`` for each argument, all at once in threads of a user's
    ``ThreadPoolExecutor`` or of joblib's threading backend."""
    if in_pool == "executor":
        with ThreadPoolExecutor(len(arguments)) as executor:
            return list(executor.map(function, arguments))
    return Parallel(n_jobs=len(arguments), backend="threading", batch_size=1)(
        delayed(function)(argument) for argument in arguments
    )


def _set_blas_threads(limits):
    """Set the BLAS limits (``threadpool_limits``' ``limits``) from a thread that ends.

    threadpoolctl >= 3.8 lets one thread at a time set OpenBLAS's limit, the
    one inside a ``threadpool_limits``: set from this thread, the limit would
    leave every other thread's limits (the fits') without effect.
    """
    thread = threading.Thread(target=lambda: threadpool_limits(limits=limits, user_api="blas"))
    thread.start()
    thread.join()


@contextmanager
def _blas_on(n_threads):
    """BLAS on ``n_threads`` threads, so that a limit of 1 leaking out shows; restored after."""
    blas = [info for info in threadpool_info() if info["user_api"] == "blas"]
    original = {info["filepath"]: info["num_threads"] for info in blas}
    if not original:
        pytest.skip("no BLAS library found by threadpoolctl")
    _set_blas_threads(n_threads)
    if _blas_threads() != [n_threads] * len(original):
        _set_blas_threads(original)
        pytest.skip(f"BLAS cannot be set to {n_threads} threads here")
    try:
        yield
    finally:
        _set_blas_threads(original)


def _openmp_threads():
    return [info["num_threads"] for info in threadpool_info() if info["user_api"] == "openmp"]


def _in_turns(programs, order):
    """Run generator functions ``programs``, each in its own thread, one step at a time.

    ``order`` lists the program to advance at each turn (a step runs up to the
    program's next ``yield``, or to its end); afterwards the programs not at
    their end yet run to it, one after another.  Returns the threads' errors.
    """
    turns = [threading.Semaphore(0) for _ in programs]
    stepped = threading.Semaphore(0)
    finished = [False] * len(programs)
    errors = []

    def run(index):
        steps = programs[index]()
        while turns[index].acquire(timeout=WAIT):
            try:
                next(steps)
            except StopIteration:
                finished[index] = True
            except BaseException as error:  # noqa: BLE001 -- handed to the test
                errors.append(error)
                finished[index] = True
            stepped.release()
            if finished[index]:
                return

    def step(index):
        assert not finished[index], f"program {index} has no step left"
        turns[index].release()
        assert stepped.acquire(timeout=WAIT), f"program {index} did not finish its step"

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(programs))]
    for thread in threads:
        thread.start()
    for index in order:
        step(index)
    for index in range(len(programs)):
        while not finished[index]:
            step(index)
    for thread in threads:
        thread.join(WAIT)
    return errors


def test_overlapping_limits_restore_what_the_first_one_found():
    """A in, B in, A out, B out: B must neither restore A's limit nor lose its own."""
    seen = []

    def first():
        with single_threaded_blas():
            yield  # the second comes in

    def second():
        with single_threaded_blas():
            yield  # the first leaves
            seen.append(_blas_threads())

    with _blas_on(2):
        assert not _in_turns([first, second], [0, 1, 0])
        assert seen == [[1] * len(_blas_threads())]  # still limited for the second
        assert _blas_threads() == [2] * len(seen[0])


def test_the_smallest_limit_of_the_contexts_inside_holds():
    """Every context gets at most what it asked for; the next smallest holds when the
    smallest leaves; the first one's finding comes back at the end."""
    seen = []

    def look(name):
        (n_threads,) = set(_blas_threads())
        seen.append((name, n_threads))

    def wide():
        with limited_threads(3):
            look("wide in")
            yield  # narrow comes in
            look("with narrow")
            yield  # narrow leaves
            look("narrow left")
            yield  # middle comes in

    def narrow():
        with limited_threads(1):
            yield

    def middle():
        with limited_threads(2):
            yield  # wide leaves
            look("wide left")

    with _blas_on(4):
        assert not _in_turns([wide, narrow, middle], [0, 1, 0, 1, 0, 2, 0, 2])
        assert _blas_threads()[0] == 4
    assert seen == [
        ("wide in", 3),
        ("with narrow", 1),
        ("narrow left", 3),
        ("wide left", 2),
    ]


def test_a_context_that_raises_leaves_the_limit_to_the_others_and_restores_last():
    seen = []

    def failing():
        with pytest.raises(RuntimeError, match="inside"):
            with single_threaded_blas():
                yield  # the other comes in
                raise RuntimeError("inside")

    def other():
        with single_threaded_blas():
            yield  # the failing one leaves
            seen.append(_blas_threads())

    with _blas_on(2):
        assert not _in_turns([failing, other], [0, 1, 0])
        assert seen == [[1] * len(_blas_threads())]
        assert set(_blas_threads()) == {2}


def test_openmp_limits_belong_to_the_thread_that_set_them():
    """OpenMP runtimes keep their limit per thread: each context limits its own thread
    and gives that thread its count back, whatever the other threads do."""
    original = _openmp_threads()
    if not original:
        pytest.skip("no OpenMP runtime found by threadpoolctl")
    seen = []

    def program(name):
        def steps():
            before = _openmp_threads()
            with limited_threads(1):
                seen.append((name, "in", _openmp_threads() == [1] * len(before)))
                yield
            seen.append((name, "out", _openmp_threads() == before))

        return steps

    assert not _in_turns([program("a"), program("b")], [0, 1, 0])
    assert sorted(seen) == [(name, where, True) for name in "ab" for where in ("in", "out")]
    assert _openmp_threads() == original  # this thread was never limited


def test_nested_limits_in_one_thread_keep_the_smaller():
    openmp = _openmp_threads()
    with _blas_on(2):
        with single_threaded_blas():
            with limited_threads(2):
                assert set(_blas_threads()) == {1}
                assert _openmp_threads() == [1] * len(openmp)
            assert set(_blas_threads()) == {1}
            assert _openmp_threads() == [1] * len(openmp)
        assert set(_blas_threads()) == {2}
    assert _openmp_threads() == openmp


# -- concurrent fits of every family ------------------------------------------------


def _estimators():
    """(make an estimator with n_jobs=2, its data and fit arguments, the method
    called inside the fit's thread limit)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 2))
    lengths = [40, 40, 40]
    counts = rng.poisson(3, size=(120, 1))
    symbols = rng.integers(0, 3, size=(120, 1))
    X_seq = rng.normal(size=(8, 10, 2))
    y_seq = np.cumsum(X_seq[..., :1], axis=1)
    neural = dict(max_iter=2, batch_size=4, random_state=0, n_jobs=2)
    em = dict(n_iter=3, tol=0.0, random_state=0, n_jobs=2)
    dmm = dict(
        transition_hidden_size=4,
        emission_hidden_size=4,
        inference_hidden_size=4,
        n_importance_samples=4,
    )
    return {
        "GaussianHMM": (lambda: GaussianHMM(2, **em), (X,), {"lengths": lengths}, "_run_em"),
        "GMMHMM": (lambda: GMMHMM(2, n_mix=2, **em), (X,), {"lengths": lengths}, "_run_em"),
        "PoissonHMM": (lambda: PoissonHMM(2, **em), (counts,), {"lengths": lengths}, "_run_em"),
        "CategoricalHMM": (
            lambda: CategoricalHMM(2, **em),
            (symbols,),
            {"lengths": lengths},
            "_run_em",
        ),
        "LinearGaussianSSM": (
            lambda: LinearGaussianSSM(2, **em),
            (X,),
            {"lengths": lengths},
            "_run_em",
        ),
        "ElmanRNNRegressor": (
            lambda: ElmanRNNRegressor(d_model=4, **neural),
            (X_seq, y_seq),
            {},
            "_run_epoch",
        ),
        "DeepMarkovModel": (
            lambda: DeepMarkovModel(2, **dmm, **neural),
            (X,),
            {"lengths": lengths},
            "_run_epoch",
        ),
    }


N_FITS = 4


def _staggered(monkeypatch, estimator_class, method):
    """Patch ``method`` (run inside the fit's thread limit) so that the fits of
    ``N_FITS`` threads overlap in a fixed order: fit i enters its limit after fit
    i - 1 is inside its own; once all are inside, fit 0 goes on, and fit i > 0
    goes on only after fit i - 1 has returned.  (With threadpoolctl's own
    contexts, fits 1, 2, ... then see fit 0's count restored, and the last one
    restores the 1 it found.)

    Returns ``fit(i, function)``, which runs ``function`` as fit i, and the BLAS
    thread counts each fit saw when it went on.
    """
    inside = [threading.Event() for _ in range(N_FITS)]
    returned = [threading.Event() for _ in range(N_FITS)]
    seen = {}
    local = threading.local()
    original = getattr(estimator_class, method)

    def staggered_method(self, *args, **kwargs):
        index = getattr(local, "index", None)
        if index is not None and not local.waited:
            local.waited = True
            inside[index].set()
            if index == 0:
                assert inside[-1].wait(WAIT), "the last fit did not start"
            else:
                assert returned[index - 1].wait(WAIT), f"fit {index - 1} did not return"
            seen[index] = _blas_threads()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(estimator_class, method, staggered_method)

    def fit(index, function):
        local.index, local.waited = index, False
        try:
            if index > 0:
                assert inside[index - 1].wait(WAIT), f"fit {index - 1} did not start"
            return function()
        finally:
            inside[index].set()  # also after a failure: the next may go on
            returned[index].set()
            local.index = None

    return fit, seen


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("in_pool", ["executor", "joblib"])
@pytest.mark.parametrize("name", list(_estimators()))
def test_concurrent_fits_give_the_thread_counts_back(monkeypatch, name, in_pool):
    make, args, kwargs, method = _estimators()[name]
    fit, seen = _staggered(monkeypatch, type(make()), method)
    openmp_before = _openmp_threads()

    def fit_one(index):
        return fit(index, lambda: make().fit(*args, **kwargs))

    with _blas_on(2):
        models = _run_in_threads(fit_one, list(range(N_FITS)), in_pool)
        # While any fit is inside, BLAS stays on one thread (no fit restores
        # another's count); after the last, the count found by the first is back.
        assert sorted(seen) == list(range(N_FITS))
        assert all(set(counts) == {1} for counts in seen.values()), seen
        assert set(_blas_threads()) == {2}
    assert _openmp_threads() == openmp_before
    assert len(models) == N_FITS


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_fit_that_raises_inside_the_limit_restores_the_thread_counts(monkeypatch):
    make, args, kwargs, method = _estimators()["GaussianHMM"]
    fit, seen = _staggered(monkeypatch, GaussianHMM, method)

    def fit_one(index):
        def run():
            if index == 0:
                def fail(*_):
                    raise RuntimeError("diverged")

                # Fit 0 fails inside its limit, with fit 1 inside its own.
                with pytest.raises(RuntimeError, match="diverged"):
                    model = make()
                    model._estep_parallel = fail
                    model.fit(*args, **kwargs)
                return None
            return make().fit(*args, **kwargs)

        return fit(index, run)

    with _blas_on(2):
        models = _run_in_threads(fit_one, list(range(N_FITS)), "executor")
        assert all(set(counts) == {1} for counts in seen.values()), seen
        assert set(_blas_threads()) == {2}
    assert models[0] is None and all(model is not None for model in models[1:])


class _FakeBLAS:
    """A process-wide thread library as threadpoolctl describes it."""

    user_api, internal_api = "blas", "openblas"
    threading_layer = "pthreads"

    def __init__(self, filepath, num_threads):
        self.filepath, self.num_threads = filepath, num_threads

    def set_num_threads(self, num_threads):
        self.num_threads = num_threads


def test_libraries_loaded_or_limits_changed_while_contexts_are_inside(monkeypatch):
    """A library that appears while contexts are inside gets the limit in force and its
    own count back at the end; a count changed by other code in between gives way to
    what the first context found."""
    import skseq._parallel as parallel

    loaded = [_FakeBLAS("first.so", 4)]

    class FakeController:
        def __init__(self):
            self.lib_controllers = list(loaded)

    monkeypatch.setattr(parallel, "ThreadpoolController", FakeController)
    for name in ("_controller", "_per_thread_libraries", "_process_libraries"):
        monkeypatch.setattr(parallel, name, getattr(parallel, name))  # the real ones after
    monkeypatch.setattr(parallel, "_modules_at_lookup", -1)  # look up the fakes
    first = loaded[0]
    with limited_threads(2):
        assert first.num_threads == 2
        loaded.append(_FakeBLAS("second.so", 3))
        monkeypatch.setattr(parallel, "_modules_at_lookup", -1)  # as after an import
        with limited_threads(3):
            assert [lib.num_threads for lib in loaded] == [2, 2]
            first.set_num_threads(5)  # the user's own limit, in the middle
        assert [lib.num_threads for lib in loaded] == [5, 2]  # not fought while inside
    assert [lib.num_threads for lib in loaded] == [4, 3]


def test_the_real_libraries_are_limited_after_the_fake_ones():
    """The test above leaves the real lookup in place."""
    with _blas_on(2):
        with single_threaded_blas():
            assert set(_blas_threads()) == {1}
        assert set(_blas_threads()) == {2}
