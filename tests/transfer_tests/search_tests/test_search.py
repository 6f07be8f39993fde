"""Retrieval-seeded local search on replayed GPU measurements (real Kernel Tuner data)."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time

import numpy as np
import pytest

from tunedb.index import ParquetStore
from tunedb.index.memory.store import MemoryStore
from tunedb.transfer.measure.replay import KernelTunerReplayBackend, ReplayData
from tunedb.transfer.search.costmodel import LightGBMCostModel, RidgeCostModel, spearman, training_data
from tunedb.transfer.search.proposals.seeds import transferred_seeds
from tunedb.transfer.search.rgpe import RGPESurrogate
from tunedb.transfer.search.tuner import TuneOptions, Tuner

from helpers import ROOT, kernel_tuner_file, replay_history_db, run_cli

SOURCES = ("A100", "A6000", "MI250X", "W7800")
HELD = "A4000"


class CountingBackend(KernelTunerReplayBackend):
    """The real replay backend, counting what it is asked to measure."""

    def __init__(self, data):
        super().__init__(data)
        self.asked: list[str] = []

    def measure(self, target, workload, config):
        self.asked.append(json.dumps(config, sort_keys=True))
        return super().measure(target, workload, config)


@pytest.fixture(scope="module")
def replay():
    return {d: ReplayData(kernel_tuner_file(d)) for d in SOURCES + (HELD,)}


@pytest.fixture(scope="module")
def history_path(tmp_path_factory, replay):
    return replay_history_db(tmp_path_factory.mktemp("history") / "db", replay, SOURCES, compact=True)


@pytest.fixture()
def history_db(tmp_path, history_path):
    import shutil

    shutil.copytree(history_path, tmp_path / "db")
    return ParquetStore.open(tmp_path / "db")


def test_search_never_measures_twice_and_rerun_measures_nothing(tmp_path, replay):
    held = replay[HELD]
    db = ParquetStore.open(tmp_path / "db")
    b = CountingBackend(held)
    r1 = Tuner(db, held.target, held.workload, held.space, b, TuneOptions(budget=25, seed=3, cold=True)).run()
    assert len(b.asked) == len(set(b.asked)) == r1.measurements == 25
    b2 = CountingBackend(held)
    r2 = Tuner(db, held.target, held.workload, held.space, b2, TuneOptions(budget=25, seed=3, cold=True)).run()
    assert b2.asked == [] and r2.measurements == 0 and r2.cache_hits == 25
    assert r2.best_cost == r1.best_cost
    # a larger budget only measures the difference
    b3 = CountingBackend(held)
    r3 = Tuner(db, held.target, held.workload, held.space, b3, TuneOptions(budget=30, seed=3, cold=True)).run()
    assert r3.measurements == 5 and not set(b3.asked) & set(b.asked)
    t = db.records(held.target, held.workload)
    assert t.num_rows == 30 and len(set(t.column("config").to_pylist())) == 30
    assert set(t.column("source").to_pylist()) == {"replay"}


def test_warm_start_beats_random_search_at_equal_budget(history_db, history_path, tmp_path, replay):
    import shutil

    held = replay[HELD]
    _, opt = held.optimum()
    warm = Tuner(history_db, held.target, held.workload, held.space, KernelTunerReplayBackend(held),
                 TuneOptions(budget=10, seed=0)).run()
    assert warm.measurements == 10
    assert warm.seeds and warm.seeds[0]["from_target"] != held.target["name"]
    assert all(0 < s["similarity"] <= 1.0 + 1e-6 for s in warm.seeds)
    import random

    ok = held.costs_ok()
    pool = ok + [float("inf")] * (held.space.size() - len(ok))
    rnd = [min(random.Random(s).sample(pool, 10)) for s in range(30)]
    assert warm.best_cost < statistics.median(rnd)
    assert opt / warm.best_cost > 0.8
    # deterministic: the same seed gives the same trajectory on a fresh copy of the history
    shutil.copytree(history_path, tmp_path / "again")
    again = Tuner(ParquetStore.open(tmp_path / "again"), held.target, held.workload, held.space,
                  KernelTunerReplayBackend(held), TuneOptions(budget=10, seed=0)).run()
    assert again.history == warm.history and again.best_config == warm.best_config


def test_cost_model_rank_correlation_beats_a_constant(history_db):
    fam = "convolution_kernel"
    cfgs, wls, tgs, costs = training_data(history_db, fam)
    assert len(cfgs) > 10_000
    # a seeded random split: the store's row order (sorted by cost within an entry after a
    # compaction) must not decide which records are held out
    perm = np.random.default_rng(0).permutation(len(cfgs))
    cfgs, wls, tgs, costs = ([x[i] for i in perm] for x in (cfgs, wls, tgs, costs))
    for model in (LightGBMCostModel(n_estimators=80), RidgeCostModel()):
        model.fit(cfgs[:6000], wls[:6000], tgs[:6000], costs[:6000], holdout=0.25)
        assert model.heldout_spearman_ > 0.3, type(model).__name__
        pred = model.predict(cfgs[6000:8000], wls[6000:8000], tgs[6000:8000])
        assert spearman(pred, costs[6000:8000]) > 0.3
    # a constant predictor has no rank correlation at all
    import math

    assert math.isnan(spearman([1.0] * 50, costs[:50]))


def test_tune_cli_replay_json_and_resume(tmp_path):
    f = kernel_tuner_file(HELD)
    db = tmp_path / "db"
    r = run_cli("tune", "--replay", str(f), "--budget", "8", "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for k in ("target", "workload", "best", "measurements", "cache_hits", "seeds", "history"):
        assert k in out
    assert out["measurements"] == 8 and out["best"]["cost"] > 0 and len(out["history"]) == 8
    again = json.loads(run_cli("tune", "--replay", str(f), "--budget", "8", "--db", str(db), "--json").stdout)
    assert again["measurements"] == 0 and again["cache_hits"] == 8


@pytest.mark.slow
def test_resume_after_sigkill_does_not_remeasure(tmp_path):
    f = kernel_tuner_file(HELD)
    db = tmp_path / "db"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "tunedb", "tune", "--cold", "--replay", str(f), "--budget",
                          "400", "--db", str(db), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    deadline = time.time() + 120
    while time.time() < deadline:
        # count committed records, not files: a compaction can merge files while we look
        if (db / "tunedb.json").exists() and len(ParquetStore.open(db)) >= 5:
            break
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    before = ParquetStore.open(db).records()
    done = before.num_rows
    assert 5 <= done < 400
    r = run_cli("tune", "--cold", "--replay", str(f), "--budget", str(done + 10), "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["measurements"] == 10 and out["cache_hits"] == done
    after = ParquetStore.open(db).records()
    assert after.num_rows == done + 10
    assert len(set(after.column("config").to_pylist())) == done + 10


def test_warm_start_and_predict_cli(tmp_path):
    db = tmp_path / "db"
    for d in ("A100", "A6000"):
        r = run_cli("import", "kernel-tuner", str(kernel_tuner_file(d)), "--db", str(db), "--json")
        assert r.returncode == 0, r.stderr
    r = run_cli("predict", "--db", str(db), "--target", "NVIDIA RTX A6000", "--workload",
                str(_workload_file(tmp_path)), "--config", json.dumps(ReplayData(kernel_tuner_file("A100")).optimum()[0]),
                "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["predicted_cost"] > 0 and out["trained_on"]["records"] > 1000 and out["trained_on"]["targets"] == 2
    assert -1 <= out["heldout_spearman"] <= 1
    bad = run_cli("predict", "--db", str(db), "--target", "nope-device-xyz", "--workload", "matmul:M=1",
                  "--config", "{}")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    bad = run_cli("tune", "--db", str(db), "--replay", str(tmp_path / "missing.json"), "--budget", "3")
    assert bad.returncode == 2 and "does not exist" in bad.stderr
    bad = run_cli("tune", "--db", str(db), "--target", "cpu-native", "--workload", "matmul:M=8,N=8,K=8",
                  "--budget", "0")
    assert bad.returncode == 2


def _workload_file(tmp_path):
    w = ReplayData(kernel_tuner_file("A100")).workload
    p = tmp_path / "w.json"
    p.write_text(json.dumps(w))
    return p


def test_hindsight_mixture_ranks_an_exact_mix_first_and_a_close_gpu_well(replay):
    import copy
    import math

    from tunedb.index.model.record import Record
    from tunedb.transfer.apps.evaluation import hindsight_mixture

    datas = {d: replay[d] for d in ("A6000", "MI250X", "W7800")}
    # a device whose log times are exactly 0.7 * A6000 + 0.3 * MI250X - 0.1 (where both ran)
    mixed = copy.copy(replay["A6000"])
    mixed.results = {}
    for k, r in replay["A6000"].results.items():
        o = replay["MI250X"].results.get(k)
        if r.status == "ok" and o is not None and o.status == "ok":
            c = math.exp(0.7 * math.log(r.cost) + 0.3 * math.log(o.cost) - 0.1)
            mixed.results[k] = Record(r.target, r.workload, r.config, [c], source="replay")
    datas["mix"] = mixed
    m = hindsight_mixture(datas, "mix", top=1)
    assert m["fraction"] == pytest.approx(1.0) and m["optimum_rank"] == 0
    assert m["weights"]["A6000"] == pytest.approx(0.7, abs=1e-3)
    assert m["weights"]["MI250X"] == pytest.approx(0.3, abs=1e-3)
    assert m["weights"]["W7800"] == pytest.approx(0.0, abs=1e-3)
    # a real GPU: the A4000 is close to the A6000, so the mix ranks its optimum high
    real = hindsight_mixture({d: replay[d] for d in SOURCES + (HELD,)}, HELD, top=20)
    assert real["fraction"] > 0.9 and real["configs"] > 1000
    assert set(real["weights"]) == set(SOURCES) | {"intercept"}


# ------------------------------------------------------------------ the in-memory store, tunedb.tune
def _twin_stores(tmp_path, replay):
    """A Parquet DB in tmp_path holding the source devices' records, and a MemoryStore holding the
    same records in the order the Parquet DB reads them back (the cost model sees its training
    rows in store order, so both stores must agree on it)."""
    pq_db = ParquetStore.open(tmp_path / "db")
    for d in SOURCES:
        pq_db.commit(list(replay[d].results.values()))
    mem = MemoryStore()
    mem.commit(list(pq_db.iter_records()))
    return pq_db, mem


def test_warm_tuner_on_a_memory_store_equals_the_parquet_db(tmp_path, replay):
    held = replay[HELD]
    pq_db, mem = _twin_stores(tmp_path, replay)
    runs = [Tuner(db, held.target, held.workload, held.space, CountingBackend(held),
                  TuneOptions(budget=10, seed=4)).run() for db in (pq_db, mem)]
    a, b = (r.to_json() for r in runs)
    assert a["seeds"] and a["model"].get("fits")  # retrieval and the cost model took part
    assert a.pop("overhead").keys() == b.pop("overhead").keys()  # seconds: differ from run to run
    assert a == b
    assert runs[0].measurements == runs[1].measurements == 10
    # both stores now hold the same new records, and a rerun is all cache hits on either
    for db in (pq_db, mem):
        t = db.records(held.target, held.workload)
        assert sorted(t.column("config").to_pylist()) == sorted(pq_db.records(held.target, held.workload)
                                                                .column("config").to_pylist())
        again = Tuner(db, held.target, held.workload, held.space, CountingBackend(held),
                      TuneOptions(budget=10, seed=4)).run()
        assert (again.measurements, again.cache_hits, again.best_cost) == (0, 10, runs[0].best_cost)


def test_cost_model_training_data_on_a_memory_store_equals_the_parquet_db(tmp_path, replay):
    pq_db, mem = _twin_stores(tmp_path, replay)
    fam = replay[HELD].workload["family"]
    a, b = training_data(pq_db, fam, seed=1), training_data(mem, fam, seed=1)
    assert len(a[0]) > 10_000 and a == b
    small = training_data(pq_db, fam, max_records=500, seed=1)
    assert len(small[0]) == 500 and small == training_data(mem, fam, max_records=500, seed=1)


def test_public_tune_real_builds_in_memory_then_all_cache_hits():
    import tunedb

    db = tunedb.open("memory:")
    target = tunedb.local_target("cpu-native-t1")
    w = {"family": "softmax", "M": 64, "N": 128}
    first = tunedb.tune(db, target, w, budget=3)
    # 3 evaluations, the 2 leaders re-measured twice interleaved (runoff), then the winner twice
    # more (confirm): its cost is not the sample that selected it
    assert (first.measurements, first.cache_hits, first.evaluations, first.remeasurements) == (3, 0, 3, 6)
    recs = list(db.iter_records(target, first.workload))
    assert len(recs) == 9 and {r.source for r in recs} == {"measured"}
    assert sum(r.meta.get("origin") == "runoff" for r in recs) == 4
    assert sum(r.meta.get("origin") == "confirm" and r.config == first.best_config for r in recs) == 2
    est = db.cost(target, first.workload, first.best_config)
    assert first.best_cost == est.value and est.basis == "confirmed" and not first.selection_biased
    assert first.best_estimate == est.to_dict()
    again = tunedb.tune(db, target, w, budget=3)  # the leaders are confirmed: nothing is measured again
    assert (again.measurements, again.cache_hits, again.remeasurements, again.best_cost) == (0, 3, 0, first.best_cost)
    assert len(db) == 9


def test_replay_tune_on_a_db_holding_only_the_device_own_cache(tmp_path):
    """The warm cost model with no other entries of the family: it is fitted on the run's own
    evaluations (this used to raise from numpy when stacking an empty history matrix)."""
    cache = kernel_tuner_file("A4000")
    db = str(tmp_path / "db")
    p = run_cli("import", "kernel-tuner", str(cache), "--db", db, "--json")
    assert p.returncode == 0, p.stderr
    p = run_cli("tune", "--db", db, "--replay", str(cache), "--exact", "--budget", "40", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    _, optimum = ReplayData(cache).optimum()
    assert out["best"]["cost"] >= optimum * (1 - 1e-9)
    assert out["measurements"] == 0 and out["cache_hits"] > 0  # the whole cache is in the DB already


# ----------------------------------------------------------- seeds by similarity, surrogate, budget
def test_interleave_gives_each_source_a_quota_proportional_to_its_weight():
    from tunedb.transfer.search.seed_order import interleave, similarity_weights

    lists = [["a1", "a2", "a3"], ["b1", "b2"], ["c1"]]
    assert interleave(lists, [0.5, 0.3, 0.2]) == ["a1", "b1", "a2", "c1", "a3", "b2"]
    assert interleave(lists, [0.5, 0.3, 0.2], limit=3) == ["a1", "b1", "a2"]
    # a config two sources share comes once; the second source moves on to its next
    assert interleave([["x", "a"], ["x", "b"]], [1.0, 1.0]) == ["x", "b", "a"]
    assert interleave([["a"], ["b"]], [1.0, 0.0]) == ["a"]           # weight 0: nothing
    w = similarity_weights([0.99, 0.98, 0.5], power=8)
    assert sum(w) == pytest.approx(1.0) and w[0] > w[1] > 10 * w[2]
    assert similarity_weights([0.0, -1.0]) == [0.5, 0.5]


def test_warm_seeds_interleave_the_nearest_devices_bests_by_similarity(history_db, replay):
    held = replay[HELD]
    t = Tuner(history_db, held.target, held.workload, held.space, KernelTunerReplayBackend(held),
              TuneOptions(budget=10, seed=0))
    seeds = transferred_seeds(t)
    info = t.seeds_info
    sims = [s["similarity"] for s in info]
    assert sims == sorted(sims, reverse=True) and len(info) == len(SOURCES)
    weights = [s["seed_weight"] for s in info]
    assert sum(weights) == pytest.approx(1.0, abs=1e-5) and weights == sorted(weights, reverse=True)
    firsts = {json.dumps(src.adapted[0], sort_keys=True): i for i, src in enumerate(t.seeds.sources)}
    # the two most similar devices (near-equal weights) give the first two seeds: each its best
    assert [firsts.get(json.dumps(c, sort_keys=True)) for c in seeds[:2]] == [0, 1]
    # every device's best is among the first len(SOURCES) + 2 seeds: no device's 8 configs crowd out another's best
    head = {json.dumps(c, sort_keys=True) for c in seeds[: len(SOURCES) + 2]}
    assert sum(1 for k in firsts if k in head) >= 3
    old = Tuner(history_db, held.target, held.workload, held.space, KernelTunerReplayBackend(held),
                TuneOptions(budget=10, seed=0, seed_order="rank"))
    old = transferred_seeds(old)
    assert sorted(map(json.dumps, old)) == sorted(map(json.dumps, seeds))  # same configs, another order


def test_budget_is_spent_when_patience_is_off_and_patience_still_stops_early(history_db, replay):
    held = replay[HELD]
    assert TuneOptions().patience is None
    full = Tuner(history_db, held.target, held.workload, held.space, KernelTunerReplayBackend(held),
                 TuneOptions(budget=40, seed=0)).run()
    assert full.evaluations == full.measurements == 40 and full.stopped_by == "budget"
    mem = MemoryStore()
    mem.commit([r for r in history_db.iter_records() if r.target_name != held.target.get("name")])
    short = Tuner(mem, held.target, held.workload, held.space, KernelTunerReplayBackend(held),
                  TuneOptions(budget=40, seed=0, patience=1)).run()
    assert short.stopped_by == "patience" and short.evaluations < 40


def test_rgpe_surrogate_stops_following_a_source_that_ranks_the_device_backwards(replay):
    """A "mirror" source (the A6000's times inverted: its best configs are the A6000's worst) is
    as similar as the A6000 itself; after the first measurements the surrogate gives it ~0
    weight and none of its seeds is measured again."""
    from tunedb.index.model.record import Record

    held, src = replay[HELD], replay["A6000"]
    mirror_target = {**src.target, "name": "Mirror GPU"}
    mirror = [Record(target=mirror_target, workload=r.workload, config=r.config, costs=(1e-6 / r.cost,),
                     source="replay") for r in src.results.values() if r.status == "ok" and r.cost]
    db = MemoryStore()
    db.commit(list(src.results.values()) + list(replay["W7800"].results.values()) + mirror)
    t = Tuner(db, held.target, held.workload, held.space, KernelTunerReplayBackend(held),
              TuneOptions(budget=30, seed=0, n_seeds=4))
    res = t.run()
    sur = res.surrogate
    assert res.evaluations == 30 and "Mirror GPU" in sur["sources"]
    m = sur["sources"].index("Mirror GPU")
    a = sur["sources"].index("NVIDIA RTX A6000")
    assert sur["trace"] and all(row[1 + m] < 0.05 for row in sur["trace"])
    assert sum(sur["weights"]) == pytest.approx(1.0, abs=1e-3) and sur["weights"][a] > 0.5
    names = [s.match.target_name for s in t.seeds.sources]
    mirror_best = {json.dumps(c, sort_keys=True) for c in t.seeds.sources[names.index("Mirror GPU")].adapted}
    after = [json.dumps(c, sort_keys=True) for c in list(t.configs.values())[4:]]
    assert not mirror_best & set(after)
    model = Tuner(db, held.target, held.workload, held.space, KernelTunerReplayBackend(held),
                  TuneOptions(budget=12, seed=0, surrogate="model")).run()
    assert set(model.surrogate) <= {"guard"}  # no RGPE ensemble (the guard reports beside it)


def test_ei_acquisition_leaves_a_refuted_region_and_a_bad_acquisition_is_one_error(history_db, replay):
    """With ``acquisition="ei"`` (default) the run records the Gaussian process it fitted, proposes
    configs the ensemble mean alone would not, and both orders reach the same budget; an unknown
    acquisition is refused before anything is measured."""
    held = replay[HELD]
    runs = {}
    for acq in ("ei", "mean"):
        mem = MemoryStore()
        mem.commit([r for r in history_db.iter_records() if r.target_name != held.target.get("name")])
        t = Tuner(mem, held.target, held.workload, held.space, KernelTunerReplayBackend(held),
                  TuneOptions(budget=20, seed=0, epsilon=0.0, acquisition=acq, guard=False))  # acquisitions alone
        runs[acq] = (t.run(), [json.dumps(c, sort_keys=True) for c in t.configs.values()])
    ei, mean = runs["ei"][0], runs["mean"][0]
    assert ei.evaluations == mean.evaluations == 20
    gp = ei.surrogate["gp"]
    assert gp["length_scale"] in RGPESurrogate.LENGTH_SCALES and gp["noise"] in RGPESurrogate.NOISES
    assert gp["b"] >= 0 and "gp" not in mean.surrogate
    # the same seeds first, then different proposals
    assert runs["ei"][1][:6] == runs["mean"][1][:6] and runs["ei"][1] != runs["mean"][1]
    mem = MemoryStore()
    mem.commit([r for r in history_db.iter_records() if r.target_name != held.target.get("name")])
    with pytest.raises(ValueError, match="acquisition must be 'ei' or 'mean'"):
        Tuner(mem, held.target, held.workload, held.space, KernelTunerReplayBackend(held),
              TuneOptions(budget=5, acquisition="ucb")).run()
    assert len(mem.records(held.target)) == 0


def test_union_of_bests_round_robins_the_other_devices_bests_then_goes_random(replay):
    from tunedb.index.model.keys import canonical_json
    from tunedb.transfer.apps.evaluation import order_history, union_curve, union_of_bests

    datas = {d: replay[d] for d in ("A6000", "W7800", HELD)}

    def ranked(d):
        return [r.config for r in sorted((r for r in replay[d].results.values() if r.status == "ok" and r.cost),
                                         key=lambda r: (r.cost, r.config_json))]
    a, w = ranked("A6000"), ranked("W7800")
    order = union_of_bests(datas, HELD, 6)
    want = []
    for pair in zip(a, w):
        for c in pair:
            if c not in want:
                want.append(c)
    assert order == want[:6]
    keys = [canonical_json(c) for c in union_of_bests(datas, HELD, None, depth=2, seed=1)]
    assert len(keys) == len(set(keys)) == len(replay[HELD].results)    # each config once, then the rest
    assert keys[4:] != [canonical_json(c) for c in union_of_bests(datas, HELD, None, depth=2, seed=2)][4:]
    hist = order_history(replay[HELD], order)
    assert [i for i, _ in hist] == list(range(1, 7))
    assert all(b2 <= b1 for (_, b1), (_, b2) in zip(hist, hist[1:]))
    curve = union_curve(datas, HELD, (5, 50), seeds=2)
    assert 0 < curve[5] <= curve[50] <= 1.0


# ------------------------------------------------------------------ origins of evaluations
def _sum_split(res, field):
    return sum(v[field] for k, v in res.origin_split.items() if k not in ("runoff", "confirm"))


def test_every_evaluation_has_an_origin_and_seeded_records_name_the_device_they_came_from(history_db, replay):
    """A warm replay run on real Kernel Tuner data (convolution_milo): its origins count every
    evaluation, the callback sees each in evaluation order, and each measured seed's record says
    which other device's entry seeded it (meta.seeded_from) before it was committed."""
    from tunedb.index.model.keys import key_of
    from tunedb.transfer.search.tuner import ORIGINS

    held = replay[HELD]
    seen: list[tuple] = []
    t = Tuner(history_db, held.target, held.workload, held.space, KernelTunerReplayBackend(held),
              TuneOptions(budget=16, seed=0), on_evaluation=lambda c, r, cached, o: seen.append((c, r, cached, o)))
    res = t.run()
    assert set(res.origins) <= set(ORIGINS) and sum(res.origins.values()) == res.evaluations == 16
    assert _sum_split(res, "measured") == res.measurements and _sum_split(res, "cache_hits") == res.cache_hits
    assert all(v["cache_hits"] + v["measured"] == res.origins[k] for k, v in res.origin_split.items())
    # after the first seeds, the surrogate's rounds chose more (seeds of believed sources or its
    # own proposals): the search went on past the initial seeds
    assert res.origins.get("seed", 0) >= TuneOptions().n_seeds
    assert res.origins.get("seed", 0) + res.origins.get("model", 0) > TuneOptions().n_seeds
    # the callback: every evaluation once, in evaluation order, with the Tuner's own counts
    assert [json.dumps(c, sort_keys=True) for c, *_ in seen] == \
        [json.dumps(c, sort_keys=True) for c in t.configs.values()]
    assert [o for *_, o in seen].count("seed") == res.origins["seed"]
    assert all(o == r.meta["origin"] for _, r, cached, o in seen if not cached)
    # the committed records carry their origin; a seed's names its source entry (another device)
    stored = {r.record_id: r for r in history_db.iter_records() if r.target_name == held.target["name"]}
    sources = {m: (key_of(replay[m].target), key_of(replay[m].workload)) for m in SOURCES}
    by_name = {replay[m].target["name"]: sources[m] for m in SOURCES}
    seeds = [stored[r.record_id] for _, r, cached, o in seen if o == "seed" and not cached]
    assert seeds and len(seeds) == res.origin_split["seed"]["measured"]
    for rec in seeds:
        sf = rec.meta["seeded_from"]
        assert rec.meta["origin"] == "seed" and sf["target_name"] != held.target["name"]
        assert (sf["target_key"], sf["workload_key"]) == by_name[sf["target_name"]]
        assert 0 < sf["similarity"] <= 1.0 + 1e-6
    others = [stored[r.record_id] for _, r, cached, o in seen if o != "seed"]
    assert others and all("seeded_from" not in r.meta and r.meta["origin"] in ORIGINS for r in others)
    # the first seed measured is the most similar device's best
    assert seeds[0].meta["seeded_from"]["target_name"] == res.seeds[0]["from_target"]
    # a rerun is answered by the DB: its own earlier records (resume), all cache hits, meta untouched
    seen2: list[tuple] = []
    again = Tuner(history_db, held.target, held.workload, held.space, KernelTunerReplayBackend(held),
                  TuneOptions(budget=16, seed=0), on_evaluation=lambda c, r, cached, o: seen2.append(o)).run()
    assert again.origins == {"resume": 16} and again.origin_split["resume"] == {"cache_hits": 16, "measured": 0,
                                                                               "failed": 0}
    assert seen2 == ["resume"] * 16 and again.to_json()["origins"] == {"resume": 16}


