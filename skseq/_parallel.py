"""Run blocks of work in threads: joblib's configured backend, or a plain pool.

The kernels release the GIL, so threads over blocks of rows (or channels) use
every core.  joblib is the interface: ``n_jobs`` as everywhere in
scikit-learn, and a backend set by ``joblib.parallel_config`` (for example
dask's, to run on a cluster) is honoured.  For joblib's default threading
backend, though, the blocks go to a :class:`~concurrent.futures.ThreadPoolExecutor`:
joblib collects the results of pending tasks by polling every 10 ms, which
would add up to 10 ms to every E step of an EM fit (whose E steps take a few
milliseconds).

The caps on BLAS / OpenMP threads (:func:`limited_threads`) are shared by all
the threads of the process: several fits may run at once (in a user's
``ThreadPoolExecutor``, or joblib's threading backend), and a BLAS library's
thread count is one number for the whole process.
"""

import contextlib
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, wait
from functools import partial

import numpy as np
import threadpoolctl
from joblib import Parallel, delayed, effective_n_jobs
from joblib.parallel import ThreadingBackend, get_active_backend
from threadpoolctl import ThreadpoolController

__all__ = [
    "ThreadRunner",
    "thread_runner",
    "even_blocks",
    "pair_blocks",
    "run_calls",
    "run_blocks",
    "limited_threads",
    "single_threaded_blas",
]

# The thread libraries found by the last lookup, split by the scope of their
# limit (see _limits_the_calling_thread_only).
_controller = None
_modules_at_lookup = -1
_per_thread_libraries = []
_process_libraries = []

# The process-wide limit: the limits asked for by the contexts inside (a count
# per limit), the limit in force (their minimum; None when no context is
# inside) and, for each process-wide library, its thread count when the first
# of these contexts came in (restored when the last one leaves).  Guarded by
# _lock, as is the lookup above.
_lock = threading.Lock()
_requests = Counter()
_in_force = None
_found = {}
# The per-thread limit in force in each thread (the smallest of its contexts').
_this_thread = threading.local()

# threadpoolctl >= 3.8 lets one Python thread at a time set OpenBLAS's
# (pthreads) limit: the one that set it last, until it leaves its last
# threadpoolctl context.  Setting a limit here counts as such a context, so
# that the thread gives up that role afterwards (else every other thread's
# limits, including the restore, would be ignored while it lives).
_OWNERSHIP = getattr(threadpoolctl, "CONTROLLING_THREAD_OWNERSHIP", None)
# The same versions limit an OpenBLAS built on OpenMP through OpenMP's
# (per-thread) API.
_OPENBLAS_OPENMP_PER_THREAD = hasattr(
    getattr(threadpoolctl, "OpenBLASController", None), "clear_controlling_thread"
)


def _limits_the_calling_thread_only(library):
    """Whether ``library``'s thread limit holds for the thread that sets it only.

    OpenMP runtimes keep the limit per thread (``omp_set_num_threads`` sets the
    calling thread's value; not so Windows' vcomp); BLAS libraries have one
    limit for the process.
    """
    if sys.platform == "win32":
        return False
    if library.user_api == "openmp":
        return True
    return (
        _OPENBLAS_OPENMP_PER_THREAD
        and library.internal_api == "openblas"
        and getattr(library, "threading_layer", None) == "openmp"
    )


def _libraries():
    """The (per-thread, process-wide) thread libraries; the caller holds ``_lock``.

    They are looked up again only when modules have been imported since the
    last lookup (a lookup costs milliseconds, too much for every fit; a new
    thread library, such as the OpenMP runtime torch brings, comes with an
    import).
    """
    global _controller, _modules_at_lookup, _per_thread_libraries, _process_libraries
    if _controller is None or len(sys.modules) != _modules_at_lookup:
        _controller = ThreadpoolController()
        _modules_at_lookup = len(sys.modules)
        libraries = _controller.lib_controllers
        _per_thread_libraries = [lib for lib in libraries if _limits_the_calling_thread_only(lib)]
        _process_libraries = [lib for lib in libraries if not _limits_the_calling_thread_only(lib)]
    return _per_thread_libraries, _process_libraries


def _set_process_limits(settings):
    """``library.set_num_threads(n)`` for each ``(library, n)``; the caller holds ``_lock``."""
    if _OWNERSHIP is not None:
        _OWNERSHIP.increment()
    try:
        for library, n_threads in settings:
            library.set_num_threads(n_threads)
    finally:
        if _OWNERSHIP is not None:
            _OWNERSHIP.decrement()


