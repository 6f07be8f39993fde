"""The record store contract (``tunedb.index.contract.base.RecordStore``) run against every backend: the
suite is ``tunedb.index.testing.store_tests`` (shipped in the package, so a third-party backend
runs it the same way); each class here gives it one backend.  Backend-specific behaviour (crash
safety, several processes, files on disk) is tested beside each backend (tests/index_tests/parquet_tests/test_store.py,
tests/index_tests/parquet_tests/test_durability.py for Parquet, tests/index_tests/postgres_tests/test_postgres.py, tests/index_tests/test_layered.py,
tests/index_tests/test_trust.py).

PostgreSQL: the ``postgres_url`` fixture (tests/conftest.py) uses ``$TUNEDB_TEST_POSTGRES`` or
starts a private server; without one the PostgreSQL classes are skipped, except under
``CI=true``, where that fails.
"""

from __future__ import annotations

import pytest

import tunedb
from tunedb.index.contract.base import RecordStore
from tunedb.index.model.record import Record
from tunedb.index.testing import ReadOnlyStoreTests, RecordStoreTests, prefill
from tunedb.index.testing.store_tests import T1, recs  # noqa: F401 - tests/index_tests/test_runs_store.py uses them
from tunedb.index.views.filtered import FilteredStore
from tunedb.index.views.layered import LayeredStore
from tunedb.index.views.trust import TrustedStore

#: a trust policy that trusts every record the suite writes: the view must then answer as its store
TRUST_ALL = "measured,replay,imported,migrated"


def keep_all(rec: Record) -> bool:
    """A filter every record the suite writes passes (its sources are all of these)."""
    return rec.source == "measured" or rec.source == "replay" or rec.source.startswith(("imported:", "migrated:"))


class TestParquetStore(RecordStoreTests):
    @pytest.fixture
    def store(self, tmp_path):
        with tunedb.open(tmp_path / "db") as s:
            yield s

    def reopen(self, store):
        return tunedb.open(store.path)


class TestMemoryStore(RecordStoreTests):
    @pytest.fixture
    def store(self):
        with tunedb.open("memory:test") as s:
            yield s


class TestPostgresStore(RecordStoreTests):
    @pytest.fixture
    def store(self, postgres_url):
        with tunedb.open(postgres_url) as s:
            yield s

    def reopen(self, store):
        return tunedb.open(store.location)


class TestLayeredStore(RecordStoreTests):
    """A Parquet directory over a memory store (the memory layer is one object: a second
    handle shares it)."""

    @pytest.fixture
    def store(self, tmp_path):
        with LayeredStore([tunedb.open(tmp_path / "top"), tunedb.open("memory:lower")]) as s:
            yield s

    def reopen(self, store):
        return LayeredStore([tunedb.open(store.layers[0].path), *store.layers[1:]])


class TestTrustedStore(RecordStoreTests):
    """A trust view that trusts every source over a Parquet directory answers as the directory."""

    @pytest.fixture
    def store(self, tmp_path):
        with TrustedStore(tunedb.open(tmp_path / "db"), TRUST_ALL) as s:
            yield s

    def reopen(self, store):
        return TrustedStore(tunedb.open(store.inner.path), TRUST_ALL)


class TestFilteredStore(RecordStoreTests):
    """A filtered view whose filter keeps every record the suite writes answers as its store."""

    @pytest.fixture
    def store(self, tmp_path):
        with FilteredStore(tunedb.open(tmp_path / "db"), keep_all, name="all") as s:
            yield s

    def reopen(self, store):
        return FilteredStore(tunedb.open(store.inner.path), keep_all, name="all")


class TestReopenedParquetStore(ReadOnlyStoreTests):
    """The reads over a directory filled by another handle and closed: how a store opened
    read-only over a pre-filled DB runs ``ReadOnlyStoreTests``."""

    @pytest.fixture
    def filled_store(self, tmp_path):
        with tunedb.open(tmp_path / "db") as w:
            prefill(w)
        with tunedb.open(tmp_path / "db") as s:
            yield s


class TestReopenedPostgresStore(ReadOnlyStoreTests):
    @pytest.fixture
    def filled_store(self, postgres_url):
        with tunedb.open(postgres_url) as w:
            prefill(w)
        with tunedb.open(postgres_url) as s:
            yield s


BACKENDS = ["parquet", "memory", "postgres", "layered"]


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path) -> RecordStore:
    """An empty store of each backend, for suites written as functions (tests/index_tests/test_runs_store.py)."""
    if request.param == "postgres":
        s = tunedb.open(request.getfixturevalue("postgres_url"))
    elif request.param == "layered":
        s = LayeredStore([tunedb.open(tmp_path / "top"), tunedb.open("memory:lower")])
    else:
        s = tunedb.open(tmp_path / "db") if request.param == "parquet" else tunedb.open("memory:test")
    yield s
    s.close()
