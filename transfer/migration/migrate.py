"""Batch migration of tuning results from one device (SRC) to another (DST).

For every workload tuned on SRC (or the listed ones):

1. SRC's ``top_k`` best configs (``db.best_costs``: the one estimator's) are adapted to DST's space (``adapt_many``: every
   config returned passed ``Space.validate``) and measured on DST, together with DST's default
   config (``family.default_config``; replay devices have none) so the speedup over the default
   can be reported.  DB first: a config already measured on DST is a cache hit, so a rerun
   measures nothing it measured before (resumable).  These records get source
   ``migrated:<SRC target_name>``, session ``migrate:<SRC>-><DST>`` and meta ``migration``
   (``src_top`` with ``src_rank``/``src_cost`` = the SRC config's estimated cost, or ``default``).
2. With ``budget`` > 0, a short local search (``tunedb.transfer.search.tuner.Tuner`` with the DB) starting
   from everything DST already knows about the workload, spending at most ``budget`` new
   evaluations per workload *over all runs*: evaluations of earlier migration searches of the
   same (SRC, DST) pair (their session) count, so a rerun resumes.  Search records keep their
   backend's source (``measured`` / ``replay``).

The run's summary is stored beside the records (kind ``migrate``, one task per workload;
``MigrationReport.run_id``), except for a replayed DST, through the one frame every tuning run
uses (``tunedb.transfer.search.session.TuningSession``).

Every record is committed by this process as soon as it is measured (Ctrl-C keeps them): step 1
is ``tunedb.transfer.measure.backend.backend.lookup_or_measure`` and step 2 the ``Tuner``, which uses it too.  The
executor (``transfer.measure.executors``) decides where measurements run (here or as Ray
tasks).  ``db`` is any ``RecordStore`` (a Parquet directory or the in-memory store).

Destination: a target (dict or spec string, measured locally: it must be a local preset of
this machine), or a Kernel Tuner cache file (``pathlib.Path`` or ``ReplayData``): the file's
device is DST, measurements are answered from the file, and the DST workload is the file's
kernel (SRC's workloads of the same family and kernel migrate to it).

Costs are seconds, and every cost the report gives is the one estimator's
(``tunedb.index.model.estimate``: the median of the values of all of a config's records, each the statistic its tuner computes,
``db.best_costs`` / ``db.cost``), never one record's cost or a minimum over records: a row's
``src_best`` (SRC's best config), ``dst_best`` (DST's best config after the run), ``default``
and ``src_best_on_dst`` (those configs on DST; ``status`` is that of the candidate's record:
the lookup's answer or the new measurement, ``cost`` None unless ``ok``) each carry ``cost``
(the estimate's value) and ``estimate`` (``CostEstimate.to_dict()``: n, interval, ...).
Speedups are ratios of those costs (> 1: DST's best is faster).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunedb.index.model.keys import key_of
from tunedb.index.model.record import Record, target_display_name
from tunedb.transfer.measure.backend import MeasureOptions, lookup_or_measure
from tunedb.transfer.measure.executors import Executor, ExecutorBackend, Finalise, LocalExecutor, new_run_id
from tunedb.transfer.measure.jobs import Job
from tunedb.transfer.search.adapt import AdaptReport, adapt_many, hardware_scale
from tunedb.transfer.search.session import TuningSession

if TYPE_CHECKING:
    from tunedb.index.contract.base import RecordStore
    from tunedb.index.model.estimate import ConfigCost

ProgressFn = Callable[[dict], None]


@dataclass
class MigrationReport:
    """Outcome of ``migrate``: one row per SRC workload and the totals (see ``to_json``)."""

    src: str
    dst: str
    rows: list[dict] = field(default_factory=list)
    totals: dict = field(default_factory=dict)
    interrupted: bool = False
    executor: str = "local"
    #: the run summary stored beside the records (``RecordStore.runs()``, kind ``migrate``);
    #: None for a replayed destination (nothing was measured on a device) or when not stored
    run_id: str | None = None

    def to_json(self) -> dict:
        return {"src": self.src, "dst": self.dst, "executor": self.executor, "rows": self.rows,
                "totals": self.totals, "interrupted": self.interrupted, "run_id": self.run_id}


@dataclass
class _Plan:
    src_workload: dict
    job: Job | None
    src_best: list[ConfigCost]      # SRC's best configs by the estimator (db.best_costs)
    candidates: list[dict]          # adapted configs, then the default (if new)
    metas: list[dict]
    src_best_config: dict | None    # SRC's best, adapted to DST's space
    default_config: dict | None
    adapt: AdaptReport
    skip: str = ""


def make_executor(name: str, address: str | None = None) -> Executor:
    """``local`` or ``ray`` (``transfer.integrations.ray_executor``, imported only here); raises
    ExecutorUnavailable (ray missing) or ValueError (unknown name)."""
    if name == "local":
        return LocalExecutor()
    if name == "ray":
        from tunedb.transfer.integrations.ray_executor import RayExecutor

        return RayExecutor(address=address)
    raise ValueError(f"unknown executor {name!r}; expected local or ray")


def _cfg_key(cfg: Mapping[str, Any]) -> str:
    return key_of(dict(cfg))


def _src_workloads(db: RecordStore, src: dict, workloads: Iterable[Mapping[str, Any]] | None) -> list[dict]:
    """SRC's workloads (entries order), or the listed ones normalised by their family."""
    skey = key_of(src)
    ents = [json.loads(e["workload"]) for e in db.entries().to_pylist() if e["target_key"] == skey]
    if workloads is None:
        return ents
    from tunedb.transfer.kernels import family_of

    out = []
    for w in workloads:
        try:
            out.append(family_of(w).validate_workload(w))
        except ValueError:
            out.append(dict(w))
    return out


