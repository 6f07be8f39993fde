"""Test suites tunedb ships for code outside it: ``store_tests`` is the record store contract
suite (``RecordStoreTests`` for a writable backend, ``ReadOnlyStoreTests`` for a read-only one;
its docstring says how a backend runs it in five lines).  Importing this package imports pytest;
``import tunedb`` never imports it."""

from __future__ import annotations

from tunedb.index.testing.store_tests import ReadOnlyStoreTests, RecordStoreTests, prefill

__all__ = ["RecordStoreTests", "ReadOnlyStoreTests", "prefill"]
