"""Building Records from parsed log entries on the import hot path: normalised, canonical target
and workload objects computed once (:class:`Prepared`), :func:`make_record` (equal to ``Record(...)``
without re-normalising them), deterministic record ids (:func:`stable_record_id`), timestamps in
UTC and checked costs."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tunedb.index.model.keys import canonical_json_normalised, hash64, key_of, key_of_text, normalise
from tunedb.index.model.record import (
    MAX_RECORD_BYTES,
    Record,
    checked_json,
    cost_tuple,
    record_too_big,
    target_display_name,
    text_problem,
    this_host,
)
from tunedb.transfer.interop.outcomes import ImportCapError


def fast_normalise(value: Any, what: str = "$") -> Any:
    """``tunedb.index.model.keys.normalise(value, what)``: the project's one normaliser (fast on JSON-loaded
    data; ValueError naming the path for anything that is not plain JSON data, NaN/inf included).
    Kept under this name for the parsers."""
    return normalise(value, what)


def canon(value: Any) -> str:
    """Canonical JSON text of already normalised data (``tunedb.index.model.keys.canonical_json_normalised``,
    the same text as ``tunedb.index.model.keys.canonical_json``)."""
    return canonical_json_normalised(value)


_canon = canonical_json_normalised


@dataclass(frozen=True)
class Prepared:
    """A normalised JSON object with its canonical text and key (computed once, shared)."""

    value: dict
    text: str
    key: str
    name: str = ""

    @classmethod
    def of(cls, obj: Mapping[str, Any], what: str) -> Prepared:
        if not isinstance(obj, Mapping):
            raise ValueError(f"field '{what}' must be a JSON object")
        v = fast_normalise(dict(obj), what)
        text = _canon(v)
        why = text_problem(text)
        if why is not None:
            raise ValueError(f"field '{what}' {why}")
        name = target_display_name(v) if what == "target" else ""
        if what == "workload" and (not isinstance(v.get("family"), str) or not v["family"]):
            raise ValueError("field 'workload' needs a non-empty string 'family'")
        return cls(v, text, key_of_text(text), name)


_RECORD_FIELDS = {f.name for f in dataclasses.fields(Record)}
_FAST_FIELDS = {"target", "workload", "config", "costs", "status", "error", "compile_s", "wall_s", "timestamp",
                "source", "session", "meta", "record_id", "target_name", "target_key", "workload_key",
                "config_key", "target_json", "workload_json", "config_json", "meta_json", "lookup_key", "entry_key",
                "host", "origin"}
FAST_PATH = _RECORD_FIELDS == _FAST_FIELDS  # fall back to the constructor if Record changes shape


_PAIR_HASHES: dict[tuple[str, str], tuple[int, Any]] = {}


def _pair_hashes(target_key: str, workload_key: str) -> tuple[int, Any]:
    """(``hash64(target_key, workload_key)``, BLAKE2b state that has hashed the first two parts of
    ``hash64(target_key, workload_key, config_key)``): the ``entry_key``/``lookup_key`` columns."""
    if len(_PAIR_HASHES) > 4096:
        _PAIR_HASHES.clear()
    pre = hashlib.blake2b(f"{target_key}\0{workload_key}\0".encode(), digest_size=8)
    out = _PAIR_HASHES[(target_key, workload_key)] = (hash64(target_key, workload_key), pre)
    return out


def make_record(target: Prepared, workload: Prepared, config: Mapping[str, Any], *, costs: Iterable[float] = (),
                status: str = "ok", error: str = "", compile_s: float | None = None,
                wall_s: float | None = None, timestamp: _dt.datetime | None = None, source: str,
                meta: Mapping[str, Any] | None = None, record_id: str, session: str = "",
                target_name: str = "", meta_normalised: bool = False, host: str | None = None,
                origin: str = "", meta_json: str | None = None) -> Record:
    """Build a Record equal to ``Record(...)`` with the same arguments, without re-normalising the
    shared target/workload for every record (import hot path).  ``record_id`` is required;
    ``meta_normalised`` says ``meta`` already went through :func:`fast_normalise`; ``host`` None
    is this machine, as for ``Record`` (``Format.parse`` sets ``origin`` to the imported file).
    ``meta_json``, with ``meta_normalised``, is the canonical JSON of ``meta`` when the caller
    already has it (it must equal ``canon(meta)``; the Kernel Tuner importer builds it with the
    record-id text so each float is formatted once).

    The record is validated (``Record.validate``): raises ValueError for data that ``Record`` or
    a commit would reject (non-JSON or too deeply nested config/meta, a lone surrogate in any
    text, bool/str or non-finite costs, unknown status, ``ok`` without costs).
    """
    meta = dict(meta or {})
    if not FAST_PATH:  # pragma: no cover - only when Record gains/loses fields
        rec = Record(target.value, workload.value, dict(config), costs=tuple(costs), status=status, error=error,
                     compile_s=compile_s, wall_s=wall_s, timestamp=timestamp, source=source, meta=meta,
                     record_id=record_id, session=session, target_name=target_name, host=host, origin=origin)
        rec.validate()
        return rec
    if not isinstance(config, Mapping):
        raise ValueError(f"record {record_id}: field 'config' must be a JSON object, got {type(config).__name__}")
    try:
        cfg = fast_normalise(config if type(config) is dict else dict(config), "config")  # a fresh copy
    except ValueError as e:
        raise ValueError(f"record {record_id}: field 'config' is not plain JSON data: {e}") from None
    c = cost_tuple(costs, record_id)  # bool and str are not numbers (as for Record)
    ts = timestamp if timestamp is not None else _dt.datetime.now(_dt.timezone.utc)
    if not isinstance(ts, _dt.datetime):
        raise ValueError(f"record {record_id}: field 'timestamp' must be a datetime, got {type(ts).__name__}")
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=_dt.timezone.utc)
    cj = checked_json(_canon(cfg), "config", record_id)
    ck = key_of_text(cj)
    pair = _PAIR_HASHES.get((target.key, workload.key)) or _pair_hashes(target.key, workload.key)
    lookup = pair[1].copy()
    lookup.update(ck.encode())
    r = object.__new__(Record)
    d = r.__dict__
    d.update(target=target.value, workload=workload.value, config=cfg, costs=c, status=status, error=error,
             compile_s=compile_s, wall_s=wall_s, timestamp=ts, source=source, session=session,
             meta=meta if meta_normalised else fast_normalise(meta, "meta"), record_id=record_id,
             target_name=target_name or target.name, target_key=target.key, workload_key=workload.key,
             config_key=ck, target_json=target.text, workload_json=workload.text, config_json=cj,
             lookup_key=int.from_bytes(lookup.digest(), "little", signed=True), entry_key=pair[0],
             host=this_host() if host is None else host, origin=origin)
    if meta_json is not None and meta_normalised and d["meta"]:
        d["meta_json"] = meta_json
    else:
        d["meta_json"] = _canon(d["meta"]) if d["meta"] else "{}"
    if r.size_bytes() > MAX_RECORD_BYTES:
        raise ImportCapError(f"record {record_id}: {record_too_big(r.size_bytes())}: over the import cap, so "
                             f"nothing is imported")
    r.validate()
    return r


def stable_record_id(fmt: str, target_key: str, original: Any, seen: Counter, *, text: str | None = None) -> str:
    """Deterministic record_id (32 lowercase hex) of an imported line/entry.

    ``original`` is the line's JSON value (or the entry and its cache key), or ``text`` its
    canonical JSON when already computed; ``seen`` counts
    identical originals already met in the same file, so a line repeated in a file stays two
    records while re-importing the file reproduces the same ids.  ValueError (one line) when
    the line holds a lone surrogate (a JSON ``\\udcff`` escape): no id, no record.
    """
    if text is None:
        text = _canon(fast_normalise(original))
    why = text_problem(text)
    if why is not None:  # (the fields' own checks name the field; this is the last line of defence)
        raise ValueError(f"the {fmt} entry {why}")
    basis = key_of_text(text)
    n = seen[basis]
    seen[basis] += 1
    return key_of([fmt, target_key, basis, n])


def to_utc(ts: Any) -> _dt.datetime | None:
    """A UNIX time (seconds) or ISO 8601 text -> aware UTC datetime; None when absent/unusable."""
    if ts is None or isinstance(ts, bool):
        return None
    if isinstance(ts, (int, float)):
        if not math.isfinite(ts) or ts < 0 or ts > 253402300799:
            return None
        return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc)
    if isinstance(ts, str):
        try:
            d = _dt.datetime.fromisoformat(ts.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
        return d.replace(tzinfo=_dt.timezone.utc) if d.tzinfo is None else d.astimezone(_dt.timezone.utc)
    return None


def check_costs(costs: Iterable[Any]) -> list[float]:
    """Costs as floats; ValueError unless every cost is a finite number >= 0."""
    out = []
    for c in costs:
        if isinstance(c, bool) or not isinstance(c, (int, float)):
            raise ValueError(f"cost {c!r} is not a number")
        c = float(c)
        if not math.isfinite(c) or c < 0:
            raise ValueError(f"cost {c!r} is not a finite number >= 0")
        out.append(c)
    return out


__all__ = ["FAST_PATH", "Prepared", "canon", "check_costs", "fast_normalise", "make_record", "stable_record_id",
           "to_utc"]
