"""An answer before the first measurement: how good is the predicted config on a device with no records?

Leave one GPU out on the project's recorded Kernel Tuner caches (``../shared/data/kernel_tuner``:
two kernels, six GPUs each).  Per kernel, ``tunedb import kernel-tuner`` of all six caches into a
fresh DB; then, for each device, ``predict_best(db, device, workload, exclude_target=True)`` (the
device's own records left out: the answer it would get with none) and, beside it, what a user has
without tunedb:

* ``kt_rule``: Kernel Tuner's fallback for a device it has no results for (``get_best_config`` ->
  ``_select_best_common_config``): the config that is best on the most other devices; among
  equally frequent ones, the lowest total time;
* ``nearest``: the best config of the most similar other device (a per-device config file copied
  from the nearest device);
* ``default``: the kernel's default (each parameter's ``Default`` in the search-space file, else its
  first value); 0 where that config is not valid on the device.  The prediction is given it
  (``predict_best(..., default=...)``): it competes with the neighbours' best configs.

Each is scored as relative performance on the held-out device: its optimum / the config's cost
there (1.0 = the optimum; 0 = the config fails there).  Goals: the first predicted config within
10 % of the optimum (relative >= 0.909) on the median device; above ``kt_rule``; never below
``default`` on 95 % of devices.

Two bounds show what is reachable at all:

* ``pool_best``: the best relative performance on the held-out device of any candidate the
  prediction chose from (the other devices' ``top_n`` best configs and the default): what a
  perfect choice among them would reach;
* ``hindsight``: the one config with the highest median relative performance over all the
  kernel's devices, the held-out one included (chosen knowing every device's results): what the
  best single config for every device reaches.  A rule that gives every device the same config
  cannot beat it.

    .venv/bin/python benchmarks/bench_predict.py --json > benchmarks/results/predict.json  # about 3 min
    .venv/bin/python benchmarks/bench_predict.py --kernels convolution_milo --sharpness 10
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tunedb.index.model.keys import canonical_json

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "kernel_tuner"


def _cpu() -> str:
    from tunedb.index.hardware.localcpu import cpu_info

    return f"{cpu_info().get('model', platform.processor())}, {os.cpu_count()} cores"


def _import(kernel: str, db: Path) -> None:
    files = sorted(str(f) for f in (DATA / kernel).glob("*.json.gz") if "_T4" not in f.name)
    subprocess.run([sys.executable, "-m", "tunedb", "import", "kernel-tuner", *files, "--db", str(db), "--no-models"],
                   check=True, capture_output=True, timeout=1800)


def _default(kernel: str) -> dict:
    doc = json.loads((DATA / f"{kernel}.json").read_text())
    out = {}
    for p in doc["ConfigurationSpace"]["TuningParameters"]:
        values = p["Values"] if isinstance(p["Values"], list) else json.loads(p["Values"])
        out[p["Name"]] = p.get("Default", values[0])
    return out


def _hindsight(db: Any, targets: list[dict], workload: dict) -> tuple[dict, dict[str, float]]:
    """The config with the highest median relative performance over all ``targets`` (ties: the
    highest mean), and its relative performance on each (0 where it is not valid)."""
    rel: dict[str, dict[str, float]] = {}
    for t in targets:
        costs = {canonical_json(c.config): c.estimate.value for c in db.best_costs(t["target"], workload, k=10**9)}
        best = min(costs.values())
        rel[t["target_name"]] = {key: best / cost for key, cost in costs.items()}
    keys = set().union(*(r.keys() for r in rel.values()))
    per = {key: [r.get(key, 0.0) for r in rel.values()] for key in keys}
    top = max(sorted(per), key=lambda key: (statistics.median(per[key]), statistics.fmean(per[key])))
    return json.loads(top), {name: r.get(top, 0.0) for name, r in rel.items()}


def run_kernel(kernel: str, work: Path, sharpness: float | None = None) -> list[dict]:
    import tunedb
    from tunedb.index.model.estimate import estimate
    from tunedb.index.retrieval.predict import SHARPNESS, predict_best

    db_path = work / kernel
    _import(kernel, db_path)
    db = tunedb.open(db_path)
    workload = db.entry_list()[0].workload
    targets = db.targets()
    best = {t["target_name"]: db.best_costs(t["target"], workload, k=1)[0] for t in targets}
    default = _default(kernel)
    hindsight_config, hindsight = _hindsight(db, targets, workload)
    rows = []
    for t in targets:
        name = t["target_name"]

        def rel(config: dict, t: dict = t, name: str = name) -> float:
            rec = db.lookup(t["target"], workload, config)
            if rec is None or rec.status != "ok" or not rec.costs:
                return 0.0
            return estimate([db.lookup(t["target"], workload, best[name].config)]).value / estimate([rec]).value

        t0 = time.perf_counter()
        pred = predict_best(db, t["target"], workload, k=1, exclude_target=True, default=default,
                            sharpness=SHARPNESS if sharpness is None else sharpness)
        seconds = time.perf_counter() - t0
        pool = {canonical_json(c.config): c.config for m in pred.neighbours for c in m.config_costs()}
        pool.setdefault(canonical_json(default), default)
        others = [o for o in targets if o["target_name"] != name]
        sims = {m.target_name: m.similarity for m in pred.neighbours}
        # Kernel Tuner's _select_best_common_config over the other devices' stored best configs: the
        # most frequent; among equally frequent ones, the lowest total objective (its summed time)
        votes: collections.Counter = collections.Counter()
        total: dict[str, float] = collections.defaultdict(float)
        for o in others:
            key = json.dumps(best[o["target_name"]].config, sort_keys=True)
            votes[key] += 1
            total[key] += best[o["target_name"]].estimate.value
        top = max(votes.values())
        kt_choice = json.loads(min((k for k in votes if votes[k] == top), key=total.__getitem__))
        nearest_name = max(others, key=lambda o: sims.get(o["target_name"], 0.0))["target_name"]
        rows.append({
            "kernel": kernel, "device": name, "predict_s": round(seconds, 3), "trusted": pred.trusted,
            "predicted": round(rel(pred.configs[0].config), 4) if pred.configs else None,
            "kt_rule": round(rel(kt_choice), 4), "nearest": round(rel(best[nearest_name].config), 4),
            "nearest_device": nearest_name, "default": round(rel(default), 4),
            "pool_best": round(max(rel(c) for c in pool.values()), 4), "pool_size": len(pool),
            "hindsight": round(hindsight[name], 4), "hindsight_config": hindsight_config,
            "source": pred.configs[0].source if pred.configs else pred.reason,
        })
    db.close()
    return rows


def summary(rows: list[dict]) -> dict:
    pred = [r["predicted"] or 0.0 for r in rows]
    kt = [r["kt_rule"] for r in rows]
    return {
        "devices": len(rows),
        "median_predicted": statistics.median(pred), "median_kt_rule": statistics.median(kt),
        "median_nearest": statistics.median(r["nearest"] for r in rows),
        "median_default": statistics.median(r["default"] for r in rows),
        "median_pool_best": statistics.median(r["pool_best"] for r in rows),
        "median_hindsight": statistics.median(r["hindsight"] for r in rows),
        "within_10pct_on_median_device": statistics.median(pred) >= 1 / 1.1,
        "beats_kt_rule_devices": sum(p > k for p, k in zip(pred, kt)),
        "ties_kt_rule_devices": sum(p == k for p, k in zip(pred, kt)),
        "not_below_default_share": sum(p >= r["default"] for p, r in zip(pred, rows)) / len(rows),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", default="convolution_milo,dedispersion_milo", help="comma-separated kernel folders")
    ap.add_argument("--sharpness", type=float, default=None,
                    help="the prediction's similarity weighting (default: predict_best's SHARPNESS)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    from tunedb.index.retrieval.predict import SHARPNESS

    with tempfile.TemporaryDirectory() as tmp:
        rows = [r for k in args.kernels.split(",") for r in run_kernel(k, Path(tmp), args.sharpness)]
    out = {"machine": _cpu(), "sharpness": SHARPNESS if args.sharpness is None else args.sharpness,
           "rows": rows, "summary": summary(rows),
           "per_kernel": {k: summary([r for r in rows if r["kernel"] == k]) for k in args.kernels.split(",")}}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{'kernel':18s} {'device':28s} {'predicted':>9s} {'kt rule':>8s} {'nearest':>8s} {'default':>8s} "
          f"{'pool best':>9s} {'hindsight':>9s}  source")
    for r in rows:
        p = f"{r['predicted']:.3f}" if r["predicted"] is not None else "-"
        print(f"{r['kernel']:18s} {r['device'][:28]:28s} {p:>9s} {r['kt_rule']:8.3f} {r['nearest']:8.3f} "
              f"{r['default']:8.3f} {r['pool_best']:9.3f} {r['hindsight']:9.3f}  {r['source']}")
    for k, s in out["per_kernel"].items():
        print(f"{k}: median predicted {s['median_predicted']:.3f}, kt rule {s['median_kt_rule']:.3f}, "
              f"nearest {s['median_nearest']:.3f}, default {s['median_default']:.3f}, pool best "
              f"{s['median_pool_best']:.3f}, hindsight {s['median_hindsight']:.3f}; beats the kt rule on "
              f"{s['beats_kt_rule_devices']}/{s['devices']}, not below default on {s['not_below_default_share']:.0%}")
    print(f"sharpness: {out['sharpness']:g}")
    print(f"machine: {out['machine']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
