"""Feature vectors of targets (hardware) and workloads, with a fixed, documented layout.

``FEATURE_VERSION`` names the layout below; derived data built with another version is
rebuilt.  Both vectors are float32 and have fixed lengths ``HW_DIM`` and ``WL_DIM``.

Hardware vector (``hardware_vector(target)``, ``HW_DIM`` = 3 + 13 + 27 + 16 = 59)
------------------------------------------------------------------------------------
====== ===================================================================================
slots  meaning
====== ===================================================================================
0-2    kind one-hot: ``HW_KINDS`` (cpu, gpu, other)
3-15   vendor one-hot: ``HW_VENDORS`` (x 0.7)
16-42  architecture-family one-hot: ``HW_FAMILIES`` (kepler ... arm-neoverse, other)
43-58  log-scaled, centred magnitudes ``HW_NUMERIC``: ``2 log2(1 + x) / log2(1 + ref) - 1``
       with the fixed reference ``ref`` beside each name (typical values lie in [-1, 1];
       centring spreads cosines between unlike devices); a missing value is 0.  Units: MHz, bits, KiB, GB/s, GB, GFLOP/s, W; ``flops_per_byte`` =
       fp32 GFLOP/s / (GB/s).  ``vector_bits`` is the *effective* SIMD width (what the
       target's -march level allows for local presets; warp size x 32 for GPUs).
       ``threads`` is the parallelism the target uses (a ``-t1`` preset has 1) and
       ``fp32_gflops`` is scaled to it.
====== ===================================================================================

Where the values come from: a local preset (``tunedb.index.hardware.localcpu``) is resolved to its catalog
CPU (by model name, else CPUID and L3 size) and its own fields (cores, threads, effective
vector width, caches) override the row; any other target dict is resolved through the
strings it carries (``device_name``, ``device``, ``model``, ``name``, ``target``, a TVM
target string, MetaSchedule's ``{"kind": "llvm", "mcpu": ...}``) and numeric fields it
states (``threads``/``num-cores``, ``cores``, ``vector_bits``, cache sizes) override the
row.  A device the catalog lacks is embedded by what its name says (kind, vendor, family;
a variant of a row takes that row's numbers, an inferred device those of its family's rows
nearest in model number, else the family's medians; see ``hardware_profile``), and a
``UserWarning`` says so.

Workload vector (``workload_vector(workload)``, ``WL_DIM`` = 20 + 16 + 8 + 12 + 4 = 60)
------------------------------------------------------------------------------------
====== ===================================================================================
0-19   family one-hot over ``WL_FAMILIES`` (canonicalised: ``conv2d_nchw.cuda`` ->
       conv2d, ``conv2d_nchw_winograd.cuda`` -> conv2d_winograd, ...)
20-35  hashed family bucket for families not in ``WL_FAMILIES`` (BLAKE2b of the name mod 16,
       stable across processes)
36-43  hashed bucket of the kernel/task name when the workload names one (x 0.5)
44-55  shape parameters, ``(sign(v) log2(1 + |v|) - 8) / 8`` (0 when absent or 0), in the
       family's canonical slot order (``SHAPE_SLOTS``), then the remaining numeric leaves
       sorted by key path
56     FLOPs ``(log2(1 + flops) - 30) / 20`` (given ``flops`` key, else the family's
       formula, else the product of the shape parameters as a proxy)
57     bytes moved ``(log2(1 + bytes) - 22) / 16`` (inputs + outputs at ``dtype`` size)
58     arithmetic intensity ``(log2(1 + flops / bytes) - 4) / 6``
59     dtype size ``(bytes - 4) / 4``
====== ===================================================================================
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import statistics
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from tunedb.index.hardware import catalog
from tunedb.index.model.keys import canonical_json

FEATURE_VERSION = 1

HW_KINDS = ("cpu", "gpu", "other")
HW_VENDORS = ("nvidia", "amd", "intel", "arm", "qualcomm", "apple", "broadcom", "rockchip", "hisilicon", "xilinx",
              "amazon", "ampere", "other")
HW_FAMILIES = ("kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell", "gcn",
               "cdna", "rdna", "mali", "adreno", "intel-haswell", "intel-skylake", "intel-skylake-sp",
               "intel-icelake-sp", "intel-sapphire-rapids", "intel-alder-lake", "amd-zen2", "amd-zen3", "amd-zen4",
               "arm-cortex-a-little", "arm-cortex-a-big", "arm-neoverse", "other")
# (name, reference value for the log scale)
HW_NUMERIC = (("compute_units", 512), ("cores", 32768), ("threads", 256), ("clock_mhz", 6000), ("vector_bits", 2048),
              ("warp_size", 64), ("l1_kb", 256), ("l2_kb", 262144), ("l3_kb", 524288), ("shared_kb", 256),
              ("registers_kb", 512), ("mem_bw_gbs", 8192), ("mem_gb", 256), ("fp32_gflops", 131072),
              ("tdp_w", 1024), ("flops_per_byte", 256))
HW_VENDOR_WEIGHT = 0.7
HW_DIM = len(HW_KINDS) + len(HW_VENDORS) + len(HW_FAMILIES) + len(HW_NUMERIC)

WL_FAMILIES = ("matmul", "batch_matmul", "dense", "gemv", "conv1d", "conv2d", "conv2d_winograd", "conv3d",
               "depthwise_conv2d", "conv2d_transpose", "conv1d_transpose", "pool", "reduce", "softmax",
               "elementwise", "transpose", "convolution", "dedispersion", "stencil", "other")
WL_FAMILY_BUCKETS = 16
WL_KERNEL_BUCKETS = 8
WL_SHAPE_SLOTS = 12
WL_FAMILY_WEIGHT = 1.0
WL_KERNEL_WEIGHT = 0.5
WL_DIM = len(WL_FAMILIES) + WL_FAMILY_BUCKETS + WL_KERNEL_BUCKETS + WL_SHAPE_SLOTS + 4
DIM = HW_DIM + WL_DIM

# canonical slot order per family: each slot lists the key names that fill it
SHAPE_SLOTS: dict[str, tuple[tuple[str, ...], ...]] = {
    "matmul": (("M", "m"), ("N", "n"), ("K", "k"), ("B", "batch", "b")),
    "batch_matmul": (("B", "batch", "b"), ("M", "m"), ("N", "n"), ("K", "k")),
    "dense": (("M", "batch", "m"), ("K", "in_features", "in_dim", "k"), ("N", "out_features", "out_dim", "n")),
    "gemv": (("M", "m"), ("N", "n")),
    "conv2d": (("N", "batch", "n"), ("C", "in_channels", "c", "ic"), ("H", "height", "h"), ("W", "width", "w"),
               ("K", "out_channels", "F", "oc", "k"), ("R", "kernel_h", "kh", "r"), ("S", "kernel_w", "kw", "s"),
               ("stride",), ("pad", "padding"), ("dilation",), ("groups",)),
    "convolution": (("image_width", "width", "w"), ("image_height", "height", "h"), ("filter_width", "fw"),
                    ("filter_height", "fh")),
    "dedispersion": (("nr_samples", "samples"), ("nr_dms", "dms"), ("nr_channels", "channels")),
}
for _f in ("conv2d_winograd", "depthwise_conv2d", "conv2d_transpose", "conv3d", "conv1d", "conv1d_transpose"):
    SHAPE_SLOTS[_f] = SHAPE_SLOTS["conv2d"]

_DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
                "int8": 1, "uint8": 1, "int4": 0.5, "float8": 1, "fp32": 4, "fp16": 2, "fp64": 8, "bf16": 2,
                "double": 8, "float": 4, "half": 2}
_KERNEL_KEYS = ("kernel", "kernel_name", "task_name", "task", "op", "name", "template")


# ------------------------------------------------------------------------ helpers
def _stable_bucket(text: str, n: int) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little") % n


def _log_scaled(x: float | None, ref: float) -> float:
    if x is None or not math.isfinite(x) or x <= 0:
        return 0.0
    return math.log2(1.0 + x) / math.log2(1.0 + ref)


def normalized(v: np.ndarray) -> np.ndarray:
    """Copy of ``v`` (float32, C-contiguous) scaled to unit L2 norm (zero stays zero)."""
    out = np.ascontiguousarray(v, dtype=np.float32).copy()
    n = float(np.linalg.norm(out))
    if n > 0:
        out /= n
    return out


# ----------------------------------------------------------------- hardware side
def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


@functools.lru_cache(maxsize=64)
def _family_medians(key: str) -> dict[str, float | None]:
    """Median numeric values of catalog rows of one family (``family:<f>``) or kind (``kind:<k>``)."""
    what, _, val = key.partition(":")
    rows = [r for r in catalog.devices() if r[what] == val]
    out: dict[str, float | None] = {}
    for name, _ in HW_NUMERIC:
        col = "boost_mhz" if name == "clock_mhz" else name
        vals = [r[col] for r in rows if col in r and r[col] is not None]
        out[name] = statistics.median(vals) if vals else None
    return out


def _row_values(row: Mapping[str, Any]) -> dict[str, float | None]:
    vals: dict[str, float | None] = {name: row.get(name) for name, _ in HW_NUMERIC}
    vals["clock_mhz"] = row.get("boost_mhz") or row.get("base_mhz")
    return vals


def _candidate_strings(target: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for key in ("device_name", "device", "model", "name", "gpu", "cpu", "target", "string", "tvm_target",
                "model_name", "arch"):
        v = target.get(key)
        if isinstance(v, str) and v.strip():
            out.append(v.strip())
    kind = target.get("kind")
    if isinstance(kind, str) and kind in ("llvm", "cuda", "rocm", "opencl", "nvptx", "vulkan", "metal"):
        opts = [kind]
        for k in ("device", "model", "mcpu", "mtriple", "mattr", "arch", "num-cores"):
            v = target.get(k)
            if isinstance(v, list):
                v = ",".join(str(x) for x in v)
            if v not in (None, ""):
                opts.append(f"-{k}={v}")
        out.insert(0, " ".join(opts))
    nested = target.get("target")
    if isinstance(nested, Mapping):
        out.extend(_candidate_strings(nested))
    return out


def _is_local_preset(target: Mapping[str, Any]) -> bool:
    return (target.get("kind") == "cpu" and isinstance(target.get("march"), str)
            and isinstance(target.get("vector_bits"), (int, float)))


def _sibling_values(family: str, vendor: str, kind: str, number: float | None) -> dict[str, float | None]:
    """Numbers for a device the catalog lacks, from what its name says: the rows of its family
    (and vendor and kind) whose model numbers bracket the name's (``series_number``), their
    values interpolated geometrically by model number (the nearest row's outside the range);
    the family's medians when the name gives no comparable number."""
    rows = [r for r in catalog.devices() if r["family"] == family and r["kind"] == kind
            and (vendor in ("", "other") or r["vendor"] == vendor)]
    fam = _family_medians(f"family:{family}") if family != "other" else {}
    if number is None or not rows:
        return dict(fam)
    digits = len(str(int(number)))
    numbered = sorted(((n, r) for r in rows if (n := catalog.series_number(r["name"])) is not None
                       and len(str(int(n))) == digits), key=lambda x: x[0])
    if not numbered:
        return dict(fam)
    lo = max((x for x in numbered if x[0] <= number), key=lambda x: x[0], default=None)
    hi = min((x for x in numbered if x[0] >= number), key=lambda x: x[0], default=None)
    out: dict[str, float | None] = {}
    for name, _ in HW_NUMERIC:
        pair = [_row_values(x[1]).get(name) for x in (lo, hi) if x is not None]
        vals = [v for v in pair if v is not None and v > 0]
        if len(vals) == 2 and lo is not None and hi is not None and hi[0] > lo[0]:
            t = (number - lo[0]) / (hi[0] - lo[0])
            out[name] = math.exp((1 - t) * math.log(vals[0]) + t * math.log(vals[1]))
        elif vals:
            out[name] = vals[0] if lo is not None and pair[0] is not None else vals[-1]
        else:
            out[name] = fam.get(name)
    return out


def hardware_profile(target: Mapping[str, Any], *, warn: bool = True) -> dict:
    """The resolved description behind ``hardware_vector``: ``kind``, ``vendor``, ``family``,
    ``architecture``, ``matched`` (exact/fuzzy/fallback), ``device`` (catalog name or None),
    ``inferred`` and ``variant_of`` (see ``catalog.Resolution``) and ``values`` (the
    ``HW_NUMERIC`` magnitudes, None when unknown).

    A device the catalog lacks is embedded by what its name says: a variant of a row
    (``variant_of``) takes that row's numbers except the ones that differ and the name does
    not state (memory size); an inferred device takes its family's rows nearest in model
    number (``_sibling_values``); otherwise the family's and then the kind's medians.  So two
    different unknown names of another vendor, family or model number embed differently, and
    one name always embeds the same."""
    if not isinstance(target, Mapping):
        raise TypeError(f"target must be a dict, not {type(target).__name__}")
    if _is_local_preset(target):
        res = catalog.resolve_cpu(str(target.get("model", "")), l3_kb=_num(target.get("l3_kb")),
                                  cpuid=catalog.local_cpuid() if _is_this_machine(target) else "")
        if res.row is None:
            kind_v = (target.get("vendor") or "other").lower()
            res = catalog.Resolution(query=str(target.get("model", "")), matched="fallback", row=None, kind="cpu",
                                     vendor=kind_v if kind_v in HW_VENDORS else "other", architecture="unknown",
                                     family="other", hints={}, via="preset")
    else:
        strings = _candidate_strings(target)
        kind_hint = target.get("kind") if target.get("kind") in ("cpu", "gpu") else None
        res = None
        guess = None  # the first flagged fallback that says something: a variant, else an inferred device
        for s in strings:
            r = catalog.resolve(s, kind=kind_hint, warn=False)
            if r.matched == "exact":
                res = r
                break
            if r.matched == "fuzzy" and res is None:
                res = r
            if r.row is None and (r.variant_of and not (guess and guess.variant_of)
                                  or r.inferred and guess is None):
                guess = r
        if res is None:
            res = guess or catalog.resolve(" ".join(strings), kind=kind_hint, warn=False)
            if warn:
                warnings.warn(f"target {canonical_json(dict(target))[:200]} matches no hardware catalog device; "
                              f"embedding it from its tokens (kind={res.kind}, vendor={res.vendor}, "
                              f"family={res.family})", UserWarning, stacklevel=3)
    base = catalog.find(res.variant_of) if res.row is None and res.variant_of else None
    if res.row is not None:
        vals = _row_values(res.row)
    elif base is not None:
        vals = _row_values(base)
        if "mem_gb" in res.differs:
            vals["mem_gb"] = None
    else:
        number = catalog.series_number(res.query) if res.inferred else None
        fam = _sibling_values(res.family, res.vendor, res.kind, number) if res.family != "other" else {}
        kin = _family_medians(f"kind:{res.kind}") if res.kind in ("cpu", "gpu") else {}
        vals = {name: (fam.get(name) if fam.get(name) is not None else kin.get(name)) for name, _ in HW_NUMERIC}
    # numbers the target states itself override the catalog
    row_threads = vals.get("threads") or vals.get("cores")
    over = {"cores": ("cores",), "threads": ("threads", "num-cores", "num_cores", "num_threads"),
            "vector_bits": ("vector_bits",), "l1_kb": ("l1d_kb", "l1_kb"), "l3_kb": ("l3_kb",),
            "clock_mhz": ("clock_mhz", "boost_mhz"), "compute_units": ("compute_units", "sms", "cus"),
            "mem_bw_gbs": ("mem_bw_gbs",), "mem_gb": ("mem_gb",), "warp_size": ("warp_size",)}
    for name, keys in over.items():
        for k in keys:
            v = _num(target.get(k))
            if v is not None and v > 0:
                vals[name] = v
                break
    for k, v in res.hints.items():
        if k in vals and _num(target.get(k)) is None:
            vals[k] = float(v)
    l2 = _num(target.get("l2_kb"))
    if _is_local_preset(target) and vals.get("cores"):
        vals["compute_units"] = vals["cores"]
    if l2:
        cores = vals.get("cores") or 1
        vals["l2_kb"] = l2 * cores if res.kind == "cpu" and _is_local_preset(target) else l2
    if res.kind == "cpu":
        threads = vals.get("threads")
        if _is_local_preset(target) and threads and vals.get("vector_bits") and vals.get("clock_mhz"):
            # peak fp32 of the threads used at the effective width: 2 FMA pipes x 2 flops x lanes x GHz
            base = (res.row or {}).get("base_mhz") or vals["clock_mhz"]
            vals["fp32_gflops"] = threads * (vals["vector_bits"] / 32.0) * 4.0 * base / 1000.0
            if vals.get("mem_bw_gbs") and row_threads:
                vals["mem_bw_gbs"] = vals["mem_bw_gbs"] * min(1.0, max(threads, 1) / row_threads * 4)
        elif threads and row_threads and vals.get("fp32_gflops") and threads < row_threads:
            vals["fp32_gflops"] = vals["fp32_gflops"] * threads / row_threads
    if vals.get("fp32_gflops") and vals.get("mem_bw_gbs"):
        vals["flops_per_byte"] = vals["fp32_gflops"] / vals["mem_bw_gbs"]
    else:
        vals["flops_per_byte"] = None
    vendor = res.vendor if res.vendor in HW_VENDORS else "other"
    family = res.family if res.family in HW_FAMILIES else "other"
    kind = res.kind if res.kind in HW_KINDS else "other"
    return {"kind": kind, "vendor": vendor, "family": family, "architecture": res.architecture,
            "matched": res.matched, "device": res.row["name"] if res.row else None, "inferred": res.inferred,
            "variant_of": res.variant_of or None, "values": vals}


def _is_this_machine(target: Mapping[str, Any]) -> bool:
    from tunedb.index.hardware.localcpu import cpu_info

    try:
        return str(target.get("model", "")) == str(cpu_info().get("model", ""))
    except Exception:  # noqa: BLE001 - odd /proc content must not break embedding
        return False


@functools.lru_cache(maxsize=4096)
def _hardware_vector_cached(target_json: str) -> np.ndarray:
    target = json.loads(target_json)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prof = hardware_profile(target, warn=False)
    v = np.zeros(HW_DIM, dtype=np.float32)
    o = 0
    v[o + HW_KINDS.index(prof["kind"])] = 1.0
    o += len(HW_KINDS)
    v[o + HW_VENDORS.index(prof["vendor"])] = HW_VENDOR_WEIGHT
    o += len(HW_VENDORS)
    v[o + HW_FAMILIES.index(prof["family"])] = 1.0
    o += len(HW_FAMILIES)
    for j, (name, ref) in enumerate(HW_NUMERIC):
        x = prof["values"].get(name)
        v[o + j] = 0.0 if x is None or not x > 0 else 2.0 * _log_scaled(x, ref) - 1.0
    v.setflags(write=False)
    return v


def hardware_vector(target: Mapping[str, Any]) -> np.ndarray:
    """The ``HW_DIM`` float32 hardware vector of a target dict (layout in the module docstring).
    Never raises for a dict; warns (``UserWarning``) when the device is not in the catalog -- but
    not for a local CPU preset, which describes itself (cores, caches, vector width: this host's
    own description), whatever CPU model name the catalog lacks."""
    tj = canonical_json(dict(target))
    v = _hardware_vector_cached(tj)
    if tj not in _WARNED and not _is_local_preset(target):
        _WARNED.add(tj)
        p = hardware_profile(target, warn=False)
        if p["matched"] == "fallback":
            warnings.warn(f"target {tj[:200]} matches no hardware catalog device; embedding it from its tokens "
                          f"(kind={p['kind']}, vendor={p['vendor']}, family={p['family']})", UserWarning,
                          stacklevel=2)
    return v.copy()


_WARNED: set[str] = set()


# ----------------------------------------------------------------- workload side
def canonical_family(family: str) -> str:
    """Map a family or kernel name (``conv2d_nchw.cuda``, ``dense_pack.x86``) to ``WL_FAMILIES``,
    or return the lower-cased name (unknown families are hashed)."""
    f = str(family).lower().split(".")[0]
    if f in WL_FAMILIES:
        return f
    rules = (("depthwise_conv2d", "depthwise_conv2d"), ("conv2d_transpose", "conv2d_transpose"),
             ("conv1d_transpose", "conv1d_transpose"), ("conv3d", "conv3d"), ("conv1d", "conv1d"),
             ("batch_matmul", "batch_matmul"), ("gemv", "gemv"), ("matmul", "matmul"), ("gemm", "matmul"),
             ("dense", "dense"), ("pool", "pool"), ("softmax", "softmax"), ("reduce", "reduce"),
             ("dedisp", "dedispersion"), ("stencil", "stencil"), ("transpose", "transpose"))
    if f.startswith("conv2d") or f.startswith("group_conv2d"):
        return "conv2d_winograd" if "winograd" in f else "conv2d"
    for prefix, fam in rules:
        if f.startswith(prefix):
            return fam
    if f.startswith("convolution"):
        return "convolution"
    return f


def _dtype_bytes(workload: Mapping[str, Any]) -> float:
    cands = [workload.get(k) for k in ("dtype", "in_dtype", "data_type", "precision")]
    text = canonical_json(workload).lower()
    for c in cands:
        if isinstance(c, str) and c.lower() in _DTYPE_BYTES:
            return float(_DTYPE_BYTES[c.lower()])
    m = re.search(r"\b(float64|float32|float16|bfloat16|int64|int32|int16|int8|uint8)\b", text)
    return float(_DTYPE_BYTES[m.group(1)]) if m else 4.0


def _numeric_leaves(value: Any, path: str, out: list[tuple[str, float]], tensors: list[list[float]]) -> None:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, (int, float)):
        if math.isfinite(value):
            out.append((path, float(value)))
        return
    if isinstance(value, Mapping):
        for k in sorted(value):
            _numeric_leaves(value[k], f"{path}.{k}" if path else str(k), out, tensors)
        return
    if isinstance(value, (list, tuple)):
        if len(value) >= 2 and value[0] == "TENSOR" and isinstance(value[1], (list, tuple)):
            shape = [float(x) for x in value[1] if isinstance(x, (int, float)) and not isinstance(x, bool)]
            tensors.append(shape)
        for i, x in enumerate(value):
            _numeric_leaves(x, f"{path}[{i}]", out, tensors)


