"""The figures ``tunedb report`` and ``tunedb dashboard`` draw, defined once.

A figure is computed from what the DB holds (records, stored run summaries) by one of the
``*_figure`` functions below into a :class:`FigureSpec`: a small, renderer-neutral description
(title, panels with axis labels and scales, series of ``(name, x, y, style)``, horizontal lines
and notes such as the fitted ``G_max`` and ``beta``).  Two renderers draw a spec:

* :func:`to_matplotlib` writes a PNG (matplotlib's Agg canvas; the static report);
* :func:`to_plotly` returns a ``plotly.graph_objects.Figure`` (the dashboard; plotly is the
  ``dashboard`` extra and is imported only there).

So the report and the dashboard draw the same figures from the same code.  Costs and times are
seconds; timestamps are UTC ``datetime`` objects; every builder caps what it draws
(``MAX_*``) so a spec stays small whatever the DB's size.  A builder that has nothing to draw
returns a spec with no panels and ``empty`` saying why; no builder returns an empty panel.

Multi-panel figures give one colour to each line name in every panel (:func:`color_by_name`)
and one shared legend (``FigureSpec.shared_legend``: each name listed once).  Curves over time or
evaluations are histories (the fastest measurement so far, the in-run best so far) and say so
on their axes; the cost of a config or an entry is the estimator's (``tunedb.index.model.estimate``),
in the tables and in the curves' legends.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tunedb.transfer.apps.gain_fit import gain_model
from tunedb.transfer.search.curve import evaluations_to_reach

if TYPE_CHECKING:
    from tunedb.transfer.apps.rundata import EntryCurve, GainPoint, TuneRun

MAX_PANELS = 6
MAX_LINES_PER_PANEL = 8
MAX_WARM_COLD_PANELS = 18
MAX_HIT_BARS = 60
MAX_POINTS = 1000          # points per series (longer series are thinned, keeping their ends)
MIN_CURVE_RECORDS = 3      # ok records an entry needs to have a best-so-far curve drawn
LOG_X_ABOVE = 200          # convergence panels switch to a log x axis past this many records
BEST_FRACTION = 0.95       # "measurements to reach 95% of the best"
NO_HISTORIES = "no tuning-run histories"
#: the colours lines get by name (tab20's order: the ten tab10 colours, then their light shades)
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7",
           "#dbdb8d", "#9edae5")


# ----------------------------------------------------------------------------- the spec
@dataclass
class Series:
    """One line, step line, set of markers or set of bars.  ``kind``: ``step`` (post-step, the
    best-so-far curves), ``line``, ``markers`` (a scatter), ``bar``; ``labels``: a text per point
    (bars: drawn above them); ``dash``: a dashed line."""

    name: str
    x: list
    y: list
    kind: str = "step"
    dash: bool = False
    width: float = 1.4
    color: str | None = None
    opacity: float = 1.0
    labels: list[str] | None = None
    legend: bool = True
    markers: bool = False


@dataclass
class HLine:
    """A horizontal line at ``y`` (``dotted`` or ``solid``), with an optional legend-free label."""

    y: float
    label: str = ""
    style: str = "dotted"
    color: str = "black"


@dataclass
class Panel:
    """One set of axes.  ``xtime``: x values are datetimes; ``xticks``: category labels of the
    positions 0, 1, ... (bar charts of runs); ``ylim``: (low, high) or None; ``yseconds``: y
    values are seconds, drawn with SI-prefixed ticks (``100 us``, ``1 ms``, ``2 s``; a y label
    ending in `` (s)`` sets it and loses the suffix: the unit is on every tick)."""

    title: str
    xlabel: str
    ylabel: str
    series: list[Series] = field(default_factory=list)
    xlog: bool = False
    ylog: bool = False
    xtime: bool = False
    ylim: tuple[float, float] | None = None
    xticks: list[str] | None = None
    hlines: list[HLine] = field(default_factory=list)
    legend_loc: str = "best"
    yseconds: bool = False

    def __post_init__(self) -> None:
        if self.ylabel.endswith(" (s)"):
            self.ylabel, self.yseconds = self.ylabel[:-4], True


def seconds_tick(v: float) -> str:
    """A tick label for ``v`` seconds: an SI prefix and at most three significant digits, no
    trailing zeros (``100 us``, ``1.5 ms``, ``2 s``, ``0 s``)."""
    if not math.isfinite(v):
        return ""
    a = abs(v)
    if a == 0:
        return "0 s"
    for unit, f in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if a >= f * 0.9995 or unit == "ns":
            return f"{v / f:.3g} {unit}"
    return f"{v:.3g} s"


@dataclass
class FigureSpec:
    """A figure: ``key`` (a file-name-safe id), ``title``, its panels (drawn in a grid of up to
    three columns), ``notes`` (lines of text that go with it, e.g. the fit's parameters),
    ``empty`` (why there is nothing to draw; then ``panels`` is empty), the matplotlib size
    in inches (``width``, ``height``; None: from the number of panels) and ``shared_legend``:
    one legend for the whole figure (a name listed once, its lines toggled together) instead
    of one per panel."""

    key: str
    title: str
    panels: list[Panel] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    empty: str | None = None
    width: float | None = None
    height: float | None = None
    shared_legend: bool = False

    @property
    def drawn(self) -> bool:
        return bool(self.panels)


def short_workload(w: Mapping[str, Any], limit: int = 60) -> str:
    """``family:k=v,...`` of a workload (truncated to ``limit`` characters)."""
    rest = ",".join(f"{k}={json.dumps(v) if isinstance(v, (dict, list)) else v}" for k, v in w.items()
                    if k != "family")
    text = f"{w.get('family', '?')}:{rest}" if rest else str(w.get("family", "?"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def thin(x: Sequence[Any], y: Sequence[Any], limit: int = MAX_POINTS) -> tuple[list, list]:
    """``x``, ``y`` with at most ``limit`` points (evenly spaced indexes, first and last kept)."""
    n = len(x)
    if n <= limit:
        return list(x), list(y)
    idx = np.unique(np.linspace(0, n - 1, limit).round().astype(np.int64))
    return [x[i] for i in idx], [y[i] for i in idx]


def steps(x: Sequence[Any], y: Sequence[Any], limit: int = MAX_POINTS) -> tuple[list, list]:
    """A post-step curve with only the points where ``y`` changes (and the last one), so a
    best-so-far curve keeps every improvement exactly; thinned (:func:`thin`) only when even
    those are more than ``limit``."""
    keep = [i for i in range(len(y)) if i == 0 or i == len(y) - 1 or y[i] != y[i - 1]]
    return thin([x[i] for i in keep], [y[i] for i in keep], limit)


def utc(us: int) -> _dt.datetime:
    """Microseconds since the epoch as a UTC datetime."""
    return _dt.datetime.fromtimestamp(us / 1e6, tz=_dt.timezone.utc)


def color_by_name(spec: FigureSpec) -> FigureSpec:
    """One colour per series name across all panels of ``spec`` (:data:`PALETTE`, in order of
    first appearance; a series with a colour of its own keeps it), each name in the legend once
    (its first series), and the legend shared by the figure.  Returns ``spec``."""
    colors: dict[str, str] = {}
    for panel in spec.panels:
        for s in panel.series:
            if s.name not in colors:
                colors[s.name] = s.color or PALETTE[len(colors) % len(PALETTE)]
                s.legend = True
            else:
                s.legend = False
            s.color = s.color or colors[s.name]
    spec.shared_legend = True
    return spec


# ------------------------------------------------------------------------- builders
def convergence_figure(curves: Iterable[EntryCurve], *, max_panels: int = MAX_PANELS,
                       max_lines: int = MAX_LINES_PER_PANEL) -> FigureSpec:
    """Per workload (the ``max_panels`` with the most records), one step line per target: the
    entry's fastest single measurement so far (s, log) against its number of records in
    timestamp order (a search's history; one colour per target in every panel)."""
    spec = FigureSpec("convergence", "Convergence per workload")
    by_wl: dict[str, list[EntryCurve]] = defaultdict(list)
    for e in curves:
        if e.ok_records >= MIN_CURVE_RECORDS and e.best_cost is not None:
            by_wl[e.workload_key].append(e)
    if not by_wl:
        spec.empty = f"no entry has {MIN_CURVE_RECORDS} or more ok records"
        return spec
    chosen = sorted(by_wl, key=lambda k: (-sum(e.records for e in by_wl[k]), k))[:max_panels]
    for wk in chosen:
        ents = sorted(by_wl[wk], key=lambda e: -e.records)[:max_lines]
        panel = Panel(short_workload(ents[0].workload, 48), "records of the entry (timestamp order)",
                      "fastest measurement so far (s)", ylog=True, xlog=max(e.records for e in ents) > LOG_X_ABOVE)
        for e in ents:
            xs = [i + 1 for i, b in enumerate(e.best_so_far) if b is not None]
            ys = [b for b in e.best_so_far if b is not None]
            xs, ys = steps(xs, ys)
            panel.series.append(Series(e.target_name, xs, ys))
        spec.panels.append(panel)
    return color_by_name(spec)


def run_start(r: TuneRun) -> str:
    """How a search started: ``warm`` (seeded from the DB) or ``cold`` (no seeds): its ``start``
    (the task's source), else the first of those words in its label; "" when neither says."""
    start = getattr(r, "start", "") or ""
    if start in ("warm", "cold"):
        return start
    return next((w for w in str(r.label).split() if w in ("warm", "cold")), "")


def _run_key(r: TuneRun) -> str:
    return json.dumps([r.target, r.workload], sort_keys=True)


def comparable_runs(runs: Iterable[TuneRun]) -> list[TuneRun]:
    """The searches with a history (a best so far) of the (target, workload)s that have both a
    warm and a cold one (:func:`run_start`), in the order given: what a warm-vs-cold comparison
    can compare.  Searches of a workload tuned only warm or only cold are left out."""
    runs = [r for r in runs if any(b is not None for _, b in r.history)]
    starts: dict[str, set[str]] = defaultdict(set)
    for r in runs:
        starts[_run_key(r)].add(run_start(r))
    return [r for r in runs if {"warm", "cold"} <= starts[_run_key(r)]]


def warm_vs_cold_figure(runs: Iterable[TuneRun], *, max_panels: int = MAX_WARM_COLD_PANELS,
                        max_lines: int = MAX_LINES_PER_PANEL) -> FigureSpec:
    """Per (target, workload) with both a warm and a cold search (:func:`comparable_runs`), one
    step line per search (a task of a stored run, or a run given): its in-run best so far (s,
    log: what the run saw) against evaluations; warm runs solid and wide, cold runs dashed;
    named by the run's label (warm / cold / a tag) and target, one colour per name in every
    panel and one shared legend.  Nothing to draw (``empty`` saying why) when no workload has
    both."""
    spec = FigureSpec("warm_vs_cold", "Warm start vs cold search")
    runs = list(runs)
    with_history = [r for r in runs if any(b is not None for _, b in r.history)]
    if not with_history:
        spec.empty = NO_HISTORIES
        return spec
    by_key: dict[str, list[TuneRun]] = defaultdict(list)
    for r in comparable_runs(with_history):
        by_key[_run_key(r)].append(r)
    if not by_key:
        n = len({_run_key(r) for r in with_history})
        spec.empty = (f"no workload has both a warm and a cold search ({n} workload(s) were tuned only warm or only "
                      "cold): tune one again with --cold, or warm, to compare")
        return spec
    targets = {r.target for rs in by_key.values() for r in rs}
    for k in list(by_key)[:max_panels]:
        first = by_key[k][0]
        title = short_workload(first.workload, 48) if len(targets) <= 1 else \
            f"{short_workload(first.workload, 34)} · {first.target[:22]}"
        panel = Panel(title, "evaluations (measurements + cache hits)", "in-run best so far (s)", ylog=True)
        rs = by_key[k]
        # (both kinds stay in a capped panel: the first warm and cold ones, then the rest in order)
        chosen = [next(r for r in rs if run_start(r) == "warm"), next(r for r in rs if run_start(r) == "cold")]
        chosen += [r for r in rs if all(r is not c for c in chosen)]
        for r in sorted(chosen[:max_lines], key=lambda r: next(i for i, q in enumerate(rs) if q is r)):
            pts = [(int(i), float(b)) for i, b in r.history if b is not None]
            xs, ys = steps([p[0] for p in pts], [p[1] for p in pts])
            cold = run_start(r) == "cold"
            panel.series.append(Series(f"{r.label} ({r.target})" if r.target else r.label, xs, ys,
                                       width=1.4 if cold else 2.0, dash=cold))
        spec.panels.append(panel)
    return color_by_name(spec)


def reach_table(runs: Iterable[TuneRun], fraction: float = BEST_FRACTION) -> list[dict]:
    """Per search with a history: ``{"workload", "label", "target", "evaluations", "best",
    "to_reach"}``, where ``best`` is the search's in-run best (what it saw) and ``to_reach`` the
    evaluations it took to reach ``fraction`` of the best any search of the same target and
    workload found (best so far <= that best / ``fraction``), None when it never did.  Seconds.
    (The comparison view passes :func:`comparable_runs`.)"""
    runs = [r for r in runs if any(b is not None for _, b in r.history)]

    def key(r: TuneRun) -> str:
        return json.dumps([r.target, r.workload], sort_keys=True)

    best_of: dict[str, float] = {}
    for r in runs:
        b = min(float(b) for _, b in r.history if b is not None)
        best_of[key(r)] = min(best_of.get(key(r), math.inf), b)
    return [{"workload": short_workload(r.workload, 48), "label": r.label, "target": r.target,
             "evaluations": r.evaluations, "best": min(float(b) for _, b in r.history if b is not None),
             "to_reach": evaluations_to_reach(r.history, best_of[key(r)] / fraction)} for r in runs]


def hit_rate_figure(hit_points: Iterable[Mapping[str, Any]], *, max_bars: int = MAX_HIT_BARS) -> FigureSpec:
    """Per run (``{"label", "evaluations", "cache_hits"}``, in the order given): the share of its
    evaluations answered from the DB (bars, labelled hits/evaluations) and the cumulative share
    over all runs (line); only the last ``max_bars`` runs are drawn."""
    points = [(str(p["label"]), int(p["evaluations"]), int(p["cache_hits"])) for p in hit_points
              if p["evaluations"] > 0]
    spec = FigureSpec("hit_rate", "Hit rate over time")
    if not points:
        spec.empty = "no tuning run with evaluations"
        return spec
    cum_e = np.cumsum([e for _, e, _ in points])[-max_bars:]
    cum_h = np.cumsum([h for _, _, h in points])[-max_bars:]
    points = points[-max_bars:]
    x = list(range(len(points)))
    panel = Panel("", "", "evaluations answered from the DB", ylim=(0.0, 1.12), legend_loc="upper left",
                  xticks=[p[0] if len(p[0]) <= 40 else p[0][:39] + "…" for p in points])
    panel.series.append(Series("hit rate of the run", x, [h / e for _, e, h in points], kind="bar",
                               color="tab:green", opacity=0.7, labels=[f"{h}/{e}" for _, e, h in points]))
    panel.series.append(Series("cumulative hit rate", x, (cum_h / cum_e).tolist(), kind="line", color="black",
                               width=1.2, markers=True))
    spec.panels.append(panel)
    spec.width, spec.height = max(5.0, 0.45 * len(points) + 3), 3.4
    return spec


def records_over_time_figure(times_by_source: Mapping[str, np.ndarray], *,
                             xlabel: str = "record timestamp (UTC)") -> FigureSpec:
    """Cumulative records against time (UTC), one step line per source (``times_by_source``:
    source -> microsecond times, any order: the records' timestamps for the report, their
    commit times for the dashboard, ``xlabel`` saying which)."""
    spec = FigureSpec("records_over_time", "Records over time", width=6.5, height=3.4)
    found = {s: np.sort(np.asarray(v, np.int64)) for s, v in times_by_source.items() if len(v)}
    if not found:
        spec.empty = "the database holds no records"
        return spec
    panel = Panel("", xlabel, "records (cumulative)", xtime=True)
    for s, vals in sorted(found.items()):
        xs, ys = thin(vals.tolist(), list(range(1, len(vals) + 1)))
        panel.series.append(Series(f"{s} ({len(vals)})", [utc(v) for v in xs], ys))
    spec.panels.append(panel)
    return spec


def best_over_time_figure(curves: Iterable[tuple[str, Sequence[int], Sequence[float]]], *,
                          xlabel: str = "record timestamp (UTC)") -> FigureSpec:
    """The fastest single measurement so far (s, log) of entries against time: ``curves`` are
    ``(name, microsecond times, fastest so far)`` with the points where it changed (and the last
    one); the name carries the entry's estimated cost (the dashboard's)."""
    spec = FigureSpec("best_over_time", "Fastest measurement so far per entry over time", width=6.5, height=3.6)
    panel = Panel("", xlabel, "fastest measurement so far (s)", ylog=True, xtime=True)
    for name, ts, best in curves:
        if len(ts):
            xs, ys = steps(list(ts), list(best))
            panel.series.append(Series(name, [utc(v) for v in xs], ys))
    if not panel.series:
        spec.empty = "no entry has an ok record"
        return spec
    spec.panels.append(panel)
    return spec


def gain_saturation_figure(points: Iterable[GainPoint], fit: Mapping[str, Any] | None,
                           reason: str | None = None) -> FigureSpec:
    """Each run's gain G (the fraction of tuning time the DB saved) against n (records in the DB
    before it), one marker colour per run kind, and the fit ``G_max * (1 - exp(-beta * n))``
    (``fit``: ``gain_fit.fit_saturation``'s dict, or None: the points alone, ``reason`` in the
    notes).  The notes hold G_max and beta (or why there is no fit)."""
    points = list(points)
    spec = FigureSpec("gain_saturation", "Saturation: gain of the database against its size", width=6.5,
                      height=3.8)
    if not points:
        spec.empty = "no run has both a gain and records_before"
        return spec
    panel = Panel("", "records in the database before the run (n)", "gain G: share of tuning time saved (< 0: cost)",
                  legend_loc="lower right")
    by_kind: dict[str, list[GainPoint]] = defaultdict(list)
    for q in points:
        by_kind[q.kind].append(q)
    for kind, qs in sorted(by_kind.items()):
        panel.series.append(Series(f"{kind} ({len(qs)})", [q.n for q in qs], [q.gain for q in qs], kind="markers",
                                   opacity=0.8, labels=[q.name for q in qs]))
    if fit is not None:
        xs = np.linspace(0.0, max(q.n for q in points) * 1.05 or 1.0, 200)
        panel.series.append(Series(f"fit: saturation level G_max={fit['g_max']:.3g}, rate β={fit['beta']:.3g}/record", xs.tolist(),
                                   gain_model(xs, fit["g_max"], fit["beta"]).tolist(), kind="line",
                                   color="black", width=1.6))
        panel.hlines.append(HLine(float(fit["g_max"]), "saturation level G_max", "dotted", "black"))
        spec.notes.append(f"saturation level G_max = {fit['g_max']:.4g}, rate beta = {fit['beta']:.4g} per record "
                          f"(fit over {fit['points']} runs, rmse {fit['rmse']:.3g})")
    elif reason:
        spec.notes.append(f"no fit: {reason}")
    panel.hlines.append(HLine(0.0, "", "solid", "tab:gray"))
    spec.panels.append(panel)
    return spec


def time_split_figure(runs: Iterable[Mapping[str, Any]]) -> FigureSpec:
    """Where each run's time went: measuring (``measure_s``) and T_query (``query_s``: the DB,
    retrieval, the model, the search's logic), stacked bars in seconds, one per run
    (``{"label", "measure_s", "query_s"}``, in the order given)."""
    runs = [r for r in runs if r.get("measure_s") is not None or r.get("query_s") is not None]
    spec = FigureSpec("time_split", "Where the time goes: measuring vs the DB, model and search logic", width=6.5, height=3.4)
    if not runs:
        spec.empty = "no run stores its measuring and query times"
        return spec
    x = list(range(len(runs)))
    panel = Panel("", "", "time", yseconds=True, xticks=[str(r["label"])[:40] for r in runs], legend_loc="upper left")
    panel.series.append(Series("measuring", x, [float(r.get("measure_s") or 0.0) for r in runs], kind="bar",
                               color="tab:blue"))
    panel.series.append(Series("DB, model and search logic", x, [float(r.get("query_s") or 0.0) for r in runs], kind="bar",
                               color="tab:orange"))
    spec.panels.append(panel)
    return spec


# ------------------------------------------------------------------------ renderers
_PLOTLY_COLORS = {"tab:green": "#2ca02c", "tab:blue": "#1f77b4", "tab:orange": "#ff7f0e", "tab:gray": "#7f7f7f",
                  "tab:red": "#d62728", "black": "#000000"}


def to_matplotlib(spec: FigureSpec, path: str | Path) -> bool:
    """Draw ``spec`` into the PNG ``path`` (matplotlib's Agg canvas; no display); False (and no
    file written) when the spec has nothing to draw."""
    if not spec.panels:
        return False
    from matplotlib.figure import Figure

    n = len(spec.panels)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    width = spec.width if spec.width is not None else 4.4 * cols
    height = spec.height if spec.height is not None else 3.3 * rows
    if spec.shared_legend and spec.width is None:
        width += 2.2  # (room for the legend at the right)
    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, panel in zip(axes.flat, spec.panels):
        _mpl_panel(ax, panel, legend=not spec.shared_legend)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    if spec.shared_legend:  # one legend for every panel: a name once
        handles: dict[str, Any] = {}
        for ax in list(axes.flat)[:n]:
            for h, label in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(label, h)
        if handles:
            fig.legend(list(handles.values()), list(handles), loc="outside right upper", fontsize=7)
    if any(p.xtime for p in spec.panels):
        fig.autofmt_xdate()
    fig.savefig(Path(path), format="png")
    return True


def _mpl_panel(ax: Any, panel: Panel, legend: bool = True) -> None:
    """One panel on matplotlib axes (with its own legend unless ``legend`` is False)."""
    bars = [s for s in panel.series if s.kind == "bar"]
    bottom: np.ndarray | None = None
    for s in panel.series:
        style: dict[str, Any] = {"label": s.name if s.legend else None}
        if s.color:
            style["color"] = s.color
        if s.kind == "bar":
            ax.bar(s.x, s.y, alpha=s.opacity, bottom=bottom if len(bars) > 1 else None, **style)
            if len(bars) > 1:
                bottom = np.asarray(s.y, float) if bottom is None else bottom + np.asarray(s.y, float)
            for xi, yi, text in zip(s.x, s.y, s.labels or []):
                ax.annotate(text, (xi, yi), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=7)
        elif s.kind == "markers":
            ax.scatter(s.x, s.y, s=22, alpha=s.opacity, **style)
        else:
            style.update(linewidth=s.width, alpha=s.opacity)
            if s.dash:
                style["linestyle"] = "--"
            if s.markers:
                style["marker"] = "o"
            if s.kind == "step":
                ax.step(s.x, s.y, where="post", **style)
            else:
                ax.plot(s.x, s.y, **style)
    for h in panel.hlines:
        ax.axhline(h.y, color=h.color, linewidth=0.8, linestyle=":" if h.style == "dotted" else "-")
    if panel.xlog:
        ax.set_xscale("log")
    if panel.ylog:
        ax.set_yscale("log")
    if panel.ylim is not None:
        ax.set_ylim(*panel.ylim)
    if panel.xticks is not None:
        ax.set_xticks(range(len(panel.xticks)), panel.xticks, rotation=30, ha="right", fontsize=7)
    if panel.title:
        ax.set_title(panel.title, fontsize=9)
    if panel.yseconds:
        seconds_axis(ax.yaxis, panel.ylog)
    if panel.xlabel:
        ax.set_xlabel(panel.xlabel, fontsize=8)
    ax.set_ylabel(panel.ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    if legend and any(s.legend for s in panel.series):
        ax.legend(fontsize=7, loc=panel.legend_loc)
    ax.grid(alpha=0.3, axis="y" if panel.xticks is not None else "both")


def seconds_axis(axis: Any, log: bool) -> None:
    """SI-prefixed tick labels (:func:`seconds_tick`) on a matplotlib axis of seconds; on a log
    axis the ticks matplotlib labels stay the ones labelled (its formatter decides, this one
    writes the text)."""
    from matplotlib.ticker import Formatter, FuncFormatter

    if not log:
        axis.set_major_formatter(FuncFormatter(lambda v, _pos: seconds_tick(v)))
        return

    class SecondsLogFormatter(Formatter):
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def set_axis(self, ax: Any) -> None:
            super().set_axis(ax)
            self.inner.set_axis(ax)

        def set_locs(self, locs: Any) -> None:
            super().set_locs(locs)
            self.inner.set_locs(locs)

        def __call__(self, x: float, pos: int | None = None) -> str:
            return seconds_tick(x) if self.inner(x, pos) else ""

    axis.set_major_formatter(SecondsLogFormatter(axis.get_major_formatter()))
    axis.set_minor_formatter(SecondsLogFormatter(axis.get_minor_formatter()))


PANEL_PX = 280   # a panel's height in a plotly figure (pixels)
GAP_PX = 100     # between rows of panels: the x tick labels and title, and the next panel's title
_AXIS = {"gridcolor": "#ebebeb", "zerolinecolor": "#dddddd", "linecolor": "#cccccc", "ticks": "outside",
         "tickcolor": "#cccccc", "automargin": True, "title": {"font": {"size": 12}}}


def to_plotly_dict(spec: FigureSpec, *, height: int | None = None) -> dict:
    """``spec`` as a plotly figure in its JSON form (``{"data": [...], "layout": {...}}``, what
    plotly.js draws): panels as subplots, up to three a row, with room between the rows for the
    axis labels and the next panel's title (PANEL_PX / GAP_PX: the panels never overlap); axis
    titles every panel shares are drawn once (the y title in the first column, the x title on
    the lowest panel of each column); ``height`` in pixels (default: from the rows).  A shared
    legend (``spec.shared_legend``) lists a name once and toggles its lines in every panel.  A
    spec with nothing to draw gives an empty figure whose title says why.  Built directly (no
    ``graph_objects`` validation: this runs on every change of the DB).  Text from records is
    passed as data; plotly.js reads some strings (names, titles, tick labels) as HTML, so what
    a page shows goes through ``apps.dashboard.data.plain_figure``, which escapes them."""
    layout: dict[str, Any] = {"paper_bgcolor": "white", "plot_bgcolor": "white", "font": {"size": 11},
                              "hovermode": "closest", "uirevision": spec.key, "legend": {"font": {"size": 10}}}
    if not spec.panels:
        layout.update(title={"text": f"{spec.title}: {spec.empty or 'nothing to draw'}", "font": {"size": 13}},
                      height=height or 200, xaxis={"visible": False}, yaxis={"visible": False})
        return {"data": [], "layout": layout}
    n = len(spec.panels)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    ticks = any(p.xticks for p in spec.panels)
    margin = {"l": 60, "r": 20, "t": 70, "b": 130 if ticks else 60}
    total = height or (PANEL_PX * rows + GAP_PX * (rows - 1) + margin["t"] + margin["b"])
    plot_px = max(total - margin["t"] - margin["b"], 1)
    hgap = 0.08 if cols > 1 else 0.0
    vgap = min(GAP_PX / plot_px, 0.5 / max(rows - 1, 1)) if rows > 1 else 0.0
    width = (1.0 - hgap * (cols - 1)) / cols
    cell_h = (1.0 - vgap * (rows - 1)) / rows
    same_x = len({p.xlabel for p in spec.panels}) == 1 and n > 1
    same_y = len({p.ylabel for p in spec.panels}) == 1 and n > 1
    data: list[dict] = []
    annotations: list[dict] = []
    stacked = False
    for i, panel in enumerate(spec.panels):
        r, c = divmod(i, cols)
        suffix = "" if i == 0 else str(i + 1)
        x0 = c * (width + hgap)
        y1 = 1.0 - r * (cell_h + vgap)
        xa: dict[str, Any] = {**_AXIS, "domain": [x0, x0 + width], "anchor": f"y{suffix}"}
        ya: dict[str, Any] = {**_AXIS, "domain": [y1 - cell_h, y1], "anchor": f"x{suffix}"}
        if panel.xlabel and (not same_x or i + cols >= n):
            xa["title"] = {"text": panel.xlabel, "font": {"size": 12}}
        if panel.ylabel and (not same_y or c == 0):
            ya["title"] = {"text": panel.ylabel, "font": {"size": 12}}
        if panel.xlog:
            xa["type"] = "log"
        if panel.xtime:
            xa["type"] = "date"
        if panel.yseconds:  # SI-prefixed ticks: 100µs, 1ms
            ya.update(ticksuffix="s", exponentformat="SI")
        if panel.ylog:
            ya["type"] = "log"
        elif panel.ylim:
            ya["range"] = list(panel.ylim)
        if panel.xticks is not None:
            xa.update(tickmode="array", tickvals=list(range(len(panel.xticks))), ticktext=panel.xticks, tickangle=-30)
        layout[f"xaxis{suffix}"], layout[f"yaxis{suffix}"] = xa, ya
        if n > 1 and panel.title:
            annotations.append({"text": panel.title, "x": x0 + width / 2, "y": y1, "xref": "paper", "yref": "paper",
                                "xanchor": "center", "yanchor": "bottom", "showarrow": False, "font": {"size": 11}})
        n_bars = sum(1 for q in panel.series if q.kind == "bar")
        stacked = stacked or n_bars > 1
        for s in panel.series:
            color = _PLOTLY_COLORS.get(s.color or "", s.color)
            t: dict[str, Any] = {"x": _plain(s.x), "y": _plain(s.y), "name": s.name, "xaxis": f"x{suffix}",
                                 "yaxis": f"y{suffix}", "opacity": s.opacity, "showlegend": s.legend,
                                 "legendgroup": s.name if spec.shared_legend else f"p{i}-{s.name}"}
            if s.kind == "bar":
                t.update(type="bar", marker={"color": color} if color else {})
                if s.labels:
                    t.update(text=s.labels, textposition="outside")
            elif s.kind == "markers":
                t.update(type="scatter", mode="markers", marker={"size": 8, **({"color": color} if color else {})})
                if s.labels:
                    t["hovertext"] = s.labels
            else:
                line: dict[str, Any] = {"width": s.width, "dash": "dash" if s.dash else "solid",
                                        "shape": "hv" if s.kind == "step" else "linear"}
                if color:
                    line["color"] = color
                t.update(type="scatter", mode="lines+markers" if s.markers else "lines", line=line)
            data.append(t)
        for h in panel.hlines:
            layout.setdefault("shapes", []).append({
                "type": "line", "xref": f"x{suffix} domain", "yref": f"y{suffix}", "x0": 0, "x1": 1, "y0": h.y,
                "y1": h.y, "line": {"dash": "dot" if h.style == "dotted" else "solid", "width": 1,
                                    "color": _PLOTLY_COLORS.get(h.color, h.color)}})
    title = spec.title + (" — " + "; ".join(spec.notes) if spec.notes else "")
    layout.update(title={"text": title, "font": {"size": 14}}, annotations=annotations, height=total,
                  margin=margin, barmode="stack" if stacked else "group")
    return {"data": data, "layout": layout}


def _plain(values: Sequence[Any]) -> list:
    """Values as JSON-able plain values (datetimes as ISO text, numpy scalars as Python ones)."""
    out = []
    for v in values:
        if isinstance(v, _dt.datetime):
            out.append(v.isoformat())
        elif isinstance(v, np.generic):
            out.append(v.item())
        else:
            out.append(v)
    return out


def to_plotly(spec: FigureSpec, *, height: int | None = None) -> Any:
    """``spec`` as a ``plotly.graph_objects.Figure`` (:func:`to_plotly_dict`, validated by plotly)."""
    import plotly.graph_objects as go

    return go.Figure(to_plotly_dict(spec, height=height))


__all__ = ["Series", "HLine", "Panel", "FigureSpec", "short_workload", "thin", "steps", "convergence_figure",
           "color_by_name", "run_start", "comparable_runs", "warm_vs_cold_figure", "reach_table", "evaluations_to_reach", "hit_rate_figure",
           "records_over_time_figure", "best_over_time_figure", "gain_saturation_figure",
           "time_split_figure", "to_matplotlib", "to_plotly", "to_plotly_dict"]


def gain_text(gain: Any) -> str:
    """A run's gain (the fraction of tuning time the DB saved, ``1 - T_total / T_full``) as a
    person reads it: ``saved 12.3 %``, ``cost 4.5 % more`` when it is negative (the DB's queries
    took more time than its answers saved), ``–`` when missing or not finite."""
    try:
        g = float(gain)
    except (TypeError, ValueError):
        return "–"
    if not math.isfinite(g):
        return "–"
    return f"saved {g:.1%}" if g >= 0 else f"cost {-g:.1%} more"
