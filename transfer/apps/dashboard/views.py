"""The dashboard's pages as Dash components, from a :class:`~.data.Snapshot`.

One function per view: :func:`overview`, :func:`pipeline`, :func:`comparison`, :func:`trend`
and :func:`entry` (the per-entry page).  Each returns a ``html.Div`` whose id is
``view-<name>``; the numbers tests and users look for carry ids (``ov-records``, ...).  Text
from records (names, workloads, configs) is passed to Dash as text, which it escapes; no HTML
is built from record content; figures are escaped (``data.plain_figure``: plotly.js would read
their texts as markup).  Times are shown with :func:`tunedb.index.model.units.fmt_seconds`
(the one unit style); the cost of a config or an entry is always the estimator's, as a compact
cell (:func:`cost_cell`: ``4.54 ms ±3% n=5`` and ``noisy``, the interval in full as its
tooltip); a run's own number is labelled "in-run" (what the run saw).

Where evaluations came from (the Tuner's origins, ``tunedb.transfer.search.tuner.ORIGINS``):
the pipeline reads ``origins`` / ``origin_split`` of the stored run summaries
(``Snapshot.runs``; a summary without them says "not recorded"), the entry page the ``origin``
and ``seeded_from`` of each best config's record meta (the page's ``origin`` / ``seeded_from``
keys when ``data.entry_page`` provides them, else what its ``meta`` text holds).
"""

from __future__ import annotations

import ast
import datetime as _dt
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from dash import dcc, html

from tunedb.index.model.estimate import CostEstimate
from tunedb.index.model.units import fmt_seconds
from tunedb.index.support.redact import mask_url
from tunedb.transfer.apps import figures
from tunedb.transfer.apps.dashboard.data import ACTIVE_WINDOW_S, Snapshot, plain_figure
from tunedb.transfer.apps.entries import cost_brief
from tunedb.transfer.apps.rundata import eta_text

GRAPH_CONFIG = {"displaylogo": False, "responsive": True}
VIEWS = (("overview", "/", "Overview"), ("pipeline", "/pipeline", "Pipeline"),
         ("comparison", "/comparison", "Comparison"), ("trend", "/trend", "Trend"))


def fmt_s(v: float | None) -> str:
    """Seconds with a unit (:func:`tunedb.index.model.units.fmt_seconds`), ``–`` when unknown."""
    return fmt_seconds(v, missing="–")


def cost_cell(est: CostEstimate | None) -> Any:
    """An estimate as a table cell: ``4.54 ms ±3% n=5`` (``noisy`` appended when it is;
    ``entries.cost_brief``) with the estimate in full (``text()``: value, interval and its
    confidence, n) as its tooltip; ``–`` without one."""
    if est is None:
        return "–"
    return html.Span(cost_brief(est), title=est.text(), className="noisy" if est.noisy else None)


def fmt_pct(hits: int, evals: int) -> str:
    """``hits/evals (rate)``, ``–`` without evaluations."""
    return f"{hits / evals:.1%} ({hits}/{evals})" if evals else "– (no evaluations)"


