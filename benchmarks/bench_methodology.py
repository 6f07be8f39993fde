"""tunedb's Kernel Tuner strategy scored by the autotuning methodology of Kernel Tuner's authors.

What is measured: the aggregate performance score of the package ``autotuning-methodology``
(the methodology of "A Methodology for Comparing Auto-Tuning Optimization Algorithms", 2024)
for tunedb's ``WarmStart`` beside Kernel Tuner's own strategies and the "union of bests"
transfer baseline, leave-one-GPU-out on the shared Kernel Tuner data
(``../shared/data/kernel_tuner``: convolution_milo and dedispersion_milo, 6 GPUs each).

For every held-out (kernel, GPU) the methodology runs each strategy ``repeats`` times through
``kernel_tuner.tune_kernel_T1`` in simulation mode (the held-out GPU's cache is replayed: device
times are the recorded GPU times, every strategy's own time is this machine's), with a time
budget from its random-search baseline; a strategy's own time (Kernel Tuner's ``strategy_time``)
and Kernel Tuner's ``framework_time`` count in that budget and on the time axis.  The score at a
point of the budget is the methodology's: best-found objective relative to the calculated
random-search baseline (0) and the absolute optimum (1), averaged over the search spaces; the
aggregate score is its mean over the time range.

Strategies: Kernel Tuner's ``genetic_algorithm``, ``random_sample``, ``greedy_ils``,
``simulated_annealing`` (``--kt``); ``tunedb WarmStart`` (``tunedb.kernel_tuner.WarmStart`` on a
fresh copy, per repeat, of a DB holding the other five GPUs' caches, imported with
``python -m tunedb --db DIR --json import kernel-tuner FILE...``; Tuner seed = repeat index);
``Union of bests`` (the other five GPUs' ok configs, best first, round-robin over the GPUs, then
random; ``tunedb.transfer.apps.evaluation.union_of_bests``).  The two custom strategies are
in ``benchmarks/methodology/tunedb_strategies.py`` (Kernel Tuner's ``custom_search_method_path``),
the experiment template in ``benchmarks/methodology/experiment_template.json``.

With ``--guard-off`` WarmStart also runs with the guard against misleading history off (a row
beside it, never a rival), and the report adds the per-space table (WarmStart guard on and off,
the best history-free strategy - the Kernel Tuner ones in ``--kt`` - and which, the union of
bests, at 25/50/75/100 % of the time range) and the two goals checked on it: WarmStart (guard on)
not below the best history-free strategy at those points, and, on the spaces where history helps
(the union of bests' mean score at least the best history-free one's), guard off minus guard on
at most 0.01.  Beside the methodology's time range (from 1 % to 95 % of the way the calculated
random-search baseline goes from the space's median to its optimum) the report scores the whole
range from time 0 (the methodology's own computation with a start of 0) and the first 1 % alone
(``first_part_scores``: the methodology cannot score a range in which a strategy has no result),
and gives per space and strategy the median time of the first result.  Per WarmStart run the
guard's report (``TuneResult.surrogate["guard"]``) is kept, summarised per space under
``warmstart_accounting.guard``.

Work files (gunzipped caches, T4 full-search-space files converted from them, T1 copies, DBs,
the methodology's run folder) go to a temporary directory; the aggregate plot is written under
``--out`` (default: a temporary directory) and, with ``--figure``, copied there.

    .venv/bin/python benchmarks/bench_methodology.py                 # everything (about 11 min on 2 cores)
    .venv/bin/python benchmarks/bench_methodology.py --json > benchmarks/results/methodology.json \
        --figure docs/images/methodology_aggregate.png
    .venv/bin/python benchmarks/bench_methodology.py --quick         # smoke run: 1 kernel, 2 GPUs, 3 repeats
    .venv/bin/python benchmarks/bench_methodology.py --repeats 3 --guard-off --work DIR --json \
        > benchmarks/results/methodology.json                        # the guard on and off, all 12 spaces
    .venv/bin/python benchmarks/bench_methodology.py --aggregate-only --work DIR [--kernels K --gpus G]
                                                                     # tables again from a kept run (or a part)
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
HELPERS = HERE / "methodology"
STRATEGY_FILE = HELPERS / "tunedb_strategies.py"
TEMPLATE = HELPERS / "experiment_template.json"
DATA = HERE.parent.parent / "shared" / "data" / "kernel_tuner"
KERNELS = ("convolution_milo", "dedispersion_milo")
GPUS = ("A100", "A4000", "A6000", "MI250X", "W6600", "W7800")
KT_DEFAULT = ("genetic_algorithm", "random_sample", "greedy_ils", "simulated_annealing")
WARM, UNION = "tunedb_warmstart", "union_of_bests"
#: WarmStart with the guard against misleading history off (``--guard-off``): a row beside, never a rival
NOGUARD = "tunedb_warmstart_noguard"
POINTS = (0.25, 0.5, 0.75, 1.0)
#: Kernel Tuner error strings in a cache -> T4 invalidity
INVALIDITY = {"InvalidConfig": "constraints", "CompilationFailedConfig": "compile", "RuntimeFailedConfig": "runtime"}
T0 = time.perf_counter()


def say(msg: str) -> None:
    """Progress on stderr (stdout carries the table or the JSON)."""
    print(f"[{time.perf_counter() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ inputs
def cache_to_t4(doc: dict) -> dict:
    """The T4 results document of a Kernel Tuner cache (the layout of benchmark_hub's ``*_T4``
    files: per config its parameters, the times in ms - compilation, framework, search_algorithm,
    validation and the runtimes when it ran - its invalidity and the ``time`` measurement)."""
    keys = doc["tune_params_keys"]
    results = []
    for entry in doc["cache"].values():
        t = entry.get("time")
        invalidity = INVALIDITY.get(t, "runtime") if isinstance(t, str) else "correct"
        times: dict[str, Any] = {"compilation": entry.get("compile_time", 0),
                                 "framework": entry.get("framework_time", 0),
                                 "search_algorithm": entry.get("strategy_time", 0),
                                 "validation": entry.get("verification_time", 0)}
        if "times" in entry:
            times["runtimes"] = entry["times"]
        out: dict[str, Any] = {}
        if "timestamp" in entry:
            out["timestamp"] = entry["timestamp"]
        out.update({"configuration": {k: entry[k] for k in keys}, "times": times, "invalidity": invalidity,
                    "correctness": 1 if invalidity == "correct" else 0,
                    "measurements": [{"name": "time", "value": t, "unit": ""}], "objectives": ["time"]})
        results.append(out)
    return {"metadata": {"timeunit": "milliseconds"}, "results": results, "schema_version": "1.0.0"}


def check_t4(work: Path) -> dict:
    """Compare the converted A100 convolution file with the shipped ``A100_T4.json.gz``."""
    ref_path = DATA / "convolution_milo" / "A100_T4.json.gz"
    mine_path = work / "cachefiles" / "convolution_milo" / "A100_T4.json"
    if not ref_path.is_file() or not mine_path.is_file():
        return {"checked": False}
    with gzip.open(ref_path, "rt", encoding="utf-8") as fh:
        ref = json.load(fh)["results"]
    mine = json.loads(mine_path.read_text(encoding="utf-8"))["results"]

    def by_config(rs: list[dict]) -> dict:
        return {json.dumps(r["configuration"], sort_keys=True): r for r in rs}

    a, b = by_config(ref), by_config(mine)
    same = sum(1 for k, r in a.items() if b.get(k) == r)
    return {"checked": True, "reference": str(ref_path), "results": len(a), "identical": same,
            "all_identical": same == len(a) == len(b)}


def prepare_kernels(work: Path, kernels: list[str]) -> None:
    """T1 copies for simulation: the kernel file is an empty stub and vector arguments have size
    1 (Kernel Tuner neither compiles nor runs the kernel in simulation mode; it only allocates the
    arguments, before its own timers start); parameters, restrictions and problem size are the
    original file's."""
    for kernel in kernels:
        t1 = json.loads((DATA / f"{kernel}.json").read_text(encoding="utf-8"))
        spec = t1["KernelSpecification"]
        stub = work / "kernels" / spec["KernelFile"]
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text("// stub: simulation mode replays the cache, nothing is compiled\n", encoding="utf-8")
        for arg in spec["Arguments"]:
            if arg.get("MemoryType") == "Vector":
                arg["Size"] = 1
        (work / "kernels" / f"{kernel}.json").write_text(json.dumps(t1, indent=1), encoding="utf-8")


