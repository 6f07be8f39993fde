"""Adapting a neighbour's config into another schedule space (hand-made spaces)."""

from __future__ import annotations

import pytest

from tunedb.transfer.search.adapt import AdaptReport, adapt_config, adapt_many, snap_value
from tunedb.transfer.space import Constraint, Knob, Space

TILE = Knob("tile", (1, 2, 4, 8, 16, 32, 64))
UNROLL = Knob("unroll", (1, 2, 4))
ORDER = Knob("order", (0, 1, 2))


def test_same_knobs_map_directly():
    sp = Space((TILE, UNROLL))
    rep = AdaptReport()
    assert adapt_config({"tile": 8, "unroll": 2}, sp, report=rep) == {"tile": 8, "unroll": 2}
    assert rep.direct == 1 and rep.snapped == 0


def test_values_snap_on_a_log_scale_and_clamp():
    assert snap_value(TILE, 48) == (32, True) or snap_value(TILE, 48) == (64, True)
    assert snap_value(TILE, 3) in ((2, True), (4, True))
    assert snap_value(TILE, 1000) == (64, True)   # clamped to the largest
    assert snap_value(TILE, 0.1) == (1, True)      # clamped to the smallest
    sp = Space((TILE, UNROLL))
    rep = AdaptReport()
    assert adapt_config({"tile": 100, "unroll": 3}, sp, report=rep) == {"tile": 64, "unroll": 4}
    assert rep.snapped == 1


def test_unknown_knobs_dropped_and_missing_filled_from_defaults():
    sp = Space((TILE, UNROLL, ORDER))
    rep = AdaptReport()
    out = adapt_config({"tile": 16, "vector": 8}, sp, defaults={"unroll": 4, "order": 2}, report=rep)
    assert out == {"tile": 16, "unroll": 4, "order": 2}
    assert rep.filled == 1
    # without a default the middle value is used
    assert adapt_config({"tile": 16}, sp)["order"] == 1


def test_constraints_are_repaired_or_the_config_dropped():
    sp = Space((TILE, UNROLL), (Constraint("tile * unroll <= 16", lambda c: c["tile"] * c["unroll"] <= 16),))
    rep = AdaptReport()
    out = adapt_config({"tile": 16, "unroll": 4}, sp, report=rep)
    assert out is not None and sp.is_valid(out) and rep.repaired == 1
    assert out in ({"tile": 4, "unroll": 4}, {"tile": 16, "unroll": 1}, {"tile": 8, "unroll": 2})
    impossible = Space((TILE,), (Constraint("never", lambda c: False),))
    rep2 = AdaptReport()
    assert adapt_config({"tile": 4}, impossible, report=rep2) is None
    assert rep2.dropped == 1


def test_categorical_value_without_counterpart_counts_as_missing():
    layout = Knob("layout", ("NCHW", "NHWC"))
    sp = Space((layout, TILE))
    out = adapt_config({"layout": "HWCN", "tile": 4}, sp, defaults={"layout": "NHWC"})
    assert out == {"layout": "NHWC", "tile": 4}
    # a number never matches a string value, nor a bool an int
    assert adapt_config({"layout": 1, "tile": True}, sp, defaults={"layout": "NCHW", "tile": 2}) == \
        {"layout": "NCHW", "tile": 2}


def test_adapt_many_dedups_and_everything_returned_validates():
    sp = Space((TILE, UNROLL))
    rep = AdaptReport()
    out = adapt_many([{"tile": 30, "unroll": 2}, {"tile": 32, "unroll": 2}, {"tile": "x; rm -rf /"}], sp, report=rep)
    assert out[0] == {"tile": 32, "unroll": 2} and len(out) == 2
    assert rep.duplicates == 1
    assert all(sp.is_valid(c) for c in out)


def test_hardware_tied_knobs_scale_with_the_target():
    from tunedb.transfer.search.adapt import hardware_scale

    vec = Knob("vec", (4, 8, 16))
    sp = Space((vec, TILE))
    sse2, avx512 = {"vector_bits": 128}, {"vector_bits": 512}
    scale = hardware_scale(sse2, avx512, {"vec": "vector_bits"})
    assert scale == {"vec": 4.0}
    assert adapt_config({"vec": 4, "tile": 8}, sp, scale=scale) == {"vec": 16, "tile": 8}
    back = hardware_scale(avx512, sse2, {"vec": "vector_bits"})
    assert adapt_config({"vec": 16, "tile": 8}, sp, scale=back) == {"vec": 4, "tile": 8}
    assert hardware_scale({}, avx512, {"vec": "vector_bits"}) == {}  # unknown on one side: no scaling


# --------------------------------------------------------------------------- retargeting across hardware
MM = {"family": "matmul", "M": 256, "N": 256, "K": 256}
SSE2_BOX = {"kind": "cpu", "name": "sse2-box", "vector_bits": 128, "l1d_kb": 32, "l2_kb": 256}
AVX2_BOX = {"kind": "cpu", "name": "avx2-box", "vector_bits": 256, "l1d_kb": 32, "l2_kb": 1024}
AVX512_BOX = {"kind": "cpu", "name": "avx512-box", "vector_bits": 512, "l1d_kb": 48, "l2_kb": 2048}
NEON_BOX = {"kind": "cpu", "name": "neon-box", "arch": "aarch64", "vector_bits": 128}  # 32 vector registers
#: tuned on the SSE2 box: its register tile (register_tile(4, 16) = 4 x 8) and some cache blocking
SSE2_CFG = {"mc": 128, "nc": 512, "kc": 256, "order": 2, "mr": 4, "nr": 8, "vec": 4, "pack": 0, "unroll": 2}
CACHE_KNOBS = ("mc", "nc", "kc", "order", "pack", "unroll")


