"""What the dashboard accepts of a request before Dash sees it: the ``Host`` header's syntax and
the checks on every ``POST`` (Dash's callback endpoint is the only one).

:func:`parse_host` reads a ``Host`` header (or the host part of an ``Origin``) as exactly one host,
optionally with a port: a name (letters, digits, ``-``, ``_``, dot-separated labels, one trailing
dot allowed), an IPv4 address, or an IPv6 address in brackets; a port is 1 to 65535.  Anything
else (``@``, ``,``, whitespace inside, userinfo, two ports, an empty host, an unbracketed IPv6
address, a scope id) is no host at all.

:class:`PostCheck` answers a malformed ``POST`` with a ``4xx`` and one line of text, before the
app runs, so a hostile or broken request never reaches a handler that could fail with a ``500``:

* ``403``: no ``Origin``, or one that is not this page's own (scheme ``http``/``https``, the
  same host and port as the ``Host`` header): a page of another site cannot post here (CSRF).
* ``411``: no ``Content-Length`` (a chunked body is refused); ``400``: one that is not a number.
* ``413``: a body over :data:`MAX_BODY_BYTES` (not read).
* ``415``: a ``Content-Type`` other than ``application/json``.
* ``400``: a body shorter than its ``Content-Length``, not UTF-8, not JSON (or nested past the
  project's depth limit), or, on the callback endpoint, not a call of one of the app's callbacks
  with exactly its inputs and state (:func:`callback_shapes`).
"""

from __future__ import annotations

import io
import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tunedb.index.support.jsontext import loads

#: the largest request body the dashboard reads, in bytes (a callback request is a few hundred)
MAX_BODY_BYTES = 1 << 20

_NAME = r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.?"
_HOST = re.compile(rf"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>{_NAME}))(?::(?P<port>[0-9]{{1,5}}))?")
_ORIGIN = re.compile(r"(?P<scheme>[A-Za-z]+)://(?P<host>[^/?#]*)")
_LENGTH = re.compile(r"[0-9]{1,12}")
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def parse_host(value: str) -> tuple[str, str | None] | None:
    """``(name, port)`` of a ``Host`` header value, or None when it is not exactly one host with
    an optional port (see the module docstring).  The name is lower-case, without its trailing dot;
    an IPv6 address is unbracketed and compressed (``[0:0::1]`` -> ``::1``); the port is its
    decimal text without leading zeros, None when absent.  Spaces and tabs around the value are
    ignored (HTTP's optional whitespace)."""
    m = _HOST.fullmatch(value.strip(" \t"))
    if m is None:
        return None
    port = m["port"]
    if port is not None and not 0 < int(port) <= 65535:
        return None
    if m["v6"] is not None:
        try:
            name = str(ipaddress.IPv6Address(m["v6"]))
        except ValueError:
            return None
    else:
        name = m["name"].lower().rstrip(".")
    return name, (None if port is None else str(int(port)))


def same_origin(origin: str | None, host: str | None) -> bool:
    """Whether an ``Origin`` header value names the same host and port as the ``Host`` header
    value (the port of an origin without one: its scheme's default, 80 or 443); False when either
    is missing or malformed, or the scheme is not ``http`` / ``https`` (``null`` included)."""
    if not origin or not host:
        return False
    m = _ORIGIN.fullmatch(origin.strip(" \t"))
    if m is None or m["scheme"].lower() not in _DEFAULT_PORTS:
        return False
    default = _DEFAULT_PORTS[m["scheme"].lower()]
    o, h = parse_host(m["host"]), parse_host(host)
    return o is not None and h is not None and o[0] == h[0] and (o[1] or default) == (h[1] or default)


@dataclass(frozen=True)
class CallbackShape:
    """What a call of one Dash callback holds: its output ``{"id", "property"}`` and its inputs'
    and states' ``(id, property)`` pairs, in order."""

    output: tuple[str, str] | None
    inputs: tuple[tuple[str, str], ...]
    state: tuple[tuple[str, str], ...]


def callback_shapes(dash_app: Any) -> dict[str, CallbackShape]:
    """The :class:`CallbackShape` of each callback of a Dash app, by its output key
    (``"page.children"``: the ``output`` a callback request names)."""
    shapes = {}
    for key, cb in dash_app.callback_map.items():
        out = cb.get("output")
        output = (str(out.component_id), str(out.component_property)) if hasattr(out, "component_id") else None
        shapes[key] = CallbackShape(output, tuple((str(d["id"]), str(d["property"])) for d in cb.get("inputs", [])),
                                    tuple((str(d["id"]), str(d["property"])) for d in cb.get("state", [])))
    return shapes


