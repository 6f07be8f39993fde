"""The Ray executor: a local Ray instance runs a migration's measurements as tasks; the driver commits."""

from __future__ import annotations

import os
import time

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")

from tunedb.index import ParquetStore  # noqa: E402
from tunedb.index.hardware.localcpu import preset  # noqa: E402
from tunedb.transfer.integrations.ray_executor import RayExecutor, target_resource  # noqa: E402
from tunedb.transfer.measure.backend import LocalBackend  # noqa: E402
from tunedb.transfer.measure.executors import ExecutorUnavailable, Finalise, new_run_id  # noqa: E402
from tunedb.transfer.migration.migrate import make_executor, migrate  # noqa: E402

from migrate_helpers import CONV_DIR, DST, FAST, ROOT, SRC, build_source_db, copy_db  # noqa: E402

pytestmark = pytest.mark.slow
A4000 = "NVIDIA RTX A4000"


@pytest.fixture(scope="module")
def source_db(tmp_path_factory):
    base = tmp_path_factory.mktemp("ray-src")
    cache = os.environ.get("TUNEDB_CACHE_DIR") or str(base / "cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TUNEDB_CACHE_DIR", cache)
        return build_source_db(base / "db", budget=2), cache


@pytest.fixture(scope="module")
def ray_cluster(source_db):
    """A local Ray instance whose only node owns DST and the replayed A4000 (not SRC)."""
    _, cache = source_db
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, resources={target_resource(preset(DST)): 1, target_resource({"name": A4000}): 1},
             include_dashboard=False,
             log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "TUNEDB_CACHE_DIR": cache}})
    yield
    ray.shutdown()


def test_migration_through_ray(source_db, ray_cluster, tmp_path):
    db = ParquetStore.open(copy_db(source_db[0], tmp_path / "db"))
    ex = RayExecutor()
    rep = migrate(db, SRC, DST, top_k=2, budget=1, executor=ex, measure_options=FAST)
    assert rep.executor == "ray" and not rep.interrupted
    assert [r["status"] for r in rep.rows] == ["ok", "ok"]
    recs = list(db.iter_records(preset(DST)))
    assert len(recs) == rep.totals["measurements"] + rep.totals["search_measurements"] > 0
    # every record was measured in a Ray worker (another process), committed here
    assert all(r.meta["executor"] == "ray" for r in recs)
    assert all(r.meta["worker_pid"] != os.getpid() for r in recs)
    assert all(r.meta.get("ray_node_id") for r in recs)
    migrated = [r for r in recs if r.source == f"migrated:{SRC}"]
    assert len(migrated) == rep.totals["measurements"]
    assert {r.source for r in recs} == {f"migrated:{SRC}", "measured"}
    # rerun through Ray: all cache hits, nothing new committed
    again = migrate(ParquetStore.open(db.path), SRC, DST, top_k=2, budget=1, executor=ex, measure_options=FAST)
    assert again.totals["measurements"] == 0 and again.totals["search_measurements"] == 0
    assert len(list(ParquetStore.open(db.path).iter_records(preset(DST)))) == len(recs)
    ex.close()
    assert ray.is_initialized()  # the executor did not start this instance, so it leaves it running


def test_retried_task_commits_once(ray_cluster, tmp_path):
    """A retry produces the same record_id; the driver's commit skips the duplicate."""
    db = ParquetStore.open(tmp_path / "db")
    ex = RayExecutor()
    fin = Finalise(new_run_id(), source=f"migrated:{SRC}")
    w = {"family": "matmul", "M": 16, "N": 16, "K": 16}
    from tunedb.transfer.kernels import family_of

    cfg = family_of(w).default_config(w, preset(DST))
    first = ex.measure(LocalBackend(FAST), preset(DST), w, [cfg], fin, on_record=db.commit)
    second = ex.measure(LocalBackend(FAST), preset(DST), w, [cfg], fin)   # as if Ray ran it again
    assert first[0].record_id == second[0].record_id
    assert first[0].meta["worker_pid"] != os.getpid()
    assert db.commit(second) == 0
    assert len(db.records()) == 1


def test_make_executor_ray_imports_the_integration_lazily():
    """``make_executor("ray")`` still works although the Ray executor lives in transfer.integrations."""
    ex = make_executor("ray")
    assert isinstance(ex, RayExecutor) and ex.name == "ray"
    ex.close()


def test_target_no_node_owns_is_a_clear_error(ray_cluster):
    ex = RayExecutor()
    t0 = time.monotonic()
    with pytest.raises(ExecutorUnavailable, match="no Ray node owns target 'cpu-x86-64-t1'"):
        ex.measure(LocalBackend(FAST), preset(SRC), {"family": "matmul", "M": 16, "N": 16, "K": 16},
                   [{}], Finalise(new_run_id()))
    assert time.monotonic() - t0 < 30  # fails fast instead of waiting for a node forever


@pytest.mark.skipif(not (CONV_DIR / "A4000.json.gz").is_file(), reason="../shared/data/kernel_tuner is absent")
def test_replay_migration_through_ray(ray_cluster, tmp_path):
    from tunedb.transfer.interop import collect

    db = ParquetStore.open(tmp_path / "db")
    recs, _ = collect("kernel-tuner", [CONV_DIR / "A100.json.gz"])
    db.commit(recs)
    rep = migrate(db, recs[0].target_name, CONV_DIR / "A4000.json.gz", top_k=2, executor=RayExecutor())
    assert rep.dst == A4000 and rep.totals["measurements"] == 2
    dst = [r for r in db.iter_records(A4000)]
    assert len(dst) == 2 and all(r.meta["executor"] == "ray" and r.meta["replay_file"] == "A4000.json.gz"
                                 for r in dst)


def test_cli_executor_ray_starts_its_own_instance(source_db, tmp_path):
    """``tunedb migrate --executor ray`` in a fresh process: Ray runs the measurements, exit 0."""
    import json

    from helpers import run_cli

    path = copy_db(source_db[0], tmp_path / "db")
    wl = tmp_path / "w.txt"
    wl.write_text("softmax:M=32,N=128\n")
    p = run_cli("migrate", "--db", str(path), "--from", SRC, "--to", DST, "--top-k", "1", "--workloads", str(wl),
                "--executor", "ray", "--json", env={"TUNEDB_CACHE_DIR": source_db[1], "RAY_ADDRESS": ""})
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["executor"] == "ray" and out["totals"]["measurements"] == 2
    recs = list(ParquetStore.open(path).iter_records(preset(DST)))
    assert len(recs) == 2 and all(r.meta["executor"] == "ray" for r in recs)
