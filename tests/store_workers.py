"""Child processes for the store's crash and concurrency tests (run as scripts; ``race_open``
is a multiprocessing target)."""

from __future__ import annotations

import errno
import os
import random
import signal
import sys
import time
import traceback
from pathlib import Path

from tunedb.index import ParquetStore, Record

DURABILITY_TARGETS = [{"kind": "cpu", "name": f"durable-{i}"} for i in range(3)]
DURABILITY_WORKLOAD = {"family": "matmul", "M": 32, "N": 32, "K": 32}


def durable_records(tag: str, n: int, targets: int = 2, pad: int = 0, rng: random.Random | None = None
                    ) -> list[Record]:
    """``n`` distinct records spread over the first ``targets`` targets (``pad`` bytes of
    incompressible filler each)."""
    out = []
    for j in range(n):
        cfg = {"tag": tag, "j": j}
        if pad:
            cfg["pad"] = (rng or random).randbytes(pad // 2).hex()
        out.append(Record(DURABILITY_TARGETS[j % targets], DURABILITY_WORKLOAD, cfg, [1e-3 * (1 + j % 7)]))
    return out


def kill_after(name: str, count: int) -> None:
    """SIGKILL this process right after its ``count``-th call of ``os.<name>`` (rename, unlink,
    fsync) has returned: a crash at a chosen point of a fold or a compaction."""
    real = getattr(os, name)
    calls = [0]

    def wrapper(*args, **kwargs):
        out = real(*args, **kwargs)
        calls[0] += 1
        if calls[0] >= count:
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    setattr(os, name, wrapper)


def kill_at(point: str) -> None:
    """Arm :func:`kill_after` for a kill point ``<name>:<count>`` (``none``: the parent kills)."""
    if point != "none":
        name, k = point.split(":")
        kill_after(name, int(k))


def emit(tag: str, recs: list[Record]) -> None:
    sys.stdout.write("".join(f"{tag} {r.record_id}\n" for r in recs))
    sys.stdout.flush()


def fill_disk(ballast: Path, leave: int) -> None:
    """Fill the file system of ``ballast`` until ENOSPC, then free ``leave`` bytes of it."""
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (1 << 16, 1 << 12, 1 << 8, 1):
            data = b"\xa5" * chunk
            try:
                while True:
                    if os.write(fd, data) < len(data):
                        break
            except OSError as e:
                if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
        os.fsync(fd)
    finally:
        os.close(fd)


def disk_full(path: str, ballast: str, seed: int) -> None:
    """Fill the disk, commit until commits fail, try compact (every third seed), free the disk,
    commit again on the same handle, then SIGKILL itself.  Prints ``A <id>`` per acknowledged
    record, ``F <id>`` per record of a commit that raised, and ``E <kind> <errno>`` /
    ``C <outcome>`` lines."""
    rng = random.Random(seed)
    db = ParquetStore.open(path)
    db.JOURNAL_FOLD = rng.choice([25, 200, 10**9])  # folds on a full disk must not fail commits
    db.AUTO_COMPACT_FILES = rng.choice([4, 64])
    warm = durable_records(f"warm{seed}", 40, pad=100, rng=rng)
    db.commit(warm)
    emit("A", warm)
    fill_disk(Path(ballast), rng.choice([0, 2, 6, 16, 40, 100, 200, 400]) * 1024)
    sizes = [1, 2, 5, 16, 64, 65, 150, 2100]
    failures = 0
    for i in range(400):
        n = rng.choice(sizes)
        recs = durable_records(f"s{seed}-{i}", n, targets=rng.choice([1, 2, 3]), pad=rng.choice([50, 300]), rng=rng)
        kind = "journal" if n <= db.JOURNAL_MAX else ("parts" if n <= db.SMALL_COMMIT else "large")
        try:
            db.commit(recs)
        except OSError as e:
            emit("F", recs)
            print("E", kind, e.errno, flush=True)
            failures += 1
            if failures >= 6:
                break
            continue
        emit("A", recs)
    if seed % 3 == 0:  # (otherwise the same journal goes on after the failed appends)
        try:
            db.compact()
            print("C returned", flush=True)
        except OSError as e:
            print("C OSError", e.errno, flush=True)
    os.unlink(ballast)
    _commit_after_freeing_then_die(db, seed)


def _commit_after_freeing_then_die(db: ParquetStore, seed: int) -> None:
    """Space is back: five more acknowledged commits on the same handle, then SIGKILL ourselves."""
    print("FREED", flush=True)
    for i in range(5):
        recs = durable_records(f"after{seed}-{i}", 10, targets=2)
        db.commit(recs)
        emit("A", recs)
    os.kill(os.getpid(), signal.SIGKILL)


def file_size_limit(path: str, seed: int) -> None:
    """The disk-full scenario without a mount: ``RLIMIT_FSIZE`` makes writes past a size fail
    (EFBIG) -- journal appends and part files alike; then the limit is lifted ("freed"), more
    commits follow on the same handle, and the process SIGKILLs itself.  Output as disk_full."""
    import resource

    rng = random.Random(seed)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing
    db = ParquetStore.open(path)
    db.JOURNAL_FOLD = 10**9
    warm = durable_records(f"warm{seed}", 30, pad=100, rng=rng)
    db.commit(warm)
    emit("A", warm)
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (rng.randint(20_000, 200_000), hard))
    failures = 0
    for i in range(400):
        n = rng.choice([1, 4, 16, 64, 150, 2100])
        recs = durable_records(f"s{seed}-{i}", n, targets=rng.choice([1, 2, 3]), pad=rng.choice([50, 300]), rng=rng)
        try:
            db.commit(recs)
        except OSError as e:
            emit("F", recs)
            print("E", "any", e.errno, flush=True)
            failures += 1
            if failures >= 5:
                break
            continue
        emit("A", recs)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    _commit_after_freeing_then_die(db, seed)


