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


def test_latest_measurement_answers_and_best_is_the_estimate_per_config(store):
    """lookup answers with the latest record; a config's cost is the one estimator's (the median
    of its records' medians), never its fastest record: best_costs, cost and best agree."""
    store.commit(tunedb.Record(T1, W, {"tile": 1}, [2.0, 2.2, 1.8]))
    time.sleep(0.002)
    store.commit(tunedb.Record(T1, W, {"tile": 1}, [1.0]))
    time.sleep(0.002)
    store.commit(tunedb.Record(T1, W, {"tile": 1}, [3.0, 9.0, 3.0]))
    store.commit(tunedb.Record(T1, W, {"tile": 2}, [2.5]))
    store.commit(tunedb.Record(T1, W, {"tile": 3}, [1.0], status="runtime_error"))
    assert store.lookup(T1, W, {"tile": 1}).costs == (3.0, 9.0, 3.0)
    best = store.best_costs(T1, W, k=5)
    assert [(c.config["tile"], c.cost, c.estimate.records) for c in best] == [(1, 2.0, 3), (2, 2.5, 1)]
    assert best[0].estimate == store.cost(T1, W, {"tile": 1}) and best[0].estimate.basis == "all"
    assert best[0].estimate.lo == 1.0 and best[0].estimate.hi == 9.0  # 7 pooled repeats: their range
    assert [r.config["tile"] for r in store.best(T1, W, k=5)] == [1, 2]  # one representative record per config
    assert store.best(T1, W, k=5)[0].costs == (2.0, 2.2, 1.8)  # the record nearest the estimate
    assert store.cost(T1, W, {"tile": 3}) is None and store.cost(T1, W, {"tile": 4}) is None


def test_confirmation_measurements_decide_once_there_are_two(store):
    """The search's own sample of a winner is biased low: with two or more confirmation
    re-measurements of a config only they count (every backend, the same estimate)."""
    store.commit(tunedb.Record(T1, W, {"tile": 1}, [1.0], meta={"origin": "seed"}))
    store.commit(tunedb.Record(T1, W, {"tile": 1}, [1.6], meta={"origin": "confirm"}))
    assert store.cost(T1, W, {"tile": 1}).value == pytest.approx(1.3)  # one confirmation: all count
    store.commit(tunedb.Record(T1, W, {"tile": 1}, [1.4], meta={"origin": "confirm"}))
    est = store.cost(T1, W, {"tile": 1})
    assert (est.value, est.records, est.basis, est.confirmed) == (pytest.approx(1.5), 2, "confirmed", 2)
    assert store.entries().column("best_cost").to_pylist() == [pytest.approx(1.5)]


