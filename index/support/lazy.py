"""Lazy package attributes (PEP 562): a package's public names load their module on first use,
so importing the package itself loads nothing heavy."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, table: Mapping[str, tuple[str, str]], namespace: dict[str, Any],
                 deprecated: Mapping[str, str] | None = None) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``table`` maps a public name to (module,
    attribute); the first access imports it and caches it in ``namespace`` (the package's
    globals).  Unknown names raise AttributeError.  ``deprecated`` maps a former name to the name
    that replaces it: such a name still resolves, with a DeprecationWarning on every access (it
    is never cached)."""
    old_names = dict(deprecated or {})

    def __getattr__(name: str) -> Any:
        if name in old_names:
            warnings.warn(f"{package}.{name} is deprecated; use {package}.{old_names[name]}", DeprecationWarning,
                          stacklevel=2)
            return __getattr__(old_names[name])
        try:
            module, attr = table[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), attr)
        namespace[name] = value
        return value

    return __getattr__
