"""One canonicalisation: every path that turns a target/workload/config into canonical JSON and keys
gives the same text and keys for arbitrary JSON values.

Paths compared (against an independent reference written from the spec in ``index/model/keys.py``):
``canonical_json``, ``canonical_json_flat``, ``normalise`` + ``canonical_json_normalised``,
``key_of``, the store's memoised ``KeyMemo.canon`` (one memo shared across examples, and fed
values that compare equal but are different JSON: ``True``/``1``/``1.0``, lists/tuples),
``Record``, ``RecordBatch.from_columns`` and the importers' ``Prepared.of`` + ``make_record``.
"""

from __future__ import annotations

import collections
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tunedb.index.model.batch import RecordBatch
from tunedb.index.model.keys import (
    canonical_json,
    canonical_json_flat,
    canonical_json_flat_many,
    canonical_json_normalised,
    hash64,
    key_of,
    key_of_text,
    normalise,
)
from tunedb.index.model.record import Record
from tunedb.index.parquet.querykeys import KeyMemo
from tunedb.transfer.interop import Prepared, fast_normalise, make_record

SPECIAL_FLOATS = [0.0, -0.0, 1.0, -1.0, 8.0, 0.5, 1e300, -1e300, 1e16, 2.0 ** 53, 2.0 ** 53 - 1, -(2.0 ** 53 - 1),
                  2.0 ** 63, 5e-324, 1.7976931348623157e308, 0.1]
SPECIAL_INTS = [0, 1, -1, 2 ** 53, 2 ** 53 + 1, -(2 ** 63), 2 ** 64, 10 ** 40, -(10 ** 40)]

scalars = (st.none() | st.booleans() | st.integers() | st.sampled_from(SPECIAL_INTS)
           | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(SPECIAL_FLOATS)
           | st.text(max_size=6) | st.sampled_from(["", "é", "日本", "\u2028", "\x00", '"\\', "\U0001f600"]))
keys = st.text(max_size=5) | st.sampled_from(["family", "a", "A", "é", "", "1", "true"])
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4), max_leaves=16)
objects = st.dictionaries(keys, json_values, max_size=5)
# flat objects: the shape of most targets/workloads/configs (fast paths are taken for these)
flat_objects = st.dictionaries(keys, scalars, max_size=6)
any_object = objects | flat_objects
workloads = any_object.map(lambda d: {**d, "family": "fam"})

FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MEMO = KeyMemo()  # shared across examples, like the store's: earlier entries must never answer for later ones


def reference(value) -> str:
    """Canonical JSON from the spec alone: sorted keys, no whitespace, integral floats with |x| < 2**53
    as ints, other floats as ``repr``, strings as ``json.dumps(ensure_ascii=False)``, bools and null."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        assert math.isfinite(value)
        return str(int(value)) if value.is_integer() and abs(value) < 2 ** 53 else repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(reference(v) for v in value) + "]"
    assert isinstance(value, dict)
    return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{reference(value[k])}" for k in sorted(value)) + "}"


def twins(value):
    """Values equal to ``value`` under ``==`` (and hashing alike) but partly different JSON: lists as
    tuples, bools as ints, ints as floats -- the cases that must not share a memo entry."""
    def tuples(v):
        if isinstance(v, list):
            return tuple(tuples(x) for x in v)
        if isinstance(v, dict):
            return {k: tuples(x) for k, x in v.items()}
        return v

    def retype(v, bools: bool):
        if isinstance(v, bool):
            return int(v) if bools else v
        if isinstance(v, int) and not bools and abs(v) < 2 ** 53:
            return float(v)
        if isinstance(v, (list, tuple)):
            return type(v)(retype(x, bools) for x in v)
        if isinstance(v, dict):
            return {k: retype(x, bools) for k, x in v.items()}
        return v

    t = tuples(value)
    return [t, retype(t, True), retype(t, False), retype(value, True)]


def check_text_paths(value) -> str:
    ref = reference(value)
    assert canonical_json(value) == ref
    assert canonical_json_flat(value)[0] == ref
    assert canonical_json_normalised(normalise(value)) == ref
    assert canonical_json_normalised(fast_normalise(value)) == ref
    assert json.loads(ref) == normalise(value)  # the text parses back to the normal form
    assert key_of(value) == key_of_text(ref)
    return ref


@FAST
@given(json_values)
def test_every_text_path_matches_the_spec(value):
    check_text_paths(value)
    assert canonical_json(normalise(value)) == canonical_json(value)  # normalise is idempotent


@FAST
@given(any_object)
def test_memoised_query_keys_agree_with_canonical_json(obj):
    for variant in [obj, *twins(obj)]:
        ref = check_text_paths(variant)
        for what in ("target", "workload"):
            assert MEMO.canon(variant, what) == (ref, key_of_text(ref))
            assert MEMO.canon(variant, what) == (ref, key_of_text(ref))  # a memo hit, if memoised


def test_memo_keeps_true_and_one_apart_inside_tuples():
    """Regression: ``{"a": (True,)}`` and ``{"a": (1,)}`` are equal and hash alike; the memo keyed
    nested values by their items and answered the second with the first's ``[true]``."""
    memo = KeyMemo()
    assert memo.canon({"a": (True,)}, "target")[0] == '{"a":[true]}'
    assert memo.canon({"a": (1,)}, "target")[0] == '{"a":[1]}'
    assert memo.canon({"a": (1.5, (True,))}, "workload")[0] == '{"a":[1.5,[true]]}'
    assert memo.canon({"a": (1.5, (1,))}, "workload")[0] == '{"a":[1.5,[1]]}'
    assert memo.canon({"a": True}, "target")[0] == '{"a":true}'
    assert memo.canon({"a": 1}, "target")[0] == '{"a":1}'
    assert memo.canon({"a": 1.0}, "target")[0] == '{"a":1}'


