"""What a DB answer costs on the kernel's path: tunedb's ``@autotune`` beside Triton's own
``cache_results=True`` disk cache, both answering tuning keys measured before.

Each side runs in fresh processes (``--repeats``), Triton and torch imported first (process start
and those imports excluded), then its autotuner's ``check_disk_cache`` -- the one step Triton takes
for a tuning key new to the process, where both caches answer -- is called for ``--keys`` tuning
keys that the cache holds, and each call is timed.  Nothing is compiled or run: Triton's cache
needs a GPU target for its file hash, which a stand-in driver answers (as on a machine without a
GPU); tunedb's side runs under Triton's interpreter target (``TRITON_INTERPRET=1``).

Reported per side (medians over the processes): ``first_ms`` (the first answer in a process:
for tunedb this includes opening the DB and the first read of its partition), ``next_p50_ms`` and
``next_max_ms`` (the answers after it).  Goals: tunedb's first answer at most 500 ms, later ones at
most 1 ms.  ``tunedb_import_s`` is the time ``import tunedb.transfer.tuners.triton`` takes in the
same processes, reported apart.

    python benchmarks/bench_triton_overhead.py [--keys 50] [--configs 8] [--repeats 3] [--json]

Needs ``pip install -e '.[triton]'``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BLOCKS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
GOAL_FIRST_MS = 500.0
GOAL_NEXT_MS = 1.0


def _child(spec: dict) -> dict:
    """One measuring process (``--child``): returns the timings of its ``check_disk_cache`` calls."""
    os.environ["TRITON_INTERPRET"] = "1" if spec["side"] == "tunedb" else "0"
    os.environ["TRITON_CACHE_DIR"] = spec["triton_cache"]
    import torch  # noqa: F401  (the user's process has it imported)
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    class TargetOnlyDriver:
        def get_current_target(self) -> GPUTarget:
            return GPUTarget("cuda", 90, 32)

    driver.set_active(TargetOnlyDriver())
    configs = [triton.Config({"BLOCK": b}, num_warps=4) for b in BLOCKS[: spec["configs"]]]
    t0 = time.perf_counter()
    if spec["side"] == "tunedb":
        from tunedb.transfer.tuners.triton import autotune

        decorate = autotune(configs=configs, key=["n"], db=spec["db"])
    else:
        decorate = triton.autotune(configs=configs, key=["n"], cache_results=True)
    import_s = time.perf_counter() - t0

    @decorate
    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    def fill() -> None:  # Triton's benchmark(): only ever called to write a cache (``--child`` warm)
        add_kernel.configs_timings = {c: [float(i + 1)] * 3 for i, c in enumerate(configs)}

    if spec["side"] == "tunedb" and spec.get("warm"):
        _commit_history(spec["db"], configs, spec["keys"])
    times, hits = [], 0
    for i in range(spec["keys"]):
        key = (1000 * (i + 1), "torch.float32", "torch.float32", "torch.float32")
        s = time.perf_counter()
        hit = add_kernel.check_disk_cache(key, configs, fill)
        times.append((time.perf_counter() - s) * 1e3)
        hits += bool(hit)
    return {"times_ms": times, "hits": hits, "import_s": import_s}


def _commit_history(db: str, configs: list, keys: int) -> None:
    """tunedb's side of the warm-up: one record per (tuning key, config), as the decorator stores
    a benchmark (Triton's median, seconds), on this process's interpreter target."""
    import tunedb
    from tunedb.transfer.tuners.triton.identity import device_target
    from tunedb.transfer.tuners.triton.keys import config_dict, workload_of

    store = tunedb.open(db)
    target = device_target()
    recs = [tunedb.Record(target, workload_of("add_kernel", (1000 * (i + 1), "torch.float32", "torch.float32",
                                                              "torch.float32")),
                          config_dict(c), [1e-3 * (j + 1)], meta={"statistic": "median"})
            for i in range(keys) for j, c in enumerate(configs)]
    store.commit(recs)
    store.close()


def _run(spec: dict) -> dict:
    p = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True,
                       timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"bench_triton_overhead: a {spec['side']} process failed: "
                         f"{(p.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=50, help="tuning keys answered per process (default 50)")
    ap.add_argument("--configs", type=int, default=8, help=f"configs per key, at most {len(BLOCKS)} (default 8)")
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per side (default 3)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(_child(json.loads(a.child))))
        return 0
    if not (1 <= a.configs <= len(BLOCKS)) or a.keys < 2 or a.repeats < 1:
        ap.error(f"--configs 1..{len(BLOCKS)}, --keys >= 2, --repeats >= 1")
    with tempfile.TemporaryDirectory() as tmp:
        base = {"keys": a.keys, "configs": a.configs, "db": str(Path(tmp) / "db"),
                "triton_cache": str(Path(tmp) / "triton-cache")}
        for side in ("tunedb", "triton"):  # the caches, written once (Triton's by its own code)
            _run({**base, "side": side, "warm": True})
        runs: dict[str, list[dict]] = {"tunedb": [], "triton": []}
        for _ in range(a.repeats):  # interleaved, so load hits both sides alike
            for side in runs:
                runs[side].append(_run({**base, "side": side}))
    from tunedb.index.hardware.localcpu import cpu_info

    out: dict = {"machine": str(cpu_info().get("model") or platform.machine()), "cores": os.cpu_count(),
                 "load_avg_1min": os.getloadavg()[0], "keys": a.keys, "configs": a.configs,
                 "repeats": a.repeats}
    for side, rs in runs.items():
        firsts = [r["times_ms"][0] for r in rs]
        nexts = [t for r in rs for t in r["times_ms"][1:]]
        out[side] = {"first_ms": statistics.median(firsts), "next_p50_ms": statistics.median(nexts),
                     "next_max_ms": max(nexts), "hits": [r["hits"] for r in rs],
                     "import_s": statistics.median(r["import_s"] for r in rs)}
    t = out["tunedb"]
    out["goals"] = {"first_within_500ms": t["first_ms"] <= GOAL_FIRST_MS,
                    "next_within_1ms": t["next_p50_ms"] <= GOAL_NEXT_MS,
                    "all_hits": all(h == a.keys for h in t["hits"])}
    if a.json:
        print(json.dumps(out))
    else:
        for side in ("tunedb", "triton"):
            s = out[side]
            print(f"{side:>7}: first answer {s['first_ms']:.1f} ms, then p50 {s['next_p50_ms']:.3f} ms "
                  f"(max {s['next_max_ms']:.2f} ms), hits {s['hits']}, import {s['import_s']:.2f} s")
        print(f"goals: {out['goals']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
