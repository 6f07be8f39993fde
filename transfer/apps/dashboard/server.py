"""Serving the dashboard: a threaded WSGI server (werkzeug, which Flask and Dash use) on one
address, the store's poller in a background thread.

:func:`make_server` binds (port 0: any free port) and returns the server, whose ``url`` says
where it listens; its ``serve_forever()`` serves until interrupted.  Request lines are not logged (a
page polls twice a second).

DNS rebinding: a web page the user opens elsewhere (``http://evil.example/``) can make its own
name resolve to 127.0.0.1 and then read this dashboard as "its own" site; the browser still
sends ``Host: evil.example``.  So every request passes :class:`HostCheck` first: the ``Host``
header's name must be ``localhost``, an IP address (``127.0.0.1``, ``[::1]``, the machine's
address: an address is its own origin, no other site's page can borrow it), the bound host, or
a name given with ``allow_hosts`` (``tunedb dashboard --allow-host NAME``: the name a reverse
proxy or a colleague's browser uses); any other ``Host`` (or none) is refused with ``403`` and
one line of text.  The header must be exactly one host, optionally with a port
(:func:`~.guard.parse_host`: no ``@``, ``,``, whitespace inside, userinfo or second port; an IPv6
address in brackets); two ``Host`` headers are refused too.  The port is not checked (an SSH
tunnel or a proxy changes it; a port does not make a name the attacker's), except for an
``allow_hosts`` entry given as ``NAME:PORT``.  A ``POST`` then passes :class:`~.guard.PostCheck`
(this page's own ``Origin``, a JSON body of at most 1 MiB that calls one of the app's callbacks;
else a ``4xx``).  Every response also says ``X-Frame-Options: DENY`` (no framing: no
clickjacking) and ``X-Content-Type-Options: nosniff``.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from typing import Any

from tunedb.transfer.apps.dashboard.guard import PostCheck, callback_shapes, parse_host

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def is_local(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``)."""
    if host in LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(host_header: str) -> tuple[str, str | None]:
    """``(name, port)`` of a ``Host`` header value: ``[::1]:8050`` -> ``("::1", "8050")``,
    ``Example.COM.:80`` -> ``("example.com", "80")``, ``localhost`` -> ``("localhost", None)``
    (the name lower-case, without a trailing dot or IPv6 brackets; :func:`~.guard.parse_host`).
    ValueError when the value is not exactly one host with an optional port."""
    parsed = parse_host(host_header)
    if parsed is None:
        raise ValueError(f"{host_header[:100]!r} is not a host name (NAME or NAME:PORT)")
    return parsed


