"""Store commands: init, stats, best, compact, dedup, forget, invalidate."""

from __future__ import annotations

from tunedb.transfer.cli.util import UserError, emit, fmt_seconds, open_db, parse_workload, table_text, target_arg

TRUST_HELP = ("only records these patterns trust answer: measured, replay, imported[:FORMAT], "
              "migrated[:TARGET], verified, host:NAME (comma-separated)")


def trusted(args, open_it):
    """``open_it()`` (the opened store), or a TrustedStore view of it when ``--trust`` was given.
    The policy is parsed first: a bad one is a UserError and no store is opened (or created)."""
    from tunedb.index.views.trust import parse_trust, trusted_view

    policy = None
    if getattr(args, "trust", None) is not None:
        try:
            policy = parse_trust(args.trust)
        except ValueError as e:
            raise UserError(f"--trust: {e}") from None
    return trusted_view(open_it(), policy)


def register(sub, common) -> None:
    p = sub.add_parser("init", parents=[common], help="create an empty database directory")
    p.set_defaults(func=run_init)
    p = sub.add_parser("stats", parents=[common], help="records, targets, workloads, files, size")
    p.set_defaults(func=run_stats)
    p = sub.add_parser("best", parents=[common], help="the k best configs of a (target, workload)")
    p.add_argument("--target", required=True, help="a target of the database: its name or key (tunedb workloads lists them)")
    p.add_argument("--workload", required=True,
                   help="family:key=value,..., a JSON object or a JSON file (tunedb workloads prints them)")
    p.add_argument("-k", type=int, default=1, help="how many configs to show (default 1)")
    p.add_argument("--trust", metavar="PATTERNS", help=TRUST_HELP)
    p.set_defaults(func=run_best)
    p = sub.add_parser("compact", parents=[common], help="merge small files per target")
    p.set_defaults(func=run_compact)
    p = sub.add_parser("dedup", parents=[common], help="remove repeated identical measurements")
    p.set_defaults(func=run_dedup)
    p = sub.add_parser("forget", parents=[common], help="retention: top-k, age, or a whole target")
    p.add_argument("--keep-top", type=int, metavar="K", help="keep only the K best configs of every entry")
    p.add_argument("--older-than", type=float, metavar="DAYS", help="remove records older than DAYS days")
    p.add_argument("--target", help="remove every record of this target (name or key)")
    p.set_defaults(func=run_forget)
    p = sub.add_parser("invalidate", parents=[common], help="mark a target stale (toolchain upgrade)")
    p.add_argument("--target", required=True, help="the target to mark stale (name or key)")
    p.set_defaults(func=run_invalidate)


def run_init(args) -> None:
    db = open_db(args)
    emit(args, {"path": str(db.path), "records": len(db)}, f"tunedb database at {db.path} ({len(db)} records)")


