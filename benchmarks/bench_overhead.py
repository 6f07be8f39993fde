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
so a time-limited run does not lose its first seconds to tunedb's set-up.  ``setup_s``:
``WarmStart(tunedb.open(db))``, made before ``tune_kernel`` is called (outside Kernel Tuner's
time budget, but the user's time all the same: the strategy's one-time warm-up runs there).

Replayed CLI tune (``cli``, goal <= 1 s + 20 ms per evaluation): ``tunedb tune --replay
<held-out cache> --budget --evals`` on a fresh copy of the imported DB, timed from process start
to exit (the ``tunedb`` executable beside this Python, else ``python -m tunedb``), ``--repeats``
times; the median counts.  ``summary`` gives each goal and the ratio median / goal (<= 1: met).
Timings depend on whether Python may write bytecode (``PYTHONDONTWRITEBYTECODE``, reported as
``bytecode_cached``): without it every process compiles tunedb's sources again, which an
installed tunedb never does.  ``--pycache-prefix DIR`` lets the measured processes write their
bytecode under DIR (``PYTHONPYCACHEPREFIX``) even where the environment forbids writing it
beside the sources, so a checkout is measured as an installation runs.

Baseline (``--baseline DIR``): DIR holds another version of the package as ``DIR/tunedb`` (e.g.
``git archive <commit> | tar -x -C DIR/tunedb``); every measurement above is made for it too, in
the same run, alternating with the current tree's (its own import into its own DB, its own
child process, its CLI tunes interleaved repeat by repeat), so a busy shared machine slows both
alike.  ``summary["baseline"]`` holds its medians and ``summary["speedup"]`` baseline / current
per measure.

    .venv/bin/python benchmarks/bench_overhead.py --json                  # 6 devices, about 3 min
    .venv/bin/python benchmarks/bench_overhead.py --devices A100 --evals 20
    .venv/bin/python benchmarks/bench_overhead.py --devices W7800 --kt "" --repeats 3 --json
    .venv/bin/python benchmarks/bench_overhead.py --repeats 3 --baseline /tmp/base --pycache-prefix /tmp/pyc --json
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
        t0 = time.perf_counter()
        ws = WarmStart(tunedb.open(d))
        setup_s = time.perf_counter() - t0
        timed = Timed(ws)
        ws.progress = timed.evaluated
        tune(timed)
        o = ws.last_run.overhead
        out[label] = {"own_s": round(timed.seconds - timed.cost_s, 3), "kt_fevals": ws.last_run.kt_fevals,
                      "setup_s": round(setup_s, 3),
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


def variant_env(baseline: str | None, pycache: str | None) -> dict[str, str]:
    """The environment of a measured process: the current tree's (``baseline`` None) or the
    package under ``baseline`` first on the path; bytecode written under ``pycache`` when given."""
    env = dict(os.environ)
    if baseline:
        env["PYTHONPATH"] = os.pathsep.join(x for x in (str(Path(baseline).resolve()), env.get("PYTHONPATH")) if x)
    if pycache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(Path(pycache).resolve())
    return env


def cli_once(db: Path, held: Path, evals: int, env: dict[str, str], tag: str) -> tuple[float, int | None]:
    """One ``tunedb tune --replay held --budget evals`` on a fresh copy of ``db``, timed from
    process start to exit: (seconds, evaluations)."""
    d = db.with_name(f"{db.name}-cli-{tag}")
    shutil.copytree(db, d)
    t0 = time.perf_counter()
    p = subprocess.run([*tunedb_command(), "tune", "--replay", str(held), "--budget", str(evals), "--db", str(d),
                        "--json"], capture_output=True, text=True, timeout=900, env=env)
    wall = round(time.perf_counter() - t0, 3)
    shutil.rmtree(d, ignore_errors=True)
    if p.returncode != 0:
        raise RuntimeError(f"tunedb tune --replay failed: {p.stderr.strip()[-2000:]}")
    return wall, json.loads(p.stdout).get("evaluations")


def cli_tune(dbs: dict[str, Path], held: Path, evals: int, repeats: int, envs: dict[str, dict[str, str]]
             ) -> dict[str, dict]:
    """``tunedb tune --replay held --budget evals`` ``repeats`` times per variant (name -> its
    DB, its environment), the variants alternating within each repeat: per variant
    {"wall_s": [...], "median_s", "evaluations"}."""
    walls: dict[str, list[float]] = {v: [] for v in dbs}
    evaluations: dict[str, int | None] = {}
    order = list(dbs)
    for i in range(repeats):
        for v in (order if i % 2 == 0 else order[::-1]):
            w, evaluations[v] = cli_once(dbs[v], held, evals, envs[v], f"{v}{i}")
            walls[v].append(w)
    return {v: {"wall_s": walls[v], "median_s": round(statistics.median(walls[v]), 3),
                "evaluations": evaluations[v]} for v in dbs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", default="convolution_milo")
    ap.add_argument("--devices", default="", help="held-out devices (cache file stems); default all")
    ap.add_argument("--evals", type=int, default=20)
    ap.add_argument("--kt", default="random_sample,genetic_algorithm,greedy_ils", help="Kernel Tuner strategies")
    ap.add_argument("--repeats", type=int, default=1, help="replayed CLI tunes per device (default 1)")
    ap.add_argument("--no-cli", action="store_true", help="skip the replayed CLI tune")
    ap.add_argument("--baseline", metavar="DIR", help="also measure the package DIR/tunedb, alternating, in this run")
    ap.add_argument("--pycache-prefix", metavar="DIR", help="measured processes write their bytecode under DIR")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], a.child[1], a.child[2], int(a.child[3]), [x for x in a.child[4].split(",") if x])
        return 0
    if a.baseline and not (Path(a.baseline) / "tunedb" / "__init__.py").is_file():
        sys.stderr.write(f"bench_overhead: --baseline {a.baseline} holds no tunedb/__init__.py\n")
        return 2
    envs = {"current": variant_env(None, a.pycache_prefix)}
    if a.baseline:
        envs["baseline"] = variant_env(a.baseline, a.pycache_prefix)
    files = sorted(p for p in (DATA / a.kernel).glob("*.json.gz") if "_T4" not in p.name)
    held = [p for p in files if not a.devices or p.name.split(".")[0] in a.devices.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    rows: dict[str, list[dict]] = {v: [] for v in envs}
    for n, h in enumerate(held):
        dev = h.name.split(".")[0]
        cache = work / f"{dev}.json"
        cache.write_bytes(gzip.open(h).read())
        dbs: dict[str, Path] = {}
        variants = list(envs) if n % 2 == 0 else list(envs)[::-1]
        for v in variants:
            db = dbs[v] = work / f"db-{dev}-{v}"
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "tunedb", "--db", str(db), "--json", "import", "kernel-tuner",
                                *[str(f) for f in files if f != h]], capture_output=True, text=True, timeout=900,
                               env=envs[v])
            if p.returncode != 0:
                sys.stderr.write(p.stderr)
                return 1
            imp = json.loads(p.stdout)
            import_s = time.perf_counter() - t0
            p = subprocess.run([sys.executable, __file__, "--child", str(db), str(cache), a.kernel, str(a.evals),
                                a.kt], capture_output=True, text=True, timeout=900, env=envs[v])
            if p.returncode != 0:
                sys.stderr.write(p.stderr[-3000:])
                return 1
            r = json.loads(p.stdout.strip().splitlines()[-1])
            r.update(device=dev, import_s=round(import_s, 3), records=imp.get("new"),
                     model_fit_s=sum(imp.get("models", {}).values()))
            rows[v].append(r)
        if not a.no_cli:
            for v, c in cli_tune(dbs, h, a.evals, max(a.repeats, 1), envs).items():
                next(r for r in rows[v] if r["device"] == dev)["cli"] = c
        if not a.json:
            for v in variants:
                r = rows[v][-1]
                cli = f"  CLI tune {r['cli']['median_s']:5.2f} s" if "cli" in r else ""
                print(f"{v:8s} {r['device']:8s} import {r['import_s']:5.1f} s (model {r['model_fit_s']:.1f} s)  "
                      f"tunedb first run {r['first']['own_s']:5.2f} s (first proposal "
                      f"{r['first']['first_proposal_s']} s), second {r['second']['own_s']:5.2f} s{cli}  |  " +
                      "  ".join(f"{k} {r[k]['own_s']:.2f} s" for k in a.kt.split(",") if k), flush=True)
    goal = 1.0 + 0.02 * a.evals
    kt = [k for k in a.kt.split(",") if k]
    summary = summarise(rows["current"], goal, kt, not a.no_cli)
    if a.baseline:
        summary["baseline"] = summarise(rows["baseline"], goal, kt, not a.no_cli)
        summary["speedup"] = speedups(summary["baseline"], summary)
    out = {"host": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "kernel": a.kernel,
           "evals": a.evals, "load_avg": [round(x, 2) for x in os.getloadavg()],
           "bytecode_cached": bool(a.pycache_prefix) or not os.environ.get("PYTHONDONTWRITEBYTECODE"),
           "baseline": a.baseline, "summary": summary, "runs": rows["current"]}
    if a.baseline:
        out["baseline_runs"] = rows["baseline"]
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
        if a.baseline:
            print(f"baseline: first run median {summary['baseline']['first']['median_s']:.2f} s, first proposal "
                  f"median {summary['baseline']['first'].get('first_proposal_median_s')} s" +
                  (f", replayed CLI tune median {summary['baseline']['cli']['median_s']:.2f} s"
                   if "cli" in summary["baseline"] else "") + f"; speedup {summary['speedup']}")
    return 0


