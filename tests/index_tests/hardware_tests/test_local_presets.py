"""Local presets of real microarchitectures (``cpu-<uarch>-t<n>``, from archspec).

Every expectation is computed here from archspec and the build compiler, never from the CPU
the tests happen to run on, so the tests hold on any x86-64 host (AVX-512 or AVX2 only, Intel
or AMD).  Builds and runs are real (gcc, the isolated runner)."""

from __future__ import annotations

import ctypes
import os
import subprocess

import archspec.cpu
import pytest

from tunedb.index.hardware.localcpu import MARCH_LEVELS, UARCH_TABLE, host_uarch, local_target, preset, preset_names
from tunedb.transfer.kernels import get_family
from tunedb.transfer.kernels.build import ALLOWED_MARCH, build, compiler, target_flags
from tunedb.transfer.measure.backend import LocalBackend, MeasureOptions, check_local_target
from tunedb.transfer.measure.timing import TimingProtocol

FAST = MeasureOptions(protocol=TimingProtocol(warmup=0, min_repeat_ms=0.5, repeat=2))

#: preprocessor macros gcc defines for an ISA extension -> archspec's feature name of it
FEATURE_MACROS = {"__AVX__": "avx", "__AVX2__": "avx2", "__FMA__": "fma", "__F16C__": "f16c", "__BMI2__": "bmi2",
                  "__AVX512F__": "avx512f", "__AVX512BW__": "avx512bw", "__AVX512VL__": "avx512vl",
                  "__AVX512VNNI__": "avx512_vnni", "__AVX512VBMI2__": "avx512_vbmi2"}


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def _host_runs() -> list[str]:
    """The table's uarchs archspec says this host runs: the host itself or one of its ancestors."""
    host = archspec.cpu.host()
    names = {host.name} | {a.name for a in host.ancestors}
    return [u for u in UARCH_TABLE if u in archspec.cpu.TARGETS and u in names]


def _compiler_flags(uarch: str) -> str | None:
    """archspec's flags of ``uarch`` for the build compiler when the compiler accepts them (and they
    need nothing beyond -march / the same -mtune, which the build passes as -march), else None."""
    cc = compiler()
    ident = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.lower()
    version = subprocess.run([cc, "-dumpfullversion"], capture_output=True, text=True).stdout.strip()
    try:
        flags = archspec.cpu.TARGETS[uarch].optimization_flags("clang" if "clang" in ident else "gcc", version)
    except Exception:  # archspec has no flags for this compiler version
        return None
    parts = flags.split()
    march = next((p.split("=", 1)[1] for p in parts if p.startswith("-march=")), None)
    if march is None or any(p not in (f"-march={march}", f"-mtune={march}") for p in parts):
        return None
    ok = subprocess.run([cc, "-O3", *parts, "-fopenmp", "-x", "c", "-c", "-o", os.devnull, "-"], input="",
                        capture_output=True, text=True).returncode == 0
    return flags if ok else None


def _expected_uarchs() -> list[str]:
    return [u for u in _host_runs() if _compiler_flags(u) is not None]


def _uarch_presets() -> list[dict]:
    return [t for t in (preset(n) for n in preset_names()) if t is not None and "uarch" in t]


def _bits(features: set[str]) -> int:
    return 512 if "avx512f" in features else 256 if ("avx2" in features or "avx" in features) else 128


def test_the_table_is_known_to_archspec():
    assert set(UARCH_TABLE) <= set(archspec.cpu.TARGETS)
    assert host_uarch() == archspec.cpu.host().name


def test_uarch_presets_are_exactly_those_the_host_runs_and_the_compiler_builds():
    expected = _expected_uarchs()
    cores = _cores()
    names = [n for n in preset_names() if any(n.startswith(f"cpu-{u}-t") for u in UARCH_TABLE)]
    want = [f"cpu-{u}-t{n}" for u in expected for n in ([1, cores] if cores > 1 else [1])]
    assert names == want
    for u in expected:
        t = preset(f"cpu-{u}-t1")
        assert (t["name"], t["isa"], t["uarch"], t["threads"]) == (f"cpu-{u}-t1", u, u, 1)
        assert t["flags"] == f"-O3 {_compiler_flags(u)} -fopenmp"
        assert f"-march={t['march']}" in t["flags"].split() and t["march"] in ALLOWED_MARCH
        assert preset(f"cpu-{u}") == t  # no thread suffix: one thread
        assert check_local_target(t) == t
        for k in ("vendor", "model", "arch", "cores", "compiler", "l1d_kb", "l2_kb", "l3_kb"):
            assert t.get(k) == preset("cpu-x86-64-t1").get(k)


