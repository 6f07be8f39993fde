"""The Delta Lake transaction log of ``records/``: what readers outside tunedb read.

``DB/records/`` is a Delta Lake table (protocol reader 1, writer 2; no partition columns: each
file keeps its ``target_slug`` column and lives in its target's directory).  Its log,
``records/_delta_log/<version>.json``, lists the live part files.  Any Delta reader --
``deltalake`` (pyarrow datasets), Polars' ``read_delta``/``scan_delta``, DuckDB's
``delta_scan`` (or DuckDB over the ``deltalake`` dataset), Spark -- reads exactly the files of
one log version, so it never sees a commit's temp files, a rewrite's output beside its inputs,
or rows a ``forget`` removed.

Rules every writer follows (the log is written only through ``commit`` and ``reconcile``):

1. A data file is added to the log after it is published (renamed into place, fsync'ed).
2. A rewrite (compact, dedup, forget, upgrade) adds its output and removes its inputs in ONE
   log version; the inputs are deleted from disk only after that version is durable.
3. A file the log has removed is never added again (a re-fold of a journal whose file was
   compacted away would otherwise count its rows twice).
4. A version is created with put-if-absent (``link(2)`` of a fsync'ed temp file, then a
   directory fsync): two writers never both create version N; the loser re-reads the log,
   re-applies rules 1-3 against what it finds and tries N+1.  No lock is taken.

tunedb's own reads do not use the log: they scan the directory (journals included) and ignore
superseded files (``tunedb.index.parquet.parts``).  The two views hold the same rows; the log lags
only for a writer killed between publishing a file and logging it (its commit never returned),
and ``reconcile`` (every writable open and refresh) catches it up: it adds live files the log
lacks and removes files that are superseded or gone.  The log is derived from the files and can
be rebuilt: delete ``_delta_log`` and open the DB writable.

Units: sizes in bytes; Delta's times in integer milliseconds since the epoch.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tunedb.index.parquet.fsutil import atomic_write_bytes, fsync_dir, remove_dead_temp, temp_name, write_all
from tunedb.index.schema import RECORD_SCHEMA
from tunedb.index.version import TUNEDB_VERSION

LOG_DIR = "_delta_log"
LAST_CHECKPOINT = "_last_checkpoint"
#: attempts at creating a version before a commit gives up (each lost race re-reads the log)
MAX_ATTEMPTS = 200
#: every this many versions the writer of the version also writes a checkpoint (the state as one
#: Parquet file), so that readers do not replay every JSON file of a long-lived DB
CHECKPOINT_INTERVAL = 100


def _version_name(v: int) -> str:
    return f"{v:020d}.json"


@dataclass
class LogState:
    """A replay of the log up to ``version`` (-1: no log yet): live files (relative path ->
    size) and every path ever removed."""

    version: int = -1
    live: dict[str, int] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)
    meta: dict = field(default_factory=dict)  # the latest metaData action


_STATES: dict[str, LogState] = {}
_LOCK = threading.Lock()


def _delta_type(t: pa.DataType) -> object:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_int64(t):
        return "long"
    if pa.types.is_int32(t):
        return "integer"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz else "timestamp_ntz"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {"type": "array", "elementType": _delta_type(t.value_type), "containsNull": True}
    raise TypeError(f"no Delta type for {t}")


def schema_string(schema: pa.Schema = RECORD_SCHEMA) -> str:
    """The Delta ``schemaString`` of the record schema (every field nullable)."""
    return json.dumps({"type": "struct", "fields": [
        {"name": f.name, "type": _delta_type(f.type), "nullable": True, "metadata": {}} for f in schema]})


def log_dir(records_dir: Path) -> Path:
    return records_dir / LOG_DIR


def relative(records_dir: Path, path: Path | str) -> str:
    """A data file's path in the log: relative to ``records/``, '/'-separated."""
    text, root = str(path), str(records_dir)
    if text.startswith(root + os.sep):  # (the common case, without relpath's normalising)
        return text[len(root) + 1:].replace(os.sep, "/")
    return Path(os.path.relpath(path, records_dir)).as_posix()


def _apply(st: LogState, text: str) -> None:
    for line in text.splitlines():
        if not line.strip():
            continue
        a = json.loads(line)
        if "metaData" in a:
            st.meta = a["metaData"]
        elif "add" in a:
            p = a["add"]["path"]
            st.live[p] = int(a["add"].get("size", 0))
        elif "remove" in a:
            p = a["remove"]["path"]
            st.live.pop(p, None)
            st.removed.add(p)


