"""Adapting a neighbour's config into another schedule space (hand-made spaces)."""

from __future__ import annotations

from tunedb.transfer.search.adapt import AdaptReport, adapt_config, adapt_many, snap_value
from tunedb.transfer.search.space import Constraint, Knob, Space

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
