"""Reading imported files within the import caps: (gzip-compressed) UTF-8 text, at most
:data:`MAX_IMPORT_TEXT` characters a file and :data:`MAX_IMPORT_LINE` a line, JSON lines, and the
``file:line`` locations issues name."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tunedb.transfer.interop.reports import ImportCapError, ImportFormatError

#: the most text one imported file may hold after decompression (characters; 16x the largest
#: Kernel Tuner cache in the shared data): a larger file, or a gzip bomb, is refused unread
MAX_IMPORT_TEXT = 256 << 20
#: the most characters one line (one record, one JSON log entry) of an imported file may hold
MAX_IMPORT_LINE = 16 << 20


def file_stem(path: Path) -> str:
    """A file's name without ``.json``, ``.json.gz`` or ``.gz`` (``A100.json.gz`` -> ``A100``)."""
    name = path.name
    for suf in (".json.gz", ".json", ".gz"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return path.stem


def where(path: Path, line: int | str) -> str:
    return f"{path.name}:{line}"


def open_text(path: Path) -> Any:
    """Open a (possibly gzip-compressed) UTF-8 text file; raise ImportFormatError when unreadable."""
    try:
        with open(path, "rb") as f:
            magic = f.read(2)
        if magic == b"\x1f\x8b":
            return gzip.open(path, "rt", encoding="utf-8-sig", errors="strict")
        return open(path, encoding="utf-8-sig", errors="strict")
    except OSError as e:
        raise ImportFormatError(f"cannot read {path}: {e.strerror or e}") from None


def read_text(path: Path, limit: int | None = None) -> str:
    """Whole text of a (possibly gzip-compressed) UTF-8 file, at most ``limit`` characters
    (default :data:`MAX_IMPORT_TEXT`): decompression stops one character past the cap, so the
    memory used is bounded by it.  ImportFormatError (one line) when unreadable or over the cap."""
    cap = MAX_IMPORT_TEXT if limit is None else limit
    try:
        with open_text(path) as f:
            text = f.read(cap + 1)
    except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile) as e:
        raise ImportFormatError(f"cannot read {path}: {e}") from None
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


def iter_json_lines(path: Path) -> Iterator[tuple[int, str, Any, str | None]]:
    """Yield ``(line_no, text, value, error)`` for each non-blank, non-``#`` line (1-based)."""
    text = read_text(path)
    for no, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        check_line(path, no, s)
        try:
            yield no, s, json.loads(s), None
        except json.JSONDecodeError as e:
            yield no, s, None, f"not JSON: {e.msg}"
        except RecursionError:
            yield no, s, None, "not JSON: nested too deeply"


__all__ = ["MAX_IMPORT_LINE", "MAX_IMPORT_TEXT", "check_line", "file_stem", "iter_json_lines", "open_text", "read_text",
           "where"]
