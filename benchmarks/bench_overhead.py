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

Time to first proposal (``first_proposal_s``, goal <= 0.1 s): from ``WarmStart.tune`` being
called to its first evaluation (a config handed to Kernel Tuner's runner, or a DB answer),
so a time-limited run does not lose its first seconds to tunedb's set-up.

Replayed CLI tune (``cli``, goal <= 1 s + 20 ms per evaluation): ``tunedb tune --replay
<held-out cache> --budget --evals`` on a fresh copy of the imported DB, timed from process start
to exit (the ``tunedb`` executable beside this Python, else ``python -m tunedb``), ``--repeats``
times; the median counts.  ``summary`` gives each goal and the ratio median / goal (<= 1: met).
Timings depend on whether Python may write bytecode (``PYTHONDONTWRITEBYTECODE``, reported as
``bytecode_cached``): without it every process compiles tunedb's sources again.

    .venv/bin/python benchmarks/bench_overhead.py --json                  # 6 devices, about 3 min
    .venv/bin/python benchmarks/bench_overhead.py --devices A100 --evals 20
    .venv/bin/python benchmarks/bench_overhead.py --devices W7800 --kt "" --repeats 3 --json
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
FIRST_PROPOSAL_GOAL_S = 0.1  # seconds from WarmStart.tune to its first evaluation
SOURCE = "__global__ void {name}(float *a, float *b, float *c) {{}}"  # simulation mode never compiles it


def _restrictions(kernel: str) -> list[str]:
    t1 = json.loads((DATA / f"{kernel}.json").read_text())
    return [c["Expression"] for c in t1["ConfigurationSpace"]["Conditions"]]


class Timed:
    """A strategy wrapper: ``seconds`` in ``tune``, ``cost_s`` inside the cost function and
    ``first_s`` from the call of ``tune`` to the first config handed to the runner (or to
    :meth:`evaluated`, whichever comes first; None when neither happened)."""

    def __init__(self, inner):
        self.inner, self.seconds, self.cost_s, self.first_s, self.t_start = inner, 0.0, 0.0, None, None

    def evaluated(self, *_args) -> None:
        """Mark an evaluation now (a progress callback of the wrapped strategy)."""
        if self.first_s is None and self.t_start is not None:
            self.first_s = time.perf_counter() - self.t_start

    def tune(self, searchspace, runner, tuning_options):
        outer = self
        real = runner.run

        def run(*args, **kwargs):
            outer.evaluated()
            t0 = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                outer.cost_s += time.perf_counter() - t0
        runner.run = run
        t0 = self.t_start = time.perf_counter()
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
        ws.progress = timed.evaluated
        tune(timed)
        o = ws.last_run.overhead
        out[label] = {"own_s": round(timed.seconds - timed.cost_s, 3), "kt_fevals": ws.last_run.kt_fevals,
                      "first_proposal_s": None if timed.first_s is None else round(timed.first_s, 3),
                      "steps": {k: round(v, 3) for k, v in o.items() if k not in ("total", "measure") and v >= 0.01}}
    for name in kt:
        timed = Timed(strategy_map[name])
        tune(timed)
        out[name] = {"own_s": round(timed.seconds - timed.cost_s, 3),
                     "first_proposal_s": None if timed.first_s is None else round(timed.first_s, 3)}
    print(json.dumps(out), flush=True)


def tunedb_command() -> list[str]:
    """The ``tunedb`` executable beside this Python (a user's command), else ``python -m tunedb``."""
    exe = Path(sys.executable).with_name("tunedb")
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "tunedb"]


