"""Device fields of an imported target: vendor, architecture, ... from the hardware catalog by
device name (:func:`resolve_device_fields`), merged without overwriting parsed fields
(:func:`merge_device_fields`), and the ``gpu``/``cpu`` hint of a TVM-style target
(:func:`kind_hint`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def resolve_device_fields(name: str, kind: str | None = None) -> dict:
    """Vendor/arch/... of a device name from ``tunedb.index.hardware.catalog`` when that module exists; else {}.

    The catalog is owned by another module; any resolver it offers (``resolve_device``) is
    called with the device name.  An unknown device simply adds nothing.
    """
    try:
        catalog = importlib.import_module("tunedb.index.hardware.catalog")
    except ImportError:
        return {}
    fn: Callable | None = getattr(catalog, "resolve_device", None)
    if fn is None:
        return {}
    try:
        res = fn(name) if kind is None else _call_with_kind(fn, name, kind)
    except (KeyError, LookupError, ValueError):
        return {}
    if res is None:
        return {}
    if hasattr(res, "to_json_dict"):
        res = res.to_json_dict()
    return dict(res) if isinstance(res, Mapping) else {}


def merge_device_fields(target: dict, fields: Mapping[str, Any]) -> dict:
    """Add catalog fields to ``target`` without overwriting parsed ones.  The catalog's canonical
    ``device`` name is stored as ``device_name`` (``device`` is a TVM target option, -device=)."""
    for k, v in fields.items():
        target.setdefault("device_name" if k == "device" else k, v)
    return target


def kind_hint(target: Mapping[str, Any]) -> str | None:
    """``gpu``/``cpu`` of a TVM-style target from its keys or kind (the catalog's kind filter)."""
    keys = target.get("keys") if isinstance(target.get("keys"), list) else []
    if "gpu" in keys or target.get("kind") in ("cuda", "rocm", "opencl", "vulkan", "metal", "nvptx", "gpu"):
        return "gpu"
    if "cpu" in keys or target.get("kind") in ("llvm", "c", "cpu"):
        return "cpu"
    return None


def _call_with_kind(fn: Callable, name: str, kind: str) -> Any:
    try:
        return fn(name, kind=kind)
    except TypeError:
        return fn(name)


__all__ = ["kind_hint", "merge_device_fields", "resolve_device_fields"]
