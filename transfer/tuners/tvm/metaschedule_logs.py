"""TVM MetaSchedule ``JSONDatabase`` directories.

Layout: ``database_workload.json`` (one line per workload: ``[structural_hash, base64(IRModule
JSON)]``; a workload's index is its line position) and ``database_tuning_record.json`` (one line
per record: ``[workload_index, [trace, run_secs, target, args_info]]``).

Mapping (one record line -> one Record, source ``imported:metaschedule``):

* workload -> ``{family, structural_hash, shapes, dtypes, dtype}`` keyed by the structural hash,
  which stays an opaque string; shapes/dtypes come from ``args_info`` (``["TENSOR", dtype, shape]``).
  The IRModule itself is never decoded.  ``family`` is ``matmul`` (with M, N, K) when the
  arguments are three 2-D tensors shaped [M, K], [K, N], [M, N]; otherwise ``tir``.
* trace -> kept verbatim in ``meta``; its sampling decisions ``[[inst_index, value], ...]`` become
  config knobs ``decision_<inst_index>_<InstructionKind>`` plus ``sketch``, a short key of the
  instructions before ``EnterPostproc`` with decisions removed, so two design-space sketches
  never share a config.
* run_secs -> costs (seconds).  Missing/empty run_secs, or MetaSchedule's failure marker
  (>= 1e9 s), -> status ``runtime_error`` without costs.
* target JSON -> target dict (verbatim keys: kind, mcpu, num-cores, keys, ...), plus catalog fields.

:func:`export` writes a directory MetaSchedule's ``JSONDatabase`` loads: both files, same line format.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tunedb.index.model.keys import key_of
from tunedb.index.model.record import Record
from tunedb.transfer.interop.device_fields import kind_hint, merge_device_fields, resolve_device_fields
from tunedb.transfer.interop.input_files import (
    check_input_path,
    display_name,
    iter_json_lines,
    parse_json_lines,
    where,
)
from tunedb.transfer.interop.outcomes import (
    ExportReport,
    ImportFormatError,
    ImportIssue,
    NothingToExport,
)
from tunedb.transfer.interop.record_building import Prepared, check_costs, make_record, stable_record_id

FORMAT = "metaschedule"
SOURCE = "imported:metaschedule"
WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
FAILED_RUN_S = 1e9  # MetaSchedule stores 1e10 s for a failed run


def _dir_of(path: Path) -> Path:
    if path.is_dir():
        return path
    if path.name in (WORKLOAD_FILE, RECORD_FILE):
        return path.parent
    raise ImportFormatError(f"{path} is not a MetaSchedule JSONDatabase directory "
                            f"(expected {WORKLOAD_FILE} and {RECORD_FILE})")


def target_of(value: Any) -> dict:
    """MetaSchedule target JSON (a dict; or a target string) -> target dict."""
    if isinstance(value, str):
        from tunedb.transfer.tuners.tvm.autotvm_logs import parse_target_string

        t = parse_target_string(value)
    elif isinstance(value, dict):
        t = dict(value)
        if not isinstance(t.get("kind"), str) or not t["kind"]:
            raise ValueError("target JSON has no string 'kind'")
    else:
        raise ValueError("target must be a JSON object")
    name = t.get("model") or t.get("mcpu") or t.get("arch")
    if isinstance(name, str) and name:
        merge_device_fields(t, resolve_device_fields(name, kind_hint(t)))
    return t


def workload_of(shash: str, args_info: Any) -> dict:
    """Workload dict from the structural hash (opaque) and the record's args_info."""
    if not isinstance(args_info, list):
        raise ValueError("args_info must be a list")
    shapes, dtypes = [], []
    for a in args_info:
        if not (isinstance(a, list) and len(a) == 3 and a[0] == "TENSOR" and isinstance(a[1], str)
                and isinstance(a[2], list) and all(isinstance(x, int) and not isinstance(x, bool) for x in a[2])):
            raise ValueError(f"args_info item {a!r} is not ['TENSOR', dtype, shape]")
        dtypes.append(a[1])
        shapes.append(a[2])
    w: dict[str, Any] = {"family": "tir", "structural_hash": shash, "shapes": shapes, "dtypes": dtypes}
    if dtypes:
        w["dtype"] = dtypes[0]
    if len(shapes) == 3 and all(len(s) == 2 for s in shapes):
        (m, k), (k2, n), (m2, n2) = shapes
        if k == k2 and m == m2 and n == n2:
            w.update(family="matmul", M=m, N=n, K=k)
    return w


