"""tune-model and the entry's one answer: a default a run kept stays the answer (``tunedb best``
and the next model's hit), and every count a model run prints adds up: the table's columns sum
to the summary, and ``stats``, the report, the dashboard and the run agree on one hit rate.

Real builds and runs on this CPU (gcc), real Parquet directories."""

from __future__ import annotations

import json
import random
import re

import pytest

import tunedb
from tunedb.datasets.models import load_model
from tunedb.index.contract.decisions import DECISION_KIND, answer, decision_summary, store_decision
from tunedb.index.model.keys import key_of
from tunedb.index.model.record import Record
from tunedb.transfer.apps.tune_model import ModelOptions, tune_model
from tunedb.transfer.measure.jobs import local_job
from tunedb.transfer.search.runlog import run_hit_rate, run_totals

from helpers import run_cli

TARGET = "cpu-x86-64-t1"


@pytest.fixture()
def model_file(tmp_path):
    """A two-task model of small matrix products (a JSON model of the shipped format)."""
    p = tmp_path / "tiny.json"
    p.write_text(json.dumps({"format": "tunedb-model", "version": 1, "name": "tiny", "tasks": [
        {"name": "a", "workload": {"family": "matmul", "M": 16, "N": 32, "K": 16}, "weight": 2},
        {"name": "b", "workload": {"family": "matmul", "M": 32, "N": 16, "K": 16}, "weight": 1}]}))
    return p


def test_a_kept_default_is_what_best_and_the_next_model_answer(tmp_path, model_file):
    """The tuned config has the lower estimate, but the run that tested it kept the default
    (not proven faster): ``tunedb best`` and a later model hitting the entry answer with the default."""
    model = load_model(str(model_file))
    target = tunedb.local_target(TARGET)
    path = tmp_path / "db"
    db = tunedb.open(path)
    for task in model.tasks:
        job = local_job(target, task.workload)
        rng = random.Random(1)
        tuned = next(c for c in (job.space.sample(rng) for _ in range(50)) if c != job.defaults)
        db.commit([Record(job.target, job.workload, job.defaults, [v * 1e-6] * 3, meta={"origin": "confirm"})
                   for v in (100, 103, 98)]
                  + [Record(job.target, job.workload, tuned, [v * 1e-6] * 3, meta={"origin": "confirm"})
                     for v in (90, 112, 95)])
        assert db.best_costs(job.target, job.workload, 1)[0].config == tuned
        store_decision(db, decision_summary(key_of(job.target), key_of(job.workload), tuned, job.defaults,
                                            "inconclusive", by="tune-model", kept=job.defaults, ratio=0.95,
                                            lo=0.8, hi=1.1, level=0.95, rounds=6))
        assert answer(db, job.target, job.workload).first().config == job.defaults
    out = tune_model(db, model, target, options=ModelOptions(budget=4))
    for t, task in zip(out["tasks"], model.tasks):
        job = local_job(target, task.workload)
        assert t["source"] == "hit" and t["best_config"] == job.defaults and t["choice"] == "default"
        assert t["best"] == db.cost(job.target, job.workload, job.defaults).value
    wl = "matmul:M=16,N=32,K=16"
    best = json.loads(run_cli("best", "--db", str(path), "--target", TARGET, "--workload", wl, "--json").stdout)
    job = local_job(target, model.tasks[0].workload)
    assert best["configs"][0]["config"] == job.defaults and best["configs"][0]["kept"]
    assert out["measurements"] == out["cache_hits"] == out["evaluations"] == 0  # hits take no evaluations


