"""``tunedb`` command line.  Each command group lives in ``transfer/commands/<name>.py``
and exposes ``register(subparsers)``; a command's handler takes ``args`` and returns
nothing (it prints through ``cliutil.emit``) or raises ``cliutil.UserError``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from tunedb.transfer.cli.util import UserError

COMMAND_MODULES = (
    "store",      # init stats best compact dedup forget invalidate
    "io",         # import export
    "retrieval",  # nearest targets
    "kernels",    # measure space
    "tune",       # tune warm-start predict
    "migrate",    # migrate
    "demo",       # demo
    "report",     # report
)

DEFAULT_DB = "./tunedb-data"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        sys.stderr.write(f"tunedb: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--db", default=DEFAULT_DB, help="database directory (default ./tunedb-data)")
    common.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    parser = _Parser(prog="tunedb", description="tuning-record database and transfer engine")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(f"tunedb.transfer.cli.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"tunedb.transfer.cli.commands.{name}":
                continue  # command group not built yet
            raise
        mod.register(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except UserError as e:
        sys.stderr.write(f"tunedb: error: {e}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("tunedb: interrupted; everything measured so far is kept\n")
        return 130
    except BrokenPipeError:
        return 0
    return int(rc or 0)


if __name__ == "__main__":
    raise SystemExit(main())
