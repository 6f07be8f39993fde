"""Former home of :mod:`tunedb.transfer.measure.jobs` (``Job``, ``local_job``, ``replay_job``),
kept as a re-export while ``transfer/apps/tune_model.py`` -- edited elsewhere at the time of the
move -- still imports this path.  Import ``tunedb.transfer.measure.jobs``; delete this module once
nothing imports it."""

from __future__ import annotations

from tunedb.transfer.measure.jobs import Job, local_job, replay_job

__all__ = ["Job", "local_job", "replay_job"]
