"""A published snapshot checked against itself.  A hostile publisher hashes whatever it writes,
so every file below matches the hash its parent names: a part rewritten with its rows changed,
re-hashed, and its part list and manifest rewritten to name it.  What it says must still agree
with the part list and the manifest (row counts, workload ranges, targets, statuses, totals, no
part twice); a contradiction is one ``SnapshotContentError`` line (a ``ValueError``) naming the
part or field, through the API and the CLI (exit 2), and no read ever answers something other
than the pristine snapshot's answer.  Also: rollback state that a forged unsigned manifest
cannot poison, and a config nested 100,000 deep in a part.

Served by a private nginx (tests/nginx_server.py), as test_hostile_snapshots.py does."""

from __future__ import annotations

import copy
import json
import os
import shutil
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tunedb
from tunedb.index import Record
from tunedb.index.model.keys import MAX_JSON_DEPTH, hash64, key_of_text
from tunedb.index.snapshot.format import (
    MANIFEST,
    SnapshotContentError,
    SnapshotError,
    canonical_bytes,
    file_ref,
    manifest_bytes,
    parquet_bytes,
    sha256,
)
from tunedb.index.snapshot.remote import SnapshotWarning
from tunedb.index.snapshot.rollback import seen_version
from tunedb.index.snapshot.store import SnapshotStore
from tunedb.transfer.cli.main import main
from tunedb.transfer.migration.publish import publish

import nginx_server

BS = 4096
TARGET = "cs-gpu0"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """The CLI's snapshot caches and the rollback state of each test are its own."""
    monkeypatch.setenv("TUNEDB_CACHE_DIR", str(tmp_path / "tunedb-cache"))
    for name in ("TUNEDB_HTTP_DEADLINE", "TUNEDB_HTTP_TOTAL_DEADLINE", "TUNEDB_SNAPSHOT_MAX_MANIFEST"):
        monkeypatch.delenv(name, raising=False)


def _source():
    """Three targets of four workloads (a part each), ok and failed records, a stale target
    with some fresh records, a verdict."""
    db = tunedb.open("memory:")
    recs = []
    for t in range(3):
        target = {"kind": "gpu", "name": f"cs-gpu{t}", "sm": 80 + t}
        for w in range(4):
            wl = {"family": "matmul", "M": 128 * (w + 1), "N": 128, "K": 64}
            for c in range(3):
                ok = (t + w + c) % 4
                recs.append(Record(target, wl, {"tile": 2 ** c, "w": w}, [1e-3 * (1 + (t + w + c) % 5)] if ok else [],
                                   status="ok" if ok else "runtime_error", error="" if ok else "launch failed"))
    db.commit(recs)
    db.invalidate(recs[-1].target)
    db.commit([Record(recs[-1].target, {"family": "matmul", "M": 128, "N": 128, "K": 64}, {"tile": 99, "w": 0},
                      [2e-3])])
    db.mark({recs[1].record_id: "refuted"})
    return db


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    d = tmp_path_factory.mktemp("pristine") / "snap"
    publish(_source(), d, publisher="cs-lab", block_size=BS)
    man = json.loads((d / MANIFEST).read_text())
    assert man["stale_targets"] and man["verdicts"] and man["entries_files"]
    assert all(t["parts"] == 4 for t in man["targets"].values())
    return d


