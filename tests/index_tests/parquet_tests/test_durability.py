"""Nothing acknowledged is ever lost (issue 14): a full disk, the first-open race, and what other
readers (pyarrow) count after a crash.  Real files, real processes, real SIGKILLs.

* Disk full: a 2 MB tmpfs (or, where tmpfs cannot be mounted, a loop-mounted ext4 image;
  skipped with the reason when neither can): fill, fail, free, commit again, SIGKILL, reopen,
  close -- every acknowledged record is there, none of a commit that raised.
* A torn line in the middle of a journal (hand-made, no mount): reported, skipped, what
  follows read; the fold keeps the journal instead of deleting it.
* First open of a new path: 8 processes x 20 rounds at once.
* SIGKILL during compaction and during journal folds: tunedb's count, pyarrow's count of
  ``records/`` and of ``snapshot_files()`` all equal the acknowledged count.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tunedb.index import ParquetStore
from tunedb.index.parquet.journal import JournalWarning, encode_rows, read_contents
from tunedb.index.parquet.journal_fold import journal_row

from helpers import TESTS, run_cli, run_command, small_fs
from store_workers import DURABILITY_TARGETS, durable_records

HERE = TESTS
WORKERS = str(HERE / "store_workers.py")


# ------------------------------------------------------------------------------ helpers

def worker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, WORKERS, *args], capture_output=True, text=True, timeout=timeout)


def tagged(out: str, tag: str) -> set[str]:
    """The record ids of the ``<tag> <id>`` lines of a worker's output (a torn last line is not one)."""
    return {p[1] for p in (line.split() for line in out.splitlines()) if len(p) == 2 and p[0] == tag
            and len(p[1]) == 32}


def verify(path: Path) -> dict:
    """What a fresh process finds at ``path`` (see ``store_workers.verify``)."""
    p = worker("verify", str(path))
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1])


def hive_rows(path: Path) -> int:
    """What pyarrow alone (no tunedb) counts in ``records/``."""
    return ds.dataset(path / "records", partitioning="hive").count_rows()


def assert_exact(found: dict, acked: set[str], ctx: str = "") -> None:
    """tunedb, pyarrow over ``records/`` and over ``snapshot_files()`` each hold the acknowledged
    records exactly once, and crash leftovers are gone (``ctx`` names the run in a failure)."""
    ids = found["ids"]
    summary = {k: v for k, v in found.items() if k != "ids"} | {"acked": len(acked), "ids": len(ids),
                                                                "missing": len(acked - set(ids))}
    why = f"{ctx}: {summary}"
    assert len(ids) == len(set(ids)) and set(ids) == acked, why
    assert found["len"] == found["len_reopened"] == len(acked), why
    assert found["pyarrow_rows"] == found["pyarrow_distinct"] == len(acked), why
    assert found["snapshot_rows"] == found["snapshot_distinct"] == len(acked), why
    assert found["temps"] == [] and found["journals"] == [], why


# ------------------------------------------------------------------------------ disk full

DISK_FULL_RUNS = 12


def test_disk_full_loses_nothing_acknowledged_and_keeps_nothing_failed(tmp_path):
    """Fill a 2 MB file system at a different point each run, commit until commits fail (journal
    appends, multi-target part files, large commits; journal folds and automatic compactions on
    the full disk), compact on the full disk, free it, commit again, SIGKILL; then reopen and
    close in a new process."""
    mnt = tmp_path / "mnt"
    totals = {"runs": 0, "acked": 0, "failed_commits": 0, "failed_records": 0}
    with small_fs(mnt) as kind:
        for seed in range(DISK_FULL_RUNS):
            db, ballast = mnt / "db", mnt / "ballast"
            p = worker("disk-full", str(db), str(ballast), str(seed))
            assert p.returncode == -signal.SIGKILL, p.stderr[-3000:]
            assert "FREED" in p.stdout, p.stderr[-3000:]
            acked, failed = tagged(p.stdout, "A"), tagged(p.stdout, "F")
            errors = [line.split() for line in p.stdout.splitlines() if line.startswith("E ")]
            assert errors and all(e[2] in ("28", "122") for e in errors), errors  # ENOSPC / EDQUOT
            compact = next((line for line in p.stdout.splitlines() if line.startswith("C ")), "C skipped")
            found = verify(db)
            ids = set(found["ids"])
            assert not (ids & failed), f"{kind}, seed {seed}: {len(ids & failed)} records of failed commits"
            assert acked <= ids, f"{kind}, seed {seed}: {len(acked - ids)} acknowledged records lost"
            assert_exact(found, acked, f"{kind}, seed {seed}")
            assert compact in ("C OSError 28", "C returned", "C skipped"), compact
            totals["runs"] += 1
            totals["acked"] += len(acked)
            totals["failed_commits"] += len(errors)
            totals["failed_records"] += len(failed)
            shutil.rmtree(db)
    print(f"disk full ({kind}): {totals}")


