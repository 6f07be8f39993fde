"""Seeds (``seed``): the nearest entries' best configs adapted to this space, in seed order.

``TransferredSeeds`` (start) retrieves the seeds into the seed queue (``state.seeds``: their
source entries and the pending order); the surrogate and the cost model are prepared next
(they order later sources' choices); ``first.DefaultFirst`` then puts the family default first
and evaluates the first ``n_seeds``, leaving the rest pending for the rounds.
"""

from __future__ import annotations

import time

from tunedb.index.model.keys import key_of
from tunedb.transfer.search.adapt import adapt_many, hardware_scale
from tunedb.transfer.search.proposals.base import ProposalSource, SearchState, Tagged, register, sig
from tunedb.transfer.search.seed_order import interleave, similarity_weights

__all__ = ["TransferredSeeds", "transferred_seeds"]


def _source_seeds(state: SearchState, m: object) -> list[dict]:
    """Match ``m``'s best configs adapted to the space (timed as ``adapt``)."""
    best = [r.config for r in m.best[: state.opt.seeds_per_source()]]
    scale = hardware_scale(m.target, state.target, state.hardware_knobs) if state.hardware_knobs else None
    t0 = time.perf_counter()
    adapted = adapt_many(best, state.space, state.defaults, state.adapt_report, scale,
                         source_target=m.target, dest_target=state.target, family=state.workload.get("family"))
    state.add_time("adapt", t0)
    return adapted


def transferred_seeds(state: SearchState) -> list[dict]:
    """Adapted best configs of the nearest entries, in seed order (``opt.seed_order``):
    ``"similarity"`` interleaves the sources' lists (each best first) with per-source quotas
    proportional to ``similarity ** similarity_power`` (``seeds.interleave``, de-duplicated);
    ``"rank"`` sorts them by a global similarity-weighted rank sum.  Adds the sources to
    ``state.seeds`` (``SeedQueue.add_source``: entry, adapted configs, report, credits; the
    pending order is the caller's; once per run); [] without a DB or in a cold run.  Raises ValueError for
    another order."""
    if state.db is None or state.opt.cold:
        return []
    t0 = time.perf_counter()
    matches = state.db.nearest(state.target, state.workload, k=state.opt.k_neighbors + 1, same_family=True,
                               min_similarity=state.opt.min_similarity, best_n=state.opt.seeds_per_source())
    state.add_time("retrieval", t0)
    tkey, wkey = key_of(state.target), key_of(state.workload)
    scores: dict[str, float] = {}
    cfg_of: dict[str, dict] = {}
    queue = state.seeds
    for m in matches:
        if m.target_key == tkey and m.workload_key == wkey:
            continue  # our own entry (a resumed run): its configs come back as cache hits anyway
        if len(queue.sources) >= state.opt.k_neighbors:
            break
        adapted = _source_seeds(state, m)
        queue.add_source(m, adapted)
        w, n = max(float(m.similarity), 0.0) ** 8, max(len(adapted), 1)
        for rank, c in enumerate(adapted):
            cfg_of[sig(c)] = c
            scores[sig(c)] = scores.get(sig(c), 0.0) + w * (1.0 - rank / (n + 1))
    if state.opt.seed_order == "rank":
        return [cfg_of[s] for s in sorted(scores, key=lambda s: (-scores[s], s))]
    if state.opt.seed_order != "similarity":
        raise ValueError(f"seed_order must be 'similarity' or 'rank', not {state.opt.seed_order!r}")
    srcs = queue.sources
    weights = similarity_weights([src.similarity for src in srcs], state.opt.similarity_power)
    queue.set_weights(weights)
    return interleave([src.adapted for src in srcs], weights, key=sig)


@register
class TransferredSeeds(ProposalSource):
    """Warm runs: retrieve the seeds (``transferred_seeds``) into the seed queue; evaluates nothing itself."""

    name = "transferred_seeds"
    origin = "seed"
    after = ("resume",)   # the DB's own answers (exact, resume) are the run's first evaluations

    def start(self, state: SearchState) -> list[Tagged]:
        state.seeds.put([] if state.opt.cold else transferred_seeds(state))
        return []
