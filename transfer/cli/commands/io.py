"""``tunedb import`` and ``tunedb export``.

``tunedb import {autotvm,metaschedule,kernel-tuner,parquet,jsonl} PATH... [--strict] [--device NAME]``
parses every path first, then commits all records in one ``db.commit`` call (all-or-nothing).
Skipped lines are counted and the first few reported with ``file:line``; with ``--strict`` any
skipped line fails the import and nothing is written.  Record ids are deterministic per
source line/entry, so importing the same file twice does not duplicate records.
``--json`` prints ``{imported, new, skipped, errors, skipped_by_kind, files, format, seconds,
models, ranked_s, conflicts}`` (``imported`` = records parsed and committed, ``new`` = those the
DB did not hold yet; ``models`` = seconds fitting each imported family's cost model, ``ranked_s``
= seconds ranking the imported entries, which a store that keeps rankings (the Parquet DB) keeps
for the first tuning run's neighbour look-ups; both unless ``--no-models``; ``conflicts`` = one object per Kernel Tuner file whose device claim was not taken as it
stands: ``{file, kind, device_claimed, target_used, evidence}``, kind ``host-device-name``,
``disagreeing-times`` or ``duplicate-results`` (not imported), see ``tunedb.transfer.interop.collect`` and docs/import_conflicts.md).
Without ``--json`` each such file gets one ``tunedb: warning:`` line on stderr.
``--device NAME`` replaces the device name of every imported file (empty or not): the user
has said which device measured them, so no file is renamed, but disagreeing files are still
reported.

``tunedb export --format {autotvm,metaschedule,kernel-tuner,parquet,jsonl} OUT [--target T]``
writes the DB's records (or one target's) in that format; ``--json`` prints
``{exported, skipped, files, format, skipped_reasons}``.  An export that would write no record
(an empty DB or target, or none of the records in the format: "0 of 651 records are AutoTVM
records: ...") writes nothing, says why in one line and exits 2.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tunedb.transfer.cli.util import UserError, emit, open_db
from tunedb.transfer.interop import FORMATS, ExportFormatError, ImportFormatError, collect

DEVICE_FORMATS = ("autotvm", "metaschedule", "kernel-tuner", "triton")


def register(sub, common) -> None:
    p = sub.add_parser("import", parents=[common], help="import tuning logs (AutoTVM, MetaSchedule, Kernel Tuner, "
                                                        "tunedb parquet/jsonl)")
    p.add_argument("format", choices=list(FORMATS), help="input format")
    p.add_argument("paths", nargs="+", metavar="PATH", help="files (or MetaSchedule/Parquet directories)")
    p.add_argument("--strict", action="store_true", help="fail, writing nothing, if any line is skipped")
    p.add_argument("--device", default=None, metavar="NAME",
                   help="device name of every imported file's records: overrides each file's device name, "
                        "empty or not, and keeps files whose times disagree on that one target (they are "
                        "still reported); not for parquet/jsonl")
    p.add_argument("--no-models", action="store_true",
                   help="do not fit the imported families' cost models or rank the imported entries now "
                        "(the first tuning run then does)")
    p.set_defaults(func=run_import)

    e = sub.add_parser("export", parents=[common], help="export records to another tuner's format or parquet/jsonl")
    e.add_argument("--format", required=True, choices=list(FORMATS), dest="format", help="output format")
    e.add_argument("out", metavar="OUT", help="output file or directory")
    e.add_argument("--target", default=None, metavar="T", help="only this target (name or key)")
    e.add_argument("--shape", default=None, metavar="E=..,N=..",
                   help="vllm-moe only: the table of this shape (E=<n>,N=<n>[,dtype=<d>][,block_shape=[<n>,<k>]]) "
                        "for --target, entries without a record predicted from the nearest devices and shapes")
    e.set_defaults(func=run_export)


def _open_db(args, create: bool):
    """The store(s) of the global options (``--db``, ``--also``; directories or URLs)."""
    return open_db(args, must_exist=not create)


def run_import(args) -> int:
    fmt = args.format
    if args.device is not None and fmt not in DEVICE_FORMATS:
        raise UserError(f"--device applies to {', '.join(DEVICE_FORMATS)} imports, not {fmt}")
    if args.device is not None and not args.device.strip():
        raise UserError("--device needs a non-empty name")
    for p in args.paths:
        if not Path(p).exists():
            raise UserError(f"cannot read {p}: no such file or directory")
    t0 = time.perf_counter()
    try:
        records, report = collect(fmt, args.paths, device=args.device.strip() if args.device else None)
    except ImportFormatError as e:
        raise UserError(str(e)) from None
    if args.strict and report.skipped:
        first = report.errors[0] if report.errors else {"where": "?", "error": "?"}
        raise UserError(f"--strict: {report.skipped} line(s) skipped, nothing written "
                        f"(first: {first['where']}: {first['error']})")
    db = _open_db(args, create=True)
    new = 0
    if records:
        try:
            new = db.commit(records)
        except ValueError as e:
            raise UserError(f"import rejected, nothing written: {e}") from None
    seconds = time.perf_counter() - t0
    models: dict[str, float] = {}
    if new and not args.no_models:
        from tunedb.transfer.search.modelcache import prepare

        models = prepare(db, sorted({str(r.workload.get("family", "")) for r in records}))
    ranked_s = rank_entries(db, records) if new and not args.no_models else 0.0
    payload = dict(report.to_json(), format=fmt, new=int(new or 0), seconds=round(seconds, 3),
                   models={f: round(v, 3) for f, v in models.items()}, ranked_s=round(ranked_s, 3))
    human = (f"imported {report.imported} record(s) ({payload['new']} new) from {report.files} {fmt} input(s), "
             f"skipped {report.skipped}")
    if models:
        human += (f"; fitted the cost model of {len(models)} kernel famil{'y' if len(models) == 1 else 'ies'} in "
                  f"{sum(models.values()):.1f} s (tuning runs reuse it)")
    for err in report.errors:
        human += f"\n  skipped {err['where']}: {err['error']}"
    if not getattr(args, "json", False):
        for c in report.conflicts:
            sys.stderr.write(f"tunedb: warning: {conflict_line(c)}\n")
    emit(args, payload, human)
    return 0


def rank_entries(db, records) -> float:
    """Rank every entry of ``records`` now when ``db`` keeps rankings for later processes
    (``RecordStore.keeps_rankings``), so that the first tuning run after the import reads its
    neighbours' rankings instead of computing them; seconds taken (0 when it does not keep them)."""
    if not getattr(db, "keeps_rankings", False):
        return 0.0
    t0 = time.perf_counter()
    pairs = {(r.target_key, r.workload_key): (r.target, r.workload) for r in records}
    db.best_costs_many(list(pairs.values()), 1)
    return time.perf_counter() - t0