def test_confirmed_costs_rank_before_lower_unconfirmed_ones(store):
    """Winner's curse at the store: a config confirmed after it was chosen ranks before a
    config whose lower cost is only a search's sample, in best, best_costs and the entry's
    best_cost alike; without any confirmation the lowest cost ranks first."""
    store.commit(tunedb.Record(T1, W, {"tile": 1}, [1.0], meta={"origin": "random"}))  # a lucky sample
    store.commit(tunedb.Record(T1, W, {"tile": 2}, [1.1], meta={"origin": "model"}))
    assert [c.config["tile"] for c in store.best_costs(T1, W, k=3)] == [1, 2]
    assert store.entries().column("best_cost").to_pylist() == [pytest.approx(1.0)]
    for cost in (1.3, 1.2):
        store.commit(tunedb.Record(T1, W, {"tile": 2}, [cost], meta={"origin": "confirm"}))
    ranked = store.best_costs(T1, W, k=3)
    assert [c.config["tile"] for c in ranked] == [2, 1]
    assert [c.estimate.basis for c in ranked] == ["confirmed", "all"]
    assert ranked[0].estimate.value == pytest.approx(1.25) and ranked[1].estimate.value == pytest.approx(1.0)
    assert [r.config["tile"] for r in store.best(T1, W, k=2)] == [2, 1]
    assert store.entries().column("best_cost").to_pylist() == [pytest.approx(1.25)]


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
    assert store.cost(t, w, {"tile": 1}).value == pytest.approx((1e-9 + 2e-3) / 2)  # the poisoned one counts
    token = store.change_token()
    assert store.mark({poisoned.record_id: "refuted", other.record_id: "verified"}) == 2
    assert store.change_token() != token
    assert store.verdicts() == {poisoned.record_id: "refuted", other.record_id: "verified"}
    # the config's cost is its other measurement's; the refuted one stays in records()
    assert [(c.config["tile"], c.cost) for c in store.best_costs(t, w, 5)] == [(2, 1e-3), (1, 2e-3)]
    assert [r.record_id for r in store.best(t, w, 5)] == [other.record_id, real.record_id]
    assert store.lookup(t, w, {"tile": 1}).record_id == real.record_id
    assert poisoned.record_id in store.records().column("record_id").to_pylist()
    assert len(store) == 3
    with pytest.raises(ValueError, match="no such record"):
        store.mark({"0" * 32: "refuted"})
    with pytest.raises(ValueError, match="not one of"):
        store.mark({real.record_id: "maybe"})
    assert store.verdicts() == {poisoned.record_id: "refuted", other.record_id: "verified"}
    store.mark({poisoned.record_id: "verified"})  # the latest verdict wins
    assert store.cost(t, w, {"tile": 1}).value == pytest.approx((1e-9 + 2e-3) / 2)


def test_a_refuted_latest_measurement_does_not_answer_lookup(store):
    poisoned = tunedb.Record(T1, W, {"tile": 7}, [1e-9], source="imported:autotvm")
    store.commit(poisoned)
    store.mark({poisoned.record_id: "refuted"})
    assert store.lookup(T1, W, {"tile": 7}) is None and store.best(T1, W, 3) == []


def test_lookup_batch_answers_as_lookup_does(store):
    """A population looked up in one call: the same answers as one lookup each (hits, misses,
    failures, repeats of one config, arguments by key or name), found says which, and a refuted
    latest record is no answer."""
    rs = recs(30)
    store.commit(rs[:25])
    store.commit(tunedb.Record(T1, W, {"tile": 99}, [], status="compile_error", error="no"))
    store.commit(rs[25:])  # a small commit after a large one (a journal/overlay on some backends)
    configs = [{"tile": i} for i in (3, 1000, 99, 29, 3, -1, 0)] + [rs[7].config_key]
    got = store.lookup_batch(T1, W, configs)
    one = [store.lookup(T1, W, c) for c in configs]
    assert len(got) == len(configs) and got.found.tolist() == [r is not None for r in one]
    assert [None if r is None else r.record_id for r in got] == [None if r is None else r.record_id for r in one]
    assert got.hits == 6 and got[2].status == "compile_error" and got[-1].record_id == rs[7].record_id
    assert got[1] is None and got[3] is got[3]  # built once
    by_name = store.lookup_batch("alpha", W, [{"tile": 4}, {"tile": 4.0}])
    assert [r.record_id for r in by_name] == [rs[4].record_id] * 2
    assert store.lookup_batch(T2, W, configs).hits == 0 and len(store.lookup_batch(T1, W, [])) == 0
    assert [None if r is None else r.record_id for r in store.lookup_many(T1, W, configs)] == \
        [None if r is None else r.record_id for r in one]
    store.mark({rs[3].record_id: "refuted"})
    again = store.lookup_batch(T1, W, [{"tile": 3}, {"tile": 0}])
    assert again.found.tolist() == [False, True] and again[0] is None


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