def read_state(records_dir: Path) -> LogState:
    """The log replayed to its latest version (incrementally: this process remembers where it
    stopped; a new process starts at the last checkpoint).  A copy: callers may keep it."""
    key = str(records_dir.resolve())
    ld = log_dir(records_dir)
    with _LOCK:
        st = _STATES.get(key)
        if st is None or not (ld / _version_name(max(st.version, 0))).exists():
            st = _from_checkpoint(ld)  # new, or the log was deleted and rebuilt meanwhile
        while True:
            try:
                text = (ld / _version_name(st.version + 1)).read_text()
            except FileNotFoundError:
                break
            _apply(st, text)
            st.version += 1
        _STATES[key] = st
        return LogState(st.version, dict(st.live), set(st.removed), dict(st.meta))


_MAP = pa.map_(pa.string(), pa.string())
_CHECKPOINT_SCHEMA = pa.schema([
    ("protocol", pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])),
    ("metaData", pa.struct([("id", pa.string()), ("name", pa.string()), ("description", pa.string()),
                            ("format", pa.struct([("provider", pa.string()), ("options", _MAP)])),
                            ("schemaString", pa.string()), ("partitionColumns", pa.list_(pa.string())),
                            ("configuration", _MAP), ("createdTime", pa.int64())])),
    ("add", pa.struct([("path", pa.string()), ("partitionValues", _MAP), ("size", pa.int64()),
                       ("modificationTime", pa.int64()), ("dataChange", pa.bool_())])),
    ("remove", pa.struct([("path", pa.string()), ("deletionTimestamp", pa.int64()), ("dataChange", pa.bool_()),
                          ("extendedFileMetadata", pa.bool_()), ("partitionValues", _MAP), ("size", pa.int64())])),
])


def _checkpoint_name(v: int) -> str:
    return f"{v:020d}.checkpoint.parquet"


def _from_checkpoint(ld: Path) -> LogState:
    """The state at the last checkpoint (``_last_checkpoint``), or the empty state before
    version 0 when there is none (or it cannot be read: then the JSON files are replayed)."""
    try:
        v = int(json.loads((ld / LAST_CHECKPOINT).read_text())["version"])
        t = pq.read_table(ld / _checkpoint_name(v)).to_pylist()
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return LogState()
    st = LogState(version=v)
    for row in t:
        if row.get("metaData"):
            st.meta = dict(row["metaData"])
        elif row.get("add"):
            st.live[row["add"]["path"]] = int(row["add"]["size"])
        elif row.get("remove"):
            st.removed.add(row["remove"]["path"])
    return st


def write_checkpoint(records_dir: Path, st: LogState) -> None:
    """Write the checkpoint of ``st`` (a state read at exactly its version) and point
    ``_last_checkpoint`` at it; both written atomically.  Every removed path is kept as a
    tombstone (rule 3 needs them all).  Best effort: a failure leaves the JSON files to replay."""
    ld = log_dir(records_dir)
    now_ms = time.time_ns() // 1_000_000
    meta = st.meta or {}
    rows: list[dict] = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": meta.get("id", ""), "name": None, "description": None,
                      "format": {"provider": "parquet", "options": []},
                      "schemaString": meta.get("schemaString", schema_string()), "partitionColumns": [],
                      "configuration": [], "createdTime": meta.get("createdTime", now_ms)}}]
    rows += [{"add": {"path": p, "partitionValues": [], "size": size, "modificationTime": now_ms,
                      "dataChange": False}} for p, size in sorted(st.live.items())]
    rows += [{"remove": {"path": p, "deletionTimestamp": now_ms, "dataChange": False,
                         "extendedFileMetadata": False, "partitionValues": [], "size": 0}}
             for p in sorted(st.removed)]
    buf = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows, schema=_CHECKPOINT_SCHEMA), buf)
    try:
        atomic_write_bytes(ld / _checkpoint_name(st.version), buf.getvalue().to_pybytes())
        atomic_write_bytes(ld / LAST_CHECKPOINT,
                           json.dumps({"version": st.version, "size": len(rows)}).encode())
    except OSError:
        pass