def run_stats(args) -> None:
    """``tunedb stats``: the store's counts, eta (tasks answered by the DB over tasks, summed
    over the stored model and warm-start runs) with T_full, T_query and T_total = T_full (1 -
    eta) + T_query (``tunedb.transfer.apps.rundata.eta_totals``), and beside it the evaluation
    hit rate of all stored runs (cache hits / evaluations, ``runlog.run_hit_rate``)."""
    from tunedb.transfer.apps.rundata import eta_text, eta_totals
    from tunedb.transfer.search.runlog import run_hit_rate

    db = open_db(args, must_exist=True)
    s = db.stats().to_dict()
    runs = db.runs()
    hits, evals = run_hit_rate(runs)
    eta = eta_totals(runs)
    s["hit_rate_this_process"] = s.pop("hit_rate")
    s["lookups_this_process"] = s.pop("lookups")
    s["hits_this_process"] = s.pop("hits")
    s["eta_all_runs"] = eta["eta"]
    s["tasks_answered_all_runs"] = eta["answered"]
    s["tasks_all_runs"] = eta["tasks"]
    s["t_full_s_all_runs"] = eta["t_full_s"]
    s["t_query_s_all_runs"] = eta["query_s"]
    s["t_total_predicted_s_all_runs"] = eta["t_total_predicted_s"]
    s["t_total_s_all_runs"] = eta["t_total_s"]
    s["hit_rate_all_runs"] = hits / evals if evals else None
    s["evaluations_all_runs"] = evals
    s["cache_hits_all_runs"] = hits
    labels = {"hit_rate_this_process": "hit rate (this process)", "lookups_this_process": "lookups (this process)",
              "hits_this_process": "hits (this process)",
              "eta_all_runs": "eta (tasks answered by DB)", "t_total_predicted_s_all_runs": "T_total",
              "hit_rate_all_runs": "evaluation hit rate",
              "evaluations_all_runs": "evaluations (all runs)", "cache_hits_all_runs": "cache hits (all runs)"}
    folded = {"tasks_answered_all_runs", "tasks_all_runs", "t_full_s_all_runs", "t_query_s_all_runs",
              "t_total_s_all_runs", "stale_targets", "offline"}

    def show(k: str, v: object) -> str:
        if k == "eta_all_runs":  # the seeds' eta: tasks answered directly by the DB / tasks
            return f"{eta_text(eta['answered'], eta['tasks'])} (model and warm-start runs: {eta['runs']})"
        if k == "t_total_predicted_s_all_runs":
            return (f"T_full (1 - eta) + T_query = {fmt_seconds(eta['t_full_s'])} x (1 - eta) + "
                    f"{fmt_seconds(eta['query_s'])} = {fmt_seconds(v)} (measured {fmt_seconds(eta['t_total_s'])})")
        if k == "hit_rate_all_runs":  # the hit rate of docs/runs.md: cache hits / evaluations of the searches
            return ("- (no evaluations)" if v is None else f"{v * 100:.1f} % ({hits}/{evals} evaluations)") \
                + ", all stored runs"
        if k.startswith("hit_rate"):
            return "-" if v is None else f"{v * 100:.1f} %"
        return str(v)
    human = "\n".join(f"{labels.get(k, k):>26}: {show(k, v)}" for k, v in s.items() if k not in folded)
    if s.get("offline"):
        human += f"\n{'offline':>26}: yes: the server cannot be reached; these answers come from the local cache"
    emit(args, s, human)


def _target_in_db(args, db, spec: str) -> dict:
    t = target_arg(spec, db)
    from tunedb.index.model.keys import key_of

    tkey = key_of(t)
    if not any(x["target_key"] == tkey for x in db.targets()):
        raise UserError(f"target {spec!r} has no records in {args.db}")
    return t


def ci_cell(est) -> str:
    """An estimate's interval for a column headed "95 % CI": the range when it is a 95 %
    interval, else the range with its own level (``185-263 us (72 % CI)``, the label of
    ``tunedb.index.model.estimate.ci_label``), ``-`` without one."""
    from tunedb.index.model.estimate import LEVEL, ci_label

    if not est.has_interval:
        return "-"
    text = est.interval_text().split(" CI ", 1)[1]
    return text if est.coverage >= LEVEL - 1e-9 else f"{text} ({ci_label(est.coverage)})"


def ci_text(est) -> str:
    """``202 us (95 % CI 185-263 us, n=2, confirmed, noisy)``: the estimate, its interval labelled by
    ``tunedb.index.model.estimate.ci_label`` (95 % CI, or its own lower level), n and the flags."""
    from tunedb.index.model.estimate import ci_label

    n = f"n={est.records}" if est.records != 1 else f"n=1, {est.samples} repeats"
    extra = ", confirmed" if est.basis == "confirmed" else ""
    ci = f"{ci_label(est.coverage)} {ci_cell(est).split(' (')[0]}" if est.has_interval else "no interval"
    return f"{fmt_seconds(est.value)} ({ci}, {n}{extra}" + (", noisy)" if est.noisy else ")")


def compare_command(target: str, workload: str, a: dict, b: dict) -> str:
    """The ``tunedb compare`` command line that decides A against B (shell-quoted)."""
    import json
    import shlex

    def cfg(c: dict) -> str:
        return shlex.quote(json.dumps(c, sort_keys=True, separators=(",", ":")))
    return (f"tunedb compare --target {shlex.quote(target)} --workload {shlex.quote(workload)} "
            f"--config {cfg(a)} --config {cfg(b)}")


