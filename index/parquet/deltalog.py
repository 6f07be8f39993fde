"""The Delta Lake transaction log of ``records/``: what readers outside tunedb read.

``DB/records/`` is a Delta Lake table (protocol reader 1, writer 2; no partition columns: each
file keeps its ``target_slug`` column and lives in its target's directory).  Its log,
``records/_delta_log/<version>.json``, lists the live part files.  Any Delta reader --
``deltalake`` (pyarrow datasets), Polars' ``read_delta``/``scan_delta``, DuckDB's
``delta_scan`` (or DuckDB over the ``deltalake`` dataset), Spark -- reads exactly the files of
one log version, so it never sees a commit's temp files, a rewrite's output beside its inputs,
or rows a ``forget`` removed.

Rules every tunedb writer follows (the log is written only through ``commit`` and ``reconcile``):

1. A data file is added to the log after it is published (renamed into place, fsync'ed).
2. A rewrite (compact, dedup, forget, upgrade) adds its output and removes its inputs in ONE
   log version; the inputs are deleted from disk only after that version is durable.
3. A file the log has removed is never added again (a re-fold of a journal whose file was
   compacted away would otherwise count its rows twice).
4. A version is created with put-if-absent (``link(2)`` of a fsync'ed temp file, then a
   directory fsync): two writers never both create version N; the loser re-reads the log,
   re-applies rules 1-3 against what it finds and tries N+1.  No lock is taken.

tunedb's own reads do not use the log: they scan the directory (journals included) and ignore
superseded files (``tunedb.index.parquet.parts``).  The log lags only for a writer killed between
publishing a file and logging it (its commit never returned), and ``reconcile`` (every writable
open and refresh) catches it up: it adds live files the log lacks and removes files that are
superseded or gone.

Outside writers (the contract).  Anyone who can write the folder may change the table with a
Delta tool -- ``optimize.compact``, ``delete``, an append, ``restore``, ``vacuum`` -- or by hand.
tunedb follows the log's latest version as the table's truth about WHICH rows are live, and
treats its own files as the truth about WHAT it wrote; it never lets a log version it did not
write destroy data:

* Every version tunedb writes says so (``commitInfo.clientVersion`` ``tunedb-<version>``,
  ``is_own``).  ``LogState.own_removed`` holds the paths whose latest removal was tunedb's;
  any other removal (an outside writer's, a hand-written version's, or one known only from a
  checkpoint) is ``foreign_removed``.
* tunedb deletes a data file only when no version it did not write removed it: a tunedb version
  removed it (or the log never listed it: a killed writer's) and a compacted file of tunedb's
  supersedes it (the rewrite holds its rows), or a tunedb ``forget``/``dedup`` dropped its rows.  A file an outside version removed is never deleted by tunedb:
  it stays on disk until the outside writer's ``vacuum`` (or comes back with ``restore``).
* Outside changes are adopted (``tunedb.index.parquet.outside``), by every writable open and
  refresh and before every rewrite, under the DB lock: rows of files the log lists and tunedb
  does not (an append, a compaction's or a delete's output, a restored file) are copied into
  compacted files of tunedb's that also supersede the files the outside writer removed; one
  ``ADOPT`` version swaps the outside files for them.  tunedb's record count then equals what
  Delta readers read after every outside change (distinct record ids).  A version that removes
  every file is followed the same way (tunedb then holds no records; no file is deleted, and
  ``DeltaTable.restore`` brings them back for both).
* A rewrite whose inputs an outside writer removed meanwhile logs nothing and is undone
  (``LogConflictError``); it is run again after adopting.
* A read-only handle changes nothing: it reads tunedb's files and warns once, in one line, when
  the log holds changes it has not adopted.

Self-repair.  A version that cannot be read (truncated, not JSON) raises ``CorruptLogError``,
one line naming the file and what is wrong.  A writable open moves it aside (``repair``): the
newest version is renamed ``<version>.json.corrupt-<ns>`` inside ``_delta_log`` (Delta readers
ignore that name), a damaged older one takes the whole log to ``records/_delta_log.corrupt-<ns>``;
then ``reconcile`` rebuilds the log from tunedb's files.  Nothing is deleted and no committed
record is lost (each is in a tunedb file); an outside change recorded only in the damaged part is
dropped from both views (its files stay on disk).  The log can also be rebuilt by hand: delete
``_delta_log`` and open the DB writable.

Units: sizes in bytes; Delta's times in integer milliseconds since the epoch.
"""

