"""One answer per entry: stored decisions (compare, tune-model) and confident intervals order
``best``; configs found equivalent are tied; an unsettled lower estimate is the challenger.

Real stores (memory and a Parquet directory), real records, decisions stored through the store
contract (``add_run``)."""

from __future__ import annotations

import json
import re

import pytest

import tunedb
from tunedb.index.contract.decisions import DECISION_KIND, answer, decision_summary, store_decision
from tunedb.index.model.keys import key_of
from tunedb.index.model.record import Record

from helpers import run_cli

T = {"kind": "cpu", "name": "decide-target"}
W = {"family": "matmul", "M": 16, "N": 16, "K": 16}
A, B, C = {"tile": 1}, {"tile": 2}, {"tile": 3}


def recs(cfg: dict, values_us: list[float], origin: str = "", repeats: int = 3) -> list[Record]:
    """One record per value (its repeats +-0.5 % around it), ``meta.origin`` = ``origin``."""
    meta = {"origin": origin} if origin else {}
    return [Record(T, W, cfg, [v * 1e-6 * f for f in (0.995, 1.0, 1.005)[:repeats]], meta=dict(meta))
            for v in values_us]


@pytest.fixture(params=["memory", "parquet", "postgres"])
def store(request, tmp_path):
    """Every backend, through the store contract (PostgreSQL: a private server, skipped with the
    reason when none can be started)."""
    where = {"memory": "memory:", "parquet": str(tmp_path / "db")}.get(request.param)
    if where is None:
        where = request.getfixturevalue("postgres_url")
    with tunedb.open(where) as s:
        yield s


def decide(db, a: dict, b: dict, verdict: str, by: str = "compare", kept: dict | None = None) -> None:
    store_decision(db, decision_summary(key_of(T), key_of(W), a, b, verdict, by=by, kept=kept, ratio=1.0,
                                        lo=0.978, hi=1.022, level=0.95, rounds=8))


def test_equivalent_configs_are_tied_and_the_lower_estimate_leads(store):
    # A's estimate 76 us, B's 67 us (confirmation records from different moments); the
    # interleaved test found them equivalent: best shows them side by side as tied
    store.commit(recs(A, [76.1] * 3, "compare") + recs(B, [67.0] * 3, "compare") + recs(C, [90, 91], "confirm"))
    assert [c.config for c in store.best_costs(T, W, 3)] == [B, A, C]
    decide(store, A, B, "equivalent")
    ans = answer(store, T, W)
    assert [r.cost.config for r in ans.ranked] == [B, A, C]
    assert ans.ranked[0].tied == [key_of(A)] and ans.ranked[1].tied == [key_of(B)]
    assert ans.challenger is None  # settled by the decision


def test_a_compare_verdict_orders_the_pair(store):
    store.commit(recs(A, [76.1] * 3, "compare") + recs(B, [67.0] * 3, "compare"))
    decide(store, A, B, "faster")  # A measured faster than B in paired rounds
    ans = answer(store, T, W)
    assert ans.first().config == A and ans.ranked[0].decided
    decide(store, A, B, "slower")  # the latest decision of a pair replaces the earlier
    assert answer(store, T, W).first().config == B


def test_a_default_tune_model_kept_is_the_answer(store):
    # tuned (B) has the lower estimate, its test against the default (A) was inconclusive: the
    # run kept the default, and the entry answers with it (not with the rejected tuned config)
    store.commit(recs(A, [100, 101, 99], "confirm") + recs(B, [90, 110, 95], "confirm")
                 + recs(C, [97, 104], "confirm"))
    assert store.best_costs(T, W, 1)[0].config == B
    decide(store, B, A, "inconclusive", by="tune-model", kept=A)
    ans = answer(store, T, W)
    assert ans.first().config == A and ans.ranked[0].kept
    assert store.runs(DECISION_KIND)[0]["kept"] == key_of(A)


