"""What a Triton autotuning decision is called in tunedb, computed the same way by the decorator
(``autotuner.py``) and by the cache-file importer (``cachefile.py``), so an imported decision is
an exact hit for the decorator on the same target.

* :func:`workload_of`: the workload of one kernel and one tuning key, ``{"family": kernel,
  "kernel": kernel, "key": [...]}``.  ``key`` is Triton's own tuning key, in Triton's order: the
  values of the ``key=`` arguments the call passed, then the dtype (``str(tensor.dtype)``, e.g.
  ``"torch.float16"``) of every argument that has one.  ``kernel`` is the function's
  ``__name__`` cut to 150 characters, as Triton names its cache file.
* :func:`config_dict`: a ``triton.Config`` (or the JSON object Triton's cache file holds for
  one) as the flat dict of ``Config.all_kwargs()``: the meta-parameters, then ``num_warps``,
  ``num_ctas``, ``num_stages`` and, when set, ``maxnreg`` and ``ir_override``.

Nothing here imports triton."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: Triton's ``Config`` fields beside ``kwargs``, with ``Config.__init__``'s defaults, in the order
#: ``Config.all_kwargs`` lists them; None means "left out when None"
CONFIG_FIELDS: dict[str, Any] = {"num_warps": 4, "num_ctas": 1, "num_stages": 3, "maxnreg": None,
                                 "ir_override": None}
#: the fields of a config in Triton's cache file (``Config.__dict__``)
CACHED_CONFIG_FIELDS = frozenset({"kwargs", "pre_hook", *CONFIG_FIELDS})
#: the length Triton cuts a kernel's name to in its cache file's name
KERNEL_NAME_CHARS = 150


def key_value(value: Any) -> Any:
    """One entry of a tuning key as JSON: bool, int, finite float and str stay; anything else
    (a ``torch.dtype`` passed as an argument, ``None``, ...) becomes ``str(value)``, the text
    Triton's own key would print."""
    if isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    return str(value)


def workload_of(kernel: str, tuning_key: Sequence[Any]) -> dict:
    """The workload of ``kernel`` (a name; cut to 150 characters) at ``tuning_key`` (Triton's
    key tuple).  ValueError for an empty kernel name."""
    if not isinstance(kernel, str) or not kernel:
        raise ValueError("a Triton kernel needs a non-empty name")
    name = kernel[:KERNEL_NAME_CHARS]
    return {"family": name, "kernel": name, "key": [key_value(v) for v in tuning_key]}


def flat_config(kwargs: Mapping[str, Any], fields: Mapping[str, Any]) -> dict:
    """``Config.all_kwargs()`` of a config given as its meta-parameters and its other fields
    (missing fields take ``Config``'s defaults)."""
    out = dict(kwargs)
    for name, default in CONFIG_FIELDS.items():
        value = fields.get(name, default)
        if value is not None:
            out[name] = value
    return out


def config_dict(config: Any) -> dict:
    """The flat JSON dict of a ``triton.Config`` (its ``all_kwargs()``) or of the JSON object
    Triton's cache file holds for one (``Config.__dict__``).  ValueError (one line) for an
    object of the cache file with a field ``Config`` does not have or ``kwargs`` not an object."""
    if hasattr(config, "all_kwargs"):
        return dict(config.all_kwargs())
    if not isinstance(config, Mapping):
        raise ValueError(f"a Triton config must be a JSON object, got {type(config).__name__}")
    unknown = sorted(set(config) - CACHED_CONFIG_FIELDS)
    if unknown:
        raise ValueError(f"unknown Triton config field(s) {', '.join(map(repr, unknown))}")
    kwargs = config.get("kwargs", {})
    if not isinstance(kwargs, Mapping):
        raise ValueError("a Triton config's 'kwargs' must be a JSON object")
    clash = sorted(set(kwargs) & set(CONFIG_FIELDS))
    if clash:
        raise ValueError(f"a Triton config's kwargs name {', '.join(clash)}, a field of the config itself")
    return flat_config(kwargs, config)


__all__ = ["CACHED_CONFIG_FIELDS", "CONFIG_FIELDS", "KERNEL_NAME_CHARS", "config_dict", "flat_config", "key_value",
           "workload_of"]
