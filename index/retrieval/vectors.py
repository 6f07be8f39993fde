"""FAISS cosine index over entry vectors, persisted as derived data of a DB.

One vector per entry (a distinct ``(target_key, workload_key)``): ``features.entry_vector``,
unit length, so inner product = cosine.  Searched with FAISS, by kind:

* ``flat`` - ``IndexFlatIP``, exact; what ``auto`` picks up to ``FLAT_MAX`` entries.
* ``ivf``  - ``IndexIVFFlat`` (inner product), what ``auto`` picks above ``FLAT_MAX``:
  ``nlist = IVF_LISTS_PER_SQRT * sqrt(N)`` lists from spherical k-means trained on a sample
  of ``IVF_TRAIN_PER_LIST * nlist`` rows (so a build is one k-means on a sample plus one
  assignment pass: 31-46 s at 1M entries on 2 busy cores, against 2-6 min for the HNSW graph),
  ``IVF_NPROBE`` lists searched per query.  Adds go straight into the lists (no retraining);
  the lists are re-fitted (a rebuild) once the index holds ``IVF_REFIT_GROWTH`` times the
  rows it was trained on, so list sizes stay near ``sqrt(N)``.
* ``hnsw`` - ``IndexHNSWFlat`` (inner product), M=``HNSW_M``, efConstruction=
  ``EF_CONSTRUCTION``: the default above ``FLAT_MAX`` before the IVF kind (kept as an explicit
  choice and as the benchmark's baseline; an HNSW index it chose automatically and stored is
  rebuilt as IVF by the next ``auto`` sync, one that was asked for is kept).

Chosen automatically, overridable (``kind="flat"``/``"ivf"``/``"hnsw"``, or
``TUNEDB_INDEX_KIND``).  FAISS ids are row numbers of the embeddings table.

In memory (:class:`VectorIndex`): the FAISS *main* index covers rows ``[0, n_main)``; rows
added since (the *delta*) are searched exactly with numpy and merged into the main index
once there are more than ``max(DELTA_MIN, DELTA_FRACTION * n_main)`` of them (HNSW and IVF
add incrementally; neither removes, so an entry that disappears from the DB triggers a
rebuild that reuses the stored vectors).

On disk (``db.cache_dir() / "vectors"``), derived data only; the store's records are the truth:

* ``emb-<gen>-<part>.parquet`` - target_key, workload_key, family, vector (float32 x DIM),
  in row order; every incremental add writes one more part.
* ``main-<gen>.faiss``         - the FAISS main index over the first ``n_main`` rows.
* ``manifest.json``           - what the files cover: feature_version, catalog hash, dim,
  kind and parameters (and whether the kind was asked for: ``pinned``), the parts (rows,
  bytes, CRC-32) and the index file (bytes, CRC-32).

:func:`sync` makes the stored index of ``db`` (any ``RecordStore``: its ``cache_dir()`` holds
the files, its ``change_token()`` says when to look again) match ``db.entries()``: it loads the
files, verifies sizes and checksums (a missing, truncated, garbage or other-``FEATURE_VERSION``
file is rebuilt, never an error; a missing FAISS file alone is rebuilt from the stored vectors,
which is how a published snapshot's index is read: its FAISS bytes are never parsed), adds new entries incrementally and rebuilds when entries were
removed.  Writers hold ``vectors/.lock``; a write that fails (read-only DB) only warns: the
in-memory index still answers.

Threads: FAISS builds with all its OpenMP threads (``faiss.omp_set_num_threads``); a single
query uses one.  A process that forks after FAISS ran OpenMP may hang in the child: start
workers that search with ``spawn``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import threading
import time
import uuid
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tunedb.index.hardware import catalog
from tunedb.index.hardware.catalog import catalog_hash
from tunedb.index.retrieval import features
from tunedb.index.support.fsutil import atomic_write_bytes, file_lock

if TYPE_CHECKING:
    from tunedb.index.retrieval.source import EntrySource

FORMAT = "tunedb-vectors"
FORMAT_VERSION = 1
INDEX_KINDS = ("flat", "ivf", "hnsw")
APPROX_KIND = "ivf"        # what auto picks above FLAT_MAX
FLAT_MAX = 50_000          # auto: exact flat index up to this many entries, APPROX_KIND above
HNSW_M = 32                # HNSW graph degree
EF_CONSTRUCTION = 80       # HNSW build beam
EF_SEARCH = 64             # HNSW search beam (raised to k when k is larger)
IVF_LISTS_PER_SQRT = 1.5   # IVF: nlist = this * sqrt(rows trained on)
IVF_TRAIN_PER_LIST = 32    # IVF: k-means sample rows per list
IVF_NITER = 10             # IVF: k-means iterations
IVF_NPROBE = 4             # IVF: lists searched per query (more for large k, selective filters)
IVF_REFIT_GROWTH = 2.0     # IVF: re-fit the lists when the index holds this many times its training rows
EXACT_SUBSET = 4_096       # filtered queries whose candidate subset is this small are answered exactly
DELTA_MIN = 10_000         # delta rows searched exactly before they are merged into the main index
DELTA_FRACTION = 0.05
SUBDIR = "vectors"
MANIFEST = "manifest.json"


def choose_kind(n: int, kind: str | None = None) -> str:
    """Index kind for ``n`` entries: ``kind`` if given (flat/ivf/hnsw), else the
    ``TUNEDB_INDEX_KIND`` environment variable, else flat up to ``FLAT_MAX`` and ``APPROX_KIND``
    (ivf) above.  ValueError for an unknown kind."""
    k = (kind or os.environ.get("TUNEDB_INDEX_KIND") or "auto").lower()
    if k == "auto":
        return "flat" if n <= FLAT_MAX else APPROX_KIND
    if k not in INDEX_KINDS:
        raise ValueError(f"unknown index kind {k!r}: expected auto, flat, ivf or hnsw")
    return k


def ivf_nlist(n: int) -> int:
    """IVF lists for an index trained on ``n`` rows: ``IVF_LISTS_PER_SQRT * sqrt(n)``, at least 1
    and at most ``n / 8`` (every list gets a few training rows)."""
    return int(max(1, min(round(IVF_LISTS_PER_SQRT * math.sqrt(max(n, 1))), n // 8)))


def _as_matrix(x: np.ndarray, dim: int) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x.reshape(1, -1)
    if x.shape[1] != dim:
        raise ValueError(f"vectors have {x.shape[1]} dimensions, the index has {dim}")
    return x


class _Codes:
    """String -> small int codes (families, target keys) for vectorised filtering."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def encode(self, values: list[str]) -> np.ndarray:
        out = np.empty(len(values), dtype=np.int32)
        for i, v in enumerate(values):
            c = self.index.get(v)
            if c is None:
                c = self.index[v] = len(self.index)
            out[i] = c
        return out


