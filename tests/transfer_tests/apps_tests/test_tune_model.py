"""tune-model: a model's operator tasks through the DB (real builds and runs on this CPU, real DB dirs)."""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import time

import pytest

import tunedb
import tunedb.transfer.measure.jobs
from tunedb.datasets.models import load_model
from tunedb.transfer.apps.tune_model import ModelInterrupted, ModelOptions, tune_model
from tunedb.transfer.search.scheduler import TaskState, model_latency, pick
from tunedb.transfer.search.tuner import ORIGINS

TARGET = "cpu-x86-64-t1"
SMALL = "bert_block_256@16"    # 7 tasks: 5 GEMMs, a batched GEMM pair, a softmax
WIDER = "bert_block_512@16"    # shares the per-head GEMMs (head dim 64, same sequence) with SMALL


# ------------------------------------------------------------------ the scheduler alone
def test_scheduler_gives_the_round_to_the_task_that_cuts_latency_most():
    heavy = TaskState(weight=4.0, best=2e-3, evaluations=4)
    light = TaskState(weight=1.0, best=2e-3, evaluations=4)
    assert pick([light, heavy]) == 1
    # a task whose last round saved a lot outranks one that saved nothing, at equal weight
    a, b = TaskState(weight=1.0), TaskState(weight=1.0)
    a.update(4e-3, 2)
    a.update(2e-3, 4)   # saved 1 ms per evaluation
    b.update(3e-3, 2)
    b.update(3e-3, 4)   # saved nothing
    assert a.last_gain == pytest.approx(1e-3) and b.last_gain == 0.0
    assert pick([b, a]) == 1
    # a task without an ok measurement comes first; dead tasks never
    c = TaskState(weight=0.1)
    assert pick([a, b, c]) == 2
    c.alive = a.alive = b.alive = False
    assert pick([a, b, c]) is None


def test_model_latency_is_weighted_sum_of_best_else_default():
    s = [TaskState(weight=2.0, best=1e-3), TaskState(weight=3.0)]
    assert model_latency(s, [2e-3, 4e-3]) == pytest.approx(2 * 1e-3 + 3 * 4e-3)
    assert model_latency(s, [2e-3, None]) is None


# ------------------------------------------------------------------ real tuning
@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """SMALL tuned warm into a fresh DB (one real run shared by the tests below)."""
    path = tmp_path_factory.mktemp("tm") / "db"
    db = tunedb.open(path)
    model = load_model(SMALL)
    out = tune_model(db, model, tunedb.local_target(TARGET), options=ModelOptions(budget=2 * len(model.tasks)))
    return path, db, model, out


def test_every_task_is_tuned_and_the_budget_is_kept(tuned):
    _, db, model, out = tuned
    assert out["tasks_total"] == len(model.tasks) == len(out["tasks"])
    assert out["search_evaluations"] <= out["budget"] == 2 * len(model.tasks)
    assert sum(t["evaluations"] for t in out["tasks"]) == out["search_evaluations"]
    target = tunedb.local_target(TARGET)
    for t, task in zip(out["tasks"], model.tasks):
        assert t["source"] in ("warm", "cold") and t["evaluations"] >= 1
        # the best is a real committed measurement of this task's workload
        recs = db.records(target, t["workload"])
        assert recs.num_rows >= t["evaluations"]
        # the task's cost is the DB's estimate of its chosen config: the number `tunedb best` shows
        est = db.cost(target, t["workload"], t["best_config"])
        assert t["best"] == est.value and t["best_estimate"] == est.to_dict()
        assert t["default_cost"] == db.cost(target, t["workload"], tunedb.transfer.measure.jobs.local_job(
            target, t["workload"]).defaults).value
        assert t["weight"] == task.weight
    assert out["latency"] == pytest.approx(sum(t["weight"] * t["best"] for t in out["tasks"]))
    assert out["default_latency"] == pytest.approx(sum(t["weight"] * t["default_cost"] for t in out["tasks"]))
    # warm means seeded from nearest entries (here: the model's other GEMMs, measured first)
    assert all((t["source"] == "warm") == bool(t["seeded_from"]) for t in out["tasks"])
    assert "warm" in {t["source"] for t in out["tasks"]}
    # the model latency is known once every task has a measurement (after the first round, one
    # evaluation each) and never rises before the leaders' re-measurement
    known = [(n, lat) for n, lat in out["history"] if lat is not None]
    assert known[0][0] == len(model.tasks)
    lats = [lat for _, lat in known]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(lats[:-2], lats[1:-1]))


