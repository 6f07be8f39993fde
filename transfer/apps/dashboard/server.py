"""Serving the dashboard: a threaded WSGI server (werkzeug, which Flask and Dash use) on one
address, the store's poller in a background thread.

:func:`make_server` binds (port 0: any free port) and returns the server, whose ``url`` says
where it listens; its ``serve_forever()`` serves until interrupted.  Request lines are not logged (a
page polls twice a second).
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def is_local(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``)."""
    if host in LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
                poll_s: float = 0.5) -> Dashboard:
    """Start polling ``db`` (its first snapshot is computed here) and bind the dashboard to
    ``host``:``port`` (0: a free port).  OSError when the address cannot be bound."""
    from werkzeug.serving import WSGIRequestHandler
    from werkzeug.serving import make_server as _make

    from tunedb.transfer.apps.dashboard.app import create_app
    from tunedb.transfer.apps.dashboard.data import DashboardData

    class _Quiet(WSGIRequestHandler):
        def log_request(self, *args: Any, **kwargs: Any) -> None:
            pass

    sock = _bind(host, port)  # (bound here: an address in use is an OSError, not werkzeug's exit)
    port = int(sock.getsockname()[1])
    try:
        data = DashboardData(db, poll_s=poll_s)
        app = create_app(data, refresh_s=refresh_s)
        server = _make(host, port, app.server, threaded=True, request_handler=_Quiet,
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
