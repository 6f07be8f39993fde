"""AutoTVM / TopHub logs: JSON lines, record version 0.2.

A line is ``{"input": [target, task_name, args, kwargs], "config": {"index", "code_hash",
"entity": [[knob, kind, value], ...]}, "result": [costs_s, error_no, all_cost_s, timestamp],
"version": 0.2, "tvm_version": ...}``.

Mapping (one line -> one Record, source ``imported:autotvm``):

* target string (``cuda -model=titanx``) -> target dict ``{kind, raw, keys, device, model, mcpu,
  mtriple, mattr, libs, ...}`` (only options present in the string, plus TVM's default keys),
  enriched with vendor/arch from ``tunedb.index.hardware.catalog`` when that module resolves the device;
* task name + args -> workload ``{family, task, layout, shapes, dtypes, dtype, args}``: family from
  the task name (``conv2d_nchw.cuda`` -> ``conv2d``), shapes/dtypes from ``["TENSOR", shape, dtype]``
  args, ``args`` = the other args in order, ``kwargs`` when not empty;
* config entity -> config ``{knob: value}`` (split factors stay lists, ``-1`` kept);
* result -> costs (seconds; only when error_no is 0), status from error_no, ``wall_s`` = all_cost,
  timestamp (UNIX seconds -> UTC);
* the line's JSON value is kept in ``meta["autotvm"]`` so :func:`export` gives it back unchanged.

v0.1 lines (keys ``i``/``r``/``v``) and pickle-protocol lines (tab-separated base64) are skipped
and counted, never decoded.  Malformed lines are skipped as ImportIssues with their line number.
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tunedb.index.model.record import Record
from tunedb.transfer.interop.device_fields import kind_hint, merge_device_fields, resolve_device_fields
from tunedb.transfer.interop.input_files import display_name, parse_json_lines
from tunedb.transfer.interop.outcomes import (
    ExportReport,
    ImportIssue,
    NothingToExport,
)
from tunedb.transfer.interop.record_building import Prepared, make_record, stable_record_id, to_utc

FORMAT = "autotvm"
SOURCE = "imported:autotvm"

# MeasureErrorNo of tvm.autotvm.measure -> (name, tunedb status)
ERROR_NO = {
    0: ("no_error", "ok"),
    1: ("instantiation_error", "invalid"),
    2: ("compile_host", "compile_error"),
    3: ("compile_device", "compile_error"),
    4: ("runtime_device", "runtime_error"),
    5: ("wrong_answer", "wrong_result"),
    6: ("build_timeout", "timeout"),
    7: ("run_timeout", "timeout"),
    8: ("unknown_error", "runtime_error"),
}
KNOB_KINDS = ("sp", "re", "an", "ot")

# TVM's default target keys per kind (before -keys=...); -device=X is put in front.
_DEFAULT_KEYS = {
    "llvm": ["cpu"], "c": ["cpu"], "cuda": ["cuda", "gpu"], "nvptx": ["cuda", "gpu"], "rocm": ["rocm", "gpu"],
    "opencl": ["opencl", "gpu"], "vulkan": ["vulkan", "gpu"], "metal": ["metal", "gpu"],
    "webgpu": ["webgpu", "gpu"], "hexagon": ["hexagon"],
}
_LIST_OPTIONS = ("keys", "mattr", "libs")
_KIND_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_OPT_RE = re.compile(r"^-{1,2}([A-Za-z_][A-Za-z0-9_-]*)(?:=(.*))?$")

# task-name tokens that end the operator part (layouts and schedule variants)
_CUT_TOKENS = {
    "nchw", "nhwc", "hwcn", "nchwc", "ncw", "nwc", "ncdhw", "ndhwc", "hwnc", "nchw4c", "oihw",
    "winograd", "spatial", "pack", "nopack", "direct", "small", "large", "tensorcore", "int8", "simd",
    "mali", "bifrost", "im2col", "gemm", "cudnn", "cublas", "rocblas", "miopen", "interleaved", "dotprod",
}
_LAYOUT_TOKENS = {"nchw", "nhwc", "hwcn", "nchwc", "ncw", "nwc", "ncdhw", "ndhwc", "hwnc", "nchw4c"}


# --------------------------------------------------------------------------------------- parsing

def parse_target_string(text: str) -> dict:
    """``"llvm -device=arm_cpu -model=rk3399 -mattr=+neon"`` -> target dict (never evaluates anything).

    Raises ValueError for an empty or ill-formed string.
    """
    if not isinstance(text, str):
        raise ValueError(f"target must be a string, got {type(text).__name__}")
    try:  # an option value may be quoted and hold spaces: -device_name="AMD Radeon Graphics (RADV RENOIR)"
        toks = shlex.split(text) if any(q in text for q in "\"'") else text.split()
    except ValueError as e:  # an unbalanced quote
        raise ValueError(f"bad target string {text[:80]!r}: {e}") from None
    if not toks:
        raise ValueError("empty target string")
    kind = toks[0]
    if not _KIND_RE.match(kind):
        raise ValueError(f"bad target kind {kind!r}")
    target: dict[str, Any] = {"kind": kind, "raw": text}
    opts: dict[str, Any] = {}
    for t in toks[1:]:
        m = _OPT_RE.match(t)
        if not m:
            raise ValueError(f"bad target option {t!r}")
        k, v = m.group(1), m.group(2)
        if k in opts:
            raise ValueError(f"target option {k!r} given twice")
        if v is None:
            opts[k] = True
        elif k in _LIST_OPTIONS:
            opts[k] = [x for x in v.split(",") if x]
        else:
            opts[k] = v
    target.update(opts)
    if "keys" not in target:
        keys = list(_DEFAULT_KEYS.get(kind, [kind]))
        dev = opts.get("device")
        if isinstance(dev, str) and dev and dev not in keys:
            keys.insert(0, dev)
        target["keys"] = keys
    return target


def resolve_target(text: str, device: str | None = None) -> dict:
    """Parse a target string and add catalog fields (vendor, arch, ...) for its device.

    ``device`` (the CLI's ``--device``) replaces the ``model``.
    """
    t = parse_target_string(text)
    if device:
        t["model"] = device
    name = t.get("model") or t.get("mcpu")
    if isinstance(name, str) and name:
        merge_device_fields(t, resolve_device_fields(name, kind_hint(t)))
    return t


def family_of_task(task: str) -> tuple[str, str | None]:
    """``conv2d_nchw.cuda`` -> (``conv2d``, ``nchw``); ``depthwise_conv2d_nchw.arm_cpu`` ->
    (``depthwise_conv2d``, ``nchw``); ``batch_matmul.cuda`` -> (``batch_matmul``, None)."""
    op = task.split(".", 1)[0]
    toks = op.split("_")
    fam: list[str] = []
    layout = None
    for tok in toks:
        low = tok.lower()
        if low in _CUT_TOKENS and fam:
            if low in _LAYOUT_TOKENS:
                layout = tok
            break
        fam.append(tok)
    family = "_".join(fam) or op or task
    if layout is None:
        for tok in toks[len(fam):]:
            if tok.lower() in _LAYOUT_TOKENS:
                layout = tok
                break
    return family, layout


def _is_tensor(a: Any) -> bool:
    return isinstance(a, list) and len(a) in (3, 4) and a[0] == "TENSOR"


def workload_of(task: str, args: list, kwargs: Any) -> dict:
    """Workload dict of an AutoTVM task (see module docstring)."""
    if not isinstance(task, str) or not task:
        raise ValueError("task name must be a non-empty string")
    if not isinstance(args, list):
        raise ValueError("task args must be a list")
    family, layout = family_of_task(task)
    shapes, dtypes, other, extras = [], [], [], []
    for a in args:
        if _is_tensor(a):
            if len(a) == 4:  # a few TopHub lines carry a 4th item (e.g. output padding)
                extras.append([len(shapes), a[3]])
            shape, dtype = a[1], a[2]
            if not isinstance(shape, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in shape):
                raise ValueError(f"TENSOR shape {shape!r} is not a list of integers")
            if not isinstance(dtype, str):
                raise ValueError(f"TENSOR dtype {dtype!r} is not a string")
            shapes.append(shape)
            dtypes.append(dtype)
        elif isinstance(a, list) and a and a[0] == "TENSOR":
            raise ValueError(f"bad TENSOR argument {a!r}")
        else:
            other.append(a)
    w: dict[str, Any] = {"family": family, "task": task, "shapes": shapes, "dtypes": dtypes, "args": other}
    if extras:
        w["tensor_extras"] = extras
    if dtypes:
        w["dtype"] = dtypes[0]
    if layout:
        w["layout"] = layout
    if kwargs:
        if not isinstance(kwargs, dict):
            raise ValueError("task kwargs must be an object")
        w["kwargs"] = kwargs
    return w


def config_of(cfg: Any) -> dict:
    """Config entity ``[[knob, kind, value], ...]`` -> ``{knob: value}``."""
    if not isinstance(cfg, dict):
        raise ValueError("'config' must be an object")
    entity = cfg.get("entity")
    if not isinstance(entity, list):
        raise ValueError("'config.entity' must be a list")
    out: dict[str, Any] = {}
    for e in entity:
        if not isinstance(e, list) or len(e) != 3 or not isinstance(e[0], str) or not isinstance(e[1], str):
            raise ValueError(f"config entity item {e!r} is not [knob, kind, value]")
        knob, kind, value = e
        if kind not in KNOB_KINDS:
            raise ValueError(f"knob {knob!r} has unknown kind {kind!r}")
        if knob in out:
            raise ValueError(f"knob {knob!r} appears twice")
        if kind in ("sp", "re"):
            if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
                raise ValueError(f"knob {knob!r} ({kind}) must be a list of integers")
        elif kind == "an":
            if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
                raise ValueError(f"knob {knob!r} (an) must be a list of strings")
        out[knob] = value
    return out


def result_of(result: Any) -> tuple[list[float], str, str, float | None, Any]:
    """``[costs, error_no, all_cost, timestamp]`` -> (costs_s, status, error, wall_s, timestamp)."""
    from tunedb.transfer.interop.record_building import check_costs

    if not isinstance(result, list) or len(result) != 4:
        raise ValueError("'result' must be [costs, error_no, all_cost, timestamp]")
    costs, error_no, all_cost, ts = result
    if isinstance(error_no, bool) or not isinstance(error_no, int):
        raise ValueError(f"error_no {error_no!r} is not an integer")
    name, status = ERROR_NO.get(error_no, (f"error_no_{error_no}", "runtime_error"))
    if not isinstance(costs, list):
        raise ValueError("result costs must be a list")
    if status == "ok":
        costs_s = check_costs(costs)
        if not costs_s:
            raise ValueError("error_no 0 but no costs")
        error = ""
    else:
        costs_s = []
        error = f"autotvm error_no {error_no} ({name})"
    wall = None
    if all_cost is not None:
        if isinstance(all_cost, bool) or not isinstance(all_cost, (int, float)) or not (0 <= all_cost < float("inf")):
            raise ValueError(f"all_cost {all_cost!r} is not a finite number >= 0")
        wall = float(all_cost)
    timestamp = to_utc(ts)
    if ts is not None and timestamp is None:
        raise ValueError(f"timestamp {ts!r} is not a UNIX time")
    return costs_s, status, error, wall, timestamp


def classify_line(text: str, value: Any, err: str | None) -> tuple[str, str] | None:
    """None for a v0.2 line, else (kind, message) of why it is skipped."""
    if err is not None:
        if "\t" in text and not text.startswith(("{", "[")):
            return "unsupported", "pickle-protocol AutoTVM line: skipped, never decoded"
        return "malformed", err
    if not isinstance(value, dict):
        return "malformed", "line is not a JSON object"
    if "i" in value and "r" in value and "input" not in value:
        return "unsupported", "AutoTVM v0.1 line: skipped, never decoded"
    ver = value.get("version")
    if ver != 0.2:
        if ver == 0.1 or value.get("v") == 0.1:
            return "unsupported", "AutoTVM v0.1 line: skipped, never decoded"
        return "malformed", f"unsupported record version {ver!r} (expected 0.2)"
    return None


def recognise_line(text: str, value: Any, err: str | None) -> tuple[bool, tuple[str, str] | None]:
    """Whether a line is an AutoTVM line (a v0.2 line, one skipped as unsupported, or an object
    with an ``input``), and (kind, message) of why it is skipped (:func:`classify_line`)."""
    why = classify_line(text, value, err)
    known = why is None or why[0] == "unsupported" or (isinstance(value, dict) and "input" in value)
    return known, why


def parse(path: Path, device: str | None = None) -> Iterator[Record | ImportIssue]:
    """Yield one Record per v0.2 line of ``path`` and an ImportIssue per skipped line."""
    targets: dict[str, Prepared] = {}
    workloads: dict[str, Prepared] = {}
    seen: Counter = Counter()

    def record_of(no: int, value: Any) -> Record:
        inp = value.get("input")
        if not isinstance(inp, list) or len(inp) not in (3, 4):
            raise ValueError("'input' must be [target, task_name, args, kwargs]")
        tstr, task, args = inp[0], inp[1], inp[2]
        kwargs = inp[3] if len(inp) == 4 else {}
        if not isinstance(tstr, str):
            raise ValueError("target must be a string")
        tp = targets.get(tstr)
        if tp is None:
            tp = targets[tstr] = Prepared.of(resolve_target(tstr, device), "target")
        wkey = json.dumps([task, args, kwargs], sort_keys=True)
        wp = workloads.get(wkey)
        if wp is None:
            wp = workloads[wkey] = Prepared.of(workload_of(task, args, kwargs), "workload")
        config = config_of(value.get("config"))
        costs, status, error, wall, ts = result_of(value.get("result"))
        rid = stable_record_id(FORMAT, tp.key, value, seen)
        return make_record(tp, wp, config, costs=costs, status=status, error=error, wall_s=wall,
                           timestamp=ts, source=SOURCE, record_id=rid,
                           meta={"autotvm": value, "origin": {"file": display_name(path.name), "line": no}})

    yield from parse_json_lines(path, record_of, recognise=recognise_line,
                                not_format=f"{path} is not an AutoTVM log (no line holds an AutoTVM record)")


# --------------------------------------------------------------------------------------- export

def _guess_kind(value: Any) -> str:
    if isinstance(value, list):
        if all(isinstance(x, str) for x in value):
            return "an"
        return "sp"
    return "ot"


def target_string(target: dict) -> str:
    """Target dict -> AutoTVM target string (``raw`` when present)."""
    raw = target.get("raw")
    if isinstance(raw, str) and raw:
        return raw
    parts = [str(target.get("kind", "llvm"))]
    for k in ("device", "model", "mcpu", "mtriple"):
        if isinstance(target.get(k), str) and target[k]:
            parts.append(f"-{k}={target[k]}")
    if target.get("mattr"):
        parts.append("-mattr=" + ",".join(map(str, target["mattr"])))
    return " ".join(parts)


def line_of(rec: Record) -> dict | None:
    """AutoTVM line (JSON value) of a record: the imported original, or one synthesised from an
    AutoTVM-shaped workload (``task`` key); None when the record cannot be expressed."""
    orig = rec.meta.get("autotvm")
    if isinstance(orig, dict):
        return orig
    w = rec.workload
    if not isinstance(w.get("task"), str):
        return None
    args = [["TENSOR", s, d] for s, d in zip(w.get("shapes", []), w.get("dtypes", []))]
    for i, extra in w.get("tensor_extras", []):
        args[i].append(extra)
    args += list(w.get("args", []))
    inv = {v[1]: k for k, v in ERROR_NO.items()}
    error_no = 0 if rec.status == "ok" else inv.get(rec.status, 4)
    costs = list(rec.costs) if rec.status == "ok" else [1e9]
    return {
        "input": [target_string(rec.target), w["task"], args, w.get("kwargs", {})],
        "config": {"index": -1, "code_hash": None,
                   "entity": [[k, _guess_kind(v), v] for k, v in rec.config.items()]},
        "result": [costs, error_no, rec.wall_s if rec.wall_s is not None else 0.0, rec.timestamp.timestamp()],
        "version": 0.2, "tvm_version": "0.0.0",
    }


def _order(rec: Record) -> tuple:
    o = rec.meta.get("origin") if isinstance(rec.meta.get("origin"), dict) else {}
    return (str(o.get("file", "")), o.get("line", 0) if isinstance(o.get("line"), int) else 0,
            rec.timestamp.timestamp(), rec.record_id)


def export(records: Iterable[Record], out: Path) -> ExportReport:
    """Write ``records`` as an AutoTVM v0.2 log at ``out`` (imported lines in file/line order).
    NothingToExport (nothing written) when none of them is an AutoTVM record."""
    rep = ExportReport()
    lines = []
    for rec in sorted(records, key=_order):
        line = line_of(rec)
        if line is None:
            rep.skipped += 1
            rep.reasons["not an AutoTVM task"] += 1
            continue
        lines.append(json.dumps(line))
    if not lines:
        raise NothingToExport(f"0 of {rep.skipped} records are AutoTVM records: autotvm export writes only records "
                              "tuned by AutoTVM (imported from an AutoTVM log, or of an AutoTVM task workload)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for s in lines:
            f.write(s + "\n")
    tmp.replace(out)
    rep.exported = len(lines)
    rep.files.append(out)
    return rep
