"""Kernel Tuner on a live OpenCL device, through tunedb's strategies: real OpenCL C compiled by
the device's compiler and timed on the device by Kernel Tuner's OpenCL backend (PoCL's CPU
device here: ``pip install 'pyopencl[pocl]'``; any other OpenCL device with
``TUNEDB_OPENCL_PLATFORM`` / ``TUNEDB_OPENCL_DEVICE``).  Under ``CI=true`` a missing device is a
failure, not a skip.

Each test checks what lands in the DB: statuses, compile and run times, the device as its driver
describes it, a rerun that measures nothing, a second problem size warm-started from the first,
and a run cut short by Ctrl-C that a rerun resumes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest

import tunedb

import live_opencl
from helpers import TESTS
from live_opencl import GEMM_PARAMS, tune_gemm, tune_saxpy

HERE = TESTS
DEVICE, REASON = live_opencl.device_or_reason()
if DEVICE is None and os.environ.get("CI") == "true":
    raise RuntimeError(f"CI runs the live OpenCL tests: {REASON}")
pytestmark = pytest.mark.skipif(DEVICE is None, reason=REASON)


def entry(db, n: int, kernel: str = "gemm") -> list:
    return [r for r in db.records().to_pylist() if json.loads(r["workload"]).get("kernel") == kernel
            and json.loads(r["workload"]).get("problem_size") in ([n, n], n)]


def test_warm_start_on_a_live_device_stores_real_measurements_then_answers_from_the_db(tmp_path):
    from tunedb.kernel_tuner import WarmStart

    db = tunedb.open(tmp_path / "db")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "matches no hardware catalog device"
        ws = WarmStart(db)
        results, env = tune_gemm(96, ws, 8)
    info = ws.last_run
    assert info.kt_fevals == 8 and info.db_answers == 0
    # the device as the driver describes it: a CPU device is a CPU target, with its driver version
    t = info.target
    kinds = {2: "cpu", 4: "gpu", 8: "accelerator"}
    assert t["kind"] == next(k for bit, k in kinds.items() if DEVICE.type & bit)
    assert t["name"] == DEVICE.name.strip() and t["runtime"] == "opencl" and t["driver"] == DEVICE.driver_version
    assert t["compute_units"] == DEVICE.max_compute_units
    if t["kind"] == "cpu":
        assert t["uarch"] and t["vector_bits"] >= 128 and t["march"] == "native"
    rows = entry(db, 96)
    assert len(rows) == 8 and {r["source"] for r in rows} == {"measured"}
    ok = [r for r in rows if r["status"] == "ok"]
    assert ok, [r["status"] for r in rows]
    for r in ok:
        assert r["compile_s"] > 0 and r["wall_s"] >= r["compile_s"] and r["cost"] > 0 and len(r["costs"]) == 3
        assert json.loads(r["target"]) == t
    # Kernel Tuner's own times (ms) are the records' costs (s)
    by_cfg = {json.dumps({k: res[k] for k in GEMM_PARAMS}, sort_keys=True): res for res in results
              if res.get("tunedb") == "measured" and isinstance(res.get("time"), float)}
    for r in ok:
        res = by_cfg[json.dumps(json.loads(r["config"]), sort_keys=True)]
        assert sorted(r["costs"]) == pytest.approx(sorted(x / 1000 for x in res["times"]))
    # a rerun measures nothing
    again = WarmStart(db)
    tune_gemm(96, again, 8)
    assert again.last_run.kt_fevals == 0 and again.last_run.db_answers == 8
    assert len(entry(db, 96)) == 8
    # a second problem size is warm-started from the first
    other = WarmStart(db)
    tune_gemm(128, other, 4)
    assert other.last_run.kt_fevals == 4
    assert any(s["from_workload"]["problem_size"] == [96, 96] for s in other.last_run.seeds)
    assert len(entry(db, 128)) == 4


def test_best_config_is_the_same_measured_live_or_answered_from_the_db(tmp_path):
    """Measured live on the device, then answered from the DB (a new handle: read back from
    Parquet): Kernel Tuner's best_config has the same winner, key order and ``time`` (Kernel
    Tuner's mean of the iterations, bit for bit); only the time this run spent on it (0 for an
    answer, as for Kernel Tuner's own cache hits) and tunedb's provenance flag differ."""
    from tunedb.kernel_tuner import WarmStart

    skip = {"compile_time", "verification_time", "benchmark_time", "strategy_time", "framework_time", "tunedb"}
    with tunedb.open(tmp_path / "db") as db:
        first, env1 = tune_gemm(96, WarmStart(db), 8)
    with tunedb.open(tmp_path / "db") as db:
        ws = WarmStart(db)
        again, env2 = tune_gemm(96, ws, 8)
    assert ws.last_run.kt_fevals == 0 and ws.last_run.db_answers == 8
    b1, b2 = env1["best_config"], env2["best_config"]
    assert (b1["tunedb"], b2["tunedb"]) == ("measured", "db")
    assert list(b1) == list(b2)
    assert {k: v for k, v in b1.items() if k not in skip} == {k: v for k, v in b2.items() if k not in skip}
    assert b2["time"] == b1["time"] == pytest.approx(sum(b1["times"]) / len(b1["times"]), rel=1e-9)
    assert b2["tunedb_estimate"]["statistic"] == "mean"
    # what tunedb shows for the winner is the same number
    assert ws.last_run.best_time_s == pytest.approx(b1["time"] * 1e-3, rel=1e-12)
    by_key = {json.dumps({k: r[k] for k in GEMM_PARAMS}): r for r in first}
    for r in again:
        m = by_key[json.dumps({k: r[k] for k in GEMM_PARAMS})]
        assert list(r) == list(m)
        assert {k: v for k, v in r.items() if k not in skip} == {k: v for k, v in m.items() if k not in skip}


def test_configs_that_fail_to_compile_or_launch_are_stored_with_their_status(tmp_path):
    """Kernel Tuner's brute force over a space with configs the compiler refuses (tiles over the
    kernel's local-memory budget), configs the runtime refuses at launch (a local size other
    than the kernel's reqd_work_group_size), and configs over the device's largest work-group
    (Kernel Tuner leaves them out of its search space: they are never run, nor stored)."""
    from tunedb.kernel_tuner import Recorder, WarmStart

    db = tunedb.open(tmp_path / "db")
    big = int(DEVICE.max_work_group_size) * 2
    params = {"block_size_x": [8, 16, 32, big], "block_size_y": [1, 8, 16], "TILE_K": [8, 32], "UNROLL": [1],
              "PIN": [0, 1]}
    tune_gemm(64, Recorder(db, "brute_force"), params=params, restrictions=[], iterations=2, verify=False)
    rows = entry(db, 64)
    assert len(rows) == 3 * 3 * 2 * 2  # every config but those over the device's largest work-group
    status = {(c["block_size_x"], c["block_size_y"], c["TILE_K"], c["PIN"]): r["status"]
              for r in rows for c in [json.loads(r["config"])]}
    assert status[(8, 8, 8, 0)] == "ok" and status[(8, 8, 8, 1)] == "ok"  # 8 x 8: what PIN requires
    assert status[(32, 16, 32, 0)] == "compile_error" and status[(32, 8, 32, 1)] == "compile_error"
    assert status[(16, 8, 8, 1)] == "runtime_error" and status[(8, 1, 8, 1)] == "runtime_error"
    assert not any(c[0] == big for c in status)
    for r in rows:
        if r["status"] != "ok":
            assert r["costs"] == [] and r["cost"] is None
        else:
            assert r["compile_s"] > 0 and r["cost"] > 0
    # failures are answers too: a rerun measures none of them again
    ws = WarmStart(db)
    tune_gemm(64, ws, None, params=params, restrictions=[], verify=False)
    assert ws.last_run.kt_fevals == 0 and ws.last_run.db_answers == len(rows)


def test_a_second_kernel_with_restrictions(tmp_path):
    from tunedb.kernel_tuner import WarmStart

    db = tunedb.open(tmp_path / "db")
    ws = WarmStart(db)
    tune_saxpy(1 << 16, ws, 8)
    rows = entry(db, 1 << 16, "saxpy")
    assert len(rows) == 8 and ws.last_run.kt_fevals == 8
    for r in rows:
        c = json.loads(r["config"])
        assert c["block_size_x"] * c["WPT"] <= 2048 and c["WPT"] <= c["block_size_x"] // 8
        assert r["status"] == "ok" and r["cost"] > 0


def test_ctrl_c_keeps_what_was_measured_and_a_rerun_resumes(tmp_path):
    db_path = str(tmp_path / "db")

    def warm(interrupt_after: int) -> dict:
        p = subprocess.run([sys.executable, str(HERE / "live_opencl.py"), "warm", db_path, "96", "8",
                            str(interrupt_after)], capture_output=True, text=True, timeout=600, cwd=HERE)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout.strip().splitlines()[-1])

    first = warm(interrupt_after=4)
    assert first["interrupted"] and first["stopped_by"] == "interrupted"
    db = tunedb.open(db_path)
    kept = len(entry(db, 96))
    assert 3 <= kept <= 5 and kept == first["kt_fevals"]  # (the evaluation in flight may land)
    second = warm(interrupt_after=0)
    assert not second["interrupted"]
    assert second["db_answers"] == kept and second["kt_fevals"] == 8 - kept
    db.refresh()
    assert len(entry(db, 96)) == 8
