"""The record store contract (``tunedb.index.base.RecordStore``), written once and run against
every backend.  Backend-specific behaviour (crash safety, several processes, files on disk) is
tested beside each backend (tests/test_store.py, tests/test_durability.py for Parquet)."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

import tunedb
from tunedb.index.base import Entry, RecordStore, StoreStats
from tunedb.index.schema import RECORD_SCHEMA

T1 = {"kind": "cpu", "name": "alpha", "compiler": "gcc 12", "vector_bits": 256, "threads": 1}
T2 = {"kind": "cpu", "name": "beta", "compiler": "gcc 12", "vector_bits": 512, "threads": 1}
W = {"family": "matmul", "M": 64, "N": 64, "K": 64}
W2 = {"family": "matmul", "M": 128, "N": 128, "K": 128}


def recs(n, target=T1, workload=W, base=1e-3):
    return [tunedb.Record(target, workload, {"tile": i}, [base * (i + 1), base * (i + 1.1)]) for i in range(n)]


BACKENDS = ["parquet", "memory", "postgres", "layered"]


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path) -> RecordStore:
    if request.param == "postgres":
        s = tunedb.open(request.getfixturevalue("postgres_url"))
    elif request.param == "layered":
        from tunedb.index.layered import LayeredStore

        s = LayeredStore([tunedb.open(tmp_path / "top"), tunedb.open("memory:lower")])
    else:
        s = tunedb.open(tmp_path / "db") if request.param == "parquet" else tunedb.open("memory:test")
    yield s
    s.close()


def test_open_gives_the_backend_and_location(store):
    assert isinstance(store, RecordStore)
    assert isinstance(store.location, str) and store.location
    assert len(store) == 0 and store.best(T1, W) == [] and store.lookup(T1, W, {"tile": 0}) is None


def test_commit_lookup_best(store):
    rs = recs(20)
    assert store.commit(rs) == 20
    assert store.commit(rs) == 0  # idempotent by record_id
    assert store.commit(rs[0]) == 0
    failed = tunedb.Record(T1, W, {"tile": 99}, [], status="runtime_error", error="segfault")
    assert store.commit(failed) == 1
    assert len(store) == 21
    hit = store.lookup(T1, W, {"tile": 3})
    assert hit is not None and hit.record_id == rs[3].record_id and hit.costs == rs[3].costs
    assert store.lookup(T1, W, {"tile": 99}).status == "runtime_error"  # failures answer too
    assert store.lookup(T1, W, {"tile": 1000}) is None
    assert store.lookup(T2, W, {"tile": 3}) is None  # another target
    best = store.best(T1, W, k=3)
    assert [r.config["tile"] for r in best] == [0, 1, 2] and all(r.ok for r in best)
    assert store.best(T1, W, k=0) == [] and len(store.best(T1, W, k=100)) == 20


def test_arguments_by_record_key_name_and_canonical_json(store):
    rs = recs(3)
    store.commit(rs)
    r = rs[1]
    by_keys = store.lookup(r.target_key, r.workload_key, r.config_key)
    by_name = store.lookup("alpha", dict(reversed(list(W.items()))), {"tile": 1.0})  # key order, 1.0 == 1
    by_record = store.lookup(r, r, r.config)
    assert by_keys.record_id == by_name.record_id == by_record.record_id == r.record_id
    assert store.lookup(T1, W, {"tile": True}) is None  # True is not 1
    assert [x.record_id for x in store.lookup_many(T1, W, [{"tile": 2}, {"tile": 7}, {"tile": 0}])
            if x is not None] == [rs[2].record_id, rs[0].record_id]
    assert store.lookup_many(T1, W, [{"tile": 7}]) == [None]


def test_latest_measurement_answers_and_best_is_fastest_per_config(store):
    store.commit(tunedb.Record(T1, W, {"tile": 1}, [2.0]))
    time.sleep(0.002)
    store.commit(tunedb.Record(T1, W, {"tile": 1}, [1.0]))
    time.sleep(0.002)
    store.commit(tunedb.Record(T1, W, {"tile": 1}, [3.0]))
    assert store.lookup(T1, W, {"tile": 1}).cost == 3.0
    assert [r.cost for r in store.best(T1, W, k=5)] == [1.0]  # one per config, its fastest


def test_repeated_measurements_of_one_config_are_all_counted(store):
    """A re-measurement is a new record: len, records() and change_token see it at once (the
    Parquet handle once counted its own commits by triple and missed repeats until a refresh)."""
    first = tunedb.Record(T1, W, {"tile": 1}, [2.0])
    store.commit(first)
    token = store.change_token()
    for cost in (1.0, 3.0):
        store.commit(tunedb.Record(T1, W, {"tile": 1}, [cost]))
    assert len(store) == 3 == store.records().num_rows
    assert store.change_token() != token
    store.commit(first)  # the same record_id again: a no-op
    assert len(store) == 3 == store.records().num_rows


def test_invalid_records_raise_and_store_nothing(store):
    good = recs(2)
    bad = tunedb.Record(T1, W, {"tile": 5}, [1.0])
    object.__setattr__(bad, "status", "exploded")
    with pytest.raises(ValueError, match="status"):
        store.commit([*good, bad])
    assert len(store) == 0 and store.lookup(T1, W, {"tile": 0}) is None
    with pytest.raises(ValueError):
        tunedb.Record(T1, {"M": 1}, {"tile": 1}, [1.0])  # no family


def test_record_batch_commit(store):
    batch = tunedb.RecordBatch.from_columns(target=[T1] * 3, workload=[W] * 3,
                                            config=[{"tile": 1}, {"tile": 2}, {"tile": 3}],
                                            costs=[[3e-3], [1e-3], [2e-3]], source="imported:test")
    assert store.commit(batch) == 3
    assert [r.config["tile"] for r in store.best(T1, W, k=3)] == [2, 3, 1]
    assert store.lookup(T1, W, {"tile": 2}).source == "imported:test"


def test_records_table_and_filters(store):
    store.commit(recs(4) + recs(2, target=T2) + recs(3, workload=W2))
    t = store.records()
    assert isinstance(t, pa.Table) and t.schema.names == RECORD_SCHEMA.names and t.num_rows == 9
    assert store.records(T2).num_rows == 2
    assert store.records(T1, W2).num_rows == 3
    assert store.records(workload=W).num_rows == 6
    assert len(set(t.column("record_id").to_pylist())) == 9
    got = list(store.iter_records(T1, W))
    assert sorted(r.config["tile"] for r in got) == [0, 1, 2, 3] and all(isinstance(r, tunedb.Record) for r in got)


def test_entries_targets_find_target(store):
    store.commit(recs(4) + recs(2, target=T2) + recs(3, workload=W2))
    store.commit(tunedb.Record(T2, W, {"tile": 50}, [], status="timeout"))
    e = store.entries()
    assert e.num_rows == 3
    el = store.entry_list()
    assert all(isinstance(x, Entry) for x in el)
    by = {(x.target_name, x.workload["M"]): x for x in el}
    assert by[("beta", 64)].records == 3 and by[("beta", 64)].ok_records == 2
    assert by[("alpha", 64)].best_cost == pytest.approx(1.05e-3)
    ts = store.targets()
    assert [(t["target_name"], t["records"]) for t in ts] == [("alpha", 7), ("beta", 3)]
    assert store.find_target("beta") == tunedb.Record(T2, W, {}).target
    key = ts[0]["target_key"]
    assert store.find_target(key)["name"] == "alpha" and store.find_target(key[:8])["name"] == "alpha"
    assert store.find_target("gamma") is None


def test_invalidate(store):
    store.commit(recs(3))
    key = store.invalidate("alpha")
    assert key == tunedb.Record(T1, W, {}).target_key
    assert store.lookup(T1, W, {"tile": 1}) is None and store.best(T1, W) == []
    assert store.records(include_stale=False).num_rows == 0 and store.records().num_rows == 3
    assert store.stats().stale_targets == [key]
    time.sleep(0.002)
    fresh = tunedb.Record(T1, W, {"tile": 1}, [5e-3])
    store.commit(fresh)
    assert store.lookup(T1, W, {"tile": 1}).record_id == fresh.record_id
    assert [r.record_id for r in store.best(T1, W, k=3)] == [fresh.record_id]
    with pytest.raises(ValueError):
        store.invalidate({"kind": "cpu", "name": "never-seen"})


def test_maintenance_keeps_answers(store):
    rs = recs(10)
    store.commit(rs)
    twin = tunedb.Record(T1, W, {"tile": 0}, list(rs[0].costs), timestamp=rs[0].timestamp)
    store.commit(twin)  # the same measurement again, another record id
    before = [r.record_id for r in store.best(T1, W, k=10)]
    st = store.compact()
    assert st["rows_after"] == st["rows_before"] == 11
    assert [r.record_id for r in store.best(T1, W, k=10)][1:] == before[1:]
    assert store.dedup()["removed"] == 1 and len(store) == 10
    assert store.forget(keep_top=3)["removed"] == 7
    assert [r.config["tile"] for r in store.best(T1, W, k=10)] == [0, 1, 2]
    with pytest.raises(ValueError):
        store.forget()
    with pytest.raises(ValueError):
        store.forget(keep_top=-1)
    store.commit(recs(2, target=T2))
    assert store.forget(target="beta")["removed"] == 2 and store.best(T2, W) == []
    assert store.forget(older_than_days=0.0)["removed"] == 3 and len(store) == 0


def test_stats_and_hit_rate(store):
    store.commit(recs(5) + recs(1, target=T2, workload=W2))
    store.lookup(T1, W, {"tile": 1})
    store.lookup(T1, W, {"tile": 77})
    s = store.stats()
    assert isinstance(s, StoreStats)
    assert (s.records, s.targets, s.workloads, s.entries) == (6, 2, 2, 2)
    assert (s.lookups, s.hits, s.hit_rate) == (2, 1, 0.5)
    d = s.to_dict()
    assert d["hit_rate"] == 0.5 and d["location"] == store.location


def test_change_token_and_cache_dir(store):
    t0 = store.change_token()
    store.commit(recs(1))
    t1 = store.change_token()
    assert t1 != t0 and store.change_token() == t1
    store.invalidate("alpha")
    assert store.change_token() != t1
    d = store.cache_dir()
    d.mkdir(parents=True, exist_ok=True)
    (d / "probe").write_text("x")  # derived data may be written there


def test_nearest_sees_committed_entries(store):
    store.commit(recs(3) + recs(3, target=T2) + recs(2, workload=W2))
    got = store.nearest(T1, W, k=3, exclude_target=True)
    assert [m.target_name for m in got] == ["beta"]
    assert got[0].best and got[0].best[0].config == {"tile": 0}
    got = store.nearest(T1, {"family": "matmul", "M": 100, "N": 100, "K": 100}, k=5)
    assert {(m.target_name, m.workload["M"]) for m in got} == {("alpha", 64), ("beta", 64), ("alpha", 128)}
    store.commit(recs(1, target={**T2, "name": "gamma"}))
    assert "gamma" in [m.target_name for m in store.nearest(T1, W, k=5)]  # the index follows commits


def test_verdicts_refute_a_record_without_deleting_it(store):
    t, w = T1, W
    poisoned = tunedb.Record(t, w, {"tile": 1}, [1e-9], source="imported:kernel_tuner", origin="cache.json")
    real = tunedb.Record(t, w, {"tile": 1}, [2e-3])
    other = tunedb.Record(t, w, {"tile": 2}, [1e-3])
    store.commit([poisoned])
    assert store.lookup(t, w, {"tile": 1}).record_id == poisoned.record_id
    store.commit([real, other])
    assert [r.record_id for r in store.best(t, w, 2)] == [poisoned.record_id, other.record_id]
    token = store.change_token()
    assert store.mark({poisoned.record_id: "refuted", other.record_id: "verified"}) == 2
    assert store.change_token() != token
    assert store.verdicts() == {poisoned.record_id: "refuted", other.record_id: "verified"}
    # the config answers with its next measurement; the refuted one stays in records()
    assert [(r.config["tile"], r.cost) for r in store.best(t, w, 5)] == [(2, 1e-3), (1, 2e-3)]
    assert store.lookup(t, w, {"tile": 1}).record_id == real.record_id
    assert poisoned.record_id in store.records().column("record_id").to_pylist()
    assert len(store) == 3
    with pytest.raises(ValueError, match="no such record"):
        store.mark({"0" * 32: "refuted"})
    with pytest.raises(ValueError, match="not one of"):
        store.mark({real.record_id: "maybe"})
    assert store.verdicts() == {poisoned.record_id: "refuted", other.record_id: "verified"}
    store.mark({poisoned.record_id: "verified"})  # the latest verdict wins
    assert store.best(t, w, 1)[0].record_id == poisoned.record_id


def test_a_refuted_latest_measurement_does_not_answer_lookup(store):
    poisoned = tunedb.Record(T1, W, {"tile": 7}, [1e-9], source="imported:autotvm")
    store.commit(poisoned)
    store.mark({poisoned.record_id: "refuted"})
    assert store.lookup(T1, W, {"tile": 7}) is None and store.best(T1, W, 3) == []


def test_threads_commit_and_read_concurrently(store):
    errors: list[BaseException] = []

    def writer(i):
        try:
            for j in range(20):
                store.commit(tunedb.Record(T1, W, {"tile": i * 100 + j}, [1e-3 + j * 1e-6]))
                store.lookup(T1, W, {"tile": i * 100})
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(store) == 80 and store.records().num_rows == 80
    assert all(store.lookup(T1, W, {"tile": i * 100 + 19}) is not None for i in range(4))


def test_context_manager_closes_and_keeps_data(tmp_path):
    with tunedb.open(tmp_path / "db") as s:
        s.commit(recs(2))
    assert len(tunedb.open(tmp_path / "db")) == 2
    with tunedb.open("memory:") as m:
        m.commit(recs(2))
        assert len(m) == 2  # a memory store lives as long as its handle
