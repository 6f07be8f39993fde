"""``tunedb report``: a self-contained HTML page (plus PNG figures) of what a DB knows.

Everything plotted comes from the DB: its records and the tuning-run summaries it stores
(``RecordStore.runs()``: what ``tunedb tune``, ``tune-model``, ``warm-start``, ``migrate`` and
``demo`` save, see ``tunedb.transfer.search.runlog``), plus tuning-run JSON the user passes in
(``--runs``; a run given there and stored too, by ``run_id``, is shown once: the stored copy).
Nothing is simulated, and a figure without data is omitted with a note saying why.

Figures (PNG files next to ``index.html``; matplotlib's Agg canvas, no display needed):

``convergence.png``
    per workload (the ones with the most records), one line per target: the fastest single
    measurement so far (seconds, log scale) against the number of that entry's records, in
    timestamp order (for imported records: the order of the source file).  A search's history,
    not the entry's cost: that is the estimator's (the best-configs table).
``warm_vs_cold.png`` (stored runs or ``--runs``)
    per workload that has both a warm and a cold search (:func:`figures.comparable_runs`), the
    in-run best so far against evaluations of each tuning run (each task of a stored run, of
    each part of a stored demo, or each run of the runs JSON), labelled with the run's ``label``
    (warm / cold / a user tag) or, without one, warm (the run had seeds from the DB) or cold (it
    had none); one colour per label across the panels, one shared legend.
``hit_rate.png`` (stored runs or ``--runs``)
    per run (stored runs oldest first, then the ``--runs`` ones in the order given), the share
    of its evaluations answered from the DB (``cache_hits / evaluations``) and the cumulative
    share.
``records_over_time.png``
    cumulative number of records against their timestamp, one line per record source.
``records_per_target.png``
    live records per target (bar chart).
``saturation.png``
    per entry with at least 3 ok records: the entry's fastest measurement divided by its fastest
    so far (1.0 = the fastest the DB has seen) against the number of its records, with the
    median over entries.
``gain_saturation.png`` (runs with ``gain`` and ``records_before``)
    the gain ``G = 1 - (measure_s + query_s) / t_full_s`` of each run (the fraction of tuning
    time the DB saved) against ``n``, the records in the DB when the run started, with the fit
    ``G(n) = G_max * (1 - exp(-beta * n))`` (:func:`saturation`: bounded 0 <= G_max <= 1, and
    "no fit" with the reason when the fit does not determine its parameters).
``similarity.png``
    cosine similarity of the targets' hardware vectors (``tunedb.index.retrieval.features.hardware_vector``).

The page also has a table of the stored runs and of the best config of each entry (most
records first).  Costs and times are seconds, shown with :func:`tunedb.index.estimate.fmt_seconds`.

The cost of a config or an entry is the estimator's (``tunedb.index.estimate``: the same number
as ``tunedb best``): :func:`entry_estimates` over the records the report reads (refuted ones left
out), shown with its n, interval and noisy flag (:func:`cost_brief`, the whole of it in a
tooltip: ``CostEstimate.text()``); a single record's ``cost`` is one measurement and is never
shown as a config's cost.

Each tuning run is counted once (:func:`add_summaries`): a ``demo`` summary is a container of
tune-model runs (its ``parts``) that ``tune-model`` also stores as runs of their own; a part whose
run_id is stored as a summary is counted there and left out of the demo, and a demo left with no
part is not a run of its own (it is skipped).  "Tuning runs" counts runs after that rule, a demo
by its remaining parts (:func:`count_runs`).
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
import warnings
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tunedb.index.estimate import CostEstimate, estimate_of_row, estimate_table, fmt_seconds
from tunedb.index.redact import mask_url
from tunedb.transfer.apps import figures
from tunedb.transfer.apps.figures import gain_model, gain_text, short_workload
from tunedb.transfer.apps.rundata import EntryCurve, GainPoint, RunsData, TuneRun

if TYPE_CHECKING:
    from tunedb.index.base import RecordStore

MAX_CONVERGENCE_WORKLOADS = 6
MAX_LINES_PER_PANEL = 8
MAX_BAR_TARGETS = 40
MAX_HEATMAP_TARGETS = 30
MAX_TABLE_ROWS = 60
MIN_SATURATION_RECORDS = 3
MAX_HIT_BARS = 60
MIN_FIT_POINTS = 3
#: G <= 1 by definition (the DB cannot save more than all of the tuning time)
G_MAX_BOUNDS = (0.0, 1.0)
#: G_max within this of its upper bound counts as "at the bound"
AT_BOUND = 1e-3
#: at the bound, a standard error of G_max above this says the points do not show the level
AT_BOUND_MAX_SE = 0.2


# ----------------------------------------------------------------------------- data
#: the record columns :func:`entry_estimates` reads (and ``config_key`` for ties, when present)
ESTIMATE_COLUMNS = ["entry_key", "lookup_key", "status", "costs", "meta"]


def cost_brief(est: CostEstimate | None, missing: str = "–") -> str:
    """An estimate as a table cell: ``4.54 ms ±3% n=5`` (the 95 % interval's half-width relative
    to the value, ``±12% (72 % CI)`` when too few values give it a lower level; n: its records,
    ``n=1 (32 repeats)`` for one record's repeats; ``noisy`` appended
    when it is), ``missing`` for None.  The whole of it (the
    interval and its confidence) is ``est.text()``: the cell's tooltip."""
    if est is None:
        return missing
    from tunedb.index.estimate import LEVEL, ci_label

    words = [fmt_seconds(est.value)]
    if est.has_interval:
        rel = est.rel_halfwidth
        words.append(f"±{rel:.0%}" if rel >= 0.01 else f"±{rel * 100:.1f}%")
        if est.coverage < LEVEL - 1e-9:  # a 95 % interval unless it says otherwise
            words.append(f"({ci_label(est.coverage)})")
    words.append(f"n={est.records}" if est.records != 1 or est.samples <= 1 else f"n=1 ({est.samples} repeats)")
    if est.noisy:
        words.append("noisy")
    return " ".join(words)


