"""What nearest-entry search reads from a store: :class:`EntrySource`.

Every ``tunedb.index.contract.base.RecordStore`` is one.  Retrieval is written against this
protocol, not against ``RecordStore``: the contract and retrieval never import each other, and a
store class gets ``nearest``/``predict_best`` from ``tunedb.index.retrieval.mixin.RetrievalMixin``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

    from tunedb.index.model.estimate import ConfigCost


class EntrySource(Protocol):
    """The store methods retrieval calls (see ``RecordStore`` for their contracts)."""

    def entries(self) -> pa.Table:
        """One row per (target, workload) entry."""

    def best_costs(self, target: Any, workload: Any, k: int = 1) -> list[ConfigCost]:
        """The ``k`` best configs of an entry by the one estimator."""

    def find_target(self, name_or_key: str) -> dict | None:
        """The target dict of a stored target name or key, or None."""

    def cache_dir(self) -> Path:
        """Where derived data (the vector index) of this store lives."""

    def change_token(self) -> tuple:
        """A value that changes whenever the stored records change."""
