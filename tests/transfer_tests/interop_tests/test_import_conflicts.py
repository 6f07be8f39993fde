"""One target is one device (issue 13 A): mislabelled Kernel Tuner caches, files that claim one
device but disagree, ``--device``, and replay isolation.

Inputs are the real shared caches (six GPUs' convolution_milo files, whole), modified only in
their header (``device_name``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tunedb.index import ParquetStore
from tunedb.index.model.estimate import record_value
from tunedb.index.model.keys import canonical_json
from tunedb.transfer.cli.main import main as cli_main
from tunedb.transfer.interop import collect, times_disagree
from tunedb.transfer.measure.replay import ReplayData, ReplayStore
from tunedb.transfer.tuners.kernel_tuner.cachefile import device_choice, host_like_device_name

from helpers import SHARED_DATA

KT = SHARED_DATA / "kernel_tuner" / "convolution_milo"
GPUS = ("A100", "A4000", "A6000", "MI250X", "W6600", "W7800")
pytestmark = pytest.mark.skipif(not KT.is_dir(), reason=f"shared Kernel Tuner data not found at {KT}")


def _load(p: Path) -> dict:
    with gzip.open(p, "rt") as f:
        return json.load(f)


def _rewrite(src: Path, dst: Path, device_name: str | None) -> Path:
    """``src`` as ``dst`` (gzip JSON) with its header's ``device_name`` replaced (None: as is)."""
    doc = _load(src)
    if device_name is not None:
        doc["device_name"] = device_name
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst


@pytest.fixture(scope="module")
def mislabelled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The six GPUs' caches, each saying ``device_name: "x86_64"`` (the host that post-processed them)."""
    d = tmp_path_factory.mktemp("x86")
    return {g: _rewrite(KT / f"{g}.json.gz", d / f"{g}.json.gz", "x86_64") for g in GPUS}


def test_host_like_names() -> None:
    for name in ("x86_64", "amd64", "aarch64", "arm64", "i686", "ppc64le", "localhost", "node042",
                 "gpu-node-7", "nid001234", "login1.cluster.example.org", "icelake"):
        assert host_like_device_name(name), name
    for name in ("NVIDIA A100-PCIE-40GB", "AMD Radeon PRO W6600", "A100", "MI250X", "gfx90a:sramecc+:xnack-",
                 "Tesla V100-SXM2-16GB", "Some Custom Accelerator"):
        assert host_like_device_name(name) is None, name
    p = Path("A100.json.gz")
    assert device_choice({"device_name": "x86_64"}, p)[0] == "A100"
    assert device_choice({"device_name": "x86_64"}, p, "Z") == ("Z", None)  # --device overrides any name
    # a C (CPU) kernel's cache may well name its host
    assert device_choice({"device_name": "x86_64", "lang": "C"}, p) == ("x86_64", None)
    assert device_choice({"device_name": ""}, Path("MI250X.json.gz")) == ("MI250X", None)


def test_mislabelled_files_become_six_targets(mislabelled: dict[str, Path]) -> None:
    recs, rep = collect("kernel-tuner", [mislabelled[g] for g in GPUS])
    names = {r.target["name"] for r in recs}
    assert names == set(GPUS)
    by_name = {r.target["name"]: r.target for r in recs}
    assert by_name["A100"]["device_name"] == "NVIDIA A100-PCIE-40GB"  # the catalog resolves the stem
    assert by_name["W6600"]["vendor"] == "amd"
    assert [(Path(c["file"]).name, c["kind"], c["device_claimed"], c["target_used"]) for c in rep.conflicts] == \
        [(f"{g}.json.gz", "host-device-name", "x86_64", g) for g in GPUS]
    assert all(c["evidence"]["reason"] == "CPU architecture name" for c in rep.conflicts)


