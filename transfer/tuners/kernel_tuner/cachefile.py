"""Kernel Tuner cache files (``.json`` or ``.json.gz``) and T4 results files.

Cache (T3) layout: ``{"device_name", "kernel_name", "problem_size", "tune_params_keys",
"tune_params", "objective", "cache": {key: entry}}``; a key is the config's values joined by
commas in ``tune_params_keys`` order; times are milliseconds.  Other Kernel Tuner versions may
omit problem_size, objective, tune_params, tune_params_keys, restrictions or ``times``, or hold
only ``{"time": ...}`` per entry; a cache that a running tuner left unterminated is closed.
T4 results layout (``{"schema_version", "metadata": {"timeunit"}, "results": [...]}``) is read too.

Mapping (one entry -> one Record on the file's device, source ``imported:kernel-tuner``):

* device: ``--device`` when given (it overrides every file's ``device_name``, empty or not),
  else ``device_name``, else the file name stem (``MI250X.json.gz`` -> ``MI250X``); a GPU
  kernel's cache whose ``device_name`` is a CPU architecture or host string (``x86_64``,
  ``aarch64``, ``localhost``, ``node12.cluster.org``, ..., see :func:`host_like_device_name`)
  names no GPU: the file name stem is used instead and the file is reported
  (:func:`device_choice`); target = ``{"kind": "gpu", "name": device}`` plus catalog fields
  (``device_name`` = the catalog's canonical name, ``vendor``, ``arch``); ``label`` (set by the
  import driver for files whose times contradict others claiming the same device) makes the
  name ``"<device> [<label>]"``, catalog fields still those of ``device``;
* workload = ``{family: kernel_name, kernel: kernel_name, problem_size, params: tune_params_keys}``
  (kernel_name missing, as in T4 files -> the name of the file's folder);
* config = the entry's parameter values (from the entry, else decoded from the cache key; when
  the file names no parameters at all they are called ``param_0``, ``param_1``, ...);
* error strings: InvalidConfig -> invalid, CompilationFailedConfig -> compile_error,
  RuntimeFailedConfig -> runtime_error (any other string -> runtime_error);
* costs = ``times`` (ms -> s) when present, else ``time``; compile_s = compile_time / 1000;
* ``meta["kernel_tuner"] = {"key", "entry"}`` keeps the entry (minus parameter values) for export.

A cache written by ``tunedb export --format kernel-tuner`` (:func:`export`) also holds a
``"tunedb"`` object, which Kernel Tuner ignores: ``{"target", "workload", "records", "in_records"}``.
Importing it gives back exactly what was exported: the target and workload as they were (so
every problem size stays its own workload and the target key is unchanged; ``--device`` still
renames the device), one record per cache entry, and the records a cache entry cannot hold
(earlier records of the same config, and any record whose cache entry would not give back its
costs, status, error, compile time and timestamp exactly) from ``records`` (``Record.to_dict``
fields without target and workload); ``in_records`` lists the cache keys whose entry is such a
record (the entry is then not imported a second time).

Restriction strings are documentation only: never evaluated.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from itertools import repeat
from json.encoder import encode_basestring, encode_basestring_ascii
from pathlib import Path
from typing import Any

from tunedb.index.hardware.devices import cpu_opencl_name
from tunedb.index.model.keys import canonical_json_normalised, fast_json_encoder, key_of_text, normalise
from tunedb.index.model.record import Record
from tunedb.transfer.interop.device_fields import merge_device_fields, resolve_device_fields
from tunedb.transfer.interop.input_files import display_name, file_stem, load_json, read_text, where
from tunedb.transfer.interop.outcomes import (
    ExportFormatError,
    ExportReport,
    ImportCapError,
    ImportFormatError,
    ImportIssue,
    NothingToExport,
)
from tunedb.transfer.interop.record_building import Prepared, fast_normalise, make_record, stable_record_id, to_utc
from tunedb.transfer.space import Constraint, Knob, Space

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

def load_cache(path: str | Path) -> dict:
    """Read a cache (or T4 results) file as a dict; closes a cache left unterminated by a run.

    Raises ImportFormatError when the file is unreadable or neither a cache nor a T4 file,
    ImportCapError (a subclass) when it is over an import cap (``input_files.read_text``) or its
    JSON nests deeper than the depth limit (``input_files.load_json``).
    """
    path = Path(path)
    text = read_text(path)
    what = display_name(path)
    try:
        doc = load_json(text, what)
    except json.JSONDecodeError as e:
        doc = None
        t = text.rstrip()
        if '"cache"' in t:  # Kernel Tuner appends entries and closes the file only at the end
            for tail in ("}}", "}"):
                try:
                    doc = load_json(t.rstrip(",") + tail, what)
                    break
                except json.JSONDecodeError:
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


def _seconds_or_none(value: Any, scale: float) -> float | None:
    """``value * scale`` as a float when ``value`` is a finite number >= 0 whose product is finite
    (an int too large for a float is no value), else None."""
    if not _is_num(value):
        return None
    try:
        out = float(value) * scale
    except OverflowError:
        return None
    return out if math.isfinite(out) and out >= 0 else None


def _short(value: Any) -> str:
    """``repr(value)`` for a message (a list holding a huge int by that: its decimal text may be
    megabytes, or past ``sys.get_int_max_str_digits``)."""
    if isinstance(value, list) and any(isinstance(v, int) and abs(v).bit_length() > 128 for v in value):
        return "[... an integer of more than 128 bits ...]"
    return repr(value)


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
    # each time checked on its own (no sum: 1e308 + 1e308 overflows, and fsum raises on it)
    if not all(isinstance(v, (int, float)) for v in vals):
        raise ValueError(f"times {_short(vals)} are not all numbers")
    try:
        ok = all(_is_num(v) and math.isfinite(v) and v >= 0 for v in vals)
    except OverflowError:  # an int too large for a float
        ok = False
    if not ok:
        raise ValueError(f"times {_short(vals)} are not all finite numbers >= 0")
    hi = max(vals)
    if hi >= FAILED_TIME_MS:
        return [], "runtime_error", "failure marker time"
    return list(map(operator.mul, vals, repeat(scale))), "ok", ""  # [v * scale for v in vals]


def device_target(device: str, label: str | None = None) -> Prepared:
    """The target of a cache file's device name: a GPU resolved through the catalog, unless the
    name is a CPU OpenCL device's (PoCL's ``pthread-<cpu>``, a CPU runtime's brand string)."""
    kind = "cpu" if cpu_opencl_name(device) else "gpu"
    t: dict[str, Any] = {"kind": kind, "name": f"{device} [{label}]" if label else device}
    if kind == "cpu":
        t["runtime"] = "opencl"
    merge_device_fields(t, resolve_device_fields(device, kind))
    return Prepared.of(t, "target")


