"""The directory of a DB: its marker file and subdirectories.

``tunedb.json`` (the marker) names the format, the schema version of the DB, the tunedb that
created it (``created_by``) and the tunedb that last wrote the marker (``written_by``: the
creator, or the ``tunedb upgrade`` that brought it to its schema version).  A DB of a newer
schema version is refused rather than misread (``ValueError``, one line naming both versions);
a DB of an older schema version opens for reading (see ``tunedb.index.parquet.store`` and
``tunedb.index.parquet.upgrade``).  The marker is written
atomically (temp file, fsync, rename, directory fsync), so a crash never leaves a
half-written one.  See ``tunedb.index.parquet.store`` for what the subdirectories hold.

Creating a DB is idempotent and race-free: any number of processes may ``prepare`` the same
new path at once and every one of them gets the same DB.  Each step (make the directory,
write the marker atomically, make the subdirectories) may be repeated by every creator, and a
directory that holds nothing but what a creator makes on the way (the marker's temp file, the
marker, the subdirectories, the lock file) counts as a DB being created -- whoever finds it
finishes creating it -- rather than as a foreign directory.  A creator killed part-way leaves
such a directory; the next open finishes it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tunedb.index.model.version import SCHEMA_VERSION, TUNEDB_VERSION
from tunedb.index.support.fsutil import atomic_write_bytes, fsync_dir, refuse_links_under, remove_dead_temp

MARKER = "tunedb.json"
SUBDIRS = ("records", "invalidations", "derived", "journal")
LOCK = "_lock"


def _being_created(names: list[str]) -> bool:
    """Whether a directory holding ``names`` (and no marker) is a DB that a creator is making."""
    return all(n in SUBDIRS or n in (LOCK, MARKER) or (n.startswith("_tmp-") and n.endswith(".json"))
               for n in names)


def marker_info(schema_version: int = SCHEMA_VERSION, created_by: str = TUNEDB_VERSION) -> dict:
    """The marker's content for a DB of ``schema_version`` written now by this tunedb."""
    return {"format": "tunedb", "schema_version": schema_version, "created_by": created_by,
            "written_by": TUNEDB_VERSION}


def write_marker(p: Path, info: dict) -> None:
    """Replace the marker of DB ``p`` atomically (temp file, fsync, rename, directory fsync)."""
    atomic_write_bytes(p / MARKER, json.dumps(info).encode())


def read_marker(p: Path) -> dict:
    """The marker of DB ``p``, checked: ValueError (one line) when it is not a tunedb marker or
    names a schema version newer than this tunedb reads."""
    try:
        info = json.loads((p / MARKER).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        info = {}
    if not isinstance(info, dict) or info.get("format") != "tunedb":
        raise ValueError(f"{p} is not a tunedb database ({MARKER} is not ours)")
    v = info.get("schema_version", 0)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{p} is not a tunedb database ({MARKER} has no valid schema_version)")
    if v > SCHEMA_VERSION:
        by = info.get("written_by") or info.get("created_by") or "?"
        raise ValueError(f"{p} was written by tunedb {by} (schema {v}); this is tunedb {TUNEDB_VERSION} "
                         f"(schema <= {SCHEMA_VERSION}): upgrade tunedb")
    return info


def schema_version(p: Path) -> int:
    """The schema version the marker of DB ``p`` names (checked as ``read_marker`` does)."""
    return int(read_marker(p)["schema_version"])


def _check_marker(p: Path, marker: Path) -> None:
    read_marker(p)


def prepare(path: str | os.PathLike, create: bool) -> Path:
    """Check (or, when missing and ``create``, create) the DB directory at ``path`` and its
    subdirectories; returns it.  A DB holding a symbolic link anywhere below ``path`` is refused
    (``OutsideRootError``, a ValueError: one line naming the link): ``path`` itself may be a
    link, nothing inside it may.  FileNotFoundError, NotADirectoryError or ValueError when it
    is not (or cannot be) a DB this version reads.  Safe to call from many processes at once
    on the same missing path (see module docstring)."""
    p = Path(path)
    if not p.exists():
        if not create:
            raise FileNotFoundError(f"no tunedb database at {p}")
        p.mkdir(parents=True, exist_ok=True)
        try:
            fsync_dir(p.parent)
        except OSError:
            pass
    elif not p.is_dir():
        raise NotADirectoryError(f"{p} is not a directory")
    marker = p / MARKER
    if not marker.exists():
        names = os.listdir(p)
        if not _being_created(names) and not (p / "records").is_dir():
            if not marker.exists():  # (written by a concurrent creator after we looked)
                raise ValueError(f"{p} is a non-empty directory that is not a tunedb database")
        else:
            for n in names:
                if n.startswith("_tmp-"):
                    remove_dead_temp(p / n, max_age_s=60.0)  # a marker temp of a killed creator
            if not marker.exists():
                # every concurrent creator writes the same content; the last rename wins
                atomic_write_bytes(marker, json.dumps(marker_info()).encode())
    _check_marker(p, marker)
    refuse_links_under(p)
    for d in SUBDIRS:
        try:
            (p / d).mkdir(exist_ok=True)
        except OSError:
            if d != "journal":  # a read-only DB of an older layout has none
                raise
    return p