def _file_size_limit_runs(tmp_path: Path, mode: str, extra: list[str], seeds: int, label: str) -> None:
    """Run worker ``mode`` (a file-size limit, RLIMIT_FSIZE: EFBIG part-way through writes, then
    freed, then SIGKILL) once per seed and check that every acknowledged record is there
    exactly once and none of a failed commit."""
    totals = {"runs": 0, "acked": 0, "failed_commits": 0}
    for seed in range(seeds):
        db = tmp_path / f"db{seed}"
        p = worker(mode, str(db), str(seed), *extra)
        assert p.returncode == -signal.SIGKILL and "FREED" in p.stdout, p.stderr[-3000:]
        acked, failed = tagged(p.stdout, "A"), tagged(p.stdout, "F")
        errors = [line.split() for line in p.stdout.splitlines() if line.startswith("E ")]
        assert errors and all(e[2] == "27" for e in errors), errors  # EFBIG
        found = verify(db)
        assert not (set(found["ids"]) & failed)
        assert_exact(found, acked, f"{label}, seed {seed}")
        totals["runs"] += 1
        totals["acked"] += len(acked)
        totals["failed_commits"] += len(errors)
    print(f"{label}: {totals}")


def test_failed_writes_are_all_or_nothing_without_a_mount(tmp_path):
    """The same rules where nothing can be mounted: a file-size limit (RLIMIT_FSIZE) makes
    journal appends and part files fail part-way (EFBIG); 4 runs, limits varied."""
    _file_size_limit_runs(tmp_path, "file-size-limit", [], 4, "file-size limit")


def test_group_commits_on_a_full_disk_are_all_or_nothing(tmp_path):
    """Threads sharing one handle share journal writes and fsyncs (group commit); when such a
    write fails part-way (RLIMIT_FSIZE: EFBIG), every commit it held raises and none of their
    records survives, while every acknowledged one does (fresh process after a SIGKILL)."""
    _file_size_limit_runs(tmp_path, "threads-file-size-limit", ["6"], 3, "group commits on a file-size limit")