def prepare_caches(work: Path, kernels: list[str]) -> None:
    """Gunzip every GPU's cache into ``<work>/cachefiles/<kernel>/<GPU>.json`` (Kernel Tuner replays
    it) and convert it to ``<GPU>_T4.json`` (the methodology's full-search-space file)."""
    for kernel in kernels:
        folder = work / "cachefiles" / kernel
        folder.mkdir(parents=True, exist_ok=True)
        for gpu in GPUS:
            with gzip.open(DATA / kernel / f"{gpu}.json.gz", "rb") as src, (folder / f"{gpu}.json").open("wb") as dst:
                shutil.copyfileobj(src, dst)
            doc = json.loads((folder / f"{gpu}.json").read_text(encoding="utf-8"))
            (folder / f"{gpu}_T4.json").write_text(json.dumps(cache_to_t4(doc)), encoding="utf-8")


def prepare_dbs(work: Path, cases: list[tuple[str, str]], copies: int) -> dict:
    """Per case a DB of the other five GPUs' caches, imported with tunedb's CLI, and ``copies``
    fresh copies of it for WarmStart (one per repeat)."""
    out = {}
    for kernel, held in cases:
        case = work / "dbs" / kernel / held
        files = [str(DATA / kernel / f"{g}.json.gz") for g in GPUS if g != held]
        cmd = [sys.executable, "-m", "tunedb", "--db", str(case / "base"), "--json", "import", "kernel-tuner", *files]
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"tunedb import failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")
        summary = json.loads(proc.stdout)
        out[f"{kernel}/{held}"] = {k: summary.get(k) for k in ("imported", "new", "errors", "models", "seconds")}
        (case / "copies").mkdir(parents=True)
        for i in range(copies):
            shutil.copytree(case / "base", case / "copies" / str(i))
    return out


def prepare_bests(work: Path, cases: list[tuple[str, str]]) -> None:
    """The union-of-bests order of each case (the other GPUs' ok configs, round-robin), from
    tunedb's ``union_of_bests``; the random tail is drawn by the strategy at run time."""
    from tunedb.transfer.apps.evaluation import union_of_bests
    from tunedb.transfer.measure.replay import ReplayData

    for kernel in sorted({k for k, _ in cases}):
        datas = {g: ReplayData(DATA / kernel / f"{g}.json.gz") for g in GPUS}
        for k, held in cases:
            if k != kernel:
                continue
            others: dict[str, Any] = {g: d for g, d in datas.items() if g != held}
            others[held] = SimpleNamespace(results={})  # no tail here: the strategy shuffles the rest
            order = union_of_bests(others, held, None)
            path = work / "bests" / kernel / f"{held}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(order), encoding="utf-8")


# -------------------------------------------------------------------------- experiment
def strategies_for(template: dict, kt: list[str], work: Path, guard_off: bool = False) -> list[dict]:
    """The template's strategies: the two custom ones (and, with ``guard_off``, WarmStart with the
    guard off), then the Kernel Tuner ones in ``kt``."""
    by_name = {s["name"]: s for s in template["search_strategies"]}
    if guard_off:
        by_name[NOGUARD] = dict(by_name[WARM], name=NOGUARD, search_method="TunedbWarmStartNoGuard",
                                display_name="tunedb WarmStart (guard off)")
    out = []
    for name in [WARM, *([NOGUARD] if guard_off else []), UNION, *kt]:
        s = dict(by_name.get(name) or {"name": name, "search_method": name, "autotuner": "KernelTuner",
                                        "display_name": name.replace("_", " ").title()})
        if "custom_search_method_path" in s:
            s["custom_search_method_path"] = str(STRATEGY_FILE)
            s["search_method_hyperparameters"] = [{"name": "root", "value": str(work)}]
        out.append(s)
    return out


