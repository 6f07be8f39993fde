"""A published snapshot read from a hostile publisher or through a hostile network: every field
of a manifest or part list that names a file, served by a real nginx (tests/nginx_server.py)
with absolute paths, ``..``, NUL, encoded dots, schemes and over-long values; servers that drip
bytes, send too much, redirect elsewhere; a signed snapshot rolled back to an older version; a
seeded fuzzer of manifests and part lists; a republish over a damaged file.

Each attempt must end in one error line (the API: one ``SnapshotError`` line; the CLI: exit 2
and one stderr line), write nothing outside the cache directory (the file tree of the test's
directory is compared before and after) and request nothing outside the snapshot's URL prefix
(nginx's access log is read)."""

from __future__ import annotations

import copy
import http.server
import json
import os
import random
import re
import shutil
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

import tunedb
from tunedb.index import Record
from tunedb.index.snapshot.format import (
    MANIFEST,
    SAFE_NAME,
    VECTOR_FILE,
    SnapshotError,
    canonical_bytes,
    file_ref,
    manifest_bytes,
    sha256,
)
from tunedb.index.snapshot.remote import Remote
from tunedb.index.snapshot.store import SnapshotStore
from tunedb.transfer.cli.main import main
from tunedb.transfer.migration.publish import publish

import nginx_server

BS = 4096
PREFIX = "/snap/"
TARGET = "hx-gpu0"
WORKLOAD = "matmul:M=128,N=128,K=64"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """The CLI's snapshot caches and the rollback state of each test are its own."""
    monkeypatch.setenv("TUNEDB_CACHE_DIR", str(tmp_path / "tunedb-cache"))
    for name in ("TUNEDB_HTTP_DEADLINE", "TUNEDB_HTTP_TOTAL_DEADLINE", "TUNEDB_SNAPSHOT_MAX_MANIFEST"):
        monkeypatch.delenv(name, raising=False)


def _source():
    db = tunedb.open("memory:")
    recs = []
    for t in range(3):
        target = {"kind": "gpu", "name": f"hx-gpu{t}", "sm": 80 + t}
        for w in range(4):
            wl = {"family": "matmul", "M": 128 * (w + 1), "N": 128, "K": 64}
            for c in range(3):
                recs.append(Record(target, wl, {"tile": 2 ** c, "w": w}, [1e-3 * (1 + (t + w + c) % 5)]))
    db.commit(recs)
    db.mark({recs[0].record_id: "refuted"})
    return db


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A valid snapshot (parts, part lists, entries, vectors, verdicts) every test copies."""
    d = tmp_path_factory.mktemp("pristine") / "snap"
    publish(_source(), d, publisher="hx-lab", block_size=BS)
    man = json.loads((d / MANIFEST).read_text())
    assert man["vectors"] and man["verdicts"] and man["entries_files"] and man["version"] == 1
    return d


class Site:
    """A copy of the pristine snapshot under ``<tmp>/www/snap/``, served by a private nginx."""

    def __init__(self, tmp: Path, pristine: Path) -> None:
        self.tmp = tmp
        self.www = tmp / "www"
        self.snap = self.www / "snap"
        shutil.copytree(pristine, self.snap)
        (self.www / "secret.txt").write_text("outside the snapshot's prefix\n")
        self.srv = nginx_server.NginxServer(tmp / "nginx", self.www).start()
        self.url = self.srv.url + PREFIX.lstrip("/")
        self.n = 0

    def manifest(self) -> dict:
        return json.loads((self.snap / MANIFEST).read_text())

    def write_manifest(self, man: dict) -> None:
        self.n += 1
        data = manifest_bytes(man)
        (self.snap / MANIFEST).write_bytes(data)
        t = time.time() + self.n  # (a later mtime each time: nginx's ETag changes)
        os.utime(self.snap / MANIFEST, (t, t))

    def put(self, folder: str, data: bytes, ext: str) -> dict:
        """A new content-addressed file (what a hostile publisher can always write)."""
        ref = file_ref(f"{folder}/{sha256(data)}.{ext}", data, BS)
        (self.snap / ref["file"]).write_bytes(data)
        return ref

    def first_target(self, man: dict) -> str:
        return next(tk for tk, t in man["targets"].items() if t["target_name"] == TARGET)

    def part_list(self, man: dict, tk: str) -> dict:
        return json.loads((self.snap / man["targets"][tk]["parts_file"]["file"]).read_bytes())

    def with_part_list(self, man: dict, tk: str, doc: dict) -> dict:
        """``man`` with target ``tk``'s part list replaced by ``doc`` (hashed, as a publisher would)."""
        man = copy.deepcopy(man)
        man["targets"][tk]["parts_file"] = self.put("targets", canonical_bytes(doc) + b"\n", "json")
        return man

    def requests(self) -> list[str]:
        log = self.srv.base / "logs" / "access.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        return re.findall(r'"[A-Z]+ (\S+) HTTP/[0-9.]+"', text)

    def stop(self) -> None:
        self.srv.stop()


