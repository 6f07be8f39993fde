"""Targets of devices as their driver describes them (OpenCL, CUDA, ROCm/HIP), not as their name reads.

A tuner that runs on a device can ask its runtime what the device is; that answer beats parsing
the device's name against the catalog (a CPU OpenCL device named ``pthread-AMD EPYC 7763`` is
not an AMD GPU).  The catalog stays the fall-back for names only: cache files and logs.

* ``opencl_target(dev)``: a ``pyopencl.Device`` (duck-typed: only its attributes are read) ->
  kind from the device type (CPU / GPU / accelerator), vendor, compute units, local memory,
  largest work-group, platform and driver version; ``opencl_device_info(dev)`` adds the clock and
  global memory for a run's summary (not the key: runtimes report them differently between
  boots).  A CPU device (PoCL's ``pthread-<cpu>`` or
  ``cpu-<cpu>``, Intel's and AMD's CPU runtimes) is described by this host's CPU as well (the
  local preset's fields: archspec microarchitecture, cores, caches, vector width), because the
  OpenCL runtime compiles for the host it runs on.
* ``cuda_target(name, compute_capability, driver, ...)``: a CUDA device as Kernel Tuner's CUDA
  backends (and NVML) report it.
* ``rocm_target(name, gcn_arch, driver, ...)``: an AMD GPU as HIP (Kernel Tuner's HIP backend's
  ``hipDeviceProp_t``) and AMD SMI report it: the ISA from ``gcnArchName`` (``gfx90a``, feature
  flags dropped), compute units, memory, driver.
* ``cpu_opencl_name(name)``: whether a device *name* (from a cache file) is a CPU OpenCL device.

The driver's version is part of the target (``driver``): records timed under another driver
are another target (another ``target_key``), found by nearest-entry search but never mixed
with this driver's timings.

Units: ``clock_mhz`` MHz, ``local_mem_kb`` KiB, ``global_mem_mb`` MiB.
"""

from __future__ import annotations

import re
from typing import Any

#: OpenCL device-type bits (``CL_DEVICE_TYPE_*``)
CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_GPU, CL_DEVICE_TYPE_ACCELERATOR = 2, 4, 8

#: PoCL's CPU device names (``pthread-``, ``cpu-``, ``basic-``, ``cpu-minimal-``, ``cpu-tbb-``
#: followed by the CPU's brand string) and CPU brand strings as Intel's and AMD's CPU OpenCL
#: runtimes report them
_CPU_DEVICE_RE = re.compile(
    r"^(?:(?:pthread|cpu|basic|cpu-minimal|cpu-tbb)-.+"
    r"|.*\b(?:Intel\(R\) (?:Core|Xeon|Pentium|Celeron|Atom)|AMD (?:EPYC|Ryzen|Athlon|Opteron|Threadripper)"
    r"|Ryzen|Threadripper)\b.*)$", re.IGNORECASE)
#: device names that contain a CPU vendor's word but are GPUs
_GPU_WORDS_RE = re.compile(r"\b(?:Radeon|Instinct|Arc|Iris|UHD|HD Graphics|Xe|GeForce|Quadro|Tesla|RTX)\b",
                           re.IGNORECASE)


def cpu_opencl_name(name: str) -> bool:
    """Whether device ``name`` is a CPU OpenCL device (PoCL's ``pthread-<cpu>``, a CPU
    runtime's CPU brand string)."""
    name = (name or "").strip()
    return bool(_CPU_DEVICE_RE.match(name)) and not _GPU_WORDS_RE.search(name)


def _vendor(text: str) -> str:
    t = text.lower()
    for key, v in (("nvidia", "nvidia"), ("advanced micro devices", "amd"), ("amd", "amd"), ("intel", "intel"),
                   ("arm", "arm"), ("apple", "apple"), ("qualcomm", "qualcomm")):
        if key in t:
            return v
    return t.split()[0] if t.split() else "other"


def _text(v: Any) -> str:
    return str(v).strip() if v is not None else ""


def _host_cpu_fields(threads: int | None) -> dict:
    """This host's CPU as the local presets describe it (archspec uarch, cores, caches, vector
    width, -march native), without the C compiler's identity (OpenCL compiles with its own)."""
    from tunedb.index.hardware import localcpu

    try:
        t = dict(localcpu.local_target(f"cpu-native-t{threads}" if threads else "cpu-native-t1"))
    except ValueError:  # (a thread count no preset has: the one-thread preset's description)
        t = dict(localcpu.local_target())
    for k in ("name", "compiler", "flags", "threads", "isa"):
        t.pop(k, None)
    t["uarch"] = localcpu.host_uarch()
    return t


