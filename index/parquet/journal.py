"""Write-ahead journals: durable small commits at the cost of one fsync'ed append.

A handle that commits a few records at a time appends them to its own journal file,
``journal/<host>-<pid>-<id>.jsonl``, instead of writing a Parquet file per commit (whose
encoding alone costs about a millisecond).  The store folds a journal into ordinary
Parquet part files once it holds ``ParquetStore.JOURNAL_FOLD`` records, on ``compact`` and
``close``, and at exit; readers read journals as they read Parquet files, so a record is
visible and durable the moment its commit returns.  Tools other than tunedb see
journaled records once they are folded.

Format: one line per record, ``<row JSON>\\t<crc32 of the JSON, 8 hex digits>\\n``; the
row holds the record columns (timestamps as integer microseconds since the epoch).

Appends are all-or-nothing: ``JournalWriter.append`` writes a commit's lines and fsyncs;
when the write or the fsync fails (a full disk: ENOSPC, EIO, ...) it truncates the file back
to where the commit began and fsyncs again before it raises, so the journal is exactly what it
was before the commit and none of the failed commit's lines is ever read.  Should even the
truncation fail, the writer is marked ``broken`` and the store starts a new journal (the old
one is then folded like any other).  So a torn line (no newline, or a checksum that does not
match) can only be the *last* line of a file: an append in progress (its owner is alive) or
cut short by a crash (that commit never returned).  ``read_contents`` reads on past a bad line
anywhere else -- it reports it (``JournalWarning``) and recovers a good line glued to the end
of a torn one -- so good lines after a bad one are never lost.

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
import threading
import uuid
import warnings
import weakref
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunedb.index.model.keys import fast_json_encoder
from tunedb.index.support.fsutil import HOST, fsync_dir, temp_name, write_all

SUFFIX = ".jsonl"


class JournalWarning(UserWarning):
    """A journal holds a line that is neither a complete row nor a torn last line."""


def journal_name() -> str:
    return f"{HOST}-{os.getpid()}-{uuid.uuid4().hex[:12]}{SUFFIX}"


# json.dumps(row, separators=(",", ":")) with the C encoder built once
_dumps = fast_json_encoder(sort_keys=False, ensure_ascii=True)


def encode_rows(rows: list[dict[str, Any]]) -> bytes:
    """The journal lines of ``rows`` (see module docstring)."""
    lines = []
    for row in rows:
        text = _dumps(row)
        lines.append(f"{text}\t{zlib.crc32(text.encode()):08x}\n")
    return "".join(lines).encode()


class _Pending:
    """One commit's lines waiting for a group write (see ``JournalWriter``)."""

    __slots__ = ("data", "rows", "done", "error")

    def __init__(self, data: bytes, rows: int):
        self.data, self.rows, self.done, self.error = data, rows, False, None


