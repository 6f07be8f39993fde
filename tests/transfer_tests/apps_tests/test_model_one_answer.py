"""One answer per model and DB: a model's latency and configs are a function of the DB's
answers (the run that measured, a rerun that measured nothing and a second model sharing tasks
print the same), ``tunedb best`` names the same config, a config no paired decision covers is
shown as undecided and never summed into the latency, and eta (tasks answered by the DB) is
100 % for a model the DB answered whole, in the run, ``tunedb stats`` and the report.

Measurements come from the project's synthetic backend (known true costs with injected noise:
fast, no compiler); real memory and Parquet stores, the real CLI in a subprocess."""

from __future__ import annotations

import json
import random
import zlib

import pytest

import tunedb
from tunedb.datasets.models import load_model
from tunedb.index.contract.decisions import answer
from tunedb.index.model.keys import canonical_json, key_of
from tunedb.index.model.record import Record
from tunedb.transfer.apps.tune_model import ModelOptions, tune_model
from tunedb.transfer.cli.commands.model import human_summary
from tunedb.transfer.cli.commands.store import model_answer_of
from tunedb.transfer.measure.jobs import local_job
from tunedb.transfer.measure.synthetic import NoiseModel, SyntheticBackend

from helpers import run_cli

TARGET = "cpu-x86-64-t1"
A = {"name": "a", "workload": {"family": "matmul", "M": 16, "N": 32, "K": 16}, "weight": 2}
B = {"name": "b", "workload": {"family": "matmul", "M": 32, "N": 16, "K": 16}, "weight": 3}
C = {"name": "c", "workload": {"family": "matmul", "M": 16, "N": 16, "K": 32}, "weight": 1}


def true_cost(config: dict) -> float:
    """A fixed cost per config (seconds, 50-150 us; the family's default configs of the tasks
    twice as slow, so that a search finds faster ones): the synthetic backend's truth."""
    slow = 2.0 if key_of(config) in DEFAULTS else 1.0
    return slow * (50e-6 + (zlib.crc32(canonical_json(dict(config)).encode()) % 1000) * 1e-7)


DEFAULTS = {key_of(local_job(tunedb.local_target(TARGET), t["workload"]).defaults) for t in (A, B, C)}


def _model(tmp_path, name: str, tasks: list[dict]):
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps({"format": "tunedb-model", "version": 1, "name": name, "tasks": tasks}))
    return load_model(str(p))


def _configs(out: dict) -> dict:
    return {t["workload_key"]: t["best_config"] for t in out["tasks"]}


def _agrees_with_best(db, target: dict, out: dict) -> None:
    """Every task's config is what ``tunedb best`` says a model answers the entry with, and,
    where a decision replaced the default, ``best``'s first config."""
    for t in out["tasks"]:
        job = local_job(target, t["workload"])
        model = model_answer_of(db, job.target, job.workload)
        assert model["config"] == t["best_config"], t["name"]
        assert t["best"] == db.cost(job.target, job.workload, t["best_config"]).value
        if t["choice"] in ("tuned", "stored"):
            assert answer(db, job.target, job.workload).first().config == t["best_config"]
        else:
            assert t["best_config"] == job.defaults and t["chosen"].startswith("default kept: ")


@pytest.mark.parametrize("store", ["memory", "parquet"])
def test_one_latency_one_config_per_task_and_eta(tmp_path, store):
    path = tmp_path / "db"
    db = tunedb.open("memory:" if store == "memory" else path)
    target = tunedb.local_target(TARGET)
    be = SyntheticBackend(true_cost, NoiseModel(cv=0.03, seed=1))
    first_model, second_model = _model(tmp_path, "one", [A, B]), _model(tmp_path, "two", [B, C])
    opts = ModelOptions(budget=6)

    first = tune_model(db, first_model, target, options=opts, backend=be)
    assert first["measurements"] > 0 and first["latency"] <= first["default_latency"]
    _agrees_with_best(db, target, first)
    again = tune_model(db, first_model, target, options=opts, backend=be)    # measures nothing
    assert again["measurements"] == again["reference_measurements"] == 0
    assert again["latency"] == first["latency"] and _configs(again) == _configs(first)
    assert [t["chosen"] for t in again["tasks"]] == [t["chosen"] for t in first["tasks"]]
    # eta: the run the DB answered whole says 100 %, the tuning run 0 %
    assert (again["eta"], again["tasks_answered"], first["eta"]) == (1.0, 2, 0.0)
    assert again["t_total_predicted_s"] == pytest.approx(again["query_s"])   # T_full (1 - 1) + T_query
    assert "eta (tasks answered by the DB): 2/2 tasks = 100.0 %" in human_summary(again)
    _agrees_with_best(db, target, again)

    second = tune_model(db, second_model, target, options=opts, backend=be)  # shares task b
    shared = key_of(local_job(target, B["workload"]).workload)
    tb = next(t for t in second["tasks"] if t["workload_key"] == shared)
    assert tb["source"] == "hit" and tb["best_config"] == _configs(first)[shared]
    assert tb["best"] == next(t["best"] for t in first["tasks"] if t["workload_key"] == shared)
    assert second["eta"] == 0.5
    _agrees_with_best(db, target, second)

    # a config of b estimated far below everything (6 records: a 95 % interval entirely below the
    # others'), that no paired test compared with the default: shown as undecided, its gain not
    # in the latency, the answer unchanged
    job = local_job(target, B["workload"])
    known = {key_of(c) for c in _configs(first).values()} | {key_of(job.defaults)}
    rng = random.Random(3)
    fast = next(c for c in (job.space.sample(rng) for _ in range(200)) if key_of(c) not in known)
    db.commit([Record(job.target, job.workload, fast, [v * 1e-6] * 3, meta={"origin": "confirm"})
               for v in (5, 5.1, 4.9, 5.05, 4.95, 5.02)])
    assert answer(db, job.target, job.workload).first().config == fast      # tunedb best's #1
    third = tune_model(db, first_model, target, options=opts, backend=be)
    assert third["latency"] == first["latency"] and _configs(third) == _configs(first)
    tb = next(t for t in third["tasks"] if t["workload_key"] == shared)
    assert tb["undecided"]["config"] == fast and tb["undecided"]["gain_s"] > 0
    assert "undecided" in tb["chosen"] and third["tasks_undecided"] == 1
    assert "undecided: 1 task(s)" in human_summary(third)
    model = model_answer_of(db, job.target, job.workload)
    assert model["config"] == tb["best_config"] and model["undecided"] == fast
    if store == "parquet":
        out = json.loads(run_cli("best", "--db", str(path), "--target", TARGET, "--workload",
                                 "matmul:M=32,N=16,K=16", "--json").stdout)
        assert out["configs"][0]["config"] == fast and out["model_answer"]["config"] == tb["best_config"]
        stats = json.loads(run_cli("stats", "--db", str(path), "--json").stdout)
        n_answered = again["tasks_answered"] + second["tasks_answered"] + third["tasks_answered"]
        assert (stats["tasks_answered_all_runs"], stats["tasks_all_runs"]) == (n_answered, 8)
        assert stats["eta_all_runs"] == pytest.approx(n_answered / 8)
        text = run_cli("stats", "--db", str(path)).stdout
        assert "eta (tasks answered by DB)" in text and "evaluation hit rate" in text
        from tunedb.transfer.apps.report import build_report

        rep = build_report(db, tmp_path / "rep")
        assert rep["summary"]["eta"]["answered"] == n_answered
        page = (tmp_path / "rep" / "index.html").read_text()
        assert "<td class=\"num\">2/2</td><td class=\"num\">100%</td>" in page
