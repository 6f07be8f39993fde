"""Many records as columns: the bulk path into the store.

A ``RecordBatch`` holds records as one Arrow table in the store's column layout
(``tunedb.index.model.schema.RECORD_SCHEMA`` without ``target_slug`` and ``committed``, which the
store adds when it writes).  It is validated and keyed when it is built, exactly as
``Record`` is (the same canonical JSON, keys and rules, so a record gets the same keys
whichever way it was built), and is immutable afterwards.  ``ParquetStore.commit`` takes a
batch as it takes a list of Records; a batch skips the per-record Python objects, which
is what makes bulk ingest fast.

Units: costs, compile_s and wall_s in seconds; timestamps UTC.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tunedb.index.model.keys import MAX_JSON_DEPTH, canonical_json, canonical_json_normalised, key_of_text, rid_hashes
from tunedb.index.model.record import (
    MAX_RECORD_BYTES,
    SIZED_COLUMNS,
    SOURCE_RE,
    STATUSES,
    TEXT_FIELDS,
    Record,
    as_json_object,
    checked_json,
    cost_tuple,
    mean_cost,
    number_problem,
    record_too_big,
    target_display_name,
    text_problem,
    this_host,
)
from tunedb.index.model.schema import RECORD_SCHEMA
from tunedb.index.model.version import SCHEMA_VERSION, TUNEDB_VERSION

#: columns of a batch: the record schema less what the store adds when it writes
BATCH_SCHEMA = pa.schema([f for f in RECORD_SCHEMA if f.name not in ("target_slug", "committed")])
_RID_RE = r"^[0-9a-f]{32}$"
_TS = pa.timestamp("us", tz="UTC")


def _new_ids(n: int) -> list[str]:
    h = os.urandom(16 * n).hex()
    return [h[i:i + 32] for i in range(0, 32 * n, 32)]


class RecordBatch:
    """Validated, keyed records as an Arrow table (see module docstring).

    ``table`` has ``BATCH_SCHEMA``; ``target_meta`` maps target_key -> (target_name,
    canonical target JSON).  Build batches with ``from_columns`` or ``from_records``; a batch
    made directly from a table is validated again when it is committed."""

    __slots__ = ("table", "target_meta", "_target_codes", "_checked")

    def __init__(self, table: pa.Table, target_meta: dict[str, tuple[str, str]]):
        self.table = table
        self.target_meta = target_meta
        self._target_codes: tuple[list[str], np.ndarray] | None = None
        self._checked = False

    def _built(self, tkeys: list[str], codes: np.ndarray) -> "RecordBatch":
        """Mark a batch made by the constructors: validated, with its rows' target codes."""
        self._target_codes = (tkeys, codes)
        self._checked = True
        return self

    def target_groups(self) -> tuple[list[str], np.ndarray]:
        """(distinct target keys, int16/int32 code of each row into them)."""
        if self._target_codes is None:
            enc = pc.dictionary_encode(self.table.column("target_key")).combine_chunks()
            self._target_codes = (enc.dictionary.to_pylist(), _small_codes(enc.indices.to_numpy()))
        return self._target_codes

    def check(self) -> None:
        """``validate`` unless this batch was built (and so validated) by a constructor; a batch
        made from a table (``from_table``, the constructor) is also checked for what only text
        from outside this process can hold: bytes that are not UTF-8, JSON text that escapes a
        lone surrogate (``\\udcff``) or nests deeper than ``MAX_JSON_DEPTH``, or is not a JSON
        object -- each would make every later read of the store fail."""
        if not self._checked:
            self._check_foreign_text()
            self.validate()
            self._checked = True

    def _check_foreign_text(self) -> None:
        """The text checks of :meth:`check` (one-line ValueError naming the field, record, row)."""
        t = self.table
        try:
            t.validate(full=True)
        except pa.ArrowInvalid as e:
            raise ValueError(f"batch table is malformed: {str(e).splitlines()[0] if str(e) else 'invalid'}") from None
        ids = t.column("record_id")
        for name in ("target", "workload", "config", "meta"):
            if name not in t.column_names:
                continue
            col = t.column(name)
            # only rows that could break a reader are parsed: an escaped surrogate, or enough
            # brackets to nest too deep
            rx = pc.fill_null(pc.match_substring_regex(col, r"\\u[dD][89a-fA-F]"), False)
            deep = pc.greater(pc.fill_null(pc.add(pc.count_substring(col, "["), pc.count_substring(col, "{")), 0),
                              MAX_JSON_DEPTH)
            rows = np.flatnonzero(pc.or_(rx, deep).to_numpy(zero_copy_only=False))
            for i in rows.tolist():
                rid = ids[i].as_py()
                text = col[i].as_py()
                try:
                    value = json.loads(text)
                except (ValueError, RecursionError):
                    raise ValueError(f"record {rid} (row {i}): field '{name}' is not JSON text") from None
                if not isinstance(value, dict):
                    raise ValueError(f"record {rid} (row {i}): field '{name}' is not a JSON object")
                try:
                    text_of_value = canonical_json(value)
                except ValueError as e:  # nested too deeply
                    raise ValueError(f"record {rid} (row {i}): field '{name}' is not plain JSON data: {e}") from None
                why = text_problem(text_of_value)
                if why is not None:
                    raise ValueError(f"record {rid} (row {i}): field '{name}' {why}")

    def __len__(self) -> int:
        return self.table.num_rows

    def __repr__(self) -> str:
        return f"RecordBatch({self.table.num_rows} records, {len(self.target_meta)} targets)"

    # --------------------------------------------------------------- building
    @classmethod
    def from_columns(cls, *, target: Sequence[Any], workload: Sequence[Any], config: Sequence[Any],
                     costs: Sequence[Sequence[float]], status: Sequence[str] | str = "ok",
                     error: Sequence[str] | str = "", compile_s: Sequence[float | None] | None = None,
                     wall_s: Sequence[float | None] | None = None,
                     timestamp: Sequence[_dt.datetime] | _dt.datetime | None = None,
                     source: Sequence[str] | str = "measured", session: Sequence[str] | str = "",
                     record_id: Sequence[str] | None = None, host: Sequence[str] | str | None = None,
                     origin: Sequence[str] | str = "") -> "RecordBatch":
        """Build a batch from parallel sequences (one item per record; a plain str or
        datetime given for status/error/source/session/timestamp/host/origin applies to every
        record).  ``host`` None means this machine (as for ``Record``), ``""`` unknown;
        ``origin`` "" means a local measurement.

        target/workload/config items are dicts (or objects with ``to_json_dict``), as for
        ``Record``.  Raises ValueError naming the field and the first bad record (its
        record_id and row); nothing is built then."""
        n = len(config)
        for name, col in (("target", target), ("workload", workload), ("costs", costs)):
            if len(col) != n:
                raise ValueError(f"field '{name}' has {len(col)} items, config has {n}")
        ids = list(record_id) if record_id is not None else _new_ids(n)
        if len(ids) != n:
            raise ValueError(f"field 'record_id' has {len(ids)} items, config has {n}")
        if record_id is not None:
            ok = pc.fill_null(pc.match_substring_regex(pa.array(ids, pa.string()), _RID_RE), False)
            bad = np.flatnonzero(~ok.to_numpy(zero_copy_only=False))
            if len(bad):
                i = int(bad[0])
                raise ValueError(f"record {ids[i]} (row {i}): field 'record_id' must be 32 lowercase hex characters")
        # targets and workloads: canonicalised once per distinct object
        tcols = _canon_column(target, "target", ids)
        wcols = _canon_column(workload, "workload", ids)
        fam_of: dict[str, str] = {}
        for i, (wdict, wj) in enumerate(zip(wcols[0], wcols[1])):
            if wj not in fam_of:
                fam = wdict.get("family")
                if not isinstance(fam, str) or not fam:
                    raise ValueError(f"record {ids[i]} (row {i}): field 'workload' needs a non-empty string 'family'")
                fam_of[wj] = fam
        tmeta: dict[str, tuple[str, str]] = {}
        for tdict, tj, tk in zip(*tcols):
            if tk not in tmeta:
                tmeta[tk] = (target_display_name(tdict), tj)
        cj = []
        for i, c in enumerate(config):
            if type(c) is not dict:
                c = as_json_object(c, "config", ids[i])
            try:
                cj.append(checked_json(canonical_json(c), "config", ids[i]))
            except ValueError as e:
                if str(e).startswith(f"record {ids[i]}: "):
                    raise _with_row(e, ids[i], i) from None
                raise ValueError(f"record {ids[i]} (row {i}): field 'config' is not plain JSON data: {e}") from None
        ck = [key_of_text(x) for x in cj]
        pairs: dict[tuple[str, str], Any] = {}
        lk = np.empty(n, np.int64)
        ek = np.empty(n, np.int64)
        for i, (tk, wk, c) in enumerate(zip(tcols[2], wcols[2], ck)):
            p = pairs.get((tk, wk))
            if p is None:
                pre = hashlib.blake2b(f"{tk}\0{wk}\0".encode(), digest_size=8)
                e = int.from_bytes(hashlib.blake2b(f"{tk}\0{wk}".encode(), digest_size=8).digest(), "little",
                                   signed=True)
                p = pairs[(tk, wk)] = (pre, e)
            h = p[0].copy()
            h.update(c.encode())
            lk[i] = int.from_bytes(h.digest(), "little", signed=True)
            ek[i] = p[1]
        costs_py: list = []
        for i, c in enumerate(costs):
            if type(c) is list and set(map(type, c)) <= _FLOATS:
                costs_py.append(c)
                continue
            try:
                costs_py.append(list(cost_tuple(c, ids[i])))
            except ValueError as e:
                raise _with_row(e, ids[i], i) from None
        try:
            costs_arr = pa.array(costs_py, pa.list_(pa.float64()))
        except (TypeError, ValueError, pa.ArrowInvalid, pa.ArrowTypeError):
            raise ValueError("field 'costs' must be a list of lists of numbers") from None
        mean = pa.array([mean_cost(c) for c in costs_py], pa.float64())

        def col(value, typ, name):
            if value is None or isinstance(value, (str, _dt.datetime)):
                _check_items(name, [value] * (n > 0), ids)
                return pa.repeat(pa.scalar(value, typ), n) if value is not None else pa.nulls(n, typ)
            if len(value) != n:
                raise ValueError(f"field '{name}' has {len(value)} items, config has {n}")
            _check_items(name, value, ids)
            try:
                return pa.array(value, typ)
            except (TypeError, ValueError, pa.ArrowInvalid, pa.ArrowTypeError):
                raise ValueError(f"field '{name}' has a value of the wrong type") from None

        now = _dt.datetime.now(_dt.timezone.utc)
        table = _assemble(
            ids=ids, tcols=tcols, tmeta=tmeta, wcols=wcols, fam=[fam_of[w] for w in wcols[1]], cj=cj, ck=ck,
            costs=costs_arr, mean=mean, status=col(status, pa.string(), "status"), error=col(error, pa.string(), "error"),
            compile_s=col(compile_s, pa.float64(), "compile_s"), wall_s=col(wall_s, pa.float64(), "wall_s"),
            timestamp=col(timestamp if timestamp is not None else now, _TS, "timestamp"),
            source=col(source, pa.string(), "source"), session=col(session, pa.string(), "session"),
            meta=pa.repeat(pa.scalar("{}"), n), lk=lk, ek=ek,
            host=col(this_host() if host is None else host, pa.string(), "host"),
            origin=col(origin, pa.string(), "origin"))
        batch = cls(table, tmeta)
        batch.validate()
        return batch._built(*_codes_of(tcols[2]))

    @classmethod
    def from_table(cls, t: pa.Table) -> "RecordBatch":
        """The records of ``t`` (a table with the columns of ``RECORD_SCHEMA``, as
        ``RecordStore.records`` returns) as a batch, unchanged: same record_id, keys, canonical
        JSON, costs, timestamps, source, session, host, origin and versions.  Validated again
        when committed (the table comes from outside this process)."""
        cols = t.select(BATCH_SCHEMA.names).replace_schema_metadata(None).cast(BATCH_SCHEMA)
        meta: dict[str, tuple[str, str]] = {}
        if t.num_rows:
            tk = t.column("target_key").to_pylist()
            _, first = np.unique(np.array(tk, dtype=object), return_index=True)
            names, tjs = t.column("target_name"), t.column("target")
            for i in first.tolist():
                meta[tk[i]] = (names[i].as_py() or "", tjs[i].as_py())
        return cls(cols, meta)

    @classmethod
    def from_records(cls, records: Sequence[Record]) -> "RecordBatch":
        """The batch of already built Records, in order, validated as ``Record.validate``
        does (ValueError naming the field and the record)."""
        try:
            return cls._from_records(records)
        except (TypeError, ValueError, pa.ArrowInvalid, pa.ArrowTypeError):
            for r in records:  # the exact message of the first bad record
                r.validate()
            raise

    @classmethod
    def _from_records(cls, records: Sequence[Record], *, validate: bool = True) -> "RecordBatch":
        """``from_records`` without the fallback; ``validate=False`` when every record's own
        ``validate()`` already passed."""
        n = len(records)
        if validate:  # what Arrow would convert silently (True -> 1.0): the record's own message
            for r in records:
                if not (_FLOATS.issuperset(map(type, r.costs)) and type(r.compile_s) in _PLAIN_NUMBERS
                        and type(r.wall_s) in _PLAIN_NUMBERS):
                    r.validate()
        get = attrgetter("record_id", "target_key", "target_name", "target_json", "workload_key", "workload_json",
                         "config_key", "config_json", "costs", "status", "error", "compile_s", "wall_s",
                         "timestamp", "source", "session", "meta_json", "lookup_key", "entry_key", "host", "origin")
        cols = list(zip(*map(get, records))) if n else [[] for _ in range(21)]
        tmeta: dict[str, tuple[str, str]] = {}
        for r in records:
            if r.target_key not in tmeta:
                tmeta[r.target_key] = (r.target_name, r.target_json)
        fams = [r.workload["family"] for r in records]
        costs = pa.array(cols[8], pa.list_(pa.float64()))
        mean = pa.array([mean_cost(c) for c in cols[8]], pa.float64())
        table = pa.Table.from_arrays([
            pa.array(cols[0], pa.string()), pa.array(cols[1], pa.string()), pa.array(cols[2], pa.string()),
            pa.array(cols[3], pa.string()), pa.array(cols[4], pa.string()), pa.array(fams, pa.string()),
            pa.array(cols[5], pa.string()), pa.array(cols[6], pa.string()), pa.array(cols[7], pa.string()),
            costs, mean, pa.array(cols[9], pa.string()), pa.array(cols[10], pa.string()),
            pa.array(cols[11], pa.float64()), pa.array(cols[12], pa.float64()), pa.array(cols[13], _TS),
            pa.array(cols[14], pa.string()), pa.array(cols[15], pa.string()),
            pa.array([m or "{}" for m in cols[16]], pa.string()),
            pa.array(np.fromiter(cols[17], np.int64, n)), pa.array(np.fromiter(cols[18], np.int64, n)),
            pa.repeat(pa.scalar(TUNEDB_VERSION), n), pa.array(np.full(n, SCHEMA_VERSION, np.int32)),
            pa.array(rid_hashes(cols[0])), pa.array(cols[19], pa.string()), pa.array(cols[20], pa.string()),
        ], schema=BATCH_SCHEMA)
        batch = cls(table, tmeta)
        if validate:
            batch.validate()
        return batch._built(*_codes_of(cols[1]))

    # -------------------------------------------------------------- checking
    def validate(self) -> None:
        """The rules of ``Record.validate``, vectorised; ValueError names the field, the
        record and its row."""
        t = self.table
        ids = t.column("record_id")

        def fail(mask, msg: str) -> None:
            rows = np.flatnonzero(np.asarray(mask))
            if len(rows):
                i = int(rows[0])
                raise ValueError(f"record {ids[i].as_py()} (row {i}): {msg(i)}")

        fail(pc.invert(pc.fill_null(pc.match_substring_regex(ids, _RID_RE), False)).to_numpy(zero_copy_only=False),
             lambda i: "field 'record_id' must be 32 lowercase hex characters")
        status = t.column("status")
        fail(pc.invert(pc.fill_null(pc.is_in(status, pa.array(STATUSES)), False)).to_numpy(zero_copy_only=False),
             lambda i: f"field 'status' is {status[i].as_py()!r}, not one of {', '.join(STATUSES)}")
        costs = t.column("costs").combine_chunks()
        vals = costs.flatten().to_numpy(zero_copy_only=False)
        bad = ~np.isfinite(vals) | (vals < 0)
        if bad.any():
            owner = np.repeat(np.arange(len(costs)), pc.list_value_length(costs).fill_null(0).to_numpy())
            row = int(owner[np.flatnonzero(bad)[0]])
            c = costs[row].as_py()
            j = next(k for k, x in enumerate(c) if not (np.isfinite(x) and x >= 0))
            what = f"negative ({c[j]})" if np.isfinite(c[j]) else f"{c[j]}, not a finite number"
            raise ValueError(f"record {ids[row].as_py()} (row {row}): field 'costs'[{j}] is {what}")
        empty = pc.equal(pc.fill_null(pc.list_value_length(costs), 0), 0)
        fail(pc.and_(empty, pc.equal(status, "ok")).to_numpy(zero_copy_only=False),
             lambda i: "field 'costs' is empty but status is 'ok'")
        for name in ("compile_s", "wall_s"):
            x = t.column(name).to_numpy(zero_copy_only=False).astype(np.float64)
            fail(~np.isnan(x) & (~np.isfinite(x) | (x < 0)),
                 lambda i, name=name: f"field '{name}' must be a finite number >= 0")
        src = t.column("source")
        bad_src = [v for v in pc.unique(src).to_pylist() if not isinstance(v, str) or not SOURCE_RE.match(v)]
        if bad_src:
            fail(pc.fill_null(pc.is_in(src, pa.array(bad_src, pa.string())), True).to_numpy(zero_copy_only=False),
                 lambda i: f"field 'source' is {src[i].as_py()!r}; expected measured, replay, "
                           "imported:<format> or migrated:<target>")
        fail(pc.is_null(t.column("error")).to_numpy(zero_copy_only=False),
             lambda i: "field 'error' must be a string")
        for name in ("host", "origin"):
            fail(pc.is_null(t.column(name)).to_numpy(zero_copy_only=False),
                 lambda i, name=name: f"field '{name}' must be a string")
        for name in TEXT_FIELDS:
            if name in t.column_names:
                fail(pc.fill_null(pc.match_substring(t.column(name), "\x00"), False).to_numpy(zero_copy_only=False),
                     lambda i, name=name: f"field '{name}' contains a NUL character (no backend can store one)")
        size = pc.multiply(pc.fill_null(pc.list_value_length(costs), 0), 8).cast(pa.int64())
        for name in SIZED_COLUMNS:
            if name in t.column_names:
                size = pc.add(size, pc.fill_null(pc.binary_length(t.column(name)), 0).cast(pa.int64()))
        size_np = np.asarray(size.to_numpy(zero_copy_only=False))
        fail(size_np > MAX_RECORD_BYTES, lambda i: record_too_big(int(size_np[i])))

    # ------------------------------------------------------------- unpacking
    def to_records(self) -> list[Record]:
        """The batch as Record objects (same ids, keys and values)."""
        rows = self.table.to_pylist()
        parsed: dict[str, dict] = {}

        def js(text: str) -> dict:
            d = parsed.get(text)
            if d is None:
                d = parsed[text] = json.loads(text)
            return d

        out = []
        for r in rows:
            meta = r["meta"] or "{}"
            out.append(Record._from_fields({
                "target": js(r["target"]), "workload": js(r["workload"]), "config": json.loads(r["config"]),
                "costs": tuple(r["costs"] or ()), "status": r["status"], "error": r["error"] or "",
                "compile_s": r["compile_s"], "wall_s": r["wall_s"], "timestamp": r["timestamp"],
                "source": r["source"], "session": r["session"] or "", "meta": json.loads(meta),
                "record_id": r["record_id"], "target_name": r["target_name"] or "",
                "target_key": r["target_key"], "workload_key": r["workload_key"], "config_key": r["config_key"],
                "target_json": r["target"], "workload_json": r["workload"], "config_json": r["config"],
                "meta_json": meta, "lookup_key": r["lookup_key"], "entry_key": r["entry_key"],
                "host": r.get("host") or "", "origin": r.get("origin") or ""}))
        return out


