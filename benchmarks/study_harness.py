"""The tuning harness shared by the two studies: search, selection, final runs, one record per run.

Both studies (``selective_copying.py`` and ``inductive_bias.py``, in this
directory) give every model the same protocol:

1. a small search space declared per model (:func:`search_space`: the peak
   learning rate over three values and gradient clipping at norm 1 or none
   for every model, plus the knob that matters most for some: the Elman
   RNN's initial spectral radius, the Transformer's warm-up or a smaller
   learning rate), each point trained once (the search seed, 0) with the
   study's budget;
2. the point with the best metric on a validation split chosen per model
   (:func:`select`);
3. the final runs of the chosen point over several other seeds, whose test
   metric is reported as mean and standard deviation (:func:`summarize`).

Every run is cached in its own small JSON record, ``<model>-<key>.json`` in
the study's results directory, where ``key`` hashes the run's whole
configuration (:func:`config_key`): the model, its architecture, the task,
the training settings, the hyperparameters and the seed.  A rerun skips the
finished records, so a study interrupted at any point resumes where it
stopped, and the records committed to the repository are the results.  A
record holds the configuration, the metrics (validation, test, the
number of epochs or optimiser steps), the CPU seconds (``time.process_time``
of the process: the run alone, not the machine) and the wall seconds, the
load average and the date.

Several processes may run the same study side by side (start the same
command twice, each with one thread and ``nice -n 19`` on shared cores):
each claims a run with a ``.lock`` file next to its record (created
exclusively, holding its pid; a lock whose process is gone is taken over;
locks are not committed), so no run is done twice.  The searches come
first; a model's final runs are planned once its search is complete, and
the models' final runs alternate so that a study stopped midway has every
model at the first axis values.  ``--status`` prints the runs finished,
their CPU seconds and the estimated CPU left; ``--summary PATH`` writes
:func:`study_summary` (what the pages report) once the runs are in.
"""

import hashlib
import itertools
import json
import math
import os
import socket
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

#: Seed of the search runs; the final runs use :data:`FINAL_SEEDS`, so the
#: reported numbers never reuse the run a configuration was selected on.
SEARCH_SEED = 0
FINAL_SEEDS = (1, 2, 3)


def search_space(model, learning_rates, extra=None):
    """The declared grid of one model: learning rate x clipping (x the model's own knobs).

    Parameters
    ----------
    model : str
        Model name (only used to pick its entry of ``extra``).
    learning_rates : sequence of float
        The three learning rates (peak rates under a schedule) of the study.
    extra : dict or None
        Maps a model name to ``{hyperparameter: values}`` added to its grid.
        A ``learning_rate`` entry there replaces ``learning_rates``.

    Returns
    -------
    points : list of dict
        Every combination, in a fixed order; clipping is ``max_grad_norm``
        (1.0, or None for no clipping).

    Examples
    --------
    >>> [p["max_grad_norm"] for p in search_space("rnn", [1e-3, 1e-2, 1e-1])][:2]
    [1.0, None]
    >>> len(search_space("rnn", [1e-3, 1e-2, 1e-1], {"rnn": {"init_spectral_radius": [0.8, 1]}}))
    12
    """
    axes = dict(learning_rate=list(learning_rates), max_grad_norm=[1.0, None])
    axes.update((extra or {}).get(model, {}))
    names = list(axes)
    return [dict(zip(names, values)) for values in itertools.product(*axes.values())]


def config_key(config):
    """A short hash of a JSON-serialisable configuration (independent of key order).

    Examples
    --------
    >>> config_key({"a": 1, "b": None}) == config_key({"b": None, "a": 1})
    True
    >>> len(config_key({"a": 1}))
    16
    """
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def record_path(results_dir, config):
    """Where the record of ``config`` lives: ``results_dir/<model>-<key>.json``."""
    return Path(results_dir) / f"{config['model']}-{config_key(config)}.json"


def load_record(results_dir, config):
    """The finished record of ``config``, or None if it has not been run."""
    path = record_path(results_dir, config)
    if not path.exists():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))
    if record["config"] != json.loads(json.dumps(config)):
        raise ValueError(f"{path} holds another configuration (hash collision or edited file)")
    return record


def _claim(path):
    """Create ``path`` (a lock) exclusively; take over a lock whose process has gone."""
    for _ in range(2):
        try:
            descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                host, pid = path.read_text(encoding="utf-8").split()
                os.kill(int(pid), 0)
                return False  # a live worker holds it
            except ProcessLookupError:
                path.unlink(missing_ok=True)  # its worker died: take it over
                continue
            except (ValueError, OSError):
                return False  # being written, or not ours to judge
        with os.fdopen(descriptor, "w") as file:
            file.write(f"{socket.gethostname()} {os.getpid()}\n")
        return True
    return False


