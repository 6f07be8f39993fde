"""A TVM MetaSchedule database backed by tunedb (optional extra ``.[tvm]``).

``TunedbDatabase(path, target=None)`` is a MetaSchedule ``PyDatabase`` whose records live in the
tunedb store at ``path``, so ``ms.tune_tir(mod, target, work_dir, max_trials_global=...,
database=TunedbDatabase(path, target=target))`` reads and writes tunedb, and
``ms.tir_integration.compile_tir(db, mod, target)`` picks the best schedule back out.
TVM (``apache-tvm==0.27.0.post1`` with ``apache-tvm-ffi==0.1.14.post0``; MetaSchedule lives in
``tvm.s_tir.meta_schedule`` there) is imported lazily: importing this module never needs TVM,
only touching :data:`TunedbDatabase` (or calling the TVM helpers) does.

Mapping (one MetaSchedule ``TuningRecord`` -> one tunedb Record, source ``measured``), the same
as :mod:`tunedb.transfer.tuners.tvm.metaschedule_logs`, so a JSONDatabase imported with ``tunedb import
metaschedule`` is served by this class and records written here export back with ``tunedb
export --format metaschedule``:

* target: the TVM target's JSON export (``Target.export()``: kind, keys, mcpu, num-cores, ...) as a
  dict, plus the catalog fields the importer adds for a known ``mcpu`` (:func:`target_of`).
* workload: ``{family, structural_hash, shapes, dtypes, dtype[, M, N, K]}``
  (:func:`~tunedb.transfer.tuners.tvm.metaschedule_logs.workload_of`): keyed by the IRModule's structural hash
  (an opaque string; MetaSchedule's ``"structural"`` module equality), shapes and dtypes from the
  module's entry-function ``ArgInfo``; ``family`` is ``matmul`` for ``[M,K] x [K,N] -> [M,N]``, else
  ``tir``.  The workload is always computed from the IRModule itself, never from a record's
  ``args_info``, so a module maps to one workload key whatever the record says.
* config: the trace's sampling decisions as knobs ``decision_<inst>_<Kind>`` plus ``sketch``
  (:func:`~tunedb.transfer.tuners.tvm.metaschedule_logs.config_of`).
* costs: ``run_secs`` in seconds.  ``run_secs`` missing, or MetaSchedule's failure marker (1e10 s)
  -> status ``runtime_error`` without costs (MetaSchedule never returns those from ``get_top_k``).
* meta ``{"metaschedule": {"record": [trace, run_secs, target, args_info], "workload":
  [structural_hash, base64(IRModule JSON)]}}``: the record's JSON and ``Workload.as_json()``
  verbatim (the IRModule serialised by TVM's JSON graph writer, i.e. ``tvm.ir.save_json``), so every
  stored record can be rebuilt into a ``TuningRecord`` on its own.

Nothing from a record is executed: traces and modules are read back with TVM's JSON readers
(``Workload.from_json``, ``TuningRecord.from_json`` / ``Trace.apply_json_to_schedule``, which
replay schedule primitives from data), never ``eval``'d or unpickled.

Costs handed to TVM: the one estimator
--------------------------------------
A stored record is one measurement of a config (one trace's decisions); what a config costs is
the estimator's (``tunedb.index.model.estimate``, seconds).  A MetaSchedule record's value is the
statistic MetaSchedule itself ranks by, the **mean of its** ``run_secs`` (its databases sort
records by mean run time), so a config with one record costs exactly what MetaSchedule would
rank it by; a config with several records costs the median of their means.  ``get_top_k``,
``query_tuning_record`` (and so ``query_schedule``, ``query_ir_module``, ``compile_tir``) and
:meth:`neighbour_records` rank configs by it (:func:`entry_costs`, ascending) and hand TVM one
``TuningRecord`` per config: the trace of a representative record with ``run_secs = [estimate]``
(a one-element ``Array<FloatImm>``, seconds, as TVM's own records carry), so TVM's mean of
``run_secs`` is the estimate.  The warm start takes each neighbour's configs in that order.  ``get_all_tuning_records``
lists the stored measurements themselves (each with its own ``run_secs``): it is a listing of
records, not an answer about a config's cost.

Target awareness (MetaSchedule's own ``JSONDatabase`` ignores the target, apache/tvm#15549)
------------------------------------------------------------------------------------------------
``get_top_k(workload, k)`` has no target argument, so the database has a *current target*:

* the ``target`` constructor argument (a ``tvm.target.Target``, a JSON dict or a target string)
  when given -- recommended, because MetaSchedule calls ``get_top_k`` before the first commit;
* otherwise the target of the first tuning record committed through this handle;
* settable at any time with :meth:`set_target`; :attr:`target` shows it (a tunedb target dict).

``get_top_k``, ``get_all_tuning_records`` and ``__len__`` only see records of the current target;
with no current target ``get_top_k`` returns nothing (it never mixes targets) while
``get_all_tuning_records``/``__len__`` see every target.  ``query_tuning_record`` (and so
``query_schedule``, ``query_ir_module`` and ``compile_tir``, whose C++ defaults call it) uses the
target it is *given*, never the current one.  Records are always committed under their own
target (``TuningRecord.target``; the current target only when a record has none).  Targets match
exactly on their JSON export: ``{"kind": "llvm", "num-cores": 2}`` and ``{"kind": "llvm",
"mcpu": "znver4", "num-cores": 2}`` are different targets.  ``has_workload`` is target-independent
(as in MetaSchedule): true when any target has a record of the module, or the module was
committed through this handle.

Warm start for an unseen workload
---------------------------------
When the current target has no ``ok`` record of the workload, ``get_top_k`` (which MetaSchedule's
evolutionary search calls to seed its initial population) returns *adapted traces of the nearest
entries* instead, up to ``k``:

1. ``db.nearest(target, workload, warm_start_neighbours, same_family=True,
   best_n=warm_start_per_neighbour)`` (each neighbour's best configs by the estimator,
   ``Match.best_costs``) -- the most similar (target, workload) entries of the same
   family (matmul with matmul), on any target; entries whose arguments have the workload's ranks
   and dtypes come first (for ``tir`` workloads, i.e. fused Relax operators, the same operator at
   other shapes, most likely: shape similarity alone may prefer another operator with
   look-alike shapes), most similar first within each group;
2. neighbours of another target *kind* (e.g. cuda traces for llvm) are skipped, and so are records
   without a MetaSchedule trace (native tunedb kernels);
3. each neighbour record's trace, cut at ``EnterPostproc`` (postprocessor output is shape-specific;
   MetaSchedule re-runs the postprocessors itself), is applied to a fresh schedule of the new
   workload's IRModule with ``Trace.apply_json_to_schedule``.  TVM re-validates every decision on
   the new loops: a perfect-tile decision whose inner factors no longer divide the new extent keeps
   the factors that do and gives the outer tile the rest, so a 64x64x64 tiling adapts to
   64x64x128.  A trace that fails to apply (other block names, other loop nest) is skipped;
4. the resulting traces (``sch.trace``, with the adapted decisions), de-duplicated, come back as
   ``TuningRecord(trace, workload, run_secs=None, target=current target, args_info)``:
   ``run_secs=None`` marks them unmeasured, so nobody mistakes them for measurements, and they are
   never stored.  :attr:`last_warm_start` lists where each came from.

Once the workload has an ``ok`` record on the current target, only its own records are returned.
``query_tuning_record`` never warm-starts (it answers measured results only).  Only MetaSchedule's
evolutionary search reads ``get_top_k``; the replay strategies ignore the database.

Through ``get_top_k`` alone the adapted traces are only part of the search's initial population,
which it mutates before measuring, so none is measured as offered.
:class:`~tunedb.transfer.tuners.tvm.search.WarmStartSearch` measures them as they are:
it takes them from :meth:`adapted_traces` (the same traces, with provenance; [] once the workload
has ``ok`` records), and :func:`~tunedb.transfer.tuners.tvm.search.pretrain_cost_model`
feeds a cost model the nearest workloads' measured history from :meth:`neighbour_records`.
:func:`tunedb.transfer.tuners.tvm.models.tune_relax` uses both for a whole Relax model.

Cost of the database itself
---------------------------
Every MetaSchedule-facing method (and :meth:`adapted_traces`, :meth:`neighbour_records`,
:meth:`count_records`) adds its wall time to :attr:`timings` (``{method: [calls, seconds]}``,
outermost calls only); :attr:`timed_seconds` is their sum, :meth:`reset_timings` starts over.
Committing one record costs a few milliseconds (MetaSchedule's own ``TuningRecord.as_json`` is
about half of it), ``get_top_k`` about as much; a trial (build + run) costs seconds.

Building on small machines
--------------------------
:func:`local_builder` is MetaSchedule's ``LocalBuilder`` minus one import per worker (see
:func:`build_without_tensor_intrin`): with the stock builder every build batch costs ~25 CPU seconds
before it compiles anything.  The tuning process itself still pays that import once (in
``TuneContext``).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from tunedb.index.contract.base import RecordStore
from tunedb.index.model.keys import key_of
from tunedb.index.model.record import Record
from tunedb.index.opener import open_store
from tunedb.transfer.tuners.tvm.metaschedule_logs import FAILED_RUN_S, config_of, target_of, workload_of

__all__ = ["TunedbDatabase",  # noqa: F822 (built lazily by __getattr__)
           "TVM_INSTALL_HINT", "build_without_tensor_intrin", "local_builder", "strip_postproc",
           "tvm_available"]

if TYPE_CHECKING:
    import tvm
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    from tunedb.index.model.estimate import ConfigCost

log = logging.getLogger(__name__)

TVM_INSTALL_HINT = "TVM is not installed: pip install -e '.[tvm]' (apache-tvm==0.27.0.post1, apache-tvm-ffi==0.1.14.post0)"
SOURCE = "measured"
_CACHE_LIMIT = 4096  # rebuilt TuningRecords kept per handle (by record_id)


def tvm_available() -> bool:
    """True when ``tvm.s_tir.meta_schedule`` imports (the ``.[tvm]`` extra is installed)."""
    try:
        import tvm.s_tir.meta_schedule  # noqa: F401
    except ImportError:
        return False
    return True


def strip_postproc(trace_json: Any) -> list:
    """A trace JSON ``[instructions, decisions]`` cut before its ``EnterPostproc`` instruction.

    Pure JSON manipulation (no TVM): decisions of removed instructions are dropped.  Raises
    ValueError when ``trace_json`` is not ``[list, list]``."""
    if not (isinstance(trace_json, list) and len(trace_json) == 2 and isinstance(trace_json[0], list)
            and isinstance(trace_json[1], list)):
        raise ValueError("trace must be [instructions, decisions]")
    insts, decisions = trace_json
    end = len(insts)
    for i, inst in enumerate(insts):
        if isinstance(inst, list) and inst and inst[0] == "EnterPostproc":
            end = i
            break
    return [insts[:end], [d for d in decisions if isinstance(d, list) and d and isinstance(d[0], int) and d[0] < end]]


def normalise_target_json(tjson: Mapping[str, Any], default_triple: str | None) -> dict:
    """A TVM target's JSON export with the ``mtriple`` that TVM fills in by itself removed.

    TVM's LLVM-based targets get ``mtriple`` = the LLVM host triple of the TVM build
    (``x86_64-conda-linux-gnu`` for the apache-tvm 0.27.0.post1 wheel) when none is given, so the
    same target exports differently on differently built TVMs; an ``mtriple`` equal to
    ``default_triple`` is dropped (also in a nested ``host``), any other one is kept.  Pure JSON."""
    out: dict = {}
    for k, v in tjson.items():
        if k == "mtriple" and default_triple and v == default_triple:
            continue
        if k == "host" and isinstance(v, Mapping):
            v = normalise_target_json(v, default_triple)
        out[str(k)] = v
    return out


def entry_costs(db: Any, target: Any, workload: Any, k: int) -> list[ConfigCost]:
    """The ``k`` best configs of (target, workload) by the one estimator, computed from the
    entry's records (``db.entry_records``: ok, live, not refuted; ``tunedb.index.model.estimate.rank``)
    so each MetaSchedule record counts as the mean of its ``run_secs`` whatever the store's
    backend; ranking order, ``[]`` when none or ``k <= 0``."""
    from tunedb.index.model.estimate import rank

    if k <= 0:
        return []
    return rank(db.entry_records(target, workload), k)


def _run_secs_status(run_secs: Any) -> tuple[list[float], str, str]:
    """(costs seconds, status, error) of a MetaSchedule ``run_secs`` value."""
    if not run_secs:
        return [], "runtime_error", "MetaSchedule record without run_secs"
    costs = [float(x) for x in run_secs]
    if any(c >= FAILED_RUN_S or c != c for c in costs):
        return [], "runtime_error", "MetaSchedule failed build or run (run_secs >= 1e9)"
    return costs, "ok", ""


def build_without_tensor_intrin(mod: Any, target: Any, _params: Any = None) -> Any:
    """A ``LocalBuilder`` build function: MetaSchedule's ``default_build`` without its
    ``import tvm.s_tir.tensor_intrin``.

    In apache-tvm 0.27 that import parses every tensor intrinsic's TVMScript and costs about 25 CPU
    seconds; ``LocalBuilder`` starts fresh worker processes for every batch, so each batch pays it
    again (and its default 30 s timeout fails every build on a busy 2-core machine).  Intrinsics
    are only needed while *scheduling* (tensorize, in the tuning process); a scheduled module builds
    without the registry.  Runs in the builder's worker process; returns the built runtime module."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target)


