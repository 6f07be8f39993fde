"""Arrow schema of the record files (public columns are kept stable)."""

from __future__ import annotations

import pyarrow as pa

RECORD_SCHEMA = pa.schema([
    ("record_id", pa.string()),
    ("target_key", pa.string()),
    ("target_name", pa.string()),
    ("target", pa.string()),          # canonical JSON
    ("workload_key", pa.string()),
    ("family", pa.string()),
    ("workload", pa.string()),        # canonical JSON
    ("config_key", pa.string()),
    ("config", pa.string()),          # canonical JSON
    ("costs", pa.list_(pa.float64())),  # seconds, one per repeat
    ("cost", pa.float64()),           # mean of costs, seconds; null when none
    ("status", pa.string()),
    ("error", pa.string()),
    ("compile_s", pa.float64()),
    ("wall_s", pa.float64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("source", pa.string()),
    ("session", pa.string()),
    ("meta", pa.string()),            # canonical JSON of free-form extras
    ("lookup_key", pa.int64()),       # hash64(target_key, workload_key, config_key)
    ("entry_key", pa.int64()),        # hash64(target_key, workload_key)
    ("tunedb_version", pa.string()),
    ("schema_version", pa.int32()),
    ("target_slug", pa.string()),     # equals the hive partition value
    ("rid_hash", pa.int64()),         # tunedb.index.model.keys.rid_hash(record_id), for vectorised de-duplication
    ("committed", pa.timestamp("us", tz="UTC")),  # when the commit that wrote it began
    # schema 2 (appended: the positions of the columns above never move)
    ("host", pa.string()),            # machine whose tunedb created the record; "" = unknown
    ("origin", pa.string()),          # imported file / store copied from; "" = local measurement
])

#: columns that schema 2 added; a schema-1 file lacks them (readers fill in "")
SCHEMA2_COLUMNS = ("host", "origin")

# columns read at open to build the in-memory lookup structures
INDEX_COLUMNS = ["lookup_key", "entry_key", "cost", "status", "rid_hash", "committed", "timestamp"]

PUBLIC_COLUMNS = ("record_id", "target_key", "target_name", "target", "workload_key", "workload",
                  "config_key", "config", "costs", "cost", "status", "error", "compile_s", "wall_s",
                  "timestamp", "source", "session", "host", "origin")


def record_schema(columns: list[str] | None = None) -> pa.Schema:
    """``RECORD_SCHEMA``, or its fields ``columns`` (RECORD_SCHEMA names) in that order: the
    schema of a ``RecordStore.records(columns=...)`` projection."""
    return RECORD_SCHEMA if columns is None else pa.schema([RECORD_SCHEMA.field(c) for c in columns])


def empty_records(columns: list[str] | None = None) -> pa.Table:
    """A table of no records with :func:`record_schema` ``(columns)`` (not ``Schema.empty_table``:
    pyarrow imports pandas for that, 0.2-0.3 s in a fresh process)."""
    return pa.Table.from_batches([], schema=record_schema(columns))


def conform(table: pa.Table, columns: list[str] | None = None) -> pa.Table:
    """``table`` (record columns of any schema version this tunedb reads) with exactly the
    columns of ``RECORD_SCHEMA`` (or of :func:`record_schema` ``(columns)``, a projection), in
    that order and with those types: a column the table lacks (``host``/``origin`` of a
    schema-1 file) is filled with ``""`` (unknown), other missing columns with nulls; columns
    not asked for are dropped.  Schema metadata is kept (not for a projection)."""
    schema = record_schema(columns)
    if table.schema.names == schema.names and (columns is None or all(
            table.schema.field(c).type == schema.field(c).type for c in columns)):
        return table
    n = table.num_rows
    cols = []
    for f in schema:
        if f.name in table.column_names:
            c = table.column(f.name)
            cols.append(c if c.type == f.type else c.cast(f.type))
        elif f.name in SCHEMA2_COLUMNS:
            cols.append(pa.repeat(pa.scalar("", f.type), n))
        else:
            cols.append(pa.nulls(n, f.type))
    if columns is not None:
        return pa.Table.from_arrays(cols, schema=schema)
    return pa.Table.from_arrays(cols, schema=RECORD_SCHEMA.with_metadata(table.schema.metadata or {}))
