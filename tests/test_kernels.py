"""Kernel families: registry, workload validation, spaces, codegen safety, reference correctness."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from tunedb.index.hardware.localcpu import preset
from tunedb.transfer.kernels import FAMILIES_ENV, families, get_family
from tunedb.transfer.kernels.build import generate_source
from tunedb.transfer.kernels.templating import render_template
from tunedb.transfer.measure.backend import LocalBackend, MeasureOptions, TimingProtocol
from tunedb.transfer.search.space import InvalidConfig

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


def _configs(workload, fixed):
    fam = get_family(workload["family"])
    sp = fam.space(workload)
    rng = random.Random(1)
    out = [fam.default_config(workload), *fixed]
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
    for cfg in _configs(workload, fixed):
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
