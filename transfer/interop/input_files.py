"""Reading imported files within the import caps: (gzip-compressed) UTF-8 text, JSON lines, and
the ``file:line`` locations issues name.

Caps: what one import may cost is bounded before and while it is read, never only by the bytes
on disk (a 255 KB gzip file can hold 250 MB of lines).  :class:`ImportBudget` holds the caps of
one import -- :data:`MAX_IMPORT_TEXT` bytes a file after decompression, :data:`MAX_IMPORT_LINE`
characters a line, :data:`MAX_IMPORT_LINES` lines and :data:`MAX_IMPORT_RECORDS` records (with
skipped entries) for all its files together, :data:`MAX_IMPORT_SECONDS` of wall time -- and JSON
nested past :data:`~tunedb.index.model.keys.MAX_JSON_DEPTH` levels.  Past any of them the whole
import is refused with one :class:`ImportCapError` line, before anything is committed.  A
JSON-lines file is read twice: a first pass decompresses it in :data:`READ_CHUNK` pieces,
counting bytes and line ends only (a bomb is refused after reading just past the cap), and the
second parses it one line at a time, so memory grows with one line and the records kept, never
with the file's text.

Hostile paths: only a regular file (or a symlink to one) is ever opened.  :func:`check_input_path`
refuses a FIFO, socket, character or block device (and a directory where a file is expected) by
its ``stat`` before anything opens it, and :func:`open_text` opens with ``O_NONBLOCK`` and checks
the opened descriptor again (a FIFO swapped in after the check cannot block the import).  A file
name that is not UTF-8 (Python holds its undecodable bytes as lone surrogates) never reaches a
record: :func:`display_name` writes such bytes as ``\\xff`` escapes."""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tunedb.index.support import jsontext
from tunedb.transfer.interop.outcomes import ImportCapError, ImportFormatError, ImportIssue

if TYPE_CHECKING:
    from tunedb.index.model.record import Record

#: the most bytes one imported file may hold after decompression (16x the largest Kernel Tuner
#: cache in the shared data): a larger file, or a gzip bomb, is refused after reading just past it
MAX_IMPORT_TEXT = 256 << 20
#: the most characters one line (one record, one JSON log entry) of an imported file may hold
MAX_IMPORT_LINE = 16 << 20
#: the most bytes all the files of one import may hold together after decompression (each file
#: at most :data:`MAX_IMPORT_TEXT`): what bounds the records an import holds until its commit
MAX_IMPORT_TOTAL_TEXT = 512 << 20
#: the most lines the JSON-lines files of one import may hold together, blank and comment lines
#: included (about 6x the records of a 256 MiB tunedb export): counted by the first pass, so a
#: file of millions of short or empty lines is refused before any line is parsed
MAX_IMPORT_LINES = 2_000_000
#: the most records and skipped lines or entries one import may yield, all its files together
#: (about 1.6x the records of a 256 MiB tunedb export; each costs a parse, and the records, about
#: 2 KB each, are held until the one commit)
MAX_IMPORT_RECORDS = 500_000
#: the most seconds of wall time one import may spend reading and parsing its files (about 7x
#: what a 256 MiB tunedb export takes); checked while reading, so a slow import stops uncommitted
MAX_IMPORT_SECONDS = 600.0
#: bytes of decompressed text the first pass over a JSON-lines file reads at a time
READ_CHUNK = 1 << 20