def local_builder(max_workers: int | None = None, timeout_sec: float = 120.0) -> Any:
    """A MetaSchedule ``LocalBuilder`` using :func:`build_without_tensor_intrin` (``timeout_sec``:
    seconds per build; ``max_workers``: worker processes, default one per CPU)."""
    from tvm.s_tir.meta_schedule.builder import LocalBuilder

    return LocalBuilder(max_workers=max_workers, timeout_sec=timeout_sec, f_build=build_without_tensor_intrin)


# ----------------------------------------------------------------------------- TVM, lazily
_TVM: SimpleNamespace | None = None


def _tvm() -> SimpleNamespace:
    """The TVM names the database uses, imported on first call (ImportError without TVM), plus
    ``default_triple``: the LLVM host triple of this TVM build (None without LLVM)."""
    global _TVM
    if _TVM is None:
        import tvm
        from tvm.s_tir import Schedule
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo
        from tvm.s_tir.meta_schedule.database import TuningRecord, Workload
        from tvm.s_tir.meta_schedule.utils import _json_de_tvm
        from tvm.s_tir.schedule import Trace

        try:
            default_triple: str | None = str(tvm.target.codegen.llvm_get_system_triple())
        except Exception:  # a TVM built without LLVM
            default_triple = None
        _TVM = SimpleNamespace(tvm=tvm, Schedule=Schedule, ArgInfo=ArgInfo, TuningRecord=TuningRecord,
                               Workload=Workload, Trace=Trace, json_de_tvm=_json_de_tvm,
                               default_triple=default_triple)
    return _TVM


