"""File names of vLLM's and SGLang's fused-MoE config tables, and the tunedb target and workload
of one table entry.

A table's name is ``E=<experts>,N=<size>,device_name=<device, spaces as _>`` followed by, in this
order and each optional, ``,dtype=<quantisation>``, ``,block_shape=[<n>,<k>]`` (SGLang writes
``[<n>, <k>]``) and ``,per_channel_quant=True`` (SGLang), then ``.json``.  :func:`parse_name`
reads exactly that and nothing else: a name it does not understand is refused (ValueError, one
line), never guessed.  :func:`table_name` builds the name vLLM looks up for a shape
(``get_config_file_name``: block shape without a space).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

#: the workload family of every fused-MoE table entry
FAMILY = "fused_moe"
#: the quantisation names vLLM and SGLang use in table names (``dtype=``)
KNOWN_DTYPES = ("fp8_w8a8", "int8_w8a8", "int8_w8a16", "int4_w4a16", "float32", "fp4_w4a16", "mxfp4_w4a16",
                "nvfp4_w4a4", "mxfp4_w4a4", "mxfp6_w6a16", "bf16", "float16")

_NAME_RE = re.compile(
    r"^E=(?P<E>[1-9][0-9]{0,6}),N=(?P<N>[1-9][0-9]{0,7}),device_name=(?P<dev>[^,/\\]+?)"
    r"(?:,dtype=(?P<dtype>[A-Za-z0-9_]+))?"
    r"(?:,block_shape=\[(?P<bn>[1-9][0-9]{0,5}),(?P<sp> ?)(?P<bk>[1-9][0-9]{0,5})\])?"
    r"(?P<pcq>,per_channel_quant=True)?\.json$")
_DEVICE_RE = re.compile(r"^[A-Za-z0-9()_.\-+]{1,120}$")
_VENDORS = (("nvidia", "nvidia"), ("amd", "amd"), ("intel", "intel"))


@dataclass(frozen=True)
class Shape:
    """The shape a table is for: ``E`` experts, ``N`` intermediate size per shard, the
    quantisation ``dtype`` ("" for none) and the ``block_shape`` (n, k) of block-wise
    quantisation (None for none); ``per_channel_quant`` is SGLang's extra name part."""

    E: int
    N: int
    dtype: str = ""
    block_shape: tuple[int, int] | None = None
    per_channel_quant: bool = False

    def workload(self, m: int) -> dict:
        """The tunedb workload of this shape at batch size ``m`` (tokens)."""
        w: dict[str, Any] = {"family": FAMILY, "kernel": kernel_name(self.dtype), "E": self.E, "N": self.N, "M": m}
        if self.dtype:
            w["dtype"] = self.dtype
        if self.block_shape is not None:
            w["block_shape"] = list(self.block_shape)
        if self.per_channel_quant:
            w["per_channel_quant"] = True
        return w

    def text(self) -> str:
        """``E=8,N=14336[,dtype=..][,block_shape=[n,k]]``: the ``--shape`` spelling."""
        s = f"E={self.E},N={self.N}"
        if self.dtype:
            s += f",dtype={self.dtype}"
        if self.block_shape is not None:
            s += f",block_shape=[{self.block_shape[0]},{self.block_shape[1]}]"
        if self.per_channel_quant:
            s += ",per_channel_quant=True"
        return s


@dataclass(frozen=True)
class TableName:
    """A parsed table file name: the torch device name (spaces restored) and the shape."""

    device: str
    shape: Shape


def kernel_name(dtype: str) -> str:
    """The ``kernel`` of a workload: ``fused_moe`` or ``fused_moe_<dtype>`` (a quantised table is
    tuned for a different kernel variant, so entries of another dtype are further away)."""
    return f"{FAMILY}_{dtype}" if dtype else FAMILY


def parse_name(name: str) -> TableName:
    """The device and shape of a table file name; ValueError (one line) for a name that is not
    exactly a fused-MoE table name (unknown dtype, other suffix, another part)."""
    m = _NAME_RE.match(name)
    if m is None:
        raise ValueError("not a fused-MoE table name (E=..,N=..,device_name=..[,dtype=..][,block_shape=[n,k]].json)")
    dev = m.group("dev")
    if not _DEVICE_RE.match(dev):
        raise ValueError(f"device name {dev!r} has characters a torch device name does not")
    dtype = m.group("dtype") or ""
    if dtype and dtype not in KNOWN_DTYPES:
        raise ValueError(f"unknown dtype {dtype!r} (known: {', '.join(KNOWN_DTYPES)})")
    block = (int(m.group("bn")), int(m.group("bk"))) if m.group("bn") else None
    shape = Shape(int(m.group("E")), int(m.group("N")), dtype, block, bool(m.group("pcq")))
    return TableName(dev.replace("_", " "), shape)


def table_name(device: str, shape: Shape) -> str:
    """The file name vLLM looks up for ``shape`` on ``device`` (its torch name, with spaces)."""
    return f"E={shape.E},N={shape.N},device_name={device.replace(' ', '_')}" + shape.text()[
        len(f"E={shape.E},N={shape.N}"):] + ".json"


def parse_shape(text: str) -> Shape:
    """``E=8,N=14336[,dtype=fp8_w8a8][,block_shape=[128,128]]`` -> Shape; ValueError (one line)
    for anything else."""
    t = text.strip()
    try:
        return parse_name(_as_name(t)).shape
    except ValueError as e:
        raise ValueError(f"bad --shape {text!r}: {e}; expected E=<n>,N=<n>[,dtype=<d>][,block_shape=[<n>,<k>]]") \
            from None


def _as_name(shape_text: str) -> str:
    m = re.match(r"^(E=[^,]*,N=[^,]*)(.*)$", shape_text)
    if m is None:
        raise ValueError("E and N come first")
    return f"{m.group(1)},device_name=x{m.group(2)}.json"


def gpu_target(device: str) -> dict:
    """The tunedb target of a torch device name: ``{"kind": "gpu", "name": device}`` plus
    ``vendor`` when the name's first word says it (NVIDIA, AMD, Intel)."""
    t: dict[str, Any] = {"kind": "gpu", "name": device}
    first = device.split(" ", 1)[0].lower()
    for prefix, vendor in _VENDORS:
        if first == prefix or first.startswith(prefix + "("):
            t["vendor"] = vendor
    return t


def shape_of_workload(w: dict) -> tuple[Shape, int] | None:
    """(shape, M) of a fused-MoE workload; None for any other workload."""
    if w.get("family") != FAMILY:
        return None
    try:
        e, n, m = w["E"], w["N"], w["M"]
        if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in (e, n, m)):
            return None
        bs = w.get("block_shape")
        block = (int(bs[0]), int(bs[1])) if isinstance(bs, list) and len(bs) == 2 else None
        return Shape(e, n, str(w.get("dtype") or ""), block, bool(w.get("per_channel_quant"))), m
    except (KeyError, TypeError, ValueError):
        return None


__all__ = ["FAMILY", "KNOWN_DTYPES", "Shape", "TableName", "gpu_target", "kernel_name", "parse_name", "parse_shape",
           "shape_of_workload", "table_name"]