def fmt_bytes(n: int | None) -> str:
    """A size in bytes with a binary unit."""
    if n is None:
        return "–"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def fmt_us(us: int | None) -> str:
    """Microseconds since the epoch as ``YYYY-MM-DD HH:MM:SS`` UTC."""
    if not us:
        return "–"
    return _dt.datetime.fromtimestamp(us / 1e6, tz=_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def opt(v: Any) -> str:
    """A count or ``not recorded``."""
    return "not recorded" if v is None else str(v)


def _stored(s: Mapping[str, Any]) -> str:
    """A summary's ``stored`` as the pipeline rows show it (``YYYY-MM-DD HH:MM:SS``)."""
    return str(s.get("stored") or "")[:19].replace("T", " ")


def run_origins(snap: Snapshot) -> dict[tuple[str, str, int], Mapping[str, Any]]:
    """(run_id, stored, n) -> the n-th part (``rundata.run_parts``; a plain run is its own only
    part) with that run_id of the stored summary stored then, among the snapshot's summaries: a
    pipeline row's summary part, to read its ``origins`` / ``origin_split``."""
    from tunedb.transfer.apps.rundata import run_parts

    out: dict[tuple[str, str, int], Mapping[str, Any]] = {}
    for s in snap.runs:
        seen: dict[str, int] = {}
        for part in run_parts(s):
            rid = str(part.get("run_id") or s.get("run_id") or "")
            n = seen.get(rid, 0)
            seen[rid] = n + 1
            out.setdefault((rid, _stored(s), n), part)
    return out


def origin_cells(part: Mapping[str, Any] | None) -> dict[str, int] | None:
    """A run's evaluation counts by origin for the pipeline, from its summary's ``origins`` and
    ``origin_split``: ``seed``, ``model``, ``random``, ``default``, ``exact``, ``resume``,
    ``confirm`` (evaluations; confirm: re-measurements), ``measured`` and ``failed`` (summed over
    the origins, confirm re-measurements included); None when the summary does not record them."""
    if part is None:
        return None
    origins, split = part.get("origins"), part.get("origin_split")
    if not isinstance(origins, Mapping):
        return None
    out = {k: int(origins.get(k) or 0) for k in ("exact", "resume", "default", "seed", "model", "random",
                                                  "confirm")}
    rows = [v for v in (split or {}).values() if isinstance(v, Mapping)]
    out["measured"] = sum(int(v.get("measured") or 0) for v in rows)
    out["failed"] = sum(int(v.get("failed") or 0) for v in rows)
    return out


_META_KEYS = ("from_target", "migrated_from", "seeded_from", "run_id")
_META_SPLIT = re.compile(r"(?:^|, )(" + "|".join(_META_KEYS) + r")=")


def meta_parts(text: str) -> dict[str, str]:
    """The ``key=value`` pieces of an entry page's ``meta`` text (``data.entry_page`` joins
    them with ``, ``; values may contain ``, ``), by key."""
    pieces = _META_SPLIT.split(text or "")
    return {pieces[i]: pieces[i + 1] for i in range(1, len(pieces) - 1, 2)}


def best_origin(b: Mapping[str, Any]) -> tuple[str | None, Any, str]:
    """(origin, seeded_from, the rest of the meta text) of one best config of an entry page:
    from its ``origin`` / ``seeded_from`` keys when the page has them, else parsed from its
    ``meta`` text (``seeded_from={...}``; a seeded_from alone means origin ``seed``)."""
    parts = meta_parts(str(b.get("meta") or ""))
    sf: Any = b.get("seeded_from")
    if sf is None and "seeded_from" in parts:
        try:
            sf = ast.literal_eval(parts["seeded_from"])
        except (ValueError, SyntaxError):
            sf = parts["seeded_from"]
    origin = b.get("origin")
    if origin is None and sf is not None:
        origin = "seed"
    rest = ", ".join(f"{k}={v}" for k, v in parts.items() if k != "seeded_from")
    if not parts:
        rest = str(b.get("meta") or "")
    return (None if origin is None else str(origin)), sf, rest


def fmt_origin(origin: str | None, seeded_from: Any) -> str:
    """``seed from <target> (workload <key>, similarity s)``, the origin alone, or ``–``."""
    if origin is None and seeded_from is None:
        return "–"
    text = origin or "seed"
    if isinstance(seeded_from, Mapping):
        text += f" from {seeded_from.get('target_name') or str(seeded_from.get('target_key') or '?')[:12]}"
        wk, sim = seeded_from.get("workload_key"), seeded_from.get("similarity")
        details = ([f"workload {str(wk)[:12]}"] if wk else []) + (
            [f"similarity {float(sim):.3f}"] if isinstance(sim, (int, float)) else [])
        if details:
            text += f" ({', '.join(details)})"
    elif seeded_from is not None:
        text += f" from {seeded_from}"
    return text


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, id: str | None = None,
          numeric: Iterable[int] = ()) -> html.Table:
    """A plain table (cells are text or components)."""
    num = set(numeric)
    parts = [html.Thead(html.Tr([html.Th(h) for h in headers]))] if any(headers) else []
    parts.append(html.Tbody([html.Tr([html.Td(c, className="num" if i in num else None) for i, c in enumerate(r)])
                             for r in rows]))
    return html.Table(parts, id=id) if id else html.Table(parts)


