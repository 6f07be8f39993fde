"""Once the guard judges the history misleading, its explorer walks the sources' lists deeper
than the seeds (``transfer/search/proposals/guard.py``, "the lists"): real replayed Kernel
Tuner data, a real Parquet DB of the other five GPUs' records."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunedb.index import ParquetStore
from tunedb.index.model.keys import canonical_json
from tunedb.transfer.apps.evaluation import best_within, frac, order_history
from tunedb.transfer.measure.replay import KernelTunerReplayBackend, ReplayData
from tunedb.transfer.search.tuner import TuneOptions, Tuner

from helpers import kernel_tuner_file, replay_history_db

KERNEL, HELD = "dedispersion_milo", "W6600"
SOURCES = ("A100", "A4000", "A6000", "MI250X", "W7800")


def _ranks(replay: ReplayData) -> dict[str, int]:
    """Config JSON -> its place in ``replay``'s ok configs by cost (0: its best)."""
    ok = sorted((r.cost, r.config_json) for r in replay.results.values() if r.status == "ok" and r.cost)
    return {c: i for i, (_, c) in enumerate(ok)}


@pytest.mark.slow
def test_a_fired_guard_reaches_configs_deep_in_the_sources_lists(tmp_path: Path) -> None:
    # dedispersion on the W6600: the similarity-weighted history ranks its configs badly (the
    # guard fires), yet MI250X's 3rd-best config is at 0.963 of the W6600's optimum and its
    # 18th-best config is the optimum; the seeds hold MI250X's 8 best configs only
    replays = {d: ReplayData(kernel_tuner_file(d, KERNEL)) for d in (HELD, *SOURCES)}
    db = ParquetStore.open(replay_history_db(tmp_path / "db", replays, SOURCES))
    hd = replays[HELD]
    evaluated: list[dict] = []
    try:
        res = Tuner(db, hd.target, hd.workload, hd.space, KernelTunerReplayBackend(hd),
                    TuneOptions(budget=50, seed=0),
                    on_evaluation=lambda c, _rec, _cached, _origin: evaluated.append(c)).run()
    finally:
        db.close()
    g = res.surrogate["guard"]
    assert g["fired"] is True
    assert g["from_lists"] >= 8
    # configs below the seeds' depth of a source's list were measured
    mi = _ranks(replays["MI250X"])
    deep = [mi[k] for k in (canonical_json(dict(c)) for c in evaluated) if mi.get(k, -1) >= 8]
    assert deep and min(deep) < 64
    # and the run is where top-k (every GPU's best, then second best, ...) is: 0.963 at 20
    _, opt = hd.optimum()
    hist = order_history(hd, evaluated)
    assert frac(opt, best_within(hist, 20)) >= 0.96
    assert frac(opt, best_within(hist, 50)) >= 0.97
