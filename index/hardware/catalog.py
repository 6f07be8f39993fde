"""The hardware catalog (``datasets/hardware_catalog.csv``) and device-name resolution.

One row per real device: kind (``cpu``/``gpu``), vendor, architecture, family (the coarse
architecture family the feature vector one-hot encodes), ISA, and spec-sheet numbers.
Units of the numeric columns: clocks MHz, ``vector_bits`` bits, cache and shared-memory
sizes KiB (``l1_kb`` and ``shared_kb``/``registers_kb`` per core/SM/CU; ``l2_kb`` and
``l3_kb`` for the whole chip), ``mem_bw_gbs`` GB/s, ``mem_gb`` GB, ``fp32_gflops`` GFLOP/s,
``tdp_w`` watts.  An empty cell is ``None``.  A variant of a part (memory size, SUPER/Ti/XT,
laptop, PCIe/SXM) is its own row.

Resolution contract (:func:`resolve`): a device string as real logs carry it (CUDA/HIP
device names, ``gfx90a:sramecc+:xnack-``, TVM target strings such as
``cuda -model=titanx``, ``opencl -device=mali -model=rk3399`` or
``llvm -mcpu=skylake-avx512``, an empty string beside a file name) resolves to a
:class:`Resolution` whose ``matched`` is

* ``exact``   - the normalised string (or the ``-model=``/``-device_name=``/``-mcpu=`` value
  of a TVM target string) equals a row's name or alias; normalising lower-cases, drops
  punctuation, (R)/(TM), vendor words and phrases that name no model (``@ 3.00GHz``,
  ``64-Core``, ``12th Gen``, a RADV suffix ``(RADV NAVI21)``, ``with Radeon Graphics``);
* ``fuzzy``   - token matching picked the row: every model-number token agrees, the
  generation the name's series pattern gives (if any) is the row's family, *and* no
  variant qualifier differs (SUPER, Ti, XT/XTX/GRE, Laptop/Mobile/Max-Q, Pro/Max/Ultra,
  PCIe/SXM/NVL, a stated memory size other than the row's); or an ISA name such as
  ``gfx906``/``sm_80`` (the first row of that ISA), or a file-name hint, picked it;
* ``fallback``- no row is that device: ``row`` is None and a ``UserWarning`` is issued.
  Kind, vendor, family and ``architecture`` come from the name where it says them (series
  patterns: ``K20m`` is Kepler, ``RTX 20xx`` Turing, ``RX 6xxx`` RDNA 2, ``MI2xx`` CDNA 2,
  ``Mali-G78`` Valhall, ``Adreno 7xx``, ``Apple M3``, RADV chip names, ``gfxNNNN``,
  ``sm_NN``, CPU code names); then ``inferred`` is True and ``architecture`` is the chip
  or generation the name gives (``kepler``, ``rdna2``, ``Renoir``, ...), else it is
  ``"unknown"``.  When the string is a *variant* of a row (the best token match differs
  only by a qualifier above), ``variant_of`` names that row and ``differs`` lists what
  differs (``super``, ``ti``, ``laptop``, ``mem_gb``, ``form_factor``, ...); kind, vendor
  and family are the row's, ``architecture`` the generation the name gives, ``inferred`` is
  True.  The caller may borrow the row's numbers, explicitly, but the string never resolves
  *to* that row (``resolve_device`` returns None for it).

TVM target strings resolve to the device they target, not to the host: the backend decides
the kind (``cuda``/``rocm``/``opencl``/``vulkan``/``metal`` are GPU targets, ``llvm``/``c``
CPU targets); ``-model=`` names the device (a board name under a GPU backend is the board's
GPU row, e.g. ``opencl -device=mali -model=rk3399`` is the RK3399's Mali-T860, under
``llvm`` its CPU row); ``-device=``/``-device_name=`` name the GPU (``mali``, ``adreno``,
``intel_graphics`` give vendor and family; a Vulkan driver name such as
``AMD Radeon Graphics (RADV RENOIR)`` is resolved like a device name); ``-mcpu=``/``-arch=``
name the CPU or ISA; ``-mtriple=`` gives the vendor.  A board name alone (``rk3399``) names
the board's CPU row.

It never raises for any string.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import os
import re
import warnings
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

CATALOG_FILE = "hardware_catalog.csv"

NUMERIC_COLUMNS = ("year", "compute_units", "cores", "threads", "base_mhz", "boost_mhz", "vector_bits",
                   "warp_size", "l1_kb", "l2_kb", "l3_kb", "shared_kb", "registers_kb", "mem_bw_gbs",
                   "mem_gb", "fp32_gflops", "tdp_w")
TEXT_COLUMNS = ("name", "aliases", "kind", "vendor", "architecture", "family", "isa", "cpuid", "source", "notes")
MATCHED = ("exact", "fuzzy", "fallback")

# words that carry no identity (dropped on both sides before comparing)
_NOISE = {"nvidia", "amd", "intel", "ati", "corporation", "corp", "inc", "r", "tm", "processor", "graphics",
          "device", "the", "with", "and", "cpu", "gpu"}
# TVM / LLVM target string backends
_TVM_BACKENDS = {"llvm": "cpu", "cuda": "gpu", "nvptx": "gpu", "rocm": "gpu", "opencl": "gpu", "vulkan": "gpu",
                 "metal": "gpu", "c": "cpu", "hexagon": "cpu", "webgpu": "gpu"}
# TVM ``-device=`` values that name a device class, not a device
_TVM_GENERIC_DEVICES = {"", "arm_cpu", "cpu", "gpu", "cuda", "rocm", "opencl", "vulkan", "metal", "webgpu",
                        "hexagon", "rasp", "vta", "micro_dev"}


@dataclass(frozen=True)
class Resolution:
    """Result of resolving a device string (see module docstring).

    ``hints`` holds numbers the string itself states (``vector_bits`` from ``-mattr``,
    ``threads`` from ``-num-cores``, ``mem_gb`` from ``12GB``), to be used beside or instead
    of the row's values.  ``inferred`` (fallback only): architecture/family were read from
    the name.  ``variant_of``/``differs`` (fallback only): the catalog row this string is a
    variant of, and the qualifiers that differ.
    """

    query: str
    matched: str
    row: dict | None
    kind: str
    vendor: str
    architecture: str
    family: str
    hints: dict = field(default_factory=dict)
    via: str = ""
    inferred: bool = False
    variant_of: str = ""
    differs: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.row["name"] if self.row else (self.query or "unknown")

    def to_json_dict(self) -> dict:
        return {"query": self.query, "matched": self.matched, "name": self.name, "kind": self.kind,
                "vendor": self.vendor, "architecture": self.architecture, "family": self.family,
                "isa": (self.row or {}).get("isa") or "", "hints": dict(self.hints), "via": self.via,
                "inferred": self.inferred, "variant_of": self.variant_of, "differs": list(self.differs),
                "row": dict(self.row) if self.row else None}


# ---------------------------------------------------------------------------- loading
def _parse_number(text: str) -> float | None:
    t = (text or "").strip()
    if not t:
        return None
    try:
        return float(t)
    except ValueError:
        return None


@functools.lru_cache(maxsize=1)
def _raw_text() -> str:
    return (resources.files("tunedb.datasets") / CATALOG_FILE).read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def devices() -> tuple[dict, ...]:
    """Every catalog row as a dict (numbers parsed; empty cells None), in file order."""
    rows = []
    for raw in csv.DictReader(io.StringIO(_raw_text())):
        row: dict[str, Any] = {c: (raw.get(c) or "").strip() for c in TEXT_COLUMNS}
        for c in NUMERIC_COLUMNS:
            row[c] = _parse_number(raw.get(c, ""))
        row["aliases"] = [a.strip() for a in row["aliases"].split(";") if a.strip()]
        rows.append(row)
    return tuple(rows)


def catalog_hash() -> str:
    """Short content hash of the catalog file (derived data built from it records this)."""
    return hashlib.blake2b(_raw_text().encode(), digest_size=8).hexdigest()


# ----------------------------------------------------------------------- normalising
def _clean(text: str) -> str:
    t = text.lower().replace("(r)", " ").replace("(tm)", " ").replace("®", " ").replace("™", " ")
    return re.sub(r"[^a-z0-9+]+", " ", t).strip()


# phrases that name no model: "@ 3.00GHz", "64-Core", "12th Gen", a RADV driver suffix "(RADV NAVI21)",
# the integrated GPU of a CPU brand string ("AMD Ryzen 7 5800H with Radeon Graphics")
_WITH_IGPU = re.compile(r"\b(with|w/)\s+radeon\b[^,;]*?\bgraphics\b", re.I)  # a CPU brand string's iGPU
_PHRASES = re.compile(r"\b(with|w/)\s+radeon\b[^,;]*?\bgraphics\b|\(radv [^)]*\)|@\s*[\d.]+\s*[gm]hz|\b\d+[- ]core\b|\b\d+(st|nd|rd|th) gen\b", re.I)


def _tokens(text: str) -> list[str]:
    return [w for w in _clean(_PHRASES.sub(" ", text)).replace("+", " plus ").split() if w not in _NOISE]


def _compact(text: str) -> str:
    return "".join(_tokens(text))


def _is_model_token(tok: str) -> bool:
    """Tokens naming a model (contain a digit, are not a memory size like ``40gb``)."""
    return any(ch.isdigit() for ch in tok) and not re.fullmatch(r"\d+(gb|mb|g)", tok)


def _spaced(text: str) -> str:
    """``" rtx 2080 ti "`` from ``RTX2080Ti``: cleaned, letters and digits split, padded."""
    s = _clean(text)
    return " " + re.sub(r"(?<=[a-z])(?=\d)|(?<=\d)(?=[a-z])", " ", s) + " "


_QUAL_FLAGS = (("super", r"\bsuper\b"), ("ti", r"\bti\b"), ("xtx", r"\bxtx\b"), ("xt", r"\bxt\b"),
               ("gre", r"\bgre\b"), ("laptop", r"\b(laptop|mobile|max q|maxq)\b"), ("pro", r"\bpro\b"),
               ("max", r"\bmax\b(?! q)"), ("ultra", r"\bultra\b"))


def qualifiers(text: str) -> dict[str, Any]:
    """Variant qualifiers a device name states: flags ``super``/``ti``/``xt``/``xtx``/``gre``/
    ``laptop``/``pro``/``max``/``ultra`` (True when present), ``form_factor`` (``pcie``/``sxm``/``nvl``) and ``mem_gb``."""
    s = _spaced(text)
    words = " " + _clean(text) + " "  # Pro/Max/Ultra only as words of their own ("ultra96" is a board)
    out: dict[str, Any] = {k: True for k, pat in _QUAL_FLAGS
                           if re.search(pat, words if k in ("pro", "max", "ultra") else s)}
    m = re.search(r"\b(pcie|sxm|nvl)\b", s)
    if m:
        out["form_factor"] = m.group(1)
    m = re.search(r"\b(\d{1,3}) ?gb\b", s)
    if m:
        out["mem_gb"] = float(m.group(1))
    return out


def _row_qualifiers(row: dict) -> dict[str, Any]:
    q = qualifiers(row["name"])
    if "form_factor" not in q:  # ``NVIDIA H100 80GB HBM3`` is the SXM5 part: its aliases say so
        ffs = {qualifiers(a).get("form_factor") for a in row["aliases"]} - {None}
        if len(ffs) == 1:
            q["form_factor"] = ffs.pop()
    if row.get("mem_gb") is not None:
        q["mem_gb"] = row["mem_gb"]
    return q


def _differs(query: dict[str, Any], row: dict) -> tuple[str, ...]:
    """Qualifiers on which a query name and a catalog row disagree (empty: the same part)."""
    rq = _row_qualifiers(row)
    out = [k for k, _ in _QUAL_FLAGS if bool(query.get(k)) != bool(rq.get(k))]
    if query.get("form_factor") and rq.get("form_factor") and query["form_factor"] != rq["form_factor"]:
        out.append("form_factor")
    if query.get("mem_gb") and rq.get("mem_gb") and abs(query["mem_gb"] - rq["mem_gb"]) > 0.5:
        out.append("mem_gb")
    return tuple(out)


def series_number(text: str) -> float | None:
    """The model number a device name states (``RTX 4070 Ti`` -> 4075: Ti/SUPER/XT/XTX move
    it up within the tier), or None.  Memory sizes are not model numbers; of a TVM target
    string only the options naming the device count."""
    opts = _parse_tvm(text)
    if opts is not None:
        text = " ".join(opts.get(k, "") for k in ("model", "device-name", "device_name", "device", "mcpu"))
    s = _spaced(text)
    nums = [m for m in re.finditer(r"(?<![\d.])(\d{2,5})(?![\d.])(?! ?(gb|mb|w|gbps|core|cores)\b)", s)]
    if not nums:
        return None
    pick = next((m for m in nums if len(m.group(1)) >= 3), nums[0])
    n = float(pick.group(1))
    q = qualifiers(text)
    if q.get("ti") or q.get("xt"):
        n += 5
    if q.get("super") or q.get("gre"):
        n += 3
    if q.get("xtx"):
        n += 8
    return n


@functools.lru_cache(maxsize=1)
def _index() -> tuple[dict[str, list[int]], list[set[str]], dict[str, list[int]]]:
    exact: dict[str, list[int]] = {}
    toks: list[set[str]] = []
    by_isa: dict[str, list[int]] = {}
    for i, row in enumerate(devices()):
        names = [row["name"], *row["aliases"]]
        ts: set[str] = set()
        for n in names:
            lst = exact.setdefault(_compact(n), [])
            if i not in lst:
                lst.append(i)
            t = _tokens(n)
            ts.update(t)
            ts.update(a + b for a, b in zip(t, t[1:]))
        toks.append(ts)
        if row["isa"]:
            by_isa.setdefault(row["isa"].lower(), []).append(i)
    return exact, toks, by_isa


# ------------------------------------------------------------------- inference tables
_NV_CC = [(3, "kepler"), (5, "maxwell"), (6, "pascal"), (7, "volta"), (8, "ampere"), (9, "hopper"), (10, "blackwell")]
_FAMILY_WORDS = {
    "kepler": "kepler", "maxwell": "maxwell", "pascal": "pascal", "volta": "volta", "turing": "turing",
    "ampere": "ampere", "ada": "ada", "lovelace": "ada", "hopper": "hopper", "blackwell": "blackwell",
    "gcn": "gcn", "vega": "gcn", "polaris": "gcn", "cdna": "cdna", "instinct": "cdna", "rdna": "rdna", "navi": "rdna",
    "mali": "mali", "adreno": "adreno",
    "haswell": "intel-haswell", "broadwell": "intel-haswell", "coreavx2": "intel-haswell", "skylake": "intel-skylake",
    "skylakeavx512": "intel-skylake-sp", "cascadelake": "intel-skylake-sp", "cooperlake": "intel-skylake-sp",
    "icelake": "intel-icelake-sp", "icelakeserver": "intel-icelake-sp", "sapphirerapids": "intel-sapphire-rapids",
    "emeraldrapids": "intel-sapphire-rapids", "graniterapids": "intel-sapphire-rapids",
    "alderlake": "intel-alder-lake", "raptorlake": "intel-alder-lake", "coffeelake": "intel-skylake",
    "kabylake": "intel-skylake", "znver1": "amd-zen2", "znver2": "amd-zen2", "znver3": "amd-zen3",
    "znver4": "amd-zen4", "znver5": "amd-zen4", "zen2": "amd-zen2", "zen3": "amd-zen3", "zen4": "amd-zen4",
    "cortexa7": "arm-cortex-a-little", "cortexa9": "arm-cortex-a-little", "cortexa53": "arm-cortex-a-little",
    "cortexa55": "arm-cortex-a-little", "cortexa510": "arm-cortex-a-little", "cortexa520": "arm-cortex-a-little",
    "cortexa57": "arm-cortex-a-big", "cortexa72": "arm-cortex-a-big",
    "cortexa73": "arm-cortex-a-big", "cortexa75": "arm-cortex-a-big", "cortexa76": "arm-cortex-a-big",
    "cortexa77": "arm-cortex-a-big", "cortexa78": "arm-cortex-a-big", "cortexx1": "arm-cortex-a-big",
    "cortexa710": "arm-cortex-a-big", "cortexa715": "arm-cortex-a-big", "cortexa720": "arm-cortex-a-big",
    "cortexx2": "arm-cortex-a-big", "cortexx3": "arm-cortex-a-big", "cortexx4": "arm-cortex-a-big",
    "neoversen1": "arm-neoverse", "neoversen2": "arm-neoverse", "neoversev1": "arm-neoverse",
    "neoversev2": "arm-neoverse", "neoverse": "arm-neoverse", "graviton": "arm-neoverse",
}
_VENDOR_WORDS = {
    "nvidia": "nvidia", "cuda": "nvidia", "nvptx": "nvidia", "geforce": "nvidia", "quadro": "nvidia",
    "tesla": "nvidia", "jetson": "nvidia", "titan": "nvidia", "rtx": "nvidia", "gtx": "nvidia",
    "amd": "amd", "radeon": "amd", "rocm": "amd", "hip": "amd", "epyc": "amd", "ryzen": "amd", "instinct": "amd",
    "radv": "amd", "intel": "intel", "xeon": "intel", "core": "intel", "arm": "arm", "armcpu": "arm",
    "cortex": "arm", "mali": "arm", "aarch64": "arm", "neoverse": "arm", "qualcomm": "qualcomm",
    "snapdragon": "qualcomm", "adreno": "qualcomm", "kryo": "qualcomm", "apple": "apple", "graviton": "amazon",
    "rockchip": "rockchip", "broadcom": "broadcom", "hisilicon": "hisilicon", "kirin": "hisilicon",
    "xilinx": "xilinx", "zynq": "xilinx", "grid": "nvidia",
}
_GPU_WORDS = {"cuda", "nvptx", "opencl", "rocm", "hip", "vulkan", "metal", "gpu", "geforce", "quadro", "tesla",
              "rtx", "gtx", "radeon", "instinct", "mali", "adreno", "titan", "jetson", "radv"}
_CPU_WORDS = {"llvm", "cpu", "armcpu", "xeon", "epyc", "ryzen", "core", "cortex", "aarch64", "x86", "x8664",
              "neon", "avx2", "avx512f", "armv7", "armv8", "neoverse", "graviton", "kryo"}
_GPU_FAMILIES = ("kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell", "gcn",
                 "cdna", "rdna", "mali", "adreno", "intel-gpu", "apple")

# Series patterns, first match wins: (regex on the spaced, cleaned name, kind, vendor, family, architecture).
# The architecture is the chip when the name gives it (a RADV chip name), else the generation.
_NV, _AMD, _ARM, _QC, _INTEL = "nvidia", "amd", "arm", "qualcomm", "intel"
_SERIES: tuple[tuple[str, str, str, str, str], ...] = (
    # NVIDIA (newest first; GTX TITAN X is Maxwell, TITAN X without GTX is Pascal)
    (r"\bblackwell\b|\brtx 50[5-9]\d\b|\bg?b (100|200|300)\b|\bgb 20[2-7]\b|\bjetson (agx )?thor\b|\bdgx spark\b",
     "gpu", _NV, "blackwell", "blackwell"),
    (r"\bg?h (100|200|800)\b|\bhopper\b", "gpu", _NV, "hopper", "hopper"),
    (r"\brtx 40[5-9]\d\b|\bl (4|20|40|40 s|40 g)\b|\bad 10[2-7]\b|\bada\b|\blovelace\b", "gpu", _NV, "ada", "ada"),
    (r"\brtx 30[5-9]\d\b|\brtx a \d{3,4}\b|\ba (10|10 g|16|30|40|100|800)\b|\bnvidia a 2\b|\bga 10[0-7]\b"
     r"|\bga 10 b\b|\borin\b|\bampere\b(?! altra)", "gpu", _NV, "ampere", "ampere"),
    (r"\brtx 20[5-9]\d\b|\bgtx 16[5-6]0\b|\btitan rtx\b|\bquadro rtx\b|\b(tesla |nvidia )?t 4\b"
     r"|\bquadro t \d{3,4}\b|\bnvidia t (400|550|600|1000|1200|2000)\b|\btu 1(0[2-6]|1[67])\b|\bturing\b"
     r"|\bmx [45]50\b", "gpu", _NV, "turing", "turing"),
    (r"\bv 100( s)?\b|\btitan v\b|\bgv 100\b|\bgv 10 b\b|\bxavier\b|\bvolta\b", "gpu", _NV, "volta", "volta"),
    (r"\bgtx titan x\b|\bgtx 9[5-8]0( m)?\b|\bgtx 9[1-8]0 m\b|\bgtx 7[45]0\b|\btesla m (4|6|10|40|60)\b"
     r"|\bm (40|60)\b|\bquadro m \d{3,4}\b|\bgm 20[046]\b|\bgm 10[78]\b|\bgm 20 b\b|\btx 1\b|\btegra x 1\b"
     r"|\bjetson nano\b|\bmaxwell\b", "gpu", _NV, "maxwell", "maxwell"),
    (r"\bgtx 10[5-8]0\b|\bgt 1030\b|\btitan x( ?p)?\b|\btesla p (4|6|40|100)\b|\bp (100|40)\b"
     r"|\bquadro g?p \d{3,4}\b|\bgp 10[0-8]\b|\bgp 10 b\b|\btx 2\b|\btegra x 2\b|\bpascal\b|\bmx [123][35]0\b",
     "gpu", _NV, "pascal", "pascal"),
    (r"\btesla k \d{2}\b|\bgrid k (1|2|520)\b|\bk (10|20|40|80)( x| xm| m| c| s| t)?\b|\bgtx (6[5-9]0|7[6-8]0)\b|\bgtx titan\b"
     r"|\btitan (black|z)\b|\bquadro k \d{3,5}\b|\bgk (10[4-7]|110|110 b|180|208|210|20 a)\b|\btk 1\b|\bkepler\b",
     "gpu", _NV, "kepler", "kepler"),
    # AMD: chip names as RADV and ROCm print them, then series numbers
    (r"\brenoir\b", "gpu", _AMD, "gcn", "Renoir"), (r"\bcezanne\b", "gpu", _AMD, "gcn", "Cezanne"),
    (r"\blucienne\b", "gpu", _AMD, "gcn", "Lucienne"), (r"\bbarcelo\b", "gpu", _AMD, "gcn", "Barcelo"),
    (r"\b(raven|picasso)\b", "gpu", _AMD, "gcn", "Raven"),
    (r"\bvan ?gogh\b|\bsteam deck\b", "gpu", _AMD, "rdna", "Van Gogh"),
    (r"\brembrandt\b|\byellow carp\b", "gpu", _AMD, "rdna", "Rembrandt"),
    (r"\bmendocino\b", "gpu", _AMD, "rdna", "Raphael"),
    (r"\bphoenix\b|\bhawk point\b", "gpu", _AMD, "rdna", "Phoenix"),
    (r"\bstrix\b|\bradeon 8[4-9]0 m\b|\bradeon 80[4-6]0 s\b", "gpu", _AMD, "rdna", "rdna3.5"),
    (r"\brx 90[5-7]0\b|\bnavi 4[48]\b|\bradeon ai pro\b|\br 9700\b", "gpu", _AMD, "rdna", "rdna4"),
    (r"\brx 7[6-9]\d0\b|\bw 7[5-9]00\b|\bv 710\b|\bnavi 3[123]\b|\bradeon 7[4-8]0 m\b|\bplum bonito\b",
     "gpu", _AMD, "rdna", "rdna3"),
    (r"\brx 6[4-9]\d0\b|\bw 6[4-9]00\b|\bv 620\b|\bnavi 2[1-4]\b|\bradeon 6[1-8]0 m\b|\bsienna( cichlid)?\b"
     r"|\bnavy flounder\b|\bdimgrey cavefish\b|\bbeige goby\b", "gpu", _AMD, "rdna", "rdna2"),
    (r"\brx 5[5-7]00\b|\bw 5[5-7]00\b|\bnavi 1[024]\b|\bv 520\b", "gpu", _AMD, "rdna", "rdna1"),
    (r"\bmi 35[05]( x)?\b", "gpu", _AMD, "cdna", "cdna4"),
    (r"\bmi 3[0-2]\d( x| a)?\b|\baqua vanjaram\b", "gpu", _AMD, "cdna", "cdna3"),
    (r"\bmi 2[0-5]\d( x)?\b|\baldebaran\b", "gpu", _AMD, "cdna", "cdna2"),
    (r"\bmi 100\b|\barcturus\b", "gpu", _AMD, "cdna", "cdna1"),
    (r"\bmi (25|50|60)\b|\bradeon (pro )?vii\b|\bvega\b", "gpu", _AMD, "gcn", "gcn5"),
    (r"\brx [45][4-9]0( x)?\b|\brx 5[4-9]0( x)?\b|\bpolaris\b|\bellesmere\b|\bbaffin\b|\blexa\b"
     r"|\bwx [2-9]100\b|\bmi 6\b", "gpu", _AMD, "gcn", "gcn4"),
    (r"\bfury\b|\br 9 nano\b|\bfiji\b|\btonga\b|\bcarrizo\b|\br 9 (285|380)( x)?\b|\bmi 8\b", "gpu", _AMD, "gcn",
     "gcn3"),
    (r"\bhawaii\b|\bbonaire\b|\br 9 (290|390)( x)?\b|\br 7 260( x)?\b|\bkaveri\b", "gpu", _AMD, "gcn", "gcn2"),
    (r"\btahiti\b|\bpitcairn\b|\bcape verde\b|\bhd 7[7-9]\d0\b|\br 9 (270|280)( x)?\b", "gpu", _AMD, "gcn",
     "gcn1"),
    # Intel GPUs
    (r"\barc b \d{3}\b|\bbattlemage\b|\bbmg\b", "gpu", _INTEL, "intel-gpu", "battlemage"),
    (r"\barc 1[34]0 v\b|\blunar lake\b", "gpu", _INTEL, "intel-gpu", "xe2-lpg"),
    (r"\barc a \d{3}( m)?\b|\balchemist\b|\bdg 2\b|\bflex 1[47]0\b|\barc pro a \d{2}( m)?\b", "gpu", _INTEL,
     "intel-gpu", "alchemist"),
    (r"\bdata center gpu max\b|\bmax 1[15][05]0\b|\bponte vecchio\b", "gpu", _INTEL, "intel-gpu", "ponte-vecchio"),
    (r"\barc graphics\b|\bmeteor lake\b", "gpu", _INTEL, "intel-gpu", "xe-lpg"),
    (r"\biris xe\b|\buhd graphics 7[0-9]0\b|\bdg 1\b", "gpu", _INTEL, "intel-gpu", "xe-lp"),
    (r"\biris plus graphics( g [47])?\b(?! \d)|\bgen 11\b", "gpu", _INTEL, "intel-gpu", "gen11"),
    (r"\buhd graphics (p )?6[0-3]0\b|\bhd graphics (p )?[56]\d\d\b|\biris (plus |pro )?graphics [56]\d\d\b",
     "gpu", _INTEL, "intel-gpu", "gen9"),
    (r"\bintel graphics\b|\buhd graphics\b|\biris\b", "gpu", _INTEL, "intel-gpu", "intel-gpu"),
    # Arm Mali, Qualcomm Adreno, Apple
    (r"\bmali t [6-8]\d\d\b|\bmidgard\b", "gpu", _ARM, "mali", "midgard"),
    (r"\bmali g (31|51|52|71|72|76)\b|\bbifrost\b", "gpu", _ARM, "mali", "bifrost"),
    (r"\bmali g (57|68|77|78|78 ae|310|510|610|710|615|715)\b|\bimmortalis g 715\b|\bvalhall\b", "gpu", _ARM,
     "mali", "valhall"),
    (r"\bmali g (620|625|720|725|925|1 ultra)\b|\bimmortalis g (720|925)\b", "gpu", _ARM, "mali", "arm-5th-gen"),
    (r"\bmali [45]\d0\b|\butgard\b", "gpu", _ARM, "mali", "utgard"),
    (r"\bmali\b|\bimmortalis\b", "gpu", _ARM, "mali", "mali"),
    (r"\badreno (\d)\d\d\b", "gpu", _QC, "adreno", "Adreno {0}xx"),
    (r"\badreno x 1\b", "gpu", _QC, "adreno", "Adreno X1"),
    (r"\badreno\b", "gpu", _QC, "adreno", "adreno"),
    (r"\bapple m ([1-5])\b", "", "apple", "apple", "apple-m{0}"),
    # CPUs whose names give the core (TVM -mcpu values are read through _FAMILY_WORDS)
    (r"\b(platinum|gold|silver|bronze) [3-9]1\d\d\b", "cpu", _INTEL, "intel-skylake-sp", "Skylake-SP"),
    (r"\b(platinum|gold|silver|bronze) [3-9]2\d\d\b", "cpu", _INTEL, "intel-skylake-sp", "Cascade Lake-SP"),
    (r"\b(platinum|gold|silver|bronze) [3-9]3\d\d\b", "cpu", _INTEL, "intel-icelake-sp", "Ice Lake-SP"),
    (r"\b(platinum|gold|silver|bronze) [3-9]4\d\d\b", "cpu", _INTEL, "intel-sapphire-rapids", "Sapphire Rapids"),
    (r"\b(platinum|gold|silver|bronze) [3-9]5\d\d\b", "cpu", _INTEL, "intel-sapphire-rapids", "Emerald Rapids"),
    (r"\be 5 \d{4}( [a-z])? v 3\b", "cpu", _INTEL, "intel-haswell", "Haswell-EP"),
    (r"\be 5 \d{4}( [a-z])? v 4\b", "cpu", _INTEL, "intel-haswell", "Broadwell-EP"),
    (r"\bepyc 7\d\d2\b", "cpu", _AMD, "amd-zen2", "Zen 2 (Rome)"),
    (r"\bepyc 7\d\d3( x)?\b", "cpu", _AMD, "amd-zen3", "Zen 3 (Milan)"),
    (r"\bepyc [89]\d\d4( x)?\b", "cpu", _AMD, "amd-zen4", "Zen 4"),
    (r"\bepyc 9\d\d5\b", "cpu", _AMD, "amd-zen4", "Zen 5"),
)
_SERIES_RE = tuple((re.compile(p), k, v, f, a) for p, k, v, f, a in _SERIES)


def _series(text: str) -> tuple[str, str, str, str] | None:
    """(kind, vendor, family, architecture) a name's series pattern gives, or None."""
    s = _spaced(text)
    for rx, kind, vendor, family, arch in _SERIES_RE:
        m = rx.search(s)
        if m:
            return kind, vendor, family, arch.format(*[g or "" for g in m.groups()])
    return None