def test_vector_width_and_registers_follow_the_uarch_features():
    native = preset("cpu-native-t1")["vector_bits"]
    for t in _uarch_presets():
        features = set(archspec.cpu.TARGETS[t["uarch"]].features)
        assert t["vector_bits"] == _bits(features) <= native  # the -march's width, not the host's
        assert t["vector_registers"] == (32 if "avx512f" in features else 16)


def test_isa_level_presets_still_exist_unchanged():
    names = preset_names()
    levels = [f"cpu-{isa}-t1" for isa in MARCH_LEVELS]
    assert set(levels) <= set(names)
    assert names[0] == "cpu-native-t1" and names.index("cpu-x86-64-t1") < len(MARCH_LEVELS) * 2
    for n in levels:
        t = preset(n)
        # new keys would change the level presets' target_key and orphan stored records
        assert set(t) <= {"kind", "name", "vendor", "model", "arch", "isa", "march", "vector_bits", "threads",
                          "cores", "compiler", "flags", "l1d_kb", "l2_kb", "l3_kb", "cpu_flags_key"}
        assert t["flags"] == f"-O3 -march={t['march']} -fopenmp"


def test_a_uarch_the_host_cannot_run_has_no_preset():
    runs = set(_host_runs())
    foreign = [u for u in UARCH_TABLE if u not in runs]
    if not foreign:
        pytest.skip(f"this host ({archspec.cpu.host().name}) runs every uarch of the table")
    u = foreign[-1]
    assert preset(f"cpu-{u}-t1") is None
    with pytest.raises(ValueError, match="not a local preset"):
        local_target(f"cpu-{u}-t1")
    forged = dict(preset("cpu-x86-64-t1"), name=f"cpu-{u}-t1", isa=u, uarch=u)
    with pytest.raises(ValueError, match="not a local preset"):
        check_local_target(forged)


def test_unknown_thread_counts_and_names_are_refused():
    assert preset(f"cpu-haswell-t{_cores() + 1}") is None
    assert preset("cpu-pentium4-t1") is None
    for t in _uarch_presets():
        bad = dict(t, vector_registers=t["vector_registers"] * 2)
        with pytest.raises(ValueError, match="differs from this machine"):
            check_local_target(bad)


def test_the_preset_flags_reach_gcc():
    """A tiny source built through ``build`` reports the ISA macros gcc defined: they are those of
    the uarch's archspec features (e.g. no __AVX512F__ for cpu-haswell on an AVX-512 host)."""
    presets = [t for t in _uarch_presets() if t["threads"] == 1]
    if not presets:
        pytest.skip(f"no uarch of the table runs on this host ({archspec.cpu.host().name})")
    checks = "\n".join(f"#ifdef {m}\n    mask |= 1 << {i};\n#endif" for i, m in enumerate(FEATURE_MACROS))
    src = f"int isa_mask(void) {{\n    int mask = 0;\n{checks}\n    return mask;\n}}\n"
    for t in presets:
        assert f"-march={t['march']}" in target_flags(t)
        lib = ctypes.CDLL(str(build(t, src).path))
        mask = lib.isa_mask()
        features = set(archspec.cpu.TARGETS[t["uarch"]].features)
        want = sum(1 << i for i, f in enumerate(FEATURE_MACROS.values()) if f in features)
        assert mask == want, (t["name"], bin(mask), bin(want))
        seen = {f for i, f in enumerate(FEATURE_MACROS.values()) if mask >> i & 1}
        assert _bits(seen) == t["vector_bits"]


def test_the_most_recent_uarch_preset_builds_and_runs():
    presets = [t for t in _uarch_presets() if t["threads"] == 1]
    if not presets:
        pytest.skip(f"no uarch of the table runs on this host ({archspec.cpu.host().name})")
    t = max(presets, key=lambda p: len(archspec.cpu.TARGETS[p["uarch"]].ancestors))
    w = {"family": "matmul", "M": 32, "N": 32, "K": 32}
    cfg = get_family("matmul").default_config(w, t)
    assert cfg["vec"] == t["vector_bits"] // 32
    rec = LocalBackend(FAST).measure(t, w, cfg)
    assert rec.status == "ok", rec.error
    assert rec.target["uarch"] == t["uarch"] and rec.costs
