"""``numpy_matmul``: float32 C = A @ B computed block by block with NumPy (no compiler).

Workload: M, N, K.  Schedule: ``bm`` x ``bn`` blocks of C, each accumulated over ``bk``-deep
slabs with ``np.matmul(..., out=)`` into a scratch block; ``order`` 0 walks C blocks row-major, 1
column-major.  Small blocks pay Python and BLAS call overhead per block and big blocks do not, so
the config changes the speed by orders of magnitude.  Threads: OpenBLAS uses the target's thread
count (``OPENBLAS_NUM_THREADS`` set by the runner).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tunedb.transfer.kernels.base import KernelFamily
from tunedb.transfer.kernels.matmul import MatmulMath
from tunedb.transfer.kernels.target_properties import snap_up
from tunedb.transfer.space import Knob, Space

BLOCKS = (8, 16, 32, 64, 128, 256, 512, 1024)


class NumpyMatmulFamily(MatmulMath, KernelFamily):
    """Blocked float32 matmul through ``np.matmul`` on sub-blocks."""

    name = "numpy_matmul"
    kind = "numpy"
    dims = {"M": (1, 8192), "N": (1, 8192), "K": (1, 8192)}
    doc = __doc__ or ""

    def shapes(self, w: dict) -> dict[str, tuple[int, ...]]:
        return {"A": (w["M"], w["K"]), "B": (w["K"], w["N"]), "out": (w["M"], w["N"])}

    def space(self, workload: Any) -> Space:
        self.validate_workload(workload)
        return Space((
            Knob("bm", BLOCKS, "rows of a C block"),
            Knob("bn", BLOCKS, "columns of a C block"),
            Knob("bk", BLOCKS, "depth of one accumulation step"),
            Knob("order", (0, 1), "0 = C blocks row-major, 1 = column-major"),
        ), ())

    def default_config(self, workload: Any, target: Mapping[str, Any] | None = None) -> dict:
        """The default for any ``target``: one block per matrix dimension up to 1024 (the smallest
        block covering it), so each C block is one ``np.matmul`` call.  BLAS blocks for the target's
        caches and vector width itself, and every extra block only adds Python and call overhead
        (measured at 512^3, one thread: 1.9 ms with 512-blocks, 2.4 ms with 256, 3.2 ms with 128);
        ``target`` is accepted for the common signature and does not change the result."""
        w = self.validate_workload(workload)
        cfg = {"bm": snap_up(BLOCKS, w["M"]), "bn": snap_up(BLOCKS, w["N"]), "bk": snap_up(BLOCKS, w["K"]), "order": 0}
        return self.space(w).validate(cfg)

    def bind(self, w: dict, config: Mapping[str, Any], lib: Any, inputs: Mapping[str, np.ndarray]) -> Callable[[], None]:
        a, b, out = inputs["A"], inputs["B"], inputs["out"]
        m, n, k = w["M"], w["N"], w["K"]
        bm, bn, bk = config["bm"], config["bn"], config["bk"]
        blocks = [(i, j) for i in range(0, m, bm) for j in range(0, n, bn)]
        if config["order"] == 1:
            blocks.sort(key=lambda ij: (ij[1], ij[0]))
        scratch = np.empty((min(bm, m), min(bn, n)), np.float32)

        def run() -> None:
            for i, j in blocks:
                cb = out[i:i + bm, j:j + bn]
                cb[...] = 0.0
                tmp = scratch[:cb.shape[0], :cb.shape[1]]
                for p in range(0, k, bk):
                    np.matmul(a[i:i + bm, p:p + bk], b[p:p + bk, j:j + bn], out=tmp)
                    cb += tmp

        return run
