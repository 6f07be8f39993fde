"""Kernel Tuner cache files (``.json`` or ``.json.gz``) and T4 results files.

Cache (T3) layout: ``{"device_name", "kernel_name", "problem_size", "tune_params_keys",
"tune_params", "objective", "cache": {key: entry}}``; a key is the config's values joined by
commas in ``tune_params_keys`` order; times are milliseconds.  Other Kernel Tuner versions may
omit problem_size, objective, tune_params, tune_params_keys, restrictions or ``times``, or hold
only ``{"time": ...}`` per entry; a cache that a running tuner left unterminated is closed.
T4 results layout (``{"schema_version", "metadata": {"timeunit"}, "results": [...]}``) is read too.

Mapping (one entry -> one Record on the file's device, source ``imported:kernel-tuner``):

* device: ``--device`` when given, else ``device_name``, else the file name stem
  (``MI250X.json.gz`` -> ``MI250X``); target = ``{"kind": "gpu", "name": device}`` plus catalog
  fields (``device_name`` = the catalog's canonical name, ``vendor``, ``arch``);
* workload = ``{family: kernel_name, kernel: kernel_name, problem_size, params: tune_params_keys}``
  (kernel_name missing, as in T4 files -> the name of the file's folder);
* config = the entry's parameter values (from the entry, else decoded from the cache key; when
  the file names no parameters at all they are called ``param_0``, ``param_1``, ...);
* error strings: InvalidConfig -> invalid, CompilationFailedConfig -> compile_error,
  RuntimeFailedConfig -> runtime_error (any other string -> runtime_error);
* costs = ``times`` (ms -> s) when present, else ``time``; compile_s = compile_time / 1000;
* ``meta["kernel_tuner"] = {"key", "entry"}`` keeps the entry (minus parameter values) for export.

Restriction strings are documentation only: never evaluated.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from tunedb.index.record import Record
from tunedb.transfer.interop import (
    ExportFormatError,
    ExportReport,
    ImportFormatError,
    ImportIssue,
    Prepared,
    fast_normalise,
    make_record,
    merge_device_fields,
    read_text,
    resolve_device_fields,
    stable_record_id,
    to_utc,
    where,
)
from tunedb.transfer.search.space import Constraint, Knob, Space

FORMAT = "kernel-tuner"
SOURCE = "imported:kernel-tuner"
ERROR_STATUS = {
    "InvalidConfig": "invalid",
    "CompilationFailedConfig": "compile_error",
    "RuntimeFailedConfig": "runtime_error",
}
STATUS_ERROR = {"invalid": "InvalidConfig", "compile_error": "CompilationFailedConfig"}
_RESULT_KEYS = {"time", "times", "compile_time", "verification_time", "benchmark_time", "strategy_time",
                "framework_time", "timestamp", "GFLOP/s", "GB/s"}
FAILED_TIME_MS = 1e20  # some Kernel Tuner versions wrote huge numbers for failures
T4_INVALIDITY = {"correct": "ok", "compile": "compile_error", "runtime": "runtime_error",
                 "constraints": "invalid", "invalid": "invalid", "correctness": "wrong_result"}
UNIT_TO_S = {"milliseconds": 1e-3, "miliseconds": 1e-3, "ms": 1e-3, "seconds": 1.0, "s": 1.0,
             "microseconds": 1e-6, "us": 1e-6, "nanoseconds": 1e-9, "ns": 1e-9}


# ---------------------------------------------------------------------------------------- loading

def _stem(path: Path) -> str:
    name = path.name
    for suf in (".json.gz", ".json", ".gz"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return path.stem


def load_cache(path: str | Path) -> dict:
    """Read a cache (or T4 results) file as a dict; closes a cache left unterminated by a run.

    Raises ImportFormatError when the file is unreadable or neither a cache nor a T4 file.
    """
    path = Path(path)
    text = read_text(path)
    try:
        doc = json.loads(text)
    except RecursionError:
        raise ImportFormatError(f"{path} is not a Kernel Tuner cache (JSON nested too deeply)") from None
    except json.JSONDecodeError as e:
        doc = None
        t = text.rstrip()
        if '"cache"' in t:  # Kernel Tuner appends entries and closes the file only at the end
            for tail in ("}}", "}"):
                try:
                    doc = json.loads(t.rstrip(",") + tail)
                    break
                except (json.JSONDecodeError, RecursionError):
                    continue
        if doc is None:
            raise ImportFormatError(f"{path} is not a Kernel Tuner cache (JSON error: {e.msg} at line {e.lineno})") \
                from None
    if not isinstance(doc, dict):
        raise ImportFormatError(f"{path} is not a Kernel Tuner cache (top level is not an object)")
    if "ConfigurationSpace" in doc or "General" in doc:
        raise ImportFormatError(f"{path} is a T1 search-space definition, not a Kernel Tuner cache")
    if isinstance(doc.get("cache"), dict):
        return doc
    if isinstance(doc.get("results"), list):
        return doc
    raise ImportFormatError(f"{path} is not a Kernel Tuner cache (no 'cache' object or 'results' list)")


def _param_keys(doc: Mapping[str, Any]) -> list[str] | None:
    keys = doc.get("tune_params_keys")
    if isinstance(keys, list) and keys and all(isinstance(k, str) for k in keys):
        return list(keys)
    tp = doc.get("tune_params")
    if isinstance(tp, dict) and tp:
        return list(tp)
    cache = doc.get("cache")
    if isinstance(cache, dict) and cache:
        # Kernel Tuner writes an entry's parameters first, in tune_params_keys order
        for key, e in cache.items():
            if isinstance(e, dict) and isinstance(key, str):
                n = len(key.split(","))
                ks = list(e)[:n]
                if len(ks) == n and all(k not in _RESULT_KEYS for k in ks):
                    return ks
        first = next(iter(cache))
        if isinstance(first, str):  # nothing names them: positional names
            return [f"param_{i}" for i in range(len(first.split(",")))]
    return None


def _scalar(text: str) -> Any:
    for conv in (int, float):
        try:
            v = conv(text)
            return v if not (isinstance(v, float) and not math.isfinite(v)) else text
        except ValueError:
            pass
    return text


def _decode_key(key: str, keys: list[str], tune_params: Mapping[str, Any] | None) -> dict:
    parts = key.split(",")
    if len(parts) != len(keys):
        raise ValueError(f"cache key {key!r} has {len(parts)} values, expected {len(keys)}")
    cfg = {}
    for k, part in zip(keys, parts):
        vals = tune_params.get(k) if isinstance(tune_params, Mapping) else None
        if isinstance(vals, list):
            match = [v for v in vals if str(v) == part]
            cfg[k] = match[0] if match else _scalar(part)
        else:
            cfg[k] = _scalar(part)
    return cfg


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def entry_result(entry: Any, scale: float = 1e-3) -> tuple[list[float], str, str]:
    """(costs_s, status, error) of a cache entry; ValueError when the entry is malformed."""
    if isinstance(entry, str):
        return [], ERROR_STATUS.get(entry, "runtime_error"), entry
    if not isinstance(entry, dict):
        raise ValueError("entry is neither an object nor an error string")
    t = entry.get("time")
    if isinstance(t, str):
        return [], ERROR_STATUS.get(t, "runtime_error"), t
    times = entry.get("times")
    vals: list | None = None
    if isinstance(times, list) and times:
        vals = times
    elif t is not None:
        vals = [t]
    if vals is None:
        raise ValueError("entry has neither 'time' nor 'times'")
    try:
        total = math.fsum(vals)
        lo, hi = min(vals), max(vals)
    except TypeError:
        raise ValueError(f"times {vals!r} are not all numbers") from None
    if not math.isfinite(total) or lo < 0 or any(v is True or v is False for v in vals):
        raise ValueError(f"times {vals!r} are not all finite numbers >= 0")
    if hi >= FAILED_TIME_MS:
        return [], "runtime_error", "failure marker time"
    return [v * scale for v in vals], "ok", ""


def _target(device: str) -> Prepared:
    t: dict[str, Any] = {"kind": "gpu", "name": device}
    merge_device_fields(t, resolve_device_fields(device, "gpu"))
    return Prepared.of(t, "target")


def _workload(doc: Mapping[str, Any], path: Path, keys: list[str] | None) -> Prepared:
    kernel = doc.get("kernel_name")
    if not isinstance(kernel, str) or not kernel:
        kernel = path.resolve().parent.name or "kernel"
    w: dict[str, Any] = {"family": kernel, "kernel": kernel}
    ps = doc.get("problem_size")
    if ps is not None:
        w["problem_size"] = ps
    if keys is not None:
        w["params"] = keys
    return Prepared.of(w, "workload")


def _header(doc: Mapping[str, Any], path: Path, device: str | None, keys: list[str] | None
            ) -> tuple[Prepared, Prepared]:
    try:
        return _target(device_of(doc, path, device)), _workload(doc, path, keys)
    except (ValueError, TypeError, RecursionError) as e:
        raise ImportFormatError(f"{path}: unusable cache header: {e}") from None


def device_of(doc: Mapping[str, Any], path: Path, device: str | None = None) -> str:
    """``device`` override, else a non-empty ``device_name``, else the file name stem."""
    if device:
        return device
    name = doc.get("device_name")
    if isinstance(name, str) and name.strip():
        return name.strip()
    return _stem(path)


# ---------------------------------------------------------------------------------------- parsing

def parse(path: Path, device: str | None = None) -> Iterator[Record | ImportIssue]:
    """Yield one Record per cache entry (or T4 result) of ``path``; ImportIssue per bad entry."""
    doc = load_cache(path)
    if "cache" not in doc:
        yield from _parse_t4(doc, path, device)
        return
    keys = _param_keys(doc)
    tune_params = doc.get("tune_params") if isinstance(doc.get("tune_params"), dict) else None
    tp, wp = _header(doc, path, device, keys)
    seen: Counter = Counter()
    key_set = set(keys or ())
    for i, (key, entry) in enumerate(doc["cache"].items(), 1):
        try:
            if keys is None:
                raise ValueError("parameter names unknown (no tune_params_keys/tune_params)")
            if isinstance(entry, dict) and all(k in entry for k in keys):
                config = {k: entry[k] for k in keys}
            else:
                config = _decode_key(key, keys, tune_params)
            costs, status, error = entry_result(entry)
            compile_s = None
            ts = None
            if isinstance(entry, dict):
                ct = entry.get("compile_time")
                if _is_num(ct) and math.isfinite(ct) and ct >= 0:
                    compile_s = ct * 1e-3
                ts = to_utc(entry.get("timestamp"))
            norm = fast_normalise(entry, "meta") if isinstance(entry, dict) else entry
            rest = {k: v for k, v in norm.items() if k not in key_set} if isinstance(norm, dict) else norm
            meta = {"kernel_tuner": {"key": key, "entry": rest}}
            basis = wp.key + "\0" + key + "\0" + json.dumps(norm, sort_keys=True)
            rid = stable_record_id(FORMAT, tp.key, None, seen, text=basis)
            rec = make_record(tp, wp, config, costs=costs, status=status, error=error, compile_s=compile_s,
                              timestamp=ts, source=SOURCE, record_id=rid, meta=meta, meta_normalised=True)
        except (ValueError, TypeError, KeyError, RecursionError) as e:
            yield ImportIssue(where(path, f"entry {i} ({key})"), str(e) or type(e).__name__)
            continue
        yield rec


def _parse_t4(doc: Mapping[str, Any], path: Path, device: str | None) -> Iterator[Record | ImportIssue]:
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    unit = str(meta.get("timeunit", "milliseconds")).lower()
    if unit not in UNIT_TO_S:
        raise ImportFormatError(f"{path}: unknown time unit {unit!r}")
    scale = UNIT_TO_S[unit]
    results = doc["results"]
    keys = None
    for r in results:
        if isinstance(r, dict) and isinstance(r.get("configuration"), dict):
            keys = list(r["configuration"])
            break
    tp, wp = _header(doc, path, device, keys)
    seen: Counter = Counter()
    for i, r in enumerate(results, 1):
        try:
            if not isinstance(r, dict) or not isinstance(r.get("configuration"), dict):
                raise ValueError("result has no 'configuration' object")
            config = r["configuration"]
            if keys is not None and list(config) != keys:
                raise ValueError("configuration has other parameters than the first result")
            times = r.get("times") if isinstance(r.get("times"), dict) else {}
            value = None
            for m in r.get("measurements") or []:
                if isinstance(m, dict) and m.get("name") == "time":
                    value = m.get("value")
            status = T4_INVALIDITY.get(str(r.get("invalidity", "correct")), "runtime_error")
            error = "" if status == "ok" else str(r.get("invalidity"))
            if isinstance(value, str):
                status, error = ERROR_STATUS.get(value, "runtime_error"), value
            costs: list[float] = []
            if status == "ok":
                runtimes = times.get("runtimes")
                costs, status, error = entry_result({"times": runtimes, "time": value}, scale)
            ct = times.get("compilation")
            compile_s = ct * scale if _is_num(ct) and math.isfinite(ct) and ct >= 0 else None
            key = ",".join(str(v) for v in config.values())
            rid = stable_record_id(FORMAT, tp.key, [wp.key, key, r], seen)
            rec = make_record(tp, wp, config, costs=costs, status=status, error=error, compile_s=compile_s,
                              timestamp=to_utc(r.get("timestamp")), source=SOURCE, record_id=rid,
                              meta={"kernel_tuner": {"key": key, "t4": r}})
        except (ValueError, TypeError, KeyError, RecursionError) as e:
            yield ImportIssue(where(path, f"result {i}"), str(e) or type(e).__name__)
            continue
        yield rec


# ----------------------------------------------------------------------------------------- space

def cache_key(config: Mapping[str, Any], keys: Iterable[str]) -> str:
    """Kernel Tuner's cache key: the values in ``keys`` order joined by commas."""
    return ",".join(str(config[k]) for k in keys)


