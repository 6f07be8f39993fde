"""The one interface every source of the Tuner's proposals implements, and their registry.

A *proposal source* (``ProposalSource``) is one reason to evaluate a config, named by its
``origin`` (one of ``tuner.ORIGINS``, or a new tag of its own).  The Tuner keeps the loop, the
budget, the commits and the bookkeeping; it calls every registered source (``sources()``, in
the registry's order) through these hooks:

``start(state) -> list[(config, origin)]``
    once, when the run starts; what it returns is evaluated at once, before the next source's
    ``start`` (so a later source sees the earlier ones' evaluations);
``before_round(state)``
    before every local-search round (refit a model, re-order the pending seeds...);
``propose(state, rnd)``
    fill the round: add (config, origin) pairs to ``rnd`` (a ``Round``), at most
    ``rnd.free`` of them; a source that ranks the whole round (the RGPE surrogate, the cost
    model) sets ``rnd.claimed`` so the other rankers leave it alone;
``finish(state)``
    when the run's result is made (possibly more than once): complete what the source reports
    in the result but put off until first needed (the RGPE source models of a run too short
    to use them).

Work a source needs only for later rounds belongs in ``before_round`` (done the first time it is
needed), not in ``start``: everything ``start`` does comes before the run's first evaluation.

Order: a source names the sources it runs after (``after``, by name: what it needs done
first, e.g. the seeds retrieved) and, optionally, those it must run before (``before``: how a
source added from outside slots itself in ahead of built-in ones without editing them).  The
registry orders the sources topologically, ties by registration order, and ``register``
refuses (ValueError, one line) a name it does not know yet or an order with a cycle.  The
built-in order: exact, resume, transferred_seeds, guard, surrogate, model, default_first,
random (``proposals/__init__.py``).

Hand-offs: sources pass work on only through what the Tuner owns for them
(``handoff``): the seed queue (``state.seeds``: the pending seeds, their source entries) and
the model slot (``state.cost_model``).

The defaults do nothing, so a source implements only what it needs.  A new source is one new
module defining a subclass and registering it (``@register``), plus its import in
``proposals/__init__.py``, or a ``register(MySource)`` call before the Tuner is built: the
loop does not change (tests/transfer_tests/search_tests/test_tuner_parts.py registers one).

``state`` is the running Tuner as sources see it (``SearchState``: its options, random
generator, space, DB, what it has evaluated, the seed queue and the model slot).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tunedb.index.model.keys import canonical_json
from tunedb.transfer.search.proposals.handoff import ModelSlot, SeedQueue
from tunedb.transfer.space import Space

__all__ = ["ProposalSource", "Round", "SearchState", "Tagged", "order", "register", "unregister", "sources", "sig", "seed_or"]

#: a proposed config and why (its origin)
Tagged = tuple[dict, str]


def seed_or(state: SearchState, cands: list[dict], ranked: str) -> list[str]:
    """Origins of ``cands`` chosen by a source tagging ``ranked``: a seed config stays ``seed``."""
    return ["seed" if state.seeds.is_seed(sig(c)) else ranked for c in cands]


def sig(cfg: Mapping[str, Any]) -> str:
    """The config's signature (its canonical JSON): how the Tuner tells configs apart."""
    return canonical_json(dict(cfg))


class SearchState(Protocol):
    """What a proposal source may read on the Tuner (and change only through the hand-offs'
    methods: ``seeds``, ``cost_model``; the reports ``adapt_report`` and ``surrogate_info`` are
    written by the sources that own them)."""

    db: Any
    target: dict
    workload: dict
    space: Space
    opt: Any                        # TuneOptions
    rng: random.Random
    defaults: dict
    hardware_knobs: dict
    evaluated: dict[str, float]     # signature -> value (inf: failed), in evaluation order
    configs: dict[str, dict]        # signature -> config
    tried: set[str]                 # signatures proposed or evaluated
    seeds: SeedQueue                # the seeds: pending order, source entries (handoff.SeedQueue)
    cost_model: ModelSlot           # the cost model and its report (handoff.ModelSlot)
    adapt_report: Any               # TuneResult.adapt (the seeds' adaptation)
    surrogate_info: dict            # TuneResult.surrogate

    def neighbours(self, cfg: dict) -> list[dict]:
        """The space's configs one knob away from ``cfg`` (two when there are few)."""
        ...

    def predict(self, cands: list[dict]) -> Any:
        """The cost model's predictions for ``cands`` (None without a model)."""
        ...

    def add_time(self, step: str, t0: float) -> None:
        """Count the seconds since ``t0`` (``time.perf_counter()``) as ``step`` (``Tuner.OVERHEAD_STEPS``)."""
        ...


@dataclass
class Round:
    """One local-search round being filled: ``size`` configs at most, each with its origin."""

    size: int
    configs: list[dict] = field(default_factory=list)
    origins: list[str] = field(default_factory=list)
    #: a ranking source (surrogate, cost model) has chosen this round's ranked share
    claimed: bool = False

    @property
    def free(self) -> int:
        """Places still open."""
        return max(self.size - len(self.configs), 0)

    def sigs(self) -> set[str]:
        """Signatures of the configs chosen so far."""
        return {sig(c) for c in self.configs}

    def add(self, configs: list[dict], origins: list[str]) -> None:
        """Append ``configs`` with their ``origins`` (one each); raises ValueError past ``size``
        or on a length mismatch."""
        if len(configs) != len(origins):
            raise ValueError(f"{len(origins)} origins for {len(configs)} configs")
        if len(self.configs) + len(configs) > self.size:
            raise ValueError(f"round of {self.size}: cannot add {len(configs)} to {len(self.configs)}")
        self.configs.extend(configs)
        self.origins.extend(origins)


