"""tunedb's own records as JSON lines or Parquet.

* ``jsonl``: one ``Record.to_dict()`` object per line.  Import rebuilds each with
  ``Record.from_dict`` semantics (keys recomputed, never trusted) and validates it; a line
  without a record_id gets a deterministic one from its content, so re-imports never duplicate.
* ``parquet``: export writes a hive-partitioned directory like the store's ``records/``
  (``<OUT>/<PARTITION>=<slug>/part-<n>.parquet`` with the columns of ``tunedb.index.model.schema.RECORD_SCHEMA``),
  readable by ``pyarrow.dataset.dataset(OUT, partitioning="hive")``.  Import accepts such a
  directory (or a store's ``records/`` directory, or one ``.parquet`` file): every ``*.parquet``
  file under it not starting with ``_`` or ``.``, each read on its own (never through the hive
  partition values, which could shadow a column of the same name).

Both keep provenance: ``host`` and ``origin`` are exported and imported as they are; a file
without them (an export of tunedb 0.1.0) gives ``host=""`` (unknown), and an imported record
without an origin gets the imported file's name (``tunedb.transfer.interop.Format.parse``).
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tunedb.index.model.keys import rid_hash
from tunedb.index.model.record import Record, text_problem
from tunedb.index.model.record import target_slug as partition_slug
from tunedb.index.model.schema import RECORD_SCHEMA
from tunedb.transfer.interop.input_files import (
    ImportBudget,
    check_input_path,
    current_budget,
    display_name,
    load_json,
    open_regular,
    parse_json_lines,
)
from tunedb.transfer.interop.outcomes import ExportReport, ImportCapError, ImportFormatError, ImportIssue
from tunedb.transfer.interop.record_building import Prepared, make_record, stable_record_id

PARTITION = "target_slug"  # hive partition key, as in the store's records/ directory
REQUIRED_COLUMNS = ("target", "workload", "config", "status")
_HEX32 = re.compile(r"^[0-9a-f]{32}$")


def target_slug(rec: Record) -> str:
    """Partition value of a record, the same as the store's (``tunedb.index.model.record.target_slug``)."""
    return partition_slug(rec.target_name, rec.target_key)


# ------------------------------------------------------------------------------------ record build

