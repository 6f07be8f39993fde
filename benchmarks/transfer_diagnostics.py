"""Can the other devices' data lead to a held-out device's optimum at all?  (replay data)

Three diagnostics for one held-out device of a Kernel Tuner data set, none of which a tuner could
run (each looks at the held-out device's full measurements):

  hindsight_mixture  least-squares mix of the other devices' log times fitted on all of the
                     held-out device's configs (tunedb.transfer.apps.evaluation.hindsight_mixture)
  model              the LightGBM cost model trained on the other devices' ok records, asked for
                     every config of the held-out device: rank of the true optimum among its
                     predictions, and the fraction of the optimum its top 20 reach
  idealised_loop     model-guided search over the *whole* space: measure the 4 best-predicted
                     unmeasured configs, refit with the device's own measurements weighted as
                     together as much as the other devices' records (own_sample_weight), repeat;
                     fraction of the optimum after 5, 10, 20, 50

plus the ceiling of seed transfer (``transfer_ceiling``, also for every device with ``--all``):
the evaluation at which the do-it-yourself union of bests (evaluation.union_of_bests) first
reaches 95% of the optimum, each source's best fraction among its own top 10 and the rank
(0-based) the held-out optimum has in each source's order, and the best fraction among the 1-
and 2-knob neighbours of the union's best of its first 10.

and, with ``--agreement``, whether any other device resembles the held-out one (``agreement``:
hardware similarity, rank correlations of the config times, where the optimum ranks);

and, with ``--local``, one check on this CPU: does a preset's optimum carry over to another?

  local seeds        each source preset tunes one matmul shape (64 measurements from the family
                     default, cold: bench_transfer.tune_source), its 5 best configs are adapted to the new preset (as warm
                     seeds are) and measured there, one after another; the new preset's own
                     tuned configs are among the sources, as the yardstick

    python benchmarks/transfer_diagnostics.py --kernel convolution_milo --device A100 --json
    python benchmarks/transfer_diagnostics.py --all                 # transfer_ceiling of all 12, ~30 s
    python benchmarks/transfer_diagnostics.py --agreement --kernel convolution_milo --device A100
    python benchmarks/transfer_diagnostics.py --local --json        # about 2 minutes
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tunedb.transfer.apps.evaluation import hindsight_mixture, load_devices, union_of_bests  # noqa: E402
from tunedb.transfer.search.costmodel import FeatureSpace, default_model, spearman  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "kernel_tuner"


def own_sample_weight(n_db: int, n_own: int, own_weight: float = 1.0) -> float:
    """Sample weight of each of ``n_own`` records of the held-out device beside ``n_db`` records
    of weight 1: together they weigh ``own_weight`` times the other records, unless that would
    make each weigh less than 1 (then 1)."""
    return max(1.0, own_weight * n_db / max(n_own, 1))


def transfer_ceiling(datas: dict, device: str) -> dict:
    """How far the other devices' best configs can carry ``device`` (see the module docstring)."""
    from tunedb.index.model.keys import canonical_json

    hd = datas[device]
    _, opt = hd.optimum()
    ok = {k: r.cost for k, r in hd.results.items() if r.status == "ok" and r.cost}
    opt_key = min(ok, key=ok.get)
    order = union_of_bests(datas, device, 200, depth=None)
    fr = [opt / ok.get(canonical_json(c), np.inf) for c in order]
    to95 = next((i + 1 for i, f in enumerate(np.maximum.accumulate(fr)) if f >= 0.95), None)
    sources = {}
    for dev, d in datas.items():
        if dev == device:
            continue
        ranked = [k for _, k in sorted((r.cost, k) for k, r in d.results.items() if r.status == "ok" and r.cost)]
        pos = {k: i for i, k in enumerate(ranked)}
        sources[dev] = {"top10_fraction": round(max(opt / ok.get(k, np.inf) for k in ranked[:10]), 4),
                        "optimum_rank": pos.get(opt_key)}
    first = order[:10]
    best = min(first, key=lambda c: ok.get(canonical_json(c), np.inf))
    names = hd.space.names
    near: dict[int, float] = {1: 0.0, 2: 0.0}
    for k, c in ok.items():
        cfg = hd.results[k].config
        dist = sum(cfg[n] != best[n] for n in names)
        if dist in near:
            near[dist] = max(near[dist], opt / c)
    return {"union_evaluations_to_95": to95, "union_at_10": round(float(max(fr[:10])), 4),
            "sources": sources, "neighbours_of_union_best": {str(k): round(v, 4) for k, v in near.items()}}


