"""What the dashboard shows, computed from a store without writing to it.

:class:`DashboardData` owns one open store.  A background thread (:meth:`DashboardData.start`)
polls it every ``poll_s`` seconds: ``refresh()`` (see other processes' commits), then
``change_token()`` and the newest run summaries; only when one of them changed is a new
:class:`Snapshot` computed (one bulk read of the live records, aggregated with pyarrow and
numpy; every curve and table capped), so a request never reads the records: the views render
from the latest snapshot, and a per-entry page reads only that entry's records (remembered
per snapshot).  Both read only the record columns they use (``records(columns=...)``: at 1M
records a snapshot's read is a fraction of a full one).  The cache key of a snapshot is ``(change_token(), run ids and stored times)``.

Read-only: the store's ``records``, ``runs``, ``verdicts``, ``change_token`` and ``refresh``
are the only calls made (and ``stats()`` for stores other than the Parquet directory, whose
``stats``/``entries``/``best``/``len`` build index caches in ``derived/``); nothing is
committed, marked or cached into the DB.  For a Parquet directory the stale targets and the size
come from its invalidation files and file sizes (read only).  (``refresh`` of a Parquet DB
finishes what a crashed writer left - folds a dead process's journal - as every reader of that
store does.)

Costs: every cost shown for a config or an entry is the estimator's (``tunedb.index.model.estimate``:
the number ``tunedb best`` shows, with its n, interval and noisy flag), computed with
``estimate_table`` over the records already read (``entries.entry_estimates``; refuted records
left out, as ``db.best_costs`` leaves them out), never a minimum over records nor one record's
``cost`` (one measurement).  The curves over time are histories and say so: the fastest single
measurement so far; a run's own numbers (a task's ``best``) are what the run saw ("in-run").

Runs: each tuning run is counted and listed once (``rundata.add_summaries``: a demo's parts that
``tune-model`` stored as runs of their own are counted there, a demo left with no part is not a
run of its own); the overview's count, the hit rates, the pipeline, the comparison and the
trend's G(n) all read the same de-duplicated summaries (``Snapshot.runs``).

Units: costs and times in seconds, timestamps as microseconds since the epoch (UTC), sizes in
bytes.

Text from records on a page is text, never markup: Dash escapes what the views pass it, but
plotly.js reads a figure's texts (trace names, titles, tick labels, hover texts) as its own HTML
subset, ``<a href>`` included; so every figure the dashboard draws goes through
:func:`plain_figure`, which escapes them (``<`` -> ``&lt;``, which plotly.js shows as ``<``).
Errors shown (stderr, the status line) have their passwords masked
(:func:`tunedb.index.support.redact.mask_url`).
"""

from __future__ import annotations

import html
import json
import math
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tunedb.index.model.estimate import estimate_of_row, estimate_table, rank_key
from tunedb.index.support.redact import mask_url
from tunedb.transfer.apps import figures
from tunedb.transfer.apps.figures import FigureSpec

POLL_S = 0.5                # how often the store is polled for changes (seconds)
MAX_RUNS = 500              # newest run summaries read per poll
MAX_ENTRY_ROWS = 50         # rows of the entries table
MAX_PIPELINE_RUNS = 25      # rows of the pipeline's runs table (newest first)
TREND_ENTRIES = 8           # entries drawn in "best so far over time"
ACTIVE_WINDOW_S = 600       # "active" entries: written in the last ten minutes
MAX_ACTIVE_ROWS = 20
COMMIT_AXIS = "commit time (UTC)"
K_BEST = 10                 # configs on the per-entry page
MAX_CONFIG_CHARS = 400      # a config's JSON is cut to this many characters on a page
ENTRY_MEMO = 32             # per-entry pages remembered per snapshot


@dataclass
class Snapshot:
    """Everything the four views draw, computed once per change of the store (see the module
    docstring).  ``version`` counts snapshots (1 = the first); ``overview`` holds the counts;
    ``entries`` the entries table rows; ``active`` entries written in the last
    ACTIVE_WINDOW_S; ``pipeline`` one row per recent run; ``figs`` the figure specs by key;
    ``reach`` the warm-vs-cold "evaluations to reach 95% of the best" rows (of the workloads
    with both a warm and a cold search); ``runs`` the stored run summaries, each tuning run once
    (``rundata.add_summaries``)."""

    version: int
    key: tuple
    computed_at: float
    compute_s: float
    overview: dict
    entries: list[dict]
    active: list[dict]
    pipeline: list[dict]
    reach: list[dict]
    figs: dict[str, FigureSpec]
    runs: list[dict] = field(default_factory=list)
    _plotly: dict[str, dict] = field(default_factory=dict, repr=False)

    def figure(self, key: str) -> dict:
        """The plotly figure (as a dict) of ``figs[key]``, drawn once per snapshot, its texts
        escaped (:func:`plain_figure`)."""
        if key not in self._plotly:
            self._plotly[key] = plain_figure(figures.to_plotly_dict(self.figs[key]))
        return self._plotly[key]


