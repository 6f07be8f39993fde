"""``tunedb dashboard``: a live, read-only web page of a DB (see transfer/apps/dashboard/).

Binds 127.0.0.1 by default; another address needs ``--allow-remote`` (and prints a warning:
configs and timings may be confidential).  Requests are served only under ``localhost``, an IP
address or the bound host as ``Host`` (DNS rebinding, see ``transfer/apps/dashboard/server.py``);
``--allow-host NAME`` (repeatable) adds a name, e.g. the one a reverse proxy serves it as; with
``--allow-remote`` this machine's own names (``socket.gethostname()``, ``getfqdn()``) are added
too (they are this site's DNS, not an attacker's).  Prints the URL on stdout when it is ready (one JSON
object ``{"url", "db"}`` with ``--json``) and serves until interrupted.  Needs the
``dashboard`` extra (dash, plotly).
"""

from __future__ import annotations

import sys

from tunedb.transfer.cli.util import UserError, emit, open_location

DEFAULT_PORT = 8050


def register(sub, common) -> None:
    p = sub.add_parser("dashboard", parents=[common],
                       help="serve a live, read-only web dashboard of the DB (overview, pipeline, warm vs cold, "
                            "trends, per-entry pages)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"TCP port (default {DEFAULT_PORT}; 0: any free port, printed)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; any other needs --allow-remote)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a --host other than loopback (anyone who reaches it sees the DB's configs and timings)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="also serve requests whose Host is NAME (or NAME:PORT), e.g. behind a reverse proxy "
                        "(repeatable; localhost, IP addresses and --host are always served)")
    p.add_argument("--refresh-s", type=float, default=0.5, metavar="SECONDS",
                   help="how often the page checks for changes (default 0.5)")
    p.set_defaults(func=run_dashboard)


def _open_read_only(args):
    """The store(s) ``--db`` (and ``--also``) name, opened read-only, creating nothing: a Parquet
    directory must exist and be a tunedb DB (``ParquetStore.open(read_only=True)``: nothing in it is
    written, not even the fold of a crashed writer's journal); a PostgreSQL URL must hold tunedb's
    schema (``PostgresStore(read_only=True)``: no migration, the server refuses writes); several
    locations are a ``LayeredStore`` with no writable layer."""
    from tunedb.index.views.layered import LayeredStore
    from tunedb.transfer.cli.util import checked_locations

    locs = checked_locations(args)
    layers = [_open_one_read_only(loc) for loc in locs]
    if len(layers) == 1:
        return layers[0]
    return LayeredStore(layers, writable=None, mode=getattr(args, "layers", None) or "ordered")


def _open_one_read_only(loc: str):
    """One location opened as the stores read it (:func:`tunedb.index.opener.parse_location`),
    with ``read_only`` (a new in-memory store has nothing to protect) and the CLI's one-line error."""
    from tunedb.index.opener import MEMORY, parse_location

    if parse_location(loc).kind == MEMORY:
        return open_location(loc, create=False)
    return open_location(loc, create=False, read_only=True)


def own_names() -> list[str]:
    """This machine's host names (``socket.gethostname()`` and ``socket.getfqdn()``), served
    as ``Host`` when the dashboard binds a non-loopback address."""
    import socket

    return sorted({n for n in (socket.gethostname(), socket.getfqdn()) if n})


def run_dashboard(args) -> int:
    from tunedb.transfer.apps.dashboard.server import is_local

    try:
        import dash  # noqa: F401
        import plotly  # noqa: F401
    except ImportError:
        raise UserError("the dashboard needs dash and plotly: pip install 'tunedb[dashboard]'") from None
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port} is not a TCP port (0-65535)")
    if args.refresh_s <= 0:
        raise UserError("--refresh-s must be > 0")
    for name in args.allow_host:
        if not name or any(c.isspace() or c in "/@,*" for c in name):
            raise UserError(f"--allow-host {name!r} is not a host name (NAME or NAME:PORT)")
    if not is_local(args.host):
        if not args.allow_remote:
            raise UserError(f"--host {args.host} would serve the DB beyond this machine; add --allow-remote "
                            "to do so (configs and timings may be confidential)")
        sys.stderr.write(f"tunedb: warning: serving on {args.host}: anyone who can reach it sees this DB's "
                         "configs and timings (no authentication)\n")
        sys.stderr.flush()
    db = _open_read_only(args)
    from tunedb.transfer.apps.dashboard.server import make_server

    try:
        dash_server = make_server(db, host=args.host, port=args.port, refresh_s=args.refresh_s,
                                  allow_hosts=[*args.allow_host, *([] if is_local(args.host) else own_names())])
    except OSError as e:
        raise UserError(f"cannot serve on {args.host}:{args.port}: {e.strerror or e}") from None
    emit(args, {"url": dash_server.url, "db": db.location},
         f"tunedb dashboard of {db.location} (read-only): {dash_server.url}")
    try:
        dash_server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0
