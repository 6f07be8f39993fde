"""Retrieval-seeded local search ("look up first, search next, store at the end").

Order of candidates
  1. with ``use_exact``: the exact entry's best configs (answered from the DB, never re-run);
  2. (warm) the best configs of the k nearest (target, workload) entries (*sources*), adapted to
     this space; ``seed_order="similarity"`` (default) interleaves the sources' lists with a
     quota per source proportional to ``similarity ** similarity_power`` (``seeds.interleave``:
     the most similar device's best first, each device's best before any device's third...),
     ``"rank"`` orders them by a global similarity-weighted rank sum (the old order);
     the first ``n_seeds`` are measured before the search (after the family default, when
     the tuner has one);
  3. local moves, batched per round, with an epsilon share of random exploration: neighbours of
     the three best configs so far and the remaining seeds, ranked by the cost model - or, once
     the run has ``surrogate_after`` ok evaluations of its own and the transfer surrogate is on
     (``surrogate="rgpe"``; default for warm runs with >= 2 sources), by the RGPE ensemble
     (``surrogate.RGPESurrogate``: one model per source's records plus a model of this run's
     measurements, weighted by how well each ranks this run's measurements), refitted after
     every round.  With ``acquisition="ei"`` (default) the candidates are ordered by expected
     improvement under a Gaussian process whose prior mean is the ensemble
     (``RGPESurrogate.expected_improvement``): a config next to this run's measurements is
     predicted at what was measured there, so after the device refutes the sources' favourite
     region the search leaves it; ``"mean"`` orders by the ensemble's prediction alone (the
     version before; in ``benchmarks/bench_kernel_tuner.py`` "ei" is at least as good at every
     budget, median and worst).  Then each round also gives ``seed_slots`` places to the remaining seeds,
     re-interleaved by the surrogate's source weights; a source weighed below
     ``min_source_weight`` gives no more seeds.  ``surrogate_pool="space"`` ranks every untried
     config of a finite space instead of the neighbourhood; ``consensus_seeds`` (default 0) puts
     that many seeds the sources agree on most (similarity-weighted) first.
     ``TuneResult.surrogate`` holds the sources, the weights after every fit and (ei) the
     Gaussian process's fitted calibration and kernel (``gp``).

Guard (warm, ``guard=True``, default): before every round, once the run has ``guard_after`` ok
evaluations, ``proposals.guard.HistoryGuard`` measures how well the history predicts this target
(the rank correlation between the sources' costs and this run's, and which of the history-led
picks and its own history-free explorer's picks improve the run) and gives the explorer a share
of each round: none while both signals say the history predicts well, else between
``guard_min_share`` and ``guard_max_share`` (it misleads); ``TuneResult.surrogate["guard"]``
reports it.

The run spends its whole budget: ``patience`` (rounds without improvement before stopping) is
off unless set.

Every evaluation asks the DB first; what is not there is measured by the backend and
committed at once, so Ctrl-C loses nothing and a rerun resumes (its repeats are cache hits).
``budget`` counts evaluations in this run (new measurements plus cache hits), so a resumed
run does the remaining work only.  Cold mode: no retrieval and no prior model (random start;
a model fitted on this run's own measurements only).  Costs are seconds.

Cost model (warm; fitted in rgpe runs too: it ranks until the surrogate has enough data): the
family's *base model* - fitted on every target's records of the kernel
family, persisted in the store's ``cache_dir()`` and reused while the family's records changed
by less than ``refit_fraction`` (``tunedb.transfer.search.modelcache``) - plus a correction
fitted to its residuals on this run's evaluations every ``retrain_every`` of them
(``CorrectedModel``: a few milliseconds).  ``TuneResult.overhead`` says where tunedb's own time
went (seconds per step).

Origins: every candidate is tagged when it is proposed with why it is evaluated (``ORIGINS``):
``exact`` (the exact entry's bests), ``resume`` (this entry's earlier records; also
``preload``), ``default`` (the family default), ``seed`` (a nearest entry's adapted best; its
source entry is kept), ``model`` (ranked first by the cost model or the RGPE surrogate),
``random`` (epsilon exploration, random starts, and neighbours of the best picked in random
order while there is no model) and ``confirm`` (a re-measurement of a leader).  A new record
carries its tag in ``meta["origin"]`` and, for a seed, ``meta["seeded_from"]`` =
``{"target_name", "target_key", "workload_key", "similarity"}`` of the source entry (written
before the commit, ``lookup_or_measure(annotate=...)``; cache hits are stored records and keep
their meta).  ``TuneResult.origins`` counts the evaluations per origin and
``TuneResult.origin_split`` splits each into cache hits, new measurements and failed ones;
``Tuner(on_evaluation=...)`` sees every evaluation, in order, with its origin.

Parts: the Tuner keeps the loop, the budget, the commits and the bookkeeping (this module);
every reason to evaluate a config is a *proposal source* behind one interface
(``tunedb.transfer.search.proposals``: ``start``, ``before_round``, ``propose``), one module
each - ``lookups`` (exact, resume), ``seeds`` (the transferred seeds), ``guard``,
``surrogate`` (RGPE), ``model`` (the cost model's ranked neighbours), ``first`` (the default
and the first seeds), ``random_fill``.  Each source names the sources it runs after; the
registry derives their order (``proposals.order()``) and refuses an unknown name or a cycle.
Sources hand work on only through what the Tuner owns for them (``proposals.handoff``): the
seed queue (``Tuner.seeds``: the pending seeds in order, their source entries) and the model
slot (``Tuner.cost_model``: the cost model and its report).  A new source is one module and one
``register`` (or ``Tuner(sources=[...])``, called in the order given); the loop does not
change.  ``TuneOptions`` are set flat and read flat or by group (``OPTION_GROUPS``).
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from tunedb.index.model.estimate import MIN_CONFIRMED, estimate, record_value
from tunedb.index.model.estimate import rank as rank_configs
from tunedb.index.model.keys import canonical_json
from tunedb.transfer.measure.backend import MeasureBackend, lookup_or_measure
from tunedb.transfer.search.adapt import AdaptReport
from tunedb.transfer.search.curve import evaluations_to_reach
from tunedb.transfer.search.proposals import ModelSlot, ProposalSource, Round, SeedQueue
from tunedb.transfer.search.proposals import sources as all_sources
from tunedb.transfer.search.proposals.neighbours import Neighbourhood
from tunedb.transfer.space import Space

if TYPE_CHECKING:
    from tunedb.index.contract.base import RecordStore
    from tunedb.index.model.record import Record


#: why a candidate was evaluated (module docstring): the keys of ``TuneResult.origins``
ORIGINS = ("exact", "resume", "default", "seed", "model", "random", "runoff", "confirm")


#: the option groups of ``TuneOptions`` (group -> its fields), each field in exactly one
OPTION_GROUPS: dict[str, tuple[str, ...]] = {
    "loop": ("budget", "wall_s", "patience", "batch", "epsilon", "seed", "cold", "use_exact"),
    "seeds": ("k_neighbors", "top_per_neighbor", "min_similarity", "n_seeds", "start_default", "seed_order",
              "similarity_power"),
    "cost_model": ("use_model", "retrain_every", "refit_fraction", "model_cache"),
    "transfer": ("surrogate", "surrogate_after", "acquisition", "surrogate_pool", "seed_slots", "consensus_seeds",
                 "min_source_weight"),
    "history_guard": ("guard", "guard_after", "guard_min_share", "guard_max_share"),
    "confirmation": ("confirm_top", "confirm_rounds"),
}


class GroupView:
    """A ``TuneOptions`` attribute that reads one of its option groups: ``opts.seeds`` is
    ``OptionGroup(opts, "seeds")`` (the attribute's name is the group's).  Not a dataclass field."""

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self.group = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.group = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else OptionGroup(obj, self.group)


class OptionGroup(Mapping[str, Any]):
    """A read-only view of one group of a ``TuneOptions``' fields (``OPTION_GROUPS``): the same
    values, by attribute (``opts.seeds.n_seeds``) or key (``dict(opts.seeds)``); it reads the
    options it came from, so it never disagrees with them.  Raises AttributeError on a write
    (change options with ``dataclasses.replace``) and for a name outside the group."""

    __slots__ = ("_opts", "_fields", "group")

    def __init__(self, opts: TuneOptions, group: str) -> None:
        object.__setattr__(self, "_opts", opts)
        object.__setattr__(self, "_fields", OPTION_GROUPS[group])
        object.__setattr__(self, "group", group)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # (a copy or an unpickled view before its slots are set)
            raise AttributeError(name)
        if name in self._fields:
            return getattr(self._opts, name)
        raise AttributeError(f"option group {self.group!r} has no option {name!r} (it has {', '.join(self._fields)})")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"option groups are read-only: dataclasses.replace(options, {name}=...)")

    def __reduce__(self) -> tuple:
        return OptionGroup, (self._opts, self.group)

    def __getitem__(self, name: str) -> Any:
        if name not in self._fields:
            raise KeyError(name)
        return getattr(self._opts, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __repr__(self) -> str:
        return f"{self.group}({', '.join(f'{k}={getattr(self._opts, k)!r}' for k in self._fields)})"


#: evaluations from which a run is long: its seed lists are deeper (``TuneOptions.seeds_per_source``)
LONG_RUN = 100


@dataclass
class TuneOptions:
    """The options of one run.  Set them flat, by keyword (``TuneOptions(budget=20, seed=3,
    guard=False)``, ``dataclasses.replace(opts, budget=40)``); read them flat or by group, as a
    read-only view (``opts.seeds.top_per_neighbor``; ``OPTION_GROUPS`` lists the fields):

    ``loop`` (the search loop)
        ``budget`` (evaluations in this run: new measurements + cache hits), ``wall_s``
        (seconds; None: no limit), ``patience`` (rounds without improvement; None: spend the
        budget), ``batch`` (candidates per round), ``epsilon`` (random share of a round),
        ``seed`` (random generator), ``cold`` (no retrieval, no prior model), ``use_exact``
        (the exact entry's bests first).
    ``seeds`` (retrieval and seeds)
        ``k_neighbors`` (nearest entries consulted), ``top_per_neighbor`` (best configs taken
        from each; None: by the budget, :meth:`seeds_per_source`), ``min_similarity``, ``n_seeds`` (seeds evaluated before the search),
        ``start_default`` (start from the family default without seeds; None: warm yes, cold
        no), ``seed_order`` ("similarity" or "rank"), ``similarity_power`` (a source's seed
        weight is similarity ** power).
    ``cost_model``
        ``use_model``, ``retrain_every`` (new evaluations between correction fits),
        ``refit_fraction`` (changed share of the family's records that refits the base model),
        ``model_cache`` (reuse the base model from the store's cache_dir()).
    ``transfer`` (the RGPE transfer surrogate)
        ``surrogate`` ("rgpe", "model"; None: rgpe when warm with >= 2 sources),
        ``surrogate_after`` (own ok evaluations before it ranks), ``acquisition`` ("ei",
        "mean"), ``surrogate_pool`` ("local", "space"), ``seed_slots`` (places per round for
        the believed sources' seeds; None: by the budget, :meth:`seed_places`), ``consensus_seeds``, ``min_source_weight``.
    ``history_guard``
        ``guard`` (on/off; warm runs), ``guard_after`` (own ok evaluations before it judges),
        ``guard_min_share`` / ``guard_max_share`` (the explorer's share of a round).
    ``confirmation``
        ``confirm_top`` (leaders re-measured after the budget; 0/1: off), ``confirm_rounds``.

    The fields themselves are flat, so keyword arguments, ``dataclasses.replace``, equality and
    ``dataclasses.asdict`` see one set of fields; the groups are views of it, not copies."""

    GROUPS: ClassVar[dict[str, tuple[str, ...]]] = OPTION_GROUPS

    budget: int = 20              # evaluations (new measurements + cache hits) in this run
    wall_s: float | None = None   # stop after this many seconds
    patience: int | None = None   # stop after this many rounds without improvement (None: spend the whole budget)
    batch: int = 4                # candidates per local-search round
    epsilon: float = 0.15         # share of each batch drawn at random
    k_neighbors: int = 8          # nearest entries consulted for seeds
    top_per_neighbor: int | None = None  # best configs taken from each neighbour (None: by the budget, seeds_per_source())
    n_seeds: int = 6              # seeds evaluated before the local search starts
    min_similarity: float | None = None
    seed: int = 0
    cold: bool = False
    use_exact: bool = False
    start_default: bool | None = None  # start from the family default when no seeds (None: warm yes, cold no)
    use_model: bool = True
    retrain_every: int = 8        # refit the model's correction after this many new evaluations of this entry (or 10 % more, if more)
    refit_fraction: float = 0.2   # refit the base model when this fraction of the records it saw changed
    model_cache: bool = True      # reuse the family's base model from the store's cache_dir() (False: fit each run)
    confirm_top: int = 0          # re-measure this many leaders at the end (0/1: off), see Tuner.confirm
    confirm_rounds: int = 2       # interleaved re-measurement rounds of the leaders
    surrogate: str | None = None  # "rgpe" (transfer ensemble), "model" (cost model only); None: rgpe when warm with >= 2 sources
    surrogate_after: int = 3      # own ok evaluations before the surrogate ranks candidates
    seed_order: str = "similarity"  # "similarity": per-source quota by hardware similarity; "rank": global rank sum
    similarity_power: float = 8.0   # seed weight of a source = similarity ** power (normalised)
    min_source_weight: float = 0.02  # a source the surrogate weighs below this gives no more seeds
    seed_slots: int | None = None  # (rgpe) places per round for the remaining seeds of the sources it believes (None: by the budget, seed_places())
    consensus_seeds: int = 0      # (rgpe) this many seeds first that the sources agree on most (similarity-weighted)
    acquisition: str = "ei"       # (rgpe) "ei": expected improvement under the ensemble-prior GP posterior; "mean": the ensemble's prediction
    surrogate_pool: str = "local"  # (rgpe) candidates: "local" (neighbours of the best, seeds, random draws) or "space" (all untried configs of a finite space)
    guard: bool = True            # (warm) the guard against misleading history (proposals/guard.py): a history-free explorer gets a share of each round
    guard_after: int = 8          # (guard) own ok evaluations before the guard judges the history
    guard_min_share: float = 0.1  # (guard) the explorer's least share of a round once a signal doubts the history
    guard_max_share: float = 0.75  # (guard) its share when the history misleads

    loop = GroupView("The search loop's options (class docstring), read-only.")
    seeds = GroupView("Retrieval and seed options (class docstring), read-only.")
    cost_model = GroupView("The cost model's options (class docstring), read-only.")
    transfer = GroupView("The RGPE transfer surrogate's options (class docstring), read-only.")
    history_guard = GroupView("The guard's options (class docstring), read-only.")
    confirmation = GroupView("The confirmation's options (class docstring), read-only.")

    def seeds_per_source(self) -> int:
        """The best configs taken from each source entry: ``top_per_neighbor`` when set, else
        8, or 32 in a long run (``budget`` >= :data:`LONG_RUN` evaluations).  A long run (Kernel
        Tuner's time-limited runs, whose budget is the searchspace) reaches configs that sit
        low in the other devices' lists; a short one spends its places better on the model's
        picks (``docs/transfer.md``, "One engine")."""
        if self.top_per_neighbor is not None:
            return self.top_per_neighbor
        return 32 if self.budget >= LONG_RUN else 8

    def seed_places(self) -> int:
        """Places per round for the remaining seeds of the sources the surrogate believes:
        ``seed_slots`` when set, else 1, or 2 in a long run (:meth:`seeds_per_source`)."""
        if self.seed_slots is not None:
            return self.seed_slots
        return 2 if self.budget >= LONG_RUN else 1

    def groups(self) -> dict[str, dict[str, Any]]:
        """Every group's options as plain dicts (group -> field -> value)."""
        return {g: dict(OptionGroup(self, g)) for g in OPTION_GROUPS}


@dataclass
class TuneResult:
    target: dict
    workload: dict
    best_config: dict | None
    best_cost: float | None
    measurements: int
    cache_hits: int
    seeds: list
    history: list
    evaluations: int = 0
    interrupted: bool = False
    stopped_by: str = ""
    adapt: dict = field(default_factory=dict)
    model: dict = field(default_factory=dict)
    #: seconds of tunedb's own work per step (see ``Tuner.OVERHEAD_STEPS``); ``total`` is the run's wall time
    overhead: dict = field(default_factory=dict)
    #: re-measurements of the leaders (Tuner.confirm): not evaluations, not in the budget
    remeasurements: int = 0
    #: config key -> {"config", "costs" (seconds, first measurement then the repeats), "median"}
    confirmed: dict = field(default_factory=dict)
    #: seconds the records answering this run's cache hits took when they were measured
    saved_s: float = 0.0
    #: the transfer surrogate (rgpe): ``sources`` (target names), ``weights`` (last fit, the
    #: target model last) and ``trace`` ([own evaluations, weights...] per fit); {} when unused;
    #: ``guard``: the guard against misleading history (``proposals.guard``: rho, share, fired, trace)
    surrogate: dict = field(default_factory=dict)
    #: evaluations per origin (``ORIGINS``; only origins that occurred): the values other than
    #: ``runoff`` and ``confirm`` sum to ``evaluations``; those two (when present) sum to
    #: ``remeasurements``
    origins: dict = field(default_factory=dict)
    #: origin -> {"cache_hits", "measured", "failed"}: of that origin's evaluations, those the DB
    #: answered (preloaded records included), those measured (new records, failed ones included;
    #: cache_hits + measured = origins[origin]) and, of the measured, those not ``ok``
    origin_split: dict = field(default_factory=dict)
    #: the estimate of ``best_config``'s cost (``tunedb.index.model.estimate.CostEstimate.to_dict()``:
    #: value, lo, hi in seconds, records, samples, coverage, basis, noisy); ``best_cost`` is its value
    best_estimate: dict | None = None
    #: True when ``best_cost`` rests on the search's own samples (no confirmation
    #: re-measurements of the winner): the best of n noisy samples is biased low
    selection_biased: bool = False

    def to_json(self) -> dict:
        return {
            "target": self.target.get("name", ""), "target_json": self.target, "workload": self.workload,
            "best": None if self.best_config is None else {"config": self.best_config, "cost": self.best_cost,
                                                           "estimate": self.best_estimate,
                                                           "selection_biased": self.selection_biased},
            "measurements": self.measurements, "cache_hits": self.cache_hits, "evaluations": self.evaluations,
            "seeds": self.seeds, "history": self.history, "interrupted": self.interrupted,
            "stopped_by": self.stopped_by, "adapt": self.adapt, "model": self.model,
            "overhead": self.overhead, "remeasurements": self.remeasurements, "confirmed": self.confirmed,
            "saved_s": self.saved_s, "surrogate": self.surrogate,
            "origins": self.origins, "origin_split": self.origin_split,
        }

    def evaluations_to_reach(self, cost: float) -> int | None:
        """First evaluation index whose best-so-far is <= ``cost`` (None if never;
        ``curve.evaluations_to_reach`` of ``history``)."""
        return evaluations_to_reach(self.history, cost)


def _sig(cfg: Mapping[str, Any]) -> str:
    return canonical_json(dict(cfg))


@dataclass
class Pending:
    """One evaluation the DB could not answer, waiting for its measurement: ``config`` (as
    proposed), ``origin`` (``ORIGINS``), ``key`` (its config key); ``handed``: given out by an
    ask/tell client's ``suggest``; ``observed``: its record is committed and counted."""

    config: dict
    origin: str
    key: str
    handed: bool = False
    observed: bool = False


def _sig_short(cfg: Mapping[str, Any]) -> str:
    """The config's ``config_key`` (32 hex digits), as records name it."""
    from tunedb.index.model.keys import key_of

    return key_of(dict(cfg))


class Tuner:
    """One tuning run of (target, workload) over ``space`` with ``backend``, on ``db`` (any
    ``RecordStore``; None: nothing is looked up or stored, and there are no warm seeds).

    ``on_evaluation(config, record, cached, origin)`` (optional) is called once per evaluation,
    in evaluation order, right after it is counted (and after ``progress``): ``config`` is the
    config as evaluated (as asked for a cache hit, the record's own for a new measurement),
    ``record`` the stored or new Record (new ones carry ``meta["origin"]``), ``cached`` whether
    the DB answered it (preloaded records: True) and ``origin`` one of ``ORIGINS`` other than
    ``confirm`` (re-measurements are not evaluations).  ``model``: a cost model to start with
    (the model slot's first content; the cost-model source replaces it when it fits one).
    ``sources``: the proposal sources, called in the order given (default: every registered
    source, in the registry's order)."""

    #: the keys of ``TuneResult.overhead`` (seconds): ``resume`` (reading this entry's records),
    #: ``retrieval`` (nearest entries), ``adapt`` (mapping their configs into the space),
    #: ``model_base`` (getting the base model: cache check, load or fit), ``model_update`` (the
    #: correction fits), ``predict``, ``candidates`` (neighbours and random draws),
    #: ``lookup``/``commit`` (the store), ``measure`` (the backend), ``other`` (the rest of
    #: ``total``, the run's wall time: bookkeeping, progress callbacks)
    OVERHEAD_STEPS = ("resume", "retrieval", "adapt", "model_base", "model_update", "predict", "candidates",
                      "lookup", "commit", "measure", "other", "total")

    def __init__(self, db: RecordStore | None, target: Mapping[str, Any], workload: Mapping[str, Any], space: Space,
                 backend: MeasureBackend, options: TuneOptions | None = None, *,
                 defaults: Mapping[str, Any] | None = None,
                 progress: Callable[[dict], None] | None = None, model: Any = None,
                 hardware_knobs: Mapping[str, str] | None = None,
                 on_evaluation: Callable[[dict, Record, bool, str], None] | None = None,
                 sources: list[ProposalSource] | None = None):
        self.db = db
        self.target = dict(target)
        self.workload = dict(workload)
        self.space = space
        self.backend = backend
        self.opt = options or TuneOptions()
        self.defaults = dict(defaults or {})
        self.hardware_knobs = dict(hardware_knobs or {})
        self.progress = progress
        self.on_evaluation = on_evaluation
        self.rng = random.Random(self.opt.seed)
        self.evaluated: dict[str, float] = {}   # signature -> its first record's value (median of repeats; inf when failed)
        self.run_records: dict[str, list] = {}  # signature -> this run's ok records of it (evaluations and confirmations)
        self.configs: dict[str, dict] = {}
        self.tried: set[str] = set()
        self.measurements = 0
        self.cache_hits = 0
        self.history: list[list] = []
        self.best: tuple[float, dict] | None = None
        self.adapt_report = AdaptReport()
        self._t0 = time.monotonic()
        self.timers: dict[str, float] = {}
        self.remeasurements = 0
        self.saved_s = 0.0      # seconds the cache hits' records took to measure (what the DB saved)
        self.confirmed: dict[str, dict] = {}
        self.stopped_by = "budget"
        self._stale_rounds = 0
        self.origin_counts: dict[str, dict[str, int]] = {}  # origin -> {"cache_hits", "measured", "failed"}
        # what the proposal sources hand on to each other (``proposals.handoff``), owned here
        self.seeds = SeedQueue()               # the seeds: pending order, source entries, report
        self.cost_model = ModelSlot(model)     # the cost model and its report (TuneResult.model)
        self.surrogate_info: dict = {}         # TuneResult.surrogate
        self._neighbourhood = Neighbourhood(space)
        self.sources: list[ProposalSource] = all_sources() if sources is None else list(sources)
        self.pending: list[Pending] = []       # the batch waiting for measurements (``_evaluation``)
        self._inside_s = 0.0                   # seconds of commits and bookkeeping inside observations

    # ------------------------------------------------- what the sources read
    @property
    def seeds_info(self) -> list[dict]:
        """The seeds' sources as ``TuneResult.seeds`` reports them (``SeedQueue.report``)."""
        return self.seeds.report

    def add_time(self, step: str, t0: float) -> None:
        """Add the seconds since ``t0`` (a ``time.perf_counter()``) to ``step`` (``OVERHEAD_STEPS``)."""
        self.timers[step] = self.timers.get(step, 0.0) + time.perf_counter() - t0

    def remaining(self) -> int:
        """Evaluations left in the budget."""
        return self.opt.budget - len(self.evaluated)

    def neighbours(self, cfg: dict) -> list[dict]:
        """The space's configs one knob away from ``cfg`` (``proposals.neighbours.Neighbourhood``)."""
        return self._neighbourhood(cfg)

    def predict(self, cands: list[dict]) -> np.ndarray | None:
        """The cost model's predicted costs of ``cands`` (None without a model, for no
        candidates, or when the model fails); timed as ``predict``."""
        model = self.cost_model.model
        if model is None or not cands:
            return None
        t0 = time.perf_counter()
        try:
            return model.predict(cands, [self.workload] * len(cands), [self.target] * len(cands))
        except Exception:  # a model failure must never stop tuning
            return None
        finally:
            self.add_time("predict", t0)

    # --------------------------------------------------------------- evaluate
    def _out_of_time(self) -> bool:
        return self.opt.wall_s is not None and time.monotonic() - self._t0 > self.opt.wall_s

    def evaluate(self, configs: list[dict], origin: str | list[str] = "random") -> None:
        """Evaluate the first configs not evaluated yet, as many as the budget allows:
        DB first, the backend for the rest, each committed as soon as measured (the
        evaluation state machine, :meth:`_evaluation`, driven by :meth:`_drive`).  ``origin``:
        why they are evaluated (one of ``ORIGINS``), one for all or one per config; a new
        record carries it in ``meta["origin"]`` (and a seed its source entry in
        ``meta["seeded_from"]``)."""
        tags = [origin] * len(configs) if isinstance(origin, str) else list(origin)
        if len(tags) != len(configs):
            raise ValueError(f"evaluate: {len(tags)} origins for {len(configs)} configs")
        self._drive(self._evaluation(list(zip(configs, tags))))

    # ------------------------------------------- the evaluation state machine
    def _evaluation(self, tagged: list[tuple[dict, str]]) -> Iterator[list[Pending]]:
        """The state machine of one evaluation of ``tagged`` (config, origin) pairs: the leading
        ones not evaluated yet that the budget covers (:meth:`_unevaluated`) are looked up in
        the DB and its answers recorded at once, in order (cache hits); the misses become
        ``pending`` and are yielded once, as one batch to measure; the generator resumes when
        every one of them was observed (:meth:`_observe`, each committed and recorded as it
        comes).  The order of ``_record`` calls is ``lookup_or_measure``'s: the hits first, then
        each new record as it is observed."""
        todo = self._unevaluated(tagged)
        if not todo:
            return
        misses = self._db_answers(todo)
        if misses:
            self.pending = misses
            yield misses
            self.pending = []

    def _db_answers(self, todo: list[tuple[dict, str]]) -> list[Pending]:
        """Record the DB's answers among ``todo`` (cache hits, in order; timed as ``lookup``) and
        return the rest as pending evaluations (each config once, in order)."""
        t0 = time.perf_counter()
        found = [None] * len(todo) if self.db is None else self.db.lookup_many(self.target, self.workload,
                                                                               [c for c, _ in todo])
        self.add_time("lookup", t0)
        misses: list[Pending] = []
        keys: set[str] = set()
        for (cfg, origin), hit in zip(todo, found):
            if hit is not None:
                self._evaluated(cfg, hit, True, origin)
                continue
            p = Pending(dict(cfg), origin, _sig_short(cfg))
            if p.key not in keys:
                keys.add(p.key)
                misses.append(p)
        return misses

    def _pending_for(self, rec: Record) -> Pending:
        """The pending evaluation a backend's new record answers: by config key (a backend may
        hand records over in completion order), else the first one not yet observed.
        ValueError when nothing is pending."""
        left = [p for p in self.pending if not p.observed]
        if not left:
            raise ValueError("no evaluation is pending: nothing to observe")
        return next((p for p in left if p.key == rec.config_key), left[0])

    def _observe(self, p: Pending, rec: Record) -> Record:
        """One new record of pending ``p``: annotated (``meta["origin"]``, a seed's
        ``seeded_from``), committed at once (timed as ``commit``) and counted; returns the
        committed record."""
        t1 = time.perf_counter()
        extra = self._annotation(p.config, p.origin)
        rec = dataclasses.replace(rec, meta={**rec.meta, **extra})
        if self.db is not None:
            self.db.commit(rec)
        t2 = time.perf_counter()
        self.timers["commit"] = self.timers.get("commit", 0.0) + t2 - t1
        p.observed = True
        self._evaluated(p.config, rec, False, p.origin)
        self._inside_s += time.perf_counter() - t1
        return rec

    def _take(self, rec: Record) -> None:
        """Observe a backend's new record (``measure_many``'s ``on_record``)."""
        self._observe(self._pending_for(rec), rec)

    def _measure(self, configs: list[dict]) -> None:
        """Measure ``configs`` (the pending batch) with the backend in one call (the local
        backend builds them in parallel), each new record observed as it is made; the backend's
        own seconds count as ``measure``."""
        inside, t0 = self._inside_s, time.perf_counter()
        self.backend.measure_many(self.target, self.workload, configs, on_record=self._take)
        self.timers["measure"] = (self.timers.get("measure", 0.0) + time.perf_counter() - t0
                                  - (self._inside_s - inside))

    def _drive(self, plan: Iterator[list[Pending]]) -> Any:
        """Run ``plan`` (a state-machine generator) to its end with this Tuner's backend: each
        batch it yields is measured before it resumes.  Returns the generator's return value."""
        while True:
            try:
                batch = next(plan)
            except StopIteration as stop:
                return stop.value
            self._measure([p.config for p in batch])

    def _annotation(self, cfg: Mapping[str, Any], origin: str) -> dict:
        """The meta a new record of ``cfg`` evaluated for ``origin`` gets: ``origin`` and, for a
        seed, ``seeded_from`` (its source entry: target_name, target_key, workload_key, similarity)."""
        out: dict[str, Any] = {"origin": origin}
        if origin == "seed":
            src = self.seeds.source_of(cfg)
            if src is not None:
                out["seeded_from"] = src
        return out

    def _unevaluated(self, tagged: list[tuple[dict, str]]) -> list[tuple[dict, str]]:
        """The leading distinct (config, origin) pairs whose config is not evaluated yet that the
        remaining budget covers (marked tried; a config's first origin wins)."""
        todo: list[tuple[dict, str]] = []
        sigs: set[str] = set()
        for c, tag in tagged:
            if self.remaining() - len(todo) <= 0:
                break
            s = _sig(c)
            if s in self.evaluated or s in sigs:
                continue
            self.tried.add(s)
            todo.append((c, tag))
            sigs.add(s)
        return todo

    def _evaluated(self, cfg: dict, rec: Record, cached: bool, origin: str = "random") -> None:
        """Count one result of ``evaluate``: a hit under the config as asked, a new record under its own."""
        if cached:
            self.cache_hits += 1
            # the measuring time the DB saved: what this record cost when it was measured
            self.saved_s += float(rec.wall_s or 0.0) if rec.wall_s == rec.wall_s else 0.0
            self._record(cfg, rec, cached=True, origin=origin)
        else:
            self.measurements += 1
            self._record(rec.config, rec, cached=False, origin=origin)

    def preload(self, records: Any) -> None:
        """Count already known records of this (target, workload) as evaluations (no measuring,
        no cache-hit count; origin ``resume``, a cache hit in ``origin_split``); they take part in
        the budget and in the best-so-far."""
        for r in records:
            self._record(r.config, r, cached=True, origin="resume")

    def _count_origin(self, origin: str, rec: Any, cached: bool) -> None:
        """Add one result of ``origin`` to ``origin_counts`` (a hit, or a measurement that may have failed)."""
        c = self.origin_counts.setdefault(origin, {"cache_hits": 0, "measured": 0, "failed": 0})
        if cached:
            c["cache_hits"] += 1
        else:
            c["measured"] += 1
            if rec.status != "ok":
                c["failed"] += 1

    def _record(self, cfg: Mapping[str, Any], rec: Any, cached: bool, origin: str = "resume") -> None:
        s = _sig(cfg)
        if s in self.evaluated:
            return
        value = record_value(rec)
        cost = math.inf if value is None else value
        self.evaluated[s] = cost
        if value is not None:
            self.run_records.setdefault(s, []).append(rec)
        self.configs[s] = dict(cfg)
        self._count_origin(origin, rec, cached)
        if cost < math.inf and (self.best is None or cost < self.best[0]):
            self.best = (cost, dict(cfg))
        self.history.append([len(self.evaluated), None if self.best is None else self.best[0]])
        if self.progress:
            self.progress({"evaluations": len(self.evaluated), "budget": self.opt.budget,
                           "measurements": self.measurements, "cache_hits": self.cache_hits,
                           "best": None if self.best is None else self.best[0], "status": rec.status,
                           "cached": cached, "origin": origin})
        if self.on_evaluation is not None:
            self.on_evaluation(dict(cfg), rec, cached, origin)

    # ------------------------------------------------------------------- run
    def run(self) -> TuneResult:
        """Tune until the budget, the wall time or the patience (when set) runs out (or Ctrl-C), then
        re-measure the leaders when ``confirm_top`` asks for it.  The loop drives the same state
        machine as the ask/tell core (:meth:`plan`; ``tunedb.transfer.search.asktell.AskTell`` hands
        its batches to the user's loop instead): each batch is measured by the backend in one call
        and every new record observed as it is made."""
        t_run = time.perf_counter()
        try:
            self._drive(self.plan())
            self.confirm()
        except KeyboardInterrupt:
            self.stopped_by = "interrupted"
        return self._result(self.stopped_by, self.stopped_by == "interrupted", time.perf_counter() - t_run)

    def plan(self) -> Iterator[list[Pending]]:
        """The whole run as a state machine: :meth:`start`'s evaluations, then round after round
        (:meth:`step`) until the run is over; yields each batch of pending evaluations and
        resumes once every one of them was observed."""
        yield from self._start_plan()
        while (yield from self._step_plan()):
            pass

    def start(self) -> None:
        """The run's first evaluations: every proposal source's ``start``, in order (the exact
        entry's bests, what this entry already holds, the seeds and the models behind them,
        the default and the first seeds); each source's configs are evaluated before the next
        source starts.  A task scheduler calls ``start`` and then ``step`` round by round."""
        self._drive(self._start_plan())

    def _start_plan(self) -> Iterator[list[Pending]]:
        """:meth:`start` as a state machine (:meth:`_evaluation`)."""
        self._t_start = time.perf_counter()
        self.stopped_by = "budget"
        for src in self.sources:
            tagged = src.start(self)
            if tagged:
                yield from self._evaluation(list(tagged))
        self._stale_rounds = 0

    def step(self, max_evaluations: int | None = None) -> bool:
        """One local-search round (at most ``max_evaluations`` evaluations, default the batch);
        False when the run is over (``stopped_by`` says why: budget, wall_time, patience, exhausted)."""
        return bool(self._drive(self._step_plan(max_evaluations)))

    def _step_plan(self, max_evaluations: int | None = None) -> Generator[list[Pending], None, bool]:
        """:meth:`step` as a state machine (:meth:`_evaluation`); returns what ``step`` returns."""
        if self.remaining() <= 0:
            self.stopped_by = "budget"
            return False
        if self._out_of_time():
            self.stopped_by = "wall_time"
            return False
        if self.opt.patience is not None and self._stale_rounds >= self.opt.patience:
            self.stopped_by = "patience"
            return False
        before = self.best[0] if self.best else math.inf
        for src in self.sources:
            src.before_round(self)
        batch, tags = self._propose(max_evaluations)
        if not batch:
            self.stopped_by = "exhausted"
            return False
        self.seeds.drop(self.tried)
        yield from self._evaluation(list(zip(batch, tags)))
        after = self.best[0] if self.best else math.inf
        self._stale_rounds = self._stale_rounds + 1 if after >= before else 0
        return self.remaining() > 0

    def _propose(self, cap: int | None = None) -> tuple[list[dict], list[str]]:
        """The next round: a ``Round`` of ``batch`` places (``cap`` when given, never past the
        budget) filled by every source's ``propose``, in order; its configs and their origins.
        Its time, less the model's predictions, counts as ``candidates``."""
        t0 = time.perf_counter()
        pred_before = self.timers.get("predict", 0.0)
        try:
            rnd = Round(min(self.opt.batch if cap is None else max(cap, 1), self.remaining()))
            for src in self.sources:
                src.propose(self, rnd)
            return rnd.configs, rnd.origins
        finally:
            self.timers["candidates"] = (self.timers.get("candidates", 0.0) + time.perf_counter() - t0
                                         - (self.timers.get("predict", 0.0) - pred_before))

    # ---------------------------------------------------------------- confirm
    def confirm(self) -> None:
        """Noise guard and winner's-curse correction, in two stages.

        1. *Runoff*: the ``confirm_top`` leaders (the incumbent and its closest rivals, by their
           estimates over this run's records) are re-measured ``confirm_rounds`` times,
           interleaved (A, B, C, A, B, C, ...), so a slow minute of a shared machine hits every
           candidate alike (records with ``meta["origin"] = "runoff"``).  The winner is the
           leader with the lowest estimate over all its records.
        2. *Confirmation*: the winner alone is re-measured ``confirm_rounds`` more times
           (``meta["origin"] = "confirm"``).  With two or more of them its cost is estimated
           from them alone (``tunedb.index.model.estimate``): they were measured after the choice, so
           the reported cost is not biased low by it (the best of n noisy samples is).

        Every repeat is committed.  Repeats are not evaluations (they do not count against the
        budget); ``remeasurements`` counts both stages.  Nothing to do without a backend that
        measures (a replay answers the same cost again) or when ``confirm_top`` < 2; a leader
        already confirmed (by an earlier run) wins without a runoff, so a rerun measures nothing."""
        top, rounds = self.opt.confirm_top, self.opt.confirm_rounds
        if top < 2 or rounds < 1 or self.best is None or getattr(self.backend, "name", "") == "replay":
            return
        leaders = self._leaders(top)
        if len(leaders) < 2:
            return
        ests = {s: self._estimate(s) for s in leaders}
        done = [s for s in leaders if ests[s] is not None and ests[s].confirmed >= MIN_CONFIRMED]
        samples: dict[str, list[float]] = {s: [self.evaluated[s]] for s in leaders}
        if done:
            # confirmed before: the lowest confirmed estimate stands (nothing measured again)
            win = min(done, key=lambda s: (ests[s].value, s))
        else:
            for _ in range(rounds):
                for s in leaders:
                    samples[s].extend(self._remeasure(s, "runoff"))
            ests = {s: self._estimate(s) for s in leaders}
            ok = [s for s in leaders if ests[s] is not None]
            if not ok:
                return
            win = min(ok, key=lambda s: (ests[s].value, s))
            for _ in range(rounds):
                samples[win].extend(self._remeasure(win, "confirm"))
        ests = {s: self._estimate(s) for s in leaders}
        self.confirmed = {_sig_short(self.configs[s]): {"config": self.configs[s], "costs": samples.get(s, []),
                                                         "estimate": ests[s].to_dict() if ests[s] else None,
                                                         "winner": s == win}
                          for s in leaders}
        if ests[win] is not None:
            self.best = (ests[win].value, dict(self.configs[win]))

    def _remeasure(self, s: str, origin: str) -> list[float]:
        """Measure config ``s`` once more (committed, ``meta["origin"] = origin``); its value, if ok."""
        out = []
        for rec, _cached in lookup_or_measure(self.db, self.backend, self.target, self.workload, [self.configs[s]],
                                              force=True, timers=self.timers, annotate=lambda _i: {"origin": origin}):
            self.remeasurements += 1
            self._count_origin(origin, rec, cached=False)
            v = record_value(rec)
            if v is not None:
                out.append(v)
                self.run_records.setdefault(s, []).append(rec)
        return out

    def _estimate(self, s: str) -> Any:
        """The estimate of config ``s``'s cost: the DB's (every stored record of it, the one
        number every surface shows) when there is a DB, else over this run's records."""
        if self.db is not None:
            try:
                got = self.db.cost(self.target, self.workload, self.configs[s])
            except ValueError:
                got = None
            if got is not None:
                return got
        return estimate(self.run_records.get(s, ()))

    def _lowest(self) -> str | None:
        """The first of this run's configs as the store ranks them (``tunedb.index.model.estimate.rank``
        over the DB's records of this run's configs: confirmed estimates first), over this
        run's own records when there is no DB."""
        by_key = {_sig_short(self.configs[s]): s for s in self.run_records}
        recs: list = []
        if self.db is not None:
            try:
                recs = [r for r in self.db.entry_records(self.target, self.workload) if r.config_key in by_key]
            except ValueError:
                recs = []
        if not recs:
            recs = [r for rs in self.run_records.values() for r in rs]
        ranked = rank_configs(recs, 1)
        return by_key[ranked[0].config_key] if ranked else None

    def _leaders(self, n: int) -> list[str]:
        """The ``n`` configs of this run with the lowest estimates over this run's records."""
        recs = [r for rs in self.run_records.values() for r in rs]
        by_key = {_sig_short(self.configs[s]): s for s in self.run_records}
        return [by_key[c.config_key] for c in rank_configs(recs, n) if c.config_key in by_key]

    def _final_best(self) -> tuple[Any, dict] | None:
        """(estimate, config) of the run's answer: the first of its configs as the store ranks
        them (:meth:`_lowest`; the one ``tunedb best`` lists first when the run evaluated it).
        After :meth:`confirm` that is the confirmed winner (confirmed estimates rank first);
        without a confirmation it is the lowest estimate, selection-biased."""
        if self.best is None:
            return None
        s = self._lowest()
        e = self._estimate(s) if s is not None else None
        if e is None:
            return None
        return e, dict(self.configs[s])

    def _result(self, stopped_by: str, interrupted: bool, total_s: float) -> TuneResult:
        """The TuneResult of this run (``total_s``: its wall time in seconds)."""
        for src in self.sources:
            finish = getattr(src, "finish", None)
            if finish is not None:
                finish(self)
        over = {k: round(self.timers.get(k, 0.0), 6) for k in self.OVERHEAD_STEPS if k not in ("other", "total")}
        over["other"] = round(max(total_s - sum(self.timers.values()), 0.0), 6)
        over["total"] = round(total_s, 6)
        final = self._final_best()
        return TuneResult(
            target=self.target, workload=self.workload,
            best_config=None if final is None else final[1],
            best_cost=None if final is None else final[0].value,
            best_estimate=None if final is None else final[0].to_dict(),
            selection_biased=final is not None and final[0].basis != "confirmed",
            measurements=self.measurements, cache_hits=self.cache_hits, seeds=self.seeds_info,
            history=self.history, evaluations=len(self.evaluated), interrupted=interrupted, stopped_by=stopped_by,
            adapt=self.adapt_report.to_json(), model=self.cost_model.info, overhead=over,
            remeasurements=self.remeasurements, confirmed=self.confirmed, saved_s=round(self.saved_s, 6),
            surrogate=self.surrogate_info,
            origins={o: c["cache_hits"] + c["measured"] for o, c in self._ordered_origins()},
            origin_split={o: dict(c) for o, c in self._ordered_origins()})

    def _ordered_origins(self) -> list[tuple[str, dict[str, int]]]:
        """``origin_counts`` in ``ORIGINS`` order (unknown origins last)."""
        rank = {o: i for i, o in enumerate(ORIGINS)}
        return sorted(self.origin_counts.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0]))

    def result(self) -> TuneResult:
        """The result so far (a scheduler's view of a run it steps itself; ``total`` is the time
        since ``start``)."""
        return self._result(self.stopped_by, self.stopped_by == "interrupted",
                            time.perf_counter() - getattr(self, "_t_start", time.perf_counter()))