def run_cached(results_dir, config, run, log=None):
    """The record of ``config``: loaded if finished, else computed by ``run(config)`` and saved.

    ``run(config)`` returns a JSON-serialisable dict of metrics.  Returns
    None if another live worker holds the run's lock.
    """
    record = load_record(results_dir, config)
    if record is not None:
        return record
    path = record_path(results_dir, config)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_suffix(".lock")
    if not _claim(lock):
        return None
    try:
        if log is not None:
            log(f"run {path.name}: {describe(config)}")
        wall, cpu = time.perf_counter(), time.process_time()
        metrics = run(config)
        record = dict(
            config=config,
            metrics=metrics,
            cpu_seconds=time.process_time() - cpu,
            wall_seconds=time.perf_counter() - wall,
            load_average=list(os.getloadavg()),
            finished=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )
        temporary = path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        os.replace(temporary, path)
        if log is not None:
            log(f"  done in {record['cpu_seconds']:.0f} CPU s: {summary_line(metrics)}")
        return record
    finally:
        lock.unlink(missing_ok=True)


def describe(config):
    """One line naming a run: model, hyperparameters, seed and the ``axis`` it varies along."""
    axis = config.get("axis")
    where = "" if axis is None else f" {axis['name']} {axis['value']}"
    return f"{config['model']}{where} seed {config['seed']} {config['hyperparameters']}"


def summary_line(metrics):
    return "  ".join(
        f"{name} {value:.4f}" for name, value in metrics.items() if isinstance(value, float)
    )


def select(records, metric="validation", maximize=True):
    """The hyperparameters of the best record on ``metrics[metric]`` (the first on ties)."""
    best = None
    for record in records:
        value = record["metrics"][metric]
        if best is None or (value > best[0] if maximize else value < best[0]):
            best = (value, record["config"]["hyperparameters"])
    return None if best is None else best[1]


def summarize(records, metric="test"):
    """Mean, standard deviation, count and CPU seconds of ``metric`` over the records."""
    values = np.array([record["metrics"][metric] for record in records], dtype=float)
    return dict(
        mean=float(values.mean()) if values.size else math.nan,
        std=float(values.std()) if values.size else math.nan,
        n=int(values.size),
        cpu_seconds=float(sum(record["cpu_seconds"] for record in records)),
    )