def agreement(datas: dict, device: str) -> dict:
    """Does any other device resemble ``device``?  Per other device: its hardware similarity to
    ``device`` as the DB's nearest-entry search scores it (cosine of the hardware and workload
    vectors; the entries of a memory store holding the other devices' records), the Spearman
    rank correlation of the two devices' times over every config both measured ok
    (``spearman_all``) and over the other device's 200 fastest of them (``spearman_top200``: the
    configs a transfer would try), the rank (0-based) of ``device``'s optimum in the other
    device's order and the fraction of ``device``'s optimum that the other's 10 best reach."""
    import tunedb

    hd = datas[device]
    ok = {k: r.cost for k, r in hd.results.items() if r.status == "ok" and r.cost}
    opt = min(ok.values())
    opt_key = min(ok, key=ok.get)
    db = tunedb.open("memory:")
    for dev, d in datas.items():
        if dev != device:
            db.commit(list(d.results.values()))
    sims = {m.target_name: round(float(m.similarity), 4)
            for m in db.nearest(hd.target, hd.workload, k=len(datas), exclude_target=True)}
    out = {}
    for dev, d in datas.items():
        if dev == device:
            continue
        other = {k: r.cost for k, r in d.results.items() if r.status == "ok" and r.cost}
        common = [k for k in other if k in ok]
        top = sorted(common, key=other.get)[:200]
        ranked = sorted(other, key=other.get)
        out[dev] = {"similarity": sims.get(str(d.target.get("name", dev))),
                    "spearman_all": round(spearman([ok[k] for k in common], [other[k] for k in common]), 4),
                    "spearman_top200": round(spearman([ok[k] for k in top], [other[k] for k in top]), 4),
                    "optimum_rank": ranked.index(opt_key) if opt_key in other else None,
                    "top10_fraction": round(max(opt / ok.get(k, np.inf) for k in ranked[:10]), 4)}
    return out


def diagnose(data_dir: Path, kernel: str, device: str, batch: int = 4, budget: int = 50) -> dict:
    datas = load_devices(data_dir / kernel)
    if device not in datas:
        raise SystemExit(f"unknown device {device!r}; the data set has {sorted(datas)}")
    hd = datas[device]
    cfgs, wls, tgs, costs = [], [], [], []
    for dev, d in datas.items():
        if dev == device:
            continue
        for r in d.results.values():
            if r.status == "ok" and r.cost:
                cfgs.append(r.config), wls.append(r.workload), tgs.append(r.target), costs.append(r.cost)
    fs = FeatureSpace.from_configs(cfgs)
    Xb, yb = fs.matrix(cfgs, wls, tgs), np.log(costs)
    space = [r for r in hd.results.values() if r.status != "invalid"]
    Xs = fs.matrix([r.config for r in space], [hd.workload] * len(space), [hd.target] * len(space))
    cost = np.array([r.cost if r.status == "ok" and r.cost else np.inf for r in space])
    opt = float(cost.min())
    model = default_model(0)
    model.features_ = fs
    model.fit_matrix(Xb, yb, holdout=0)
    base = model._predict_x(Xs)
    order = np.argsort(base, kind="stable")
    ok = np.isfinite(cost)
    model_rank = int(np.flatnonzero(order == int(np.argmin(cost)))[0])

    own_weight = 1.0  # the device's own measurements weigh as much as the other devices' records
    seen: list[int] = []
    best, curve = np.inf, []
    pred = base
    while len(seen) < budget:
        if seen:
            own = [i for i in seen if ok[i]]
            X = np.vstack([Xb, Xs[own]])
            y = np.concatenate([yb, np.log(cost[own])])
            w = np.concatenate([np.ones(len(yb)), np.full(len(own), own_sample_weight(len(yb), len(own), own_weight))])
            m = default_model(0)
            m.features_ = fs
            m.fit_matrix(X, y, sample_weight=w, holdout=0)
            pred = m._predict_x(Xs)
        taken = set(seen)
        for i in [int(i) for i in np.argsort(pred, kind="stable") if int(i) not in taken][:batch]:
            seen.append(i)
            best = min(best, cost[i])
            curve.append(opt / best if np.isfinite(best) else 0.0)
    mix = hindsight_mixture(datas, device, top=20)
    return {
        "kernel": kernel, "device": device, "configs": len(space),
        "within_90_percent": int(np.sum(opt / cost[ok] >= 0.9)),
        "hindsight_mixture": mix,
        "model": {"optimum_rank": model_rank, "top20_fraction": opt / float(cost[order[:20]].min()),
                  "spearman": spearman(base[ok], np.log(cost[ok]))},
        "idealised_loop": {str(b): curve[b - 1] for b in (5, 10, 20, 50) if b <= len(curve)},
        "transfer_ceiling": transfer_ceiling(datas, device),
    }


