"""Measurement: isolation (crash, hang, abort, wrong result), timing protocol, DB-first caching, CLI."""

from __future__ import annotations

import json
import math
import os
import time

import pytest

from tunedb.index import ParquetStore
from tunedb.index.hardware.localcpu import cpu_info, preset
from tunedb.transfer.kernels import FAMILIES_ENV, get_family
from tunedb.transfer.measure.backend import (
    LocalBackend,
    MeasureBackend,
    MeasureOptions,
    ReplayBackend,
    TimingProtocol,
    measure,
    measure_many,
)
from tunedb.transfer.measure.timing import time_callable

from helpers import run_cli

FAST = MeasureOptions(protocol=TimingProtocol(warmup=0, min_repeat_ms=0.5, repeat=3), run_timeout_s=30)
FAULT = {"family": "debug_fault", "n": 64}
MM = {"family": "matmul", "M": 24, "N": 40, "K": 8}


@pytest.fixture
def faults(fault_family):
    return LocalBackend(MeasureOptions(protocol=FAST.protocol, run_timeout_s=3))


class ExplodingBackend(MeasureBackend):
    """A backend that must never be reached (proves a cached triple does not run)."""

    name = "exploding"

    def measure(self, target, workload, config):
        raise AssertionError("measured although the DB had the record")


def test_fault_family_ok_and_wrong_result(faults):
    t = preset("cpu-native")
    ok = faults.measure(t, FAULT, {"mode": 0})
    assert ok.status == "ok" and len(ok.costs) == 3
    bad = faults.measure(t, FAULT, {"mode": 3})
    assert bad.status == "wrong_result" and "differ from the NumPy reference" in bad.error and bad.costs == ()


def test_segfault_abort_become_runtime_error_and_caller_survives(faults):
    t = preset("cpu-native")
    seg = faults.measure(t, FAULT, {"mode": 1})
    assert seg.status == "runtime_error" and "SIGSEGV" in seg.error
    ab = faults.measure(t, FAULT, {"mode": 4})
    assert ab.status == "runtime_error" and "SIGABRT" in ab.error
    assert faults.measure(t, FAULT, {"mode": 0}).status == "ok"  # still alive and measuring


def test_hang_becomes_timeout_and_is_killed(faults):
    t0 = time.perf_counter()
    rec = faults.measure(preset("cpu-native"), FAULT, {"mode": 2})
    assert rec.status == "timeout" and "timed out after 3 s" in rec.error
    assert time.perf_counter() - t0 < 20
    assert faults.measure(preset("cpu-native"), FAULT, {"mode": 0}).status == "ok"


def test_fault_family_unreachable_without_switch(monkeypatch):
    monkeypatch.delenv(FAMILIES_ENV, raising=False)
    with pytest.raises(ValueError, match="unknown kernel family"):
        LocalBackend(FAST).measure(preset("cpu-native"), FAULT, {"mode": 1})


def _timed_sleeps(proto: TimingProtocol, sleep_s: float) -> tuple[list[float], int, list[tuple[float, float]]]:
    """``time_callable`` of a function that sleeps ``sleep_s``: (costs, number, the (start, end)
    ``perf_counter`` times of each call, as the function itself saw them)."""
    calls: list[tuple[float, float]] = []

    def fn():
        t0 = time.perf_counter()
        time.sleep(sleep_s)
        calls.append((t0, time.perf_counter()))

    costs, number = time_callable(fn, proto)
    return costs, number, calls


def _protocol_slips(proto: TimingProtocol, costs: list[float], number: int, calls: list[tuple[float, float]]
                    ) -> list[str]:
    """Where a run of ``time_callable`` strays from the protocol by more than a loaded machine's
    noise: ``number`` sized from the timed warm-up (``min_repeat_ms`` / its duration, rounded up;
    the protocol's own clock reads that duration up to 30 % + 0.5 ms longer than the function
    saw it) and each cost its repeat's span / ``number`` (within 30 % + 0.5 ms).  A preemption
    just outside the function can exceed that: the caller retries."""
    slips = []
    warm = calls[0][1] - calls[0][0]
    target = proto.min_repeat_ms / 1000
    fewest, most = math.ceil(target / (1.3 * warm + 0.0005)), math.ceil(target / warm)
    if not fewest <= number <= most:
        slips.append(f"number {number} not sized from the warm-up's {warm * 1e3:.2f} ms: {fewest}..{most}")
    for i, c in enumerate(costs):
        rep = calls[1 + i * number:1 + (i + 1) * number]
        span = rep[-1][1] - rep[0][0]
        if not span / number <= c <= (1.3 * span + 0.0005) / number:
            slips.append(f"repeat {i}: cost {c * 1e3:.3f} ms, its {number} calls spanned {span * 1e3:.3f} ms")
    return slips


