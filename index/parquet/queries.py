"""The read side of a store handle: look-ups, best costs, entry records, targets and table reads.

``Queries`` answers the per-entry queries of ``ParquetStore`` (``lookup``, ``lookup_batch``,
``best_costs``, ``entry_records``, ``targets``, ``find_target``) from the handle's
``partitions.PartitionSet``: a query names its target, so it loads (indexes) only that target's
partition, finds rows in its sorted key arrays (``memindex``), and builds Records only for the
rows it returns (``rowcache.record_at``).  It also keeps the handle's lookup and hit counts.
``best``/``best_costs`` answers are kept per entry (``RankedEntries``, on each partition) until
that entry can change, so a repeated query reads memory only.
The plain functions below are the whole-table side (``ParquetStore.records`` / ``entries``):
reading live files and journal rows with column projection, filtering them, and the change
token that derived caches are keyed by.

Contract: answers are what ``tunedb.index.contract.base.RecordStore`` defines; a Record of a refuted
record never answers.  FileNotFoundError from any query means a compaction merged away a file
one of its rows lived in: the store lists the directory again and asks again
(``ParquetStore._rereading``), so the refresh, which needs the whole handle, stays in the store;
a query must therefore be safe to run again from the start after one.

Locking: each ``Queries`` method takes the handle lock (``lock``, the store's ``_lock``, an
RLock) itself, around everything it reads of the ``PartitionSet``; call them with or without it
held.  The plain functions touch no handle state (``read_chunks`` reads ``mem`` only; the caller
holds the handle lock or the DB lock shared as documented at the store).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tunedb.index.contract import tables
from tunedb.index.contract.answers import Lookups
from tunedb.index.model.estimate import (
    ConfigCost,
    estimate_at,  # (rank_arrays' own estimate builder)
    estimate_groups,
    rank,
    rank_arrays,
    record_values,
)
from tunedb.index.model.keys import canonical_json, canonical_json_flat, canonical_json_flat_many, hash64, key_of_text
from tunedb.index.model.record import Record
from tunedb.index.model.schema import conform, empty_records
from tunedb.index.parquet import indexcache, memindex, rankcache
from tunedb.index.parquet.partition_set import PartitionSet
from tunedb.index.parquet.querykeys import KeyMemo
from tunedb.index.parquet.rowcache import record_at
from tunedb.index.parquet.target_index import Partition
from tunedb.index.support.fsutil import file_lock, replace_derived

#: files read at once by one records read (pyarrow decodes without the GIL)
READ_THREADS = 4
#: the columns the stale filter of ``records`` needs
STALE_COLUMNS = ["target_key", "committed"]


def meta_flags(meta: str, confirm_origins: tuple[str, ...]) -> tuple[bool, bool]:
    """(a confirmation re-measurement, said to be noisy) of a record's meta JSON text."""
    if not meta or ('"origin"' not in meta and '"noisy"' not in meta):  # (most metas: no JSON parse)
        return False, False
    d = json.loads(meta)
    return d.get("origin") in confirm_origins, bool(d.get("noisy"))


def lookup_key(prefix: Any, ckey: str) -> int:
    """The lookup key of a config key under an entry's BLAKE2b prefix state
    (``== hash64(tkey, wkey, ckey)``, without re-hashing the two fixed keys)."""
    h = prefix.copy()
    h.update(ckey.encode())
    return int.from_bytes(h.digest(), "little", signed=True)


def config_lookup_keys(prefix: Any, configs: list) -> tuple[list, list[int]]:
    """(canonical (JSON, flat) of each config -- None for one given as a key --, lookup keys)."""
    texts: list = canonical_json_flat_many([{} if isinstance(c, str) else c for c in configs])
    lk_list = []
    copy, from_bytes = prefix.copy, int.from_bytes
    for i, config in enumerate(configs):
        if isinstance(config, str):
            ckey = config
            texts[i] = None
        else:
            ckey = key_of_text(texts[i][0])
        h = copy()
        h.update(ckey.encode())
        lk_list.append(from_bytes(h.digest(), "little", signed=True))
    return texts, lk_list


