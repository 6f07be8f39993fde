"""Retrieval commands: ``nearest`` (most similar historical entries and their best configs)
and ``targets`` (local presets, DB targets and catalog devices; ``--resolve`` a device string;
``--probe`` this machine's GPUs and CPU)."""

from __future__ import annotations

import os
import sys
import warnings

from tunedb.transfer.cli.util import UserError, emit, open_db, parse_workload, target_arg


def register(sub, common) -> None:
    p = sub.add_parser("nearest", parents=[common], help="most similar (target, workload) entries and their best configs")
    p.add_argument("--target", required=True, help="DB target name/key, preset, catalog device or JSON file")
    p.add_argument("--workload", required=True, help="family:key=value,... or a JSON file")
    p.add_argument("-k", type=int, default=5, help="number of matches (default 5)")
    p.add_argument("--best", type=int, default=3, metavar="N", help="best configs per match (default 3)")
    p.add_argument("--min-similarity", type=float, default=None, help="drop matches below this cosine")
    p.add_argument("--all-families", action="store_true", help="also match entries of other workload families")
    p.add_argument("--exclude-target", action="store_true", help="never match the query's own target")
    w = p.add_mutually_exclusive_group()
    w.add_argument("--hardware-only", action="store_true", help="rank by hardware similarity only")
    w.add_argument("--workload-only", action="store_true", help="rank by workload similarity only")
    w.add_argument("--weights", metavar="HW,WL", help="weights of hardware and workload similarity, e.g. 0.7,0.3")
    p.add_argument("--index", choices=("auto", "flat", "hnsw"), default="auto", help="vector index kind")
    p.set_defaults(func=run_nearest)

    p = sub.add_parser("targets", parents=[common], help="local presets, DB targets and catalog devices")
    p.add_argument("--resolve", metavar="NAME", help="resolve a device string to its catalog row")
    p.add_argument("--file-hint", metavar="FILE", help="file name beside the device string (e.g. MI250X.json.gz)")
    p.add_argument("--probe", action="store_true",
                   help="describe this machine's GPUs (NVML, AMD SMI or sysfs) and CPU (archspec); no GPU: one "
                        "line saying so, exit 0")
    p.set_defaults(func=run_targets)


def _weights(args):
    if args.hardware_only:
        return "hardware"
    if args.workload_only:
        return "workload"
    if args.weights:
        parts = args.weights.split(",")
        try:
            vals = [float(x) for x in parts]
        except ValueError:
            raise UserError(f"--weights {args.weights!r}: expected two numbers HW,WL") from None
        if len(vals) != 2:
            raise UserError(f"--weights {args.weights!r}: expected two numbers HW,WL")
        return tuple(vals)
    return None


def run_nearest(args) -> None:
    """``tunedb nearest``: the ``-k`` most similar entries, each with its ``--best`` best configs
    by the one cost estimator (``db.best_costs``).  ``--json``: ``{"target", "workload",
    "matches": [Match.to_dict()]}`` (each best config with ``cost`` = the estimate's value in
    seconds and ``estimate`` = ``CostEstimate.to_dict()``); text: one line per match with the
    best config's ``CostEstimate.text()``."""
    if args.k < 1:
        raise UserError("-k must be >= 1")
    if args.best < 0:
        raise UserError("--best must be >= 0")
    if args.min_similarity is not None and not -1.0 <= args.min_similarity <= 1.0:
        raise UserError("--min-similarity must be in [-1, 1]")
    db = open_db(args, must_exist=True)
    if len(db) == 0:
        raise UserError(f"no records in {args.db}: nothing to search (tunedb import or tunedb tune first)")
    target = target_arg(args.target, db)
    workload = parse_workload(args.workload)
    from tunedb.index.retrieval.nearest import nearest

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            matches = nearest(db, target, workload, args.k, same_family=not args.all_families,
                              min_similarity=args.min_similarity, weights=_weights(args),
                              exclude_target=args.exclude_target, best_n=args.best,
                              index_kind=None if args.index == "auto" else args.index)
    except ValueError as e:
        raise UserError(str(e).splitlines()[0]) from None
    for w in caught:
        if issubclass(w.category, UserWarning):
            sys.stderr.write(f"tunedb: warning: {str(w.message).splitlines()[0]}\n")
    payload = {"target": target, "workload": workload, "matches": [m.to_dict() for m in matches]}
    lines = []
    for i, m in enumerate(matches, 1):
        # the entry's best config by the one estimator: its cost with n and interval
        costs = m.config_costs()
        best = costs[0] if costs else None
        cost = best.estimate.text() if best is not None else "-"
        lines.append(f"{i:>2}. {m.similarity:.4f} (hw {m.hw_similarity:.3f} + wl {m.wl_similarity:.3f})  "
                     f"{m.target_name}  {_wl_text(m.workload)}  best {cost}  {best.config if best else ''}")
    emit(args, payload, "\n".join(lines) if lines else "no similar entries")


