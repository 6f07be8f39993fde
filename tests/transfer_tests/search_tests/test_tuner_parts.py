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
    after = ("transferred_seeds",)      # the seeds are known...
    before = ("surrogate", "model")     # ... and the rankers fill what it leaves

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
    assert proposals.order() == [s.name for s in got]
    # every source runs after the sources it names
    at = {s.name: i for i, s in enumerate(got)}
    assert all(at[a] < at[s.name] for s in got for a in s.after) and any(s.after for s in got)
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


def _refused(cls: type, match: str) -> None:
    """``register(cls)`` raises a one-line ValueError matching ``match`` and leaves the order as it was."""
    before = proposals.order()
    with pytest.raises(ValueError, match=match) as e:
        register(cls)
    assert "\n" not in str(e.value) and proposals.order() == before


def test_the_registry_derives_the_order_and_refuses_unknown_names_cycles_and_numbers():
    def source(name: str, **attrs) -> type:
        return type(name.title(), (ProposalSource,), {"name": name, **attrs})

    _refused(source("late", after=("no_such_source",)), "'no_such_source', which is not registered")
    _refused(source("late", before=("no_such_source",)), "not registered")
    # the surrogate runs before the model: after the model and before the surrogate is a cycle
    _refused(source("late", after=("model",), before=("surrogate",)), "cycle")
    _refused(source("late", after=("late",)), "names itself")
    _refused(source("late", order=35), "'order' is not used")
    _refused(source("late", after="model"), "tuple of source names")
    # a source others run after cannot go (the order would lose a constraint)
    with pytest.raises(ValueError, match="named in the order of 'guard', 'surrogate'"):
        unregister("transferred_seeds")
    assert "transferred_seeds" in proposals.order()
    # ties keep the registration order: a source that only needs the exact entry comes last
    register(source("late", after=("exact",)))
    try:
        assert proposals.order()[-2:] == ["random", "late"]
    finally:
        unregister("late")
    assert proposals.order() == ["exact", "resume", "transferred_seeds", "guard", "surrogate", "model",
                                 "default_first", "random"]


def test_the_seed_queue_and_the_model_slot_are_the_hand_offs(db, replay):
    held = replay[HELD]
    t = Tuner(db, held.target, held.workload, held.space, KernelTunerReplayBackend(held),
              TuneOptions(budget=16, seed=0, batch=4, n_seeds=3))
    t.start()
    q = t.seeds
    sims = [s.similarity for s in q.sources]
    assert len(sims) == len(SOURCES) and sims == sorted(sims, reverse=True)
    assert t.seeds_info == q.report and [r["from_target"] for r in q.report] == [s.match.target_name
                                                                                 for s in q.sources]
    # each seed is credited to its most similar source; the first n_seeds (after the default) left the queue
    for c in q.pending:
        got = q.source_of(c)
        givers = [s for s in q.sources if sig(c) in {sig(a) for a in s.adapted}]
        assert got == givers[0].entry and q.is_seed(sig(c))
    assert not {sig(c) for c in q.pending} & set(t.evaluated) and len(t.evaluated) == 3
    assert q.source_of({"no": "such config"}) is None
    # what earlier rounds tried leaves the queue when the next round is proposed
    tried = set(t.tried)
    t.step()
    assert len(t.evaluated) == 7 and q.pending and not {sig(c) for c in q.pending} & tried
    # the model slot: set by the cost-model source, what the result reports and what ranks
    assert t.cost_model.model is not None and t.cost_model.fits >= 1
    assert t.result().model == t.cost_model.info
    assert t.predict(list(q.pending[:2])) is not None
    # the queue's own operations, in order
    q.put([{"a": 1}, {"a": 2}, {"a": 3}])
    q.reorder(lambda cs: cs[::-1])
    assert q.untried({sig({"a": 3})}, 1) == [{"a": 2}] and q.take(1) == [{"a": 3}] and len(q) == 2
    q.drop({sig({"a": 2})})
    assert q.pending == ({"a": 1},)


def test_options_are_set_flat_and_read_by_group():
    import copy
    import dataclasses
    import pickle

    from tunedb.transfer.search.tuner import OPTION_GROUPS

    flat = [f.name for f in dataclasses.fields(TuneOptions)]
    grouped = [n for names in OPTION_GROUPS.values() for n in names]
    assert sorted(grouped) == sorted(flat) and len(grouped) == len(set(grouped))   # each field in one group
    opts = TuneOptions(budget=20, seed=3, top_per_neighbor=32, guard=False)
    assert opts.seeds.top_per_neighbor == 32 and opts.loop.budget == 20 and opts.history_guard.guard is False
    assert dict(opts.confirmation) == {"confirm_top": 0, "confirm_rounds": 2}
    assert {k: v for g in opts.groups().values() for k, v in g.items()} == dataclasses.asdict(opts)
    # the groups are views: replace, equality and asdict are the flat fields'
    later = dataclasses.replace(opts, budget=40)
    assert later.loop.budget == 40 and opts.loop.budget == 20 and later != opts
    assert later == TuneOptions(budget=40, seed=3, top_per_neighbor=32, guard=False)
    assert list(dataclasses.asdict(opts)) == flat
    assert pickle.loads(pickle.dumps(opts.seeds)) == opts.seeds and copy.copy(opts.loop)["seed"] == 3
    with pytest.raises(AttributeError, match="read-only"):
        opts.seeds.n_seeds = 3
    with pytest.raises(AttributeError, match="has no option 'budget'"):
        _ = opts.seeds.budget
