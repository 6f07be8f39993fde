"""Kernel families: registry, workload validation, spaces, codegen safety, reference correctness."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from tunedb.index.hardware.localcpu import preset, preset_names
from tunedb.transfer.kernels import FAMILIES_ENV, default_config, families, family_default_config, get_family
from tunedb.transfer.kernels import matmul as matmul_mod
from tunedb.transfer.kernels import softmax as softmax_mod
from tunedb.transfer.kernels.build import generate_source
from tunedb.transfer.kernels.target_properties import vector_floats, vector_registers
from tunedb.transfer.kernels.templating import render_template
from tunedb.transfer.measure.backend import LocalBackend, MeasureOptions, TimingProtocol
from tunedb.transfer.space import InvalidConfig

INJECTION = '8); system("reboot"); (1'
FAST = MeasureOptions(protocol=TimingProtocol(warmup=0, min_repeat_ms=0.5, repeat=2), run_timeout_s=60)

MM_PRIME = {"family": "matmul", "M": 37, "N": 53, "K": 29}
CONV_PRIME = {"family": "conv2d", "N": 2, "C": 3, "H": 13, "W": 11, "K": 7, "R": 3, "S": 5, "stride": 2, "pad": 2}
SOFTMAX_PRIME = {"family": "softmax", "M": 7, "N": 131}
NPMM_PRIME = {"family": "numpy_matmul", "M": 31, "N": 17, "K": 43}


def test_registry_lists_builtin_and_registered_families(monkeypatch):
    monkeypatch.delenv(FAMILIES_ENV, raising=False)
    assert families() == ["conv2d", "matmul", "numpy_matmul", "softmax"]
    assert {get_family(n).kind for n in families()} == {"c", "numpy"}
    with pytest.raises(ValueError, match="unknown kernel family"):
        get_family("debug_fault")  # the fault family is not reachable unless registered
    with pytest.raises(ValueError):
        get_family("nope")
    monkeypatch.setenv(FAMILIES_ENV, "debug_fault:DebugFaultFamily")
    assert get_family("debug_fault").name == "debug_fault"
    assert "debug_fault" in families()
    monkeypatch.setenv(FAMILIES_ENV, "debug_fault")
    with pytest.raises(ValueError, match="module:Class"):
        families()


@pytest.mark.parametrize("workload, match", [
    ({"family": "matmul", "M": 0, "N": 4, "K": 4}, "M=0"),
    ({"family": "matmul", "M": "8", "N": 4, "K": 4}, "M='8'"),
    ({"family": "matmul", "M": True, "N": 4, "K": 4}, "M=True"),
    ({"family": "matmul", "M": 8.5, "N": 4, "K": 4}, "M=8.5"),
    ({"family": "matmul", "M": 8, "N": 4}, "needs integer K"),
    ({"family": "matmul", "M": 8, "N": 4, "K": 4, "X": 1}, "unknown workload key"),
    ({**CONV_PRIME, "R": 9, "pad": 0, "H": 5}, "larger than the padded input"),
    ({**CONV_PRIME, "layout": "CHWN"}, "layout"),
    ({"family": "softmax", "M": 4, "N": -1}, "N=-1"),
    ({"family": "matmul", "M": 16384, "N": 16384, "K": 16384}, "larger than"),
])
def test_bad_workloads_are_clear_value_errors(workload, match):
    fam = get_family(workload["family"])
    with pytest.raises(ValueError, match=match):
        fam.validate_workload(workload)
    with pytest.raises(ValueError):
        fam.space(workload)


def test_workload_defaults_and_integral_floats():
    w = get_family("conv2d").validate_workload({**CONV_PRIME, "H": 13.0})
    assert w["layout"] == "NCHW" and type(w["H"]) is int


@pytest.mark.parametrize("workload", [MM_PRIME, CONV_PRIME, SOFTMAX_PRIME, NPMM_PRIME])
def test_space_default_valid_and_rejects_junk(workload):
    fam = get_family(workload["family"])
    sp = fam.space(workload)
    cfg = fam.default_config(workload)
    assert sp.validate(cfg) == cfg
    knob = sp.knobs[0].name
    for bad in (INJECTION, True, float(cfg[knob]), str(cfg[knob]), None, 10**9):
        with pytest.raises(InvalidConfig):
            sp.validate({**cfg, knob: bad})
    with pytest.raises(InvalidConfig):
        sp.validate({**cfg, "extra": 1})
    js = sp.to_json()
    assert js["size"] > 1 and [k["name"] for k in js["knobs"]] == sp.names


def test_matmul_constraints():
    sp = get_family("matmul").space(MM_PRIME)
    good = dict(get_family("matmul").default_config(MM_PRIME))
    with pytest.raises(InvalidConfig, match="nr % vec"):
        sp.validate({**good, "nr": 8, "vec": 16})
    with pytest.raises(InvalidConfig, match="accumulator"):
        sp.validate({**good, "mr": 16, "nr": 64, "vec": 8})


def test_render_template_pastes_only_ints():
    assert render_template("x=@A@;", {"A": 7}) == "x=7;"
    for bad in ("8); system(\"reboot\"); (1", True, 8.0, None):
        with pytest.raises(TypeError):
            render_template("x=@A@;", {"A": bad})
    with pytest.raises(ValueError):
        render_template("x=@A@ @B@;", {"A": 1})
    with pytest.raises(ValueError):
        render_template("x=@A@;", {"A": 1, "B": 2})


@pytest.mark.parametrize("workload", [MM_PRIME, CONV_PRIME, SOFTMAX_PRIME])
def test_generate_source_validates_first(workload):
    fam = get_family(workload["family"])
    cfg = fam.default_config(workload)
    src = generate_source(workload, cfg)
    assert re.search(r"@[A-Z]", src) is None and "kernel(" in src
    with pytest.raises(InvalidConfig):
        generate_source(workload, {**cfg, fam.space(workload).knobs[0].name: INJECTION})


def _configs(workload, fixed, target=None):
    fam = get_family(workload["family"])
    sp = fam.space(workload)
    rng = random.Random(1)
    out = [fam.default_config(workload), *fixed]
    if fam.default_config(workload, target) not in out:  # the target's own default too
        out.insert(1, fam.default_config(workload, target))
    out += [sp.sample(rng) for _ in range(2)]
    for c in out:
        sp.validate(c)
    return out


CASES = [
    (MM_PRIME, [
        # tiles larger than every dim, unpacked, odd loop order
        {"mc": 512, "nc": 2048, "kc": 1024, "order": 5, "mr": 6, "nr": 16, "vec": 8, "pack": 0, "unroll": 2},
        # small tiles: many edge tiles, K split into several blocks, packed
        {"mc": 16, "nc": 32, "kc": 16, "order": 3, "mr": 12, "nr": 32, "vec": 16, "pack": 1, "unroll": 8},
        {"mc": 32, "nc": 64, "kc": 16, "order": 2, "mr": 1, "nr": 4, "vec": 4, "pack": 0, "unroll": 1},
    ]),
    ({"family": "matmul", "M": 1, "N": 1, "K": 1}, []),
    (CONV_PRIME, [
        {"tile_k": 64, "tile_q": 32, "order": 1, "vec_dim": 0, "unroll": 4},
        {"tile_k": 1, "tile_q": 1, "order": 0, "vec_dim": 1, "unroll": 2},
    ]),
    ({**CONV_PRIME, "layout": "NHWC", "stride": 1, "pad": 0}, [
        {"tile_k": 4, "tile_q": 64, "order": 0, "vec_dim": 1, "unroll": 1},
        {"tile_k": 32, "tile_q": 2, "order": 1, "vec_dim": 0, "unroll": 4},
    ]),
    (SOFTMAX_PRIME, [
        {"online": 1, "vec": 16, "accs": 4, "fast_exp": 0, "rows": 64},
        {"online": 0, "vec": 4, "accs": 1, "fast_exp": 1, "rows": 1},
    ]),
    ({"family": "softmax", "M": 3, "N": 5}, [{"online": 1, "vec": 16, "accs": 4, "fast_exp": 1, "rows": 4}]),
    (NPMM_PRIME, [{"bm": 8, "bn": 1024, "bk": 16, "order": 1}]),
]


@pytest.mark.parametrize("workload, fixed", CASES, ids=lambda x: str(x.get("family") if isinstance(x, dict) else ""))
def test_reference_correct_for_several_configs(workload, fixed):
    """Every config's first run is checked against NumPy inside the worker: all must come back ok."""
    be = LocalBackend(FAST)
    target = preset("cpu-native")
    for cfg in _configs(workload, fixed, target):
        rec = be.measure(target, workload, cfg)
        assert rec.status == "ok", (cfg, rec.error)
        assert len(rec.costs) == 2 and all(c > 0 for c in rec.costs)
        assert rec.meta["max_abs_err"] is not None and rec.meta["gflops"] > 0