class Study:
    """The plan of one study: the search and final configurations, run through the cache.

    Parameters
    ----------
    results_dir : path
        The study's directory of records.
    search : dict
        Maps a model name to the list of its search configurations (each a
        dict with ``model``, ``hyperparameters``, ``seed`` and whatever else
        fixes the run).
    final : callable
        ``final(model, hyperparameters)`` gives the list of final
        configurations of ``model`` once its search chose ``hyperparameters``.
    run : callable
        ``run(config)`` trains and scores one configuration; a dict of metrics.
    metric, maximize
        The validation metric of the selection and its direction.
    group : callable or None
        ``group(config)`` splits a model's search into groups selected
        separately (the inductive-bias study selects per training-set size);
        ``final`` then receives ``{group: hyperparameters}``.
    fixed : dict or None
        Models that are not searched, mapped to what ``final`` receives for
        them (the HMM: EM with ``n_init`` restarts is its own tuning).

    Examples
    --------
    >>> import tempfile
    >>> search = {"m": [dict(model="m", hyperparameters=dict(lr=lr), seed=0) for lr in (1, 2)]}
    >>> final = lambda model, chosen: [dict(model=model, hyperparameters=chosen, seed=1)]
    >>> run = lambda config: dict(validation=-abs(config["hyperparameters"]["lr"] - 2.0),
    ...                           test=float(config["seed"]))
    >>> with tempfile.TemporaryDirectory() as directory:
    ...     study = Study(directory, search, final, run)
    ...     _ = study.run_all()
    ...     study.chosen("m"), study.status()["pending"]
    ({'lr': 2}, 0)
    """

    def __init__(self, results_dir, search, final, run, *, metric="validation", maximize=True,
                 group=None, fixed=None):  # fmt: skip
        self.results_dir = Path(results_dir)
        self.search = search
        self.final = final
        self.run = run
        self.metric = metric
        self.maximize = maximize
        self.group = group
        self.fixed = {} if fixed is None else fixed
        self.models = [*search, *(name for name in self.fixed if name not in search)]

    def records(self, configs):
        """The finished records of ``configs`` (the missing ones left out)."""
        found = (load_record(self.results_dir, config) for config in configs)
        return [record for record in found if record is not None]

    def chosen(self, model):
        """The selected hyperparameters of ``model`` (per group), or None while its search runs."""
        if model in self.fixed:
            return self.fixed[model]
        configs = self.search[model]
        records = self.records(configs)
        if len(records) < len(configs):
            return None
        if self.group is None:
            return select(records, self.metric, self.maximize)
        groups = {}
        for record in records:
            groups.setdefault(json.dumps(self.group(record["config"])), []).append(record)
        return {
            json.loads(key): select(members, self.metric, self.maximize)
            for key, members in groups.items()
        }

    def final_configs(self, model):
        chosen = self.chosen(model)
        return None if chosen is None else self.final(model, chosen)

    def plan(self):
        """Every configuration plannable now: the searches, and the finals of finished searches.

        The final runs of the models alternate (the first of each model, then
        the second of each...), so that a study stopped midway has every
        model at the first axis values rather than one model at all of them.
        """
        configs = [config for model in self.search for config in self.search[model]]
        finals = [self.final_configs(model) or [] for model in self.models]
        for round_ in itertools.zip_longest(*finals):
            configs += [config for config in round_ if config is not None]
        return configs

    def run_all(self, log=None, max_runs=None, poll_seconds=30):
        """Run every pending configuration (searches first); returns the number run here.

        When the runs left are held by other workers, waits for them (their
        searches may unlock final runs), polling every ``poll_seconds``.
        """
        done = 0
        while max_runs is None or done < max_runs:
            pending = [c for c in self.plan() if load_record(self.results_dir, c) is None]
            if not pending:
                return done
            progressed = False
            for config in pending:
                if run_cached(self.results_dir, config, self.run, log) is not None:
                    done += 1
                    progressed = True
                    break
            if not progressed:
                time.sleep(poll_seconds)
        return done

    def status(self, cost=None):
        """Counts and CPU of the finished runs; the estimated CPU of the pending ones.

        A pending run is estimated by the mean CPU of the model's finished
        runs at the same axis value, else by ``cost(config)`` (NaN without).
        Final runs of searches not yet complete are estimated too (with the
        search's first point standing in for the choice).
        """
        finished, pending = [], []
        for model in self.models:
            configs = list(self.search.get(model, []))
            finals = self.final_configs(model)
            if finals is None:
                first = self.search[model][0]["hyperparameters"]
                if self.group is not None:
                    first = {
                        json.loads(key): first
                        for key in {json.dumps(self.group(c)) for c in self.search[model]}
                    }
                finals = self.final(model, first)
            for config in configs + finals:
                record = load_record(self.results_dir, config)
                (pending if record is None else finished).append(record or config)
        measured = {}
        for record in finished:
            measured.setdefault(_cost_key(record["config"]), []).append(record["cpu_seconds"])

        def estimate(config):
            seconds = measured.get(_cost_key(config))
            if seconds:
                return float(np.mean(seconds))
            return math.nan if cost is None else cost(config)

        return dict(
            finished=len(finished),
            pending=len(pending),
            cpu_seconds=float(sum(record["cpu_seconds"] for record in finished)),
            estimated_cpu_seconds_left=float(sum(estimate(config) for config in pending)),
        )


def grid_study(
    results_dir,
    run,
    make_config,
    models,
    *,
    search_axis,
    final_axis,
    learning_rates,
    extra=None,
    seeds=FINAL_SEEDS,
    per_axis=False,
    fixed=None,
    metric="validation",
    maximize=True,
):
    """The :class:`Study` of both scripts: every model's grid searched, the choice run on seeds.

    ``make_config(model, hyperparameters, axis_value, seed)`` builds one
    run's configuration.  Each searched model's :func:`search_space` runs at
    every value of ``search_axis`` with :data:`SEARCH_SEED`; the chosen point
    then runs at every value of ``final_axis`` with ``seeds``.  With
    ``per_axis`` the choice is made separately at each axis value (the
    search must then cover the final axis).  ``fixed`` maps the models that
    are not searched to their hyperparameters.

    Examples
    --------
    >>> make = lambda m, h, value, seed: dict(model=m, hyperparameters=h, axis=dict(
    ...     name="n", value=value), seed=seed)
    >>> study = grid_study("unused", None, make, ["a", "b"], search_axis=[10], final_axis=[10, 20],
    ...                    learning_rates=[0.1, 1.0, 10.0], fixed={"b": {"n_init": 3}})
    >>> len(study.search["a"]), study.models, len(study.final("b", {"n_init": 3}))
    (6, ['a', 'b'], 6)
    """
    fixed = dict(fixed or {})
    search = {
        name: [
            make_config(name, point, value, SEARCH_SEED)
            for value in search_axis
            for point in search_space(name, learning_rates, extra)
        ]
        for name in models
        if name not in fixed
    }

    def final(name, chosen):
        return [
            make_config(name, chosen[value] if per_axis else chosen, value, seed)
            for value in final_axis
            for seed in seeds
        ]

    if per_axis:
        fixed = {name: {value: point for value in final_axis} for name, point in fixed.items()}
    study = Study(
        results_dir,
        search,
        final,
        run,
        metric=metric,
        maximize=maximize,
        group=axis_value if per_axis else None,
        fixed=fixed,
    )
    study.models = [name for name in models if name in search or name in fixed]
    study.final_axis = list(final_axis)
    return study