def _actions(records_dir: Path, st: LogState, adds: list[tuple[str, int]], removes: list[str],
             operation: str) -> list[dict]:
    now_ms = time.time_ns() // 1_000_000
    out: list[dict] = []
    if st.version < 0:
        out.append({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}})
        out.append({"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                                 "schemaString": schema_string(), "partitionColumns": [], "configuration": {},
                                 "createdTime": now_ms}})
    for p in removes:
        out.append({"remove": {"path": p, "deletionTimestamp": now_ms, "dataChange": True,
                               "extendedFileMetadata": True, "partitionValues": {}, "size": st.live.get(p, 0)}})
    for p, size in adds:
        out.append({"add": {"path": p, "partitionValues": {}, "size": size, "modificationTime": now_ms,
                            "dataChange": True}})
    out.append({"commitInfo": {"timestamp": now_ms, "operation": operation,
                               "clientVersion": f"tunedb-{TUNEDB_VERSION}"}})
    return out


def _create_version(ld: Path, version: int, data: bytes) -> bool:
    """Create ``ld/<version>.json`` holding ``data`` durably if it does not exist yet; False
    when another writer created it first."""
    tmp = ld / temp_name(".json")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        final = ld / _version_name(version)
        try:
            os.link(tmp, final)
        except FileExistsError:
            return False
        except OSError as e:
            if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                raise
            # a file system without hard links: exclusive create, then write (not atomic for a reader
            # that looks in the same instant, but never two writers on one version)
            try:
                fd2 = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            try:
                write_all(fd2, data)
                os.fsync(fd2)
            finally:
                os.close(fd2)
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    fsync_dir(ld)
    return True


def commit(records_dir: Path, adds: Iterable[Path | str] = (), removes: Iterable[Path | str] = (), *,
           operation: str = "WRITE") -> int | None:
    """Log ``adds`` (published data files) and ``removes`` (files to drop) as one new version,
    following the module's rules: an add of a path the log removed before, or of a file gone
    from disk, and a remove of a path the log does not list, are left out.  Returns the new
    version, or None when nothing was left to log.  OSError when the log cannot be written
    (then nothing was logged)."""
    ld = log_dir(records_dir)
    add_paths = [(relative(records_dir, p), str(p)) for p in adds]
    rm_paths = [r if isinstance(r, str) and not os.path.isabs(r) else relative(records_dir, r) for r in removes]
    for _ in range(MAX_ATTEMPTS):
        st = read_state(records_dir)
        rm = [p for p in dict.fromkeys(rm_paths) if p in st.live]
        add: list[tuple[str, int]] = []
        rm_set = set(rm)
        for rel, p in dict.fromkeys(add_paths):
            if rel in st.live or rel in st.removed or rel in rm_set:
                continue  # (already listed; or removed: never added again)
            try:
                size = os.stat(p).st_size
            except FileNotFoundError:
                continue
            add.append((rel, size))
        if not add and not rm and st.version >= 0:
            return None
        if not ld.is_dir():
            ld.mkdir(exist_ok=True)
            fsync_dir(records_dir)
        data = "".join(json.dumps(a, separators=(",", ":")) + "\n"
                       for a in _actions(records_dir, st, add, rm, operation)).encode()
        if _create_version(ld, st.version + 1, data):
            v = st.version + 1
            if v and v % CHECKPOINT_INTERVAL == 0:
                now = read_state(records_dir)
                if now.version == v:  # (else a later writer's version is there: it checkpoints later)
                    write_checkpoint(records_dir, now)
            return v
    raise OSError(errno.EAGAIN, f"could not add a version to {ld}: {MAX_ATTEMPTS} lost races with other writers")


def reconcile(records_dir: Path, live: Iterable[Path | str], superseded: Iterable[Path | str], *,
              clean_temps: bool = True) -> int | None:
    """Bring the log in line with tunedb's view: ``live`` (published, not superseded files) that
    the log lacks are added, ``superseded`` files and files gone from disk are removed -- one
    version, or none when the log already agrees.  ``clean_temps``: leftover temp files of dead
    writers in the log directory are deleted.  Returns the new version or None."""
    ld = log_dir(records_dir)
    if clean_temps and ld.is_dir():
        for n in os.listdir(ld):
            if n.startswith("_tmp-"):
                remove_dead_temp(ld / n)
    st = read_state(records_dir)
    root = str(records_dir)
    gone = [p for p in st.live if not os.path.exists(os.path.join(root, p))]
    return commit(records_dir, live, [*superseded, *gone], operation="RECONCILE")


def live_files(records_dir: Path) -> list[Path]:
    """The data files the log's latest version lists (absolute paths, sorted)."""
    return sorted(records_dir / p for p in read_state(records_dir).live)


__all__ = ["LOG_DIR", "LogState", "commit", "live_files", "log_dir", "read_state", "reconcile", "relative",
           "schema_string"]
