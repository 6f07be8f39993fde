"""The record store contract suite: every test of ``tunedb.index.contract.base.RecordStore``, written once,
for any backend -- tunedb's own and third-party ones -- to run against itself.

Two plain classes (their names do not start with ``Test``, so pytest never collects them
themselves; it collects the tests of every ``Test*`` subclass):

``RecordStoreTests``
    The whole contract of a writable store.  The subclass provides a ``store`` fixture: a new,
    empty store, closed after the test.  Optionally it overrides :meth:`RecordStoreTests.reopen`
    (a second handle on the same storage, for the tests of what one handle sees of another's
    commits; the default, None, uses the one handle twice, as for an in-process store).
    It includes every test of ``ReadOnlyStoreTests`` (the store is filled by :func:`prefill`).

``ReadOnlyStoreTests``
    The reads only, for a store that cannot be written (a read-only snapshot): the subclass
    provides a ``filled_store`` fixture, a store holding exactly what :func:`prefill` writes
    (write it with any writable backend, then open your store read-only over it).

A third-party backend runs the suite with five lines in one of its test files::

    from tunedb.index.testing import RecordStoreTests

    class TestMyStore(RecordStoreTests):
        @pytest.fixture
        def store(self, tmp_path):
            with MyStore(tmp_path / "db") as s:
                yield s

and a read-only one with ``ReadOnlyStoreTests`` and a ``filled_store`` fixture::

    @pytest.fixture
    def filled_store(self, tmp_path):
        with tunedb.open(tmp_path / "db") as w:
            prefill(w)
        with MySnapshotStore(tmp_path / "db") as s:
            yield s

A test that does not apply to a backend is skipped in the subclass by overriding it
(``def test_x(store): pytest.skip("why")``).  The fixtures may take any other fixture
(``tmp_path``, a server's URL).  Importing this module needs pytest (and what tunedb itself
needs); ``import tunedb`` never imports it.
"""

from __future__ import annotations

import datetime as _dt
import threading
import time
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute below
import pytest

from tunedb.index.contract.base import Entry, RecordStore, StoreStats
from tunedb.index.model.batch import RecordBatch
from tunedb.index.model.estimate import rank
from tunedb.index.model.keys import MAX_JSON_DEPTH, canonical_json, key_of_text
from tunedb.index.model.record import MAX_RECORD_BYTES, Record
from tunedb.index.model.schema import RECORD_SCHEMA

T1 = {"kind": "cpu", "name": "alpha", "compiler": "gcc 12", "vector_bits": 256, "threads": 1}


T2 = {"kind": "cpu", "name": "beta", "compiler": "gcc 12", "vector_bits": 512, "threads": 1}


W = {"family": "matmul", "M": 64, "N": 64, "K": 64}


W2 = {"family": "matmul", "M": 128, "N": 128, "K": 128}


def recs(n: int, target: dict = T1, workload: dict = W, base: float = 1e-3) -> list[Record]:
    """``n`` ok records of (target, workload), configs ``{"tile": i}``, costs rising with ``i``."""
    return [Record(target, workload, {"tile": i}, [base * (i + 1), base * (i + 1.1)]) for i in range(n)]


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
    out.append(Record(T1, W, {"tile": 90 + len(tag)}, [], status="runtime_error", error="segfault " + tag))
    out.append(Record(T2, W2, {"tile": 7}, [4e-3], source="imported:csv", origin="x.csv" + tag,
                             host="elsewhere", meta={"run": tag}, compile_s=1.5))
    out.append(Record(T1, W, {"tile": 0}, [9e-4], meta={"again": tag}))
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


HOSTILE = ["it's \"quoted\"", "back\\slash \\N \\. %s $1 %(x)s", "crlf\r\nline", "'; DROP TABLE records; --",
           "\U0001f680 non-BMP \U00010348", "tab\tsep,comma", "a\u0000b"]


# --------------------------------------------------------------------- a pre-filled store
#: a third target: its first records are stale (committed before it was invalidated), its last is not
T3 = {"kind": "gpu", "name": "gamma", "arch": "sm_90"}
#: the run summary :func:`prefill` stores
PREFILL_RUN = {"kind": "tune", "run_id": "ab" * 16, "trials": 3, "best_cost": 1e-3, "configs": [{"tile": 0}]}
_T0 = _dt.datetime(2026, 1, 5, 12, 0, tzinfo=_dt.timezone.utc)


def _at(i: int, target: dict, workload: dict, config: dict, costs: list, **kw) -> Record:
    """Record number ``i`` of the prefill: its id and timestamp follow from ``i``."""
    return Record(target, workload, config, costs, timestamp=_T0 + _dt.timedelta(seconds=i),
                  record_id=key_of_text(f"tunedb.index.testing prefill {i}"), **kw)


def prefill_commits() -> list[list[Record]]:
    """The records :func:`prefill` commits, one list per commit, in order (the same records,
    ids included, every call): two targets and two workloads with ok and failed records,
    provenance set, a config measured again later (the later record answers lookup),
    confirmation re-measurements, hostile text, and ``T3``'s records around an invalidation."""
    first = [_at(i, T1, W, {"tile": i}, [1e-3 * (i + 1), 1e-3 * (i + 1.1)]) for i in range(5)]
    first += [_at(10 + i, T2, W, {"tile": i}, [2e-3 * (i + 1)], source="imported:autotvm", origin="tophub.log")
              for i in range(2)]
    first += [_at(20 + i, T1, W2, {"tile": i}, [2e-3 * (i + 1)], meta={"origin": "random"}) for i in range(3)]
    first.append(_at(30, T1, W, {"tile": 90}, [], status="runtime_error", error="segfault"))
    first.append(_at(31, T2, W2, {"tile": 7}, [4e-3], source="imported:csv", origin="x.csv", host="elsewhere",
                     meta={"run": "r1"}, compile_s=1.5))
    first += [_at(40 + i, T1, W2, {"tile": 2}, [c], meta={"origin": "confirm"}) for i, c in enumerate((5e-3, 6e-3))]
    for i, v in enumerate(HOSTILE):
        text = v.replace("\u0000", "")
        first.append(_at(50 + i, {"kind": "cpu", "name": f"hostile {text}"}, {"family": "matmul", "note": v, "M": i},
                         {"s": v}, [1e-3], error="", session=text, meta={"v": v, text: [v]}))
    again = [_at(100, T1, W, {"tile": 0}, [9e-4], meta={"again": True})]
    stale = [_at(110 + i, T3, W, {"tile": i}, [3e-3 * (i + 1)]) for i in range(2)]
    fresh = [_at(120, T3, W, {"tile": 5}, [7e-3])]
    return [first, again, stale, fresh]


