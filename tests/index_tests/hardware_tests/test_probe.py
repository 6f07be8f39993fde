"""``tunedb targets --probe`` and ``tunedb.index.hardware.probe`` (issue 13 B).

NVML cannot be exercised without an NVIDIA GPU and driver: on such a machine the no-GPU tests
skip themselves; pynvml is never faked.  The AMD sysfs reader runs against a directory tree
in the real amdgpu file formats (values of a Radeon RX 6800 XT)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunedb.index.hardware import catalog
from tunedb.index.hardware.probe import (
    nvml_bandwidth_gbs,
    parse_dpm,
    probe_amd_sysfs,
    probe_cpu,
    probe_gpus,
)
from tunedb.transfer.cli.main import main as cli_main

SCLK = "0: 500Mhz\n1: 2105Mhz *\n2: 2250Mhz\n"
MCLK = "0: 96Mhz\n1: 456Mhz\n2: 673Mhz\n3: 1000Mhz *\n"


def _card(root: Path, n: int, files: dict[str, str]) -> Path:
    dev = root / "class" / "drm" / f"card{n}" / "device"
    dev.mkdir(parents=True)
    for name, text in files.items():
        (dev / name).write_text(text)
    return dev


def _radeon_tree(root: Path, product_name: str | None = None) -> Path:
    files = {"vendor": "0x1002\n", "device": "0x73bf\n", "mem_info_vram_total": "17163091968\n",
             "pp_dpm_sclk": SCLK, "pp_dpm_mclk": MCLK, "gpu_busy_percent": "3\n"}
    if product_name:
        files["product_name"] = product_name + "\n"
    _card(root, 0, files)
    (root / "class" / "drm" / "card0-DP-1").mkdir()  # a connector, not a card
    _card(root, 1, {"vendor": "0x8086\n", "device": "0x4680\n"})  # an Intel iGPU: not AMD
    (root / "module" / "amdgpu").mkdir(parents=True)
    (root / "module" / "amdgpu" / "version").write_text("6.3.6\n")
    return root


def _no_local_gpu() -> bool:
    return probe_gpus(nvml=True, amdsmi=True) == []


def test_dpm_levels() -> None:
    assert parse_dpm(SCLK) == (2250, 2105)
    assert parse_dpm(MCLK) == (1000, 1000)
    assert parse_dpm("") == (None, None) and parse_dpm(None) == (None, None)


def test_bandwidth_formula_matches_spec_sheets() -> None:
    # A100 40GB: 5120-bit HBM2 at 1215 MHz -> 1555 GB/s (data sheet 1555); H100 SXM: 2619 MHz -> 3352
    assert nvml_bandwidth_gbs(5120, 1215) == pytest.approx(1555.2)
    assert nvml_bandwidth_gbs(5120, 2619) == pytest.approx(3352.3)
    assert nvml_bandwidth_gbs(None, 1215) is None and nvml_bandwidth_gbs(384, 0) is None


def test_amd_sysfs_tree(tmp_path: Path) -> None:
    root = _radeon_tree(tmp_path / "sys")
    reasons: dict = {}
    gpus = probe_amd_sysfs(root, reasons)
    assert len(gpus) == 1 and reasons == {}
    g = gpus[0]
    want = catalog.resolve("Navi 21", kind="gpu", warn=False)
    assert g["vendor"] == "amd" and g["source"] == "sysfs" and g["card"] == "card0"
    assert g["pci_id"] == "0x1002:0x73bf" and "Navi 21" in g["name"]
    assert (g["clock_max_mhz"], g["clock_mhz"], g["mem_clock_max_mhz"]) == (2250, 2105, 1000)
    assert g["memory_bytes"] == 17163091968 and g["busy_percent"] == 3
    assert g["driver"] == "amdgpu 6.3.6"
    assert g["architecture"] == want.architecture == "Navi 21" and g["isa"] == want.row["isa"]
    assert g["compute_units"] == int(want.row["compute_units"])
    assert g["bandwidth_gbs"] == want.row["mem_bw_gbs"] and g["bandwidth_source"] == "catalog"


def test_amd_sysfs_product_name_wins(tmp_path: Path) -> None:
    g, = probe_amd_sysfs(_radeon_tree(tmp_path / "sys", "AMD Radeon RX 6800 XT"))
    row = catalog.resolve("AMD Radeon RX 6800 XT", kind="gpu", warn=False).row
    assert g["name"] == "AMD Radeon RX 6800 XT" and g["catalog"]["name"] == row["name"]
    assert g["compute_units"] == int(row["compute_units"])


def test_amd_sysfs_nothing(tmp_path: Path) -> None:
    reasons: dict = {}
    assert probe_amd_sysfs(tmp_path / "nosys", reasons) == [] and "no " in reasons["amd"]
    _card(tmp_path / "sys", 0, {"vendor": "0x10de\n"})
    reasons = {}
    assert probe_amd_sysfs(tmp_path / "sys", reasons) == [] and "0x1002" in reasons["amd"]


def test_cpu_probe_is_archspec() -> None:
    archspec_cpu = pytest.importorskip("archspec.cpu")
    from tunedb.index.hardware.localcpu import preset, preset_names

    host = archspec_cpu.host()
    cpu = probe_cpu()
    assert cpu["uarch"] == host.name and cpu["vendor"] == host.vendor
    assert cpu["features"] == len(host.features) and cpu["archspec"] == "ok"
    carrying = [n for n in preset_names() if (preset(n) or {}).get("uarch") == host.name]
    assert cpu["presets"] == carrying
    for n in carrying:
        assert preset(n)["uarch"] == cpu["uarch"]


@pytest.mark.skipif(not _no_local_gpu(), reason="this machine has a GPU")
def test_cli_no_gpu_one_line(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TUNEDB_SYSFS_ROOT", str(tmp_path / "empty"))
    assert cli_main(["targets", "--probe"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("no GPU found (NVML: ") and "; AMD: " in lines[0]
    assert lines[1].startswith("cpu: ") and "cores usable" in lines[1] and "vector " in lines[1]
    assert cli_main(["targets", "--probe", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpus"] == [] and doc["cpu"]["uarch"] and set(doc["reasons"]) >= {"nvml", "amd"}


def test_cli_table_from_sysfs(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TUNEDB_SYSFS_ROOT", str(_radeon_tree(tmp_path / "sys")))
    assert cli_main(["targets", "--probe"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any("Navi 21" in line and "2105/2250" in line for line in out)
    assert out[-1].startswith("cpu: ") and "uarch " in out[-1]
    assert cli_main(["targets", "--probe", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [g["pci_id"] for g in doc["gpus"] if g["vendor"] == "amd"] == ["0x1002:0x73bf"]
