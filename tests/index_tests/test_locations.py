"""Store locations: ``parse_location`` names each kind, and the opener, the command line and
the dashboard command give one answer -- and one error line -- for every location."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest

from tunedb.index import ParquetStore, Record
from tunedb.index.opener import MEMORY, PARQUET, POSTGRES, REMOTE, SNAPSHOT, open_error_line, open_store, parse_location
from tunedb.index.parquet.layout import MARKER
from tunedb.transfer.cli.main import main

T = {"kind": "cpu", "name": "loc-target"}
W = {"family": "matmul", "M": 8, "N": 8, "K": 8}


@pytest.mark.parametrize("text, kind, path", [
    ("tunedb-data", PARQUET, "tunedb-data"),
    ("./a/b", PARQUET, "./a/b"),
    ("/abs/db", PARQUET, "/abs/db"),
    ("C://db", PARQUET, "C://db"),  # a one-letter "scheme" is a drive, not a URL
    ("file:///abs/my%20db", PARQUET, "/abs/my db"),
    ("file://localhost/abs/db", PARQUET, "/abs/db"),
    ("s3://bucket/db", REMOTE, None),
    ("gs://bucket/db", REMOTE, None),
    ("https://host/db", SNAPSHOT, None),  # a published snapshot (tunedb publish), read-only
    ("postgresql://user@host/db", POSTGRES, None),
    ("postgres://host/db", POSTGRES, None),
    ("memory:", MEMORY, None),
    ("memory:name", MEMORY, None),
])
def test_each_kind(text, kind, path):
    loc = parse_location(text)
    assert (loc.text, loc.kind, loc.path) == (text, kind, path)
    assert loc.is_local_directory == (kind == PARQUET)
    assert parse_location(Path(text) if kind == PARQUET and "://" not in text else text).kind == kind
    if kind == MEMORY:
        assert loc.name == text[len("memory:"):] and not loc.same_store_as(parse_location(text))
    if kind == REMOTE:
        with pytest.raises(ValueError, match="remote directory"):
            loc.check_openable()
    else:
        loc.check_openable()


@pytest.mark.parametrize("text", ["", "file://otherhost/db"])
def test_what_is_no_location(text):
    with pytest.raises(ValueError):
        parse_location(text)


def test_a_file_url_and_its_path_are_one_store(tmp_path):
    d = tmp_path / "db"
    ParquetStore.open(d).commit([Record(T, W, {"tile": 1}, [1e-3])])
    url = "file://" + str(d)
    assert parse_location(url).same_store_as(parse_location(str(d)))
    assert len(open_store(url, create=False).best(T, W)) == 1


def _cli(capsys, *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    err = capsys.readouterr().err
    return rc, err


def _opener_line(location: str, **options) -> str:
    with pytest.raises((OSError, ValueError)) as e:
        open_store(location, **options)
    return open_error_line(e.value)


@pytest.fixture()
def fake_dash(monkeypatch):
    """The dashboard command checks for dash and plotly first; its opening errors come before
    either is used, so empty modules stand in where they are not installed."""
    for name in ("dash", "plotly"):
        if name not in sys.modules:
            try:
                __import__(name)
            except ImportError:
                monkeypatch.setitem(sys.modules, name, types.ModuleType(name))


def test_a_remote_directory_is_refused_alike_everywhere(tmp_path, monkeypatch, capsys, fake_dash):
    monkeypatch.chdir(tmp_path)
    line = _opener_line("s3://bucket/db")
    assert "remote directory" in line
    for argv in (["stats", "--db", "s3://bucket/db"],
                 ["stats", "--db", str(tmp_path / "top"), "--also", "s3://bucket/db"],
                 ["copy", "s3://bucket/db", str(tmp_path / "dst")],
                 ["dashboard", "--db", "s3://bucket/db", "--port", "0"]):
        rc, err = _cli(capsys, *argv)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and line in err, (argv, err)
    assert not (tmp_path / "s3:").exists() and not (tmp_path / "dst").exists()  # nothing made locally


@pytest.mark.parametrize("where", ["missing", "not-a-db", "empty"])
def test_a_directory_that_is_no_db_is_one_error_alike_everywhere(tmp_path, capsys, fake_dash, where):
    loc = tmp_path / where
    if where != "missing":
        loc.mkdir()
    if where == "not-a-db":
        (loc / "x.txt").write_text("x")
    line = _opener_line(str(loc), create=False, read_only=True)
    assert str(loc) in line
    rc, err = _cli(capsys, "dashboard", "--db", str(loc), "--port", "0")
    assert rc == 2 and err.strip().splitlines() == [f"tunedb: error: cannot open database {loc}: {line}"]
    if where != "empty":  # (an empty directory is a new DB for a writer)
        rc, err = _cli(capsys, "copy", str(loc), str(tmp_path / "dst"))
        assert err.strip().splitlines() == [f"tunedb: error: cannot open source {loc}: "
                                            f"{_opener_line(str(loc), create=False)}"] and rc == 2
    assert where == "missing" and not loc.exists() or sorted(os.listdir(loc)) == (["x.txt"] if where == "not-a-db"
                                                                                 else [])
    assert not (tmp_path / "dst").exists()


def test_a_read_only_open_of_an_empty_directory_writes_no_marker(tmp_path):
    (tmp_path / "e").mkdir()
    with pytest.raises(ValueError, match=MARKER):
        open_store(tmp_path / "e", create=False, read_only=True)
    assert os.listdir(tmp_path / "e") == []


def test_an_unreachable_database_server_is_one_error_alike(capsys, fake_dash):
    url = "postgresql://nobody@127.0.0.1:1/none"
    line = _opener_line(url)
    for argv in (["stats", "--db", url], ["dashboard", "--db", url, "--port", "0"]):
        rc, err = _cli(capsys, *argv)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and line in err, (argv, err)


def test_memory_and_directories_open_and_a_layer_given_twice_is_one_error(tmp_path, capsys):
    d = tmp_path / "db"
    ParquetStore.open(d).commit([Record(T, W, {"tile": 1}, [1e-3])])
    assert _cli(capsys, "stats", "--db", "memory:")[0] == 0
    assert _cli(capsys, "stats", "--db", str(d), "--also", "memory:", "--also", "memory:")[0] == 0
    rc, err = _cli(capsys, "stats", "--db", str(d), "--also", "file://" + str(d))
    assert rc == 2 and "given twice" in err and len(err.strip().splitlines()) == 1
    rc, err = _cli(capsys, "copy", str(d), "file://" + str(d))
    assert rc == 2 and "same store" in err
