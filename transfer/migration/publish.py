"""``tunedb publish SRC OUT``: write a read-only, content-addressed snapshot of a store that any
static web server or object store serves as it is (the format: ``tunedb.index.snapshot.format``;
the reader: ``tunedb.open("https://host/path/")``, ``tunedb.index.snapshot.store``).

Any store publishes (Parquet, PostgreSQL, a layered or trusted view): what its reads return
is what the snapshot answers -- records (stale ones marked), entries, verdicts -- plus the
nearest-entry index built over its entries.  Per target the records are sorted and cut into
content-defined parts at workload boundaries, each target's part list is a file of its own
(``targets/<sha256>.json``), and every file is named by its sha256, so publishing again after a
change rewrites only the parts that changed, the part lists of their targets and the (small)
manifest:
``since`` (a previous snapshot directory; by default OUT's own current snapshot) is where
unchanged parts are found -- by a hash of their rows, before any encoding -- and taken from
(hard-linked or copied when it is another directory).  Files of older snapshots are never
deleted (readers of the old manifest may still be fetching them).

A file already in OUT (or in ``since``) is reused only when its content still hashes to its
name: a damaged file of the right size is rewritten (``files_repaired`` counts them; a damaged
file in ``since`` is not taken).  Each manifest carries ``version``: 1 for the first snapshot in
OUT, the previous one's (OUT's or ``since``'s, the higher) + 1 on every republish, and the time
it was ``published``: readers refuse a signed manifest older than one they have read (a
rollback), and warn about an older unsigned one (anyone could have forged its version).

Left out: run summaries (always), and the private record fields ``session``, ``host`` and
``origin`` unless ``all_fields`` (the manifest's ``fields`` lists what is carried).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tunedb.index.contract.base import RecordStore
from tunedb.index.model.keys import canonical_json
from tunedb.index.model.schema import RECORD_SCHEMA
from tunedb.index.snapshot import format as fmt
from tunedb.index.support.fsutil import atomic_write_bytes
from tunedb.transfer.migration.copy import resolve_targets

_PUBLISHER_RE = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_SORT = [("workload_key", "ascending"), ("config_key", "ascending"), ("committed", "ascending"),
         ("record_id", "ascending")]


def default_publisher() -> str:
    """This machine's host name, as a publisher name (``[A-Za-z0-9_.-]+``)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", socket.gethostname()).strip("-")
    return name or "tunedb"


def check_publisher(name: str) -> str:
    if not isinstance(name, str) or not _PUBLISHER_RE.fullmatch(name):
        raise ValueError(f"publisher name {name!r:.80}: use up to 128 letters, digits, '_', '.' and '-' (it becomes the "
                         "records' source imported:<publisher>)")
    return name


class _Out:
    """The snapshot directory being written: content-addressed files, counted."""

    def __init__(self, out: Path, since: Path | None, block_size: int) -> None:
        self.out, self.since, self.bs = out, since, block_size
        self.written = self.reused = self.copied = 0
        self.files_written = self.files_reused = 0
        self.repaired: set[str] = set()  # files of OUT whose content no longer matched their name
        self.refs: dict[str, dict] = {}

    def put(self, folder: str, data: bytes, ext: str) -> dict:
        name = fmt.content_name(folder, data, ext)
        ref = fmt.file_ref(name, data, self.bs)
        if not self.reuse(ref):
            _write(self.out / name, data)
            self.written += len(data)
            self.files_written += 1
            self.refs[name] = ref
        return ref

    def reuse(self, ref: dict) -> bool:
        """Take a file of a previous snapshot as it is (True), or False when it is not there
        intact: its size and its sha256 are checked (a damaged file in OUT is noted in
        :attr:`repaired`; the caller writes it again)."""
        if ref["file"] in self.refs:
            return True
        path = self.out / ref["file"]
        if path.is_file() and path.stat().st_size == ref["bytes"] and _file_sha256(path) == ref["sha256"]:
            self.reused += ref["bytes"]
            self.files_reused += 1
        elif path.exists() and path.name not in self.repaired and self._damaged(path):
            self.repaired.add(path.name)
            return False
        elif self.since is not None and (self.since / ref["file"]).is_file():
            src = self.since / ref["file"]
            if src.stat().st_size != ref["bytes"] or _file_sha256(src) != ref["sha256"]:
                return False
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"_tmp-{uuid.uuid4().hex[:12]}")
            try:
                try:
                    os.link(src, tmp)
                except OSError:
                    shutil.copyfile(src, tmp)
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
            self.copied += ref["bytes"]
            self.files_reused += 1
        else:
            return False
        self.refs[ref["file"]] = ref
        return True

    @staticmethod
    def _damaged(path: Path) -> bool:
        """Whether ``path`` (a content-addressed file of OUT) does not hash to its name."""
        try:
            return path.is_dir() or _file_sha256(path) != path.name.split(".", 1)[0]
        except OSError:
            return True


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, data)


