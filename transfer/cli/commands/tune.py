"""Transfer commands: tune, warm-start, predict."""

from __future__ import annotations

import json
import os

from tunedb.transfer.cli.commands.store import TRUST_HELP, trusted
from tunedb.transfer.cli.util import (
    UserError,
    emit,
    fmt_seconds,
    load_json_file,
    machine_line,
    open_db,
    parse_config,
    parse_workload,
    progress_bar,
    progress_to,
    table_text,
    target_arg,
)


def register(sub, common) -> None:
    p = sub.add_parser("tune", parents=[common], help="tune one (target, workload): retrieval-seeded local search")
    p.add_argument("--target", help="preset, DB target, catalog device or JSON file (default with --replay: "
                                    "the file's device)")
    p.add_argument("--workload", help="family:key=value,... or JSON file (default with --replay: the file's kernel)")
    p.add_argument("--budget", type=int, default=20, help="evaluations in this run (new measurements + cache hits)")
    p.add_argument("--cold", action="store_true", help="no retrieval, random start (for comparison)")
    p.add_argument("--replay", metavar="FILE", help="answer measurements from a Kernel Tuner cache file")
    p.add_argument("--device", help="device name of the replay file's target: overrides the file's "
                                    "device name, empty or not")
    p.add_argument("--seed", type=int, default=0, help="random seed of the search (default 0): the same seed and history repeat the same run")
    p.add_argument("--wall-time", type=float, metavar="SECONDS",
                   help="stop searching after SECONDS of wall time (default: no limit; the budget decides)")
    p.add_argument("--patience", type=int, default=None, metavar="ROUNDS",
                   help="stop after ROUNDS local-search rounds without improvement (default: off, the whole "
                        "--budget is spent)")
    p.add_argument("--exact", action="store_true", help="start from the exact entry's best configs (lookup only)")
    p.add_argument("--trust", metavar="PATTERNS", help=TRUST_HELP)
    _confirm_args(p)
    p.set_defaults(func=run_tune)

    p = sub.add_parser("warm-start", parents=[common], help="tune many workloads on a new target from history")
    p.add_argument("--target", required=True, help="the new target: preset, DB target, catalog device or JSON file")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--workloads", metavar="FILE", help="JSON list of workloads, or one workload spec per line")
    g.add_argument("--from-target", metavar="SRC", help="every workload SRC has in the DB")
    p.add_argument("--budget", type=int, default=20, help="evaluations per workload (default 20)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the search (default 0): the same seed and history repeat the same run")
    p.add_argument("--cold", action="store_true", help="no retrieval, random starts (for comparison)")
    p.add_argument("--trust", metavar="PATTERNS", help=TRUST_HELP)
    _confirm_args(p)
    p.set_defaults(func=run_warm_start)

    p = sub.add_parser("predict", parents=[common], help="the cost model's predicted time for a config")
    p.add_argument("--target", required=True, help="preset, DB target, catalog device or JSON file")
    p.add_argument("--workload", required=True, help="family:key=value,..., a JSON object or a JSON file")
    p.add_argument("--config", required=True, help="config: a JSON object, inline or a file")
    p.set_defaults(func=run_predict)


def _confirm_args(p) -> None:
    p.add_argument("--confirm", type=int, default=2, metavar="K",
                   help="re-measure the K leaders interleaved at the end, so the winner's cost is not the "
                        "sample that selected it (default 2; 0: off, the cost is then flagged selection-biased)")
    p.add_argument("--confirm-rounds", type=int, default=2, metavar="R",
                   help="interleaved re-measurement rounds of the leaders (default 2)")


def best_text(res) -> str:
    """The winner's cost as a user reads it: the estimate with its interval and n, and whether
    it is selection-biased (not confirmed by re-measurement)."""
    from tunedb.index.model.estimate import CostEstimate

    if res.best_estimate is None:
        return "-"
    text = CostEstimate.from_dict(res.best_estimate).text()
    if res.selection_biased:
        text += " [selection-biased: the best of this run's samples, not re-measured]"
    return text


def _check_budget(b: int) -> None:
    if b < 1:
        raise UserError("--budget must be >= 1")


