"""``tunedb verify``: re-measure the imported/migrated best records of a target and mark them.

``tunedb verify --target T [--workload W ...] [--top-k K] [--replay FILE [--device NAME]]
[--tolerance X] [--attempts N] [--json]``

Measures on T itself: a local preset of this CPU through the local backend, or, with
``--replay FILE``, a Kernel Tuner cache of the device replayed as the GPU (as ``tunedb tune
--replay`` does; the file must be of T's device and then only its kernel's entry is checked).
See ``tunedb.transfer.measure.verify`` for what is checked and the rule.  Output: one row per
checked record (workload, config, claimed = the record's own cost, config cost = the config's
estimated cost before the check, re-measured = the estimate over the new measurements -- both
``CostEstimate.text()``: value, interval, n -- and the verdict) and the totals; ``--json``: one
object (``VerifyReport.to_json``).  A progress bar on a TTY (never with --json).  Ctrl-C keeps
what was verified (exit 130); a rerun skips records that already have a verdict.  Bad input is
one line on stderr, exit 2; no record to check is "nothing to verify", exit 0.
"""

from __future__ import annotations

import json
import math
import os

from tunedb.index.model.units import fmt_seconds
from tunedb.transfer.cli.util import (
    UserError,
    emit,
    open_db,
    parse_workload,
    progress_bar,
    progress_to,
    table_text,
    target_arg,
)


def register(sub, common) -> None:
    from tunedb.transfer.measure.verify import DEFAULT_ATTEMPTS, DEFAULT_TOLERANCE

    p = sub.add_parser("verify", parents=[common],
                       help="re-measure imported/migrated best records on the target; mark them verified or refuted")
    p.add_argument("--target", required=True, help="a target the DB holds records of (name or key)")
    p.add_argument("--workload", action="append", metavar="W",
                   help="only this workload (family:key=value,... or JSON file); repeatable")
    p.add_argument("--top-k", type=int, default=3, metavar="K", help="best configs per entry to check (default 3)")
    p.add_argument("--replay", metavar="FILE", help="measure by replaying this Kernel Tuner cache of the device")
    p.add_argument("--device", help="device name of the replay file's target: overrides the file's device name, "
                                    "empty or not")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, metavar="X",
                   help=f"claimed cost may lie X relatively outside the measured [min, max] (default {DEFAULT_TOLERANCE:g})")
    p.add_argument("--attempts", type=int, default=DEFAULT_ATTEMPTS, metavar="N",
                   help=f"local measurements of a claim before refuting it (default {DEFAULT_ATTEMPTS})")
    p.set_defaults(func=run_verify)


def _backend(args, target: dict, workloads: list[dict] | None):
    """(backend, workloads) for the run: a replay of ``--replay`` (its workload when none given)
    or the local backend for a preset of this machine."""
    from tunedb.index.model.keys import key_of

    if args.replay:
        if not os.path.isfile(args.replay):
            raise UserError(f"replay file {args.replay} does not exist")
        from tunedb.transfer.measure.replay import KernelTunerReplayBackend, ReplayData

        try:
            data = ReplayData(args.replay, device=args.device)
        except (ValueError, OSError) as e:
            raise UserError(f"cannot replay {args.replay}: {str(e).splitlines()[0]}") from None
        if key_of(data.target) != key_of(target):
            raise UserError(f"replay file {args.replay} is of device {data.target.get('name')!r}, not of "
                            f"target {args.target!r} (--device NAME sets the device of a file that names none or another)")
        wkey = key_of(data.workload)
        for w in workloads or []:
            if key_of(w) != wkey:
                raise UserError(f"replay file {args.replay} holds kernel {data.workload.get('family')!r}, "
                                f"not workload {json.dumps(w)}")
        return KernelTunerReplayBackend(data), [data.workload]
    from tunedb.transfer.measure.backend import LocalBackend, check_local_target

    try:
        check_local_target(target)
    except ValueError as e:
        raise UserError(f"cannot measure {args.target!r} here ({str(e).splitlines()[0]}); "
                        "give --replay FILE, a Kernel Tuner cache of the device") from None
    return LocalBackend(), workloads


def run_verify(args) -> int:
    if args.top_k < 1:
        raise UserError("--top-k must be >= 1")
    if not math.isfinite(args.tolerance) or args.tolerance < 0:
        raise UserError("--tolerance must be a finite number >= 0")
    if args.attempts < 1:
        raise UserError("--attempts must be >= 1")
    if args.device is not None and not args.replay:
        raise UserError("--device applies to --replay only")
    db = open_db(args, must_exist=True)
    target = target_arg(args.target, db)
    from tunedb.index.model.keys import key_of

    if not any(t["target_key"] == key_of(target) for t in db.targets()):
        raise UserError(f"target {args.target!r} has no records in {args.db}")
    workloads = [parse_workload(w) for w in args.workload] if args.workload else None
    backend, workloads = _backend(args, target, workloads)
    from tunedb.transfer.measure.verify import verify

    bar = progress_bar(args, 1, "verify", unit="rec")

    def cb(ev: dict) -> None:
        if not bar.disable:
            bar.total = max(ev["total"], 1)
        progress_to(bar, ev["done"], f"verified {ev['verified']}  refuted {ev['refuted']}")

    try:
        report = verify(db, target, workloads=workloads, top_k=args.top_k, backend=backend,
                        tolerance=args.tolerance, attempts=args.attempts, progress=cb)
    except ValueError as e:
        raise UserError(str(e).splitlines()[0]) from None
    finally:
        bar.close()
    out = report.to_json()
    tot = report.totals
    if not report.checks:
        human = (f"nothing to verify on {target.get('name', args.target)}: no imported or migrated record "
                 f"without a verdict among the top {args.top_k} of {tot['entries']} entr"
                 f"{'y' if tot['entries'] == 1 else 'ies'}"
                 + (f" ({tot['already']} already have a verdict)" if tot["already"] else ""))
    else:
        rows = []
        for c in report.checks:
            measured = (c.remeasured.text() if c.remeasured is not None
                        else c.measured_status or "-")
            rows.append([c.workload.get("family", ""), json.dumps(c.config, sort_keys=True),
                         fmt_seconds(c.claimed), c.config_cost.text() if c.config_cost is not None else "-",
                         measured, c.verdict])
        human = table_text(["workload", "config", "claimed", "config cost", "re-measured", "verdict"], rows)
        human += (f"\nchecked {tot['checked']}: {tot['verified']} verified, {tot['refuted']} refuted, "
                  f"{tot['unchecked']} unchecked; {tot['already']} already had a verdict; "
                  f"tolerance {report.tolerance:g}")
    if report.interrupted:
        human += "\ninterrupted: the verdicts above are kept; run again to go on"
    emit(args, out, human)
    return 130 if report.interrupted else 0