from __future__ import annotations

import errno
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from tunedb.index.model.schema import RECORD_SCHEMA
from tunedb.index.model.version import TUNEDB_VERSION
from tunedb.index.support.fsutil import (
    atomic_write_bytes,
    fsync_dir,
    relative_path_problem,
    remove_dead_temp,
    temp_name,
    write_all,
)

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
    size), every path ever removed, and of those the ones whose latest removal a tunedb
    version wrote (``own_removed``; a removal read from a checkpoint is not known to be
    tunedb's and is not in it)."""

    version: int = -1
    live: dict[str, int] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)
    meta: dict = field(default_factory=dict)  # the latest metaData action
    own_removed: set[str] = field(default_factory=set)

    def copy(self) -> "LogState":
        return LogState(self.version, dict(self.live), set(self.removed), dict(self.meta), set(self.own_removed))

    def foreign_removed(self, path: str) -> bool:
        """Whether the log removed ``path`` (and lists it no more) in a version tunedb did not
        write: an outside Delta writer's, a hand-written one, or one known only from a checkpoint."""
        return path in self.removed and path not in self.live and path not in self.own_removed


class CorruptLogError(OSError):
    """A version of the Delta log cannot be read (truncated or not JSON): an I/O error of the
    log (``errno.EIO``; every "OSError when it cannot write" path treats it so: nothing is
    published).  ``path``: that file.  ``str()`` is one line naming it and how to repair (a
    writable open does it: ``repair``)."""

    def __init__(self, path: Path, what: str):
        self.path = path
        self.message = (f"{path}: corrupt Delta log version ({what}); open the DB writable (e.g. `tunedb stats "
                        f"--db DB`) to move it aside and rebuild the log from the data files")
        super().__init__(errno.EIO, self.message)

    def __str__(self) -> str:
        return self.message


_STATES: dict[str, LogState] = {}
_SIGS: dict[str, tuple | None] = {}  # (inode, size, mtime) of the last version each cached state read
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


def is_own(actions: list[dict]) -> bool:
    """Whether a log version's ``actions`` were written by tunedb (its ``commitInfo`` names a
    ``tunedb-`` client)."""
    for a in actions:
        info = a.get("commitInfo")
        if isinstance(info, dict) and str(info.get("clientVersion", "")).startswith("tunedb-"):
            return True
    return False


def path_problem(rel: str) -> str | None:
    """Why ``rel``, a data file's path in a log action, is refused (None when it is fine): it must
    be a relative path inside the table -- no absolute path, no URL scheme, no ``..`` -- as
    written and once percent-decoded (as Delta readers decode it)."""
    return relative_path_problem(rel) or relative_path_problem(unquote(rel))


