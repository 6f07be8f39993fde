from __future__ import annotations

import os
from pathlib import Path

import pytest


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
