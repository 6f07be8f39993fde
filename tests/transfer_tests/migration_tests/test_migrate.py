"""Migration between devices: local presets (real gcc builds) and replay devices (Kernel Tuner files)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tunedb
from tunedb.index import ParquetStore
from tunedb.index.hardware.localcpu import preset
from tunedb.index.model.estimate import estimate
from tunedb.index.model.keys import canonical_json, key_of
from tunedb.transfer.kernels import family_of
from tunedb.transfer.migration.migrate import migrate

from helpers import run_cli
from migrate_helpers import CONV_DIR, DST, FAST, ROOT, SRC, WORKLOADS, build_source_db, copy_db


@pytest.fixture(scope="module")
def source_db(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("migrate-src")
    with pytest.MonkeyPatch.context() as mp:
        if "TUNEDB_CACHE_DIR" not in os.environ:
            mp.setenv("TUNEDB_CACHE_DIR", str(base / "cache"))
        return build_source_db(base / "db")


@pytest.fixture
def db(source_db, tmp_path):
    return ParquetStore.open(copy_db(source_db, tmp_path / "db"))


def _dst_records(db, workload=None):
    return list(db.iter_records(preset(DST), workload))


def test_migrate_local_presets_then_rerun_is_resumable(db):
    rep = migrate(db, SRC, DST, top_k=2, measure_options=FAST)
    assert (rep.src, rep.dst, rep.executor, rep.interrupted) == (SRC, DST, "local", False)
    assert [r["status"] for r in rep.rows] == ["ok", "ok"]
    assert {r["workload"]["family"] for r in rep.rows} == {"matmul", "softmax"}
    for row in rep.rows:
        w = row["workload"]
        fam = family_of(w)
        space, default = fam.space(w), fam.default_config(w, preset(DST))
        src_best = db.best(preset(SRC), w, k=2)
        from tunedb.transfer.search.adapt import hardware_scale

        scale = hardware_scale(preset(SRC), preset(DST), fam.hardware_knobs) or None  # vec scales with the ISA
        from tunedb.transfer.search.adapt import AdaptReport, adapt_many

        # SRC's top-2 adapted; across vector widths the matmul family re-derives the register blocking
        adapted = adapt_many([r.config for r in src_best], space, default, AdaptReport(), scale,
                             source_target=preset(SRC), dest_target=preset(DST), family=w["family"])
        expected = {key_of(c) for c in adapted} | {key_of(default)}
        recs = _dst_records(db, w)
        assert {key_of(r.config) for r in recs} == expected          # SRC's top-2 adapted + DST's default
        assert row["measurements"] == row["candidates"] == len(expected)
        assert row["cache_hits"] == 0
        assert all(r.source == f"migrated:{SRC}" for r in recs)
        assert all(r.session == f"migrate:{SRC}->{DST}" for r in recs)
        roles = sorted(r.meta["migration"] for r in recs)
        assert roles.count("src_top") == len({key_of(c) for c in adapted})
        # the summary agrees with the one estimator over the records (one record per config here:
        # a config's cost is the median of that record's repeats)
        ok = [r for r in recs if r.status == "ok"]
        best = db.best_costs(preset(DST), w, 1)[0]
        assert row["dst_best"]["cost"] == best.estimate.value and row["dst_best"]["config"] == best.config
        assert row["dst_best"]["estimate"] == best.estimate.to_dict() and best.estimate.records == 1
        cost_of = {key_of(r.config): db.cost(preset(DST), w, r.config).value for r in ok}
        assert all(cost_of[key_of(r.config)] == pytest.approx(float(np.median(r.costs))) for r in ok)
        assert row["default"]["cost"] == pytest.approx(cost_of[key_of(default)])
        assert row["default"]["estimate"]["records"] == 1
        assert row["speedup_over_default"] == pytest.approx(cost_of[key_of(default)] / best.cost)
        assert row["speedup_over_default"] >= 1.0
        assert row["src_best_on_dst"]["config"] == adapted[0]
        assert row["speedup_over_src_best"] == pytest.approx(cost_of[key_of(adapted[0])] / best.cost)
        assert row["src_best_stayed_best"] == (key_of(best.config) == key_of(adapted[0]))
        src_top = db.best_costs(preset(SRC), w, 1)[0]
        assert row["src_best"] == {"config": src_top.config, "cost": src_top.estimate.value,
                                   "estimate": src_top.estimate.to_dict()}
    t = rep.totals
    n = sum(r["measurements"] for r in rep.rows)
    assert (t["workloads"], t["migrated"], t["skipped"], t["measurements"], t["cache_hits"]) == (2, 2, 0, n, 0)
    assert t["src_best_stayed_best"] == sum(r["src_best_stayed_best"] for r in rep.rows)
    geo = math.exp(sum(math.log(r["speedup_over_default"]) for r in rep.rows) / 2)
    assert t["geomean_speedup_over_default"] == pytest.approx(geo)

    # rerun: nothing new is measured, every candidate is a cache hit, same answer
    before = len(_dst_records(db))
    again = migrate(ParquetStore.open(db.path), SRC, DST, top_k=2, measure_options=FAST)
    assert again.totals["measurements"] == 0
    assert again.totals["cache_hits"] == n
    assert len(_dst_records(ParquetStore.open(db.path))) == before
    assert [r["dst_best"] for r in again.rows] == [r["dst_best"] for r in rep.rows]


def test_migrate_search_budget_is_resumable(db):
    rep = migrate(db, SRC, DST, top_k=1, budget=2, measure_options=FAST)
    for row in rep.rows:
        assert row["search"]["measurements"] == 2
        recs = _dst_records(db, row["workload"])
        searched = [r for r in recs if not r.source.startswith("migrated:")]
        assert len(searched) == 2 and all(r.source == "measured" for r in searched)
        assert all(r.session == f"migrate:{SRC}->{DST}" for r in searched)
        assert row["dst_best"]["cost"] == db.best_costs(preset(DST), row["workload"], 1)[0].estimate.value
    assert rep.totals["search_measurements"] == 4
    # same budget again: the search is done already
    again = migrate(db, SRC, DST, top_k=1, budget=2, measure_options=FAST)
    assert again.totals["measurements"] == 0 and again.totals["search_measurements"] == 0
    # a larger budget spends only the difference
    more = migrate(db, SRC, DST, top_k=1, budget=3, measure_options=FAST)
    assert more.totals["search_measurements"] == 2
    assert [r["search"]["remaining"] for r in more.rows] == [1, 1]


def test_migrate_listed_workloads_and_unknown_one(db):
    listed = [WORKLOADS[0], {"family": "matmul", "M": 16, "N": 16, "K": 16}]
    rep = migrate(db, SRC, DST, workloads=listed, top_k=1, measure_options=FAST)
    assert [r["status"] for r in rep.rows] == ["ok", "skipped"]
    assert rep.rows[1]["reason"] == "no ok records on the source"
    assert (rep.totals["migrated"], rep.totals["skipped"]) == (1, 1)
    assert {r.workload["family"] for r in _dst_records(db)} == {"matmul"}


def test_interrupt_keeps_measurements_and_rerun_finishes(db):
    seen = []

    def progress(ev):
        seen.append(ev)
        if len(seen) == 2:
            raise KeyboardInterrupt

    rep = migrate(db, SRC, DST, top_k=2, measure_options=FAST, progress=progress)
    assert rep.interrupted and rep.totals["interrupted"]
    assert rep.rows[0]["status"] == "interrupted"
    kept = _dst_records(ParquetStore.open(db.path))
    assert len(kept) == 2
    done = migrate(ParquetStore.open(db.path), SRC, DST, top_k=2, measure_options=FAST)
    assert not done.interrupted and done.totals["cache_hits"] == 2
    total = sum(r["candidates"] for r in done.rows)
    assert done.totals["measurements"] + 2 == total
    assert len(_dst_records(ParquetStore.open(db.path))) == total


def test_migrate_rejects_bad_arguments(db):
    with pytest.raises(ValueError, match="same target"):
        migrate(db, SRC, SRC)
    with pytest.raises(ValueError, match="no records"):
        migrate(db, "cpu-x86-64-v2-t1", DST)
    with pytest.raises(ValueError, match="not a local preset"):
        migrate(db, SRC, "v100")
    with pytest.raises(ValueError, match="top_k"):
        migrate(db, SRC, DST, top_k=0)


# ------------------------------------------------------------------------------- replay devices
needs_data = pytest.mark.skipif(not (CONV_DIR / "A100.json.gz").is_file() or not (CONV_DIR / "A4000.json.gz").is_file(),
                                reason="../shared/data/kernel_tuner/convolution_milo is absent")


@needs_data
def test_migrate_between_replay_devices(tmp_path):
    from tunedb.transfer.interop import collect
    from tunedb.transfer.measure.replay import ReplayData

    db = ParquetStore.open(tmp_path / "db")
    recs, _ = collect("kernel-tuner", [CONV_DIR / "A100.json.gz"])
    db.commit(recs)
    src_name = recs[0].target_name
    rep = migrate(db, src_name, CONV_DIR / "A4000.json.gz", top_k=3)
    truth = ReplayData(CONV_DIR / "A4000.json.gz")
    assert rep.dst == truth.target["name"] == "NVIDIA RTX A4000"
    (row,) = rep.rows
    assert row["status"] == "ok" and row["measurements"] == 3 and row["default"] is None
    dst_recs = list(db.iter_records(truth.target, truth.workload))
    assert len(dst_recs) == 3
    assert all(r.source == f"migrated:{src_name}" for r in dst_recs)
    src_top = db.best(src_name, truth.workload, k=3)
    assert {key_of(r.config) for r in dst_recs} == {key_of(r.config) for r in src_top}
    # costs are the file's costs for those configs
    for r in dst_recs:
        assert r.costs == truth.results[canonical_json(r.config)].costs
    # the estimator's cost of each config on DST: one record each, the median of the file's repeats
    file_cost = {key_of(r.config): estimate([truth.results[canonical_json(r.config)]]).value for r in src_top}
    best = min(file_cost.values())
    assert row["dst_best"]["cost"] == pytest.approx(best)
    assert row["speedup_over_src_best"] == pytest.approx(file_cost[key_of(src_top[0].config)] / best)
    assert row["speedup_over_default"] is None
    assert row["src_best_stayed_best"] == (file_cost[key_of(src_top[0].config)] == best)
    again = migrate(db, src_name, truth, top_k=3)   # a ReplayData works as the destination too
    assert again.totals["measurements"] == 0 and again.totals["cache_hits"] == 3


@needs_data
def test_source_best_is_the_estimate_over_all_its_records():
    """SRC's config X measured three times (2, 10 and 1 ms) costs 2 ms (n=3): it is SRC's best
    and reported as 2 ms, not 1 ms; Y (one record, 3 ms) is second.  DST's costs are the
    estimator's too."""
    from tunedb.index.memory.store import MemoryStore
    from tunedb.index.model.record import Record
    from tunedb.transfer.measure.replay import ReplayData

    truth = ReplayData(CONV_DIR / "A4000.json.gz")
    src = ReplayData(CONV_DIR / "A100.json.gz").target
    ok = sorted(cj for cj, r in truth.results.items() if r.status == "ok")
    cx, cy = json.loads(ok[3]), json.loads(ok[7])
    db = MemoryStore()
    for ms in ((1.9, 2.0, 3.1), (10.0,), (1.0,)):  # the 2 ms record's mean is 2.33 ms: one record is not the cost
        db.commit(Record(src, truth.workload, cx, costs=[m * 1e-3 for m in ms]))
    db.commit(Record(src, truth.workload, cy, costs=[3e-3]))
    rep = migrate(db, src["name"], truth, top_k=2)
    (row,) = rep.rows
    assert row["status"] == "ok" and row["candidates"] == 2
    assert row["src_best"]["config"] == cx and row["src_best"]["cost"] == pytest.approx(2e-3)
    est = row["src_best"]["estimate"]
    assert est["records"] == 3 and est["samples"] == 5 and (est["lo"], est["hi"]) == pytest.approx((1e-3, 10e-3))
    meta = {key_of(r.config): r.meta for r in db.iter_records(truth.target, truth.workload)}
    assert (meta[key_of(cx)]["src_rank"], meta[key_of(cy)]["src_rank"]) == (0, 1)
    assert meta[key_of(cx)]["src_cost"] == pytest.approx(2e-3) and meta[key_of(cy)]["src_cost"] == pytest.approx(3e-3)
    on_dst = {key_of(c): estimate([truth.results[canonical_json(c)]]) for c in (cx, cy)}
    assert row["src_best_on_dst"]["cost"] == on_dst[key_of(cx)].value
    assert row["src_best_on_dst"]["estimate"] == on_dst[key_of(cx)].to_dict()
    best = min(on_dst.values(), key=lambda e: e.value)
    assert row["dst_best"]["cost"] == best.value and row["dst_best"]["estimate"]["records"] == 1
    assert row["speedup_over_src_best"] == pytest.approx(on_dst[key_of(cx)].value / best.value)