def test_timing_protocol_sizes_number_to_min_repeat():
    """``number`` is sized from the timed warm-up so a repeat lasts >= ``min_repeat_ms``, and
    costs are seconds per run.  The relations hold on a busy machine (the warm-up's own duration
    decides ``number``, whatever the load made of it); a rare preemption between the protocol's
    clock and the function gets two more tries."""
    proto = TimingProtocol(warmup=1, min_repeat_ms=10, repeat=3)
    tries = []
    for _ in range(3):
        costs, number, calls = _timed_sleeps(proto, 0.002)
        # exact whatever the load: the call count, and a sleep is never shorter than asked
        assert len(costs) == 3 and len(calls) == 1 + 3 * number
        assert 1 <= number <= math.ceil(0.010 / (calls[0][1] - calls[0][0])) <= 5
        assert all(c >= 0.002 for c in costs)
        tries.append(_protocol_slips(proto, costs, number, calls))
        if not tries[-1]:
            break
    assert not tries[-1], tries
    s = proto.summary([1.0, 1.0, 1.0], number)
    assert s["cv"] == 0 and s["noisy"] is False
    s = proto.summary([1.0, 2.0, 3.0], number)
    assert s["cv"] == pytest.approx(0.5) and s["noisy"] is True
    with pytest.raises(ValueError):
        TimingProtocol(repeat=0)


def test_record_meta_and_threads():
    cores = cpu_info()["cores"]
    name = f"cpu-native-t{min(2, cores)}"
    rec = LocalBackend(FAST).measure(preset(name), MM, get_family("matmul").default_config(MM))
    assert rec.status == "ok" and rec.source == "measured"
    m = rec.meta
    assert m["threads"] == min(2, cores) and m["omp_num_threads"] == str(min(2, cores))
    assert m["repeat"] == 3 and m["number"] >= 1 and 0 <= m["cv"] and isinstance(m["noisy"], bool)
    assert m["mean_s"] == pytest.approx(rec.cost)
    assert rec.compile_s is not None and rec.wall_s >= rec.cost
    rec.validate()


def test_cached_measurement_is_not_rerun(tmp_path):
    db = ParquetStore.open(tmp_path / "db")
    t = preset("cpu-native")
    cfg = get_family("matmul").default_config(MM)
    r1, cached1 = measure(t, MM, cfg, db=db, backend=LocalBackend(FAST))
    assert r1.status == "ok" and not cached1
    r2, cached2 = measure(t, MM, cfg, db=db, backend=ExplodingBackend())
    assert cached2 and r2.record_id == r1.record_id and r2.costs == r1.costs
    # another process sees the committed record too
    db2 = ParquetStore.open(tmp_path / "db")
    r3, cached3 = measure(t, dict(MM), dict(cfg), db=db2, backend=ExplodingBackend())
    assert cached3 and r3.record_id == r1.record_id
    # force re-measures and commits a newer record
    r4, cached4 = measure(t, MM, cfg, db=db, backend=LocalBackend(FAST), force=True)
    assert not cached4 and r4.record_id != r1.record_id
    assert db.lookup(t, MM, cfg).record_id == r4.record_id


def test_workload_normalised_before_lookup(tmp_path):
    """conv2d without a layout is the same triple as layout NCHW (defaults are filled first)."""
    db = ParquetStore.open(tmp_path / "db")
    w = {"family": "conv2d", "N": 1, "C": 2, "H": 5, "W": 5, "K": 3, "R": 3, "S": 3, "stride": 1, "pad": 1}
    cfg = get_family("conv2d").default_config(w)
    r1, _ = measure(preset("cpu-native"), w, cfg, db=db, backend=LocalBackend(FAST))
    assert r1.workload["layout"] == "NCHW"
    _, cached = measure(preset("cpu-native"), {**w, "layout": "NCHW"}, cfg, db=db, backend=ExplodingBackend())
    assert cached


