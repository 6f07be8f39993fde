"""``tunedb copy`` / ``tunedb.transfer.migration.copy.copy_records``: records move unchanged,
idempotently, resumably; a copy SIGKILLed at random moments loses nothing and duplicates
nothing, and a rerun finishes it."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pyarrow.dataset as pads
import pytest

import tunedb
from tunedb.transfer.migration.copy import copy_records

from helpers import ROOT, run_cli

T1 = {"kind": "cpu", "name": "alpha", "compiler": "gcc 12", "vector_bits": 256, "threads": 1}
T2 = {"kind": "cpu", "name": "beta", "compiler": "gcc 12", "vector_bits": 512, "threads": 1}
W = {"family": "matmul", "M": 64, "N": 64, "K": 64}
COLUMNS = ["record_id", "target_key", "target_name", "target", "workload_key", "workload", "config_key", "config",
           "costs", "cost", "status", "error", "compile_s", "wall_s", "timestamp", "source", "session", "meta", "tunedb_version",
           "host", "origin"]


def fill(db, n_stale: int = 3, n_live: int = 4) -> dict:
    """Records of two targets, some of T1 stale (committed before an invalidation), a failure,
    an imported record with an origin, and verdicts."""
    old = [tunedb.Record(T1, W, {"tile": i}, [1e-3 * (i + 1)]) for i in range(n_stale)]
    db.commit(old)
    db.invalidate(T1)
    time.sleep(0.002)
    live = [tunedb.Record(T1, W, {"tile": i}, [2e-3 * (i + 1)], compile_s=0.5, wall_s=1.5, meta={"note": i})
            for i in range(n_live)]
    imported = tunedb.Record(T2, W, {"tile": 1}, [5e-4], source="imported:kernel_tuner", origin="cache.json",
                             host="")
    failed = tunedb.Record(T2, W, {"tile": 2}, [], status="timeout", error="took too long")
    db.commit([*live, imported, failed])
    db.mark({live[0].record_id: "refuted", imported.record_id: "verified"})
    return {"stale": old, "live": live, "imported": imported, "failed": failed}


def table_rows(db, include_stale: bool = True) -> dict[str, dict]:
    t = db.records(include_stale=include_stale)
    return {r["record_id"]: {c: r[c] for c in COLUMNS if c in r} for r in t.to_pylist()}


def assert_same(src, dst) -> None:
    a, b = table_rows(src), table_rows(dst)
    assert a.keys() == b.keys()
    for rid in a:
        x, y = a[rid], b[rid]
        assert x == y, rid  # same id, keys, canonical JSON text, costs, source, session, host, origin
    assert table_rows(src, False).keys() == table_rows(dst, False).keys()  # stale stays stale
    assert src.verdicts() == dst.verdicts()


@pytest.mark.parametrize("dst_kind", ["parquet", "memory"])
def test_copy_api(tmp_path, dst_kind):
    src = tunedb.open(tmp_path / "src")
    made = fill(src)
    dst = tunedb.open(tmp_path / "dst") if dst_kind == "parquet" else tunedb.open("memory:dst")
    res = copy_records(src, dst, batch=2)
    assert (res["copied"], res["skipped"], res["records"], res["invalidated"], res["verdicts"]) == (9, 0, 9, 1, 2)
    assert {t["target_name"]: t["copied"] for t in res["targets"]} == {"alpha": 7, "beta": 2}
    assert_same(src, dst)
    assert dst.lookup(T1, W, {"tile": 1}).record_id == made["live"][1].record_id
    assert dst.lookup(T1, W, {"tile": 0}) is None  # its live measurement is refuted, the older one stale
    assert dst.lookup(T2, W, {"tile": 1}).origin == "cache.json"
    again = copy_records(src, dst)
    assert (again["copied"], again["skipped"], again["invalidated"], again["verdicts"]) == (0, 9, 0, 0)
    assert_same(src, dst)
    # a later commit to src and a partial copy by target
    extra = tunedb.Record(T2, W, {"tile": 3}, [7e-4])
    src.commit(extra)
    res = copy_records(src, dst, targets=["beta"])
    assert (res["copied"], res["skipped"], [t["target_name"] for t in res["targets"]]) == (1, 2, ["beta"])
    assert_same(src, dst)
    with pytest.raises(ValueError, match="no records"):
        copy_records(src, dst, targets=["gamma"])
    with pytest.raises(ValueError, match="batch"):
        copy_records(src, dst, batch=0)


def test_copy_back_and_forth_keeps_records(tmp_path):
    src = tunedb.open(tmp_path / "src")
    fill(src)
    mem = tunedb.open("memory:")
    copy_records(src, mem)
    back = tunedb.open(tmp_path / "back")
    copy_records(mem, back)
    assert_same(src, back)


def test_cli_copy(tmp_path):
    src = tunedb.open(tmp_path / "src")
    fill(src)
    src.close()
    p = run_cli("copy", str(tmp_path / "src"), str(tmp_path / "dst"), "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert (out["copied"], out["skipped"]) == (9, 0) and p.stderr == ""
    p = run_cli("--json", "copy", str(tmp_path / "src"), str(tmp_path / "dst"), "--batch", "1")
    assert p.returncode == 0 and json.loads(p.stdout)["copied"] == 0
    p = run_cli("copy", str(tmp_path / "src"), str(tmp_path / "dst"))
    assert p.returncode == 0 and "copied 0, skipped 9" in p.stdout
    assert_same(tunedb.open(tmp_path / "src"), tunedb.open(tmp_path / "dst"))
    p = run_cli("copy", str(tmp_path / "src"), str(tmp_path / "d2"), "--target", "beta", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["copied"] == 2
    for args, msg in (([str(tmp_path / "nope"), str(tmp_path / "d3")], "no tunedb database"),
                      ([str(tmp_path / "src"), str(tmp_path / "d3"), "--target", "gamma"], "no records"),
                      ([str(tmp_path / "src"), str(tmp_path / "d3"), "--batch", "0"], "--batch"),
                      ([str(tmp_path / "src"), str(tmp_path / "src")], "same store")):
        p = run_cli("copy", *args)
        assert p.returncode == 2 and msg in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "d3").exists()  # nothing written on bad input


def test_copy_parquet_postgres_both_ways(tmp_path, postgres_url):
    src = tunedb.open(tmp_path / "src")
    fill(src)
    pg = tunedb.open(postgres_url)
    res = copy_records(src, pg)
    assert res["copied"] == 9
    assert_same(src, pg)
    assert copy_records(src, pg)["copied"] == 0
    back = tunedb.open(tmp_path / "back")
    assert copy_records(pg, back)["copied"] == 9
    assert_same(src, back)
    p = run_cli("copy", postgres_url, str(tmp_path / "cli"), "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["copied"] == 9, p.stderr
    pg.close()


# ------------------------------------------------------------------ SIGKILL during tunedb copy
N_BIG = 40_000
KILL_BATCH = 1_000


@pytest.fixture(scope="module")
def big_src(tmp_path_factory):
    """A DB of ``N_BIG`` records in four targets (built with RecordBatch) plus the small mixed
    set of :func:`fill` (stale records, verdicts): a copy with ``--batch 1000`` takes seconds."""
    path = tmp_path_factory.mktemp("kill") / "src"
    db = tunedb.open(path)
    fill(db)
    per = N_BIG // 4
    for k in range(4):
        t = {"kind": "cpu", "name": f"big{k}", "threads": 1}
        db.commit(tunedb.RecordBatch.from_columns(
            target=[t] * per, workload=[{"family": "matmul", "M": 64 + (i % 50)} for i in range(per)],
            config=[{"tile": i} for i in range(per)], costs=[[1e-3 + i * 1e-9] for i in range(per)],
            source="imported:test", origin="big.json"))
    db.close()
    return path


def _raw_rows(db) -> int:
    """Rows of every record file and journal line (no de-duplication): a record stored twice shows."""
    files = db.snapshot_files()
    return pads.dataset([str(f) for f in files], format="parquet").count_rows() if files else 0


def kill_runs(src_path, tmp_path, kills: int, seed: int, max_runs: int | None = None) -> dict:
    """Until ``kills`` copies were killed part-way (at most ``max_runs`` runs, default 3 x
    ``kills``): start ``tunedb copy SRC DST --batch 1000`` into a new DST, SIGKILL it at a random
    moment, check DST, rerun to completion, check DST == SRC.  Returns the figures.

    The kill moments are spread over a whole copy's time, calibrated once and lowered to the
    duration of any run that finished before its kill (a loaded CI machine is noisy: a fixed
    window once let 7 of 20 copies finish first); every run's DST is checked either way."""
    rng = random.Random(seed)
    src = tunedb.open(src_path, create=False)
    src_ids = set(src.records().column("record_id").to_pylist())
    max_runs = max_runs if max_runs is not None else 3 * kills
    figures = {"runs": 0, "killed": 0, "finished_before_kill": 0, "records": len(src_ids), "lost": 0,
               "duplicated": 0, "foreign": 0, "copied_before_kill": []}
    env = dict(os.environ)
    # how long a whole copy takes on this machine now (the kills are spread over it)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tunedb", "copy", str(src_path), str(tmp_path / "calibrate"), "--json",
                    "--batch", str(KILL_BATCH)], cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    full_s = time.perf_counter() - t0
    figures["full_copy_s"] = round(full_s, 2)
    run = 0
    while figures["killed"] < kills and run < max_runs:
        dst_path = tmp_path / f"dst{run}"
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "tunedb", "copy", str(src_path), str(dst_path), "--json",
                                 "--batch", str(KILL_BATCH)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        kill_at = started + rng.uniform(0.05, 0.95) * full_s
        while proc.poll() is None and time.perf_counter() < kill_at:
            time.sleep(0.005)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            figures["killed"] += 1
        else:
            figures["finished_before_kill"] += 1
            full_s = min(full_s, time.perf_counter() - started)
        proc.wait()
        if not dst_path.exists():  # killed before it created DST
            figures["copied_before_kill"].append(0)
        else:
            dst = tunedb.open(dst_path)  # opens after the kill
            ids = dst.records().column("record_id").to_pylist()
            figures["copied_before_kill"].append(len(ids))
            figures["foreign"] += len(set(ids) - src_ids)
            figures["duplicated"] += len(ids) - len(set(ids)) + _raw_rows(dst) - len(set(ids))
            dst.close()
        dst = tunedb.open(dst_path)
        before = len(dst)
        res = copy_records(src, dst, batch=KILL_BATCH) if run % 2 else None
        dst.close()
        if res is None:  # every other rerun through the CLI
            p = subprocess.run([sys.executable, "-m", "tunedb", "copy", str(src_path), str(dst_path), "--json"],
                               cwd=ROOT, capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, p.stderr
            res = json.loads(p.stdout)
        assert res["skipped"] == before  # every record the killed copy had committed was kept
        dst = tunedb.open(dst_path)
        ids = dst.records().column("record_id").to_pylist()
        figures["lost"] += len(src_ids - set(ids))
        figures["duplicated"] += len(ids) - len(set(ids)) + _raw_rows(dst) - len(set(ids))
        figures["foreign"] += len(set(ids) - src_ids)
        assert_same(src, dst)
        dst.close()
        run += 1
        figures["runs"] = run
    print(f"\nSIGKILL during tunedb copy: {figures}")
    return figures


def test_sigkill_during_copy(big_src, tmp_path):
    f = kill_runs(big_src, tmp_path, kills=3, seed=1)
    assert f["killed"] >= 3 and (f["lost"], f["duplicated"], f["foreign"]) == (0, 0, 0)


@pytest.mark.slow
def test_sigkill_during_copy_many(big_src, tmp_path):
    f = kill_runs(big_src, tmp_path, kills=15, seed=2)
    assert f["killed"] >= 15 and (f["lost"], f["duplicated"], f["foreign"]) == (0, 0, 0)
