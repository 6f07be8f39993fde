"""Cost-model ranked neighbours (the source named ``model``): every round, the neighbours of the three best
configs so far and the pending seeds, ranked by the cost model (``random`` order while there is
none), with an epsilon share left to the random fill.

The model: warm, the family's *base model* (``modelcache.base_model``: every target's records of
the family, cached in the store's ``cache_dir()``) corrected by this entry's evaluations
(``CorrectedModel``); cold (or a family with too few records), a model of this run's own
evaluations only (from 8 on).  Refitted every ``retrain_every`` new evaluations (10 % more once
a run is long).  A model failure never stops tuning (``TuneResult.model["error"]``)."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from tunedb.transfer.search.costmodel import default_model
from tunedb.transfer.search.proposals.base import ProposalSource, Round, SearchState, Tagged, register, seed_or, sig

__all__ = ["ModelSource", "neighbour_pool"]


def neighbour_pool(state: SearchState) -> list[dict]:
    """Untried neighbours of the three best configs so far (none when the best failed), then
    the untried pending seeds; each once, in that order."""
    ranked = sorted(((c, s) for s, c in state.evaluated.items()), key=lambda x: x[0])
    pool: dict[str, dict] = {}
    if ranked and ranked[0][0] != math.inf:
        for _, s in ranked[:3]:
            for n in state.neighbours(state.configs[s]):
                pool.setdefault(sig(n), n)
    for c in state.seeds.pending:
        pool.setdefault(sig(c), c)
    return [c for s, c in pool.items() if s not in state.tried]


@register
class ModelSource(ProposalSource):
    """The cost model: fitted at the start (warm) and before rounds; ranks a round nobody claimed."""

    name = "model"
    origin = "model"
    after = ("surrogate",)   # ranks a round the surrogate did not claim

    def __init__(self) -> None:
        self.evals_at_fit = 0
        self.base: Any = None          # modelcache.BaseModel of the family (None: not resolved or none)
        self.base_resolved = False

    def start(self, state: SearchState) -> list[Tagged]:
        if not state.opt.cold:
            self.fit(state, force=True)
        return []

    def before_round(self, state: SearchState) -> None:
        self.fit(state)

    def propose(self, state: SearchState, rnd: Round) -> None:
        """The ranked share of the round: ``neighbour_pool`` by predicted cost (a seed stays
        ``seed``), or shuffled (``random``) without a model."""
        if rnd.claimed:
            return
        rnd.claimed = True
        cands = neighbour_pool(state)
        b = rnd.size
        n_rand = sum(1 for _ in range(b) if state.rng.random() < state.opt.epsilon) if cands else b
        n = max(min(b - n_rand, rnd.free), 0)
        pred = state.predict(cands)
        if pred is not None:
            chosen = [cands[i] for i in np.argsort(pred, kind="stable")[:n]]
            rnd.add(chosen, seed_or(state, chosen, self.origin))
        else:
            state.rng.shuffle(cands)
            rnd.add(cands[:n], seed_or(state, cands[:n], "random"))

    # ------------------------------------------------------------------ fits
    def fit(self, state: SearchState, force: bool = False) -> None:
        """(Re)fit the cost model into the model slot (``state.cost_model.put``; module docstring);
        nothing with ``use_model`` off or before ``retrain_every`` new evaluations (unless ``force``)."""
        opt = state.opt
        if not opt.use_model:
            return
        own = [(state.configs[s], c) for s, c in state.evaluated.items() if 0 < c < math.inf]
        # every retrain_every new evaluations, and once a run is long every 10 % more of them:
        # a refit costs time linear in the evaluations, so a fixed step would make it quadratic
        step = max(opt.retrain_every, self.evals_at_fit // 10)
        if not force and len(own) - self.evals_at_fit < step:
            return
        model = self._fit_cold(state, own) if opt.cold else self._fit_warm(state, own)
        if model is None:
            return
        self.evals_at_fit = len(own)
        info = {"kind": type(getattr(model, "base", model)).__name__, "records": model.n_records_,
                "targets": len(model.targets_), "heldout_spearman": model.heldout_spearman_,
                "fits": state.cost_model.fits + 1}
        if self.base is not None and not opt.cold:
            info["base"] = self.base.info()
        state.cost_model.put(model, info)

    def _fit_cold(self, state: SearchState, own: list[tuple[dict, float]]) -> Any:
        """A model of this run's own evaluations (None below 8 of them or when fitting fails)."""
        if len(own) < 8:
            return None
        t0 = time.perf_counter()
        model = default_model(seed=state.opt.seed)
        try:
            model.fit([c for c, _ in own], [state.workload] * len(own), [state.target] * len(own),
                      [v for _, v in own], seed=state.opt.seed, holdout=0)
        except Exception as e:  # a model failure must never stop tuning
            state.cost_model.fail(f"{type(e).__name__}: {e}")
            return None
        finally:
            state.add_time("model_update", t0)
        return model

    def _fit_warm(self, state: SearchState, own: list[tuple[dict, float]]) -> Any:
        """The base model corrected by ``own`` (None without a DB or when fitting fails; a cold
        model when the family has no base model)."""
        if state.db is None:
            return None
        try:
            base = self._base_model(state)
        except Exception as e:  # a model failure must never stop tuning
            state.cost_model.fail(f"{type(e).__name__}: {e}")
            return None
        if base is None:
            return self._fit_cold(state, own)
        t0 = time.perf_counter()
        try:
            m = base.model
            X = m.features_.matrix([c for c, _ in own], [state.workload] * len(own), [state.target] * len(own))
            return m.corrected(X, np.log(np.asarray([v for _, v in own], np.float64)), seed=state.opt.seed)
        except Exception as e:  # a model failure must never stop tuning
            state.cost_model.fail(f"{type(e).__name__}: {e}")
            return None
        finally:
            state.add_time("model_update", t0)

    def _base_model(self, state: SearchState) -> Any:
        """The family's ``modelcache.BaseModel`` (None when it has too few records), resolved
        once per run (the run's own evaluations reach the model through its correction)."""
        if self.base_resolved:
            return self.base
        from tunedb.transfer.search.modelcache import base_model

        t0 = time.perf_counter()
        try:
            # the base model is a function of the DB's content alone (seed 0), so every run shares it
            self.base = base_model(state.db, state.workload.get("family"), seed=0,
                                   refit_fraction=state.opt.refit_fraction, use_cache=state.opt.model_cache)
            self.base_resolved = True
        finally:
            state.add_time("model_base", t0)
        return self.base
