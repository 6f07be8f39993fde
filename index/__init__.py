"""Records at rest: the record model, the store contract and its backends, hardware and retrieval.

Subpackages, in layers (top first; a module imports its own layer and the layers below it,
never one above; ``retrieval`` and ``contract`` sit side by side and never import each other):
``opener`` (opening a store by location), ``testing`` (the store contract suite other backends
run), ``views`` (stores composed of stores: layered, trusted, filtered), the backends ``memory``,
``parquet`` (the Parquet directory store, the default), ``postgres`` and ``snapshot`` (a published
snapshot read over http(s)://, read-only), ``retrieval`` (feature vectors, the FAISS index,
nearest entries, predictions) beside ``contract`` (``RecordStore`` and the helpers backends
share), ``hardware`` (device catalog, local CPU presets, target resolution, probing this
machine), ``model`` (the record model and the one cost estimator) and ``support`` (file, cache,
lazy-import and redaction helpers).  ``tunedb.index`` never imports
``tunedb.transfer``.  Names below load lazily.
"""

from __future__ import annotations

from tunedb.index.model.version import SCHEMA_VERSION, TUNEDB_VERSION
from tunedb.index.support.lazy import lazy_getattr

_LAZY = {
    "ParquetStore": ("tunedb.index.parquet.store", "ParquetStore"),
    "MemoryStore": ("tunedb.index.memory.store", "MemoryStore"),
    "RecordStore": ("tunedb.index.contract.base", "RecordStore"),
    "open_store": ("tunedb.index.opener", "open_store"),
    "parse_location": ("tunedb.index.opener", "parse_location"),
    "Location": ("tunedb.index.opener", "Location"),
    "Record": ("tunedb.index.model.record", "Record"),
    "STATUSES": ("tunedb.index.model.record", "STATUSES"),
    "RecordBatch": ("tunedb.index.model.batch", "RecordBatch"),
    "canonical_json": ("tunedb.index.model.keys", "canonical_json"),
    "key_of": ("tunedb.index.model.keys", "key_of"),
}

__all__ = ["ParquetStore", "MemoryStore", "RecordStore", "open_store", "parse_location",
           "Location", "Record", "STATUSES", "RecordBatch",
           "canonical_json", "key_of", "SCHEMA_VERSION", "TUNEDB_VERSION"]


#: former names, still resolved (with a DeprecationWarning)
DEPRECATED = {"TuningDB": "ParquetStore"}
__getattr__ = lazy_getattr("tunedb.index", _LAZY, globals(), DEPRECATED)
