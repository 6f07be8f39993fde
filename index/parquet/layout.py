"""The directory of a DB: its marker file and subdirectories.

``tunedb.json`` (the marker) names the format and the schema version that created the DB;
a DB of a newer schema version is refused rather than misread.  The marker is written
atomically (temp file, fsync, rename, directory fsync), so a crash never leaves a
half-written one.  See ``index.store`` for what the subdirectories hold.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tunedb.index.parquet.fsutil import atomic_write_bytes
from tunedb.index.version import SCHEMA_VERSION, TUNEDB_VERSION

MARKER = "tunedb.json"
SUBDIRS = ("records", "invalidations", "derived", "journal")


def prepare(path: str | os.PathLike, create: bool) -> Path:
    """Check (or, when missing and ``create``, create) the DB directory at ``path`` and its
    subdirectories; returns it.  FileNotFoundError, NotADirectoryError or ValueError when it
    is not (or cannot be) a DB this version reads."""
    p = Path(path)
    if not p.exists():
        if not create:
            raise FileNotFoundError(f"no tunedb database at {p}")
        p.mkdir(parents=True, exist_ok=True)
    elif not p.is_dir():
        raise NotADirectoryError(f"{p} is not a directory")
    marker = p / MARKER
    if marker.exists():
        try:
            info = json.loads(marker.read_text())
        except (OSError, json.JSONDecodeError):
            info = {}
        if info.get("format") != "tunedb":
            raise ValueError(f"{p} is not a tunedb database ({MARKER} is not ours)")
        if int(info.get("schema_version", 0)) > SCHEMA_VERSION:
            raise ValueError(f"{p} has schema version {info['schema_version']}, newer than this tunedb "
                             f"({SCHEMA_VERSION})")
    else:
        if any(p.iterdir()) and not (p / "records").is_dir():
            raise ValueError(f"{p} is a non-empty directory that is not a tunedb database")
        atomic_write_bytes(marker, json.dumps({"format": "tunedb", "schema_version": SCHEMA_VERSION,
                                               "created_by": TUNEDB_VERSION}).encode())
    for d in SUBDIRS:
        try:
            (p / d).mkdir(exist_ok=True)
        except OSError:
            if d != "journal":  # a read-only DB of an older layout has none
                raise
    return p
