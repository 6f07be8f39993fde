"""The PNG figures of ``tunedb report``, one ``plot_*`` function per file.

Each ``plot_*`` function draws one figure into a PNG file at ``path`` with matplotlib's Agg canvas
(no display needed) and returns what it drew (panels, runs, targets...; 0, False or None when
there was nothing to draw and no file was written).  The figures the dashboard shows too are
defined once in ``tunedb.transfer.apps.figures`` (a :class:`~tunedb.transfer.apps.figures.FigureSpec`
drawn by ``figures.to_matplotlib``); the report-only ones (records per target, the saturation of
entries, the similarity of targets) are drawn here.  Each figure caps what it draws (``MAX_*``).
Costs in seconds, timestamps in microseconds.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from tunedb.transfer.apps import figures
from tunedb.transfer.apps.rundata import EntryCurve, GainPoint, RunsData, TuneRun

MAX_CONVERGENCE_WORKLOADS = 6
MAX_BAR_TARGETS = 40
MAX_HEATMAP_TARGETS = 30
MIN_SATURATION_RECORDS = 3


def _figure(width: float, height: float):
    from matplotlib.figure import Figure  # the Agg canvas; pyplot (and a display) is never used

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    return fig


def _save(fig: Any, path: Path) -> None:
    fig.savefig(path, format="png")


def plot_convergence(curves: list[EntryCurve], path: Path) -> list[str] | None:
    """Best cost so far per entry, one panel per workload (:func:`figures.convergence_figure`);
    returns the workloads drawn or None."""
    spec = figures.convergence_figure(curves, max_panels=MAX_CONVERGENCE_WORKLOADS, max_lines=figures.MAX_LINES_PER_PANEL)
    return [p.title for p in spec.panels] if figures.to_matplotlib(spec, path) else None


def warm_vs_cold_spec(runs: list[TuneRun]) -> figures.FigureSpec:
    """The report's warm-vs-cold figure (:func:`figures.warm_vs_cold_figure`)."""
    return figures.warm_vs_cold_figure(runs, max_panels=3 * MAX_CONVERGENCE_WORKLOADS, max_lines=figures.MAX_LINES_PER_PANEL)


def plot_warm_vs_cold(runs: list[TuneRun], path: Path) -> int:
    """In-run best so far against evaluations of each run, one panel per workload with both a
    warm and a cold run (:func:`figures.warm_vs_cold_figure`); returns the panels drawn."""
    spec = warm_vs_cold_spec(runs)
    return len(spec.panels) if figures.to_matplotlib(spec, path) else 0


def plot_hit_rate(data: RunsData, path: Path) -> int:
    """Share of evaluations answered from the DB per run (in the order given) and cumulatively
    (over all runs); only the last ``figures.MAX_HIT_BARS`` runs are drawn (:func:`figures.hit_rate_figure`).
    Returns the runs drawn."""
    spec = figures.hit_rate_figure(data.hit_points, max_bars=figures.MAX_HIT_BARS)
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
    fit ``G_max * (1 - exp(-beta * n))`` (``fit``: :func:`~tunedb.transfer.apps.gain_fit.saturation`'s dict, or None: the points
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

