"""Measuring commands: ``measure`` (one config, DB first), ``compare`` (is config A faster than config
B: interleaved rounds, a stated test) and ``space`` (a workload's schedule space)."""

from __future__ import annotations

import json

from tunedb.transfer.cli.util import UserError, emit, fmt_seconds, open_db, parse_config, parse_workload, target_arg


def register(sub, common) -> None:
    p = sub.add_parser("measure", parents=[common], help="measure one config on a local target (DB first)")
    p.add_argument("--target", required=True, help="target: preset (cpu-native, cpu-x86-64-v3-t2, ...) or DB name/key")
    p.add_argument("--workload", required=True, help="family:key=value,... e.g. matmul:M=256,N=256,K=256")
    p.add_argument("--config", required=True, help="config JSON object (inline or a file)")
    p.add_argument("--repeat", type=int, default=5, help="timed repeats (default 5)")
    p.add_argument("--min-repeat-ms", type=float, default=20.0, help="minimum length of one repeat (default 20 ms)")
    p.add_argument("--build-timeout", type=float, default=120.0, help="compiler time limit in seconds")
    p.add_argument("--run-timeout", type=float, default=60.0, help="run time limit in seconds")
    p.add_argument("--force", action="store_true", help="measure again even when the DB has the triple")
    p.set_defaults(func=run_measure)
    p = sub.add_parser("compare", parents=[common],
                       help="is config A faster than config B on a local target? interleaved re-measurement rounds")
    p.add_argument("--target", required=True, help="a local preset (cpu-native-t1, ...)")
    p.add_argument("--workload", required=True, help="family:key=value,...")
    p.add_argument("--config", required=True, action="append", metavar="CONFIG",
                   help="config JSON object (inline or a file); give it twice: A, then B")
    p.add_argument("--margin", type=float, default=0.05,
                   help="equivalence margin: within this fraction the two count as equivalent (default 0.05)")
    p.add_argument("--max-rounds", type=int, default=12, help="the most interleaved rounds (default 12)")
    p.set_defaults(func=run_compare)
    p = sub.add_parser("space", parents=[common], help="knobs, values, constraints and size of a schedule space")
    p.add_argument("--workload", required=True, help="family:key=value,...")
    p.set_defaults(func=run_space)


def run_measure(args) -> int:
    from tunedb.transfer.measure.backend import LocalBackend, MeasureOptions, TimingProtocol, measure

    if args.repeat < 1 or args.min_repeat_ms < 0 or args.build_timeout <= 0 or args.run_timeout <= 0:
        raise UserError("--repeat must be >= 1, --min-repeat-ms >= 0 and timeouts > 0")
    workload = parse_workload(args.workload)
    config = parse_config(args.config)
    db = open_db(args)
    target = target_arg(args.target, db)
    opts = MeasureOptions(protocol=TimingProtocol(repeat=args.repeat, min_repeat_ms=args.min_repeat_ms),
                          build_timeout_s=args.build_timeout, run_timeout_s=args.run_timeout)
    try:
        rec, cached = measure(target, workload, config, db=db, backend=LocalBackend(opts), force=args.force)
    except ValueError as e:
        raise UserError(str(e).splitlines()[0]) from None
    from tunedb.index.model.estimate import record_value

    est = db.cost(rec.target, rec.workload, rec.config) if rec.status == "ok" else None
    payload = {"config": rec.config, "measurement": record_value(rec), "costs": list(rec.costs),
               "status": rec.status, "error": rec.error, "compile_s": rec.compile_s, "cached": cached,
               "target": rec.target_name, "workload": rec.workload, "cv": rec.meta.get("cv"),
               "noisy": rec.meta.get("noisy"), "gflops": rec.meta.get("gflops"),
               "cost": None if est is None else est.value, "estimate": None if est is None else est.to_dict()}
    if rec.status == "ok":
        gf = rec.meta.get("gflops")
        human = (f"{rec.status}: this measurement {fmt_seconds(record_value(rec))} per run (median of "
                 f"{len(rec.costs)} repeats"
                 + (f", cv {rec.meta['cv'] * 100:.1f} %" if isinstance(rec.meta.get("cv"), (int, float)) else "")
                 + ")" + (f", {gf:.2f} GFLOP/s" if isinstance(gf, (int, float)) else "")
                 + (" (answered by the DB)" if cached else "")
                 + (f"\nthe config's cost over all its records: {est.text()}" if est is not None else ""))
    else:
        human = f"{rec.status}: {rec.error}" + (" (cached)" if cached else "")
    emit(args, payload, human)
    return 0