def plain_figure(fig: Any) -> Any:
    """A copy of a plotly figure (its JSON form: dicts, lists, strings, numbers) with every
    string HTML-escaped (``&``, ``<``, ``>``): plotly.js draws each text as plain text (it turns
    the entities back into the characters) and no text from a record becomes markup (a target
    named ``<a href="http://evil/">x</a>`` is shown as those characters, not as a link).  The
    figures tunedb draws hold no markup of their own, and their non-text strings (colours, axis
    references, modes, ISO dates) hold none of the three characters, so they are unchanged."""
    if isinstance(fig, str):
        return html.escape(fig, quote=False)
    if isinstance(fig, dict):
        return {k: plain_figure(v) for k, v in fig.items()}
    if isinstance(fig, (list, tuple)):
        return [plain_figure(v) for v in fig]
    return fig


# ------------------------------------------------------------------------- helpers
def _store_size(db: Any) -> int | None:
    """Bytes the store's own storage takes (``RecordStore.size_bytes``: 0 in memory); None when
    the store cannot say (a size for a page never stops the page)."""
    try:
        return int(db.size_bytes())
    except Exception:
        return None


def _stale_target_keys(db: Any) -> list[str]:
    """The target keys the store has invalidated (``RecordStore.stale_targets``)."""
    try:
        return list(db.stale_targets())
    except Exception:  # as for the size: the page shows no stale targets rather than no page
        return []


def _target_name(db: Any, target_key: str) -> str:
    """The name of a target the live records do not name (an invalidated one): from its own
    records (stale ones included; only that target's are read), else its key's first digits."""
    try:
        t = db.records(target_key, columns=["target_name"])
    except (ValueError, KeyError):
        t = None
    return str(t.column("target_name")[0].as_py() or target_key[:12]) if t is not None and t.num_rows else \
        target_key[:12]


def _when(t: pa.Table) -> np.ndarray:
    """Per row: its timestamp, or its commit time when it has none (microseconds, int64; 0 when
    neither is known)."""
    w = pc.coalesce(t.column("timestamp").cast(pa.int64()), t.column("committed").cast(pa.int64()))
    return w.fill_null(0).to_numpy().astype(np.int64)


def _split_by_source(t: pa.Table, when: np.ndarray) -> dict[str, np.ndarray]:
    """source -> the ``when`` values of its rows (dictionary-encoded: no per-row Python strings)."""
    if t.num_rows == 0:
        return {}
    enc = pc.dictionary_encode(t.column("source").fill_null("?")).combine_chunks()
    codes = enc.indices.to_numpy(zero_copy_only=False)
    names = enc.dictionary.to_pylist()
    if len(names) == 1:  # (one source, the common case: no sort)
        return {str(names[0]) or "?": when}
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
    return {str(names[i]) or "?": when[order[bounds[i]:bounds[i + 1]]] for i in range(len(names))
            if bounds[i + 1] > bounds[i]}