def _plan_one(db: RecordStore, src: dict, dst: dict, src_w: dict, replay: Any, top_k: int, tags: dict,
              options: MeasureOptions | None) -> _Plan:
    from tunedb.transfer.measure.backend import LocalBackend
    from tunedb.transfer.measure.jobs import local_job

    src_best = db.best_costs(src, src_w, k=top_k)
    empty = _Plan(src_w, None, src_best, [], [], None, None, AdaptReport())
    if not src_best:
        empty.skip = "no ok records on the source"
        return empty
    if replay is not None:
        from tunedb.transfer.measure.replay import KernelTunerReplayBackend

        rw = replay.workload
        if src_w.get("family") != rw.get("family") or src_w.get("kernel", rw.get("kernel")) != rw.get("kernel"):
            empty.skip = f"the replay file holds kernel {rw.get('kernel') or rw.get('family')!r}"
            return empty
        job = Job(dst, dict(rw), replay.space, KernelTunerReplayBackend(replay), {})
        default = None
    else:
        try:
            job = local_job(dst, src_w, LocalBackend(options))
        except ValueError as e:
            empty.skip = str(e).splitlines()[0]
            return empty
        default = dict(job.defaults)  # the family's default for the destination target
        if not job.space.is_valid(default):
            default = None
    rep = AdaptReport()
    src_target = src_best[0].record.target
    scale = hardware_scale(src_target, job.target, job.hardware_knobs) or None
    # across vector widths the family re-derives the register blocking for DST (retarget)
    hw = {"source_target": src_target, "dest_target": job.target, "family": job.workload.get("family")}
    adapted = adapt_many([c.config for c in src_best], job.space, job.defaults, rep, scale, **hw)
    first = adapt_many([src_best[0].config], job.space, job.defaults, AdaptReport(), scale, **hw)
    best_adapted = first[0] if first else None
    # which SRC rank each adapted config came from (the first one that maps onto it)
    rank_of: dict[str, tuple[int, float | None]] = {}
    for i, c in enumerate(src_best):
        for a in adapt_many([c.config], job.space, job.defaults, AdaptReport(), scale, **hw):
            rank_of.setdefault(_cfg_key(a), (i, c.estimate.value))
    cands, metas = [], []
    for c in adapted:
        rank, cost = rank_of.get(_cfg_key(c), (None, None))
        cands.append(c)
        metas.append({"migration": "src_top", "src_rank": rank, "src_cost": cost, **tags})
    if default is not None and _cfg_key(default) not in {_cfg_key(c) for c in cands}:
        cands.append(default)
        metas.append({"migration": "default", **tags})
    return _Plan(src_w, job, src_best, cands, metas, best_adapted, default, rep)