@pytest.fixture()
def site(tmp_path, pristine):
    nginx_server.need_nginx()
    s = Site(tmp_path, pristine)
    yield s
    s.stop()


def _tree(root: Path, skip: tuple[Path, ...]) -> dict[str, int]:
    out = {}
    for p in root.rglob("*"):
        if any(p == s or s in p.parents for s in skip):
            continue
        out[str(p.relative_to(root))] = p.stat().st_size if p.is_file() else -1
    return out


def _cache_names_are_derived(cache: Path) -> None:
    """Every path in a snapshot cache is one the reader derives from validated hashes."""
    if not cache.exists():
        return
    for p in cache.rglob("*"):
        rel = p.relative_to(cache).parts
        if rel[0] in (MANIFEST, "manifest.etag") and len(rel) == 1:
            continue
        if rel[0] == "blocks":
            assert len(rel) <= 3 and (len(rel) < 2 or re.fullmatch(r"[0-9a-f]{64}", rel[1])), rel
            assert len(rel) < 3 or rel[2].isdigit() or rel[2].startswith("_tmp-"), rel
            continue
        assert rel[0] == "derived", rel
        assert len(rel) < 2 or re.fullmatch(r"[0-9a-f]{16}", rel[1]), rel
        assert len(rel) < 3 or rel[2] == "vectors", rel
        assert len(rel) < 4 or rel[3] in (MANIFEST, ".lock") or VECTOR_FILE.fullmatch(rel[3]), rel


def _one_line(e: BaseException) -> str:
    text = str(e)
    assert text and "\n" not in text and "\r" not in text and "\x00" not in text, repr(text)
    return text


def _cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _cli_fails_in_one_line(capsys, *argv) -> str:
    rc, out, err = _cli(capsys, *argv)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("tunedb: error:"), (argv, rc, err)
    assert "Traceback" not in err
    return lines[0]


# ------------------------------------------------------------------ hostile names
HOSTILE = ("{sentinel}", "../../../../../pwned", "data/../../../pwned.parquet", "../" * 12 + "etc/passwd",
           "data/%2e%2e/%2e%2e/secret.txt", "%2e%2e/secret.txt", "..\\..\\pwned", "a\x00b", "x" * 5000,
           "http://127.0.0.1:1/pwned", "//evil.example/pwned", "data/{h}.parquet\n", "../secret.txt")


def _values(site: Site) -> list[str]:
    sentinel = str(site.tmp / "pwned")
    h = "0" * 64
    return [v.format(sentinel=sentinel, h=h) if "{" in v else v for v in HOSTILE]


