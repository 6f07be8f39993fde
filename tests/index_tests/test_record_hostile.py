"""Hostile records through the record API (docs/security.md): the reproductions of the security
probe -- a lone surrogate in a text field, deep nesting, bool/str costs, text timestamps, ints a
float column cannot hold -- refused with one ValueError naming the field, and a Parquet and a
memory DB that still read and reopen afterwards.  The same cases run against every backend in
the contract suite (``tunedb.index.testing.store_tests.HostileRecordTests``)."""

from __future__ import annotations

import datetime as _dt
import math
import re
import sys

import pyarrow as pa
import pytest

import tunedb
from tunedb.index.model.batch import RecordBatch
from tunedb.index.model.keys import MAX_JSON_DEPTH, canonical_json, normalise
from tunedb.index.model.record import MAX_EXACT_INT, Record, mean_cost, number_problem, text_problem

T = {"kind": "cpu", "name": "t"}
W = {"family": "matmul", "M": 4}


def _nest(depth: int) -> object:
    v: object = 0
    for _ in range(depth):
        v = [v]
    return v


def test_text_problem_names_the_first_lone_surrogate() -> None:
    assert text_problem("plain") is None and text_problem("caf\u00e9 \U0001f680") is None
    assert text_problem("a\udcffb\ud800") == "holds a lone surrogate (U+DCFF) that UTF-8 cannot encode"
    assert text_problem("\ud83d\ude80") is not None  # a surrogate pair in a str is still two lone surrogates


@pytest.mark.parametrize("field", ["error", "origin", "host", "session", "source"])
def test_a_lone_surrogate_in_a_text_field_is_refused_and_the_parquet_db_stays_readable(tmp_path, field) -> None:
    """The probe: ``\\udcff`` in one text field passed validation, commit returned, and every
    later read, close and reopen of the Parquet DB raised UnicodeEncodeError."""
    value = "migrated:\udcff" if field == "source" else "x\udcff"
    good = Record(T, W, {"a": 1}, [1.0])
    bad = Record(T, W, {"a": 2}, [1.0], **{field: value})
    with tunedb.open(tmp_path / "db") as db:
        db.commit([good])
        with pytest.raises(ValueError) as e:
            db.commit([bad])
        assert str(e.value) == (f"record {bad.record_id}: field '{field}' holds a lone surrogate (U+DCFF) that "
                                "UTF-8 cannot encode")
        with pytest.raises(ValueError, match=f"'{field}' holds a lone surrogate"):
            db.commit(RecordBatch.from_columns(target=[T], workload=[W], config=[{"a": 3}], costs=[[1.0]],
                                               **{field: [value]}))
        assert len(db) == 1 and db.records().num_rows == 1
    with tunedb.open(tmp_path / "db") as db:
        assert len(db) == 1 and db.lookup(T, W, {"a": 1}).record_id == good.record_id


@pytest.mark.parametrize("where", ["target", "workload", "config", "meta"])
def test_a_lone_surrogate_anywhere_in_a_json_column_is_refused_when_built(where) -> None:
    args = {"target": T, "workload": W, "config": {"a": 1}, "meta": {}}
    args[where] = {**args[where], "nested": [{"\udcff key": 1}]}
    with pytest.raises(ValueError) as e:
        Record(args["target"], args["workload"], args["config"], [1.0], meta=args["meta"])
    assert f"field '{where}' holds a lone surrogate (U+DCFF)" in str(e.value)


def test_the_memory_store_refuses_what_the_others_refuse() -> None:
    """The probe: the memory store accepted a surrogate, then every read failed."""
    with tunedb.open("memory:hostile") as db:
        with pytest.raises(ValueError, match="'meta'"):
            db.commit([_with_meta_surrogate()])
        assert len(db) == 0 and db.records().num_rows == 0


def _with_meta_surrogate() -> Record:
    r = Record(T, W, {"a": 1}, [1.0], meta={"ok": 1})
    object.__setattr__(r, "meta", {"k": "\udcff"})
    object.__setattr__(r, "meta_json", '{"k":"\udcff"}')
    return r


