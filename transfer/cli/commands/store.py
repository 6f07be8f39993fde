"""Store commands: init, stats, best, compact, dedup, forget, invalidate."""

from __future__ import annotations

from tunedb.transfer.cli.util import UserError, emit, fmt_seconds, open_db, parse_workload, resolve_target, table_text

TRUST_HELP = ("only records these patterns trust answer: measured, replay, imported[:FORMAT], "
              "migrated[:TARGET], verified, host:NAME (comma-separated)")


def trusted(args, open_it):
    """``open_it()`` (the opened store), or a TrustedStore view of it when ``--trust`` was given.
    The policy is parsed first: a bad one is a UserError and no store is opened (or created)."""
    from tunedb.index.trust import parse_trust, trusted_view

    policy = None
    if getattr(args, "trust", None) is not None:
        try:
            policy = parse_trust(args.trust)
        except ValueError as e:
            raise UserError(f"--trust: {e}") from None
    return trusted_view(open_it(), policy)


def register(sub, common) -> None:
    p = sub.add_parser("init", parents=[common], help="create an empty database directory")
    p.set_defaults(func=run_init)
    p = sub.add_parser("stats", parents=[common], help="records, targets, workloads, files, size")
    p.set_defaults(func=run_stats)
    p = sub.add_parser("best", parents=[common], help="the k best configs of a (target, workload)")
    p.add_argument("--target", required=True)
    p.add_argument("--workload", required=True)
    p.add_argument("-k", type=int, default=1)
    p.add_argument("--trust", metavar="PATTERNS", help=TRUST_HELP)
    p.set_defaults(func=run_best)
    p = sub.add_parser("compact", parents=[common], help="merge small files per target")
    p.set_defaults(func=run_compact)
    p = sub.add_parser("dedup", parents=[common], help="remove repeated identical measurements")
    p.set_defaults(func=run_dedup)
    p = sub.add_parser("forget", parents=[common], help="retention: top-k, age, or a whole target")
    p.add_argument("--keep-top", type=int)
    p.add_argument("--older-than", type=float, metavar="DAYS")
    p.add_argument("--target")
    p.set_defaults(func=run_forget)
    p = sub.add_parser("invalidate", parents=[common], help="mark a target stale (toolchain upgrade)")
    p.add_argument("--target", required=True)
    p.set_defaults(func=run_invalidate)


def run_init(args) -> None:
    db = open_db(args)
    emit(args, {"path": str(db.path), "records": len(db)}, f"tunedb database at {db.path} ({len(db)} records)")


def run_stats(args) -> None:
    from tunedb.transfer.search.runlog import run_hit_rate

    db = open_db(args, must_exist=True)
    s = db.stats().to_dict()
    hits, evals = run_hit_rate(db.runs())
    s["hit_rate_this_process"] = s.pop("hit_rate")
    s["lookups_this_process"] = s.pop("lookups")
    s["hits_this_process"] = s.pop("hits")
    s["hit_rate_all_runs"] = hits / evals if evals else None
    s["evaluations_all_runs"] = evals
    s["cache_hits_all_runs"] = hits
    labels = {"hit_rate_this_process": "hit rate (this process)", "lookups_this_process": "lookups (this process)",
              "hits_this_process": "hits (this process)", "hit_rate_all_runs": "hit rate (all stored runs)",
              "evaluations_all_runs": "evaluations (all runs)", "cache_hits_all_runs": "cache hits (all runs)"}

    def show(k: str, v: object) -> str:
        if k.startswith("hit_rate"):
            return "-" if v is None else f"{v * 100:.1f} %"
        return str(v)
    human = "\n".join(f"{labels.get(k, k):>26}: {show(k, v)}" for k, v in s.items()
                      if k not in ("stale_targets", "offline"))
    if s.get("offline"):
        human += f"\n{'offline':>26}: yes: the server cannot be reached; these answers come from the local cache"
    emit(args, s, human)


def _target_in_db(args, db, spec: str) -> dict:
    t = resolve_target(spec, db)
    from tunedb.index.keys import key_of

    tkey = key_of(t)
    if not any(x["target_key"] == tkey for x in db.targets()):
        raise UserError(f"target {spec!r} has no records in {args.db}")
    return t


def run_best(args) -> None:
    if args.k < 1:
        raise UserError("-k must be >= 1")
    db = trusted(args, lambda: open_db(args, must_exist=True))
    target = _target_in_db(args, db, args.target)
    workload = parse_workload(args.workload)
    best = db.best_costs(target, workload, args.k)
    if not best:
        from tunedb.index.keys import key_of

        if not any(e == key_of(workload) for e in db.entries().column("workload_key").to_pylist()):
            raise UserError(f"workload {args.workload!r} has no records in {args.db}")
    rows = [{"config": c.config, "config_key": c.config_key, "cost": c.estimate.value,
             "estimate": c.estimate.to_dict(), "source": c.record.source, "record_id": c.record.record_id}
            for c in best]
    human = table_text(["rank", "cost", "interval", "n", "", "source", "config"],
                       [[i + 1, fmt_seconds(c.estimate.value), c.estimate.interval_text(), c.estimate.records,
                         ("noisy" if c.estimate.noisy else "") + (" confirmed" if c.estimate.basis == "confirmed"
                                                                   else ""),
                         c.record.source, c.config] for i, c in enumerate(best)])
    note = ("\ncost: median of the per-record medians of each config's ok records (n records); "
            "interval: its confidence interval")
    if any(c.estimate.basis == "confirmed" for c in best):
        note += ("; confirmed configs (re-measured after they were chosen) rank first: a lower cost "
                 "below them is a search's sample, not confirmed (tunedb compare decides)")
    emit(args, {"target": target, "workload": workload, "configs": rows, "records": rows}, human + note)


def run_compact(args) -> None:
    db = open_db(args, must_exist=True)
    st = db.compact()
    emit(args, st, f"compacted {st['partitions']} partition(s): {st['files_before']} -> {st['files_after']} files")


def run_dedup(args) -> None:
    db = open_db(args, must_exist=True)
    st = db.dedup()
    emit(args, st, f"removed {st['removed']} repeated measurement(s)")


def run_forget(args) -> None:
    if args.keep_top is None and args.older_than is None and args.target is None:
        raise UserError("forget needs --keep-top, --older-than or --target")
    if args.keep_top is not None and args.keep_top < 0:
        raise UserError("--keep-top must be >= 0")
    if args.older_than is not None and args.older_than < 0:
        raise UserError("--older-than must be >= 0")
    db = open_db(args, must_exist=True)
    target = _target_in_db(args, db, args.target) if args.target else None
    st = db.forget(keep_top=args.keep_top, older_than_days=args.older_than, target=target)
    emit(args, st, f"removed {st['removed']} record(s)")


def run_invalidate(args) -> None:
    db = open_db(args, must_exist=True)
    target = _target_in_db(args, db, args.target)
    key = db.invalidate(target)
    emit(args, {"target_key": key, "invalidated": True}, f"target {args.target} ({key[:12]}) marked stale")
