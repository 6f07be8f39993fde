"""The Parquet directory store (the embedded default and the truth): ``ParquetStore`` and its internals.

Modules, one job each: ``store`` (the handle: opening, refreshing, committing, the public API),
``partition_set`` (the handle's in-memory view of every partition) over ``target_index``
(one target's), ``queries`` (lookups, best costs, whole-table reads), ``commits`` (validating and
grouping a commit), ``journal_set`` (the handle's journals) over ``journal`` / ``journal_fold``
(write-ahead journal of small commits and its folding into Parquet), ``rewrites`` (compaction,
dedup, retention and the clean-up after them) over ``parts`` (part files), ``memindex`` (the
in-memory key arrays), ``rowcache`` (decoded rows), ``querykeys`` (memoised query keys),
``deltalog`` (the Delta log for outside readers), ``invalidations`` / ``verdicts`` / ``runs``
(marks and run summaries), ``layout`` (the directory marker); durable writes and locks are
``tunedb.index.support.fsutil``'s.
"""
