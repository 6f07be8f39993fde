"""Which task of a model gets the next round of measurements (the idea of Ansor's task scheduler).

A model's latency is the sum over its tasks of weight x best cost.  After every round the
scheduler gives the next one to the task whose next evaluations are expected to cut the most
latency: ``weight x (a x backward + (1 - a) x forward)`` where ``backward`` is the cost the task's
last round saved per evaluation (its recent gradient) and ``forward`` = best / evaluations (an
optimistic guess of what one more evaluation may still save, large for tasks barely searched).
Tasks that stopped (space exhausted, wall time) get nothing more.  Seconds throughout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class TaskState:
    """What the scheduler knows of one task."""

    weight: float
    best: float = math.inf          # best cost so far (seconds; inf before the first ok one)
    evaluations: int = 0
    last_gain: float = 0.0          # cost saved per evaluation by the task's last round
    alive: bool = True

    def update(self, best: float | None, evaluations: int) -> None:
        """Record the task's state after a round."""
        new = math.inf if best is None else float(best)
        n = evaluations - self.evaluations
        if n > 0:
            self.last_gain = (self.best - new) / n if math.isfinite(self.best) and math.isfinite(new) else 0.0
        self.best = min(self.best, new)
        self.evaluations = evaluations


def priority(t: TaskState, backward_share: float = 0.5) -> float:
    """Expected latency saved (seconds, weighted) per evaluation given to ``t``; -inf when dead.
    A task with no ok measurement yet comes first."""
    if not t.alive:
        return -math.inf
    if not math.isfinite(t.best):
        return math.inf
    forward = t.best / max(t.evaluations, 1)
    return t.weight * (backward_share * max(t.last_gain, 0.0) + (1 - backward_share) * forward)


def pick(states: list[TaskState], backward_share: float = 0.5) -> int | None:
    """Index of the task to give the next round (ties: fewer evaluations, then lower index);
    None when every task is dead."""
    best_i, best_key = None, None
    for i, t in enumerate(states):
        if not t.alive:
            continue
        key = (priority(t, backward_share), -t.evaluations, -i)
        if best_key is None or key > best_key:
            best_i, best_key = i, key
    return best_i


def model_latency(states: list[TaskState], defaults: list[float | None]) -> float | None:
    """Sum of weight x cost over tasks: the best so far, else the default config's cost; None
    when some task has neither."""
    total = 0.0
    for t, d in zip(states, defaults):
        c = t.best if math.isfinite(t.best) else d
        if c is None or not math.isfinite(c):
            return None
        if d is not None and math.isfinite(d):
            c = min(c, d)
        total += t.weight * c
    return total


__all__ = ["TaskState", "priority", "pick", "model_latency"]
