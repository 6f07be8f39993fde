"""This machine's CPU and the local target presets built from it.

A preset is a target the project can build and run here: the CPU plus code-generation
settings (-march level, thread count, compiler and flags).  The effective vector width
is what the -march level allows, not what the CPU has.

Two kinds of presets:

* ISA levels (``MARCH_LEVELS``): ``cpu-native``, ``cpu-x86-64-v3``, ``cpu-x86-64-v2``,
  ``cpu-x86-64``, each ``-t1`` / ``-t<cores>``; present on every x86-64 host.
* real microarchitectures (``UARCH_TABLE``, archspec names): ``cpu-<uarch>-t<n>`` exists
  exactly when archspec says this host runs that uarch (the host is it or descends from it)
  and the build compiler accepts archspec's flags for it.  Its target carries ``uarch``,
  ``vector_registers`` and the gcc ``-march`` value archspec names (e.g. ``icelake`` ->
  ``icelake-client``); its vector width is what that uarch has (``cpu-haswell`` is 256-bit
  on an AVX-512 host).  The ISA-level presets keep their historical keys (a new key would
  change their ``target_key``); the host's archspec name is ``host_uarch()``.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import subprocess

#: curated well-known x86-64 microarchitectures (archspec names) offered as presets where the host runs them
UARCH_TABLE = ("haswell", "broadwell", "skylake", "skylake_avx512", "cascadelake", "icelake", "sapphirerapids",
               "zen", "zen2", "zen3", "zen4")

#: gcc ``-march`` values archspec gives for ``UARCH_TABLE`` (the build accepts exactly these besides the levels);
#: a uarch whose archspec flags name another value, or need more than ``-march``/``-mtune``, has no preset
UARCH_MARCH = ("haswell", "broadwell", "skylake", "skylake-avx512", "cascadelake", "icelake-client", "sapphirerapids",
               "znver1", "znver2", "znver3", "znver4")

MARCH_LEVELS = {
    # preset isa -> (gcc -march value, effective SIMD width in bits)
    "native": ("native", None),
    "x86-64-v3": ("x86-64-v3", 256),
    "x86-64-v2": ("x86-64-v2", 128),
    "x86-64": ("x86-64", 128),
}


@functools.lru_cache(maxsize=1)
def _read_text(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


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
                level, ctype, size = (_read_text(os.path.join(d, n)) for n in ("level", "type", "size"))
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


def _build_compiler() -> tuple[str, int] | None:
    """(path, mtime in ns) of the compiler builds use (``$TUNEDB_CC``, else ``$CC``, else ``cc``, as in
    ``tunedb.transfer.kernels.build.compiler``), or None when it is not found."""
    name = os.environ.get("TUNEDB_CC") or os.environ.get("CC") or "cc"
    path = shutil.which(name)
    if not path:
        return None
    try:
        return path, os.stat(path).st_mtime_ns
    except OSError:
        return path, 0


@functools.lru_cache(maxsize=16)
def _compiler_kind(cc: str, mtime_ns: int) -> tuple[str, str] | None:
    """(archspec compiler name ``gcc``/``clang``, version ``X.Y.Z``) of ``cc``, or None when it is
    neither or does not answer.  ``mtime_ns`` only keys the cache (a replaced compiler is asked again)."""
    try:
        ident = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30,
                               stdin=subprocess.DEVNULL).stdout
        version = ""
        for opt in ("-dumpfullversion", "-dumpversion"):
            out = subprocess.run([cc, opt], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
            version = out.stdout.strip() if out.returncode == 0 else ""
            if re.fullmatch(r"\d+(\.\d+){1,2}", version):
                break
            version = ""
    except (OSError, subprocess.SubprocessError):
        return None
    if not version:
        return None
    if "clang" in ident.lower():
        return "clang", version
    if "free software foundation" in ident.lower() or "gcc" in ident.lower():
        return "gcc", version
    return None


@functools.lru_cache(maxsize=64)
def _compiler_accepts(cc: str, mtime_ns: int, flags: tuple[str, ...]) -> bool:
    """Whether ``cc`` compiles an empty C file with ``flags`` (checked once per compiler and flags)."""
    try:
        proc = subprocess.run([cc, *flags, "-x", "c", "-c", "-o", os.devnull, "-"], input="", capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


@functools.lru_cache(maxsize=1)
def _host_microarchitecture():
    """archspec's Microarchitecture of this host, or None when archspec cannot tell."""
    try:
        import archspec.cpu

        return archspec.cpu.host()
    except Exception:  # archspec raises assorted errors on hosts it cannot read; no uarch presets then
        return None


def host_uarch() -> str:
    """archspec's name of this host's microarchitecture (e.g. ``icelake``, ``zen3``, ``x86_64_v3``);
    the machine name (``platform.machine()``) when archspec cannot tell."""
    host = _host_microarchitecture()
    return host.name if host is not None else (platform.machine() or "unknown")


def host_runs(uarch: str) -> bool:
    """Whether archspec says this host runs code built for ``uarch``: the host is that
    microarchitecture or descends from it (``host == u or u in host.ancestors``)."""
    host = _host_microarchitecture()
    if host is None:
        return False
    return uarch == host.name or uarch in {a.name for a in host.ancestors}


