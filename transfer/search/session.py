"""One tuning run, whoever starts it: the one place a run is put together.

Every entry point that tunes (``tunedb tune`` and ``warm-start``, ``tunedb.tune``, Kernel
Tuner's ``WarmStart``, ``tune_model``, ``migrate``, the demo) opens a :class:`TuningSession`
and does the same four things through it, in this order:

1. the trust view: ``trust`` (``tunedb.index.views.trust``) wraps the store, so only trusted records
   answer look-ups, seeds and the model (commits still go to the store);
2. the stopwatch and the record count before the run (``runlog.Stopwatch``, ``records_in``),
   with the quick machine check when the run measures on this machine;
3. the Tuner(s), with one set of defaults (``TuneOptions()``; an entry point changes a default
   only where its tuner's protocol forces it, see ``docs/transfer.md``, "One engine");
4. the run's summary beside the records (``RecordStore.add_run``), built by ``runlog``.

The run's answer (its best config and that config's estimate) is the Tuner's
(``TuneResult.best_config`` / ``best_estimate``): decided there, for every entry point.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tunedb.transfer.search import runlog
from tunedb.transfer.search.tuner import TuneOptions, Tuner, TuneResult

if TYPE_CHECKING:
    from tunedb.index.contract.base import RecordStore
    from tunedb.transfer.measure.backend import MeasureBackend
    from tunedb.transfer.space import Space


class TuningSession:
    """The frame of one run (module docstring).  ``db``: the store (None: no store, nothing is
    saved); ``kind``: the summary's kind (``tune``, ``warm-start``, ``kernel-tuner``,
    ``tune-model``, ``migrate``, ``demo``); ``target``: the run's target (its name and key go in
    the summary); ``trust``: a trust policy (None: every record); ``check_machine``: run the
    quick machine check first (runs that measure on this machine; not replays).

    ``db`` (after construction) is the trusted view; ``results`` the Tuner results of the run,
    in order; ``run_id`` is set by :meth:`save`.  Raises ValueError for a bad trust policy."""

    def __init__(self, db: RecordStore | None, kind: str, target: Mapping[str, Any], *, trust: str | None = None,
                 check_machine: bool = True) -> None:
        if db is not None and trust is not None:
            from tunedb.index.views.trust import trusted_view

            db = trusted_view(db, trust)
        self.db = db
        self.kind = kind
        self.target = dict(target)
        self.watch = runlog.Stopwatch(check_machine=check_machine)
        self.records_before = runlog.records_in(db)
        self.results: list[TuneResult] = []
        self.run_id: str | None = None

    @property
    def machine(self) -> dict | None:
        """The quick machine check's result (None when not run)."""
        return self.watch.machine

    @property
    def started(self) -> str:
        """When the session started (ISO UTC)."""
        return self.watch.started

    def elapsed(self) -> float:
        """Seconds since the session started."""
        return self.watch.elapsed()

    def tuner(self, target: Mapping[str, Any], workload: Mapping[str, Any], space: Space, backend: MeasureBackend,
              options: TuneOptions, **kw: Any) -> Tuner:
        """A Tuner over the session's store (``kw``: ``Tuner``'s keyword arguments: ``defaults``,
        ``hardware_knobs``, ``progress``, ``on_evaluation``...).  Keep its result with
        :meth:`keep` (:meth:`run` does both)."""
        return Tuner(self.db, target, workload, space, backend, options, **kw)

    def job_tuner(self, job: Any, options: TuneOptions, **kw: Any) -> Tuner:
        """:meth:`tuner` for a ``tunedb.transfer.measure.jobs.Job`` (its target, workload, space,
        backend and tuner keyword arguments)."""
        return self.tuner(job.target, job.workload, job.space, job.backend, options, **job.tuner_kwargs(), **kw)

    def keep(self, result: TuneResult) -> TuneResult:
        """Count ``result`` as one of the run's tasks; returns it."""
        self.results.append(result)
        return result

    def run(self, tuner: Tuner) -> TuneResult:
        """Run ``tuner`` to its end (Ctrl-C: its result says ``interrupted``) and keep its result."""
        return self.keep(tuner.run())

    def summary(self, tasks: Iterable[Mapping[str, Any]] | None = None, *, cold: bool = False, **kw: Any) -> dict:
        """The run summary (``runlog.run_summary``): ``tasks`` default one per kept result
        (``runlog.task_summary``); label ``cold``/``warm`` by ``cold``; ``started``,
        ``wall_s`` (seconds), ``records_before`` and ``machine`` are the session's; ``kw``
        overrides any of these and passes ``run_summary``'s other arguments (``options``,
        ``extra``, ``eta``, ``measure_s``, ``model``)."""
        args: dict[str, Any] = {
            "target": self.target, "started": self.watch.started, "wall_s": self.watch.elapsed(),
            "label": "cold" if cold else "warm", "records_before": self.records_before,
            "machine": self.watch.machine,
            "tasks": [runlog.task_summary(r) for r in self.results] if tasks is None else list(tasks)}
        args.update(kw)
        return runlog.run_summary(self.kind, **args)

    def save(self, tasks: Iterable[Mapping[str, Any]] | None = None, **kw: Any) -> str | None:
        """Build (:meth:`summary`, same arguments) and store the run's summary; its run_id (None
        without a store, or when storing failed: a warning, the records are committed already).
        The summary carries its ``run_id``; :meth:`save_summary` stores one built elsewhere."""
        return self.save_summary(self.summary(tasks, **kw))

    def save_summary(self, summary: dict) -> str | None:
        """Store ``summary`` (a ``runlog.run_summary``), set its ``run_id`` and :attr:`run_id`."""
        summary["run_id"] = self.run_id = runlog.save_run(self.db, summary)
        return self.run_id

