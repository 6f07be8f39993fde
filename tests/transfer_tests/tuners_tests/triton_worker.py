"""One process of the Triton tests: runs a real ``@autotune``'d Triton kernel under Triton's CPU
interpreter (``TRITON_INTERPRET=1`` is set here, before triton is imported) and prints one JSON
line: per size, the configs benchmarked (their BLOCK, in order), the config used, the
decision's source and predicted flag, the warnings, and whether the kernel's output was right.

``python triton_worker.py SPEC_JSON``; SPEC: ``db`` (path), ``sizes`` (list of n), ``top_k``,
``benchmark``, ``fail`` (the kernel refuses BLOCK >= 1024 with a compile-time assertion),
``fake_ms`` (BLOCK -> milliseconds the benchmarker reports after running the kernel once;
absent: the measured time), ``blocks`` (the configs' BLOCK values)."""

from __future__ import annotations

import json
import os
import sys
import time
import warnings

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from tunedb.transfer.tuners.triton import autotune  # noqa: E402

SPEC = json.loads(sys.argv[1])
BENCHED: list[int] = []
CURRENT: dict = {}


def remember(nargs: dict, reset_only: bool = False) -> None:
    """The autotuner's pre_hook: which config is about to run."""
    if not reset_only:
        CURRENT["BLOCK"] = nargs["BLOCK"]


def bench(kernel_call, quantiles=None):
    """Runs the kernel (really, in the interpreter) and reports its time in ms, as Triton's
    do_bench does for quantiles (0.5, 0.2, 0.8); ``fake_ms`` replaces the measured time."""
    start = time.perf_counter()
    kernel_call()
    ms = (time.perf_counter() - start) * 1e3
    BENCHED.append(CURRENT["BLOCK"])
    ms = SPEC.get("fake_ms", {}).get(str(CURRENT["BLOCK"]), ms)
    return [ms, ms * 0.95, ms * 1.05]


CONFIGS = [triton.Config({"BLOCK": b}, num_warps=4) for b in SPEC.get("blocks", [64, 128, 256, 1024])]
FAIL = bool(SPEC.get("fail"))


@autotune(configs=CONFIGS, key=["n"], pre_hook=remember, do_bench=bench, db=SPEC["db"], top_k=SPEC.get("top_k"),
          benchmark=SPEC.get("benchmark", True))
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, FAIL_BIG: tl.constexpr = FAIL):
    if FAIL_BIG:
        tl.static_assert(BLOCK < 1024)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def run(n: int) -> dict:
    x, y = torch.arange(n, dtype=torch.float32), torch.ones(n, dtype=torch.float32)
    out = torch.zeros(n, dtype=torch.float32)
    BENCHED.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        add_kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, out, n)
    key = next(k for k in add_kernel.decisions if k[0] == n)
    d = add_kernel.decisions[key]
    return {"n": n, "benched": list(BENCHED), "used": d.config.kwargs["BLOCK"], "source": d.source,
            "predicted": d.predicted, "warnings": [f"{w.category.__name__}: {w.message}" for w in caught
                                                    if "predicted" in str(w.message)],
            "correct": bool(torch.equal(out, x + y))}


print(json.dumps({"runs": [run(n) for n in SPEC["sizes"]]}))
