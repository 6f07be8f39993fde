"""The RGPE transfer surrogate's batch (``model``): once the run has ``surrogate_after`` ok
evaluations, ``tunedb.transfer.search.rgpe.RGPESurrogate`` (one model per seed source
plus one of this run's measurements) ranks the candidates by expected improvement (``"ei"``)
or its mean (``"mean"``), after ``seed_slots`` places for the seeds of the sources it still
believes.  It claims the round (the cost model then ranks nothing); an epsilon share is left
to the random fill.  Not used in cold runs, with ``surrogate="model"``, or (``surrogate=None``)
with fewer than two sources."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from tunedb.transfer.search.proposals.base import ProposalSource, Round, SearchState, Tagged, register, seed_or, sig
from tunedb.transfer.search.proposals.history import SourceRows, source_rows
from tunedb.transfer.search.seed_order import interleave, similarity_weights
from tunedb.transfer.space import Space

__all__ = ["SurrogateSource", "encode"]


def encode(space: Space, cfgs: list[dict], codes: list[dict] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rows of knob value indices (float64, one column per knob of ``space``) and a mask of the
    configs whose every knob value is one of the space's (only those are encoded).  ``codes``:
    per knob, ``repr(value)`` -> index (computed when not given)."""
    vals = codes if codes is not None else [{repr(v): i for i, v in enumerate(k.values)} for k in space.knobs]
    X = np.zeros((len(cfgs), len(space.names)))
    ok = np.array([isinstance(c, Mapping) for c in cfgs], bool)
    missing = object()
    for j, n in enumerate(space.names):
        table, memo = vals[j], {}
        col = X[:, j]
        for r, c in enumerate(cfgs):
            if not ok[r]:
                continue
            v = c.get(n, missing)
            try:
                key = (v.__class__, v)  # (1, 1.0 and True are different values of a knob)
                code = memo[key] if key in memo else memo.setdefault(key, table.get(repr(v)))
            except TypeError:  # an unhashable value (a list)
                code = table.get(repr(v))
            if code is None:
                ok[r] = False
            else:
                col[r] = code
    return X, ok


def _own(state: SearchState) -> list[tuple[dict, float]]:
    return [(state.configs[s], c) for s, c in state.evaluated.items() if 0 < c < math.inf]


def _best_per_config(rows: SourceRows) -> dict[str, float]:
    """Config JSON -> its best ok cost in ``rows`` (inf for configs that only failed)."""
    best: dict[str, float] = {}
    for c, v, st in zip(rows.configs, rows.costs, rows.statuses):
        ok = st == "ok" and v is not None and 0 < v < math.inf
        best[c] = min(best.get(c, math.inf), v if ok else math.inf)
    return best


