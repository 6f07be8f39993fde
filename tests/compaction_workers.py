"""Child processes of the concurrent-compaction test (``multiprocessing`` targets, 'spawn' context).

Each worker runs against one DB directory until a deadline (``time.time()`` seconds) and then
writes one JSON file, ``out``, with what it did: ``errors`` (the tracebacks of every call that
raised, as text), ``calls`` (how many calls it made) and, for writers, ``acked`` (the record ids
of every commit that returned).  A worker that dies writes nothing: the test fails on that too.

Records are spread over ``TARGETS`` targets with one workload each; every record has a config
of its own (``{"tag", "i", "j"}``), so none is a repeat that ``dedup`` would remove.
"""

from __future__ import annotations

import json
import random
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tunedb.index import ParquetStore, Record

TARGETS = [{"kind": "cpu", "name": f"race-{i}"} for i in range(6)]
WORKLOAD = {"family": "matmul", "M": 16, "N": 16, "K": 16}


def batch(tag: str, i: int, n: int, rng: random.Random) -> list[Record]:
    """``n`` new records (unique configs) of commit ``i`` of writer ``tag``, over random targets."""
    return [Record(rng.choice(TARGETS), WORKLOAD, {"tag": tag, "i": i, "j": j}, [1e-3 * (1 + rng.random())])
            for j in range(n)]


def _report(out: str, **fields: Any) -> None:
    Path(out).write_text(json.dumps(fields))


def _guarded(errors: list[str], call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``; its traceback appended to ``errors`` (and None returned) when it raises."""
    try:
        return call(*args)
    except Exception:
        errors.append(traceback.format_exc(limit=-8))
        return None


def writer(path: str, tag: str, deadline: float, out: str, seed: int) -> None:
    """Commit batches of 1-8 new records until ``deadline``: a new handle every few commits (its
    first commit to a target reads that target's files as listed when it opened), some commits
    as part files (``JOURNAL_MAX`` 0), others through the journal."""
    rng = random.Random(seed)
    acked: list[str] = []
    errors: list[str] = []
    calls = 0
    while time.time() < deadline:
        db = _guarded(errors, ParquetStore.open, path)
        if db is None:
            time.sleep(0.01)
            continue
        db.JOURNAL_MAX = rng.choice([0, 0, 64])
        for _ in range(rng.randint(1, 4)):
            time.sleep(rng.random() * 0.02)  # (a tuner measures between commits)
            recs = batch(tag, calls, rng.randint(1, 8), rng)
            calls += 1
            if _guarded(errors, db.commit, recs) is not None:
                acked.extend(r.record_id for r in recs)
            if time.time() >= deadline:
                break
        _guarded(errors, db.close)
    _report(out, acked=acked, errors=errors, calls=calls)


def rewriter(path: str, op: str, deadline: float, out: str, seed: int) -> None:
    """Run ``op`` (``compact`` or ``dedup``) in a loop until ``deadline``, on a handle opened
    again every few rounds."""
    rng = random.Random(seed)
    errors: list[str] = []
    calls = files = 0
    while time.time() < deadline:
        db = _guarded(errors, ParquetStore.open, path)
        if db is None:
            time.sleep(0.01)
            continue
        for _ in range(rng.randint(2, 6)):
            st = _guarded(errors, getattr(db, op))
            calls += 1
            files += (st or {}).get("files_before", 0)
            if time.time() >= deadline:
                break
        _guarded(errors, db.close)
    _report(out, errors=errors, calls=calls, files=files)


def _read_once(db: ParquetStore, rng: random.Random) -> None:
    """One of the store's read calls, picked at random (each names a random target)."""
    t = rng.choice(TARGETS)
    op = rng.randrange(9)
    if op == 0:
        db.best(t, WORKLOAD, k=3)
    elif op == 1:
        db.lookup(t, WORKLOAD, {"tag": "w0", "i": rng.randrange(50), "j": 0})
    elif op == 2:
        hits = db.lookup_batch(t, WORKLOAD, [{"tag": "w1", "i": i, "j": 0} for i in range(40)])
        [hits[i] for i in range(40)]
    elif op == 3:
        len(db)
    elif op == 4:
        sum(1 for _ in db.iter_records(t, WORKLOAD))
    elif op == 5:
        db.best_costs_many([(x, WORKLOAD) for x in TARGETS], k=2)
    elif op == 6:
        db.entry_records(t, WORKLOAD)
    elif op == 7:
        db.targets()
        db.stats()
    else:
        db.entries()


def reader(path: str, deadline: float, out: str, seed: int) -> None:
    """Call the store's read API (``_read_once``) until ``deadline``: refreshing between calls,
    and on a new handle every few calls (its partitions are read at their first query)."""
    rng = random.Random(seed)
    errors: list[str] = []
    calls = 0
    while time.time() < deadline:
        db = _guarded(errors, ParquetStore.open, path)
        if db is None:
            time.sleep(0.01)
            continue
        for _ in range(rng.randint(1, 8)):
            if rng.random() < 0.5:
                _guarded(errors, db.refresh)
            _guarded(errors, _read_once, db, rng)
            calls += 1
            if time.time() >= deadline:
                break
        _guarded(errors, db.close)
    _report(out, errors=errors, calls=calls)
