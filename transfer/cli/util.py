"""Shared pieces of the command line: user errors, output, parsing of workloads.

Secrets: everything the command line prints goes through :func:`masked` (``emit`` for results,
``main``'s printer for errors and warnings): a password in a URL or a ``password=`` setting is
``***`` (:func:`tunedb.index.support.redact.mask_url`), whatever message quoted it."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

from tunedb.index.model.units import fmt_seconds  # noqa: F401 (the one unit style, re-exported for the commands)
from tunedb.index.support import jsontext
from tunedb.index.support.redact import mask_url

if TYPE_CHECKING:
    from tqdm import tqdm


class UserError(Exception):
    """A mistake in the user's input: reported as one line on stderr, exit status 2."""


def masked(value: Any) -> Any:
    """``value`` with every password in its texts masked (:func:`~tunedb.index.support.redact.mask_url`):
    a string masked, dict keys and values, list and tuple items masked recursively (as lists);
    anything else unchanged (``emit`` masks what ``json.dumps`` makes of it)."""
    if isinstance(value, str):
        return mask_url(value)
    if isinstance(value, dict):
        return {masked(k): masked(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [masked(v) for v in value]
    return value


def _json_default(value: Any) -> str:
    """``str(value)`` for what JSON cannot hold, its passwords masked."""
    return mask_url(str(value))


def emit(args, payload: dict, human: str | None = None) -> None:
    """Print ``payload`` as exactly one JSON object with --json, else ``human`` (or pretty JSON).
    Every password in either is masked (:func:`masked`): a result line never shows one."""
    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(masked(payload), default=_json_default, sort_keys=True) + "\n")
    else:
        text = human if human is not None else json.dumps(masked(payload), indent=2, default=_json_default)
        sys.stdout.write(mask_url(text) + "\n")
    sys.stdout.flush()


#: the most bytes a JSON file named on the command line (a workload, config or workloads file) may
#: hold: such a file describes a few workloads or one config, never a data set
MAX_JSON_FILE = 16 << 20


def load_json_file(path: str, what: str) -> Any:
    """The JSON value in the file at ``path`` (UTF-8, at most :data:`MAX_JSON_FILE` bytes, nested
    at most :data:`~tunedb.index.model.keys.MAX_JSON_DEPTH` levels); UserError (one line naming
    the ``what`` file) when it cannot be read, is larger, is not JSON or nests deeper."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_JSON_FILE + 1)
        if len(data) > MAX_JSON_FILE:
            raise UserError(f"{what} file {path} is larger than {MAX_JSON_FILE >> 20} MiB")
        text = data.decode("utf-8")
    except OSError as e:
        raise UserError(f"cannot read {what} file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise UserError(f"{what} file {path} is not UTF-8 text") from None
    return loads_json(text, f"{what} file {path}")


def loads_json(text: str, what: str) -> Any:
    """``text`` parsed as JSON with the project's depth limit (:func:`tunedb.index.support.jsontext.loads`);
    UserError (one line naming ``what``) when it is not JSON or nests deeper than the limit."""
    try:
        return jsontext.loads(text, what)
    except json.JSONDecodeError as e:
        raise UserError(f"{what} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except ValueError as e:
        raise UserError(str(e)) from None


def parse_workload(spec: str) -> dict:
    """``family:key=value,...``, an inline JSON object or a path to a JSON file -> workload dict
    with a ``family`` key (:func:`tunedb.transfer.cli.workload_spec.parse_spec`); UserError (one
    line) when it is none of them.  Its validation against the kernel families and the database
    (:func:`tunedb.transfer.cli.preflight.check_args`) runs before every command."""
    from tunedb.transfer.cli.workload_spec import parse_spec

    try:
        return parse_spec(spec, lambda path: load_json_file(path, "workload"))
    except ValueError as e:
        raise UserError(str(e)) from None


def parse_config(spec: str) -> dict:
    """A JSON object given inline or as a path to a JSON file (:func:`load_json_file`); UserError
    (one line) when it is not JSON, nests deeper than the depth limit or is not an object."""
    if os.path.exists(spec):
        c = load_json_file(spec, "config")
    else:
        c = loads_json(spec, "config")
    if not isinstance(c, dict):
        raise UserError("config must be a JSON object")
    return c


def open_location(location: str, *, create: bool, what: str = "database", **options: Any):
    """``open_store(location, create=create, **options)``; a failure is a user error of one line
    (``cannot open WHAT LOCATION: why``, the reason from :func:`~tunedb.index.opener.open_error_line`)."""
    from tunedb.index.opener import open_error_line, open_store

    try:
        return open_store(location, create=create, **options)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot open {what} {mask_url(location)}: {open_error_line(e)}") from None


def checked_locations(args) -> list[str]:
    """:func:`db_locations`, checked: a location given twice, one no store can be at (a remote
    directory), or a lower layer directory that does not exist, is a user error (one line).  What a location names is the stores' reading
    (:func:`tunedb.index.opener.parse_location`)."""
    from tunedb.index.opener import parse_location

    locs = db_locations(args)
    parsed = []
    for i, loc in enumerate(locs):
        try:  # a location no store can be at fails before any layer is opened (and created)
            here = parse_location(loc)
            here.check_openable()
        except ValueError as e:
            raise UserError(f"cannot open {'lower layer' if i else 'database'} {mask_url(loc)}: {e}") from None
        if any(here.same_store_as(seen) for seen in parsed):
            raise UserError(f"layer {mask_url(loc)} is given twice")
        parsed.append(here)
    for loc, here in zip(locs[1:], parsed[1:]):
        if here.is_local_directory and not here.exists():
            raise UserError(f"no tunedb database at {loc} (a lower layer must exist)")
    return locs


def db_locations(args) -> list[str]:
    """The locations the global options name, most specific first: ``--db`` (the written one),
    further ``--db`` values, then ``--also`` values."""
    first = getattr(args, "db", "./tunedb-data")
    return [first, *(getattr(args, "db_extra", None) or []), *(getattr(args, "also", None) or [])]


def open_db(args, *, must_exist: bool = False):
    """Open the store(s) the global options name: ``args.db`` (a directory or URL; a path that is
    not a tunedb DB is a user error), or - when lower layers are given (a repeated ``--db``,
    ``--also``) - a ``LayeredStore`` over them in ``args.layers`` mode (default ordered), written
    through the first.  Lower layers are opened with ``create=False``: a missing one is a user
    error (one line), as is a location given twice."""
    from tunedb.index.opener import parse_location

    locs = checked_locations(args)
    path = locs[0]
    top_loc = parse_location(path)
    if must_exist and top_loc.is_local_directory and not top_loc.exists():
        raise UserError(f"no tunedb database at {path} (run 'tunedb init --db {path}' or import first)")
    top = open_location(path, create=True, **snapshot_options(args, path))
    if len(locs) == 1:
        return top
    from tunedb.index.views.layered import LayeredStore

    lower = [open_location(loc, create=False, what="lower layer", **snapshot_options(args, loc)) for loc in locs[1:]]
    return LayeredStore([top, *lower], writable=0, mode=getattr(args, "layers", None) or "ordered")


def snapshot_options(args, location: str) -> dict:
    """The opener's options for a published snapshot (``http(s)://``): ``--publisher-key``,
    ``--pin-version``."""
    from tunedb.index.opener import SNAPSHOT, parse_location

    if parse_location(location).kind != SNAPSHOT:
        return {}
    out: dict = {}
    key = getattr(args, "publisher_key", None)
    if key:
        out["publisher_key"] = key
    pin = getattr(args, "pin_version", None)
    if pin is not None:
        out["pin_version"] = pin
    return out


def target_arg(spec: str, db=None) -> dict:
    """A ``--target`` argument (DB target_name/key, preset, catalog device, JSON file) -> target dict
    (``tunedb.index.hardware.targets.resolve_target``); an unknown one, or a target file nested
    deeper than the JSON depth limit, is a UserError (one line)."""
    from tunedb.index.hardware.targets import resolve_target

    try:
        return resolve_target(spec, db)
    except (ValueError, KeyError) as e:
        raise UserError(str(e).splitlines()[0] if str(e) else f"unknown target {spec!r}") from None


def machine_line(check: dict | None) -> str:
    """One line on the machine check a run started with (``runlog.Stopwatch.machine``): its
    verdict, the reference kernel's spread and, when noisy, the first problem; "" without one."""
    if not check:
        return ""
    ref = check.get("reference") or {}
    cv = ref.get("cv")
    spread = f"reference kernel CV {cv * 100:.1f} %" if isinstance(cv, (int, float)) else "reference kernel not timed"
    if check.get("verdict") == "noisy":
        probs = check.get("problems") or []
        return (f"machine at the start: noisy ({spread}; {probs[0] if probs else 'see tunedb doctor'}): intervals are "
                "wider and decisions need more rounds; `tunedb doctor` says what to do")
    return f"machine at the start: fit to measure ({spread})"


def table_text(headers: list[str], rows: list[list]) -> str:
    """A plain fixed-width text table (``tabulate``'s "simple" format: header, dashed rule,
    columns two spaces apart).  Cells are printed as ``str(cell)``, never re-parsed as numbers."""
    from tabulate import tabulate

    return tabulate([[str(c) for c in r] for r in rows], headers=[str(h) for h in headers], tablefmt="simple",
                    disable_numparse=True)


def progress_bar(args, total: int, label: str = "", *, unit: str = "it") -> tqdm:
    """A ``tqdm`` progress bar on stderr for ``total`` steps, drawn only when stderr is a TTY
    and never with ``--json`` (then every call on it is a no-op).

    Callers move it to an absolute count with :func:`progress_to`; ``bar.total`` may be changed.
    """
    from tqdm import tqdm

    disable = bool(getattr(args, "json", False)) or not sys.stderr.isatty()
    try:  # a TTY that reports no size (some CI ptys, serial consoles) gets a fixed 80x24 screen
        sized = min(os.get_terminal_size(sys.stderr.fileno())) > 0
    except (OSError, ValueError, AttributeError):
        sized = False
    return tqdm(total=max(int(total), 1), desc=label or None, unit=unit, file=sys.stderr, disable=disable,
                leave=True, mininterval=0.1, dynamic_ncols=sized, ncols=None if sized else 80,
                nrows=None if sized else 24)


def progress_to(bar: tqdm, done: int, info: str = "") -> None:
    """Move ``bar`` to ``done`` (an absolute count) with ``info`` after the counts."""
    if bar.disable:
        return
    bar.set_postfix_str(info, refresh=False)
    bar.update(int(done) - bar.n)