_FLOATS = frozenset((float,))
_PLAIN_NUMBERS = frozenset((float, int, type(None)))
_NUMERIC_COLUMNS = ("compile_s", "wall_s")


def _with_row(e: ValueError, rid: str, row: int) -> ValueError:
    """A record's one-line ``record <rid>: ...`` error, naming the batch row as well."""
    return ValueError(f"record {rid} (row {row}): {str(e).removeprefix(f'record {rid}: ')}")


def _check_items(name: str, values: Sequence[Any], ids: list[str]) -> None:
    """ValueError (one line, naming the record and row) for the first value of column ``name``
    that a backend could not store as it is: a string UTF-8 cannot encode, or for
    ``compile_s``/``wall_s`` a value that ``Record.validate`` refuses (bool, str, an int past
    2**53; ``None`` is no value).  Arrow would otherwise raise its own error, or convert a bool
    to 1.0."""
    if name in _NUMERIC_COLUMNS:
        for i, v in enumerate(values):
            if v is not None and type(v) is not float:
                why = number_problem(v)
                if why is not None:
                    raise ValueError(f"record {ids[i]} (row {i}): field '{name}' must be a finite number >= 0: it {why}")
        return
    for i, v in enumerate(values):
        if type(v) is str and not v.isascii():
            why = text_problem(v)
            if why is not None:
                raise ValueError(f"record {ids[i]} (row {i}): field '{name}' {why}")


