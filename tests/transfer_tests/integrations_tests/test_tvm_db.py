"""TunedbDatabase: a MetaSchedule database stored in tunedb (real TVM, real tuning, real DB dirs)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
pytest.importorskip("tvm.s_tir.meta_schedule")

from tvm import te  # noqa: E402
from tvm.s_tir import meta_schedule as ms  # noqa: E402
from tvm.s_tir.meta_schedule.database import JSONDatabase  # noqa: E402

from tunedb.index import ParquetStore  # noqa: E402
from tunedb.index.memory.store import MemoryStore  # noqa: E402
from tunedb.index.model.estimate import rank  # noqa: E402
from tunedb.transfer.tuners.tvm import metaschedule_logs as ms_import  # noqa: E402
from tunedb.transfer.tuners.tvm.database import (  # noqa: E402
    TunedbDatabase,
    local_builder,
    normalise_target_json,
    strip_postproc,
)

from helpers import ROOT  # noqa: E402

MS_DATA = (ROOT / ".." / "shared" / "data" / "metaschedule").resolve()
TARGET_A = {"kind": "llvm", "num-cores": 2}  # this machine, generic x86-64 code: portable across CI hosts
TARGET_B = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}  # never built or run here
ZNVER4 = {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}  # the shared sample's target
TRIALS = 16  # <= 32 trials of real tuning in the whole file (16 + 8)


def matmul(m: int, n: int, k: int, out: str = "C") -> tvm.IRModule:
    """C[m, n] = A[m, k] @ B[k, n], float32, as a TIR IRModule with entry ``main``."""
    a = te.placeholder((m, k), "float32", name="A")
    b = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name=out)
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def strategy() -> ms.search_strategy.EvolutionarySearch:
    """Evolutionary search small enough for 2 cores (it is the strategy that reads get_top_k)."""
    return ms.search_strategy.EvolutionarySearch(population_size=64, init_min_unmeasured=8, genetic_num_iters=1)


def tune(mod: tvm.IRModule, db, work_dir: Path, trials: int) -> None:
    # MetaSchedule's logging setup lists the names of the handlers on its logger and fails on a
    # nameless one; pytest's LogCaptureHandler ends up there after a first tune_tir in the process.
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for h in list(ms_logger.handlers):
        if h.get_name() is None:
            ms_logger.removeHandler(h)
    ms.tune_tir(mod, tvm.target.Target(TARGET_A), str(work_dir), max_trials_global=trials, num_trials_per_iter=8,
                builder=local_builder(timeout_sec=300), runner="local", database=db, cost_model="random",
                strategy=strategy(), seed=0, num_tuning_cores=2)


def check_numerics(sch_mod: tvm.IRModule, m: int, n: int, k: int) -> None:
    """Build ``sch_mod`` for TARGET_A, run it and compare with numpy."""
    lib = tvm.compile(sch_mod, target=tvm.target.Target(TARGET_A))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    dev = tvm.cpu()
    ta, tb, tc = tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), tvm.runtime.tensor(np.zeros((m, n), "float32"), dev)
    lib["main"](ta, tb, tc)
    np.testing.assert_allclose(tc.numpy(), a @ b, rtol=1e-4, atol=1e-4)


def perfect_tiles(trace_json: list) -> list[list[int]]:
    """The SamplePerfectTile decisions of a trace JSON, in instruction order."""
    insts, decisions = trace_json
    dec = {i: v for i, v in decisions}
    return [dec[i] for i, inst in enumerate(insts) if inst[0] == "SamplePerfectTile" and i in dec]


def decisions_of(config: dict) -> dict:
    return {k: v for k, v in config.items() if k.startswith("decision_")}


def decisions(sch, db, mod: tvm.IRModule) -> dict:
    """Sampling decisions of a schedule's trace, as the config knobs tunedb stores."""
    tr = ms.database.TuningRecord(sch.trace, db.commit_workload(mod))
    return decisions_of(ms_import.config_of(tr.as_json()[0]))


# --------------------------------------------------------------------------- no TVM needed
def test_importing_the_module_does_not_import_tvm():
    code = "import sys, tunedb.transfer.tuners.tvm.database as m; assert 'tvm' not in sys.modules, 'tvm imported'; print(m.strip_postproc)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr


def test_strip_postproc_and_target_normalisation():
    trace = [[["GetSBlock", [], ["C", "main"], ["b0"]], ["SampleCategorical", [], [[0, 16], [0.5, 0.5]], ["v1"]],
              ["EnterPostproc", [], [], []], ["SampleCategorical", [], [[1], [1.0]], ["v2"]]], [[1, 0], [3, 0]]]
    pre = strip_postproc(trace)
    assert [i[0] for i in pre[0]] == ["GetSBlock", "SampleCategorical"] and pre[1] == [[1, 0]]
    with pytest.raises(ValueError):
        strip_postproc({"not": "a trace"})
    t = {"kind": "llvm", "mtriple": "x86_64-conda-linux-gnu", "host": {"kind": "llvm", "mtriple": "x86_64-conda-linux-gnu"}}
    assert normalise_target_json(t, "x86_64-conda-linux-gnu") == {"kind": "llvm", "host": {"kind": "llvm"}}
    cross = {"kind": "llvm", "mtriple": "aarch64-linux-gnu"}
    assert normalise_target_json(cross, "x86_64-conda-linux-gnu") == cross


# ----------------------------------------------------- imported JSONDatabase (no tuning run)
@pytest.mark.skipif(not MS_DATA.is_dir(), reason=f"shared MetaSchedule data not found at {MS_DATA}")
def test_imported_jsondatabase_is_served_only_for_its_target(tmp_path):
    recs = [r for r in ms_import.parse(MS_DATA) if not isinstance(r, ms_import.ImportIssue)]
    store = ParquetStore.open(tmp_path / "db")
    store.commit(recs)
    mod = matmul(128, 128, 128)  # structurally identical to the sample's first workload
    ranked = rank(r for r in recs if r.workload.get("M") == 128)  # the one estimator, per config
    want = [c.estimate.value for c in ranked]
    assert len(want) >= 3

    db = TunedbDatabase(tmp_path / "db", target=ZNVER4, warm_start=False)
    assert db.has_workload(mod)
    assert not db.has_workload(matmul(16, 16, 16))
    top = db.get_top_k(db.commit_workload(mod), 3)
    got = [float(np.mean([float(x) for x in r.run_secs])) for r in top]
    assert got == pytest.approx(want[:3])
    best = db.query_tuning_record(mod, tvm.target.Target(ZNVER4), "main")
    assert best is not None and float(np.mean([float(x) for x in best.run_secs])) == pytest.approx(want[0])
    assert str(best.target.attrs["mcpu"]) == "znver4"
    sch = ms.tir_integration.compile_tir(db, mod, ZNVER4)
    assert sch is not None
    assert decisions(sch, db, mod) == decisions_of(ranked[0].config)
    # another target: none of znver4's measurements, through any entry point
    assert db.query_tuning_record(mod, tvm.target.Target(TARGET_A), "main") is None
    assert ms.tir_integration.compile_tir(db, mod, TARGET_A) is None
    db_a = TunedbDatabase(tmp_path / "db", target=TARGET_A, warm_start=False)
    assert db_a.get_top_k(db_a.commit_workload(mod), 3) == []
    assert len(db_a) == 0 and len(db) == len(recs)
    # no target yet: get_top_k never guesses one
    assert TunedbDatabase(tmp_path / "db", warm_start=False).get_top_k(db.commit_workload(mod), 3) == []


@pytest.mark.skipif(not MS_DATA.is_dir(), reason=f"shared MetaSchedule data not found at {MS_DATA}")
def test_database_on_a_memory_store_serves_what_the_parquet_db_serves(tmp_path):
    recs = [r for r in ms_import.parse(MS_DATA) if not isinstance(r, ms_import.ImportIssue)]
    store, mem = ParquetStore.open(tmp_path / "db"), MemoryStore()
    store.commit(recs)
    mem.commit(recs)
    mod = matmul(128, 128, 128)
    served = []
    for backend in (store, mem):
        db = TunedbDatabase(backend, target=ZNVER4, warm_start=False)
        assert db.db is backend and db.has_workload(mod) and len(db) == len(recs)
        top = db.get_top_k(db.commit_workload(mod), 3)
        served.append([[float(x) for x in r.run_secs] for r in top])
    assert len(served[0]) == 3 and served[0] == served[1]