def _shape(workload: Mapping[str, Any], fam: str) -> tuple[list[float], dict[str, float], list[list[float]]]:
    """Ordered shape values, the named canonical values, and TVM-style tensor shapes."""
    named: dict[str, float] = {}
    used: set[str] = set()
    ordered: list[float] = []
    for slot in SHAPE_SLOTS.get(fam, ()):
        val = None
        for key in slot:
            v = workload.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                val = float(v)
                used.add(key)
                break
            if isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, float)) for x in v):
                val = float(v[0])
                used.add(key)
                break
        named[slot[0]] = val if val is not None else float("nan")
        ordered.append(val if val is not None else 0.0)
    leaves: list[tuple[str, float]] = []
    tensors: list[list[float]] = []
    rest = {k: v for k, v in workload.items() if k not in used and k != "family" and k != "flops"}
    _numeric_leaves(rest, "", leaves, tensors)
    if SHAPE_SLOTS.get(fam) is SHAPE_SLOTS["conv2d"] and not used and len(tensors) >= 2 \
            and len(tensors[0]) == 4 and len(tensors[1]) == 4:
        # TVM-style args: data NCHW, kernel KCRS (depthwise: C x multiplier x R x S)
        (n, c, h, w), (k, _, r, s) = tensors[0], tensors[1]
        if fam == "depthwise_conv2d":
            k = c * tensors[1][1]
        vals = {"N": n, "C": c, "H": h, "W": w, "K": k, "R": r, "S": s}
        for j, slot in enumerate(SHAPE_SLOTS[fam]):
            if slot[0] in vals:
                named[slot[0]] = float(vals[slot[0]])
                ordered[j] = float(vals[slot[0]])
        used.add("args")
    if not used:
        ordered = []  # none of the family's canonical keys: the numeric leaves fill every slot
    ordered.extend(v for _, v in leaves)
    return ordered, named, tensors