def test_compact_on_a_full_disk_raises_and_loses_nothing(tmp_path):
    """A fresh handle (as the CLI's) on a full disk: the journal a dead writer left cannot be
    folded, so ``compact`` raises OSError (it used to return as if done); once there is room it
    compacts and every record is there."""
    mnt = tmp_path / "mnt"
    with small_fs(mnt):
        db_path = mnt / "db"
        code = ("import os, sys; sys.path.insert(0, sys.argv[2]); from store_workers import durable_records;"
                "from tunedb.index import ParquetStore; db = ParquetStore.open(sys.argv[1]);"
                "[db.commit(durable_records(f'c{i}', 20, targets=3)) for i in range(10)]; os._exit(0)")
        subprocess.run([sys.executable, "-c", code, str(db_path), str(HERE)], check=True, timeout=120)
        assert len(list((db_path / "journal").glob("*.jsonl"))) == 1
        from store_workers import fill_disk

        fill_disk(mnt / "ballast", 0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", JournalWarning)  # open could not fold it either: read in place
            db = ParquetStore.open(db_path)
        assert len(db) == 200
        with pytest.raises(OSError) as e:
            db.compact()
        assert e.value.errno == 28
        assert len(list((db_path / "journal").glob("*.jsonl"))) == 1 and len(db) == 200
        os.unlink(mnt / "ballast")
        st = db.compact()
        assert st["files_after"] == 3 and len(db) == 200 and hive_rows(db_path) == 200
        assert not list((db_path / "journal").glob("*.jsonl"))
        del db


# ------------------------------------------------------------------------ torn journal lines

def _journal_lines(tag: str, n: int) -> list[bytes]:
    rows = [journal_row(r, 1_700_000_000_000_000 + i) for i, r in enumerate(durable_records(tag, n, targets=2))]
    return [encode_rows([row]) for row in rows]


def test_reader_reads_past_a_torn_line_in_the_middle(tmp_path):
    """A torn append followed by good ones (what a failed append used to leave), a corrupt
    complete line, and a torn last line: every good line is read, the bad ones reported."""
    lines = _journal_lines("torn", 6)
    path = tmp_path / "j.jsonl"
    corrupt = bytearray(lines[3])
    corrupt[20] ^= 1  # one flipped bit in the record_id: the checksum no longer matches
    path.write_bytes(lines[0] + lines[1][:37] + lines[2] + bytes(corrupt) + lines[4] + lines[5][:-20])
    with pytest.warns(JournalWarning, match="skipped 2 corrupt line"):
        got = read_contents(path)
    assert [r["record_id"] for r in got.rows] == [_row_id(x) for x in (lines[0], lines[2], lines[4])]
    assert got.bad == [2, 3] and got.torn_tail
    clean = tmp_path / "clean.jsonl"
    clean.write_bytes(b"".join(lines[:3]) + lines[3][:10])
    with warnings.catch_warnings():
        warnings.simplefilter("error", JournalWarning)  # a torn *last* line is no corruption
        got = read_contents(clean)
    assert len(got.rows) == 3 and got.bad == [] and got.torn_tail


def _row_id(line: bytes) -> str:
    return json.loads(line.rpartition(b"\t")[0])["record_id"]


def test_fold_keeps_a_journal_it_could_not_read_whole(tmp_path):
    """An abandoned journal with a corrupt line in the middle: the opener folds its good rows
    (tunedb and pyarrow count them) and keeps the file as ``.corrupt`` instead of deleting it."""
    path = tmp_path / "db"
    ParquetStore.open(path).close()
    lines = _journal_lines("mid", 8)
    j = path / "journal" / "otherhost-1-0123456789ab.jsonl"
    j.write_bytes(b"".join(lines[:3]) + lines[3][:25] + b"".join(lines[4:]))  # line 4 glued to a torn 3
    with pytest.warns(JournalWarning):
        db = ParquetStore.open(path)
    assert len(db) == 7 and hive_rows(path) == 7
    assert not j.exists() and (path / "journal" / (j.name + ".corrupt")).exists()
    assert len(ParquetStore.open(path)) == 7  # the kept file is not read again


# -------------------------------------------------------------------------- first-open race

def test_first_open_race(tmp_path):
    """8 processes open (create) the same missing DB path at once, 20 rounds (every 4th round
    the directory exists, empty, as a mount point would): no failure, and all share one DB."""
    procs, rounds = 8, 20
    for r in range(3, rounds, 4):
        (tmp_path / f"race{r}").mkdir()
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(procs), ctx.Queue()
    from store_workers import race_open

    ps = [ctx.Process(target=race_open, args=(str(tmp_path), rounds, barrier, results)) for _ in range(procs)]
    for p in ps:
        p.start()
    got = [results.get(timeout=300) for _ in range(procs * rounds)]
    for p in ps:
        p.join(timeout=60)
        assert p.exitcode == 0
    failures = [g for g in got if g[2] is not None]
    assert not failures, f"{len(failures)} of {len(got)} opens failed; first: {failures[0][2]}"
    for r in range(rounds):
        assert len(ParquetStore.open(tmp_path / f"race{r}", create=False)) == procs
    print(f"first-open race: {procs} processes x {rounds} rounds, {len(failures)} failures")


# ------------------------------------------------------------------- SIGKILL: compaction

def _compaction_points(hooked: int, timed: int, rng: random.Random) -> list[str]:
    """Kill points of compaction runs: ``hooked`` ones SIGKILL the compactor right after its
    k-th rename (the k-th partition's output published, its inputs not yet deleted), k-th
    unlink (an input deleted) or k-th fsync; ``timed`` ones ("none") are killed by the parent
    at a random moment (they may finish first)."""
    fixed = ["rename:1", "rename:2", "rename:3", "unlink:1", "unlink:7", "unlink:20", "unlink:31", "fsync:2"]
    pts = fixed[:hooked]
    while len(pts) < hooked:
        pts.append(rng.choice([f"unlink:{rng.randint(1, 35)}", f"rename:{rng.randint(1, 3)}",
                               f"fsync:{rng.randint(1, 8)}"]))
    return pts + ["none"] * timed


def _kill_compactions(tmp_path: Path, hooked: int, timed: int, seed: int) -> dict:
    rng = random.Random(seed)
    stats = {"runs": 0, "killed": 0, "pyarrow_dups_before_reopen": 0, "runs_with_dups_before_reopen": 0}
    for run, point in enumerate(_compaction_points(hooked, timed, rng)):
        path = tmp_path / f"c{run}"
        p = worker("populate-parts", str(path), f"c{run}", "12", "9")  # 12 commits x 3 targets = 36 files
        assert p.returncode == 0, p.stderr
        acked = tagged(p.stdout, "A")
        assert len(acked) == 108
        c = subprocess.Popen([sys.executable, WORKERS, "compact-kill", str(path), point], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        if point == "none":
            assert c.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.0, 0.15))
            c.send_signal(signal.SIGKILL)
        out, err = c.communicate(timeout=120)
        stats["killed"] += c.returncode == -signal.SIGKILL
        raw = hive_rows(path)  # pyarrow alone, before tunedb opened the DB again
        assert raw >= len(acked), (point, raw)
        stats["pyarrow_dups_before_reopen"] += raw - len(acked)
        stats["runs_with_dups_before_reopen"] += raw > len(acked)
        assert_exact(verify(path), acked, f"compaction run {run}, kill at {point}, rc {c.returncode}")
        stats["runs"] += 1
        shutil.rmtree(path)
    return stats


