"""One measurement R = (target, workload, config, costs).

Contract: a Record is immutable once built (frozen dataclass; its target,
workload and config are normalised copies that callers must not mutate).
Its ``record_id`` (32 hex characters, random) is fixed at construction and is
what readers de-duplicate by.  Times are seconds; ``timestamp`` is UTC.

Provenance (schema 2): ``host`` is the machine whose tunedb created the record -- ``None`` when
building means this machine (``socket.gethostname()``, computed once per process), ``""`` means
unknown and stays ``""``; ``origin`` is where the record came from beyond a measurement (the
imported file's name, the store it was copied from), ``""`` for a local measurement.  Data
that lacks them (``from_row``/``from_dict`` of schema-1 rows or exports) gets ``host=""`` and
``origin=""``, never this machine's name.

What every backend stores (checked by ``Record.validate`` and ``RecordBatch.validate``, which
every backend's ``commit`` calls, so each refuses the same input with the same one-line
``ValueError`` and stores nothing of that commit):

* text -- every text column and every string of a JSON column (object keys too) is Unicode that
  UTF-8 can encode: a lone surrogate (what Python makes of an undecodable file name) is refused,
  naming the field and the code point;
* NUL -- refused in the plain text columns (:data:`TEXT_FIELDS`; PostgreSQL text cannot hold
  one); in the JSON columns it is written escaped (``\u0000``) and round-trips;
* size -- at most :data:`MAX_RECORD_BYTES` a record (all its text and JSON columns together);
* nesting -- JSON columns nest at most ``tunedb.index.model.keys.MAX_JSON_DEPTH`` levels (refused when
  the Record is built);
* numbers -- costs are ``int``/``float`` (numpy numbers too), never ``bool`` or ``str``, finite and
  >= 0 (stored as floats); ``compile_s``/``wall_s`` likewise, an ``int`` among them at most
  :data:`MAX_EXACT_INT` (2**53: what a float64 column holds exactly on every backend).  The JSON
  columns are text on every backend, so an integer inside a config round-trips whatever its size;
* timestamp -- a ``datetime`` (naive means UTC); text is refused (``from_dict`` parses ISO 8601).
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import numbers
import re
import socket
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tunedb.index.model.keys import canonical_json, hash64, key_of_text, normalise
from tunedb.index.model.version import SCHEMA_VERSION, TUNEDB_VERSION

STATUSES = ("ok", "compile_error", "runtime_error", "wrong_result", "timeout", "invalid")
SOURCE_RE = re.compile(r"^(measured|replay|imported:[A-Za-z0-9_.-]+|migrated:.+)$")
_RID_RE = re.compile(r"[0-9a-f]{32}")
#: the record's plain text columns: none may hold a NUL character (PostgreSQL text cannot, so no
#: backend accepts one; the JSON columns escape it as \u0000 and are not affected)
TEXT_FIELDS = ("target_name", "family", "error", "host", "origin", "session", "source")
#: the largest record the contract allows, in bytes: the UTF-8 size of its JSON columns (target,
#: workload, config, meta) and text columns (error, session, source, host, origin) plus 8 bytes
#: a cost.  Every backend stores and returns a record of this size; a larger one is refused at
#: validation, on every backend.  (Real records are kilobytes: a MetaSchedule trace is under
#: 100 KiB.)
MAX_RECORD_BYTES = 4 << 20
#: the columns whose size counts towards ``MAX_RECORD_BYTES`` (as ``RECORD_SCHEMA`` names them)
SIZED_COLUMNS = ("target", "workload", "config", "meta", "error", "session", "source", "host", "origin")


#: the largest magnitude of an ``int`` in a numeric column (``compile_s``, ``wall_s``, a cost):
#: these columns are float64 on every backend, and Arrow (the bulk path of every backend)
#: converts an int only when the double holds it exactly, so every backend takes the same
#: ints: |value| <= 2**53 (a larger int is refused, never rounded on one backend only)
MAX_EXACT_INT = 2**53


def text_problem(text: str) -> str | None:
    """Why UTF-8 cannot encode ``text`` (its first lone surrogate, e.g. ``holds a lone surrogate
    (U+DCFF) that UTF-8 cannot encode``), or None when it can.  O(1) for ASCII text."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"holds a lone surrogate (U+{ord(text[e.start]):04X}) that UTF-8 cannot encode"
    return None


