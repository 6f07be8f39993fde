"""The family's base cost model, persisted in the store's ``cache_dir()`` and reused across runs.

A warm tuning run ranks candidates with a model of the family's DB records (every target's)
corrected by the run's own evaluations (``CorrectedModel``).  Fitting the base model is the
expensive part (reading and featurising the family's records, LightGBM on up to
``max_records`` rows: seconds at 100k records), so it is fitted once per DB content and kept:

* in memory, per process (``clear_memory``), and
* on disk, ``db.cache_dir() / "costmodel" / <family slug>-<params hash>.json``: one JSON object
  ``{"format", "version", "family", "params", "signature", "rows", "targets",
  "heldout_spearman", "features", "kind", "model_params", "state", "checksum"}``.  Derived data
  only: deleting it loses nothing.  A file that is missing, unreadable, truncated, of another
  format version, of other parameters or whose checksum does not match is ignored (and
  rewritten by the next fit); a write that fails (read-only DB) only skips persisting.

Keyed by content.  The ``signature`` of a family in a store is, per entry (target_key,
workload_key) holding the family, its live ``(records, ok_records, best_cost)`` from
``db.entries()``.  A stored model is reused while the records changed since its fit -
``changed_records`` summed over entries: the difference in ok records, or all of an entry's ok
records when its count stayed but its best cost or record count moved - stay below
``refit_fraction`` of the rows it was fitted on (so the 50 records a tuning run commits do not
force a refit of a model of 100,000); otherwise it is refitted from scratch.  A change that keeps
every entry's three numbers equal (a forget and a re-measurement of one record) is not seen
until the next change.  ``refit_fraction=0`` refits on any change.

Cost on reuse: one ``db.entries()`` (skipped in-process while ``db.change_token()`` is
unchanged), one file read and parse (tens of milliseconds for 120 trees).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import os
import re
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunedb.transfer.search.costmodel import (
    FeatureSpace,
    default_model,
    model_from_state,
    training_set,
)

if TYPE_CHECKING:
    from tunedb.index.contract.base import RecordStore

FORMAT = "tunedb-costmodel"
#: bump when the feature layout, the training rows or the file layout change
FORMAT_VERSION = 2  # 2: fitted with sample weights (noisy records down-weighted)
SUBDIR = "costmodel"
MIN_RECORDS = 20          # fewer ok records of the family than this: no base model
KEEP_FILES = 16           # model files kept per cache directory (the least recently written go)

_MEMORY: dict[str, BaseModel] = {}
_TOKENS: dict[str, tuple[Any, dict]] = {}   # cache file -> (change_token, signature) seen last
_LOCK = threading.Lock()


@dataclass
class BaseModel:
    """A fitted base model of one family and what it was fitted on.

    ``signature``: entry -> [records, ok_records, best_cost] at fit time (module docstring);
    ``rows``: training rows; ``source``: how this call got it - ``"fitted"`` (now),
    ``"disk"`` (the cache file), ``"memory"`` (this process); ``fit_s``: seconds the fit took
    when it was fitted (0 otherwise); ``changed``: records changed since the fit (0 when
    fitted now)."""

    model: Any
    family: str
    signature: dict
    rows: int
    source: str
    fit_s: float = 0.0
    changed: int = 0

    def info(self) -> dict:
        """JSON summary (``TuneResult.model["base"]``)."""
        return {"source": self.source, "rows": self.rows, "changed": self.changed}


def family_signature(entries: Any, family: str) -> dict:
    """entry ("target_key/workload_key") -> [records, ok_records, best_cost] of the rows of
    ``db.entries()`` holding ``family``."""
    import pyarrow.compute as pc

    if entries is None or entries.num_rows == 0:
        return {}
    t = entries.filter(pc.equal(entries.column("family"), family))
    out = {}
    for tk, wk, n, ok, best in zip(*(t.column(c).to_pylist() for c in
                                     ("target_key", "workload_key", "records", "ok_records", "best_cost"))):
        out[f"{tk}/{wk}"] = [int(n), int(ok), None if best is None else float(best)]
    return out


def changed_records(old: Mapping[str, Any], new: Mapping[str, Any]) -> int:
    """How many ok records differ between two signatures (see the module docstring)."""
    total = 0
    for k in set(old) | set(new):
        a = old.get(k, [0, 0, None])
        b = new.get(k, [0, 0, None])
        if a[1] != b[1]:
            total += abs(int(a[1]) - int(b[1]))
        elif a != b:
            total += int(b[1])
    return total


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:48] or "family"


def _params(family: str, model: Any, seed: int, max_records: int) -> dict:
    """What, besides the records, a base model depends on."""
    try:  # the installed version, without importing LightGBM (seconds in a fresh process)
        lgb_version = importlib.metadata.version("lightgbm")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        lgb_version = ""
    return {"family": family, "kind": type(model).__name__, "model_params": model.params(), "seed": seed,
            "max_records": max_records, "holdout": 0.2, "lightgbm": lgb_version}


def cache_file(db: RecordStore, family: str, *, seed: int = 0, max_records: int = 200_000) -> Path:
    """Where the base model of ``family`` (with these parameters) lives in ``db``'s cache dir."""
    p = _params(family, default_model(seed=seed), seed, max_records)
    h = hashlib.sha256(json.dumps(p, sort_keys=True).encode()).hexdigest()[:16]
    return Path(db.cache_dir()) / SUBDIR / f"{_slug(family)}-{h}.json"