def experiment_doc(template: dict, work: Path, kernels: list[str], gpus: list[str], strategies: list[dict],
                   repeats: int, samples: int, name: str) -> dict:
    """An experiments file (the methodology's schema) for ``kernels`` x ``gpus``."""
    doc = json.loads(json.dumps(template))
    doc["name"] = name
    doc["parent_folder"] = str(work / "experiment")
    defaults = doc["experimental_groups_defaults"]
    apps = {a["name"]: a for a in defaults["applications"]}
    defaults["applications"] = [dict(apps[k], folder=str(work / "kernels")) for k in kernels]
    defaults["gpus"] = list(gpus)
    defaults["pattern_for_full_search_space_filenames"] = {
        "regex": str(work / "cachefiles" / "${applications}" / "${gpus}_T4.json")}
    defaults["repeats"] = repeats
    defaults["samples"] = samples
    doc["search_strategies"] = strategies
    from autotuning_methodology.validators import validate_experimentsfile

    validate_experimentsfile(doc)
    return doc


def run_experiment_file(path: str) -> None:
    """(In a worker process) execute one experiments file with the methodology's runner."""
    from autotuning_methodology.experiments import execute_experiment

    execute_experiment(path, profiling=False)


def run_cases(work: Path, files: list[Path], jobs: int) -> None:
    """Execute one experiments file per case, ``jobs`` worker processes at a time (each case's
    results land in the shared run folder, where the final experiment finds them)."""
    env = dict(os.environ)
    if jobs > 1:  # one core per worker: no oversubscribed BLAS/OpenMP pools
        env.update({"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    pending = list(files)
    running: list[tuple[subprocess.Popen, Path, Any]] = []
    failed = []
    while pending or running:
        while pending and len(running) < jobs:
            f = pending.pop(0)
            logf = (work / "log" / f"{f.stem}.log").open("w", encoding="utf-8")
            p = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--run-experiment", str(f)],
                                 cwd=work, env=env, stdout=logf, stderr=subprocess.STDOUT)
            running.append((p, f, logf))
        time.sleep(0.5)
        for item in list(running):
            p, f, logf = item
            if p.poll() is None:
                continue
            logf.close()
            running.remove(item)
            if p.returncode != 0:
                failed.append(f.stem)
                tail = (work / "log" / f"{f.stem}.log").read_text(encoding="utf-8", errors="replace")[-4000:]
                say(f"case {f.stem} FAILED (rc {p.returncode}):\n{tail}")
            else:
                say(f"case {f.stem} done")
    if failed:
        raise RuntimeError(f"cases failed: {failed}; logs in {work / 'log'}")


# ---------------------------------------------------------------------------- analysis
def at_points(curve: Any) -> dict[str, float]:
    """The curve's values at POINTS of the time range and its mean (the aggregate score)."""
    n = len(curve)
    out = {f"{round(p * 100)}%": float(curve[min(round(p * (n - 1)), n - 1)]) for p in POINTS}
    out["mean"] = float(sum(curve) / n)
    return out


def own_time(results_description: Any, key_names: list[str]) -> dict[str, float]:
    """Mean seconds per run of the strategy's own time (``search_algorithm``) and Kernel Tuner's
    ``framework`` time, and the run's total time, from the methodology's stored results."""
    import numpy as np

    res = results_description.get_results()
    per_key = res.objective_time_results_per_key  # (keys, evaluations, repeats)
    out = {}
    for key in ("search_algorithm", "framework"):
        if key in key_names:
            out[f"{key}_s"] = float(np.mean(np.nansum(per_key[key_names.index(key)], axis=0)))
    totals = np.nanmax(res.objective_time_results, axis=0)
    out["run_total_s"] = float(np.nanmean(totals))
    out["evaluations"] = float(np.mean(np.sum(~np.isnan(res.fevals_results), axis=0)))
    return out


def analyse(work: Path, experiment_file: Path, out: Path, seed: int = 0) -> dict:
    """The methodology's visualisation (aggregate plot) and aggregation of the finished
    experiment; scores at POINTS, per case and aggregated.  The methodology fits its curves with
    bootstrap bagging drawn from numpy's global generator, which is seeded with ``seed`` first, so
    the same run and seed give the same numbers."""
    import matplotlib
    import matplotlib.cm
    import numpy as np

    np.random.seed(seed)
    matplotlib.use("Agg")
    if not hasattr(matplotlib.cm, "get_cmap"):  # gone in matplotlib 3.9; autotuning_methodology 1.1 imports it
        matplotlib.cm.get_cmap = matplotlib.colormaps.get_cmap
    from autotuning_methodology.report_experiments import (
        get_aggregation_data,
        get_aggregation_data_key,
        get_strategies_aggregated_performance,
    )
    from autotuning_methodology.visualize_experiments import Visualize

    buf = io.StringIO()
    with contextlib.chdir(work), contextlib.redirect_stdout(buf):
        vis = Visualize(str(experiment_file), save_figs=True)
    (work / "log" / "visualize.log").write_text(buf.getvalue(), encoding="utf-8")
    exp = vis.experiment
    stats = exp["statistics_settings"]
    vset = exp["visualization_settings"]
    cl = vset["confidence_level"]
    with contextlib.chdir(work), contextlib.redirect_stdout(io.StringIO()):
        agg_data = get_aggregation_data(exp["parent_folder_absolute_path"], exp, vis.searchspace_statistics,
                                        vis.strategies, vis.results_descriptions, stats["cutoff_percentile"],
                                        stats["cutoff_percentile_start"], cl, vset["resolution"])
        perf, lo, hi, stop = get_strategies_aggregated_performance(list(agg_data.values()), cl)
    names = [s["name"] for s in vis.strategies]
    display = {s["name"]: s["display_name"] for s in vis.strategies}
    key_names = list(stats["objective_time_keys"])
    aggregate = {}
    for i, name in enumerate(names):
        aggregate[name] = {"display_name": display[name], **at_points(perf[i]),
                           "ci_low": at_points(lo[i]), "ci_high": at_points(hi[i]),
                           "real_stopping_point_fraction": float(stop[i])}
    curves = {name: np.asarray(perf[i]) for i, name in enumerate(names)}
    per_case: dict[str, dict] = {}
    gpus = exp["experimental_groups_defaults"]["gpus"]
    for kernel in exp["experimental_groups_defaults"]["applications_names"]:
        for gpu in gpus:
            key = get_aggregation_data_key(gpu_name=gpu, application_name=kernel)
            with contextlib.redirect_stdout(io.StringIO()):
                p, _, _, s = get_strategies_aggregated_performance([agg_data[key]], cl)
            group = next(g for g in vis.all_experimental_groups if g["gpu"] == gpu and g["application_name"] == kernel)
            case = {"time_limit_s": float(group["budget"]["time_limit"]),
                    "time_range_s": [float(group["cutoff_times"]["cutoff_time_start"]),
                                     float(group["cutoff_times"]["cutoff_time"] / 1.1)],
                    "strategies": {}}
            for i, name in enumerate(names):
                rd = vis.results_descriptions[gpu][kernel][name]
                case["strategies"][name] = {**at_points(p[i]), "real_stopping_point_fraction": float(s[i]),
                                            **own_time(rd, key_names)}
            per_case.setdefault(kernel, {})[gpu] = case
    ranges = {"whole": range_scores(work, exp, vis, 0.0, stats["cutoff_percentile"]),
              "first": first_part_scores(exp, vis, agg_data, int(vset["resolution"]))}
    ranges["whole"]["cutoff_percentiles"] = [0.0, stats["cutoff_percentile"]]
    for rname in ranges:
        for kernel, by_gpu in per_case.items():
            for gpu, case in by_gpu.items():
                rcase = ranges[rname]["per_case"][kernel][gpu]
                case[f"time_range_{rname}_s"] = rcase["time_range_s"]
                for name, mean in rcase["means"].items():
                    case["strategies"][name][f"mean_{rname}"] = mean
                    for extra in ("first_result_s", "repeats_with_result"):
                        if extra in rcase:
                            case["strategies"][name][extra] = rcase[extra][name]
    png = vis.plot_filename_prefix / "aggregated.png"
    out.mkdir(parents=True, exist_ok=True)
    figure = out / "methodology_aggregate.png"
    if png.is_file():
        shutil.copyfile(png, figure)
    return {"aggregate": aggregate, "per_case": per_case, "curves": curves, "figure": str(figure),
            "objective_time_keys": key_names,
            "ranges": {r: {k: v for k, v in d.items() if k != "per_case"} for r, d in ranges.items()}}


def step_curve(times: Any, values: Any, grid: Any) -> Any:
    """One run's best objective found by each time of ``grid`` (NaN before its first valid
    result): ``times`` are the run's cumulative seconds at each evaluation, ``values`` its
    objective values (NaN for invalid configs)."""
    import numpy as np

    ok = ~(np.isnan(times) | np.isnan(values))
    t, v = times[ok], values[ok]
    order = np.argsort(t, kind="stable")
    t, best = t[order], np.minimum.accumulate(v[order]) if v.size else v
    idx = np.searchsorted(t, grid, side="right") - 1
    out = np.full(grid.shape, np.nan)
    out[idx >= 0] = best[idx[idx >= 0]]
    return out


def first_part_scores(exp: dict, vis: Any, agg_data: dict, resolution: int) -> dict:
    """The score over the first 1 % (from time 0 to the start of the experiment's time range),
    which the methodology leaves out and cannot score (its curves need results inside the range,
    and before a strategy's first result they hold its first value).  Per repeat the best
    objective found so far by each time (a step function), standardised against the same
    calculated random-search baseline as the methodology's score (0 = baseline, 1 = optimum); a
    repeat with no result yet counts 0 (no better than the baseline's first draw), then mean over
    repeats, and over search spaces for the aggregate.  Also per case and strategy the median time
    (s) of the first result and the share of repeats with a result by the end of the range."""
    import numpy as np
    from autotuning_methodology.report_experiments import get_aggregation_data_key

    names = [s["name"] for s in vis.strategies]
    display = {s["name"]: s["display_name"] for s in vis.strategies}
    per_case: dict[str, dict] = {}
    case_curves: dict[str, list] = {n: [] for n in names}
    for kernel in exp["experimental_groups_defaults"]["applications_names"]:
        for gpu in exp["experimental_groups_defaults"]["gpus"]:
            baseline, _, _, time_range, _ = agg_data[get_aggregation_data_key(gpu_name=gpu, application_name=kernel)]
            grid = np.linspace(0.0, float(time_range[0]), resolution)
            means, first, share = {}, {}, {}
            for name in names:
                res = vis.results_descriptions[gpu][kernel][name].get_results()
                times, values = res.objective_time_results, res.objective_performance_results
                scores, firsts = [], []
                for r in range(times.shape[1]):
                    curve = step_curve(times[:, r], values[:, r], grid)
                    scores.append(np.nan_to_num(baseline.get_standardised_curves(grid, [curve], x_type="time")[0],
                                                nan=0.0))
                    ok = ~(np.isnan(times[:, r]) | np.isnan(values[:, r]))
                    firsts.append(float(np.min(times[ok, r])) if ok.any() else float("inf"))
                curve = np.mean(scores, axis=0)
                case_curves[name].append(curve)
                means[name] = float(np.mean(curve))
                first[name] = float(np.median(firsts))
                share[name] = float(np.mean(np.asarray(firsts) <= grid[-1]))
            per_case.setdefault(kernel, {})[gpu] = {"time_range_s": [0.0, float(grid[-1])], "means": means,
                                                    "first_result_s": first, "repeats_with_result": share}
    curves = {n: np.mean(case_curves[n], axis=0) for n in names}
    return {"aggregate": {n: {"display_name": display[n], **at_points(curves[n])} for n in names},
            "curves": curves, "per_case": per_case, "cutoff_percentiles": [0.0, exp["statistics_settings"][
                "cutoff_percentile_start"]]}


def range_scores(work: Path, exp: dict, vis: Any, start: float, end: float) -> dict:
    """The methodology's aggregate score over another time range than the experiment's: from the
    time the random-search baseline needs to get ``start`` of the way from the space's median to
    its optimum up to the time it needs for ``end`` (``start`` 0 means from time 0).  Per strategy
    the values at POINTS of that range and the mean (the aggregate score over it), its curve, and
    per case each strategy's mean and the range in seconds."""
    import numpy as np
    from autotuning_methodology.report_experiments import (
        get_aggregation_data,
        get_aggregation_data_key,
        get_strategies_aggregated_performance,
    )

    vset = exp["visualization_settings"]
    cl = vset["confidence_level"]
    with contextlib.chdir(work), contextlib.redirect_stdout(io.StringIO()):
        agg_data = get_aggregation_data(exp["parent_folder_absolute_path"], exp, vis.searchspace_statistics,
                                        vis.strategies, vis.results_descriptions, end, start, cl,
                                        vset["resolution"])
        perf, _, _, _ = get_strategies_aggregated_performance(list(agg_data.values()), cl)
    names = [s["name"] for s in vis.strategies]
    display = {s["name"]: s["display_name"] for s in vis.strategies}
    aggregate = {name: {"display_name": display[name], **at_points(perf[i])} for i, name in enumerate(names)}
    per_case: dict[str, dict] = {}
    for kernel in exp["experimental_groups_defaults"]["applications_names"]:
        for gpu in exp["experimental_groups_defaults"]["gpus"]:
            data = agg_data[get_aggregation_data_key(gpu_name=gpu, application_name=kernel)]
            with contextlib.redirect_stdout(io.StringIO()):
                p, _, _, _ = get_strategies_aggregated_performance([data], cl)
            time_range = data[3]
            per_case.setdefault(kernel, {})[gpu] = {
                "time_range_s": [float(time_range[0]), float(time_range[-1])],
                "means": {name: float(np.mean(p[i])) for i, name in enumerate(names)}}
    return {"aggregate": aggregate, "curves": {name: np.asarray(perf[i]) for i, name in enumerate(names)},
            "per_case": per_case}


def goal(result: dict) -> dict:
    """Is WarmStart's aggregate score the highest at every point (and in the mean)?  With the
    margin to the best other strategy, the share of the resolution's points where it is highest,
    and, where it is not, the cases that beat it."""
    import numpy as np

    agg = result["aggregate"]
    others = [n for n in agg if n not in (WARM, NOGUARD)]
    points = {}
    for p in [*(f"{round(x * 100)}%" for x in POINTS), "mean"]:
        best = max(others, key=lambda n: agg[n][p])
        points[p] = {"warmstart": agg[WARM][p], "best_other": best, "best_other_score": agg[best][p],
                     "margin": agg[WARM][p] - agg[best][p], "holds": agg[WARM][p] > agg[best][p]}
    curves = result["curves"]
    ws = curves[WARM]
    rival = np.max(np.vstack([curves[n] for n in others]), axis=0)
    lead = ws > rival
    lost_at = [i / (len(ws) - 1) for i in np.flatnonzero(~lead)]
    out = {"statement": "WarmStart's aggregate score is the highest at every point of the time budget, "
                        "with its own overhead counted",
           "holds": bool(all(v["holds"] for v in points.values()) and lead.all()),
           "points": points, "highest_at_fraction_of_range": float(lead.mean()),
           "min_margin_over_range": float((ws - rival).min()),
           "lost_range": [min(lost_at), max(lost_at)] if lost_at else None}
    losses = []
    for kernel, by_gpu in result["per_case"].items():
        for gpu, case in by_gpu.items():
            st = case["strategies"]
            for p in [*(f"{round(x * 100)}%" for x in POINTS), "mean"]:
                best = max((n for n in st if n not in (WARM, NOGUARD)), key=lambda n: st[n][p])
                if st[best][p] >= st[WARM][p]:
                    phase = "mean" if p == "mean" else ("early" if float(p[:-1]) <= 50 else "late")
                    losses.append({"kernel": kernel, "gpu": gpu, "point": p, "phase": phase, "winner": best,
                                   "warmstart": st[WARM][p], "winner_score": st[best][p],
                                   "deficit": st[best][p] - st[WARM][p]})
    out["case_losses"] = losses
    return out


def guard_table(result: dict, kt: list[str]) -> list[dict]:
    """Per search space and point of the time range: WarmStart (guard on), WarmStart with the
    guard off (when run), the best history-free strategy (the Kernel Tuner ones in ``kt``) and
    the union of bests; ``holds`` when WarmStart (guard on) scores at least the best
    history-free strategy."""
    rows = []
    for kernel, by_gpu in result["per_case"].items():
        for gpu, case in by_gpu.items():
            st = case["strategies"]
            free = [n for n in kt if n in st]
            for p in (f"{round(x * 100)}%" for x in POINTS):
                best = max(free, key=lambda n: st[n][p]) if free else None
                row = {"kernel": kernel, "gpu": gpu, "point": p, "warmstart": st[WARM][p],
                       "guard_off": st[NOGUARD][p] if NOGUARD in st else None,
                       "best_history_free": best, "best_history_free_score": st[best][p] if best else None,
                       "union_of_bests": st[UNION][p] if UNION in st else None}
                row["holds"] = best is None or row["warmstart"] >= row["best_history_free_score"]
                rows.append(row)
    return rows


def lead_over(curves: dict, rivals: list[str], strict: bool) -> dict:
    """Where WarmStart's curve is above (``strict``) or at least at (not ``strict``) the highest of
    the ``rivals``' curves: the share of the range's points, the smallest margin, and the first
    and last fraction of the range where it is not."""
    import numpy as np

    ws = curves[WARM]
    stack = np.vstack([curves[n] for n in rivals])
    rival = stack.max(axis=0)
    lead = ws > rival if strict else ws >= rival
    lost = np.flatnonzero(~lead) / (len(ws) - 1)
    worst = int(np.argmin(ws - rival))
    return {"fraction": float(lead.mean()), "min_margin": float((ws - rival).min()),
            "min_margin_at_fraction": worst / (len(ws) - 1), "rival_at_min": rivals[int(np.argmax(stack[:, worst]))],
            "lost_range": [float(lost.min()), float(lost.max())] if lost.size else None}


def range_summaries(result: dict, kt: list[str]) -> dict:
    """Per extra time range (``whole``: from time 0; ``first``: from time 0 to the start of the
    experiment's range), WarmStart against every other strategy (highest, strictly) and against the
    best history-free one (not below).  Removes the curves."""
    out = {}
    for rname, rng in result["ranges"].items():
        curves = rng.pop("curves")
        others = [n for n in curves if n not in (WARM, NOGUARD)]
        free = [n for n in kt if n in curves]
        out[rname] = {"highest": lead_over(curves, others, strict=True),
                      "not_below_history_free": lead_over(curves, free, strict=False) if free else None}
    return out


def guard_goals(rows: list[dict], per_case: dict, kt: list[str], tolerance: float = 0.01) -> dict:
    """The two goals of the guard, per search space.

    ``not_below_history_free``: WarmStart (guard on) scores at least the best history-free strategy
    at each of POINTS.  ``guard_cost``: on the spaces where history helps (the union of bests' mean
    score over the range is at least the best history-free strategy's), guard off minus guard on
    at each of POINTS and in the mean is at most ``tolerance`` (score units).  Needs the guard-off
    row for the second."""
    spaces: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        spaces.setdefault((r["kernel"], r["gpu"]), []).append(r)
    free_fail = [{"kernel": k, "gpu": g, "points": [r["point"] for r in rs if not r["holds"]],
                  "max_deficit": max(r["best_history_free_score"] - r["warmstart"] for r in rs if not r["holds"])}
                 for (k, g), rs in spaces.items() if not all(r["holds"] for r in rs)]
    out: dict[str, Any] = {"not_below_history_free": {
        "spaces": len(spaces), "met_on": len(spaces) - len(free_fail), "failures": free_fail}}
    costs = []
    for (k, g), rs in spaces.items():
        st = per_case[k][g]["strategies"]
        if NOGUARD not in st:
            continue
        free = [n for n in kt if n in st]
        best_free = max(free, key=lambda n: st[n]["mean"])
        helps = UNION in st and st[UNION]["mean"] >= st[best_free]["mean"]
        cost = {p: st[NOGUARD][p] - st[WARM][p] for p in [*(r["point"] for r in rs), "mean"]}
        costs.append({"kernel": k, "gpu": g, "history_helps": helps, "union_mean": st.get(UNION, {}).get("mean"),
                      "best_history_free": best_free, "best_history_free_mean": st[best_free]["mean"],
                      "cost": cost, "max_cost": max(cost.values()),
                      "met": (not helps) or max(cost.values()) <= tolerance})
    if costs:
        helped = [c for c in costs if c["history_helps"]]
        out["guard_cost"] = {"tolerance": tolerance, "spaces_history_helps": len(helped),
                             "met_on": sum(c["met"] for c in helped), "per_space": costs}
    return out


def format_guard_table(rows: list[dict]) -> str:
    """The per-space table of ``guard_table`` as text."""
    lines = [f"{'kernel':<18}{'GPU':<8}{'point':>6}{'guard on':>10}{'guard off':>10}{'best free':>10}  "
             f"{'(strategy)':<20}{'union':>7}"]
    for r in rows:
        off = "" if r["guard_off"] is None else f"{r['guard_off']:.3f}"
        free = "" if r["best_history_free_score"] is None else f"{r['best_history_free_score']:.3f}"
        uni = "" if r["union_of_bests"] is None else f"{r['union_of_bests']:.3f}"
        lines.append(f"{r['kernel']:<18}{r['gpu']:<8}{r['point']:>6}{r['warmstart']:10.3f}{off:>10}{free:>10}  "
                     f"{(r['best_history_free'] or ''):<20}{uni:>7}" + ("" if r["holds"] else "  LOSES"))
    return "\n".join(lines)


def warmstart_accounting(work: Path) -> dict:
    """From the strategy's log: WarmStart's wall time per run beside the strategy time Kernel Tuner
    attributed to its evaluations (what the methodology counts), DB answers, device names."""
    every = []
    for f in sorted((work / "log").glob("warmstart-*.jsonl")):
        every += [json.loads(x) for x in f.read_text(encoding="utf-8").splitlines() if x.strip()]
    lines = [x for x in every if x.get("variant", "TunedbWarmStart") == "TunedbWarmStart"]  # guard on
    if not lines:
        return {"runs": 0}
    wall = sum(x["warmstart_wall_s"] or 0 for x in lines)
    strat = sum(x["strategy_time_s"] for x in lines)
    targets: dict[str, set] = {}
    for x in lines:
        targets.setdefault(f"{x['kernel']}/{x['gpu']}", set()).add(x["target"])
    return {"runs": len(lines), "mean_wall_s": wall / len(lines), "mean_strategy_time_s": strat / len(lines),
            "counted_fraction": strat / wall if wall else None,
            "max_uncounted_s": max((x["warmstart_wall_s"] or 0) - x["strategy_time_s"] for x in lines),
            "db_answers": sum(x["db_answers"] or 0 for x in lines),
            "kt_fevals_mean": sum(x["kt_fevals"] or 0 for x in lines) / len(lines),
            "stopped_by": sorted({x["stopped_by"] for x in lines}),
            "targets": {k: sorted(v) for k, v in targets.items()},
            "guard": guard_reports(lines)}


def guard_reports(lines: list[dict]) -> dict:
    """Per case, what the guard reported at the end of each WarmStart run (guard on): the share of
    each round given to its explorer, the rank agreement ``rho`` between history and this device,
    whether it fired (share reached 0.5), the best time (s) each arm found, and the evaluation
    count at which it first fired; the last two rounds of the trace of the first run."""
    out: dict[str, dict] = {}
    for x in sorted(lines, key=lambda x: (x["kernel"], x["gpu"], x.get("seed", x["copy"]))):
        g = x.get("guard")
        if not g:
            continue
        trace = g.get("trace") or []
        fired_at = next((t[0] for t in trace if t[-1] >= 0.5), None)
        case = out.setdefault(f"{x['kernel']}/{x['gpu']}", {"runs": []})
        case["runs"].append({"seed": x.get("seed", x["copy"]), "rho": g.get("rho"), "share": g.get("share"), "fired": g.get("fired"),
                             "fired_at_evaluation": fired_at, "rounds": len(trace),
                             "explorer_best_s": g.get("explorer_best"), "history_best_s": g.get("history_best")})
        case.setdefault("trace_head", trace[:3])
    return out


def machine() -> dict:
    """The CPU this ran on (the device times are replayed GPU measurements)."""
    model = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(), "system": platform.system()}


