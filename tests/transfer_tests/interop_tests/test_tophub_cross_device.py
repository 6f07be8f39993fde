"""A cross-device query on real TopHub data: conv2d tuned on titanx and 1080ti answers for v100."""

from __future__ import annotations

import json

import pytest

from tunedb.index import ParquetStore
from tunedb.transfer.interop import collect

from helpers import ROOT, run_cli

CUDA_LOG = ROOT / "datasets" / "tophub" / "cuda_v0.10.log"


@pytest.fixture(scope="module")
def tophub_db(tmp_path_factory):
    if not CUDA_LOG.is_file():
        pytest.skip("datasets/tophub/cuda_v0.10.log not shipped")
    recs, rep = collect("autotvm", [CUDA_LOG])
    path = tmp_path_factory.mktemp("tophub") / "db"
    ParquetStore.open(path).commit(recs)
    return path, recs


def test_v100_conv2d_neighbours_include_titanx_and_1080ti(tophub_db):
    path, recs = tophub_db
    db = ParquetStore.open(path)
    v100 = [r for r in recs if r.target.get("model") == "v100" and r.family == "conv2d"]
    assert len(v100) > 50
    found = set()
    for r in v100[:25]:
        ms = db.nearest(r.target, r.workload, k=10, exclude_target=True)
        assert ms and all(m.target_key != r.target_key for m in ms)
        assert all(json.loads(json.dumps(m.workload))["family"] == "conv2d" for m in ms)
        found.update(m.target.get("model") for m in ms)
        assert all(m.best and m.best[0].status == "ok" for m in ms)
    assert {"titanx", "1080ti"} <= found


def test_nearest_cli_on_tophub(tophub_db, tmp_path):
    path, recs = tophub_db
    r = next(r for r in recs if r.target.get("model") == "v100" and r.family == "conv2d")
    wfile = tmp_path / "w.json"
    wfile.write_text(json.dumps(r.workload))
    out = run_cli("nearest", "--db", str(path), "--target", r.target_name, "--workload", str(wfile), "-k", "3",
                  "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["matches"][0]["similarity"] == pytest.approx(1.0, abs=1e-4)  # the entry itself
    for m in res["matches"]:
        assert {"target_name", "target_key", "workload", "similarity", "best"} <= set(m)
