"""``debug_fault``: a test-only C family whose config decides how a run goes wrong.

Registered only by the test suite (fixture ``fault_family``: ``TUNEDB_FAMILIES=debug_fault:DebugFaultFamily``
and this folder on the worker's ``PYTHONPATH``); the product never lists it.  Workload: n elements; the kernel writes
out = 2 * x.  Knob ``mode``: 0 correct, 1 segfault (write through a null pointer), 2 hang (endless
loop), 3 wrong result (out = 3 * x), 4 abort().
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tunedb.transfer.kernels.base import KernelFamily
from tunedb.transfer.kernels.templating import render_template
from tunedb.transfer.space import Knob, Space

TEMPLATE = r"""
/* tunedb debug_fault kernel (tests only) */
#include <stdlib.h>
#define MODE @MODE@
int kernel(const float *x, float *y, int n) {
#if MODE == 1
    volatile float *volatile bad = 0;
    bad[n] = 1.0f;
#elif MODE == 2
    volatile unsigned long spin = 0;
    for (;;) spin++;
#elif MODE == 4
    abort();
#endif
    for (int i = 0; i < n; i++) y[i] = (MODE == 3 ? 3.0f : 2.0f) * x[i];
    return 0;
}
"""


class DebugFaultFamily(KernelFamily):
    """Test-only family: crash, hang, wrong answer or abort on demand."""

    name = "debug_fault"
    kind = "c"
    dims = {"n": (1, 1 << 20)}

    def shapes(self, w: dict) -> dict[str, tuple[int, ...]]:
        return {"x": (w["n"],), "out": (w["n"],)}

    def space(self, workload: Any) -> Space:
        self.validate_workload(workload)
        return Space((Knob("mode", (0, 1, 2, 3, 4)),), ())

    def default_config(self, workload: Any) -> dict:
        return {"mode": 0}

    def flops(self, workload: Any) -> float:
        return float(self.validate_workload(workload)["n"])

    def reference(self, w: dict, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        return 2.0 * inputs["x"].astype(np.float64)

    def numpy_baseline(self, w: dict, inputs: Mapping[str, np.ndarray]) -> Callable[[], Any]:
        x, out = inputs["x"], inputs["out"]
        return lambda: np.multiply(x, 2.0, out=out)

    def source(self, workload: Any, config: Mapping[str, Any]) -> str:
        return render_template(TEMPLATE, {"MODE": config["mode"]})

    def bind(self, w: dict, config: Mapping[str, Any], lib: Any, inputs: Mapping[str, np.ndarray]) -> Callable[[], None]:
        import ctypes

        fn = lib.kernel
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        args = (inputs["x"].ctypes.data, inputs["out"].ctypes.data, w["n"])
        return lambda: fn(*args)
