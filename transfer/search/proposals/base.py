"""The one interface every source of the Tuner's proposals implements, and their registry.

A *proposal source* (``ProposalSource``) is one reason to evaluate a config, named by its
``origin`` (one of ``tuner.ORIGINS``, or a new tag of its own).  The Tuner keeps the loop, the
budget, the commits and the bookkeeping; it calls every registered source (``sources()``, in
ascending ``order``) through three hooks:

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

The defaults do nothing, so a source implements only what it needs.  A new source is one new
module defining a subclass and registering it (``@register``), plus its import in
``proposals/__init__.py``, or a ``register(MySource)`` call before the Tuner is built: the
loop does not change (tests/transfer_tests/search_tests/test_tuner_parts.py registers one).

``state`` is the running Tuner (``SearchState``: its options, random generator, space, DB,
what it has evaluated, the cost model and the seeds' sources).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tunedb.index.model.keys import canonical_json
from tunedb.transfer.space import Space

__all__ = ["ProposalSource", "Round", "SearchState", "Tagged", "register", "unregister", "sources", "sig", "seed_or"]

#: a proposed config and why (its origin)
Tagged = tuple[dict, str]


def seed_or(state: SearchState, cands: list[dict], ranked: str) -> list[str]:
    """Origins of ``cands`` chosen by a source tagging ``ranked``: a seed config stays ``seed``."""
    return ["seed" if sig(c) in state.seed_src else ranked for c in cands]


def sig(cfg: Mapping[str, Any]) -> str:
    """The config's signature (its canonical JSON): how the Tuner tells configs apart."""
    return canonical_json(dict(cfg))


class SearchState(Protocol):
    """What a proposal source may read (and, where its docstring says so, set) on the Tuner."""

    db: Any
    target: dict
    workload: dict
    space: Space
    opt: Any                        # TuneOptions
    rng: random.Random
    defaults: dict
    hardware_knobs: dict
    evaluated: dict[str, float]     # signature -> value (inf: failed)
    configs: dict[str, dict]        # signature -> config
    tried: set[str]                 # signatures proposed or evaluated
    model: Any                      # the cost model (None: none yet)
    model_info: dict
    seeds_info: list[dict]
    adapt_report: Any
    timers: dict[str, float]
    pending: list[dict]             # seeds not evaluated yet, in the order they are to be tried
    seed_sources: list[dict]        # the seeds' source entries: {"match", "adapted", "similarity"}
    seed_src: dict[str, dict]       # seed signature -> its (most similar) source entry
    surrogate_info: dict            # TuneResult.surrogate

    def neighbours(self, cfg: dict) -> list[dict]:
        """The space's configs one knob away from ``cfg`` (two when there are few)."""
        ...

    def remaining(self) -> int:
        """Evaluations left in the budget."""
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
    ``origin`` (the tag of what they propose) and ``order`` (when the Tuner calls them:
    ascending), and override the hooks they need.  One instance per Tuner run: a source may
    keep its own state on ``self``."""

    name: str = ""
    origin: str = ""
    order: int = 100

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


_REGISTRY: dict[str, type[ProposalSource]] = {}


def register(cls: type[ProposalSource]) -> type[ProposalSource]:
    """Register ``cls`` under ``cls.name`` (usable as a class decorator; returns ``cls``).
    Raises ValueError for an empty name or a name taken by another class."""
    if not cls.name:
        raise ValueError(f"{cls.__name__}: a proposal source needs a name")
    old = _REGISTRY.get(cls.name)
    if old is not None and old is not cls:
        raise ValueError(f"proposal source {cls.name!r} is already registered ({old.__name__})")
    _REGISTRY[cls.name] = cls
    return cls


def unregister(name: str) -> None:
    """Remove the source registered as ``name`` (nothing when there is none)."""
    _REGISTRY.pop(name, None)


def sources() -> list[ProposalSource]:
    """A fresh instance of every registered source, in ascending ``order`` (ties: by name)."""
    return [cls() for cls in sorted(_REGISTRY.values(), key=lambda c: (c.order, c.name))]
