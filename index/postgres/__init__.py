"""A record store in a PostgreSQL database (psycopg 3): ``tunedb.open("postgresql://user@host/db")``.

``store`` holds :class:`~tunedb.index.postgres.store.PostgresStore`, ``schema`` the SQL schema as
numbered migrations.  Needs the ``postgres`` extra (``pip install 'tunedb[postgres]'``); psycopg
is imported only when a store is opened.  See docs/postgres.md.
"""

from __future__ import annotations

from tunedb.index.support.lazy import lazy_getattr

_LAZY = {
    "PostgresStore": ("tunedb.index.postgres.store", "PostgresStore"),
    "migrate": ("tunedb.index.postgres.migrations", "migrate"),
    "CURRENT_VERSION": ("tunedb.index.postgres.migrations", "CURRENT_VERSION"),
}

__all__ = ["PostgresStore", "migrate", "CURRENT_VERSION"]

__getattr__ = lazy_getattr("tunedb.index.postgres", _LAZY, globals())
