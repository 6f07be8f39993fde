"""``tunedb verify``: other people's best records re-measured on the target itself.

Real parts only: a Kernel Tuner cache of a real GPU (shared/data) with a hand-poisoned copy,
replayed as the GPU; real gcc-built matmul kernels measured on this CPU; real stores.
"""

from __future__ import annotations

import gzip
import json
import random

import pytest

from tunedb.index import ParquetStore
from tunedb.index.hardware.localcpu import preset
from tunedb.index.memory.store import MemoryStore
from tunedb.index.model.estimate import estimate
from tunedb.index.model.record import Record, this_host
from tunedb.transfer.measure.backend import LocalBackend
from tunedb.transfer.measure.jobs import local_job
from tunedb.transfer.measure.replay import KernelTunerReplayBackend, ReplayData
from tunedb.transfer.measure.verify import DEFAULT_TOLERANCE, is_foreign, reproduces, verify

from helpers import kernel_tuner_file, run_cli

DEVICE = "A4000"
N_POISONED = 5
MM = {"family": "matmul", "M": 24, "N": 40, "K": 8}


def _poison(real, out, n: int = N_POISONED) -> list[str]:
    """Write a copy of the cache ``real`` to ``out`` whose ``n`` middling configs claim to run
    1000x faster than the device measured; return their cache keys."""
    doc = json.loads(gzip.decompress(real.read_bytes()))
    ok = sorted((k for k, e in doc["cache"].items() if isinstance(e, dict) and isinstance(e.get("time"), float)),
                key=lambda k: doc["cache"][k]["time"])
    keys = ok[len(ok) // 2: len(ok) // 2 + n]
    for k in keys:
        e = doc["cache"][k]
        e["time"] /= 1000
        e["times"] = [x / 1000 for x in e["times"]]
    out.write_text(json.dumps(doc))
    return keys


@pytest.fixture(scope="module")
def poisoned_cache(tmp_path_factory):
    real = kernel_tuner_file(DEVICE)
    out = tmp_path_factory.mktemp("poison") / f"{DEVICE}_poisoned.json"
    keys = _poison(real, out)
    return real, out, keys


def _json(p):
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _one_line_error(p, text: str) -> None:
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("tunedb: error: "), p.stderr
    assert text in p.stderr, p.stderr


# ------------------------------------------------------------------------------ the rule
def test_rule_band_and_foreign_records():
    assert reproduces(1.0, [0.9, 1.1], 0.0) and reproduces(0.9, [0.9, 1.1], 0.0)
    assert not reproduces(0.89, [0.9, 1.1], 0.0) and not reproduces(1.2, [0.9, 1.1], 0.0)
    assert reproduces(0.5, [0.9, 1.1], 1.0) and not reproduces(0.4, [0.9, 1.1], 1.0)
    assert reproduces(2.2, [0.9, 1.1], 1.0) and not reproduces(2.3, [0.9, 1.1], 1.0)
    assert not reproduces(1.0, [], 10.0)
    t, w = {"kind": "gpu", "name": "g"}, {"family": "f"}
    assert is_foreign(Record(t, w, {}, [1.0], source="imported:autotvm"))
    assert is_foreign(Record(t, w, {}, [1.0], source="migrated:cpu-x"))
    assert not is_foreign(Record(t, w, {}, [1.0]))  # measured here (host = this machine)
    assert not is_foreign(Record(t, w, {}, [1.0], source="replay"))
    assert not is_foreign(Record(t, w, {}, [1.0], host=""))  # unknown host: its source decides
    assert is_foreign(Record(t, w, {}, [1.0], host=this_host() + "-elsewhere"))


# ------------------------------------------------------------------------------ (a) a poisoned Kernel Tuner cache
def test_poisoned_cache_is_refuted_and_stops_answering(tmp_path, poisoned_cache):
    real, poisoned, keys = poisoned_cache
    db = str(tmp_path / "db")
    workload = tmp_path / "workload.json"
    data = ReplayData(real)
    workload.write_text(json.dumps(data.workload))
    target = data.target["name"]
    # the device's best cost by the one estimator (one record per config: its median repeat)
    optimum = min(estimate([r]).value for r in data.results.values() if r.ok)
    # the poisoned file is the only source for this device; another device's real cache gives history
    _json(run_cli("import", "kernel-tuner", str(poisoned), "--db", db, "--json"))
    _json(run_cli("import", "kernel-tuner", str(kernel_tuner_file("A100")), "--db", db, "--json"))

    best = _json(run_cli("best", "--db", db, "--target", target, "--workload", str(workload), "-k", "5",
                         "--json"))["records"]
    assert all(r["cost"] < optimum / 100 for r in best)  # the lie comes first
    poisoned_ids = {r["record_id"] for r in best}
    poisoned_cfgs = [r["config"] for r in best]
    assert len(poisoned_ids) == N_POISONED == len(keys)
    # a replay answers only from its own file's records, so even --exact is not fooled by the import
    replayed = _json(run_cli("tune", "--db", db, "--replay", str(real), "--exact", "--budget", "8", "--json"))
    assert replayed["best"]["cost"] >= optimum and replayed["measurements"] == 8
    guarded = _json(run_cli("tune", "--db", db, "--replay", str(real), "--exact", "--budget", "8",
                            "--trust", "measured,replay", "--json"))
    assert guarded["best"]["cost"] >= optimum  # --trust: the imported claims answer nothing

    rep = _json(run_cli("verify", "--db", db, "--target", target, "--replay", str(real), "--json"))
    verdicts = {c["record_id"]: c["verdict"] for c in rep["checks"]}
    assert {rid: verdicts.get(rid) for rid in poisoned_ids} == dict.fromkeys(poisoned_ids, "refuted")
    assert rep["totals"]["refuted"] == N_POISONED and rep["totals"]["verified"] >= 3
    assert rep["totals"]["unchecked"] == 0 and not rep["interrupted"]
    for c in rep["checks"]:
        assert c["source"] == "imported:kernel-tuner" and c["origin"] == poisoned.name
        assert len(c["new_records"]) == 1 and c["measured"]
        if c["verdict"] == "refuted":
            assert c["claimed"] < c["measured_min"] / 100 and "faster" in c["reason"]
        else:
            assert c["measured_min"] <= c["claimed"] <= c["measured_max"]  # the same device's data

    after = _json(run_cli("best", "--db", db, "--target", target, "--workload", str(workload), "-k", "5",
                          "--json"))["records"]
    assert not poisoned_ids & {r["record_id"] for r in after}
    assert not [r for r in after if r["config"] in poisoned_cfgs]
    assert after[0]["cost"] == pytest.approx(optimum)  # the estimator's best, over the true data only
    res = _json(run_cli("tune", "--db", db, "--replay", str(real), "--exact", "--budget", "20", "--json"))
    assert res["best"]["cost"] >= optimum and res["best"]["config"] not in poisoned_cfgs

    # the verification measurements are stored: real replay records that say what they verify
    s = ParquetStore.open(db)
    mine = [r for r in s.iter_records(data.target, data.workload) if r.meta.get("verifies")]
    assert {r.meta["verifies"] for r in mine} == set(verdicts) and {r.source for r in mine} == {"replay"}
    assert s.verdicts() == {**verdicts}
    replay_only = _json(run_cli("best", "--db", db, "--target", target, "--workload", str(workload), "-k", "3",
                                "--trust", "replay", "--json"))["records"]
    assert {r["source"] for r in replay_only} == {"replay"}

    again = run_cli("verify", "--db", db, "--target", target, "--replay", str(real))
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("nothing to verify") and "already have a verdict" in again.stdout


class InterruptingReplay(KernelTunerReplayBackend):
    """The real replay backend, with Ctrl-C pressed during its ``n``-th measurement."""

    def __init__(self, data, n: int):
        super().__init__(data)
        self.left = n

    def measure(self, target, workload, config):
        self.left -= 1
        if self.left == 0:
            raise KeyboardInterrupt
        return super().measure(target, workload, config)


def test_interrupt_keeps_verdicts_and_a_rerun_goes_on(tmp_path, poisoned_cache):
    real, poisoned, _ = poisoned_cache
    from tunedb.transfer.interop import collect

    records, _ = collect("kernel-tuner", [str(poisoned)])
    db = ParquetStore.open(tmp_path / "db")
    db.commit(records)
    data = ReplayData(real)
    first = verify(db, data.target, backend=InterruptingReplay(data, 3), top_k=3)
    assert first.interrupted and [c.verdict for c in first.checks] == ["refuted", "refuted"]
    assert set(db.verdicts()) == {c.record_id for c in first.checks}
    second = verify(ParquetStore.open(tmp_path / "db"), data.target, backend=KernelTunerReplayBackend(data), top_k=3)
    assert not second.interrupted
    assert not {c.record_id for c in first.checks} & {c.record_id for c in second.checks}
    assert sum(c.verdict == "refuted" for c in first.checks + second.checks) == N_POISONED


def test_config_the_replay_cannot_answer_stays_unchecked():
    data = ReplayData(kernel_tuner_file(DEVICE))
    cfg = dict(next(iter(data.results.values())).config, block_size_x=999)  # no such config in the cache
    db = MemoryStore()
    claim = Record(data.target, data.workload, cfg, costs=[1e-9], source="imported:kernel-tuner")
    db.commit(claim)
    rep = verify(db, data.target, backend=KernelTunerReplayBackend(data))
    (c,) = rep.checks
    assert c.verdict == "unchecked" and "does not hold" in c.reason and not c.new_records
    assert db.verdicts() == {} and len(db) == 1


def _three_claims_of_one_config(path):
    """A DB at ``path`` with three imported records of one config of the device's cache: the
    file's own measurement, one 10 % slower and one 1000x faster (a lie); returns (db, data,
    config, the file's record, {name: record})."""
    data = ReplayData(kernel_tuner_file(DEVICE))
    ok = sorted((r for r in data.results.values() if r.status == "ok"), key=lambda r: estimate([r]).value)
    true = ok[len(ok) // 2]  # a middling config: the lie makes it the best on record
    # a colleague's JSON-lines export of the same Kernel Tuner measurements: the records keep their
    # meta, so each record's value is Kernel Tuner's statistic, as the file's own
    claims = {name: Record(data.target, data.workload, true.config, costs=[c * f for c in true.costs],
                           source="imported:jsonl", origin="colleague.jsonl", meta=dict(true.meta))
              for name, f in (("copy", 1.0), ("slower", 1.1), ("lie", 1e-3))}
    db = ParquetStore.open(path)
    db.commit(list(claims.values()))
    db.commit(Record(data.target, data.workload, ok[-1].config, costs=ok[-1].costs, source="replay"))
    return db, data, true, claims


def test_every_record_a_best_config_rests_on_is_checked_and_costs_are_the_estimators(tmp_path):
    db, data, true, claims = _three_claims_of_one_config(tmp_path / "db")
    m = estimate([true]).value  # the file's cost of the config: Kernel Tuner's time, the mean of its repeats
    before = db.cost(data.target, data.workload, true.config)
    assert before.records == 3 and before.value == pytest.approx(m)  # the median record, not the 1000x lie
    rep = verify(db, data.target, backend=KernelTunerReplayBackend(data), top_k=1)
    by_id = {c.record_id: c for c in rep.checks}
    assert set(by_id) == {r.record_id for r in claims.values()}  # all three, not one representative
    assert {n: by_id[r.record_id].verdict for n, r in claims.items()} == {
        "copy": "verified", "slower": "verified", "lie": "refuted"}
    for name, r in claims.items():
        c = by_id[r.record_id]
        assert c.claimed == pytest.approx(estimate([r]).value)  # the record's own cost
        assert c.config_cost == before  # the config's cost on the target before the check (n=3)
        assert c.remeasured is not None and c.remeasured.value == pytest.approx(m) and c.remeasured.records == 1
        assert len(c.new_records) == 1  # one measurement per claim
        j = c.to_json()
        assert j["config_cost"] == before.to_dict() and j["remeasured"] == c.remeasured.to_dict()
    assert "re-measured cost" in by_id[claims["lie"].record_id].reason
    after = db.cost(data.target, data.workload, true.config)
    assert after.records == 5 and after.value == pytest.approx(m)  # the lie no longer counts


def test_cli_verify_text_shows_the_estimates(tmp_path):
    db, data, true, claims = _three_claims_of_one_config(tmp_path / "db")
    cache = tmp_path / "device.json"
    cache.write_bytes(gzip.decompress(kernel_tuner_file(DEVICE).read_bytes()))
    p = run_cli("verify", "--db", str(tmp_path / "db"), "--target", data.target["name"], "--replay", str(cache),
                "--top-k", "1")
    assert p.returncode == 0, p.stderr
    assert "config cost" in p.stdout and "re-measured" in p.stdout
    assert db.cost(data.target, data.workload, true.config) is not None
    assert p.stdout.count("n=3") == 3 and "1 refuted" in p.stdout, p.stdout


# ------------------------------------------------------------------------------ (b) real local measurements
def test_local_measurements_refute_a_lie_and_verify_a_true_copy(tmp_path):
    t = preset("cpu-native-t1")
    job = local_job(t, MM)
    w, space = job.workload, job.space
    true_cfg = job.defaults
    rng = random.Random(3)
    lie_cfg = next(c for c in (space.sample(rng) for _ in range(50)) if c != true_cfg)
    backend = LocalBackend()  # the default timing protocol, which set DEFAULT_TOLERANCE
    earlier = backend.measure(t, w, true_cfg)
    lie_base = backend.measure(t, w, lie_cfg)
    assert earlier.ok and lie_base.ok
    copy = Record(t, w, true_cfg, costs=earlier.costs, source="imported:jsonl", origin="colleague.jsonl",
                  host="colleagues-laptop")
    lie = Record(t, w, lie_cfg, costs=[c / 1000 for c in lie_base.costs], source="imported:jsonl",
                 origin="colleague.jsonl")
    db = ParquetStore.open(tmp_path / "db")
    db.commit([copy, lie])
    assert [r.record_id for r in db.best(t, w, 2)] == [lie.record_id, copy.record_id]

    seen = []
    rep = verify(db, t, workloads=[MM], backend=backend, progress=seen.append)
    by_id = {c.record_id: c for c in rep.checks}
    assert set(by_id) == {lie.record_id, copy.record_id}
    assert by_id[lie.record_id].verdict == "refuted" and by_id[lie.record_id].attempts == 3
    assert by_id[copy.record_id].verdict == "verified", by_id[copy.record_id].to_json()
    assert rep.tolerance == DEFAULT_TOLERANCE and rep.totals["refuted"] == 1 and rep.totals["verified"] == 1
    assert seen and seen[-1]["done"] == 2 and seen[-1]["refuted"] == 1
    assert db.verdicts() == {lie.record_id: "refuted", copy.record_id: "verified"}
    assert lie.record_id not in {r.record_id for r in db.best(t, w, 5)}
    new = [r for r in db.iter_records(t, w) if r.meta.get("verifies")]
    assert {r.source for r in new} == {"measured"} and all(r.ok for r in new)
    assert {r.meta["verifies"] for r in new} == {lie.record_id, copy.record_id}

    again = run_cli("verify", "--db", str(tmp_path / "db"), "--target", "cpu-native-t1", "--json")
    out = _json(again)
    # nothing is measured again: the verified copy is skipped (or, when a verification measurement
    # of its config came out faster, no longer among the best and not foreign)
    assert out["checks"] == [] and out["totals"]["already"] <= 1
    assert out["totals"].get("refuted", 0) == 0 and out["totals"].get("verified", 0) == 0


# ------------------------------------------------------------------------------ (c) CLI errors
def test_cli_errors_are_one_line_exit_2(tmp_path, poisoned_cache):
    real, poisoned, _ = poisoned_cache
    db = str(tmp_path / "db")
    _one_line_error(run_cli("verify", "--db", db, "--target", "x"), "no tunedb database")
    _json(run_cli("import", "kernel-tuner", str(poisoned), "--db", db, "--json"))
    name = ReplayData(real).target["name"]
    cases = [
        (["--target", "no-such-gpu"], "unknown target"),
        (["--target", "cpu-native-t1"], "has no records"),
        (["--target", name], "give --replay FILE"),
        (["--target", name, "--top-k", "0"], "--top-k must be >= 1"),
        (["--target", name, "--tolerance", "-1"], "--tolerance must be"),
        (["--target", name, "--tolerance", "nan"], "--tolerance must be"),
        (["--target", name, "--attempts", "0"], "--attempts must be"),
        (["--target", name, "--device", "A4000"], "--device applies to --replay only"),
        (["--target", name, "--replay", str(tmp_path / "missing.json")], "does not exist"),
        (["--target", name, "--replay", str(kernel_tuner_file("A100"))], "is of device"),
        (["--target", name, "--replay", str(real), "--workload", "matmul:M=8"], "holds kernel"),
    ]
    for args, text in cases:
        _one_line_error(run_cli("verify", "--db", db, *args), text)
    db2 = tmp_path / "db2"
    s = ParquetStore.open(db2)
    t = preset("cpu-native-t1")
    s.commit(Record(t, local_job(t, MM).workload, local_job(t, MM).defaults, [1e-3], source="imported:jsonl"))
    _one_line_error(run_cli("verify", "--db", str(db2), "--target", "cpu-native-t1", "--workload", "matmul:M=9"),
                    "has no records of target")