def last_positions(ar: memindex.Arrays, lks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(found, packed position ``file << 32 | row``) of the latest row of each lookup key, by
    one ``searchsorted`` in the partition's sorted key array."""
    ks = ar.last_keys
    if not len(ks):
        return np.zeros(len(lks), bool), np.zeros(len(lks), np.int64)
    at = ks.searchsorted(lks)
    at[at == len(ks)] = len(ks) - 1
    return ks[at] == lks, ar.last_packed[at]


class EntryCosts(NamedTuple):
    """The cost samples of an entry's rows, as ``estimate.rank_arrays`` takes them."""

    flat: np.ndarray      # every sample of the rows with samples, row after row
    lengths: np.ndarray   # samples per row (rows with samples)
    keys: list[str]       # the distinct config keys
    group: np.ndarray     # index into ``keys`` per row
    confirm: np.ndarray   # a confirmation re-measurement, per row
    noisy: np.ndarray     # said to be noisy, per row
    ts: np.ndarray        # measurement time per row
    sel: np.ndarray       # the rows (indices into the rows asked for) these are
    tuner: np.ndarray     # the tuner code of each row's meta (``estimate.tuner_codes``)


def entry_costs(view: PartitionSet, p: Partition, rows: np.ndarray, per_file: dict | None = None) -> EntryCosts:
    """The cost samples of ``rows`` (of partition ``p``'s arrays) from their files' decoded
    columns, without building Records.  ``per_file``: where the flags of each file's distinct
    meta texts are kept between calls (for many entries of the same arrays; None: not kept).
    FileNotFoundError: a file was merged away."""
    from tunedb.index.model.estimate import CONFIRM_ORIGINS, tuner_codes

    a = p.arrays.a
    files, frows = a["file"][rows], a["row"][rows]
    n = len(rows)
    ckeys = np.empty(n, "S32")
    starts, lengths, ts = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64)
    confirm, noisy = np.zeros(n, bool), np.zeros(n, bool)
    tuner = np.zeros(n, np.int64)
    values, base = [], 0
    for f in np.unique(files):
        t = view.table(p.files[int(f)])
        at = np.flatnonzero(files == f)
        r = frows[at]
        ckeys[at] = t["_cfg_key"][r]
        off = t["_cost_off"]
        starts[at] = base + off[r]
        lengths[at] = off[r + 1] - off[r]
        ts[at] = t["_ts"][r]
        values.append(t["_cost_val"])
        base += len(t["_cost_val"])
        # the confirmation and noise flags and tuner code of each distinct meta text, then per row
        combos = t["_combos"]
        codes = t["_combo"][r] if combos is not None else t["_combo"][5][0][r]
        known = per_file.get(p.files[int(f)]) if per_file is not None else None
        if known is None:
            texts = [c[5] for c in combos] if combos is not None else t["_combo"][5][1]
            known = (np.array([meta_flags(m, CONFIRM_ORIGINS) for m in texts], bool).reshape(-1, 2),
                     tuner_codes(texts))
            if per_file is not None:
                per_file[p.files[int(f)]] = known
        flags, tuner_of = known
        confirm[at], noisy[at] = flags[codes, 0], flags[codes, 1]
        tuner[at] = tuner_of[codes]
    sel = np.flatnonzero(lengths > 0)
    uniq, group = np.unique(ckeys, return_inverse=True)
    ln = lengths[sel]
    idx = np.repeat(starts[sel] - np.concatenate([[0], np.cumsum(ln)[:-1]]), ln) + np.arange(int(ln.sum()))
    flat = (values[0] if len(values) == 1 else np.concatenate(values))[idx] if len(values) else np.zeros(0)
    return EntryCosts(flat, ln, [u.decode() for u in uniq.tolist()], group[sel], confirm[sel], noisy[sel],
                      ts[sel], sel, tuner[sel])


class RankedEntries:
    """The ranked answers (``best_costs``) of a partition's entries, valid for one build of its
    index arrays (``arrays``) and one set of refuted rid hashes (``refuted``), both by identity:
    any rebuild of the arrays (a refresh that found new files or journal rows, an invalidation,
    a compaction, dedup or forget, a large commit) and any change of the refuted records (a
    verdict) make a new one.  An entry this handle commits to (its overlay) is dropped from it
    (``forget``, called by ``Partition.overlay_add``).  Each answer is the first ``k`` of the
    entry's ranking for the ``k`` it was computed with, and whether that is all of it, so a
    smaller ``k`` is a prefix of it and a larger one is computed again.  Answers are shared:
    never modify one (``Queries`` slices them).  Handle lock held."""

    __slots__ = ("arrays", "refuted", "answers", "misses", "complete", "kept", "sig", "unsaved")

    def __init__(self, arrays: memindex.Arrays, refuted: set[int], kept: dict[int, rankcache.Ranking] | None = None,
                 sig: str | None = None):
        self.arrays = arrays
        self.refuted = refuted
        #: entry key -> the kept head of its ranking (``rankcache``): read from ``derived/ranked/``
        #: and added to as large entries are ranked; written back while ``unsaved``
        self.kept: dict[int, rankcache.Ranking] = kept if kept is not None else {}
        self.sig = sig  # the ``rankcache`` signature of these arrays (None: nothing is kept)
        self.unsaved = False
        #: (target_key, workload_key) -> (the first ``k`` ConfigCost of its ranking, their records,
        #: whether that is all of it)
        self.answers: dict[tuple[str, str], tuple[list, list[Record], bool]] = {}
        self.misses = 0  # entries computed one by one
        self.complete = False  # every entry of the arrays was ranked (``Queries.prerank``)

    def put(self, pair: tuple[str, str], answer: list, k: int) -> tuple[list, list[Record], bool]:
        """Keep ``answer``, the first ``k`` ConfigCost of the ranking of entry ``pair``
        (target_key, workload_key); returns what is kept: (``answer``, its records, whether it
        is the whole ranking)."""
        kept = self.answers[pair] = (answer, [c.record for c in answer], len(answer) < k)
        return kept

    def forget(self, pair: tuple[str, str]) -> None:
        """Drop the answer of entry ``pair`` (target_key, workload_key): this handle committed to it."""
        self.answers.pop(pair, None)


