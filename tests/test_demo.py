"""`tunedb demo` end to end: real builds and runs on this CPU, in the default DB directory."""

from __future__ import annotations

import json

import pytest

from helpers import run_cli


@pytest.mark.slow
def test_demo_json_numbers_are_consistent(tmp_path):
    r = run_cli("demo", "--json", "--budget-per-task", "2", "--verify-rounds", "2", cwd=tmp_path, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    db = tmp_path / "tunedb-data"
    assert (db / "records").is_dir()  # the embedded default DB directory
    a, warm, cold, again = out["a"], out["warm"], out["cold"], out["again"]
    assert a["tasks_hit"] == 0 and a["measurements"] > 0
    # B shares the per-head GEMMs with A: those are hits, the rest is warm-started from A
    assert warm["tasks_hit"] >= 2 and warm["tasks_cold"] == 0 and 0 < warm["eta"] < 1
    assert cold["tasks_hit"] == 0 and cold["tasks_warm"] == 0
    per_task = out["budget_per_task"]
    assert warm["search_evaluations"] <= per_task * warm["tasks_total"]
    assert cold["search_evaluations"] == out["cold_factor"] * per_task * cold["tasks_total"]
    # the second run of B is answered by the DB
    assert again["eta"] == 1.0 and again["measurements"] == 0 and again["search_evaluations"] == 0
    # the verdict follows the interleaved re-measurement
    v = out["verify"]
    assert v["rounds"] == 2 and len(v["ratios"]) == 2 and v["all_ok"]
    assert out["verdict"] == ("holds" if all(x <= 1.05 for x in v["ratios"]) else
                              "fails" if all(x > 1.05 for x in v["ratios"]) else "inconclusive")
    for side in ("warm", "cold"):
        assert all(x > 0 for x in v[f"{side}_latency"])
    # the whole demo is one stored run summary whose parts are the four tune-model runs
    runs = json.loads(run_cli("report", "--db", str(db), "--out", str(tmp_path / "rep"), "--json").stdout)
    assert runs["summary"]["stored_runs"] == 4  # the demo's parts are the four runs, counted once
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "pass --runs" not in html
    assert {"warm_vs_cold.png", "hit_rate.png", "gain_saturation.png"} <= set(runs["files"])
    # the numbers are the database's: A's first task's best is a stored measurement
    best = json.loads(run_cli("best", "--db", str(db), "--target", out["target"], "--workload",
                              "matmul:M=32,N=768,K=256", "--json").stdout)
    assert best["records"], "A's QKV projection is in the DB"


def test_verdict_claims_a_win_only_when_every_round_agrees():
    from tunedb.transfer.apps.demo import verdict

    assert verdict([0.9, 1.0, 1.04]) == "holds"
    assert verdict([1.2, 1.1, 1.3]) == "fails"
    assert verdict([0.95, 1.2, 1.0]) == "inconclusive"
    assert verdict([]) == "inconclusive"