def cache_workload(doc: Mapping[str, Any], path: Path, keys: list[str] | None) -> Prepared:
    """The workload of a cache file: family and kernel = its kernel_name (else the folder), its
    problem_size, ``params`` = the tune-parameter names in order."""
    kernel = doc.get("kernel_name")
    if not isinstance(kernel, str) or not kernel:
        kernel = display_name(path.resolve().parent.name) or "kernel"
    w: dict[str, Any] = {"family": kernel, "kernel": kernel}
    ps = doc.get("problem_size")
    if ps is not None:
        w["problem_size"] = ps
    if keys is not None:
        w["params"] = keys
    return Prepared.of(w, "workload")


def _header(doc: Mapping[str, Any], path: Path, device: str | None, keys: list[str] | None,
            notes: list | None = None, label: str | None = None) -> tuple[Prepared, Prepared]:
    try:
        name, note = device_choice(doc, path, device)
        if note is not None and notes is not None:
            notes.append(note)
        return device_target(name, label), cache_workload(doc, path, keys)
    except ImportCapError:
        raise
    except (ValueError, TypeError, RecursionError) as e:
        raise ImportFormatError(f"{path}: unusable cache header: {e}") from None


#: ``platform.machine()``-style CPU architecture names (lower case) that some post-processing
#: scripts write as a cache's ``device_name``
CPU_ARCH_NAMES = frozenset({
    "x86_64", "x86-64", "x64", "amd64", "x86", "i386", "i486", "i586", "i686", "ia64", "aarch64", "arm64",
    "arm", "armv6l", "armv7l", "armv8l", "armv8", "ppc", "ppc64", "ppc64le", "powerpc", "powerpc64",
    "powerpc64le", "s390x", "riscv64", "mips", "mips64", "mips64el", "loongarch64", "sparc64"})
