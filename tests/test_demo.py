"""`tunedb demo` end to end: real builds and runs on this CPU, in the default DB directory."""

from __future__ import annotations

import json

import pytest

from helpers import run_cli


@pytest.mark.slow
def test_demo_json_numbers_are_consistent(tmp_path):
    r = run_cli("demo", "--json", "--budget", "6", cwd=tmp_path, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert (tmp_path / "tunedb-data" / "records").is_dir()  # the embedded default DB directory
    assert len(out["source"]) == 3 and len(out["new"]) == 3
    assert {w["workload"]["family"] for w in out["source"]} == {"matmul", "softmax"}
    first, second = out["first_run"], out["second_run"]
    assert first["measurements"] > 0
    assert second["measurements"] == 0 and second["hit_rate"] == 1.0
    assert second["cache_hits"] == second["evaluations"] == first["evaluations"]
    for row in out["new"]:
        assert row["warm_best"] > 0 and row["cold_best"] > 0
        assert row["warm_measurements"] == row["cold_measurements"] == out["budget"]
        for k in ("warm_evaluations_to_95", "cold_evaluations_to_95"):
            assert row[k] is None or 1 <= row[k] <= out["budget"]
        # the best of the two searches is reached within the budget by at least one of them
        assert row["warm_evaluations_to_95"] is not None or row["cold_evaluations_to_95"] is not None
        assert row["seeded_from"], "warm runs are seeded from the database"
    # the numbers are the database's: each new workload's best is what `best` answers
    db = tmp_path / "tunedb-data"
    row = out["new"][0]
    w = row["workload"]
    spec = w["family"] + ":" + ",".join(f"{k}={v}" for k, v in w.items() if k != "family")
    best = json.loads(run_cli("best", "--db", str(db), "--target", out["new_preset"], "--workload", spec,
                              "--json").stdout)
    assert best["records"][0]["cost"] == pytest.approx(min(row["warm_best"], row["cold_best"], row["default_cost"]
                                                           or 1e9))
    stats = json.loads(run_cli("stats", "--db", str(db), "--json").stdout)
    assert stats["targets"] == 2 and stats["workloads"] == 6
