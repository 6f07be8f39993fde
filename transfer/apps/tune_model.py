"""``tunedb tune-model``: tune every operator task of a model through the DB.

1. Look up: a task whose workload this target already has ok measurements of (at least
   ``hit_configs`` configs) is a *hit* — its best is reused, nothing is searched or measured for
   it (a new model on known hardware tunes only its new operators).
2. Every other task starts with one round (``first`` evaluations, default 1) of a Tuner: its
   kernel family's default config for the target first, then (*warm*) the nearest entries'
   adapted bests, ranked by the cost model, or (*cold*: no similar entry) the model's or random
   moves.
3. The rest of the budget (evaluations over the tuned tasks) is handed out round by round by
   ``tunedb.transfer.search.scheduler``: the task expected to cut the model latency most gets
   the next round, re-decided after every round as results come in.
4. The leaders of every tuned task are re-measured interleaved (``Tuner.confirm``) so a noisy
   minute does not crown a winner; each repeat is committed.
5. Every task's default config is looked up (or measured once, as a reference outside the
   budget) for the default-config latency.
6. Tuned vs default: a tuned task whose answer in the DB (``tunedb best``'s first config, after
   steps 4-5) is not its default, and that no stored decision pairs with the default yet, is
   compared with the default by interleaved re-measurement rounds
   (``tunedb.transfer.measure.compare``, question "sign", looks after ``decide_looks`` rounds,
   95 % over all looks).  The run keeps the tuned config only when the test says it is faster
   *and* its estimated cost is below the default's; else it keeps the default.  Each test is
   stored as a decision (``tunedb.index.contract.decisions``) with the config the run kept.
7. One answer (:func:`task_answer`): every task's row -- tuned or hit -- is the DB's answer
   after the run: the entry's first config replaces the default only when a stored paired
   decision says it is faster than the default; a first config no decision covers is shown
   as *undecided* (``undecided``: its config, estimate and weighted gain) and the default is
   kept.  So the same model on the same DB prints the same latency and configs whether the run
   measured or not, the model latency is never above the default-config latency, and every
   kept default says why (``chosen``: faster / slower / equivalent / inconclusive / not
   tested).  Every cost is the one estimator's (``RecordStore.cost``): the number ``tunedb
   best`` shows for the config.
8. The run's summary (``tunedb.transfer.search.runlog``) is stored in the DB.  Its tasks and
   totals carry ``origins`` / ``origin_split`` as every Tuner run's do (the same fields as
   ``tune`` / ``warm-start``; a hit or not-started task: ``{}``).  Its ``evaluations``,
   ``measurements`` and ``cache_hits`` are the sums over its tasks (the search's, what the
   evaluation hit rate is of: ``runlog.run_totals``); the default-config references of step 5
   and the rounds of step 6 are not evaluations and are counted apart
   (``reference_measurements`` / ``reference_cache_hits``; ``default_measurements`` /
   ``default_cache_hits``, the same).  ``eta`` is the seeds' task share: tasks answered by the
   DB over tasks (``tunedb.transfer.apps.rundata.task_share``; a model the DB answered whole:
   1.0), with ``t_full_s``, ``query_s`` and ``t_total_predicted_s`` = T_full (1 - eta) + T_query.

Every measurement is committed as it is made, so Ctrl-C keeps everything; a rerun finds the
tasks measured before as hits and tunes the rest (their earlier evaluations come back from the
DB as cache hits).  Model latency = sum of weight x best cost (seconds) over the model's
tasks; operators the kernel families cannot express are listed by the model
(``Model.omitted``) and are not part of it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from tunedb.index.model.units import fmt_seconds
from tunedb.transfer.search import runlog
from tunedb.transfer.search.curve import evaluations_to_reach
from tunedb.transfer.search.scheduler import TaskState, model_latency, pick

if TYPE_CHECKING:
    from tunedb.datasets.models import Model
    from tunedb.index.contract.base import RecordStore


@dataclass
class ModelOptions:
    """Options of a model tuning run.  ``budget``: search evaluations over the tuned tasks (new
    measurements and cache hits; a hit task takes none); ``cold``: no look-up of whole tasks,
    no seeds, no prior model (the comparison baseline; it too starts each task from its default
    config); ``round``: evaluations per scheduler round; ``first``: evaluations of a task's
    first round; ``confirm_top`` / ``confirm_rounds``: re-measurement of each
    task's leaders (``Tuner.confirm``; 0 = off); ``hit_configs``: a task is a hit (reused, not
    searched) when the target has ok measurements of at least this many of its configs (1: the
    scheduler may have given a task that barely matters one evaluation only, and that was its
    tuning; a run interrupted before a task's first round leaves none of it);
    ``versus_default``: test each tuned task against its default config (module docstring, step
    6; off: the tuned config is kept when its estimate is lower); ``decide_looks``: the round
    counts after which that test may stop (``compare``'s ``looks``)."""

    budget: int = 40
    cold: bool = False
    seed: int = 0
    round: int = 2
    first: int = 1
    confirm_top: int = 2
    confirm_rounds: int = 2
    reuse_hits: bool = True
    hit_configs: int = 1
    label: str = ""
    versus_default: bool = True
    decide_looks: tuple = (2, 4, 6)


def _default_cost(db: RecordStore | None, job: Any) -> tuple[Any, Any, bool]:
    """The default config's record (DB first, else measured and committed): (record, cached)."""
    from tunedb.transfer.measure.backend import measure

    rec, cached = measure(job.target, job.workload, job.defaults, db=db, backend=job.backend,
                          annotate={"origin": "default", "reference": True})
    return rec, cached


def _hit(db: RecordStore, target: dict, workload: dict, min_configs: int,
         decisions: list[dict] | None = None) -> tuple[Any, float] | None:
    """(the entry's answer as a ConfigCost, measuring seconds of the entry's records) when the
    target has ok measurements of at least ``min_configs`` configs of ``workload``, else None.
    The answer is ``tunedb best``'s first config (``tunedb.index.contract.decisions.answer``: a default an
    earlier run kept stays the answer); ``decisions``: the stored decision summaries (read once
    per run)."""
    from tunedb.index.contract.decisions import answer

    best = answer(db, target, workload, summaries=decisions).ranked
    if len(best) < max(min_configs, 1):
        return None
    saved = 0.0
    try:
        t = db.records(target, workload, include_stale=False)
        saved = float(sum(v for v in t.column("wall_s").to_pylist() if v is not None and v == v))
    except (ValueError, KeyError):
        pass
    return best[0].cost, saved


def measured_value(db: RecordStore | None, job: Any, cfg: dict) -> float | None:
    """One confirmation re-measurement of ``cfg`` (committed, ``meta.origin = "confirm"``): its
    value (median of its repeats, seconds), None when it failed."""
    from tunedb.index.model.estimate import record_value
    from tunedb.transfer.measure.backend import lookup_or_measure

    (rec, _), = lookup_or_measure(db, job.backend, job.target, job.workload, [cfg], force=True,
                                  annotate=lambda _i: {"origin": "confirm"})
    return record_value(rec)


def versus_default(db: RecordStore | None, job: Any, tuned: dict, looks: tuple = (2, 4, 6)) -> Any:
    """Is ``tuned`` faster than the job's default config?  Interleaved rounds (tuned first in
    even rounds), every measurement committed as a confirmation: a ``Comparison`` (question
    "sign": ratio = tuned / default)."""
    from tunedb.transfer.measure.compare import compare, interleaved

    return compare(interleaved(lambda: measured_value(db, job, tuned), lambda: measured_value(db, job, job.defaults)),
                   question="sign", looks=looks)


def _cost_of(db: RecordStore | None, job: Any, cfg: dict | None) -> Any:
    """The estimate of ``cfg``'s cost on the job's (target, workload), None without one."""
    return _estimate(db, job.target, job.workload, cfg)


def _estimate(db: RecordStore | None, target: Any, workload: Any, cfg: Any) -> Any:
    """``db.cost`` of ``cfg`` on (target, workload) (the one estimator), None without one."""
    if db is None or cfg is None:
        return None
    try:
        return db.cost(target, workload, dict(cfg))
    except ValueError:
        return None


@dataclass
class TaskAnswer:
    """A model task's one answer from the DB (:func:`task_answer`).

    ``config`` / ``estimate``: the config the model uses and its estimate (seconds; None without
    an ok record); ``decided``: True when a stored paired decision put ``config`` above the
    default; ``verdict``: the tested config against the default (``faster`` / ``slower`` /
    ``equivalent`` / ``inconclusive``), ``not tested`` when no decision pairs them; ``why``: the
    label of the choice (``default kept: ...`` for a kept default); ``candidate`` /
    ``candidate_estimate``: the entry's first config when no decision lets it replace the
    default (undecided), else None; ``decision``: the stored decision behind it, if any."""

    config: dict | None
    estimate: Any
    decided: bool
    verdict: str
    why: str
    candidate: dict | None = None
    candidate_estimate: Any = None
    decision: Any = None


def _against_default(d: Any, default_key: str) -> str:
    """The verdict of decision ``d``'s other config against the default (``d`` is A against B)."""
    if d.b_key == default_key or d.verdict in ("equivalent", "inconclusive"):
        return d.verdict
    return {"faster": "slower", "slower": "faster"}.get(d.verdict, d.verdict)


def _kept_default_why(verdict: str) -> str:
    """The label of a default kept after a paired test whose tested config was ``verdict``."""
    if verdict == "faster":
        return "default kept: faster by the paired test, but its estimate is not lower"
    if verdict == "slower":
        return "default kept: tuned config slower (paired test)"
    return f"default kept: {verdict} (paired test)"


def task_answer(db: RecordStore, target: Mapping[str, Any], workload: Mapping[str, Any], defaults: Mapping[str, Any],
                summaries: list[dict] | None = None) -> TaskAnswer | None:
    """The one answer of a model task on ``db`` (module docstring, step 7); None when the entry
    has no ok record.  In the entry's answer order (``tunedb.index.contract.decisions.answer``,
    what ``tunedb best`` lists), the first config that is the default or that a stored paired
    decision puts above the default; the entry's first config is the undecided ``candidate``
    when it is not that one.  Without an ok record of the default (nothing to decide against),
    the entry's first config.  ``summaries``: the stored decision summaries (default: read
    from ``db``)."""
    from tunedb.index.contract.decisions import answer

    ans = answer(db, target, workload, summaries=summaries)
    head = ans.first()
    if head is None:
        return None
    dkey = _key(defaults)
    with_default = sorted((d for d in ans.decisions if dkey in d.pair), key=lambda d: d.stored)

    def over_default(key: str) -> Any:
        return next((d for d in reversed(with_default) if key in d.pair and d.winner() == key), None)

    pick = next((r.cost for r in ans.ranked if r.cost.config_key == dkey or over_default(r.cost.config_key)), None)
    if pick is None:
        return TaskAnswer(dict(head.config), _estimate(db, target, workload, head.config) or head.estimate, False,
                          "not tested", "the default config has no ok measurement")
    cand = None if head.config_key == pick.config_key else head
    undecided = "" if cand is None else (f"undecided: a config estimated {fmt_seconds(cand.estimate.value)} has no "
                                         "paired decision against the default")
    est = _estimate(db, target, workload, pick.config) or pick.estimate
    if pick.config_key != dkey:
        d = over_default(pick.config_key)
        why = f"faster than the default ({d.by}, paired test)" + (f"; {undecided}" if undecided else "")
        ta = TaskAnswer(dict(pick.config), est, True, _against_default(d, dkey), why, decision=d)
    else:
        d = next((x for x in reversed(with_default) if x.winner() == dkey or x.verdict == "equivalent"), None)
        if d is not None:
            v = _against_default(d, dkey)
            why = _kept_default_why(v) + (f"; {undecided}" if undecided else "")
        else:
            v = "not tested"
            why = ("default kept: not tested (" + (undecided or ("no other config is measured" if len(ans.ranked) == 1
                                                                 else "the DB's best is the default config")) + ")")
        ta = TaskAnswer(dict(defaults), est, False, v, why, decision=d)
    if cand is not None:
        ta.candidate, ta.candidate_estimate = dict(cand.config), cand.estimate
    return ta


def tune_model(db: RecordStore, model: Model, target: Mapping[str, Any], *, options: ModelOptions | None = None,
               progress: Callable[[dict], None] | None = None, backend: Any = None) -> dict:
    """Tune ``model`` (``tunedb.datasets.models.Model``) on ``target`` (a local preset) with
    ``db``; returns the run's JSON-able result (also stored as its run summary; module docstring).

    Raises ValueError (one line) for a target that is not a local preset, a task workload no
    kernel family accepts, or a budget smaller than the number of tasks to tune."""
    run = ModelRun(db, model, target, options or ModelOptions(), progress, backend)
    interrupted = False
    try:
        todo = run.look_up()
        run.start_tasks(todo)
        run.schedule()
        run.confirm(todo)
        run.measure_defaults()
        run.versus_defaults(todo)
    except KeyboardInterrupt:
        interrupted = True
    summary = run.summary(interrupted)
    if interrupted:
        raise ModelInterrupted(summary)
    return summary


class ModelRun:
    """The state of one ``tune_model`` run and its steps (module docstring, steps 1-8), in the
    order ``tune_model`` calls them.  Each task is a ``Tuner`` the scheduler steps round by round."""

    def __init__(self, db: RecordStore, model: Model, target: Mapping[str, Any], opt: ModelOptions,
                 progress: Callable[[dict], None] | None, backend: Any) -> None:
        from tunedb.transfer.measure.jobs import local_job
        from tunedb.transfer.search.session import TuningSession

        self.db, self.model, self.opt, self.progress = db, model, opt, progress
        self.jobs = [local_job(target, t.workload, backend) for t in model.tasks]  # validates every task first
        self.target = self.jobs[0].target if self.jobs else dict(target)
        self.session = TuningSession(db, "tune-model", self.target,
                                     check_machine=getattr(backend, "name", "local") != "replay")
        n = len(self.jobs)
        self.states = [TaskState(weight=float(t.weight)) for t in model.tasks]
        self.defaults: list[float | None] = [None] * n
        self.rows: list[dict | None] = [None] * n
        self.tuners: dict[int, Any] = {}       # task index -> its Tuner
        self.history: list[list] = []          # [search evaluations, model latency]
        self.spent = 0                         # search evaluations so far
        self.default_meas = self.default_hits = 0
        self.default_measure_s = 0.0
        self.versus: dict[int, Any] = {}       # task index -> its Comparison with the default
        self.decisions: list[dict] = []        # the stored decision summaries (read at look-up, then again)
        self.tested: dict[int, dict] = {}      # task index -> the config step 6 tested against the default
        self.decision_ids: dict[int, str | None] = {}  # task index -> its stored decision's run_id

    def note(self, event: str, i: int | None = None) -> None:
        """Append the model latency now to ``history`` and report ``event`` to ``progress``."""
        lat = model_latency(self.states, self.defaults)
        self.history.append([self.spent, lat])
        if self.progress:
            row = None if i is None else self.rows[i]
            self.progress({"event": event, "task": None if i is None else self.model.tasks[i].name,
                           "evaluations": self.spent, "budget": self.opt.budget, "latency": lat,
                           "source": None if row is None else row["source"]})

    def look_up(self) -> list[int]:
        """Step 1: the tasks the DB answers whole become hits; the indices of the others (to
        tune).  Raises ValueError when the budget cannot give each of those one evaluation."""
        from tunedb.index.contract.decisions import stored_decisions

        opt, todo = self.opt, []
        self.decisions = [] if (opt.cold or not opt.reuse_hits) else stored_decisions(self.db)
        for i, (task, job) in enumerate(zip(self.model.tasks, self.jobs)):
            hit = None if (opt.cold or not opt.reuse_hits) else _hit(self.db, job.target, job.workload,
                                                                     opt.hit_configs, self.decisions)
            if hit is None:
                todo.append(i)
                continue
            best, saved = hit
            self.states[i].update(best.cost, 0)
            self.states[i].alive = False
            self.rows[i] = runlog.hit_task(job.workload, best.cost, weight=task.weight, name=task.name,
                                           saved_s=saved, best_config=best.config)
            self.note("hit", i)
        if todo and opt.budget < len(todo):
            raise ValueError(f"--budget {opt.budget} is less than the {len(todo)} tasks to tune "
                             "(each needs at least one evaluation)")
        return todo

    def start_tasks(self, todo: list[int]) -> None:
        """Step 2: each task's first round: its default config, then its seeds (warm) or the
        model's/random moves (cold)."""
        from tunedb.transfer.search.tuner import TuneOptions

        opt = self.opt
        per_first = max(1, min(opt.first, opt.budget // max(len(todo), 1)))
        for i in todo:
            job = self.jobs[i]
            topt = TuneOptions(budget=per_first, seed=opt.seed + i, cold=opt.cold, patience=None,
                               batch=opt.round, n_seeds=per_first, start_default=True,
                               confirm_top=opt.confirm_top, confirm_rounds=opt.confirm_rounds)
            tu = self.session.job_tuner(job, topt)
            self.tuners[i] = tu
            self.rows[i] = {"source": "pending"}
            tu.start()
            self.spent += len(tu.evaluated)
            self.states[i].update(tu.best[0] if tu.best else None, len(tu.evaluated))
            self.rows[i] = {"source": "warm" if tu.seeds_info else "cold"}
            self.note("start", i)

    def schedule(self) -> None:
        """Step 3: the rest of the budget, round by round, to the task the scheduler picks."""
        opt = self.opt
        while self.spent < opt.budget:
            i = pick(self.states)
            if i is None:
                break
            tu = self.tuners[i]
            grant = min(opt.round, opt.budget - self.spent)
            before = len(tu.evaluated)
            tu.opt.budget = before + grant
            alive = tu.step(grant)
            self.spent += len(tu.evaluated) - before
            self.states[i].update(tu.best[0] if tu.best else None, len(tu.evaluated))
            if not alive and tu.stopped_by not in ("budget",) or len(tu.evaluated) == before:
                self.states[i].alive = False
            self.note("round", i)

    def confirm(self, todo: list[int]) -> None:
        """Step 4: the noise guard (``Tuner.confirm``) on every tuned task."""
        for i in todo:
            self.tuners[i].confirm()
            self.states[i].best = self.tuners[i].best[0] if self.tuners[i].best else math.inf
        self.note("confirm")

    def measure_defaults(self) -> None:
        """Step 5: the default-config latency: each task's default looked up or measured once
        (a reference, not a search evaluation: a warm task starts from its seeds)."""
        for job in self.jobs:
            t0 = time.perf_counter()
            _rec, cached = _default_cost(self.db, job)
            self.default_measure_s += time.perf_counter() - t0
            self.default_meas += 0 if cached else 1
            self.default_hits += 1 if cached else 0

    def versus_defaults(self, todo: list[int]) -> None:
        """Step 6: each tuned task whose answer in the DB is not its default, and that no stored
        decision pairs with the default, tested against it by interleaved rounds."""
        if not self.opt.versus_default:
            return
        from tunedb.index.contract.decisions import answer, stored_decisions

        decisions = stored_decisions(self.db)
        for i in todo:
            job = self.jobs[i]
            ans = answer(self.db, job.target, job.workload, summaries=decisions)
            head, dkey = ans.first(), _key(job.defaults)
            if head is None or head.config_key == dkey \
                    or any(d.pair == frozenset((head.config_key, dkey)) for d in ans.decisions):
                continue
            self.tested[i] = dict(head.config)
            t0 = time.perf_counter()
            self.versus[i] = versus_default(self.db, job, self.tested[i], tuple(self.opt.decide_looks))
            self.default_measure_s += time.perf_counter() - t0
            self.default_meas += 2 * len(self.versus[i].a)

    def task_row(self, i: int) -> dict:
        """Task ``i``'s row of the summary (tuned, hit or not started); sets ``defaults[i]``.
        A started or hit task's chosen config and cost are its :func:`task_answer`."""
        task, job = self.model.tasks[i], self.jobs[i]
        default_est = _cost_of(self.db, job, job.defaults)
        self.defaults[i] = None if default_est is None else default_est.value
        if i in self.tuners:
            res = self.tuners[i].result()
            row = runlog.task_summary(res, weight=task.weight, source=self.rows[i]["source"],
                                      default_cost=self.defaults[i], name=task.name)
            tuned = self.tested.get(i, res.best_config)
            tuned_est = _cost_of(self.db, job, tuned)
            row.update({"versus_default": None if i not in self.versus else self.versus[i].to_dict(),
                        "tuned_config": tuned, "tuned_estimate": None if tuned_est is None else tuned_est.to_dict()})
            if i in self.decision_ids:
                row["decision_id"] = self.decision_ids[i]
        elif self.rows[i] is not None and self.rows[i]["source"] == "hit":
            row = dict(self.rows[i])
            row["default_cost"] = self.defaults[i]
        else:  # not started (interrupted before it)
            row = {"name": task.name, "workload": job.workload, "workload_key": _key(job.workload),
                   "weight": float(task.weight), "source": "pending", "evaluations": 0, "measurements": 0,
                   "cache_hits": 0, "remeasurements": 0, "best": None, "best_config": None,
                   "default_cost": self.defaults[i], "history": [], "seeded_from": [], "stopped_by": "interrupted",
                   "origins": {}, "origin_split": {}}
        if row["source"] != "pending":
            row.update(self.answer_fields(i))
        row["default_estimate"] = None if default_est is None else default_est.to_dict()
        row["layers"] = list(getattr(task, "layers", []) or [])
        return row

    def answer_fields(self, i: int) -> dict:
        """The fields of task ``i``'s row that its :func:`task_answer` sets: ``best``,
        ``best_config``, ``best_estimate``, ``choice`` (``tuned`` / ``stored``: a config a stored
        decision put above the default, of a tuned / hit task; ``default``), ``chosen`` (why),
        ``verdict`` and ``undecided`` (None, or the undecided first config with its estimate and
        its weighted gain over the default, seconds: never part of the latency)."""
        job, weight = self.jobs[i], float(self.model.tasks[i].weight)
        ta = task_answer(self.db, job.target, job.workload, job.defaults, self.decisions)
        if ta is None or ta.estimate is None:
            return {"best": None, "best_config": None, "best_estimate": None, "choice": None,
                    "chosen": "no ok measurement", "verdict": "not tested", "undecided": None}
        replaced = _key(ta.config) != _key(job.defaults)
        choice = ("tuned" if i in self.tuners else "stored") if replaced else "default"
        undecided = None
        if ta.candidate is not None:
            undecided = {"config": ta.candidate, "estimate": ta.candidate_estimate.to_dict(),
                         "gain_s": weight * (ta.estimate.value - ta.candidate_estimate.value)}
        out = {"best": ta.estimate.value, "best_config": ta.config, "best_estimate": ta.estimate.to_dict(),
               "choice": choice, "chosen": ta.why, "verdict": ta.verdict, "undecided": undecided}
        if not replaced:
            out["selection_biased"] = False
        return out

    def store_decisions(self) -> None:
        """Store each step-6 test as a decision (``tunedb.index.contract.decisions``) with the
        config the run kept (:func:`_keep_tuned`), so ``tunedb best`` and later runs answer with it; once."""
        from tunedb.index.contract.decisions import store_decision
        from tunedb.transfer.measure.compare import decision_of

        for i, test in self.versus.items():
            if i in self.decision_ids:
                continue
            job, tuned = self.jobs[i], self.tested[i]
            keep = _keep_tuned(self.db, job, tuned, test)
            summary = decision_of(test, job.target, job.workload, tuned, job.defaults, by="tune-model",
                                  kept=tuned if keep else job.defaults)
            self.decision_ids[i] = store_decision(self.db, summary)

    def summary(self, interrupted: bool) -> dict:
        """Steps 7-8: the decisions stored, every task's row (its one answer), the model
        latencies, the run summary (stored in the DB)."""
        from tunedb.index.contract.decisions import stored_decisions
        from tunedb.transfer.apps.rundata import task_share

        self.store_decisions()
        self.decisions = stored_decisions(self.db)
        tasks_out = [self.task_row(i) for i in range(len(self.jobs))]
        tasks = self.model.tasks
        bests = [r.get("best") for r in tasks_out]
        latency = (sum(t.weight * b for t, b in zip(tasks, bests))
                   if bests and all(b is not None and math.isfinite(b) for b in bests) else None)
        dl = list(self.defaults)
        default_latency = (sum(t.weight * d for t, d in zip(self.states, dl))
                           if dl and all(d is not None and math.isfinite(d) for d in dl) else None)
        n, n_hit = len(self.jobs), sum(1 for r in tasks_out if r["source"] == "hit")
        answered, _ = task_share({"tasks": tasks_out})
        undecided = [r["undecided"] for r in tasks_out if r.get("undecided")]
        opt = self.opt
        summary = self.session.summary(
            tasks_out, label=opt.label or ("cold" if opt.cold else "warm"), options=asdict(opt),
            model=self.model.name, eta=answered / n if n else None,
            measure_s=sum(float(t.get("measure_s") or 0.0) for t in tasks_out) + self.default_measure_s,
            extra={"latency": latency, "default_latency": default_latency, "history": self.history,
                   "default_measurements": self.default_meas, "default_cache_hits": self.default_hits,
                   "interrupted": interrupted, "budget": opt.budget, "search_evaluations": self.spent,
                   "tasks_total": n, "tasks_hit": n_hit, "tasks_answered": answered,
                   "tasks_warm": sum(1 for r in tasks_out if r["source"] == "warm"),
                   "tasks_cold": sum(1 for r in tasks_out if r["source"] == "cold"),
                   "tasks_undecided": len(undecided),
                   "undecided_gain_s": sum(u["gain_s"] for u in undecided),
                   "omitted": list(getattr(self.model, "omitted", []) or [])})
        # evaluations, measurements and cache_hits stay the sums over the tasks (the search's: what the
        # hit rate is of); the default-config references and tuned-vs-default rounds are counted apart
        summary["reference_measurements"] = self.default_meas
        summary["reference_cache_hits"] = self.default_hits
        self.session.save_summary(summary)
        return summary


def _keep_tuned(db: RecordStore | None, job: Any, tuned: dict, test: Any) -> bool:
    """Whether a run keeps ``tuned`` over the job's default after the paired ``test``: the test
    says it is faster *and* its estimate is below the default's (module docstring, step 6)."""
    tuned_est, default_est = _cost_of(db, job, tuned), _cost_of(db, job, job.defaults)
    return (test is not None and test.verdict == "faster" and tuned_est is not None
            and (default_est is None or tuned_est.value < default_est.value))


def _key(cfg: Any) -> str:
    from tunedb.index.model.keys import key_of

    return key_of(dict(cfg))


class ModelInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``tune_model``: everything measured is committed and the partial summary
    (stored too) is ``.summary``."""

    def __init__(self, summary: dict) -> None:
        super().__init__("interrupted")
        self.summary = summary


def eta_line(out: Mapping[str, Any]) -> str:
    """The summary line of a model run's eta (tasks answered by the DB / tasks, the seeds'
    N_hit / N_total) and the seeds' time formula T_total = T_full (1 - eta) + T_query."""
    from tunedb.transfer.apps.rundata import eta_text, task_share

    answered, n = task_share(out)
    return (f"eta (tasks answered by the DB): {eta_text(answered, n)}; T_total = T_full (1 - eta) + T_query = "
            f"{fmt_seconds(out.get('t_full_s'))} x (1 - eta) + {fmt_seconds(out.get('query_s'))} = "
            f"{fmt_seconds(out.get('t_total_predicted_s'))} (T_full: this run's measuring time plus the recorded "
            "measuring time of the records that answered it)")


def undecided_line(out: Mapping[str, Any]) -> str | None:
    """The summary line of the tasks whose DB best no paired decision lets replace the default
    (their gain is not in the latency), None when there is none."""
    rows = [t for t in out.get("tasks") or [] if isinstance(t, Mapping) and t.get("undecided")]
    if not rows:
        return None
    gain = sum(float(t["undecided"].get("gain_s") or 0.0) for t in rows)
    return (f"undecided: {len(rows)} task(s) whose best in the DB has no paired decision against the default "
            f"({', '.join(str(t.get('name') or '?') for t in rows)}): the default is kept and their estimated "
            f"{fmt_seconds(gain)} is not in the latency (tunedb compare decides them)")


__all__ = ["ModelOptions", "ModelRun", "TaskAnswer", "task_answer", "tune_model", "ModelInterrupted",
           "evaluations_to_reach", "eta_line", "undecided_line"]
