"""Tuning jobs: the target, workload, space, measuring backend and default config one tuning run
serves -- everything a ``Tuner`` takes besides the DB and its options.

Built from the measure layer (``LocalBackend``, the Kernel Tuner replay backend) and the kernel
families; used by the CLI, the apps (``tunedb.tune``, ``tune-model``, the demo), migration
(``tunedb migrate`` re-measures on the destination target) and the public ``tunedb.local_job``.
It lives here, not in ``cli/`` or ``apps/``, because migration (below apps in the layer order)
builds jobs, and nothing in ``search/`` uses it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tunedb.transfer.measure.backend import MeasureBackend
from tunedb.transfer.space import Space


@dataclass
class Job:
    """Everything a Tuner needs besides the DB and options."""

    target: dict
    workload: dict
    space: Space
    backend: MeasureBackend
    defaults: dict
    hardware_knobs: dict = field(default_factory=dict)

    def tuner_kwargs(self) -> dict:
        """Keyword arguments a Tuner takes from the job (besides target, workload, space, backend)."""
        return {"defaults": self.defaults, "hardware_knobs": self.hardware_knobs}


def local_job(target: Mapping[str, Any], workload: Mapping[str, Any], backend: MeasureBackend | None = None) -> Job:
    """A job measured on this machine: ``target`` must be a local preset, ``workload`` a kernel family's.
    Its ``defaults`` are the family's default config for that target (vector width, register tile
    and cache blocks of the target, not of the CPU this runs on).  Raises ValueError with one clear
    line otherwise."""
    from tunedb.transfer.kernels import family_default_config, family_of
    from tunedb.transfer.measure.backend import LocalBackend, check_local_target

    t = check_local_target(target)
    fam = family_of(workload)
    w = fam.validate_workload(workload)
    return Job(t, w, fam.space(w), backend or LocalBackend(), family_default_config(fam, w, t),
               dict(getattr(fam, "hardware_knobs", {}) or {}))


def replay_job(path: str, target: Mapping[str, Any] | None = None, workload: Mapping[str, Any] | None = None,
               device: str | None = None) -> Job:
    """A job answered from a Kernel Tuner cache file (see tunedb.transfer.measure.replay)."""
    from tunedb.transfer.measure.replay import KernelTunerReplayBackend, ReplayData

    data = ReplayData(path, device=device)
    t = dict(target) if target else data.target
    w = dict(workload) if workload else data.workload
    return Job(t, w, data.space, KernelTunerReplayBackend(data), {})