class ProposalSource:
    """One source of proposals (module docstring).  Subclasses set ``name`` (the registry key),
    ``origin`` (the tag of what they propose), ``after`` (the names of the sources they run
    after) and, when they must, ``before`` (the names of those they run before), and override
    the hooks they need.  One instance per Tuner run: a source may keep its own state on
    ``self``."""

    name: str = ""
    origin: str = ""
    after: tuple[str, ...] = ()
    before: tuple[str, ...] = ()

    def start(self, state: SearchState) -> list[Tagged]:
        """The configs to evaluate when the run starts (default: none)."""
        return []

    def before_round(self, state: SearchState) -> None:
        """Called before every round (default: nothing)."""

    def propose(self, state: SearchState, rnd: Round) -> None:
        """Add this source's configs to ``rnd`` (at most ``rnd.free``; default: none)."""

    def finish(self, state: SearchState) -> None:
        """Called when the run's result is made (default: nothing): complete what the source
        reports in the result but left undone because the run never needed it."""


_REGISTRY: dict[str, type[ProposalSource]] = {}   # in registration order
_ORDER: list[type[ProposalSource]] = []            # the registry's order (``_ordered``)


def _names(cls: type[ProposalSource], what: str) -> tuple[str, ...]:
    """``cls.after`` / ``cls.before`` as a tuple of names (ValueError for a bare string or a non-name)."""
    got = getattr(cls, what)
    if isinstance(got, str) or not all(isinstance(n, str) and n for n in got):
        raise ValueError(f"proposal source {cls.name!r}: {what} must be a tuple of source names, not {got!r}")
    return tuple(got)


def _ordered(registry: dict[str, type[ProposalSource]]) -> list[type[ProposalSource]]:
    """The sources of ``registry`` in topological order of their ``after``/``before`` (names not
    registered are ignored), ties by registration order; ValueError naming the sources of a cycle."""
    names = list(registry)
    preds: dict[str, set[str]] = {n: set() for n in names}
    for n, cls in registry.items():
        preds[n].update(a for a in _names(cls, "after") if a in preds)
        for b in _names(cls, "before"):
            if b in preds:
                preds[b].add(n)
    out: list[str] = []
    done: set[str] = set()
    while len(out) < len(names):
        ready = next((n for n in names if n not in done and preds[n] <= done), None)
        if ready is None:
            stuck = [n for n in names if n not in done]
            raise ValueError(f"proposal sources {', '.join(map(repr, stuck))}: their after/before form a cycle")
        out.append(ready)
        done.add(ready)
    return [registry[n] for n in out]


def register(cls: type[ProposalSource]) -> type[ProposalSource]:
    """Register ``cls`` under ``cls.name`` (usable as a class decorator; returns ``cls``).
    Raises ValueError (one line; nothing registered) for an empty name, a name taken by another
    class, an ``order`` attribute (replaced by ``after``/``before``), a name in ``after`` or
    ``before`` that is not registered (nor ``cls``'s own), or an order with a cycle."""
    global _ORDER
    if not cls.name:
        raise ValueError(f"{cls.__name__}: a proposal source needs a name")
    old = _REGISTRY.get(cls.name)
    if old is not None and old is not cls:
        raise ValueError(f"proposal source {cls.name!r} is already registered ({old.__name__})")
    if hasattr(cls, "order"):
        raise ValueError(f"proposal source {cls.name!r}: 'order' is not used; name the sources it runs "
                         "after (after = (...)) or before (before = (...))")
    for what in ("after", "before"):
        for n in _names(cls, what):
            if n == cls.name:
                raise ValueError(f"proposal source {cls.name!r} names itself in {what}")
            if n not in _REGISTRY:
                raise ValueError(f"proposal source {cls.name!r}: {what} names {n!r}, which is not registered")
    trial = {**_REGISTRY, cls.name: cls}
    _ORDER = _ordered(trial)
    _REGISTRY.clear()
    _REGISTRY.update(trial)
    return cls


def unregister(name: str) -> None:
    """Remove the source registered as ``name`` (nothing when there is none).  Raises ValueError
    when another registered source names it in ``after``/``before`` (remove that one first)."""
    global _ORDER
    if name not in _REGISTRY:
        return
    users = [n for n, c in _REGISTRY.items() if n != name and name in (*_names(c, "after"), *_names(c, "before"))]
    if users:
        raise ValueError(f"proposal source {name!r} is named in the order of {', '.join(map(repr, users))}")
    del _REGISTRY[name]
    _ORDER = _ordered(_REGISTRY)


def order() -> list[str]:
    """The names of the registered sources, in the order the Tuner calls them."""
    return [c.name for c in _ORDER]


def sources() -> list[ProposalSource]:
    """A fresh instance of every registered source, in the registry's order (module docstring)."""
    return [cls() for cls in _ORDER]
