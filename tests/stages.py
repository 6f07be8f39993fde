"""Two stages in one ``pytest`` run (a plugin; ``tests/conftest.py`` loads its hooks).

Plain ``pytest`` runs every test not marked ``slow`` first, then the slow ones (the order inside
each stage is the collection order).  With ``TUNEDB_FAST_GATE=1`` (``.ci/run`` sets it) a failure
in the fast stage ends the run before the slow stage starts, so a broken change fails in minutes.
``pytest -m "not slow"`` is the fast loop on its own.
"""

from __future__ import annotations

import os

import pytest

FAST_FAILURES: list[str] = []



def pytest_collection_modifyitems(config, items):
    """Fast stage first, slow stage second."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is not None)  # stable: fast stage first


def pytest_runtest_logreport(report):
    """Remember a failure in the fast stage."""
    if report.failed and "slow" not in report.keywords:
        FAST_FAILURES.append(report.nodeid)


def pytest_runtest_setup(item):
    """Under the gate, end the run at the first slow test after a fast failure."""
    if FAST_FAILURES and os.environ.get("TUNEDB_FAST_GATE") == "1" and item.get_closest_marker("slow"):
        pytest.exit(f"fast stage failed ({len(FAST_FAILURES)} test(s), first {FAST_FAILURES[0]}); "
                    "slow stage not run", returncode=1)
