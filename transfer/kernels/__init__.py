"""Kernel families: tunable workloads with a schedule space, a NumPy reference and FLOP/byte counts.

A *family* turns a workload dict (``{"family": "matmul", "M": 512, ...}``) and a config dict
(one point of ``family.space(workload)``) into something runnable:

* C families (``kind == "c"``) render C source from this project's own template, pasting in
  only integers that ``Space.validate`` accepted (see ``templating.render_template``);
  the runner loads the built shared object and calls its ``kernel`` symbol through ctypes.
* NumPy families (``kind == "numpy"``) run a Python/NumPy function whose speed depends on the
  config (no build step).

Default configs are derived from the target (``default_config(workload, target)``: vector width,
vector registers and cache sizes of the target dict through
``tunedb.transfer.kernels.target_properties``; no target means a portable x86-64-baseline
default), never from the CPU this process runs on.

Registry: ``families()`` lists the family names, ``get_family(name)`` returns the family object
(``ValueError`` for an unknown name).  Besides the built-in families, the environment variable
``TUNEDB_FAMILIES`` may name extra ones as comma-separated ``module:Class`` entries (the class is
instantiated once; its ``name`` is its key).  The variable is read from the environment only,
never from a record, and the isolated worker inherits it, so a family registered this way runs
like a built-in one (the test suite registers its fault-injecting family this way).
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Mapping
from typing import Any

from tunedb.transfer.kernels.base import MAX_ELEMENTS, KernelFamily

FAMILIES_ENV = "TUNEDB_FAMILIES"

def _builtin() -> list[KernelFamily]:
    from tunedb.transfer.kernels.conv2d import Conv2dFamily
    from tunedb.transfer.kernels.matmul import MatmulFamily
    from tunedb.transfer.kernels.npmatmul import NumpyMatmulFamily
    from tunedb.transfer.kernels.softmax import SoftmaxFamily

    return [MatmulFamily(), Conv2dFamily(), SoftmaxFamily(), NumpyMatmulFamily()]


def _plugins(spec: str) -> list[KernelFamily]:
    out = []
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        mod, sep, cls = entry.partition(":")
        if not sep or not mod or not cls:
            raise ValueError(f"{FAMILIES_ENV}: entry {entry!r} is not module:Class")
        fam = getattr(importlib.import_module(mod), cls)()
        if not isinstance(fam, KernelFamily) or not fam.name:
            raise ValueError(f"{FAMILIES_ENV}: {entry} is not a named KernelFamily")
        out.append(fam)
    return out


_CACHE: dict[str, dict[str, KernelFamily]] = {}


def _registry() -> dict[str, KernelFamily]:
    spec = os.environ.get(FAMILIES_ENV, "")
    if spec not in _CACHE:
        _CACHE[spec] = {f.name: f for f in _builtin() + _plugins(spec)}
    return _CACHE[spec]


def families() -> list[str]:
    """Names of the registered kernel families (built-in and ``TUNEDB_FAMILIES`` plug-ins)."""
    return sorted(_registry())


def get_family(name: Any) -> KernelFamily:
    """The family called ``name``; ValueError when there is none."""
    fams = _registry()
    if isinstance(name, str) and name in fams:
        return fams[name]
    raise ValueError(f"unknown kernel family {name!r}; known: {', '.join(sorted(fams))}")


_TAKES_TARGET: dict[type, bool] = {}


def _takes_target(fam: KernelFamily) -> bool:
    """Whether ``fam.default_config`` accepts a target after the workload (plug-ins may predate it)."""
    cls = type(fam)
    if cls not in _TAKES_TARGET:
        try:
            params = list(inspect.signature(fam.default_config).parameters.values())
        except (TypeError, ValueError):
            params = []
        _TAKES_TARGET[cls] = any(p.kind is p.VAR_POSITIONAL for p in params) or len(
            [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) >= 2
    return _TAKES_TARGET[cls]


def family_default_config(fam: KernelFamily, workload: Any, target: Mapping[str, Any] | None = None) -> dict:
    """``fam.default_config(workload, target)`` as a new dict; a family whose ``default_config``
    takes only the workload (an older plug-in) gets ``fam.default_config(workload)``."""
    if target is not None and _takes_target(fam):
        return dict(fam.default_config(workload, target))
    return dict(fam.default_config(workload))


def default_config(workload: Any, target: Mapping[str, Any] | None = None) -> dict:
    """Default config of ``workload``'s family for ``target`` (None: portable); ValueError for an
    unknown family or a bad workload."""
    return family_default_config(family_of(workload), workload, target)


def family_of(workload: Any) -> KernelFamily:
    """The family named by ``workload['family']`` (ValueError when missing or unknown)."""
    if not isinstance(workload, Mapping) or not isinstance(workload.get("family"), str):
        raise ValueError("workload must be an object with a string 'family'")
    return get_family(workload["family"])


__all__ = ["KernelFamily", "families", "get_family", "family_of", "default_config", "family_default_config",
           "FAMILIES_ENV", "MAX_ELEMENTS"]
