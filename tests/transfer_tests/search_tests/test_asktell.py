"""The ask/tell core (``tunedb.transfer.search.asktell.AskTell``): a loop the caller owns
evaluates what ``Tuner.run`` evaluates, in the same order; every observation is committed at
once; failures are cached; a measured entry is answered from the DB; an unmeasured one is
predicted from its nearest entries; a candidate list bounds the search; a config never
suggested is refused.  Real stores (memory and Parquet directories) and a real replay of
Kernel Tuner caches (recorded GPU measurements)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tunedb
from tunedb.index.model.estimate import record_value
from tunedb.index.model.keys import canonical_json
from tunedb.transfer.search.asktell import AskTell, Suggestion
from tunedb.transfer.search.tuner import TuneOptions, Tuner

from helpers import SHARED_DATA

CONV = SHARED_DATA / "kernel_tuner" / "convolution_milo"
HISTORY = ("A100", "A6000")
HELD = "W7800"

#: the small tests' target is no catalog device (embedded from its tokens, with a warning)
pytestmark = pytest.mark.filterwarnings("ignore:target .* matches no hardware catalog device")

needs_data = pytest.mark.skipif(not CONV.is_dir(), reason="shared Kernel Tuner data not present")


@pytest.fixture(scope="module")
def history() -> list:
    """The history devices' records (Kernel Tuner caches, imported)."""
    from tunedb.transfer.interop import collect

    records, rep = collect("kernel-tuner", [CONV / f"{x}.json.gz" for x in HISTORY])
    assert rep.skipped == 0
    return records


@pytest.fixture(scope="module")
def held():
    """(replay data, replay backend) of the held-out device."""
    from tunedb.transfer.measure.replay import KernelTunerReplayBackend, ReplayData

    data = ReplayData(CONV / f"{HELD}.json.gz")
    return data, KernelTunerReplayBackend(data)


def history_db(history: list, extra: list = ()) -> object:
    db = tunedb.open("memory:")
    db.commit(list(history) + list(extra))
    return db


def drive(study: AskTell, measure) -> list[Suggestion]:
    """The user's loop: ask, measure (``measure(config) -> seconds or an error text``), tell."""
    seen = []
    while batch := study.suggest():
        for s in batch:
            got = measure(s.config)
            if isinstance(got, str):
                study.observe(s.config, error=got)
            else:
                study.observe(s.config, [got], statistic="mean")
            seen.append(s)
    return seen


def replayed(held):
    """``measure`` of the held-out device: its recorded value, or its failure's text."""
    data, backend = held

    def measure(cfg: dict) -> float | str:
        rec = backend.measure(data.target, data.workload, cfg)
        v = record_value(rec)
        return v if v is not None else (rec.error or rec.status)
    return measure


@needs_data
def test_a_user_loop_evaluates_what_tuner_run_evaluates_in_the_same_order(history, held):
    data, backend = held
    known = [data.results[canonical_json(c)] for c in data.space.finite[:3]]  # the entry already holds 3
    opts = TuneOptions(budget=14, seed=4)

    run_evals: list = []
    db1 = history_db(history, known)
    res = Tuner(db1, data.target, data.workload, data.space, backend, opts, defaults={}, hardware_knobs={},
                on_evaluation=lambda c, r, cached, o: run_evals.append((canonical_json(c), cached, o))).run()

    db2 = history_db(history, known)
    study = AskTell(db2, data.target, data.workload, space=data.space, options=opts)
    asked = drive(study, replayed(held))

    measured = [(c, o) for c, cached, o in run_evals if not cached]
    assert [(canonical_json(s.config), s.origin) for s in asked] == measured
    assert len(measured) == 14 - 3 and sum(1 for _, cached, _ in run_evals if cached) == 3
    assert {canonical_json(k.config) for k in known}.isdisjoint(canonical_json(s.config) for s in asked)
    mine = study.result()
    assert mine.origin_split == res.origin_split and mine.evaluations == res.evaluations == 14
    assert study.done and mine.stopped_by == res.stopped_by == "budget"
    best = study.best()
    assert best.config == res.best_config and best.cost_s == pytest.approx(res.best_cost)
    assert best.source == "measured" and not best.predicted
    assert any(s.predicted_s is not None for s in asked)  # the warm run's cost model predicts


def small_space() -> list[dict]:
    return [{"BLOCK": b, "warps": w} for b in (16, 32, 64, 128) for w in (2, 4)]


TARGET = {"name": "gpu-x", "kind": "gpu"}
WORKLOAD = {"family": "user-matmul", "M": 512}


def cost_of(cfg: dict) -> float:
    return 1e-3 * (1 + abs(cfg["BLOCK"] - 64) / 64 + cfg["warps"] / 10)


def test_observe_commits_at_once_a_second_handle_sees_it(tmp_path: Path):
    path = str(tmp_path / "db")
    db = tunedb.open(path)
    study = AskTell(db, TARGET, WORKLOAD, configs=small_space(), options=TuneOptions(budget=3, seed=1))
    (first, *_rest) = study.suggest()
    other = tunedb.open(path)
    assert other.lookup(TARGET, WORKLOAD, first.config) is None
    rec = study.observe(first.config, [2e-3, 1e-3, 3e-3], wall_s=0.5)
    seen = tunedb.open(path).lookup(TARGET, WORKLOAD, first.config)
    assert seen is not None and seen.record_id == rec.record_id and seen.status == "ok"
    assert sorted(seen.costs) == [1e-3, 2e-3, 3e-3] and seen.meta["origin"] == first.origin
    other.close()
    db.close()


