"""Hostile import files never brick a DB (docs/security.md): a file name that is not UTF-8, values
holding lone surrogates, FIFOs/devices/sockets/directories where a file belongs, text that is
not UTF-8 and Kernel Tuner times that overflow a sum -- through the API and through the
``tunedb`` command line in a subprocess (with a timeout, so a hang fails the test).

Every case ends with the same check: the DB holds exactly what it held before (or what the
import legitimately added), and it still reads, answers and reopens.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tunedb
from tunedb.index.model.record import Record
from tunedb.transfer.interop import ImportFormatError, ImportIssue, collect, get_format
from tunedb.transfer.interop.input_files import display_name

from helpers import SHARED_DATA

TUNEDB = Path(sys.executable).with_name("tunedb")
CLI_TIMEOUT_S = 60
#: AutoTVM lines copied from the shared TopHub log (35, like the file of the original report)
AUTOTVM_LINES = (SHARED_DATA / "tophub" / "cuda_v0.10.log").read_text().splitlines()[:35]
SEED = Record({"kind": "cpu", "name": "seed"}, {"family": "matmul", "M": 1}, {"tile": 1}, [1e-3])


def _kt_cache(times: list) -> dict:
    """A two-entry Kernel Tuner cache; the second entry's ``times`` are ``times``."""
    return {"device_name": "A100", "kernel_name": "k", "tune_params_keys": ["x"], "tune_params": {"x": [1, 2]},
            "cache": {"1": {"x": 1, "time": 1.0, "times": [1.0, 1.0]},
                      "2": {"x": 2, "time": 1.0, "times": times}}}


def _seeded_db(path: Path) -> Path:
    """A Parquet DB holding :data:`SEED` only."""
    with tunedb.open(path) as db:
        db.commit([SEED])
    return path


def _assert_db(path: Path, n: int) -> None:
    """The DB at ``path`` opens, holds ``n`` records, reads every column, answers the seed's
    lookup, and opens again (a second handle) with the same answer."""
    for _ in range(2):
        with tunedb.open(path) as db:
            assert len(db) == n == db.records().num_rows
            for row in db.records().to_pylist():
                for v in row.values():
                    if isinstance(v, str):
                        v.encode("utf-8")
            hit = db.lookup(SEED.target, SEED.workload, SEED.config)
            assert hit is not None and hit.record_id == SEED.record_id


def _cli(*args: str | os.PathLike) -> subprocess.CompletedProcess:
    """``tunedb ARGS`` in a subprocess; a hang (a FIFO opened for reading) fails the test."""
    try:
        return subprocess.run([str(TUNEDB), *map(os.fspath, args)], capture_output=True, timeout=CLI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"tunedb {' '.join(map(str, args))} hung for {CLI_TIMEOUT_S} s")


def _one_error_line(p: subprocess.CompletedProcess) -> str:
    """The one stderr line of a failed command (exit 2, no traceback)."""
    err = p.stderr.decode("utf-8", "replace")
    assert p.returncode == 2, (p.returncode, err, p.stdout)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tunedb: error: "), err
    return lines[0]


