"""Kernels and a runner for the live OpenCL tests (``tests/transfer_tests/integrations_tests/test_kt_live.py``,
``benchmarks/bench_live.py``): real OpenCL C compiled by the device's compiler and timed on the
device by Kernel Tuner's OpenCL backend.  Every kernel checks its bounds (a grid that overshoots
the problem never writes past a buffer).

The device: ``TUNEDB_OPENCL_PLATFORM`` / ``TUNEDB_OPENCL_DEVICE`` (default 0 / 0: PoCL's CPU
device where ``pyopencl[pocl]`` is all there is).  ``device_or_reason()`` says which, or why none.

Run as a script, it is the child of the Ctrl-C test::

    python live_opencl.py warm DB N MAX_FEVALS INTERRUPT_AFTER
"""

from __future__ import annotations

import json
import os
import signal
import sys

import numpy as np

PLATFORM = int(os.environ.get("TUNEDB_OPENCL_PLATFORM", "0"))
DEVICE = int(os.environ.get("TUNEDB_OPENCL_DEVICE", "0"))

#: a tiled GEMM, C = A B (n x n, float32): a work-group computes a block_size_y x block_size_x
#: tile of C, staging TILE_K-wide panels of A and B in local memory.  The kernel allows 4 KiB of
#: tiles, as a GPU kernel budgets its shared memory: a config needing more does not compile (in
#: the words Kernel Tuner recognises as a resource failure; any other compile error ends its whole
#: run).  PIN 1 requires 8 x 8 work-groups (reqd_work_group_size): any other local size is
#: refused by the runtime at launch
GEMM = r"""
#if (block_size_y * TILE_K + TILE_K * block_size_x) * 4 > 4096
#error "local memory limit exceeded: the tiles of this config need more than the kernel's 4096 bytes"
#endif
__kernel
#if PIN
__attribute__((reqd_work_group_size(8, 8, 1)))
#endif
void gemm(__global float *C, __global const float *A, __global const float *B, const int n) {
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int col = get_group_id(0) * block_size_x + tx;
    const int row = get_group_id(1) * block_size_y + ty;
    __local float As[block_size_y][TILE_K];
    __local float Bs[TILE_K][block_size_x];
    float acc = 0.0f;
    for (int k0 = 0; k0 < n; k0 += TILE_K) {
        for (int i = tx; i < TILE_K; i += block_size_x)
            As[ty][i] = (row < n && k0 + i < n) ? A[row * n + k0 + i] : 0.0f;
        for (int i = ty; i < TILE_K; i += block_size_y)
            Bs[i][tx] = (col < n && k0 + i < n) ? B[(k0 + i) * n + col] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
#if UNROLL == 2
        for (int k = 0; k < TILE_K; k += 2)
            acc += As[ty][k] * Bs[k][tx] + As[ty][k + 1] * Bs[k + 1][tx];
#else
        for (int k = 0; k < TILE_K; k++)
            acc += As[ty][k] * Bs[k][tx];
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (row < n && col < n)
        C[row * n + col] = acc;
}
"""

GEMM_PARAMS = {"block_size_x": [4, 8, 16, 32], "block_size_y": [1, 2, 4, 8, 16], "TILE_K": [4, 8, 16, 32],
               "UNROLL": [1, 2], "PIN": [0]}
#: a work-group must hold at least 8 work-items, and TILE_K >= 2 for UNROLL 2
GEMM_RESTRICTIONS = ["block_size_x * block_size_y >= 8"]

#: y = a x + y over n floats, WPT elements per work-item, strided by the work-group
SAXPY = r"""
__kernel void saxpy(__global float *y, __global const float *x, const float a, const int n) {
    const int base = get_group_id(0) * block_size_x * WPT + get_local_id(0);
    for (int w = 0; w < WPT; w++) {
        const int i = base + w * block_size_x;
        if (i < n)
            y[i] = a * x[i] + y[i];
    }
}
"""
SAXPY_PARAMS = {"block_size_x": [16, 32, 64, 128, 256, 512, 1024], "WPT": [1, 2, 4, 8, 16]}
SAXPY_RESTRICTIONS = ["block_size_x * WPT <= 2048", "WPT <= block_size_x // 8"]


