"""What this machine has: its GPUs (NVIDIA through NVML, AMD through AMD SMI or sysfs) and its CPU
(archspec), each GPU resolved through the hardware catalog.

Nothing here needs a GPU, a driver or an optional library: a source that is missing or fails
contributes no GPUs and a reason (``probe()["reasons"]``), never an exception.

GPU dicts (:func:`probe_gpus`) share these keys (``None`` where the source does not say):

* ``vendor`` (``nvidia``/``amd``), ``index`` (per vendor), ``source`` (``nvml``, ``amdsmi``,
  ``sysfs``), ``name`` (what the driver calls it), ``pci_id`` (``"0x10de:0x2330"``), ``bus_id``;
* ``architecture`` (NVML's architecture name, else the catalog's), ``compute_capability``
  (NVIDIA, ``"9.0"``), ``isa`` (catalog: ``sm_90``, ``gfx1030``), ``compute_units`` (SMs on
  NVIDIA, CUs on AMD; from the driver, else the catalog);
* ``clock_max_mhz``/``clock_mhz`` (graphics/SM clock, MHz), ``mem_clock_max_mhz`` (MHz),
  ``memory_bytes`` (device memory, bytes), ``memory_bus_bits``, ``bandwidth_gbs`` (GB/s = 1e9
  bytes/s) with ``bandwidth_source`` (``nvml``: computed, see :func:`nvml_bandwidth_gbs`;
  ``catalog``: the spec-sheet value of the resolved row);
* ``driver`` (version text), ``busy_percent`` (AMD sysfs), ``catalog`` (the resolution:
  ``{"name", "matched", "family", "isa", "compute_units", "mem_bw_gbs", "mem_gb", "boost_mhz",
  "fp32_gflops"}``, ``matched`` = ``exact``/``fuzzy``/``fallback`` as in
  ``tunedb.index.hardware.catalog.resolve``).

:func:`probe_cpu` names the CPU's microarchitecture as archspec does (``archspec.cpu.host()``),
the name the local ``cpu-<uarch>`` presets carry in their ``uarch`` field.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

AMD_VENDOR = "0x1002"

#: PCI device ids of some AMD GPUs (pci.ids names) and the catalog query that resolves them,
#: for sysfs cards without ``product_name``
AMD_PCI_IDS: dict[str, tuple[str, str]] = {
    "0x73bf": ("Navi 21 [Radeon RX 6800/6800 XT / 6900 XT]", "Navi 21"),
    "0x73a3": ("Navi 21 GL-XL [Radeon PRO W6800]", "Radeon PRO W6800"),
    "0x73e3": ("Navi 23 WKS-XL [Radeon PRO W6600]", "Radeon PRO W6600"),
    "0x744c": ("Navi 31 [Radeon RX 7900 XT/7900 XTX]", "Radeon RX 7900 XTX"),
    "0x7448": ("Navi 31 [Radeon Pro W7900]", "Radeon PRO W7900"),
    "0x745e": ("Navi 31 [Radeon Pro W7800]", "Radeon PRO W7800"),
    "0x738c": ("Arcturus GL-XL [Instinct MI100]", "Instinct MI100"),
    "0x7408": ("Aldebaran/MI200 [Instinct MI250X]", "Instinct MI250X"),
    "0x740c": ("Aldebaran/MI200 [Instinct MI250X/MI250]", "Instinct MI250X"),
    "0x740f": ("Aldebaran/MI200 [Instinct MI210]", "Instinct MI210"),
    "0x74a1": ("Aqua Vanjaram [Instinct MI300X]", "Instinct MI300X"),
}

_NVML_ARCH = {2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere", 8: "Ada",
              9: "Hopper", 10: "Blackwell"}
_DPM_LINE = re.compile(r"^\s*(\d+):\s*(\d+)\s*mhz\s*(\*)?\s*$", re.I)
_CARD = re.compile(r"^card\d+$")


# ------------------------------------------------------------------------------------ helpers
def nvml_bandwidth_gbs(bus_bits: int | None, mem_clock_mhz: float | None) -> float | None:
    """Peak memory bandwidth in GB/s (1e9 bytes/s) from NVML's memory bus width (bits) and
    maximum memory clock (MHz): ``bus_bits / 8 * clock_MHz * 1e6 * 2 / 1e9`` (bytes per
    transfer times two transfers per clock, DDR).  E.g. H100 SXM: 5120 bits, 2619 MHz ->
    3352 GB/s.  None when either is unknown or not positive.  GDDR6X boards report an
    effective memory clock, so the value can exceed the spec sheet by a few percent."""
    if not bus_bits or not mem_clock_mhz or bus_bits <= 0 or mem_clock_mhz <= 0:
        return None
    return round(bus_bits / 8 * mem_clock_mhz * 2 * 1e6 / 1e9, 1)


def _catalog(name: str, hint: str = "") -> dict:
    """The catalog's resolution of a GPU name (``hint``: an alternative query when ``name``
    does not resolve)."""
    from tunedb.index.hardware import catalog

    res = catalog.resolve(name, kind="gpu", warn=False)
    if res.row is None and hint:
        alt = catalog.resolve(hint, kind="gpu", warn=False)
        if alt.row is not None:
            res = alt
    row = res.row or {}
    return {"name": res.name, "matched": res.matched, "family": res.family,
            "architecture": res.architecture if res.row is not None else None, "isa": row.get("isa") or None,
            **{k: row.get(k) for k in ("compute_units", "mem_bw_gbs", "mem_gb", "boost_mhz", "fp32_gflops")}}


def _finish(gpu: dict, hint: str = "") -> dict:
    """Fill catalog fields where the driver said nothing; the bandwidth from the catalog
    when it could not be computed."""
    cat = _catalog(gpu.get("name") or "", hint)
    gpu["catalog"] = cat
    if not gpu.get("architecture"):
        gpu["architecture"] = cat.get("architecture")
    gpu.setdefault("isa", None)
    gpu["isa"] = gpu["isa"] or cat.get("isa")
    if not gpu.get("compute_units") and cat.get("compute_units"):
        gpu["compute_units"] = int(cat["compute_units"])
    if gpu.get("bandwidth_gbs") is None and cat.get("mem_bw_gbs"):
        gpu["bandwidth_gbs"] = float(cat["mem_bw_gbs"])
        gpu["bandwidth_source"] = "catalog"
    for k in ("pci_id", "bus_id", "compute_capability", "clock_max_mhz", "clock_mhz", "mem_clock_max_mhz",
              "memory_bytes", "memory_bus_bits", "bandwidth_gbs", "bandwidth_source", "driver", "busy_percent"):
        gpu.setdefault(k, None)
    return gpu


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


# ------------------------------------------------------------------------------------- NVIDIA
def _asker(lib: Any) -> Callable[..., Any]:
    """``ask(fn, *args)``: ``lib.fn(*args)``, or None when that call fails (a query this GPU or
    driver does not support must not hide the rest of the description)."""
    def ask(fn: str, *a: Any) -> Any:
        try:
            return getattr(lib, fn)(*a)
        except Exception:  # noqa: BLE001 - not supported on this GPU/driver
            return None

    return ask


def probe_nvidia(reasons: dict | None = None) -> list[dict]:
    """NVIDIA GPUs through NVML (``pynvml``, from the optional ``nvidia-ml-py``).  A missing
    library, or ``nvmlInit`` failing (no driver, no device), gives ``[]`` and
    ``reasons["nvml"]``; a query a GPU or driver does not support leaves its field None."""
    reasons = reasons if reasons is not None else {}
    try:
        import pynvml
    except ImportError:
        reasons["nvml"] = "nvidia-ml-py (pynvml) not installed"
        return []
    try:
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        reasons["nvml"] = str(e) or type(e).__name__
        return []
    out: list[dict] = []
    try:
        ask = _asker(pynvml)
        driver = ask("nvmlSystemGetDriverVersion")
        cuda = ask("nvmlSystemGetCudaDriverVersion")
        n = ask("nvmlDeviceGetCount") or 0
        for i in range(n):
            h = ask("nvmlDeviceGetHandleByIndex", i)
            if h is None:
                continue
            cc = ask("nvmlDeviceGetCudaComputeCapability", h)
            pci = ask("nvmlDeviceGetPciInfo", h)
            mem = ask("nvmlDeviceGetMemoryInfo", h)
            attrs = ask("nvmlDeviceGetAttributes_v2", h) or ask("nvmlDeviceGetAttributes", h)
            bus = ask("nvmlDeviceGetMemoryBusWidth", h)
            mclk = ask("nvmlDeviceGetMaxClockInfo", h, pynvml.NVML_CLOCK_MEM)
            arch = ask("nvmlDeviceGetArchitecture", h)
            dev_id = getattr(pci, "pciDeviceId", None) if pci is not None else None
            gpu = {
                "vendor": "nvidia", "index": i, "source": "nvml",
                "name": _text(ask("nvmlDeviceGetName", h) or ""),
                "uuid": _text(ask("nvmlDeviceGetUUID", h) or "") or None,
                "pci_id": f"0x10de:0x{(dev_id >> 16) & 0xFFFF:04x}" if isinstance(dev_id, int) else None,
                "bus_id": _text(getattr(pci, "busId", "")) or None if pci is not None else None,
                "architecture": _NVML_ARCH.get(arch) if isinstance(arch, int) else None,
                "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
                "isa": f"sm_{cc[0]}{cc[1]}" if cc else None,
                "compute_units": getattr(attrs, "multiprocessorCount", None) or None,
                "clock_max_mhz": ask("nvmlDeviceGetMaxClockInfo", h, pynvml.NVML_CLOCK_SM),
                "clock_mhz": ask("nvmlDeviceGetClockInfo", h, pynvml.NVML_CLOCK_SM),
                "mem_clock_max_mhz": mclk,
                "memory_bytes": int(mem.total) if mem is not None else None,
                "memory_bus_bits": bus,
                "driver": _text(driver) if driver else None,
                "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None,
            }
            bw = nvml_bandwidth_gbs(bus, mclk)
            gpu["bandwidth_gbs"] = bw
            gpu["bandwidth_source"] = "nvml" if bw is not None else None
            out.append(_finish(gpu))
        if not out:
            reasons["nvml"] = "NVML found no GPU"
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    return out


# ---------------------------------------------------------------------------------------- AMD
def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def parse_dpm(text: str | None) -> tuple[int | None, int | None]:
    """(max MHz, current MHz) of an amdgpu ``pp_dpm_sclk``/``pp_dpm_mclk`` text, whose lines
    are ``"<level>: <MHz>Mhz"`` with ``*`` after the current level; (None, None) when empty."""
    levels: list[int] = []
    cur = None
    for line in (text or "").splitlines():
        m = _DPM_LINE.match(line)
        if m:
            levels.append(int(m.group(2)))
            if m.group(3):
                cur = int(m.group(2))
    return (max(levels) if levels else None), cur


def probe_amd_sysfs(sysfs_root: str | Path = "/sys", reasons: dict | None = None) -> list[dict]:
    """AMD GPUs from ``<sysfs_root>/class/drm/card<N>/device/`` (amdgpu driver files): a card
    is AMD when its ``vendor`` file says ``0x1002``.  Read: ``device`` (PCI device id),
    ``product_name`` (when the board has one), ``mem_info_vram_total`` (bytes), ``pp_dpm_sclk``
    and ``pp_dpm_mclk`` (clock levels, MHz), ``gpu_busy_percent``; the driver version from
    ``<sysfs_root>/module/amdgpu/version``.  The name is ``product_name``, else the
    :data:`AMD_PCI_IDS` name of the device id, else ``"AMD GPU <id>"``; compute units and
    bandwidth come from the catalog (sysfs states neither)."""
    reasons = reasons if reasons is not None else {}
    root = Path(sysfs_root)
    drm = root / "class" / "drm"
    try:
        cards = sorted((p for p in drm.iterdir() if _CARD.match(p.name)), key=lambda p: int(p.name[4:]))
    except OSError:
        reasons["amd"] = f"no {drm}"
        return []
    out: list[dict] = []
    driver = _read(root / "module" / "amdgpu" / "version")
    for card in cards:
        dev = card / "device"
        if (_read(dev / "vendor") or "").lower() != AMD_VENDOR:
            continue
        dev_id = (_read(dev / "device") or "").lower()
        known = AMD_PCI_IDS.get(dev_id)
        name = _read(dev / "product_name") or (known[0] if known else f"AMD GPU {dev_id or '?'}")
        vram = _read(dev / "mem_info_vram_total")
        sclk_max, sclk = parse_dpm(_read(dev / "pp_dpm_sclk"))
        mclk_max, _ = parse_dpm(_read(dev / "pp_dpm_mclk"))
        busy = _read(dev / "gpu_busy_percent")
        gpu = {"vendor": "amd", "index": len(out), "source": "sysfs", "name": name, "card": card.name,
               "pci_id": f"{AMD_VENDOR}:{dev_id}" if dev_id else None,
               "bus_id": os.path.basename(os.path.realpath(dev)) if dev.is_symlink() else None,
               "clock_max_mhz": sclk_max, "clock_mhz": sclk, "mem_clock_max_mhz": mclk_max,
               "memory_bytes": int(vram) if vram and vram.isdigit() else None,
               "busy_percent": int(busy) if busy and busy.isdigit() else None,
               "driver": f"amdgpu {driver}" if driver else ("amdgpu" if (dev / "driver").exists() else None)}
        out.append(_finish(gpu, known[1] if known else ""))
    if not out:
        reasons["amd"] = f"no card with vendor {AMD_VENDOR} under {drm}"
    return out


def probe_amd_smi(reasons: dict | None = None) -> list[dict]:
    """AMD GPUs through AMD SMI (``amdsmi``, ROCm's Python binding) when it is installed and
    initialises; ``[]`` with ``reasons["amdsmi"]`` otherwise (the caller then reads sysfs)."""
    reasons = reasons if reasons is not None else {}
    try:
        import amdsmi
    except ImportError:
        reasons["amdsmi"] = "amdsmi not installed"
        return []
    try:
        amdsmi.amdsmi_init()
    except Exception as e:  # noqa: BLE001 - AmdSmiLibraryException: no driver
        reasons["amdsmi"] = str(e) or type(e).__name__
        return []
    out: list[dict] = []
    try:
        ask = _asker(amdsmi)
        for i, h in enumerate(ask("amdsmi_get_processor_handles") or []):
            asic = ask("amdsmi_get_gpu_asic_info", h) or {}
            vram = ask("amdsmi_get_gpu_vram_info", h) or {}
            drv = ask("amdsmi_get_gpu_driver_info", h) or {}
            gfx = getattr(getattr(amdsmi, "AmdSmiClkType", None), "GFX", None)
            clk = (ask("amdsmi_get_clock_info", h, gfx) or {}) if gfx is not None else {}
            dev_id = asic.get("device_id")
            cus = asic.get("num_of_compute_units")
            size_mb = vram.get("vram_size")
            gpu = {"vendor": "amd", "index": i, "source": "amdsmi", "name": str(asic.get("market_name") or ""),
                   "pci_id": f"{AMD_VENDOR}:0x{int(dev_id):04x}" if isinstance(dev_id, int) else None,
                   "compute_units": cus if isinstance(cus, int) and 0 < cus < 0xFFFFFFFF else None,
                   "clock_max_mhz": clk.get("max_clk"), "clock_mhz": clk.get("clk"),
                   "memory_bytes": int(size_mb) * 2**20 if isinstance(size_mb, int) else None,
                   "driver": str(drv.get("driver_version") or "") or None}
            out.append(_finish(gpu))
    finally:
        try:
            amdsmi.amdsmi_shut_down()
        except Exception:  # noqa: BLE001
            pass
    if not out:
        reasons["amdsmi"] = "AMD SMI found no GPU"
    return out


# ------------------------------------------------------------------------------------ public
def probe_gpus(sysfs_root: str | Path = "/sys", reasons: dict | None = None, *, nvml: bool = True,
               amdsmi: bool = True) -> list[dict]:
    """Every GPU of this machine (NVIDIA first, then AMD), as described in the module
    docstring; ``[]`` when there is none.  ``reasons`` (a dict) receives, per source that gave
    nothing, why (``nvml``, ``amdsmi``, ``amd``).  ``sysfs_root`` is where the AMD sysfs
    fallback looks (a test points it at a directory tree); ``nvml``/``amdsmi`` False skip
    those libraries (AMD SMI, when it finds GPUs, replaces the sysfs reading)."""
    reasons = reasons if reasons is not None else {}
    gpus = probe_nvidia(reasons) if nvml else []
    if not nvml:
        reasons["nvml"] = "not asked"
    amd = probe_amd_smi(reasons) if amdsmi else []
    if not amd:
        amd = probe_amd_sysfs(sysfs_root, reasons)
    return gpus + amd


def probe_cpu() -> dict:
    """This CPU: archspec's microarchitecture (``uarch`` = ``archspec.cpu.host().name``,
    ``vendor``, ``generation``, ``family``, ``features`` count, ``ancestors``) plus what
    ``tunedb.index.hardware.localcpu.cpu_info`` reads (model, ``cpu_vendor`` from
    /proc/cpuinfo, ``cores`` this process may run on, ``logical_cpus`` of the machine, cache
    sizes in KiB), the native vector width in bits, ``isa_level`` (:func:`isa_level`) and
    ``simd`` (the :data:`SIMD_FLAGS` it has).  ``uarch`` is the name the local ``cpu-<uarch>`` presets
    carry; without archspec it is ``platform.machine()`` and ``archspec`` says why."""
    from tunedb.index.hardware import localcpu

    info = localcpu.cpu_info()
    out: dict[str, Any] = {"model": info.get("model"), "cores": info.get("cores"), "arch": info.get("arch"),
                           **{k: v for k, v in info.items() if k.endswith("_kb")},
                           "vector_bits": localcpu.native_vector_bits()}
    try:
        import archspec.cpu

        host = archspec.cpu.host()
        out.update(uarch=host.name, vendor=host.vendor, generation=host.generation, family=host.family.name,
                   features=len(host.features), ancestors=[a.name for a in host.ancestors], archspec="ok")
    except Exception as e:  # noqa: BLE001 - archspec missing, or a host it cannot read
        out.update(uarch=localcpu.host_uarch(), vendor=info.get("vendor"), generation=None, family=info.get("arch"),
                   features=len(info.get("flags") or []), ancestors=[], archspec=f"unavailable: {e}")
    flags = info.get("flags") or []
    out.update(cpu_vendor=info.get("vendor"), logical_cpus=os.cpu_count(), isa_level=isa_level(info.get("arch") or "", flags),
               simd=[f for f in SIMD_FLAGS if f in set(flags)])
    out["presets"] = [n for n in localcpu.preset_names()
                      if (localcpu.preset(n) or {}).get("uarch") == out["uarch"]]
    return out


#: x86-64 psABI levels: the Linux ``/proc/cpuinfo`` flags each needs beyond the level below
X86_LEVELS = (("x86-64-v2", ("cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3")),
              ("x86-64-v3", ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave")),
              ("x86-64-v4", ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")))
#: the SIMD and matrix flags that change what a kernel can use (in this order when present)
SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
              "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "asimd", "asimddp", "sve", "sve2", "sme")


def isa_level(arch: str, flags: list[str] | set[str]) -> str | None:
    """The highest x86-64 psABI level (``x86-64``, ``x86-64-v2`` ... ``x86-64-v4``) whose
    flags ``flags`` has all of, for an x86_64 ``arch``; None for another architecture."""
    if arch not in ("x86_64", "amd64", "AMD64"):
        return None
    have, level = set(flags), "x86-64"
    for name, need in X86_LEVELS:
        if not have.issuperset(need):
            break
        level = name
    return level


def cpu_line(cpu: dict) -> str:
    """One line describing :func:`probe_cpu`'s dict: model, vendor and architecture, the cores
    this process may use, the ISA level, the vector width, the SIMD flags that matter, the
    caches, archspec's microarchitecture and the local presets that carry it."""
    caches = ", ".join(f"{k[:-3].upper()} {v // 1024} MiB" if v >= 1024 and v % 1024 == 0 else f"{k[:-3].upper()} {v} KiB"
                       for k, v in cpu.items() if k.endswith("_kb") and v)
    parts = [f"cpu: {cpu.get('model')} ({cpu.get('cpu_vendor') or cpu.get('vendor')}, {cpu.get('arch')})",
             f"{cpu.get('cores')} cores usable" + (f" of {cpu['logical_cpus']} logical CPUs"
                                                    if cpu.get("logical_cpus") and cpu["logical_cpus"] != cpu.get("cores")
                                                    else ""),
             f"ISA {cpu['isa_level']}" if cpu.get("isa_level") else "",
             f"vector {cpu.get('vector_bits')} bits",
             f"SIMD {' '.join(cpu['simd'])}" if cpu.get("simd") else "",
             f"caches {caches}" if caches else "",
             f"uarch {cpu.get('uarch')}" + (f" (archspec {cpu.get('vendor')}, {cpu.get('features')} features)"
                                              if cpu.get("archspec") == "ok" else ""),
             f"presets {', '.join(cpu['presets'])}" if cpu.get("presets") else ""]
    return "; ".join(p for p in parts if p)


def probe(sysfs_root: str | Path = "/sys") -> dict:
    """``{"gpus": probe_gpus(...), "reasons": {source: why it gave nothing}, "cpu": probe_cpu()}``."""
    reasons: dict[str, str] = {}
    gpus = probe_gpus(sysfs_root, reasons)
    return {"gpus": gpus, "reasons": reasons, "cpu": probe_cpu()}


def no_gpu_line(reasons: dict) -> str:
    """The one line that says this machine has no GPU, and why each source found none."""
    amd = reasons.get("amd", "")
    if reasons.get("amdsmi") and reasons["amdsmi"] != "amdsmi not installed":
        amd = f"{reasons['amdsmi']}; {amd}" if amd else reasons["amdsmi"]
    return f"no GPU found (NVML: {reasons.get('nvml', 'no GPU')}; AMD: {amd or 'no GPU'})"
