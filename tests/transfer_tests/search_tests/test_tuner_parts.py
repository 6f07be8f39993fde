"""The Tuner as parts: proposal sources behind one interface, a registry, and a loop that does
not change when a source is added (real replayed Kernel Tuner data, real Parquet DB)."""

from __future__ import annotations

import json

import pytest

from tunedb.index import ParquetStore
from tunedb.transfer.measure.replay import KernelTunerReplayBackend, ReplayData
from tunedb.transfer.search import proposals
from tunedb.transfer.search.proposals import ProposalSource, Round, register, unregister
from tunedb.transfer.search.proposals.base import sig
from tunedb.transfer.search.proposals.random_fill import RandomFill
from tunedb.transfer.search.tuner import TuneOptions, Tuner

from helpers import kernel_tuner_file, replay_history_db

SOURCES = ("A100", "A6000", "W7800")
HELD = "A4000"


@pytest.fixture(scope="module")
def replay():
    return {d: ReplayData(kernel_tuner_file(d)) for d in SOURCES + (HELD,)}


@pytest.fixture(scope="module")
def history_path(tmp_path_factory, replay):
    return replay_history_db(tmp_path_factory.mktemp("history") / "db", replay, SOURCES, compact=True)


@pytest.fixture()
def db(tmp_path, history_path):
    import shutil

    shutil.copytree(history_path, tmp_path / "db")
    return ParquetStore.open(tmp_path / "db")


class SmallestThreads(ProposalSource):
    """A new source, defined outside the package: every round, the untried config with the
    fewest threads first (a stand-in for any multi-task model); counts its calls."""

    name = "smallest_threads"
    origin = "smallest"
    order = 35   # after the seeds are known, before the surrogate and the cost model rank

    def __init__(self) -> None:
        self.started = 0
        self.rounds = 0

    def start(self, state):
        self.started += 1
        return []

    def propose(self, state, rnd):
        self.rounds += 1
        untried = [c for c in state.space.finite if sig(c) not in state.tried and sig(c) not in rnd.sigs()]
        key = [k.name for k in state.space.knobs][0]
        untried.sort(key=lambda c: (c[key], sig(c)))
        rnd.add(untried[:1], [self.origin] * min(1, len(untried), rnd.free))


def test_built_in_sources_run_in_their_order_one_fresh_instance_each():
    got = proposals.sources()
    assert [s.name for s in got] == ["exact", "resume", "transferred_seeds", "guard", "surrogate", "model",
                                     "default_first", "random"]
    assert [s.order for s in got] == sorted(s.order for s in got)
    again = proposals.sources()
    assert all(a is not b for a, b in zip(got, again))   # a source may keep per-run state


def test_a_registered_source_joins_every_run_without_an_edit_to_the_loop(db, replay):
    held = replay[HELD]
    register(SmallestThreads)
    try:
        with pytest.raises(ValueError, match="already registered"):
            register(type("Other", (ProposalSource,), {"name": "smallest_threads"}))
        t = Tuner(db, held.target, held.workload, held.space, KernelTunerReplayBackend(held),
                  TuneOptions(budget=24, seed=0, batch=4))
        mine = next(s for s in t.sources if isinstance(s, SmallestThreads))
        res = t.run()
    finally:
        unregister("smallest_threads")
    assert "smallest_threads" not in [s.name for s in proposals.sources()]
    rounds = mine.rounds
    assert mine.started == 1 and rounds >= 3
    # one config per round from the new source, tagged with its origin, in the result and in the DB
    assert res.origins.get("smallest") == rounds and res.evaluations == 24
    assert res.origin_split["smallest"]["measured"] == rounds
    metas = [json.loads(m) for m in db.records(held.target, held.workload).column("meta").to_pylist() if m]
    assert sum(1 for m in metas if m.get("origin") == "smallest") == rounds
    # the other sources still fill the rest of each round
    assert res.origins.get("seed", 0) > 0 and res.origins.get("model", 0) + res.origins.get("random", 0) > 0


def test_a_run_made_of_chosen_sources_only(db, replay):
    held = replay[HELD]
    res = Tuner(db, held.target, held.workload, held.space, KernelTunerReplayBackend(held),
                TuneOptions(budget=12, seed=1), sources=[RandomFill()]).run()
    # no seeds, no model: every evaluation is a random draw, none measured twice
    assert res.origins == {"random": 12} and res.measurements == 12 and res.seeds == []
    keys = db.records(held.target, held.workload).column("config").to_pylist()
    assert len(keys) == len(set(keys)) == 12


def test_a_source_without_a_name_is_refused_and_a_round_holds_no_more_than_its_size():
    with pytest.raises(ValueError, match="needs a name"):
        register(type("Nameless", (ProposalSource,), {}))
    rnd = Round(2)
    rnd.add([{"a": 1}], ["random"])
    assert rnd.free == 1 and rnd.sigs() == {sig({"a": 1})}
    with pytest.raises(ValueError, match="round of 2"):
        rnd.add([{"a": 2}, {"a": 3}], ["random", "random"])
    with pytest.raises(ValueError, match="origins"):
        rnd.add([{"a": 2}], [])
    assert rnd.configs == [{"a": 1}]
