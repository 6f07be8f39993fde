"""Trust policies and the TrustedStore view: untrusted records never answer, writes pass through,
and a tuner on the view measures a poisoned config itself (real stores, real replay data,
real gcc-built kernels)."""

from __future__ import annotations

import pytest

import tunedb
from tunedb.index import ParquetStore
from tunedb.index.contract.base import RecordStore
from tunedb.index.memory.store import MemoryStore
from tunedb.index.model.record import Record
from tunedb.index.testing import store_tests as contract
from tunedb.index.views.trust import TrustedStore, parse_trust
from tunedb.transfer.measure.backend import LocalBackend, MeasureOptions, TimingProtocol
from tunedb.transfer.measure.jobs import local_job
from tunedb.transfer.measure.replay import KernelTunerReplayBackend, ReplayData
from tunedb.transfer.search.tuner import TuneOptions, Tuner

from helpers import kernel_tuner_file, run_cli

T = {"kind": "gpu", "name": "gpu-x"}
W = {"family": "conv", "n": 1}
W2 = {"family": "conv", "n": 2}


def rec(cfg: int, cost: float, source: str = "measured", **kw) -> Record:
    return Record(T, kw.pop("workload", W), {"c": cfg}, costs=[cost], source=source, **kw)


@pytest.fixture(params=["memory", "parquet"])
def store(request, tmp_path) -> RecordStore:
    return MemoryStore() if request.param == "memory" else ParquetStore.open(tmp_path / "db")


# ------------------------------------------------------------------------------------ parsing
@pytest.mark.parametrize("text", ["measured", "replay", "imported", "imported:autotvm", "migrated",
                                  "migrated:cpu-native-t1", "verified", "host:build-7",
                                  " measured , imported:kernel-tuner ", "measured,measured"])
def test_parse_trust_accepts_patterns(text):
    p = parse_trust(text)
    assert p.text == ",".join(dict.fromkeys(x.strip() for x in text.split(",")))


def test_parse_trust_matches():
    p = parse_trust("measured,imported:autotvm,migrated,host:lab-1,verified")
    assert p.trusts("measured") and p.trusts(None)  # a missing source reads as measured
    assert p.trusts("imported:autotvm") and not p.trusts("imported:kernel-tuner")
    assert p.trusts("migrated:cpu-native-t1") and not p.trusts("replay")
    assert p.trusts("replay", host="lab-1") and not p.trusts("replay", host="lab-2")
    assert p.trusts("imported:kernel-tuner", verdict="verified")
    assert not p.trusts("imported:kernel-tuner", verdict="refuted")
    assert parse_trust("imported").trusts("imported:kernel-tuner")
    assert not parse_trust("measured").trusts("imported:kernel-tuner", verdict="verified")


@pytest.mark.parametrize("text, why", [("", "empty trust policy"), (" , ", "empty trust policy"),
                                       ("measured,,replay", "empty pattern"), ("imported:", "unknown trust"),
                                       ("host:", "unknown trust"), ("trusted", "unknown trust"),
                                       ("Measured", "unknown trust"), ("imported:a b", "unknown trust"),
                                       ("migrated: ", "unknown trust")])
def test_parse_trust_rejects_bad_patterns(text, why):
    with pytest.raises(ValueError, match=why) as e:
        parse_trust(text)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------------------------ the view