class _Builder:
    """Builds Records from loosely typed dicts, sharing normalised targets and workloads."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.targets: dict[str, Prepared] = {}
        self.workloads: dict[str, Prepared] = {}
        self.seen: Counter = Counter()

    def _prep(self, cache: dict[str, Prepared], value: Any, what: str) -> Prepared:
        if isinstance(value, str):
            text = value
            value = load_json(value, what)
        else:
            text = json.dumps(value, sort_keys=True)
        p = cache.get(text)
        if p is None:
            p = cache[text] = Prepared.of(value, what)
        return p

    def build(self, d: Mapping[str, Any], original: Any) -> Record:
        for k in REQUIRED_COLUMNS[:3]:
            if k not in d or d[k] is None:
                raise ValueError(f"field '{k}' is missing")
        tp = self._prep(self.targets, d["target"], "target")
        wp = self._prep(self.workloads, d["workload"], "workload")
        config = load_json(d["config"], "config") if isinstance(d["config"], str) else d["config"]
        meta = d.get("meta") or {}
        if isinstance(meta, str):
            meta = load_json(meta, "meta")
        if not isinstance(meta, dict):
            raise ValueError("field 'meta' must be a JSON object")
        ts = d.get("timestamp")
        if isinstance(ts, str):
            ts = _dt.datetime.fromisoformat(ts)
        elif ts is not None and not isinstance(ts, _dt.datetime):
            raise ValueError("field 'timestamp' must be an ISO 8601 string")
        costs = d.get("costs") or ()
        if not isinstance(costs, (list, tuple)):
            raise ValueError("field 'costs' must be a list of numbers")
        for k in ("error", "source", "session", "status", "host", "origin", "target_name"):
            if d.get(k) is not None and not isinstance(d.get(k), str):
                raise ValueError(f"field '{k}' must be a string")
            why = text_problem(d[k]) if isinstance(d.get(k), str) else None
            if why is not None:
                raise ValueError(f"field '{k}' {why}")
        rid = d.get("record_id") or ""
        if not rid:
            rid = stable_record_id(self.fmt, tp.key, original, self.seen)
        elif not isinstance(rid, str) or not _HEX32.match(rid):
            raise ValueError(f"field 'record_id' {rid!r} is not 32 lowercase hex characters")
        name = d.get("target_name")
        if name is not None and not isinstance(name, str):
            raise ValueError("field 'target_name' must be a string")
        rec = make_record(tp, wp, config, costs=costs, status=d.get("status") or "ok", error=d.get("error") or "",
                          compile_s=d.get("compile_s"), wall_s=d.get("wall_s"), timestamp=ts,
                          source=d.get("source") or "measured", session=d.get("session") or "", meta=meta,
                          record_id=rid, target_name=name or "", host=d.get("host") or "",
                          origin=d.get("origin") or "")
        return rec


# ------------------------------------------------------------------------------------------ jsonl

def recognise_jsonl_line(text: str, value: Any, err: str | None) -> tuple[bool, tuple[str, str] | None]:
    """Whether a line is a JSON object (a record, or an invalid one), and why it is skipped
    unparsed: it is not JSON, or not an object."""
    if err is not None:
        return False, ("malformed", err)
    if not isinstance(value, dict):
        return False, ("malformed", "line is not a JSON object")
    return True, None


def parse_jsonl(path: Path) -> Iterator[Record | ImportIssue]:
    """One record per non-blank line of ``path`` (``Record.to_dict`` objects; a line starting
    with ``#`` is not a comment here: it is skipped as not JSON)."""
    b = _Builder("jsonl")
    yield from parse_json_lines(path, lambda _no, d: b.build(d, d), recognise=recognise_jsonl_line,
                                not_format=f"{path} is not a tunedb JSON-lines file (no line is a JSON object)",
                                comments=False)


def export_jsonl(records: Iterable[Record], out: Path) -> ExportReport:
    rep = ExportReport()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in sorted(records, key=lambda r: (r.timestamp, r.record_id)):
            f.write(json.dumps(r.to_dict(), ensure_ascii=False) + "\n")
            rep.exported += 1
    tmp.replace(out)
    rep.files.append(out)
    return rep


# ---------------------------------------------------------------------------------------- parquet

def _parquet_files(path: Path) -> list[Path]:
    """The Parquet files to import at ``path`` (see the module docstring); ImportFormatError (one
    line) when ``path`` is missing or a FIFO, socket or device (``check_input_path``).  Under a
    directory only regular files are taken (a FIFO named ``x.parquet`` is not)."""
    check_input_path(path, directory=None)
    if path.is_file():
        return [path]
    if (path / "records").is_dir() and (path / "tunedb.json").is_file():  # a whole tunedb database
        path = path / "records"
    return sorted(p for p in path.rglob("*.parquet")
                  if p.is_file() and not any(part.startswith(("_", ".")) for part in p.relative_to(path).parts))


_ROW_COLUMNS = ("record_id", "target_name", "target", "workload", "config", "costs", "status", "error",
                "compile_s", "wall_s", "timestamp", "source", "session", "meta", "host", "origin")


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def records_from_table(table: pa.Table) -> list[Record]:
    """Records of an Arrow table with the store's columns (e.g. ``db.records()``); ValueError
    (one line) for text that is not UTF-8 or a record ``Record.validate`` refuses."""
    try:
        table.validate(full=True)
    except pa.ArrowInvalid as e:
        raise ValueError(f"table is malformed: {_first_line(e)}") from None
    b = _Builder("parquet")
    cols = [c for c in _ROW_COLUMNS if c in table.column_names]
    return [b.build(row, row) for row in table.select(cols).to_pylist()]


def parse_parquet(path: Path) -> Iterator[Record | ImportIssue]:
    """One record per row of every Parquet file at ``path``."""
    files = _parquet_files(path)
    if not files:
        raise ImportFormatError(f"{path} holds no .parquet files")
    b = _Builder("parquet")
    budget = current_budget()
    rids: set[str] = set()  # a store's compacted files repeat records of the files they supersede
    for f in files:
        try:
            with open_regular(f) as fh:
                # ParquetFile, not read_table: pyarrow's threaded read over a Python file object
                # can abort the process at interpreter exit (seen 5 in 100 runs, pyarrow 26)
                pf = pq.ParquetFile(fh)
                _check_rows(f, pf.metadata.num_rows, budget)
                table = pf.read()
            table.validate(full=True)  # text that is not UTF-8 would fail every later read
        except (OSError, pa.ArrowException) as e:
            raise ImportFormatError(f"cannot read Parquet file {display_name(f)}: {_first_line(e)}") from None
        missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
        if missing:
            raise ImportFormatError(f"{f} is not a tunedb records file: column(s) {', '.join(missing)} missing")
        cols = [c for c in _ROW_COLUMNS if c in table.column_names]
        for i, row in enumerate(table.select(cols).to_pylist(), 1):
            rid = row.get("record_id")
            if rid and rid in rids:
                continue
            try:
                rec = b.build(row, row)
                rids.add(rec.record_id)
            except ImportCapError:
                raise
            except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
                yield ImportIssue(f"{display_name(f.name)}:row {i}", str(e) or type(e).__name__)
                continue
            yield rec


def _check_rows(path: Path, rows: int, budget: ImportBudget) -> None:
    """ImportCapError (one line) when a Parquet file's ``rows`` (from its footer, before any row
    is read) would take the import past its records cap (``budget.records``)."""
    if budget.records_used + rows > budget.records:
        raise ImportCapError(f"{display_name(path)}: {rows:,} rows would take the import past {budget.records:,} "
                             "records: over the import cap; import it in parts")


def to_table(records: list[Record]) -> pa.Table:
    """Records -> Arrow table with RECORD_SCHEMA (``target_slug`` = partition value)."""
    now = _dt.datetime.now(_dt.timezone.utc)
    names = set(RECORD_SCHEMA.names)
    rows = []
    for r in records:
        row = r.to_row()
        row["target_slug"] = target_slug(r)
        if "rid_hash" in names:
            row["rid_hash"] = rid_hash(r.record_id)
        if "committed" in names:
            row["committed"] = now
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=RECORD_SCHEMA)