def _limit_found(n_threads):
    _set_process_limits((library, n_threads) for library, _ in _found.values())


def _release(n_threads):
    """One context with limit ``n_threads`` leaves; the caller holds ``_lock``."""
    global _in_force
    _requests[n_threads] -= 1
    if not _requests[n_threads]:
        del _requests[n_threads]
    if not _requests:  # the last one out restores what the first one found
        found = list(_found.values())
        _found.clear()
        _in_force = None
        _set_process_limits(found)
    elif min(_requests) != _in_force:  # the smallest limit left: the next smallest holds
        _in_force = min(_requests)
        _limit_found(_in_force)


class _ThreadLimit:
    """The context of :func:`limited_threads`."""

    __slots__ = ("n_threads", "_saved")

    def __init__(self, n_threads):
        self.n_threads = n_threads
        self._saved = []  # per entry: the thread's limit and per-thread counts before it

    def __enter__(self):
        global _in_force
        n_threads = self.n_threads
        outer = getattr(_this_thread, "limit", None)
        n_this_thread = n_threads if outer is None else min(n_threads, outer)
        with _lock:
            per_thread, process_wide = _libraries()
            saved = [(library, library.num_threads) for library in per_thread]
            unseen = [lib for lib in process_wide if (lib.internal_api, lib.filepath) not in _found]
            for library in unseen:
                _found[library.internal_api, library.filepath] = (library, library.num_threads)
            _requests[n_threads] += 1
            try:
                if _in_force is None or n_threads < _in_force:
                    _in_force = n_threads
                    _limit_found(n_threads)
                elif unseen:  # loaded while other contexts were inside
                    _set_process_limits((library, _in_force) for library in unseen)
                for library in per_thread:
                    library.set_num_threads(n_this_thread)
            except BaseException:
                for library, n_found in saved:
                    library.set_num_threads(n_found)
                _release(n_threads)
                raise
        _this_thread.limit = n_this_thread
        self._saved.append((outer, saved))
        return self

    def __exit__(self, *exception):
        _this_thread.limit, saved = self._saved.pop()
        try:
            for library, n_found in reversed(saved):
                library.set_num_threads(n_found)
        finally:
            with _lock:
                _release(self.n_threads)
        return False


def limited_threads(n_threads):
    """A context in which BLAS and OpenMP run on at most ``n_threads`` threads
    (``threadpoolctl``), safe when several threads use it at once.

    A BLAS library's limit is one for the whole process, so the contexts of
    all threads share it, counted under a lock: the first to come in records
    the libraries' thread counts, the limit in force is the smallest of those
    asked for by the contexts inside (every one of them gets at most what it
    asked for; when the one with the smallest limit leaves, the next smallest
    holds), and the last to leave, also on an exception, restores what the
    first one found.  So a limit that other code sets while contexts are
    inside lasts until the last one leaves (or the limit in force changes):
    what was in place before the first fit is what the process gets back.
    OpenMP runtimes keep their limit per thread, so each context sets the
    calling thread's own (the smallest of the thread's contexts inside) and
    restores it on leaving.

    The thread libraries are looked up again only when modules have been
    imported since the last lookup (a lookup costs milliseconds, too much for
    every fit; a new thread library, such as the OpenMP runtime torch brings,
    comes with an import).
    """
    return _ThreadLimit(int(n_threads))


def single_threaded_blas():
    """A context in which BLAS (and OpenMP) run on one thread.

    Parallelism comes from ``n_jobs`` over blocks; the matrices are small and
    a threaded BLAS inside each block only slows them down.
    """
    return limited_threads(1)


