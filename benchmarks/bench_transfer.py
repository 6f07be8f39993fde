"""Transfer benchmark: does history make tuning a new device cheaper?

Replay mode (default): leave-one-device-out over the shared Kernel Tuner data
(convolution_milo, dedispersion_milo; 6 GPUs each).  For each held-out device a fresh DB holds
the other five devices' records; the held-out device is replayed.  For budgets 5, 10, 20, 50
it reports the fraction of the held-out device's true optimum reached (optimum / best found) by

  warm          tunedb with its defaults, as ``tunedb tune --replay FILE`` runs it: the nearest
                entries' best configs, interleaved by hardware similarity, seed a local search
                ranked by the RGPE transfer surrogate (surrogate.py), with the guard against
                misleading history (proposals/guard.py) giving a history-free explorer its share
  no_guard      the same with the guard off (``guard=False``)
  no_hw         ablation: the sources weighed alike (``similarity_power=0``), so the hardware
                similarity no longer orders the seeds (the RGPE weights still come from the
                device's own measurements); without workload features there is nothing to
                ablate here: every device of a data set runs the same workload
  topk_seeds    ablation: the seeds alone, no model, no guard: the family default (when there is
                one), then the sources' bests interleaved with equal quotas (``n_seeds`` = the
                budget), then neighbours of the best in random order
  diy_union     top-k, the do-it-yourself script: every other device's best, then second best,
                ... (round-robin, de-duplicated), then random (evaluation.union_of_bests)
  cold          tunedb's local search from a random start, no retrieval, no prior model
  random        random search without replacement (mean over --random-seeds seeds)
  nearest_only  the best config of the most similar device, measured once
  optuna_tpe    Optuna's TPE warm-started the way an Optuna user with the other devices' results
                would (needs ``pip install -e '.[bench]'``; without optuna the row says skipped):
                a study (``TPESampler(seed=s)``, Optuna's defaults) over the held-out device's
                knobs, one categorical distribution per knob; the other devices' best configs
                (one per device, de-duplicated) enqueued first (``study.enqueue_trial``), then TPE
                proposes the rest.  A proposal outside the space (a constraint fails) is told as
                pruned and not measured, so it spends no budget; a proposal already measured is
                told its known cost again, also without spending budget (the cache a user keeps);
                a measured config that failed on the device spends budget and is told as pruned.
                Each measurement is the held-out device's recorded cost (seconds).  At most
                ``TPE_MAX_ASKS_PER_EVALUATION`` x the budget proposals: a run that reaches the cap
                stops short (never seen on these data sets)

Tuner strategies, diy_union and optuna_tpe are the mean over --seeds seeds (default 3); every run spends
its whole budget (no patience).  Every strategy is scored by the held-out device's recorded
cost of each config it evaluated (a tuner run's history is rebuilt from its evaluations), the
numbers the union of bests and the optimum are read from.  The table on stderr (and "table" in the JSON) gives the median
and the worst over the held-out devices at each budget.

plus a diagnostic no tuner can run, hindsight_mixture_at_20: the 20 configs ranked best by the
least-squares mix of the other devices' log times fitted on all of the held-out device's data
(see tunedb.transfer.apps.evaluation.hindsight_mixture); low values mean the other devices' data do not
rank the held-out optimum well, whatever the search does.  And the evaluations needed to reach
95% of the optimum (random: the exact expectation (N+1)/(m+1) for m good configs among N, which
is what infinitely many seeds average to).

Local mode (--local): real C kernels on this CPU.  The DB holds workloads of two families
tuned on one preset (cpu-x86-64-t1, SSE2 only); new shapes are tuned on cpu-native-t1 warm and
cold with equal budgets; the reference is the best a cold search finds with 4x the budget.

    python benchmarks/bench_transfer.py --json
    python benchmarks/bench_transfer.py --kernels convolution_milo --devices A100,W6600 --seeds 1
    python benchmarks/bench_transfer.py --strategies optuna_tpe,diy_union --seeds 3
    python benchmarks/bench_transfer.py --local --json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tunedb.index import ParquetStore  # noqa: E402
from tunedb.transfer.apps.evaluation import (  # noqa: E402,F401
    BUDGETS,
    HeldOut,
    best_within,
    frac,
    hindsight_mixture,
    leave_one_out,
    load_devices,
    order_history,
    random_curve,
    union_curve,
)
from tunedb.transfer.measure.replay import ReplayData  # noqa: E402
from tunedb.transfer.search.tuner import TuneOptions, Tuner  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "kernel_tuner"


def _log(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


#: strategies of the replay benchmark, side by side in one run (tuner ones: mean over --seeds seeds)
STRATEGIES = ("warm", "no_guard", "no_hw", "topk_seeds", "diy_union", "cold", "random", "nearest_only")
#: the warm run's ablations (``TuneOptions`` overrides), run beside it on copies of the same DB
VARIANTS = {"no_guard": {"guard": False},
            "no_hw": {"similarity_power": 0.0},
            "topk_seeds": {"n_seeds": max(BUDGETS), "similarity_power": 0.0, "use_model": False,
                           "surrogate": "model", "guard": False}}


#: strategies outside ``leave_one_out``: baselines built on another library (``--strategies``)
OPTUNA_STRATEGIES = ("optuna_tpe",)
ALL_STRATEGIES = STRATEGIES + OPTUNA_STRATEGIES
#: what the optuna_tpe row says when optuna is not installed
OPTUNA_MISSING = "skipped: optuna not installed (pip install -e '.[bench]')"
#: a TPE run stops after this many proposals per evaluation of its budget (invalid and repeated
#: proposals spend no budget, so without a cap a run could propose forever)
TPE_MAX_ASKS_PER_EVALUATION = 20


def held_out(datas: dict, held: str, random_seeds: int, seeds: int, variants: dict | None = None) -> HeldOut:
    """Leave ``held`` out (``evaluation.leave_one_out``): warm, cold and every one of ``variants``
    (None: ``VARIANTS``) run with ``seeds`` seeds, each on a fresh copy of a DB holding the other
    devices' records, plus random, nearest-only and the union of bests; every tuner run scored by
    the recorded costs of the configs it evaluated (``recorded_costs``), so every strategy is
    scored by the same numbers."""
    return leave_one_out(datas, held, BUDGETS, random_seeds, seeds=seeds,
                         variants=VARIANTS if variants is None else variants, recorded_costs=True)


def optuna_available() -> bool:
    """Whether optuna can be imported (the ``bench`` extra)."""
    try:
        import optuna  # noqa: F401
    except ImportError:
        return False
    return True


def source_bests(datas: dict[str, ReplayData], held: str) -> list[dict]:
    """The best config (``ReplayData.optimum``) of every device but ``held``, in ``datas`` order,
    de-duplicated: the priors the optuna_tpe baseline enqueues."""
    out: list[dict] = []
    for dev, d in datas.items():
        if dev != held:
            cfg = d.optimum()[0]
            if cfg not in out:
                out.append(cfg)
    return out


def tpe_order(data: ReplayData, priors: list[dict], budget: int, seed: int,
              max_asks: int | None = None) -> list[dict]:
    """The configs an Optuna TPE study measures on ``data``, in order, at most
    ``budget`` distinct ones: ``priors`` enqueued first, then ``TPESampler(seed=seed)`` over one
    categorical distribution per knob of ``data.space``.  Every measurement is answered from the
    recorded results (the estimator's value in seconds, told as the trial's value; a failed or
    unrecorded config is told as pruned).  A proposal outside the space is told as pruned and a
    repeated one its known outcome again; neither counts toward ``budget``.  Stops after
    ``max_asks`` proposals (None: ``TPE_MAX_ASKS_PER_EVALUATION * budget``).  Needs optuna."""
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState

    from tunedb.index.model.estimate import record_value
    from tunedb.index.model.keys import canonical_json

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = data.space
    dists = {k.name: CategoricalDistribution(k.values) for k in space.knobs}
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    for p in priors:
        study.enqueue_trial(dict(p))
    known: dict[str, float | None] = {}
    order: list[dict] = []
    cap = TPE_MAX_ASKS_PER_EVALUATION * budget if max_asks is None else max_asks
    for _ in range(cap):
        if len(order) >= budget:
            break
        trial = study.ask(dists)
        cfg = {name: trial.params[name] for name in dists}
        if not space.is_valid(cfg):
            study.tell(trial, state=TrialState.PRUNED)
            continue
        key = canonical_json(cfg)
        if key not in known:
            rec = data.results.get(key)
            known[key] = record_value(rec) if rec is not None else None
            order.append(cfg)
        value = known[key]
        if value is None:
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, value)
    return order


def tpe_histories(datas: dict[str, ReplayData], held: str, seeds: int) -> list[list]:
    """One ``order_history`` of :func:`tpe_order` on ``held`` per seed (0 .. ``seeds`` - 1), with
    budget ``max(BUDGETS)`` and the other devices' bests (:func:`source_bests`) as priors: scored
    by the held-out device's recorded costs, like every other strategy."""
    priors = source_bests(datas, held)
    return [order_history(datas[held], tpe_order(datas[held], priors, max(BUDGETS), s)) for s in range(seeds)]


