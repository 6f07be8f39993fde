"""Keys of query arguments: canonical JSON and keys of targets and workloads, memoised.

``lookup``/``best`` take targets and workloads as dicts or Records, often the same ones
again and again; canonicalising and hashing them each time would dominate a lookup (whose
budget is tens of microseconds).  ``KeyMemo`` remembers, each cache bounded:

* ``canon``: (canonical JSON, key) of a dict or a Record's target/workload.  Flat dicts
  (keys str; values str, int, float, bool or None; nothing nested) are memoised by value: (keys,
  values, value types) -- the types keep ``True``, ``1`` and ``1.0`` apart, which compare equal
  but are different JSON.  Dicts with nested values or other keys are never memoised: a tuple
  ``(True,)`` equals ``(1,)`` and hashes alike, with no type to tell them apart;
* ``text_key``: the key of a canonical JSON text;
* ``prefix``: the BLAKE2b state of a lookup key's (target_key, workload_key) prefix, so a
  lookup hashes only the config key;
* ``pair``: (target_key, workload_key) of a query, by which a partition's kept ``best`` answers
  are found (``tunedb.index.parquet.queries.RankedEntries``);
* ``json``: the parsed dict of a target/workload JSON text (shared by the Records built).

Not locked: each step is a single dict operation, safe under the GIL for concurrent callers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from tunedb.index.model.keys import canonical_json, key_of_text
from tunedb.index.model.record import Record

#: value types of a dict that ``KeyMemo.canon`` memoises by value (equal values, equal JSON)
_MEMO_VALUE_TYPES = frozenset((str, int, float, bool, type(None)))


class KeyMemo:
    """Memoised canonicalisation and keys of query arguments (see module docstring)."""

    def __init__(self) -> None:
        self._json_cache: dict[str, dict] = {}
        self._text_keys: dict[str, str] = {}
        self._canon_cache: dict[tuple, tuple[str, str]] = {}
        self._prefix_cache: dict[tuple[str, str], Any] = {}  # (target_key, workload_key) -> BLAKE2b state

    def json(self, text: str) -> dict:
        """``json.loads(text)``, shared: callers must not modify the dict."""
        d = self._json_cache.get(text)
        if d is None:
            d = json.loads(text)
            if len(self._json_cache) < 100_000:
                self._json_cache[text] = d
        return d

    def text_key(self, text: str) -> str:
        """``key_of_text(text)``."""
        k = self._text_keys.get(text)
        if k is None:
            if len(self._text_keys) > 10_000:
                self._text_keys.clear()
            k = self._text_keys[text] = key_of_text(text)
        return k

    def canon(self, obj: Any, what: str) -> tuple[str, str]:
        """(canonical JSON, key) of a target/workload (``what``) given as a dict or a Record."""
        fp = None
        if type(obj) is dict:
            try:  # (one flat tuple: its length, 1 + 3n, tells keys, values and value types apart)
                fp = (what, *obj, *obj.values(), *map(type, obj.values()))
                hit = self._canon_cache.get(fp)
            except TypeError:  # an unhashable value
                fp = hit = None
            if hit is not None:  # (only fingerprints of str keys and scalar values are kept)
                return hit
            if fp is not None and not (_MEMO_VALUE_TYPES.issuperset(fp[1 + 2 * len(obj):])
                                       and all(type(k) is str for k in obj)):
                fp = None  # (keys True and 1, or values (True,) and (1,), are equal but not the same JSON)
        elif isinstance(obj, Record):
            return (obj.target_json, obj.target_key) if what == "target" else (obj.workload_json, obj.workload_key)
        elif hasattr(obj, "to_json_dict"):
            obj = obj.to_json_dict()
        if not isinstance(obj, Mapping):
            raise TypeError(f"{what} must be a dict, a Record or a {what}_key, not {type(obj).__name__}")
        text = canonical_json(obj)
        res = (text, self.text_key(text))
        if fp is not None:
            if len(self._canon_cache) > 10_000:
                self._canon_cache.clear()
            self._canon_cache[fp] = res
        return res

    def prefix(self, tkey: str, wkey: str) -> Any:
        """BLAKE2b state (8-byte digest) of the lookup-key prefix of (tkey, wkey): ``copy()`` it,
        ``update`` it with the config key's bytes, and its digest read as a little-endian signed
        integer is ``hash64(tkey, wkey, ckey)``."""
        pair = (tkey, wkey)
        prefix = self._prefix_cache.get(pair)
        if prefix is None:
            if len(self._prefix_cache) > 200_000:
                self._prefix_cache.clear()
            prefix = self._prefix_cache[pair] = hashlib.blake2b(f"{tkey}\0{wkey}\0".encode(), digest_size=8)
        return prefix

    def pair(self, target: Any, workload: Any) -> tuple[str, str]:
        """(target_key, workload_key) of a target and a workload given as dicts or Records (the
        ``canon`` memo of each; TypeError for anything else): what ``best``'s kept answers are
        found by."""
        return self.canon(target, "target")[1], self.canon(workload, "workload")[1]