def test_sigkill_during_compaction_quick(tmp_path):
    st = _kill_compactions(tmp_path, 5, 0, seed=1)
    assert st["killed"] == 5
    print(f"SIGKILL during compaction: {st}")


@pytest.mark.slow
def test_sigkill_during_compaction(tmp_path):
    st = _kill_compactions(tmp_path, 20, 6, seed=2)
    assert st["killed"] >= 20
    print(f"SIGKILL during compaction: {st}")


# ------------------------------------------------------------------------ SIGKILL: folds

def _fold_points(hooked: int, timed: int, rng: random.Random) -> list[tuple[str, str]]:
    """(kill point of the writer's own fold, of the next opener's recovery fold) per run: the
    writer is SIGKILLed right after its k-th rename (k of 3 target files published), fsync or
    its unlink of the journal; ``timed`` runs are killed by the parent at a random moment."""
    fixed = [("rename:1", "none"), ("rename:2", "none"), ("rename:3", "none"), ("unlink:1", "none"),
             ("fsync:2", "none"), ("rename:1", "rename:1"), ("rename:2", "rename:1"), ("fsync:1", "fsync:2")]
    out = fixed[:hooked]
    while len(out) < hooked:
        out.append((rng.choice([f"rename:{rng.randint(1, 3)}", f"fsync:{rng.randint(1, 6)}"]),
                    rng.choice(["none", "rename:1", "rename:2", "fsync:1"])))
    return out + [("none", rng.choice(["none", "rename:1"])) for _ in range(timed)]