def test_measure_many_builds_then_runs_and_caches(tmp_path):
    db = ParquetStore.open(tmp_path / "db")
    t = preset("cpu-native")
    fam = get_family("matmul")
    base = fam.default_config(MM)
    cfgs = [base, {**base, "unroll": 1}, {**base, "mr": "8"}, dict(base)]
    out = measure_many(t, MM, cfgs, db=db, backend=LocalBackend(FAST))
    assert [r.status for r, _ in out] == ["ok", "ok", "invalid", "ok"]
    assert [c for _, c in out] == [False, False, False, True]  # the repeated config ran once
    assert out[3][0].record_id == out[0][0].record_id
    again = measure_many(t, MM, cfgs, db=db, backend=ExplodingBackend())
    assert all(c for _, c in again)
    assert [r.record_id for r, _ in again[:3]] == [r.record_id for r, _ in out[:3]]


def test_replay_backend_answers_from_the_recorded_data():
    from tunedb.transfer.measure.replay import KernelTunerReplayBackend, ReplayData

    from helpers import kernel_tuner_file

    assert issubclass(ReplayBackend, MeasureBackend) and issubclass(LocalBackend, MeasureBackend)
    with pytest.raises(TypeError):
        ReplayBackend()  # abstract: only concrete replay backends measure
    data = ReplayData(kernel_tuner_file("A4000"))
    backend = KernelTunerReplayBackend(data)
    assert isinstance(backend, ReplayBackend) and backend.name == "replay"
    cfg, cost = data.optimum()
    r = backend.measure(data.target, data.workload, cfg)
    from tunedb.index.model.estimate import estimate

    assert (r.source, r.status) == ("replay", "ok") and estimate([r]).value == pytest.approx(cost)
    absent = dict(cfg, **{data.space.knobs[0].name: 10**9})
    assert backend.measure(data.target, data.workload, absent).status == "invalid"


def test_bad_inputs_raise_value_error():
    with pytest.raises(ValueError, match="M=0"):
        measure(preset("cpu-native"), {**MM, "M": 0}, {})
    with pytest.raises(ValueError, match="config must be an object"):
        measure(preset("cpu-native"), MM, [1, 2])  # type: ignore[arg-type]


