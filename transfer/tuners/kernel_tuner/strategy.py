"""Kernel Tuner strategies backed by tunedb: ``WarmStart`` (tunedb's search) and ``Recorder``
(any Kernel Tuner strategy, every result stored).  Public as ``tunedb.kernel_tuner``.

Both are objects with ``tune(searchspace, runner, tuning_options)``, which is what Kernel Tuner
1.5's ``tune_kernel(..., strategy=obj)`` accepts.

Keys (the same as the Kernel Tuner importer, ``tunedb.transfer.tuners.kernel_tuner.cachefile``, so an
imported cache file and a live or simulated run of the same kernel on the same device are one
(target, workload) entry):

* target: the runner's device name (``runner.dev.name``; in simulation mode Kernel Tuner sets it
  to the cache file's ``device_name``; an empty name falls back to the cache file's stem, as the
  importer does), resolved through the device catalog (``_target``);
* workload: ``{"family": kernel_name, "kernel": kernel_name, "problem_size": problem_size,
  "params": tune_params keys in order}`` (``_workload``).

Record of one Kernel Tuner result: ``costs`` = the per-repeat ``times`` (ms -> seconds), else
``[time]``; ``__error__`` InvalidConfig / CompilationFailedConfig / RuntimeFailedConfig ->
status invalid / compile_error / runtime_error; ``compile_s`` = compile_time / 1000; ``wall_s`` =
(compile + verification + benchmark time) / 1000 (in simulation mode: what the replayed device
spent); ``source`` = ``replay`` in simulation mode, else ``measured``;
``meta["kernel_tuner"] = {"key", "entry"}`` (the result minus parameter values, as the importer
keeps it, so ``tunedb export --format kernel-tuner`` writes it back), ``meta["backend"] =
"kernel-tuner"``.

DB answers and fevals (``WarmStart``): a config this (target, workload) already has in the DB is
answered by the DB and never reaches Kernel Tuner's cost function, so it is not a Kernel Tuner
feval.  It is still an evaluation of the run: with ``resume=True`` (default) DB answers and new
measurements together are at most ``max_fevals``, so a rerun of an interrupted call does only the
remaining work and a rerun of a finished call measures nothing.  The returned results list
every evaluation in order (as the Tuner's ``on_evaluation`` callback reports them): Kernel Tuner's own result dicts (key ``"tunedb": "measured"``) and, for
DB answers, result dicts rebuilt from the records (``"tunedb": "db"``, ``"tunedb_record_id"``,
all timing fields 0 like Kernel Tuner's own cache hits).  ``WarmStart.last_run`` counts both.

A DB answer is what Kernel Tuner itself makes of a config its cache holds, so
``env["best_config"]`` is the same whether a config was measured in this run or answered from the
DB: the parameters in tune_params order, then the stored Kernel Tuner result in the order Kernel
Tuner wrote it (``meta["kernel_tuner"]["order"]``; Kernel Tuner's usual order for an imported
cache entry), ``compile_time``/``verification_time``/``benchmark_time``/``strategy_time``/
``framework_time`` 0 (nothing ran, as Kernel Tuner does for its own cache hits), the run's
``metrics`` recomputed as Kernel Tuner does (``process_metrics``).  ``lookup`` says whether the
config is stored and with what status (the latest record).  For an ``ok`` answer ``"time"`` (what
Kernel Tuner minimises, milliseconds) is the config's cost as the one estimator computes it
(``tunedb.index.model.estimate``): a Kernel Tuner record's value is Kernel Tuner's ``time``, the mean of
its iterations, so a config with one Kernel Tuner record answers with exactly the ``time`` Kernel
Tuner computed (the stored number itself); a config with several records answers with the median
of their values.  ``"times"`` stay the repeats of the record that answered (ms).  Every result the
strategy returns, measured or answered, ends with ``"tunedb"`` (``measured``/``db``),
``"tunedb_record_id"`` and ``"tunedb_estimate"`` (``CostEstimate.to_dict()`` after the run:
value, lo, hi in *seconds*, records = n, samples, coverage, basis, noisy, statistic = ``mean``).
``RunInfo.best_config`` / ``best_time_s`` are the estimator's best among the configs the run
evaluated (each config's estimate over all its records after the run), never a minimum over
records; with one record per config that is Kernel Tuner's own best.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

try:
    import kernel_tuner as _kt
    from kernel_tuner import util as kt_util
    from kernel_tuner.strategies.common import CostFunc
except ImportError as _e:  # pragma: no cover - exercised only without the extra
    raise ImportError("tunedb.kernel_tuner needs Kernel Tuner >= 1.5: pip install 'tunedb[kernel-tuner]'") from _e
if not hasattr(_kt, "tune_kernel"):  # pragma: no cover - a checkout's kernel_tuner.py shadows the real one
    raise ImportError(f"'import kernel_tuner' found {getattr(_kt, '__file__', '?')}, not Kernel Tuner; run from "
                      "outside the tunedb checkout or pip install 'tunedb[kernel-tuner]'")

from tunedb.index.model.estimate import CostEstimate, estimate
from tunedb.index.model.keys import canonical_json
from tunedb.index.model.record import Record
from tunedb.transfer.interop import merge_device_fields, resolve_device_fields
from tunedb.transfer.measure.backend import MeasureBackend
from tunedb.transfer.search.session import TuningSession
from tunedb.transfer.search.tuner import TuneOptions
from tunedb.transfer.space import Constraint, Knob, Space
from tunedb.transfer.tuners.kernel_tuner.cachefile import (
    ERROR_STATUS,
    cache_key,
    cache_workload,
    device_of,
    device_target,
)

if TYPE_CHECKING:
    from tunedb.index.contract.base import RecordStore

log = logging.getLogger("tunedb.kernel_tuner")

#: record status -> Kernel Tuner error class (a DB answer rebuilt as a Kernel Tuner result)
STATUS_ERROR_CLASS = {"invalid": kt_util.InvalidConfig, "compile_error": kt_util.CompilationFailedConfig}
_TIMING_KEYS = ("compile_time", "verification_time", "benchmark_time", "strategy_time", "framework_time")
#: where Kernel Tuner puts its result fields (after the parameters): these first, in this order,
#: then metrics and other fields, then :data:`_TAIL_KEYS`
_HEAD_KEYS = ("time", "times", "compile_time", "verification_time", "benchmark_time")
_TAIL_KEYS = ("strategy_time", "framework_time", "timestamp")
_OWN_KEYS = ("tunedb", "tunedb_record_id", "tunedb_estimate")


# ------------------------------------------------------------------------------------ keys
def _plain(v: Any) -> Any:
    """``v`` as plain JSON data: numpy scalars/arrays to Python, Kernel Tuner's ErrorConfig to its
    name, tuples to lists, non-finite floats to None."""
    import numpy as np

    if isinstance(v, kt_util.ErrorConfig):
        return str(v)
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.ndarray):
        return [_plain(x) for x in v.tolist()]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _plain_row(row: Any) -> list:
    """``_plain(list(row))`` of one searchspace row, without the recursion when every value is
    already plain (an int, str or bool, or a finite float)."""
    for v in row:
        t = type(v)
        if t is int or t is str or t is bool or (t is float and math.isfinite(v)):
            continue
        return _plain(list(row))
    return list(row)


def device_name(runner: Any, tuning_options: Any = None) -> str:
    """The device Kernel Tuner tunes on: the runner's device name (in simulation mode the cache
    file's ``device_name``), else the cache file's stem (as the importer names ``MI250X.json.gz``
    with an empty ``device_name``).  ValueError when neither names one."""
    name = getattr(runner, "device_name", None)
    if not name:
        dev = getattr(runner, "dev", None)
        try:
            name = getattr(dev, "name", None)
        except Exception:  # a device object without a usable name
            name = None
    cachefile = getattr(tuning_options, "cachefile", None) if tuning_options is not None else None
    if not (isinstance(name, str) and name.strip()) and not cachefile:
        raise ValueError("Kernel Tuner's runner names no device and there is no cache file to name it; "
                         "pass target= to the tunedb strategy")
    return device_of({"device_name": name if isinstance(name, str) else ""}, Path(cachefile or "device"))


def driver_target(runner: Any) -> tuple[dict, dict] | None:
    """(target, more device facts for the run summary) of the device Kernel Tuner's runner
    drives, as its driver describes it (``tunedb.index.hardware.devices``): the OpenCL device of
    an OpenCL backend, the CUDA device (compute capability, driver version; SM count and memory
    through NVML where it answers) of a CUDA backend.  None when the runner has no live device
    (simulation mode) or its backend is one tunedb cannot ask: then the device's name is
    resolved through the catalog."""
    from tunedb.index.hardware import devices

    backend = getattr(getattr(runner, "dev", None), "dev", None)
    if backend is None:
        return None
    ctx = getattr(backend, "ctx", None)
    cl_devices = getattr(ctx, "devices", None) if ctx is not None else None
    if cl_devices:
        return devices.opencl_target(cl_devices[0]), devices.opencl_device_info(cl_devices[0])
    env = getattr(backend, "env", None) or {}
    name = env.get("device_name") or getattr(backend, "name", None)
    if not name:
        return None
    props = env.get("device_properties")
    props = props if isinstance(props, Mapping) else {}
    if "hip_driver_version" in env or "gcnArchName" in props:  # Kernel Tuner's HIP backend
        probed = probed_device(str(name)) or {}
        mem = props.get("totalGlobalMem") or probed.get("memory_bytes")
        t = devices.rocm_target(str(name), props.get("gcnArchName"), env.get("hip_driver_version"),
                                compute_units=props.get("multiProcessorCount") or probed.get("compute_units"),
                                memory_mb=int(mem) // 2**20 if isinstance(mem, int) else None)
        merge_device_fields(t, resolve_device_fields(str(name), "gpu"))
        return t, {k: v for k, v in probed.items() if k not in t and v is not None}
    cc = getattr(backend, "cc", None) or env.get("compute_capability")
    if cc:  # Kernel Tuner's CUDA backends (cupy, nvcuda, pycuda)
        probed = probed_device(str(name)) or {}
        mem = probed.get("memory_bytes")
        t = devices.cuda_target(str(name), cc, env.get("cuda_version"), sm_count=probed.get("compute_units"),
                                memory_mb=int(mem) // 2**20 if isinstance(mem, int) else None)
        merge_device_fields(t, resolve_device_fields(str(name), "gpu"))
        return t, {k: v for k, v in probed.items() if k not in t and v is not None}
    return None


def target_of(device: str) -> dict:
    """The tunedb target of a Kernel Tuner device name (the importer's: catalog fields added)."""
    return dict(device_target(device).value)


def workload_of(kernel_name: str, problem_size: Any, param_keys: list[str]) -> dict:
    """The tunedb workload of a Kernel Tuner kernel (the importer's keys): family and kernel =
    ``kernel_name``, ``problem_size`` as Kernel Tuner writes it to a cache file (a callable one is
    ``"callable"``), ``params`` = the tune-parameter names in order."""
    ps = "callable" if callable(problem_size) else _plain(problem_size)
    doc = {"kernel_name": kernel_name, "problem_size": ps}
    return dict(cache_workload(doc, Path(kernel_name), list(param_keys)).value)


def space_of(searchspace: Any) -> Space:
    """A tunedb Space of a Kernel Tuner ``Searchspace``: one knob per tune parameter (values in
    Kernel Tuner's order) and ``finite`` = the searchspace's valid configs.  Restrictions are
    respected by asking the searchspace (``is_param_config_valid``); nothing is evaluated here."""
    keys = list(searchspace.tune_params.keys())
    knobs = tuple(Knob(k, tuple(_plain(list(v)))) for k, v in searchspace.tune_params.items())

    def allowed(cfg: Mapping[str, Any]) -> bool:
        return bool(searchspace.is_param_config_valid(tuple(cfg[k] for k in keys)))

    finite = tuple(dict(zip(keys, _plain_row(c))) for c in searchspace.list)
    return Space(knobs=knobs, constraints=(Constraint("in Kernel Tuner's searchspace (its restrictions)", allowed),),
                 finite=finite)


def _run_keys(searchspace: Any, runner: Any, tuning_options: Any, target: str | Mapping[str, Any] | None
              ) -> tuple[dict, dict, list[str]]:
    keys = list(searchspace.tune_params.keys())
    if target is None:
        described = driver_target(runner)
        tgt = described[0] if described is not None else target_of(device_name(runner, tuning_options))
    elif isinstance(target, str):
        tgt = target_of(target)
    else:
        tgt = dict(target)
    ko = getattr(runner, "kernel_options", None)
    kernel_name = getattr(ko, "kernel_name", None) if ko is not None else None
    if not kernel_name:
        raise ValueError("Kernel Tuner's runner has no kernel_options.kernel_name")
    wl = workload_of(kernel_name, ko.problem_size, keys)
    return tgt, wl, keys


# ------------------------------------------------------------------------------- records
def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        try:
            import numpy as np

            if isinstance(x, np.generic):
                x = x.item()
            else:
                return None
        except ImportError:  # pragma: no cover
            return None
    x = float(x)
    return x if math.isfinite(x) else None


def result_to_record(result: Mapping[str, Any], target: Mapping[str, Any], workload: Mapping[str, Any],
                     keys: list[str], *, source: str = "measured", simulation: bool = False) -> Record:
    """The Record of one Kernel Tuner result dict (see the module docstring for the mapping;
    times ms -> seconds)."""
    config = {k: _plain(result[k]) for k in keys}
    err = result.get("__error__")
    t = result.get("time")
    status, error, costs = "ok", "", []
    if err is not None or isinstance(t, str):
        name = str(err if err is not None else t)
        status, error = ERROR_STATUS.get(name, "runtime_error"), name
    else:
        times = result.get("times")
        vals = [_num(v) for v in times] if isinstance(times, (list, tuple)) and len(times) else [_num(t)]
        if vals and all(v is not None and v >= 0 for v in vals):
            costs = [v * 1e-3 for v in vals]  # type: ignore[operator]
        else:
            status, error = "runtime_error", f"no usable time in the result ({t!r})"
    ct = _num(result.get("compile_time"))
    parts = [_num(result.get(k)) for k in ("compile_time", "verification_time", "benchmark_time")]
    wall = sum(p for p in parts if p is not None) * 1e-3 if any(p is not None for p in parts) else None
    entry = {k: _plain(v) for k, v in result.items() if k not in keys and k != "__error__" and k not in _OWN_KEYS}
    order = [k for k in result if k not in keys and k not in _OWN_KEYS]  # "__error__" too: where it was
    meta = {"backend": "kernel-tuner",
            "kernel_tuner": {"key": cache_key(config, keys), "entry": entry, "order": order}}
    if simulation:
        meta["simulation"] = True
    return Record(dict(target), dict(workload), config, costs=costs, status=status, error=error,
                  compile_s=None if ct is None else ct * 1e-3, wall_s=wall, source=source, meta=meta)


def entry_order(entry: Mapping[str, Any], order: Any = None, failed: bool = False) -> list[str]:
    """The order of a stored Kernel Tuner result's fields, ``"__error__"`` among them for a
    ``failed`` one: ``order`` (as Kernel Tuner made them, ``meta["kernel_tuner"]["order"]``) when
    it names exactly these fields, else Kernel Tuner's order for an entry of its cache file:
    :data:`_HEAD_KEYS`, the other fields (metrics) as stored, :data:`_TAIL_KEYS`, then
    ``"__error__"`` (Kernel Tuner's ``read_cache`` appends it)."""
    want = set(entry) | ({"__error__"} if failed else set())
    if isinstance(order, list) and len(order) == len(want) and set(order) == want:
        return list(order)
    head = [k for k in _HEAD_KEYS if k in entry]
    tail = [k for k in _TAIL_KEYS if k in entry]
    rest = [k for k in entry if k not in _HEAD_KEYS and k not in _TAIL_KEYS and k != "__error__"]
    return head + rest + tail + (["__error__"] if failed else [])


def kernel_tuner_time(rec: Record, cost: CostEstimate | None) -> float | None:
    """The ``time`` (ms) Kernel Tuner is given for a DB answer: the stored ``time`` Kernel Tuner
    computed (the mean of its iterations) when the config's estimate rests on this one Kernel
    Tuner record, else the estimate's value (s -> ms); None without an estimate."""
    if cost is None:
        return None
    kt = rec.meta.get("kernel_tuner") if isinstance(rec.meta.get("kernel_tuner"), dict) else {}
    entry = kt.get("entry") if isinstance(kt.get("entry"), dict) else {}
    t = _num(entry.get("time"))
    if cost.records == 1 and cost.tuner == "kernel_tuner" and t is not None and \
            math.isclose(t * 1e-3, cost.value, rel_tol=1e-9):
        return t
    return cost.value * 1e3


def record_to_result(rec: Record, keys: list[str], cost: CostEstimate | None = None,
                     metrics: Mapping[str, Any] | None = None) -> dict:
    """A Kernel Tuner result dict of a DB answer, as Kernel Tuner builds one for a config its
    own cache holds: ``rec`` is the record that answered the lookup (its status decides ok or
    error), ``cost`` the config's estimate (seconds; None: the estimate of ``rec`` alone),
    ``metrics`` the run's Kernel Tuner metrics (recomputed on the answer, as Kernel Tuner does).
    The dict holds the parameter values in ``keys`` order, the stored Kernel Tuner entry in the
    order Kernel Tuner wrote it (:func:`entry_order`), and for an ``ok`` answer ``"time"`` =
    :func:`kernel_tuner_time` (ms, what Kernel Tuner minimises), ``"times"`` = the record's
    repeats in ms when the entry has none, ``"tunedb_estimate"`` = ``cost.to_dict()``;
    ``__error__`` for a failure; every timing field 0 (nothing ran, as for Kernel Tuner's own
    cache hits); ``"tunedb": "db"`` and ``"tunedb_record_id"``."""
    out: dict[str, Any] = {k: rec.config.get(k) for k in keys}
    kt = rec.meta.get("kernel_tuner") if isinstance(rec.meta.get("kernel_tuner"), dict) else {}
    entry = kt.get("entry")
    failed = rec.status != "ok"
    cls = STATUS_ERROR_CLASS.get(rec.status, kt_util.RuntimeFailedConfig)
    if isinstance(entry, dict):
        for k in entry_order(entry, kt.get("order"), failed):
            if k == "__error__":
                out[k] = cls()
            elif k not in keys and k not in _OWN_KEYS:
                out[k] = entry[k]
    est = None
    if not failed:
        est = cost if cost is not None else estimate([rec])
        if not isinstance(out.get("times"), (list, tuple)):
            out["times"] = [c * 1e3 for c in rec.costs]
        t = kernel_tuner_time(rec, est)
        if t is not None:
            out["time"] = float(t)
    elif "__error__" not in out:  # no stored Kernel Tuner result: the error as Kernel Tuner marks one
        out["time"] = cls()
        out["__error__"] = cls()
    for k in _TIMING_KEYS:
        out[k] = 0
    if metrics and "__error__" not in out and isinstance(out.get("time"), float):
        out = kt_util.process_metrics(out, metrics)
    out["tunedb"] = "db"
    out["tunedb_record_id"] = rec.record_id
    if est is not None:
        out["tunedb_estimate"] = est.to_dict()
    return out


# ------------------------------------------------------------------------------- backend
class KernelTunerBackend(MeasureBackend):
    """Measures through Kernel Tuner's own ``CostFunc`` (its runner, its cache, its feval count
    and stop criteria).  ``measure`` returns the Record of the result and keeps the result dict
    (``results``: canonical config JSON -> Kernel Tuner result).  When Kernel Tuner's budget is
    spent (max_fevals or time_limit) the measurement that spent it is still returned, and the
    next ``measure`` raises ``StopCriterionReached`` without running anything."""

    name = "kernel-tuner"

    def __init__(self, cost_func: CostFunc, keys: list[str], *, simulation: bool = False) -> None:
        self.cost_func = cost_func
        self.keys = list(keys)
        self.simulation = simulation
        self.source = "replay" if simulation else "measured"
        self.results: dict[str, dict] = {}
        self.stopped: str | None = None
        self.invalid = 0   # configs the searchspace refused (not Kernel Tuner fevals)

    def measure(self, target: Mapping[str, Any], workload: Mapping[str, Any], config: Mapping[str, Any]) -> Record:
        """One Kernel Tuner evaluation of ``config`` (a dict over the tune parameters)."""
        if self.stopped is not None:
            raise kt_util.StopCriterionReached(self.stopped)
        cf = self.cost_func
        n = len(cf.results)
        x = [config[k] for k in self.keys]
        try:
            cf.eval_all([x], check_restrictions=True)
        except kt_util.StopCriterionReached as e:
            if len(cf.results) == n:
                self.stopped = str(e)
                raise
            self.stopped = str(e)  # this measurement spent the budget: keep it, stop at the next one
        if len(cf.results) == n:  # refused by the searchspace: Kernel Tuner ran nothing
            self.invalid += 1
            return Record(dict(target), dict(workload), dict(config), status="invalid",
                          error="not in Kernel Tuner's searchspace", source=self.source,
                          meta={"backend": self.name})
        result = cf.results[-1]
        rec = result_to_record(result, target, workload, self.keys, source=self.source, simulation=self.simulation)
        result["tunedb"] = "measured"
        result["tunedb_record_id"] = rec.record_id
        self.results[canonical_json(dict(rec.config))] = result
        return rec


# ------------------------------------------------------------------------------ WarmStart
@dataclass
class RunInfo:
    """What one ``WarmStart.tune`` did.  ``db_answers``: evaluations the DB answered (not Kernel
    Tuner fevals); ``kt_fevals``: results Kernel Tuner's cost function produced (each committed);
    ``stopped_by``: ``kernel_tuner`` (max_fevals / time_limit), ``budget``, ``exhausted``,
    ``interrupted`` (KeyboardInterrupt, re-raised) ...; ``best_*``: the one estimator's best of
    the evaluated configs; ``wall_s``: seconds of the whole call."""

    target: dict
    workload: dict
    db_answers: int = 0
    kt_fevals: int = 0
    committed: int = 0
    evaluations: int = 0
    stopped_by: str = ""
    seeds: list = field(default_factory=list)
    #: the estimator's best of the configs this run evaluated (their estimates after the run)
    best_config: dict | None = None
    #: its estimated cost, seconds (``best_estimate["value"]``)
    best_time_s: float | None = None
    #: ``CostEstimate.to_dict()`` of ``best_config`` (seconds; records = n, lo/hi = interval)
    best_estimate: dict | None = None
    wall_s: float = 0.0
    overhead: dict = field(default_factory=dict)
    #: this machine's GPU that Kernel Tuner ran on, as ``tunedb targets --probe`` describes it
    #: (``tunedb.index.hardware.probe``); None in simulation mode or when no probed GPU matches
    device: dict | None = None
    run_id: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


def probed_device(device: str) -> dict | None:
    """The GPU of this machine whose name is ``device`` (or resolves to the same catalog row),
    from ``tunedb.index.hardware.probe.probe_gpus``; None when no probed GPU matches."""
    from tunedb.index.hardware.catalog import resolve
    from tunedb.index.hardware.probe import probe_gpus

    gpus = probe_gpus()
    if not gpus:
        return None
    want = resolve(device, kind="gpu", warn=False)
    for g in gpus:
        name = str(g.get("name") or "")
        if name == device or (want.row is not None and resolve(name, kind="gpu", warn=False).name == want.name):
            return g
    return None


def warm_start_options(**overrides: Any) -> TuneOptions:
    """The Tuner's options ``WarmStart`` runs with when given none: the one engine's defaults,
    ``TuneOptions(**overrides)`` (any ``TuneOptions`` field, e.g. ``seed``), the same as
    ``tunedb tune`` and ``tunedb.tune`` use.  Kernel Tuner's max_fevals / time_limit end the
    run (``patience`` is off by default).

    One difference is forced by Kernel Tuner's protocol and is not an option: the CLI and
    ``tunedb.tune`` re-measure their two leaders after the budget (``confirm_top=2``); inside
    Kernel Tuner a config is measured once per run (its cost function answers a repeat from
    its own cache), so ``WarmStart`` keeps ``confirm_top`` as given (default 0)."""
    return TuneOptions(**overrides)


#: the modules a process's first ``WarmStart.tune`` would import on its way to its first
#: proposal: the nearest-entry search (and faiss), the device catalog, config adaptation and the
#: kernels it knows, the cost-model cache, and pandas, which pyarrow imports the first time it
#: converts values (a read of the store does)
WARM_UP_MODULES = ("tunedb.index.retrieval.nearest", "tunedb.index.hardware.catalog", "tunedb.transfer.search.adapt",
                   "tunedb.transfer.kernels", "tunedb.transfer.search.modelcache", "pandas")


def warm_up() -> None:
    """The one-time work of a process's first tuning run that does not depend on the run:
    import :data:`WARM_UP_MODULES` (one that is not installed, e.g. pandas, is skipped), read
    the device catalog and load the kernel families (``tunedb.transfer.kernels.families``: the
    built-in ones and any plugins).  ``WarmStart`` does it when it is made, before Kernel Tuner's
    ``tune_kernel`` starts the clock of its time budget, so that the budget goes to tuning;
    later calls find everything loaded (microseconds)."""
    import importlib

    for name in WARM_UP_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    from tunedb.index.hardware.catalog import devices
    from tunedb.transfer.kernels import families

    devices()
    try:
        families()
    except (ImportError, AttributeError, TypeError, ValueError):  # (a broken plug-in: tune reports it where used)
        pass


class WarmStart:
    """A Kernel Tuner strategy whose search is tunedb's ``Tuner``: look up first (the DB answers
    what this target already has), search next (the nearest entries' best configs seed it, the
    cost model ranks neighbourhood moves inside Kernel Tuner's searchspace), store at the end of
    every measurement (each Kernel Tuner result is committed to ``db`` at once).

    ``db``: any ``RecordStore``.  ``options``: the Tuner's options (default
    :func:`warm_start_options`, the same defaults as ``tunedb tune``; Kernel Tuner's max_fevals /
    time_limit end the run); ``budget`` is always
    set from Kernel Tuner's max_fevals.  ``target``: override the device (a name resolved through
    the catalog, or a target dict).  ``resume``: DB answers count towards max_fevals (a rerun does
    the remaining work only); False: max_fevals counts new Kernel Tuner fevals only.
    ``include_db_results``: DB answers appear in the returned results (flagged ``"tunedb": "db"``).
    After a call, ``last_run`` (a :class:`RunInfo`) and ``last_result`` (the ``TuneResult``) say
    what happened.  KeyboardInterrupt is re-raised after ``last_run`` is filled in; everything
    measured before it is in the DB.  Making one runs :func:`warm_up` (the first time in a
    process: imports, the device catalog), so that this work is not done inside ``tune``."""

    def __init__(self, db: RecordStore, options: TuneOptions | None = None, *,
                 target: str | Mapping[str, Any] | None = None, resume: bool = True,
                 include_db_results: bool = True, progress: Callable[[dict], None] | None = None) -> None:
        self.db = db
        self.options = options if options is not None else warm_start_options()
        self.target = target
        self.resume = resume
        self.include_db_results = include_db_results
        self.progress = progress
        self.last_run: RunInfo | None = None
        self.last_result: Any = None
        warm_up()

    def tune(self, searchspace: Any, runner: Any, tuning_options: Any) -> list[dict]:
        """Kernel Tuner's strategy entry point: returns the results in evaluation order."""
        t0 = time.perf_counter()
        objective = tuning_options.get("objective") or ["time"]
        if list(objective if isinstance(objective, (list, tuple)) else [objective]) != ["time"]:
            raise ValueError(f"tunedb's WarmStart minimises time (its records' costs); objective {objective!r} "
                             "is not supported (use Recorder with a Kernel Tuner strategy)")
        target, workload, keys = _run_keys(searchspace, runner, tuning_options, self.target)
        simulation = bool(getattr(runner, "simulation_mode", False) or tuning_options.get("simulation_mode"))
        cost_func = CostFunc(searchspace, tuning_options, runner, snap=False)
        backend = KernelTunerBackend(cost_func, keys, simulation=simulation)
        size = int(searchspace.size)
        kt_budget = tuning_options.budget.get_evaluations_remaining() if "budget" in tuning_options else size
        budget = int(min(kt_budget, size)) if self.resume else size
        opts = replace(self.options, budget=max(budget, 1))
        session = TuningSession(self.db, "kernel-tuner", target, check_machine=False)
        evaluations: list[tuple[dict, Record, bool]] = []  # (config, record, cached), in evaluation order
        tuner = session.tuner(target, workload, space_of(searchspace), backend, opts, progress=self.progress,
                              on_evaluation=lambda cfg, rec, cached, _origin: evaluations.append((cfg, rec, cached)))
        stopped_by = ""
        interrupted = False
        try:
            tuner.start()
            while tuner.step():
                pass
            stopped_by = tuner.stopped_by
        except kt_util.StopCriterionReached as e:
            stopped_by = "kernel_tuner"
            if tuning_options.get("verbose"):
                print(e)
        except KeyboardInterrupt:
            stopped_by, interrupted = "interrupted", True
        if backend.stopped is not None and not interrupted:
            stopped_by = "kernel_tuner"
        costs = _config_costs(self.db, target, workload)
        res = session.keep(tuner.result())  # the run's answer is the Tuner's (as for every entry point)
        results, db_answers = self._results(evaluations, backend, keys, costs, tuning_options.get("metrics"))
        device = None
        if not simulation:
            described = driver_target(runner)
            device = ({**described[0], **described[1]} if described is not None
                      else probed_device(str(target.get("name", ""))))
        run_id = session.save(cold=bool(opts.cold), options={"budget": opts.budget, "seed": opts.seed},
                              extra={"interrupted": interrupted, "kt_fevals": len(cost_func.results),
                                     "db_answers": db_answers, "simulation": simulation, "device": device})
        info = RunInfo(target=target, workload=workload, db_answers=db_answers, kt_fevals=len(cost_func.results),
                       committed=res.measurements, evaluations=res.evaluations, stopped_by=stopped_by,
                       seeds=res.seeds, best_config=res.best_config, best_time_s=res.best_cost,
                       best_estimate=res.best_estimate,
                       wall_s=time.perf_counter() - t0, overhead=res.overhead, device=device, run_id=run_id)
        self.last_run, self.last_result = info, res
        msg = (f"tunedb answered {db_answers} configs from the DB (not Kernel Tuner fevals), measured "
               f"{len(cost_func.results)} (Kernel Tuner fevals, each committed to tunedb); stopped by {stopped_by}")
        log.info(msg)
        if not getattr(runner, "quiet", True):
            print(msg)
        if interrupted:
            raise KeyboardInterrupt
        return results

    def _results(self, evaluations: list[tuple[dict, Record, bool]], backend: KernelTunerBackend,
                 keys: list[str], costs: dict[str, CostEstimate], metrics: Mapping[str, Any] | None = None
                 ) -> tuple[list[dict], int]:
        """(results in evaluation order, number of DB answers) from the Tuner's evaluations as
        its ``on_evaluation`` callback saw them (config, record, cached): a new measurement is
        Kernel Tuner's own result dict (``"tunedb_estimate"`` added: the config's estimate after
        the run), a DB answer a result rebuilt from the record that answered it with the
        config's estimate from ``costs`` (config_key -> estimate, :func:`_config_costs`;
        ``record_to_result`` with the run's ``metrics``)."""
        out: list[dict] = []
        used: set[int] = set()
        db_answers = 0
        for cfg, rec, cached in evaluations:
            kt = None if cached else backend.results.get(canonical_json(dict(rec.config)))
            if kt is not None:
                est = costs.get(rec.config_key) if rec.status == "ok" else None
                if est is not None:
                    kt["tunedb_estimate"] = est.to_dict()
                out.append(kt)
                used.add(id(kt))
            elif cached:
                db_answers += 1
                if self.include_db_results:
                    out.append(record_to_result(rec, keys, costs.get(rec.config_key),
                                                metrics if isinstance(metrics, Mapping) else None))
        # Kernel Tuner results the Tuner did not count (none expected): keep them
        out.extend(r for r in backend.cost_func.results if id(r) not in used)
        return out, db_answers


def _config_costs(db: RecordStore, target: Mapping[str, Any], workload: Mapping[str, Any]
                  ) -> dict[str, CostEstimate]:
    """config_key -> the one estimator's cost (seconds) of every config of (target, workload):
    ``tunedb.index.model.estimate.rank`` over the entry's records (``db.entry_records``: ok, live, not
    refuted), read once, so each record's value is its tuner's statistic (Kernel Tuner's
    ``time``: the mean of its iterations) whatever the store's backend."""
    from tunedb.index.model.estimate import rank

    return {c.config_key: c.estimate for c in rank(db.entry_records(target, workload))}


class _RecordingRunner:
    """A runner that hands every result to ``sink`` as it comes back (one config per ``run`` call
    for sequential and simulation runners, so each result is committed as soon as it exists) and
    delegates everything else to the wrapped runner."""

    def __init__(self, runner: Any, sink: Callable[[dict], None]) -> None:
        self._runner = runner
        self._sink = sink
        self._split = type(runner).__name__ in ("SequentialRunner", "SimulationRunner")

    def run(self, parameter_space: Any, tuning_options: Any) -> list:
        configs = list(parameter_space)
        out: list = []
        for batch in ([[c] for c in configs] if self._split else [configs]):
            res = self._runner.run(batch, tuning_options)
            for r in res:
                if r is not None:
                    self._sink(r)
            out.extend(res)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)


