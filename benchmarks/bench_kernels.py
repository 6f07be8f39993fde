"""Kernel and measurement benchmark: best-of-sweep GFLOP/s per family vs NumPy, costs of measuring, noise.

For each family on a representative shape (1 thread, ``cpu-native``):
* a short random sweep (``--sweep`` configs, seeded, plus the family's default config) measured with
  ``measure_many`` (parallel builds, serial isolated runs) -> best GFLOP/s;
* NumPy's equivalent timed in this process with the same protocol -> ratio best / NumPy;
* mean build seconds (compiler runs only), run seconds (isolated worker lifetime) and tuner overhead
  (wall per measurement minus build and minus the timed kernel runs) per measurement;
* coefficient of variation of the means of 10 repeated measurements of the default config.

Reproduce: ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_kernels.py --json``
(builds go to a fresh temporary cache unless ``TUNEDB_CACHE_DIR`` is set).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = {
    "matmul": {"family": "matmul", "M": 512, "N": 512, "K": 512},
    "conv2d": {"family": "conv2d", "N": 1, "C": 64, "H": 28, "W": 28, "K": 64, "R": 3, "S": 3, "stride": 1,
               "pad": 1, "layout": "NCHW"},
    "softmax": {"family": "softmax", "M": 512, "N": 1024},
    "numpy_matmul": {"family": "numpy_matmul", "M": 512, "N": 512, "K": 512},
}


def numpy_gflops(fam, w: dict, proto) -> float:
    """GFLOP/s of NumPy's own implementation (OpenBLAS threads as set in the environment)."""
    from tunedb.transfer.measure.timing import time_callable

    inputs = fam.make_inputs(w, 0)
    fn = fam.numpy_baseline(w, inputs)
    fn()
    costs, _ = time_callable(fn, proto)
    return fam.flops(w) / (sum(costs) / len(costs)) / 1e9


def bench_family(name: str, sweep: int, seed: int, repeats_cv: int) -> dict:
    from tunedb.index.hardware.localcpu import preset
    from tunedb.transfer.kernels import get_family
    from tunedb.transfer.measure.backend import LocalBackend, MeasureOptions, TimingProtocol

    fam = get_family(name)
    w = fam.validate_workload(SHAPES[name])
    sp = fam.space(w)
    rng = random.Random(seed)
    target = preset("cpu-native-t1")
    cfgs = [fam.default_config(w, target)] + [sp.sample(rng) for _ in range(sweep)]
    proto = TimingProtocol(warmup=1, min_repeat_ms=20, repeat=5)
    be = LocalBackend(MeasureOptions(protocol=proto, run_timeout_s=60))
    t0 = time.perf_counter()
    recs = be.measure_many(target, w, cfgs)
    sweep_s = time.perf_counter() - t0
    ok = [r for r in recs if r.status == "ok"]
    best = min(ok, key=lambda r: r.cost) if ok else None
    builds = [r.compile_s for r in recs if r.compile_s is not None and not r.meta.get("build_cached", True)]
    runs = [r.meta["run_wall_s"] for r in recs if r.meta.get("run_wall_s") is not None]
    timed = [r.cost * r.meta["number"] * r.meta["repeat"] for r in ok]
    overhead = (sweep_s - sum(builds) - sum(timed)) / max(1, len(recs))
    np_gf = numpy_gflops(fam, w, proto)
    cv_means = []
    for _ in range(repeats_cv):
        r = be.measure(target, w, cfgs[0])
        if r.status == "ok":
            cv_means.append(r.cost)
    cv = statistics.stdev(cv_means) / statistics.mean(cv_means) if len(cv_means) > 1 else None
    best_gf = best.meta["gflops"] if best else None
    return {
        "family": name, "workload": w, "configs": len(recs),
        "statuses": {s: sum(r.status == s for r in recs) for s in {r.status for r in recs}},
        "best_gflops": best_gf, "best_config": best.config if best else None,
        "default_gflops": recs[0].meta.get("gflops"),
        "numpy_gflops": np_gf, "ratio_vs_numpy": (best_gf / np_gf) if best_gf else None,
        "build_s_mean": statistics.mean(builds) if builds else 0.0,
        "run_s_mean": statistics.mean(runs) if runs else None,
        "overhead_s_per_measurement": overhead,
        "cv_of_10_measurements": cv, "cv_runs": len(cv_means),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--sweep", type=int, default=8, help="random configs per family (plus the default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cv-repeats", type=int, default=10)
    ap.add_argument("--families", default=",".join(SHAPES))
    args = ap.parse_args(argv)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # NumPy baseline on one thread, like the target
    tmp = None
    if "TUNEDB_CACHE_DIR" not in os.environ:
        tmp = tempfile.TemporaryDirectory(prefix="tunedb-bench-")
        os.environ["TUNEDB_CACHE_DIR"] = tmp.name
    results = [bench_family(f, args.sweep, args.seed, args.cv_repeats) for f in args.families.split(",") if f]
    out = {"benchmark": "kernels", "target": "cpu-native-t1", "sweep": args.sweep, "results": results}
    if args.json:
        print(json.dumps(out, default=str))
    else:
        print(f"{'family':<13} {'best GF/s':>9} {'numpy GF/s':>10} {'ratio':>6} {'build s':>8} {'run s':>6} "
              f"{'ovh s':>6} {'cv(10)':>7}")
        for r in results:
            def f(x, fmt):
                return format(x, fmt) if isinstance(x, (int, float)) else "-"
            print(f"{r['family']:<13} {f(r['best_gflops'], '9.2f')} {f(r['numpy_gflops'], '10.2f')} "
                  f"{f(r['ratio_vs_numpy'], '6.2f')} {f(r['build_s_mean'], '8.2f')} {f(r['run_s_mean'], '6.2f')} "
                  f"{f(r['overhead_s_per_measurement'], '6.3f')} {f(r['cv_of_10_measurements'], '7.3f')}")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
