"""The directory of a DB: its marker file and subdirectories.

``tunedb.json`` (the marker) names the format and the schema version that created the DB;
a DB of a newer schema version is refused rather than misread.  The marker is written
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

from tunedb.index.parquet.fsutil import atomic_write_bytes, fsync_dir, remove_dead_temp
from tunedb.index.version import SCHEMA_VERSION, TUNEDB_VERSION

MARKER = "tunedb.json"
SUBDIRS = ("records", "invalidations", "derived", "journal")
LOCK = "_lock"


def _being_created(names: list[str]) -> bool:
    """Whether a directory holding ``names`` (and no marker) is a DB that a creator is making."""
    return all(n in SUBDIRS or n in (LOCK, MARKER) or (n.startswith("_tmp-") and n.endswith(".json"))
               for n in names)


def _check_marker(p: Path, marker: Path) -> None:
    try:
        info = json.loads(marker.read_text())
    except (OSError, json.JSONDecodeError):
        info = {}
    if not isinstance(info, dict) or info.get("format") != "tunedb":
        raise ValueError(f"{p} is not a tunedb database ({MARKER} is not ours)")
    if int(info.get("schema_version", 0)) > SCHEMA_VERSION:
        raise ValueError(f"{p} has schema version {info['schema_version']}, newer than this tunedb "
                         f"({SCHEMA_VERSION})")


def prepare(path: str | os.PathLike, create: bool) -> Path:
    """Check (or, when missing and ``create``, create) the DB directory at ``path`` and its
    subdirectories; returns it.  FileNotFoundError, NotADirectoryError or ValueError when it
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
                atomic_write_bytes(marker, json.dumps({"format": "tunedb", "schema_version": SCHEMA_VERSION,
                                                       "created_by": TUNEDB_VERSION}).encode())
    _check_marker(p, marker)
    for d in SUBDIRS:
        try:
            (p / d).mkdir(exist_ok=True)
        except OSError:
            if d != "journal":  # a read-only DB of an older layout has none
                raise
    return p