def _edit_manifest(field: str, value: str) -> Callable[[Site, dict], dict]:
    """A hostile publisher's manifest: ``field`` set to ``value`` (everything else valid)."""

    def edit(site: Site, man: dict) -> dict:
        man = copy.deepcopy(man)
        tk = site.first_target(man)
        if field == "vectors.files key":  # renamed in the files and in the index's manifest alike
            files, vman = man["vectors"]["files"], man["vectors"]["manifest"]
            old = vman["index"]["file"]
            files[value] = files.pop(old)
            vman["index"]["file"] = value
        elif field == "vectors.files file":
            ref = next(iter(man["vectors"]["files"].values()))
            ref["file"] = value
        elif field == "vectors.files sha256":
            ref = next(iter(man["vectors"]["files"].values()))
            ref["sha256"] = value
        elif field.startswith("parts_file."):
            man["targets"][tk]["parts_file"][field.split(".")[1]] = value
        elif field.startswith("entries_files."):
            man["entries_files"][0][field.split(".")[1]] = value
        elif field.startswith("verdicts."):
            man["verdicts"][field.split(".")[1]] = value
        else:
            raise AssertionError(field)
        return man

    return edit


def _edit_part(key: str, value: str) -> Callable[[Site, dict], dict]:
    """A hostile publisher's part list (hashed and named correctly): part 0's ``key`` set to ``value``."""

    def edit(site: Site, man: dict) -> dict:
        tk = site.first_target(man)
        doc = site.part_list(man, tk)
        doc["parts"][0][key] = value
        return site.with_part_list(man, tk, doc)

    return edit


MANIFEST_FIELDS = ("vectors.files key", "vectors.files file", "vectors.files sha256", "parts_file.file",
                   "parts_file.sha256", "entries_files.file", "entries_files.sha256", "verdicts.file",
                   "verdicts.sha256")
PART_FIELDS = ("file", "sha256")


def _check_attempt(site: Site, capsys, edit: Callable[[Site, dict], dict], at_open: bool, field: str) -> None:
    """Serve ``edit``'s snapshot; read it through the API and the CLI (``--db`` and ``--also``)."""
    pristine_man = site.manifest()
    site.write_manifest(edit(site, pristine_man))
    skip = (site.tmp / "cache", site.tmp / "nginx", site.tmp / "tunedb-cache", site.snap)
    before = _tree(site.tmp, skip)
    cache = site.tmp / "cache" / str(site.n)
    with pytest.raises(SnapshotError) as e:
        s = SnapshotStore(site.url, cache_dir=cache)
        assert not at_open, f"{field}: opened"
        tk = site.first_target(s.manifest)
        s.records(tk)
        _ = s.entries(), s.verdicts(), s.cache_dir()
    said = _one_line(e.value)
    head, leaf = re.split(r"[. ]", field, maxsplit=1)
    assert head in said and (head == "vectors" or leaf in said), (field, said)
    argvs = [("stats", "--db", site.url)] if at_open else []
    argvs += [("best", "--db", site.url, "--target", TARGET, "--workload", WORKLOAD, "--json"),
              ("best", "--db", "memory:", "--also", site.url, "--target", TARGET, "--workload", WORKLOAD)]
    for argv in argvs:
        line = _cli_fails_in_one_line(capsys, *argv)
        assert "refused" in line, (field, line)
    assert _tree(site.tmp, skip) == before, field
    assert not (site.tmp / "pwned").exists() and not Path("/pwned").exists()
    _cache_names_are_derived(cache)
    for c in (site.tmp / "tunedb-cache" / "snapshots").glob("*"):
        _cache_names_are_derived(c)
    bad = [r for r in site.requests() if not (r.startswith(PREFIX) and SAFE_NAME.fullmatch(r[len(PREFIX):]))]
    assert not bad, (field, bad)
    site.write_manifest(pristine_man)


@pytest.mark.parametrize("field", MANIFEST_FIELDS)
def test_hostile_manifest_names_are_refused_in_one_line(site, capsys, field):
    """Each manifest field that names a file, with each hostile value: refused at open (the API
    and the CLI), nothing written outside the cache, nothing requested outside the prefix."""
    for value in _values(site):
        _check_attempt(site, capsys, _edit_manifest(field, value), True, field)
    s = SnapshotStore(site.url, cache_dir=site.tmp / "cache" / "after")  # the pristine snapshot still reads
    assert len(s.records()) == len(s) > 0 and s.nearest({"kind": "gpu", "name": TARGET, "sm": 80},
                                                        {"family": "matmul", "M": 128, "N": 128, "K": 64}, k=2)