def test_nesting_is_capped_with_one_line_never_a_recursion_error() -> None:
    normalise(_nest(MAX_JSON_DEPTH - 1))  # with the int: MAX_JSON_DEPTH - 1 lists + the scalar
    Record(T, W, {"deep": _nest(MAX_JSON_DEPTH - 1)}, [1.0])  # the config object is level 1
    for depth in (MAX_JSON_DEPTH + 1, 1200, sys.getrecursionlimit() * 3):
        with pytest.raises(ValueError) as e:
            Record(T, W, {"deep": _nest(depth)}, [1.0])
        msg = str(e.value)
        assert "nested deeper than 64 levels" in msg and "'config'" in msg and "\n" not in msg and len(msg) < 400
    with pytest.raises(ValueError, match="'meta'.*nested deeper"):
        Record(T, W, {}, [1.0], meta={"m": _nest(200)})
    with pytest.raises(ValueError, match=r"row 0\): field 'config'.*nested deeper"):
        RecordBatch.from_columns(target=[T], workload=[W], config=[{"d": _nest(200)}], costs=[[1.0]])


@pytest.mark.parametrize("costs,what", [([True], "True (bool), not a number"), (["1.0"], "'1.0' (str), not a number"),
                                        ([1.0, False], "[1] is False"), ([2**5000], "an integer of 5001 bits")])
def test_bool_and_str_costs_are_not_numbers(costs, what) -> None:
    with pytest.raises(ValueError, match="field 'costs'") as e:
        Record(T, W, {}, costs)
    assert what in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"\(row 0\): field 'costs'"):
        RecordBatch.from_columns(target=[T], workload=[W], config=[{}], costs=[costs])
    with pytest.raises(ValueError, match="field 'costs'"):
        Record(T, W, {}, "1.0")


def test_numeric_numbers_stay_accepted() -> None:
    import numpy as np

    r = Record(T, W, {}, [1, np.float32(0.5), np.int64(2), 2**80])
    assert r.costs == (1.0, 0.5, 2.0, float(2**80)) and all(type(c) is float for c in r.costs)
    assert mean_cost([1.7e308, 1.7e308]) == 1.7e308 and math.isfinite(Record(T, W, {}, [1.7e308] * 2).cost)


@pytest.mark.parametrize("field,value,what", [
    ("compile_s", 2**80, "beyond 2**53"), ("wall_s", -(2**60), "beyond 2**53"), ("compile_s", MAX_EXACT_INT + 1,
                                                                                 "beyond 2**53"),
    ("compile_s", True, "not a number"), ("wall_s", "1.5", "not a number"), ("compile_s", float("inf"), "not a finite"),
])
def test_compile_and_wall_times_take_what_every_backend_stores(tmp_path, field, value, what) -> None:
    """The probe: ``compile_s=2**80`` was stored by Parquet but refused by PostgreSQL."""
    bad = Record(T, W, {}, [1.0], **{field: value})
    with pytest.raises(ValueError, match=f"field '{field}' must be a finite number >= 0: it .*{re.escape(what)}"):
        bad.validate()
    with pytest.raises(ValueError, match=f"'{field}'"):
        RecordBatch.from_records([bad])
    with pytest.raises(ValueError, match=rf"\(row 0\): field '{field}'"):
        RecordBatch.from_columns(target=[T], workload=[W], config=[{}], costs=[[1.0]], **{field: [value]})
    with tunedb.open(tmp_path / "db") as db:
        with pytest.raises(ValueError):
            db.commit([bad])
        assert len(db) == 0
    assert number_problem(MAX_EXACT_INT) is None and number_problem(0.5) is None