class Queries:
    """The per-entry queries of one handle over its ``PartitionSet`` (see module docstring)."""

    def __init__(self, view: PartitionSet, lock: threading.RLock):
        self.view = view
        self.lock = lock
        self.keys = KeyMemo()  # canonical JSON and keys of query arguments, parsed JSON
        self.lookups = 0
        self.hits = 0
        #: partition prefixes this handle has ranked ahead of time (``prerank``: once each)
        self.preranked: set[str] = set()

    # ------------------------------------------------------------------ keys
    def target_key(self, target: Any) -> str:
        """Key of a target given as a dict, a Record, a target_key or a target_name."""
        if isinstance(target, str):
            if re.fullmatch(r"[0-9a-f]{32}", target):
                return target
            found = self.find_target(target)
            if found is None:
                raise ValueError(f"unknown target {target!r}")
            return key_of_text(canonical_json(found))
        return self.keys.canon(target, "target")[1]

    def workload_key(self, workload: Any) -> str:
        """Key of a workload given as a dict, a Record or a workload_key."""
        if isinstance(workload, str) and re.fullmatch(r"[0-9a-f]{32}", workload):
            return workload
        return self.keys.canon(workload, "workload")[1]

    def entry_of(self, target: Any, workload: Any) -> tuple:
        """(target JSON, workload JSON, target_key, workload_key, BLAKE2b state of the lookup-key
        prefix, target dict, workload dict) of a (target, workload).  Each side is memoised by
        value, the prefix by the key pair (see ``tunedb.index.parquet.querykeys``).  JSON texts
        and dicts are None when given as keys or names."""
        keys = self.keys
        if isinstance(target, str):
            tj, tkey, tdict = None, self.target_key(target), None
        else:
            tj, tkey = keys.canon(target, "target")
            tdict = keys.json(tj)
        if isinstance(workload, str):
            wj, wkey, wdict = None, self.workload_key(workload), None
        else:
            wj, wkey = keys.canon(workload, "workload")
            wdict = keys.json(wj)
        prefix = keys.prefix(tkey, wkey)
        return tj, wj, tkey, wkey, prefix, tdict, wdict

    def entry_query(self, target: Any, workload: Any) -> tuple[str, int, tuple | None]:
        """(target_key, entry key, ``tw``) of a (target, workload) query: ``tw`` is its target and
        workload as ``rowcache.record_at`` takes them (the rows' own are the query's: not read
        back, their config is), None when given as keys or names."""
        tj, wj, tkey, wkey, _, tdict, wdict = self.entry_of(target, workload)
        tw = (tdict, wdict, tj, wj, tkey, wkey) if tj is not None and wj is not None else None
        return tkey, hash64(tkey, wkey), tw

    # ------------------------------------------------------------------ rows
    def record(self, p: Partition, i: int, tw: tuple | None = None) -> Record:
        """Record of row ``i`` of partition ``p``'s arrays; ``tw``: its target and workload when
        the caller knows them (see ``rowcache.record_at``).  Handle lock held."""
        a = p.arrays.a
        t = self.view.table(p.files[a["file"].item(i)])
        return record_at(t, a["row"].item(i), a["lookup_key"].item(i), None, self.keys.json, tw)

    def record_at(self, p: Partition, fidx: int, row: int, lk: int, known: tuple | None = None) -> Record:
        """Record of ``row`` of live file ``fidx`` of partition ``p`` (its decoded table; see
        ``rowcache.record_at`` for ``known``).  Handle lock held.  FileNotFoundError: the file
        was merged away; the caller refreshes and retries."""
        return record_at(self.view.table(p.files[fidx]), row, lk, known, self.keys.json)

    # ------------------------------------------------------------------ entry queries
    def lookup(self, target: Any, workload: Any, config: Any) -> Record | None:
        """The cached measurement of (target, workload, config), or None.

        Failed measurements are returned too (so they are never retried).  When a triple
        was measured more than once the latest measurement answers.  Records of an
        invalidated target committed before its invalidation never answer."""
        tj, wj, tkey, wkey, prefix, tdict, wdict = self.entry_of(target, workload)
        if isinstance(config, str):
            cj, ckey = None, config
        else:
            # a flat dict of plain scalars is its own normal form: a copy of it is the Record's
            # config (no parsing of cj)
            cj, flat = canonical_json_flat(config)
            ckey = key_of_text(cj)
        lk = lookup_key(prefix, ckey)
        view = self.view
        with self.lock:
            p = view.parts.get(tkey[:16])
            self.lookups += 1
            if p is None:
                return None
            self.loaded(p)
            r = p.overlay.get(lk)
            if r is not None:
                if r.record_id in view.refuted:
                    return None
                self.hits += 1
                return r
            pos = p.last_row_of(lk)
            if pos is None:
                return None
            self.hits += 1
            known = None
            if tj is not None and wj is not None and cj is not None:
                known = (tdict, wdict, dict(config) if flat else json.loads(cj), tj, wj, cj, tkey, wkey, ckey)
            rec = self.record_at(p, pos >> 32, pos & 0xFFFFFFFF, lk, known)
            if view.refuted and rec.record_id in view.refuted:
                self.hits -= 1
                return None
            return rec

    def lookup_batch(self, target: Any, workload: Any, configs: list,
                     again: Callable[[Any, Any, Any], Record | None]) -> Lookups:
        """The answers of a population of configs of one (target, workload) (see
        ``RecordStore.lookup_batch``): the entry's key prefix is hashed once, the configs' lookup
        keys are searched in the partition's sorted key array in one ``searchsorted``, and an
        answering Record is built only when it is read (from the file that held it at the time of
        the look-up).  One whose file was merged away by then is asked again with
        ``again(target, workload, config)`` (the store's ``lookup``: it refreshes)."""
        tj, wj, tkey, wkey, prefix, tdict, wdict = self.entry_of(target, workload)
        n = len(configs)
        texts, lk_list = config_lookup_keys(prefix, configs)
        lks = np.array(lk_list, np.int64)
        view = self.view
        with self.lock:
            p = view.parts.get(tkey[:16])
            self.lookups += n
            if p is None or not n:
                return Lookups(np.zeros(n, bool), lambda i: None)
            found, packed = last_positions(self.loaded(p).arrays, lks)
            overlay = {i: r for i, lk in enumerate(lk_list) if (r := p.overlay.get(lk)) is not None} \
                if p.overlay else {}
            for i in overlay:
                found[i] = True
            files = list(p.files)

            def fetch(i: int) -> Record | None:
                if i in overlay:
                    rec = overlay[i]
                else:
                    known = None
                    if tj is not None and wj is not None and texts[i] is not None:
                        cj, flat = texts[i]
                        known = (tdict, wdict, dict(configs[i]) if flat else json.loads(cj), tj, wj, cj, tkey, wkey,
                                 key_of_text(cj))
                    pos = int(packed[i])
                    try:
                        with self.lock:
                            t = view.table(files[pos >> 32])
                            rec = record_at(t, pos & 0xFFFFFFFF, int(lks[i]), known, self.keys.json)
                    except FileNotFoundError:  # merged away since: the answer is the same record
                        return again(target, workload, configs[i])
                return None if rec.record_id in view.refuted else rec

            if view.refuted:  # (rare) a refuted answer is no answer: build the hits now to know
                built = {i: fetch(i) for i in np.flatnonzero(found).tolist()}
                found = np.array([built.get(i) is not None for i in range(n)], bool)
                lookups = Lookups(found, built.__getitem__)
            else:
                lookups = Lookups(found, fetch)
            self.hits += lookups.hits
            return lookups

    def best_costs(self, target: Any, workload: Any, k: int) -> list:
        """``RecordStore.best_costs`` (``k`` > 0), computed from the partition's decoded columns
        (``entry_costs``): only the ``k`` representative records are built as Records (the
        contract's definition through ``estimate.rank_arrays``, which ``estimate.rank`` uses too).
        A new list, from the entry's kept answer (``ranked``)."""
        return self.ranked(target, workload, k)[0][:k]

    def best(self, target: Any, workload: Any, k: int) -> list[Record]:
        """``RecordStore.best`` (``k`` > 0): the records of ``best_costs``, a new list."""
        return self.ranked(target, workload, k)[1][:k]

    def ranked(self, target: Any, workload: Any, k: int) -> tuple[list, list[Record], bool]:
        """(at least the first ``k`` ConfigCost of the ranking of (target, workload), their
        records, whether that is the whole ranking) -- shared, callers slice it.

        Answers are kept per entry in the partition's ``RankedEntries``, found by the memoised
        (target_key, workload_key) (no canonical JSON or hashing once the keys are known), valid
        for one build of the partition's arrays and one set of refuted records, and dropped for
        an entry this handle commits to (see ``RankedEntries``).  The first query of a target
        in this handle ranked its entries ahead of time (``prerank``, the first ``PRERANK_K`` of
        each), so a query for up to that many answers from memory; any other miss ranks the one
        entry asked, never the whole target."""
        pair = self.pair_of(target, workload)
        with self.lock:
            p = self.view.parts.get(pair[0][:16])
            if p is None:
                return [], [], True
            ranked = self.ranked_entries(p)
            out = self.ranked_in(p, ranked, pair, target, workload, k)
            self.save_kept(p, ranked)
            return out

    def best_costs_many(self, pairs: list[tuple[Any, Any]], k: int) -> list[list]:
        """``RecordStore.best_costs_many`` (``k`` > 0): each pair's ``best_costs`` (new lists),
        the same answers as ``ranked`` gives one by one and kept the same way, under one hold of
        the handle lock: the pairs are grouped by partition, each partition is loaded and its
        kept answers looked at once, and the entries missing from them are ranked together --
        the flags of each file's distinct meta texts worked out once for all of them
        (``entry_costs``' ``per_file``)."""
        keyed = [self.pair_of(t, w) for t, w in pairs]
        out: list[list] = [[] for _ in keyed]
        by_part: dict[str, list[int]] = {}
        for i, pair in enumerate(keyed):
            by_part.setdefault(pair[0][:16], []).append(i)
        with self.lock:
            for prefix, idx in by_part.items():
                p = self.view.parts.get(prefix)
                if p is None:
                    continue
                ranked = self.ranked_entries(p)
                per_file: dict = {}
                for i in idx:
                    target, workload = pairs[i]
                    out[i] = self.ranked_in(p, ranked, keyed[i], target, workload, k, per_file)[0][:k]
                self.save_kept(p, ranked)
        return out

    def pair_of(self, target: Any, workload: Any) -> tuple[str, str]:
        """(target_key, workload_key) of a query's target and workload (memoised: no canonical
        JSON or hashing once the keys are known)."""
        if isinstance(target, str) or isinstance(workload, str):
            return (self.target_key(target) if isinstance(target, str) else self.keys.canon(target, "target")[1],
                    self.workload_key(workload) if isinstance(workload, str) else
                    self.keys.canon(workload, "workload")[1])
        return self.keys.pair(target, workload)

    def loaded(self, p: Partition) -> Partition:
        """``p`` indexed (``PartitionSet.loaded``); the first time this handle queries it, its
        entries are ranked too (``prerank``), so that ``best`` answers from memory.  Handle lock
        held.  FileNotFoundError: a file was merged away (the store refreshes and asks again)."""
        self.view.loaded(p)
        if p.prefix not in self.preranked:
            self.prerank(p)
            self.preranked.add(p.prefix)
        return p

    def ranked_entries(self, p: Partition) -> RankedEntries:
        """Partition ``p`` loaded (indexed) and its kept answers, a new ``RankedEntries`` when its
        arrays or the refuted records changed since (handle lock held)."""
        self.loaded(p)
        return self.current_ranked(p)

    def current_ranked(self, p: Partition) -> RankedEntries:
        """The kept answers of loaded partition ``p``: its ``RankedEntries``, a new one (with the
        rankings kept in ``derived/ranked/``) when its arrays or the refuted records changed
        since (handle lock held)."""
        view = self.view
        ranked = p.ranked
        if ranked is None or ranked.refuted is not view.refuted_hashes or ranked.arrays is not p.arrays:
            sig = None
            if view.index_cache is not None and p.files:
                sig = rankcache.signature(indexcache.signature(p.files, p.built_with), view.refuted_hashes)
            kept = rankcache.load(view.index_cache, p.prefix, sig, p.arrays.a) if sig else {}
            ranked = p.ranked = RankedEntries(p.arrays, view.refuted_hashes, kept, sig)
        return ranked

    def save_kept(self, p: Partition, ranked: RankedEntries) -> None:
        """Write partition ``p``'s kept rankings (``rankcache``) when entries were ranked since
        the last write, else nothing (handle lock held; best effort)."""
        if ranked.unsaved and ranked.sig is not None and self.view.index_cache is not None:
            rankcache.save(self.view.index_cache, p.prefix, ranked.sig, ranked.kept)
        ranked.unsaved = False

    def from_kept(self, p: Partition, ranked: RankedEntries, ek: int, k: int, tw: tuple | dict | None) -> list | None:
        """The first ``k`` ranked ``ConfigCost`` of entry ``ek`` from its kept ranking
        (``rankcache``, whose rows were checked against these arrays when read), or None: none
        kept for ``k``, or a representative that is refuted (a rid-hash collision): then the
        entry is ranked again (handle lock held; ``tw`` as ``rank_entry``).  Reads none of the
        partition's files."""
        kept = ranked.kept.get(ek)
        if kept is None or (k > len(kept.rows) and not kept.complete):
            return None
        if isinstance(tw, dict):
            tw = None  # (the kept rows hold the entry's target and workload texts)
        lks = p.arrays.a["lookup_key"]
        out = []
        for i, (row, key, est) in enumerate(zip(kept.rows[:k].tolist(), kept.keys, kept.estimates)):
            rec = kept.record(i, lks.item(row), self.keys.json, tw)
            if self.view.refuted and rec.record_id in self.view.refuted:
                del ranked.kept[ek]
                return None
            out.append(ConfigCost(config_key=key, config=rec.config, estimate=est, record=rec))
        return out

    def ranked_in(self, p: Partition, ranked: RankedEntries, pair: tuple[str, str], target: Any, workload: Any,
                  k: int, per_file: dict | None = None) -> tuple[list, list[Record], bool]:
        """``ranked`` of entry ``pair`` (its keys; ``target``/``workload`` as the query gave them)
        of partition ``p`` with its kept answers ``ranked`` (``ranked_entries``): the kept answer,
        else computed and kept (handle lock held; ``per_file``: see ``entry_costs``)."""
        hit = ranked.answers.get(pair)
        if hit is not None and (k <= len(hit[0]) or hit[2]):
            return hit
        ek = hash64(*pair)
        if ranked.kept and not p.overlay_entries.get(ek):
            out = self.from_kept(p, ranked, ek, k, self.entry_query(target, workload)[2])
            if out is not None:
                return ranked.put(pair, out, k)
        ranked.misses += 1
        tw = self.entry_query(target, workload)[2]
        if p.overlay_entries.get(ek):  # this handle's small commits, not in the arrays yet
            out = rank(self.entry_records(target, workload), k)
        else:
            out = self.rank_entry(p, ek, k, tw, per_file, ranked)
            if out is None:  # (a rid-hash collision with a refuted record: rare; not kept)
                out = rank(self.entry_records(target, workload), k)
                return out, [c.record for c in out], len(out) < k
        return ranked.put(pair, out, k)

    #: the configs of each entry ranked ahead of time (``prerank``): a ``best`` for up to this
    #: many answers from memory; a larger ``k`` ranks the entry asked
    PRERANK_K = 8
    #: partitions with more live ok rows are not ranked ahead of time (their entries are ranked
    #: one by one when asked): bounds the first query of a target's extra work
    PRERANK_MAX_ROWS = 500_000

    def rank_entry(self, p: Partition, ek: int, k: int, tw: tuple | dict | None,
                   per_file: dict | None = None, keep: RankedEntries | None = None) -> list | None:
        """The first ``k`` ranked ``ConfigCost`` of entry ``ek`` from partition ``p``'s arrays
        (handle lock held; ``tw`` as ``record``, or a dict: read from the entry's first row, its
        target's texts shared through the dict), or None when a representative turned out
        refuted (a rid-hash collision: the caller ranks ``entry_records`` instead).  ``per_file``:
        see ``entry_costs``.  ``keep``: the partition's answers, where the head of the ranking of
        an entry of at least ``rankcache.MIN_ENTRY_ROWS`` records is kept (``rankcache.KEEP``
        configs; saved by ``save_kept``)."""
        view = self.view
        ar = p.arrays
        rows = np.asarray(memindex.entry_rows(ar.a, ar.by_entry, ar.entry_sorted, ek, view.refuted_hashes), np.int64)
        if not len(rows):
            return []
        if isinstance(tw, dict):
            tw = self.entry_tw(p, int(rows[0]), tw)
        c = entry_costs(view, p, rows, per_file)
        keep_it = keep is not None and keep.sig is not None and len(rows) >= rankcache.MIN_ENTRY_ROWS
        head = max(k, rankcache.KEEP) if keep_it else k
        order = rank_arrays(c.flat, c.lengths, c.keys, c.group, c.confirm, c.noisy, c.ts, head, c.tuner)
        out = []
        for gi, est, j in order:
            rec = self.record(p, int(rows[c.sel[j]]), tw)
            if view.refuted and rec.record_id in view.refuted:
                return None
            out.append(ConfigCost(config_key=c.keys[gi], config=rec.config, estimate=est, record=rec))
        if keep_it and keep is not None:
            keep.kept[ek] = rankcache.Ranking(np.array([rows[c.sel[j]] for _, _, j in order], np.int64),
                                              [c.keys[gi] for gi, _, _ in order], [est for _, est, _ in order],
                                              len(order) < head, records=[x.record for x in out])
            keep.unsaved = True
        return out[:k]

    def entry_tw(self, p: Partition, i: int, shared: dict[str, tuple[str, str]]) -> tuple:
        """``tw`` (see ``rowcache.record_at``) of the entry of row ``i`` of partition ``p``'s
        arrays, read from that row; ``shared``: target JSON -> (that text, its key), so that
        the Records of every entry of a target share one copy (handle lock held)."""
        a = p.arrays.a
        t = self.view.table(p.files[a["file"].item(i)])
        r = a["row"].item(i)
        tj, tk = t["target"][r].as_py(), t["target_key"][r].as_py()
        tj, tk = shared.setdefault(tj, (tj, tk))
        wj, wk = t["workload"][r].as_py(), t["workload_key"][r].as_py()
        return self.keys.json(tj), self.keys.json(wj), tj, wj, tk, wk

    def prerank(self, p: Partition) -> None:
        """Rank every entry of loaded partition ``p`` ahead of its ``best`` queries, into its
        ``RankedEntries``: the first ``PRERANK_K`` configs of each, as ``rank_entry`` would
        give them, computed for all entries at once (``rank_all``), and their representative
        Records built (the Records of all entries share one target dict and text).  Skipped:
        entries answered already, entries whose ranking is kept on disk (``rankcache``: a query
        reads it without ranking), those with this handle's own commits outside the arrays, and
        partitions of more than ``PRERANK_MAX_ROWS`` rows.  Handle lock held."""
        ranked = self.current_ranked(p)
        ar = p.arrays
        rows = ar.by_entry
        if not len(rows) or len(rows) > self.PRERANK_MAX_ROWS:
            return
        refuted = self.view.refuted_hashes
        if refuted:
            rows = rows[~np.isin(ar.a["rid_hash"][rows], np.fromiter(refuted, np.int64, len(refuted)))]
        if ranked.kept:  # (their rankings are on disk already: a query reads them, ranks nothing)
            rows = rows[~np.isin(ar.a["entry_key"][rows], np.fromiter(ranked.kept, np.int64, len(ranked.kept)))]
            if not len(rows):
                ranked.complete = True
                return
        shared: dict[str, tuple[str, str]] = {}
        k = self.PRERANK_K
        keep_rows = rankcache.MIN_ENTRY_ROWS if ranked.sig is not None else None
        for ek, n_rows, head in rank_all(self.view, p, np.asarray(rows, np.int64), k, keep_rows, rankcache.KEEP):
            if p.overlay_entries.get(ek):
                continue
            out = self.from_kept(p, ranked, ek, k, shared) if ek in ranked.kept else None
            if out is None:
                out = self.ranked_head(p, head[:k], shared)
                if out and keep_rows is not None and n_rows >= keep_rows:
                    self.keep_head(p, ranked, ek, head, out, max(k, rankcache.KEEP), shared)
            if out:
                pair = (out[0].record.target_key, out[0].record.workload_key)
                if pair not in ranked.answers:
                    ranked.put(pair, out[:k], k)
        ranked.complete = True
        self.save_kept(p, ranked)

    def keep_head(self, p: Partition, ranked: RankedEntries, ek: int, head: list, out: list, n: int,
                  shared: dict[str, tuple[str, str]]) -> None:
        """Keep the head of entry ``ek``'s ranking (``head`` from ``rank_all``, ``out`` the
        ConfigCost of its first places) in ``ranked.kept`` (``rankcache``; ``n`` the places
        asked for: fewer mean it is the whole ranking), written by ``save_kept``."""
        rest = self.ranked_head(p, head[len(out):], shared) if len(head) > len(out) else []
        if rest is None:
            return
        allc = out + rest
        ranked.kept[ek] = rankcache.Ranking(np.array([row for _, _, row in head], np.int64), [c.config_key for c in allc],
                                            [c.estimate for c in allc], len(head) < n,
                                            records=[c.record for c in allc])
        ranked.unsaved = True

    def ranked_head(self, p: Partition, head: list, shared: dict[str, tuple[str, str]]) -> list | None:
        """``ConfigCost`` of each (config key, estimate, row of ``p``'s arrays) of ``head`` (one
        entry's, from ``rank_all``), or None when a representative is refuted (a rid-hash
        collision: that entry is ranked when asked).  Handle lock held."""
        tw = self.entry_tw(p, head[0][2], shared)
        refuted = self.view.refuted
        out = []
        for key, est, row in head:
            rec = self.record(p, row, tw)
            if refuted and rec.record_id in refuted:
                return None
            out.append(ConfigCost(config_key=key, config=rec.config, estimate=est, record=rec))
        return out

    def entry_records(self, target: Any, workload: Any) -> list[Record]:
        """Every live, ok, unrefuted record of (target, workload) (see ``RecordStore``)."""
        tkey, ek, tw = self.entry_query(target, workload)
        view = self.view
        with self.lock:
            p = view.parts.get(tkey[:16])
            if p is None:
                return []
            ar = self.loaded(p).arrays
            rows = memindex.entry_rows(ar.a, ar.by_entry, ar.entry_sorted, ek, view.refuted_hashes)
            out = [self.record(p, i, tw) for i in rows]
            seen = {r.record_id for r in out}
            out.extend(r for r in p.overlay_entries.get(ek, ()) if r.ok and r.record_id not in seen)
            if view.refuted:
                out = [r for r in out if r.record_id not in view.refuted]
        return out

    # ------------------------------------------------------------------ targets
    def targets(self) -> list[dict]:
        """Every target holding records: target_key, target_name, target (dict), records (every
        stored record, stale ones included), sorted by name then key."""
        with self.lock:
            counts: dict[str, int] = {}
            for p in self.view.all_loaded():  # (one target per partition)
                counts[p.target_key] = counts.get(p.target_key, 0) + p.count()
            out = []
            for tk, c in counts.items():
                if c == 0:
                    continue
                name, tj = self.view.target_meta.get(tk, ("", "{}"))
                out.append({"target_key": tk, "target_name": name, "target": json.loads(tj), "records": c})
        return sorted(out, key=lambda d: (d["target_name"], d["target_key"]))

    def find_target(self, name_or_key: str) -> dict | None:
        """Target dict of a target in this DB, by target_name or target_key (or a unique key prefix)."""
        with self.lock:
            meta = self.view.all_target_meta()
        if name_or_key in meta:
            return json.loads(meta[name_or_key][1])
        by_name = [tj for tk, (n, tj) in meta.items() if n == name_or_key]
        if len(by_name) >= 1:
            return json.loads(by_name[-1])
        if len(name_or_key) >= 6:
            pref = [tj for tk, (n, tj) in meta.items() if tk.startswith(name_or_key)]
            if len(pref) == 1:
                return json.loads(pref[0])
        return None


