"""``tunedb`` command line.  Each command group lives in ``transfer/commands/<name>.py``
and exposes ``register(subparsers, common)``; a command's handler takes ``args`` and returns
nothing (it prints through ``cliutil.emit``) or raises ``cliutil.UserError``.

The global options ``--db``, ``--also``, ``--layers`` and ``--json`` are accepted before or
after the command, as git/docker/kubectl accept them (``tunedb --db DIR stats`` == ``tunedb
stats --db DIR``); a value given after the command wins over one given before (for the
repeatable ``--db`` and ``--also``: the list given after the command replaces the one before).

Layered databases: ``--db`` may be repeated; the first is the layer written to, the others are
read-only lower layers, and each ``--also LOCATION`` adds a read-only layer below them (in the
order given).  ``--layers ordered|union`` picks how the layers answer (default ordered; see
``tunedb.index.views.layered``).  ``args.db`` stays the first ``--db`` (a string), ``args.db_extra``
holds the further ``--db`` values and ``args.also`` the ``--also`` ones; ``cliutil.open_db``
opens them all.  User errors and ``OSError``s
(disk full, permission denied, ...) are one line on stderr and exit status 2.

Secrets: every line this module prints (errors, warnings, usage errors, and the traceback of an
unexpected exception of the ``tunedb`` process) has its passwords masked
(:func:`tunedb.index.support.redact.mask_url`), as ``cliutil.emit`` masks results: ``--db
postgresql://user:SECRET@host/db`` is shown as ``postgresql://user:***@host/db``.  The
environment (``PGPASSWORD``, ...) is never printed.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import json
import os
import sys
import warnings
from typing import NoReturn

from tunedb.index.support.redact import mask_url
from tunedb.transfer.cli.util import UserError

COMMAND_MODULES = (
    "store",      # init stats best compact dedup forget invalidate
    "io",         # import export
    "retrieval",  # nearest targets
    "workloads",  # workloads (ls)
    "measuring",  # measure compare space
    "tune",       # tune warm-start predict
    "model",      # tune-model
    "copy",       # copy (between stores, any backends)
    "upgrade",    # upgrade (schema of a DB)
    "verify",     # verify (re-measure imported bests)
    "migrate",    # migrate
    "demo",       # demo
    "report",     # report
    "dashboard",  # dashboard (live, read-only web view; the dashboard extra)
    "doctor",     # doctor (is this machine fit to measure now?)
    "publish",    # publish keygen (a read-only snapshot for a static web server)
)

DEFAULT_DB = "./tunedb-data"
DB_HELP = ("database directory or URL (default ./tunedb-data); repeat it for layers: the first is written, "
           "the others are read-only lower layers")
ALSO_HELP = "a read-only lower layer below --db (a directory or URL; repeatable, most specific first)"
LAYERS_HELP = "how layers answer: ordered (the first layer that has it, default) or union (the best of all)"
JSON_HELP = "print exactly one JSON object on stdout"
LAYER_MODES = ("ordered", "union")


class _DbAction(argparse.Action):
    """``--db``: the first one on its side of the command sets ``db``, later ones go to
    ``db_extra`` (lower layers).  The sub-parser parses into a fresh namespace, so a ``--db``
    after the command starts a new list that replaces the one given before it."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if getattr(namespace, "db_given", False):
            namespace.db_extra = [*getattr(namespace, "db_extra", []), values]
        else:
            namespace.db = values
            namespace.db_extra = []
            namespace.db_given = True


def _add_global_options(p: argparse.ArgumentParser, *, top: bool) -> None:
    """The global options; on the top-level parser with their defaults, on the commands' copy
    with SUPPRESS (set only when given after the command)."""
    dflt = (lambda v: v) if top else (lambda v: argparse.SUPPRESS)
    p.add_argument("--db", action=_DbAction, default=dflt(DEFAULT_DB), help=DB_HELP)
    p.add_argument("--also", action="append", default=dflt(None), metavar="LOCATION", help=ALSO_HELP)
    p.add_argument("--layers", choices=LAYER_MODES, default=dflt("ordered"), help=LAYERS_HELP)
    p.add_argument("--json", action="store_true", default=dflt(False), help=JSON_HELP)
    p.add_argument("--publisher-key", default=dflt(None), metavar="KEYFILE",
                   help="refuse http(s):// snapshots not signed with this ed25519 public key (tunedb keygen)")
    p.add_argument("--pin-version", type=int, default=dflt(None), metavar="N",
                   help="read version N of an http(s):// snapshot even when a newer one was read before "
                        "(without it, a signed snapshot older than one already read is refused as a rollback; "
                        "an older unsigned one is read with a warning)")