@dataclass
class RecordInfo:
    """What one ``Recorder.tune`` did: ``results`` (Kernel Tuner results seen), ``committed``
    (records written), ``skipped`` (repeats within the run; in simulation mode also configs the DB
    already held for this target, a replay of the same file adding nothing)."""

    target: dict
    workload: dict
    results: int = 0
    committed: int = 0
    skipped: int = 0

    def to_json(self) -> dict:
        return asdict(self)


class Recorder:
    """A Kernel Tuner strategy that runs another strategy unchanged (a name from Kernel Tuner's
    ``strategy_map`` such as ``"genetic_algorithm"``, or any object with ``tune``) and commits every
    result its runner returns to ``db`` at once (keys and mapping as ``WarmStart``).  Nothing is
    looked up: the wrapped strategy decides what runs.  ``last_run``: a :class:`RecordInfo`."""

    def __init__(self, db: RecordStore, strategy: Any = "random_sample", *,
                 target: str | Mapping[str, Any] | None = None) -> None:
        self.db = db
        self.strategy = strategy
        self.target = target
        self.last_run: RecordInfo | None = None

    def _strategy(self) -> Any:
        if isinstance(self.strategy, str):
            from kernel_tuner.interface import strategy_map

            if self.strategy not in strategy_map:
                raise ValueError(f"unknown Kernel Tuner strategy {self.strategy!r}")
            return strategy_map[self.strategy]
        if not callable(getattr(self.strategy, "tune", None)):
            raise ValueError("strategy must be a Kernel Tuner strategy name or an object with tune()")
        return self.strategy

    def tune(self, searchspace: Any, runner: Any, tuning_options: Any) -> list[dict]:
        """Kernel Tuner's strategy entry point: the wrapped strategy's results, unchanged."""
        strategy = self._strategy()
        target, workload, keys = _run_keys(searchspace, runner, tuning_options, self.target)
        simulation = bool(getattr(runner, "simulation_mode", False) or tuning_options.get("simulation_mode"))
        source = "replay" if simulation else "measured"
        info = RecordInfo(target=target, workload=workload)
        self.last_run = info
        seen: set[str] = set()

        def sink(result: dict) -> None:
            info.results += 1
            rec = result_to_record(result, target, workload, keys, source=source, simulation=simulation)
            if rec.config_key in seen or (simulation and self.db.lookup(target, workload, rec.config) is not None):
                info.skipped += 1
                seen.add(rec.config_key)
                return
            seen.add(rec.config_key)
            self.db.commit(rec)
            info.committed += 1

        try:
            return strategy.tune(searchspace, _RecordingRunner(runner, sink), tuning_options)
        finally:
            log.info("tunedb recorded %d Kernel Tuner results (%d repeats skipped)", info.committed, info.skipped)