def graph(snap: Snapshot, key: str, gid: str) -> html.Div:
    """A figure of the snapshot as a plotly graph (with its notes), or the reason it is empty."""
    spec = snap.figs[key]
    children: list[Any] = []
    if spec.drawn:
        children.append(dcc.Graph(id=gid, figure=snap.figure(key), config=GRAPH_CONFIG))  # (notes: in its title)
    else:
        children += [html.H3(spec.title), html.P(f"Nothing to draw: {spec.empty}.", className="note")]
    return html.Div(children, className="figure", id=f"fig-{key}")


def entry_href(target_key: str, workload_key: str) -> str:
    """The per-entry page's address."""
    return "/entry?" + urlencode({"t": target_key, "w": workload_key})


def nav(active: str) -> html.Nav:
    """Links to the four views."""
    return html.Nav([dcc.Link(label, href=href, className="active" if name == active else None, id=f"nav-{name}")
                     for name, href, label in VIEWS])


def status_line(snap: Snapshot, error: str | None = None) -> html.P:
    """When the snapshot was made and how long it took (and the last poll's error, if any)."""
    ov = snap.overview
    stamp = _dt.datetime.fromtimestamp(snap.computed_at, tz=_dt.timezone.utc).strftime("%H:%M:%S UTC")
    text = (f"{mask_url(ov['location'])} · read-only · snapshot {snap.version} at {stamp} "
            f"({snap.compute_s:.2f} s to compute) · updates live")
    return html.P(text + (f" · last poll failed: {mask_url(error)}" if error else ""), className="status",
                  id="status")


# ----------------------------------------------------------------------------- views
def overview(snap: Snapshot) -> html.Div:
    """Counts of the store, hit rates (of the runs stored since this dashboard started, and of
    all stored runs), stale targets, the entries written lately and the biggest (each with its
    best config's estimated cost)."""
    ov = snap.overview
    rows = [
        ("records (live)", html.Span(str(ov["records"]), id="ov-records")),
        ("targets", html.Span(str(ov["targets"]), id="ov-targets")),
        ("workloads", html.Span(str(ov["workloads"]), id="ov-workloads")),
        ("entries (target × workload)", html.Span(f"{ov['entries']} ({ov['entries_with_ok']} with an ok record)",
                                                  id="ov-entries")),
        ("size of the records", html.Span(fmt_bytes(ov["size_bytes"]), id="ov-size")),
        ("hit rate, runs since this dashboard started", html.Span(
            fmt_pct(ov["hits_session"], ov["evaluations_session"]), id="ov-hit-session")),
        ("hit rate, all runs", html.Span(fmt_pct(ov["hits_all"], ov["evaluations_all"]), id="ov-hit-all")),
        ("stale targets", html.Span(", ".join(ov["stale_targets"]) or "none", id="ov-stale")),
        ("failed measurements", html.Span(str(ov["failed_records"]), id="ov-failed")),
        ("tuning runs stored", html.Span(str(ov["runs"]), id="ov-runs")),
        ("sources", ", ".join(f"{k}: {v}" for k, v in ov["sources"].items()) or "–"),
        ("latest commit", html.Span(fmt_us(ov["latest_us"]), id="ov-latest")),
    ]
    active = [[dcc.Link(r["target_name"] or r["target_key"][:12], href=entry_href(r["target_key"], r["workload_key"])),
               r["label"], str(r["recent"]), str(r["recent_failed"]), cost_cell(r.get("best")), fmt_us(r["last_us"])]
              for r in snap.active]
    biggest = [[dcc.Link(r["target_name"] or r["target_key"][:12], href=entry_href(r["target_key"], r["workload_key"])),
                r["label"], str(r["records"]), str(r["ok_records"]), cost_cell(r.get("best")), fmt_us(r["last_us"])]
               for r in snap.entries]
    return html.Div([
        html.H2("Overview"),
        table(["", ""], rows, id="ov-table"),
        html.H3(f"Entries written in the last {ACTIVE_WINDOW_S // 60} minutes"),
        table(["target", "workload", "records", "failed", "best config's cost (estimate)", "last commit (UTC)"], active,
              id="ov-active", numeric=(2, 3, 4)) if active else html.P("none", className="note", id="ov-active"),
        html.H3(f"Entries with the most records (top {len(snap.entries)})"),
        html.P("Costs: the estimate of each entry's best config (the median of its records' medians, as "
               "'tunedb best' gives it), ± half its 95 % CI (a lower level written beside it), n = its records; 'noisy' when the interval "
               "is wider than ±10%. Hover a cost for the interval.", className="note"),
        table(["target", "workload", "records", "ok", "best config's cost (estimate)", "last commit (UTC)"], biggest,
              id="ov-entries-table",
              numeric=(2, 3, 4)) if biggest else html.P("the database holds no records", className="note",
                                                       id="ov-entries-table"),
    ], id="view-overview")


