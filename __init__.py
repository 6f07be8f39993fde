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

import importlib
import sys
import types
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


class _ModuleAlias(types.ModuleType):
    """A module that stands for another: each public name is looked up in ``target``, which is
    imported on the first such look-up (so registering the alias imports nothing).  A dunder
    name other than ``__all__`` is the alias's own (``__path__``, ``__file__``: none), so the
    import system never loads the target by asking about them.  A target that cannot be imported
    raises its ImportError at that first look-up (``from tunedb.kernel_tuner import WarmStart``)."""

    def __init__(self, name: str, target: str) -> None:
        super().__init__(name, f"Alias of :mod:`{target}` (loaded on first use).")
        self.__dict__["_target"] = target

    def _module(self) -> types.ModuleType:
        return importlib.import_module(self.__dict__["_target"])

    def __getattr__(self, name: str) -> object:
        if name.startswith("__") and name != "__all__":
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        return getattr(self._module(), name)

    def __dir__(self) -> list[str]:
        return dir(self._module())


#: public module names that are another module (no file of that name at the package root: a root
#: ``kernel_tuner.py`` would be ``import kernel_tuner`` for a Python started in a checkout)
MODULE_ALIASES = {"kernel_tuner": "tunedb.transfer.tuners.kernel_tuner"}
for _name, _target in MODULE_ALIASES.items():
    if not isinstance(sys.modules.get(f"tunedb.{_name}"), _ModuleAlias):
        sys.modules[f"tunedb.{_name}"] = _ModuleAlias(f"tunedb.{_name}", _target)
    globals()[_name] = sys.modules[f"tunedb.{_name}"]


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
