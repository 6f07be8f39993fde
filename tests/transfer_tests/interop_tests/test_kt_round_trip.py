"""``tunedb export --format kernel-tuner`` then ``tunedb import kernel-tuner`` gives back every
record on the same target and workload keys: real caches of the shared data (two kernels, the
convolution at two problem sizes), plus tunedb's own matrix products of several shapes with
repeated and confirmation records (what a Kernel Tuner cache entry cannot hold alone)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import tunedb
from tunedb.index.model.record import Record
from tunedb.transfer.cli.main import main as cli_main
from tunedb.transfer.interop.tabular import records_from_table

from helpers import SHARED_DATA

KT = SHARED_DATA / "kernel_tuner"
pytestmark = pytest.mark.skipif(not KT.is_dir(), reason=f"shared Kernel Tuner data not found at {KT}")


def _slice(name: str, n: int, **header) -> dict:
    """The first ``n`` entries of a shared cache and its first 5 failed ones (real measurements),
    with ``header`` fields replaced."""
    with gzip.open(KT / name, "rt") as f:
        doc = json.load(f)
    items = list(doc["cache"].items())
    bad = [(k, v) for k, v in items if isinstance(v.get("time"), str)][:5]
    return {**doc, "cache": dict(items[:n] + bad), **header}


def _rows(db) -> list[tuple]:
    """What must survive the round trip, one tuple per record."""
    return sorted((r.target_key, r.workload_key, r.config_key, r.status, r.error, tuple(r.costs), r.compile_s,
                   r.timestamp.isoformat(), json.dumps(r.meta, sort_keys=True)) for r in records_from_table(db.records()))


def _own_records() -> list[Record]:
    """tunedb's own records: matrix products of 4 shapes on one CPU, each config measured twice,
    the best one also confirmed twice (costs in seconds that milliseconds do not give back)."""
    target = {"kind": "cpu", "name": "test-cpu", "isa": "avx2"}
    out = []
    for i, (m, n, k) in enumerate(((64, 64, 64), (128, 64, 32), (96, 96, 96), (256, 128, 64))):
        w = {"family": "matmul", "M": m, "N": n, "K": k}
        for j, tile in enumerate((8, 16, 32)):
            for rep in range(2):
                costs = [(1 + i + j / 3 + rep / 7) * 1.1e-4 / 3, (1 + i + j / 3) * 1.3e-4 / 7]
                out.append(Record(target, w, {"tile": tile, "unroll": 1 + rep % 2 - rep % 2}, costs=costs,
                                  compile_s=0.0123 + j / 1000))
            if tile == 16:
                out += [Record(target, w, {"tile": 16, "unroll": 1}, costs=[1.01e-4 / 3], meta={"origin": "confirm"})
                        for _ in range(2)]
        out.append(Record(target, w, {"tile": 64, "unroll": 1}, status="compile_error", error="too many registers"))
    return out


def test_kernel_tuner_export_then_import_gives_back_every_record(tmp_path: Path, capsys) -> None:
    files, entries = [], 0
    for name, doc in (("A100.json", _slice("convolution_milo/A100.json.gz", 120)),
                      ("A100_small.json", _slice("convolution_milo/A100.json.gz", 80, problem_size=[2048, 2048])),
                      ("A100_dedisp.json", _slice("dedispersion_milo/A100.json.gz", 60))):
        p = tmp_path / name
        p.write_text(json.dumps(doc))
        files.append(str(p))
        entries += len(doc["cache"])
    src = tmp_path / "src"
    assert cli_main(["import", "kernel-tuner", *files, "--db", str(src), "--no-models"]) == 0
    own = _own_records()
    with tunedb.open(src) as db:
        db.commit(own)
        before = _rows(db)
        workloads = {r[1] for r in before}
    assert len(workloads) == 3 + 4 and len(before) == entries + len(own) == entries + 4 * 9
    capsys.readouterr()
    out = tmp_path / "exported"
    assert cli_main(["export", "--format", "kernel-tuner", str(out), "--db", str(src), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["exported"] == len(before) and rep["skipped"] == 0 and len(rep["files"]) == len(workloads)
    # Kernel Tuner reads each file as an ordinary cache (one entry per config)
    for f in rep["files"]:
        doc = json.loads(Path(f).read_text())
        assert {"device_name", "kernel_name", "tune_params_keys", "tune_params", "cache"} <= set(doc)
    dst = tmp_path / "dst"
    assert cli_main(["import", "kernel-tuner", *rep["files"], "--db", str(dst), "--json", "--no-models"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["skipped"] == 0 and got["imported"] == len(before)
    with tunedb.open(dst) as db:
        after = _rows(db)
    assert after == before
    # importing the export again adds nothing
    assert cli_main(["import", "kernel-tuner", *rep["files"], "--db", str(dst), "--json", "--no-models"]) == 0
    assert json.loads(capsys.readouterr().out)["new"] == 0