@pytest.mark.parametrize("dest, lanes, registers", [(AVX512_BOX, 16, 32), (AVX2_BOX, 8, 16), (NEON_BOX, 4, 32)],
                         ids=["to-avx512", "to-avx2", "to-32-registers"])
def test_register_blocking_is_rederived_for_the_destination(dest, lanes, registers):
    from tunedb.transfer.kernels import get_family
    from tunedb.transfer.kernels.matmul import register_tile
    from tunedb.transfer.search.adapt import hardware_scale

    fam = get_family("matmul")
    sp, defaults = fam.space(MM), fam.default_config(MM, dest)
    assert sp.is_valid(SSE2_CFG)
    scale = hardware_scale(SSE2_BOX, dest, fam.hardware_knobs) or None
    rep = AdaptReport()
    out = adapt_many([SSE2_CFG], sp, defaults, rep, scale, source_target=SSE2_BOX, dest_target=dest, family=fam)
    first = out[0]
    assert first["vec"] == lanes and (first["mr"], first["nr"]) == register_tile(lanes, registers)
    assert {k: first[k] for k in CACHE_KNOBS} == {k: SSE2_CFG[k] for k in CACHE_KNOBS}
    assert all(sp.is_valid(c) for c in out)
    assert (rep.given, rep.retargeted, rep.dropped) == (1, 1, 0)
    # the second candidate is the scaled source config (the old adaptation), when it differs
    scaled = adapt_config(SSE2_CFG, sp, defaults, scale=scale)
    assert out[1:] == ([scaled] if scaled != first else [])
    assert rep.variants == len(out) - 1 and rep.to_json()["retargeted"] == 1
    # the family may be named instead of given
    assert adapt_many([SSE2_CFG], sp, defaults, None, scale, source_target=SSE2_BOX, dest_target=dest,
                      family="matmul") == out


def test_retargeting_keeps_a_block_at_least_one_tile_wide():
    from tunedb.transfer.kernels import get_family

    fam = get_family("matmul")
    narrow = dict(SSE2_CFG, nc=32)
    (first, *_) = adapt_many([narrow], fam.space(MM), source_target=SSE2_BOX, dest_target=AVX512_BOX, family=fam)
    assert first["nr"] == 64 and first["nc"] == 64 and first["vec"] == 16


def test_same_vector_width_and_registers_leave_configs_as_before():
    from tunedb.transfer.kernels import get_family
    from tunedb.transfer.kernels.matmul import FAST_CONFIG
    from tunedb.transfer.search.adapt import hardware_scale

    fam = get_family("matmul")
    sp = fam.space(MM)
    other = dict(AVX2_BOX, name="avx2-other", l2_kb=512, threads=4)  # caches and threads differ, the SIMD does not
    configs = [SSE2_CFG, FAST_CONFIG, dict(SSE2_CFG, nr=48, vec=8)]
    scale = hardware_scale(AVX2_BOX, other, fam.hardware_knobs) or None
    rep = AdaptReport()
    out = adapt_many(configs, sp, None, rep, scale, source_target=AVX2_BOX, dest_target=other, family=fam)
    assert out == adapt_many(configs, sp, None, None, scale)
    assert out[:2] == [SSE2_CFG, FAST_CONFIG]
    assert (rep.retargeted, rep.variants, rep.given) == (0, 0, 3)


def test_a_family_without_retarget_adapts_as_before():
    from tunedb.transfer.kernels import get_family
    from tunedb.transfer.search.adapt import hardware_scale

    class Plain:  # a plug-in family object with hardware knobs but no retarget method
        hardware_knobs = {"vec": "vector_bits"}

    vec = Knob("vec", (4, 8, 16))
    sp = Space((vec, TILE))
    scale = hardware_scale(SSE2_BOX, AVX512_BOX, Plain.hardware_knobs)
    configs = [{"vec": 4, "tile": 8}, {"vec": 8, "tile": 3}]
    before = adapt_many(configs, sp, scale=scale)
    for fam in (Plain(), None, "no-such-family"):
        rep = AdaptReport()
        assert adapt_many(configs, sp, None, rep, scale, source_target=SSE2_BOX, dest_target=AVX512_BOX,
                          family=fam) == before == [{"vec": 16, "tile": 8}, {"vec": 16, "tile": 4}]
        assert (rep.retargeted, rep.variants) == (0, 0)
    # softmax keeps KernelFamily's default retarget: its vector knob is only scaled
    soft = get_family("softmax")
    w = {"family": "softmax", "M": 64, "N": 256}
    ssp, cfg = soft.space(w), soft.default_config(w, SSE2_BOX)
    sscale = hardware_scale(SSE2_BOX, AVX512_BOX, soft.hardware_knobs)
    rep = AdaptReport()
    assert adapt_many([cfg], ssp, None, rep, sscale, source_target=SSE2_BOX, dest_target=AVX512_BOX,
                      family=soft) == adapt_many([cfg], ssp, scale=sscale)
    assert rep.retargeted == 0
