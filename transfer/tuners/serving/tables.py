"""vLLM's and SGLang's fused-MoE config tables: import (``tunedb import vllm-moe DIR``) and export
(``tunedb export --format vllm-moe OUT``).

A table (``E=..,N=..,device_name=..[,dtype=..][,block_shape=[n,k]].json``, see ``names``) maps a
batch size M (a decimal string) to the Triton config the fused-MoE kernel uses for it
(``BLOCK_SIZE_M/N/K``, ``GROUP_SIZE_M``, ``num_warps``, ``num_stages``, sometimes more).  A newer
table may also hold ``"triton_version": "X.Y.Z"``; SGLang keeps its tables in ``triton_X_Y_Z/``
folders, whose name gives the Triton version.

Import, one table entry -> one Record (source ``imported:vllm-moe``):

* target ``{"kind": "gpu", "name": <torch device name, '_' back to ' '>, "vendor": ...}`` (vendor
  only when the name's first word says it; ``--device`` replaces the name);
* workload ``{"family": "fused_moe", "kernel": "fused_moe[_<dtype>]", "E", "N", "M", "dtype",
  "block_shape", "triton_version"}`` (the last three only when the table has them);
* config: the table's dict for that M, as it stands;
* best-only: a table holds the winning config per M and no timing.  Like a TopHub line (one
  best config per workload, status ``ok``), each entry is an ``ok`` record; as ``ok`` needs a
  cost, it carries one placeholder cost of :data:`PLACEHOLDER_COST_S` (1.0 s, the same for every
  entry, never a time) and ``meta["vllm_moe"]["best_only"] = True``.  With one record per
  (target, workload) its statistic (mean = median of one cost) only ranks it first there; the
  retrieval (``predict_best``) scores a config by how many near entries chose it.
* ``meta["vllm_moe"]`` also keeps what the export needs to write the same bytes back: the file's
  path below DIR, the M key, the config's key order, the file's JSON layout (indent, final
  newline, Windows line ends; None when it is neither ``json.dumps`` indent 2 nor 4) and the
  Triton version.

A file or folder name the importer does not understand, a file that is not a JSON object, a key
that is not a batch size or ``triton_version`` and a value that is not a flat config are each
reported (one ImportIssue, one line in the summary) and skipped, never guessed.

Export: one table per (device, path) of the records' fused-MoE entries, at the imported path
(``[triton_X_Y_Z/]<name>``; a path that is not a table name is rebuilt from the workload, so
nothing is written outside OUT), keys M as strings sorted numerically (``triton_version`` first
when the table had it), the best record per M, in the imported layout (default: indent 4 and a
final newline, as vLLM's tuning script writes them).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunedb.index.model.estimate import record_value
from tunedb.index.model.record import Record
from tunedb.transfer.interop.input_files import check_input_path, display_name, load_json, read_text
from tunedb.transfer.interop.outcomes import ExportReport, ImportFormatError, ImportIssue, NothingToExport
from tunedb.transfer.interop.record_building import Prepared, make_record, stable_record_id
from tunedb.transfer.tuners.serving.names import (
    FAMILY,
    Shape,
    TableName,
    gpu_target,
    parse_name,
    shape_of_workload,
    table_name,
)

FORMAT = "vllm-moe"
SOURCE = "imported:vllm-moe"
META = "vllm_moe"
#: the one cost every imported entry carries (seconds): a placeholder that makes a best-only
#: entry an ``ok`` record, never a measured time
PLACEHOLDER_COST_S = 1.0
#: the key order of a config whose imported order is unknown (vLLM's tuning script's order)
CONFIG_ORDER = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
_TRITON_DIR = re.compile(r"^triton_([0-9]{1,3})_([0-9]{1,3})_([0-9]{1,3})$")
_M_KEY = re.compile(r"^[1-9][0-9]{0,8}$")
_VERSION = re.compile(r"^[0-9]{1,3}(\.[0-9]{1,3}){1,3}([A-Za-z0-9.+-]{0,20})$")
_LAYOUTS = ({"indent": 4, "newline": True}, {"indent": 4, "newline": False}, {"indent": 2, "newline": True},
            {"indent": 2, "newline": False})


# --------------------------------------------------------------------------------------- import

def parse(path: Path, device: str | None = None) -> Iterator[Record | ImportIssue]:
    """Yield one Record per table entry of ``path`` (a table file, or a folder of tables and of
    SGLang ``triton_X_Y_Z/`` folders of tables) and one ImportIssue per skipped file, folder or
    key.  ``device`` replaces every table's device name.  ImportFormatError when ``path`` cannot
    be read at all."""
    check_input_path(path, directory=None)
    if not path.is_dir():
        yield from _parse_file(path, path.name, "", device)
        return
    for entry, rel, version in _walk(path):
        if isinstance(entry, ImportIssue):
            yield entry
        else:
            yield from _parse_file(entry, rel, version, device)


def _walk(root: Path) -> Iterator[tuple[Path | ImportIssue, str, str]]:
    """(file, path below root, Triton version from its folder) of each file of ``root`` and of its
    ``triton_X_Y_Z`` folders, sorted by name; an ImportIssue for any other folder."""
    for p in _sorted_entries(root):
        name = display_name(p.name)
        if not p.is_dir():
            yield p, name, ""
            continue
        m = _TRITON_DIR.match(name)
        if m is None:
            yield ImportIssue(f"{name}/", "not a triton_X_Y_Z folder: skipped", "unsupported"), name, ""
            continue
        for q in _sorted_entries(p):
            rel = f"{name}/{display_name(q.name)}"
            if q.is_dir():
                yield ImportIssue(f"{rel}/", "a folder inside a triton_X_Y_Z folder: skipped", "unsupported"), rel, ""
            else:
                yield q, rel, ".".join(m.groups())


def _sorted_entries(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir(), key=lambda p: p.name)
    except OSError as e:
        raise ImportFormatError(f"cannot read {display_name(folder)}: {e.strerror or e}") from None


def _parse_file(path: Path, rel: str, folder_version: str, device: str | None) -> Iterator[Record | ImportIssue]:
    """The records of one table file (see the module docstring), or the issues that skip it."""
    try:
        name = parse_name(display_name(path.name))
    except ValueError as e:
        yield ImportIssue(rel, f"file name not understood: {e}", "unsupported")
        return
    try:
        check_input_path(path)
        text = read_text(path)
        doc = load_json(text, rel)
    except json.JSONDecodeError as e:
        yield ImportIssue(rel, f"not JSON: {e.msg} (line {e.lineno})")
        return
    except ImportFormatError as e:
        if type(e) is not ImportFormatError:  # a cap: the whole import stops
            raise
        yield ImportIssue(rel, str(e))
        return
    if not isinstance(doc, dict):
        yield ImportIssue(rel, "not a JSON object of batch sizes")
        return
    yield from _entries(doc, text, rel, name, folder_version, device)


def _entries(doc: dict, text: str, rel: str, name: TableName, folder_version: str,
             device: str | None) -> Iterator[Record | ImportIssue]:
    version = folder_version
    file_version = doc.get("triton_version")
    if "triton_version" in doc:
        if not isinstance(file_version, str) or not _VERSION.match(file_version):
            yield ImportIssue(f"{rel}:triton_version", f"not a version string: {file_version!r}")
        else:
            version = version or file_version
    layout = _layout_of(doc, text)
    tp = Prepared.of(gpu_target(device or name.device), "target")
    workloads: dict[int, Prepared] = {}
    seen: Counter = Counter()
    m_keys = [k for k in doc if k != "triton_version"]
    for index, key in enumerate(m_keys):
        where = f"{rel}:{key}"
        if not _M_KEY.match(key):
            yield ImportIssue(where, f"key {key[:40]!r} is not a batch size (a positive integer) or triton_version",
                              "unsupported")
            continue
        try:
            config = _config_of(doc[key])
            m = int(key)
            wp = workloads.get(m)
            if wp is None:
                w = name.shape.workload(m)
                if version:
                    w["triton_version"] = version
                wp = workloads[m] = Prepared.of(w, "workload")
            meta: dict[str, Any] = {"file": rel, "m": key, "index": index, "order": list(doc[key]),
                                    "layout": layout, "best_only": True}
            if version:
                meta["triton_version"] = version
            if isinstance(file_version, str):
                meta["version_key"] = file_version
            rid = stable_record_id(FORMAT, tp.key, {"file": rel, "m": key, "config": doc[key]}, seen)
            yield make_record(tp, wp, config, costs=(PLACEHOLDER_COST_S,), status="ok", source=SOURCE,
                              record_id=rid, meta={META: meta}, origin=rel)
        except ValueError as e:
            yield ImportIssue(where, str(e) or type(e).__name__)


def _config_of(value: Any) -> dict:
    """A table entry's config: a non-empty object of knob name -> int (or short text, e.g. XPU's
    ``grf_mode``); ValueError (one line) otherwise."""
    if not isinstance(value, dict) or not value:
        raise ValueError("entry is not a non-empty config object")
    for k, v in value.items():
        ok = (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, str) and len(v) <= 64)
        if not ok:
            raise ValueError(f"knob {k[:40]!r} is {str(v)[:40]!r}, not an integer or a short text")
    return dict(value)


def _layout_of(doc: dict, text: str) -> dict | None:
    """The ``json.dumps`` layout that writes ``doc`` as ``text`` exactly, or None."""
    crlf = "\r\n" in text
    plain = text.replace("\r\n", "\n") if crlf else text
    for lay in _LAYOUTS:
        if _dump(doc, lay) == plain:
            return dict(lay, crlf=True) if crlf else dict(lay)
    return None


def _dump(doc: dict, layout: dict | None) -> str:
    """``doc`` as ``json.dumps`` writes it with ``layout``'s indent, final newline and line ends
    (``crlf``: Windows line ends)."""
    lay = layout or _LAYOUTS[0]
    text = json.dumps(doc, indent=lay["indent"]) + ("\n" if lay["newline"] else "")
    return text.replace("\n", "\r\n") if lay.get("crlf") else text


# --------------------------------------------------------------------------------------- export

@dataclass
class Table:
    """One table to write: its path below the output folder, the device and shape, and its
    entries M -> (config, record; None for a predicted entry)."""

    path: str
    device: str
    shape: Shape
    entries: dict[int, tuple[dict, Record | None]]

    def document(self) -> dict:
        """The table's JSON object: ``triton_version`` first when the imported table had it,
        then the batch sizes as strings, sorted numerically, each config in its imported key
        order (else :data:`CONFIG_ORDER`, then the other knobs by name)."""
        doc: dict[str, Any] = {}
        for _, rec in self.entries.values():
            v = _meta(rec).get("version_key")
            if isinstance(v, str):
                doc["triton_version"] = v
                break
        for m in sorted(self.entries):
            cfg, rec = self.entries[m]
            doc[str(m)] = ordered_config(cfg, _meta(rec).get("order"))
        return doc

    def text(self) -> str:
        """The file's text, in the layout of the imported table (indent 4 and a final newline
        when unknown)."""
        layout = None
        for _, rec in self.entries.values():
            lay = _meta(rec).get("layout")
            if isinstance(lay, dict) and {k: v for k, v in lay.items() if k != "crlf"} in _LAYOUTS:
                layout = lay
                break
        return _dump(self.document(), layout)


def ordered_config(cfg: dict, order: Any = None) -> dict:
    """``cfg`` with its keys in ``order`` when that lists exactly its keys, else in
    :data:`CONFIG_ORDER` followed by the other keys by name."""
    if isinstance(order, list) and sorted(map(str, order)) == sorted(cfg):
        return {k: cfg[k] for k in order}
    head = [k for k in CONFIG_ORDER if k in cfg]
    return {k: cfg[k] for k in head + sorted(k for k in cfg if k not in CONFIG_ORDER)}


def _meta(rec: Record | None) -> dict:
    m = rec.meta.get(META) if rec is not None else None
    return m if isinstance(m, dict) else {}


def table_path(rec: Record, device: str, shape: Shape) -> str:
    """Where a record's table goes below the output folder: its imported path when that is a
    table name for the same device and shape (in a ``triton_X_Y_Z`` folder or not), else the
    name vLLM builds (``names.table_name``)."""
    rel = _meta(rec).get("file")
    if isinstance(rel, str):
        parts = rel.split("/")
        folder_ok = len(parts) == 1 or (len(parts) == 2 and _TRITON_DIR.match(parts[0]))
        try:
            parsed = parse_name(parts[-1])
        except ValueError:
            parsed = None
        if folder_ok and parsed is not None and parsed.shape == shape and parsed.device == device:
            return rel
    return table_name(device, shape)


def tables_of(records: Iterable[Record]) -> tuple[list[Table], int]:
    """The tables of ``records``' fused-MoE ``ok`` entries (the best record per M: the lowest
    value, then the latest), and how many records are not such entries."""
    groups: dict[tuple[str, str], Table] = {}
    best: dict[tuple[str, str, int], tuple[float, float]] = {}
    other = 0
    for rec in records:
        sm = shape_of_workload(rec.workload)
        if sm is None or rec.status != "ok" or not isinstance(rec.target.get("name"), str):
            other += 1
            continue
        shape, m = sm
        device = rec.target["name"]
        path = table_path(rec, device, shape)
        table = groups.setdefault((device, path), Table(path, device, shape, {}))
        value = record_value(rec)
        rank = (value if value is not None else float("inf"), -rec.timestamp.timestamp())
        if (device, path, m) not in best or rank < best[(device, path, m)]:
            best[(device, path, m)] = rank
            table.entries[m] = (dict(rec.config), rec)
    return [groups[k] for k in sorted(groups)], other


def write_tables(tables: list[Table], out: Path, extra: dict[str, str] | None = None) -> list[Path]:
    """Write each table (and each ``extra`` path -> text) below the folder ``out``, each file
    through a temporary name; returns the files written.  OSError when ``out`` cannot be made."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{out} is a file, not a folder")
    texts = {t.path: t.text() for t in tables}
    texts.update(extra or {})
    written = []
    for rel, text in texts.items():
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp")
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, dest)
        written.append(dest)
    return written


def export(records: Iterable[Record], out: Path) -> ExportReport:
    """Write every fused-MoE table of ``records`` below the folder ``out`` (see the module
    docstring).  NothingToExport (nothing written) when none of them is a fused-MoE entry."""
    tables, other = tables_of(records)
    rep = ExportReport(skipped=other)
    if other:
        rep.reasons["not a fused-MoE table entry"] += other
    if not tables:
        raise NothingToExport(f"0 of {other} records are fused-MoE table entries (workload family {FAMILY!r}): "
                              "vllm-moe export writes only those")
    rep.files = write_tables(tables, out)
    rep.exported = sum(len(t.entries) for t in tables)
    return rep


__all__ = ["CONFIG_ORDER", "FORMAT", "PLACEHOLDER_COST_S", "SOURCE", "Table", "export", "ordered_config", "parse",
           "table_path", "tables_of", "write_tables"]
