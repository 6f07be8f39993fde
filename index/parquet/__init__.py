"""The Parquet directory store (the embedded default and the truth): ``ParquetStore`` and its internals.

Modules, one job each: ``store`` (the handle), ``parts`` (part files), ``journal`` /
``journal_fold`` (write-ahead journal of small commits and its folding into Parquet),
``memindex`` (the in-memory key arrays), ``rowcache`` (decoded rows), ``querykeys`` (memoised
query keys), ``tables`` (Arrow helpers), ``retention`` / ``invalidations`` (maintenance),
``layout`` (the directory marker), ``fsutil`` (durable writes and locks).
"""
