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

Across hardware (``adapt_many`` given both targets and the kernel family): a family that
overrides ``KernelFamily.retarget`` re-derives its hardware-tied knobs for the destination first
(the matmul family: the register blocking for the destination's vector width and registers);
those candidates replace the source configs, and the source configs with their hardware knobs
scaled (``hardware_scale``) follow as extra candidates.  Other families: the hardware knobs are
scaled, as before.

Every config returned has passed ``Space.validate``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tunedb.transfer.space import InvalidConfig, Knob, Space


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
    retargeted: int = 0      # configs whose hardware-tied knobs the family re-derived for the destination
    variants: int = 0        # extra candidates kept besides each config's own (its scaled variant, ...)
    reasons: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in ("given", "direct", "snapped", "filled", "repaired", "dropped",
                                              "duplicates", "retargeted", "variants")}


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


def _retargeter(family: Any) -> Callable[..., list] | None:
    """``family``'s own ``retarget`` method; None for no family, an unknown family name, or a family
    without one or with ``KernelFamily``'s default (which keeps every config)."""
    if isinstance(family, str):
        from tunedb.transfer.kernels import get_family

        try:
            family = get_family(family)
        except ValueError:
            return None
    fn = getattr(family, "retarget", None) if family is not None else None
    if not callable(fn):
        return None
    from tunedb.transfer.kernels.base import KernelFamily

    if getattr(type(family), "retarget", None) is KernelFamily.retarget:
        return None
    return fn


def adapt_many(configs: Iterable[Mapping[str, Any]], space: Space, defaults: Mapping[str, Any] | None = None,
               report: AdaptReport | None = None, scale: Mapping[str, float] | None = None, *,
               source_target: Mapping[str, Any] | None = None, dest_target: Mapping[str, Any] | None = None,
               family: Any = None) -> list[dict]:
    """Adapt each config; duplicates after adaptation are dropped (counted), order kept.

    ``source_target`` (where the configs were tuned), ``dest_target`` (the space's target) and
    ``family`` (a kernel family object or a registered family name; an unknown name counts as
    none): when all three are given and the family overrides ``KernelFamily.retarget``, each
    config is replaced by ``family.retarget(config, source_target, dest_target)``: its first
    candidate takes the config's place, adapted without ``scale`` (the family set its hardware
    knobs for the destination); its other candidates and then the config adapted with ``scale``
    (the scaled variant) follow after every config's first candidate, each kept when it adapts and
    is not already in the output (``AdaptReport.variants``; neither dropped nor duplicates count
    them).  ``AdaptReport.retargeted`` counts the configs ``retarget`` changed.  Otherwise each
    config is adapted with ``scale``, as ``adapt_config``."""
    rep = report if report is not None else AdaptReport()
    retarget = _retargeter(family) if source_target is not None and dest_target is not None else None
    out: list[dict] = []
    seen: set = set()
    extras: list[tuple[Mapping[str, Any], Mapping[str, float] | None]] = []
    for c in configs:
        first, first_scale = c, scale
        if retarget is not None:
            original = dict(c)
            cands = [dict(x) for x in retarget(dict(original), source_target, dest_target)] or [original]
            changed = cands != [original]
            rep.retargeted += int(changed)
            first, first_scale = cands[0], None
            extras.extend((x, None) for x in cands[1:])
            if changed or scale:
                extras.append((original, scale))
        a = adapt_config(first, space, defaults, rep, first_scale)
        if a is None:
            continue
        sig = tuple(sorted(a.items()))
        if sig in seen:
            rep.duplicates += 1
            continue
        seen.add(sig)
        out.append(a)
    for cfg, sc in extras:
        a = adapt_config(cfg, space, defaults, AdaptReport(), sc)
        if a is None:
            continue
        sig = tuple(sorted(a.items()))
        if sig not in seen:
            seen.add(sig)
            out.append(a)
            rep.variants += 1
    return out
