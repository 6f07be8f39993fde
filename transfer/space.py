"""Schedule spaces: named knobs with finite sets of allowed values, plus constraints.

A config is a dict knob -> value.  ``Space.validate`` is the gate before any codegen:
every knob present, no unknown knob, every value exactly one of the allowed values
(bool is never accepted as an int, strings never as numbers), every constraint holds.
Constraints are Python callables written in this project; nothing from a record or an
imported file is ever evaluated.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


class InvalidConfig(ValueError):
    """A config outside its space; the message says which knob or constraint."""


@dataclass(frozen=True)
class Knob:
    """One tunable parameter.  ``values`` are ordered: adjacent values are neighbours."""

    name: str
    values: tuple
    doc: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(self.values))
        if not self.values:
            raise ValueError(f"knob {self.name} has no values")

    @property
    def numeric(self) -> bool:
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.values)

    def index(self, value: Any) -> int:
        for i, v in enumerate(self.values):
            if type(v) is type(value) and v == value:
                return i
        raise InvalidConfig(f"knob '{self.name}': {value!r} is not one of the allowed values {list(self.values)}")


@dataclass(frozen=True)
class Constraint:
    doc: str
    check: Callable[[Mapping[str, Any]], bool] = field(compare=False)


@dataclass(frozen=True)
class Space:
    knobs: tuple
    constraints: tuple = ()
    #: every valid config, when the space is a known finite list (e.g. a replayed data set),
    #: kept in knob-value order (see :meth:`__post_init__`), whatever order it was given in
    finite: tuple | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "knobs", tuple(self.knobs))
        object.__setattr__(self, "constraints", tuple(self.constraints))
        if self.finite is not None:
            object.__setattr__(self, "finite", self._canonical(dict(c) for c in self.finite))

    def _canonical(self, configs: Iterator[dict]) -> tuple:
        """``configs`` in knob-value order: sorted by each knob's value index, the first knob
        first (the order :meth:`__iter__` enumerates a space without a list).  So the same set
        of configs is the same space, and a seeded search draws the same configs, whether the
        list came from a Kernel Tuner searchspace, a cache file or a DB.  A value outside its
        knob sorts after that knob's values (original order kept among equals)."""
        configs = list(configs)
        try:
            positions = [{v: i for i, v in reversed(list(enumerate(k.values)))} for k in self.knobs]
            order = [tuple(pos.get(c.get(k.name), len(k.values)) for k, pos in zip(self.knobs, positions))
                     for c in configs]
        except TypeError:  # an unhashable value: keep the given order
            return tuple(configs)
        return tuple(configs[i] for i in sorted(range(len(configs)), key=order.__getitem__))

    @property
    def names(self) -> list[str]:
        return [k.name for k in self.knobs]

    def knob(self, name: str) -> Knob:
        for k in self.knobs:
            if k.name == name:
                return k
        raise KeyError(name)

    # ------------------------------------------------------------ validation
    def validate(self, config: Any) -> dict:
        """Return ``config`` as a plain dict, or raise InvalidConfig saying why."""
        if not isinstance(config, Mapping):
            raise InvalidConfig(f"config must be an object, got {type(config).__name__}")
        names = set(self.names)
        unknown = sorted(set(config) - names)
        if unknown:
            raise InvalidConfig(f"unknown knob(s) {unknown}")
        missing = [n for n in self.names if n not in config]
        if missing:
            raise InvalidConfig(f"missing knob(s) {missing}")
        out = {}
        for k in self.knobs:
            v = config[k.name]
            k.index(v)  # raises when not exactly an allowed value (type included)
            out[k.name] = v
        for c in self.constraints:
            if not c.check(out):
                raise InvalidConfig(f"constraint violated: {c.doc}")
        return out

    def is_valid(self, config: Any) -> bool:
        try:
            self.validate(config)
            return True
        except InvalidConfig:
            return False

    # ----------------------------------------------------------- enumeration
    @property
    def raw_size(self) -> int:
        return math.prod(len(k.values) for k in self.knobs)

    def __iter__(self) -> Iterator[dict]:
        """All valid configs (in knob-value order)."""
        if self.finite is not None:
            yield from (dict(c) for c in self.finite)
            return
        for combo in itertools.product(*(k.values for k in self.knobs)):
            cfg = dict(zip(self.names, combo))
            if all(c.check(cfg) for c in self.constraints):
                yield cfg

    def size(self, limit: int = 2_000_000) -> int:
        """Number of valid configs (exact when raw_size <= limit, else a sampled estimate)."""
        if self.finite is not None:
            return len(self.finite)
        if self.raw_size <= limit:
            return sum(1 for _ in self)
        rng = random.Random(0)
        n = 20000
        ok = sum(1 for _ in range(n) if self._raw_ok(self._raw_sample(rng)))
        return int(round(self.raw_size * ok / n))

    def _raw_sample(self, rng: random.Random) -> dict:
        return {k.name: rng.choice(k.values) for k in self.knobs}

    def _raw_ok(self, cfg: Mapping[str, Any]) -> bool:
        return all(c.check(cfg) for c in self.constraints)

    def sample(self, rng: random.Random, tries: int = 10000) -> dict:
        """A uniformly drawn valid config (rejection sampling)."""
        if self.finite is not None:
            return dict(rng.choice(self.finite))
        for _ in range(tries):
            cfg = self._raw_sample(rng)
            if self._raw_ok(cfg):
                return cfg
        raise RuntimeError("could not sample a valid config")

    def neighbours(self, config: Mapping[str, Any]) -> list[dict]:
        """Valid configs one step away: one knob moved to an adjacent value."""
        out = []
        for k in self.knobs:
            i = k.index(config[k.name])
            for j in (i - 1, i + 1):
                if 0 <= j < len(k.values):
                    cand = dict(config)
                    cand[k.name] = k.values[j]
                    if self._raw_ok(cand):
                        out.append(cand)
        return out

    def to_json(self) -> dict:
        return {
            "knobs": [{"name": k.name, "values": list(k.values), "doc": k.doc} for k in self.knobs],
            "constraints": [c.doc for c in self.constraints],
            "size": self.size(),
        }
