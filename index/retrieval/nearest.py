"""Nearest-schedule queries: the most similar historical entries and their best configs.

``nearest(db, target, workload, k)`` embeds the query (``features``), searches the DB's
FAISS cosine index (``vectors.sync`` keeps it in step with the records) and returns
:class:`Match` objects, most similar first.

Similarity.  With weights ``w_hw + w_wl = 1`` (default 0.5 / 0.5)::

    similarity = w_hw * cos(hardware vectors) + w_wl * cos(workload vectors)

which at the default weights is exactly the cosine of the two entries' stored vectors
(``features.entry_vector``).  ``hw_similarity = w_hw * cos_hw`` and ``wl_similarity =
w_wl * cos_wl`` say how much of it came from each side (they sum to ``similarity``).
An entry's nearest neighbour is itself with similarity 1.0.

Best configs.  Each match carries its entry's ``best_n`` best configs by the one cost
estimator (``db.best_costs``, asked for all the matches at once through ``db.best_costs_many``;
``tunedb.index.model.estimate``): :attr:`Match.best_costs`, each a
``ConfigCost`` with the config's estimate (median of its records' medians, seconds, with n and
a confidence interval).  :attr:`Match.best` holds their representative records, in the same
order, for callers that need a record (its config, trace, provenance); a record's own ``cost``
is one measurement, not the config's cost.

Filters: ``same_family`` (default True: only entries whose workload family equals the
query's), ``exclude_target`` (True: no entries of the query's own target; or a target key /
name to exclude), ``min_similarity``; only entries holding at least one ``ok`` record are
returned (a neighbour without a working config has nothing to reuse).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tunedb.index.hardware.targets import resolve_target
from tunedb.index.model.keys import key_of
from tunedb.index.model.record import Record
from tunedb.index.retrieval import features, vectors

if TYPE_CHECKING:
    from tunedb.index.model.estimate import ConfigCost
    from tunedb.index.retrieval.source import EntrySource


@dataclass(frozen=True)
class Match:
    """One neighbour: its target and workload, the similarity (and the parts that came from
    hardware and workload) and its best configs.

    ``best_costs``: the entry's best configs by the estimator (``db.best_costs``), ascending
    cost; compare and show ``best_costs[i].estimate`` (seconds, with n and interval).
    ``best``: the representative record of each of them, same order (``best[i] is
    best_costs[i].record`` when both are filled by :func:`nearest`); kept for callers that need
    records.  A Match built with ``best`` only has empty ``best_costs``."""

    target: dict
    target_name: str
    target_key: str
    workload: dict
    workload_key: str
    similarity: float
    hw_similarity: float
    wl_similarity: float
    hw_cosine: float
    wl_cosine: float
    best: list[Record] = field(default_factory=list)
    best_costs: list[ConfigCost] = field(default_factory=list)

    @property
    def family(self) -> str:
        return self.workload.get("family", "")

    def to_dict(self) -> dict:
        """Plain-JSON view (the CLI's ``matches`` items).  ``best``: one item per best config,
        ``{"config", "cost" (the estimate's value, seconds), "estimate"
        (``CostEstimate.to_dict()``: value, lo, hi, records, ...), "record_id" (the
        representative record)}``; from ``best_costs``, or -- for a Match built with records
        only -- from ``best`` with each record's own estimate."""
        return {"target_name": self.target_name, "target_key": self.target_key, "target": self.target,
                "workload": self.workload, "workload_key": self.workload_key,
                "similarity": self.similarity, "hw_similarity": self.hw_similarity,
                "wl_similarity": self.wl_similarity, "hw_cosine": self.hw_cosine, "wl_cosine": self.wl_cosine,
                "best": [{"config": c.config, "cost": c.estimate.value, "estimate": c.estimate.to_dict(),
                          "record_id": c.record.record_id} for c in self.config_costs()]}

    def config_costs(self) -> list[ConfigCost]:
        """``best_costs``, or (a Match built with records only) each ``best`` record's own
        estimate (``tunedb.index.model.estimate.rank`` of that one record; failed records left out)."""
        if self.best_costs or not self.best:
            return list(self.best_costs)
        from tunedb.index.model.estimate import rank

        return [c for r in self.best for c in rank([r])]


def parse_weights(weights: Any) -> tuple[float, float]:
    """(w_hw, w_wl), non-negative and summing to 1, from None (0.5/0.5), ``"hardware"`` /
    ``"workload"`` (one side only), a ``{"hardware": a, "workload": b}`` mapping or an
    ``(a, b)`` pair.  ValueError for anything else."""
    if weights is None:
        return 0.5, 0.5
    if isinstance(weights, str):
        w = weights.strip().lower()
        if w in ("hardware", "hw", "hardware-only"):
            return 1.0, 0.0
        if w in ("workload", "wl", "workload-only"):
            return 0.0, 1.0
        raise ValueError(f"weights {weights!r}: expected 'hardware', 'workload', a mapping or a pair")
    if isinstance(weights, Mapping):
        unknown = set(weights) - {"hardware", "workload", "hw", "wl"}
        if unknown:
            raise ValueError(f"weights: unknown key(s) {', '.join(sorted(map(str, unknown)))}; use hardware/workload")
        a = weights.get("hardware", weights.get("hw", 0.0))
        b = weights.get("workload", weights.get("wl", 0.0))
    elif isinstance(weights, Sequence) and len(weights) == 2:
        a, b = weights
    else:
        raise ValueError(f"weights {weights!r}: expected 'hardware', 'workload', a mapping or a pair")
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        raise ValueError(f"weights {weights!r} must be numbers") from None
    if not (math.isfinite(a) and math.isfinite(b)) or a < 0 or b < 0 or a + b <= 0:
        raise ValueError(f"weights {weights!r} must be finite, >= 0 and not both 0")
    return a / (a + b), b / (a + b)


def _target_dict(db: EntrySource, target: Any) -> dict:
    if isinstance(target, Record):
        return target.target
    if isinstance(target, str):
        return resolve_target(target, db)
    if isinstance(target, Mapping):
        return dict(target)
    raise TypeError(f"target must be a dict, a Record or a name/key/preset string, not {type(target).__name__}")


def _workload_dict(workload: Any) -> dict:
    if isinstance(workload, Record):
        return workload.workload
    if isinstance(workload, Mapping) and isinstance(workload.get("family"), str):
        return dict(workload)
    raise ValueError("workload must be a dict with a string 'family' (or a Record)")


def best_costs_of(db: EntrySource, pairs: list[tuple[dict, dict]], k: int) -> list[list[ConfigCost]]:
    """The ``k`` best configs of each (target, workload) of ``pairs``, in order: one batched
    ``db.best_costs_many`` where the source has it (every ``RecordStore``), else ``db.best_costs``
    pair by pair; ``[]`` for each when ``k <= 0``."""
    if k <= 0 or not pairs:
        return [[] for _ in pairs]
    many = getattr(db, "best_costs_many", None)
    if many is not None:
        return many(pairs, k)
    return [db.best_costs(t, w, k) for t, w in pairs]


def nearest(db: EntrySource, target: Any, workload: Any, k: int = 5, *, same_family: bool = True,
            min_similarity: float | None = None, weights: Any = None, exclude_target: bool | str = False,
            best_n: int = 3, index_kind: str | None = None) -> list[Match]:
    """The ``k`` entries of ``db`` most similar to (target, workload); see the module docstring.

    ``target``: dict, Record, or a spec string (DB name/key, preset, catalog device, JSON file);
    ``workload``: dict with ``family`` or a Record; ``weights``: see :func:`parse_weights`;
    ``best_n``: best configs per match (``Match.best_costs``/``best``); ``index_kind``: None (auto), ``flat`` or ``hnsw``.
    Raises ValueError for bad arguments or an unknown target spec."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if min_similarity is not None and not (-1.0 <= float(min_similarity) <= 1.0):
        raise ValueError(f"min_similarity must be in [-1, 1], got {min_similarity!r}")
    w_hw, w_wl = parse_weights(weights)
    tdict = _target_dict(db, target)
    wdict = _workload_dict(workload)
    q_hw = features.hardware_vector(tdict)
    q_wl = features.workload_vector(wdict)
    q = features.query_vector(q_hw, q_wl, w_hw, w_wl)
    st = vectors.sync(db, index_kind)
    vi, entries = st.vi, st.entries
    if vi.ntotal == 0:
        return []
    excl: str | None = None
    if exclude_target is True:
        excl = key_of(tdict)
    elif isinstance(exclude_target, str) and exclude_target:
        found = db.find_target(exclude_target)
        excl = key_of(found) if found is not None else exclude_target
    ok_col = np.asarray(entries.column("ok_records").to_numpy(zero_copy_only=False), dtype=np.int64)
    no_ok = st.entry_rows[(ok_col <= 0) & (st.entry_rows >= 0)]
    rows, _ = vi.search(q, k, family=wdict["family"] if same_family else None, exclude_target=excl,
                        skip_rows=no_ok if len(no_ok) else None)
    if len(rows) == 0:
        return []
    h = features.HW_DIM
    x = vi.vectors(rows).astype(np.float64) * math.sqrt(2.0)  # unit hardware and workload halves
    qh = features.normalized(q_hw).astype(np.float64)
    qw = features.normalized(q_wl).astype(np.float64)
    cos_hw = np.clip(x[:, :h] @ qh, -1.0, 1.0)
    cos_wl = np.clip(x[:, h:] @ qw, -1.0, 1.0)
    names = entries.column("target_name")
    tjs = entries.column("target")
    wjs = entries.column("workload")
    found: list[tuple[int, int, int, float, dict, dict]] = []  # (j, r, e, similarity, target, workload)
    for j, r in enumerate(rows.tolist()):
        e = int(st.index_rows[r])
        if e < 0:
            continue
        sim = float(np.clip(w_hw * cos_hw[j] + w_wl * cos_wl[j], -1.0, 1.0))
        if min_similarity is not None and sim < float(min_similarity) - 1e-9:
            continue
        found.append((j, r, e, sim, json.loads(tjs[e].as_py()), json.loads(wjs[e].as_py())))
    all_costs = best_costs_of(db, [(t, w) for _j, _r, _e, _s, t, w in found], best_n)
    out: list[Match] = []
    for (j, r, e, sim, t, w), costs in zip(found, all_costs):
        out.append(Match(target=t, target_name=names[e].as_py() or "", target_key=vi.target_keys[r], workload=w,
                         workload_key=vi.workload_keys[r], similarity=sim, hw_similarity=float(w_hw * cos_hw[j]),
                         wl_similarity=float(w_wl * cos_wl[j]), hw_cosine=float(cos_hw[j]),
                         wl_cosine=float(cos_wl[j]), best=[c.record for c in costs], best_costs=costs))
    out.sort(key=lambda m: -m.similarity)
    return out[:k]