def test_a_failure_is_stored_failed_and_never_suggested_again(tmp_path: Path):
    path = str(tmp_path / "db")
    db = tunedb.open(path)
    study = AskTell(db, TARGET, WORKLOAD, configs=small_space(), options=TuneOptions(budget=3, seed=2))
    bad = study.suggest(1)[0]
    rec = study.observe(bad.config, error="out of resources: shared memory")
    assert rec.status == "runtime_error" and record_value(rec) is None
    drive(study, cost_of)
    db.close()

    db = tunedb.open(path)
    stored = db.lookup(TARGET, WORKLOAD, bad.config)
    assert stored.status == "runtime_error" and stored.error.startswith("out of resources")
    again = AskTell(db, TARGET, WORKLOAD, configs=small_space(), options=TuneOptions(budget=50, seed=2))
    asked = drive(again, cost_of)
    assert asked and bad.config not in [s.config for s in asked]
    assert len(asked) == len(small_space()) - 3  # everything else, once
    assert again.best().config != bad.config
    db.close()


def test_a_fully_measured_entry_suggests_nothing_and_answers_from_the_db():
    db = tunedb.open("memory:")
    first = AskTell(db, TARGET, WORKLOAD, configs=small_space(), options=TuneOptions(budget=20, seed=0))
    asked = drive(first, cost_of)
    assert sorted(canonical_json(s.config) for s in asked) == sorted(canonical_json(c) for c in small_space())
    n = db.stats().records

    again = AskTell(db, TARGET, WORKLOAD, configs=small_space(), options=TuneOptions(budget=20, seed=0))
    assert again.suggest() == [] and again.done
    best = again.best()
    want = min(small_space(), key=cost_of)
    assert best.source == "db" and best.config == want and best.cost_s == pytest.approx(cost_of(want))
    assert not best.predicted
    assert again.result().cache_hits == len(small_space()) and again.result().measurements == 0
    assert db.stats().records == n  # nothing measured again


@needs_data
def test_an_unmeasured_target_without_budget_gets_a_predicted_answer(history, held):
    data, _backend = held
    db = history_db(history)
    study = AskTell(db, data.target, data.workload, space=data.space, options=TuneOptions(budget=0))
    assert study.suggest() == [] and study.done
    best = study.best()
    assert best.predicted and best.source == "predicted"
    assert data.space.is_valid(best.config) and best.cost_s is not None and best.cost_s > 0
    assert best.from_target is not None and best.from_target != data.target.get("name")
    assert db.lookup(data.target, data.workload, best.config) is None  # nothing measured

    lonely = AskTell(tunedb.open("memory:"), TARGET, WORKLOAD, configs=small_space(),
                     options=TuneOptions(budget=0), defaults={"BLOCK": 64, "warps": 4})
    d = lonely.best()
    assert d.source == "default" and not d.predicted and d.cost_s is None and d.config == {"BLOCK": 64, "warps": 4}


@needs_data
def test_a_candidate_list_bounds_the_search(history, held):
    data, _backend = held
    listed = list(data.space.finite[::40])[:30]
    keys = {canonical_json(c) for c in listed}
    study = AskTell(history_db(history), data.target, data.workload, configs=listed,
                    options=TuneOptions(budget=12, seed=3))
    asked = drive(study, replayed(held))
    assert len(asked) == 12 and {canonical_json(s.config) for s in asked} <= keys
    assert len({canonical_json(s.config) for s in asked}) == 12
    assert "seed" in {s.origin for s in asked}  # the history still seeds the search, adapted to the list


def test_observe_of_a_config_never_suggested_is_refused():
    db = tunedb.open("memory:")
    study = AskTell(db, TARGET, WORKLOAD, configs=small_space(), options=TuneOptions(budget=4, seed=5))
    batch = study.suggest(2)
    pending = [c for c in small_space() if c not in [s.config for s in batch]]
    with pytest.raises(ValueError, match="not suggested"):
        study.observe(pending[0], [1e-3])
    with pytest.raises(ValueError, match="not in the space"):
        study.observe({"BLOCK": 48, "warps": 4}, [1e-3])
    with pytest.raises(ValueError, match="costs"):
        study.observe(batch[0].config, [-1.0])
    with pytest.raises(ValueError, match="costs_s"):
        study.observe(batch[0].config)
    assert db.lookup(TARGET, WORKLOAD, batch[0].config) is None  # nothing written
    study.observe(batch[0].config, [1e-3])
    with pytest.raises(ValueError, match="observed already"):
        study.observe(batch[0].config, [1e-3])
    with pytest.raises(ValueError, match="exactly one"):
        AskTell(db, TARGET, WORKLOAD, options=TuneOptions())
    with pytest.raises(ValueError, match="same keys"):
        AskTell(db, TARGET, WORKLOAD, configs=[{"a": 1}, {"b": 2}])
