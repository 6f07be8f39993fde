"""A shared DB folder reaches nothing outside it: real symlinks and hand-written log versions.

A co-worker with write access to a shared DB can plant a link to another DB's folder or file, or
write a Delta log version naming a file outside the table.  Each test plants the real thing, runs
the real ``tunedb`` command on the shared DB (a subprocess), and asserts what is on disk
afterwards: the private DB's files are byte for byte as before, the shared DB did not adopt them,
and the command said so in one line (exit 2) or went on without the hostile part.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tunedb.index import ParquetStore
from tunedb.index.parquet import deltalog, parts
from tunedb.index.support.fsutil import OutsideRootError, check_no_links, relative_path_problem

from helpers import run_cli, tree_state
from outside_workers import records

SHARED_N = 300
PRIVATE_N = 900


def _db(path: Path, tag: str, n: int) -> Path:
    with ParquetStore.open(path) as h:
        h.commit(records(tag, n))
    return path


def _count(db: Path) -> int:
    with ParquetStore.open(db) as h:
        return len(h)


@pytest.fixture
def two_dbs(tmp_path):
    """(shared DB, private DB): the same three targets, different records."""
    return _db(tmp_path / "shared", "shared", SHARED_N), _db(tmp_path / "private", "private", PRIVATE_N)


def _partition(db: Path) -> Path:
    return sorted(parts.partition_dirs(db / "records"))[0]


def _refused(r, name: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert name in lines[0] and "symbolic link" in lines[0], lines[0]


@pytest.mark.parametrize("command", [["forget", "--keep-top", "1"], ["compact"], ["dedup"], ["stats"]])
def test_partition_linked_to_another_db_is_refused(two_dbs, command):
    shared, private = two_dbs
    victim = _partition(shared)
    shutil.rmtree(victim)
    os.symlink(private / "records" / victim.name, victim)  # the same target's folder, elsewhere
    before = tree_state(private)
    r = run_cli(*command, "--db", str(shared))
    _refused(r, victim.name)
    assert tree_state(private) == before  # not one file of the private DB touched
    assert _count(private) == PRIVATE_N
    assert os.path.islink(victim)  # (the shared DB is left as the co-worker made it)


def test_part_file_linked_outside_is_refused(two_dbs):
    shared, private = two_dbs
    outside = next(iter(sorted(_partition(private).glob("*part-*.parquet"))))
    link = _partition(shared) / ("part-" + "0" * 20 + "-planted.parquet")
    os.symlink(outside, link)
    before = tree_state(private)
    r = run_cli("stats", "--json", "--db", str(shared))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert link.name in r.stdout + r.stderr
    assert tree_state(private) == before


@pytest.mark.parametrize("subdir", ["records", "derived", "journal", "invalidations"])
def test_db_subfolder_that_is_a_link_is_refused(two_dbs, subdir):
    shared, private = two_dbs
    shutil.rmtree(shared / subdir)
    os.symlink(private / subdir, shared / subdir)
    before = tree_state(private)
    with pytest.raises(OutsideRootError, match=subdir):
        ParquetStore.open(shared)
    _refused(run_cli("compact", "--db", str(shared)), subdir)
    assert tree_state(private) == before


def test_the_db_path_itself_may_be_a_link(two_dbs, tmp_path):
    shared, _ = two_dbs
    os.symlink(shared, tmp_path / "alias")
    assert _count(tmp_path / "alias") == SHARED_N


@pytest.mark.parametrize("hostile", ["../../private/records/{rel}", "/{abs}", "file:///{abs}",
                                     "..%2F..%2Fprivate%2Frecords%2F{rel}"])
def test_log_version_naming_a_file_outside_is_never_adopted(two_dbs, hostile):
    shared, private = two_dbs
    f = next(iter(sorted(_partition(private).glob("*part-*.parquet"))))
    rel = f.relative_to(private / "records").as_posix()
    path = hostile.format(rel=rel, abs=str(f).lstrip("/"))
    version = deltalog.read_state(shared / "records").version + 1
    add = {"add": {"path": path, "partitionValues": {}, "size": f.stat().st_size,
                   "modificationTime": 0, "dataChange": True}}
    vfile = shared / "records" / "_delta_log" / f"{version:020d}.json"
    vfile.write_text(json.dumps({"commitInfo": {"operation": "WRITE"}}) + "\n" + json.dumps(add) + "\n")
    before = tree_state(private)
    r = run_cli("stats", "--json", "--db", str(shared))
    assert "Traceback" not in r.stderr, r.stderr
    if r.returncode == 0:  # repaired: the hostile version set aside, the rows never adopted
        assert json.loads(r.stdout)["records"] == SHARED_N
    else:  # refused: one line naming the version
        assert r.returncode == 2 and vfile.name in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert _count(shared) == SHARED_N
    assert tree_state(private) == before


def test_hostile_log_path_is_refused_naming_the_version(two_dbs):
    shared, _ = two_dbs
    version = deltalog.read_state(shared / "records").version + 1
    vfile = shared / "records" / "_delta_log" / f"{version:020d}.json"
    vfile.write_text(json.dumps({"add": {"path": "../elsewhere.parquet", "size": 1}}) + "\n")
    with pytest.raises(deltalog.CorruptLogError, match=vfile.name):
        deltalog.read_state(shared / "records")


@pytest.mark.parametrize("rel,ok", [("target_slug=a-0123/part-1.parquet", True), ("a/b", True),
                                    ("../a", False), ("a/../b", False), ("/etc/passwd", False),
                                    ("s3://bucket/x", False), ("a//b", False), ("./a", False),
                                    ("a\\..\\b", False), ("", False), ("a\x00b", False)])
def test_relative_path_rule(rel, ok):
    assert (relative_path_problem(rel) is None) is ok


def test_check_no_links_walks_every_component(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    check_no_links(tmp_path, tmp_path / "real" / "not-yet" / "file")
    with pytest.raises(OutsideRootError, match="link"):
        check_no_links(tmp_path, tmp_path / "link" / "file")
    with pytest.raises(OutsideRootError, match="outside"):
        check_no_links(tmp_path / "real", tmp_path / "elsewhere")
