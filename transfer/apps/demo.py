"""``tunedb demo``: real tuning on this CPU, showing what the DB buys when a second model arrives.

1. model A (a BERT-style encoder block, hidden 256) is tuned on this machine's native preset
   with an empty history: every operator task is searched (``tune-model``);
2. model B (the same block at hidden 512) is tuned twice on the same preset:
   * warm: through the DB that holds A -- tasks A already has are hits (reused, not measured),
     the others start from A's nearest entries;
   * cold: no reuse, no seeds, no prior model, with 4x the budget (the comparison baseline);
3. the verdict is measured, not assumed: the best configs of warm and cold are re-measured
   interleaved (``verify_rounds`` rounds, task by task, warm and cold alternating) and the model
   latencies compared round by round.  Warm "holds" only when every round has it within 5% of
   cold; when the rounds disagree the demo says the comparison is inconclusive (the machine's
   noise is larger than the difference);
4. model B again: every task is now a hit (eta = 1, nothing measured).

Every number printed comes from a real measurement committed to the DB; the whole demo is
stored as one run summary (kind ``demo``, its ``parts`` the three tune-model runs), so
``tunedb report`` right after it shows warm vs cold, the hit rate and eta.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tunedb.index.base import RecordStore

PRESET = "cpu-native-t1"
MODEL_A = "bert_block_256@32"
MODEL_B = "bert_block_512@32"
COLD_FACTOR = 4
WITHIN = 0.05


def _verify(db: RecordStore, target: dict, warm: dict, cold: dict, rounds: int) -> dict:
    """Re-measure each task's warm and cold best config interleaved, ``rounds`` times; the model
    latency (seconds) of each side per round and their ratio."""
    from tunedb.transfer.measure.backend import lookup_or_measure
    from tunedb.transfer.search.jobs import local_job

    lat = {"warm": [0.0] * rounds, "cold": [0.0] * rounds}
    ok = True
    for tw, tc in zip(warm["tasks"], cold["tasks"]):
        job = local_job(target, tw["workload"])
        cfgs = {"warm": tw.get("best_config") or job.defaults, "cold": tc.get("best_config") or job.defaults}
        for r in range(rounds):
            for side in (("warm", "cold") if r % 2 == 0 else ("cold", "warm")):
                (rec, _), = lookup_or_measure(db, job.backend, job.target, job.workload, [cfgs[side]], force=True)
                if rec.status != "ok" or rec.cost is None:
                    ok = False
                    continue
                lat[side][r] += tw["weight"] * rec.cost
    ratios = [w / c for w, c in zip(lat["warm"], lat["cold"]) if c > 0]
    return {"rounds": rounds, "warm_latency": lat["warm"], "cold_latency": lat["cold"], "ratios": ratios,
            "median_ratio": statistics.median(ratios) if ratios else None,
            "all_ok": ok}


def verdict(ratios: list[float], within: float = WITHIN) -> str:
    """``holds`` when every round has warm within ``within`` of cold (or faster), ``fails`` when
    none does, ``inconclusive`` when the rounds disagree."""
    if not ratios:
        return "inconclusive"
    good = [r <= 1 + within for r in ratios]
    if all(good):
        return "holds"
    if not any(good):
        return "fails"
    return "inconclusive"


def run_demo(db: RecordStore, *, budget_per_task: int = 3, seed: int = 0, verify_rounds: int = 3,
             target: str = PRESET, progress: Callable[[str, dict], None] | None = None) -> dict:
    """Run the demo on ``db`` with the local preset ``target``; returns the numbers the CLI
    prints (seconds for costs).  ValueError when ``target`` is not a local preset."""
    from tunedb.datasets.models import load_model
    from tunedb.index.hardware.localcpu import local_target
    from tunedb.transfer.apps.tune_model import ModelOptions, evaluations_to_reach, tune_model
    from tunedb.transfer.search import runlog

    watch = runlog.Stopwatch()
    t_start = time.perf_counter()
    preset_name = target
    target = local_target(preset_name)
    model_a, model_b = load_model(MODEL_A), load_model(MODEL_B)

    def run(model: Any, label: str, budget: int, cold: bool) -> dict:
        cb = (lambda ev: progress(label, ev)) if progress else None
        return tune_model(db, model, target, progress=cb,
                          options=ModelOptions(budget=budget, cold=cold, seed=seed, confirm_rounds=1, label=label))

    budget_b = budget_per_task * len(model_b.tasks)
    a = run(model_a, "A first", budget_per_task * len(model_a.tasks), cold=False)
    warm = run(model_b, "B warm", budget_b, cold=False)
    cold = run(model_b, "B cold", COLD_FACTOR * budget_b, cold=True)
    check = _verify(db, target, warm, cold, verify_rounds)
    again = run(model_b, "B again", budget_b, cold=False)

    # measurements cold needed to reach the latency warm ended at (history: in-run measurements)
    cold_to_warm = evaluations_to_reach(cold["history"], warm["latency"]) if warm["latency"] else None
    cold_at_warm_budget = None
    for n, lat in cold["history"]:
        if n <= warm["search_evaluations"] and lat is not None:
            cold_at_warm_budget = lat
    out = {
        "db": db.location, "target": target["name"], "model_a": model_a.name, "model_b": model_b.name,
        "budget_per_task": budget_per_task, "cold_factor": COLD_FACTOR,
        "a": _brief(a), "warm": _brief(warm), "cold": _brief(cold), "again": _brief(again),
        "cold_evaluations_to_warm_latency": cold_to_warm,
        "cold_latency_at_warm_budget": cold_at_warm_budget,
        "verify": check, "verdict": verdict(check["ratios"]), "within": WITHIN,
        "seconds": time.perf_counter() - t_start,
    }
    parts = [a, warm, cold, again]
    summary = runlog.run_summary(
        "demo", target=target, tasks=[], started=watch.started, wall_s=watch.elapsed(), label="demo",
        options={"budget_per_task": budget_per_task, "seed": seed, "verify_rounds": verify_rounds},
        records_before=parts[0].get("records_before"),
        extra={"parts": parts, "verdict": out["verdict"], "verify": check,
               "measurements": sum(p["measurements"] for p in parts),
               "cache_hits": sum(p["cache_hits"] for p in parts),
               "evaluations": sum(p["evaluations"] for p in parts)})
    out["run_id"] = runlog.save_run(db, summary)
    return out


def _brief(r: dict) -> dict:
    """The fields of a tune-model result the demo prints (the whole result is in the run summary)."""
    keys = ("model", "label", "latency", "default_latency", "eta", "tasks_total", "tasks_hit", "tasks_warm",
            "tasks_cold", "search_evaluations", "measurements", "cache_hits", "remeasurements", "measure_s",
            "query_s", "t_total_s", "t_total_predicted_s", "t_full_s", "gain", "run_id", "history")
    return {k: r.get(k) for k in keys}
