"""Writes a real Triton autotune cache file with Triton's own code (``Autotuner.check_disk_cache``,
what ``cache_results=True`` runs) into ``$TRITON_CACHE_DIR``, on a machine without a GPU: Triton
asks its active driver only for the GPU target the file's hash covers, so a driver that answers
``GPUTarget("cuda", 90, 32)`` stands in for one.  Nothing is compiled or run.

``python triton_cache_writer.py TIMINGS_JSON``: TIMINGS maps BLOCK -> [median, p20, p80] ms
(null: a failed config, which Triton times as infinite); the key is that of the interpreter
worker's ``add_kernel`` at n=1000 with three float32 tensors."""

from __future__ import annotations

import json
import sys

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.runtime.driver import driver


class TargetOnlyDriver:
    """The part of a Triton driver ``check_disk_cache`` uses."""

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("cuda", 90, 32)


TIMINGS = {int(b): t for b, t in json.loads(sys.argv[1]).items()}
CONFIGS = [triton.Config({"BLOCK": b}, num_warps=4) for b in TIMINGS]


@triton.autotune(configs=CONFIGS, key=["n"], cache_results=True)
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def benchmarked() -> None:
    """What Triton's ``benchmark()`` leaves behind: the timings of every config."""
    add_kernel.configs_timings = {c: [float("inf")] * 3 if TIMINGS[c.kwargs["BLOCK"]] is None
                                  else TIMINGS[c.kwargs["BLOCK"]] for c in CONFIGS}


driver.set_active(TargetOnlyDriver())
add_kernel.check_disk_cache((1000, "torch.float32", "torch.float32", "torch.float32"), CONFIGS, benchmarked)