def prefill_verdicts() -> dict[str, str]:
    """The verdicts :func:`prefill` marks: ``T1``/``W`` tile 1 refuted, ``T2``/``W`` tile 0 verified."""
    first = prefill_commits()[0]
    return {first[1].record_id: "refuted", first[5].record_id: "verified"}


def prefill(store: RecordStore) -> None:
    """Write into the empty writable ``store`` what ``ReadOnlyStoreTests`` reads: the commits of
    :func:`prefill_commits` in order (``T3`` invalidated after its third commit), the verdicts of
    :func:`prefill_verdicts` and the run :data:`PREFILL_RUN`."""
    commits = prefill_commits()
    for i, c in enumerate(commits):
        store.commit(c)
        time.sleep(0.002)
        if i == 2:
            store.invalidate(T3)
            time.sleep(0.002)
    store.mark(prefill_verdicts())
    store.add_run(PREFILL_RUN)


def _key(value: dict) -> str:
    return key_of_text(canonical_json(value))


class _Expected:
    """What a store holding :func:`prefill`'s contents answers, computed from the records."""

    def __init__(self) -> None:
        commits = prefill_commits()
        self.all = [r for c in commits for r in c]
        self.verdicts = prefill_verdicts()
        stale = {r.record_id for r in commits[2]}
        self.live = [r for r in self.all if r.record_id not in stale]
        self.usable = [r for r in self.live if r.ok and self.verdicts.get(r.record_id) != "refuted"]
        self.stale_targets = [_key(T3)]

    def entry(self, target: dict, workload: dict) -> list[Record]:
        tk, wk = _key(target), _key(workload)
        return [r for r in self.usable if r.target_key == tk and r.workload_key == wk]

    def entries(self) -> dict[tuple[str, str], tuple[int, int]]:
        out: dict[tuple[str, str], list[int]] = {}
        for r in self.live:
            c = out.setdefault((r.target_key, r.workload_key), [0, 0])
            c[0] += 1
            c[1] += r.ok
        return {k: (n, ok) for k, (n, ok) in out.items()}


def _cost_row(c) -> tuple:
    """A ConfigCost as comparable values: config key and config, the estimate, the representative."""
    return c.config_key, canonical_json(c.config), c.estimate.to_dict(), c.record.record_id


def _ids(records: Sequence[Record | None]) -> list[str | None]:
    return [None if r is None else r.record_id for r in records]