def _kill_folds(tmp_path: Path, hooked: int, timed: int, seed: int) -> dict:
    rng = random.Random(seed)
    stats = {"runs": 0, "writer_killed": 0, "recovery_killed": 0, "pyarrow_dups_before_reopen": 0}
    for run, (own, rec) in enumerate(_fold_points(hooked, timed, rng)):
        path = tmp_path / f"f{run}"
        n = rng.choice([90, 300, 600])
        c = subprocess.Popen([sys.executable, WORKERS, "fold-kill", str(path), f"f{run}", str(n), own],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = []
        for line in c.stdout:
            lines.append(line)
            if line.strip() == "folding":
                break
        if own == "none":
            time.sleep(rng.uniform(0.0, 0.05))
            c.send_signal(signal.SIGKILL)
        out, err = c.communicate(timeout=120)
        acked = tagged("".join(lines) + out, "A")
        ctx = f"fold run {run}, kills at {own} / {rec}, n {n}, rc {c.returncode}"
        assert len(acked) == n, f"{ctx}: {err[-2000:]}"
        stats["writer_killed"] += c.returncode == -signal.SIGKILL
        if rec != "none":  # the next opener's fold of the abandoned journal is killed too
            r = worker("recover-kill", str(path), rec)
            stats["recovery_killed"] += r.returncode == -signal.SIGKILL
        raw = ds.dataset(path / "records", partitioning="hive")
        # what pyarrow sees before tunedb opens again: a subset (the rest is in the journal), never a copy
        ids = raw.to_table(columns=["record_id"]).column("record_id").to_pylist() if raw.files else []
        stats["pyarrow_dups_before_reopen"] += len(ids) - len(set(ids))
        assert len(ids) == len(set(ids)) and set(ids) <= acked, ctx
        assert_exact(verify(path), acked, ctx)
        stats["runs"] += 1
        shutil.rmtree(path)
    return stats


def test_sigkill_during_fold_quick(tmp_path):
    st = _kill_folds(tmp_path, 6, 0, seed=3)
    assert st["writer_killed"] == 6 and st["recovery_killed"] >= 1
    print(f"SIGKILL during fold: {st}")


@pytest.mark.slow
def test_sigkill_during_fold(tmp_path):
    st = _kill_folds(tmp_path, 20, 6, seed=4)
    assert st["writer_killed"] >= 20
    print(f"SIGKILL during fold: {st}")


@contextlib.contextmanager
def read_only_view(src: Path, dst: Path) -> Iterator[bool]:
    """``dst``: a read-only bind mount of ``src`` (yields False where it cannot be made)."""
    dst.mkdir()
    if run_command(["mount", "--bind", str(src), str(dst)]) is not None:
        yield False
        return
    try:
        yield run_command(["mount", "-o", "remount,ro,bind", str(dst)]) is None
    finally:
        if run_command(["umount", str(dst)]) is not None:
            run_command(["umount", "-l", str(dst)])


def test_snapshot_files_is_consistent_mid_crash(tmp_path):
    """Right after a compaction was killed between publishing and deleting, a plain directory
    scan double-counts until tunedb opens the DB (on a read-only view of it, for good);
    ``snapshot_files`` never does.  Then the first writable opener deletes the leftovers."""
    path = tmp_path / "db"
    p = worker("populate-parts", str(path), "snap", "6", "5")
    acked = tagged(p.stdout, "A")
    c = worker("compact-kill", str(path), "rename:1")
    assert c.returncode == -signal.SIGKILL
    assert hive_rows(path) > len(acked)  # the window a plain scan sees after the crash
    with read_only_view(path, tmp_path / "ro") as ro_ok:
        if ro_ok:
            ro = ParquetStore.open(tmp_path / "ro", create=False)
            assert len(ro) == len(acked)
            files = ro.snapshot_files()
            assert ds.dataset([str(f) for f in files], format="parquet").count_rows() == len(acked)
            assert hive_rows(tmp_path / "ro") > len(acked)  # nothing could be deleted there
            del ro, files
    db = ParquetStore.open(path)
    files = db.snapshot_files()
    assert ds.dataset([str(f) for f in files], format="parquet").count_rows() == len(acked) == len(db)
    assert hive_rows(path) == len(acked)  # the opener finished the killed compaction's deletions
    assert {t["target_name"] for t in db.targets()} == {t["name"] for t in DURABILITY_TARGETS}


def test_cli_prints_a_journal_warning_as_one_line(tmp_path):
    """A command that folds a dead writer's damaged journal says so in one ``tunedb: warning:``
    line: no file name, no source line."""
    path = tmp_path / "db"
    ParquetStore.open(path).close()
    lines = _journal_lines("cli", 8)
    j = path / "journal" / "otherhost-1-0123456789ab.jsonl"
    j.write_bytes(b"".join(lines[:3]) + lines[3][:25] + b"".join(lines[4:]))
    p = run_cli("compact", "--db", str(path))
    assert p.returncode == 0, p.stderr
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tunedb: warning: ") and "corrupt" in err[0], err
    assert "warnings.warn" not in p.stderr and ".py:" not in p.stderr
