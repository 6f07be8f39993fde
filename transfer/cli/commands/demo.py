"""``tunedb demo``: the README's main job (see transfer/demo.py)."""

from __future__ import annotations

import json

from tunedb.transfer.cli.util import UserError, emit, fmt_seconds, open_db, progress_bar, progress_to, table_text


def register(sub, common) -> None:
    p = sub.add_parser("demo", parents=[common], help="tune on this CPU cold, warm-start a new preset, compare")
    p.add_argument("--budget", type=int, default=12, help="evaluations per tuning run (default 12)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run_demo_cmd)


def _short(w: dict) -> str:
    return w["family"] + ":" + ",".join(f"{k}={v}" for k, v in w.items() if k != "family")


def run_demo_cmd(args) -> int:
    from tunedb.transfer.apps.demo import run_demo

    if args.budget < 2:
        raise UserError("--budget must be >= 2")
    db = open_db(args)
    state: dict = {"bar": None, "label": None}

    def progress(label: str, ev: dict) -> None:
        if args.json:
            return
        if state["label"] != label:
            if state["bar"] is not None:
                state["bar"].close()
            state["bar"] = progress_bar(args, ev["budget"], label, unit="eval")
            state["label"] = label
        best = fmt_seconds(ev["best"]) if ev["best"] is not None else "-"
        progress_to(state["bar"], ev["evaluations"], f"best {best} new {ev['measurements']} hits {ev['cache_hits']}")

    try:
        res = run_demo(db, budget=args.budget, seed=args.seed, progress=progress)
    finally:
        if state["bar"] is not None:
            state["bar"].close()
    rows = [[_short(r["workload"]), fmt_seconds(r["default_cost"]), fmt_seconds(r["cold_best"]), fmt_seconds(r["warm_best"]),
             r["cold_evaluations_to_95"] or f">{res['budget']}", r["warm_evaluations_to_95"] or f">{res['budget']}",
             r["fewer_measurements"], ", ".join(r["seeded_from"][:2]) or "-"] for r in res["new"]]
    src = [[_short(r["workload"]), fmt_seconds(r["best"]), r["measurements"], r["cache_hits"]] for r in res["source"]]
    s2 = res["second_run"]
    human = "\n".join([
        f"database: {res['db']}",
        "",
        f"1) cold tuning on {res['source_preset']} (no history; starts from the family's default config; "
        f"budget {res['source_budget']} each):",
        table_text(["workload", "best", "measured", "cache hits"], src),
        "",
        f"2) new workloads on {res['new_preset']}: warm start vs cold search, same budget "
        f"({res['budget']}); cold = random start, no history; 'default' = the family's default config measured "
        "once;\n   'to 95%' = measurements until within 5% of the best either found",
        table_text(["workload", "default", "cold best", "warm best", "cold to 95%", "warm to 95%", "fewer", "seeded from"], rows),
        "",
        f"3) second run of everything: {s2['cache_hits']}/{s2['evaluations']} answered from the database "
        f"(hit rate {s2['hit_rate']:.0%}), {s2['measurements']} new measurements",
        f"done in {res['seconds']:.0f} s; see 'tunedb stats --db {args.db}'",
    ])
    emit(args, json.loads(json.dumps(res, default=str)), human)
    return 0