#: languages of Kernel Tuner's CPU backends: a cache of such a kernel is not a GPU kernel's
CPU_LANGS = frozenset({"c", "c++", "fortran"})
_DOTTED_HOST = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*\.[a-z][a-z0-9-]*$")
_NODE_NAME = re.compile(r"^(?:[a-z0-9]+[-_])*(?:node|nid|cn|compute|login|worker|host|srv|server)[-_]?\d+$")


def is_gpu_cache(doc: Mapping[str, Any]) -> bool:
    """Whether ``doc`` holds a GPU kernel's results.  Kernel Tuner tunes GPU kernels (CUDA, HIP,
    OpenCL, CuPy) unless its ``lang`` is one of the CPU backends (C, C++, Fortran); the caches
    written by Kernel Tuner carry no ``lang``, so a cache is a GPU kernel's unless it says
    ``"lang": "C"``/``"Fortran"`` (or ``"device_type": "cpu"``)."""
    lang = doc.get("lang")
    if isinstance(lang, str) and lang.strip().lower() in CPU_LANGS:
        return False
    kind = doc.get("device_type")
    return not (isinstance(kind, str) and kind.strip().lower() == "cpu")


def host_like_device_name(name: str) -> str | None:
    """Why ``name`` names a host or a CPU rather than a GPU, or None when it may be a GPU.

    Suspicious (the reason returned): a CPU architecture name (:data:`CPU_ARCH_NAMES`, or an
    archspec microarchitecture name such as ``icelake``/``zen3``/``x86_64_v3``), ``localhost``,
    this machine's host name, a dotted host name (``node12.cluster.org``), a cluster node name
    (``node042``, ``gpu-node-7``, ``nid001234``), or a name the hardware catalog knows as a CPU.
    A name the catalog resolves to a GPU is never suspicious."""
    import platform
    import socket

    text = name.strip()
    low = text.lower()
    if not low:
        return None
    gpu = resolve_device_fields(text, "gpu")
    if gpu:
        return None
    if low in CPU_ARCH_NAMES:
        return "CPU architecture name"
    try:
        import archspec.cpu

        if low in archspec.cpu.TARGETS:
            return "CPU microarchitecture name"
    except Exception:  # noqa: BLE001 - archspec is optional here
        pass
    if low in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return "host name"
    hosts = {h.lower() for h in (platform.node(), socket.gethostname()) if h}
    if low in hosts or low.split(".")[0] in {h.split(".")[0] for h in hosts}:
        return "host name (this machine)"
    if " " not in low and (_DOTTED_HOST.match(low) or _NODE_NAME.match(low)):
        return "host name"
    if _catalog_kind(text) == "cpu":
        return "CPU model name"
    return None


def _catalog_kind(name: str) -> str:
    """The catalog's kind of an exactly known ``name`` (``cpu``/``gpu``), else ``""``."""
    try:
        from tunedb.index.hardware.catalog import find

        row = find(name)
    except Exception:  # noqa: BLE001 - the catalog is another module's; never fail an import on it
        return ""
    return str(row.get("kind") or "") if row else ""


def device_choice(doc: Mapping[str, Any], path: Path, device: str | None = None) -> tuple[str, dict | None]:
    """(device name for the file's target, conflict note or None).

    ``device`` (``--device``) wins over anything the file says, with no note.  Else a
    non-empty ``device_name`` is used unless it names a host or CPU (:func:`host_like_device_name`)
    in a GPU kernel's cache (:func:`is_gpu_cache`): then the file name stem is the device
    (``A100.json.gz`` -> ``A100``, which the catalog resolves) and the note
    ``{"file", "kind": "host-device-name", "device_claimed", "target_used", "evidence": {"reason"}}``
    says so.  An empty or missing ``device_name`` is the file name stem, with no note."""
    if device:
        return device, None
    name = doc.get("device_name")
    if isinstance(name, str) and name.strip():
        claimed = name.strip()
        why = host_like_device_name(claimed) if is_gpu_cache(doc) else None
        if why is None:
            return claimed, None
        stem = file_stem(path)
        return stem, {"file": str(path), "kind": "host-device-name", "device_claimed": claimed,
                      "target_used": stem, "evidence": {"reason": why, "gpu_kernel_cache": True}}
    return file_stem(path), None


