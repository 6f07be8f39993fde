"""Helpers the tests import (``from helpers import run_cli``; ``tests/`` is on pytest's pythonpath)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = (ROOT / ".." / "shared" / "data").resolve()
TESTS = ROOT / "tests"


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


def replay_history_db(path: Path, replays: dict, devices: tuple[str, ...], *, compact: bool = False) -> Path:
    """A Parquet DB at ``path`` holding every replayed record of ``devices`` (``replays``: device
    -> ReplayData), compacted or closed; returns ``path``."""
    from tunedb.index import ParquetStore

    db = ParquetStore.open(path)
    for d in devices:
        db.commit(list(replays[d].results.values()))
    if compact:
        db.compact()
    db.close()
    return path


def run_command(cmd: list[str]) -> str | None:
    """None when ``cmd`` succeeded, else why not (one line)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{cmd[0]}: {e}"
    return None if p.returncode == 0 else (p.stderr.strip() or p.stdout.strip() or f"rc {p.returncode}")


@contextlib.contextmanager
def small_fs(where: Path, size_mb: int = 2) -> Iterator[str]:
    """Mount a ``size_mb`` file system at ``where``: a tmpfs, else a loop-mounted ext4 image
    (``TUNEDB_TEST_SMALL_FS=loop`` forces the latter).  Yields which one; skips the test, with
    both reasons, when neither can be mounted (not root, or a container without mount)."""
    where.mkdir(parents=True, exist_ok=True)
    why = {}
    kind = None
    if os.environ.get("TUNEDB_TEST_SMALL_FS", "tmpfs") != "loop":
        why["tmpfs"] = run_command(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)])
        kind = "tmpfs" if why["tmpfs"] is None else None
    if kind is None:
        img = where.parent / f"{where.name}.ext4"
        why["loop ext4"] = (run_command(["truncate", "-s", f"{max(size_mb, 4)}M", str(img)])
                            or run_command(["mkfs.ext4", "-q", "-F", "-m", "0", str(img)])
                            or run_command(["mount", "-o", "loop", str(img), str(where)]))
        kind = "loop ext4" if why["loop ext4"] is None else None
    if kind is None:
        pytest.skip("cannot mount a small file system for the disk-full test: "
                    + "; ".join(f"{k}: {v}" for k, v in why.items()))
    try:
        yield kind
    finally:
        if run_command(["umount", str(where)]) is not None:
            run_command(["umount", "-l", str(where)])


def tree_state(path: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory under ``path`` with its size and mtime (ns): equal before and after
    a command means the command changed nothing there."""
    out: dict[str, tuple[int, int]] = {}
    for root, dirs, files in os.walk(path):
        for n in dirs + files:
            p = Path(root) / n
            st = p.lstat()
            out[str(p.relative_to(path))] = (st.st_size if p.is_file() else 0, st.st_mtime_ns)
    return out
