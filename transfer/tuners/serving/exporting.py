"""``tunedb export --format vllm-moe OUT [--target DEVICE] [--shape E=..,N=..[,dtype=..][,block_shape=[n,k]]]``.

Without ``--shape``: every fused-MoE table of the store (of ``DEVICE`` with ``--target``), written
below the folder OUT as vLLM loads them through ``VLLM_TUNED_CONFIG_FOLDER`` (see ``tables``).

With ``--shape`` (needs ``--target``): the one table of that shape for ``DEVICE`` -- a device
name as torch reports it (``NVIDIA H100 80GB HBM3``; ``_`` for spaces is accepted), stored or
not, or a stored target's key -- each M from the device's own record or predicted from the
nearest devices and shapes (``predict``), with its sidecar ``<table>.tunedb.json``.

Bad input (a malformed ``--shape``, ``--shape`` without ``--target``, a device with no tables,
nothing near enough to predict from): one line, exit 2, nothing written.
"""

from __future__ import annotations

from pathlib import Path

from tunedb.transfer.interop.tabular import records_from_table
from tunedb.transfer.tuners.serving.names import parse_shape
from tunedb.transfer.tuners.serving.predict import (
    SIDECAR_SUFFIX,
    fused_moe_records,
    predicted_table,
    sidecar_text,
)
from tunedb.transfer.tuners.serving.tables import export, write_tables


def export_tables(args, db) -> tuple[dict, str]:
    """Run ``tunedb export`` for ``--format vllm-moe`` (and refuse ``--shape`` for any other
    format); ``db`` is the opened store, ``args`` the command's arguments (``format``, ``out``,
    ``target``, ``shape``).  Returns the ``--json`` payload and the line for people; ValueError
    (one line, nothing written) for bad input."""
    shape_text = getattr(args, "shape", None)
    if args.format != "vllm-moe":
        raise ValueError(f"--shape applies to --format vllm-moe, not {args.format}")
    out = Path(args.out)
    if shape_text is not None:
        return _export_shape(args, db, shape_text, out)
    records = fused_moe_records(records_from_table(db.records()))
    if args.target is not None:
        device = _device(db, records, args.target)
        records = [r for r in records if r.target.get("name") == device]
        if not records:
            raise ValueError(f"no fused-MoE tables for device {args.target!r}; name a shape with --shape "
                            "to predict one")
    try:
        rep = export(records, out)
    except OSError as e:
        raise ValueError(f"cannot write {out}: {e.strerror or e}") from None
    return (dict(rep.to_json(), format=args.format),
            f"exported {rep.exported} entr{'y' if rep.exported == 1 else 'ies'} in {len(rep.files)} table(s) to {out}")


def _export_shape(args, db, shape_text: str, out: Path) -> tuple[dict, str]:
    shape = parse_shape(shape_text)
    if args.target is None:
        raise ValueError("--shape needs --target DEVICE (the torch device name the table is for)")
    records = fused_moe_records(records_from_table(db.records()))
    device = _device(db, records, args.target, new_ok=True)
    table, side = predicted_table(records, device, shape)
    try:
        files = write_tables([table], out, {table.path + SIDECAR_SUFFIX: sidecar_text(side)})
    except OSError as e:
        raise ValueError(f"cannot write {out}: {e.strerror or e}") from None
    payload = {"format": args.format, "files": [str(f) for f in files], "table": table.path, "device": device,
               "entries_own": side["entries_own"], "entries_predicted": side["entries_predicted"]}
    return payload, (f"wrote {out / table.path}: {side['entries_own']} own entr"
                        f"{'y' if side['entries_own'] == 1 else 'ies'}, {side['entries_predicted']} predicted "
                     f"(provenance in {table.path}{SIDECAR_SUFFIX})")


def _device(db, records: list, text: str, *, new_ok: bool = False) -> str:
    """The torch device name ``text`` names: a stored fused-MoE device (spaces or ``_``), a
    stored target's key or name, or (``new_ok``) a device without records."""
    names = {r.target["name"] for r in records}
    for cand in (text, text.replace("_", " ")):
        if cand in names:
            return cand
    t = db.find_target(text)
    if isinstance(t, dict) and isinstance(t.get("name"), str):
        return t["name"]
    if new_ok and text.strip():
        return text.strip().replace("_", " ")
    raise ValueError(f"unknown device {text!r}: no fused-MoE tables for it in the database")


__all__ = ["export_tables"]
