"""Helpers the tests import (``from helpers import run_cli``; ``tests/`` is on pytest's pythonpath)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = (ROOT / ".." / "shared" / "data").resolve()


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600, env: dict | None = None
            ) -> subprocess.CompletedProcess:
    """Run ``tunedb ARGS`` in a real subprocess."""
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-m", "tunedb", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=timeout, env=e)


def kernel_tuner_file(device: str, kernel: str = "convolution_milo") -> Path:
    """A Kernel Tuner cache file shipped in datasets/ (or, failing that, in ../shared/data)."""
    for base in (ROOT / "datasets" / "kernel_tuner", SHARED_DATA / "kernel_tuner"):
        p = base / kernel / f"{device}.json.gz"
        if p.is_file():
            return p
    pytest.skip(f"Kernel Tuner data for {kernel}/{device} not found")
