"""The SQL schema of a PostgreSQL record store, as numbered migrations that are code.

``MIGRATIONS[i]`` brings a database from version ``i`` to ``i + 1``.  The applied versions are
rows of ``tunedb_schema`` (version, applied_at); the database's version is their maximum (0 for
a database tunedb never touched).  :func:`migrate` applies the missing migrations in order, one
transaction each, holding the session-level ``pg_advisory_lock(SCHEMA_LOCK)`` (and, inside each
transaction, ``pg_advisory_xact_lock``) and re-reading the version in each transaction, so any
number of processes may open a new or old database at once:
exactly one applies each migration, the others wait for it and see it done.  A migration never
rewrites what an earlier one stored (columns are added with defaults; nothing is re-serialised).

Version 1
    ``records`` (one row per ``record_id``, PRIMARY KEY): the columns of
    ``tunedb.index.model.schema.RECORD_SCHEMA`` as of schema 1 -- JSON fields as their canonical JSON
    *text*, exactly as ``Record`` produced it; ``costs`` ``float8[]`` (seconds); ``timestamp``
    and ``committed`` ``timestamptz`` (microseconds, UTC; ``committed`` is assigned by the
    commit's transaction) -- plus ``seq`` (commit order: the commit's number from
    ``tunedb_commit_seq`` times 2**32 plus the row's position in the commit).
    ``invalidations`` (target_key, target_name, invalidated_at), append-only;
    ``tunedb_meta`` (key, value) holding ``identity`` (a random uuid);
    ``tunedb_changes`` (one row, a counter every write transaction bumps).
Version 2
    ``records.host`` and ``records.origin`` (text, ``''`` for rows written at version 1) and
    ``verdicts`` (record_id PRIMARY KEY, verdict, marked_at): the latest verdict per record.
Version 3
    ``tunedb_runs`` (run_id PRIMARY KEY, stored timestamptz, kind, summary text): the tuning-run
    summaries of ``RecordStore.add_run``, one row per run (re-saving a run replaces its row);
    ``summary`` is the JSON text ``tunedb.index.contract.runs_codec.prepare_run`` made, stored as it is (not
    ``jsonb``, which would reorder keys and rewrite numbers).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

#: key of the advisory lock that serialises migrations (an arbitrary constant: "tunedb" in hex)
SCHEMA_LOCK = 0x74756E656462

_V1 = [
    """CREATE TABLE records (
        record_id text PRIMARY KEY,
        target_key text NOT NULL,
        target_name text NOT NULL,
        target text NOT NULL,
        workload_key text NOT NULL,
        family text NOT NULL,
        workload text NOT NULL,
        config_key text NOT NULL,
        config text NOT NULL,
        costs float8[] NOT NULL,
        cost float8,
        status text NOT NULL,
        error text NOT NULL,
        compile_s float8,
        wall_s float8,
        "timestamp" timestamptz NOT NULL,
        source text NOT NULL,
        session text NOT NULL,
        meta text NOT NULL,
        lookup_key bigint NOT NULL,
        entry_key bigint NOT NULL,
        tunedb_version text NOT NULL,
        schema_version integer NOT NULL,
        target_slug text NOT NULL,
        rid_hash bigint NOT NULL,
        committed timestamptz NOT NULL,
        seq bigint NOT NULL
    )""",
    "CREATE INDEX records_lookup ON records (lookup_key, committed DESC, seq DESC)",
    "CREATE INDEX records_best ON records (entry_key, cost) WHERE status = 'ok'",
    "CREATE INDEX records_target ON records (target_key)",
    "CREATE INDEX records_order ON records (committed, seq)",
    "CREATE SEQUENCE tunedb_commit_seq",
    """CREATE TABLE invalidations (
        target_key text NOT NULL,
        target_name text NOT NULL,
        invalidated_at timestamptz NOT NULL
    )""",
    "CREATE INDEX invalidations_target ON invalidations (target_key, invalidated_at DESC)",
    "CREATE TABLE tunedb_meta (key text PRIMARY KEY, value text NOT NULL)",
    "CREATE TABLE tunedb_changes (id integer PRIMARY KEY CHECK (id = 1), n bigint NOT NULL)",
    "INSERT INTO tunedb_changes (id, n) VALUES (1, 0)",
]

_V2 = [
    "ALTER TABLE records ADD COLUMN host text NOT NULL DEFAULT ''",
    "ALTER TABLE records ADD COLUMN origin text NOT NULL DEFAULT ''",
    """CREATE TABLE verdicts (
        record_id text PRIMARY KEY,
        verdict text NOT NULL CHECK (verdict IN ('verified', 'refuted')),
        marked_at timestamptz NOT NULL
    )""",
]


_V3 = [
    """CREATE TABLE IF NOT EXISTS tunedb_runs (
        run_id text PRIMARY KEY,
        stored timestamptz NOT NULL,
        kind text NOT NULL,
        summary text NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS tunedb_runs_order ON tunedb_runs (stored, run_id)",
]