# ---------------------------------------------------------------------- whole tables
def read_file(path: str, columns: list[str] | None) -> pa.Table:
    """One record file, every column or only ``columns`` (those the file has: a schema-1 file
    lacks ``host`` and ``origin``; ``schema.conform`` fills them in)."""
    f = pq.ParquetFile(path)  # (not read_table: that imports pyarrow.dataset and pandas, 0.3 s)
    if not columns:
        return f.read(use_threads=False)
    present = set(f.schema_arrow.names)
    return f.read(columns=[c for c in columns if c in present], use_threads=False)


def read_files(paths: list[str], columns: list[str] | None) -> list[pa.Table]:
    """:func:`read_file` of each of ``paths``, in order; several at once when there are many.
    ``FileNotFoundError`` when one is gone (a compaction replaced it: the caller refreshes)."""
    if len(paths) < 2 * READ_THREADS:
        return [read_file(p, columns) for p in paths]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(READ_THREADS, thread_name_prefix="tunedb-read") as ex:
        return list(ex.map(lambda p: read_file(p, columns), paths))


def read_chunks(keys: list[str], mem: dict[str, pa.Table], columns: list[str] | None) -> list[pa.Table]:
    """The rows of each chunk key, in order: journal chunks from ``mem``, files read (only
    ``columns`` of each, those it has).  FileNotFoundError: a file is gone (refresh, retry)."""
    got = iter(read_files([k for k in keys if k not in mem], columns))
    return [mem[k].select([c for c in columns if c in mem[k].column_names]) if columns and k in mem else
            mem[k] if k in mem else next(got) for k in keys]


