"""The run's first configs (``default``, ``seed``): the family default first, then the first
``n_seeds`` pending seeds; without seeds, the default (warm, or ``start_default``) and three
random configs.

``DefaultFirst`` runs after the seeds are retrieved and after the surrogate and the cost model
are prepared (the surrogate may put the seeds the sources agree on first; the cost model ranks
the first seeds when it has seen this target); it takes its configs off the seed queue and
leaves the rest pending for the rounds.
"""

from __future__ import annotations

import numpy as np

from tunedb.transfer.search.proposals.base import ProposalSource, SearchState, Tagged, register, sig

__all__ = ["DefaultFirst", "rank_with_default"]


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
    seen = getattr(state.cost_model.model, "targets_", None) or []
    pred = state.predict(head) if head and str(state.target.get("name", "")) in seen else None
    if pred is not None:
        head = [head[i] for i in np.argsort(pred, kind="stable")]
    return [default] + head + tail


@register
class DefaultFirst(ProposalSource):
    """The run's first configs: the default (when valid) and the first ``n_seeds`` pending seeds,
    or, without seeds, the default (warm or ``start_default``) and three random configs."""

    name = "default_first"
    origin = "default"
    after = ("transferred_seeds", "surrogate", "model")   # the seeds, in the order those two leave them

    def start(self, state: SearchState) -> list[Tagged]:
        queue = state.seeds
        valid_default = bool(state.defaults) and state.space.is_valid(state.defaults)
        if len(queue) and valid_default:
            queue.reorder(lambda seeds: rank_with_default(state, seeds))
        first = queue.take(state.opt.n_seeds)
        if first:
            default_sig = sig(state.defaults) if state.defaults else None
            return [(c, "default" if sig(c) == default_sig else "seed") for c in first]
        # no history to seed from: a warm run starts from the family's default config,
        # a cold run (the comparison baseline) from random configs only
        use = (not state.opt.cold) if state.opt.start_default is None else state.opt.start_default
        start = [(dict(state.defaults), "default")] if use and valid_default else []
        return start + [(state.space.sample(state.rng), "random") for _ in range(3)]
