"""``tunedb.tune``: tune one workload on this machine with real builds, and store the run's summary.

The application around the search (``tunedb.transfer.search.tuner.Tuner``): the workload's
kernel family gives the space and the backend (``measure.jobs.local_job``), the run's summary
goes beside the records (``RecordStore.add_run``, kind ``tune``), as the CLI's ``tunedb tune``
stores it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tunedb.transfer.measure.jobs import local_job
from tunedb.transfer.search.tuner import TuneOptions, TuneResult

if TYPE_CHECKING:
    from tunedb.index.contract.base import RecordStore
    from tunedb.transfer.measure.backend import MeasureBackend


def tune(db: RecordStore, target: Mapping[str, Any], workload: Mapping[str, Any], *, budget: int = 16,
         options: TuneOptions | None = None, backend: MeasureBackend | None = None, trust: str | None = None,
         **kw: Any) -> TuneResult:
    """Tune ``workload`` on ``target`` (a local preset of this machine) with real builds: the public
    ``tunedb.tune``.

    The space, defaults and hardware knobs come from the workload's kernel family
    (``local_job``); ``backend`` defaults to ``LocalBackend()``.  ``options`` (default
    ``TuneOptions(budget=budget)``; when given, ``budget`` is ignored); ``kw`` goes to
    :class:`Tuner` (``progress``, ``model``).  Every evaluation asks ``db`` first and commits what
    it measures (see the module docstring), so a rerun is all cache hits.  ``trust`` (e.g.
    ``"measured,imported:autotvm"``, see ``tunedb.index.views.trust``): only records it trusts answer
    look-ups, seeds and the model (``db`` is wrapped in a ``TrustedStore``; commits go to ``db``).
    Without ``options`` the run re-measures its 2 leaders twice, interleaved, at the end
    (``confirm_top=2, confirm_rounds=2``), so ``best_cost`` is not the sample that selected the
    winner (``TuneResult.selection_biased`` is False then).
    The run's summary is stored in ``db`` (``RecordStore.add_run``, kind ``tune``).
    Raises ValueError (one line) for a target that is not a local preset, a workload no kernel
    family accepts or a bad trust policy."""
    from tunedb.transfer.search.session import TuningSession

    job = local_job(target, workload, backend)
    opts = options or TuneOptions(budget=budget, confirm_top=2, confirm_rounds=2)
    session = TuningSession(db, "tune", job.target, trust=trust, check_machine=job.backend.name != "replay")
    res = session.run(session.job_tuner(job, opts, **kw))
    # the run's summary beside the records (``RecordStore.runs()``), as the CLI's tune stores it
    session.save(cold=opts.cold, options={"budget": opts.budget, "seed": opts.seed, "cold": opts.cold},
                 extra={"interrupted": res.interrupted})
    return res