def short_repr(value: Any, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters (a huge int is named by its size instead: its
    decimal text may be megabytes, or past ``sys.get_int_max_str_digits``)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value).bit_length() > 128:
        return f"an integer of {abs(value).bit_length()} bits"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def number_problem(value: Any) -> str | None:
    """Why ``value`` is not a number a numeric record column holds (``compile_s``, ``wall_s``, a
    cost), or None: an ``int``/``float``/numpy number, not ``bool``, finite, >= 0, an ``int``
    within +-:data:`MAX_EXACT_INT`."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return f"is {short_repr(value)} ({type(value).__name__}), not a number"
    if isinstance(value, numbers.Integral) and abs(int(value)) > MAX_EXACT_INT:
        return (f"is {short_repr(int(value))}, an integer beyond 2**53 that a float64 column cannot hold exactly "
                "(give a float)")
    try:
        f = float(value)
    except (OverflowError, ValueError, TypeError):
        return f"is {short_repr(value)}, not a finite number"
    if not math.isfinite(f):
        return f"is {f}, not a finite number"
    if f < 0:
        return f"is negative ({f})"
    return None


def cost_tuple(costs: Any, rid: str) -> tuple[float, ...]:
    """``costs`` as a tuple of floats; ValueError (one line, naming the record) unless it is an
    iterable of ``int``/``float``/numpy numbers (``bool`` and ``str`` are not numbers).  Finite
    and >= 0 is ``validate``'s check."""
    if costs is None:
        return ()
    if isinstance(costs, (str, bytes, Mapping)):
        raise ValueError(f"record {rid}: field 'costs' must be a list of numbers, got {type(costs).__name__}")
    try:
        items = tuple(costs)
    except TypeError:
        raise ValueError(f"record {rid}: field 'costs' must be a list of numbers") from None
    if set(map(type, items)) <= _FLOAT_SET:
        return items
    out = []
    for i, x in enumerate(items):
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
            raise ValueError(f"record {rid}: field 'costs'[{i}] is {short_repr(x)} ({type(x).__name__}), not a number")
        try:
            out.append(float(x))
        except (OverflowError, ValueError, TypeError):
            raise ValueError(f"record {rid}: field 'costs'[{i}] is {short_repr(x)}, not a finite number") from None
    return tuple(out)


_FLOAT_SET = frozenset((float,))


def mean_cost(costs: Sequence[float]) -> float | None:
    """Mean of ``costs`` (finite floats), None when empty; finite even where their sum is not."""
    if not costs:
        return None
    s = sum(costs)
    if math.isinf(s):
        return sum(c / len(costs) for c in costs)
    return s / len(costs)


def record_too_big(n_bytes: int) -> str:
    """The message for a record of ``n_bytes`` over ``MAX_RECORD_BYTES``."""
    return (f"is {n_bytes:,} bytes, over the {MAX_RECORD_BYTES:,} bytes (4 MiB) a record may hold "
            f"(JSON and text columns, 8 bytes a cost)")


_HOST: str | None = None


def this_host() -> str:
    """This machine's hostname (``socket.gethostname()``), computed once per process."""
    global _HOST
    if _HOST is None:
        try:
            _HOST = socket.gethostname()
        except OSError:
            _HOST = ""
    return _HOST


def utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def target_display_name(target: Mapping[str, Any]) -> str:
    """Readable name of a target: its ``name`` key, else kind/vendor/model pieces."""
    name = target.get("name")
    if isinstance(name, str) and name:
        return name
    parts = [str(target[k]) for k in ("kind", "vendor", "model", "arch") if target.get(k) not in (None, "")]
    return "-".join(parts) if parts else "target"


@functools.lru_cache(maxsize=4096)
def target_slug(target_name: str, target_key: str) -> str:
    """Partition value of a target: its name made path-safe, plus 16 hex digits of its key."""
    safe = re.sub(r"[^A-Za-z0-9._]+", "_", target_name).strip("._")[:48] or "target"
    return f"{safe}-{target_key[:16]}"


def as_json_object(value: Any, what: str, rid: str) -> dict:
    if hasattr(value, "to_json_dict"):
        value = value.to_json_dict()
    if not isinstance(value, Mapping):
        raise ValueError(f"record {rid}: field '{what}' must be a JSON object, got {type(value).__name__}")
    try:
        return normalise(dict(value), what)
    except ValueError as e:
        raise ValueError(f"record {rid}: field '{what}' is not plain JSON data: {e}") from None


