"""tunedb for Kernel Tuner, public as ``tunedb.kernel_tuner``: ``WarmStart`` and ``Recorder``
(Kernel Tuner strategy objects backed by a tunedb database, in ``strategy``) and the cache-file
format (``cachefile``: ``tunedb import/export --format kernel-tuner``, also read by the replay
backend ``tunedb.transfer.measure.replay``).

Every name of ``strategy`` is a name of this package, loaded on first use: importing the package
(or ``cachefile``) imports no Kernel Tuner; using a strategy name without Kernel Tuner >= 1.5
raises ImportError naming ``pip install 'tunedb[kernel-tuner]'``."""

from __future__ import annotations

import importlib

STRATEGY = "tunedb.transfer.tuners.kernel_tuner.strategy"


def __getattr__(name: str) -> object:
    """``strategy``'s public names (``WarmStart``, ``Recorder``, ``warm_start_options``, ...),
    and ``__all__`` (theirs); other dunders are AttributeError, without importing it."""
    if name.startswith("__") and name != "__all__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(STRATEGY)
    if name == "__all__":
        return [n for n in vars(module) if not n.startswith("_")]
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    """This package's own names and ``strategy``'s public ones (imports ``strategy``)."""
    module = importlib.import_module(STRATEGY)
    return sorted(set(globals()) | {n for n in vars(module) if not n.startswith("_")})
