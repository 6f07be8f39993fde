"""Several devices on one target, and one device's results under two names: the
``disagreeing-times`` check of Kernel Tuner imports (:func:`times_disagree`, and
:func:`split_disagreeing`) and the ``duplicate-results`` check (:func:`drop_duplicates`), which
:func:`~tunedb.transfer.interop.registry.collect` runs; see ``docs/import_conflicts.md``."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from tunedb.index.model.record import Record
from tunedb.transfer.interop.input_files import file_stem
from tunedb.transfer.interop.outcomes import ImportIssue, ImportReport

#: ``disagreeing-times`` thresholds (see :func:`times_disagree` for the evidence behind them)
MIN_SHARED_CONFIGS = 20
MAX_MEDIAN_ABS_LOG_RATIO = math.log(1.25)
MIN_SPEARMAN = 0.9


def _ranks(x: Any) -> Any:
    """Average ranks (ties share the mean rank) of a 1-d float array."""
    import numpy as np

    order = np.argsort(x, kind="stable")
    r = np.empty(len(x), np.float64)
    r[order] = np.arange(len(x), dtype=np.float64)
    _, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    return (np.bincount(inv, weights=r) / counts)[inv]


def times_disagree(a: Mapping[str, float], b: Mapping[str, float]) -> tuple[bool, dict]:
    """Whether two files' costs (config_key -> seconds, ``ok`` records only) of one claimed
    (device, workload) come from different devices, and the evidence.

    Over the configs both hold (at least :data:`MIN_SHARED_CONFIGS`, else no verdict: False):
    they disagree when the median of ``|ln(cost_a / cost_b)|`` exceeds ``ln(1.25)`` (typical
    config 25 % off) or the Spearman rank correlation is below 0.9 (the order of configs, what
    seeding and replay rely on, differs).  Evidence from the real Kernel Tuner data
    (convolution and dedispersion, 6 GPUs each): one file against itself split in two halves
    of its repeated runs has median |ln ratio| <= 0.009 and Spearman >= 0.9995; any two of
    the GPUs have median |ln ratio| >= 0.086 and Spearman <= 0.970, and every one of the 30
    pairs breaks at least one threshold (the closest: dedispersion A4000 vs W6600, 0.086 but
    Spearman 0.61; convolution A100 vs A6000, 0.207 and 0.84); A100.json.gz and its T4 copy
    A100_T4.json.gz agree exactly (0.0, 1.0).

    Evidence: ``{"shared_configs", "median_abs_log_ratio", "median_ratio", "spearman"}``."""
    import numpy as np

    shared = sorted(a.keys() & b.keys())
    ev: dict[str, Any] = {"shared_configs": len(shared)}
    if len(shared) < MIN_SHARED_CONFIGS:
        return False, ev
    x = np.array([a[k] for k in shared], np.float64)
    y = np.array([b[k] for k in shared], np.float64)
    keep = (x > 0) & (y > 0)
    x, y = x[keep], y[keep]
    if len(x) < MIN_SHARED_CONFIGS:
        return False, ev
    med = float(np.median(np.abs(np.log(x / y))))
    rx, ry = _ranks(x), _ranks(y)
    sx, sy = float(rx.std()), float(ry.std())
    rho = 1.0 if sx == 0 and sy == 0 else (0.0 if sx == 0 or sy == 0 else
                                            float(np.mean((rx - rx.mean()) * (ry - ry.mean())) / (sx * sy)))
    ev.update(shared_configs=int(len(x)), median_abs_log_ratio=round(med, 6), median_ratio=round(math.exp(med), 6),
              spearman=round(rho, 6))
    return med > MAX_MEDIAN_ABS_LOG_RATIO or rho < MIN_SPEARMAN, ev


def _file_costs(records: list[Record], lo: int, hi: int) -> dict[tuple[str, str], dict[str, float]]:
    """(target_key, workload_key) -> {config_key: cost} of one file's ok records."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for r in records[lo:hi]:
        if r.status == "ok" and r.cost is not None:
            out.setdefault((r.target_key, r.workload_key), {})[r.config_key] = float(r.cost)
    return out


def _results_of(records: list[Record], lo: int, hi: int) -> tuple | None:
    """A file's results as a hashable value: the sorted (config_key, status, costs) of its
    records, costs rounded to 12 significant digits (seconds; the same milliseconds read from a
    cache and from a T4 file agree far closer than that); None when the file has fewer than
    :data:`MIN_SHARED_CONFIGS` ok records (too few to call two devices' files the same)."""
    rows = records[lo:hi]
    if sum(r.status == "ok" for r in rows) < MIN_SHARED_CONFIGS:
        return None
    return tuple(sorted((r.config_key, r.status, tuple(float(f"{c:.12g}") for c in r.costs)) for r in rows))


def _named_by_file(records: list[Record], path: Path, lo: int, hi: int) -> bool:
    """Whether the file's target is named from its file name (no usable ``device_name``)."""
    return bool(hi > lo and records[lo].target.get("name") == file_stem(path))