def _flops_bytes(workload: Mapping[str, Any], fam: str, shape: list[float], named: dict[str, float],
                 tensors: list[list[float]], dsize: float) -> tuple[float, float]:
    def g(name: str, default: float = float("nan")) -> float:
        v = named.get(name, float("nan"))
        return default if math.isnan(v) else v

    flops = _num(workload.get("flops"))
    nbytes = _num(workload.get("bytes"))
    if fam in ("matmul", "batch_matmul") and not any(math.isnan(g(x)) for x in ("M", "N", "K")):
        b = g("B", 1.0)
        flops = flops or 2.0 * b * g("M") * g("N") * g("K")
        nbytes = nbytes or dsize * b * (g("M") * g("K") + g("K") * g("N") + g("M") * g("N"))
    elif fam == "dense" and not any(math.isnan(g(x)) for x in ("M", "K", "N")):
        flops = flops or 2.0 * g("M") * g("N") * g("K")
        nbytes = nbytes or dsize * (g("M") * g("K") + g("K") * g("N") + g("M") * g("N"))
    elif fam in SHAPE_SLOTS and SHAPE_SLOTS[fam] is SHAPE_SLOTS["conv2d"] and not any(
            math.isnan(g(x)) for x in ("C", "H", "W", "K", "R", "S")):
        n, st, grp = g("N", 1.0), max(g("stride", 1.0), 1.0), max(g("groups", 1.0), 1.0)
        p, q = g("H") / st, g("W") / st
        flops = flops or 2.0 * n * g("K") * p * q * g("C") * g("R") * g("S") / grp
        nbytes = nbytes or dsize * (n * g("C") * g("H") * g("W") + g("K") * g("C") * g("R") * g("S") / grp
                                    + n * g("K") * p * q)
    if tensors:
        tb = dsize * sum(math.prod(t) for t in tensors if t)
        nbytes = nbytes or tb
        if flops is None and len(tensors) >= 2:
            # two-operand kernels: product of the distinct extents is a volume proxy
            flops = 2.0 * math.prod(tensors[0]) * (math.prod(tensors[1]) ** 0.5)
    pos = [abs(v) for v in shape if v and math.isfinite(v)]
    if flops is None:
        flops = 2.0 * math.prod(pos[:8]) if pos else 0.0
    if nbytes is None:
        nbytes = dsize * (flops ** (2.0 / 3.0)) if flops else 0.0
    return float(flops), float(nbytes)