def test_untrusted_records_do_not_answer(store):
    mine = rec(1, 2.0)
    store.commit(mine)
    poisoned = rec(1, 0.001, "imported:kernel-tuner", origin="evil.json")  # committed later: answers the raw store
    fast_b = rec(2, 0.5, "imported:kernel-tuner")
    mig = rec(3, 0.7, "migrated:gpu-y")
    other_host = rec(4, 0.6, host="elsewhere")
    store.commit([poisoned, fast_b, mig, other_host])
    view = TrustedStore(store, "measured")

    assert store.lookup(T, W, {"c": 1}).record_id == poisoned.record_id
    assert view.lookup(T, W, {"c": 1}).record_id == mine.record_id  # the latest *trusted* record
    assert view.lookup(T, W, {"c": 2}) is None  # only an untrusted record: the caller measures
    assert view.lookup(T, W, {"c": 9}) is None
    got = view.lookup_many(T, W, [{"c": 1}, {"c": 2}, {"c": 4}])
    assert [r and r.record_id for r in got] == [mine.record_id, None, other_host.record_id]
    assert view.lookups == 6 and view.hits == 3
    assert view.stats().lookups == 6 and view.stats().records == len(store) == 5

    # the raw store: config 1's cost is the median of the real and the poisoned record
    assert store.cost(T, W, {"c": 1}).value == pytest.approx((2.0 + 0.001) / 2)
    assert [r.record_id for r in store.best(T, W, 2)] == [fast_b.record_id, other_host.record_id]
    assert view.cost(T, W, {"c": 1}).value == 2.0 and view.cost(T, W, {"c": 2}) is None
    assert [r.record_id for r in view.best(T, W, 5)] == [other_host.record_id, mine.record_id]
    assert view.best(T, W, 0) == []
    assert set(view.records().column("record_id").to_pylist()) == {mine.record_id, other_host.record_id}
    assert view.records(T, W).num_rows == 2
    (e,) = view.entry_list()
    assert e.records == 2 and e.best_cost == pytest.approx(0.6)

    assert {r.record_id for r in TrustedStore(store, "measured,migrated").best(T, W, 9)} == \
        {mine.record_id, mig.record_id, other_host.record_id}
    assert TrustedStore(store, "imported:kernel-tuner").best(T, W, 1)[0].record_id == poisoned.record_id
    assert [r.config for r in TrustedStore(store, "host:elsewhere").best(T, W, 9)] == [{"c": 4}]
    # targets stay known through the view even when none of their records is trusted
    assert TrustedStore(store, "replay").find_target("gpu-x") == T


def test_verdicts_and_the_verified_pattern(store):
    mine = rec(1, 2.0)
    claim = rec(2, 1.0, "imported:autotvm")
    liar = rec(3, 0.1, "imported:autotvm")
    store.commit([mine, claim, liar])
    view = TrustedStore(store, "measured,verified")
    assert [r.record_id for r in view.best(T, W, 9)] == [mine.record_id]
    view.mark({claim.record_id: "verified", liar.record_id: "refuted"})  # writes pass through
    assert store.verdicts() == {claim.record_id: "verified", liar.record_id: "refuted"}
    assert [r.record_id for r in view.best(T, W, 9)] == [claim.record_id, mine.record_id]
    assert view.lookup(T, W, {"c": 2}).record_id == claim.record_id
    # a refuted record answers no view, even one that trusts its source
    assert TrustedStore(store, "imported").lookup(T, W, {"c": 3}) is None
    assert [r.record_id for r in TrustedStore(store, "imported").best(T, W, 9)] == [claim.record_id]


def test_writes_pass_through(store):
    view = TrustedStore(store, "measured")
    imported = rec(5, 0.2, "imported:jsonl")
    assert view.commit([rec(1, 1.0), imported]) == 2
    assert len(store) == len(view) == 2
    assert store.lookup(T, W, {"c": 5}).record_id == imported.record_id  # stored unchanged, just not trusted
    assert view.lookup(T, W, {"c": 5}) is None
    tok = view.change_token()
    view.mark({imported.record_id: "refuted"})
    assert view.change_token() != tok
    assert view.invalidate(T) == store.invalidate(T)
    assert view.lookup(T, W, {"c": 1}) is None and view.best(T, W) == []
    assert view.location == store.location
    assert view.cache_dir().is_dir() and view.cache_dir() != store.cache_dir()


@pytest.mark.filterwarnings("ignore:target .* matches no hardware catalog device")
def test_nearest_on_the_view_skips_untrusted_entries(store):
    store.commit([rec(1, 1.0), rec(2, 0.01, "imported:kernel-tuner", workload=W2)])
    raw = store.nearest(T, W2, k=5)
    assert {m.workload_key for m in raw} == {Record(T, W, {}).workload_key, Record(T, W2, {}).workload_key}
    (m,) = TrustedStore(store, "measured").nearest(T, W2, k=5)
    assert m.workload == W and [r.config for r in m.best] == [{"c": 1}]


def test_trusted_store_needs_a_store_and_a_good_policy():
    with pytest.raises(ValueError, match="wraps a RecordStore"):
        TrustedStore({}, "measured")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown trust pattern"):
        TrustedStore(MemoryStore(), "imported:")


