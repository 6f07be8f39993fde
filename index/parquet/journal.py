"""Write-ahead journals: durable small commits at the cost of one fsync'ed append.

A handle that commits a few records at a time appends them to its own journal file,
``journal/<host>-<pid>-<id>.jsonl``, instead of writing a Parquet file per commit (whose
encoding alone costs about a millisecond).  The store folds a journal into ordinary
Parquet part files once it holds ``TuningDB.JOURNAL_FOLD`` records, on ``compact`` and
``close``, and at exit; readers read journals as they read Parquet files, so a record is
visible and durable the moment its commit returns.  Tools other than tunedb see
journaled records once they are folded.

Format: one line per record, ``<row JSON>\\t<crc32 of the JSON, 8 hex digits>\\n``; the
row holds the record columns (timestamps as integer microseconds since the epoch).
Appends are sequential and fsync'ed before the commit returns, so only the last line
can be torn (a crash mid-append): readers stop at the first line whose checksum or
newline is missing.

Ownership: the writer holds an exclusive ``flock`` on its journal for as long as it may
append.  The file is created and locked under a temporary name and only then renamed
into ``journal/``, so a journal that can be locked by anyone else belongs to a writer
that is gone (closed, crashed or killed) and may be folded by whoever finds it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import uuid
import weakref
import zlib
from pathlib import Path
from typing import Any

from tunedb.index.parquet.fsutil import _HOST, fsync_dir, temp_name, write_all

SUFFIX = ".jsonl"


def journal_name() -> str:
    return f"{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:12]}{SUFFIX}"


class JournalWriter:
    """The append end of one journal (see module docstring).  Not thread-safe by itself:
    the store calls it under its handle lock."""

    def __init__(self, directory: Path):
        directory.mkdir(exist_ok=True)
        tmp = directory / temp_name(SUFFIX)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.path = directory / journal_name()
            os.rename(tmp, self.path)
            fsync_dir(directory)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        self.fd = fd
        self.pid = os.getpid()
        self.records = 0
        self._closer = weakref.finalize(self, os.close, fd)  # releases the lock if never closed

    def append(self, rows: list[dict[str, Any]]) -> None:
        """Append ``rows`` and fsync: durable when it returns."""
        lines = []
        for row in rows:
            text = json.dumps(row, separators=(",", ":"))
            lines.append(f"{text}\t{zlib.crc32(text.encode()):08x}\n")
        write_all(self.fd, "".join(lines).encode())
        os.fsync(self.fd)
        self.records += len(rows)

    def close(self) -> None:
        if self.fd >= 0:
            self._closer()  # os.close: releases the lock
            self.fd = -1


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The complete, checksummed rows of a journal, in order (a torn tail is ignored)."""
    with open(path, "rb") as f:
        data = f.read()
    rows = []
    for line in data.split(b"\n")[:-1]:  # the piece after the last newline is incomplete
        text, sep, crc = line.rpartition(b"\t")
        if not sep or len(crc) != 8 or f"{zlib.crc32(text):08x}".encode() != crc:
            break
        try:
            row = json.loads(text)
        except ValueError:
            break
        if not isinstance(row, dict):
            break
        rows.append(row)
    return rows


def try_lock_abandoned(path: Path) -> int | None:
    """An fd holding the exclusive lock of ``path`` when its writer is gone, else None."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return None
        raise
    return fd