def workload_features(workload: Mapping[str, Any]) -> dict:
    """Readable pieces of ``workload_vector``: canonical family, shape slots, flops, bytes,
    arithmetic intensity (flop/byte) and dtype size (bytes)."""
    if not isinstance(workload, Mapping) or not isinstance(workload.get("family"), str):
        raise ValueError("workload must be a dict with a string 'family'")
    fam = canonical_family(workload["family"])
    shape, named, tensors = _shape(workload, fam)
    dsize = _dtype_bytes(workload)
    flops, nbytes = _flops_bytes(workload, fam, shape, named, tensors, dsize)
    kernel = ""
    for k in _KERNEL_KEYS:
        v = workload.get(k)
        if isinstance(v, str) and v:
            kernel = v
            break
    if not kernel and "." in workload["family"]:
        kernel = workload["family"]
    return {"family": fam, "kernel": kernel, "shape": shape[:WL_SHAPE_SLOTS], "flops": flops, "bytes": nbytes,
            "intensity": flops / nbytes if nbytes > 0 else 0.0, "dtype_bytes": dsize}


@functools.lru_cache(maxsize=65536)
def _workload_vector_cached(workload_json: str) -> np.ndarray:
    f = workload_features(json.loads(workload_json))
    v = np.zeros(WL_DIM, dtype=np.float32)
    o = 0
    if f["family"] in WL_FAMILIES:
        v[o + WL_FAMILIES.index(f["family"])] = WL_FAMILY_WEIGHT
    o += len(WL_FAMILIES)
    if f["family"] not in WL_FAMILIES:
        v[o + _stable_bucket(f["family"], WL_FAMILY_BUCKETS)] = WL_FAMILY_WEIGHT
    o += WL_FAMILY_BUCKETS
    if f["kernel"]:
        v[o + _stable_bucket(f["kernel"].lower(), WL_KERNEL_BUCKETS)] = WL_KERNEL_WEIGHT
    o += WL_KERNEL_BUCKETS
    for j, x in enumerate(f["shape"]):
        v[o + j] = (math.copysign(math.log2(1.0 + abs(x)), x) - 8.0) / 8.0 if x else 0.0
    o += WL_SHAPE_SLOTS
    v[o] = (math.log2(1.0 + f["flops"]) - 30.0) / 20.0
    v[o + 1] = (math.log2(1.0 + f["bytes"]) - 22.0) / 16.0
    v[o + 2] = (math.log2(1.0 + f["intensity"]) - 4.0) / 6.0
    v[o + 3] = (f["dtype_bytes"] - 4.0) / 4.0
    v.setflags(write=False)
    return v


