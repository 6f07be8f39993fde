"""``tunedb demo``'s text: one thing, one number.  The search-budget line quotes single search
samples; the table shows them in their own column, apart from the DB estimates (latency)."""

from __future__ import annotations

from tunedb.index.hardware.localcpu import local_target
from tunedb.index.model.units import fmt_seconds
from tunedb.transfer.apps import demo
from tunedb.transfer.cli.commands.demo import human

TARGET = "cpu-x86-64-t1"


def _result() -> dict:
    d = {"mr": 4, "nr": 64, "vec": 16, "pack": 1}
    warm, cold = {"mr": 4, "nr": 16, "vec": 16, "pack": 1}, {"mr": 2, "nr": 16, "vec": 16, "pack": 0}
    cold_hist = [[1, 3e-3], [2, 2e-3], [3, 1.65e-4], [4, 1.65e-4], [5, 1.65e-4], [6, 1.65e-4]]

    def arm(cfg: dict, latency: float, sample: float | None) -> dict:
        return {"config": cfg, "search_evaluations": 6, "measurements": 6, "db_answers": 0, "latency": latency,
                "best_sample": sample, "history": cold_hist}
    speed = {"speedup": 2.0, "lo": 1.8, "hi": 2.2}
    comparison = {"ratio": 0.9, "lo": 0.85, "hi": 0.95, "rounds": 5, "level": 0.95, "verdict": "faster",
                  "margin": 0.05, "noise_cv": 0.02, "reason": ""}
    v = {"same_config": False, "rounds": 5, "comparison": comparison, "verdict": "faster",
         "speedup_warm": speed, "speedup_cold": speed, "warm_is_default": False, "cold_is_default": False}
    pre = {"holds": True, "speedup": 2.0, "lo": 1.8, "hi": 2.2, "rounds": 5, "config": "warm", "factor": 1.5,
           "reason": ""}
    res = {"verify": v, "precondition": pre, "budget": 6, "cold_evaluations_to_match": None,
           "warm_best_sample": 1.50e-4, "warm": arm(warm, 1.52e-4, 1.50e-4), "cold": arm(cold, 1.66e-4, 1.65e-4),
           "default": {**arm(d, 3.3e-4, None), "search_evaluations": None, "measurements": None,
                       "db_answers": None},
           "db": "x", "target": TARGET, "family": "matmul", "panel": 16, "new_workload":
               {"family": "matmul", "M": 384, "N": 16, "K": 384},
           "stored_entries_before_warm": 2, "seconds": 40.0, "machine_check": None,
           "plan": demo.plan(local_target(TARGET)), "attempts": [],
           "sizing": {"holds": True, "factor": 1.5, "ratios": [2.0], "mean": 2.0},
           "history": [{"reused": True, "measurements": 0}]}
    res["headline"], res["budget_headline"] = demo.headline(res), demo.budget_headline(res)
    return res


def test_budget_line_numbers_are_the_tables_search_sample_column_not_its_latency():
    res = _result()
    text = human(res, "db")
    lines = text.splitlines()
    header = next(ln for ln in lines if ln.startswith("run "))
    assert "best search sample" in header and "latency (DB estimate)" in header
    assert header.index("best search sample") < header.index("latency (DB estimate)")
    row = next(ln for ln in lines if ln.startswith("cold "))
    sample, latency = fmt_seconds(res["cold"]["best_sample"]), fmt_seconds(res["cold"]["latency"])
    assert sample != latency  # 165 us, 166 us: two different things
    # the budget line names the sample, says it is not the DB estimate, and the table shows both apart
    assert f"its best search sample was {sample}" in res["budget_headline"]
    assert "not the DB estimates" in res["budget_headline"]
    assert row.index(sample) < row.index(latency)
    assert any(ln.startswith("best search sample: the fastest single measurement") for ln in lines)