# --------------------------------------------------------------------- column projection
#: projections the tests read: one column, a few in another order than RECORD_SCHEMA's, the
#: columns a filter or the de-duplication would need left out, schema-2 columns, every column
PROJECTIONS = [["cost"], ["status", "record_id", "cost"], ["workload", "config", "costs", "timestamp"],
               ["committed", "session", "meta"], ["host", "origin", "source"], ["entry_key", "lookup_key"],
               list(reversed(RECORD_SCHEMA.names))]


def mixed_records(tag: str = "") -> list:
    """Records of two targets and two workloads: ok ones, a failed one (null cost), provenance
    columns set, a record measured twice."""
    out = recs(5) + recs(2, target=T2) + recs(3, workload=W2, base=2e-3)
    out.append(tunedb.Record(T1, W, {"tile": 90 + len(tag)}, [], status="runtime_error", error="segfault " + tag))
    out.append(tunedb.Record(T2, W2, {"tile": 7}, [4e-3], source="imported:csv", origin="x.csv" + tag,
                             host="elsewhere", meta={"run": tag}, compile_s=1.5))
    out.append(tunedb.Record(T1, W, {"tile": 0}, [9e-4], meta={"again": tag}))
    return out


def assert_projections_match(s: RecordStore, **filters) -> None:
    """For every projection: ``records(**filters, columns=c)`` equals ``records(**filters).select(c)``
    (same rows in the same order, exactly the columns asked for, RECORD_SCHEMA types)."""
    full = s.records(filters.get("target"), filters.get("workload"),
                     include_stale=filters.get("include_stale", True))
    for cols in PROJECTIONS:
        got = s.records(filters.get("target"), filters.get("workload"),
                        include_stale=filters.get("include_stale", True), columns=cols)
        assert got.column_names == cols, (cols, filters)
        assert got.schema.equals(pa.schema([RECORD_SCHEMA.field(c) for c in cols])), (cols, filters)
        assert got.num_rows == full.num_rows, (cols, filters)
        assert got.equals(full.select(cols)), (cols, filters)
    # (a tuple is a sequence of names too)
    assert s.records(filters.get("target"), filters.get("workload"), include_stale=filters.get("include_stale", True),
                     columns=("record_id",)).column("record_id").to_pylist() == full.column("record_id").to_pylist()


FILTERS = [{}, {"target": T1}, {"target": "beta"}, {"target": T1, "workload": W}, {"workload": W2},
           {"target": T2, "workload": W2}, {"target": T2, "workload": {"family": "conv"}},
           {"include_stale": False}, {"target": T1, "include_stale": False},
           {"target": T1, "workload": W, "include_stale": False}]


def test_records_projection_equals_full_read(store):
    for f in FILTERS[:2]:
        assert_projections_match(store, **f)  # an empty store: empty tables of those columns
    store.commit(mixed_records())
    store.commit(recs(80, target=T2, workload=W2, base=3e-3))  # (Parquet: a part file, not the journal)
    for f in FILTERS:
        assert_projections_match(store, **f)
    assert store.records(T1, W, columns=["cost"]).num_rows == 7  # 5 + failed + the repeat
    assert store.records(T2, W2, columns=["cost"]).num_rows == 81


def test_records_projection_with_stale_targets(store):
    store.commit(mixed_records())
    store.invalidate(T1)
    time.sleep(0.002)
    store.commit(tunedb.Record(T1, W, {"tile": 3}, [7e-4]))  # after the invalidation: live
    live = store.records(T1, include_stale=False, columns=["config", "cost"])
    assert live.num_rows == 1 and live.column("cost").to_pylist() == [7e-4]
    assert store.records(T1, columns=["cost"]).num_rows == 11
    for f in FILTERS:
        assert_projections_match(store, **f)
    store.compact()
    for f in FILTERS:
        assert_projections_match(store, **f)


