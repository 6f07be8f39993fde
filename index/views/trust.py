"""Trust policies: which records a reader lets answer, by where they came from.

A store holds records of several provenances (``Record.source``: ``measured``, ``replay``,
``imported:<format>``, ``migrated:<target>``; ``Record.host``: the machine whose tunedb created
it; a *verdict* from ``tunedb verify``, see ``RecordStore.mark``).  A :class:`TrustPolicy` says
which of them a reader believes; :class:`TrustedStore` is a store view that answers reads only
from the records its policy trusts, so a tuner on it measures an untrusted config itself
instead of taking someone else's claim for it.

Policy text (``--trust``, ``tunedb.tune(..., trust=...)``): a comma-separated list of patterns;
a record is trusted when **any** pattern matches it (a union; there is no negation):

================== ===========================================================
``measured``       ``source == "measured"`` (a local measurement)
``replay``         ``source == "replay"`` (answered from a recorded data set)
``imported``       any ``imported:*`` source
``imported:FMT``   exactly ``imported:FMT`` (e.g. ``imported:autotvm``)
``migrated``       any ``migrated:*`` source
``migrated:T``     exactly ``migrated:T``
``verified``       any record whose verdict is ``verified`` (``tunedb verify``)
``host:NAME``      ``host == NAME`` (the machine whose tunedb created the record)
================== ===========================================================

Patterns are matched exactly (case-sensitive, as sources are stored); surrounding blanks are
ignored.  Nothing of a record is ever evaluated: sources, hosts and record ids are compared as
strings.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunedb.index.contract.base import RecordStore
from tunedb.index.contract.checks import check_columns
from tunedb.index.retrieval.mixin import RetrievalMixin
from tunedb.index.views.filtered import FilteredStore

if TYPE_CHECKING:
    import pyarrow as pa

    from tunedb.index.model.record import Record

_FORMAT_RE = re.compile(r"[A-Za-z0-9_.-]+")  # as tunedb.index.model.record.SOURCE_RE accepts after "imported:"
PATTERN_HELP = "measured, replay, imported[:FORMAT], migrated[:TARGET], verified or host:NAME"


@dataclass(frozen=True)
class TrustPolicy:
    """A parsed trust policy (see the module docstring); build it with :func:`parse_trust`.

    ``sources``: exact sources trusted; ``prefixes``: source prefixes trusted (``imported:``,
    ``migrated:``); ``hosts``: hosts trusted; ``verified``: whether a ``verified`` verdict makes
    a record trusted; ``text``: the canonical policy text (patterns in the order given,
    duplicates dropped)."""

    sources: frozenset = frozenset()
    prefixes: tuple = ()
    hosts: frozenset = frozenset()
    verified: bool = False
    text: str = ""

    def trusts(self, source: str | None, host: str | None = "", verdict: str | None = None) -> bool:
        """Whether a record of ``source`` made on ``host`` with ``verdict`` (None: none) is trusted.
        A missing source counts as ``measured`` and a missing host as ``""`` (unknown), as
        ``Record.from_row`` reads them."""
        src = source or "measured"
        if src in self.sources or any(src.startswith(p) for p in self.prefixes):
            return True
        if self.hosts and (host or "") in self.hosts:
            return True
        return self.verified and verdict == "verified"

    def trusts_record(self, rec: Record, verdicts: dict[str, str] | None = None) -> bool:
        """:meth:`trusts` of a Record (``verdicts``: record_id -> verdict, needed for ``verified``)."""
        v = (verdicts or {}).get(rec.record_id) if self.verified else None
        return self.trusts(rec.source, rec.host or "", v)

    def mask(self, table: pa.Table, verdicts: dict[str, str] | None = None) -> pa.Array:
        """Boolean Arrow array: which rows of a records table (``RECORD_SCHEMA`` columns) are
        trusted.  A table without a ``host`` column (schema 1) has unknown hosts."""
        import pyarrow as pa
        import pyarrow.compute as pc

        n = table.num_rows
        if n == 0:
            return pa.array([], pa.bool_())
        src = pc.fill_null(table.column("source"), "measured")
        m = pc.is_in(src, value_set=pa.array(sorted(self.sources), pa.string()))
        for p in self.prefixes:
            m = pc.or_(m, pc.starts_with(src, p))
        if self.hosts:
            if "host" in table.column_names:
                host = pc.fill_null(table.column("host"), "")
            else:
                host = pa.repeat(pa.scalar("", pa.string()), n)
            m = pc.or_(m, pc.is_in(host, value_set=pa.array(sorted(self.hosts), pa.string())))
        if self.verified and verdicts:
            ok = sorted(rid for rid, v in verdicts.items() if v == "verified")
            m = pc.or_(m, pc.is_in(table.column("record_id"), value_set=pa.array(ok, pa.string())))
        return pc.fill_null(m, False)


def parse_trust(text: str) -> TrustPolicy:
    """The :class:`TrustPolicy` of a comma-separated pattern list (see the module docstring).

    ``ValueError`` (one line) for an empty list, an empty pattern (``"measured,,replay"``) or
    one that is not a pattern (``"imported:"``, ``"host:"``, ``"trusted"``)."""
    if not isinstance(text, str):
        raise ValueError(f"a trust policy is a comma-separated text of patterns, got {type(text).__name__}")
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise ValueError(f"empty trust policy: give one or more of {PATTERN_HELP}")
    sources: set[str] = set()
    prefixes: list[str] = []
    hosts: set[str] = set()
    verified = False
    seen: list[str] = []
    for p in parts:
        if not p:
            raise ValueError(f"trust policy {text!r} has an empty pattern (two commas in a row?)")
        kind, colon, arg = p.partition(":")
        if p in ("measured", "replay"):
            sources.add(p)
        elif p in ("imported", "migrated"):
            if p + ":" not in prefixes:
                prefixes.append(p + ":")
        elif p == "verified":
            verified = True
        elif colon and kind == "imported" and _FORMAT_RE.fullmatch(arg):
            sources.add(p)
        elif colon and kind == "migrated" and arg.strip():
            sources.add(p)
        elif colon and kind == "host" and arg.strip():
            hosts.add(arg)
        else:
            raise ValueError(f"unknown trust pattern {p!r}: expected {PATTERN_HELP}")
        if p not in seen:
            seen.append(p)
    return TrustPolicy(frozenset(sources), tuple(prefixes), frozenset(hosts), verified, ",".join(seen))


def as_policy(policy: TrustPolicy | str) -> TrustPolicy:
    """``policy`` as a :class:`TrustPolicy` (text is parsed; ``ValueError`` when bad)."""
    return policy if isinstance(policy, TrustPolicy) else parse_trust(policy)


class TrustedStore(RetrievalMixin, FilteredStore):
    """A view of ``inner`` whose reads answer only from records ``policy`` trusts: a
    :class:`~tunedb.index.views.filtered.FilteredStore` whose filter is the policy, with the bulk
    reads filtered too.

    Filtered: :meth:`lookup`, :meth:`lookup_many`, ``entry_records`` and ``best``/``best_costs``/
    ``cost`` (as in every filtered store), and here also :meth:`records` (and what the base class
    builds on it: ``iter_records``, ``entries``, ``entry_list``, ``nearest``, ``predict_best``).
    An untrusted record never answers: :meth:`lookup` returns the latest *trusted* live record
    of the triple (None when there is none, or when the store's own answer is None: nothing
    live, or its latest record is ``refuted``), so a tuner on this view measures an untrusted
    config itself; ``best`` ranks trusted ``ok`` records only (stale and ``refuted`` ones
    excluded, as in every store).  Entries with no trusted record drop out of ``entries``.

    Passed through unchanged, as in every filtered store: every write, ``verdicts``, ``runs`` (a
    run summary is not a record: the policy does not apply), ``targets`` and ``find_target`` (a
    target is known even when none of its records is trusted), ``len``, ``size_bytes``,
    ``stale_targets``, ``refresh``, ``close`` and ``location``.  ``stats`` is the inner store's
    with this view's ``lookups``/``hits``.  :meth:`cache_dir` is a sub-directory of the inner
    store's per policy (the vector index of a view differs from the store's) and
    :meth:`change_token` the inner token plus the policy.  Thread-safe as the inner store is.
    """

    def __init__(self, inner: RecordStore, policy: TrustPolicy | str) -> None:
        if not isinstance(inner, RecordStore):
            raise ValueError(f"TrustedStore wraps a RecordStore, got {type(inner).__name__}")
        self.policy = as_policy(policy)
        super().__init__(inner, name="trusted:" + self.policy.text)

    def __repr__(self) -> str:
        return f"TrustedStore({self.inner.location!r}, trust={self.policy.text!r})"

    # ------------------------------------------------------------------ the filter
    def keeps(self, rec: Record) -> bool:
        """Whether the policy trusts ``rec``."""
        return self.policy.trusts_record(rec, self.cached_verdicts() if self.policy.verified else None)

    def mask(self, table: pa.Table) -> pa.Array:
        """The policy's mask of a records table (vectorised)."""
        return self.policy.mask(table, self.cached_verdicts() if self.policy.verified else None)

    # ------------------------------------------------------------------ bulk reads (filtered)
    def records(self, target: Any = None, workload: Any = None, *, include_stale: bool = True,
                columns: Sequence[str] | None = None) -> pa.Table:
        """The inner store's :meth:`records` rows that the policy trusts (same columns and order).
        A projection reads from the inner store only ``columns`` and what the policy looks at
        (``source``; ``host`` with host patterns; ``record_id`` with ``verified``)."""
        cols = check_columns(columns)
        read = None
        if cols is not None:
            need = ["source"] + (["host"] if self.policy.hosts else []) + \
                (["record_id"] if self.policy.verified else [])
            read = cols + [c for c in need if c not in cols]
        t = self.inner.records(target, workload, include_stale=include_stale, columns=read)
        t = t.filter(self.mask(t))
        return t if cols is None else t.select(cols)

    def entries(self) -> pa.Table:
        """The entries of the trusted records (an entry with none drops out)."""
        return RecordStore.entries(self)

    # ------------------------------------------------------------------ derived data
    def cache_dir(self) -> Path:
        """``inner.cache_dir() / "trusted" / <policy hash>`` (created on demand)."""
        from tunedb.index.model.keys import key_of_text

        d = Path(self.inner.cache_dir()) / "trusted" / key_of_text(self.policy.text)[:16]
        d.mkdir(parents=True, exist_ok=True)
        return d

    def change_token(self) -> tuple:
        return ("trusted", self.policy.text, self.inner.change_token())


def trusted_view(store: RecordStore, trust: TrustPolicy | str | None) -> RecordStore:
    """``store`` itself when ``trust`` is None, else a :class:`TrustedStore` of it
    (``ValueError`` for a bad policy text)."""
    return store if trust is None else TrustedStore(store, trust)


__all__ = ["TrustPolicy", "TrustedStore", "parse_trust", "as_policy", "trusted_view", "PATTERN_HELP"]