@FAST
@given(any_object, workloads, any_object, any_object)
def test_record_batch_and_importers_give_the_same_keys(target, workload, config, meta):
    tj, wj, cj = reference(target), reference(workload), reference(config)
    tk, wk, ck = key_of_text(tj), key_of_text(wj), key_of_text(cj)
    rid = "ab" * 16
    rec = Record(target, workload, config, costs=[1.0], meta=meta, record_id=rid, source="imported:x")
    assert (rec.target_json, rec.workload_json, rec.config_json) == (tj, wj, cj)
    assert (rec.target_key, rec.workload_key, rec.config_key) == (tk, wk, ck)
    assert rec.lookup_key == hash64(tk, wk, ck) and rec.entry_key == hash64(tk, wk)
    assert rec.meta_json == (reference(meta) if meta else "{}")
    # the store's query keys of the Record and of the plain dicts
    assert MEMO.canon(rec, "target") == MEMO.canon(target, "target") == (tj, tk)
    assert MEMO.canon(rec, "workload") == MEMO.canon(workload, "workload") == (wj, wk)
    # the bulk path: the same objects twice (memoised by identity) and equal copies
    batch = RecordBatch.from_columns(target=[target, dict(target)], workload=[workload, workload],
                                     config=[config, json.loads(json.dumps(config))], costs=[[1.0], [2.0]])
    cols = batch.table.to_pydict()
    assert cols["target"] == [tj, tj] and cols["workload"] == [wj, wj] and cols["config"] == [cj, cj]
    assert cols["target_key"] == [tk, tk] and cols["workload_key"] == [wk, wk] and cols["config_key"] == [ck, ck]
    assert cols["lookup_key"] == [rec.lookup_key] * 2 and cols["entry_key"] == [rec.entry_key] * 2
    assert batch.target_meta[tk] == (rec.target_name, tj)
    # the importers: Prepared (shared target/workload) + make_record, equal to the Record in every field
    tp, wp = Prepared.of(target, "target"), Prepared.of(workload, "workload")
    assert (tp.text, tp.key, wp.text, wp.key) == (tj, tk, wj, wk)
    fast = make_record(tp, wp, config, costs=[1.0], meta=meta, record_id=rid, source="imported:x",
                       timestamp=rec.timestamp)
    for name in rec.__dataclass_fields__:
        assert getattr(fast, name) == getattr(rec, name), name
    back = Record.from_row(fast.to_row())  # what the store reads back
    assert (back.target_key, back.workload_key, back.config_key, back.lookup_key) == (tk, wk, ck, rec.lookup_key)


def test_non_string_keys_are_rejected_on_every_path():
    """Regression: the importers' old normaliser (a C JSON round trip) turned nested keys 1, True and
    None into "1", "true" and "null" where ``normalise`` (Record, the store) rejects them."""
    for bad in ({"a": {1: 2}}, {"a": [{True: 1}]}, {"a": {None: 1}}, {2: 1}):
        for make in (normalise, fast_normalise, canonical_json, lambda v: Prepared.of(v, "target"),
                     lambda v: Record(v, {"family": "f"}, {}, costs=[1.0])):
            with pytest.raises(ValueError, match="is not a string"):
                make(bad)


def test_error_messages_name_the_json_path():
    for bad, where in (({"a": [1, {"b": float("nan")}]}, r"\$\.a\[1\]\.b: non-finite"),
                       ({"x": {"y": {3}}}, r"\$\.x\.y: set is not plain JSON data"),
                       ([b"x"], r"\$\[0\]: bytes is not plain JSON data"),
                       ({"k": {1: 0}}, r"\$\.k: key 1 is not a string")):
        with pytest.raises(ValueError, match=where):
            normalise(bad)


def test_numpy_scalars_and_subclasses_normalise_like_python_values():
    value = {"f": np.float64(2.0), "g": np.float32(0.5), "i": np.int64(-3), "b": np.bool_(True),
             "o": collections.OrderedDict(z=1, a=2.0), "t": (1, [2.0])}
    assert normalise(value) == {"f": 2, "g": 0.5, "i": -3, "b": True, "o": {"z": 1, "a": 2}, "t": [1, [2]]}
    assert type(normalise(value)["b"]) is bool and type(normalise(value)["f"]) is int
    assert canonical_json(value) == '{"b":true,"f":2,"g":0.5,"i":-3,"o":{"a":2,"z":1},"t":[1,[2]]}'


int_configs = st.dictionaries(st.sampled_from(["a", "b%d", "é", "", "x\"y", "tile"]), st.integers(-2**70, 2**70),
                              min_size=1, max_size=6)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(int_configs | flat_objects | objects, max_size=12), st.integers(0, 5))
def test_population_canonicalisation_matches_one_by_one(population, n_same):
    """``canonical_json_flat_many`` (the batch look-up's template path) gives each config's
    ``canonical_json_flat``, for populations sharing a key set and for mixed ones (bools,
    strings, floats, nested values, other key sets)."""
    if population and isinstance(population[0], dict):  # repeat the first shape with new values
        population += [{k: (i if type(v) is int else v) for k, v in population[0].items()} for i in range(n_same)]
    assert canonical_json_flat_many(population) == [canonical_json_flat(v) for v in population]
