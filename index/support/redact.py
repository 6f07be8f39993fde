"""Masking secrets in text that is shown: passwords in URLs and in libpq connection strings.

:func:`mask_url` is the one masking helper.  The stores apply it where they format a location or
a driver's error (``PostgresStore.location``, its errors, :func:`tunedb.index.opener.open_error_line`),
and the command line applies it again to every line it prints (a last line of defence: a message
built from a raw ``--db`` value is masked there).  :func:`url_secrets` names the password of one
URL, for error texts that quote it without the URL around it (psycopg's ``invalid percent-encoded
token: "S3c%ZZret"``).

Contract of :func:`mask_url`: the result holds none of the passwords it recognises, is otherwise
the text unchanged (a text without a secret comes back equal), and masking twice equals masking
once.  It recognises

* the password of a URL's user information, any scheme: ``postgresql://user:PASSWORD@host`` ->
  ``postgresql://user:***@host`` (anywhere in the text, several URLs included; the password ends
  at the last ``@`` before a ``/``, whitespace or the end);
* ``password=VALUE`` (any case, also ``PGPASSWORD=`` / ``sslpassword=``), as libpq conninfo
  strings and URL query strings write it: ``password=***`` (a quoted value ``'...'`` as a whole;
  an unquoted one up to whitespace, ``&``, ``,``, ``;`` or ``"``: JSON text stays JSON);
* every literal occurrence of the ``secrets`` passed in (of three characters or more: a shorter
  one would mask letters of ordinary words, and a URL's or conninfo's own are masked anyway).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote

MASK = "***"
"""What a password is replaced with."""

#: ``scheme://user:password@``: the password runs to the last ``@`` before ``/``, whitespace or the end
_URL_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/@:\"]*):(?P<password>[^\s/\"]*)@")
#: ``password=value`` / ``PGPASSWORD=value`` / ``sslpassword = 'quoted \' value'``
_KEY_VALUE = re.compile(r"(?i)(?P<head>\b\w*password\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'?|[^\s&,;\"]*)")
#: the shortest secret masked by its literal occurrences (see the module docstring)
MIN_LITERAL = 3


def mask_url(text: object, secrets: Iterable[str] = ()) -> str:
    """``str(text)`` with every password it holds replaced by ``***`` (see the module docstring
    for what is recognised).  ``secrets``: further texts to mask wherever they occur (each of
    :data:`MIN_LITERAL` characters or more; shorter ones are ignored), e.g. :func:`url_secrets`
    of the URL an error is about.  Never raises for a ``str``; idempotent."""
    out = str(text)
    for secret in sorted({s for s in secrets if s and len(s) >= MIN_LITERAL and s != MASK}, key=len, reverse=True):
        out = out.replace(secret, MASK)
    out = _URL_USERINFO.sub(lambda m: m.group("head") + ":" + (MASK if m.group("password") else "") + "@", out)
    return _KEY_VALUE.sub(lambda m: m.group("head") + (MASK if m.group("value") else ""), out)


def url_secrets(url: str) -> list[str]:
    """The password(s) ``url`` holds, as written and percent-decoded: its user information's
    password and the values of ``password=`` parameters; ``[]`` without one.  For
    :func:`mask_url`'s ``secrets``."""
    found: list[str] = []
    for m in _URL_USERINFO.finditer(url):
        found.append(m.group("password"))
    for m in _KEY_VALUE.finditer(url):
        value = m.group("value")
        found.append(value[1:-1] if len(value) >= 2 and value[0] == value[-1] == "'" else value)
    out: list[str] = []
    for s in found:
        for v in (s, unquote(s)):
            if v and v not in out:
                out.append(v)
    return out


__all__ = ["MASK", "MIN_LITERAL", "mask_url", "url_secrets"]