@dataclass
class ImportBudget:
    """The caps of one import and what it has used so far.  ``text`` (bytes after decompression)
    holds per file; ``total_text``, ``lines``, ``records`` and ``seconds`` (wall time since
    ``started``, a ``time.monotonic`` value) for all the import's files together (a file read
    twice counts once).  The defaults are the module's ``MAX_IMPORT_*`` constants; tests pass
    smaller ones to ``collect``."""

    text: int = MAX_IMPORT_TEXT
    total_text: int = MAX_IMPORT_TOTAL_TEXT
    lines: int = MAX_IMPORT_LINES
    records: int = MAX_IMPORT_RECORDS
    seconds: float = MAX_IMPORT_SECONDS
    started: float = field(default_factory=time.monotonic)
    text_used: dict[str, int] = field(default_factory=dict)
    lines_used: int = 0
    records_used: int = 0

    def text_left(self, path: Path) -> int:
        """The most bytes ``path`` may still hold: ``text``, or less when the import's other
        files used most of ``total_text``."""
        key = os.fspath(path)
        others = sum(self.text_used.values()) - self.text_used.get(key, 0)
        return min(self.text, self.total_text - others)

    def add_text(self, path: Path, n: int) -> None:
        """Record that ``path`` holds ``n`` bytes after decompression (its last count replaces
        an earlier one, so a file read twice counts once); ImportCapError past either text cap."""
        if n > self.text_left(path):
            raise self.over_text(path)
        self.text_used[os.fspath(path)] = n

    def over_text(self, path: Path) -> ImportCapError:
        """The error for ``path`` over the text caps (this file's or the whole import's)."""
        if self.text_left(path) < self.text:
            return ImportCapError(f"{display_name(path)}: more than {_size(self.total_text)} of text (after "
                                  "decompression) in the import's files together: over the import cap; import "
                                  "them in parts")
        return ImportCapError(f"{display_name(path)}: more than {_size(self.text)} of text (after decompression): "
                              "over the import cap; split the file")

    def check_time(self, what: str) -> None:
        """ImportCapError (one line naming ``what`` was being read) once the import has run
        longer than ``seconds``."""
        if time.monotonic() - self.started > self.seconds:
            raise ImportCapError(f"{what}: the import ran longer than {self.seconds:g} s: over the import cap; "
                                 "split the input")

    def add_lines(self, n: int, what: str) -> None:
        """Count ``n`` more lines of ``what``; ImportCapError when the import's lines pass ``lines``."""
        self.lines_used += n
        if self.lines_used > self.lines:
            raise ImportCapError(f"{what}: more than {self.lines:,} lines in the import: over the import cap; "
                                 "split the input")

    def add_record(self, what: str) -> None:
        """Count one more record or skipped entry of ``what``; ImportCapError past ``records``."""
        self.records_used += 1
        if self.records_used > self.records:
            raise ImportCapError(f"{what}: more than {self.records:,} records and skipped entries in the import: "
                                 "over the import cap; split the input")


_BUDGET: ContextVar[ImportBudget | None] = ContextVar("tunedb_import_budget", default=None)


@contextmanager
def import_budget(budget: ImportBudget) -> Iterator[ImportBudget]:
    """Make ``budget`` the one the readers of this module use (:func:`current_budget`) inside the
    ``with`` block (``registry.collect`` wraps a whole import in it)."""
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


def current_budget() -> ImportBudget:
    """The budget of the import under way (:func:`import_budget`), or a fresh default one: a file
    read outside an import gets the caps on its own."""
    budget = _BUDGET.get()
    return budget if budget is not None else ImportBudget()


#: levels of objects and lists an import format puts around a record's values (see ``load_json``)
FORMAT_WRAPPING = 3


def load_json(text: str, what: str) -> Any:
    """``text`` parsed as JSON (:func:`tunedb.index.support.jsontext.loads`): json.JSONDecodeError
    for text that is not JSON, ImportCapError (one line naming ``what``) past the depth limit.
    A line or document wraps the values the limit is for (a record line its config, a Kernel
    Tuner cache its results) in up to :data:`FORMAT_WRAPPING` levels, allowed on top: whatever a
    record holds, its exported line imports again."""
    try:
        return jsontext.loads(text, what, wrapping=FORMAT_WRAPPING)
    except json.JSONDecodeError:
        raise
    except ValueError as e:
        raise ImportCapError(f"{e}: over the import cap") from None


