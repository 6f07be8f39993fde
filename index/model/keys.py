"""Canonical JSON and stable keys.

A key is the first 128 bits of BLAKE2b over the canonical JSON text, as 32
lowercase hex characters.  Canonical JSON sorts object keys, writes no
whitespace, turns integral floats into integers (``8.0`` -> ``8``) and writes
other floats with ``repr`` precision, so the same value gives the same key in
every process and on every machine (never Python's salted ``hash()``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tunedb.index.support.jsontext import MAX_JSON_DEPTH  # (``normalise`` refuses deeper data)

KEY_HEX_CHARS = 32
#: integral floats below this magnitude are written as ints (exactly representable)
_INT_FLOAT_LIMIT = 2**53
#: the longest JSON path an error message names (a deeper one is cut with "...")
_MAX_PATH_CHARS = 160


#: exact types that are their own normal form (subclasses take the general path)
_SELF_NORMAL = frozenset((str, int, bool, type(None)))
_STR_SET = frozenset((str,))
_INT_SET = frozenset((int,))


class _NotJSON(Exception):
    """Internal: a value that is not plain JSON data; ``where`` collects the path on the way up."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.where: list[str] = []


def _flat_normal(d: dict) -> bool:
    """Whether dict ``d`` is a flat dict of strings, ints, bools and nulls with string keys:
    already its own normal form."""
    return set(map(type, d.values())) <= _SELF_NORMAL and (not d or set(map(type, d)) == _STR_SET)


def normalise(value: Any, path: str = "$") -> Any:
    """Return ``value`` as plain JSON data with normalised numbers (a fresh copy of every container).

    Accepts dict (string keys), list/tuple, str, bool, None, int, float and numpy scalars.
    Integral floats with ``|x| < 2**53`` become ints (``8.0`` -> ``8``, ``-0.0`` -> ``0``);
    other floats, and all ints (however large), stay as they are; ``True`` stays a bool.
    Raises ValueError naming the JSON path of anything else (objects, bytes, sets, NaN,
    infinities, non-string keys), e.g. ``$.a[2]: non-finite number nan is not JSON data``, and
    of objects/lists nested deeper than :data:`MAX_JSON_DEPTH` levels (one line, the path cut
    short; never a RecursionError).  Strings are not checked here: a lone surrogate is refused
    where a record's text is validated (``tunedb.index.model.record.text_problem``).

    This is the one normaliser of the project: ``Record``, ``RecordBatch``, the store's query
    keys and the importers all call it (tests/index_tests/test_keys_property.py checks they agree).
    """
    try:
        return _norm(value)
    except _NotJSON as e:
        where = f"{path}{''.join(reversed(e.where))}"
        if len(where) > _MAX_PATH_CHARS:
            where = where[:_MAX_PATH_CHARS] + "..."
        raise ValueError(f"{where}: {e.message}") from None


def _norm(value: Any, depth: int = 1) -> Any:
    """``normalise`` without path bookkeeping on success (the path is added while unwinding);
    ``depth`` is the nesting level of ``value`` (1 for the value given to ``normalise``)."""
    t = type(value)
    if t in _SELF_NORMAL:
        return value
    if t is float:
        if value.is_integer() and -_INT_FLOAT_LIMIT < value < _INT_FLOAT_LIMIT:
            return int(value)
        if not math.isfinite(value):
            raise _NotJSON(f"non-finite number {value!r} is not JSON data")
        return value
    if (t is dict or t is list or t is tuple) and depth > MAX_JSON_DEPTH:
        raise _NotJSON(f"nested deeper than {MAX_JSON_DEPTH} levels of objects and lists")
    if t is dict:
        if _flat_normal(value):
            return dict(value)
        out = {}
        for k, v in value.items():
            if type(k) is not str and not isinstance(k, str):
                raise _NotJSON(f"key {k!r} is not a string")
            if type(v) in _SELF_NORMAL:
                out[k] = v
                continue
            try:
                out[k] = _norm(v, depth + 1)
            except _NotJSON as e:
                e.where.append(f".{k}")
                raise
        return out
    if t is list or t is tuple:
        if set(map(type, value)) <= _SELF_NORMAL:
            return list(value)
        out_list = []
        for i, v in enumerate(value):
            if type(v) in _SELF_NORMAL:
                out_list.append(v)
                continue
            try:
                out_list.append(_norm(v, depth + 1))
            except _NotJSON as e:
                e.where.append(f"[{i}]")
                raise
        return out_list
    return _norm_other(value, depth)


def _norm_other(value: Any, depth: int) -> Any:
    """``_norm`` of subclasses and numpy scalars (the rules by ``isinstance``), or ``_NotJSON``."""
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.generic):
        value = value.item()
        if isinstance(value, (bool, str)):
            return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _norm(float(value), depth)
    if isinstance(value, (dict, list, tuple)):
        return _norm(dict(value) if isinstance(value, dict) else list(value), depth)
    raise _NotJSON(f"{type(value).__name__} is not plain JSON data")



