"""Isolated execution of one measurement in a fresh worker process.

``run_isolated(request, timeout_s)`` starts ``python -c ...worker_main`` as a new process (its own
session / process group), hands it a JSON request file and reads a JSON result file back:

* the worker validates the workload and config again, loads the shared object (C families) with
  ``ctypes``, makes seeded inputs, runs once and compares with the NumPy reference
  (``wrong_result`` when it differs), then times the kernel with ``tunedb.transfer.measure.timing.time_callable``;
* ``OMP_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS`` are the target's thread count;
  ``OPENBLAS_CORETYPE`` and everything else in the environment are passed through unchanged;
* a worker killed by a signal (segfault, abort) or exiting without a result -> ``runtime_error``;
  one running longer than ``timeout_s`` seconds -> its whole process group is killed and the status is
  ``timeout``.  The calling process is never affected.

Result dict keys: ``status``, ``costs`` (seconds per run, one per repeat), ``error`` (str),
``meta`` (dict: number, repeat, cv, noisy, first_run_s, max_abs_err, ...), ``wall_s`` (seconds the
worker lived).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_RUN_TIMEOUT_S = 60.0


def _worker_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    env["MKL_NUM_THREADS"] = str(threads)
    env.setdefault("PYTHONHASHSEED", "0")
    return env


def run_isolated(request: Mapping[str, Any], timeout_s: float = DEFAULT_RUN_TIMEOUT_S) -> dict:
    """Run ``request`` (family, workload, config, so_path, threads, protocol, seed, memory_limit_mb)
    in a worker process; return the result dict described in the module docstring."""
    threads = int(request.get("threads") or 1)
    with tempfile.TemporaryDirectory(prefix="tunedb-run-") as tmp:
        req_path, res_path = Path(tmp) / "request.json", Path(tmp) / "result.json"
        req_path.write_text(json.dumps(dict(request)))
        cmd = [sys.executable, "-c",
               "import sys; from tunedb.transfer.measure.runner import worker_main; sys.exit(worker_main(sys.argv[1], sys.argv[2]))",
               str(req_path), str(res_path)]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=_worker_env(threads), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True, cwd=tmp)
        try:
            _, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            return {"status": "timeout", "costs": [], "error": f"run timed out after {timeout_s:g} s (worker killed)",
                    "meta": {}, "wall_s": time.perf_counter() - t0}
        wall = time.perf_counter() - t0
        rc = proc.returncode
        if res_path.exists():
            try:
                res = json.loads(res_path.read_text())
                res["wall_s"] = wall
                return res
            except ValueError:
                pass
        tail = " | ".join((err or b"").decode(errors="replace").strip().splitlines()[-4:])[:1000]
        if rc < 0:
            try:
                signame = signal.Signals(-rc).name
            except ValueError:
                signame = f"signal {-rc}"
            msg = f"worker killed by {signame}"
        else:
            msg = f"worker exited with status {rc} without a result"
        return {"status": "runtime_error", "costs": [], "error": msg + (f": {tail}" if tail else ""),
                "meta": {"returncode": rc}, "wall_s": wall}


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


# --------------------------------------------------------------------------- worker side
def worker_main(request_path: str, result_path: str) -> int:
    """Entry point of the worker process (see module docstring).  Writes ``result_path`` atomically."""
    req = json.loads(Path(request_path).read_text())
    try:
        res = _work(req)
    except MemoryError as e:
        res = {"status": "runtime_error", "costs": [], "error": f"out of memory: {e}", "meta": {}}
    except Exception as e:  # a failure of this config, reported as data
        tb = traceback.format_exc(limit=3).strip().splitlines()
        res = {"status": "runtime_error", "costs": [], "error": f"{type(e).__name__}: {e}"[:1000],
               "meta": {"traceback": tb[-3:]}}
    tmp = result_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(res, f)
    os.replace(tmp, result_path)
    return 0


def _work(req: dict) -> dict:
    limit = req.get("memory_limit_mb")
    if limit:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (int(limit) << 20, int(limit) << 20))
    import numpy as np

    from tunedb.transfer.kernels import get_family
    from tunedb.transfer.measure.timing import TimingProtocol, time_callable

    fam = get_family(req["family"])
    w = fam.validate_workload(req["workload"])
    cfg = fam.space(w).validate(req["config"])  # defence in depth: the parent validated already
    inputs = fam.make_inputs(w, int(req.get("seed", 0)))
    lib = None
    if fam.kind == "c":
        import ctypes

        lib = ctypes.CDLL(req["so_path"])
    fn = fam.bind(w, cfg, lib, inputs)
    meta: dict[str, Any] = {"omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    t0 = time.perf_counter()
    fn()
    meta["first_run_s"] = time.perf_counter() - t0
    if req.get("check", True):
        ref = fam.reference(w, inputs)
        out = inputs["out"].astype(np.float64)
        rtol, atol = fam.tolerance(w)
        err = np.abs(out - ref)
        bad = ~(err <= atol + rtol * np.abs(ref))  # NaN counts as bad
        meta["max_abs_err"] = float(np.nanmax(err)) if np.isfinite(err).any() else None
        if bad.any():
            idx = np.unravel_index(int(np.argmax(bad)), bad.shape)
            return {"status": "wrong_result", "costs": [], "meta": meta,
                    "error": f"{int(bad.sum())} of {bad.size} outputs differ from the NumPy reference "
                             f"(first at {tuple(int(i) for i in idx)}: got {out[idx]!r}, expected {ref[idx]!r}; "
                             f"rtol={rtol:g}, atol={atol:g})"}
    proto = TimingProtocol(**req.get("protocol", {}))
    costs, number = time_callable(fn, proto, first_run_s=meta["first_run_s"])
    meta.update(proto.summary(costs, number))
    return {"status": "ok", "costs": costs, "error": "", "meta": meta}