def drop_duplicates(records: list[Record], per_file: list[tuple[Path, int, int]], report: ImportReport
                    ) -> tuple[list[Record], list[tuple[Path, int, int]]]:
    """The ``duplicate-results`` check of ``collect``: a file whose results are identical to
    another file's of the same call (the same configs with the same statuses and costs, at
    least :data:`MIN_SHARED_CONFIGS` of them ok) but on another target -- the same measurements
    under a second device name, such as ``A100_T4.json.gz`` (a T4 file, which names no device:
    the file name is used) beside ``A100.json.gz`` -- is reported and its records are dropped:
    the measurements stay under the original's target only.  The original is the file whose
    device name comes from its contents (a cache's ``device_name``) rather than its file name,
    else the first given.  Files on one target are never dropped here (``--device`` puts every
    file on one target; repeats of one device are the ``disagreeing-times`` check's).

    Returns the remaining records and their ``per_file`` (path, first index, end index)."""
    first: dict[tuple, int] = {}
    dropped: dict[int, int] = {}  # duplicate file index -> original file index
    order = sorted(range(len(per_file)), key=lambda i: (_named_by_file(records, *per_file[i]), i))
    for i in order:
        path, lo, hi = per_file[i]
        res = _results_of(records, lo, hi)
        if res is None:
            continue
        j = first.setdefault(res, i)
        if j != i and records[lo].target_key != records[per_file[j][1]].target_key:
            dropped[i] = j
    if not dropped:
        return records, per_file
    for i, j in sorted(dropped.items()):
        (path, lo, hi), (opath, olo, _) = per_file[i], per_file[j]
        report.conflicts.append({"file": str(path), "kind": "duplicate-results",
                                 "device_claimed": records[lo].target.get("name", ""),
                                 "target_used": records[olo].target.get("name", ""),
                                 "evidence": {"duplicate_of": str(opath), "records": hi - lo,
                                              "ok_records": sum(r.status == "ok" for r in records[lo:hi])}})
    out: list[Record] = []
    kept: list[tuple[Path, int, int]] = []
    for i, (path, lo, hi) in enumerate(per_file):
        if i not in dropped:
            kept.append((path, len(out), len(out) + hi - lo))
            out.extend(records[lo:hi])
    return out, kept


def retarget_duplicates(report: ImportReport) -> None:
    """Point each ``duplicate-results`` conflict's ``target_used`` at the target its original
    ended up under when the ``disagreeing-times`` check renamed that one (``"<device> [<file>]"``)."""
    renamed = {c["file"]: c["target_used"] for c in report.conflicts if c["kind"] == "disagreeing-times"}
    for c in report.conflicts:
        if c["kind"] == "duplicate-results" and c["evidence"]["duplicate_of"] in renamed:
            c["target_used"] = renamed[c["evidence"]["duplicate_of"]]


def split_disagreeing(reparse: Callable[[Path, str], Iterable[Record | ImportIssue]], records: list[Record],
                      per_file: list[tuple[Path, int, int]], device: str | None, report: ImportReport
                      ) -> list[Record]:
    """The ``disagreeing-times`` check of ``collect``: report, and re-parse each group of
    agreeing files of a contested target as its own labelled target unless ``device``:
    ``reparse(path, label)`` parses one file again with its target named ``"<device> [<label>]"``."""
    costs = [_file_costs(records, lo, hi) for _, lo, hi in per_file]
    by_pair: dict[tuple[str, str], list[int]] = {}
    for i, c in enumerate(costs):
        for pair in c:
            by_pair.setdefault(pair, []).append(i)
    relabel: dict[int, str] = {}
    for pair, files in by_pair.items():
        if len(files) < 2:
            continue
        groups: list[list[int]] = []
        against: dict[int, list[dict]] = {}
        for i in files:
            home = None
            for g in groups:
                bad = []
                for j in g:
                    dis, ev = times_disagree(costs[i][pair], costs[j][pair])
                    if dis:
                        bad.append((j, ev))
                if not bad and home is None:
                    home = g
                for j, ev in bad:
                    against.setdefault(i, []).append({"file": str(per_file[j][0]), **ev})
                    against.setdefault(j, []).append({"file": str(per_file[i][0]), **ev})
            if home is None:
                groups.append([i])
            else:
                home.append(i)
        if len(groups) < 2:
            continue
        first = records[per_file[files[0]][1]:per_file[files[0]][2]]
        claimed = next((r.target.get("name") for r in first if r.target_key == pair[0]), "") or ""
        for g in groups:
            stem = file_stem(per_file[g[0]][0])
            for i in g:  # every file of a contested target is reported (against: [] = none directly)
                used = claimed if device else f"{claimed} [{stem}]"
                report.conflicts.append({"file": str(per_file[i][0]), "kind": "disagreeing-times",
                                         "device_claimed": claimed, "target_used": used,
                                         "evidence": {"against": against.get(i, []), "grouped_with": [
                                                          str(per_file[j][0]) for j in g if j != i],
                                                      "thresholds": {"min_shared_configs": MIN_SHARED_CONFIGS,
                                                                     "max_median_ratio": 1.25,
                                                                     "min_spearman": MIN_SPEARMAN}}})
            if not device:
                for i in g:
                    relabel.setdefault(i, stem)
    if not relabel:
        return records
    out: list[Record] = []
    for i, (path, lo, hi) in enumerate(per_file):
        if i not in relabel:
            out.extend(records[lo:hi])
            continue
        # the same file again, its target renamed (issues were counted in the first pass)
        out.extend(item for item in reparse(path, relabel[i]) if isinstance(item, Record))
    return out


__all__ = ["MAX_MEDIAN_ABS_LOG_RATIO", "MIN_SHARED_CONFIGS", "MIN_SPEARMAN", "drop_duplicates", "retarget_duplicates",
           "split_disagreeing", "times_disagree"]