def workload_vector(workload: Mapping[str, Any]) -> np.ndarray:
    """The ``WL_DIM`` float32 workload vector (layout in the module docstring).
    Raises ValueError when ``workload`` has no string ``family``."""
    if not isinstance(workload, Mapping) or not isinstance(workload.get("family"), str):
        raise ValueError("workload must be a dict with a string 'family'")
    return _workload_vector_cached(canonical_json(dict(workload))).copy()


# ----------------------------------------------------------------- combined vector
def entry_vector(hw: np.ndarray, wl: np.ndarray) -> np.ndarray:
    """Stored vector of an entry: ``concat(hw/|hw|, wl/|wl|) / sqrt(2)`` (unit length, float32).
    Its inner product with ``query_vector(q_hw, q_wl, w_hw, w_wl)`` is
    ``w_hw * cos(hw) + w_wl * cos(wl)``."""
    return (np.concatenate([normalized(hw), normalized(wl)]) / np.float32(math.sqrt(2.0))).astype(np.float32)


def query_vector(hw: np.ndarray, wl: np.ndarray, w_hw: float = 0.5, w_wl: float = 0.5) -> np.ndarray:
    """Query vector whose inner product with an ``entry_vector`` is the weighted cosine
    ``w_hw * cos_hw + w_wl * cos_wl`` (with the default 0.5/0.5 exactly the cosine of the
    two entry vectors)."""
    s = math.sqrt(2.0)
    return np.concatenate([normalized(hw) * np.float32(s * w_hw), normalized(wl) * np.float32(s * w_wl)]).astype(
        np.float32)

