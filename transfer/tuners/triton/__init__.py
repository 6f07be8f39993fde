"""tunedb for Triton: ``autotune`` (a drop-in for ``@triton.autotune`` whose cache is a tunedb
database, shared between processes and machines and predicting for new GPUs and shapes),
``device_target`` (this process's Triton device as a target) and the importer of Triton's own
``*.autotune.json`` cache files (``tunedb import triton``).  Names load on first use: importing
this package imports neither triton nor torch."""

from __future__ import annotations

from tunedb.index.support.lazy import lazy_getattr

_LAZY = {
    "autotune": ("tunedb.transfer.tuners.triton.autotuner", "autotune"),
    "TunedbAutotuner": ("tunedb.transfer.tuners.triton.autotuner", "TunedbAutotuner"),
    "Decision": ("tunedb.transfer.tuners.triton.autotuner", "Decision"),
    "PredictedConfigWarning": ("tunedb.transfer.tuners.triton.autotuner", "PredictedConfigWarning"),
    "device_target": ("tunedb.transfer.tuners.triton.identity", "device_target"),
    "workload_of": ("tunedb.transfer.tuners.triton.keys", "workload_of"),
    "config_dict": ("tunedb.transfer.tuners.triton.keys", "config_dict"),
}

__getattr__ = lazy_getattr(__name__, _LAZY, globals())
__all__ = list(_LAZY)
