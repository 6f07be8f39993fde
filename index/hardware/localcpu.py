"""This machine's CPU and the local target presets built from it.

A preset is a target the project can build and run here: the CPU plus code-generation
settings (-march level, thread count, compiler and flags).  The effective vector width
is what the -march level allows, not what the CPU has.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import subprocess

MARCH_LEVELS = {
    # preset isa -> (gcc -march value, effective SIMD width in bits)
    "native": ("native", None),
    "x86-64-v3": ("x86-64-v3", 256),
    "x86-64-v2": ("x86-64-v2", 128),
    "x86-64": ("x86-64", 128),
}


@functools.lru_cache(maxsize=1)
def cpu_info() -> dict:
    """Model, vendor, core count, cache sizes (KiB) and ISA flags of this CPU."""
    info: dict = {"model": platform.processor() or "unknown", "vendor": "unknown", "flags": []}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            text = f.read()
        m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
        if m:
            info["model"] = m.group(1).strip()
        m = re.search(r"^vendor_id\s*:\s*(.+)$", text, re.M)
        if m:
            v = m.group(1).strip()
            info["vendor"] = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(v, v.lower())
        m = re.search(r"^flags\s*:\s*(.+)$", text, re.M)
        if m:
            info["flags"] = sorted(m.group(1).split())
    except OSError:
        pass
    info["cores"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    info["arch"] = platform.machine()
    caches = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    if os.path.isdir(base):
        for idx in sorted(os.listdir(base)):
            try:
                d = os.path.join(base, idx)
                level = open(os.path.join(d, "level")).read().strip()
                ctype = open(os.path.join(d, "type")).read().strip()
                size = open(os.path.join(d, "size")).read().strip()
            except OSError:
                continue
            kb = int(re.sub(r"[^0-9]", "", size) or 0) * (1024 if size.endswith("M") else 1)
            if ctype == "Instruction":
                continue
            caches[f"l{level}{'d' if level == '1' else ''}_kb"] = kb
    info.update(caches)
    return info


def native_vector_bits(flags: list[str] | None = None) -> int:
    f = set(cpu_info()["flags"] if flags is None else flags)
    if "avx512f" in f:
        return 512
    if "avx2" in f or "avx" in f:
        return 256
    return 128


@functools.lru_cache(maxsize=1)
def compiler_identity() -> str:
    """First line of ``cc --version`` (e.g. 'gcc (Debian 12.2.0-14) 12.2.0'), or 'none'."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return "none"
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "none"
    return out.splitlines()[0].strip() if out else "none"


def preset_names() -> list[str]:
    cores = cpu_info()["cores"]
    names = []
    for isa in MARCH_LEVELS:
        names.append(f"cpu-{isa}-t1")
        if cores > 1:
            names.append(f"cpu-{isa}-t{cores}")
    return names


def preset(name: str) -> dict | None:
    """Target dict of a local preset (``cpu-native``, ``cpu-x86-64-v3-t2``, ...), or None."""
    m = re.fullmatch(r"cpu-(native|x86-64-v3|x86-64-v2|x86-64)(?:-t(\d+))?", name)
    if not m:
        return None
    isa, threads = m.group(1), int(m.group(2) or 1)
    info = cpu_info()
    if threads < 1 or threads > info["cores"]:
        return None
    march, bits = MARCH_LEVELS[isa]
    if bits is None:
        bits = native_vector_bits()
    target = {
        "kind": "cpu",
        "name": f"cpu-{isa}-t{threads}",
        "vendor": info["vendor"],
        "model": info["model"],
        "arch": info["arch"],
        "isa": isa,
        "march": march,
        "vector_bits": bits,
        "threads": threads,
        "cores": info["cores"],
        "compiler": compiler_identity(),
        "flags": f"-O3 -march={march} -fopenmp",
    }
    for k in ("l1d_kb", "l2_kb", "l3_kb"):
        if k in info:
            target[k] = info[k]
    if isa == "native":
        # native code depends on every ISA flag of this CPU: a CPU with other flags is another target
        from tunedb.index.keys import key_of

        target["cpu_flags_key"] = key_of(info["flags"])[:12]
    return target


def local_target(name: str = "cpu-native-t1") -> dict:
    """Target dict of a local preset of this machine (``cpu-native-t1``, ``cpu-x86-64-v3-t2``, ...);
    ``ValueError`` naming the presets this machine has when ``name`` is not one of them."""
    t = preset(name) if isinstance(name, str) else None
    if t is None:
        raise ValueError(f"{name!r} is not a local preset of this machine; presets: {', '.join(preset_names())}")
    return t
