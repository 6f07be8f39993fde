"""Seed order: the nearest entries' best configs, interleaved by how alike their hardware is.

``interleave(lists, weights)`` merges per-source lists (each best first) so that every prefix of
the result takes from each source a share proportional to its weight (Sainte-Lague / D'Hondt
apportionment: the next config comes from the source with the highest ``w / (taken + 1)``), each
config once (a config several sources share counts for the first that offers it; its place
moves up because every source offering it is advanced past it).  A source of weight 0 gives
nothing.  So the most similar device's best comes first, a close second device's best soon
after, and a distant device contributes only when its share comes up: not a global rank sum in
which one device's 8 configs can outrank another's best.

``similarity_weights(similarities, power)``: weight ``max(s, 0) ** power`` normalised to sum 1
(the power sharpens cosine similarities that sit close to 1; all-zero -> uniform).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["interleave", "similarity_weights"]


def similarity_weights(similarities: Sequence[float], power: float = 8.0) -> list[float]:
    """``max(s, 0) ** power`` per source, normalised to sum 1 (uniform when all are 0)."""
    raw = [max(float(s), 0.0) ** power for s in similarities]
    tot = sum(raw)
    if tot <= 0:
        return [1.0 / len(raw)] * len(raw) if raw else []
    return [r / tot for r in raw]


def interleave(lists: Sequence[Sequence[T]], weights: Sequence[float],
               key: Callable[[T], Hashable] | None = None, limit: int | None = None) -> list[T]:
    """Merge ``lists`` (one per source, best first) by weighted apportionment, de-duplicated by
    ``key`` (default: the item itself); at most ``limit`` items.  Deterministic: ties go to the
    earlier source.  O(total * sources)."""
    if len(lists) != len(weights):
        raise ValueError(f"{len(lists)} lists but {len(weights)} weights")
    k: Callable[[Any], Hashable] = key or (lambda x: x)
    pos = [0] * len(lists)
    taken = [0] * len(lists)
    seen: set = set()
    out: list[T] = []
    cap = sum(len(x) for x in lists) if limit is None else limit
    while len(out) < cap:
        best, score = -1, 0.0
        for i, (lst, w) in enumerate(zip(lists, weights)):
            while pos[i] < len(lst) and k(lst[pos[i]]) in seen:
                pos[i] += 1
            if w > 0 and pos[i] < len(lst):
                s = w / (taken[i] + 1)
                if s > score:
                    best, score = i, s
        if best < 0:
            break
        item = lists[best][pos[best]]
        seen.add(k(item))
        out.append(item)
        pos[best] += 1
        taken[best] += 1
    return out