class Site:
    """A copy of the pristine snapshot under ``<tmp>/www/snap/``, served by a private nginx, and
    what a hostile publisher does to it (every file it writes hashed and named correctly)."""

    def __init__(self, tmp: Path, pristine: Path) -> None:
        self.tmp = tmp
        self.snap = tmp / "www" / "snap"
        shutil.copytree(pristine, self.snap)
        self.srv = nginx_server.NginxServer(tmp / "nginx", tmp / "www").start()
        self.url = self.srv.url + "snap/"
        self.n = 0
        self.man = json.loads((self.snap / MANIFEST).read_text())
        self.tk = next(tk for tk, t in self.man["targets"].items() if t["target_name"] == TARGET)

    def write_manifest(self, man: dict) -> None:
        self.n += 1
        (self.snap / MANIFEST).write_bytes(manifest_bytes(man))
        t = time.time() + self.n  # (a later mtime each time: nginx's ETag changes)
        os.utime(self.snap / MANIFEST, (t, t))

    def put(self, folder: str, data: bytes, ext: str) -> dict:
        ref = file_ref(f"{folder}/{sha256(data)}.{ext}", data, BS)
        (self.snap / ref["file"]).write_bytes(data)
        return ref

    def part_list(self, man: dict, tk: str) -> dict:
        return json.loads((self.snap / man["targets"][tk]["parts_file"]["file"]).read_bytes())

    def with_part_list(self, man: dict, tk: str, doc: dict) -> dict:
        man = copy.deepcopy(man)
        man["targets"][tk]["parts_file"] = self.put("targets", canonical_bytes(doc) + b"\n", "json")
        return man

    def part_table(self, part: dict) -> pa.Table:
        return pq.read_table(self.snap / part["file"])

    def store(self) -> SnapshotStore:
        return SnapshotStore(self.url, cache_dir=self.tmp / "cache" / str(self.n))

    def stop(self) -> None:
        self.srv.stop()


@pytest.fixture()
def site(tmp_path, pristine):
    nginx_server.need_nginx()
    s = Site(tmp_path, pristine)
    yield s
    s.stop()


def _recount(man: dict, tk: str, delta: int) -> None:
    """Raise target ``tk``'s and the manifest's record counts by ``delta`` (consistently)."""
    man["targets"][tk]["records"] += delta
    man["records"] += delta


def _rewrite_part(site: Site, man: dict, tk: str, i: int, edit: Callable[[pa.Table], pa.Table],
                  **fields) -> tuple[dict, str]:
    """``man`` with part ``i`` of target ``tk`` rewritten as ``edit`` makes it (re-hashed, its
    part list and the manifest counts rewritten to agree: rows, records); the new part's file."""
    doc = site.part_list(man, tk)
    p = doc["parts"][i]
    t = edit(site.part_table(p))
    man = copy.deepcopy(man)
    _recount(man, tk, t.num_rows - p["rows"])
    p.update(site.put("data", parquet_bytes(t), "parquet"), rows=t.num_rows, **fields)
    return site.with_part_list(man, tk, doc), p["file"]


def _set(t: pa.Table, col: str, values: list) -> pa.Table:
    return t.set_column(t.column_names.index(col), col, pa.array(values, t.schema.field(col).type))


# ------------------------------------------------------------------ the variants
# each: (site, manifest) -> (tampered manifest, what the error must name)
def _status_outside_schema(site, man):
    return _rewrite_part(site, man, site.tk, 0, lambda t: _set(t, "status", ["exploded"] * t.num_rows))


def _manifest_records(site, man):
    return {**man, "records": 2_000_000}, "records"


def _target_records(site, man):
    man = copy.deepcopy(man)
    _recount(man, site.tk, 2_000_000)
    return man, man["targets"][site.tk]["parts_file"]["file"]


def _part_rows(site, man):
    doc = site.part_list(man, site.tk)
    doc["parts"][0]["rows"] += 5
    man = copy.deepcopy(man)
    _recount(man, site.tk, 5)
    return site.with_part_list(man, site.tk, doc), doc["parts"][0]["file"]


def _part_listed_twice(site, man):
    doc = site.part_list(man, site.tk)
    doc["parts"].insert(1, doc["parts"][0])
    man = copy.deepcopy(man)
    _recount(man, site.tk, doc["parts"][0]["rows"])
    man["targets"][site.tk]["parts"] += 1
    return site.with_part_list(man, site.tk, doc), doc["parts"][0]["file"]


def _another_targets_part(site, man):
    """Target gpu1's part 0 (its bytes, rows and workload range) listed as gpu-0's part 0."""
    other = next(tk for tk, t in man["targets"].items() if t["target_name"] == "cs-gpu1")
    theirs = site.part_list(man, other)["parts"][0]
    doc = site.part_list(man, site.tk)
    man = copy.deepcopy(man)
    _recount(man, site.tk, theirs["rows"] - doc["parts"][0]["rows"])
    doc["parts"][0] = theirs
    return site.with_part_list(man, site.tk, doc), theirs["file"]