_EMPTY = (np.zeros(0, np.int64), np.zeros(0, np.float32))


class VectorIndex:
    """Unit vectors with entry keys, searchable by inner product (see module docstring).

    ``kind``: ``flat``, ``ivf`` or ``hnsw``; ``hnsw_m`` / ``ef_construction`` / ``ef_search``
    are the HNSW parameters, ``nlist`` (None: ``ivf_nlist`` of the rows trained on) and
    ``nprobe`` the IVF ones.  ``pinned``: the kind was asked for (not chosen by ``auto``).

    Not safe for concurrent mutation; concurrent ``search`` calls are safe (a lock guards
    ``add``)."""

    def __init__(self, dim: int, kind: str, *, hnsw_m: int = HNSW_M, ef_construction: int = EF_CONSTRUCTION,
                 ef_search: int = EF_SEARCH, nlist: int | None = None, nprobe: int = IVF_NPROBE) -> None:
        if kind not in INDEX_KINDS:
            raise ValueError(f"unknown index kind {kind!r}")
        self.dim, self.kind = dim, kind
        self.hnsw_m, self.ef_construction, self.ef_search = hnsw_m, ef_construction, ef_search
        self.nlist_param, self.nlist, self.nprobe = nlist, 1, max(1, int(nprobe))
        self.n_trained = 0   # IVF: rows the lists were trained on
        self.pinned = False
        self.index = self._new_faiss()
        self.n_main = 0
        self._xb = np.zeros((0, dim), dtype=np.float32)  # IVF: row-ordered copy of the main vectors (capacity >= n_main)
        self._delta = np.zeros((0, dim), dtype=np.float32)
        self.target_keys: list[str] = []
        self.workload_keys: list[str] = []
        self.families: list[str] = []
        self._fam = _Codes()
        self._tk = _Codes()
        self.fam_codes = np.zeros(0, dtype=np.int32)
        self.tk_codes = np.zeros(0, dtype=np.int32)
        self.pos: dict[tuple[str, str], int] = {}
        self._fam_rows: dict[int, np.ndarray] = {}
        self._bitmaps: dict[tuple[str, int], tuple] = {}  # (n_main, packed bits, count, rows)
        self._main_view: np.ndarray | None = None
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ building
    def _new_faiss(self, nlist: int = 1) -> faiss.Index:
        if self.kind == "flat":
            return faiss.IndexFlatIP(self.dim)
        if self.kind == "ivf":
            idx = faiss.IndexIVFFlat(faiss.IndexFlatIP(self.dim), self.dim, nlist, faiss.METRIC_INNER_PRODUCT)
            idx.nprobe = min(self.nprobe, nlist)
            return idx
        idx = faiss.IndexHNSWFlat(self.dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        idx.hnsw.efConstruction = self.ef_construction
        idx.hnsw.efSearch = self.ef_search
        return idx

    def _fit_ivf(self, x: np.ndarray) -> None:
        """Replace the IVF main index by one trained on (a sample of) ``x`` and holding all of
        ``x`` as rows ``[0, len(x))``: spherical k-means, ``IVF_NITER`` iterations, on
        ``IVF_TRAIN_PER_LIST * nlist`` rows drawn with a fixed seed (deterministic builds)."""
        n = len(x)
        nlist = int(self.nlist_param) if self.nlist_param else ivf_nlist(n)
        nlist = max(1, min(nlist, n))
        idx = self._new_faiss(nlist)
        idx.cp.spherical = True
        idx.cp.niter = IVF_NITER
        idx.cp.min_points_per_centroid = 1  # a small sample is deliberate: no FAISS warning
        idx.cp.seed = 1234
        m = min(n, IVF_TRAIN_PER_LIST * nlist)
        sample = x if m == n else x[np.sort(np.random.default_rng(1234).choice(n, m, replace=False))]
        idx.train(np.ascontiguousarray(sample))
        idx.add(x)
        self.index, self.nlist, self.n_trained = idx, nlist, n
        self._xb = np.array(x, dtype=np.float32, order="C", copy=True)
        self._main_view = None

    @classmethod
    def build(cls, vectors: np.ndarray, target_keys: list[str], workload_keys: list[str], families: list[str],
              kind: str | None = None, **params: Any) -> "VectorIndex":
        """An index over ``vectors`` (N x dim, unit rows) and their entry keys; ``kind`` None =
        automatic (``choose_kind``); ``params``: see the class docstring."""
        x = _as_matrix(vectors, vectors.shape[1] if vectors.ndim == 2 else features.DIM)
        vi = cls(x.shape[1], choose_kind(len(x), kind), **params)
        vi._append_meta(target_keys, workload_keys, families)
        if len(x):
            if vi.kind == "ivf":
                vi._fit_ivf(x)
            else:
                vi.index.add(x)
        vi.n_main = len(x)
        return vi

    def _append_meta(self, tks: list[str], wks: list[str], fams: list[str]) -> None:
        if not (len(tks) == len(wks) == len(fams)):
            raise ValueError("target_keys, workload_keys and families must have the same length")
        base = len(self.target_keys)
        self.target_keys.extend(tks)
        self.workload_keys.extend(wks)
        self.families.extend(fams)
        self.fam_codes = np.concatenate([self.fam_codes, self._fam.encode(list(fams))])
        self.tk_codes = np.concatenate([self.tk_codes, self._tk.encode(list(tks))])
        for i, key in enumerate(zip(tks, wks)):
            self.pos[key] = base + i
        self._fam_rows.clear()

    @property
    def ntotal(self) -> int:
        return len(self.target_keys)

    def add(self, vectors: np.ndarray, target_keys: list[str], workload_keys: list[str], families: list[str]) -> bool:
        """Append rows (searchable at once, exactly, as delta rows).  Returns True when the delta
        was merged into the main FAISS index (the index file then needs rewriting)."""
        x = _as_matrix(vectors, self.dim)
        if not (len(x) == len(target_keys) == len(workload_keys) == len(families)):
            raise ValueError(f"{len(x)} vectors but {len(target_keys)}/{len(workload_keys)}/{len(families)} keys")
        with self._lock:
            self._delta = np.concatenate([self._delta, x]) if len(self._delta) else x.copy()
            self._append_meta(target_keys, workload_keys, families)
            if len(self._delta) > max(DELTA_MIN, DELTA_FRACTION * self.n_main):
                self.merge()
                return True
        return False

    def merge(self) -> None:
        """Move the delta rows into the main FAISS index: incremental insertion (HNSW graph,
        IVF lists), except that an IVF index is re-fitted over all its rows when it is empty or
        would hold more than ``IVF_REFIT_GROWTH`` times the rows it was trained on."""
        with self._lock:
            if not len(self._delta):
                return
            n_new = self.n_main + len(self._delta)
            if self.kind == "ivf" and (self.n_main == 0 or n_new > IVF_REFIT_GROWTH * max(self.n_trained, 1)):
                self._fit_ivf(self.vectors())
            else:
                self.index.add(np.ascontiguousarray(self._delta))
                if self.kind == "ivf":
                    if len(self._xb) < n_new:  # grow the row copy geometrically
                        buf = np.empty((max(n_new, int(1.5 * len(self._xb))), self.dim), dtype=np.float32)
                        buf[: self.n_main] = self._xb[: self.n_main]
                        self._xb = buf
                    self._xb[self.n_main:n_new] = self._delta
            self.n_main = n_new
            self._delta = np.zeros((0, self.dim), dtype=np.float32)
            self._main_view = None
            self._bitmaps.clear()

    # ------------------------------------------------------------------ vectors
    def _main_vectors(self) -> np.ndarray:
        """Zero-copy view of the main index's stored vectors (n_main x dim)."""
        if self._main_view is None or len(self._main_view) != self.n_main:
            if self.n_main == 0:
                self._main_view = np.zeros((0, self.dim), dtype=np.float32)
            elif self.kind == "ivf":
                self._main_view = self._xb[: self.n_main]
            else:
                store = self.index if self.kind == "flat" else faiss.downcast_index(self.index.storage)
                flat = faiss.rev_swig_ptr(store.get_xb(), self.n_main * self.dim)
                self._main_view = np.asarray(flat).reshape(self.n_main, self.dim)
        return self._main_view

    def vectors(self, rows: np.ndarray | list[int] | None = None) -> np.ndarray:
        """Copies of stored vectors (all rows when ``rows`` is None)."""
        main = self._main_vectors()
        if rows is None:
            return np.concatenate([main, self._delta]) if len(self._delta) else main.copy()
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        m = rows < self.n_main
        out[m] = main[rows[m]]
        out[~m] = self._delta[rows[~m] - self.n_main]
        return out

    def memory_bytes(self) -> int:
        """Approximate bytes held: stored vectors (IVF: the lists and the row-ordered copy),
        graph links (HNSW), list ids and centroids (IVF) and key tables."""
        n = self.ntotal
        b = n * self.dim * 4 + n * 8  # vectors + family/target codes
        if self.kind == "hnsw":
            h = self.index.hnsw
            b += h.neighbors.size() * 4 + h.levels.size() * 4 + h.offsets.size() * 8
        elif self.kind == "ivf":
            b += self.n_main * (self.dim * 4 + 8) + self.nlist * self.dim * 4 + (len(self._xb) - self.n_main) * self.dim * 4
        b += n * (2 * 81 + 8 * 2 + 100)  # two 32-char key strings, list slots, the key -> row dict entry
        return int(b)

    # ------------------------------------------------------------------ search
    def _family_rows(self, code: int) -> np.ndarray:
        r = self._fam_rows.get(code)
        if r is None:
            r = self._fam_rows[code] = np.flatnonzero(self.fam_codes == code)
        return r

    def _exact(self, q: np.ndarray, k: int, rows: np.ndarray | None, ok) -> tuple[np.ndarray, np.ndarray]:
        if rows is None:
            main = self._main_vectors()
            s = main @ q[0] if len(main) else np.zeros(0, np.float32)
            if len(self._delta):
                s = np.concatenate([s, self._delta @ q[0]])
            rows = np.arange(len(s))
        else:
            s = self.vectors(rows) @ q[0] if len(rows) else np.zeros(0, np.float32)
        keep = ok(rows)
        rows, s = rows[keep], s[keep]
        if len(s) > k:
            part = np.argpartition(-s, k - 1)[:k]
            rows, s = rows[part], s[part]
        order = np.argsort(-s, kind="stable")
        return rows[order].astype(np.int64), s[order].astype(np.float32)

    def _ivf_search(self, q: np.ndarray, kk: int, sel: faiss.IDSelector | None, sel_frac: float
                    ) -> tuple[np.ndarray, np.ndarray]:
        """IVF search of ``kk`` rows: ``nprobe`` lists, times ``sqrt(kk / 10)`` for large ``kk`` and
        ``sqrt(0.1 / sel_frac)`` (at most 8) for filters allowing under a tenth of the rows;
        a search that finds fewer than ``kk`` rows is repeated with 4x the lists, up to all of
        them (which is exhaustive, hence exact)."""
        scale = max(1.0, math.sqrt(kk / 10.0)) * min(8.0, max(1.0, math.sqrt(0.1 / max(sel_frac, 1e-9))))
        nprobe = min(self.nlist, max(1, math.ceil(self.nprobe * scale)))
        while True:
            params = faiss.SearchParametersIVF()
            params.nprobe = nprobe
            if sel is not None:
                params.sel = sel
            d, i = self.index.search(q, kk, params=params)
            m = i[0] >= 0
            if int(m.sum()) >= kk or nprobe >= self.nlist:
                return i[0][m].astype(np.int64), d[0][m]
            nprobe = min(self.nlist, nprobe * 4)

    def _faiss(self, q: np.ndarray, kk: int) -> tuple[np.ndarray, np.ndarray]:
        kk = min(kk, self.n_main)
        if kk <= 0:
            return _EMPTY
        if self.kind == "ivf":
            return self._ivf_search(q, kk, None, 1.0)
        if self.kind == "hnsw":
            params = faiss.SearchParametersHNSW()
            params.efSearch = max(self.ef_search, kk)
            d, i = self.index.search(q, kk, params=params)
        else:
            d, i = self.index.search(q, kk)
        m = i[0] >= 0
        return i[0][m].astype(np.int64), d[0][m]

    def search(self, q: np.ndarray, k: int, *, family: str | None = None, exclude_target: str | None = None,
               skip_rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Rows and inner products of the ``k`` best rows for query ``q`` (descending).

        ``family``: only rows of that workload family; ``exclude_target``: no rows of that
        target_key; ``skip_rows``: row numbers never returned.  Filters run inside FAISS (an
        ``IDSelector`` built from cached per-family / per-target bitmaps, so a query costs no
        pass over all rows); exact for a flat index and for a family of at most
        ``EXACT_SUBSET`` rows (numpy over those rows); an HNSW walk that finds fewer than ``k``
        allowed rows falls back to exact search, an IVF search widens to more lists."""
        q = _as_matrix(q, self.dim)
        n = self.ntotal
        if k <= 0 or n == 0:
            return _EMPTY
        fam_code = None
        if family is not None:
            fam_code = self._fam.index.get(family)
            if fam_code is None:
                return _EMPTY
        ex_code = self._tk.index.get(exclude_target) if exclude_target is not None else None
        skip = np.asarray(skip_rows, dtype=np.int64) if skip_rows is not None and len(skip_rows) else None

        def ok(rows: np.ndarray) -> np.ndarray:
            m = np.ones(len(rows), dtype=bool)
            if fam_code is not None:
                m &= self.fam_codes[rows] == fam_code
            if ex_code is not None:
                m &= self.tk_codes[rows] != ex_code
            if skip is not None:
                m &= ~np.isin(rows, skip)
            return m

        filtered = fam_code is not None or ex_code is not None or skip is not None
        with self._lock:
            subset = self._family_rows(fam_code) if fam_code is not None else None
            if subset is not None and len(subset) <= EXACT_SUBSET:
                return self._exact(q, k, subset, ok)
            if not filtered:
                rows, s = self._faiss(q, k)
            else:
                rows, s = self._faiss_filtered(q, k, fam_code, ex_code, skip)
                if len(rows) < k and self.kind == "hnsw":
                    # the graph walk found too few rows passing the filters: answer exactly
                    main_rows = subset[subset < self.n_main] if subset is not None else np.arange(self.n_main)
                    rows, s = self._exact(q, k, main_rows, ok)
            if len(self._delta):
                r2, s2 = self._exact(q, k, np.arange(self.n_main, self.ntotal), ok)
                rows, s = np.concatenate([rows, r2]), np.concatenate([s, s2])
            order = np.argsort(-s, kind="stable")[:k]
            return rows[order], s[order]

    def _bitmap(self, what: str, code: int) -> tuple[np.ndarray, int, np.ndarray | None]:
        """(packed little-endian bitmap over the main rows, rows set, the main rows themselves
        for a target) of family ``code`` (``what="f"``) or target ``code`` (``"t"``); cached
        until the main rows change."""
        hit = self._bitmaps.get((what, code))
        if hit is not None and hit[0] == self.n_main:
            return hit[1], hit[2], hit[3]
        codes = self.fam_codes if what == "f" else self.tk_codes
        mask = codes[: self.n_main] == code
        bits = np.packbits(mask, bitorder="little")
        rows = np.flatnonzero(mask) if what == "t" else None
        cnt = int(np.count_nonzero(mask))
        self._bitmaps[(what, code)] = (self.n_main, bits, cnt, rows)
        return bits, cnt, rows

    def _selector(self, fam_code: int | None, ex_code: int | None, skip: np.ndarray | None
                  ) -> tuple[faiss.IDSelector | None, int, list]:
        """(FAISS selector of the main rows the filters allow, how many it allows, the objects
        it points into, which the caller keeps alive while it searches)."""
        n = self.n_main
        keep: list = []
        parts: list = []
        allowed = n
        if fam_code is not None:
            bits, allowed, _ = self._bitmap("f", fam_code)
            parts.append(faiss.IDSelectorBitmap(n, faiss.swig_ptr(bits)))
            keep.append(bits)
        if ex_code is not None:
            bits, cnt, t_rows = self._bitmap("t", ex_code)
            if cnt:
                if fam_code is not None:
                    cnt = int(np.count_nonzero(self.fam_codes[t_rows] == fam_code))
                allowed -= cnt
                inner = faiss.IDSelectorBitmap(n, faiss.swig_ptr(bits))
                parts.append(faiss.IDSelectorNot(inner))
                keep += [bits, inner]
        if skip is not None:
            sk = np.unique(skip[(skip >= 0) & (skip < n)])
            if fam_code is not None:
                sk = sk[self.fam_codes[sk] == fam_code]
            if ex_code is not None:
                sk = sk[self.tk_codes[sk] != ex_code]
            if len(sk):
                allowed -= len(sk)
                inner = faiss.IDSelectorBatch(sk)
                parts.append(faiss.IDSelectorNot(inner))
                keep += [sk, inner]
        sel = parts[0] if parts else None
        for p in parts[1:]:
            keep.append(sel)
            sel = faiss.IDSelectorAnd(sel, p)
        keep += parts
        return sel, allowed, keep

    def _faiss_filtered(self, q: np.ndarray, k: int, fam_code, ex_code, skip) -> tuple[np.ndarray, np.ndarray]:
        """FAISS search of the main index restricted by an ``IDSelector`` (exact for flat; for
        HNSW the search beam, for IVF the lists searched grow as the filter gets more selective)."""
        if self.n_main == 0:
            return _EMPTY
        sel, allowed, keep = self._selector(fam_code, ex_code, skip)
        if allowed <= 0:
            return _EMPTY
        kk = min(k, allowed)
        sel_frac = allowed / self.n_main
        if self.kind == "ivf":
            out = self._ivf_search(q, kk, sel, sel_frac)
            del keep
            return out
        if self.kind == "hnsw":
            params = faiss.SearchParametersHNSW()
            params.efSearch = int(min(4096, max(self.ef_search, kk, 2 * kk / sel_frac)))
        else:
            params = faiss.SearchParameters()
        params.sel = sel
        d, i = self.index.search(q, kk, params=params)
        del keep
        m = i[0] >= 0
        return i[0][m].astype(np.int64), d[0][m]


# ====================================================================== persistence
def _crc(path: Path) -> tuple[int, int]:
    """(CRC-32, size in bytes) of a file."""
    c, n = 0, 0
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 22)
            if not b:
                break
            c = zlib.crc32(b, c)
            n += len(b)
    return c, n


def _emb_table(x: np.ndarray, tks: list[str], wks: list[str], fams: list[str]) -> pa.Table:
    flat = pa.array(np.ascontiguousarray(x, dtype=np.float32).reshape(-1), pa.float32())
    vec = pa.FixedSizeListArray.from_arrays(flat, x.shape[1] if x.ndim == 2 else features.DIM)
    return pa.table({"target_key": pa.array(tks, pa.string()), "workload_key": pa.array(wks, pa.string()),
                     "family": pa.array(fams, pa.string()), "vector": vec})


def _write_file(path: Path, writer) -> dict:
    tmp = path.with_name(f"_tmp-{uuid.uuid4().hex[:12]}-{path.name}")
    try:
        writer(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    crc, size = _crc(path)
    return {"file": path.name, "crc": crc, "bytes": size}


@functools.lru_cache(maxsize=1)
def _code_hash() -> str:
    """Hash of the feature code (features.py, catalog.py): an edited formula without a
    FEATURE_VERSION bump still invalidates stored vectors."""
    h = hashlib.blake2b(digest_size=8)
    for mod in (features, catalog):
        try:
            h.update(Path(mod.__file__).read_bytes())
        except OSError:
            pass
    return h.hexdigest()


def _expected_meta(dim: int) -> dict:
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "feature_version": features.FEATURE_VERSION,
            "catalog": catalog_hash(), "features_code": _code_hash(), "dim": dim,
            # local presets are resolved through this machine's CPUID: another host re-embeds
            "host_cpuid": catalog.local_cpuid()}


MAX_PARTS = 16  # embedding part files before they are rewritten as one


def save(vi: VectorIndex, d: Path, *, full: bool, manifest: dict | None) -> dict:
    """Write ``vi`` to directory ``d``: everything (``full``) or only the rows not yet in
    ``manifest``'s parts plus a new manifest (the parts are rewritten as one when there are
    more than ``MAX_PARTS``).  Returns the new manifest.  Caller holds the lock."""
    d.mkdir(parents=True, exist_ok=True)
    gen = f"{time.time_ns():x}"
    if not full and manifest is not None and len(manifest["parts"]) >= MAX_PARTS:
        x = vi.vectors()
        part = _write_file(d / f"emb-{gen}-0000.parquet",
                           lambda p: pq.write_table(_emb_table(x, vi.target_keys, vi.workload_keys, vi.families), p))
        part["rows"] = len(x)
        manifest = {**manifest, "parts": [part]}
    if full or manifest is None:
        x = vi.vectors()
        part = _write_file(d / f"emb-{gen}-0000.parquet",
                           lambda p: pq.write_table(_emb_table(x, vi.target_keys, vi.workload_keys, vi.families), p))
        part["rows"] = len(x)
        parts = [part]
        idx = _write_file(d / f"main-{gen}.faiss", lambda p: faiss.write_index(vi.index, str(p)))
    else:
        parts = list(manifest["parts"])
        have = sum(p["rows"] for p in parts)
        if have < vi.ntotal:
            rows = np.arange(have, vi.ntotal)
            x = vi.vectors(rows)
            sl = slice(have, vi.ntotal)
            part = _write_file(d / f"emb-{gen}-{len(parts):04d}.parquet", lambda p: pq.write_table(
                _emb_table(x, vi.target_keys[sl], vi.workload_keys[sl], vi.families[sl]), p))
            part["rows"] = len(rows)
            parts.append(part)
        idx = manifest["index"]
    man = {**_expected_meta(vi.dim), "kind": vi.kind, "pinned": vi.pinned, "n_main": vi.n_main, "n_total": vi.ntotal,
           "params": {"hnsw_m": vi.hnsw_m, "ef_construction": vi.ef_construction, "ef_search": vi.ef_search,
                      "nlist": vi.nlist, "nprobe": vi.nprobe, "n_trained": vi.n_trained},
           "parts": parts, "index": idx, "written_at": time.time()}
    atomic_write_bytes(d / MANIFEST, json.dumps(man, indent=1).encode())
    keep = {p["file"] for p in parts} | {idx["file"], MANIFEST, ".lock"}
    for f in d.iterdir():
        if f.name not in keep and not f.name.startswith("_tmp-"):
            try:
                f.unlink()
            except OSError:
                pass
    return man


def load(d: Path) -> tuple[VectorIndex, dict] | None:
    """The index stored in ``d`` and its manifest, or None when missing, corrupt, truncated,
    stale in format/feature_version/catalog, or inconsistent.  When only the FAISS file is
    absent, the index is built from the stored (CRC-checked) vectors.  Never raises for bad
    files."""
    try:
        man = json.loads((d / MANIFEST).read_text())
        exp = _expected_meta(features.DIM)
        if any(man.get(k) != v for k, v in exp.items()) or man.get("kind") not in INDEX_KINDS:
            return None
        tables = []
        for p in man["parts"]:
            path = d / p["file"]
            if _crc(path) != (p["crc"], p["bytes"]):
                return None
            t = pq.read_table(path)
            if t.num_rows != p["rows"]:
                return None
            tables.append(t)
        t = pa.concat_tables(tables) if tables else _emb_table(np.zeros((0, features.DIM), np.float32), [], [], [])
        n_main = int(man["n_main"])
        if t.num_rows < n_main:
            return None
        prm = man.get("params", {})
        kind = man["kind"]
        ip = d / man["index"]["file"]
        if not ip.exists():  # (a published snapshot's index is never installed: rebuilt from its vectors)
            return _from_vectors(t, n_main, kind, prm, bool(man.get("pinned", False))), man
        if _crc(ip) != (man["index"]["crc"], man["index"]["bytes"]):
            return None
        index = faiss.read_index(str(ip))
        if index.ntotal != n_main or index.d != features.DIM:
            return None
        if not isinstance(index, {"flat": faiss.IndexFlatIP, "ivf": faiss.IndexIVFFlat, "hnsw": faiss.IndexHNSWFlat}[kind]):
            return None
        vi = VectorIndex(features.DIM, kind, hnsw_m=int(prm.get("hnsw_m", HNSW_M)),
                         ef_construction=int(prm.get("ef_construction", EF_CONSTRUCTION)),
                         ef_search=int(prm.get("ef_search", EF_SEARCH)), nprobe=int(prm.get("nprobe", IVF_NPROBE)))
        vi.index = index
        vi.n_main = n_main
        vi.pinned = bool(man.get("pinned", False))
        vi._append_meta(t.column("target_key").to_pylist(), t.column("workload_key").to_pylist(),
                        t.column("family").to_pylist())
        if t.num_rows > n_main or kind == "ivf":
            vec = t.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
            x = np.asarray(vec, dtype=np.float32).reshape(-1, features.DIM)
            vi._delta = np.ascontiguousarray(x[n_main:])
            if kind == "ivf":
                if n_main and not index.is_trained:
                    return None
                vi._xb = np.ascontiguousarray(x[:n_main])
                vi.nlist = int(index.nlist)
                vi.n_trained = int(prm.get("n_trained", n_main))
        return vi, man
    except Exception:  # noqa: BLE001 - any damage to derived data means "rebuild"
        return None


def _from_vectors(t: pa.Table, n_main: int, kind: str, prm: dict, pinned: bool) -> VectorIndex:
    """An index of ``kind`` built from the stored vectors ``t`` (the first ``n_main`` rows in
    the main index, the rest in the delta): what :func:`load` does when the index file is
    absent, e.g. for a published snapshot, whose FAISS file is never parsed (only its verified
    vectors are read)."""
    vec = t.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    x = np.asarray(vec, dtype=np.float32).reshape(-1, features.DIM)
    tks, wks, fams = (t.column(c).to_pylist() for c in ("target_key", "workload_key", "family"))
    vi = VectorIndex.build(x[:n_main], tks[:n_main], wks[:n_main], fams[:n_main], kind=kind,
                           hnsw_m=int(prm.get("hnsw_m", HNSW_M)), ef_construction=int(prm.get("ef_construction", EF_CONSTRUCTION)),
                           ef_search=int(prm.get("ef_search", EF_SEARCH)), nprobe=int(prm.get("nprobe", IVF_NPROBE)))
    vi.pinned = pinned
    if len(x) > n_main:
        vi._append_meta(tks[n_main:], wks[n_main:], fams[n_main:])
        vi._delta = np.ascontiguousarray(x[n_main:])
    return vi


# ============================================================================ DB sync
@dataclass
class _State:
    vi: VectorIndex
    manifest: dict | None
    manifest_mtime: int | None
    files: tuple
    token: tuple
    entries: pa.Table
    entry_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # entries row -> index row
    index_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # index row -> entries row


_CACHE: dict[str, _State] = {}
_CACHE_LOCK = threading.Lock()


def _mtime(p: Path) -> int | None:
    try:
        return p.stat().st_mtime_ns
    except OSError:
        return None


def _files_sig(d: Path, man: dict | None) -> tuple:
    """(name, size, mtime) of the manifest and the files it names: a changed, truncated or
    deleted file changes it, so the next query reloads (and rebuilds when it is damaged)."""
    names = [MANIFEST]
    if man:
        names += [p["file"] for p in man.get("parts", [])] + [man.get("index", {}).get("file", "")]
    out = []
    for n in names:
        try:
            s = (d / n).stat()
            out.append((n, s.st_size, s.st_mtime_ns))
        except OSError:
            out.append((n, -1, -1))
    return tuple(out)


def _embed_entries(entries: pa.Table, rows: np.ndarray) -> np.ndarray:
    tj = entries.column("target").to_pylist()
    wj = entries.column("workload").to_pylist()
    out = np.empty((len(rows), features.DIM), dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for j, i in enumerate(rows.tolist()):
            out[j] = features.entry_vector(features.hardware_vector(json.loads(tj[i])),
                                           features.workload_vector(json.loads(wj[i])))
    return out


def sync(db: EntrySource, kind: str | None = None) -> _State:
    """The vector index of ``db``, matching ``db.entries()`` (built, loaded, extended or
    rebuilt as needed) - see the module docstring.  ``kind``: None/``auto``, ``flat``, ``ivf``, ``hnsw``.
    Its files live in ``db.cache_dir() / "vectors"``; ``db.change_token()`` says when to look again."""
    d = Path(db.cache_dir()) / SUBDIR
    key = str(d.resolve())
    requested = (kind or os.environ.get("TUNEDB_INDEX_KIND") or "auto").lower()
    choose_kind(1, requested)  # validates
    with _CACHE_LOCK:
        st = _CACHE.get(key)
        token = db.change_token()
        mt = _mtime(d / MANIFEST)
        if st is not None and _still_valid(st, token, mt, d, requested):
            return st
        entries = db.entries()
        keys = _entry_keys(entries)
        vi, man = _reusable(st, d, mt)
        want = choose_kind(entries.num_rows, None if requested == "auto" else requested)
        vi, old, full, dirty = _extend(vi, entries, keys, requested, want)
        if vi is None:
            vi = _rebuild(entries, keys, old, want)
            vi.pinned = requested != "auto"
        man, mt_new = _persist(vi, d, man, mt, full=full, dirty=dirty)
        st = _CACHE[key] = _new_state(vi, man, mt_new, d, token, entries, keys)
        return st


_Keys = tuple[list[str], list[str], list[str]]  # target keys, workload keys, families of the entries rows


def _entry_keys(entries: pa.Table) -> _Keys:
    """(target keys, workload keys, families) of the rows of ``db.entries()``."""
    return (entries.column("target_key").to_pylist(), entries.column("workload_key").to_pylist(),
            entries.column("family").to_pylist())


def _still_valid(st: _State, token: tuple, mt: int | None, d: Path, requested: str) -> bool:
    """Whether the cached state answers as it is: same store token, same files, the kind asked for."""
    return (st.token == token and st.manifest_mtime == mt and st.files == _files_sig(d, st.manifest)
            and (requested == "auto" or st.vi.kind == requested))


def _reusable(st: _State | None, d: Path, mt: int | None) -> tuple[VectorIndex | None, dict | None]:
    """(index, manifest) to start from: the cached one when its files are unchanged, else what
    ``load`` reads from ``d`` (``(None, None)`` when nothing usable is stored)."""
    if st is not None and st.files == _files_sig(d, st.manifest) and st.manifest_mtime == mt and mt is not None:
        return st.vi, st.manifest
    loaded = load(d)
    return loaded if loaded is not None else (None, None)


def _extend(vi: VectorIndex | None, entries: pa.Table, keys: _Keys, requested: str, want: str
            ) -> tuple[VectorIndex | None, VectorIndex | None, bool, bool]:
    """Bring ``vi`` up to ``entries`` by adding the new entries: ``(index, old, full, dirty)``.

    The index is None when it must be rebuilt (no index, entries removed, another kind asked for,
    under ``auto`` an approximate index of another kind that was not asked for - e.g. an HNSW
    index stored before IVF became the automatic choice - or a flat index outgrew ``FLAT_MAX``);
    ``old`` is then the index whose vectors a rebuild may reuse.  ``full``: the stored files
    must be rewritten; ``dirty``: rows were added."""
    if vi is None:
        return None, None, True, False
    tks, wks, fams = keys
    current = set(zip(tks, wks))
    removed = len(vi.pos) > len(current) or any(k not in current for k in vi.pos)
    stale_auto = requested == "auto" and not vi.pinned and vi.kind not in ("flat", want)
    if removed or stale_auto or (requested != "auto" and vi.kind != requested):
        return None, vi, True, False
    new_rows = np.array([i for i, k in enumerate(zip(tks, wks)) if k not in vi.pos], dtype=np.int64)
    if not len(new_rows):
        return vi, None, False, False
    merged = vi.add(_embed_entries(entries, new_rows), [tks[i] for i in new_rows], [wks[i] for i in new_rows],
                    [fams[i] for i in new_rows])
    if merged and vi.kind == "flat" and want != "flat" and requested == "auto":
        return None, vi, True, True
    return vi, None, merged, True


def _rebuild(entries: pa.Table, keys: _Keys, old: VectorIndex | None, want: str) -> VectorIndex:
    """A new index of kind ``want`` over ``entries``, reusing ``old``'s vectors of entries still there."""
    tks, wks, fams = keys
    x = np.empty((entries.num_rows, features.DIM), dtype=np.float32)
    src = np.array([old.pos.get(k, -1) for k in zip(tks, wks)] if old is not None else [-1] * entries.num_rows,
                   dtype=np.int64)
    have = src >= 0
    if have.any():
        x[have] = old.vectors(src[have])
    need_a = np.flatnonzero(~have)
    if len(need_a):
        x[need_a] = _embed_entries(entries, need_a)
    return VectorIndex.build(x, tks, wks, fams, want)


def _persist(vi: VectorIndex, d: Path, man: dict | None, mt: int | None, *, full: bool, dirty: bool
             ) -> tuple[dict | None, int | None]:
    """Write what changed of ``vi`` to ``d`` under the lock: ``(manifest, its mtime)``; the mtime is
    None when another process wrote meanwhile or the write failed (a warning: the in-memory index
    still answers), so the next query loads again."""
    if not (dirty or full or man is None):
        return man, mt
    try:
        d.mkdir(parents=True, exist_ok=True)
        with file_lock(d / ".lock", timeout_s=60.0):
            if _mtime(d / MANIFEST) == mt or full or man is None:
                man = save(vi, d, full=full or man is None, manifest=man)
                return man, _mtime(d / MANIFEST)
            return man, None  # another process wrote meanwhile: reload next time
    except (OSError, TimeoutError) as e:
        warnings.warn(f"could not write the vector index to {d}: {e}; using it from memory", RuntimeWarning,
                      stacklevel=3)  # the caller of sync
        return man, None


def _new_state(vi: VectorIndex, man: dict | None, mt: int | None, d: Path, token: tuple, entries: pa.Table,
               keys: _Keys) -> _State:
    """The cached state of ``vi``: entries row <-> index row maps and what the files looked like."""
    tks, wks, _ = keys
    index_rows = np.array([vi.pos.get(k, -1) for k in zip(tks, wks)], dtype=np.int64)
    inv = np.full(vi.ntotal, -1, dtype=np.int64)
    ok_rows = index_rows >= 0
    inv[index_rows[ok_rows]] = np.flatnonzero(ok_rows)
    return _State(vi=vi, manifest=man, manifest_mtime=mt, files=_files_sig(d, man) if mt else (), token=token,
                  entries=entries, entry_rows=index_rows, index_rows=inv)


def clear_cache() -> None:
    """Forget every in-process index (the next query reloads from disk)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def recall_at_k(approx: np.ndarray, exact_rows: np.ndarray, exact_scores: np.ndarray, approx_scores: np.ndarray,
                k: int, tol: float = 1e-6) -> float:
    """Recall@k that tolerates ties: an approximate hit counts when it is one of the exact
    top-k rows or its score is at least the exact k-th score minus ``tol``."""
    if k <= 0 or len(exact_rows) == 0:
        return 1.0
    kth = float(exact_scores[min(k, len(exact_scores)) - 1])
    ex = set(exact_rows[:k].tolist())
    hits = sum(1 for r, s in zip(approx[:k].tolist(), approx_scores[:k].tolist()) if r in ex or s >= kth - tol)
    return hits / min(k, len(exact_rows))


__all__ = ["VectorIndex", "choose_kind", "ivf_nlist", "sync", "load", "save", "clear_cache", "recall_at_k",
           "FLAT_MAX", "INDEX_KINDS"]
