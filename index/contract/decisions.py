"""Decisions between two configs of one entry, stored, and the entry's answer that honours them.

``tunedb compare A B`` and ``tunedb tune-model`` (tuned vs default) decide between two configs
by interleaved re-measurement rounds (a paired test, 95 % over all its looks).  Such a decision
is stronger evidence than two estimates made at different moments, so it is stored and every
later answer for the entry (``tunedb best``, the next ``tune-model`` that finds the entry a hit)
follows it.

Storage (every backend, through the store contract): a decision is a run summary
(:meth:`~tunedb.index.contract.base.RecordStore.add_run`) of kind :data:`DECISION_KIND` holding
``target_key``, ``workload_key``, ``a`` / ``b`` (configs), ``a_key`` / ``b_key`` (their
config keys), ``verdict`` (``faster`` / ``slower`` / ``equivalent`` / ``inconclusive``: of A
against B), ``ratio`` / ``lo`` / ``hi`` (A / B with its interval at ``level``), ``rounds``,
``margin``, ``by`` (``compare`` / ``tune-model``) and ``kept`` (the config key the deciding run
kept, or None: ``tune-model`` keeps its default unless the tuned config is proven faster).
The latest decision of a pair of configs replaces the earlier ones; an inconclusive test that
kept neither config is not a decision (``tunedb compare`` does not store one).

The answer (:func:`answer`), in order of strength:

1. a stored decision: the kept config (``tune-model``) or the faster one (``compare``) is
   placed above the other; ``equivalent`` puts the two side by side as *tied* (in the
   estimator's order, unless a run kept one of them); a config a ``tune-model`` run kept also
   stands above every other config that no decision and no interval puts above it (the run's
   answer for the entry);
2. without a decision between two configs, an estimate whose 95 % interval lies entirely below
   another's beats it with confidence and is placed above it;
3. otherwise the estimator's ranking (``tunedb.index.model.estimate.rank_key``: confirmed first, then
   by cost).

So the first config is never one that another stored config beats with confidence: by a stored
paired test, or, where no test compared the two, by an interval entirely below its own.  When a
config below the first has a lower estimate that nothing has settled (no decision, intervals
overlapping), it is the *challenger*: both are shown with the comparison that would settle it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tunedb.index.contract.base import RecordStore
    from tunedb.index.model.estimate import ConfigCost

#: the ``kind`` of a stored decision (a run summary that is not a tuning run)
DECISION_KIND = "decision"
#: verdicts of A against B (``tunedb.transfer.measure.compare``'s question "sign")
VERDICTS = ("faster", "slower", "equivalent", "inconclusive")
#: the most configs of an entry the answer reads (all of an entry, in practice)
MAX_CONFIGS = 100_000


@dataclass(frozen=True)
class Decision:
    """One stored decision (module docstring); ``stored``: ISO UTC when it was stored."""

    target_key: str
    workload_key: str
    a_key: str
    b_key: str
    verdict: str
    by: str
    kept: str | None = None
    ratio: float | None = None
    lo: float | None = None
    hi: float | None = None
    level: float | None = None
    rounds: int = 0
    stored: str = ""

    @property
    def pair(self) -> frozenset:
        return frozenset((self.a_key, self.b_key))

    def winner(self) -> str | None:
        """The config key placed above the other, None when the decision orders neither."""
        if self.kept in (self.a_key, self.b_key):
            return self.kept
        if self.verdict == "faster":
            return self.a_key
        if self.verdict == "slower":
            return self.b_key
        return None

    def text(self) -> str:
        """``compare: equivalent (A/B 1.000, 95 % CI 0.978-1.022, 8 interleaved rounds)``."""
        ci = (f", {self.level * 100:.0f} % CI {self.lo:.3f}-{self.hi:.3f}"
              if self.lo is not None and self.hi is not None and self.level else "")
        ratio = f"A/B {self.ratio:.3f}{ci}, " if self.ratio is not None else ""
        return f"{self.by}: {self.verdict} ({ratio}{self.rounds} interleaved rounds)"


def decision_summary(target_key: str, workload_key: str, a: Mapping[str, Any], b: Mapping[str, Any], verdict: str,
                     *, by: str, kept: Mapping[str, Any] | None = None, ratio: float | None = None,
                     lo: float | None = None, hi: float | None = None, level: float | None = None,
                     rounds: int = 0, margin: float | None = None) -> dict:
    """The run summary (strict JSON) that stores one decision (module docstring).  ValueError
    for a verdict not in :data:`VERDICTS` or a ``kept`` that is neither A nor B."""
    from tunedb.index.model.keys import key_of

    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}, got {verdict!r}")
    a_key, b_key = key_of(dict(a)), key_of(dict(b))
    kept_key = None if kept is None else key_of(dict(kept))
    if kept_key is not None and kept_key not in (a_key, b_key):
        raise ValueError("the kept config must be A or B")

    def num(x: Any) -> float | None:
        return None if x is None or x != x or x in (float("inf"), float("-inf")) else float(x)
    return {"kind": DECISION_KIND, "target_key": target_key, "workload_key": workload_key,
            "a": dict(a), "b": dict(b), "a_key": a_key, "b_key": b_key, "verdict": verdict, "by": by,
            "kept": kept_key, "ratio": num(ratio), "lo": num(lo), "hi": num(hi), "level": num(level),
            "rounds": int(rounds), "margin": num(margin)}


def store_decision(db: RecordStore, summary: Mapping[str, Any]) -> str | None:
    """Store a :func:`decision_summary` in ``db`` (``add_run``); its run_id.  A failure to store
    it (a read-only store, a full disk) is a warning, never an exception: the measurements it
    rests on are committed already."""
    try:
        return db.add_run(summary)
    except (OSError, ValueError, NotImplementedError) as e:
        warnings.warn(f"the decision was not stored: {e}", RuntimeWarning, stacklevel=2)
        return None


def decisions_of(summaries: Iterable[Mapping[str, Any]], target_key: str, workload_key: str) -> list[Decision]:
    """The decisions about (target_key, workload_key) among run ``summaries`` (oldest first),
    the latest per pair of configs only.  An inconclusive test that kept neither config decides
    nothing and is left out (it does not undo an earlier decision of the pair)."""
    latest: dict[frozenset, Decision] = {}
    for s in summaries:
        if s.get("kind") != DECISION_KIND or s.get("target_key") != target_key \
                or s.get("workload_key") != workload_key:
            continue
        try:
            d = Decision(target_key=target_key, workload_key=workload_key, a_key=str(s["a_key"]),
                         b_key=str(s["b_key"]), verdict=str(s["verdict"]), by=str(s.get("by") or ""),
                         kept=s.get("kept"), ratio=s.get("ratio"), lo=s.get("lo"), hi=s.get("hi"),
                         level=s.get("level"), rounds=int(s.get("rounds") or 0), stored=str(s.get("stored") or ""))
        except (KeyError, TypeError, ValueError):
            continue
        if d.a_key != d.b_key and (d.winner() is not None or d.verdict == "equivalent"):
            latest[d.pair] = d
    return list(latest.values())


def stored_decisions(db: RecordStore) -> list[dict]:
    """Every stored decision summary of ``db`` (oldest first); [] for a store without runs."""
    try:
        return db.runs(DECISION_KIND)
    except (NotImplementedError, AttributeError):
        return []


@dataclass(frozen=True)
class Candidate:
    """A config and its estimate, for :func:`order` where no record is at hand (a table of
    estimates: the dashboard's entry page).  A ``ConfigCost`` serves as well."""

    config_key: str
    estimate: Any


@dataclass
class Ranked:
    """One config of an answer: its estimate (``cost``: the ``ConfigCost`` or :class:`Candidate`
    given to :func:`order`), and why it stands where it does."""

    cost: ConfigCost
    #: config keys of the configs a stored decision found equivalent to this one
    tied: list[str] = field(default_factory=list)
    #: the decisions that placed this config above another (texts)
    decided: list[str] = field(default_factory=list)
    #: a tune-model run kept this config (over a tuned config it did not prove faster)
    kept: bool = False


@dataclass
class Answer:
    """An entry's configs in answer order (module docstring) and the first config's challenger
    (a lower estimate ranked below it that nothing has settled; None when there is none)."""

    ranked: list[Ranked]
    challenger: Ranked | None = None
    decisions: list[Decision] = field(default_factory=list)

    def first(self) -> ConfigCost | None:
        return self.ranked[0].cost if self.ranked else None

    def top(self, k: int) -> list[Ranked]:
        return self.ranked[:k]


def _beats_by_interval(x: ConfigCost, y: ConfigCost) -> bool:
    """x's interval lies entirely below y's (both with an interval at the full level)."""
    from tunedb.index.model.estimate import LEVEL

    ex, ey = x.estimate, y.estimate
    full = ex.has_interval and ey.has_interval and ex.coverage >= LEVEL - 1e-9 and ey.coverage >= LEVEL - 1e-9
    return full and ex.hi < ey.lo


def order(costs: Sequence[ConfigCost | Candidate], decisions: Sequence[Decision]) -> Answer:
    """The answer order of an entry's ``costs`` (ConfigCosts or Candidates: each with a
    ``config_key`` and an ``estimate``; in the estimator's ranking order) under
    ``decisions`` (module docstring): repeatedly the first config in the estimator's order that
    no remaining config beats (a decision, else an interval entirely below); when every
    remaining config is beaten by another (contradictory evidence), the estimator's first.
    About linear in the number of configs (an entry of 5,000 configs: milliseconds)."""
    from tunedb.index.model.estimate import LEVEL

    n = len(costs)
    keys = [c.config_key for c in costs]
    pos = {k: i for i, k in enumerate(keys)}
    by_pair = {d.pair: d for d in decisions if d.a_key in pos and d.b_key in pos}
    partners: dict[int, set[int]] = {}
    beaten_by: dict[int, set[int]] = {}   # by a decision
    kept: set[int] = set()                # configs a tune-model run kept
    for d in by_pair.values():
        a, b = pos[d.a_key], pos[d.b_key]
        partners.setdefault(a, set()).add(b)
        partners.setdefault(b, set()).add(a)
        w = d.winner()
        if w is not None:
            beaten_by.setdefault(b if w == d.a_key else a, set()).add(pos[w])
        if d.by == "tune-model" and d.kept in pos:
            kept.add(pos[d.kept])
    est = [c.estimate for c in costs]
    full = [e.has_interval and e.coverage >= LEVEL - 1e-9 for e in est]
    lo = [e.lo for e in est]
    hi = [e.hi for e in est]
    removed = [False] * n
    his = sorted((hi[i], i) for i in range(n) if full[i])   # the full-level intervals, by their top
    front = [0]                                              # his[:front] are all removed

    def interval_beater(x: int) -> int | None:
        """A remaining config (not decided against x) whose interval lies entirely below x's."""
        if not full[x]:
            return None
        for j in range(front[0], len(his)):
            h, y = his[j]
            if h >= lo[x]:
                return None
            if not removed[y] and y != x and y not in partners.get(x, ()):
                return y
        return None

    def beaten(x: int) -> bool:
        if any(not removed[y] for y in beaten_by.get(x, ())):
            return True
        if interval_beater(x) is not None:
            return True
        # a kept config stands above x unless a decision pairs them or x's interval is below it
        for k in kept:
            if k != x and not removed[k] and k not in partners.get(x, ()) \
                    and not (full[x] and full[k] and hi[x] < lo[k]):
                return True
        return False

    out: list[int] = []
    rest = list(range(n))
    while rest:
        pick = next((x for x in rest if not beaten(x)), rest[0])
        out.append(pick)
        removed[pick] = True
        rest.remove(pick)
        while front[0] < len(his) and removed[his[front[0]][1]]:
            front[0] += 1
    ranked = []
    for i in out:
        r = Ranked(cost=costs[i])
        for j in partners.get(i, ()):
            d = by_pair[frozenset((keys[i], keys[j]))]
            if d.verdict == "equivalent":
                r.tied.append(keys[j])
            if d.winner() == keys[i]:
                r.decided.append(d.text())
                r.kept = r.kept or (d.kept == keys[i] and d.by == "tune-model")
        ranked.append(r)
    # configs found equivalent to the first are shown right below it, as tied
    if ranked and ranked[0].tied:
        tied = [r for r in ranked[1:] if r.cost.config_key in ranked[0].tied]
        ranked = [ranked[0], *tied, *(r for r in ranked[1:] if r.cost.config_key not in ranked[0].tied)]
    challenger = None
    if ranked:
        head = ranked[0].cost
        settled = {k for d in by_pair.values() if head.config_key in d.pair for k in d.pair}
        for r in ranked[1:]:
            c = r.cost
            if c.config_key in settled or c.estimate.value >= head.estimate.value:
                continue
            if _beats_by_interval(head, c):
                continue
            challenger = r
            break
    return Answer(ranked=ranked, challenger=challenger, decisions=list(by_pair.values()))


def answer(db: RecordStore, target: Any, workload: Any, *, summaries: Iterable[Mapping[str, Any]] | None = None
           ) -> Answer:
    """The answer for (target, workload) of ``db`` (module docstring): every config with its
    estimate (``best_costs``) ordered under the stored decisions (``summaries``: the decision
    summaries to use, default :func:`stored_decisions` of ``db``; pass them to answer many
    entries with one read).  An empty Answer when the entry has no ok record."""
    costs = db.best_costs(target, workload, MAX_CONFIGS)
    if not costs:
        return Answer(ranked=[])
    rec = costs[0].record
    found = decisions_of(stored_decisions(db) if summaries is None else summaries, rec.target_key,
                         rec.workload_key)
    return order(costs, found)


__all__ = ["DECISION_KIND", "VERDICTS", "Decision", "Candidate", "Ranked", "Answer", "decision_summary", "store_decision",
           "decisions_of", "stored_decisions", "order", "answer"]