def _another_targets_rows_relabelled(site, man):
    """Target gpu1's rows with gpu-0's target_key written over theirs (the target JSON is gpu1's)."""
    other = next(tk for tk, t in man["targets"].items() if t["target_name"] == "cs-gpu1")
    theirs = site.part_table(site.part_list(man, other)["parts"][0])
    mine = site.part_list(man, site.tk)["parts"][0]
    theirs = _set(theirs, "target_key", [site.tk] * theirs.num_rows)
    assert theirs.column("workload_key")[0].as_py() == mine["first_workload"]  # (the same workloads)
    return _rewrite_part(site, man, site.tk, 0, lambda t: theirs)


def _between(a: str, b: str) -> str:
    """A workload key strictly between keys ``a < b`` (32 hex digits each)."""
    mid = (int(a, 16) + int(b, 16)) // 2
    assert int(a, 16) < mid < int(b, 16)
    return format(mid, "032x")


def _lying_last_workload(site, man):
    """Part 0 (one workload) says it holds workloads up to one between it and part 1."""
    doc = site.part_list(man, site.tk)
    p0, p1 = doc["parts"][0], doc["parts"][1]
    p0["last_workload"] = _between(p0["first_workload"], p1["first_workload"])
    return site.with_part_list(man, site.tk, doc), p0["file"]


def _lying_first_workload(site, man):
    """Part 1 (one workload) says it holds workloads from one between part 0 and it."""
    doc = site.part_list(man, site.tk)
    p0, p1 = doc["parts"][0], doc["parts"][1]
    p1["first_workload"] = _between(p0["last_workload"], p1["first_workload"])
    return site.with_part_list(man, site.tk, doc), p1["file"]


def _parts_out_of_order(site, man):
    doc = site.part_list(man, site.tk)
    doc["parts"][0], doc["parts"][1] = doc["parts"][1], doc["parts"][0]
    return site.with_part_list(man, site.tk, doc), "parts[1]"


def _parts_count(site, man):
    man = copy.deepcopy(man)
    man["targets"][site.tk]["parts"] += 1
    return man, man["targets"][site.tk]["parts_file"]["file"]


def _stale_records(site, man):
    """The stale target's stale_records lowered by one (a count that still looks right)."""
    man = copy.deepcopy(man)
    tk = man["stale_targets"][0]
    man["targets"][tk]["stale_records"] -= 1
    assert man["targets"][tk]["stale_records"] > 0
    return man, man["targets"][tk]["parts_file"]["file"]


def _stale_targets(site, man):
    return {**man, "stale_targets": []}, "stale_targets"


def _target_json(site, man):
    """gpu-0's entry in the manifest carries gpu1's target JSON."""
    man = copy.deepcopy(man)
    other = next(t for t in man["targets"].values() if t["target_name"] == "cs-gpu1")
    man["targets"][site.tk]["target"] = other["target"]
    return man, "target"


def _duplicated_row(site, man):
    return _rewrite_part(site, man, site.tk, 0, lambda t: pa.concat_tables([t, t.slice(0, 1)]).sort_by(
        [("workload_key", "ascending"), ("config_key", "ascending")]))


def _config_key_of_another_config(site, man):
    def swap(t):
        ck = t.column("config_key").to_pylist()
        return _set(t, "config_key", ck[1:] + ck[:1])
    return _rewrite_part(site, man, site.tk, 0, swap)


def _part_list_format(site, man):
    doc = site.part_list(man, site.tk)
    doc["format_version"] = 99
    return site.with_part_list(man, site.tk, doc), "format_version"


def _entries_rows(site, man):
    man = copy.deepcopy(man)
    man["entries_files"][0]["rows"] += 1
    man["entries"] += 1
    return man, man["entries_files"][0]["file"]


def _entries_total(site, man):
    return {**man, "entries": man["entries"] + 1}, "entries"


