"""``tunedb demo``: the README's first command (see transfer/apps/demo.py for what it measures)."""

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
                       help="tune a new workload warm (through the DB) and cold (no DB) with the same budget, "
                            "and test which found the faster config")
    p.add_argument("--budget", type=int, default=6,
                   help="search evaluations of the warm run and of the cold run, each (default 6)")
    p.add_argument("--history-budget", type=int, default=20,
                   help="evaluations per history workload the DB does not hold yet (default 20)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the searches (default 0)")
    p.add_argument("--target", default="cpu-native-t1",
                   help="the local preset to tune on (default cpu-native-t1; see 'tunedb targets')")
    p.add_argument("--max-rounds", type=int, default=12,
                   help="interleaved re-measurement rounds of warm's, cold's and the default config (default "
                        "12; the warm-vs-cold test may stop earlier, the speedups over the default use them all)")
    p.set_defaults(func=run_demo_cmd)


_PHASES = {"history": ("history", "eval"), "warm": ("warm", "eval"), "cold": ("cold", "eval"),
           "verify": ("warm vs cold vs default", "round")}


def run_demo_cmd(args) -> int:
    """``tunedb demo``: run ``tunedb.transfer.apps.demo.run_demo`` on ``--db`` with progress bars
    (none with ``--json``), then print its result (``human`` or one JSON object); 0.  UserError
    for budgets < 2, ``--max-rounds`` < 3 or a target that is not a local preset."""
    from tunedb.transfer.apps.demo import run_demo

    if args.budget < 2 or args.history_budget < 2:
        raise UserError("--budget and --history-budget must be >= 2")
    if args.max_rounds < 3:
        raise UserError("--max-rounds must be >= 3")
    from tunedb.index.hardware.localcpu import local_target

    try:
        local_target(args.target)
    except ValueError as e:
        raise UserError(str(e)) from None
    db = open_db(args)
    state: dict = {"bar": None, "phase": None, "done": {}}

    def progress(phase: str, ev: dict) -> None:
        if args.json:
            return
        rounds = "round" in ev
        bar_phase = "warm+cold" if phase in ("warm", "cold") else phase  # warm and cold alternate: one bar
        restarted = not rounds and ev["evaluations"] <= state["done"].get(phase, 0)  # the next history workload
        if state["phase"] != bar_phase or restarted:
            if state["bar"] is not None:
                state["bar"].close()
            label, unit = _PHASES.get(phase, (phase, "it"))
            total = ev["rounds"] if rounds else ev["budget"]
            if bar_phase == "warm+cold":
                label, total = "warm and cold", 2 * total
            state.update(bar=progress_bar(args, total, label, unit=unit), phase=bar_phase, done={})
        if rounds:
            progress_to(state["bar"], ev["round"])
            return
        state["done"][phase] = ev["evaluations"]
        best = fmt_seconds(ev["best"]) if ev.get("best") is not None else "-"
        progress_to(state["bar"], sum(state["done"].values()), f"{phase} best so far {best}")

    try:
        res = run_demo(db, budget=args.budget, history_budget=args.history_budget, seed=args.seed,
                       max_rounds=args.max_rounds, target=args.target, progress=progress)
    finally:
        if state["bar"] is not None:
            state["bar"].close()
    emit(args, json.loads(json.dumps(res, default=str)), human(res, args.db))
    return 0


def _cfg_text(cfg: dict) -> str:
    """The knobs of a matmul config that matter most, short: ``4x64/v16 pack kc64``."""
    if not all(k in cfg for k in ("mr", "nr", "vec")):
        return json.dumps(cfg, sort_keys=True)
    return (f"{cfg['mr']}x{cfg['nr']}/v{cfg['vec']} {'pack' if cfg.get('pack') else 'nopack'} "
            f"mc{cfg.get('mc')} nc{cfg.get('nc')} kc{cfg.get('kc')} o{cfg.get('order')} u{cfg.get('unroll')}")


def _speedup(s: dict | None) -> str:
    if s is None:
        return "-"
    return f"{s['speedup']:.2f}x ({s['lo']:.2f}-{s['hi']:.2f})"


def _n(x) -> str:
    return "-" if x is None else str(x)


