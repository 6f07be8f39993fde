"""``tunedb migrate``: move a body of tuning results from one device to another (tunedb.transfer.migration.migrate).

Every cost shown is the one estimator's (``tunedb.index.model.estimate``): ``--json`` rows carry
``cost`` (seconds) and ``estimate`` (``CostEstimate.to_dict()``: n, interval) for the SRC best,
the DST best, the default and SRC's best on DST; the table shows ``CostEstimate.text()``
(value, 95% CI, n) and ``fmt_seconds`` elsewhere."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tunedb.index.model.estimate import CostEstimate
from tunedb.index.model.units import fmt_seconds
from tunedb.transfer.cli.util import (
    UserError,
    emit,
    open_db,
    progress_bar,
    progress_to,
    table_text,
    target_arg,
)


def register(sub, common) -> None:
    p = sub.add_parser("migrate", parents=[common],
                       help="measure a source target's best configs on another target (resumable)")
    p.add_argument("--from", dest="src", required=True, metavar="SRC", help="source target (name/key in the DB)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--to", dest="dst", metavar="DST", help="destination: a local preset of this machine")
    g.add_argument("--replay", metavar="FILE", help="destination: the device of a Kernel Tuner cache file, "
                                                    "measurements answered from the file")
    p.add_argument("--device", help="device name of the replay file's target: overrides the file's device name, "
                                    "empty or not")
    p.add_argument("--workloads", metavar="FILE", help="only these workloads: JSON list or one spec per line")
    p.add_argument("--top-k", type=int, default=3, help="SRC's best configs migrated per workload (default 3)")
    p.add_argument("--budget", type=int, default=0, help="local-search evaluations per workload on DST "
                                                         "after migrating (default 0)")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="where measurements run: here (default) or as Ray tasks")
    p.add_argument("--ray-address", metavar="ADDR", help="Ray cluster address (default: RAY_ADDRESS or a "
                                                         "local instance)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the search (default 0): the same seed and history repeat the same run")
    p.set_defaults(func=run_migrate)


def _fmt_x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _cost_text(item: dict | None) -> str:
    """A report item's cost: its estimate's ``text()`` (value, interval, n), ``fmt_seconds`` of a
    bare cost, ``-`` without one."""
    if not item or item.get("cost") is None:
        return "-"
    est = item.get("estimate")
    return CostEstimate.from_dict(est).text() if est else fmt_seconds(item["cost"])


def _human(rep) -> str:
    rows = []
    for r in rep.rows:
        wl = {k: v for k, v in r["workload"].items() if k not in ("params",)}
        if r["status"] != "ok":
            rows.append([json.dumps(wl), r["status"], _cost_text(r.get("src_best")), "-", "-", "-", "-", "-",
                         r.get("reason", "")])
            continue
        rows.append([json.dumps(wl), "ok", _cost_text(r.get("src_best")), _cost_text(r["dst_best"]),
                     "yes" if r["src_best_stayed_best"] else "no", _fmt_x(r["speedup_over_default"]),
                     _fmt_x(r["speedup_over_src_best"]), f"{r['measurements']}/{r['cache_hits']}",
                     json.dumps(r["dst_best"]["config"])])
    t = rep.totals
    lines = [f"migrate {rep.src} -> {rep.dst}  (executor {rep.executor})",
             table_text(["workload", "status", "SRC best (on SRC)", "DST best", "SRC best stayed", "vs default", "vs SRC best",
                         "new/hits", "best config / note"], rows),
             f"{t['migrated']}/{t['workloads']} workloads migrated, {t['skipped']} skipped; "
             f"{t['measurements']} new measurements, {t['cache_hits']} cache hits, {t['failed']} failed; "
             f"search {t['search_measurements']} new; SRC best stayed best in {t['src_best_stayed_best']}; "
             f"geomean speedup vs default {_fmt_x(t['geomean_speedup_over_default'])}, "
             f"vs SRC best {_fmt_x(t['geomean_speedup_over_src_best'])}"]
    if rep.interrupted:
        lines.append("interrupted: everything measured so far is kept; rerun to resume")
    return "\n".join(lines)


def run_migrate(args) -> int:
    from tunedb.transfer.cli.commands.tune import workloads_from_file
    from tunedb.transfer.measure.executors import ExecutorUnavailable
    from tunedb.transfer.migration.migrate import make_executor, migrate

    if args.top_k < 1:
        raise UserError("--top-k must be >= 1")
    if args.budget < 0:
        raise UserError("--budget must be >= 0")
    if args.replay and not os.path.isfile(args.replay):
        raise UserError(f"replay file {args.replay} does not exist")
    db = open_db(args, must_exist=True)
    src = target_arg(args.src, db)
    from tunedb.index.model.keys import key_of

    if key_of(src) not in set(db.entries().column("target_key").to_pylist()):
        raise UserError(f"source target {args.src!r} has no records in {args.db}")
    workloads = workloads_from_file(args.workloads) if args.workloads else None
    if args.replay:
        dst = Path(args.replay)
    else:
        dst = target_arg(args.dst, db)
    try:
        executor = make_executor(args.executor, address=args.ray_address)
    except ExecutorUnavailable as e:
        raise UserError(str(e)) from None
    bar = progress_bar(args, 1, "migrate")

    def progress(ev: dict) -> None:
        bar.total = max(ev["total"], 1)
        best = fmt_seconds(ev["best"]) if ev["best"] is not None else ""
        progress_to(bar, ev["done"], f"workload {ev['index'] + 1}/{ev['workloads']} {ev['workload'].get('family', '')}"
                                   f"{'  best ' + best if best else ''}")

    try:
        rep = migrate(db, src, dst, workloads, top_k=args.top_k, budget=args.budget, executor=executor,
                      progress=progress, seed=args.seed, device=args.device)
    except ExecutorUnavailable as e:
        raise UserError(str(e)) from None
    except ValueError as e:
        raise UserError(str(e).strip().splitlines()[0] if str(e).strip() else "bad migration") from None
    finally:
        bar.close()
        executor.close()
    emit(args, rep.to_json(), _human(rep))
    return 130 if rep.interrupted else 0