def not_refuted(t: Any, refuted: Iterable[str] | None) -> np.ndarray | None:
    """A mask of the rows of ``t`` that are not ``refuted`` (record_ids; by the ``rid_hash``
    column when ``t`` has no ``record_id``), or None when there is nothing to leave out."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = sorted(set(refuted or ()))
    if not ids or t.num_rows == 0:
        return None
    if "record_id" in t.column_names:
        m = pc.is_in(t.column("record_id"), value_set=pa.array(ids, pa.string()))
    else:
        from tunedb.index.keys import rid_hashes

        m = pc.is_in(t.column("rid_hash"), value_set=pa.array(rid_hashes(ids), pa.int64()))
    return ~np.asarray(pc.fill_null(m, False))


def entry_estimates(t: Any, keep: np.ndarray | None = None) -> Any:
    """The estimator's best config of every entry of the records table ``t`` (at least
    :data:`ESTIMATE_COLUMNS`; the rows where ``keep`` is True when given): one row per entry with
    an ok record, as an Arrow table with ``entry_key``, ``row`` (the index in ``t`` of a record
    of the best config: its config, keys and provenance), ``lookup_key`` and the columns of
    ``tunedb.index.estimate.estimate_table`` (value, lo, hi, records, samples, coverage,
    confirmed, basis, noisy; :func:`estimate_of_row` of a row is its CostEstimate).  Each config
    is estimated from its records (``estimate_table`` by ``lookup_key``, vectorised), the entry's
    best is the first in ranking order (``tunedb.index.estimate.rank_key``: confirmed estimates
    first, then the lowest value), ties by ``config_key`` when ``t`` has it (as ``tunedb best``
    orders them), else by ``lookup_key``."""
    import pyarrow as pa

    idx = np.arange(t.num_rows, dtype=np.int64)
    if keep is not None:
        idx = idx[np.asarray(keep, bool)]
        t = t.filter(pa.array(np.asarray(keep, bool)))
    est = estimate_table(t.select(["lookup_key", "status", "costs", "meta"]), by=("lookup_key",)) \
        if t.num_rows else None
    names = ["entry_key", "row", "lookup_key", "value", "lo", "hi", "records", "samples", "coverage", "confirmed",
             "basis", "noisy", "statistic", "tuner"]
    if est is None or est.num_rows == 0:
        return pa.table({n: pa.array([], pa.string() if n in ("basis", "statistic", "tuner") else pa.bool_() if n == "noisy"
                                     else pa.float64() if n in ("value", "lo", "hi", "coverage") else pa.int64())
                         for n in names})
    lk = t.column("lookup_key").to_numpy()
    uniq, first = np.unique(lk, return_index=True)
    elk = est.column("lookup_key").to_numpy()
    rows = first[np.searchsorted(uniq, elk)]          # (a record of each config: its first row)
    ek = t.column("entry_key").take(pa.array(rows)).to_numpy()
    value = est.column("value").to_numpy()
    if "config_key" in t.column_names:
        ck = np.asarray(t.column("config_key").take(pa.array(rows)).to_pylist(), dtype=str)
        tie = np.unique(ck, return_inverse=True)[1].reshape(-1)
    else:
        tie = elk
    unconfirmed = est.column("basis").to_numpy(zero_copy_only=False) != "confirmed"
    order = np.lexsort((tie, value, unconfirmed, ek))  # (rank_key's order within each entry)
    eks = ek[order]
    pick = order[np.r_[True, eks[1:] != eks[:-1]]] if len(eks) else order
    out = est.take(pa.array(pick))
    return out.add_column(0, "row", pa.array(idx[rows[pick]], pa.int64())) \
        .add_column(0, "entry_key", pa.array(ek[pick], pa.int64())).select(names)


def entry_curves(table: Any, refuted: Iterable[str] | None = None) -> list[EntryCurve]:
    """One :class:`EntryCurve` per (target_key, workload_key) of a records table
    (``RecordStore.records()``), records ordered by timestamp (ties: table order): the fastest
    measurement so far after each, and the estimator's best config (:func:`entry_estimates`;
    ``refuted`` record_ids, which never answer a lookup, are left out of it as ``tunedb best``
    leaves them out)."""
    n = table.num_rows
    if n == 0:
        return []
    tk = table.column("target_key").to_pylist()
    wk = table.column("workload_key").to_pylist()
    names = table.column("target_name").to_pylist()
    wjs = table.column("workload").to_pylist()
    srcs = table.column("source").to_pylist()
    status = table.column("status").to_pylist()
    cost = table.column("cost").to_pylist()
    ts = table.column("timestamp").cast("int64").to_pylist()
    committed = table.column("committed").cast("int64").to_pylist()
    ek = table.column("entry_key").to_pylist()
    best = entry_estimates(table, not_refuted(table, refuted))
    best_of = {int(e): i for i, e in enumerate(best.column("entry_key").to_pylist())}
    best_rows = best.column("row").to_pylist()
    when = np.array([t if t is not None else (c if c is not None else 0) for t, c in zip(ts, committed)], np.int64)
    order = np.lexsort((np.arange(n), when))
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i in order.tolist():
        groups[(tk[i], wk[i])].append(i)
    out: list[EntryCurve] = []
    for (t, w), rows in groups.items():
        seen: float | None = None
        curve: list[float | None] = []
        for i in rows:
            c = cost[i]
            if status[i] == "ok" and c is not None and math.isfinite(c) and (seen is None or c < seen):
                seen = float(c)
            curve.append(seen)
        j = best_of.get(int(ek[rows[0]]))
        est = None if j is None else estimate_of_row(best.slice(j, 1).to_pylist()[0])
        cfg = None if j is None else json.loads(table.column("config")[best_rows[j]].as_py())
        out.append(EntryCurve(
            target_key=t, target_name=names[rows[0]] or t[:8], workload_key=w, workload=json.loads(wjs[rows[0]]),
            records=len(rows), ok_records=sum(1 for i in rows if status[i] == "ok" and cost[i] is not None),
            best_so_far=curve, best_config=cfg, estimate=est, best_seen=seen, sources=sorted({srcs[i] for i in rows})))
    out.sort(key=lambda e: (-e.records, e.target_name, e.workload_key))
    return out


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


# ---------------------------------------------------------------- stored run summaries
def _num(x: Any) -> float | None:
    """``x`` as a finite float (not a bool), else None."""
    from tunedb.transfer.search.runlog import finite

    return finite(x)


def _count(x: Any) -> int | None:
    """``x`` as an int >= 0 (from an int or an integral float), else None."""
    v = _num(x)
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
        if isinstance(item, (list, tuple)) and len(item) == 2 and _count(item[0]) is not None:
            b = _num(item[1])
            out.append([_count(item[0]), b if b is not None and b > 0 else None])
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
        evals = _count(t.get("evaluations"))
        wl = t.get("workload")
        out.runs.append(TuneRun(target=target, workload=dict(wl) if isinstance(wl, Mapping) else {}, label=lab,
                                history=hist,
                                evaluations=len(hist) if evals is None else evals,
                                cache_hits=_count(t.get("cache_hits")), measurements=_count(t.get("measurements")),
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
            g, n = _num(part.get("gain")), _count(part.get("records_before"))
            if g is not None and n is not None:
                out.append(GainPoint(n=n, gain=g, kind=str(part.get("kind") or "run"),
                                     name=part_name(part, s if part is not s else None)))
    return out


def _fit_pairs(n: Iterable[Any], g: Iterable[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The (n, G) pairs with a finite n >= 0 and a finite G, as float arrays."""
    pairs = [(a, b) for a, b in ((_num(x), _num(y)) for x, y in zip(n, g)) if a is not None and a >= 0
             and b is not None]
    return (np.array([a for a, _ in pairs], np.float64), np.array([b for _, b in pairs], np.float64))