def test_device_override_keeps_one_target_and_reports(mislabelled: dict[str, Path]) -> None:
    recs, rep = collect("kernel-tuner", [mislabelled[g] for g in GPUS], device="X")
    assert {r.target["name"] for r in recs} == {"X"}
    assert [Path(c["file"]).name for c in rep.conflicts] == [f"{g}.json.gz" for g in GPUS]
    assert {c["kind"] for c in rep.conflicts} == {"disagreeing-times"}
    assert all(c["device_claimed"] == c["target_used"] == "X" for c in rep.conflicts)
    a100 = rep.conflicts[0]["evidence"]["against"]
    assert sorted(Path(e["file"]).name for e in a100) == sorted(f"{g}.json.gz" for g in GPUS[1:])
    a6000 = next(e for e in a100 if e["file"].endswith("A6000.json.gz"))
    # the closest pair: 23 % apart at the median, but configs ranked differently
    assert a6000["median_ratio"] == pytest.approx(1.229, abs=0.002)
    assert a6000["spearman"] == pytest.approx(0.843, abs=0.002) and a6000["shared_configs"] == 3886


def test_same_data_two_formats_agree(mislabelled: dict[str, Path]) -> None:
    recs, rep = collect("kernel-tuner", [mislabelled["A100"], KT / "A100_T4.json.gz"], device="X")
    assert rep.conflicts == [] and {r.target["name"] for r in recs} == {"X"}
    costs = [{r.config_key: r.cost for r in recs if r.origin == n and r.status == "ok"}
             for n in ("A100.json.gz", "A100_T4.json.gz")]
    disagree, ev = times_disagree(*costs)
    assert not disagree and ev["median_abs_log_ratio"] == 0.0 and ev["spearman"] == pytest.approx(1.0)


def test_real_names_claiming_one_device_are_split(tmp_path: Path) -> None:
    """A4000's data carrying A100's real device name: two targets named from the files."""
    a100 = _rewrite(KT / "A100.json.gz", tmp_path / "A100.json.gz", None)
    fake = _rewrite(KT / "A4000.json.gz", tmp_path / "A4000.json.gz", "NVIDIA A100-PCIE-40GB")
    mi = _rewrite(KT / "MI250X.json.gz", tmp_path / "MI250X.json.gz", None)  # empty device_name: the stem
    recs, rep = collect("kernel-tuner", [a100, fake, mi])
    names = {r.origin: r.target["name"] for r in recs}
    assert names == {"A100.json.gz": "NVIDIA A100-PCIE-40GB [A100]",
                     "A4000.json.gz": "NVIDIA A100-PCIE-40GB [A4000]", "MI250X.json.gz": "MI250X"}
    assert len({r.target_key for r in recs}) == 3
    assert [(Path(c["file"]).name, c["kind"], c["target_used"]) for c in rep.conflicts] == [
        ("A100.json.gz", "disagreeing-times", "NVIDIA A100-PCIE-40GB [A100]"),
        ("A4000.json.gz", "disagreeing-times", "NVIDIA A100-PCIE-40GB [A4000]")]
    ev = rep.conflicts[1]["evidence"]["against"][0]
    assert ev["median_ratio"] == pytest.approx(1.688, abs=0.002) and ev["shared_configs"] == 4195
    # the relabelled targets keep the claimed device's catalog fields; record ids follow the target
    t = next(r.target for r in recs if r.origin == "A4000.json.gz")
    assert t["device_name"] == "NVIDIA A100-PCIE-40GB" and t["arch"] == "GA100"
    assert len({r.record_id for r in recs}) == len(recs)


