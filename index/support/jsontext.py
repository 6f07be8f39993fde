"""Parsing JSON text that other people wrote: one depth limit, one error type.

Every JSON text a user or a publisher hands tunedb (CLI arguments, workload and config files,
importers' lines, snapshot parts and manifests, the API's string arguments) is parsed by
:func:`loads`.  Past :data:`MAX_JSON_DEPTH` levels of objects and lists
it raises ``ValueError`` (one line naming what was read), never ``RecursionError``: the standard
parser's own limit (the interpreter's recursion limit, about 1,000 levels) is far deeper than any
real target, workload or config, and past it the parser raises a bare ``RecursionError``.
"""

from __future__ import annotations

import json
from typing import Any

#: the deepest nesting of objects and lists a JSON value may have (the value itself is level 1):
#: deeper data is refused with one ValueError, never a RecursionError, so no record, query or
#: imported line can hold a value that a reader's recursive JSON parser cannot read back.  (Real
#: targets, workloads and configs nest under 10 levels; a MetaSchedule trace about 8.)
#: ``tunedb.index.model.keys.normalise`` applies the same limit to data given as Python values.
MAX_JSON_DEPTH = 64


def depth_of(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """The nesting depth of objects and lists in ``value`` (a scalar is 0, ``{}`` is 1), counted
    without recursion; stops counting (returns ``limit + 1``) once past ``limit``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            children: Any = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        if d > deepest:
            deepest = d
            if deepest > limit:
                return limit + 1
        stack.extend((c, d + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


def too_deep(what: str, limit: int = MAX_JSON_DEPTH) -> ValueError:
    """The one error for JSON nested past ``limit`` levels, naming ``what`` was read."""
    return ValueError(f"{what}: JSON nested deeper than {limit} levels of objects and lists")


def loads(text: str | bytes, what: str = "JSON", *, wrapping: int = 0) -> Any:
    """``json.loads(text)`` with the project's depth limit: ValueError (``json.JSONDecodeError``
    for text that is not JSON, ``too_deep(what)`` past :data:`MAX_JSON_DEPTH` levels), never
    ``RecursionError``.  ``wrapping``: levels of a container format around the values the limit
    is for (an exported record line wraps its config in one object: 1), allowed on top."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise too_deep(what, MAX_JSON_DEPTH + wrapping) from None
    if isinstance(value, (dict, list)) and depth_of(value, MAX_JSON_DEPTH + wrapping) > MAX_JSON_DEPTH + wrapping:
        raise too_deep(what, MAX_JSON_DEPTH + wrapping)
    return value
