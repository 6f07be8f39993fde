"""The answers of a batch look-up (:meth:`tunedb.index.contract.base.RecordStore.lookup_batch`).

A tuner proposes a population of configs at once (a Kernel Tuner genetic algorithm's generation,
a MetaSchedule batch of candidates) and asks which of them are already measured.  Most are not,
and of those that are, the caller may only need to know *that* they are.  :class:`Lookups` says
which configs have an answer as one boolean array and builds each answering ``Record`` only
when it is read (then keeps it).

Contract: ``found[i]`` is True exactly when ``lookups[i]`` is a Record, the record that
:meth:`~tunedb.index.contract.base.RecordStore.lookup` returned for config ``i`` at the time of the batch
look-up (a record committed later does not change the answer).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, overload

import numpy as np

if TYPE_CHECKING:
    from tunedb.index.model.record import Record


class Lookups(Sequence["Record | None"]):
    """One answer per config of a batch look-up, in the configs' order.

    ``found``: bool array (read-only), True where the store holds an answer.  Indexing gives
    the Record or None; ``fetch(i)`` is called at most once per found index to build it."""

    def __init__(self, found: np.ndarray, fetch: Callable[[int], Record | None]):
        self.found = np.asarray(found, bool)
        self.found.setflags(write=False)
        self._fetch = fetch
        self._cache: dict[int, Record | None] = {}

    @classmethod
    def of(cls, answers: Sequence[Record | None]) -> "Lookups":
        """Lookups of already built answers (a backend without a batch path)."""
        answers = list(answers)
        return cls(np.array([a is not None for a in answers], bool), answers.__getitem__)

    @property
    def hits(self) -> int:
        """How many configs have an answer."""
        return int(self.found.sum())

    def __len__(self) -> int:
        return len(self.found)

    @overload
    def __getitem__(self, i: int) -> Record | None: ...

    @overload
    def __getitem__(self, i: slice) -> list[Record | None]: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self.found)
        if not -n <= i < n:
            raise IndexError(i)
        i %= n
        if not self.found[i]:
            return None
        if i not in self._cache:
            self._cache[i] = self._fetch(i)
        return self._cache[i]

    def __iter__(self) -> Iterator[Record | None]:
        return (self[i] for i in range(len(self.found)))
