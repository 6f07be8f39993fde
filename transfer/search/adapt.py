"""Adapting a neighbour's config to the query's schedule space.

Rules (in order):
1. knobs with the same name map directly; knobs the space does not have are dropped;
2. a value that is not allowed snaps to the nearest allowed value -- on a log scale for
   positive numeric knobs (so 48 -> 32 or 64, never 1), by absolute distance otherwise;
   a categorical value that is not allowed counts as missing;
3. knobs the neighbour lacks take the space's default (``defaults``) or the middle value;
4. constraints are repaired by a bounded breadth-first walk over one-knob moves from the
   snapped config; the nearest valid config found wins;
5. what still fails validation is dropped and counted (``AdaptReport.dropped``).

Every config returned has passed ``Space.validate``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tunedb.transfer.search.space import InvalidConfig, Knob, Space


@dataclass
class AdaptReport:
    """Counts of what adaptation did (for the tune summary)."""

    given: int = 0
    direct: int = 0          # valid as given
    snapped: int = 0         # at least one value moved to an allowed value
    filled: int = 0          # at least one missing knob filled from the default
    repaired: int = 0        # a constraint repaired by a local walk
    dropped: int = 0         # could not be made valid
    duplicates: int = 0      # adapted onto a config already produced
    reasons: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in ("given", "direct", "snapped", "filled", "repaired", "dropped",
                                              "duplicates")}


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def snap_value(knob: Knob, value: Any) -> tuple[Any, bool]:
    """(allowed value nearest to ``value``, whether it moved); raises InvalidConfig when impossible."""
    for v in knob.values:
        if type(v) is type(value) and v == value:
            return v, False
    if _is_num(value) and knob.numeric:
        if value > 0 and all(v > 0 for v in knob.values):
            lv = math.log(value)
            best = min(knob.values, key=lambda v: (abs(math.log(v) - lv), v))
        else:
            best = min(knob.values, key=lambda v: (abs(v - value), v))
        return best, True
    raise InvalidConfig(f"knob '{knob.name}': {value!r} has no counterpart among {list(knob.values)[:8]}")


def _middle(knob: Knob) -> Any:
    return knob.values[len(knob.values) // 2]


def _repair(space: Space, cfg: dict, max_states: int = 2000) -> dict | None:
    """Nearest valid config by one-knob moves (breadth-first), or None."""
    if space.is_valid(cfg):
        return cfg
    from collections import deque

    seen = {tuple(cfg[k.name] for k in space.knobs)}
    q = deque([cfg])
    while q and len(seen) < max_states:
        cur = q.popleft()
        for k in space.knobs:
            i = k.index(cur[k.name])
            for j in (i - 1, i + 1):
                if 0 <= j < len(k.values) and j != i:
                    cand = dict(cur)
                    cand[k.name] = k.values[j]
                    sig = tuple(cand[x.name] for x in space.knobs)
                    if sig in seen:
                        continue
                    seen.add(sig)
                    if space.is_valid(cand):
                        return cand
                    q.append(cand)
    return None


def hardware_scale(src_target: Mapping[str, Any], dst_target: Mapping[str, Any],
                   hardware_knobs: Mapping[str, str]) -> dict[str, float]:
    """Per-knob factors dst[key] / src[key] for knobs tied to a hardware property (e.g. a vector
    width knob scales with ``vector_bits``); knobs whose property is missing on either side get none."""
    out = {}
    for knob, key in hardware_knobs.items():
        a, b = src_target.get(key), dst_target.get(key)
        if _is_num(a) and _is_num(b) and a > 0 and b > 0 and a != b:
            out[knob] = float(b) / float(a)
    return out


def adapt_config(config: Mapping[str, Any], space: Space, defaults: Mapping[str, Any] | None = None,
                 report: AdaptReport | None = None, scale: Mapping[str, float] | None = None) -> dict | None:
    """``config`` mapped into ``space`` (validated), or None when it cannot be repaired.
    ``scale``: factors for hardware-tied knobs (see ``hardware_scale``), applied before snapping."""
    rep = report if report is not None else AdaptReport()
    rep.given += 1
    if scale:
        config = {k: (v * scale[k] if k in scale and _is_num(v) else v) for k, v in config.items()}
        config = {k: (int(v) if isinstance(v, float) and v.is_integer() else v) for k, v in config.items()}
    if space.is_valid(config):
        rep.direct += 1
        return space.validate(config)
    out: dict[str, Any] = {}
    snapped = filled = False
    try:
        for k in space.knobs:
            if k.name in config:
                try:
                    v, moved = snap_value(k, config[k.name])
                    snapped |= moved
                except InvalidConfig:
                    v = None
                if v is not None:
                    out[k.name] = v
                    continue
            d = (defaults or {}).get(k.name)
            out[k.name] = d if d is not None and any(type(d) is type(x) and d == x for x in k.values) else _middle(k)
            filled = True
    except InvalidConfig as e:  # pragma: no cover - snap_value failures are handled above
        rep.dropped += 1
        rep.reasons.append(str(e))
        return None
    rep.snapped += int(snapped)
    rep.filled += int(filled)
    fixed = _repair(space, out)
    if fixed is None:
        rep.dropped += 1
        rep.reasons.append("constraints could not be repaired")
        return None
    if fixed is not out:
        rep.repaired += 1
    return space.validate(fixed)


def adapt_many(configs: Iterable[Mapping[str, Any]], space: Space, defaults: Mapping[str, Any] | None = None,
               report: AdaptReport | None = None, scale: Mapping[str, float] | None = None) -> list[dict]:
    """Adapt each config; duplicates after adaptation are dropped (counted), order kept."""
    rep = report if report is not None else AdaptReport()
    out, seen = [], set()
    for c in configs:
        a = adapt_config(c, space, defaults, rep, scale)
        if a is None:
            continue
        sig = tuple(sorted(a.items()))
        if sig in seen:
            rep.duplicates += 1
            continue
        seen.add(sig)
        out.append(a)
    return out