@pytest.mark.parametrize("key", PART_FIELDS)
def test_hostile_part_list_names_are_refused_in_one_line(site, capsys, key):
    """A part list (named and hashed correctly, so it is fetched) whose part names a hostile
    file: refused when the target is read, through the API and the CLI."""
    for value in _values(site):
        _check_attempt(site, capsys, _edit_part(key, value), False, f"parts[0].{key}")


def test_a_block_count_or_size_that_does_not_fit_is_refused(site):
    man = site.manifest()
    tk = site.first_target(man)
    for field, value in (("bytes", -1), ("bytes", 1 << 62), ("bytes", True), ("bytes", "12"),
                         ("blocks", []), ("blocks", ["0" * 64] * 10_000), ("blocks", ["../x"])):
        bad = copy.deepcopy(man)
        bad["targets"][tk]["parts_file"][field] = value
        site.write_manifest(bad)
        with pytest.raises(SnapshotError, match=f"parts_file.{field}"):
            SnapshotStore(site.url, cache_dir=site.tmp / "cache" / str(site.n))
    for value in (0, 1000, 3 << 12, 1 << 40, "4096", 4096.0):
        site.write_manifest({**man, "block_size": value})
        with pytest.raises(SnapshotError, match="block_size") as e:
            SnapshotStore(site.url, cache_dir=site.tmp / "cache" / str(site.n))
        _one_line(e.value)


def test_a_signed_hostile_manifest_is_refused_all_the_same(site, tmp_path):
    """A signature says who published a manifest, not that it is harmless: a hostile publisher
    signs what it serves, and the reader holding its key refuses it as any other."""
    from tunedb.index.snapshot.signing import generate_keys, sign_manifest

    generate_keys(tmp_path / "k", tmp_path / "k.pub")
    man = site.manifest()
    for field in ("vectors.files key", "parts_file.file"):
        site.write_manifest(sign_manifest(_edit_manifest(field, "../../../../pwned")(site, man), tmp_path / "k"))
        with pytest.raises(SnapshotError, match="refused") as e:
            SnapshotStore(site.url, cache_dir=tmp_path / "cache" / str(site.n), publisher_key=tmp_path / "k.pub")
        _one_line(e.value)
    site.write_manifest(sign_manifest(man, tmp_path / "k"))  # (the same key, a harmless manifest: read)
    assert len(SnapshotStore(site.url, cache_dir=tmp_path / "cache" / "ok", publisher_key=tmp_path / "k.pub")) > 0
    assert not (tmp_path / "pwned").exists()


def test_the_remote_requests_only_safe_names(site):
    """``Remote`` itself (below the validation) refuses a name outside the snapshot's file forms
    without sending a request."""
    r = Remote(site.url, site.tmp / "cache" / "raw")
    good = site.manifest()["verdicts"]
    for name in _values(site):
        with pytest.raises(SnapshotError, match="refused") as e:
            r.blocks({**good, "file": name}, BS, 0, 0)
        _one_line(e.value)
    with pytest.raises(SnapshotError, match="refused"):
        r.blocks({**good, "sha256": "../../pwned"}, BS, 0, 0)
    assert r.requests == 0 and len(r.read_all(good, BS)) == good["bytes"]
    for base in ("file:///etc/", "ftp://127.0.0.1/x/", site.url + "?a=1", "http://user:pw@127.0.0.1/x/"):
        with pytest.raises(SnapshotError, match="not a snapshot URL"):
            Remote(base, site.tmp / "cache" / "raw2")