def _checksum(doc: Mapping[str, Any]) -> str:
    body = {k: v for k, v in doc.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _load(path: Path, params: dict) -> BaseModel | None:
    """The model stored at ``path`` when it is a sound file of these parameters, else None."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    try:
        if (not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != FORMAT_VERSION
                or doc.get("params") != params or doc.get("checksum") != _checksum(doc)):
            return None
        hs = doc["heldout_spearman"]
        model = model_from_state(doc["kind"], doc["model_params"], doc["state"], FeatureSpace(list(doc["features"])),
                                 n_records=doc["rows"], targets=doc["targets"],
                                 heldout_spearman=float("nan") if hs is None else hs)
        return BaseModel(model, doc["family"], dict(doc["signature"]), int(doc["rows"]), "disk")
    except Exception:  # noqa: BLE001 - any damage means "not usable": refit
        return None


def _save(path: Path, base: BaseModel, params: dict) -> None:
    """Write ``base`` to ``path`` atomically (a temporary file renamed over it); OSError is
    swallowed (a read-only cache dir just means no persistence); old files are pruned."""
    m = base.model
    hs = m.heldout_spearman_
    doc = {"format": FORMAT, "version": FORMAT_VERSION, "family": base.family, "params": params,
           "signature": base.signature, "rows": base.rows, "targets": list(m.targets_),
           "heldout_spearman": None if not math.isfinite(hs) else hs, "features": list(m.features_.knob_columns),
           "kind": type(m).__name__, "model_params": m.params(), "state": m.state()}
    doc["checksum"] = _checksum(doc)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(doc), encoding="utf-8")
        os.replace(tmp, path)
        _prune(path.parent)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


def _prune(d: Path) -> None:
    """Keep the ``KEEP_FILES`` most recently written model files of ``d``."""
    files = sorted(d.glob("*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for p in files[KEEP_FILES:]:
        try:
            p.unlink()
        except OSError:
            pass


def fit_base(db: RecordStore, family: str, *, seed: int = 0, max_records: int = 200_000,
             entries: Any = None) -> BaseModel | None:
    """Fit the base model of ``family`` on ``db`` now (no cache): ``default_model(seed)`` on
    :func:`tunedb.transfer.search.costmodel.training_set`, with a 20 % hold-out measuring
    ``heldout_spearman_`` first.  None below ``MIN_RECORDS`` rows."""
    ents = db.entries() if entries is None else entries
    t0 = time.perf_counter()
    ts = training_set(db, family, max_records=max_records, seed=seed, entries=ents)
    if ts is None or ts.rows < MIN_RECORDS:
        return None
    model = default_model(seed=seed)
    model.features_ = ts.features
    model.fit_matrix(ts.X, ts.y, sample_weight=ts.weights, seed=seed, holdout=0.2, target_names=ts.target_names)
    return BaseModel(model, family, family_signature(ents, family), ts.rows, "fitted",
                     fit_s=time.perf_counter() - t0)


def base_model(db: RecordStore, family: str, *, seed: int = 0, max_records: int = 200_000,
               refit_fraction: float = 0.2, use_cache: bool = True) -> BaseModel | None:
    """The base model of ``family`` for ``db``: the cached one (memory, then disk) while fewer
    than ``refit_fraction`` of its rows changed since its fit (module docstring), else one fitted
    now (and persisted when ``use_cache``).  ``use_cache=False``: always fitted now, nothing read
    or written.  None when the family has fewer than ``MIN_RECORDS`` ok records.  Raises what
    the store raises; a model that fails to fit raises (the tuner catches it)."""
    if not use_cache:
        return fit_base(db, family, seed=seed, max_records=max_records)
    path = cache_file(db, family, seed=seed, max_records=max_records)
    key = str(path)
    token = db.change_token()
    with _LOCK:
        mem = _MEMORY.get(key)
        seen = _TOKENS.get(key)
    if seen is not None and seen[0] == token:
        entries, sig = None, seen[1]
    else:
        entries = db.entries()
        sig = family_signature(entries, family)
        with _LOCK:
            _TOKENS[key] = (token, sig)
    if not sig:
        return None
    params = _params(family, default_model(seed=seed), seed, max_records)
    for cand in ([mem] if mem is not None else []) + [None]:
        got = cand if cand is not None else _load(path, params)
        if got is None:
            continue
        n = changed_records(got.signature, sig)
        if n <= refit_fraction * max(got.rows, 1):
            src = "memory" if cand is not None else "disk"
            out = BaseModel(got.model, family, got.signature, got.rows, src, 0.0, n)
            with _LOCK:
                _MEMORY[key] = out
            return out
    fitted = fit_base(db, family, seed=seed, max_records=max_records, entries=entries)
    if fitted is None:
        return None
    _save(path, fitted, params)
    with _LOCK:
        _MEMORY[key] = fitted
    return fitted


def prepare(db: RecordStore, families: list[str]) -> dict[str, float]:
    """Fit (or find current) the base model of each of ``families`` now, so that the first
    tuning run after an import reuses it instead of fitting it; ``{family: seconds}`` of those
    that have one (``MIN_RECORDS`` ok records).  What ``tunedb import`` does after its commit.
    A family whose model cannot be fitted is left for the first run (which retries)."""
    import warnings

    out: dict[str, float] = {}
    for fam in families:
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():  # (a device the catalog lacks is said when a run embeds it)
                warnings.simplefilter("ignore")
                got = base_model(db, fam, seed=0)
        except Exception:  # noqa: BLE001 - a model is a cache: the import's records are committed already
            continue
        if got is not None:
            out[fam] = time.perf_counter() - t0
    return out


def clear_memory() -> None:
    """Forget the in-process models (the next call reads the cache files again)."""
    with _LOCK:
        _MEMORY.clear()
        _TOKENS.clear()

