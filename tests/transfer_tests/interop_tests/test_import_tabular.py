"""tunedb's own parquet/jsonl round trips, and record counts for every file of the shared data."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tunedb.index import ParquetStore
from tunedb.transfer.cli.main import main as cli_main
from tunedb.transfer.interop import ImportFormatError, collect

from helpers import SHARED_DATA

DATA = SHARED_DATA
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"shared data not found at {DATA}")

COMPARED = ("record_id", "target_key", "target_name", "target", "workload_key", "workload", "config_key", "config",
            "costs", "cost", "status", "error", "compile_s", "wall_s", "timestamp", "source", "session", "meta")


def _rows(db: Path) -> list[dict]:
    t = ParquetStore.open(db).records()
    return sorted(t.select(list(COMPARED)).to_pylist(), key=lambda r: r["record_id"])


@pytest.fixture()
def small_db(tmp_path: Path, capsys) -> Path:
    """A DB holding records of three formats (AutoTVM, MetaSchedule, Kernel Tuner slices)."""
    if not DATA.is_dir():
        pytest.skip(f"shared data not found at {DATA}")
    db = tmp_path / "src"
    log = tmp_path / "t.log"
    log.write_text("\n".join((DATA / "tophub" / "opencl_v0.04.log").read_text().splitlines()[:30]) + "\n")
    with gzip.open(DATA / "kernel_tuner" / "dedispersion_milo" / "W6600.json.gz", "rt") as f:
        doc = json.load(f)
    doc["cache"] = dict(list(doc["cache"].items())[:50])
    kt = tmp_path / "W6600.json"
    kt.write_text(json.dumps(doc))
    for fmt, p in (("autotvm", log), ("kernel-tuner", kt), ("metaschedule", DATA / "metaschedule")):
        assert cli_main(["import", fmt, str(p), "--db", str(db), "--json"]) == 0
    capsys.readouterr()
    return db


@pytest.mark.parametrize("fmt,out", [("jsonl", "out.jsonl"), ("parquet", "outdir")])
def test_round_trip_identical_records(small_db: Path, tmp_path: Path, fmt: str, out: str, capsys) -> None:
    before = _rows(small_db)
    assert len(before) == 28 + 50 + 48
    dest = tmp_path / out
    assert cli_main(["export", "--format", fmt, str(dest), "--db", str(small_db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["exported"] == len(before)
    db2 = tmp_path / "dst"
    assert cli_main(["import", fmt, str(dest), "--db", str(db2), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["imported"] == rep["new"] == len(before) and rep["skipped"] == 0
    assert _rows(db2) == before
    # importing again adds nothing
    assert cli_main(["import", fmt, str(dest), "--db", str(db2), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["new"] == 0
    if fmt == "parquet":
        t = ds.dataset(dest, partitioning="hive").to_table()
        assert t.num_rows == len(before)
        assert sorted(t.column("record_id").to_pylist()) == [r["record_id"] for r in before]
        assert all(json.loads(x)["kind"] for x in t.column("target").to_pylist())


def test_parquet_import_of_a_whole_db(small_db: Path, tmp_path: Path, capsys) -> None:
    db2 = tmp_path / "copy"
    assert cli_main(["import", "parquet", str(small_db), "--db", str(db2), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["new"] == len(_rows(small_db))
    assert _rows(db2) == _rows(small_db)


def test_jsonl_bad_lines_reported(small_db: Path, tmp_path: Path, capsys) -> None:
    dest = tmp_path / "o.jsonl"
    assert cli_main(["export", "--format", "jsonl", str(dest), "--db", str(small_db)]) == 0
    lines = dest.read_text().splitlines()[:5]
    neg = json.loads(lines[1])
    neg["costs"] = [-1.0]
    nofam = json.loads(lines[2])
    nofam["workload"] = {"x": 1}
    badid = json.loads(lines[3])
    badid["record_id"] = "XYZ"
    noid = json.loads(lines[4])
    del noid["record_id"]
    p = tmp_path / "bad.jsonl"
    p.write_text("\n".join([lines[0], json.dumps(neg), "{oops", json.dumps(nofam), json.dumps(badid), "[]",
                            json.dumps(noid)]) + "\n")
    recs, rep = collect("jsonl", [p])
    assert rep.imported == 2 and rep.skipped == 5
    assert [e["where"] for e in rep.errors] == [f"bad.jsonl:{i}" for i in (2, 3, 4, 5, 6)]
    assert "costs" in rep.errors[0]["error"] and "family" in rep.errors[2]["error"]
    again, _ = collect("jsonl", [p])
    assert [r.record_id for r in again] == [r.record_id for r in recs]  # missing id -> deterministic id
    db = tmp_path / "strict"
    assert cli_main(["import", "jsonl", str(p), "--db", str(db), "--strict"]) == 2
    assert len(ParquetStore.open(db)) == 0


def test_parquet_wrong_schema(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [1]}), tmp_path / "x.parquet")
    with pytest.raises(ImportFormatError):
        collect("parquet", [tmp_path / "x.parquet"])
    (tmp_path / "e").mkdir()
    with pytest.raises(ImportFormatError):
        collect("parquet", [tmp_path / "e"])


# ------------------------------------------------------------------------------ shared-data counts

def _batch_sizes(p: Path) -> int:
    """A fused-MoE table's records: one per batch size M (its numeric keys; a table may also name
    its ``triton_version``)."""
    return sum(1 for k in json.loads(p.read_text()) if k.isdigit())


def _expected_count(p: Path) -> tuple[str, int] | None:
    """(format, records) computed with plain json, independently of the importers."""
    rel = p.relative_to(DATA).as_posix()
    if rel.startswith("tophub/"):
        n = 0
        for s in p.read_text().splitlines():
            if s.strip() and not s.startswith("#") and json.loads(s).get("version") == 0.2:
                n += 1
        return "autotvm", n
    if rel.startswith("metaschedule/"):
        if p.name != "database_tuning_record.json":
            return "metaschedule", 0  # the workload table: counted with the records file
        return "metaschedule", sum(1 for s in p.read_text().splitlines() if s.strip())
    if rel.startswith("kernel_tuner/") and p.name.endswith(".json.gz"):
        with gzip.open(p, "rt") as f:
            doc = json.load(f)
        return "kernel-tuner", len(doc["cache"]) if "cache" in doc else len(doc["results"])
    if rel.startswith("vllm_moe/configs/") and p.suffix == ".json":
        return "vllm-moe", _batch_sizes(p)
    return None


@needs_data
@pytest.mark.slow
def test_record_counts_of_every_shared_file(tmp_path: Path, capsys) -> None:
    files = sorted(p for p in DATA.rglob("*") if p.is_file())
    assert files
    db = tmp_path / "all"
    total = 0
    parsed = 0
    t_parse = 0.0
    t_all = time.perf_counter()
    for p in files:
        exp = _expected_count(p)
        if exp is None:
            if p.name.endswith("_milo.json"):  # T1 search-space definitions hold no measurements
                with pytest.raises(ImportFormatError, match="T1"):
                    collect("kernel-tuner", [p])
            else:
                assert p.name in ("LICENSE", "README.md", "sources.csv"), f"no record count known for shared file {p}"
            continue
        fmt, n = exp
        if fmt == "metaschedule" and p.name != "database_tuning_record.json":
            continue
        t0 = time.perf_counter()
        recs, rep = collect(fmt, [p])
        t_parse += time.perf_counter() - t0
        parsed += len(recs)
        assert rep.imported == n and rep.skipped == 0, (p, rep.to_json())
        assert cli_main(["import", fmt, str(p), "--db", str(db), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["imported"] == n and out["new"] == n, p
        total += n
    t_all = time.perf_counter() - t_all
    vllm = sum(_batch_sizes(p) for p in (DATA / "vllm_moe" / "configs").glob("*.json"))
    assert total == len(ParquetStore.open(db)) == 2121 + 48 + 7 * 4362 + 6 * 11130 + vllm
    print(f"\nparsed {parsed} records at {parsed / t_parse:.0f} rec/s; parse+commit of all at "
          f"{total / (t_all - t_parse):.0f} rec/s")


# ------------------------------------------------------------------------------------ input caps
def _one_line_refusal(p) -> str:
    assert p.returncode == 2, (p.returncode, p.stderr[-500:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tunedb: error: ") and "Traceback" not in p.stderr, p.stderr
    return lines[0]


def test_a_gzip_bomb_is_refused_in_seconds_in_bounded_memory(tmp_path):
    """A 0.3 MB gzip file holding 300 MiB of text: refused after reading one character past the
    cap (256 MiB), under a 2 GiB address-space limit, with one line; nothing is written."""
    import resource
    import subprocess
    import sys
    import zlib

    bomb = tmp_path / "bomb.json.gz"
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b" " * (1 << 20)
    with open(bomb, "wb") as f:
        f.write(comp.compress(b'{"cache": {'))
        for _ in range(300):
            f.write(comp.compress(chunk))
        f.write(comp.compress(b"}}") + comp.flush())
    assert bomb.stat().st_size < 1 << 20

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "tunedb", "import", "kernel-tuner", str(bomb), "--db", str(tmp_path / "db")],
                       capture_output=True, text=True, timeout=300, preexec_fn=limit)
    line = _one_line_refusal(p)
    assert "over the import cap" in line and time.perf_counter() - t0 < 60
    assert not (tmp_path / "db" / "records").exists() or len(ParquetStore.open(tmp_path / "db")) == 0


def test_a_record_line_over_the_cap_refuses_the_file(tmp_path, capsys):
    """A JSON line of 20 MiB (over the 16 MiB cap per record) among good ones: the import is
    refused with one line and nothing is written."""
    good = {"target": {"kind": "cpu", "name": "c"}, "workload": {"family": "matmul", "M": 1}, "config": {"t": 1},
            "costs": [1e-3]}
    huge = dict(good, config={"t": "x" * (20 << 20)})
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(huge) + "\n")
    assert cli_main(["import", "jsonl", str(path), "--db", str(tmp_path / "db")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 2" in err[0] and "over the import cap" in err[0]
    assert not (tmp_path / "db" / "records").exists() or len(ParquetStore.open(tmp_path / "db")) == 0


@pytest.mark.parametrize("fmt", ["jsonl", "kernel-tuner"])
def test_a_record_over_the_record_size_cap_refuses_the_import(tmp_path, capsys, fmt):
    """A 5 MiB record (under the line cap, over the 4 MiB a record may hold) among good ones:
    the whole import is refused with one line, exit 2, and nothing is written -- in the
    tabular importer and in the Kernel Tuner importer alike."""
    path = tmp_path / "in.json"
    if fmt == "jsonl":
        good = {"target": {"kind": "cpu", "name": "c"}, "workload": {"family": "matmul", "M": 1},
                "config": {"t": 1}, "costs": [1e-3]}
        path.write_text(json.dumps(good) + "\n" + json.dumps(dict(good, config={"t": "x" * (5 << 20)})) + "\n")
        args = ["import", "jsonl", str(path)]
    else:
        cache = {"device_name": "NVIDIA RTX A4000", "kernel_name": "k", "problem_size": [64, 64],
                 "tune_params_keys": ["block_size_x"], "tune_params": {"block_size_x": [16, 32]}, "objective": "time",
                 "cache": {"16": {"block_size_x": 16, "time": 1.0, "times": [1.0]},
                           "32": {"block_size_x": 32, "time": 2.0, "times": [2.0] * (700 << 10)}}}
        path.write_text(json.dumps(cache))
        args = ["import", "kernel-tuner", str(path)]
    assert cli_main([*args, "--db", str(tmp_path / "db")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "4 MiB" in err[0] and "nothing is imported" in err[0], err
    assert not (tmp_path / "db" / "records").exists() or len(ParquetStore.open(tmp_path / "db")) == 0