def summarise(rows: list[dict], goal: float, kt: list[str], cli: bool) -> dict:
    """Per measure (``first``, ``second``, each Kernel Tuner strategy, ``cli``): median, min and
    max over the devices (seconds) and the ratio median / goal (<= 1: met); first-proposal
    medians and their ratio to :data:`FIRST_PROPOSAL_GOAL_S` where measured."""
    summary: dict = {"goal_s": goal, "first_proposal_goal_s": FIRST_PROPOSAL_GOAL_S}
    for key in ["first", "second", *kt]:
        v = [r[key]["own_s"] for r in rows]
        summary[key] = {"median_s": round(statistics.median(v), 3), "min_s": min(v), "max_s": max(v),
                        "ratio_to_goal": round(statistics.median(v) / goal, 3)}
        f = [r[key]["first_proposal_s"] for r in rows if r[key].get("first_proposal_s") is not None]
        if f:
            summary[key]["first_proposal_median_s"] = round(statistics.median(f), 3)
            summary[key]["first_proposal_ratio_to_goal"] = round(statistics.median(f) / FIRST_PROPOSAL_GOAL_S, 3)
        u = [r[key]["setup_s"] for r in rows if r[key].get("setup_s") is not None]
        if u:
            summary[key]["setup_median_s"] = round(statistics.median(u), 3)
    if cli:
        v = [r["cli"]["median_s"] for r in rows]
        summary["cli"] = {"median_s": round(statistics.median(v), 3), "min_s": min(v), "max_s": max(v),
                          "ratio_to_goal": round(statistics.median(v) / goal, 3)}
    return summary


def speedups(base: dict, cur: dict) -> dict:
    """Baseline median / current median per measure of tunedb (own time, first proposal, CLI)."""
    out = {}
    for key, field in (("first", "median_s"), ("second", "median_s"), ("first", "first_proposal_median_s"),
                       ("second", "first_proposal_median_s"), ("first", "setup_median_s"), ("cli", "median_s")):
        b, c = base.get(key, {}).get(field), cur.get(key, {}).get(field)
        if b is not None and c:
            out[f"{key}.{field}"] = round(b / c, 2)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
