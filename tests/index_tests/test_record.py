from __future__ import annotations

import math
import subprocess
import sys

import pytest

from tunedb.index import ParquetStore, Record
from tunedb.index.model.keys import canonical_json, key_of

T = {"kind": "cpu", "name": "t"}
W = {"family": "matmul", "M": 4}


def test_keys_are_canonical_and_stable_across_processes():
    a = {"b": [1, 2.0, {"y": 1, "x": True}], "a": 0.5}
    b = {"a": 0.5, "b": [1.0, 2, {"x": True, "y": 1.0}]}
    assert canonical_json(a) == canonical_json(b) == '{"a":0.5,"b":[1,2,{"x":true,"y":1}]}'
    assert key_of(a) == key_of(b)
    out = subprocess.run([sys.executable, "-c", "from tunedb.index.model.keys import key_of; print(key_of({'a':0.5,'b':[1,2,{'x':True,'y':1}]}))"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == key_of(a)
    assert key_of({"a": 1}) != key_of({"a": 2})


@pytest.mark.parametrize("kwargs,field", [
    ({"status": "fast"}, "status"),
    ({"costs": [float("nan")]}, "costs"),
    ({"costs": [float("inf")]}, "costs"),
    ({"costs": [-1.0]}, "costs"),
    ({"costs": [], "status": "ok"}, "costs"),
    ({"compile_s": -1.0}, "compile_s"),
    ({"source": "stolen"}, "source"),
])
def test_validation_rejects_bad_field_and_writes_nothing(tmp_path, kwargs, field):
    db = ParquetStore.open(tmp_path / "db")
    good = Record(T, W, {"a": 1}, [1.0])
    bad = Record(T, W, {"a": 2}, **({"costs": [1.0]} | kwargs))
    with pytest.raises(ValueError) as e:
        db.commit([good, bad])
    assert f"'{field}'" in str(e.value) and bad.record_id in str(e.value)
    assert len(db) == 0 and len(ParquetStore.open(tmp_path / "db")) == 0
    assert not list((tmp_path / "db" / "records").rglob("*.parquet"))


@pytest.mark.parametrize("config", [{"a": object()}, {"a": float("nan")}, {"a": {1, 2}}, {1: 2}, "notadict"])
def test_config_must_be_plain_json(config):
    with pytest.raises(ValueError) as e:
        Record(T, W, config, [1.0])
    assert "'config'" in str(e.value)


def test_workload_needs_family():
    with pytest.raises(ValueError, match="family"):
        Record(T, {"M": 4}, {}, [1.0])


def test_cost_is_mean_and_failed_records_allowed():
    r = Record(T, W, {"a": 1}, [1.0, 2.0, 3.0])
    assert math.isclose(r.cost, 2.0)
    f = Record(T, W, {"a": 1}, [], status="compile_error", error="boom")
    f.validate()
    assert f.cost is None
    assert Record.from_dict(r.to_dict()) == r


def test_provenance_host_and_origin() -> None:
    import socket

    from tunedb.index.model.record import Record as R

    t, w, c = {"kind": "cpu", "name": "h"}, {"family": "f"}, {"a": 1}
    r = R(t, w, c, costs=(1.0,))
    assert r.host == socket.gethostname() and r.origin == ""
    assert R(t, w, c, costs=(1.0,), host="", origin="x.json").host == ""
    row = r.to_row()
    assert row["host"] == r.host and row["origin"] == ""
    assert R.from_row(row).host == r.host and R.from_dict(r.to_dict()) == r
    old_row = {k: v for k, v in row.items() if k not in ("host", "origin")}
    old_dict = {k: v for k, v in r.to_dict().items() if k not in ("host", "origin")}
    assert R.from_row(old_row).host == "" and R.from_row(old_row).origin == ""
    assert R.from_dict(old_dict).host == "" and R.from_dict(old_dict).origin == ""
    bad = R(t, w, c, costs=(1.0,), origin=None)  # type: ignore[arg-type]
    try:
        bad.validate()
    except ValueError as e:
        assert "origin" in str(e)
    else:
        raise AssertionError("origin=None validated")


def test_row_values_give_what_to_row_gives() -> None:
    """``ROW_VALUES`` (the per-column view the memory store builds projections from) and the
    written-out ``to_row`` hold the same columns and values, and together with the columns a
    store adds they are RECORD_SCHEMA's."""
    from tunedb.index.model.record import ROW_VALUES
    from tunedb.index.model.schema import RECORD_SCHEMA

    recs = [Record(T, W, {"a": 1}, [1.0, 2.0], compile_s=1, wall_s=0.5, meta={"origin": "seed"}, origin="x.json"),
            Record(T, W, {"a": 2}, [], status="compile_error", error="boom")]
    for r in recs:
        assert {c: get(r) for c, get in ROW_VALUES.items()} == r.to_row()
    assert set(ROW_VALUES) | {"target_slug", "rid_hash", "committed"} == set(RECORD_SCHEMA.names)


def test_batch_carries_host_and_origin() -> None:
    from tunedb.index.model.batch import RecordBatch
    from tunedb.index.model.record import Record as R
    from tunedb.index.model.record import this_host

    b = RecordBatch.from_columns(target=[{"kind": "cpu", "name": "h"}] * 2, workload=[{"family": "f"}] * 2,
                                 config=[{"a": 1}, {"a": 2}], costs=[[1.0], [2.0]], origin=["a.log", ""])
    recs = b.to_records()
    assert [r.host for r in recs] == [this_host()] * 2 and [r.origin for r in recs] == ["a.log", ""]
    r = R({"kind": "cpu"}, {"family": "f"}, {"a": 3}, costs=(1.0,), host="", origin="o")
    assert [(x.host, x.origin) for x in RecordBatch.from_records([r]).to_records()] == [("", "o")]
