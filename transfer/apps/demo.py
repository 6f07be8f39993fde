"""``tunedb demo``: real tuning on this CPU, showing what the DB buys when a second model arrives.

1. model A (a BERT-style encoder block, hidden 256) is tuned on this machine's native preset
   with an empty history: every operator task is searched (``tune-model``);
2. model B (the same block at hidden 512) is tuned twice on the same preset:
   * warm: through the DB that holds A -- tasks A already has are hits (reused, not measured),
     the others start from A's nearest entries;
   * cold: no reuse, no seeds, no prior model, with 4x the budget (the comparison baseline);
3. the claim "warm reached cold's latency within 5 %" is decided by a stated test, not assumed
   (``tunedb.transfer.measure.compare``, question "within"): rounds re-measure every task's
   warm and cold chosen config back to back (alternating which goes first; a task whose two
   configs are the same is measured once and counts for both, so it adds no noise), each
   round gives the model latency ratio warm / cold, and rounds are added (up to 12) until the
   95 % interval of the ratio says *holds* (its top <= 1.05), *fails* (its bottom > 1.05), or
   the limit is reached: *inconclusive*, with the measured noise as the reason;
4. model B again: every task is now a hit (nothing measured).

Every latency printed is computed at the end from the DB's estimates (``tunedb.index.estimate``)
of each run's chosen configs, so one config never shows two costs; the whole demo is stored as
one run summary (kind ``demo``, its ``parts`` the tune-model runs, which are also stored as runs
of their own and counted once), so ``tunedb report`` right after it shows warm vs cold.
"""

from __future__ import annotations

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
#: rounds after which the warm-vs-cold test may stop (``compare``'s looks)
LOOKS = (3, 5, 8, 12)


def _decide(db: RecordStore, target: dict, warm: dict, cold: dict, looks: tuple = LOOKS,
            on_round: Callable[[int, Any], None] | None = None) -> Any:
    """Decide "warm's model latency is within :data:`WITHIN` of cold's" by interleaved rounds
    (module docstring, step 3): a ``Comparison`` (ratio = warm / cold)."""
    from tunedb.index.keys import key_of
    from tunedb.transfer.apps.tune_model import measured_value
    from tunedb.transfer.measure.compare import compare
    from tunedb.transfer.measure.jobs import local_job

    pairs = []
    for tw, tc in zip(warm["tasks"], cold["tasks"]):
        job = local_job(target, tw["workload"])
        cw, cc = tw.get("best_config") or job.defaults, tc.get("best_config") or job.defaults
        pairs.append((job, float(tw["weight"]), cw, cc, key_of(cw) == key_of(cc)))

    def round_fn(r: int) -> tuple[float | None, float | None]:
        lw = lc = 0.0
        for job, weight, cw, cc, same in pairs:
            if same:
                v = measured_value(db, job, cw)
                if v is None:
                    return None, None
                lw += weight * v
                lc += weight * v
                continue
            first, second = (cw, cc) if r % 2 == 0 else (cc, cw)
            v1, v2 = measured_value(db, job, first), measured_value(db, job, second)
            if v1 is None or v2 is None:
                return None, None
            vw, vc = (v1, v2) if r % 2 == 0 else (v2, v1)
            lw += weight * vw
            lc += weight * vc
        return lw, lc

    return compare(round_fn, question="within", margin=WITHIN, looks=looks, on_round=on_round)


def verdict(comparison: Any) -> str:
    """The demo's verdict: ``holds`` / ``fails`` / ``inconclusive`` (``Comparison.verdict`` of
    the question "within")."""
    return comparison.verdict if comparison is not None else "inconclusive"


def latency_now(db: RecordStore, target: dict, part: dict) -> float | None:
    """The model latency of a tune-model result's chosen configs by the DB's current estimates
    (sum of weight x ``db.cost``), None when a task has none."""
    from tunedb.transfer.measure.jobs import local_job

    total = 0.0
    for t in part["tasks"]:
        cfg = t.get("best_config")
        job = local_job(target, t["workload"])
        est = db.cost(job.target, job.workload, cfg or job.defaults)
        if est is None:
            return None
        total += float(t["weight"]) * est.value
    return total


