"""The persisted base cost model (tunedb.transfer.search.modelcache) and the tuner's step timers."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tunedb.index import ParquetStore
from tunedb.index.memory.store import MemoryStore
from tunedb.transfer.measure.backend import lookup_or_measure
from tunedb.transfer.measure.replay import KernelTunerReplayBackend, ReplayData
from tunedb.transfer.search import modelcache
from tunedb.transfer.search.costmodel import CorrectedModel, FeatureSpace, spearman, training_data, training_set
from tunedb.transfer.search.tuner import TuneOptions, Tuner

from helpers import kernel_tuner_file, replay_history_db

SOURCES = ("A6000", "W7800")
HELD = "A4000"


@pytest.fixture(scope="module")
def replay():
    return {d: ReplayData(kernel_tuner_file(d)) for d in SOURCES + (HELD, "MI250X")}


@pytest.fixture(scope="module")
def base_path(tmp_path_factory, replay):
    return replay_history_db(tmp_path_factory.mktemp("cache_history") / "db", replay, SOURCES)


@pytest.fixture()
def db_copy(tmp_path, base_path):
    """A fresh copy of the two-device DB (no model cached), and the in-process cache emptied."""
    modelcache.clear_memory()

    def make(name: str = "db") -> ParquetStore:
        shutil.copytree(base_path, tmp_path / name)
        return ParquetStore.open(tmp_path / name)
    yield make
    modelcache.clear_memory()


def _family(replay) -> str:
    return replay[HELD].workload["family"]


def _tune(db, replay, **opt) -> dict:
    held = replay[HELD]
    res = Tuner(db, held.target, held.workload, held.space, KernelTunerReplayBackend(held),
                TuneOptions(budget=24, seed=3, **opt)).run()
    out = res.to_json()
    out.pop("overhead")  # seconds: differ from run to run
    return out


def test_persisted_model_is_reused_while_the_db_is_unchanged_and_refitted_when_it_changed(db_copy, replay):
    db = db_copy()
    fam = _family(replay)
    first = modelcache.base_model(db, fam)
    assert first is not None and first.source == "fitted" and first.changed == 0
    path = modelcache.cache_file(db, fam)
    assert path.is_file() and json.loads(path.read_text())["rows"] == first.rows
    assert modelcache.base_model(db, fam).source == "memory"
    modelcache.clear_memory()
    again = modelcache.base_model(db, fam)
    assert again.source == "disk" and again.rows == first.rows
    X = training_set(db, fam).X[:500]
    assert np.array_equal(again.model.predict_log(X), first.model.predict_log(X))  # exact round trip
    # a small change (< refit_fraction of the rows): the stored model still answers, the change counted
    small = list(replay[HELD].results.values())[:40]
    db.commit(small)
    modelcache.clear_memory()
    reused = modelcache.base_model(db, fam)
    assert reused.source == "disk" and reused.changed == sum(1 for r in small if r.status == "ok")
    # ... unless the caller refits on any change
    assert modelcache.base_model(db, fam, refit_fraction=0.0).source == "fitted"
    # a big change (a whole new device): refitted on it and persisted again
    db.commit(list(replay["MI250X"].results.values()))
    modelcache.clear_memory()
    refit = modelcache.base_model(db, fam)
    assert refit.source == "fitted" and refit.rows > first.rows
    modelcache.clear_memory()
    assert modelcache.base_model(db, fam).source == "disk"


def test_tuning_results_are_identical_with_and_without_the_cache(db_copy, replay):
    off = _tune(db_copy("a"), replay, model_cache=False)
    fresh = _tune(db_copy("b"), replay)  # fits the model now and persists it
    assert off["model"]["base"]["source"] == fresh["model"]["base"]["source"] == "fitted"
    # a third copy with the persisted model file in its cache dir: loaded from disk, same run
    c = db_copy("c")
    b_dir = ParquetStore.open(c.path.parent / "b").cache_dir() / modelcache.SUBDIR
    shutil.copytree(b_dir, c.cache_dir() / modelcache.SUBDIR)
    modelcache.clear_memory()
    loaded = _tune(c, replay)
    assert loaded["model"]["base"]["source"] == "disk"
    for d in (fresh, loaded):
        d["model"].pop("base")
    off["model"].pop("base")
    assert off == fresh == loaded
    assert off["model"]["fits"] >= 2 and off["seeds"]  # the correction was refitted during the run


@pytest.mark.parametrize("damage", ["garbage", "truncated", "edited", "other_version", "empty"])
def test_a_damaged_or_stale_cache_file_is_ignored_and_rewritten(db_copy, replay, damage):
    db = db_copy()
    fam = _family(replay)
    first = modelcache.base_model(db, fam)
    path = modelcache.cache_file(db, fam)
    text = path.read_text()
    if damage == "garbage":
        path.write_bytes(b"\x00\xffnot json")
    elif damage == "truncated":
        path.write_text(text[: len(text) // 2])
    elif damage == "edited":  # valid JSON, but the checksum no longer matches
        doc = json.loads(text)
        doc["rows"] += 1
        path.write_text(json.dumps(doc))
    elif damage == "other_version":
        doc = json.loads(text)
        doc["version"] = modelcache.FORMAT_VERSION + 1
        path.write_text(json.dumps(doc))
    else:
        path.write_text("")
    modelcache.clear_memory()
    again = modelcache.base_model(db, fam)
    assert again.source == "fitted" and again.rows == first.rows
    modelcache.clear_memory()
    assert modelcache.base_model(db, fam).source == "disk"  # rewritten sound
    assert _tune(db, replay)["best"] is not None  # and the tuner is fine with it


def test_a_model_of_another_db_state_is_not_reused_for_a_changed_family(db_copy, replay):
    """A cache file written for the DB before a big change (copied in from elsewhere) is stale."""
    old = db_copy("old")
    fam = _family(replay)
    modelcache.base_model(old, fam)
    new = db_copy("new")
    new.commit(list(replay["MI250X"].results.values()))
    shutil.copytree(old.cache_dir() / modelcache.SUBDIR, new.cache_dir() / modelcache.SUBDIR)
    modelcache.clear_memory()
    got = modelcache.base_model(new, fam)
    assert got.source == "fitted" and got.changed == 0


def test_no_base_model_below_the_minimum_and_for_an_unknown_family(replay):
    db = MemoryStore()
    assert modelcache.base_model(db, "nothing") is None
    db.commit(list(replay[HELD].results.values())[:10])
    assert modelcache.base_model(db, _family(replay)) is None


def test_training_set_equals_the_row_by_row_feature_matrix(db_copy, replay):
    db = db_copy()
    fam = _family(replay)
    ts = training_set(db, fam, max_records=3000, seed=2)
    cfgs, wls, tgs, costs = training_data(db, fam, max_records=3000, seed=2)
    fs = FeatureSpace.from_configs(cfgs)
    assert ts.features == fs and ts.rows == 3000
    assert np.array_equal(ts.X, fs.matrix(cfgs, wls, tgs))
    assert np.allclose(ts.y, np.log(costs))


def test_corrected_model_fits_the_residuals_and_leaves_the_base_alone(db_copy, replay):
    db = db_copy()
    base = modelcache.base_model(db, _family(replay)).model
    held = replay[HELD]
    ok = [r for r in held.results.values() if r.status == "ok"][:40]
    X = base.features_.matrix([r.config for r in ok], [held.workload] * len(ok), [held.target] * len(ok))
    y = np.log([r.cost for r in ok])
    before = base.predict_log(X).copy()
    m = base.corrected(X, y)
    assert isinstance(m, CorrectedModel) and m.n_records_ == base.n_records_ + len(ok)
    assert np.abs(m.predict_log(X) - y).mean() < np.abs(before - y).mean()
    assert np.array_equal(base.predict_log(X), before)
    assert np.array_equal(base.corrected(X[:2], y[:2]).predict_log(X), before)  # too few rows: the base


def test_spearman_matches_scipy_with_ties():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(3, 200))
        a = rng.integers(0, 6, n).astype(float)
        b = a * rng.random() + rng.integers(0, 4, n)
        want = scipy_stats.spearmanr(a, b).statistic
        got = spearman(a, b)
        assert (np.isnan(want) and np.isnan(got)) or got == pytest.approx(want, abs=1e-12)
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_overhead_names_every_step_and_lookup_or_measure_fills_its_timers(db_copy, replay):
    db = db_copy()
    held = replay[HELD]
    res = Tuner(db, held.target, held.workload, held.space, KernelTunerReplayBackend(held),
                TuneOptions(budget=12, seed=1)).run()
    assert list(res.overhead) == list(Tuner.OVERHEAD_STEPS)
    assert all(v >= 0 for v in res.overhead.values())
    assert res.overhead["total"] >= res.overhead["model_base"]
    assert res.to_json()["overhead"] == res.overhead
    timers: dict = {}
    cfgs = [r.config for r in list(held.results.values())[100:104]]
    lookup_or_measure(db, KernelTunerReplayBackend(held), held.target, held.workload, cfgs, timers=timers)
    assert set(timers) == {"lookup", "measure", "commit"}
