"""Child process of the outside-reader tests: run one write operation on a DB, counting the file
system calls it makes or SIGKILLed right after one of them.

    python outside_workers.py OP DB count        -> prints {"rename": n, "unlink": n, ...}
    python outside_workers.py OP DB NAME:K       -> SIGKILL after the K-th os.NAME of OP
    python outside_workers.py OP DB none         -> runs OP to its end

OP: commit, fold, recover, compact, dedup, forget, forget-target, upgrade; and the set-up steps
abandon (commit to a journal and die) and churn (commits, compactions, a forget).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys

from tunedb.index import ParquetStore, Record
from tunedb.index.parquet.upgrade import upgrade

CALLS = ("rename", "unlink", "fsync", "link")
TARGETS = [{"kind": "cpu", "name": f"outside-{i}"} for i in range(3)]
WORKLOAD = {"family": "matmul", "M": 32, "N": 32, "K": 32}


def records(tag: str, n: int, start: int = 0, id_tag: str | None = None) -> list[Record]:
    """``n`` records over the three targets, their ids fixed by ``tag`` and position (a rerun
    makes the same ones; ``id_tag`` names them instead: the same measurements again under other
    ids); configs repeat every 50 so that dedup and keep-top have work."""
    return [Record(TARGETS[j % 3], WORKLOAD, {"tag": tag, "j": j % 50}, [1e-3 * (1 + (start + j) % 7)],
                   record_id=hashlib.blake2b(f"{id_tag or tag}/{j}".encode(), digest_size=16).hexdigest())
            for j in range(n)]


def arm(point: str) -> dict[str, int]:
    """Wrap ``os.rename/unlink/fsync/link``: count calls, and SIGKILL after the K-th call of
    NAME when ``point`` is ``NAME:K``."""
    counts = dict.fromkeys(CALLS, 0)
    name, k = (point.split(":") + ["0"])[:2] if ":" in point else ("", "0")
    for n in CALLS:
        real = getattr(os, n)

        def wrapper(*args, _n=n, _real=real, **kwargs):
            out = _real(*args, **kwargs)
            counts[_n] += 1
            if _n == name and counts[_n] >= int(k):
                os.kill(os.getpid(), signal.SIGKILL)
            return out
        setattr(os, n, wrapper)
    return counts


def main(op: str, path: str, point: str) -> None:
    if op == "abandon":  # leave a journal whose writer is gone
        db = ParquetStore.open(path)
        for i in range(12):
            db.commit(records(f"journal-{i}", 1, i))
        os._exit(0)
    if op == "churn":  # commits, compactions, then a forget: what a reader loop reads beside
        db = ParquetStore.open(path)
        for i in range(8):
            db.commit(records(f"w{i}", 300, i))
            db.compact()
        db.forget(target=TARGETS[1])
        os._exit(0)
    db = None if op in ("upgrade", "recover") else ParquetStore.open(path)
    if op == "fold":
        for i in range(12):  # small commits: the journal (acknowledged before anything is armed)
            db.commit(records(f"fold-{i}", 1, i))
    counts = arm(point if point != "count" else "")
    if op == "commit":
        db.commit(records("new", 900, 3))
    elif op == "fold":
        db.close()  # folds this handle's journal
    elif op == "recover":
        ParquetStore.open(path)  # folds the abandoned journal the test left
    elif op == "compact":
        db.compact()
    elif op == "dedup":
        db.dedup()
    elif op == "forget":
        db.forget(keep_top=1)
    elif op == "forget-target":
        db.forget(target=TARGETS[1])
    elif op == "upgrade":
        upgrade(path)
    else:
        raise SystemExit(f"unknown op {op}")
    if point == "count":
        print(json.dumps(counts), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