@needs_data
def test_migrate_on_a_memory_store_equals_the_parquet_db(tmp_path):
    """Replay migration with a short search (same seed) on the in-memory store and on a Parquet DB:
    the same report and the same destination records."""
    from tunedb.index.memory.store import MemoryStore
    from tunedb.transfer.interop import collect

    recs, _ = collect("kernel-tuner", [CONV_DIR / "A100.json.gz"])
    pq_db = ParquetStore.open(tmp_path / "db")
    pq_db.commit(recs)
    mem = MemoryStore()
    mem.commit(list(pq_db.iter_records()))  # the same records in the same order
    reports = [migrate(db, recs[0].target_name, CONV_DIR / "A4000.json.gz", top_k=3, budget=4, seed=2)
               for db in (pq_db, mem)]
    a, b = (r.to_json() for r in reports)
    a["totals"].pop("elapsed_s")
    b["totals"].pop("elapsed_s")
    assert a == b
    assert a["totals"]["measurements"] == 3 and a["totals"]["search_measurements"] == 4

    def dst(db):
        return sorted((canonical_json(r.config), r.costs, r.source, r.session, canonical_json(r.meta))
                      for r in db.iter_records(reports[0].dst))

    assert len(dst(pq_db)) == 7 and dst(pq_db) == dst(mem)


