"""A run's best-so-far curve: ``history`` is a list of ``[evaluations, best so far]`` pairs (the
best in seconds, or a model's latency; None before the first ok result), as ``TuneResult.history``
and the model runs' histories hold it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def evaluations_to_reach(history: Sequence[Sequence[Any]], goal: float | None) -> int | None:
    """The first evaluation count of ``history`` whose best so far is at most ``goal``; None when
    the curve never gets there (or ``goal`` is None)."""
    if goal is None:
        return None
    for n, best in history:
        if best is not None and best <= goal:
            return int(n)
    return None


__all__ = ["evaluations_to_reach"]
