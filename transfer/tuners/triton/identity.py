"""Which device a Triton kernel is tuned on, as a tunedb target (a JSON dict).

* A GPU (``torch.cuda`` answers): NVIDIA through CUDA -> ``cuda_target`` (name, compute
  capability, SM count, memory in MiB), AMD through HIP -> ``rocm_target`` (name, ISA, compute
  units, memory), both from ``torch.cuda.get_device_properties`` of the current device.  The
  driver version is not part of it, so a second machine with the same GPU hits the same records.
* Triton's interpreter (``TRITON_INTERPRET=1``): kind ``"triton-interpreter"``, named after this
  CPU's model (``/proc/cpuinfo``), with the CPU's architecture and core count.  Its timings are
  the interpreter's on a CPU: a separate target, never taken for a GPU's (the nearest-entry
  search keeps kinds apart).

Units: ``global_mem_mb`` MiB."""

from __future__ import annotations

import platform
from typing import Any

from tunedb.index.hardware.devices import cuda_target, rocm_target
from tunedb.index.hardware.localcpu import cpu_info

#: the target kind of timings taken under Triton's interpreter on a CPU
INTERPRETER_KIND = "triton-interpreter"


def interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter (``TRITON_INTERPRET=1``, as Triton reads it)."""
    from triton import knobs

    return bool(knobs.runtime.interpret)


def interpreter_target() -> dict:
    """The target of Triton's interpreter on this CPU."""
    info = cpu_info()
    model = str(info.get("model") or platform.processor() or "unknown CPU")
    return {"kind": INTERPRETER_KIND, "name": f"Triton interpreter on {model}", "cpu": model,
            "arch": str(info.get("arch") or platform.machine()), "cores": int(info.get("cores") or 1)}


def gpu_target(props: Any, hip: bool) -> dict:
    """The target of a GPU from its ``torch.cuda.get_device_properties`` (duck-typed: ``name``,
    ``major``/``minor`` or ``gcnArchName``, ``multi_processor_count``, ``total_memory`` bytes)."""
    memory_mb = int(getattr(props, "total_memory", 0) or 0) >> 20
    units = int(getattr(props, "multi_processor_count", 0) or 0)
    if hip:
        return rocm_target(props.name, getattr(props, "gcnArchName", ""), compute_units=units, memory_mb=memory_mb)
    return cuda_target(props.name, (props.major, props.minor), sm_count=units, memory_mb=memory_mb)


def device_target(interpret: bool | None = None) -> dict:
    """This process's Triton device as a target: the interpreter's when ``interpret`` (None: as
    Triton reads ``TRITON_INTERPRET``), else the current ``torch.cuda`` device's.  ValueError
    (one line) when neither: no GPU is visible to torch and the interpreter is off."""
    if interpret is None:
        interpret = interpreting()
    if interpret:
        return interpreter_target()
    import torch

    if not torch.cuda.is_available():
        raise ValueError("no GPU is visible to torch and TRITON_INTERPRET is not set: nothing to tune on")
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return gpu_target(props, hip=bool(getattr(torch.version, "hip", None)))


__all__ = ["INTERPRETER_KIND", "device_target", "gpu_target", "interpreter_target", "interpreting"]
