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
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Sequence
from typing import Any

FORMAT = "tunedb-snapshot"
FORMAT_VERSION = 3
MANIFEST = "manifest.json"
#: the manifest's key holding its signature (of every other key: :func:`signed_bytes`)
SIGNATURE = "signature"
#: the file that held the signature in format version 1 (publish removes it)
OLD_SIGNATURE_FILE = "manifest.json.sig"

#: bytes of a verified block (the manifest says which size a snapshot uses)
BLOCK_SIZE = 1 << 20
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


def check_manifest(man: Any, where: str) -> dict:
    """``man`` (decoded JSON) if it is a snapshot manifest this tunedb reads; else SnapshotError."""
    if not isinstance(man, dict) or man.get("format") != FORMAT:
        raise SnapshotError(f"{where} is not a tunedb snapshot manifest")
    if man.get("format_version") != FORMAT_VERSION:
        raise SnapshotError(f"{where}: snapshot format version {man.get('format_version')!r}, and this tunedb "
                            f"reads version {FORMAT_VERSION} only: republish it with this tunedb, or read it with "
                            f"the tunedb that wrote it")
    if not isinstance(man.get("targets"), dict) or not isinstance(man.get("block_size"), int):
        raise SnapshotError(f"{where}: manifest lacks targets or block_size")
    for tk, t in man["targets"].items():
        ref = t.get("parts_file") if isinstance(t, dict) else None
        if not isinstance(ref, dict) or not {"file", "bytes", "sha256", "blocks"} <= set(ref):
            raise SnapshotError(f"{where}: target {tk} lacks its parts file")
    return man


def target_file_bytes(target_key: str, parts: list[dict]) -> bytes:
    """The bytes of a target's ``targets/`` file (canonical JSON: the same parts, the same file)."""
    return canonical_bytes({"format_version": FORMAT_VERSION, "target_key": target_key, "parts": parts}) + b"\n"


def check_target_file(data: bytes, target_key: str, where: str) -> list[dict]:
    """The part list of a target file (already verified against its sha256); else SnapshotError."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        doc = None
    if not isinstance(doc, dict) or doc.get("target_key") != target_key or not isinstance(doc.get("parts"), list):
        raise SnapshotError(f"{where} is not the part list of target {target_key}: refused")
    return doc["parts"]


__all__ = ["FORMAT", "FORMAT_VERSION", "MANIFEST", "SIGNATURE", "OLD_SIGNATURE_FILE", "BLOCK_SIZE", "PART_WORKLOADS", "MAX_PART_ROWS",
           "ENTRY_TARGETS", "PRIVATE_FIELDS", "STALE", "PARQUET_OPTIONS", "SnapshotError", "sha256",
           "block_hashes", "file_ref", "content_name", "parquet_bytes", "starts_part", "starts_chunk", "cut_runs",
           "canonical_bytes", "manifest_bytes", "signed_bytes", "check_manifest", "target_file_bytes",
           "check_target_file"]
