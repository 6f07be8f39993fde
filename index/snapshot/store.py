"""A published snapshot read as a read-only record store: ``tunedb.open("https://host/path/")``.

Opening fetches (or revalidates, with If-None-Match) the manifest and nothing else.  A query
that names a target fetches only that target's part list (its ``targets/`` file) and its parts
-- one part when it names a workload too (the part list says which workloads each part holds)
-- through verified blocks
(:mod:`tunedb.index.snapshot.remote`); ``entries()``, the nearest-entry index and the verdicts
are fetched once, when first needed.  Everything fetched stays in the cache directory, so a
later process answers the same queries without the network, and an unreachable server means
"offline": the cached manifest answers (a warning says so; :attr:`SnapshotStore.offline`).

Nothing the server sends is trusted (a hostile publisher signs what it serves; a network
attacker can answer for an ``http://`` server): the manifest and every part list are validated
in full before use (``format.check_manifest``, ``format.check_target_file``: fixed file-name
forms, 64-hex hashes, bounded sizes and counts), requests and cache paths are derived from
validated hashes only, every request is bounded in time and size and never follows a redirect
(:mod:`tunedb.index.snapshot.remote`), and a signed manifest older than one already read from the
same URL (its ``version``) is refused as a rollback (:mod:`tunedb.index.snapshot.rollback`).
Every file fetched is checked against the part list and manifest that name it before anything
is answered (:mod:`tunedb.index.snapshot.consistency`: row counts, workload ranges, the target
of every row, statuses, keys, totals where everything needed was fetched): a contradiction is
one :class:`~tunedb.index.snapshot.format.SnapshotContentError` line (a ``ValueError`` too)
naming the file.  ``len()`` and ``stats()`` answer from the manifest, whose totals agree with
its targets' counts (checked at open); those counts are checked against a target's part list
and parts when they are fetched.  The
nearest-entry index's vectors are installed under names the index itself writes (checked), never
under a name the manifest makes up; its FAISS file is never fetched (the index is rebuilt from the
vectors).  Every refusal is one :class:`SnapshotError` line.

Answers are the published DB's (the contract's reads: lookup, best, entry_records, records,
entries, targets, nearest, verdicts, stale records), except that each record carries its
publisher as ``source`` (``imported:<publisher>``; its own source goes into ``origin``:
``"<url> (<source>)"``), so ``--trust imported:<publisher>`` and ``tunedb verify`` treat the
published records as what they are: other people's claims.  ``relabel=False`` keeps the
records' own sources.  Fields the publisher left out (``session``, ``host``, ``origin`` by
default: see the manifest's ``fields``) read as ``""``.  Every write raises ``ValueError``.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from tunedb.index.contract.base import RecordStore, StoreStats
from tunedb.index.contract.checks import check_columns, check_runs_query
from tunedb.index.retrieval.mixin import RetrievalMixin
from tunedb.index.snapshot.consistency import (
    check_entries_file,
    check_entries_totals,
    check_part_footer,
    check_part_rows,
    check_target_rows,
    check_verdicts,
)
from tunedb.index.snapshot.format import (
    MANIFEST,
    STALE,
    VECTOR_FILE,
    SnapshotError,
    check_block_size,
    check_manifest,
    check_manifest_counts,
    check_target_file,
    load_json,
    sha256,
)
from tunedb.index.snapshot.remote import DEFAULT_TIMEOUT, Remote, atomic_write
from tunedb.index.snapshot.rollback import accept_version, default_state_file
from tunedb.index.support.cachedir import cache_root
from tunedb.index.support.fsutil import check_no_links

if TYPE_CHECKING:
    from tunedb.index.model.batch import RecordBatch
    from tunedb.index.model.record import Record


def default_cache(url: str) -> Path:
    """``$TUNEDB_CACHE_DIR/snapshots/<hash of url>`` (default ``~/.cache/tunedb/...``)."""
    return cache_root() / "snapshots" / hashlib.blake2b(url.encode(), digest_size=10).hexdigest()


class SnapshotStore(RetrievalMixin, RecordStore):
    """A read-only store over a published snapshot at ``url`` (see the module docstring).

    ``cache_dir``: where fetched files are kept (default :func:`default_cache`);
    ``publisher_key``: an ed25519 public key (PEM file path or text): unsigned or wrongly
    signed snapshots are refused; ``timeout``: seconds (or (connect, read)) for a connection and
    one read; ``deadline``: seconds one request may take in all, ``total_deadline``: seconds of
    network time for this handle (``math.inf``: none), ``max_manifest_bytes``: the largest
    manifest read (defaults and environment variables: :mod:`tunedb.index.snapshot.remote`);
    ``pin_version``: read this (older) snapshot version on purpose although a newer one was read
    before; ``state_file``: where the highest versions read are kept (default
    :func:`~tunedb.index.snapshot.rollback.default_state_file`); ``relabel``: records carry their
    publisher as source (default True).  ``create``, ``read_only`` are accepted and ignored (a
    snapshot is always read-only).  SnapshotError (one line) when the snapshot cannot be read,
    is malformed, wrongly signed or a rollback; ValueError for a bad option."""

    def __init__(self, url: str, *, cache_dir: str | os.PathLike | None = None, publisher_key: Any = None,
                 timeout: Any = None, deadline: float | None = None, total_deadline: float | None = None,
                 max_manifest_bytes: int | None = None, pin_version: int | None = None,
                 state_file: str | os.PathLike | None = None, relabel: bool = True, create: bool = False,
                 read_only: bool = True) -> None:
        from tunedb.index.snapshot.signing import key_fingerprint, load_public_key

        self._url = url if url.endswith("/") else url + "/"
        self._key = load_public_key(publisher_key) if publisher_key is not None else None
        self._key_id = key_fingerprint(self._key) if self._key is not None else "unsigned"
        if pin_version is not None and (type(pin_version) is not int or pin_version < 0):
            raise ValueError(f"pin_version must be a snapshot version (an int >= 0), not {pin_version!r}")
        self._pin = pin_version
        self._state = Path(state_file) if state_file is not None else default_state_file()
        self._remote = Remote(self._url, Path(cache_dir) if cache_dir else default_cache(self._url),
                              timeout=timeout or DEFAULT_TIMEOUT, deadline=deadline, total_deadline=total_deadline,
                              max_manifest_bytes=max_manifest_bytes)
        self._relabel = relabel
        self._lock = threading.RLock()
        self.lookups = 0
        self.hits = 0
        self._sha = ""
        self._load_manifest()

    # ------------------------------------------------------------------ the manifest
    def _load_manifest(self) -> None:
        from tunedb.index.snapshot.signing import verify_manifest

        data = self._remote.manifest()
        where = self._url + MANIFEST
        man = check_manifest(load_json(data, where, "manifest"), where)
        if self._key is not None:  # (the signature is in the manifest: both came in one response)
            verify_manifest(man, self._key, where)
        check_manifest_counts(man, where)
        accept_version(self._state, self._key_id, self._url, int(man.get("version", 0)), self._pin)
        self._remote.keep_manifest(data)
        with self._lock:
            sha = sha256(data)
            if sha == self._sha:
                return
            self._sha, self._man = sha, man
            self._bs = check_block_size(man["block_size"], where)
            self._parts: dict[tuple, pa.Table] = {}
            self._part_lists: dict[str, list[dict]] = {}
            self._entry_cache: dict[tuple[str, str], tuple[pa.Table, dict[str, int]]] = {}
            self._entries: pa.Table | None = None
            self._verdicts: dict[str, str] | None = None
            self._vectors_ready = False

    @property
    def manifest(self) -> dict:
        """The snapshot's manifest (decoded)."""
        return self._man

    @property
    def version(self) -> int:
        """The snapshot's version (0 for a manifest written before versions existed)."""
        return int(self._man.get("version", 0))

    @property
    def publisher(self) -> str:
        return str(self._man.get("publisher", ""))

    @property
    def offline(self) -> bool:
        """Whether the server could not be reached (answers come from the cache)."""
        return self._remote.offline

    def fetch_stats(self) -> dict:
        """What this handle fetched: ``bytes_fetched``, ``requests``, ``offline``, ``range_ignored``."""
        r = self._remote
        return {"bytes_fetched": r.bytes_fetched, "requests": r.requests, "offline": r.offline,
                "range_ignored": r.range_ignored}

    # ------------------------------------------------------------------ reading parts
    def _target_parts(self, tkey: str) -> list[dict]:
        """Target ``tkey``'s part list: its ``targets/`` file, fetched once and verified against
        the sha256 the (verified) manifest names."""
        with self._lock:
            got = self._part_lists.get(tkey)
            if got is None:
                target = self._man["targets"][tkey]
                ref = target["parts_file"]
                got = check_target_file(self._remote.read_all(ref, self._bs), tkey, self._url + ref["file"], self._bs,
                                        target)
                self._part_lists[tkey] = got
            return got

    def _part(self, ref: dict, tkey: str, wkey: str | None) -> pa.Table:
        """The rows of part ``ref`` of target ``tkey`` (only those of ``wkey`` when given), as
        stored, checked against the part list (``consistency.check_part_footer`` and
        ``check_part_rows``: SnapshotContentError naming the part)."""
        import pyarrow.parquet as pq

        key = (ref["sha256"], wkey)
        with self._lock:
            whole = self._parts.get((ref["sha256"], None))
            if whole is not None:
                return whole if wkey is None else whole.filter(pc.equal(whole.column("workload_key"), wkey))
            got = self._parts.get(key)
            if got is not None:
                return got
            where = self._url + ref["file"]
            try:
                pf = pq.ParquetFile(self._remote.open(ref, self._bs))
                check_part_footer(pf.metadata, ref, where, wkey is None)
                if wkey is None:
                    t = pf.read()
                else:
                    rgs = _row_groups_with(pf.metadata, wkey)
                    t = pf.read_row_groups(rgs) if rgs else pf.schema_arrow.empty_table()
                    t = t.filter(pc.equal(t.column("workload_key"), wkey))
            except SnapshotError:
                raise
            except (pa.ArrowException, OSError, ValueError) as e:
                raise SnapshotError(f"{where}: not a readable part ({_first_line(e)})") from None
            missing = [c for c in _PART_COLUMNS if c not in t.column_names]
            if missing:
                raise SnapshotError(f"{where}: not a part (no column {missing[0]}): refused")
            try:
                check_part_rows(t, ref, tkey, where, wkey is None)
            except SnapshotError:
                raise
            except (pa.ArrowException, TypeError, ValueError) as e:  # (a column of another type)
                raise SnapshotError(f"{where}: not a part ({_first_line(e)}): refused") from None
            self._parts[key] = t
            return t

    def _rows(self, tkey: str, wkey: str | None = None) -> pa.Table | None:
        """The stored rows of ``tkey`` (of ``wkey`` only when given), or None (no such target)."""
        if tkey not in self._man["targets"]:
            return None
        parts = [p for p in self._target_parts(tkey)
                 if wkey is None or p["first_workload"] <= wkey <= p["last_workload"]]
        tables = [self._part(p, tkey, wkey) for p in parts]
        tables = [t for t in tables if t.num_rows]
        if not tables:
            return None
        try:
            t = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
        except (pa.ArrowException, ValueError) as e:
            raise SnapshotError(f"{self._url}: the parts of target {tkey} do not make one table "
                                f"({_first_line(e)}): refused") from None
        if wkey is None:
            target = self._man["targets"][tkey]
            check_target_rows(t, target, f"{self._url}{target['parts_file']['file']}: the parts of target {tkey}")
        return t

    def _out(self, t: pa.Table, columns: list[str] | None = None) -> pa.Table:
        """Stored rows as ``records()`` returns them (RECORD_SCHEMA or the projection)."""
        from tunedb.index.model.schema import RECORD_SCHEMA, conform

        n = t.num_rows
        for c in ("session", "host", "origin"):
            if c not in t.column_names:
                t = t.append_column(c, pa.repeat(pa.scalar("", pa.string()), n))
        if self._relabel and n:
            src = pc.fill_null(t.column("source"), "measured")
            origin = pc.binary_join_element_wise(pa.scalar(self._url + " ("), src, pa.scalar(")"), "")
            t = t.set_column(t.column_names.index("origin"), "origin", origin)
            t = t.set_column(t.column_names.index("source"), "source",
                             pa.repeat(pa.scalar(f"imported:{self.publisher}", pa.string()), n))
        t = conform(t.select([c for c in RECORD_SCHEMA.names if c in t.column_names]))
        return t if columns is None else t.select(columns)

    def _record(self, t: pa.Table, i: int) -> Record:
        from tunedb.index.model.record import Record

        return Record.from_row(self._out(t.slice(i, 1)).to_pylist()[0])

    def _entry(self, tkey: str, wkey: str) -> tuple[pa.Table, dict[str, int]] | None:
        """An entry's stored rows and, per config_key, the row that answers a lookup (the last
        committed)."""
        with self._lock:
            got = self._entry_cache.get((tkey, wkey))
            if got is None:
                t = self._rows(tkey, wkey)
                if t is None:
                    return None
                latest: dict[str, int] = {}
                committed = t.column("committed").cast(pa.int64()).to_pylist()
                for i, ck in enumerate(t.column("config_key").to_pylist()):
                    j = latest.get(ck)
                    if j is None or committed[i] >= committed[j]:
                        latest[ck] = i
                got = self._entry_cache[(tkey, wkey)] = (t, latest)
            return got

    def _known_target(self, target: Any) -> str:
        return self._target_key(target)

    # ------------------------------------------------------------------ point reads
    def lookup(self, target: Any, workload: Any, config: Any) -> Record | None:
        tkey = self._known_target(target)
        wkey, ckey = self._other_key(workload, "workload"), self._other_key(config, "config")
        with self._lock:
            self.lookups += 1
        got = self._entry(tkey, wkey)
        if got is None:
            return None
        t, latest = got
        i = latest.get(ckey)
        if i is None or t.column(STALE)[i].as_py():
            return None
        rid = t.column("record_id")[i].as_py()
        if self.verdicts().get(rid) == "refuted":
            return None
        with self._lock:
            self.hits += 1
        return self._record(t, i)

    def entry_records(self, target: Any, workload: Any) -> list[Record]:
        from tunedb.index.model.record import Record

        got = self._entry(self._known_target(target), self._other_key(workload, "workload"))
        if got is None:
            return []
        t = got[0]
        keep = pc.and_(pc.equal(t.column("status"), "ok"), pc.invert(t.column(STALE)))
        refuted = [r for r, v in self.verdicts().items() if v == "refuted"]
        if refuted:
            keep = pc.and_(keep, pc.invert(pc.is_in(t.column("record_id"), value_set=pa.array(refuted, pa.string()))))
        t = t.filter(pc.fill_null(keep, False))
        return [Record.from_row(r) for r in self._out(t).to_pylist()]

    # ------------------------------------------------------------------ bulk reads
    def records(self, target: Any = None, workload: Any = None, *, include_stale: bool = True,
                columns: Sequence[str] | None = None) -> pa.Table:
        """See ``RecordStore.records``; rows grouped by target (target_key order), each target's
        sorted by (workload_key, config_key, committed, record_id)."""
        from tunedb.index.model.schema import empty_records

        cols = check_columns(columns)
        wkey = self._other_key(workload, "workload") if workload is not None else None
        tkeys = [self._known_target(target)] if target is not None else sorted(self._man["targets"])
        tables = [t for t in (self._rows(tk, wkey) for tk in tkeys) if t is not None]
        if not tables:
            return empty_records(cols)
        t = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
        if not include_stale:
            t = t.filter(pc.invert(t.column(STALE)))
        return self._out(t, cols)

    def entries(self) -> pa.Table:
        with self._lock:
            if self._entries is None:
                import pyarrow.parquet as pq

                tables = []
                for ref in self._man.get("entries_files") or []:
                    data = self._remote.read_all(ref, self._bs)
                    try:
                        tables.append(pq.read_table(pa.BufferReader(data)))
                    except (pa.ArrowException, OSError, ValueError) as e:
                        raise SnapshotError(f"{self._url}{ref['file']}: not a readable entries file "
                                            f"({_first_line(e)})") from None
                    check_entries_file(tables[-1], ref, self._man["targets"], self._url + ref["file"])
                if tables:
                    try:
                        t = pa.concat_tables(tables)
                        self._entries = t.sort_by([("target_name", "ascending"), ("workload_key", "ascending")])
                    except (pa.ArrowException, KeyError, ValueError) as e:
                        raise SnapshotError(f"{self._url}: the entries files do not make one entries table "
                                            f"({_first_line(e)})") from None
                    check_entries_totals(self._entries, self._man, f"{self._url}{MANIFEST}: the entries files")
                else:
                    from tunedb.index.contract import tables as tbl
                    from tunedb.index.model.schema import empty_records

                    self._entries = tbl.entries(empty_records())
            return self._entries

    def targets(self) -> list[dict]:
        where = self._url + MANIFEST
        out = [{"target_key": tk, "target_name": t["target_name"], "target": load_json(t["target"], where, "target"),
                "records": int(t["records"])} for tk, t in self._man["targets"].items()]
        return sorted(out, key=lambda d: (d["target_name"], d["target_key"]))

    def verdicts(self) -> dict[str, str]:
        with self._lock:
            if self._verdicts is None:
                ref = self._man.get("verdicts")
                doc = {}
                if ref:
                    where = self._url + ref["file"]
                    doc = check_verdicts(load_json(self._remote.read_all(ref, self._bs), where, "verdicts"), where)
                self._verdicts = doc
            return dict(self._verdicts)

    def __len__(self) -> int:
        """The manifest's ``records`` (the sum of its targets' records: ``format.check_manifest``;
        each target's part list, when fetched, must hold as many rows)."""
        return int(self._man.get("records", 0))

    def stats(self) -> StoreStats:
        m = self._man
        return StoreStats(records=len(self), targets=len(m["targets"]), workloads=int(m.get("workloads", 0)),
                          entries=int(m.get("entries", 0)), files=int(m.get("files", 0)),
                          size_bytes=int(m.get("size_bytes", 0)), stale_targets=list(m.get("stale_targets", [])),
                          lookups=self.lookups, hits=self.hits, location=self.location, offline=self.offline)

    def runs(self, kind: str | None = None, *, limit: int | None = None) -> list[dict]:
        """Always ``[]``: a snapshot carries no run summaries."""
        check_runs_query(kind, limit)
        return []

    # ------------------------------------------------------------------ writes: refused
    def _read_only(self, what: str):
        raise ValueError(f"read-only: {self._url} is a published snapshot; {what} writes nothing to it")

    def commit(self, records: Record | RecordBatch | Iterable[Record]) -> int:
        self._read_only("commit")

    def invalidate(self, target: Any) -> str:
        self._read_only("invalidate")

    def compact(self) -> dict:
        self._read_only("compact")

    def dedup(self) -> dict:
        self._read_only("dedup")

    def forget(self, *, keep_top: int | None = None, older_than_days: float | None = None,
               target: Any = None) -> dict:
        self._read_only("forget")

    def mark(self, verdicts: dict[str, str]) -> int:
        self._read_only("mark")

    def add_run(self, summary: Mapping[str, Any]) -> str:
        self._read_only("add_run")

    # ------------------------------------------------------------------ derived data, life cycle
    def cache_dir(self) -> Path:
        """``<cache>/derived/<manifest hash>``; the published nearest-entry index is put in its
        ``vectors/`` the first time it is asked for (fetched once)."""
        d = self._remote.cache / "derived" / self._sha[:16]
        check_no_links(self._remote.cache, d / "vectors")  # (nothing written through a link)
        d.mkdir(parents=True, exist_ok=True)
        with self._lock:
            if not self._vectors_ready:
                self._vectors_ready = True
                self._install_vectors(d / "vectors")
        return d

    def _install_vectors(self, d: Path) -> None:
        """Put the published nearest-entry index's vectors in ``d``: each file under the name the
        index's manifest gives it (a name the index writes: ``format.VECTOR_FILE``, checked again
        here), its bytes verified against the manifest's sha256.  The FAISS file is left out:
        the index is rebuilt locally from the vectors."""
        vec = self._man.get("vectors")
        if not vec:
            return
        want = json.dumps(vec["manifest"], indent=1).encode()
        if (d / "manifest.json").exists() and (d / "manifest.json").read_bytes() == want:
            return
        for name, ref in sorted(vec["files"].items()):
            if not VECTOR_FILE.fullmatch(name):  # (check_manifest refused it already)
                raise SnapshotError(f"{self._url}{MANIFEST}: vectors.files names {name[:80]!r}: refused")
            if name.endswith(".faiss"):
                # the publisher's FAISS file is never parsed here (a native deserialiser fed
                # someone else's bytes): the index is rebuilt from the verified vectors
                # (retrieval.vectors.load), which costs a k-means only for an IVF index
                continue
            atomic_write(d / name, self._remote.read_all(ref, self._bs))
        atomic_write(d / "manifest.json", want)

    def change_token(self) -> tuple:
        return ("snapshot", self._url, self._sha)

    @property
    def location(self) -> str:
        return self._url

    def refresh(self) -> None:
        """Revalidate the manifest (a new snapshot is read from then on)."""
        self._load_manifest()

    def close(self) -> None:
        self._remote.close()

    def __repr__(self) -> str:
        return f"SnapshotStore({self._url!r})"


#: the columns a part must hold (what the reads use)
_PART_COLUMNS = ("target_key", "workload_key", "config_key", "committed", "record_id", "status", "source", STALE)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:160] if text else type(e).__name__


def _row_groups_with(meta: Any, wkey: str) -> list[int]:
    """The row groups whose workload_key statistics may hold ``wkey`` (all when unknown)."""
    cols = [j for j in range(meta.num_columns) if meta.schema.column(j).path == "workload_key"]
    if not cols:
        return list(range(meta.num_row_groups))
    col, out = cols[0], []
    for i in range(meta.num_row_groups):
        st = meta.row_group(i).column(col).statistics
        if st is None or not st.has_min_max or st.min <= wkey <= st.max:
            out.append(i)
    return out


__all__ = ["SnapshotStore", "default_cache"]