def threads_file_size_limit(path: str, seed: int, threads: int) -> None:
    """Group commit on a full disk: ``threads`` threads share one handle, each committing 1-4
    records at a time, while ``RLIMIT_FSIZE`` makes journal writes fail part-way (a failed group
    write fails every commit it held).  Then the limit is lifted, more commits follow on the
    same handle, and the process SIGKILLs itself.  Output as disk_full."""
    import resource
    import threading

    rng = random.Random(seed)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    db = ParquetStore.open(path)
    db.JOURNAL_FOLD = 10**9
    out_lock = threading.Lock()
    warm = durable_records(f"warm{seed}", 8, pad=100, rng=rng)
    db.commit(warm)
    emit("A", warm)
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (rng.randint(30_000, 120_000), hard))

    def run(t: int) -> None:
        r = random.Random(seed * 100 + t)
        for i in range(150):
            recs = durable_records(f"t{seed}-{t}-{i}", r.choice([1, 1, 2, 4]), pad=300, rng=r)
            try:
                db.commit(recs)
            except OSError as e:
                with out_lock:
                    emit("F", recs)
                    print("E", "any", e.errno, flush=True)
                continue
            with out_lock:
                emit("A", recs)
    ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for x in ts:
        x.start()
    for x in ts:
        x.join()
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    _commit_after_freeing_then_die(db, seed)


def populate_parts(path: str, tag: str, commits: int, per_commit: int) -> None:
    """Commit ``commits`` times ``per_commit`` records over 3 targets, a Parquet file per
    commit and target; prints ``A <id>`` lines (acknowledged) and exits normally."""
    db = ParquetStore.open(path)
    db.JOURNAL_MAX = 0
    db.AUTO_COMPACT_FILES = 10**9
    for i in range(commits):
        recs = durable_records(f"{tag}-{i}", per_commit, targets=3)
        db.commit(recs)
        emit("A", recs)
    db.close()


def compact_kill(path: str, point: str) -> None:
    """Open ``path`` and compact it; ``point`` ``rename:<k>`` / ``unlink:<k>`` / ``fsync:<k>``
    SIGKILLs this process right after that call (``none``: the parent kills it)."""
    db = ParquetStore.open(path)
    kill_at(point)
    print("ready", flush=True)
    db.compact()
    print("done", flush=True)


def fold_kill(path: str, tag: str, n: int, point: str) -> None:
    """Commit ``n`` records in small commits to this process's journal (over 3 targets), print
    them, then fold the journal (``close``) and get SIGKILLed at ``point`` (see compact_kill)."""
    db = ParquetStore.open(path)
    db.JOURNAL_FOLD = 10**9
    for i in range(0, n, 8):
        recs = durable_records(f"{tag}-{i}", min(8, n - i), targets=3)
        db.commit(recs)
        emit("A", recs)
    kill_at(point)
    print("folding", flush=True)
    db.close()
    print("done", flush=True)
    os._exit(0)