def test_leaders_are_remeasured_interleaved_and_every_repeat_is_stored(tuned):
    _, db, _, out = tuned
    target = tunedb.local_target(TARGET)
    assert out["remeasurements"] > 0
    for t in out["tasks"]:
        if t["evaluations"] < 2:
            continue
        recs = db.records(target, t["workload"]).to_pylist()
        same = [r for r in recs if json.loads(r["config"]) == t["best_config"]]
        assert len(same) >= 2, t["name"]   # the winner was measured again
        # its cost rests on the confirmations measured after it was chosen, not on the sample
        # that chose it
        confirms = [r for r in same if '"origin":"confirm"' in r["meta"] and r["status"] == "ok"]
        est = db.cost(target, t["workload"], t["best_config"])
        assert len(confirms) >= 2 and est.basis == "confirmed" and est.records == len(confirms)


def test_no_task_ends_worse_than_its_default_unless_the_test_says_so(tuned):
    """A tuned config replaces the default only when the interleaved test finds it faster and
    its estimate is lower: the model latency is never above the default-config latency."""
    _, _, _, out = tuned
    assert out["latency"] <= out["default_latency"]
    for t in out["tasks"]:
        assert t["best"] <= t["default_cost"], t["name"]
        v = t.get("versus_default")
        if t["choice"] == "tuned":
            assert v is not None and v["verdict"] == "faster" and v["hi"] < 1
        else:
            assert t["choice"] == "default" and t["best"] == t["default_cost"]
            assert v is None or v["verdict"] != "faster" or t["tuned_estimate"]["value"] >= t["default_cost"]


def test_run_summary_is_stored_with_the_seeds_accounting(tuned):
    path, _, model, out = tuned
    runs = tunedb.open(path).runs("tune-model")
    assert out["run_id"] in [r["run_id"] for r in runs]
    s = next(r for r in runs if r["run_id"] == out["run_id"])
    assert s["model"] == model.name and s["target"] == TARGET and s["label"] == "warm"
    assert s["eta"] == 0.0 and s["records_before"] == 0
    assert s["measure_s"] > 0 and s["query_s"] >= 0
    assert s["t_total_s"] == pytest.approx(s["measure_s"] + s["query_s"])
    assert len(s["tasks"]) == len(model.tasks) and all(t["history"] for t in s["tasks"])
    # where every evaluation came from, per task and in total (the same fields as a tune run's)
    for t in s["tasks"]:
        evals = {k: v for k, v in t["origins"].items() if k not in ("runoff", "confirm")}
        assert sum(evals.values()) == t["evaluations"]
        assert t["origins"]["default"] == 1   # each task's first round starts from its default config
        assert all(v["cache_hits"] + v["measured"] == t["origins"][k] for k, v in t["origin_split"].items())
        assert ("seed" in t["origins"]) <= (t["source"] == "warm")
    assert s["origins"]["default"] == len(model.tasks)
    assert sum(v for k, v in s["origins"].items() if k not in ("runoff", "confirm")) == s["search_evaluations"]
    assert s["origins"].get("runoff", 0) + s["origins"].get("confirm", 0) == s["remeasurements"] > 0
    assert s["origins"] == {k: sum(t["origins"].get(k, 0) for t in s["tasks"]) for k in s["origins"]}
    # every record this run made says where it came from, the default-config references included
    recs = list(tunedb.open(path).iter_records())
    assert recs and all(r.meta.get("origin") in ORIGINS for r in recs)
    # tune-model's own fields are unchanged beside them
    assert {"tasks_hit", "tasks_warm", "tasks_cold", "search_evaluations", "default_measurements"} <= set(s)


