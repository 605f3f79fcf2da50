"""
=====================================================
Parallel and distributed fitting: threads and dask
=====================================================

The E step of an HMM fit runs over blocks of whole sequences: in ``n_jobs``
threads of this process (the kernels release the GIL), or, inside
``joblib.parallel_config(backend="dask")``, as dask tasks on the workers of
a cluster (:ref:`parallel`).  This example plots, for one EM iteration of a
:class:`~skseq.GaussianHMM` at data sizes growing fourfold (more and longer
sequences), the speed-up of each configuration over one thread in wall time,
and the CPU time it spends, beside it.  Each dask E step pickles its blocks
of rows and the model to the workers and the statistics back, and dask's
scheduler adds its own latency: a fixed cost per iteration that a cluster
pays off only on enough rows.

Timing a cluster takes minutes, too long for the docs' build, so this
example plots the measurements that ``benchmarks/bench_dask.py`` saved::

    python benchmarks/bench_dask.py --save doc/gallery/data/parallel.json

committed with the example.  The benchmark checks that every configuration
fits the same parameters as one thread, waits for a quiet machine before
measuring (1-minute load average at most 0.7), records the load averages
and the CPU time other processes took during every measurement, and refuses
to save a measurement from a busy machine.  The machine, its load and the
run's quietness are printed below and on the figure.
"""

# %%
# The cached measurements
# -----------------------
import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

try:
    here = Path(__file__).resolve().parent
except NameError:  # sphinx-gallery runs the script in doc/gallery/; or run from the root
    here = Path.cwd() if (Path.cwd() / "data").is_dir() else Path("doc/gallery").resolve()
cache = json.loads((here / "data" / "parallel.json").read_text(encoding="utf-8"))


labels, summary = cache["configurations"], cache["summary"]
machine = cache["machine"]
machine_text = machine["cpu_model"] + (
    f", {machine['logical_cpus']} logical CPUs" if machine.get("logical_cpus") else ""
)
measured = cache["measurements"]
if measured:
    loads = [m["load_average_before"][0] for m in measured] + [
        m["load_average_after"][0] for m in measured
    ]
    others = max(m["other_processes_cpu_cores"] for m in measured)
    load_text = (
        f"1-min load average {cache['load_average_at_start'][0]:.2f} at the start, "
        f"{min(loads):.2f}-{max(loads):.2f} around the measurements (the benchmark's own "
        f"threads included); other processes used at most {others:.2f} cores"
    )
else:
    load_text = "; ".join(cache["not_quiet_because"])
if cache["quiet"]:
    quietness = f"quiet machine (load <= {cache['max_load']})"
else:
    quietness = "NOT a quiet machine: " + "; ".join(cache["not_quiet_because"])
if cache["quick"]:
    quietness += " (--quick smoke-test sizes)"

print(cache["what"])
print(machine_text)
print(load_text)
print(quietness)
if "runtime_seconds" in cache:
    print(f"the benchmark ran for {cache['runtime_seconds']:.0f} s")
rows = summary[next(iter(summary))]["rows"]
print(f"{'rows':>50s}" + "".join(f"{r:>10d}" for r in rows))
for key, entry in summary.items():
    print(f"{labels[key] + ', speed-up':>50s}" + "".join(f"{s:10.2f}" for s in entry["speedup"]))


# %%
# Where dask pays
# ---------------
# The benchmark fits ``time = overhead + rows x cost per row`` to each
# configuration's median times; the overhead above one thread's is what the
# cluster has to amortise in every iteration, and the size at which the line
# crosses one thread's is where it starts to pay.
def where_it_pays(entry):
    largest, speedup = entry["rows"][-1], entry["speedup"][-1]
    if entry["pays_from_rows"] is not None:
        return (
            f"faster than one thread from {entry['pays_from_rows']:,} rows "
            f"(x{speedup:.2f} at {largest:,})"
        )
    text = f"x{speedup:.2f} of one thread's speed at {largest:,} rows, the largest measured"
    extra = entry["extra_overhead_ms_over_one_thread"]
    if extra is not None:
        above = "above" if extra > 0 else "below"
        text += f"; fixed cost {abs(extra):.1f} ms per iteration {above} one thread's"
        crossing = entry["break_even_rows_fitted"]
        if crossing is not None:
            text += f", which the lines say it amortises from ~{crossing:,.0f} rows"
        else:
            text += ", and no cheaper per row: it does not pay on this machine"
    return text


verdicts = {key: where_it_pays(entry) for key, entry in summary.items() if key != "threads1"}
for key, verdict in verdicts.items():
    print(f"{labels[key]}: {verdict}")

# %%
# Speed-up and CPU time against data size
# ---------------------------------------
# Left: one thread's wall time per EM iteration over each configuration's
# (the median of the repetitions; the bars span the fastest and slowest);
# above 1 is faster.  Right: the CPU time of an iteration (this process's
# threads and the worker processes') over one thread's: above 1 is work the
# parallel configuration adds, which a machine doing other work pays for.
figure, (left, right) = plt.subplots(1, 2, figsize=(12, 6), sharex=True)
styles = {"threads": "-", "dask": "--"}
for index, (key, entry) in enumerate(summary.items()):
    style = styles["dask" if labels[key].startswith("dask") else "threads"]
    speedup = np.array(entry["speedup"])
    spread = np.abs(np.array(entry["speedup_range"]).T - speedup)
    left.errorbar(entry["rows"], speedup, yerr=spread, ls=style, marker="o", capsize=3,
                  color=f"C{index}", label=labels[key])
    if entry["cpu_ratio"] is not None:
        right.plot(entry["rows"], entry["cpu_ratio"], ls=style, marker="o", color=f"C{index}")
for axes in (left, right):
    axes.axhline(1.0, color="k", lw=1)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axes.yaxis.set_major_formatter(FormatStrFormatter("%.3g"))
    axes.yaxis.set_minor_formatter(NullFormatter())
    axes.set_xticks(rows, [f"{r:,}" for r in rows], fontsize=8)  # the sizes measured
    axes.xaxis.set_minor_formatter(NullFormatter())
    axes.set_xlabel("rows (sequences x length)")
left.set_ylabel("speed-up over one thread (wall time)")
right.set_ylabel("CPU time per iteration / one thread's")
if all(entry["cpu_ratio"] is None for entry in summary.values()):
    right.text(0.5, 0.5, "CPU time not measured in this file", ha="center",
               transform=right.transAxes)
figure.legend(*left.get_legend_handles_labels(), loc="upper center", ncol=3, fontsize=8,
              bbox_to_anchor=(0.5, 0.95))
figure.suptitle(f"GaussianHMM EM iteration, threads and dask: {machine_text}; {quietness}",
                fontsize=10)
notes = [load_text] + [f"{labels[key]}: {verdict}" for key, verdict in verdicts.items()]
figure.text(0.01, 0.01, "\n".join(notes), fontsize=7.5, va="bottom")
figure.tight_layout(rect=(0, 0.03 * len(notes), 1, 0.86))
plt.show()
