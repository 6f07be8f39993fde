"""An import's cost is bounded, not only the bytes it reads: decompressed text, lines (blank ones
included), records, wall time and JSON depth each have a cap (``input_files.ImportBudget``), and
past any of them the whole import is refused in one line (CLI: exit 2) with nothing written.

The bombs are real gzip files made of repeated gzip members (a few hundred KB on disk, 250 MB
of lines after decompression), imported by ``tunedb`` in a subprocess whose time and peak memory
(``getrusage(RUSAGE_CHILDREN)`` of a wrapper that runs only it) are measured."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tunedb
from tunedb.index.model.keys import MAX_JSON_DEPTH
from tunedb.index.model.record import Record
from tunedb.transfer.interop import MAX_IMPORT_LINES, ImportBudget, ImportCapError, collect
from tunedb.transfer.interop.input_files import FORMAT_WRAPPING
from tunedb.transfer.interop.tabular import to_table

from helpers import tree_state

TUNEDB = Path(sys.executable).with_name("tunedb")
EXE = [str(TUNEDB)] if TUNEDB.is_file() else [sys.executable, "-m", "tunedb"]
BOMB_BYTES = 250_000_000
#: what a refused bomb may cost the importing process
MAX_REFUSAL_S = 10.0
MAX_REFUSAL_RSS_MB = 300
SEED = Record({"kind": "cpu", "name": "seed"}, {"family": "matmul", "M": 1}, {"tile": 1}, [1e-3])

#: runs ``argv`` as its only child, prints {rc, stderr, seconds, maxrss_kb} of that child
_MEASURE = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[1:], capture_output=True, timeout=120)
print(json.dumps({"rc": p.returncode, "stderr": p.stderr.decode("utf-8", "replace"),
                  "seconds": time.perf_counter() - t,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def _gzip_bomb(path: Path, line: bytes, total: int = BOMB_BYTES) -> Path:
    """A gzip file of ``line`` repeated to ``total`` bytes: one 3 MiB member compressed once and
    written again and again (a gzip file may hold many members; readers concatenate them)."""
    block = line * ((3 << 20) // len(line))
    member = gzip.compress(block, 9)
    with open(path, "wb") as f:
        for _ in range(-(-total // len(block))):
            f.write(member)
    return path


def _record_line(i: int) -> str:
    return json.dumps({"target": {"kind": "cpu", "name": "t"}, "workload": {"family": "matmul", "M": 4},
                       "config": {"tile": i}, "costs": [1e-3], "status": "ok"})


def _jsonl(path: Path, n: int) -> Path:
    path.write_text("".join(_record_line(i) + "\n" for i in range(n)))
    return path


@pytest.fixture
def seeded(tmp_path: Path) -> Path:
    path = tmp_path / "db"
    with tunedb.open(path) as db:
        db.commit([SEED])
    return path


def _import_measured(db: Path, path: Path, cwd: Path) -> dict:
    """``tunedb import jsonl PATH`` in a subprocess, measured; asserts the refusal's shape (exit 2,
    one stderr line, no traceback) and that ``db`` and ``cwd`` are unchanged."""
    before = tree_state(db), tree_state(cwd)
    out = subprocess.run([sys.executable, "-c", _MEASURE, *EXE, "--db", str(db), "import", "jsonl", str(path)],
                         capture_output=True, text=True, timeout=180, cwd=cwd)
    res = json.loads(out.stdout)
    lines = res["stderr"].strip().splitlines()
    assert res["rc"] == 2, res
    assert len(lines) == 1 and lines[0].startswith("tunedb: error: ") and "Traceback" not in res["stderr"], res
    assert (tree_state(db), tree_state(cwd)) == before
    with tunedb.open(db) as store:
        assert len(store) == 1
    return res | {"line": lines[0]}


def _cheap(res: dict) -> None:
    assert res["seconds"] < MAX_REFUSAL_S, res
    assert res["maxrss_kb"] < MAX_REFUSAL_RSS_MB * 1024, res


# ----------------------------------------------------------------------------------- CLI: bombs

def test_a_gzip_bomb_of_empty_objects_is_refused_fast(seeded: Path, tmp_path: Path) -> None:
    bomb = _gzip_bomb(tmp_path / "bomb.jsonl.gz", b"{}\n")
    assert bomb.stat().st_size < 400_000
    res = _import_measured(seeded, bomb, tmp_path)
    assert f"more than {MAX_IMPORT_LINES:,} lines" in res["line"], res
    _cheap(res)


def test_a_gzip_bomb_of_empty_lines_is_refused_fast(seeded: Path, tmp_path: Path) -> None:
    bomb = _gzip_bomb(tmp_path / "blank.jsonl.gz", b"\n")
    res = _import_measured(seeded, bomb, tmp_path)
    assert f"more than {MAX_IMPORT_LINES:,} lines" in res["line"], res
    _cheap(res)


def test_a_gzip_bomb_of_carriage_returns_counts_as_lines(seeded: Path, tmp_path: Path) -> None:
    """Old Mac line ends are lines too: the first pass counts them like ``\\n``."""
    res = _import_measured(seeded, _gzip_bomb(tmp_path / "cr.jsonl.gz", b"\r", total=40 << 20), tmp_path)
    assert "lines" in res["line"], res
    _cheap(res)


def test_one_line_too_many_is_refused(seeded: Path, tmp_path: Path) -> None:
    """A plain (uncompressed) file of ``MAX_IMPORT_LINES + 1`` blank and comment-like lines."""
    f = tmp_path / "many.jsonl"
    f.write_bytes(b"\n" * MAX_IMPORT_LINES + b"{}")
    res = _import_measured(seeded, f, tmp_path)
    assert f"more than {MAX_IMPORT_LINES:,} lines" in res["line"], res


def test_text_past_the_decompressed_cap_is_refused(seeded: Path, tmp_path: Path) -> None:
    """257 MiB of spaces (one line, no line ends): refused by size, never read whole."""
    res = _import_measured(seeded, _gzip_bomb(tmp_path / "wide.jsonl.gz", b" " * 4096, total=257 << 20), tmp_path)
    assert "of text (after decompression)" in res["line"], res
    _cheap(res)


# ---------------------------------------------------------------------------- API: each cap

def test_each_cap_refuses_one_past_it_and_allows_it_exactly(tmp_path: Path) -> None:
    f = _jsonl(tmp_path / "five.jsonl", 5)
    size = f.stat().st_size
    for exact, over, what in ((ImportBudget(lines=5), ImportBudget(lines=4), "lines"),
                              (ImportBudget(records=5), ImportBudget(records=4), "records"),
                              (ImportBudget(text=size), ImportBudget(text=size - 1), "of text"),
                              (ImportBudget(total_text=size), ImportBudget(total_text=size - 1), "together")):
        recs, rep = collect("jsonl", [f], budget=exact)
        assert len(recs) == rep.imported == 5
        with pytest.raises(ImportCapError, match=what):
            collect("jsonl", [f], budget=over)


def test_the_caps_hold_for_all_files_of_an_import(tmp_path: Path) -> None:
    a, b = _jsonl(tmp_path / "a.jsonl", 3), _jsonl(tmp_path / "b.jsonl", 3)
    assert len(collect("jsonl", [a], budget=ImportBudget(lines=4))[0]) == 3
    with pytest.raises(ImportCapError, match="b.jsonl: more than 4 lines"):
        collect("jsonl", [a, b], budget=ImportBudget(lines=4))
    with pytest.raises(ImportCapError, match="records"):
        collect("jsonl", [a, b], budget=ImportBudget(records=5))


def test_skipped_lines_count_against_the_records_cap(tmp_path: Path) -> None:
    f = tmp_path / "objects.jsonl"
    f.write_text("{}\n" * 10)
    with pytest.raises(ImportCapError, match="skipped entries"):
        collect("jsonl", [f], budget=ImportBudget(records=9))


def test_the_time_cap(tmp_path: Path) -> None:
    f = _jsonl(tmp_path / "five.jsonl", 5)
    with pytest.raises(ImportCapError, match="ran longer than"):
        collect("jsonl", [f], budget=ImportBudget(seconds=10.0, started=time.monotonic() - 11.0))
    assert len(collect("jsonl", [f], budget=ImportBudget(seconds=60.0))[0]) == 5


def test_parquet_rows_are_counted_from_the_footer(tmp_path: Path) -> None:
    recs = [Record({"kind": "cpu", "name": "p"}, {"family": "matmul", "M": 1}, {"tile": i}, [1e-3]) for i in range(3)]
    pq.write_table(to_table(recs), tmp_path / "r.parquet")
    assert len(collect("parquet", [tmp_path / "r.parquet"], budget=ImportBudget(records=3))[0]) == 3
    with pytest.raises(ImportCapError, match="3 rows would take the import past 2 records"):
        collect("parquet", [tmp_path / "r.parquet"], budget=ImportBudget(records=2))


def test_lines_are_read_one_at_a_time_with_their_numbers(tmp_path: Path) -> None:
    """Streaming keeps the old reading: a BOM, CRLF line ends, blank lines, and ``file:line`` of
    a skipped line counted over blank lines."""
    f = tmp_path / "crlf.jsonl.gz"
    text = "\ufeff" + _record_line(0) + "\r\n\r\n" + "not json\r\n" + _record_line(1) + "\r\n"
    f.write_bytes(gzip.compress(text.encode("utf-8")))
    recs, rep = collect("jsonl", [f])
    assert len(recs) == 2 and rep.skipped == 1 and rep.errors[0]["where"] == "crlf.jsonl.gz:3"


# ------------------------------------------------------------------------------- JSON depth

def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + FORMAT_WRAPPING, 5_000])
def test_a_deep_jsonl_line_refuses_the_import(tmp_path: Path, depth: int) -> None:
    f = tmp_path / "deep.jsonl"
    f.write_text(_record_line(0) + "\n" + '{"config": ' + _deep(depth) + "}\n")
    with pytest.raises(ImportCapError,
                       match=f"deep.jsonl:2: JSON nested deeper than {MAX_JSON_DEPTH + FORMAT_WRAPPING}"):
        collect("jsonl", [f])


def test_a_record_as_deep_as_the_limit_imports_from_its_own_line(tmp_path: Path) -> None:
    """A config nested near the limit is a valid record; its line (levels more) imports again."""
    config: dict = {}
    for _ in range(MAX_JSON_DEPTH - 2):
        config = {"a": config}
    line = json.loads(_record_line(0))
    line["config"] = config
    f = tmp_path / "limit.jsonl"
    f.write_text(json.dumps(line) + "\n")
    recs, _ = collect("jsonl", [f])
    assert len(recs) == 1 and recs[0].config == config


def test_a_deep_autotvm_line_refuses_the_import(tmp_path: Path) -> None:
    f = tmp_path / "deep.log"
    f.write_text('{"input": ' + _deep(3_000) + "}\n")
    with pytest.raises(ImportCapError, match="deep.log:1: JSON nested deeper"):
        collect("autotvm", [f])


def test_a_deep_kernel_tuner_cache_refuses_the_import(tmp_path: Path) -> None:
    f = tmp_path / "A100.json"
    f.write_text('{"device_name": "A100", "cache": {"1": ' + _deep(3_000) + "}}")
    with pytest.raises(ImportCapError, match="A100.json: JSON nested deeper"):
        collect("kernel-tuner", [f])


def test_a_deep_json_cell_of_a_parquet_file_refuses_the_import(tmp_path: Path) -> None:
    rows = {"target": ['{"kind": "cpu", "name": "p"}'], "workload": ['{"family": "matmul", "M": 1}'],
            "config": ['{"tile": ' + _deep(3_000) + "}"], "costs": [[1e-3]], "status": ["ok"]}
    pq.write_table(pa.table(rows), tmp_path / "deep.parquet")
    with pytest.raises(ImportCapError, match="config: JSON nested deeper"):
        collect("parquet", [tmp_path / "deep.parquet"])


def test_cli_refuses_a_deep_line_and_writes_nothing(seeded: Path, tmp_path: Path) -> None:
    f = tmp_path / "deep.jsonl"
    f.write_text(_record_line(0) + "\n" + _deep(100_000) + "\n")
    before = tree_state(seeded)
    r = subprocess.run([*EXE, "--db", str(seeded), "import", "jsonl", str(f)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path, env=os.environ.copy())
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "deep.jsonl:2: JSON nested deeper" in lines[0]
    assert tree_state(seeded) == before
