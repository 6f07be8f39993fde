"""``tunedb demo``: what the DB buys, measured on this machine, against what a user has without it.

The story (every step real: gcc-built C kernels timed on this CPU, every measurement committed):

1. **Workloads where the config matters here.**  The demo tunes ``matmul`` products
   ``C = A @ B`` whose ``B`` is a narrow panel of ``N`` columns (a weight matrix applied to a few
   vectors).  ``N`` is sized from the target's *own default config* (:func:`plan`): a quarter of
   the default micro-kernel's columns (``nr``), so the hardware-derived default spends most of
   its register tile on padding and a shape-aware config can do much better.  The default is
   never changed; only the workload sizes are chosen.
2. **History** (:data:`HISTORY_SHAPES`): a few such products are tuned through the DB (each
   ``history_budget`` evaluations, the later ones seeded by the earlier).  On a rerun the DB
   already holds them: they are reused, nothing is measured ("reusing N stored entries").
3. **Sizing** (:func:`sizing`): by the DB's estimates, the history's best configs must be at
   least :data:`FACTOR` (1.5x) faster than their defaults (geometric mean over the history);
   when not, the next, narrower panel is tried (:data:`MAX_ATTEMPTS` in all).  The estimates
   only pick the size; the claims' gate is step 5's measured test.
4. **A new workload** (one the DB has no record of: :func:`new_shape`, so a rerun tunes another
   one) is tuned twice with the **same budget** (``budget`` evaluations each, both starting
   from the kernel's default config, the same search, the two runs stepped alternately so a busy
   minute hits both):
   * *warm*: through the DB -- seeded by the nearest stored entries' best configs, ranked by the
     cost model the DB's records train;
   * *cold*: a fresh, throwaway in-memory store -- no history, no seeds, no prior model, and no
     DB answers (what a user has without tunedb).
   Each run re-measures its two leaders once and its winner once more (``Tuner.confirm``).
5. **Verification**: warm's chosen config, cold's chosen config and the default are re-measured
   in interleaved rounds (every round measures each distinct config once, rotating the order),
   committed to the DB as confirmations.  **Precondition** (:func:`precondition`): before
   anything is claimed, the best config known for the new workload must be at least 1.5x faster
   than the default with 95 % confidence by these rounds; when not, the headline says that no
   gain is claimed and why.  The headline is the test of warm / cold (question
   "sign", margin 5 %, looks after 3, 5, 8, 12 rounds up to ``max_rounds``): *faster*,
   *slower*, *equivalent* or *inconclusive* (with the measured noise as the reason).  When both
   runs chose the same config there is nothing to compare: the headline says so and no interval
   is computed.  Each chosen config's speedup over the default is the geometric mean of the
   same rounds' ratios with its 95 % paired t-interval.
6. **Search budget**: the evaluation at which cold first had warm's result -- its best-so-far
   (single samples of its search) reached warm's best search sample, or it evaluated warm's
   chosen config -- or that it never did within its budget (:func:`matched_at`).

Latencies printed are the DB's estimates (``RecordStore.cost``: the median of the config's
records, confirmations only once it has them) after the verification rounds, the number
``tunedb best`` shows; the search-budget line's numbers are single search samples (``best_sample``:
the best one measurement of a run's search), shown in the table as their own column, never
as a latency; ratios and speedups are the interleaved rounds' geometric means.  The
whole demo is stored as one run summary (kind ``demo``; its ``parts`` the history, warm and cold
runs; the history and warm runs are also stored as runs of their own), so ``tunedb report``
draws it.  Units: seconds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tunedb.transfer.search.curve import evaluations_to_reach

if TYPE_CHECKING:
    from tunedb.index.contract.base import RecordStore
    from tunedb.transfer.search.session import TuningSession

PRESET = "cpu-native-t1"
FAMILY = "matmul"
#: (M, K) of the history products; their N is the plan's panel width
HISTORY_SHAPES = ((256, 512), (512, 256))
#: (M, K) of the new products, in the order a run takes the first one the DB does not hold
NEW_SHAPES = ((384, 384), (320, 448), (448, 320), (384, 512), (512, 384), (320, 320), (448, 448), (384, 256))
#: the precondition: the best known config is at least this many times faster than the default
FACTOR = 1.5
#: panel widths tried, as divisors of the default config's ``nr`` (narrower when the first fails)
PANEL_DIVISORS = (4, 8)
MAX_ATTEMPTS = len(PANEL_DIVISORS)
#: equivalence margin of the warm-vs-cold test
MARGIN = 0.05
#: rounds after which the warm-vs-cold test may stop
LOOKS = (3, 5, 8, 12)
#: level of the speedup intervals
LEVEL = 0.95


# ---------------------------------------------------------------------------- workloads
def default_nr(target: Mapping[str, Any]) -> int:
    """The ``nr`` (micro-kernel columns, floats) of ``matmul``'s default config for ``target``."""
    from tunedb.transfer.kernels import default_config

    return int(default_config({"family": FAMILY, "M": 256, "N": 256, "K": 256}, target)["nr"])


