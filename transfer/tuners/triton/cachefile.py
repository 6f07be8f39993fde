"""``tunedb import triton PATH... --device SPEC``: Triton's own autotuning cache files.

Triton (3.4 and later) writes, for ``@triton.autotune(..., cache_results=True)``, one file
``<TRITON_CACHE_DIR>/<hash>/<kernel>.autotune.json`` per (kernel, tuning key, config list, Triton
build, GPU target)::

    {"key": [1024, "torch.float32"],
     "configs_timings": [[{"kwargs": {"BLOCK": 64}, "num_warps": 4, "num_ctas": 1, "num_stages": 3,
                           "maxnreg": null, "pre_hook": null, "ir_override": null},
                          [0.0123, 0.0119, 0.0131]], ...]}

Each timing is what Triton's benchmarker returned for ``quantiles=(0.5, 0.2, 0.8)``: the median,
20th and 80th percentile of the kernel's time over its repetitions, in milliseconds; a config
that failed (out of resources, a compile-time assertion, ptxas) has ``Infinity`` for all three.

Every (config, timing) becomes one Record: target from ``--device`` (the file does not say which
GPU wrote it: its hash hides it), workload :func:`~.keys.workload_of` (kernel = the file name
before ``.autotune.json``, key = the file's ``key``), config :func:`~.keys.config_dict`,
``costs`` = [the median in seconds], ``meta["triton"]`` = ``{"statistic": "median", "times_ms":
[median, p20, p80], "cache_dir": <hash folder>}``; an ``Infinity`` timing is a ``compile_error``
record (never measured again by the decorator).  A PATH may be a directory: every
``*.autotune.json`` below it, in sorted order.

A file with a top-level field other than ``key`` and ``configs_timings``, a key that is not a
list of JSON scalars, or no list of timings is reported and skipped whole; an entry whose config
has a field ``triton.Config`` does not have, or whose timing is not three numbers, is reported
and skipped; nothing is guessed."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tunedb.index.model.record import Record
from tunedb.transfer.interop.input_files import check_input_path, display_name, load_json, read_text
from tunedb.transfer.interop.outcomes import (
    ExportFormatError,
    ExportReport,
    ImportCapError,
    ImportFormatError,
    ImportIssue,
)
from tunedb.transfer.interop.record_building import Prepared, make_record, stable_record_id, to_utc
from tunedb.transfer.tuners.kernel_tuner.cachefile import device_target
from tunedb.transfer.tuners.triton.keys import config_dict, workload_of

FORMAT = "triton"
SOURCE = "imported:triton"
SUFFIX = ".autotune.json"
#: the top-level fields of a cache file as Triton writes it
FILE_FIELDS = frozenset({"key", "configs_timings"})
#: what Triton's timings are (``Autotuner._bench`` asks its benchmarker for these quantiles)
QUANTILES = (0.5, 0.2, 0.8)
FAILED_ERROR = "Triton timed it as infinite (out of resources, a compile-time assertion or ptxas failed)"
NO_DEVICE = ("a Triton cache file does not say which GPU wrote it: give --device (a device name, "
             "or a target JSON file as tunedb.transfer.tuners.triton.device_target() writes it)")


def target_of(device: str | None) -> Prepared:
    """The target of ``--device``: a JSON file holding a target object (what the decorator's
    :func:`~.identity.device_target` returns, so the imported records are its exact hits), else a
    device name (the catalog's fields added, as for Kernel Tuner caches).  ImportFormatError
    (one line) without one."""
    if device is None or not device.strip():
        raise ImportFormatError(NO_DEVICE)
    spec = device.strip()
    try:
        if spec.endswith(".json") or os.path.isfile(spec):
            check_input_path(Path(spec))
            target = load_json(read_text(Path(spec)), f"target file {spec}")
            if not isinstance(target, dict):
                raise ValueError("a target file must hold a JSON object")
            return Prepared.of(target, "target")
        return device_target(spec)
    except json.JSONDecodeError as e:
        raise ImportFormatError(f"--device {spec}: not JSON: {e.msg} at line {e.lineno}") from None
    except ImportCapError:
        raise
    except ValueError as e:
        raise ImportFormatError(f"--device {spec}: {e}") from None


def cache_files(path: Path) -> list[Path]:
    """``path`` itself (a file) or every ``*.autotune.json`` file below it (a directory), sorted;
    ImportFormatError when a directory holds none."""
    check_input_path(path, directory=None)
    if not path.is_dir():
        return [path]
    found = sorted(p for p in path.rglob(f"*{SUFFIX}") if p.is_file())
    if not found:
        raise ImportFormatError(f"{display_name(path)}: no Triton cache file (*{SUFFIX}) below this directory")
    return found


def kernel_of(path: Path) -> str:
    """The kernel's name: the file name before ``.autotune.json``."""
    name = display_name(path.name)
    return name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name


def parse(path: Path, device: str | None = None) -> Iterator[Record | ImportIssue]:
    """Records and ImportIssues of a cache file or a directory of them (module docstring)."""
    tp = target_of(device)
    for f in cache_files(Path(path)):
        yield from parse_file(f, tp)


def _file_problem(doc: Any) -> str | None:
    """Why ``doc`` is not a cache file this importer understands, or None."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    unknown = sorted(set(doc) - FILE_FIELDS)
    if unknown:
        return f"unknown field(s) {', '.join(map(repr, unknown))}: not a Triton autotune cache this tunedb reads"
    if not isinstance(doc.get("key"), list):
        return "no 'key' list"
    if any(not (v is None or isinstance(v, (bool, int, float, str))) for v in doc["key"]):
        return "its 'key' holds a value that is not a number, text or boolean"
    if not isinstance(doc.get("configs_timings"), list):
        return "no 'configs_timings' list"
    return None


def parse_file(path: Path, tp: Prepared) -> Iterator[Record | ImportIssue]:
    """Records of one cache file on target ``tp``; one ImportIssue (and no record) for a file
    this importer does not understand."""
    where = display_name(path)
    try:
        doc = load_json(read_text(path), where)
    except json.JSONDecodeError as e:
        yield ImportIssue(where, f"not JSON: {e.msg} at line {e.lineno}", "malformed")
        return
    why = _file_problem(doc)
    if why is not None:
        yield ImportIssue(where, why, "unsupported")
        return
    try:
        wp = Prepared.of(workload_of(kernel_of(path), doc["key"]), "workload")
    except ValueError as e:
        yield ImportIssue(where, f"unusable key: {e}", "malformed")
        return
    stamp = to_utc(path.stat().st_mtime)
    seen: Counter = Counter()
    for n, entry in enumerate(doc["configs_timings"]):
        yield _entry(entry, tp, wp, f"{where}:{n}", seen, path.parent.name, stamp)


def _times(value: Any) -> list[float]:
    """The three timings (ms) of an entry; ValueError unless three numbers (Infinity allowed)."""
    if not isinstance(value, list) or len(value) != len(QUANTILES) or \
            any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value):
        raise ValueError(f"timing must be {len(QUANTILES)} numbers (milliseconds), got {json.dumps(value)[:80]}")
    if any(math.isnan(v) or v < 0 for v in value):
        raise ValueError("timing holds NaN or a negative number")
    return [float(v) for v in value]


def _entry(entry: Any, tp: Prepared, wp: Prepared, where: str, seen: Counter, cache_dir: str,
           stamp: Any) -> Record | ImportIssue:
    """One (config, timing) pair as a Record, or the ImportIssue saying why it is skipped."""
    try:
        if not isinstance(entry, list) or len(entry) != 2:
            raise ValueError("an entry must be a [config, timing] pair")
        config = config_dict(entry[0])
        times = _times(entry[1])
        failed = any(math.isinf(v) for v in times)
        meta = {"triton": {"statistic": "median", "times_ms": [None if math.isinf(v) else v for v in times],
                           "cache_dir": display_name(cache_dir)}}
        rid = stable_record_id(FORMAT, tp.key, [wp.text, config, [str(v) for v in times]], seen)
        return make_record(tp, wp, config, costs=[] if failed else [times[0] * 1e-3],
                           status="compile_error" if failed else "ok", error=FAILED_ERROR if failed else "",
                           timestamp=stamp, source=SOURCE, meta=meta, record_id=rid)
    except ImportCapError:
        raise
    except ValueError as e:
        return ImportIssue(where, str(e), "malformed")


def export(records: Iterable[Record], out: Path) -> ExportReport:
    """Not possible: a Triton cache file's name hashes Triton's build, the GPU backend and the
    kernel's source, which tunedb's records do not hold.  ExportFormatError (one line)."""
    raise ExportFormatError("tunedb cannot write Triton cache files (their names hash the Triton build and the "
                            "kernel source); the decorator tunedb.transfer.tuners.triton.autotune reads the DB directly")


__all__ = ["FORMAT", "SOURCE", "cache_files", "export", "kernel_of", "parse", "parse_file", "target_of"]
