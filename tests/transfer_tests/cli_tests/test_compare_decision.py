"""``tunedb compare`` stores its verdict and ``tunedb best`` follows it; the numbers printed under
the verdict are the rounds the test compared, labelled apart from the DB's estimates.

Real measurements (gcc, the local preset cpu-native-t1), a real Parquet directory."""

from __future__ import annotations

import json
import re
import statistics

import tunedb
from tunedb.index.contract.decisions import DECISION_KIND

from helpers import run_cli

WL = "matmul:M=32,N=32,K=32"
A = {"kc": 32, "mc": 32, "mr": 4, "nc": 32, "nr": 8, "order": 0, "pack": 1, "unroll": 4, "vec": 4}
B = {"kc": 32, "mc": 32, "mr": 1, "nc": 32, "nr": 4, "order": 0, "pack": 0, "unroll": 1, "vec": 4}


def test_compare_verdict_is_what_best_answers(tmp_path):
    db = str(tmp_path / "db")
    args = ["--db", db, "--target", "cpu-native-t1", "--workload", WL]
    out = run_cli("compare", *args, "--config", json.dumps(A), "--config", json.dumps(B), "--max-rounds", "3",
                  "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    cmp = res["comparison"]
    assert res["round_median_a"] == statistics.median(cmp["a"])
    assert res["round_median_b"] == statistics.median(cmp["b"])
    best = json.loads(run_cli("best", *args, "-k", "2", "--json").stdout)
    with tunedb.open(db) as s:
        stored = s.runs(DECISION_KIND)
    order = [r["config"] for r in best["configs"] if not r["challenger"]]
    if cmp["verdict"] == "inconclusive":
        assert res["decision_id"] is None and stored == []
    else:
        assert [d["run_id"] for d in stored] == [res["decision_id"]] and stored[0]["verdict"] == cmp["verdict"]
        if cmp["verdict"] == "faster":
            assert order[0] == A
        elif cmp["verdict"] == "slower":
            assert order[0] == B
        else:
            assert best["configs"][0]["tied_with"] == [2] and best["challenger"] is None


def test_compare_text_labels_round_medians_apart_from_estimates(tmp_path):
    db = str(tmp_path / "db")
    out = run_cli("compare", "--db", db, "--target", "cpu-native-t1", "--workload", WL, "--config", json.dumps(A),
                  "--config", json.dumps(B), "--max-rounds", "3")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    rounds = next(x for x in lines if x.startswith("these rounds:"))
    est = next(x for x in lines if x.startswith("DB estimates"))
    assert "A median" in rounds and "B median" in rounds
    # one label style for the level, the level the records allow (3 rounds: 3 records, 75 %)
    assert re.search(r"\b\d+ % CI", est) and not re.search(r"\d% CI", out.stdout)