def export_parquet(records: Iterable[Record], out: Path) -> ExportReport:
    """Hive-partitioned Parquet directory at ``out`` (one file per target)."""
    rep = ExportReport()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        from tunedb.transfer.interop.outcomes import ExportFormatError

        raise ExportFormatError(f"{out} exists and is not an empty directory")
    by_slug: dict[str, list[Record]] = {}
    for r in records:
        by_slug.setdefault(target_slug(r), []).append(r)
    out.mkdir(parents=True, exist_ok=True)
    for slug, recs in sorted(by_slug.items()):
        d = out / f"{PARTITION}={slug}"
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / "_part-0.parquet.tmp"
        pq.write_table(to_table(recs), tmp)
        tmp.replace(d / "part-0.parquet")
        rep.files.append(d / "part-0.parquet")
        rep.exported += len(recs)
    return rep


# ----------------------------------------------------------------------------------- dispatchers

def parse(path: Path, device: str | None = None, fmt: str = "jsonl") -> Iterator[Record | ImportIssue]:
    """Parse ``path`` as ``fmt`` (``jsonl`` or ``parquet``); ``device`` is not used."""
    return parse_parquet(path) if fmt == "parquet" else parse_jsonl(path)


def export(records: Iterable[Record], out: Path, fmt: str = "jsonl") -> ExportReport:
    return export_parquet(records, out) if fmt == "parquet" else export_jsonl(records, out)
