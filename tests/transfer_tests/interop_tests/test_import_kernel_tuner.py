"""Kernel Tuner cache import/export (issue 5 rules) on slices of the shared caches."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from tunedb.index import ParquetStore
from tunedb.transfer.cli.main import main as cli_main
from tunedb.transfer.interop import ImportFormatError, collect
from tunedb.transfer.measure.replay import ReplayData
from tunedb.transfer.space import InvalidConfig
from tunedb.transfer.tuners.kernel_tuner.cachefile import cache_key, load_cache, space_from_cache

from helpers import SHARED_DATA

DATA = SHARED_DATA
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
    assert len(ParquetStore.open(db)) == len(doc["cache"])
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


def test_import_ranks_the_imported_entries_for_the_next_process(tmp_path: Path, conv: dict, capsys,
                                                                 monkeypatch) -> None:
    """``tunedb import`` ranks each imported entry (``ranked_s``) and the DB keeps the heads of
    the rankings of large entries (here the whole A6000 cache, one entry of thousands of
    records), so a new handle answers ``best_costs`` without ranking: the same answer as
    ranking the entry's records.  ``--no-models`` ranks nothing."""
    from tunedb.index.model.estimate import rank
    from tunedb.index.parquet import queries

    src = _write(tmp_path / "A6000.json.gz", conv, gz=True)
    db = tmp_path / "db"
    assert cli_main(["import", "kernel-tuner", str(src), "--db", str(db), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ranked_s"] > 0
    assert len(list((db / "derived" / "ranked").glob("*.parquet"))) == 1
    store = ParquetStore.open(db)
    entry = store.entry_list()[0]
    want = [(c.config_key, c.estimate, c.record.record_id) for c in rank(store.entry_records(entry.target,
                                                                                           entry.workload), 32)]

    def fail(*a, **k):
        raise AssertionError("ranked again")
    monkeypatch.setattr(queries, "rank_arrays", fail)
    got = ParquetStore.open(db).best_costs(entry.target, entry.workload, 32)
    assert [(c.config_key, c.estimate, c.record.record_id) for c in got] == want
    monkeypatch.undo()
    db2 = tmp_path / "db2"
    assert cli_main(["import", "kernel-tuner", str(src), "--db", str(db2), "--json", "--no-models"]) == 0
    assert json.loads(capsys.readouterr().out)["ranked_s"] == 0
    assert not list((db2 / "derived").glob("ranked/*"))


# ------------------------------------------------------------------ pinned output (issue 16)
#
# The importer and the replay loader were made faster (issue 16) without changing a produced
# value: these digests were computed with the code *before* that change and pin, per file, the
# records (record_id, keys, canonical target/workload/config/meta JSON, costs, status, error,
# compile_s, timestamp), the skipped entries with their messages, and for the replay loader its
# result keys, target, workload, space and constraint answers.  A digest that changes means
# re-imports no longer de-duplicate (new record ids) or the stored values differ.

def _h(rows: list) -> str:
    """BLAKE2b-128 of the rows' reprs, in order."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    for row in rows:
        h.update(repr(row).encode())
        h.update(b"\n")
    return h.hexdigest()


def _record_row(r) -> tuple:
    """Every stored value of a record (floats exactly; "now" for a timestamp the entry lacks)."""
    kt = r.meta.get("kernel_tuner") or {}
    src = kt.get("entry", kt.get("t4"))
    ts = r.timestamp.isoformat() if isinstance(src, dict) and src.get("timestamp") is not None else "now"
    return (r.record_id, r.target_key, r.workload_key, r.config_key, tuple(map(float.hex, r.costs)), r.status,
            r.meta_json, r.error, None if r.compile_s is None else float.hex(r.compile_s), ts,
            r.config_json, r.target_json, r.workload_json, r.target_name, r.source, r.lookup_key, r.entry_key)


def _import_digest(path: Path, device: str | None = None) -> dict:
    """Digests of what the importer yields for ``path`` (or its one-line error)."""
    from tunedb.transfer.interop import ImportIssue, get_format

    try:
        items = list(get_format("kernel-tuner").parse(path, device=device))
    except ImportFormatError as e:
        return {"error": str(e).replace(str(path), "<path>")}
    recs = [it for it in items if not isinstance(it, ImportIssue)]
    issues = [(it.where, it.error, it.kind) for it in items if isinstance(it, ImportIssue)]
    rows = [_record_row(r) for r in recs]
    return {"n": len(recs), "issues": _h(issues), "records": _h(rows), "ids": _h([r[0] for r in rows]),
            "meta": _h([r[6] for r in rows]), "origin": sorted({r.origin for r in recs})}


def _replay_digest(path: Path, device: str | None = None) -> dict:
    """Digests of what ``ReplayData(path)`` holds (or its one-line error)."""

    try:
        d = ReplayData(path, device=device)
    except ValueError as e:
        return {"error": str(e).replace(str(path), "<path>")}
    recs = list(d.results.values())
    space = d.space
    return {"n": len(recs), "skipped": d.skipped, "keys": _h(list(d.results)),
            "records": _h([_record_row(r) for r in recs]),
            "head": _h([json.dumps(d.target, sort_keys=True), json.dumps(d.workload, sort_keys=True)]),
            "space": _h([repr(space.knobs), [c.doc for c in space.constraints],
                         [json.dumps(c, sort_keys=True) for c in space.finite or ()],
                         [space.is_valid(r.config) for r in recs]]),
            "optimum": d.optimum() if d.costs_ok() else None}


def _edge_docs(conv: dict) -> dict[str, dict]:
    """Synthetic caches (from real entries) covering every branch of entry handling."""
    base = _slice(conv, 12, 4)
    keys = base["tune_params_keys"]
    items = list(base["cache"].items())
    odd = dict(base)
    cache = {}
    for i, (key, e) in enumerate(items):
        e = dict(e)
        if i == 0:
            e["times"] = [12.0, 12.5, 0.0, -0.0, 3, 2.0**60, 1e-7]  # integral floats, ints, big, tiny
            e["time"], e["compile_time"] = 12.0, 500.0
        elif i == 1:
            e.update(note="a, b: c", uni="caf\u00e9 \u007f \n \\u00e9", flag=True, none=None,
                     nested={"a": [1, {"b": 2.0, "c": "x, y"}], "d": []})
        elif i == 2:
            e["times"] = [1.5, float("nan")]
        elif i == 3:
            e["times"], e["time"] = [True, 1.0], 1.0
        elif i == 4:
            e["times"], e["time"] = [], 2.5
        elif i == 5:
            e["timestamp"] = 1700000000.25
        elif i == 6:
            e = {k: v for k, v in e.items() if k not in keys[:2]}  # config from the key
        elif i == 7:
            e["times"] = [1e30, 1.0]  # failure marker time
        elif i == 8:
            e = "InvalidConfig"
        elif i == 9:
            e = "SomethingElse"
        elif i == 10:
            e["times"], e["time"] = None, "RuntimeFailedConfig"
        elif i == 11:
            e["times"] = [float("inf")]
        elif i == 12:
            e["GB/s"] = [1, 2.0, "x"]
        elif i == 13:
            e[keys[0]] = float(e[keys[0]])  # a float config value
        cache[key] = e
    cache["1,2"] = {"time": 1.0}
    odd["cache"] = cache
    # decoded keys against float tune_params; positional names; no names at all
    flt = _slice(conv, 6, 0)
    flt["tune_params"] = {k: [float(v) for v in vs] for k, vs in flt["tune_params"].items()}
    flt["cache"] = {",".join(f"{float(e[k])}" for k in flt["tune_params_keys"]): {"time": 1.0 + j}
                    for j, e in enumerate(flt["cache"].values())}
    pos = _slice(conv, 5, 0)
    for k in ("tune_params", "tune_params_keys"):
        pos.pop(k)
    pos["cache"] = {key: {"time": 3.0, "times": [3.0, 3.25]} for key in pos["cache"]}
    return {"odd": odd, "floats": flt, "positional": pos}


# computed with the importer and replay loader before issue 16 (tests/transfer_tests/interop_tests/test_import_kernel_tuner.py
# helpers above, same inputs); see the README, "Kernel Tuner import and replay load"
PINNED: dict[str, dict] = {'convolution_milo/A6000.json.gz': {'import': {'n': 4362,
                                               'issues': 'cae66941d9efbd404e4d88758ea67670',
                                               'records': 'c6855dbf1f514cebd9f3240d13dde3f5',
                                               'ids': 'bfdd96d63ef65e5c6a8b8b0cdfa5ab52',
                                               'meta': 'e788af5f27dd3c21d3252e9c3907aa34',
                                               'origin': ['A6000.json.gz']},
                                    'replay': {'n': 4362,
                                               'skipped': 0,
                                               'keys': '4356f5c3b2a455f440dee510cb0623b8',
                                               'records': 'c6855dbf1f514cebd9f3240d13dde3f5',
                                               'head': 'b36d0fc2dc2d83da0d89ec5cd588201b',
                                               'space': 'cd07c2a4b4d6d7d91179502cdf92f3f1',
                                               'optimum': "({'block_size_x': 128, 'block_size_y': 1, "
                                                          "'tile_size_x': 2, 'tile_size_y': 4, 'read_only': 0, "
                                                          "'use_padding': 0, 'use_shmem': 0, 'use_cmem': 1, "
                                                          "'filter_height': 15, 'filter_width': 15}, "
                                                          '0.0006030342994258102)'}},
 'convolution_milo/A4000.json.gz': {'import': {'n': 4362,
                                               'issues': 'cae66941d9efbd404e4d88758ea67670',
                                               'records': 'fcce68c81f94c1111914fc9b81d8d5b8',
                                               'ids': '7368cb5fcce2d96ef58225145621fed3',
                                               'meta': 'a7cd2dbcc99d7d5268274ef4ea40c1b4',
                                               'origin': ['A4000.json.gz']},
                                    'replay': {'n': 4362,
                                               'skipped': 0,
                                               'keys': '439a570352fded0a5ab18bac3dc829cf',
                                               'records': 'fcce68c81f94c1111914fc9b81d8d5b8',
                                               'head': '2a67b5e117b2a59e111213dedd69fbce',
                                               'space': 'cd07c2a4b4d6d7d91179502cdf92f3f1',
                                               'optimum': "({'block_size_x': 256, 'block_size_y': 1, "
                                                          "'tile_size_x': 2, 'tile_size_y': 4, 'read_only': 0, "
                                                          "'use_padding': 0, 'use_shmem': 0, 'use_cmem': 1, "
                                                          "'filter_height': 15, 'filter_width': 15}, "
                                                          '0.0010211719963699576)'}},
 'convolution_milo/A100.json.gz': {'import': {'n': 4362,
                                              'issues': 'cae66941d9efbd404e4d88758ea67670',
                                              'records': '8d6580e18162502f5a848073581b85be',
                                              'ids': 'e1ab728e291b417d01ab3924ea15748f',
                                              'meta': 'f71022804ce5e1578d6ab1867c241580',
                                              'origin': ['A100.json.gz']},
                                   'replay': {'n': 4362,
                                              'skipped': 0,
                                              'keys': '439a570352fded0a5ab18bac3dc829cf',
                                              'records': '8d6580e18162502f5a848073581b85be',
                                              'head': 'e9dadc356a8aa02ded7062208e741d30',
                                              'space': 'cd07c2a4b4d6d7d91179502cdf92f3f1',
                                              'optimum': "({'block_size_x': 32, 'block_size_y': 4, 'tile_size_x': "
                                                         "1, 'tile_size_y': 3, 'read_only': 1, 'use_padding': 0, "
                                                         "'use_shmem': 1, 'use_cmem': 1, 'filter_height': 15, "
                                                         "'filter_width': 15}, 0.0005536000076681375)"}},
 'convolution_milo/MI250X.json.gz': {'import': {'n': 4362,
                                                'issues': 'cae66941d9efbd404e4d88758ea67670',
                                                'records': '3359535896f16ac95e7684dc58a1640d',
                                                'ids': '49657d67e2677d421a3f8a674230f416',
                                                'meta': '451a70f606d21e3b4fcb9c22e681ad09',
                                                'origin': ['MI250X.json.gz']},
                                     'replay': {'n': 4362,
                                                'skipped': 0,
                                                'keys': '439a570352fded0a5ab18bac3dc829cf',
                                                'records': '3359535896f16ac95e7684dc58a1640d',
                                                'head': 'b4c99802db71cff3ada3830dabfc6dd0',
                                                'space': 'cd07c2a4b4d6d7d91179502cdf92f3f1',
                                                'optimum': "({'block_size_x': 64, 'block_size_y': 1, "
                                                           "'tile_size_x': 2, 'tile_size_y': 4, 'read_only': 1, "
                                                           "'use_padding': 0, 'use_shmem': 0, 'use_cmem': 1, "
                                                           "'filter_height': 15, 'filter_width': 15}, "
                                                           '0.0006587962452322246)'}},
 'convolution_milo/A100_T4.json.gz': {'import': {'n': 4362,
                                                 'issues': 'cae66941d9efbd404e4d88758ea67670',
                                                 'records': '41179dd547042e1807fc5fa675f1dadf',
                                                 'ids': 'f4a29ab9ff5ed56de9a84a82389dae45',
                                                 'meta': '79b7a0d3d31b5f4389bb575a09c9ed4b',
                                                 'origin': ['A100_T4.json.gz']},
                                      'replay': {'error': 'the cache names no parameters (no '
                                                          'tune_params_keys/tune_params)'}},
 'dedispersion_milo/A100.json.gz': {'import': {'n': 11130,
                                               'issues': 'cae66941d9efbd404e4d88758ea67670',
                                               'records': 'fb0676bfcc7cf11e9c964253ee2a2992',
                                               'ids': 'ea9fedf663990b2da55b25b1812caf38',
                                               'meta': 'd56c0b1c41c6f291f43cb113d61afa78',
                                               'origin': ['A100.json.gz']},
                                    'replay': {'n': 11130,
                                               'skipped': 0,
                                               'keys': 'cd84c92de83670eb78bbe9e8819d9b83',
                                               'records': 'fb0676bfcc7cf11e9c964253ee2a2992',
                                               'head': '638237b4d47c97f96e3d7f3611e2706a',
                                               'space': 'e7e4c31d389508e73f4bf08a8dec6ccf',
                                               'optimum': "({'block_size_x': 4, 'block_size_y': 64, "
                                                          "'block_size_z': 1, 'tile_size_x': 1, 'tile_size_y': 3, "
                                                          "'tile_stride_x': 0, 'tile_stride_y': 1, "
                                                          "'loop_unroll_factor_channel': 0}, "
                                                          '0.06811657595634459)'}},
 'dedispersion_milo/W7800.json.gz': {'import': {'n': 11130,
                                                'issues': 'cae66941d9efbd404e4d88758ea67670',
                                                'records': '2f010a47bfcf63e1e0ad770991f9c1bc',
                                                'ids': 'd1b76eb6b63a458d8a748220121ef6ec',
                                                'meta': '2e4def7480635dcb1795e295721dc342',
                                                'origin': ['W7800.json.gz']},
                                     'replay': {'n': 11130,
                                                'skipped': 0,
                                                'keys': 'cd84c92de83670eb78bbe9e8819d9b83',
                                                'records': '2f010a47bfcf63e1e0ad770991f9c1bc',
                                                'head': '978def9aed9e49928a161976c9ceb503',
                                                'space': 'e7e4c31d389508e73f4bf08a8dec6ccf',
                                                'optimum': "({'block_size_x': 1, 'block_size_y': 128, "
                                                           "'block_size_z': 1, 'tile_size_x': 1, 'tile_size_y': 1, "
                                                           "'tile_stride_x': 0, 'tile_stride_y': 0, "
                                                           "'loop_unroll_factor_channel': 0}, "
                                                           '0.050360814213752755)'}},
 'MI250X override': {'import': {'n': 4362,
                                'issues': 'cae66941d9efbd404e4d88758ea67670',
                                'records': '90996dcd78dce1b6c2f12e02dcd42371',
                                'ids': '1eed8e1ac552714554bc1ce631c90cc7',
                                'meta': '451a70f606d21e3b4fcb9c22e681ad09',
                                'origin': ['MI250X.json.gz']},
                     'replay': {'n': 4362,
                                'skipped': 0,
                                'keys': '439a570352fded0a5ab18bac3dc829cf',
                                'records': '90996dcd78dce1b6c2f12e02dcd42371',
                                'head': 'bf227717752f3fa96460a1d1d104d130',
                                'space': 'cd07c2a4b4d6d7d91179502cdf92f3f1',
                                'optimum': "({'block_size_x': 64, 'block_size_y': 1, 'tile_size_x': 2, "
                                           "'tile_size_y': 4, 'read_only': 1, 'use_padding': 0, 'use_shmem': 0, "
                                           "'use_cmem': 1, 'filter_height': 15, 'filter_width': 15}, "
                                           '0.0006587962452322246)'}},
 'slice': {'import': {'n': 70,
                      'issues': 'cae66941d9efbd404e4d88758ea67670',
                      'records': '539410b611ee471914ba7c6a38ef9789',
                      'ids': 'aaa09b27ce6f5c10367f36b9894b03ee',
                      'meta': '16cc49c14ad5ef13bc2783fd9305163d',
                      'origin': ['A6000.json.gz']},
           'replay': {'n': 70,
                      'skipped': 0,
                      'keys': '09b6ea80b15e31a9ca96a6c8299500bc',
                      'records': '539410b611ee471914ba7c6a38ef9789',
                      'head': 'b36d0fc2dc2d83da0d89ec5cd588201b',
                      'space': '673881b1a518dde0cde4ef026b2351d7',
                      'optimum': "({'block_size_x': 16, 'block_size_y': 1, 'tile_size_x': 1, 'tile_size_y': 4, "
                                 "'read_only': 0, 'use_padding': 0, 'use_shmem': 0, 'use_cmem': 1, "
                                 "'filter_height': 15, 'filter_width': 15}, 0.0011640075136094344)"}},
 'unterminated': {'import': {'n': 4,
                             'issues': 'cae66941d9efbd404e4d88758ea67670',
                             'records': 'd95c8cb5a44809da3fc819e33c1f55fd',
                             'ids': '291153ffcd1a373e4c0603b737f82587',
                             'meta': 'bb2d3c85cbc61872f560b16c5e8eaff2',
                             'origin': ['running.json']},
                  'replay': {'n': 4,
                             'skipped': 0,
                             'keys': '7c08f50c5ae6910be203aa362f00558d',
                             'records': 'd95c8cb5a44809da3fc819e33c1f55fd',
                             'head': 'b36d0fc2dc2d83da0d89ec5cd588201b',
                             'space': '677cef3cfcf4b92b381be7c6c5f183f8',
                             'optimum': "({'block_size_x': 16, 'block_size_y': 1, 'tile_size_x': 1, 'tile_size_y': "
                                        "1, 'read_only': 0, 'use_padding': 0, 'use_shmem': 0, 'use_cmem': 1, "
                                        "'filter_height': 15, 'filter_width': 15}, 0.004056854065036682)"}},
 'odd': {'import': {'n': 13,
                    'issues': 'bc35f0aea7ccf447e0b96db51804faf2',
                    'records': '4ed18774a52abb50306342e7bf8093b3',
                    'ids': '0f4f8220a1853416f8398ae6d0eb211f',
                    'meta': 'c979283a1fd52f10334c98b835445edd',
                    'origin': ['odd.json']},
         'replay': {'n': 13,
                    'skipped': 4,
                    'keys': '1085c9c03b817093de8a9264d98c9c89',
                    'records': '4ed18774a52abb50306342e7bf8093b3',
                    'head': 'b36d0fc2dc2d83da0d89ec5cd588201b',
                    'space': '06c1447f964c32691d8baf9345242c5e',
                    'optimum': "({'block_size_x': 16, 'block_size_y': 1, 'tile_size_x': 1, 'tile_size_y': 2, "
                               "'read_only': 0, 'use_padding': 0, 'use_shmem': 0, 'use_cmem': 1, 'filter_height': "
                               "15, 'filter_width': 15}, 0.0021325894643629485)"}},
 'floats': {'import': {'n': 6,
                       'issues': 'cae66941d9efbd404e4d88758ea67670',
                       'records': 'd28c535942a84bcdd751da8d0540e54b',
                       'ids': '60ee1ad472ed978431ba6e21c8dfdaaf',
                       'meta': '59cc340ec20e6ef7994c07d667409516',
                       'origin': ['floats.json']},
            'replay': {'n': 6,
                       'skipped': 0,
                       'keys': '6cc19c17013aa52339c50296529e3ae7',
                       'records': 'd28c535942a84bcdd751da8d0540e54b',
                       'head': 'b36d0fc2dc2d83da0d89ec5cd588201b',
                       'space': '8eb06c28ef68158139bdb8e37c06f71a',
                       'optimum': "({'block_size_x': 16, 'block_size_y': 1, 'tile_size_x': 1, 'tile_size_y': 1, "
                                  "'read_only': 0, 'use_padding': 0, 'use_shmem': 0, 'use_cmem': 1, "
                                  "'filter_height': 15, 'filter_width': 15}, 0.001)"}},
 'positional': {'import': {'n': 5,
                           'issues': 'cae66941d9efbd404e4d88758ea67670',
                           'records': '7201219fe35a1d58d01f710627d364ed',
                           'ids': '772c924a2eeb96976f39cfb6d29cefef',
                           'meta': 'a91c09550b58bb1cb3eaf58f173d0a0f',
                           'origin': ['positional.json']},
                'replay': {'n': 5,
                           'skipped': 0,
                           'keys': '6cebe075a0540e346a825eaba8d64ad1',
                           'records': '7201219fe35a1d58d01f710627d364ed',
                           'head': '4ad9bc7d04923a7da706763eaa19f70c',
                           'space': '7006ad025c65bc2965d12a736be9818d',
                           'optimum': "({'param_0': 16, 'param_1': 1, 'param_2': 1, 'param_3': 1, 'param_4': 0, "
                                      "'param_5': 0, 'param_6': 0, 'param_7': 1, 'param_8': 15, 'param_9': 15}, "
                                      '0.003125)'}}}


def _pinned_inputs(tmp: Path, conv: dict) -> list[tuple[str, Path, str | None]]:
    """(name, file, device override) of every pinned input; synthetic ones are written to ``tmp``."""
    out: list[tuple[str, Path, str | None]] = []
    for name in ("convolution_milo/A6000.json.gz", "convolution_milo/A4000.json.gz", "convolution_milo/A100.json.gz",
                 "convolution_milo/MI250X.json.gz", "convolution_milo/A100_T4.json.gz",
                 "dedispersion_milo/A100.json.gz", "dedispersion_milo/W7800.json.gz"):
        out.append((name, KT / name, None))
    out.append(("MI250X override", KT / "convolution_milo/MI250X.json.gz", "AMD Instinct MI250X"))
    sl = _slice(conv, 60, 10)
    out.append(("slice", _write(tmp / "A6000.json.gz", sl, gz=True), None))
    text = json.dumps(_slice(conv, 4, 0))
    (tmp / "running.json").write_text(text[:-2] + ",")
    out.append(("unterminated", tmp / "running.json", None))
    for name, doc in _edge_docs(conv).items():
        out.append((name, _write(tmp / f"{name}.json", doc), None))
    return out


@pytest.fixture(scope="module")
def pinned_inputs(tmp_path_factory, conv: dict) -> dict[str, tuple[Path, str | None]]:
    """The pinned inputs by name (written once per module)."""
    return {name: (p, dev) for name, p, dev in _pinned_inputs(tmp_path_factory.mktemp("pinned"), conv)}


@needs_data
@pytest.mark.parametrize("name", list(PINNED))
def test_import_output_is_pinned(name: str, pinned_inputs: dict) -> None:
    path, device = pinned_inputs[name]
    assert _import_digest(path, device) == PINNED[name]["import"]


@needs_data
@pytest.mark.parametrize("name", list(PINNED))
def test_replay_output_is_pinned(name: str, pinned_inputs: dict) -> None:
    """Everything as pinned; the optimum is the entry of least cost as the one estimator counts
    a Kernel Tuner record: Kernel Tuner's time, the mean of its repeats."""
    path, device = pinned_inputs[name]
    got, want = _replay_digest(path, device), dict(PINNED[name]["replay"])
    assert (got.get("optimum") is None) == (want.get("optimum") is None)
    if want.pop("optimum", None) is not None:
        config, cost = got.pop("optimum")
        d = ReplayData(path, device=device)
        same = [r for r in d.results.values() if r.status == "ok" and r.config == config]
        assert len(same) == 1 and cost == pytest.approx(float(np.mean(same[0].costs)), rel=1e-12)
        assert all(float(np.mean(r.costs)) >= cost * (1 - 1e-12) for r in d.results.values()
                   if r.status == "ok" and r.costs)
    assert got == want


# ------------------------------------------------------------------ one device's results under two names

@needs_data
@pytest.mark.slow
def test_t4_copy_of_a_cache_is_reported_not_a_second_device(tmp_path: Path, capsys) -> None:
    """``tunedb import kernel-tuner convolution_milo/*.json.gz``: ``A100_T4.json.gz`` holds
    ``A100.json.gz``'s results in the T4 format, which names no device (its file name would be a
    seventh device).  It is reported as ``duplicate-results`` and its records are not imported:
    the six GPUs of the folder, each once, whatever the order of the files."""
    folder = KT / "convolution_milo"
    files = sorted(folder.glob("*.json.gz"))  # as the shell expands the glob
    assert [p.name for p in files][:2] == ["A100.json.gz", "A100_T4.json.gz"]
    recs, rep = collect("kernel-tuner", files)
    devices = {r.target["name"] for r in recs}
    assert len(devices) == 6 and "A100_T4" not in devices and "NVIDIA A100-PCIE-40GB" in devices
    assert {r.origin for r in recs} == {p.name for p in files} - {"A100_T4.json.gz"}
    assert rep.files == 7 and rep.imported == len(recs) == 6 * 4362
    (c,) = rep.conflicts
    assert (Path(c["file"]).name, c["kind"], c["device_claimed"], c["target_used"]) == (
        "A100_T4.json.gz", "duplicate-results", "A100_T4", "NVIDIA A100-PCIE-40GB")
    assert Path(c["evidence"]["duplicate_of"]).name == "A100.json.gz" and c["evidence"]["records"] == 4362
    # the T4 file first: the cache that names its device is still the one kept
    db = tmp_path / "db"
    argv = ["import", "kernel-tuner", str(folder / "A100_T4.json.gz"), str(folder / "A100.json.gz"),
            "--db", str(db), "--no-models"]
    assert cli_main(argv) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tunedb: warning: A100_T4.json.gz: the same configs and times as "
                                               "A100.json.gz; not imported"), err
    store = ParquetStore.open(db)
    assert len(store) == 4362 and [t["target_name"] for t in store.targets()] == ["NVIDIA A100-PCIE-40GB"]
    store.close()
    # results that differ in one time are another file's: both imported, nothing reported
    doc = _doc("convolution_milo/A100.json.gz")
    key = next(k for k, v in doc["cache"].items() if isinstance(v.get("time"), float))
    e = doc["cache"][key]
    doc["cache"][key] = dict(e, time=e["time"] * 1.5, times=[t * 1.5 for t in e["times"]])
    other = _write(tmp_path / "A100_rerun.json.gz", dict(doc, device_name=""), gz=True)
    recs, rep = collect("kernel-tuner", [folder / "A100.json.gz", other])
    assert rep.conflicts == [] and {r.target["name"] for r in recs} == {"NVIDIA A100-PCIE-40GB", "A100_rerun"}
