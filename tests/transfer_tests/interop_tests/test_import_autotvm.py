"""AutoTVM (TopHub) log import/export on real TopHub lines."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tunedb.index import ParquetStore, Record
from tunedb.transfer.cli.main import main as cli_main
from tunedb.transfer.interop import ImportFormatError, Prepared, collect, make_record
from tunedb.transfer.tuners.tvm.autotvm_logs import family_of_task, parse_target_string

from helpers import SHARED_DATA

DATA = SHARED_DATA
TOPHUB = DATA / "tophub"
needs_data = pytest.mark.skipif(not TOPHUB.is_dir(), reason=f"shared TopHub data not found at {TOPHUB}")


def _lines(name: str) -> list[str]:
    return [s for s in (TOPHUB / name).read_text().splitlines() if s.strip() and not s.startswith("#")]


def _write(tmp_path: Path, lines: list[str], name: str = "slice.log") -> Path:
    p = tmp_path / name
    p.write_text("".join(s + "\n" for s in lines))
    return p


def test_parse_target_string() -> None:
    t = parse_target_string("llvm -device=arm_cpu -model=rk3399 -mtriple=aarch64-linux-gnu -mattr=+neon,+v8")
    assert t["kind"] == "llvm" and t["device"] == "arm_cpu" and t["model"] == "rk3399"
    assert t["mtriple"] == "aarch64-linux-gnu" and t["mattr"] == ["+neon", "+v8"]
    assert t["keys"] == ["arm_cpu", "cpu"] and t["raw"].startswith("llvm -device")
    assert parse_target_string("cuda -model=titanx")["keys"] == ["cuda", "gpu"]
    assert parse_target_string("llvm -mcpu=skylake-avx512")["mcpu"] == "skylake-avx512"
    assert parse_target_string("opencl -model=1080ti -keys=opencl,gpu")["keys"] == ["opencl", "gpu"]
    quoted = parse_target_string('vulkan -device_name="AMD Radeon Graphics (RADV RENOIR)" -keys=vulkan,gpu')
    assert quoted["device_name"] == "AMD Radeon Graphics (RADV RENOIR)" and quoted["keys"] == ["vulkan", "gpu"]
    for bad in ("", "   ", "-model=x", "cuda model=x", "cuda -model=a -model=b", 'cuda -model="titanx'):
        with pytest.raises(ValueError):
            parse_target_string(bad)


@pytest.mark.parametrize("task,family,layout", [
    ("conv2d_nchw.cuda", "conv2d", "nchw"),
    ("conv2d_nchw_winograd.cuda", "conv2d", "nchw"),
    ("conv2d_nchw_spatial_pack.arm_cpu", "conv2d", "nchw"),
    ("depthwise_conv2d_nchw.arm_cpu", "depthwise_conv2d", "nchw"),
    ("conv2d_transpose_nchw.cuda", "conv2d_transpose", "nchw"),
    ("conv1d_transpose_nchw.cuda", "conv1d_transpose", "nchw"),
    ("conv2d_NCHWc.x86", "conv2d", "NCHWc"),
    ("batch_matmul.cuda", "batch_matmul", None),
    ("dense_small_batch.cuda", "dense", None),
])
def test_family_of_task(task: str, family: str, layout: str | None) -> None:
    assert family_of_task(task) == (family, layout)


@needs_data
def test_import_slice_fields(tmp_path: Path) -> None:
    lines = _lines("cuda_v0.10.log")[:20]
    recs, rep = collect("autotvm", [_write(tmp_path, lines)])
    assert rep.imported == 20 and rep.skipped == 0 and len(recs) == 20
    r = recs[0]
    src = json.loads(lines[0])
    assert r.target["kind"] == "cuda" and r.target["model"] == "titanx" and r.target["raw"] == "cuda -model=titanx"
    assert r.workload["family"] == "conv2d" and r.workload["task"] == "conv2d_nchw.cuda"
    assert r.workload["shapes"] == [[1, 2048, 8, 8], [192, 2048, 1, 1]] and r.workload["dtypes"] == ["float32"] * 2
    assert r.workload["args"] == [[1, 1], [0, 0, 0, 0], [1, 1], "float32"]
    assert r.config == {k: v for k, _, v in src["config"]["entity"]}
    assert isinstance(r.config["tile_f"], list)
    assert list(r.costs) == src["result"][0] and r.status == "ok"
    assert r.wall_s == pytest.approx(src["result"][2])
    assert r.timestamp.timestamp() == pytest.approx(src["result"][3])
    assert r.source == "imported:autotvm" and r.meta["autotvm"] == src
    assert len({x.record_id for x in recs}) == 20
    for x in recs:
        x.validate()


@needs_data
def test_arm_and_llvm_targets(tmp_path: Path) -> None:
    arm = _lines("arm_cpu_v0.08.log")[:3]
    llvm = _lines("llvm_v0.04.log")[:3]
    recs, rep = collect("autotvm", [_write(tmp_path, arm, "a.log"), _write(tmp_path, llvm, "b.log")])
    assert rep.imported == 6
    a = recs[0].target
    assert a["device"] == "arm_cpu" and a["model"] == "bcm2837" and a["mattr"] == ["+neon"]
    assert a["mtriple"] == "armv7l-linux-gnueabihf" and a["keys"] == ["arm_cpu", "cpu"]
    assert recs[0].config["ann_spatial"] == ["unroll", "none", "vec"]
    assert recs[3].target["mcpu"] == "skylake-avx512"
    assert recs[3].workload["family"] == "conv2d" and recs[3].workload["layout"] == "NCHWc"


@needs_data
def test_error_no_mapping(tmp_path: Path) -> None:
    base = json.loads(_lines("cuda_v0.10.log")[0])
    expect = {0: "ok", 1: "invalid", 2: "compile_error", 3: "compile_error", 4: "runtime_error",
              5: "wrong_result", 6: "timeout", 7: "timeout", 8: "runtime_error", 42: "runtime_error"}
    lines = []
    for no in expect:
        v = json.loads(json.dumps(base))
        v["result"][1] = no
        if no:
            v["result"][0] = [1e9]
        lines.append(json.dumps(v))
    recs, rep = collect("autotvm", [_write(tmp_path, lines)])
    assert rep.skipped == 0
    assert [r.status for r in recs] == list(expect.values())
    assert all(not r.costs for r in recs[1:]) and "error_no 1" in recs[1].error


@needs_data
def test_v01_pickle_and_malformed_lines_skipped(tmp_path: Path) -> None:
    good = _lines("cuda_v0.10.log")[:3]
    v01 = json.dumps({"i": ["cuda", "conv2d", [], {}, [], {}], "r": [[1e-4], 0, 1.0, 1.0], "v": 0.1})
    pickle_line = "gANYBAAAAGN1ZGFxAC4=\tgANdcQAu\tgANLAC4="  # never decoded
    bad_json = '{"input": ['
    no_costs = json.loads(good[0])
    no_costs["result"][0] = []
    neg = json.loads(good[0])
    neg["result"][0] = [-1.0]
    lines = [good[0], v01, pickle_line, good[1], bad_json, json.dumps(no_costs), json.dumps(neg), "[1, 2]", good[2]]
    recs, rep = collect("autotvm", [_write(tmp_path, ["# comment"] + lines)])
    assert rep.imported == 3 and rep.skipped == 6
    assert rep.skipped_by_kind == {"unsupported": 2, "malformed": 4}
    wheres = [e["where"] for e in rep.errors]
    assert wheres == ["slice.log:3", "slice.log:4", "slice.log:6", "slice.log:7", "slice.log:8", "slice.log:9"]
    assert "v0.1" in rep.errors[0]["error"] and "pickle" in rep.errors[1]["error"]


def test_not_an_autotvm_log(tmp_path: Path) -> None:
    p = tmp_path / "x.log"
    p.write_text("hello\nworld\n")
    with pytest.raises(ImportFormatError):
        collect("autotvm", [p])
    b = tmp_path / "b.log"
    b.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ImportFormatError):
        collect("autotvm", [b])


@needs_data
def test_fast_record_equals_constructor(tmp_path: Path) -> None:
    recs, _ = collect("autotvm", [_write(tmp_path, _lines("opencl_v0.04.log")[:5])])
    for r in recs:
        slow = Record(r.target, r.workload, r.config, costs=r.costs, status=r.status, error=r.error,
                      compile_s=r.compile_s, wall_s=r.wall_s, timestamp=r.timestamp, source=r.source,
                      meta=r.meta, record_id=r.record_id, host=r.host, origin=r.origin)
        assert r.origin == "slice.log" or r.origin
        for f in dataclasses.fields(Record):
            assert getattr(r, f.name) == getattr(slow, f.name), f.name
    t = Prepared.of({"kind": "cpu", "x": 2.0}, "target")
    w = Prepared.of({"family": "f"}, "workload")
    r = make_record(t, w, {"a": 8.0, "b": [1.0, 0.5]}, costs=[1], source="imported:autotvm", record_id="a" * 32,
                    meta={"m": {"n": 3.0}})
    slow = Record({"kind": "cpu", "x": 2.0}, {"family": "f"}, {"a": 8.0, "b": [1.0, 0.5]}, costs=[1],
                  source="imported:autotvm", record_id="a" * 32, meta={"m": {"n": 3.0}}, timestamp=r.timestamp)
    assert r == slow and r.config_key == slow.config_key and r.config_json == slow.config_json
    with pytest.raises(ValueError):
        make_record(t, w, {"a": float("nan")}, costs=[1], source="imported:autotvm", record_id="b" * 32)
    with pytest.raises(ValueError):
        make_record(t, w, {}, costs=[], status="ok", source="imported:autotvm", record_id="c" * 32)


@needs_data
def test_cli_round_trip_and_reimport(tmp_path: Path, capsys) -> None:
    db = tmp_path / "db"
    src = TOPHUB / "cuda_v0.10.log"
    assert cli_main(["import", "autotvm", str(src), "--db", str(db), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    n = len(_lines("cuda_v0.10.log"))
    assert out["imported"] == n and out["new"] == n and out["skipped"] == 0
    assert cli_main(["import", "autotvm", str(src), "--db", str(db), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["imported"] == n and again["new"] == 0
    assert len(ParquetStore.open(db)) == n
    log = tmp_path / "out.log"
    assert cli_main(["export", "--format", "autotvm", str(log), "--db", str(db), "--json"]) == 0
    exp = json.loads(capsys.readouterr().out)
    assert exp["exported"] == n
    assert [json.loads(s) for s in log.read_text().splitlines()] == [json.loads(s) for s in _lines("cuda_v0.10.log")]
    # exported log re-imports to the very same records
    assert cli_main(["import", "autotvm", str(log), "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["new"] == 0


@needs_data
def test_cli_device_override_and_target_filter(tmp_path: Path, capsys) -> None:
    db = tmp_path / "db"
    p = _write(tmp_path, _lines("cuda_v0.10.log")[:4])
    assert cli_main(["import", "autotvm", str(p), "--db", str(db), "--device", "mygpu", "--json"]) == 0
    capsys.readouterr()
    tab = ParquetStore.open(db).records()
    targets = {json.loads(t)["model"] for t in tab.column("target").to_pylist()}
    assert targets == {"mygpu"}
    name = tab.column("target_name")[0].as_py()
    out = tmp_path / "o.log"
    assert cli_main(["export", "--format", "autotvm", str(out), "--db", str(db), "--target", name, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["exported"] == 4


@needs_data
def test_cli_strict_writes_nothing(tmp_path: Path, capsys) -> None:
    db = tmp_path / "db"
    lines = _lines("cuda_v0.10.log")[:5]
    p = _write(tmp_path, lines[:2] + ["{not json"] + lines[2:])
    rc = cli_main(["import", "autotvm", str(p), "--db", str(db), "--strict", "--json"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "slice.log:3" in err and "Traceback" not in err
    assert len(ParquetStore.open(db)) == 0
    # without --strict the good lines go in and the bad one is reported with its line number
    assert cli_main(["import", "autotvm", str(p), "--db", str(db), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["imported"] == 5 and out["skipped"] == 1 and out["errors"][0]["where"] == "slice.log:3"


def test_cli_user_errors(tmp_path: Path, capsys) -> None:
    db = tmp_path / "db"
    assert cli_main(["import", "autotvm", str(tmp_path / "missing.log"), "--db", str(db)]) == 2
    assert cli_main(["import", "jsonl", str(tmp_path), "--device", "x", "--db", str(db)]) == 2
    assert cli_main(["export", "--format", "autotvm", str(tmp_path / "o.log"), "--db", str(tmp_path / "nodb")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 3 and "Traceback" not in err
