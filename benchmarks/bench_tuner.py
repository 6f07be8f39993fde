"""The tuner's own time on a big DB: replayed tunes, where measuring is free (project issue 16).

Builds a Parquet DB of ``--records`` records of one kernel family - the real Kernel Tuner caches
of ``--kernel`` (every device but the held-out ``--device``), then synthetic devices (the
catalog's other GPUs, each a copy of a real device's results, rescaled by the devices'
fp32 throughput, with a per-device knob tilt and 15 % log-normal noise; failures kept) until
the count is reached - in bulk (``RecordBatch.from_columns`` + ``commit``).  Then it tunes the
held-out device, replayed from its cache file (``--budget`` evaluations, ``--runs`` seeds), each
run in a fresh process on a fresh copy of the DB (so each run tunes from the same state: a DB
that has been used, its nearest-entry index and entries summary built in ``derived/``), in these
modes:

``cold-cache``  this tree, no persisted base model yet (the first run after the DB changed by
                more than ``refit_fraction``): the base model is fitted and persisted
``cached``      this tree, the persisted base model in the DB's cache dir (every later run)
``baseline``    the previous behaviour: ``git archive <--baseline-ref>`` (default HEAD; e.g. 7933b0d, before issue 16) of
                this repository, run the same way (its steps timed by wrapping its methods here)

Figures (seconds, median and min-max over the runs): the tuner's wall time (``Tuner.run``), the
per-run fixed cost (resume + retrieval + adaptation + base model) and the per-evaluation
overhead ((wall - fixed - backend) / evaluations), and each step's share
(``TuneResult.overhead``); the replay file load is reported apart (``tunedb tune --replay`` pays
it, the tuner does not).

    python benchmarks/bench_tuner.py --records 100000 --runs 3
    python benchmarks/bench_tuner.py --records 1000000 --runs 3 --baseline-runs 1 --json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "kernel_tuner"
FIXED_STEPS = ("resume", "retrieval", "adapt", "model_base")
SYNTH_REPEATS = 3


# ------------------------------------------------------------------------------ building the DB
def _real_devices(kernel_dir: Path, held: str) -> dict:
    from tunedb.transfer.measure.replay import ReplayData

    files = sorted(p for p in kernel_dir.glob("*.json.gz") if "_T4" not in p.name)
    return {p.name.split(".")[0]: ReplayData(p) for p in files if p.name.split(".")[0] != held}


def _synthetic_targets(real_targets: list[dict], n: int) -> list[dict]:
    """``n`` GPU targets of the catalog that are none of ``real_targets`` (repeated with a
    ``#k`` suffix when the catalog has too few), shaped as the Kernel Tuner importer shapes them."""
    from tunedb.index.hardware import catalog
    from tunedb.transfer.interop import merge_device_fields, resolve_device_fields

    taken = {t.get("device_name") for t in real_targets} | {t.get("name") for t in real_targets}
    gpus = [d for d in catalog.devices() if d.get("kind") == "gpu"]
    out: list[dict] = []
    k = 0
    while len(out) < n:
        for d in gpus:
            if len(out) >= n:
                break
            fields = resolve_device_fields(d["name"], "gpu")
            if fields.get("device") in taken or d["name"] in taken:
                continue
            t = {"kind": "gpu", "name": d["name"] if k == 0 else f"{d['name']} #{k}"}
            merge_device_fields(t, fields)
            t["_gflops"] = float(d.get("fp32_gflops") or 10_000.0)
            t["_vendor"] = d.get("vendor", "")
            out.append(t)
        k += 1
    return out


def build_db(path: Path, kernel_dir: Path, held: str, n_records: int, seed: int = 0) -> dict:
    """Write the benchmark DB at ``path`` (see the module docstring); returns what it holds."""
    import numpy as np

    from tunedb.index import ParquetStore, RecordBatch
    from tunedb.index.hardware import catalog

    t0 = time.perf_counter()
    from tunedb.transfer.measure.replay import ReplayData

    real = _real_devices(kernel_dir, held)
    held_target = ReplayData(kernel_dir / f"{held}.json.gz").target  # never synthesised: it is the one tuned
    db = ParquetStore.open(path)
    rng = np.random.default_rng(seed)
    n_real = 0
    for d in real.values():
        recs = list(d.results.values())
        db.commit(recs)
        n_real += len(recs)
    by_name = {d["name"]: d for d in catalog.devices()}
    gflops = {name: float((by_name.get(d.target.get("device_name", "")) or {}).get("fp32_gflops") or 10_000.0)
              for name, d in real.items()}
    per_device = len(next(iter(real.values())).results)
    n_synth = max(0, math.ceil((n_records - n_real) / per_device))
    synth = _synthetic_targets([d.target for d in real.values()] + [held_target], n_synth)
    left = n_records - n_real
    names = list(real)
    for i, t in enumerate(synth):
        if left <= 0:
            break
        src = real[names[i % len(names)]]
        recs = list(src.results.values())
        if left < len(recs):
            recs = [recs[j] for j in sorted(rng.choice(len(recs), left, replace=False).tolist())]
        left -= len(recs)
        scale = gflops[names[i % len(names)]] / t.pop("_gflops")
        t.pop("_vendor")
        knob = sorted(recs[0].config)[int(rng.integers(len(recs[0].config)))]
        vals = sorted({r.config[knob] for r in recs}, key=repr)
        tilt = {v: float(x) for v, x in zip(vals, rng.normal(0.0, 0.2, len(vals)))}
        noise = rng.normal(0.0, 0.15, len(recs))
        costs, status, error = [], [], []
        for r, e in zip(recs, noise.tolist()):
            if r.status == "ok" and r.cost:
                c = r.cost * scale * math.exp(e + tilt[r.config[knob]])
                costs.append([c * (1.0 + 0.01 * j) for j in range(SYNTH_REPEATS)])
            else:
                costs.append([])
            status.append(r.status)
            error.append(r.error)
        batch = RecordBatch.from_columns(target=[t] * len(recs), workload=[src.workload] * len(recs),
                                         config=[r.config for r in recs], costs=costs, status=status, error=error,
                                         source="imported:kernel-tuner", origin="bench_tuner synthetic")
        db.commit(batch)
    db.compact()
    n = len(db)
    db.close()
    return {"records": n, "real_devices": len(real), "synthetic_devices": len(synth),
            "configs_per_device": per_device, "build_s": round(time.perf_counter() - t0, 2),
            "size_mb": round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20, 1)}


