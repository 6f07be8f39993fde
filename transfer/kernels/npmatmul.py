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

from tunedb.transfer.kernels import KernelFamily
from tunedb.transfer.kernels.matmul import MatmulMath
from tunedb.transfer.search.space import Knob, Space

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

    def default_config(self, workload: Any) -> dict:
        self.validate_workload(workload)
        return {"bm": 256, "bn": 256, "bk": 256, "order": 0}


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
