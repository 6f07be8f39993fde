"""tunedb.kernel_tuner (WarmStart, Recorder) through Kernel Tuner's real ``tune_kernel`` in its
simulation mode: Kernel Tuner's simulation runner replays a held-out device's cache file (the
"GPU"); the DB holds other devices' imported records.  Nothing of Kernel Tuner is mocked."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tunedb.transfer.search.tuner import TuneOptions

kernel_tuner = pytest.importorskip("kernel_tuner")

from kernel_tuner.searchspace import Searchspace  # noqa: E402
from kernel_tuner.strategies.common import CostFunc  # noqa: E402

from tunedb.index.memory.store import MemoryStore  # noqa: E402
from tunedb.index.model.keys import key_of  # noqa: E402
from tunedb.kernel_tuner import (  # noqa: E402
    KernelTunerBackend,
    Recorder,
    WarmStart,
    target_of,
    warm_start_options,
    workload_of,
)
from tunedb.transfer.interop import collect  # noqa: E402
from tunedb.transfer.measure.backend import lookup_or_measure  # noqa: E402

from helpers import ROOT, SHARED_DATA  # noqa: E402

KT = SHARED_DATA / "kernel_tuner"
CONV = KT / "convolution_milo"
HELD = "A4000"           # the replayed "GPU"
OTHERS = ("A100", "A6000")  # in the DB
SOURCE = '__global__ void convolution_kernel(float *out, float *in, float *filter) {}'

pytestmark = pytest.mark.skipif(not CONV.is_dir(), reason="shared Kernel Tuner data not present")


# ------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def space_def() -> dict:
    t1 = json.loads((KT / "convolution_milo.json").read_text())
    return {"restrictions": [c["Expression"] for c in t1["ConfigurationSpace"]["Conditions"]]}


@pytest.fixture(scope="module")
def other_records() -> list:
    recs, rep = collect("kernel-tuner", [CONV / f"{d}.json.gz" for d in OTHERS])
    assert rep.skipped == 0
    return recs


@pytest.fixture(scope="module")
def caches(tmp_path_factory) -> dict:
    """Device -> (plain JSON cache path written for Kernel Tuner, its document)."""
    out = {}
    folder = tmp_path_factory.mktemp("kt_caches")
    for dev in (HELD, "A100"):
        doc = json.loads(gzip.decompress((CONV / f"{dev}.json.gz").read_bytes()))
        path = folder / f"{dev}.json"
        path.write_text(json.dumps(doc))
        out[dev] = (path, doc)
    return out


@pytest.fixture
def db(other_records) -> MemoryStore:
    s = MemoryStore()
    s.commit(other_records)
    return s


def tune(caches, space_def, strategy, dev: str = HELD, max_fevals: int = 10, cache: Path | None = None):
    path, doc = caches[dev]
    args = [np.zeros(1, np.float32)] * 3
    return kernel_tuner.tune_kernel(doc["kernel_name"], SOURCE, doc["problem_size"], args, doc["tune_params"],
                                    restrictions=space_def["restrictions"], strategy=strategy,
                                    strategy_options={"max_fevals": max_fevals}, simulation_mode=True,
                                    cache=str(cache or path), quiet=True)


def keys_of(doc) -> list[str]:
    return list(doc["tune_params_keys"])


def key(cfg, keys) -> str:
    return ",".join(str(cfg[k]) for k in keys)


def entry_records(db, doc):
    """The DB's records of the held-out (target, workload), by cache key."""
    t = target_of(doc["device_name"] or HELD)
    w = workload_of(doc["kernel_name"], doc["problem_size"], keys_of(doc))
    table = db.records(t, w)
    out = {}
    for cfg, costs, status, rid in zip(table.column("config").to_pylist(), table.column("costs").to_pylist(),
                                       table.column("status").to_pylist(), table.column("record_id").to_pylist()):
        c = json.loads(cfg)
        out.setdefault(key(c, keys_of(doc)), []).append((costs, status, rid))
    return out


def cached_seconds(doc, k) -> list[float]:
    e = doc["cache"][k]
    return [t * 1e-3 for t in (e.get("times") or [e["time"]])]


