"""Importers and exporters of other tuners' logs (and of tunedb's own records).

Contract
--------
* ``FORMATS`` maps a format name (``autotvm``, ``metaschedule``, ``kernel-tuner``, ``parquet``,
  ``jsonl``) to a :class:`Format`.  ``Format.parse(path, device=None)`` yields, in file order,
  either a :class:`~tunedb.index.record.Record` or an :class:`ImportIssue` (a line/entry that was
  skipped: malformed, or a layout that is never decoded such as AutoTVM v0.1 or pickle lines).
  A whole file that cannot be read or is not in the format raises :class:`ImportFormatError`
  (the one documented import error); nothing else escapes a parser.
* Nothing from an imported file is executed, unpickled or ``eval``'d.
* ``collect(fmt, paths, device=None)`` parses every path first and returns ``(records, report)``;
  the caller commits the records in one ``db.commit`` call (all-or-nothing).  For Kernel Tuner
  files it also checks that one target is one device (``report.conflicts``, see
  :func:`collect` and ``docs/import_conflicts.md``).
* Record ids are deterministic (:func:`stable_record_id`): the format, the record's target key and
  the canonical JSON of the original line/entry, plus the occurrence number of an identical
  line in the same file.  Re-importing a file therefore yields the same record_ids and the store
  (which de-duplicates by record_id) never double-counts it.
* Costs are seconds; ``timestamp`` is UTC.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import gzip
import hashlib
import importlib
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunedb.index.keys import canonical_json_normalised, hash64, key_of, key_of_text, normalise
from tunedb.index.record import MAX_RECORD_BYTES, Record, record_too_big, target_display_name, this_host

MAX_REPORTED_ERRORS = 10
#: the most text one imported file may hold after decompression (characters; 16x the largest
#: Kernel Tuner cache in the shared data): a larger file, or a gzip bomb, is refused unread
MAX_IMPORT_TEXT = 256 << 20
#: the most characters one line (one record, one JSON log entry) of an imported file may hold
MAX_IMPORT_LINE = 16 << 20


class ImportFormatError(ValueError):
    """A whole input file cannot be imported (unreadable, or not in the announced format)."""


class ImportCapError(ImportFormatError):
    """Input over one of the import caps (text size, line length, record size): the whole import
    is refused, never a record skipped, so nothing is written."""


class ExportFormatError(ValueError):
    """The records cannot be written the way the output path asks (one line, for the CLI)."""


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


@dataclass(frozen=True)
class Format:
    """A registered format: parser, exporter and the ``source`` its imported records carry."""

    name: str
    module: str
    source: str

    def _mod(self):
        return importlib.import_module(f"tunedb.transfer.interop.{self.module}")

    def parse(self, path: str | Path, device: str | None = None, *, notes: list | None = None,
              label: str | None = None) -> Iterator[Record | ImportIssue]:
        """Yield Records and ImportIssues of one path (raises ImportFormatError for a bad file).

        ``notes`` and ``label`` reach the Kernel Tuner parser only (device-name conflict notes
        are appended to ``notes``; ``label`` names the target ``"<device> [<label>]"``); the
        other formats ignore them.

        Provenance: every record's ``origin`` is the imported file's name (``path``'s last
        component), so a store says which file a record came from; a record of a tunedb export
        (jsonl/parquet) that already names an origin keeps it.  ``host`` is this machine for
        records this import creates (the foreign formats), the exported value for tunedb
        exports."""
        if self.module == "tabular":
            items = self._mod().parse(Path(path), device=device, fmt=self.name)
        elif self.module == "kernel_tuner":
            items = self._mod().parse(Path(path), device=device, notes=notes, label=label)
        else:
            items = self._mod().parse(Path(path), device=device)
        return _with_origin(items, Path(path).name)

    def export(self, records: Iterable[Record], out: str | Path) -> ExportReport:
        """Write ``records`` to ``out`` in this format; see the module of the format for layout."""
        if self.module == "tabular":
            return self._mod().export(records, Path(out), fmt=self.name)
        return self._mod().export(records, Path(out))


FORMATS: dict[str, Format] = {
    "autotvm": Format("autotvm", "autotvm", "imported:autotvm"),
    "metaschedule": Format("metaschedule", "metaschedule", "imported:metaschedule"),
    "kernel-tuner": Format("kernel-tuner", "kernel_tuner", "imported:kernel-tuner"),
    "parquet": Format("parquet", "tabular", ""),
    "jsonl": Format("jsonl", "tabular", ""),
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


def collect(fmt: str, paths: Iterable[str | Path], device: str | None = None) -> tuple[list[Record], ImportReport]:
    """Parse every path of ``fmt``; return all records and the report (nothing is written).

    Kernel Tuner files (one target and one workload each) are also checked for the two ways
    a target can end up holding several devices (``report.conflicts``, one dict per affected
    file: ``{"file", "kind", "device_claimed", "target_used", "evidence"}``):

    * ``host-device-name``: a GPU kernel's cache whose ``device_name`` is a host or CPU
      string; the parser already used the file name stem (``kernel_tuner.device_choice``).
    * ``disagreeing-times``: files of this call on the same target and workload whose times
      for the same configs disagree far beyond measurement noise (:func:`times_disagree`).
      The files of such a target are split into groups that agree (first fit, in the order
      given); without ``device`` every group is re-parsed as its own target
      ``"<device> [<stem of the group's first file>]"``, with ``device`` (the user named the
      device) the records stay on it and the conflicts are warnings only.
    """
    f = get_format(fmt)
    records: list[Record] = []
    report = ImportReport()
    per_file: list[tuple[Path, int, int]] = []  # (path, first record index, end index)
    for p in paths:
        report.files += 1
        start = len(records)
        for item in f.parse(p, device=device, notes=report.conflicts):
            if isinstance(item, ImportIssue):
                report.add(item)
            else:
                records.append(item)
        per_file.append((Path(p), start, len(records)))
    if f.module == "kernel_tuner" and len(per_file) > 1:
        records = _split_disagreeing(f, records, per_file, device, report)
    report.imported = len(records)
    return records, report


#: ``disagreeing-times`` thresholds (see :func:`times_disagree` for the evidence behind them)
MIN_SHARED_CONFIGS = 20
MAX_MEDIAN_ABS_LOG_RATIO = math.log(1.25)
MIN_SPEARMAN = 0.9


def _ranks(x: Any) -> Any:
    """Average ranks (ties share the mean rank) of a 1-d float array."""
    import numpy as np

    order = np.argsort(x, kind="stable")
    r = np.empty(len(x), np.float64)
    r[order] = np.arange(len(x), dtype=np.float64)
    _, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    return (np.bincount(inv, weights=r) / counts)[inv]


def times_disagree(a: Mapping[str, float], b: Mapping[str, float]) -> tuple[bool, dict]:
    """Whether two files' costs (config_key -> seconds, ``ok`` records only) of one claimed
    (device, workload) come from different devices, and the evidence.

    Over the configs both hold (at least :data:`MIN_SHARED_CONFIGS`, else no verdict: False):
    they disagree when the median of ``|ln(cost_a / cost_b)|`` exceeds ``ln(1.25)`` (typical
    config 25 % off) or the Spearman rank correlation is below 0.9 (the order of configs, what
    seeding and replay rely on, differs).  Evidence from the real Kernel Tuner data
    (convolution and dedispersion, 6 GPUs each): one file against itself split in two halves
    of its repeated runs has median |ln ratio| <= 0.009 and Spearman >= 0.9995; any two of
    the GPUs have median |ln ratio| >= 0.086 and Spearman <= 0.970, and every one of the 30
    pairs breaks at least one threshold (the closest: dedispersion A4000 vs W6600, 0.086 but
    Spearman 0.61; convolution A100 vs A6000, 0.207 and 0.84); A100.json.gz and its T4 copy
    A100_T4.json.gz agree exactly (0.0, 1.0).

    Evidence: ``{"shared_configs", "median_abs_log_ratio", "median_ratio", "spearman"}``."""
    import numpy as np

    shared = sorted(a.keys() & b.keys())
    ev: dict[str, Any] = {"shared_configs": len(shared)}
    if len(shared) < MIN_SHARED_CONFIGS:
        return False, ev
    x = np.array([a[k] for k in shared], np.float64)
    y = np.array([b[k] for k in shared], np.float64)
    keep = (x > 0) & (y > 0)
    x, y = x[keep], y[keep]
    if len(x) < MIN_SHARED_CONFIGS:
        return False, ev
    med = float(np.median(np.abs(np.log(x / y))))
    rx, ry = _ranks(x), _ranks(y)
    sx, sy = float(rx.std()), float(ry.std())
    rho = 1.0 if sx == 0 and sy == 0 else (0.0 if sx == 0 or sy == 0 else
                                            float(np.mean((rx - rx.mean()) * (ry - ry.mean())) / (sx * sy)))
    ev.update(shared_configs=int(len(x)), median_abs_log_ratio=round(med, 6), median_ratio=round(math.exp(med), 6),
              spearman=round(rho, 6))
    return med > MAX_MEDIAN_ABS_LOG_RATIO or rho < MIN_SPEARMAN, ev


def _file_costs(records: list[Record], lo: int, hi: int) -> dict[tuple[str, str], dict[str, float]]:
    """(target_key, workload_key) -> {config_key: cost} of one file's ok records."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for r in records[lo:hi]:
        if r.status == "ok" and r.cost is not None:
            out.setdefault((r.target_key, r.workload_key), {})[r.config_key] = float(r.cost)
    return out


