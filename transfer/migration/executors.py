"""Where measurements run: here (``LocalExecutor``) or as Ray tasks (``RayExecutor``).

An executor turns (backend, target, workload, configs) into Records; it never writes the DB.
The caller (the driver) commits each record as ``on_record`` hands it over, so the store stays
single-writer per process.

Record identity
    Every record an executor returns is *finalised* where it is built (in the Ray task for
    ``RayExecutor``): its ``record_id`` is derived from the executor run id and the
    (target, workload, config) keys, so a task that Ray retries produces the same record_id
    and ``TuningDB.commit`` skips the duplicate.  A finalisation may also set ``source``
    (e.g. ``migrated:<target>``), ``session`` and extra ``meta``.

``LocalExecutor`` (the default) calls the backend's ``measure_many``: for ``LocalBackend`` that
builds every C variant in a process pool, then times the runs one after another.

``RayExecutor(address=None)`` runs one Ray task per config.  Each task requests a small amount
(``0.001``) of the custom resource ``tunedb-target:<target name>`` (see ``target_resource``), so
it is scheduled only on a node that declared it owns the target, e.g.::

    ray start --head --resources '{"tunedb-target:cpu-native-t1": 1}'

Timed runs on one node stay serial (``LocalBackend`` holds a machine-wide lock while timing).
``ray`` is imported lazily; without it ``RayExecutor`` raises ``ExecutorUnavailable``.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunedb.index.keys import key_of
from tunedb.transfer.measure.backend import MeasureBackend

if TYPE_CHECKING:
    from tunedb.index.record import Record

REPO_ROOT = Path(__file__).resolve().parents[1]
RESOURCE_PREFIX = "tunedb-target:"
RESOURCE_PER_TASK = 0.001   # fraction of the target resource one measurement task holds


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


def target_resource(target: Mapping[str, Any]) -> str:
    """Name of the Ray custom resource a node declares to own ``target``:
    ``tunedb-target:<name>`` with characters outside ``[A-Za-z0-9_.-]`` replaced by ``_``."""
    from tunedb.index.record import target_display_name

    return RESOURCE_PREFIX + re.sub(r"[^A-Za-z0-9_.\-]+", "_", target_display_name(target))


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


def _measure_task(backend: MeasureBackend, target: dict, workload: dict, config: dict, finalise: Finalise,
                  extra_meta: dict | None) -> Record:
    """Body of one Ray task: measure one config on this node and finalise the record here."""
    import socket

    rec = backend.measure(target, workload, config)
    meta = {"executor": "ray", "worker_pid": os.getpid(), "worker_host": socket.gethostname()}
    try:
        import ray

        meta["ray_node_id"] = ray.get_runtime_context().get_node_id()
    except Exception:  # pragma: no cover - only outside a Ray worker
        pass
    meta.update(extra_meta or {})
    return finalise.apply(rec, meta)


def import_ray() -> Any:
    """The ``ray`` module, or ExecutorUnavailable with one line saying how to get it."""
    try:
        import ray
    except ImportError:
        raise ExecutorUnavailable("the ray executor needs Ray: pip install -e '.[ray]' "
                                  "(or pip install 'ray>=2.9')") from None
    return ray


class RayExecutor(Executor):
    """Measure each config as a Ray task on a node owning the target (see module docstring).

    ``address``: a Ray cluster address (``auto``, ``ray://host:10001``, ...).  None: use the Ray
    instance this process already joined, else the one in ``RAY_ADDRESS``, else start a local
    instance (``num_cpus`` CPUs) that declares it owns the targets it is first asked to measure
    (that instance is shut down by ``close``).  ``max_retries``: Ray retries of a failed task.
    """

    name = "ray"

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None, max_retries: int = 2):
        self.ray = import_ray()
        self.address = address
        self.num_cpus = num_cpus
        self.max_retries = max_retries
        self._started = False
        self._remote: Any = None
        self._backend_refs: dict[int, tuple[Any, Any]] = {}
        self._owned: set[str] = set()

    # ------------------------------------------------------------------ setup
    def _connect(self, target: Mapping[str, Any]) -> None:
        ray = self.ray
        if not ray.is_initialized():
            runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)}}
            address = self.address or os.environ.get("RAY_ADDRESS") or None
            if address:
                ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
            else:
                ray.init(num_cpus=self.num_cpus, resources={target_resource(target): 1.0},
                         include_dashboard=False, log_to_driver=False, runtime_env=runtime_env,
                         configure_logging=False)
                self._started = True
        if self._remote is None:
            self._remote = ray.remote(_measure_task)
        res = target_resource(target)
        if res in self._owned:
            return
        if ray.cluster_resources().get(res, 0.0) <= 0:
            raise ExecutorUnavailable(f"no Ray node owns target {target.get('name')!r}: start one with "
                                      f"ray start --resources '{{\"{res}\": 1}}'")
        self._owned.add(res)

    def _backend_ref(self, backend: MeasureBackend) -> Any:
        """The backend in Ray's object store (put once per backend object)."""
        hit = self._backend_refs.get(id(backend))
        if hit is None or hit[0] is not backend:
            hit = (backend, self.ray.put(backend))
            self._backend_refs[id(backend)] = hit
        return hit[1]

    # ---------------------------------------------------------------- measure
    def measure(self, backend: MeasureBackend, target: Mapping[str, Any], workload: Mapping[str, Any],
                configs: Sequence[Mapping[str, Any]], finalise: Finalise,
                metas: Sequence[Mapping[str, Any] | None] | None = None,
                on_record: Callable[[Record], None] | None = None) -> list[Record]:
        if not configs:
            return []
        ray = self.ray
        self._connect(target)
        metas = list(metas) if metas is not None else [None] * len(configs)
        bref = self._backend_ref(backend)
        opts = {"resources": {target_resource(target): RESOURCE_PER_TASK}, "num_cpus": 1,
                "max_retries": self.max_retries}
        t, w = dict(target), dict(workload)
        refs = [self._remote.options(**opts).remote(bref, t, w, dict(c), finalise, dict(m or {}))
                for c, m in zip(configs, metas)]
        pos = {r: i for i, r in enumerate(refs)}
        out: list[Record | None] = [None] * len(refs)
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    try:
                        rec = ray.get(ref)
                    except ray.exceptions.RayTaskError as e:
                        cause = e.as_instanceof_cause()
                        if isinstance(cause, ValueError):
                            raise ValueError(str(cause).strip().splitlines()[-1]) from None
                        raise RuntimeError(f"Ray measurement task failed: {str(e).strip().splitlines()[0]}"
                                           ) from None
                    except ray.exceptions.RayError as e:
                        raise RuntimeError(f"Ray measurement task lost: {str(e).strip().splitlines()[0]}"
                                           ) from None
                    out[pos[ref]] = rec
                    if on_record:
                        on_record(rec)
        except BaseException:
            for ref in pending:
                try:
                    ray.cancel(ref)
                except Exception:  # pragma: no cover - best effort
                    pass
            raise
        return [r for r in out if r is not None]

    def close(self) -> None:
        self._backend_refs.clear()
        self._owned.clear()
        if self._started and self.ray.is_initialized():
            self.ray.shutdown()
        self._started = False


class ExecutorBackend(MeasureBackend):
    """A MeasureBackend whose ``measure_many`` goes through an executor (so a ``Tuner`` search can
    run its measurements on Ray); records keep the inner backend's source unless ``finalise``
    sets one."""

    def __init__(self, executor: Executor, backend: MeasureBackend, finalise: Finalise):
        self.executor = executor
        self.backend = backend
        self.finalise = finalise
        self.name = backend.name

    def measure(self, target: Mapping[str, Any], workload: Mapping[str, Any], config: Mapping[str, Any]) -> Record:
        return self.measure_many(target, workload, [config])[0]

    def measure_many(self, target: Mapping[str, Any], workload: Mapping[str, Any],
                     configs: Sequence[Mapping[str, Any]],
                     on_record: Callable[[Record], None] | None = None) -> list[Record]:
        return self.executor.measure(self.backend, target, workload, configs, self.finalise, on_record=on_record)


def make_executor(name: str, address: str | None = None) -> Executor:
    """``local`` or ``ray``; raises ExecutorUnavailable (ray missing) or ValueError (unknown name)."""
    if name == "local":
        return LocalExecutor()
    if name == "ray":
        return RayExecutor(address=address)
    raise ValueError(f"unknown executor {name!r}; expected local or ray")