# ------------------------------------------------------------------------------ one run (a child)
def one_run(db_path: str, replay: str, budget: int, seed: int, baseline: bool) -> dict:
    """Tune the replayed device once on ``db_path`` (in this process); the figures as JSON data."""
    from tunedb.index import ParquetStore
    from tunedb.transfer.measure.jobs import replay_job
    from tunedb.transfer.search.tuner import TuneOptions, Tuner

    t0 = time.perf_counter()
    job = replay_job(replay)
    load_s = time.perf_counter() - t0
    db = ParquetStore.open(db_path)
    tuner = Tuner(db, job.target, job.workload, job.space, job.backend,
                  TuneOptions(budget=budget, seed=seed, patience=10_000), **job.tuner_kwargs())
    timers = _wrap_baseline(tuner, db) if baseline else None
    t0 = time.perf_counter()
    res = tuner.run()
    wall = time.perf_counter() - t0
    over = dict(getattr(res, "overhead", None) or {})
    if timers is not None:
        over = dict(timers)
        over["other"] = max(wall - sum(timers.values()), 0.0)
        over["total"] = wall
    return {"wall_s": wall, "replay_load_s": load_s, "evaluations": res.evaluations,
            "measurements": res.measurements, "cache_hits": res.cache_hits, "best_cost": res.best_cost,
            "model": res.model, "overhead": over}