def eta_line(eta: Mapping[str, Any] | None) -> str:
    """``eta (tasks answered by the DB, model and warm-start runs: 2): 3/4 tasks = 75.0 %`` of
    ``rundata.eta_totals``'s dict (``- (no tasks)`` without such a run)."""
    eta = eta or {}
    answered, tasks = int(eta.get("answered") or 0), int(eta.get("tasks") or 0)
    return (f"eta (tasks answered by the DB, model and warm-start runs: {int(eta.get('runs') or 0)}): "
            f"{eta_text(answered, tasks)}")


def pipeline(snap: Snapshot) -> html.Div:
    """Per recent run (newest first): evaluations answered by lookup (cache hits), seeded from
    the nearest entries (seed evaluations, the tasks seeded and from which targets), proposed by
    the model, drawn at random, the target's default, measured and failed, from the summary's
    ``origins`` / ``origin_split`` (``origin_cells``; the evaluations cell's tooltip adds exact /
    resume / confirm).  An old summary without origins shows tasks seeded, ``model`` (tune-model:
    its search evaluations) and ``not recorded`` for random / default, ``failed`` = records of the
    run's target that failed while it ran.  Then where the time went (measuring vs T_query), plus
    the hit rate per run, and eta: each run's share of its tasks the DB answered (a ``hit``, or a
    search whose every evaluation the DB answered; ``rundata.task_share``) and, above the table,
    that share summed over the model and warm-start runs (``rundata.eta_totals``), as ``tunedb
    stats`` and the report show it.  Each tuning run is one row (a demo's parts stored as runs of their own
    are listed once, as those runs: ``rundata.add_summaries``)."""
    rows = []
    parts = run_origins(snap)
    seen: dict[tuple[str, str], int] = {}
    for p in snap.pipeline:
        key = (str(p.get("run_id") or ""), str(p.get("stored") or ""))
        n = seen.get(key, 0)
        seen[key] = n + 1
        cells = origin_cells(p if isinstance(p.get("origins"), Mapping) else parts.get((*key, n)))
        src = f" from {', '.join(p['seed_sources'])}" if p["seed_sources"] else ""
        if cells is None:
            seeded, model, rnd, dflt = f"{p['seeded_tasks']} task(s){src}", opt(p["model"]), opt(None), opt(None)
            measured, failed = opt(p["measured"]), opt(p["failed"])
            evals: Any = str(p["evaluations"])
        else:
            seeded = f"{cells['seed']} ({p['seeded_tasks']} task(s)){src}"
            model, rnd, dflt = str(cells["model"]), str(cells["random"]), str(cells["default"])
            measured, failed = str(cells["measured"]), str(cells["failed"])
            evals = html.Span(str(p["evaluations"]), title=f"exact {cells['exact']}, resume {cells['resume']}, "
                                                           f"confirm re-measurements {cells['confirm']}")
        rows.append([p["stored"], p["name"] + (" (interrupted)" if p["interrupted"] else ""), evals,
                     str(p["lookup"]), seeded, model, rnd, dflt, measured, failed,
                     fmt_s(p["measure_s"]), fmt_s(p["query_s"]), fmt_s(p["wall_s"]), p["eta"]])
    active = [[r["target_name"], r["label"], str(r["recent"]), str(r["recent_failed"]), fmt_us(r["last_us"])]
              for r in snap.active]
    return html.Div([
        html.H2("Pipeline"),
        html.P("How the evaluations of the recent tuning runs were answered: by a lookup of a stored measurement, "
               "and why each was evaluated: seeded from the nearest entries, proposed by the model, drawn at "
               "random or the target's default; how many were measured (and how many of those measurements "
               "failed), and where the time went: measuring vs T_query (the database, retrieval, the model and "
               "the search's own logic). Runs stored before origins were recorded say 'not recorded'.",
               className="note"),
        html.H3("Running now: entries written in the last ten minutes"),
        table(["target", "workload", "records", "failed", "last commit (UTC)"], active, id="pl-active",
              numeric=(2, 3)) if active else html.P("no records committed in the last ten minutes", className="note",
                                                    id="pl-active"),
        html.H3(f"Recent runs (newest first, last {len(rows)})"),
        html.P(eta_line(snap.overview.get("eta")), className="note", id="pl-eta"),
        table(["stored (UTC)", "run", "evaluations", "lookup", "seeded", "model", "random", "default", "measured",
               "failed", "measuring", "T_query", "wall", "eta (tasks answered by DB)"], rows, id="pl-runs",
              numeric=(2, 3, 5, 6, 7, 8, 9, 10, 11, 12))
        if rows else html.P("no tuning run is stored yet ('tunedb tune', 'tune-model', 'warm-start', 'migrate' and "
                            "'demo' store one each)", className="note", id="pl-runs"),
        graph(snap, "time_split", "g-time-split"),
        graph(snap, "hit_rate", "g-hit-rate"),
    ], id="view-pipeline")