def mean_fraction(histories: list[list], optimum: float, budget: int) -> float:
    """Mean over ``histories`` of the fraction of ``optimum`` reached within ``budget``."""
    return statistics.fmean(frac(optimum, best_within(h, budget)) for h in histories)


def replay_benchmark(data_dir: Path, kernels: list[str], random_seeds: int, quiet: bool, seeds: int = 3,
                     devices: list[str] | None = None, strategies: tuple[str, ...] = ALL_STRATEGIES) -> dict:
    """Leave each device of each of ``kernels`` out in turn (``devices``: only these held-out
    devices) and score ``strategies`` (names of ``ALL_STRATEGIES``) on it.  The ``leave_one_out``
    strategies run only when one of them is asked for (warm and cold then always run; a
    ``VARIANTS`` row only when asked for).  Returns the per-device rows, the table (strategy ->
    budget -> median and worst fraction of the optimum; optuna_tpe without optuna: ``{"skipped":
    OPTUNA_MISSING}``) and, when every ``STRATEGIES`` row ran, the summary."""
    loo = [st for st in STRATEGIES if st in strategies]
    tpe = [st for st in OPTUNA_STRATEGIES if st in strategies]
    skipped = {}
    if tpe and not optuna_available():
        _log(f"optuna_tpe: {OPTUNA_MISSING}", quiet)
        skipped = {st: {"skipped": OPTUNA_MISSING} for st in tpe}
        tpe = []
    scored = loo + tpe
    variants = {name: over for name, over in VARIANTS.items() if name in loo}
    rows = []
    weights = {}
    for kernel in kernels if scored else ():
        datas = load_devices(data_dir / kernel)
        for held in datas:
            if devices and held not in devices:
                continue
            t0 = time.perf_counter()
            fr: dict[str, dict[int, float]] = {}
            extra: dict = {}
            mix = None
            if loo:
                h = held_out(datas, held, random_seeds, seeds, variants)
                mix = hindsight_mixture(datas, held, top=20)
                weights[f"{kernel}/{held}"] = h.surrogates.get("warm", {})
                fr.update({st: {b: h.fraction(st, b) for b in BUDGETS} for st in loo})
                extra = {"nearest_device": h.nearest_device, "warm_measurements_to_95": h.warm_to_95,
                         "random_measurements_to_95": h.random_to_95,
                         "hindsight_mixture_at_20": mix["fraction"],
                         "hindsight_mixture_optimum_rank": mix["optimum_rank"]}
            if tpe:
                _, opt = datas[held].optimum()
                hists = tpe_histories(datas, held, seeds)
                fr["optuna_tpe"] = {b: mean_fraction(hists, opt, b) for b in BUDGETS}
                # runs that hit the proposal cap before spending the whole budget
                extra["optuna_tpe_short_runs"] = sum(1 for h in hists if len(h) < max(BUDGETS))
            for b in BUDGETS:
                rows.append({"kernel": kernel, "device": held, "budget": b,
                             **{st: fr[st][b] for st in scored}, **extra})
            _log(f"{kernel:>18} {held:>7}: " + "  ".join(
                f"{st} " + "/".join(f"{fr[st][b]:.3f}" for b in BUDGETS) for st in (loo[:5] + tpe))
                + (f"  hindsight-mix@20 {mix['fraction']:.3f}" if mix else "")
                + f"  [{time.perf_counter() - t0:.1f}s]", quiet)
    table = {st: {str(b): {"median": statistics.median(r[st] for r in rows if r["budget"] == b),
                           "worst": min(r[st] for r in rows if r["budget"] == b)} for b in BUDGETS}
             for st in scored}
    table.update(skipped)
    out = {"devices": rows, "table": table, "surrogate_weights": weights, "seeds": seeds,
           "strategies": [st for st in ALL_STRATEGIES if st in strategies]}
    if set(STRATEGIES) <= set(loo):
        out["summary"] = summary_of(rows, table)
    _log(format_table(table), quiet)
    return out


