"""Where measurements run: here (``LocalExecutor``) or as Ray tasks (``RayExecutor``, in
``transfer.integrations.ray_executor``: Ray is optional and imported only when used; the
``make_executor`` factory that chooses between them is in ``migration.migrate``).

An executor turns (backend, target, workload, configs) into Records; it never writes the DB.
The caller (the driver) commits each record as ``on_record`` hands it over, so the store stays
single-writer per process.

Record identity
    Every record an executor returns is *finalised* where it is built (in the Ray task for
    ``RayExecutor``): its ``record_id`` is derived from the executor run id and the
    (target, workload, config) keys, so a task that Ray retries produces the same record_id
    and the store's ``commit`` skips the duplicate.  A finalisation may also set ``source``
    (e.g. ``migrated:<target>``), ``session`` and extra ``meta``.

``LocalExecutor`` (the default) calls the backend's ``measure_many``: for ``LocalBackend`` that
builds every C variant in a process pool, then times the runs one after another.
``ExecutorBackend`` wraps an executor as a ``MeasureBackend``, so the one "look up, else
measure, then commit" step (``tunedb.transfer.measure.backend.backend.lookup_or_measure``) and the ``Tuner``
run their measurements through it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tunedb.index.model.keys import key_of
from tunedb.transfer.measure.backend import MeasureBackend

if TYPE_CHECKING:
    from tunedb.index.model.record import Record


class ExecutorUnavailable(RuntimeError):
    """The executor cannot run here (e.g. Ray is not installed, or no node owns the target)."""


@dataclass(frozen=True)
class Finalise:
    """How a freshly measured record is stamped before it is handed to the driver.

    ``run_id``: identifies one executor run (retries of a task reuse it); ``source``: None keeps
    the backend's source (``measured``/``replay``); ``session``: stored in ``Record.session``;
    ``meta``: merged into the record's meta (per-config extras come from ``measure``'s ``metas``).
    """

    run_id: str
    source: str | None = None
    session: str = ""
    meta: dict = field(default_factory=dict)

    def apply(self, rec: Record, extra_meta: Mapping[str, Any] | None = None) -> Record:
        rid = key_of({"run": self.run_id, "target": rec.target_key, "workload": rec.workload_key,
                      "config": rec.config_key})
        meta = dict(rec.meta)
        meta.update(self.meta)
        if extra_meta:
            meta.update(extra_meta)
        return replace(rec, record_id=rid, source=self.source or rec.source,
                       session=self.session or rec.session, meta=meta)


def new_run_id() -> str:
    """A fresh random run id (32 hex characters)."""
    return uuid.uuid4().hex


class Executor:
    """Interface: ``measure`` returns the finalised records in ``configs`` order and hands each
    to ``on_record`` as soon as it is available (completion order)."""

    name = "abstract"

    def measure(self, backend: MeasureBackend, target: Mapping[str, Any], workload: Mapping[str, Any],
                configs: Sequence[Mapping[str, Any]], finalise: Finalise,
                metas: Sequence[Mapping[str, Any] | None] | None = None,
                on_record: Callable[[Record], None] | None = None) -> list[Record]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the executor started (no-op by default)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class LocalExecutor(Executor):
    """Measure in this process with the backend's ``measure_many`` (parallel builds, serial runs)."""

    name = "local"

    def measure(self, backend: MeasureBackend, target: Mapping[str, Any], workload: Mapping[str, Any],
                configs: Sequence[Mapping[str, Any]], finalise: Finalise,
                metas: Sequence[Mapping[str, Any] | None] | None = None,
                on_record: Callable[[Record], None] | None = None) -> list[Record]:
        metas = list(metas) if metas is not None else [None] * len(configs)
        out: list[Record] = []

        def cb(rec: Record) -> None:
            r = finalise.apply(rec, metas[len(out)])
            out.append(r)
            if on_record:
                on_record(r)

        backend.measure_many(target, workload, list(configs), on_record=cb)
        return out


class ExecutorBackend(MeasureBackend):
    """A MeasureBackend whose ``measure_many`` goes through an executor (so a ``Tuner`` search or
    ``lookup_or_measure`` can run its measurements on Ray); records keep the inner backend's
    source unless ``finalise`` sets one.  ``metas``: extra meta per config, by ``key_of(config)``
    (merged into the record when that config is measured)."""

    def __init__(self, executor: Executor, backend: MeasureBackend, finalise: Finalise,
                 metas: Mapping[str, Mapping[str, Any]] | None = None):
        self.executor = executor
        self.backend = backend
        self.finalise = finalise
        self.metas = dict(metas or {})
        self.name = backend.name

    def measure(self, target: Mapping[str, Any], workload: Mapping[str, Any], config: Mapping[str, Any]) -> Record:
        return self.measure_many(target, workload, [config])[0]

    def measure_many(self, target: Mapping[str, Any], workload: Mapping[str, Any],
                     configs: Sequence[Mapping[str, Any]],
                     on_record: Callable[[Record], None] | None = None) -> list[Record]:
        metas = [self.metas.get(key_of(c)) for c in configs] if self.metas else None
        return self.executor.measure(self.backend, target, workload, configs, self.finalise, metas=metas,
                                     on_record=on_record)