def test_cli_measure_and_space(tmp_path):
    db = str(tmp_path / "db")
    cfg = json.dumps(get_family("matmul").default_config(MM))
    args = ["measure", "--db", db, "--target", "cpu-native", "--workload", "matmul:M=24,N=40,K=8",
            "--config", cfg, "--repeat", "2", "--min-repeat-ms", "1", "--json"]
    p = run_cli(*args, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert {"config", "cost", "costs", "status", "error", "compile_s", "cached"} <= set(out)
    assert out["status"] == "ok" and out["cached"] is False and len(out["costs"]) == 2 and out["cost"] > 0
    p2 = run_cli(*args, timeout=120)
    assert json.loads(p2.stdout)["cached"] is True
    inj = json.dumps({**json.loads(cfg), "nr": '8); system("reboot"); (1'})
    p3 = run_cli("measure", "--db", db, "--target", "cpu-native", "--workload", "matmul:M=24,N=40,K=8",
                 "--config", inj, "--json", timeout=120)
    o3 = json.loads(p3.stdout)  # a config outside the space is the user's mistake: exit 2, nothing stored
    assert p3.returncode == 2 and o3["exit"] == 2 and "nr" in o3["error"] and p3.stderr.count("\n") == 1
    p4 = run_cli("space", "--workload", "softmax:M=4,N=100", "--json")
    sp = json.loads(p4.stdout)
    assert [k["name"] for k in sp["knobs"]] == ["online", "vec", "accs", "fast_exp", "rows"]
    assert sp["size"] == 2 * 3 * 3 * 2 * 4 and isinstance(sp["constraints"], list)
    assert all("values" in k for k in sp["knobs"])
    p5 = run_cli("space", "--workload", "matmul:M=0,N=1,K=1")
    assert p5.returncode == 2 and p5.stderr.count("\n") == 1 and "M=0" in p5.stderr
    p6 = run_cli("measure", "--db", db, "--target", "h100-not-here", "--workload", "matmul:M=2,N=2,K=2",
                 "--config", "{}")
    assert p6.returncode == 2 and "Traceback" not in p6.stderr
    assert os.path.isdir(db)


def test_foreign_family_passes_through_to_a_non_local_backend(tmp_path):
    class Constant(MeasureBackend):
        name = "constant"

        def measure(self, target, workload, config):
            from tunedb.index import Record

            return Record(target, workload, config, costs=[1e-3], source="replay")

    db = ParquetStore.open(tmp_path / "db")
    w = {"family": "kt_gemm", "n": 4}
    rec, cached = measure({"kind": "gpu", "name": "a100"}, w, {"b": 1}, db=db, backend=Constant())
    assert rec.workload == w and not cached
    assert measure({"kind": "gpu", "name": "a100"}, w, {"b": 1}, db=db, backend=ExplodingBackend())[1]
    with pytest.raises(ValueError, match="unknown kernel family"):
        measure(preset("cpu-native"), w, {"b": 1})


class MadeBackend(MeasureBackend):
    """A backend that makes a record per config (cost = the config's ``x`` ms) and keeps what it made."""

    name = "made"

    def __init__(self):
        self.made = []

    def measure(self, target, workload, config):
        from tunedb.index.model.record import Record

        rec = Record(dict(target), dict(workload), dict(config), costs=[config["x"] * 1e-3], source="replay",
                     meta={"backend": self.name, "origin": "backend's"})
        self.made.append(rec)
        return rec


def test_annotate_merges_meta_before_the_commit_and_keeps_the_record_id():
    from tunedb.index.memory.store import MemoryStore
    from tunedb.transfer.measure.backend import lookup_or_measure

    db = MemoryStore()
    target, wl = {"kind": "gpu", "name": "g"}, {"family": "made", "n": 1}
    db.commit(MadeBackend().measure(target, wl, {"x": 1}))  # a stored record: a hit, never annotated
    commits = []
    real_commit = db.commit

    def commit(rec):
        commits.append(rec)
        return real_commit(rec)

    db.commit = commit
    asked, seen = [], []
    b = MadeBackend()

    def annotate(i):
        asked.append(i)
        return {"origin": f"pos{i}", "seeded_from": {"target_name": "src"}} if i != 3 else {}

    cfgs = [{"x": 1}, {"x": 2}, {"x": 3}, {"x": 4}, {"x": 2}]
    out = lookup_or_measure(db, b, target, wl, cfgs, on_record=lambda i, r, c: seen.append((i, r, c)),
                            annotate=annotate)
    assert sorted(asked) == [1, 2, 3]  # the misses only: not the hit (0) nor the repeat (4)
    assert [c for _, c in out] == [True, False, False, False, True]
    # the annotated copy is what was committed, seen and returned: same id, timestamp, keys; merged meta
    for pos in (1, 2):
        rec, made = out[pos][0], b.made[pos - 1]
        assert rec.record_id == made.record_id and rec.timestamp == made.timestamp and rec.host == made.host
        assert (rec.config_key, rec.lookup_key, rec.costs) == (made.config_key, made.lookup_key, made.costs)
        assert rec.meta == {"backend": "made", "origin": f"pos{pos}", "seeded_from": {"target_name": "src"}}
        assert made.meta["origin"] == "backend's"          # the backend's record itself is untouched
    assert out[3][0] is b.made[2] and out[4][0] is out[1][0]  # {} leaves the record as made; the repeat is pos 1's
    assert [r.meta.get("origin") for r in commits] == ["pos1", "pos2", "backend's"]
    assert [(i, r.meta.get("origin")) for i, r, c in seen if not c] == [(1, "pos1"), (2, "pos2"), (3, "backend's")]
    stored = {r.record_id: r for r in db.iter_records()}
    assert stored[b.made[0].record_id].meta["seeded_from"] == {"target_name": "src"}
    assert stored[out[0][0].record_id].meta == {"backend": "made", "origin": "backend's"}