def _wl_text(w: dict) -> str:
    rest = ",".join(f"{k}={v}" for k, v in sorted(w.items()) if k != "family" and not isinstance(v, (list, dict)))
    return f"{w.get('family')}:{rest}" if rest else str(w.get("family"))


def _fmt(v, unit: str = "") -> str:
    return "-" if v is None else f"{v}{unit}"


def run_probe(args) -> None:
    """``targets --probe``: a table of this machine's GPUs (or the line ``no GPU found (NVML:
    ...; AMD: ...)``), then one CPU line (``tunedb.index.hardware.probe.cpu_line``: model,
    usable cores, ISA level, vector width, SIMD flags, caches, microarchitecture, presets);
    ``--json``: ``{"gpus", "reasons", "cpu"}``, see ``tunedb.index.hardware.probe``; the AMD
    sysfs fallback reads ``$TUNEDB_SYSFS_ROOT`` instead of ``/sys`` when set.  Exit 0 either way."""
    from tunedb.index.hardware.probe import cpu_line, no_gpu_line, probe

    got = probe(os.environ.get("TUNEDB_SYSFS_ROOT") or "/sys")  # another sysfs tree: tests, containers
    gpus, cpu = got["gpus"], got["cpu"]
    if not gpus:
        emit(args, got, no_gpu_line(got["reasons"]) + "\n" + cpu_line(cpu))
        return
    from tunedb.transfer.cli.util import table_text

    rows = [[g["vendor"], g["index"], g["name"], g.get("architecture") or "-",
             g.get("compute_capability") or g.get("isa") or "-", _fmt(g.get("compute_units")),
             f"{_fmt(g.get('clock_mhz'))}/{_fmt(g.get('clock_max_mhz'))}",
             "-" if g.get("memory_bytes") is None else f"{g['memory_bytes'] / 2**30:.1f} GiB",
             "-" if g.get("bandwidth_gbs") is None else f"{g['bandwidth_gbs']:.0f} GB/s ({g['bandwidth_source']})",
             g.get("driver") or "-", g["catalog"]["name"] if g["catalog"]["matched"] != "fallback" else "-"]
            for g in gpus]
    table = table_text(["vendor", "#", "name", "architecture", "cc/isa", "SMs/CUs", "clock MHz (now/max)", "memory",
                        "bandwidth", "driver", "catalog"], rows)
    emit(args, got, table + "\n" + cpu_line(cpu))


def run_targets(args) -> None:
    from tunedb.index.hardware import catalog
    from tunedb.index.hardware.localcpu import host_uarch, preset, preset_names

    if getattr(args, "probe", False):
        run_probe(args)
        return
    if args.resolve is not None:
        r = catalog.resolve(args.resolve, args.file_hint, warn=False)
        if r.matched == "fallback":
            sys.stderr.write(f"tunedb: warning: {args.resolve!r} is not in the hardware catalog; inferred from its "
                             f"tokens: kind={r.kind}, vendor={r.vendor}, family={r.family}\n")
        d = r.to_json_dict()
        human = (f"{args.resolve!r} -> {d['name']}  [{d['matched']}]\n  kind {d['kind']}, vendor {d['vendor']}, "
                 f"architecture {d['architecture']}, family {d['family']}")
        emit(args, d, human)
        return
    presets = [{"name": n, "target": preset(n)} for n in preset_names()]
    db_targets = []
    if os.path.isdir(args.db):
        db = open_db(args)
        db_targets = [{"target_name": t["target_name"], "target_key": t["target_key"], "records": t["records"],
                       "kind": t["target"].get("kind")} for t in db.targets()]
    devs = [{"name": r["name"], "kind": r["kind"], "vendor": r["vendor"], "architecture": r["architecture"],
             "family": r["family"]} for r in catalog.devices()]
    lines = [f"presets (this machine, {host_uarch()}):"] + [
        f"  {p['name']}  vector_bits={p['target']['vector_bits']} threads={p['target']['threads']} "
        f"-march={p['target']['march']}" for p in presets]
    if db_targets:
        lines += [f"database targets ({args.db}):"] + [f"  {t['target_name']}  {t['target_key'][:12]}  "
                                                        f"{t['records']} records" for t in db_targets]
    lines += [f"catalog devices ({len(devs)}):"] + [f"  {d['name']}  [{d['kind']}, {d['vendor']}, "
                                                    f"{d['architecture']}]" for d in devs]
    emit(args, {"host_uarch": host_uarch(), "presets": presets, "db": db_targets, "catalog": devs}, "\n".join(lines))
