"""`tunedb demo` end to end: real builds and runs on this CPU, in the default DB directory."""

from __future__ import annotations

import json

import pytest

from helpers import run_cli


@pytest.mark.slow
def test_demo_json_numbers_are_consistent(tmp_path):
    r = run_cli("demo", "--json", "--budget-per-task", "2", "--max-rounds", "3", cwd=tmp_path, timeout=900)
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
    # the verdict is the interleaved test's: its interval against the 5 % margin
    v = out["verify"]
    assert v["question"] == "within" and v["rounds"] == 3 and len(v["a"]) == len(v["b"]) == 3
    assert v["lo"] <= v["ratio"] <= v["hi"] and all(x > 0 for x in v["a"] + v["b"])
    want = "holds" if v["hi"] <= 1.05 else "fails" if v["lo"] > 1.05 else "inconclusive"
    assert out["verdict"] == v["verdict"] == want
    assert out["headline"].startswith(want + ":") and f"{v['ratio']:.3f}" in out["headline"]
    if want == "inconclusive":
        assert "noise" in out["headline"]
    for part in (a, warm, cold, again):
        assert part["latency"] > 0 and part["default_latency"] > 0
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
    # the text output leads with the headline
    text = run_cli("demo", "--budget-per-task", "2", "--max-rounds", "3", cwd=tmp_path, timeout=900)  # (a warm DB)
    assert text.returncode == 0, text.stderr[-2000:]
    first = text.stdout.strip().splitlines()[0]
    assert first.split(":")[0] in ("holds", "fails", "inconclusive")


def test_headline_gives_direction_interval_and_reason():
    from tunedb.transfer.apps.demo import headline, verdict
    from tunedb.transfer.measure.compare import compare

    def res(ratios: list[float]) -> dict:
        c = compare(lambda r: (1e-3 * ratios[r % len(ratios)], 1e-3), question="within", margin=0.05)
        return {"verify": c.to_dict(), "verdict": verdict(c), "within": 0.05, "level": c.level,
                "warm": {"search_evaluations": 21}, "cold": {"search_evaluations": 84}}
    holds = res([0.97, 0.98, 0.96])
    assert holds["verdict"] == "holds"
    h = headline(holds)
    assert h.startswith("holds: warm") and "within 5%" in h and "21 of cold's 84" in h and "faster" in h
    fails = res([1.3, 1.31, 1.29])
    assert fails["verdict"] == "fails" and headline(fails).startswith("fails:") and "slower" in headline(fails)
    noisy = res([0.7, 1.5, 0.8, 1.4])
    assert noisy["verdict"] == "inconclusive"
    assert headline(noisy).startswith("inconclusive: the machine's noise") and "no claim is made" in headline(noisy)
    assert verdict(None) == "inconclusive"