def _cost_item(cc: ConfigCost) -> dict:
    """A best config as the report gives it: config, cost (the estimate's value, seconds) and
    estimate (``CostEstimate.to_dict()``)."""
    return {"config": cc.config, "cost": cc.estimate.value, "estimate": cc.estimate.to_dict()}


def _result(db: RecordStore, dst: dict, w: dict, config: Mapping[str, Any], rec: Record | None) -> dict | None:
    """What a candidate came to on DST: ``status`` of its record (``rec``: the lookup's answer or
    the new measurement), and when ``ok`` the config's estimated ``cost`` on DST (seconds,
    ``db.cost``) with its ``estimate``; None when it has no record."""
    if rec is None:
        return None
    est = db.cost(dst, w, config) if rec.status == "ok" else None
    return {"cost": None if est is None else est.value, "status": rec.status,
            "estimate": None if est is None else est.to_dict()}


def _speedup(base: float | None, best: float | None) -> float | None:
    if base is None or best is None or best <= 0:
        return None
    return base / best


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _search_done(db: RecordStore, dst: dict, w: dict, session: str) -> int:
    """Evaluations earlier migration searches of this (SRC, DST) pair spent on ``w``."""
    t = db.records(dst, w)
    if t.num_rows == 0:
        return 0
    return sum(1 for s, src in zip(t.column("session").to_pylist(), t.column("source").to_pylist())
               if s == session and not str(src).startswith("migrated:"))


def _known_records(db: RecordStore, dst: dict, w: dict) -> list[Record]:
    """DST's records of ``w``, one per config (the latest)."""
    latest: dict[str, Record] = {}
    for r in sorted(db.iter_records(dst, w), key=lambda r: r.timestamp):
        latest[r.config_key] = r
    return list(latest.values())


def _nearest_works(db: RecordStore, target: dict, workload: dict) -> bool:
    try:
        db.nearest(target, workload, k=1)
        return True
    except Exception:  # retrieval missing or unable to embed this workload: search cold
        return False


