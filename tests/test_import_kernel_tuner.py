"""Kernel Tuner cache import/export (issue 5 rules) on slices of the shared caches."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tunedb.index import TuningDB
from tunedb.transfer.cli.main import main as cli_main
from tunedb.transfer.interop import ImportFormatError, collect
from tunedb.transfer.interop.kernel_tuner import cache_key, load_cache, space_from_cache
from tunedb.transfer.search.space import InvalidConfig

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
KT = DATA / "kernel_tuner"
needs_data = pytest.mark.skipif(not KT.is_dir(), reason=f"shared Kernel Tuner data not found at {KT}")


def _doc(name: str) -> dict:
    with gzip.open(KT / name, "rt") as f:
        return json.load(f)


def _slice(doc: dict, n: int = 40, failed: int = 10) -> dict:
    """First n entries plus up to ``failed`` failed ones."""
    items = list(doc["cache"].items())
    bad = [(k, v) for k, v in items if isinstance(v.get("time"), str)][:failed]
    out = dict(doc)
    out["cache"] = dict(items[:n] + bad)
    return out


def _write(p: Path, doc: dict, gz: bool = False) -> Path:
    data = json.dumps(doc).encode()
    p.write_bytes(gzip.compress(data) if gz else data)
    return p


@pytest.fixture(scope="module")
def conv() -> dict:
    if not KT.is_dir():
        pytest.skip(f"shared Kernel Tuner data not found at {KT}")
    return _doc("convolution_milo/A6000.json.gz")


def test_entries_statuses_and_units(tmp_path: Path, conv: dict) -> None:
    doc = _slice(conv)
    recs, rep = collect("kernel-tuner", [_write(tmp_path / "A6000.json.gz", doc, gz=True)])
    assert rep.imported == len(doc["cache"]) and rep.skipped == 0
    by_key = {r.meta["kernel_tuner"]["key"]: r for r in recs}
    for key, e in doc["cache"].items():
        r = by_key[key]
        assert r.target["name"] == "NVIDIA RTX A6000" and r.target["kind"] == "gpu"
        assert r.workload == {"family": "convolution_kernel", "kernel": "convolution_kernel",
                              "problem_size": [4096, 4096], "params": doc["tune_params_keys"]}
        assert r.config == {k: e[k] for k in doc["tune_params_keys"]}
        assert cache_key(r.config, doc["tune_params_keys"]) == key
        if isinstance(e["time"], str):
            want = {"CompilationFailedConfig": "compile_error", "RuntimeFailedConfig": "runtime_error"}[e["time"]]
            assert r.status == want and not r.costs and r.error == e["time"]
        else:
            assert r.status == "ok" and list(r.costs) == pytest.approx([t / 1000 for t in e["times"]])
        assert r.compile_s == pytest.approx(e["compile_time"] / 1000)
        assert r.source == "imported:kernel-tuner"


def test_missing_optional_keys_and_time_only_entries(tmp_path: Path, conv: dict) -> None:
    doc = _slice(conv, 6, 2)
    keys = doc["tune_params_keys"]
    for k in ("problem_size", "objective", "tune_params", "tune_params_keys", "restrictions"):
        doc.pop(k, None)
    entries = list(doc["cache"].items())
    cache = {}
    for i, (key, e) in enumerate(entries):
        if i == 0:
            cache[key] = {"time": 2.5}  # only a time: config comes from the key
        elif i == 1:
            cache[key] = "InvalidConfig"  # a bare error string
        elif i == 2:
            cache[key] = {k: v for k, v in e.items() if k != "times"}
        else:
            cache[key] = e
    doc["cache"] = cache
    recs, rep = collect("kernel-tuner", [_write(tmp_path / "dev.json", doc)])
    assert rep.imported == len(cache) and rep.skipped == 0
    r0, r1, r2 = recs[:3]
    assert r0.config == dict(zip(keys, (int(x) for x in entries[0][0].split(","))))
    assert list(r0.costs) == [0.0025] and r0.status == "ok"
    assert r1.status == "invalid" and not r1.costs
    assert list(r2.costs) == pytest.approx([entries[2][1]["time"] / 1000])
    assert "problem_size" not in r0.workload and r0.workload["params"] == keys


def test_device_name_fallbacks(tmp_path: Path, conv: dict) -> None:
    doc = _slice(conv, 3, 0)
    doc["device_name"] = ""
    p = _write(tmp_path / "MI250X.json.gz", doc, gz=True)
    recs, _ = collect("kernel-tuner", [p])
    assert {r.target["name"] for r in recs} == {"MI250X"}
    recs, _ = collect("kernel-tuner", [p], device="AMD Instinct MI250X")
    assert {r.target["name"] for r in recs} == {"AMD Instinct MI250X"}
    doc["device_name"] = "wrong"
    recs, _ = collect("kernel-tuner", [_write(tmp_path / "x.json", doc)], device="W6600")
    assert {r.target["name"] for r in recs} == {"W6600"}


def test_malformed_entries(tmp_path: Path, conv: dict) -> None:
    doc = _slice(conv, 5, 0)
    keys = list(doc["cache"])
    doc["cache"][keys[1]] = {"time": -1.0}
    doc["cache"][keys[2]] = {"nothing": 1}
    doc["cache"][keys[3]] = 17
    doc["cache"]["1,2"] = {"time": 1.0}  # key with the wrong number of values
    recs, rep = collect("kernel-tuner", [_write(tmp_path / "d.json", doc)])
    assert rep.imported == 2 and rep.skipped == 4
    assert [e["where"].split(" ")[0] for e in rep.errors] == ["d.json:entry"] * 4
    assert "entry 2" in rep.errors[0]["where"]


def test_unterminated_cache_is_closed(tmp_path: Path, conv: dict) -> None:
    doc = _slice(conv, 4, 0)
    text = json.dumps(doc)
    assert text.endswith("}}")
    p = tmp_path / "running.json"
    p.write_text(text[:-2] + ",")
    recs, rep = collect("kernel-tuner", [p])
    assert rep.imported == 4


def test_not_a_cache(tmp_path: Path) -> None:
    for text in ("[1, 2]", "{}", '{"cache": [1]}', "not json", '{"problem_size": NaN, "cache": {"1": {"time": 1}}}'):
        p = tmp_path / "bad.json"
        p.write_text(text)
        with pytest.raises(ImportFormatError):
            collect("kernel-tuner", [p])


@needs_data
def test_t1_space_definition_is_rejected() -> None:
    with pytest.raises(ImportFormatError, match="T1"):
        collect("kernel-tuner", [KT / "convolution_milo.json"])


def test_space_from_cache_never_evaluates_restrictions(tmp_path: Path, conv: dict) -> None:
    doc = _slice(conv, 30, 5)
    marker = tmp_path / "pwned"
    doc["restrictions"] = [f"__import__('pathlib').Path({str(marker)!r}).touch() or True"]
    first_bad = next(k for k, v in doc["cache"].items() if isinstance(v.get("time"), str))
    doc["cache"][first_bad] = dict(doc["cache"][first_bad], time="InvalidConfig")
    space = space_from_cache(doc)
    keys = doc["tune_params_keys"]
    assert space.names == keys
    for k in keys:
        assert list(space.knob(k).values) == doc["tune_params"][k]
    good = next(v for v in doc["cache"].values() if not isinstance(v.get("time"), str))
    space.validate({k: good[k] for k in keys})
    with pytest.raises(InvalidConfig):
        space.validate({k: doc["cache"][first_bad][k] for k in keys})
    assert not marker.exists()
    # without tune_params the values come from the entries; unconstrained space on request
    doc.pop("tune_params")
    free = space_from_cache(doc, only_cached=False)
    assert free.constraints == () and set(free.knob("block_size_x").values) == {
        v["block_size_x"] for v in doc["cache"].values()}


@needs_data
def test_t4_results_file() -> None:
    recs, rep = collect("kernel-tuner", [KT / "convolution_milo" / "A100_T4.json.gz"])
    doc = _doc("convolution_milo/A100_T4.json.gz")
    assert rep.imported == len(doc["results"]) and rep.skipped == 0
    st = {}
    for r in recs:
        st[r.status] = st.get(r.status, 0) + 1
    want = {"ok": 0, "runtime_error": 0, "compile_error": 0}
    for x in doc["results"]:
        want[{"correct": "ok", "runtime": "runtime_error", "compile": "compile_error"}[x["invalidity"]]] += 1
    assert st == want
    ok = next(r for r, x in zip(recs, doc["results"]) if x["invalidity"] == "correct")
    assert ok.workload["family"] == "convolution_milo" and ok.target["name"] == "A100_T4"
    assert list(ok.costs) == pytest.approx([t / 1000 for t in doc["results"][0]["times"]["runtimes"]])


def test_cli_round_trip_and_reimport(tmp_path: Path, conv: dict, capsys) -> None:
    doc = _slice(conv, 60, 10)
    src = _write(tmp_path / "A6000.json.gz", doc, gz=True)
    db = tmp_path / "db"
    assert cli_main(["import", "kernel-tuner", str(src), "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["new"] == len(doc["cache"])
    assert cli_main(["import", "kernel-tuner", str(src), "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["new"] == 0
    assert len(TuningDB.open(db)) == len(doc["cache"])
    out = tmp_path / "back.json"
    assert cli_main(["export", "--format", "kernel-tuner", str(out), "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["exported"] == len(doc["cache"])
    back = load_cache(out)
    assert back["cache"] == doc["cache"]
    for k in ("kernel_name", "problem_size", "tune_params_keys", "objective", "device_name"):
        assert back[k] == doc[k]
    for k, vals in back["tune_params"].items():
        assert set(vals) <= set(doc["tune_params"][k])
    # the exported file imports to the same records
    assert cli_main(["import", "kernel-tuner", str(out), "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["new"] == 0
    # two devices cannot go into one cache file; a directory takes one file per device
    doc2 = dict(doc, device_name="Other GPU")
    assert cli_main(["import", "kernel-tuner", str(_write(tmp_path / "o.json", doc2)), "--db", str(db)]) == 0
    capsys.readouterr()
    assert cli_main(["export", "--format", "kernel-tuner", str(tmp_path / "one.json"), "--db", str(db)]) == 2
    assert cli_main(["export", "--format", "kernel-tuner", str(tmp_path / "dir"), "--db", str(db), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["files"]) == 2