class ThreadRunner:
    """A context that runs lists of calls in ``n_jobs`` threads.

    Inside ``with ThreadRunner(n_jobs) as run:``, ``run(calls)`` calls each
    zero-argument callable of ``calls`` and returns their results in order.
    The threads live as long as the context, so that many short rounds (the
    E steps of one fit) pay for starting them once.  ``sharedmem``: the calls
    write into shared arrays, so they must run in this process (joblib's
    ``require="sharedmem"``); otherwise a configured joblib backend such as
    dask's may run them elsewhere.

    Examples
    --------
    >>> with ThreadRunner(2) as run:
    ...     run([lambda: 1, lambda: 2])
    [1, 2]
    """

    def __init__(self, n_jobs, sharedmem=False):
        self.n_jobs = effective_n_jobs(n_jobs)
        self.require = "sharedmem" if sharedmem else None

    def __enter__(self):
        self._executor = self._parallel = None
        if self.n_jobs == 1:
            return self  # the calls run in this thread
        backend, _ = get_active_backend(prefer="threads", require=self.require)
        if isinstance(backend, ThreadingBackend):
            # The calling thread runs one share itself (see __call__).  The
            # pool's threads start now, while the caller prepares the work.
            self._executor = ThreadPoolExecutor(max(1, self.n_jobs - 1))
            for _ in range(self.n_jobs - 1):
                self._executor.submit(int)
        else:
            self._parallel = Parallel(n_jobs=self.n_jobs, prefer="threads", require=self.require)
            self._parallel.__enter__()
        return self

    def __call__(self, calls):
        if self._parallel is not None:
            return self._parallel(delayed(call)() for call in calls)
        if self._executor is None or len(calls) < 2:
            return [call() for call in calls]
        # The first call runs in this thread, which is awake already, while
        # the pool's threads wake up for the others (on a virtual machine,
        # waking an idle CPU can take a good part of a millisecond).
        futures = [self._executor.submit(call) for call in calls[1:]]
        try:
            first = calls[0]()
        finally:
            wait(futures)
        return [first] + [future.result() for future in futures]

    def __exit__(self, *exception):
        if self._executor is not None:
            self._executor.shutdown()
        if self._parallel is not None:
            self._parallel.__exit__(*exception)
        return False


@contextlib.contextmanager
def thread_runner(n_jobs):
    """A context giving the entered :class:`ThreadRunner` of ``n_jobs`` (with BLAS on
    one thread, :func:`single_threaded_blas`), or None when ``n_jobs`` means one thread.

    For the many short rounds of one fit (EM's E steps, an optimiser's
    gradients), which pay for starting the threads once.

    Examples
    --------
    >>> with thread_runner(None) as runner:
    ...     runner is None
    True
    """
    if effective_n_jobs(n_jobs) == 1:
        yield None
        return
    with single_threaded_blas(), ThreadRunner(n_jobs) as runner:
        yield runner


# -- splitting work into blocks and running them -----------------------------------


def even_blocks(n_items, n_blocks):
    """Cut ``range(n_items)`` into at most ``n_blocks`` contiguous runs of near-equal size.

    Returns the ``(start, stop)`` pairs in order, empty runs left out.

    Examples
    --------
    >>> even_blocks(10, 3)
    [(0, 3), (3, 7), (7, 10)]
    >>> even_blocks(2, 4)
    [(0, 1), (1, 2)]
    """
    bounds = np.linspace(0, n_items, n_blocks + 1).round().astype(np.intp)
    return [(int(start), int(stop)) for start, stop in zip(bounds[:-1], bounds[1:]) if stop > start]


def pair_blocks(n_outer, n_inner, n_jobs):
    """Split the ``n_outer * n_inner`` (outer, inner) pairs into one contiguous block per job.

    Pairs are numbered ``outer * n_inner + inner``.  Block boundaries fall
    between outer elements whenever there are at least as many of them as
    jobs, so that no two blocks share what belongs to one outer element
    (the selective ``dB`` / ``dC`` rows of a batch element in the selective
    scan's backward pass).
    """
    n_pairs = n_outer * n_inner
    n_blocks = max(1, min(int(effective_n_jobs(n_jobs)), n_pairs))
    if n_outer < n_blocks:
        return even_blocks(n_pairs, n_blocks)
    blocks = [(start * n_inner, stop * n_inner) for start, stop in even_blocks(n_outer, n_blocks)]
    return [(start, stop) for start, stop in blocks if stop > start]


def run_calls(calls, runner=None, *, sharedmem=False):
    """Call each zero-argument callable of ``calls``; their results in order.

    A single call runs in the calling thread.  Several go to ``runner``, an
    entered :class:`ThreadRunner` that outlives this call (a fit's, or an
    epoch loop's, which pays for starting its threads once), or without one
    to a :class:`ThreadRunner` with a thread per call, started for them
    (``sharedmem`` as there: the calls write into shared arrays).
    """
    if len(calls) <= 1:
        return [call() for call in calls]
    if runner is not None:
        return runner(calls)
    with ThreadRunner(len(calls), sharedmem=sharedmem) as run:
        return run(calls)


def run_blocks(function, blocks, runner=None, *, sharedmem=False):
    """``function(start, stop)`` for each ``(start, stop)`` of ``blocks``, by :func:`run_calls`."""
    return run_calls(
        [partial(function, start, stop) for start, stop in blocks], runner, sharedmem=sharedmem
    )
