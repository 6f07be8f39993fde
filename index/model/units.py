"""The one unit style of durations shown to users: seconds with an SI prefix (``fmt_seconds``).

Every surface (CLI, report, dashboard, docs' examples) formats a cost with it, so one number
reads the same everywhere."""

from __future__ import annotations

import math


def fmt_seconds(s: float | None, *, missing: str = "-") -> str:
    """A duration in seconds with an SI prefix and three significant digits: ``1.23 ms``,
    ``456 us``, ``7.80 ns``, ``2.00 s``; ``missing`` for None or NaN."""
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return missing
    if math.isinf(s):
        return "inf s"
    a = abs(s)
    for unit, f in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if a >= f * 0.9995:
            return f"{s / f:#.3g} {unit}".replace(". ", " ")
    if a == 0:
        return "0 s"
    return f"{s * 1e9:#.3g} ns".replace(". ", " ")
