"""The hardware catalog (``datasets/hardware_catalog.csv``) and device-name resolution.

One row per real device: kind (``cpu``/``gpu``), vendor, architecture, family (the coarse
architecture family the feature vector one-hot encodes), ISA, and spec-sheet numbers.
Units of the numeric columns: clocks MHz, ``vector_bits`` bits, cache and shared-memory
sizes KiB (``l1_kb`` and ``shared_kb``/``registers_kb`` per core/SM/CU; ``l2_kb`` and
``l3_kb`` for the whole chip), ``mem_bw_gbs`` GB/s, ``mem_gb`` GB, ``fp32_gflops`` GFLOP/s,
``tdp_w`` watts.  An empty cell is ``None``.

Resolution contract (:func:`resolve`): a device string as real logs carry it (CUDA/HIP
device names, ``gfx90a:sramecc+:xnack-``, TVM target strings such as
``cuda -model=titanx`` or ``llvm -mcpu=skylake-avx512``, an empty string beside a file
name) resolves to a :class:`Resolution` whose ``matched`` is

* ``exact``   - the normalised string (or the ``-model=``/``-mcpu=`` value of a TVM target
  string) equals a row's name or alias;
* ``fuzzy``   - token matching (model-number tokens must agree), an ISA name such as
  ``gfx906`` or ``sm_80``, or a file-name hint picked the row;
* ``fallback``- nothing matched: kind, vendor and architecture family are inferred from the
  string's tokens, ``row`` is None and a ``UserWarning`` is issued.

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

# words that carry no identity (dropped on both sides before comparing)
_NOISE = {"nvidia", "amd", "intel", "ati", "corporation", "corp", "inc", "r", "tm", "processor", "graphics",
          "device", "the", "with", "and", "cpu", "gpu"}
# TVM / LLVM target string backends
_TVM_BACKENDS = {"llvm": "cpu", "cuda": "gpu", "nvptx": "gpu", "rocm": "gpu", "opencl": "gpu", "vulkan": "gpu",
                 "metal": "gpu", "c": "cpu", "hexagon": "cpu", "webgpu": "gpu"}


@dataclass(frozen=True)
class Resolution:
    """Result of resolving a device string (see module docstring).

    ``hints`` holds numbers the string itself states (``vector_bits`` from ``-mattr``,
    ``threads`` from ``-num-cores``), to be used beside or instead of the row's values.
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

    @property
    def name(self) -> str:
        return self.row["name"] if self.row else (self.query or "unknown")

    def to_json_dict(self) -> dict:
        return {"query": self.query, "matched": self.matched, "name": self.name, "kind": self.kind,
                "vendor": self.vendor, "architecture": self.architecture, "family": self.family,
                "isa": (self.row or {}).get("isa") or "", "hints": dict(self.hints), "via": self.via,
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


def _tokens(text: str) -> list[str]:
    return [w for w in _clean(text).replace("+", " plus ").split() if w not in _NOISE]


def _compact(text: str) -> str:
    return "".join(_tokens(text))


def _is_model_token(tok: str) -> bool:
    """Tokens naming a model (contain a digit, are not a memory size like ``40gb``)."""
    return any(ch.isdigit() for ch in tok) and not re.fullmatch(r"\d+(gb|mb|g)", tok)


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
    "haswell": "intel-haswell", "broadwell": "intel-haswell", "skylake": "intel-skylake",
    "skylakeavx512": "intel-skylake-sp", "cascadelake": "intel-skylake-sp", "cooperlake": "intel-skylake-sp",
    "icelake": "intel-icelake-sp", "icelakeserver": "intel-icelake-sp", "sapphirerapids": "intel-sapphire-rapids",
    "emeraldrapids": "intel-sapphire-rapids", "graniterapids": "intel-sapphire-rapids",
    "alderlake": "intel-alder-lake", "raptorlake": "intel-alder-lake", "coffeelake": "intel-skylake",
    "kabylake": "intel-skylake", "znver1": "amd-zen2", "znver2": "amd-zen2", "znver3": "amd-zen3",
    "znver4": "amd-zen4", "znver5": "amd-zen4", "zen2": "amd-zen2", "zen3": "amd-zen3", "zen4": "amd-zen4",
    "cortexa7": "arm-cortex-a-little", "cortexa9": "arm-cortex-a-little", "cortexa53": "arm-cortex-a-little",
    "cortexa55": "arm-cortex-a-little", "cortexa57": "arm-cortex-a-big", "cortexa72": "arm-cortex-a-big",
    "cortexa73": "arm-cortex-a-big", "cortexa75": "arm-cortex-a-big", "cortexa76": "arm-cortex-a-big",
    "cortexa77": "arm-cortex-a-big", "cortexa78": "arm-cortex-a-big", "cortexx1": "arm-cortex-a-big",
    "neoversen1": "arm-neoverse", "neoversen2": "arm-neoverse", "neoversev1": "arm-neoverse",
    "neoversev2": "arm-neoverse", "neoverse": "arm-neoverse", "graviton": "arm-neoverse",
}
_VENDOR_WORDS = {
    "nvidia": "nvidia", "cuda": "nvidia", "nvptx": "nvidia", "geforce": "nvidia", "quadro": "nvidia",
    "tesla": "nvidia", "jetson": "nvidia", "titan": "nvidia", "rtx": "nvidia", "gtx": "nvidia",
    "amd": "amd", "radeon": "amd", "rocm": "amd", "hip": "amd", "epyc": "amd", "ryzen": "amd", "instinct": "amd",
    "intel": "intel", "xeon": "intel", "core": "intel", "arm": "arm", "armcpu": "arm", "cortex": "arm", "mali": "arm",
    "aarch64": "arm", "neoverse": "arm", "qualcomm": "qualcomm", "snapdragon": "qualcomm", "adreno": "qualcomm",
    "kryo": "qualcomm", "apple": "apple", "graviton": "amazon", "rockchip": "rockchip", "broadcom": "broadcom",
    "hisilicon": "hisilicon", "kirin": "hisilicon", "xilinx": "xilinx", "zynq": "xilinx",
}
_GPU_WORDS = {"cuda", "nvptx", "opencl", "rocm", "hip", "vulkan", "metal", "gpu", "geforce", "quadro", "tesla",
              "rtx", "gtx", "radeon", "instinct", "mali", "adreno", "titan", "jetson"}
