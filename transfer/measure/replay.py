"""Replay backend: measurements answered from a recorded Kernel Tuner cache file.

Modelled on Kernel Tuner's simulation runner: the file holds what a real device measured for
every config of a space; ``measure`` looks the config up instead of running it.  Records
produced here have source ``replay``.  A config absent from the file (or outside the space) is
status ``invalid``; failures recorded in the file keep their status.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tunedb.index.keys import canonical_json
from tunedb.index.record import Record
from tunedb.transfer.measure.backend import ReplayBackend
from tunedb.transfer.search.space import Space


class ReplayData:
    """One cache file: its device target, kernel workload, space and recorded results."""

    def __init__(self, path: str | Path, device: str | None = None):
        from tunedb.transfer.interop import ImportIssue
        from tunedb.transfer.interop.kernel_tuner import load_cache, parse_loaded, space_from_cache

        self.path = Path(path)
        if not self.path.is_file():
            raise ValueError(f"replay file {self.path} does not exist")
        doc = load_cache(self.path)  # read once: the records and the space come from the same document
        self.results: dict[str, Record] = {}
        bad = 0
        first: Record | None = None
        for item in parse_loaded(doc, self.path, device=device):
            if isinstance(item, ImportIssue):
                bad += 1
                continue
            first = first or item
            self.results[item.config_json] = item  # == canonical_json(item.config): the record's own text
        if first is None:
            raise ValueError(f"replay file {self.path} holds no usable entries")
        self.skipped = bad
        self.target: dict = dict(first.target)
        self.workload: dict = dict(first.workload)
        base = space_from_cache(doc)
        valid = [r.config for r in self.results.values() if r.status != "invalid"]
        self.space: Space = Space(knobs=base.knobs, constraints=base.constraints, finite=tuple(valid))

    def optimum(self) -> tuple[dict, float]:
        """(config, cost in seconds) of the fastest ok entry: the true optimum of the device."""
        ok = [r for r in self.results.values() if r.status == "ok" and r.cost is not None]
        best = min(ok, key=lambda r: r.cost)
        return dict(best.config), float(best.cost)

    def costs_ok(self) -> list[float]:
        return [r.cost for r in self.results.values() if r.status == "ok" and r.cost is not None]


class KernelTunerReplayBackend(ReplayBackend):
    """``measure`` answers from a ReplayData; target and workload are whatever the caller tunes."""

    def __init__(self, data: ReplayData):
        self.data = data

    def space(self, workload: Mapping[str, Any] | None = None) -> Space:
        return self.data.space

    def measure(self, target: Mapping[str, Any], workload: Mapping[str, Any], config: Mapping[str, Any]) -> Record:
        t0 = time.perf_counter()
        rec = self.data.results.get(canonical_json(dict(config)))
        if rec is None or not self.data.space.is_valid(dict(config)):
            status = rec.status if rec is not None and rec.status != "ok" else "invalid"
            return Record(target, workload, dict(config), [], status=status,
                          error="" if rec is not None else "config is not in the replayed data set",
                          source="replay", wall_s=time.perf_counter() - t0,
                          meta={"backend": self.name, "replay_file": self.data.path.name})
        return Record(target, workload, dict(config), list(rec.costs), status=rec.status, error=rec.error,
                      compile_s=rec.compile_s, wall_s=time.perf_counter() - t0, source="replay",
                      meta={"backend": self.name, "replay_file": self.data.path.name})
