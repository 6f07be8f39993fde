"""Child processes for the store's crash and concurrency tests (run as scripts)."""

from __future__ import annotations

import sys
import time

from tunedb.index import Record, TuningDB


def commit_loop(path: str, tag: str, n: int, batch: int) -> None:
    """Commit ``n`` batches; print each acknowledged record_id once commit returned."""
    db = TuningDB.open(path)
    t = {"kind": "cpu", "name": f"crash-{tag}"}
    w = {"family": "matmul", "M": 64, "N": 64, "K": 64}
    for i in range(n):
        recs = [Record(t, w, {"tile": i, "j": j, "pad": "x" * 200}, [1e-3 + i * 1e-6]) for j in range(batch)]
        db.commit(recs)
        for r in recs:
            sys.stdout.write(r.record_id + "\n")
        sys.stdout.flush()


def writer(path: str, tag: str, n: int) -> None:
    db = TuningDB.open(path)
    t = {"kind": "cpu", "name": "shared-target"}
    w = {"family": "matmul", "M": 8}
    for i in range(n):
        db.commit(Record(t, w, {"writer": tag, "i": i}, [1e-3]))
    print("done", tag, flush=True)


def reader_compactor(path: str, seconds: float) -> None:
    db = TuningDB.open(path)
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        db.refresh()
        _ = len(db)
        db.records()
        db.compact()
        n += 1
        time.sleep(0.05)
    print("compactions", n, flush=True)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "commit-loop":
        commit_loop(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif cmd == "writer":
        writer(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif cmd == "reader":
        reader_compactor(sys.argv[2], float(sys.argv[3]))