_CPU_WORDS = {"llvm", "cpu", "armcpu", "xeon", "epyc", "ryzen", "core", "cortex", "aarch64", "x86", "x8664",
              "neon", "avx2", "avx512f", "armv7", "armv8", "neoverse", "graviton", "kryo"}


def _family_of_gfx(gfx: str) -> str:
    g = gfx[3:]
    if g.startswith(("10", "11", "12")) and len(g) == 4:
        return "rdna"
    if g in ("908", "90a", "940", "941", "942", "950"):
        return "cdna"
    return "gcn"


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


def _parse_tvm(text: str) -> dict | None:
    """Options of a TVM target string (``cuda -model=titanx``) or None when it is not one."""
    parts = text.strip().split()
    if not parts or parts[0].lower() not in _TVM_BACKENDS:
        return None
    if len(parts) > 1 and not all(p.startswith("-") for p in parts[1:]):
        return None
    opts = {"backend": parts[0].lower()}
    for p in parts[1:]:
        k, _, v = p.lstrip("-").partition("=")
        opts[k.lower()] = v
    return opts


def _infer(text: str, opts: dict | None) -> tuple[str, str, str, dict]:
    """(kind, vendor, family, hints) from the tokens of a device string."""
    low = text.lower()
    compact_words = [re.sub(r"[^a-z0-9]", "", w) for w in re.split(r"[\s=,;:/]+", low) if w]
    toks = _tokens(text)
    words = set(compact_words) | set(toks) | {x + y for x, y in zip(toks, toks[1:])}
    compact_words += [x + y for x, y in zip(toks, toks[1:])]
    kind = vendor = family = ""
    hints: dict = {}
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
        if triple.startswith(("aarch64", "arm")):
            vendor = vendor or "arm"
        if triple.startswith(("x86_64", "i686")):
            vendor = vendor or ""
    m = re.search(r"\bgfx([0-9a-f]{3,4})", low)
    if m:
        kind, vendor, family = "gpu", "amd", _family_of_gfx("gfx" + m.group(1))
    m = re.search(r"\bsm_?(\d{2,3})\b", low)
    if m:
        kind, vendor, family = "gpu", "nvidia", _family_of_sm(int(m.group(1)))
    for w in compact_words + sorted(words):
        if not family and w in _FAMILY_WORDS:
            family = _FAMILY_WORDS[w]
        if not vendor and w in _VENDOR_WORDS:
            vendor = _VENDOR_WORDS[w]
    if not kind:
        if words & _GPU_WORDS or family in ("kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada",
                                            "hopper", "blackwell", "gcn", "cdna", "rdna", "mali", "adreno"):
            kind = "gpu"
        elif words & _CPU_WORDS or family.startswith(("intel", "amd-zen", "arm-")):
            kind = "cpu"
    if not vendor and family.startswith("intel"):
        vendor = "intel"
    if not vendor and family.startswith("amd"):
        vendor = "amd"
    if not vendor and family.startswith("arm"):
        vendor = "arm"
    if family == "intel-skylake" and hints.get("vector_bits") == 512:
        family = "intel-skylake-sp"
    return kind or "other", vendor or "other", family or "other", hints


# -------------------------------------------------------------------------- resolving
def _result(query: str, matched: str, i: int | None, hints: dict, via: str, opts_kind: str = "") -> Resolution:
    if i is None:
        raise AssertionError("row index required")
    row = devices()[i]
    return Resolution(query=query, matched=matched, row=row, kind=row["kind"], vendor=row["vendor"],
                      architecture=row["architecture"], family=row["family"], hints=hints, via=via)


