"""``tunedb demo``: real tuning on this CPU, showing what history buys on a new target.

1. cold-tune SOURCE_WORKLOADS (two families) on the source preset (SSE2-only code);
2. on the new preset (native ISA) tune NEW_WORKLOADS twice: warm (seeded from the DB) and
   cold (random start) with the same budget -- the cold run is the comparison; since a
   cold search neither retrieves nor uses the DB's model, sharing the DB does not change
   its trajectory (its evaluations are counted whether measured or answered by the DB);
3. repeat everything: every evaluation must now be a cache hit.

Every number printed comes from a real measurement committed to the DB.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tunedb.index.base import RecordStore

SOURCE_PRESET = "cpu-x86-64-t1"
NEW_PRESET = "cpu-native-t1"
SOURCE_WORKLOADS = [
    {"family": "matmul", "M": 128, "N": 128, "K": 128},
    {"family": "matmul", "M": 192, "N": 192, "K": 192},
    {"family": "softmax", "M": 256, "N": 512},
]
NEW_WORKLOADS = [
    {"family": "matmul", "M": 160, "N": 160, "K": 160},
    {"family": "matmul", "M": 224, "N": 192, "K": 160},
    {"family": "softmax", "M": 384, "N": 768},
]


def run_demo(db: RecordStore, *, budget: int = 12, source_budget: int = 16, seed: int = 0,
             progress: Callable[[str, dict], None] | None = None) -> dict:
    """Run the demo on ``db``; returns the numbers the CLI prints (seconds for costs)."""
    from tunedb.index.hardware.localcpu import preset
    from tunedb.transfer.measure.backend import measure
    from tunedb.transfer.search.jobs import local_job
    from tunedb.transfer.search.tuner import TuneOptions, Tuner

    t_start = time.perf_counter()
    src_t, new_t = preset(SOURCE_PRESET), preset(NEW_PRESET)

    def run(target: dict, w: dict, cold: bool, label: str, n: int = budget, start_default: bool = False):
        job = local_job(target, w)
        cb = (lambda ev: progress(label, ev)) if progress else None
        return Tuner(db, job.target, job.workload, job.space, job.backend,
                     TuneOptions(budget=n, seed=seed, cold=cold, patience=10_000, start_default=start_default),
                     **job.tuner_kwargs(), progress=cb).run()

    def one_pass(tag: str) -> tuple[list, list, dict]:
        src_rows, new_rows = [], []
        evals = meas = hits = 0
        for w in SOURCE_WORKLOADS:
            r = run(src_t, w, True, f"{tag} cold {SOURCE_PRESET} {w['family']}", source_budget,
                    start_default=True)
            src_rows.append({"workload": r.workload, "best": r.best_cost, "best_config": r.best_config,
                             "measurements": r.measurements, "cache_hits": r.cache_hits})
            evals += r.evaluations
            meas += r.measurements
            hits += r.cache_hits
        for w in NEW_WORKLOADS:
            warm = run(new_t, w, False, f"{tag} warm {NEW_PRESET} {w['family']}")
            cold = run(new_t, w, True, f"{tag} cold {NEW_PRESET} {w['family']}")
            job = local_job(new_t, w)
            default_rec, default_cached = measure(job.target, job.workload, job.defaults, db=db, backend=job.backend)
            meas += 0 if default_cached else 1
            hits += 1 if default_cached else 0
            evals += 1
            bests = [c for c in (warm.best_cost, cold.best_cost) if c is not None]
            goal = min(bests) / 0.95 if bests else None
            w95 = warm.evaluations_to_reach(goal) if goal else None
            c95 = cold.evaluations_to_reach(goal) if goal else None
            new_rows.append({
                "workload": warm.workload, "warm_best": warm.best_cost, "cold_best": cold.best_cost,
                "default_cost": default_rec.cost if default_rec.status == "ok" else None,
                "warm_measurements": warm.measurements + warm.cache_hits,
                "cold_measurements": cold.measurements + cold.cache_hits,
                "warm_evaluations_to_95": w95, "cold_evaluations_to_95": c95,
                "fewer_measurements": (c95 or budget + 1) - (w95 or budget + 1),
                "seeded_from": [s["from_target"] for s in warm.seeds[:3]],
                "warm_history": warm.history, "cold_history": cold.history,
            })
            for r in (warm, cold):
                evals += r.evaluations
                meas += r.measurements
                hits += r.cache_hits
        return src_rows, new_rows, {"evaluations": evals, "measurements": meas, "cache_hits": hits}

    src_rows, new_rows, first = one_pass("1/2")
    _, _, second = one_pass("2/2")
    second["hit_rate"] = second["cache_hits"] / second["evaluations"] if second["evaluations"] else 0.0
    return {
        "db": db.location, "budget": budget, "source_budget": source_budget, "source_preset": SOURCE_PRESET, "new_preset": NEW_PRESET,
        "source": src_rows, "new": new_rows, "first_run": first, "second_run": second,
        "summary": {
            "warm_beats_or_ties_cold": sum(1 for r in new_rows if (r["warm_best"] or 1e9) <= (r["cold_best"] or 1e9)),
            "total_fewer_measurements": sum(r["fewer_measurements"] for r in new_rows),
        },
        "seconds": time.perf_counter() - t_start,
    }