def test_a_cold_run_has_no_seed_origins_and_the_default_is_tagged(tmp_path, replay):
    held = replay[HELD]
    db = ParquetStore.open(tmp_path / "db")
    cold = Tuner(db, held.target, held.workload, held.space, KernelTunerReplayBackend(held),
                 TuneOptions(budget=14, seed=1, cold=True)).run()
    assert "seed" not in cold.origins and sum(cold.origins.values()) == cold.evaluations == 14
    assert cold.origins["random"] >= 3
    recs = list(db.iter_records())
    assert len(recs) == 14 and not any("seeded_from" in r.meta for r in recs)
    assert {r.meta["origin"] for r in recs} <= {"random", "model"}
    # a family default (here: the replayed best config) is evaluated first, as "default"
    default = held.optimum()[0]
    db2 = ParquetStore.open(tmp_path / "db2")
    first: list[str] = []
    res = Tuner(db2, held.target, held.workload, held.space, KernelTunerReplayBackend(held),
                TuneOptions(budget=5, seed=1, cold=True, start_default=True), defaults=default,
                on_evaluation=lambda c, r, cached, o: first.append(o)).run()
    assert first[0] == "default" and res.origins["default"] == 1 and "seed" not in res.origins
    (rec,) = [r for r in db2.iter_records() if r.meta["origin"] == "default"]
    assert json.dumps(rec.config, sort_keys=True) == json.dumps(default, sort_keys=True)


