"""tunedb for Kernel Tuner users: ``tunedb.kernel_tuner.WarmStart`` and ``Recorder``.

    import kernel_tuner, tunedb
    from tunedb.kernel_tuner import WarmStart, Recorder

    db = tunedb.open("tunedb-data")
    results, env = kernel_tuner.tune_kernel(name, source, problem_size, args, tune_params,
                                            restrictions=restrictions, strategy=WarmStart(db),
                                            strategy_options={"max_fevals": 20})

``WarmStart(db)`` is a Kernel Tuner strategy whose search is tunedb's (DB answers first, seeds
from other devices' records, cost-model-ranked moves, every result committed at once);
``Recorder(db, strategy="genetic_algorithm")`` runs one of Kernel Tuner's own strategies and
commits every result.  See ``docs/kernel_tuner.md``.  Needs the ``kernel-tuner`` extra:
importing this module without Kernel Tuner raises ImportError saying
``pip install 'tunedb[kernel-tuner]'``.
"""

from __future__ import annotations

import sys

_NEEDS = "tunedb.kernel_tuner needs Kernel Tuner >= 1.5: pip install 'tunedb[kernel-tuner]'"

if __name__ == "kernel_tuner":
    # Python was started in the tunedb checkout (its root is the package, so this file sits on
    # sys.path as a top-level ``kernel_tuner``): load the real Kernel Tuner in its place, so that
    # ``import kernel_tuner`` there means Kernel Tuner, as everywhere else.
    import importlib
    import os

    _here = os.path.dirname(os.path.abspath(__file__))
    _saved = list(sys.path)
    del sys.modules["kernel_tuner"]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    try:
        sys.modules["kernel_tuner"] = importlib.import_module("kernel_tuner")
    except ImportError as e:
        raise ImportError(_NEEDS) from e
    finally:
        sys.path[:] = _saved
else:
    try:
        import kernel_tuner as _kernel_tuner  # noqa: F401  (the real Kernel Tuner: absolute import)
    except ImportError as e:
        raise ImportError(_NEEDS) from e

if __name__ != "kernel_tuner":
    from tunedb.transfer.integrations.kt_strategy import (
        KernelTunerBackend,
        Recorder,
        RecordInfo,
        RunInfo,
        WarmStart,
        record_to_result,
        result_to_record,
        space_of,
        target_of,
        workload_of,
    )

    __all__ = ["WarmStart", "Recorder", "RunInfo", "RecordInfo", "KernelTunerBackend", "result_to_record",
               "record_to_result", "space_of", "target_of", "workload_of"]