def device_of(doc: Mapping[str, Any], path: Path, device: str | None = None) -> str:
    """The device name of the file's target (:func:`device_choice` without its note)."""
    return device_choice(doc, path, device)[0]


# ---------------------------------------------------------------------------------------- parsing

def parse(path: Path, device: str | None = None, *, notes: list | None = None, label: str | None = None
          ) -> Iterator[Record | ImportIssue]:
    """Yield one Record per cache entry (or T4 result) of ``path``; ImportIssue per bad entry.

    ``notes``: a list that receives the file's device-name conflict note (see
    :func:`device_choice`); ``label``: target name ``"<device> [<label>]"`` (see module docstring)."""
    doc = load_cache(path)
    yield from parse_loaded(doc, path, device, notes=notes, label=label)


def parse_loaded(doc: Mapping[str, Any], path: Path, device: str | None = None, *, notes: list | None = None,
                 label: str | None = None) -> Iterator[Record | ImportIssue]:
    """:func:`parse` of a document already read by :func:`load_cache` from ``path`` (``path``
    names the file in messages and provides the fallback device and kernel names)."""
    if "cache" not in doc:
        yield from _parse_t4(doc, path, device, notes, label)
        return
    keys = _param_keys(doc)
    own = doc.get("tunedb")
    own_target = isinstance(own, dict) and "target" in own and device is None and label is None
    tp, wp = _header(doc, path, device, keys, None if own_target else notes, label)
    if isinstance(own, dict):
        try:
            tp, wp = exported_keys(own, tp, wp, keep_target=device is not None or label is not None)
        except ValueError as e:
            raise ImportFormatError(f"{path}: unusable 'tunedb' section: {e}") from None
        skip = own.get("in_records")
        skip = frozenset(k for k in skip if isinstance(k, str)) if isinstance(skip, list) else frozenset()
        if skip:
            doc = {**doc, "cache": {k: v for k, v in doc["cache"].items() if k not in skip}}
        yield from _parse_cache(doc, path, keys, tp, wp)
        yield from exported_records(own, path, tp, wp)
        return
    yield from _parse_cache(doc, path, keys, tp, wp)


def exported_keys(own: Mapping[str, Any], tp: Prepared, wp: Prepared, *, keep_target: bool = False
                  ) -> tuple[Prepared, Prepared]:
    """(target, workload) of a cache that tunedb exported: the ``tunedb`` section's own (the
    target from the file's device name when ``keep_target``: ``--device`` or a conflict label
    renamed it).  ValueError when the section's target or workload is not a usable object."""
    if "workload" in own:
        wp = Prepared.of(own["workload"], "workload")
    if "target" in own and not keep_target:
        tp = Prepared.of(own["target"], "target")
    return tp, wp


def exported_records(own: Mapping[str, Any], path: Path, tp: Prepared, wp: Prepared
                     ) -> Iterator[Record | ImportIssue]:
    """The records of a tunedb export's ``tunedb.records`` (see the module docstring), on
    (``tp``, ``wp``), source ``imported:kernel-tuner``; an ImportIssue per unusable one."""
    rows = own.get("records")
    if not isinstance(rows, list):
        return
    for i, row in enumerate(rows, 1):
        try:
            if not isinstance(row, dict):
                raise ValueError("record is not an object")
            d = {k: v for k, v in row.items() if k not in ("key", "target", "workload")}
            rec = Record.from_dict({**d, "target": tp.value, "workload": wp.value, "source": SOURCE})
        except (ValueError, TypeError, KeyError, RecursionError) as e:
            yield ImportIssue(where(path, f"tunedb record {i}"), str(e) or type(e).__name__)
            continue
        yield rec