@pytest.mark.skipif(not MS_DATA.is_dir(), reason=f"shared MetaSchedule data not found at {MS_DATA}")
def test_top_k_ranks_configs_by_the_estimate_and_hands_tvm_its_value():
    """Config A measured three times (1, 7/3 and 10 ms; the 7/3 ms one the mean of repeats
    1.9/2.0/3.1 ms, as MetaSchedule counts run_secs) costs 7/3 ms (n=3): config B at 1.5 ms ranks
    first, and TVM gets run_secs = [7/3 ms] for A (not its minimum, not one record's repeats)."""
    import dataclasses

    recs = [r for r in ms_import.parse(MS_DATA) if not isinstance(r, ms_import.ImportIssue)]
    ok = [r for r in recs if r.ok and r.workload.get("M") == 128]
    ra = ok[0]
    rb = next(r for r in ok if r.config_key != ra.config_key)
    store = MemoryStore()
    for secs in ([1e-3], [1.9e-3, 2.0e-3, 3.1e-3], [10e-3]):
        store.commit(dataclasses.replace(ra, costs=secs, record_id="", timestamp=None))
    store.commit(dataclasses.replace(rb, costs=[1.5e-3], record_id="", timestamp=None))
    est = store.cost(ra.target, ra.workload, ra.config)
    assert est.value == pytest.approx(7e-3 / 3) and est.records == 3 and est.statistic == "mean"
    mod = matmul(128, 128, 128)
    db = TunedbDatabase(store, target=ZNVER4, warm_start=False)
    top = db.get_top_k(db.commit_workload(mod), 5)

    def decisions_of_record(tr) -> dict:
        return decisions_of(ms_import.config_of(tr.as_json()[0]))

    assert [decisions_of_record(tr) for tr in top] == [decisions_of(rb.config), decisions_of(ra.config)]
    assert [[float(x) for x in tr.run_secs] for tr in top] == [pytest.approx([1.5e-3]), pytest.approx([7e-3 / 3])]
    stored = db.get_all_tuning_records()  # the measurements themselves keep their own run_secs
    assert len(stored) == 4 and type(top[1].run_secs[0]) is type(stored[0].run_secs[0])
    best = db.query_tuning_record(mod, tvm.target.Target(ZNVER4), "main")
    assert decisions_of_record(best) == decisions_of(rb.config) and [float(x) for x in best.run_secs] == \
        pytest.approx([1.5e-3])
    # one more slow measurement of B (1.5, 30 ms -> 15.75 ms): A is the best config now, at its estimate
    store.commit(dataclasses.replace(rb, costs=[30e-3], record_id="", timestamp=None))
    top = db.get_top_k(db.commit_workload(mod), 5)
    assert [decisions_of_record(tr) for tr in top] == [decisions_of(ra.config), decisions_of(rb.config)]
    assert [float(x) for x in top[0].run_secs] == pytest.approx([7e-3 / 3])
    assert [float(x) for x in top[1].run_secs] == pytest.approx([15.75e-3])


