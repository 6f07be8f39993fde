"""A fused-MoE table for a device or shape that has none: each batch size M from the device's own
record, else predicted from the nearest devices and shapes (``tunedb.index.retrieval.predict``).

Retrieval: the records of the same quantisation (dtype, block shape, per-channel flag) are put
in one in-memory store, and ``predict_best`` answers each (device, shape, M) from its nearest
entries there (hardware and workload similarity; a config scores by how many near entries chose
it, weighted by similarity).  A config of another quantisation is never predicted: its block
sizes need not fit (block-wise fp8 needs ``BLOCK_SIZE_K`` a multiple of the block).

A predicted table says so in a sidecar ``<table>.tunedb.json`` (:func:`sidecar`): per M, ``own
record`` (its record id) or ``predicted`` with the device, shape and M it came from and the
similarity.  vLLM reads only the table; the sidecar is for people.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tunedb.index.memory.store import MemoryStore
from tunedb.index.model.record import Record
from tunedb.index.retrieval.predict import MIN_SIMILARITY, Prediction, predict_best
from tunedb.transfer.interop.device_fields import resolve_device_fields
from tunedb.transfer.tuners.serving.names import Shape, gpu_target, shape_of_workload, table_name
from tunedb.transfer.tuners.serving.tables import Table, tables_of

#: the batch sizes vLLM's MoE tuning script tunes by default: those of a predicted table
DEFAULT_MS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)
#: the nearest entries each prediction weighs (``predict_best``'s ``neighbours``)
NEIGHBOURS = 5
#: sidecar file suffix
SIDECAR_SUFFIX = ".tunedb.json"


def group_of(shape: Shape) -> tuple:
    """The quantisation of a shape: retrieval stays within it."""
    return shape.dtype, shape.block_shape, shape.per_channel_quant


@dataclass
class Predicted:
    """One predicted entry: the config and where it came from (device, shape text, M,
    similarity), plus the prediction's score (0..1)."""

    config: dict
    device: str
    shape: str
    m: int
    similarity: float
    score: float

    def provenance(self) -> dict:
        return {"source": "predicted", "from_device": self.device, "from_shape": self.shape, "from_M": self.m,
                "similarity": round(self.similarity, 4), "score": round(self.score, 4)}


@dataclass
class TablePredictor:
    """Predictions from fused-MoE ``records`` (one in-memory store per quantisation, built on
    first use)."""

    records: list[Record]
    neighbours: int = NEIGHBOURS
    _stores: dict = field(default_factory=dict)

    def store(self, shape: Shape) -> MemoryStore | None:
        """The store of ``shape``'s quantisation; None when no record has it."""
        g = group_of(shape)
        if g not in self._stores:
            recs = [r for r in self.records if (sm := shape_of_workload(r.workload)) and group_of(sm[0]) == g]
            store = None
            if recs:
                store = MemoryStore()
                store.commit(recs)
            self._stores[g] = store
        return self._stores[g]

    def predict(self, target: dict, shape: Shape, m: int, *, exclude_target: bool = False) -> Predicted | str:
        """The predicted config of ``shape`` at ``m`` on ``target``, or a one-line reason why there
        is none (no record of this quantisation, nearest entry below the similarity threshold)."""
        store = self.store(shape)
        if store is None:
            return f"no stored table has dtype={shape.dtype or 'none'} and block_shape={_block(shape)}"
        with warnings.catch_warnings():  # a device the hardware catalog lacks is embedded by its name
            warnings.simplefilter("ignore")
            p = predict_best(store, target, shape.workload(m), k=1, neighbours=self.neighbours,
                             exclude_target=exclude_target)
        if not p.trusted or not p.configs:
            return p.reason or "no prediction"
        return _predicted(p)


def _block(shape: Shape) -> str:
    return f"[{shape.block_shape[0]},{shape.block_shape[1]}]" if shape.block_shape else "none"