def concat_records(read: list[pa.Table], columns: list[str] | None) -> pa.Table:
    """``read`` (rows of chunks) as one table of ``columns`` (else every ``RECORD_SCHEMA``
    column) with their ``RECORD_SCHEMA`` types (a schema-1 file's missing ``host``/``origin``
    read as ``""``, as in :func:`~tunedb.index.model.schema.conform`); not de-duplicated."""
    read = [conform(x, columns or None) for x in read]
    if not read:
        return empty_records(columns or None)
    return pa.concat_tables([x.replace_schema_metadata(None) for x in read], promote_options="default")


def read_columns(cols: list[str] | None, by_target: bool, by_workload: bool, stale_filter: bool) -> list[str] | None:
    """The columns ``records`` reads for the asked ``cols`` (None: all): those plus what its
    filters and the de-duplication need (``rid_hash``; ``target_key``/``workload_key``;
    ``STALE_COLUMNS`` for the stale filter), dropped again by ``filter_records``."""
    if cols is None:
        return None
    need = ["rid_hash"] + (["target_key"] if by_target else []) + (["workload_key"] if by_workload else []) + \
        (STALE_COLUMNS if stale_filter else [])
    return cols + [c for c in dict.fromkeys(need) if c not in cols]


def filter_records(t: pa.Table, tkey: str | None, wkey: str | None, invalidated: dict[str, int] | None,
                   cols: list[str] | None) -> pa.Table:
    """Rows of ``t`` of target ``tkey`` and workload ``wkey`` (None: any), de-duplicated by
    record_id, without stale ones when ``invalidated`` is given, with only ``cols`` (None: all)."""
    if tkey is not None:
        t = t.filter(pc.equal(t.column("target_key"), tkey))
    if wkey is not None:
        t = t.filter(pc.equal(t.column("workload_key"), wkey))
    if t.num_rows > 1:
        rh = np.sort(t.column("rid_hash").to_numpy())
        if (rh[1:] == rh[:-1]).any():  # (a plain sort first: repeats are rare, first_by_record_id's is slower)
            t = tables.first_by_record_id(t)
    if invalidated is not None:
        t = tables.drop_stale(t, invalidated)
    return t if cols is None else t.select(cols)