def test_references_agree_with_direct_formulas():
    rng = np.random.default_rng(0)
    conv = get_family("conv2d")
    w = conv.validate_workload({"family": "conv2d", "N": 1, "C": 2, "H": 5, "W": 4, "K": 3, "R": 3, "S": 2,
                                "stride": 2, "pad": 1})
    x = rng.standard_normal((1, 2, 5, 4))
    wt = rng.standard_normal((3, 2, 3, 2))
    ref = conv.reference(w, {"x": x, "w": wt})
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    p, q = conv.out_hw(w)
    direct = np.zeros((1, 3, p, q))
    for k in range(3):
        for i in range(p):
            for j in range(q):
                direct[0, k, i, j] = (xp[0, :, 2 * i:2 * i + 3, 2 * j:2 * j + 2] * wt[k]).sum()
    np.testing.assert_allclose(ref, direct, rtol=1e-12)
    wn = {**w, "layout": "NHWC"}
    ref2 = conv.reference(wn, {"x": x.transpose(0, 2, 3, 1), "w": wt.transpose(2, 3, 1, 0)})
    np.testing.assert_allclose(ref2, direct.transpose(0, 2, 3, 1), rtol=1e-12)
    sm = get_family("softmax")
    xs = rng.standard_normal((3, 7))
    np.testing.assert_allclose(sm.reference({"M": 3, "N": 7}, {"x": xs}).sum(axis=1), 1.0)


