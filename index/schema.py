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
    ("rid_hash", pa.int64()),         # tunedb.index.keys.rid_hash(record_id), for vectorised de-duplication
    ("committed", pa.timestamp("us", tz="UTC")),  # when the commit that wrote it began
])

# columns read at open to build the in-memory lookup structures
INDEX_COLUMNS = ["lookup_key", "entry_key", "cost", "status", "rid_hash", "committed", "timestamp"]

PUBLIC_COLUMNS = ("record_id", "target_key", "target_name", "target", "workload_key", "workload",
                  "config_key", "config", "costs", "cost", "status", "error", "compile_s", "wall_s",
                  "timestamp", "source", "session")