def live_keys(view: PartitionSet, lock: threading.RLock, prefix: str | None, refresh: Callable[[], None]) -> list[str]:
    """Live chunk keys (files, journal rows) of every partition, or of one target-key prefix;
    the handle's own pending commits are folded in first (``refresh``, called without the
    handle lock)."""
    with lock:
        pending = any(p.overlay or p.dirty for p in view.selected(prefix))
    if pending:
        refresh()
    with lock:
        return [k for p in view.selected(prefix) for k in p.live]


def read_live(view: PartitionSet, lock: threading.RLock, db_lock: Path, prefix: str | None,
              columns: list[str] | None, refresh: Callable[[], None]) -> pa.Table:
    """The rows (not de-duplicated) of every live file and journal, or of one target-key
    prefix's, as ``concat_records`` gives them (``columns``: only those).  Takes the DB lock
    ``db_lock`` shared (no rewrite deletes files meanwhile); ``refresh()`` and reads again when
    a file was merged away all the same (RuntimeError after 20 tries)."""
    with file_lock(db_lock, shared=True):
        for _attempt in range(20):
            keys = live_keys(view, lock, prefix, refresh)
            try:
                read = read_chunks(keys, view.mem, columns)
                break
            except FileNotFoundError:
                refresh()
        else:
            raise RuntimeError("DB kept changing while reading")
    return concat_records(read, columns)