def test_flops_and_bytes():
    mm = get_family("matmul")
    assert mm.flops(MM_PRIME) == 2 * 37 * 53 * 29
    assert mm.bytes(MM_PRIME) == 4 * (37 * 29 + 29 * 53 + 37 * 53)
    conv = get_family("conv2d")
    p, q = conv.out_hw(conv.validate_workload(CONV_PRIME))
    assert (p, q) == (8, 6)  # (13 + 4 - 3) // 2 + 1, (11 + 4 - 5) // 2 + 1
    assert conv.flops(CONV_PRIME) == 2 * 2 * 7 * p * q * 3 * 3 * 5


# ------------------------------------------------------------------ defaults derived from the target
SSE2 = {"kind": "cpu", "name": "sse2-box", "vector_bits": 128}
AVX2 = {"kind": "cpu", "name": "epyc-avx2", "vector_bits": 256, "l1d_kb": 32, "l2_kb": 512, "l3_kb": 16384,
        "cores": 8, "threads": 1}
AVX512 = {"kind": "cpu", "name": "spr-avx512", "vector_bits": 512, "l1d_kb": 48, "l2_kb": 2048, "threads": 4}
SYNTHETIC = {"sse2": SSE2, "avx2": AVX2, "avx512": AVX512}
#: vector width in floats and vector registers each synthetic target must get
EXPECTED = {"sse2": (4, 16), "avx2": (8, 16), "avx512": (16, 32)}
WORKLOADS = [MM_PRIME, {"family": "matmul", "M": 160, "N": 160, "K": 160}, {"family": "matmul", "M": 1, "N": 1, "K": 1},
             {"family": "matmul", "M": 2048, "N": 4096, "K": 1024}, CONV_PRIME,
             {"family": "conv2d", "N": 1, "C": 64, "H": 28, "W": 28, "K": 64, "R": 3, "S": 3, "stride": 1, "pad": 1,
              "layout": "NHWC"}, SOFTMAX_PRIME, {"family": "softmax", "M": 512, "N": 1024},
             {"family": "softmax", "M": 3, "N": 5}, NPMM_PRIME, {"family": "numpy_matmul", "M": 512, "N": 512, "K": 512}]


