"""``store.nearest(...)`` and ``store.predict_best(...)``: :class:`RetrievalMixin`.

The store contract (``tunedb.index.contract.base.RecordStore``) and retrieval sit side by side:
neither imports the other.  Retrieval reads a store through :class:`EntrySource` (methods every
``RecordStore`` has); a store class gets the two retrieval methods by mixing this class in above
the contract, ``class MyStore(RetrievalMixin, RecordStore)``, as every shipped backend and view
does.  The methods only read (through the store's own contract methods) and write nothing but
the derived vector index in ``cache_dir()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tunedb.index.retrieval.nearest import Match
    from tunedb.index.retrieval.predict import Prediction
    from tunedb.index.retrieval.source import EntrySource


class RetrievalMixin:
    """Nearest entries and predicted configs of a store (the class it is mixed into must be an
    :class:`~tunedb.index.retrieval.source.EntrySource`, as every ``RecordStore`` is)."""

    def nearest(self: EntrySource, target: Any, workload: Any, k: int = 5, **kwargs: Any) -> list[Match]:
        """The ``k`` entries most similar to (target, workload), most similar first; see
        ``tunedb.index.retrieval.nearest.nearest`` for the options."""
        from tunedb.index.retrieval.nearest import nearest

        return nearest(self, target, workload, k, **kwargs)

    def predict_best(self: EntrySource, target: Any, workload: Any, k: int = 3, **kwargs: Any) -> Prediction:
        """The ``k`` configs predicted for (target, workload) from the nearest entries of other
        targets and workloads, for an entry with no records (each marked predicted, with where it
        came from); see ``tunedb.index.retrieval.predict.predict_best`` for the rule and options.
        Measures and writes nothing."""
        from tunedb.index.retrieval.predict import predict_best

        return predict_best(self, target, workload, k, **kwargs)


__all__ = ["RetrievalMixin"]