def to_tvm_target(target: Any) -> tvm.target.Target:
    """``target`` (a ``tvm.target.Target``, a JSON dict or a target string) as a Target."""
    tvm_ = _tvm().tvm
    if isinstance(target, tvm_.target.Target):
        return target
    if isinstance(target, Mapping):
        return tvm_.target.Target(dict(target))
    if isinstance(target, str):
        return tvm_.target.Target(target)
    raise TypeError(f"target must be a tvm Target, a JSON dict or a string, not {type(target).__name__}")


def _plain(obj: Any) -> Any:
    """TVM containers (Array, Map, IntImm, FloatImm, String) -> plain JSON data."""
    if obj is None or isinstance(obj, (bool, int, float)):
        return obj
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, (list, tuple)):
        return [_plain(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    return _plain(_tvm().json_de_tvm(obj))


def _target_json(target: tvm.target.Target) -> dict:
    """The TVM target's JSON export as plain Python data (verbatim)."""
    return _plain(target.export())


def _tunedb_target(tjson: Mapping[str, Any]) -> dict:
    """tunedb target dict of a TVM target JSON (what records are stored and matched under)."""
    return target_of(normalise_target_json(tjson, _tvm().default_triple))


def _metaschedule_meta(rec: Record) -> Mapping[str, Any] | None:
    """The ``metaschedule`` meta of a tunedb record when it holds a full MetaSchedule record."""
    ms = rec.meta.get("metaschedule")
    if isinstance(ms, Mapping) and isinstance(ms.get("record"), list) and len(ms["record"]) == 4:
        return ms
    return None


def _signature(wl: Mapping[str, Any]) -> tuple:
    """(argument ranks, argument dtypes) of a workload dict: what two tasks of the same fused
    operator at other shapes share."""
    shapes = wl.get("shapes") or []
    return (tuple(len(x) if isinstance(x, list) else -1 for x in shapes), tuple(wl.get("dtypes") or []))


def _adapted_trace(trace_json: Any, mod: tvm.IRModule) -> tuple[Any, str] | None:
    """A stored trace (cut before its postprocessors) replayed on a fresh schedule of ``mod``:
    ``(trace, dedup key)``, or None when it does not fit ``mod``."""
    t = _tvm()
    try:
        pre = strip_postproc(trace_json)
        sch = t.Schedule(mod, error_render_level="none")
        t.Trace.apply_json_to_schedule(pre, sch)
        trace = sch.trace
        return trace, json.dumps(_plain(trace.as_json(remove_postproc=True)), sort_keys=True)
    except Exception:  # the trace does not fit this workload: skip it
        return None


def _timed(fn: Callable) -> Callable:
    """Add the wall time of a database method to ``self.timings[name] = [calls, seconds]``.

    Only the outermost timed call counts (a timed method calling another is not counted twice);
    the depth is per thread."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        local = self._timing_local
        if getattr(local, "depth", 0):
            return fn(self, *args, **kwargs)
        local.depth = 1
        t0 = time.perf_counter()
        try:
            return fn(self, *args, **kwargs)
        finally:
            local.depth = 0
            dt = time.perf_counter() - t0
            with self._timing_lock:
                slot = self.timings.setdefault(name, [0, 0.0])
                slot[0] += 1
                slot[1] += dt

    return wrapper


# ----------------------------------------------------------------------------- the database
class _TunedbDatabase:
    """MetaSchedule database stored in tunedb (see :mod:`tunedb.transfer.tuners.tvm.database` for the contract).

    ``path``: tunedb store location (a DB directory, created when missing, or ``memory:``) or an
    open :class:`~tunedb.index.contract.base.RecordStore`; ``target``: the current target
    (``tvm.target.Target``, JSON dict or string; see module docstring); ``warm_start``: offer
    nearest-neighbour traces for unseen workloads; ``warm_start_neighbours``: entries asked from
    ``db.nearest``; ``warm_start_per_neighbour``: best records taken from each;
    ``min_similarity``: ignore neighbours below it; ``session``: tunedb session label of
    committed records.

    Not a "look up, else measure" client (``tunedb.transfer.measure.backend.backend.lookup_or_measure``):
    MetaSchedule's runner measures and decides what to measure; this class only commits what it
    is handed and answers queries."""

    def __init__(self, path: str | os.PathLike | RecordStore, target: Any = None, *, warm_start: bool = True,
                 warm_start_neighbours: int = 8, warm_start_per_neighbour: int = 4,
                 min_similarity: float | None = None, session: str = "") -> None:
        self.db = path if isinstance(path, RecordStore) else open_store(path)
        self.warm_start = bool(warm_start)
        self.warm_start_neighbours = int(warm_start_neighbours)
        self.warm_start_per_neighbour = int(warm_start_per_neighbour)
        self.min_similarity = min_similarity
        self.session = session
        self.last_warm_start: list[dict] = []
        self.timings: dict[str, list] = {}  # method -> [calls, wall seconds] (outermost calls only)
        self._timing_lock = threading.Lock()
        self._timing_local = threading.local()
        self._lock = threading.RLock()
        self._tvm_target: tvm.target.Target | None = None
        self._target: dict | None = None
        self._workloads: dict[str, Workload] = {}       # structural hash -> Workload (this handle)
        self._wl_info: dict[str, tuple[dict, str]] = {}  # structural hash -> (workload dict, base64 module)
        self._recent_wl: list[tuple[Any, str]] = []      # (Workload object, structural hash), newest first
        self._known_wl_keys: set[str] | None = None      # workload keys with a record in the store
        self._rebuilt: OrderedDict[str, Any] = OrderedDict()
        self._warned_mismatch = False
        if target is not None:
            self.set_target(target)

    # ------------------------------------------------------------------ timings
    @property
    def timed_seconds(self) -> float:
        """Wall seconds spent in this handle's MetaSchedule-facing methods so far (the sum of
        :attr:`timings`; outermost calls only, so nothing is counted twice)."""
        with self._timing_lock:
            return float(sum(v[1] for v in self.timings.values()))

    def reset_timings(self) -> None:
        """Forget :attr:`timings` (start a new measurement)."""
        with self._timing_lock:
            self.timings = {}

    # ------------------------------------------------------------------ targets
    @property
    def target(self) -> dict | None:
        """The current target as a tunedb target dict (None until known)."""
        return self._target

    @property
    def tvm_target(self) -> tvm.target.Target | None:
        """The current target as a ``tvm.target.Target`` (None until known)."""
        return self._tvm_target

    def set_target(self, target: Any) -> dict:
        """Make ``target`` (Target, JSON dict or string) the current target; returns its dict."""
        t = to_tvm_target(target)
        with self._lock:
            self._tvm_target = t
            self._target = _tunedb_target(_target_json(t))
            return self._target

    def target_dict(self, target: Any) -> dict:
        """tunedb target dict of a Target / JSON dict / string (as records are committed)."""
        return _tunedb_target(_target_json(to_tvm_target(target)))

    # ---------------------------------------------------------------- workloads
    def _workload_info(self, mod: tvm.IRModule, shash: str | None = None,
                       b64: str | None = None) -> tuple[str, dict, str]:
        """(structural hash, workload dict, base64 module JSON) of ``mod``."""
        if shash is None or b64 is None:
            shash, b64 = (str(x) for x in _tvm().Workload(mod).as_json())
        info = self._wl_info.get(shash)
        if info is None:
            args = _plain([a.as_json() for a in _tvm().ArgInfo.from_entry_func(mod, remove_preproc=True)])
            info = self._wl_info[shash] = (workload_of(shash, args), b64)
        return shash, info[0], info[1]

    def _known_workload_keys(self) -> set[str]:
        """Workload keys with a live record in the store (read once per handle, then kept up to
        date), from the store's entries: one row per (target, workload), never every record (a
        published snapshot answers from its entries index without fetching its parts)."""
        if self._known_wl_keys is None:
            t = self.db.entries()
            self._known_wl_keys = set(t.column("workload_key").to_pylist()) if t.num_rows else set()
        return self._known_wl_keys

    @_timed
    def has_workload(self, mod: tvm.IRModule) -> bool:
        """True when any target has a record of ``mod`` or it was committed through this handle."""
        with self._lock:
            shash, wl, _ = self._workload_info(mod)
            if shash in self._workloads:
                return True
            return key_of(wl) in self._known_workload_keys()

    @_timed
    def commit_workload(self, mod: tvm.IRModule) -> Workload:
        """The ``Workload`` of ``mod`` (one object per structural hash and handle; nothing is
        written: tunedb stores a workload with its records)."""
        with self._lock:
            w = _tvm().Workload(mod)
            shash, b64 = (str(x) for x in w.as_json())
            have = self._workloads.get(shash)
            if have is not None:
                return have
            self._workload_info(mod, shash, b64)
            self._workloads[shash] = w
            return w

    def _workload_of_object(self, workload: Workload) -> tuple[str, dict, str]:
        """:meth:`_workload_info` of a MetaSchedule ``Workload`` (remembered by structural hash).

        MetaSchedule passes the same ``Workload`` object (the one :meth:`commit_workload` returned)
        with every record of a task, so the last few objects are recognised by identity
        (``same_as``) and their module is not serialised again."""
        for obj, shash in self._recent_wl:
            if obj.same_as(workload):
                info = self._wl_info[shash]
                return shash, info[0], info[1]
        shash, b64 = (str(x) for x in workload.as_json())
        self._workloads.setdefault(shash, workload)
        out = self._workload_info(workload.mod, shash, b64)
        self._recent_wl = [(workload, shash), *self._recent_wl[:7]]
        return out

    # ------------------------------------------------------------------ records
    @_timed
    def commit_tuning_record(self, record: TuningRecord) -> None:
        """Store one MetaSchedule record as a tunedb Record (durable on return)."""
        with self._lock:
            inner = _plain(record.as_json())  # [trace, run_secs, target, args_info]
            shash, wl, b64 = self._workload_of_object(record.workload)
            tdict = self._record_target(inner)
            costs, status, error = _run_secs_status(inner[1])
            rec = Record(target=tdict, workload=wl, config=config_of(inner[0]), costs=costs, status=status,
                         error=error, source=SOURCE, session=self.session,
                         meta={"metaschedule": {"record": inner, "workload": [shash, b64]}})
            self.db.commit(rec)
            if self._known_wl_keys is not None:
                self._known_wl_keys.add(rec.workload_key)

    def _record_target(self, inner: list) -> dict:
        """The tunedb target of a record's JSON ``inner`` (filling in the current target when it
        has none); the first record's target becomes current, a later different one warns once."""
        if inner[2] is None:
            if self._tvm_target is None:
                raise ValueError("TuningRecord has no target and the database has no current target")
            inner[2] = _target_json(self._tvm_target)
        tdict = _tunedb_target(inner[2])
        if self._target is None:
            self.set_target(inner[2])
        elif tdict != self._target and not self._warned_mismatch:
            self._warned_mismatch = True
            log.warning("TunedbDatabase: committing records for target %s while get_top_k serves %s; "
                        "pass the tuning target to TunedbDatabase(target=...)",
                        json.dumps(tdict, sort_keys=True), json.dumps(self._target, sort_keys=True))
        return tdict

    def _rebuild(self, rec: Record, workload: Workload) -> TuningRecord | None:
        """The MetaSchedule record stored in ``rec.meta`` (trace replayed on ``workload``)."""
        cached = self._rebuilt.get(rec.record_id)
        if cached is not None:
            self._rebuilt.move_to_end(rec.record_id)
            return cached
        ms = _metaschedule_meta(rec)
        if ms is None:
            return None
        try:
            tr = _tvm().TuningRecord.from_json(ms["record"], workload)
        except Exception as e:  # a stored trace that no longer applies: skip it, keep serving
            log.warning("tunedb record %s: MetaSchedule trace does not apply: %s", rec.record_id,
                        str(e).splitlines()[0] if str(e) else type(e).__name__)
            return None
        self._rebuilt[rec.record_id] = tr
        if len(self._rebuilt) > _CACHE_LIMIT:
            self._rebuilt.popitem(last=False)
        return tr

    def _answer(self, cc: ConfigCost, workload: Workload) -> TuningRecord | None:
        """The TuningRecord of one config of :func:`entry_costs`: its representative record's trace
        replayed on ``workload`` with ``run_secs = [cc.estimate.value]`` (seconds; TVM's types);
        None when the stored trace does not rebuild."""
        tr = self._rebuild(cc.record, workload)
        if tr is None:
            return None
        return _tvm().TuningRecord(tr.trace, tr.workload, [float(cc.estimate.value)], tr.target, tr.args_info)

    def _measured_top_k(self, target: dict, wl: dict, workload: Workload, k: int) -> list[TuningRecord]:
        """The ``k`` best configs of (target, workload) by the estimator (:func:`entry_costs`) that
        rebuild into TuningRecords, ascending estimated cost, ``run_secs = [estimate]``."""
        out = []
        for cc in entry_costs(self.db, target, wl, k):
            tr = self._answer(cc, workload)
            if tr is not None:
                out.append(tr)
        return out

    @_timed
    def get_top_k(self, workload: Workload, top_k: int) -> list[TuningRecord]:
        """The ``top_k`` best measured configs of ``workload`` on the current target by the one
        estimator (ascending; ``run_secs = [estimate]`` seconds, see the module docstring); for a workload the current target has none of, adapted nearest-neighbour
        traces (unmeasured, ``run_secs=None``); [] without a current target."""
        with self._lock:
            if top_k <= 0 or self._target is None:
                return []
            _, wl, _ = self._workload_of_object(workload)
            out = self._measured_top_k(self._target, wl, workload, int(top_k))
            if out or not self.warm_start:
                return out
            return self._warm_start(workload, wl, int(top_k))

    # ---------------------------------------------------------------- warm start
    def _warm_start(self, workload: Workload, wl: dict, top_k: int) -> list[TuningRecord]:
        """Up to ``top_k`` nearest-neighbour traces adapted to ``workload`` as unmeasured
        TuningRecords (see module docstring); sets :attr:`last_warm_start`."""
        assert self._tvm_target is not None
        adapted = self._adapted(workload.mod, wl, top_k)
        self.last_warm_start = [info for _, info in adapted]
        args_info = _tvm().ArgInfo.from_entry_func(workload.mod, remove_preproc=True)
        return [_tvm().TuningRecord(trace, workload, None, self._tvm_target, args_info) for trace, _ in adapted]

    def _adapted(self, mod: tvm.IRModule, wl: dict, k: int) -> list[tuple[Any, dict]]:
        """``(trace, provenance)`` of up to ``k`` nearest-neighbour traces adapted to ``mod``,
        nearest entry first, each entry's configs in ``best_costs`` order (the estimator's best
        first), de-duplicated."""
        target = self._target
        assert target is not None
        out: list[tuple[Any, dict]] = []
        seen: set[str] = set()
        sig = _signature(wl)
        # entries whose arguments have the query's ranks and dtypes (the same fused operator, most
        # likely) first, then the others; most similar first within each group
        matches = sorted(self._neighbours(target, wl), key=lambda m: (_signature(m.workload) != sig, -m.similarity))
        for m in matches:
            if m.target.get("kind") != target.get("kind"):
                continue
            for cc in m.config_costs():
                rec = cc.record
                ms = rec.meta.get("metaschedule")
                if not (isinstance(ms, Mapping) and isinstance(ms.get("record"), list) and ms["record"]):
                    continue
                adapted = _adapted_trace(ms["record"][0], mod)
                if adapted is None or adapted[1] in seen:
                    continue
                seen.add(adapted[1])
                out.append((adapted[0], {"record_id": rec.record_id, "from_target": m.target_name,
                                         "from_workload": m.workload, "similarity": m.similarity,
                                         "cost": cc.estimate.value, "estimate": cc.estimate.to_dict(),
                                         "key": adapted[1]}))
                if len(out) >= k:
                    return out
        return out

    @_timed
    def adapted_traces(self, mod: tvm.IRModule, k: int) -> list[tuple[Any, dict]]:
        """The warm-start traces of ``mod`` for the current target, for a search strategy that
        measures them as they are (:mod:`tunedb.transfer.tuners.tvm.search`).

        Returns up to ``k`` ``(tvm.s_tir.Trace, provenance)`` pairs, the traces ``get_top_k``
        would offer (nearest entry first; postprocessors not applied), provenance ``{record_id
        (the config's representative record), from_target, from_workload, similarity, cost (the
        config's estimated cost on the neighbour, seconds), estimate (``CostEstimate.to_dict()``:
        n, interval), key (the trace's canonical JSON without postprocessors)}``.  ``[]`` when warm start is off, there
        is no current target, or the current target already has ``ok`` records of ``mod`` (the
        database serves those)."""
        with self._lock:
            if k <= 0 or self._target is None or not self.warm_start:
                return []
            w = self.commit_workload(mod)
            _, wl, _ = self._workload_of_object(w)
            if entry_costs(self.db, self._target, wl, 1):
                return []
            return self._adapted(w.mod, wl, int(k))

    @_timed
    def neighbour_records(self, mod: tvm.IRModule, per_neighbour: int = 64,
                          neighbours: int | None = None) -> list[tuple[Workload, list[TuningRecord]]]:
        """Measured history of the workloads nearest to ``mod`` on exactly the current target,
        for pre-training a cost model: ``[(neighbour Workload, its best ``per_neighbour``
        configs by the estimator as TuningRecords rebuilt on the neighbour's own module,
        ascending estimated cost, ``run_secs = [estimate]`` seconds)]``, nearest first,
        ``mod``'s own workload excluded.  Only ``ok`` records that rebuild; [] without a
        current target.  ``neighbours`` defaults to ``warm_start_neighbours``."""
        with self._lock:
            if self._target is None:
                return []
            w = self.commit_workload(mod)
            _, wl, _ = self._workload_of_object(w)
            own = key_of(wl)
            out = []
            for m in self._neighbours(self._target, wl, neighbours=neighbours, best_n=0):
                if m.target != self._target or m.workload_key == own:
                    continue
                nb_w = None
                trs = []
                for cc in entry_costs(self.db, self._target, m.workload, int(per_neighbour)):
                    ms = _metaschedule_meta(cc.record)
                    if ms is None:
                        continue
                    nb_w = nb_w or self._stored_workload(ms.get("workload"))
                    if nb_w is None:
                        break
                    tr = self._answer(cc, nb_w)
                    if tr is not None:
                        trs.append(tr)
                if nb_w is not None and trs:
                    out.append((nb_w, trs))
            return out

    def _neighbours(self, target: dict, wl: dict, *, neighbours: int | None = None,
                    best_n: int | None = None) -> list:
        """``db.nearest`` of (target, wl) for the warm start ([] when the query fails);
        ``neighbours``/``best_n`` default to ``warm_start_neighbours``/``warm_start_per_neighbour``."""
        try:
            with warnings.catch_warnings():  # "target matches no catalog device": expected for TVM targets
                warnings.simplefilter("ignore", UserWarning)
                return self.db.nearest(target, wl, neighbours or self.warm_start_neighbours, same_family=True,
                                       min_similarity=self.min_similarity,
                                       best_n=self.warm_start_per_neighbour if best_n is None else best_n)
        except (ValueError, TypeError) as e:
            log.warning("tunedb warm start: nearest query failed: %s", e)
            return []

    @_timed
    def count_records(self, mod: tvm.IRModule) -> int:
        """Number of stored records (failed ones included: MetaSchedule's trials) of ``mod`` on the
        current target; 0 without a current target."""
        with self._lock:
            if self._target is None:
                return 0
            _, wl, _ = self._workload_of_object(self.commit_workload(mod))
            return int(self.db.records(self._target, wl, include_stale=False).num_rows)

    # ------------------------------------------------------------------ listing
    def _scoped_records(self) -> list[Record]:
        """Stored MetaSchedule records of the current target (of every target when none is set)."""
        t = self.db.records(self._target, include_stale=False) if self._target is not None else \
            self.db.records(include_stale=False)
        if t.num_rows == 0:
            return []
        metas = t.column("meta").to_pylist()
        rows = [i for i, m in enumerate(metas) if '"metaschedule"' in m]
        if not rows:
            return []
        return [Record.from_row(d) for d in t.take(rows).to_pylist()]

    def _stored_workload(self, wjson: Any) -> Workload | None:
        """The ``Workload`` of a record's stored ``[structural_hash, base64 module]`` (None when unreadable)."""
        if not (isinstance(wjson, list) and len(wjson) == 2):
            return None
        w = self._workloads.get(str(wjson[0]))
        if w is None:
            try:
                w = _tvm().Workload.from_json(wjson)
            except Exception:
                return None
            self._workloads[str(wjson[0])] = w
        return w

    @_timed
    def get_all_tuning_records(self) -> list[TuningRecord]:
        """Every stored MetaSchedule record of the current target (of all targets when none is
        set), failed ones included, in commit order: the measurements themselves, each with its
        own ``run_secs`` (a listing, not a config's cost; see the module docstring)."""
        with self._lock:
            out = []
            for rec in self._scoped_records():
                w = self._stored_workload(rec.meta["metaschedule"].get("workload"))
                tr = self._rebuild(rec, w) if w is not None else None
                if tr is not None:
                    out.append(tr)
            return out

    @_timed
    def __len__(self) -> int:
        """Number of stored MetaSchedule records in the scope of ``get_all_tuning_records``."""
        with self._lock:
            return len(self._scoped_records())

    @_timed
    def query_tuning_record(self, mod: tvm.IRModule, target: tvm.target.Target,
                            workload_name: str | None = None) -> TuningRecord | None:
        """The best measured config of ``mod`` on exactly ``target`` by the one estimator
        (``run_secs = [estimate]`` seconds; ``workload_name`` is ignored, as in MetaSchedule);
        None when that target has none."""
        with self._lock:
            tdict = self.target_dict(target)
            w = self.commit_workload(mod)
            _, wl, _ = self._workload_of_object(w)
            for cc in entry_costs(self.db, tdict, wl, 8):
                tr = self._answer(cc, w)
                if tr is not None:
                    return tr
            return None


def _build_class() -> type:
    """Create the ``@derived_object`` PyDatabase subclass of :class:`_TunedbDatabase` (imports TVM)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.database import PyDatabase

    _tvm()
    body = {k: v for k, v in vars(_TunedbDatabase).items() if k not in ("__dict__", "__weakref__")}
    cls = type("TunedbDatabase", (PyDatabase,), {**body, "__qualname__": "TunedbDatabase"})
    cls.__module__ = __name__
    return derived_object(cls)


_CLASS: type | None = None


def __getattr__(name: str) -> Any:
    """Lazy ``TunedbDatabase``: the class is built (and TVM imported) on first access."""
    global _CLASS
    if name == "TunedbDatabase":
        if _CLASS is None:
            try:
                _CLASS = _build_class()
            except ImportError as e:
                raise ImportError(f"{TVM_INSTALL_HINT} ({e})") from e
        return _CLASS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