def _gen_of_gfx(gfx: str) -> tuple[str, str]:
    """(family, generation) of an AMD ``gfxNNN`` ISA name."""
    g = gfx[3:]
    if len(g) == 4 and g[:2] in ("10", "11", "12"):
        gen = {"101": "rdna1", "103": "rdna2", "110": "rdna3", "115": "rdna3.5"}.get(g[:3], "rdna4" if g[:2] == "12"
                                                                                      else "rdna")
        return "rdna", gen
    cdna = {"908": "cdna1", "90a": "cdna2", "940": "cdna3", "941": "cdna3", "942": "cdna3", "950": "cdna4"}
    if g in cdna:
        return "cdna", cdna[g]
    gcn = {"6": "gcn1", "7": "gcn2", "8": "gcn3", "9": "gcn5"}
    return "gcn", gcn.get(g[:1], "gcn")


def _family_of_gfx(gfx: str) -> str:
    return _gen_of_gfx(gfx)[0]


def _family_of_sm(cc: int) -> str:
    if cc == 75:
        return "turing"
    if cc == 89:
        return "ada"
    fam = "kepler"
    for major, f in _NV_CC:
        if cc // 10 >= major:
            fam = f
    return fam


_TVM_OPT = re.compile(r"(?:^|\s)--?([A-Za-z_][\w-]*)(?:=|(?=\s|$))")