def space_from_cache(cache: Mapping[str, Any], only_cached: bool = True) -> Space:
    """The search space of a cache dict (as loaded by :func:`load_cache`).

    Knobs: ``tune_params`` in ``tune_params_keys`` order (values as listed), or, when the file
    lacks tune_params, the sorted values found in the entries.  Restriction strings are never
    evaluated; with ``only_cached`` the one constraint is "the config is in the cache and is not
    InvalidConfig", which is what a replay of the file can answer.
    """
    keys = _param_keys(cache)
    entries = cache.get("cache") if isinstance(cache.get("cache"), dict) else {}
    if keys is None:
        raise ValueError("the cache names no parameters (no tune_params_keys/tune_params)")
    tune_params = cache.get("tune_params") if isinstance(cache.get("tune_params"), dict) else {}
    valid: set[str] = set()
    seen_vals: dict[str, set] = {k: set() for k in keys}  # JSON texts of the values met
    for key, e in entries.items():
        try:
            cfg = {k: e[k] for k in keys} if isinstance(e, dict) and all(k in e for k in keys) \
                else _decode_key(key, keys, tune_params)
        except ValueError:
            continue
        for k in keys:
            seen_vals[k].add(json.dumps(cfg[k], sort_keys=True))
        bad = e == "InvalidConfig" or (isinstance(e, dict) and e.get("time") == "InvalidConfig")
        if not bad:
            valid.add(cache_key(cfg, keys))
    knobs = []
    for k in keys:
        vals = tune_params.get(k)
        if not isinstance(vals, list) or not vals:
            vals = sorted((json.loads(v) for v in seen_vals[k]), key=_value_order)
        knobs.append(Knob(k, tuple(vals)))
    constraints: tuple = ()
    if only_cached:
        restr = cache.get("restrictions")
        doc = "config is a valid (not InvalidConfig) entry of the cache file"
        if isinstance(restr, list) and all(isinstance(r, str) for r in restr):
            doc += "; file restrictions (not evaluated): " + " and ".join(restr)
        keys_t = tuple(keys)
        constraints = (Constraint(doc, lambda cfg: cache_key(cfg, keys_t) in valid),)
    return Space(knobs=tuple(knobs), constraints=constraints)