def _split_disagreeing(f: Format, records: list[Record], per_file: list[tuple[Path, int, int]],
                       device: str | None, report: ImportReport) -> list[Record]:
    """The ``disagreeing-times`` check of :func:`collect`: report, and re-parse each group of
    agreeing files of a contested target as its own labelled target unless ``device``."""
    costs = [_file_costs(records, lo, hi) for _, lo, hi in per_file]
    by_pair: dict[tuple[str, str], list[int]] = {}
    for i, c in enumerate(costs):
        for pair in c:
            by_pair.setdefault(pair, []).append(i)
    relabel: dict[int, str] = {}
    for pair, files in by_pair.items():
        if len(files) < 2:
            continue
        groups: list[list[int]] = []
        against: dict[int, list[dict]] = {}
        for i in files:
            home = None
            for g in groups:
                bad = []
                for j in g:
                    dis, ev = times_disagree(costs[i][pair], costs[j][pair])
                    if dis:
                        bad.append((j, ev))
                if not bad and home is None:
                    home = g
                for j, ev in bad:
                    against.setdefault(i, []).append({"file": str(per_file[j][0]), **ev})
                    against.setdefault(j, []).append({"file": str(per_file[i][0]), **ev})
            if home is None:
                groups.append([i])
            else:
                home.append(i)
        if len(groups) < 2:
            continue
        first = records[per_file[files[0]][1]:per_file[files[0]][2]]
        claimed = next((r.target.get("name") for r in first if r.target_key == pair[0]), "") or ""
        for g in groups:
            stem = file_stem(per_file[g[0]][0])
            for i in g:  # every file of a contested target is reported (against: [] = none directly)
                used = claimed if device else f"{claimed} [{stem}]"
                report.conflicts.append({"file": str(per_file[i][0]), "kind": "disagreeing-times",
                                         "device_claimed": claimed, "target_used": used,
                                         "evidence": {"against": against.get(i, []), "grouped_with": [
                                                          str(per_file[j][0]) for j in g if j != i],
                                                      "thresholds": {"min_shared_configs": MIN_SHARED_CONFIGS,
                                                                     "max_median_ratio": 1.25,
                                                                     "min_spearman": MIN_SPEARMAN}}})
            if not device:
                for i in g:
                    relabel.setdefault(i, stem)
    if not relabel:
        return records
    out: list[Record] = []
    for i, (path, lo, hi) in enumerate(per_file):
        if i not in relabel:
            out.extend(records[lo:hi])
            continue
        # the same file again, its target renamed (issues were counted in the first pass)
        out.extend(item for item in f.parse(path, device=device, label=relabel[i]) if isinstance(item, Record))
    return out


