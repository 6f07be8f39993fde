"""Leave one device out on fused-MoE tables: how often does a predicted table entry equal the
tuned one?

For each device, its tables are hidden and each of its entries (shape, M) is answered three ways:

* ``tunedb``: :class:`~tunedb.transfer.tuners.serving.predict.TablePredictor` with the device's
  own records left out (``exclude_target``): what ``tunedb export --shape`` writes for a device
  without tables;
* ``nearest_device``: the same shape's table of the most similar other device (cosine of the
  hardware vectors, ``tunedb.index.retrieval.features``), read as vLLM reads a table: the entry
  of the batch size nearest M; no answer when no other device has that shape;
* ``vllm_default``: :func:`vllm_default_config`, vLLM's fallback when no table exists.

Scores: ``exact`` = the six core knobs (:data:`CORE_KNOBS`, those the tuned config has) all equal;
per knob, the share of entries where that knob equals the tuned one; an entry without an answer
counts as a miss.  ``covered`` repeats them on the entries whose shape another device has (where
``nearest_device`` answers).  Agreement with a tuned table is a proxy for speed, not a speed
measurement: two configs can differ and run equally fast.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable

import numpy as np

from tunedb.index.model.record import Record
from tunedb.index.retrieval.features import hardware_vector
from tunedb.transfer.tuners.serving.names import Shape, shape_of_workload
from tunedb.transfer.tuners.serving.predict import TablePredictor, fused_moe_records

CORE_KNOBS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
METHODS = ("tunedb", "nearest_device", "vllm_default")
#: what Triton launches with when a config leaves them out (NVIDIA backend defaults)
TRITON_DEFAULT_WARPS = 4
TRITON_DEFAULT_STAGES = 3


def vllm_default_config(m: int, shape: Shape, rocm: bool = False) -> dict:
    """vLLM's fallback config for batch size ``m`` when no table exists (its rule, restated):

    * block-wise fp8 (``dtype=fp8_w8a8`` with a block shape [n, k]): BLOCK_SIZE_M 64, BLOCK_SIZE_N
      n, BLOCK_SIZE_K k, GROUP_SIZE_M 32, 4 warps, 3 stages (2 on ROCm);
    * weight-only int4/int8 with a block (group) shape: only BLOCK_SIZE_M (16 up to M = 20, 32 up
      to 40, else 64) and GROUP_SIZE_M 1; the kernel picks the other sizes later (left out here);
    * otherwise, batches no larger than the expert count (M <= E): 16 / 32 / 64 with GROUP_SIZE_M
      1, larger batches 64 / 64 / 32 with GROUP_SIZE_M 8 (M / N / K block sizes); warps and stages
      are not set, so Triton's launch defaults apply (4 warps, 3 stages on NVIDIA).
    """
    if shape.dtype == "fp8_w8a8" and shape.block_shape is not None:
        n, k = shape.block_shape
        return {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": n, "BLOCK_SIZE_K": k, "GROUP_SIZE_M": 32, "num_warps": 4,
                "num_stages": 2 if rocm else 3}
    if shape.dtype in ("int4_w4a16", "int8_w8a16") and shape.block_shape is not None:
        return {"BLOCK_SIZE_M": 16 if m <= 20 else 32 if m <= 40 else 64, "GROUP_SIZE_M": 1}
    if m <= shape.E:
        cfg = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}
    else:
        cfg = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}
    return dict(cfg, num_warps=TRITON_DEFAULT_WARPS, num_stages=TRITON_DEFAULT_STAGES)


class _Hardware:
    """Unit hardware vectors of devices by name (computed once each)."""

    def __init__(self, targets: dict[str, dict]) -> None:
        self.targets = targets
        self._v: dict[str, np.ndarray] = {}

    def vec(self, name: str) -> np.ndarray:
        if name not in self._v:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                v = hardware_vector(self.targets[name]).astype(np.float64)
            self._v[name] = v / (np.linalg.norm(v) or 1.0)
        return self._v[name]

    def nearest(self, name: str, among: list[str]) -> str:
        return max(among, key=lambda d: (float(self.vec(d) @ self.vec(name)), d))


def _nearest_m(table: dict[int, dict], m: int) -> dict:
    """The entry vLLM uses for batch size ``m``: that of the nearest tabled batch size."""
    return table[min(table, key=lambda x: (abs(x - m), x))]


def _agreement(pred: dict | None, tuned: dict) -> tuple[bool, dict[str, bool]]:
    knobs = {k: pred is not None and pred.get(k) == tuned[k] for k in CORE_KNOBS if k in tuned}
    return bool(knobs) and all(knobs.values()), knobs


def leave_one_device_out(records: list[Record], progress: Callable[[str], None] | None = None) -> dict:
    """The scores of the module docstring over every fused-MoE entry of ``records`` (a plain
    JSON dict: per method ``exact``, ``answered``, ``knobs``; the same on ``covered``; counts)."""
    recs = fused_moe_records(records)
    predictor = TablePredictor(recs)
    targets: dict[str, dict] = {}
    tables: dict[Shape, dict[str, dict[int, dict]]] = defaultdict(lambda: defaultdict(dict))
    for r in recs:
        shape, m = shape_of_workload(r.workload)  # type: ignore[misc]
        targets.setdefault(r.target["name"], dict(r.target))
        tables[shape][r.target["name"]][m] = dict(r.config)
    hw = _Hardware(targets)
    tally = {scope: {meth: {"n": 0, "answered": 0, "exact": 0, "knobs": Counter(), "knob_n": Counter()}
                     for meth in METHODS} for scope in ("all", "covered")}
    t0 = time.perf_counter()
    devices = sorted(targets)
    for i, device in enumerate(devices):
        for shape, by_dev in tables.items():
            for m, tuned in sorted(by_dev.get(device, {}).items()):
                others = [d for d in by_dev if d != device]
                answers = {"tunedb": predictor.predict(targets[device], shape, m, exclude_target=True),
                           "nearest_device": _nearest_m(by_dev[hw.nearest(device, others)], m) if others else None,
                           "vllm_default": vllm_default_config(m, shape, targets[device].get("vendor") == "amd")}
                for meth, ans in answers.items():
                    cfg = ans.config if hasattr(ans, "config") else ans if isinstance(ans, dict) else None
                    for scope in ("all", "covered") if others else ("all",):
                        _count(tally[scope][meth], cfg, tuned)
        if progress:
            progress(f"{i + 1}/{len(devices)} {device}")
    return {"devices": len(devices), "tables": sum(len(v) for v in tables.values()),
            "entries": tally["all"]["tunedb"]["n"], "covered_entries": tally["covered"]["tunedb"]["n"],
            "seconds": round(time.perf_counter() - t0, 2),
            "all": {meth: _summary(t) for meth, t in tally["all"].items()},
            "covered": {meth: _summary(t) for meth, t in tally["covered"].items()}}


def _count(t: dict, cfg: dict | None, tuned: dict) -> None:
    exact, knobs = _agreement(cfg, tuned)
    t["n"] += 1
    t["answered"] += cfg is not None
    t["exact"] += exact
    for k, ok in knobs.items():
        t["knob_n"][k] += 1
        t["knobs"][k] += ok


def _summary(t: dict) -> dict:
    n = max(t["n"], 1)
    return {"n": t["n"], "answered": round(t["answered"] / n, 4), "exact": round(t["exact"] / n, 4),
            "knobs": {k: round(t["knobs"][k] / t["knob_n"][k], 4) for k in CORE_KNOBS if t["knob_n"][k]}}


__all__ = ["CORE_KNOBS", "METHODS", "leave_one_device_out", "vllm_default_config"]
