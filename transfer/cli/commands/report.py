"""``tunedb report --out DIR``: an HTML page with PNG figures of what the DB knows: its records and
the tuning runs it stores (see transfer/apps/report.py)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tunedb.transfer.cli.util import UserError, emit, open_db


def register(sub, common) -> None:
    p = sub.add_parser("report", parents=[common],
                       help="write a self-contained HTML report (index.html + PNG figures) of the DB's records "
                        "and stored tuning runs")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (created; files are overwritten)")
    p.add_argument("--runs", action="append", default=[], metavar="FILE",
                   help="JSON output of 'tunedb tune/warm-start/demo --json' or run summaries (a file, a JSON "
                        "list or JSON lines; repeatable): runs to show besides those the DB stores (a run "
                        "stored too, by run_id, is shown once)")
    p.set_defaults(func=run_report)


def _check_out_dir(out: str) -> Path:
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")
    try:
        p.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".tunedb-report-", dir=p)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UserError(f"cannot write to --out {out}: {e.strerror or e}") from None
    return p


def run_report(args) -> int:
    from tunedb.transfer.apps.report import build_report
    from tunedb.transfer.apps.rundata import load_runs

    db = open_db(args, must_exist=True)
    try:
        runs = load_runs(args.runs)
    except ValueError as e:
        raise UserError(str(e)) from None
    out = _check_out_dir(args.out)
    try:
        res = build_report(db, out, runs)
    except OSError as e:
        raise UserError(f"cannot write the report to {args.out}: {e.strerror or e}") from None
    human = "\n".join([f"wrote {out / 'index.html'} ({len(res['files']) - 1} figures)"]
                      + [f"  note: {n}" for n in res["notes"]])
    emit(args, {"out": str(out), "files": res["files"], "notes": res["notes"], "summary": res["summary"]}, human)
    return 0
