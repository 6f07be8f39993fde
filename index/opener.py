"""Where a record store lives, and opening it: ``open_store("tunedb-data")`` (a Parquet
directory, created when missing), ``open_store("memory:")`` (an in-memory store) or
``open_store("postgresql://user@host/db")`` (a PostgreSQL database; the ``postgres`` extra).

:func:`parse_location` is the one reading of a location text: the opener, the command line and
the dashboard all ask it what a ``--db`` value names (see :class:`Location` for the kinds)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from tunedb.index.contract.base import RecordStore
from tunedb.index.support.redact import mask_url

PARQUET = "parquet"
"""A Parquet directory on the local (or a mounted) file system."""
REMOTE = "remote"
"""A directory behind a URL of another scheme (``s3://``, ``gs://``, ...): not opened."""
SNAPSHOT = "snapshot"
"""A published snapshot behind an ``http://`` or ``https://`` URL (``tunedb publish``): read-only."""
POSTGRES = "postgres"
"""A PostgreSQL database (``postgresql://`` or ``postgres://``)."""
MEMORY = "memory"
"""A new in-memory store (``memory:`` or ``memory:NAME``; every open is a new, empty store)."""

KINDS = (PARQUET, REMOTE, POSTGRES, MEMORY, SNAPSHOT)

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")  # two characters at least: ``C://`` is a drive


@dataclass(frozen=True)
class Location:
    """What a location text names.

    ``kind`` is one of :data:`KINDS`:

    * :data:`PARQUET` -- a plain path, or a ``file://`` URL (``file:///abs/dir``,
      ``file://localhost/abs/dir``); ``path`` is the directory on this machine.
    * :data:`REMOTE` -- any other ``scheme://`` URL, e.g. ``s3://bucket/db``.  It names a
      directory tunedb does not open: a Parquet store needs a POSIX file system (atomic
      ``rename`` of finished files, ``fsync``, lock files and a consistent directory listing
      are what keep concurrent writers and crashed ones safe), which object stores do not
      give.  Mount it (s3fs, gcsfuse) and pass the mount path, or ``tunedb copy`` the
      records.  Reading ``s3://x`` as a local path would silently create ``./s3:/x``; so
      every reader -- the opener, the CLI's checks, the dashboard -- calls it a remote
      directory, and opening it is one ``ValueError`` line (:meth:`check_openable`).
    * :data:`SNAPSHOT` -- an ``http://`` or ``https://`` URL: a snapshot ``tunedb publish``
      wrote, served by a static web server; opened read-only
      (:class:`tunedb.index.snapshot.store.SnapshotStore`).
    * :data:`POSTGRES` -- a ``postgresql://`` or ``postgres://`` URL (``text``).
    * :data:`MEMORY` -- ``memory:`` or ``memory:NAME``; ``name`` is NAME.
    """

    text: str
    kind: str
    path: str | None = None
    name: str = ""

    def __repr__(self) -> str:
        """The fields, the text's password masked (:func:`~tunedb.index.support.redact.mask_url`)."""
        return f"Location(text={mask_url(self.text)!r}, kind={self.kind!r}, path={self.path!r}, name={self.name!r})"

    @property
    def shown(self) -> str:
        """The text as it may be printed or logged: any password in it masked
        (:func:`~tunedb.index.support.redact.mask_url`)."""
        return mask_url(self.text)

    @property
    def is_local_directory(self) -> bool:
        """Whether the store is a directory on this machine (it can be checked with ``os.path``)."""
        return self.kind == PARQUET

    @property
    def identity(self) -> str:
        """What two locations share when they are the same store: a local directory's real
        path, else the text.  (Two ``memory:`` locations are never the same store.)"""
        if self.kind == PARQUET and self.path is not None:
            return os.path.realpath(self.path)
        return self.text

    def same_store_as(self, other: Location) -> bool:
        """Whether ``self`` and ``other`` name one store (never for in-memory stores)."""
        return self.kind != MEMORY and other.kind != MEMORY and self.identity == other.identity

    def exists(self) -> bool | None:
        """Whether a local directory exists; ``None`` for stores this cannot tell without opening
        them (a database server, a remote directory); ``False`` for ``memory:`` (always new)."""
        if self.kind == PARQUET:
            return os.path.isdir(self.path or "")
        return False if self.kind == MEMORY else None

    def check_openable(self) -> None:
        """``ValueError`` (one line) when tunedb cannot open a store here at all (a remote
        directory, see the class docstring); nothing otherwise."""
        if self.kind == REMOTE:
            raise ValueError(f"{self.shown} is a remote directory: tunedb opens Parquet directories on a "
                             f"local or mounted file system only (mount it, or tunedb copy its records)")


def parse_location(location: str | os.PathLike | Location) -> Location:
    """The :class:`Location` that ``location`` (a path, a URL or ``memory:...``) names.
    ``ValueError`` (one line) for an empty text or a ``file://`` URL of another host."""
    if isinstance(location, Location):
        return location
    text = os.fspath(location)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if not text:
        raise ValueError("empty store location")
    if text.startswith("memory:"):
        return Location(text, MEMORY, name=text[len("memory:"):])
    m = _SCHEME.match(text)
    if m is None:
        return Location(text, PARQUET, path=text)
    scheme = m.group(1).lower()
    if scheme in ("postgresql", "postgres"):
        return Location(text, POSTGRES)
    if scheme in ("http", "https"):
        return Location(text, SNAPSHOT)
    if scheme == "file":
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"{mask_url(text)} names a file on host {mask_url(parts.netloc)}: a file:// location must be on this machine")
        return Location(text, PARQUET, path=unquote(parts.path) or "/")
    return Location(text, REMOTE)