def fast_json_encoder(*, sort_keys: bool, ensure_ascii: bool,
                      separators: tuple[str, str] = (",", ":")) -> Callable[[Any], str]:
    """``json.JSONEncoder(sort_keys=..., ensure_ascii=..., separators=...).encode`` (NaN allowed,
    no ``default``) through the C encoder built once instead of on every call (3x faster on small
    objects).  Used only where its output was checked to equal the pure encoder's on a probe;
    else that encoder."""
    plain = json.JSONEncoder(sort_keys=sort_keys, ensure_ascii=ensure_ascii, separators=separators).encode
    try:
        from json.encoder import c_make_encoder, encode_basestring, encode_basestring_ascii

        enc = c_make_encoder(None, None, encode_basestring_ascii if ensure_ascii else encode_basestring, None,
                             separators[1], separators[0], sort_keys, False, True)
        probe = {"b": [1, 2.5, "x\u00e9\n", None, True], "a": {"z": float("nan"), "y": 1e-7}, "c": -7, "d": ""}
        if "".join(enc(probe, 0)) != plain(probe):
            return plain
        return lambda value: "".join(enc(value, 0))
    except Exception:  # no C accelerator or another signature: the pure-Python encoder
        return plain


_fast_dumps = fast_json_encoder(sort_keys=True, ensure_ascii=False)


def canonical_json(value: Any) -> str:
    """Canonical JSON text of ``value`` (see module docstring)."""
    return canonical_json_flat(value)[0]


def canonical_json_flat(value: Any) -> tuple[str, bool]:
    """(canonical JSON of ``value``, whether ``value`` is a flat dict of strings, ints, bools and
    nulls -- already its own normal form, so a plain copy of it equals the parsed text)."""
    if type(value) is dict and _flat_normal(value):
        return _fast_dumps(value), True  # fast path: no normalising copy
    return _fast_dumps(normalise(value)), False


def canonical_json_flat_many(values: Sequence[Any]) -> list[tuple[str, bool]]:
    """:func:`canonical_json_flat` of each of ``values``, faster for a population of flat dicts
    of ints with one key set (a tuner's configs): their texts come from one template (the keys
    sorted and encoded once, ``%d`` per value; ``int.__repr__`` is what JSON writes).  Values
    of another shape take the one-by-one path."""
    out: list[tuple[str, bool]] = []
    keys: list[str] = []
    keyset: Any = None
    fmt = ""
    for v in values:
        if type(v) is dict and keyset is not None and v.keys() == keyset:
            vals = tuple(map(v.__getitem__, keys))
            if set(map(type, vals)) == _INT_SET:
                out.append((fmt % vals, True))
                continue
        elif keyset is None and type(v) is dict and v and set(map(type, v.values())) == _INT_SET \
                and set(map(type, v)) == _STR_SET:
            keys = sorted(v)
            keyset = set(keys)  # (dict_keys == set compares as sets)
            fmt = "{" + ",".join(_fast_dumps(k).replace("%", "%%") + ":%d" for k in keys) + "}"
        out.append(canonical_json_flat(v))
    return out


def canonical_json_normalised(value: Any) -> str:
    """Canonical JSON text of data already in normal form (the output of ``normalise``), without
    normalising it again: equal to ``canonical_json(value)`` for such data."""
    return _fast_dumps(value)


def key_of_text(text: str) -> str:
    """Key of an already canonical JSON text.  ValueError (one line) for text UTF-8 cannot
    encode (a lone surrogate): no record can hold it, so no key names it."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{text[max(0, e.start - 20):e.start + 20]!r} holds a lone surrogate "
                         f"(U+{ord(text[e.start]):04X}) that UTF-8 cannot encode") from None
    return hashlib.blake2b(data, digest_size=KEY_HEX_CHARS // 2).hexdigest()


def key_of(value: Any) -> str:
    """Stable 32-hex-character key of a JSON value."""
    return key_of_text(canonical_json(value))


def hash64(*parts: str) -> int:
    """Signed 64-bit hash of the given strings joined by NUL (for int64 columns)."""
    h = hashlib.blake2b("\0".join(parts).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(h, "little", signed=True)


def rid_hash(record_id: str) -> int:
    """The store's int64 ``rid_hash`` of a record id (32 hex digits): its two 64-bit halves
    XOR'ed, so ids that differ only at one end (sequential ids) still differ."""
    v = int(record_id[:16], 16) ^ int(record_id[16:32], 16)
    return v - (1 << 64) if v >= (1 << 63) else v


def rid_hashes(record_ids) -> np.ndarray:
    """``rid_hash`` of many ids at once (int64 array)."""
    raw = record_ids if isinstance(record_ids, np.ndarray) else np.array(record_ids, dtype="S32")
    if len(raw) == 0:
        return np.zeros(0, np.int64)
    halves = np.frombuffer(bytes.fromhex(b"".join(raw.tolist()).decode()), ">u8").reshape(-1, 2)
    return (halves[:, 0] ^ halves[:, 1]).astype(np.int64)
