"""The guard against misleading history (``guard``): while a warm run searches, it measures how
well the history predicts this target and gives a share of every round to an explorer
accordingly, one that does not trust the similarity-weighted ranking: it walks the sources'
lists in the order this run's measurements favour, and makes local moves of its own.

History is the seeds' sources (the nearest entries).  Two signals, recomputed before every
round once the run has ``guard_after`` ok evaluations of its own:

``rho``
    the Spearman rank correlation, over this run's ok evaluations that the sources measured
    too, between the sources' prior (per source the standardised log cost of the config; the
    sources' similarity-weighted mean) and the log cost measured here.  Near 1: the sources
    rank this target's configs as it does; 0 or below: they do not.
``arms``
    each of this run's evaluations is credited to the *history* arm (seeds, the surrogate's and
    the cost model's picks: everything the guard did not propose) or to the *explorer* arm (the
    guard's own picks), with the gain it brought: ``log(best before / cost)`` when it improved
    on the run's best by more than ``NOISE`` (2 %), else 0.  Per arm: the mean gain over its
    last 16 evaluations and its best cost.

From them a *misfit* in [0, 1]: half from ``rho`` (0 at ``rho >= 0.5``, 1 at ``rho <= 0.1``,
0.5 while it is undefined) and half from the arms (1 when the explorer's best beats the
history's by more than ``NOISE``; 0.75 when its recent gain is higher and the history's best
does not beat its own by more than ``NOISE``; else 0; before the explorer has 4 evaluations: 0.5
when the history arm's last 8 evaluations improved nothing and ``rho`` is below 0.5, else 0).
A difference within ``NOISE`` is within the run-to-run spread of a kernel's measured time: it
is no evidence that the history misleads, and a run whose history found a config within 2 % of
the explorer's keeps the history-led search (on short runs every place given to the explorer
is one fewer for the search that is already near the optimum).  The
explorer's share of each round is ``guard_min_share + (guard_max_share - guard_min_share) x
misfit``, and 0 when the misfit is 0 (both signals say the history predicts well: the run is
then the history-led search, exactly as with the guard off) and before ``guard_after`` ok
evaluations; fractional places carry over to the next round, so over a run the explorer gets
that share of the evaluations.  The guard proposes
before the surrogate and the cost model, which fill the places it leaves.

With two seed sources or more, ``LIST_SHARE`` of the explorer's places (3 in 4; fractions
carried over, the run's first place is one) go to *the lists*, the rest to *local moves*; with
one source, every place is a local move (its list is the ranking in doubt):

*the lists*: each source's list is its adapted seeds, then its own ok records by cost (best
    first) that this space holds (at most 512), so it goes deeper than the seeds, as top-k
    (every source's best, then second best, ...) does.  Each pick is the next untried config
    of the *leading* list: the one whose configs taken so far (its first, before any) hold the
    lowest cost this run measured, ties by retrieval order.  The similarity weighting is the
    part of the history in doubt, so the lists are not weighed by it: this run's measurements
    choose the source, and the walk goes down the list of the source whose configs do best
    here until another's do better.  When the similarity-weighted history misleads, a less
    similar source's list, or a config deeper in one, often holds configs near this target's
    optimum that the seed places (they follow the surrogate's weights) never reach.
*local moves*, from nothing but this run's own measurements: a neighbour of one of the three
    best configs so far (40 %), a uniform crossover of two of the eight best, mutated one knob
    in half of the cases (40 %), or a uniform draw (20 %).

The explorer has a random generator of its own, so a guard that stays quiet leaves the other
sources' choices unchanged.  Its picks are tagged ``seed`` when they are seeds, else ``random``;
all of them are credited to the explorer arm.

``TuneResult.surrogate["guard"]`` reports ``rho`` and ``share`` (last round), ``fired``
(whether the share ever reached 0.5: the history was judged misleading), ``explorer_best``
and ``history_best`` (seconds), ``from_lists`` (the explorer's picks from the lists) and
``trace`` (``[evaluations, rho, history gain, explorer gain, share]`` per round).  Off in cold runs, with ``guard=False``, and without seed sources.
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np

from tunedb.transfer.search.costmodel import spearman
from tunedb.transfer.search.proposals.base import (
    ProposalSource,
    Round,
    SearchState,
    Tagged,
    register,
    seed_or,
    sig,
)
from tunedb.transfer.search.proposals.history import source_rows
from tunedb.transfer.search.seed_order import similarity_weights

__all__ = ["HistoryGuard", "arm_gains", "explore", "misfit", "prior_table", "source_lists"]

#: evaluations per arm that its recent gain is averaged over
WINDOW = 16
#: the explorer's picks the arm signal waits for before comparing the arms
MIN_EXPLORER = 4
#: rho at or above which the history counts as predictive (misfit 0) / at or below which it does not (1)
RHO_GOOD, RHO_BAD = 0.5, 0.1
#: relative cost difference below which one config (or arm) does not count as beating another
NOISE = 0.02
#: the share of the explorer's places that go to the sources' lists (the rest: local moves; module docstring)
LIST_SHARE = 0.75


def prior_table(state: SearchState, max_configs: int = 200_000) -> dict[str, float]:
    """Config signature -> the sources' prior: per source, the standardised log of the config's
    best ok cost there; averaged over the sources that measured it with weights
    ``similarity ** similarity_power`` (renormalised per config).  Lower = predicted faster."""
    srcs = state.seeds.sources
    if state.db is None or not srcs:
        return {}
    weights = similarity_weights([s.similarity for s in srcs], state.opt.similarity_power)
    num: dict[str, float] = {}
    den: dict[str, float] = {}
    for i, w in enumerate(weights):
        if w <= 0:
            continue
        try:
            rows = source_rows(state, i)
        except (ValueError, TypeError):
            continue
        best: dict[str, float] = {}
        for c, v, st in zip(rows.configs, rows.costs, rows.statuses):
            if st == "ok" and v is not None and 0 < v < math.inf:
                best[c] = min(best.get(c, math.inf), float(v))
            if len(best) >= max_configs:
                break
        if len(best) < 3:
            continue
        y = np.log(np.fromiter(best.values(), np.float64, len(best)))
        sd = float(y.std()) or 1.0
        z = (y - float(y.mean())) / sd
        for c, zi in zip(best, z.tolist()):
            try:
                s = rows.signature(c)
            except (ValueError, TypeError):
                continue
            num[s] = num.get(s, 0.0) + w * zi
            den[s] = den.get(s, 0.0) + w
    return {s: num[s] / den[s] for s in num if den[s] > 0}


def arm_gains(evaluated: dict[str, float], explorer: set[str], window: int = WINDOW) -> dict[str, Any]:
    """Per arm (``history``: signatures not in ``explorer``; ``explorer``): ``gain`` (mean over its
    last ``window`` evaluations of ``log(best before / cost)`` when the evaluation improved the
    run's best by more than ``NOISE``, else 0), ``n`` (its evaluations), ``best`` (its lowest
    cost, inf when none ok) and ``stale`` (how many of its latest evaluations in a row improved
    nothing by more than ``NOISE``).  ``evaluated`` is in evaluation order (signature -> cost,
    inf for a failure)."""
    arms = {a: {"gains": [], "best": math.inf, "stale": 0} for a in ("history", "explorer")}
    best = math.inf
    for s, c in evaluated.items():
        a = arms["explorer" if s in explorer else "history"]
        g = math.log(best / c) if (math.isfinite(best) and 0 < c < best * (1 - NOISE)) else 0.0
        if not math.isfinite(best) and 0 < c < math.inf:
            g = 0.0  # the run's first ok result: no "before" to improve on
        a["gains"].append(g)
        a["stale"] = 0 if g > 0 else a["stale"] + 1
        if 0 < c < a["best"]:
            a["best"] = c
        if 0 < c < best:
            best = c
    out = {}
    for name, a in arms.items():
        recent = a["gains"][-window:]
        out[name] = {"gain": float(np.mean(recent)) if recent else 0.0, "n": len(a["gains"]),
                     "best": a["best"], "stale": a["stale"]}
    return out


def misfit(rho: float | None, arms: dict[str, Any]) -> float:
    """How misleading the history looks, in [0, 1] (module docstring): half from ``rho`` (None or
    nan: undefined), half from the arms (``arm_gains``)."""
    if rho is None or rho != rho:
        m_rho = 0.5
    else:
        m_rho = min(max((RHO_GOOD - rho) / (RHO_GOOD - RHO_BAD), 0.0), 1.0)
    h, e = arms["history"], arms["explorer"]
    if e["n"] >= MIN_EXPLORER:
        if e["best"] < h["best"] * (1 - NOISE):
            m_arm = 1.0
        elif e["gain"] > h["gain"] and not h["best"] < e["best"] * (1 - NOISE):
            m_arm = 0.75
        else:
            m_arm = 0.0  # the history holds the best (within NOISE) and the explorer gains no more
    else:
        # a history arm that stopped improving is suspect only when the ranking is too
        # (with a predictive ranking it has most likely found the optimum)
        m_arm = 0.5 if h["stale"] >= 8 and m_rho > 0 else 0.0
    return 0.5 * m_rho + 0.5 * m_arm


def source_lists(state: SearchState, max_depth: int = 512) -> list[list[dict]]:
    """Per seed source (retrieval order), its list (module docstring): its adapted seeds, then
    its own ok records by best cost (ties by config text), at most ``max_depth`` configs of
    them, each a config this space validates, each once.  A source whose records cannot be
    read gives its seeds alone."""
    out: list[list[dict]] = []
    for i, src in enumerate(state.seeds.sources):
        lst = list(src.adapted)
        seen = {sig(c) for c in lst}
        try:
            rows = source_rows(state, i)
        except (ValueError, TypeError):
            out.append(lst)
            continue
        best: dict[str, float] = {}
        for c, v, st in zip(rows.configs, rows.costs, rows.statuses):
            if st == "ok" and v is not None and 0 < v < math.inf:
                best[c] = min(best.get(c, math.inf), float(v))
        for c in sorted(best, key=lambda c: (best[c], c))[:max_depth]:
            try:
                cfg, s = rows.parsed(c), rows.signature(c)
            except (ValueError, TypeError):
                continue
            if s not in seen and isinstance(cfg, dict) and state.space.is_valid(cfg):
                seen.add(s)
                lst.append(dict(cfg))
        out.append(lst)
    return out


def explore(state: SearchState, n: int, exclude: set[str], rng: random.Random,
            members: set[str] | None = None) -> list[dict]:
    """Up to ``n`` untried configs, not in ``exclude``, proposed from this run's own evaluations
    alone (module docstring).  ``members``: the signatures of a finite space's configs (a child
    outside it is not proposed); None: any config the space validates."""
    ranked = sorted((c, s) for s, c in state.evaluated.items() if 0 < c < math.inf)
    top = [state.configs[s] for _, s in ranked[:8]]
    space = state.space
    out: list[dict] = []
    taken = set(exclude)

    def ok(c: dict) -> bool:
        s = sig(c)
        if s in state.tried or s in taken:
            return False
        return s in members if members is not None else space.is_valid(c)

    near_of: dict[int, list[dict]] = {}  # the neighbours of the three best, computed once per call
    tries = 0
    while len(out) < n and tries < 60 * max(n, 1):
        tries += 1
        r = rng.random()
        cand: dict | None = None
        if top and r < 0.4:
            i = rng.randrange(min(3, len(top)))
            near = near_of[i] if i in near_of else near_of.setdefault(i, state.neighbours(top[i]))
            cand = near[rng.randrange(len(near))] if near else None
        elif len(top) >= 2 and r < 0.8:
            a, b = rng.sample(top, 2)
            cand = {k: (a[k] if rng.random() < 0.5 else b[k]) for k in space.names}
            if rng.random() < 0.5:
                k = space.knobs[rng.randrange(len(space.knobs))]
                cand[k.name] = k.values[rng.randrange(len(k.values))]
        else:
            try:
                cand = space.sample(rng)
            except RuntimeError:
                cand = None
        if cand is not None and ok(cand):
            out.append(cand)
            taken.add(sig(cand))
    return out


@register
class HistoryGuard(ProposalSource):
    """Measures how well the history predicts this target and gives the explorer a
    share of each round accordingly (module docstring)."""

    name = "guard"
    origin = "random"
    after = ("transferred_seeds",)   # judges the seeds' sources

    def __init__(self) -> None:
        self.active = False
        self.prior: dict[str, float] = {}
        self.picked: set[str] = set()
        self.share = 0.0
        self.credit = 0.0
        self.rng = random.Random(0)
        self.members: set[str] | None = None
        self.prior_read = False    # prior read (prior_table), on the first judgement
        self.members_read = False  # members computed, on the explorer's first proposal
        self.lists: list[list[dict]] | None = None  # source_lists, on the explorer's first list pick
        self.at: list[int] = []    # per list, the index of its next config to consider
        self.list_credit = 0.0     # the lists' share of the explorer's places, carried over
        self.info: dict[str, Any] = {}

    def start(self, state: SearchState) -> list[Tagged]:
        """Warm runs with seed sources and ``guard`` on: switch on.  The sources' prior
        (``prior_table``) is read when the guard first judges the history (``guard_after`` ok
        evaluations), so the run's first evaluations do not wait for it; it is the same table
        either way (the sources' records are not the run's entry)."""
        opt = state.opt
        self.active = bool(getattr(opt, "guard", True)) and not opt.cold and bool(state.seeds.sources)
        if not self.active:
            return []
        self.rng = random.Random(opt.seed * 7919 + 17)
        self.prior_read = False
        self.members_read = False
        self.lists, self.at, self.list_credit = None, [], 0.0
        self.info = {"rho": None, "share": 0.0, "fired": False, "explorer_best": None, "history_best": None,
                     "from_lists": 0, "trace": []}
        state.surrogate_info["guard"] = self.info
        return []

    def before_round(self, state: SearchState) -> None:
        """Recompute ``rho``, the arms' gains and the explorer's share (module docstring)."""
        if not self.active:
            return
        opt = state.opt
        ok = [(s, c) for s, c in state.evaluated.items() if 0 < c < math.inf]
        if len(ok) < opt.guard_after:
            self.share = 0.0
            return
        if not self.prior_read:
            self.prior, self.prior_read = prior_table(state), True
        pairs = [(self.prior[s], math.log(c)) for s, c in ok if s in self.prior]
        rho = spearman([p for p, _ in pairs], [y for _, y in pairs]) if len(pairs) >= 6 else None
        arms = arm_gains(state.evaluated, self.picked)
        m = misfit(rho, arms)
        lo, hi = opt.guard_min_share, opt.guard_max_share
        self.share = lo + (hi - lo) * m if m > 0 else 0.0
        rho_out = None if rho is None or rho != rho else round(rho, 4)
        self.info.update({"rho": rho_out, "share": round(self.share, 4),
                          "fired": self.info["fired"] or self.share >= 0.5,
                          "explorer_best": None if not math.isfinite(arms["explorer"]["best"])
                          else arms["explorer"]["best"],
                          "history_best": None if not math.isfinite(arms["history"]["best"])
                          else arms["history"]["best"]})
        self.info["trace"].append([len(state.evaluated), rho_out, round(arms["history"]["gain"], 5),
                                   round(arms["explorer"]["gain"], 5), round(self.share, 4)])

    def propose(self, state: SearchState, rnd: Round) -> None:
        """The explorer's places of this round: the share times the round's size, fractions carried over."""
        if not self.active or self.share <= 0 or rnd.claimed:
            return
        self.credit += self.share * rnd.size
        n = min(int(self.credit), rnd.free)
        if n <= 0:
            return
        if not self.members_read:  # the finite space's signatures, when the explorer first proposes
            if state.space.finite is not None:
                self.members = {sig(c) for c in state.space.finite}
            self.members_read = True
        # LIST_SHARE of the places to the lists (with two sources or more), fractions carried over
        self.list_credit += (LIST_SHARE if len(state.seeds.sources) >= 2 else 0.0) * n
        n_list = min(math.ceil(self.list_credit - 1e-9), n)
        self.list_credit -= n_list
        taken = rnd.sigs()
        listed = self.list_picks(state, n_list, taken)
        taken.update(sig(c) for c in listed)
        got = listed + explore(state, n - len(listed), taken, self.rng, self.members)
        self.credit -= n
        self.info["from_lists"] += len(listed)
        self.picked.update(sig(c) for c in got)
        rnd.add(got, seed_or(state, got, self.origin))

    def list_picks(self, state: SearchState, n: int, exclude: set[str]) -> list[dict]:
        """Up to ``n`` configs from the sources' lists (``source_lists``; module docstring): each
        the next config of the list that leads (``_list_best``, ties by retrieval order) that is
        untried, not in ``exclude`` and (finite space) one of its configs."""
        if n <= 0:
            return []
        if self.lists is None:
            self.lists = source_lists(state)
            self.at = [0] * len(self.lists)
        out: list[dict] = []
        taken = set(exclude)
        while len(out) < n:
            open_ = [i for i, lst in enumerate(self.lists) if self.at[i] < len(lst)]
            if not open_:
                break
            i = min(open_, key=lambda j: (self._list_best(state, j), j))
            lst = self.lists[i]
            while self.at[i] < len(lst):
                c = lst[self.at[i]]
                self.at[i] += 1
                s = sig(c)
                if s in state.tried or s in taken or (self.members is not None and s not in self.members):
                    continue
                out.append(c)
                taken.add(s)
                break
        return out

    def _list_best(self, state: SearchState, i: int) -> float:
        """The lowest cost this run measured among list ``i``'s configs up to its next one (its
        first when none was taken from it yet); inf when none of them is measured ok."""
        got = [state.evaluated.get(sig(c), math.inf) for c in self.lists[i][: max(self.at[i], 1)]]
        best = min(got, default=math.inf)
        return best if best > 0 else math.inf