def test_second_model_reuses_hits_and_warm_starts_the_rest(tuned):
    path, _, _, first = tuned
    db = tunedb.open(path)
    wider = load_model(WIDER)
    small_keys = {t["workload_key"] for t in first["tasks"]}
    out = tune_model(db, wider, tunedb.local_target(TARGET), options=ModelOptions(budget=2 * len(wider.tasks)))
    for t in out["tasks"]:
        if t["workload_key"] in small_keys:
            assert t["source"] == "hit" and t["measurements"] == 0 and t["evaluations"] == 0
        else:
            assert t["source"] == "warm" and t["seeded_from"] == [TARGET] * len(t["seeded_from"])
    assert out["tasks_hit"] >= 2
    assert out["eta"] == pytest.approx(out["tasks_hit"] / out["tasks_total"])
    assert out["gain"] is not None and out["t_full_s"] > out["measure_s"]
    # the whole model again: every task has measurements now, so every task is a hit
    again = tune_model(db, wider, tunedb.local_target(TARGET), options=ModelOptions(budget=2 * len(wider.tasks)))
    assert again["eta"] == 1.0 and again["measurements"] == 0 and again["search_evaluations"] == 0
    assert again["latency"] <= out["latency"] * (1 + 1e-9)


def test_a_hit_tasks_default_reference_is_measured_and_says_so(tmp_path):
    """A task that is a hit without its default config among its records (here: one random
    config measured by ``tunedb.measure``) gets its default measured once as the latency
    reference (step 5): that record is tagged ``origin: default`` and ``reference: true``."""
    from tunedb.transfer.measure.backend import measure
    from tunedb.transfer.measure.jobs import local_job

    db = tunedb.open(tmp_path / "db")
    model = load_model(SMALL)
    target = tunedb.local_target(TARGET)
    job = local_job(target, model.tasks[0].workload)
    rng = random.Random(0)
    cfg = next(c for c in (job.space.sample(rng) for _ in range(50)) if c != job.defaults)
    measure(job.target, job.workload, cfg, db=db, backend=job.backend)
    out = tune_model(db, model, target, options=ModelOptions(budget=2 * len(model.tasks)))
    assert out["tasks"][0]["source"] == "hit" and out["default_measurements"] >= 1
    refs = [r for r in db.iter_records(job.target, job.workload) if r.config == job.defaults]
    assert len(refs) == 1 and refs[0].meta.get("origin") == "default" and refs[0].meta.get("reference") is True
    assert all(r.meta.get("origin") in ORIGINS for r in db.iter_records() if r.config != cfg)


def test_budget_below_the_tasks_to_tune_is_one_clear_error(tmp_path):
    db = tunedb.open(tmp_path / "db")
    with pytest.raises(ValueError, match="less than the 7 tasks"):
        tune_model(db, load_model(SMALL), tunedb.local_target(TARGET), options=ModelOptions(budget=3))
    assert len(db) == 0 and db.runs() == []


def test_interrupt_keeps_what_was_measured_and_a_rerun_goes_on(tmp_path):
    db = tunedb.open(tmp_path / "db")
    model = load_model(SMALL)
    seen = []

    def progress(ev):
        seen.append(ev)
        if ev["event"] == "start" and len([e for e in seen if e["event"] == "start"]) == 2:
            raise KeyboardInterrupt

    with pytest.raises(ModelInterrupted) as ei:
        tune_model(db, model, tunedb.local_target(TARGET), options=ModelOptions(budget=14), progress=progress)
    part = ei.value.summary
    assert part["interrupted"] and len(db) > 0
    assert tunedb.open(tmp_path / "db").runs("tune-model")[0]["interrupted"] is True
    n = len(db)
    done = tune_model(db, model, tunedb.local_target(TARGET), options=ModelOptions(budget=14))
    assert not done["interrupted"]
    started = [t for t in part["tasks"] if t["source"] in ("warm", "cold")]
    assert len(started) == 2
    # the rerun resumes: what the interrupted run measured comes back from the DB (tasks with two
    # configs or more are hits, a task with one has it answered as a cache hit); nothing twice
    assert done["cache_hits"] + done["tasks_hit"] >= 1
    assert len(db) == n + done["measurements"] + done["reference_measurements"] + done["remeasurements"]


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "tunedb", *args], capture_output=True, text=True, **kw)


