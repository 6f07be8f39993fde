"""Rollback protection: the highest snapshot ``version`` a reader has accepted, per publisher key
and URL, kept in a small local state file (never in a snapshot's cache directory, whose content
the server's answers decide; by default ``$TUNEDB_CACHE_DIR/snapshot-versions.json``, i.e.
``~/.cache/tunedb/snapshot-versions.json``)::

    {"<key id> <url>": <highest version accepted>, ...}

``<key id>`` is the publisher key's fingerprint (``signing.key_fingerprint``) or ``unsigned``.
The file is read and replaced (temp file and rename) under an advisory lock, so concurrent
readers never lower a version.  A manifest whose ``version`` is lower than the one remembered
is refused (one :class:`~tunedb.index.snapshot.format.SnapshotError` line): a server (or a
network attacker, or a stale mirror) cannot serve an older snapshot -- even one signed with the
right key -- to a reader that has seen a newer one, unless the reader pins that version on
purpose (``pin_version``).  Deleting the file forgets what was seen.
"""

from __future__ import annotations

import json
from pathlib import Path

from tunedb.index.snapshot.format import MANIFEST, SnapshotError
from tunedb.index.support.cachedir import cache_root
from tunedb.index.support.fsutil import atomic_write_bytes, file_lock

STATE_FILE = "snapshot-versions.json"


def default_state_file() -> Path:
    """``$TUNEDB_CACHE_DIR/snapshot-versions.json`` (default ``~/.cache/tunedb/...``)."""
    return cache_root() / STATE_FILE


def _load(path: Path) -> dict[str, int]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        doc = None
    if not isinstance(doc, dict) or not all(isinstance(v, int) for v in doc.values()):
        raise SnapshotError(f"{path} is not a snapshot version state file (remove it to forget the versions read)")
    return doc


def seen_version(state_file: Path, key_id: str, url: str) -> int | None:
    """The highest version accepted from ``url`` under ``key_id``, or None."""
    return _load(Path(state_file)).get(f"{key_id} {url}")


def accept_version(state_file: Path, key_id: str, url: str, version: int, pin_version: int | None = None) -> None:
    """Remember ``version`` of the snapshot at ``url`` (publisher ``key_id``), or SnapshotError
    (one line) when it is older than the highest one accepted before and is not ``pin_version``.
    A pinned older version is read but not remembered (the highest stays)."""
    path = Path(state_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = f"{key_id} {url}"
    with file_lock(path.with_name(path.name + ".lock")):
        state = _load(path)
        seen = state.get(key)
        if seen is not None and version < seen:
            if version == pin_version:
                return
            raise SnapshotError(f"{url}{MANIFEST}: snapshot version {version} is older than version {seen} already "
                                f"read from {url}: refused (a rollback); open it with pin_version={version} "
                                f"(CLI: --pin-version {version}) to read it on purpose")
        if seen is None or version > seen:
            state[key] = version
            atomic_write_bytes(path, json.dumps(state, sort_keys=True, indent=1).encode())


__all__ = ["STATE_FILE", "default_state_file", "seen_version", "accept_version"]