# ----------------------------------------------------------------------------- WarmStart
def test_warm_start_commits_every_feval_with_the_replayed_time(db, caches, space_def):
    path, doc = caches[HELD]
    ws = WarmStart(db)
    results, env = tune(caches, space_def, ws, max_fevals=12)
    run = ws.last_run
    assert run.kt_fevals == 12 and run.db_answers == 0 and run.stopped_by == "kernel_tuner"
    assert len(results) == 12 and all(r["tunedb"] == "measured" for r in results)
    keys = keys_of(doc)
    stored = entry_records(db, doc)
    assert sorted(stored) == sorted(key(r, keys) for r in results)  # one record per feval, nothing else
    for r in results:
        (costs, status, rid), = stored[key(r, keys)]
        assert status == "ok" and rid == r["tunedb_record_id"]
        assert costs == pytest.approx(cached_seconds(doc, key(r, keys)), rel=1e-12)
    # restrictions: every evaluated config is in Kernel Tuner's searchspace (asked, not evaluated here)
    ss = Searchspace(doc["tune_params"], space_def["restrictions"], 1_000_000_000)
    assert all(ss.is_param_config_valid(tuple(r[k] for k in keys)) for r in results)
    # Kernel Tuner's own bookkeeping: the best of the times it was given
    assert env["best_config"]["time"] == pytest.approx(min(r["time"] for r in results))
    # the run's best is the one estimator's (one record per config here: Kernel Tuner's time, the mean)
    ests = {key(r, keys): db.cost(run.target, run.workload, {k: r[k] for k in keys}) for r in results}
    best_key = min(ests, key=lambda k: ests[k].value)
    assert key(run.best_config, keys) == best_key and run.best_time_s == ests[best_key].value
    assert run.best_time_s == pytest.approx(doc["cache"][best_key]["time"] * 1e-3, rel=1e-12)
    assert key(env["best_config"], keys) == best_key  # tunedb's best is Kernel Tuner's
    assert run.best_estimate == ests[best_key].to_dict() and run.best_estimate["records"] == 1
    assert ws.last_result.best_cost == run.best_time_s


