"""The demo's claims, without measuring: the verification rounds, the precondition, the headlines
and the text the CLI prints (``tunedb demo`` end to end, beside a CPU-bound process, is in
test_demo_busy.py)."""

from __future__ import annotations

import itertools

import pytest

from tunedb.transfer.apps import demo
from tunedb.transfer.cli.commands.demo import human

TARGET = "cpu-native-t1"


def _w() -> dict:
    return demo.workload(384, 8, 384)


def _fake_measure(monkeypatch, costs: dict, jitter: float = 0.02) -> list:
    """Replace ``demo.remeasure`` by a deterministic one: ``costs`` maps a config's nr to its
    seconds, each measurement off by +-``jitter`` (alternating); returns the list of measured configs."""
    seen: list = []
    sign = itertools.cycle((1, -1, 0.5, -0.5))

    def fake(db, job, cfg, origin="confirm"):
        seen.append(dict(cfg))
        return costs[cfg["nr"]] * (1 + jitter * next(sign))
    monkeypatch.setattr(demo, "remeasure", fake)
    return seen


def _configs() -> tuple[dict, dict, dict]:
    from tunedb.index.hardware.localcpu import local_target
    from tunedb.transfer.measure.jobs import local_job

    job = local_job(local_target(TARGET), _w())
    d = dict(job.defaults)
    warm = {**d, "mr": 8, "nr": 8, "vec": 8}
    cold = {**d, "mr": 4, "nr": 16, "vec": 16}
    assert len({d["nr"], 8, 16}) == 3, "the fake tells configs apart by nr"
    return d, warm, cold


def test_verify_decides_warm_vs_cold_and_measures_the_default_alongside(monkeypatch):
    from tunedb.index.hardware.localcpu import local_target

    d, warm, cold = _configs()
    seen = _fake_measure(monkeypatch, {d["nr"]: 3e-3, 8: 1e-3, 16: 2e-3})
    v = demo.verify(None, local_target(TARGET), _w(), warm, cold)
    assert v["verdict"] == "faster" and not v["same_config"]
    c = v["comparison"]
    assert c["lo"] <= c["ratio"] <= c["hi"] < 1 and c["ratio"] == pytest.approx(0.5, rel=0.05)
    # every round measures the three configs once each: 3 x rounds measurements, in rotating order
    assert len(seen) == 3 * v["rounds"] and v["rounds"] >= c["rounds"] and v["rounds"] in demo.LOOKS
    firsts = {seen[3 * r]["nr"] for r in range(min(v["rounds"], 3))}
    assert len(firsts) == min(v["rounds"], 3), "the order rotates"
    assert v["speedup_warm"]["speedup"] == pytest.approx(3.0, rel=0.05)
    assert v["speedup_cold"]["speedup"] == pytest.approx(1.5, rel=0.05)
    pre = demo.precondition(v)
    assert pre["holds"] and pre["config"] == "warm" and pre["lo"] >= demo.FACTOR


def test_the_same_config_is_never_compared_with_itself(monkeypatch):
    from tunedb.index.hardware.localcpu import local_target

    d, warm, _cold = _configs()
    seen = _fake_measure(monkeypatch, {d["nr"]: 3e-3, 8: 1e-3})
    v = demo.verify(None, local_target(TARGET), _w(), warm, dict(warm))
    assert v["same_config"] and v["comparison"] is None and v["verdict"] == "same"
    assert len(seen) == 2 * v["rounds"], "one measurement per distinct config and round"
    assert v["values"]["warm"] == v["values"]["cold"]
    res = _result(v, demo.precondition(v))
    h = demo.headline(res)
    assert h.startswith("same config:") and "CI" not in h and "interval)" in h


def test_a_chosen_config_that_is_the_default_gets_no_speedup_interval(monkeypatch):
    from tunedb.index.hardware.localcpu import local_target

    d, warm, _cold = _configs()
    _fake_measure(monkeypatch, {d["nr"]: 3e-3, 8: 1e-3})
    v = demo.verify(None, local_target(TARGET), _w(), warm, dict(d))
    assert v["cold_is_default"] and not v["warm_is_default"]
    assert v["speedup_cold"] is None and v["speedup_warm"]["speedup"] == pytest.approx(3.0, rel=0.05)
    assert demo.precondition(v)["config"] == "warm"
    both = demo.verify(None, local_target(TARGET), _w(), dict(d), dict(d))
    assert both["same_config"] and both["speedup_warm"] is None and both["speedup_cold"] is None
    pre = demo.precondition(both)
    assert not pre["holds"] and pre["reason"] == "the best config known is the default itself"
    res = _result(both, pre)
    res.update({"db": "x", "target": TARGET, "family": "matmul", "panel": 8, "new_workload": _w(),
                "stored_entries_before_warm": 2, "seconds": 1.0, "machine_check": None,
                "plan": demo.plan(local_target(TARGET)), "attempts": [],
                "sizing": {"holds": True, "factor": 1.5, "ratios": [2.0], "mean": 2.0},
                "history": [{"reused": True, "measurements": 0}]})
    for arm in ("warm", "cold", "default"):
        res[arm]["config"] = d
    res["headline"], res["budget_headline"] = demo.headline(res), demo.budget_headline(res)
    text = human(res, "db")
    assert "CI" not in res["headline"] and text.count("1 (the default itself)") == 2
    assert "1.00x (1.00-1.00)" not in text


