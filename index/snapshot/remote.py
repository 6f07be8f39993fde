"""Fetching a published snapshot over HTTP(S), block by verified block, through a local cache.

:class:`Remote` is one snapshot URL and its cache directory::

    <cache>/manifest.json  manifest.etag        the last manifest fetched and verified (revalidated
                                                with If-None-Match on every open)
    <cache>/blocks/<sha256 of the file>/<i>     verified blocks of content-addressed files
                                                (never revalidated: their names are hashes)

A block is fetched with an HTTP Range request (contiguous missing blocks in one request),
checked against the manifest's sha256 of that block, written to a temp file and renamed into
the cache only then: a tampered, truncated or half-downloaded file is refused (one line,
:class:`~tunedb.index.snapshot.format.SnapshotError`) and never cached.  A server that ignores
Range (answers 200 with the whole file) is detected once, said once (a warning) and from then
on asked for whole files, each verified as a whole and block by block.  When the server cannot
be reached at open, the cached manifest answers and :attr:`Remote.offline` is set (a warning
says so); blocks not in the cache then fail with one line.

Hostile servers.  The server (or anyone on the network path of an ``http://`` URL) is not
trusted, and neither is what it serves:

* Every request is for ``<base><name>`` with ``name`` matching ``format.SAFE_NAME`` (the
  manifest or a content-addressed file named by its validated hash), so no request leaves the
  snapshot's URL prefix (no ``..``, ``%2e``, ``\\``, NUL, absolute path or scheme can get in).
  Redirects are refused, not followed (one line naming the status and the ``Location``): a
  snapshot URL is given as the final one.
* Every cache path is ``blocks/<validated 64-hex sha256>/<int>`` or a fixed name.
* Bounded time: each request must complete within ``deadline`` seconds (default
  :data:`DEFAULT_DEADLINE`, env ``TUNEDB_HTTP_DEADLINE``), body included -- the socket timeout
  shrinks to what is left, so a server that drips one byte at a time is cut at the deadline --
  and the requests of one handle may wait on the network ``total_deadline`` seconds in all
  (default :data:`DEFAULT_TOTAL_DEADLINE`, env ``TUNEDB_HTTP_TOTAL_DEADLINE``; ``math.inf``
  for none: a long-lived service that keeps one handle open should pass it), so one command
  ends.  A breach counts as unreachable (:attr:`Remote.offline`).
* Bounded size: bodies are read streaming, counting bytes; the manifest is at most
  ``max_manifest_bytes`` (default ``format.MAX_MANIFEST_BYTES``, env
  ``TUNEDB_SNAPSHOT_MAX_MANIFEST``), any other answer at most the byte range asked for (the
  file's validated size when the server ignores Range); an announced ``Content-Length`` over
  the limit is refused before the body is read, and reading stops as soon as the body exceeds
  it.  Compressed answers are not asked for (``Accept-Encoding: identity``) and are refused.
  One request asks for at most :data:`MAX_REQUEST_BYTES` (longer runs of blocks are split).
* An error status is refused without reading its body.

Each breach is one :class:`~tunedb.index.snapshot.format.SnapshotError` line.
"""

from __future__ import annotations

import io
import os
import re
import threading
import time
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tunedb.index.snapshot.format import (
    MANIFEST,
    MAX_MANIFEST_BYTES,
    OLD_SIGNATURE_FILE,
    SAFE_NAME,
    SnapshotError,
    is_sha256,
    sha256,
)
from tunedb.index.support.fsutil import atomic_write_bytes, check_no_links
from tunedb.index.support.redact import mask_url

DEFAULT_TIMEOUT = (5.0, 30.0)  # (connect, read) seconds: the longest wait for a connection, for one read
#: seconds one request may take, body included (env ``TUNEDB_HTTP_DEADLINE``)
DEFAULT_DEADLINE = 60.0
#: seconds the requests of one handle may take in all (env ``TUNEDB_HTTP_TOTAL_DEADLINE``)
DEFAULT_TOTAL_DEADLINE = 600.0
#: the most bytes one Range request asks for (a longer run of blocks is split)
MAX_REQUEST_BYTES = 64 << 20
_CHUNK = 1 << 16
_ETAG = re.compile(r'(?:W/)?"[\x21\x23-\x7e]{0,200}"')


class SnapshotWarning(UserWarning):
    """Something a reader of a snapshot should know (offline, no Range support)."""


