"""``tunedb doctor``: is this machine fit to measure now, and what to do about it.

``tunedb doctor [--seconds S] [--json]`` runs ``tunedb.transfer.measure.machine.machine_check``
(quick=False): the reference kernel for S seconds (default 1; the other processes' CPU use is
sampled over the same time), the load average, the CPU frequency, governor and turbo boost.
Prints one line per check (OK / WARN / ``--`` for what cannot be read), the verdict line
(``fit to measure`` or ``noisy: <problems>``) and the advice; ``--json``: exactly one JSON object
(``machine_check``'s).  Exit status 0 for both verdicts (it is a report); bad input (a
``--seconds`` that is not a number in (0, 300]) is one line on stderr, exit 2.
"""

from __future__ import annotations

import math

from tunedb.transfer.cli.util import UserError, emit

#: the longest reference run ``--seconds`` accepts (seconds)
MAX_SECONDS = 300.0
STATUS_WORD = {"ok": "OK", "warn": "WARN", "unknown": "--"}


def register(sub, common) -> None:
    p = sub.add_parser("doctor", parents=[common],
                       help="is this machine fit to measure now? checks load, other processes, frequency and "
                            "a reference kernel's spread, and says what to do")
    p.add_argument("--seconds", type=float, default=1.0, metavar="S",
                   help="how long the reference kernel runs (default 1; at most 300)")
    p.set_defaults(func=run_doctor)


def human_report(rep: dict) -> str:
    """The human form of a ``machine_check`` result: one line per check, the busy processes,
    the verdict line and the advice lines."""
    lines = [f"{STATUS_WORD.get(c['status'], c['status']):<5} {c['detail']}" for c in rep["checks"]]
    if rep.get("busy"):
        lines.append("busy processes:")
        lines += [f"  {d['pid']:>7}  {d['cpu_percent']:5.0f} %  {d['name']}" for d in rep["busy"]]
    lines.append("verdict: " + ("fit to measure" if rep["verdict"] == "fit" else "noisy: " + "; ".join(rep["problems"])))
    if rep["advice"]:
        lines.append("advice:")
        lines += [f"  - {a}" for a in rep["advice"]]
    return "\n".join(lines)


def run_doctor(args) -> int:
    from tunedb.transfer.measure.machine import machine_check

    s = args.seconds
    if not (math.isfinite(s) and 0 < s <= MAX_SECONDS):
        raise UserError(f"--seconds must be a number in (0, {MAX_SECONDS:g}], got {s:g}")
    rep = machine_check(quick=False, seconds=s)
    emit(args, rep, human_report(rep))
    return 0
