"""Verdicts on records: ``verdicts/part-*.parquet``, append-only (see "Provenance and verdicts"
in ``tunedb.index.contract.base``).

Each file holds (record_id, verdict, marked_at).  The latest verdict of a record wins.  A file is
written under a temp name and published with fsync and rename
(``tunedb.index.support.fsutil.atomic_write_bytes``), so a crash leaves all of one ``mark`` call
or none of it; an unreadable file (a torn copy from another tool) is skipped.  The directory is made on the first verdict (DBs of schema 1 have none).
"""

from __future__ import annotations

import datetime as _dt
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tunedb.index.support.fsutil import atomic_write_bytes, fsync_dir

DIRNAME = "verdicts"
VERDICT_SCHEMA = pa.schema([("record_id", pa.string()), ("verdict", pa.string()),
                            ("marked_at", pa.timestamp("us", tz="UTC"))])


def files(verdict_dir: Path) -> list[Path]:
    """The published verdict files, oldest first."""
    return sorted(verdict_dir.glob("part-*.parquet")) if verdict_dir.is_dir() else []


def load(verdict_dir: Path) -> dict[str, str]:
    """record_id -> its latest verdict."""
    out: dict[str, str] = {}
    for f in files(verdict_dir):
        try:
            t = pq.read_table(f)
        except (OSError, pa.ArrowInvalid):
            continue
        out.update(zip(t.column("record_id").to_pylist(), t.column("verdict").to_pylist()))
    return out


def append(verdict_dir: Path, verdicts: dict[str, str]) -> None:
    """Durably store ``verdicts`` (already checked) as one new file."""
    if not verdict_dir.is_dir():
        verdict_dir.mkdir(exist_ok=True)
        fsync_dir(verdict_dir.parent)
    now = _dt.datetime.now(_dt.timezone.utc)
    t = pa.Table.from_pylist([{"record_id": r, "verdict": v, "marked_at": now} for r, v in verdicts.items()],
                             schema=VERDICT_SCHEMA)
    buf = pa.BufferOutputStream()
    pq.write_table(t, buf)
    atomic_write_bytes(verdict_dir / f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.parquet", buf.getvalue().to_pybytes())
