"""Copying records between stores of any backends (``tunedb copy``): resumable and idempotent.

:func:`copy_records` moves the records of ``src`` into ``dst`` unchanged: the same record_id,
keys, canonical JSON, costs, timestamps, status, source, session, host and origin.  Nothing new
is set on them (a copy is the same measurement, not a new one); what ``dst`` adds on its own when
it stores a record (its commit time) is the destination's, as for any commit.

Contract
    * Idempotent by record_id: a record ``dst`` already holds is skipped (``dst``'s record_ids of
      a target are read once, before that target is copied), so a rerun copies 0.
    * One target at a time, in batches of ``batch`` records, each one ``dst.commit`` (durable when
      it returns, all-or-nothing): a copy killed at any moment (even SIGKILL) has lost nothing it
      acknowledged, holds no record twice and no record that ``src`` does not hold, and a rerun
      resumes where it stopped and finishes.  Records are copied in ``src``'s commit order, so the
      measurement that answers ``lookup`` in ``src`` (the one committed last) answers in ``dst``.
    * Invalidations: ``invalidate`` stamps "now", so copying the stamp itself would make every
      copied record stale (or none).  Instead, per target that ``src`` holds stale records of, the
      stale records are copied first, then ``dst.invalidate(target)``, then the live ones: what
      was stale in ``src`` is stale in ``dst`` and what was live is live.  A rerun invalidates
      again only when some of ``src``'s stale records are live in ``dst`` (a copy killed before
      it invalidated), so the live records copied after an invalidation stay live.  Caveat: the
      invalidation in ``dst`` also stales ``dst``'s own older records of that target (a
      destination cannot be told "these records only"); that is the safe side (they stop
      answering and are measured again).
    * Verdicts: ``src``'s verdicts of the copied target's records are stored with ``dst.mark``
      where ``dst`` has none for the record, and ``refuted`` also overrides a ``verified`` in
      ``dst`` (refuted is the safe side); ``dst``'s own ``refuted`` stays.  Marked after the
      records, so a rerun of a copy killed before it marked stores them.
    * ``ValueError`` (nothing written) for an unknown target or a bad ``batch``; ``OSError`` from
      the media as the stores raise it (what was committed before stays).

Returns counts: ``copied``, ``skipped`` (already in ``dst``), ``records`` (``src``'s records of
the targets), ``invalidated`` (targets invalidated in ``dst``), ``verdicts`` (stored) and
``targets``: one dict per target with the same counts and its ``target_key``/``target_name``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

from tunedb.index.contract.base import RecordStore
from tunedb.index.contract.checks import is_key
from tunedb.index.contract.tables import rows_with_ids
from tunedb.index.model.batch import RecordBatch
from tunedb.index.model.keys import key_of

DEFAULT_BATCH = 5_000

#: ``progress(done, total, info)``: records handled so far (copied + skipped), of ``total``
Progress = Callable[[int, int, str], None]


def resolve_targets(src: RecordStore, targets: Iterable[Any] | None) -> list[dict]:
    """The targets of ``src`` to copy, as ``src.targets()`` rows: all of them (``targets`` None)
    or the named ones (a name, a key, a unique key prefix, a target dict), each once, in the order
    given.  ``ValueError`` (one line) for one ``src`` holds no records of."""
    have = src.targets()
    if targets is None:
        return have
    by_key = {t["target_key"]: t for t in have}
    out: list[dict] = []
    for spec in targets:
        if isinstance(spec, dict):
            tk = key_of(spec)
        elif isinstance(spec, str) and is_key(spec):
            tk = spec
        else:
            found = src.find_target(str(spec))
            tk = key_of(found) if found is not None else None
        if tk not in by_key:
            raise ValueError(f"target {spec!r} has no records in {src.location}")
        if all(t["target_key"] != tk for t in out):
            out.append(by_key[tk])
    return out


def _ids(t: pa.Table) -> set[str]:
    return set(t.column("record_id").to_pylist())


def copy_records(src: RecordStore, dst: RecordStore, *, targets: Iterable[Any] | None = None,
                 batch: int = DEFAULT_BATCH, progress: Progress | None = None) -> dict:
    """Copy ``src``'s records (of ``targets``, default all) into ``dst``; see the module docstring
    for what is copied, idempotence, resumption and the counts returned."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be an integer >= 1, got {batch!r}")
    if src is dst:
        raise ValueError("source and destination are the same store")
    chosen = resolve_targets(src, targets)
    total = sum(int(t["records"]) for t in chosen)
    done = 0
    out: dict[str, Any] = {"copied": 0, "skipped": 0, "records": 0, "invalidated": 0, "verdicts": 0,
                           "targets": [], "source": src.location, "destination": dst.location}
    src_verdicts = src.verdicts()

    def put(table: pa.Table, row: dict) -> None:
        """Commit ``table`` to ``dst`` in batches, each durable before the next."""
        nonlocal done
        for start in range(0, table.num_rows, batch):
            chunk = table.slice(start, batch)
            dst.commit(RecordBatch.from_table(chunk))
            row["copied"] += chunk.num_rows
            done += chunk.num_rows
            if progress is not None:
                progress(done, total, row["target_name"])

    for t in chosen:
        tk, name = t["target_key"], t["target_name"]
        every = src.records(tk).sort_by([("committed", "ascending")])
        stale = _ids(every) - _ids(src.records(tk, include_stale=False))
        have = _ids(dst.records(tk))  # read once: the resumption point
        total += every.num_rows - int(t["records"])
        row = {"target_key": tk, "target_name": name, "records": every.num_rows, "copied": 0,
               "skipped": len(_ids(every) & have), "stale": len(stale), "invalidated": False, "verdicts": 0}
        done += row["skipped"]

        todo = rows_with_ids(every, have, keep=False)
        if stale:
            put(rows_with_ids(todo, stale), row)
            # invalidate only while some of src's stale records are live in dst
            live_in_dst = _ids(dst.records(tk, include_stale=False)) & stale
            if live_in_dst:
                dst.invalidate(tk)
                row["invalidated"] = True
                time.sleep(0.002)  # the records copied next are committed strictly after the stamp
            todo = rows_with_ids(todo, stale, keep=False)
        put(todo, row)
        if progress is not None:
            progress(done, total, name)
        ids = _ids(every)
        mine = {rid: v for rid, v in src_verdicts.items() if rid in ids}
        if mine:
            theirs = dst.verdicts()
            marks = {rid: v for rid, v in mine.items()
                     if theirs.get(rid) is None or (v == "refuted" and theirs[rid] != "refuted")}
            if marks:
                row["verdicts"] = dst.mark(marks)
        for k in ("copied", "skipped", "records", "verdicts"):
            out[k] += row[k]
        out["invalidated"] += int(row["invalidated"])
        out["targets"].append(row)
    return out


__all__ = ["DEFAULT_BATCH", "copy_records", "resolve_targets"]