def read_records(view: PartitionSet, read: Callable[[str | None, list[str] | None], pa.Table], tkey: str | None,
                 wkey: str | None, include_stale: bool, cols: list[str] | None) -> pa.Table:
    """``ParquetStore.records`` of target ``tkey`` and workload ``wkey`` (None: any) with checked
    ``cols`` (None: all): ``read(prefix, columns)`` (the store's ``read_live``) of the columns
    ``read_columns`` names, read again with the stale filter's columns when a refresh during
    the read brought the first invalidation, then ``filter_records``."""
    while True:
        read_cols = read_columns(cols, tkey is not None, wkey is not None, not include_stale and bool(view.invalidated))
        t = read(tkey[:16] if tkey else None, read_cols)
        if include_stale or not view.invalidated or all(c in t.column_names for c in STALE_COLUMNS):
            break
    return filter_records(t, tkey, wkey, None if include_stale else view.invalidated, cols)


def entries_table(cached: Path | None, write_cache: bool, read: Callable[[str | None, list[str]], pa.Table],
                  view: PartitionSet) -> pa.Table:
    """``ParquetStore.entries``: read from ``cached`` (a file an earlier process wrote for this
    change token) when it is readable, else summarised from ``read(None, columns)`` (the
    store's ``read_live``) and, when ``write_cache``, written to ``cached`` (replacing older
    entries files: ``fsutil.replace_derived``)."""
    if cached is not None:
        try:
            return pq.ParquetFile(cached).read(use_threads=False)
        except (OSError, pa.ArrowInvalid):
            pass
    t = read(None, tables.ENTRY_COLUMNS + tables.ESTIMATE_COLUMNS + ["rid_hash", "committed"])
    out = tables.entries(tables.drop_stale(tables.first_by_record_id(t), view.invalidated))
    if cached is not None and write_cache:
        replace_derived(cached, lambda tmp: pq.write_table(out, tmp), "entries*-*.parquet")
    return out