def _workloads(site, man):
    return {**man, "workloads": man["workloads"] + 1}, "workloads"


def _entries_listed_twice(site, man):
    man = copy.deepcopy(man)
    man["entries_files"].append(man["entries_files"][0])
    return man, "entries_files[1]"


def _verdict_word(site, man):
    man = copy.deepcopy(man)
    doc = json.loads((site.snap / man["verdicts"]["file"]).read_bytes())
    man["verdicts"] = site.put("verdicts", json.dumps({k: "maybe" for k in doc}).encode(), "json")
    return man, man["verdicts"]["file"]


VARIANTS = {
    "status outside the schema": _status_outside_schema,
    "manifest records": _manifest_records,
    "target records": _target_records,
    "part rows": _part_rows,
    "part listed twice": _part_listed_twice,
    "another target's part": _another_targets_part,
    "another target's rows relabelled": _another_targets_rows_relabelled,
    "lying last_workload": _lying_last_workload,
    "lying first_workload": _lying_first_workload,
    "parts out of order": _parts_out_of_order,
    "parts count": _parts_count,
    "stale_records": _stale_records,
    "stale_targets": _stale_targets,
    "target JSON of another target": _target_json,
    "a record twice": _duplicated_row,
    "config_key of another config": _config_key_of_another_config,
    "part list format_version": _part_list_format,
    "entries file rows": _entries_rows,
    "entries total": _entries_total,
    "workloads": _workloads,
    "entries file listed twice": _entries_listed_twice,
    "verdict outside the vocabulary": _verdict_word,
}