def local_seeds(workload: dict, sources: list[str], new: str, budget: int = 64, top: int = 5) -> dict:
    """Cost on ``new`` (seconds) of the ``top`` adapted best configs of each source preset."""
    import shutil
    import tempfile

    from bench_transfer import tune_source  # the local benchmark's way of tuning a source preset

    from tunedb.index import ParquetStore
    from tunedb.index.hardware.localcpu import preset
    from tunedb.transfer.measure.jobs import local_job
    from tunedb.transfer.search.adapt import adapt_config, hardware_scale

    work = Path(tempfile.mkdtemp(prefix="tunedb_seedcheck_"))
    out = {"workload": workload, "new_preset": new, "sources": {}}
    try:
        db = ParquetStore.open(work / "db")
        dst = local_job(preset(new), workload)
        for src in sources:
            tuned = tune_source(db, preset(src), workload, budget)
            scale = hardware_scale(tuned.target, dst.target, dst.hardware_knobs)
            rows = []
            for r in db.best(tuned.target, tuned.workload, k=top):
                cfg = adapt_config(r.config, dst.space, dst.defaults, None, scale)
                m = dst.backend.measure(dst.target, dst.workload, cfg) if cfg is not None else None
                rows.append({"config": r.config, "source_cost": r.cost, "adapted": cfg,
                             "new_cost": m.cost if m is not None and m.status == "ok" else None})
            out["sources"][src] = rows
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--kernel", default="convolution_milo")
    ap.add_argument("--device", default="A100")
    ap.add_argument("--local", action="store_true", help="the local seed check instead of replay")
    ap.add_argument("--sources", default="cpu-x86-64-t1,cpu-x86-64-v3-t1,cpu-native-t2,cpu-native-t1")
    ap.add_argument("--new-preset", default="cpu-native-t1")
    ap.add_argument("--all", action="store_true", help="transfer_ceiling of every device of both kernels")
    ap.add_argument("--agreement", action="store_true",
                    help="how much each other device resembles --device (similarity, rank correlations)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    if a.all:
        res = {}
        for kernel in ("convolution_milo", "dedispersion_milo"):
            datas = load_devices(Path(a.data) / kernel)
            for dev in datas:
                res[f"{kernel}/{dev}"] = transfer_ceiling(datas, dev)
    elif a.agreement:
        res = {"kernel": a.kernel, "device": a.device,
               "others": agreement(load_devices(Path(a.data) / a.kernel), a.device)}
    elif a.local:
        res = local_seeds({"family": "matmul", "M": 192, "N": 192, "K": 192}, a.sources.split(","), a.new_preset)
    else:
        res = diagnose(Path(a.data), a.kernel, a.device)
    res["seconds"] = time.perf_counter() - t0
    print(json.dumps(res, sort_keys=True) if a.json else json.dumps(res, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
