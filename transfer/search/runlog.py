"""Run summaries: what a tuning run did, stored beside the records (``RecordStore.add_run``).

Every ``tune``, ``tune-model``, ``warm-start``, ``migrate`` and ``demo`` run stores one summary,
so ``tunedb report`` (and later the dashboard) shows warm vs cold, hit rate over time and the
DB's gain without extra files.  A summary is a JSON object (schema in ``docs/runs.md``):

* ``kind``, ``label`` (``warm`` / ``cold`` / a user tag), ``target``, ``target_key``, ``model``,
  ``options``, ``started`` (ISO UTC), ``wall_s``;
* ``tasks``: per workload tuned its ``source`` (``hit`` / ``warm`` / ``cold``), evaluations,
  measurements, cache hits, best and default cost (seconds), best-so-far ``history``
  (``[[evaluation, best or null], ...]``), the targets its seeds came from and where its
  evaluations came from: ``origins`` (evaluations per origin: exact / resume / default / seed /
  model / random, and ``confirm`` re-measurements; ``tunedb.transfer.search.tuner.ORIGINS``) and
  ``origin_split`` (per origin: ``cache_hits`` / ``measured`` / ``failed``);
* totals (``origins`` and ``origin_split`` summed over the tasks that carry them; None when no
  task does: a summary of a run that did not record them) and the seeds' accounting: ``eta`` = N_hit / N_total, ``measure_s`` (time measuring),
  ``query_s`` = T_query (time in the DB and tunedb's own logic), ``t_full_s`` (the measuring time
  without the DB: ``measure_s`` plus the measuring time of the records that answered instead),
  ``t_total_predicted_s`` = T_full (1 - eta) + T_query, ``gain`` G = 1 - (measure_s + query_s) /
  T_full (the fraction of tuning time the DB saved) and ``records_before`` (the n of G(n)).

Costs and times are seconds.
"""

from __future__ import annotations

import math
import socket
import time
import warnings
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tunedb.index.contract.base import RecordStore
    from tunedb.transfer.search.tuner import TuneResult

RUN_KINDS = ("tune", "tune-model", "warm-start", "migrate", "demo")


def utc_now() -> str:
    """The current time as ISO-8601 UTC with microseconds."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def finite(x: Any) -> float | None:
    """``x`` as a finite float (not a bool), else None (summaries are strict JSON)."""
    if x is None or isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def task_summary(res: TuneResult, *, weight: float = 1.0, source: str | None = None,
                 default_cost: float | None = None, name: str = "") -> dict:
    """One ``tasks`` entry from a Tuner result (``source`` default: warm when seeded, else cold);
    ``origins`` / ``origin_split`` are the result's (``TuneResult.origins`` / ``origin_split``)."""
    from tunedb.index.model.keys import key_of

    if source is None:
        source = "warm" if res.seeds else "cold"
    over = res.overhead or {}
    return {
        "name": name, "workload": dict(res.workload), "workload_key": key_of(res.workload), "weight": float(weight),
        "source": source, "evaluations": int(res.evaluations), "measurements": int(res.measurements),
        "cache_hits": int(res.cache_hits), "remeasurements": int(getattr(res, "remeasurements", 0)),
        "best": finite(res.best_cost), "best_config": res.best_config, "default_cost": finite(default_cost),
        "best_estimate": getattr(res, "best_estimate", None),
        "selection_biased": bool(getattr(res, "selection_biased", False)),
        "history": [[int(i), finite(b)] for i, b in res.history],
        "seeded_from": [s.get("from_target", "") for s in res.seeds[:8]],
        "stopped_by": res.stopped_by, "measure_s": finite(over.get("measure")) or 0.0,
        "wall_s": finite(over.get("total")) or 0.0, "saved_s": finite(getattr(res, "saved_s", 0.0)) or 0.0,
        "origins": {str(k): int(v) for k, v in (getattr(res, "origins", None) or {}).items()},
        "origin_split": {str(k): {f: int(n) for f, n in dict(v).items()}
                         for k, v in (getattr(res, "origin_split", None) or {}).items()},
    }


def hit_task(workload: Mapping[str, Any], best: float | None, *, weight: float = 1.0, name: str = "",
             default_cost: float | None = None, saved_s: float = 0.0, best_config: Any = None) -> dict:
    """A ``tasks`` entry answered wholly from the DB (no search): ``saved_s`` is the measuring time
    of the records that answered."""
    from tunedb.index.model.keys import key_of

    return {"name": name, "workload": dict(workload), "workload_key": key_of(dict(workload)),
            "weight": float(weight), "source": "hit", "evaluations": 0, "measurements": 0, "cache_hits": 0,
            "remeasurements": 0, "best": finite(best), "best_config": best_config, "default_cost": finite(default_cost),
            "history": [], "seeded_from": [], "stopped_by": "hit", "measure_s": 0.0, "wall_s": 0.0,
            "saved_s": finite(saved_s) or 0.0, "origins": {}, "origin_split": {}}