def device_or_reason() -> tuple[object | None, str]:
    """(the pyopencl device the tests use, "") or (None, why there is none)."""
    try:
        import pyopencl as cl
    except ImportError as e:
        return None, f"pyopencl is not installed ({e}): pip install 'pyopencl[pocl]'"
    try:
        platforms = cl.get_platforms()
        dev = platforms[PLATFORM].get_devices()[DEVICE]
    except Exception as e:  # noqa: BLE001 - no ICD, no platform, no device
        return None, f"no OpenCL device {PLATFORM}/{DEVICE}: {e}"
    return dev, ""


def gemm_args(n: int, seed: int = 0) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.zeros((n, n), np.float32)
    return [c, a, b, np.int32(n)], [a @ b, None, None, None]


def saxpy_args(n: int) -> tuple[list, list]:
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, np.float32)
    return [y, x, np.float32(2.0), np.int32(n)], [2.0 * x + y, None, None, None]


def tune_gemm(n: int, strategy: object, max_fevals: int | None = None, params: dict | None = None,
              restrictions: list | None = None, iterations: int = 3, verify: bool = True) -> tuple[list, dict]:
    """Tune the GEMM of ``n`` x ``n`` with ``strategy``; ``verify``: Kernel Tuner checks each
    config's result against NumPy's (it launches the kernel once more for that, and that
    launch treats a refused local size as an error of the whole run, so the launch-failure test
    turns it off)."""
    import kernel_tuner

    args, answer = gemm_args(n)
    answer = answer if verify else None
    opts = {"max_fevals": max_fevals} if max_fevals else None
    return kernel_tuner.tune_kernel("gemm", GEMM, (n, n), args, params or GEMM_PARAMS,
                                    restrictions=GEMM_RESTRICTIONS if restrictions is None else restrictions,
                                    answer=answer, atol=1e-3, lang="OpenCL", platform=PLATFORM, device=DEVICE,
                                    strategy=strategy, strategy_options=opts, iterations=iterations, quiet=True)


def tune_saxpy(n: int, strategy: object, max_fevals: int) -> tuple[list, dict]:
    import kernel_tuner

    args, answer = saxpy_args(n)
    return kernel_tuner.tune_kernel("saxpy", SAXPY, n, args, SAXPY_PARAMS, restrictions=SAXPY_RESTRICTIONS,
                                    grid_div_x=["block_size_x", "WPT"], answer=answer, atol=1e-4, lang="OpenCL",
                                    platform=PLATFORM, device=DEVICE, strategy=strategy,
                                    strategy_options={"max_fevals": max_fevals}, iterations=3, quiet=True)


def _warm(db_path: str, n: int, max_fevals: int, interrupt_after: int) -> None:
    """WarmStart on GEMM n x n; SIGINT to itself after ``interrupt_after`` evaluations (0:
    never).  Prints one JSON line: what ``last_run`` says (also after the interrupt)."""
    import tunedb
    from tunedb.kernel_tuner import WarmStart

    seen = [0]

    def progress(_event: dict) -> None:
        seen[0] += 1
        if interrupt_after and seen[0] == interrupt_after:
            os.kill(os.getpid(), signal.SIGINT)

    ws = WarmStart(tunedb.open(db_path), progress=progress)
    interrupted = False
    try:
        tune_gemm(n, ws, max_fevals)
    except KeyboardInterrupt:
        interrupted = True
    info = ws.last_run
    print(json.dumps({"interrupted": interrupted, "kt_fevals": info.kt_fevals, "db_answers": info.db_answers,
                      "committed": info.committed, "stopped_by": info.stopped_by}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "warm":
        _warm(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
