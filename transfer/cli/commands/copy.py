"""``tunedb copy SRC DST``: copy records between stores of any backends (resumable, idempotent;
see ``tunedb.transfer.migration.copy``)."""

from __future__ import annotations

import sys

from tunedb.transfer.cli.util import UserError, emit, open_location, progress_bar, progress_to, table_text


def register(sub, common) -> None:
    p = sub.add_parser("copy", parents=[common],
                       help="copy records between stores (directories, postgresql:// URLs); resumable")
    p.add_argument("src", metavar="SRC", help="source store (must exist)")
    p.add_argument("dst", metavar="DST", help="destination store (a directory is created when missing)")
    p.add_argument("--target", action="append", default=None, metavar="T",
                   help="only this target of SRC (name or key; repeatable; default all)")
    p.add_argument("--batch", type=int, default=None, metavar="N",
                   help="records per durable commit (default 5000)")
    p.set_defaults(func=run_copy)


def run_copy(args) -> int:
    from tunedb.transfer.migration.copy import DEFAULT_BATCH, copy_records, resolve_targets

    batch = DEFAULT_BATCH if args.batch is None else args.batch
    if batch < 1:
        raise UserError("--batch must be >= 1")
    from tunedb.index.opener import parse_location

    try:
        same = parse_location(args.src).same_store_as(parse_location(args.dst))
    except ValueError as e:
        raise UserError(str(e)) from None
    if args.src == args.dst or same:
        raise UserError("SRC and DST are the same store")
    src = open_location(args.src, create=False, what="source")
    try:
        targets = resolve_targets(src, args.target)  # before DST is opened: a bad --target creates nothing
    except ValueError as e:
        raise UserError(str(e)) from None
    dst = open_location(args.dst, create=True, what="destination")
    bar = progress_bar(args, sum(t["records"] for t in targets), "copy", unit="rec")
    counts = {"done": 0}

    def progress(done: int, total: int, info: str) -> None:
        counts["done"] = done
        if bar.total != max(total, 1):
            bar.total = max(total, 1)
        progress_to(bar, done, info)

    try:
        res = copy_records(src, dst, targets=[t["target_key"] for t in targets], batch=batch, progress=progress)
    except KeyboardInterrupt:
        bar.close()
        sys.stderr.write(f"tunedb: interrupted; every batch committed so far is kept ({counts['done']} records "
                         "handled); run the same copy again to finish\n")
        return 130
    except ValueError as e:
        bar.close()
        raise UserError(str(e).splitlines()[0]) from None
    finally:
        dst.close()
    bar.close()
    rows = [[t["target_name"], t["target_key"][:12], t["records"], t["copied"], t["skipped"],
             "yes" if t["invalidated"] else "", t["verdicts"]] for t in res["targets"]]
    human = (table_text(["target", "key", "records", "copied", "skipped", "invalidated", "verdicts"], rows)
             + f"\ncopied {res['copied']}, skipped {res['skipped']} (already in {dst.location}) "
             f"of {res['records']} records in {len(res['targets'])} target(s)") if rows else \
        f"nothing to copy: {src.location} holds no records"
    emit(args, res, human)
    return 0
