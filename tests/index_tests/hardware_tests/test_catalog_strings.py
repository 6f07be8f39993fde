"""Device strings as real logs, caches and vendors name them resolve to the right device.

``tests/data/device_strings.csv`` holds one real string a row (CUDA/HIP device names from
Kernel Tuner caches, rocminfo / clinfo / vulkaninfo names, TVM and TopHub target strings,
CPU brand strings), the kind, vendor and architecture it must resolve to, and the class of
match: ``exact``/``fuzzy`` (a catalog row), ``variant`` (a flagged fallback naming the row
it is a variant of), ``inferred`` (a fallback whose architecture the name gives) or
``unknown`` (a fallback that knows no architecture).  ``where_seen`` says where the string
comes from.
"""

from __future__ import annotations

import csv
import warnings

import numpy as np
import pytest

from tunedb.index.hardware import catalog
from tunedb.index.retrieval import features as F

from helpers import TESTS

TABLE = TESTS / "data" / "device_strings.csv"
ROWS = list(csv.DictReader(TABLE.open(encoding="utf-8")))
MATCH_CLASSES = ("exact", "fuzzy", "variant", "inferred", "unknown")


def _class(r: catalog.Resolution) -> str:
    if r.matched in ("exact", "fuzzy"):
        return r.matched
    if r.variant_of:
        return "variant"
    return "inferred" if r.inferred else "unknown"


def test_table_is_big_and_well_formed():
    assert len(ROWS) >= 150
    strings = [(r["string"], r["hint"]) for r in ROWS]
    assert len(set(strings)) == len(strings), "duplicate strings"
    for r in ROWS:
        assert r["kind"] in ("cpu", "gpu") and r["vendor"] and r["architecture"], r
        assert r["matched"] in MATCH_CLASSES, r
        assert r["where_seen"].strip(), r
    vendors = {r["vendor"] for r in ROWS}
    assert {"nvidia", "amd", "intel", "arm", "qualcomm", "apple"} <= vendors


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['string'] or '<empty>'}|{r['hint']}" for r in ROWS])
def test_device_string_resolves(row):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = catalog.resolve(row["string"], row["hint"] or None)
    got = (r.kind, r.vendor, r.architecture, _class(r))
    assert got == (row["kind"], row["vendor"], row["architecture"], row["matched"]), row["string"]
    warned = any("hardware catalog" in str(w.message) for w in caught)
    # a catalog device never warns; every fallback does
    assert warned == (r.matched == "fallback")
    if r.row is not None:
        assert (r.kind, r.vendor, r.architecture) == (r.row["kind"], r.row["vendor"], r.row["architecture"])
    else:
        assert r.matched == "fallback"


# --------------------------------------------------------------------- near misses
@pytest.mark.parametrize("text,name", [
    ("Tesla P100-PCIE-12GB", "Tesla P100-PCIE-12GB"),
    ("Tesla P100-PCIE-16GB", "Tesla P100-PCIE-16GB"),
    ("NVIDIA GeForce RTX 2070 SUPER", "GeForce RTX 2070 SUPER"),
    ("NVIDIA GeForce RTX 3060 Laptop GPU", "GeForce RTX 3060 Laptop GPU"),
    ("NVIDIA GeForce RTX 3060", "GeForce RTX 3060"),
    ("Tesla V100-PCIE-32GB", "Tesla V100-PCIE-32GB"),
    ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"),
])
def test_variants_resolve_to_their_own_rows(text, name):
    r = catalog.resolve(text, warn=False)
    assert r.matched == "exact" and r.name == name


def test_near_miss_rows_differ_where_the_parts_differ():
    p12, p16 = catalog.find("Tesla P100-PCIE-12GB"), catalog.find("Tesla P100-PCIE-16GB")
    assert (p12["mem_gb"], p16["mem_gb"]) == (12, 16) and p12["mem_bw_gbs"] < p16["mem_bw_gbs"]
    assert catalog.find("GeForce RTX 2070 SUPER")["architecture"] == "TU104"
    assert catalog.find("GeForce RTX 2070")["architecture"] == "TU106"
    lap, desk = catalog.find("GeForce RTX 3060 Laptop GPU"), catalog.find("GeForce RTX 3060")
    assert lap["architecture"] == desk["architecture"] == "GA106"
    assert lap["cores"] != desk["cores"] and lap["tdp_w"] < desk["tdp_w"]