def saturation_fit_reason(n: Iterable[Any], g: Iterable[Any]) -> str | None:
    """Why :func:`fit_saturation` cannot fit these points (one line), or None when it can try:
    it needs at least MIN_FIT_POINTS points (finite n >= 0, finite G) with distinct n, and a run
    with G > 0 (G_max is bounded below by 0: points all below it would fit G_max = 0, a level
    that says nothing)."""
    x, y = _fit_pairs(n, g)
    distinct = len(set(x.tolist()))
    if len(x) < MIN_FIT_POINTS:
        return (f"{len(x)} run(s) with a gain and records_before; the fit of G(n) (the gain against the records before the run) needs at least "
                f"{MIN_FIT_POINTS} with distinct n")
    if distinct < MIN_FIT_POINTS:
        return (f"the {len(x)} runs with a gain started with only {distinct} distinct number(s) of records "
                f"in the database (n); the fit of G(n) (the gain against the records before the run) needs at least {MIN_FIT_POINTS}")
    if not np.any(y > 0):
        return (f"no run gained time from the database (G <= 0 in all {len(x)}: its queries cost more than its "
                "answers saved), so there is no saturation level to fit")
    return None


def fit_problem(fit: Mapping[str, Any]) -> str | None:
    """Why a :func:`fit_saturation` result says nothing (one line), or None when it is a fit to
    show: a standard error that is not finite, or larger than its parameter (G_max = 1.5 ± 33
    is no estimate of G_max), or G_max at its upper bound (1: G can never exceed it) with a
    standard error above AT_BOUND_MAX_SE (the points do not show where G levels off)."""
    g, g_se, b, b_se = fit["g_max"], fit["g_max_se"], fit["beta"], fit["beta_se"]
    if g_se is None or b_se is None:
        return (f"the fit over {fit['points']} runs has no finite standard error (G_max = {g:.3g}, "
                f"beta = {b:.3g} per record): the points do not determine it")
    if g >= G_MAX_BOUNDS[1] - AT_BOUND and g_se > AT_BOUND_MAX_SE:
        return (f"the fit over {fit['points']} runs put G_max at its bound {G_MAX_BOUNDS[1]:g} (G <= 1 by "
                f"definition) with a standard error of {g_se:.2g}: the points do not show where G levels off")
    if g_se > g:
        return (f"the fit over {fit['points']} runs gives G_max = {g:.3g} with a standard error of {g_se:.2g}, "
                "larger than the value: the points do not determine G_max")
    if b_se > b:
        return (f"the fit over {fit['points']} runs gives beta = {b:.3g} per record with a standard error of "
                f"{b_se:.2g}, larger than the value: the points do not show how fast G saturates")
    return None


def saturation(n: Iterable[Any], g: Iterable[Any]) -> tuple[dict | None, str | None]:
    """The fit of G(n) to show: (:func:`fit_saturation`'s dict, None), or (None, why there is
    no fit: one line) when the points cannot be fitted (:func:`saturation_fit_reason`), the fit
    fails, or it is not meaningful (:func:`fit_problem`).  What both the report and the
    dashboard show."""
    reason = saturation_fit_reason(n, g)
    fit = None if reason else fit_saturation(n, g)
    if fit is None and reason is None:
        reason = "scipy's curve_fit found no finite fit of G(n) (the gain against the records before the run) to these points"
    if fit is not None:
        reason = fit_problem(fit)
        if reason is not None:
            fit = None
    return fit, reason