def conflict_line(c: dict) -> str:
    """One line of text for a ``report.conflicts`` entry (see the module docstring)."""
    name = Path(c["file"]).name
    if c["kind"] == "host-device-name":
        return (f"{name}: device name {c['device_claimed']!r} is a {c['evidence'].get('reason', 'host string')}, "
                f"not a GPU; imported as target {c['target_used']!r} (the file name)")
    if c["kind"] == "duplicate-results":
        return (f"{name}: the same configs and times as {Path(c['evidence']['duplicate_of']).name}; not imported "
                f"as a second device {c['device_claimed']!r} (its measurements are target {c['target_used']!r})")
    worst = max(c["evidence"].get("against") or [{}], key=lambda e: e.get("median_abs_log_ratio", 0.0))
    if worst.get("file"):
        why = (f"its times disagree with {Path(worst['file']).name} (median ratio {worst['median_ratio']:.2f}x, "
               f"Spearman {worst['spearman']:.2f} over {worst['shared_configs']} shared configs)")
    else:
        why = "other files claiming this device disagree with its group"
    return f"{name}: claims device {c['device_claimed']!r} but {why}; imported as target {c['target_used']!r}"


def _records_of(db, target: str | None) -> list:
    from tunedb.transfer.interop.tabular import records_from_table

    kwargs = {}
    if target is not None:
        t = db.find_target(target)
        if t is None:
            raise UserError(f"unknown target {target!r} (not in the database)")
        kwargs["target"] = t
    return records_from_table(db.records(**kwargs))


def run_export(args) -> int:
    if args.format == "vllm-moe" or args.shape is not None:  # serving tables: transfer/tuners/serving/
        from tunedb.transfer.tuners.serving.exporting import export_tables

        try:
            payload, human = export_tables(args, _open_db(args, create=False))
        except ValueError as e:
            raise UserError(str(e)) from None
        emit(args, payload, human)
        return 0
    fmt = FORMATS[args.format]
    db = _open_db(args, create=False)
    records = _records_of(db, args.target)
    out = Path(args.out)
    if not records:
        where = f"target {args.target!r} has" if args.target is not None else "the database holds"
        raise UserError(f"0 records to export: {where} no records")
    try:
        rep = fmt.export(records, out)
    except ExportFormatError as e:
        raise UserError(str(e)) from None
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror or e}") from None
    payload = dict(rep.to_json(), format=args.format)
    human = f"exported {rep.exported} record(s) to {out}" + (f", skipped {rep.skipped}" if rep.skipped else "")
    emit(args, payload, human)
    return 0
