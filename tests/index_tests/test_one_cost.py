"""One entry, one cost: every surface shows the one estimator's number for the same config.

A real Parquet DB holds noisy records of several configs of one matmul entry on this machine's
preset (three records of the best config at 1, 2 and 10 us: its cost is 2 us, never its
fastest 1 us) and of a second entry for the nearest-entry query.  `tunedb best`, `tunedb
nearest`, `tune-model` (the entry is a hit), the HTML report and the dashboard's entry page
must all show the same value for it; a test of the old behaviour (the fastest record) fails.
"""

from __future__ import annotations

import json

import pytest

import tunedb
from tunedb.index.model.units import fmt_seconds

from helpers import run_cli

TARGET = "cpu-native-t1"
W = {"family": "matmul", "M": 24, "N": 24, "K": 24}
W2 = {"family": "matmul", "M": 24, "N": 24, "K": 32}
WSPEC = "matmul:M=24,N=24,K=24"


def _cfg(db_target, workload, i):
    from tunedb.transfer.measure.jobs import local_job

    job = local_job(db_target, workload)
    cfgs = []
    import random

    rng = random.Random(i)
    while len(cfgs) < 3:
        c = job.space.sample(rng)
        if c != job.defaults and c not in cfgs:
            cfgs.append(c)
    return job, cfgs


@pytest.fixture(scope="module")
def noisy_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("onecost") / "db"
    db = tunedb.open(path)
    target = tunedb.local_target(TARGET)
    job, (best, mid, slow) = _cfg(target, W, 1)
    recs = [tunedb.Record(job.target, job.workload, best, [c * 1e-6] * 3) for c in (1.0, 2.0, 10.0)]
    recs += [tunedb.Record(job.target, job.workload, mid, [c * 1e-6] * 3) for c in (2.5, 2.6)]
    recs += [tunedb.Record(job.target, job.workload, slow, [9e-6, 9.5e-6, 8.5e-6])]
    job2, (b2, _, _) = _cfg(target, W2, 2)
    recs += [tunedb.Record(job2.target, job2.workload, b2, [3e-6, 3e-6, 3e-6])]
    db.commit(recs)
    db.close()
    return path, job, best


def test_best_and_the_store_agree_and_are_not_the_fastest_record(noisy_db):
    path, job, best = noisy_db
    db = tunedb.open(path)
    est = db.cost(job.target, job.workload, best)
    assert est.value == pytest.approx(2e-6) and est.records == 3
    out = json.loads(run_cli("best", "--db", str(path), "--target", TARGET, "--workload", WSPEC, "-k", "3",
                             "--json").stdout)
    assert out["configs"][0]["config"] == best
    assert out["configs"][0]["cost"] == est.value and out["configs"][0]["estimate"] == est.to_dict()
    assert db.best_costs(job.target, job.workload, 1)[0].estimate == est
    (e,) = [x for x in db.entry_list() if x.workload == job.workload]
    assert e.best_cost == est.value
    human = run_cli("best", "--db", str(path), "--target", TARGET, "--workload", WSPEC).stdout
    assert fmt_seconds(est.value) in human and "n" in human


def test_nearest_shows_the_same_cost(noisy_db):
    path, job, best = noisy_db
    est = tunedb.open(path).cost(job.target, job.workload, best)
    p = run_cli("nearest", "--db", str(path), "--target", TARGET, "--workload", "matmul:M=24,N=24,K=32",
                "-k", "3", "--json")
    assert p.returncode == 0, p.stderr
    matches = json.loads(p.stdout)["matches"]
    m = next(m for m in matches if m["workload"] == job.workload)
    assert m["best"][0]["config"] == best and m["best"][0]["cost"] == est.value


def test_report_and_dashboard_show_the_same_cost(noisy_db, tmp_path):
    path, job, best = noisy_db
    db = tunedb.open(path)
    est = db.cost(job.target, job.workload, best)
    p = run_cli("report", "--db", str(path), "--out", str(tmp_path / "rep"), "--json")
    assert p.returncode == 0, p.stderr
    html = (tmp_path / "rep" / "index.html").read_text()
    assert fmt_seconds(est.value) in html and fmt_seconds(1e-6) not in html
    from tunedb.index.model.keys import key_of
    from tunedb.transfer.apps.dashboard.data import entry_page

    page = entry_page(db, key_of(job.target), key_of(job.workload), db.runs())
    assert page["best"][0]["config_key"] == key_of(best)
    assert page["best"][0]["cost"] == est.value and page["best"][0]["estimate"] == est


@pytest.mark.slow
def test_tune_model_hit_shows_the_same_cost(noisy_db, tmp_path):
    """A model whose one task is the entry: it is a hit.  No stored decision puts the entry's best
    above the default (measured once for the reference), so the task keeps the default and shows
    the best as undecided, with the entry's estimate as its cost; the model latency is weight x
    the default's estimate, and the undecided gain is never part of it."""
    path, job, best = noisy_db
    model = tmp_path / "m.json"
    model.write_text(json.dumps({"format": "tunedb-model", "version": 1, "name": "one-task", "source": "a test",
                                 "input": {}, "tasks": [{"name": "mm", "workload": W, "weight": 2}], "omitted": []}))
    p = run_cli("tune-model", str(model), "--db", str(path), "--target", TARGET, "--budget", "4", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    (task,) = out["tasks"]
    db = tunedb.open(path)
    est = db.cost(job.target, job.workload, best)
    assert task["source"] == "hit" and task["choice"] == "default"
    assert task["undecided"]["config"] == best and task["undecided"]["estimate"]["value"] == est.value
    default_est = db.cost(job.target, job.workload, task["best_config"])
    assert task["best"] == default_est.value
    assert out["latency"] == pytest.approx(2 * default_est.value) == pytest.approx(out["default_latency"])
    assert task["undecided"]["gain_s"] == pytest.approx(2 * (default_est.value - est.value))
