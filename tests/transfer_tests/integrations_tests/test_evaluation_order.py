"""The configs a run evaluates, and their order, do not depend on how tunedb reads its inputs:
a replay file read lazily (``ReplayData``: Records built when first read) answers exactly what
the importer's full parse answers, so ``tunedb tune --replay`` evaluates the same configs in the
same order as a Tuner over the fully parsed file; the same seed and history repeat a run,
for the CLI and for ``WarmStart`` in Kernel Tuner's simulation mode; and the CLI and
``WarmStart``, given the same history and seed, evaluate the same configs in the same order
and answer the same best (one engine).  Real files, real
subprocesses, Kernel Tuner's real ``tune_kernel``."""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tunedb.index.model.keys import canonical_json
from tunedb.transfer.interop import ImportIssue
from tunedb.transfer.measure.replay import ReplayData
from tunedb.transfer.space import Space
from tunedb.transfer.tuners.kernel_tuner.cachefile import load_cache, parse_loaded

from helpers import SHARED_DATA, run_cli

CONV = SHARED_DATA / "kernel_tuner" / "convolution_milo"
HELD = "W7800"
HISTORY = ("A100", "A6000")
BUDGET = 20

pytestmark = pytest.mark.skipif(not CONV.is_dir(), reason="shared Kernel Tuner data not present")


def eager(path: Path) -> tuple[dict, list[dict], int]:
    """(config JSON -> Record, configs of the non-invalid ones, issues): the importer's parse of
    every entry, kept as a replay keeps it (a later entry of the same config wins)."""
    results, bad = {}, 0
    for item in parse_loaded(load_cache(path), path):
        if isinstance(item, ImportIssue):
            bad += 1
        else:
            results[item.config_json] = item
    return results, [r.config for r in results.values() if r.status != "invalid"], bad


def same(a, b) -> bool:
    """Records equal; an entry without a timestamp is stamped when its Record is built (by the
    importer as by a replay), so only those may differ in it."""
    entry = a.meta["kernel_tuner"]["entry"]
    if not isinstance(entry, dict) or "timestamp" not in entry:
        a = dataclasses.replace(a, timestamp=b.timestamp)
    return a == b


def odd_copy(tmp_path: Path) -> Path:
    """The held-out file with entries the lazy reading must leave to the importer: a NaN time,
    a non-ASCII field, a nested field, a config written twice (integral float), an error string."""
    doc = json.loads(gzip.decompress((CONV / f"{HELD}.json.gz").read_bytes()))
    items = list(doc["cache"].items())[:60]
    cache = dict(items)
    k0, e0 = items[0]
    cache[k0] = {**e0, "times": [1.5, float("nan")]}
    k1, e1 = items[1]
    cache[k1] = {**e1, "note": "caf\u00e9"}
    k2, e2 = items[2]
    cache[k2] = {**e2, "nested": {"a": [1, 2.5]}}
    k3, e3 = items[3]
    twin = {**e3, "time": e3["time"] * 2 if isinstance(e3["time"], float) else e3["time"]}
    twin[doc["tune_params_keys"][0]] = float(e3[doc["tune_params_keys"][0]])
    cache[k3 + ",twin"] = twin  # a key the importer never decodes (the entry names its parameters)
    k4, _ = items[4]
    cache[k4] = "CompilationFailedConfig"
    doc["cache"] = cache
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("which", ["real", "odd"])
def test_lazy_replay_data_is_the_importers_full_parse(tmp_path, which):
    path = CONV / f"{HELD}.json.gz" if which == "real" else odd_copy(tmp_path)
    want, valid, bad = eager(path)
    data = ReplayData(path)
    assert data.skipped == bad and (bad > 0) == (which == "odd")
    assert [json.dumps(c, sort_keys=True) for c in data.space.finite] == \
        [json.dumps(c, sort_keys=True) for c in Space(knobs=data.space.knobs, finite=valid).finite]
    assert len(data.space.finite) == len(valid)
    assert list(data.results) == list(want) and len(data.results) == len(want)
    some = list(want)[::97] + list(want)[-3:]
    for cj in some:  # read one by one first (built on demand), then all at once
        assert same(data.results[cj], want[cj])
        assert data.results.get(cj) is data.results[cj]
    got = dict(data.results.items())
    assert list(got) == list(want) and all(same(got[k], want[k]) for k in want)
    assert data.results.get(canonical_json({"no": "such config"})) is None
    first = next(iter(want.values()))
    assert data.target == first.target and data.workload == first.workload


