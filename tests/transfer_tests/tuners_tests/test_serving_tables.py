"""vLLM / SGLang fused-MoE config tables: import, round trip, a predicted table for a hidden
device, and the CLI's one-line errors -- on the shipped tables in ../shared/data/vllm_moe."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tunedb.transfer.interop import collect
from tunedb.transfer.tuners.serving.evaluate import vllm_default_config
from tunedb.transfer.tuners.serving.names import Shape, parse_name, parse_shape, table_name

from helpers import SHARED_DATA, run_cli

TABLES = SHARED_DATA / "vllm_moe" / "configs"
pytestmark = pytest.mark.skipif(not TABLES.is_dir(), reason=f"shared vLLM tables not found at {TABLES}")
#: the shipped files whose layout is not json.dumps indent 2 or 4 (compared after json.load)
ODD_LAYOUT = {"E=1,N=1792,device_name=NVIDIA_H100_80GB_HBM3,dtype=int8_w8a16.json",
              "E=128,N=1536,device_name=AMD_Instinct_MI308X,dtype=int4_w4a16.json",
              "E=128,N=384,device_name=AMD_Radeon_Graphics.json"}
HIDDEN = "NVIDIA_H200"


def _entries(path: Path) -> int:
    return sum(1 for k in json.loads(path.read_text()) if k != "triton_version")


@pytest.fixture(scope="module")
def full_db(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("full") / "db"
    r = run_cli("--db", str(db), "import", "vllm-moe", str(TABLES), "--no-models")
    assert r.returncode == 0, r.stderr
    return db


def test_import_counts_every_entry_as_one_best_only_record():
    records, report = collect("vllm-moe", [TABLES])
    files = sorted(TABLES.iterdir())
    assert len(records) == sum(_entries(f) for f in files) and report.skipped == 0
    one = next(r for r in records if r.origin == "E=128,N=1024,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
               and r.workload["M"] == 64)
    doc = json.loads((TABLES / one.origin).read_text())
    assert one.target == {"kind": "gpu", "name": "NVIDIA H200", "vendor": "nvidia"}
    assert one.workload["family"] == "fused_moe" and one.workload["dtype"] == "fp8_w8a8"
    assert (one.workload["E"], one.workload["N"]) == (128, 1024) and "block_shape" not in one.workload
    assert one.config == doc["64"] and one.status == "ok" and one.source == "imported:vllm-moe"
    assert one.meta["vllm_moe"]["best_only"] is True and one.costs == (1.0,)
    block = next(r for r in records if "block_shape" in r.workload)
    assert block.workload["block_shape"] == [128, 128]
    # a table holding "triton_version" keeps it on its workloads, not as a batch size
    versioned = next(f for f in files if "triton_version" in json.loads(f.read_text()))
    ver = json.loads(versioned.read_text())["triton_version"]
    assert all(r.workload["triton_version"] == ver for r in records if r.origin == versioned.name)


def test_names_and_keys_not_understood_are_reported_and_skipped(tmp_path):
    good = TABLES / "E=128,N=1024,device_name=NVIDIA_H200.json"
    d = tmp_path / "tables"
    (d / "triton_3_1_0").mkdir(parents=True)
    shutil.copy(good, d / good.name)
    shutil.copy(good, d / "triton_3_1_0" / good.name)
    (d / "E=8,N=abc,device_name=NVIDIA_H100.json").write_text(good.read_text())
    (d / "E=8,N=64,device_name=NVIDIA_H100,dtype=fp9_magic.json").write_text(good.read_text())
    bad_key = json.loads(good.read_text())
    bad_key["lots"] = bad_key["1"]
    (d / "E=8,N=64,device_name=NVIDIA_H100.json").write_text(json.dumps(bad_key, indent=4))
    (d / "notes").mkdir()
    records, report = collect("vllm-moe", [d])
    n = _entries(good)
    assert len(records) == 3 * n  # the good table twice, the table with a bad key less that key
    wheres = {e["where"]: e["error"] for e in report.errors}
    assert report.skipped == 4 and set(wheres) == {"E=8,N=abc,device_name=NVIDIA_H100.json",
                                                   "E=8,N=64,device_name=NVIDIA_H100,dtype=fp9_magic.json",
                                                   "E=8,N=64,device_name=NVIDIA_H100.json:lots", "notes/"}
    assert "unknown dtype 'fp9_magic'" in wheres["E=8,N=64,device_name=NVIDIA_H100,dtype=fp9_magic.json"]
    sglang = [r for r in records if r.origin.startswith("triton_3_1_0/")]
    assert len(sglang) == n and all(r.workload["triton_version"] == "3.1.0" for r in sglang)
    # the CLI's summary names each skipped file or key on its own line
    r = run_cli("--db", str(tmp_path / "db"), "import", "vllm-moe", str(d), "--no-models")
    assert r.returncode == 0, r.stderr
    skipped = [line for line in r.stdout.splitlines() if line.strip().startswith("skipped ")]
    assert len(skipped) == 4 and any("notes/" in line for line in skipped)


def test_import_then_export_gives_the_shipped_files_back(full_db, tmp_path):
    out = tmp_path / "out"
    r = run_cli("--db", str(full_db), "export", "--format", "vllm-moe", str(out))
    assert r.returncode == 0, r.stderr
    shipped = sorted(p.name for p in TABLES.iterdir())
    assert sorted(p.name for p in out.iterdir()) == shipped
    same_bytes = {n for n in shipped if (out / n).read_bytes() == (TABLES / n).read_bytes()}
    assert set(shipped) - same_bytes == ODD_LAYOUT  # 90 of 93 byte-identical
    for n in ODD_LAYOUT:
        assert json.loads((out / n).read_text()) == json.loads((TABLES / n).read_text())


def test_export_for_a_hidden_device_is_a_loadable_predicted_table(tmp_path):
    kept = tmp_path / "kept"
    kept.mkdir()
    hidden = [p for p in TABLES.iterdir() if f"device_name={HIDDEN}," in p.name or
              p.name.endswith(f"device_name={HIDDEN}.json")]
    for p in TABLES.iterdir():
        if p not in hidden:
            shutil.copy(p, kept / p.name)
    db = tmp_path / "db"
    assert run_cli("--db", str(db), "import", "vllm-moe", str(kept), "--no-models").returncode == 0
    original = next(p for p in hidden if p.name == f"E=128,N=1024,device_name={HIDDEN},dtype=fp8_w8a8.json")
    out = tmp_path / "out"
    r = run_cli("--db", str(db), "export", "--format", "vllm-moe", "--target", "NVIDIA H200",
                "--shape", "E=128,N=1024,dtype=fp8_w8a8", str(out))
    assert r.returncode == 0, r.stderr
    table = out / original.name  # the name vLLM looks up on that device
    doc = json.loads(table.read_text())
    ms = [int(k) for k in doc]
    assert ms == sorted(ms) and list(doc) == [str(m) for m in ms] and 1 in ms and 4096 in ms
    assert all({"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_warps", "num_stages"} <= set(c)
               for c in doc.values())
    side = json.loads((out / (original.name + ".tunedb.json")).read_text())
    assert side["predicted"] is True and side["entries_own"] == 0
    assert set(side["entries"]) == set(doc)
    assert all(e["source"] == "predicted" and e["from_device"] != "NVIDIA H200" and "dtype=fp8_w8a8" in e["from_shape"]
               for e in side["entries"].values())
    assert sorted(p.name for p in out.iterdir()) == sorted([original.name, original.name + ".tunedb.json"])


@pytest.mark.parametrize("args, message", [
    (["--target", "NVIDIA H200", "--shape", "E=8,N=lots"], "bad --shape"),
    (["--target", "NVIDIA H200", "--shape", "N=8,E=8"], "bad --shape"),
    (["--shape", "E=8,N=64"], "--shape needs --target"),
    (["--target", "Foo Bar 9000", "--shape", "E=8,N=64"], "no near devices"),
    (["--target", "NVIDIA H200", "--shape", "E=8,N=64,dtype=int8_w8a8"], "no stored table has dtype=int8_w8a8"),
    (["--target", "Foo Bar 9000"], "unknown device"),
])
def test_cli_errors_are_one_line_exit_2_nothing_written(full_db, tmp_path, args, message):
    out = tmp_path / "out"
    r = run_cli("--db", str(full_db), "export", "--format", "vllm-moe", *args, str(out))
    assert r.returncode == 2 and message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not out.exists()


def test_shape_on_another_format_is_refused(full_db, tmp_path):
    r = run_cli("--db", str(full_db), "export", "--format", "jsonl", "--shape", "E=8,N=64", str(tmp_path / "x"))
    assert r.returncode == 2 and "--shape applies to --format vllm-moe" in r.stderr
    assert not (tmp_path / "x").exists()


def test_names_round_trip_and_the_default_rule():
    for p in TABLES.iterdir():
        parsed = parse_name(p.name)
        assert table_name(parsed.device, parsed.shape) == p.name
    assert parse_shape("E=8,N=64,dtype=fp8_w8a8,block_shape=[128,128]") == Shape(8, 64, "fp8_w8a8", (128, 128))
    # SGLang spells the block shape with a space; the name is still understood
    assert parse_name("E=8,N=64,device_name=NVIDIA_H20,dtype=fp8_w8a8,block_shape=[128, 128].json").shape.block_shape \
        == (128, 128)
    assert vllm_default_config(4, Shape(8, 64))["BLOCK_SIZE_M"] == 16
    assert vllm_default_config(64, Shape(8, 64))["GROUP_SIZE_M"] == 8
    assert vllm_default_config(64, Shape(8, 64, "fp8_w8a8", (128, 128)), rocm=True)["num_stages"] == 2