def config_of(trace: Any) -> dict:
    """Trace ``[instructions, decisions]`` -> ``{"decision_<i>_<Kind>": value, ..., "sketch": key}``."""
    if not isinstance(trace, list) or len(trace) != 2 or not isinstance(trace[0], list) \
            or not isinstance(trace[1], list):
        raise ValueError("trace must be [instructions, decisions]")
    insts, decisions = trace
    kinds = []
    for inst in insts:
        if not isinstance(inst, list) or len(inst) != 4 or not isinstance(inst[0], str):
            raise ValueError("trace instruction is not [kind, inputs, attrs, outputs]")
        kinds.append(inst[0])
    cfg: dict[str, Any] = {}
    for d in decisions:
        if not isinstance(d, list) or len(d) != 2 or isinstance(d[0], bool) or not isinstance(d[0], int):
            raise ValueError(f"trace decision {d!r} is not [instruction_index, value]")
        i, v = d
        if not 0 <= i < len(insts):
            raise ValueError(f"trace decision refers to instruction {i}, trace has {len(insts)}")
        name = f"decision_{i}_{kinds[i]}"
        if name in cfg:
            raise ValueError(f"two decisions for instruction {i}")
        cfg[name] = v
    end = kinds.index("EnterPostproc") if "EnterPostproc" in kinds else len(insts)
    cfg["sketch"] = key_of(insts[:end])[:16]
    return cfg


def _load_workloads(d: Path) -> tuple[dict[int, tuple[str, str]], list[ImportIssue]]:
    """Workload index -> (structural hash, base64 module), and the lines skipped.  Raises
    ImportFormatError when the file has lines but none of them is a workload line."""
    wl: dict[int, tuple[str, str]] = {}
    issues = []
    idx = -1
    for no, _text, value, err in iter_json_lines(d / WORKLOAD_FILE):
        idx += 1
        if err is None and not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)
                                and isinstance(value[1], str)):
            err = "workload line is not [structural_hash, base64_module]"
        if err is not None:
            issues.append(ImportIssue(where(d / WORKLOAD_FILE, no), err))
            continue
        wl[idx] = (value[0], value[1])
    if issues and not wl:
        raise ImportFormatError(f"{d} is not a MetaSchedule JSONDatabase (no line of {WORKLOAD_FILE} holds a "
                                f"[structural_hash, base64_module] workload)")
    return wl, issues


def _is_record_line(value: Any) -> bool:
    """Whether a parsed line has the shape of a tuning record, ``[workload_index, [...]]`` (it
    may still be invalid inside: then it is a skipped line, not a foreign file)."""
    return (isinstance(value, list) and len(value) == 2 and isinstance(value[0], int)
            and not isinstance(value[0], bool) and isinstance(value[1], list))


def _recognise_line(text: str, value: Any, err: str | None) -> tuple[bool, tuple[str, str] | None]:
    """Whether a line of the records file has a tuning record's shape (:func:`_is_record_line`),
    and why it is skipped unparsed: it is not JSON."""
    if err is not None:
        return False, ("malformed", err)
    return _is_record_line(value), None