class UsageError(Exception):
    """A command line argparse refused (unknown option, missing argument, bad choice)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (reported by main)
        raise UsageError(message)


def error_line(message: object) -> None:
    """Write ``tunedb: error: <message>`` (its passwords masked) on stderr."""
    sys.stderr.write(f"tunedb: error: {mask_url(message)}\n")
    sys.stderr.flush()


def fail(message: object, as_json: bool, code: int = 2) -> int:
    """Report an error the one way every command does and return ``code``: the line
    ``tunedb: error: <message>`` on stderr and, when ``as_json``, also exactly one JSON object
    ``{"error": <message>, "exit": code}`` on stdout (passwords masked in both)."""
    error_line(message)
    if as_json:
        sys.stdout.write(json.dumps({"error": mask_url(str(message)), "exit": code}, sort_keys=True) + "\n")
        sys.stdout.flush()
    return code


def wants_json(argv: list[str]) -> bool:
    """Whether ``--json`` is among the options of ``argv`` (before a ``--``): known even when
    the rest of the line does not parse."""
    for a in argv:
        if a == "--":
            return False
        if a == "--json":
            return True
    return False


def _masking_excepthook(hook: object) -> object:
    """``hook`` (a ``sys.excepthook``) called with the exception's text masked: an unexpected
    exception's traceback never prints a password."""
    def masked_hook(kind: type[BaseException], value: BaseException, tb: object) -> None:
        import traceback

        text = "".join(traceback.format_exception(kind, value, tb))  # type: ignore[arg-type]
        sys.stderr.write(mask_url(text))
        sys.stderr.flush()

    masked_hook.tunedb_masking = True  # type: ignore[attr-defined]
    masked_hook.wrapped = hook  # type: ignore[attr-defined]
    return masked_hook


def version_text(as_json: bool) -> str:
    """The package and schema versions: ``tunedb 0.1.0 (schema 1)`` or one JSON object."""
    from tunedb.index.model.version import SCHEMA_VERSION, TUNEDB_VERSION

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
    _add_global_options(common, top=False)
    parser = _Parser(prog="tunedb", description="tuning-record database and transfer engine")
    _add_global_options(parser, top=True)
    parser.set_defaults(db_extra=[], db_given=False)
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
    if not getattr(sys.excepthook, "tunedb_masking", False):
        sys.excepthook = _masking_excepthook(sys.excepthook)  # type: ignore[assignment]
    argv = sys.argv[1:] if argv is None else list(argv)
    as_json = wants_json(argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as e:
        return fail(e, as_json)
    as_json = bool(getattr(args, "json", False))
    shown = warnings.showwarning
    pending: list[str] = []  # warnings, one line each: printed when the command ends without an error
    warnings.showwarning = lambda message, category, *_a, **_k: pending.append(_warning_line(message, category))
    try:
        from tunedb.transfer.cli.preflight import check_args

        check_args(args)
        rc = args.func(args)
        _flush(pending)
    except UserError as e:
        return fail(e, as_json)
    except ValueError as e:
        # the store contract's "bad input" error (an unknown target, a schema-1 DB that must be
        # upgraded before writing, ...): one line like a UserError; TUNEDB_DEBUG=1 shows the traceback
        if os.environ.get("TUNEDB_DEBUG"):
            raise
        text = str(e).strip().splitlines()
        return fail(text[0] if text else type(e).__name__, as_json)
    except KeyboardInterrupt:
        _flush(pending)
        sys.stderr.write("tunedb: interrupted; everything measured so far is kept\n")
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:  # disk full, permission denied, a file where a directory belongs, ...
        return fail(os_error_text(e), as_json)
    finally:
        warnings.showwarning = shown
    return int(rc or 0)


def _warning_line(message: Warning | str, category: type[Warning]) -> str:
    """A warning as the command line prints it: ``tunedb: warning: <its first line>`` (no file
    name, no source line; passwords masked)."""
    text = str(message).strip().splitlines()
    return f"tunedb: warning: {mask_url(text[0]) if text else category.__name__}"


def _flush(pending: list[str]) -> None:
    """Print the collected warning lines (each once) on stderr."""
    for line in dict.fromkeys(pending):
        sys.stderr.write(line + "\n")
    pending.clear()


def console_main() -> NoReturn:
    """The ``tunedb`` executable: run :func:`main`, then leave without native teardown.

    Python's own exit handlers run and both streams are flushed; then the process ends with
    ``os._exit``. Arrow, DuckDB and FAISS keep native thread pools whose destructors can race
    interpreter shutdown and abort a finished command ("terminate called without an active
    exception", exit -6) after its answer was printed and its data committed; skipping that
    teardown makes the exit status the command's own. An exception that escapes ``main`` (a bug)
    still ends the normal way, with its traceback.
    """
    code = main()
    atexit._run_exitfuncs()  # noqa: SLF001 - the interpreter's own exit handlers, run before leaving
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: the reader left, nothing to add
            pass
    os._exit(code)


if __name__ == "__main__":
    console_main()