@pytest.mark.slow
def test_model_counts_add_up_and_every_surface_has_one_hit_rate(tmp_path, model_file):
    from tunedb.transfer.apps.dashboard.data import hit_rate as dashboard_hit_rate
    from tunedb.transfer.apps.report import build_report
    from tunedb.transfer.apps.rundata import RunsData, merge_runs, stored_runs
    from tunedb.transfer.cli.commands.model import human_summary

    path = tmp_path / "db"
    db = tunedb.open(path)
    model = load_model(str(model_file))
    target = tunedb.local_target(TARGET)
    first = tune_model(db, model, target, options=ModelOptions(budget=6))
    again = tune_model(db, model, target, options=ModelOptions(budget=6))  # every task a hit now
    for out in (first, again):
        for col in ("evaluations", "measurements", "cache_hits"):
            assert sum(t[col] for t in out["tasks"]) == out[col], col
        assert run_totals(out) == (out["evaluations"], out["cache_hits"])
        text = human_summary(out)
        assert (f"search: {out['evaluations']} evaluations = {out['measurements']} new + {out['cache_hits']} "
                "answered by the DB") in text
    assert again["evaluations"] == 0 and again["reference_cache_hits"] >= len(model.tasks)
    # every tested task's decision is stored with the config the run kept, and is the entry's answer
    decisions = db.runs(DECISION_KIND)
    for t, task in zip(first["tasks"], model.tasks):
        if t.get("versus_default"):
            job = local_job(target, task.workload)
            d = next(d for d in decisions if d["run_id"] == t["decision_id"])
            assert d["kept"] == key_of(t["best_config"]) and d["verdict"] == t["versus_default"]["verdict"]
            head = answer(db, job.target, job.workload).first()
            kept_est = db.cost(job.target, job.workload, t["best_config"])
            assert head.config == t["best_config"] or head.estimate.hi < kept_est.lo
    # one hit rate: stats, the report's data (table and figure), the dashboard
    hits, evals = run_hit_rate(db.runs())
    assert (hits, evals) == (first["cache_hits"] + again["cache_hits"], first["evaluations"] + again["evaluations"])
    stats = json.loads(run_cli("stats", "--db", str(path), "--json").stdout)
    assert (stats["cache_hits_all_runs"], stats["evaluations_all_runs"]) == (hits, evals)
    data = merge_runs(RunsData(), stored_runs(db))
    assert data.stored == 2  # the decisions are not tuning runs
    assert (sum(p["cache_hits"] for p in data.hit_points), sum(p["evaluations"] for p in data.hit_points)) \
        == (hits, evals)
    assert dashboard_hit_rate(data.summaries) == (hits, evals)
    # the report's tables: a run's row (evaluations, measurements, hits, hit rate) is its tasks'
    # sums, and the hit-rate table's rows are the same numbers
    build_report(db, tmp_path / "rep")
    page = (tmp_path / "rep" / "index.html").read_text()
    runs_table = page[page.index("<h2>Tuning runs</h2>"):]
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", runs_table.split(
        "</table>")[0]) if "<td" in r]
    assert [(int(r[5]), int(r[6]), int(r[7])) for r in rows] == [
        (o["evaluations"], o["measurements"], o["cache_hits"]) for o in (first, again)]
    assert rows[0][8] == f"{first['cache_hits'] / first['evaluations']:.0%}" and rows[1][8] == "–"


def test_report_and_dashboard_best_configs_follow_the_stored_decisions(tmp_path):
    """The report's and the dashboard's best config of an entry is ``tunedb best``'s first row
    (decisions included)."""
    from tunedb.transfer.apps.report import build_report

    t, w = {"kind": "cpu", "name": "rep-target"}, {"family": "matmul", "M": 8, "N": 8, "K": 8}
    a, b = {"tile": 1}, {"tile": 2}
    db = tunedb.open(tmp_path / "db")
    db.commit([Record(t, w, a, [v * 1e-6] * 3, meta={"origin": "confirm"}) for v in (100, 101, 99)]
              + [Record(t, w, b, [v * 1e-6] * 3, meta={"origin": "confirm"}) for v in (90, 111, 94)])
    assert db.best_costs(t, w, 1)[0].config == b
    store_decision(db, decision_summary(key_of(t), key_of(w), b, a, "inconclusive", by="tune-model", kept=a))
    out = build_report(db, tmp_path / "rep")
    html = (tmp_path / "rep" / "index.html").read_text()
    best = html[html.index("Best configs"):]
    assert json.dumps(a, sort_keys=True).replace('"', "&quot;") in best
    assert json.dumps(b, sort_keys=True).replace('"', "&quot;") not in best
    assert out["summary"]["stored_runs"] == 0  # a decision is not a tuning run
    # the dashboard's entry page too
    from tunedb.transfer.apps.dashboard.data import entry_page

    page = entry_page(db, key_of(t), key_of(w), [])
    assert [b["config_key"] for b in page["best"][:2]] == [key_of(a), key_of(b)]
    from tunedb.transfer.apps.dashboard.data import read_snapshot_records, records_part

    (row,) = records_part(db, read_snapshot_records(db))["entries"]
    assert row["best"] == db.cost(t, w, a)
