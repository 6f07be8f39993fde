"""Warm against cold on a live OpenCL device: a tiled GEMM at three problem sizes, each tuned
with the history of the other two.

The device is Kernel Tuner's OpenCL device ``--platform``/``--device`` (PoCL's CPU device where
``pyopencl[pocl]`` is all there is; a GPU's OpenCL driver on a machine with one: the same
command).  The kernel and its space are ``tests/live_opencl.py``'s GEMM.

1. Reference: for each size, Kernel Tuner's brute force over the whole space (``--reference
   exhaustive``) or a 200-evaluation random sample, every result recorded (``Recorder``); its
   best time is the size's reference.
2. For each held-out size and seed: ``warm`` = ``tunedb.kernel_tuner.WarmStart`` on a DB holding
   the reference records of the other two sizes (PoCL's kernel cache is off unless
   ``--pocl-cache``, so every config is compiled for real, as on a device's first use); ``cold`` = Kernel Tuner's own strategies on an
   empty DB (``--cold``, default genetic_algorithm and random_sample), all with
   ``max_fevals=--budget``.
3. Reported per method: the Kernel Tuner fevals until the run evaluates a config within 95 % of
   the reference optimum (the config's reference time <= optimum / 0.95: every method's configs
   are judged by the reference run's measurements), median over seeds and sizes (a run that
   never gets there counts as budget + 1); warm / cold ratios; and tunedb's own time (WarmStart's time less the time
   inside Kernel Tuner's cost function) as a share of the run's wall time.

    .venv/bin/python benchmarks/bench_live.py --json                 # about 10-15 min on 2 cores
    .venv/bin/python benchmarks/bench_live.py --sizes 64,96 --seeds 1 --budget 20   # a smoke run

Goals: warm reaches 95 % in <= 1/3 of cold's fevals; tunedb's share of the wall time <= 5 %.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import tunedb  # noqa: E402
from tunedb.kernel_tuner import Recorder, WarmStart  # noqa: E402

import live_opencl  # noqa: E402


def _config_key(r: dict, names: list[str]) -> tuple:
    return tuple(r.get(k) for k in names)


def _times(results: list[dict]) -> list[float]:
    """Each result's time (ms) in evaluation order, inf for a failure; DB answers left out."""
    out = []
    for r in results:
        if r.get("tunedb") == "db":
            continue
        t = r.get("time")
        out.append(float(t) if isinstance(t, (int, float)) and np.isfinite(t) else float("inf"))
    return out


