"""Where this machine keeps tunedb's rebuildable caches (snapshot blocks, the snapshot versions
read, a PostgreSQL DB's derived data): ``$TUNEDB_CACHE_DIR``, default ``~/.cache/tunedb``."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$TUNEDB_CACHE_DIR`` when set, else ``~/.cache/tunedb`` (not created here)."""
    base = os.environ.get("TUNEDB_CACHE_DIR")
    return Path(base) if base else Path.home() / ".cache" / "tunedb"


__all__ = ["cache_root"]