def test_cli_reports_conflicts(mislabelled: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    db = tmp_path / "db"
    files = [str(mislabelled[g]) for g in ("A100", "W6600")]
    assert cli_main(["import", "kernel-tuner", *files, "--db", str(db), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [c["target_used"] for c in out["conflicts"]] == ["A100", "W6600"]
    assert {t["target_name"] for t in ParquetStore.open(db).targets()} == {"A100", "W6600"}
    assert cli_main(["import", "kernel-tuner", *files, "--device", "X", "--db", str(tmp_path / "db2")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("tunedb: warning: ") for line in err)
    assert "A100.json.gz: claims device 'X' but its times disagree with W6600.json.gz" in err[0]


def _tune(db: Path, replay: Path, capsys: pytest.CaptureFixture) -> dict:
    assert cli_main(["tune", "--replay", str(replay), "--device", "X", "--budget", "10", "--db", str(db),
                     "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_replay_answers_only_from_its_file(mislabelled: dict[str, Path], tmp_path: Path,
                                           capsys: pytest.CaptureFixture) -> None:
    db = tmp_path / "db"
    others = [str(mislabelled[g]) for g in GPUS[1:]]
    assert cli_main(["import", "kernel-tuner", *others, "--device", "X", "--db", str(db), "--json"]) == 0
    capsys.readouterr()
    data = ReplayData(mislabelled["A100"], device="X")
    first = _tune(db, mislabelled["A100"], capsys)
    assert first["target"] == "X" and first["evaluations"] == 10
    assert first["measurements"] == 10 and first["cache_hits"] == 0  # the 5 other GPUs' records never answer
    own = data.results[canonical_json(first["best"]["config"])]
    assert first["best"]["cost"] == pytest.approx(record_value(own), rel=1e-12)  # (the estimator's)
    again = _tune(db, mislabelled["A100"], capsys)  # its own earlier records do answer
    assert again["cache_hits"] > 0 and again["measurements"] + again["cache_hits"] == 10
    best = data.results[canonical_json(again["best"]["config"])]
    assert again["best"]["cost"] == pytest.approx(record_value(best), rel=1e-12)
    assert again["best"]["cost"] <= record_value(own)
    # the view's every hit is a record of the file: its replay records, never an import of another
    view = ReplayStore(ParquetStore.open(db), data)
    cfgs = [r.config for r in list(data.results.values())[:300]]
    hits = [h for h in view.lookup_many(data.target, data.workload, cfgs) if h is not None]
    raw = [h for h in ParquetStore.open(db).lookup_many(data.target, data.workload, cfgs) if h is not None]
    assert len(raw) > len(hits) and all(h.meta.get("replay_file") == "A100.json.gz" for h in hits)


def test_replay_hits_imported_records_of_the_same_file(mislabelled: dict[str, Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    db = tmp_path / "db"
    files = [str(mislabelled[g]) for g in ("A100", "A4000")]
    assert cli_main(["import", "kernel-tuner", *files, "--device", "X", "--db", str(db), "--json"]) == 0
    capsys.readouterr()
    res = _tune(db, mislabelled["A100"], capsys)
    assert res["cache_hits"] == 10 and res["measurements"] == 0  # A100's own imported records
    data = ReplayData(mislabelled["A100"], device="X")
    assert res["best"]["cost"] == pytest.approx(record_value(data.results[canonical_json(res["best"]["config"])]), rel=1e-12)


def test_migrate_to_a_replay_answers_only_from_its_file(mislabelled: dict[str, Path], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    """``migrate --replay`` is a replay too: other files' records on the same target never answer."""
    from tunedb.transfer.migration.migrate import migrate

    db = tmp_path / "db"
    assert cli_main(["import", "kernel-tuner", str(KT / "A4000.json.gz"), "--db", str(db), "--json"]) == 0
    others = [str(mislabelled[g]) for g in ("A6000", "W6600")]
    assert cli_main(["import", "kernel-tuner", *others, "--device", "X", "--db", str(db), "--json"]) == 0
    capsys.readouterr()
    data = ReplayData(mislabelled["A100"], device="X")
    with ParquetStore.open(db) as s:
        src = next(t for t in s.targets() if t["target_name"] != "X")["target_name"]
        rep = migrate(s, src, data, top_k=3)
        assert rep.totals["migrated"] == 1 and rep.totals["cache_hits"] == 0 < rep.totals["measurements"], rep.totals
        mine = [r for r in s.iter_records(data.target, data.workload) if r.source.startswith("migrated")]
    assert mine and all(r.meta.get("replay_file") == "A100.json.gz" for r in mine)
    for r in mine:  # every candidate's cost is the replayed file's own
        assert tuple(r.costs) == tuple(data.results[canonical_json(r.config)].costs)