def _parse_cache(doc: Mapping[str, Any], path: Path, keys: list[str] | None, tp: Prepared, wp: Prepared
                 ) -> Iterator[Record | ImportIssue]:
    tune_params = doc.get("tune_params") if isinstance(doc.get("tune_params"), dict) else None
    seen: Counter = Counter()
    key_set = frozenset(keys or ())
    codec = _EntryCodec(key_set) if _FAST_ENTRIES else None
    basis_head = wp.key + "\0"
    rid_head = _rid_head(tp.key)
    for i, (key, entry) in enumerate(doc["cache"].items(), 1):
        try:
            if keys is None:
                raise ValueError("parameter names unknown (no tune_params_keys/tune_params)")
            if isinstance(entry, dict) and entry.keys() >= key_set:  # every parameter in the entry
                config = {k: entry[k] for k in keys}
            else:
                config = _decode_key(key, keys, tune_params)
            costs, status, error = entry_result(entry)
            compile_s = None
            ts = None
            if isinstance(entry, dict):
                compile_s = _seconds_or_none(entry.get("compile_time"), 1e-3)
                ts = to_utc(entry.get("timestamp"))
            fast = codec.encode(entry) if codec is not None and type(entry) is dict else None
            if fast is not None:
                # the same values and texts as the general branch below, one float formatting each
                rest, text, rest_json = fast
                meta = {"kernel_tuner": {"key": key, "entry": rest}}
                meta_json = _meta_json(rest_json, key)
            else:
                norm = fast_normalise(entry, "meta") if isinstance(entry, dict) else entry
                rest = {k: v for k, v in norm.items() if k not in key_set} if isinstance(norm, dict) else norm
                meta = {"kernel_tuner": {"key": key, "entry": rest}}
                text = json.dumps(norm, sort_keys=True)
                meta_json = None
            # stable_record_id(FORMAT, tp.key, None, seen, text=basis), its two hashes inlined
            basis = key_of_text(basis_head + key + "\0" + text)
            n = seen[basis]
            seen[basis] = n + 1
            rid = key_of_text(f'{rid_head}{basis}",{n}]')  # key_of([FORMAT, tp.key, basis, n])
            rec = make_record(tp, wp, config, costs=costs, status=status, error=error, compile_s=compile_s,
                              timestamp=ts, source=SOURCE, record_id=rid, meta=meta, meta_normalised=True,
                              meta_json=meta_json)
        except ImportCapError:
            raise
        except (ValueError, TypeError, KeyError, RecursionError) as e:
            yield ImportIssue(where(path, f"entry {i} ({key})"), str(e) or type(e).__name__)
            continue
        yield rec


# ------------------------------------------------------------------------- fast entry texts
#
# A record of a cache entry needs, besides the normalised entry (``fast_normalise(entry, "meta")``),
# two texts of it: ``json.dumps(norm, sort_keys=True)`` (the record-id basis, spaced and ASCII-only)
# and the canonical JSON of the entry without its parameters (``meta_json``, compact, UTF-8).
# Formatting the ~40 floats of an entry is most of the import's time, so _EntryCodec formats each
# value once and joins the pieces both ways.  It handles flat entries (numbers, strings, bools,
# null, lists of floats; anything else per value through the JSON encoders); an entry it cannot
# reproduce exactly (non-finite numbers, ...) returns None and takes the general path, which
# also raises the error of record.  _check_codec compares both with the general path at import.

_INT_LIMIT = 2**53  # tunedb.index.model.keys: integral floats below this become ints
_float_repr = float.__repr__
_int_repr = int.__repr__
_is_integer = float.is_integer
_SCALAR_TEXT = {True: "true", False: "false"}


# json.dumps(value, sort_keys=True) with the C encoder built once
_spaced = fast_json_encoder(sort_keys=True, ensure_ascii=True, separators=(", ", ": "))


class _ReprCache(dict):
    """float -> repr text, for files whose timings repeat (float32 event timers).  Only used for
    non-integral floats, where equal floats are the same bits (so the same text); a non-float
    key raises TypeError in ``float.__repr__`` as without the cache."""

    def __missing__(self, x: float) -> str:
        s = self[x] = _float_repr(x)
        return s


