"""The store's CLI: JSON outputs and every user-error path (one line on stderr, exit 2)."""

from __future__ import annotations

import json

import pytest

from tunedb.index import Record, TuningDB

from helpers import run_cli

T = {"kind": "cpu", "name": "cli-target"}
W = {"family": "matmul", "M": 8, "N": 8, "K": 8}


@pytest.fixture()
def db_path(tmp_path):
    p = tmp_path / "db"
    TuningDB.open(p).commit([Record(T, W, {"tile": i}, [1e-3 * (i + 1)]) for i in range(5)])
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
    assert {"config", "cost", "costs", "status", "source"} <= set(recs[0])
    human = run_cli("best", "--db", str(db_path), "--target", "cli-target", "--workload", "matmul:M=8,N=8,K=8")
    assert "tile" in human.stdout and human.returncode == 0


@pytest.mark.parametrize("args", [
    ["stats", "--db", "{missing}"],
    ["best", "--target", "no-such-target", "--workload", "matmul:M=8,N=8,K=8"],
    ["best", "--target", "cli-target", "--workload", "matmul:M=9,N=9,K=9"],
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
    assert len(TuningDB.open(db_path)) == 2
    r = run_cli("invalidate", "--db", str(db_path), "--target", "cli-target", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["invalidated"] is True
    assert TuningDB.open(db_path).best(T, W) == []
