"""Work a warm run needs only for its later rounds is done when first needed, and changes nothing:
the guard's prior (``proposals.guard.prior_table``) and the RGPE source models
(``proposals.surrogate``) are read after the run's first evaluations, and a run whose sources
do that work up front (at ``start``, as they used to) evaluates the same configs in the same
order, with the same origins, weights and guard trace.  Real replayed GPU data (Kernel Tuner
caches), a real Parquet DB."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from tunedb.index import ParquetStore
from tunedb.transfer.measure.replay import KernelTunerReplayBackend, ReplayData, plain_status, plain_values
from tunedb.transfer.search.proposals import sources as all_sources
from tunedb.transfer.search.proposals.guard import HistoryGuard, prior_table
from tunedb.transfer.search.proposals.surrogate import SurrogateSource
from tunedb.transfer.search.tuner import TuneOptions, Tuner
from tunedb.transfer.tuners.kernel_tuner.cachefile import entry_result

from helpers import kernel_tuner_file, replay_history_db

HELD, HISTORY = "W7800", ("A100", "A6000")


class EagerGuard(HistoryGuard):
    """The guard reading its prior at ``start``."""

    def start(self, state):
        out = super().start(state)
        if self.active:
            self.prior, self.prior_read = prior_table(state), True
        return out


class EagerSurrogate(SurrogateSource):
    """The surrogate fitting its source models at ``start``."""

    def start(self, state):
        out = super().start(state)
        self.finish(state)
        return out


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple[Path, ReplayData]:
    replays = {d: ReplayData(kernel_tuner_file(d)) for d in (HELD, *HISTORY)}
    path = replay_history_db(tmp_path_factory.mktemp("deferred") / "db", replays, HISTORY)
    return path, replays[HELD]


def _run(history, sources: list, budget: int, seed: int = 0, on_evaluation=None):
    """A warm replay run of the held-out device on a fresh copy of the history DB: (TuneResult,
    [(config JSON, origin)] in evaluation order)."""
    path, hd = history
    fresh = Path(tempfile.mkdtemp(prefix="deferred-run-")) / "db"
    shutil.copytree(path, fresh)
    db = ParquetStore.open(fresh)
    seen: list[tuple[str, str]] = []

    def record(cfg, rec, cached, origin):
        seen.append((json.dumps(cfg, sort_keys=True), origin))
        if on_evaluation is not None:
            on_evaluation(cfg, rec, cached, origin)
    try:
        res = Tuner(db, hd.target, hd.workload, hd.space, KernelTunerReplayBackend(hd),
                    TuneOptions(budget=budget, seed=seed), sources=sources, on_evaluation=record).run()
    finally:
        db.close()
        shutil.rmtree(fresh.parent, ignore_errors=True)
    return res, seen


def _swap(srcs: list) -> list:
    return [EagerGuard() if isinstance(s, HistoryGuard) else EagerSurrogate() if isinstance(s, SurrogateSource)
            else s for s in srcs]


@pytest.mark.parametrize("seed", [0, 1])
def test_deferred_source_models_change_no_evaluation(history, seed):
    lazy, lazy_order = _run(history, all_sources(), 24, seed)
    eager, eager_order = _run(history, _swap(all_sources()), 24, seed)
    assert len(lazy_order) == 24 and lazy_order == eager_order
    assert lazy.origins == eager.origins and lazy.best_config == eager.best_config
    assert lazy.surrogate["sources"] == eager.surrogate["sources"] and len(lazy.surrogate["sources"]) == 2
    assert lazy.surrogate["trace"] == eager.surrogate["trace"] and lazy.surrogate["trace"]
    assert lazy.surrogate["guard"]["trace"] == eager.surrogate["guard"]["trace"]
    assert lazy.surrogate["guard"]["trace"]  # the guard judged the history in this run


def test_the_first_evaluation_waits_for_no_source_model(history):
    srcs = all_sources()
    guard = next(s for s in srcs if isinstance(s, HistoryGuard))
    sur = next(s for s in srcs if isinstance(s, SurrogateSource))
    at_first: list[tuple] = []

    def first(cfg, rec, cached, origin):
        if not at_first:
            at_first.append((guard.active, guard.prior_read, sur.deferred, dict(sur.models)))
    res, order = _run(history, srcs, 16, on_evaluation=first)
    assert at_first == [(True, False, True, {})]  # on, but nothing read or fitted yet
    assert order[0][1] == "seed"
    # both were needed later in the run, and then read
    assert guard.prior_read and guard.prior and sur.models and not sur.deferred
    assert res.surrogate["weights"]


def test_a_run_too_short_for_the_models_still_names_the_sources(history):
    short, order = _run(history, all_sources(), 4)
    eager, eager_order = _run(history, _swap(all_sources()), 4)
    assert len(order) == 4 and order == eager_order
    assert short.surrogate == eager.surrogate and len(short.surrogate["sources"]) == 2
    assert short.surrogate["weights"] == []  # fitted for the report, never used to rank


def test_plain_status_is_the_importers_status():
    from tunedb.transfer.tuners.kernel_tuner.cachefile import load_cache

    checked = 0
    for dev in (HELD, *HISTORY):
        for entry in load_cache(kernel_tuner_file(dev))["cache"].values():
            if isinstance(entry, dict) and plain_values(entry.values()):
                assert plain_status(entry) == entry_result(entry)[1]
                checked += 1
    assert checked > 10_000
    odd = [{"time": 1.5}, {"time": 3}, {"time": 1e21}, {"time": 10**18}, {"time": "InvalidConfig"},
           {"time": "CompilationFailedConfig"}, {"time": "something else"}, {"time": 2.0, "times": [1.0, 3.0]},
           {"time": 2.0, "times": []}, {"time": 2.0, "times": [1, 2.5]}, {"times": [1.0]}]
    for entry in odd:
        assert plain_values(entry.values())
        assert plain_status(entry) == entry_result(entry)[1], entry
    for entry in ({"time": True}, {"time": -1.0}, {"time": 1.0, "times": [1.0, -2.0]}, {"time": None},
                  {"times": [True]}, {"time": [1.0]}):
        with pytest.raises(ValueError):
            entry_result(entry)
        with pytest.raises(ValueError):
            plain_status(entry)


def test_plain_values_leaves_what_the_importer_may_reject():
    assert plain_values([1.0, 2, "ascii", None, True, [1.0, 2]])
    for bad in (float("nan"), float("inf"), 2**63, "caf\u00e9", "x" * 5000, {"a": 1}, [1.0, float("nan")],
                [1, "a"], [2**70]):
        assert not plain_values([1.0, bad]), bad
