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
"""

from __future__ import annotations

import io
import os
import re
import threading
import uuid
import warnings
from pathlib import Path
from typing import Any

from tunedb.index.snapshot.format import MANIFEST, OLD_SIGNATURE_FILE, SnapshotError, sha256

DEFAULT_TIMEOUT = (5.0, 30.0)  # (connect, read) seconds


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
                        ("Read timed out", "read timed out"), ("ConnectTimeout", "connection timed out"),
                        ("Connection refused", "connection refused"), ("Connection reset", "connection reset")):
        if needle in text:
            return say
    first = text.strip().splitlines()[0] if text.strip() else type(e).__name__
    return first[:160]


def atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"_tmp-{os.getpid()}-{uuid.uuid4().hex[:12]}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


class Remote:
    """One snapshot URL (``base``, ending in ``/``) and its cache directory (see the module docstring)."""

    def __init__(self, base: str, cache: Path, *, timeout: Any = DEFAULT_TIMEOUT) -> None:
        import requests

        self.base = base if base.endswith("/") else base + "/"
        self.cache = Path(cache)
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers["User-Agent"] = "tunedb-snapshot-reader"
        self.offline = False
        self.range_ignored = False
        self.bytes_fetched = 0
        self.requests = 0
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ HTTP
    def _get(self, name: str, headers: dict | None = None):
        import requests

        url = self.base + name
        try:
            r = self.session.get(url, headers=headers or {}, timeout=self.timeout)
            body = r.content
        except requests.RequestException as e:
            if isinstance(e, (requests.ConnectionError, requests.Timeout)):
                self.offline = True
            raise SnapshotError(f"cannot fetch {url}: {_short(e)}") from None
        self.requests += 1
        self.bytes_fetched += len(body)
        return r, body

    def _check_status(self, r: Any, name: str, ok: tuple[int, ...]) -> None:
        if r.status_code not in ok:
            why = {404: "not found (the snapshot lacks a file its manifest names)", 403: "forbidden"}.get(
                r.status_code, r.reason or "")
            raise SnapshotError(f"{self.base}{name}: HTTP {r.status_code} {why}".rstrip())

    # ------------------------------------------------------------------ the manifest
    def manifest(self) -> bytes:
        """The manifest's bytes (a signed manifest carries its signature: one file, one request):
        revalidated with the server (If-None-Match), else -- server unreachable -- the cached
        copy with a warning and :attr:`offline` set.  Not cached here: the caller verifies it
        and calls :meth:`keep_manifest`."""
        cached = self.cache / MANIFEST
        etag_f = self.cache / "manifest.etag"
        headers = {}
        if cached.exists() and etag_f.exists():
            headers["If-None-Match"] = etag_f.read_text().strip()
        try:
            r, body = self._get(MANIFEST, headers)
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
        self._etag = r.headers.get("ETag")
        return body

    def keep_manifest(self, data: bytes) -> None:
        """Cache a verified manifest (and its ETag) for revalidation and offline use."""
        etag = getattr(self, "_etag", None)
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
        return self.cache / "blocks" / ref["sha256"] / str(i)

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
        """Blocks ``first..last`` (inclusive) of the file ``ref``, verified: from the cache, the
        missing ones fetched (contiguous runs in one Range request each)."""
        with self._lock:
            out: dict[int, bytes] = {}
            missing = []
            for i in range(first, last + 1):
                b = self._cached_block(ref, i)
                if b is None:
                    missing.append(i)
                else:
                    out[i] = b
            for a, b in _runs(missing):
                out.update(self._fetch(ref, block_size, a, b))
            return [out[i] for i in range(first, last + 1)]

    def _fetch(self, ref: dict, block_size: int, a: int, b: int) -> dict[int, bytes]:
        name, size, n_blocks = ref["file"], ref["bytes"], len(ref["blocks"])
        if self.offline:
            raise SnapshotError(f"offline: {self.base}{name} is not in the cache ({self.base} cannot be reached)")
        start, end = a * block_size, min((b + 1) * block_size, size) - 1
        whole = self.range_ignored or (a == 0 and b == n_blocks - 1)
        r, body = self._get(name, None if whole else {"Range": f"bytes={start}-{end}"})
        self._check_status(r, name, (200, 206))
        if r.status_code == 200:
            if not whole:
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
        return BlockFile(self, ref, block_size)

    def close(self) -> None:
        self.session.close()


def _runs(idx: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for i in idx:
        if out and out[-1][1] == i - 1:
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


__all__ = ["Remote", "BlockFile", "SnapshotWarning", "DEFAULT_TIMEOUT"]
