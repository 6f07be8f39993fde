"""Verification: re-measure other people's best records on the target itself and judge them.

``verify(db, target, backend=...)`` walks the entries (target, workload) of ``target`` (or the
given workloads).  Per entry it takes the ``top_k`` best configs by the one cost estimator
(``db.best_costs``, ``tunedb.index.model.estimate``) and, of each, every record the estimate is made
from (``db.entry_records``) that is *foreign* - not this target's own measurement: source
``imported:*`` or ``migrated:*``, or a ``host`` other than this machine (records whose host is
unknown, ``""``, count as foreign only by their source) - and that carries no verdict yet: a
claim that helps put a config in the top k is checked, whichever record represents it.  Each is measured
again with ``backend`` (this CPU's :class:`~tunedb.transfer.measure.backend.LocalBackend`, or a
replay of a Kernel Tuner cache of the device as the "GPU"); the new record is committed at once
(a real measurement: source ``measured`` or ``replay``, ``meta.verifies`` = the claim's
record_id) and the claim gets a verdict (``db.mark``) as soon as it is known.  A refuted record
stops counting in ``db.best_costs`` / ``db.cost``; the entry is looked at again until its top
``k`` configs rest on no unverdicted foreign record, so the configs that now answer have been
checked too.

Costs (seconds).  A verdict is about one record, so the rule judges what that record claims:
``claimed`` = the record's own cost as the one estimator counts a record (the median of its
repeats, ``estimate([record])``).  Beside it each check reports the config's cost by the
estimator: ``config_cost`` = ``db.cost(target, workload, config)`` before the check (over all the
config's live, unrefuted records on ``target``, the claim included: the number the store was
answering) and ``remeasured`` = the estimate over this check's new measurement(s); both
``CostEstimate`` (value, n, interval).

The rule (``measured`` = every repeat of the new measurement(s))::

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

from tunedb.index.model.estimate import CostEstimate, estimate
from tunedb.index.model.keys import canonical_json, key_of
from tunedb.index.model.units import fmt_seconds
from tunedb.transfer.measure.backend import MeasureBackend, ReplayBackend

if TYPE_CHECKING:
    from tunedb.index.contract.base import Entry, RecordStore
    from tunedb.index.model.record import Record

#: relative tolerance of the verification band (see the module docstring and docs/trust.md)
DEFAULT_TOLERANCE = 1.0
#: measurements per claim before a claim outside the band is refuted (local backends)
DEFAULT_ATTEMPTS = 3
VERDICT_STATES = ("verified", "refuted", "unchecked")


@dataclass
class Check:
    """One checked record: the claim, what was measured here and the verdict.

    ``claimed``: the record's own cost (s; the median of its repeats, as the estimator counts a
    record); ``config_cost``: the config's estimated cost on the target before the check
    (``db.cost``); ``remeasured``: the estimate over the new measurements (None until one is
    ``ok``); ``measured``: every repeat measured here (s, all attempts); ``verdict``:
    ``verified`` | ``refuted`` | ``unchecked`` (no verdict stored); ``reason``: one line;
    ``new_records``: record_ids of the measurements committed."""

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
    config_cost: CostEstimate | None = None
    remeasured: CostEstimate | None = None
    #: the measurements committed for this check (what ``remeasured`` is estimated from)
    measurements: list[Record] = field(default_factory=list, repr=False, compare=False)

    @property
    def measured_mean(self) -> float | None:
        return sum(self.measured) / len(self.measured) if self.measured else None

    def to_json(self) -> dict:
        """Plain JSON; ``config_cost`` / ``remeasured`` as ``CostEstimate.to_dict()`` (or None)."""
        m = self.measured
        return {"record_id": self.record_id, "workload": self.workload, "config": self.config,
                "claimed": self.claimed,
                "config_cost": None if self.config_cost is None else self.config_cost.to_dict(),
                "remeasured": None if self.remeasured is None else self.remeasured.to_dict(),
                "source": self.source, "origin": self.origin, "host": self.host,
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
        from tunedb.index.model.record import this_host

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


def _claims(db: RecordStore, e: Entry, top_k: int, host: str, attempted: set[str], already: set[str]
            ) -> list[tuple[Record, CostEstimate]]:
    """The claims of entry ``e`` to check now, each with its config's estimated cost: of the
    ``top_k`` best configs (``db.best_costs``, best first), every foreign record the estimate
    rests on (``db.entry_records``; oldest first within a config) that has no verdict and was
    not attempted in this run.  Records with a verdict go to ``already``."""
    ranked = db.best_costs(e.target, e.workload, top_k)
    if not ranked:
        return []
    verdicts = db.verdicts()
    by_config: dict[str, list[Record]] = {}
    for r in db.entry_records(e.target, e.workload):
        by_config.setdefault(r.config_key, []).append(r)
    todo: list[tuple[Record, CostEstimate]] = []
    for cc in ranked:
        for r in sorted(by_config.get(cc.config_key, [cc.record]), key=lambda r: (r.timestamp, r.record_id)):
            if r.record_id in attempted or not is_foreign(r, host):
                continue
            if r.record_id in verdicts:
                already.add(r.record_id)
                continue
            todo.append((r, cc.estimate))
    return todo


class _Round:
    """One batch of claims of one entry, measured together and judged as results come in."""

    def __init__(self, db: RecordStore, backend: MeasureBackend, entry: Entry, report: VerifyReport,
                 tolerance: float, notify: Callable[[], None]) -> None:
        self.db, self.backend, self.entry, self.report = db, backend, entry, report
        self.tolerance, self.notify = tolerance, notify

    def run(self, claims: list[tuple[Record, CostEstimate | None]], attempts: int) -> None:
        """Check ``claims``: (record, its config's estimated cost before the check)."""
        data = getattr(self.backend, "data", None)
        results = getattr(data, "results", None) if isinstance(self.backend, ReplayBackend) else None
        pending: list[Check] = []
        for r, config_cost in claims:
            own = estimate([r])
            c = Check(record_id=r.record_id, workload=r.workload, config=r.config,
                      claimed=own.value if own is not None else float(r.cost),
                      source=r.source, origin=r.origin or "", host=r.host or "", config_cost=config_cost)
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
        by_key: dict[str, list[Check]] = {}  # claims of one config are measured once each, in order
        for c in pending:
            by_key.setdefault(key_of(c.config), []).append(c)
        again: list[Check] = []

        def on_record(rec: Record) -> None:
            queue = by_key.get(rec.config_key)
            c = queue.pop(0) if queue else None
            if c is None or c not in left:
                c = left[0]
            left.remove(c)
            rec = dataclasses.replace(rec, meta={**rec.meta, "verifies": c.record_id, "verify_attempt": n})
            self.db.commit(rec)  # a real measurement: kept whatever the verdict
            c.new_records.append(rec.record_id)
            c.measurements.append(rec)
            c.remeasured = estimate(c.measurements)
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
        here = c.remeasured.value if c.remeasured is not None else sum(c.measured) / len(c.measured)
        ratio = c.claimed / here
        side = "faster" if c.claimed < lo else "slower"
        return (f"claimed {fmt_seconds(c.claimed)} is {side} than the measured {fmt_seconds(lo)}..{fmt_seconds(hi)} "
                f"(x{ratio:.3g} of the re-measured cost {fmt_seconds(here)}) beyond tolerance {self.tolerance:g}")

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
    (workload dicts, matched as given or family-normalised); ``top_k``: best configs per entry
    (``db.best_costs``) whose foreign records must be checked; ``backend``: measures on the target (``LocalBackend`` for this CPU's
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
        from tunedb.index.model.record import this_host

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
                todo = _claims(db, e, top_k, host, attempted, already)
                if not todo:
                    break
                attempted.update(r.record_id for r, _ in todo)
                state["total"] = len(report.checks) + len(todo)
                rnd.run(todo, attempts)
    except KeyboardInterrupt:
        report.interrupted = True
    report.already = len(already)
    return report


__all__ = ["verify", "VerifyReport", "Check", "reproduces", "is_foreign", "DEFAULT_TOLERANCE",
           "DEFAULT_ATTEMPTS"]