class ReadOnlyStoreTests:
    """The reads of the contract, over a store holding what :func:`prefill` writes.  A subclass
    provides the ``filled_store`` fixture (see the module docstring); nothing here writes."""

    @pytest.fixture
    def filled_store(self) -> Iterator[RecordStore]:
        raise NotImplementedError("a ReadOnlyStoreTests subclass provides the filled_store fixture")

    def test_filled_store_holds_every_record_once(self, filled_store):
        s, x = filled_store, _Expected()
        assert isinstance(s, RecordStore) and isinstance(s.location, str) and s.location
        assert len(s) == len(x.all)
        t = s.records()
        assert isinstance(t, pa.Table) and t.schema.names == RECORD_SCHEMA.names
        assert sorted(t.column("record_id").to_pylist()) == sorted(r.record_id for r in x.all)
        assert sorted(s.records(include_stale=False).column("record_id").to_pylist()) == \
            sorted(r.record_id for r in x.live)
        got = {r.record_id: r for r in s.iter_records()}
        for r in x.all:
            assert (got[r.record_id].costs, got[r.record_id].config, got[r.record_id].source,
                    got[r.record_id].origin, got[r.record_id].host) == (r.costs, r.config, r.source, r.origin, r.host)

    def test_filled_lookup_answers_the_latest_live_unrefuted_measurement(self, filled_store):
        s, x = filled_store, _Expected()
        again = prefill_commits()[1][0]
        assert s.lookup(T1, W, {"tile": 0}).record_id == again.record_id  # committed later
        assert s.lookup(T1, W, {"tile": 1}) is None  # its one record is refuted
        assert s.lookup(T1, W, {"tile": 90}).status == "runtime_error"  # failures answer too
        assert s.lookup(T3, W, {"tile": 0}) is None  # stale
        assert s.lookup(T3, W, {"tile": 5}).record_id == prefill_commits()[3][0].record_id
        r = x.all[2]
        assert _ids([s.lookup(r.target_key, r.workload_key, r.config_key), s.lookup("alpha", W, {"tile": 2.0}),
                     s.lookup(r, r, r.config)]) == [r.record_id] * 3
        assert s.lookup(T1, W, {"tile": True}) is None and s.lookup(T2, W, {"tile": 4}) is None
        configs = [{"tile": i} for i in (0, 1, 2, 90, 77, 2)] + [r.config_key]
        one = [s.lookup(T1, W, c) for c in configs]
        assert _ids(s.lookup_many(T1, W, configs)) == _ids(one)
        batch = s.lookup_batch(T1, W, configs)
        assert batch.found.tolist() == [a is not None for a in one] and _ids(list(batch)) == _ids(one)

    def test_filled_lookups_count_in_stats(self, filled_store):
        s, x = filled_store, _Expected()
        before = s.stats()
        s.lookup(T1, W, {"tile": 3})
        s.lookup(T1, W, {"tile": 77})
        st = s.stats()
        assert isinstance(st, StoreStats)
        assert (st.lookups - before.lookups, st.hits - before.hits) == (2, 1)
        assert st.records == len(x.all) and st.entries == len(x.entries())
        assert st.targets == len({r.target_key for r in x.live})
        assert st.workloads == len({r.workload_key for r in x.live})
        assert st.stale_targets == x.stale_targets and st.to_dict()["location"] == s.location

    def test_filled_costs_are_the_one_estimate(self, filled_store):
        s, x = filled_store, _Expected()
        for target, workload in ((T1, W), (T1, W2), (T2, W), (T2, W2), (T3, W), (T3, W2)):
            want = rank(x.entry(target, workload), 10)
            got = s.best_costs(target, workload, k=10)
            assert [(c.config_key, c.estimate.value, c.estimate.basis) for c in got] == \
                [(c.config_key, pytest.approx(c.estimate.value), c.estimate.basis) for c in want], (target, workload)
            assert [r.config_key for r in s.best(target, workload, k=10)] == [c.config_key for c in want]
            for c in want:
                assert s.cost(target, workload, c.config_key).value == pytest.approx(c.estimate.value)
            assert sorted(r.record_id for r in s.entry_records(target, workload)) == \
                sorted(r.record_id for r in x.entry(target, workload))
        assert s.cost(T1, W, {"tile": 1}) is None and s.best(T1, W, k=0) == []
        assert s.best_costs(T1, W2, k=1)[0].config == {"tile": 2}  # confirmed: ranks first

    def test_filled_best_costs_many_equals_best_costs_per_entry(self, filled_store):
        s, x = filled_store, _Expected()
        w3 = {"family": "matmul", "M": 3, "N": 3, "K": 3}  # no records
        pairs = [(T1, W), (T2, W2), (T1, W2), (T3, W), (T2, W), (T1, w3), (T3, W2), (T1, W),
                 (_key(T2), _key(W2)), ("alpha", W2)]
        for k in (2, 1, 10):  # batched first (nothing kept yet), then one by one
            many = s.best_costs_many(pairs, k)
            assert isinstance(many, list) and len(many) == len(pairs)
            for (target, workload), got in zip(pairs, many):
                one = s.best_costs(target, workload, k)
                assert [_cost_row(c) for c in got] == [_cost_row(c) for c in one], (target, workload, k)
                tgt = {_key(T1): T1, _key(T2): T2, "alpha": T1}.get(target, target) if isinstance(target, str) \
                    else target
                wl = W2 if workload == _key(W2) else workload
                want = rank(x.entry(tgt, wl), k)
                assert [(c.config_key, c.estimate.basis, c.record.record_id) for c in got] == \
                    [(c.config_key, c.estimate.basis, c.record.record_id) for c in want], (target, workload, k)
                assert [c.estimate.value for c in got] == pytest.approx([c.estimate.value for c in want])
        assert s.best_costs_many(pairs, 0) == [[] for _ in pairs]
        assert s.best_costs_many([], 3) == []
        assert s.best_costs_many(iter([(T1, W)]), 1)[0][0].config == {"tile": 0}  # any iterable

    def test_filled_records_filters_and_projections(self, filled_store):
        s, x = filled_store, _Expected()
        for tgt, wl in ((T1, None), (T2, W), (None, W2), (T1, {"family": "conv"}), ("beta", None)):
            tk = None if tgt is None else _key(T2) if tgt == "beta" else _key(tgt)
            want = sorted(r.record_id for r in x.all if (tk is None or r.target_key == tk)
                          and (wl is None or r.workload_key == _key(wl)))
            assert sorted(s.records(tgt, wl).column("record_id").to_pylist()) == want, (tgt, wl)
        for f in FILTERS:
            assert_projections_match(s, **f)
        for bad in (["nope"], [], "cost", ["cost", "cost"]):
            with pytest.raises(ValueError):
                s.records(columns=bad)

    def test_filled_entries_targets_find_target(self, filled_store):
        s, x = filled_store, _Expected()
        e = s.entries()
        assert {(d["target_key"], d["workload_key"]): (d["records"], d["ok_records"]) for d in e.to_pylist()} == \
            x.entries()
        assert all(isinstance(v, Entry) for v in s.entry_list()) and len(s.entry_list()) == e.num_rows
        counts: dict[str, int] = {}
        for r in x.all:
            counts[r.target_key] = counts.get(r.target_key, 0) + 1
        got = {t["target_key"]: t["records"] for t in s.targets()}
        # a target's count is every stored record of it, stale ones included (as records() counts)
        assert got == counts
        assert s.find_target("beta") == Record(T2, W, {}).target and s.find_target("gamma")["arch"] == "sm_90"
        assert s.find_target(_key(T1)[:8])["name"] == "alpha" and s.find_target("delta") is None

    def test_filled_size_bytes_and_stale_targets(self, filled_store):
        s, x = filled_store, _Expected()
        assert s.stale_targets() == s.stats().stale_targets == x.stale_targets
        size = s.size_bytes()
        assert isinstance(size, int) and size >= 0 and size == s.stats().size_bytes

    def test_filled_verdicts_and_hostile_values(self, filled_store):
        s, x = filled_store, _Expected()
        assert s.verdicts() == x.verdicts
        got = {r["record_id"]: r for r in s.records().to_pylist()}
        for r in x.all[-len(HOSTILE) - 4:-4]:  # the hostile ones (the last of the first commit)
            row = got[r.record_id]
            assert (row["target"], row["workload"], row["config"], row["meta"], row["session"], row["target_name"]) \
                == (r.target_json, r.workload_json, r.config_json, r.meta_json, r.session, r.target_name)
            assert s.lookup(r.target, r.workload, r.config).record_id == r.record_id

    def test_filled_reads_leave_the_change_token_alone(self, filled_store):
        s = filled_store
        token = s.change_token()
        s.records()
        s.best(T1, W)
        s.refresh()
        assert s.change_token() == token
        d = s.cache_dir()
        d.mkdir(parents=True, exist_ok=True)  # derived data may be written there, even read-only

    def test_filled_nearest(self, filled_store):
        got = filled_store.nearest(T1, W, k=3, exclude_target=True)
        assert got and len(got) <= 3 and all(m.target_name != "alpha" for m in got)
        assert "alpha" in [m.target_name for m in filled_store.nearest(T2, W, k=20)]

    def test_filled_runs(self, filled_store):
        s = filled_store
        (run,) = [r for r in s.runs() if r["run_id"] == PREFILL_RUN["run_id"]]
        assert run == {**PREFILL_RUN, "stored": run["stored"]}
        assert [r["run_id"] for r in s.runs("tune", limit=1)] == [PREFILL_RUN["run_id"]]
        assert s.runs("nothing") == [] and s.runs(limit=0) == []