def is_tuning_run(summary: Mapping[str, Any]) -> bool:
    """Whether a stored summary is a tuning run (not a stored decision between two configs,
    ``tunedb.index.contract.decisions``, which ``add_run`` stores beside the runs)."""
    from tunedb.index.contract.decisions import DECISION_KIND

    return summary.get("kind") != DECISION_KIND


def counted_runs(summaries: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The tuning runs among stored ``summaries``, each counted once: a ``demo`` summary is a
    container of runs (its ``parts``) that are also stored as runs of their own, so it is left
    out, and its parts are counted where they are stored (a part whose run_id is not stored,
    from an older demo, is taken from the container).  Stored decisions are not runs."""
    summaries = [s for s in summaries if is_tuning_run(s)]
    stored = {s.get("run_id") for s in summaries}
    out: list[Mapping[str, Any]] = []
    for s in summaries:
        if s.get("kind") == "demo":
            out.extend(p for p in (s.get("parts") or []) if isinstance(p, Mapping) and p.get("run_id") not in stored)
        else:
            out.append(s)
    return out


def _int(x: Any) -> int:
    v = finite(x)
    return int(v) if v is not None and v >= 0 else 0


def run_totals(summary: Mapping[str, Any]) -> tuple[int, int]:
    """(evaluations, cache hits) of one tuning run: **the** numbers of the hit rate.

    Definition (docs/runs.md, "Hit rate"): an *evaluation* is a config the search asked for;
    it is a *cache hit* when the DB answered it instead of a measurement.  The hit rate is
    cache hits / evaluations.  A run's counts are the sums over its ``tasks`` when it has any
    (so a run's row adds up to its tasks' rows; references outside the search -- a model run's
    default-config look-ups and tuned-vs-default rounds, confirmation re-measurements -- are
    not evaluations), else over its ``parts`` (a demo), else its own ``evaluations`` /
    ``cache_hits``.  A model run's hit *tasks* take no evaluations: their share is ``eta``,
    a task share, not the hit rate."""
    return run_count(summary, "evaluations"), run_count(summary, "cache_hits")


def run_count(summary: Mapping[str, Any], field: str) -> int:
    """A run's ``evaluations`` / ``measurements`` / ``cache_hits`` as :func:`run_totals` counts
    them: the sum over its tasks when it has any, else over its parts, else its own field."""
    tasks = [t for t in summary.get("tasks") or [] if isinstance(t, Mapping)]
    if tasks:
        return sum(_int(t.get(field)) for t in tasks)
    parts = [q for q in summary.get("parts") or [] if isinstance(q, Mapping)]
    if parts:
        return sum(run_count(q, field) for q in parts)
    return _int(summary.get(field))


def run_hit_rate(summaries: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """(cache hits, evaluations) summed over the tuning runs of ``summaries``, each counted
    once (:func:`counted_runs`), each by :func:`run_totals`: the hit rate of all stored runs is
    hits / evaluations (None without evaluations).  ``tunedb stats``, ``tunedb report``, the
    dashboard and ``tune-model`` all count this way."""
    hits = evals = 0
    for s in counted_runs(summaries):
        e, h = run_totals(s)
        hits += h
        evals += e
    return hits, evals


#: the per-origin fields of ``origin_split``
SPLIT_FIELDS = ("cache_hits", "measured", "failed")


def origin_totals(tasks: Iterable[Mapping[str, Any]]) -> tuple[dict | None, dict | None]:
    """(``origins``, ``origin_split``) summed over the ``tasks`` that carry them; (None, None)
    when none does (tasks of a run that did not record origins, e.g. ``migrate``)."""
    origins: dict[str, int] | None = None
    split: dict[str, dict[str, int]] | None = None
    for t in tasks:
        o = t.get("origins")
        if not isinstance(o, Mapping):
            continue
        origins = {} if origins is None else origins
        split = {} if split is None else split
        for k, v in o.items():
            origins[str(k)] = origins.get(str(k), 0) + int(v or 0)
        for k, v in (t.get("origin_split") or {}).items():
            if not isinstance(v, Mapping):
                continue
            row = split.setdefault(str(k), {f: 0 for f in SPLIT_FIELDS})
            for f in SPLIT_FIELDS:
                row[f] += int(v.get(f) or 0)
    return origins, split


def run_summary(kind: str, *, target: Mapping[str, Any], tasks: Iterable[Mapping[str, Any]], started: str,
                wall_s: float, label: str = "", options: Mapping[str, Any] | None = None,
                records_before: int | None = None, model: str | None = None, eta: float | None = None,
                measure_s: float | None = None, extra: Mapping[str, Any] | None = None,
                machine: Mapping[str, Any] | None = None) -> dict:
    """A run summary (module docstring) from its tasks.  ``eta`` default: cache hits over
    evaluations (a ``tune-model`` run passes hit tasks over tasks); ``measure_s`` default: the
    tasks' measuring time; ``query_s`` is the rest of ``wall_s``; ``origins`` /
    ``origin_split``: the tasks' summed (``origin_totals``)."""
    from tunedb.index.model.keys import key_of
    from tunedb.index.model.version import TUNEDB_VERSION

    tasks = [dict(t) for t in tasks]
    evals = sum(int(t.get("evaluations") or 0) for t in tasks)
    meas = sum(int(t.get("measurements") or 0) for t in tasks)
    hits = sum(int(t.get("cache_hits") or 0) for t in tasks)
    if eta is None:
        eta = hits / evals if evals else None
    if measure_s is None:
        measure_s = sum(float(t.get("measure_s") or 0.0) for t in tasks)
    query_s = max(float(wall_s) - measure_s, 0.0)
    saved = sum(float(t.get("saved_s") or 0.0) for t in tasks)
    t_full = measure_s + saved
    origins, split = origin_totals(tasks)
    out: dict[str, Any] = {
        "kind": kind, "label": label, "started": started, "wall_s": finite(wall_s),
        "target": str(target.get("name", "")), "target_key": key_of(dict(target)), "model": model,
        "options": dict(options or {}), "tasks": tasks,
        "evaluations": evals, "measurements": meas, "cache_hits": hits,
        "origins": origins, "origin_split": split,
        "remeasurements": sum(int(t.get("remeasurements") or 0) for t in tasks),
        "eta": finite(eta), "measure_s": finite(measure_s), "query_s": finite(query_s),
        "t_full_s": finite(t_full) if t_full > 0 else None,
        "t_total_s": finite(measure_s + query_s),
        "t_total_predicted_s": finite(t_full * (1 - eta) + query_s) if t_full > 0 and eta is not None else None,
        "gain": finite(1.0 - (measure_s + query_s) / t_full) if t_full > 0 else None,
        "records_before": records_before,
        "host": socket.gethostname(), "tunedb_version": TUNEDB_VERSION,
        "machine_check": None if machine is None else dict(machine),
    }
    out.update(extra or {})
    return out


def save_tuner_runs(db: RecordStore | None, kind: str, target: Mapping[str, Any], results: Iterable[TuneResult],
                    watch: Stopwatch, records_before: int | None, *, cold: bool,
                    options: Mapping[str, Any] | None = None, extra: Mapping[str, Any] | None = None) -> str | None:
    """Store the summary of a run made of Tuner ``results`` (``tune``: one, ``warm-start``: one
    per workload; one task each), labelled ``cold`` or ``warm``; its run_id (``save_run``)."""
    return save_run(db, run_summary(kind, target=target, tasks=[task_summary(r) for r in results],
                                    started=watch.started, wall_s=watch.elapsed(), label="cold" if cold else "warm",
                                    options=options, records_before=records_before, extra=extra,
                                    machine=watch.machine))


def records_in(db: RecordStore | None) -> int | None:
    """The live records of ``db`` (from its entries summary, which the store remembers), or None."""
    if db is None:
        return None
    try:
        t = db.entries()
        return int(sum(t.column("records").to_pylist())) if t.num_rows else 0
    except Exception:  # a count for a figure must never stop tuning
        return None


def save_run(db: RecordStore | None, summary: Mapping[str, Any]) -> str | None:
    """Store ``summary`` in ``db`` (``add_run``); its run_id, or None without a DB.  A failure
    to store it (disk full, a read-only DB) is a warning, never an exception: the run's records
    are committed already and matter more than its summary."""
    if db is None or not hasattr(db, "add_run"):
        return None
    try:
        return db.add_run(summary)
    except (OSError, ValueError) as e:
        warnings.warn(f"the run summary was not stored: {e}", RuntimeWarning, stacklevel=2)
        return None


class Stopwatch:
    """``started`` (ISO UTC) and seconds since construction (``elapsed()``).  With
    ``check_machine=True`` a run that measures on this machine starts with the quick machine
    check (``tunedb.transfer.measure.machine.machine_check(quick=True)``: the reference kernel's
    spread, load, busy processes; about 0.25 s), kept in ``machine`` and stored in the run's
    summary (``run_summary(machine=...)``); None otherwise."""

    def __init__(self, check_machine: bool = False) -> None:
        self.machine: dict | None = None
        if check_machine:
            from tunedb.transfer.measure.machine import machine_check

            self.machine = machine_check(quick=True)
        self.started = utc_now()
        self._t0 = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self._t0


__all__ = ["RUN_KINDS", "SPLIT_FIELDS", "finite", "task_summary", "run_totals", "run_count", "run_hit_rate", "counted_runs",
           "is_tuning_run", "origin_totals", "hit_task", "run_summary", "records_in", "save_run", "save_tuner_runs", "Stopwatch", "utc_now"]