def test_records_projection_refuses_bad_columns(store):
    store.commit(recs(2))
    for bad in (["nope"], ["cost", "nope"], [], "cost", ["cost", "cost"], [1], ["Cost"]):
        for f in ({}, {"target": T1, "workload": W}, {"include_stale": False}):
            with pytest.raises(ValueError) as e:
                store.records(f.get("target"), f.get("workload"), include_stale=f.get("include_stale", True),
                              columns=bad)
            assert "\n" not in str(e.value)
    assert store.records(columns=None).schema.names == RECORD_SCHEMA.names  # None: every column


@pytest.fixture(params=BACKENDS)
def two_handles(request, tmp_path):
    """Two handles of one store: a second open of the same directory / database; for the
    layered store two LayeredStores over the same layers' places (the memory layer is one
    object: it lives in one handle); for the memory store the same handle twice."""
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        a, b = tunedb.open(url), tunedb.open(url)
    elif request.param == "parquet":
        a, b = tunedb.open(tmp_path / "db"), tunedb.open(tmp_path / "db")
    elif request.param == "layered":
        from tunedb.index.layered import LayeredStore

        lower = tunedb.open("memory:lower")
        lower.commit(recs(3, workload=W2, base=5e-3))
        a = LayeredStore([tunedb.open(tmp_path / "top"), lower])
        b = LayeredStore([tunedb.open(tmp_path / "top"), lower])
    else:
        a = tunedb.open("memory:test")
        b = a
    yield a, b
    a.close()
    b.close()


def test_records_projection_sees_commits_of_another_handle(two_handles):
    a, b = two_handles
    a.commit(recs(4))
    assert_projections_match(a)
    b.commit(mixed_records("b"))  # small: the Parquet store journals it
    b.commit(recs(100, target=T2, base=6e-3))  # large: a part file
    a.refresh()
    for f in FILTERS:
        assert_projections_match(a, **f)
    full = a.records()
    assert a.records(columns=["record_id"]).num_rows == full.num_rows == b.records(columns=["rid_hash"]).num_rows
    assert set(a.records(T2, columns=["origin"]).column("origin").to_pylist()) == {"", "x.csvb"}
    b.invalidate(T2)
    a.refresh()
    assert a.records(T2, include_stale=False, columns=["cost"]).num_rows == 0
    assert a.records(T2, columns=["cost"]).num_rows == full.filter(
        pa.compute.equal(full.column("target_key"), tunedb.Record(T2, W, {}).target_key)).num_rows
    for f in FILTERS:
        assert_projections_match(a, **f)


@pytest.mark.parametrize(("policy", "trusted"), [("measured", 12), ("measured,host:elsewhere", 13), ("verified", 2),
                                                 ("imported", 1)])
def test_trusted_view_projection_equals_its_full_read(tmp_path, policy, trusted):
    from tunedb.index.trust import TrustedStore

    inner = tunedb.open(tmp_path / "db")
    rs = mixed_records()
    inner.commit(rs)
    inner.mark({rs[1].record_id: "verified", rs[-2].record_id: "verified"})
    view = TrustedStore(inner, policy)
    assert inner.records().num_rows == 13 and view.records().num_rows == trusted
    assert view.records(columns=["cost"]).num_rows == trusted  # (the policy's columns are read, then dropped)
    for f in FILTERS:
        assert_projections_match(view, **f)
    with pytest.raises(ValueError):
        view.records(columns=["nope"])


