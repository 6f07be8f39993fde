"""A record store in a PostgreSQL database: the whole ``tunedb.index.contract.base.RecordStore`` contract,
with the semantics of ``tunedb.index.memory.store.MemoryStore``, on a server any number of processes
and machines share.

Storage: the tables of ``tunedb.index.postgres.migrations`` (migrated on open).  Records are stored
as ``Record`` produced them (canonical JSON text, keys, ``costs`` as ``float8[]`` in seconds), so
ids, keys and JSON are byte-identical to the Parquet store's.

Durability: every write is one transaction and returns after it committed (the server's
``synchronous_commit``, on by default, makes that a flushed WAL record): a crash of the client
(even SIGKILL) after the return loses nothing, one before leaves all or nothing.

Truthful commits and retries: a commit whose connection is lost (server restart, failover,
connection reset: ``psycopg.OperationalError``) may have committed before the reply was lost.
The commit's number (``tunedb_commit_seq``, stored in every row it inserts as the high half of
``seq``) is known before COMMIT is sent, so after reconnecting the store asks the server whether
rows of that number exist (or every record of the batch is already stored): then the commit is
reported as done, with the count it inserted; otherwise it is retried.  At most
:data:`COMMIT_ATTEMPTS` attempts, waiting :data:`RETRY_BACKOFF_S` x 2**(attempt - 1) seconds
between them (0.25, 0.5, 1, 2, 4 s: a restart or failover of several seconds is ridden out); then ``OSError``.
Connections get :data:`CONNECTION_DEFAULTS` (TCP keepalives and a user timeout) unless the URL
sets those parameters, so a cut network path or a dead server host fails the attempt in seconds.
So a commit that returned was stored, and one that raised was not, unless the server could not
be asked before the attempts ran out: then the ``OSError`` says the outcome is unknown (a retry
with the same records is a no-op if it was stored).  A server that cannot be
reached, is starting up or is in recovery is an ``OSError`` too (the contract's transient error);
``ValueError`` stays what it is everywhere: bad input, nothing sent.

Concurrency: any number of processes and threads may read and write at once.  A handle is one
connection guarded by a lock (threads take turns); a forked child opens its own connection.
Reads go to the server, so every handle sees every acknowledged commit (``refresh`` is a no-op).
Commits insert in record_id order (no deadlocks between overlapping batches); ``committed`` is
the commit transaction's start time (microseconds, UTC), so a commit that began before an
invalidation committed is stale, as in the Parquet store.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from tunedb.index.contract.base import RecordStore, StoreStats
from tunedb.index.contract.checks import (
    check_columns,
    check_forget_options,
    check_runs_query,
    check_verdicts,
    validated_commit,
)
from tunedb.index.contract.runs_codec import decode_run, prepare_run, select_runs
from tunedb.index.model.batch import RecordBatch
from tunedb.index.model.keys import hash64
from tunedb.index.model.record import Record, target_slug
from tunedb.index.model.schema import RECORD_SCHEMA, conform, empty_records
from tunedb.index.postgres.migrations import CURRENT_VERSION, migrate, schema_version
from tunedb.index.retrieval.mixin import RetrievalMixin
from tunedb.index.support.cachedir import cache_root
from tunedb.index.support.redact import mask_url, url_secrets

_TS = pa.timestamp("us", tz="UTC")

#: how many times a commit is attempted when its connection fails (module docstring)
COMMIT_ATTEMPTS = 6
#: the first wait between attempts, in seconds (doubled after each)
RETRY_BACKOFF_S = 0.25
#: libpq settings a connection gets unless its URL sets them: a dead network path or a dead
#: server host is found in seconds rather than after the kernel's default TCP timeouts (about
#: 15 minutes for data in flight, 2 hours for an idle connection).  ``tcp_user_timeout`` (ms):
#: sent data unacknowledged that long fails the connection; keepalives probe a quiet one.
CONNECTION_DEFAULTS = {"keepalives": "1", "keepalives_idle": "10", "keepalives_interval": "5",
                       "keepalives_count": "3", "tcp_user_timeout": "20000"}

#: columns copied from a batch as they are (the batch's names; all are records columns)
_PLAIN = ["record_id", "target_key", "target_name", "target", "workload_key", "family", "workload", "config_key",
          "config", "cost", "status", "error", "compile_s", "wall_s", "source", "session", "meta", "lookup_key",
          "entry_key", "tunedb_version", "schema_version", "rid_hash", "host", "origin"]

#: the incoming rows of one commit: _PLAIN plus the computed ones (constant identifiers)
_INCOMING = ("CREATE TEMP TABLE IF NOT EXISTS tunedb_incoming ("
             "pos integer, record_id text, target_key text, target_name text, target text, workload_key text, "
             "family text, workload text, config_key text, config text, cost float8, status text, error text, "
             "compile_s float8, wall_s float8, source text, session text, meta text, lookup_key bigint, "
             "entry_key bigint, tunedb_version text, schema_version integer, rid_hash bigint, host text, "
             "origin text, costs float8[], ts_us bigint, target_slug text) ON COMMIT DELETE ROWS")
_INCOMING_COLS = ["pos", *_PLAIN, "costs", "ts_us", "target_slug"]
_COPY_IN = "COPY tunedb_incoming (" + ", ".join(_INCOMING_COLS) + ") FROM STDIN (FORMAT csv)"
_INSERT = ("INSERT INTO records (" + ", ".join(_PLAIN) + ", costs, \"timestamp\", target_slug, committed, seq) "
           "SELECT " + ", ".join(_PLAIN) + ", costs, timestamptz 'epoch' + ts_us * interval '1 microsecond', "
           "target_slug, now(), %s * 4294967296 + pos FROM tunedb_incoming ORDER BY record_id, pos "
           "ON CONFLICT (record_id) DO NOTHING")

#: how each RECORD_SCHEMA column is read (SQL expression over ``r``) and parsed from CSV
_READ: dict[str, tuple[str, pa.DataType]] = {
    **{c: (f"r.{c}", RECORD_SCHEMA.field(c).type) for c in _PLAIN + ["target_slug"]},
    "costs": ("array_to_string(r.costs, ',')", pa.string()),
    "timestamp": ("(extract(epoch FROM r.\"timestamp\") * 1000000)::bigint", pa.int64()),
    "committed": ("(extract(epoch FROM r.committed) * 1000000)::bigint", pa.int64()),
}
_READ_NAMES = [n for n in RECORD_SCHEMA.names if n in _READ]
_SELECT = ", ".join(_READ[n][0] for n in _READ_NAMES)

#: a row is stale when its target was invalidated at or after its commit
_STALE = ("EXISTS (SELECT 1 FROM invalidations i WHERE i.target_key = r.target_key "
          "AND i.invalidated_at >= r.committed)")
_REFUTED = "EXISTS (SELECT 1 FROM verdicts v WHERE v.record_id = r.record_id AND v.verdict = 'refuted')"

#: the columns of a point read (lookup/best), parsed by :func:`_record_of`
_ROW_COLS = ["record_id", "target", "workload", "config", "costs", "status", "error", "compile_s", "wall_s",
             "timestamp", "source", "session", "meta", "target_name", "host", "origin"]
_ROW_SELECT = ", ".join("r." + ('"timestamp"' if c == "timestamp" else c) for c in _ROW_COLS)
_LOOKUP = (f"SELECT {_ROW_SELECT}, {_STALE}, {_REFUTED} FROM records r WHERE r.lookup_key = %s "
           "ORDER BY r.committed DESC, r.seq DESC LIMIT 1")
_ENTRY = (f"SELECT {_ROW_SELECT} FROM records r "
          f"WHERE r.entry_key = %s AND r.status = 'ok' AND NOT {_STALE} AND NOT {_REFUTED} "
          "ORDER BY r.committed, r.seq")
_BUMP = "UPDATE tunedb_changes SET n = n + 1 WHERE id = 1"
_TABLES = ("records", "invalidations", "verdicts", "tunedb_meta", "tunedb_changes", "tunedb_schema")


def _now_us() -> int:
    return time.time_ns() // 1000


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise ValueError("a postgresql:// store needs psycopg: install tunedb[postgres]") from None
    return psycopg


def _one_line(e: BaseException, url: str = "") -> str:
    """The first line of ``e``'s text, every password in it masked (:func:`~tunedb.index.support.redact.mask_url`;
    ``url``'s own password also where the text quotes it alone, as psycopg's URL errors do)."""
    text = str(e).strip().splitlines()
    return mask_url(text[0], url_secrets(url)) if text else type(e).__name__


def redact(url: str) -> str:
    """``url`` without its password (in the netloc or a ``password=`` query parameter): a
    location that can still be opened where libpq finds the password itself (``PGPASSWORD``,
    ``~/.pgpass``).  Any other text that looks like a password is masked
    (:func:`~tunedb.index.support.redact.mask_url`)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # (an unbalanced "[" of an IPv6 host)
        return mask_url(url, url_secrets(url))
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = userinfo.split(":", 1)[0] + "@" + host
    query = urllib.parse.urlencode([(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
                                    if k != "password"])
    return mask_url(urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)),
                    url_secrets(url))