def _fuzzy(text: str, kind: str | None) -> int | None:
    q = _tokens(text)
    if not q:
        return None
    qset = set(q) | {a + b for a, b in zip(q, q[1:])}
    models = [t for t in q if _is_model_token(t)]
    if not models:
        return None
    _, toks, _ = _index()
    best, best_score = None, 0.0
    for i, ts in enumerate(toks):
        row = devices()[i]
        if kind and kind in ("cpu", "gpu") and row["kind"] != kind:
            continue
        # every model-number token of the query must be in the row, or be joined with a neighbour that is
        if not all(t in ts or any(t in j and j in ts for j in qset if len(j) > len(t)) for t in models):
            continue
        weight = {t: (3.0 if _is_model_token(t) else 1.0) for t in q}
        got = sum(w for t, w in weight.items() if t in ts)
        got += sum(1.0 for j in qset - set(q) if j in ts)
        score = got / (sum(weight.values()) + 1e-9) - 0.01 * len(ts - qset) / (len(ts) + 1)
        if score > best_score:
            best, best_score = i, score
    return best if best_score >= 0.5 else None


def _pick(cands: list[int] | None, kind: str | None) -> int | None:
    """First candidate row of the wanted kind (any kind when ``kind`` is not cpu/gpu)."""
    for i in cands or ():
        if kind not in ("cpu", "gpu") or devices()[i]["kind"] == kind:
            return i
    return None


def _resolve_text(text: str, kind: str | None) -> Resolution | None:
    """exact or fuzzy resolution of one string, or None."""
    exact, _, by_isa = _index()
    opts = _parse_tvm(text)
    hints: dict = {}
    if opts is not None:
        _, _, _, hints = _infer(text, opts)
        tkind = _TVM_BACKENDS.get(opts["backend"])
        for key in ("model", "mcpu", "device_name", "arch"):
            val = opts.get(key, "")
            if not val or (key == "model" and val in ("unknown", "")):
                continue
            i = _pick(exact.get(_compact(val)), None if opts["backend"] == "opencl" else tkind)
            if i is not None:
                return _result(text, "exact", i, hints, f"-{key}")
            i = _fuzzy(val, tkind if opts["backend"] != "opencl" else None)
            if i is not None:
                return _result(text, "fuzzy", i, hints, f"-{key}")
        arch = opts.get("arch", "") or opts.get("mcpu", "")
        if arch.lower() in by_isa:
            return _result(text, "fuzzy", by_isa[arch.lower()][0], hints, "isa")
        return None
    i = _pick(exact.get(_compact(text)), kind)
    if i is not None:
        return _result(text, "exact", i, hints, "name")
    m = re.search(r"\b(gfx[0-9a-f]{3,4}|sm_?\d{2,3})\b", text.lower())
    if m:
        isa = m.group(1).replace("sm", "sm_").replace("sm__", "sm_")
        if isa in by_isa:
            return _result(text, "fuzzy", by_isa[isa][0], hints, "isa")
    i = _fuzzy(text, kind)
    if i is not None:
        return _result(text, "fuzzy", i, hints, "tokens")
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
        if h is not None and (r is None or r.family == h.family):
            return Resolution(query=text, matched="fuzzy", row=h.row, kind=h.kind, vendor=h.vendor,
                              architecture=h.architecture, family=h.family, hints={**h.hints, **(r.hints if r else {})},
                              via="filename")
    if r is not None:
        return r
    probe = f"{text} {hint}".strip()
    kind_i, vendor, family, hints = _infer(probe, _parse_tvm(text))
    if kind in ("cpu", "gpu"):
        kind_i = kind
    arch = family if family != "other" else ""
    return Resolution(query=text, matched="fallback", row=None, kind=kind_i, vendor=vendor,
                      architecture=arch or "unknown", family=family, hints=hints, via="tokens")


def resolve(name: Any, filename_hint: str | None = None, *, kind: str | None = None, warn: bool = True) -> Resolution:
    """Resolve a device string to a catalog row (see module docstring).  Never raises.

    ``filename_hint`` (e.g. ``"MI250X.json.gz"``) is consulted when ``name`` is empty or not
    an exact match; ``kind`` (``cpu``/``gpu``) restricts the candidate rows.  A ``fallback``
    result issues a ``UserWarning`` unless ``warn`` is False.
    """
    try:
        text = "" if name is None else str(name)
        res = _resolve_cached(text, str(filename_hint or ""), str(kind or ""))
    except Exception as e:  # noqa: BLE001 - resolution must never crash a caller
        res = Resolution(query=str(name), matched="fallback", row=None, kind="other", vendor="other",
                         architecture="unknown", family="other", hints={}, via=f"error: {e}")
    if res.matched == "fallback" and warn:
        warnings.warn(f"device {res.query!r} is not in the hardware catalog; embedding it from its tokens "
                      f"(kind={res.kind}, vendor={res.vendor}, family={res.family})", UserWarning, stacklevel=2)
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
