"""Target specs -> target dicts (the rules every command that takes a target follows).

A spec is, in this order of precedence:

1. a dict (returned as a normalised copy);
2. a target already in the DB, by its ``target_name`` or ``target_key`` (``db.find_target``);
3. a local preset name (``cpu-native``, ``cpu-x86-64-v3-t2``, ... see ``tunedb.index.hardware.localcpu``);
4. a path to a JSON file holding a target object;
5. a hardware catalog device (exact or fuzzy match of ``tunedb.index.hardware.catalog.resolve``; a string
   that only resolves by ``fallback`` is *not* accepted here).

Anything else raises ``ValueError`` with one line naming the spec and what was tried.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from tunedb.index.hardware import catalog
from tunedb.index.hardware.localcpu import preset, preset_names
from tunedb.index.model.keys import normalise
from tunedb.index.support import jsontext

#: bytes: the largest target file ``resolve_target`` reads (real ones are under 1 KB)
MAX_TARGET_FILE = 1 << 20


def catalog_target(row: Mapping[str, Any]) -> dict:
    """The target dict of a catalog device: kind, name, vendor, arch (and isa when known)."""
    t = {"kind": row["kind"], "name": row["name"], "vendor": row["vendor"], "arch": row["architecture"]}
    if row.get("isa"):
        t["isa"] = row["isa"]
    return t


def resolve_target(spec: Any, db: Any = None) -> dict:
    """Target dict of ``spec`` following the module rules; ValueError (one line) when unknown."""
    if isinstance(spec, Mapping):
        return normalise(dict(spec), "target")
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"unknown target {spec!r}: expected a target name, key, preset, catalog device or JSON file")
    spec = spec.strip()
    if db is not None:
        t = db.find_target(spec)
        if t is not None:
            return t
    t = preset(spec)
    if t is not None:
        return t
    if os.path.isfile(spec) or spec.endswith(".json"):
        try:
            with open(spec, encoding="utf-8") as f:
                text = f.read(MAX_TARGET_FILE + 1)
            if len(text) > MAX_TARGET_FILE:
                raise ValueError(f"target file {spec} is over {MAX_TARGET_FILE >> 20} MiB")
            t = jsontext.loads(text, f"target file {spec}")
        except OSError as e:
            raise ValueError(f"cannot read target file {spec}: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"target file {spec} is not valid JSON: {e.msg} at line {e.lineno}") from None
        if not isinstance(t, dict):
            raise ValueError(f"target file {spec} must hold a JSON object")
        return normalise(t, "target")
    r = catalog.resolve(spec, warn=False)
    if r.row is not None:
        return catalog_target(r.row)
    if spec.startswith("cpu-"):
        raise ValueError(f"unknown target {spec!r}: not a preset of this machine (presets: "
                         f"{', '.join(preset_names())})")
    raise ValueError(f"unknown target {spec!r}: not a target in the database, a local preset (e.g. cpu-native), "
                     "a hardware catalog device or a JSON file")
