"""The dashboard's pages as Dash components, from a :class:`~.data.Snapshot`.

One function per view: :func:`overview`, :func:`pipeline`, :func:`comparison`, :func:`trend`
and :func:`entry` (the per-entry page).  Each returns a ``html.Div`` whose id is
``view-<name>``; the numbers tests and users look for carry ids (``ov-records``, ...).  Text
from records (names, workloads, configs) is passed to Dash as text, which it escapes; no HTML
is built from record content.  Costs and times are shown with units (``fmt_seconds``).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlencode

from dash import dcc, html

from tunedb.transfer.apps import figures
from tunedb.transfer.apps.dashboard.data import ACTIVE_WINDOW_S, Snapshot
from tunedb.transfer.cli.util import fmt_seconds

GRAPH_CONFIG = {"displaylogo": False, "responsive": True}
VIEWS = (("overview", "/", "Overview"), ("pipeline", "/pipeline", "Pipeline"),
         ("comparison", "/comparison", "Comparison"), ("trend", "/trend", "Trend"))


def fmt_s(v: float | None) -> str:
    """Seconds with a unit, ``–`` when unknown."""
    return fmt_seconds(v, missing="–", micro="µs")


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
    text = (f"{ov['location']} · read-only · snapshot {snap.version} at {stamp} "
            f"({snap.compute_s:.2f} s to compute) · updates live")
    return html.P(text + (f" · last poll failed: {error}" if error else ""), className="status",
                  id="status")


# ----------------------------------------------------------------------------- views
def overview(snap: Snapshot) -> html.Div:
    """Counts of the store, hit rates (this dashboard's session: runs stored since it started;
    all time: every stored run), stale targets, the entries written lately and the biggest."""
    ov = snap.overview
    rows = [
        ("records (live)", html.Span(str(ov["records"]), id="ov-records")),
        ("targets", html.Span(str(ov["targets"]), id="ov-targets")),
        ("workloads", html.Span(str(ov["workloads"]), id="ov-workloads")),
        ("entries (target × workload)", html.Span(f"{ov['entries']} ({ov['entries_with_ok']} with an ok record)",
                                                  id="ov-entries")),
        ("size of the records", html.Span(fmt_bytes(ov["size_bytes"]), id="ov-size")),
        ("hit rate, this session", html.Span(fmt_pct(ov["hits_session"], ov["evaluations_session"]),
                                             id="ov-hit-session")),
        ("hit rate, all time", html.Span(fmt_pct(ov["hits_all"], ov["evaluations_all"]), id="ov-hit-all")),
        ("stale targets", html.Span(", ".join(ov["stale_targets"]) or "none", id="ov-stale")),
        ("failed measurements", html.Span(str(ov["failed_records"]), id="ov-failed")),
        ("tuning runs stored", html.Span(str(ov["runs"]), id="ov-runs")),
        ("sources", ", ".join(f"{k}: {v}" for k, v in ov["sources"].items()) or "–"),
        ("latest commit", html.Span(fmt_us(ov["latest_us"]), id="ov-latest")),
    ]
    active = [[dcc.Link(r["target_name"] or r["target_key"][:12], href=entry_href(r["target_key"], r["workload_key"])),
               r["label"], str(r["recent"]), str(r["recent_failed"]), fmt_s(r["best_cost"]), fmt_us(r["last_us"])]
              for r in snap.active]
    biggest = [[dcc.Link(r["target_name"] or r["target_key"][:12], href=entry_href(r["target_key"], r["workload_key"])),
                r["label"], str(r["records"]), str(r["ok_records"]), fmt_s(r["best_cost"]), fmt_us(r["last_us"])]
               for r in snap.entries]
    return html.Div([
        html.H2("Overview"),
        table(["", ""], rows, id="ov-table"),
        html.H3(f"Entries written in the last {ACTIVE_WINDOW_S // 60} minutes"),
        table(["target", "workload", "records", "failed", "best", "last commit (UTC)"], active, id="ov-active",
              numeric=(2, 3, 4)) if active else html.P("none", className="note", id="ov-active"),
        html.H3(f"Entries with the most records (top {len(snap.entries)})"),
        table(["target", "workload", "records", "ok", "best", "last commit (UTC)"], biggest, id="ov-entries-table",
              numeric=(2, 3, 4)) if biggest else html.P("the database holds no records", className="note",
                                                       id="ov-entries-table"),
    ], id="view-overview")


def pipeline(snap: Snapshot) -> html.Div:
    """Per recent run (newest first): evaluations answered by lookup, tasks seeded from nearest
    entries (and from which targets), proposed by the model (tune-model's search evaluations; not
    recorded for other runs), measured, failed (records of the run's target that failed while it
    ran), and where the time went (measuring vs T_query), plus the hit rate per run."""
    rows = []
    for p in snap.pipeline:
        seeded = f"{p['seeded_tasks']} task(s)" + (f" from {', '.join(p['seed_sources'])}" if p["seed_sources"] else "")
        rows.append([p["stored"], p["name"] + (" (interrupted)" if p["interrupted"] else ""), str(p["evaluations"]),
                     str(p["lookup"]), seeded, opt(p["model"]), opt(p["measured"]), opt(p["failed"]),
                     fmt_s(p["measure_s"]), fmt_s(p["query_s"]), fmt_s(p["wall_s"])])
    active = [[r["target_name"], r["label"], str(r["recent"]), str(r["recent_failed"]), fmt_us(r["last_us"])]
              for r in snap.active]
    return html.Div([
        html.H2("Pipeline"),
        html.P("How the evaluations of the recent tuning runs were answered: by a lookup of a stored measurement, "
               "seeded from the nearest entries, proposed by the model, or measured (and how many of those "
               "measurements failed), and where the time went: measuring vs T_query (the database, retrieval, "
               "the model and the search's own logic).", className="note"),
        html.H3("Running now: entries written in the last ten minutes"),
        table(["target", "workload", "records", "failed", "last commit (UTC)"], active, id="pl-active",
              numeric=(2, 3)) if active else html.P("no records committed in the last ten minutes", className="note",
                                                    id="pl-active"),
        html.H3(f"Recent runs (newest first, last {len(rows)})"),
        table(["stored (UTC)", "run", "evaluations", "lookup", "seeded", "model", "measured", "failed",
               "measuring", "T_query", "wall"], rows, id="pl-runs", numeric=(2, 3, 5, 6, 7, 8, 9, 10))
        if rows else html.P("no tuning run is stored yet ('tunedb tune', 'tune-model', 'warm-start', 'migrate' and "
                            "'demo' store one each)", className="note", id="pl-runs"),
        graph(snap, "time_split", "g-time-split"),
        graph(snap, "hit_rate", "g-hit-rate"),
    ], id="view-pipeline")


def comparison(snap: Snapshot) -> html.Div:
    """Warm vs cold (and tagged) runs: best-so-far curves on one axis per workload, and the
    evaluations each needed to reach 95% of the best any run of its workload found."""
    pct = round(figures.BEST_FRACTION * 100)
    rows = [[r["workload"], r["label"], r["target"], str(r["evaluations"]), fmt_s(r["best"]),
             "never" if r["to_reach"] is None else str(r["to_reach"])] for r in snap.reach]
    return html.Div([
        html.H2("Comparison: warm vs cold"),
        html.P("Best cost so far against evaluations of each search (each task of the stored runs): warm runs were "
               "seeded from the database's nearest entries, cold runs had no seeds; other labels are the tags runs "
               "were stored with.", className="note"),
        graph(snap, "warm_vs_cold", "g-warm-cold"),
        html.H3(f"Evaluations to reach {pct}% of the best"),
        table(["workload", "run", "target", "evaluations", "best", f"evaluations to {pct}%"], rows, id="cmp-reach",
              numeric=(3, 4, 5)) if rows else html.P("no run with a history", className="note", id="cmp-reach"),
    ], id="view-comparison")


def trend(snap: Snapshot) -> html.Div:
    """Best so far per entry over time, records over time, and the saturation curve G(n) with
    its fitted G_max and beta."""
    ov = snap.overview
    fit = ov.get("fit")
    fit_text = (f"G_max = {fit['g_max']:.4g}, beta = {fit['beta']:.4g} per record (over {fit['points']} runs)"
                if fit else f"no fit of G(n): {ov.get('fit_reason')}")
    return html.Div([
        html.H2("Trend"),
        graph(snap, "best_over_time", "g-best-time"),
        graph(snap, "records_over_time", "g-records-time"),
        graph(snap, "gain_saturation", "g-gain"),
        html.P(fit_text, id="tr-fit", className="note"),
    ], id="view-trend")


def entry(page: dict | None, target_key: str, workload_key: str) -> html.Div:
    """One entry: its k best configs with their repeats' spread and provenance, the runs that tuned
    it and its best-so-far curve."""
    if page is None:
        return html.Div([html.H2("Entry"), html.P(f"The database holds no live record of target {target_key[:12]} "
                                                  f"and workload {workload_key[:12]}.", className="note")],
                        id="view-entry")
    rows = [[str(i + 1), html.Code(b["config"]), fmt_s(b["cost"]), str(b["repeats"]),
             "–" if b["min"] is None else f"{fmt_s(b['min'])} – {fmt_s(b['max'])}",
             "–" if b["rel_std"] is None else f"{b['rel_std']:.1%}", str(b["measurements"]),
             b["provenance"] + (f" ({b['meta']})" if b["meta"] else ""), b["runs"]]
            for i, b in enumerate(page["best"])]
    runs = [[r["stored"], f"{r['kind']} {r['label']}".strip(), r["source"], ", ".join(r["seeded_from"]) or "–",
             opt(r["evaluations"]), fmt_s(r["best"])] for r in page["runs"]]
    curve = page["curve"]
    return html.Div([
        html.H2(f"Entry: {page['target_name']}"),
        html.P(page["workload"], className="workload"),
        html.P(f"{page['records']} records, {page['ok_records']} ok, {page['failed']} failed, "
               f"{page['configs']} distinct configs measured ok", id="en-counts"),
        html.H3(f"The {len(rows)} best configs"),
        table(["#", "config", "cost", "repeats", "range of repeats", "spread (std/mean)", "measurements",
               "where it came from", "tuning runs"], rows, id="en-best", numeric=(0, 2, 3, 5, 6))
        if rows else html.P("no ok record", className="note", id="en-best"),
        html.H3("Tuning runs of this entry"),
        table(["stored (UTC)", "run", "task", "seeded from", "evaluations", "best"], runs, id="en-runs",
              numeric=(4, 5)) if runs else html.P("no stored run tuned this entry", className="note", id="en-runs"),
        dcc.Graph(id="g-entry", figure=page.get("figure") or figures.to_plotly_dict(curve), config=GRAPH_CONFIG)
        if curve.drawn else
        html.P(f"Nothing to draw: {curve.empty}.", className="note"),
    ], id="view-entry")


def not_found(path: str) -> html.Div:
    """A page for an unknown address."""
    return html.Div([html.H2("Not found"), html.P(f"No view at {path}.", className="note")], id="view-missing")
