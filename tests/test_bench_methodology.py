"""The methodology benchmark's own scoring helpers (``benchmarks/bench_methodology.py``): the
step curve of the first 1 % and the two goals read from the per-space table."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_methodology.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_methodology_under_test", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_step_curve_is_best_so_far_and_nan_before_first_result() -> None:
    bench = load_bench()
    times = np.array([2.0, 1.0, 3.0, np.nan, 5.0])  # out of order, one evaluation missing
    values = np.array([4.0, 6.0, np.nan, 1.0, 3.0])  # the third config invalid
    grid = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 4.0, 5.0, 9.0])
    curve = bench.step_curve(times, values, grid)
    assert np.isnan(curve[:2]).all()  # nothing found before 1 s
    assert curve[2:].tolist() == [6.0, 6.0, 4.0, 4.0, 3.0, 3.0]


def test_step_curve_without_valid_results_is_all_nan() -> None:
    bench = load_bench()
    curve = bench.step_curve(np.array([1.0, 2.0]), np.array([np.nan, np.nan]), np.array([0.0, 3.0]))
    assert np.isnan(curve).all()


def space(warm: list[float], off: list[float], free: list[float], union_mean: float, free_mean: float) -> tuple:
    """Rows of guard_table for one space and its per_case entry (one history-free strategy)."""
    points = ["25%", "50%", "75%", "100%"]
    rows = [{"kernel": "k", "gpu": "G", "point": p, "warmstart": w, "guard_off": o, "best_history_free": "ga",
             "best_history_free_score": f, "union_of_bests": 0.0, "holds": w >= f}
            for p, w, o, f in zip(points, warm, off, free, strict=True)]
    strategies = {"tunedb_warmstart": {**dict(zip(points, warm, strict=True)), "mean": sum(warm) / 4},
                  "tunedb_warmstart_noguard": {**dict(zip(points, off, strict=True)), "mean": sum(off) / 4},
                  "union_of_bests": {"mean": union_mean}, "ga": {"mean": free_mean}}
    return rows, {"k": {"G": {"strategies": strategies}}}


def test_guard_goals_met_where_history_helps_and_cost_small() -> None:
    bench = load_bench()
    rows, per_case = space([0.9, 0.95, 1.0, 1.0], [0.905, 0.95, 1.0, 1.0], [0.5, 0.6, 0.7, 0.8], 0.9, 0.6)
    goals = bench.guard_goals(rows, per_case, ["ga"])
    assert goals["not_below_history_free"] == {"spaces": 1, "met_on": 1, "failures": []}
    cost = goals["guard_cost"]
    assert cost["spaces_history_helps"] == 1 and cost["met_on"] == 1
    assert abs(cost["per_space"][0]["cost"]["25%"] - 0.005) < 1e-12


def test_guard_goals_report_a_loss_and_an_expensive_guard() -> None:
    bench = load_bench()
    rows, per_case = space([0.9, 0.7, 1.0, 1.0], [0.95, 0.9, 1.0, 1.0], [0.5, 0.8, 0.7, 0.8], 0.9, 0.6)
    goals = bench.guard_goals(rows, per_case, ["ga"])
    fail = goals["not_below_history_free"]["failures"]
    assert [(f["points"], round(f["max_deficit"], 6)) for f in fail] == [(["50%"], 0.1)]
    assert goals["guard_cost"]["met_on"] == 0  # 0.2 lost at 50 %


def test_guard_cost_not_counted_where_history_misleads() -> None:
    bench = load_bench()
    rows, per_case = space([0.9, 1.0, 1.0, 1.0], [0.5, 0.4, 0.4, 0.4], [0.8, 1.0, 1.0, 1.0], 0.4, 0.8)
    goals = bench.guard_goals(rows, per_case, ["ga"])
    assert goals["guard_cost"]["spaces_history_helps"] == 0
    assert goals["guard_cost"]["per_space"][0]["history_helps"] is False


def test_each_variant_counts_its_own_seeds(tmp_path) -> None:
    """The n-th run with the guard on and the n-th with it off get the same seed, whatever the
    order the methodology starts them in, and runs started at once never share a seed."""
    import threading

    pytest.importorskip("kernel_tuner")
    spec = importlib.util.spec_from_file_location(
        "tunedb_strategies_under_test", BENCH.parent / "methodology" / "tunedb_strategies.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    order = ["TunedbWarmStart", "TunedbWarmStartNoGuard", "TunedbWarmStartNoGuard", "TunedbWarmStart",
             "TunedbWarmStartNoGuard", "TunedbWarmStart"]
    got = [(v, module.claim_seed(tmp_path, "k", "g", v)) for v in order]
    assert sorted(s for v, s in got if v == "TunedbWarmStart") == [0, 1, 2]
    assert sorted(s for v, s in got if v == "TunedbWarmStartNoGuard") == [0, 1, 2]
    seeds: list[int] = []
    threads = [threading.Thread(target=lambda: seeds.append(module.claim_seed(tmp_path, "k", "h", "V")))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seeds) == list(range(8))
