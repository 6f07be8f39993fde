"""``tunedb demo`` end to end beside a CPU-bound process: real builds and runs on this CPU, a
first run (``--json``) and a rerun in the same folder (text).  Whatever the verdict, every
claim must agree with the numbers it rests on: headline = table = JSON = the stored run."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from helpers import run_cli


def _demo_summaries(db_dir) -> list[dict]:
    """The stored ``demo`` run summaries, oldest first."""
    from tunedb.index.opener import open_store

    runs = open_store(str(db_dir), create=False).runs("demo")
    return sorted(runs, key=lambda r: r.get("started") or "")


def _check_claims(out: dict) -> None:
    """The JSON's claims against its own numbers."""
    from tunedb.transfer.apps.demo import FACTOR, matched_at

    budget, v, pre, warm, cold = out["budget"], out["verify"], out["precondition"], out["warm"], out["cold"]
    # equal budget, both from the default; cold truly had no DB
    assert warm["search_evaluations"] == cold["search_evaluations"] == budget
    assert cold["db_answers"] == 0 and cold["measurements"] == budget
    assert warm["measurements"] + warm["db_answers"] == budget
    assert warm["history"][0][0] == cold["history"][0][0] == 1
    # the precondition is reported, with its statistic, and decides whether anything is claimed
    for name in ("warm", "cold"):  # a config is never compared with itself, the default included
        assert (v[f"speedup_{name}"] is None) == v[f"{name}_is_default"]
        assert v[f"{name}_is_default"] == (out[name]["config_key"] == out["default"]["config_key"])
    if pre["speedup"] is not None:
        assert pre["rounds"] == len(v["values"]["default"]) >= 2
        assert pre["lo"] <= pre["speedup"] <= pre["hi"] and pre["holds"] == (pre["lo"] >= FACTOR)
    else:
        assert not pre["holds"] and pre["reason"]
    h = out["headline"]
    assert f"{budget} evaluations each" in h
    if not pre["holds"]:
        assert h.startswith("no gain claim") and "beats" not in h
    # never a self-comparison: same config -> no test and no interval
    if v["same_config"]:
        assert warm["config_key"] == cold["config_key"] and v["comparison"] is None
        assert "same config" in h and "CI" not in h
    else:
        c = v["comparison"]
        assert warm["config_key"] != cold["config_key"]
        assert c["lo"] <= c["ratio"] <= c["hi"] and len(c["a"]) == len(c["b"]) == c["rounds"] <= v["rounds"]
        assert f"{1 / c['ratio']:.2f}x as fast as cold's" in h and f"{c['rounds']} interleaved rounds" in h
        if pre["holds"]:
            word = {"faster": "warm beats cold", "slower": "cold beats warm", "equivalent": "no difference",
                    "inconclusive": "inconclusive at equal budget"}[c["verdict"]]
            assert h.startswith(word)
    # the budget claim is the searches' histories
    assert len(cold["evaluated_keys"]) == budget
    n = matched_at(cold["history"], cold["evaluated_keys"], out["warm_best_sample"], warm["config_key"])
    assert out["cold_evaluations_to_match"] == n
    if n is None:
        assert f"cold did not match warm's result in its {budget} evaluations" in out["budget_headline"]
    else:
        assert f"cold needed {n} evaluations to match warm's result" in out["budget_headline"]


def _table_rows(text: str) -> dict[str, list[str]]:
    """The table's rows (``default`` / ``warm`` / ``cold``), split on runs of 2+ spaces."""
    rows = {}
    for ln in text.splitlines():
        cells = re.split(r"\s{2,}", ln.strip())
        if cells and cells[0] in ("default", "warm", "cold") and len(cells) >= 8:
            rows[cells[0]] = cells
    return rows


@pytest.mark.slow
def test_demo_beside_a_cpu_hog_first_run_and_rerun(tmp_path):
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        r1 = run_cli("demo", "--json", cwd=tmp_path, timeout=900)
        r2 = run_cli("demo", "--max-rounds", "8", cwd=tmp_path, timeout=900)
    finally:
        hog.kill()
        hog.wait()
    assert r1.returncode == 0, r1.stderr[-2000:]
    out = json.loads(r1.stdout)
    db = tmp_path / "tunedb-data"
    assert (db / "records").is_dir()
    # a first run: the history is tuned here, nothing is reused
    assert out["history"] and not any(h["reused"] for h in out["history"])
    assert all(h["measurements"] > 0 for h in out["history"])
    _check_claims(out)
    stored = _demo_summaries(db)
    assert len(stored) == 2, "each demo is stored as one run summary"
    first, second = stored
    assert first["headline"] == out["headline"] and first["verdict"] == out["verdict"]

    # the rerun, as text: every label true, its table the stored run's numbers
    assert r2.returncode == 0, r2.stderr[-2000:]
    text = r2.stdout
    lines = text.splitlines()
    assert second["run_id"] != first["run_id"]
    assert lines[0] == second["headline"] and lines[1] == second["budget_headline"]
    n_hist = len(out["history"])
    assert f"reusing {n_hist} stored entries" in text and "tuned" not in text.split("history (")[1].split(";")[0]
    assert "empty history" not in text
    assert re.search(r"precondition (met|NOT met): on matmul:M=\d+,N=\d+,K=\d+ the best config known", text)
    m = re.search(r"new workload (matmul:\S+): warm through this DB \((\d+) stored matmul entries", text)
    assert m, text
    assert m.group(1) != "matmul:M={M},N={N},K={K}".format(**out["new_workload"]), "a rerun tunes a new workload"
    assert int(m.group(2)) >= n_hist + 1  # the history and the first run's new workload
    rows = _table_rows(text)
    warm_part, cold_part = (p for p in second["parts"] if p["label"] in ("demo warm", "demo cold (throwaway store)"))
    for name, part in (("warm", warm_part), ("cold", cold_part)):
        evals, meas, hits = (int(x) for x in rows[name][3:6])
        assert (evals, meas, hits) == (part["evaluations"], part["measurements"], part["cache_hits"]), name
    assert rows["cold"][1] == "none (throwaway store)" and int(rows["cold"][5]) == 0
    assert f"{int(rows['warm'][3])} evaluations each" in lines[0]
    if "same config" in lines[0]:
        assert "CI" not in lines[0]
    # the history of the rerun was answered by the DB: nothing measured for it
    assert not [p for p in second["parts"] if p["label"] == "demo history"]
