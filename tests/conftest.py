from __future__ import annotations

import os
from pathlib import Path

import pytest
from stages import pytest_collection_modifyitems, pytest_runtest_logreport, pytest_runtest_setup  # noqa: F401


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Each test session gets its own build cache unless CI set one."""
    if "TUNEDB_CACHE_DIR" not in os.environ:
        monkeypatch.setenv("TUNEDB_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "tunedb-cache"))


FAULT_FAMILY = "debug_fault:DebugFaultFamily"  # tests/debug_fault.py, registered through TUNEDB_FAMILIES


@pytest.fixture
def fault_family(monkeypatch):
    """Register the test-only fault-injecting family for this test (and the worker processes it starts)."""
    here = str(Path(__file__).resolve().parent)
    monkeypatch.setenv("TUNEDB_FAMILIES", FAULT_FAMILY)
    monkeypatch.setenv("PYTHONPATH", here + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""))
    return "debug_fault"


# ---------------------------------------------------------------------------- PostgreSQL
@pytest.fixture(scope="session")
def postgres_server():
    """Admin URL of a PostgreSQL server for the tests: ``$TUNEDB_TEST_POSTGRES`` when set (.ci/run
    starts one), else a private cluster started for this session (stopped at its end).  Skips
    when none can be started, except under ``CI=true``, where that fails."""
    import shutil
    import tempfile

    import pg_server

    given = os.environ.get("TUNEDB_TEST_POSTGRES")
    if given:
        yield given
        return
    base = Path(tempfile.mkdtemp(prefix="tunedb-pg-"))
    url = pg_server.start_for_test(base)
    try:
        yield url
    finally:
        pg_server.stop(base)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server):
    """URL of a fresh empty database on ``postgres_server`` (dropped after the test)."""
    import pg_server

    try:
        url = pg_server.create_database(postgres_server)
    except ImportError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("psycopg is not installed (pip install -e '.[postgres]')")
    yield url
    pg_server.drop_database(postgres_server, url)

