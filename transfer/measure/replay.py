"""Replay backend: measurements answered from a recorded Kernel Tuner cache file.

Modelled on Kernel Tuner's simulation runner: the file holds what a real device measured for
every config of a space; ``measure`` looks the config up instead of running it.  Records
produced here have source ``replay`` and ``meta.replay_file`` (the file's name).  A config absent
from the file (or outside the space) is status ``invalid``; failures recorded in the file keep
their status.

Isolation: a replay answers only from its file.  :class:`ReplayStore` is the view of the store a
replay tunes on (``tunedb tune --replay``): its look-ups accept only records that came from the
replayed file (see :meth:`ReplayStore.from_file`), so records other files left on the same
target (several GPUs' caches imported as one device) are never a cache hit; everything else,
writes included, is the wrapped store's.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tunedb.index.keys import canonical_json
from tunedb.index.record import Record
from tunedb.transfer.measure.backend import ReplayBackend
from tunedb.transfer.space import Space


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
        """(config, cost in seconds) of the fastest ok entry by the one estimator (each entry is
        one record: the median of its repeats, ``tunedb.index.estimate``): the true optimum of
        the device as every surface of tunedb measures it."""
        from tunedb.index.estimate import estimate

        ok = [(estimate([r]), r) for r in self.results.values() if r.status == "ok" and r.costs]
        est, best = min(ok, key=lambda er: (er[0].value, er[1].config_key))
        return dict(best.config), float(est.value)

    def costs_ok(self) -> list[float]:
        """Every ok entry's cost (seconds, the estimator's: the median of its repeats)."""
        from tunedb.index.estimate import record_value

        return [record_value(r) for r in self.results.values() if r.status == "ok" and r.costs]


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


class ReplayStore:
    """A view of ``inner`` (any ``RecordStore``) whose :meth:`lookup`/:meth:`lookup_many` answer
    only with records of the replayed file ``data``; every other attribute (commits, ``best``,
    ``records``, ``nearest``, run summaries, ...) is ``inner``'s.  Seeds and the cost model may
    still use other records (they only choose which configs to evaluate); an evaluation's cost
    always comes from the file, through a hit of this view or through the replay backend.

    Not a ``RecordStore`` subclass: the store contract (``tunedb.index.base``) is unchanged."""

    def __init__(self, inner: Any, data: ReplayData) -> None:
        self.inner = inner
        self.data = data
        self.name = data.path.name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)

    def __len__(self) -> int:
        return len(self.inner)

    def __repr__(self) -> str:
        return f"ReplayStore({self.inner!r}, replay={self.name!r})"

    def from_file(self, rec: Record) -> bool:
        """Whether ``rec`` came from the replayed file: imported from a file of that name
        (``origin``) or produced by a replay of it (``meta.replay_file``), and holding what the
        file holds for its config (same status and costs; a config the file lacks: a failure
        record).  The content check keeps out a different file that shares the name."""
        meta = rec.meta if isinstance(rec.meta, Mapping) else {}
        if rec.origin != self.name and meta.get("replay_file") != self.name:
            return False
        want = self.data.results.get(rec.config_json)
        if want is None:
            return rec.status != "ok"
        return rec.status == want.status and tuple(rec.costs) == tuple(want.costs)

    def lookup(self, target: Any, workload: Any, config: Any) -> Record | None:
        """The latest live record of the triple that came from the replayed file, or None."""
        return self.lookup_many(target, workload, [config])[0]

    def lookup_many(self, target: Any, workload: Any, configs: Iterable[Any]) -> list[Record | None]:
        """:meth:`lookup` of each config of one (target, workload), in order.  The inner store
        answers first; where its latest record is from elsewhere, the entry's live records are
        read (once) for the latest one from the file."""
        answers = list(self.inner.lookup_many(target, workload, list(configs)))
        bad = {i: a for i, a in enumerate(answers) if a is not None and not self.from_file(a)}
        if bad:
            first = next(iter(bad.values()))
            table = self.inner.records(first.target_key, first.workload_key, include_stale=False)
            want = {a.config_key for a in bad.values()}
            latest: dict[str, tuple[Any, Record]] = {}
            refuted = {rid for rid, v in self.inner.verdicts().items() if v == "refuted"}
            committed = table.column("committed").to_pylist() if "committed" in table.column_names else None
            keys = table.column("config_key").to_pylist()
            for j, k in enumerate(keys):
                if k not in want:
                    continue
                rec = Record.from_row(table.slice(j, 1).to_pylist()[0])
                if rec.record_id in refuted or not self.from_file(rec):
                    continue
                c = committed[j] if committed is not None else j
                if k not in latest or latest[k][0] is None or c is None or c >= latest[k][0]:
                    latest[k] = (c, rec)
            for i, a in bad.items():
                got = latest.get(a.config_key)
                answers[i] = got[1] if got else None
        return answers


    def entry_records(self, target: Any, workload: Any) -> list[Record]:
        """The inner store's :meth:`entry_records` that came from the replayed file."""
        return [r for r in self.inner.entry_records(target, workload) if self.from_file(r)]

    def best_costs(self, target: Any, workload: Any, k: int = 1) -> list:
        """``RecordStore.best_costs`` over the replayed file's records only."""
        from tunedb.index.estimate import rank

        return rank(self.entry_records(target, workload), k) if k > 0 else []

    def best(self, target: Any, workload: Any, k: int = 1) -> list[Record]:
        return [c.record for c in self.best_costs(target, workload, k)]

    def cost(self, target: Any, workload: Any, config: Any) -> Any:
        """``RecordStore.cost`` over the replayed file's records only."""
        from tunedb.index.estimate import estimate
        from tunedb.index.keys import canonical_json, key_of_text

        ck = config if isinstance(config, str) else key_of_text(canonical_json(dict(config)))
        return estimate(r for r in self.entry_records(target, workload) if r.config_key == ck)


def isolated_store(db: Any, data: ReplayData) -> Any:
    """``db`` seen by a replay of ``data`` (:class:`ReplayStore`); None stays None."""
    return None if db is None else ReplayStore(db, data)