def _record_of(row: tuple) -> Record:
    """A Record of a point-read row (``_ROW_COLS`` order)."""
    d = dict(zip(_ROW_COLS, row))
    d["costs"] = tuple(d["costs"])
    return Record.from_row(d)


def _costs_text(costs: pa.ChunkedArray | pa.Array) -> pa.Array:
    """``float8[]`` input literals (``{1.5,2}``) of a list<float64> column (shortest round-trip
    decimal text, so PostgreSQL stores the exact doubles)."""
    joined = pc.binary_join(pc.cast(costs, pa.list_(pa.string())), ",")
    return pc.binary_join_element_wise("{", pc.fill_null(joined, ""), "}", "")


def _parse_costs(text: pa.Array) -> pa.Array:
    """list<float64> of ``array_to_string(costs, ',')`` texts (``""`` = no costs)."""
    text = pc.fill_null(text, "")
    parts = pc.split_pattern(text, ",")
    lens = pc.if_else(pc.equal(text, ""), 0, pc.list_value_length(parts)).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(parts)
    values = pc.filter(flat, pc.not_equal(flat, "")).cast(pa.float64())
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), values)


class PostgresStore(RetrievalMixin, RecordStore):
    """A record store in a PostgreSQL database (see the module docstring).

    ``url`` is a libpq URL (``postgresql://user[:password]@host[:port]/dbname[?options]``).
    Opening connects, migrates the schema (``tunedb.index.postgres.migrations.migrate``) and reads
    the database's identity.  ``ValueError`` (one line) when psycopg is missing, the URL is malformed
    or the schema is newer than this code; ``OSError`` (one line) when the server cannot be reached.
    No text this store makes holds the URL's password: :attr:`location`, ``repr()`` and every
    error show the URL without it (a driver's message is masked, :func:`tunedb.index.support.redact.mask_url`).

    ``read_only``: the handle never writes (the dashboard's promise): nothing is migrated (a
    database without tunedb's schema, or with another version of it, is a ``ValueError``), every
    session is ``default_transaction_read_only`` so the server itself refuses a write, and the
    store's write methods raise ``ValueError`` before sending anything."""

    def __init__(self, url: str, *, connect_timeout: float = 10.0, read_only: bool = False) -> None:
        self._psycopg = _import_psycopg()
        self._url = url
        self._connect_timeout = connect_timeout
        self.read_only = bool(read_only)
        self._lock = threading.RLock()
        self._conn: Any = None
        self._pid = 0
        self._stale_conns: list[Any] = []  # a parent's connections seen after fork: never used, never closed
        self.lookups = 0
        self.hits = 0
        with self._db() as conn:
            if self.read_only:
                self._check_schema(conn)
            else:
                migrate(conn)
            self._identity = conn.execute("SELECT value FROM tunedb_meta WHERE key = 'identity'").fetchone()[0]

    def _check_schema(self, conn: Any) -> None:
        """A read-only handle reads only a database whose schema is this code's version."""
        found = schema_version(conn)
        if found == 0:
            raise ValueError(f"no tunedb database at {self.location} (no tunedb schema; a read-only "
                             "open creates nothing)")
        if found != CURRENT_VERSION:
            raise ValueError(f"the database's tunedb schema is version {found}, this tunedb reads version "
                             f"{CURRENT_VERSION}: open it once for writing (any writing tunedb command migrates "
                             "it) or use a matching tunedb")

    def _check_writable(self) -> None:
        """ValueError (one line) on a read-only handle."""
        if self.read_only:
            raise ValueError(f"{self.location} is open read-only; open it without read_only to write to it")

    @classmethod
    def open(cls, url: str, **options: Any) -> PostgresStore:
        """``PostgresStore(url, **options)``."""
        return cls(url, **options)

    # ------------------------------------------------------------------ connection
    def _connect(self) -> Any:
        pg = self._psycopg
        try:
            given = pg.conninfo.conninfo_to_dict(self._url)
        except pg.Error as e:  # a malformed URL: bad input, nothing sent (the text may quote the password)
            raise ValueError(f"invalid PostgreSQL URL {self.location}: {_one_line(e, self._url)}") from None
        try:
            extra = {k: v for k, v in CONNECTION_DEFAULTS.items() if k not in given}
            if "connect_timeout" not in given:
                extra["connect_timeout"] = str(max(1, int(self._connect_timeout)))
            conn = pg.connect(self._url, autocommit=True, **extra)
            conn.execute("SET TIME ZONE 'UTC'")
            if self.read_only:
                conn.execute("SET default_transaction_read_only = on")
        except pg.OperationalError as e:  # down, starting up, in recovery, refused: transient
            raise OSError(f"cannot connect to {self.location}: {_one_line(e, self._url)}") from None
        return conn

    @contextlib.contextmanager
    def _db(self) -> Iterator[Any]:
        """The connection, under the handle's lock; a failure of the server or the network is an
        ``OSError`` (one line)."""
        pg = self._psycopg
        with self._lock:
            if self._conn is not None and self._pid != os.getpid():
                self._stale_conns.append(self._conn)
                self._conn = None
            if self._conn is None or self._conn.closed:
                self._conn = self._connect()
                self._pid = os.getpid()
            try:
                yield self._conn
            except pg.OperationalError as e:
                if self._conn.closed or self._conn.broken:
                    self._conn = None
                raise OSError(f"PostgreSQL at {self.location}: {_one_line(e, self._url)}") from None

    # ------------------------------------------------------------------ writing
    def commit(self, records: Record | RecordBatch | Iterable[Record]) -> int:
        """Validate everything (``ValueError``, nothing stored), then one transaction: COPY the
        rows into a temporary table and insert the ones whose record_id is new.  Returns how many
        were new; durable when it returns."""
        self._check_writable()
        given = validated_commit(records)
        if isinstance(given, RecordBatch):
            table = given.table
        else:
            if not given:
                return 0
            table = RecordBatch._from_records(given, validate=False).table
        if table.num_rows == 0:
            return 0
        data = self._incoming_csv(table)
        ids = sorted(set(table.column("record_id").to_pylist()))
        unknown: list[int] = []  # commit numbers whose outcome the server could not be asked about
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            sent: list[int] = []  # the commit's number once the server gave it
            try:
                return self._commit_once(data, sent)
            except OSError as e:
                failure = e
            for no in [*unknown, *sent]:
                try:
                    outcome = self._commit_outcome(no, ids)
                except OSError:
                    if no not in unknown:
                        unknown.append(no)
                    continue
                if no in unknown:
                    unknown.remove(no)
                if outcome is not None:
                    return outcome
            if attempt < COMMIT_ATTEMPTS:
                time.sleep(RETRY_BACKOFF_S * 2 ** (attempt - 1))
        if unknown:
            raise OSError(f"{failure}; whether the commit was stored is unknown (the server could not be asked): "
                          "committing the same records again is safe") from None
        raise failure

    def _commit_once(self, data: bytes, sent: list[int]) -> int:
        """One attempt of :meth:`commit`: the transaction; appends its commit number to ``sent``
        as soon as the server assigned it.  ``OSError`` when the connection fails."""
        with self._db() as conn:
            with conn.transaction():
                conn.execute(_INCOMING)
                commit_no = conn.execute("SELECT nextval('tunedb_commit_seq')").fetchone()[0]
                sent.append(int(commit_no))
                with conn.cursor() as cur:
                    with cur.copy(_COPY_IN) as copy:
                        copy.write(data)
                    cur.execute(_INSERT, (commit_no,))
                    new = cur.rowcount
                if new:
                    conn.execute(_BUMP)
        return int(new)

    def _commit_outcome(self, commit_no: int, ids: list[str]) -> int | None:
        """After a commit's connection failed: how many rows commit ``commit_no`` inserted if it
        committed (or 0 when every record of the batch is stored already, by it or before it),
        None when it did not commit (then it is retried); ``OSError`` when the server cannot be
        asked now."""
        lo, hi = commit_no * 4294967296, (commit_no + 1) * 4294967296
        with self._db() as conn:
            ours, present = conn.execute(
                "SELECT count(*) FILTER (WHERE seq >= %s AND seq < %s), count(*) FROM records "
                "WHERE record_id = ANY(%s)", (lo, hi, ids)).fetchone()
        if ours:
            return int(ours)
        return 0 if present == len(ids) else None

    @staticmethod
    def _incoming_csv(table: pa.Table) -> bytes:
        """The CSV of a batch table's rows in ``_INCOMING_COLS`` order (no header)."""
        n = table.num_rows
        names = pc.binary_join_element_wise(table.column("target_name"), table.column("target_key"), "\0")
        enc = pc.dictionary_encode(names).combine_chunks()
        slugs = pa.array([target_slug(*v.split("\0", 1)) for v in enc.dictionary.to_pylist()], pa.string())
        cols = [pa.array(np.arange(n, dtype=np.int32))]
        cols += [table.column(c) if c in table.column_names else pa.repeat(pa.scalar("", pa.string()), n)
                 for c in _PLAIN]
        cols += [_costs_text(table.column("costs")), table.column("timestamp").cast(pa.int64()),
                 slugs.take(enc.indices)]
        out = io.BytesIO()
        pacsv.write_csv(pa.Table.from_arrays(cols, names=_INCOMING_COLS), out,
                        pacsv.WriteOptions(include_header=False))
        return out.getvalue()

    def invalidate(self, target: Any) -> str:
        self._check_writable()
        tkey = self._target_key(target)
        with self._db() as conn, conn.transaction():
            row = conn.execute("SELECT target_name, max(committed) FROM records WHERE target_key = %s "
                               "GROUP BY target_name LIMIT 1", (tkey,)).fetchone()
            if row is None:
                raise ValueError(f"unknown target {target!r}")
            conn.execute("INSERT INTO invalidations (target_key, target_name, invalidated_at) "
                         "SELECT %s, %s, greatest(clock_timestamp(), max(committed)) FROM records "
                         "WHERE target_key = %s", (tkey, row[0], tkey))
            conn.execute(_BUMP)
        return tkey

    def mark(self, verdicts: dict[str, str]) -> int:
        self._check_writable()
        check_verdicts(verdicts)
        if not verdicts:
            return 0
        rids = list(verdicts)
        with self._db() as conn, conn.transaction():
            known = {r[0] for r in conn.execute("SELECT record_id FROM records WHERE record_id = ANY(%s) FOR SHARE",
                                                (rids,)).fetchall()}
            for rid in rids:
                if rid not in known:
                    raise ValueError(f"verdict for record {rid}: the store holds no such record")
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO verdicts (record_id, verdict, marked_at) VALUES (%s, %s, clock_timestamp()) "
                                "ON CONFLICT (record_id) DO UPDATE SET verdict = excluded.verdict, "
                                "marked_at = excluded.marked_at", list(verdicts.items()))
            conn.execute(_BUMP)
        return len(verdicts)

    def verdicts(self) -> dict[str, str]:
        with self._db() as conn:
            rows = conn.execute("SELECT v.record_id, v.verdict FROM verdicts v JOIN records r USING (record_id) "
                                "ORDER BY v.marked_at").fetchall()
        return dict(rows)

    # ------------------------------------------------------------------ tuning runs
    def add_run(self, summary: Mapping[str, Any]) -> str:
        """Upsert the summary's row of ``tunedb_runs`` (see ``RecordStore.add_run``) in one
        transaction: durable when it returns; the change counter is not bumped (runs are not
        records)."""
        import datetime as _dt

        self._check_writable()
        run_id, kind, stored, text = prepare_run(summary)
        with self._db() as conn, conn.transaction():
            conn.execute("INSERT INTO tunedb_runs (run_id, stored, kind, summary) VALUES (%s, %s, %s, %s) "
                         "ON CONFLICT (run_id) DO UPDATE SET stored = excluded.stored, kind = excluded.kind, "
                         "summary = excluded.summary", (run_id, _dt.datetime.fromisoformat(stored), kind, text))
        return run_id

    def runs(self, kind: str | None = None, *, limit: int | None = None) -> list[dict]:
        """The rows of ``tunedb_runs`` (of ``kind``), the newest ``limit`` chosen by the server."""
        check_runs_query(kind, limit)
        if limit == 0:
            return []
        where = "WHERE kind = %s" if kind is not None else ""
        params: tuple = (kind,) if kind is not None else ()
        query = f"SELECT run_id, summary FROM tunedb_runs {where} ORDER BY stored DESC, run_id COLLATE \"C\" DESC"
        if limit is not None:
            query += " LIMIT %s"
            params += (int(limit),)
        with self._db() as conn:
            rows = conn.execute(query, params).fetchall()
        decoded = (decode_run(text, f"{self.location} run {rid}") for rid, text in rows)
        return select_runs([d for d in decoded if d is not None], None, None)

    # ------------------------------------------------------------------ maintenance
    def _rewrite(self, keep_of: Any, where: str = "", params: tuple = ()) -> dict:
        """Delete the rows (of ``where``) that ``keep_of(table)`` (a boolean mask over the
        ``RECORD_SCHEMA`` table of those rows, in commit order) does not keep; one transaction
        that blocks commits meanwhile."""
        self._check_writable()
        with self._db() as conn, conn.transaction():
            conn.execute("LOCK TABLE records IN EXCLUSIVE MODE")
            before = conn.execute("SELECT count(*) FROM records").fetchone()[0]
            t = self._read(conn, where, params)
            keep = np.asarray(keep_of(t), bool)
            drop = pc.filter(t.column("record_id"), pa.array(~keep)).to_pylist()
            if drop:
                conn.execute("DELETE FROM records WHERE record_id = ANY(%s)", (drop,))
                conn.execute(_BUMP)
        return {"rows_before": int(before), "rows_after": int(before) - len(drop), "removed": len(drop),
                "files_before": 0, "files_after": 0}

    def compact(self) -> dict:
        """``VACUUM ANALYZE`` of the tables (reclaims deleted rows, refreshes the planner's
        statistics); reads return the same."""
        self._check_writable()
        with self._db() as conn:
            for table in (*_TABLES, "tunedb_runs"):
                conn.execute("VACUUM ANALYZE " + table)  # constant identifiers
            n = conn.execute("SELECT count(*) FROM records").fetchone()[0]
        return {"rows_before": int(n), "rows_after": int(n), "files_before": 0, "files_after": 0}

    def dedup(self) -> dict:
        from tunedb.index.contract.retention import dedup_mask

        return self._rewrite(dedup_mask)

    def forget(self, *, keep_top: int | None = None, older_than_days: float | None = None,
               target: Any = None) -> dict:
        from tunedb.index.contract.retention import retention_mask

        check_forget_options(keep_top, older_than_days, target)
        where, params = "", ()
        if target is not None:
            tkey = self._target_key(target)
            with self._db() as conn:
                if conn.execute("SELECT 1 FROM records WHERE target_key = %s LIMIT 1", (tkey,)).fetchone() is None:
                    raise ValueError(f"unknown target {target!r}")
            where, params = "r.target_key = %s", (tkey,)
        cutoff = None if older_than_days is None else _now_us() - int(older_than_days * 86400e6)
        drop_all = target is not None and keep_top is None and older_than_days is None
        return self._rewrite(lambda t: retention_mask(t, keep_top=keep_top, cutoff_us=cutoff, drop_all=drop_all),
                             where, params)

    # ------------------------------------------------------------------ point reads
    def lookup(self, target: Any, workload: Any, config: Any) -> Record | None:
        lk = hash64(self._target_key(target), self._other_key(workload, "workload"), self._other_key(config, "config"))
        with self._db() as conn:
            self.lookups += 1
            row = conn.execute(_LOOKUP, (lk,)).fetchone()
            if row is None or row[-2] or row[-1]:
                return None
            self.hits += 1
        return _record_of(row[:-2])

    def entry_records(self, target: Any, workload: Any) -> list[Record]:
        ek = hash64(self._target_key(target), self._other_key(workload, "workload"))
        with self._db() as conn:
            rows = conn.execute(_ENTRY, (ek,)).fetchall()
        return [_record_of(r) for r in rows]

    # ------------------------------------------------------------------ bulk reads
    def _read(self, conn: Any, where: str = "", params: tuple = (), columns: list[str] | None = None) -> pa.Table:
        """The ``RECORD_SCHEMA`` table of the rows matching ``where`` (a constant SQL condition
        over ``r`` with ``%s`` placeholders), in commit order, streamed as CSV; ``columns``
        (checked names): only those are selected and returned, in that order."""
        names = _READ_NAMES if columns is None else columns
        select = ", ".join(_READ[n][0] for n in names)
        query = f"COPY (SELECT {select} FROM records r {'WHERE ' + where if where else ''} " \
                "ORDER BY r.committed, r.seq) TO STDOUT (FORMAT csv)"
        buf = io.BytesIO()
        with conn.cursor() as cur, cur.copy(query, params or None) as copy:
            for chunk in copy:
                buf.write(chunk)
        if buf.tell() == 0:
            return empty_records(columns)
        size = buf.tell()
        parse = pacsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=False)
        convert = pacsv.ConvertOptions(column_types={n: _READ[n][1] for n in names}, strings_can_be_null=False,
                                       quoted_strings_can_be_null=False)
        data = pa.py_buffer(buf.getbuffer())
        try:
            t = pacsv.read_csv(pa.BufferReader(data), read_options=pacsv.ReadOptions(column_names=names),
                               parse_options=parse, convert_options=convert)
        except pa.ArrowInvalid:
            # a row larger than the reader's block (1 MiB) straddles two blocks: read the whole
            # text as one block (from a reader of its own: the failed one may still be reading ahead)
            one = pacsv.ReadOptions(column_names=names, block_size=min(size + 1, 2**31 - 1))
            t = pacsv.read_csv(pa.BufferReader(data), read_options=one, parse_options=parse, convert_options=convert)
        cols = {}
        for n in names:
            c = t.column(n).combine_chunks()
            if n == "costs":
                c = _parse_costs(c)
            elif n in ("timestamp", "committed"):
                c = c.cast(_TS)
            cols[n] = c
        return conform(pa.table(cols), columns)

    def records(self, target: Any = None, workload: Any = None, *, include_stale: bool = True,
                columns: Sequence[str] | None = None) -> pa.Table:
        """See ``RecordStore.records``: commit order; the filters run in the database and a
        projection selects only its columns (the others never leave the server)."""
        cols = check_columns(columns)
        conds, params = [], []
        if target is not None:
            conds.append("r.target_key = %s")
            params.append(self._target_key(target))
        if workload is not None:
            conds.append("r.workload_key = %s")
            params.append(self._other_key(workload, "workload"))
        if not include_stale:
            conds.append("NOT " + _STALE)
        with self._db() as conn:
            return self._read(conn, " AND ".join(conds), tuple(params), cols)

    def targets(self) -> list[dict]:
        with self._db() as conn:
            rows = conn.execute(
                "SELECT f.target_key, f.target_name, f.target, c.n FROM "
                "(SELECT DISTINCT ON (target_key) target_key, target_name, target FROM records "
                " ORDER BY target_key, committed, seq) f "
                "JOIN (SELECT target_key, count(*) AS n FROM records GROUP BY target_key) c USING (target_key)"
            ).fetchall()
        out = [{"target_key": tk, "target_name": n, "target": json.loads(tj), "records": int(c)}
               for tk, n, tj, c in rows]
        return sorted(out, key=lambda d: (d["target_name"], d["target_key"]))

    def __len__(self) -> int:
        with self._db() as conn:
            return int(conn.execute("SELECT count(*) FROM records").fetchone()[0])

    def stats(self) -> StoreStats:
        with self._db() as conn:
            n = conn.execute("SELECT count(*) FROM records").fetchone()[0]
            tk, wk, ek = conn.execute(
                "SELECT count(DISTINCT target_key), count(DISTINCT workload_key), count(DISTINCT entry_key) "
                f"FROM records r WHERE NOT {_STALE}").fetchone()
            stale = [r[0] for r in conn.execute("SELECT DISTINCT target_key FROM invalidations ORDER BY 1")]
            size = conn.execute("SELECT sum(pg_total_relation_size(c)) FROM unnest(%s::regclass[]) c",
                                (list(_TABLES),)).fetchone()[0]
        return StoreStats(records=int(n), targets=int(tk), workloads=int(wk), entries=int(ek), files=0,
                          size_bytes=int(size or 0), stale_targets=sorted(stale), lookups=self.lookups,
                          hits=self.hits, location=self.location)

    def size_bytes(self) -> int:
        """The tables' total relation sizes (``stats().size_bytes``, without counting records)."""
        with self._db() as conn:
            size = conn.execute("SELECT sum(pg_total_relation_size(c)) FROM unnest(%s::regclass[]) c",
                                (list(_TABLES),)).fetchone()[0]
        return int(size or 0)

    def stale_targets(self) -> list[str]:
        with self._db() as conn:
            return [r[0] for r in conn.execute("SELECT DISTINCT target_key FROM invalidations ORDER BY 1")]

    # ------------------------------------------------------------------ derived data, life cycle
    @property
    def identity(self) -> str:
        """The database's random identity (32 hex digits, fixed when its schema was created)."""
        return self._identity

    def cache_dir(self) -> Path:
        """``$TUNEDB_CACHE_DIR/postgres/<identity>`` (default ``~/.cache/tunedb/postgres/<identity>``):
        this machine's rebuildable caches of this database (created on demand)."""
        return cache_root() / "postgres" / self._identity

    def change_token(self) -> tuple:
        """(identity, the database's change counter): every write transaction of any process
        bumps the counter before it commits."""
        with self._db() as conn:
            return (self._identity, int(conn.execute("SELECT n FROM tunedb_changes WHERE id = 1").fetchone()[0]))

    @property
    def location(self) -> str:
        """The URL without its password (:func:`redact`): safe to print or log; it opens the same
        database where libpq finds the password itself (``PGPASSWORD``, ``~/.pgpass``)."""
        return redact(self._url)

    def __repr__(self) -> str:
        """``PostgresStore('<location>')`` (no password), plus ``read_only=True`` when it is."""
        return f"PostgresStore({self.location!r}{', read_only=True' if self.read_only else ''})"

    def close(self) -> None:
        """Close the connection; a later call on this handle connects again."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None


def open_postgres(url: str, **options: Any) -> PostgresStore:
    """The store at a ``postgresql://`` / ``postgres://`` URL (see :class:`PostgresStore`)."""
    return PostgresStore(url, **options)


__all__ = ["PostgresStore", "open_postgres", "redact"]