def run_compare(args) -> int:
    """``tunedb compare``: A vs B by :func:`tunedb.transfer.measure.compare.compare` (question
    "sign"); every round's two measurements are committed (``meta.origin = "compare"``), and a
    decided verdict (faster, slower, equivalent) is stored (``tunedb.index.contract.decisions``) for
    ``tunedb best`` to follow.  The text gives the rounds' medians (what the test compared) apart
    from the configs' DB estimates (all their records)."""
    from tunedb.index.contract.decisions import store_decision
    from tunedb.index.model.estimate import record_value
    from tunedb.transfer.cli.commands.store import ci_text
    from tunedb.transfer.measure.backend import lookup_or_measure
    from tunedb.transfer.measure.compare import LOOKS, compare, decision_of, interleaved, round_medians
    from tunedb.transfer.measure.jobs import local_job

    if len(args.config) != 2:
        raise UserError("compare needs --config twice: A, then B")
    if not 0 <= args.margin < 1 or args.max_rounds < 3:
        raise UserError("--margin must be in [0, 1) and --max-rounds >= 3")
    workload = parse_workload(args.workload)
    a, b = (parse_config(c) for c in args.config)
    db = open_db(args)
    target = target_arg(args.target, db)
    try:
        job = local_job(target, workload)
        a, b = job.space.validate(a), job.space.validate(b)
    except ValueError as e:
        raise UserError(str(e).splitlines()[0]) from None

    def measure_one(cfg: dict) -> float | None:
        (rec, _), = lookup_or_measure(db, job.backend, job.target, job.workload, [cfg], force=True,
                                      annotate=lambda _i: {"origin": "compare"})
        return record_value(rec)

    looks = tuple(x for x in LOOKS if x <= args.max_rounds) or (args.max_rounds,)
    res = compare(interleaved(lambda: measure_one(a), lambda: measure_one(b)), question="sign",
                  margin=args.margin, looks=looks)
    decision_id = store_decision(db, decision_of(res, job.target, job.workload, a, b, by="compare")) \
        if res.verdict != "inconclusive" else None
    ea, eb = db.cost(job.target, job.workload, a), db.cost(job.target, job.workload, b)
    ma, mb = round_medians(res)
    payload = {"target": job.target.get("name", ""), "workload": job.workload, "a": a, "b": b,
               "comparison": res.to_dict(), "round_median_a": ma, "round_median_b": mb,
               "a_estimate": ea and ea.to_dict(), "b_estimate": eb and eb.to_dict(), "decision_id": decision_id}
    if res.ratio is None:
        human = f"inconclusive: {res.reason}"
    else:
        word = {"faster": "A is faster than B", "slower": "A is slower than B",
                "equivalent": f"A and B are equivalent (within {args.margin * 100:g} %)",
                "inconclusive": "inconclusive"}[res.verdict]
        follows = {"faster": "A ranks above B", "slower": "B ranks above A",
                   "equivalent": "A and B are shown as tied", "inconclusive": ""}[res.verdict]
        human = (f"{word}: {res.percent_text('A', 'B')}"
                 + (f"; {res.reason}" if res.reason else "")
                 + f"\nthese rounds: A median {fmt_seconds(ma)}, B median {fmt_seconds(mb)} (what the test compared)"
                 + "\nDB estimates (every record of the config, earlier measurements included): "
                 + f"A {ci_text(ea) if ea else '-'}; B {ci_text(eb) if eb else '-'}"
                 + (f"\ndecision stored: tunedb best follows it ({follows})" if decision_id else "")
                 + "\ntest: paired t-interval on the log ratios of interleaved rounds, "
                   f"{res.level * 100:.0f} % over all looks ({', '.join(map(str, looks))} rounds)")
    emit(args, payload, human)
    return 0


def run_space(args) -> int:
    from tunedb.transfer.kernels import family_of

    workload = parse_workload(args.workload)
    try:
        fam = family_of(workload)
    except ValueError as e:
        return _stored_space(args, workload, str(e).splitlines()[0])
    try:
        w = fam.validate_workload(workload)
        sp = fam.space(w)
    except ValueError as e:
        raise UserError(str(e).splitlines()[0]) from None
    info = sp.to_json()
    payload = {"family": fam.name, "workload": w, "knobs": info["knobs"], "constraints": info["constraints"],
               "size": info["size"], "default": fam.default_config(w)}
    lines = [f"{fam.name} schedule space ({info['size']} valid configs)"]
    for k in info["knobs"]:
        lines.append(f"  {k['name']:>8}: {json.dumps(k['values'])}" + (f"  # {k['doc']}" if k.get("doc") else ""))
    for c in info["constraints"]:
        lines.append(f"  constraint: {c}")
    lines.append(f"  default: {json.dumps(payload['default'], sort_keys=True)}")
    emit(args, payload, "\n".join(lines))
    return 0


def _stored_space(args, workload: dict, why: str) -> int:
    """``space`` of a family tunedb has no definition of (an imported Kernel Tuner kernel, a
    TVM task): the knobs and values its records in the DB hold, said to be only that -- which
    configs are valid, and how many there are, is the tuner's knowledge, not the DB's.  A
    workload the DB holds no record of: UserError naming why (``why``: the family lookup's
    error)."""
    db = open_db(args, must_exist=True)
    t = db.records(workload=workload, columns=["config", "status", "target_name"])
    if t.num_rows == 0:
        raise UserError(f"{why}; and the DB holds no record of this workload, so its space is unknown")
    values: dict[str, set] = {}
    configs = set()
    for text in t.column("config").to_pylist():
        configs.add(text)
        for k, v in json.loads(text).items():
            values.setdefault(k, set()).add(json.dumps(v, sort_keys=True))
    knobs = [{"name": k, "values": sorted((json.loads(v) for v in vs), key=_value_order)}
             for k, vs in sorted(values.items())]
    targets = sorted(set(t.column("target_name").to_pylist()))
    payload = {"family": workload.get("family"), "workload": workload, "knobs": knobs, "constraints": None,
               "size": None, "stored_configs": len(configs), "targets": targets, "default": None,
               "source": "records"}
    lines = [f"{workload.get('family')} schedule space as stored: {len(configs)} distinct configs measured on "
             f"{len(targets)} target(s); tunedb has no definition of this family, so the valid configs, their "
             f"number and the default are unknown"]
    for k in knobs:
        lines.append(f"  {k['name']:>8}: {json.dumps(k['values'])}")
    emit(args, payload, "\n".join(lines))
    return 0


def _value_order(v: object) -> tuple:
    """Numbers first, in order; then everything else by its JSON text."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (0, float(v), "")
    return (1, 0.0, json.dumps(v, sort_keys=True))