def cli_tune(db: Path, held: Path, evals: int, repeats: int) -> dict:
    """``tunedb tune --replay held --budget evals`` on fresh copies of ``db``, each timed from
    process start to exit (seconds): {"wall_s": [...], "median_s", "evaluations"}."""
    walls, evaluations = [], None
    for i in range(repeats):
        d = db.with_name(f"{db.name}-cli{i}")
        shutil.copytree(db, d)
        t0 = time.perf_counter()
        p = subprocess.run([*tunedb_command(), "tune", "--replay", str(held), "--budget", str(evals), "--db", str(d),
                            "--json"], capture_output=True, text=True, timeout=900)
        walls.append(round(time.perf_counter() - t0, 3))
        if p.returncode != 0:
            raise RuntimeError(f"tunedb tune --replay failed: {p.stderr.strip()[-2000:]}")
        evaluations = json.loads(p.stdout).get("evaluations")
        shutil.rmtree(d, ignore_errors=True)
    return {"wall_s": walls, "median_s": round(statistics.median(walls), 3), "evaluations": evaluations}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", default="convolution_milo")
    ap.add_argument("--devices", default="", help="held-out devices (cache file stems); default all")
    ap.add_argument("--evals", type=int, default=20)
    ap.add_argument("--kt", default="random_sample,genetic_algorithm,greedy_ils", help="Kernel Tuner strategies")
    ap.add_argument("--repeats", type=int, default=1, help="replayed CLI tunes per device (default 1)")
    ap.add_argument("--no-cli", action="store_true", help="skip the replayed CLI tune")
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
        if not a.no_cli:
            r["cli"] = cli_tune(db, h, a.evals, max(a.repeats, 1))
        rows.append(r)
        if not a.json:
            cli = f"  CLI tune {r['cli']['median_s']:5.2f} s" if "cli" in r else ""
            print(f"{r['device']:8s} import {import_s:5.1f} s (model {r['model_fit_s']:.1f} s)  tunedb first run "
                  f"{r['first']['own_s']:5.2f} s (first proposal {r['first']['first_proposal_s']} s), second "
                  f"{r['second']['own_s']:5.2f} s{cli}  |  " +
                  "  ".join(f"{k} {r[k]['own_s']:.2f} s" for k in a.kt.split(",") if k), flush=True)
    goal = 1.0 + 0.02 * a.evals
    summary: dict = {"goal_s": goal, "first_proposal_goal_s": FIRST_PROPOSAL_GOAL_S}
    for key in ["first", "second", *[k for k in a.kt.split(",") if k]]:
        v = [r[key]["own_s"] for r in rows]
        summary[key] = {"median_s": round(statistics.median(v), 3), "min_s": min(v), "max_s": max(v),
                        "ratio_to_goal": round(statistics.median(v) / goal, 3)}
        f = [r[key]["first_proposal_s"] for r in rows if r[key].get("first_proposal_s") is not None]
        if f:
            summary[key]["first_proposal_median_s"] = round(statistics.median(f), 3)
            summary[key]["first_proposal_ratio_to_goal"] = round(statistics.median(f) / FIRST_PROPOSAL_GOAL_S, 3)
    if not a.no_cli:
        v = [r["cli"]["median_s"] for r in rows]
        summary["cli"] = {"median_s": round(statistics.median(v), 3), "min_s": min(v), "max_s": max(v),
                          "ratio_to_goal": round(statistics.median(v) / goal, 3)}
    out = {"host": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "kernel": a.kernel,
           "evals": a.evals, "bytecode_cached": not os.environ.get("PYTHONDONTWRITEBYTECODE"),
           "summary": summary, "runs": rows}
    shutil.rmtree(work, ignore_errors=True)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"goal {goal:.2f} s; tunedb first run median {summary['first']['median_s']:.2f} s "
              f"[{summary['first']['min_s']:.2f}, {summary['first']['max_s']:.2f}], second run median "
              f"{summary['second']['median_s']:.2f} s" +
              (f"; replayed CLI tune median {summary['cli']['median_s']:.2f} s" if "cli" in summary else "") +
              f"; first proposal goal {FIRST_PROPOSAL_GOAL_S} s, median "
              f"{summary['first'].get('first_proposal_median_s')} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