def summary_of(rows: list[dict], table: dict) -> dict:
    """The headline numbers of a run with every ``STRATEGIES`` row (``replay_benchmark``)."""
    at20 = [r for r in rows if r["budget"] == 20]
    w20 = [r["warm"] for r in at20]
    ratios = [r["random_measurements_to_95"] / r["warm_measurements_to_95"] if r["warm_measurements_to_95"]
              else r["random_measurements_to_95"] / (max(BUDGETS) + 1) for r in at20]
    return {
        "median_at_20": statistics.median(w20), "worst_at_20": min(w20),
        "cold_median_at_20": statistics.median(r["cold"] for r in at20),
        "random_median_at_20": statistics.median(r["random"] for r in at20),
        "nearest_only_median": statistics.median(r["nearest_only"] for r in at20),
        "median_random_over_warm_measurements_to_95": statistics.median(ratios),
        "worst_random_over_warm_measurements_to_95": min(ratios),
        "warm_never_reached_95": sum(1 for r in at20 if r["warm_measurements_to_95"] is None),
        "warm_beats_diy_worst": {str(b): table["warm"][str(b)]["worst"] > table["diy_union"][str(b)]["worst"]
                                 for b in BUDGETS},
        # the goal against top-k: at or above it at every budget, median and worst device
        "warm_at_or_above_topk": {str(b): {m: table["warm"][str(b)][m] >= table["diy_union"][str(b)][m]
                                           for m in ("median", "worst")} for b in BUDGETS},
    }