def _targets():
    out = [(name, preset(name)) for name in preset_names()]
    return out + list(SYNTHETIC.items()) + [("none", None)]


def _footprint(family: str, cfg: dict) -> int | None:
    return {"matmul": matmul_mod.register_footprint, "softmax": softmax_mod.register_footprint}.get(
        family, lambda c: None)(cfg)


@pytest.mark.parametrize("name, target", _targets(), ids=[n for n, _ in _targets()])
def test_default_config_fits_the_target(name, target):
    """Every family's default for every local preset and synthetic ISA: valid, vector knob = the
    target's vector width in floats, register footprint within the target's vector registers."""
    lanes = vector_floats(target)
    regs = vector_registers(target)
    if name in EXPECTED:
        assert (lanes, regs) == EXPECTED[name]
    if target is not None and target.get("name", "").startswith("cpu-"):
        assert lanes == target["vector_bits"] // 32
        assert regs == (32 if target["vector_bits"] == 512 else 16)
    for w in WORKLOADS:
        fam = get_family(w["family"])
        cfg = fam.default_config(w, target)
        assert fam.space(w).validate(cfg) == cfg
        assert default_config(w, target) == cfg
        if "vec" in cfg:
            assert cfg["vec"] == lanes, (w, cfg)
        fp = _footprint(w["family"], cfg)
        if fp is not None:
            assert fp <= regs, (w, cfg, fp, regs)


def test_default_config_pinned_per_isa():
    """The derivation written out: register tile by ISA, cache blocks by the target's caches."""
    w = {"family": "matmul", "M": 160, "N": 160, "K": 160}
    mm = get_family("matmul")
    tile = {k: {key: mm.default_config(w, t)[key] for key in ("vec", "mr", "nr")} for k, t in SYNTHETIC.items()}
    assert tile == {"sse2": {"vec": 4, "mr": 4, "nr": 8}, "avx2": {"vec": 8, "mr": 4, "nr": 16},
                    "avx512": {"vec": 16, "mr": 4, "nr": 64}}
    # AVX2 with 32 KiB L1d, 512 KiB L2, 16 MiB L3 over 8 cores: kc*(mr+nr)*4 <= 24 KiB -> kc 256;
    # A block mc x kc floats <= L2/2 -> mc 256; B panel kc x nc floats <= (L3/8)/2 -> nc 1024
    assert mm.default_config({"family": "matmul", "M": 2048, "N": 2048, "K": 2048}, AVX2) == {
        "mc": 256, "nc": 1024, "kc": 256, "order": 0, "mr": 4, "nr": 16, "vec": 8, "pack": 1, "unroll": 4}
    # nothing larger than the 160^3 product needs (256 is the smallest allowed value >= 160)
    assert mm.default_config(w, AVX2)["mc"] == 256 and mm.default_config(w, AVX2)["kc"] == 256
    # AVX-512 with 48 KiB L1d: kc*(4+64)*4 <= 36 KiB -> 128
    assert mm.default_config(w, AVX512)["kc"] == 128
    # the old one-argument call is the portable default (the SSE2 baseline), as is target=None
    assert mm.default_config(w) == mm.default_config(w, None) == mm.default_config(w, SSE2)
    assert mm.default_config(w)["vec"] == 4
    # the AVX-512-only config the family used to default to spills on AVX2: never chosen there
    assert matmul_mod.register_footprint(matmul_mod.FAST_CONFIG) > 16
    sm = get_family("softmax")
    assert [sm.default_config({"family": "softmax", "M": 512, "N": 1024}, t)["vec"] for t in SYNTHETIC.values()] == \
        [4, 8, 16]
    assert sm.default_config({"family": "softmax", "M": 3, "N": 5}, AVX2)["accs"] == 1  # rows shorter than 2 vectors
    conv = get_family("conv2d")
    assert conv.default_config(WORKLOADS[5], AVX2) == {"tile_k": 64, "tile_q": 32, "order": 1, "vec_dim": 0,
                                                       "unroll": 2}