class JournalWriter:
    """The append end of one journal (see module docstring).

    Group commit: threads sharing a writer share its fsyncs.  ``enqueue`` queues a commit's
    lines; ``wait`` makes its caller the writer of everything queued so far (one write, one
    fsync) unless another thread's write already took its lines, and returns once they are
    durable.  A failed write fails every commit it held (each ``wait`` raises; the file is
    truncated back, as for one commit).  ``append`` is the two in one.  ``enqueue`` and
    ``close`` are called under the store's handle lock, ``wait`` outside it."""

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
        self.size = 0  # bytes of complete, fsync'ed commits: where the next append starts
        self.broken = False  # a failed append could not be undone: append no more (see append)
        self._closer = weakref.finalize(self, os.close, fd)  # releases the lock if never closed
        self._queue: list[_Pending] = []
        self._queue_lock = threading.Lock()
        self._turn = threading.Condition()  # guards _writing; notified when a group write ends
        self._writing = False  # a thread is writing a group (one at a time)

    def append(self, rows: list[dict[str, Any]]) -> None:
        """Append ``rows`` and fsync: durable when it returns.  All-or-nothing: on any failure
        (OSError such as ENOSPC, or an interrupt) the file is truncated back to its size
        before the write and fsync'ed, then the error is raised; if that undo fails too,
        ``broken`` is set and the writer refuses further appends (RuntimeError)."""
        self.wait(self.enqueue(rows))

    def enqueue(self, rows: list[dict[str, Any]]) -> _Pending:
        """Queue ``rows`` for the next group write (RuntimeError when the writer is retired)."""
        if self.broken:
            raise RuntimeError(f"journal {self.path} is retired after a failed append")
        p = _Pending(encode_rows(rows), len(rows))
        with self._queue_lock:
            self._queue.append(p)
        return p

    def wait(self, p: _Pending) -> None:
        """Return once ``p``'s lines are durable (writing everything queued, when no other
        thread's write took them); raise the write's error when it failed.  A commit that
        another thread's write took returns as soon as that write ends."""
        with self._turn:
            while not p.done and self._writing:
                self._turn.wait()
            if p.done:
                if p.error is not None:
                    raise p.error
                return
            self._writing = True
        self._write_turn(p)
        if p.error is not None:
            raise p.error

    def flush(self) -> None:
        """Write what is queued (before a fold or close; errors go to the waiting commits)."""
        with self._turn:
            while self._writing:
                self._turn.wait()
            self._writing = True
        self._write_turn(None)

    def _write_turn(self, own: _Pending | None) -> None:
        """Write everything queued (the caller set ``_writing``; ``own``: its commit, if any),
        then wake the waiters."""
        try:
            self._write_queued(own)
        finally:
            with self._turn:
                self._writing = False
                self._turn.notify_all()

    def _write_queued(self, own: _Pending | None) -> None:
        with self._queue_lock:
            batch, self._queue = self._queue, []
        if not batch:
            return
        data = batch[0].data if len(batch) == 1 else b"".join(x.data for x in batch)
        try:
            if self.broken or self.fd < 0:
                raise RuntimeError(f"journal {self.path} is retired after a failed append")
            write_all(self.fd, data)
            os.fsync(self.fd)
        except BaseException as e:
            try:
                os.ftruncate(self.fd, self.size)
                os.fsync(self.fd)
            except (OSError, ValueError):
                self.broken = True
            for x in batch:  # (an interrupt is the writing thread's; the others see an error)
                x.error = e if isinstance(e, Exception) or x is own else \
                    RuntimeError(f"journal append interrupted ({type(e).__name__})")
                x.done = True
            return
        self.size += len(data)
        self.records += sum(x.rows for x in batch)
        for x in batch:
            x.done = True

    def close(self) -> None:
        self.flush()
        if self.fd >= 0:
            self._closer()  # os.close: releases the lock
            self.fd = -1


@dataclass
class JournalContents:
    """What ``read_contents`` found in a journal.

    ``rows``: every complete, checksummed row, in file order.  ``bad``: 1-based numbers of
    the lines that are neither (corruption, or a torn append that later lines follow); they
    were skipped and the lines after them read.  ``torn_tail``: the file ends in a piece
    without a newline (an append in progress, or cut short by a crash).  ``size``: bytes read."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    bad: list[int] = field(default_factory=list)
    torn_tail: bool = False
    size: int = 0


def _row_of(line: bytes) -> dict[str, Any] | None:
    text, sep, crc = line.rpartition(b"\t")
    if not sep or len(crc) != 8 or f"{zlib.crc32(text):08x}".encode() != crc:
        return None
    try:
        row = json.loads(text)
    except ValueError:
        return None
    return row if isinstance(row, dict) else None


def _recover(line: bytes) -> dict[str, Any] | None:
    """A complete row at the end of a bad ``line`` (a torn append with the next append glued
    on), else None."""
    start = line.find(b'{"', 1)
    while start > 0:
        row = _row_of(line[start:])
        if row is not None:
            return row
        start = line.find(b'{"', start + 1)
    return None


def read_contents(path: Path, *, warn: bool = True) -> JournalContents:
    """Read journal ``path`` (see ``JournalContents``).  A bad line that is not the last one is
    skipped, reported as a ``JournalWarning`` when ``warn``, and reading goes on."""
    with open(path, "rb") as f:
        data = f.read()
    out = JournalContents(size=len(data))
    pieces = data.split(b"\n")
    out.torn_tail = bool(pieces[-1])  # the piece after the last newline is incomplete
    for no, line in enumerate(pieces[:-1], 1):
        row = _row_of(line)
        if row is None:
            out.bad.append(no)
            row = _recover(line)
        if row is not None:
            out.rows.append(row)
    if out.bad and warn:
        shown = ", ".join(map(str, out.bad[:10])) + (" ..." if len(out.bad) > 10 else "")
        warnings.warn(f"journal {path}: skipped {len(out.bad)} corrupt line(s) (line {shown}); "
                      f"the lines after them were read", JournalWarning, stacklevel=2)
    return out


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The complete, checksummed rows of a journal, in order: a torn last line is ignored, a
    bad line elsewhere is reported and skipped (see ``read_contents``)."""
    return read_contents(path).rows


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