# --------------------------------------------------------------------- hostile records
#: the target and workload of the hostile-record tests
HT, HW = {"kind": "cpu", "name": "hostile"}, {"family": "matmul", "M": 2}


def _nested(depth: int) -> dict:
    """A config whose value nests ``depth`` levels of objects and lists in all (the config
    itself is level 1)."""
    v: object = 1
    for i in range(depth - 1):
        v = [v] if i % 2 else {"n": v}
    return {"deep": v}


def _forced(**fields) -> Record:
    """A Record of (HT, HW) built valid, then with ``fields`` set as they are: what a buggy or
    hostile producer hands ``commit`` without going through the constructor's checks (the
    importers' fast path builds Records this way)."""
    r = Record(HT, HW, {"forced": sorted(fields)}, [1e-3])
    for k, v in fields.items():
        object.__setattr__(r, k, v)
    return r


#: name -> (what reaches commit, the field the one-line ValueError must name).  Every backend
#: refuses each at commit, stores nothing of that commit, and reads and reopens as before.
HOSTILE_RECORDS = {
    "surrogate-error": (lambda: Record(HT, HW, {"h": 1}, [], status="runtime_error", error="x\udcff"), "error"),
    "surrogate-origin": (lambda: Record(HT, HW, {"h": 2}, [1e-3], origin="log\udcff.json"), "origin"),
    "surrogate-host": (lambda: Record(HT, HW, {"h": 3}, [1e-3], host="\ud800host"), "host"),
    "surrogate-session": (lambda: Record(HT, HW, {"h": 4}, [1e-3], session="s\udfff"), "session"),
    "surrogate-source": (lambda: Record(HT, HW, {"h": 5}, [1e-3], source="migrated:\udcff"), "source"),
    "surrogate-meta": (lambda: _forced(meta={"k": "\udcff"}, meta_json='{"k":"\udcff"}'), "meta"),
    "surrogate-config-key": (lambda: _forced(config={"\udcff": 1}, config_json='{"\udcff":1}'), "config"),
    "nul-error": (lambda: Record(HT, HW, {"h": 6}, [], status="runtime_error", error="a\x00b"), "error"),
    "over-long-error": (lambda: Record(HT, HW, {"h": 7}, [], status="runtime_error",
                                       error="e" * (MAX_RECORD_BYTES + 1)), "4 MiB"),
    "bool-cost": (lambda: _forced(costs=(True,)), "costs"),
    "str-cost": (lambda: _forced(costs=("1.0",)), "costs"),
    "huge-int-compile_s": (lambda: Record(HT, HW, {"h": 8}, [1e-3], compile_s=2**80), "compile_s"),
    "inexact-int-wall_s": (lambda: Record(HT, HW, {"h": 10}, [1e-3], wall_s=2**53 + 1), "wall_s"),
    "bool-wall_s": (lambda: Record(HT, HW, {"h": 9}, [1e-3], wall_s=True), "wall_s"),
    "text-timestamp": (lambda: _forced(timestamp="2020-01-01"), "timestamp"),
}

#: name -> (constructor arguments of a Record, the field named): data the Record and
#: RecordBatch constructors refuse, so no backend is ever handed it
UNBUILDABLE = {
    "surrogate-target": ({"target": {"kind": "cpu", "name": "x\udcff"}}, "target"),
    "surrogate-workload-key": ({"workload": {"family": "matmul", "\udcff": 1}}, "workload"),
    "surrogate-config": ({"config": {"a": ["\udcff"]}}, "config"),
    "surrogate-meta": ({"meta": {"a": {"b": "\udcff"}}}, "meta"),
    "deep-config": ({"config": _nested(MAX_JSON_DEPTH + 1)}, "config"),
    "very-deep-config": ({"config": _nested(5000)}, "config"),
    "deep-meta": ({"meta": _nested(MAX_JSON_DEPTH + 1)}, "meta"),
    "bool-cost": ({"costs": [True]}, "costs"),
    "str-cost": ({"costs": ["1.0"]}, "costs"),
    "huge-int-cost": ({"costs": [2**2000]}, "costs"),
    "text-timestamp": ({"timestamp": "2020-01-01"}, "timestamp"),
}


def _foreign_table(config_text: str | None = None, meta_text: str | None = None,
                   bad_utf8: bool = False) -> pa.Table:
    """A RECORD_SCHEMA-shaped table of one record (as another store's ``records()`` gives), with
    its config or meta column replaced by ``config_text``/``meta_text``, or its error column
    holding bytes that are not UTF-8: what ``RecordBatch.from_table`` may be handed from outside."""
    r = Record(HT, HW, {"foreign": 1}, [1e-3])
    row = r.to_row()
    row.update(target_slug="hostile", rid_hash=0, committed=r.timestamp)
    if config_text is not None:
        row["config"] = config_text
    if meta_text is not None:
        row["meta"] = meta_text
    t = pa.Table.from_pylist([row], schema=RECORD_SCHEMA)
    if bad_utf8:
        raw = pa.array([b"bad \xff utf-8"], pa.binary())
        bad = pa.Array.from_buffers(pa.string(), 1, raw.buffers())
        t = t.set_column(t.schema.get_field_index("error"), RECORD_SCHEMA.field("error"), pa.chunked_array([bad]))
    return t


#: name -> (a foreign table, what the one-line ValueError names)
HOSTILE_TABLES = {
    "escaped-surrogate-meta": (lambda: _foreign_table(meta_text='{"k":"\\udcff"}'), "meta"),
    "deep-config-text": (lambda: _foreign_table(config_text='{"a":' + "[" * 5000 + "]" * 5000 + "}"), "config"),
    "invalid-utf8-error": (lambda: _foreign_table(bad_utf8=True), "UTF8"),
}