def test_importing_executors_does_not_import_ray():
    code = ("import sys; import tunedb.transfer.measure.executors, tunedb.transfer.integrations.ray_executor; "
            "print('ray' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "False", p.stderr


@needs_data
def test_cli_migrate_replay_json(tmp_path):
    from tunedb.transfer.interop import collect

    db = ParquetStore.open(tmp_path / "db")
    recs, _ = collect("kernel-tuner", [CONV_DIR / "A100.json.gz"])
    db.commit(recs)
    p = run_cli("migrate", "--db", str(tmp_path / "db"), "--from", recs[0].target_name,
                "--replay", str(CONV_DIR / "A4000.json.gz"), "--top-k", "2", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert set(out) >= {"rows", "totals"}
    assert out["totals"]["measurements"] == 2 and out["rows"][0]["dst_best"]["cost"] > 0
    row = out["rows"][0]
    for item in (row["src_best"], row["dst_best"], row["src_best_on_dst"]):  # the estimator's, with n and interval
        assert item["estimate"]["value"] == item["cost"] and item["estimate"]["records"] >= 1
        assert item["estimate"]["lo"] <= item["cost"] <= item["estimate"]["hi"]
    assert p.stderr.strip() == ""


# ------------------------------------------------------------------------------------- CLI
def test_cli_migrate_local_json_then_table(db):
    path = str(db.path)
    p = run_cli("migrate", "--db", path, "--from", SRC, "--to", DST, "--top-k", "1",
                "--workloads", str(_write(db.path.parent / "w.txt", "matmul:M=32,N=32,K=32\n")), "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert len(out["rows"]) == 1 and out["rows"][0]["status"] == "ok"
    # SRC's best retargeted to DST's vector width, its scaled variant, DST's default
    assert out["totals"]["measurements"] == out["rows"][0]["candidates"] == 3
    assert out["run_id"] and tunedb.open(path).runs("migrate")[-1]["run_id"] == out["run_id"]
    p = run_cli("migrate", "--db", path, "--from", SRC, "--to", DST, "--top-k", "1",
                "--workloads", str(db.path.parent / "w.txt"))
    assert p.returncode == 0, p.stderr
    assert "0 new measurements, 3 cache hits" in p.stdout and "vs default" in p.stdout
    assert "n=" in p.stdout and "SRC best (on SRC)" in p.stdout  # costs shown as CostEstimate.text()


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("args,message", [
    (["--from", "no-such-target", "--to", DST], "unknown target 'no-such-target'"),
    (["--from", SRC, "--replay", "/nonexistent/file.json.gz"], "replay file /nonexistent/file.json.gz does not exist"),
    (["--from", SRC, "--to", SRC], "same target"),
    (["--from", SRC, "--to", DST, "--top-k", "0"], "--top-k must be >= 1"),
])
def test_cli_migrate_user_errors(db, args, message):
    p = run_cli("migrate", "--db", str(db.path), *args)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tunedb: error:") and message in lines[0], p.stderr


def test_cli_executor_ray_without_ray_is_one_line(db):
    code = ("import sys; sys.modules['ray'] = None\n"
            "from tunedb.transfer.cli.main import main\n"
            f"raise SystemExit(main(['migrate', '--db', {str(db.path)!r}, '--from', {SRC!r}, '--to', {DST!r}, "
            "'--executor', 'ray']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs Ray" in lines[0] and "pip install" in lines[0], p.stderr
    assert _dst_records(ParquetStore.open(db.path)) == []  # nothing was measured