def migrate(db: RecordStore, src_target: Any, dst_target_or_replay: Any,
            workloads: Iterable[Mapping[str, Any]] | None = None, top_k: int = 3, budget: int = 0,
            executor: str | Executor = "local", progress: ProgressFn | None = None, *, seed: int = 0,
            device: str | None = None, measure_options: MeasureOptions | None = None) -> MigrationReport:
    """Migrate SRC's tuning results to DST (see the module docstring); returns the report.

    ``src_target``: target dict or spec (DB name/key, preset, ...); it must have records in ``db``.
    ``dst_target_or_replay``: target dict/spec (a local preset), or ``pathlib.Path``/``ReplayData``
    of a Kernel Tuner cache file (``device`` names the file's device when it has none).
    ``executor``: ``local``, ``ray`` or an Executor (one given is not closed here).
    ``measure_options``: timing protocol etc. of local measurements (default ``MeasureOptions()``).
    ``progress`` is called with {done, total, workload, index, workloads, best, cached, status}.
    Raises ValueError (one line) for bad arguments; ``ExecutorUnavailable`` when the executor
    cannot run.  KeyboardInterrupt stops the run: what was measured stays committed and the
    report says ``interrupted``.
    """
    t_start = time.perf_counter()
    _check_sizes(top_k, budget)
    src, dst, replay = _resolve_pair(db, src_target, dst_target_or_replay, device)
    src_name, dst_name = target_display_name(src), target_display_name(dst)
    src_ws = _src_workloads(db, src, workloads)
    if replay is not None and workloads is None:
        src_ws = _replay_workloads(src_ws, replay, src_name)
    tags = {"migrated_from": src_name}
    plans = [_plan_one(db, src, dst, w, replay, top_k, tags, measure_options) for w in src_ws]
    own = not isinstance(executor, Executor)
    ex = make_executor(executor) if own else executor
    report = MigrationReport(src=src_name, dst=dst_name, executor=ex.name)
    if replay is not None:  # a replay answers only from its own file's records, never another file's on DST
        from tunedb.transfer.measure.replay import isolated_store

        db = isolated_store(db, replay)
    # the executor measures (maybe remotely): no machine check of this machine
    tuning = TuningSession(db, "migrate", dst, check_machine=False)
    run = _Run(db, ex, dst, new_run_id(), f"migrated:{src_name}", f"migrate:{src_name}->{dst_name}", budget, seed,
               progress, total=sum(len(p.candidates) + (budget if p.job is not None else 0) for p in plans),
               workloads=len(plans), tuning=tuning)
    try:
        for i, p in enumerate(plans):
            report.rows.append(_skipped_row(p))
            if p.job is not None:
                _migrate_workload(run, i, p, report.rows[-1])
    except KeyboardInterrupt:
        report.interrupted = True
    finally:
        if own:
            ex.close()
    report.totals = _totals(report, run.counters, time.perf_counter() - t_start)
    if replay is None:
        report.run_id = tuning.save(
            _summary_tasks(report), label=f"from {report.src}",
            options={"src": report.src, "top_k": top_k, "budget": budget, "executor": report.executor, "seed": seed},
            extra={"interrupted": report.interrupted, "totals": report.totals,
                   # the executor measures (maybe remotely): no split of its time
                   "measure_s": None, "query_s": None, "t_full_s": None, "t_total_predicted_s": None, "gain": None})
    return report


def _summary_tasks(report: MigrationReport) -> list[dict]:
    """The run summary's tasks: one per migrated workload (source "warm": SRC's bests were its
    seeds; "skipped" when nothing was done for it)."""
    tasks = []
    for r in report.rows:
        m, h = int(r.get("measurements") or 0), int(r.get("cache_hits") or 0)
        best = (r.get("dst_best") or {}).get("cost")
        default = (r.get("default") or {}).get("cost")
        tasks.append({"workload": r.get("workload") or {}, "source": "skipped" if r["status"] == "skipped" else "warm",
                      "evaluations": m + h, "measurements": m, "cache_hits": h, "best": best,
                      "default_cost": default, "history": [], "seeded_from": [report.src], "weight": 1.0})
    return tasks


def _check_sizes(top_k: Any, budget: Any) -> None:
    """ValueError unless ``top_k`` >= 1 and ``budget`` >= 0 are integers."""
    if not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k!r}")
    if not isinstance(budget, int) or budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget!r}")


def _resolve_pair(db: RecordStore, src_target: Any, dst_target_or_replay: Any, device: str | None
                  ) -> tuple[dict, dict, Any]:
    """(SRC target, DST target, the replay data or None); ValueError when SRC has no records or
    SRC and DST are the same target."""
    from tunedb.index.hardware.targets import resolve_target
    from tunedb.transfer.measure.replay import ReplayData

    src = resolve_target(src_target, db)
    skey = key_of(src)
    if not any(e == skey for e in db.entries().column("target_key").to_pylist()):
        raise ValueError(f"source target {target_display_name(src)!r} has no records in the database")
    replay = None
    if isinstance(dst_target_or_replay, ReplayData):
        replay = dst_target_or_replay
    elif isinstance(dst_target_or_replay, Path):
        replay = ReplayData(dst_target_or_replay, device=device)
    if replay is not None:
        dst = dict(replay.target)
    else:
        from tunedb.transfer.measure.backend import check_local_target

        dst = check_local_target(resolve_target(dst_target_or_replay, db))
    if key_of(dst) == skey:
        raise ValueError(f"source and destination are the same target ({target_display_name(dst)!r})")
    return src, dst, replay


