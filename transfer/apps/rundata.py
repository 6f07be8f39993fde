"""The run data of reports and the dashboard, and the parsing of tuning-run summaries into it.

The data model: plain dataclasses (:class:`EntryCurve`, :class:`TuneRun`, :class:`RunsData`,
:class:`GainPoint`), built here from run summaries and by ``tunedb.transfer.apps.entries`` from
records, and drawn by ``tunedb.transfer.apps.figures``; costs in seconds.

The parsing: run JSON files a user passes in (:func:`load_runs`: ``tunedb tune``,
``warm-start``, ``demo`` outputs, or run summaries) and the run summaries a store holds
(:func:`stored_runs`), merged with each tuning run once (:func:`merge_runs`).

Each tuning run is counted once (:func:`add_summaries`): a ``demo`` summary is a container of
tune-model runs (its ``parts``) that ``tune-model`` also stores as runs of their own; a part whose
run_id is stored as a summary is counted there and left out of the demo, and a demo left with no
part is not a run of its own (it is skipped).  "Tuning runs" counts runs after that rule, a demo
by its remaining parts (:func:`count_runs`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunedb.index.model.estimate import CostEstimate


@dataclass
class EntryCurve:
    """One (target, workload) entry: the fastest single measurement so far over its records in
    timestamp order (``best_so_far``: the search's history), and the estimator's best config
    (``estimate``: its cost, n and interval; ``best_config``).  ``best_cost`` is the estimate's
    value (the number ``tunedb best`` shows), ``best_seen`` the fastest single measurement."""

    target_key: str
    target_name: str
    workload_key: str
    workload: dict
    records: int
    ok_records: int
    best_so_far: list[float | None]   # after record 1, 2, ... (None until the first ok record)
    best_config: dict | None = None
    estimate: CostEstimate | None = None
    best_seen: float | None = None
    sources: list[str] = field(default_factory=list)

    @property
    def best_cost(self) -> float | None:
        """The estimated cost of the entry's best config (seconds), None without an ok record."""
        return None if self.estimate is None else self.estimate.value

    @property
    def family(self) -> str:
        return str(self.workload.get("family", ""))


@dataclass
class TuneRun:
    """One search of one workload (a run of run JSON, or one task of a stored run summary):
    its history is ``[[evaluation (1-based), best_so_far (seconds) or None], ...]``."""

    target: str
    workload: dict
    label: str
    history: list
    evaluations: int
    cache_hits: int | None      # None when the run JSON does not say (demo histories)
    measurements: int | None
    source: str = ""            # where it came from: a runs file's name, or "database"
    run_id: str = ""            # the run summary's run_id ("" when the run JSON has none)
    #: how the search started: "warm" (seeded from the DB), "cold" (no seeds) or "" (not known)
    start: str = ""


@dataclass
class RunsData:
    """Tuning runs plus the passes of a ``tunedb demo`` output (hit rates of whole passes).

    ``hit_points`` are ``{"label", "evaluations", "cache_hits", "run_id"}`` in the order given;
    ``summaries`` the run summaries (the ``RecordStore.add_run`` schema) the runs came from, in
    the order given (stored ones oldest first)."""

    runs: list[TuneRun] = field(default_factory=list)
    hit_points: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    summaries: list[dict] = field(default_factory=list)
    #: the tuning runs read from the database (:func:`count_runs` of the first summaries)
    stored: int = 0


@dataclass
class GainPoint:
    """One run's gain ``G`` (fraction of tuning time the DB saved) at ``n`` records before it."""

    n: int
    gain: float
    kind: str
    name: str


def _runs_from_doc(doc: Any, where: str, out: RunsData) -> None:
    if isinstance(doc, list):
        for d in doc:
            _runs_from_doc(d, where, out)
        return
    if not isinstance(doc, Mapping):
        out.notes.append(f"{where}: skipped a JSON value that is not an object")
        return
    if is_run_summary(doc):  # a stored run summary (RecordStore.runs() / add_run schema)
        add_summaries(out, [doc], where)
        return
    run_id = str(doc.get("run_id") or "")
    if isinstance(doc.get("new"), list) and ("first_run" in doc or "source" in doc):  # tunedb demo
        preset = str(doc.get("new_preset", ""))
        had_history = False
        for row in doc["new"]:
            for label in ("warm", "cold"):
                hist = row.get(f"{label}_history")
                if not isinstance(hist, list):
                    continue
                had_history = True
                out.runs.append(TuneRun(target=preset, workload=dict(row.get("workload") or {}), label=label,
                                        history=hist, evaluations=len(hist), cache_hits=None,
                                        measurements=None, source=where, run_id=run_id, start=label))
        if not had_history:
            out.notes.append(f"{where}: this demo output holds no warm/cold histories (the demo's --json "
                             "output leaves them out), so its warm-vs-cold curves cannot be drawn")
        for key, label in (("first_run", "demo pass 1"), ("second_run", "demo pass 2")):
            p = doc.get(key)
            if isinstance(p, Mapping) and p.get("evaluations"):
                out.hit_points.append({"label": label, "evaluations": int(p["evaluations"]),
                                       "cache_hits": int(p.get("cache_hits") or 0), "run_id": run_id})
        return
    if isinstance(doc.get("workloads"), list) and "totals" in doc:  # tunedb warm-start
        for row in doc["workloads"]:
            _runs_from_doc({**row, "target": doc.get("target", ""), "label": row.get("label") or doc.get("label"),
                            "run_id": row.get("run_id") or run_id}, where, out)
        return
    hist = doc.get("history")
    if isinstance(hist, list):  # tunedb tune / TuneResult.to_json()
        seeds = doc.get("seeds") or []
        label = str(doc.get("label") or ("warm" if seeds else "cold"))
        hits = int(doc.get("cache_hits") or 0)
        meas = int(doc.get("measurements") or 0)
        run = TuneRun(target=str(doc.get("target") or ""), workload=dict(doc.get("workload") or {}),
                      label=label, history=hist, evaluations=int(doc.get("evaluations") or hits + meas),
                      cache_hits=hits, measurements=meas, source=where, run_id=run_id,
                      start="warm" if seeds else "cold")
        out.runs.append(run)
        if run.evaluations > 0:
            out.hit_points.append({"label": f"{len(out.hit_points) + 1}: {label} {run.workload.get('family', '')}",
                                   "evaluations": run.evaluations, "cache_hits": hits, "run_id": run_id})
        return
    out.notes.append(f"{where}: skipped an object that is neither a tune, warm-start nor demo result "
                     "nor a run summary")


def load_runs(paths: Iterable[str | Path]) -> RunsData:
    """Read run JSON files: ``tunedb tune --json`` / ``warm-start --json`` / ``demo --json``
    outputs (or ``TuneResult.to_json()``, or run summaries as ``RecordStore.runs()`` gives
    them), one object per file, a JSON list, or JSON lines.
    Raises ValueError (one line) for a file that cannot be read or parsed."""
    out = RunsData()
    for p in paths:
        path = Path(p)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise ValueError(f"cannot read runs file {path}: {e.strerror}") from None
        try:
            docs = [json.loads(text)]
        except json.JSONDecodeError:
            docs = []
            for n, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    try:
                        docs.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        raise ValueError(f"runs file {path} line {n} is not JSON: {e.msg}") from None
        for d in docs:
            _runs_from_doc(d, path.name, out)
    return out


def as_number(x: Any) -> float | None:
    """``x`` as a finite float (not a bool), else None."""
    from tunedb.transfer.search.runlog import finite

    return finite(x)


def as_count(x: Any) -> int | None:
    """``x`` as an int >= 0 (from an int or an integral float), else None."""
    v = as_number(x)
    return int(v) if v is not None and v >= 0 and v == int(v) else None


def is_run_summary(doc: Any) -> bool:
    """Whether ``doc`` looks like a run summary (``RecordStore.add_run`` schema): a mapping with
    a str ``kind`` and a ``tasks`` or ``parts`` list."""
    return (isinstance(doc, Mapping) and isinstance(doc.get("kind"), str)
            and (isinstance(doc.get("tasks"), list) or isinstance(doc.get("parts"), list)))


def run_parts(summary: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The runs a summary stands for: a demo's ``parts`` (the mappings among them) when it has
    any, else the summary itself (a demo's own totals and tasks would count its parts twice)."""
    parts = summary.get("parts")
    if isinstance(parts, list):
        found = [q for q in parts if isinstance(q, Mapping)]
        if found:
            return found
    return [summary]


def _history(raw: Any) -> list[list]:
    """The ``[[evaluation, best or None], ...]`` pairs of a task's history that are well formed."""
    out: list[list] = []
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, (list, tuple)) and len(item) == 2 and as_count(item[0]) is not None:
            b = as_number(item[1])
            out.append([as_count(item[0]), b if b is not None and b > 0 else None])
    return out


def part_name(part: Mapping[str, Any], parent: Mapping[str, Any] | None) -> str:
    """``[demo: ]kind label model-or-target`` of a run (or a demo's part), for labels."""
    words = [str(part.get(k) or "") for k in ("kind", "label")]
    words.append(str(part.get("model") or part.get("target") or ""))
    text = " ".join(w for w in words if w)
    return f"{parent.get('kind') or 'run'}: {text}" if parent is not None else text


def part_totals(part: Mapping[str, Any]) -> tuple[int, int]:
    """(evaluations, cache_hits) of a run or a demo's part: ``runlog.run_totals``, the one
    definition of the hit rate's counts (docs/runs.md) that ``tunedb stats`` uses too."""
    from tunedb.transfer.search.runlog import run_totals

    return run_totals(part)


#: the run kinds eta is summed over: the runs whose tasks the DB may answer whole
ETA_KINDS = ("tune-model", "warm-start")


def task_answered(task: Mapping[str, Any]) -> bool:
    """Whether the DB answered a run's task directly (the seeds' N_hit): a ``hit`` (reused
    whole, no search), or a search whose every evaluation the DB answered (evaluations > 0, no
    new measurement, no re-measurement)."""
    if task.get("source") == "hit":
        return True
    evals = as_count(task.get("evaluations")) or 0
    return (task.get("source") != "pending" and evals > 0 and not as_count(task.get("measurements"))
            and not as_count(task.get("remeasurements")))


def task_share(summary: Mapping[str, Any]) -> tuple[int, int]:
    """(tasks answered by the DB, tasks) of one run (:func:`task_answered`): eta = answered /
    tasks, the seeds' N_hit / N_total.  (0, 0) for a run without tasks."""
    tasks = [t for t in summary.get("tasks") or [] if isinstance(t, Mapping)]
    return sum(1 for t in tasks if task_answered(t)), len(tasks)


def eta_totals(summaries: Iterable[Mapping[str, Any]]) -> dict:
    """eta and the seeds' time formula summed over the stored model and warm-start runs
    (:data:`ETA_KINDS`) of ``summaries``, each counted once (``runlog.counted_runs``):
    ``answered`` / ``tasks`` (their :func:`task_share` summed), ``eta`` (None without tasks),
    ``runs``, ``t_full_s`` (the sum of the runs' T_full: each run's measuring time plus the
    recorded measuring time of the records that answered it), ``query_s`` (T_query, summed),
    ``t_total_s`` (measured: measuring + T_query, summed) and ``t_total_predicted_s`` = T_full
    (1 - eta) + T_query of those sums (None without a T_full).  Seconds."""
    from tunedb.transfer.search.runlog import counted_runs

    answered = tasks = runs = 0
    t_full = query = total = 0.0
    for s in counted_runs(summaries):
        if s.get("kind") not in ETA_KINDS:
            continue
        a, n = task_share(s)
        answered, tasks, runs = answered + a, tasks + n, runs + 1
        t_full += as_number(s.get("t_full_s")) or 0.0
        query += as_number(s.get("query_s")) or 0.0
        total += as_number(s.get("t_total_s")) or 0.0
    eta = answered / tasks if tasks else None
    return {"answered": answered, "tasks": tasks, "eta": eta, "runs": runs,
            "t_full_s": t_full if t_full > 0 else None, "query_s": query, "t_total_s": total,
            "t_total_predicted_s": t_full * (1 - eta) + query if t_full > 0 and eta is not None else None}


def eta_text(answered: int, tasks: int) -> str:
    """``12/12 tasks = 100.0 %`` (``- (no tasks)`` without tasks): eta, the task share."""
    return f"{answered}/{tasks} tasks = {answered / tasks * 100:.1f} %" if tasks else "- (no tasks)"


def count_runs(summaries: Iterable[Mapping[str, Any]]) -> int:
    """The tuning runs of ``summaries`` as :func:`add_summaries` keeps them (``RunsData.summaries``):
    one per summary, a demo by its parts (:func:`run_parts`)."""
    return sum(len(run_parts(s)) for s in summaries)


def add_summaries(out: RunsData, summaries: Iterable[Any], where: str) -> None:
    """Add run summaries (``RecordStore.runs()`` schema; every field optional) to ``out``: each
    summary to ``out.summaries``, one :class:`TuneRun` per task with a ``history`` list (of the
    summary, or of each demo part: :func:`run_parts`) and one hit point per run or part with
    evaluations.  A run's ``label`` (warm / cold / a tag) labels its tasks, with the model's name
    after it; without a label, a task's ``source`` (hit / warm: warm).

    Each tuning run is counted once, whatever the order the summaries come in: a summary (or
    part) whose ``run_id`` is in ``out`` already is skipped (a run given twice); a demo part whose
    ``run_id`` is a summary of its own (among ``summaries`` or in ``out``: ``tune-model`` stores
    each part it runs) is left out of the demo (counted where it is stored); a demo left with no
    part is skipped (the container is not a tuning run of its own)."""
    summaries = list(summaries)
    seen = _run_ids(out.summaries)
    standalone = {str(q["run_id"]) for q in [*out.summaries, *summaries]
                  if isinstance(q, Mapping) and q.get("run_id")}
    from tunedb.transfer.search.runlog import is_tuning_run

    for summary in summaries:
        if not isinstance(summary, Mapping):
            out.notes.append(f"{where}: skipped a run summary that is not an object")
            continue
        if not is_tuning_run(summary):  # a stored decision (tunedb compare, tune-model): not a run
            continue
        rid = str(summary.get("run_id") or "")
        if rid and rid in seen:
            continue
        parts = run_parts(summary)
        kept = [q for q in parts if q is summary or not q.get("run_id")
                or str(q["run_id"]) not in seen | standalone]
        if not kept:
            continue
        copy = dict(summary)
        if len(kept) != len(parts):  # a demo part stored on its own too: counted there
            copy["parts"] = [dict(q) for q in kept]
            for k in ("evaluations", "cache_hits", "measurements"):  # (its totals: of the parts kept)
                copy.pop(k, None)
        out.summaries.append(copy)
        seen |= _run_ids([copy])
        for part in run_parts(copy):
            parent = copy if part is not copy else None
            _add_part(out, part, parent, where, str(part.get("run_id") or "") or rid)


def _add_part(out: RunsData, part: Mapping[str, Any], parent: Mapping[str, Any] | None, where: str,
              run_id: str) -> None:
    """The tasks (as TuneRuns) and the hit point of one run or demo part (see add_summaries)."""
    label = str(part.get("label") or "")
    model = str(part.get("model") or "")
    target = str(part.get("target") or (parent or {}).get("target") or "")
    for t in part.get("tasks") or []:
        if not isinstance(t, Mapping) or not isinstance(t.get("history"), list):
            continue
        hist = _history(t["history"])
        lab = label or {"hit": "warm", "warm": "warm", "cold": "cold"}.get(str(t.get("source")), "")
        lab = " ".join(w for w in (lab or str(part.get("kind") or "run"), model) if w)
        src = str(t.get("source") or "")
        start = src if src in ("warm", "cold") else next((w for w in lab.split() if w in ("warm", "cold")), "")
        evals = as_count(t.get("evaluations"))
        wl = t.get("workload")
        out.runs.append(TuneRun(target=target, workload=dict(wl) if isinstance(wl, Mapping) else {}, label=lab,
                                history=hist,
                                evaluations=len(hist) if evals is None else evals,
                                cache_hits=as_count(t.get("cache_hits")), measurements=as_count(t.get("measurements")),
                                source=where, run_id=run_id, start=start))
    evals, hits = part_totals(part)
    if evals > 0:
        out.hit_points.append({"label": part_name(part, parent) or "run", "evaluations": evals,
                               "cache_hits": hits, "run_id": run_id})


def stored_runs(db: Any) -> list[dict]:
    """The run summaries ``db`` stores (``db.runs()``, oldest first); [] for a store without
    ``runs`` (or one whose ``runs`` raises NotImplementedError)."""
    fn = getattr(db, "runs", None)
    if not callable(fn):
        return []
    try:
        found = fn()
    except NotImplementedError:
        return []
    return [dict(r) for r in found if isinstance(r, Mapping)]


def _run_ids(summaries: Iterable[Mapping[str, Any]]) -> set[str]:
    """The run_ids of the summaries and of their parts."""
    return {str(q["run_id"]) for s in summaries for q in [s, *run_parts(s)] if q.get("run_id")}


def merge_runs(given: RunsData, stored: Iterable[Any]) -> RunsData:
    """The runs of the report: the ``stored`` summaries (oldest first; :func:`add_summaries`)
    then what ``given`` (:func:`load_runs`) holds that is not stored too: a given run, hit point
    or summary whose ``run_id`` names a stored run (or part) is dropped, with a note counting
    them.  ``given`` is not changed."""
    out = RunsData()
    add_summaries(out, stored, "database")
    out.stored = count_runs(out.summaries)
    ids = _run_ids(out.summaries)

    def dup(rid: Any) -> bool:
        return bool(rid) and str(rid) in ids

    dropped = {r.run_id for r in given.runs if dup(r.run_id)} | {p.get("run_id") for p in given.hit_points
                                                               if dup(p.get("run_id"))}
    dropped |= {s.get("run_id") for s in given.summaries if dup(s.get("run_id"))}
    out.runs += [r for r in given.runs if not dup(r.run_id)]
    out.hit_points += [p for p in given.hit_points if not dup(p.get("run_id"))]
    out.summaries += [s for s in given.summaries if not dup(s.get("run_id"))]
    out.notes = list(given.notes)
    if dropped:
        out.notes.append(f"{len(dropped)} run(s) given with --runs are stored in the database too "
                         "(same run_id): shown once, from the database")
    return out


def gain_points(summaries: Iterable[Mapping[str, Any]]) -> list[GainPoint]:
    """A :class:`GainPoint` per run (or demo part: :func:`run_parts`) with a finite ``gain``
    and an int ``records_before`` >= 0, in the order given."""
    out = []
    for s in summaries:
        for part in run_parts(s):
            g, n = as_number(part.get("gain")), as_count(part.get("records_before"))
            if g is not None and n is not None:
                out.append(GainPoint(n=n, gain=g, kind=str(part.get("kind") or "run"),
                                     name=part_name(part, s if part is not s else None)))
    return out