def make_job(args, db, target_spec, workload_spec, replay: str | None = None):
    """Resolve (target, workload) into a tuning Job, with user errors as UserError."""
    from tunedb.transfer.measure.jobs import local_job, replay_job

    workload = parse_workload(workload_spec) if workload_spec else None
    if replay:
        if not os.path.isfile(replay):
            raise UserError(f"replay file {replay} does not exist")
        target = target_arg(target_spec, db) if target_spec else None
        try:
            return replay_job(replay, target, workload, device=getattr(args, "device", None))
        except (ValueError, OSError) as e:
            raise UserError(f"cannot replay {replay}: {str(e).splitlines()[0]}") from None
    if not target_spec or not workload_spec:
        raise UserError("--target and --workload are required (or --replay FILE)")
    target = target_arg(target_spec, db)
    try:
        return local_job(target, workload)
    except ValueError as e:
        raise UserError(str(e).splitlines()[0]) from None


def _progress(args, label: str, total: int):
    bar = progress_bar(args, total, label, unit="eval")

    def cb(ev: dict) -> None:
        best = fmt_seconds(ev["best"]) if ev["best"] is not None else "-"
        progress_to(bar, ev["evaluations"], f"best so far {best}  new {ev['measurements']}  "
                                            f"answered by DB {ev['cache_hits']}")
    return bar, cb


def tune_one(args, session, job, budget: int, *, cold: bool, seed: int, label: str = "tune", **opt):
    """Run one Tuner of ``session`` (``tunedb.transfer.search.session.TuningSession``) on ``job``
    with the CLI's options and a progress bar; its result (kept by the session)."""
    from tunedb.transfer.search.tuner import TuneOptions

    if getattr(args, "confirm", 2) < 0 or getattr(args, "confirm_rounds", 2) < 0:
        raise UserError("--confirm and --confirm-rounds must be >= 0")
    options = TuneOptions(budget=budget, cold=cold, seed=seed, confirm_top=getattr(args, "confirm", 2),
                          confirm_rounds=getattr(args, "confirm_rounds", 2), **opt)
    bar, cb = _progress(args, label, budget)
    try:
        res = session.run(session.job_tuner(job, options, progress=cb))
    finally:
        bar.close()
    return res


def _store_summary(session, args, **extra) -> str | None:
    """Store the run summary of ``session`` (its Tuner results, the CLI's options); its run_id."""
    opts = {k: getattr(args, k) for k in ("budget", "cold", "seed", "patience", "exact", "replay")
            if getattr(args, k, None) is not None}
    return session.save(cold=args.cold, options=opts, extra=extra)


def run_tune(args) -> int:
    from tunedb.transfer.search.session import TuningSession

    _check_budget(args.budget)
    if args.patience is not None and args.patience < 1:
        raise UserError("--patience must be >= 1 (leave it out to spend the whole budget)")
    db = trusted(args, lambda: open_db(args))
    job = make_job(args, db, args.target, args.workload, args.replay)
    if args.replay:  # a replay answers only from its own file's records (never other files' on the target)
        from tunedb.transfer.measure.replay import isolated_store

        db = isolated_store(db, job.backend.data)
    session = TuningSession(db, "tune", job.target, check_machine=not args.replay)
    res = tune_one(args, session, job, args.budget, cold=args.cold, seed=args.seed, wall_s=args.wall_time,
                   patience=args.patience, use_exact=args.exact)
    out = res.to_json()
    out["target"] = job.target.get("name", "")
    out["run_id"] = _store_summary(session, args, interrupted=res.interrupted)
    lines = [f"target {out['target']}  workload {json.dumps(job.workload)}",
             f"best {best_text(res)}",
             f"     config {json.dumps(res.best_config)}",
             f"measurements {res.measurements} new + {res.remeasurements} re-measurements, "
             f"{res.cache_hits} answered by the DB, stopped by {res.stopped_by}"]
    if res.seeds:
        lines.append("seeded from: " + ", ".join(f"{s['from_target']} ({s['similarity']:.3f})" for s in res.seeds[:5]))
    if session.machine:
        out["machine_check"] = session.machine
        lines.append(machine_line(session.machine))
    emit(args, out, "\n".join(lines))
    return 130 if res.interrupted else 0