def _short(e: BaseException) -> str:
    """One short line for a requests exception (its text nests the whole retry story)."""
    text = str(e)
    m = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text)
    if m:
        return m.group(1).strip().rstrip(".")
    for needle, say in (("RemoteDisconnected", "the server closed the connection"),
                        ("Connection aborted", "the connection was aborted"),
                        ("IncompleteRead", "the server sent a truncated response"),
                        ("Read timed out", "read timed out"), ("timed out", "timed out"),
                        ("ConnectTimeout", "connection timed out"),
                        ("Connection refused", "connection refused"), ("Connection reset", "connection reset")):
        if needle in text:
            return say
    first = text.strip().splitlines()[0] if text.strip() else type(e).__name__
    return first[:160]


def _env_float(name: str, default: float) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name}={text!r}: not a number of seconds") from None
    if not value > 0:
        raise ValueError(f"{name}={text!r}: must be more than 0 seconds")
    return value


def _positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{what} must be a number of seconds above 0, not {value!r}")
    return float(value)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` as ``path`` (its directory made if missing) durably, all or nothing:
    ``tunedb.index.support.fsutil.atomic_write_bytes``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, data)


class _TooLarge(SnapshotError):
    """An answer longer than its limit."""


class _Answer:
    """An HTTP answer: status, reason, headers and the body read (within its limit)."""

    def __init__(self, status: int, reason: str, headers: Any, body: bytes) -> None:
        self.status_code, self.reason, self.headers, self.body = status, reason, headers, body


class Remote:
    """One snapshot URL (``base``, ending in ``/``) and its cache directory (see the module
    docstring).  ``timeout``: (connect, read) seconds; ``deadline``: seconds per request;
    ``total_deadline``: seconds of network time for this handle (``math.inf``: no limit);
    ``max_manifest_bytes``: the largest manifest read.  ``None`` takes the environment's value
    or the default.  ``ValueError`` for a bad option; SnapshotError for a base URL that is not
    ``http(s)://host/path/`` (no query, fragment or credentials)."""

    def __init__(self, base: str, cache: Path, *, timeout: Any = DEFAULT_TIMEOUT, deadline: float | None = None,
                 total_deadline: float | None = None, max_manifest_bytes: int | None = None) -> None:
        import requests

        self.base = base if base.endswith("/") else base + "/"
        parts = urlsplit(self.base)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment \
                or "@" in parts.netloc or any(c in self.base for c in "\x00\\\r\n\t "):
            raise SnapshotError(f"{mask_url(self.base[:200])!r} is not a snapshot URL (http(s)://host/path/, no "
                                f"query, fragment or credentials)")
        self.cache = Path(cache)
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
            timeout = (float(timeout), float(timeout))
        if not (isinstance(timeout, tuple) and len(timeout) == 2):
            raise ValueError(f"timeout must be seconds or (connect, read) seconds, not {timeout!r}")
        self.timeout = (_positive(timeout[0], "timeout"), _positive(timeout[1], "timeout"))
        self.deadline = _positive(deadline, "deadline") if deadline is not None else \
            _env_float("TUNEDB_HTTP_DEADLINE", DEFAULT_DEADLINE)
        self.total_deadline = _positive(total_deadline, "total_deadline") if total_deadline is not None else \
            _env_float("TUNEDB_HTTP_TOTAL_DEADLINE", DEFAULT_TOTAL_DEADLINE)
        if max_manifest_bytes is None:
            max_manifest_bytes = int(_env_float("TUNEDB_SNAPSHOT_MAX_MANIFEST", MAX_MANIFEST_BYTES))
        if isinstance(max_manifest_bytes, bool) or not isinstance(max_manifest_bytes, int) or max_manifest_bytes < 1:
            raise ValueError(f"max_manifest_bytes must be a positive number of bytes, not {max_manifest_bytes!r}")
        self.max_manifest_bytes = max_manifest_bytes
        self.session = requests.Session()
        self.session.headers["User-Agent"] = "tunedb-snapshot-reader"
        self.session.headers["Accept-Encoding"] = "identity"
        self.offline = False
        self.range_ignored = False
        self.bytes_fetched = 0
        self.requests = 0
        self.network_seconds = 0.0
        self._etag: str | None = None
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ HTTP
    def _get(self, name: str, headers: dict | None, limits: dict[int, int]) -> _Answer:
        """GET ``<base><name>`` (``name`` a :data:`~tunedb.index.snapshot.format.SAFE_NAME`)
        within the deadlines, reading at most ``limits[status]`` body bytes (no body for any
        other status).  SnapshotError (one line) for a refused name, a redirect, a breach, a
        network error."""
        import http.client

        import requests
        import urllib3

        if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):
            raise SnapshotError(f"{self.base}: refused to request {name!r:.80} (not a snapshot file name)")
        url = self.base + name
        left = self.total_deadline - self.network_seconds
        if left <= 0:
            self.offline = True
            raise SnapshotError(f"cannot fetch {url}: this handle's network time ({self.total_deadline:g} s, "
                                f"TUNEDB_HTTP_TOTAL_DEADLINE) is spent: refused")
        budget = min(self.deadline, left)
        t0 = time.monotonic()
        end = t0 + budget
        try:
            r = self.session.get(url, headers=headers or {}, stream=True, allow_redirects=False,
                                 timeout=(min(self.timeout[0], budget), min(self.timeout[1], budget)))
            try:
                self.requests += 1
                if 300 <= r.status_code < 400 and r.status_code != 304:
                    where = r.headers.get("Location", "")
                    raise SnapshotError(f"{url}: HTTP {r.status_code} redirect to {where!r:.120}: refused (a "
                                        f"snapshot is read without following redirects: give its final URL)")
                limit = limits.get(r.status_code)
                body = b"" if limit is None else self._read(r, url, limit, end, budget)
                reason = "".join(c if c.isprintable() else "?" for c in str(r.reason or ""))[:80]
                return _Answer(r.status_code, reason, r.headers, body)
            finally:
                r.close()
        except SnapshotError:
            raise
        except (requests.RequestException, urllib3.exceptions.HTTPError, http.client.HTTPException, OSError,
                ValueError) as e:
            if time.monotonic() >= end - 0.05:
                self.offline = True
                raise SnapshotError(f"cannot fetch {url}: no complete answer within {budget:g} s "
                                    f"(TUNEDB_HTTP_DEADLINE): refused") from None
            if isinstance(e, (requests.ConnectionError, requests.Timeout, urllib3.exceptions.HTTPError,
                              http.client.HTTPException)) or \
                    (isinstance(e, OSError) and not isinstance(e, requests.RequestException)):
                self.offline = True
            raise SnapshotError(f"cannot fetch {url}: {_short(e)}") from None
        finally:
            self.network_seconds += time.monotonic() - t0

    def _read(self, r: Any, url: str, limit: int, end: float, budget: float) -> bytes:
        """The body of ``r``: at most ``limit`` bytes, before ``end`` (monotonic seconds)."""
        enc = r.headers.get("Content-Encoding", "identity").strip().lower()
        if enc not in ("", "identity"):
            raise SnapshotError(f"{url}: the server sent a {enc!r:.40}-encoded answer (identity was asked for): refused")
        announced = r.headers.get("Content-Length")
        if announced is not None:
            try:
                n = int(announced)
            except ValueError:
                n = -1
            if n < 0:
                raise SnapshotError(f"{url}: the server sent a malformed Content-Length: refused")
            if n > limit:
                raise _TooLarge(f"{url}: the server announces {n} bytes, more than the {limit} expected: refused")
        raw = r.raw
        sock = getattr(getattr(raw, "connection", None), "sock", None)
        buf = bytearray()
        while True:
            left = end - time.monotonic()
            if left <= 0:
                self.offline = True
                raise SnapshotError(f"cannot fetch {url}: no complete answer within {budget:g} s "
                                    f"(TUNEDB_HTTP_DEADLINE): refused")
            if sock is not None:
                sock.settimeout(max(0.01, min(self.timeout[1], left)))
            chunk = raw.read1(min(_CHUNK, limit + 1 - len(buf)), decode_content=False)
            if not chunk:
                if sock is not None:
                    sock.settimeout(self.timeout[1])
                raw.release_conn()  # (read to its end: the connection may serve the next request)
                return bytes(buf)
            buf += chunk
            self.bytes_fetched += len(chunk)
            if len(buf) > limit:
                raise _TooLarge(f"{url}: the server sent more than the {limit} bytes expected: refused")

    def _check_status(self, r: _Answer, name: str, ok: tuple[int, ...]) -> None:
        if r.status_code not in ok:
            why = {404: "not found (the snapshot lacks a file its manifest names)", 403: "forbidden"}.get(
                r.status_code, r.reason or "")
            raise SnapshotError(f"{self.base}{name}: HTTP {r.status_code} {why!s:.80}".rstrip())

    # ------------------------------------------------------------------ the manifest
    def manifest(self) -> bytes:
        """The manifest's bytes (a signed manifest carries its signature: one file, one request):
        revalidated with the server (If-None-Match), else -- server unreachable -- the cached
        copy with a warning and :attr:`offline` set.  Not cached here: the caller verifies it
        and calls :meth:`keep_manifest`.  SnapshotError for a manifest over
        :attr:`max_manifest_bytes`."""
        cached = self.cache / MANIFEST
        etag_f = self.cache / "manifest.etag"
        headers = {}
        if cached.exists() and etag_f.exists():
            etag = etag_f.read_text(errors="replace").strip()
            if _ETAG.fullmatch(etag):
                headers["If-None-Match"] = etag
        try:
            r = self._get(MANIFEST, headers, {200: self.max_manifest_bytes})
        except _TooLarge:
            raise SnapshotError(f"{self.base}{MANIFEST}: larger than {self.max_manifest_bytes} bytes "
                                f"(TUNEDB_SNAPSHOT_MAX_MANIFEST): refused") from None
        except SnapshotError as e:
            if not self.offline or not cached.exists():
                raise
            warnings.warn(f"offline: {self.base} cannot be reached ({str(e).rsplit(': ', 1)[-1]}); answering from "
                          f"the cached snapshot", SnapshotWarning, stacklevel=3)
            return cached.read_bytes()
        self.offline = False
        if r.status_code == 304 and cached.exists():
            return cached.read_bytes()
        if r.status_code == 404:
            raise SnapshotError(f"no tunedb snapshot at {self.base} (HTTP 404 for {MANIFEST})")
        self._check_status(r, MANIFEST, (200,))
        etag = r.headers.get("ETag")
        self._etag = etag if isinstance(etag, str) and _ETAG.fullmatch(etag) else None
        return r.body

    def keep_manifest(self, data: bytes) -> None:
        """Cache a verified manifest (and its ETag) for revalidation and offline use."""
        etag = self._etag
        (self.cache / OLD_SIGNATURE_FILE).unlink(missing_ok=True)
        if not ((self.cache / MANIFEST).exists() and (self.cache / MANIFEST).read_bytes() == data):
            atomic_write(self.cache / MANIFEST, data)
        elif not etag:
            return
        if etag:
            atomic_write(self.cache / "manifest.etag", etag.encode())
        else:
            (self.cache / "manifest.etag").unlink(missing_ok=True)

    # ------------------------------------------------------------------ blocks
    def _block_path(self, ref: dict, i: int) -> Path:
        digest = ref.get("sha256")
        if not is_sha256(digest) or type(i) is not int or i < 0:
            raise SnapshotError(f"{self.base}: refused a cache path for {digest!r:.80} block {i!r:.20}")
        path = self.cache / "blocks" / digest / str(i)
        check_no_links(self.cache, path)  # (a linked blocks/ would be read and written through)
        return path

    def _cached_block(self, ref: dict, i: int) -> bytes | None:
        p = self._block_path(ref, i)
        try:
            data = p.read_bytes()
        except OSError:
            return None
        if sha256(data) != ref["blocks"][i]:  # damaged in the cache: fetched again
            p.unlink(missing_ok=True)
            return None
        return data

    def blocks(self, ref: dict, block_size: int, first: int, last: int) -> list[bytes]:
        """Blocks ``first..last`` (inclusive) of the file ``ref`` (a FileRef that
        ``format.check_file_ref`` accepted), verified: from the cache, the missing ones fetched
        (contiguous runs in one Range request each, at most :data:`MAX_REQUEST_BYTES`)."""
        if not SAFE_NAME.fullmatch(str(ref.get("file"))) or not 0 <= first <= last < len(ref["blocks"]):
            raise SnapshotError(f"{self.base}: refused blocks {first}-{last} of {str(ref.get('file'))!r:.80}")
        with self._lock:
            out: dict[int, bytes] = {}
            missing = []
            for i in range(first, last + 1):
                b = self._cached_block(ref, i)
                if b is None:
                    missing.append(i)
                else:
                    out[i] = b
            for a, b in _runs(missing, max(1, MAX_REQUEST_BYTES // block_size)):
                out.update(self._fetch(ref, block_size, a, b))
            return [out[i] for i in range(first, last + 1)]

    def _fetch(self, ref: dict, block_size: int, a: int, b: int) -> dict[int, bytes]:
        name, size, n_blocks = ref["file"], ref["bytes"], len(ref["blocks"])
        if self.offline:
            raise SnapshotError(f"offline: {self.base}{name} is not in the cache ({self.base} cannot be reached)")
        start, end = a * block_size, min((b + 1) * block_size, size) - 1
        whole = self.range_ignored or (a == 0 and b == n_blocks - 1)
        end = max(end, start)  # (an empty file: one empty block)
        r = self._get(name, None if whole or size == 0 else {"Range": f"bytes={start}-{end}"},
                      {200: size, 206: end - start + 1})
        self._check_status(r, name, (200, 206))
        body = r.body
        if r.status_code == 200:
            if not whole and size:
                self.range_ignored = True
                warnings.warn(f"{self.base} ignores HTTP Range requests: downloading whole files", SnapshotWarning,
                              stacklevel=4)
            if len(body) != size or sha256(body) != ref["sha256"]:
                raise SnapshotError(f"{self.base}{name}: {len(body)} bytes do not match the manifest's sha256 "
                                    f"({size} bytes): refused (changed behind the manifest, or truncated)")
            a, b, start = 0, n_blocks - 1, 0
        elif len(body) != end - start + 1:
            raise SnapshotError(f"{self.base}{name}: got {len(body)} bytes for range {start}-{end}: refused "
                                f"(truncated, or the file changed behind the manifest)")
        got: dict[int, bytes] = {}
        for i in range(a, b + 1):
            blk = body[i * block_size - start:(i + 1) * block_size - start]
            if sha256(blk) != ref["blocks"][i]:
                raise SnapshotError(f"{self.base}{name}: block {i} does not match the manifest's sha256: refused "
                                    f"(the file changed behind the manifest)")
            got[i] = blk
        for i, blk in got.items():  # only verified data reaches the cache
            atomic_write(self._block_path(ref, i), blk)
        return got

    def read_all(self, ref: dict, block_size: int) -> bytes:
        """The whole file ``ref``, verified."""
        data = b"".join(self.blocks(ref, block_size, 0, len(ref["blocks"]) - 1))
        if sha256(data) != ref["sha256"]:
            raise SnapshotError(f"{self.base}{ref['file']}: does not match the manifest's sha256: refused")
        return data

    def open(self, ref: dict, block_size: int) -> BlockFile:
        """A seekable file object over ``ref`` (blocks fetched on first use)."""
        return BlockFile(self, ref, block_size)

    def close(self) -> None:
        self.session.close()


def _runs(idx: list[int], longest: int) -> list[tuple[int, int]]:
    """Runs ``(first, last)`` of consecutive ``idx``, each at most ``longest`` long."""
    out: list[tuple[int, int]] = []
    for i in idx:
        if out and out[-1][1] == i - 1 and i - out[-1][0] < longest:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


class BlockFile(io.RawIOBase):
    """A read-only, seekable file object over a content-addressed snapshot file, served from
    verified blocks (fetched on first use): what pyarrow reads Parquet footers and row groups
    through."""

    def __init__(self, remote: Remote, ref: dict, block_size: int) -> None:
        super().__init__()
        self.remote, self.ref, self.bs = remote, ref, block_size
        self.size = int(ref["bytes"])
        self.pos = 0
        self._blocks: dict[int, bytes] = {}

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, b: Any) -> int:
        n = min(len(b), self.size - self.pos)
        if n <= 0:
            return 0
        first, last = self.pos // self.bs, (self.pos + n - 1) // self.bs
        need = [i for i in range(first, last + 1) if i not in self._blocks]
        if need:
            got = self.remote.blocks(self.ref, self.bs, need[0], need[-1])
            self._blocks.update(zip(range(need[0], need[-1] + 1), got))
        data = b"".join(self._blocks[i] for i in range(first, last + 1))
        off = self.pos - first * self.bs
        mv = memoryview(b)
        mv[:n] = data[off:off + n]
        self.pos += n
        return n


__all__ = ["Remote", "BlockFile", "SnapshotWarning", "DEFAULT_TIMEOUT", "DEFAULT_DEADLINE",
           "DEFAULT_TOTAL_DEADLINE", "MAX_REQUEST_BYTES", "atomic_write"]