def format_table(table: dict) -> str:
    """The side-by-side table: one line per strategy, median and worst at each budget."""
    head = f"{'strategy':<13}" + "".join(f"  med@{b:<3}" for b in BUDGETS) + "".join(f"  worst@{b:<3}" for b in BUDGETS)
    lines = [head]
    for st, per in table.items():
        if "skipped" in per:
            lines.append(f"{st:<13}  {per['skipped']}")
            continue
        lines.append(f"{st:<13}" + "".join(f"  {per[str(b)]['median']:.3f}  " for b in BUDGETS)
                     + "".join(f"  {per[str(b)]['worst']:.3f}    " for b in BUDGETS))
    return "\n".join(lines)


# --------------------------------------------------------------------------------- local
SOURCE_WORKLOADS = [
    {"family": "matmul", "M": 128, "N": 128, "K": 128},
    {"family": "matmul", "M": 192, "N": 192, "K": 192},
    {"family": "matmul", "M": 256, "N": 128, "K": 256},
]
NEW_WORKLOADS = [
    {"family": "matmul", "M": 160, "N": 160, "K": 160},
    {"family": "matmul", "M": 224, "N": 192, "K": 128},
    {"family": "matmul", "M": 256, "N": 256, "K": 256},
]


def _second_family_workloads() -> tuple[list, list]:
    from tunedb.transfer.kernels import families

    fams = families()
    fam = "softmax" if "softmax" in fams else next(f for f in fams if f not in ("matmul",))
    if fam == "softmax":
        src = [{"family": "softmax", "M": 256, "N": 512}, {"family": "softmax", "M": 512, "N": 1024}]
        new = [{"family": "softmax", "M": 384, "N": 768}, {"family": "softmax", "M": 1024, "N": 512}]
    else:  # pragma: no cover
        raise SystemExit(f"no second family to benchmark among {fams}")
    return src, new


def tune_source(db: ParquetStore, target: dict, workload: dict, budget: int):
    """How the local benchmark fills its DB: a cold search of ``budget`` measurements on a
    source preset, starting from the family default.  Returns the TuneResult."""
    from tunedb.transfer.measure.jobs import local_job

    job = local_job(target, workload)
    return Tuner(db, job.target, job.workload, job.space, job.backend,
                 TuneOptions(budget=budget, seed=0, cold=True, patience=10_000, start_default=True),
                 **job.tuner_kwargs()).run()


