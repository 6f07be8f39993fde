"""Rollback protection: the snapshot ``version`` a reader has accepted, per publisher key and URL,
kept in a small local state file (never in a snapshot's cache directory, whose content the
server's answers decide; by default ``$TUNEDB_CACHE_DIR/snapshot-versions.json``, i.e.
``~/.cache/tunedb/snapshot-versions.json``)::

    {"<key id> <url>": <version>, ...}

``<key id>`` is the publisher key's fingerprint (``signing.key_fingerprint``) or ``unsigned``.
The file is read and replaced (temp file and rename) under an advisory lock, so concurrent
readers never lower a signed version.

Signed snapshots (read with a publisher key): the highest version accepted is kept, and a
manifest whose ``version`` is lower is refused (one :class:`~tunedb.index.snapshot.format.SnapshotError`
line): a server (or a network attacker, or a stale mirror) cannot serve an older snapshot --
even one signed with the right key -- to a reader that has seen a newer one, unless the reader
pins that version on purpose (``pin_version``) or deletes the state file (which forgets every
version read).  Only the key's holder can raise a signed version.

Unsigned snapshots: anybody who can answer for the URL can write any ``version`` (a forged
manifest with version ``2**53`` would lock a reader out of every real one), so an unsigned
version never refuses anything.  The last unsigned version read is kept; one older than it
gives a :class:`~tunedb.index.snapshot.remote.SnapshotWarning` (a stale mirror, or a forged
manifest read before) and replaces it, so a forgery costs one warning, never access.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from tunedb.index.snapshot.format import MANIFEST, MAX_COUNT, SnapshotError
from tunedb.index.snapshot.remote import SnapshotWarning
from tunedb.index.support.cachedir import cache_root
from tunedb.index.support.fsutil import atomic_write_bytes, file_lock
from tunedb.index.support.jsontext import loads as json_loads

STATE_FILE = "snapshot-versions.json"
#: the key id of a snapshot read without a publisher key
UNSIGNED = "unsigned"


def default_state_file() -> Path:
    """``$TUNEDB_CACHE_DIR/snapshot-versions.json`` (default ``~/.cache/tunedb/...``)."""
    return cache_root() / STATE_FILE


def _load(path: Path) -> dict[str, int]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        doc = json_loads(data, str(path))
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not all(type(v) is int and 0 <= v <= MAX_COUNT for v in doc.values()):
        raise SnapshotError(f"{path} is not a snapshot version state file (remove it to forget the versions read)")
    return doc


def seen_version(state_file: str | os.PathLike, key_id: str, url: str) -> int | None:
    """The version remembered for ``url`` under ``key_id`` (the highest signed one accepted,
    or the last unsigned one read), or None."""
    return _load(Path(state_file)).get(f"{key_id} {url}")


def accept_version(state_file: str | os.PathLike, key_id: str, url: str, version: int,
                   pin_version: int | None = None) -> None:
    """Remember ``version`` of the snapshot at ``url`` (publisher ``key_id``, or
    :data:`UNSIGNED`).  Signed: SnapshotError (one line saying how to recover) when ``version``
    is older than the highest accepted before and is not ``pin_version``; a pinned older
    version is read but not remembered.  Unsigned: never refused; an older version than the one
    remembered gives one SnapshotWarning and is remembered instead."""
    path = Path(state_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = f"{key_id} {url}"
    with file_lock(path.with_name(path.name + ".lock")):
        state = _load(path)
        seen = state.get(key)
        if seen is not None and version < seen:
            if version == pin_version:
                return
            if key_id != UNSIGNED:
                raise SnapshotError(
                    f"{url}{MANIFEST}: snapshot version {version} is older than version {seen} already read from "
                    f"{url}: refused (a rollback); open it with pin_version={version} (CLI: --pin-version "
                    f"{version}) to read it on purpose, or delete {path} to forget the versions read")
            warnings.warn(f"{url}{MANIFEST}: unsigned snapshot version {version} is older than version {seen} read "
                          f"before (a stale mirror, or a forged manifest then); read all the same: only a signed "
                          f"snapshot (--publisher-key) is protected against a rollback", SnapshotWarning,
                          stacklevel=3)
        if seen != version:
            state[key] = version
            atomic_write_bytes(path, json.dumps(state, sort_keys=True, indent=1).encode())


__all__ = ["STATE_FILE", "UNSIGNED", "default_state_file", "seen_version", "accept_version"]