def comparison(snap: Snapshot) -> html.Div:
    """Warm vs cold (and tagged) runs of the workloads that have both a warm and a cold search
    (``figures.comparable_runs``): in-run best-so-far curves, one panel per workload (one colour
    per label, a shared legend), and the evaluations each needed to reach 95% of the best any
    run of its workload found."""
    pct = round(figures.BEST_FRACTION * 100)
    rows = [[r["workload"], r["label"], r["target"], str(r["evaluations"]), fmt_s(r["best"]),
             "never" if r["to_reach"] is None else str(r["to_reach"])] for r in snap.reach]
    return html.Div([
        html.H2("Comparison: warm vs cold"),
        html.P("In-run best so far (what each search had found at that point) against evaluations of each search "
               "(each task of the stored runs), for the workloads that have both a warm and a cold search: warm runs "
               "were seeded from the database's nearest entries, cold runs had no seeds; other labels are the tags "
               "runs were stored with.", className="note"),
        graph(snap, "warm_vs_cold", "g-warm-cold"),
        html.H3(f"Evaluations to reach {pct}% of the best"),
        table(["workload", "run", "target", "evaluations", "in-run best", f"evaluations to {pct}%"], rows,
              id="cmp-reach", numeric=(3, 4, 5))
        if rows else html.P("no workload has both a warm and a cold search with a history", className="note",
                            id="cmp-reach"),
    ], id="view-comparison")


def trend(snap: Snapshot) -> html.Div:
    """The fastest measurement so far per entry over time, records over time, and the saturation
    curve G(n) with its fitted G_max and beta (``gain_fit.saturation``: 0 <= G_max <= 1, or "no
    fit" and why), counted over the same tuning runs as the overview."""
    ov = snap.overview
    fit = ov.get("fit")

    def pm(v: float, se: float | None) -> str:
        return f"{v:.3g} ± {se:.2g}" if se is not None else f"{v:.3g}"

    fit_text = (f"G_max = {pm(fit['g_max'], fit.get('g_max_se'))}, beta = {pm(fit['beta'], fit.get('beta_se'))} "
                f"per record (fit over {fit['points']} of {ov.get('runs')} tuning runs: those with a gain and "
                "records_before)"
                if fit else f"no fit of G(n): {ov.get('fit_reason')}")
    return html.Div([
        html.H2("Trend"),
        graph(snap, "best_over_time", "g-best-time"),
        graph(snap, "records_over_time", "g-records-time"),
        graph(snap, "gain_saturation", "g-gain"),
        html.P(fit_text, id="tr-fit", className="note"),
    ], id="view-trend")


