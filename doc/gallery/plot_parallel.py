"""
=====================================================
Parallel and distributed fitting: threads and dask
=====================================================

The E step of an HMM fit runs over blocks of whole sequences: in ``n_jobs``
threads of this process (the kernels release the GIL), or, inside
``joblib.parallel_config(backend="dask")``, as dask tasks on the workers of
a cluster (:ref:`parallel`).  This example plots the time of one EM iteration
of a :class:`~skseq.GaussianHMM` over 64 sequences of 4000 rows in each
configuration, and its speed-up over one thread.

Timing a cluster takes a minute, too long for the docs' build, so this
example plots the measurements that ``benchmarks/bench_dask.py`` saved
(``python benchmarks/bench_dask.py --save doc/gallery/data/parallel.json``,
committed with the example); the benchmark checks that every configuration
fits the same parameters as one thread.  The machine the file comes from is
named in it, with its load average: on a shared machine with more runnable
processes than cores, no configuration gets both cores, and the numbers say
so.
"""

# %%
# The cached measurements
# -----------------------
import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

try:
    here = Path(__file__).resolve().parent
except NameError:  # run interactively
    here = Path("doc/gallery").resolve()
measured = json.loads((here / "data" / "parallel.json").read_text(encoding="utf-8"))
results = measured["results"]
names = [result["configuration"] for result in results]
milliseconds = np.array([1000 * result["seconds_per_iteration"] for result in results])
speedups = np.array([result["speedup_over_one_thread"] for result in results])

print(measured["what"])
print(f"{measured['machine']}; load average {measured['load_average_at_end']:.1f}")
for name, ms, speedup in zip(names, milliseconds, speedups):
    print(f"{name:55s} {ms:8.1f} ms  x{speedup:.2f}")

# %%
# Time per EM iteration and speed-up
# ----------------------------------
# Left: the time of one EM iteration (E step over all sequences, then the M
# step).  Right: the speed-up over one thread; above 1 is faster.  Each dask
# E step pickles its blocks of rows and the model to the workers and the
# statistics back, a cost that threads in one process do not pay: dask pays
# off when one block's E step takes much longer than shipping it (a real
# cluster, many states, long sequences).
figure, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
positions = np.arange(len(names))[::-1]
colours = ["C0" if name.startswith("threads") else "C1" for name in names]
left.barh(positions, milliseconds, color=colours)
left.set_yticks(positions, [name.replace(", n_jobs", "\nn_jobs") for name in names])
left.set_xlabel("ms per EM iteration")
right.barh(positions, speedups, color=colours)
right.axvline(1.0, color="k", lw=1)
right.set_xlabel("speed-up over one thread")
figure.suptitle("GaussianHMM EM over 64 sequences: threads (blue) and dask (orange)")
figure.tight_layout()
plt.show()