def display_name(name: str | os.PathLike) -> str:
    """``name`` (a file name or path) as text UTF-8 can encode: undecodable bytes of the file
    system's name (held by Python as lone surrogates, ``surrogateescape``) become ``\\xNN``
    escapes, e.g. ``log\\xff.json``; a UTF-8 name is returned unchanged.  What a record's
    ``origin``, a target named after a file and an issue's location hold."""
    text = os.fspath(name)
    if isinstance(text, bytes):
        return text.decode("utf-8", "backslashreplace")
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate surrogateescape did not make: its UTF-8-like bytes
        raw = text.encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", "backslashreplace")


def file_stem(path: Path) -> str:
    """A file's name without ``.json``, ``.json.gz`` or ``.gz`` (``A100.json.gz`` -> ``A100``), as
    :func:`display_name` writes it."""
    name = display_name(path.name)
    for suf in (".json.gz", ".json", ".gz"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return display_name(path.stem)


def where(path: Path, line: int | str) -> str:
    return f"{display_name(path.name)}:{line}"


def _kind_of(mode: int) -> str | None:
    """What a ``stat`` mode is when it is not a regular file or a directory, else None."""
    for test, kind in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else "an unknown kind of file"


def check_input_path(path: Path, *, directory: bool | None = False) -> None:
    """ImportFormatError (one line) unless ``path`` is something an import may open, judged by its
    ``stat`` (symlinks followed) without opening it: ``directory`` False wants a regular file,
    True a directory, None either.  A FIFO, socket or device is refused by what it is (opening a
    FIFO would wait for a writer forever; a device may have side effects)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ImportFormatError(f"cannot read {display_name(path)}: no such file or directory") from None
    except OSError as e:
        raise ImportFormatError(f"cannot read {display_name(path)}: {e.strerror or e}") from None
    kind = _kind_of(mode)
    if kind is not None:
        raise ImportFormatError(f"cannot read {display_name(path)}: it is {kind}, not a regular file")
    if directory is False and stat.S_ISDIR(mode):
        raise ImportFormatError(f"cannot read {display_name(path)}: it is a directory, not a file")
    if directory is True and not stat.S_ISDIR(mode):
        raise ImportFormatError(f"cannot read {display_name(path)}: it is a file, not a directory")


def open_regular(path: Path) -> io.BufferedReader:
    """``path`` opened for binary reading, only if it is a regular file (see :func:`check_input_path`;
    opened with ``O_NONBLOCK`` and checked again on the descriptor, so nothing swapped in after
    the check blocks).  ImportFormatError (one line) otherwise or when it cannot be opened."""
    check_input_path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ImportFormatError(f"cannot read {display_name(path)}: {e.strerror or e}") from None
    try:
        kind = _kind_of(os.fstat(fd).st_mode)
        if kind is None and stat.S_ISDIR(os.fstat(fd).st_mode):
            kind = "a directory"
        if kind is not None:
            raise ImportFormatError(f"cannot read {display_name(path)}: it is {kind}, not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return io.open(fd, "rb", closefd=True)  # noqa: UP020 - opens a descriptor, not a path
    except BaseException:
        os.close(fd)
        raise


@contextmanager
def open_bytes(path: Path) -> Iterator[IO[bytes]]:
    """``path``'s bytes, gunzipped when it starts with the gzip magic, only if it is a regular file
    (:func:`open_regular`); both the file and the decompressor are closed on leaving.
    ImportFormatError (one line) when it cannot be opened."""
    raw = open_regular(path)
    try:
        try:
            gz = raw.peek(2)[:2] == b"\x1f\x8b"
        except OSError as e:
            raise ImportFormatError(f"cannot read {display_name(path)}: {e.strerror or e}") from None
        if not gz:
            yield raw
            return
        with gzip.GzipFile(fileobj=raw, mode="rb") as f:
            yield f
    finally:
        raw.close()


def open_text(path: Path) -> Any:
    """Open a (possibly gzip-compressed) UTF-8 text file, only if it is a regular file
    (:func:`open_regular`); raise ImportFormatError (one line) when unreadable.  The caller
    closes it (closing it closes the file too)."""
    raw = open_regular(path)
    try:
        magic = raw.peek(2)[:2]
        if magic == b"\x1f\x8b":
            return io.TextIOWrapper(_ClosingGzip(raw), encoding="utf-8-sig", errors="strict")
        return io.TextIOWrapper(raw, encoding="utf-8-sig", errors="strict")
    except OSError as e:
        raw.close()
        raise ImportFormatError(f"cannot read {display_name(path)}: {e.strerror or e}") from None


class _ClosingGzip(gzip.GzipFile):
    """A GzipFile over ``raw`` that closes ``raw`` when closed."""

    def __init__(self, raw: io.BufferedReader) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


#: what reading a (gzip-compressed) file can raise: the file is refused as unreadable
READ_ERRORS = (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile, zlib.error)


def read_text(path: Path, limit: int | None = None) -> str:
    """Whole text of a (possibly gzip-compressed) UTF-8 file, at most ``limit`` bytes after
    decompression (default: the current import's ``text`` cap, :data:`MAX_IMPORT_TEXT`):
    decompression stops one byte past the cap, so the memory used is bounded by it.
    ImportFormatError (one line) when unreadable, ImportCapError when over the cap or the
    import's time (:class:`ImportBudget`)."""
    budget = current_budget()
    cap = budget.text_left(path) if limit is None else limit
    try:
        with open_bytes(path) as f:
            data = f.read(max(cap, 0) + 1)
        if len(data) > cap:
            raise budget.over_text(path) if limit is None else ImportCapError(
                f"{display_name(path)}: more than {_size(cap)} of text (after decompression): over the import cap")
        if limit is None:
            budget.add_text(path, len(data))
        text = data.decode("utf-8-sig")
    except READ_ERRORS as e:
        raise ImportFormatError(f"cannot read {display_name(path)}: {e}") from None
    budget.check_time(display_name(path))
    return text


def _size(n: int) -> str:
    """``n`` bytes in words: ``256 MiB`` for a whole number of MiB, else ``N bytes``."""
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else f"{n:,} bytes"


def count_lines(path: Path, budget: ImportBudget) -> int:
    """First pass over a JSON-lines file: decompress it in :data:`READ_CHUNK` pieces, keeping
    none, and count its bytes and line ends (``\n``, ``\r\n`` or ``\r``; a last line without
    one counts too).  Adds the lines to ``budget``; ImportCapError as soon as the bytes pass
    ``budget.text_left(path)`` or the import's lines pass ``budget.lines`` (so a bomb is decompressed only
    just past the cap), or the import's time runs out.  ImportFormatError when unreadable."""
    name = display_name(path)
    size = lines = 0
    last = b""
    cap = budget.text_left(path)
    try:
        with open_bytes(path) as f:
            while chunk := f.read(READ_CHUNK):
                size += len(chunk)
                if size > cap:
                    raise budget.over_text(path)
                ends = chunk.count(b"\n") + chunk.count(b"\r") - chunk.count(b"\r\n")
                budget.add_lines(ends, name)
                lines += ends
                budget.check_time(name)
                last = chunk[-1:]
    except READ_ERRORS as e:
        raise ImportFormatError(f"cannot read {name}: {e}") from None
    budget.add_text(path, size)
    if last and last not in b"\r\n":
        budget.add_lines(1, name)
        lines += 1
    return lines


def iter_lines(path: Path, budget: ImportBudget) -> Iterator[tuple[int, str]]:
    """``(line_no, line)`` for each line of a (gzip-compressed) UTF-8 file, 1-based, the line
    without its line end, read one at a time (universal newlines).  ImportCapError for a line
    over :data:`MAX_IMPORT_LINE` (the line is never read whole) or when the import's time runs
    out (checked every 4096 lines); ImportFormatError when the text is unreadable."""
    name = display_name(path)
    try:
        f = open_text(path)
    except READ_ERRORS as e:
        raise ImportFormatError(f"cannot read {name}: {e}") from None
    with f:
        no = 0
        while True:
            try:
                line = f.readline(MAX_IMPORT_LINE + 2)
            except READ_ERRORS as e:
                raise ImportFormatError(f"cannot read {name}: {e}") from None
            if not line:
                return
            no += 1
            line = line.rstrip("\n")
            check_line(path, no, line)
            if not no % 4096:
                budget.check_time(name)
            yield no, line


def check_line(path: Path, no: int, line: str) -> None:
    """ImportFormatError (one line) when line ``no`` of ``path`` is longer than
    :data:`MAX_IMPORT_LINE`: one record that large is refused, and so the whole file."""
    if len(line) > MAX_IMPORT_LINE:
        raise ImportCapError(f"{display_name(path)}: line {no} has {len(line) >> 20} MiB: over the import cap of "
                                f"{MAX_IMPORT_LINE >> 20} MiB per record")


def iter_json_lines(path: Path, *, comments: bool = True) -> Iterator[tuple[int, str, Any, str | None]]:
    """Yield ``(line_no, text, value, error)`` for each non-blank line (1-based; ``text`` stripped,
    ``value`` its JSON value or None, ``error`` why it is not JSON or None), leaving out the lines
    starting with ``#`` when ``comments``.  The file is read twice, within the current import's
    budget (:func:`current_budget`): :func:`count_lines` first, then :func:`iter_lines`.
    ImportCapError (the whole import is refused) for a file or an import over a cap, a line over
    :data:`MAX_IMPORT_LINE` or a line nested deeper than the JSON depth limit (:func:`load_json`)."""
    budget = current_budget()
    count_lines(path, budget)
    for no, line in iter_lines(path, budget):
        s = line.strip()
        if not s or (comments and s.startswith("#")):
            continue
        try:
            value = load_json(s, where(path, no))
        except json.JSONDecodeError as e:
            yield no, s, None, f"not JSON: {e.msg}"
            continue
        yield no, s, value, None


#: what a line's parser raises for a line it cannot read: the line is skipped as an ImportIssue
LINE_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError)


def parse_json_lines(path: Path, parse_line: Callable[[int, Any], Record], *,
                     recognise: Callable[[str, Any, str | None], tuple[bool, tuple[str, str] | None]],
                     not_format: str, comments: bool = True) -> Iterator[Record | ImportIssue]:
    """The records of a JSON-lines file, one line at a time (:func:`iter_json_lines`; ``comments``:
    ``#`` lines are left out), and an ImportIssue (``file:line``, :func:`where`) per line skipped.

    ``recognise(text, value, error)`` says of each line whether it is of the file's format (a
    line of the format may still be invalid inside) and why it is skipped before it is parsed:
    ``(kind, message)`` of the ImportIssue (``malformed`` or ``unsupported``), or None to parse
    it.  ``parse_line(line_no, value)`` gives the line's Record; the :data:`LINE_ERRORS` it
    raises skip the line (the ImportIssue says the error's message), an ImportCapError refuses
    the whole file.  ImportFormatError with the message ``not_format`` when the file has lines
    but none is of the format."""
    lines = recognised = 0
    for no, text, value, err in iter_json_lines(path, comments=comments):
        lines += 1
        known, skip = recognise(text, value, err)
        recognised += bool(known)
        if skip is not None:
            yield ImportIssue(where(path, no), skip[1], skip[0])
            continue
        try:
            rec = parse_line(no, value)
        except ImportCapError:
            raise
        except LINE_ERRORS as e:
            yield ImportIssue(where(path, no), str(e) or type(e).__name__)
            continue
        yield rec
    if lines and not recognised:
        raise ImportFormatError(not_format)


__all__ = ["LINE_ERRORS", "MAX_IMPORT_LINE", "MAX_IMPORT_LINES", "MAX_IMPORT_RECORDS", "MAX_IMPORT_SECONDS",
           "MAX_IMPORT_TEXT", "MAX_IMPORT_TOTAL_TEXT", "READ_CHUNK", "ImportBudget", "check_input_path", "check_line", "count_lines",
           "current_budget", "display_name", "file_stem", "import_budget", "iter_json_lines", "iter_lines",
           "load_json", "open_bytes", "open_regular", "open_text", "parse_json_lines", "read_text", "where"]