def test_seeds_are_the_other_devices_bests(db, caches, space_def):
    path, doc = caches[HELD]
    keys = keys_of(doc)
    w = workload_of(doc["kernel_name"], doc["problem_size"], keys)
    bests = set()
    for dev in OTHERS:
        other = json.loads(gzip.decompress((CONV / f"{dev}.json.gz").read_bytes()))
        bests |= {key(r.config, keys) for r in db.best(target_of(other["device_name"]), w, k=8)}
    ws = WarmStart(db)
    results, _ = tune(caches, space_def, ws, max_fevals=8)
    assert {s["from_target"] for s in ws.last_run.seeds} == {"NVIDIA A100-PCIE-40GB", "NVIDIA RTX A6000"}
    first = [key(r, keys) for r in results[:4]]
    assert all(k in bests for k in first), first
    # the results follow the Tuner's evaluations (its on_evaluation callback), each committed with
    # its origin; the seeds' records name the device entry that seeded them
    table = db.records(target_of(doc["device_name"] or HELD), w)
    meta = {key(json.loads(c), keys): json.loads(m) for c, m in zip(table.column("config").to_pylist(),
                                                                    table.column("meta").to_pylist())}
    assert len(results) == ws.last_result.evaluations == sum(ws.last_result.origins.values())
    assert [meta[key(r, keys)]["origin"] for r in results].count("seed") == ws.last_result.origins["seed"]
    assert all(meta[k]["origin"] == "seed" and meta[k]["seeded_from"]["target_name"] in
               {"NVIDIA A100-PCIE-40GB", "NVIDIA RTX A6000"} for k in first)
    # better than what a random first 4 would give on this space (the seeds transfer)
    ok = sorted(v["time"] for v in doc["cache"].values() if not isinstance(v.get("time"), str))
    assert min(r["time"] for r in results[:4]) <= ok[len(ok) // 20]  # within the best 5% of the device


def test_imported_cache_and_live_run_are_one_entry_and_db_answers_are_not_fevals(db, caches, space_def):
    path, doc = caches[HELD]
    keys = keys_of(doc)
    held_recs, _ = collect("kernel-tuner", [CONV / f"{HELD}.json.gz"])
    some = sorted((r for r in held_recs if r.status == "ok"), key=lambda r: r.cost)[100:105]
    db.commit(some)
    ws = WarmStart(db)
    results, env = tune(caches, space_def, ws, max_fevals=10)
    run = ws.last_run
    # same (target, workload) keys as the importer
    assert len({(r.target_key, r.workload_key) for r in some}) == 1
    assert key_of(run.target) == some[0].target_key and key_of(run.workload) == some[0].workload_key
    assert run.db_answers == 5 and run.kt_fevals == 5 and run.evaluations == 10
    db_results = [r for r in results if r["tunedb"] == "db"]
    assert {r["tunedb_record_id"] for r in db_results} == {r.record_id for r in some}
    assert all(r["compile_time"] == 0 and r["benchmark_time"] == 0 for r in db_results)
    for r in db_results:
        # the config's estimate, one Kernel Tuner record: exactly the time Kernel Tuner wrote (the mean)
        entry = doc["cache"][key(r, keys)]
        assert r["time"] == entry["time"] and isinstance(r["time"], float)
        assert r["tunedb_estimate"]["records"] == 1 and r["tunedb_estimate"]["statistic"] == "mean"
        # Kernel Tuner's field order: the parameters, then the entry as the cache file holds it
        assert list(r)[:len(keys)] == keys
        assert [k for k in r if k not in keys][:len(entry) - len(keys)] == [k for k in entry if k not in keys]
        assert r["tunedb_estimate"]["value"] == pytest.approx(r["time"] * 1e-3)
    stored = entry_records(db, doc)
    assert len(stored) == 10 and all(len(v) == 1 for v in stored.values())  # nothing measured twice
    assert env["best_config"]["time"] == pytest.approx(min(r["time"] for r in results))


def test_a_db_answer_is_the_configs_estimate_not_one_of_its_records(db, caches, space_def):
    """A config with records of 1, 2 and 10 ms (1 ms committed last) is answered as 2 ms (n=3),
    not as its latest record or its minimum; a config whose minimum (0.1 ms) is a fluke among
    50 and 60 ms is not the run's best, neither for tunedb nor for Kernel Tuner."""
    from tunedb.index.model.record import Record

    path, doc = caches[HELD]
    keys = keys_of(doc)
    t = target_of(doc["device_name"] or HELD)
    w = workload_of(doc["kernel_name"], doc["problem_size"], keys)
    ok = sorted(k for k, v in doc["cache"].items() if isinstance(v.get("time"), float))
    cx, cz = ({p: doc["cache"][k][p] for p in keys} for k in (ok[10], ok[20]))
    for cfg, ms in ((cx, (2.0, 10.0, 1.0)), (cz, (50.0, 60.0, 0.1))):
        for m in ms:  # one commit each: the last one is what lookup answers
            db.commit(Record(t, w, cfg, costs=[m * 1e-3]))
    ws = WarmStart(db)
    results, env = tune(caches, space_def, ws, max_fevals=8)
    run = ws.last_run
    assert run.db_answers == 2 and run.kt_fevals == 6
    answers = {key(r, keys): r for r in results if r["tunedb"] == "db"}
    rx, rz = answers[key(cx, keys)], answers[key(cz, keys)]
    assert rx["time"] == pytest.approx(2.0) and rz["time"] == pytest.approx(50.0)  # ms, as Kernel Tuner counts
    est = rx["tunedb_estimate"]
    assert est["records"] == 3 and est["value"] == pytest.approx(2e-3)
    assert (est["lo"], est["hi"]) == pytest.approx((1e-3, 10e-3)) and est["coverage"] == pytest.approx(0.75)
    assert rx["times"] == pytest.approx([1.0])  # the repeats of the record that answered the lookup
    assert db.cost(t, w, cx).value == pytest.approx(2e-3)
    # neither tunedb's best nor Kernel Tuner's is the 0.1 ms fluke
    assert key(run.best_config, keys) != key(cz, keys) and run.best_time_s < 50e-3
    assert key(env["best_config"], keys) != key(cz, keys)
    assert env["best_config"]["time"] == pytest.approx(min(r["time"] for r in results))


def test_rerun_answers_from_the_db(db, caches, space_def):
    path, doc = caches[HELD]
    ws = WarmStart(db)
    first, _ = tune(caches, space_def, ws, max_fevals=10)
    again, env = tune(caches, space_def, ws, max_fevals=10)
    assert ws.last_run.kt_fevals == 0 and ws.last_run.db_answers == 10
    assert [r["tunedb"] for r in again] == ["db"] * 10
    keys = keys_of(doc)
    assert sorted(key(r, keys) for r in again) == sorted(key(r, keys) for r in first)
    assert len(entry_records(db, doc)) == 10
    # resume: a larger budget measures only the difference
    more, _ = tune(caches, space_def, ws, max_fevals=14)
    assert ws.last_run.db_answers == 10 and ws.last_run.kt_fevals == 4
    assert len(entry_records(db, doc)) == 14
    # each call stored its run summary (what the dashboard's pipeline view reads)
    runs = db.runs(kind="kernel-tuner")
    assert [(r["kt_fevals"], r["db_answers"]) for r in runs] == [(10, 0), (0, 10), (4, 10)]  # oldest first
    assert ws.last_run.run_id == runs[-1]["run_id"] and all(r["device"] is None for r in runs)  # simulated


def test_max_fevals_stop_keeps_everything_and_resume_false_measures_anew(db, caches, space_def):
    path, doc = caches[HELD]
    ws = WarmStart(db, resume=False)
    tune(caches, space_def, ws, max_fevals=7)
    assert ws.last_run.kt_fevals == 7 and len(entry_records(db, doc)) == 7
    tune(caches, space_def, ws, max_fevals=5)
    assert ws.last_run.db_answers == 7 and ws.last_run.kt_fevals == 5
    assert len(entry_records(db, doc)) == 12


class InterruptingWarmStart(WarmStart):
    """WarmStart whose runner sends this process a real SIGINT after ``after`` runner calls."""

    def __init__(self, db, after: int) -> None:
        super().__init__(db)
        self.after = after
        self.calls = 0

    def tune(self, searchspace, runner, tuning_options):
        orig = runner.run

        def run(parameter_space, options):
            out = orig(parameter_space, options)
            self.calls += 1
            if self.calls == self.after:
                os.kill(os.getpid(), signal.SIGINT)
            return out

        runner.run = run
        return super().tune(searchspace, runner, tuning_options)


def test_ctrl_c_keeps_everything_measured_and_a_rerun_resumes(db, caches, space_def):
    path, doc = caches[HELD]
    ws = InterruptingWarmStart(db, after=5)
    with pytest.raises(KeyboardInterrupt):
        tune(caches, space_def, ws, max_fevals=10)
    assert ws.last_run.stopped_by == "interrupted"
    kept = len(entry_records(db, doc))
    assert kept in (4, 5)  # the measurement the signal hit may be lost, none before it
    assert kept == ws.last_run.committed
    again = WarmStart(db)
    results, _ = tune(caches, space_def, again, max_fevals=10)
    assert again.last_run.db_answers == kept and again.last_run.kt_fevals == 10 - kept
    assert len(entry_records(db, doc)) == 10


# ------------------------------------------------------------------------------ failures
class EvaluateGiven:
    """A user strategy (Kernel Tuner's protocol, Kernel Tuner's CostFunc) that evaluates given configs."""

    def __init__(self, configs) -> None:
        self.configs = configs

    def tune(self, searchspace, runner, tuning_options):
        cf = CostFunc(searchspace, tuning_options, runner, snap=False)
        for c in self.configs:
            cf.eval_all([list(c.values())])
        return cf.results


class BackendOnGiven:
    """Runs tunedb's Kernel Tuner backend (the one WarmStart measures with) on given configs."""

    def __init__(self, db, configs) -> None:
        self.db, self.configs, self.records = db, configs, None

    def tune(self, searchspace, runner, tuning_options):
        keys = list(searchspace.tune_params)
        cf = CostFunc(searchspace, tuning_options, runner, snap=False)
        t = target_of(runner.dev.name)
        w = workload_of(runner.kernel_options.kernel_name, runner.kernel_options.problem_size, keys)
        self.records = lookup_or_measure(self.db, KernelTunerBackend(cf, keys, simulation=True), t, w, self.configs)
        return cf.results


def _failing_configs(doc, n_each: int = 2) -> list[tuple[dict, str]]:
    out = []
    for err in ("RuntimeFailedConfig", "CompilationFailedConfig"):
        ks = [k for k, v in doc["cache"].items() if v.get("time") == err][:n_each]
        out += [({p: doc["cache"][k][p] for p in doc["tune_params_keys"]}, err) for k in ks]
    return out


def test_failures_are_committed_with_their_status(caches, space_def):
    path, doc = caches["A100"]
    fails = _failing_configs(doc)
    ok_key = next(k for k, v in doc["cache"].items() if not isinstance(v.get("time"), str))
    ok_cfg = {p: doc["cache"][ok_key][p] for p in doc["tune_params_keys"]}
    want = {"RuntimeFailedConfig": "runtime_error", "CompilationFailedConfig": "compile_error"}
    db = MemoryStore()
    b = BackendOnGiven(db, [c for c, _ in fails] + [ok_cfg])
    tune(caches, space_def, b, dev="A100", max_fevals=10)
    statuses = [rec.status for rec, cached in b.records]
    assert statuses == [want[e] for _, e in fails] + ["ok"]
    assert all(not cached for _, cached in b.records)
    for (rec, _), (_, err) in zip(b.records, fails):
        assert db.lookup(rec.target, rec.workload, rec.config).status == want[err]
        assert rec.error == err and rec.compile_s == pytest.approx(doc["cache"][key(rec.config, keys_of(doc))]
                                                                   ["compile_time"] * 1e-3)
    # Recorder path: the same failures through a user strategy
    db2 = MemoryStore()
    rec = Recorder(db2, strategy=EvaluateGiven([c for c, _ in fails]))
    tune(caches, space_def, rec, dev="A100", max_fevals=10)
    assert rec.last_run.committed == len(fails)
    for c, err in fails:
        assert db2.lookup(rec.last_run.target, rec.last_run.workload, c).status == want[err]
    # a DB answer of a failure comes back to Kernel Tuner as its error
    ws = WarmStart(db2)
    results, _ = tune(caches, space_def, ws, dev="A100", max_fevals=len(fails) + 2)
    errs = [r for r in results if r["tunedb"] == "db"]
    assert len(errs) == len(fails) and all("__error__" in r for r in errs)
    assert sorted(str(r["__error__"]) for r in errs) == sorted(e for _, e in fails)


# ------------------------------------------------------------------------------- Recorder
@pytest.mark.parametrize("strategy,fevals", [("random_sample", 10), ("genetic_algorithm", 15)])
def test_recorder_lands_every_kernel_tuner_result(caches, space_def, strategy, fevals):
    path, doc = caches[HELD]
    np.random.seed(1)
    db = MemoryStore()
    rec = Recorder(db, strategy=strategy)
    results, _ = tune(caches, space_def, rec, max_fevals=fevals)
    keys = keys_of(doc)
    uniq = {key(r, keys) for r in results}
    assert len(uniq) == fevals
    stored = entry_records(db, doc)
    assert set(stored) == uniq and all(len(v) == 1 for v in stored.values())
    assert rec.last_run.committed == fevals
    for k in uniq:
        assert stored[k][0][0] == pytest.approx(cached_seconds(doc, k), rel=1e-12)
    # a replay of the same file again adds nothing
    rec2 = Recorder(db, strategy="random_sample")
    tune(caches, space_def, rec2, max_fevals=fevals)
    assert len(entry_records(db, doc)) == len(stored) + rec2.last_run.committed
    assert rec2.last_run.committed + rec2.last_run.skipped == rec2.last_run.results


def test_mi250x_empty_device_name_is_named_from_the_file(tmp_path, space_def):
    doc = json.loads(gzip.decompress((CONV / "MI250X.json.gz").read_bytes()))
    assert doc["device_name"] == ""
    path = tmp_path / "MI250X.json"
    path.write_text(json.dumps(doc))
    db = MemoryStore()
    rec = Recorder(db, strategy="random_sample")
    tune({"MI250X": (path, doc)}, space_def, rec, dev="MI250X", max_fevals=3)
    imported, _ = collect("kernel-tuner", [CONV / "MI250X.json.gz"])
    assert rec.last_run.target == imported[0].target and rec.last_run.workload == imported[0].workload


def test_import_error_names_the_extra(tmp_path):
    code = ("import sys; sys.modules['kernel_tuner'] = None\n"
            "import tunedb.kernel_tuner\n"  # the alias itself loads nothing
            "try:\n    from tunedb.kernel_tuner import WarmStart\nexcept ImportError as e:\n    print('ERR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert "ERR" in out.stdout and "pip install 'tunedb[kernel-tuner]'" in out.stdout, out.stdout + out.stderr


def test_warm_start_refuses_objectives_other_than_time(db, caches, space_def):
    path, doc = caches[HELD]
    with pytest.raises(ValueError, match="minimises time"):
        kernel_tuner.tune_kernel(doc["kernel_name"], SOURCE, doc["problem_size"], [np.zeros(1, np.float32)] * 3,
                                 doc["tune_params"], restrictions=space_def["restrictions"], strategy=WarmStart(db),
                                 strategy_options={"max_fevals": 3}, simulation_mode=True, cache=str(path),
                                 quiet=True, objective="GFLOP/s", objective_higher_is_better=True)
    assert len(entry_records(db, doc)) == 0


def test_python_started_in_the_checkout_still_gets_the_real_kernel_tuner():
    """The checkout root is the package, so its kernel_tuner.py sits on sys.path there."""
    root = ROOT
    code = ("import kernel_tuner, tunedb.kernel_tuner as t\n"
            "print(hasattr(kernel_tuner, 'tune_kernel'), t.WarmStart.__name__, kernel_tuner.util.__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120)
    assert out.stdout.split() == ["True", "WarmStart", "kernel_tuner.util"], out.stdout + out.stderr


def test_warm_start_default_options_are_the_one_engines():
    """Without options WarmStart runs with ``warm_start_options()``: the Tuner's own defaults
    (the ones ``tunedb tune`` and ``tunedb.tune`` use): no patience (Kernel Tuner ends the run),
    seed lists by the run's budget (8 best configs per source and one seed place a round; 32 and
    two in a run of at least ``LONG_RUN`` evaluations, such as a time-limited Kernel Tuner run
    over its whole searchspace), no confirmation rounds (Kernel Tuner measures a config once per
    run); overrides keep the rest, and a field TuneOptions lacks is refused."""
    from dataclasses import replace

    from tunedb.transfer.search.tuner import LONG_RUN

    ws = WarmStart(MemoryStore())
    assert ws.options == warm_start_options() == TuneOptions()
    assert (ws.options.patience, ws.options.top_per_neighbor, ws.options.seed_slots) == (None, None, None)
    assert ws.options.confirm_top == 0
    short, long = replace(ws.options, budget=LONG_RUN - 1), replace(ws.options, budget=LONG_RUN)
    assert (short.seeds_per_source(), short.seed_places()) == (8, 1)
    assert (long.seeds_per_source(), long.seed_places()) == (32, 2)
    o = warm_start_options(seed=7, seed_slots=2, top_per_neighbor=4)
    assert (o.seed, o.seed_places(), o.seeds_per_source(), o.patience) == (7, 2, 4, None)
    assert replace(o, budget=10 * LONG_RUN).seeds_per_source() == 4  # set: not by the budget
    with pytest.raises(TypeError):
        warm_start_options(no_such_option=1)


def _without_run_fields(result: dict) -> dict:
    """A result without what differs between a measurement and a cache hit in Kernel Tuner's own
    terms (the time this run spent on it: 0 for a cache hit) and tunedb's provenance flag."""
    skip = {"compile_time", "verification_time", "benchmark_time", "strategy_time", "framework_time", "tunedb"}
    return {k: v for k, v in result.items() if k not in skip}


def test_best_config_is_the_same_measured_or_answered_from_the_db(tmp_path, caches, space_def):
    """The same simulated run twice on a fresh Parquet DB: measured by Kernel Tuner, then answered
    by the DB.  Kernel Tuner's best_config has the same winner, the same key order and the same
    ``time`` (Kernel Tuner's mean of the iterations, the number the cache file holds), and every
    DB answer is the measured result again."""
    import tunedb

    path, doc = caches[HELD]
    keys = keys_of(doc)
    with tunedb.open(tmp_path / "db") as store:
        first, env1 = tune(caches, space_def, WarmStart(store), max_fevals=16)
    with tunedb.open(tmp_path / "db") as store:  # a new handle: everything read back from Parquet
        ws = WarmStart(store)
        again, env2 = tune(caches, space_def, ws, max_fevals=16)
    assert ws.last_run.kt_fevals == 0 and ws.last_run.db_answers == 16
    b1, b2 = env1["best_config"], env2["best_config"]
    assert b1["tunedb"] == "measured" and b2["tunedb"] == "db"
    assert list(b1) == list(b2)
    assert _without_run_fields(b1) == _without_run_fields(b2)
    assert b1["time"] == b2["time"] == doc["cache"][key(b1, keys)]["time"]
    assert b2["tunedb_estimate"]["statistic"] == "mean" and b2["tunedb_estimate"]["tuner"] == "kernel_tuner"
    measured = {key(r, keys): r for r in first}
    for r in again:
        m = measured[key(r, keys)]
        assert list(r) == list(m) and _without_run_fields(r) == _without_run_fields(m)
    # tunedb's own best of the run is Kernel Tuner's
    assert key(ws.last_run.best_config, keys) == key(b2, keys)
    assert ws.last_run.best_time_s == pytest.approx(b2["time"] * 1e-3, rel=1e-12)


def test_making_a_warm_start_does_the_first_runs_imports(tmp_path, caches, space_def):
    """``WarmStart(db)`` imports what its first ``tune`` needs before its first proposal (the
    nearest-entry search and faiss, the device catalog, the cost-model cache, pandas for pyarrow),
    so that none of it is imported inside ``tune``, where Kernel Tuner's time budget runs."""
    path, _doc = caches[HELD]
    code = f"""
import json, sys
import numpy as np
import kernel_tuner
from tunedb.index.memory.store import MemoryStore
from tunedb.transfer.interop import collect
from tunedb.kernel_tuner import WarmStart, WARM_UP_MODULES
recs, _ = collect("kernel-tuner", [{str(CONV / "A100.json.gz")!r}])
db = MemoryStore()
db.commit(recs)
watched = ("faiss", "tunedb.index.retrieval", "tunedb.transfer.kernels", "tunedb.transfer.search.modelcache",
           "tunedb.index.hardware.catalog", "pandas")
def loaded():
    return sorted(m for m in sys.modules if m.startswith(watched))
before_make = loaded()
ws = WarmStart(db)
made = loaded()
inner = ws.tune
def tune(*args):
    at_tune = set(loaded())
    out = inner(*args)
    return out, sorted(set(loaded()) - at_tune)
in_tune = []
class Probe:
    def tune(self, *args):
        out, new = tune(*args)
        in_tune.extend(new)
        return out
doc = json.loads(open({str(path)!r}).read())
kernel_tuner.tune_kernel(doc["kernel_name"], {SOURCE!r}, doc["problem_size"], [np.zeros(1, np.float32)] * 3,
                         doc["tune_params"], restrictions={space_def["restrictions"]!r}, strategy=Probe(),
                         strategy_options={{"max_fevals": 5}}, simulation_mode=True, quiet=True,
                         cache={str(tmp_path / "c.json")!r})
print(json.dumps({{"before": before_make, "made": made, "in_tune": in_tune, "evals": len(ws.last_run.seeds) >= 0}}))
"""
    import shutil
    shutil.copy(path, tmp_path / "c.json")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert "faiss" not in got["before"] and "tunedb.index.retrieval.nearest" not in got["before"]
    assert "faiss" in got["made"] and "tunedb.index.retrieval.nearest" in got["made"]
    assert got["in_tune"] == []