def replay_order(db_dir: Path) -> list[str]:
    """Config JSONs of the replayed records of ``db_dir``, in commit order."""
    import tunedb

    t = tunedb.open(str(db_dir)).records()
    rows = [r for r in t.select(["config", "source", "committed"]).to_pylist() if r["source"] == "replay"]
    return [r["config"] for r in sorted(rows, key=lambda r: r["committed"])]


@pytest.fixture(scope="module")
def history_db(tmp_path_factory) -> Path:
    """A Parquet DB of the history devices' caches, imported by the CLI."""
    d = tmp_path_factory.mktemp("order") / "history"
    p = run_cli("import", "kernel-tuner", *[str(CONV / f"{x}.json.gz") for x in HISTORY], "--db", str(d))
    assert p.returncode == 0, p.stderr
    return d


def test_replayed_cli_tune_evaluates_what_a_fully_parsed_replay_evaluates(tmp_path, history_db):
    from tunedb.index.opener import open_store
    from tunedb.transfer.measure.replay import KernelTunerReplayBackend, ReplayStore
    from tunedb.transfer.search.tuner import TuneOptions, Tuner

    held = CONV / f"{HELD}.json.gz"
    orders = []
    for i in range(2):  # the CLI twice, each on a fresh copy of the same history
        d = tmp_path / f"cli{i}"
        shutil.copytree(history_db, d)
        p = run_cli("tune", "--replay", str(held), "--budget", str(BUDGET), "--db", str(d), "--json")
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["evaluations"] == BUDGET
        orders.append(replay_order(d))
    assert len(orders[0]) == BUDGET and orders[0] == orders[1]

    # the same run over the importer's full parse of the file (every Record built up front)
    d = tmp_path / "eager"
    shutil.copytree(history_db, d)
    data = ReplayData(held)
    data.results, _, _ = eager(held)
    inner = open_store(str(d))
    opts = TuneOptions(budget=BUDGET, seed=0, confirm_top=2, confirm_rounds=2)
    Tuner(ReplayStore(inner, data), data.target, data.workload, data.space, KernelTunerReplayBackend(data), opts,
          defaults={}, hardware_knobs={}).run()
    inner.close()
    assert replay_order(d) == orders[0]


def test_warm_start_in_simulation_mode_repeats_its_evaluations(tmp_path):
    kernel_tuner = pytest.importorskip("kernel_tuner")
    from tunedb.index.memory.store import MemoryStore
    from tunedb.kernel_tuner import WarmStart
    from tunedb.transfer.interop import collect

    records, rep = collect("kernel-tuner", [CONV / f"{x}.json.gz" for x in HISTORY])
    assert rep.skipped == 0
    doc = json.loads(gzip.decompress((CONV / "A4000.json.gz").read_bytes()))
    cache = tmp_path / "A4000.json"
    cache.write_text(json.dumps(doc))
    t1 = json.loads((CONV.parent / "convolution_milo.json").read_text())
    restrictions = [c["Expression"] for c in t1["ConfigurationSpace"]["Conditions"]]
    keys = list(doc["tune_params_keys"])
    orders = []
    for _ in range(2):
        db = MemoryStore()
        db.commit(records)
        ws = WarmStart(db)
        res, _env = kernel_tuner.tune_kernel(
            doc["kernel_name"], "__global__ void convolution_kernel(float *a, float *b, float *c) {}",
            doc["problem_size"], [np.zeros(1, np.float32)] * 3, doc["tune_params"], restrictions=restrictions,
            strategy=ws, strategy_options={"max_fevals": BUDGET}, simulation_mode=True, cache=str(cache), quiet=True)
        order = [canonical_json({k: r[k] for k in keys}) for r in res]
        assert len(order) == BUDGET == ws.last_run.evaluations
        committed = [r.config_json for r in db.entry_records(ws.last_run.target, ws.last_run.workload)]
        assert sorted(committed) == sorted(order)  # every evaluation is a record of this run
        orders.append(order)
    assert orders[0] == orders[1]