# ------------------------------------------------------------------ hostile servers (Python, in a thread)
class _Server:
    """A tiny HTTP server on 127.0.0.1 in a thread, answering with ``handle(handler)``."""

    def __init__(self, handle: Callable[[http.server.BaseHTTPRequestHandler], None]) -> None:
        seen = self.seen = []

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self):  # noqa: N802 - the http.server interface
                seen.append(self.path)
                try:
                    handle(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/snap/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def server():
    made = []

    def start(handle):
        made.append(_Server(handle))
        return made[-1]

    yield start
    for s in made:
        s.stop()


def _drip(h) -> None:
    h.send_response(200)
    h.send_header("Content-Length", "100000")
    h.end_headers()
    for _ in range(400):  # 1 byte every 0.5 s: each read succeeds, the whole never ends
        h.wfile.write(b" ")
        h.wfile.flush()
        time.sleep(0.5)


def test_a_slow_drip_server_is_cut_at_the_deadline(tmp_path, server, capsys, monkeypatch):
    srv = server(_drip)
    t0 = time.monotonic()
    with pytest.raises(SnapshotError, match="within 2 s") as e:
        SnapshotStore(srv.url, cache_dir=tmp_path / "c1", deadline=2)
    took = time.monotonic() - t0
    assert 1.9 < took < 4.0, took
    _one_line(e.value)
    monkeypatch.setenv("TUNEDB_HTTP_DEADLINE", "1.5")
    t0 = time.monotonic()
    line = _cli_fails_in_one_line(capsys, "stats", "--db", srv.url)
    assert "within 1.5 s" in line and time.monotonic() - t0 < 3.5
    monkeypatch.delenv("TUNEDB_HTTP_DEADLINE")
    # the handle's total: three requests of 1 s each cannot take more than 1.5 s together
    r = Remote(srv.url, tmp_path / "c2", deadline=1, total_deadline=1.5)
    t0 = time.monotonic()
    for _ in range(3):
        with pytest.raises(SnapshotError) as e:
            r.manifest()
        _one_line(e.value)
    assert "spent" in str(e.value) and time.monotonic() - t0 < 2.5


def test_a_too_large_manifest_is_refused_without_reading_it(site, server):
    big = b"{" + b" " * (20 << 20) + b"}"
    (site.snap / MANIFEST).write_bytes(big)  # nginx announces its length: refused before reading
    with pytest.raises(SnapshotError, match="larger than") as e:
        SnapshotStore(site.url, cache_dir=site.tmp / "c1")
    _one_line(e.value)
    r = Remote(site.url, site.tmp / "c2")
    with pytest.raises(SnapshotError, match="larger than"):
        r.manifest()
    assert r.bytes_fetched == 0
    with pytest.raises(SnapshotError, match="larger than"):
        SnapshotStore(site.url, cache_dir=site.tmp / "c3", max_manifest_bytes=1 << 20)

    def unannounced(h):  # no Content-Length: the body ends when the connection does
        h.send_response(200)
        h.end_headers()
        for _ in range(20 << 4):
            h.wfile.write(b" " * (1 << 16))

    srv = server(unannounced)
    r = Remote(srv.url, site.tmp / "c4", max_manifest_bytes=1 << 20)
    with pytest.raises(SnapshotError, match="larger than") as e:
        r.manifest()
    _one_line(e.value)
    assert (1 << 20) < r.bytes_fetched <= (1 << 20) + (1 << 16)


def test_an_answer_longer_than_its_range_is_refused(site, server):
    """A server that answers a Range request with far more than the range (or a whole-file
    answer longer than the file): refused once the answer passes the range, never held whole."""
    man = site.manifest()
    tk = site.first_target(man)
    files = {p.relative_to(site.snap).as_posix(): p.read_bytes() for p in site.snap.rglob("*") if p.is_file()}

    def handle(h):
        name = h.path[len(PREFIX):]
        if name.startswith("data/"):
            h.send_response(206 if "Range" in h.headers else 200)
            h.end_headers()  # (no Content-Length)
            for _ in range(200):
                h.wfile.write(b"\0" * (1 << 16))
            return
        body = files.get(name)
        h.send_response(200 if body is not None else 404)
        h.send_header("Content-Length", str(len(body or b"")))
        h.end_headers()
        h.wfile.write(body or b"")

    srv = server(handle)
    s = SnapshotStore(srv.url, cache_dir=site.tmp / "c1")
    with pytest.raises(SnapshotError, match="more than") as e:
        s.records(tk)
    _one_line(e.value)
    assert s.fetch_stats()["bytes_fetched"] < sum(map(len, files.values())) + (1 << 16)  # (12.8 MB were sent)


def test_a_redirect_to_another_host_is_refused(site, server, capsys):
    def redirect(h):
        h.send_response(302)
        h.send_header("Location", site.url + h.path[len(PREFIX):])
        h.send_header("Content-Length", "0")
        h.end_headers()

    srv = server(redirect)
    with pytest.raises(SnapshotError, match="HTTP 302 redirect") as e:
        SnapshotStore(srv.url, cache_dir=site.tmp / "c1")
    _one_line(e.value)
    line = _cli_fails_in_one_line(capsys, "stats", "--db", srv.url)
    assert "redirect" in line
    assert srv.seen and site.requests() == []  # the other server was never asked


# ------------------------------------------------------------------ rollback
def test_an_older_signed_snapshot_is_refused_as_a_rollback(tmp_path, capsys):
    nginx_server.need_nginx()
    from tunedb.index.snapshot.signing import generate_keys

    key, pub = tmp_path / "k", tmp_path / "k.pub"
    generate_keys(key, pub)
    src = _source()
    snap = tmp_path / "www" / "snap"
    assert publish(src, snap, sign_key=key, block_size=BS)["version"] == 1
    v1 = (snap / MANIFEST).read_bytes()
    src.commit(Record({"kind": "gpu", "name": "hx-new"}, {"family": "matmul", "M": 1, "N": 1, "K": 1}, {"t": 1}, [1.0]))
    res = publish(src, snap, sign_key=key, block_size=BS)
    man2 = json.loads((snap / MANIFEST).read_text())
    assert res["version"] == man2["version"] == 2 and man2["published"]
    with nginx_server.NginxServer(tmp_path / "nginx", tmp_path / "www") as srv:
        url = srv.url + "snap/"
        s = SnapshotStore(url, cache_dir=tmp_path / "c1", publisher_key=pub)
        assert s.version == 2 and len(s) == len(src)
        (snap / MANIFEST).write_bytes(v1)  # the publisher's own signature, one version back
        os.utime(snap / MANIFEST, (time.time() + 5, time.time() + 5))
        for cache in ("c1", "c2"):  # a fresh cache does not forget: the state is the reader's
            with pytest.raises(SnapshotError, match="version 1 is older than version 2.*rollback") as e:
                SnapshotStore(url, cache_dir=tmp_path / cache, publisher_key=pub)
            _one_line(e.value)
        with pytest.raises(SnapshotError, match="rollback"):
            s.refresh()
        assert s.version == 2  # (the handle keeps what it had)
        line = _cli_fails_in_one_line(capsys, "stats", "--db", url, "--publisher-key", pub)
        assert "rollback" in line and "--pin-version 1" in line
        rc, out, err = _cli(capsys, "--json", "stats", "--db", url, "--publisher-key", pub, "--pin-version", "1")
        assert rc == 0 and json.loads(out)["records"] == len(src) - 1, (rc, out, err)
        old = SnapshotStore(url, cache_dir=tmp_path / "c3", publisher_key=pub, pin_version=1)  # on purpose
        assert old.version == 1 and len(old) == len(src) - 1
        with pytest.raises(SnapshotError, match="rollback"):  # pinning once does not lower the state
            SnapshotStore(url, cache_dir=tmp_path / "c4", publisher_key=pub)
        (snap / MANIFEST).write_bytes(json.dumps(man2).encode())
        assert SnapshotStore(url, cache_dir=tmp_path / "c4", publisher_key=pub).version == 2
    assert publish(src, snap, block_size=BS)["version"] == 3


# ------------------------------------------------------------------ fuzz
FUZZ_RUNS, FUZZ_SEED = 400, 20261205
JUNK = (None, True, False, -1, 0, 1, 2 ** 70, -(2 ** 63), 1.5, float("1e308"), "", "x" * 300, "../x", "a\x00b",
        "%2e%2e/", "0" * 64, [], {}, [[[[[]]]]], {"a": {"b": [1, None]}}, ["0" * 64], "9" * 5000)


def _paths(doc, prefix=()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:6]):
            out += _paths(v, (*prefix, i))
    return out