def fit_saturation(n: Iterable[Any], g: Iterable[Any]) -> dict | None:
    """Least-squares fit of ``G(n) = G_max * (1 - exp(-beta * n))`` (:func:`gain_model`) to the
    points (``n``: records in the DB before each run; ``g``: each run's gain, a fraction) with
    ``scipy.optimize.curve_fit``, bounded ``G_max`` in G_MAX_BOUNDS (0..1: G <= 1 by definition)
    and ``beta > 0``; initial
    guesses: ``G_max`` = the largest G, ``beta`` = 1 / the smallest n whose G reaches 63% of it.

    Returns ``{"g_max", "beta" (per record), "g_max_se", "beta_se" (standard errors from the
    covariance; None when it is not finite), "points", "rmse" (of G)}``, or None when
    :func:`saturation_fit_reason` gives a reason or the fit fails (does not converge, or gives
    no finite estimate).  Points with a non-finite value or n < 0 are left out.  Whether the fit
    means anything is :func:`fit_problem`'s question (:func:`saturation` asks it)."""
    if saturation_fit_reason(n, g) is not None:
        return None
    from scipy.optimize import OptimizeWarning, curve_fit

    x, y = _fit_pairs(n, g)
    scale = float(x.max())      # fit beta * scale on n / scale (well conditioned), then scale back
    xs = x / scale
    g0 = float(np.clip(y.max(), 1e-3, G_MAX_BOUNDS[1] - 1e-6))
    order = np.argsort(xs)
    reached = [float(v) for v in xs[order][y[order] >= 0.632 * g0] if v > 0]
    b0 = float(np.clip(1.0 / (reached[0] if reached else float(np.median(xs[xs > 0]))), 1e-3, 1e3))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            popt, pcov = curve_fit(gain_model, xs, y, p0=[g0, b0],
                                   bounds=([G_MAX_BOUNDS[0], 1e-9], [G_MAX_BOUNDS[1], np.inf]), maxfev=20_000)
    except (RuntimeError, ValueError):
        return None
    if not np.all(np.isfinite(popt)):
        return None
    se = np.sqrt(np.abs(np.diag(pcov))) if np.shape(pcov) == (2, 2) else np.full(2, np.inf)

    def finite(v: float) -> float | None:
        return float(v) if math.isfinite(v) else None

    resid = y - gain_model(xs, *popt)
    return {"g_max": float(popt[0]), "beta": float(popt[1]) / scale, "g_max_se": finite(se[0]),
            "beta_se": finite(se[1] / scale), "points": int(len(x)), "rmse": float(np.sqrt(np.mean(resid ** 2)))}


# -------------------------------------------------------------------------- figures
def _figure(width: float, height: float):
    from matplotlib.figure import Figure  # the Agg canvas; pyplot (and a display) is never used

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    return fig


def _save(fig: Any, path: Path) -> None:
    fig.savefig(path, format="png")


def _grid(n: int) -> tuple[int, int]:
    cols = min(n, 3)
    return math.ceil(n / cols), cols


def plot_convergence(curves: list[EntryCurve], path: Path) -> list[str] | None:
    """Best cost so far per entry, one panel per workload (:func:`figures.convergence_figure`);
    returns the workloads drawn or None."""
    spec = figures.convergence_figure(curves, max_panels=MAX_CONVERGENCE_WORKLOADS, max_lines=MAX_LINES_PER_PANEL)
    return [p.title for p in spec.panels] if figures.to_matplotlib(spec, path) else None


def warm_vs_cold_spec(runs: list[TuneRun]) -> figures.FigureSpec:
    """The report's warm-vs-cold figure (:func:`figures.warm_vs_cold_figure`)."""
    return figures.warm_vs_cold_figure(runs, max_panels=3 * MAX_CONVERGENCE_WORKLOADS, max_lines=MAX_LINES_PER_PANEL)


def plot_warm_vs_cold(runs: list[TuneRun], path: Path) -> int:
    """In-run best so far against evaluations of each run, one panel per workload with both a
    warm and a cold run (:func:`figures.warm_vs_cold_figure`); returns the panels drawn."""
    spec = warm_vs_cold_spec(runs)
    return len(spec.panels) if figures.to_matplotlib(spec, path) else 0


def plot_hit_rate(data: RunsData, path: Path) -> int:
    """Share of evaluations answered from the DB per run (in the order given) and cumulatively
    (over all runs); only the last MAX_HIT_BARS runs are drawn (:func:`figures.hit_rate_figure`).
    Returns the runs drawn."""
    spec = figures.hit_rate_figure(data.hit_points, max_bars=MAX_HIT_BARS)
    return len(spec.panels[0].series[0].x) if figures.to_matplotlib(spec, path) else 0


def record_times_by_source(table: Any) -> dict[str, np.ndarray]:
    """source -> the records' timestamps (microseconds; the commit time when a record has none)."""
    if table.num_rows == 0:
        return {}
    import pyarrow.compute as pc

    when = pc.coalesce(table.column("timestamp").cast("int64"), table.column("committed").cast("int64"))
    keep = pc.is_valid(when)
    when = when.filter(keep).to_numpy()
    srcs = np.asarray(table.column("source").fill_null("?").filter(keep).to_numpy(zero_copy_only=False))
    return {str(s) or "?": when[srcs == s] for s in np.unique(srcs)}


def plot_records_over_time(table: Any, path: Path) -> bool:
    """Cumulative records against their timestamps, one line per source
    (:func:`figures.records_over_time_figure`)."""
    return figures.to_matplotlib(figures.records_over_time_figure(record_times_by_source(table)), path)


def plot_records_per_target(targets: list[dict], path: Path) -> int:
    """Horizontal bars: live records per target (the ones with the most records)."""
    ts = sorted(targets, key=lambda t: (-t["records"], t["target_name"]))[:MAX_BAR_TARGETS]
    if not ts:
        return 0
    fig = _figure(6.5, max(2.2, 0.28 * len(ts) + 1.0))
    ax = fig.add_subplot()
    y = np.arange(len(ts))[::-1]
    counts = [t["records"] for t in ts]
    ax.barh(y, counts, color="tab:blue")
    ax.set_yticks(y, [t["target_name"] or t["target_key"][:8] for t in ts], fontsize=7)
    if max(counts) / max(min(counts), 1) > 100:
        ax.set_xscale("log")
    for yi, c in zip(y, counts):
        ax.annotate(str(c), (c, yi), textcoords="offset points", xytext=(3, -3), fontsize=6)
    ax.set_xlabel("records", fontsize=8)
    ax.grid(alpha=0.3, axis="x")
    _save(fig, path)
    return len(ts)


