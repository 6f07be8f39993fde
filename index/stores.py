"""Opening a record store by where it lives: ``open_store("tunedb-data")`` (a Parquet
directory, created when missing), ``open_store("memory:")`` (an in-memory store) or
``open_store("postgresql://user@host/db")`` (a PostgreSQL database; the ``postgres`` extra)."""

from __future__ import annotations

import os
from typing import Any

from tunedb.index.base import RecordStore


def open_store(location: str | os.PathLike, *, create: bool = True, **options: Any) -> RecordStore:
    """The store at ``location``: ``memory:`` or ``memory:NAME`` is a new in-memory store;
    ``postgresql://...`` or ``postgres://...`` a PostgreSQL database (its schema created or
    migrated on open; ``ValueError`` with one line when psycopg is missing -- install
    ``tunedb[postgres]`` -- or the server cannot be reached); anything else is a Parquet
    directory (created when missing and ``create``).  ``ValueError`` with one line when the
    location cannot be a store (e.g. a non-empty directory that is not one).  ``options`` go to
    the backend; ``read_only=True`` (Parquet and PostgreSQL) opens a handle that writes nothing."""
    text = os.fspath(location)
    if isinstance(text, str) and text.startswith(("postgresql://", "postgres://")):
        from tunedb.index.postgres.store import PostgresStore

        return PostgresStore(text, **options)
    if isinstance(text, str) and text.startswith("memory:"):
        from tunedb.index.memory import MemoryStore

        return MemoryStore(text[len("memory:"):], **options)
    from tunedb.index.parquet.store import ParquetStore

    return ParquetStore.open(text, create=create, **options)


__all__ = ["open_store"]
