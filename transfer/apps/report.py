"""``tunedb report``: a self-contained HTML page (plus PNG figures) of what a DB knows.

Everything plotted comes from the DB: its records and the tuning-run summaries it stores
(``RecordStore.runs()``: what ``tunedb tune``, ``tune-model``, ``warm-start``, ``migrate`` and
``demo`` save, see ``tunedb.transfer.search.runlog``), plus tuning-run JSON the user passes in
(``--runs``; a run given there and stored too, by ``run_id``, is shown once: the stored copy).
Nothing is simulated, and a figure without data is omitted with a note saying why.

Figures (PNG files next to ``index.html``, drawn by ``tunedb.transfer.apps.png_figures``;
matplotlib's Agg canvas, no display needed):

``convergence.png``
    per workload (the ones with the most records), one line per target: the fastest single
    measurement so far (seconds, log scale) against the number of that entry's records, in
    timestamp order (for imported records: the order of the source file).  A search's history,
    not the entry's cost: that is the estimator's (the best-configs table).
``warm_vs_cold.png`` (stored runs or ``--runs``)
    per workload that has both a warm and a cold search (:func:`tunedb.transfer.apps.figures.comparable_runs`), the
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
    ``G(n) = G_max * (1 - exp(-beta * n))`` (:func:`tunedb.transfer.apps.gain_fit.saturation`: bounded 0 <= G_max <= 1, and
    "no fit" with the reason when the fit does not determine its parameters).
``similarity.png``
    cosine similarity of the targets' hardware vectors (``tunedb.index.retrieval.features.hardware_vector``).

The page also has a table of the stored runs (each with its evaluation hit rate and its eta: tasks
answered by the DB over tasks, with T_total = T_full (1 - eta) + T_query; the head table sums eta
over the model and warm-start runs: :func:`tunedb.transfer.apps.rundata.eta_totals`) and of the
best config of each entry (most records first).  Costs and times are seconds, shown with :func:`tunedb.index.model.units.fmt_seconds`.

The cost of a config or an entry is the estimator's (``tunedb.index.model.estimate``: the same number
as ``tunedb best``): :func:`tunedb.transfer.apps.entries.entry_estimates` over the records the report reads (refuted ones left
out), shown with its n, interval and noisy flag (:func:`tunedb.transfer.apps.entries.cost_brief`, the whole of it in a
tooltip: ``CostEstimate.text()``); a single record's ``cost`` is one measurement and is never
shown as a config's cost.

Each tuning run is counted once (:func:`tunedb.transfer.apps.rundata.add_summaries`): a ``demo`` summary is a container of
tune-model runs (its ``parts``) that ``tune-model`` also stores as runs of their own; a part whose
run_id is stored as a summary is counted there and left out of the demo, and a demo left with no
part is not a run of its own (it is skipped).  "Tuning runs" counts runs after that rule, a demo
by its remaining parts (:func:`tunedb.transfer.apps.rundata.count_runs`).
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunedb.index.model.estimate import CostEstimate
from tunedb.index.model.units import fmt_seconds
from tunedb.index.support.redact import mask_url
from tunedb.transfer.apps import figures
from tunedb.transfer.apps.entries import cost_brief, decided_curves, entry_curves, refuted_ids
from tunedb.transfer.apps.figures import MAX_HIT_BARS, gain_text, short_workload
from tunedb.transfer.apps.gain_fit import saturation
from tunedb.transfer.apps.png_figures import (
    MAX_BAR_TARGETS,
    MIN_SATURATION_RECORDS,
    plot_convergence,
    plot_gain_saturation,
    plot_hit_rate,
    plot_records_over_time,
    plot_records_per_target,
    plot_saturation,
    plot_similarity,
    warm_vs_cold_spec,
)
from tunedb.transfer.apps.rundata import (
    EntryCurve,
    RunsData,
    as_count,
    as_number,
    count_runs,
    eta_text,
    eta_totals,
    gain_points,
    merge_runs,
    part_totals,
    run_parts,
    stored_runs,
    task_share,
)

if TYPE_CHECKING:
    from tunedb.index.contract.base import RecordStore

MAX_TABLE_ROWS = 60


def _fmt_s(s: float | None) -> str:
    """A duration (:func:`tunedb.index.model.units.fmt_seconds`, the one unit style), ``–`` when unknown."""
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
    a store without ``runs()`` has none); ``runs``: runs given besides (:func:`~tunedb.transfer.apps.rundata.load_runs`),
    merged with the stored ones by :func:`~tunedb.transfer.apps.rundata.merge_runs`.

    ``summary`` holds counts (records, targets, entries, families, sources), ``runs`` (searches
    drawn: tasks of stored runs plus given runs), ``runs_given`` (those from ``runs``),
    ``stored_runs`` (run summaries in the DB), ``eta`` (:func:`~tunedb.transfer.apps.rundata.eta_totals`:
    tasks answered by the DB over tasks of the model and warm-start runs, T_full, T_query and
    T_total = T_full (1 - eta) + T_query), ``saturation_fit`` (:func:`~tunedb.transfer.apps.gain_fit.fit_saturation`'s dict
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
    x = as_number(v)
    return "–" if x is None else f"{x:.{digits}%}"


def _runs_section(runs: RunsData) -> str:
    """The "Tuning runs" section: one row per run summary (the last MAX_TABLE_ROWS; a demo's parts
    below it): when stored, kind, label, target, model, counts, hit rate, times and gain.  Each
    tuning run is one row (:func:`~tunedb.transfer.apps.rundata.add_summaries`' rule: a demo's parts stored on their own are
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
                         str(hits), _pct(hits / evals if evals else None), _fmt_s(as_number(part.get("measure_s"))),
                         _fmt_s(as_number(part.get("query_s"))), gain_text(part.get("gain")),
                         str(as_count(part.get("records_before")) if part.get("records_before") is not None else "–"),
                         *_eta_cells(part)])
    more = (f"<p class=\"note\">The last {len(shown)} of {len(runs.summaries)} run summaries.</p>"
            if len(shown) < len(runs.summaries) else "")
    return ("<h2>Tuning runs</h2><p>The tuning runs the database stores (oldest first; stored times UTC) and "
            "those given with <code>--runs</code> as run summaries. <i>hit rate</i>: hits / evaluations, the share of "
            "the search's evaluations answered from the database (the one definition <code>tunedb stats</code>, "
            "the hit-rate figure and the dashboard use; a model run's tasks answered whole take no evaluations); "
            "<i>gain</i>: "
            "the fraction of tuning time it saved, or the extra time the database cost it; <i>n</i>: records in the database when the run started; "
            "<i>eta</i>: the tasks the database answered directly (a hit, or a search whose every evaluation it "
            "answered) over the run's tasks, the seeds' N<sub>hit</sub> / N<sub>total</sub> (a model answered "
            "whole: 100 %); <i>T</i><sub>full</sub>: the run's measuring time plus the recorded measuring time of "
            "the records that answered it; <i>T</i><sub>total</sub> = <i>T</i><sub>full</sub> (1 − eta) + "
            "<i>T</i><sub>query</sub>, the seeds' formula.</p>"
            + _table(["stored", "kind", "label", "target", "model", "evaluations", "measurements", "hits", "hit rate",
                      "measuring", "query", "gain", "n", "tasks answered", "eta", "T_full", "T_total"], rows,
                     {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}) + more)


