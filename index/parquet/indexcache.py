"""A partition's built index, cached in ``derived/index/``: the first query of a target in a new
process reads it instead of re-reading the index columns and sorting them.

Derived data, rebuildable: the Parquet files are the truth.  A cache file is named by the
partition (its 16-hex key prefix) and a signature of exactly what the index was built from --
the live files' names and sizes (published files are immutable and never renamed over) and the
target's invalidation time -- so a commit, a compaction, a forget or an invalidation makes a
different signature and the old file is simply not used again (it is replaced at the next
build).  A missing, torn, foreign or inconsistent file reads as a miss.  Files are ``.npz``
archives of plain numeric arrays, read with ``allow_pickle=False`` (nothing in them is
executed); written under a temporary name and renamed into place, so readers never see half
a file.  Partitions with journal rows are not cached (the journal is folded soon).

Only partitions of at least ``MIN_ROWS`` rows are cached: smaller ones build in a few
milliseconds.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import numpy as np

from tunedb.index.parquet.memindex import Arrays
from tunedb.index.support.fsutil import replace_derived

SUBDIR = "index"
MIN_ROWS = 50_000
_A_COLUMNS = ("lookup_key", "entry_key", "cost", "ok", "rid_hash", "committed", "timestamp", "file", "row", "live")
_OTHER = ("last_keys", "last_packed", "by_entry", "entry_sorted", "rid_sorted")
_FORMAT = 1


def signature(files: list[str], invalidated_at: int | None) -> str | None:
    """Signature of an index built from ``files`` (in file-index order); None when one of them
    is not a published Parquet file (a journal's rows) or is gone."""
    h = hashlib.blake2b(f"tunedb-index-{_FORMAT}\0{invalidated_at}\0".encode(), digest_size=16)
    for f in files:
        if "::" in f:
            return None
        try:
            size = os.stat(f).st_size
        except OSError:
            return None
        h.update(f"{os.path.basename(f)}\0{size}\0".encode())
    return h.hexdigest()


def _path(derived: Path, prefix: str, sig: str) -> Path:
    return derived / SUBDIR / f"{prefix}-{sig}.npz"


def load(derived: Path, prefix: str, sig: str, n_files: int) -> tuple[Arrays, str] | None:
    """(The cached index of partition ``prefix`` built as ``sig`` says, its full target key), or
    None (a miss)."""
    p = _path(derived, prefix, sig)
    try:
        with np.load(p, allow_pickle=False) as z:
            a = {k: z["a_" + k] for k in _A_COLUMNS}
            other = {k: z[k] for k in _OTHER}
            tkey = str(z["target_key"])
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    if not tkey.startswith(prefix):
        return None
    n = len(a["lookup_key"])
    if any(len(v) != n for v in a.values()) or len(other["rid_sorted"]) != n or \
            (n and (int(a["file"].max()) >= n_files or int(a["file"].min()) < 0)):
        return None
    return Arrays(a, other["last_keys"], other["last_packed"], other["by_entry"], other["entry_sorted"],
                  other["rid_sorted"]), tkey


def save(derived: Path, prefix: str, sig: str, arrays: Arrays, target_key: str) -> None:
    """Cache ``arrays`` as partition ``prefix``'s index of signature ``sig`` and remove its older
    cache files.  Best effort: a read-only or full disk leaves no cache (and no temp file)."""
    if len(arrays.a["lookup_key"]) < MIN_ROWS or not target_key.startswith(prefix):
        return
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, **{"a_" + k: arrays.a[k] for k in _A_COLUMNS},
                     **{k: getattr(arrays, k) for k in _OTHER}, target_key=np.array(target_key))
    replace_derived(_path(derived, prefix, sig), write, f"{prefix}-*.npz")
