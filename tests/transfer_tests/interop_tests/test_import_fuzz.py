"""Hypothesis fuzzing of the importers: the only exception is the documented ImportFormatError,
every yielded record is valid, and ``--strict`` never writes part of an import."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tunedb.index import ParquetStore
from tunedb.transfer.cli.main import main as cli_main
from tunedb.transfer.interop import ImportFormatError, ImportIssue, collect, get_format

from helpers import SHARED_DATA

DATA = SHARED_DATA
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"shared data not found at {DATA}")
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8) | st.sampled_from(["TENSOR", "sp", "ot", "InvalidConfig", "RuntimeFailedConfig"]),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4),
    max_leaves=12)


def _mutate(value, data, depth: int = 0):
    """Replace one randomly chosen node of ``value`` by a random JSON value."""
    if depth > 6 or not isinstance(value, (list, dict)) or not value or data.draw(st.integers(0, 4)) == 0:
        return data.draw(json_values)
    if isinstance(value, list):
        i = data.draw(st.integers(0, len(value) - 1))
        out = list(value)
        out[i] = _mutate(value[i], data, depth + 1)
        if data.draw(st.booleans()) and len(out) > 1 and depth > 0:
            out.pop(data.draw(st.integers(0, len(out) - 1)))
        return out
    k = data.draw(st.sampled_from(sorted(value)))
    out = dict(value)
    if data.draw(st.integers(0, 5)) == 0:
        del out[k]
    else:
        out[k] = _mutate(value[k], data, depth + 1)
    return out


def _check(fmt: str, path: Path) -> None:
    """Parse; the documented error is the only exception; every record validates."""
    try:
        items = list(get_format(fmt).parse(path))
    except ImportFormatError:
        return
    for it in items:
        if not isinstance(it, ImportIssue):
            it.validate()
            json.dumps(it.to_dict())


def _tophub_lines() -> list[dict]:
    lines = (DATA / "tophub" / "arm_cpu_v0.08.log").read_text().splitlines()[2:6]
    lines += (DATA / "tophub" / "cuda_v0.10.log").read_text().splitlines()[:3]
    return [json.loads(s) for s in lines]


@needs_data
@FUZZ
@given(data=st.data())
def test_fuzz_autotvm(tmp_path_factory, data) -> None:
    base = _tophub_lines()
    picked = data.draw(st.lists(st.sampled_from(base), min_size=1, max_size=4))
    lines = [json.dumps(_mutate(v, data)) if data.draw(st.booleans()) else json.dumps(v) for v in picked]
    if data.draw(st.booleans()):
        lines.insert(data.draw(st.integers(0, len(lines))), data.draw(st.text(max_size=30)).replace("\n", " "))
    p = tmp_path_factory.mktemp("atvm") / "f.log"
    p.write_text("\n".join(lines))
    _check("autotvm", p)


@FUZZ
@given(raw=st.binary(max_size=200))
def test_fuzz_raw_bytes_every_format(tmp_path_factory, raw: bytes) -> None:
    d = tmp_path_factory.mktemp("raw")
    for fmt, name in (("autotvm", "x.log"), ("kernel-tuner", "x.json"), ("jsonl", "x.jsonl"),
                      ("parquet", "x.parquet")):
        (d / name).write_bytes(raw)
        _check(fmt, d / name)
    (d / "database_workload.json").write_bytes(raw)
    (d / "database_tuning_record.json").write_bytes(raw)
    _check("metaschedule", d)


@needs_data
@FUZZ
@given(data=st.data())
def test_fuzz_kernel_tuner(tmp_path_factory, data) -> None:
    with gzip.open(DATA / "kernel_tuner" / "convolution_milo" / "A100.json.gz", "rt") as f:
        doc = json.load(f)
    items = list(doc["cache"].items())
    doc["cache"] = dict(items[:3] + [x for x in items if isinstance(x[1]["time"], str)][:2])
    for _ in range(data.draw(st.integers(1, 3))):
        doc = _mutate(doc, data)
    p = tmp_path_factory.mktemp("kt") / "dev.json"
    p.write_text(json.dumps(doc))
    _check("kernel-tuner", p)


@needs_data
@FUZZ
@given(data=st.data())
def test_fuzz_metaschedule(tmp_path_factory, data) -> None:
    ms = DATA / "metaschedule"
    recs = [json.loads(s) for s in (ms / "database_tuning_record.json").read_text().splitlines()[:3]]
    wls = [json.loads(s) for s in (ms / "database_workload.json").read_text().splitlines()]
    d = tmp_path_factory.mktemp("ms")
    if data.draw(st.booleans()):
        wls = [_mutate(w, data) for w in wls]
    recs = [_mutate(r, data) if data.draw(st.booleans()) else r for r in recs]
    (d / "database_workload.json").write_text("\n".join(json.dumps(w) for w in wls))
    (d / "database_tuning_record.json").write_text("\n".join(json.dumps(r) for r in recs))
    _check("metaschedule", d)


@needs_data
@FUZZ
@given(data=st.data())
def test_fuzz_jsonl(tmp_path_factory, data) -> None:
    d = tmp_path_factory.mktemp("jl")
    recs, _ = collect("autotvm", [DATA / "tophub" / "llvm_v0.04.log"])
    lines = [json.dumps(_mutate(r.to_dict(), data)) for r in recs[:3]]
    (d / "x.jsonl").write_text("\n".join(lines))
    _check("jsonl", d / "x.jsonl")


@needs_data
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_strict_never_writes_part_of_an_import(tmp_path_factory, data) -> None:
    good = [json.dumps(v) for v in _tophub_lines()]
    lines = list(good)
    n_bad = data.draw(st.integers(0, 3))
    for _ in range(n_bad):
        bad = data.draw(st.one_of(st.text(min_size=1, max_size=20).filter(lambda s: s.strip() and "\n" not in s
                                                                          and "\r" not in s and not s.lstrip().startswith("#")),
                                  json_values.map(json.dumps)))
        lines.insert(data.draw(st.integers(0, len(lines))), bad)
    d = tmp_path_factory.mktemp("strict")
    p = d / "mix.log"
    p.write_text("\n".join(lines) + "\n")
    _, rep = collect("autotvm", [p])
    db = d / "db"
    rc = cli_main(["import", "autotvm", str(p), "--db", str(db), "--strict", "--json"])
    n = len(ParquetStore.open(db))
    if rep.skipped:
        assert rc == 2 and n == 0
    else:
        assert rc == 0 and n == rep.imported == len(good) + n_bad - rep.skipped