def _mutate(doc, rng: random.Random):
    """``doc`` with one to three random edits: a value replaced (junk, a type swapped), a key or
    item deleted, junk added."""
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        path = rng.choice([p for p in _paths(doc) if p])
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        last = path[-1]
        op = rng.random()
        if op < 0.25:
            del parent[last]
        elif op < 0.4:
            v = parent[last]
            parent[last] = (str(v) if isinstance(v, (int, float)) else len(v) if isinstance(v, (str, list, dict))
                            else [v])
        elif op < 0.5 and isinstance(parent[last], dict):
            parent[last][rng.choice(["file", "sha256", "bytes", "../x", "\x00"])] = rng.choice(JUNK)
        else:
            parent[last] = copy.deepcopy(rng.choice(JUNK))
    return doc


def test_fuzzed_manifests_and_part_lists_end_in_an_answer_or_one_line(site):
    """FUZZ_RUNS seeded mutations of a valid unsigned manifest (or of a target's part list, hashed and
    named correctly so it is read) served by nginx: each read ends in an answer or one
    SnapshotError/ValueError line -- never another exception."""
    rng = random.Random(FUZZ_SEED)
    man = site.manifest()
    tk = site.first_target(man)
    plist = site.part_list(man, tk)
    wk = plist["parts"][0]["first_workload"]
    others, outcomes = [], {"answer": 0, "refused": 0}
    skip = (site.tmp / "cache", site.tmp / "nginx", site.tmp / "tunedb-cache", site.snap)
    before = _tree(site.tmp, skip)
    t0 = time.monotonic()
    for i in range(FUZZ_RUNS):
        if i % 3 == 2:
            bad = site.with_part_list(man, tk, _mutate(plist, rng))
        else:
            bad = _mutate(man, rng)
        try:
            data = manifest_bytes(bad)
        except (ValueError, TypeError):  # (a NaN or such: not JSON a publisher could write)
            continue
        (site.snap / MANIFEST).write_bytes(data)
        try:
            s = SnapshotStore(site.url, cache_dir=site.tmp / "cache" / str(i),
                              state_file=site.tmp / "cache" / f"v{i}.json")
            try:
                _ = len(s), s.targets(), s.stats(), s.version, s.verdicts()
                s.records(tk)
                s.best_costs(tk, wk)
                s.entries()
                if i % 8 == 0:
                    s.nearest({"kind": "gpu", "name": TARGET, "sm": 80}, {"family": "matmul", "M": 128, "N": 128,
                                                                        "K": 64}, k=2)
            finally:
                s.close()
            outcomes["answer"] += 1
        except (SnapshotError, ValueError) as e:
            _one_line(e)
            outcomes["refused"] += 1
        except Exception as e:  # noqa: BLE001 - what the test looks for
            others.append((i, f"{type(e).__name__}: {e}"[:200], traceback.format_exc().splitlines()[-3]))
    raw = (b"[" * 200_000, b'{"format": ' + b"1" * 5000 + b"}", b"\xff\xfe{}", b"null", b"", b"{" * 3,
           manifest_bytes(man)[:-40], b'{"format": "tunedb-snapshot", "format_version": 3, "targets": []}')
    for i, data in enumerate(raw):  # bytes no JSON encoder writes
        (site.snap / MANIFEST).write_bytes(data)
        with pytest.raises(SnapshotError) as e:
            SnapshotStore(site.url, cache_dir=site.tmp / "cache" / f"raw{i}")
        _one_line(e.value)
    assert not others, others[:5]
    assert outcomes["answer"] > 10 and outcomes["refused"] > 100, outcomes
    assert time.monotonic() - t0 < 60
    assert _tree(site.tmp, skip) == before
    assert not (site.tmp / "pwned").exists()
    bad_requests = [r for r in site.requests() if not (r.startswith(PREFIX) and SAFE_NAME.fullmatch(r[len(PREFIX):]))]
    assert not bad_requests


