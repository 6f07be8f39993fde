"""Measurement conditions: the context every local record stores, other processes, the reference
kernel, the machine check, and the cost model's down-weighting of records measured on a noisy machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import tunedb
from tunedb.index.hardware.localcpu import local_target
from tunedb.index.model.record import Record
from tunedb.transfer.kernels import get_family
from tunedb.transfer.measure.backend import LocalBackend, MeasureOptions, TimingProtocol, measure
from tunedb.transfer.measure.machine import (
    NOISY_CV,
    busy_processes,
    context_is_loaded,
    machine_check,
    measurement_context,
    reference_kernel_cv,
    usable_cpus,
)
from tunedb.transfer.search.costmodel import (
    NOISY_WEIGHT,
    LightGBMCostModel,
    record_weight,
    training_data,
    training_set,
)

FAST = MeasureOptions(protocol=TimingProtocol(warmup=0, min_repeat_ms=0.5, repeat=3), run_timeout_s=30)
MM = {"family": "matmul", "M": 24, "N": 40, "K": 8}
CONTEXT_KEYS = {"loadavg", "running", "cpus", "cpus_usable", "cpu_quota", "freq_mhz", "governor", "turbo"}


def _opt(v, *types) -> bool:
    """``v`` is None or of one of the number/str ``types`` (a bool is not a number here)."""
    return v is None or (isinstance(v, types) and not isinstance(v, bool))


def check_context(ctx: dict) -> None:
    """The fields of a measurement context, each None or of its type."""
    assert CONTEXT_KEYS <= set(ctx)
    assert "noisy" not in ctx and "origin" not in ctx
    assert _opt(ctx["loadavg"], int, float) and (ctx["loadavg"] is None or ctx["loadavg"] >= 0)
    assert _opt(ctx["running"], int) and (ctx["running"] is None or ctx["running"] >= 0)
    assert _opt(ctx["cpus"], int) and _opt(ctx["cpus_usable"], int)
    assert _opt(ctx["cpu_quota"], int, float) and _opt(ctx["freq_mhz"], int, float)
    assert ctx["governor"] is None or isinstance(ctx["governor"], str)
    assert ctx["turbo"] is None or isinstance(ctx["turbo"], bool)


def test_measurement_context_fields_typed_and_cheap():
    ctx = measurement_context()
    check_context(ctx)
    assert set(ctx) == CONTEXT_KEYS
    json.dumps(ctx)
    if sys.platform.startswith("linux"):
        assert ctx["loadavg"] is not None and ctx["running"] is not None
        assert ctx["cpus_usable"] == len(os.sched_getaffinity(0)) and ctx["cpus"] == os.cpu_count()
    if ctx["cpus"] is not None:
        assert usable_cpus(ctx) is not None and usable_cpus(ctx) > 0
    t0, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(20):
        measurement_context()
    # well under 1 ms of CPU typically (CPU time: what a busy machine's preemptions do not inflate);
    # the wall time only catches a call that waits for something (10x generous)
    assert (time.process_time() - cpu0) / 20 < 0.02
    assert (time.perf_counter() - t0) / 20 < 0.2


def test_context_is_loaded_rule():
    quiet = {"loadavg": 0.2, "loadavg_after": 0.9, "running": 0, "cpus": 4, "cpus_usable": 4, "cpu_quota": None}
    assert not context_is_loaded(quiet)
    assert context_is_loaded({**quiet, "loadavg": 4.6})  # >= usable + headroom
    assert context_is_loaded({**quiet, "loadavg_after": 4.5})
    assert context_is_loaded({**quiet, "running": 4})  # 4 others + the measurement's own thread > 4
    assert not context_is_loaded({**quiet, "running": 2}, threads=2)
    assert context_is_loaded({**quiet, "running": 3}, threads=2)
    assert context_is_loaded({**quiet, "cpu_quota": 1.0, "loadavg": 1.6})  # the quota caps the CPUs
    assert not context_is_loaded({}) and not context_is_loaded(None) and not context_is_loaded("x")


def test_reference_kernel_cv_shape():
    r = reference_kernel_cv(0.2)
    assert r["kernel"] and r["blocks"] >= 5 and r["number"] >= 1
    assert 0 < r["min_s"] <= r["median_s"] <= r["max_s"] and r["cv"] >= 0
    # blocks calibrated to ~7 ms: the fastest block (the one preemption disturbed least) lasts
    # 2-50 ms (a loaded machine stretches the calibration runs, shortening blocks, or every block)
    assert 0.002 < r["min_s"] * r["number"] < 0.05
    with pytest.raises(ValueError):
        reference_kernel_cv(0)


def test_local_record_stores_context_protocol_spread_and_round_trips(tmp_path):
    db = tunedb.open(tmp_path / "db")
    t = local_target("cpu-native-t1")
    cfg = get_family("matmul").default_config(MM)
    rec, cached = measure(t, MM, cfg, db=db, backend=LocalBackend(FAST))
    assert rec.status == "ok" and not cached
    m = rec.meta
    check_context(m["context"])
    assert set(m["context"]) == CONTEXT_KEYS | {"loadavg_after"}
    assert m["protocol"] == {"warmup": 0, "min_repeat_ms": 0.5, "repeat": 3, "max_number": 1_000_000,
                             "noisy_cv": 0.05}
    sp = m["spread"]
    assert sp["min_s"] == min(rec.costs) and sp["max_s"] == max(rec.costs)
    assert sp["min_s"] <= sp["median_s"] <= sp["max_s"] and sorted(rec.costs)[1] == sp["median_s"]
    assert '"noisy":true' not in json.dumps(m["context"], separators=(",", ":"))
    db.close()
    again = tunedb.open(tmp_path / "db")
    stored = again.lookup(t, MM, cfg)
    assert stored.record_id == rec.record_id and stored.meta == rec.meta


def test_failed_local_records_carry_context_too():
    rec = LocalBackend(FAST).measure(local_target("cpu-native-t1"), MM, {"bogus": 1})
    assert rec.status == "invalid"
    check_context(rec.meta["context"])
    assert "loadavg_after" in rec.meta["context"] and rec.meta["protocol"]["repeat"] == 3


#: a spinning child's share of one CPU (percent) that says "busy" even on a loaded 2-core machine,
#: where it gets a third of a core: well above what counts as busy (BUSY_MIN_PERCENT, 5)
SPINNING = 20.0


def _cpu_s(pid: int) -> float:
    """CPU seconds process ``pid`` used so far (utime + stime of /proc/PID/stat)."""
    fields = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _spin() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def _busy_share(pid: int, tries: int = 3) -> tuple[dict | None, float]:
    """The spinner's busy_processes entry (the best of a few 1-second samples: the machine is
    shared) and the share of a CPU (percent) it truly got over that sample, read around it."""
    best, truth = None, 0.0
    for _ in range(tries):
        t0, c0 = time.monotonic(), _cpu_s(pid)
        mine = [d for d in busy_processes(1.0, top=50, exclude_children=False) if d["pid"] == pid]
        got = (_cpu_s(pid) - c0) / (time.monotonic() - t0) * 100.0
        if mine and (best is None or mine[0]["cpu_percent"] > best["cpu_percent"]):
            best, truth = mine[0], got
        if best and best["cpu_percent"] >= SPINNING:
            break
    return best, truth


def test_busy_child_shows_up_in_busy_processes_and_machine_check():
    p = _spin()
    try:
        time.sleep(0.2)
        entry, truth = _busy_share(p.pid)
        # the share it reports is the share the spinner got (however little a loaded machine gave it)
        assert entry is not None, "a spinning child is not listed as busy"
        assert min(SPINNING, 0.7 * truth) <= entry["cpu_percent"] <= 1.3 * truth + 5, (entry, truth)
        assert entry["name"].startswith("python") and isinstance(entry["pid"], int)
        # the default leaves this process's children out (the measurement's own workers)
        assert p.pid not in [d["pid"] for d in busy_processes(0.3, top=50)]
        rep = None
        for _ in range(3):
            rep = machine_check(quick=True, seconds=1.0, exclude_children=False)
            if any(f"(pid {p.pid})" in x for x in rep["problems"]):
                break
        json.dumps(rep)
        # the check's own reference kernel competes with it (and, on a shared machine, others too):
        # the spinner is listed, the others' total passes the limit
        assert any(d["pid"] == p.pid and d["cpu_percent"] >= 5 for d in rep["busy"]), rep["busy"]
        assert rep["verdict"] == "noisy" and rep["busy_cpus"] > 0.5
        line = next(x for x in rep["problems"] if f"(pid {p.pid})" in x)
        assert "CPUs" in line
        assert any(f"kill {p.pid}" in a or str(p.pid) in a for a in rep["advice"])
    finally:
        p.kill()
        p.wait(timeout=10)


def test_machine_check_shape():
    rep = machine_check(quick=True)
    json.dumps(rep)
    assert rep["verdict"] in ("fit", "noisy") and (rep["verdict"] == "noisy") == bool(rep["problems"])
    check_context(rep["context"])
    assert rep["reference"]["blocks"] >= 5 and 0.2 < rep["reference"]["seconds"] < 5
    assert {c["check"] for c in rep["checks"]} == {"reference", "load", "processes", "frequency", "governor", "turbo"}
    assert all(c["status"] in ("ok", "warn", "unknown") for c in rep["checks"])
    assert all(isinstance(x, str) and "\n" not in x for x in rep["problems"] + rep["advice"])
    ref_ok = next(c for c in rep["checks"] if c["check"] == "reference")["status"] == "ok"
    assert ref_ok == (rep["reference"]["cv"] <= NOISY_CV)
    with pytest.raises(ValueError):
        machine_check(seconds=-1)


# --------------------------------------------------------------------------- cost model weights
def _records(target: dict) -> list[Record]:
    """A small matmul data set: for each of 40 configs a clean record (cost grows with ``mc``)
    and one measured on a loaded machine that reads 3x too slow."""
    quiet = {"loadavg": 0.1, "loadavg_after": 0.1, "running": 0, "cpus": 2, "cpus_usable": 2, "cpu_quota": None,
             "freq_mhz": None, "governor": None, "turbo": None}
    loaded = {**quiet, "loadavg": 3.9, "loadavg_after": 4.2, "running": 3}
    out = []
    for i in range(40):
        cfg = {"mc": 8 * (i % 10 + 1), "nc": 16 * (i // 10 + 1), "kc": 16}
        cost = 1e-4 * (1 + cfg["mc"] / 8) * (1 + cfg["nc"] / 64)
        out.append(Record(target, MM, cfg, costs=(cost, cost), meta={"backend": "local", "threads": 1,
                                                                      "context": quiet}))
        out.append(Record(target, MM, cfg, costs=(3 * cost, 3 * cost),
                          meta={"backend": "local", "threads": 1, "context": loaded}))
    return out


def test_record_weight_rule():
    assert record_weight({}) == 1.0 and record_weight("not json") == 1.0 and record_weight(None) == 1.0
    assert record_weight({"noisy": True}) == NOISY_WEIGHT
    assert record_weight('{"noisy":true}') == NOISY_WEIGHT and record_weight({"noisy": False}) == 1.0
    assert record_weight({"context": {"loadavg": 5.0, "cpus": 2, "cpus_usable": 2}}) == NOISY_WEIGHT
    assert record_weight({"context": {"loadavg": 0.5, "running": 0, "cpus": 2, "cpus_usable": 2}}) == 1.0


def test_meta_weights_equal_record_weight_row_by_row():
    from tunedb.index.model.keys import canonical_json
    from tunedb.transfer.search.costmodel import meta_weights

    ctx = {"loadavg": 0.3, "loadavg_after": 0.4, "running": 0, "cpus": 4, "cpus_usable": 4, "cpu_quota": None,
           "freq_mhz": 2600.5, "governor": "performance", "turbo": False}
    metas = [{}, {"noisy": True}, {"noisy": False, "cv": 0.2}, {"backend": "replay", "time": 1.5},
             {"context": ctx, "threads": 1}, {"context": {**ctx, "loadavg": 4.5}}, {"context": {**ctx, "running": 3}},
             {"context": {**ctx, "running": 3}, "threads": 2}, {"context": {**ctx, "running": 2}, "threads": 2},
             {"context": {**ctx, "cpu_quota": 1.5, "loadavg": 2.0}}, {"context": {**ctx, "loadavg_after": 9.0}},
             {"context": {"loadavg": None, "running": None, "cpus": None}}, {"context": {}},
             {"x": {"context": {**ctx, "loadavg": 99.0}, "noisy": True}},  # nested: not the record's own
             {"context": {**ctx, "cpus_usable": None, "cpus": 1, "loadavg": 1.5}}, {"noisy": True, "context": ctx}]
    texts = [canonical_json(m) for m in metas]
    expect = [record_weight(m) for m in metas]
    assert expect == [record_weight(t) for t in texts]
    assert meta_weights(texts).tolist() == expect
    assert expect.count(NOISY_WEIGHT) == 7
    # values of unexpected types: the row-by-row fallback, same answers
    odd = [*texts, canonical_json({"context": {"loadavg": "high"}}), canonical_json({"context": [1, 2]}), "{}"]
    assert meta_weights(odd).tolist() == [record_weight(t) for t in odd]
    assert meta_weights([]).tolist() == []


def test_cost_model_down_weights_records_of_a_loaded_machine(tmp_path):
    t = local_target("cpu-native-t1")
    recs = _records(t)
    db = tunedb.open(tmp_path / "db")
    db.commit(recs)
    ts = training_set(db, "matmul")
    assert ts is not None and ts.rows == 80 and ts.weights is not None
    assert sorted(set(ts.weights.tolist())) == [NOISY_WEIGHT, 1.0] and (ts.weights == NOISY_WEIGHT).sum() == 40
    cfgs, wls, tgs, costs, weights = training_data(db, "matmul", with_weights=True)
    assert len(training_data(db, "matmul")) == 4 and sorted(weights) == sorted(ts.weights.tolist())

    def fitted(w):
        m = LightGBMCostModel(n_estimators=60)
        m.features_ = ts.features
        return m.fit_matrix(ts.X, ts.y, sample_weight=w, holdout=0)

    equal, weighted = fitted(None), fitted(ts.weights)
    clean = [r for r in recs if r.meta["context"]["loadavg"] < 1]
    X = ts.features.matrix([r.config for r in clean], [r.workload for r in clean], [r.target for r in clean])
    truth = np.log([r.cost for r in clean])
    err_equal = float(np.mean(equal.predict_log(X) - truth))
    err_weighted = float(np.mean(weighted.predict_log(X) - truth))
    # the loaded records read 3x slow (log 3 = 1.10): equal weights land about halfway (0.55), the
    # down-weighted fit (1 : 0.25) about a fifth of the way (0.22): closer to the clean costs
    assert err_weighted < err_equal - 0.15
    assert 0 < err_weighted < 0.4 < err_equal < 0.8
    # the list form (fit on configs) agrees
    m = LightGBMCostModel(n_estimators=60).fit(cfgs, wls, tgs, costs, sample_weight=weights, holdout=0)
    assert float(np.mean(m.predict_log(X) - truth)) < err_equal - 0.15
    # the correction fit takes weights too
    base = fitted(None)
    y = np.log([r.cost for r in recs])
    Xall = ts.features.matrix([r.config for r in recs], [r.workload for r in recs], [r.target for r in recs])
    w = np.array([record_weight(r.meta) for r in recs])
    c_eq, c_w = base.corrected(Xall, y), base.corrected(Xall, y, sample_weight=w)
    assert float(np.mean(c_w.predict_log(X) - truth)) < float(np.mean(c_eq.predict_log(X) - truth))