def open_store(location: str | os.PathLike | Location, *, create: bool = True, **options: Any) -> RecordStore:
    """The store at ``location`` (read by :func:`parse_location`): ``memory:`` or
    ``memory:NAME`` is a new in-memory store; ``postgresql://...`` or ``postgres://...`` a
    PostgreSQL database (its schema created or migrated on open; ``ValueError`` with one line
    when psycopg is missing -- install ``tunedb[postgres]`` -- or the URL is malformed, ``OSError``
    with one line when the server cannot be reached; no error text holds the URL's password);
    ``http(s)://...`` a published snapshot, read-only (``OSError`` with one line when it cannot
    be read; options ``cache_dir``, ``publisher_key``, ``timeout``, ``relabel``);
    a path or ``file://`` URL a Parquet directory (created when missing and ``create``); another
    URL (``s3://...``) a remote directory, refused with one ``ValueError`` line.  ``ValueError``
    with one line when the location cannot be a store (e.g. a non-empty directory that is not
    one), ``FileNotFoundError`` when a directory is missing and not ``create``.  ``options`` go
    to the backend; ``read_only=True`` (Parquet and PostgreSQL) opens a handle that writes
    nothing (a Parquet directory must then exist and hold a tunedb marker)."""
    loc = parse_location(location)
    loc.check_openable()
    if loc.kind == POSTGRES:
        from tunedb.index.postgres.store import PostgresStore

        return PostgresStore(loc.text, **options)
    if loc.kind == SNAPSHOT:
        from tunedb.index.snapshot.store import SnapshotStore

        options.pop("read_only", None)
        return SnapshotStore(loc.text, **options)
    if loc.kind == MEMORY:
        from tunedb.index.memory.store import MemoryStore

        return MemoryStore(loc.name, **options)
    from tunedb.index.parquet.store import ParquetStore

    return ParquetStore.open(loc.path or loc.text, create=create, **options)


def open_error_line(error: BaseException) -> str:
    """The one line that says why :func:`open_store` failed with ``error``: an ``OSError``'s
    ``strerror`` when it has one, else the first line of its text (what the command line and
    the dashboard print after the location), any password in it masked
    (:func:`~tunedb.index.support.redact.mask_url`)."""
    text = (error.strerror if isinstance(error, OSError) and error.strerror else str(error)).strip().splitlines()
    return mask_url(text[0]) if text else type(error).__name__


__all__ = ["KINDS", "MEMORY", "PARQUET", "POSTGRES", "REMOTE", "SNAPSHOT", "Location", "open_error_line", "open_store",
           "parse_location"]