# ---------------------------------------------------------------------------------------- export

_SLUG_RE = re.compile(r"[^A-Za-z0-9_.-]+")


def _slug(s: str) -> str:
    return _SLUG_RE.sub("_", s).strip("_") or "x"


def _value_order(v: Any) -> tuple:
    """Sort key: numbers numerically, then everything else by its JSON text."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (0, v, "")
    return (1, 0, json.dumps(v, sort_keys=True))


def _entry_of(rec: Record, keys: list[str]) -> Any:
    kt = rec.meta.get("kernel_tuner") if isinstance(rec.meta.get("kernel_tuner"), dict) else {}
    cfg = {k: rec.config.get(k) for k in keys}
    rest = kt.get("entry")
    if isinstance(rest, dict):
        return {**cfg, **rest}
    if isinstance(rest, str):
        return rest
    if rec.status == "ok":
        ms = [c * 1e3 for c in rec.costs]
        e = {**cfg, "time": sum(ms) / len(ms), "times": ms}
    else:
        e = {**cfg, "time": STATUS_ERROR.get(rec.status, "RuntimeFailedConfig"), "times": None}
    if rec.compile_s is not None:
        e["compile_time"] = rec.compile_s * 1e3
    e["timestamp"] = rec.timestamp.isoformat()
    return e


def cache_of(records: list[Record]) -> dict:
    """A Kernel Tuner cache dict of records that share one target and one workload."""
    first = records[0]
    w = first.workload
    keys = w.get("params") if isinstance(w.get("params"), list) else sorted(first.config)
    values: dict[str, set] = {k: set() for k in keys}
    cache: dict[str, Any] = {}
    for rec in sorted(records, key=lambda r: (r.timestamp, r.record_id)):
        if set(rec.config) != set(keys):
            raise ExportFormatError(f"record {rec.record_id} has other knobs than the workload's params")
        for k in keys:
            values[k].add(json.dumps(rec.config[k]))
        kt = rec.meta.get("kernel_tuner") if isinstance(rec.meta.get("kernel_tuner"), dict) else {}
        key = kt.get("key") if isinstance(kt.get("key"), str) else cache_key(rec.config, keys)
        cache[key] = _entry_of(rec, keys)
    tune_params = {k: sorted((json.loads(v) for v in vs), key=_value_order) for k, vs in values.items()}
    doc: dict[str, Any] = {"device_name": first.target.get("name") or first.target_name,
                           "kernel_name": w.get("kernel") or w["family"]}
    if "problem_size" in w:
        doc["problem_size"] = w["problem_size"]
    doc.update(tune_params_keys=keys, tune_params=tune_params, objective="time", cache=cache)
    return doc


def export(records: Iterable[Record], out: Path) -> ExportReport:
    """One cache file per (target, workload).  ``out`` ending in ``.json``/``.json.gz`` is that
    single file (an error when the records span several); otherwise ``out`` is a directory of
    ``<device>__<kernel>.json`` files."""
    import gzip

    groups: dict[tuple[str, str], list[Record]] = {}
    rep = ExportReport()
    for r in records:
        params = r.workload.get("params")
        scalar = all(v is None or isinstance(v, (int, float, str, bool)) for v in r.config.values())
        if not scalar or (isinstance(params, list) and set(params) != set(r.config)):
            rep.skipped += 1
            rep.reasons["not a Kernel Tuner config (knobs are not the workload's scalar params)"] += 1
            continue
        groups.setdefault((r.target_key, r.workload_key), []).append(r)
    single = out.name.endswith((".json", ".json.gz"))
    if single and len(groups) > 1:
        raise ExportFormatError(f"{len(groups)} (target, workload) pairs cannot go into one cache file {out}; "
                                "give a directory or --target")
    files = []
    for (_t, _w), recs in groups.items():
        doc = cache_of(recs)
        path = out if single else out / f"{_slug(doc['device_name'])}__{_slug(doc['kernel_name'])}.json"
        files.append((path, doc, len(recs)))
    names = [p for p, _, _ in files]
    if len(set(names)) != len(names):  # same device and kernel names, different problem sizes
        files = [(p.with_name(f"{p.name[:-5]}__{i}.json"), d, n) for i, (p, d, n) in enumerate(files)]
    for path, doc, n in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        data = json.dumps(doc).encode("utf-8")
        with open(tmp, "wb") as f:
            f.write(gzip.compress(data) if path.name.endswith(".gz") else data)
        tmp.replace(path)
        rep.files.append(path)
        rep.exported += n
    if not single and not files:
        out.mkdir(parents=True, exist_ok=True)
    return rep