def _write_manifest(path: Path, data: bytes) -> None:
    """Replace the manifest (one rename: a signed one and its signature change together).  A
    new manifest gets a modification time in a later second than the one it replaces: a static
    server's ETag (nginx: seconds of mtime and size) then changes even when the new manifest is
    as long as the old one, so readers revalidating with If-None-Match see it."""
    try:
        old = path.stat().st_mtime
    except OSError:
        old = None
    _write(path, data)
    if old is not None and int(path.stat().st_mtime) <= int(old):
        t = int(old) + 1
        os.utime(path, (t, t))


def _previous(path: Path | None) -> dict | None:
    """The manifest of the snapshot in directory ``path``, or None (no snapshot there, or one of
    another format version)."""
    if path is None or not (path / fmt.MANIFEST).is_file():
        return None
    try:
        return fmt.check_manifest(json.loads((path / fmt.MANIFEST).read_bytes()), str(path / fmt.MANIFEST))
    except (ValueError, RecursionError, fmt.SnapshotError):
        return None


def _previous_version(path: Path | None) -> int:
    """The ``version`` of the snapshot in directory ``path`` (of any format version), 0 when
    there is none or it has none."""
    if path is None:
        return 0
    try:
        v = json.loads((path / fmt.MANIFEST).read_bytes()).get("version")
    except (OSError, ValueError, RecursionError, AttributeError):
        return 0
    return v if type(v) is int and 0 <= v < fmt.MAX_COUNT else 0


def _previous_parts(path: Path, tk: str, t: dict, block_size: int) -> list[dict]:
    """The part list of target ``tk`` of the snapshot in ``path`` (``[]`` when its file is
    missing or does not match the manifest's sha256)."""
    ref = t.get("parts_file") or {}
    try:
        data = (path / ref["file"]).read_bytes()
    except (OSError, KeyError, TypeError):
        return []
    if fmt.sha256(data) != ref.get("sha256"):
        return []
    try:
        return fmt.check_target_file(data, tk, str(path / ref["file"]), block_size)
    except fmt.SnapshotError:
        return []


def _holds_snapshot(path: Path) -> bool:
    """Whether directory ``path`` holds a tunedb snapshot of any format version."""
    try:
        return json.loads((path / fmt.MANIFEST).read_bytes()).get("format") == fmt.FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _rows_hash(t: pa.Table, fields: list[str], block_size: int) -> str:
    """What a part holds, cheaply: its record ids, commit times and stale flags (a record_id's
    measurement never changes), the fields carried and the format."""
    h = hashlib.sha256(json.dumps([fmt.FORMAT_VERSION, fields, block_size]).encode())
    for c in ("record_id", "committed", fmt.STALE):
        h.update(c.encode())
        col = t.column(c).combine_chunks()
        if c == "record_id":
            h.update("\n".join(col.to_pylist()).encode())
        else:
            h.update(np.asarray(col.cast(pa.int64()).to_numpy(zero_copy_only=False)).tobytes())
    return h.hexdigest()


def _target_parts(view: RecordStore, tk: str, fields: list[str], out: _Out, prev: dict[str, dict]
                  ) -> tuple[list[dict], int, int]:
    """Write target ``tk``'s parts; returns (part refs, records, stale records)."""
    t = view.records(tk)
    live = view.records(tk, include_stale=False, columns=["record_id"]).column("record_id")
    stale = pc.invert(pc.is_in(t.column("record_id"), value_set=live.combine_chunks()))
    t = t.select(fields).append_column(fmt.STALE, stale).sort_by(_SORT)
    wk = np.asarray(t.column("workload_key").to_pylist(), dtype=object)
    keys, starts, counts = np.unique(wk, return_index=True, return_counts=True)
    parts = []
    for a, b in fmt.cut_runs(list(keys), list(counts), fmt.PART_WORKLOADS, fmt.MAX_PART_ROWS):
        lo, hi = int(starts[a]), int(starts[b - 1] + counts[b - 1])
        part = t.slice(lo, hi - lo)
        rh = _rows_hash(part, fields, out.bs)
        old = prev.get(rh)
        if old is not None and out.reuse({k: old[k] for k in ("file", "bytes", "sha256", "blocks")}):
            ref = dict(old)
        else:
            ref = dict(out.put("data", fmt.parquet_bytes(part), "parquet"))
        ref.update(rows=part.num_rows, first_workload=str(keys[a]), last_workload=str(keys[b - 1]), rows_hash=rh)
        parts.append(ref)
    return parts, t.num_rows, int(pc.sum(stale.cast(pa.int64())).as_py() or 0)