def bound_name(host: str) -> str:
    """The name a ``Host`` header gives for the bound address ``host`` (``::1``, ``[::1]``,
    ``127.0.0.1``, ``My-Host.``): lower-case, IPv6 compressed and unbracketed, no trailing dot."""
    text = host.strip().strip("[]")
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return text.lower().rstrip(".")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostCheck:
    """WSGI middleware: serves ``app`` only to requests whose ``Host`` header names this server
    (see the module docstring: ``localhost``, an IP address, ``bound_host`` or one of
    ``allow_hosts``, each a name, or ``name:port`` to allow that port only: ValueError for an
    entry that is neither); any other ``Host``, none, or one that is not exactly one host with an
    optional port (:func:`~.guard.parse_host`) gets ``403 Forbidden`` and one line of plain text,
    and ``app`` is not called.  Every response gets :data:`SECURITY_HEADERS`."""

    SECURITY_HEADERS = (("X-Frame-Options", "DENY"), ("X-Content-Type-Options", "nosniff"))

    def __init__(self, app: Callable[..., Any], bound_host: str, allow_hosts: Iterable[str] = ()) -> None:
        self.app = app
        self.names = {"localhost", bound_name(bound_host)}
        self.exact: set[tuple[str, str | None]] = set()
        for entry in allow_hosts:
            name, port = host_name(entry)
            if port is None:
                self.names.add(name)
            else:
                self.exact.add((name, port))

    def allowed(self, host_header: str | None) -> bool:
        """Whether a request with this ``Host`` header value (None: without one) is served."""
        parsed = parse_host(host_header) if host_header else None
        if parsed is None:
            return False
        name, port = parsed
        return name in self.names or (name, port) in self.exact or _is_address(name)

    def __call__(self, environ: dict, start_response: Callable[..., Any]) -> Any:
        extra = list(self.SECURITY_HEADERS)

        def respond(status: str, headers: list, exc_info: Any = None) -> Any:
            named = {k.lower() for k, _ in headers}
            headers = list(headers) + [(k, v) for k, v in extra if k.lower() not in named]
            return start_response(status, headers, exc_info) if exc_info is not None else \
                start_response(status, headers)

        host = environ.get("HTTP_HOST")
        if self.allowed(host):
            return self.app(environ, respond)
        shown = repr(host[:100]) if host else "(none)"
        body = (f"tunedb dashboard: refused: Host {shown} is not this dashboard's name (a page of another "
                "site may be trying to read it: DNS rebinding); open it as localhost or by its address, "
                "or start it with --allow-host NAME\n").encode("utf-8", "replace")
        respond("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
        return [body]


class Dashboard:
    """A bound dashboard server: ``url``, ``port``, ``data`` (:class:`~.data.DashboardData`), ``app`` (the
    Dash app); ``serve_forever()`` / ``shutdown()``."""

    def __init__(self, server: Any, data: Any, app: Any, host: str, port: int) -> None:
        self.server, self.data, self.app, self.port = server, data, app, port
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}/"

    def serve_forever(self) -> None:
        try:
            self.server.serve_forever()
        finally:
            self.data.stop()
            self.server.server_close()

    def shutdown(self) -> None:
        self.server.shutdown()


def make_server(db: Any, *, host: str = "127.0.0.1", port: int = 8050, refresh_s: float = 0.5,
                poll_s: float = 0.5, allow_hosts: Iterable[str] = ()) -> Dashboard:
    """Start polling ``db`` (its first snapshot is computed here) and bind the dashboard to
    ``host``:``port`` (0: a free port).  Requests are served only under the ``Host`` names
    :class:`HostCheck` accepts (``localhost``, IP addresses, ``host``, ``allow_hosts``), a
    ``POST`` only as :class:`~.guard.PostCheck` accepts it.  OSError when the address cannot be
    bound; ValueError for an ``allow_hosts`` entry that is not ``NAME`` or ``NAME:PORT``."""
    from werkzeug.serving import WSGIRequestHandler
    from werkzeug.serving import make_server as _make

    from tunedb.transfer.apps.dashboard.app import create_app
    from tunedb.transfer.apps.dashboard.data import DashboardData

    class _Quiet(WSGIRequestHandler):
        def log_request(self, *args: Any, **kwargs: Any) -> None:
            pass

    allow_hosts = list(allow_hosts)
    for entry in allow_hosts:
        host_name(entry)  # (ValueError before anything is bound or read)
    sock = _bind(host, port)  # (bound here: an address in use is an OSError, not werkzeug's exit)
    port = int(sock.getsockname()[1])
    try:
        data = DashboardData(db, poll_s=poll_s)
        app = create_app(data, refresh_s=refresh_s)
        guarded = PostCheck(app.server, app.config.routes_pathname_prefix + "_dash-update-component",
                            callback_shapes(app))
        server = _make(host, port, HostCheck(guarded, host, allow_hosts), threaded=True, request_handler=_Quiet,
                       fd=sock.fileno())
    finally:
        sock.close()  # (the server holds its own duplicate of the socket)
    data.start()
    return Dashboard(server, data, app, host, port)


def _bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: a free port); OSError when it cannot be bound."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock
