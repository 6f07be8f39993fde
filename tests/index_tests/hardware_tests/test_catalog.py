"""Hardware catalog contents and device-string resolution (real strings from real logs)."""

from __future__ import annotations

import gzip
import json
import re
import warnings
from pathlib import Path

import pytest

from tunedb.index.hardware import catalog

SHARED = Path("/work/shared/data")

# (device string, filename hint, expected catalog name, expected match kind)
RESOLUTION_TABLE = [
    # Kernel Tuner device_name values
    ("NVIDIA A100-PCIE-40GB", None, "NVIDIA A100-PCIE-40GB", "exact"),
    ("NVIDIA RTX A4000", None, "NVIDIA RTX A4000", "exact"),
    ("NVIDIA RTX A6000", None, "NVIDIA RTX A6000", "exact"),
    ("AMD Radeon PRO W6600", None, "AMD Radeon PRO W6600", "exact"),
    ("AMD Radeon PRO W7800", None, "AMD Radeon PRO W7800", "exact"),
    ("", "MI250X.json.gz", "AMD Instinct MI250X", "fuzzy"),
    ("gfx90a:sramecc+:xnack-", "MI250X.json.gz", "AMD Instinct MI250X", "fuzzy"),
    ("gfx906+sram-ecc", None, "Radeon VII", "fuzzy"),
    ("gfx1100", None, "Radeon RX 7900 XTX", "fuzzy"),
    ("Tesla V100-PCIE-32GB", None, "Tesla V100-PCIE-32GB", "exact"),
    ("Tesla V100-SXM2-32GB", None, "Tesla V100-SXM2-32GB", "exact"),
    ("GeForce GTX 1080 Ti", None, "GeForce GTX 1080 Ti", "exact"),
    ("NVIDIA GeForce GTX 1080 Ti", None, "GeForce GTX 1080 Ti", "exact"),
    ("NVIDIA GeForce RTX 4090", None, "GeForce RTX 4090", "exact"),
    ("NVIDIA H100 80GB HBM3", None, "NVIDIA H100 80GB HBM3", "exact"),
    ("Tesla T4", None, "Tesla T4", "exact"),
    ("AMD Instinct MI250X / MI250", None, "AMD Instinct MI250X", "fuzzy"),
    ("Intel(R) Xeon(R) Platinum 8480+", None, "Intel Xeon Platinum 8480+", "exact"),
    ("AMD EPYC 9654 96-Core Processor", None, "AMD EPYC 9654", "exact"),  # "96-Core" names no model
    # AutoTVM target strings (tophub)
    ("cuda -model=titanx", None, "NVIDIA TITAN X (Pascal)", "exact"),
    ("cuda -model=1080ti", None, "GeForce GTX 1080 Ti", "exact"),
    ("cuda -model=tx2", None, "Jetson TX2", "exact"),
    ("cuda -model=jetson-nano", None, "Jetson Nano", "exact"),
    ("cuda -model=v100", None, "Tesla V100-PCIE-16GB", "exact"),
    ("opencl -model=1080ti", None, "GeForce GTX 1080 Ti", "exact"),
    ("llvm -device=arm_cpu -model=rk3399 -mtriple=aarch64-linux-gnu -mattr=+neon", None, "Rockchip RK3399", "exact"),
    ("llvm -device=arm_cpu -model=rk3399 -mtriple=aarch64-linux-gnu", None, "Rockchip RK3399", "exact"),
    ("llvm -device=arm_cpu -model=bcm2837 -mtriple=armv7l-linux-gnueabihf -mattr=+neon", None,
     "Raspberry Pi 3 Model B", "exact"),
    ("llvm -device=arm_cpu -model=pynq -mtriple=armv7a-linux-eabi -mattr=+neon", None, "Xilinx Zynq-7020", "exact"),
    ("llvm -device=arm_cpu -model=vtacpu -mtriple=armv7a-linux-eabi", None, "Xilinx Zynq-7020", "exact"),
    ("llvm -device=arm_cpu -model=ultra96 -mtriple=aarch64-linux-gnu -mattr=+neon", None,
     "Xilinx Zynq UltraScale+ ZU3EG", "exact"),
    ("llvm -device=arm_cpu -model=kirin970 -mtriple=arm64-linux-android -mattr=+neon", None,
     "HiSilicon Kirin 970", "exact"),
    ("llvm -device=arm_cpu -model=snapdragon835 -mtriple=arm64-linux-android -mattr=+neon", None,
     "Qualcomm Snapdragon 835", "exact"),
    ("llvm -mcpu=skylake-avx512", None, "Intel Xeon Platinum 8124M", "exact"),
    ("llvm -mcpu=znver4 -num-cores=2", None, "AMD EPYC 9654", "exact"),
]