def run_best(args) -> None:
    """``tunedb best``: the entry's configs in answer order (``tunedb.index.contract.decisions.answer``:
    stored decisions first, then intervals entirely below, then the estimator's ranking), the
    first ``k`` plus the configs tied with the first and the first config's challenger when
    they are below them; and the config ``tune-model`` answers the entry with
    (:func:`model_answer_of`, ``model_answer``): #1 when a decision made it the answer over the
    family's default, else the default, with why."""
    from tunedb.index.contract.decisions import answer

    if args.k < 1:
        raise UserError("-k must be >= 1")
    db = trusted(args, lambda: open_db(args, must_exist=True))
    target = target_arg(args.target, db)
    workload = parse_workload(args.workload)
    from tunedb.index.model.keys import key_of

    in_db = any(x["target_key"] == key_of(target) for x in db.targets())
    ans = answer(db, target, workload) if in_db else None
    if ans is None or not ans.ranked:  # no record of this entry: the configs predicted for it
        run_best_predicted(args, db, target, workload)
        return
    rank_of = {r.cost.config_key: i + 1 for i, r in enumerate(ans.ranked)}
    shown = list(ans.top(args.k))
    if ans.ranked:  # the configs tied with the first are shown with it, whatever -k
        shown += [r for r in ans.ranked if r.cost.config_key in ans.ranked[0].tied and r not in shown]
    ch = ans.challenger
    if ch is not None and ch not in shown:
        shown.append(ch)
    head = ans.ranked[0] if ans.ranked else None

    def flags(r) -> str:
        e = r.cost.estimate
        words = [w for w, on in (("noisy", e.noisy), ("confirmed", e.basis == "confirmed"),
                                 ("kept by tune-model", r.kept), ("challenger", r is ch)) if on]
        words += [f"tied with #{rank_of[k]}" for k in r.tied if k in rank_of]
        return ", ".join(words)
    rows = [{"rank": rank_of[r.cost.config_key], "config": r.cost.config, "config_key": r.cost.config_key,
             "cost": r.cost.estimate.value, "estimate": r.cost.estimate.to_dict(), "source": r.cost.record.source,
             "record_id": r.cost.record.record_id, "tied_with": sorted(rank_of[k] for k in r.tied if k in rank_of),
             "kept": r.kept, "decided": list(r.decided), "challenger": r is ch} for r in shown]
    human = table_text(["rank", "cost", "95 % CI", "n", "statistic", "", "source", "config"],
                       [[rank_of[r.cost.config_key], fmt_seconds(r.cost.estimate.value), ci_cell(r.cost.estimate),
                         r.cost.estimate.records, r.cost.estimate.statistic_text(), flags(r), r.cost.record.source,
                         r.cost.config] for r in shown])
    note = ("\ncost: each ok record's value is the statistic its tuner computes (Kernel Tuner, AutoTVM and "
            "MetaSchedule records: the mean of their runs; tunedb's own measurements: the median), and a "
            "config's cost is the median of its n records' values; 95 % CI: its "
            "confidence interval (a lower level is written beside the range)"
            "\norder: a stored decision (tunedb compare, tune-model's tuned-vs-default test) first, then an "
            "interval entirely below another's, then confirmed configs (re-measured after they were chosen) "
            "before the others, by cost")
    for d in (head.decided if head is not None else []):
        note += f"\n#1 stands by a stored decision: {d}"
    settle = None
    if ch is not None and head is not None:
        settle = compare_command(args.target, args.workload, ch.cost.config, head.cost.config)
        note += (f"\nunsettled: #{rank_of[ch.cost.config_key]} {ci_text(ch.cost.estimate)} has a lower estimate "
                 f"than #1 {ci_text(head.cost.estimate)}, and no stored decision or non-overlapping interval "
                 f"says which is faster; measure both again: {settle}")
    model = model_answer_of(db, target, workload)
    if model is not None:
        rank = rank_of.get(model["config_key"])
        where = f"#{rank}" if rank else "a config not ranked here"
        if head is not None and model["config_key"] == head.cost.config_key:
            note += f"\ntune-model: a model answers this entry with #1 ({model['why']})"
        else:
            note += (f"\ntune-model: a model answers this entry with the default config, {where} ({model['why']}); "
                     "#1 replaces it once a paired decision says it is faster: "
                     + compare_command(args.target, args.workload, head.cost.config, model["config"]))
    payload = {"target": target, "workload": workload, "configs": rows, "records": rows,
               "challenger": None if ch is None else {"rank": rank_of[ch.cost.config_key], "settle": settle},
               "decisions": [vars(d) for d in ans.decisions], "model_answer": model}
    emit(args, payload, human + note)


