"""``tunedb demo``: the README's main job (see transfer/apps/demo.py)."""

from __future__ import annotations

import json

from tunedb.transfer.cli.util import UserError, emit, fmt_seconds, open_db, progress_bar, progress_to, table_text


def register(sub, common) -> None:
    p = sub.add_parser("demo", parents=[common],
                       help="tune model A, then model B warm (through the DB) and cold (4x budget), and compare")
    p.add_argument("--budget-per-task", type=int, default=3,
                   help="evaluations per operator task of each warm run (default 3; cold gets 4x)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", default="cpu-native-t1",
                   help="the local preset to tune on (default cpu-native-t1; see 'tunedb targets')")
    p.add_argument("--verify-rounds", type=int, default=3,
                   help="interleaved re-measurements of warm's and cold's final configs (default 3)")
    p.set_defaults(func=run_demo_cmd)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def run_demo_cmd(args) -> int:
    from tunedb.transfer.apps.demo import run_demo

    if args.budget_per_task < 2:
        raise UserError("--budget-per-task must be >= 2")
    if args.verify_rounds < 1:
        raise UserError("--verify-rounds must be >= 1")
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
        lat = fmt_seconds(ev["latency"]) if ev["latency"] is not None else "-"
        progress_to(state["bar"], min(ev["evaluations"], ev["budget"]), f"latency {lat}")

    from tunedb.index.hardware.localcpu import local_target

    try:
        local_target(args.target)
    except ValueError as e:
        raise UserError(str(e)) from None
    try:
        res = run_demo(db, budget_per_task=args.budget_per_task, seed=args.seed, verify_rounds=args.verify_rounds,
                       target=args.target, progress=progress)
    finally:
        if state["bar"] is not None:
            state["bar"].close()
    emit(args, json.loads(json.dumps(res, default=str)), human(res, args.db))
    return 0


def human(res: dict, db: str) -> str:
    """The demo's story as text."""
    a, w, c, again, v = res["a"], res["warm"], res["cold"], res["again"], res["verify"]
    rows = [[r["label"], r["model"], f"{r['tasks_hit']}/{r['tasks_warm']}/{r['tasks_cold']}", _pct(r["eta"]),
             r["search_evaluations"], r["measurements"], r["cache_hits"], fmt_seconds(r["default_latency"]),
             fmt_seconds(r["latency"]), fmt_seconds(r["t_total_s"])]
            for r in (a, w, c, again)]
    ratios = ", ".join(f"{x:.2f}" for x in v["ratios"])
    med = v["median_ratio"]
    cold_to = res["cold_evaluations_to_warm_latency"]
    if res["verdict"] == "holds":
        claim = (f"warm start holds: with {w['search_evaluations']} evaluations model B is within "
                 f"{res['within']:.0%} of (or faster than) cold's {c['search_evaluations']} in every round")
    elif res["verdict"] == "fails":
        claim = (f"warm start did not pay here: cold's {c['search_evaluations']} evaluations beat warm's "
                 f"{w['search_evaluations']} by more than {res['within']:.0%} in every round")
    else:
        claim = ("inconclusive: the rounds disagree, so this machine's noise is larger than the difference "
                 "between warm and cold; no win is claimed")
    lines = [
        f"database: {res['db']}   target: {res['target']}",
        "",
        f"A = {res['model_a']} (empty history), then B = {res['model_b']}: warm through the DB, cold with "
        f"{res['cold_factor']}x the budget and no DB; 'again' = B once more",
        table_text(["run", "model", "hit/warm/cold tasks", "eta", "evals", "new", "hits", "default latency",
                    "latency", "time"], rows),
        "",
        f"measurements saved: warm measured {w['measurements']}, cold {c['measurements']}; cold needed "
        + (f"{cold_to} evaluations to reach warm's latency" if cold_to is not None
           else f"more than its {c['search_evaluations']} evaluations to reach warm's latency"),
        f"re-measured interleaved ({v['rounds']} rounds): warm/cold model latency ratio {ratios} "
        f"(median {med:.2f})" if med is not None else "re-measurement failed",
        claim,
        f"B again: eta {_pct(again['eta'])}, {again['measurements']} new measurements",
        f"done in {res['seconds']:.0f} s; 'tunedb report --db {db} --out report/' draws these runs",
    ]
    return "\n".join(lines)