# ---------------------------------------------------------------------------- helpers for parsers

def file_stem(path: Path) -> str:
    """A file's name without ``.json``, ``.json.gz`` or ``.gz`` (``A100.json.gz`` -> ``A100``)."""
    name = path.name
    for suf in (".json.gz", ".json", ".gz"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return path.stem


def where(path: Path, line: int | str) -> str:
    return f"{path.name}:{line}"


def open_text(path: Path) -> Any:
    """Open a (possibly gzip-compressed) UTF-8 text file; raise ImportFormatError when unreadable."""
    try:
        with open(path, "rb") as f:
            magic = f.read(2)
        if magic == b"\x1f\x8b":
            return gzip.open(path, "rt", encoding="utf-8-sig", errors="strict")
        return open(path, encoding="utf-8-sig", errors="strict")
    except OSError as e:
        raise ImportFormatError(f"cannot read {path}: {e.strerror or e}") from None


def read_text(path: Path, limit: int | None = None) -> str:
    """Whole text of a (possibly gzip-compressed) UTF-8 file, at most ``limit`` characters
    (default :data:`MAX_IMPORT_TEXT`): decompression stops one character past the cap, so the
    memory used is bounded by it.  ImportFormatError (one line) when unreadable or over the cap."""
    cap = MAX_IMPORT_TEXT if limit is None else limit
    try:
        with open_text(path) as f:
            text = f.read(cap + 1)
    except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile) as e:
        raise ImportFormatError(f"cannot read {path}: {e}") from None
    if len(text) > cap:
        raise ImportFormatError(f"{path}: more than {cap >> 20} MiB of text (after decompression): over the "
                                "import cap; split the file")
    return text


