"""What an import or export says about itself: the errors that refuse a whole file
(:class:`ImportFormatError`, :class:`ImportCapError`, :class:`ExportFormatError`), the lines it
skips (:class:`ImportIssue`) and the counts it returns (:class:`ImportReport`,
:class:`ExportReport`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

MAX_REPORTED_ERRORS = 10


class ImportFormatError(ValueError):
    """A whole input file cannot be imported (unreadable, or not in the announced format)."""


class ImportCapError(ImportFormatError):
    """Input over one of the import caps (text size, line length, record size): the whole import
    is refused, never a record skipped, so nothing is written."""


class ExportFormatError(ValueError):
    """The records cannot be written the way the output path asks (one line, for the CLI)."""


class NothingToExport(ExportFormatError):
    """None of the records can be written in the format: nothing was written (no file, no
    directory); the message says why in one line."""


@dataclass(frozen=True)
class ImportIssue:
    """One skipped line or entry: ``where`` is ``file:line`` (or ``file:entry`` for caches)."""

    where: str
    error: str
    kind: str = "malformed"  # malformed | unsupported (v0.1, pickle) | invalid-record


@dataclass
class ImportReport:
    """What an import did: counts plus the first few problems with their locations."""

    imported: int = 0
    skipped: int = 0
    errors: list = field(default_factory=list)
    skipped_by_kind: Counter = field(default_factory=Counter)
    files: int = 0
    conflicts: list = field(default_factory=list)

    def add(self, issue: ImportIssue) -> None:
        self.skipped += 1
        self.skipped_by_kind[issue.kind] += 1
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append({"where": issue.where, "error": issue.error})

    def to_json(self) -> dict:
        return {"imported": self.imported, "skipped": self.skipped, "errors": list(self.errors),
                "skipped_by_kind": dict(self.skipped_by_kind), "files": self.files,
                "conflicts": [dict(c) for c in self.conflicts]}


@dataclass
class ExportReport:
    """What an export wrote: records exported, records that the format cannot express, files."""

    exported: int = 0
    skipped: int = 0
    files: list = field(default_factory=list)
    reasons: Counter = field(default_factory=Counter)

    def to_json(self) -> dict:
        return {"exported": self.exported, "skipped": self.skipped, "files": [str(f) for f in self.files],
                "skipped_reasons": dict(self.reasons)}


__all__ = ["MAX_REPORTED_ERRORS", "ExportFormatError", "NothingToExport", "ExportReport", "ImportCapError", "ImportFormatError",
           "ImportIssue", "ImportReport"]