def test_precondition_withholds_every_claim_when_the_default_is_nearly_as_fast(monkeypatch):
    from tunedb.index.hardware.localcpu import local_target

    d, warm, cold = _configs()
    _fake_measure(monkeypatch, {d["nr"]: 1.2e-3, 8: 1e-3, 16: 2e-3})
    v = demo.verify(None, local_target(TARGET), _w(), warm, cold)
    pre = demo.precondition(v)
    assert not pre["holds"] and pre["speedup"] == pytest.approx(1.2, rel=0.05) and "less than 1.5x" in pre["reason"]
    assert v["rounds"] == max(demo.LOOKS) or pre["hi"] < demo.FACTOR
    h = demo.headline(_result(v, pre))
    assert h.startswith("no gain claim:") and "warm beats cold" not in h and "not claimed" in h


def _result(v: dict, pre: dict, *, to_match: int | None = None, budget: int = 6) -> dict:
    cold_hist = [[1, 3e-3], [2, 2e-3], [3, 2e-3], [4, 1.5e-3], [5, 1.5e-3], [6, 1.5e-3]]
    arm = {"config": {"mr": 4, "nr": 16, "vec": 16, "pack": 1}, "search_evaluations": budget, "measurements": budget,
           "db_answers": 0, "latency": 1e-3, "best_sample": 1.5e-3, "history": cold_hist}
    return {"verify": v, "precondition": pre, "budget": budget, "cold_evaluations_to_match": to_match,
            "warm_best_sample": 0.9e-3, "warm": dict(arm), "cold": dict(arm),
            "default": {**arm, "search_evaluations": None, "measurements": None, "db_answers": None}}


def test_budget_headline_says_when_cold_matched_and_when_it_did_not():
    res = _result({}, {}, to_match=None)
    assert demo.matched_at(res["cold"]["history"], ["k1", "k2"], res["warm_best_sample"], "kw") is None
    h = demo.budget_headline(res)
    assert h.startswith("search budget: cold did not match warm's result in its 6 evaluations; "
                        "its best search sample was 1.50 ms (1.67x warm's 900 us)")
    # matched by a sample as fast, or by evaluating warm's config itself (whatever its sample said)
    assert demo.matched_at(res["cold"]["history"], [], 2e-3, "kw") == 2
    assert demo.matched_at(res["cold"]["history"], ["k1", "k2", "kw"], 0.5e-3, "kw") == 3
    assert demo.matched_at(res["cold"]["history"], ["kw"], 2e-3, "kw") == 1
    res["cold_evaluations_to_match"] = 2
    assert "cold needed 2 evaluations to match warm's result" in demo.budget_headline(res)


def test_text_output_leads_with_both_claims_and_its_table_matches_the_json(monkeypatch):
    from tunedb.index.hardware.localcpu import local_target

    d, warm, cold = _configs()
    _fake_measure(monkeypatch, {d["nr"]: 3e-3, 8: 1e-3, 16: 2e-3})
    v = demo.verify(None, local_target(TARGET), _w(), warm, cold)
    res = _result(v, demo.precondition(v), to_match=None)
    res.update({"db": "x", "target": TARGET, "family": "matmul", "panel": 8, "new_workload": _w(),
                "stored_entries_before_warm": 2, "seconds": 50.0, "machine_check": None,
                "plan": demo.plan(local_target(TARGET)), "attempts": [],
                "sizing": {"holds": True, "factor": 1.5, "ratios": [2.0, 3.0], "mean": 2.45},
                "history": [{"reused": True, "measurements": 0}, {"reused": True, "measurements": 0}]})
    res["warm"]["config"], res["cold"]["config"], res["default"]["config"] = warm, cold, d
    res["warm"]["db_answers"] = 1
    res["headline"], res["budget_headline"] = demo.headline(res), demo.budget_headline(res)
    text = human(res, "db")
    lines = text.splitlines()
    assert lines[0] == res["headline"] and lines[0].startswith("warm beats cold at equal budget (6 evaluations each)")
    assert lines[1] == res["budget_headline"]
    assert "reusing 2 stored entries" in text and "empty history" not in text
    assert "precondition met" in text
    row = {ln.split()[0]: ln for ln in lines if ln.split() and ln.split()[0] in ("warm", "cold")}
    assert " 6 " in row["warm"] and " 1 " in row["warm"], "warm's evaluations and DB answers as in the JSON"
    assert "none (throwaway store)" in row["cold"]
