"""``tunedb demo``: the README's main job (see transfer/apps/demo.py)."""

from __future__ import annotations

import json

from tunedb.transfer.cli.util import (
    UserError,
    emit,
    fmt_seconds,
    machine_line,
    open_db,
    progress_bar,
    progress_to,
    table_text,
)


def register(sub, common) -> None:
    p = sub.add_parser("demo", parents=[common],
                       help="tune model A, then model B warm (through the DB) and cold (4x budget), and compare")
    p.add_argument("--budget-per-task", type=int, default=3,
                   help="evaluations per operator task of each warm run (default 3; cold gets 4x)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", default="cpu-native-t1",
                   help="the local preset to tune on (default cpu-native-t1; see 'tunedb targets')")
    p.add_argument("--max-rounds", type=int, default=12,
                   help="the most interleaved re-measurement rounds of warm's and cold's final configs "
                        "(default 12; the test stops earlier once its answer is clear)")
    p.set_defaults(func=run_demo_cmd)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def run_demo_cmd(args) -> int:
    from tunedb.transfer.apps.demo import run_demo

    if args.budget_per_task < 2:
        raise UserError("--budget-per-task must be >= 2")
    if args.max_rounds < 3:
        raise UserError("--max-rounds must be >= 3")
    db = open_db(args)
    state: dict = {"bar": None, "label": None}

    def progress(label: str, ev: dict) -> None:
        if args.json:
            return
        if state["label"] != label:
            if state["bar"] is not None:
                state["bar"].close()
            total = ev["rounds"] if label == "verify" else ev["budget"]
            state["bar"] = progress_bar(args, total, "warm vs cold" if label == "verify" else label,
                                        unit="round" if label == "verify" else "eval")
            state["label"] = label
        if label == "verify":
            st = ev["state"]
            text = f"warm/cold {st.ratio:.3f}" if st.ratio is not None else ""
            progress_to(state["bar"], ev["round"], text)
            return
        lat = fmt_seconds(ev["latency"]) if ev["latency"] is not None else "-"
        progress_to(state["bar"], min(ev["evaluations"], ev["budget"]), f"latency so far {lat}")

    from tunedb.index.hardware.localcpu import local_target

    try:
        local_target(args.target)
    except ValueError as e:
        raise UserError(str(e)) from None
    try:
        res = run_demo(db, budget_per_task=args.budget_per_task, seed=args.seed, max_rounds=args.max_rounds,
                       target=args.target, progress=progress)
    finally:
        if state["bar"] is not None:
            state["bar"].close()
    emit(args, json.loads(json.dumps(res, default=str)), human(res, args.db))
    return 0


def human(res: dict, db: str) -> str:
    """The demo's story as text: the headline first, then the table it rests on."""
    a, w, c, again, v = res["a"], res["warm"], res["cold"], res["again"], res["verify"]
    rows = [[r["label"], r["model"], f"{r['tasks_hit']}/{r['tasks_warm']}/{r['tasks_cold']}", _pct(r["eta"]),
             r["search_evaluations"], r["measurements"], r["cache_hits"], fmt_seconds(r["default_latency"]),
             fmt_seconds(r["latency"]), fmt_seconds(r["t_total_s"])]
            for r in (a, w, c, again)]
    cold_to = res["cold_evaluations_to_warm_latency"]
    lines = [
        res["headline"],
        "",
        f"database: {res['db']}   target: {res['target']}",
        f"A = {res['model_a']} (empty history), then B = {res['model_b']}: warm through the DB, cold with "
        f"{res['cold_factor']}x the budget and no DB; 'again' = B once more",
        table_text(["run", "model", "tasks hit/warm/cold", "task hit rate", "search evals", "new measurements",
                    "evals answered by DB", "default latency", "latency", "time"], rows),
        "latency: sum of weight x each task's chosen cost, by the DB's estimates after the re-measurement "
        "(median of its records); task hit rate: tasks answered whole by the DB",
        "",
        f"search evaluations: warm {w['search_evaluations']}, cold {c['search_evaluations']}; cold's best-so-far "
        + (f"reached warm's in-run latency after {cold_to} evaluations" if cold_to is not None
           else f"never reached warm's in-run latency in {c['search_evaluations']} evaluations"),
        f"test: warm/cold model latency ratio (below 1: warm faster), {v['rounds']} interleaved rounds, "
        f"paired t-interval on log ratios, {res['level'] * 100:.0f} % over all looks; claim holds when the "
        f"interval's top is <= {1 + res['within']:.2f}, fails when its bottom is above it",
        f"B again: task hit rate {_pct(again['eta'])}, {again['measurements']} new measurements",
        *([machine_line(res["machine_check"])] if res.get("machine_check") else []),
        f"done in {res['seconds']:.0f} s; 'tunedb report --db {db} --out report/' draws these runs",
    ]
    return "\n".join(lines)
