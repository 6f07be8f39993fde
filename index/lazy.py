"""Lazy package attributes (PEP 562): a package's public names load their module on first use,
so importing the package itself loads nothing heavy."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, table: Mapping[str, tuple[str, str]], namespace: dict[str, Any]
                 ) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``table`` maps a public name to (module,
    attribute); the first access imports it and caches it in ``namespace`` (the package's
    globals).  Unknown names raise AttributeError."""

    def __getattr__(name: str) -> Any:
        try:
            module, attr = table[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), attr)
        namespace[name] = value
        return value

    return __getattr__