def _parse_tvm(text: str) -> dict | None:
    """Options of a TVM target string (``cuda -model=titanx``) or None when it is not one.

    Values may hold spaces (``vulkan -device_name=AMD Radeon Graphics (RADV RENOIR)``) or
    quotes; a value runs to the next `` -option``."""
    stripped = text.strip()
    parts = stripped.split(None, 1)
    if not parts or parts[0].lower() not in _TVM_BACKENDS:
        return None
    opts: dict[str, str] = {"backend": parts[0].lower()}
    rest = parts[1] if len(parts) > 1 else ""
    if rest and not rest.startswith("-"):
        return None
    marks = list(_TVM_OPT.finditer(" " + rest))
    for j, m in enumerate(marks):
        end = marks[j + 1].start() if j + 1 < len(marks) else len(rest) + 1
        val = (" " + rest)[m.end():end].strip().strip("'\"")
        opts[m.group(1).lower()] = val
    return opts


@dataclass(frozen=True)
class _Inferred:
    kind: str
    vendor: str
    family: str
    architecture: str
    hints: dict
    inferred: bool


def _infer(text: str, opts: dict | None) -> _Inferred:
    """Kind, vendor, family and architecture read from a device string's name (series
    patterns, ISA names, code-name words), and the numbers it states (``hints``)."""
    if opts is None:
        text = _WITH_IGPU.sub(" ", text)
    low = text.lower()
    compact_words = [re.sub(r"[^a-z0-9]", "", w) for w in re.split(r"[\s=,;:/]+", low) if w]
    toks = _tokens(text)
    words = set(compact_words) | set(toks) | {x + y for x, y in zip(toks, toks[1:])}
    compact_words += [x + y for x, y in zip(toks, toks[1:])]
    kind = vendor = family = arch = ""
    hints: dict = {}
    probe = text
    if opts:
        kind = _TVM_BACKENDS.get(opts["backend"], "")
        if opts["backend"] in ("cuda", "nvptx"):
            vendor = "nvidia"
        elif opts["backend"] == "rocm":
            vendor = "amd"
        mattr = opts.get("mattr", "")
        if "+avx512f" in mattr or "avx512" in opts.get("mcpu", ""):
            hints["vector_bits"] = 512
        elif "+avx2" in mattr:
            hints["vector_bits"] = 256
        elif "+neon" in mattr or "+sse4.2" in mattr:
            hints["vector_bits"] = 128
        for key in ("num-cores", "num_cores"):
            if opts.get(key, "").isdigit():
                hints["threads"] = int(opts[key])
        triple = opts.get("mtriple", "")
        if "apple" in triple:
            vendor = vendor or "apple"
        elif triple.startswith(("aarch64", "arm")):
            vendor = vendor or "arm"
        dev = opts.get("device", "")
        if dev == "intel_graphics":
            vendor, family, arch = "intel", "intel-gpu", "intel-gpu"
        # only the values that name the device (not -mtriple/-mattr/-libs) feed the name patterns
        probe = " ".join(opts.get(k, "") for k in ("model", "device-name", "device_name", "device", "mcpu", "arch"))
    else:
        mem = qualifiers(text).get("mem_gb")
        if mem:
            hints["mem_gb"] = mem
    m = re.search(r"\bgfx([0-9a-f]{3,4})", low)
    sm = re.search(r"\bsm_?(\d{2,3})\b", low)
    ser = _series(probe) if probe.strip() else None
    if m:
        family, arch = _gen_of_gfx("gfx" + m.group(1))
        kind, vendor = "gpu", "amd"
        if ser and ser[1] == "amd" and ser[3][:1].isupper():
            arch = ser[3]  # a chip name beside the ISA (RADV RENOIR) is more specific
    elif sm:
        kind, vendor, family = "gpu", "nvidia", _family_of_sm(int(sm.group(1)))
        arch = family
    elif ser:
        skind, svendor, family, arch = ser
        kind = kind or skind
        if not vendor or vendor == "arm" and svendor != "arm":
            vendor = svendor
    for w in compact_words + sorted(words):
        if not family and w in _FAMILY_WORDS:
            family = _FAMILY_WORDS[w]
        if not vendor and w in _VENDOR_WORDS:
            vendor = _VENDOR_WORDS[w]
    if not kind:
        if words & _GPU_WORDS or family in _GPU_FAMILIES:
            kind = "gpu"
        elif words & _CPU_WORDS or family.startswith(("intel", "amd-zen", "arm-")):
            kind = "cpu"
        elif "graphics" in words or vendor == "nvidia":
            kind = "gpu"
    if not vendor and family.startswith("intel"):
        vendor = "intel"
    if not vendor and family.startswith("amd"):
        vendor = "amd"
    if not vendor and family.startswith("arm"):
        vendor = "arm"
    if family == "intel-skylake" and hints.get("vector_bits") == 512:
        family = "intel-skylake-sp"
    if family and not arch:
        arch = family
    return _Inferred(kind or "other", vendor or "other", family or "other", arch or "unknown", hints, bool(arch))


