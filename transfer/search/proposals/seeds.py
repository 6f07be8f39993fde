"""Seeds: the nearest entries' best configs adapted to this space (``seed``), and the family
default first (``default``).

``TransferredSeeds`` (start) retrieves the seeds into ``state.pending``; the surrogate and the
cost model are prepared next (they order later sources' choices); ``DefaultFirst`` (start) then
puts the family default first, evaluates the first ``n_seeds`` and leaves the rest pending for
the rounds.  A run with no seeds starts from the default (warm, or ``start_default``) and three
random configs.
"""

from __future__ import annotations

import time

import numpy as np

from tunedb.index.model.keys import key_of
from tunedb.transfer.search.adapt import adapt_many, hardware_scale
from tunedb.transfer.search.proposals.base import ProposalSource, SearchState, Tagged, register, sig
from tunedb.transfer.search.seed_order import interleave, similarity_weights

__all__ = ["DefaultFirst", "TransferredSeeds", "rank_with_default", "transferred_seeds"]


def _credit(seed_src: dict[str, dict], adapted: list[dict], src: dict) -> None:
    """Credit each of ``adapted`` to ``src`` unless a more similar source already gave it."""
    for c in adapted:
        old = seed_src.get(sig(c))
        if old is None or src["similarity"] > old["similarity"]:
            seed_src[sig(c)] = src


def _source_seeds(state: SearchState, m: object) -> list[dict]:
    """Match ``m``'s best configs adapted to the space (timed as ``adapt``)."""
    best = [r.config for r in m.best[: state.opt.top_per_neighbor]]
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
    ``"rank"`` sorts them by a global similarity-weighted rank sum.  Fills ``state.seed_sources``
    (one dict per source: match, adapted configs, similarity), ``state.seeds_info`` and
    ``state.seed_src``; [] without a DB or in a cold run.  Raises ValueError for another order."""
    if state.db is None or state.opt.cold:
        return []
    t0 = time.perf_counter()
    matches = state.db.nearest(state.target, state.workload, k=state.opt.k_neighbors + 1, same_family=True,
                               min_similarity=state.opt.min_similarity, best_n=state.opt.top_per_neighbor)
    state.add_time("retrieval", t0)
    tkey, wkey = key_of(state.target), key_of(state.workload)
    scores: dict[str, float] = {}
    cfg_of: dict[str, dict] = {}
    state.seed_sources = []
    for m in matches:
        if m.target_key == tkey and m.workload_key == wkey:
            continue  # our own entry (a resumed run): its configs come back as cache hits anyway
        if len(state.seed_sources) >= state.opt.k_neighbors:
            break
        state.seeds_info.append({"from_target": m.target_name, "from_workload": m.workload,
                                 "similarity": round(float(m.similarity), 6)})
        adapted = _source_seeds(state, m)
        state.seed_sources.append({"match": m, "adapted": adapted, "similarity": float(m.similarity)})
        _credit(state.seed_src, adapted, {"target_name": m.target_name, "target_key": m.target_key,
                                          "workload_key": m.workload_key, "similarity": round(float(m.similarity), 6)})
        w, n = max(float(m.similarity), 0.0) ** 8, max(len(adapted), 1)
        for rank, c in enumerate(adapted):
            cfg_of[sig(c)] = c
            scores[sig(c)] = scores.get(sig(c), 0.0) + w * (1.0 - rank / (n + 1))
    if state.opt.seed_order == "rank":
        return [cfg_of[s] for s in sorted(scores, key=lambda s: (-scores[s], s))]
    if state.opt.seed_order != "similarity":
        raise ValueError(f"seed_order must be 'similarity' or 'rank', not {state.opt.seed_order!r}")
    weights = similarity_weights([src["similarity"] for src in state.seed_sources], state.opt.similarity_power)
    for info, w in zip(state.seeds_info, weights):
        info["seed_weight"] = round(w, 6)
    return interleave([src["adapted"] for src in state.seed_sources], weights, key=sig)


def rank_with_default(state: SearchState, seeds: list[dict]) -> list[dict]:
    """The family's default config for this target first, then the seeds: the first
    ``max(n_seeds, 4)`` ordered by the cost model when it has seen this target (its
    training records include the target's name), else in similarity order, the rest after.

    Why the default first: it is derived from the target's vector width, registers and
    caches, and measured on this machine it is often near the optimum (``bench_models.py``:
    a MobileNet-v2 run warm-started from ResNet-18 whose first evaluations were model-ranked
    seeds ended 1.3-2.2x slower than the default on 12 of 21 tasks that got one evaluation);
    seeds then improve on it from the second evaluation, and no short run ends worse than
    the default."""
    default = dict(state.defaults)
    seeds = [c for c in seeds if sig(c) != sig(default)]
    cut = max(state.opt.n_seeds, 4)
    head, tail = seeds[:cut], seeds[cut:]
    seen = getattr(state.model, "targets_", None) or []
    pred = state.predict(head) if head and str(state.target.get("name", "")) in seen else None
    if pred is not None:
        head = [head[i] for i in np.argsort(pred, kind="stable")]
    return [default] + head + tail


@register
class TransferredSeeds(ProposalSource):
    """Warm runs: retrieve the seeds (``transferred_seeds``) into ``state.pending``; evaluates nothing itself."""

    name = "transferred_seeds"
    origin = "seed"
    order = 30

    def start(self, state: SearchState) -> list[Tagged]:
        state.pending = [] if state.opt.cold else transferred_seeds(state)
        return []


@register
class DefaultFirst(ProposalSource):
    """The run's first configs: the default (when valid) and the first ``n_seeds`` pending seeds,
    or, without seeds, the default (warm or ``start_default``) and three random configs."""

    name = "default_first"
    origin = "default"
    order = 60

    def start(self, state: SearchState) -> list[Tagged]:
        seeds = state.pending
        valid_default = bool(state.defaults) and state.space.is_valid(state.defaults)
        if seeds and valid_default:
            seeds = rank_with_default(state, seeds)
        n = state.opt.n_seeds
        state.pending = seeds[n:]
        if seeds[:n]:
            default_sig = sig(state.defaults) if state.defaults else None
            return [(c, "default" if sig(c) == default_sig else "seed") for c in seeds[:n]]
        # no history to seed from: a warm run starts from the family's default config,
        # a cold run (the comparison baseline) from random configs only
        use = (not state.opt.cold) if state.opt.start_default is None else state.opt.start_default
        first = [(dict(state.defaults), "default")] if use and valid_default else []
        return first + [(state.space.sample(state.rng), "random") for _ in range(3)]