def _entries_files(entries: pa.Table, out: _Out) -> list[dict]:
    if not entries.num_rows:
        return []
    entries = entries.replace_schema_metadata(None)
    tk = np.asarray(entries.column("target_key").to_pylist(), dtype=object)
    keys, counts = np.unique(tk, return_counts=True)
    refs = []
    for a, b in fmt.cut_runs(list(keys), list(counts), fmt.ENTRY_TARGETS, 1 << 30):
        chunk_keys = [str(k) for k in keys[a:b]]
        part = entries.filter(pc.is_in(entries.column("target_key"), value_set=pa.array(chunk_keys, pa.string())))
        part = part.sort_by([("target_name", "ascending"), ("workload_key", "ascending"), ("target_key", "ascending")])
        ref = dict(out.put("entries", fmt.parquet_bytes(part), "parquet"))
        ref.update(rows=part.num_rows, first_target=chunk_keys[0], last_target=chunk_keys[-1])
        refs.append(ref)
    return refs


class _Entries:
    """An EntrySource of a fixed entries table (what the nearest-entry index is built from)."""

    def __init__(self, entries: pa.Table, cache: Path) -> None:
        self._entries, self._cache = entries, cache

    def entries(self) -> pa.Table:
        return self._entries

    def cache_dir(self) -> Path:
        return self._cache

    def change_token(self) -> tuple:
        return ("publish", id(self))

    def best_costs(self, target: Any, workload: Any, k: int = 1) -> list:
        return []

    def find_target(self, name_or_key: str) -> dict | None:
        return None


def _vectors(entries: pa.Table, out: _Out) -> dict | None:
    """Build the nearest-entry index over ``entries`` and publish its files."""
    if not entries.num_rows:
        return None
    from tunedb.index.retrieval import vectors

    with tempfile.TemporaryDirectory(prefix="tunedb-publish-") as tmp:
        vectors.sync(_Entries(entries, Path(tmp)))
        d = Path(tmp) / vectors.SUBDIR
        vman = json.loads((d / vectors.MANIFEST).read_text())
        vman["written_at"] = 0
        files = {}
        for name in [p["file"] for p in vman["parts"]] + [vman["index"]["file"]]:
            files[name] = out.put("vectors", (d / name).read_bytes(), name.rsplit(".", 1)[-1])
        with vectors._CACHE_LOCK:  # (the temp directory's index is of no further use)
            vectors._CACHE.pop(str(d.resolve()), None)
    return {"manifest": vman, "files": files}


