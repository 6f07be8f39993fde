"""tune_relax: whole Relax models tuned through tunedb, warm start measured as offered (real TVM,
real tuning, real DB directories).  About 2 minutes on 2 cores (16 + 16 trials of real tuning)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

tvm = pytest.importorskip("tvm", reason="TVM is not installed (pip install -e '.[tvm]')")
pytest.importorskip("tvm.s_tir.meta_schedule", reason="this TVM has no tvm.s_tir.meta_schedule (apache-tvm 0.27 needed)")

from tvm.s_tir.meta_schedule.arg_info import ArgInfo  # noqa: E402

from tunedb.index import ParquetStore  # noqa: E402
from tunedb.transfer.tuners.tvm import models as tvm_models  # noqa: E402
from tunedb.transfer.tuners.tvm.database import TunedbDatabase, strip_postproc  # noqa: E402
from tunedb.transfer.tuners.tvm.search import pretrain_cost_model  # noqa: E402

from helpers import ROOT  # noqa: E402

TARGET = {"kind": "llvm", "num-cores": 2}  # generic x86-64 code: portable across CI hosts
TRIALS = 8  # per task; one batch
TASKS = {"fused_matmul_add_relu", "fused_matmul1_add1_add2"}


def model_a() -> tvm.IRModule:
    return tvm_models.mlp(32, 128)


def model_b() -> tvm.IRModule:
    return tvm_models.mlp(32, 192)


def tune(mod: tvm.IRModule, db, work: Path, **kw) -> dict:
    return tvm_models.tune_relax(mod, TARGET, db, trials=TRIALS, trials_per_iter=TRIALS, work_dir=str(work),
                                 cost_model="random", seed=0, **kw)


def key(trace_json: list) -> str:
    """A stored trace cut before its postprocessors, as canonical JSON (the adapted traces' key)."""
    return json.dumps(strip_postproc(trace_json), sort_keys=True)


def test_importing_the_modules_does_not_import_tvm():
    code = ("import sys, tunedb.transfer.tuners.tvm.models, tunedb.transfer.tuners.tvm.search; "
            "assert 'tvm' not in sys.modules, 'tvm imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr


def test_extract_tasks_of_the_small_models():
    for hidden in (128, 192):
        tasks = tvm_models.extract_tasks(tvm_models.mlp(32, hidden), TARGET)
        assert {t.task_name for t in tasks} == TASKS
        assert all(int(t.weight) == 2 for t in tasks)  # two residual blocks: each fused function called twice
        shapes = {t.task_name: [[int(x) for x in a.as_json()[2]] for a in ArgInfo.from_entry_func(t.dispatched[0])]
                  for t in tasks}
        assert shapes["fused_matmul_add_relu"] == [[32, hidden], [hidden, 2 * hidden], [2 * hidden], [32, 2 * hidden]]
        assert shapes["fused_matmul1_add1_add2"][:2] == [[32, 2 * hidden], [2 * hidden, hidden]]
    three = tvm_models.extract_tasks(tvm_models.mlp(32, 128, blocks=3), TARGET)
    assert sorted(int(t.weight) for t in three) == [3, 3]
    assert tvm_models.model_latency({"a": 1e-4, "b": 2e-4}, {"a": 2, "b": 1}) == pytest.approx(4e-4)
    assert tvm_models.model_latency({"a": None}, {"a": 1}) is None


@pytest.fixture(scope="module")
def tuned_a(tmp_path_factory):
    """Model A (hidden 128) tuned TRIALS trials per task into a fresh tunedb directory."""
    base = tmp_path_factory.mktemp("tvm_models")
    db = TunedbDatabase(base / "db", target=TARGET)
    res = tune(model_a(), db, base / "work_a")
    db.db.close()
    return base, res


@pytest.mark.slow
def test_model_a_lands_in_the_db(tuned_a):
    base, res = tuned_a
    assert {t["name"] for t in res["tasks"]} == TASKS
    assert res["trials"] == 2 * TRIALS and all(t["trials"] == TRIALS for t in res["tasks"])
    assert all(t["best_s"] and 0 < t["best_s"] < 1 for t in res["tasks"])
    assert res["latency_s"] == pytest.approx(sum(2 * t["best_s"] for t in res["tasks"]))
    # history: nothing to inject for A's tasks (an empty DB), the strategy says so
    assert all(t["warm"]["offered"] == 0 and t["warm"]["injected"] == 0 for t in res["tasks"])
    assert res["db_timings"]["commit_tuning_record"][0] == 2 * TRIALS
    store = ParquetStore.open(base / "db")
    recs = list(store.iter_records())
    assert len(recs) == 2 * TRIALS and all(r.source == "measured" for r in recs)


@pytest.mark.slow
def test_history_pretrains_the_xgb_cost_model(tuned_a):
    pytest.importorskip("xgboost", reason="xgboost is not installed")
    from tvm.s_tir.meta_schedule.cost_model import XGBModel

    base, _ = tuned_a
    db = TunedbDatabase(base / "db", target=TARGET)
    mods = [t.dispatched[0] for t in tvm_models.extract_tasks(model_b(), TARGET)]
    ok = sum(1 for r in ParquetStore.open(base / "db").iter_records() if r.ok)
    model = XGBModel(num_tuning_cores=2)
    fed = pretrain_cost_model(model, db, mods, TARGET)
    assert fed == ok  # every ok record of both of A's workloads, each workload once
    assert model.data_size == fed and len(model.data) == 2  # one normalisation group per A workload
    # another target has no history: nothing fed
    other = TunedbDatabase(base / "db", target={"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
    assert pretrain_cost_model(XGBModel(num_tuning_cores=2), other, mods, other.tvm_target) == 0


@pytest.mark.slow
def test_model_b_measures_a_s_adapted_traces_as_offered_then_answers_from_the_db(tuned_a, tmp_path):
    base, _ = tuned_a
    shutil.copytree(base / "db", tmp_path / "db")
    db = TunedbDatabase(tmp_path / "db", target=TARGET)
    task_mods = {t.task_name: t.dispatched[0] for t in tvm_models.extract_tasks(model_b(), TARGET)}
    offered = {n: db.adapted_traces(m, 32) for n, m in task_mods.items()}
    assert all(offered.values()), "A's records give B no adapted traces"
    assert all(info["from_workload"]["shapes"][0][0] == 32 for v in offered.values() for _, info in v)

    res = tune(model_b(), db, tmp_path / "work_b")
    assert res["trials"] == 2 * TRIALS
    store = ParquetStore.open(tmp_path / "db")
    by_wl: dict[str, list] = {}
    for r in store.iter_records():
        by_wl.setdefault(r.workload_key, []).append(r)
    for t in res["tasks"]:
        rep = t["warm"]
        assert rep["offered"] == len(offered[t["name"]]) and rep["injected"] >= 1
        assert rep["injected"] == len(rep["measured"]) <= TRIALS
        # B's records of the task include the adapted traces exactly as offered (postprocessors
        # re-run, nothing mutated): compare the stored traces cut before their postprocessors
        wl = db._workload_of_object(db.commit_workload(task_mods[t["name"]]))[1]
        from tunedb.index.model.keys import key_of

        recs = by_wl[key_of(wl)]
        assert len(recs) == TRIALS and all(r.target == db.target for r in recs)
        stored = {key(r.meta["metaschedule"]["record"][0]) for r in recs}
        adapted = {info["key"] for _, info in offered[t["name"]]}
        assert len(stored & adapted) == rep["injected"]
        # the injected ones are the first batch's: the timeline's first `injected` entries of the task
        firsts = [s for n, s in res["timeline"] if n == t["name"]][:rep["injected"]]
        assert firsts == rep["measured"]
    assert res["latency_s"] is not None and res["overhead_s"] > 0 and res["db_s"] > 0
    db.db.close()

    # the same model again with the same DB: every task has TRIALS records -> answered from the DB,
    # nothing measured (MetaSchedule alone would measure TRIALS new schedules per task again)
    again = tune(model_b(), TunedbDatabase(tmp_path / "db", target=TARGET), tmp_path / "work_b2")
    assert again["trials"] == 0 and all(t["reused"] and t["trials"] == 0 for t in again["tasks"])
    assert again["latency_s"] == pytest.approx(res["latency_s"])
    assert len(list(ParquetStore.open(tmp_path / "db").iter_records())) == 4 * TRIALS