def test_memory_store_filtered_read_costs_the_matching_records_not_the_store(capsys):
    """MemoryStore keeps its records' indices by target, workload and entry: a filtered read
    answers the same rows as a scan of every record, in commit order, and does not touch the
    other targets' records (the timing ratio is printed, not asserted)."""
    from tunedb.index.batch import RecordBatch
    from tunedb.index.memory import MemoryStore

    s = MemoryStore()
    many = [tunedb.Record({"kind": "cpu", "name": f"t{i % 40}"}, {"family": "mm", "M": i % 7}, {"i": i}, [1e-3])
            for i in range(20_000)]
    s.commit(RecordBatch.from_records(many))
    mine = recs(5) + recs(3, workload=W2)
    s.commit(mine[:4])
    s.commit(recs(2, target=T2))
    s.commit(mine[4:])
    # the same rows, in commit order, as a full scan filtered afterwards
    full = s.records()
    for tgt, wl in ((T1, W), (T1, None), (None, W2), (T2, W), (T1, {"family": "conv"})):
        got = s.records(tgt, wl)
        m = pa.array([True] * full.num_rows)
        if tgt is not None:
            m = pa.compute.and_(m, pa.compute.equal(full.column("target_key"), tunedb.Record(tgt, W, {}).target_key))
        if wl is not None:
            m = pa.compute.and_(m, pa.compute.equal(full.column("workload_key"), tunedb.Record(T1, wl, {}).workload_key))
        assert got.equals(full.filter(m)), (tgt, wl)
    assert s.records(T1, W).column("record_id").to_pylist() == [r.record_id for r in mine[:5]]
    # still right after a rewrite of the maps (dedup/forget rebuild them) and an invalidation
    s.forget(target=T2)
    assert s.records(T2).num_rows == 0 and s.records(T1, W2).num_rows == 3
    s.invalidate(T1)
    assert s.records(T1, include_stale=False).num_rows == 0 and s.records(T1).num_rows == 8
    # cost: one entry among 20k records of other targets vs a full read
    t0 = time.perf_counter()
    for _ in range(20):
        s.records(T1, W)
    one = (time.perf_counter() - t0) / 20
    t0 = time.perf_counter()
    s.records()
    every = time.perf_counter() - t0
    with capsys.disabled():
        print(f"\nMemoryStore, 20k records: records(target, workload) of 5 records {one * 1e3:.3f} ms, "
              f"records() {every * 1e3:.1f} ms (ratio {every / one:.0f}x)")


def test_parquet_projection_of_a_schema1_db_reads_missing_columns_as_unknown(tmp_path):
    """A schema-1 DB's files (and journal) lack host/origin: a projection of them reads ``""``
    (unknown), as the full read does, without failing on the missing column."""
    import shutil
    from pathlib import Path

    from tunedb.index.parquet.store import TuningDB

    src = Path(__file__).resolve().parent / "data" / "db-schema1"
    shutil.copytree(src, tmp_path / "db")
    with TuningDB.open(tmp_path / "db") as db:
        assert db.schema_version == 1
        full = db.records()
        assert full.num_rows > 0
        for f in ({}, {"include_stale": False}, {"target": full.column("target_key")[0].as_py()}):
            assert_projections_match(db, **f)
        got = db.records(columns=["origin", "host"])
        assert set(got.column("host").to_pylist()) == {""} and set(got.column("origin").to_pylist()) == {""}


HOSTILE = ["it's \"quoted\"", "back\\slash \\N \\. %s $1 %(x)s", "crlf\r\nline", "'; DROP TABLE records; --",
           "\U0001f680 non-BMP \U00010348", "tab\tsep,comma", "a\u0000b"]


def test_hostile_values_round_trip_unchanged(store):
    """Quotes, backslashes, COPY and placeholder syntax, CRLF, SQL text, non-BMP characters and a
    NUL (escaped in the JSON columns) in every JSON column and in the plain text columns (no NUL
    there: the next test): every backend stores and returns them unchanged."""
    recs = []
    for i, v in enumerate(HOSTILE):
        text = v.replace("\u0000", "")
        failed = i % 2 == 0
        recs.append(tunedb.Record({"kind": "cpu", "name": f"hostile {text}"}, {"family": "matmul", "note": v, "M": i},
                                  {"s": v}, [] if failed else [1e-3], status="runtime_error" if failed else "ok",
                                  error=text if failed else "", session=text, meta={"v": v, text: [v]}))
    assert store.commit(recs) == len(recs)
    got = {r["record_id"]: r for r in store.records().to_pylist()}
    for r in recs:
        row = got[r.record_id]
        assert (row["target"], row["workload"], row["config"], row["meta"], row["error"], row["session"],
                row["target_name"]) == (r.target_json, r.workload_json, r.config_json, r.meta_json, r.error,
                                        r.session, r.target_name)
        hit = store.lookup(r.target, r.workload, r.config)
        assert hit is not None and hit.record_id == r.record_id and hit.config == r.config