def test_run_summaries_hold_the_origin_counts(history_db, replay):
    from tunedb.transfer.search import runlog

    held = replay[HELD]
    results = []
    for cold in (False, True):
        watch, before = runlog.Stopwatch(), runlog.records_in(history_db)
        res = Tuner(history_db, held.target, held.workload, held.space, KernelTunerReplayBackend(held),
                    TuneOptions(budget=10, seed=0, cold=cold)).run()
        runlog.save_tuner_runs(history_db, "tune", held.target, [res], watch, before, cold=cold)
        results.append(res)
    warm_run, cold_run = history_db.runs("tune")[-2:]
    for run, res in zip((warm_run, cold_run), results):
        (task,) = run["tasks"]
        assert task["origins"] == res.origins and task["origin_split"] == res.origin_split
        assert run["origins"] == res.origins and run["origin_split"] == res.origin_split
        assert sum(run["origins"].values()) == run["evaluations"] == 10
    assert warm_run["origins"]["seed"] >= 1 and "seed" not in cold_run["origins"]
    # totals add up over tasks; a summary of tasks that did not record origins has none
    tot, split = runlog.origin_totals([{"origins": {"seed": 2}, "origin_split": {"seed": {"measured": 2}}},
                                       {"origins": {"seed": 1, "random": 3}}, {"evaluations": 4}])
    assert tot == {"seed": 3, "random": 3} and split == {"seed": {"cache_hits": 0, "measured": 2, "failed": 0}}
    assert runlog.origin_totals([{"evaluations": 4}]) == (None, None)
    hit = runlog.hit_task({"family": "x"}, 1.0)
    assert hit["origins"] == {} and hit["origin_split"] == {}