def test_a_text_timestamp_is_one_value_error() -> None:
    """The probe: ``Record(timestamp="2020-01-01")`` raised AttributeError."""
    with pytest.raises(ValueError) as e:
        Record(T, W, {}, [1.0], timestamp="2020-01-01")
    assert "field 'timestamp' must be a datetime, got str '2020-01-01'" in str(e.value)
    d = Record(T, W, {}, [1.0]).to_dict()
    assert Record.from_dict({**d, "timestamp": "2020-01-01"}).timestamp == _dt.datetime(2020, 1, 1,
                                                                                         tzinfo=_dt.timezone.utc)
    with pytest.raises(ValueError, match="field 'timestamp' 'yesterday' is not ISO 8601 text"):
        Record.from_dict({**d, "timestamp": "yesterday"})
    r = Record(T, W, {}, [1.0])
    object.__setattr__(r, "timestamp", "2020-01-01")
    with pytest.raises(ValueError, match="'timestamp' must be a timezone-aware datetime"):
        r.validate()


def test_text_fields_of_the_wrong_type_are_one_value_error() -> None:
    for field in ("session", "target_name", "error", "host"):
        r = Record(T, W, {}, [1.0])
        object.__setattr__(r, field, 5)
        with pytest.raises(ValueError, match=f"field '{field}' must be a string, got int"):
            r.validate()


def test_integers_of_any_size_inside_json_stay_text() -> None:
    r = Record(T, W, {"seed": 2**64 - 1, "big": 10**40}, [1.0])
    r.validate()
    assert r.config_json == canonical_json({"big": 10**40, "seed": 2**64 - 1})


def test_foreign_tables_are_checked_for_what_breaks_readers(tmp_path) -> None:
    from tunedb.index.model.keys import rid_hash

    r = Record(T, W, {"a": 1}, [1.0])
    row = {**r.to_row(), "rid_hash": rid_hash(r.record_id)}
    cases = [({"meta": '{"k":"\\udcff"}'}, "field 'meta' holds a lone surrogate (U+DCFF)"),
             ({"config": "[" * 100 + "]" * 100}, "field 'config' is not a JSON object"),
             ({"config": '{"a":' + "[" * 100 + "]" * 100 + "}"}, "nested deeper than 64"),
             ({"workload": "{" * 70 + "not json"}, "field 'workload' is not JSON text")]
    with tunedb.open(tmp_path / "db") as db:
        for change, what in cases:
            t = pa.Table.from_pylist([{**row, **change}])
            with pytest.raises(ValueError) as e:
                db.commit(RecordBatch.from_table(t))
            assert what in str(e.value) and "(row 0)" in str(e.value), str(e.value)
        ok = RecordBatch.from_table(pa.Table.from_pylist([{**row, "meta": '{"k":"\\ud83d\\ude80"}'}]))
        assert db.commit(ok) == 1  # an escaped surrogate *pair* is one character: fine
        assert len(db) == 1


@pytest.mark.parametrize("location", ["memory:", "parquet"])
def test_a_query_holding_a_lone_surrogate_is_one_value_error(tmp_path, location):
    """Reads refuse what no record can hold, in one line, and change nothing: a lookup, best or
    entry query whose target, workload or config holds a lone surrogate."""
    db = tunedb.open(location if location == "memory:" else tmp_path / "db")
    target, wl = {"kind": "cpu", "name": "q"}, {"family": "matmul", "M": 1, "N": 1, "K": 1}
    db.commit(tunedb.Record(target, wl, {"t": 1}, [1e-3]))
    bad = "x\udcff"
    for call in (lambda: db.lookup({**target, "name": bad}, wl, {"t": 1}),
                 lambda: db.lookup(target, {**wl, "note": bad}, {"t": 1}),
                 lambda: db.lookup(target, wl, {"t": bad}),
                 lambda: db.best(target, {**wl, "note": bad})):
        with pytest.raises(ValueError) as e:
            call()
        assert "surrogate" in str(e.value) and "\n" not in str(e.value)
    assert len(db) == 1 and db.lookup(target, wl, {"t": 1}) is not None
    db.close()