def versions() -> dict:
    from importlib.metadata import version

    return {p: version(p) for p in ("autotuning_methodology", "kernel_tuner", "tunedb")}


# ------------------------------------------------------------------------------ output
def table(result: dict) -> str:
    """The plain-text report."""
    s = result["settings"]
    agg = result["aggregate"]
    cols = [f"{round(p * 100)}%" for p in POINTS] + ["mean"]
    lines = [f"Autotuning methodology (autotuning_methodology {result['versions']['autotuning_methodology']}, "
             f"Kernel Tuner {result['versions']['kernel_tuner']}): leave-one-GPU-out",
             f"kernels {', '.join(s['kernels'])}; held-out GPUs {', '.join(s['gpus'])}; repeats {s['repeats']} "
             f"(methodology default 25), samples {s['samples']}; {s['jobs']} worker(s); "
             f"{result['machine']['cores']} cores, {result['machine']['cpu']}",
             "",
             "Aggregate score (0 = random-search baseline, 1 = absolute optimum) at fractions of the time range; "
             "own = mean strategy time per run (s)",
             f"{'strategy':<22}" + "".join(f"{c:>8}" for c in cols) + f"{'own s':>8}"]
    order = sorted(agg, key=lambda n: -agg[n]["mean"])
    for name in order:
        own = [c["strategies"][name].get("search_algorithm_s", 0.0) for k in result["per_case"].values()
               for c in k.values()]
        lines.append(f"{agg[name]['display_name']:<22}" + "".join(f"{agg[name][c]:8.3f}" for c in cols)
                     + f"{sum(own) / max(len(own), 1):8.2f}")
    g = result["goal"]
    lines += ["", f"Goal: {g['statement']}: {'HOLDS' if g['holds'] else 'DOES NOT HOLD'}"]
    for p, v in g["points"].items():
        lines.append(f"  {p:>5}: WarmStart {v['warmstart']:.3f} vs {agg[v['best_other']]['display_name']} "
                     f"{v['best_other_score']:.3f}: {v['margin']:+.3f} {'ok' if v['holds'] else 'LOSES'}")
    lines.append(f"  highest at {g['highest_at_fraction_of_range'] * 100:.1f}% of the time range's points; "
                 f"smallest margin {g['min_margin_over_range']:+.3f}"
                 + (f"; not highest between {g['lost_range'][0]:.3f} and {g['lost_range'][1]:.3f} of the range"
                    if g["lost_range"] else ""))
    if g["case_losses"]:
        lines.append("  cases where another strategy scores at least WarmStart's:")
        for x in g["case_losses"]:
            lines.append(f"    {x['kernel']:<18} {x['gpu']:<7} {x['point']:>5} ({x['phase']}): "
                         f"{agg[x['winner']]['display_name']} {x['winner_score']:.3f} vs {x['warmstart']:.3f} "
                         f"(-{x['deficit']:.3f})")
    labels = {"whole": "the whole time range (from 0 s to its end)",
              "first": "the first 1 % (from 0 s to the start of the range above)"}
    for rname, rng in result.get("ranges", {}).items():
        ragg = rng["aggregate"]
        lines += ["", f"Aggregate score over {labels.get(rname, rname)}",
                  f"{'strategy':<22}" + "".join(f"{c:>8}" for c in cols)]
        for name in sorted(ragg, key=lambda n: -ragg[n]["mean"]):
            lines.append(f"{ragg[name]['display_name']:<22}" + "".join(f"{ragg[name][c]:8.3f}" for c in cols))
        summ = result["range_summaries"][rname]
        for what, label in (("highest", "highest of all"), ("not_below_history_free",
                                                            "not below the best history-free strategy")):
            x = summ.get(what)
            if x:
                lines.append(f"  WarmStart {label} at {x['fraction'] * 100:.1f}% of its points; smallest margin "
                             f"{x['min_margin']:+.3f} (at {x['min_margin_at_fraction'] * 100:.1f}%, "
                             f"{ragg[x['rival_at_min']]['display_name']})"
                             + (f"; not between {x['lost_range'][0] * 100:.1f}% and {x['lost_range'][1] * 100:.1f}%"
                                if x["lost_range"] else ""))
    if result.get("guard_table"):
        lines += ["", "Per search space: WarmStart (guard on / off) vs the best history-free strategy "
                      "and the union of bests, at fractions of the time range",
                  format_guard_table(result["guard_table"])]
        gg = result["guard_goals"]
        nb = gg["not_below_history_free"]
        lines.append(f"WarmStart (guard on) not below the best history-free strategy at 25/50/75/100 %: "
                     f"{nb['met_on']} of {nb['spaces']} spaces"
                     + "".join(f"; not on {f['kernel']} {f['gpu']} at {', '.join(f['points'])} "
                               f"(by up to {f['max_deficit']:.3f})" for f in nb["failures"]))
        gc = gg.get("guard_cost")
        if gc:
            lines.append(f"Guard's cost (guard off - guard on) at most {gc['tolerance']} where history helps "
                         f"(union of bests' mean >= best history-free mean): {gc['met_on']} of "
                         f"{gc['spaces_history_helps']} spaces")
            for c in gc["per_space"]:
                lines.append(f"  {c['kernel']:<18}{c['gpu']:<8}{'helps' if c['history_helps'] else 'misleads':<9}"
                             + "".join(f"{p:>6} {v:+.3f}" for p, v in c["cost"].items())
                             + ("" if c["met"] else "  OVER"))
    lines += ["", "Per kernel / held-out GPU: mean score over the time range (time limit s)"]
    lines.append(f"{'kernel':<18}{'GPU':<8}{'limit':>7}" + "".join(f"{agg[n]['display_name'][:12]:>13}"
                                                            for n in order))
    for kernel, by_gpu in result["per_case"].items():
        for gpu, case in by_gpu.items():
            lines.append(f"{kernel:<18}{gpu:<8}{case['time_limit_s']:7.0f}"
                         + "".join(f"{case['strategies'][n]['mean']:13.3f}" for n in order))
    a = result["warmstart_accounting"]
    if a.get("runs"):
        lines += ["", f"WarmStart time accounting: {a['runs']} runs; WarmStart.tune wall {a['mean_wall_s']:.2f} s "
                      f"per run, of which Kernel Tuner counted {a['mean_strategy_time_s']:.2f} s as strategy time "
                      f"({a['counted_fraction'] * 100:.1f}%; the rest is its work after the last evaluation, "
                      f"at most {a['max_uncounted_s']:.2f} s); DB answers {a['db_answers']}; "
                      f"{a['kt_fevals_mean']:.0f} Kernel Tuner fevals per run"]
    t4 = result["t4_check"]
    if t4.get("checked"):
        lines.append(f"T4 conversion check: {t4['identical']}/{t4['results']} results identical to "
                     f"{Path(t4['reference']).name}")
    lines += [f"Figure: {result['figure']}", f"Wall time: {result['wall_s']:.0f} s"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", default=",".join(KERNELS), help="comma-separated kernels (default: both)")
    ap.add_argument("--gpus", default=",".join(GPUS), help="comma-separated held-out GPUs (default: all 6)")
    ap.add_argument("--kt", default=",".join(KT_DEFAULT), help="comma-separated Kernel Tuner strategies")
    ap.add_argument("--repeats", type=int, default=None, help="methodology repeats per strategy and case (10)")
    ap.add_argument("--samples", type=int, default=32, help="methodology samples (Kernel Tuner iterations)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="cases run in parallel")
    ap.add_argument("--out", default=None, help="folder for the plot (default: a temporary folder)")
    ap.add_argument("--figure", default=None, help="also copy the aggregate plot (PNG) to this path")
    ap.add_argument("--work", default=None, help="work folder (default: a temporary one, removed at the end)")
    ap.add_argument("--keep-work", action="store_true", help="keep the temporary work folder")
    ap.add_argument("--quick", action="store_true", help="smoke run: convolution_milo, A100 and W6600, 3 repeats")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--guard-off", action="store_true",
                    help="also run WarmStart with the guard against misleading history off (a row, not a rival)")
    ap.add_argument("--aggregate-only", action="store_true",
                    help="only aggregate the finished run kept in --work (with --kernels/--gpus: a part of it)")
    ap.add_argument("--seed", type=int, default=0,
                    help="seed of the methodology's bootstrap when it fits the curves (aggregation only)")
    ap.add_argument("--run-experiment", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run_experiment:
        run_experiment_file(args.run_experiment)
        return 0
    if args.quick:
        args.kernels, args.gpus = "convolution_milo", "A100,W6600"
        args.repeats = args.repeats or 3
    repeats = args.repeats or 10
    kernels = [k for k in args.kernels.split(",") if k]
    gpus = [g for g in args.gpus.split(",") if g]
    kt = [s for s in args.kt.split(",") if s]
    bad = [k for k in kernels if k not in KERNELS] + [g for g in gpus if g not in GPUS]
    if bad:
        ap.error(f"unknown kernel/GPU {bad}; kernels {KERNELS}, GPUs {GPUS}")
    from kernel_tuner.interface import strategy_map

    if [s for s in kt if s not in strategy_map]:
        ap.error(f"unknown Kernel Tuner strategy in {kt}")
    gpus = [g for g in GPUS if g in gpus]  # the methodology's order
    cases = [(k, g) for k in kernels for g in gpus]

    if args.aggregate_only and not (args.work and (Path(args.work) / "experiment.json").is_file()):
        ap.error("--aggregate-only needs --work with a finished run (its experiment.json)")
    made_work = args.work is None
    work = Path(args.work or tempfile.mkdtemp(prefix="tunedb-methodology-")).resolve()
    if "_T4" in str(work):  # the methodology derives the cache path by deleting "_T4" from the T4 path
        ap.error("the work folder's path must not contain '_T4'")
    out = Path(args.out or tempfile.mkdtemp(prefix="tunedb-methodology-out-")).resolve()
    (work / "log").mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    say(f"work folder {work}")
    try:
        full = work / "experiment.json"
        if args.aggregate_only:
            full_doc = json.loads(full.read_text(encoding="utf-8"))
            ran = full_doc["experimental_groups_defaults"]
            repeats = ran["repeats"]
            if (kernels, gpus) != ([a["name"] for a in ran["applications"]], ran["gpus"]):
                # a part of the finished run (--kernels/--gpus): the same strategies and results
                full_doc = experiment_doc(full_doc, work, kernels, gpus, full_doc["search_strategies"],
                                          ran["repeats"], ran["samples"], full_doc["name"])
                full = work / "experiment_part.json"
                full.write_text(json.dumps(full_doc, indent=1), encoding="utf-8")
            t4 = check_t4(work)
            imports = json.loads((work / "imports.json").read_text(encoding="utf-8"))
        else:
            prepare_kernels(work, kernels)
            prepare_caches(work, kernels)
            say("caches gunzipped and converted to T4")
            t4 = check_t4(work)
            copies = repeats * (2 if args.guard_off else 1) + 2
            imports = prepare_dbs(work, cases, copies)
            (work / "imports.json").write_text(json.dumps(imports), encoding="utf-8")
            say(f"{len(cases)} DBs imported with the tunedb CLI, {copies} copies each")
            prepare_bests(work, cases)
            template = json.loads(TEMPLATE.read_text(encoding="utf-8"))
            strategies = strategies_for(template, kt, work, args.guard_off)
            files = []
            big_first = sorted(cases, key=lambda c: (c[0] != "dedispersion_milo", GPUS.index(c[1])))
            for kernel, gpu in big_first:
                f = work / f"case_{kernel}_{gpu}.json"
                doc = experiment_doc(template, work, [kernel], [gpu], strategies, repeats, args.samples, f.stem)
                f.write_text(json.dumps(doc, indent=1), encoding="utf-8")
                files.append(f)
            full = work / "experiment.json"
            full_doc = experiment_doc(template, work, kernels, gpus, strategies, repeats, args.samples,
                                      "tunedb_leave_one_gpu_out")
            full.write_text(json.dumps(full_doc, indent=1), encoding="utf-8")
            shutil.copyfile(full, out / "experiment.json")
            say(f"running {len(files)} cases x {len(strategies)} strategies x {repeats} repeats, {args.jobs} at a time")
            run_cases(work, files, max(1, args.jobs))
        say("aggregating (the methodology's Visualize)")
        result = analyse(work, full, out, args.seed)
        result["goal"] = goal(result)
        result["guard_table"] = guard_table(result, kt)
        result["guard_goals"] = guard_goals(result["guard_table"], result["per_case"], kt)
        result["range_summaries"] = range_summaries(result, kt)
        result["warmstart_accounting"] = warmstart_accounting(work)
        result.pop("curves")
        if args.figure:
            Path(args.figure).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(result["figure"], args.figure)
            result["figure_copy"] = str(args.figure)
        result.update({"settings": {"kernels": kernels, "gpus": gpus, "kt": kt, "repeats": repeats,
                                    "samples": args.samples, "jobs": args.jobs, "quick": args.quick,
                                    "aggregation_seed": args.seed,
                                    "statistics_settings": full_doc["statistics_settings"],
                                    "resolution": full_doc["visualization_settings"]["resolution"]},
                       "machine": machine(), "versions": versions(), "t4_check": t4, "imports": imports,
                       "wall_s": time.perf_counter() - T0})
    finally:
        if made_work and not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=1, default=str))
    else:
        print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