def test_first_is_never_beaten_by_a_confident_interval(store):
    # X: confirmed but from 6 noisy records; Y: 8 search records whose whole interval is below X's
    x, y = A, B
    store.commit(recs(x, [202, 263, 230, 215, 248, 240], "confirm") + recs(y, [150, 151, 149, 152, 150, 148, 151, 150]))
    assert store.best_costs(T, W, 1)[0].config == x  # the estimator alone: confirmed first
    ex, ey = store.cost(T, W, x), store.cost(T, W, y)
    assert ey.hi < ex.lo and ey.coverage >= 0.95 and ex.coverage >= 0.95
    ans = answer(store, T, W)
    assert ans.first().config == y and ans.challenger is None


def test_an_unsettled_lower_estimate_is_the_challenger(store):
    store.commit(recs(A, [202, 263], "confirm") + recs(B, [184, 180, 206]) + recs(C, [300, 301]))
    ans = answer(store, T, W)
    assert ans.first().config == A  # confirmed first; B's interval overlaps A's
    assert ans.challenger is not None and ans.challenger.cost.config == B


def test_decisions_of_another_entry_do_not_apply(store):
    store.commit(recs(A, [76.1] * 3, "compare") + recs(B, [67.0] * 3, "compare"))
    store_decision(store, decision_summary(key_of(T), key_of({**W, "M": 32}), A, B, "faster", by="compare"))
    assert answer(store, T, W).first().config == B


def test_bad_decision_is_refused():
    with pytest.raises(ValueError):
        decision_summary("t", "w", A, B, "better", by="compare")
    with pytest.raises(ValueError):
        decision_summary("t", "w", A, B, "faster", by="tune-model", kept=C)


def test_best_cli_shows_tie_challenger_and_95_ci(tmp_path):
    path = tmp_path / "db"
    with tunedb.open(str(path)) as db:
        db.commit(recs(A, [202, 263], "confirm") + recs(B, [184, 180, 206]) + recs(C, [300, 301]))
    wl = "matmul:M=16,N=16,K=16"
    out = run_cli("best", "--db", str(path), "--target", "decide-target", "--workload", wl)
    assert out.returncode == 0, out.stderr
    assert "95 % CI" in out.stdout and not re.search(r"\d% CI", out.stdout)
    assert "challenger" in out.stdout and "tunedb compare --target decide-target" in out.stdout
    js = json.loads(run_cli("best", "--db", str(path), "--target", "decide-target", "--workload", wl,
                            "--json").stdout)
    assert [r["config"] for r in js["configs"]] == [A, B]  # -k 1 and the challenger
    assert js["challenger"]["rank"] == 2 and js["configs"][1]["challenger"]
    with tunedb.open(str(path)) as db:
        decide(db, B, A, "equivalent")
    js = json.loads(run_cli("best", "--db", str(path), "--target", "decide-target", "--workload", wl,
                            "--json").stdout)  # -k 1: the config tied with the first is shown too
    assert [r["config"] for r in js["configs"]] == [A, B] and js["challenger"] is None  # (A: confirmed)
    assert js["configs"][0]["tied_with"] == [2] and js["configs"][1]["tied_with"] == [1]


def test_the_answer_of_a_large_entry_is_fast():
    """4,000 configs, two records each (every one with an interval): the order is about linear
    (a pairwise comparison of every interval took tens of seconds here)."""
    import random
    import time

    rng = random.Random(0)
    n = 4000
    with tunedb.open("memory:") as db:
        db.commit(tunedb.RecordBatch.from_columns(
            target=[T] * 2 * n, workload=[W] * 2 * n, config=[{"tile": i} for i in range(n)] * 2,
            costs=[[rng.uniform(1e-3, 2e-3) * f for f in (1.0, 1.01, 0.99)] for _ in range(2 * n)]))
        decide(db, {"tile": 5}, {"tile": 7}, "faster")
        t0 = time.perf_counter()
        ans = answer(db, T, W)
        took = time.perf_counter() - t0
    assert len(ans.ranked) == n and took < 10.0, took
    head = ans.first().estimate  # and no config beats the first with confidence
    assert not any(e.hi < head.lo and e.coverage >= 0.95 for e in (r.cost.estimate for r in ans.ranked))
