"""An export that would write no record writes nothing (no file, no directory), says why in one
line and exits 2, in each format and under ``--json`` (one JSON object)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from helpers import SHARED_DATA, run_cli

KT = SHARED_DATA / "kernel_tuner"
TOPHUB = SHARED_DATA / "tophub" / "llvm_v0.04.log"
pytestmark = pytest.mark.skipif(not (KT.is_dir() and TOPHUB.is_file()), reason="shared data not present")


@pytest.fixture(scope="module")
def kt_db(tmp_path_factory) -> tuple[Path, int]:
    """A DB of Kernel Tuner records only (a real cache's first 50 entries), and their count."""
    tmp = tmp_path_factory.mktemp("kt_only")
    with gzip.open(KT / "convolution_milo" / "A100.json.gz", "rt") as f:
        doc = json.load(f)
    doc["cache"] = dict(list(doc["cache"].items())[:50])
    src = tmp / "A100.json"
    src.write_text(json.dumps(doc))
    db = tmp / "db"
    p = run_cli("import", "kernel-tuner", str(src), "--db", str(db), "--no-models")
    assert p.returncode == 0, p.stderr
    return db, len(doc["cache"])


@pytest.mark.parametrize("fmt, out_name, why", [
    ("autotvm", "out.log", "are AutoTVM records: autotvm export writes only records tuned by AutoTVM"),
    ("metaschedule", "ms_db", "are MetaSchedule records: metaschedule export writes only records tuned by "
                              "MetaSchedule"),
])
def test_an_export_of_no_record_of_the_format_exits_2_and_writes_nothing(tmp_path, kt_db, fmt, out_name, why):
    db, n = kt_db
    out = tmp_path / out_name
    p = run_cli("export", "--format", fmt, str(out), "--db", str(db))
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tunedb: error: 0 of {n} records {why}"), p.stderr
    assert not out.exists() and sorted(tmp_path.iterdir()) == []
    j = run_cli("export", "--format", fmt, str(out), "--db", str(db), "--json")
    assert j.returncode == 2 and not out.exists()
    obj = json.loads(j.stdout if j.stdout.strip() else j.stderr)
    assert f"0 of {n} records" in json.dumps(obj)


def test_kernel_tuner_export_of_autotvm_records_exits_2(tmp_path):
    db = tmp_path / "db"
    lines = TOPHUB.read_text().splitlines()[:20]
    log = tmp_path / "tophub.log"
    log.write_text("\n".join(lines) + "\n")
    assert run_cli("import", "autotvm", str(log), "--db", str(db), "--no-models").returncode == 0
    out = tmp_path / "caches"
    p = run_cli("export", "--format", "kernel-tuner", str(out), "--db", str(db))
    assert p.returncode == 2 and "records are Kernel Tuner configs" in p.stderr and len(p.stderr.splitlines()) == 1
    assert not out.exists()


def test_an_export_of_an_empty_database_exits_2(tmp_path):
    db = tmp_path / "db"
    assert run_cli("init", "--db", str(db)).returncode in (0, 2)
    out = tmp_path / "all.jsonl"
    p = run_cli("export", "--format", "jsonl", str(out), "--db", str(db))
    if "no such" in p.stderr or "does not exist" in p.stderr:
        pytest.skip("no way to create an empty database from the CLI here")
    assert p.returncode == 2 and "0 records to export" in p.stderr and not out.exists()