#: list floats formatted before deciding whether the cache pays off; it is dropped when more than
#: _REPR_MISSES of them were new (the AMD caches: ~0.9-1.0; NVIDIA's timer repeats: 0.2-0.8)
_REPR_PROBE = 40_000
_REPR_MISSES = 0.85


def _nested_texts(v: Any) -> tuple[Any, str, str] | None:
    """(normal form, ``json.dumps`` text, canonical JSON text) of a nested value, or None when
    it is not JSON data (the caller then takes the general path, which raises)."""
    try:
        v = normalise(v)
    except ValueError:
        return None
    return v, _spaced(v), canonical_json_normalised(v)


class _EntryCodec:
    """Normalised entry and both of its texts in one pass (see the comment above)."""

    def __init__(self, key_set: frozenset) -> None:
        self.key_set = key_set
        self.plans: dict[tuple, tuple] = {}
        self.cache = _ReprCache()
        self.reprs: Any = self.cache.__getitem__
        self.looked = 0  # list floats formatted while the cache is on probation

    def _plan(self, names: tuple) -> tuple:
        """(sorted positions, their spaced key prefixes, positions and compact prefixes of the
        non-parameter keys) of an entry with keys ``names`` (in file order)."""
        order = sorted(range(len(names)), key=names.__getitem__)
        spaced = [encode_basestring_ascii(names[i]) + ": " for i in order]
        rest = [i for i in order if names[i] not in self.key_set]
        compact = [encode_basestring(names[i]) + ":" for i in rest]
        plan = self.plans[names] = (order, spaced, rest, compact)
        return plan

    def _probe(self, n: int) -> None:
        """Keep the repr cache only when most formatted floats were repeats."""
        self.looked += n
        if self.looked >= _REPR_PROBE:
            if len(self.cache) > _REPR_MISSES * self.looked:
                self.reprs = _float_repr
                self.cache.clear()
            self.looked = -1  # decided

    def encode(self, entry: dict) -> tuple[dict, str, str] | None:
        """(entry without its parameters, normalised; ``json.dumps(normalised entry,
        sort_keys=True)``; canonical JSON of the first), or None for the general path."""
        names = tuple(entry)
        plan = self.plans.get(names) or self._plan(names)
        key_set = self.key_set
        st: list[str] = []
        ct: list[str] = []
        rest: dict = {}
        for k, v in entry.items():
            t = type(v)
            if t is int:
                s = c = _int_repr(v)
            elif t is float:
                if v.is_integer():
                    if -_INT_LIMIT < v < _INT_LIMIT:
                        v = int(v)
                        s = c = _int_repr(v)
                    else:
                        s = c = _float_repr(v)
                else:
                    s = c = _float_repr(v)
                    if "n" in s:  # nan, inf, -inf: not JSON data
                        return None
            elif t is str:
                s = encode_basestring_ascii(v)
                c = encode_basestring(v)
            elif t is list:
                try:
                    flat = bool(v) and not any(map(_is_integer, v))  # TypeError: not all floats
                except TypeError:
                    flat = False
                if flat:  # non-integral floats only: their own normal form
                    parts = list(map(self.reprs, v))
                    c = "[" + ",".join(parts) + "]"
                    if "n" in c:
                        return None
                    s = "[" + ", ".join(parts) + "]"
                    v = v.copy()
                    if self.looked >= 0:
                        self._probe(len(v))
                else:
                    got = _nested_texts(v)
                    if got is None:
                        return None
                    v, s, c = got
            elif v is None:
                s = c = "null"
            elif t is bool:
                s = c = _SCALAR_TEXT[v]
            elif t is dict:
                got = _nested_texts(v)
                if got is None:
                    return None
                v, s, c = got
            else:
                return None
            st.append(s)
            ct.append(c)
            if k not in key_set:
                rest[k] = v
        order, sp, rest_order, cp = plan
        text = "{" + ", ".join([p + st[i] for p, i in zip(sp, order)]) + "}"
        rest_json = "{" + ",".join([p + ct[i] for p, i in zip(cp, rest_order)]) + "}"
        return rest, text, rest_json