def fevals_to(results: list[dict], ref: dict[tuple, float], names: list[str], target_ms: float,
              budget: int) -> int:
    """1-based Kernel Tuner feval at which the run first evaluated a config whose *reference*
    time is <= ``target_ms`` (configs are judged by the reference run's measurement of them, not
    by the run's own noisy one, so every method is judged by the same numbers); ``budget + 1``
    when it never did."""
    i = 0
    for r in results:
        if r.get("tunedb") == "db":
            continue
        i += 1
        if ref.get(_config_key(r, names), float("inf")) <= target_ms:
            return i
    return budget + 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="96,128,160", help="GEMM sizes n (n x n), comma-separated")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budget", type=int, default=40, help="max_fevals of every warm and cold run")
    ap.add_argument("--cold", default="genetic_algorithm,random_sample", help="Kernel Tuner strategies")
    ap.add_argument("--reference", choices=("exhaustive", "random200"), default="exhaustive")
    ap.add_argument("--json", action="store_true", help="print one JSON object (no progress)")
    ap.add_argument("--pocl-cache", action="store_true",
                    help="keep PoCL's kernel cache (default off: every config is really compiled, as on first use)")
    a = ap.parse_args()
    if not a.pocl_cache:
        os.environ["POCL_KERNEL_CACHE"] = "0"
    dev, why = live_opencl.device_or_reason()
    if dev is None:
        sys.stderr.write(f"bench_live: {why}\n")
        return 2
    sizes = [int(x) for x in a.sizes.split(",")]
    colds = [c for c in a.cold.split(",") if c]
    say = (lambda *x: None) if a.json else (lambda *x: print(*x, file=sys.stderr, flush=True))
    work = Path(tempfile.mkdtemp(prefix="bench-live-"))
    ref_db = tunedb.open(work / "reference")
    reference: dict[int, float] = {}
    ref_s: dict[int, float] = {}
    ref_times: dict[int, dict[tuple, float]] = {}
    names = list(live_opencl.GEMM_PARAMS)
    warnings.simplefilter("ignore")
    for n in sizes:
        t0 = time.perf_counter()
        strategy = "brute_force" if a.reference == "exhaustive" else "random_sample"
        res, _ = live_opencl.tune_gemm(n, Recorder(ref_db, strategy),
                                       max_fevals=None if a.reference == "exhaustive" else 200)
        ref_times[n] = {_config_key(r, names): t for r, t in zip(res, _times(res))}
        reference[n] = min(ref_times[n].values())
        ref_s[n] = time.perf_counter() - t0
        say(f"reference n={n}: {len(res)} configs, best {reference[n]:.4f} ms ({ref_s[n]:.0f} s)")
    rows: list[dict] = []
    for n in sizes:
        goal = reference[n] / 0.95
        for seed in range(a.seeds):
            for method in ["warm", *colds]:
                random.seed(seed)
                np.random.seed(seed)
                db = tunedb.open(work / f"{method}-{n}-{seed}")
                if method == "warm":
                    db.commit([r for r in ref_db.iter_records() if r.workload.get("problem_size") != [n, n]])
                    strat = WarmStart(db, tunedb.TuneOptions(patience=None, seed=seed))
                else:
                    strat = Recorder(db, method)
                t0 = time.perf_counter()
                res, _ = live_opencl.tune_gemm(n, strat, a.budget)
                wall = time.perf_counter() - t0
                times = _times(res)
                row = {"n": n, "seed": seed, "method": method, "fevals": len(times),
                       "fevals_to_95": fevals_to(res, ref_times[n], names, goal, a.budget),
                       "best_ms": min(times, default=float("inf")),
                       "wall_s": round(wall, 3)}
                if method == "warm":
                    o = strat.last_run.overhead
                    own = float(o.get("total", 0.0)) - float(o.get("measure", 0.0))
                    row.update(tunedb_s=round(own, 3), tunedb_share=round(own / wall, 4),
                               db_answers=strat.last_run.db_answers)
                rows.append(row)
                say(f"n={n} seed={seed} {method:18s} 95% after {row['fevals_to_95']:3d} fevals, "
                    f"best {row['best_ms']:.4f} ms, {wall:.1f} s" +
                    (f", tunedb {row['tunedb_share'] * 100:.1f} % of it" if method == "warm" else ""))
    summary: dict[str, dict] = {}
    for method in ["warm", *colds]:
        mine = [r for r in rows if r["method"] == method]
        f95 = [r["fevals_to_95"] for r in mine]
        summary[method] = {"fevals_to_95_median": statistics.median(f95), "fevals_to_95_min": min(f95),
                           "fevals_to_95_max": max(f95), "reached": sum(r["fevals_to_95"] <= a.budget for r in mine),
                           "runs": len(mine)}
        if method == "warm":
            shares = [r["tunedb_share"] for r in mine]
            summary[method].update(tunedb_share_median=statistics.median(shares), tunedb_share_max=max(shares))
    for c in colds:
        summary[c]["warm_over_this"] = round(summary["warm"]["fevals_to_95_median"] /
                                             summary[c]["fevals_to_95_median"], 3)
    out = {"device": {"name": dev.name.strip(), "platform": dev.platform.name, "driver": dev.driver_version},
           "host": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "sizes": sizes,
           "seeds": a.seeds, "budget": a.budget, "reference": a.reference,
           "reference_ms": reference, "reference_s": ref_s, "summary": summary, "runs": rows}
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"device: {out['device']['name']} ({out['device']['platform']} {out['device']['driver']})")
        print(f"{'method':20s} {'fevals to 95% (median [min, max])':36s} reached  warm/this")
        for m, s in summary.items():
            ratio = s.get("warm_over_this", "")
            print(f"{m:20s} {s['fevals_to_95_median']:>6} [{s['fevals_to_95_min']}, {s['fevals_to_95_max']}]"
                  f"{'':22s} {s['reached']}/{s['runs']}   {ratio}")
        w = summary["warm"]
        print(f"tunedb's share of warm runs' wall time: median {w['tunedb_share_median'] * 100:.1f} %, "
              f"max {w['tunedb_share_max'] * 100:.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