def publish(src: RecordStore, out: str | os.PathLike, *, targets: Iterable[Any] | None = None,
            trust: Any = None, since: str | os.PathLike | None = None, publisher: str | None = None,
            all_fields: bool = False, sign_key: str | os.PathLike | None = None,
            block_size: int = fmt.BLOCK_SIZE, progress: Callable[[int, int, str], None] | None = None) -> dict:
    """Write a snapshot of ``src`` (only ``targets`` when given; only records ``trust`` trusts
    when given) to directory ``out``; returns what was written (counts and bytes:
    ``bytes_written`` new, ``bytes_reused`` already in OUT, ``bytes_copied`` from ``since``;
    ``files_repaired``: files of OUT that did not match their hash, written again; ``version``:
    the new manifest's version).
    ``ValueError`` (one line, nothing written) for an unknown target, a bad publisher name,
    ``since`` that holds no snapshot or a bad key."""
    from tunedb.index.hardware.catalog import catalog_hash
    from tunedb.index.model.version import SCHEMA_VERSION, TUNEDB_VERSION
    from tunedb.index.retrieval import features
    from tunedb.index.views.trust import trusted_view

    publisher = check_publisher(publisher if publisher is not None else default_publisher())
    try:
        fmt.check_block_size(block_size, "publish")
    except fmt.SnapshotError:
        raise ValueError(f"block size must be a power of two from {fmt.MIN_BLOCK_SIZE} to {fmt.MAX_BLOCK_SIZE} "
                         f"bytes, not {block_size!r}") from None
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not _holds_snapshot(out):
        raise ValueError(f"{out} is a non-empty directory that holds no tunedb snapshot")
    since_p = Path(since) if since is not None else None
    if since_p is not None and _previous(since_p) is None:
        raise ValueError(f"--since {since}: no tunedb snapshot there ({fmt.MANIFEST} missing or unreadable)")
    view = trusted_view(src, trust)
    chosen = resolve_targets(view, targets)
    if sign_key is not None:
        from tunedb.index.snapshot.signing import sign

        sign(b"check", sign_key)  # a bad key fails before anything is written
    fields = [c for c in RECORD_SCHEMA.names if all_fields or c not in fmt.PRIVATE_FIELDS]
    prev: dict[str, dict] = {}
    for d in (since_p, out):
        m = _previous(d)
        if m is None or m.get("fields") != fields or m.get("block_size") != block_size:
            continue
        for tk, t in m["targets"].items():
            for p in _previous_parts(d, tk, t, block_size):
                if p.get("rows_hash"):
                    prev[p["rows_hash"]] = p
    out.mkdir(parents=True, exist_ok=True)
    w = _Out(out, since_p, block_size)
    man_targets: dict[str, dict] = {}
    total = stale_total = n_parts = 0
    for i, t in enumerate(chosen):
        if progress:
            progress(i, len(chosen), t["target_name"])
        parts, n, n_stale = _target_parts(view, t["target_key"], fields, w, prev)
        n_parts += len(parts)
        ref = w.put("targets", fmt.target_file_bytes(t["target_key"], parts), "json")
        man_targets[t["target_key"]] = {"target_name": t["target_name"], "target": canonical_json(t["target"]),
                                        "records": n, "stale_records": n_stale, "parts": len(parts),
                                        "parts_file": ref}
        total += n
        stale_total += n_stale
    keys = sorted(man_targets)
    ent = view.entries()
    ent = ent.filter(pc.is_in(ent.column("target_key"), value_set=pa.array(keys, pa.string()))) if keys else ent.slice(0, 0)
    entries_refs = _entries_files(ent, w)
    vec = _vectors(ent, w)
    ids = set()
    verdicts = view.verdicts()
    if verdicts:
        for tk in keys:
            ids.update(view.records(tk, columns=["record_id"]).column("record_id").to_pylist())
    vd = {rid: v for rid, v in sorted(verdicts.items()) if rid in ids}
    vref = w.put("verdicts", json.dumps(vd, sort_keys=True).encode(), "json") if vd else None
    stale_targets = [tk for tk in keys if man_targets[tk]["stale_records"]]
    version = max(_previous_version(out), _previous_version(since_p)) + 1
    man = {"format": fmt.FORMAT, "format_version": fmt.FORMAT_VERSION, "version": version,
           "schema_version": SCHEMA_VERSION,
           "tunedb_version": TUNEDB_VERSION, "catalog_version": catalog_hash(),
           "feature_version": features.FEATURE_VERSION, "publisher": publisher,
           "published": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "fields": fields, "left_out": [c for c in RECORD_SCHEMA.names if c not in fields] + ["run summaries"],
           "trust": getattr(view, "policy", None) and view.policy.text,
           "block_size": block_size, "part_workloads": fmt.PART_WORKLOADS, "max_part_rows": fmt.MAX_PART_ROWS,
           "records": total, "stale_targets": stale_targets,
           "workloads": len(set(ent.column("workload_key").to_pylist())), "entries": ent.num_rows,
           "files": len(w.refs), "size_bytes": sum(r["bytes"] for r in w.refs.values()),
           "targets": man_targets, "entries_files": entries_refs, "vectors": vec, "verdicts": vref}
    if sign_key is not None:
        from tunedb.index.snapshot.signing import sign_manifest

        man = sign_manifest(man, sign_key)
    data = fmt.manifest_bytes(man)
    _write_manifest(out / fmt.MANIFEST, data)
    (out / fmt.OLD_SIGNATURE_FILE).unlink(missing_ok=True)
    if progress:
        progress(len(chosen), len(chosen), "")
    return {"out": str(out), "publisher": publisher, "targets": len(chosen), "records": total,
            "stale_records": stale_total, "parts": n_parts,
            "files": len(w.refs), "bytes_total": man["size_bytes"], "bytes_written": w.written,
            "bytes_reused": w.reused, "bytes_copied": w.copied, "files_written": w.files_written,
            "files_reused": w.files_reused, "files_repaired": len(w.repaired), "version": version,
            "manifest_bytes": len(data), "signed": sign_key is not None,
            "fields": fields, "since": str(since_p) if since_p else None}


__all__ = ["publish", "default_publisher", "check_publisher"]
