"""The timing protocol, applied inside the isolated worker process (imports nothing heavy).

Timing protocol (``TimingProtocol``, applied inside the isolated worker)
------------------------------------------------------------------------
1. The first run of a config is also its correctness check against the NumPy reference
   (``wrong_result`` when it differs; no timing then).
2. ``warmup`` more untimed runs (caches, page faults, OpenMP thread start-up); the last one is timed
   to size ``number``.
3. ``number`` runs per repeat, the smallest count making one repeat last >= ``min_repeat_ms``
   (capped at ``max_number``).
4. ``repeat`` repeats; ``costs[i]`` = seconds per run in repeat i (repeat time / number).
5. The record's meta holds ``mean_s``, ``cv`` (sample standard deviation / mean of the costs),
   ``noisy`` (cv > ``noisy_cv``), ``spread`` (``min_s``, ``max_s``, ``median_s`` of the costs,
   seconds per run), number, repeat, warmup, min_repeat_ms.
6. ``cooldown_s`` seconds of sleep after each measurement (optional, default 0).
Threads: the target's ``threads`` (OMP_NUM_THREADS / OPENBLAS_NUM_THREADS in the worker).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


# --------------------------------------------------------------------------- timing protocol
@dataclass(frozen=True)
class TimingProtocol:
    """Parameters of the timing protocol (see module docstring).  Times in milliseconds / seconds as named."""

    warmup: int = 1
    min_repeat_ms: float = 20.0
    repeat: int = 5
    max_number: int = 1_000_000
    noisy_cv: float = 0.05

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.repeat < 1 or self.min_repeat_ms < 0 or self.max_number < 1:
            raise ValueError(f"bad timing protocol {self}")

    def summary(self, costs: Sequence[float], number: int) -> dict:
        """Record meta for ``costs`` (seconds per run) measured with ``number`` runs per repeat;
        ``spread`` is None when there are no costs."""
        mean = sum(costs) / len(costs) if costs else 0.0
        cv = statistics.stdev(costs) / mean if len(costs) > 1 and mean > 0 else 0.0
        spread = ({"min_s": min(costs), "max_s": max(costs), "median_s": statistics.median(costs)}
                  if costs else None)
        return {"number": number, "repeat": self.repeat, "warmup": self.warmup, "min_repeat_ms": self.min_repeat_ms,
                "mean_s": mean, "cv": cv, "noisy": bool(cv > self.noisy_cv), "spread": spread}


def time_callable(fn: Callable[[], Any], proto: TimingProtocol, first_run_s: float | None = None
                  ) -> tuple[list[float], int]:
    """Time ``fn`` with ``proto``; return (seconds per run for each repeat, runs per repeat)."""
    clock = time.perf_counter
    single = first_run_s if first_run_s is not None else math.inf
    for _ in range(proto.warmup):
        t0 = clock()
        fn()
        single = clock() - t0
    if not math.isfinite(single):
        t0 = clock()
        fn()
        single = clock() - t0
    target_s = proto.min_repeat_ms / 1000.0
    number = 1 if single <= 0 and target_s <= 0 else max(1, math.ceil(target_s / max(single, 1e-9)))
    number = min(number, proto.max_number)
    costs = []
    for _ in range(proto.repeat):
        t0 = clock()
        for _ in range(number):
            fn()
        costs.append((clock() - t0) / number)
    return costs, number
