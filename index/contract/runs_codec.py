"""Tuning-run summaries as the backends store them (see "Tuning runs" in ``tunedb.index.contract.base``):
``prepare_run`` checks a summary and encodes it (strict JSON text with ``run_id`` and ``stored``
set) before anything is stored, ``decode_run`` reads one back (None, with a :class:`RunWarning`,
for a torn or foreign one) and ``select_runs`` orders, filters and limits decoded summaries as
:meth:`RecordStore.runs` returns them.  Every backend stores the text ``prepare_run`` made, so the
summaries read back alike everywhere.
"""

from __future__ import annotations

import datetime as _dt
import json
import uuid
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from tunedb.index.contract.checks import is_key

#: bytes: the largest run summary :meth:`RecordStore.add_run` stores (its UTF-8 JSON encoding)
MAX_RUN_BYTES = 16 << 20


def _check_json_keys(value: Any) -> None:
    """``ValueError`` (one line) when a mapping anywhere in ``value`` has a key that is not a str
    (``json.dumps`` would turn it into one: the summary would not read back as given)."""
    stack = [value]
    seen: set[int] = set()
    while stack:
        v = stack.pop()
        if isinstance(v, (Mapping, list, tuple)):
            if id(v) in seen:  # (shared, or a cycle: json.dumps refuses that one)
                continue
            seen.add(id(v))
        if isinstance(v, Mapping):
            for k, x in v.items():
                if not isinstance(k, str):
                    raise ValueError(f"run summary: key {k!r} is a {type(k).__name__}; JSON keys are str")
                stack.append(x)
        elif isinstance(v, (list, tuple)):
            stack.extend(v)


def _json_default(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} {value!r:.40} has no JSON form")


def prepare_run(summary: Any) -> tuple[str, str, str, str]:
    """What :meth:`RecordStore.add_run` stores, checked before anything is: ``(run_id, kind,
    stored, text)``, ``text`` the summary's JSON (with ``run_id`` and ``stored`` set; keys
    sorted, no NaN/infinity) that :func:`decode_run` reads back.  ``stored`` is now (see
    :meth:`RecordStore.add_run`).  ``ValueError`` (one line) for what ``add_run`` refuses."""
    if not isinstance(summary, Mapping):
        raise ValueError(f"a run summary is a mapping (a dict), got {type(summary).__name__}")
    kind = summary.get("kind")
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"a run summary needs a non-empty str 'kind', got {kind!r}")
    run_id = summary.get("run_id")
    if run_id is None:
        run_id = uuid.uuid4().hex
    elif not is_key(run_id):
        raise ValueError(f"run_id {run_id!r}: a run_id is 32 lowercase hex digits")
    _check_json_keys(summary)
    stored = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")
    body = {**summary, "run_id": run_id, "stored": stored}
    try:
        text = json.dumps(body, allow_nan=False, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
                          default=_json_default)
        size = len(text.encode("utf-8"))
    except (TypeError, ValueError, RecursionError, UnicodeEncodeError) as e:
        why = (str(e).splitlines() or [type(e).__name__])[0]
        if "Out of range float" in why:
            why = "NaN and infinity have no JSON form"
        raise ValueError(f"run summary {run_id} is not strict JSON: {why}") from None
    if size > MAX_RUN_BYTES:
        raise ValueError(f"run summary {run_id} is {size} bytes as JSON, over the limit of {MAX_RUN_BYTES}")
    return run_id, kind, stored, text


class RunWarning(UserWarning):
    """A stored run summary could not be read and was left out of :meth:`RecordStore.runs`."""


def decode_run(text: str | bytes, where: str) -> dict | None:
    """The summary stored as ``text`` (what :func:`prepare_run` encoded), or None -- with a
    :class:`RunWarning` naming ``where`` -- when it is not one (torn, foreign: not a JSON object
    with str ``run_id``, ``kind`` and ``stored``)."""
    try:
        d = json.loads(text)
    except (ValueError, RecursionError) as e:
        warnings.warn(f"skipping unreadable run summary {where}: {str(e).splitlines()[0]}", RunWarning,
                      stacklevel=3)
        return None
    if not isinstance(d, dict) or not all(isinstance(d.get(k), str) for k in ("run_id", "kind", "stored")):
        warnings.warn(f"skipping run summary {where}: not an object with str run_id, kind and stored",
                      RunWarning, stacklevel=3)
        return None
    return d


def select_runs(summaries: Iterable[dict], kind: str | None, limit: int | None) -> list[dict]:
    """``summaries`` (decoded, one per run_id) as :meth:`RecordStore.runs` returns them: of
    ``kind`` (all when None), sorted by (``stored``, ``run_id``), the newest ``limit``."""
    out = sorted((d for d in summaries if kind is None or d.get("kind") == kind),
                 key=lambda d: (d["stored"], d["run_id"]))
    if limit is not None:
        out = out[len(out) - limit:] if limit else []
    return out


__all__ = ["MAX_RUN_BYTES", "RunWarning", "prepare_run", "decode_run", "select_runs"]
