"""Opening a record store by where it lives: ``open_store("tunedb-data")`` (a Parquet
directory, created when missing) or ``open_store("memory:")`` (an in-memory store)."""

from __future__ import annotations

import os
from typing import Any

from tunedb.index.base import RecordStore


def open_store(location: str | os.PathLike, *, create: bool = True, **options: Any) -> RecordStore:
    """The store at ``location``: ``memory:`` or ``memory:NAME`` is a new in-memory store; anything
    else is a Parquet directory (created when missing and ``create``).  ``ValueError`` with one
    line when the location cannot be a store (e.g. a non-empty directory that is not one)."""
    text = os.fspath(location)
    if isinstance(text, str) and text.startswith("memory:"):
        from tunedb.index.memory import MemoryStore

        return MemoryStore(text[len("memory:"):], **options)
    from tunedb.index.parquet.store import TuningDB

    return TuningDB.open(text, create=create, **options)


__all__ = ["open_store"]
