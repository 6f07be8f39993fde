"""Target properties (vector width and registers, cache sizes, threads) that size a kernel
family's default config, with portable fallbacks.

A family's ``default_config(workload, target)`` is derived from the target dict (a local preset
from ``index.hardware.localcpu.preset`` or any stored target) through these helpers, never from
the CPU this process happens to run on.  A property the target does not state falls back to the
x86-64 baseline (SSE2: 128-bit vectors, 16 vector registers) and to small caches
(``PORTABLE``), so ``target=None`` gives a default that is reasonable everywhere.

Units: vector widths in bits or float32 lanes as named, cache sizes in bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: assumed for a property a target does not state: the x86-64 baseline (SSE2) and caches no
#: larger than any x86-64 core of the last decade has (L1d 32 KiB, L2 256 KiB; L3 unknown)
PORTABLE: dict[str, int] = {"vector_bits": 128, "vector_registers": 16, "l1d_kb": 32, "l2_kb": 256, "threads": 1}

#: vector width (bits) of the ``isa`` of a preset, for targets that name the ISA but not the width
_ISA_BITS = {"x86-64": 128, "x86-64-v2": 128, "x86-64-v3": 256, "x86-64-v4": 512,
             "sse2": 128, "sse4.2": 128, "avx": 256, "avx2": 256, "avx512": 512, "neon": 128}

#: architectures whose vector register file has 32 entries at every width (AArch64 NEON/SVE)
_ARCH_32_REGS = ("aarch64", "arm64")


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if value != value or value <= 0 or value == float("inf"):
        return None
    return int(value)


def vector_bits(target: Mapping[str, Any] | None) -> int:
    """SIMD width in bits the target's code may use: ``vector_bits``, else the width of its
    ``isa``, else 128 (SSE2, the x86-64 baseline)."""
    t = target or {}
    bits = _positive_int(t.get("vector_bits"))
    if bits is None and isinstance(t.get("isa"), str):
        bits = _ISA_BITS.get(t["isa"].lower())
    return bits or PORTABLE["vector_bits"]


def vector_floats(target: Mapping[str, Any] | None) -> int:
    """float32 lanes of one vector register of the target (``vector_bits / 32``, at least 1)."""
    return max(1, vector_bits(target) // 32)


def vector_registers(target: Mapping[str, Any] | None) -> int:
    """Architectural vector registers: ``vector_registers`` when the target states it; else 32
    with AVX-512 (zmm0-31) or on AArch64, 16 otherwise (xmm/ymm0-15 of SSE and AVX2)."""
    t = target or {}
    n = _positive_int(t.get("vector_registers"))
    if n is not None:
        return n
    if vector_bits(t) >= 512 or str(t.get("arch", "")).lower() in _ARCH_32_REGS:
        return 32
    return PORTABLE["vector_registers"]


def cache_bytes(target: Mapping[str, Any] | None, level: str) -> int | None:
    """Size in bytes of cache ``level`` (``"l1d"``, ``"l2"`` or ``"l3"``) from the target's
    ``<level>_kb``; ``PORTABLE``'s size for L1d and L2 when unstated, None for an unstated L3."""
    t = target or {}
    kb = _positive_int(t.get(f"{level}_kb"))
    if kb is None:
        kb = PORTABLE.get(f"{level}_kb")
    return None if kb is None else kb * 1024


def threads(target: Mapping[str, Any] | None) -> int:
    """Threads the target's runs use (``threads``, default 1)."""
    return _positive_int((target or {}).get("threads")) or 1


def cores(target: Mapping[str, Any] | None) -> int:
    """Cores sharing the target's L3 (``cores``, default 1)."""
    return _positive_int((target or {}).get("cores")) or 1


def snap_down(values: Sequence[int], limit: float) -> int:
    """Largest of the ascending ``values`` that is <= ``limit``; the smallest one when none is."""
    ok = [v for v in values if v <= limit]
    return ok[-1] if ok else values[0]


def snap_up(values: Sequence[int], need: float) -> int:
    """Smallest of the ascending ``values`` that is >= ``need``; the largest one when none is."""
    for v in values:
        if v >= need:
            return v
    return values[-1]


__all__ = ["PORTABLE", "vector_bits", "vector_floats", "vector_registers", "cache_bytes", "threads", "cores",
           "snap_down", "snap_up"]