def entry(page: dict | None, target_key: str, workload_key: str) -> html.Div:
    """One entry: its k best configs by the estimator (cost with n, interval, noisy: the same
    cells as ``tunedb best``) with their measurements' spread, provenance and origin (why the
    search evaluated it, and for a seed the nearest entry it came from: ``best_origin``), the runs
    that tuned it (the CURRENT estimate of each run's chosen config, the same cell as in the
    configs table, and the run's in-run number) and its fastest-measurement-so-far curve."""
    if page is None:
        return html.Div([html.H2("Entry"), html.P(f"The database holds no live record of target {target_key[:12]} "
                                                  f"and workload {workload_key[:12]}.", className="note")],
                        id="view-entry")
    rows = []
    for i, b in enumerate(page["best"]):
        origin, seeded_from, rest = best_origin(b)
        rows.append([str(i + 1), html.Code(b["config"]), cost_cell(b.get("estimate")), str(b["repeats"]),
                     "–" if b["min"] is None else f"{fmt_s(b['min'])} – {fmt_s(b['max'])}",
                     "–" if b["rel_std"] is None else f"{b['rel_std']:.1%}", str(b["measurements"]),
                     b["provenance"] + (f" ({rest})" if rest else ""), fmt_origin(origin, seeded_from), b["runs"]])
    runs = [[r["stored"], f"{r['kind']} {r['label']}".strip(), r["source"], ", ".join(r["seeded_from"]) or "–",
             opt(r["evaluations"]), cost_cell(r.get("estimate")), fmt_s(r["best"])] for r in page["runs"]]
    curve = page["curve"]
    return html.Div([
        html.H2(f"Entry: {page['target_name']}"),
        html.P(page["workload"], className="workload"),
        html.P(f"{page['records']} records, {page['ok_records']} ok, {page['failed']} failed, "
               f"{page['configs']} distinct configs measured ok", id="en-counts"),
        html.H3(f"The {len(rows)} best configs"),
        html.P("cost: the config's estimate (the median of its records' medians, as 'tunedb best' gives it), ± half "
               "its confidence interval, n = its records, 'noisy' when the interval is wider than ±10%; hover it for "
               "the interval. repeats, range and spread: every measurement of the config.", className="note"),
        table(["#", "config", "cost (estimate)", "repeats", "range of measurements", "spread (std/mean)",
               "measurements", "where it came from", "origin (seeded from)", "tuning runs"], rows, id="en-best",
              numeric=(0, 2, 3, 5, 6))
        if rows else html.P("no ok record", className="note", id="en-best"),
        html.H3("Tuning runs of this entry"),
        html.P("its config now: the current estimate of the config the run chose, from every record the database "
               "holds of it (the number of the table above); in-run: the best the run itself saw.", className="note"),
        table(["stored (UTC)", "run", "task", "seeded from", "evaluations", "its config now (estimate)",
               "in-run best (what the run saw)"], runs, id="en-runs",
              numeric=(4, 5, 6)) if runs else html.P("no stored run tuned this entry", className="note", id="en-runs"),
        dcc.Graph(id="g-entry", figure=page.get("figure") or plain_figure(figures.to_plotly_dict(curve)),
                  config=GRAPH_CONFIG)
        if curve.drawn else
        html.P(f"Nothing to draw: {curve.empty}.", className="note"),
    ], id="view-entry")


def not_found(path: str) -> html.Div:
    """A page for an unknown address."""
    return html.Div([html.H2("Not found"), html.P(f"No view at {path}.", className="note")], id="view-missing")
