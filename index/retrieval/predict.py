"""An answer before the first measurement: the configs predicted for an entry that has no records.

Serving frameworks ship per-device config files and fall back to a default on a device without
one; Kernel Tuner's ``get_best_config`` falls back to the config that is best on the most
devices.  :func:`predict_best` does what those rules cannot: it weighs the other devices and
workloads by how similar they are (``tunedb.index.retrieval.nearest``: hardware and workload
vectors, cosine) and ranks configs by how well they did *there*.

The rule, for a query (target, workload) and its ``neighbours`` nearest entries of the same
family (the query's own target left out when ``exclude_target``):

1. candidates: the union of each neighbour's ``top_n`` best configs (``best_costs``), and the
   caller's ``default`` config when one is given (the kernel's default: it competes on the same
   evidence, so it is predicted where the neighbours say it is the safest choice);
2. each candidate's score is the similarity-weighted mean, over the neighbours, of its
   *relative performance* there, ``neighbour's best cost / candidate's cost`` (1.0 = that
   neighbour's optimum; 0 where the neighbour has no ok measurement of it, so a config known on
   one device only cannot win on that device's word alone).  The weight of a neighbour with
   similarity ``s`` is ``exp(sharpness * (s - 1))``, ``sharpness`` = ``SHARPNESS`` =
   ``1 / (1 - MIN_SIMILARITY)`` = 5: a neighbour at the trust threshold (0.8) weighs 1/e of an
   identical device.  The nearest devices count most, but hardware similarity is a weak guide
   to which configs carry over (one AMD GPU's best convolution config runs at half speed on
   another), so one near device does not outvote the rest;
3. the ``k`` highest scores, each with where it came from (every neighbour's cost and relative
   performance for it).

Too far to trust: when no neighbour reaches ``min_similarity`` (default 0.8), there is no
answer: :attr:`Prediction.trusted` is False and :attr:`Prediction.reason` says so, with the
nearest similarity found.  Nothing here measures or writes.

Measured on the project's recorded caches (leave one GPU out, 6 GPUs x 2 kernels):
``benchmarks/bench_predict.py`` and docs/prediction.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tunedb.index.model.keys import canonical_json

if TYPE_CHECKING:
    from tunedb.index.retrieval.nearest import Match

#: below this similarity of the nearest entry there is no prediction
MIN_SIMILARITY = 0.8
#: weight of a neighbour of similarity s: exp(SHARPNESS * (s - 1)) (s = 1 -> 1; s = 0.9 -> 0.61;
#: s = MIN_SIMILARITY -> 1/e)
SHARPNESS = 5.0  # 1 / (1 - MIN_SIMILARITY)


@dataclass(frozen=True)
class Evidence:
    """What one neighbour says about a predicted config: its cost there (seconds, the entry's
    estimate; None when not measured ok there) and its relative performance there
    (``neighbour's best cost / cost``, 0 when not measured)."""

    target_name: str
    workload: dict
    similarity: float
    cost_s: float | None
    relative: float

    def to_dict(self) -> dict:
        return {"target_name": self.target_name, "workload": self.workload, "similarity": self.similarity,
                "cost_s": self.cost_s, "relative": self.relative}


@dataclass(frozen=True)
class PredictedConfig:
    """One predicted config: ``score`` = similarity-weighted mean relative performance on the
    neighbours (0..1, 1 = the best config on every neighbour); ``evidence``: one item per
    neighbour, most similar first."""

    config: dict
    score: float
    evidence: list[Evidence]

    @property
    def source(self) -> str:
        """Where it came from, in one phrase: the neighbour where it did best."""
        best = max(self.evidence, key=lambda e: (e.relative, e.similarity))
        return f"{best.target_name} (similarity {best.similarity:.3f}, {best.relative:.0%} of its best there)"

    def to_dict(self) -> dict:
        return {"config": self.config, "score": self.score, "predicted": True, "source": self.source,
                "evidence": [e.to_dict() for e in self.evidence]}


@dataclass(frozen=True)
class Prediction:
    """The answer of :func:`predict_best`: ``configs`` (best first; empty when not ``trusted``),
    the ``neighbours`` used, and ``reason`` (why nothing is predicted, or "")."""

    configs: list[PredictedConfig] = field(default_factory=list)
    neighbours: list[Match] = field(default_factory=list)
    trusted: bool = True
    reason: str = ""

    def to_dict(self) -> dict:
        return {"predicted": True, "trusted": self.trusted, "reason": self.reason,
                "configs": [c.to_dict() for c in self.configs],
                "neighbours": [{"target_name": m.target_name, "workload": m.workload, "similarity": m.similarity}
                               for m in self.neighbours]}


def predict_best(store: Any, target: Any, workload: Any, k: int = 3, *, neighbours: int = 5,
                 top_n: int = 20, min_similarity: float = MIN_SIMILARITY, exclude_target: bool = False,
                 default: Mapping[str, Any] | None = None, sharpness: float = SHARPNESS) -> Prediction:
    """The ``k`` configs predicted for (target, workload) from its nearest entries (see the
    module docstring); ``store``: a ``RecordStore`` (its ``nearest`` and ``lookup_many``).
    ``exclude_target``: leave the query's own target out (to predict for a device that has
    records, as if it had none).  ``default``: the kernel's default config, a candidate scored
    like the others (None: no default known).  ``sharpness``: the similarity weighting
    (``exp(sharpness * (s - 1))``; 0 weighs every neighbour alike).  ValueError for bad
    arguments (as ``nearest``)."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if default is not None and not isinstance(default, Mapping):
        raise ValueError(f"default must be a config object (a mapping) or None, got {type(default).__name__}")
    if default is not None:
        try:
            canonical_json(dict(default))
        except (TypeError, ValueError) as e:
            raise ValueError(f"default is not a JSON config: {e}") from None
    if isinstance(sharpness, bool) or not isinstance(sharpness, (int, float)) or not (
            math.isfinite(sharpness) and sharpness >= 0):
        raise ValueError(f"sharpness must be a finite number >= 0, got {sharpness!r}")
    matches = store.nearest(target, workload, k=neighbours, exclude_target=exclude_target, best_n=top_n)
    if not matches:
        return Prediction(trusted=False, reason="no entry of this workload family is stored: nothing to predict from")
    top = max(m.similarity for m in matches)
    if top < min_similarity:
        return Prediction(neighbours=matches, trusted=False,
                          reason=f"the nearest entry's similarity is {top:.3f}, below {min_similarity:.2f}: "
                                 "too far to predict from; measure instead")
    return Prediction(configs=_rank(store, matches, k, default, float(sharpness)), neighbours=matches)


def _rank(store: Any, matches: Sequence[Match], k: int, default: Mapping[str, Any] | None,
          sharpness: float) -> list[PredictedConfig]:
    from tunedb.index.model.estimate import estimate

    weights = [math.exp(sharpness * (m.similarity - 1.0)) for m in matches]
    candidates: dict[str, dict] = {}
    for m in matches:
        for c in m.config_costs():
            candidates.setdefault(canonical_json(c.config), dict(c.config))
    if default is not None:
        candidates.setdefault(canonical_json(dict(default)), dict(default))
    texts, configs = list(candidates), list(candidates.values())
    known: list[dict[str, float]] = []  # per neighbour: candidate text -> cost (seconds)
    optimum: list[float] = []
    for m in matches:
        # its own best configs: the entry's estimates (the numbers `tunedb best` shows there);
        # the other candidates: the estimate of their latest record there, looked up in one batch
        costs = {canonical_json(c.config): c.estimate.value for c in m.config_costs() if _usable(c.estimate.value)}
        missing = [i for i, text in enumerate(texts) if text not in costs]
        for i, rec in zip(missing, store.lookup_many(m.target, m.workload, [configs[i] for i in missing])):
            if rec is not None and rec.status == "ok" and rec.costs and _usable(value := estimate([rec]).value):
                costs[texts[i]] = value
        known.append(costs)
        optimum.append(min(costs.values(), default=math.inf))  # its own best configs are candidates
    scored = []
    total = sum(weights)
    for text, cfg in candidates.items():
        ev = []
        s = 0.0
        for i, m in enumerate(matches):
            cost = known[i].get(text)
            rel = optimum[i] / cost if cost else 0.0
            s += weights[i] * rel
            ev.append(Evidence(m.target_name, dict(m.workload), m.similarity, cost, rel))
        scored.append(PredictedConfig(cfg, s / total, ev))
    scored.sort(key=lambda p: (-p.score, canonical_json(p.config)))
    return scored[:k]


def _usable(value: float) -> bool:
    return value > 0 and math.isfinite(value)
