"""``tunedb`` command line.  Each command group lives in ``transfer/commands/<name>.py``
and exposes ``register(subparsers, common)``; a command's handler takes ``args`` and returns
nothing (it prints through ``cliutil.emit``) or raises ``cliutil.UserError``.

The global options ``--db`` and ``--json`` are accepted before or after the command, as
git/docker/kubectl accept them (``tunedb --db DIR stats`` == ``tunedb stats --db DIR``); a
value given after the command wins over one given before.  User errors and ``OSError``s
(disk full, permission denied, ...) are one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from tunedb.transfer.cli.util import UserError

COMMAND_MODULES = (
    "store",      # init stats best compact dedup forget invalidate
    "io",         # import export
    "retrieval",  # nearest targets
    "kernels",    # measure space
    "tune",       # tune warm-start predict
    "copy",       # copy (between stores, any backends)
    "upgrade",    # upgrade (schema of a DB)
    "verify",     # verify (re-measure imported bests)
    "migrate",    # migrate
    "demo",       # demo
    "report",     # report
)

DEFAULT_DB = "./tunedb-data"
DB_HELP = "database directory (default ./tunedb-data)"
JSON_HELP = "print exactly one JSON object on stdout"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        sys.stderr.write(f"tunedb: error: {message}\n")
        raise SystemExit(2)


def version_text(as_json: bool) -> str:
    """The package and schema versions: ``tunedb 0.1.0 (schema 1)`` or one JSON object."""
    from tunedb.index.version import SCHEMA_VERSION, TUNEDB_VERSION

    if as_json:
        return json.dumps({"tunedb": TUNEDB_VERSION, "schema": SCHEMA_VERSION}, sort_keys=True)
    return f"tunedb {TUNEDB_VERSION} (schema {SCHEMA_VERSION})"


class _VersionAction(argparse.Action):
    """``--version``: print the versions and exit 0 (as JSON when ``--json`` came before it)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        sys.stdout.write(version_text(bool(getattr(namespace, "json", False))) + "\n")
        sys.stdout.flush()
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    """The ``tunedb`` parser: global options, then one sub-parser per command."""
    # The top-level parser holds the defaults; the commands' copies of the options default to
    # SUPPRESS, so they set ``args.db``/``args.json`` only when given after the command (and
    # then win, since argparse copies the sub-parser's namespace over the top-level one).
    common = _Parser(add_help=False)
    common.add_argument("--db", default=argparse.SUPPRESS, help=DB_HELP)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=JSON_HELP)
    parser = _Parser(prog="tunedb", description="tuning-record database and transfer engine")
    parser.add_argument("--db", default=DEFAULT_DB, help=DB_HELP)
    parser.add_argument("--json", action="store_true", default=False, help=JSON_HELP)
    parser.add_argument("--version", action=_VersionAction,
                        help="print the tunedb and schema versions and exit (JSON after --json)")
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


def os_error_text(e: OSError) -> str:
    """One line for an OSError: ``<strerror> (<filename>)``, or its message when it has no strerror."""
    text = e.strerror or str(e) or type(e).__name__
    text = text.strip().splitlines()[0] if text.strip() else type(e).__name__
    names = [str(f) for f in (e.filename, e.filename2) if f is not None]
    return f"{text} ({' -> '.join(names)})" if names else text


def main(argv: list[str] | None = None) -> int:
    """Run the ``tunedb`` command line on ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
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
    except OSError as e:  # disk full, permission denied, a file where a directory belongs, ...
        sys.stderr.write(f"tunedb: error: {os_error_text(e)}\n")
        return 2
    return int(rc or 0)


if __name__ == "__main__":
    raise SystemExit(main())