def plan(target: Mapping[str, Any], attempt: int = 0) -> dict:
    """The workloads of attempt ``attempt`` (0-based, < :data:`MAX_ATTEMPTS`): ``panel`` = N =
    max(1, default nr // PANEL_DIVISORS[attempt]), ``history``: the :data:`HISTORY_SHAPES`
    products with that N, ``default_nr``, ``why`` (one sentence)."""
    nr = default_nr(target)
    n = max(1, nr // PANEL_DIVISORS[attempt])
    return {"attempt": attempt, "default_nr": nr, "panel": n,
            "history": [workload(m, n, k) for m, k in HISTORY_SHAPES],
            "why": (f"B is a panel of {n} columns: the default's micro-kernel computes {nr} columns "
                    f"at a time (from the target's vector width and registers), so most of its tile is padding")}


def workload(m: int, n: int, k: int) -> dict:
    """A ``matmul`` workload dict (C[m x n] = A[m x k] @ B[k x n], float32)."""
    return {"family": FAMILY, "M": int(m), "N": int(n), "K": int(k)}


def wtext(w: Mapping[str, Any]) -> str:
    """``matmul M=384,N=16,K=384`` (the CLI's workload syntax, ``matmul:M=...``)."""
    return f"{w['family']}:M={w['M']},N={w['N']},K={w['K']}"


def new_shape(db: RecordStore, target: Mapping[str, Any], panel: int) -> dict:
    """The first :data:`NEW_SHAPES` product (N = ``panel``) of which ``db`` holds no ok record
    on ``target``; past the list, M grows by 32 from 544 until one is new."""
    cands = [workload(m, panel, k) for m, k in NEW_SHAPES]
    for w in cands:
        if not db.best_costs(target, w, 1):
            return w
    m = 544
    while db.best_costs(target, workload(m, panel, 384), 1):
        m += 32
    return workload(m, panel, 384)


def stored_entries(db: RecordStore, target: Mapping[str, Any]) -> int:
    """(target, workload) entries of :data:`FAMILY` on ``target`` with ok records in ``db``."""
    from tunedb.index.model.keys import key_of

    tk = key_of(dict(target))
    try:
        rows = db.entries().to_pylist()
    except (ValueError, KeyError):
        return 0
    return sum(1 for r in rows if r.get("target_key") == tk and r.get("family") == FAMILY and (r.get("ok_records") or 0))


# ---------------------------------------------------------------------------- measuring
def remeasure(db: RecordStore | None, job: Any, cfg: Mapping[str, Any], origin: str = "confirm") -> float | None:
    """One re-measurement of ``cfg`` (committed to ``db`` with ``meta.origin``): its value
    (median of its repeats, seconds), None when it failed."""
    from tunedb.index.model.estimate import record_value
    from tunedb.transfer.measure.backend import lookup_or_measure

    (rec, _), = lookup_or_measure(db, job.backend, job.target, job.workload, [dict(cfg)], force=True,
                                  annotate=lambda _i: {"origin": origin})
    return record_value(rec)


def _key(cfg: Mapping[str, Any]) -> str:
    from tunedb.index.model.keys import key_of

    return key_of(dict(cfg))


def speedup_of(default_values: list[float], values: list[float], level: float = LEVEL) -> dict | None:
    """Speedup of a config over the default from paired round values (seconds): the geometric
    mean of default / config over the rounds, with its ``level`` paired t-interval (``lo``,
    ``hi``) and ``rounds``; None with fewer than 2 rounds."""
    from tunedb.transfer.measure.compare import ratio_interval

    pairs = [(d, v) for d, v in zip(default_values, values) if d and v and d > 0 and v > 0]
    if len(pairs) < 2:
        return None
    r, lo, hi, cv = ratio_interval([p[0] for p in pairs], [p[1] for p in pairs], level)
    return {"speedup": r, "lo": lo, "hi": hi, "rounds": len(pairs), "noise_cv": cv, "level": level}


def sizing(db: RecordStore, target: Mapping[str, Any], history: list[Mapping[str, Any]],
           factor: float = FACTOR) -> dict:
    """Does the config matter at least ``factor``-fold on the history workloads, by the DB's
    estimates (no new measurement)?  For each workload, default estimate / best estimate
    (medians of their records, seconds); ``holds`` when the geometric mean of those ratios is
    >= ``factor``.  Returns ``holds``, ``factor``, ``ratios`` (one per workload, None without
    both estimates) and ``mean`` (their geometric mean, None without any)."""
    from tunedb.transfer.measure.jobs import local_job

    ratios: list[float | None] = []
    for w in history:
        job = local_job(target, w)
        best = db.best_costs(job.target, job.workload, 1)
        d = db.cost(job.target, job.workload, job.defaults)
        ratios.append(d.value / best[0].cost if best and d is not None and best[0].cost > 0 else None)
    known = [r for r in ratios if r is not None and r > 0]
    mean = math.exp(sum(math.log(r) for r in known) / len(known)) if known else None
    return {"holds": mean is not None and mean >= factor, "factor": factor, "ratios": ratios, "mean": mean}


def precondition(v: Mapping[str, Any], factor: float = FACTOR) -> dict:
    """The gate of every gain claim, from the verification rounds ``v`` (:func:`verify`; its
    speedup intervals are 95 % paired t-intervals over all its rounds): the
    best config known for the new workload (warm's or cold's chosen config, whichever the
    rounds show faster: the higher geometric-mean speedup) is at least ``factor`` times faster
    than the default with 95 % confidence (its speedup interval's lower end >= ``factor``).
    Returns ``holds``, ``factor``, ``config`` (``warm`` / ``cold``), ``speedup`` / ``lo`` /
    ``hi`` / ``rounds`` (:func:`speedup_of`) and ``reason`` (why not, else "")."""
    cands = [(n, v.get(f"speedup_{n}")) for n in ("warm", "cold")]
    cands = [(n, s) for n, s in cands if s is not None]
    out: dict[str, Any] = {"holds": False, "factor": factor, "config": None, "speedup": None, "lo": None,
                           "hi": None, "rounds": 0, "reason": ""}
    if not cands:
        out["reason"] = ("the best config known is the default itself" if v.get("warm_is_default")
                         and v.get("cold_is_default") else "the default and the chosen configs could not be re-measured")
        return out
    name, s = max(cands, key=lambda c: c[1]["speedup"])
    out.update(config=name, speedup=s["speedup"], lo=s["lo"], hi=s["hi"], rounds=s["rounds"])
    out["holds"] = s["lo"] >= factor
    if not out["holds"]:
        out["reason"] = (f"the best config known is less than {factor:g}x faster than the default"
                         if s["hi"] < factor else
                         f"its 95 % interval ({s['lo']:.2f}-{s['hi']:.2f}x) reaches below {factor:g}x")
    return out


def verify(db: RecordStore, target: Mapping[str, Any], w: Mapping[str, Any], warm_cfg: Mapping[str, Any],
           cold_cfg: Mapping[str, Any], *, looks: tuple = LOOKS,
           on_round: Callable[[int, Any], None] | None = None) -> dict:
    """Interleaved rounds of warm's chosen config, cold's chosen config and the default of ``w``
    (each distinct config once a round, the order rotating; committed as confirmations).

    The warm/cold test (``compare``, question "sign", ``looks``) runs first and may stop at a
    look, unless both chose the same config; then rounds go on to ``max(looks)`` in all.  The
    speedups (and so the precondition, :func:`precondition`) are read once, from all rounds,
    at :data:`LEVEL` (95 %): a fixed number of rounds, no optional stopping.

    Returns ``same_config`` (no warm/cold test), ``comparison`` (``Comparison.to_dict()`` of
    warm / cold; None when the same), ``verdict`` (faster / slower / equivalent / inconclusive /
    same), ``rounds`` (all), ``test_rounds`` (the test's), ``level``, the per-round ``values``
    (seconds) of ``warm``, ``cold`` and ``default`` (rounds where one failed left out),
    ``warm_is_default`` / ``cold_is_default``, and ``speedup_warm`` / ``speedup_cold``
    (:func:`speedup_of`; None for a chosen config that is the default itself)."""
    from tunedb.transfer.measure.compare import compare
    from tunedb.transfer.measure.jobs import local_job

    job = local_job(target, w)
    arms = {"warm": dict(warm_cfg), "cold": dict(cold_cfg), "default": dict(job.defaults)}
    distinct: list[str] = []
    owner: dict[str, str] = {}
    for name, cfg in arms.items():
        k = _key(cfg)
        if k not in owner:
            owner[k] = name
            distinct.append(name)
    vals: dict[str, list[float | None]] = {n: [] for n in arms}

    def one_round(r: int) -> dict[str, float | None]:
        order = distinct[r % len(distinct):] + distinct[:r % len(distinct)]
        if (r // len(distinct)) % 2:
            order = order[::-1]
        got = {n: remeasure(db, job, arms[n]) for n in order}
        return {n: got[owner[_key(arms[n])]] for n in arms}

    def record(got: dict[str, float | None]) -> None:
        if all(v is not None for v in got.values()):
            for n in arms:
                vals[n].append(got[n])

    same = _key(warm_cfg) == _key(cold_cfg)
    done = 0
    if same:
        comparison, verdict_ = None, "same"
    else:
        def round_fn(r: int) -> tuple[float | None, float | None]:
            got = one_round(r)
            record(got)
            return got["warm"], got["cold"]

        c = compare(round_fn, question="sign", margin=MARGIN, looks=looks, on_round=on_round)
        comparison, verdict_, done = c.to_dict(), c.verdict, c.rounds
    # the rest of the rounds (all configs) for the speedups, read once at the end: the warm/cold
    # test above keeps the answer it stopped with
    while done < max(looks):
        record(one_round(done))
        if on_round is not None:
            on_round(done, None)
        done += 1
    return {"same_config": same, "comparison": comparison, "verdict": verdict_, "rounds": done,
            "test_rounds": None if comparison is None else comparison["rounds"], "level": LEVEL,
            "values": vals, "warm_is_default": _key(warm_cfg) == _key(job.defaults),
            "cold_is_default": _key(cold_cfg) == _key(job.defaults),
            # a chosen config that is the default has no speedup over it (never compared with itself)
            "speedup_warm": None if _key(warm_cfg) == _key(job.defaults) else speedup_of(vals["default"], vals["warm"]),
            "speedup_cold": None if _key(cold_cfg) == _key(job.defaults) else speedup_of(vals["default"], vals["cold"])}


# ---------------------------------------------------------------------------- searching
def _tuner(session: TuningSession, job: Any, budget: int, seed: int, cold: bool, progress: Callable | None) -> Any:
    """A Tuner of ``job`` in ``session`` with the demo's options: ``budget`` evaluations, the
    default first, (warm) up to ``budget - 1`` seeds (at most 3), rounds of 2, two leaders
    re-measured once and the winner once more."""
    from tunedb.transfer.search.tuner import TuneOptions

    opt = TuneOptions(budget=budget, seed=seed, cold=cold, batch=2, n_seeds=min(3, max(budget - 1, 1)),
                      start_default=True, confirm_top=2, confirm_rounds=1)
    return session.job_tuner(job, opt, progress=progress)


def search_pair(warm_run: TuningSession, cold_run: TuningSession, job: Any, budget: int, seed: int,
                progress: Callable[[str, dict], None] | None = None) -> tuple[Any, Any, list[str]]:
    """Tune ``job`` warm (in ``warm_run``, on its store) and cold (in ``cold_run``, cold mode)
    with the same ``budget``, stepping the two runs alternately (start, start, round, round,
    ...), then confirming each; their ``TuneResult`` s (warm, cold; each kept by its session)
    and the config keys cold evaluated, in evaluation order."""
    def cb(label: str) -> Callable[[dict], None] | None:
        return (lambda ev: progress(label, ev)) if progress else None

    warm = _tuner(warm_run, job, budget, seed, False, cb("warm"))
    cold = _tuner(cold_run, job, budget, seed, True, cb("cold"))
    warm.start()
    cold.start()
    alive = {"warm": True, "cold": True}
    while any(alive.values()):
        for name, tu in (("warm", warm), ("cold", cold)):
            if alive[name]:
                alive[name] = tu.step()
    warm.confirm()
    cold.confirm()
    return warm_run.keep(warm.result()), cold_run.keep(cold.result()), [_key(c) for c in cold.configs.values()]


def matched_at(history: list, keys: list[str], value: float | None, config_key: str) -> int | None:
    """The first evaluation (1-based) of a run at which it had matched another run's result:
    its best-so-far sample (``history``: [evaluations, best-so-far seconds]) was <= ``value``, or
    it had evaluated the config ``config_key`` itself (``keys``: its evaluated config keys, in
    order); None when neither happened."""
    n = evaluations_to_reach(history, value)
    if config_key in keys:
        k = keys.index(config_key) + 1
        n = k if n is None else min(n, k)
    return n


def _final_best(history: list) -> float | None:
    """The last best-so-far of a Tuner history (seconds), None when it has none."""
    vals = [b for _n, b in history if b is not None and math.isfinite(b)]
    return vals[-1] if vals else None


# ---------------------------------------------------------------------------- the demo
def run_demo(db: RecordStore, *, budget: int = 6, history_budget: int = 20, seed: int = 0, max_rounds: int = 12,
             target: str = PRESET, progress: Callable[[str, dict], None] | None = None) -> dict:
    """Run the demo (module docstring) on ``db`` with the local preset ``target``; returns the
    JSON-able result the CLI prints (seconds for costs; ``headline`` and ``budget_headline``
    are the two claims).  ``budget``: search evaluations of warm and of cold (each);
    ``history_budget``: evaluations per history workload the DB does not hold yet;
    ``max_rounds``: the interleaved verification rounds (the warm-vs-cold test may stop
    earlier; the speedups over the default use them all).  ``progress(phase, event)`` sees the
    Tuners' events (phases ``history``, ``warm``, ``cold``) and the verification rounds (phase
    ``verify``: ``{"round", "rounds"}``).

    ValueError when ``target`` is not a local preset, ``budget`` < 2, ``history_budget`` < 2 or
    ``max_rounds`` < 3."""
    from tunedb.index.hardware.localcpu import local_target
    from tunedb.index.memory.store import MemoryStore
    from tunedb.transfer.measure.jobs import local_job
    from tunedb.transfer.search import runlog
    from tunedb.transfer.search.session import TuningSession

    if budget < 2 or history_budget < 2:
        raise ValueError("the budgets must be at least 2 evaluations (the default and one more)")
    if max_rounds < 3:
        raise ValueError("the warm-vs-cold test needs at least 3 rounds")
    looks = tuple(x for x in LOOKS if x <= max_rounds)
    if max_rounds not in looks:
        looks = (*looks, max_rounds)
    t_start = time.perf_counter()
    target_d = local_target(target)
    demo = TuningSession(db, "demo", target_d)
    watch, records_before = demo.watch, demo.records_before

    def rounds_cb(phase: str, total: int) -> Callable[[int, Any], None] | None:
        return (lambda r, _st: progress(phase, {"round": r + 1, "rounds": total})) if progress else None

    # 1-2: history, sized so that the config matters >= FACTOR by the DB's estimates
    attempts: list[dict] = []
    history: list[dict] = []
    parts: list[dict] = []
    for attempt in range(MAX_ATTEMPTS):
        p = plan(target_d, attempt)
        for i, w in enumerate(p["history"]):
            h = _history_one(db, target_d, w, history_budget, seed + i, progress)
            history.append(h)
            if h.get("part") is not None:
                parts.append(h.pop("part"))
        attempts.append({"plan": p, "sizing": sizing(db, target_d, p["history"])})
        if attempts[-1]["sizing"]["holds"]:
            break
    chosen = attempts[-1]
    panel = chosen["plan"]["panel"]

    # 4: the new workload, warm (through the DB) and cold (a throwaway store), same budget
    w_new = new_shape(db, target_d, panel)
    job = local_job(target_d, w_new)
    entries_before = stored_entries(db, target_d)
    warm_run = TuningSession(db, "tune", job.target, check_machine=False)
    cold_run = TuningSession(MemoryStore("demo-cold-throwaway"), "tune", job.target, check_machine=False)
    warm_res, cold_res, cold_keys = search_pair(warm_run, cold_run, job, budget, seed, progress)
    warm_cfg = warm_res.best_config or job.defaults
    cold_cfg = cold_res.best_config or job.defaults

    # 5: verification rounds, committed to the DB
    v = verify(db, target_d, w_new, warm_cfg, cold_cfg, looks=looks, on_round=rounds_cb("verify", max(looks)))
    pre = precondition(v)

    # 6: search budget: when cold first had warm's result (a sample as fast, or warm's config)
    warm_best_sample = _final_best(warm_res.history)
    cold_to_match = matched_at(cold_res.history, cold_keys, warm_best_sample, _key(warm_cfg))

    def arm(name: str, res: Any, cfg: Mapping[str, Any], store: str) -> dict:
        est = db.cost(job.target, job.workload, cfg)
        return {"name": name, "store": store, "config": dict(cfg), "config_key": _key(cfg),
                "latency": None if est is None else est.value,
                "latency_estimate": None if est is None else est.to_dict(),
                "search_evaluations": None if res is None else res.evaluations,
                "measurements": None if res is None else res.measurements,
                "db_answers": None if res is None else res.cache_hits,
                "remeasurements": None if res is None else res.remeasurements,
                "seeds": None if res is None else len(res.seeds),
                "best_sample": None if res is None else _final_best(res.history),
                "history": None if res is None else [[int(n), b] for n, b in res.history],
                "origins": None if res is None else res.origins}

    out: dict[str, Any] = {
        "db": db.location, "target": target_d["name"], "budget": budget, "history_budget": history_budget,
        "seed": seed, "family": FAMILY, "panel": panel, "plan": chosen["plan"],
        "attempts": [{"panel": a["plan"]["panel"], "sizing": a["sizing"]} for a in attempts],
        "sizing": chosen["sizing"],
        "history": history, "precondition": pre, "new_workload": w_new, "stored_entries_before_warm": entries_before,
        "default": arm("default", None, job.defaults, "db"),
        "warm": arm("warm", warm_res, warm_cfg, "db"),
        "cold": {**arm("cold", cold_res, cold_cfg, "throwaway in-memory store"), "evaluated_keys": cold_keys},
        "verify": v, "verdict": v["verdict"],
        "cold_evaluations_to_match": cold_to_match, "warm_best_sample": warm_best_sample,
        "machine_check": watch.machine,
    }
    out["headline"] = headline(out)
    out["budget_headline"] = budget_headline(out)
    out["seconds"] = time.perf_counter() - t_start

    # the run summaries: warm's stored as a run of its own, cold's only inside the demo
    warm_part = warm_run.summary(started=watch.started, wall_s=float(warm_res.overhead.get("total") or 0.0),
                                 label="demo warm", options={"budget": budget, "seed": seed, "cold": False},
                                 records_before=records_before, machine=watch.machine)
    warm_run.save_summary(warm_part)
    cold_part = cold_run.summary([runlog.task_summary(cold_res, source="cold")], started=watch.started,
                                 wall_s=float(cold_res.overhead.get("total") or 0.0),
                                 label="demo cold (throwaway store)",
                                 options={"budget": budget, "seed": seed, "cold": True},
                                 records_before=0, machine=watch.machine)
    parts += [warm_part, cold_part]
    summary = demo.summary(
        [], label="demo",
        options={"budget": budget, "history_budget": history_budget, "seed": seed, "max_rounds": max_rounds},
        extra={"parts": parts, "verdict": out["verdict"], "verify": v, "headline": out["headline"],
               "budget_headline": out["budget_headline"], "precondition": pre,
               "measurements": sum(int(q.get("measurements") or 0) for q in parts),
               "cache_hits": sum(int(q.get("cache_hits") or 0) for q in parts),
               "evaluations": sum(int(q.get("evaluations") or 0) for q in parts)})
    out["run_id"] = demo.save_summary(summary)
    return out


def _history_one(db: RecordStore, target: Mapping[str, Any], w: Mapping[str, Any], budget: int, seed: int,
                 progress: Callable[[str, dict], None] | None) -> dict:
    """One history workload: reused when ``db`` holds an ok record of it, else tuned through
    ``db`` (``budget`` evaluations).  Its row: ``workload``, ``reused``, ``evaluations``,
    ``measurements``, ``db_answers``, ``best`` (the DB's estimate, seconds), ``best_config``,
    and (tuned) ``part``: its run summary, also stored as a run of its own."""
    from tunedb.transfer.measure.jobs import local_job
    from tunedb.transfer.search.session import TuningSession

    job = local_job(target, w)
    found = db.best_costs(job.target, job.workload, 1)
    row: dict[str, Any] = {"workload": dict(job.workload), "reused": bool(found), "evaluations": 0,
                           "measurements": 0, "db_answers": 0, "part": None}
    if not found:
        run = TuningSession(db, "tune", job.target, check_machine=False)
        cb = (lambda ev: progress("history", ev)) if progress else None
        res = run.run(_tuner(run, job, budget, seed, False, cb))
        part = run.summary(label="demo history", options={"budget": budget, "seed": seed, "cold": False})
        run.save_summary(part)
        row.update(evaluations=res.evaluations, measurements=res.measurements, db_answers=res.cache_hits, part=part)
        found = db.best_costs(job.target, job.workload, 1)
    row["best"] = found[0].cost if found else None
    row["best_config"] = dict(found[0].config) if found else None
    return row


# ---------------------------------------------------------------------------- the claims
def _x(v: float) -> str:
    return f"{v:.2f}x"


def headline(res: Mapping[str, Any]) -> str:
    """The first claim: warm vs cold at equal budget, from the verification's test (or that both
    chose the same config: no interval).  Without the precondition (:func:`precondition`) it
    claims nothing and says why, then what was measured."""
    v, pre, budget = res["verify"], res["precondition"], res["budget"]
    if v["same_config"]:
        text = (f"same config: warm and cold chose the same config with {budget} evaluations each; "
                "there is nothing to compare between them (no interval)")
        return text if pre["holds"] else f"no gain claim ({pre['reason']}); {text}"
    c = v["comparison"]
    if c["ratio"] is None:
        return (f"inconclusive at equal budget ({budget} evaluations each): warm's and cold's configs could not be "
                "re-measured; no claim is made")
    # warm / cold -> cold / warm: how many times as fast warm's config runs
    sp, lo, hi = 1 / c["ratio"], 1 / c["hi"], 1 / c["lo"]
    stat = (f"{_x(sp)} as fast as cold's (geometric mean of {c['rounds']} interleaved rounds, "
            f"{c['level'] * 100:.0f} % CI {_x(lo)}-{_x(hi)})")
    if not pre["holds"]:
        return (f"no gain claim: the demo could not show that the config matters {pre['factor']:g}x here "
                f"({pre['reason']}); measured, not claimed: with {budget} evaluations each, warm's config ran {stat}")
    if v["verdict"] == "faster":
        return f"warm beats cold at equal budget ({budget} evaluations each): warm's config runs {stat}"
    if v["verdict"] == "slower":
        return f"cold beats warm at equal budget ({budget} evaluations each): warm's config runs {stat}"
    if v["verdict"] == "equivalent":
        return (f"no difference: with {budget} evaluations each, warm's and cold's configs are within "
                f"{c['margin']:.0%} of each other: warm's runs {stat}")
    return (f"inconclusive at equal budget ({budget} evaluations each): {c['reason']}; warm's config runs {stat}; "
            "no claim is made")


def budget_headline(res: Mapping[str, Any]) -> str:
    """The second claim: the search evaluations cold needed to match warm's result (a search
    sample as fast as warm's best one, or warm's chosen config itself: :func:`matched_at`)."""
    from tunedb.index.model.units import fmt_seconds

    n, cold, target = res["cold_evaluations_to_match"], res["cold"], res["warm_best_sample"]
    if target is None:
        return "search budget: warm measured nothing that ran, so there is nothing for cold to match"
    if n is not None:
        return (f"search budget: cold needed {n} evaluations to match warm's result (a search sample as fast as "
                f"warm's best search sample, {fmt_seconds(target)}, or warm's config; single measurements, the "
                "table's 'best search sample' column, not the DB estimates)")
    best = cold["best_sample"]
    gap = f" ({best / target:.2f}x warm's {fmt_seconds(target)})" if best is not None and target > 0 else ""
    return (f"search budget: cold did not match warm's result in its {cold['search_evaluations']} evaluations; "
            f"its best search sample was {fmt_seconds(best) if best is not None else '-'}{gap}; single "
            "measurements, the table's 'best search sample' column, not the DB estimates")


__all__ = ["run_demo", "plan", "sizing", "precondition", "verify", "remeasure", "search_pair", "headline", "budget_headline",
           "speedup_of", "new_shape", "evaluations_to_reach", "matched_at", "FACTOR", "PRESET"]