def recover_kill(path: str, point: str) -> None:
    """Open ``path`` (which folds abandoned journals) and get SIGKILLed at ``point``."""
    kill_at(point)
    print("ready", flush=True)
    db = ParquetStore.open(path)
    print("done", len(db), flush=True)
    os._exit(0)


def verify(path: str) -> None:
    """Open ``path`` (finishing any crash recovery), read it, close it, open it again, and
    print one JSON line: tunedb's record ids and counts, what pyarrow counts in
    ``records/`` (hive dataset) and in ``snapshot_files()``, leftover temp files and journals."""
    import json

    import pyarrow.dataset as ds

    db = ParquetStore.open(path)
    ids = db.records().column("record_id").to_pylist()
    n = len(db)
    db.close()
    db2 = ParquetStore.open(path)
    n2 = len(db2)
    snap = db2.snapshot_files()
    snap_t = ds.dataset([str(f) for f in snap], format="parquet").to_table(columns=["record_id"]) if snap else None
    hive = ds.dataset(Path(path) / "records", partitioning="hive").to_table(columns=["record_id"])
    root = Path(path)
    print(json.dumps({
        "ids": ids, "len": n, "len_reopened": n2,
        "pyarrow_rows": hive.num_rows, "pyarrow_distinct": len(set(hive.column("record_id").to_pylist())),
        "snapshot_rows": 0 if snap_t is None else snap_t.num_rows,
        "snapshot_distinct": 0 if snap_t is None else len(set(snap_t.column("record_id").to_pylist())),
        "temps": sorted(str(p.relative_to(root)) for p in root.rglob("_tmp-*")),
        "journals": sorted(os.listdir(root / "journal")),
    }), flush=True)


def race_open(base: str, rounds: int, barrier, results) -> None:
    """multiprocessing target: in each round wait for the others, then open (creating) the DB
    ``<base>/race<round>`` and commit one record; put ``(pid, round, error or None)``."""
    for r in range(rounds):
        barrier.wait()
        err = None
        try:
            db = ParquetStore.open(Path(base) / f"race{r}")
            db.commit(Record(DURABILITY_TARGETS[0], DURABILITY_WORKLOAD, {"pid": os.getpid(), "round": r}, [1.0]))
            db.close()
        except Exception:
            err = traceback.format_exc(limit=3)
        results.put((os.getpid(), r, err))


def commit_loop(path: str, tag: str, n: int, batch: int) -> None:
    """Commit ``n`` batches; print each acknowledged record_id once commit returned."""
    db = ParquetStore.open(path)
    t = {"kind": "cpu", "name": f"crash-{tag}"}
    w = {"family": "matmul", "M": 64, "N": 64, "K": 64}
    for i in range(n):
        recs = [Record(t, w, {"tile": i, "j": j, "pad": "x" * 200}, [1e-3 + i * 1e-6]) for j in range(batch)]
        db.commit(recs)
        for r in recs:
            sys.stdout.write(r.record_id + "\n")
        sys.stdout.flush()


def writer(path: str, tag: str, n: int) -> None:
    db = ParquetStore.open(path)
    t = {"kind": "cpu", "name": "shared-target"}
    w = {"family": "matmul", "M": 8}
    for i in range(n):
        db.commit(Record(t, w, {"writer": tag, "i": i}, [1e-3]))
    print("done", tag, flush=True)


def reader_compactor(path: str, seconds: float) -> None:
    db = ParquetStore.open(path)
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
    elif cmd == "disk-full":
        disk_full(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif cmd == "file-size-limit":
        file_size_limit(sys.argv[2], int(sys.argv[3]))
    elif cmd == "threads-file-size-limit":
        threads_file_size_limit(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "populate-parts":
        populate_parts(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif cmd == "compact-kill":
        compact_kill(sys.argv[2], sys.argv[3])
    elif cmd == "fold-kill":
        fold_kill(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif cmd == "verify":
        verify(sys.argv[2])
    elif cmd == "recover-kill":
        recover_kill(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(f"unknown command {cmd!r}")