class HostileRecordTests:
    """What no backend may store (mixed into :class:`RecordStoreTests`): hostile text, sizes,
    nesting and numbers are refused at commit with one ``ValueError`` naming the field, nothing
    of the commit is stored, and the store still reads, answers and reopens."""

    def _assert_intact(self, store: RecordStore, n: int, good: Record) -> None:
        assert len(store) == n == store.records().num_rows
        hit = store.lookup(good.target, good.workload, good.config)
        assert hit is not None and hit.record_id == good.record_id
        assert [r.record_id for r in store.best(good.target, good.workload, k=5)] == [good.record_id]
        other = self.reopen(store)
        if other is not None:
            try:
                assert len(other) == n == other.records().num_rows
                assert other.lookup(good.target, good.workload, good.config).record_id == good.record_id
            finally:
                other.close()

    @pytest.mark.parametrize("case", sorted(HOSTILE_RECORDS))
    def test_hostile_records_are_refused_at_commit_and_the_store_stays_readable(self, store, case):
        make, field = HOSTILE_RECORDS[case]
        good = Record(HT, HW, {"good": 1}, [2e-3])
        assert store.commit([good]) == 1
        bad, fresh = make(), Record(HT, HW, {"good": 2}, [3e-3])
        for given in ([fresh, bad], [bad]):
            with pytest.raises(ValueError) as e:
                store.commit(given)
            msg = str(e.value)
            assert "\n" not in msg and field in msg and len(msg) < 400, msg
            msg.encode("utf-8")  # the message itself can be printed
        with pytest.raises(ValueError):
            store.commit(RecordBatch.from_records([fresh, bad]))
        self._assert_intact(store, 1, good)

    @pytest.mark.parametrize("case", sorted(UNBUILDABLE))
    def test_unbuildable_records_are_refused_by_record_and_batch_alike(self, store, case):
        kwargs, field = UNBUILDABLE[case]
        args = {"target": HT, "workload": HW, "config": {"u": 1}, "costs": [1e-3], **kwargs}
        with pytest.raises(ValueError) as e:
            Record(**args)
        assert "\n" not in str(e.value) and f"'{field}'" in str(e.value), str(e.value)
        if field in ("target", "workload", "config", "costs"):
            with pytest.raises(ValueError) as e:
                RecordBatch.from_columns(target=[HT, args["target"]], workload=[HW, args["workload"]],
                                         config=[{"u": 0}, args["config"]], costs=[[1e-3], list(args["costs"])])
            assert "\n" not in str(e.value) and f"'{field}'" in str(e.value) and "(row 1)" in str(e.value)
        assert len(store) == 0 and store.records().num_rows == 0

    @pytest.mark.parametrize("case", sorted(HOSTILE_TABLES))
    def test_hostile_foreign_tables_are_refused_at_commit(self, store, case):
        make, what = HOSTILE_TABLES[case]
        good = Record(HT, HW, {"good": 1}, [2e-3])
        store.commit([good])
        with pytest.raises(ValueError) as e:
            store.commit(RecordBatch.from_table(make()))
        assert "\n" not in str(e.value) and what in str(e.value), str(e.value)
        self._assert_intact(store, 1, good)

    def test_extreme_but_valid_values_round_trip_on_every_backend(self, store):
        """What the checks must not refuse: integers of any size inside a JSON column (text on
        every backend), the deepest nesting allowed, non-BMP text and escaped NUL in JSON, costs
        whose sum overflows a float (their mean is finite), the largest exact ints in compile_s/wall_s."""
        big = {"seed": 2**64 - 1, "neg": -(10**40), "lim": [2**63 - 1, -(2**63)]}
        recs_ = [Record(HT, HW, big, [1e-3], compile_s=2**53, wall_s=0),
                 Record(HT, HW, _nested(MAX_JSON_DEPTH), [1e-3], meta=_nested(MAX_JSON_DEPTH)),
                 Record(HT, HW, {"text": "\U0001f680 \u00e9 \x00 \u2028"}, [1.7e308, 1.7e308],
                        error="", session="\U00010348", origin="log\\xff.json")]
        assert recs_[2].cost == 1.7e308
        assert store.commit(recs_) == 3
        rows = {r["record_id"]: r for r in store.records().to_pylist()}
        for r in recs_:
            row = rows[r.record_id]
            assert (row["config"], row["meta"], row["session"], row["origin"]) == \
                (r.config_json, r.meta_json, r.session, r.origin)
            hit = store.lookup(HT, HW, r.config)
            assert hit is not None and hit.record_id == r.record_id and hit.config == r.config
        assert rows[recs_[2].record_id]["cost"] == 1.7e308
        other = self.reopen(store)
        if other is not None:
            try:
                assert other.lookup(HT, HW, big).config == big
            finally:
                other.close()