@pytest.mark.parametrize("text,base,differs", [
    ("NVIDIA GeForce GTX 1060 3GB", "GeForce GTX 1060 6GB", ("mem_gb",)),
    ("NVIDIA GeForce RTX 4070 Ti SUPER", "GeForce RTX 4070 Ti", ("super",)),
    ("NVIDIA GeForce RTX 4090 Laptop GPU", "GeForce RTX 4090", ("laptop",)),
    ("NVIDIA GeForce RTX 2080 Ti SUPER", "GeForce RTX 2080 Ti", ("super",)),
    ("NVIDIA H100 NVL", "NVIDIA H100 PCIe", ("form_factor",)),
    ("Apple M1 Pro", "Apple M1", ("pro",)),
])
def test_a_variant_the_catalog_lacks_is_a_flagged_fallback(text, base, differs):
    with pytest.warns(UserWarning, match="variant of"):
        r = catalog.resolve(text)
    assert r.matched == "fallback" and r.row is None and r.inferred
    assert r.variant_of == base and r.differs == differs
    assert catalog.resolve_device(text) is None  # importers never record the base part
    assert r.to_json_dict()["variant_of"] == base


def test_a_name_of_another_generation_is_not_fuzzy_matched_to_a_row():
    r = catalog.resolve("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", warn=False)
    assert r.row is None and r.family == "blackwell" and not r.variant_of


def test_every_alias_is_the_same_part_as_its_row():
    for row in catalog.devices():
        for alias in row["aliases"]:
            q = catalog.qualifiers(alias)
            # an alias may leave a qualifier unsaid (a chip name), never state another one
            clash = [k for k in catalog._differs(q, row) if k in ("mem_gb", "form_factor") or q.get(k)]
            assert not clash, (row["name"], alias, clash)


def test_every_row_name_agrees_with_its_series_pattern():
    """The name patterns that infer unknown devices agree with every catalog row they match."""
    for row in catalog.devices():
        ser = catalog._series(row["name"])
        if ser is not None:
            assert ser[2] == row["family"] and ser[1] in (row["vendor"], "arm"), (row["name"], ser)
            assert ser[0] in ("", row["kind"]), row["name"]


def test_every_row_resolves_to_itself_by_name_and_aliases():
    for row in catalog.devices():
        for text in (row["name"], *row["aliases"]):
            r = catalog.resolve(text, kind=row["kind"], warn=False)
            assert r.matched == "exact" and r.row is row, (text, r.name)


def test_every_row_has_a_source_vendor_and_architecture():
    for row in catalog.devices():
        assert row["source"] and row["vendor"] and row["architecture"] and row["family"], row["name"]
        assert row["kind"] in ("cpu", "gpu")


# ---------------------------------------------------------------- TVM target strings
@pytest.mark.parametrize("text,kind,name", [
    ("opencl -device=mali -model=rk3399", "gpu", "Mali-T860 MP4"),
    ("llvm -device=arm_cpu -model=rk3399 -mtriple=aarch64-linux-gnu", "cpu", "Rockchip RK3399"),
    ("opencl -device=mali -model=kirin970", "gpu", "Mali-G72 MP12"),
    ("llvm -device=arm_cpu -model=kirin970 -mtriple=arm64-linux-android", "cpu", "HiSilicon Kirin 970"),
    ("rk3399", "cpu", "Rockchip RK3399"),
    ("cuda -model=titanx", "gpu", "NVIDIA TITAN X (Pascal)"),
    ("llvm -mcpu=skylake-avx512", "cpu", "Intel Xeon Platinum 8124M"),
])
def test_tvm_target_resolves_to_the_device_it_targets(text, kind, name):
    r = catalog.resolve(text, warn=False)
    assert r.row is not None and r.kind == kind and r.name == name


def test_a_gpu_target_never_resolves_to_the_host_cpu():
    for text in ("opencl -device=mali", "opencl -model=bcm2837", "vulkan -device_name=\"Unknown Thing 7\"",
                 "opencl -device=mali -model=some-board"):
        r = catalog.resolve(text, warn=False)
        assert r.kind == "gpu" and (r.row is None or r.row["kind"] == "gpu"), text
    assert catalog.resolve("opencl -device=mali", warn=False).vendor == "arm"


def test_tvm_option_values_may_hold_spaces_and_quotes():
    opts = catalog._parse_tvm('vulkan -device_name="AMD Radeon Graphics (RADV RENOIR)" -max_num_threads=256')
    assert opts == {"backend": "vulkan", "device_name": "AMD Radeon Graphics (RADV RENOIR)",
                    "max_num_threads": "256"}
    assert catalog._parse_tvm("NVIDIA GeForce RTX 3090") is None
    assert catalog._parse_tvm("c compiler") is None