def _no_hang(fn: Callable[[], object], timeout: float = 20) -> object:
    """``fn()`` in a daemon thread; fails the test when it has not returned within ``timeout``
    seconds (a thread blocked opening a FIFO is left behind, the test does not hang)."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"hung for {timeout} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


# ------------------------------------------------------------------ file names that are not UTF-8
@pytest.fixture
def ff_log(tmp_path: Path) -> Path:
    """An AutoTVM log whose file name holds byte 0xff (Python: a lone surrogate U+DCFF)."""
    raw = os.path.join(os.fsencode(tmp_path), b"tophub-\xff.log")
    with open(raw, "wb") as f:
        f.write(("\n".join(AUTOTVM_LINES) + "\n").encode())
    path = Path(os.fsdecode(raw))
    assert "\udcff" in str(path)
    return path


def test_a_file_name_that_is_not_utf8_is_escaped_in_origin(ff_log: Path, tmp_path: Path) -> None:
    records, report = collect("autotvm", [ff_log])
    assert report.imported == len(AUTOTVM_LINES) == len(records) and report.skipped == 0
    assert {r.origin for r in records} == {"tophub-\\xff.log"} == {display_name(ff_log.name)}
    assert {r.meta["origin"]["file"] for r in records} == {"tophub-\\xff.log"}
    db_path = _seeded_db(tmp_path / "db")
    with tunedb.open(db_path) as db:
        assert db.commit(records) == len(records)
    _assert_db(db_path, 1 + len(records))
    with tunedb.open(db_path) as db:
        assert set(db.records(columns=["origin"]).column("origin").to_pylist()) == {"", "tophub-\\xff.log"}


def test_cli_imports_a_file_name_that_is_not_utf8_and_the_db_reopens(ff_log: Path, tmp_path: Path) -> None:
    db = _seeded_db(tmp_path / "db")
    p = _cli("import", "autotvm", ff_log, "--db", db, "--no-models")
    assert p.returncode == 0, p.stderr
    _assert_db(db, 1 + len(AUTOTVM_LINES))
    for args in (("stats",), ("export", "--format", "jsonl", tmp_path / "out.jsonl")):
        q = _cli(*args, "--db", db)
        assert q.returncode == 0, q.stderr
    assert "tophub-\\\\xff.log" in (tmp_path / "out.jsonl").read_text()


def test_display_name_escapes_only_what_utf8_cannot_encode() -> None:
    assert display_name("plain.log") == "plain.log"
    assert display_name("caf\u00e9 \U0001f680.log") == "caf\u00e9 \U0001f680.log"
    assert display_name(os.fsdecode(b"a\xff\xfe.log")) == "a\\xff\\xfe.log"
    assert display_name("\ud800x") == "\\xed\\xa0\\x80x"  # a surrogate surrogateescape did not make
    assert display_name(b"b\xff") == "b\\xff"


# ------------------------------------------------------------------ values holding lone surrogates
def _jsonl_with_surrogate(tmp_path: Path) -> Path:
    d = SEED.to_dict()
    bad = {**d, "record_id": "", "config": {"tile": 2}, "error": "x\udcff", "status": "runtime_error", "costs": []}
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps(bad) + "\n")  # ensure_ascii: the file holds the escape \udcff
    assert "\\udcff" in p.read_text()
    return p


def _parquet_with_escaped_surrogate(tmp_path: Path) -> Path:
    row = SEED.to_row()
    row.update(record_id="cd" * 16, config='{"tile":3}', meta='{"k":"\\udcff"}')
    p = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist([row]), p)
    return p


def test_values_holding_lone_surrogates_are_skipped_never_stored(tmp_path: Path) -> None:
    for fmt, path, field in (("jsonl", _jsonl_with_surrogate(tmp_path), "'error'"),
                             ("parquet", _parquet_with_escaped_surrogate(tmp_path), "'meta'")):
        records, report = collect(fmt, [path])
        assert records == [] and report.skipped == 1
        assert field in report.errors[0]["error"] and "surrogate" in report.errors[0]["error"]


@pytest.mark.parametrize("fmt,make", [("jsonl", _jsonl_with_surrogate), ("parquet", _parquet_with_escaped_surrogate)])
def test_cli_refuses_values_holding_lone_surrogates(tmp_path: Path, fmt: str, make) -> None:
    db = _seeded_db(tmp_path / "db")
    path = make(tmp_path)
    err = _one_error_line(_cli("import", fmt, path, "--db", db, "--strict", "--no-models"))
    assert "surrogate" in err and "nothing written" in err
    _assert_db(db, 1)
    p = _cli("import", fmt, path, "--db", db, "--no-models")  # without --strict: the line is skipped, reported
    assert p.returncode == 0 and b"skipped 1" in p.stdout and b"surrogate" in p.stdout, p.stdout
    _assert_db(db, 1)


def test_parquet_text_that_is_not_utf8_is_refused_as_a_file(tmp_path: Path) -> None:
    row = SEED.to_row()
    row.update(record_id="ef" * 16, config='{"tile":4}')
    t = pa.Table.from_pylist([row])
    raw = pa.array([b"bad \xff"], pa.binary())
    t = t.set_column(t.schema.get_field_index("error"), "error",
                     pa.chunked_array([pa.Array.from_buffers(pa.string(), 1, raw.buffers())]))
    p = tmp_path / "bad-utf8.parquet"
    pq.write_table(t, p)
    with pytest.raises(ImportFormatError, match="UTF8") as e:
        collect("parquet", [p])
    assert "\n" not in str(e.value)
    db = _seeded_db(tmp_path / "db")
    assert "UTF8" in _one_error_line(_cli("import", "parquet", p, "--db", db, "--no-models"))
    _assert_db(db, 1)


# ------------------------------------------------------------------ FIFOs, devices, sockets, directories
KINDS = ["jsonl", "autotvm", "kernel-tuner", "parquet", "metaschedule"]


def _fifo(tmp_path: Path, fmt: str) -> Path:
    """A FIFO (no writer: opening it for reading would wait forever) where ``fmt`` reads a file;
    for metaschedule the record file of an otherwise complete database directory."""
    if fmt == "metaschedule":
        d = tmp_path / "msdb"
        d.mkdir()
        (d / "database_workload.json").write_text((SHARED_DATA / "metaschedule" / "database_workload.json")
                                                  .read_text())
        os.mkfifo(d / "database_tuning_record.json")
        return d
    p = tmp_path / f"pipe.{'json' if fmt == 'kernel-tuner' else fmt}"
    os.mkfifo(p)
    return p


@pytest.mark.parametrize("fmt", KINDS)
def test_a_fifo_is_refused_without_opening_it(tmp_path: Path, fmt: str) -> None:
    path = _fifo(tmp_path, fmt)
    with pytest.raises(ImportFormatError) as e:
        _no_hang(lambda: collect(fmt, [path]))
    assert "FIFO" in str(e.value) and "\n" not in str(e.value)
    if fmt == "metaschedule":  # the file named directly too
        with pytest.raises(ImportFormatError, match="FIFO"):
            _no_hang(lambda: collect(fmt, [path / "database_tuning_record.json"]))


@pytest.mark.parametrize("fmt", KINDS)
def test_cli_refuses_a_fifo_in_every_import_kind(tmp_path: Path, fmt: str) -> None:
    db = _seeded_db(tmp_path / "db")
    path = _fifo(tmp_path, fmt)
    err = _one_error_line(_cli("import", fmt, path, "--db", db, "--no-models"))
    assert "FIFO (named pipe)" in err and "no such file" not in err
    _assert_db(db, 1)


@pytest.mark.parametrize("fmt", ["jsonl", "autotvm", "kernel-tuner", "parquet"])
def test_devices_sockets_and_directories_are_refused_by_what_they_are(tmp_path: Path, fmt: str) -> None:
    with pytest.raises(ImportFormatError, match="a character device, not a regular file"):
        _no_hang(lambda: list(get_format(fmt).parse("/dev/zero")))
    with tempfile.TemporaryDirectory(prefix="tdb") as short:  # (a socket path has at most 107 bytes)
        sock_path = os.path.join(short, "s.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(sock_path)
            with pytest.raises(ImportFormatError, match="a socket, not a regular file"):
                _no_hang(lambda: list(get_format(fmt).parse(sock_path)))
        finally:
            s.close()
    if fmt != "parquet":  # (a directory of Parquet files is a parquet import)
        with pytest.raises(ImportFormatError, match="is a directory, not a file"):
            list(get_format(fmt).parse(tmp_path))
    with pytest.raises(ImportFormatError, match="no such file or directory"):
        list(get_format(fmt).parse(tmp_path / "missing"))


def test_a_fifo_inside_a_parquet_directory_is_not_opened(tmp_path: Path) -> None:
    d = tmp_path / "export"
    d.mkdir()
    os.mkfifo(d / "part-9.parquet")
    pq.write_table(pa.Table.from_pylist([SEED.to_row()]), d / "part-0.parquet")
    records, report = _no_hang(lambda: collect("parquet", [d]))
    assert [r.record_id for r in records] == [SEED.record_id]


def test_cli_refuses_a_device(tmp_path: Path) -> None:
    db = _seeded_db(tmp_path / "db")
    assert "character device" in _one_error_line(_cli("import", "jsonl", "/dev/zero", "--db", db, "--no-models"))
    _assert_db(db, 1)


# ------------------------------------------------------------------ Kernel Tuner times that overflow a sum
@pytest.mark.parametrize("times", [[1e308, 1e308], [1.7e308] * 3, [1e19, 1e19]])
def test_kernel_tuner_huge_times_never_overflow(tmp_path: Path, times: list) -> None:
    p = tmp_path / "A100.json"
    p.write_text(json.dumps(_kt_cache(times)))
    records, report = collect("kernel-tuner", [p])
    assert report.skipped == 0 and len(records) == 2
    second = next(r for r in records if r.config == {"x": 2})
    if max(times) >= 1e20:  # Kernel Tuner's failure marker
        assert second.status == "runtime_error" and second.costs == ()
    else:
        assert second.ok and second.cost == pytest.approx(1e16)
    db = _seeded_db(tmp_path / "db")
    q = _cli("import", "kernel-tuner", p, "--db", db, "--no-models")
    assert q.returncode == 0 and b"Traceback" not in q.stderr, q.stderr
    _assert_db(db, 3)


def test_kernel_tuner_times_that_are_not_finite_numbers_are_one_line_issues(tmp_path: Path) -> None:
    p = tmp_path / "A100.json"
    # 1e400 parses as inf; 10**400 is an int no float holds; true is not a number
    p.write_text(json.dumps(_kt_cache([1.0])).replace('"times": [1.0]}', '"times": [10' + "0" * 400 + "]}"))
    records, report = collect("kernel-tuner", [p])
    assert len(records) == 1 and report.skipped == 1
    assert "integer of more than 128 bits" in report.errors[0]["error"]
    for bad in ("[1e400]", "[true]", '["1.0"]'):
        p.write_text(json.dumps(_kt_cache([1.0])).replace('"times": [1.0]}', f'"times": {bad}}}'))
        records, report = collect("kernel-tuner", [p])
        assert len(records) == 1 and report.skipped == 1, bad
    db = _seeded_db(tmp_path / "db")
    err = _one_error_line(_cli("import", "kernel-tuner", p, "--db", db, "--strict", "--no-models"))
    assert "not all numbers" in err
    _assert_db(db, 1)


def test_a_huge_compile_time_is_no_value_not_a_crash(tmp_path: Path) -> None:
    doc = _kt_cache([1.0])
    p = tmp_path / "A100.json"
    p.write_text(json.dumps(doc).replace('"times": [1.0]}', '"times": [1.0], "compile_time": 1' + "0" * 400 + "}"))
    records, report = collect("kernel-tuner", [p])
    assert len(records) == 2 and report.skipped == 0
    assert next(r for r in records if r.config == {"x": 2}).compile_s is None


def test_import_issues_are_plain_text(tmp_path: Path, ff_log: Path) -> None:
    """An issue's location names the file as ``display_name`` writes it (printable, UTF-8)."""
    bad = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"x\xfe.jsonl")))
    bad.write_text("{}\n")
    issues = [i for i in get_format("jsonl").parse(bad) if isinstance(i, ImportIssue)]
    assert issues and issues[0].where == "x\\xfe.jsonl:1"
