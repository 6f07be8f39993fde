"""Importers and exporters of other tuners' logs (and of tunedb's own records).

Contract
--------
* ``FORMATS`` maps a format name (``autotvm``, ``metaschedule``, ``kernel-tuner``, ``parquet``,
  ``jsonl``) to a :class:`Format`.  ``Format.parse(path, device=None)`` yields, in file order,
  either a :class:`~tunedb.index.model.record.Record` or an :class:`ImportIssue` (a line/entry that was
  skipped: malformed, or a layout that is never decoded such as AutoTVM v0.1 or pickle lines).
  A whole file that cannot be read or is not in the format raises :class:`ImportFormatError`
  (the one documented import error); nothing else escapes a parser.
* Nothing from an imported file is executed, unpickled or ``eval``'d.
* ``collect(fmt, paths, device=None, budget=None)`` parses every path first and returns
  ``(records, report)``; the caller commits the records in one ``db.commit`` call
  (all-or-nothing).  An import over one of its caps (:class:`ImportBudget`: decompressed bytes,
  lines, records, wall time, JSON depth) raises :class:`ImportCapError` before returning, so
  nothing is committed.  For Kernel Tuner
  files it also checks that one target is one device (``report.conflicts``, see
  :func:`collect` and ``docs/import_conflicts.md``).
* Record ids are deterministic (:func:`stable_record_id`): the format, the record's target key and
  the canonical JSON of the original line/entry, plus the occurrence number of an identical
  line in the same file.  Re-importing a file therefore yields the same record_ids and the store
  (which de-duplicates by record_id) never double-counts it.
* Costs are seconds; ``timestamp`` is UTC.

Modules: ``formats`` (``FORMATS``, ``Format``, ``get_format``, ``collect``), ``outcomes`` (import and
export errors, ``ImportIssue``, ``ImportReport``, ``ExportReport``), ``conflicts`` (several devices
on one target: ``times_disagree``), ``input_files`` (reading imported files within the caps),
``record_building`` (``Prepared``, ``make_record``, ``stable_record_id``: the parsers' hot path),
``device_fields`` (catalog fields of a device name); ``tabular`` (parquet, jsonl: tunedb's own
records).  An outside tuner's formats live in its folder
(``tunedb.transfer.tuners.kernel_tuner.cachefile``, ``tunedb.transfer.tuners.tvm.autotvm_logs``
and ``metaschedule_logs``, ...), which the registry names by module path.  The names below are
re-exported so ``from tunedb.transfer.interop import X`` keeps working.
"""

from __future__ import annotations

from tunedb.transfer.interop.conflicts import (
    MAX_MEDIAN_ABS_LOG_RATIO,
    MIN_SHARED_CONFIGS,
    MIN_SPEARMAN,
    times_disagree,
)
from tunedb.transfer.interop.device_fields import kind_hint, merge_device_fields, resolve_device_fields
from tunedb.transfer.interop.input_files import (
    MAX_IMPORT_LINE,
    MAX_IMPORT_LINES,
    MAX_IMPORT_RECORDS,
    MAX_IMPORT_SECONDS,
    MAX_IMPORT_TEXT,
    ImportBudget,
    check_input_path,
    check_line,
    display_name,
    file_stem,
    iter_json_lines,
    open_regular,
    open_text,
    read_text,
    where,
)
from tunedb.transfer.interop.outcomes import (
    MAX_REPORTED_ERRORS,
    ExportFormatError,
    ExportReport,
    ImportCapError,
    ImportFormatError,
    ImportIssue,
    ImportReport,
)
from tunedb.transfer.interop.record_building import (
    FAST_PATH,
    Prepared,
    canon,
    check_costs,
    fast_normalise,
    make_record,
    stable_record_id,
    to_utc,
)
from tunedb.transfer.interop.registry import FORMATS, Format, collect, get_format

__all__ = ["FORMATS", "Format", "ImportFormatError", "ImportIssue", "ImportReport", "ExportReport", "ExportFormatError",
           "collect", "get_format", "make_record", "merge_device_fields", "stable_record_id", "Prepared",
           "ImportCapError", "MAX_REPORTED_ERRORS", "MAX_IMPORT_TEXT", "MAX_IMPORT_LINE", "MAX_IMPORT_LINES",
           "MAX_IMPORT_RECORDS", "MAX_IMPORT_SECONDS", "ImportBudget", "MIN_SHARED_CONFIGS",
           "MAX_MEDIAN_ABS_LOG_RATIO", "MIN_SPEARMAN", "times_disagree", "file_stem", "where", "open_text",
           "read_text", "check_line", "iter_json_lines", "fast_normalise", "canon", "FAST_PATH", "to_utc",
           "check_costs", "resolve_device_fields", "kind_hint", "check_input_path", "display_name", "open_regular"]