def _migration_1(conn: Any) -> None:
    """Records, invalidations, the identity and the change counter."""
    for stmt in _V1:
        conn.execute(stmt)
    conn.execute("INSERT INTO tunedb_meta (key, value) VALUES ('identity', %s)", (uuid.uuid4().hex,))


def _migration_2(conn: Any) -> None:
    """Provenance columns (host, origin) and verdicts."""
    for stmt in _V2:
        conn.execute(stmt)


def _migration_3(conn: Any) -> None:
    """Tuning-run summaries."""
    for stmt in _V3:
        conn.execute(stmt)


#: migration ``i + 1`` is ``MIGRATIONS[i]``; append only, never edit one that shipped
MIGRATIONS: list[Callable[[Any], None]] = [_migration_1, _migration_2, _migration_3]

#: the schema version this code writes and reads
CURRENT_VERSION = len(MIGRATIONS)


def _version_in_tx(conn: Any) -> int:
    """The database's version (0 when ``tunedb_schema`` does not exist), read in the caller's
    transaction."""
    if conn.execute("SELECT to_regclass('tunedb_schema')").fetchone()[0] is None:
        return 0
    row = conn.execute("SELECT coalesce(max(version), 0) FROM tunedb_schema").fetchone()
    return int(row[0])


def schema_version(conn: Any) -> int:
    """The schema version of the database ``conn`` is connected to (0: never migrated)."""
    with conn.transaction():
        return _version_in_tx(conn)


def _too_new(found: int) -> ValueError:
    return ValueError(f"the database's tunedb schema is version {found}, newer than this tunedb's "
                      f"version {CURRENT_VERSION}: upgrade tunedb")


def migrate(conn: Any, *, upto: int | None = None) -> int:
    """Bring the database of ``conn`` (a psycopg connection in autocommit mode) to version
    ``upto`` (default :data:`CURRENT_VERSION`), applying each missing migration in its own
    transaction under the advisory lock; returns the version reached.  Safe to call from any
    number of processes at once.  ``ValueError`` (one line naming both versions) when the
    database is newer than this code; a database already newer than ``upto`` is left alone."""
    target = CURRENT_VERSION if upto is None else upto
    if not 0 <= target <= CURRENT_VERSION:
        raise ValueError(f"no schema version {target}: this tunedb knows versions 1 to {CURRENT_VERSION}")
    found = schema_version(conn)  # fast path: no lock when nothing is to do
    if found > CURRENT_VERSION:
        raise _too_new(found)
    if found >= target:
        return found
    # A session-level advisory lock, released only after our COMMITs returned: a waiter then sees
    # every migration the holder applied.  (A transaction-level lock alone was seen to leave a
    # window in which the waiter's first statements did not yet see the holder's commit.)
    conn.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK,))
    try:
        while found < target:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                found = _version_in_tx(conn)
                if found > CURRENT_VERSION:
                    raise _too_new(found)
                if found >= target:
                    break
                if found == 0:
                    conn.execute("CREATE TABLE IF NOT EXISTS tunedb_schema ("
                                 "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
                MIGRATIONS[found](conn)
                conn.execute("INSERT INTO tunedb_schema (version) VALUES (%s)", (found + 1,))
                found += 1
    finally:
        if not conn.closed:
            conn.execute("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK,))
    return found


__all__ = ["MIGRATIONS", "CURRENT_VERSION", "SCHEMA_LOCK", "migrate", "schema_version"]