# -------------------------------------------------------------------------- resolving
def _result(query: str, matched: str, i: int | None, hints: dict, via: str, opts_kind: str = "") -> Resolution:
    if i is None:
        raise AssertionError("row index required")
    row = devices()[i]
    return Resolution(query=query, matched=matched, row=row, kind=row["kind"], vendor=row["vendor"],
                      architecture=row["architecture"], family=row["family"], hints=hints, via=via)


def _variant(query: str, name: str, i: int, differs: tuple[str, ...], hints: dict, via: str,
             opts: dict | None = None) -> Resolution:
    """The flagged fallback of a variant of row ``i`` that the catalog lacks."""
    row = devices()[i]
    inf = _infer(name if opts is None else query, opts)
    same_vendor = inf.vendor in (row["vendor"], "other")
    arch = inf.architecture if inf.inferred and same_vendor else row["family"]
    return Resolution(query=query, matched="fallback", row=None, kind=row["kind"], vendor=row["vendor"],
                      architecture=arch, family=row["family"], hints={**inf.hints, **hints}, via=via,
                      inferred=True, variant_of=row["name"], differs=differs)


def _fuzzy(text: str, kind: str | None) -> tuple[int | None, tuple[str, ...]]:
    """(row, differing qualifiers) of the best token match of ``text``; a match that differs
    by no qualifier wins over a better-scoring variant.  (None, ()) when nothing matches."""
    q = _tokens(text)
    if not q:
        return None, ()
    qset = set(q) | {a + b for a, b in zip(q, q[1:])}
    models = [t for t in q if _is_model_token(t)]
    if not models:
        return None, ()
    quals = qualifiers(text)
    ser = _series(text)
    _, toks, _ = _index()
    best: tuple[float, int, tuple[str, ...]] | None = None
    clean: tuple[float, int] | None = None
    weight = {t: (3.0 if _is_model_token(t) else 1.0) for t in q}
    for i, ts in enumerate(toks):
        row = devices()[i]
        if kind and kind in ("cpu", "gpu") and row["kind"] != kind:
            continue
        if ser and ser[2] != row["family"]:
            continue  # the name says another generation (RTX PRO 6000 Blackwell is not the RTX 6000 Ada)
        # every model-number token of the query must be in the row, or be joined with a neighbour that is
        if not all(t in ts or any(t in j and j in ts for j in qset if len(j) > len(t)) for t in models):
            continue
        got = sum(w for t, w in weight.items() if t in ts)
        got += sum(1.0 for j in qset - set(q) if j in ts)
        score = got / (sum(weight.values()) + 1e-9) - 0.01 * len(ts - qset) / (len(ts) + 1)
        if score < 0.5:
            continue
        d = _differs(quals, row)
        if best is None or score > best[0]:
            best = (score, i, d)
        if not d and (clean is None or score > clean[0]):
            clean = (score, i)
    if clean is not None:
        return clean[1], ()
    if best is not None:
        return best[1], best[2]
    return None, ()


