"""The numpy tree ensembles (tunedb.transfer.search.trees) against LightGBM itself, and a tuning
run in a fresh process that loads a persisted model without importing LightGBM or SciPy."""

from __future__ import annotations

import json
import subprocess
import sys

import lightgbm as lgb
import numpy as np
import pytest

from tunedb.transfer.search.trees import TreeEnsemble, boost_residuals

from helpers import kernel_tuner_file, replay_history_db


def _data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 8))
    X[:, 3] = rng.integers(0, 4, n)  # a knob with few values, as most tuning knobs are
    return X, 2 * X[:, 0] + np.sin(3 * X[:, 1]) + X[:, 3] ** 2 + 0.1 * rng.normal(size=n)


@pytest.mark.parametrize("leaves,rounds", [(31, 120), (7, 30), (2, 5)])
def test_ensemble_predicts_what_lightgbm_predicts(leaves, rounds):
    X, y = _data(2000)
    b = lgb.train({"objective": "regression", "num_leaves": leaves, "min_data_in_leaf": 3, "verbose": -1,
                   "bagging_fraction": 0.9, "bagging_freq": 1, "seed": 1}, lgb.Dataset(X, label=y),
                  num_boost_round=rounds)
    te = TreeEnsemble.from_lightgbm_text(b.model_to_string())
    assert te.n_trees == rounds
    Xt, _ = _data(500, seed=1)
    Xt[:, 3] = np.random.default_rng(2).integers(-1, 6, 500)  # values outside the training range
    Xt[::7, 2] = np.nan  # missing values: LightGBM's rules (treated as 0 here)
    Xt[::11, 0] = 0.0
    assert np.array_equal(te.predict(Xt), b.predict(Xt))  # bit for bit
    assert np.array_equal(te.predict(Xt.astype(np.float32)), b.predict(Xt.astype(np.float32)))
    assert te.predict(Xt[:0]).shape == (0,)


def test_a_model_with_constant_trees_and_nan_aware_splits():
    X, y = _data(300)
    X[::3, 1] = np.nan  # LightGBM learns a missing-value direction for this feature
    b = lgb.train({"objective": "regression", "num_leaves": 5, "verbose": -1, "min_data_in_leaf": 3},
                  lgb.Dataset(X, label=y), num_boost_round=20)
    te = TreeEnsemble.from_lightgbm_text(b.model_to_string())
    Xt, _ = _data(200, seed=3)
    Xt[::2, 1] = np.nan
    np.testing.assert_allclose(te.predict(Xt), b.predict(Xt), rtol=0, atol=1e-12)
    const = lgb.train({"objective": "regression", "verbose": -1}, lgb.Dataset(X[:5], label=np.ones(5)),
                      num_boost_round=3)  # too few rows to split: one-leaf trees
    np.testing.assert_allclose(TreeEnsemble.from_lightgbm_text(const.model_to_string()).predict(Xt),
                               const.predict(Xt), atol=1e-12)


def test_unsupported_models_are_refused():
    X, y = _data(300)
    X[:, 3] = X[:, 3].astype(int)
    b = lgb.train({"objective": "regression", "verbose": -1, "min_data_per_group": 1, "cat_smooth": 1},
                  lgb.Dataset(X, label=y, categorical_feature=[3]), num_boost_round=5)
    with pytest.raises(ValueError, match="categorical"):
        TreeEnsemble.from_lightgbm_text(b.model_to_string())
    with pytest.raises(ValueError, match="no trees"):
        TreeEnsemble.from_lightgbm_text("tree\nversion=v4\n")


def test_residual_boosting_is_lightgbm_init_score_boosting():
    X, y = _data(60)
    base = 0.5 * X[:, 0]
    ours = boost_residuals(X, y - base, rounds=30)
    theirs = lgb.train({"objective": "regression", "learning_rate": 0.1, "num_leaves": 7, "min_data_in_leaf": 3,
                        "min_data_in_bin": 1, "verbose": -1, "deterministic": True, "force_row_wise": True},
                       lgb.Dataset(X, label=y, init_score=base), num_boost_round=30)
    np.testing.assert_allclose(ours.predict(X), theirs.predict(X), atol=1e-5)
    Xt, _ = _data(200, seed=5)
    assert np.corrcoef(ours.predict(Xt), theirs.predict(Xt))[0, 1] > 0.99
    assert np.mean((y - base - ours.predict(X)) ** 2) < 0.5 * np.mean((y - base) ** 2)


