"""What ``ParquetStore.commit`` does before and beside its locking: validating and grouping.

``prepare`` turns a commit's argument (Records or a ``RecordBatch``) into a ``Prepared``
commit: validated (``ValueError`` naming the field and the record; nothing is written), with
each record's rid hash and target.  A few records stay ``Record`` objects; many are validated
vectorised as a ``RecordBatch`` (the same messages).  Once the store knows which records are new
(``PartitionSet.fresh_mask``, under its handle lock), ``Prepared`` gives them as Records for a
small commit (``kept_records``) or as a table for a large one (``kept_table``);
``publish_records`` writes a small commit that does not go to the journal as one part file per
target.

Durability: ``publish_records`` returns once every file is durable and published (all targets
or none: ``parts.publish_parts``).  Locking: nothing here takes a lock or touches handle state.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tunedb.index.model.batch import RecordBatch
from tunedb.index.model.keys import rid_hash
from tunedb.index.model.record import Record
from tunedb.index.model.version import TUNEDB_VERSION
from tunedb.index.parquet import parts
from tunedb.index.parquet.journal_fold import journal_row, journal_table


class Prepared:
    """A validated commit: ``batch`` (a ``RecordBatch``, or None for a few Records), ``recs``
    (the Records; empty when given as a batch), ``rh`` (rid hash per record), and the records'
    targets as ``tkeys`` (distinct target keys) and ``codes`` (index into ``tkeys`` per record),
    set by ``group``."""

    __slots__ = ("batch", "recs", "rh", "tkeys", "codes")

    def __init__(self, batch: RecordBatch | None, recs: list[Record], rh: np.ndarray):
        self.batch, self.recs, self.rh = batch, recs, rh
        self.tkeys: list[str] = []
        self.codes = np.zeros(0, np.int64)

    def group(self) -> None:
        """Set ``tkeys`` and ``codes`` (of a commit that is not empty)."""
        if self.batch is not None:
            self.tkeys, self.codes = self.batch.target_groups()
        else:
            order: dict[str, int] = {}
            recs = self.recs
            self.codes = np.fromiter((order.setdefault(r.target_key, len(order)) for r in recs), np.int64, len(recs))
            self.tkeys = list(order)

    def foreign(self) -> bool:
        """Whether it is a batch of records written by another tunedb version (a copy): those
        keep their version columns only through the file path (Records carry no version)."""
        batch = self.batch
        return batch is not None and not self.recs and pc.any(pc.not_equal(
            batch.table.column("tunedb_version"), TUNEDB_VERSION)).as_py()

    def kept_records(self, keep: np.ndarray, n_new: int) -> list[Record]:
        """The records where ``keep`` (``n_new`` of them) as Records (a small commit)."""
        batch = self.batch
        if batch is not None and not self.recs:
            table = batch.table.filter(pa.array(keep)) if n_new < len(keep) else batch.table
            return RecordBatch(table, batch.target_meta).to_records()
        return [r for r, k in zip(self.recs, keep.tolist()) if k]

    def kept_table(self, keep: np.ndarray, n_new: int) -> tuple[pa.Table, list[str], np.ndarray, dict]:
        """(table, tkeys, codes, target_meta) of the records where ``keep`` (``n_new`` of them):
        a large commit, written by ``parts.write_targets``."""
        batch, tkeys, codes = self.batch, self.tkeys, self.codes
        if batch is None:
            batch = RecordBatch.from_records(self.recs)
            tkeys, codes = batch.target_groups()
        table = batch.table
        if n_new < len(keep):
            table, codes = table.filter(pa.array(keep)), codes[keep]
        return table, tkeys, codes, batch.target_meta


def prepare(records: Record | RecordBatch | Iterable[Record], small_commit: int) -> Prepared:
    """Validate ``records`` (see module docstring; ``small_commit``: more Records than this are
    validated as a ``RecordBatch``).  ValueError (one line, as on every backend:
    ``checks.validated_commit``) for anything but Records or a RecordBatch."""
    if isinstance(records, RecordBatch):
        records.check()
        return Prepared(records, [], records.table.column("rid_hash").to_numpy())
    recs = [records] if isinstance(records, Record) else list(records)
    for r in recs:
        if not isinstance(r, Record):
            raise ValueError(f"commit takes Records or a RecordBatch, got {type(r).__name__}")
    if len(recs) > small_commit:  # validated vectorised, with the same messages
        batch = RecordBatch.from_records(recs)
        return Prepared(batch, recs, batch.table.column("rid_hash").to_numpy())
    for r in recs:
        r.validate()
    return Prepared(None, recs, np.fromiter((rid_hash(r.record_id) for r in recs), np.int64, len(recs)))


def publish_records(records_dir: Path, recs: list[Record], committed: int) -> list[Path]:
    """Write ``recs`` as one new part file per target, durably, all targets or none
    (``parts.publish_parts``); returns the files.  OSError when they cannot be written (then
    none is published)."""
    by_target: dict[str, list[Record]] = {}
    for r in recs:
        by_target.setdefault(r.target_key, []).append(r)
    specs = []
    for tkey, group in by_target.items():
        first = group[0]
        # one C++ conversion of the rows (27 per-column conversions cost more for a few rows)
        table = journal_table([journal_row(r, committed) for r in group])
        specs.append(parts.PartSpec(parts.target_slug(first.target_name, tkey), table,
                                    parts.target_file_meta(tkey, first.target_name, first.target_json)))
    out = []
    for path in parts.publish_parts(records_dir, specs):  # all targets or none
        assert path is not None
        out.append(path)
    return out
