"""tunedb: a tuning-record database for compiler auto-tuners, with a transfer engine for new hardware.

The public API (everything else is internal and may change)::

    import tunedb
    db = tunedb.open("tunedb-data")                    # a Parquet directory (created if missing)
    target = tunedb.local_target("cpu-native-t1")      # a target dict for this machine
    res = tunedb.tune(db, target, {"family": "matmul", "M": 256, "N": 256, "K": 256}, budget=16)
    db.lookup(target, res.workload, res.best_config)   # -> Record: never measured twice
    db.close()

``open`` returns a :class:`RecordStore` (the contract every backend implements:
``tunedb.index.contract.base``): a Parquet directory, ``memory:`` or a ``postgresql://`` URL;
:class:`LayeredStore` and :class:`TrustedStore` compose stores.  Names are imported on first
use, so ``import tunedb`` itself loads no heavy dependency (pyarrow, FAISS, LightGBM, TVM, Ray).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from tunedb.index.model.version import SCHEMA_VERSION, TUNEDB_VERSION
from tunedb.index.support.lazy import lazy_getattr

__version__ = TUNEDB_VERSION

#: public name -> (module, attribute); resolved lazily by __getattr__
_LAZY = {
    "open": ("tunedb.index.opener", "open_store"),
    "RecordStore": ("tunedb.index.contract.base", "RecordStore"),
    "Entry": ("tunedb.index.contract.base", "Entry"),
    "StoreStats": ("tunedb.index.contract.base", "StoreStats"),
    "MemoryStore": ("tunedb.index.memory.store", "MemoryStore"),
    "ParquetStore": ("tunedb.index.parquet.store", "ParquetStore"),
    "PostgresStore": ("tunedb.index.postgres.store", "PostgresStore"),
    "LayeredStore": ("tunedb.index.views.layered", "LayeredStore"),
    "TrustedStore": ("tunedb.index.views.trust", "TrustedStore"),
    "parse_trust": ("tunedb.index.views.trust", "parse_trust"),
    "Record": ("tunedb.index.model.record", "Record"),
    "RecordBatch": ("tunedb.index.model.batch", "RecordBatch"),
    "STATUSES": ("tunedb.index.model.record", "STATUSES"),
    "local_target": ("tunedb.index.hardware.localcpu", "local_target"),
    "resolve_target": ("tunedb.index.hardware.targets", "resolve_target"),
    "Tuner": ("tunedb.transfer.search.tuner", "Tuner"),
    "TuneOptions": ("tunedb.transfer.search.tuner", "TuneOptions"),
    "TuneResult": ("tunedb.transfer.search.tuner", "TuneResult"),
    "tune": ("tunedb.transfer.apps.tune", "tune"),
    "local_job": ("tunedb.transfer.measure.jobs", "local_job"),
    "measure": ("tunedb.transfer.measure.backend", "measure"),
    "copy_records": ("tunedb.transfer.migration.copy", "copy_records"),
    "verify": ("tunedb.transfer.measure.verify", "verify"),
}

__all__ = [
    "open", "RecordStore", "Entry", "StoreStats", "MemoryStore", "ParquetStore", "PostgresStore",
    "LayeredStore", "TrustedStore", "parse_trust",
    "Record", "RecordBatch", "STATUSES",
    "local_target", "resolve_target",
    "Tuner", "TuneOptions", "TuneResult", "tune", "local_job", "measure", "copy_records", "verify",
    "SCHEMA_VERSION", "TUNEDB_VERSION", "__version__",
]


#: former names, still resolved (with a DeprecationWarning)
DEPRECATED = {"TuningDB": "ParquetStore"}
__getattr__ = lazy_getattr("tunedb", _LAZY, globals(), DEPRECATED)


class _SubmoduleAlias:
    """An import-system finder and loader: ``tunedb.kernel_tuner`` *is* the module
    ``tunedb.transfer.integrations.kt_strategy`` (no file of that name at the package root, where
    it would shadow Kernel Tuner for a Python started in a checkout)."""

    ALIASES = {"tunedb.kernel_tuner": "tunedb.transfer.integrations.kt_strategy"}

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name not in self.ALIASES:
            return None
        import importlib.util

        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec: object) -> object:
        import importlib

        module = importlib.import_module(self.ALIASES[spec.name])  # type: ignore[attr-defined]
        self._own_spec = module.__spec__  # (the import system sets __spec__ to the alias's spec)
        return module

    def exec_module(self, module: object) -> None:
        """Nothing to run (the aliased module ran when it was imported); its own spec is put back."""
        module.__spec__ = self._own_spec  # type: ignore[attr-defined]


if not any(isinstance(f, _SubmoduleAlias) for f in sys.meta_path):
    sys.meta_path.insert(0, _SubmoduleAlias())


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names resolve lazily
    from tunedb.index.contract.base import Entry, RecordStore, StoreStats
    from tunedb.index.hardware.localcpu import local_target
    from tunedb.index.hardware.targets import resolve_target
    from tunedb.index.memory.store import MemoryStore
    from tunedb.index.model.batch import RecordBatch
    from tunedb.index.model.record import STATUSES, Record
    from tunedb.index.opener import open_store as open
    from tunedb.index.parquet.store import ParquetStore
    from tunedb.index.postgres.store import PostgresStore
    from tunedb.index.views.layered import LayeredStore
    from tunedb.index.views.trust import TrustedStore, parse_trust
    from tunedb.transfer.apps.tune import tune
    from tunedb.transfer.measure.backend import measure
    from tunedb.transfer.measure.jobs import local_job
    from tunedb.transfer.measure.verify import verify
    from tunedb.transfer.migration.copy import copy_records
    from tunedb.transfer.search.tuner import TuneOptions, Tuner, TuneResult
