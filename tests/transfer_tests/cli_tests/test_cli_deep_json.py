"""JSON a user hands the command line -- a workload, config or target file, an inline
``--workload`` or ``--config`` -- nested past the depth limit (``MAX_JSON_DEPTH`` levels of objects
and lists) is refused with one line on stderr and exit 2, never a ``RecursionError`` traceback,
and the database is left as it was.  ``tunedb`` runs as a real subprocess.

Depths (of the nested value; the object around it adds one level): 64 (the whole JSON one level
past the limit, which the standard parser would accept), 2,000 (past the parser's own recursion
limit) and 100,000 in a file; inline arguments stop at 60,000 levels (120,000 characters: one
argument may hold at most 128 KiB on Linux)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tunedb.index import ParquetStore, Record
from tunedb.index.model.keys import MAX_JSON_DEPTH

from helpers import tree_state

VENV_TUNEDB = Path(sys.executable).with_name("tunedb")
EXE = [str(VENV_TUNEDB)] if VENV_TUNEDB.is_file() else [sys.executable, "-m", "tunedb"]
T = {"kind": "cpu", "name": "deep-target"}
W = "matmul:M=8,N=8,K=8"
FILE_DEPTHS = (MAX_JSON_DEPTH, 2_000, 100_000)
INLINE_DEPTHS = (MAX_JSON_DEPTH, 2_000, 60_000)


def _nested(depth: int) -> str:
    """A JSON list nested ``depth`` levels deep (``[[...]]``)."""
    return "[" * depth + "]" * depth


def _workload(depth: int) -> str:
    """A workload object whose value nests ``depth`` levels below it (``depth + 1`` in all)."""
    return '{"family": "matmul", "M": ' + _nested(depth) + "}"


def _config(depth: int) -> str:
    return '{"tile": ' + _nested(depth) + "}"


def _target(depth: int) -> str:
    return '{"kind": "cpu", "name": ' + _nested(depth) + "}"


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("deep") / "db"
    with ParquetStore.open(path) as store:
        store.commit([Record(T, {"family": "matmul", "M": 8, "N": 8, "K": 8}, {"tile": i}, [1e-3 * (i + 1)])
                      for i in range(3)])
    return path


def _refused(db: Path, cwd: Path, *args: str) -> str:
    """Run ``tunedb ARGS`` on ``db``; assert exit 2, one stderr line, no traceback, the database
    and the working directory unchanged; return the line."""
    before = tree_state(db), tree_state(cwd)
    r = subprocess.run([*EXE, *args, "--db", str(db)], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stderr, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tunedb: error: "), r.stderr[-2000:]
    assert (tree_state(db), tree_state(cwd)) == before
    return lines[0]


def _says_too_deep(line: str, what: str) -> None:
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in line and what in line, line


@pytest.mark.parametrize("depth", FILE_DEPTHS)
def test_best_refuses_a_deep_workload_file(db: Path, tmp_path: Path, depth: int) -> None:
    f = tmp_path / "w.json"
    f.write_text(_workload(depth))
    _says_too_deep(_refused(db, tmp_path, "best", "--target", "deep-target", "--workload", str(f)),
                   f"workload file {f}")


@pytest.mark.parametrize("depth", INLINE_DEPTHS)
def test_best_refuses_a_deep_inline_workload(db: Path, tmp_path: Path, depth: int) -> None:
    _says_too_deep(_refused(db, tmp_path, "best", "--target", "deep-target", "--workload", _workload(depth)),
                   "workload")


@pytest.mark.parametrize("depth", INLINE_DEPTHS)
def test_measure_refuses_a_deep_inline_config(db: Path, tmp_path: Path, depth: int) -> None:
    line = _refused(db, tmp_path, "measure", "--target", "cpu-native-t1", "--workload", W, "--config", _config(depth))
    _says_too_deep(line, "config")


@pytest.mark.parametrize("depth", FILE_DEPTHS)
def test_measure_refuses_a_deep_config_file(db: Path, tmp_path: Path, depth: int) -> None:
    f = tmp_path / "c.json"
    f.write_text(_config(depth))
    line = _refused(db, tmp_path, "measure", "--target", "cpu-native-t1", "--workload", W, "--config", str(f))
    _says_too_deep(line, f"config file {f}")


@pytest.mark.parametrize("depth", (2_000, 100_000))
def test_a_deep_target_file_is_one_line(db: Path, tmp_path: Path, depth: int) -> None:
    f = tmp_path / "t.json"
    f.write_text(_target(depth))
    _says_too_deep(_refused(db, tmp_path, "best", "--target", str(f), "--workload", W), f"target file {f}")


def test_a_workload_within_the_limit_still_reads(db: Path, tmp_path: Path) -> None:
    """The same inline workload spelling at depth 1 answers (exit 0): only depth is refused."""
    r = subprocess.run([*EXE, "best", "--db", str(db), "--target", "deep-target", "--workload",
                        '{"family": "matmul", "M": 8, "N": 8, "K": 8}'], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_target_file_within_the_limits_is_read(tmp_path):
    from tunedb.index.hardware.targets import MAX_TARGET_FILE, resolve_target

    f = tmp_path / "t.json"
    f.write_text(json.dumps({"kind": "cpu", "name": "from-file", "nested": {"a": {"b": [1, 2]}}}))
    assert resolve_target(str(f))["name"] == "from-file"
    f.write_text(" " * MAX_TARGET_FILE + "{}")
    with pytest.raises(ValueError, match="over 1 MiB"):
        resolve_target(str(f))
