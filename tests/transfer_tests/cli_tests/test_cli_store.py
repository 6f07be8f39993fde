"""The store's CLI: JSON outputs and every user-error path (one line on stderr, exit 2)."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import random
import struct
import subprocess
import sys
import termios
import threading

import pytest

from tunedb.index import ParquetStore, Record

from helpers import ROOT, run_cli, small_fs

T = {"kind": "cpu", "name": "cli-target"}
W = {"family": "matmul", "M": 8, "N": 8, "K": 8}


@pytest.fixture()
def db_path(tmp_path):
    p = tmp_path / "db"
    ParquetStore.open(p).commit([Record(T, W, {"tile": i}, [1e-3 * (i + 1)]) for i in range(5)])
    return p


def test_stats_and_best_json(db_path):
    s = json.loads(run_cli("stats", "--db", str(db_path), "--json").stdout)
    for k in ("records", "targets", "workloads", "entries", "files", "size_bytes"):
        assert k in s
    assert (s["records"], s["targets"], s["workloads"], s["entries"]) == (5, 1, 1, 1)
    b = run_cli("best", "--db", str(db_path), "--target", "cli-target", "--workload", "matmul:M=8,N=8,K=8",
                "-k", "2", "--json")
    assert b.returncode == 0, b.stderr
    recs = json.loads(b.stdout)["records"]
    assert [r["config"] for r in recs] == [{"tile": 0}, {"tile": 1}]
    assert {"config", "cost", "estimate", "source", "record_id"} <= set(recs[0])
    assert recs[0]["cost"] == recs[0]["estimate"]["value"] and recs[0]["estimate"]["records"] >= 1
    human = run_cli("best", "--db", str(db_path), "--target", "cli-target", "--workload", "matmul:M=8,N=8,K=8")
    assert "tile" in human.stdout and human.returncode == 0
    # a workload of the family this target has no records of: predicted from its nearest entries, marked so
    other = run_cli("--json", "best", "--db", str(db_path), "--target", "cli-target", "--workload", "matmul:M=9,N=9,K=9")
    assert other.returncode == 0, other.stderr
    out = json.loads(other.stdout)
    assert out["predicted"] is True and "records" not in out


@pytest.mark.parametrize("args", [
    ["stats", "--db", "{missing}"],
    ["best", "--target", "no-such-target", "--workload", "matmul:M=8,N=8,K=8"],
    ["best", "--target", "cli-target", "--workload", "matmul:M"],
    ["best", "--target", "cli-target", "--workload", "matmul:M=8,N=8,K=8", "-k", "0"],
    ["best", "--target", "cli-target"],
    ["forget"],
    ["forget", "--keep-top", "-1"],
    ["forget", "--target", "no-such-target"],
    ["invalidate", "--target", "no-such-target"],
    ["import", "jsonl", "{missing}"],
    ["export", "--format", "nope", "out"],
    ["nosuchcommand"],
])
def test_user_errors_are_one_line_exit_2(db_path, tmp_path, args):
    args = [a.replace("{missing}", str(tmp_path / "missing")) for a in args]
    if "--db" not in args and args[0] != "nosuchcommand":
        args += ["--db", str(db_path)]
    before = sorted(p.name for p in (db_path / "records").rglob("*.parquet"))
    r = run_cli(*args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert sorted(p.name for p in (db_path / "records").rglob("*.parquet")) == before


def test_maintenance_commands(db_path):
    for cmd in (["compact"], ["dedup"], ["forget", "--keep-top", "2"]):
        r = run_cli(*cmd, "--db", str(db_path), "--json")
        assert r.returncode == 0, r.stderr
        json.loads(r.stdout)
    assert len(ParquetStore.open(db_path)) == 2
    r = run_cli("invalidate", "--db", str(db_path), "--target", "cli-target", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["invalidated"] is True
    assert ParquetStore.open(db_path).best(T, W) == []


# ------------------------------------------------------------------ global options, --version
def test_global_options_before_or_after_the_command(db_path, tmp_path):
    after = run_cli("stats", "--db", str(db_path), "--json")
    assert after.returncode == 0, after.stderr
    expected = json.loads(after.stdout)
    for args in (["--db", str(db_path), "stats", "--json"], ["--json", "--db", str(db_path), "stats"],
                 ["--db", str(db_path), "--json", "stats"], ["--json", "stats", "--db", str(db_path)],
                 # a value given after the command wins over one given before
                 ["--db", str(tmp_path / "missing"), "stats", "--db", str(db_path), "--json"]):
        r = run_cli(*args)
        assert r.returncode == 0, (args, r.stderr)
        assert json.loads(r.stdout) == expected, args
        assert len(r.stdout.strip().splitlines()) == 1
    b = run_cli("--db", str(db_path), "--json", "best", "--target", "cli-target", "--workload", "matmul:M=8,N=8,K=8")
    assert b.returncode == 0 and json.loads(b.stdout)["records"][0]["config"] == {"tile": 0}, b.stderr
    # a user error stays one line and exit 2 with the options first
    r = run_cli("--db", str(tmp_path / "missing"), "stats")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("tunedb: error: ") and "Traceback" not in r.stderr


def test_version_text_and_json():
    from tunedb.index.model.version import SCHEMA_VERSION, TUNEDB_VERSION

    r = run_cli("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"tunedb {TUNEDB_VERSION} (schema {SCHEMA_VERSION})\n"
    j = run_cli("--json", "--version")
    assert j.returncode == 0, j.stderr
    assert json.loads(j.stdout) == {"tunedb": TUNEDB_VERSION, "schema": SCHEMA_VERSION}
    assert len(j.stdout.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- OSError
def _one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("tunedb: error: ")
    return lines[0]


def test_os_error_from_the_store_is_one_line_exit_2(tmp_path):
    # 100 records: more than the journal takes, so the commit writes a Parquet file into the
    # target's partition folder -- which here is a plain file (NotADirectoryError)
    src = tmp_path / "src"
    ParquetStore.open(src).commit([Record(T, W, {"tile": i}, [1e-3 * (i + 1)]) for i in range(100)])
    (partition,) = [d.name for d in (src / "records").glob("target_slug=*") if d.is_dir()]
    dump = tmp_path / "records.jsonl"
    assert run_cli("export", "--format", "jsonl", str(dump), "--db", str(src)).returncode == 0
    dst = tmp_path / "dst"
    assert run_cli("init", "--db", str(dst)).returncode == 0
    (dst / "records" / partition).write_text("")
    line = _one_line_error(run_cli("--db", str(dst), "import", "jsonl", str(dump)))
    assert line.startswith(f"tunedb: error: {os.strerror(20)} (") and partition in line, line


def test_disk_full_is_one_line_exit_2_and_writes_nothing(tmp_path):
    # a real full disk: the DB lives on a 2 MB file system, the import is larger than that
    rng = random.Random(0)
    src = tmp_path / "src"
    ParquetStore.open(src).commit([Record(T, W, {"tile": i}, [1e-3 * (i + 1)], meta={"pad": rng.randbytes(150).hex()})
                               for i in range(8000)])
    dump = tmp_path / "records.jsonl"
    assert run_cli("export", "--format", "jsonl", str(dump), "--db", str(src)).returncode == 0
    with small_fs(tmp_path / "mnt") as _kind:
        full = tmp_path / "mnt" / "db"
        assert run_cli("init", "--db", str(full)).returncode == 0
        line = _one_line_error(run_cli("--db", str(full), "import", "jsonl", str(dump)))
        assert line.startswith(f"tunedb: error: {os.strerror(errno.ENOSPC)}"), line
        stats = run_cli("--db", str(full), "--json", "stats")
        assert stats.returncode == 0 and json.loads(stats.stdout)["records"] == 0  # all-or-nothing
        assert not [p for p in full.rglob("*") if p.is_file() and p.name.startswith("_tmp-")]


def test_full_disk_with_a_dead_writers_journal_is_one_line(tmp_path):
    """A writer died and left its journal; the disk is full.  Every writing command tries to fold
    that journal first, cannot, and then fails: one ``tunedb error`` line on stderr and exit 2,
    not a warning with its source line before it."""
    dump = tmp_path / "records.jsonl"
    src = tmp_path / "src"
    ParquetStore.open(src).commit([Record(T, W, {"tile": i}, [1e-3]) for i in range(50)])
    assert run_cli("export", "--format", "jsonl", str(dump), "--db", str(src)).returncode == 0
    with small_fs(tmp_path / "mnt") as _kind:
        full = tmp_path / "mnt" / "db"
        code = ("import os, sys; from tunedb.index import ParquetStore, Record; db = ParquetStore.open(sys.argv[1]); "
                "[db.commit(Record({'kind': 'cpu', 'name': 'dead'}, {'family': 'matmul', 'M': 1}, {'t': i}, [1e-3])) "
                "for i in range(20)]; os._exit(0)")
        p = subprocess.run([sys.executable, "-c", code, str(full)], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert list((full / "journal").glob("*.jsonl")), "the dead writer's journal is left"
        with open(tmp_path / "mnt" / "filler", "wb") as f:  # fill the disk
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        for args in (["import", "jsonl", str(dump)], ["compact"], ["dedup"], ["forget", "--keep-top", "1"]):
            line = _one_line_error(run_cli("--db", str(full), *args))
            assert os.strerror(errno.ENOSPC) in line, (args, line)


def test_db_under_proc_is_one_line_exit_2():
    _one_line_error(run_cli("--db", "/proc/tunedb-x", "init"))


# ------------------------------------------------------------------------ progress bars
def _run_with_tty_stderr(*args: str) -> tuple[subprocess.CompletedProcess, str]:
    """``tunedb ARGS`` with stdout a pipe and stderr a 100x24 pseudo-terminal (where bars are drawn)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO once the child has closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        p = subprocess.run([sys.executable, "-m", "tunedb", *args], stdout=subprocess.PIPE, stderr=slave,
                           stdin=subprocess.DEVNULL, text=True, cwd=ROOT, timeout=600)
    finally:
        os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    return p, b"".join(chunks).decode("utf-8", "replace")


def test_progress_bar_command_with_json_prints_one_object_and_no_bar(tmp_path):
    db = str(tmp_path / "db")
    tune = ["tune", "--target", "cpu-native", "--budget", "3", "--db", db]
    p, err = _run_with_tty_stderr(*tune, "--workload", "matmul:M=16,N=16,K=16")
    assert p.returncode == 0, err
    assert "3/3" in err and "tune" in err, err  # on a terminal, without --json, the bar is drawn
    for args in ([*tune, "--workload", "matmul:M=16,N=24,K=16", "--json"],
                 ["--json", *tune, "--workload", "matmul:M=16,N=32,K=16"]):
        p, err = _run_with_tty_stderr(*args)
        assert p.returncode == 0, err
        assert err == "", err
        lines = p.stdout.strip().splitlines()
        assert len(lines) == 1, p.stdout
        out = json.loads(lines[0])
        assert out["evaluations"] == 3 and out["best"]["cost"] > 0