def saturation_series(curves: list[EntryCurve]) -> list[list[float]]:
    """Per entry with >= MIN_SATURATION_RECORDS ok records: its fastest measurement / the fastest
    so far, after each record (0 before the first ok record)."""
    out = []
    for e in curves:
        if e.ok_records < MIN_SATURATION_RECORDS or not e.best_seen:
            continue
        out.append([0.0 if b is None else e.best_seen / b for b in e.best_so_far])
    return out


def plot_saturation(curves: list[EntryCurve], path: Path) -> int:
    """Fraction of the entry's best against its number of records, with the median over entries."""
    series = saturation_series(curves)
    if not series:
        return 0
    fig = _figure(6.5, 3.6)
    ax = fig.add_subplot()
    for s in series[:200]:
        ax.plot(np.arange(1, len(s) + 1), s, color="tab:gray", alpha=0.25, linewidth=0.8)
    longest = max(len(s) for s in series)
    med_x, med_y = [], []
    for n in range(longest):
        vals = [s[n] for s in series if len(s) > n]
        if len(vals) < min(3, len(series)):
            break
        med_x.append(n + 1)
        med_y.append(float(np.median(vals)))
    if med_x:
        ax.plot(med_x, med_y, color="tab:red", linewidth=2.0, label=f"median over {len(series)} entries")
    ax.set_xscale("log" if longest > 50 else "linear")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("records of the entry (timestamp order)", fontsize=8)
    ax.set_ylabel("fastest measurement / fastest so far", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    _save(fig, path)
    return len(series)


def plot_gain_saturation(points: list[GainPoint], fit: dict | None, path: Path, reason: str | None = None) -> int:
    """Each run's gain G against n (records in the DB before it), one colour per run kind, and the
    fit ``G_max * (1 - exp(-beta * n))`` (``fit``: :func:`saturation`'s dict, or None: the points
    alone, ``reason`` saying why; :func:`figures.gain_saturation_figure`).  Returns the points
    drawn (0: nothing written)."""
    return len(points) if figures.to_matplotlib(figures.gain_saturation_figure(points, fit, reason), path) else 0


def hardware_similarity(targets: list[dict]) -> tuple[list[str], np.ndarray] | None:
    """(names, cosine matrix) of the targets' hardware vectors; None when features are unavailable."""
    try:
        from tunedb.index.retrieval.features import hardware_vector
    except ImportError:
        return None
    names, vecs = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unknown devices are embedded from their tokens (a warning each)
        for t in targets:
            v = np.asarray(hardware_vector(t["target"]), dtype=np.float64)
            nrm = np.linalg.norm(v)
            vecs.append(v / nrm if nrm > 0 else v)
            names.append(t["target_name"] or t["target_key"][:8])
    m = np.array(vecs)
    return names, np.clip(m @ m.T, -1.0, 1.0)


def plot_similarity(targets: list[dict], path: Path) -> int:
    """Heatmap of hardware cosine similarity of the targets with the most records."""
    ts = sorted(targets, key=lambda t: (-t["records"], t["target_name"]))[:MAX_HEATMAP_TARGETS]
    if len(ts) < 2:
        return 0
    res = hardware_similarity(ts)
    if res is None:
        return 0
    names, sim = res
    n = len(names)
    size = max(4.0, 0.32 * n + 2.5)
    fig = _figure(size + 1.0, size)
    ax = fig.add_subplot()
    im = ax.imshow(sim, vmin=-1, vmax=1, cmap="RdBu_r")
    ax.set_xticks(range(n), names, rotation=90, fontsize=7)
    ax.set_yticks(range(n), names, fontsize=7)
    if n <= 14:
        for i in range(n):
            for j in range(n):
                ax.text(j, i, f"{sim[i, j]:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if abs(sim[i, j]) > 0.6 else "black")
    fig.colorbar(im, ax=ax, shrink=0.8, label="cosine of hardware vectors")
    _save(fig, path)
    return n


# ----------------------------------------------------------------------------- page
def _fmt_s(s: float | None) -> str:
    """A duration (:func:`tunedb.index.estimate.fmt_seconds`, the one unit style), ``–`` when unknown."""
    return fmt_seconds(s, missing="–")


def _cost_html(est: CostEstimate | None) -> str:
    """An estimate as a table cell (:func:`cost_brief`), the whole of it (``text()``) as its tooltip."""
    if est is None:
        return "–"
    return f"<span title=\"{html.escape(est.text())}\">{html.escape(cost_brief(est))}</span>"


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1200px;
color:#222;padding:0 1em}
h1{margin-bottom:.2em} h2{margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.2em}
figure{margin:1em 0} figure img{max-width:100%;border:1px solid #eee}
figcaption,.note{color:#555;font-size:.9em} .note{background:#f7f7f2;border-left:3px solid #cc9;padding:.4em .8em}
table{border-collapse:collapse;font-size:.85em} td,th{border:1px solid #ddd;padding:.25em .5em;text-align:left;
vertical-align:top} th{background:#f3f3f3} td.num{text-align:right} code{font-size:.9em}
"""


def _table(headers: list[str], rows: list[list[str]], numeric: set[int] | None = None) -> str:
    numeric = numeric or set()
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td class=\"num\">{c}</td>" if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def build_report(db: RecordStore, out_dir: str | Path, runs: RunsData | None = None) -> dict:
    """Write ``index.html`` and its PNG figures into ``out_dir`` (created); returns
    ``{"out": str(out_dir), "files": [names relative to out_dir], "notes": [...], "summary": {...}}``.
    ``db`` is any record store (its live records, targets and stored run summaries are read;
    a store without ``runs()`` has none); ``runs``: runs given besides (:func:`load_runs`),
    merged with the stored ones by :func:`merge_runs`.

    ``summary`` holds counts (records, targets, entries, families, sources), ``runs`` (searches
    drawn: tasks of stored runs plus given runs), ``runs_given`` (those from ``runs``),
    ``stored_runs`` (run summaries in the DB), ``saturation_fit`` (:func:`fit_saturation`'s dict
    over the runs' gains, or None) and ``saturation_fit_reason`` (why there is none, else None)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = merge_runs(runs or RunsData(), stored_runs(db))
    table = db.records(include_stale=False)
    targets = db.targets()
    curves = decided_curves(db, entry_curves(table, refuted_ids(db)), targets)
    page = _Page(out, notes=list(data.notes))
    _tuning_sections(page, curves, data)
    fit, reason = _store_sections(page, table, targets, curves, data)
    page.sections.append(_best_configs_section(curves))
    summary = _summary(table, targets, curves, data)
    summary.update(saturation_fit=fit, saturation_fit_reason=reason)
    head = _head_table(db.location, summary)
    (out / "index.html").write_text(_page_html(head, page.sections, page.notes), encoding="utf-8")
    return {"out": str(out), "files": ["index.html", *page.files], "notes": page.notes, "summary": summary}


def decided_curves(db: Any, curves: list[EntryCurve], targets: list[dict]) -> list[EntryCurve]:
    """``curves`` with the best config of every entry that has a stored decision replaced by
    the entry's answer (``tunedb.index.decisions.answer``: what ``tunedb best`` lists first),
    so the report's best configs are the CLI's.  Entries without a decision keep the
    estimator's best (the same answer, read from the whole table at once)."""
    from tunedb.index.decisions import stored_decisions

    decisions = stored_decisions(db) if hasattr(db, "runs") else []
    decided = {(d.get("target_key"), d.get("workload_key")) for d in decisions}
    if not decided:
        return curves
    from tunedb.index.decisions import answer

    target_of = {t["target_key"]: t["target"] for t in targets}
    for c in curves:
        if (c.target_key, c.workload_key) not in decided or c.target_key not in target_of:
            continue
        head = answer(db, target_of[c.target_key], c.workload, summaries=decisions).first()
        if head is not None:
            c.best_config, c.estimate = dict(head.config), head.estimate
    return curves


def refuted_ids(db: Any) -> set[str]:
    """The record_ids ``db`` marks refuted (none for a store without verdicts)."""
    fn = getattr(db, "verdicts", None)
    try:
        found = fn() if callable(fn) else {}
    except NotImplementedError:
        found = {}
    return {rid for rid, v in found.items() if v == "refuted"}


@dataclass
class _Page:
    """What the page collects while figures are drawn: file names, notes and HTML sections."""

    out: Path
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)

    def figure(self, name: str, title: str, caption: str, drawn: Any, missing: str) -> None:
        """A figure section for ``name`` when ``drawn``, else a note saying ``missing`` (and no file)."""
        if drawn:
            self.files.append(name)
            self.sections.append(f"<h2>{html.escape(title)}</h2><figure><img src=\"{name}\" "
                                 f"alt=\"{html.escape(title)}\"><figcaption>{caption}</figcaption></figure>")
        else:
            (self.out / name).unlink(missing_ok=True)
            self.notes.append(f"{title}: {missing}")
            self.sections.append(f"<h2>{html.escape(title)}</h2><p class=\"note\">{html.escape(missing)}</p>")


def _tuning_sections(page: _Page, curves: list[EntryCurve], runs: RunsData) -> None:
    """The search figures: warm vs cold (runs), convergence (DB), hit rate (runs) and its table."""
    out = page.out
    spec = warm_vs_cold_spec(runs.runs)
    drawn = len(spec.panels) if runs.runs and figures.to_matplotlib(spec, out / "warm_vs_cold.png") else 0
    missing = ("no tuning-run histories: the database stores no run with task histories ('tunedb tune', "
               "'tune-model', 'warm-start' and 'demo' store theirs) and none were given: run one of them, or "
               "pass --runs with the JSON output of 'tunedb tune', 'tunedb warm-start' (with and without --cold) "
               "or a demo output that includes its histories")
    if runs.runs and spec.empty and spec.empty != figures.NO_HISTORIES:
        missing = spec.empty
    page.figure("warm_vs_cold.png", "Warm start vs cold search",
                "In-run best so far (seconds, log scale: the best each search had measured or looked up at that "
                "point, what the run saw) against evaluations of each search, for the workloads that have both a "
                "warm and a cold search: each task of the tuning runs stored in the database (of each part of a "
                "demo) and each run given with <code>--runs</code>; <b>warm</b> runs were seeded from the "
                "database's nearest entries, <b>cold</b> runs had no seeds (or the label stored with the run, then "
                "the model's name for model runs); one colour per label in every panel.", drawn, missing)
    conv = plot_convergence(curves, out / "convergence.png")
    page.figure("convergence.png", "Convergence per workload (from the database)",
                "For the workloads with the most records: the fastest single measurement so far (seconds, log "
                "scale) of each target's entry against the number of its records in timestamp order (imported "
                "records keep their file order): the search's history, not the entry's cost (the best-configs "
                "table below gives the estimate). Warm and cold runs of the same target and workload share one "
                "entry in the database, so this view cannot tell them apart; see the figure above.", conv,
                f"no entry has {MIN_SATURATION_RECORDS} or more ok records")
    drawn = plot_hit_rate(runs, out / "hit_rate.png")
    page.figure("hit_rate.png", "Hit rate over time",
                "Share of each run's evaluations answered from the database instead of measured (bars; labels are "
                "hits/evaluations) and the cumulative share (line): the runs stored in the database oldest first "
                "(each part of a demo), then those given with <code>--runs</code> in the order given "
                f"(the last {MAX_HIT_BARS} are drawn; the cumulative share counts all).", drawn,
                "no tuning run with evaluations is stored in the database ('tunedb tune', 'tune-model', "
                "'warm-start' and 'demo' store theirs) and none were given: run one of them, or pass --runs with "
                "'tunedb tune/warm-start/demo --json' outputs")
    if runs.hit_points:
        shown = runs.hit_points[-MAX_TABLE_ROWS:]
        page.sections.append(_table(["run", "evaluations", "answered from the DB", "hit rate"], [
            [html.escape(p["label"]), str(p["evaluations"]), str(p["cache_hits"]),
             f"{p['cache_hits'] / p['evaluations']:.0%}" if p["evaluations"] else "–"] for p in shown],
            {1, 2, 3}) + (f"<p class=\"note\">The last {len(shown)} of {len(runs.hit_points)} runs.</p>"
                          if len(shown) < len(runs.hit_points) else ""))
    page.sections.append(_runs_section(runs))


def _store_sections(page: _Page, table: Any, targets: list[dict], curves: list[EntryCurve],
                    runs: RunsData) -> tuple[dict | None, str | None]:
    """The figures of what the store holds: records over time, per target, saturation, the gain's
    saturation (of ``runs``), similarity; returns the gain fit and why there is none
    (:func:`_gain_section`)."""
    out = page.out
    drawn = plot_records_over_time(table, out / "records_over_time.png")
    page.figure("records_over_time.png", "Records over time",
                "Cumulative number of records against their timestamps (UTC), one line per source "
                "(measured, replay, imported:&lt;format&gt;, migrated:&lt;target&gt;).", drawn,
                "the database holds no records")
    drawn = plot_records_per_target(targets, out / "records_per_target.png")
    page.figure("records_per_target.png", "Records per target",
                f"Live records per target (the {MAX_BAR_TARGETS} targets with the most records).", drawn,
                "the database holds no records")
    drawn = plot_saturation(curves, out / "saturation.png")
    page.figure("saturation.png", "Saturation: best cost against number of records",
                f"Each grey line is one entry with at least {MIN_SATURATION_RECORDS} ok records: the entry's fastest "
                "single measurement divided by its fastest so far after each of its records (1.0 = the fastest "
                "the database has seen); "
                "red: the median over entries (drawn while at least 3 entries have that many records).", drawn,
                f"no entry has {MIN_SATURATION_RECORDS} or more ok records")
    fit = _gain_section(page, runs)
    drawn = plot_similarity(targets, out / "similarity.png")
    page.figure("similarity.png", "Similarity of targets",
                "Cosine similarity of the targets' hardware feature vectors "
                "(<code>tunedb.index.retrieval.features.hardware_vector</code>), the hardware half of what <code>tunedb nearest</code> "
                "ranks by.", drawn, "fewer than two targets (or tunedb.index.retrieval.features is not available)")
    return fit


def _gain_section(page: _Page, runs: RunsData) -> tuple[dict | None, str | None]:
    """The ``gain_saturation.png`` section: the runs' gain against n with the fit of G(n), the fit's
    parameters (or why there is none) below it; returns (fit, reason) for the summary."""
    points = gain_points(runs.summaries)
    ns, gs = [q.n for q in points], [q.gain for q in points]
    fit, reason = saturation(ns, gs)
    drawn = plot_gain_saturation(points, fit, page.out / "gain_saturation.png", reason)
    page.figure("gain_saturation.png", "Saturation: gain of the database against its size",
                "Each point is one stored tuning run (or part of a demo): its gain <i>G</i> = 1 − (measuring time + "
                "query time) / <i>T</i><sub>full</sub>, the fraction of tuning time the database saved (below 0: time it cost) "
                "(<i>T</i><sub>full</sub>: the measuring time without it), against <i>n</i>, the records in the "
                "database when the run started; the line is the least-squares fit "
                "<i>G</i>(<i>n</i>) = <i>G</i><sub>max</sub> (1 − e<sup>−β<i>n</i></sup>), 0 ≤ <i>G</i><sub>max</sub> "
                "≤ 1 (drawn only when the points determine it).", drawn,
                "no run has both a gain and records_before ('tunedb tune-model' and 'demo' store them)")
    if fit is not None:
        def pm(v: float, se: float | None) -> str:
            return f"{v:.4g} ± {se:.2g}" if se is not None else f"{v:.4g} (standard error not finite)"

        half = f"; half of G<sub>max</sub> is reached at n = ln 2 / β ≈ {math.log(2) / fit['beta']:.3g} records" \
            if fit["beta"] > 0 else ""
        page.sections.append(
            f"<p>Fit over {fit['points']} of {count_runs(runs.summaries)} tuning runs (those with a gain and "
            f"records_before): <b>G<sub>max</sub> = {pm(fit['g_max'], fit['g_max_se'])}</b>, "
            f"<b>β = {pm(fit['beta'], fit['beta_se'])}</b> per record{half} (root-mean-square residual of G: "
            f"{fit['rmse']:.3g}; standard errors from the fit's covariance).</p>")
    elif drawn:
        page.notes.append(f"Gain saturation fit: {reason}")
        page.sections.append(f"<p class=\"note\">No fit: {html.escape(str(reason))}.</p>")
    return fit, reason


def _pct(v: Any, digits: int = 0) -> str:
    """A fraction as a percentage with ``digits`` decimals (``–`` when missing)."""
    x = _num(v)
    return "–" if x is None else f"{x:.{digits}%}"


def _runs_section(runs: RunsData) -> str:
    """The "Tuning runs" section: one row per run summary (the last MAX_TABLE_ROWS; a demo's parts
    below it): when stored, kind, label, target, model, counts, hit rate, times and gain.  Each
    tuning run is one row (:func:`add_summaries`' rule: a demo's parts stored on their own are
    their own rows, not repeated below the demo)."""
    from tunedb.transfer.search.runlog import run_count

    if not runs.summaries:
        return ("<h2>Tuning runs</h2><p class=\"note\">no tuning-run summaries: the database stores none "
                "('tunedb tune', 'tune-model', 'warm-start', 'migrate' and 'demo' store one each)</p>")
    rows = []
    shown = runs.summaries[-MAX_TABLE_ROWS:]
    for s in shown:
        for part in [s, *(q for q in run_parts(s) if q is not s)]:
            kind = str(part.get("kind") or "")
            if part is not s:
                kind = f"{s.get('kind') or 'run'} › {kind}"
            evals, hits = part_totals(part)
            stored = str(part.get("stored") or (s.get("stored") if part is not s else "") or "")
            rows.append([html.escape(stored[:19].replace("T", " ")), html.escape(kind),
                         html.escape(str(part.get("label") or "")), html.escape(str(part.get("target") or "")),
                         html.escape(str(part.get("model") or "")), str(evals),
                         str(run_count(part, "measurements")),
                         str(hits), _pct(hits / evals if evals else None), _fmt_s(_num(part.get("measure_s"))),
                         _fmt_s(_num(part.get("query_s"))), gain_text(part.get("gain")),
                         str(_count(part.get("records_before")) if part.get("records_before") is not None else "–")])
    more = (f"<p class=\"note\">The last {len(shown)} of {len(runs.summaries)} run summaries.</p>"
            if len(shown) < len(runs.summaries) else "")
    return ("<h2>Tuning runs</h2><p>The tuning runs the database stores (oldest first; stored times UTC) and "
            "those given with <code>--runs</code> as run summaries. <i>hit rate</i>: hits / evaluations, the share of "
            "the search's evaluations answered from the database (the one definition <code>tunedb stats</code>, "
            "the hit-rate figure and the dashboard use; a model run's tasks answered whole take no evaluations); "
            "<i>gain</i>: "
            "the fraction of tuning time it saved, or the extra time the database cost it; <i>n</i>: records in the database when the run started.</p>"
            + _table(["stored", "kind", "label", "target", "model", "evaluations", "measurements", "hits", "hit rate",
                      "measuring", "query", "gain", "n"], rows, {5, 6, 7, 8, 9, 10, 11, 12}) + more)


def _best_configs_section(curves: list[EntryCurve]) -> str:
    """The "Best configs" section: the best config of each entry with an ok record by the
    estimator (its cost with n, the interval and the noisy flag: the number ``tunedb best``
    shows), most records first."""
    best_rows = []
    for e in [c for c in curves if c.best_cost is not None][:MAX_TABLE_ROWS]:
        cfg = json.dumps(e.best_config, sort_keys=True)
        shown = cfg if len(cfg) <= 160 else cfg[:159] + "…"
        best_rows.append([html.escape(e.target_name), html.escape(short_workload(e.workload)), str(e.records),
                          str(e.ok_records), _cost_html(e.estimate),
                          f"<code title=\"{html.escape(cfg)}\">{html.escape(shown)}</code>"])
    if not best_rows:
        return "<h2>Best configs</h2><p class=\"note\">no entry has an ok record</p>"
    n_ok_entries = sum(1 for c in curves if c.best_cost is not None)
    more = (f"<p class=\"note\">Showing {len(best_rows)} of {n_ok_entries} entries with an ok record (most records "
            "first).</p>" if n_ok_entries > len(best_rows) else "")
    return ("<h2>Best configs</h2><p>The cost of each entry's best config: the median of its records' values "
            "(each the statistic its tuner computes: the mean of the runs for Kernel Tuner and TVM records, the "
            "median for tunedb's own) (<code>tunedb.index.estimate</code>, the number <code>tunedb best</code> shows), "
            "± half its 95 % CI relative to it (an interval with too few values for 95 % says its own level "
            "beside it, e.g. (72 % CI)), "
            "<i>n</i> its records, <i>noisy</i> when the interval is wider than ±10%.</p>"
            + _table(["target", "workload", "records", "ok", "best cost (estimate)", "best config"], best_rows,
                     {2, 3, 4}) + more)


def _summary(table: Any, targets: list[dict], curves: list[EntryCurve], runs: RunsData) -> dict:
    """The report's ``summary``: counts of records, targets, entries, families, sources and runs
    (``runs``: searches drawn, ``runs_given``: those not from the database, ``stored_runs``:
    tuning runs read from the database, each once: :func:`count_runs`)."""
    sources: dict[str, int] = defaultdict(int)
    for s in table.column("source").to_pylist():
        sources[s] += 1
    return {"records": table.num_rows, "targets": len(targets), "entries": len(curves),
            "entries_with_ok": sum(1 for c in curves if c.best_cost is not None),
            "families": sorted({c.family for c in curves}), "sources": dict(sorted(sources.items())),
            "runs": len(runs.runs), "runs_given": sum(1 for r in runs.runs if r.source != "database"),
            "stored_runs": runs.stored}


def _head_table(location: str, summary: dict) -> str:
    """The table at the top of the page: where the store is (any password in it masked:
    :func:`~tunedb.index.redact.mask_url`) and the summary's counts."""
    return _table(["", ""], [
        ["database", f"<code>{html.escape(mask_url(location))}</code>"],
        ["records (live)", str(summary["records"])], ["targets", str(summary["targets"])],
        ["entries (target × workload)", f"{summary['entries']} ({summary['entries_with_ok']} with an ok record)"],
        ["workload families", html.escape(", ".join(summary["families"]) or "–")],
        ["sources", html.escape(", ".join(f"{k}: {v}" for k, v in summary["sources"].items()) or "–")],
        ["tuning runs stored in the database", str(summary["stored_runs"])],
        ["tuning runs given (--runs)", str(summary["runs_given"])]])


def _page_html(head: str, sections: list[str], notes: list[str]) -> str:
    """The whole HTML page: header, the head table, the sections and the notes."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    note_html = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>tunedb report</title>"
            f"<style>{_CSS}</style></head><body><h1>tunedb report</h1><p class=\"note\">Generated {stamp} by "
            "<code>tunedb report</code>. Every number comes from the database's records and stored tuning runs or "
            "the tuning-run outputs passed with <code>--runs</code>; costs and times are seconds.</p>" + head + "".join(sections)
            + (f"<h2>Notes</h2><ul>{note_html}</ul>" if notes else "") + "</body></html>\n")