def parse_version(path: Path, text: str) -> list[dict]:
    """The actions of log version file ``path`` (its ``text``); CorruptLogError (one line naming
    the file and what is wrong) when a line is not a JSON action or an add/remove has no path."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            a = json.loads(line)
        except ValueError as e:
            raise CorruptLogError(path, f"line {n}: {e}") from None
        if not isinstance(a, dict):
            raise CorruptLogError(path, f"line {n} is not a JSON object")
        for kind in ("add", "remove"):
            if kind in a and not (isinstance(a[kind], dict) and isinstance(a[kind].get("path"), str)):
                raise CorruptLogError(path, f"line {n}: {kind} action without a path")
            if kind in a and (why := path_problem(a[kind]["path"])):
                raise CorruptLogError(path, f"line {n}: {kind} path {a[kind]['path']!r:.80} {why}")
        out.append(a)
    if not out:
        raise CorruptLogError(path, "empty file")
    return out


def _apply(st: LogState, actions: list[dict]) -> None:
    own = is_own(actions)
    for a in actions:
        if "metaData" in a:
            st.meta = a["metaData"]
        elif "add" in a:
            p = a["add"]["path"]
            st.live[p] = int(a["add"].get("size", 0) or 0)
        elif "remove" in a:
            p = a["remove"]["path"]
            st.live.pop(p, None)
            st.removed.add(p)
            if own:
                st.own_removed.add(p)
            else:
                st.own_removed.discard(p)


def read_state(records_dir: Path) -> LogState:
    """The log replayed to its latest version (incrementally: this process remembers where it
    stopped, and starts again from the last checkpoint when the last version it read has been
    changed since; a new process starts at the last checkpoint).  A copy: callers may keep it.
    CorruptLogError when a version cannot be read."""
    key = str(records_dir.resolve())
    ld = log_dir(records_dir)
    with _LOCK:
        st = _STATES.get(key)
        if st is not None and st.version >= 0 and _SIGS.get(key) != _signature(ld / _version_name(st.version)):
            st = None  # the last version read was replaced, rewritten or moved aside (or the log rebuilt)
        if st is None:
            st = _from_checkpoint(ld)
            sig = _signature(ld / _version_name(st.version)) if st.version >= 0 else None
        else:
            sig = _SIGS.get(key)
        while True:
            path = ld / _version_name(st.version + 1)
            try:
                with open(path, "rb") as f:
                    sig_now = _signature(path, os.fstat(f.fileno()))
                    text = f.read().decode()
            except FileNotFoundError:
                break
            except UnicodeDecodeError as e:
                raise CorruptLogError(path, f"not UTF-8 text: {e.reason} at byte {e.start}") from None
            _apply(st, parse_version(path, text))  # (whole or not at all: a corrupt version changes nothing)
            st.version += 1
            sig = sig_now
        _STATES[key] = st
        _SIGS[key] = sig
        return st.copy()


def _signature(path: Path, stat: os.stat_result | None = None) -> tuple | None:
    """(inode, size, mtime) of a log version file, None when it is gone."""
    try:
        s = stat or os.stat(path)
    except FileNotFoundError:
        return None
    return (s.st_ino, s.st_size, s.st_mtime_ns)


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
        if os.path.exists(ld / LAST_CHECKPOINT):  # (it names a checkpoint that cannot be read)
            _BAD_CHECKPOINT.add(str(ld))
        return LogState()
    st = LogState(version=v)
    for row in t:
        for kind in ("add", "remove"):
            if row.get(kind) and path_problem(row[kind].get("path")):
                _BAD_CHECKPOINT.add(str(ld))
                return LogState()  # (a hostile checkpoint is no checkpoint: the versions are replayed)
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
    change = operation != "ADOPT"  # (an adoption moves rows into tunedb's files: no data change)
    for p in removes:
        out.append({"remove": {"path": p, "deletionTimestamp": now_ms, "dataChange": change,
                               "extendedFileMetadata": True, "partitionValues": {}, "size": st.live.get(p, 0)}})
    for p, size in adds:
        out.append({"add": {"path": p, "partitionValues": {}, "size": size, "modificationTime": now_ms,
                            "dataChange": change}})
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


#: log directories whose ``_last_checkpoint`` names a checkpoint that cannot be read: tunedb
#: replays the JSON versions instead, and its next version writes a fresh checkpoint so that
#: outside Delta readers (which trust ``_last_checkpoint``) read the table again
_BAD_CHECKPOINT: set[str] = set()


def _set_aside_strays(ld: Path, version: int) -> None:
    """Before writing ``version + 1``: a version file beyond a gap (``version + 2`` or later while
    ``version + 1`` is missing; tunedb's writers create versions in order, so no writer of the
    log made it) is renamed ``<name>.corrupt-<ns>``, so that neither tunedb (once the gap is
    filled) nor an outside reader takes it for part of the log.  One ``stat`` in the common case."""
    if not os.path.exists(ld / _version_name(version + 2)):
        return
    try:
        names = [n for n in os.listdir(ld) if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()
                 and int(n[:20]) > version + 1]
    except OSError:
        return
    if os.path.exists(ld / _version_name(version + 1)):
        return  # (filled meanwhile by a writer: no gap, the caller's next read follows it)
    stamp = time.time_ns()
    for n in names:
        try:
            os.rename(ld / n, ld / f"{n}{CORRUPT_SUFFIX}{stamp}")
        except OSError:
            pass
    fsync_dir(ld)


class LogConflictError(OSError):
    """A rewrite's inputs were removed from the log by an outside writer while it ran: nothing
    was logged (the rewrite is undone by its caller)."""


def commit(records_dir: Path, adds: Iterable[Path | str] = (), removes: Iterable[Path | str] = (), *,
           operation: str = "WRITE", inputs_must_be_ours: bool = False) -> int | None:
    """Log ``adds`` (published data files) and ``removes`` (files to drop) as one new version,
    following the module's rules: an add of a path the log removed before, or of a file gone
    from disk, and a remove of a path the log does not list, are left out.  Returns the new
    version, or None when nothing was left to log.  OSError when the log cannot be written
    (then nothing was logged); CorruptLogError when the log cannot be read.
    ``inputs_must_be_ours`` (a rewrite): LogConflictError, nothing logged, when an outside
    writer removed one of ``removes`` from the log (its rows may live on elsewhere: the
    rewrite's output would bring them back beside them)."""
    ld = log_dir(records_dir)
    add_paths = [(relative(records_dir, p), str(p)) for p in adds]
    rm_paths = [r if isinstance(r, str) and not os.path.isabs(r) else relative(records_dir, r) for r in removes]
    for _ in range(MAX_ATTEMPTS):
        st = read_state(records_dir)
        if inputs_must_be_ours:
            lost = [p for p in rm_paths if st.foreign_removed(p)]
            if lost:
                raise LogConflictError(errno.EAGAIN, f"an outside Delta writer removed {records_dir / lost[0]} from "
                                                     f"the log while tunedb rewrote it; nothing changed, run it again")
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
        _set_aside_strays(ld, st.version)
        if _create_version(ld, st.version + 1, data):
            v = st.version + 1
            if str(ld) in _BAD_CHECKPOINT or (v and v % CHECKPOINT_INTERVAL == 0):
                now = read_state(records_dir)
                if now.version == v:  # (else a later writer's version is there: it checkpoints later)
                    write_checkpoint(records_dir, now)
                    _BAD_CHECKPOINT.discard(str(ld))
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


#: a data file path tunedb writes (relative to ``records/``): ``target_slug=<slug>/[c]part-<ns>-<hex>.parquet``
OWN_PATH_RE = re.compile(r"^target_slug=[^/]+/c?part-\d+-[0-9a-f]+\.parquet$")
CORRUPT_SUFFIX = ".corrupt-"


def is_own_path(rel: str) -> bool:
    """Whether log path ``rel`` is laid out as tunedb lays out its files (tunedb lists these
    itself; any other path in the log was added by an outside writer)."""
    return OWN_PATH_RE.match(rel) is not None


def repair(records_dir: Path, settle_s: float = 1.0) -> list[Path]:
    """Move every unreadable version out of the log's way and return where each went (empty
    when the log reads).  The newest version, when it is the bad one, is renamed
    ``<name>.corrupt-<ns>`` inside ``_delta_log`` (Delta readers ignore the name and read the
    version before it); a bad version with readable ones after it would leave a gap, so the
    whole log is renamed ``records/_delta_log.corrupt-<ns>`` instead.  Either way nothing is
    deleted and the caller then rebuilds the log from the files (``reconcile``): tunedb's
    files are the truth, and a committed record is in one of them.  A file modified less than
    ``settle_s`` ago is read again first (a writer without hard links may be writing it).
    The caller holds the DB lock exclusively (two repairers never move a version a writer has
    just recreated)."""
    ld = log_dir(records_dir)
    moved: list[Path] = []
    for _ in range(1000):
        try:
            read_state(records_dir)
            return moved
        except CorruptLogError as e:
            bad = e.path
        try:
            age = time.time() - bad.stat().st_mtime
        except FileNotFoundError:
            continue
        if age < settle_s:
            time.sleep(settle_s - age)
            try:
                read_state(records_dir)
                return moved
            except CorruptLogError as e:
                if e.path != bad:
                    continue
        versions = sorted(int(n[:20]) for n in os.listdir(ld) if len(n) == 25 and n.endswith(".json")
                          and n[:20].isdigit())
        stamp = time.time_ns()
        if versions and int(bad.name[:20]) == versions[-1]:
            to = bad.with_name(f"{bad.name}{CORRUPT_SUFFIX}{stamp}")
            os.rename(bad, to)
            fsync_dir(ld)
        else:
            to = records_dir / f"{LOG_DIR}{CORRUPT_SUFFIX}{stamp}"
            os.rename(ld, to)
            fsync_dir(records_dir)
        with _LOCK:
            _STATES.pop(str(records_dir.resolve()), None)
            _SIGS.pop(str(records_dir.resolve()), None)
        moved.append(to)
    return moved


def live_files(records_dir: Path) -> list[Path]:
    """The data files the log's latest version lists (absolute paths, sorted)."""
    return sorted(records_dir / p for p in read_state(records_dir).live)


__all__ = ["LOG_DIR", "CorruptLogError", "LogConflictError", "LogState", "commit", "is_own", "is_own_path",
           "live_files", "log_dir", "parse_version", "read_state", "reconcile", "relative", "repair",
           "schema_string"]