def _eta_cells(part: Any) -> list[str]:
    """A run's eta cells: tasks answered by the DB / tasks, eta, T_full and the seeds' T_total
    = T_full (1 - eta) + T_query (``–`` where the run has no tasks or no T_full)."""
    answered, n = task_share(part)
    return [f"{answered}/{n}" if n else "–", _pct(answered / n if n else None),
            _fmt_s(as_number(part.get("t_full_s"))), _fmt_s(as_number(part.get("t_total_predicted_s")))]


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
            "median for tunedb's own) (<code>tunedb.index.model.estimate</code>, the number <code>tunedb best</code> shows), "
            "± half its 95 % CI relative to it (an interval with too few values for 95 % says its own level "
            "beside it, e.g. (72 % CI)), "
            "<i>n</i> its records, <i>noisy</i> when the interval is wider than ±10%.</p>"
            + _table(["target", "workload", "records", "ok", "best cost (estimate)", "best config"], best_rows,
                     {2, 3, 4}) + more)


def _summary(table: Any, targets: list[dict], curves: list[EntryCurve], runs: RunsData) -> dict:
    """The report's ``summary``: counts of records, targets, entries, families, sources and runs
    (``runs``: searches drawn, ``runs_given``: those not from the database, ``stored_runs``:
    tuning runs read from the database, each once: :func:`~tunedb.transfer.apps.rundata.count_runs`)."""
    sources: dict[str, int] = defaultdict(int)
    for s in table.column("source").to_pylist():
        sources[s] += 1
    return {"records": table.num_rows, "targets": len(targets), "entries": len(curves),
            "entries_with_ok": sum(1 for c in curves if c.best_cost is not None),
            "families": sorted({c.family for c in curves}), "sources": dict(sorted(sources.items())),
            "runs": len(runs.runs), "runs_given": sum(1 for r in runs.runs if r.source != "database"),
            "stored_runs": runs.stored, "eta": eta_totals(runs.summaries)}


def _head_table(location: str, summary: dict) -> str:
    """The table at the top of the page: where the store is (any password in it masked:
    :func:`~tunedb.index.support.redact.mask_url`), the summary's counts and eta with the seeds'
    T_total (:func:`~tunedb.transfer.apps.rundata.eta_totals`)."""
    eta = summary["eta"]
    return _table(["", ""], [
        ["database", f"<code>{html.escape(mask_url(location))}</code>"],
        ["records (live)", str(summary["records"])], ["targets", str(summary["targets"])],
        ["entries (target × workload)", f"{summary['entries']} ({summary['entries_with_ok']} with an ok record)"],
        ["workload families", html.escape(", ".join(summary["families"]) or "–")],
        ["sources", html.escape(", ".join(f"{k}: {v}" for k, v in summary["sources"].items()) or "–")],
        ["tuning runs stored in the database", str(summary["stored_runs"])],
        ["tuning runs given (--runs)", str(summary["runs_given"])],
        ["eta: tasks answered by the DB (model and warm-start runs)", html.escape(eta_text(eta["answered"], eta["tasks"]))],
        ["T_total = T_full (1 − eta) + T_query (those runs)",
         html.escape(f"{_fmt_s(eta['t_full_s'])} × (1 − eta) + {_fmt_s(eta['query_s'])} = "
                     f"{_fmt_s(eta['t_total_predicted_s'])} (measured {_fmt_s(eta['t_total_s'])})")]])


def _page_html(head: str, sections: list[str], notes: list[str]) -> str:
    """The whole HTML page: header, the head table, the sections and the notes."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    note_html = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>tunedb report</title>"
            f"<style>{_CSS}</style></head><body><h1>tunedb report</h1><p class=\"note\">Generated {stamp} by "
            "<code>tunedb report</code>. Every number comes from the database's records and stored tuning runs or "
            "the tuning-run outputs passed with <code>--runs</code>; costs and times are seconds.</p>" + head + "".join(sections)
            + (f"<h2>Notes</h2><ul>{note_html}</ul>" if notes else "") + "</body></html>\n")