def _meta_json(rest_json: str, key: str) -> str:
    """``canon({"kernel_tuner": {"key": key, "entry": rest}})`` from ``rest_json = canon(rest)``."""
    return '{"kernel_tuner":{"entry":' + rest_json + ',"key":' + encode_basestring(key) + "}}"


def _rid_head(target_key: str) -> str:
    """The text before ``basis",n]`` in ``canonical_json([FORMAT, target_key, basis, n])`` (the
    record id of :func:`stable_record_id`; ``basis`` is hex, ``n`` an int: nothing to escape)."""
    return canonical_json_normalised([FORMAT, target_key])[:-1] + ',"'


def _check_codec() -> bool:
    """Whether _EntryCodec reproduces the general path exactly on a probe of every case."""
    probe = {"b": 1, "a": 2.5, "times": [1.5, 2.0, 3.25, -0.0, 2.0 ** 60, 1e-7], "ts": [0.1, 0.2, 0.1],
             "s": "x, y: caf\u00e9\u007f\n\"\\", "n": None, "t": True, "f": False, "big": 2.0 ** 53, "i": 8.0,
             "neg": -0.0, "nested": {"z": [1, {"y": 2.0}], "a": "\u00e9"}, "ints": [1, 2], "e": [], "x": {},
             "tiny": -1e-300, "h": 10 ** 30, "B": 4.0e16, "mixed": [1, 2.5, "q"], "\u00e9k": 3}
    key_set = frozenset({"b", "i", "\u00e9k"})
    try:
        norm = normalise(probe, "meta")
        want_rest = {k: v for k, v in norm.items() if k not in key_set}
        for reprs in (False, True):
            codec = _EntryCodec(key_set)
            if not reprs:
                codec.reprs = _float_repr
            got = codec.encode(dict(probe))
            if got is None:
                return False
            rest, text, rest_json = got
            if (list(rest.items()) != list(want_rest.items()) or text != json.dumps(norm, sort_keys=True)
                    or rest_json != canonical_json_normalised(want_rest)
                    or repr(rest) != repr(want_rest)):
                return False
        key = 'k,\u00e9"1'
        if _meta_json(rest_json, key) != canonical_json_normalised({"kernel_tuner": {"key": key, "entry": rest}}):
            return False
        basis = key_of_text(text)
        if key_of_text(_rid_head(basis) + basis + '",2]') != stable_record_id(
                FORMAT, basis, None, Counter({basis: 2}), text=text):
            return False
        return all(_EntryCodec(key_set).encode(bad) is None
                   for bad in ({"x": float("nan")}, {"x": [1.5, float("inf")]}, {"x": [float("-inf")]}))
    except Exception:  # any surprise: use the general path
        return False


_FAST_ENTRIES = _check_codec()


def _parse_t4(doc: Mapping[str, Any], path: Path, device: str | None, notes: list | None = None,
              label: str | None = None) -> Iterator[Record | ImportIssue]:
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
    tp, wp = _header(doc, path, device, keys, notes, label)
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
            compile_s = _seconds_or_none(ct, scale)
            key = ",".join(str(v) for v in config.values())
            rid = stable_record_id(FORMAT, tp.key, [wp.key, key, r], seen)
            rec = make_record(tp, wp, config, costs=costs, status=status, error=error, compile_s=compile_s,
                              timestamp=to_utc(r.get("timestamp")), source=SOURCE, record_id=rid,
                              meta={"kernel_tuner": {"key": key, "t4": r}})
        except ImportCapError:
            raise
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
    # JSON texts of the values met, for the knobs whose values the file does not list
    listed = {k for k in keys if isinstance(tune_params.get(k), list) and tune_params[k]}
    seen_vals: dict[str, set] = {k: set() for k in keys if k not in listed}
    for key, e in entries.items():
        try:
            cfg = {k: e[k] for k in keys} if isinstance(e, dict) and all(k in e for k in keys) \
                else _decode_key(key, keys, tune_params)
        except ValueError:
            continue
        for k, texts in seen_vals.items():
            texts.add(json.dumps(cfg[k], sort_keys=True))
        bad = e == "InvalidConfig" or (isinstance(e, dict) and e.get("time") == "InvalidConfig")
        if not bad:
            valid.add(",".join([str(cfg[k]) for k in keys]))  # cache_key(cfg, keys)
    knobs = []
    for k in keys:
        vals = tune_params[k] if k in listed else sorted((json.loads(v) for v in seen_vals[k]), key=_value_order)
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