def test_residual_boosting_weights():
    """Weights scale each row's pull (LightGBM differs here: it estimates a leaf's row count from
    its hessian sum; ours counts rows)."""
    X, y = _data(60)
    plain = boost_residuals(X, y, rounds=10).predict(X)
    np.testing.assert_allclose(boost_residuals(X, y, weight=np.full(60, 3.0), rounds=10).predict(X), plain,
                               atol=1e-12)
    w = np.linspace(0.1, 2.0, 60)
    const = boost_residuals(X, y, weight=w, rounds=4, min_leaf=31)  # no split allowed: one leaf a tree
    expect = (1 - 0.9 ** 4) * np.dot(w, y) / w.sum()
    np.testing.assert_allclose(const.predict(X), expect, rtol=1e-12)
    tiny = boost_residuals(X[:5], y[:5], rounds=3)  # under 2 x min_leaf rows: constant trees
    assert np.ptp(tiny.predict(X)) == 0.0


FRESH = """
import json, sys
import tunedb
from tunedb.transfer.measure.replay import KernelTunerReplayBackend, ReplayData
from tunedb.transfer.search.tuner import TuneOptions, Tuner
held = ReplayData(sys.argv[2])
res = Tuner(tunedb.open(sys.argv[1]), held.target, held.workload, held.space, KernelTunerReplayBackend(held),
            TuneOptions(budget=12, seed=1)).run()
print(json.dumps({"mods": [m for m in ("lightgbm", "sklearn", "scipy") if m in sys.modules],
                  "evals": res.to_json()["evaluations"], "base": res.overhead.get("model_base", 0)}))
"""


def test_a_first_run_after_the_fit_imports_neither_lightgbm_nor_scipy(tmp_path):
    """The model is fitted (LightGBM) once; a tuning run in a new process then loads it, predicts
    and fits its correction in numpy: the 1-2 s imports of LightGBM/scikit-learn/SciPy are gone."""
    from tunedb.transfer.measure.replay import ReplayData
    from tunedb.transfer.search import modelcache

    replay = {d: ReplayData(kernel_tuner_file(d)) for d in ("A6000", "W7800")}
    path = replay_history_db(tmp_path / "db", replay, ("A6000", "W7800"))
    import tunedb

    db = tunedb.open(path)
    fam = replay["A6000"].workload["family"]
    assert modelcache.prepare(db, [fam])  # what `tunedb import` does
    db.close()
    out = subprocess.run([sys.executable, "-c", FRESH, str(path), str(kernel_tuner_file("A4000"))],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["mods"] == []
    assert got["evals"] > 0


def test_fitting_a_base_model_imports_no_python_package_of_lightgbm(tmp_path):
    """``tunedb import`` (and a run whose DB changed) fits through LightGBM's C library."""
    from tunedb.transfer.measure.replay import ReplayData

    path = replay_history_db(tmp_path / "db", {"A6000": ReplayData(kernel_tuner_file("A6000"))}, ("A6000",))
    code = ("import json, sys, tunedb; from tunedb.transfer.search import modelcache; "
            "db = tunedb.open(sys.argv[1]); fams = sorted({e['family'] for e in db.entries().to_pylist()}); "
            "fit = modelcache.prepare(db, fams); m = modelcache.base_model(db, fams[0]); "
            "print(json.dumps({'mods': [x for x in ('lightgbm', 'sklearn', 'scipy') if x in sys.modules], "
            "'fit': fit, 'rho': m.model.heldout_spearman_}))")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["mods"] == [] and got["fit"] and got["rho"] > 0.5


def test_the_c_library_trains_what_the_python_package_trains():
    from tunedb.transfer.search import lgbm_capi

    X, y = _data(1500)
    w = np.random.default_rng(4).uniform(0.2, 1.0, 1500)
    params = {"objective": "regression", "learning_rate": 0.1, "num_leaves": 31, "min_data_in_leaf": 3,
              "bagging_fraction": 0.9, "bagging_freq": 1, "feature_fraction": 0.9, "seed": 3, "num_threads": 1,
              "verbose": -1, "deterministic": True, "force_row_wise": True}
    ours = TreeEnsemble.from_lightgbm_text(lgbm_capi.train(X, y, params, 60, weight=w))
    theirs = lgb.train(params, lgb.Dataset(X, label=y, weight=w), num_boost_round=60)
    Xt, _ = _data(300, seed=9)
    assert np.array_equal(ours.predict(Xt), theirs.predict(Xt))
    with pytest.raises(ValueError, match="plain value"):
        lgbm_capi.train(X, y, {"objective": "regression x=1"}, 1)
    with pytest.raises(ValueError, match="parameter name"):
        lgbm_capi.train(X, y, {"bad name": 1}, 1)
    with pytest.raises(RuntimeError, match="LightGBM"):
        lgbm_capi.train(X, y, {"objective": "no_such_objective", "verbose": -1}, 1)