def _pick(cands: list[int] | None, kind: str | None) -> int | None:
    """First candidate row of the wanted kind.  Without a kind, a name shared by a board's CPU
    and GPU rows (``rk3399``) picks the CPU row."""
    cands = list(cands or ())
    if kind in ("cpu", "gpu"):
        return next((i for i in cands if devices()[i]["kind"] == kind), None)
    if len({devices()[i]["kind"] for i in cands}) > 1:
        return next(i for i in cands if devices()[i]["kind"] == "cpu")
    return cands[0] if cands else None


def _resolve_tvm(text: str, opts: dict) -> Resolution | None:
    """exact/fuzzy resolution of a TVM target string by the options naming its device."""
    exact, _, by_isa = _index()
    hints = _infer(text, opts).hints
    tkind = _TVM_BACKENDS.get(opts["backend"])
    variant: Resolution | None = None
    for key in ("model", "device-name", "device_name", "device", "mcpu", "arch"):
        val = opts.get(key, "")
        if not val or val.lower() in ("unknown", "none") or (key == "device" and val in _TVM_GENERIC_DEVICES):
            continue
        i = _pick(exact.get(_compact(val)), tkind)
        if i is not None:
            return _result(text, "exact", i, hints, f"-{key}")
        isa = val.lower().split(":")[0]
        if isa in by_isa:
            i = _pick(by_isa[isa], tkind)
            if i is not None:
                return _result(text, "fuzzy", i, hints, "isa")
        i, differs = _fuzzy(val, tkind)
        if i is not None and not differs:
            return _result(text, "fuzzy", i, hints, f"-{key}")
        if i is not None and variant is None:
            variant = _variant(text, val, i, differs, hints, f"-{key}", opts)
    return variant