def _predicted(p: Prediction) -> Predicted:
    """The first config of ``p`` and the most similar neighbour whose best config it is."""
    best = p.configs[0]
    ev = max(best.evidence, key=lambda e: (e.relative >= 1.0 - 1e-9, e.similarity))
    sm = shape_of_workload(ev.workload)
    shape, m = (sm[0].text(), sm[1]) if sm else ("?", 0)
    return Predicted(dict(best.config), ev.target_name, shape, m, ev.similarity, best.score)


def fused_moe_records(records: Iterable[Record]) -> list[Record]:
    """The ``ok`` fused-MoE table entries among ``records``."""
    return [r for r in records if r.status == "ok" and shape_of_workload(r.workload) is not None
            and isinstance(r.target.get("name"), str)]


def predicted_table(records: list[Record], device: str, shape: Shape,
                    predictor: TablePredictor | None = None) -> tuple[Table, dict]:
    """The table of ``shape`` for ``device`` (its torch name) and its sidecar document.

    Batch sizes: the device's own entries of that shape when it has any (each from its record),
    else :data:`DEFAULT_MS`, each predicted.  ValueError (one line, nothing built) when an M
    cannot be predicted."""
    predictor = predictor or TablePredictor(records)
    own = {}
    for t in tables_of(r for r in records if r.target.get("name") == device)[0]:
        if t.shape == shape:
            own.update(t.entries)
    target = _target_of(records, device)
    if not any(r.target.get("name") == device for r in records) and not _placeable(target):
        raise ValueError(f"device {device!r} has no records, and neither the hardware catalog nor its name says what "
                         "it is: no near devices to predict from")
    entries: dict[int, tuple[dict, Record | None]] = {}
    provenance: dict[str, dict] = {}
    for m in sorted(own) or DEFAULT_MS:
        if m in own:
            cfg, rec = own[m]
            entries[m] = (cfg, rec)
            provenance[str(m)] = {"source": "own record", "record_id": rec.record_id}
            continue
        got = predictor.predict(target, shape, m)
        if isinstance(got, str):
            raise ValueError(f"cannot predict {table_name(device, shape)} at M={m}: {got}")
        entries[m] = (got.config, None)
        provenance[str(m)] = got.provenance()
    name = table_name(device, shape)
    table = Table(name, device, shape, entries)
    return table, sidecar(name, device, shape, provenance)


def _placeable(target: dict) -> bool:
    """Whether the hardware catalog knows the device or its name says its vendor."""
    return "vendor" in target or bool(resolve_device_fields(str(target.get("name", "")), "gpu"))


def _target_of(records: list[Record], device: str) -> dict:
    """The stored target of ``device`` when it has records, else a new GPU target of that name."""
    for r in records:
        if r.target.get("name") == device:
            return dict(r.target)
    return gpu_target(device)


def sidecar(name: str, device: str, shape: Shape, provenance: dict[str, dict]) -> dict:
    """The sidecar document of a table: which entries are the device's own and which predicted."""
    n_pred = sum(1 for p in provenance.values() if p["source"] == "predicted")
    return {"table": name, "device": device, "shape": shape.text(), "predicted": n_pred > 0,
            "entries_predicted": n_pred, "entries_own": len(provenance) - n_pred,
            "min_similarity": MIN_SIMILARITY,
            "note": "predicted entries were chosen by similarity to other devices' and shapes' tuned tables, "
                    "not measured on this device",
            "entries": provenance}


def sidecar_text(doc: dict[str, Any]) -> str:
    """The sidecar file's text (indent 2, final newline)."""
    return json.dumps(doc, indent=2) + "\n"


__all__ = ["DEFAULT_MS", "NEIGHBOURS", "SIDECAR_SUFFIX", "Predicted", "TablePredictor", "fused_moe_records",
           "group_of", "predicted_table", "sidecar", "sidecar_text"]
