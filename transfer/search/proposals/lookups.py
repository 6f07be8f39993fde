"""Look-ups: the exact entry's best configs (``exact``) and what this entry already holds (``resume``).

Both are answered from the DB (cache hits), never re-measured.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from tunedb.transfer.search.proposals.base import ProposalSource, SearchState, Tagged, register

__all__ = ["ExactSource", "ResumeSource", "exact_configs", "previous_configs"]


def exact_configs(db: Any, target: dict, workload: dict) -> list[dict]:
    """The entry's three best configs (``db.best``); [] without a DB."""
    if db is None:
        return []
    return [r.config for r in db.best(target, workload, k=3)]


def previous_configs(db: Any, target: dict, workload: dict) -> list[dict]:
    """Configs the entry already has in ``db``, oldest first, each once; [] without a DB or records."""
    if db is None:
        return []
    try:
        try:  # only what the order needs (the rows are those of the unprojected call)
            t = db.records(target, workload, columns=["config", "timestamp"])
        except TypeError:  # a store without the projection
            t = db.records(target, workload)
    except (ValueError, TypeError):
        return []
    if t.num_rows == 0:
        return []
    order = np.argsort(np.asarray(t.column("timestamp").cast("int64").to_numpy()), kind="stable")
    cfgs = t.column("config").to_pylist()
    out, seen = [], set()
    for i in order.tolist():
        if cfgs[i] not in seen:
            seen.add(cfgs[i])
            out.append(json.loads(cfgs[i]))
    return out


@register
class ExactSource(ProposalSource):
    """With ``use_exact``: the exact entry's bests first."""

    name = origin = "exact"

    def start(self, state: SearchState) -> list[Tagged]:
        if not state.opt.use_exact:
            return []
        return [(c, self.origin) for c in exact_configs(state.db, state.target, state.workload)]


@register
class ResumeSource(ProposalSource):
    """Warm runs: the entry's earlier records (valid in this space), answered from the DB."""

    name = origin = "resume"
    after = ("exact",)   # the exact entry's bests first

    def start(self, state: SearchState) -> list[Tagged]:
        if state.opt.cold:
            return []
        t0 = time.perf_counter()
        prev = [c for c in previous_configs(state.db, state.target, state.workload) if state.space.is_valid(c)]
        state.add_time("resume", t0)
        return [(c, self.origin) for c in prev]