def opencl_target(dev: Any) -> dict:
    """The target of OpenCL device ``dev`` (a ``pyopencl.Device``), from its driver (module
    docstring).  Only attributes are read; a missing one is left out."""
    def get(name: str) -> Any:
        try:
            return getattr(dev, name)
        except Exception:  # noqa: BLE001 - a runtime that cannot answer one query
            return None

    dtype = int(get("type") or 0)
    kind = "cpu" if dtype & CL_DEVICE_TYPE_CPU else "gpu" if dtype & CL_DEVICE_TYPE_GPU else \
        "accelerator" if dtype & CL_DEVICE_TYPE_ACCELERATOR else "gpu"
    platform = get("platform")
    t: dict[str, Any] = {}
    if kind == "cpu":
        t.update(_host_cpu_fields(get("max_compute_units")))
    t.update({"kind": kind, "name": _text(get("name")), "runtime": "opencl",
              "platform": _text(getattr(platform, "name", None)), "driver": _text(get("driver_version")),
              "vendor": t.get("vendor") or _vendor(_text(get("vendor")))})
    for key, attr, scale in (("compute_units", "max_compute_units", 1), ("local_mem_kb", "local_mem_size", 1 << 10),
                             ("max_work_group_size", "max_work_group_size", 1)):
        v = get(attr)
        if isinstance(v, int) and v > 0:
            t[key] = v // scale
    return {k: v for k, v in t.items() if v not in ("", None)}


def opencl_device_info(dev: Any) -> dict:
    """What the driver says about ``dev`` beyond its identity, for a run's summary: ``clock_mhz``
    and ``global_mem_mb`` (values a runtime may report differently from one boot to the next, so
    they are not part of the target and its key), ``device_version``, ``opencl_c_version``."""
    out: dict[str, Any] = {}
    for key, attr, scale in (("clock_mhz", "max_clock_frequency", 1), ("global_mem_mb", "global_mem_size", 1 << 20)):
        try:
            v = getattr(dev, attr)
        except Exception:  # noqa: BLE001
            continue
        if isinstance(v, int) and v > 0:
            out[key] = v // scale
    for attr in ("device_version", "opencl_c_version"):
        try:
            out[attr] = _text(getattr(dev, attr.replace("device_", "")))
        except Exception:  # noqa: BLE001
            pass
    return out


def cuda_target(name: str, compute_capability: Any = None, driver: Any = None, *,
                sm_count: int | None = None, memory_mb: int | None = None) -> dict:
    """The target of a CUDA device as its runtime reports it: ``compute_capability`` as Kernel
    Tuner's backends give it (``"86"`` or ``(8, 6)`` or ``"8.6"``), ``driver`` the CUDA driver
    version; ``sm_count`` and ``memory_mb`` from NVML where it answers."""
    t: dict[str, Any] = {"kind": "gpu", "name": _text(name), "runtime": "cuda", "vendor": "nvidia"}
    cc = compute_capability
    if isinstance(cc, (tuple, list)) and len(cc) == 2:
        cc = f"{cc[0]}.{cc[1]}"
    elif isinstance(cc, (str, int)) and re.fullmatch(r"\d{2,3}", str(cc)):
        cc = f"{str(cc)[:-1]}.{str(cc)[-1]}"
    if cc:
        t["compute_capability"] = str(cc)
    if driver not in (None, ""):
        t["driver"] = _text(driver)
    if sm_count:
        t["sm_count"] = int(sm_count)
    if memory_mb:
        t["global_mem_mb"] = int(memory_mb)
    return t


def rocm_target(name: str, gcn_arch: Any = None, driver: Any = None, *, compute_units: int | None = None,
                memory_mb: int | None = None) -> dict:
    """The target of an AMD GPU as HIP reports it: ``gcn_arch`` is ``hipDeviceProp_t.gcnArchName``
    (``"gfx90a:sramecc+:xnack-"``: the ISA is the part before the first ``:``), ``driver`` the HIP
    driver version; ``compute_units`` (``multiProcessorCount``) and ``memory_mb`` where known."""
    t: dict[str, Any] = {"kind": "gpu", "name": _text(name), "runtime": "hip", "vendor": "amd"}
    isa = _text(gcn_arch).split(":", 1)[0].strip().lower()
    if re.fullmatch(r"gfx[0-9a-f]{3,5}", isa):
        t["isa"] = isa
    if driver not in (None, ""):
        t["driver"] = _text(driver)
    if compute_units:
        t["compute_units"] = int(compute_units)
    if memory_mb:
        t["global_mem_mb"] = int(memory_mb)
    return t


__all__ = ["cpu_opencl_name", "cuda_target", "opencl_device_info", "opencl_target", "rocm_target"]