def results_table(study, labels, header):
    """The final test metric, mean ± std (number of seeds), per model and final axis value."""
    values = study.final_axis
    lines = [f"{'model':20s}" + "".join(f"{f'{header} = {value}':>22s}" for value in values)]
    for name in study.models:
        finals = study.final_configs(name) or []
        cells = []
        for value in values:
            cell = summarize(study.records([c for c in finals if axis_value(c) == value]))
            cells.append(
                f"{cell['mean']:.3f} ± {cell['std']:.3f} ({cell['n']})" if cell["n"] else "-"
            )
        lines.append(f"{labels[name]:20s}" + "".join(f"{cell:>22s}" for cell in cells))
    return "\n".join(lines)


def study_summary(study):
    """What the pages need from a study's records: the search, the choice, the final metrics.

    Returns
    -------
    summary : dict
        ``complete`` (every search and final run finished) and, per model,
        ``search`` (each point's hyperparameters, axis value, validation and
        test metric and CPU seconds), ``chosen``, ``final`` (per axis value:
        the test metric's ``mean``, ``std``, ``n``, ``values`` and
        ``cpu_seconds``) and ``cpu_seconds`` (search and final together).
    """
    models, complete = {}, True
    for model in study.models:
        search = study.records(study.search.get(model, []))
        finals = study.final_configs(model)
        complete &= finals is not None and len(search) == len(study.search.get(model, []))
        final_records = study.records(finals or [])
        complete &= finals is not None and len(final_records) == len(finals)
        by_axis = {}
        for record in final_records:
            by_axis.setdefault(axis_value(record["config"]), []).append(record)
        models[model] = dict(
            search=[
                dict(
                    hyperparameters=r["config"]["hyperparameters"],
                    axis=axis_value(r["config"]),
                    validation=r["metrics"]["validation"],
                    test=r["metrics"]["test"],
                    cpu_seconds=r["cpu_seconds"],
                )
                for r in search
            ],
            chosen=study.chosen(model),
            final={
                value: dict(
                    summarize(records),
                    values=[r["metrics"]["test"] for r in records],
                    seeds=[r["config"]["seed"] for r in records],
                )
                for value, records in sorted(
                    by_axis.items(), key=lambda item: (item[0] is not None, item[0] or 0)
                )
            },
            cpu_seconds=float(sum(r["cpu_seconds"] for r in search + final_records)),
        )
    return dict(complete=bool(complete), models=models)


def axis_value(config):
    """The value of the axis a run varies along (length, training-set size), or None."""
    axis = config.get("axis")
    return None if axis is None else axis["value"]


def _cost_key(config):
    return config["model"], axis_value(config)


def add_arguments(parser, default_dir):
    """The harness's command-line options, shared by both study scripts."""
    parser.add_argument(
        "--results-dir",
        default=default_dir,
        help=f"directory of the run records (default {default_dir})",
    )
    parser.add_argument(
        "--status", action="store_true", help="print what is finished and what is left; run nothing"
    )
    parser.add_argument("--max-runs", type=int, default=None, help="stop after this many runs")
    parser.add_argument(
        "--summary",
        metavar="PATH",
        help="write study_summary (search, choice, final mean and std) as JSON to PATH",
    )


def print_status(study, cost=None):
    """Print the study's progress and its estimated CPU left."""
    status = study.status(cost)
    print(
        f"{status['finished']} runs finished ({status['cpu_seconds']:.0f} CPU s), "
        f"{status['pending']} pending (about {status['estimated_cpu_seconds_left']:.0f} CPU s); "
        f"load average {os.getloadavg()}"
    )
    for model in study.models:
        print(f"  {model}: chosen {study.chosen(model)}")
    return status


def finish(study, args, cost=None):
    """The end of a ``--tune`` or ``--status`` call: run, print the status, write the summary."""
    if not args.status:
        study.run_all(log=lambda line: print(line, flush=True), max_runs=args.max_runs)
    print_status(study, cost)
    if args.summary:
        summary = study_summary(study)
        Path(args.summary).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
        print(f"summary ({'complete' if summary['complete'] else 'INCOMPLETE'}) in {args.summary}")
