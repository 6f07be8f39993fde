"""Argument checks every record-store backend shares: the refusals the contract
(``tunedb.index.contract.base.RecordStore``) states, written once so every backend refuses the same
input with the same one-line ``ValueError``.

``is_key`` (a 32-hex-digit key), :data:`VERDICTS` and ``check_verdicts`` (:meth:`RecordStore.mark`),
``check_columns`` (the projection of :meth:`RecordStore.records`), ``validated_commit`` (what
:meth:`RecordStore.commit` was given), ``check_forget_options`` (:meth:`RecordStore.forget`) and
``check_runs_query`` (:meth:`RecordStore.runs`).  The encoding of tuning-run summaries is
``tunedb.index.contract.runs_codec``.  Nothing here imports the contract module: it imports this one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tunedb.index.model.batch import RecordBatch
    from tunedb.index.model.record import Record

_KEY_RE = re.compile(r"[0-9a-f]{32}")

#: what :meth:`RecordStore.mark` accepts
VERDICTS = ("verified", "refuted")


def is_key(text: Any) -> bool:
    """Whether ``text`` is a 32-hex-digit key (target_key, workload_key, config_key)."""
    return isinstance(text, str) and _KEY_RE.fullmatch(text) is not None


def check_verdicts(verdicts: dict[str, str]) -> None:
    """``ValueError`` (one line) unless ``verdicts`` maps 32-hex record_ids to :data:`VERDICTS`."""
    if not isinstance(verdicts, dict):
        raise ValueError(f"verdicts must be a dict of record_id -> verdict, got {type(verdicts).__name__}")
    for rid, v in verdicts.items():
        if not is_key(rid):
            raise ValueError(f"verdict for {rid!r}: a record_id is 32 lowercase hex digits")
        if v not in VERDICTS:
            raise ValueError(f"verdict for record {rid} is {v!r}, not one of {', '.join(VERDICTS)}")


def check_columns(columns: Any) -> list[str] | None:
    """The projection :meth:`RecordStore.records` was given, checked: ``None`` (every column)
    or a new list of distinct ``RECORD_SCHEMA`` column names in the order given.  ``ValueError``
    (one line) for an unknown or repeated name, an empty projection or a bare ``str`` (a
    sequence of characters, not of names)."""
    if columns is None:
        return None
    from tunedb.index.model.schema import RECORD_SCHEMA

    if isinstance(columns, (str, bytes)) or not isinstance(columns, Iterable):
        raise ValueError(f"columns must be a sequence of column names, got {type(columns).__name__}")
    cols = list(columns)
    if not cols:
        raise ValueError("columns must name at least one column (None reads every column)")
    known = set(RECORD_SCHEMA.names)
    seen: set[str] = set()
    for c in cols:
        if not isinstance(c, str) or c not in known:
            raise ValueError(f"unknown record column {c!r}; the columns are those of RECORD_SCHEMA")
        if c in seen:
            raise ValueError(f"column {c!r} is given twice")
        seen.add(c)
    return cols


def validated_commit(records: Any) -> RecordBatch | list[Record]:
    """What :meth:`RecordStore.commit` was given, checked before anything is stored: a
    RecordBatch (``check()``-ed) as it is, else a list of Records, each validated.  ``ValueError``
    (one line) for the first invalid record or anything that is not a Record.  These are the
    checks every backend shares (``Record.validate``/``RecordBatch.validate``: lone surrogates,
    NUL, size, numbers, timestamps; see the ``tunedb.index.model.record`` docstring), so no backend
    stores what another would refuse or could not read back."""
    from tunedb.index.model.batch import RecordBatch
    from tunedb.index.model.record import Record

    if isinstance(records, RecordBatch):
        records.check()
        return records
    recs = [records] if isinstance(records, Record) else list(records)
    for r in recs:
        if not isinstance(r, Record):
            raise ValueError(f"commit takes Records or a RecordBatch, got {type(r).__name__}")
        r.validate()
    return recs


def check_forget_options(keep_top: int | None, older_than_days: float | None, target: Any) -> None:
    """``ValueError`` (one line) for the :meth:`RecordStore.forget` options it refuses."""
    if keep_top is None and older_than_days is None and target is None:
        raise ValueError("forget needs keep_top, older_than_days or target")
    if keep_top is not None and keep_top < 0:
        raise ValueError("keep_top must be >= 0")


def check_runs_query(kind: Any, limit: Any) -> None:
    """``ValueError`` (one line) for the :meth:`RecordStore.runs` arguments it refuses."""
    if kind is not None and not isinstance(kind, str):
        raise ValueError(f"runs: kind must be a str or None, got {type(kind).__name__}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"runs: limit must be an int >= 0 or None, got {limit!r}")


__all__ = ["VERDICTS", "is_key", "check_verdicts", "check_columns", "validated_commit", "check_forget_options",
           "check_runs_query"]