def warm_start_run(tmp_path: Path, db, held: str, budget: int, seed: int):
    """Kernel Tuner's ``tune_kernel`` with ``WarmStart(db)`` (default options but the seed) in
    simulation mode on ``held``'s cache: (the evaluated configs' JSON in order, the strategy)."""
    kernel_tuner = pytest.importorskip("kernel_tuner")
    from tunedb.kernel_tuner import WarmStart, warm_start_options

    doc = json.loads(gzip.decompress((CONV / f"{held}.json.gz").read_bytes()))
    cache = tmp_path / f"{held}.json"
    cache.write_text(json.dumps(doc))
    t1 = json.loads((CONV.parent / "convolution_milo.json").read_text())
    restrictions = [c["Expression"] for c in t1["ConfigurationSpace"]["Conditions"]]
    keys = list(doc["tune_params_keys"])
    ws = WarmStart(db, warm_start_options(seed=seed))
    res, _env = kernel_tuner.tune_kernel(
        doc["kernel_name"], "__global__ void convolution_kernel(float *a, float *b, float *c) {}",
        doc["problem_size"], [np.zeros(1, np.float32)] * 3, doc["tune_params"], restrictions=restrictions,
        strategy=ws, strategy_options={"max_fevals": budget}, simulation_mode=True, cache=str(cache), quiet=True)
    return [canonical_json({k: r[k] for k in keys}) for r in res], ws


@pytest.mark.slow
@pytest.mark.parametrize("held,seed", [("W7800", 0), ("A4000", 3)])
def test_cli_and_warm_start_evaluate_the_same_configs_in_the_same_order(tmp_path, history_db, held, seed):
    """One engine: ``tunedb tune --replay`` (its defaults) and ``WarmStart`` (its defaults)
    inside Kernel Tuner, over copies of the same history with the same seed, evaluate the same
    configs in the same order and answer the same best config at the same cost.  (Kernel
    Tuner's searchspace lists the configs in its own order, the cache file in another: the
    space keeps them in one order.)"""
    pytest.importorskip("kernel_tuner")
    import tunedb

    budget = 30
    runs = {}
    for confirm in ("2", "0"):  # the CLI's default (its leaders re-measured after the budget), and without
        d = tmp_path / f"cli{confirm}"
        shutil.copytree(history_db, d)
        p = run_cli("tune", "--replay", str(CONV / f"{held}.json.gz"), "--budget", str(budget), "--seed", str(seed),
                    "--confirm", confirm, "--db", str(d), "--json")
        assert p.returncode == 0, p.stderr
        runs[confirm] = (json.loads(p.stdout), replay_order(d))
    cli, cli_order = runs["2"]
    assert len(cli_order) == budget and runs["0"][1] == cli_order  # confirmation comes after the search

    w = tmp_path / "ws"
    shutil.copytree(history_db, w)
    db = tunedb.open(str(w))
    ws_order, ws = warm_start_run(tmp_path, db, held, budget, seed)
    db.close()
    assert ws.last_run.evaluations == budget and ws.last_run.db_answers == 0
    assert ws_order == cli_order
    assert [s["from_target"] for s in ws.last_run.seeds] == [s["from_target"] for s in cli["seeds"]]
    # the same answer, decided by the Tuner for both (the CLI without its confirmation rounds)
    plain = runs["0"][0]["best"]
    assert ws.last_run.best_config == plain["config"] and ws.last_run.best_time_s == plain["cost"]
    assert canonical_json(cli["best"]["config"]) in cli_order
