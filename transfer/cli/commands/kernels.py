"""Kernel commands: ``measure`` (one config, DB first) and ``space`` (a workload's schedule space)."""

from __future__ import annotations

import json

from tunedb.transfer.cli.util import UserError, emit, fmt_seconds, open_db, parse_config, parse_workload, resolve_target


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
    target = resolve_target(args.target, db)
    opts = MeasureOptions(protocol=TimingProtocol(repeat=args.repeat, min_repeat_ms=args.min_repeat_ms),
                          build_timeout_s=args.build_timeout, run_timeout_s=args.run_timeout)
    try:
        rec, cached = measure(target, workload, config, db=db, backend=LocalBackend(opts), force=args.force)
    except ValueError as e:
        raise UserError(str(e).splitlines()[0]) from None
    payload = {"config": rec.config, "cost": rec.cost, "costs": list(rec.costs), "status": rec.status,
               "error": rec.error, "compile_s": rec.compile_s, "cached": cached,
               "target": rec.target_name, "workload": rec.workload, "cv": rec.meta.get("cv"),
               "noisy": rec.meta.get("noisy"), "gflops": rec.meta.get("gflops")}
    if rec.status == "ok":
        gf = rec.meta.get("gflops")
        human = (f"{rec.status}: {fmt_seconds(rec.cost)} per run"
                 + (f", {gf:.2f} GFLOP/s" if isinstance(gf, (int, float)) else "")
                 + (f", cv {rec.meta['cv']:.3f}" if isinstance(rec.meta.get("cv"), (int, float)) else "")
                 + (" (cached)" if cached else ""))
    else:
        human = f"{rec.status}: {rec.error}" + (" (cached)" if cached else "")
    emit(args, payload, human)
    return 0


def run_space(args) -> int:
    from tunedb.transfer.kernels import family_of

    workload = parse_workload(args.workload)
    try:
        fam = family_of(workload)
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
