"""Neighbourhoods in a space: the configs one knob away (two when there are fewer than six)."""

from __future__ import annotations

import numpy as np

from tunedb.transfer.space import Space

__all__ = ["Neighbourhood"]


class Neighbourhood:
    """``space``'s neighbours of a config: ``Space.neighbours`` for an infinite space; for a
    finite one, its listed configs that differ from the config in one knob (in one or two when
    fewer than six do), in the order the space lists them (the list is indexed once)."""

    def __init__(self, space: Space) -> None:
        self.space = space
        self._matrix: np.ndarray | None = None
        self._list: list[dict] = []
        self._codes: list[dict] = []

    def __call__(self, cfg: dict) -> list[dict]:
        """The neighbours of ``cfg`` (class docstring)."""
        space = self.space
        if space.finite is None:
            return space.neighbours(cfg)
        if self._matrix is None:
            self._codes = [{repr(v): i for i, v in enumerate(k.values)} for k in space.knobs]
            self._list = list(space.finite)
            self._matrix = np.array([[self._codes[j].get(repr(c[n]), -1) for j, n in enumerate(space.names)]
                                     for c in self._list], np.int32)
        v = np.array([self._codes[j].get(repr(cfg[n]), -1) for j, n in enumerate(space.names)], np.int32)
        d = (self._matrix != v).sum(1)
        idx = np.flatnonzero(d == 1)
        if len(idx) < 6:
            idx = np.flatnonzero((d >= 1) & (d <= 2))
        return [self._list[i] for i in idx]