@pytest.mark.parametrize("field", ["target_name", "family", "error", "session", "source", "host", "origin"])
def test_a_nul_in_a_text_field_is_refused_at_commit_on_every_backend(store, field):
    """A NUL character in a plain text column: one ValueError at commit, for a Record and for a
    batch alike, and nothing of the commit stored."""
    target, workload = {"kind": "cpu", "name": "nul"}, {"family": "matmul", "M": 1}
    args: dict = {"source": "measured", "session": "", "error": "", "host": None, "origin": ""}
    if field == "target_name":
        target = {"kind": "cpu", "name": "n\u0000ul"}
    elif field == "family":
        workload = {"family": "mat\u0000mul", "M": 1}
    else:
        args[field] = {"source": "migrated:x\u0000"}.get(field, f"{field}\u0000")
    good = tunedb.Record({"kind": "cpu", "name": "nul"}, {"family": "matmul", "M": 1}, {"t": 2}, [1e-3])
    bad = tunedb.Record(target, workload, {"t": 1}, [1e-3], **args)
    with pytest.raises(ValueError) as e:
        store.commit([good, bad])
    assert "NUL" in str(e.value) and "\n" not in str(e.value) and f"'{field}'" in str(e.value)
    plain = {"source": "measured", "session": "", "error": "", "origin": ""}  # the good row's values
    cols = {k: [plain[k], args[k]] for k in plain}
    with pytest.raises(ValueError) as e:
        store.commit(tunedb.RecordBatch.from_columns(
            target=[good.target, target], workload=[good.workload, workload], config=[{"t": 3}, {"t": 4}],
            costs=[[1e-3], [1e-3]], host=["", args["host"] or ""], **cols))
    assert "NUL" in str(e.value) and f"'{field}'" in str(e.value)
    assert len(store) == 0


def test_the_largest_record_the_contract_allows_round_trips_and_a_byte_more_is_refused(store):
    """A record of exactly ``MAX_RECORD_BYTES`` (a 4 MiB config) is stored and returned
    unchanged; one byte more is refused at commit with one line, as a Record and in a batch,
    and nothing of that commit is stored."""
    from tunedb.index.record import MAX_RECORD_BYTES

    target, workload = {"kind": "cpu", "name": "big"}, {"family": "matmul", "M": 1}
    empty = tunedb.Record(target, workload, {"pad": ""}, [1e-3])
    pad = "x" * (MAX_RECORD_BYTES - empty.size_bytes())
    largest = tunedb.Record(target, workload, {"pad": pad}, [1e-3])
    assert largest.size_bytes() == MAX_RECORD_BYTES
    assert store.commit([largest]) == 1
    hit = store.lookup(target, workload, {"pad": pad})
    assert hit is not None and hit.config["pad"] == pad
    row = next(r for r in store.records().to_pylist() if r["record_id"] == largest.record_id)
    assert row["config"] == largest.config_json
    over = tunedb.Record(target, workload, {"pad": pad + "y"}, [1e-3])
    small = tunedb.Record(target, workload, {"pad": "small"}, [1e-3])
    with pytest.raises(ValueError) as e:
        store.commit([small, over])
    assert "4 MiB" in str(e.value) and over.record_id in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ValueError) as e:
        store.commit(tunedb.RecordBatch.from_columns(target=[target, target], workload=[workload, workload],
                                                     config=[{"pad": "small"}, {"pad": pad + "y"}],
                                                     costs=[[1e-3], [1e-3]]))
    assert "4 MiB" in str(e.value)
    assert len(store) == 1