class Refused(Exception):
    """A request refused before the app runs: its HTTP ``status`` line and one line of ``reason``."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def _props(items: Any, expected: tuple[tuple[str, str], ...], what: str) -> None:
    """Refused (400) unless ``items`` is a list of ``{"id", "property", "value"}`` objects naming
    exactly the ``expected`` (id, property) pairs, in order."""
    if not isinstance(items, list) or len(items) != len(expected):
        raise Refused("400 Bad Request", f"the callback's {what} are not its {len(expected)} declared ones")
    for item, (cid, prop) in zip(items, expected):
        if not isinstance(item, dict) or item.get("id") != cid or item.get("property") != prop:
            raise Refused("400 Bad Request", f"the callback's {what} are not its declared ones")


def check_callback(body: Any, shapes: Mapping[str, CallbackShape]) -> None:
    """Refused (400) unless ``body`` (a parsed callback request) calls one of ``shapes`` with its
    output, exactly its inputs and state, and ``changedPropIds`` (optional) a list of strings."""
    if not isinstance(body, dict) or not isinstance(body.get("output"), str) or body["output"] not in shapes:
        raise Refused("400 Bad Request", "the request names no callback of this dashboard")
    shape = shapes[body["output"]]
    out = body.get("outputs")
    if shape.output is not None and (not isinstance(out, dict)
                                     or (out.get("id"), out.get("property")) != shape.output):
        raise Refused("400 Bad Request", "the callback's outputs are not its declared one")
    _props(body.get("inputs"), shape.inputs, "inputs")
    _props(body.get("state", []), shape.state, "state")
    changed = body.get("changedPropIds", [])
    if not isinstance(changed, list) or not all(isinstance(c, str) for c in changed):
        raise Refused("400 Bad Request", "changedPropIds is not a list of strings")


def read_post(environ: dict, callback_path: str, shapes: Mapping[str, CallbackShape]) -> bytes:
    """The body of a ``POST`` that passes every check of the module docstring (read from
    ``wsgi.input``); :class:`Refused` otherwise."""
    origin = environ.get("HTTP_ORIGIN")
    if not same_origin(origin, environ.get("HTTP_HOST")):
        shown = repr(origin[:100]) if origin else "(none)"
        raise Refused("403 Forbidden", f"a POST needs this page's own Origin, not {shown} (cross-site request)")
    media = (environ.get("CONTENT_TYPE") or "").split(";")[0].strip(" \t").lower()
    if media != "application/json":
        raise Refused("415 Unsupported Media Type", "a POST body must be application/json")
    length = environ.get("CONTENT_LENGTH")
    if environ.get("HTTP_TRANSFER_ENCODING") or length is None or length == "":
        raise Refused("411 Length Required", "a POST needs a Content-Length (no chunked body)")
    if not _LENGTH.fullmatch(length.strip(" \t")):
        raise Refused("400 Bad Request", f"Content-Length {length[:40]!r} is not a number of bytes")
    n = int(length)
    if n > MAX_BODY_BYTES:
        raise Refused("413 Content Too Large", f"a POST body is at most {MAX_BODY_BYTES} bytes")
    data = environ["wsgi.input"].read(n) if n else b""
    if len(data) != n:
        raise Refused("400 Bad Request", "the body is shorter than its Content-Length")
    try:
        body = loads(data.decode("utf-8"), "request body")
    except (UnicodeDecodeError, ValueError):
        raise Refused("400 Bad Request", "the body is not JSON text") from None
    if environ.get("PATH_INFO") == callback_path:
        check_callback(body, shapes)
    return data


class PostCheck:
    """WSGI middleware: passes every request but ``POST`` to ``app`` as it is; a ``POST`` only
    when :func:`read_post` accepts it (its body then handed on, already read), otherwise its
    ``4xx`` with one line of plain text, and ``app`` is not called.  ``callback_path``: the path of
    Dash's callback endpoint; ``shapes``: :func:`callback_shapes` of the app."""

    def __init__(self, app: Callable[..., Any], callback_path: str, shapes: Mapping[str, CallbackShape]) -> None:
        self.app, self.callback_path, self.shapes = app, callback_path, dict(shapes)

    def __call__(self, environ: dict, start_response: Callable[..., Any]) -> Any:
        if environ.get("REQUEST_METHOD") != "POST":
            return self.app(environ, start_response)
        try:
            data = read_post(environ, self.callback_path, self.shapes)
        except Refused as r:
            return refuse(start_response, r.status, r.reason)
        environ["wsgi.input"] = io.BytesIO(data)
        environ["CONTENT_LENGTH"] = str(len(data))
        environ.pop("HTTP_TRANSFER_ENCODING", None)
        environ.pop("wsgi.input_terminated", None)
        return self.app(environ, start_response)


def refuse(start_response: Callable[..., Any], status: str, reason: str) -> list[bytes]:
    """Answer ``status`` with one line of plain text: ``tunedb dashboard: refused: <reason>``."""
    body = f"tunedb dashboard: refused: {reason}\n".encode("utf-8", "replace")
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
    return [body]