@pytest.mark.skipif(not MS_DATA.is_dir(), reason=f"shared MetaSchedule data not found at {MS_DATA}")
def test_top_k_ranks_as_metaschedule_itself_by_the_mean_of_run_secs(tmp_path):
    """Two configs whose mean and median of run_secs disagree (A: 1, 1, 10 ms -> mean 4 ms,
    median 1 ms; B: 2, 2, 2 ms): MetaSchedule's own JSONDatabase ranks B first (mean), and so does
    tunedb, in a Parquet store read back by a new handle, handing TVM run_secs = [mean]."""
    import shutil

    import tunedb

    shutil.copytree(MS_DATA, tmp_path / "shipped")  # MetaSchedule may append to the files it opens
    (tmp_path / "ms").mkdir()
    own = JSONDatabase(work_dir=str(tmp_path / "shipped"))
    mod = matmul(128, 128, 128)
    wl = own.commit_workload(mod)
    shipped = own.get_top_k(wl, 2)
    assert len(shipped) == 2
    runs = ([1e-3, 1e-3, 10e-3], [2e-3, 2e-3, 2e-3])
    mine = JSONDatabase(work_dir=str(tmp_path / "ms"))
    theirs_wl = mine.commit_workload(mod)
    with tunedb.open(tmp_path / "db") as store:
        db = TunedbDatabase(store, target=ZNVER4, warm_start=False)
        ours_wl = db.commit_workload(mod)
        for tr, secs in zip(shipped, runs):
            mine.commit_tuning_record(ms.database.TuningRecord(tr.trace, theirs_wl, secs, tr.target, tr.args_info))
            db.commit_tuning_record(ms.database.TuningRecord(tr.trace, ours_wl, secs, tr.target, tr.args_info))
    ranked_by_tvm = [str(tr.trace) for tr in mine.get_top_k(theirs_wl, 2)]
    assert ranked_by_tvm == [str(shipped[1].trace), str(shipped[0].trace)]  # B (mean 2 ms) before A (mean 4 ms)
    with tunedb.open(tmp_path / "db") as store:
        db = TunedbDatabase(store, target=ZNVER4, warm_start=False)
        top = db.get_top_k(db.commit_workload(mod), 2)
        assert [str(tr.trace) for tr in top] == ranked_by_tvm
        assert [[float(x) for x in tr.run_secs] for tr in top] == [pytest.approx([2e-3]), pytest.approx([4e-3])]
        est = [cc.estimate for cc in rank(store.entry_records(db.target, top_workload(store)))]
        assert [e.statistic for e in est] == ["mean", "mean"] and est[0].tuner == "metaschedule"
        assert "mean of 3 runs (MetaSchedule's mean run_secs)" in est[0].text()


def top_workload(store) -> dict:
    """The one workload of a store holding one entry."""
    (w,) = {r for r in store.records().column("workload").to_pylist()}
    return json.loads(w)


