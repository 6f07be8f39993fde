"""Reads of a published snapshot stay lazy: every command that reads one target or one entry
fetches only the parts that hold it, plus bounded index data -- measured in the access log of a
real nginx (``$body_bytes_sent`` of every request), not in the reader's own counters.

The snapshot: 100 targets.  99 synthetic GPUs each hold 6 workloads of the imported family
``dense`` (a family tunedb has no kernel of, so the CLI checks ``--workload`` against the stored
workloads) x 4 configs; the 100th, the A100 of the shipped Kernel Tuner data, holds 24 configs of
its convolution cache.  One part per (target, workload): 600 parts, a snapshot of about 6 MB
whose manifest is under 1 % of it.  Built once per module on a tmpfs when there is one (the
publisher fsyncs every file).

Bounds (shares of the snapshot's bytes, every request of one cold command):

* ``best`` of one (target, workload): at most 2 %: the manifest (~0.9 %), the entries files (the
  ``--workload`` check of an imported family; ~0.3 %), the target's part list and one part.
  Fetching a second target's parts already costs 1 %; all of them, 100 %.
* ``best`` of a device with no records (a prediction from the nearest entries), ``nearest``,
  ``tune --also URL --replay`` and the Kernel Tuner ``WarmStart`` over a snapshot: at most 10 %:
  the manifest, the entries files and the nearest-entry vectors (together ~3 %), plus the parts of
  the few nearest entries (k of them, one part each).  Reading every target is ~100 %.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

import tunedb
from tunedb.index import RecordBatch
from tunedb.transfer.cli.main import main
from tunedb.transfer.measure.replay import ReplayData
from tunedb.transfer.migration.publish import publish

import nginx_server
from helpers import kernel_tuner_file

BS = 4096  # a small verified block: reads are real Range requests
TARGETS, WORKLOADS, CONFIGS = 99, 6, 4
KT_DEVICE, KT_CONFIGS = "A100", 24
ONE_TARGET_SHARE = 0.02
NEIGHBOURS_SHARE = 0.10


def _synthetic(t: int) -> dict:
    return {"kind": "gpu", "name": f"lazy-gpu{t:03d}", "vendor": "nvidia", "arch": f"sm_{70 + t % 20}",
            "sm_count": 40 + t % 60, "memory_gb": 16 + 8 * (t % 6)}


def _workload(t: int, w: int) -> dict:
    return {"family": "dense", "M": 64 * (1 + (t + w) % 16), "N": 128 * (1 + w), "K": 256}


def _synthetic_batch() -> RecordBatch:
    cols: dict[str, list] = {k: [] for k in ("target", "workload", "config", "costs")}
    for t in range(TARGETS):
        for w in range(WORKLOADS):
            for c in range(CONFIGS):
                x = 1e-4 * (1 + (t * 7 + w * 3 + c * 5) % 11)
                cols["target"].append(_synthetic(t))
                cols["workload"].append(_workload(t, w))
                cols["config"].append({"tile": 2 ** c, "unroll": c % 3})
                cols["costs"].append([x, x * 1.01, x * 0.99])
    return RecordBatch.from_columns(**cols, source="measured")


def _kernel_tuner_records() -> tuple[list, dict]:
    """The first ``KT_CONFIGS`` ok records of the shipped A100 convolution cache (as the Kernel
    Tuner importer makes them) and its workload."""
    data = ReplayData(kernel_tuner_file(KT_DEVICE))
    recs = []
    for key in data.doc["cache"]:
        rec = data.entry_record(key)
        if rec is not None and rec.ok:
            recs.append(rec)
        if len(recs) == KT_CONFIGS:
            break
    assert len(recs) == KT_CONFIGS
    return recs, data.workload


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory):
    """``(snapshot dir, nginx, info)``: the 100-target snapshot, served by a private nginx."""
    nginx_server.need_nginx()
    base = tmp_path_factory.mktemp("lazy")
    fast = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else None
    work = Path(tempfile.mkdtemp(prefix="tunedb-lazy-", dir=fast))
    try:
        recs, kt_workload = _kernel_tuner_records()
        with tunedb.open(work / "src") as src:
            src.commit(_synthetic_batch())
            src.commit(recs)
            pub = publish(src, work / "snap", publisher="lazy", block_size=BS)
        snap = base / "snap"
        shutil.copytree(work / "snap", snap)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert pub["targets"] == TARGETS + 1 == 100 and pub["parts"] == TARGETS * WORKLOADS + 1
    srv = nginx_server.NginxServer(base / "nginx", snap).start()
    info = {"bytes": sum(p.stat().st_size for p in snap.rglob("*") if p.is_file()), "kt_target": recs[0].target,
            "kt_workload": kt_workload}
    yield snap, srv, info
    srv.stop()


def fetched(srv: nginx_server.NginxServer, argv: list[str], cache: Path, monkeypatch) -> tuple[int, dict, dict]:
    """Run ``tunedb ARGV`` (``URL`` replaced by the snapshot's URL) with a cold cache; ``(exit
    status, bytes per snapshot folder from the access log, files fetched per folder)``."""
    monkeypatch.setenv("TUNEDB_CACHE_DIR", str(cache))
    srv.clear_log()
    rc = main([srv.url if a == "URL" else a for a in argv])
    by_folder: dict[str, int] = {}
    files: dict[str, set] = {}
    for path, status, sent in srv.served():
        assert status in (200, 206, 304), (path, status)
        folder = path.lstrip("/").split("/")[0]
        by_folder[folder] = by_folder.get(folder, 0) + sent
        files.setdefault(folder, set()).add(path)
    return rc, by_folder, {k: len(v) for k, v in files.items()}


def _share(by_folder: dict, info: dict) -> float:
    return sum(by_folder.values()) / info["bytes"]


def test_one_target_best_fetches_its_part_and_index_data_only(snapshot, tmp_path, monkeypatch, capsys):
    """``tunedb best --db URL --target NAME --workload W``: the target found by name in the
    manifest, its part list and the one part of W fetched; at most 2 % of the snapshot."""
    snap, srv, info = snapshot
    wl = json.dumps(_workload(42, 3))
    rc, by, files = fetched(srv, ["best", "--db", "URL", "--target", "lazy-gpu042", "--workload", wl, "--json"],
                            tmp_path / "c1", monkeypatch)
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["configs"] and out["target"]["name"] == "lazy-gpu042"
    assert files.get("targets") == 1 and files.get("data") == 1 and "entries" not in files, (by, files)
    assert _share(by, info) <= ONE_TARGET_SHARE, (by, info["bytes"])
    # by target key, in a second process with the same cache: the manifest revalidated (304), nothing else
    man = json.loads((snap / "manifest.json").read_text())
    key = next(k for k, t in man["targets"].items() if t["target_name"] == "lazy-gpu042")
    rc, by2, files2 = fetched(srv, ["best", "--db", "URL", "--target", key, "--workload", wl, "--json"],
                              tmp_path / "c1", monkeypatch)
    assert rc == 0 and json.loads(capsys.readouterr().out)["configs"] == out["configs"]
    assert files2 == {"manifest.json": 1} and sum(by2.values()) == 0, (by2, files2)


def test_best_of_a_device_with_no_records_reads_its_neighbours(snapshot, tmp_path, monkeypatch, capsys):
    """``tunedb best`` for a device the snapshot has no records of: a prediction from the nearest
    entries (manifest, entries, vectors, and the parts of the k neighbours): at most 10 %."""
    _, srv, info = snapshot
    new = json.dumps({"kind": "gpu", "name": "lazy-new-gpu", "vendor": "nvidia", "arch": "sm_75", "sm_count": 44,
                      "memory_gb": 24})
    target_file = tmp_path / "new.json"
    target_file.write_text(new)
    rc, by, files = fetched(srv, ["best", "--db", "URL", "--target", str(target_file), "--workload",
                                  json.dumps(_workload(5, 1)), "-k", "3", "--json"], tmp_path / "c2", monkeypatch)
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out.get("neighbours"), out
    assert files.get("targets", 0) <= 10 and files.get("data", 0) <= 10, (by, files)
    assert _share(by, info) <= NEIGHBOURS_SHARE, (by, info["bytes"])


def test_nearest_reads_the_vectors_and_its_matches_only(snapshot, tmp_path, monkeypatch, capsys):
    """``tunedb nearest -k 5``: the entries and vectors (bounded index data) and the best configs
    of the 5 matches (one part each): at most 10 %."""
    _, srv, info = snapshot
    rc, by, files = fetched(srv, ["nearest", "--db", "URL", "--target", "lazy-gpu007", "--workload",
                                  json.dumps(_workload(7, 2)), "-k", "5", "--json"], tmp_path / "c3", monkeypatch)
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and len(out["matches"]) == 5
    assert files.get("data", 0) <= 5 and files.get("targets", 0) <= 5, (by, files)
    assert _share(by, info) <= NEIGHBOURS_SHARE, (by, info["bytes"])


def test_tune_also_a_snapshot_with_a_replayed_run(snapshot, tmp_path, monkeypatch, capsys):
    """``tunedb tune --db MINE --also URL --replay A4000``: seeded from the A100's entry of the
    snapshot (its part) and the index data: at most 10 %."""
    _, srv, info = snapshot
    mine = tmp_path / "mine"
    assert main(["init", "--db", str(mine)]) == 0
    rc, by, files = fetched(srv, ["tune", "--db", str(mine), "--also", "URL", "--replay",
                                  str(kernel_tuner_file("A4000")), "--budget", "6", "--json"], tmp_path / "c4",
                            monkeypatch)
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and out["seeds"], out
    assert files.get("data", 0) <= 10 and files.get("targets", 0) <= 10, (by, files)
    assert _share(by, info) <= NEIGHBOURS_SHARE, (by, info["bytes"])
