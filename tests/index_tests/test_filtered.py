"""The FilteredStore view beyond the contract suite (tests/index_tests/test_store_contract.py runs
that): look-ups answer only records that pass the filter, everything else is the inner store's
(real Parquet directories and memory stores)."""

from __future__ import annotations

import time

import pytest

from tunedb.index import ParquetStore
from tunedb.index.contract.base import RecordStore
from tunedb.index.memory.store import MemoryStore
from tunedb.index.model.record import Record
from tunedb.index.views.filtered import FilteredStore

T = {"kind": "gpu", "name": "gpu-x"}
W = {"family": "conv", "n": 1}


def rec(cfg: int, cost: float, source: str = "measured") -> Record:
    time.sleep(0.002)  # distinct commit times: "latest" is well defined
    return Record(T, W, {"c": cfg}, costs=[cost], source=source)


def measured_only(r: Record) -> bool:
    return r.source == "measured"


@pytest.fixture(params=["memory", "parquet"])
def store(request, tmp_path) -> RecordStore:
    return MemoryStore() if request.param == "memory" else ParquetStore.open(tmp_path / "db")


def test_a_lookup_answers_the_latest_record_that_passes(store):
    old = rec(1, 2e-3)
    store.commit(old)
    store.commit(rec(1, 1e-3, source="imported:autotvm"))  # the store's own answer now: filtered out
    store.commit(rec(2, 5e-3, source="imported:autotvm"))  # no record of config 2 passes
    view = FilteredStore(store, measured_only, name="measured")
    assert store.lookup(T, W, {"c": 1}).source == "imported:autotvm"
    assert view.lookup(T, W, {"c": 1}).record_id == old.record_id
    assert view.lookup(T, W, {"c": 2}) is None and view.lookup(T, W, {"c": 3}) is None
    assert [a is not None for a in view.lookup_many(T, W, [{"c": 1}, {"c": 2}])] == [True, False]
    assert list(view.lookup_batch(T, W, [{"c": 1}, {"c": 2}]).found) == [True, False]
    assert {r.record_id for r in view.entry_records(T, W)} == {old.record_id}
    assert [c.record.record_id for c in view.best_costs(T, W, k=5)] == [old.record_id]
    assert view.cost(T, W, {"c": 2}) is None and store.cost(T, W, {"c": 2}) is not None
    s = view.stats()
    assert (s.lookups, s.hits) == (7, 3) and s.records == store.stats().records == 3


def test_a_refuted_latest_passing_record_answers_none(store):
    a, b = rec(1, 2e-3), rec(1, 3e-3)
    store.commit(a)
    store.commit(b)
    store.commit(rec(1, 1e-3, source="imported:autotvm"))
    view = FilteredStore(store, measured_only, name="measured")
    assert view.lookup(T, W, {"c": 1}).record_id == b.record_id
    store.mark({b.record_id: "refuted"})
    assert view.lookup(T, W, {"c": 1}) is None


def test_everything_but_lookups_is_the_inner_stores(store):
    view = FilteredStore(store, measured_only, name="measured")
    assert view.commit([rec(1, 2e-3), rec(2, 1e-3, source="imported:autotvm")]) == 2
    assert len(view) == len(store) == 2
    assert view.records().num_rows == store.records().num_rows == 2  # bulk reads are not filtered
    assert view.entries().equals(store.entries()) and view.targets() == store.targets()
    key = view.invalidate("gpu-x")
    assert store.stale_targets() == view.stale_targets() == [key]
    assert view.size_bytes() == store.size_bytes()
    assert view.location == store.location and view.change_token() != store.change_token()
    assert view.cache_dir().is_relative_to(store.cache_dir())


def test_the_view_needs_a_store_and_a_filter(store):
    with pytest.raises(ValueError, match="needs a filter"):
        FilteredStore(store)
    with pytest.raises(ValueError, match="wraps a RecordStore"):
        FilteredStore({"not": "a store"}, measured_only)