def checked_json(text: str, what: str, rid: str) -> str:
    """``text`` (a JSON column's canonical text) when UTF-8 can encode it, else ValueError naming
    the record, the field and the first lone surrogate (a string or an object key of it)."""
    why = text_problem(text)
    if why is not None:
        raise ValueError(f"record {rid}: field '{what}' {why}")
    return text


@dataclass(frozen=True)
class Record:
    """A tuning measurement.  See module docstring for the contract."""

    target: dict
    workload: dict
    config: dict
    costs: tuple = ()
    status: str = "ok"
    error: str = ""
    compile_s: float | None = None
    wall_s: float | None = None
    timestamp: _dt.datetime | None = None
    source: str = "measured"
    session: str = ""
    meta: dict = field(default_factory=dict)
    record_id: str = ""
    target_name: str = ""
    host: str | None = None
    origin: str = ""
    # derived, filled in __post_init__
    target_key: str = field(default="", compare=False)
    workload_key: str = field(default="", compare=False)
    config_key: str = field(default="", compare=False)
    target_json: str = field(default="", repr=False, compare=False)
    workload_json: str = field(default="", repr=False, compare=False)
    config_json: str = field(default="", repr=False, compare=False)
    meta_json: str = field(default="", repr=False, compare=False)
    lookup_key: int = field(default=0, init=False, repr=False, compare=False)
    entry_key: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rid = self.record_id or uuid.uuid4().hex
        s = object.__setattr__
        s(self, "record_id", rid)
        t = as_json_object(self.target, "target", rid)
        w = as_json_object(self.workload, "workload", rid)
        c = as_json_object(self.config, "config", rid)
        fam = w.get("family")
        if not isinstance(fam, str) or not fam:
            raise ValueError(f"record {rid}: field 'workload' needs a non-empty string 'family'")
        s(self, "target", t)
        s(self, "workload", w)
        s(self, "config", c)
        tj, wj, cj = (checked_json(canonical_json(t), "target", rid), checked_json(canonical_json(w), "workload", rid),
                      checked_json(canonical_json(c), "config", rid))
        s(self, "target_json", tj)
        s(self, "workload_json", wj)
        s(self, "config_json", cj)
        s(self, "target_key", key_of_text(tj))
        s(self, "workload_key", key_of_text(wj))
        s(self, "config_key", key_of_text(cj))
        # the store's int64 columns: hash64(target_key, workload_key[, config_key])
        s(self, "entry_key", hash64(self.target_key, self.workload_key))
        s(self, "lookup_key", hash64(self.target_key, self.workload_key, self.config_key))
        if not self.target_name:
            s(self, "target_name", target_display_name(t))
        s(self, "costs", cost_tuple(self.costs, rid))
        if self.timestamp is None:
            s(self, "timestamp", utcnow())
        elif not isinstance(self.timestamp, _dt.datetime):
            raise ValueError(f"record {rid}: field 'timestamp' must be a datetime, got "
                             f"{type(self.timestamp).__name__} {short_repr(self.timestamp)} (Record.from_dict parses "
                             "ISO 8601 text)")
        elif self.timestamp.tzinfo is None:
            s(self, "timestamp", self.timestamp.replace(tzinfo=_dt.timezone.utc))
        if not isinstance(self.meta, Mapping):
            raise ValueError(f"record {rid}: field 'meta' must be a JSON object")
        m = as_json_object(self.meta, "meta", rid)
        s(self, "meta", m)
        s(self, "meta_json", checked_json(canonical_json(m), "meta", rid) if m else "{}")
        if self.host is None:
            s(self, "host", this_host())

    # ------------------------------------------------------------------ derived
    @property
    def family(self) -> str:
        return self.workload["family"]

    @property
    def cost(self) -> float | None:
        """Mean of ``costs`` in seconds, or None when there are none."""
        return mean_cost(self.costs)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def validate(self) -> None:
        """Raise ValueError naming the field and the record when invalid."""
        rid = self.record_id
        if not _RID_RE.fullmatch(rid):
            raise ValueError(f"record {rid}: field 'record_id' must be 32 lowercase hex characters")
        if self.status not in STATUSES:
            raise ValueError(f"record {rid}: field 'status' is {self.status!r}, not one of {', '.join(STATUSES)}")
        if not isinstance(self.costs, tuple):
            raise ValueError(f"record {rid}: field 'costs' must be a list of numbers")
        for i, c in enumerate(self.costs):
            if type(c) is not float:
                raise ValueError(f"record {rid}: field 'costs'[{i}] is {short_repr(c)} ({type(c).__name__}), not a number")
            if math.isnan(c) or math.isinf(c):
                raise ValueError(f"record {rid}: field 'costs'[{i}] is {c}, not a finite number")
            if c < 0:
                raise ValueError(f"record {rid}: field 'costs'[{i}] is negative ({c})")
        if self.status == "ok" and not self.costs:
            raise ValueError(f"record {rid}: field 'costs' is empty but status is 'ok'")
        for name in ("compile_s", "wall_s"):
            v = getattr(self, name)
            if v is not None:
                why = number_problem(v)
                if why is not None:
                    raise ValueError(f"record {rid}: field '{name}' must be a finite number >= 0: it {why}")
        ts = self.timestamp
        if not isinstance(ts, _dt.datetime) or ts.tzinfo is None:
            raise ValueError(f"record {rid}: field 'timestamp' must be a timezone-aware datetime, got {short_repr(ts)}")
        for name in TEXT_FIELDS:
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"record {rid}: field '{name}' must be a string, got "
                                 f"{type(getattr(self, name)).__name__}")
        if not SOURCE_RE.match(self.source):
            raise ValueError(f"record {rid}: field 'source' is {self.source!r}; expected measured, replay, "
                             "imported:<format> or migrated:<target>")
        for name in TEXT_FIELDS:
            text = getattr(self, name)
            if "\x00" in text:
                raise ValueError(f"record {rid}: field '{name}' contains a NUL character (no backend can store one)")
            if not text.isascii():  # (only non-ASCII text can hold a surrogate)
                why = text_problem(text)
                if why is not None:
                    raise ValueError(f"record {rid}: field '{name}' {why}")
        for name, text in (("target", self.target_json), ("workload", self.workload_json),
                           ("config", self.config_json), ("meta", self.meta_json)):
            if type(text) is not str or not text.isascii():
                if not isinstance(text, str):
                    raise ValueError(f"record {rid}: field '{name}' has no canonical JSON text")
                checked_json(text, name, rid)
        if self._chars() > MAX_RECORD_BYTES // 4:  # (a character is 1-4 bytes: only then count bytes)
            n = self.size_bytes()
            if n > MAX_RECORD_BYTES:
                raise ValueError(f"record {rid}: {record_too_big(n)}")

    def _texts(self) -> tuple[str, ...]:
        return (self.target_json, self.workload_json, self.config_json, self.meta_json, self.error, self.session,
                self.source, self.host, self.origin)

    def _chars(self) -> int:
        return sum(map(len, self._texts())) + 8 * len(self.costs)

    def size_bytes(self) -> int:
        """The bytes this record counts against ``MAX_RECORD_BYTES``: the UTF-8 size of its
        JSON and text columns plus 8 a cost."""
        return sum(len(t.encode("utf-8", "surrogatepass")) for t in self._texts()) + 8 * len(self.costs)

    # -------------------------------------------------------------- conversion
    def to_row(self) -> dict:
        """Column values of this record (see tunedb.index.model.schema.RECORD_SCHEMA); the same as
        ``{c: get(self) for c, get in ROW_VALUES.items()}``, written out because a commit builds
        one per record (a literal dict is twice as fast as the per-column calls)."""
        return {
            "record_id": self.record_id,
            "target_key": self.target_key,
            "target_name": self.target_name,
            "target": self.target_json,
            "workload_key": self.workload_key,
            "family": self.family,
            "workload": self.workload_json,
            "config_key": self.config_key,
            "config": self.config_json,
            "costs": list(self.costs),
            "cost": self.cost,
            "status": self.status,
            "error": self.error,
            "compile_s": None if self.compile_s is None else float(self.compile_s),
            "wall_s": None if self.wall_s is None else float(self.wall_s),
            "timestamp": self.timestamp,
            "source": self.source,
            "session": self.session,
            "meta": self.meta_json,
            "lookup_key": self.lookup_key,
            "entry_key": self.entry_key,
            "tunedb_version": TUNEDB_VERSION,
            "schema_version": SCHEMA_VERSION,
            "host": self.host,
            "origin": self.origin,
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Record":
        """Rebuild a Record from a row dict as written by ``to_row``.  A row without ``host`` or
        ``origin`` (schema 1) gives ``""`` (unknown), never this machine's name."""
        import json

        return cls(
            target=json.loads(row["target"]),
            workload=json.loads(row["workload"]),
            config=json.loads(row["config"]),
            costs=tuple(row.get("costs") or ()),
            status=row["status"],
            error=row.get("error") or "",
            compile_s=row.get("compile_s"),
            wall_s=row.get("wall_s"),
            timestamp=row.get("timestamp"),
            source=row.get("source") or "measured",
            session=row.get("session") or "",
            meta=json.loads(row["meta"]) if row.get("meta") else {},
            record_id=row["record_id"],
            target_name=row.get("target_name") or "",
            host=row.get("host") or "",
            origin=row.get("origin") or "",
        )

    @classmethod
    def _from_fields(cls, fields: dict) -> "Record":
        """A Record whose ``__dict__`` is ``fields`` (every field, derived ones included), as the
        store reads them back from its own files: no validation, no re-canonicalising."""
        r = object.__new__(cls)
        object.__setattr__(r, "__dict__", fields)
        return r

    @classmethod
    def _from_table_row(cls, row: Mapping[str, Any]) -> "Record":
        return cls.from_row(row)

    def to_dict(self) -> dict:
        """Plain-JSON view (for CLI output and JSON-lines export)."""
        return {
            "record_id": self.record_id,
            "target_name": self.target_name,
            "target_key": self.target_key,
            "target": self.target,
            "workload_key": self.workload_key,
            "workload": self.workload,
            "config_key": self.config_key,
            "config": self.config,
            "costs": list(self.costs),
            "cost": self.cost,
            "status": self.status,
            "error": self.error,
            "compile_s": self.compile_s,
            "wall_s": self.wall_s,
            "timestamp": self.timestamp.isoformat(),
            "source": self.source,
            "session": self.session,
            "meta": self.meta,
            "host": self.host,
            "origin": self.origin,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Record":
        """Inverse of ``to_dict`` (keys are recomputed, never trusted).  A dict without ``host``
        or ``origin`` gives ``""`` for them (unknown), never this machine's name."""
        ts = d.get("timestamp")
        if isinstance(ts, str):
            try:
                ts = _dt.datetime.fromisoformat(ts)
            except ValueError:
                raise ValueError(f"record {d.get('record_id', '?')}: field 'timestamp' {ts[:40]!r} is not "
                                 "ISO 8601 text") from None
        known = ("target", "workload", "config")
        for k in known:
            if k not in d:
                raise ValueError(f"record {d.get('record_id', '?')}: field '{k}' is missing")
        return cls(
            target=d["target"], workload=d["workload"], config=d["config"],
            costs=tuple(d.get("costs") or ()), status=d.get("status", "ok"), error=d.get("error") or "",
            compile_s=d.get("compile_s"), wall_s=d.get("wall_s"), timestamp=ts,
            source=d.get("source") or "measured", session=d.get("session") or "",
            meta=d.get("meta") or {}, record_id=d.get("record_id") or "",
            target_name=d.get("target_name") or "",
            host=d.get("host") or "", origin=d.get("origin") or "",
        )


def _float_or_none(x: Any) -> float | None:
    return None if x is None else float(x)


#: column of ``Record.to_row`` -> its value of a Record, one function per column (a store that
#: builds only the columns a read asks for uses these; ``to_row`` gives the same values)
ROW_VALUES: dict[str, Callable[[Record], Any]] = {
    "record_id": lambda r: r.record_id,
    "target_key": lambda r: r.target_key,
    "target_name": lambda r: r.target_name,
    "target": lambda r: r.target_json,
    "workload_key": lambda r: r.workload_key,
    "family": lambda r: r.family,
    "workload": lambda r: r.workload_json,
    "config_key": lambda r: r.config_key,
    "config": lambda r: r.config_json,
    "costs": lambda r: list(r.costs),
    "cost": lambda r: r.cost,
    "status": lambda r: r.status,
    "error": lambda r: r.error,
    "compile_s": lambda r: _float_or_none(r.compile_s),
    "wall_s": lambda r: _float_or_none(r.wall_s),
    "timestamp": lambda r: r.timestamp,
    "source": lambda r: r.source,
    "session": lambda r: r.session,
    "meta": lambda r: r.meta_json,
    "lookup_key": lambda r: r.lookup_key,
    "entry_key": lambda r: r.entry_key,
    "tunedb_version": lambda r: TUNEDB_VERSION,
    "schema_version": lambda r: SCHEMA_VERSION,
    "host": lambda r: r.host,
    "origin": lambda r: r.origin,
}
