"""Checks of a parsed command line made before any command runs: nothing is opened for
writing, created, looked up or measured until they pass.

:func:`check_args` raises :class:`~tunedb.transfer.cli.util.UserError` (one line, exit 2) for

* a ``--workload`` that does not parse, names an unknown family, a key its family does not
  have or a value of the wrong kind (:func:`tunedb.transfer.cli.workload_spec.check_workload`;
  families and keys of imported workloads are read from the database, without creating it);
* a ``--config`` that is not a JSON object, or - for a workload of one of tunedb's kernel
  families - not a point of its schedule space (unknown or missing knob, a value it does not
  allow);
* an input file option (``--replay``, ``--workloads``, ``--runs``, ``--sign``,
  ``--publisher-key``, import's paths) naming nothing readable;
* an output (``export``'s and ``publish``'s OUT, ``report --out``, ``keygen``'s files) whose
  parent directory does not exist: it is never created.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tunedb.transfer.cli.util import UserError, checked_locations, parse_config, parse_workload

#: options holding paths that must be readable files (or, for import, files or directories)
INPUT_OPTIONS = {"replay": "replay file", "workloads": "workloads file", "runs": "runs file", "sign": "key file",
                 "publisher_key": "publisher key file", "paths": "input"}
#: (command, dest) of outputs whose parent directory must exist
OUTPUT_OPTIONS = {("export", "out"): "OUT", ("publish", "out"): "OUT", ("report", "out"): "--out",
                  ("keygen", "private"): "KEYFILE", ("keygen", "public"): "--public"}


def _snapshot_workloads(db: Any, args: Any, workload: dict | None) -> list[str]:
    """A published snapshot's workloads for the check, fetching as little as it can: ``workload``
    alone when the command's ``--target`` (found by name or key in the manifest) has records of
    it -- one part, which the command reads next from the cache -- else the workloads of its
    entries files (bounded index data); never every part."""
    spec = getattr(args, "target", None)
    if workload is not None and isinstance(spec, str):
        try:
            target = db.find_target(spec)
            got = None if target is None else db.records(target, workload, include_stale=False, columns=["workload"])
        except ValueError:
            got = None
        if got is not None and got.num_rows:
            return got.column("workload").to_pylist()[:1]
    return db.entries().column("workload").to_pylist()


def stored_workloads(args: Any, workload: dict | None = None) -> list[dict]:
    """The workloads of every entry of the database layers ``args`` names, read without creating
    anything; [] when a layer cannot be opened (the command reports that itself).  A published
    snapshot answers without fetching its parts (:func:`_snapshot_workloads`; ``workload``: the
    one being checked)."""
    from tunedb.index.opener import SNAPSHOT, open_store, parse_location

    out: list[dict] = []
    try:
        locations = checked_locations(args)
    except UserError:
        return out
    for loc in locations:
        try:
            here = parse_location(loc)
            if here.is_local_directory and not here.exists():
                continue
            db = open_store(loc, create=False, read_only=True)
        except (OSError, ValueError, TypeError):
            continue
        try:
            if here.kind == SNAPSHOT:
                texts = _snapshot_workloads(db, args, workload)
            else:  # a projection of the records: entries() would write the store's derived cache
                texts = db.records(include_stale=False, columns=["workload"]).column("workload").to_pylist()
            out += [json.loads(w) for w in dict.fromkeys(texts)]
        except (OSError, ValueError):
            pass
        finally:
            close = getattr(db, "close", None)
            if close is not None:
                try:
                    close()
                except (OSError, ValueError):
                    pass
    return out


def _check_workload(args: Any, spec: str) -> dict:
    from tunedb.transfer.cli.workload_spec import check_workload

    w = parse_workload(spec)
    cache: list[list[dict]] = []

    def stored() -> list[dict]:
        if not cache:
            cache.append(stored_workloads(args, w))
        return cache[0]

    try:
        check_workload(w, stored)
    except ValueError as e:
        raise UserError(f"--workload {spec!r}: {str(e).splitlines()[0]}") from None
    return w


def check_workloads(args: Any, workloads: list[dict], where: str) -> None:
    """:func:`~tunedb.transfer.cli.workload_spec.check_workload` of each of ``workloads`` (read
    from ``where``, e.g. a ``--workloads`` file); the first bad one is a UserError naming it."""
    from tunedb.transfer.cli.workload_spec import check_workload, workload_spec

    cache: list[list[dict]] = []

    def stored() -> list[dict]:
        if not cache:
            cache.append(stored_workloads(args))
        return cache[0]

    for i, w in enumerate(workloads, 1):
        try:
            check_workload(w, stored)
        except ValueError as e:
            raise UserError(f"{where}: workload {i} ({workload_spec(w)[:80]}): {str(e).splitlines()[0]}") from None


def _check_configs(w: dict | None, specs: list[str]) -> None:
    from tunedb.transfer.kernels import families, get_family

    configs = [parse_config(s) for s in specs]
    if w is None or w.get("family") not in families():
        return
    fam = get_family(w["family"])
    try:
        w = fam.validate_workload(w)
    except ValueError:
        return  # an imported workload that shares a kernel family's name: not its space
    space = fam.space(w)
    for spec, c in zip(specs, configs):
        try:
            space.validate(c)
        except ValueError as e:
            raise UserError(f"--config {spec!r} is not a config of {w['family']}: {str(e).splitlines()[0]}") from None


def _check_inputs(args: Any) -> None:
    for dest, label in INPUT_OPTIONS.items():
        value = getattr(args, dest, None)
        if value is None or (dest == "workloads" and getattr(args, "command", "") not in ("warm-start", "migrate")):
            continue
        for path in value if isinstance(value, list) else [value]:
            if not isinstance(path, str) or path.startswith(("http://", "https://", "postgresql://")):
                continue
            if not os.path.exists(path):
                raise UserError(f"{label} {path} does not exist")
            if os.path.isdir(path) and dest != "paths":
                raise UserError(f"{label} {path} is a directory, not a file")
            if not os.access(path, os.R_OK):
                raise UserError(f"{label} {path}: permission denied")


def _check_outputs(args: Any) -> None:
    command = getattr(args, "command", "")
    for (cmd, dest), label in OUTPUT_OPTIONS.items():
        value = getattr(args, dest, None)
        if cmd != command or not isinstance(value, str) or not value:
            continue
        parent = os.path.dirname(os.path.abspath(value))
        if os.path.exists(parent) and not os.path.isdir(parent):
            raise UserError(f"cannot write {label} {value}: {parent} is not a directory")
        if not os.path.isdir(parent):
            raise UserError(f"cannot write {label} {value}: directory {parent} does not exist (it is not created)")


def check_args(args: Any) -> None:
    """Every check above, in order: workload, configs, input files, outputs."""
    spec = getattr(args, "workload", None)
    w = _check_workload(args, spec) if isinstance(spec, str) else None
    cfg = getattr(args, "config", None)
    if isinstance(cfg, str) or (isinstance(cfg, list) and all(isinstance(c, str) for c in cfg)):
        _check_configs(w, [cfg] if isinstance(cfg, str) else cfg)
    _check_inputs(args)
    _check_outputs(args)