# ------------------------------------------------------------------ republish
def test_republish_rewrites_a_damaged_file_of_the_right_size(tmp_path):
    src = _source()
    out = tmp_path / "snap"
    first = publish(src, out, block_size=BS)
    man = json.loads((out / MANIFEST).read_text())
    tk = next(iter(man["targets"]))
    part = json.loads((out / man["targets"][tk]["parts_file"]["file"]).read_bytes())["parts"][0]
    path = out / part["file"]
    good = path.read_bytes()
    path.write_bytes(good[:100] + bytes(len(good) - 200) + good[-100:])  # same size, other content
    again = publish(src, out, block_size=BS)
    assert again["files_repaired"] == 1 and again["files_written"] == 1, again
    assert again["files_reused"] == first["files"] - 1
    assert path.read_bytes() == good and sha256(good) == part["sha256"]
    assert again["version"] == 2
    # a damaged file in --since is not taken: the new snapshot gets a good copy
    path.write_bytes(bytes(len(good)))
    other = publish(src, tmp_path / "next", since=out, block_size=BS)
    assert (tmp_path / "next" / part["file"]).read_bytes() == good and other["files_written"] >= 1
    assert other["version"] == 3
    with pytest.raises(ValueError, match="power of two"):
        publish(src, tmp_path / "odd", block_size=5000)