def change_token(db: Path, dirs: tuple[Path, ...], journal_dir: Path, own: int) -> tuple:
    """(``own``, a digest of the names of the files under ``dirs``, relative to ``db``, and the
    journals' names and sizes): changes whenever the records may have.  A stable digest, not
    ``hash()``: a token may be stored and compared by another process, or of a copy of the DB."""
    names: list[str] = []
    for base in dirs:
        for root, _, files in os.walk(base):  # (relative: a copy of the DB has the same token)
            rel = os.path.relpath(root, db)
            names.extend(os.path.join(rel, f) for f in files if not f.startswith("_"))
    try:  # journaled commits: the journals' sizes on disk
        jsig = sorted((e.name, e.stat().st_size) for e in os.scandir(journal_dir))
    except FileNotFoundError:
        jsig = []
    text = "\n".join(sorted(names) + [f"{k}\0{v}" for k, v in jsig])
    return (own, hashlib.blake2b(text.encode(), digest_size=16).hexdigest())


# ---------------------------------------------------------------------- ranking ahead of time
def rank_all(view: PartitionSet, p: Partition, rows: np.ndarray, k: int, keep_rows: int | None = None,
             keep: int = 0) -> list[tuple[int, int, list]]:
    """The first ``k`` of the ranking of every entry of ``rows`` (live ok rows of partition
    ``p``'s arrays, grouped by entry as ``memindex.Arrays.by_entry`` orders them), computed for
    all entries at once: (entry key, its rows in ``rows``, [(config key, ``CostEstimate``,
    representative row)]) per entry with a cost, in entry-key order; the first ``keep`` of
    entries of at least ``keep_rows`` rows (None: none).  Each entry's list is what ``estimate.rank_arrays``
    gives for that entry's rows alone (the estimator works per config; here a group is one
    (entry, config), and the representative's ties break by position within the entry, as
    there).  FileNotFoundError: a file was merged away."""
    c = entry_costs(view, p, rows)
    if not len(c.sel):
        return []
    ents = p.arrays.a["entry_key"][rows[c.sel]]
    ent_keys, ent = np.unique(ents, return_inverse=True)
    nk = len(c.keys)
    uniq, g = np.unique(ent.reshape(-1).astype(np.int64) * nk + c.group, return_inverse=True)
    g = g.reshape(-1)
    g_ent, g_key = uniq // nk, uniq % nk
    arrs = estimate_groups(c.flat, c.lengths, g, c.confirm, len(uniq), c.noisy, c.tuner)
    # the representative of each group: rank_arrays' order (nearest the estimate, latest, last)
    dist = np.abs(record_values(c.flat, c.lengths, c.tuner) - arrs["value"][g])
    order = np.lexsort((-np.arange(len(g)), -c.ts.astype(np.float64), dist, g))
    first = np.ones(len(order), bool)
    first[1:] = g[order][1:] != g[order][:-1]
    rep = np.full(len(uniq), -1, np.int64)
    rep[g[order][first]] = order[first]
    # per entry, rank_key's order: confirmed first, then by value, then by config key (c.keys sorted)
    valid = np.flatnonzero(~np.isnan(arrs["value"]))
    ranked = valid[np.lexsort((g_key[valid], arrs["value"][valid], ~arrs["basis_confirmed"][valid], g_ent[valid]))]
    re = g_ent[ranked]
    starts = np.flatnonzero(np.r_[True, re[1:] != re[:-1]])
    ends = np.r_[starts[1:], len(ranked)]
    rep_rows = rows[c.sel[rep[ranked]]]
    all_ents, n_rows = np.unique(p.arrays.a["entry_key"][rows], return_counts=True)
    n_of = n_rows[np.searchsorted(all_ents, ent_keys[re[starts]])]
    heads = np.full(len(starts), k, np.int64)
    if keep_rows is not None:
        heads[n_of >= keep_rows] = max(k, keep)
    out = []
    for lo, hi, n in zip(starts.tolist(), np.minimum(ends, starts + heads).tolist(), n_of.tolist()):
        head = [(c.keys[int(g_key[gi])], estimate_at(arrs, int(gi)), int(rep_rows[i]))
                for i, gi in zip(range(lo, hi), ranked[lo:hi].tolist())]
        out.append((int(ent_keys[int(re[lo])]), int(n), head))
    return out