class RecordStoreTests(ReadOnlyStoreTests, HostileRecordTests):
    """The whole contract of a writable store (the reads of :class:`ReadOnlyStoreTests` included,
    over :func:`prefill`'s contents).  A subclass provides the ``store`` fixture: a new, empty
    store (see the module docstring)."""

    @pytest.fixture
    def store(self) -> Iterator[RecordStore]:
        raise NotImplementedError("a RecordStoreTests subclass provides the store fixture")

    @pytest.fixture
    def filled_store(self, store: RecordStore) -> RecordStore:
        prefill(store)
        return store

    def reopen(self, store: RecordStore) -> RecordStore | None:
        """Another handle on ``store``'s storage (closed by the test), or None (the default) when
        only the one handle can see it (an in-process store): the test then uses it twice."""
        return None

    @pytest.fixture
    def two_handles(self, store: RecordStore) -> Iterator[tuple[RecordStore, RecordStore]]:
        """``store`` and a second handle on its storage (:meth:`reopen`; ``store`` again when None)."""
        other = self.reopen(store)
        yield store, (store if other is None else other)
        if other is not None:
            other.close()

    def test_open_gives_the_backend_and_location(self, store):
        assert isinstance(store, RecordStore)
        assert isinstance(store.location, str) and store.location
        assert len(store) == 0 and store.best(T1, W) == [] and store.lookup(T1, W, {"tile": 0}) is None

    def test_commit_lookup_best(self, store):
        rs = recs(20)
        assert store.commit(rs) == 20
        assert store.commit(rs) == 0  # idempotent by record_id
        assert store.commit(rs[0]) == 0
        failed = Record(T1, W, {"tile": 99}, [], status="runtime_error", error="segfault")
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

    def test_arguments_by_record_key_name_and_canonical_json(self, store):
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

    def test_latest_measurement_answers_and_best_is_the_estimate_per_config(self, store):
        """lookup answers with the latest record; a config's cost is the one estimator's (the median
        of its records' medians), never its fastest record: best_costs, cost and best agree."""
        store.commit(Record(T1, W, {"tile": 1}, [2.0, 2.2, 1.8]))
        time.sleep(0.002)
        store.commit(Record(T1, W, {"tile": 1}, [1.0]))
        time.sleep(0.002)
        store.commit(Record(T1, W, {"tile": 1}, [3.0, 9.0, 3.0]))
        store.commit(Record(T1, W, {"tile": 2}, [2.5]))
        store.commit(Record(T1, W, {"tile": 3}, [1.0], status="runtime_error"))
        assert store.lookup(T1, W, {"tile": 1}).costs == (3.0, 9.0, 3.0)
        best = store.best_costs(T1, W, k=5)
        assert [(c.config["tile"], c.cost, c.estimate.records) for c in best] == [(1, 2.0, 3), (2, 2.5, 1)]
        assert best[0].estimate == store.cost(T1, W, {"tile": 1}) and best[0].estimate.basis == "all"
        assert best[0].estimate.lo == 1.0 and best[0].estimate.hi == 3.0  # 3 records: their values' range
        assert [r.config["tile"] for r in store.best(T1, W, k=5)] == [1, 2]  # one representative record per config
        assert store.best(T1, W, k=5)[0].costs == (2.0, 2.2, 1.8)  # the record nearest the estimate
        assert store.cost(T1, W, {"tile": 3}) is None and store.cost(T1, W, {"tile": 4}) is None

    def test_confirmation_measurements_decide_once_there_are_two(self, store):
        """The search's own sample of a winner is biased low: with two or more confirmation
        re-measurements of a config only they count (every backend, the same estimate)."""
        store.commit(Record(T1, W, {"tile": 1}, [1.0], meta={"origin": "seed"}))
        store.commit(Record(T1, W, {"tile": 1}, [1.6], meta={"origin": "confirm"}))
        assert store.cost(T1, W, {"tile": 1}).value == pytest.approx(1.3)  # one confirmation: all count
        store.commit(Record(T1, W, {"tile": 1}, [1.4], meta={"origin": "confirm"}))
        est = store.cost(T1, W, {"tile": 1})
        assert (est.value, est.records, est.basis, est.confirmed) == (pytest.approx(1.5), 2, "confirmed", 2)
        assert store.entries().column("best_cost").to_pylist() == [pytest.approx(1.5)]

    def test_confirmed_costs_rank_before_lower_unconfirmed_ones(self, store):
        """Winner's curse at the store: a config confirmed after it was chosen ranks before a
        config whose lower cost is only a search's sample, in best, best_costs and the entry's
        best_cost alike; without any confirmation the lowest cost ranks first."""
        store.commit(Record(T1, W, {"tile": 1}, [1.0], meta={"origin": "random"}))  # a lucky sample
        store.commit(Record(T1, W, {"tile": 2}, [1.1], meta={"origin": "model"}))
        assert [c.config["tile"] for c in store.best_costs(T1, W, k=3)] == [1, 2]
        assert store.entries().column("best_cost").to_pylist() == [pytest.approx(1.0)]
        for cost in (1.3, 1.2):
            store.commit(Record(T1, W, {"tile": 2}, [cost], meta={"origin": "confirm"}))
        ranked = store.best_costs(T1, W, k=3)
        assert [c.config["tile"] for c in ranked] == [2, 1]
        assert [c.estimate.basis for c in ranked] == ["confirmed", "all"]
        assert ranked[0].estimate.value == pytest.approx(1.25) and ranked[1].estimate.value == pytest.approx(1.0)
        assert [r.config["tile"] for r in store.best(T1, W, k=2)] == [2, 1]
        assert store.entries().column("best_cost").to_pylist() == [pytest.approx(1.25)]

    def test_repeated_measurements_of_one_config_are_all_counted(self, store):
        """A re-measurement is a new record: len, records() and change_token see it at once (the
        Parquet handle once counted its own commits by triple and missed repeats until a refresh)."""
        first = Record(T1, W, {"tile": 1}, [2.0])
        store.commit(first)
        token = store.change_token()
        for cost in (1.0, 3.0):
            store.commit(Record(T1, W, {"tile": 1}, [cost]))
        assert len(store) == 3 == store.records().num_rows
        assert store.change_token() != token
        store.commit(first)  # the same record_id again: a no-op
        assert len(store) == 3 == store.records().num_rows

    def test_invalid_records_raise_and_store_nothing(self, store):
        good = recs(2)
        bad = Record(T1, W, {"tile": 5}, [1.0])
        object.__setattr__(bad, "status", "exploded")
        with pytest.raises(ValueError, match="status"):
            store.commit([*good, bad])
        assert len(store) == 0 and store.lookup(T1, W, {"tile": 0}) is None
        with pytest.raises(ValueError):
            Record(T1, {"M": 1}, {"tile": 1}, [1.0])  # no family

    def test_record_batch_commit(self, store):
        batch = RecordBatch.from_columns(target=[T1] * 3, workload=[W] * 3,
                                                config=[{"tile": 1}, {"tile": 2}, {"tile": 3}],
                                                costs=[[3e-3], [1e-3], [2e-3]], source="imported:test")
        assert store.commit(batch) == 3
        assert [r.config["tile"] for r in store.best(T1, W, k=3)] == [2, 3, 1]
        assert store.lookup(T1, W, {"tile": 2}).source == "imported:test"

    def test_records_table_and_filters(self, store):
        store.commit(recs(4) + recs(2, target=T2) + recs(3, workload=W2))
        t = store.records()
        assert isinstance(t, pa.Table) and t.schema.names == RECORD_SCHEMA.names and t.num_rows == 9
        assert store.records(T2).num_rows == 2
        assert store.records(T1, W2).num_rows == 3
        assert store.records(workload=W).num_rows == 6
        assert len(set(t.column("record_id").to_pylist())) == 9
        got = list(store.iter_records(T1, W))
        assert sorted(r.config["tile"] for r in got) == [0, 1, 2, 3] and all(isinstance(r, Record) for r in got)

    def test_entries_targets_find_target(self, store):
        store.commit(recs(4) + recs(2, target=T2) + recs(3, workload=W2))
        store.commit(Record(T2, W, {"tile": 50}, [], status="timeout"))
        e = store.entries()
        assert e.num_rows == 3
        el = store.entry_list()
        assert all(isinstance(x, Entry) for x in el)
        by = {(x.target_name, x.workload["M"]): x for x in el}
        assert by[("beta", 64)].records == 3 and by[("beta", 64)].ok_records == 2
        assert by[("alpha", 64)].best_cost == pytest.approx(1.05e-3)
        ts = store.targets()
        assert [(t["target_name"], t["records"]) for t in ts] == [("alpha", 7), ("beta", 3)]
        assert store.find_target("beta") == Record(T2, W, {}).target
        key = ts[0]["target_key"]
        assert store.find_target(key)["name"] == "alpha" and store.find_target(key[:8])["name"] == "alpha"
        assert store.find_target("gamma") is None

    def test_invalidate(self, store):
        store.commit(recs(3))
        key = store.invalidate("alpha")
        assert key == Record(T1, W, {}).target_key
        assert store.lookup(T1, W, {"tile": 1}) is None and store.best(T1, W) == []
        assert store.records(include_stale=False).num_rows == 0 and store.records().num_rows == 3
        assert store.stats().stale_targets == [key]
        time.sleep(0.002)
        fresh = Record(T1, W, {"tile": 1}, [5e-3])
        store.commit(fresh)
        assert store.lookup(T1, W, {"tile": 1}).record_id == fresh.record_id
        assert [r.record_id for r in store.best(T1, W, k=3)] == [fresh.record_id]
        with pytest.raises(ValueError):
            store.invalidate({"kind": "cpu", "name": "never-seen"})

    def test_maintenance_keeps_answers(self, store):
        rs = recs(10)
        store.commit(rs)
        twin = Record(T1, W, {"tile": 0}, list(rs[0].costs), timestamp=rs[0].timestamp)
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

    def test_size_bytes_and_stale_targets_agree_with_stats(self, store):
        assert store.stale_targets() == [] and store.size_bytes() >= 0
        store.commit(recs(3) + recs(2, target=T2))
        store.close()  # pending background work done (the handle stays usable): sizes hold still
        size = store.size_bytes()
        assert isinstance(size, int) and size == store.stats().size_bytes
        beta = store.invalidate("beta")
        assert store.stale_targets() == store.stats().stale_targets == [beta]
        alpha = store.invalidate("alpha")
        assert store.stale_targets() == store.stats().stale_targets == sorted([alpha, beta])

    def test_stats_and_hit_rate(self, store):
        store.commit(recs(5) + recs(1, target=T2, workload=W2))
        store.lookup(T1, W, {"tile": 1})
        store.lookup(T1, W, {"tile": 77})
        s = store.stats()
        assert isinstance(s, StoreStats)
        assert (s.records, s.targets, s.workloads, s.entries) == (6, 2, 2, 2)
        assert (s.lookups, s.hits, s.hit_rate) == (2, 1, 0.5)
        d = s.to_dict()
        assert d["hit_rate"] == 0.5 and d["location"] == store.location

    def test_change_token_and_cache_dir(self, store):
        t0 = store.change_token()
        store.commit(recs(1))
        t1 = store.change_token()
        assert t1 != t0 and store.change_token() == t1
        store.invalidate("alpha")
        assert store.change_token() != t1
        d = store.cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        (d / "probe").write_text("x")  # derived data may be written there

    def test_nearest_sees_committed_entries(self, store):
        store.commit(recs(3) + recs(3, target=T2) + recs(2, workload=W2))
        got = store.nearest(T1, W, k=3, exclude_target=True)
        assert [m.target_name for m in got] == ["beta"]
        assert got[0].best and got[0].best[0].config == {"tile": 0}
        got = store.nearest(T1, {"family": "matmul", "M": 100, "N": 100, "K": 100}, k=5)
        assert {(m.target_name, m.workload["M"]) for m in got} == {("alpha", 64), ("beta", 64), ("alpha", 128)}
        store.commit(recs(1, target={**T2, "name": "gamma"}))
        assert "gamma" in [m.target_name for m in store.nearest(T1, W, k=5)]  # the index follows commits

    def test_verdicts_refute_a_record_without_deleting_it(self, store):
        t, w = T1, W
        poisoned = Record(t, w, {"tile": 1}, [1e-9], source="imported:kernel_tuner", origin="cache.json")
        real = Record(t, w, {"tile": 1}, [2e-3])
        other = Record(t, w, {"tile": 2}, [1e-3])
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

    def test_best_costs_many_follows_commits_and_verdicts(self, store):
        wls = [{"family": "matmul", "M": m, "N": 8, "K": 8} for m in range(1, 5)]
        store.commit([r for w in wls for r in recs(6, workload=w)] + recs(3, target=T2, workload=wls[0]))
        pairs = [(T1, w) for w in wls] + [(T2, wls[0]), (T2, wls[1])]
        assert [[c.config["tile"] for c in got] for got in store.best_costs_many(pairs, 2)] == \
            [[0, 1]] * 5 + [[]]
        # a faster config for one entry, a refuted best of another: the next batch answers them
        store.commit(Record(T1, wls[2], {"tile": 40}, [1e-6, 1e-6]))
        store.mark({store.best_costs(T1, wls[3], 1)[0].record.record_id: "refuted"})
        got = store.best_costs_many(pairs, 3)
        assert [c.config["tile"] for c in got[2]] == [40, 0, 1]
        assert [c.config["tile"] for c in got[3]] == [1, 2, 3]
        assert [[_cost_row(c) for c in g] for g in got] == \
            [[_cost_row(c) for c in store.best_costs(t, w, 3)] for t, w in pairs]

    def test_a_refuted_latest_measurement_does_not_answer_lookup(self, store):
        poisoned = Record(T1, W, {"tile": 7}, [1e-9], source="imported:autotvm")
        store.commit(poisoned)
        store.mark({poisoned.record_id: "refuted"})
        assert store.lookup(T1, W, {"tile": 7}) is None and store.best(T1, W, 3) == []

    def test_lookup_batch_answers_as_lookup_does(self, store):
        """A population looked up in one call: the same answers as one lookup each (hits, misses,
        failures, repeats of one config, arguments by key or name), found says which, and a refuted
        latest record is no answer."""
        rs = recs(30)
        store.commit(rs[:25])
        store.commit(Record(T1, W, {"tile": 99}, [], status="compile_error", error="no"))
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

    def test_threads_commit_and_read_concurrently(self, store):
        errors: list[BaseException] = []

        def writer(i):
            try:
                for j in range(20):
                    store.commit(Record(T1, W, {"tile": i * 100 + j}, [1e-3 + j * 1e-6]))
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

    def test_records_projection_equals_full_read(self, store):
        for f in FILTERS[:2]:
            assert_projections_match(store, **f)  # an empty store: empty tables of those columns
        store.commit(mixed_records())
        store.commit(recs(80, target=T2, workload=W2, base=3e-3))  # (Parquet: a part file, not the journal)
        for f in FILTERS:
            assert_projections_match(store, **f)
        assert store.records(T1, W, columns=["cost"]).num_rows == 7  # 5 + failed + the repeat
        assert store.records(T2, W2, columns=["cost"]).num_rows == 81

    def test_records_projection_with_stale_targets(self, store):
        store.commit(mixed_records())
        store.invalidate(T1)
        time.sleep(0.002)
        store.commit(Record(T1, W, {"tile": 3}, [7e-4]))  # after the invalidation: live
        live = store.records(T1, include_stale=False, columns=["config", "cost"])
        assert live.num_rows == 1 and live.column("cost").to_pylist() == [7e-4]
        assert store.records(T1, columns=["cost"]).num_rows == 11
        for f in FILTERS:
            assert_projections_match(store, **f)
        store.compact()
        for f in FILTERS:
            assert_projections_match(store, **f)

    def test_records_projection_refuses_bad_columns(self, store):
        store.commit(recs(2))
        for bad in (["nope"], ["cost", "nope"], [], "cost", ["cost", "cost"], [1], ["Cost"]):
            for f in ({}, {"target": T1, "workload": W}, {"include_stale": False}):
                with pytest.raises(ValueError) as e:
                    store.records(f.get("target"), f.get("workload"), include_stale=f.get("include_stale", True),
                                  columns=bad)
                assert "\n" not in str(e.value)
        assert store.records(columns=None).schema.names == RECORD_SCHEMA.names  # None: every column

    def test_records_projection_sees_commits_of_another_handle(self, two_handles):
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
            pa.compute.equal(full.column("target_key"), Record(T2, W, {}).target_key)).num_rows
        for f in FILTERS:
            assert_projections_match(a, **f)

    def test_hostile_values_round_trip_unchanged(self, store):
        """Quotes, backslashes, COPY and placeholder syntax, CRLF, SQL text, non-BMP characters and a
        NUL (escaped in the JSON columns) in every JSON column and in the plain text columns (no NUL
        there: the next test): every backend stores and returns them unchanged."""
        recs = []
        for i, v in enumerate(HOSTILE):
            text = v.replace("\u0000", "")
            failed = i % 2 == 0
            recs.append(Record({"kind": "cpu", "name": f"hostile {text}"}, {"family": "matmul", "note": v, "M": i},
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
    def test_a_nul_in_a_text_field_is_refused_at_commit_on_every_backend(self, store, field):
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
        good = Record({"kind": "cpu", "name": "nul"}, {"family": "matmul", "M": 1}, {"t": 2}, [1e-3])
        bad = Record(target, workload, {"t": 1}, [1e-3], **args)
        with pytest.raises(ValueError) as e:
            store.commit([good, bad])
        assert "NUL" in str(e.value) and "\n" not in str(e.value) and f"'{field}'" in str(e.value)
        plain = {"source": "measured", "session": "", "error": "", "origin": ""}  # the good row's values
        cols = {k: [plain[k], args[k]] for k in plain}
        with pytest.raises(ValueError) as e:
            store.commit(RecordBatch.from_columns(
                target=[good.target, target], workload=[good.workload, workload], config=[{"t": 3}, {"t": 4}],
                costs=[[1e-3], [1e-3]], host=["", args["host"] or ""], **cols))
        assert "NUL" in str(e.value) and f"'{field}'" in str(e.value)
        assert len(store) == 0

    def test_the_largest_record_the_contract_allows_round_trips_and_a_byte_more_is_refused(self, store):
        """A record of exactly ``MAX_RECORD_BYTES`` (a 4 MiB config) is stored and returned
        unchanged; one byte more is refused at commit with one line, as a Record and in a batch,
        and nothing of that commit is stored."""
        target, workload = {"kind": "cpu", "name": "big"}, {"family": "matmul", "M": 1}
        empty = Record(target, workload, {"pad": ""}, [1e-3])
        pad = "x" * (MAX_RECORD_BYTES - empty.size_bytes())
        largest = Record(target, workload, {"pad": pad}, [1e-3])
        assert largest.size_bytes() == MAX_RECORD_BYTES
        assert store.commit([largest]) == 1
        hit = store.lookup(target, workload, {"pad": pad})
        assert hit is not None and hit.config["pad"] == pad
        row = next(r for r in store.records().to_pylist() if r["record_id"] == largest.record_id)
        assert row["config"] == largest.config_json
        over = Record(target, workload, {"pad": pad + "y"}, [1e-3])
        small = Record(target, workload, {"pad": "small"}, [1e-3])
        with pytest.raises(ValueError) as e:
            store.commit([small, over])
        assert "4 MiB" in str(e.value) and over.record_id in str(e.value) and "\n" not in str(e.value)
        with pytest.raises(ValueError) as e:
            store.commit(RecordBatch.from_columns(target=[target, target], workload=[workload, workload],
                                                         config=[{"pad": "small"}, {"pad": pad + "y"}],
                                                         costs=[[1e-3], [1e-3]]))
        assert "4 MiB" in str(e.value)
        assert len(store) == 1


__all__ = ["RecordStoreTests", "ReadOnlyStoreTests", "HostileRecordTests", "HOSTILE_RECORDS", "HOSTILE_TABLES",
           "UNBUILDABLE", "prefill", "prefill_commits", "prefill_verdicts", "PREFILL_RUN",
           "T1", "T2", "T3", "W", "W2", "recs", "mixed_records", "assert_projections_match", "FILTERS", "PROJECTIONS",
           "HOSTILE"]
