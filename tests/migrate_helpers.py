"""Shared set-up of the migration tests: a source DB tuned on a local preset with real builds."""

from __future__ import annotations

import shutil
from pathlib import Path

from tunedb.index import ParquetStore
from tunedb.index.hardware.localcpu import preset
from tunedb.transfer.measure.backend import LocalBackend, MeasureOptions, TimingProtocol
from tunedb.transfer.measure.jobs import local_job
from tunedb.transfer.search.tuner import TuneOptions, Tuner

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT / ".." / "shared" / "data"
CONV_DIR = SHARED_DATA / "kernel_tuner" / "convolution_milo"

# a fast timing protocol: these tests check the bookkeeping, not the timings
FAST = MeasureOptions(protocol=TimingProtocol(warmup=0, min_repeat_ms=0.5, repeat=3), run_timeout_s=30)
SRC = "cpu-x86-64-t1"
DST = "cpu-native-t1"
WORKLOADS = [{"family": "matmul", "M": 32, "N": 32, "K": 32}, {"family": "softmax", "M": 32, "N": 128}]


def build_source_db(path: Path, budget: int = 3) -> Path:
    """A DB at ``path`` holding SRC's records of WORKLOADS (``budget`` cold evaluations each)."""
    db = ParquetStore.open(path)
    for w in WORKLOADS:
        job = local_job(preset(SRC), w, LocalBackend(FAST))
        Tuner(db, job.target, job.workload, job.space, job.backend,
              TuneOptions(budget=budget, seed=1, cold=True, use_model=False), defaults=job.defaults).run()
    db.close()
    return path


def copy_db(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst
