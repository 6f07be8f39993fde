"""``tunedb report``: real DB (imported Kernel Tuner data + replayed tuning runs), real subprocess."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import tunedb
from tunedb.datasets import convolution_files, dataset_path
from tunedb.index import ParquetStore
from tunedb.transfer.apps.entries import entry_curves
from tunedb.transfer.apps.gain_fit import fit_saturation, gain_model, saturation, saturation_fit_reason
from tunedb.transfer.apps.report import build_report
from tunedb.transfer.apps.rundata import load_runs
from tunedb.transfer.interop import collect
from tunedb.transfer.measure.replay import KernelTunerReplayBackend, ReplayData
from tunedb.transfer.search.tuner import TuneOptions, Tuner

from helpers import run_cli

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ALL_FIGURES = {"warm_vs_cold.png", "convergence.png", "hit_rate.png", "records_over_time.png",
               "records_per_target.png", "saturation.png", "similarity.png"}


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> tuple[Path, Path, list[dict]]:
    """A DB with two GPUs' imported convolution records, two TopHub GPUs, and replayed warm/cold
    tuning runs on a third GPU (run outputs saved as JSON lines, the way `tunedb tune --json` writes them)."""
    base = tmp_path_factory.mktemp("report")
    db = ParquetStore.open(base / "db")
    files = convolution_files()
    recs, rep = collect("kernel-tuner", [files["A100"], files["W6600"]])
    assert rep.imported == len(recs) > 8000
    db.commit(recs)
    tvm, _ = collect("autotvm", [dataset_path("tophub", "llvm_v0.04.log")])
    db.commit(tvm)
    data = ReplayData(files["A4000"])
    backend = KernelTunerReplayBackend(data)
    outs = []
    for cold, label in ((False, "warm"), (True, "cold"), (False, "warm rerun")):
        res = Tuner(db, data.target, data.workload, data.space, backend,
                    TuneOptions(budget=10, seed=0, cold=cold, patience=10_000)).run()
        d = res.to_json()
        d["label"] = label
        outs.append(d)
    runs = base / "runs.jsonl"
    runs.write_text("".join(json.dumps(o) + "\n" for o in outs))
    return base / "db", runs, outs


def test_report_writes_every_file_and_references_it(filled, tmp_path):
    db, runs, outs = filled
    out = tmp_path / "site"
    p = run_cli("report", "--db", str(db), "--out", str(out), "--runs", str(runs), "--json", timeout=300)
    assert p.returncode == 0, p.stderr
    payload = json.loads(p.stdout)
    assert payload["out"] == str(out)
    files = payload["files"]
    assert files[0] == "index.html" and set(files[1:]) == ALL_FIGURES
    page = (out / "index.html").read_text(encoding="utf-8")
    for name in files[1:]:
        blob = (out / name).read_bytes()
        assert blob[:8] == PNG_MAGIC and len(blob) > 2000, name
        assert f'src="{name}"' in page
    assert not re.search(r"https?://", page), "the page must open without network"
    assert "<script" not in page
    # the hit-rate table holds the runs' real counts: the rerun found everything in the DB
    rerun = outs[2]
    assert rerun["cache_hits"] == rerun["evaluations"] == 10
    assert re.search(r"warm rerun[^<]*</td><td class=\"num\">10</td><td class=\"num\">10</td>"
                     r"<td class=\"num\">100%</td>", page)
    # best-config table: the imported A100 optimum is in it
    a100 = ReplayData(convolution_files()["A100"])
    cfg, opt = a100.optimum()
    assert "NVIDIA A100" in page and json.dumps(cfg, sort_keys=True)[:40].replace('"', "&quot;") in page
    # every <img> points at a file next to the page
    assert set(re.findall(r'<img src="([^"]+)"', page)) == set(files[1:])


def test_report_without_runs_omits_run_figures_with_a_note(filled, tmp_path):
    db, _, _ = filled
    p = run_cli("report", "--db", str(db), "--out", str(tmp_path / "o"), "--json", timeout=300)
    assert p.returncode == 0, p.stderr
    files = json.loads(p.stdout)["files"]
    assert "warm_vs_cold.png" not in files and "hit_rate.png" not in files
    assert {"convergence.png", "similarity.png", "records_per_target.png"} <= set(files)
    page = (tmp_path / "o" / "index.html").read_text()
    assert "no tuning run with evaluations is stored in the database" in page and "pass --runs" in page
    assert not (tmp_path / "o" / "hit_rate.png").exists()
    assert "gain_saturation.png" not in files and "no run has both a gain and records_before" in page


def test_report_of_a_memory_store_equals_the_parquet_db(filled, tmp_path):
    """The same records in a MemoryStore give the same page (but for where the store lives),
    figures and summary."""
    from tunedb.index.memory.store import MemoryStore

    path, runs, _ = filled
    db = ParquetStore.open(path, create=False)
    mem = MemoryStore("report")
    mem.commit(list(db.iter_records()))
    data = load_runs([runs])
    a = build_report(db, tmp_path / "pq", data)
    b = build_report(mem, tmp_path / "mem", data)
    assert a["files"] == b["files"] and set(a["files"][1:]) == ALL_FIGURES
    assert (a["summary"], a["notes"]) == (b["summary"], b["notes"])
    assert a["summary"]["stored_runs"] == 0 and a["summary"]["runs_given"] == 3
    assert a["summary"]["saturation_fit"] is None and "needs at least 3" in a["summary"]["saturation_fit_reason"]

    def page(d, location):
        text = (d / "index.html").read_text(encoding="utf-8")
        text = re.sub(r"Generated [^<]* by", "Generated by", text)
        return text.replace(f"<code>{location}</code>", "<code>STORE</code>")

    assert page(tmp_path / "pq", db.location) == page(tmp_path / "mem", "memory:report")


def test_entry_curves_match_the_store(filled):
    db = ParquetStore.open(filled[0], create=False)
    curves = entry_curves(db.records(include_stale=False))
    assert len(curves) == db.entries().num_rows
    target_of = {t["target_key"]: t["target"] for t in db.targets()}
    for c in curves:
        assert len(c.best_so_far) == c.records
        seen = [b for b in c.best_so_far if b is not None]
        assert all(a >= b for a, b in zip(seen, seen[1:])), "best so far never gets worse"
        # the entry's cost is the estimator's (the number `tunedb best` shows), not the fastest record
        best = db.best_costs(target_of[c.target_key], c.workload, k=1)
        if best:
            assert c.best_cost == pytest.approx(best[0].cost) and c.estimate == best[0].estimate
            assert c.best_config == best[0].config and seen[-1] == c.best_seen
        else:
            assert c.best_cost is None


def test_demo_output_without_histories_gives_pass_hit_rates_and_a_note(tmp_path):
    doc = {"new": [{"workload": {"family": "matmul"}, "warm_best": 1e-4, "cold_best": 2e-4}], "source": [],
           "first_run": {"evaluations": 36, "measurements": 30, "cache_hits": 6},
           "second_run": {"evaluations": 36, "measurements": 0, "cache_hits": 36, "hit_rate": 1.0}}
    f = tmp_path / "demo.json"
    f.write_text(json.dumps(doc))
    data = load_runs([f])
    assert data.runs == []
    assert [(p["evaluations"], p["cache_hits"]) for p in data.hit_points] == [(36, 6), (36, 36)]
    assert any("no warm/cold histories" in n for n in data.notes)
    doc["new"][0].update(warm_history=[[1, 3e-4], [2, 1e-4]], cold_history=[[1, 5e-4], [2, 2e-4]])
    f.write_text(json.dumps(doc))
    data = load_runs([f])
    assert [r.label for r in data.runs] == ["warm", "cold"] and not data.notes


def test_report_bad_input_is_one_line_exit_2(tmp_path, filled):
    p = run_cli("report", "--db", str(tmp_path / "nope"), "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "no tunedb database" in p.stderr
    assert not (tmp_path / "nope").exists(), "report must not create a database"
    blocker = tmp_path / "file"
    blocker.write_text("x")
    p = run_cli("report", "--db", str(filled[0]), "--out", str(blocker / "sub"))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "cannot write" in p.stderr
    p = run_cli("report", "--db", str(filled[0]), "--out", str(blocker))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "not a directory" in p.stderr
    bad = tmp_path / "runs.json"
    bad.write_text("{not json\n")
    p = run_cli("report", "--db", str(filled[0]), "--out", str(tmp_path / "o2"), "--runs", str(bad))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "not JSON" in p.stderr
    assert "Traceback" not in p.stderr


# ------------------------------------------------------------------ stored runs and G(n)
G_MAX, BETA = 0.72, 3e-4    # the saturation the made-up runs below follow (beta per record)


def test_fit_saturation_recovers_known_parameters():
    rng = np.random.default_rng(7)
    n = np.array([0, 150, 400, 900, 1800, 3500, 7000, 12000, 20000])
    g = gain_model(n, G_MAX, BETA) + rng.normal(0.0, 0.01, n.size)
    fit = fit_saturation(n.tolist(), g.tolist())
    assert fit is not None and saturation_fit_reason(n, g) is None
    assert fit["points"] == n.size
    assert fit["g_max"] == pytest.approx(G_MAX, abs=0.03)
    assert fit["beta"] == pytest.approx(BETA, rel=0.15)
    assert 0 < fit["g_max_se"] < 0.05 and 0 < fit["beta_se"] < 0.3 * BETA
    assert abs(fit["g_max"] - G_MAX) < 4 * fit["g_max_se"] and abs(fit["beta"] - BETA) < 4 * fit["beta_se"]
    assert fit["rmse"] < 0.03
    # points that cannot take part are left out, not fatal
    assert fit_saturation([*n, -5, 100], [*g, 0.1, float("nan")]) == pytest.approx(fit)


def test_fit_saturation_needs_three_distinct_n():
    for n, g, why in (([], [], "0 run(s)"), ([100, 200], [0.1, 0.2], "2 run(s)"),
                      ([500, 500, 500, 500], [0.1, 0.2, 0.3, 0.25], "only 1 distinct"),
                      ([10, 10, 90, 90], [0.1, 0.1, 0.3, 0.3], "only 2 distinct")):
        assert fit_saturation(n, g) is None
        reason = saturation_fit_reason(n, g)
        assert reason is not None and why in reason and "at least 3" in reason


def test_no_fit_when_no_run_gained_anything():
    # replayed runs whose queries cost more than the replay's measuring time: G < 0 throughout
    n, g = [300, 312, 343, 400], [-590.0, -20.0, -1260.0, 0.0]
    fit, reason = saturation(n, g)
    assert fit is None and fit_saturation(n, g) is None
    assert reason == saturation_fit_reason(n, g) and "G <= 0 in all 4" in reason
    fit, reason = saturation(n, [*g[:3], 0.05])      # one run that gained: the fit is tried, and says nothing
    raw = fit_saturation(n, [*g[:3], 0.05])
    assert raw is not None and 0 <= raw["g_max"] <= 1
    assert fit is None and "larger than the value" in reason


def _history(costs: list[float | None]) -> list[list]:
    """Best so far after each evaluation of made-up per-evaluation costs (seconds)."""
    out, best = [], None
    for i, c in enumerate(costs, 1):
        if c is not None and (best is None or c < best):
            best = c
        out.append([i, best])
    return out


def _task(workload: dict, source: str, costs: list[float | None], hits: int) -> dict:
    return {"workload": workload, "workload_key": "", "weight": 1.0, "source": source, "evaluations": len(costs),
            "measurements": len(costs) - hits, "cache_hits": hits, "best": min(c for c in costs if c),
            "default_cost": 9e-4, "history": _history(costs), "seeded_from": ["gpu-a"] if source != "cold" else []}


def _run(kind: str, label: str, tasks: list[dict], *, n: int | None = None, model: str | None = None,
         target: str = "gpu-b") -> dict:
    evals = sum(t["evaluations"] for t in tasks)
    hits = sum(t["cache_hits"] for t in tasks)
    run = {"kind": kind, "label": label, "target": target, "model": model, "tasks": tasks, "evaluations": evals,
           "measurements": evals - hits, "cache_hits": hits, "eta": hits / evals if evals else None,
           "measure_s": 2.0 * (evals - hits), "query_s": 0.3, "wall_s": 2.0 * (evals - hits) + 0.3}
    if n is not None:
        run.update(records_before=n, gain=float(gain_model(n, G_MAX, BETA)),
                   t_full_s=(2.0 * (evals - hits) + 0.3) / (1 - float(gain_model(n, G_MAX, BETA))))
    return run


MATMUL = {"family": "matmul", "m": 256, "n": 256, "k": 128}
CONV = {"family": "conv2d", "c": 64, "k": 64, "h": 28, "w": 28}


def _stored_runs() -> list[dict]:
    """A cold and a warm tune of one workload, three tune-model runs as the DB grew, and a demo whose
    parts are model A cold, model B warm and model B cold (as `tunedb demo` stores them)."""
    cold = _run("tune", "cold", [_task(MATMUL, "cold", [8e-4, 6e-4, 7e-4, 5e-4, 4.5e-4, 4e-4], 0)])
    warm = _run("tune", "warm", [_task(MATMUL, "warm", [4.2e-4, 3.9e-4, 5e-4, 3.8e-4, 3.9e-4, 4e-4], 2)])
    model = [_run("tune-model", "warm", [_task(CONV, "warm", [3e-3, 2.5e-3, 2.2e-3, 2.4e-3], h),
                                         _task(MATMUL, "hit", [3.8e-4], 1)], n=n, model="resnet-18")
             for n, h in ((600, 1), (2500, 2), (9000, 3))]
    parts = [_run("tune-model", "cold", [_task(CONV, "cold", [4e-3, 3e-3, 2.6e-3], 0)], n=0, model="A"),
             _run("tune-model", "warm", [_task(MATMUL, "warm", [4.1e-4, 3.9e-4], 1)], n=20, model="B"),
             _run("tune-model", "cold", [_task(MATMUL, "cold", [9e-4, 6e-4], 0)], n=20, model="B")]
    demo = {"kind": "demo", "label": "", "target": "gpu-b", "parts": parts}
    return [cold, warm, *model, demo]


def test_report_draws_the_runs_the_db_stores(tmp_path):
    db = tunedb.open(tmp_path / "db")
    ids = [db.add_run(r) for r in _stored_runs()]
    assert len(db.runs()) == 6
    res = build_report(db, tmp_path / "site")
    files, summary = res["files"], res["summary"]
    assert {"warm_vs_cold.png", "hit_rate.png", "gain_saturation.png"} <= set(files)
    for name in ("warm_vs_cold.png", "hit_rate.png", "gain_saturation.png"):
        assert (tmp_path / "site" / name).read_bytes()[:8] == PNG_MAGIC
    page = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "pass --runs" not in page and "no tuning-run histories" not in page
    assert 'src="warm_vs_cold.png"' in page and 'src="hit_rate.png"' in page and 'src="gain_saturation.png"' in page
    # one search per task: 2 tunes + 3 model runs x 2 tasks + 3 demo parts; tuning runs: 2 + 3 + the demo's 3
    # parts (stored only inside the demo: each counted once, the container is not a run of its own)
    assert summary["stored_runs"] == 8 and summary["runs"] == 11 and summary["runs_given"] == 0
    # hit rate per run in stored order: the warm tune answered 2 of 6 from the DB
    assert re.search(r"tune warm gpu-b</td><td class=\"num\">6</td><td class=\"num\">2</td>"
                     r"<td class=\"num\">33%</td>", page)
    assert "demo: tune-model warm B" in page
    # the stored-runs table: one row per run, a demo's parts below it
    assert page.count("<td>tune-model</td>") == 3 and page.count("demo › tune-model") == 3
    assert re.search(r"<td>demo</td><td></td><td>gpu-b</td><td></td><td class=\"num\">7</td>", page), \
        "a demo's totals are its parts' when it stores none"
    # G(n): 3 model runs + 3 demo parts, 5 distinct n, made with G_MAX and BETA exactly
    fit = summary["saturation_fit"]
    assert summary["saturation_fit_reason"] is None and fit["points"] == 6
    assert fit["g_max"] == pytest.approx(G_MAX, rel=1e-3) and fit["beta"] == pytest.approx(BETA, rel=1e-3)
    assert f"{fit['g_max']:.4g}" in page and "G<sub>max</sub> =" in page

    # the same runs given with --runs too (as db.runs() gives them, and a tune output with a stored
    # run_id) are shown once; a run that is not stored is added after the stored ones
    extra = {**_stored_runs()[0], "label": "cold again"}
    runs_file = tmp_path / "runs.jsonl"
    tune_out = {"target": "gpu-b", "workload": MATMUL, "history": _history([5e-4]), "evaluations": 1,
                "cache_hits": 1, "measurements": 0, "seeds": [], "run_id": ids[1]}
    runs_file.write_text("".join(json.dumps(d) + "\n" for d in [*db.runs(), tune_out, extra]))
    again = build_report(db, tmp_path / "site2", load_runs([runs_file]))
    assert again["summary"]["stored_runs"] == 8 and again["summary"]["runs"] == 12
    assert again["summary"]["runs_given"] == 1
    assert any("6 run(s) given with --runs are stored in the database too" in n for n in again["notes"])
    page2 = (tmp_path / "site2" / "index.html").read_text(encoding="utf-8")
    assert page2.count("tune warm gpu-b</td>") == 1 and "tune cold again gpu-b</td>" in page2


def test_report_of_runs_without_enough_gains_says_why_there_is_no_fit(tmp_path):
    db = tunedb.open(tmp_path / "db")
    for r in _stored_runs()[:3]:  # two tunes without a gain, one model run with one
        db.add_run(r)
    # a run with hardly any fields, and one whose task data is malformed, are shown as far as they go
    db.add_run({"kind": "migrate", "target": "gpu-c"})
    db.add_run({"kind": "tune", "tasks": [{"workload": "matmul", "history": [[1], "x", [2, "fast"], [3, 2e-4]]}]})
    res = build_report(db, tmp_path / "site")
    assert "gain_saturation.png" in res["files"] and res["summary"]["saturation_fit"] is None
    assert "1 run(s) with a gain" in res["summary"]["saturation_fit_reason"]
    page = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "No fit: 1 run(s) with a gain" in page and "pass --runs" not in page
    assert res["summary"]["stored_runs"] == 5 and "<td>migrate</td><td></td><td>gpu-c</td>" in page
    empty = build_report(tunedb.open(tmp_path / "empty"), tmp_path / "site0")
    assert not {"warm_vs_cold.png", "hit_rate.png", "gain_saturation.png"} & set(empty["files"])
    page0 = (tmp_path / "site0" / "index.html").read_text(encoding="utf-8")
    assert "pass --runs" in page0 and "no tuning run with evaluations is stored in the database" in page0
    assert empty["summary"]["stored_runs"] == 0 and empty["summary"]["saturation_fit"] is None


def test_g_max_is_at_most_1_or_no_fit_with_the_reason(tmp_path):
    """G <= 1 by definition: points an unbounded fit puts at G_max > 1 give G_max <= 1 (bounded) or
    "no fit" with the reason, never a G_max above 1 (the report once printed G_max = 1.5 ± 33)."""
    from scipy.optimize import curve_fit

    def unbounded(n, g):
        x = np.asarray(n, float) / max(n)
        popt, _ = curve_fit(gain_model, x, np.asarray(g, float), p0=[max(g), 1.0], bounds=([0, 1e-9], [np.inf, np.inf]),
                            maxfev=20_000)
        return popt[0]

    wild_n, wild_g = [300, 312, 343, 400], [0.1, 0.3, 0.2, 0.5]     # no level in sight
    assert unbounded(wild_n, wild_g) > 1
    fit, reason = saturation(wild_n, wild_g)
    assert fit is None and "bound 1" in reason and "do not show where G levels off" in reason
    assert fit_saturation(wild_n, wild_g)["g_max"] <= 1               # (the bounded fit itself)
    # a level just above 1 in the data (noise on a saturated gain): the fit stays at 1 and is shown
    n = [0, 200, 500, 1000, 2000, 4000, 8000]
    g = (gain_model(n, 1.04, 1.5e-3) + np.array([0, 0.004, -0.003, 0.002, -0.002, 0.003, -0.001])).tolist()
    assert unbounded(n, g) > 1
    fit, reason = saturation(n, g)
    assert reason is None and fit is not None and fit["g_max"] <= 1 and fit["g_max"] == pytest.approx(1, abs=0.02)
    # too few runs, or a standard error larger than the value: no fit, and why
    assert saturation([100, 200], [0.1, 0.2]) == (None, saturation_fit_reason([100, 200], [0.1, 0.2]))
    fit, reason = saturation([0, 10, 20, 30], [0.01, 0.3, 0.0, 0.02])
    assert fit is None and reason is not None and "larger than the value" in reason

    # the report says so too, under the figure, and prints no G_max
    db = tunedb.open(tmp_path / "db")
    for k, (nb, gain) in enumerate(zip(wild_n, wild_g)):
        db.add_run({**_run("tune-model", "warm", [_task(CONV, "warm", [3e-3, 2e-3], 1)], model=f"m{k}"),
                    "records_before": nb, "gain": gain})
    res = build_report(db, tmp_path / "site")
    page = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert res["summary"]["saturation_fit"] is None and "bound 1" in res["summary"]["saturation_fit_reason"]
    assert "No fit: the fit over 4 runs put G" in page and "G<sub>max</sub> = 1.5" not in page