def check_line(path: Path, no: int, line: str) -> None:
    """ImportFormatError (one line) when line ``no`` of ``path`` is longer than
    :data:`MAX_IMPORT_LINE`: one record that large is refused, and so the whole file."""
    if len(line) > MAX_IMPORT_LINE:
        raise ImportCapError(f"{path}: line {no} has {len(line) >> 20} MiB: over the import cap of "
                                f"{MAX_IMPORT_LINE >> 20} MiB per record")


def iter_json_lines(path: Path) -> Iterator[tuple[int, str, Any, str | None]]:
    """Yield ``(line_no, text, value, error)`` for each non-blank, non-``#`` line (1-based)."""
    text = read_text(path)
    for no, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        check_line(path, no, s)
        try:
            yield no, s, json.loads(s), None
        except json.JSONDecodeError as e:
            yield no, s, None, f"not JSON: {e.msg}"
        except RecursionError:
            yield no, s, None, "not JSON: nested too deeply"


def fast_normalise(value: Any, what: str = "$") -> Any:
    """``tunedb.index.keys.normalise(value, what)``: the project's one normaliser (fast on JSON-loaded
    data; ValueError naming the path for anything that is not plain JSON data, NaN/inf included).
    Kept under this name for the parsers."""
    return normalise(value, what)


def canon(value: Any) -> str:
    """Canonical JSON text of already normalised data (``tunedb.index.keys.canonical_json_normalised``,
    the same text as ``tunedb.index.keys.canonical_json``)."""
    return canonical_json_normalised(value)


_canon = canonical_json_normalised


@dataclass(frozen=True)
class Prepared:
    """A normalised JSON object with its canonical text and key (computed once, shared)."""

    value: dict
    text: str
    key: str
    name: str = ""

    @classmethod
    def of(cls, obj: Mapping[str, Any], what: str) -> Prepared:
        if not isinstance(obj, Mapping):
            raise ValueError(f"field '{what}' must be a JSON object")
        v = fast_normalise(dict(obj), what)
        text = _canon(v)
        name = target_display_name(v) if what == "target" else ""
        if what == "workload" and (not isinstance(v.get("family"), str) or not v["family"]):
            raise ValueError("field 'workload' needs a non-empty string 'family'")
        return cls(v, text, key_of_text(text), name)


_RECORD_FIELDS = {f.name for f in dataclasses.fields(Record)}
_FAST_FIELDS = {"target", "workload", "config", "costs", "status", "error", "compile_s", "wall_s", "timestamp",
                "source", "session", "meta", "record_id", "target_name", "target_key", "workload_key",
                "config_key", "target_json", "workload_json", "config_json", "meta_json", "lookup_key", "entry_key",
                "host", "origin"}
FAST_PATH = _RECORD_FIELDS == _FAST_FIELDS  # fall back to the constructor if Record changes shape


