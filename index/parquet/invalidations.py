"""Stale-marking of targets: ``invalidations/part-*.parquet``, append-only.

Each file holds (target_key, target_name, invalidated_at).  Records of a target committed
before its latest invalidation are stale: they no longer answer lookup/best.  A file is
written under a temp name and published with fsync and rename (``tunedb.index.support.fsutil.atomic_write_bytes``);
an unreadable file (a torn copy from another tool) is skipped.
Times: ``invalidated_at`` is a UTC timestamp; ``load`` returns integer microseconds since
the epoch.
"""

from __future__ import annotations

import datetime as _dt
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tunedb.index.support.fsutil import atomic_write_bytes

INVAL_SCHEMA = pa.schema([("target_key", pa.string()), ("target_name", pa.string()),
                          ("invalidated_at", pa.timestamp("us", tz="UTC"))])


def load(inval_dir: Path) -> dict[str, int]:
    """target_key -> its latest invalidation (microseconds since the epoch)."""
    inv: dict[str, int] = {}
    for f in sorted(inval_dir.glob("part-*.parquet")):
        try:
            t = pq.read_table(f)
        except (OSError, pa.ArrowInvalid):
            continue
        for k, ts in zip(t.column("target_key").to_pylist(),
                         t.column("invalidated_at").cast(pa.int64()).to_pylist()):
            inv[k] = max(inv.get(k, 0), ts)
    return inv


def append(inval_dir: Path, target_key: str, target_name: str) -> None:
    """Durably record that ``target_key`` is invalidated now."""
    t = pa.Table.from_pylist([{"target_key": target_key, "target_name": target_name,
                               "invalidated_at": _dt.datetime.now(_dt.timezone.utc)}], schema=INVAL_SCHEMA)
    buf = pa.BufferOutputStream()
    pq.write_table(t, buf)
    atomic_write_bytes(inval_dir / f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.parquet", buf.getvalue().to_pybytes())