def _resolve_text(text: str, kind: str | None) -> Resolution | None:
    """exact, fuzzy or variant (flagged fallback) resolution of one string, or None."""
    opts = _parse_tvm(text)
    if opts is not None:
        return _resolve_tvm(text, opts)
    exact, _, by_isa = _index()
    i = _pick(exact.get(_compact(text)), kind)
    if i is not None:
        return _result(text, "exact", i, {}, "name")
    m = re.search(r"\b(gfx[0-9a-f]{3,4}|sm_?\d{2,3})\b", text.lower())
    if m:
        isa = m.group(1).replace("sm", "sm_").replace("sm__", "sm_")
        i = _pick(by_isa.get(isa), kind)
        if i is not None:
            return _result(text, "fuzzy", i, {}, "isa")
    i, differs = _fuzzy(text, kind)
    if i is not None and not differs:
        return _result(text, "fuzzy", i, {}, "tokens")
    if i is not None:
        return _variant(text, text, i, differs, {}, "tokens")
    return None


def _hint_text(filename_hint: str) -> str:
    base = os.path.basename(filename_hint or "")
    for ext in (".gz", ".json", ".log", ".csv", ".jsonl", ".txt", ".parquet"):
        if base.lower().endswith(ext):
            base = base[: -len(ext)]
    return base