def uarch_vector_bits(features: set[str] | frozenset[str]) -> int:
    """SIMD width in bits code for a uarch with these archspec ``features`` may use:
    512 with avx512f, 256 with avx2 or avx, else 128."""
    if "avx512f" in features:
        return 512
    if "avx2" in features or "avx" in features:
        return 256
    return 128


def uarch_flags(uarch: str) -> str | None:
    """archspec's optimization flags of ``uarch`` for the build compiler (e.g. ``-march=haswell
    -mtune=haswell``), or None when ``uarch`` is not in ``UARCH_TABLE``/archspec, archspec has no
    flags for this compiler version, the flags need more than ``-march=<one of UARCH_MARCH>`` (and
    the same ``-mtune``, which -march implies), or the compiler rejects them.  Independent of the host."""
    if uarch not in UARCH_TABLE:
        return None
    cc = _build_compiler()
    if cc is None:
        return None
    return _uarch_flags_for(uarch, *cc)


@functools.lru_cache(maxsize=64)
def _uarch_flags_for(uarch: str, cc: str, mtime_ns: int) -> str | None:
    import archspec.cpu

    kind = _compiler_kind(cc, mtime_ns)
    target = archspec.cpu.TARGETS.get(uarch)
    if kind is None or target is None:
        return None
    try:
        flags = target.optimization_flags(*kind)
    except Exception:  # UnsupportedMicroarchitecture / ValueError: archspec has no flags for this compiler
        return None
    parts = flags.split()
    march = _march_of(flags)
    if march is None or any(p not in (f"-march={march}", f"-mtune={march}") for p in parts):
        return None
    if not _compiler_accepts(cc, mtime_ns, ("-O3", *parts, "-fopenmp")):
        return None
    return flags


def _march_of(flags: str) -> str | None:
    """The ``-march`` value of ``flags`` when it is one of ``UARCH_MARCH``, else None."""
    m = re.search(r"(?:^|\s)-march=(\S+)", flags)
    return m.group(1) if m and m.group(1) in UARCH_MARCH else None


def uarch_names() -> list[str]:
    """The ``UARCH_TABLE`` entries this host has presets for (table order): archspec knows them,
    the host runs them (``host_runs``) and the build compiler accepts their flags (``uarch_flags``)."""
    return [u for u in UARCH_TABLE if host_runs(u) and uarch_flags(u) is not None]


def preset_names() -> list[str]:
    """Names of this machine's presets: the ISA levels (``MARCH_LEVELS`` order), then the
    microarchitectures of ``uarch_names()``; each ``-t1`` and, with several cores, ``-t<cores>``."""
    cores = cpu_info()["cores"]
    names = []
    for isa in [*MARCH_LEVELS, *uarch_names()]:
        names.append(f"cpu-{isa}-t1")
        if cores > 1:
            names.append(f"cpu-{isa}-t{cores}")
    return names


_PRESET_RE = re.compile(r"cpu-(native|x86-64-v3|x86-64-v2|x86-64|" + "|".join(UARCH_TABLE) + r")(?:-t(\d+))?")


def preset(name: str) -> dict | None:
    """Target dict of a local preset (``cpu-native``, ``cpu-x86-64-v3-t2``, ``cpu-haswell-t1``, ...), or
    None when ``name`` is no preset of this machine (unknown name, more threads than cores, a uarch
    the host cannot run or the compiler cannot build for).  No thread suffix means ``-t1``."""
    m = _PRESET_RE.fullmatch(name)
    if not m:
        return None
    isa, threads = m.group(1), int(m.group(2) or 1)
    info = cpu_info()
    if threads < 1 or threads > info["cores"]:
        return None
    if isa in UARCH_TABLE:
        return _uarch_preset(isa, threads, info)
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
        from tunedb.index.model.keys import key_of

        target["cpu_flags_key"] = key_of(info["flags"])[:12]
    return target


def _uarch_preset(uarch: str, threads: int, info: dict) -> dict | None:
    """Target dict of ``cpu-<uarch>-t<threads>``, or None when this host has no such preset."""
    if not host_runs(uarch):
        return None
    flags = uarch_flags(uarch)
    if flags is None:
        return None
    import archspec.cpu

    features = set(archspec.cpu.TARGETS[uarch].features)
    bits = uarch_vector_bits(features)
    target = {
        "kind": "cpu",
        "name": f"cpu-{uarch}-t{threads}",
        "vendor": info["vendor"],
        "model": info["model"],
        "arch": info["arch"],
        "isa": uarch,
        "march": _march_of(flags),
        "uarch": uarch,
        "vector_bits": bits,
        "vector_registers": 32 if "avx512f" in features else 16,
        "threads": threads,
        "cores": info["cores"],
        "compiler": compiler_identity(),
        "flags": f"-O3 {flags} -fopenmp",
    }
    for k in ("l1d_kb", "l2_kb", "l3_kb"):
        if k in info:
            target[k] = info[k]
    return target


def local_target(name: str = "cpu-native-t1") -> dict:
    """Target dict of a local preset of this machine (``cpu-native-t1``, ``cpu-x86-64-v3-t2``, ...);
    ``ValueError`` naming the presets this machine has when ``name`` is not one of them."""
    t = preset(name) if isinstance(name, str) else None
    if t is None:
        raise ValueError(f"{name!r} is not a local preset of this machine; presets: {', '.join(preset_names())}")
    return t
