"""``tunedb workloads`` (alias ``ls``): the targets of a database and the workloads each holds
records of, every workload printed in a form ``--workload`` accepts back."""

from __future__ import annotations

import json

from tunedb.transfer.cli.util import UserError, emit, fmt_seconds, open_db


def register(sub, common) -> None:
    p = sub.add_parser("workloads", aliases=["ls"], parents=[common],
                       help="a database's targets and workloads, each workload as --workload accepts it")
    p.add_argument("--target", default=None, metavar="T",
                   help="only this target: its name, its key or a key prefix of at least 6 digits")
    p.add_argument("--family", default=None, metavar="F", help="only workloads of this family (e.g. matmul)")
    p.add_argument("--match", default=None, metavar="TEXT",
                   help="only workloads whose printed form contains TEXT (case-insensitive)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print only the workloads, one per line and each once, nothing else")
    p.set_defaults(func=run_workloads)


def select_entries(rows: list[dict], target: str | None, family: str | None, match: str | None) -> list[dict]:
    """The entry rows (``RecordStore.entries`` as dicts, ``workload`` parsed) that pass the
    filters: ``target`` equal to the target name or key or a prefix (>= 6 digits) of the key,
    ``family`` equal, ``match`` a case-insensitive substring of the workload's ``spec``."""
    out = []
    for r in rows:
        if target is not None and not (r["target_name"] == target or r["target_key"] == target
                                       or (len(target) >= 6 and r["target_key"].startswith(target))):
            continue
        if family is not None and r["family"] != family:
            continue
        if match is not None and match.lower() not in r["spec"].lower():
            continue
        out.append(r)
    return out


def run_workloads(args) -> None:
    """``tunedb workloads``: per target (sorted by name), its workloads (sorted by their printed
    form) with records, ok records and the entry's best cost (seconds; the cost of the config
    ``tunedb best`` lists first).  ``--json``: ``{"targets": [{"target_name", "target_key",
    "target", "workloads": [{"spec", "workload", "workload_key", "family", "records",
    "ok_records", "best_cost"}]}]}``.  A target filter that matches no target of the database
    is a user error; other filters that match nothing give an empty list."""
    from tunedb.transfer.cli.workload_spec import workload_spec

    db = open_db(args, must_exist=True)
    if args.target is not None and not any(  # checked before entries(), which may write the derived cache
            args.target in (t["target_name"], t["target_key"])
            or (len(args.target) >= 6 and t["target_key"].startswith(args.target)) for t in db.targets()):
        raise UserError(f"target {args.target!r} has no records in {args.db}")
    rows = []
    for r in db.entries().to_pylist():
        w = json.loads(r["workload"])
        rows.append({**r, "workload": w, "spec": workload_spec(w)})
    rows = select_entries(rows, args.target, args.family, args.match)
    targets: dict[str, dict] = {}
    for r in sorted(rows, key=lambda r: (r["target_name"], r["target_key"], r["spec"])):
        t = targets.setdefault(r["target_key"], {"target_name": r["target_name"], "target_key": r["target_key"],
                                                 "target": json.loads(r["target"]), "workloads": []})
        t["workloads"].append({"spec": r["spec"], "workload": r["workload"], "workload_key": r["workload_key"],
                               "family": r["family"], "records": r["records"], "ok_records": r["ok_records"],
                               "best_cost": r["best_cost"]})
    payload = {"targets": list(targets.values())}
    if args.quiet:
        human = "\n".join(dict.fromkeys(w["spec"] for t in targets.values() for w in t["workloads"]))
    elif not targets:
        human = "no workloads match" if rows or args.family or args.match else f"no records in {args.db}"
    else:
        lines = []
        for t in targets.values():
            n = len(t["workloads"])
            lines.append(f"{t['target_name']}  (key {t['target_key'][:12]}): {n} workload{'s' if n != 1 else ''}")
            width = max(len(w["spec"]) for w in t["workloads"])
            for w in t["workloads"]:
                best = fmt_seconds(w["best_cost"]) if w["best_cost"] is not None else "no ok record"
                recs = f"{w['records']} record{'s' if w['records'] != 1 else ''}"
                lines.append(f"  {w['spec']:<{width}}  {recs} ({w['ok_records']} ok), best {best}")
        human = "\n".join(lines)
    emit(args, payload, human)