# ------------------------------------------------------------------------------------ the tuner
def test_tuner_on_a_trusted_store_ignores_a_poisoned_record():
    data = ReplayData(kernel_tuner_file("A4000"))
    opt_cfg, opt_cost = data.optimum()
    ok = sorted((r for r in data.results.values() if r.ok), key=lambda r: r.cost)
    victim = ok[len(ok) // 2]  # a middling config, claimed 1000x faster than it is
    db = MemoryStore()
    poisoned = Record(data.target, data.workload, victim.config, costs=[c / 1000 for c in victim.costs],
                      source="imported:kernel-tuner", origin="poisoned.json")
    db.commit(poisoned)

    def run(store):
        backend = KernelTunerReplayBackend(data)
        # the victim is also the start config, so the run on the view asks for it too
        return Tuner(store, data.target, data.workload, data.space, backend,
                     TuneOptions(budget=12, use_exact=True, seed=1), defaults=victim.config).run()

    fooled = run(db)
    from tunedb.index.model.estimate import estimate

    assert fooled.best_cost == pytest.approx(estimate([poisoned]).value)  # the raw store hands the lie over
    view = TrustedStore(db, "measured,replay")
    res = run(view)
    assert res.best_cost >= opt_cost * 0.999 and res.best_cost != pytest.approx(estimate([poisoned]).value)
    # the victim config was measured (replayed) itself and that real record now answers
    assert db.lookup(data.target, data.workload, victim.config).source == "replay"
    assert view.lookup(data.target, data.workload, victim.config).cost == pytest.approx(victim.cost)


def test_tune_api_trust_parameter_measures_locally():
    t = tunedb.local_target("cpu-native-t1")
    w = {"family": "matmul", "M": 24, "N": 40, "K": 8}
    job = local_job(t, w)
    db = MemoryStore()
    fake = Record(job.target, job.workload, job.defaults, costs=[1e-12], source="imported:autotvm")
    db.commit(fake)
    fast = LocalBackend(MeasureOptions(protocol=TimingProtocol(warmup=0, min_repeat_ms=0.5, repeat=3)))
    res = tunedb.tune(db, t, w, budget=2, trust="measured", backend=fast)
    assert res.best_cost is not None and res.best_cost > 1e-9
    assert res.measurements == 2 and res.cache_hits == 0
    mine = db.lookup(job.target, job.workload, job.defaults)
    assert mine.source == "measured" and mine.record_id != fake.record_id
    with pytest.raises(ValueError, match="unknown trust pattern"):
        tunedb.tune(db, t, w, budget=1, trust="everyone", backend=fast)


def test_cli_bad_trust_is_one_line_exit_2(tmp_path):
    for cmd in (["best", "--target", "x", "--workload", "matmul"], ["tune", "--target", "cpu-native-t1",
                                                                     "--workload", "matmul:M=8,N=8,K=8"]):
        p = run_cli(*cmd, "--db", str(tmp_path / "db"), "--trust", "imported:")
        assert p.returncode == 2, p.stderr
        assert p.stderr.count("\n") == 1 and "--trust: unknown trust pattern 'imported:'" in p.stderr
    assert not (tmp_path / "db").exists()  # a bad policy opens (creates) nothing


@pytest.mark.parametrize(("policy", "trusted"), [("measured", 12), ("measured,host:elsewhere", 13), ("verified", 2),
                                                 ("imported", 1)])
def test_trusted_view_projection_equals_its_full_read(tmp_path, policy, trusted):
    from tunedb.index.views.trust import TrustedStore

    inner = tunedb.open(tmp_path / "db")
    rs = contract.mixed_records()
    inner.commit(rs)
    inner.mark({rs[1].record_id: "verified", rs[-2].record_id: "verified"})
    view = TrustedStore(inner, policy)
    assert inner.records().num_rows == 13 and view.records().num_rows == trusted
    assert view.records(columns=["cost"]).num_rows == trusted  # (the policy's columns are read, then dropped)
    for f in contract.FILTERS:
        contract.assert_projections_match(view, **f)
    with pytest.raises(ValueError):
        view.records(columns=["nope"])