def _entry_gives_back(rec: Record, key: str, entry: Any, keys: list[str]) -> bool:
    """Whether importing cache ``entry`` (at ``key``) gives back ``rec``'s config, costs, status,
    error, compile time, timestamp and meta exactly (what :func:`_parse_cache` makes of an entry)."""
    try:
        costs, status, error = entry_result(entry)
        if isinstance(entry, dict):
            compile_s = _seconds_or_none(entry.get("compile_time"), 1e-3)
            ts = to_utc(entry.get("timestamp"))
            config = {k: entry[k] for k in keys} if entry.keys() >= set(keys) else None
        else:
            compile_s, ts, config = None, None, None
    except (ValueError, TypeError, KeyError):
        return False
    same_config = config is not None and normalise(config) == normalise(dict(rec.config))
    rest = {k: v for k, v in entry.items() if k not in keys} if isinstance(entry, dict) else entry
    try:
        same_meta = normalise({"kernel_tuner": {"key": key, "entry": rest}}) == normalise(dict(rec.meta))
    except ValueError:
        return False
    return (same_config and same_meta and status == rec.status and error == rec.error and list(costs) == list(rec.costs)
            and compile_s == rec.compile_s and ts is not None and ts == rec.timestamp)


def _carried(rec: Record, key: str, in_cache: bool) -> dict:
    """``rec`` as a row of the ``tunedb.records`` section: ``Record.to_dict`` without target,
    workload and the keys derived from them, plus its cache key and whether its entry is the
    one the cache holds for that key."""
    d = {k: v for k, v in rec.to_dict().items()
         if k not in ("target", "workload", "target_name", "target_key", "workload_key", "config_key", "cost")}
    return {"key": key, "in_cache": in_cache, **d}


def cache_of(records: list[Record]) -> dict:
    """A Kernel Tuner cache dict of records that share one target and one workload, with the
    ``tunedb`` section that makes its import give them all back (module docstring)."""
    first = records[0]
    w = first.workload
    keys = w.get("params") if isinstance(w.get("params"), list) else sorted(first.config)
    values: dict[str, set] = {k: set() for k in keys}
    cache: dict[str, Any] = {}
    latest: dict[str, Record] = {}
    carried: list[dict] = []
    for rec in sorted(records, key=lambda r: (r.timestamp, r.record_id)):
        if set(rec.config) != set(keys):
            raise ExportFormatError(f"record {rec.record_id} has other knobs than the workload's params")
        for k in keys:
            values[k].add(json.dumps(rec.config[k]))
        kt = rec.meta.get("kernel_tuner") if isinstance(rec.meta.get("kernel_tuner"), dict) else {}
        key = kt.get("key") if isinstance(kt.get("key"), str) else cache_key(rec.config, keys)
        if key in latest:  # an earlier record of this config: the cache holds the latest only
            carried.append(_carried(latest[key], key, False))
        cache[key] = _entry_of(rec, keys)
        latest[key] = rec
    in_records = []
    for key, rec in latest.items():
        if not _entry_gives_back(rec, key, cache[key], keys):
            carried.append(_carried(rec, key, True))
            in_records.append(key)
    tune_params = {k: sorted((json.loads(v) for v in vs), key=_value_order) for k, vs in values.items()}
    doc: dict[str, Any] = {"device_name": first.target.get("name") or first.target_name,
                           "kernel_name": w.get("kernel") or w["family"]}
    if "problem_size" in w:
        doc["problem_size"] = w["problem_size"]
    doc.update(tune_params_keys=keys, tune_params=tune_params, objective="time", cache=cache)
    doc["tunedb"] = {"target": first.target, "workload": w, "records": carried, "in_records": in_records}
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
    if not groups:
        raise NothingToExport(f"0 of {rep.skipped} records are Kernel Tuner configs: kernel-tuner export writes "
                              "only records whose config is the workload's scalar tune parameters")
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
    return rep