def _fnum(x: Any) -> float | None:
    """A finite float or None."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _iso_us(text: Any) -> int | None:
    """An ISO-8601 time (a run's ``started`` / ``stored``) as microseconds since the epoch."""
    import datetime as dt

    try:
        d = dt.datetime.fromisoformat(str(text))
    except ValueError:
        return None
    if d.tzinfo is None:
        d = d.replace(tzinfo=dt.timezone.utc)
    return int(d.timestamp() * 1e6)


def hit_rate(summaries: list[Mapping[str, Any]]) -> tuple[int, int]:
    """(cache hits, evaluations) over run summaries (a demo counted by its parts; pass the
    de-duplicated summaries, ``RunsData.summaries``, so each run counts once), each run by
    ``runlog.run_totals`` (via ``rundata.part_totals``): the one hit rate of docs/runs.md."""
    from tunedb.transfer.apps.rundata import part_totals, run_parts

    hits = evals = 0
    for s in summaries:
        for part in run_parts(s):
            e, h = part_totals(part)
            evals += e
            hits += h
    return hits, evals


# ------------------------------------------------------------------------ snapshot
#: the record columns :func:`records_part` uses (the entries summary's, commit time, status, cost
#: and source, and what the estimator reads: lookup_key, costs, meta; rid_hash to leave refuted
#: records out): a snapshot reads only these (``RecordStore.records(columns=...)``), not the
#: configs, errors and the rest of a record
SNAPSHOT_COLUMNS = ["target_key", "target_name", "workload_key", "family", "workload", "entry_key", "status",
                    "cost", "committed", "source", "lookup_key", "costs", "meta", "rid_hash"]

#: the record columns :func:`entry_page` uses
ENTRY_PAGE_COLUMNS = ["record_id", "config_key", "config", "costs", "cost", "status", "source", "origin", "meta",
                      "timestamp", "committed", "target_name", "workload", "host"]


def read_snapshot_records(db: Any) -> pa.Table:
    """The live records as :func:`records_part` reads them: only :data:`SNAPSHOT_COLUMNS`,
    stale records left out."""
    return db.records(include_stale=False, columns=SNAPSHOT_COLUMNS)


def _entry_summary(t: pa.Table, committed: np.ndarray, recent_mask: np.ndarray, usable: np.ndarray) -> list[dict]:
    """One dict per entry of ``t`` (grouped by ``entry_key``, a hash of target_key and
    workload_key, so one integer group-by instead of two string columns): target_key,
    target_name, workload_key, family, workload (of its first row), records, ok_records,
    estimated (whether it has a record the estimator uses: ``usable``, ok with a cost and not
    refuted), entry_key, last_us (its latest commit), recent and recent_failed (records, and
    failed ones, committed in the last ACTIVE_WINDOW_S); sorted by (target_name, workload_key)
    as ``tables.entries`` sorts."""
    n = t.num_rows
    if n == 0:
        return []
    ok = pc.equal(t.column("status"), "ok")
    ok_known = np.asarray(pc.fill_null(ok, False))
    g = pa.table({"e": t.column("entry_key"), "i": pa.array(np.arange(n, dtype=np.int64)),
                  "ok": pc.cast(ok, pa.int64()), "u": pa.array(usable.astype(np.int64)),
                  "c": pa.array(committed), "r": pa.array(recent_mask.astype(np.int64)),
                  "f": pa.array((~ok_known & recent_mask).astype(np.int64))})
    agg = g.group_by("e", use_threads=False).aggregate([
        ("i", "min"), ("ok", "count"), ("ok", "sum"), ("u", "max"), ("c", "max"), ("r", "sum"), ("f", "sum")])
    agg = agg.take(pc.sort_indices(agg.column("i_min")))  # (entries in the order of their first rows)
    first = np.zeros(n, bool)
    first[agg.column("i_min").to_numpy()] = True  # (a filter, chunk by chunk: cheaper than a take)
    meta = t.select(["target_key", "target_name", "workload_key", "family", "workload"]).filter(pa.array(first))
    cols = {c: meta.column(c).to_pylist() for c in meta.column_names}
    stats = {k: agg.column(c).to_pylist() for k, c in (("records", "ok_count"), ("ok_records", "ok_sum"),
                                                         ("estimated", "u_max"), ("last_us", "c_max"),
                                                         ("recent", "r_sum"), ("recent_failed", "f_sum"),
                                                         ("entry_key", "e"))}
    rows = [{"target_key": cols["target_key"][j], "target_name": cols["target_name"][j],
             "workload_key": cols["workload_key"][j], "family": cols["family"][j], "workload": cols["workload"][j],
             "records": stats["records"][j], "ok_records": stats["ok_records"][j],
             "estimated": bool(stats["estimated"][j]), "last_us": stats["last_us"][j],
             "entry_key": stats["entry_key"][j], "_recent": (stats["recent"][j], stats["recent_failed"][j])}
            for j in range(agg.num_rows)]
    rows.sort(key=lambda r: (r["target_name"] or "", r["workload_key"] or ""))
    return rows


def decided_entries(db: Any, rows: Iterable[dict]) -> None:
    """Set ``best`` / ``best_cost`` of every entry row (``target_key``, ``workload_key``) that has
    a stored decision to the entry's answer (``tunedb.index.contract.decisions.answer``: ``tunedb best``'s
    first row); the other rows keep the estimator's best, the same answer read for all at once."""
    from tunedb.index.contract.decisions import answer, stored_decisions

    decisions = stored_decisions(db) if hasattr(db, "runs") else []
    decided = {(d.get("target_key"), d.get("workload_key")) for d in decisions}
    for r in rows if decided else ():
        if (r["target_key"], r["workload_key"]) in decided and r.get("best") is not None:
            head = answer(db, r["target_key"], r["workload_key"], summaries=decisions).first()
            if head is not None:
                r["best"], r["best_cost"] = head.estimate, head.estimate.value


def records_part(db: Any, t: pa.Table) -> dict:
    """The record-derived part of a snapshot from the live records ``t`` (at least the columns
    of :data:`SNAPSHOT_COLUMNS`; see :func:`read_snapshot_records`): overview counts, the
    entries table (each entry's best config by the estimator: ``best``, a CostEstimate, and
    ``best_cost``, its value), active entries, failed records (for the pipeline) and the figure
    specs of records over time and the fastest measurement so far per entry."""
    from tunedb.transfer.apps.entries import cost_brief, entry_estimates, not_refuted, refuted_ids

    n = t.num_rows
    committed = t.column("committed").cast(pa.int64()).fill_null(0).to_numpy().astype(np.int64)
    tk = t.column("target_key")
    # per entry: its counts, when it was last written, and its recent records (by commit time)
    now_us = int(time.time() * 1e6)
    recent_mask = committed >= now_us - ACTIVE_WINDOW_S * 1_000_000

    refuted = refuted_ids(db) if n and ("rid_hash" in t.column_names or "record_id" in t.column_names) else set()
    keep = not_refuted(t, refuted)
    usable = np.asarray(pc.fill_null(pc.and_(pc.equal(t.column("status"), "ok"),
                                             pc.greater(pc.list_value_length(t.column("costs")), 0)), False)) \
        if n else np.zeros(0, bool)
    if keep is not None:
        usable &= keep
    rows = _entry_summary(t, committed, recent_mask, usable)
    recent: dict[tuple[str, str], list[int]] = {}
    entry_keys: dict[tuple[str, str], int] = {}
    for r in rows:
        cnt, failed_n = r.pop("_recent")
        entry_keys[(r["target_key"], r["workload_key"])] = r.pop("entry_key")
        if cnt:
            recent[(r["target_key"], r["workload_key"])] = [cnt, failed_n]
    by_records = sorted(rows, key=lambda r: (-r["records"], -r["last_us"]))
    shown_active = sorted((r for r in rows if (r["target_key"], r["workload_key"]) in recent),
                          key=lambda r: -r["last_us"])[:MAX_ACTIVE_ROWS]
    trend = [r for r in by_records if r["estimated"]][:TREND_ENTRIES]
    # the estimator over the records of the entries shown (every config of each: its best is the
    # lowest estimate), not over every record: at 1M records that is 1M configs' estimates
    shown = {id(r): r for r in by_records[:MAX_ENTRY_ROWS] + shown_active + trend}.values()
    keys = sorted({entry_keys[(r["target_key"], r["workload_key"])] for r in shown if r["estimated"]})
    if keys:
        m = np.asarray(pc.fill_null(pc.is_in(t.column("entry_key"), value_set=pa.array(keys, pa.int64())), False))
        best = entry_estimates(t, m & usable)
    else:
        best = entry_estimates(t.slice(0, 0))
    best_rows = {int(row["entry_key"]): row for row in best.to_pylist()}
    for r in shown:
        row = best_rows.get(int(entry_keys[(r["target_key"], r["workload_key"])]))
        r["best"] = None if row is None else estimate_of_row(row)
        r["best_cost"] = None if row is None else row["value"]
        r["label"] = figures.short_workload(json.loads(r["workload"]), 70)  # (only the rows shown)
    decided_entries(db, shown)
    active = []
    for r in shown_active:
        cnt, failed = recent[(r["target_key"], r["workload_key"])]
        active.append({**r, "recent": cnt, "recent_failed": failed})
    # figures: records over time per source, best so far of the biggest entries over time
    by_src = _split_by_source(t, committed)  # (the DB's growth: commit times, not measurement times)
    curves = []
    if n:
        ek = t.column("entry_key").to_numpy()
        ok = np.asarray(pc.fill_null(pc.equal(t.column("status"), "ok"), False))
        cost = t.column("cost").fill_null(math.inf).to_numpy().astype(np.float64)
        cost = np.where(ok & np.isfinite(cost), cost, math.inf)
        for r in trend:
            m = ek == entry_keys[(r["target_key"], r["workload_key"])]
            order = np.argsort(committed[m], kind="stable")
            ts, cs = committed[m][order], np.minimum.accumulate(cost[m][order])
            change = np.flatnonzero(np.isfinite(cs) & np.r_[True, cs[1:] < cs[:-1]])
            keep = np.unique(np.r_[change, len(cs) - 1])
            keep = keep[np.isfinite(cs[keep])]
            curves.append((f"{r['target_name']} · {r['label'][:40]} (best config now: {cost_brief(r['best'])})",
                           ts[keep].tolist(), cs[keep].tolist()))
    failed_mask = ~np.asarray(pc.fill_null(pc.equal(t.column("status"), "ok"), False)) if n else np.zeros(0, bool)
    names = {r["target_key"]: r["target_name"] for r in rows}
    stale = _stale_target_keys(db)
    overview = {
        "records": n, "targets": len(names), "workloads": len({r["workload_key"] for r in rows}),
        "entries": len(rows), "entries_with_ok": sum(1 for r in rows if r["estimated"]),
        "size_bytes": _store_size(db), "failed_records": int(failed_mask.sum()),
        "stale_targets": [names.get(k) or _target_name(db, k) for k in stale],
        "latest_us": int(committed.max()) if n else None,
        "sources": {s: len(v) for s, v in sorted(by_src.items())},
    }
    failed = {"tk": np.asarray(tk.filter(pa.array(failed_mask)).to_pylist(), dtype=object) if n else np.array([]),
              "c": committed[failed_mask]}
    return {"overview": overview, "entries": by_records[:MAX_ENTRY_ROWS], "active": active, "failed": failed,
            "figs": {"records_over_time": figures.records_over_time_figure(by_src, xlabel=COMMIT_AXIS),
                     "best_over_time": figures.best_over_time_figure(curves, xlabel=COMMIT_AXIS)}}


def runs_part(summaries: list[dict], failed: Mapping[str, np.ndarray], session_start: str) -> dict:
    """The run-derived part of a snapshot: hit rates (all runs, and the runs stored since
    ``session_start``, ISO UTC), eta (``eta``: ``rundata.eta_totals`` of the runs, the tasks
    the DB answered over the tasks of the model and warm-start runs, as ``tunedb stats`` and the
    report show it), the pipeline rows of the newest runs (each with its own eta:
    ``tasks_answered``, ``tasks`` and ``eta``, the text ``rundata.eta_text`` writes), the warm-vs-cold,
    hit-rate, time-split and G(n) figure specs, the reach table (of the workloads with both a
    warm and a cold search) and ``summaries``/``runs``: the summaries with each tuning run once
    (``rundata.add_summaries``) and how many tuning runs they hold (``rundata.count_runs``).  Every
    count and row comes from those, so the overview, the pipeline, the comparison and the trend
    agree with each other and with ``tunedb report``."""
    from tunedb.transfer.apps.gain_fit import saturation
    from tunedb.transfer.apps.rundata import (
        RunsData,
        add_summaries,
        count_runs,
        eta_text,
        eta_totals,
        gain_points,
        part_name,
        part_totals,
        run_parts,
        task_share,
    )
    from tunedb.transfer.search.runlog import run_count

    data = RunsData()
    add_summaries(data, summaries, "database")
    runs = data.summaries
    session = [s for s in runs if str(s.get("stored") or "") >= session_start]
    h_all, e_all = hit_rate(runs)
    h_ses, e_ses = hit_rate(session)
    pipeline = []
    for s in reversed(runs[-MAX_PIPELINE_RUNS:]):
        for part in run_parts(s):
            evals, hits = part_totals(part)
            answered, n_tasks = task_share(part)
            tasks = [t for t in part.get("tasks") or [] if isinstance(t, Mapping)]
            seeded = [t for t in tasks if t.get("source") == "warm"]
            sources = sorted({str(x) for t in seeded for x in t.get("seeded_from") or [] if x})
            model = part.get("search_evaluations") if part.get("kind") == "tune-model" else None
            start, wall = _iso_us(part.get("started") or s.get("started")), _fnum(part.get("wall_s"))
            n_failed = None
            tkey = part.get("target_key") or s.get("target_key")
            if start is not None and wall is not None and tkey:
                m = (failed["c"] >= start) & (failed["c"] <= start + int(wall * 1e6))
                n_failed = int((failed["tk"][m] == tkey).sum()) if len(failed["tk"]) else 0
            pipeline.append({
                "run_id": str(part.get("run_id") or s.get("run_id") or ""),
                "stored": str(s.get("stored") or "")[:19].replace("T", " "),
                "name": part_name(part, s if part is not s else None) or "run",
                "kind": str(part.get("kind") or ""), "label": str(part.get("label") or ""),
                "target": str(part.get("target") or s.get("target") or ""),
                "evaluations": evals, "lookup": hits,
                "seeded_tasks": len(seeded), "seed_sources": sources,
                "model": model if isinstance(model, int) else None,
                "measured": run_count(part, "measurements") if isinstance(part.get("measurements"), int) else None,
                "failed": n_failed, "measure_s": _fnum(part.get("measure_s")), "query_s": _fnum(part.get("query_s")),
                "wall_s": wall, "interrupted": bool(part.get("interrupted")),
                "tasks_answered": answered, "tasks": n_tasks, "eta": eta_text(answered, n_tasks),
            })
    pipeline = pipeline[:MAX_PIPELINE_RUNS]
    points = gain_points(runs)
    ns, gs = [q.n for q in points], [q.gain for q in points]
    fit, reason = saturation(ns, gs)
    split = [{"label": p["name"], "measure_s": p["measure_s"], "query_s": p["query_s"]}
             for p in reversed(pipeline)]
    return {
        "hit_rate": {"all": (h_all, e_all), "session": (h_ses, e_ses)},
        "eta": eta_totals(runs),
        "pipeline": pipeline,
        "reach": figures.reach_table(figures.comparable_runs(data.runs)),
        "fit": fit, "fit_reason": reason, "gain_points": len(points),
        "summaries": runs, "runs": count_runs(runs),
        "figs": {"warm_vs_cold": figures.warm_vs_cold_figure(data.runs, max_panels=figures.MAX_PANELS),
                 "hit_rate": figures.hit_rate_figure(data.hit_points),
                 "time_split": figures.time_split_figure(split),
                 "gain_saturation": figures.gain_saturation_figure(points, fit, reason)},
    }


def _provenance(row: Mapping[str, Any]) -> str:
    """Where a record came from, in words: measured / replayed / imported (from which file) /
    migrated (from which target), with the origin it names."""
    src = str(row.get("source") or "")
    origin = str(row.get("origin") or "")
    if src.startswith("imported:"):
        text = f"imported ({src.split(':', 1)[1]})"
    elif src.startswith("migrated:"):
        text = f"migrated from {src.split(':', 1)[1]}"
    elif src == "replay":
        text = "replayed measurement"
    else:
        text = src or "?"
    return f"{text}, origin {origin}" if origin else text


def _median(values: list[float]) -> float:
    v = sorted(values)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2.0


def entry_page(db: Any, target_key: str, workload_key: str, summaries: list[dict], k: int = K_BEST) -> dict | None:
    """The per-entry page's data (None when the store holds no live record of the entry): the
    entry's counts, its ``k`` best configs (``estimate_table`` over the entry's live records,
    refuted ones left out, in the answer's order with the stored decisions,
    ``tunedb.index.contract.decisions.order``: the same configs, order and numbers as ``tunedb best``), each with its estimate (``estimate``: value, n, interval,
    noisy), the spread of its measurements, its provenance (of the record nearest the estimate:
    measured / imported / migrated, and the warm runs whose best it was with the entries that
    seeded them), the stored runs that tuned it (``runs``: each task's chosen config with its
    CURRENT estimate from the DB, ``estimate``, and what the run saw, ``best``: in-run), and the
    fastest-measurement-so-far curve with the best config's estimate as a line.  Reads only this
    entry's records."""
    from tunedb.index.contract.decisions import Candidate, decisions_of, stored_decisions
    from tunedb.index.contract.decisions import order as answer_order
    from tunedb.index.model.keys import key_of
    from tunedb.transfer.apps.entries import cost_brief, not_refuted, refuted_ids
    from tunedb.transfer.apps.rundata import run_parts

    t = db.records(target_key, workload_key, include_stale=False, columns=ENTRY_PAGE_COLUMNS)
    if t.num_rows == 0:
        return None
    refuted = refuted_ids(db)
    rows = t.to_pylist()
    keep = not_refuted(t, refuted)
    used = t if keep is None else t.filter(pa.array(keep))
    est_of = {row["config_key"]: estimate_of_row(row) for row in
              estimate_table(used.select(["config_key", "status", "costs", "meta"]), by=("config_key",)).to_pylist()}
    # in the answer's order, stored decisions included: the configs and order `tunedb best` gives
    candidates = [Candidate(ck, est_of[ck]) for ck in sorted(est_of, key=lambda ck: rank_key(est_of[ck], ck))]
    decided = answer_order(candidates, decisions_of(stored_decisions(db), target_key, workload_key))
    ranked = [r.cost.config_key for r in decided.ranked][:k]
    ok = [r for r in rows if r["status"] == "ok" and r["costs"] and r["record_id"] not in refuted]
    by_cfg: dict[str, list[dict]] = {}
    for r in ok:
        by_cfg.setdefault(r["config_key"], []).append(r)
    seeded: dict[str, list[str]] = {}
    runs_of_entry = []
    for s in summaries:
        for part in run_parts(s):
            if (part.get("target_key") or s.get("target_key")) != target_key:
                continue
            for task in part.get("tasks") or []:
                if not isinstance(task, Mapping) or task.get("workload_key") != workload_key:
                    continue
                frm = [str(x) for x in task.get("seeded_from") or [] if x]
                cfg = task.get("best_config")
                ck = key_of(dict(cfg)) if isinstance(cfg, Mapping) else None
                runs_of_entry.append({"stored": str(s.get("stored") or "")[:19].replace("T", " "),
                                      "kind": str(part.get("kind") or ""), "label": str(part.get("label") or ""),
                                      "source": str(task.get("source") or ""), "seeded_from": frm,
                                      "best": _fnum(task.get("best")), "evaluations": task.get("evaluations"),
                                      "config_key": ck, "estimate": est_of.get(ck) if ck else None})
                if ck is not None:
                    seeded.setdefault(ck, []).append(
                        f"best of a {task.get('source') or part.get('label') or 'run'} {part.get('kind') or ''} run"
                        + (f" seeded from {', '.join(frm)}" if frm else ""))
    best = []
    for ck in ranked:
        est = est_of[ck]
        recs = by_cfg.get(ck) or []
        reps = [c for r in recs for c in r["costs"] or [] if c is not None and math.isfinite(c)]
        # the record shown for its config, keys and provenance: nearest the estimate, the latest among equals
        r = min(recs, key=lambda q: (abs(_median([c for c in q["costs"] if c is not None]) - est.value),
                                     -(q["timestamp"].timestamp() if q["timestamp"] else 0.0)))
        text = r["config"] if len(r["config"]) <= MAX_CONFIG_CHARS else r["config"][: MAX_CONFIG_CHARS - 1] + "…"
        try:
            meta = json.loads(r["meta"] or "{}")
        except json.JSONDecodeError:
            meta = {}
        extra = [f"{k2}={meta[k2]}" for k2 in ("from_target", "migrated_from", "seeded_from", "run_id")
                 if isinstance(meta, dict) and k2 in meta]
        best.append({"config": text, "config_key": ck, "estimate": est, "cost": est.value, "repeats": len(reps),
                     "min": min(reps) if reps else None, "max": max(reps) if reps else None,
                     "rel_std": float(np.std(reps) / np.mean(reps)) if len(reps) > 1 and np.mean(reps) > 0 else None,
                     "measurements": len(recs), "provenance": _provenance(r),
                     "meta": ", ".join(extra), "runs": "; ".join(seeded.get(ck, [])) or "–",
                     "record_id": r["record_id"], "host": r["host"] or "",
                     "origin": meta.get("origin") if isinstance(meta, dict) else None,
                     "seeded_from": meta.get("seeded_from") if isinstance(meta, dict) else None})
    when = _when(t)
    order = np.argsort(when, kind="stable")
    st = np.asarray(t.column("status").to_pylist(), dtype=object)[order]
    cost = t.column("cost").fill_null(math.inf).to_numpy().astype(np.float64)[order]
    cost = np.where((st == "ok") & np.isfinite(cost), cost, math.inf)
    bsf = np.minimum.accumulate(cost)
    xs = np.flatnonzero(np.isfinite(bsf)) + 1
    curve = FigureSpec("entry_curve", "Fastest measurement so far of this entry", width=6.5, height=3.4)
    if len(xs):
        x, y = figures.steps(xs.tolist(), bsf[xs - 1].tolist())
        panel = figures.Panel("", "records of the entry (timestamp order)", "fastest measurement so far (s)",
                              ylog=True, series=[figures.Series("fastest measurement so far", x, y)])
        if best:
            top = best[0]["estimate"]
            panel.hlines.append(figures.HLine(top.value, "best config's estimate", "dotted", "tab:red"))
            curve.notes.append(f"dotted: the best config's estimate, {cost_brief(top)}")
        curve.panels.append(panel)
    else:
        curve.empty = "no ok record"
    return {"target_name": rows[0]["target_name"], "target_key": target_key, "workload_key": workload_key,
            "workload": figures.short_workload(json.loads(rows[0]["workload"]), 200), "records": len(rows),
            "ok_records": len(ok), "configs": len(by_cfg), "failed": sum(1 for r in rows if r["status"] != "ok"),
            "best": best, "runs": runs_of_entry[-20:], "curve": curve}


# ------------------------------------------------------------------------ the poller
class DashboardData:
    """The store, its latest :class:`Snapshot` and the thread that keeps it current.

    ``poll()`` does one refresh-and-compare step (returns True when a new snapshot was made);
    ``start()`` runs it every ``poll_s`` seconds in a daemon thread; ``snapshot`` is the latest
    one (computed by the first ``poll()``; replaced whole, so readers never lock).  Polls hold
    one lock; per-entry pages another (the store itself is thread-safe)."""

    def __init__(self, db: Any, *, poll_s: float = POLL_S) -> None:
        import datetime as dt

        self.db = db
        self.poll_s = float(poll_s)
        self.session_start = dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")
        self._lock = threading.RLock()
        self._snapshot: Snapshot | None = None
        self._records: dict | None = None
        self._records_token: Any = None
        self._runs: dict | None = None
        self._runs_key: tuple | None = None
        self._summaries: list[dict] = []
        self._entry_memo: dict[tuple, Any] = {}
        self._entry_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None

    @property
    def snapshot(self) -> Snapshot:
        if self._snapshot is None:
            self.poll()
        assert self._snapshot is not None
        return self._snapshot

    def poll(self) -> bool:
        """Refresh the store and make a new snapshot when its change token or its newest runs
        changed; True when it did.  New run summaries are published first (from the records
        part computed before: cheap), then, when the records changed, a snapshot over a new
        read of them: a finished run shows at once even where reading every record takes
        seconds."""
        with self._lock:
            t0 = time.perf_counter()
            self.db.refresh()
            token = self.db.change_token()
            summaries = self.db.runs(limit=MAX_RUNS)
            runs_key = tuple((str(s.get("run_id")), str(s.get("stored"))) for s in summaries)
            if self._snapshot is not None and token == self._records_token and runs_key == self._runs_key:
                return False
            if self._records is not None and runs_key != self._runs_key:
                self._set_runs(summaries, runs_key)
                self._publish(t0)
            if token != self._records_token or self._records is None:
                table = read_snapshot_records(self.db)
                self._records = records_part(self.db, table)
                del table
                self._records_token = token
                self._set_runs(summaries, runs_key)  # (the runs' failed counts come from the records)
                self._publish(t0)
            return True

    def _set_runs(self, summaries: list[dict], runs_key: tuple) -> None:
        assert self._records is not None
        self._runs = runs_part(summaries, self._records["failed"], self.session_start)
        self._runs_key = runs_key
        self._summaries = self._runs["summaries"]  # (each tuning run once)

    def _publish(self, t0: float) -> None:
        """Make the snapshot of the current records and runs parts the latest one."""
        rec, run, summaries = self._records, self._runs, self._summaries
        assert rec is not None and run is not None
        h_all, e_all = run["hit_rate"]["all"]
        h_ses, e_ses = run["hit_rate"]["session"]
        overview = {**rec["overview"], "runs": run["runs"], "gain_points": run["gain_points"],
                    "hits_all": h_all, "evaluations_all": e_all,
                    "hit_rate_all": h_all / e_all if e_all else None,
                    "hits_session": h_ses, "evaluations_session": e_ses,
                    "hit_rate_session": h_ses / e_ses if e_ses else None,
                    "session_start": self.session_start, "location": self.db.location,
                    "fit": run["fit"], "fit_reason": run["fit_reason"], "eta": run["eta"]}
        version = (self._snapshot.version + 1) if self._snapshot is not None else 1
        snap = Snapshot(version=version, key=(self._records_token, self._runs_key), computed_at=time.time(),
                        compute_s=time.perf_counter() - t0, overview=overview, entries=rec["entries"],
                        active=rec["active"], pipeline=run["pipeline"], reach=run["reach"],
                        figs={**rec["figs"], **run["figs"]}, runs=summaries)
        for key, spec in snap.figs.items():  # drawn here, not in a request
            if spec.drawn:
                snap.figure(key)
        self._snapshot = snap

    def entry(self, target_key: str, workload_key: str) -> dict | None:
        """:func:`entry_page` of one entry, remembered for the current snapshot (read while a
        poll may be reading too: the store is thread-safe)."""
        snap = self.snapshot
        key = (snap.version, target_key, workload_key)
        with self._entry_lock:
            if key not in self._entry_memo:
                if len(self._entry_memo) >= ENTRY_MEMO or any(k[0] != snap.version for k in self._entry_memo):
                    self._entry_memo.clear()
                page = entry_page(self.db, target_key, workload_key, snap.runs)
                if page is not None and page["curve"].drawn:  # drawn once, not per request
                    page["figure"] = plain_figure(figures.to_plotly_dict(page["curve"]))
                self._entry_memo[key] = page
            return self._entry_memo[key]

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.poll()
                self.last_error = None
            except Exception as e:  # keep serving the last snapshot; say what went wrong once
                text = mask_url(f"{type(e).__name__}: {e}".splitlines()[0])
                if text != self.last_error:
                    sys.stderr.write(f"tunedb dashboard: could not read the database: {text}\n")
                self.last_error = text

    def start(self) -> None:
        """Poll in a daemon thread every ``poll_s`` seconds (the first snapshot is made here)."""
        self.poll()
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="tunedb-dashboard-poll", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