@register
class SurrogateSource(ProposalSource):
    """The RGPE ensemble (module docstring)."""

    name = "surrogate"
    origin = "model"
    after = ("transferred_seeds", "guard")   # models the seeds' sources; fills the places the guard leaves

    def __init__(self) -> None:
        self.active = False
        self.deferred = False   # the source models are still to be fitted (``_ensure``)
        self.surrogate: Any = None
        self.fitted_on = -1
        self.models: dict[int, Any] = {}
        self._codes: list[dict] | None = None
        self._finite: tuple | None = None

    def _encode(self, state: SearchState, cfgs: list[dict]) -> tuple[np.ndarray, np.ndarray]:
        if self._codes is None:
            self._codes = [{repr(v): i for i, v in enumerate(k.values)} for k in state.space.knobs]
        return encode(state.space, cfgs, self._codes)

    # ------------------------------------------------------------------ start
    def start(self, state: SearchState) -> list[Tagged]:
        """Warm runs: validate the options and decide whether the run may use the surrogate.
        The source models are fitted when the surrogate is first needed (``before_round`` with
        ``surrogate_after`` own ok evaluations; at once when ``consensus_seeds`` orders the
        first seeds), so the run's first evaluations do not wait for them; the models are the
        same either way (the sources' records are not the run's entry)."""
        if not state.opt.cold:
            self._check(state.opt)
            self.deferred = True
            if state.opt.consensus_seeds > 0:
                self._ensure(state)
                state.seeds.reorder(lambda seeds: self._consensus_first(state, seeds))
        return []

    def finish(self, state: SearchState) -> None:
        """End of the run: fit the source models if no round needed them, so that
        ``TuneResult.surrogate`` names the sources whatever the run's length (a failure to read
        them is reported there as ``error``: the run's result is never lost to it)."""
        try:
            self._ensure(state)
        except Exception as e:
            state.surrogate_info["error"] = f"{type(e).__name__}: {e}"

    def _ensure(self, state: SearchState) -> None:
        """Fit the source models (``_init``) once, when they were deferred."""
        if self.deferred:
            self.deferred = False
            self._init(state)

    @staticmethod
    def _check(opt: Any) -> None:
        """ValueError for a ``surrogate`` or ``acquisition`` option that does not exist."""
        if opt.surrogate not in (None, "rgpe", "model"):
            raise ValueError(f"surrogate must be 'rgpe', 'model' or None, not {opt.surrogate!r}")
        if opt.acquisition not in ("ei", "mean"):
            raise ValueError(f"acquisition must be 'ei' or 'mean', not {opt.acquisition!r}")

    def _init(self, state: SearchState) -> None:
        """Validate ``surrogate``/``acquisition`` (ValueError) and, for rgpe, fit one
        ``SourceModel`` per seed source on all of its records (best ok cost per config, log seconds)."""
        opt = state.opt
        mode = opt.surrogate
        self._check(opt)
        self.active = False
        srcs = state.seeds.sources
        if opt.cold or mode == "model" or state.db is None or not srcs or (mode is None and len(srcs) < 2):
            return
        from tunedb.transfer.search.rgpe import SourceModel

        t0 = time.perf_counter()
        self.scale = np.array([max(len(k.values) - 1, 1) for k in state.space.knobs], np.float64)
        self.models = {}
        try:
            per = [(i, source_rows(state, i)) for i in range(len(srcs))]
            per = [(i, rows, _best_per_config(rows)) for i, rows in per]
            # every distinct config of the sources encoded once (the sources share most of them)
            texts = list(dict.fromkeys(c for _, _, best in per for c in best))
            at = {c: j for j, c in enumerate(texts)}
            if texts:
                X_all, enc_all = self._encode(state, [per[0][1].parsed(c) for c in texts])
            for i, _rows, best in per:
                if not best:
                    continue
                idx = np.fromiter((at[c] for c in best), np.int64, len(best))
                X, enc = X_all[idx], enc_all[idx]
                y = np.log(np.asarray(list(best.values()), np.float64))
                if enc.sum() >= 3 and np.isfinite(y[enc]).sum() >= 3:
                    self.models[i] = SourceModel().fit(X[enc], y[enc], self.scale)
        finally:
            state.add_time("model_update", t0)
        if len(self.models) >= (1 if mode == "rgpe" else 2):
            self.active = True
            state.surrogate_info.update({"sources": [srcs[i].match.target_name for i in self.models],
                                         "weights": [], "trace": []})

    def _consensus_first(self, state: SearchState, seeds: list[dict]) -> list[dict]:
        """``seeds`` with the ``consensus_seeds`` of them that the sources agree on most first: the
        lowest similarity-weighted mean of the sources' standardised log costs (rgpe only)."""
        k = state.opt.consensus_seeds
        if not self.active or k <= 0 or len(seeds) < 2:
            return seeds
        X, enc = self._encode(state, seeds)
        if not enc.any():
            return seeds
        w = np.asarray(similarity_weights([state.seeds.sources[i].similarity for i in self.models],
                                          state.opt.similarity_power))
        score = np.full(len(seeds), np.inf)
        Z = np.vstack([(m.predict(X[enc]) - m.mean_) / m.std_ for m in self.models.values()])
        score[enc] = w @ Z
        top = [int(i) for i in np.argsort(score, kind="stable")[:k]]
        return [seeds[i] for i in top] + [c for i, c in enumerate(seeds) if i not in top]

    # ----------------------------------------------------------------- rounds
    def before_round(self, state: SearchState) -> None:
        """Refit the ensemble's weights on this run's ok evaluations (from ``surrogate_after`` of
        them on, whenever there is a new one) and keep pending only the seeds of the sources it
        still believes; a failed fit turns the surrogate off (the cost model ranks instead)."""
        if not self.active and not self.deferred:
            return
        own = _own(state)
        if len(own) < max(state.opt.surrogate_after, 2) or len(own) == self.fitted_on:
            return
        self._ensure(state)
        if not self.active:
            return
        from tunedb.transfer.search.rgpe import RGPESurrogate

        t0 = time.perf_counter()
        try:
            X, enc = self._encode(state, [c for c, _ in own])
            y = np.log(np.asarray([v for _, v in own], np.float64))
            sur = RGPESurrogate(random_state=state.opt.seed).fit(X[enc], y[enc], list(self.models.values()),
                                                                scale=self.scale)
        except Exception as e:  # a surrogate failure must never stop tuning: the cost model ranks instead
            state.surrogate_info["error"] = f"{type(e).__name__}: {e}"
            self.active = False
            return
        finally:
            state.add_time("model_update", t0)
        self.surrogate, self.fitted_on = sur, len(own)
        w = [round(float(v), 4) for v in sur.weights_]
        state.surrogate_info["weights"] = w
        state.surrogate_info["trace"].append([len(state.evaluated)] + w)
        state.seeds.put(self._believed_seeds(state))

    def _believed_seeds(self, state: SearchState) -> list[dict]:
        """The sources' untried seeds interleaved by the surrogate's weights (``seeds.interleave``);
        a source weighed below ``min_source_weight`` (or without a model) gives none."""
        floor = state.opt.min_source_weight
        srcs = state.seeds.sources
        w = {i: floor for i in range(len(srcs))}
        if self.surrogate is not None:
            w.update({i: float(v) for i, v in zip(self.models, self.surrogate.weights_[:-1])})
        lists = [[c for c in src.adapted if sig(c) not in state.tried] for src in srcs]
        return interleave(lists, [w[i] if w[i] >= floor else 0.0 for i in range(len(lists))], key=sig)

    def propose(self, state: SearchState, rnd: Round) -> None:
        """Claim the round once fitted: ``seed_slots`` believed seeds, then the surrogate's best,
        leaving each place to the random fill with probability ``epsilon``."""
        if rnd.claimed or not self.active or self.surrogate is None:
            return
        rnd.claimed = True
        n_rand = sum(1 for _ in range(rnd.size) if state.rng.random() < state.opt.epsilon)
        chosen = self._batch(state, list(state.seeds.pending), max(rnd.free - n_rand, 0))
        rnd.add(chosen, seed_or(state, chosen, self.origin))

    def _batch(self, state: SearchState, pending: list[dict], n: int) -> list[dict]:
        """``n`` candidates: up to ``seed_slots`` believed seeds, then the surrogate's best."""
        chosen = [c for c in pending if sig(c) not in state.tried][: min(state.opt.seed_places(), n)]
        if len(chosen) >= n:
            return chosen
        pool, X, enc = self._pool(state, pending, {sig(c) for c in chosen})
        if not pool:
            return chosen
        t0 = time.perf_counter()
        try:
            pred = np.full(len(pool), np.inf)
            if enc.any():
                if state.opt.acquisition == "ei":
                    pred[enc] = -self.surrogate.expected_improvement(X[enc])
                    state.surrogate_info["gp"] = {k: round(float(v), 6) for k, v in self.surrogate.gp_.items()}
                else:
                    pred[enc] = self.surrogate.predict(X[enc])
        finally:
            state.add_time("predict", t0)
        order = np.argsort(pred, kind="stable")
        return chosen + [pool[i] for i in order[: n - len(chosen)]]

    def _pool(self, state: SearchState, pending: list[dict], exclude: set[str]) -> tuple[list[dict], Any, Any]:
        """Candidates, not tried and not in ``exclude``, with their encoding: every such config of a
        finite space (``surrogate_pool="space"``; encoded once per run), else the neighbours of
        the three best, the pending seeds and 64 random draws."""
        space = state.space
        if state.opt.surrogate_pool == "space" and space.finite is not None and len(space.finite) <= 200_000:
            if self._finite is None:
                cfgs = list(space.finite)
                self._finite = (cfgs, [sig(c) for c in cfgs], *self._encode(state, cfgs))
            cfgs, sigs, FX, Fenc = self._finite
            idx = [i for i, s in enumerate(sigs) if s not in state.tried and s not in exclude]
            return [cfgs[i] for i in idx], FX[idx], Fenc[idx]
        pool: dict[str, dict] = {}
        ranked = sorted(((c, s) for s, c in state.evaluated.items() if c < math.inf), key=lambda x: x[0])
        for _, s in ranked[:3]:
            for n in state.neighbours(state.configs[s]):
                pool.setdefault(sig(n), n)
        for c in pending:
            pool.setdefault(sig(c), c)
        for _ in range(64):
            try:
                c = space.sample(state.rng)
            except RuntimeError:
                break
            pool.setdefault(sig(c), c)
        cands = [c for s, c in pool.items() if s not in state.tried and s not in exclude]
        X, enc = self._encode(state, cands)
        return cands, X, enc
