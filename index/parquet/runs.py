"""Tuning-run summaries of a DB directory: ``runs/<run_id>.json``, one file per run (see "Tuning
runs" in ``tunedb.index.contract.base``).

A file holds the UTF-8 JSON text that ``tunedb.index.contract.runs_codec.prepare_run`` made (one object with
``run_id``, ``kind`` and ``stored``).  It is written as a new temp file in ``runs/`` (a name
readers ignore: ``_tmp-...``), fsync'ed, renamed over ``<run_id>.json`` and the directory
fsync'ed (``fsutil.atomic_write_bytes``): durable when :func:`write` returns, and a crash
leaves the old summary or the new one, never a mix.  Saving a run again replaces its file.
Nothing else of the DB reads ``runs/``: it is not under ``records/`` (so neither tunedb nor
``pyarrow.dataset`` of ``records/`` sees it) and no record read, count or ``change_token``
looks at it.  The directory is made on the first run (older DBs have none; a read-only DB
never gets one).  A file that does not parse (a torn copy from another tool) is skipped with a
``RunWarning``.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

from tunedb.index.contract.runs_codec import RunWarning, decode_run
from tunedb.index.support.fsutil import atomic_write_bytes, fsync_dir, remove_dead_temp

DIRNAME = "runs"
_NAME_RE = re.compile(r"[0-9a-f]{32}\.json")


def write(runs_dir: Path, run_id: str, text: str) -> Path:
    """Durably store ``text`` (a checked summary of ``run_id``) as ``runs_dir/<run_id>.json``,
    replacing an earlier one; returns the file.  Makes ``runs_dir`` when missing (and fsyncs
    its parent) and removes temp files killed writers left there.  OSError (ENOSPC, ...) when
    it cannot write: then the earlier file, if any, is as it was and no temp file is left."""
    if not runs_dir.is_dir():
        runs_dir.mkdir(exist_ok=True)
        fsync_dir(runs_dir.parent)
    else:
        for e in os.scandir(runs_dir):
            if e.name.startswith("_tmp-"):
                remove_dead_temp(Path(e.path))
    final = runs_dir / f"{run_id}.json"
    atomic_write_bytes(final, text.encode("utf-8"))
    return final


def load(runs_dir: Path) -> list[dict]:
    """Every readable summary in ``runs_dir`` (``[]`` when it does not exist), in no particular
    order.  Files whose name is not ``<32 hex>.json`` (temp files) are ignored; one that cannot
    be read or parsed, or whose ``run_id`` is not its name, is skipped with a ``RunWarning``."""
    try:
        names = os.listdir(runs_dir)
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for n in sorted(names):
        if not _NAME_RE.fullmatch(n):
            continue
        path = runs_dir / n
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        except OSError as e:
            warnings.warn(f"skipping unreadable run summary {path}: {e}", RunWarning, stacklevel=2)
            continue
        d = decode_run(data, str(path))
        if d is None:
            continue
        if d["run_id"] != n[:-len(".json")]:
            warnings.warn(f"skipping run summary {path}: its run_id is {d['run_id']!r}", RunWarning, stacklevel=2)
            continue
        out.append(d)
    return out


__all__ = ["DIRNAME", "write", "load"]
