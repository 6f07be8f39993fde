"""Records at rest: schema, keys, the Parquet store, features and the vector index.

``index`` never imports ``transfer``.
"""

from __future__ import annotations

from .batch import RecordBatch
from .keys import canonical_json, key_of
from .record import STATUSES, Record
from .store import TuningDB
from .version import SCHEMA_VERSION, TUNEDB_VERSION

__all__ = ["TuningDB", "Record", "RecordBatch", "STATUSES", "canonical_json", "key_of", "SCHEMA_VERSION", "TUNEDB_VERSION"]