def _replay_workloads(src_ws: list[dict], replay: Any, src_name: str) -> list[dict]:
    """SRC's workloads of the replay file's family and kernel; ValueError when there are none."""
    rw = replay.workload
    out = [w for w in src_ws if w.get("family") == rw.get("family")
           and w.get("kernel", rw.get("kernel")) == rw.get("kernel")]
    if not out:
        raise ValueError(f"source target {src_name!r} has no workload of kernel "
                         f"{rw.get('kernel') or rw.get('family')!r} (the replay file's)")
    return out


@dataclass
class _Run:
    """What one migration run shares across workloads: where it measures, how records are
    stamped, the progress count and the totals' counters."""

    db: RecordStore
    ex: Executor
    dst: dict
    run_id: str
    source: str
    session: str
    budget: int
    seed: int
    progress: ProgressFn | None
    total: int
    workloads: int
    #: the run's frame: its Tuners, its summary
    tuning: TuningSession
    done: int = 0
    counters: dict = field(default_factory=lambda: {"measurements": 0, "cache_hits": 0, "failed": 0,
                                                    "search_measurements": 0, "search_cache_hits": 0})

    def tick(self, i: int, w: dict, status: str, cached: bool, best: float | None = None) -> None:
        """Count one evaluation of workload ``i`` and tell ``progress``."""
        self.done += 1
        if self.progress:
            self.progress({"done": self.done, "total": self.total, "index": i, "workloads": self.workloads,
                           "workload": w, "best": best, "cached": cached, "status": status})


def _skipped_row(p: _Plan) -> dict:
    """The report row of plan ``p`` before anything ran (``skipped`` with the plan's reason)."""
    return {"src_workload": p.src_workload, "workload": p.job.workload if p.job else p.src_workload,
            "family": p.src_workload.get("family"), "status": "skipped", "reason": p.skip}


def _migrate_workload(run: _Run, i: int, p: _Plan, row: dict) -> None:
    """Migrate one planned workload into ``row``: candidates, the optional search, the summary.
    KeyboardInterrupt passes through (the row stays ``interrupted``)."""
    job = p.job
    assert job is not None
    row.update(status="interrupted", reason="", src_best=_cost_item(p.src_best[0]),
               candidates=len(p.candidates), adapt=p.adapt.to_json(), measurements=0, cache_hits=0, failed=0)
    got = _measure_candidates(run, i, p, row)
    if run.budget > 0:
        row["search"] = _search(run, job, lambda ev: run.tick(i, job.workload, ev["status"], ev["cached"],
                                                               ev["best"]))
        if row["search"].get("interrupted"):
            raise KeyboardInterrupt
    _summarise(run.db, row, run.dst, job.workload, got, p)


def _measure_candidates(run: _Run, i: int, p: _Plan, row: dict) -> dict[str, Record]:
    """Step 1: SRC's top-k (adapted) and DST's default, DB first (``lookup_or_measure``), each new
    record committed at once; returns every candidate's record by config key."""
    job = p.job
    assert job is not None
    got: dict[str, Record] = {}
    metas = {_cfg_key(c): m for c, m in zip(p.candidates, p.metas)}
    backend = ExecutorBackend(run.ex, job.backend, Finalise(run.run_id, run.source, run.session), metas)

    def on_record(k: int, rec: Record, cached: bool) -> None:
        got[_cfg_key(p.candidates[k])] = rec
        kind = "cache_hits" if cached else "measurements"
        row[kind] += 1
        run.counters[kind] += 1
        if not cached and rec.status != "ok":
            row["failed"] += 1
            run.counters["failed"] += 1
        run.tick(i, job.workload, rec.status, cached)

    lookup_or_measure(run.db, backend, run.dst, job.workload, p.candidates, on_record=on_record)
    return got


