"""The snapshot format: what ``tunedb publish`` writes and :class:`SnapshotStore` reads.

A snapshot is a directory (served as it is by a static web server or an object store)::

    manifest.json              what the snapshot holds (below); the only file that changes, replaced
                               atomically; when signed, it carries its own signature
    targets/<sha256>.json      one target's part list: each part's FileRef and workload range
    data/<sha256>.parquet      record parts: one target's records of a run of workloads
    entries/<sha256>.parquet   the entries table (``RecordStore.entries``), in chunks of targets
    vectors/<sha256>.<ext>     the nearest-entry index (entry vectors + FAISS index)
    verdicts/<sha256>.json     record_id -> verdict (only when there are verdicts)

Every file but the manifest is content-addressed (its name is the sha256 of its bytes), so it
never changes and a new snapshot reuses every file whose content did not change.  Files are
named by a :data:`FileRef`: ``{"file", "bytes", "sha256", "blocks"}``, ``blocks`` the sha256 of
each aligned ``block_size`` block (the last one shorter): a reader fetches blocks by HTTP Range
and verifies each before using it.  The manifest keeps, per target, its name, target JSON,
record counts and the FileRef of its ``targets/`` file (``parts_file``); that file (canonical
JSON: ``{"format_version", "target_key", "parts": [FileRef + rows, first_workload,
last_workload, rows_hash, ...]}``) lists the target's parts.  So the manifest stays small (no
block hashes of parts), a query of one target fetches the manifest, that target's file and its
parts, and a republish writes new ``targets/`` files only for the targets whose parts changed.
Every file is verified against the hash its (already verified) parent names: manifest ->
target file -> part.

Parts.  A target's records are sorted by (workload_key, config_key, committed, record_id) and
cut at workload boundaries chosen by the workload key itself (a workload starts a new part
when ``int(workload_key[:8], 16) % part_workloads == 0``, or when the part already holds
``max_part_rows`` rows): a change to some workloads rewrites only their parts.  Each part
says the first and last workload key it holds, so a query of one (target, workload) fetches
one part.  Parquet bytes are deterministic for the same rows (fixed writer settings below, no
timestamps).

Signature.  A signed manifest holds ``"signature": {"alg": "ed25519", "value": <base64>}``, an
ed25519 signature of :func:`signed_bytes` of the manifest: the canonical encoding (sorted keys,
no whitespace, UTF-8) of the manifest's JSON without its ``signature``.  Manifest and signature
are one file, replaced in one rename, so a reader never sees one without the other.

Versions.  ``version`` (an int, 1 for the first snapshot published into a directory, the
previous one's + 1 on every republish) and ``published`` (an ISO 8601 time) let a reader refuse
a rollback: an older manifest, even one signed with the right key, after it has read a newer
one (:mod:`tunedb.index.snapshot.store`).  A manifest without ``version`` (written before it
existed) reads as version 0.

Validation (a snapshot's publisher and the network are not trusted: a signature proves who
published a manifest, not that its content is harmless).  :func:`check_manifest` and
:func:`check_target_file` check the whole schema before anything is used, and refuse (one
:class:`SnapshotError` line naming the field) anything else:

* a content hash is exactly 64 lowercase hex digits;
* a file name is one of the fixed forms the publisher writes -- ``data/<sha256>.parquet``,
  ``targets/<sha256>.json``, ``entries/<sha256>.parquet``, ``vectors/<sha256>.parquet|faiss``,
  ``verdicts/<sha256>.json`` -- in the folder its field calls for, and its hash is the
  FileRef's ``sha256`` (:func:`check_file_ref`); so a name never holds ``..``, ``/`` at the
  start, a backslash, ``%``, NUL, a scheme or anything else that could leave the snapshot's URL
  prefix or a local directory (:data:`SAFE_NAME` is what a reader ever requests or derives a
  path from);
* ``bytes`` is an int in ``[0, MAX_FILE_BYTES]`` (a part list: ``MAX_PART_LIST_BYTES``),
  ``blocks`` a list of ``max(1, ceil(bytes / block_size))`` hashes;
* ``block_size`` is a power of two in ``[MIN_BLOCK_SIZE, MAX_BLOCK_SIZE]``;
* counts are non-negative ints (not bools, not floats) up to ``2**53``; names, keys and texts
  are strings of bounded length; a target key is a tunedb key (32 lowercase hex digits); the
  publisher name matches ``[A-Za-z0-9_.-]+``; a target's JSON is an object;
* the nearest-entry index's file names (``vectors.files`` keys, the names its manifest lists)
  are the forms that index writes (``emb-<hex>-<digits>.parquet``, ``main-<hex>.faiss``) and
  the two agree.

The manifest itself is at most ``MAX_MANIFEST_BYTES`` (the reader stops reading beyond it).
Every JSON text is parsed with the project's depth limit (:func:`load_json`).

Consistency (a hostile publisher hashes whatever it writes).  :func:`check_manifest_counts`
(after the signature is verified): each target's JSON has the target's key, ``stale_records``
and ``parts`` fit ``records``, the manifest's ``records`` is its targets' sum, ``stale_targets``
the targets with stale records, ``entries`` the entries files' rows, no entries file listed
twice.  :func:`check_target_file` with the manifest's entry: a part list's rows sum to the
target's ``records``, its parts number ``parts``, each part holds at least one row, workload
keys are tunedb keys, the parts in workload order without overlap and none listed twice.  A
contradiction is a :class:`SnapshotContentError` (a ``ValueError`` too).  The parts themselves
are checked when fetched (:mod:`tunedb.index.snapshot.consistency`).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Sequence
from typing import Any

from tunedb.index.model.keys import key_of_text
from tunedb.index.support.jsontext import loads as json_loads
from tunedb.index.support.jsontext import too_deep

FORMAT = "tunedb-snapshot"
FORMAT_VERSION = 3
MANIFEST = "manifest.json"
#: the manifest's key holding its signature (of every other key: :func:`signed_bytes`)
SIGNATURE = "signature"
#: the file that held the signature in format version 1 (publish removes it)
OLD_SIGNATURE_FILE = "manifest.json.sig"

#: bytes of a verified block (the manifest says which size a snapshot uses)
BLOCK_SIZE = 1 << 20
#: the block sizes a snapshot may use (a power of two in this range)
MIN_BLOCK_SIZE = 1 << 10
MAX_BLOCK_SIZE = 1 << 26
#: the largest manifest a reader reads (bytes)
MAX_MANIFEST_BYTES = 8 << 20
#: the largest part list (``targets/`` file) a manifest may name
MAX_PART_LIST_BYTES = 16 << 20
#: the largest other file a manifest or part list may name (a reader holds an entries, verdicts
#: or index file whole)
MAX_FILE_BYTES = 1 << 32
#: the largest count a manifest may state
MAX_COUNT = 1 << 53
#: the folders of content-addressed files and the extensions each holds
FOLDERS: dict[str, tuple[str, ...]] = {"data": ("parquet",), "targets": ("json",), "entries": ("parquet",),
                                       "vectors": ("parquet", "faiss"), "verdicts": ("json",)}
#: every name a reader requests from a snapshot or derives a cache path from
SAFE_NAME = re.compile(r"manifest\.json|(?:data|targets|entries|vectors|verdicts)/[0-9a-f]{64}\.(?:parquet|json|faiss)")
#: the nearest-entry index's file names (what ``tunedb.index.retrieval.vectors`` writes)
VECTOR_FILE = re.compile(r"emb-[0-9a-f]{1,32}-[0-9]{1,9}\.parquet|main-[0-9a-f]{1,32}\.faiss")
#: average workloads per part (the content-defined cut rule).  1: a part per (target, workload),
#: so new records of a workload rewrite that workload's part only (bench_publish.py: a republish
#: after 1 % new records spread over 1 % of every target's entries writes 2.5 % of the bytes with
#: 1, 3.7 % with 2, 9.2 % with 8), at the price of a larger snapshot (each part has its own
#: Parquet footer and dictionaries: 186 MB with 1, 132 MB with 2, 85 MB with 8, for 1M records)
PART_WORKLOADS = 1
#: a part holding this many rows ends at the next workload boundary
MAX_PART_ROWS = 50_000
#: average targets per entries chunk
ENTRY_TARGETS = 8

#: record columns left out unless asked for (who measured where; the imported files' paths)
PRIVATE_FIELDS = ("session", "host", "origin")
#: the per-record column a part adds to the record columns: stale in the published DB
STALE = "stale"

#: fixed Parquet writer settings: the same rows give the same bytes
PARQUET_OPTIONS: dict[str, Any] = {"compression": "zstd", "compression_level": 3, "use_dictionary": True,
                                   "write_statistics": True, "row_group_size": 8192, "data_page_size": 1 << 20,
                                   "version": "2.6", "store_schema": True}


class SnapshotError(OSError):
    """A snapshot could not be read: unreachable, a missing or tampered file, a bad signature.
    Its text is one line."""


class SnapshotContentError(SnapshotError, ValueError):
    """A snapshot file whose bytes match their hash but whose content is refused: it contradicts
    the manifest or its part list (row counts, workload ranges, targets, totals, a part listed
    twice), holds a status outside the schema, or JSON nested deeper than
    ``tunedb.index.model.keys.MAX_JSON_DEPTH``.  Both a :class:`SnapshotError` and a
    ``ValueError``; its text is one line naming the file (and the part)."""


def load_json(data: bytes | str, where: str, what: str = "JSON") -> Any:
    """``data`` (a snapshot file's bytes or a text field) decoded as JSON, with the project's
    depth limit (``tunedb.index.support.jsontext.loads``): SnapshotError (one line naming
    ``where``) for bytes that are not UTF-8 JSON, :class:`SnapshotContentError` for JSON nested
    too deep -- never ``RecursionError``."""
    label = f"{where}: {what}"
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
        return json_loads(text, label)
    except ValueError as e:  # (UnicodeDecodeError and JSONDecodeError are ValueErrors)
        if str(e) == str(too_deep(label)):
            raise SnapshotContentError(f"{e}: refused") from None
        raise SnapshotError(f"{where}: {what} is not JSON: refused") from None


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def block_hashes(data: bytes, block_size: int) -> list[str]:
    return [sha256(data[i:i + block_size]) for i in range(0, max(len(data), 1), block_size)]


def file_ref(name: str, data: bytes, block_size: int) -> dict:
    """The manifest's description of a content-addressed file ``name`` holding ``data``."""
    return {"file": name, "bytes": len(data), "sha256": sha256(data), "blocks": block_hashes(data, block_size)}


def content_name(folder: str, data: bytes, ext: str) -> str:
    return f"{folder}/{sha256(data)}.{ext}"


def parquet_bytes(table: Any) -> bytes:
    """``table`` as Parquet with :data:`PARQUET_OPTIONS` (no metadata that varies between runs)."""
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(table.replace_schema_metadata(None), sink, **PARQUET_OPTIONS)
    return sink.getvalue()


def starts_part(workload_key: str, part_workloads: int) -> bool:
    """Whether a workload begins a new part (the content-defined cut rule)."""
    return int(workload_key[:8], 16) % part_workloads == 0


def starts_chunk(target_key: str, entry_targets: int) -> bool:
    return int(target_key[:8], 16) % entry_targets == 0


def cut_runs(keys: Sequence[str], counts: Sequence[int], every: int, max_rows: int) -> list[tuple[int, int]]:
    """Runs ``[i, j)`` of the sorted distinct ``keys`` (with ``counts`` rows each) that form parts:
    a key starts a new run when the cut rule says so or the run holds ``max_rows`` rows."""
    runs: list[tuple[int, int]] = []
    start, rows = 0, 0
    for i, (k, n) in enumerate(zip(keys, counts)):
        if i > start and (int(k[:8], 16) % every == 0 or rows >= max_rows):
            runs.append((start, i))
            start, rows = i, 0
        rows += n
    if keys:
        runs.append((start, len(keys)))
    return runs


def canonical_bytes(doc: Any) -> bytes:
    """``doc`` as canonical JSON: sorted keys, no whitespace, UTF-8 (the same document gives the
    same bytes, however its file was laid out)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def manifest_bytes(manifest: dict) -> bytes:
    """The bytes of ``manifest.json``: the canonical encoding and a newline."""
    return canonical_bytes(manifest) + b"\n"


def signed_bytes(manifest: dict) -> bytes:
    """What a manifest's signature signs: the canonical encoding of the manifest without its
    :data:`SIGNATURE` key."""
    return canonical_bytes({k: v for k, v in manifest.items() if k != SIGNATURE})


_HEX64 = re.compile(r"[0-9a-f]{64}")
_TARGET_KEY = re.compile(r"[0-9a-f]{32}")
_PUBLISHER = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_MAX_TEXT = 4096


def _show(value: Any) -> str:
    """A short, printable rendering of a (hostile) value for an error line."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bad(where: str, field: str, what: str) -> SnapshotError:
    return SnapshotError(f"{where}: {field} {what}: refused")


def is_sha256(value: Any) -> bool:
    """Whether ``value`` is a content hash: exactly 64 lowercase hex digits."""
    return isinstance(value, str) and _HEX64.fullmatch(value) is not None


def _int(value: Any, where: str, field: str, lo: int = 0, hi: int = MAX_COUNT) -> int:
    if type(value) is not int or not lo <= value <= hi:
        raise _bad(where, field, f"is {_show(value)}, not an integer in [{lo}, {hi}]")
    return value


def _text(value: Any, where: str, field: str, limit: int = _MAX_TEXT) -> str:
    if not isinstance(value, str) or len(value) > limit or "\x00" in value:
        raise _bad(where, field, f"is {_show(value)}, not a string of at most {limit} characters")
    return value


def _texts(value: Any, where: str, field: str) -> list[str]:
    if not isinstance(value, list) or len(value) > 10_000:
        raise _bad(where, field, f"is {_show(value)}, not a list of strings")
    for i, v in enumerate(value):
        _text(v, where, f"{field}[{i}]", 256)
    return value


def check_block_size(value: Any, where: str) -> int:
    """``value`` if it is a block size a snapshot may use (a power of two in
    [MIN_BLOCK_SIZE, MAX_BLOCK_SIZE]); else SnapshotError naming ``block_size``."""
    if type(value) is not int or not MIN_BLOCK_SIZE <= value <= MAX_BLOCK_SIZE or value & (value - 1):
        raise _bad(where, "block_size", f"is {_show(value)}, not a power of two in [{MIN_BLOCK_SIZE}, {MAX_BLOCK_SIZE}]")
    return value


def check_file_ref(ref: Any, folder: str, block_size: int, where: str, field: str,
                   max_bytes: int = MAX_FILE_BYTES) -> dict:
    """``ref`` if it is a FileRef of a file in ``folder`` (see the module docstring: the name's
    form and hash, ``bytes`` under ``max_bytes``, one 64-hex block hash per ``block_size``
    block); else SnapshotError (one line naming ``field``)."""
    if not isinstance(ref, dict):
        raise _bad(where, field, f"is {_show(ref)}, not a file reference")
    digest = ref.get("sha256")
    if not is_sha256(digest):
        raise _bad(where, f"{field}.sha256", f"is {_show(digest)}, not 64 lowercase hex digits")
    name = ref.get("file")
    exts = FOLDERS[folder]
    if not isinstance(name, str) or name not in {f"{folder}/{digest}.{ext}" for ext in exts}:
        raise _bad(where, f"{field}.file", f"is {_show(name)}, not {folder}/<its sha256>.{'|'.join(exts)}")
    size = _int(ref.get("bytes"), where, f"{field}.bytes", 0, max_bytes)
    blocks = ref.get("blocks")
    n = max(1, -(-size // block_size))
    if not isinstance(blocks, list) or len(blocks) != n or not all(is_sha256(b) for b in blocks):
        raise _bad(where, f"{field}.blocks", f"is not a list of {n} block hashes (64 lowercase hex digits)")
    return ref


def check_manifest(man: Any, where: str) -> dict:
    """``man`` (decoded JSON) if it is a snapshot manifest this tunedb reads and every field is
    well-formed (see the module docstring); else SnapshotError (one line naming the field)."""
    if not isinstance(man, dict) or man.get("format") != FORMAT:
        raise SnapshotError(f"{where} is not a tunedb snapshot manifest")
    if man.get("format_version") != FORMAT_VERSION or type(man.get("format_version")) is not int:
        raise SnapshotError(f"{where}: snapshot format version {_show(man.get('format_version'))}, and this tunedb "
                            f"reads version {FORMAT_VERSION} only: republish it with this tunedb, or read it with "
                            f"the tunedb that wrote it")
    if not isinstance(man.get("targets"), dict) or "block_size" not in man:
        raise SnapshotError(f"{where}: manifest lacks targets or block_size")
    bs = check_block_size(man["block_size"], where)
    if "version" in man:
        _int(man["version"], where, "version")
    for k in ("published", "tunedb_version", "catalog_version"):
        if man.get(k) is not None:
            _text(man[k], where, k, 256)
    for k in ("schema_version", "feature_version"):
        if man.get(k) is not None and not isinstance(man[k], (int, str)) or isinstance(man.get(k), bool):
            raise _bad(where, k, f"is {_show(man[k])}, not a version")
    if man.get("trust") is not None:
        _text(man["trust"], where, "trust")
    pub = man.get("publisher")
    if not isinstance(pub, str) or not _PUBLISHER.fullmatch(pub):
        raise _bad(where, "publisher", f"is {_show(pub)}, not a name of [A-Za-z0-9_.-]")
    for k in ("records", "workloads", "entries", "files", "size_bytes"):
        if k in man:
            _int(man[k], where, k)
    for k in ("part_workloads", "max_part_rows"):
        if k in man:
            _int(man[k], where, k, 1)
    for k in ("fields", "left_out"):
        if k in man:
            _texts(man[k], where, k)
    for tk, t in man["targets"].items():
        field = f"targets[{_show(tk)}]"
        if not _TARGET_KEY.fullmatch(tk):
            raise _bad(where, field, "is not a target key (32 lowercase hex digits)")
        if not isinstance(t, dict) or not isinstance(t.get("parts_file"), dict):
            raise SnapshotError(f"{where}: target {_show(tk)} lacks its parts file")
        check_file_ref(t["parts_file"], "targets", bs, where, f"{field}.parts_file", MAX_PART_LIST_BYTES)
        _text(t.get("target_name"), where, f"{field}.target_name", 1024)
        text = _text(t.get("target"), where, f"{field}.target", 1 << 16)
        if not isinstance(load_json(text, where, f"{field}.target"), dict):
            raise _bad(where, f"{field}.target", "is not the JSON of an object")
        for k in ("records", "stale_records", "parts"):
            if k in t or k == "records":
                _int(t.get(k), where, f"{field}.{k}")
    stale = man.get("stale_targets", [])
    if not isinstance(stale, list) or not all(isinstance(tk, str) and tk in man["targets"] for tk in stale):
        raise _bad(where, "stale_targets", "is not a list of the manifest's target keys")
    ents = man.get("entries_files")
    if ents is not None:
        if not isinstance(ents, list):
            raise _bad(where, "entries_files", f"is {_show(ents)}, not a list")
        for i, ref in enumerate(ents):
            check_file_ref(ref, "entries", bs, where, f"entries_files[{i}]")
            if "rows" in ref:
                _int(ref["rows"], where, f"entries_files[{i}].rows")
            for k in ("first_target", "last_target"):
                if k in ref:
                    _text(ref[k], where, f"entries_files[{i}].{k}", 256)
    if man.get("verdicts") is not None:
        check_file_ref(man["verdicts"], "verdicts", bs, where, "verdicts")
    if man.get("vectors") is not None:
        _check_vectors(man["vectors"], bs, where)
    return man


def _inconsistent(where: str, field: str, what: str) -> SnapshotContentError:
    return SnapshotContentError(f"{where}: {field} {what}: refused (the snapshot contradicts itself)")


def check_manifest_counts(man: dict, where: str) -> dict:
    """``man`` (a manifest :func:`check_manifest` accepted) if it agrees with itself: each
    target's JSON has the target's key, its counts agree (:func:`_check_target_counts`), the
    totals are its targets' sums and the entries files are listed once each, in order; else
    :class:`SnapshotContentError` (one line naming the field).  (Checked after the signature, so
    a manifest altered after signing reads as that.)"""
    for tk, t in man["targets"].items():
        field = f"targets[{_show(tk)}]"
        if key_of_text(t["target"]) != tk:
            raise _inconsistent(where, f"{field}.target", "is the JSON of another target (its key is not the "
                                "target's key)")
        _check_target_counts(t, where, field)
    _check_manifest_totals(man, where)
    if man.get("entries_files") is not None:
        _check_entries_refs(man, where)
    return man


def _check_target_counts(t: dict, where: str, field: str) -> None:
    """A manifest target's counts agree with each other: ``stale_records <= records``, ``parts
    <= records`` and a target holds parts exactly when it holds records."""
    records = t["records"]
    if t.get("stale_records", 0) > records:
        raise _inconsistent(where, f"{field}.stale_records", f"is {t['stale_records']}, more than its {records} records")
    if "parts" in t and (t["parts"] > records or (t["parts"] == 0) != (records == 0)):
        raise _inconsistent(where, f"{field}.parts", f"is {t['parts']} for {records} records")


def _check_manifest_totals(man: dict, where: str) -> None:
    """The manifest's totals are the sums of its targets': ``records``, and ``stale_targets``
    are the targets with stale records (when the targets say how many)."""
    targets = man["targets"]
    if "records" in man:
        total = sum(t["records"] for t in targets.values())
        if man["records"] != total:
            raise _inconsistent(where, "records", f"is {man['records']}, but its targets hold {total}")
    if all("stale_records" in t for t in targets.values()):
        want = {tk for tk, t in targets.items() if t["stale_records"]}
        if set(man.get("stale_targets", [])) != want or len(man.get("stale_targets", [])) != len(want):
            raise _inconsistent(where, "stale_targets", "are not the targets with stale records")


def _check_entries_refs(man: dict, where: str) -> None:
    """The entries files: none listed twice, each chunk's ``first_target``/``last_target`` in
    order, after the previous chunk's and targets of the manifest; their ``rows`` sum to the
    manifest's ``entries`` (when every file says its rows)."""
    refs = man["entries_files"]
    seen: set[str] = set()
    last = ""
    for i, ref in enumerate(refs):
        field = f"entries_files[{i}]"
        if ref["file"] in seen:
            raise _inconsistent(where, field, f"lists {ref['file']} a second time")
        seen.add(ref["file"])
        first, end = ref.get("first_target"), ref.get("last_target")
        if first is None or end is None:
            continue
        if not first <= end or first <= last or first not in man["targets"] or end not in man["targets"]:
            raise _inconsistent(where, field, "has a target range out of order or outside the manifest's targets")
        last = end
    if "entries" in man and refs and all("rows" in r for r in refs):
        total = sum(r["rows"] for r in refs)
        if total != man["entries"]:
            raise _inconsistent(where, "entries", f"is {man['entries']}, but its entries files hold {total} rows")


def _check_vectors(vec: Any, bs: int, where: str) -> None:
    """The manifest's ``vectors``: ``{"manifest": <the index's manifest>, "files": {name: FileRef}}``,
    every name one the index writes, the names the index's manifest lists exactly the files'."""
    if not isinstance(vec, dict) or not isinstance(vec.get("manifest"), dict) or not isinstance(vec.get("files"), dict):
        raise _bad(where, "vectors", "is not {manifest, files}")
    vman = vec["manifest"]
    parts, index = vman.get("parts"), vman.get("index")
    if not isinstance(parts, list) or not isinstance(index, dict) or not all(isinstance(p, dict) for p in parts):
        raise _bad(where, "vectors.manifest", "lacks its parts or index")
    named = [p.get("file") for p in parts] + [index.get("file")]
    for i, name in enumerate(named):
        if not isinstance(name, str) or not VECTOR_FILE.fullmatch(name):
            raise _bad(where, f"vectors.manifest file {i}", f"is {_show(name)}, not a nearest-entry index file name")
    for name, ref in vec["files"].items():
        if not VECTOR_FILE.fullmatch(name):
            raise _bad(where, "vectors.files", f"names {_show(name)}, not a nearest-entry index file name")
        ref = check_file_ref(ref, "vectors", bs, where, f"vectors.files[{_show(name)}]")
        if ref["file"].rsplit(".", 1)[1] != name.rsplit(".", 1)[1]:
            raise _bad(where, f"vectors.files[{_show(name)}].file", "has another extension than its name")
    if set(named) != set(vec["files"]):
        raise _bad(where, "vectors.files", "are not the files the index's manifest names")


def target_file_bytes(target_key: str, parts: list[dict]) -> bytes:
    """The bytes of a target's ``targets/`` file (canonical JSON: the same parts, the same file)."""
    return canonical_bytes({"format_version": FORMAT_VERSION, "target_key": target_key, "parts": parts}) + b"\n"


def check_target_file(data: bytes, target_key: str, where: str, block_size: int,
                      target: dict | None = None) -> list[dict]:
    """The part list of a target file (already verified against its sha256) when it is
    well-formed: each part a FileRef of ``data/`` (blocks counted with ``block_size``) with
    ``rows`` (at least 1) and the first and last workload key it holds (tunedb keys), the parts
    in workload order without overlap, none listed twice; else SnapshotError (one line naming
    the field).  With ``target`` (the manifest's entry of ``target_key``): the parts' rows sum
    to its ``records`` and their number is its ``parts``, else :class:`SnapshotContentError`."""
    doc = load_json(data, where, "part list")
    if not isinstance(doc, dict) or doc.get("target_key") != target_key or not isinstance(doc.get("parts"), list):
        raise SnapshotError(f"{where} is not the part list of target {target_key}: refused")
    if doc.get("format_version", FORMAT_VERSION) != FORMAT_VERSION:
        raise _inconsistent(where, "format_version", f"is {_show(doc['format_version'])}, and the manifest's is "
                            f"{FORMAT_VERSION}")
    bs = check_block_size(block_size, where)
    files: set[str] = set()
    previous = ""
    for i, p in enumerate(doc["parts"]):
        field = f"parts[{i}]"
        check_file_ref(p, "data", bs, where, field)
        _int(p.get("rows"), where, f"{field}.rows", 1)
        first = _text(p.get("first_workload"), where, f"{field}.first_workload", 256)
        last = _text(p.get("last_workload"), where, f"{field}.last_workload", 256)
        for k, v in (("first_workload", first), ("last_workload", last)):
            if not _TARGET_KEY.fullmatch(v):
                raise _bad(where, f"{field}.{k}", f"is {_show(v)}, not a workload key (32 lowercase hex digits)")
        if first > last:
            raise _bad(where, field, "has its first workload after its last")
        if p["file"] in files:
            raise _inconsistent(where, f"{field} ({p['file']})", "is listed a second time")
        if first <= previous:
            raise _inconsistent(where, f"{field} ({p['file']})", "holds workloads of the part before it (the "
                                "parts are not in workload order)")
        files.add(p["file"])
        previous = last
        if p.get("rows_hash") is not None and not is_sha256(p["rows_hash"]):
            raise _bad(where, f"{field}.rows_hash", "is not 64 lowercase hex digits")
    if target is not None:
        _check_part_totals(doc["parts"], target, where)
    return doc["parts"]


def _check_part_totals(parts: list[dict], target: dict, where: str) -> None:
    """A part list agrees with its manifest entry: the parts' rows sum to ``records``, their
    number is ``parts`` (when the manifest says)."""
    rows = sum(p["rows"] for p in parts)
    if rows != target.get("records"):
        raise _inconsistent(where, "parts", f"hold {rows} rows, and the manifest says the target holds "
                            f"{target.get('records')} records")
    if "parts" in target and len(parts) != target["parts"]:
        raise _inconsistent(where, "parts", f"are {len(parts)}, and the manifest says {target['parts']}")


__all__ = ["SnapshotContentError", "load_json", "FORMAT", "FORMAT_VERSION", "MANIFEST", "SIGNATURE", "OLD_SIGNATURE_FILE", "BLOCK_SIZE", "MIN_BLOCK_SIZE",
           "MAX_BLOCK_SIZE", "MAX_MANIFEST_BYTES", "MAX_PART_LIST_BYTES", "MAX_FILE_BYTES", "MAX_COUNT", "FOLDERS",
           "SAFE_NAME", "VECTOR_FILE", "is_sha256", "check_block_size", "check_file_ref", "PART_WORKLOADS",
           "MAX_PART_ROWS",
           "ENTRY_TARGETS", "PRIVATE_FIELDS", "STALE", "PARQUET_OPTIONS", "SnapshotError", "sha256",
           "block_hashes", "file_ref", "content_name", "parquet_bytes", "starts_part", "starts_chunk", "cut_runs",
           "canonical_bytes", "manifest_bytes", "signed_bytes", "check_manifest", "check_manifest_counts", "target_file_bytes",
           "check_target_file"]
