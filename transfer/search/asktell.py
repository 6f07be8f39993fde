"""Ask/tell: your loop, tunedb's search.

A tuner that owns its loop (Triton's autotuner, an Optuna study, Helion) asks tunedb which
configs of one (target, workload) entry to measure next, measures them itself and tells tunedb
the results::

    study = AskTell(db, target, workload, configs=[{"BLOCK": 64}, {"BLOCK": 128}, ...])
    while batch := study.suggest():
        for s in batch:
            study.observe(s.config, [seconds, ...])          # or error="out of resources"
    answer = study.best()                                    # .config, .cost_s, .source

The search is the :class:`~tunedb.transfer.search.tuner.Tuner`'s, unchanged: the Tuner's
evaluation path is a state machine (``Tuner.plan``: the proposal sources' start, then round
after round) that stops at every batch the DB cannot answer and resumes once each of its
configs was observed.  So a config the DB already holds for the entry is answered from it
(a cache hit, never handed out), the nearest entries' seeds come next, then the model's
picks under the guard -- exactly what ``tunedb tune`` evaluates, in the same order, given the
same DB, seed and options (``Tuner.run`` itself is a client of this class).

Every observation is committed at once (durable): after Ctrl-C, a new ``AskTell`` on the same
DB resumes, the configs observed before being DB answers.  A failure (``observe(...,
error=...)``) is stored as a failed record, so it is never suggested again.  Costs are seconds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tunedb.index.model.keys import canonical_json, key_of
from tunedb.index.model.record import Record
from tunedb.transfer.search.adapt import AdaptReport, adapt_many
from tunedb.transfer.search.session import TuningSession
from tunedb.transfer.search.tuner import Pending, TuneOptions, Tuner, TuneResult
from tunedb.transfer.space import Constraint, Knob, Space

if TYPE_CHECKING:
    from tunedb.index.contract.base import RecordStore

__all__ = ["AskTell", "Suggestion", "Answer", "Outcome", "space_of_configs", "status_of_error"]

#: words of an ``observe(error=...)`` text -> the failure status it is stored with (first match
#: wins; anything else is a ``runtime_error``)
ERROR_WORDS = (("compil", "compile_error"), ("timeout", "timeout"), ("timed out", "timeout"),
               ("wrong", "wrong_result"), ("mismatch", "wrong_result"), ("invalid", "invalid"))


@dataclass(frozen=True)
class Suggestion:
    """A config to measure: ``config`` (dict), ``origin`` (why: ``seed``, ``model``,
    ``default``, ``random``, ...; ``tuner.ORIGINS``) and ``predicted_s`` (the cost model's
    predicted cost in seconds, None without a model)."""

    config: dict
    origin: str
    predicted_s: float | None = None


@dataclass(frozen=True)
class Answer:
    """The entry's one answer (:meth:`AskTell.best`): ``config`` and ``cost_s`` (its estimate,
    seconds; None for a default nothing measured); ``source``: ``measured`` (measured by this
    study), ``db`` (the DB's records of the entry), ``predicted`` (nothing of the entry measured:
    the nearest entry's best config adapted to the space, its cost the model's prediction when
    there is a model, else that entry's estimate) or ``default``; ``predicted`` is True for
    ``predicted`` only; ``estimate``: the ``CostEstimate.to_dict()`` behind ``cost_s`` (measured,
    db); ``from_target`` / ``similarity``: the nearest entry a prediction comes from."""

    config: dict
    cost_s: float | None
    source: str
    predicted: bool = False
    estimate: dict | None = None
    from_target: str | None = None
    similarity: float | None = None


#: another name of :class:`Answer` (what :meth:`AskTell.best` returns)
Outcome = Answer


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def space_of_configs(configs: Sequence[Mapping[str, Any]]) -> Space:
    """A finite Space listing exactly ``configs`` (JSON dicts with the same keys and scalar
    values): one knob per key (numeric values sorted, others in order of appearance; adjacent
    values are neighbours) and a constraint that a config is one of the list.  ValueError for
    an empty list, a non-dict, differing keys or a non-scalar value."""
    cfgs = [_checked_config(c, i) for i, c in enumerate(configs)]
    if not cfgs:
        raise ValueError("configs is empty: give at least one candidate config")
    names = list(cfgs[0])
    for i, c in enumerate(cfgs):
        if sorted(c) != sorted(names):
            raise ValueError(f"configs[{i}] has keys {sorted(c)}, configs[0] has {sorted(names)}: "
                             "every candidate needs the same keys")
    knobs = []
    for n in names:
        seen: dict[str, Any] = {}
        for c in cfgs:
            seen.setdefault(canonical_json(c[n]), c[n])
        vals = list(seen.values())
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            vals.sort()
        knobs.append(Knob(n, tuple(vals)))
    listed = {canonical_json(c) for c in cfgs}
    return Space(knobs=tuple(knobs), constraints=(Constraint("one of the given configs",
                                                             lambda c: canonical_json(dict(c)) in listed),),
                 finite=tuple(cfgs))


def _checked_config(c: Any, i: int) -> dict:
    """``configs[i]`` as a dict of scalars, else ValueError saying what is wrong."""
    if not isinstance(c, Mapping):
        raise ValueError(f"configs[{i}] must be a dict, got {type(c).__name__}")
    for k, v in c.items():
        if not isinstance(k, str) or not _scalar(v):
            raise ValueError(f"configs[{i}]: {k!r} must be a string key with a JSON scalar value, "
                             f"got {type(v).__name__}")
    return dict(c)


def status_of_error(error: str) -> str:
    """The failure status an ``observe(error=...)`` text is stored with (:data:`ERROR_WORDS`)."""
    low = error.lower()
    return next((status for word, status in ERROR_WORDS if word in low), "runtime_error")


class AskTell:
    """tunedb's search of one entry, driven by the caller's loop (module docstring).

    ``db``: any RecordStore (None: nothing looked up or stored); ``target``, ``workload``: JSON
    dicts; exactly one of ``space`` (a Space) or ``configs`` (a finite list of candidate
    config dicts, :func:`space_of_configs`); ``options``: ``TuneOptions`` (default
    ``TuneOptions()``, as ``tunedb tune``'s search); ``defaults``: the user's default config
    (evaluated early, as ``tunedb tune`` does); ``kind``: the run summary's kind
    (:meth:`save`); ``trust``: a trust policy (``tunedb.index.views.trust``: only trusted records
    answer look-ups, seeds and the model; commits go to ``db``).  ValueError (one line) for bad
    arguments; nothing is written by the constructor."""

    def __init__(self, db: RecordStore | None, target: Mapping[str, Any], workload: Mapping[str, Any], *,
                 space: Space | None = None, configs: Sequence[Mapping[str, Any]] | None = None,
                 options: TuneOptions | None = None, defaults: Mapping[str, Any] | None = None,
                 kind: str = "ask-tell", trust: str | None = None) -> None:
        if not isinstance(target, Mapping) or not isinstance(workload, Mapping):
            raise ValueError("target and workload must be dicts")
        if (space is None) == (configs is None):
            raise ValueError("give exactly one of space= (a Space) or configs= (a list of config dicts)")
        if configs is not None:
            if isinstance(configs, (str, bytes, Mapping)) or not isinstance(configs, Sequence):
                raise ValueError("configs must be a list of config dicts")
            space = space_of_configs(configs)
        elif not isinstance(space, Space):
            raise ValueError(f"space must be a tunedb.transfer.space.Space, got {type(space).__name__}")
        if options is not None and not isinstance(options, TuneOptions):
            raise ValueError(f"options must be a TuneOptions, got {type(options).__name__}")
        if defaults is not None and not isinstance(defaults, Mapping):
            raise ValueError("defaults must be a config dict")
        self.session = TuningSession(db, kind, target, trust=trust, check_machine=False)
        tuner = Tuner(self.session.db, target, workload, space, _NoBackend(), options or TuneOptions(),
                      defaults=defaults)
        self._attach(tuner, predict=True)

    @classmethod
    def over(cls, tuner: Tuner) -> AskTell:
        """The ask/tell core over an existing Tuner (``Tuner.run`` is its client): the same
        search state, no session of its own (:meth:`save` is the Tuner's caller's)."""
        self = cls.__new__(cls)
        self.session = None
        self._attach(tuner, predict=False)
        return self

    def _attach(self, tuner: Tuner, *, predict: bool) -> None:
        self.tuner = tuner
        self._plan: Iterator[list[Pending]] | None = None
        self._done = False
        self._predict = predict
        self._measured: set[str] = set()   # config keys this study observed
        self._t_created = time.perf_counter()
        self._kept: TuneResult | None = None

    # ------------------------------------------------------------------ ask
    @property
    def done(self) -> bool:
        """True once the run is over (budget spent, exhausted, wall time, patience):
        :meth:`suggest` returns [] from then on."""
        return self._done

    def suggest(self, n: int | None = None) -> list[Suggestion]:
        """The next configs to measure, in tunedb's order (module docstring): the pending ones
        not yet handed out first, then (once every handed-out config was observed) the next
        batch.  ``n``: at most that many (None: the whole pending batch).  [] when the run is
        over (:attr:`done`), and also while every config of the current batch was handed out
        but not all observed yet (the next batch depends on them).  ValueError for ``n`` < 1."""
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise ValueError(f"suggest: n must be a positive int or None, got {n!r}")
        self._advance()
        fresh = [p for p in self.tuner.pending if not p.handed and not p.observed]
        out = fresh if n is None else fresh[:n]
        for p in out:
            p.handed = True
        return self._suggestions(out)

    def _advance(self) -> None:
        """Run the search state machine to its next batch when every pending config was
        observed; sets :attr:`done` at its end."""
        if self._done or any(not p.observed for p in self.tuner.pending):
            return
        if self._plan is None:
            self._plan = self.tuner.plan()
        try:
            next(self._plan)
        except StopIteration:
            self._done = True

    def _suggestions(self, batch: list[Pending]) -> list[Suggestion]:
        pred = self.tuner.predict([p.config for p in batch]) if self._predict and batch else None
        return [Suggestion(dict(p.config), p.origin,
                           None if pred is None or not math.isfinite(float(pred[i])) else float(pred[i]))
                for i, p in enumerate(batch)]

    # ----------------------------------------------------------------- tell
    def observe(self, config: Mapping[str, Any], costs_s: Sequence[float] | None = None, *, error: str | None = None,
                statistic: str | None = None, wall_s: float | None = None) -> Record:
        """Tell the measurement of a suggested ``config``: ``costs_s`` (its repeats, seconds; the
        record's value is their median) or ``error`` (a failure, e.g. ``"out of resources"``,
        stored as a failed record with the status :func:`status_of_error` gives, never suggested
        again); ``statistic`` (what each cost is, e.g. ``"mean"`` of a benchmark's runs) goes
        into ``meta["statistic"]``; ``wall_s``: seconds the measurement took.  The record is
        committed at once and returned.  ValueError (nothing written) for a config outside the
        space, one not suggested (or already observed), no costs without an error, or a cost
        that is not a positive finite number."""
        p = self._handed(config)
        rec = self._record(p.config, costs_s, error, statistic, wall_s)
        return self._tell(p, rec)

    def observe_record(self, rec: Record) -> Record:
        """Tell a backend's record (``MeasureBackend.measure_many``'s ``on_record``): it answers
        the pending config with its config key, else the first not yet observed.  Returns the
        committed (annotated) record."""
        return self._tell(self.tuner._pending_for(rec), rec)

    def _tell(self, p: Pending, rec: Record) -> Record:
        out = self.tuner._observe(p, rec)
        self._measured.add(p.key)
        return out

    def _handed(self, config: Any) -> Pending:
        """The handed-out, unobserved pending evaluation of ``config``, else ValueError."""
        if not isinstance(config, Mapping):
            raise ValueError(f"observe: config must be a dict, got {type(config).__name__}")
        if not self.tuner.space.is_valid(dict(config)):
            raise ValueError(f"observe: config {canonical_json(dict(config))} is not in the space")
        k = key_of(dict(config))
        p = next((p for p in self.tuner.pending if p.key == k), None)
        if p is None or not p.handed:
            raise ValueError(f"observe: config {canonical_json(dict(config))} was not suggested (suggest() it first)")
        if p.observed:
            raise ValueError(f"observe: config {canonical_json(dict(config))} was observed already")
        return p

    def _record(self, config: dict, costs_s: Sequence[float] | None, error: str | None, statistic: str | None,
                wall_s: float | None) -> Record:
        """The Record of one observation (ValueError for bad costs or error)."""
        meta: dict[str, Any] = {"backend": "ask-tell"}
        if statistic is not None:
            meta["statistic"] = str(statistic)
        if wall_s is not None and not (isinstance(wall_s, (int, float)) and math.isfinite(wall_s) and wall_s >= 0):
            raise ValueError(f"observe: wall_s must be a finite number of seconds >= 0, got {wall_s!r}")
        if error is not None:
            if not isinstance(error, str) or not error.strip():
                raise ValueError("observe: error must be a non-empty string")
            return Record(self.tuner.target, self.tuner.workload, config, status=status_of_error(error),
                          error=error, wall_s=wall_s, meta=meta)
        if costs_s is None or isinstance(costs_s, (str, bytes)) or len(costs_s) == 0:
            raise ValueError("observe: give costs_s (seconds) or error=")
        costs = []
        for c in costs_s:
            if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c <= 0:
                raise ValueError(f"observe: costs must be positive finite seconds, got {c!r}")
            costs.append(float(c))
        return Record(self.tuner.target, self.tuner.workload, config, costs=costs, wall_s=wall_s, meta=meta)

    # --------------------------------------------------------------- answer
    def best(self) -> Answer | None:
        """The entry's one answer (:class:`Answer`): the Tuner's answer over this study's
        evaluations (``measured`` when this study measured it, else ``db``); without one, the
        DB's first config of the entry (``db``); with no ok record of the entry, a prediction
        from the nearest entries (``predicted``); else the default config (``default``);
        None when there is none of these."""
        final = self.tuner._final_best()
        if final is not None:
            est, cfg = final
            src = "measured" if key_of(cfg) in self._measured else "db"
            return Answer(dict(cfg), float(est.value), src, estimate=est.to_dict())
        stored = self._db_best()
        if stored is not None:
            return stored
        guess = self._predicted()
        if guess is not None:
            return guess
        if self.tuner.defaults:
            return Answer(dict(self.tuner.defaults), None, "default")
        return None

    def _db_best(self) -> Answer | None:
        db = self.tuner.db
        if db is None:
            return None
        try:
            costs = db.best_costs(self.tuner.target, self.tuner.workload, 1)
        except ValueError:
            return None
        if not costs:
            return None
        c = costs[0]
        return Answer(dict(c.config), float(c.estimate.value), "db", estimate=c.estimate.to_dict())

    def _predicted(self) -> Answer | None:
        """The most similar other entry's best config that adapts into the space, its cost the
        model's prediction (with a model) or that entry's estimate; None without one."""
        t, db, opt = self.tuner, self.tuner.db, self.tuner.opt
        if db is None:
            return None
        try:
            matches = db.nearest(t.target, t.workload, k=opt.k_neighbors + 1, same_family=True,
                                 min_similarity=opt.min_similarity, best_n=opt.seeds_per_source())
        except ValueError:
            return None
        own = (key_of(t.target), key_of(t.workload))
        for m in matches:
            if (m.target_key, m.workload_key) == own or not m.best:
                continue
            adapted = adapt_many([r.config for r in m.best], t.space, t.defaults, AdaptReport(), None,
                                 source_target=m.target, dest_target=t.target, family=t.workload.get("family"))
            if not adapted:
                continue
            cfg = adapted[0]
            pred = t.predict([cfg])
            if pred is not None and math.isfinite(float(pred[0])):
                cost = float(pred[0])
            else:
                by_key = {c.config_key: c.estimate.value for c in m.best_costs}
                cost = by_key.get(key_of(cfg), m.best_costs[0].estimate.value if m.best_costs else None)
            return Answer(dict(cfg), None if cost is None else float(cost), "predicted", predicted=True,
                          from_target=m.target_name, similarity=float(m.similarity))
        return None

    # -------------------------------------------------------------- summary
    def result(self) -> TuneResult:
        """The run's TuneResult so far (``stopped_by`` says why it ended once :attr:`done`)."""
        t = self.tuner
        return t._result(t.stopped_by, False, time.perf_counter() - self._t_created)

    def save(self) -> str | None:
        """Store the run's summary beside the records (``RecordStore.add_run``, this study's
        ``kind``), as ``TuningSession`` does; its run_id (None without a store, or for a study
        made by :meth:`over`, whose caller stores the summary)."""
        if self.session is None:
            return None
        res = self.result()
        self.session.results = [res]
        opt = self.tuner.opt
        return self.session.save(cold=opt.cold, options={"budget": opt.budget, "seed": opt.seed, "cold": opt.cold},
                                 extra={"interrupted": False, "finished": self._done})


class _NoBackend:
    """The backend of an ask/tell Tuner: the caller measures, so nothing is measured here."""

    name = "ask-tell"

    def measure_many(self, *_a: Any, **_k: Any) -> list:
        raise RuntimeError("an ask/tell study measures nothing itself: observe() each suggested config")
