"""Reading imported files within the import caps: (gzip-compressed) UTF-8 text, at most
:data:`MAX_IMPORT_TEXT` characters a file and :data:`MAX_IMPORT_LINE` a line, JSON lines, and the
``file:line`` locations issues name.

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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunedb.transfer.interop.outcomes import ImportCapError, ImportFormatError, ImportIssue

if TYPE_CHECKING:
    from tunedb.index.model.record import Record

#: the most text one imported file may hold after decompression (characters; 16x the largest
#: Kernel Tuner cache in the shared data): a larger file, or a gzip bomb, is refused unread
MAX_IMPORT_TEXT = 256 << 20
#: the most characters one line (one record, one JSON log entry) of an imported file may hold
MAX_IMPORT_LINE = 16 << 20


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


def open_text(path: Path) -> Any:
    """Open a (possibly gzip-compressed) UTF-8 text file, only if it is a regular file
    (:func:`open_regular`); raise ImportFormatError (one line) when unreadable."""
    raw = open_regular(path)
    try:
        magic = raw.peek(2)[:2]
        if magic == b"\x1f\x8b":
            return io.TextIOWrapper(gzip.GzipFile(fileobj=raw, mode="rb"), encoding="utf-8-sig", errors="strict")
        return io.TextIOWrapper(raw, encoding="utf-8-sig", errors="strict")
    except OSError as e:
        raw.close()
        raise ImportFormatError(f"cannot read {display_name(path)}: {e.strerror or e}") from None


def read_text(path: Path, limit: int | None = None) -> str:
    """Whole text of a (possibly gzip-compressed) UTF-8 file, at most ``limit`` characters
    (default :data:`MAX_IMPORT_TEXT`): decompression stops one character past the cap, so the
    memory used is bounded by it.  ImportFormatError (one line) when unreadable or over the cap."""
    cap = MAX_IMPORT_TEXT if limit is None else limit
    try:
        with open_text(path) as f:
            text = f.read(cap + 1)
    except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile) as e:
        raise ImportFormatError(f"cannot read {display_name(path)}: {e}") from None
    if len(text) > cap:
        raise ImportFormatError(f"{path}: more than {cap >> 20} MiB of text (after decompression): over the "
                                "import cap; split the file")
    return text


def check_line(path: Path, no: int, line: str) -> None:
    """ImportFormatError (one line) when line ``no`` of ``path`` is longer than
    :data:`MAX_IMPORT_LINE`: one record that large is refused, and so the whole file."""
    if len(line) > MAX_IMPORT_LINE:
        raise ImportCapError(f"{path}: line {no} has {len(line) >> 20} MiB: over the import cap of "
                                f"{MAX_IMPORT_LINE >> 20} MiB per record")


def iter_json_lines(path: Path, *, comments: bool = True) -> Iterator[tuple[int, str, Any, str | None]]:
    """Yield ``(line_no, text, value, error)`` for each non-blank line (1-based; ``text`` stripped,
    ``value`` its JSON value or None, ``error`` why it is not JSON or None), leaving out the lines
    starting with ``#`` when ``comments``.  ImportCapError for a line over :data:`MAX_IMPORT_LINE`."""
    text = read_text(path)
    for no, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or (comments and s.startswith("#")):
            continue
        check_line(path, no, s)
        try:
            yield no, s, json.loads(s), None
        except json.JSONDecodeError as e:
            yield no, s, None, f"not JSON: {e.msg}"
        except RecursionError:
            yield no, s, None, "not JSON: nested too deeply"


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


__all__ = ["LINE_ERRORS", "MAX_IMPORT_LINE", "MAX_IMPORT_TEXT", "check_input_path", "check_line", "display_name",
           "file_stem", "iter_json_lines", "open_regular", "open_text", "parse_json_lines", "read_text", "where"]
