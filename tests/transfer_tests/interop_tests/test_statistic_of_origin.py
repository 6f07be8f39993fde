"""The statistic of a record follows its tuner: Kernel Tuner, AutoTVM and MetaSchedule records
count as the mean of their repeats (what those tuners show and rank by), tunedb's own as the
median; the in-memory estimator and the Arrow-table one agree, and the text names it."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from tunedb.index.memory.store import MemoryStore
from tunedb.index.model.estimate import estimate, estimate_of_row, estimate_table, rank, record_value
from tunedb.index.model.record import Record
from tunedb.transfer.interop import collect

from helpers import SHARED_DATA

KT = SHARED_DATA / "kernel_tuner" / "convolution_milo" / "A100.json.gz"
TOPHUB = SHARED_DATA / "tophub" / "llvm_v0.04.log"
MS = SHARED_DATA / "metaschedule"
pytestmark = pytest.mark.skipif(not (KT.is_file() and TOPHUB.is_file() and MS.is_dir()),
                                reason="shared data not present")


def _table_estimates(records: list[Record]) -> dict:
    store = MemoryStore()
    store.commit(records)
    t = estimate_table(store.records(), by=("config_key",))
    return {row["config_key"]: estimate_of_row(row) for row in t.to_pylist()}


def test_kernel_tuner_records_count_as_kernel_tuners_time(tmp_path):
    with gzip.open(KT, "rt") as f:
        doc = json.load(f)
    doc["cache"] = dict(list(doc["cache"].items())[:40])
    (tmp_path / "A100.json").write_text(json.dumps(doc))
    recs, _ = collect("kernel-tuner", [tmp_path / "A100.json"])
    ok = [r for r in recs if r.status == "ok"]
    table = _table_estimates(recs)
    for r in ok:
        time_ms = doc["cache"][r.meta["kernel_tuner"]["key"]]["time"]
        est = estimate([r])
        assert est.value == pytest.approx(time_ms * 1e-3, rel=1e-12) and record_value(r) == pytest.approx(est.value)
        assert (est.statistic, est.tuner) == ("mean", "kernel_tuner")
        assert f"n=1, mean of {len(r.costs)} runs (Kernel Tuner's time)" in est.text()
        assert table[r.config_key] == est
    # the mean and the median rank these configs differently somewhere, and the mean decides
    by_mean = [c.config_key for c in rank(ok)]
    assert by_mean == sorted(by_mean, key=lambda k: table[k].value)
    assert any(np.mean(r.costs) != np.median(r.costs) for r in ok)


def test_tvm_records_count_as_the_mean_and_tunedbs_own_as_the_median():
    autotvm = [r for r in collect("autotvm", [TOPHUB])[0] if r.status == "ok"][:20]
    ms = [r for r in collect("metaschedule", [MS])[0] if r.status == "ok"][:20]
    for r, tuner in [(r, "autotvm") for r in autotvm] + [(r, "metaschedule") for r in ms]:
        est = estimate([r])
        assert est.value == pytest.approx(float(np.mean(r.costs)), rel=1e-12)
        assert (est.statistic, est.tuner) == ("mean", tuner)
    own = Record({"kind": "cpu", "name": "c"}, {"family": "matmul", "M": 8, "N": 8, "K": 8}, {"tile": 4},
                 costs=[1e-3, 1e-3, 10e-3])
    est = estimate([own])
    assert est.value == pytest.approx(1e-3) and (est.statistic, est.tuner) == ("median", "")
    assert "n=1, median of 3 runs" in est.text()
    # a config with records of both kinds: the median of their values, named "mixed"
    kt_like = Record(own.target, own.workload, own.config, costs=[1e-3, 1e-3, 10e-3],
                     meta={"kernel_tuner": {"key": "4", "entry": {"time": 4.0}}})
    both = estimate([own, kt_like])
    assert both.value == pytest.approx((1e-3 + 4e-3) / 2) and both.statistic == "mixed"
    assert "median of 2 records' means and medians" in both.text()
    table = _table_estimates([own, kt_like])
    assert table[own.config_key] == both