# ------------------------------------------------------------------- real tuning runs
@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A 64x64x64 matmul tuned for TARGET_A with TRIALS trials into a fresh tunedb directory."""
    base = tmp_path_factory.mktemp("tvm_db")
    db = TunedbDatabase(base / "db", target=TARGET_A)
    tune(matmul(64, 64, 64), db, base / "work", TRIALS)
    db.db.close()  # fold the store's journal of single-trial commits into Parquet
    return base


@pytest.mark.slow
def test_tuning_writes_records_to_the_store(tuned):
    store = ParquetStore.open(tuned / "db")
    t = store.records()
    assert t.num_rows == TRIALS
    assert list((tuned / "db" / "records").rglob("*.parquet")), "no Parquet files written"
    db = TunedbDatabase(tuned / "db", target=TARGET_A)
    assert set(t.column("target").to_pylist()) == {json.dumps(db.target, sort_keys=True, separators=(",", ":"))}
    assert db.target["kind"] == "llvm" and db.target["num-cores"] == 2 and "mcpu" not in db.target
    recs = list(store.iter_records())
    ok = [r for r in recs if r.ok]
    assert len(ok) >= TRIALS // 2
    for r in recs:
        assert r.source == "measured"
        assert r.workload["family"] == "matmul" and (r.workload["M"], r.workload["N"], r.workload["K"]) == (64, 64, 64)
        inner = r.meta["metaschedule"]["record"]
        assert inner[0][0][0][0] == "GetSBlock"  # the trace, verbatim JSON
        assert any(k.startswith("decision_") for k in r.config) and "sketch" in r.config
    for r in ok:
        assert all(0 < c < 1 for c in r.costs) and r.costs == tuple(float(x) for x in r.meta["metaschedule"]["record"][1])
    assert len(db) == TRIALS and len(db.get_all_tuning_records()) == TRIALS
    # records leave as a JSONDatabase that MetaSchedule itself loads
    ms_import.export(recs, tuned / "exported")
    jdb = JSONDatabase(work_dir=str(tuned / "exported"), allow_missing=False)
    assert len(jdb) == TRIALS


@pytest.mark.slow
def test_reopened_db_compiles_the_best_schedule(tuned):
    mod = matmul(64, 64, 64)
    db = TunedbDatabase(tuned / "db")  # no current target: compile_tir passes one
    sch = ms.tir_integration.compile_tir(db, mod, TARGET_A)
    assert sch is not None
    store = ParquetStore.open(tuned / "db")
    best = store.best(db.target_dict(TARGET_A), next(store.iter_records()).workload, 1)[0]
    assert decisions(sch, db, mod) == decisions_of(best.config)
    check_numerics(sch.mod, 64, 64, 64)


@pytest.mark.slow
def test_records_of_target_a_are_not_returned_for_target_b(tuned):
    mod = matmul(64, 64, 64)
    db_a = TunedbDatabase(tuned / "db", target=TARGET_A)
    top = db_a.get_top_k(db_a.commit_workload(mod), 5)
    costs = [float(np.mean([float(x) for x in r.run_secs])) for r in top]
    assert len(top) == 5 and costs == sorted(costs)
    db_b = TunedbDatabase(tuned / "db", target=TARGET_B, warm_start=False)
    assert db_b.get_top_k(db_b.commit_workload(mod), 5) == []
    assert db_b.query_tuning_record(mod, tvm.target.Target(TARGET_B), "main") is None
    assert db_b.query_tuning_record(mod, tvm.target.Target(TARGET_A), "main") is not None  # the given target rules
    assert len(db_b) == 0
    # with warm start on, B may get A's schedules as *unmeasured* seeds, never A's measurements
    seeds = TunedbDatabase(tuned / "db", target=TARGET_B).get_top_k(db_b.commit_workload(mod), 5)
    assert seeds and all(r.run_secs is None for r in seeds)


@pytest.mark.slow
def test_unseen_workload_gets_adapted_nearest_traces(tuned):
    mod = matmul(64, 64, 128)
    db = TunedbDatabase(tuned / "db", target=TARGET_A)
    assert not db.has_workload(mod)
    seeds = db.get_top_k(db.commit_workload(mod), 8)
    assert seeds, "no warm-start traces"
    assert all(r.run_secs is None for r in seeds)
    assert all(s["from_workload"]["K"] == 64 and s["from_target"] for s in db.last_warm_start)
    assert len(db.last_warm_start) == len(seeds)
    for r in seeds:
        trace_json = r.as_json()[0]
        tiles = perfect_tiles(trace_json)
        assert [int(np.prod(t)) for t in tiles] == [64, 64, 128]  # i, j, k re-tiled for the new extents
        assert not any(inst[0] == "EnterPostproc" for inst in trace_json[0])
    # the same traces, with provenance, for a search strategy that measures them as they are
    adapted = db.adapted_traces(mod, 8)
    assert [info["key"] for _, info in adapted] == [
        json.dumps(strip_postproc(r.as_json()[0]), sort_keys=True) for r in seeds]
    assert [info["record_id"] for _, info in adapted] == [s["record_id"] for s in db.last_warm_start]
    assert db.timings["get_top_k"][0] >= 1 and db.timings["adapted_traces"][0] == 1 and db.timed_seconds > 0
    # the first adapted trace is a real schedule of the new workload: build, run, compare
    sch = tvm.s_tir.Schedule(mod)
    seeds[0].trace.apply_to_schedule(sch, remove_postproc=False)
    check_numerics(sch.mod, 64, 64, 128)
    # a matmul whose block has another name (structural hashing ignores names, so another shape too):
    # every neighbour trace fails at get_sblock("C") and is skipped -> nothing offered
    other = matmul(32, 64, 128, out="D")
    assert db.get_top_k(db.commit_workload(other), 8) == []
    # MetaSchedule tunes the new workload: its evolutionary search asks get_top_k first and gets
    # the adapted traces as initial population; then it stores its own measured records
    db.last_warm_start = []
    tune(mod, db, tuned / "work128", 8)
    assert db.last_warm_start and all(s["from_workload"]["K"] == 64 for s in db.last_warm_start)
    store = ParquetStore.open(tuned / "db")
    new = [r for r in store.iter_records() if r.workload.get("K") == 128]
    assert len(new) == 8 and any(r.ok for r in new)
    measured = db.get_top_k(db.commit_workload(mod), 8)
    assert measured and all(r.run_secs is not None for r in measured)  # measured records replace the seeds
    assert db.adapted_traces(mod, 8) == []  # nothing to inject once the workload has measurements
    assert db.count_records(mod) == 8
