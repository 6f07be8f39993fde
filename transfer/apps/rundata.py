"""The run data model of reports and the dashboard: entries' curves, tuning runs and their gains.

Plain dataclasses, built by ``tunedb.transfer.apps.report`` from records and run summaries and
drawn by ``tunedb.transfer.apps.figures``; costs in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tunedb.index.estimate import CostEstimate


@dataclass
class EntryCurve:
    """One (target, workload) entry: the fastest single measurement so far over its records in
    timestamp order (``best_so_far``: the search's history), and the estimator's best config
    (``estimate``: its cost, n and interval; ``best_config``).  ``best_cost`` is the estimate's
    value (the number ``tunedb best`` shows), ``best_seen`` the fastest single measurement."""

    target_key: str
    target_name: str
    workload_key: str
    workload: dict
    records: int
    ok_records: int
    best_so_far: list[float | None]   # after record 1, 2, ... (None until the first ok record)
    best_config: dict | None = None
    estimate: CostEstimate | None = None
    best_seen: float | None = None
    sources: list[str] = field(default_factory=list)

    @property
    def best_cost(self) -> float | None:
        """The estimated cost of the entry's best config (seconds), None without an ok record."""
        return None if self.estimate is None else self.estimate.value

    @property
    def family(self) -> str:
        return str(self.workload.get("family", ""))


@dataclass
class TuneRun:
    """One search of one workload (a run of run JSON, or one task of a stored run summary):
    its history is ``[[evaluation (1-based), best_so_far (seconds) or None], ...]``."""

    target: str
    workload: dict
    label: str
    history: list
    evaluations: int
    cache_hits: int | None      # None when the run JSON does not say (demo histories)
    measurements: int | None
    source: str = ""            # where it came from: a runs file's name, or "database"
    run_id: str = ""            # the run summary's run_id ("" when the run JSON has none)
    #: how the search started: "warm" (seeded from the DB), "cold" (no seeds) or "" (not known)
    start: str = ""


@dataclass
class RunsData:
    """Tuning runs plus the passes of a ``tunedb demo`` output (hit rates of whole passes).

    ``hit_points`` are ``{"label", "evaluations", "cache_hits", "run_id"}`` in the order given;
    ``summaries`` the run summaries (the ``RecordStore.add_run`` schema) the runs came from, in
    the order given (stored ones oldest first)."""

    runs: list[TuneRun] = field(default_factory=list)
    hit_points: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    summaries: list[dict] = field(default_factory=list)
    #: the tuning runs read from the database (:func:`count_runs` of the first summaries)
    stored: int = 0


@dataclass
class GainPoint:
    """One run's gain ``G`` (fraction of tuning time the DB saved) at ``n`` records before it."""

    n: int
    gain: float
    kind: str
    name: str