_PAIR_HASHES: dict[tuple[str, str], tuple[int, Any]] = {}


def _pair_hashes(target_key: str, workload_key: str) -> tuple[int, Any]:
    """(``hash64(target_key, workload_key)``, BLAKE2b state that has hashed the first two parts of
    ``hash64(target_key, workload_key, config_key)``): the ``entry_key``/``lookup_key`` columns."""
    if len(_PAIR_HASHES) > 4096:
        _PAIR_HASHES.clear()
    pre = hashlib.blake2b(f"{target_key}\0{workload_key}\0".encode(), digest_size=8)
    out = _PAIR_HASHES[(target_key, workload_key)] = (hash64(target_key, workload_key), pre)
    return out


def make_record(target: Prepared, workload: Prepared, config: Mapping[str, Any], *, costs: Iterable[float] = (),
                status: str = "ok", error: str = "", compile_s: float | None = None,
                wall_s: float | None = None, timestamp: _dt.datetime | None = None, source: str,
                meta: Mapping[str, Any] | None = None, record_id: str, session: str = "",
                target_name: str = "", meta_normalised: bool = False, host: str | None = None,
                origin: str = "", meta_json: str | None = None) -> Record:
    """Build a Record equal to ``Record(...)`` with the same arguments, without re-normalising the
    shared target/workload for every record (import hot path).  ``record_id`` is required;
    ``meta_normalised`` says ``meta`` already went through :func:`fast_normalise`; ``host`` None
    is this machine, as for ``Record`` (``Format.parse`` sets ``origin`` to the imported file).
    ``meta_json``, with ``meta_normalised``, is the canonical JSON of ``meta`` when the caller
    already has it (it must equal ``canon(meta)``; the Kernel Tuner importer builds it with the
    record-id text so each float is formatted once).

    The record is validated (``Record.validate``): raises ValueError for data that ``Record`` or
    a commit would reject (non-JSON config/meta, bad costs, unknown status, ``ok`` without costs).
    """
    meta = dict(meta or {})
    if not FAST_PATH:  # pragma: no cover - only when Record gains/loses fields
        rec = Record(target.value, workload.value, dict(config), costs=tuple(costs), status=status, error=error,
                     compile_s=compile_s, wall_s=wall_s, timestamp=timestamp, source=source, meta=meta,
                     record_id=record_id, session=session, target_name=target_name, host=host, origin=origin)
        rec.validate()
        return rec
    if not isinstance(config, Mapping):
        raise ValueError(f"record {record_id}: field 'config' must be a JSON object, got {type(config).__name__}")
    try:
        cfg = fast_normalise(config if type(config) is dict else dict(config), "config")  # a fresh copy
    except ValueError as e:
        raise ValueError(f"record {record_id}: field 'config' is not plain JSON data: {e}") from None
    try:
        c = tuple(map(float, costs))
    except (TypeError, ValueError):
        raise ValueError(f"record {record_id}: field 'costs' must be a list of numbers") from None
    ts = timestamp if timestamp is not None else _dt.datetime.now(_dt.timezone.utc)
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=_dt.timezone.utc)
    cj = _canon(cfg)
    ck = key_of_text(cj)
    pair = _PAIR_HASHES.get((target.key, workload.key)) or _pair_hashes(target.key, workload.key)
    lookup = pair[1].copy()
    lookup.update(ck.encode())
    r = object.__new__(Record)
    d = r.__dict__
    d.update(target=target.value, workload=workload.value, config=cfg, costs=c, status=status, error=error,
             compile_s=compile_s, wall_s=wall_s, timestamp=ts, source=source, session=session,
             meta=meta if meta_normalised else fast_normalise(meta, "meta"), record_id=record_id,
             target_name=target_name or target.name, target_key=target.key, workload_key=workload.key,
             config_key=ck, target_json=target.text, workload_json=workload.text, config_json=cj,
             lookup_key=int.from_bytes(lookup.digest(), "little", signed=True), entry_key=pair[0],
             host=this_host() if host is None else host, origin=origin)
    if meta_json is not None and meta_normalised and d["meta"]:
        d["meta_json"] = meta_json
    else:
        d["meta_json"] = _canon(d["meta"]) if d["meta"] else "{}"
    if r.size_bytes() > MAX_RECORD_BYTES:
        raise ImportCapError(f"record {record_id}: {record_too_big(r.size_bytes())}: over the import cap, so "
                             f"nothing is imported")
    r.validate()
    return r