def _wrap_baseline(tuner: Any, db: Any) -> dict:
    """Time the previous tuner's steps by wrapping its methods (it has no ``overhead``)."""
    timers: dict[str, float] = {}

    def timed(obj: Any, name: str, step: str) -> None:
        fn = getattr(obj, name)

        def wrapper(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                timers[step] = timers.get(step, 0.0) + time.perf_counter() - t
        setattr(obj, name, wrapper)

    timed(tuner, "previous_configs", "resume")
    timed(tuner, "seed_configs", "retrieval")       # retrieval and adaptation together
    timed(tuner, "_fit_model", "model_base")        # every refit of the full model (its DB read included)
    timed(tuner, "_predict", "predict")
    timed(db, "lookup_many", "lookup")
    timed(db, "commit", "commit")
    timed(tuner.backend, "measure", "measure")
    return timers


def _child(args: argparse.Namespace) -> int:
    out = one_run(args.db, args.replay, args.budget, args.seed, args.baseline_child)
    print(json.dumps(out))
    return 0


# ------------------------------------------------------------------------------ the driver
def _run_child(code_root: Path | None, db: Path, replay: Path, budget: int, seed: int, baseline: bool) -> dict:
    env = dict(os.environ)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--db", str(db), "--replay", str(replay),
           "--budget", str(budget), "--seed", str(seed)]
    if baseline:
        cmd.append("--baseline-child")
    if code_root is not None:
        env["PYTHONPATH"] = str(code_root) + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(db.parent))
    if p.returncode != 0:
        raise RuntimeError(f"run failed: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _fresh_copy(base: Path, dst: Path, with_cache: bool) -> Path:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(base, dst, ignore=None if with_cache else shutil.ignore_patterns("costmodel"))
    return dst


def _spread(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)} if xs else {}


def summarise(runs: list[dict]) -> dict:
    """Median and spread of the runs' figures (seconds) and each step's share of the wall time."""
    fixed = [sum(r["overhead"].get(k, 0.0) for k in FIXED_STEPS) for r in runs]
    per_eval = [(r["wall_s"] - f - r["overhead"].get("measure", 0.0)) / max(r["evaluations"], 1)
                for r, f in zip(runs, fixed)]
    steps = sorted({k for r in runs for k in r["overhead"] if k != "total"})
    share = {k: statistics.median(r["overhead"].get(k, 0.0) / r["wall_s"] for r in runs) for k in steps}
    secs = {k: statistics.median(r["overhead"].get(k, 0.0) for r in runs) for k in steps}
    return {"runs": len(runs), "wall_s": _spread([r["wall_s"] for r in runs]), "fixed_s": _spread(fixed),
            "per_eval_ms": _spread([1000 * x for x in per_eval]),
            "replay_load_s": _spread([r["replay_load_s"] for r in runs]),
            "step_s": secs, "step_share": share,
            "evaluations": [r["evaluations"] for r in runs], "best_cost": [r["best_cost"] for r in runs]}


def _baseline_tree(ref: str, work: Path) -> Path | None:
    """``git archive ref`` of this repository unpacked as ``work/code/tunedb`` (None when git fails)."""
    dst = work / "code" / "tunedb"
    dst.mkdir(parents=True, exist_ok=True)
    try:
        arch = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dst)], input=arch, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return dst.parent


