"""Warm start on a whole Relax model: does tuning model A first make model B cheaper to tune?

Model A (``tunedb.transfer.tuners.tvm.models.mlp(batch, --hidden-a)``: two residual MLP blocks, two tuning tasks of
weight 2) is tuned once through ``TunedbDatabase`` (``--trials-a`` trials per task, seed 0).  Then
model B (the same model at ``--hidden-b``) is tuned ``--trials`` trials per task, for every seed
in ``0 .. --seeds-1``, in these variants (each on a fresh copy of A's DB):

``cold``      MetaSchedule's own ``JSONDatabase``, stock ``EvolutionarySearch`` (no tunedb)
``warm``      ``TunedbDatabase`` + ``WarmStartSearch``: A's nearest records' traces adapted to B and
              measured as they are in B's first batch (more while they lead), ``get_top_k`` seeding
``pretrain``  ``warm`` plus the XGB cost model pre-trained with A's records (per workload)

Same MetaSchedule settings everywhere (``tune_relax``: round-robin over tasks, ``--per-iter``
trials per batch, evolutionary search population 128, XGB cost model with MetaSchedule's
defaults -- 100 warm-up samples before it predicts anything but noise).  Figures: per seed the
best-so-far model latency (sum of weight x best task run time) by trial, the trials each warm
variant needs to reach cold's final latency (and that as a share of cold's trials), median and
min-max over seeds, and the share of tuning wall time spent in tunedb (``TunedbDatabase`` methods
+ the strategy's preparation + pre-training).  Run times are measured on this machine by
MetaSchedule's LocalRunner: on a shared machine they are noisy.

    python benchmarks/bench_tvm_models.py --seeds 3 --trials 32 --json out.json
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

VARIANTS = ("cold", "warm", "pretrain")


def curve(timeline: list, weights: dict[str, float]) -> list[float | None]:
    """Best-so-far model latency (seconds) after each measured trial; None until every task has
    a successful measurement."""
    best: dict[str, float] = {}
    out: list[float | None] = []
    for name, secs in timeline:
        if secs is not None and (name not in best or secs < best[name]):
            best[name] = secs
        out.append(sum(w * best[n] for n, w in weights.items()) if len(best) == len(weights) else None)
    return out


def trials_to_reach(c: list[float | None], goal: float) -> int | None:
    """First trial (1-based) whose best-so-far latency is <= ``goal``; None if never."""
    for i, v in enumerate(c):
        if v is not None and v <= goal * (1 + 1e-9):
            return i + 1
    return None


def med_range(xs: list[float | None]) -> tuple[float | None, float | None, float | None]:
    ys = [x for x in xs if x is not None]
    if not ys:
        return None, None, None
    return statistics.median(ys), min(ys), max(ys)


def fmt_us(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e6:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=32, help="trials per task for model B")
    ap.add_argument("--trials-a", type=int, default=None, help="trials per task for model A (default: --trials)")
    ap.add_argument("--per-iter", type=int, default=8, help="trials per batch")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--hidden-a", type=int, default=128)
    ap.add_argument("--hidden-b", type=int, default=256)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--target", default=None, help="TVM target JSON (default: llvm, this host's CPU, 2 cores)")
    ap.add_argument("--work", default=None, help="work directory (default: a temporary one, removed)")
    ap.add_argument("--json", default=None, metavar="PATH", help="write all results as JSON here")
    ap.add_argument("--from-json", default=None, metavar="PATH", help="only report the results saved in PATH")
    ap.add_argument("--reuse-cold", default=None, metavar="PATH",
                    help="take the cold runs from an earlier --json of the same settings instead of running them "
                         "(cold does not depend on tunedb)")
    args = ap.parse_args(argv)
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        old = argparse.Namespace(**{**saved["args"], "json": args.json, "from_json": None})
        return report(old, saved["target"], saved["model_a"], saved["runs"], list(saved["runs"]), saved["wall_s"])

    import tvm
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from tunedb.transfer.tuners.tvm import models as tm
    from tunedb.transfer.tuners.tvm.database import TunedbDatabase

    if args.target:
        target = json.loads(args.target)
    else:
        target = {"kind": "llvm", "mcpu": str(tvm.target.codegen.llvm_get_system_cpu()), "num-cores": 2}
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        ap.error(f"unknown variants {sorted(unknown)}")
    trials_a = args.trials_a or args.trials
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench_tvm_models_"))
    work.mkdir(parents=True, exist_ok=True)
    a_mod, b_mod = tm.mlp(args.batch, args.hidden_a), tm.mlp(args.batch, args.hidden_b)
    cold_saved = None
    if args.reuse_cold:
        saved = json.loads(Path(args.reuse_cold).read_text())
        cold_saved = saved["runs"]["cold"]
        sa = saved["args"]
        for k in ("trials", "per_iter", "batch", "hidden_b"):
            if sa[k] != getattr(args, k):
                ap.error(f"--reuse-cold: {k} was {sa[k]} there, {getattr(args, k)} here")
        if saved["target"] != target or len(cold_saved) < args.seeds:
            ap.error("--reuse-cold: other target or fewer seeds there")
    t_start = time.perf_counter()
    try:
        db_a = TunedbDatabase(work / "db_a", target=target)
        res_a = tm.tune_relax(a_mod, target, db_a, trials=trials_a, seed=0, work_dir=str(work / "a"),
                              trials_per_iter=args.per_iter)
        db_a.db.close()
        print(f"model A tuned: {res_a['trials']} trials, latency {fmt_us(res_a['latency_s'])} us, "
              f"{res_a['trial_s']:.2f} s/trial, tunedb share {100 * res_a['db_share']:.2f}%", flush=True)
        runs: dict[str, list[dict]] = {v: [] for v in variants}
        for seed in range(args.seeds):
            for v in variants:
                d = work / f"s{seed}" / v
                d.mkdir(parents=True, exist_ok=True)
                if v == "cold" and cold_saved is not None:
                    r = cold_saved[seed]
                    runs[v].append(r)
                    continue
                if v == "cold":
                    (d / "json").mkdir()
                    db = JSONDatabase(work_dir=str(d / "json"))
                    r = tm.tune_relax(b_mod, target, db, trials=args.trials, warm=False, seed=seed, work_dir=str(d),
                                      trials_per_iter=args.per_iter)
                else:
                    shutil.copytree(work / "db_a", d / "db")
                    tdb = TunedbDatabase(d / "db", target=target, warm_start_per_neighbour=8)
                    r = tm.tune_relax(b_mod, target, tdb, trials=args.trials, warm=True, seed=seed, work_dir=str(d),
                                      trials_per_iter=args.per_iter, pretrain=(v == "pretrain"))
                    tdb.db.close()
                weights = {t["name"]: t["weight"] for t in r["tasks"]}
                r["curve"] = curve(r["timeline"], weights)
                r["seed"] = seed
                r["variant"] = v
                runs[v].append(r)
                if args.json:  # raw results after every run: a report can be redone with --from-json
                    Path(args.json).write_text(json.dumps({"args": vars(args), "target": target, "model_a": res_a,
                                                           "runs": runs, "wall_s": time.perf_counter() - t_start},
                                                          indent=1, default=str))
                share = "-" if r["db_share"] is None or v == "cold" else f"{100 * r['db_share']:.2f}%"
                final = r["curve"][-1] if r["curve"] else None
                print(f"seed {seed} {v:8s}: final {fmt_us(final)} us, {r['trials']} trials, "
                      f"{r['trial_s']:.2f} s/trial, tunedb share {share}", flush=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    return report(args, target, res_a, runs, variants, time.perf_counter() - t_start)


def report(args: argparse.Namespace, target: dict, res_a: dict, runs: dict, variants: list[str], wall_s: float) -> int:
    """Print the tables (and write ``--json``) from the runs' results."""
    trials_a = args.trials_a or args.trials
    per_task = args.trials
    n_tasks = len(res_a["tasks"])
    total = per_task * n_tasks
    step = n_tasks * args.per_iter  # one batch of every task (round-robin)
    checkpoints = sorted({*range(step, total + 1, step), total})
    summary: dict = {"target": target, "trials_per_task": per_task, "tasks": n_tasks, "per_iter": args.per_iter,
                     "model_a": {"hidden": args.hidden_a, "trials": res_a["trials"], "latency_s": res_a["latency_s"]},
                     "model_b_hidden": args.hidden_b, "batch": args.batch, "checkpoints": checkpoints,
                     "wall_s": wall_s, "seeds": []}
    lines = [f"target {json.dumps(target)}; model A hidden {args.hidden_a} ({trials_a} trials/task), model B hidden "
             f"{args.hidden_b}, batch {args.batch}, {per_task} trials/task x {n_tasks} tasks, {args.per_iter}/batch",
             "", "best-so-far model latency (us) by trial:",
             "| seed | variant | " + " | ".join(f"t={c}" for c in checkpoints)
             + " | trials to cold's final | share of cold's trials | TunedbDatabase / all tunedb share of wall |",
             "|---|---|" + "---|" * len(checkpoints) + "---|---|---|"]
    reach: dict[str, list] = {v: [] for v in variants if v != "cold"}
    for seed in range(args.seeds):
        cold = runs["cold"][seed] if "cold" in runs else None
        goal = cold["curve"][-1] if cold and cold["curve"] else None
        srow = {"seed": seed}
        for v in variants:
            r = runs[v][seed]
            at = [r["curve"][c - 1] if len(r["curve"]) >= c else None for c in checkpoints]
            n = trials_to_reach(r["curve"], goal) if (goal is not None and v != "cold") else None
            if v != "cold":
                reach[v].append((n, n / len(cold["curve"]) if n and cold else None))
            share = r["db_share"] if v != "cold" else None
            db_only = r["db_s"] / r["wall_s"] if v != "cold" and r["wall_s"] else None
            per_trial_db = r["db_s"] / r["trials"] if v != "cold" and r["trials"] else None
            srow[v] = {"db_only_share": db_only, "db_s_per_trial": per_trial_db, "at": at, "final_s": r["curve"][-1] if r["curve"] else None, "trials_to_cold_final": n,
                       "db_share": share, "trial_s": r["trial_s"], "overhead_s": r.get("overhead_s"),
                       "warm": [t["warm"] for t in r["tasks"]], "pretrained": r["pretrained"]}
            lines.append(f"| {seed} | {v} | " + " | ".join(fmt_us(x) for x in at)
                         + f" | {'-' if v == 'cold' else (n if n else 'not reached')} | "
                         + f"{'-' if v == 'cold' or not n else f'{n / total:.2f}'} | "
                         + f"{'-' if share is None else f'{100 * db_only:.2f}% / {100 * share:.2f}%'} |")
        summary["seeds"].append(srow)
    lines += ["", "median [min-max] over seeds:",
              "| variant | " + " | ".join(f"t={c}" for c in checkpoints)
              + " | trials to cold's final | TunedbDatabase share | all tunedb share | TunedbDatabase ms/trial | s/trial |",
              "|---|" + "---|" * len(checkpoints) + "---|---|---|---|---|"]
    summary["median"] = {}
    for v in variants:
        cols = []
        med_at = []
        for j in range(len(checkpoints)):
            m, lo, hi = med_range([srow[v]["at"][j] for srow in summary["seeds"]])
            med_at.append([m, lo, hi])
            cols.append(f"{fmt_us(m)} [{fmt_us(lo)}-{fmt_us(hi)}]")
        ms_, sh_lo, sh_hi = med_range([srow[v]["db_share"] for srow in summary["seeds"]])
        md_, md_lo, md_hi = med_range([srow[v]["db_only_share"] for srow in summary["seeds"]])
        mpt, _, _ = med_range([srow[v]["db_s_per_trial"] for srow in summary["seeds"]])
        mt, _, _ = med_range([srow[v]["trial_s"] for srow in summary["seeds"]])
        if v == "cold":
            rc = "-"
            mr = None
        else:
            ns = [n for n, _ in reach[v]]
            reached = [n for n in ns if n]
            mr = med_range([float(n) for n in reached]) if reached else (None, None, None)
            rc = (f"{mr[0]:.0f} [{mr[1]:.0f}-{mr[2]:.0f}] ({len(reached)}/{len(ns)} reached; {mr[0] / total:.2f} of {total})"
                  if reached else f"not reached (0/{len(ns)})")
        summary["median"][v] = {"at": med_at, "trials_to_cold_final": mr, "db_share": [ms_, sh_lo, sh_hi],
                                "db_only_share": [md_, md_lo, md_hi], "db_s_per_trial": mpt, "trial_s": mt}
        cold_v = ms_ is None or v == "cold"
        lines.append(f"| {v} | " + " | ".join(cols) + f" | {rc} | "
                     + ("-" if cold_v else f"{100 * md_:.2f}% [{100 * md_lo:.2f}-{100 * md_hi:.2f}]") + " | "
                     + ("-" if cold_v else f"{100 * ms_:.2f}% [{100 * sh_lo:.2f}-{100 * sh_hi:.2f}]") + " | "
                     + ("-" if cold_v else f"{1e3 * mpt:.1f}")
                     + f" | {'-' if mt is None else f'{mt:.2f}'} |")
    text = "\n".join(lines)
    print(text)
    summary["table"] = text
    if args.json:
        full = {"args": vars(args), "target": target, "summary": summary, "model_a": res_a, "runs": runs,
                "wall_s": wall_s}
        Path(args.json).write_text(json.dumps(full, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