def model_answer_of(db, target: dict, workload: dict) -> dict | None:
    """The config ``tune-model`` uses for this entry (``tunedb.transfer.apps.tune_model.task_answer``:
    the first config when it is the family's default or a stored paired decision puts it above
    the default, else the default): ``{config, config_key, cost (s), decided, verdict, why,
    undecided (the first config when it is undecided, else None)}``; None when tunedb does not
    know the workload's family or the entry has no ok record."""
    from tunedb.index.model.keys import key_of
    from tunedb.transfer.apps.tune_model import task_answer

    default = family_default(workload, target)
    ta = None if default is None else task_answer(db, target, workload, default)
    if ta is None:
        return None
    return {"config": ta.config, "config_key": key_of(ta.config),
            "cost": None if ta.estimate is None else ta.estimate.value, "decided": ta.decided,
            "verdict": ta.verdict, "why": ta.why, "undecided": ta.candidate}


def run_best_predicted(args, db, target: dict, workload: dict) -> None:
    """``tunedb best`` for an entry with no records: the configs predicted from the nearest
    entries (``RecordStore.predict_best``), each marked predicted with where it came from; when
    nothing near enough is stored, it says so (exit 0, no config).  UserError when no entry of
    the workload's family is stored at all.  The family's default config for the target (when
    tunedb knows the family) is among the candidates, scored on the same evidence."""
    pred = db.predict_best(target, workload, k=args.k, default=family_default(workload, target))
    if not pred.neighbours:
        raise UserError(f"{args.target!r} has no records of {args.workload!r} in {args.db}, and no entry of the "
                        f"family {workload.get('family')!r} is stored to predict from")
    payload = {"target": target, "workload": workload, **pred.to_dict()}
    head = (f"no records of this entry: configs predicted from the {len(pred.neighbours)} nearest entries "
            "(not measured here; `tunedb tune` measures them first)")
    if not pred.trusted:
        emit(args, payload, f"no records of this entry, and no prediction: {pred.reason}")
        return
    human = table_text(["rank", "score", "", "predicted from", "config"],
                       [[i + 1, f"{c.score:.3f}", "predicted", c.source, c.config] for i, c in enumerate(pred.configs)])
    note = ("\nscore: the similarity-weighted mean, over the nearest entries, of each config's speed relative to "
            "that entry's best config (1.000 = the best config on every one of them)")
    emit(args, payload, head + "\n" + human + note)


def family_default(workload: dict, target: dict) -> dict | None:
    """The default config of ``workload``'s kernel family for ``target``; None when tunedb does
    not know the family (an imported Kernel Tuner or TVM workload) or the workload is not one of
    its valid workloads."""
    from tunedb.transfer.kernels import default_config

    try:
        return default_config(workload, target)
    except ValueError:
        return None


def run_compact(args) -> None:
    db = open_db(args, must_exist=True)
    st = db.compact()
    emit(args, st, f"compacted {st['partitions']} partition(s): {st['files_before']} -> {st['files_after']} files")


def run_dedup(args) -> None:
    db = open_db(args, must_exist=True)
    st = db.dedup()
    emit(args, st, f"removed {st['removed']} repeated measurement(s)")


def run_forget(args) -> None:
    if args.keep_top is None and args.older_than is None and args.target is None:
        raise UserError("forget needs --keep-top, --older-than or --target")
    if args.keep_top is not None and args.keep_top < 0:
        raise UserError("--keep-top must be >= 0")
    if args.older_than is not None and args.older_than < 0:
        raise UserError("--older-than must be >= 0")
    db = open_db(args, must_exist=True)
    target = _target_in_db(args, db, args.target) if args.target else None
    st = db.forget(keep_top=args.keep_top, older_than_days=args.older_than, target=target)
    emit(args, st, f"removed {st['removed']} record(s)")


def run_invalidate(args) -> None:
    db = open_db(args, must_exist=True)
    target = _target_in_db(args, db, args.target)
    key = db.invalidate(target)
    emit(args, {"target_key": key, "invalidated": True}, f"target {args.target} ({key[:12]}) marked stale")