def _reads(site: Site) -> dict[str, Callable[[SnapshotStore], object]]:
    """Every read the test compares with the pristine snapshot's answer (plain data)."""
    man = site.man
    tk = site.tk
    parts = site.part_list(man, tk)["parts"]
    wks = [p["first_workload"] for p in parts]
    stale_tk = man["stale_targets"][0]

    def rows(t: pa.Table) -> list:
        return sorted(zip(*(t.column(c).to_pylist() for c in ("record_id", "status", "workload_key", "config_key"))))

    reads: dict[str, Callable[[SnapshotStore], object]] = {
        "len": len,
        "targets": lambda s: sorted((t["target_key"], t["records"]) for t in s.targets()),
        "records(target)": lambda s: rows(s.records(tk)),
        "records(stale target)": lambda s: rows(s.records(stale_tk)),
        "records()": lambda s: rows(s.records()),
        "entries": lambda s: sorted(zip(s.entries().column("target_key").to_pylist(),
                                        s.entries().column("workload_key").to_pylist())),
        "verdicts": lambda s: s.verdicts(),
    }
    for i, wk in enumerate(wks[:2]):
        reads[f"entry_records(part {i})"] = lambda s, wk=wk: sorted(r.record_id for r in s.entry_records(tk, wk))
        reads[f"best(part {i})"] = lambda s, wk=wk: [r.record_id for r in s.best(tk, wk, k=3)]
    return reads


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_snapshot_that_contradicts_itself_is_refused_in_one_line(site, capsys, variant):
    """Each variant: every read either answers what the pristine snapshot answers or raises one
    SnapshotContentError line naming the part or field; at least one read raises; ``tunedb
    export`` of the whole snapshot (or the refused read's CLI) exits 2 with one line and writes
    nothing."""
    reads = _reads(site)
    s = site.store()
    want = {name: read(s) for name, read in reads.items()}
    assert want["len"] == len(want["records()"]) > 0
    bad, expect = VARIANTS[variant](site, site.man)
    # len() and targets() say what the manifest says without fetching anything (reads stay
    # lazy); those counts are checked against a target's part list and parts when they are fetched
    want["len"] = bad["records"]
    want["targets"] = sorted((tk, t["records"]) for tk, t in bad["targets"].items())
    site.write_manifest(bad)
    refused, answered = [], []
    try:
        s = site.store()
    except SnapshotContentError as e:
        refused = [("open", e)]
    else:
        for name, read in reads.items():
            try:
                got = read(s)
            except SnapshotContentError as e:
                refused.append((name, e))
            else:
                assert got == want[name], (variant, name, "a wrong answer")
                answered.append(name)
    assert refused, (variant, "nothing refused")
    for name, e in refused:
        text = str(e)
        assert isinstance(e, ValueError) and isinstance(e, SnapshotError)
        assert "\n" not in text and expect in text and "refused" in text, (variant, name, text)
    # the CLI: the command that makes the same read, one line and exit 2, nothing written
    first = refused[0][0]
    out = site.tmp / "export.jsonl"
    argv = {"entries": ["workloads"], "verdicts": ["best", "--target", TARGET, "--workload", "matmul:M=128,N=128,K=64"]
            }.get(first, ["export", "--format", "jsonl", str(out)])
    rc = main(["--db", site.url, *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("tunedb: error:") and expect in err[0], (variant, rc, err)
    assert not out.exists()


def test_a_part_whose_range_hides_its_workload_is_refused_when_read(site):
    """Part 0 says it holds another workload than the one it holds: a read of the whole target,
    and a read of the workload it claims, refuse it (a read of the workload it hides does not
    fetch it: see docs/security.md)."""
    doc = site.part_list(site.man, site.tk)
    real = doc["parts"][0]["first_workload"]
    claim = real[:-1] + ("1" if real[-1] == "0" else "0")
    assert claim < doc["parts"][1]["first_workload"] and (claim < real) == (real[-1] != "0")
    doc["parts"][0]["first_workload"] = doc["parts"][0]["last_workload"] = claim
    site.write_manifest(site.with_part_list(site.man, site.tk, doc))
    for read in (lambda s: s.records(site.tk), lambda s: s.entry_records(site.tk, claim)):
        with pytest.raises(SnapshotContentError, match=doc["parts"][0]["file"]) as e:
            read(site.store())
        assert "holds workloads" in str(e.value)


def test_reads_stay_lazy(site):
    """The checks look at what was fetched only: a point read of one workload fetches that
    target's part list and one part (and the verdicts), as before."""
    s = site.store()
    parts = site.part_list(site.man, site.tk)["parts"]
    assert s.entry_records(site.tk, parts[2]["first_workload"])
    cached = {p.name for p in (site.tmp / "cache" / str(site.n) / "blocks").iterdir()}
    want = {parts[2]["sha256"], site.man["verdicts"]["sha256"], site.man["targets"][site.tk]["parts_file"]["sha256"]}
    assert cached == want
    assert len(s) == site.man["records"]  # (no fetch)
    assert {p.name for p in (site.tmp / "cache" / str(site.n) / "blocks").iterdir()} == want


# ------------------------------------------------------------------ deep JSON
def _deep_config_part(site: Site, depth: int) -> tuple[dict, str, str]:
    """Part 0 of gpu-0 with one row's config nested ``depth`` objects deep (its keys and hashes
    made to agree, as a publisher would)."""
    deep = '{"a":' * depth + "1" + "}" * depth

    def edit(t: pa.Table) -> pa.Table:
        ck = key_of_text(deep)
        t = _set(t, "config", [deep] + t.column("config").to_pylist()[1:])
        t = _set(t, "config_key", [ck] + t.column("config_key").to_pylist()[1:])
        row = t.slice(0, 1).to_pylist()[0]
        return _set(t, "lookup_key", [hash64(row["target_key"], row["workload_key"], ck)]
                    + t.column("lookup_key").to_pylist()[1:])

    man, part = _rewrite_part(site, site.man, site.tk, 0, edit)
    wk = site.part_list(man, site.tk)["parts"][0]["first_workload"]
    return man, part, wk


def test_a_config_nested_100000_deep_in_a_part_is_one_value_error(site, capsys):
    man, part, wk = _deep_config_part(site, 100_000)
    site.write_manifest(man)
    for read in (lambda s: s.entry_records(site.tk, wk), lambda s: s.records(), lambda s: s.lookup(site.tk, wk, "0" * 32)):
        with pytest.raises(ValueError) as e:
            read(site.store())
        text = str(e.value)
        assert isinstance(e.value, SnapshotContentError) and part in text and "config of record" in text
        assert f"deeper than {MAX_JSON_DEPTH}" in text and "\n" not in text
    out = site.tmp / "out.jsonl"
    rc = main(["--db", site.url, "export", "--format", "jsonl", str(out)])
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and part in lines[0] and "Traceback" not in cap.err, (rc, cap.err[-2000:])
    assert not out.exists()


def test_a_config_at_the_depth_limit_reads(site):
    """The depth check refuses past the limit only: a config at MAX_JSON_DEPTH reads."""
    man, part, wk = _deep_config_part(site, MAX_JSON_DEPTH)
    site.write_manifest(man)
    got = site.store().records(site.tk, wk)
    assert got.num_rows == site.part_list(man, site.tk)["parts"][0]["rows"]


def test_an_over_deep_manifest_or_part_list_is_refused_in_one_line(site):
    site.write_manifest({**site.man, "publisher": "cs-lab"})
    deep = b"[" * 100_000 + b"]" * 100_000
    doc_ref = site.put("targets", deep, "json")
    man = copy.deepcopy(site.man)
    man["targets"][site.tk]["parts_file"] = doc_ref
    site.write_manifest(man)
    with pytest.raises(SnapshotContentError, match=f"{doc_ref['file']}: part list: JSON nested deeper"):
        site.store().records(site.tk)
    (site.snap / MANIFEST).write_bytes(b'{"a":' * 100_000 + b"1" + b"}" * 100_000)
    with pytest.raises(SnapshotContentError, match="manifest: JSON nested deeper") as e:
        site.store()
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------ rollback
def test_a_forged_unsigned_version_cannot_lock_a_reader_out(site, capsys):
    """An unsigned manifest forged once with version 2**53 (a plain-HTTP attacker, a stale
    mirror): the real manifest still opens afterwards -- one warning, then none."""
    state = site.tmp / "tunedb-cache" / "snapshot-versions.json"
    real = site.man
    assert site.store().version == 1
    site.write_manifest({**real, "version": 2 ** 53})
    assert site.store().version == 2 ** 53
    assert seen_version(state, "unsigned", site.url) == 2 ** 53
    site.write_manifest(real)
    with pytest.warns(SnapshotWarning, match="older than version 9007199254740992.*read all the same"):
        assert site.store().version == 1
    assert seen_version(state, "unsigned", site.url) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(site.store()) == real["records"]
    site.write_manifest({**real, "version": 2 ** 53})
    assert main(["--db", site.url, "stats"]) == 0
    site.write_manifest(real)
    assert main(["--db", site.url, "--json", "stats"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out.strip().splitlines()[-1])["records"] == real["records"], cap


def test_a_signed_rollback_refusal_says_how_to_recover(site, capsys):
    from tunedb.index.snapshot.signing import generate_keys, sign_manifest

    key, pub = site.tmp / "k", site.tmp / "k.pub"
    generate_keys(key, pub)
    state = site.tmp / "tunedb-cache" / "snapshot-versions.json"
    v1, v2 = sign_manifest(site.man, key), sign_manifest({**site.man, "version": 2}, key)
    site.write_manifest(v2)
    assert SnapshotStore(site.url, cache_dir=site.tmp / "c1", publisher_key=pub).version == 2
    site.write_manifest(v1)
    with pytest.raises(SnapshotError, match="rollback") as e:
        SnapshotStore(site.url, cache_dir=site.tmp / "c2", publisher_key=pub)
    assert "--pin-version 1" in str(e.value) and str(state) in str(e.value) and "\n" not in str(e.value)
    assert main(["--db", site.url, "--publisher-key", str(pub), "stats"]) == 2
    line = capsys.readouterr().err.strip().splitlines()
    assert len(line) == 1 and "--pin-version 1" in line[0] and str(state) in line[0]
    state.unlink()  # what the line says: forget the versions read
    assert SnapshotStore(site.url, cache_dir=site.tmp / "c3", publisher_key=pub).version == 1