def _warm_derived(base: Path, replay: Path) -> None:
    """Build the DB's derived data a DB that has been used has: the nearest-entry index and the
    entries summary (``derived/``; rebuildable), so that every mode starts from a used DB.  The
    persisted cost model is left to the modes (cold cache: absent)."""
    from tunedb.index import ParquetStore
    from tunedb.transfer.measure.jobs import replay_job

    job = replay_job(str(replay))
    db = ParquetStore.open(base)
    db.nearest(job.target, job.workload, k=9)
    db.entries()
    db.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--kernel", default="dedispersion_milo")
    ap.add_argument("--device", default="A100", help="the held-out, replayed device (a cache file stem)")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--budget", type=int, default=50)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline-runs", type=int, default=None, help="runs of the baseline (default --runs; 0: none)")
    ap.add_argument("--baseline-ref", default="HEAD", help="git revision of the previous behaviour")
    ap.add_argument("--work", type=Path, default=None, help="keep the DBs here (default: a temporary folder)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--baseline-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)
    ap.add_argument("--replay", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child(args)
    sys.path.insert(0, str(ROOT.parent))
    kernel_dir = args.data / args.kernel
    replay = kernel_dir / f"{args.device}.json.gz"
    if not replay.is_file():
        raise SystemExit(f"no cache file {replay}")
    work = args.work or Path(tempfile.mkdtemp(prefix="tunedb_bench_tuner_"))
    work.mkdir(parents=True, exist_ok=True)
    base = work / f"db-{args.records}"
    try:
        if not (base / "records").exists():
            built = build_db(base, kernel_dir, args.device, args.records)
        else:
            built = {"records": None, "reused": str(base)}
        shutil.rmtree(base / "derived" / "costmodel", ignore_errors=True)
        _warm_derived(base, replay)
        out: dict[str, Any] = {"records": args.records, "kernel": args.kernel, "device": args.device,
                               "budget": args.budget, "db": built, "modes": {}}
        log = (lambda *a: None) if args.json else print
        log(f"DB: {json.dumps(built)}")
        run_dir = work / "run"
        # cold cache: each run on a copy without the persisted model; the first one's model is kept
        cold, cached = [], []
        for i in range(args.runs):
            db = _fresh_copy(base, run_dir, with_cache=False)
            cold.append(_run_child(None, db, replay, args.budget, i, False))
            log(f"cold-cache run {i}: {cold[-1]['wall_s']:.2f} s")
            if i == 0:
                src = db / "derived" / "costmodel"
                if src.is_dir():
                    shutil.copytree(src, base / "derived" / "costmodel")
        for i in range(args.runs):
            db = _fresh_copy(base, run_dir, with_cache=True)
            cached.append(_run_child(None, db, replay, args.budget, i, False))
            log(f"cached run {i}: {cached[-1]['wall_s']:.2f} s  base model: {cached[-1]['model'].get('base')}")
        out["modes"]["cold-cache"] = summarise(cold)
        out["modes"]["cached"] = summarise(cached)
        nb = args.runs if args.baseline_runs is None else args.baseline_runs
        if nb > 0:
            code = _baseline_tree(args.baseline_ref, work)
            runs = []
            try:
                if code is None:
                    raise RuntimeError(f"git archive {args.baseline_ref} failed")
                for i in range(nb):
                    db = _fresh_copy(base, run_dir, with_cache=False)
                    runs.append(_run_child(code, db, replay, args.budget, i, True))
                    log(f"baseline run {i}: {runs[-1]['wall_s']:.2f} s")
                out["modes"]["baseline"] = summarise(runs)
                out["baseline_ref"] = args.baseline_ref
            except RuntimeError as e:
                out["modes"]["baseline"] = {"error": str(e)}
        if args.json:
            print(json.dumps(out, indent=1, default=float))
        else:
            _print_table(out)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _print_table(out: dict) -> None:
    print(f"\n{out['records']} records of {out['kernel']}, replaying {out['device']}, budget {out['budget']}")
    print(f"{'mode':<11} {'wall s':>16} {'fixed s':>16} {'ms/eval':>16} {'replay load s':>14}  top steps (share)")
    for mode, s in out["modes"].items():
        if "error" in s:
            print(f"{mode:<11} {s['error']}")
            continue

        def f(d: dict, k: float = 1.0) -> str:
            return f"{d['median']:.3g} ({d['min']:.3g}-{d['max']:.3g})"
        top = sorted(s["step_share"].items(), key=lambda kv: -kv[1])[:4]
        print(f"{mode:<11} {f(s['wall_s']):>16} {f(s['fixed_s']):>16} {f(s['per_eval_ms']):>16} "
              f"{s['replay_load_s']['median']:>14.2f}  " + ", ".join(f"{k} {v:.0%}" for k, v in top))


if __name__ == "__main__":
    sys.exit(main())