@functools.lru_cache(maxsize=4096)
def _resolve_cached(text: str, filename_hint: str, kind: str) -> Resolution:
    text = text if isinstance(text, str) else str(text)
    r = _resolve_text(text, kind or None) if text.strip() else None
    if r is not None and r.matched == "exact":
        return r
    hint = _hint_text(filename_hint)
    if hint:
        h = _resolve_text(hint, kind or None)
        if h is not None and h.row is not None and (r is None or r.family == h.family):
            return Resolution(query=text, matched="fuzzy", row=h.row, kind=h.kind, vendor=h.vendor,
                              architecture=h.architecture, family=h.family, hints={**h.hints, **(r.hints if r else {})},
                              via="filename")
    if r is not None:
        return r
    probe = f"{text} {hint}".strip()
    inf = _infer(probe, _parse_tvm(text))
    kind_i = kind if kind in ("cpu", "gpu") else inf.kind
    if kind_i == "other" and inf.family == "apple":
        kind_i = "gpu"
    return Resolution(query=text, matched="fallback", row=None, kind=kind_i, vendor=inf.vendor,
                      architecture=inf.architecture, family=inf.family, hints=inf.hints, via="tokens",
                      inferred=inf.inferred)


def resolve(name: Any, filename_hint: str | None = None, *, kind: str | None = None, warn: bool = True) -> Resolution:
    """Resolve a device string to a catalog row (see module docstring).  Never raises.

    ``filename_hint`` (e.g. ``"MI250X.json.gz"``) is consulted when ``name`` is empty or not
    an exact match; ``kind`` (``cpu``/``gpu``) restricts the candidate rows.  A ``fallback``
    result (inferred, variant or unknown) issues a ``UserWarning`` unless ``warn`` is False.
    """
    try:
        text = "" if name is None else str(name)
        res = _resolve_cached(text, str(filename_hint or ""), str(kind or ""))
    except Exception as e:  # noqa: BLE001 - resolution must never crash a caller
        res = Resolution(query=str(name), matched="fallback", row=None, kind="other", vendor="other",
                         architecture="unknown", family="other", hints={}, via=f"error: {e}")
    if res.matched == "fallback" and warn:
        what = (f"a variant of {res.variant_of!r} (differs: {', '.join(res.differs)})" if res.variant_of
                else "not in the hardware catalog")
        warnings.warn(f"device {res.query!r} is {what}; embedding it from its tokens "
                      f"(kind={res.kind}, vendor={res.vendor}, architecture={res.architecture}, "
                      f"family={res.family}, inferred={res.inferred}) - not in the hardware catalog as such",
                      UserWarning, stacklevel=2)
    return res