# -------------------------------------------------------------------------- inferred
@pytest.mark.parametrize("text,vendor,family,arch", [
    ("Tesla K10.G2.8GB", "nvidia", "kepler", "kepler"),
    ("NVIDIA GeForce RTX 2050 Future", "nvidia", "turing", "turing"),
    ("NVIDIA GeForce RTX 5070", "nvidia", "blackwell", "blackwell"),
    ("AMD Radeon RX 6650 XT", "amd", "rdna", "rdna2"),
    ("AMD Instinct MI300B", "amd", "cdna", "cdna3"),
    ("AMD Radeon Instinct MI50 32GB Prototype", "amd", "gcn", "gcn5"),
    ("Mali-G68", "arm", "mali", "valhall"),
    ("Adreno (TM) 730", "qualcomm", "adreno", "Adreno 7xx"),
    ("Apple M3 Pro", "apple", "apple", "apple-m3"),
])
def test_inferred_devices_take_vendor_and_architecture_from_the_name(text, vendor, family, arch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = catalog.resolve(text)
    assert (r.vendor, r.family) == (vendor, family)
    if r.row is None:
        assert r.inferred and r.architecture == arch
    else:  # a near-identical catalog row is acceptable only when no qualifier differs
        assert not catalog._differs(catalog.qualifiers(text), r.row)


def test_a_name_that_says_nothing_is_not_inferred():
    with pytest.warns(UserWarning):
        r = catalog.resolve("Quantum Flux 9000 GPU")
    assert not r.inferred and r.architecture == "unknown" and r.family == "other"


@pytest.mark.parametrize("text,number", [("NVIDIA GeForce RTX 4070 Ti", 4075), ("AMD Radeon RX 7900 XTX", 7908),
                                         ("Tesla P100-PCIE-12GB", 100), ("cuda -model=1080ti", 1085),
                                         ("Quantum Flux", None)])
def test_series_number(text, number):
    assert catalog.series_number(text) == number


# ------------------------------------------------------------------------ embedding
def _vec(name: str) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return F.hardware_vector({"kind": "gpu", "name": name})


@pytest.mark.parametrize("a,b", [
    ("NVIDIA GeForce RTX 2050 Hypothetical X", "AMD Radeon RX 7650 Hypothetical"),
    ("NVIDIA GeForce RTX 3050 Hypothetical", "NVIDIA GeForce RTX 4050 Hypothetical"),
    ("NVIDIA GeForce RTX 4050 Hypothetical", "NVIDIA GeForce RTX 4078 Hypothetical"),
    ("AMD Radeon RX 6650 XT", "AMD Radeon RX 7650 GRE"),
    ("Mali-G78", "QUALCOMM Adreno(TM) 740"),
])
def test_two_unknown_gpus_get_different_vectors(a, b):
    assert catalog.resolve(a, warn=False).row is None and catalog.resolve(b, warn=False).row is None
    va, vb = _vec(a), _vec(b)
    assert not np.allclose(va, vb)
    assert np.array_equal(va, _vec(a)) and np.array_equal(vb, _vec(b))


def test_inferred_device_embeds_by_its_family_and_model_number():
    p = F.hardware_profile({"kind": "gpu", "name": "NVIDIA GeForce RTX 4078 Hypothetical"}, warn=False)
    assert p["matched"] == "fallback" and p["inferred"] and p["family"] == "ada"
    lo = catalog.find("GeForce RTX 4070 Ti")["fp32_gflops"]
    hi = catalog.find("GeForce RTX 4080")["fp32_gflops"]
    assert lo <= p["values"]["fp32_gflops"] <= hi


def test_variant_embeds_from_its_base_row_except_what_differs():
    p = F.hardware_profile({"kind": "gpu", "name": "NVIDIA GeForce GTX 1060 3GB"}, warn=False)
    base = catalog.find("GeForce GTX 1060 6GB")
    assert p["variant_of"] == base["name"] and p["device"] is None
    assert p["values"]["mem_gb"] == 3 and p["values"]["fp32_gflops"] == base["fp32_gflops"]


def test_catalog_device_profile_is_unchanged_by_inference():
    p = F.hardware_profile({"kind": "gpu", "name": "Tesla K20m"}, warn=False)
    assert p["matched"] == "exact" and p["device"] == "Tesla K20m" and not p["inferred"]
    assert p["values"]["fp32_gflops"] == 3524