def test_catalog_has_enough_real_devices_with_sources():
    rows = catalog.devices()
    assert len(rows) >= 150
    names = [r["name"].lower() for r in rows]
    assert len(set(names)) == len(names)
    for r in rows:
        assert r["kind"] in ("cpu", "gpu"), r["name"]
        assert r["source"], r["name"]
        assert r["vendor"] and r["architecture"] and r["family"], r["name"]
        for col in ("fp32_gflops", "mem_bw_gbs"):
            assert r[col] is None or r[col] > 0
    fams = {r["family"] for r in rows}
    for f in ("kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell", "gcn",
              "cdna", "rdna", "mali", "adreno", "arm-neoverse", "intel-gpu", "apple"):
        assert f in fams, f
    assert sum(r["kind"] == "cpu" for r in rows) >= 20


@pytest.mark.parametrize("text,hint,name,matched", RESOLUTION_TABLE)
def test_resolution_table(text, hint, name, matched):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a known device must not warn
        r = catalog.resolve(text, hint)
    assert r.row is not None and r.name == name, (text, r.name)
    assert r.matched == matched
    assert r.kind == r.row["kind"]


def test_resolution_table_is_big_enough():
    assert len(RESOLUTION_TABLE) >= 30


def test_tvm_hints_are_read_from_the_string():
    assert catalog.resolve("llvm -mcpu=znver4 -num-cores=2").hints["threads"] == 2
    assert catalog.resolve("llvm -device=arm_cpu -model=rk3399 -mattr=+neon").hints["vector_bits"] == 128


@pytest.mark.parametrize("text,kind,vendor,family", [
    ("Quantum Flux 9000 GPU", "gpu", "other", "other"),
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72", "cpu", "arm", "arm-cortex-a-big"),
    ("cuda -model=unknown", "gpu", "nvidia", "other"),
    ("gfx1151", "gpu", "amd", "rdna"),
    ("sm_999x", "other", "other", "other"),
    ("Intel Xeon w9-3495X Sapphire Rapids", "cpu", "intel", "intel-sapphire-rapids"),
])
def test_unknown_strings_fall_back_with_a_warning(text, kind, vendor, family):
    with pytest.warns(UserWarning, match="not in the hardware catalog"):
        r = catalog.resolve(text)
    assert r.matched == "fallback" and r.row is None
    assert (r.kind, r.vendor, r.family) == (kind, vendor, family)


@pytest.mark.parametrize("weird", [None, "", "   ", "\x00\x01", "x" * 10000, 12345, "-model=", "cuda -model",
                                   "llvm -mcpu=", "gfx", "((()))", "🚀 GPU", 'vulkan -device_name="',
                                   "opencl -device=", "cuda -model=a -model=b", "rtx", "-mcpu=sm_80 cuda"])
def test_resolution_never_crashes(weird):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = catalog.resolve(weird)
    assert r.matched in ("exact", "fuzzy", "fallback")
    assert isinstance(r.to_json_dict(), dict)


def test_resolve_device_for_importers():
    assert catalog.resolve_device("NVIDIA RTX A4000") == {"device": "NVIDIA RTX A4000", "vendor": "nvidia",
                                                           "arch": "GA104"}
    assert catalog.resolve_device("no such thing at all") is None


def test_this_machine_resolves_by_cpuid():
    cpuid = catalog.local_cpuid()
    rows = [r for r in catalog.devices() if r["cpuid"] == cpuid]
    if not rows:
        pytest.skip(f"this machine's CPU ({cpuid}) is not in the catalog")
    r = catalog.resolve_cpu("Intel(R) Xeon(R) Processor", cpuid=cpuid)
    assert r.row is not None and r.row["cpuid"] == cpuid and r.matched == "fuzzy"


@pytest.mark.skipif(not (SHARED / "kernel_tuner").is_dir(), reason="shared data not present")
def test_every_kernel_tuner_file_resolves():
    files = sorted((SHARED / "kernel_tuner").glob("*/*.json.gz"))
    seen = 0
    for f in files:
        d = json.loads(gzip.decompress(f.read_bytes()))
        if "device_name" not in d:
            continue
        r = catalog.resolve(d["device_name"], f.name, warn=False)
        assert r.matched != "fallback", f
        seen += 1
    assert seen >= 10


@pytest.mark.skipif(not (SHARED / "tophub").is_dir(), reason="shared data not present")
def test_every_tophub_target_string_resolves():
    targets = set()
    for f in (SHARED / "tophub").glob("*.log"):
        for line in f.read_text().splitlines():
            m = re.match(r'\{"(?:input|i)": \["([^"]+)"', line)
            if m:
                targets.add(m.group(1))
    assert len(targets) >= 10
    for t in targets:
        r = catalog.resolve(t, warn=False)
        assert r.matched == "exact", t
