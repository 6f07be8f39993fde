"""Records at rest: the record model, the store contract and its backends, hardware and retrieval.

Subpackages: ``parquet`` (the Parquet directory store, the default), ``postgres`` (the
PostgreSQL store), ``snapshot`` (a published snapshot read over http(s)://, read-only),
``hardware`` (device catalog, local CPU presets, target resolution, probing this machine),
``retrieval`` (feature vectors, the FAISS index, nearest entries) and ``testing`` (the store
contract suite other backends run).  Modules here: ``record``/``batch``/``keys``/``schema``/
``version`` (the record model), ``base`` (the store contract), ``checks``/``runs_codec``/
``tables``/``retention`` (what backends share), ``memory`` (the in-memory store), ``layered``
and ``trust`` (views composing stores), ``stores`` (opening a store by location), ``estimate``
(the one cost estimator), ``decisions`` (stored A-vs-B verdicts), ``lookups`` (batch look-up
answers), ``cachedir``, ``redact`` and ``lazy``.  ``tunedb.index`` never imports
``tunedb.transfer``.  Names below load lazily.
"""

from __future__ import annotations

from tunedb.index.lazy import lazy_getattr
from tunedb.index.version import SCHEMA_VERSION, TUNEDB_VERSION

_LAZY = {
    "ParquetStore": ("tunedb.index.parquet.store", "ParquetStore"),
    "MemoryStore": ("tunedb.index.memory", "MemoryStore"),
    "RecordStore": ("tunedb.index.base", "RecordStore"),
    "open_store": ("tunedb.index.stores", "open_store"),
    "parse_location": ("tunedb.index.stores", "parse_location"),
    "Location": ("tunedb.index.stores", "Location"),
    "Record": ("tunedb.index.record", "Record"),
    "STATUSES": ("tunedb.index.record", "STATUSES"),
    "RecordBatch": ("tunedb.index.batch", "RecordBatch"),
    "canonical_json": ("tunedb.index.keys", "canonical_json"),
    "key_of": ("tunedb.index.keys", "key_of"),
}

__all__ = ["ParquetStore", "MemoryStore", "RecordStore", "open_store", "parse_location",
           "Location", "Record", "STATUSES", "RecordBatch",
           "canonical_json", "key_of", "SCHEMA_VERSION", "TUNEDB_VERSION"]


#: former names, still resolved (with a DeprecationWarning)
DEPRECATED = {"TuningDB": "ParquetStore"}
__getattr__ = lazy_getattr("tunedb.index", _LAZY, globals(), DEPRECATED)