@pytest.mark.parametrize("registers, vec", [(16, 4), (16, 8), (32, 16), (32, 4), (8, 8), (2, 16)])
def test_register_tile_fits_any_register_file(registers, vec):
    mr, nr = matmul_mod.register_tile(vec, registers)
    assert nr % vec == 0 and mr in matmul_mod.MR_VALUES and nr in matmul_mod.NR_VALUES
    if registers >= 4:
        assert matmul_mod.register_footprint({"mr": mr, "nr": nr, "vec": vec}) <= registers


def test_unknown_or_odd_target_properties_fall_back_to_portable():
    mm = get_family("matmul")
    portable = mm.default_config(MM_PRIME)
    for t in ({}, {"vector_bits": "512"}, {"vector_bits": True}, {"vector_bits": -1, "l1d_kb": None},
              {"kind": "gpu", "name": "h100"}):
        assert mm.default_config(MM_PRIME, t) == portable
    assert mm.default_config(MM_PRIME, {"isa": "x86-64-v3"})["vec"] == 8  # the width of a named ISA
    assert vector_registers({"arch": "aarch64", "vector_bits": 128}) == 32


def test_local_job_defaults_come_from_the_target(monkeypatch):
    from tunedb.transfer.measure.jobs import local_job

    w = {"family": "matmul", "M": 160, "N": 160, "K": 160}
    for name in ("cpu-x86-64-v3-t1", "cpu-x86-64-t1", "cpu-native-t1"):
        t = preset(name)
        job = local_job(t, w)
        assert job.defaults == get_family("matmul").default_config(w, t)
        assert job.defaults["vec"] == t["vector_bits"] // 32
    # a plug-in family whose default_config takes only the workload still serves a job
    monkeypatch.setenv(FAMILIES_ENV, "debug_fault:DebugFaultFamily")
    fam = get_family("debug_fault")
    assert family_default_config(fam, {"family": "debug_fault", "n": 4}, preset("cpu-native-t1")) == {"mode": 0}
    assert local_job(preset("cpu-native-t1"), {"family": "debug_fault", "n": 4}).defaults == {"mode": 0}


def test_a_listed_space_keeps_its_configs_in_knob_value_order():
    """The same set of configs is the same space whatever order it is listed in (a Kernel Tuner
    searchspace, a cache file, a DB): ``finite`` is sorted by knob-value index, first knob
    first, the order in which a space without a list enumerates its configs."""
    import random

    from tunedb.transfer.space import Knob, Space

    knobs = (Knob("a", (4, 1, 2)), Knob("b", ("x", "y")), Knob("c", (True, False)))
    plain = Space(knobs=knobs)
    every = list(plain)
    assert every[:3] == [{"a": 4, "b": "x", "c": True}, {"a": 4, "b": "x", "c": False}, {"a": 4, "b": "y", "c": True}]
    shuffled = list(every)
    random.Random(1).shuffle(shuffled)
    assert shuffled != every
    listed = Space(knobs=knobs, finite=shuffled)
    assert list(listed.finite) == every == list(listed)
    assert listed.sample(random.Random(5)) == Space(knobs=knobs, finite=list(reversed(every))).sample(random.Random(5))
    # a value outside its knob sorts after the knob's values, the given order kept among equals
    odd = Space(knobs=knobs, finite=[{"a": 9, "b": "x", "c": True}, every[-1], {"a": 9, "b": "x", "c": False}])
    assert list(odd.finite) == [every[-1], {"a": 9, "b": "x", "c": True}, {"a": 9, "b": "x", "c": False}]