def local_benchmark(budget: int, quiet: bool, source_preset: str, new_preset: str) -> dict:
    from tunedb.index.hardware.localcpu import preset
    from tunedb.transfer.measure.jobs import local_job

    src2, new2 = _second_family_workloads()
    work = Path(tempfile.mkdtemp(prefix="bench_transfer_local_"))
    rows = []
    try:
        db = ParquetStore.open(work / "db")
        src_t = preset(source_preset)
        for w in SOURCE_WORKLOADS + src2:
            t0 = time.perf_counter()
            r = tune_source(db, src_t, w, 4 * budget)
            _log(f"source {source_preset} {w}: best {r.best_cost:.3g}s [{time.perf_counter() - t0:.0f}s]", quiet)
        new_t = preset(new_preset)
        for w in NEW_WORKLOADS + new2:
            job = local_job(new_t, w)
            t0 = time.perf_counter()
            ref = Tuner(ParquetStore.open(work / f"cold-{len(rows)}"), job.target, job.workload, job.space, job.backend,
                        TuneOptions(budget=4 * budget, seed=1, cold=True, patience=10_000),
                        **job.tuner_kwargs()).run()
            warm = Tuner(db, job.target, job.workload, job.space, job.backend,
                         TuneOptions(budget=budget, seed=1, patience=10_000), **job.tuner_kwargs()).run()
            target_cost = ref.best_cost / 0.95
            # the reference's first `budget` evaluations are exactly a cold run at that budget (same seed)
            c95 = ref.evaluations_to_reach(target_cost)
            c95 = c95 if c95 is not None and c95 <= budget else None
            w95 = warm.evaluations_to_reach(target_cost)
            rows.append({"workload": job.workload, "warm_measurements_to_95": w95, "cold_measurements_to_95": c95,
                         "warm_best": warm.best_cost, "cold_best": best_within(ref.history, budget),
                         # the first evaluation of a warm run is its top adapted seed
                         "warm_first": warm.history[0][1] if warm.history else None,
                         "warm_seeded_from": sorted({s["from_target"] for s in warm.seeds}),
                         "reference_best_4x": ref.best_cost, "budget": budget})
            _log(f"new {new_preset} {w}: warm->95% {w95} cold->95% {c95} warm {warm.best_cost:.3g}s "
                 f"cold {best_within(ref.history, budget):.3g}s ref {ref.best_cost:.3g}s "
                 f"[{time.perf_counter() - t0:.0f}s]", quiet)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    for r in rows:
        w, c = r["warm_measurements_to_95"], r["cold_measurements_to_95"]
        if w is None and c is None:
            # neither reached the line: no ratio, the best each found instead
            r["warm_over_cold"] = None
            r["verdict"] = (f"not reached (best found: warm {r['warm_best']:.4g} s, cold {r['cold_best']:.4g} s, "
                            f"95% line {r['reference_best_4x'] / 0.95:.4g} s)")
        else:
            # a search that did not reach the line within the budget counts as budget + 1
            r["warm_over_cold"] = (w or budget + 1) / (c or budget + 1)
            r["verdict"] = f"warm {w if w else 'not reached'} vs cold {c if c else 'not reached'} evaluations to 95%"
    ratios = [r["warm_over_cold"] for r in rows if r["warm_over_cold"] is not None]
    return {"workloads": rows, "median_warm_over_cold": statistics.median(ratios) if ratios else None,
            "not_reached_by_either": sum(1 for r in rows if r["warm_over_cold"] is None),
            "note": "warm_over_cold: evaluations to 95% of the 4x-budget reference, warm / cold; a search that "
                    "did not reach it counts as budget+1; None (not reached) when neither did"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="folder with the Kernel Tuner data sets")
    ap.add_argument("--kernels", default="convolution_milo,dedispersion_milo")
    ap.add_argument("--random-seeds", type=int, default=50)
    ap.add_argument("--seeds", type=int, default=3, help="(replay) seeds per tuner strategy, averaged")
    ap.add_argument("--devices", default="", help="(replay) only these held-out devices, comma-separated")
    ap.add_argument("--strategies", default=",".join(ALL_STRATEGIES),
                    help="(replay) only these rows, comma-separated, of: " + ", ".join(ALL_STRATEGIES))
    ap.add_argument("--local", action="store_true", help="real C kernels on this CPU instead of replay")
    ap.add_argument("--budget", type=int, default=16, help="(--local) equal budget of warm and cold")
    ap.add_argument("--source-preset", default="cpu-x86-64-t1")
    ap.add_argument("--new-preset", default="cpu-native-t1")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    strategies = tuple(st for st in a.strategies.split(",") if st)
    unknown = [st for st in strategies if st not in ALL_STRATEGIES]
    if unknown or not strategies:
        ap.error(f"--strategies: unknown {', '.join(unknown)} (choose from {', '.join(ALL_STRATEGIES)})"
                 if unknown else "--strategies: none given")
    t0 = time.perf_counter()
    if a.local:
        res = local_benchmark(a.budget, a.json, a.source_preset, a.new_preset)
    else:
        res = replay_benchmark(Path(a.data), a.kernels.split(","), a.random_seeds, a.json, seeds=a.seeds,
                               devices=[d for d in a.devices.split(",") if d] or None, strategies=strategies)
    res["seconds"] = time.perf_counter() - t0
    print(json.dumps(res, sort_keys=True) if a.json else json.dumps(res, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
