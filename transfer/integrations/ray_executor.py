"""The Ray executor (optional extra ``.[ray]``): each measurement runs as a Ray task on a node
that owns the target; the driver commits what the tasks return.

``RayExecutor(address=None)`` runs one Ray task per config.  Each task requests a small amount
(``0.001``) of the custom resource ``tunedb-target:<target name>`` (see ``target_resource``), so
it is scheduled only on a node that declared it owns the target, e.g.::

    ray start --head --resources '{"tunedb-target:cpu-native-t1": 1}'

Records are finalised in the task (``transfer.measure.executors.Finalise``), so a task Ray
retries yields the same ``record_id`` and the driver's commit skips the duplicate.  Timed runs on
one node stay serial (``LocalBackend`` holds a machine-wide lock while timing).  ``ray`` is
imported lazily (importing this module never needs it); without it ``RayExecutor`` raises
``ExecutorUnavailable``.  ``migration.migrate.make_executor("ray")`` imports this module on demand.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tunedb.transfer.measure.backend import MeasureBackend
from tunedb.transfer.measure.executors import Executor, ExecutorUnavailable, Finalise

if TYPE_CHECKING:
    from tunedb.index.model.record import Record

RESOURCE_PREFIX = "tunedb-target:"
RESOURCE_PER_TASK = 0.001   # fraction of the target resource one measurement task holds


def target_resource(target: Mapping[str, Any]) -> str:
    """Name of the Ray custom resource a node declares to own ``target``:
    ``tunedb-target:<name>`` with characters outside ``[A-Za-z0-9_.-]`` replaced by ``_``."""
    from tunedb.index.model.record import target_display_name

    return RESOURCE_PREFIX + re.sub(r"[^A-Za-z0-9_.\-]+", "_", target_display_name(target))


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
            # workers import tunedb from the installed package; pass on the caller's extra paths
            # (e.g. a TUNEDB_FAMILIES plug-in's folder)
            extra = {k: os.environ[k] for k in ("PYTHONPATH", "TUNEDB_FAMILIES") if os.environ.get(k)}
            runtime_env = {"env_vars": extra} if extra else {}
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
        """One Ray task per config; records in ``configs`` order, ``on_record`` in completion order."""
        if not configs:
            return []
        self._connect(target)
        metas = list(metas) if metas is not None else [None] * len(configs)
        bref = self._backend_ref(backend)
        opts = {"resources": {target_resource(target): RESOURCE_PER_TASK}, "num_cpus": 1,
                "max_retries": self.max_retries}
        t, w = dict(target), dict(workload)
        refs = [self._remote.options(**opts).remote(bref, t, w, dict(c), finalise, dict(m or {}))
                for c, m in zip(configs, metas)]
        return self._collect(refs, on_record)

    def _collect(self, refs: list, on_record: Callable[[Record], None] | None) -> list[Record]:
        """Wait for the tasks ``refs``; hand each record over as it arrives; cancel the rest on error."""
        ray = self.ray
        pos = {r: i for i, r in enumerate(refs)}
        out: list[Record | None] = [None] * len(refs)
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    rec = self._result(ref)
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

    def _result(self, ref: Any) -> Record:
        """The record of a finished task; a task's ValueError as a one-line ValueError, other
        failures as RuntimeError."""
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as e:
            cause = e.as_instanceof_cause()
            if isinstance(cause, ValueError):
                raise ValueError(str(cause).strip().splitlines()[-1]) from None
            raise RuntimeError(f"Ray measurement task failed: {str(e).strip().splitlines()[0]}") from None
        except ray.exceptions.RayError as e:
            raise RuntimeError(f"Ray measurement task lost: {str(e).strip().splitlines()[0]}") from None

    def close(self) -> None:
        """Forget the objects put in Ray; shut Ray down when this executor started it."""
        self._backend_refs.clear()
        self._owned.clear()
        if self._started and self.ray.is_initialized():
            self.ray.shutdown()
        self._started = False
