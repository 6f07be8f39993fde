"""tunedb's own time in a Kernel Tuner run, beside Kernel Tuner's own strategies' time, on the
first run after an import.

For each held-out device of the shared Kernel Tuner data (``../shared/data/kernel_tuner``, one
kernel): ``tunedb import kernel-tuner`` of the other devices' caches into a fresh DB (the CLI,
which also fits the family's cost model), then ONE fresh Python process runs, in this order:

1. ``WarmStart(db)`` with ``max_fevals=--evals`` in Kernel Tuner's simulation mode on the held-out
   device's cache (the first tuning run after the import, in a new process);
2. the same again on a fresh copy of the imported DB (a second run in the same process);
3. Kernel Tuner's own strategies (``--kt``) with the same budget.

tunedb's own time = the strategy's ``tune`` time less the time inside Kernel Tuner's cost
function (the replayed measurements); a Kernel Tuner strategy's time is counted the same way.
Goal: tunedb's own time <= 1 s + 20 ms per evaluation.  The import's time (and within it the
model fit) is reported beside it.

    .venv/bin/python benchmarks/bench_overhead.py --json                  # 6 devices, about 2 min
    .venv/bin/python benchmarks/bench_overhead.py --devices A100 --evals 20
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "kernel_tuner"
SOURCE = "__global__ void {name}(float *a, float *b, float *c) {{}}"  # simulation mode never compiles it


def _restrictions(kernel: str) -> list[str]:
    t1 = json.loads((DATA / f"{kernel}.json").read_text())
    return [c["Expression"] for c in t1["ConfigurationSpace"]["Conditions"]]


class Timed:
    """A strategy wrapper: ``seconds`` in ``tune`` and ``cost_s`` inside the cost function."""

    def __init__(self, inner):
        self.inner, self.seconds, self.cost_s = inner, 0.0, 0.0

    def tune(self, searchspace, runner, tuning_options):
        outer = self
        real = runner.run

        def run(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                outer.cost_s += time.perf_counter() - t0
        runner.run = run
        t0 = time.perf_counter()
        try:
            return self.inner.tune(searchspace, runner, tuning_options)
        finally:
            self.seconds = time.perf_counter() - t0
            runner.run = real


def child(db_dir: str, cache: str, kernel: str, evals: int, kt: list[str]) -> None:
    """The fresh process: prints one JSON line."""
    import kernel_tuner
    import numpy as np
    from kernel_tuner.interface import strategy_map

    import tunedb
    from tunedb.kernel_tuner import WarmStart

    doc = json.loads(Path(cache).read_text())
    restr = _restrictions(kernel)
    args = [np.zeros(1, np.float32)] * 3
    out: dict = {}

    def tune(strategy) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kernel_tuner.tune_kernel(doc["kernel_name"], SOURCE.format(name=doc["kernel_name"]), doc["problem_size"],
                                     args, doc["tune_params"], restrictions=restr, strategy=strategy,
                                     strategy_options={"max_fevals": evals}, simulation_mode=True, cache=cache,
                                     quiet=True)
    for label in ("first", "second"):
        d = f"{db_dir}-{label}"
        shutil.copytree(db_dir, d)
        ws = WarmStart(tunedb.open(d))
        timed = Timed(ws)
        tune(timed)
        o = ws.last_run.overhead
        out[label] = {"own_s": round(timed.seconds - timed.cost_s, 3), "kt_fevals": ws.last_run.kt_fevals,
                      "steps": {k: round(v, 3) for k, v in o.items() if k not in ("total", "measure") and v >= 0.01}}
    for name in kt:
        timed = Timed(strategy_map[name])
        tune(timed)
        out[name] = {"own_s": round(timed.seconds - timed.cost_s, 3)}
    print(json.dumps(out), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", default="convolution_milo")
    ap.add_argument("--devices", default="", help="held-out devices (cache file stems); default all")
    ap.add_argument("--evals", type=int, default=20)
    ap.add_argument("--kt", default="random_sample,genetic_algorithm,greedy_ils", help="Kernel Tuner strategies")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], a.child[1], a.child[2], int(a.child[3]), [x for x in a.child[4].split(",") if x])
        return 0
    files = sorted(p for p in (DATA / a.kernel).glob("*.json.gz") if "_T4" not in p.name)
    held = [p for p in files if not a.devices or p.name.split(".")[0] in a.devices.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    rows = []
    for h in held:
        db = work / f"db-{h.name.split('.')[0]}"
        cache = work / f"{h.name.split('.')[0]}.json"
        cache.write_bytes(gzip.open(h).read())
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "tunedb", "--db", str(db), "--json", "import", "kernel-tuner",
                            *[str(f) for f in files if f != h]], capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            sys.stderr.write(p.stderr)
            return 1
        imp = json.loads(p.stdout)
        import_s = time.perf_counter() - t0
        p = subprocess.run([sys.executable, __file__, "--child", str(db), str(cache), a.kernel, str(a.evals), a.kt],
                           capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            sys.stderr.write(p.stderr[-3000:])
            return 1
        r = json.loads(p.stdout.strip().splitlines()[-1])
        r.update(device=h.name.split(".")[0], import_s=round(import_s, 3), records=imp.get("new"),
                 model_fit_s=sum(imp.get("models", {}).values()))
        rows.append(r)
        if not a.json:
            print(f"{r['device']:8s} import {import_s:5.1f} s (model {r['model_fit_s']:.1f} s)  tunedb first run "
                  f"{r['first']['own_s']:5.2f} s, second {r['second']['own_s']:5.2f} s  |  " +
                  "  ".join(f"{k} {r[k]['own_s']:.2f} s" for k in a.kt.split(",") if k), flush=True)
    goal = 1.0 + 0.02 * a.evals
    summary = {"goal_s": goal}
    for key in ["first", "second", *[k for k in a.kt.split(",") if k]]:
        v = [r[key]["own_s"] for r in rows]
        summary[key] = {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v)}
    out = {"host": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "kernel": a.kernel,
           "evals": a.evals, "summary": summary, "runs": rows}
    shutil.rmtree(work, ignore_errors=True)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"goal {goal:.2f} s; tunedb first run median {summary['first']['median_s']:.2f} s "
              f"[{summary['first']['min_s']:.2f}, {summary['first']['max_s']:.2f}], second run median "
              f"{summary['second']['median_s']:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
