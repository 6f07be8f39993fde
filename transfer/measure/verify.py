"""Verification: re-measure other people's best records on the target itself and judge them.

``verify(db, target, backend=...)`` walks the entries (target, workload) of ``target`` (or the
given workloads).  Per entry it takes the ``top_k`` best configs (``db.best``) and picks those
whose best record is *foreign* - not this target's own measurement: source ``imported:*`` or
``migrated:*``, or a ``host`` other than this machine (records whose host is unknown, ``""``,
count as foreign only by their source) - and that carry no verdict yet.  Each is measured
again with ``backend`` (this CPU's :class:`~tunedb.transfer.measure.backend.LocalBackend`, or a
replay of a Kernel Tuner cache of the device as the "GPU"); the new record is committed at once
(a real measurement: source ``measured`` or ``replay``, ``meta.verifies`` = the claim's
record_id) and the claim gets a verdict (``db.mark``) as soon as it is known.  A refuted record
leaves ``db.best``; the entry is looked at again until its top ``k`` holds no unverdicted
foreign record, so the configs that now answer have been checked too.

The rule (costs in seconds; ``claimed`` = the record's mean cost; ``measured`` = every repeat of
the new measurement(s))::

    verified  iff  min(measured) / (1 + tolerance)  <=  claimed  <=  max(measured) * (1 + tolerance)

A claim outside that band is measured again, up to ``attempts`` times in all (not for replay
backends, which answer the same every time); the band is taken over the repeats of all attempts,
and the claim is ``refuted`` only when the last attempt still leaves it outside.  A config that
fails here (compile error, wrong result, timeout, ... or a failure the replayed cache recorded)
refutes a claim that it ran.  A config the replayed cache does not hold cannot be checked: it is
reported ``unchecked`` and gets no verdict.

:data:`DEFAULT_TOLERANCE` is set from measured cross-run noise (``docs/trust.md``): 12 matmul
configs (3 sizes) each measured in 10 separate runs on this project's shared 2-core machine, with
the default timing protocol: one run's mean lay up to 0.97 (p99 0.72) outside another run's
[min, max] band, and up to 0.76 (p99 0.58) outside the band of three other runs.  1.0 passes all
of it and still refutes any claim more than twice as fast as the fastest repeat seen here.

Nothing of a record (config, meta, error text) is executed or evaluated: configs go to the
backend, which validates them against the family's space (local) or looks them up (replay).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tunedb.index.keys import canonical_json, key_of
from tunedb.transfer.measure.backend import MeasureBackend, ReplayBackend

if TYPE_CHECKING:
    from tunedb.index.base import Entry, RecordStore
    from tunedb.index.record import Record

#: relative tolerance of the verification band (see the module docstring and docs/trust.md)
DEFAULT_TOLERANCE = 1.0
#: measurements per claim before a claim outside the band is refuted (local backends)
DEFAULT_ATTEMPTS = 3
VERDICT_STATES = ("verified", "refuted", "unchecked")


@dataclass
class Check:
    """One checked record: the claim, what was measured here and the verdict.

    ``claimed``: the record's mean cost (s); ``measured``: every repeat measured here (s, all
    attempts); ``verdict``: ``verified`` | ``refuted`` | ``unchecked`` (no verdict stored);
    ``reason``: one line; ``new_records``: record_ids of the measurements committed."""

    record_id: str
    workload: dict
    config: dict
    claimed: float
    source: str
    origin: str = ""
    host: str = ""
    verdict: str = "unchecked"
    reason: str = ""
    measured: list[float] = field(default_factory=list)
    measured_status: str = ""
    attempts: int = 0
    new_records: list[str] = field(default_factory=list)

    @property
    def measured_mean(self) -> float | None:
        return sum(self.measured) / len(self.measured) if self.measured else None

    def to_json(self) -> dict:
        m = self.measured
        return {"record_id": self.record_id, "workload": self.workload, "config": self.config,
                "claimed": self.claimed, "source": self.source, "origin": self.origin, "host": self.host,
                "verdict": self.verdict, "reason": self.reason, "measured_mean": self.measured_mean,
                "measured_min": min(m) if m else None, "measured_max": max(m) if m else None,
                "measured": list(m), "measured_status": self.measured_status, "attempts": self.attempts,
                "new_records": list(self.new_records)}


@dataclass
class VerifyReport:
    """What :func:`verify` did: the target, the rule's ``tolerance``, every :class:`Check` in the
    order made, ``already`` (foreign top-k records skipped because they had a verdict before
    this run), ``entries`` (how many (target, workload) entries were looked at) and
    ``interrupted`` (Ctrl-C: what was verified before it is kept)."""

    target: dict
    tolerance: float
    top_k: int
    checks: list[Check] = field(default_factory=list)
    already: int = 0
    entries: int = 0
    interrupted: bool = False

    @property
    def totals(self) -> dict:
        t = {s: sum(c.verdict == s for c in self.checks) for s in VERDICT_STATES}
        return {"checked": len(self.checks), **t, "already": self.already, "entries": self.entries}

    def to_json(self) -> dict:
        return {"target": self.target.get("name", ""), "target_json": self.target, "tolerance": self.tolerance,
                "top_k": self.top_k, "checks": [c.to_json() for c in self.checks], "totals": self.totals,
                "interrupted": self.interrupted}


def reproduces(claimed: float, measured: Iterable[float], tolerance: float = DEFAULT_TOLERANCE) -> bool:
    """Whether a ``claimed`` cost (s) lies in ``[min(measured)/(1+tolerance), max(measured)*(1+tolerance)]``
    (False without measurements)."""
    m = list(measured)
    if not m:
        return False
    return min(m) / (1.0 + tolerance) <= claimed <= max(m) * (1.0 + tolerance)


def is_foreign(rec: Record, host: str | None = None) -> bool:
    """Whether ``rec`` is not this target's own measurement: source ``imported:*``/``migrated:*``,
    or a known ``host`` other than ``host`` (default: this machine)."""
    if rec.source.startswith(("imported:", "migrated:")):
        return True
    rh = rec.host or ""
    if not rh:
        return False
    if host is None:
        from tunedb.index.record import this_host

        host = this_host()
    return rh != host


def _check_args(top_k: int, tolerance: float, attempts: int) -> None:
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
        raise ValueError(f"top_k must be an integer >= 1, got {top_k!r}")
    if not isinstance(tolerance, (int, float)) or not math.isfinite(tolerance) or tolerance < 0:
        raise ValueError(f"tolerance must be a finite number >= 0, got {tolerance!r}")
    if not isinstance(attempts, int) or attempts < 1:
        raise ValueError(f"attempts must be an integer >= 1, got {attempts!r}")


def _target_of(db: RecordStore, target: Any) -> dict:
    if isinstance(target, str):
        found = db.find_target(target)
        if found is None:
            raise ValueError(f"target {target!r} has no records in {db.location}")
        return found
    if not isinstance(target, Mapping):
        raise ValueError(f"target must be a dict or a name/key, got {type(target).__name__}")
    t = dict(target)
    tkey = key_of(t)
    if not any(x["target_key"] == tkey for x in db.targets()):
        raise ValueError(f"target {t.get('name', tkey)!r} has no records in {db.location}")
    return t


def _entries(db: RecordStore, target: dict, workloads: Iterable[Mapping[str, Any]] | None,
             backend: MeasureBackend) -> list[Entry]:
    tkey = key_of(target)
    ents = [e for e in db.entry_list() if e.target_key == tkey]
    if workloads is None:
        return ents
    from tunedb.transfer.measure.backend import normalise_workload

    by_key = {e.workload_key: e for e in ents}
    out: list[Entry] = []
    for w in workloads:
        keys = [key_of(dict(w))]
        try:
            keys.append(key_of(normalise_workload(w, backend)))
        except (ValueError, TypeError):
            pass
        e = next((by_key[k] for k in keys if k in by_key), None)
        if e is None:
            raise ValueError(f"workload {canonical_json(dict(w))} has no records of target "
                             f"{target.get('name', tkey)!r}")
        if e not in out:
            out.append(e)
    return out


class _Round:
    """One batch of claims of one entry, measured together and judged as results come in."""

    def __init__(self, db: RecordStore, backend: MeasureBackend, entry: Entry, report: VerifyReport,
                 tolerance: float, notify: Callable[[], None]) -> None:
        self.db, self.backend, self.entry, self.report = db, backend, entry, report
        self.tolerance, self.notify = tolerance, notify

    def run(self, claims: list[Record], attempts: int) -> None:
        data = getattr(self.backend, "data", None)
        results = getattr(data, "results", None) if isinstance(self.backend, ReplayBackend) else None
        pending: list[Check] = []
        for r in claims:
            c = Check(record_id=r.record_id, workload=r.workload, config=r.config, claimed=float(r.cost),
                      source=r.source, origin=r.origin or "", host=r.host or "")
            if isinstance(results, Mapping) and canonical_json(r.config) not in results:
                c.reason = "the replayed cache does not hold this config: cannot check it"
                self._done(c, None)
            else:
                pending.append(c)
        if isinstance(self.backend, ReplayBackend):
            attempts = 1  # a replay answers the same every time
        for n in range(1, attempts + 1):
            if not pending:
                break
            pending = self._attempt(pending, n, last=n == attempts)

    def _attempt(self, pending: list[Check], n: int, last: bool) -> list[Check]:
        """Measure every pending claim once more; return those still outside the band (not last)."""
        left = list(pending)
        by_key = {key_of(c.config): c for c in pending}
        again: list[Check] = []

        def on_record(rec: Record) -> None:
            c = by_key.pop(rec.config_key, None)
            if c is None or c not in left:
                c = left[0]
            left.remove(c)
            rec = dataclasses.replace(rec, meta={**rec.meta, "verifies": c.record_id, "verify_attempt": n})
            self.db.commit(rec)  # a real measurement: kept whatever the verdict
            c.new_records.append(rec.record_id)
            c.attempts = n
            c.measured_status = rec.status
            if rec.status == "ok":
                c.measured.extend(rec.costs)
            if c.measured and reproduces(c.claimed, c.measured, self.tolerance):
                c.reason = "claimed cost lies within the measured spread"
                self._done(c, "verified")
            elif not last:
                again.append(c)
            else:
                c.reason = self._why(c, rec)
                self._done(c, "refuted")

        self.backend.measure_many(self.entry.target, self.entry.workload, [c.config for c in pending],
                                  on_record=on_record)
        return again

    def _why(self, c: Check, rec: Record) -> str:
        if not c.measured:
            err = (rec.error or "").strip().splitlines()
            return f"measured status {rec.status}" + (f": {err[0][:160]}" if err else "")
        lo, hi = min(c.measured), max(c.measured)
        ratio = c.claimed / (sum(c.measured) / len(c.measured))
        side = "faster" if c.claimed < lo else "slower"
        return (f"claimed {c.claimed:.4g} s is {side} than the measured {lo:.4g}..{hi:.4g} s "
                f"(x{ratio:.3g} of the measured mean) beyond tolerance {self.tolerance:g}")

    def _done(self, c: Check, verdict: str | None) -> None:
        if verdict is not None:
            self.db.mark({c.record_id: verdict})
            c.verdict = verdict
        self.report.checks.append(c)
        self.notify()


def verify(db: RecordStore, target: Any, *, workloads: Iterable[Mapping[str, Any]] | None = None,
           top_k: int = 3, backend: MeasureBackend, tolerance: float = DEFAULT_TOLERANCE,
           attempts: int = DEFAULT_ATTEMPTS, progress: Callable[[dict], None] | None = None,
           host: str | None = None) -> VerifyReport:
    """Verify the foreign best records of ``target`` in ``db`` (see the module docstring).

    ``target``: a target dict or a name/key ``db`` knows; ``workloads``: only these entries
    (workload dicts, matched as given or family-normalised); ``top_k``: configs per entry that
    must be checked; ``backend``: measures on the target (``LocalBackend`` for this CPU's
    presets, ``KernelTunerReplayBackend`` for a device's cache); ``tolerance``: of the rule;
    ``attempts``: measurements per claim before refuting it (local backends); ``progress``:
    called after each check with ``{"done", "total", "verified", "refuted", "unchecked"}``
    (``total`` is an estimate that grows when refuted records bring new ones into the top k);
    ``host``: this machine's name (default ``this_host()``).

    Every new measurement is committed and every verdict marked as soon as it is known, so
    Ctrl-C (``KeyboardInterrupt``, caught: ``report.interrupted``) keeps everything checked
    before it and a rerun skips records that have a verdict.  ``ValueError`` (one line) for bad
    arguments, a target ``db`` holds no records of, a workload it holds no records of for that
    target, or a target/workload the backend cannot measure."""
    _check_args(top_k, tolerance, attempts)
    if host is None:
        from tunedb.index.record import this_host

        host = this_host()
    tdict = _target_of(db, target)
    entries = _entries(db, tdict, workloads, backend)
    report = VerifyReport(target=tdict, tolerance=float(tolerance), top_k=top_k, entries=len(entries))
    state = {"total": 0}

    def notify() -> None:
        if progress is not None:
            t = report.totals
            progress({"done": len(report.checks), "total": max(state["total"], len(report.checks)),
                      "verified": t["verified"], "refuted": t["refuted"], "unchecked": t["unchecked"]})

    attempted: set[str] = set()
    already: set[str] = set()
    try:
        for e in entries:
            rnd = _Round(db, backend, e, report, float(tolerance), notify)
            while True:
                verdicts = db.verdicts()
                todo = []
                for r in db.best(e.target, e.workload, top_k):
                    if r.record_id in attempted or not is_foreign(r, host):
                        continue
                    if r.record_id in verdicts:
                        already.add(r.record_id)
                        continue
                    todo.append(r)
                if not todo:
                    break
                attempted.update(r.record_id for r in todo)
                state["total"] = len(report.checks) + len(todo)
                rnd.run(todo, attempts)
    except KeyboardInterrupt:
        report.interrupted = True
    report.already = len(already)
    return report


__all__ = ["verify", "VerifyReport", "Check", "reproduces", "is_foreign", "DEFAULT_TOLERANCE",
           "DEFAULT_ATTEMPTS"]
