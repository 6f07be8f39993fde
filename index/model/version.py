"""Version numbers written into every record."""

from __future__ import annotations

TUNEDB_VERSION = "0.2.0"
SCHEMA_VERSION = 2
