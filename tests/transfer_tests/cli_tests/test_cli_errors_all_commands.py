"""Every command, given a user's mistake - a wrong option, a missing or unreadable file, an empty
database, an unknown target or workload - exits 2 with one line on stderr and changes nothing on
disk (the database directory and the working directory, file by file, before and after).  The
``tunedb`` executable runs as a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tunedb.index import ParquetStore, Record

from helpers import tree_state

VENV_TUNEDB = Path(sys.executable).with_name("tunedb")
T = {"kind": "cpu", "name": "err-target"}
W = "matmul:M=8,N=8,K=8"
GOOD_CFG = '{"tile": 1}'

#: every command of the parser (the test below checks the list is complete)
COMMANDS = ("init", "stats", "best", "compact", "dedup", "forget", "invalidate", "import", "export", "nearest",
            "targets", "workloads", "space", "measure", "compare", "tune", "warm-start", "predict", "tune-model",
            "copy", "upgrade", "verify", "migrate", "demo", "report", "dashboard", "doctor", "publish", "keygen")

# {db}: the populated database, {empty}: an empty one, {missing}: a file that does not exist,
# {unreadable}: a directory named like a file (no one can read it as one), {badworkloads}: a
# workloads file whose second line is not a workload, {dir}: the working directory
CASES: list[tuple[str, list[str]]] = [
    # a wrong option: every command
    *[(c, [c, "--no-such-option"]) for c in COMMANDS],
    # a missing or unreadable file
    ("stats", ["stats", "--db", "{missing}"]),
    ("best", ["best", "--db", "{db}", "--target", "err-target", "--workload", "{missing}"]),
    ("import", ["import", "jsonl", "{missing}", "--db", "{db}"]),
    ("import", ["import", "jsonl", "{unreadable}", "--db", "{db}"]),
    ("measure", ["measure", "--db", "{db}", "--target", "cpu-native-t1", "--workload", W, "--config", "{missing}.json"]),
    ("compare", ["compare", "--db", "{db}", "--target", "cpu-native-t1", "--workload", W,
                 "--config", "{unreadable}", "--config", "{unreadable}"]),
    ("predict", ["predict", "--db", "{db}", "--target", "err-target", "--workload", W, "--config", "{missing}.json"]),
    ("tune", ["tune", "--db", "{db}", "--replay", "{missing}", "--budget", "2"]),
    ("warm-start", ["warm-start", "--db", "{db}", "--target", "cpu-native-t1", "--workloads", "{missing}"]),
    ("tune-model", ["tune-model", "{missing}.json", "--db", "{db}", "--target", "cpu-native-t1"]),
    ("migrate", ["migrate", "--db", "{db}", "--from", "err-target", "--replay", "{missing}"]),
    ("verify", ["verify", "--db", "{db}", "--target", "err-target", "--replay", "{unreadable}"]),
    ("report", ["report", "--db", "{db}", "--out", "{dir}/site", "--runs", "{missing}"]),
    ("copy", ["copy", "{missing}", "{dir}/copy-out"]),
    ("publish", ["publish", "{db}", "{dir}/pub", "--sign", "{missing}"]),
    ("export", ["export", "--db", "{db}", "--format", "jsonl", "{dir}/no/such/dir/out.jsonl"]),
    ("keygen", ["keygen", "{dir}/no/such/dir/key"]),
    ("upgrade", ["upgrade", "--db", "{missing}"]),
    ("compact", ["compact", "--db", "{missing}"]),
    ("dedup", ["dedup", "--db", "{missing}"]),
    ("workloads", ["workloads", "--db", "{missing}"]),
    ("dashboard", ["dashboard", "--db", "{missing}"]),
    # an empty database
    ("best", ["best", "--db", "{empty}", "--target", "err-target", "--workload", W]),
    ("nearest", ["nearest", "--db", "{empty}", "--target", "cpu-native-t1", "--workload", W]),
    ("forget", ["forget", "--db", "{empty}", "--target", "err-target"]),
    ("invalidate", ["invalidate", "--db", "{empty}", "--target", "err-target"]),
    ("workloads", ["workloads", "--db", "{empty}", "--target", "err-target"]),
    ("warm-start", ["warm-start", "--db", "{empty}", "--target", "cpu-native-t1", "--from-target", "err-target"]),
    ("migrate", ["migrate", "--db", "{empty}", "--from", "err-target", "--to", "cpu-native-t1"]),
    ("verify", ["verify", "--db", "{empty}", "--target", "err-target"]),
    ("export", ["export", "--db", "{empty}", "--format", "jsonl", "{dir}/out.jsonl", "--target", "err-target"]),
    # an unknown target or workload
    ("best", ["best", "--db", "{db}", "--target", "no-such-target", "--workload", W]),
    ("best", ["best", "--db", "{db}", "--target", "err-target", "--workload", "matmull:M=8"]),
    ("nearest", ["nearest", "--db", "{db}", "--target", "no-such-target", "--workload", W]),
    ("nearest", ["nearest", "--db", "{db}", "--target", "err-target", "--workload", "matmul:M=8,N=abc"]),
    ("space", ["space", "--workload", "softmx:M=8,N=8"]),
    ("measure", ["measure", "--db", "{db}", "--target", "no-such-target", "--workload", W, "--config", GOOD_CFG]),
    ("measure", ["measure", "--db", "{db}", "--target", "cpu-native-t1", "--workload", "matmul:M=8,N=8,X=8",
                 "--config", GOOD_CFG]),
    ("compare", ["compare", "--db", "{db}", "--target", "no-such-target", "--workload", W,
                 "--config", GOOD_CFG, "--config", GOOD_CFG]),
    ("tune", ["tune", "--db", "{db}", "--target", "no-such-target", "--workload", W, "--budget", "2"]),
    ("tune", ["tune", "--db", "{db}", "--target", "cpu-native-t1", "--workload", "matmul:M=0,N=8,K=8", "--budget", "2"]),
    ("predict", ["predict", "--db", "{db}", "--target", "no-such-target", "--workload", W, "--config", GOOD_CFG]),
    ("warm-start", ["warm-start", "--db", "{db}", "--target", "no-such-target", "--from-target", "err-target"]),
    ("warm-start", ["warm-start", "--db", "{dir}/new-db", "--target", "cpu-native-t1", "--workloads", "{badworkloads}"]),
    ("tune-model", ["tune-model", "resnet18@64", "--db", "{db}", "--target", "no-such-target"]),
    ("tune-model", ["tune-model", "no-such-model", "--db", "{db}", "--target", "cpu-native-t1"]),
    ("forget", ["forget", "--db", "{db}", "--target", "no-such-target"]),
    ("invalidate", ["invalidate", "--db", "{db}", "--target", "no-such-target"]),
    ("export", ["export", "--db", "{db}", "--format", "jsonl", "{dir}/out.jsonl", "--target", "no-such-target"]),
    ("migrate", ["migrate", "--db", "{db}", "--from", "no-such-target", "--to", "cpu-native-t1"]),
    ("verify", ["verify", "--db", "{db}", "--target", "no-such-target"]),
    ("verify", ["verify", "--db", "{db}", "--target", "err-target", "--workload", "matmul:M=8,N=8,K=8,Q=1"]),
    ("copy", ["copy", "{db}", "{dir}/copy-out", "--target", "no-such-target"]),
    ("publish", ["publish", "{db}", "{dir}/pub", "--target", "no-such-target"]),
    ("workloads", ["workloads", "--db", "{db}", "--target", "no-such-target"]),
    ("demo", ["demo", "--db", "{dir}/demo-db", "--target", "no-such-target"]),
    ("targets", ["targets", "--db", "{db}", "--workload", W]),
]


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("errs")
    db = ParquetStore.open(base / "db")
    db.commit([Record(T, {"family": "matmul", "M": 8, "N": 8, "K": 8}, {"tile": i}, [1e-3 * (i + 1)])
               for i in range(3)])
    db.close()
    ParquetStore.open(base / "empty").close()
    unreadable = base / "unreadable.json"  # a directory where a file belongs: unreadable as a file, even by root
    unreadable.mkdir()
    bad = base / "workloads.txt"
    bad.write_text("matmul:M=8,N=8,K=8\nmatmul:M=8,N=abc,K=8\n")
    return {"db": base / "db", "empty": base / "empty", "missing": base / "missing", "unreadable": unreadable,
            "badworkloads": bad}


def test_the_cases_cover_every_command():
    import argparse

    from tunedb.transfer.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    names = {n for n, p in sub.choices.items() if p.prog.split()[-1] == n}
    assert names == set(COMMANDS), names ^ set(COMMANDS)
    assert {c for c, _ in CASES} == set(COMMANDS)


@pytest.mark.slow
@pytest.mark.parametrize("command,argv", CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(CASES)])
def test_a_mistake_exits_2_with_one_line_and_changes_nothing(places, tmp_path, command, argv):
    subs = {**{k: str(v) for k, v in places.items()}, "dir": str(tmp_path)}
    args = []
    for a in argv:
        for k, v in subs.items():
            a = a.replace("{" + k + "}", v)
        args.append(a)
    before = {k: tree_state(places[k]) for k in ("db", "empty")}, tree_state(tmp_path)
    exe = [str(VENV_TUNEDB)] if VENV_TUNEDB.is_file() else [sys.executable, "-m", "tunedb"]
    r = subprocess.run([*exe, *args], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, (args, r.returncode, r.stdout[-500:], r.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("tunedb: error: "), (args, r.stderr)
    after = {k: tree_state(places[k]) for k in ("db", "empty")}, tree_state(tmp_path)
    assert after == before, args