# ------------------------------------------------------------------ native parsers
def test_the_publishers_faiss_file_is_never_fetched_nor_parsed(site):
    """``nearest`` over a snapshot answers as the source does, from an index rebuilt locally
    from the published (verified) vectors: the publisher's FAISS file is never requested, so
    its bytes never reach FAISS's native deserialiser.  Garbage in that file changes nothing."""
    man = site.manifest()
    faiss_refs = [ref for name, ref in man["vectors"]["files"].items() if name.endswith(".faiss")]
    assert faiss_refs, man["vectors"]["files"]
    for ref in faiss_refs:  # a hostile publisher's file (its hash no longer matches: never read)
        (site.snap / ref["file"]).write_bytes(b"\xff" * ref["bytes"])
    src = _source()
    target = {"kind": "gpu", "name": TARGET, "sm": 80}
    wl = {"family": "matmul", "M": 256, "N": 128, "K": 64}
    snap = SnapshotStore(site.url)
    try:
        got = [(n.target_name, n.workload_key) for n in snap.nearest(target, wl, k=5)]
    finally:
        snap.close()
    want = [(n.target_name, n.workload_key) for n in src.nearest(target, wl, k=5)]
    assert got == want and got
    assert not [p for p in site.requests() if p.endswith(".faiss")], site.requests()


def test_credentials_in_a_snapshot_url_are_refused_and_never_shown(capsys):
    """A snapshot URL with a user and password is refused (a snapshot is public), and neither the
    API's error nor the CLI's line shows the password."""
    url = "http://reader:S3cretPW@127.0.0.1:1/snap/"
    with pytest.raises(SnapshotError) as e:
        SnapshotStore(url)
    assert "S3cretPW" not in str(e.value) and "credentials" in _one_line(e.value)
    line = _cli_fails_in_one_line(capsys, "best", "--db", url, "--target", TARGET, "--workload", WORKLOAD)
    assert "S3cretPW" not in line


# ------------------------------------------------------------------ links in the cache
@pytest.mark.parametrize("folder", ["blocks", "derived"])
def test_a_cache_folder_that_is_a_link_is_never_written_through(site, tmp_path, capsys, folder):
    """A ``blocks/`` or ``derived/`` planted as a link to another folder: no file is written
    there, and the read ends in one line naming the link."""
    cache = tmp_path / "cache"
    cache.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, cache / folder)
    with pytest.raises(ValueError, match=f"{folder} is a symbolic link") as e:
        s = SnapshotStore(site.url, cache_dir=cache)
        s.records()
        s.cache_dir()
    _one_line(e.value)
    assert list(elsewhere.rglob("*")) == []
    cli_cache = tmp_path / "tunedb-cache" / "snapshots"
    rc, out, err = _cli(capsys, "--json", "stats", "--db", site.url)
    assert rc == 0, err  # (the CLI's own cache is clean: the same snapshot reads)
    assert not any(p.is_symlink() for p in cli_cache.rglob("*"))