def parse(path: Path, device: str | None = None) -> Iterator[Record | ImportIssue]:
    """Yield one Record per tuning-record line of the database at ``path`` (a directory), and
    an ImportIssue per line skipped.  ImportFormatError when ``path`` is not a MetaSchedule
    JSONDatabase: a file is missing, or a file has lines but none of the MetaSchedule kind (the
    same rule as the other formats' "no line holds ..."); an empty database yields nothing."""
    d = _dir_of(path)
    for f in (WORKLOAD_FILE, RECORD_FILE):
        if not (d / f).exists():
            raise ImportFormatError(f"{display_name(d)} is not a MetaSchedule JSONDatabase: {f} is missing")
        check_input_path(d / f)  # a FIFO, device or directory by that name: refused unopened
    workloads, issues = _load_workloads(d)
    yield from issues
    rfile = d / RECORD_FILE
    targets: dict[str, Prepared] = {}
    wps: dict[str, Prepared] = {}
    seen: Counter = Counter()

    def record_of(no: int, value: Any) -> Record:
        if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], int)
                and not isinstance(value[0], bool) and isinstance(value[1], list) and len(value[1]) == 4):
            raise ValueError("record line is not [workload_index, [trace, run_secs, target, args_info]]")
        widx, inner = value
        trace, run_secs, tjson, args_info = inner
        if widx not in workloads:
            raise ValueError(f"workload index {widx} is not a valid line of {WORKLOAD_FILE}")
        shash, mod_b64 = workloads[widx]
        tkey = json.dumps(tjson, sort_keys=True) + "\0" + (device or "")
        tp = targets.get(tkey)
        if tp is None:
            t = target_of(tjson)
            if device:
                t["model"] = device
            tp = targets[tkey] = Prepared.of(t, "target")
        wkey = shash + "\0" + json.dumps(args_info)
        wp = wps.get(wkey)
        if wp is None:
            wp = wps[wkey] = Prepared.of(workload_of(shash, args_info), "workload")
        config = config_of(trace)
        if run_secs is None or run_secs == []:
            costs, status, error = [], "runtime_error", "MetaSchedule record without run_secs"
        else:
            if not isinstance(run_secs, list):
                raise ValueError("run_secs must be a list of seconds")
            costs = check_costs(run_secs)
            if any(c >= FAILED_RUN_S for c in costs):
                costs, status, error = [], "runtime_error", "MetaSchedule failed run (run_secs >= 1e9)"
            else:
                status, error = "ok", ""
        rid = stable_record_id(FORMAT, tp.key, [shash, inner], seen)
        return make_record(tp, wp, config, costs=costs, status=status, error=error, source=SOURCE,
                           record_id=rid,
                           meta={"metaschedule": {"record": inner, "workload": [shash, mod_b64]},
                                 "origin": {"file": rfile.name, "line": no}})

    yield from parse_json_lines(rfile, record_of, recognise=_recognise_line,
                                not_format=f"{d} is not a MetaSchedule JSONDatabase (no line of {RECORD_FILE} "
                                "holds a MetaSchedule tuning record)")


def _order(rec: Record) -> tuple:
    o = rec.meta.get("origin") if isinstance(rec.meta.get("origin"), dict) else {}
    line = o.get("line") if isinstance(o.get("line"), int) else 0
    return (line, rec.timestamp.timestamp(), rec.record_id)


def export(records: Iterable[Record], out: Path) -> ExportReport:
    """Write a JSONDatabase directory at ``out`` from records that carry a MetaSchedule trace.
    NothingToExport (nothing written) when none of them carries one."""
    rep = ExportReport()
    wl_index: dict[str, int] = {}
    wl_lines: list[str] = []
    rec_lines: list[str] = []
    for rec in sorted(records, key=_order):
        ms = rec.meta.get("metaschedule")
        if not (isinstance(ms, dict) and isinstance(ms.get("record"), list) and isinstance(ms.get("workload"), list)):
            rep.skipped += 1
            rep.reasons["no MetaSchedule trace"] += 1
            continue
        shash = ms["workload"][0]
        if shash not in wl_index:
            wl_index[shash] = len(wl_lines)
            wl_lines.append(json.dumps(ms["workload"], separators=(",", ":")))
        rec_lines.append(json.dumps([wl_index[shash], ms["record"]], separators=(",", ":")))
    if not rec_lines:
        raise NothingToExport(f"0 of {rep.skipped} records are MetaSchedule records: metaschedule export writes "
                              "only records tuned by MetaSchedule (they carry its trace)")
    out.mkdir(parents=True, exist_ok=True)
    for name, lines in ((WORKLOAD_FILE, wl_lines), (RECORD_FILE, rec_lines)):
        tmp = out / f".{name}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(s + "\n" for s in lines)
        tmp.replace(out / name)
        rep.files.append(out / name)
    rep.exported = len(rec_lines)
    return rep
