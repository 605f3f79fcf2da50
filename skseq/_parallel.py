"""Run blocks of work in threads: joblib's configured backend, or a plain pool.

The kernels release the GIL, so threads over blocks of rows (or channels) use
every core.  joblib is the interface: ``n_jobs`` as everywhere in
scikit-learn, and a backend set by ``joblib.parallel_config`` (for example
dask's, to run on a cluster) is honoured.  For joblib's default threading
backend, though, the blocks go to a :class:`~concurrent.futures.ThreadPoolExecutor`:
joblib collects the results of pending tasks by polling every 10 ms, which
would add up to 10 ms to every E step of an EM fit (whose E steps take a few
milliseconds).
"""

import sys
from concurrent.futures import ThreadPoolExecutor, wait

from joblib import Parallel, delayed, effective_n_jobs
from joblib.parallel import ThreadingBackend, get_active_backend
from threadpoolctl import ThreadpoolController

__all__ = ["ThreadRunner", "limited_threads", "single_threaded_blas"]

_controller = None
_modules_at_lookup = -1


def limited_threads(n_threads):
    """A context in which BLAS and OpenMP run on at most ``n_threads`` threads
    (``threadpoolctl``).

    The thread libraries are looked up again only when modules have been
    imported since the last lookup (a lookup costs milliseconds, too much for
    every fit; a new thread library, such as the OpenMP runtime torch brings,
    comes with an import).
    """
    global _controller, _modules_at_lookup
    if _controller is None or len(sys.modules) != _modules_at_lookup:
        _controller = ThreadpoolController()
        _modules_at_lookup = len(sys.modules)
    return _controller.limit(limits=int(n_threads))


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
