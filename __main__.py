"""``python -m tunedb`` is the ``tunedb`` command."""

from __future__ import annotations

from tunedb.transfer.cli.main import console_main

console_main()