def _totals(report: MigrationReport, counters: dict, elapsed_s: float) -> dict:
    """The report's totals: row counts, the counters, geometric-mean speedups, elapsed seconds."""
    ok_rows = [r for r in report.rows if r["status"] == "ok"]
    return {
        "workloads": len(report.rows), "migrated": len(ok_rows),
        "skipped": sum(1 for r in report.rows if r["status"] == "skipped"),
        **counters,
        "src_best_stayed_best": sum(1 for r in ok_rows if r.get("src_best_stayed_best")),
        "geomean_speedup_over_default": _geomean([r.get("speedup_over_default") for r in ok_rows]),
        "geomean_speedup_over_src_best": _geomean([r.get("speedup_over_src_best") for r in ok_rows]),
        "interrupted": report.interrupted, "elapsed_s": elapsed_s,
    }


def _search(run: _Run, job: Job, tick: Callable[[dict], None]) -> dict:
    """The short local search on DST (resumable through the run's session); returns its summary."""
    from tunedb.transfer.search.tuner import TuneOptions

    db, dst, budget = run.db, run.dst, run.budget
    remaining = budget - _search_done(db, dst, job.workload, run.session)
    info: dict[str, Any] = {"budget": budget, "remaining": max(remaining, 0), "measurements": 0, "cache_hits": 0}
    if remaining <= 0:
        info["stopped_by"] = "done before"
        for _ in range(budget):  # keep the progress total honest
            tick({"status": "skipped", "cached": True, "best": None})
        return info
    known = _known_records(db, dst, job.workload)
    cold = not _nearest_works(db, dst, job.workload)
    backend = ExecutorBackend(run.ex, job.backend, Finalise(run.run_id, None, run.session))
    tuner = run.tuning.tuner(dst, job.workload, job.space, backend,
                             TuneOptions(budget=len(known) + remaining, seed=run.seed, cold=cold), **job.tuner_kwargs())
    # start from what DST already knows (no budget spent on it)
    tuner.preload(known)
    last = {"n": len(tuner.evaluated)}

    def progress(ev: dict) -> None:
        if ev["evaluations"] > last["n"]:
            last["n"] = ev["evaluations"]
            tick({"status": ev["status"], "cached": ev["cached"], "best": ev["best"]})

    tuner.progress = progress
    res = tuner.run()
    info.update(measurements=res.measurements, cache_hits=res.cache_hits, stopped_by=res.stopped_by,
                cold=cold, interrupted=res.interrupted)
    run.counters["search_measurements"] += res.measurements
    run.counters["search_cache_hits"] += res.cache_hits
    return info


def _summarise(db: RecordStore, row: dict, dst: dict, w: dict, got: dict[str, Record], p: _Plan) -> None:
    """Fill the row's DST best, default, SRC-best-on-DST and speedups, every cost the
    estimator's on DST (``db.best_costs`` / ``db.cost``; see the module docstring)."""
    best = db.best_costs(dst, w, k=1)
    b = best[0] if best else None
    row["dst_best"] = None if b is None else {**_cost_item(b), "source": b.record.source}
    d = got.get(_cfg_key(p.default_config)) if p.default_config is not None else None
    row["default"] = None if p.default_config is None else {
        "config": p.default_config, **(_result(db, dst, w, p.default_config, d) or {})}
    s = got.get(_cfg_key(p.src_best_config)) if p.src_best_config is not None else None
    row["src_best_on_dst"] = None if p.src_best_config is None else {
        "config": p.src_best_config, **(_result(db, dst, w, p.src_best_config, s) or {})}
    row["src_best_stayed_best"] = bool(b is not None and p.src_best_config is not None
                                       and _cfg_key(b.config) == _cfg_key(p.src_best_config))
    bc = b.estimate.value if b is not None else None
    row["speedup_over_default"] = _speedup((row["default"] or {}).get("cost"), bc)
    row["speedup_over_src_best"] = _speedup((row["src_best_on_dst"] or {}).get("cost"), bc)
    row["status"] = "ok" if b is not None else "failed"
    row["reason"] = "" if b is not None else "no config ran successfully on the destination"
