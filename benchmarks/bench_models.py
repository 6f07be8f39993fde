"""Models through the DB: does a second model (or a new microarchitecture) cost fewer measurements?

Side by side in one run, ``--seeds`` seeds, real builds and runs on this CPU (``tune-model``):

same target (goal 1)
    DB = ResNet-18 and the narrow encoder block tuned on the native preset (``--base-factor`` x
    ``--per-task`` evaluations per task: the history was tuned as thoroughly as the cold
    baseline is); then each of
    ResNet-34 (after ResNet-18), MobileNet-v2 (after ResNet-18) and the wider encoder (after the
    narrow one) is tuned *warm* through a copy of that DB (``--per-task`` evaluations per task)
    and *cold* in an empty DB with 4x the budget (no reuse, no seeds, no prior model).  The line
    is cold's final model latency x 1.05; "to the line" is the evaluations each needed to get
    there (warm's include nothing for tasks the DB answered).  Goal: warm within 5% of cold with
    <= 1/3 of cold's evaluations (median over the three models, each the median of the seeds).
new target (goal 2)
    DB = ResNet-18 and the narrow encoder tuned on ``--source`` (default cpu-x86-64-v2-t1, SSE
    code); the same models tuned on ``--dest`` (default: this host's newest archspec preset)
    warm vs cold 4x.  Goal: <= 1/2 of cold's evaluations to the line; never worse than cold at
    the same number of evaluations.

Latencies are sums of weight x best cost over the tasks (seconds) as each run measured them,
the leaders of every task re-measured interleaved before the run ends (``Tuner.confirm``).
This is a shared 2-core machine: every figure is a median with its spread (min-max) over seeds.

    python benchmarks/bench_models.py --seeds 3 --json > bench_models.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import tunedb
from tunedb.datasets.models import load_model
from tunedb.transfer.apps.tune_model import ModelOptions, evaluations_to_reach, tune_model

SAME = [("resnet34", "resnet18"), ("mobilenet_v2", "resnet18"), ("bert_block_512", "bert_block_256")]
NEW = ["resnet18", "bert_block_256"]


def _spec(name: str, args) -> str:
    return f"{name}@{args.cnn_size}" if name.startswith(("resnet", "mobilenet")) else f"{name}@{args.seq}"


def _tune(path: Path, model: str, target: dict, budget: int, cold: bool, seed: int, args) -> dict:
    db = tunedb.open(path)
    try:
        return tune_model(db, load_model(_spec(model, args)), target,
                          options=ModelOptions(budget=budget, cold=cold, seed=seed, confirm_rounds=1))
    finally:
        db.close()


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    shutil.rmtree(dst / "derived", ignore_errors=True)  # derived caches are rebuilt; keep runs independent
    return dst


def _latency_at(history: list, evaluations: int) -> float | None:
    """The model latency after ``evaluations`` evaluations (the last point at or before it)."""
    out = None
    for n, lat in history:
        if n <= evaluations and lat is not None:
            out = lat
    return out


def _case(warm: dict, cold: dict) -> dict:
    line = cold["latency"] * 1.05
    w_to = evaluations_to_reach(warm["history"], line)
    c_to = evaluations_to_reach(cold["history"], line)
    cold_same = _latency_at(cold["history"], warm["search_evaluations"])
    return {
        "warm_latency": warm["latency"], "cold_latency": cold["latency"], "line": line,
        "warm_vs_cold": warm["latency"] / cold["latency"],
        "warm_evaluations": warm["search_evaluations"], "cold_evaluations": cold["search_evaluations"],
        "warm_to_line": w_to, "cold_to_line": c_to,
        "evaluation_ratio": (w_to / c_to) if (w_to is not None and c_to) else (0.0 if w_to == 0 else None),
        "cold_latency_at_warm_evaluations": cold_same,
        "warm_vs_cold_same_evaluations": (warm["latency"] / cold_same) if cold_same else None,
        "warm_tasks": {k: warm[k] for k in ("tasks_total", "tasks_hit", "tasks_warm", "tasks_cold", "eta")},
        "warm_measurements": warm["measurements"], "cold_measurements": cold["measurements"],
        "warm_wall_s": warm["wall_s"], "cold_wall_s": cold["wall_s"],
        "warm_history": warm["history"], "cold_history": cold["history"],
    }


def _stats(values: list) -> dict:
    v = [x for x in values if x is not None]
    return {"median": statistics.median(v) if v else None, "min": min(v) if v else None,
            "max": max(v) if v else None, "n": len(v), "missing": len(values) - len(v)}


def run(args) -> dict:
    from tunedb.index.hardware.localcpu import local_target, preset_names

    work = Path(tempfile.mkdtemp(prefix="bench-models-"))
    native = local_target(args.target)
    names = preset_names()
    uarch = [n for n in names if n.endswith("-t1") and not n.startswith(("cpu-native", "cpu-x86-64"))]
    dest = local_target(args.dest or (uarch[-1] if uarch else "cpu-native-t1"))
    source = local_target(args.source)
    out: dict = {"target": native["name"], "source": source["name"], "dest": dest["name"], "seeds": args.seeds,
                 "per_task": args.per_task, "cold_factor": args.cold_factor, "base_factor": args.base_factor, "cnn_size": args.cnn_size,
                 "seq": args.seq, "same_target": {}, "new_target": {}, "started": time.strftime("%F %T")}
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f} s] {msg}", file=sys.stderr, flush=True)

    for seed in range(args.seeds):
        if "same" in args.goals:
            base = work / f"s{seed}-base"
            for m in sorted({a for _, a in SAME}):
                n = len(load_model(_spec(m, args)).tasks)
                r = _tune(base, m, native, args.base_factor * args.per_task * n, False, seed, args)
                log(f"seed {seed} base {m}: latency {r['latency']:.3e}")
            for b, _after in SAME:
                n = len(load_model(_spec(b, args)).tasks)
                warm = _tune(_copy(base, work / f"s{seed}-{b}-warm"), b, native, args.per_task * n, False, seed, args)
                cold = _tune(work / f"s{seed}-{b}-cold", b, native, args.cold_factor * args.per_task * n, True,
                             seed, args)
                c = _case(warm, cold)
                out["same_target"].setdefault(b, []).append(c)
                log(f"seed {seed} {b}: warm {c['warm_latency']:.3e} ({c['warm_to_line']} to line) cold "
                    f"{c['cold_latency']:.3e} ({c['cold_to_line']} to line) ratio {c['evaluation_ratio']}")
        if "new" in args.goals:
            base = work / f"s{seed}-src"
            for m in NEW:
                n = len(load_model(_spec(m, args)).tasks)
                _tune(base, m, source, args.base_factor * args.per_task * n, False, seed, args)
            for m in NEW:
                n = len(load_model(_spec(m, args)).tasks)
                warm = _tune(_copy(base, work / f"s{seed}-{m}-dest-warm"), m, dest, args.per_task * n, False, seed,
                             args)
                cold = _tune(work / f"s{seed}-{m}-dest-cold", m, dest, args.cold_factor * args.per_task * n, True,
                             seed, args)
                c = _case(warm, cold)
                out["new_target"].setdefault(m, []).append(c)
                log(f"seed {seed} {m} on {dest['name']}: warm {c['warm_latency']:.3e} ({c['warm_to_line']}) cold "
                    f"{c['cold_latency']:.3e} ({c['cold_to_line']}) ratio {c['evaluation_ratio']}")
    summary: dict = {}
    for goal in ("same_target", "new_target"):
        per_model = {}
        for m, cases in out[goal].items():
            per_model[m] = {k: _stats([c[k] for c in cases]) for k in
                            ("evaluation_ratio", "warm_vs_cold", "warm_vs_cold_same_evaluations", "warm_to_line",
                             "cold_to_line", "warm_measurements", "cold_measurements")}
        meds = [v["evaluation_ratio"]["median"] for v in per_model.values()]
        within = [v["warm_vs_cold"]["median"] for v in per_model.values()]
        summary[goal] = {"per_model": per_model,
                         "median_evaluation_ratio": statistics.median([x for x in meds if x is not None])
                         if any(x is not None for x in meds) else None,
                         "models_not_reaching_line": sum(1 for x in meds if x is None),
                         "median_warm_vs_cold": statistics.median(within) if within else None}
    summary["same_target"]["goal"] = "warm within 5% of cold with <= 1/3 of cold's evaluations"
    summary["new_target"]["goal"] = "<= 1/2 of cold's evaluations to the line; never worse than cold"
    out["summary"] = summary
    out["seconds"] = time.perf_counter() - t0
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return out


def _fmt(d: dict) -> str:
    return "-" if d["median"] is None else f"{d['median']:.2f} ({d['min']:.2f}-{d['max']:.2f})"


def _table(out: dict) -> str:
    lines = []
    for goal in ("same_target", "new_target"):
        s = out["summary"].get(goal, {})
        for m, v in s.get("per_model", {}).items():
            r, w = v["evaluation_ratio"], v["warm_vs_cold"]
            lines.append(f"{goal:12s} {m:16s} evaluations warm/cold to the line {_fmt(r)}  "
                         f"latency warm/cold {_fmt(w)}  missing {r['missing']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--per-task", type=int, default=2, help="warm evaluations per task (default 2)")
    p.add_argument("--cold-factor", type=int, default=4)
    p.add_argument("--base-factor", type=int, default=4,
                   help="the DB's models were tuned with this times --per-task evaluations per task (default 4: "
                        "as thoroughly as the cold baseline)")
    p.add_argument("--cnn-size", type=int, default=64, help="input resolution of the CNNs (default 64)")
    p.add_argument("--seq", type=int, default=32, help="sequence length of the encoder blocks (default 32)")
    p.add_argument("--target", default="cpu-native-t1")
    p.add_argument("--source", default="cpu-x86-64-v2-t1")
    p.add_argument("--dest", default=None)
    p.add_argument("--goals", default="same,new", help="comma list of same,new")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    args.goals = set(args.goals.split(","))
    out = run(args)
    if args.json:
        print(json.dumps(out))
    else:
        print(_table(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