def stable_record_id(fmt: str, target_key: str, original: Any, seen: Counter, *, text: str | None = None) -> str:
    """Deterministic record_id (32 lowercase hex) of an imported line/entry.

    ``original`` is the line's JSON value (or the entry and its cache key), or ``text`` its
    canonical JSON when already computed; ``seen`` counts
    identical originals already met in the same file, so a line repeated in a file stays two
    records while re-importing the file reproduces the same ids.
    """
    if text is None:
        text = _canon(fast_normalise(original))
    basis = key_of_text(text)
    n = seen[basis]
    seen[basis] += 1
    return key_of([fmt, target_key, basis, n])


def to_utc(ts: Any) -> _dt.datetime | None:
    """A UNIX time (seconds) or ISO 8601 text -> aware UTC datetime; None when absent/unusable."""
    if ts is None or isinstance(ts, bool):
        return None
    if isinstance(ts, (int, float)):
        if not math.isfinite(ts) or ts < 0 or ts > 253402300799:
            return None
        return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc)
    if isinstance(ts, str):
        try:
            d = _dt.datetime.fromisoformat(ts.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
        return d.replace(tzinfo=_dt.timezone.utc) if d.tzinfo is None else d.astimezone(_dt.timezone.utc)
    return None


def check_costs(costs: Iterable[Any]) -> list[float]:
    """Costs as floats; ValueError unless every cost is a finite number >= 0."""
    out = []
    for c in costs:
        if isinstance(c, bool) or not isinstance(c, (int, float)):
            raise ValueError(f"cost {c!r} is not a number")
        c = float(c)
        if not math.isfinite(c) or c < 0:
            raise ValueError(f"cost {c!r} is not a finite number >= 0")
        out.append(c)
    return out


def resolve_device_fields(name: str, kind: str | None = None) -> dict:
    """Vendor/arch/... of a device name from ``tunedb.index.hardware.catalog`` when that module exists; else {}.

    The catalog is owned by another module; any resolver it offers (``resolve_device``) is
    called with the device name.  An unknown device simply adds nothing.
    """
    try:
        catalog = importlib.import_module("tunedb.index.hardware.catalog")
    except ImportError:
        return {}
    fn: Callable | None = getattr(catalog, "resolve_device", None)
    if fn is None:
        return {}
    try:
        res = fn(name) if kind is None else _call_with_kind(fn, name, kind)
    except (KeyError, LookupError, ValueError):
        return {}
    if res is None:
        return {}
    if hasattr(res, "to_json_dict"):
        res = res.to_json_dict()
    return dict(res) if isinstance(res, Mapping) else {}


def merge_device_fields(target: dict, fields: Mapping[str, Any]) -> dict:
    """Add catalog fields to ``target`` without overwriting parsed ones.  The catalog's canonical
    ``device`` name is stored as ``device_name`` (``device`` is a TVM target option, -device=)."""
    for k, v in fields.items():
        target.setdefault("device_name" if k == "device" else k, v)
    return target


def kind_hint(target: Mapping[str, Any]) -> str | None:
    """``gpu``/``cpu`` of a TVM-style target from its keys or kind (the catalog's kind filter)."""
    keys = target.get("keys") if isinstance(target.get("keys"), list) else []
    if "gpu" in keys or target.get("kind") in ("cuda", "rocm", "opencl", "vulkan", "metal", "nvptx", "gpu"):
        return "gpu"
    if "cpu" in keys or target.get("kind") in ("llvm", "c", "cpu"):
        return "cpu"
    return None


def _call_with_kind(fn: Callable, name: str, kind: str) -> Any:
    try:
        return fn(name, kind=kind)
    except TypeError:
        return fn(name)


__all__ = ["FORMATS", "Format", "ImportFormatError", "ImportIssue", "ImportReport", "ExportReport", "ExportFormatError", "collect",
           "get_format", "make_record", "merge_device_fields", "stable_record_id", "Prepared"]