def human(res: dict, db: str | None = None) -> str:
    """The demo as text: the two claims first, then the precondition and the table they rest on."""
    from tunedb.transfer.apps.demo import wtext

    v, pre, w_new = res["verify"], res["precondition"], res["new_workload"]
    hist = res["history"]
    reused = sum(1 for h in hist if h["reused"])
    tuned = len(hist) - reused
    hist_bits = []
    if reused:
        hist_bits.append(f"reusing {reused} stored entr{'y' if reused == 1 else 'ies'}")
    if tuned:
        hist_bits.append(f"tuned {tuned} new ({sum(h['measurements'] for h in hist)} measurements)")
    if pre["speedup"] is not None:
        pre_line = (f"precondition {'met' if pre['holds'] else 'NOT met'}: on {wtext(w_new)} the best config known "
                    f"({pre['config']}'s) is {pre['speedup']:.2f}x faster than the kernel's default (geometric mean "
                    f"of {pre['rounds']} interleaved rounds, 95 % CI {pre['lo']:.2f}-{pre['hi']:.2f}x); gains are "
                    f"claimed only when that interval is above {pre['factor']:g}x")
    else:
        pre_line = f"precondition NOT met: {pre['reason']}"
    sz = res["sizing"]
    size_bits = ", ".join("-" if r is None else f"{r:.2f}x" for r in sz["ratios"])
    size_line = (f"sizing: N={res['panel']}, where the DB estimates the history's best configs {size_bits} faster "
                 f"than their defaults (medians of their records; wanted: geometric mean >= {sz['factor']:g}x)")
    tried = res.get("attempts") or []
    if len(tried) > 1:
        size_line += "; panels tried: " + ", ".join(
            f"N={a['panel']} ({'ok' if a['sizing']['holds'] else 'too little gain'})" for a in tried)
    rows = []
    for name in ("default", "warm", "cold"):
        a = res[name]
        sp = None if name == "default" else v.get(f"speedup_{name}")
        store = {"default": "-", "warm": "this DB", "cold": "none (throwaway store)"}[name]
        rows.append([name, store, _cfg_text(a["config"]), _n(a["search_evaluations"]), _n(a["measurements"]),
                     _n(a["db_answers"]), fmt_seconds(a.get("best_sample")),
                     fmt_seconds(a["latency"]) if a["latency"] is not None else "-",
                     "1 (reference)" if name == "default" else
                     "1 (the default itself)" if v.get(f"{name}_is_default") else _speedup(sp)])
    if v["same_config"]:
        test_line = (f"warm and cold chose the same config: no warm/cold test; {v['rounds']} interleaved rounds "
                     "of it and the default give the speedup")
    else:
        c = v["comparison"]
        test_line = (f"test: warm/cold ratio over {c['rounds']} interleaved rounds (each round measures warm's, cold's "
                     f"and the default config once, order rotating), paired t-interval on log ratios, "
                     f"{c['level'] * 100:.0f} % over all looks; verdict {c['verdict']}; round-to-round noise "
                     f"(sd of log ratios) {(c['noise_cv'] or 0) * 100:.1f} %")
        if v["rounds"] > c["rounds"]:
            test_line += f"; {v['rounds'] - c['rounds']} more rounds for the speedups over the default"
    lines = [
        res["headline"],
        res["budget_headline"],
        "",
        pre_line,
        size_line,
        f"history ({len(hist)} {res['family']} workloads, N={res['panel']}): " + ", ".join(hist_bits)
        + f"; {res['plan']['why']}",
        f"new workload {wtext(w_new)}: warm through this DB ({res['stored_entries_before_warm']} stored "
        f"{res['family']} entries on this target to seed from), cold with a fresh throwaway store (no DB); "
        f"{res['budget']} search evaluations each, both starting from the default",
        table_text(["run", "DB", "chosen config (mr x nr/vec ...)", "search evals", "new measurements",
                    "answered by DB", "best search sample", "latency (DB estimate)", "speedup vs default (95 % CI)"],
                   rows),
        "best search sample: the fastest single measurement of the run's search (what the search-budget line "
        "compares); latency: the DB's estimate of the chosen config (median of its records after the "
        "verification rounds; 'tunedb best' shows the same); "
        f"speedup: geometric mean of default/config over the {v['rounds']} interleaved rounds, 95 % paired "
        "t-interval on log ratios",
        test_line,
        *([machine_line(res["machine_check"])] if res.get("machine_check") else []),
        f"done in {res['seconds']:.0f} s; 'tunedb report --db {db or res['db']} --out report/' draws these runs",
    ]
    return "\n".join(lines)
