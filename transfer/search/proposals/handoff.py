"""What proposal sources hand on to each other, owned by the Tuner: the seed queue and the model slot.

``SeedQueue``
    the run's seeds: the source entries they came from (``SeedSource``, in retrieval order),
    which entry each seed config is credited to (``source_of``: its most similar source), the
    report of the sources (``TuneResult.seeds``) and the *pending* order, the seeds not
    evaluated yet in the order they are to be tried.  ``seeds.TransferredSeeds`` fills it; the
    RGPE surrogate re-orders it (``put``); ``first.DefaultFirst`` takes the first ``n_seeds``
    (``take``); the rankers read it (``pending``, ``untried``); the Tuner drops what each round
    evaluated (``drop``).
``ModelSlot``
    the cost model of the run and its report (``TuneResult.model``): set by the source that
    fits it (``model.ModelSource``: ``put``, or ``fail`` with the error), read by the sources
    that rank with it (through ``SearchState.predict``, or ``model`` itself).

A source reads and changes these through their methods only; nothing else about the seeds or
the model is shared between sources.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tunedb.index.model.keys import canonical_json

__all__ = ["ModelSlot", "SeedQueue", "SeedSource"]


def _sig(cfg: Mapping[str, Any]) -> str:
    return canonical_json(dict(cfg))


@dataclass(frozen=True)
class SeedSource:
    """One nearest entry the seeds came from: ``match`` (the store's retrieval match: ``target``,
    ``workload``, ``target_name``, ``best``...), ``adapted`` (its best configs adapted to this
    space, best first), ``similarity`` (the match's hardware similarity, 0-1) and ``entry`` (what
    a seed's record carries as ``meta["seeded_from"]``: target_name, target_key, workload_key,
    similarity rounded to 6 digits)."""

    match: Any
    adapted: list[dict]
    similarity: float
    entry: dict


class SeedQueue:
    """The seeds of one run (module docstring).  Empty until a source adds sources and puts an order."""

    def __init__(self) -> None:
        self._pending: list[dict] = []
        self._sources: list[SeedSource] = []
        self._source_of: dict[str, dict] = {}
        self._report: list[dict] = []

    # ---------------------------------------------------------------- sources
    def add_source(self, match: Any, adapted: list[dict]) -> SeedSource:
        """Add the next source entry (``match``, with its configs ``adapted`` to this space):
        reported in ``report`` (from_target, from_workload, similarity) and credited with each of
        ``adapted`` that no more similar source gave already.  Returns the new ``SeedSource``."""
        sim = float(match.similarity)
        entry = {"target_name": match.target_name, "target_key": match.target_key,
                 "workload_key": match.workload_key, "similarity": round(sim, 6)}
        src = SeedSource(match, adapted, sim, entry)
        self._sources.append(src)
        self._report.append({"from_target": match.target_name, "from_workload": match.workload,
                             "similarity": round(sim, 6)})
        for c in adapted:
            s = _sig(c)
            old = self._source_of.get(s)
            if old is None or entry["similarity"] > old["similarity"]:
                self._source_of[s] = entry
        return src

    @property
    def sources(self) -> tuple[SeedSource, ...]:
        """The source entries, in the order they were added (retrieval order: most similar first)."""
        return tuple(self._sources)

    def set_weights(self, weights: Iterable[float]) -> None:
        """Report each source's seed weight (``seed_weight`` in ``report``, one per source, in order)."""
        for info, w in zip(self._report, weights):
            info["seed_weight"] = round(w, 6)

    @property
    def report(self) -> list[dict]:
        """One dict per source (``TuneResult.seeds``): from_target, from_workload, similarity
        and, with ``seed_order="similarity"``, seed_weight."""
        return self._report

    def source_of(self, cfg: Mapping[str, Any]) -> dict | None:
        """The entry ``cfg`` is credited to as a seed (its most similar source's ``SeedSource.entry``,
        a copy); None when no source gave it."""
        got = self._source_of.get(_sig(cfg))
        return None if got is None else dict(got)

    def is_seed(self, signature: str) -> bool:
        """Whether the config of ``signature`` (``base.sig``) is one of the sources' seeds."""
        return signature in self._source_of

    # ---------------------------------------------------------- pending order
    @property
    def pending(self) -> tuple[dict, ...]:
        """The seeds not evaluated yet, in the order they are to be tried (some may be tried
        already this round: ``untried`` leaves them out)."""
        return tuple(self._pending)

    def __len__(self) -> int:
        return len(self._pending)

    def put(self, configs: Iterable[dict]) -> None:
        """Make ``configs`` the pending order (replacing it)."""
        self._pending = list(configs)

    def reorder(self, order: Callable[[list[dict]], list[dict]]) -> None:
        """Replace the pending order by ``order(pending)``."""
        self._pending = list(order(list(self._pending)))

    def take(self, n: int) -> list[dict]:
        """Remove and return the first ``n`` pending configs."""
        head, self._pending = self._pending[:n], self._pending[n:]
        return head

    def untried(self, tried: Collection[str], n: int | None = None) -> list[dict]:
        """The first ``n`` (None: all) pending configs whose signature is not in ``tried``, in order."""
        out: list[dict] = []
        for c in self._pending:
            if n is not None and len(out) >= n:
                break
            if _sig(c) not in tried:
                out.append(c)
        return out

    def drop(self, tried: Collection[str]) -> None:
        """Remove the pending configs whose signature is in ``tried``."""
        self._pending = [c for c in self._pending if _sig(c) not in tried]


class ModelSlot:
    """The run's cost model and its report (module docstring).  ``model`` None: no model (yet)."""

    def __init__(self, model: Any = None) -> None:
        self._model = model
        self._info: dict = {}

    @property
    def model(self) -> Any:
        """The cost model (``predict(configs, workloads, targets)`` -> costs), or None."""
        return self._model

    @property
    def info(self) -> dict:
        """Its report (``TuneResult.model``): kind, records, targets, heldout_spearman, fits and
        (warm) base; or ``{"error": ...}`` after a failed fit; {} before any fit."""
        return self._info

    @property
    def fits(self) -> int:
        """Fits so far (since the last failure)."""
        return int(self._info.get("fits", 0))

    def put(self, model: Any, info: dict) -> None:
        """Set the model and its report (the fitting source only)."""
        self._model, self._info = model, info

    def fail(self, error: str) -> None:
        """Report a failed fit (``info = {"error": error}``); the model in place stays."""
        self._info = {"error": error}