def test_cli_json_and_bad_input(tmp_path):
    bad = _cli("tune-model", "no_such_model", "--db", str(tmp_path / "db"), "--target", TARGET)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no_such_model" in bad.stderr
    bad = _cli("tune-model", SMALL, "--db", str(tmp_path / "db"), "--target", TARGET, "--budget", "2")
    assert bad.returncode == 2 and "less than" in bad.stderr and "Traceback" not in bad.stderr
    f = tmp_path / "m.json"
    f.write_text(json.dumps({"format": "tunedb-model", "version": 1, "name": "tiny", "tasks": [
        {"name": "mm", "workload": {"family": "matmul", "M": 16, "N": 16, "K": 16}, "weight": 3}]}))
    r = _cli("tune-model", str(f), "--db", str(tmp_path / "db"), "--target", TARGET, "--budget", "3", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["model"] == "tiny" and out["tasks"][0]["weight"] == 3.0 and out["search_evaluations"] == 3
    # model latency = weight x the search's best (the default-config reference is not part of it)
    assert math.isclose(out["latency"], 3 * out["tasks"][0]["best"])


def test_sigint_to_the_cli_keeps_records_and_rerun_resumes(tmp_path):
    """A real Ctrl-C (SIGINT to the process group, as a terminal sends it) mid-run."""
    dbp = tmp_path / "db"
    proc = subprocess.Popen([sys.executable, "-m", "tunedb", "tune-model", SMALL, "--db", str(dbp),
                             "--target", TARGET, "--budget", "28", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if dbp.exists() and len(tunedb.open(dbp, create=False)) >= 4:
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    part = json.loads(out)
    assert part["interrupted"] is True
    kept = len(tunedb.open(dbp))
    assert kept >= 4
    again = _cli("tune-model", SMALL, "--db", str(dbp), "--target", TARGET, "--budget", "28", "--json")
    assert again.returncode == 0, again.stderr
    done = json.loads(again.stdout)
    # what the interrupted run measured answers the rerun from the DB; nothing is measured twice
    # except the leaders' deliberate re-measurements
    assert done["cache_hits"] + done["tasks_hit"] >= 1
    assert len(tunedb.open(dbp)) == kept + done["measurements"] + done["reference_measurements"] \
        + done["remeasurements"]


def test_tune_api_and_cli_store_their_run_summaries(tmp_path):
    db = tunedb.open(tmp_path / "db")
    res = tunedb.tune(db, tunedb.local_target(TARGET), {"family": "matmul", "M": 16, "N": 16, "K": 16}, budget=2)
    (run,) = db.runs("tune")
    assert run["tasks"][0]["evaluations"] == res.evaluations == 2 and run["label"] == "warm"
    assert run["tasks"][0]["best"] == pytest.approx(res.best_cost)
    evals = {k: v for k, v in res.origins.items() if k not in ("runoff", "confirm")}
    assert run["origins"] == res.origins and sum(evals.values()) == 2 and res.origins["default"] == 1
    assert res.origins.get("runoff", 0) + res.origins.get("confirm", 0) == res.remeasurements == 6
    assert {r.meta["origin"] for r in db.iter_records()} <= {"default", "random", "model", "runoff", "confirm"}
    r = _cli("tune", "--db", str(tmp_path / "db"), "--target", TARGET, "--workload", "matmul:M=16,N=16,K=16",
             "--budget", "2", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    runs = tunedb.open(tmp_path / "db").runs("tune")
    assert len(runs) == 2 and runs[-1]["run_id"] == out["run_id"]
    assert runs[-1]["cache_hits"] == 2 and runs[-1]["eta"] == 1.0  # the same configs again: all hits
    assert runs[-1]["origins"] == {"resume": 2}   # answered from this entry's own records
    assert runs[-1]["origin_split"] == {"resume": {"cache_hits": 2, "measured": 0, "failed": 0}}
