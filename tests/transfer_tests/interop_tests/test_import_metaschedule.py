"""MetaSchedule JSONDatabase import/export on the shared database."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tunedb.index import ParquetStore
from tunedb.transfer.cli.main import main as cli_main
from tunedb.transfer.interop import ImportFormatError, collect
from tunedb.transfer.tuners.tvm.metaschedule_logs import RECORD_FILE, WORKLOAD_FILE, config_of, workload_of

from helpers import SHARED_DATA

DATA = SHARED_DATA
MS = DATA / "metaschedule"
needs_data = pytest.mark.skipif(not MS.is_dir(), reason=f"shared MetaSchedule data not found at {MS}")


def _json_lines(p: Path) -> list:
    return [json.loads(s) for s in p.read_text().splitlines() if s.strip()]


def _copy(tmp_path: Path, records: list[str] | None = None) -> Path:
    d = tmp_path / "ms"
    d.mkdir()
    shutil.copy(MS / WORKLOAD_FILE, d / WORKLOAD_FILE)
    if records is None:
        shutil.copy(MS / RECORD_FILE, d / RECORD_FILE)
    else:
        (d / RECORD_FILE).write_text("".join(s + "\n" for s in records))
    return d


@needs_data
def test_import_fields() -> None:
    recs, rep = collect("metaschedule", [MS])
    lines = _json_lines(MS / RECORD_FILE)
    wl = _json_lines(MS / WORKLOAD_FILE)
    assert rep.imported == len(lines) == 48 and rep.skipped == 0
    r0 = recs[0]
    widx, (trace, run_secs, target, args_info) = lines[0]
    assert r0.target["kind"] == "llvm" and r0.target["mcpu"] == "znver4" and r0.target["num-cores"] == 2
    assert r0.workload["structural_hash"] == wl[widx][0]
    assert r0.workload["shapes"] == [a[2] for a in args_info] and r0.workload["dtype"] == "float32"
    assert list(r0.costs) == pytest.approx(run_secs) and r0.status == "ok"
    assert r0.meta["metaschedule"]["record"][0] == trace  # trace kept verbatim
    knobs = {k for k in r0.config if k.startswith("decision_")}
    assert len(knobs) == len(trace[1]) and "sketch" in r0.config
    assert {k.split("_", 2)[2] for k in knobs} == {"SamplePerfectTile", "SampleCategorical"}
    fams = {(r.workload["family"], r.workload.get("M"), r.workload.get("N"), r.workload.get("K")) for r in recs}
    assert fams == {("matmul", 128, 128, 128), ("matmul", 192, 256, 64)}
    assert len({r.workload_key for r in recs}) == 2 and len({r.record_id for r in recs}) == 48


def test_config_and_workload_helpers() -> None:
    insts = [["SamplePerfectTile", ["l0"], [2, 64], ["v1", "v2"]], ["EnterPostproc", [], [], []]]
    cfg = config_of([insts, [[0, [4, 8]]]])
    assert cfg["decision_0_SamplePerfectTile"] == [4, 8] and len(cfg["sketch"]) == 16
    for bad in ([insts, [[5, 1]]], [insts, [[0, 1], [0, 2]]], [insts], "x", [[["A"]], []]):
        with pytest.raises(ValueError):
            config_of(bad)
    w = workload_of("h", [["TENSOR", "float16", [4, 5]], ["TENSOR", "float16", [5]]])
    assert w["family"] == "tir" and w["shapes"] == [[4, 5], [5]]
    with pytest.raises(ValueError):
        workload_of("h", [["TENSOR", [4], "float32"]])


@needs_data
def test_malformed_lines_and_failed_runs(tmp_path: Path) -> None:
    lines = (MS / RECORD_FILE).read_text().splitlines()
    failed = json.loads(lines[1])
    failed[1][1] = [1e10]
    empty = json.loads(lines[2])
    empty[1][1] = None
    bad_idx = json.loads(lines[3])
    bad_idx[0] = 7
    d = _copy(tmp_path, [lines[0], json.dumps(failed), json.dumps(empty), json.dumps(bad_idx), "[oops", "{}", lines[4]])
    recs, rep = collect("metaschedule", [d])
    assert rep.imported == 4 and rep.skipped == 3
    assert [e["where"] for e in rep.errors] == [f"{RECORD_FILE}:4", f"{RECORD_FILE}:5", f"{RECORD_FILE}:6"]
    assert [r.status for r in recs] == ["ok", "runtime_error", "runtime_error", "ok"]
    assert not recs[1].costs and not recs[2].costs


def test_not_a_database(tmp_path: Path) -> None:
    with pytest.raises(ImportFormatError):
        collect("metaschedule", [tmp_path])
    f = tmp_path / "x.json"
    f.write_text("[]")
    with pytest.raises(ImportFormatError):
        collect("metaschedule", [f])


def test_files_of_another_format_are_refused(tmp_path: Path, capsys) -> None:
    """Both files present but not MetaSchedule lines: refused like the other formats ("no line
    holds ..."), not imported as 0 records; an empty database is still fine."""
    d = tmp_path / "ms"
    d.mkdir()
    (d / WORKLOAD_FILE).write_text('{"input": ["llvm", "dense", [], {}], "version": 0.2}\n')
    (d / RECORD_FILE).write_text('{"input": ["llvm", "dense", [], {}], "result": [[1e-3], 0, 1, 2]}\n')
    with pytest.raises(ImportFormatError, match=f"no line of {WORKLOAD_FILE} holds"):
        collect("metaschedule", [d])
    (d / WORKLOAD_FILE).write_text('["0x1234", "ZGF0YQ=="]\n')
    with pytest.raises(ImportFormatError, match=f"no line of {RECORD_FILE} holds a MetaSchedule tuning record"):
        collect("metaschedule", [d])
    db = tmp_path / "db"
    assert cli_main(["import", "metaschedule", str(d), "--db", str(db)]) == 2
    assert "no line of" in capsys.readouterr().err
    (d / RECORD_FILE).write_text("")
    recs, rep = collect("metaschedule", [d])
    assert recs == [] and rep.skipped == 0


@needs_data
def test_cli_round_trip(tmp_path: Path, capsys) -> None:
    db = tmp_path / "db"
    assert cli_main(["import", "metaschedule", str(MS), "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["imported"] == 48
    assert cli_main(["import", "metaschedule", str(MS / RECORD_FILE), "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["new"] == 0
    assert len(ParquetStore.open(db)) == 48
    out = tmp_path / "out"
    assert cli_main(["export", "--format", "metaschedule", str(out), "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["exported"] == 48
    for name in (WORKLOAD_FILE, RECORD_FILE):
        assert _json_lines(out / name) == _json_lines(MS / name)
