"""``tunedb upgrade``: bring a database directory of an older schema to this tunedb's, in place.

See ``tunedb.index.parquet.upgrade`` for what it does and why a crash at any moment is safe
(rerun it to finish).  A database already at this schema is left as it is (exit 0, says so).
Errors are one line on stderr, exit status 2.
"""

from __future__ import annotations

from tunedb.transfer.cli.util import UserError, emit


def register(sub, common) -> None:
    p = sub.add_parser("upgrade", parents=[common],
                       help="upgrade a database directory to this tunedb's schema (in place, crash-safe)")
    p.set_defaults(func=run_upgrade)


def run_upgrade(args) -> None:
    from tunedb.index.parquet.upgrade import upgrade

    location = args.db
    if getattr(args, "db_extra", None):
        raise UserError("upgrade takes one --db directory")
    if "://" in location or location.startswith("memory:"):
        raise UserError(f"cannot upgrade {location}: only a database directory can be upgraded")
    try:
        st = upgrade(location)
    except FileNotFoundError:
        raise UserError(f"no tunedb database at {location}") from None
    except ValueError as e:
        lines = str(e).strip().splitlines()
        raise UserError(lines[0] if lines else "cannot upgrade") from None
    if not st["upgraded"]:
        human = f"{location} is already at schema {st['from_schema']}: nothing to do"
    else:
        human = (f"upgraded {location} from schema {st['from_schema']} to {st['to_schema']}: "
                 f"{st['partitions']} partition(s) rewritten ({st['files_before']} -> {st['files_after']} files, "
                 f"{st['rows']} records), {st['journals_folded']} journal(s) folded, "
                 f"{st['origins_recovered']} origin(s) recovered")
    emit(args, st, human)
