"""A replay's view of a store (``ReplayStore``) shares the store's derived data: the family's base
cost model fitted on the store (as ``tunedb import`` fits it) is the one a replayed run finds,
read from the store's cache, not fitted again for the view.  Real Parquet DB, real replayed
Kernel Tuner data."""

from __future__ import annotations

from tunedb.index import ParquetStore
from tunedb.transfer.measure.replay import ReplayData, isolated_store
from tunedb.transfer.search import modelcache

from helpers import kernel_tuner_file, replay_history_db


def test_a_replay_finds_the_stores_base_model_in_its_cache(tmp_path):
    replays = {d: ReplayData(kernel_tuner_file(d)) for d in ("W7800", "A100")}
    path = replay_history_db(tmp_path / "db", replays, ("A100",))
    inner = ParquetStore.open(path)
    try:
        family = replays["A100"].workload["family"]
        modelcache.clear_memory()
        fitted = modelcache.base_model(inner, family)
        assert fitted is not None and fitted.source == "fitted"
        view = isolated_store(inner, replays["W7800"])
        assert view.cache_dir() == inner.cache_dir()
        modelcache.clear_memory()  # a new process: only the files are left
        got = modelcache.base_model(view, family)
        assert got is not None and got.source == "disk" and got.rows == fitted.rows
    finally:
        inner.close()
        modelcache.clear_memory()