def resolve_device(name: str, kind: str | None = None, filename_hint: str | None = None) -> dict | None:
    """Small stable description of a known device for importers to merge into a target dict:
    ``{"device": canonical name, "vendor": ..., "arch": architecture}``; None when unknown
    (``fallback``).  Never raises and never warns."""
    r = resolve(name, filename_hint, kind=kind, warn=False)
    if r.row is None:
        return None
    return {"device": r.row["name"], "vendor": r.row["vendor"], "arch": r.row["architecture"]}


def find(name: str) -> dict | None:
    """The catalog row whose name or alias equals ``name`` (normalised), else None."""
    i = _pick(_index()[0].get(_compact(name)), None)
    return None if i is None else devices()[i]


# --------------------------------------------------------------------- this machine
@functools.lru_cache(maxsize=1)
def local_cpuid() -> str:
    """``"<cpu family>:<model>"`` of this machine's CPU from /proc/cpuinfo ('' when unknown)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            text = f.read(65536)
    except OSError:
        return ""
    fam = re.search(r"^cpu family\s*:\s*(\d+)", text, re.M)
    mod = re.search(r"^model\s*:\s*(\d+)", text, re.M)
    return f"{fam.group(1)}:{mod.group(1)}" if fam and mod else ""


def resolve_cpu(model: str, *, cpuid: str = "", l3_kb: float | None = None) -> Resolution:
    """Resolve a CPU by its model string; when that is not conclusive (virtual machines report
    ``Intel(R) Xeon(R) Processor``), by CPUID family:model, choosing among the rows of that
    model the one whose L3 size (KiB) is closest to ``l3_kb``.  Never raises or warns."""
    r = resolve(model, kind="cpu", warn=False)
    if r.matched == "exact" or not cpuid:
        return r
    cands = [row for row in devices() if row["cpuid"] == cpuid]
    if not cands:
        return r
    import math

    def dist(row: dict) -> float:
        if not l3_kb or not row["l3_kb"]:
            return 0.0
        return abs(math.log(row["l3_kb"]) - math.log(l3_kb))

    row = min(cands, key=dist)
    return Resolution(query=model, matched="fuzzy", row=row, kind=row["kind"], vendor=row["vendor"],
                      architecture=row["architecture"], family=row["family"], hints={}, via="cpuid")