def workloads_from_file(path: str) -> list[dict]:
    if not os.path.isfile(path):
        raise UserError(f"cannot read workloads file {path}")
    text = open(path, encoding="utf-8").read()
    if text.lstrip().startswith("["):
        data = load_json_file(path, "workloads")
        if not isinstance(data, list) or not all(isinstance(w, dict) and isinstance(w.get("family"), str)
                                                for w in data):
            raise UserError(f"workloads file {path} must be a JSON list of objects with a 'family'")
        return data
    return [parse_workload(line.strip()) for line in text.splitlines() if line.strip() and not line.startswith("#")]


def run_warm_start(args) -> int:
    from tunedb.transfer.search.session import TuningSession

    _check_budget(args.budget)
    if args.workloads:  # read and checked before the DB is opened (and created)
        from tunedb.transfer.cli.preflight import check_workloads

        workloads = workloads_from_file(args.workloads)
        check_workloads(args, workloads, f"workloads file {args.workloads}")
    db = trusted(args, lambda: open_db(args, must_exist=args.workloads is None))
    target = target_arg(args.target, db)
    if not args.workloads:
        src = target_arg(args.from_target, db)
        from tunedb.index.model.keys import key_of

        skey = key_of(src)
        ents = [e for e in db.entries().to_pylist() if e["target_key"] == skey]
        if not ents:
            raise UserError(f"target {args.from_target!r} has no records in {args.db}")
        workloads = [json.loads(e["workload"]) for e in ents]
    if not workloads:
        raise UserError("no workloads to tune")
    from tunedb.transfer.measure.jobs import local_job

    rows = []
    interrupted = False
    session = TuningSession(db, "warm-start", target)
    for i, w in enumerate(workloads):
        try:
            job = local_job(target, w)
        except ValueError as e:
            raise UserError(str(e).splitlines()[0]) from None
        res = tune_one(args, session, job, args.budget, cold=args.cold, seed=args.seed,
                       label=f"[{i + 1}/{len(workloads)}] {w['family']}")
        rows.append({"workload": job.workload, "best": None if res.best_config is None else
                     {"config": res.best_config, "cost": res.best_cost, "estimate": res.best_estimate,
                      "selection_biased": res.selection_biased},
                     "measurements": res.measurements, "cache_hits": res.cache_hits,
                     "seeds": res.seeds[:3], "history": res.history})
        if res.interrupted:
            interrupted = True
            break
    human = table_text(["workload", "best (estimate, interval, n)", "new", "answered by DB", "seeded from"],
                       [[json.dumps(r["workload"]), best_text(res) if r["best"] else "-",
                         r["measurements"], r["cache_hits"], (r["seeds"][0]["from_target"] if r["seeds"] else "-")]
                        for r, res in zip(rows, session.results)])
    run_id = _store_summary(session, args, interrupted=interrupted)
    emit(args, {"target": target.get("name", ""), "workloads": rows, "run_id": run_id,
                "totals": {"workloads": len(rows), "measurements": sum(r["measurements"] for r in rows),
                           "cache_hits": sum(r["cache_hits"] for r in rows)}, "interrupted": interrupted}, human)
    return 130 if interrupted else 0


def run_predict(args) -> int:
    db = open_db(args, must_exist=True)
    target = target_arg(args.target, db)
    workload = parse_workload(args.workload)
    config = parse_config(args.config)
    from tunedb.transfer.search.costmodel import default_model, training_data

    cfgs, wls, tgs, costs = training_data(db, workload["family"])
    if len(cfgs) < 20:
        raise UserError(f"the DB has {len(cfgs)} ok records of family {workload['family']!r}; "
                        "the cost model needs at least 20")
    model = default_model().fit(cfgs, wls, tgs, costs)
    pred = float(model.predict([config], [workload], [target])[0])
    out = {"target": target.get("name", ""), "workload": workload, "config": config, "predicted_cost": pred,
           "trained_on": {"records": model.n_records_, "targets": len(model.targets_),
                          "target_names": model.targets_},
           "heldout_spearman": model.heldout_spearman_, "model": type(model).__name__}
    emit(args, out, f"predicted {fmt_seconds(pred)} (model trained on {model.n_records_} records of "
                    f"{len(model.targets_)} targets; held-out Spearman {model.heldout_spearman_:.3f})")
    return 0