def _small_codes(codes: np.ndarray) -> np.ndarray:
    """Codes in the smallest signed dtype that holds them (int16 sorts by radix)."""
    return codes.astype(np.int16 if len(codes) == 0 or codes.max() < 32767 else np.int32)


def _codes_of(keys: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """(distinct keys in first-seen order, code of each item)."""
    pos: dict[str, int] = {}
    codes = np.fromiter((pos.setdefault(k, len(pos)) for k in keys), np.int64, len(keys))
    return list(pos), _small_codes(codes)


def _canon_column(values: Sequence[Any], what: str, ids: list[str]) -> tuple[list, list, list]:
    """(normalised dicts, canonical JSON, keys) of a target/workload column, computed once
    per distinct object (the same dict object repeated costs one canonicalisation)."""
    memo: dict[int, tuple] = {}
    keep = []  # hold the objects so their ids are not reused while memoised
    dicts, texts, keys = [], [], []
    for i, v in enumerate(values):
        hit = memo.get(id(v))
        if hit is None:
            d = as_json_object(v, what, ids[i])  # normalised by tunedb.index.model.keys.normalise, as Record does
            text = canonical_json_normalised(d)
            why = text_problem(text)
            if why is not None:
                raise ValueError(f"record {ids[i]} (row {i}): field '{what}' {why}")
            hit = memo[id(v)] = (d, text, key_of_text(text))
            keep.append(v)
        dicts.append(hit[0])
        texts.append(hit[1])
        keys.append(hit[2])
    return dicts, texts, keys


def _assemble(*, ids, tcols, tmeta, wcols, fam, cj, ck, costs, mean, status, error, compile_s, wall_s, timestamp,
              source, session, meta, lk, ek, host, origin) -> pa.Table:
    n = len(ids)
    tnames = [tmeta[k][0] for k in tcols[2]]
    return pa.Table.from_arrays([
        pa.array(ids, pa.string()), pa.array(tcols[2], pa.string()), pa.array(tnames, pa.string()),
        pa.array(tcols[1], pa.string()), pa.array(wcols[2], pa.string()), pa.array(fam, pa.string()),
        pa.array(wcols[1], pa.string()), pa.array(ck, pa.string()), pa.array(cj, pa.string()),
        costs, mean, status, error, compile_s, wall_s, timestamp, source, session, meta,
        pa.array(lk), pa.array(ek), pa.repeat(pa.scalar(TUNEDB_VERSION), n),
        pa.array(np.full(n, SCHEMA_VERSION, np.int32)), pa.array(rid_hashes(ids)), host, origin,
    ], schema=BATCH_SCHEMA)


__all__ = ["BATCH_SCHEMA", "RecordBatch"]