def default_latency_now(db: RecordStore, target: dict, part: dict) -> float | None:
    """:func:`latency_now` of every task's default config."""
    return latency_now(db, target, {"tasks": [{**t, "best_config": None} for t in part["tasks"]]})


def headline(res: dict) -> str:
    """One sentence with the claim's direction and interval."""
    v = res["verify"]
    w, c = res["warm"], res["cold"]
    if v.get("ratio") is None:
        return "inconclusive: warm and cold could not be re-measured"
    pct = (v["ratio"] - 1) * 100
    lo, hi = (v["lo"] - 1) * 100, (v["hi"] - 1) * 100
    word = "slower" if pct > 0 else "faster"
    detail = (f"warm/cold latency {v['ratio']:.3f}, {res['level'] * 100:.0f} % CI {v['lo']:.3f}-{v['hi']:.3f} "
              f"({abs(pct):.1f} % {word}; interval {lo:+.1f} % to {hi:+.1f} %) over {v['rounds']} interleaved rounds")
    budget = f"with {w['search_evaluations']} of cold's {c['search_evaluations']} search evaluations"
    if res["verdict"] == "holds":
        return f"holds: warm (through the DB) reached cold's latency within {res['within']:.0%} {budget}: {detail}"
    if res["verdict"] == "fails":
        return (f"fails: warm {budget} is more than {res['within']:.0%} slower than cold: {detail}")
    return (f"inconclusive: {v.get('reason') or 'the interval stayed too wide'}; {detail}; no claim is made")


def run_demo(db: RecordStore, *, budget_per_task: int = 3, seed: int = 0, max_rounds: int = 12,
             target: str = PRESET, progress: Callable[[str, dict], None] | None = None) -> dict:
    """Run the demo on ``db`` with the local preset ``target``; returns the numbers the CLI
    prints (seconds for costs).  ``max_rounds``: the most interleaved rounds of the warm-vs-cold
    test (its looks are :data:`LOOKS` up to it).  ValueError when ``target`` is not a local
    preset or ``max_rounds`` < 3."""
    from tunedb.datasets.models import load_model
    from tunedb.index.hardware.localcpu import local_target
    from tunedb.transfer.apps.tune_model import ModelOptions, evaluations_to_reach, tune_model
    from tunedb.transfer.search import runlog

    watch = runlog.Stopwatch(check_machine=True)
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
    looks = tuple(x for x in LOOKS if x <= max_rounds) or (max_rounds,)
    if max_rounds < 3:
        raise ValueError("the warm-vs-cold test needs at least 3 rounds")
    test = _decide(db, target, warm, cold, looks,
                   on_round=(lambda r, st: progress("verify", {"round": r + 1, "rounds": max(looks), "state": st}))
                   if progress else None)
    again = run(model_b, "B again", budget_b, cold=False)

    # measurements cold needed to reach the latency warm ended at (history: in-run measurements)
    cold_to_warm = evaluations_to_reach(cold["history"], warm["latency"]) if warm["latency"] else None
    parts = [a, warm, cold, again]
    briefs = {}
    for key, part in zip(("a", "warm", "cold", "again"), parts):
        b = _brief(part)
        # one cost per config: every latency from the DB's estimates now (the verification's
        # rounds included), the in-run value kept apart
        b["latency_in_run"] = b["latency"]
        b["latency"] = latency_now(db, target, part)
        b["default_latency"] = default_latency_now(db, target, part)
        briefs[key] = b
    check = test.to_dict()
    out = {
        "db": db.location, "target": target["name"], "model_a": model_a.name, "model_b": model_b.name,
        "budget_per_task": budget_per_task, "cold_factor": COLD_FACTOR,
        **briefs,
        "cold_evaluations_to_warm_latency": cold_to_warm,
        "verify": check, "verdict": verdict(test), "within": WITHIN, "level": test.level,
        "seconds": time.perf_counter() - t_start, "machine_check": watch.machine,
    }
    out["headline"] = headline(out)
    summary = runlog.run_summary(
        "demo", target=target, tasks=[], started=watch.started, wall_s=watch.elapsed(), label="demo",
        options={"budget_per_task": budget_per_task, "seed": seed, "max_rounds": max_rounds},
        records_before=parts[0].get("records_before"), machine=watch.machine,
        extra={"parts": parts, "verdict": out["verdict"], "verify": check, "headline": out["headline"],
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
