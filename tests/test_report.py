"""``tunedb report``: real DB (imported Kernel Tuner data + replayed tuning runs), real subprocess."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tunedb.datasets import convolution_files, dataset_path
from tunedb.index import TuningDB
from tunedb.transfer.apps.report import entry_curves, load_runs
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
    db = TuningDB.open(base / "db")
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
    assert "lookups are not stored in the database" in page
    assert not (tmp_path / "o" / "hit_rate.png").exists()


def test_entry_curves_match_the_store(filled):
    db = TuningDB.open(filled[0], create=False)
    curves = entry_curves(db.records(include_stale=False))
    assert len(curves) == db.entries().num_rows
    target_of = {t["target_key"]: t["target"] for t in db.targets()}
    for c in curves:
        assert len(c.best_so_far) == c.records
        seen = [b for b in c.best_so_far if b is not None]
        assert all(a >= b for a, b in zip(seen, seen[1:])), "best so far never gets worse"
        best = db.best(target_of[c.target_key], c.workload, k=1)
        if best:
            assert c.best_cost == pytest.approx(best[0].cost) and seen[-1] == c.best_cost
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
