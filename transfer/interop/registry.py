"""The import/export formats: :data:`FORMATS` (name -> :class:`Format`, each a parser module
loaded on first use: ``tabular`` of this package, or an outside tuner's format module under
``tunedb.transfer.tuners``, named by its full module path so nothing here imports it),
:func:`get_format`, and :func:`collect`, which parses files of one format into records and an
:class:`~tunedb.transfer.interop.outcomes.ImportReport`."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tunedb.index.model.record import Record
from tunedb.transfer.interop.conflicts import drop_duplicates, retarget_duplicates, split_disagreeing
from tunedb.transfer.interop.input_files import ImportBudget, check_input_path, display_name, import_budget
from tunedb.transfer.interop.outcomes import ExportReport, ImportFormatError, ImportIssue, ImportReport


@dataclass(frozen=True)
class Format:
    """A registered format: parser, exporter and the ``source`` its imported records carry."""

    name: str
    module: str
    source: str

    def _mod(self):
        # a module outside this package (an outside tuner's folder) is named in full
        return importlib.import_module(self.module if self.module.startswith("tunedb.") else
                                       f"tunedb.transfer.interop.{self.module}")

    def parse(self, path: str | Path, device: str | None = None, *, notes: list | None = None,
              label: str | None = None) -> Iterator[Record | ImportIssue]:
        """Yield Records and ImportIssues of one path (raises ImportFormatError for a bad file).

        ``notes`` and ``label`` reach the Kernel Tuner parser only (device-name conflict notes
        are appended to ``notes``; ``label`` names the target ``"<device> [<label>]"``); the
        other formats ignore them.

        ``path`` must be a regular file (a directory too for ``parquet`` and ``metaschedule``): a
        FIFO, socket, device or missing path raises ImportFormatError (one line) before anything
        is opened (``input_files.check_input_path``).

        Provenance: every record's ``origin`` is the imported file's name (``path``'s last
        component, as ``input_files.display_name`` writes it: a name that is not UTF-8 gets
        ``\\xNN`` escapes, never a lone surrogate), so a store says which file a record came from; a
        record of a tunedb export (jsonl/parquet) that already names an origin keeps it. ``host`` is
        this machine for records this import creates (the foreign formats), the exported value for
        tunedb exports."""
        check_input_path(Path(path), directory=None if self.name in ("parquet", "metaschedule", "vllm-moe", "triton") else False)
        if self.module == "tabular":
            items = self._mod().parse(Path(path), device=device, fmt=self.name)
        elif self.name == "kernel-tuner":
            items = self._mod().parse(Path(path), device=device, notes=notes, label=label)
        else:
            items = self._mod().parse(Path(path), device=device)
        return _with_origin(items, display_name(Path(path).name))

    def export(self, records: Iterable[Record], out: str | Path) -> ExportReport:
        """Write ``records`` to ``out`` in this format; see the module of the format for layout."""
        if self.module == "tabular":
            return self._mod().export(records, Path(out), fmt=self.name)
        return self._mod().export(records, Path(out))


FORMATS: dict[str, Format] = {
    "autotvm": Format("autotvm", "tunedb.transfer.tuners.tvm.autotvm_logs", "imported:autotvm"),
    "metaschedule": Format("metaschedule", "tunedb.transfer.tuners.tvm.metaschedule_logs", "imported:metaschedule"),
    "kernel-tuner": Format("kernel-tuner", "tunedb.transfer.tuners.kernel_tuner.cachefile", "imported:kernel-tuner"),
    "parquet": Format("parquet", "tabular", ""),
    "jsonl": Format("jsonl", "tabular", ""),
    "vllm-moe": Format("vllm-moe", "tunedb.transfer.tuners.serving.tables", "imported:vllm-moe"),
    "triton": Format("triton", "tunedb.transfer.tuners.triton.cachefile", "imported:triton"),
}


def _with_origin(items: Iterator[Record | ImportIssue], origin: str) -> Iterator[Record | ImportIssue]:
    """``items`` with ``origin`` set on each Record that has none.  The Records are fresh (made
    by the parser for this import and not yet seen by anyone), so their field is set in place."""
    for item in items:
        if isinstance(item, Record) and not item.origin:
            item.__dict__["origin"] = origin
        yield item


def get_format(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise ImportFormatError(f"unknown format {name!r}; expected one of {', '.join(FORMATS)}") from None


def collect(fmt: str, paths: Iterable[str | Path], device: str | None = None, *,
            budget: ImportBudget | None = None) -> tuple[list[Record], ImportReport]:
    """Parse every path of ``fmt``; return all records and the report (nothing is written).

    The import's caps (``budget``, default ``ImportBudget()``: decompressed bytes a file, lines,
    records and skipped entries, wall time, JSON depth; see ``input_files``) are checked while
    the files are read: past any of them ImportCapError (one line) and no records are returned,
    so the caller commits nothing.  The time cap is checked once more when all files are parsed.

    Kernel Tuner files (one target and one workload each) are also checked for the two ways
    a target can end up holding several devices (``report.conflicts``, one dict per affected
    file: ``{"file", "kind", "device_claimed", "target_used", "evidence"}``):

    * ``host-device-name``: a GPU kernel's cache whose ``device_name`` is a host or CPU
      string; the parser already used the file name stem (``tuners.kernel_tuner.cachefile.device_choice``).
    * ``disagreeing-times``: files of this call on the same target and workload whose times
      for the same configs disagree far beyond measurement noise (:func:`times_disagree`).
      The files of such a target are split into groups that agree (first fit, in the order
      given); without ``device`` every group is re-parsed as its own target
      ``"<device> [<stem of the group's first file>]"``, with ``device`` (the user named the
      device) the records stay on it and the conflicts are warnings only.

    And for one device's results under two names (checked first):

    * ``duplicate-results``: a file whose results (configs, statuses, costs) are identical to
      another file's of this call on another target, such as ``A100_T4.json.gz`` (a T4 file
      names no device, so its file name would be a second device) beside ``A100.json.gz``: its
      records are not imported; ``target_used`` is the original's target
      (:func:`~tunedb.transfer.interop.conflicts.drop_duplicates`).
    """
    f = get_format(fmt)
    budget = budget if budget is not None else ImportBudget()
    with import_budget(budget):
        records: list[Record] = []
        report = ImportReport()
        per_file: list[tuple[Path, int, int]] = []  # (path, first record index, end index)
        for p in paths:
            report.files += 1
            start = len(records)
            _parse_into(f.parse(p, device=device, notes=report.conflicts), records, report, budget,
                        display_name(Path(p)))
            per_file.append((Path(p), start, len(records)))
        if f.name == "kernel-tuner" and len(per_file) > 1:
            records, per_file = drop_duplicates(records, per_file, report)
            records = split_disagreeing(lambda path, label: f.parse(path, device=device, label=label), records,
                                        per_file, device, report)
            retarget_duplicates(report)
        budget.check_time(f"{fmt} import")
    report.imported = len(records)
    return records, report


def _parse_into(items: Iterable[Record | ImportIssue], records: list[Record], report: ImportReport,
                budget: ImportBudget, what: str) -> None:
    """Append the Records of ``items`` to ``records`` and add its ImportIssues to ``report``,
    counting each against ``budget`` (records cap, time cap; ImportCapError past either)."""
    for n, item in enumerate(items, 1):
        budget.add_record(what)
        if not n % 1024:
            budget.check_time(what)
        if isinstance(item, ImportIssue):
            report.add(item)
        else:
            records.append(item)


__all__ = ["FORMATS", "Format", "collect", "get_format"]
